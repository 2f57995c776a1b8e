/* tests/kernels/test_schedules.c -- for every library operator, at least 30 distinct
** schedules (hand-written and randomly combined steps) compute what the naive lowering
** computes, on random non-zero inputs, within max|out - ref| / max|ref| <= 1e-4; and the
** naive lowering itself matches plain C loops for matmul, conv2d and softmax.  Every
** kernel is loaded by the runtime's own loader.  The first N_FULL random schedules of each
** operator (and every hand-written one) are built as the tuner builds them; the others with
** the quick build (the same IR, a light cleanup and quick instruction selection), to keep
** 'make test' within its time; 'make test-long' (AT_TEST_LONG=1) builds all of them fully. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "tests/support/ref_ops.h"
#include "tests/support/sched_gen.h"

#define N_SCHEDULES 30
#define N_FULL 6
#define MAX_ATTEMPTS 600

static kn_target host, host_quick;
static int quick; /* build the next states with host_quick */
static kn_rt_pool *pool;

static ss_dag *op_dag(const char *spec)
{
    ss_dag *dag = NULL;
    char err[256];
    if (kn_op_build(spec, &dag, err, sizeof err) != AT_OK)
        fail_msg("%s: %s", spec, err);
    return dag;
}

/* Lower, build and run; returns AT_ESCHED (with err) if the state does not lower. */
static at_err run_state(const ss_state *st, kn_bufset *bs, const kn_rt_par *par, char *err,
                        size_t err_size)
{
    kn_ir *ir = NULL;
    kn_artifact *a = NULL;
    at_err e = kn_lower(st, &ir, err, err_size);
    if (e != AT_OK)
        return e;
    if ((e = kn_build(ir, quick ? &host_quick : &host, NULL, &a, err, err_size)) != AT_OK)
        fail_msg("build failed: %s", err);
    assert_int_equal(kn_bufset_alloc(a, 11, bs), AT_OK);
    if ((e = kn_run_once(a, bs, par, err, err_size)) != AT_OK)
        fail_msg("run failed: %s", err);
    kn_artifact_free(a);
    kn_ir_free(ir);
    return AT_OK;
}

static void check_json_roundtrip(ss_dag *dag, const ss_state *st)
{
    at_buf j1, j2, p1, p2;
    ss_state *back;
    char err[256];
    at_buf_init(&j1);
    at_buf_init(&j2);
    at_buf_init(&p1);
    at_buf_init(&p2);
    ss_state_to_json(st, &j1);
    if (ss_state_from_json(dag, j1.data, j1.len, &back, err, sizeof err) != AT_OK)
        fail_msg("state does not replay from its JSON: %s\n%s", err, j1.data);
    ss_state_to_json(back, &j2);
    assert_string_equal(j1.data, j2.data);
    ss_state_print(st, &p1);
    ss_state_print(back, &p2);
    assert_string_equal(p1.data, p2.data);
    ss_state_free(back);
    at_buf_fini(&j1);
    at_buf_fini(&j2);
    at_buf_fini(&p1);
    at_buf_fini(&p2);
}

/* Known reasons a random state may not lower; anything else is a bug. */
static int expected_refusal(const char *err)
{
    return strstr(err, "nested parallel") || strstr(err, "inside a vectorized loop");
}

