/* tests/bench/bench_records.c -- speed of the records store.
**
**   bench records_insert_batched N rows/s     rec_put of 500 results per call, each call
**                                             one durable transaction (median of 3 runs)
**   bench records_insert_single N rows/s      one result per call (fsync-bound)
**   bench records_best_query_1M T ms          rec_best for one task and device on a store
**                                             of 1,000,000 records over 1,000 tasks (median
**                                             of 300 random tasks; goal: under 5 ms)
**   bench records_best_query_1M_p99 T ms      the 99th percentile of the same
**
** The 1M-record store is built once into build/<flavour>/bench/records_1m.db and reused
** while its counts match (delete it to rebuild).  Flags: --rows N --tasks N to change its
** size (a store of another size gets another file name). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "records/records.h"
#include "tuner/tuner.h"

static const rec_device dev_a = {"x86_64", "AMD EPYC 9654", 96, "6.1.0-18-amd64", ""};
static const rec_device dev_b = {"x86_64", "AMD EPYC 9654", 96, "6.1.0-21-amd64", ""};

static void die(const char *what, rec_store *st, at_err err)
{
    fprintf(stderr, "bench_records: %s: %s: %s\n", what, at_errname(err),
            st ? rec_store_errmsg(st) : "");
    exit(1);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void key_of(int i, char key[REC_KEY_LEN + 1])
{
    char text[32];
    snprintf(text, sizeof text, "bench-task-%d", i);
    at_sha256_hex(text, strlen(text), REC_KEY_LEN / 2, key);
}

static int64_t add_task(rec_store *st, int i)
{
    char key[REC_KEY_LEN + 1], dag[160];
    rec_task t;
    int64_t id;
    at_err err;
    key_of(i, key);
    snprintf(dag, sizeof dag,
             "input A[%d, 256] float32\ninput B[256, 256] float32\n"
             "C[i:%d, j:256] = sum[k:256](A[i, k] * B[k, j])\n", 64 + i, 64 + i);
    t.workload_key = key;
    t.target = "llvm -mtriple=x86_64-linux-gnu -mcpu=znver4";
    t.device_key = "bench-box";
    t.dag = dag;
    t.flops = 2.0 * (64 + i) * 256 * 256;
    if ((err = rec_task_add(st, &t, &id)) != AT_OK)
        die("task", st, err);
    return id;
}

/* Fill rows[0..n) with results number first..first+n of 'task' (states ~250 bytes). */
typedef struct batch {
    rec_result *rows;
    char (*jobs)[40];
    char (*states)[320];
    double (*costs)[3];
} batch;

static void batch_init(batch *b, int n)
{
    b->rows = at_calloc((size_t)n, sizeof *b->rows);
    b->jobs = at_calloc((size_t)n, sizeof *b->jobs);
    b->states = at_calloc((size_t)n, sizeof *b->states);
    b->costs = at_calloc((size_t)n, sizeof *b->costs);
    if (!b->rows || !b->jobs || !b->states || !b->costs)
        die("out of memory", NULL, AT_ENOMEM);
}

static void batch_fini(batch *b)
{
    at_free(b->rows);
    at_free(b->jobs);
    at_free(b->states);
    at_free(b->costs);
}

