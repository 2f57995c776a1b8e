/* tests/kernels/test_rt_pool.c -- the thread pool: task 0 of every launch runs on the
** caller, a worker's task at most once (a late worker does not join a launch that is over:
** the tasks claim their chunks dynamically, as generated kernels do, and every chunk of
** every launch runs exactly once), errors propagate, nested launches run serially,
** sleeping workers wake up and join. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/kernels_rt.h"

enum { MAX_T = 8 };

typedef struct count_ctx {
    int64_t runs[MAX_T]; /* task t writes only runs[t]: no race */
    int32_t n_tasks_seen[MAX_T];
    pthread_t thread[MAX_T];
    int64_t launch; /* the launch number, checked by every task */
    int64_t seen_launch[MAX_T];
} count_ctx;

static int32_t count_task(void *closure, int32_t t, int32_t n)
{
    count_ctx *c = closure;
    if (t < 0 || t >= MAX_T)
        return 99;
    c->runs[t]++;
    c->n_tasks_seen[t] = n;
    c->thread[t] = pthread_self();
    /* task 0 (the caller) every launch; a worker's at most once a launch (it may skip
    ** one it came late for) */
    if (t == 0 ? c->seen_launch[t] + 1 != c->launch : c->seen_launch[t] >= c->launch)
        return 98;
    c->seen_launch[t] = c->launch;
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* n_launches launches in batches of 'batch'; the mean time per launch of the fastest
** batch (the least disturbed by whatever else runs on the machine). */
static void run_launches(int n_threads, int n_launches, int batch, double *us_per_launch)
{
    kn_rt_pool *pool = NULL;
    const kn_rt_par *par;
    static count_ctx c;
    double best = 1e30;
    memset(&c, 0, sizeof c);
    assert_int_equal(kn_rt_pool_new(n_threads, &pool), AT_OK);
    par = kn_rt_pool_par(pool);
    assert_int_equal(par->n_threads, n_threads);
    for (int i = 0; i < n_launches;) {
        double t0 = now_s();
        int end = AT_MIN(i + batch, n_launches), n = end - i;
        for (; i < end; i++) {
            c.launch = i + 1;
            assert_int_equal(par->launch(par, count_task, &c), 0);
        }
        best = AT_MIN(best, (now_s() - t0) * 1e6 / n);
    }
    *us_per_launch = best;
    assert_int_equal(c.runs[0], n_launches);
    for (int t = 0; t < n_threads; t++) {
        assert_true(c.runs[t] <= n_launches);
        if (c.runs[t])
            assert_int_equal(c.n_tasks_seen[t], n_threads);
    }
    for (int t = n_threads; t < MAX_T; t++)
        assert_int_equal(c.runs[t], 0);
    if (n_threads > 1) {
        printf("# %d threads: the workers joined", n_threads);
        for (int t = 1; t < n_threads; t++)
            printf(" %.1f%%", 100.0 * (double)c.runs[t] / n_launches);
        printf(" of %d launches\n", n_launches);
    }
    assert_true(pthread_equal(c.thread[0], pthread_self()));     /* task 0: the caller */
    for (int t = 1; t < n_threads; t++)
        if (c.runs[t])
            assert_false(pthread_equal(c.thread[t], pthread_self())); /* the others: workers */
    kn_rt_pool_free(pool);
}

/* The 1-minute load average, or 0 if unknown. */
static double load_avg(void)
{
    double l = 0;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = 0;
        fclose(f);
    }
    return l;
}

static void test_pool_many_launches(void **unused)
{
    double us, load, bound;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    (void)unused;
    run_launches(2, 100000, 5000, &us);
    /* ~0.2 us here (release or ASan) on a quiet machine; a launch needs both threads on
    ** a CPU at once, so when other processes keep the CPUs busy it costs scheduling
    ** delays that say nothing about the pool: then only a loose bound */
    load = load_avg();
    bound = load <= (double)(ncpu > 0 ? ncpu : 1) ? 20.0 : 500.0;
    printf("# 2 threads: %.2f us per launch (100000 launches, fastest batch of 5000; "
           "load %.1f, bound %.0f us)\n",
           us, load, bound);
    assert_true(us < bound);
    run_launches(1, 1000, 1000, &us);
    run_launches(4, 5000, 1000, &us); /* more threads than cores here: still correct */
    printf("# 4 threads: %.2f us per launch (5000 launches, fastest batch of 1000)\n", us);
}

/* Tests whose every task must run hold task 0 until the workers have joined (a launch no
** longer waits for a worker that has not: up to 2 s here). */
static _Atomic int g_joined;

