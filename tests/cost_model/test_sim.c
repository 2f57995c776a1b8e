/* tests/cost_model/test_sim.c -- the caches simulated over loop IR (cm_sim.c).
**
** Exact counts of a naive matmul worked out by hand (serial, and thread 0's half of a
** parallel one), a sampled run against the whole one, every random state of several
** operators giving counts that obey their order (misses within accesses, L2 within L1),
** the errors (a GPU program, bad parameters) and out-of-memory paths. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost_model/cost_model.h"

static kn_target host;
static ss_hw hw;

static ss_dag *dag_of(const char *spec)
{
    ss_dag *dag;
    char err[256];
    if (kn_op_build(spec, &dag, err, sizeof err) != AT_OK)
        fail_msg("%s: %s", spec, err);
    return dag;
}

static kn_ir *lower(const ss_state *st)
{
    kn_ir *ir;
    char err[512];
    if (kn_lower(st, &ir, err, sizeof err) != AT_OK)
        fail_msg("lowering: %s", err);
    return ir;
}

/* The unscheduled program of 'spec' (its DAG and state stay with the caller). */
static kn_ir *naive(const char *spec, ss_dag **dag, ss_state **st)
{
    *dag = dag_of(spec);
    assert_int_equal(ss_state_new(*dag, st), AT_OK);
    return lower(*st);
}

static void release(kn_ir *ir, ss_state *st, ss_dag *dag)
{
    kn_ir_free(ir);
    ss_state_free(st);
    ss_dag_unref(dag);
}

static void params(cm_sim_params *p, int threads, double cap)
{
    cm_sim_params_init(p, NULL);
    p->l1_bytes = 48 << 10;
    p->l1_ways = 12;
    p->l2_bytes = 1 << 20;
    p->l2_ways = 16;
    p->n_threads = threads;
    p->cap = cap;
}

/* for i, j (16 x 16): C[i,j] = 0; for k (16): C[i,j] += A[i,k] * B[k,j].  Each matrix is
** 16 lines of 16 floats, all of it fits in L1: every line misses once, in L1 and in L2
** (48), and each of the three pages once in the TLB.  Line accesses: A's site moves to a
** new line when i does (16), B's at every k (4,096), C's three sites (the initial store,
** the update's load and store) when i does (3 x 16): 4,160, of them 32 stores.  A miss
** is "far" only at the first line of A, B and C (each site then walks on to the next
** line): 3. */
static void test_naive_matmul(void **unused)
{
    ss_dag *dag;
    ss_state *st;
    kn_ir *ir = naive("matmul:M=16,N=16,K=16", &dag, &st);
    cm_sim_params p;
    double c[CM_SIM_N];
    char err[256];
    (void)unused;
    params(&p, 2, 1e9);
    assert_int_equal(cm_sim_run(ir, &p, c, err, sizeof err), AT_OK);
    assert_true(c[CM_SIM_STMTS] == 16 * 16 + 16 * 16 * 16);
    assert_true(c[CM_SIM_LINES] == 4160);
    assert_true(c[CM_SIM_STORE_LINES] == 32);
    assert_true(c[CM_SIM_L1_MISSES] == 48);
    assert_true(c[CM_SIM_L2_MISSES] == 48);
    assert_true(c[CM_SIM_L1_FAR] == 3);
    assert_true(c[CM_SIM_L2_FAR] == 3);
    assert_true(c[CM_SIM_TLB_MISSES] == 3);
    kn_ir_free(ir);

    /* i parallel over 2 threads: thread 0 runs rows 0-7, half of every count but the
    ** pages (3) and the far misses (3) */
    assert_int_equal(ss_state_annotate(st, 2, 0, SS_ANN_PARALLEL, err, sizeof err), AT_OK);
    ir = lower(st);
    assert_int_equal(cm_sim_run(ir, &p, c, err, sizeof err), AT_OK);
    assert_true(c[CM_SIM_STMTS] == 8 * 16 + 8 * 16 * 16);
    assert_true(c[CM_SIM_LINES] == 2080);
    assert_true(c[CM_SIM_L1_MISSES] == 8 + 16 + 8);
    assert_true(c[CM_SIM_L1_FAR] == 3);
    assert_true(c[CM_SIM_TLB_MISSES] == 3);
    /* one thread: the whole of it again */
    params(&p, 1, 1e9);
    assert_int_equal(cm_sim_run(ir, &p, c, err, sizeof err), AT_OK);
    assert_true(c[CM_SIM_STMTS] == 16 * 16 + 16 * 16 * 16);
    assert_true(c[CM_SIM_LINES] == 4160);
    release(ir, st, dag);
}

