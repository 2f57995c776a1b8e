/* tuner/tn_cli_measure.c -- 'tuner measure': measure library operators with their naive and
** hand-written schedules through the fleet (the embedded tracker and agent by default, or a
** real tracker), store every result in the records store, print a table.
**
**   tuner measure [--tracker HOST:PORT --fleet-key FILE] [--key DEVICE_KEY] [--db FILE]
**                 [--target T] [--repeat N] [--number N] [--min-repeat-ms M] ... SPEC... */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "records/records.h"
#include "tuner/tuner_int.h"

#define MAX_SPECS 32

typedef struct row {
    const char *spec, *schedule;
    double flops;
    int status;
    double median_s;
    char error[256];
    int done;
} row;

typedef struct rows {
    row v[2 * MAX_SPECS];
    int n;
    char ids[2 * MAX_SPECS][64];
} rows;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void on_result(void *ctx, const tn_fleet_job *job, const at_wire_result *r)
{
    rows *rs = ctx;
    (void)job;
    for (int i = 0; i < rs->n; i++) {
        row *w = &rs->v[i];
        double c[AT_WIRE_MAX_COSTS];
        if (strcmp(rs->ids[i], r->id) != 0) continue;
        w->status = r->status;
        w->done = 1;
        snprintf(w->error, sizeof w->error, "%s", r->error ? r->error : "");
        if (r->status == AT_MEASURE_NO_ERROR && r->n_costs > 0) {
            memcpy(c, r->costs, (size_t)r->n_costs * sizeof *c);
            qsort(c, (size_t)r->n_costs, sizeof *c, cmp_double);
            w->median_s = r->median_s > 0 ? r->median_s : c[r->n_costs / 2];
        }
    }
}

/* Build 'st' for 'target' into *out, or say why not. */
static int build(const tn_cmd *cmd, const ss_state *st, const kn_target *target, kn_artifact **out)
{
    kn_ir *ir = NULL;
    char err[512];
    if (kn_lower(st, &ir, err, sizeof err) != AT_OK ||
        kn_build(ir, target, NULL, out, err, sizeof err) != AT_OK) {
        tn__err(cmd, "%s", err);
        kn_ir_free(ir);
        return -1;
    }
    kn_ir_free(ir);
    return 0;
}

