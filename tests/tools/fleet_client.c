/* tests/tools/fleet_client.c -- a tuner-shaped client for fleet tests and benchmarks:
** builds N distinct random schedules of library operators for a target, submits them
** through tn_fleet (to a tracker, or embedded), commits every result to a records store.
**
**   fleet_client [--tracker ADDR --fleet-key FILE | --embedded] --key DEVICE_KEY
**                --db FILE --target 'llvm -mcpu=native' --ops SPEC[;SPEC...] --n N
**                [--seed S] [--name NAME] [--repeat R] [--timeout-ms T] [--wait-timeout-s W]
**                [--priority P] [--no-seccomp] [--min-repeat-ms M] [--start-file F]
**                [--also-key K2 --also-target T2 --also-n N2 [--also-ops SPECS]]
**
** With --also-*, the same process is a tuner of two device keys at once (one tn_fleet each,
** polled in turn), as a tuner measuring one model on two kinds of devices would be.
** Prints 'client built N' once the candidates are built and submitted, progress lines, and
** 'client done submitted=N results=N ok=N failed=N' at the end.  Exit 0 when every job has
** a result, 1 otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "records/records.h"
#include "tests/support/sched_gen.h"
#include "tuner/tuner.h"

typedef struct counts {
    int results, ok, failed;
    int by_status[16];
} counts;

static void on_result(void *ctx, const tn_fleet_job *job, const at_wire_result *r)
{
    counts *c = ctx;
    (void)job;
    c->results++;
    if (r->status == AT_MEASURE_NO_ERROR)
        c->ok++;
    else {
        c->failed++;
        if (c->failed <= 5)
            fprintf(stderr, "fleet_client: job %s: %s: %s\n", r->id, at_measure_name(r->status),
                    r->error);
    }
    if (r->status >= 0 && r->status < 16) c->by_status[r->status]++;
}

static int die(const char *msg)
{
    fprintf(stderr, "fleet_client: %s\n", msg);
    return 1;
}

/* One device key's share of the work. */
typedef struct plan {
    const char *key, *target_text, *ops;
    int n;
    kn_target target;
    tn_fleet *f;
    tn_fleet_job *jobs;
    char **states, **ids;
    at_wire_arg (*args)[64];
    kn_artifact **arts;
    int n_jobs;
} plan;

static double min_repeat_ms;
static const char *start_file; /* wait for it to exist before submitting */

