/* tests/bench/bench_vendor.c -- the references our kernels are compared with, measured on
** this machine in the same run: the FMA peak, OpenBLAS and oneDNN sgemm, oneDNN conv2d.
**
**   bench_vendor [--threads N] [--reps R] [--size S] [--what peak,sgemm,conv]
**                [--conv N,C,H,W,K,R,S,stride,pad]
** Lines "bench NAME VALUE UNIT"; medians of R runs.  Run it with OPENBLAS_CORETYPE and
** OPENBLAS_L2_SIZE unset and OMP_NUM_THREADS set to the thread count (scripts/bench.sh). */
#include <cblas.h>
#include <immintrin.h>
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "kernels/kernels_rt.h"

/* ---- FMA peak: independent chains of vector FMAs ---- */

#define CHAINS 12
#define ITERS 20000000L

/* Twelve independent accumulators in registers (written out: a loop over an array would
** keep them in memory). */
#define FMA_BODY(T, FMA)                                                                       \
    T a0 = s, a1 = s, a2 = s, a3 = s, a4 = s, a5 = s, a6 = s, a7 = s, a8 = s, a9 = s, a10 = s,     \
      a11 = s;                                                                                 \
    double t0 = at_time_mono_s();                                                              \
    for (long k = 0; k < ITERS / 4; k++) {                                                     \
        a0 = FMA(a0, x, y), a1 = FMA(a1, x, y), a2 = FMA(a2, x, y), a3 = FMA(a3, x, y);        \
        a4 = FMA(a4, x, y), a5 = FMA(a5, x, y), a6 = FMA(a6, x, y), a7 = FMA(a7, x, y);        \
        a8 = FMA(a8, x, y), a9 = FMA(a9, x, y), a10 = FMA(a10, x, y), a11 = FMA(a11, x, y);    \
    }                                                                                          \
    t0 = at_time_mono_s() - t0;

__attribute__((target("avx512f"))) static double fma512(void)
{
    __m512 s = _mm512_set1_ps(0.5f), x = _mm512_set1_ps(1.0000001f), y = _mm512_set1_ps(0.9999999f);
    volatile float sink;
    FMA_BODY(__m512, _mm512_fmadd_ps)
    sink = _mm512_reduce_add_ps(_mm512_add_ps(
        _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
        _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)),
                      _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)))));
    (void)sink;
    return (double)CHAINS * 16 * 2 * (ITERS / 4) / t0;
}

__attribute__((target("avx2,fma"))) static double fma256(void)
{
    __m256 s = _mm256_set1_ps(0.5f), x = _mm256_set1_ps(1.0000001f), y = _mm256_set1_ps(0.9999999f);
    float tmp[8];
    volatile float sink = 0;
    FMA_BODY(__m256, _mm256_fmadd_ps)
    _mm256_storeu_ps(tmp, _mm256_add_ps(
        _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                      _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7))),
        _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11))));
    for (int l = 0; l < 8; l++)
        sink += tmp[l];
    (void)sink;
    return (double)CHAINS * 8 * 2 * (ITERS / 4) / t0;
}

static void *peak_thread(void *arg)
{
    double *out = arg;
    *out = __builtin_cpu_supports("avx512f") ? fma512() : fma256();
    return NULL;
}

static double peak(int threads)
{
    pthread_t th[64];
    double r[64], sum = 0;
    for (int i = 0; i < threads; i++)
        pthread_create(&th[i], NULL, peak_thread, &r[i]);
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        sum += r[i];
    }
    return sum * 1e-9;
}

/* ---- sgemm ---- */

static double time_until(void (*fn)(void *), void *ctx, double min_s)
{
    double t0 = at_time_mono_s(), t;
    int k = 0;
    fn(ctx); /* warm up */
    t0 = at_time_mono_s();
    do {
        fn(ctx);
        k++;
        t = at_time_mono_s() - t0;
    } while (t < min_s);
    return t / k;
}

typedef struct gemm {
    int n;
    float *a, *b, *c;
} gemm;

static void run_openblas(void *ctx)
{
    gemm *g = ctx;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->n, g->n, g->n, 1.0f, g->a, g->n,
                g->b, g->n, 0.0f, g->c, g->n);
}

static void run_dnnl_gemm(void *ctx)
{
    gemm *g = ctx;
    dnnl_sgemm('N', 'N', g->n, g->n, g->n, 1.0f, g->a, g->n, g->b, g->n, 0.0f, g->c, g->n);
}

/* ---- oneDNN conv2d (NCHW semantics; the library chooses its own blocked layouts, weights
** and input are reordered once outside the timed calls, as a framework would) ---- */

typedef struct conv {
    dnnl_primitive_t prim;
    dnnl_stream_t stream;
    dnnl_exec_arg_t args[3];
} conv;

static void run_dnnl_conv(void *ctx)
{
    conv *c = ctx;
    dnnl_primitive_execute(c->prim, c->stream, 3, c->args);
    dnnl_stream_wait(c->stream);
}

