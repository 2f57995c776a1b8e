/* tests/kernels/test_rt_fill.c -- kn_rt_fill (known values from the documented formula,
** range, no zeros, determinism), kn_rt_rel_err, kn_rt_alloc/free and half conversion.
**
** The expected values below were computed outside C (a few lines of Python implementing
** the formula of docs/kernel_abi.md), so a change of the formula fails here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "kernels/kernels_rt.h"
#include "kernels/rt/rt_int.h"

/* Seed 42: stream 0 and 1 as float32 (numerators of k / 2^24), stream 2 as int32,
** stream 3 as float16 bits, stream 4 as bool. */
static const int32_t f32_s0[4] = {-5258251, 15292323, -458033, -14517061};
static const int32_t f32_s1[4] = {16331319, -6420219, 226477, 6203309};
static const int32_t i32_s2[4] = {-16, 10, -8, -14};
static const uint16_t f16_s3[4] = {0xb8cf, 0xa910, 0xbaf5, 0x337c};
static const uint8_t bool_s4[8] = {1, 0, 1, 0, 1, 1, 0, 1};

static void test_fill_known_values(void **unused)
{
    float f[4];
    double d[4];
    int32_t iv[4];
    uint16_t h[4];
    uint8_t b[8];
    (void)unused;
    kn_rt_fill(f, AT_DT_F32, 4, 42, 0);
    for (int i = 0; i < 4; i++)
        assert_true(f[i] == (float)f32_s0[i] * 0x1p-24f);
    kn_rt_fill(f, AT_DT_F32, 4, 42, 1);
    for (int i = 0; i < 4; i++)
        assert_true(f[i] == (float)f32_s1[i] * 0x1p-24f);
    kn_rt_fill(d, AT_DT_F64, 4, 42, 0); /* float64 holds the same values as float32 */
    for (int i = 0; i < 4; i++)
        assert_true(d[i] == (double)f32_s0[i] * 0x1p-24);
    kn_rt_fill(iv, AT_DT_I32, 4, 42, 2);
    for (int i = 0; i < 4; i++)
        assert_int_equal(iv[i], i32_s2[i]);
    kn_rt_fill(h, AT_DT_F16, 4, 42, 3);
    for (int i = 0; i < 4; i++)
        assert_int_equal(h[i], f16_s3[i]);
    kn_rt_fill(b, AT_DT_BOOL, 8, 42, 4);
    for (int i = 0; i < 8; i++)
        assert_int_equal(b[i], bool_s4[i]);
}

static void test_fill_range_no_zeros(void **unused)
{
    enum { N = 100000 };
    float *f = kn_rt_alloc(N * sizeof *f);
    int8_t *i8 = kn_rt_alloc(N);
    int64_t *i64 = kn_rt_alloc(N * sizeof *i64);
    uint16_t *h = kn_rt_alloc(N * sizeof *h);
    uint8_t *b = kn_rt_alloc(N);
    int n_true = 0, seen_lo = 0, seen_hi = 0;
    float fmin = 1, fmax = -1;
    (void)unused;
    assert_non_null(f);
    assert_non_null(i8);
    assert_non_null(i64);
    assert_non_null(h);
    assert_non_null(b);
    kn_rt_fill(f, AT_DT_F32, N, 7, 0);
    kn_rt_fill(i8, AT_DT_I8, N, 7, 1);
    kn_rt_fill(i64, AT_DT_I64, N, 7, 2);
    kn_rt_fill(h, AT_DT_F16, N, 7, 3);
    kn_rt_fill(b, AT_DT_BOOL, N, 7, 4);
    for (int i = 0; i < N; i++) {
        float hv = kn_rt__half_to_float(h[i]);
        assert_true(f[i] != 0 && f[i] >= -1.0f && f[i] < 1.0f);
        fmin = f[i] < fmin ? f[i] : fmin;
        fmax = f[i] > fmax ? f[i] : fmax;
        assert_true(i8[i] != 0 && i8[i] >= -16 && i8[i] <= 16);
        assert_true(i64[i] != 0 && i64[i] >= -16 && i64[i] <= 16);
        seen_lo |= i8[i] == -16;
        seen_hi |= i8[i] == 16;
        assert_true(hv != 0 && hv >= -1.0f && hv < 1.0f);
        assert_true(b[i] <= 1);
        n_true += b[i];
    }
    assert_true(fmin < -0.99f && fmax > 0.99f); /* the whole range is used */
    assert_true(seen_lo && seen_hi);
    assert_true(n_true > N * 45 / 100 && n_true < N * 55 / 100);
    kn_rt_free(f);
    kn_rt_free(i8);
    kn_rt_free(i64);
    kn_rt_free(h);
    kn_rt_free(b);
}

static void test_fill_deterministic(void **unused)
{
    enum { N = 4096 };
    static float a[N], b[N], c[N];
    static float pre[100];
    (void)unused;
    kn_rt_fill(a, AT_DT_F32, N, 123, 5);
    kn_rt_fill(b, AT_DT_F32, N, 123, 5);
    assert_memory_equal(a, b, sizeof a);
    /* a prefix is the same whatever the length: element i depends on i alone */
    kn_rt_fill(pre, AT_DT_F32, 100, 123, 5);
    assert_memory_equal(a, pre, sizeof pre);
    kn_rt_fill(c, AT_DT_F32, N, 123, 6); /* another stream */
    assert_true(memcmp(a, c, sizeof a) != 0);
    kn_rt_fill(c, AT_DT_F32, N, 124, 5); /* another seed */
    assert_true(memcmp(a, c, sizeof a) != 0);
    /* n <= 0 and NULL touch nothing */
    memset(c, 0, sizeof c);
    kn_rt_fill(c, AT_DT_F32, 0, 1, 0);
    kn_rt_fill(c, AT_DT_F32, -5, 1, 0);
    kn_rt_fill(NULL, AT_DT_F32, 10, 1, 0);
    assert_true(c[0] == 0);
}