static void check_operator(const char *spec, uint64_t seed)
{
    ss_dag *dag = op_dag(spec);
    ss_state *naive;
    kn_bufset ref;
    char err[512], **seen;
    int n_ok = 0, n_refused = 0, n_seen = 0, attempts = 0;
    at_err built;
    int tag_count[7] = {0};
    at_rng rng;
    int out = dag->n_args - 1;
    assert_int_equal(ss_state_new(dag, &naive), AT_OK);
    if (run_state(naive, &ref, kn_rt_serial_par(), err, sizeof err) != AT_OK)
        fail_msg("%s: the naive state does not lower: %s", spec, err);
    seen = calloc(MAX_ATTEMPTS, sizeof *seen);
    at_rng_seed(&rng, seed);
    while (n_ok < N_SCHEDULES && attempts++ < MAX_ATTEMPTS) {
        ss_state *st;
        sg_stats stats;
        at_buf text;
        kn_bufset bs;
        int dup = 0;
        assert_int_equal(sg_random_state(dag, &rng, &st, &stats), AT_OK);
        at_buf_init(&text);
        ss_state_print(st, &text);
        for (int i = 0; i < n_seen && !dup; i++)
            dup = strcmp(seen[i], text.data) == 0;
        if (dup || stats.applied == 0) {
            at_buf_fini(&text);
            ss_state_free(st);
            continue;
        }
        seen[n_seen++] = at_buf_take(&text);
        check_json_roundtrip(dag, st);
        quick = n_ok >= N_FULL && getenv("AT_TEST_LONG") == NULL;
        built = run_state(st, &bs, kn_rt_pool_par(pool), err, sizeof err);
        quick = 0;
        if (built != AT_OK) {
            if (!expected_refusal(err))
                fail_msg("%s: a state does not lower: %s\n%s", spec, err, seen[n_seen - 1]);
            n_refused++;
            ss_state_free(st);
            continue;
        }
        for (int o = dag->n_inputs; o < dag->n_args; o++) {
            double e = kn_rt_rel_err(bs.ptr[o], ref.ptr[o], AT_DT_F32, bs.n_elems[o]);
            if (!(e <= 1e-4)) {
                at_buf j;
                at_buf_init(&j);
                ss_state_to_json(st, &j);
                fail_msg("%s: output %d differs from the naive lowering: rel err %g\n%s\n%s", spec,
                         o, e, seen[n_seen - 1], j.data);
            }
        }
        (void)out;
        {
            static const char *const tags[] = {"\"CA\"", "\"CHW\"", "\"RF\"", "\"CI\"",
                                               "\"FU\"", ",3]", ",2]"};
            at_buf j;
            at_buf_init(&j);
            ss_state_to_json(st, &j);
            for (int t = 0; t < 7; t++)
                tag_count[t] += strstr(j.data, tags[t]) != NULL;
            at_buf_fini(&j);
        }
        n_ok++;
        kn_bufset_free(&bs);
        ss_state_free(st);
    }
    printf("%-60s %d schedules checked, %d refused at lowering, %d attempts; with "
           "compute_at %d, cache_write %d, rfactor %d, inline %d, fuse %d, parallel %d, "
           "vectorize %d\n",
           spec, n_ok, n_refused, attempts, tag_count[0], tag_count[1], tag_count[2],
           tag_count[3], tag_count[4], tag_count[5], tag_count[6]);
    if (n_ok < N_SCHEDULES)
        fail_msg("%s: only %d distinct schedules checked", spec, n_ok);
    for (int i = 0; i < n_seen; i++)
        at_free(seen[i]);
    free(seen);
    kn_bufset_free(&ref);
    ss_state_free(naive);
    ss_dag_unref(dag);
}

#define OP_TEST(name, spec, seed)                                                              \
    static void test_##name(void **unused)                                                     \
    {                                                                                          \
        (void)unused;                                                                          \
        check_operator(spec, seed);                                                            \
    }

OP_TEST(matmul, "matmul:M=24,N=40,K=16", 1)
OP_TEST(matmul_tb, "matmul:M=24,N=40,K=16,tb=1", 2)
OP_TEST(batch_matmul, "batch_matmul:B=3,M=8,N=12,K=10", 3)
OP_TEST(dense, "dense:M=4,N=24,K=32,bias=1,relu=1", 4)
OP_TEST(dense_nobias, "dense:M=6,N=20,K=12,bias=0", 5)
OP_TEST(conv2d_nchw, "conv2d:N=1,C=4,H=10,W=10,K=8,R=3,S=3,stride=1,pad=1", 6)
OP_TEST(conv2d_nhwc, "conv2d:layout=NHWC,N=1,C=4,H=9,W=9,K=6,R=3,S=3,stride=2,pad=1", 7)
OP_TEST(conv2d_in_nchw, "conv2d:layout=NHWC,in_layout=NCHW,N=1,C=3,H=9,W=9,K=8,R=3,S=3,stride=2,pad=1,bias=1", 21)
OP_TEST(conv2d_bias_relu, "conv2d:N=1,C=4,H=8,W=8,K=8,R=3,S=3,pad=1,bias=1,relu=1", 8)
OP_TEST(conv2d_groups_dilation, "conv2d:N=2,C=4,H=9,W=9,K=4,R=3,S=3,pad=2,dilation=2,groups=2", 9)
OP_TEST(depthwise, "depthwise_conv2d:N=1,C=8,H=12,W=12,R=3,S=3,pad=1", 10)
OP_TEST(max_pool, "max_pool2d:N=1,C=4,H=12,W=12,kernel=3,stride=2,pad=1", 11)
OP_TEST(avg_pool, "avg_pool2d:N=1,C=4,H=10,W=10,kernel=3,stride=1,pad=1", 12)
OP_TEST(global_avg_pool, "global_avg_pool:N=2,C=8,H=7,W=7", 13)
OP_TEST(softmax, "softmax:M=6,N=40", 14)
OP_TEST(layer_norm, "layer_norm:M=6,N=40", 15)
OP_TEST(add, "add:shape=4x6x8", 16)
OP_TEST(mul, "mul:shape=6x10", 17)
OP_TEST(relu, "relu:shape=4x6x8", 18)
OP_TEST(gelu, "gelu:shape=8x24", 19)
OP_TEST(transpose, "transpose:shape=6x8x5,perm=2x0x1", 20)