static void all_join(int32_t t, int32_t n)
{
    if (t > 0) {
        atomic_fetch_add(&g_joined, 1);
        return;
    }
    for (int i = 0; i < 200000 && atomic_load(&g_joined) < n - 1; i++)
        usleep(10);
    atomic_store(&g_joined, 0);
}

static int32_t failing_task(void *closure, int32_t t, int32_t n)
{
    const int32_t *fail_rc = closure; /* per task */
    all_join(t, n);
    return fail_rc[t];
}

static void test_pool_error_propagation(void **unused)
{
    kn_rt_pool *pool = NULL;
    const kn_rt_par *par;
    int32_t rc[4] = {0, 0, 0, 0};
    (void)unused;
    assert_int_equal(kn_rt_pool_new(4, &pool), AT_OK);
    par = kn_rt_pool_par(pool);
    assert_int_equal(par->launch(par, failing_task, rc), 0);
    rc[2] = 7;
    assert_int_equal(par->launch(par, failing_task, rc), 7);
    rc[2] = 0;
    assert_int_equal(par->launch(par, failing_task, rc), 0); /* no stale error */
    rc[0] = -3;
    assert_int_equal(par->launch(par, failing_task, rc), -3);
    rc[0] = 5;
    rc[3] = 5;
    assert_int_equal(par->launch(par, failing_task, rc), 5);
    rc[0] = 1;
    rc[3] = 2; /* two failures: one of them, whichever came first */
    for (int i = 0; i < 100; i++) {
        int32_t r = par->launch(par, failing_task, rc);
        assert_true(r == 1 || r == 2);
    }
    assert_int_equal(par->launch(par, NULL, rc), -1);
    kn_rt_pool_free(pool);
}

typedef struct nest_ctx {
    const kn_rt_par *par;
    int32_t inner_n[MAX_T];
    int32_t inner_id[MAX_T];
    int inner_same_thread[MAX_T];
    int32_t outer_n[MAX_T];
} nest_ctx;

typedef struct inner_ctx {
    pthread_t outer_thread;
    int32_t n, id;
    int same;
} inner_ctx;

static int32_t inner_task(void *closure, int32_t t, int32_t n)
{
    inner_ctx *ic = closure;
    ic->n = n;
    ic->id = t;
    ic->same = pthread_equal(ic->outer_thread, pthread_self());
    return t == 0 ? 0 : 1;
}

static int32_t outer_task(void *closure, int32_t t, int32_t n)
{
    nest_ctx *c = closure;
    inner_ctx ic = {pthread_self(), -1, -1, 0};
    int32_t r;
    all_join(t, n);
    r = c->par->launch(c->par, inner_task, &ic);
    c->outer_n[t] = n;
    c->inner_n[t] = ic.n;
    c->inner_id[t] = ic.id;
    c->inner_same_thread[t] = ic.same;
    return r;
}

static void test_pool_nested_launch(void **unused)
{
    kn_rt_pool *pool = NULL;
    nest_ctx c;
    (void)unused;
    assert_int_equal(kn_rt_pool_new(3, &pool), AT_OK);
    memset(&c, 0, sizeof c);
    c.par = kn_rt_pool_par(pool);
    for (int rep = 0; rep < 200; rep++) {
        assert_int_equal(c.par->launch(c.par, outer_task, &c), 0);
        for (int t = 0; t < 3; t++) {
            assert_int_equal(c.outer_n[t], 3);
            assert_int_equal(c.inner_n[t], 1); /* serial: one task ... */
            assert_int_equal(c.inner_id[t], 0);
            assert_true(c.inner_same_thread[t]); /* ... on the calling thread */
        }
    }
    /* the serial runtime nests the same way */
    c.par = kn_rt_serial_par();
    assert_int_equal(c.par->n_threads, 1);
    assert_int_equal(c.par->launch(c.par, outer_task, &c), 0);
    assert_int_equal(c.outer_n[0], 1);
    assert_int_equal(c.inner_n[0], 1);
    kn_rt_pool_free(pool);
}

/* Task 0 holds the launch open (up to 2 s) until worker 1 has joined it. */
typedef struct wake_ctx {
    _Atomic int joined;
    int64_t runs[2];
} wake_ctx;

static int32_t wait_for_worker_task(void *closure, int32_t t, int32_t n)
{
    wake_ctx *c = closure;
    (void)n;
    c->runs[t]++;
    if (t == 1) {
        atomic_store(&c->joined, 1);
        return 0;
    }
    for (int i = 0; i < 200000 && !atomic_load(&c->joined); i++)
        usleep(10);
    return atomic_load(&c->joined) ? 0 : 97;
}

