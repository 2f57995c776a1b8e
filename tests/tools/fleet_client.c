/* tests/tools/fleet_client.c -- a tuner-shaped client for fleet tests and benchmarks:
** builds N distinct random schedules of library operators for a target, submits them
** through tn_fleet (to a tracker, or embedded), commits every result to a records store.
**
**   fleet_client [--tracker ADDR --fleet-key FILE | --embedded] --key DEVICE_KEY
**                --db FILE --target 'llvm -mcpu=native' --ops SPEC[;SPEC...] --n N
**                [--seed S] [--name NAME] [--repeat R] [--timeout-ms T] [--wait-timeout-s W]
**                [--priority P] [--no-seccomp]
**
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
    if (r->status >= 0 && r->status < 16)
        c->by_status[r->status]++;
}

static int die(const char *msg)
{
    fprintf(stderr, "fleet_client: %s\n", msg);
    return 1;
}

int main(int argc, char **argv)
{
    const char *tracker = NULL, *key_path = NULL, *device_key = "local", *db = NULL,
               *target_text = "llvm -mcpu=native", *ops = "matmul:M=16,N=16,K=16", *name = NULL;
    int embedded = 0, n = 10, repeat = 2, timeout_ms = 10000, wait_s = 600, priority = 1,
        no_seccomp = 0;
    uint64_t seed = 1;
    char err[1024], uuid[REC_UUID_LEN + 1], spec_buf[1024];
    at_wire_key key;
    kn_target target;
    rec_store *st = NULL;
    int64_t run_id;
    tn_fleet *f = NULL;
    tn_fleet_job *jobs;
    char **states, **ids;
    at_wire_arg (*args)[64];
    kn_artifact **arts;
    int n_jobs = 0, n_ops = 0;
    at_rng rng;
    counts cnt;
    double t0;

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
            device_key = argv[++i];
        else if (strcmp(a, "--db") == 0)
            db = argv[++i];
        else if (strcmp(a, "--target") == 0)
            target_text = argv[++i];
        else if (strcmp(a, "--ops") == 0)
            ops = argv[++i];
        else if (strcmp(a, "--name") == 0)
            name = argv[++i];
        else if (strcmp(a, "--n") == 0)
            n = atoi(argv[++i]);
        else if (strcmp(a, "--seed") == 0)
            seed = strtoull(argv[++i], NULL, 10);
        else if (strcmp(a, "--repeat") == 0)
            repeat = atoi(argv[++i]);
        else if (strcmp(a, "--timeout-ms") == 0)
            timeout_ms = atoi(argv[++i]);
        else if (strcmp(a, "--wait-timeout-s") == 0)
            wait_s = atoi(argv[++i]);
        else if (strcmp(a, "--priority") == 0)
            priority = atoi(argv[++i]);
        else if (strcmp(a, "--log-level") == 0) {
            at_log_level lv;
            if (at_log_parse_level(argv[++i], &lv) == AT_OK)
                at_log_set_level(lv);
        } else
            return die("unknown flag");
    }
    if (embedded)
        tn_fleet_prepare(); /* before any thread */
    if (!embedded && (tracker == NULL || key_path == NULL))
        return die("--tracker and --fleet-key, or --embedded");
    if (!embedded && at_wire_key_load(key_path, &key, err, sizeof err) != AT_OK)
        return die(err);
    if (kn_target_parse(target_text, &target, err, sizeof err) != AT_OK)
        return die(err);
    if (db && rec_store_open(db, REC_OPEN_CREATE, &st, err, sizeof err) != AT_OK)
        return die(err);
    if (st && rec_run_begin(st, "fleet_client", TN_VERSION, &run_id, uuid) != AT_OK)
        return die(rec_store_errmsg(st));
    if (st == NULL) {
        run_id = 0;
        snprintf(uuid, sizeof uuid, "%016llx", (unsigned long long)seed);
    }
    if (tn_fleet_open(&(tn_fleet_cfg){.tracker = embedded ? NULL : tracker,
                                      .keys = embedded ? NULL : &key, .n_keys = 1,
                                      .device_key = device_key, .name = name,
                                      .priority = priority, .wait_timeout_ms = wait_s * 1000,
                                      .store = st, .embedded_no_seccomp = no_seccomp},
                      &f, err, sizeof err) != AT_OK)
        return die(err);

    jobs = calloc((size_t)n + 1, sizeof *jobs);
    states = calloc((size_t)n + 1, sizeof *states);
    ids = calloc((size_t)n + 1, sizeof *ids);
    args = calloc((size_t)n + 1, sizeof *args);
    arts = calloc((size_t)n + 1, sizeof *arts);
    if (!jobs || !states || !ids || !args || !arts)
        return die("out of memory");
    at_rng_seed(&rng, seed);
    snprintf(spec_buf, sizeof spec_buf, "%s", ops);
    for (char *sp = spec_buf; sp && *sp; n_ops++)
        sp = strchr(sp, ';') ? strchr(sp, ';') + 1 : NULL;
    t0 = at_time_mono_s();
    {
        char *save = NULL, *spec = strtok_r(spec_buf, ";", &save);
        int op_index = 0;
        while (spec) {
            ss_dag *dag = NULL;
            ss_state *naive = NULL;
            kn_ir *ir = NULL;
            kn_artifact *ref = NULL;
            uint8_t ref_id[AT_WIRE_REFID_BYTES];
            int64_t task_id = 0;
            at_buf dag_text;
            int quota = n / n_ops + (op_index < n % n_ops ? 1 : 0), tries = 0;
            char **seen = calloc((size_t)quota + 1, sizeof *seen);
            int n_seen = 0;

            if (kn_op_build(spec, &dag, err, sizeof err) != AT_OK)
                return die(err);
            at_buf_init(&dag_text);
            ss_dag_print(dag, &dag_text);
            if (st && rec_task_add(st, &(rec_task){dag->key, target.text, device_key,
                                                   dag_text.data, dag->flops},
                                   &task_id) != AT_OK)
                return die(rec_store_errmsg(st));
            at_buf_fini(&dag_text);
            if (ss_state_new(dag, &naive) != AT_OK ||
                kn_lower(naive, &ir, err, sizeof err) != AT_OK ||
                kn_build(ir, &target, NULL, &ref, err, sizeof err) != AT_OK)
                return die(err);
            kn_ir_free(ir);
            if (tn_fleet_add_ref(f, ref, ref_id) != AT_OK)
                return die("cannot add the reference");
            kn_artifact_free(ref);
            while (quota > 0 && tries < 50 * (quota + 1)) {
                ss_state *s = NULL;
                sg_stats sgs;
                at_buf json;
                int dup = 0;
                tries++;
                if (sg_random_state(dag, &rng, &s, &sgs) != AT_OK)
                    continue;
                at_buf_init(&json);
                ss_state_to_json(s, &json);
                for (int k = 0; k < n_seen; k++)
                    dup |= strcmp(seen[k], json.data) == 0;
                if (dup || kn_lower(s, &ir, err, sizeof err) != AT_OK) {
                    at_buf_fini(&json);
                    ss_state_free(s);
                    continue;
                }
                if (kn_build(ir, &target, NULL, &arts[n_jobs], err, sizeof err) != AT_OK) {
                    kn_ir_free(ir);
                    at_buf_fini(&json);
                    ss_state_free(s);
                    continue;
                }
                kn_ir_free(ir);
                ss_state_free(s);
                seen[n_seen++] = at_strdup(json.data);
                states[n_jobs] = at_buf_take(&json);
                at_buf_fini(&json);
                ids[n_jobs] = malloc(64);
                snprintf(ids[n_jobs], 64, "%s-%d", uuid, n_jobs);
                tn_fleet_artifact(arts[n_jobs], &jobs[n_jobs].w.art, args[n_jobs]);
                jobs[n_jobs].w.id = ids[n_jobs];
                at_wire_settings_default(&jobs[n_jobs].w.run);
                jobs[n_jobs].w.run.repeat = repeat;
                jobs[n_jobs].w.run.timeout_ms = timeout_ms;
                jobs[n_jobs].w.run.n_threads = 1;
                jobs[n_jobs].w.seed = seed + (uint64_t)op_index;
                jobs[n_jobs].w.has_ref = 1;
                memcpy(jobs[n_jobs].w.ref, ref_id, sizeof ref_id);
                jobs[n_jobs].task_id = task_id;
                jobs[n_jobs].state = states[n_jobs];
                jobs[n_jobs].run_id = run_id;
                jobs[n_jobs].trial = n_jobs;
                n_jobs++;
                quota--;
            }
            for (int k = 0; k < n_seen; k++)
                at_free(seen[k]);
            free(seen);
            ss_state_free(naive);
            ss_dag_unref(dag);
            spec = strtok_r(NULL, ";", &save);
            op_index++;
        }
    }
    if (tn_fleet_submit(f, jobs, n_jobs) != AT_OK)
        return die("cannot submit");
    printf("client built %d in %.1f s\n", n_jobs, at_time_mono_s() - t0);
    fflush(stdout);
    for (int i = 0; i < n_jobs; i++)
        kn_artifact_free(arts[i]);
    memset(&cnt, 0, sizeof cnt);
    {
        double last = 0;
        while (tn_fleet_pending(f) > 0) {
            at_err e = tn_fleet_wait(f, 1000, on_result, &cnt);
            if (e == AT_ETIMEDOUT) {
                fprintf(stderr, "fleet_client: %s\n", tn_fleet_status(f));
                tn_fleet_fail_pending(f, AT_MEASURE_DEVICE_LOST, tn_fleet_status(f), on_result,
                                      &cnt);
                break;
            }
            if (e == AT_EAUTH || e == AT_EVERSION || e == AT_EPROTO || e == AT_EINVAL)
                return die(tn_fleet_status(f));
            if (at_time_mono_s() - last > 2.0) {
                printf("client progress results=%d pending=%d status=%s\n", cnt.results,
                       tn_fleet_pending(f), tn_fleet_status(f));
                fflush(stdout);
                last = at_time_mono_s();
            }
        }
    }
    {
        tn_fleet_stats fs;
        tn_fleet_get_stats(f, &fs);
        printf("client done submitted=%d results=%d ok=%d failed=%d resubmitted=%lld "
               "duplicates=%lld sessions=%lld",
               n_jobs, cnt.results, cnt.ok, cnt.failed, (long long)fs.n_resubmitted,
               (long long)fs.n_duplicates, (long long)fs.n_sessions);
        for (int s = 0; s < 16; s++)
            if (cnt.by_status[s])
                printf(" %s=%d", at_measure_name(s), cnt.by_status[s]);
        printf("\n");
    }
    tn_fleet_close(f);
    if (st) {
        rec_run_end(st, run_id, "done");
        rec_store_close(st);
    }
    for (int i = 0; i < n_jobs; i++) {
        at_free(states[i]);
        free(ids[i]);
    }
    free(jobs);
    free(states);
    free(ids);
    free(args);
    free(arts);
    return cnt.results == n_jobs ? 0 : 1;
}