/* ---- the naive lowering against plain C ---- */

static void test_naive_vs_c_matmul(void **unused)
{
    ss_dag *dag = op_dag("matmul:M=37,N=29,K=23,tb=1");
    ss_state *st;
    kn_bufset bs;
    char err[256];
    float *ref = malloc(37 * 29 * sizeof *ref);
    (void)unused;
    assert_int_equal(ss_state_new(dag, &st), AT_OK);
    assert_int_equal(run_state(st, &bs, kn_rt_serial_par(), err, sizeof err), AT_OK);
    ref_matmul(37, 29, 23, 1, bs.ptr[0], bs.ptr[1], ref);
    assert_true(kn_rt_rel_err(bs.ptr[2], ref, AT_DT_F32, 37 * 29) <= 1e-5);
    free(ref);
    kn_bufset_free(&bs);
    ss_state_free(st);
    ss_dag_unref(dag);
}

static void test_naive_vs_c_conv2d(void **unused)
{
    static const struct {
        const char *spec;
        ref_conv2d_params p;
        int bias;
    } cases[] = {
        {"conv2d:N=1,C=3,H=11,W=9,K=5,R=3,S=3,stride=2,pad=1,bias=1,relu=1",
         {0, 1, 3, 11, 9, 5, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1}, 1},
        {"conv2d:layout=NHWC,N=2,C=4,H=8,W=8,K=6,R=3,S=3,pad=2,dilation=2,groups=2",
         {1, 2, 4, 8, 8, 6, 3, 3, 1, 1, 2, 2, 2, 2, 2, 0}, 0},
        {"depthwise_conv2d:N=1,C=6,H=7,W=7,R=3,S=3,pad=1", {0, 1, 6, 7, 7, 6, 3, 3, 1, 1, 1, 1, 1, 1, 6, 0}, 0},
    };
    (void)unused;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ss_dag *dag = op_dag(cases[i].spec);
        ss_state *st;
        kn_bufset bs;
        char err[256];
        int oh, ow, out = dag->n_args - 1;
        float *ref;
        assert_int_equal(ss_state_new(dag, &st), AT_OK);
        assert_int_equal(run_state(st, &bs, kn_rt_serial_par(), err, sizeof err), AT_OK);
        assert_true(ref_conv2d_out(&cases[i].p, &oh, &ow));
        ref = malloc((size_t)bs.n_elems[out] * sizeof *ref);
        ref_conv2d(&cases[i].p, bs.ptr[0], bs.ptr[1], cases[i].bias ? bs.ptr[2] : NULL, ref);
        if (!(kn_rt_rel_err(bs.ptr[out], ref, AT_DT_F32, bs.n_elems[out]) <= 1e-5))
            fail_msg("%s: naive kernel differs from plain C", cases[i].spec);
        free(ref);
        kn_bufset_free(&bs);
        ss_state_free(st);
        ss_dag_unref(dag);
    }
}

static void test_naive_vs_c_softmax(void **unused)
{
    ss_dag *dag = op_dag("softmax:M=7,N=53");
    ss_state *st;
    kn_bufset bs;
    char err[256];
    float ref[7 * 53];
    (void)unused;
    assert_int_equal(ss_state_new(dag, &st), AT_OK);
    assert_int_equal(run_state(st, &bs, kn_rt_serial_par(), err, sizeof err), AT_OK);
    ref_softmax(7, 53, bs.ptr[0], ref);
    assert_true(kn_rt_rel_err(bs.ptr[1], ref, AT_DT_F32, 7 * 53) <= 1e-5);
    kn_bufset_free(&bs);
    ss_state_free(st);
    ss_dag_unref(dag);
}

/* ---- hand-written schedules ---- */

/* A hand-written state: its JSON round-trips, and run in threads it computes what the naive
** state computes serially (every output within 1e-5). */
static void expect_as_naive(const char *what, ss_dag *dag, ss_state *naive, ss_state *hand)
{
    kn_bufset ref, bs;
    char err[512];
    check_json_roundtrip(dag, hand);
    assert_int_equal(run_state(naive, &ref, kn_rt_serial_par(), err, sizeof err), AT_OK);
    if (run_state(hand, &bs, kn_rt_pool_par(pool), err, sizeof err) != AT_OK)
        fail_msg("%s: the hand-written state does not lower: %s", what, err);
    for (int o = dag->n_inputs; o < dag->n_args; o++) {
        double e = kn_rt_rel_err(bs.ptr[o], ref.ptr[o], AT_DT_F32, bs.n_elems[o]);
        if (!(e <= 1e-5))
            fail_msg("%s: output %d differs from the naive lowering: rel err %g", what, o, e);
    }
    kn_bufset_free(&bs);
    kn_bufset_free(&ref);
}

