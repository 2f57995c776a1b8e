/* tests/bench/bench_fleet.c -- the measurement fleet's own costs, on loopback:
**
**   bench fleet_dispatch N jobs/s       jobs through one tracker to 8 agents in benchmark
**                                       mode (they acknowledge jobs without running them):
**                                       the tracker's dispatch throughput (goal >= 5000)
**   bench fleet_e2e_sandboxed N jobs/s  real sandboxed children running a trivial kernel,
**                                       batches of 64, one agent per core
**   bench fleet_latency_tcp N ms        one measurement through a TCP tracker and agent
**   bench fleet_latency_embedded N ms   the same through the embedded (inproc) tracker
**   bench fleet_latency_added N ms      their difference (goal < 2 ms)
**
** Every figure is the median of several runs.  Agents run as threads of this process (so
** the launchers are forked first, while the process has one thread); the tracker is a
** thread too; everything talks over real sockets (tcp://127.0.0.1) except the embedded case.
**
**   bench_fleet [--quick]        --quick: fewer and smaller runs (a smoke test) */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "rpc_agent/rpc_agent.h"
#include "tracker/tracker.h"
#include "tuner/tuner.h"

#define N_BENCH_AGENTS 8

static at_wire_key key;
static agt_launcher *launchers[2];

typedef struct runner {
    pthread_t th;
    trk_tracker *trk;
    agt_agent *agt;
} runner;

static void *trk_main(void *p)
{
    trk_run(p);
    return NULL;
}

static void *agt_main(void *p)
{
    agt_run(p);
    return NULL;
}

static int start_tracker(runner *r, char *url, size_t n)
{
    char err[256];
    if (trk_open(&(trk_config){.listen_url = "tcp://127.0.0.1:0", .keys = &key, .n_keys = 1},
                 &r->trk, err, sizeof err) != AT_OK) {
        fprintf(stderr, "bench_fleet: %s\n", err);
        return -1;
    }
    snprintf(url, n, "127.0.0.1:%d", trk_port(r->trk));
    return pthread_create(&r->th, NULL, trk_main, r->trk);
}

static void stop_tracker(runner *r)
{
    trk_stop(r->trk);
    pthread_join(r->th, NULL);
    trk_close(r->trk);
}

static int start_agent(runner *r, const char *url, const char *device_key, int bench_ack,
                       agt_launcher *l, int batch)
{
    char err[256];
    if (agt_open(&(agt_config){.tracker_url = url,
                               .device_key = device_key,
                               .keys = &key,
                               .n_keys = 1,
                               .bench_ack = bench_ack,
                               .launcher = l,
                               .n_threads = 1,
                               .max_batch = batch,
                               .name = "bench"},
                 &r->agt, err, sizeof err) != AT_OK) {
        fprintf(stderr, "bench_fleet: %s\n", err);
        return -1;
    }
    return pthread_create(&r->th, NULL, agt_main, r->agt);
}

static void stop_agent(runner *r)
{
    agt_stop(r->agt);
    pthread_join(r->th, NULL);
    agt_close(r->agt);
}

/* n jobs named "<prefix>-i" of artifact 'a' (and its reference 'ref_id' when given) */
static tn_fleet_job *make_jobs(const at_wire_artifact *a, const uint8_t *ref_id, int n,
                               const char *prefix, char (**ids)[48])
{
    tn_fleet_job *jobs = calloc((size_t)n, sizeof *jobs);
    *ids = calloc((size_t)n, sizeof **ids);
    if (jobs == NULL || *ids == NULL) exit(1);
    for (int i = 0; i < n; i++) {
        snprintf((*ids)[i], sizeof(*ids)[i], "%s-%d", prefix, i);
        jobs[i].w.id = (*ids)[i];
        jobs[i].w.art = *a;
        at_wire_settings_default(&jobs[i].w.run);
        jobs[i].w.run.repeat = 1;
        jobs[i].w.run.n_warmup = 0;
        jobs[i].w.run.n_threads = 1;
        jobs[i].w.seed = 1;
        if (ref_id) {
            jobs[i].w.has_ref = 1;
            memcpy(jobs[i].w.ref, ref_id, AT_WIRE_REFID_BYTES);
        }
        jobs[i].trial = i;
        jobs[i].state = "{}";
    }
    return jobs;
}

static int count_ok;

static void on_result(void *ctx, const tn_fleet_job *job, const at_wire_result *r)
{
    (void)ctx;
    (void)job;
    count_ok += r->status == AT_MEASURE_NO_ERROR;
}

