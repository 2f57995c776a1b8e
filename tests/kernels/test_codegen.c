/* tests/kernels/test_codegen.c -- lowering + LLVM code generation against plain C. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/kernels.h"
#include "tests/support/ref_ops.h"

static kn_target host;

static ss_dag *op_dag(const char *spec)
{
    ss_dag *dag = NULL;
    char err[256];
    if (kn_op_build(spec, &dag, err, sizeof err) != AT_OK)
        fail_msg("%s: %s", spec, err);
    return dag;
}

#define OK(x) do { if ((x) != AT_OK) fail_msg("%s: %s", #x, err); } while (0)

/* Lower, build, run a state; outputs land in 'bs' (allocated and filled from seed 7). */
static void run_state(const ss_state *st, kn_bufset *bs, const kn_rt_par *par)
{
    kn_ir *ir = NULL;
    kn_artifact *a = NULL;
    char err[512];
    if (kn_lower(st, &ir, err, sizeof err) != AT_OK)
        fail_msg("lower: %s", err);
    if (kn_build(ir, &host, NULL, &a, err, sizeof err) != AT_OK)
        fail_msg("build: %s", err);
    assert_int_equal(kn_bufset_alloc(a, 7, bs), AT_OK);
    if (kn_run_once(a, bs, par, err, sizeof err) != AT_OK)
        fail_msg("run: %s", err);
    kn_artifact_free(a);
    kn_ir_free(ir);
}

static void test_naive_matmul_matches_c(void **unused)
{
    ss_dag *dag;
    ss_state *st;
    kn_bufset bs;
    float *ref;
    (void)unused;
    dag = op_dag("matmul:M=37,N=29,K=23");
    assert_int_equal(ss_state_new(dag, &st), AT_OK);
    run_state(st, &bs, kn_rt_serial_par());
    ref = at_malloc(37 * 29 * sizeof *ref);
    ref_matmul(37, 29, 23, 0, bs.ptr[0], bs.ptr[1], ref);
    double e = kn_rt_rel_err(bs.ptr[2], ref, AT_DT_F32, 37 * 29);
    if (!(e <= 1e-5))
        fail_msg("rel err %g", e);
    at_free(ref);
    kn_bufset_free(&bs);
    ss_state_free(st);
    ss_dag_unref(dag);
}

static void test_tiled_matmul(void **unused)
{
    ss_dag *dag;
    ss_state *st;
    kn_bufset bs;
    kn_rt_pool *pool;
    float *ref;
    char err[256];
    int M = 64, N = 96, K = 48;
    (void)unused;
    dag = op_dag("matmul:M=64,N=96,K=48");
    assert_int_equal(ss_state_new(dag, &st), AT_OK);
    /* C.local = stage 2, C = stage 3 */

    OK(ss_state_cache_write(st, 2, "local", err, sizeof err));
    OK(ss_state_split(st, 2, 0, 2, (int64_t[]){4, 4}, err, sizeof err));      /* i0 i1 i2 j k */
    OK(ss_state_split(st, 2, 3, 2, (int64_t[]){2, 16}, err, sizeof err));     /* j0 j1 j2 */
    OK(ss_state_split(st, 2, 6, 1, (int64_t[]){8}, err, sizeof err));         /* k0 k1 */
    /* i0 j0 i1 j1 k0 k1 i2 j2 */
    OK(ss_state_reorder(st, 2, 8, (int64_t[]){0, 3, 1, 4, 6, 7, 2, 5}, err, sizeof err));
    OK(ss_state_annotate(st, 2, 7, SS_ANN_VECTORIZE, err, sizeof err));
    OK(ss_state_annotate(st, 2, 6, SS_ANN_UNROLL, err, sizeof err));
    OK(ss_state_split(st, 3, 0, 1, (int64_t[]){16}, err, sizeof err));      /* C: i0 i1 j */
    OK(ss_state_split(st, 3, 2, 1, (int64_t[]){32}, err, sizeof err));      /* i0 i1 j0 j1 */
    OK(ss_state_reorder(st, 3, 4, (int64_t[]){0, 2, 1, 3}, err, sizeof err)); /* i0 j0 i1 j1 */
    OK(ss_state_fuse(st, 3, 2, (int64_t[]){0, 1}, err, sizeof err));
    OK(ss_state_annotate(st, 3, 0, SS_ANN_PARALLEL, err, sizeof err));
    OK(ss_state_annotate(st, 3, 2, SS_ANN_VECTORIZE, err, sizeof err));
    OK(ss_state_compute_at(st, 2, 3, 0, err, sizeof err));
    {
        at_buf b;
        kn_ir *ir;
        at_buf_init(&b);
        ss_state_print(st, &b);
        printf("%s", b.data);
        at_buf_reset(&b);
        if (kn_lower(st, &ir, err, sizeof err) != AT_OK)
            fail_msg("lower: %s", err);
        kn_ir_print(ir, &b);
        printf("%s", b.data);
        kn_ir_free(ir);
        at_buf_fini(&b);
    }
    assert_int_equal(kn_rt_pool_new(2, &pool), AT_OK);
    run_state(st, &bs, kn_rt_pool_par(pool));
    ref = at_malloc((size_t)M * N * sizeof *ref);
    ref_matmul(M, N, K, 0, bs.ptr[0], bs.ptr[1], ref);
    double e = kn_rt_rel_err(bs.ptr[2], ref, AT_DT_F32, (int64_t)M * N);
    if (!(e <= 1e-5))
        fail_msg("rel err %g", e);
    at_free(ref);
    kn_bufset_free(&bs);
    kn_rt_pool_free(pool);
    ss_state_free(st);
    ss_dag_unref(dag);
}