int tn__cmd_measure(const tn_cmd *cmd, int argc, char **argv)
{
    const char *db = "tuning.db", *tracker = NULL, *key_path = NULL, *next_path = NULL,
               *device_key = NULL, *target_text = "llvm -mcpu=native", *min_ms = "0";
    int repeat = 3, number = 1, timeout_ms = 10000, wait_s = 600, priority = 1, threads = 0, n_pos,
        help, rc;
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
    };
    at_wire_key keys[2];
    int n_keys = 0;
    kn_target target;
    rec_store *st;
    tn_fleet *f = NULL;
    tn_fleet_job jobs[2 * MAX_SPECS];
    at_wire_arg args[2 * MAX_SPECS][64];
    kn_artifact *arts[2 * MAX_SPECS];
    char *states[2 * MAX_SPECS], err[512], uuid[REC_UUID_LEN + 1];
    static rows rs;
    int n_done = 0;
    double min_repeat_ms;
    int64_t run_id;
    at_err e = AT_OK;

    if ((rc = tn__opts_parse(cmd, opts, (int)AT_ARRAY_LEN(opts), argc, argv, &n_pos, &help)) !=
        TN_EXIT_OK)
        return rc;
    if (help) {
        tn__opts_help(stdout, NULL, cmd, opts, (int)AT_ARRAY_LEN(opts));
        return TN_EXIT_OK;
    }
    if (n_pos == 0 || n_pos > MAX_SPECS) {
        tn__err(cmd, "give 1 to %d operator specs (e.g. matmul:M=256,N=256,K=256)", MAX_SPECS);
        return TN_EXIT_USAGE;
    }
    if (at_parse_double(min_ms, &min_repeat_ms) != AT_OK || min_repeat_ms < 0 || repeat < 1 ||
        repeat > AT_WIRE_MAX_COSTS || number < 1 || timeout_ms < 1) {
        tn__err(cmd, "bad run settings");
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
    if (rec_store_open(db, REC_OPEN_CREATE, &st, err, sizeof err) != AT_OK) {
        tn__err(cmd, "%s", err);
        return TN_EXIT_FAIL;
    }
    if (rec_run_begin(st, "tuner measure", TN_VERSION, &run_id, uuid) != AT_OK ||
        tn_fleet_open(&(tn_fleet_cfg){.tracker = tracker,
                                      .keys = tracker ? keys : NULL,
                                      .n_keys = n_keys,
                                      .device_key = device_key,
                                      .priority = priority,
                                      .wait_timeout_ms = wait_s * 1000,
                                      .store = st,
                                      .embedded_threads = threads},
                      &f, err, sizeof err) != AT_OK) {
        tn__err(cmd, "%s", f ? err : err[0] ? err : rec_store_errmsg(st));
        rec_store_close(st);
        return TN_EXIT_FAIL;
    }
    memset(&rs, 0, sizeof rs);
    for (int s = 0; s < n_pos; s++) {
        const char *spec = argv[1 + s];
        ss_dag *dag = NULL;
        ss_state *naive = NULL, *hand = NULL;
        kn_artifact *ref = NULL;
        uint8_t ref_id[AT_WIRE_REFID_BYTES];
        int64_t task;
        at_buf text;
        if (kn_op_build(spec, &dag, err, sizeof err) != AT_OK) {
            tn__err(cmd, "%s", err);
            e = AT_EINVAL;
            break;
        }
        at_buf_init(&text);
        ss_dag_print(dag, &text);
        if (rec_task_add(st,
                         &(rec_task){dag->key, target.text, device_key ? device_key : "local",
                                     text.data, dag->flops},
                         &task) != AT_OK) {
            tn__err(cmd, "%s", rec_store_errmsg(st));
            at_buf_fini(&text);
            ss_dag_unref(dag);
            e = AT_EIO;
            break;
        }
        at_buf_fini(&text);
        if (ss_state_new(dag, &naive) != AT_OK || ss_state_new(dag, &hand) != AT_OK ||
            build(cmd, naive, &target, &ref) != 0) {
            ss_state_free(naive);
            ss_state_free(hand);
            ss_dag_unref(dag);
            e = AT_ECODEGEN;
            break;
        }
        tn_fleet_add_ref(f, ref, ref_id);
        kn_artifact_free(ref);
        if (strncmp(spec, "matmul", 6) == 0 &&
            kn_hand_matmul(hand, &target, err, sizeof err) == AT_OK)
            ;
        else if (target.kind == KN_TARGET_LLVM &&
                 kn_hand_conv_nhwc(hand, target.vector_bytes, err, sizeof err) == AT_OK)
            ;
        else if (kn_hand_elementwise(hand, &target, err, sizeof err) != AT_OK) {
            ss_state_free(hand);
            hand = NULL;
        }
        for (int v = 0; v < 2; v++) {
            ss_state *sched = v == 0 ? naive : hand;
            int k = rs.n;
            at_buf json;
            if (sched == NULL || build(cmd, sched, &target, &arts[k]) != 0) continue;
            at_buf_init(&json);
            ss_state_to_json(sched, &json);
            states[k] = at_buf_take(&json);
            at_buf_fini(&json);
            snprintf(rs.ids[k], sizeof rs.ids[k], "%s-%d", uuid, k);
            memset(&jobs[k], 0, sizeof jobs[k]);
            tn_fleet_artifact(arts[k], &jobs[k].w.art, args[k]);
            jobs[k].w.id = rs.ids[k];
            at_wire_settings_default(&jobs[k].w.run);
            jobs[k].w.run.repeat = repeat;
            jobs[k].w.run.number = number;
            jobs[k].w.run.min_repeat_ms = min_repeat_ms;
            jobs[k].w.run.timeout_ms = timeout_ms;
            jobs[k].w.seed = 1;
            jobs[k].w.has_ref = 1;
            memcpy(jobs[k].w.ref, ref_id, sizeof ref_id);
            jobs[k].task_id = task;
            jobs[k].state = states[k];
            jobs[k].run_id = run_id;
            jobs[k].trial = k;
            rs.v[k].spec = spec;
            rs.v[k].schedule = v == 0 ? "naive" : "hand-written";
            rs.v[k].flops = dag->flops;
            rs.n++;
        }
        ss_state_free(naive);
        ss_state_free(hand);
        ss_dag_unref(dag);
    }
    if (e == AT_OK && rs.n > 0 && (e = tn_fleet_submit(f, jobs, rs.n)) == AT_OK) {
        double last = at_time_mono_s();
        while (tn_fleet_pending(f) > 0) {
            e = tn_fleet_wait(f, 1000, on_result, &rs);
            if (e == AT_ETIMEDOUT) {
                tn__err(cmd, "%s", tn_fleet_status(f));
                e = tn_fleet_fail_pending(f, AT_MEASURE_DEVICE_LOST, tn_fleet_status(f), on_result,
                                          &rs);
                break;
            }
            if (e != AT_OK) {
                tn__err(cmd, "%s", tn_fleet_status(f));
                break;
            }
            if (at_time_mono_s() - last > 5) {
                fprintf(stderr, "tuner measure: %s\n", tn_fleet_status(f));
                last = at_time_mono_s();
            }
        }
    }
    for (int i = 0; i < rs.n; i++)
        n_done += rs.v[i].done;
    if (n_done == 0 && rs.n > 0) {
        /* a refusal, a lost fleet: say so, not "results stored" (issue 14, item 9) */
        printf("nothing was measured: no result of the %d jobs reached %s\n", rs.n, db);
    } else if (rs.n > 0) {
        printf("%-40s %-13s %-14s %12s %10s\n", "OPERATOR", "SCHEDULE", "STATUS", "MEDIAN",
               "GFLOPS");
        for (int i = 0; i < rs.n; i++) {
            const row *w = &rs.v[i];
            if (!w->done) continue;
            if (w->status == AT_MEASURE_NO_ERROR)
                printf("%-40.40s %-13s %-14s %9.3f ms %10.2f\n", w->spec, w->schedule,
                       at_measure_name(w->status), w->median_s * 1e3,
                       w->median_s > 0 ? w->flops / w->median_s * 1e-9 : 0);
            else
                printf("%-40.40s %-13s %-14s %s (%s)\n", w->spec, w->schedule,
                       at_measure_name(w->status), w->error, at_measure_hint(w->status));
        }
        printf("%d of %d results stored in %s (run %s, %s)\n", n_done, rs.n, db, uuid,
               tracker ? "through the tracker" : "embedded tracker and agent");
    }
    tn_fleet_close(f);
    rec_run_end(st, run_id, e == AT_OK ? "done" : "failed");
    rec_store_close(st);
    for (int i = 0; i < rs.n; i++) {
        kn_artifact_free(arts[i]);
        at_free(states[i]);
    }
    return e == AT_OK ? TN_EXIT_OK : TN_EXIT_FAIL;
}