/* kn_hand_conv_nhwc on NHWC convolutions (depthwise, 1x1, a 3-channel stride-2 stem, with
** and without an epilogue, extents that 8 and the vector do not divide, stride-1 ones whose
** padding it copies per tile), in each of its channel blocks that divides the channels,
** computes what the naive state computes (the others are refused); the padding is inlined
** except at stride 1 over input channels; an NCHW convolution and a matmul are refused. */
/* kn_hand_rowwise: softmax and layer norm (the library's, of several shapes; BERT's
** attention scores among them) and a row reduction with its elementwise use, a row at a
** time with vector accumulators: each matches the naive lowering; other DAGs are refused
** with the state untouched. */
static void test_hand_rowwise(void **unused)
{
    static const char *const specs[] = {
        "softmax:shape=12x32x32", "softmax:shape=4x48", "softmax:shape=2x3x5x64",
        "layer_norm:shape=16x96,eps=1e-12", "layer_norm:shape=2x8x64,eps=1e-5",
    };
    static const char *const text =
        "input X[24, 80] float32\n"
        "s[i:24] = sum[j:80](X[i, j] * X[i, j])\n"
        "y[i:24, j:80] = X[i, j] / sqrt(s[i] + 1.0)\n";
    char err[512];
    int64_t vw = host.vector_bytes / 4;
    (void)unused;
    for (size_t i = 0; i <= sizeof specs / sizeof specs[0]; i++) {
        const char *what = i < sizeof specs / sizeof specs[0] ? specs[i] : text;
        ss_dag *dag = NULL;
        ss_state *naive, *hand;
        if (what == text)
            assert_int_equal(ss_dag_parse(text, strlen(text), &dag, err, sizeof err), AT_OK);
        else
            dag = op_dag(what);
        assert_int_equal(ss_state_new(dag, &naive), AT_OK);
        assert_int_equal(ss_state_new(dag, &hand), AT_OK);
        if (kn_hand_rowwise(hand, host.vector_bytes, err, sizeof err) != AT_OK) {
            /* rows that are not a multiple of the vector width are refused */
            int64_t J = dag->ops[dag->n_ops - 1].axes[dag->ops[dag->n_ops - 1].n_axes - 1].extent;
            if (J % vw != 0 || J < vw) {
                assert_non_null(strstr(err, "not a multiple of the vector width"));
                ss_state_free(hand);
                ss_state_free(naive);
                ss_dag_unref(dag);
                continue;
            }
            fail_msg("%s: kn_hand_rowwise: %s", what, err);
        }
        expect_as_naive(what, dag, naive, hand);
        ss_state_free(hand);
        ss_state_free(naive);
        ss_dag_unref(dag);
    }
    for (int i = 0; i < 2; i++) {
        ss_dag *dag = op_dag(i == 0 ? "matmul:M=8,N=64,K=8" : "global_avg_pool:N=1,C=64,H=4,W=4");
        ss_state *st;
        assert_int_equal(ss_state_new(dag, &st), AT_OK);
        assert_int_equal(kn_hand_rowwise(st, host.vector_bytes, err, sizeof err), AT_EINVAL);
        assert_non_null(strstr(err, "kn_hand_rowwise"));
        assert_int_equal(st->n_steps, 0);
        ss_state_free(st);
        ss_dag_unref(dag);
    }
}