/* Layout rewrite: B is stored in the order the tiles read it; the kernel takes the new
** layout, the artifact's pre-transform makes it from B, and the result is unchanged. */
static void test_layout_rewrite(void **unused)
{
    ss_dag *dag;
    ss_state *st, *naive;
    kn_bufset bs, ref;
    kn_ir *ir;
    kn_artifact *a;
    char err[512];
    at_buf b;
    (void)unused;
    dag = op_dag("matmul:M=32,N=48,K=24");
    assert_int_equal(ss_state_new(dag, &st), AT_OK);
    assert_int_equal(ss_state_new(dag, &naive), AT_OK);
    OK(ss_state_split(st, 2, 0, 1, (int64_t[]){8}, err, sizeof err));          /* i0 i1 j k */
    OK(ss_state_split(st, 2, 2, 2, (int64_t[]){2, 8}, err, sizeof err));       /* j0 j1 j2 */
    OK(ss_state_split(st, 2, 5, 1, (int64_t[]){4}, err, sizeof err));          /* k0 k1 */
    /* i0 j0 k0 j1 i1 k1 j2 */
    OK(ss_state_reorder(st, 2, 7, (int64_t[]){0, 2, 5, 3, 1, 6, 4}, err, sizeof err));
    OK(ss_state_annotate(st, 2, 6, SS_ANN_VECTORIZE, err, sizeof err));
    OK(ss_state_layout_rewrite(st, 2, 1, err, sizeof err));
    /* the weight is now read from B.layout with the tiles' dimensions */
    assert_int_equal(ss_state_find_stage(st, "B.layout"), 2);
    assert_int_equal(st->dag->ops[2].n_dims, 5); /* j0 k0 j1 k1 j2: 3 x 6 x 2 x 4 x 8 */
    assert_int_equal(st->dag->ops[2].shape[0], 3);
    assert_int_equal(st->dag->ops[2].shape[4], 8);
    assert_int_equal(kn_lower(st, &ir, err, sizeof err), AT_OK);
    assert_non_null(ir->pre);
    at_buf_init(&b);
    kn_ir_print(ir, &b);
    /* contiguous in the innermost (vectorized) loop */
    assert_non_null(strstr(b.data, "B.layout["));
    at_buf_fini(&b);
    assert_int_equal(kn_build(ir, &host, NULL, &a, err, sizeof err), AT_OK);
    assert_string_equal(a->pre_entry, "at_kernel_pre");
    assert_int_equal(a->n_pre, 1);
    assert_int_equal(a->pre_src[0], 1);
    assert_int_equal(a->kernel_src[1], 1);
    assert_int_equal(a->kernel_args[1].n_dims, 5);
    assert_int_equal(kn_bufset_alloc(a, 7, &bs), AT_OK);
    if (kn_run_once(a, &bs, kn_rt_serial_par(), err, sizeof err) != AT_OK)
        fail_msg("run: %s", err);
    kn_artifact_free(a);
    kn_ir_free(ir);
    run_state(naive, &ref, kn_rt_serial_par());
    assert_true(kn_rt_rel_err(bs.ptr[2], ref.ptr[2], AT_DT_F32, 32 * 48) <= 1e-5);
    /* the JSON form replays to the same structure */
    {
        at_buf j1, j2;
        ss_state *back;
        at_buf_init(&j1);
        at_buf_init(&j2);
        ss_state_to_json(st, &j1);
        assert_non_null(strstr(j1.data, "[\"LR\",2,1]"));
        assert_int_equal(ss_state_from_json(dag, j1.data, j1.len, &back, err, sizeof err), AT_OK);
        ss_state_to_json(back, &j2);
        assert_string_equal(j1.data, j2.data);
        ss_state_free(back);
        at_buf_fini(&j1);
        at_buf_fini(&j2);
    }
    /* refused: an input that is not a weight, and a reader with a fused loop over it */
    {
        ss_step s;
        memset(&s, 0, sizeof s);
        s.kind = SS_STEP_LAYOUT_REWRITE;
        s.stage = 3;
        s.a = 0;
        assert_int_equal(ss_state_apply(st, &s, err, sizeof err), AT_ESCHED);
        assert_non_null(strstr(err, "only constant inputs"));
    }
    kn_bufset_free(&bs);
    kn_bufset_free(&ref);
    ss_state_free(st);
    ss_state_free(naive);
    ss_dag_unref(dag);
}