/* Submit and wait for all; returns seconds, or -1. */
static double run_jobs(tn_fleet *f, tn_fleet_job *jobs, int n, double limit_s)
{
    double t0 = at_time_mono_s(), end = t0 + limit_s;
    count_ok = 0;
    if (tn_fleet_submit(f, jobs, n) != AT_OK) return -1;
    while (tn_fleet_pending(f) > 0 && at_time_mono_s() < end)
        if (tn_fleet_wait(f, 1000, on_result, NULL) != AT_OK) return -1;
    if (tn_fleet_pending(f) > 0 || count_ok != n) {
        fprintf(stderr, "bench_fleet: %d of %d jobs measured (%s)\n", count_ok, n,
                tn_fleet_status(f));
        return -1;
    }
    return at_time_mono_s() - t0;
}

static int bench_dispatch(int quick)
{
    runner tr, ag[N_BENCH_AGENTS];
    char url[64], err[256];
    tn_fleet *f;
    uint8_t obj[64] = {0};
    at_wire_arg arg = {AT_DT_F32, 1, 1, {16}};
    at_wire_artifact a = {.obj = obj, .obj_size = sizeof obj, .entry = "k",
                          .triple = "x86_64-pc-linux-gnu", .n_args = 1, .args = &arg};
    int n = quick ? 2000 : 20000, reps = quick ? 1 : 5;
    double rate[8];

    if (start_tracker(&tr, url, sizeof url) != 0) return 1;
    for (int i = 0; i < N_BENCH_AGENTS; i++)
        if (start_agent(&ag[i], url, "ack", 1, NULL, 64) != 0) return 1;
    if (tn_fleet_open(
            &(tn_fleet_cfg){.tracker = url, .keys = &key, .n_keys = 1, .device_key = "ack"}, &f,
            err, sizeof err) != AT_OK) {
        fprintf(stderr, "bench_fleet: %s\n", err);
        return 1;
    }
    for (int r = 0; r < reps + 1; r++) { /* the first run warms up (and waits for agents) */
        char prefix[32], (*ids)[48];
        tn_fleet_job *jobs;
        double s;
        snprintf(prefix, sizeof prefix, "dispatch%d", r);
        jobs = make_jobs(&a, NULL, r == 0 ? 200 : n, prefix, &ids);
        s = run_jobs(f, jobs, r == 0 ? 200 : n, 120);
        free(jobs);
        free(ids);
        if (s < 0) return 1;
        if (r > 0) rate[r - 1] = n / s;
    }
    printf("bench fleet_dispatch %.0f jobs/s\n", at_median_sort(rate, reps));
    printf("bench fleet_dispatch/goal_5000 %.2f x\n", at_median_sort(rate, reps) / 5000.0);
    fflush(stdout);
    tn_fleet_close(f);
    for (int i = 0; i < N_BENCH_AGENTS; i++)
        stop_agent(&ag[i]);
    stop_tracker(&tr);
    return 0;
}

/* A trivial kernel built by our code generator, with its naive reference. */
static int trivial_artifact(kn_artifact **art)
{
    ss_dag *dag;
    ss_state *st;
    kn_ir *ir;
    kn_target t;
    char err[256];
    if (kn_op_build("add:shape=64", &dag, err, sizeof err) != AT_OK ||
        ss_state_new(dag, &st) != AT_OK || kn_lower(st, &ir, err, sizeof err) != AT_OK ||
        kn_target_host(&t) != AT_OK || kn_build(ir, &t, NULL, art, err, sizeof err) != AT_OK) {
        fprintf(stderr, "bench_fleet: %s\n", err);
        return -1;
    }
    kn_ir_free(ir);
    ss_state_free(st);
    ss_dag_unref(dag);
    return 0;
}