static void test_rel_err(void **unused)
{
    float ref[4] = {1, -2, 4, 0.5f}, out[4] = {1, -2, 4, 0.5f};
    double dref[3] = {0, 0, 0}, dout[3] = {0, 1e-3, 0};
    int32_t iref[3] = {3, -4, 5}, iout[3] = {3, -4, 6};
    int8_t bref[3] = {10, -1, 2}, bout[3] = {10, -1, 2};
    uint8_t lref[3] = {1, 0, 1}, lout[3] = {2, 0, 1};
    uint16_t href[2] = {0x3c00, 0x4000}, hout[2] = {0x3c00, 0x4001}; /* 1, 2 / 1, 2.00195 */
    (void)unused;
    assert_true(kn_rt_rel_err(out, ref, AT_DT_F32, 4) == 0);
    out[2] = 4.004f; /* |diff| 0.004 / max|ref| 4 */
    assert_true(fabs(kn_rt_rel_err(out, ref, AT_DT_F32, 4) - 1e-3) < 1e-6);
    out[2] = NAN;
    assert_true(isinf(kn_rt_rel_err(out, ref, AT_DT_F32, 4)));
    ref[2] = NAN; /* NaN where NaN is expected is fine */
    assert_true(kn_rt_rel_err(out, ref, AT_DT_F32, 4) == 0);
    out[2] = ref[2] = INFINITY;
    assert_true(kn_rt_rel_err(out, ref, AT_DT_F32, 4) == 0);
    out[2] = -INFINITY;
    assert_true(isinf(kn_rt_rel_err(out, ref, AT_DT_F32, 4)));
    /* an all-zero reference: the absolute error */
    assert_true(kn_rt_rel_err(dout, dref, AT_DT_F64, 3) == 1e-3);
    assert_true(fabs(kn_rt_rel_err(iout, iref, AT_DT_I32, 3) - 0.2) < 1e-12);
    assert_true(kn_rt_rel_err(bout, bref, AT_DT_I8, 3) == 0);
    bout[1] = 1;
    assert_true(kn_rt_rel_err(bout, bref, AT_DT_I8, 3) == 0.2);
    assert_true(kn_rt_rel_err(lout, lref, AT_DT_BOOL, 3) == 0); /* any non-zero is true */
    lout[1] = 1;
    assert_true(kn_rt_rel_err(lout, lref, AT_DT_BOOL, 3) == 1);
    assert_true(fabs(kn_rt_rel_err(hout, href, AT_DT_F16, 2) - 0x1p-10) < 1e-9);
    assert_true(kn_rt_rel_err(out, ref, AT_DT_F32, 0) == 0);
    assert_true(isinf(kn_rt_rel_err(out, ref, (at_dtype)99, 1)));
}

static void test_half_conversion(void **unused)
{
    static const struct {
        float f;
        uint16_t h;
    } cases[] = {
        {0.0f, 0x0000},    {-0.0f, 0x8000},      {1.0f, 0x3c00},       {-2.0f, 0xc000},
        {65504.0f, 0x7bff}, {65520.0f, 0x7c00},   {1e9f, 0x7c00},       {0.1f, 0x2e66},
        {1.0f / 3, 0x3555}, {0x1p-24f, 0x0001},   {0x1p-25f, 0x0000},   {0x1.8p-25f, 0x0001},
        {0x1p-14f, 0x0400}, {0x1.ff8p-15f, 0x03ff}, {0x1.ffcp-15f, 0x0400}, /* a tie: even */
        {INFINITY, 0x7c00}, {-INFINITY, 0xfc00},
    };
    (void)unused;
    for (size_t i = 0; i < AT_ARRAY_LEN(cases); i++)
        assert_int_equal(kn_rt__float_to_half(cases[i].f), cases[i].h);
    assert_true(isnan(kn_rt__half_to_float(kn_rt__float_to_half(NAN))));
    /* every finite half survives the round trip */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00)
            continue;
        assert_int_equal(kn_rt__float_to_half(kn_rt__half_to_float((uint16_t)h)), h);
    }
    assert_true(kn_rt__half_to_float(0x0001) == 0x1p-24f);
    assert_true(kn_rt__half_to_float(0xfbff) == -65504.0f);
}

static void test_alloc(void **unused)
{
    size_t sizes[] = {0, 1, 63, 64, 65, 1000, 1 << 20};
    (void)unused;
    for (size_t k = 0; k < AT_ARRAY_LEN(sizes); k++) {
        size_t n = sizes[k] < 64 ? 64 : sizes[k];
        unsigned char *p = kn_rt_alloc(sizes[k]);
        assert_non_null(p);
        assert_true(((uintptr_t)p & 63) == 0);
        for (size_t i = 0; i < n; i++)
            assert_int_equal(p[i], 0);
        memset(p, 0xab, n); /* at least 64 bytes are usable (ASan checks it) */
        kn_rt_free(p);
    }
    kn_rt_free(NULL);
    assert_null(kn_rt_alloc(SIZE_MAX - 8));
    at_test_alloc_limit(0);
    assert_null(kn_rt_alloc(100));
    at_test_alloc_limit(SIZE_MAX);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fill_known_values),
        cmocka_unit_test(test_fill_range_no_zeros),
        cmocka_unit_test(test_fill_deterministic),
        cmocka_unit_test(test_rel_err),
        cmocka_unit_test(test_half_conversion),
        cmocka_unit_test(test_alloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
