/* tests/kernels/test_rt_time.c -- kn_rt_time (costs, growth of 'number', a failing
** kernel, bad options) and kn_rt_flush. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels_rt.h"

static long n_calls;   /* calls of the test kernels */
static long fail_at;   /* count_kernel returns 5 on this call (0: never) */

static void spin_us(double us)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do
        clock_gettime(CLOCK_MONOTONIC, &b);
    while ((double)(b.tv_sec - a.tv_sec) * 1e6 + (double)(b.tv_nsec - a.tv_nsec) * 1e-3 < us);
}

/* A kernel that takes about 20 us and counts its calls. */
static int32_t count_kernel(void *const *bufs, void *ws, const kn_rt_par *par)
{
    (void)ws;
    (void)par;
    n_calls++;
    if (bufs && bufs[0])
        ((float *)bufs[0])[0] += 1.0f;
    spin_us(20);
    return n_calls == fail_at ? 5 : 0;
}

static void test_time_costs_and_growth(void **unused)
{
    kn_rt_time_opts o = {.number = 1, .repeat = 3, .min_repeat_ms = 5, .n_warmup = 2};
    double costs[3];
    int32_t rc = -1;
    (void)unused;
    n_calls = 0;
    fail_at = 0;
    assert_int_equal(kn_rt_time(count_kernel, NULL, NULL, kn_rt_serial_par(), &o, 0, NULL,
                                costs, &rc),
                     AT_OK);
    assert_int_equal(rc, 0);
    for (int i = 0; i < 3; i++) {
        printf("# cost[%d] = %.2f us\n", i, costs[i] * 1e6);
        assert_true(costs[i] >= 19e-6 && costs[i] < 1e-2); /* seconds per call */
    }
    /* 5 ms of 20 us calls needs number >= 250 per repeat: it grew from 1 */
    assert_true(n_calls >= 2 + 3 * 200);
    assert_true(n_calls < 2 + 20 * 250 * 3);

    /* min_repeat_ms 0: number * repeat timed calls after a warm-up of n_warmup calls and
    ** 2 ms at least (about 100 calls of 20 us) */
    n_calls = 0;
    o.min_repeat_ms = 0;
    o.number = 4;
    assert_int_equal(kn_rt_time(count_kernel, NULL, NULL, NULL, &o, 0, NULL, costs, &rc),
                     AT_OK);
    printf("# %ld calls with a warm-up of 2 calls (and 2 ms)\n", n_calls);
    assert_true(n_calls > 2 + 4 * 3 + 5 && n_calls <= 2 + 4 * 3 + 101);
    assert_true(costs[0] > 0 && costs[1] > 0 && costs[2] > 0);

    /* no warm-up asked for: exactly number * repeat calls */
    n_calls = 0;
    o.n_warmup = 0;
    assert_int_equal(kn_rt_time(count_kernel, NULL, NULL, NULL, &o, 0, NULL, costs, &rc),
                     AT_OK);
    assert_int_equal(n_calls, 4 * 3);
}

static int32_t empty_kernel(void *const *bufs, void *ws, const kn_rt_par *par)
{
    (void)bufs;
    (void)ws;
    (void)par;
    n_calls++;
    return 0;
}

static void test_time_number_capped(void **unused)
{
    kn_rt_time_opts o = {.number = 1, .repeat = 1, .min_repeat_ms = 1e9, .n_warmup = 0};
    double cost;
    int32_t rc;
    (void)unused;
    n_calls = 0;
    /* one repeat can never last 1e9 ms: growth stops at 2^20 calls */
    assert_int_equal(kn_rt_time(empty_kernel, NULL, NULL, NULL, &o, 0, NULL, &cost, &rc),
                     AT_OK);
    assert_int_equal(rc, 0);
    assert_true(cost > 0);
    assert_true(n_calls > (1 << 20) && n_calls < 4 * (1 << 20));
}

static void test_time_failing_kernel(void **unused)
{
    kn_rt_time_opts o = {.number = 2, .repeat = 4, .min_repeat_ms = 0, .n_warmup = 0};
    double costs[4] = {-1, -1, -1, -1};
    int32_t rc = 0;
    (void)unused;
    n_calls = 0;
    fail_at = 3; /* repeat 0 (2 calls), then the first call of repeat 1 */
    assert_int_equal(kn_rt_time(count_kernel, NULL, NULL, NULL, &o, 0, NULL, costs, &rc),
                     AT_OK);
    assert_int_equal(rc, 5);
    assert_int_equal(n_calls, 3); /* stopped at once */
    assert_true(costs[0] > 0);
    assert_true(costs[1] == 0 && costs[3] == 0);
    n_calls = 0;
    o.n_warmup = 1;
    fail_at = 1; /* during warm-up */
    assert_int_equal(kn_rt_time(count_kernel, NULL, NULL, NULL, &o, 0, NULL, costs, &rc),
                     AT_OK);
    assert_int_equal(rc, 5);
    assert_int_equal(n_calls, 1);
    fail_at = 0;
}