/* kn_hand_bmm: batched products (the library's, and BERT's two as a model gives them: the
** scores with Q read through its transpose and the scaling and mask as an epilogue, the
** probabilities times V written transposed) match the naive lowering; other DAGs are
** refused with the state untouched. */
static void test_hand_bmm(void **unused)
{
    static const char *const texts[] = {
        "input A[40, 3, 16] float32\n"
        "input B[3, 16, 48] float32\n"
        "input m[48] float32\n"
        "C[b:3, i:40, j:48] = sum[k:16](A[i, b, k] * B[b, k, j])\n"
        "e1[a0:3, a1:40, a2:48] = C[a0, a1, a2] / 4.0\n"
        "e2[a0:3, a1:40, a2:48] = e1[a0, a1, a2] + m[a2]\n",
        "input A[3, 40, 40] float32\n"
        "input B[40, 3, 32] float32\n"
        "C[i:40, b:3, j:32] = sum[k:40](A[b, i, k] * B[k, b, j])\n",
        "batch_matmul:B=5,M=24,N=32,K=20",
        "batch_matmul:B=2,M=7,N=48,K=9",
    };
    char err[512];
    (void)unused;
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        ss_dag *dag = NULL;
        ss_state *naive, *hand;
        if (strchr(texts[i], '\n'))
            assert_int_equal(ss_dag_parse(texts[i], strlen(texts[i]), &dag, err, sizeof err),
                             AT_OK);
        else
            dag = op_dag(texts[i]);
        assert_int_equal(ss_state_new(dag, &naive), AT_OK);
        assert_int_equal(ss_state_new(dag, &hand), AT_OK);
        if (kn_hand_bmm(hand, host.vector_bytes, err, sizeof err) != AT_OK) {
            /* a last axis that is not a multiple of the vector width is refused */
            if (strstr(err, "not a multiple of the vector width")) {
                ss_state_free(hand);
                ss_state_free(naive);
                ss_dag_unref(dag);
                continue;
            }
            fail_msg("%s: kn_hand_bmm: %s", texts[i], err);
        }
        expect_as_naive(texts[i], dag, naive, hand);
        ss_state_free(hand);
        ss_state_free(naive);
        ss_dag_unref(dag);
    }
    for (int i = 0; i < 2; i++) {
        ss_dag *dag = op_dag(i == 0 ? "matmul:M=8,N=64,K=8" : "softmax:shape=4x64");
        ss_state *st;
        assert_int_equal(ss_state_new(dag, &st), AT_OK);
        assert_int_equal(kn_hand_bmm(st, host.vector_bytes, err, sizeof err), AT_EINVAL);
        assert_non_null(strstr(err, "kn_hand_bmm"));
        assert_int_equal(st->n_steps, 0);
        ss_state_free(st);
        ss_dag_unref(dag);
    }
}