static int build_plan(plan *p, int index, rec_store *st, const char *uuid, int64_t run_id,
                      uint64_t seed, int repeat, int timeout_ms)
{
    char spec_buf[1024], err[1024];
    char *save = NULL, *spec;
    int n_ops = 0, op_index = 0;
    at_rng rng;

    p->jobs = calloc((size_t)p->n + 1, sizeof *p->jobs);
    p->states = calloc((size_t)p->n + 1, sizeof *p->states);
    p->ids = calloc((size_t)p->n + 1, sizeof *p->ids);
    p->args = calloc((size_t)p->n + 1, sizeof *p->args);
    p->arts = calloc((size_t)p->n + 1, sizeof *p->arts);
    if (!p->jobs || !p->states || !p->ids || !p->args || !p->arts) return die("out of memory");
    at_rng_seed(&rng, seed * 1000 + (uint64_t)index);
    snprintf(spec_buf, sizeof spec_buf, "%s", p->ops);
    for (char *sp = spec_buf; sp && *sp; n_ops++)
        sp = strchr(sp, ';') ? strchr(sp, ';') + 1 : NULL;
    for (spec = strtok_r(spec_buf, ";", &save); spec;
         spec = strtok_r(NULL, ";", &save), op_index++) {
        ss_dag *dag = NULL;
        ss_state *naive = NULL;
        kn_ir *ir = NULL;
        kn_artifact *ref = NULL;
        uint8_t ref_id[AT_WIRE_REFID_BYTES];
        int64_t task_id = 0;
        at_buf dag_text;
        int quota = p->n / n_ops + (op_index < p->n % n_ops ? 1 : 0), tries = 0, n_seen = 0;
        char **seen = calloc((size_t)quota + 1, sizeof *seen);

        if (kn_op_build(spec, &dag, err, sizeof err) != AT_OK) return die(err);
        at_buf_init(&dag_text);
        ss_dag_print(dag, &dag_text);
        if (st && rec_task_add(
                      st, &(rec_task){dag->key, p->target.text, p->key, dag_text.data, dag->flops},
                      &task_id) != AT_OK)
            return die(rec_store_errmsg(st));
        at_buf_fini(&dag_text);
        if (ss_state_new(dag, &naive) != AT_OK || kn_lower(naive, &ir, err, sizeof err) != AT_OK ||
            kn_build(ir, &p->target, NULL, &ref, err, sizeof err) != AT_OK)
            return die(err);
        kn_ir_free(ir);
        if (tn_fleet_add_ref(p->f, ref, ref_id) != AT_OK) return die("cannot add the reference");
        kn_artifact_free(ref);
        while (quota > 0 && tries < 50 * (quota + 1)) {
            ss_state *s = NULL;
            sg_stats sgs;
            at_buf json;
            int dup = 0, k = p->n_jobs;
            tries++;
            if (sg_random_state(dag, &rng, &s, &sgs) != AT_OK) continue;
            at_buf_init(&json);
            ss_state_to_json(s, &json);
            for (int q = 0; q < n_seen; q++)
                dup |= strcmp(seen[q], json.data) == 0;
            if (dup || kn_lower(s, &ir, err, sizeof err) != AT_OK) {
                at_buf_fini(&json);
                ss_state_free(s);
                continue;
            }
            if (kn_build(ir, &p->target, NULL, &p->arts[k], err, sizeof err) != AT_OK) {
                kn_ir_free(ir);
                at_buf_fini(&json);
                ss_state_free(s);
                continue;
            }
            kn_ir_free(ir);
            ss_state_free(s);
            seen[n_seen++] = at_strdup(json.data);
            p->states[k] = at_buf_take(&json);
            at_buf_fini(&json);
            p->ids[k] = malloc(80);
            snprintf(p->ids[k], 80, "%s-%d-%d", uuid, index, k);
            kn_artifact_to_wire(p->arts[k], &p->jobs[k].w.art, p->args[k]);
            p->jobs[k].w.id = p->ids[k];
            at_wire_settings_default(&p->jobs[k].w.run);
            p->jobs[k].w.run.repeat = repeat;
            p->jobs[k].w.run.min_repeat_ms = min_repeat_ms;
            p->jobs[k].w.run.timeout_ms = timeout_ms;
            p->jobs[k].w.run.n_threads = 1;
            p->jobs[k].w.seed = seed + (uint64_t)op_index;
            p->jobs[k].w.has_ref = 1;
            memcpy(p->jobs[k].w.ref, ref_id, sizeof ref_id);
            p->jobs[k].task_id = task_id;
            p->jobs[k].state = p->states[k];
            p->jobs[k].run_id = run_id;
            p->jobs[k].trial = k;
            p->n_jobs++;
            quota--;
        }
        for (int q = 0; q < n_seen; q++)
            at_free(seen[q]);
        free(seen);
        ss_state_free(naive);
        ss_dag_unref(dag);
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *tracker = NULL, *key_path = NULL, *db = NULL, *name = NULL;
    int embedded = 0, repeat = 2, timeout_ms = 10000, wait_s = 600, priority = 1, no_seccomp = 0,
        n_plans = 1;
    uint64_t seed = 1;
    char err[1024], uuid[REC_UUID_LEN + 1];
    at_wire_key key;
    rec_store *st = NULL;
    int64_t run_id;
    plan plans[2];
    counts cnt;
    double t0;
    int total = 0, pending;

    memset(plans, 0, sizeof plans);
    plans[0].key = "local";
    plans[0].target_text = "llvm -mcpu=native";
    plans[0].ops = "matmul:M=16,N=16,K=16";
    plans[0].n = 10;
    plans[1].target_text = "llvm -mcpu=native";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--embedded") == 0)
            embedded = 1;
        else if (strcmp(a, "--no-seccomp") == 0)
            no_seccomp = 1;
        else if (v == NULL)
            return die("a flag needs a value");
        else if (strcmp(a, "--tracker") == 0)
            tracker = argv[++i];
        else if (strcmp(a, "--fleet-key") == 0)
            key_path = argv[++i];
        else if (strcmp(a, "--key") == 0)
            plans[0].key = argv[++i];
        else if (strcmp(a, "--db") == 0)
            db = argv[++i];
        else if (strcmp(a, "--target") == 0)
            plans[0].target_text = argv[++i];
        else if (strcmp(a, "--ops") == 0)
            plans[0].ops = argv[++i];
        else if (strcmp(a, "--n") == 0)
            plans[0].n = atoi(argv[++i]);
        else if (strcmp(a, "--also-key") == 0) {
            plans[1].key = argv[++i];
            n_plans = 2;
        } else if (strcmp(a, "--also-target") == 0)
            plans[1].target_text = argv[++i];
        else if (strcmp(a, "--also-ops") == 0)
            plans[1].ops = argv[++i];
        else if (strcmp(a, "--also-n") == 0)
            plans[1].n = atoi(argv[++i]);
        else if (strcmp(a, "--name") == 0)
            name = argv[++i];
        else if (strcmp(a, "--seed") == 0)
            seed = strtoull(argv[++i], NULL, 10);
        else if (strcmp(a, "--repeat") == 0)
            repeat = atoi(argv[++i]);
        else if (strcmp(a, "--start-file") == 0)
            start_file = argv[++i];
        else if (strcmp(a, "--min-repeat-ms") == 0)
            min_repeat_ms = atof(argv[++i]);
        else if (strcmp(a, "--timeout-ms") == 0)
            timeout_ms = atoi(argv[++i]);
        else if (strcmp(a, "--wait-timeout-s") == 0)
            wait_s = atoi(argv[++i]);
        else if (strcmp(a, "--priority") == 0)
            priority = atoi(argv[++i]);
        else if (strcmp(a, "--log-level") == 0) {
            at_log_level lv;
            if (at_log_parse_level(argv[++i], &lv) == AT_OK) at_log_set_level(lv);
        } else
            return die("unknown flag");
    }
    if (plans[1].ops == NULL) plans[1].ops = plans[0].ops;
    if (embedded) tn_fleet_prepare(); /* before any thread */
    if (!embedded && (tracker == NULL || key_path == NULL))
        return die("--tracker and --fleet-key, or --embedded");
    if (embedded && n_plans > 1) return die("--also-key needs a tracker");
    if (!embedded && at_wire_key_load(key_path, &key, err, sizeof err) != AT_OK) return die(err);
    if (db && rec_store_open(db, REC_OPEN_CREATE, &st, err, sizeof err) != AT_OK) return die(err);
    if (st && rec_run_begin(st, "fleet_client", TN_VERSION, &run_id, uuid) != AT_OK)
        return die(rec_store_errmsg(st));
    if (st == NULL) {
        run_id = 0;
        snprintf(uuid, sizeof uuid, "%016llx", (unsigned long long)seed);
    }
    t0 = at_time_mono_s();
    for (int p = 0; p < n_plans; p++) {
        if (kn_target_parse(plans[p].target_text, &plans[p].target, err, sizeof err) != AT_OK)
            return die(err);
        if (tn_fleet_open(&(tn_fleet_cfg){.tracker = embedded ? NULL : tracker,
                                          .keys = embedded ? NULL : &key,
                                          .n_keys = 1,
                                          .device_key = plans[p].key,
                                          .name = name,
                                          .priority = priority,
                                          .wait_timeout_ms = wait_s * 1000,
                                          .store = st,
                                          .embedded_no_seccomp = no_seccomp},
                          &plans[p].f, err, sizeof err) != AT_OK)
            return die(err);
        if (build_plan(&plans[p], p, st, uuid, run_id, seed, repeat, timeout_ms) != 0) return 1;
        total += plans[p].n_jobs;
    }
    printf("client built %d in %.1f s\n", total, at_time_mono_s() - t0);
    fflush(stdout);
    while (start_file && access(start_file, F_OK) != 0)
        usleep(20000);
    for (int p = 0; p < n_plans; p++) {
        if (tn_fleet_submit(plans[p].f, plans[p].jobs, plans[p].n_jobs) != AT_OK)
            return die("cannot submit");
        for (int i = 0; i < plans[p].n_jobs; i++) /* tn_fleet_submit copied them */
            kn_artifact_free(plans[p].arts[i]);
    }
    memset(&cnt, 0, sizeof cnt);
    {
        double last = 0;
        do {
            pending = 0;
            for (int p = 0; p < n_plans; p++) {
                at_err e;
                if (tn_fleet_pending(plans[p].f) == 0) continue;
                e = tn_fleet_wait(plans[p].f, n_plans > 1 ? 300 : 1000, on_result, &cnt);
                if (e == AT_ETIMEDOUT) {
                    fprintf(stderr, "fleet_client: %s\n", tn_fleet_status(plans[p].f));
                    tn_fleet_fail_pending(plans[p].f, AT_MEASURE_DEVICE_LOST,
                                          tn_fleet_status(plans[p].f), on_result, &cnt);
                } else if (e == AT_EAUTH || e == AT_EVERSION || e == AT_EPROTO || e == AT_EINVAL) {
                    return die(tn_fleet_status(plans[p].f));
                }
                pending += tn_fleet_pending(plans[p].f);
            }
            if (at_time_mono_s() - last > 2.0) {
                printf("client progress results=%d pending=%d status=%s\n", cnt.results, pending,
                       tn_fleet_status(plans[0].f));
                fflush(stdout);
                last = at_time_mono_s();
            }
        } while (pending > 0);
    }
    {
        tn_fleet_stats fs, sum;
        memset(&sum, 0, sizeof sum);
        for (int p = 0; p < n_plans; p++) {
            tn_fleet_get_stats(plans[p].f, &fs);
            sum.n_resubmitted += fs.n_resubmitted;
            sum.n_duplicates += fs.n_duplicates;
            sum.n_sessions += fs.n_sessions;
        }
        printf("client done submitted=%d results=%d ok=%d failed=%d resubmitted=%lld "
               "duplicates=%lld sessions=%lld",
               total, cnt.results, cnt.ok, cnt.failed, (long long)sum.n_resubmitted,
               (long long)sum.n_duplicates, (long long)sum.n_sessions);
        for (int s = 0; s < 16; s++)
            if (cnt.by_status[s]) printf(" %s=%d", at_measure_name(s), cnt.by_status[s]);
        printf("\n");
    }
    for (int p = 0; p < n_plans; p++) {
        tn_fleet_close(plans[p].f);
        for (int i = 0; i < plans[p].n_jobs; i++) {
            at_free(plans[p].states[i]);
            free(plans[p].ids[i]);
        }
        free(plans[p].jobs);
        free(plans[p].states);
        free(plans[p].ids);
        free(plans[p].args);
        free(plans[p].arts);
    }
    if (st) {
        rec_run_end(st, run_id, "done");
        rec_store_close(st);
    }
    return cnt.results == total ? 0 : 1;
}