static void test_time_bad_options(void **unused)
{
    kn_rt_time_opts o = {.number = 1, .repeat = 1, .min_repeat_ms = 0};
    double cost;
    int32_t rc;
    (void)unused;
    assert_int_equal(kn_rt_time(NULL, NULL, NULL, NULL, &o, 0, NULL, &cost, &rc), AT_EINVAL);
    assert_int_equal(kn_rt_time(empty_kernel, NULL, NULL, NULL, NULL, 0, NULL, &cost, &rc),
                     AT_EINVAL);
    assert_int_equal(kn_rt_time(empty_kernel, NULL, NULL, NULL, &o, 0, NULL, NULL, &rc),
                     AT_EINVAL);
    o.number = 0;
    assert_int_equal(kn_rt_time(empty_kernel, NULL, NULL, NULL, &o, 0, NULL, &cost, &rc),
                     AT_EINVAL);
    o.number = 1;
    o.repeat = 0;
    assert_int_equal(kn_rt_time(empty_kernel, NULL, NULL, NULL, &o, 0, NULL, &cost, &rc),
                     AT_EINVAL);
    o.repeat = 1;
    o.min_repeat_ms = -1;
    assert_int_equal(kn_rt_time(empty_kernel, NULL, NULL, NULL, &o, 0, NULL, &cost, &rc),
                     AT_EINVAL);
    o.min_repeat_ms = 0;
    o.flush_cache = 1;
    assert_int_equal(kn_rt_time(empty_kernel, NULL, NULL, NULL, &o, 1, NULL, &cost, &rc),
                     AT_EINVAL);
}

static void test_time_flush(void **unused)
{
    enum { N = 1 << 20 };
    float *a = kn_rt_alloc(N * sizeof *a);
    void *bufs[1];
    size_t n_bytes[1] = {N * sizeof *a};
    kn_rt_time_opts o = {.number = 3, .repeat = 2, .min_repeat_ms = 0, .flush_cache = 1};
    double costs[2];
    int32_t rc;
    (void)unused;
    assert_non_null(a);
    kn_rt_fill(a, AT_DT_F32, N, 1, 0);
    bufs[0] = a;
    {
        float before = a[12345];
        kn_rt_flush(a, N * sizeof *a); /* eviction keeps the contents */
        kn_rt_flush((char *)a + 3, 100);
        kn_rt_flush(NULL, 100);
        kn_rt_flush(a, 0);
        assert_true(a[12345] == before);
    }
    n_calls = 0;
    a[0] = 0;
    assert_int_equal(kn_rt_time(count_kernel, bufs, NULL, NULL, &o, 1, n_bytes, costs, &rc),
                     AT_OK);
    assert_int_equal(rc, 0);
    assert_true(a[0] == 6.0f); /* the kernel's writes survive the flushes */
    assert_true(costs[0] > 0 && costs[1] > 0);
    kn_rt_free(a);
}

static int32_t noop_task(void *closure, int32_t t, int32_t n)
{
    (void)closure;
    (void)t;
    (void)n;
    return 0;
}

/* A kernel whose one launch a sleeping worker misses: it waits 1 ms (past the workers'
** spin) and then launches a task that ends at once. */
static int32_t sleepy_kernel(void *const *bufs, void *ws, const kn_rt_par *par)
{
    struct timespec ts = {0, 1000000};
    (void)bufs;
    (void)ws;
    n_calls++;
    nanosleep(&ts, NULL);
    return par->launch(par, noop_task, NULL);
}

/* Repeats with a missed launch are timed again, max_redo times in all; only then is one
** kept (and counted); a pool-less runtime redoes nothing. */
static void test_time_redo_missed_launches(void **unused)
{
    kn_rt_pool *pool = NULL;
    kn_rt_time_info info = {-1, -1};
    kn_rt_time_opts o = {.number = 1, .repeat = 3, .max_redo = 0, .info = &info};
    double costs[3];
    int32_t rc;
    uint64_t launches, n_short;
    (void)unused;
    assert_int_equal(kn_rt_pool_new(2, &pool), AT_OK);
    /* no redo: whatever ran short-handed is kept and counted */
    n_calls = 0;
    assert_int_equal(kn_rt_time(sleepy_kernel, NULL, NULL, kn_rt_pool_par(pool), &o, 0, NULL,
                                costs, &rc), AT_OK);
    assert_int_equal(rc, 0);
    assert_int_equal(info.n_redone, 0);
    assert_int_equal(n_calls, 3);
    kn_rt_pool_counts(kn_rt_pool_par(pool), &launches, &n_short);
    assert_int_equal(launches, 3);
    assert_int_equal(info.n_short, (int)n_short); /* every launch is its own repeat */
    /* up to 4 redone: a repeat is kept short-handed only once they are spent */
    for (int i = 0; i < 3; i++) {
        o.max_redo = 4;
        info.n_redone = info.n_short = -1;
        n_calls = 0;
        assert_int_equal(kn_rt_time(sleepy_kernel, NULL, NULL, kn_rt_pool_par(pool), &o, 0,
                                    NULL, costs, &rc), AT_OK);
        assert_true(info.n_redone >= 0 && info.n_redone <= 4);
        assert_true(info.n_short == 0 || info.n_redone == 4);
        assert_int_equal(n_calls, 3 + info.n_redone);
        assert_true(costs[0] > 0.9e-3 && costs[1] > 0.9e-3 && costs[2] > 0.9e-3);
    }
    kn_rt_pool_free(pool);
    /* the serial runtime: never short-handed */
    o.max_redo = 4;
    assert_int_equal(kn_rt_time(count_kernel, NULL, NULL, NULL, &o, 0, NULL, costs, &rc), AT_OK);
    assert_true(info.n_redone == 0 && info.n_short == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_time_costs_and_growth),
        cmocka_unit_test(test_time_number_capped),
        cmocka_unit_test(test_time_failing_kernel),
        cmocka_unit_test(test_time_bad_options),
        cmocka_unit_test(test_time_flush),
        cmocka_unit_test(test_time_redo_missed_launches),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