static void test_hand_conv_nhwc(void **unused)
{
    static const char *const texts[] = {
        /* MobileNetV2's first depthwise convolution, shrunk, with its clip */
        "input X[1, 12, 12, 32] float32\n"
        "const W[3, 3, 1, 32] float32\n"
        "const b[32] float32\n"
        "pad[n:1, h:14, w:14, c:32] = select(h >= 1 && h < 13 && w >= 1 && w < 13, "
        "X[n, h - 1, w - 1, c], 0.0)\n"
        "conv[n:1, h:12, w:12, k:32] = sum[r:3, s:3](pad[n, h + r, w + s, k] * W[r, s, 0, k])\n"
        "bias[n:1, h:12, w:12, k:32] = conv[n, h, w, k] + b[k]\n"
        "e1[a0:1, a1:12, a2:12, a3:32] = min(max(bias[a0, a1, a2, a3], 0.0), 6.0)\n",
        /* a 1x1 convolution with a residual add */
        "input X[1, 7, 7, 24] float32\n"
        "const W[1, 1, 24, 16] float32\n"
        "input Y[1, 7, 7, 16] float32\n"
        "conv[n:1, h:7, w:7, k:16] = sum[c:24](X[n, h, w, c] * W[0, 0, c, k])\n"
        "e1[a0:1, a1:7, a2:7, a3:16] = conv[a0, a1, a2, a3] + Y[a0, a1, a2, a3]\n",
    };
    static const char *const specs[] = {
        "conv2d:layout=NHWC,N=1,C=3,H=17,W=17,K=12,R=3,S=3,stride=2,pad=1,bias=1,relu=1",
        "conv2d:layout=NHWC,in_layout=NCHW,N=1,C=3,H=17,W=17,K=32,R=3,S=3,stride=2,pad=1,bias=1",
        "conv2d:layout=NHWC,N=2,C=20,H=9,W=11,K=20,R=3,S=3,stride=2,pad=1,groups=20",
        "conv2d:layout=NHWC,N=1,C=16,H=6,W=6,K=24,R=1,S=1",
        "conv2d:layout=NHWC,N=1,C=8,H=10,W=10,K=5,R=3,S=3,pad=2,dilation=2,groups=1,bias=1",
        /* 96 channels: 6, 3 and 2 vectors of 16 (12, 6, 4 of 8) */
        "conv2d:layout=NHWC,N=1,C=96,H=13,W=14,K=96,R=3,S=3,stride=2,pad=1,groups=96,bias=1",
        "conv2d:layout=NHWC,N=1,C=8,H=5,W=7,K=96,R=1,S=1,bias=1,relu=1",
        /* stride 1 summing over channels: the padding copied per tile (the first two with
        ** 64 channels, every block; 80 input channels, more than one vector loop takes;
        ** grouped; an NCHW input) */
        "conv2d:layout=NHWC,N=2,C=24,H=9,W=13,K=64,R=3,S=3,pad=1,bias=1,relu=1",
        "conv2d:layout=NHWC,N=1,C=80,H=7,W=7,K=64,R=3,S=3,pad=1",
        "conv2d:layout=NHWC,N=1,C=80,H=6,W=9,K=32,R=3,S=3,pad=1,groups=2",
        "conv2d:layout=NHWC,in_layout=NCHW,N=1,C=3,H=10,W=12,K=16,R=3,S=3,pad=1",
    };
    char err[512];
    int64_t vw = host.vector_bytes / 4;
    int n_wide = 0, n_tiled = 0;
    (void)unused;
    for (size_t i = 0; i < sizeof texts / sizeof texts[0] + sizeof specs / sizeof specs[0];
         i++) {
        const char *what = i < 2 ? texts[i] : specs[i - 2];
        ss_dag *dag = NULL;
        ss_state *naive, *hand;
        if (i < 2)
            assert_int_equal(ss_dag_parse(texts[i], strlen(texts[i]), &dag, err, sizeof err),
                             AT_OK);
        else
            dag = op_dag(specs[i - 2]);
        assert_int_equal(ss_state_new(dag, &naive), AT_OK);
        assert_int_equal(ss_state_new(dag, &hand), AT_OK);
        if (kn_hand_conv_nhwc(hand, host.vector_bytes, 0, err, sizeof err) != AT_OK)
            fail_msg("%s: kn_hand_conv_nhwc: %s", what, err);
        {
            /* the padding: inlined, but copied per tile at stride 1 when the convolution
            ** sums over input channels */
            int pad = ss_dag_find(dag, "pad");
            int per_tile = pad >= 0 && strstr(what, "R=3") && !strstr(what, "stride=2") &&
                           !strstr(what, "dilation=2");
            if (pad >= 0)
                assert_int_equal(hand->stages[pad].loc, per_tile ? SS_LOC_AT : SS_LOC_INLINE);
            n_tiled += per_tile;
        }
        expect_as_naive(what, dag, naive, hand);
        ss_state_free(hand);
        /* the wider channel blocks: where they divide K, the same result; else refused */
        for (int v = 1; v < KN_HAND_CONV_NHWC_VARIANTS; v++) {
            int64_t K = dag->ops[ss_dag_find(dag, "conv")].axes[3].extent;
            int fits = vw >= 2 && K % ((v + 1) * vw) == 0;
            char what_v[600];
            assert_int_equal(ss_state_new(dag, &hand), AT_OK);
            if (kn_hand_conv_nhwc(hand, host.vector_bytes, v, err, sizeof err) != AT_OK) {
                if (fits)
                    fail_msg("%s: kn_hand_conv_nhwc variant %d: %s", what, v, err);
                assert_non_null(strstr(err, "no variant"));
                assert_int_equal(hand->n_steps, 0);
            } else {
                assert_true(fits);
                snprintf(what_v, sizeof what_v, "%s (variant %d)", what, v);
                expect_as_naive(what_v, dag, naive, hand);
                n_wide++;
            }
            ss_state_free(hand);
        }
        ss_state_free(naive);
        ss_dag_unref(dag);
    }
    assert_true(n_wide >= 2); /* the 96-channel ones take both wider blocks */
    assert_int_equal(n_tiled, 4);
    /* not an NHWC convolution: refused, the state untouched */
    for (int i = 0; i < 2; i++) {
        ss_dag *dag = op_dag(i == 0 ? "conv2d:N=1,C=4,H=8,W=8,K=8,R=3,S=3,pad=1"
                                    : "matmul:M=8,N=8,K=8");
        ss_state *st;
        assert_int_equal(ss_state_new(dag, &st), AT_OK);
        assert_int_equal(kn_hand_conv_nhwc(st, host.vector_bytes, 0, err, sizeof err), AT_EINVAL);
        assert_non_null(strstr(err, "NHWC conv2d"));
        assert_int_equal(st->n_steps, 0);
        ss_state_free(st);
        ss_dag_unref(dag);
    }
}

