/* tests/bench/bench_space.c -- the schedule space's speed and reach.
**
**   states sampled and lowered per second (one thread); valid GPU states of matmul 4096^3
**   sampled per second, and the share of draws that are valid
**   one round of a 2,048-state population with 4 generations of mutations (each mutant
**   lowered, as scoring needs), in seconds
**   GFLOPS of the best of 64 random states of matmul 1024^3 next to the hand-written
**   schedule, measured in the same run
** Lines: "bench NAME VALUE UNIT" and "bench NAME/REF RATIO x". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

#define CHECK(x)                                                                               \
    do {                                                                                       \
        if ((x) != AT_OK) {                                                                    \
            fprintf(stderr, "bench_space: %s failed: %s\n", #x, err);                          \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

static double time_state(const ss_state *st, const kn_target *t, kn_rt_pool *pool, double flops)
{
    kn_ir *ir;
    kn_artifact *a;
    kn_bufset bs;
    kn_rt_module *m;
    char err[512];
    void *ws = NULL, *kargs[KN_MAX_ARGS];
    kn_rt_time_opts o = {.number = 1, .repeat = 3, .min_repeat_ms = 20, .n_warmup = 1};
    double costs[3], best;
    int32_t rc;
    int n = kn_rt_pool_par(pool)->n_threads;
    if (kn_lower(st, &ir, err, sizeof err) || kn_build(ir, t, NULL, &a, err, sizeof err)) {
        fprintf(stderr, "bench_space: %s\n", err);
        return 0;
    }
    kn_ir_free(ir);
    CHECK(kn_bufset_alloc(a, 1, &bs));
    /* the pre-transform (layout rewrite) is not timed: run once through kn_run_once, then
    ** time the kernel on its arguments */
    CHECK(kn_run_once(a, &bs, kn_rt_pool_par(pool), err, sizeof err));
    CHECK(kn_rt_module_load(a->obj, a->obj_size, NULL, &m, err, sizeof err));
    for (int i = 0; i < a->n_args; i++) {
        kargs[i] = bs.ptr[i];
        if (a->kernel_src[i] >= 0) {
            int64_t e = 1;
            for (int d = 0; d < a->kernel_args[i].n_dims; d++)
                e *= a->kernel_args[i].shape[d];
            kargs[i] = kn_rt_alloc((size_t)e * 4); /* layout contents do not matter for time */
        }
    }
    if (a->ws_fixed + a->ws_per_thread * n > 0)
        ws = kn_rt_alloc((size_t)(a->ws_fixed + a->ws_per_thread * n));
    kn_rt_time((kn_rt_kernel_fn)kn_rt_module_sym(m, a->entry), kargs, ws, kn_rt_pool_par(pool), &o,
               0, NULL, costs, &rc);
    best = costs[0];
    for (int i = 1; i < 3; i++)
        if (costs[i] > 0 && costs[i] < best)
            best = costs[i];
    for (int i = 0; i < a->n_args; i++)
        if (a->kernel_src[i] >= 0)
            kn_rt_free(kargs[i]);
    kn_rt_free(ws);
    kn_rt_module_free(m);
    kn_bufset_free(&bs);
    kn_artifact_free(a);
    return rc == 0 && best > 0 ? flops / best * 1e-9 : 0;
}