static void test_pool_wakes_sleeping_workers(void **unused)
{
    kn_rt_pool *pool = NULL;
    const kn_rt_par *par;
    static wake_ctx c;
    (void)unused;
    assert_int_equal(kn_rt_pool_new(2, &pool), AT_OK);
    par = kn_rt_pool_par(pool);
    for (int i = 0; i < 40; i++) {
        usleep(i % 2 ? 2000 : 200); /* past the spin time: the worker sleeps on its futex */
        atomic_store(&c.joined, 0);
        assert_int_equal(par->launch(par, wait_for_worker_task, &c), 0);
    }
    assert_int_equal(c.runs[0], 40);
    assert_int_equal(c.runs[1], 40);
    kn_rt_pool_free(pool);
}

static int32_t trivial_task(void *closure, int32_t t, int32_t n)
{
    (void)closure;
    (void)t;
    (void)n;
    return 0;
}

/* kn_rt_pool_counts: launches the worker joined are not short-handed; a launch of a task
** that ends at once, after the worker fell asleep, is over before the worker wakes (it
** misses it); a serial runtime counts nothing. */
static void test_pool_counts_missed_launches(void **unused)
{
    kn_rt_pool *pool = NULL;
    const kn_rt_par *par;
    static wake_ctx c;
    uint64_t launches = 99, n_short = 99, l0, s0;
    int missed = 0;
    (void)unused;
    kn_rt_pool_counts(kn_rt_serial_par(), &launches, &n_short);
    assert_true(launches == 0 && n_short == 0);
    kn_rt_pool_counts(NULL, &launches, NULL);
    assert_int_equal(launches, 0);
    assert_int_equal(kn_rt_pool_new(2, &pool), AT_OK);
    par = kn_rt_pool_par(pool);
    kn_rt_pool_counts(par, &launches, &n_short);
    assert_true(launches == 0 && n_short == 0);
    for (int i = 0; i < 20; i++) {
        if (i % 4 == 0)
            usleep(1000);
        atomic_store(&c.joined, 0);
        assert_int_equal(par->launch(par, wait_for_worker_task, &c), 0);
    }
    kn_rt_pool_counts(par, &launches, &n_short);
    assert_int_equal(launches, 20);
    assert_int_equal(n_short, 0);
    for (int i = 0; i < 50 && !missed; i++) {
        usleep(1000); /* past the spin: the worker sleeps */
        kn_rt_pool_counts(par, &l0, &s0);
        assert_int_equal(par->launch(par, trivial_task, NULL), 0);
        kn_rt_pool_counts(par, &launches, &n_short);
        assert_int_equal(launches, l0 + 1);
        missed = n_short == s0 + 1;
    }
    assert_true(missed);
    kn_rt_pool_free(pool);
}

/* kn_rt_pool_pin: the caller ends on cpus[0] alone; bad lists are refused. */
static void test_pool_pin(void **unused)
{
    kn_rt_pool *pool = NULL;
    cpu_set_t own, now;
    int cpus[2], n = 0, bad[1] = {-1};
    static wake_ctx c;
    (void)unused;
    assert_int_equal(sched_getaffinity(0, sizeof own, &own), 0);
    for (int k = 0; k < CPU_SETSIZE && n < 2; k++)
        if (CPU_ISSET(k, &own))
            cpus[n++] = k;
    assert_int_equal(kn_rt_pool_new(2, &pool), AT_OK);
    assert_int_equal(kn_rt_pool_pin(NULL, cpus, n), AT_EINVAL);
    assert_int_equal(kn_rt_pool_pin(pool, NULL, n), AT_EINVAL);
    assert_int_equal(kn_rt_pool_pin(pool, cpus, 0), AT_EINVAL);
    assert_int_equal(kn_rt_pool_pin(pool, bad, 1), AT_EINVAL);
    assert_int_equal(kn_rt_pool_pin(pool, cpus, n), AT_OK);
    assert_int_equal(sched_getaffinity(0, sizeof now, &now), 0);
    assert_int_equal(CPU_COUNT(&now), 1);
    assert_true(CPU_ISSET(cpus[0], &now));
    /* the pinned pool still runs both tasks */
    atomic_store(&c.joined, 0);
    memset(c.runs, 0, sizeof c.runs);
    assert_int_equal(kn_rt_pool_par(pool)->launch(kn_rt_pool_par(pool), wait_for_worker_task, &c),
                     0);
    assert_int_equal(c.runs[0] + c.runs[1], 2);
    assert_int_equal(sched_setaffinity(0, sizeof own, &own), 0);
    kn_rt_pool_free(pool);
}