/* kn_hand_conv_nchw on NCHW convolutions (3x3 with padding and an epilogue, 1x1 without
** padding, a stride-2 one, rows and channels that the tiles do not divide, a grouped one)
** computes what the naive state computes (its rows of 56, 37, 17... are vectors longer
** than a register and not a power of two: the code generator's pieces), in every variant;
** NHWC, depthwise, a matmul and a variant out of range are refused with the state
** untouched. */
static void test_hand_conv_nchw(void **unused)
{
    static const char *const specs[] = {
        "conv2d:N=1,C=16,H=14,W=56,K=24,R=3,S=3,pad=1,bias=1,relu=1",
        "conv2d:N=2,C=8,H=9,W=11,K=12,R=1,S=1",
        "conv2d:N=1,C=3,H=17,W=34,K=10,R=3,S=3,stride=2,pad=1",
        "conv2d:N=1,C=8,H=10,W=37,K=6,R=3,S=3,pad=2,dilation=2,bias=1",
        "conv2d:N=1,C=8,H=8,W=8,K=8,R=3,S=3,pad=1,groups=2",
    };
    static const char *const refused[] = {
        "conv2d:layout=NHWC,N=1,C=4,H=8,W=8,K=8,R=3,S=3,pad=1",
        "conv2d:N=1,C=8,H=8,W=8,K=8,R=3,S=3,pad=1,groups=8",
        "matmul:M=8,N=8,K=8",
    };
    char err[512];
    (void)unused;
    for (size_t i = 0; i < KN_HAND_CONV_NCHW_VARIANTS * (sizeof specs / sizeof specs[0]); i++) {
        const char *spec = specs[i / KN_HAND_CONV_NCHW_VARIANTS];
        int variant = (int)(i % KN_HAND_CONV_NCHW_VARIANTS);
        ss_dag *dag = op_dag(spec);
        ss_state *naive, *hand;
        char what[160];
        snprintf(what, sizeof what, "%s, variant %d", spec, variant);
        assert_int_equal(ss_state_new(dag, &naive), AT_OK);
        assert_int_equal(ss_state_new(dag, &hand), AT_OK);
        if (kn_hand_conv_nchw(hand, host.vector_bytes, variant, err, sizeof err) != AT_OK)
            fail_msg("%s: kn_hand_conv_nchw: %s", what, err);
        expect_as_naive(what, dag, naive, hand);
        ss_state_free(hand);
        ss_state_free(naive);
        ss_dag_unref(dag);
    }
    for (size_t i = 0; i <= sizeof refused / sizeof refused[0]; i++) {
        int bad_variant = i == sizeof refused / sizeof refused[0];
        ss_dag *dag = op_dag(bad_variant ? specs[0] : refused[i]);
        ss_state *st;
        assert_int_equal(ss_state_new(dag, &st), AT_OK);
        assert_int_equal(kn_hand_conv_nchw(st, host.vector_bytes,
                                           bad_variant ? KN_HAND_CONV_NCHW_VARIANTS : 0, err,
                                           sizeof err),
                         AT_EINVAL);
        assert_non_null(strstr(err, bad_variant ? "no variant" : "NCHW conv2d"));
        assert_int_equal(st->n_steps, 0);
        ss_state_free(st);
        ss_dag_unref(dag);
    }
}