static void batch_fill(batch *b, int n, const int64_t *tasks, int n_tasks, long first,
                       const char *prefix, at_rng *rng)
{
    for (int k = 0; k < n; k++) {
        long i = first + k;
        rec_result *r = &b->rows[k];
        double c = 1e-4 * (1 + (double)at_rng_below(rng, 100000) / 1000.0);
        memset(r, 0, sizeof *r);
        snprintf(b->jobs[k], sizeof b->jobs[k], "%s-%ld", prefix, i);
        snprintf(b->states[k], sizeof b->states[k],
                 "{\"v\":1,\"steps\":[[\"SP\",2,1,256,[%d,%d],1],[\"SP\",2,4,256,[%d],1],"
                 "[\"AN\",2,0,3],[\"PR\",2,0,\"auto_unroll_max_step$%d\"],"
                 "[\"AN\",2,3,2]],\"seq\":%ld}",
                 1 << (i % 4), 4 << (i % 5 % 4), 1 << (i % 7), 16 << (i % 3), i);
        b->costs[k][0] = c;
        b->costs[k][1] = c * 1.02;
        b->costs[k][2] = c * 0.99;
        r->task_id = tasks[i % n_tasks];
        r->job_id = b->jobs[k];
        r->state = b->states[k];
        r->costs = b->costs[k];
        r->n_costs = 3;
        /* per task: one trial in ten failed, one in ten on an updated OS (another
        ** fingerprint) */
        r->status = (i / n_tasks) % 10 == 9 ? AT_MEASURE_RUN_TIMEOUT : 0;
        r->device = (i / n_tasks) % 10 == 3 ? &dev_b : &dev_a;
        r->agent = "bench-agent";
        r->tuner_version = TN_VERSION;
        r->trial = i / n_tasks;
        r->measured_at = 1.8e9 + (double)i;
    }
}

static void bench_dir(char out[PATH_MAX])
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    char *p;
    if (n > 0) {
        exe[n] = 0;
        if ((p = strstr(exe, "/tests/bench/")) != NULL) {
            *p = 0;
            snprintf(out, PATH_MAX, "%.*s/bench", PATH_MAX - 8, exe);
            mkdir(out, 0755);
            return;
        }
    }
    snprintf(out, PATH_MAX, "/tmp");
}

static void remove_store(const char *path)
{
    char p[PATH_MAX + 16];
    unlink(path);
    snprintf(p, sizeof p, "%.*s-wal", PATH_MAX - 1, path);
    unlink(p);
    snprintf(p, sizeof p, "%.*s-shm", PATH_MAX - 1, path);
    unlink(p);
}

/* rows/s of inserting 'total' rows 'per_call' at a time into a fresh store. */
static double insert_rate(const char *path, long total, int per_call)
{
    rec_store *st;
    char err[512];
    int64_t tasks[100];
    batch b;
    at_rng rng;
    double t0, t1;
    at_err e;
    remove_store(path);
    if ((e = rec_store_open(path, REC_OPEN_CREATE, &st, err, sizeof err)) != AT_OK) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    for (int i = 0; i < 100; i++)
        tasks[i] = add_task(st, i);
    at_rng_seed(&rng, 1);
    batch_init(&b, per_call);
    t0 = at_time_mono_s();
    for (long i = 0; i < total; i += per_call) {
        batch_fill(&b, per_call, tasks, 100, i, "ins", &rng);
        if ((e = rec_put(st, b.rows, per_call, NULL)) != AT_OK)
            die("insert", st, e);
    }
    t1 = at_time_mono_s();
    batch_fini(&b);
    rec_store_close(st);
    remove_store(path);
    return (double)total / (t1 - t0);
}

static void build_big(const char *path, long n_rows, int n_tasks)
{
    rec_store *st;
    char err[512];
    int64_t *tasks = at_calloc((size_t)n_tasks, sizeof *tasks);
    batch b;
    at_rng rng;
    at_err e;
    const int per_tx = 5000, per_call = 500;
    double t0 = at_time_mono_s();
    remove_store(path);
    fprintf(stderr, "# building %s: %ld records over %d tasks (once)\n", path, n_rows, n_tasks);
    if ((e = rec_store_open(path, REC_OPEN_CREATE, &st, err, sizeof err)) != AT_OK) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    for (int i = 0; i < n_tasks; i++)
        tasks[i] = add_task(st, i);
    at_rng_seed(&rng, 2);
    batch_init(&b, per_call);
    for (long i = 0; i < n_rows;) {
        if ((e = rec_tx_begin(st)) != AT_OK)
            die("begin", st, e);
        for (int k = 0; k < per_tx / per_call && i < n_rows; k++, i += per_call) {
            int n = (int)(n_rows - i < per_call ? n_rows - i : per_call);
            batch_fill(&b, n, tasks, n_tasks, i, "big", &rng);
            if ((e = rec_put(st, b.rows, n, NULL)) != AT_OK)
                die("insert", st, e);
        }
        if ((e = rec_tx_commit(st)) != AT_OK)
            die("commit", st, e);
    }
    batch_fini(&b);
    at_free(tasks);
    rec_store_close(st);
    fprintf(stderr, "# built in %.1f s\n", at_time_mono_s() - t0);
}

