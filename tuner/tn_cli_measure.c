/* tuner/tn_cli_measure.c -- 'tuner measure': measure library operators with their naive and
** hand-written schedules through the fleet (the embedded tracker and agent by default, or a
** real tracker), store every result in the records store, print a table.
**
**   tuner measure [--tracker HOST:PORT --fleet-key FILE] [--key DEVICE_KEY] [--db FILE]
**                 [--target T] [--repeat N] [--number N] [--min-repeat-ms M] ... SPEC...
**   tuner measure --state FILE [--rounds N] ... SPEC
**
** With --state, the schedule states of FILE (one JSON object a line, as the store's records
** and 'tuner best --json' hold them) replayed on the one SPEC's DAG instead; with --rounds N
** the list is measured N times over, each round all of it back to back, so that a slow spell
** of a shared host falls on every state alike (the medians over the rounds are printed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "records/records.h"
#include "tuner/tuner_int.h"

#define MAX_SPECS 32
#define MAX_STATES 64
#define MAX_ROUNDS 100
#define MAX_ROWS (2 * MAX_SPECS > MAX_STATES ? 2 * MAX_SPECS : MAX_STATES)

typedef struct row {
    const char *spec, *schedule;
    char label[24];
    double flops;
    tn_measure_res res;      /* a failed round's result, or the last one */
    double med[MAX_ROUNDS];  /* each successful round's median */
    int n_ok;
} row;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The states of 'path', one JSON object a line (blank lines skipped), replayed on 'dag'
** into sched[]; *n_out of them.  On an error, 'err' names the file, the line and the
** problem. */
static at_err read_states(const char *path, ss_dag *dag, ss_state **sched, int *n_out,
                          char *err, size_t n_err)
{
    char *text = NULL, *line, *next;
    size_t n = 0;
    int lineno = 0, k = 0;
    at_err e;
    *n_out = 0;
    if ((e = at_file_read(path, &text, &n, err, n_err)) != AT_OK)
        return e;
    for (line = text; line != NULL && line < text + n; line = next) {
        char *end = memchr(line, '\n', (size_t)(text + n - line)), *a = line;
        char msg[256];
        next = end ? end + 1 : NULL;
        if (end == NULL)
            end = text + n;
        lineno++;
        while (a < end && (*a == ' ' || *a == '\t' || *a == '\r'))
            a++;
        if (a == end)
            continue;
        if (k == MAX_STATES) {
            snprintf(err, n_err, "%s:%d: more than %d states", path, lineno, MAX_STATES);
            e = AT_EINVAL;
            break;
        }
        if ((e = ss_state_from_json(dag, a, (size_t)(end - a), &sched[k], msg, sizeof msg)) !=
            AT_OK) {
            snprintf(err, n_err, "%s:%d: not a state of this operator: %s", path, lineno,
                     msg[0] ? msg : at_strerror(e));
            sched[k] = NULL;
            break;
        }
        k++;
    }
    if (e == AT_OK && k == 0) {
        snprintf(err, n_err, "%s: no state in the file", path);
        e = AT_EINVAL;
    }
    at_free(text);
    if (e != AT_OK) {
        for (int i = 0; i < k; i++)
            ss_state_free(sched[i]);
        return e;
    }
    *n_out = k;
    return AT_OK;
}