static int setup(void **unused)
{
    (void)unused;
    return kn_target_host(&host) == AT_OK ? 0 : -1;
}

/* exp, erf, tanh and sigmoid of float32 are straight-line code (kn_llvm.c), not libm calls:
** checked against libm in double over [-100, 100] and the special values, both as scalar
** code (the naive schedule) and vectorized by 8 (the path tuned kernels take). */
static void check_fn(const char *fn, double (*ref)(double), double abs_tol, double rel_tol)
{
    enum { N = 4096 };
    char text[512], err[512];
    ss_dag *dag;
    float *x;
    for (int vec = 0; vec <= 1; vec++) {
        ss_state *st;
        kn_ir *ir = NULL;
        kn_artifact *a = NULL;
        kn_bufset bs;
        snprintf(text, sizeof text, "input X[%d] float32\nY[i:%d] = %s(X[i])\n", N, N, fn);
        if (ss_dag_parse(text, strlen(text), &dag, err, sizeof err) != AT_OK)
            fail_msg("%s", err);
        assert_int_equal(ss_state_new(dag, &st), AT_OK);
        if (vec) {
            OK(ss_state_split(st, 1, 0, 1, (int64_t[]){8}, err, sizeof err));
            OK(ss_state_annotate(st, 1, 1, SS_ANN_VECTORIZE, err, sizeof err));
        }
        OK(kn_lower(st, &ir, err, sizeof err));
        OK(kn_build(ir, &host, NULL, &a, err, sizeof err));
        assert_int_equal(kn_bufset_alloc(a, 7, &bs), AT_OK);
        x = bs.ptr[0];
        for (int i = 0; i < N - 16; i++)
            x[i] = (float)(-100.0 + 200.0 * i / (N - 17)); /* the range, evenly */
        {
            static const float special[16] = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-6f, 0.03f,
                                              0.05f, -0.05f, 88.0f, -87.0f, -88.0f, 90.0f,
                                              -1e9f, 1e9f, 0, 0};
            for (int i = 0; i < 16; i++)
                x[N - 16 + i] = special[i];
            x[N - 2] = INFINITY;
            x[N - 1] = -INFINITY;
        }
        if (kn_run_once(a, &bs, kn_rt_serial_par(), err, sizeof err) != AT_OK)
            fail_msg("run: %s", err);
        for (int i = 0; i < N; i++) {
            double want = (float)ref(x[i]), got = ((float *)bs.ptr[1])[i];
            double tol = abs_tol + rel_tol * fabs(want);
            if (isinf(want) ? got != want : !(fabs(got - want) <= tol))
                fail_msg("%s(%.9g) = %.9g, want %.9g (%s)", fn, (double)x[i], got, want,
                         vec ? "vectorized" : "scalar");
        }
        kn_bufset_free(&bs);
        kn_artifact_free(a);
        kn_ir_free(ir);
        ss_state_free(st);
        ss_dag_unref(dag);
    }
    /* NaN stays NaN */
    {
        ss_state *st;
        kn_ir *ir = NULL;
        kn_artifact *a = NULL;
        kn_bufset bs;
        snprintf(text, sizeof text, "input X[8] float32\nY[i:8] = %s(X[i])\n", fn);
        assert_int_equal(ss_dag_parse(text, strlen(text), &dag, err, sizeof err), AT_OK);
        assert_int_equal(ss_state_new(dag, &st), AT_OK);
        OK(kn_lower(st, &ir, err, sizeof err));
        OK(kn_build(ir, &host, NULL, &a, err, sizeof err));
        assert_int_equal(kn_bufset_alloc(a, 7, &bs), AT_OK);
        for (int i = 0; i < 8; i++)
            ((float *)bs.ptr[0])[i] = NAN;
        OK(kn_run_once(a, &bs, kn_rt_serial_par(), err, sizeof err));
        if (!isnan(((float *)bs.ptr[1])[0]))
            fail_msg("%s(NaN) = %g", fn, (double)((float *)bs.ptr[1])[0]);
        kn_bufset_free(&bs);
        kn_artifact_free(a);
        kn_ir_free(ir);
        ss_state_free(st);
        ss_dag_unref(dag);
    }
}