int main(int argc, char **argv)
{
    char dir[PATH_MAX], path[PATH_MAX + 64], err[512];
    long n_rows = 1000000;
    int n_tasks = 1000, n_queries = 300;
    double rates[3], *lat;
    rec_store *st;
    int64_t have_rows = -1, have_tasks = -1;
    at_rng rng;
    at_err e;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--rows") == 0 && i + 1 < argc)
            n_rows = atol(argv[++i]);
        else if (strcmp(argv[i], "--tasks") == 0 && i + 1 < argc)
            n_tasks = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_records [--rows N] [--tasks N]\n");
            return 2;
        }
    }
    if (n_rows < 1 || n_tasks < 1) {
        fprintf(stderr, "bench_records: --rows and --tasks must be >= 1\n");
        return 2;
    }
    bench_dir(dir);

    /* inserts */
    snprintf(path, sizeof path, "%s/insert.db", dir);
    for (int r = 0; r < 3; r++)
        rates[r] = insert_rate(path, 100000, 500);
    qsort(rates, 3, sizeof rates[0], cmp_double);
    printf("bench records_insert_batched %.0f rows/s\n", rates[1]);
    fflush(stdout);
    printf("bench records_insert_single %.0f rows/s\n", insert_rate(path, 2000, 1));
    fflush(stdout);

    /* best query on the big store */
    if (n_rows == 1000000 && n_tasks == 1000)
        snprintf(path, sizeof path, "%s/records_1m.db", dir);
    else
        snprintf(path, sizeof path, "%s/records_%ld_%d.db", dir, n_rows, n_tasks);
    if (rec_store_open(path, REC_OPEN_READONLY, &st, err, sizeof err) == AT_OK) {
        rec_store_count(st, &have_rows, &have_tasks, NULL, NULL);
        rec_store_close(st);
    }
    if (have_rows != n_rows || have_tasks != n_tasks)
        build_big(path, n_rows, n_tasks);
    if ((e = rec_store_open(path, REC_OPEN_READONLY, &st, err, sizeof err)) != AT_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    lat = at_calloc((size_t)n_queries, sizeof *lat);
    at_rng_seed(&rng, 3);
    for (int k = -20; k < n_queries; k++) { /* 20 warm-up queries */
        char key[REC_KEY_LEN + 1];
        rec_best_query q;
        rec_best_result *res;
        double t0;
        key_of((int)at_rng_below(&rng, (uint64_t)n_tasks), key);
        memset(&q, 0, sizeof q);
        q.workload_key = key;
        q.device_key = "bench-box";
        q.top = 1;
        q.replay = md_replay_check;
        t0 = at_time_mono_s();
        if ((e = rec_best(st, &q, &res)) != AT_OK)
            die("best", st, e);
        if (k >= 0)
            lat[k] = (at_time_mono_s() - t0) * 1e3;
        if (res->n_rows < 1)
            die("best found nothing", st, AT_ENOTFOUND);
        rec_best_free(res);
    }
    qsort(lat, (size_t)n_queries, sizeof *lat, cmp_double);
    printf("bench records_best_query_1M %.3f ms\n", lat[n_queries / 2]);
    printf("bench records_best_query_1M_p99 %.3f ms\n", lat[n_queries * 99 / 100]);
    at_free(lat);
    rec_store_close(st);
    return 0;
}