/* kn_hand_matmul_tiled (the tuner's first-round matmuls and dense layers), every variant:
** matmuls whose extents the tile sizes divide and do not divide, dense layers with and
** without an epilogue (a bias, BERT's exact GELU, a residual add), with B rewritten to the
** tiles' order and read in place, compute what the naive state computes; a convolution, a
** product followed by a reduction and a variant out of range are refused untouched. */
static void test_hand_matmul_tiled(void **unused)
{
    static const char *const specs[] = {
        "matmul:M=128,N=128,K=128", "matmul:M=64,N=96,K=80", "matmul:M=37,N=50,K=23",
        "matmul:M=1,N=1000,K=64", "dense:M=16,N=48,K=40,bias=1",
        "dense:M=9,N=30,K=17,bias=1,relu=1", "matmul:M=20,N=64,K=24,tb=1",
        /* BERT's feed-forward up-projection (GELU), its output projection (residual add):
        ** the dense tasks of a transformer, at a short length */
        "input X[16, 40] float32\nconst W[96, 40] float32\nconst b[96] float32\n"
        "dense[i:16, j:96] = sum[k:40](X[i, k] * W[j, k])\n"
        "bias[i:16, j:96] = dense[i, j] + b[j]\n"
        "e1[a0:16, a1:96] = bias[a0, a1] / 1.4142135\n"
        "e2[a0:16, a1:96] = erf(e1[a0, a1])\n"
        "e3[a0:16, a1:96] = e2[a0, a1] + 1.0\n"
        "e4[a0:16, a1:96] = bias[a0, a1] * e3[a0, a1]\n"
        "e5[a0:16, a1:96] = e4[a0, a1] * 0.5\n",
        "input X[24, 96] float32\nconst W[40, 96] float32\nconst b[40] float32\n"
        "input R[24, 40] float32\n"
        "dense[i:24, j:40] = sum[k:96](X[i, k] * W[j, k])\n"
        "bias[i:24, j:40] = dense[i, j] + b[j]\n"
        "add[a0:24, a1:40] = bias[a0, a1] + R[a0, a1]\n",
    };
    char err[512];
    (void)unused;
    for (size_t i = 0; i < 2 * KN_HAND_MATMUL_VARIANTS * (sizeof specs / sizeof specs[0]); i++) {
        const char *spec = specs[i / (2 * KN_HAND_MATMUL_VARIANTS)];
        int lr = (int)(i / KN_HAND_MATMUL_VARIANTS % 2), variant = (int)(i % KN_HAND_MATMUL_VARIANTS);
        ss_dag *dag = NULL;
        ss_state *naive, *hand;
        char what[128];
        if (strchr(spec, '\n') == NULL)
            dag = op_dag(spec);
        else if (ss_dag_parse(spec, strlen(spec), &dag, err, sizeof err) != AT_OK)
            fail_msg("%.40s: %s", spec, err);
        snprintf(what, sizeof what, "%.40s, layout rewrite %d, variant %d", spec, lr, variant);
        assert_int_equal(ss_state_new(dag, &naive), AT_OK);
        assert_int_equal(ss_state_new(dag, &hand), AT_OK);
        if (kn_hand_matmul_tiled(hand, host.vector_bytes, lr, variant, err, sizeof err) != AT_OK)
            fail_msg("%s: kn_hand_matmul_tiled: %s", what, err);
        /* the layout rewrite is the last step when asked for, absent otherwise */
        assert_int_equal(hand->steps[hand->n_steps - 1].kind == SS_STEP_LAYOUT_REWRITE, lr);
        expect_as_naive(what, dag, naive, hand);
        ss_state_free(hand);
        ss_state_free(naive);
        ss_dag_unref(dag);
    }
    {
        ss_dag *dag = op_dag("conv2d:N=1,C=8,H=8,W=8,K=8,R=3,S=3,pad=1");
        ss_state *st;
        assert_int_equal(ss_state_new(dag, &st), AT_OK);
        assert_int_equal(kn_hand_matmul_tiled(st, host.vector_bytes, 1, 0, err, sizeof err),
                         AT_EINVAL);
        assert_non_null(strstr(err, "matmul"));
        assert_int_equal(st->n_steps, 0);
        ss_state_free(st);
        ss_dag_unref(dag);
        /* a product whose rows are then summed: not an elementwise epilogue */
        {
            static const char *const rowsum =
                "input X[8, 8] float32\nconst W[8, 8] float32\n"
                "dense[i:8, j:8] = sum[k:8](X[i, k] * W[j, k])\n"
                "rs[i:8] = sum[j:8](dense[i, j])\n";
            assert_int_equal(ss_dag_parse(rowsum, strlen(rowsum), &dag, err, sizeof err), AT_OK);
            assert_int_equal(ss_state_new(dag, &st), AT_OK);
            assert_int_equal(kn_hand_matmul_tiled(st, host.vector_bytes, 1, 0, err, sizeof err),
                             AT_EINVAL);
            assert_non_null(strstr(err, "epilogue"));
            assert_int_equal(st->n_steps, 0);
            ss_state_free(st);
            ss_dag_unref(dag);
        }
        dag = op_dag("matmul:M=8,N=8,K=8");
        assert_int_equal(ss_state_new(dag, &st), AT_OK);
        assert_int_equal(kn_hand_matmul_tiled(st, host.vector_bytes, 1, KN_HAND_MATMUL_VARIANTS,
                                              err, sizeof err),
                         AT_EINVAL);
        assert_non_null(strstr(err, "no variant"));
        assert_int_equal(st->n_steps, 0);
        ss_state_free(st);
        ss_dag_unref(dag);
    }
}

static int setup(void **unused)
{
    (void)unused;
    if (kn_target_host(&host) != AT_OK || kn_rt_pool_new(2, &pool) != AT_OK)
        return -1;
    host_quick = host;
    host_quick.quick_build = 1;
    return 0;
}

static int teardown(void **unused)
{
    (void)unused;
    kn_rt_pool_free(pool);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_naive_vs_c_matmul),
        cmocka_unit_test(test_naive_vs_c_conv2d),
        cmocka_unit_test(test_naive_vs_c_softmax),
        cmocka_unit_test(test_hand_conv_nhwc),
        cmocka_unit_test(test_hand_conv_nchw),
        cmocka_unit_test(test_hand_matmul_tiled),
        cmocka_unit_test(test_hand_rowwise),
        cmocka_unit_test(test_hand_bmm),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_matmul_tb),
        cmocka_unit_test(test_batch_matmul),
        cmocka_unit_test(test_dense),
        cmocka_unit_test(test_dense_nobias),
        cmocka_unit_test(test_conv2d_nchw),
        cmocka_unit_test(test_conv2d_nhwc),
        cmocka_unit_test(test_conv2d_in_nchw),
        cmocka_unit_test(test_conv2d_bias_relu),
        cmocka_unit_test(test_conv2d_groups_dilation),
        cmocka_unit_test(test_depthwise),
        cmocka_unit_test(test_max_pool),
        cmocka_unit_test(test_avg_pool),
        cmocka_unit_test(test_global_avg_pool),
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_layer_norm),
        cmocka_unit_test(test_add),
        cmocka_unit_test(test_mul),
        cmocka_unit_test(test_relu),
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_transpose),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