/* As generated kernels do: chunks of about n / (4 n_tasks) claimed from a counter. */
enum { MAX_CHUNKS = 64 };
typedef struct sum_ctx {
    const float *x;
    int64_t n;
    _Atomic int64_t next;
    double part[MAX_CHUNKS];
    int done[MAX_CHUNKS];
} sum_ctx;

static int32_t sum_task(void *closure, int32_t t, int32_t n_tasks)
{
    sum_ctx *c = closure;
    int64_t want = AT_MIN(c->n, 4 * (int64_t)n_tasks), cs = (c->n + want - 1) / want;
    int64_t n_chunks = (c->n + cs - 1) / cs, k;
    (void)t;
    while ((k = atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed)) < n_chunks) {
        double s = 0;
        for (int64_t i = k * cs; i < AT_MIN((k + 1) * cs, c->n); i++)
            s += c->x[i];
        c->part[k] = s;
        c->done[k]++;
    }
    return 0;
}

static void test_pool_chunked_sum(void **unused)
{
    enum { N = 100003 };
    float *x = kn_rt_alloc(N * sizeof *x);
    kn_rt_pool *pool = NULL;
    double ref = 0;
    (void)unused;
    assert_non_null(x);
    kn_rt_fill(x, AT_DT_F32, N, 3, 0);
    for (int i = 0; i < N; i++)
        ref += x[i];
    for (int nt = 1; nt <= 5; nt++) {
        const kn_rt_par *par;
        assert_int_equal(kn_rt_pool_new(nt, &pool), AT_OK);
        par = kn_rt_pool_par(pool);
        /* many launches: each covers every chunk once, whichever tasks joined */
        for (int rep = 0; rep < 300; rep++) {
            static sum_ctx c;
            double s = 0;
            int64_t n_chunks;
            memset(&c, 0, sizeof c);
            c.x = x;
            c.n = N;
            assert_int_equal(par->launch(par, sum_task, &c), 0);
            n_chunks = (N + (N + 4 * nt - 1) / (4 * nt) - 1) / ((N + 4 * nt - 1) / (4 * nt));
            for (int k = 0; k < MAX_CHUNKS; k++) {
                assert_int_equal(c.done[k], k < n_chunks ? 1 : 0);
                s += c.part[k];
            }
            assert_true(fabs(s - ref) < 1e-6 * (1 + fabs(ref)));
        }
        kn_rt_pool_free(pool);
    }
    kn_rt_free(x);
}

static void test_pool_new_args_and_oom(void **unused)
{
    kn_rt_pool *pool = (kn_rt_pool *)1;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    (void)unused;
    assert_int_equal(kn_rt_pool_new(-1, &pool), AT_EINVAL);
    assert_null(pool);
    assert_int_equal(kn_rt_pool_new(100000, &pool), AT_EINVAL);
    assert_int_equal(kn_rt_pool_new(2, NULL), AT_EINVAL);
    assert_int_equal(kn_rt_pool_new(0, &pool), AT_OK);
    assert_int_equal(kn_rt_pool_par(pool)->n_threads, ncpu > 0 ? ncpu : 1);
    kn_rt_pool_free(pool);
    kn_rt_pool_free(NULL);
    assert_int_equal(kn_rt_pool_par(NULL)->n_threads, 1);
    for (size_t limit = 0;; limit++) {
        long live = at_test_live_allocs();
        at_err err;
        pool = NULL;
        at_test_alloc_limit(limit);
        err = kn_rt_pool_new(3, &pool);
        at_test_alloc_limit(SIZE_MAX);
        if (err == AT_OK) {
            kn_rt_pool_free(pool);
            assert_int_equal(at_test_live_allocs(), live);
            break;
        }
        assert_int_equal(err, AT_ENOMEM);
        assert_null(pool);
        assert_int_equal(at_test_live_allocs(), live);
    }
    for (int i = 0; i < 50; i++) { /* create and join quickly, with and without a launch */
        static wake_ctx c;
        assert_int_equal(kn_rt_pool_new(2, &pool), AT_OK);
        if (i % 2) {
            memset(&c, 0, sizeof c);
            assert_int_equal(kn_rt_pool_par(pool)->launch(kn_rt_pool_par(pool),
                                                          wait_for_worker_task, &c),
                             0);
            assert_int_equal(c.runs[1], 1);
        }
        kn_rt_pool_free(pool);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_many_launches),
        cmocka_unit_test(test_pool_error_propagation),
        cmocka_unit_test(test_pool_nested_launch),
        cmocka_unit_test(test_pool_wakes_sleeping_workers),
        cmocka_unit_test(test_pool_counts_missed_launches),
        cmocka_unit_test(test_pool_pin),
        cmocka_unit_test(test_pool_chunked_sum),
        cmocka_unit_test(test_pool_new_args_and_oom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