#define DNNL_OK(x)                                                                             \
    do {                                                                                       \
        if ((x) != dnnl_success) {                                                             \
            fprintf(stderr, "bench_vendor: %s failed\n", #x);                                  \
            return 0;                                                                          \
        }                                                                                      \
    } while (0)

static double dnnl_conv_flops_per_s(const int p[9], int reps)
{
    int N = p[0], C = p[1], H = p[2], W = p[3], K = p[4], R = p[5], S = p[6], st = p[7], pd = p[8];
    int OH = (H + 2 * pd - R) / st + 1, OW = (W + 2 * pd - S) / st + 1;
    dnnl_engine_t eng;
    dnnl_memory_desc_t src, wei, dst;
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t pd_;
    dnnl_memory_t msrc, mwei, mdst;
    conv c;
    dnnl_dims_t sd = {N, C, H, W}, wd = {K, C, R, S}, dd = {N, K, OH, OW};
    dnnl_dims_t strides = {st, st}, pad = {pd, pd};
    double times[64], flops = 2.0 * N * K * OH * OW * C * R * S;
    DNNL_OK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    DNNL_OK(dnnl_stream_create(&c.stream, eng, dnnl_stream_default_flags));
    DNNL_OK(dnnl_memory_desc_init_by_tag(&src, 4, sd, dnnl_f32, dnnl_format_tag_any));
    DNNL_OK(dnnl_memory_desc_init_by_tag(&wei, 4, wd, dnnl_f32, dnnl_format_tag_any));
    DNNL_OK(dnnl_memory_desc_init_by_tag(&dst, 4, dd, dnnl_f32, dnnl_format_tag_any));
    DNNL_OK(dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference,
                                               dnnl_convolution_direct, &src, &wei, NULL, &dst,
                                               strides, pad, pad));
    DNNL_OK(dnnl_primitive_desc_create(&pd_, &cd, NULL, eng, NULL));
    DNNL_OK(dnnl_memory_create(&msrc, dnnl_primitive_desc_query_md(pd_, dnnl_query_src_md, 0), eng,
                               DNNL_MEMORY_ALLOCATE));
    DNNL_OK(dnnl_memory_create(&mwei, dnnl_primitive_desc_query_md(pd_, dnnl_query_weights_md, 0),
                               eng, DNNL_MEMORY_ALLOCATE));
    DNNL_OK(dnnl_memory_create(&mdst, dnnl_primitive_desc_query_md(pd_, dnnl_query_dst_md, 0), eng,
                               DNNL_MEMORY_ALLOCATE));
    DNNL_OK(dnnl_primitive_create(&c.prim, pd_));
    c.args[0].arg = DNNL_ARG_SRC, c.args[0].memory = msrc;
    c.args[1].arg = DNNL_ARG_WEIGHTS, c.args[1].memory = mwei;
    c.args[2].arg = DNNL_ARG_DST, c.args[2].memory = mdst;
    for (int r = 0; r < reps; r++)
        times[r] = time_until(run_dnnl_conv, &c, 0.2);
    dnnl_primitive_destroy(c.prim);
    dnnl_primitive_desc_destroy(pd_);
    dnnl_memory_destroy(msrc);
    dnnl_memory_destroy(mwei);
    dnnl_memory_destroy(mdst);
    dnnl_stream_destroy(c.stream);
    dnnl_engine_destroy(eng);
    return flops / at_median_sort(times, reps);
}

int main(int argc, char **argv)
{
    int threads = 2, reps = 5, n = 1024;
    int cp[9] = {1, 64, 56, 56, 64, 3, 3, 1, 1};
    const char *what = "peak,sgemm,conv";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc)
            n = atoi(argv[++i]);
        else if (strcmp(argv[i], "--what") == 0 && i + 1 < argc)
            what = argv[++i];
        else if (strcmp(argv[i], "--conv") == 0 && i + 1 < argc &&
                 sscanf(argv[++i], "%d,%d,%d,%d,%d,%d,%d,%d,%d", &cp[0], &cp[1], &cp[2], &cp[3],
                        &cp[4], &cp[5], &cp[6], &cp[7], &cp[8]) == 9)
            ;
        else {
            fprintf(stderr, "usage: bench_vendor [--threads N] [--reps R] [--size S] "
                            "[--what peak,sgemm,conv] [--conv N,C,H,W,K,R,S,stride,pad]\n");
            return 2;
        }
    }
    if (threads < 1 || threads > 64 || reps < 1 || reps > 64 || n < 16) {
        fprintf(stderr, "bench_vendor: bad settings\n");
        return 2;
    }
    if (strstr(what, "peak")) {
        double v[64];
        for (int r = 0; r < reps; r++)
            v[r] = peak(threads);
        printf("bench peak_fma_%dt %.1f GFLOPS\n", threads, at_median_sort(v, reps));
    }
    if (strstr(what, "sgemm")) {
        gemm g = {n, kn_rt_alloc((size_t)n * n * 4), kn_rt_alloc((size_t)n * n * 4),
                  kn_rt_alloc((size_t)n * n * 4)};
        double v[64], w[64], flops = 2.0 * n * n * n;
        kn_rt_fill(g.a, AT_DT_F32, (int64_t)n * n, 1, 0);
        kn_rt_fill(g.b, AT_DT_F32, (int64_t)n * n, 1, 1);
        openblas_set_num_threads(threads);
        for (int r = 0; r < reps; r++) {
            v[r] = flops / time_until(run_openblas, &g, 0.2) * 1e-9;
            w[r] = flops / time_until(run_dnnl_gemm, &g, 0.2) * 1e-9;
        }
        printf("bench openblas_sgemm%d_%dt %.1f GFLOPS\n", n, threads, at_median_sort(v, reps));
        printf("bench onednn_sgemm%d_%dt %.1f GFLOPS\n", n, threads, at_median_sort(w, reps));
        kn_rt_free(g.a);
        kn_rt_free(g.b);
        kn_rt_free(g.c);
    }
    if (strstr(what, "conv")) {
        double f = dnnl_conv_flops_per_s(cp, reps);
        if (f <= 0)
            return 1;
        printf("bench onednn_conv2d_N%dC%dH%dW%dK%dR%dS%d_%dt %.1f GFLOPS\n", cp[0], cp[1], cp[2],
               cp[3], cp[4], cp[5], cp[6], threads, f * 1e-9);
    }
    return 0;
}
