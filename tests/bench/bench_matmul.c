/* tests/bench/bench_matmul.c -- the core issue's benchmark: a hand-written schedule of
** matmul 1024x1024x1024 fp32 on 2 threads next to OpenBLAS sgemm and oneDNN dnnl_sgemm,
** measured in the same run, and the median LLVM compile time of that kernel.
**
**   bench_matmul [--threads N] [--size S] [--reps R] [--schedule NAME]
** Prints "bench NAME VALUE UNIT" and "bench NAME/REF RATIO x" lines.  Run it with
** OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (scripts/bench.sh does). */
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

#define CHECK(x)                                                                               \
    do {                                                                                       \
        if ((x) != AT_OK) {                                                                    \
            fprintf(stderr, "bench_matmul: %s: %s\n", #x, err);                                \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

/* The hand-written schedule: each parallel task computes a 64x256 block of C in a
** cache-written accumulator, over K in panels of 256; each 256x32 panel of B is packed
** (cache_read) so that the 8x32 register tile streams it contiguously. */
static void schedule(ss_state *st)
{
    char err[512];
    int64_t mb = 64, nb = 256, kc = 256, mr = 8, nr = 32;
    /* stages: 0 A, 1 B, 2 C */
    CHECK(ss_state_cache_write(st, 2, "local", err, sizeof err)); /* 2 C.local, 3 C */
    CHECK(ss_state_cache_read(st, 1, "local", 1, (int64_t[]){2}, err, sizeof err));
    /* 2 B.local, 3 C.local, 4 C */
    /* C: (i0 j0) parallel | i1 j1 */
    CHECK(ss_state_split(st, 4, 0, 1, (int64_t[]){mb}, err, sizeof err));
    CHECK(ss_state_split(st, 4, 2, 1, (int64_t[]){nb}, err, sizeof err));
    CHECK(ss_state_reorder(st, 4, 4, (int64_t[]){0, 2, 1, 3}, err, sizeof err));
    CHECK(ss_state_fuse(st, 4, 2, (int64_t[]){0, 1}, err, sizeof err));
    CHECK(ss_state_annotate(st, 4, 0, SS_ANN_PARALLEL, err, sizeof err));
    CHECK(ss_state_split(st, 4, 2, 1, (int64_t[]){64}, err, sizeof err));
    CHECK(ss_state_annotate(st, 4, 3, SS_ANN_VECTORIZE, err, sizeof err));
    CHECK(ss_state_compute_at(st, 3, 4, 0, err, sizeof err));
    /* C.local (mb x nb block): k.0 j.0 | i.0 k.1 i.1 j.1 */
    CHECK(ss_state_split(st, 3, 0, 1, (int64_t[]){mr}, err, sizeof err));
    CHECK(ss_state_split(st, 3, 2, 1, (int64_t[]){nr}, err, sizeof err));
    CHECK(ss_state_split(st, 3, 4, 1, (int64_t[]){kc}, err, sizeof err));
    CHECK(ss_state_reorder(st, 3, 6, (int64_t[]){4, 2, 0, 5, 1, 3}, err, sizeof err));
    CHECK(ss_state_annotate(st, 3, 4, SS_ANN_UNROLL, err, sizeof err));
    CHECK(ss_state_annotate(st, 3, 5, SS_ANN_VECTORIZE, err, sizeof err));
    /* B.local: the kc x nr panel of B, packed at j.0 */
    CHECK(ss_state_compute_at(st, 2, 3, 1, err, sizeof err));
    CHECK(ss_state_annotate(st, 2, 1, SS_ANN_VECTORIZE, err, sizeof err));
}

int main(int argc, char **argv)
{
    int threads = 2, reps = 7;
    int64_t n = 1024;
    char spec[128], err[512];
    ss_dag *dag;
    ss_state *st;
    kn_ir *ir;
    kn_target host;
    kn_artifact *a = NULL;
    kn_bufset bs;
    kn_rt_pool *pool;
    kn_rt_module *m;
    kn_rt_kernel_fn fn;
    void *ws = NULL;
    double flops, ours[32], blas[32], dnnl[32], comp[32];
    float *C2;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc)
            n = atoll(argv[++i]);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_matmul [--threads N] [--size S] [--reps R]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > 32)
        reps = 7;
    snprintf(spec, sizeof spec, "matmul:M=%lld,N=%lld,K=%lld", (long long)n, (long long)n,
             (long long)n);
    CHECK(kn_op_build(spec, &dag, err, sizeof err));
    CHECK(kn_target_host(&host));
    CHECK(ss_state_new(dag, &st));
    schedule(st);
    CHECK(kn_lower(st, &ir, err, sizeof err));
    for (int r = 0; r < reps; r++) {
        kn_artifact_free(a);
        CHECK(kn_build(ir, &host, NULL, &a, err, sizeof err));
        comp[r] = a->compile_s * 1e3;
    }
    flops = dag->flops;
    CHECK(kn_rt_pool_new(threads, &pool));
    CHECK(kn_bufset_alloc(a, 1, &bs));
    CHECK(kn_rt_module_load(a->obj, a->obj_size, NULL, &m, err, sizeof err));
    fn = (kn_rt_kernel_fn)kn_rt_module_sym(m, a->entry);
    if (a->ws_fixed + a->ws_per_thread * threads > 0)
        ws = kn_rt_alloc((size_t)(a->ws_fixed + a->ws_per_thread * threads));
    C2 = kn_rt_alloc((size_t)(n * n) * sizeof(float));
    openblas_set_num_threads(threads);
    /* interleave the three so that noise hits them alike */
    for (int r = 0; r < reps; r++) {
        kn_rt_time_opts o = {.number = 1, .repeat = 1, .min_repeat_ms = 200, .n_warmup = 1};
        int32_t rc;
        double cost;
        CHECK(kn_rt_time(fn, bs.ptr, ws, kn_rt_pool_par(pool), &o, 0, NULL, &cost, &rc));
        ours[r] = flops / cost * 1e-9;
        {
            double t0 = at_time_mono_s(), t;
            int k = 0;
            do {
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f,
                            bs.ptr[0], (int)n, bs.ptr[1], (int)n, 0.0f, C2, (int)n);
                k++;
                t = at_time_mono_s() - t0;
            } while (t < 0.2);
            blas[r] = flops * k / t * 1e-9;
        }
        {
            double t0 = at_time_mono_s(), t;
            int k = 0;
            do {
                dnnl_sgemm('N', 'N', n, n, n, 1.0f, bs.ptr[0], n, bs.ptr[1], n, 0.0f, C2, n);
                k++;
                t = at_time_mono_s() - t0;
            } while (t < 0.2);
            dnnl[r] = flops * k / t * 1e-9;
        }
    }
    {
        double e = kn_rt_rel_err(bs.ptr[2], C2, AT_DT_F32, n * n);
        if (!(e <= 1e-4)) {
            fprintf(stderr, "bench_matmul: wrong result, relative error %g\n", e);
            return 1;
        }
    }
    {
        double mo = at_median_sort(ours, reps), mb = at_median_sort(blas, reps),
               md = at_median_sort(dnnl, reps);
        double best = mb > md ? mb : md;
        printf("bench matmul%lld_ours_%dt %.1f GFLOPS\n", (long long)n, threads, mo);
        printf("bench matmul%lld_openblas_%dt %.1f GFLOPS\n", (long long)n, threads, mb);
        printf("bench matmul%lld_onednn_%dt %.1f GFLOPS\n", (long long)n, threads, md);
        printf("bench matmul%lld_ours/%s %.2f x\n", (long long)n, mb > md ? "openblas" : "onednn",
               mo / best);
        printf("bench matmul%lld_compile_median %.1f ms\n", (long long)n,
               at_median_sort(comp, reps));
    }
    kn_rt_free(C2);
    kn_rt_free(ws);
    kn_rt_module_free(m);
    kn_bufset_free(&bs);
    kn_rt_pool_free(pool);
    kn_artifact_free(a);
    kn_ir_free(ir);
    ss_state_free(st);
    ss_dag_unref(dag);
    return 0;
}