/* A matmul too large to run whole under the cap: the sampled counts estimate the whole
** run's (stores exactly, since every iteration of a loop runs as many) and sampling runs
** far fewer accesses. */
static void test_sampled(void **unused)
{
    ss_dag *dag;
    ss_state *st;
    kn_ir *ir = naive("matmul:M=128,N=128,K=128", &dag, &st);
    cm_sim_params p;
    double whole[CM_SIM_N], part[CM_SIM_N];
    char err[256];
    (void)unused;
    params(&p, 1, 1e9);
    assert_int_equal(cm_sim_run(ir, &p, whole, err, sizeof err), AT_OK);
    assert_true(whole[CM_SIM_STMTS] == 128.0 * 128 + 128.0 * 128 * 128);
    params(&p, 1, 2e4);
    assert_int_equal(cm_sim_run(ir, &p, part, err, sizeof err), AT_OK);
    assert_true(fabs(part[CM_SIM_STMTS] / whole[CM_SIM_STMTS] - 1) < 1e-9);
    /* B's column walk dominates the line accesses: one a k, whatever is sampled */
    assert_true(fabs(part[CM_SIM_LINES] / whole[CM_SIM_LINES] - 1) < 0.05);
    /* B's column walk misses L1 at every k: rows 512 bytes apart put the 128 lines of a
    ** column on 8 of L1's 64 sets, 16 lines on each of 12 ways (conflict misses) */
    assert_true(whole[CM_SIM_L1_MISSES] >= 128.0 * 128 * 128);
    assert_true(part[CM_SIM_L1_MISSES] > 0.5 * whole[CM_SIM_L1_MISSES] &&
                part[CM_SIM_L1_MISSES] < 2 * whole[CM_SIM_L1_MISSES]);
    /* it all fits the 1 MiB L2: its misses are the first touches, 3 x 1,024 lines, which
    ** sampling (a warm-up iteration not counted, the rest scaled) estimates low */
    assert_true(whole[CM_SIM_L2_MISSES] == 3 * 1024);
    assert_true(part[CM_SIM_L2_MISSES] <= whole[CM_SIM_L2_MISSES] * 1.5);
    release(ir, st, dag);
}