static int bench_e2e(int quick, const kn_artifact *art)
{
    runner tr, ag[2];
    char url[64], err[256];
    tn_fleet *f;
    at_wire_artifact a;
    at_wire_arg args[64];
    uint8_t ref_id[AT_WIRE_REFID_BYTES];
    int n = quick ? 64 : 512, reps = quick ? 1 : 5;
    double rate[8];

    if (start_tracker(&tr, url, sizeof url) != 0) return 1;
    for (int i = 0; i < 2; i++)
        if (start_agent(&ag[i], url, "sandbox", 0, launchers[i], 64) != 0) return 1;
    if (tn_fleet_open(
            &(tn_fleet_cfg){.tracker = url, .keys = &key, .n_keys = 1, .device_key = "sandbox"}, &f,
            err, sizeof err) != AT_OK)
        return 1;
    kn_artifact_to_wire(art, &a, args);
    tn_fleet_add_ref(f, art, ref_id);
    for (int r = 0; r < reps + 1; r++) {
        char prefix[32], (*ids)[48];
        tn_fleet_job *jobs;
        double s;
        snprintf(prefix, sizeof prefix, "e2e%d", r);
        jobs = make_jobs(&a, ref_id, r == 0 ? 64 : n, prefix, &ids);
        s = run_jobs(f, jobs, r == 0 ? 64 : n, 300);
        free(jobs);
        free(ids);
        if (s < 0) return 1;
        if (r > 0) rate[r - 1] = n / s;
    }
    printf("bench fleet_e2e_sandboxed %.0f jobs/s\n", at_median_sort(rate, reps));
    fflush(stdout);
    tn_fleet_close(f);
    for (int i = 0; i < 2; i++)
        stop_agent(&ag[i]);
    stop_tracker(&tr);
    return 0;
}

/* Median seconds of one job submitted alone and waited for. */
static double latency(tn_fleet *f, const kn_artifact *art, const char *name, int reps)
{
    at_wire_artifact a;
    at_wire_arg args[64];
    uint8_t ref_id[AT_WIRE_REFID_BYTES];
    double v[64];
    kn_artifact_to_wire(art, &a, args);
    tn_fleet_add_ref(f, art, ref_id);
    for (int r = 0; r < reps + 2; r++) {
        char prefix[32], (*ids)[48];
        tn_fleet_job *jobs;
        double s;
        snprintf(prefix, sizeof prefix, "%s%d", name, r);
        jobs = make_jobs(&a, ref_id, 1, prefix, &ids);
        s = run_jobs(f, jobs, 1, 60);
        free(jobs);
        free(ids);
        if (s < 0) return -1;
        if (r >= 2) /* two warm-ups: the reference is cached from then on */
            v[r - 2] = s;
    }
    return at_median_sort(v, reps);
}

static int bench_latency(int quick, const kn_artifact *art)
{
    runner tr, ag;
    char url[64], err[256];
    tn_fleet *f, *e;
    int reps = quick ? 3 : 21;
    double tcp, emb;

    if (start_tracker(&tr, url, sizeof url) != 0 ||
        start_agent(&ag, url, "lat", 0, launchers[0], 16) != 0)
        return 1;
    if (tn_fleet_open(
            &(tn_fleet_cfg){.tracker = url, .keys = &key, .n_keys = 1, .device_key = "lat"}, &f,
            err, sizeof err) != AT_OK)
        return 1;
    tcp = latency(f, art, "lat-tcp", reps);
    tn_fleet_close(f);
    stop_agent(&ag);
    stop_tracker(&tr);
    if (tn_fleet_open(&(tn_fleet_cfg){.embedded_threads = 1}, &e, err, sizeof err) != AT_OK)
        return 1;
    emb = latency(e, art, "lat-emb", reps);
    tn_fleet_close(e);
    if (tcp < 0 || emb < 0) return 1;
    printf("bench fleet_latency_tcp %.2f ms\n", tcp * 1e3);
    printf("bench fleet_latency_embedded %.2f ms\n", emb * 1e3);
    printf("bench fleet_latency_added %.2f ms\n", (tcp - emb) * 1e3);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0, rc = 0;
    uint8_t k[32];
    char err[256];
    kn_artifact *art = NULL;

    /* launchers first, while this process has one thread */
    for (int i = 0; i < 2; i++)
        if (agt_launcher_open(&launchers[i], err, sizeof err) != AT_OK) {
            fprintf(stderr, "bench_fleet: %s\n", err);
            return 1;
        }
    tn_fleet_prepare();
    at_log_set_level(AT_LOG_ERROR);
    memset(k, 0x42, sizeof k);
    at_wire_key_from_bytes(k, &key);
    rc |= bench_dispatch(quick);
    if (trivial_artifact(&art) != 0) return 1;
    rc |= bench_e2e(quick, art);
    rc |= bench_latency(quick, art);
    kn_artifact_free(art);
    for (int i = 0; i < 2; i++)
        agt_launcher_close(launchers[i]);
    return rc;
}