static double sigmoid_ref(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

static void test_math_functions(void **unused)
{
    (void)unused;
    /* exp: relative 3e-7 (a few ulp), subnormal results within one subnormal step */
    check_fn("exp", exp, 1.5e-45, 3e-7);
    check_fn("erf", erf, 2e-7, 2e-7);
    check_fn("tanh", tanh, 2e-7, 3e-7);
    check_fn("sigmoid", sigmoid_ref, 2e-7, 3e-7);
}

/* LLVM's partial unrolling stays within its budget (kernels/kn_target.c): a rolled Winograd
** GEMM of ResNet-18 (auto_unroll_max_step 0) grew from 16 KB of IR to 85 KB at -O3 with the
** CPU's default budget (512 micro-ops on Zen) and took 4x as long to build; with the budget
** of 150 it stays under 48 KB (44 KB with LLVM 16).  The size is of the optimised module for a
** fixed CPU, so the check does not depend on the host.  The kernel must still match the
** naive GEMM on random inputs. */
static void test_unroll_budget(void **unused)
{
    static const char dag_text[] =
        "input V[6, 6, 49, 128] float32\n"
        "const U[6, 6, 128, 128] float32\n"
        "M[e:6, f:6, p:49, k:128] = sum[c:128](V[e, f, p, c] * U[e, f, c, k])\n";
    static const char state_json[] =
        "{\"v\":1,\"steps\":[[\"CHW\",2,\"local\"],[\"SP\",2,4,128,[32],1],"
        "[\"SP\",2,3,128,[4,1,8],1],[\"SP\",2,2,49,[7,1,7],1],[\"SP\",2,1,6,[1,1,1],1],"
        "[\"SP\",2,0,6,[2,1,1],1],[\"RE\",2,[0,4,8,12,1,5,9,13,16,2,6,10,14,17,3,7,11,15]],"
        "[\"FSP\",3,3,2,1],[\"FSP\",3,2,3,1],[\"FSP\",3,1,4,1],[\"FSP\",3,0,5,1],"
        "[\"RE\",3,[0,2,4,6,1,3,5,7]],[\"CA\",2,3,3],[\"FU\",3,[0,1,2]],[\"AN\",3,0,3],"
        "[\"PR\",2,0,\"auto_unroll_max_step$0\"],[\"AN\",2,17,2],[\"AN\",3,5,2],[\"LR\",2,1]]}";
    char err[512];
    ss_dag *dag = NULL;
    ss_state *st = NULL;
    kn_ir *ir = NULL;
    kn_target zen3;
    char *raw = NULL, *opt = NULL;
    float *ref;
    kn_bufset bs;
    (void)unused;
    OK(ss_dag_parse(dag_text, strlen(dag_text), &dag, err, sizeof err));
    OK(ss_state_from_json(dag, state_json, strlen(state_json), &st, err, sizeof err));
    OK(kn_lower(st, &ir, err, sizeof err));
    OK(kn_target_parse("llvm -mtriple=x86_64-pc-linux-gnu -mcpu=znver3", &zen3, err, sizeof err));
    OK(kn_build_llvm_text(ir, &zen3, 0, &raw, err, sizeof err));
    OK(kn_build_llvm_text(ir, &zen3, 1, &opt, err, sizeof err));
    if (strlen(opt) > 48 * 1024)
        fail_msg("optimised IR %zu bytes (from %zu): LLVM's partial unrolling is not limited",
                 strlen(opt), strlen(raw));
    kn_ir_free(ir);
    run_state(st, &bs, kn_rt_serial_par());
    assert_int_equal(bs.n_elems[2], 6 * 6 * 49 * 128);
    ref = at_malloc(6 * 6 * 49 * 128 * sizeof *ref);
    ref_batch_matmul(36, 49, 128, 128, 0, bs.ptr[0], bs.ptr[1], ref);
    double e = kn_rt_rel_err(bs.ptr[2], ref, AT_DT_F32, 6 * 6 * 49 * 128);
    if (!(e <= 1e-5))
        fail_msg("rel err %g against the naive batched GEMM", e);
    at_free(ref);
    kn_bufset_free(&bs);
    at_free(raw);
    at_free(opt);
    ss_state_free(st);
    ss_dag_unref(dag);
}

static int count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* The last output of 'st' run serially matches the naive schedule's (n floats). */
static void matches_naive(const ss_state *st, const ss_state *naive, int64_t n)
{
    kn_bufset bs, ref;
    double e;
    run_state(st, &bs, kn_rt_serial_par());
    run_state(naive, &ref, kn_rt_serial_par());
    e = kn_rt_rel_err(bs.ptr[bs.n - 1], ref.ptr[ref.n - 1], AT_DT_F32, n);
    if (!(e <= 1e-5))
        fail_msg("rel err %g against the naive schedule", e);
    kn_bufset_free(&bs);
    kn_bufset_free(&ref);
}

/* A register tile's reduction loop prefetches the weight it streams (kn_llvm.c, "software
** prefetch"): BERT's 128 x 768 x 768 dense layer with its bias, as a tuning run found it
** (tiles of 8 rows x 2 vectors of 16, each summed over k in a rolled loop of 64 steps of
** 12, the weight in the tiles' layout), so each step reads 12 x 2 x 16 floats of the
** weight: 24 lines, prefetched 2048 bytes (2 steps) ahead by default, not at all with
** -prefetch-bytes=0; the bias (3 KiB) is not, nor anything on a core whose L2 holds the
** weight.  The tile's accumulators must stay in registers: without the
** prefetches' memory attribute LICM left them stored to the workspace every step (a store
** in the loop's block).  And the kernel still matches the naive one. */
static void test_prefetch(void **unused)
{
    static const char state_json[] =
        "{\"v\":1,\"steps\":[[\"SP\",3,2,768,[12],1],[\"SP\",3,1,768,[4,2,16],1],"
        "[\"SP\",3,0,128,[16,1,8],1],[\"RE\",3,[0,4,1,5,8,2,6,9,3,7]],[\"FSP\",4,1,1,1],"
        "[\"FSP\",4,0,2,1],[\"RE\",4,[0,2,1,3]],[\"CA\",3,4,1],[\"FU\",4,[0,1]],[\"AN\",4,0,3],"
        "[\"SP\",4,2,128,[32],1],[\"AN\",4,3,2],[\"PR\",3,0,\"auto_unroll_max_step$512\"],"
        "[\"AN\",3,9,2],[\"LR\",3,1]]}";
    ss_dag *dag;
    ss_state *st, *naive;
    kn_ir *ir;
    kn_target on, off;
    char err[512], *raw = NULL, *opt = NULL, *none = NULL;
    int n;
    (void)unused;
    dag = op_dag("dense:M=128,N=768,K=768,bias=1");
    OK(ss_state_from_json(dag, state_json, strlen(state_json), &st, err, sizeof err));
    assert_int_equal(ss_state_new(dag, &naive), AT_OK);
    OK(kn_lower(st, &ir, err, sizeof err));
    OK(kn_target_parse("llvm -mtriple=x86_64-pc-linux-gnu -mcpu=skylake-avx512", &on, err,
                       sizeof err));
    assert_int_equal(on.prefetch_bytes, KN_PREFETCH_BYTES_DEFAULT);
    assert_null(strstr(on.text, "prefetch"));
    OK(kn_target_parse("llvm -mtriple=x86_64-pc-linux-gnu -mcpu=skylake-avx512 "
                       "-prefetch-bytes=0", &off, err, sizeof err));
    assert_int_equal(off.prefetch_bytes, 0);
    assert_non_null(strstr(off.text, " -prefetch-bytes=0"));
    OK(kn_build_llvm_text(ir, &on, 0, &raw, err, sizeof err));
    OK(kn_build_llvm_text(ir, &on, 1, &opt, err, sizeof err));
    OK(kn_build_llvm_text(ir, &off, 1, &none, err, sizeof err));
    n = count_of(raw, "call void @llvm.prefetch");
    if (n < 24)
        fail_msg("%d prefetches, expected the k loop's 24 lines of the weight at least", n);
    assert_true(count_of(opt, "call void @llvm.prefetch") >= 24);
    assert_int_equal(count_of(none, "llvm.prefetch"), 0);
    /* only the 2.25 MiB weight is prefetched (its lines from one base), not the 3 KiB bias
    ** the same loop reads: it fits the L2 (1 MiB for a target that is not this host) */
    assert_int_equal(count_of(raw, "getelementptr i8, ptr %W.layout,"), 1);
    assert_int_equal(count_of(raw, "getelementptr i8, ptr %b,"), 0);
    /* a core whose L2 holds the weight too prefetches nothing */
    {
        kn_target big = on;
        char *t = NULL;
        big.l2_bytes = 4 << 20;
        OK(kn_build_llvm_text(ir, &big, 0, &t, err, sizeof err));
        assert_int_equal(count_of(t, "llvm.prefetch"), 0);
        at_free(t);
    }
    /* the optimised block that holds the most prefetches (the k loop's) stores nothing */
    {
        const char *best = NULL, *best_end = NULL;
        int most = 0;
        for (const char *blk = opt; blk; blk = strstr(blk + 1, "\n\n")) {
            const char *end = strstr(blk + 2, "\n\n");
            int k = 0;
            if (end == NULL)
                end = blk + strlen(blk);
            for (const char *p = strstr(blk, "call void @llvm.prefetch"); p && p < end;
                 p = strstr(p + 1, "call void @llvm.prefetch"))
                k++;
            if (k > most) {
                most = k;
                best = blk;
                best_end = end;
            }
        }
        assert_true(most >= 24);
        for (const char *p = strstr(best, "  store "); p && p < best_end; p = strstr(p + 1, "  store "))
            fail_msg("a store in the prefetching loop's block: %.80s", p);
    }
    kn_ir_free(ir);
    matches_naive(st, naive, 128 * 768); /* built for the host: prefetching */
    at_free(raw);
    at_free(opt);
    at_free(none);
    ss_state_free(st);
    ss_state_free(naive);
    ss_dag_unref(dag);
}

/* The next panel (kn_llvm.c, "The next panel"): BERT's 80 x 768 x 768 dense layer as a
** tuning run found it: each parallel task a block of 64 columns over all of k and all 80
** rows, 20 tiles of 4 rows each summed over k in a rolled loop (384 steps of 2).  The
** block's 192 KiB panel comes from memory on its first tile only, so the loop prefetches
** the next block's panel into the L2 (locality 2), a line a step (3,072 lines over 20 x 384
** steps), instead of lines a fixed distance ahead (locality 3, which it no longer emits);
** with -prefetch-bytes=0 nothing; and the kernel still matches the naive one. */
static void test_prefetch_panel(void **unused)
{
    static const char state_json[] =
        "{\"v\":1,\"steps\":[[\"SP\",3,2,768,[2],1],[\"SP\",3,1,768,[1,4,16],1],"
        "[\"SP\",3,0,80,[20,2,2],1],[\"RE\",3,[0,4,1,5,8,2,6,9,3,7]],[\"FSP\",4,1,1,2],"
        "[\"FSP\",4,0,2,2],[\"RE\",4,[0,3,1,4,2,5]],[\"CA\",3,4,3],[\"FU\",4,[0,1]],"
        "[\"AN\",4,0,3],[\"PR\",3,0,\"auto_unroll_max_step$64\"],[\"AN\",3,9,2],"
        "[\"AN\",4,4,2],[\"LR\",3,1]]}";
    ss_dag *dag;
    ss_state *st, *naive;
    kn_ir *ir;
    kn_target on, off;
    char err[512], *raw = NULL, *none = NULL;
    int n;
    (void)unused;
    dag = op_dag("dense:M=80,N=768,K=768,bias=1");
    OK(ss_state_from_json(dag, state_json, strlen(state_json), &st, err, sizeof err));
    assert_int_equal(ss_state_new(dag, &naive), AT_OK);
    OK(kn_lower(st, &ir, err, sizeof err));
    OK(kn_target_parse("llvm -mtriple=x86_64-pc-linux-gnu -mcpu=skylake-avx512", &on, err,
                       sizeof err));
    OK(kn_target_parse("llvm -mtriple=x86_64-pc-linux-gnu -mcpu=skylake-avx512 "
                       "-prefetch-bytes=0", &off, err, sizeof err));
    OK(kn_build_llvm_text(ir, &on, 0, &raw, err, sizeof err));
    OK(kn_build_llvm_text(ir, &off, 0, &none, err, sizeof err));
    n = count_of(raw, "call void @llvm.prefetch.p0(ptr %");
    if (count_of(raw, ", i32 0, i32 2, i32 1)") < 1 || count_of(raw, ", i32 0, i32 2, i32 1)") != n)
        fail_msg("%d prefetches, %d of them into the L2: expected the next panel's only", n,
                 count_of(raw, ", i32 0, i32 2, i32 1)"));
    assert_int_equal(count_of(raw, "getelementptr i8, ptr %W.layout,"), 1);
    assert_int_equal(count_of(none, "llvm.prefetch"), 0);
    kn_ir_free(ir);
    matches_naive(st, naive, 80 * 768); /* built for the host: prefetching */
    at_free(raw);
    at_free(none);
    ss_state_free(st);
    ss_state_free(naive);
    ss_dag_unref(dag);
}

/* kn_ir_code_size counts what the back end gets: an unrolled loop's body once per
** iteration, a loop that stays a loop once; auto_unroll_max_step unrolls the serial loops
** whose unrolled body fits the budget, as kn_llvm.c does.  B[i, j] = A[i, j] * 2 over 4 x 16:
** naive size S = 2 loops + the store's nodes (n), so j unrolled is 2 + 16 n, both unrolled
** by a budget of 64 is 1 + 4 (1 + 16 n), and a budget of 8 unrolls nothing. */
static void test_code_size(void **unused)
{
    static const char dag_text[] = "input A[4, 16] float32\n"
                                   "B[i:4, j:16] = A[i, j] * 2.0\n";
    char err[512];
    ss_dag *dag = NULL;
    ss_state *st = NULL, *un = NULL, *a64 = NULL, *a8 = NULL;
    kn_ir *ir = NULL;
    int64_t s0, n, s_un, s64, s8;
    (void)unused;
    OK(ss_dag_parse(dag_text, strlen(dag_text), &dag, err, sizeof err));
    OK(ss_state_new(dag, &st));
    OK(kn_lower(st, &ir, err, sizeof err));
    s0 = kn_ir_code_size(ir);
    kn_ir_free(ir);
    n = s0 - 2;
    assert_true(n >= 3); /* index, load, multiply at least */
    OK(ss_state_copy(st, &un));
    OK(ss_state_annotate(un, 1, 1, SS_ANN_UNROLL, err, sizeof err));
    OK(kn_lower(un, &ir, err, sizeof err));
    s_un = kn_ir_code_size(ir);
    kn_ir_free(ir);
    assert_int_equal(s_un, 2 + 16 * n);
    OK(ss_state_copy(st, &a64));
    OK(ss_state_pragma_unroll(a64, 1, 0, 64, err, sizeof err));
    OK(kn_lower(a64, &ir, err, sizeof err));
    s64 = kn_ir_code_size(ir);
    kn_ir_free(ir);
    assert_int_equal(s64, 1 + 4 * (1 + 16 * n));
    OK(ss_state_copy(st, &a8));
    OK(ss_state_pragma_unroll(a8, 1, 0, 8, err, sizeof err));
    OK(kn_lower(a8, &ir, err, sizeof err));
    s8 = kn_ir_code_size(ir);
    kn_ir_free(ir);
    assert_int_equal(s8, s0);
    ss_state_free(st);
    ss_state_free(un);
    ss_state_free(a64);
    ss_state_free(a8);
    ss_dag_unref(dag);
}

/* A parallel runtime that runs some of the n tasks of a launch, one after another, in a
** given order: the tasks that a real pool's late workers never join, and any order. */
typedef struct some_tasks {
    kn_rt_par par;
    int n_run, run[8];
} some_tasks;

static int32_t some_tasks_launch(const kn_rt_par *par, kn_rt_task_fn fn, void *closure)
{
    const some_tasks *p = (const some_tasks *)par;
    for (int i = 0; i < p->n_run; i++) {
        int32_t rc = fn(closure, p->run[i], par->n_threads);
        if (rc)
            return rc;
    }
    return 0;
}

/* A parallel loop's chunks are claimed in blocks, one per task (16 at most), a task's own
** block from the front and the others' from the back: whichever tasks run, in whatever
** order, every iteration runs. */
static void test_parallel_claims(void **unused)
{
    static const struct {
        int n, n_run, run[8];
    } cases[] = {
        {1, 1, {0}},          {2, 1, {0}},          {2, 1, {1}},
        {2, 2, {1, 0}},       {4, 1, {3}},          {4, 2, {2, 1}},
        {4, 4, {3, 2, 1, 0}}, {5, 3, {4, 0, 2}},    {20, 1, {17}},
        {20, 3, {19, 0, 16}}, {50, 2, {49, 3}},     {3, 3, {0, 1, 2}},
    };
    enum { M = 37, N = 29, K = 23 };
    ss_dag *dag = op_dag("matmul:M=37,N=29,K=23");
    ss_state *st;
    kn_ir *ir = NULL;
    kn_artifact *a = NULL;
    kn_bufset bs;
    float *ref = at_malloc(M * N * sizeof *ref);
    char err[512];
    (void)unused;
    assert_non_null(ref);
    OK(ss_state_new(dag, &st));
    OK(ss_state_annotate(st, 2, 0, SS_ANN_PARALLEL, err, sizeof err)); /* i: 37 iterations */
    OK(kn_lower(st, &ir, err, sizeof err));
    OK(kn_build(ir, &host, NULL, &a, err, sizeof err));
    assert_int_equal(kn_bufset_alloc(a, 7, &bs), AT_OK);
    ref_matmul(M, N, K, 0, bs.ptr[0], bs.ptr[1], ref);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        some_tasks p;
        double e;
        memset(&p, 0, sizeof p);
        p.par.launch = some_tasks_launch;
        p.par.n_threads = cases[c].n;
        p.n_run = cases[c].n_run;
        memcpy(p.run, cases[c].run, sizeof p.run);
        memset(bs.ptr[2], 0xff, M * N * sizeof(float)); /* NaN where nothing is written */
        OK(kn_run_once(a, &bs, &p.par, err, sizeof err));
        e = kn_rt_rel_err(bs.ptr[2], ref, AT_DT_F32, M * N);
        if (!(e <= 1e-5))
            fail_msg("%d tasks, %d of them run: relative error %g", cases[c].n, cases[c].n_run, e);
    }
    kn_bufset_free(&bs);
    kn_artifact_free(a);
    kn_ir_free(ir);
    ss_state_free(st);
    ss_dag_unref(dag);
    at_free(ref);
}