int tn__cmd_measure(const tn_cmd *cmd, int argc, char **argv)
{
    const char *db = "tuning.db", *tracker = NULL, *key_path = NULL, *next_path = NULL,
               *device_key = NULL, *target_text = "llvm -mcpu=native", *min_ms = "0",
               *state_path = NULL;
    int repeat = 3, number = 1, timeout_ms = 10000, wait_s = 600, priority = 1, threads = 0, n_pos,
        help, rc, rounds = 1, n_jobs = 0;
    at_opt opts[] = {
        {"tracker", 0, AT_OPT_STR, &tracker, "HOST:PORT",
         "measure on this tracker's agents "
         "(default: embedded, in this process)"},
        {"fleet-key", 0, AT_OPT_STR, &key_path, "FILE", "the fleet key (or $AT_FLEET_KEY)"},
        {"next-fleet-key", 0, AT_OPT_STR, &next_path, "FILE", "a second key (rotation)"},
        {"key", 0, AT_OPT_STR, &device_key, "NAME", "the device key (default 'local')"},
        {"db", 0, AT_OPT_STR, &db, "FILE", "the records store (default tuning.db)"},
        {"target", 0, AT_OPT_STR, &target_text, "T", "the target (default 'llvm -mcpu=native')"},
        {"repeat", 0, AT_OPT_INT, &repeat, "N", "timed repeats (default 3, as a tuning run)"},
        {"number", 0, AT_OPT_INT, &number, "N", "calls per repeat (default 1)"},
        {"min-repeat-ms", 0, AT_OPT_STR, &min_ms, "MS", "grow 'number' to this (default 0)"},
        {"timeout-ms", 0, AT_OPT_INT, &timeout_ms, "MS", "per job on the device (10000)"},
        {"wait-timeout-s", 0, AT_OPT_INT, &wait_s, "S",
         "give up when no agent serves the key "
         "this long (600)"},
        {"wait-timeout", 0, AT_OPT_INT, &wait_s, "S", AT_OPT_OLD("wait-timeout-s")},
        {"priority", 0, AT_OPT_INT, &priority, "N", "among tuners sharing the key (1)"},
        {"threads", 0, AT_OPT_INT, &threads, "N", "embedded agent's threads (default all)"},
        {"state", 0, AT_OPT_STR, &state_path, "FILE",
         "measure these schedule states of the one SPEC (one JSON object a line) instead of "
         "its naive and hand-written ones"},
        {"rounds", 0, AT_OPT_INT, &rounds, "N",
         "measure the list N times over, interleaved (default 1; at most 100): medians over "
         "the rounds"},
    };
    at_wire_key keys[2];
    int n_keys = 0;
    kn_target target;
    rec_store *st;
    tn_measurer *m = NULL;
    static row rows[MAX_ROWS];
    int n_rows = 0, n_done = 0;
    char err[512];
    double min_repeat_ms;
    at_err e = AT_OK;

    if ((rc = tn__opts_cmd(NULL, cmd, opts, (int)AT_ARRAY_LEN(opts), argc, argv, &n_pos,
                           &help)) != TN_EXIT_OK || help)
        return rc;
    if (n_pos == 0 || n_pos > MAX_SPECS) {
        tn__err(cmd, "give 1 to %d operator specs (e.g. matmul:M=256,N=256,K=256)", MAX_SPECS);
        return TN_EXIT_USAGE;
    }
    if (at_parse_double(min_ms, &min_repeat_ms) != AT_OK || min_repeat_ms < 0 || repeat < 1 ||
        repeat > AT_WIRE_MAX_COSTS || number < 1 || timeout_ms < 1) {
        tn__err(cmd, "bad run settings");
        return TN_EXIT_USAGE;
    }
    if (rounds < 1 || rounds > MAX_ROUNDS) {
        tn__err(cmd, "--rounds %d: give 1 to %d", rounds, MAX_ROUNDS);
        return TN_EXIT_USAGE;
    }
    if (state_path != NULL && n_pos != 1) {
        tn__err(cmd, "--state measures the states of one operator: give one SPEC, not %d", n_pos);
        return TN_EXIT_USAGE;
    }
    if (tracker == NULL)
        tn_fleet_prepare(); /* the embedded agent's launcher, while we have one thread */
    else {
        if (key_path == NULL) key_path = getenv("AT_FLEET_KEY");
        if (key_path == NULL) {
            tn__err(cmd, "a tracker needs the fleet key: --fleet-key FILE");
            return TN_EXIT_USAGE;
        }
        if (at_wire_key_load(key_path, &keys[n_keys++], err, sizeof err) != AT_OK ||
            (next_path && at_wire_key_load(next_path, &keys[n_keys++], err, sizeof err) != AT_OK)) {
            tn__err(cmd, "%s", err);
            return TN_EXIT_FAIL;
        }
    }
    if (kn_target_parse(target_text, &target, err, sizeof err) != AT_OK) {
        tn__err(cmd, "%s", err);
        return TN_EXIT_USAGE;
    }
    for (int s = 0; s < n_pos; s++) {
        /* every spec (and state) is checked before anything is measured */
        ss_dag *dag = NULL;
        ss_state *sched[MAX_STATES];
        int n_st = 0;
        if (kn_op_build(argv[1 + s], &dag, err, sizeof err) != AT_OK) {
            tn__err(cmd, "%s", err);
            return TN_EXIT_USAGE;
        }
        if (state_path != NULL &&
            read_states(state_path, dag, sched, &n_st, err, sizeof err) != AT_OK) {
            tn__err(cmd, "%s", err);
            ss_dag_unref(dag);
            return TN_EXIT_USAGE;
        }
        for (int i = 0; i < n_st; i++)
            ss_state_free(sched[i]);
        ss_dag_unref(dag);
    }
    if (rec_store_open(db, REC_OPEN_CREATE, &st, err, sizeof err) != AT_OK) {
        tn__err(cmd, "%s", err);
        return TN_EXIT_FAIL;
    }
    if (tn_measurer_open(st,
                         &(tn_measure_cfg){.target = target_text,
                                           .tracker = tracker,
                                           .keys = keys,
                                           .n_keys = n_keys,
                                           .device_key = device_key,
                                           .priority = priority,
                                           .wait_timeout_s = wait_s,
                                           .embedded_threads = threads,
                                           .number = number,
                                           .repeat = repeat,
                                           .min_repeat_ms = min_repeat_ms,
                                           .timeout_ms = timeout_ms,
                                           .command_line = "tuner measure"},
                         &m, err, sizeof err) != AT_OK) {
        tn__err(cmd, "%s", err);
        rec_store_close(st);
        return TN_EXIT_FAIL;
    }
    for (int s = 0; s < n_pos && e == AT_OK; s++) {
        const char *spec = argv[1 + s];
        ss_dag *dag = NULL;
        ss_state *sched[MAX_STATES] = {NULL};
        static tn_measure_res res[MAX_STATES];
        int n_sched = 1, row0 = n_rows;
        if (kn_op_build(spec, &dag, err, sizeof err) != AT_OK) {
            tn__err(cmd, "%s", err);
            e = AT_EINVAL;
            break;
        }
        if (state_path != NULL) {
            if ((e = read_states(state_path, dag, sched, &n_sched, err, sizeof err)) != AT_OK)
                tn__err(cmd, "%s", err);
        } else if (ss_state_new(dag, &sched[0]) != AT_OK || ss_state_new(dag, &sched[1]) != AT_OK) {
            e = AT_ENOMEM;
        } else if ((strncmp(spec, "matmul", 6) == 0 &&
                    kn_hand_matmul(sched[1], &target, err, sizeof err) == AT_OK) ||
                   (target.kind == KN_TARGET_LLVM &&
                    kn_hand_conv_nhwc(sched[1], target.vector_bytes, 0, err, sizeof err) == AT_OK) ||
                   (target.kind == KN_TARGET_LLVM &&
                    kn_hand_conv_nchw(sched[1], target.vector_bytes, 0, err, sizeof err) == AT_OK) ||
                   (target.kind == KN_TARGET_LLVM &&
                    kn_hand_rowwise(sched[1], target.vector_bytes, err, sizeof err) == AT_OK) ||
                   (target.kind == KN_TARGET_LLVM &&
                    kn_hand_bmm(sched[1], target.vector_bytes, err, sizeof err) == AT_OK) ||
                   kn_hand_elementwise(sched[1], &target, err, sizeof err) == AT_OK) {
            n_sched = 2;
        }
        for (int v = 0; v < n_sched && e == AT_OK; v++) {
            row *w = &rows[n_rows++];
            memset(w, 0, sizeof *w);
            w->spec = spec;
            if (state_path != NULL) {
                snprintf(w->label, sizeof w->label, "state %d", v + 1);
                w->schedule = w->label;
            } else {
                w->schedule = v == 0 ? "naive" : "hand-written";
            }
            w->flops = dag->flops;
        }
        for (int r = 0; r < rounds && e == AT_OK; r++) {
            if ((e = tn_measurer_run(m, dag, (const ss_state *const *)sched, n_sched, res, err,
                                     sizeof err)) != AT_OK)
                tn__err(cmd, "%s: %s", spec, err[0] ? err : at_strerror(e));
            for (int v = 0; v < n_sched && e != AT_ENOMEM; v++) {
                row *w = &rows[row0 + v];
                if (res[v].status == AT_MEASURE_NO_ERROR)
                    w->med[w->n_ok++] = res[v].median_s;
                if (res[v].status != AT_MEASURE_NO_ERROR || w->n_ok == 1)
                    w->res = res[v]; /* the first success, or the last failure */
                n_jobs++;
                /* DEVICE_LOST: given up (or cancelled), not a result of the device */
                n_done += res[v].status != AT_MEASURE_DEVICE_LOST &&
                          res[v].status != AT_MEASURE_UNKNOWN_ERROR;
            }
        }
        for (int v = 0; v < n_sched; v++) {
            row *w = &rows[row0 + v];
            if (w->n_ok > 0) {
                double sorted[MAX_ROUNDS];
                memcpy(sorted, w->med, (size_t)w->n_ok * sizeof *sorted);
                qsort(sorted, (size_t)w->n_ok, sizeof *sorted, cmp_double);
                w->res.status = AT_MEASURE_NO_ERROR;
                w->res.median_s = w->n_ok % 2 ? sorted[w->n_ok / 2]
                                              : (sorted[w->n_ok / 2 - 1] + sorted[w->n_ok / 2]) / 2;
            }
        }
        if (e == AT_ENOMEM)
            n_rows = row0;
        for (int v = 0; v < MAX_STATES; v++)
            ss_state_free(sched[v]);
        ss_dag_unref(dag);
    }
    if (n_done == 0 && n_rows > 0) {
        /* a refusal, a lost fleet: say so, not "results stored" (issue 14, item 9) */
        printf("nothing was measured: no result of the %d jobs reached %s\n", n_jobs, db);
    } else if (n_rows > 0) {
        printf("%-40s %-13s %-14s %12s %10s\n", "OPERATOR", "SCHEDULE", "STATUS", "MEDIAN",
               "GFLOPS");
        for (int i = 0; i < n_rows; i++) {
            const row *w = &rows[i];
            if (w->res.status == AT_MEASURE_NO_ERROR) {
                printf("%-40.40s %-13s %-14s %9.3f ms %10.2f", w->spec, w->schedule,
                       at_measure_name(w->res.status), w->res.median_s * 1e3,
                       w->res.median_s > 0 ? w->flops / w->res.median_s * 1e-9 : 0);
                if (rounds > 1) {
                    /* each round's median, in order: the spread a single round hides */
                    printf("  rounds (ms, %d of %d):", w->n_ok, rounds);
                    for (int r = 0; r < w->n_ok; r++)
                        printf(" %.4f", w->med[r] * 1e3);
                }
                printf("\n");
            } else
                printf("%-40.40s %-13s %-14s %s (%s)\n", w->spec, w->schedule,
                       at_measure_name(w->res.status), w->res.error,
                       at_measure_hint(w->res.status));
        }
        printf("%d of %d results stored in %s (run %s, %s)\n", n_done, n_jobs, db,
               tn_measurer_uuid(m), tracker ? "through the tracker" : "embedded tracker and agent");
    }
    tn_measurer_close(m, e != AT_OK);
    rec_store_close(st);
    return e == AT_OK ? TN_EXIT_OK : TN_EXIT_FAIL;
}