int main(int argc, char **argv)
{
    const char *specs[] = {"matmul:M=1024,N=1024,K=1024",
                           "conv2d:N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1,bias=1,relu=1"};
    char err[512];
    kn_target t;
    ss_hw hw;
    kn_rt_pool *pool;
    int n_random = 64, threads = 2;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--random") == 0 && i + 1 < argc)
            n_random = atoi(argv[++i]);
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_space [--random N] [--threads N]\n");
            return 2;
        }
    }
    /* GPU sketches of a big matmul: most random tile sizes break a block's limits and are
    ** drawn again, so what counts is valid states per second and the share that is valid */
    {
        kn_target g;
        ss_hw ghw;
        ss_dag *dag;
        ss_space *sp;
        at_rng rng;
        double t0, dt;
        long n_try = 0, n_ok = 0;
        CHECK(kn_target_parse("cuda -arch=sm_90", &g, err, sizeof err));
        kn_target_hw(&g, &ghw);
        CHECK(kn_op_build("matmul:M=4096,N=4096,K=4096", &dag, err, sizeof err));
        CHECK(ss_space_new(dag, &ghw, NULL, &sp, err, sizeof err));
        at_rng_seed(&rng, 1);
        t0 = at_time_mono_s();
        while ((dt = at_time_mono_s() - t0) < 2.0 || n_ok < 20) {
            ss_state *st;
            n_try++;
            if (ss_space_sample(sp, &rng, &st) != AT_OK)
                continue;
            ss_state_free(st);
            n_ok++;
        }
        printf("bench space_gpu_matmul4096_valid_samples %.0f states/s\n", n_ok / dt);
        printf("bench space_gpu_matmul4096_valid_share %.1f %%\n", 100.0 * n_ok / n_try);
        ss_space_free(sp);
        ss_dag_unref(dag);
    }
    CHECK(kn_target_host(&t));
    ss_hw_cpu(&hw, threads, t.vector_bytes, t.l1_bytes, t.l2_bytes);
    for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
        ss_dag *dag;
        ss_space *sp;
        at_rng rng;
        double t0, dt;
        int n = 0;
        const char *name = k == 0 ? "matmul1024" : "conv2d_resnet";
        CHECK(kn_op_build(specs[k], &dag, err, sizeof err));
        CHECK(ss_space_new(dag, &hw, NULL, &sp, err, sizeof err));
        at_rng_seed(&rng, 1);
        /* sampled and lowered per second */
        t0 = at_time_mono_s();
        while ((dt = at_time_mono_s() - t0) < 2.0 || n < 100) {
            ss_state *st;
            kn_ir *ir;
            if (ss_space_sample(sp, &rng, &st) != AT_OK)
                continue;
            if (kn_lower(st, &ir, err, sizeof err) == AT_OK)
                kn_ir_free(ir);
            ss_state_free(st);
            n++;
        }
        printf("bench space_%s_sample_lower %.0f states/s\n", name, n / dt);
        /* one round: 2,048 sampled, then 4 generations of 2,048 mutants, all lowered */
        {
            ss_state **pop = calloc(2048, sizeof *pop), **next = calloc(2048, sizeof *next);
            int n_mut = 0, n_fail = 0;
            t0 = at_time_mono_s();
            for (int i = 0; i < 2048;) {
                kn_ir *ir;
                if (ss_space_sample(sp, &rng, &pop[i]) != AT_OK)
                    continue;
                if (kn_lower(pop[i], &ir, err, sizeof err) == AT_OK)
                    kn_ir_free(ir);
                i++;
            }
            for (int g = 0; g < 4; g++) {
                for (int i = 0; i < 2048;) {
                    kn_ir *ir;
                    at_err e = ss_space_mutate(sp, pop[at_rng_below(&rng, 2048)], &rng, -1, &next[i]);
                    if (e != AT_OK) {
                        n_fail++;
                        continue;
                    }
                    if (kn_lower(next[i], &ir, err, sizeof err) == AT_OK)
                        kn_ir_free(ir);
                    i++;
                    n_mut++;
                }
                for (int i = 0; i < 2048; i++) {
                    ss_state_free(pop[i]);
                    pop[i] = next[i];
                    next[i] = NULL;
                }
            }
            dt = at_time_mono_s() - t0;
            printf("bench space_%s_round_2048x4 %.2f s\n", name, dt);
            printf("bench space_%s_mutation_success %.1f %%\n", name,
                   100.0 * n_mut / (n_mut + n_fail));
            for (int i = 0; i < 2048; i++)
                ss_state_free(pop[i]);
            free(pop);
            free(next);
        }
        ss_space_free(sp);
        ss_dag_unref(dag);
    }
    /* best of 64 random states of matmul 1024^3 against the hand-written schedule */
    {
        ss_dag *dag;
        ss_space *sp;
        ss_state *hand;
        at_rng rng;
        double best = 0, g_hand;
        CHECK(kn_op_build(specs[0], &dag, err, sizeof err));
        CHECK(ss_space_new(dag, &hw, NULL, &sp, err, sizeof err));
        CHECK(kn_rt_pool_new(threads, &pool));
        CHECK(ss_state_new(dag, &hand));
        CHECK(kn_hand_matmul(hand, &t, err, sizeof err));
        g_hand = time_state(hand, &t, pool, dag->flops);
        at_rng_seed(&rng, 64);
        for (int i = 0; i < n_random;) {
            ss_state *st;
            double g;
            if (ss_space_sample(sp, &rng, &st) != AT_OK)
                continue;
            g = time_state(st, &t, pool, dag->flops);
            if (g > best)
                best = g;
            ss_state_free(st);
            i++;
        }
        printf("bench space_matmul1024_best_of_%d_random %.1f GFLOPS\n", n_random, best);
        printf("bench space_matmul1024_handwritten %.1f GFLOPS\n", g_hand);
        printf("bench space_matmul1024_best_of_%d_random/handwritten %.2f x\n", n_random,
               g_hand > 0 ? best / g_hand : 0);
        ss_state_free(hand);
        kn_rt_pool_free(pool);
        ss_space_free(sp);
        ss_dag_unref(dag);
    }
    return 0;
}
