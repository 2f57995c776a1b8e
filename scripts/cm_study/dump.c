/* scripts/cm_study/dump.c -- every record of a store as feature rows, one line a row:
** record id, task|fingerprint, fastest cost, row index, rows, code size, the features.
** With a second argument, a first line of feature names.  For run.sh; not the product. */
#include "cost_model/cost_model.h"
#include "records/records.h"
#include "schedule_space/schedule_space.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv)
{
    rec_store *st; rec_iter *it; const rec_record *r; char msg[512];
    ss_dag *dag = NULL; char *dag_text = NULL; cm_feats f; cm_feats_init(&f);
    if (argc < 2) { fprintf(stderr, "usage: dump STORE [names]\n"); return 2; }
    if (rec_store_open(argv[1], REC_OPEN_READONLY, &st, msg, sizeof msg) != AT_OK) { fprintf(stderr, "dump: %s: %s\n", argv[1], msg); return 1; }
    if (argc > 2) { printf("names"); for (int k = 0; k < CM_N_FEATS; k++) printf(" %s", cm_feature_name(k)); printf("\n"); }
    rec_iter_open(st, NULL, REC_ORDER_STABLE, &it);
    while (rec_iter_next(it, &r) == AT_OK && r) {
        ss_state *s = NULL; double cost = 1e10;
        if (!dag_text || strcmp(dag_text, r->dag)) { ss_dag_unref(dag); dag = NULL; free(dag_text); dag_text = strdup(r->dag);
            if (ss_dag_parse(r->dag, strlen(r->dag), &dag, msg, sizeof msg) != AT_OK) dag = NULL; }
        if (!dag || ss_state_from_json(dag, r->state, strlen(r->state), &s, msg, sizeof msg) != AT_OK) continue;
        if (cm_features_of_state(s, &f, msg, sizeof msg) != AT_OK) { ss_state_free(s); continue; }
        ss_state_free(s);
        if (r->status == 0) for (int c = 0; c < r->n_costs; c++) if (r->costs[c] > 0 && r->costs[c] < cost) cost = r->costs[c];
        for (int i = 0; i < f.n_rows; i++) {
            printf("%lld %s|%s %.9g %d %d %lld", (long long)r->id, r->workload_key, r->fingerprint, cost, i, f.n_rows, (long long)f.code_size);
            for (int k = 0; k < CM_N_FEATS; k++) printf(" %.6g", f.rows[i * CM_N_FEATS + k]);
            printf("\n");
        }
    }
    rec_iter_close(it); rec_store_close(st); cm_feats_fini(&f);
    return 0;
}