static uint64_t hash_of(const ss_state *st)
{
    char err[512];
    kn_ir *ir = NULL;
    uint64_t h;
    OK(kn_lower(st, &ir, err, sizeof err));
    h = kn_ir_hash(ir);
    kn_ir_free(ir);
    return h;
}

/* kn_ir_hash: states that lower to one program hash the same (an auto-unroll budget that
** decides nothing, whatever its number), and a change of the code does not. */
static void test_ir_hash(void **unused)
{
    static const char dag_text[] = "input A[4, 16] float32\n"
                                   "B[i:4, j:16] = A[i, j] * 2.0\n";
    static const char dag3_text[] = "input A[4, 16] float32\n"
                                    "B[i:4, j:16] = A[i, j] * 3.0\n";
    static const int budgets[] = {8, 16, 64, 512};
    char err[512];
    ss_dag *dag = NULL, *dag3 = NULL;
    ss_state *st = NULL, *st3 = NULL, *un = NULL, *b[4];
    uint64_t h, hb[4];
    (void)unused;
    OK(ss_dag_parse(dag_text, strlen(dag_text), &dag, err, sizeof err));
    OK(ss_dag_parse(dag3_text, strlen(dag3_text), &dag3, err, sizeof err));
    OK(ss_state_new(dag, &st));
    OK(ss_state_new(dag3, &st3));
    h = hash_of(st);
    assert_true(h == hash_of(st)); /* deterministic */
    assert_true(h != hash_of(st3)); /* another constant */
    OK(ss_state_copy(st, &un));
    OK(ss_state_annotate(un, 1, 1, SS_ANN_UNROLL, err, sizeof err));
    assert_true(h != hash_of(un)); /* j copied out 16 times */
    for (int i = 0; i < 4; i++) {
        OK(ss_state_copy(st, &b[i]));
        OK(ss_state_pragma_unroll(b[i], 1, 0, budgets[i], err, sizeof err));
        hb[i] = hash_of(b[i]);
    }
    assert_true(hb[0] == h);     /* 8 < 16 stores of j: nothing unrolled, the plain program */
    assert_true(hb[1] != h);     /* 16: j copied out */
    assert_true(hb[1] != hb[2]); /* 64: i and j */
    assert_true(hb[2] == hb[3]); /* 512 unrolls what 64 did: one program */
    for (int i = 0; i < 4; i++)
        ss_state_free(b[i]);
    ss_state_free(st);
    ss_state_free(st3);
    ss_state_free(un);
    ss_dag_unref(dag);
    ss_dag_unref(dag3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_naive_matmul_matches_c),
        cmocka_unit_test(test_tiled_matmul),
        cmocka_unit_test(test_layout_rewrite),
        cmocka_unit_test(test_math_functions),
        cmocka_unit_test(test_unroll_budget),
        cmocka_unit_test(test_prefetch),
        cmocka_unit_test(test_prefetch_panel),
        cmocka_unit_test(test_code_size),
        cmocka_unit_test(test_ir_hash),
        cmocka_unit_test(test_parallel_claims),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