static void test_random_states(void **unused)
{
    static const char *ops[] = {
        "matmul:M=64,N=48,K=32",
        "conv2d:N=1,C=8,H=14,W=14,K=16,R=3,S=3,pad=1,bias=1,relu=1",
        "conv2d:layout=NHWC,N=1,C=8,H=14,W=14,K=16,R=3,S=3,stride=2,pad=1",
        "depthwise_conv2d:N=1,C=16,H=14,W=14,R=3,S=3,pad=1",
        "softmax:M=2,N=256",
        "layer_norm:M=8,N=128",
    };
    cm_sim_params p;
    (void)unused;
    cm_sim_params_init(&p, &host);
    p.cap = 2e4;
    assert_true(p.l1_ways >= 1 && p.l2_ways == 16 && p.n_threads >= 1);
    for (size_t o = 0; o < AT_ARRAY_LEN(ops); o++) {
        ss_dag *dag = dag_of(ops[o]);
        ss_space *sp;
        at_rng rng;
        char err[512];
        int n_ok = 0;
        assert_int_equal(ss_space_new(dag, &hw, NULL, &sp, err, sizeof err), AT_OK);
        at_rng_seed(&rng, 21 + o);
        for (int i = 0; i < 40; i++) {
            ss_state *st;
            kn_ir *ir;
            double c[CM_SIM_N], again[CM_SIM_N];
            if (ss_space_sample(sp, &rng, &st) != AT_OK)
                continue;
            ir = lower(st);
            assert_int_equal(cm_sim_run(ir, &p, c, err, sizeof err), AT_OK);
            for (int k = 0; k < CM_SIM_N; k++)
                assert_true(isfinite(c[k]) && c[k] >= 0);
            assert_true(c[CM_SIM_STMTS] > 0 && c[CM_SIM_LINES] > 0);
            assert_true(c[CM_SIM_L1_MISSES] <= c[CM_SIM_LINES] * (1 + 1e-9));
            assert_true(c[CM_SIM_L2_MISSES] <= c[CM_SIM_L1_MISSES] * (1 + 1e-9));
            assert_true(c[CM_SIM_L1_FAR] <= c[CM_SIM_L1_MISSES] * (1 + 1e-9));
            assert_true(c[CM_SIM_L2_FAR] <= c[CM_SIM_L2_MISSES] * (1 + 1e-9));
            assert_true(c[CM_SIM_STORE_LINES] <= c[CM_SIM_LINES] * (1 + 1e-9));
            /* the same program, the same counts */
            assert_int_equal(cm_sim_run(ir, &p, again, err, sizeof err), AT_OK);
            assert_memory_equal(c, again, sizeof c);
            kn_ir_free(ir);
            ss_state_free(st);
            n_ok++;
        }
        assert_true(n_ok >= 20);
        ss_space_free(sp);
        ss_dag_unref(dag);
    }
}

static void test_bad_input(void **unused)
{
    ss_dag *dag;
    ss_state *st;
    kn_ir *ir = naive("matmul:M=16,N=16,K=16", &dag, &st);
    cm_sim_params p;
    double c[CM_SIM_N];
    char err[256];
    (void)unused;
    params(&p, 1, 1e9);
    p.l1_bytes = 0;
    assert_int_equal(cm_sim_run(ir, &p, c, err, sizeof err), AT_EINVAL);
    assert_non_null(strstr(err, "bad parameters"));
    params(&p, 0, 1e9);
    assert_int_equal(cm_sim_run(ir, &p, c, err, sizeof err), AT_EINVAL);
    assert_int_equal(cm_sim_run(NULL, &p, c, err, sizeof err), AT_EINVAL);
    assert_non_null(strstr(err, "no program"));
    params(&p, 1, 1e9);
    ir->is_gpu = 1;
    assert_int_equal(cm_sim_run(ir, &p, c, err, sizeof err), AT_EINVAL);
    assert_non_null(strstr(err, "GPU"));
    ir->is_gpu = 0;
    release(ir, st, dag);
}

static void test_survives_oom(void **unused)
{
    ss_dag *dag;
    ss_state *st;
    kn_ir *ir = naive("matmul:M=32,N=32,K=32", &dag, &st);
    cm_sim_params p;
    double want[CM_SIM_N];
    char err[256];
    (void)unused;
    params(&p, 1, 1e9);
    assert_int_equal(cm_sim_run(ir, &p, want, err, sizeof err), AT_OK);
    for (size_t limit = 0;; limit++) {
        double c[CM_SIM_N];
        long before = at_test_live_allocs();
        at_err e;
        at_test_alloc_limit(limit);
        e = cm_sim_run(ir, &p, c, err, sizeof err);
        at_test_alloc_limit(SIZE_MAX);
        assert_int_equal(at_test_live_allocs(), before);
        if (e == AT_OK) {
            assert_memory_equal(c, want, sizeof c);
            break;
        }
        assert_int_equal(e, AT_ENOMEM);
        assert_non_null(strstr(err, "out of memory"));
        assert_true(limit < 100);
    }
    release(ir, st, dag);
}

static int setup(void **unused)
{
    (void)unused;
    if (kn_target_host(&host) != AT_OK)
        return -1;
    ss_hw_cpu(&hw, host.n_cores, host.vector_bytes, host.l1_bytes, host.l2_bytes);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_naive_matmul),
        cmocka_unit_test(test_sampled),
        cmocka_unit_test(test_random_states),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_survives_oom),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
