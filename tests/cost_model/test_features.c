/* tests/cost_model/test_features.c -- per-store features of lowered loop IR.
**
** Exact values on hand-made schedules (worked out by hand in the comments: footprints,
** strides, cache lines, reuse, the intensity curve), the loop kinds code generation
** really applies (a vectorized loop with a guard on its lane is not vectorized, auto-unroll
** budgets that fit), every random state of several operators giving finite, well-formed
** rows, the feature list against docs/cost_model.md, and out-of-memory paths.  GPU programs:
** the launch features (group 7) of a hand-made matmul schedule worked out by hand, and of
** random GPU states against the launches the CUDA C generator computes on its own. */
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

static double raw(const cm_feats *f, int row, int feat)
{
    double v = f->rows[(size_t)row * CM_N_FEATS + (size_t)feat];
    if (!cm_feature_is_log(feat))
        return v;
    return v >= 0 ? exp2(v) - 1 : 1 - exp2(-v);
}

#define assert_feat(f, row, feat, want)                                                    \
    do {                                                                                   \
        double got_ = raw((f), (row), (feat)), want_ = (want);                             \
        if (!(fabs(got_ - want_) <= 1e-3 * fabs(want_) + 1e-4))                             \
            fail_msg("row %d %s: got %.6g, want %.6g", (row), cm_feature_name(feat), got_,  \
                     want_);                                                                \
    } while (0)

/* Row of buffer 'name', or fail. */
static int row_of(const kn_ir *ir, const cm_feats *f, const char *name)
{
    for (int r = 0; r < f->n_rows; r++)
        if (strcmp(ir->bufs[f->row_buf[r]].name, name) == 0)
            return r;
    fail_msg("no row for buffer %s", name);
    return -1;
}

static void lower_extract(const ss_state *st, kn_ir **ir, cm_feats *f)
{
    char err[512];
    if (kn_lower(st, ir, err, sizeof err) != AT_OK)
        fail_msg("lowering: %s", err);
    assert_int_equal(cm_features_extract(*ir, f), AT_OK);
}

static void test_feature_list(void **unused)
{
    char *doc = NULL, err[256];
    size_t n;
    (void)unused;
    assert_int_equal(CM_N_FEATS, 303);
    assert_int_equal(CM_BUF_STRIDE, 20);
    assert_int_equal(CM_F_B4_VEC_GATHER + 1, CM_F_CURVE_0);
    for (int i = 0; i < CM_N_FEATS; i++) {
        assert_true(strlen(cm_feature_name(i)) > 0);
        assert_true(strlen(cm_feature_doc(i)) > 0);
        for (int j = 0; j < i; j++)
            if (strcmp(cm_feature_name(i), cm_feature_name(j)) == 0)
                fail_msg("feature %d and %d are both named %s", i, j, cm_feature_name(i));
    }
    assert_string_equal(cm_feature_name(-1), "?");
    assert_string_equal(cm_feature_name(CM_N_FEATS), "?");
    assert_string_equal(cm_feature_name(CM_F_B2_REUSE_CT), "b2.reuse_ct");
    assert_int_equal(cm_feature_is_log(CM_F_B0_ACC_READ), 0);
    assert_int_equal(cm_feature_is_log(CM_F_FLOAT_MAD), 1);
    /* the documentation names every feature (and the version it describes) */
    if (at_file_read("docs/cost_model.md", &doc, &n, err, sizeof err) != AT_OK)
        fail_msg("%s (run the tests from the repository root)", err);
    for (int i = 0; i < CM_N_FEATS; i++) {
        const char *name = cm_feature_name(i);
        char key[64];
        /* per-buffer features are documented once, as bK.name */
        if (name[0] == 'b' && name[1] >= '0' && name[1] <= '9' && name[2] == '.')
            snprintf(key, sizeof key, "`bK.%s`", name + 3);
        else
            snprintf(key, sizeof key, "`%s`", name);
        if (strstr(doc, key) == NULL)
            fail_msg("docs/cost_model.md does not describe feature %s (%s)", name, key);
    }
    {
        char ver[64];
        snprintf(ver, sizeof ver, "CM_FEATURE_VERSION = %d", CM_FEATURE_VERSION);
        if (strstr(doc, ver) == NULL)
            fail_msg("docs/cost_model.md does not say '%s'", ver);
    }
    at_free(doc);
}

/* The naive matmul 64^3: for i, for j { C = 0; for k: C += A[i,k] * B[k,j] }.
** One row (C's init and update share it).  With loops i, j, k (extents 64):
**   B[k*64 + j]: innermost loop k moves it by 64 elements: stride 64, every access a new
**     line: lines = 64^3; footprint 64x64 floats = 16 KiB; i is the first loop (from the
**     inside) that does not move it: reuse 64 times, 64*64 iterations apart, and between two
**     uses the j,k sub-nest touches C 256 B + A 256 B + B 16 KiB = 16896 B.
**   A[i*64 + k]: stride 1: lines = 64^3 * 4/64 = 16384; reused by j: 64 times, 64
**     iterations apart, the k sub-nest touching 4 + 256 + 256 = 516 B.
**   C[i*64 + j], read and written: k does not move it (lines = 64^3 / 64 * 4/64 = 256),
**     reused 64 times, 1 iteration apart, 12 B apart.
**   Buffers in access order: C (stored), A, B.  Intensity of the whole nest: 2 * 64^3
**   flops / 48 KiB.  The block code generation expands is the innermost iteration only (no
**   loop is unrolled): 1 accumulator, a chain of 1. */
static void test_naive_matmul(void **unused)
{
    ss_dag *dag = dag_of("matmul:M=64,N=64,K=64");
    ss_state *st;
    kn_ir *ir;
    cm_feats f;
    int r;
    (void)unused;
    cm_feats_init(&f);
    assert_int_equal(ss_state_new(dag, &st), AT_OK);
    lower_extract(st, &ir, &f);
    assert_int_equal(f.n_rows, 1);
    r = row_of(ir, &f, "C");
    assert_feat(&f, r, CM_F_FLOAT_MAD, 262144);
    assert_feat(&f, r, CM_F_FLOAT_ADDSUB, 0);
    assert_feat(&f, r, CM_F_FLOAT_MUL, 0);
    assert_feat(&f, r, CM_F_LOADS, 3 * 262144);
    assert_feat(&f, r, CM_F_OUTER_PROD, 262144);
    assert_feat(&f, r, CM_F_NUM_LOOPS, 3);
    assert_feat(&f, r, CM_F_VEC_NUM, 0);
    assert_feat(&f, r, CM_F_VEC_POS_NONE, 1);
    assert_feat(&f, r, CM_F_PAR_POS_NONE, 1);
    /* b0 = C, the stored buffer, read and written */
    assert_feat(&f, r, CM_F_B0_ACC_RW, 1);
    assert_feat(&f, r, CM_F_B0_ACC_READ, 0);
    assert_feat(&f, r, CM_F_B0_BYTES, 2 * 262144 * 4);
    assert_feat(&f, r, CM_F_B0_UNIQUE_BYTES, 16384);
    assert_feat(&f, r, CM_F_B0_LINES, 256);
    assert_feat(&f, r, CM_F_B0_REUSE_LOOP, 1);
    assert_feat(&f, r, CM_F_B0_REUSE_CT, 64);
    assert_feat(&f, r, CM_F_B0_REUSE_DIS_ITER, 1);
    assert_feat(&f, r, CM_F_B0_REUSE_DIS_BYTES, 12);
    /* b1 = A, the first load of the value */
    assert_feat(&f, r, CM_F_B1_ACC_READ, 1);
    assert_feat(&f, r, CM_F_B1_LINES, 16384);
    assert_feat(&f, r, CM_F_B1_STRIDE, 1);
    assert_feat(&f, r, CM_F_B1_REUSE_DIS_ITER, 64);
    assert_feat(&f, r, CM_F_B1_REUSE_DIS_BYTES, 516);
    /* b2 = B */
    assert_feat(&f, r, CM_F_B2_ACC_READ, 1);
    assert_feat(&f, r, CM_F_B2_BYTES, 262144 * 4);
    assert_feat(&f, r, CM_F_B2_UNIQUE_BYTES, 16384);
    assert_feat(&f, r, CM_F_B2_LINES, 262144);
    assert_feat(&f, r, CM_F_B2_UNIQUE_LINES, 256);
    assert_feat(&f, r, CM_F_B2_REUSE_LOOP, 1);
    assert_feat(&f, r, CM_F_B2_REUSE_CT, 64);
    assert_feat(&f, r, CM_F_B2_REUSE_DIS_ITER, 4096);
    assert_feat(&f, r, CM_F_B2_REUSE_DIS_BYTES, 16896);
    assert_feat(&f, r, CM_F_B2_STRIDE, 64);
    assert_feat(&f, r, CM_F_B2_BYTES_D_REUSE, 262144 * 4 / 64);
    /* no fourth buffer */
    assert_feat(&f, r, CM_F_B3_BYTES, 0);
    assert_feat(&f, r, CM_F_B3_ACC_READ, 0);
    /* the intensity curve ends at the whole nest and never falls */
    assert_feat(&f, r, CM_F_CURVE_9, 2.0 * 262144 / 49152);
    for (int k = 1; k < CM_CURVE_N; k++)
        assert_true(raw(&f, r, CM_F_CURVE_0 + k) >= raw(&f, r, CM_F_CURVE_0 + k - 1));
    /* an argument, not a temporary */
    assert_feat(&f, r, CM_F_ALLOC_SIZE, 0);
    assert_feat(&f, r, CM_F_INNER_LOOP_LEN, 64);
    assert_feat(&f, r, CM_F_INNER_BODY, 1);
    assert_feat(&f, r, CM_F_ACCUMULATORS, 1);
    assert_feat(&f, r, CM_F_CHAIN, 1);
    kn_ir_free(ir);
    ss_state_free(st);
    ss_dag_unref(dag);
    cm_feats_fini(&f);
}

/* Group 10 on a naive matmul 16^3 (tests/cost_model/test_sim.c works its counts out):
** the first row gets them when cm_feats.sim asks, and 0 otherwise. */
static void test_caches_simulated(void **unused)
{
    ss_dag *dag = dag_of("matmul:M=16,N=16,K=16");
    ss_state *st;
    kn_ir *ir;
    cm_feats f;
    cm_sim_params p;
    (void)unused;
    cm_feats_init(&f);
    assert_int_equal(ss_state_new(dag, &st), AT_OK);
    lower_extract(st, &ir, &f);
    for (int k = CM_F_SIM_STMTS; k <= CM_F_SIM_PENALTY; k++)
        assert_feat(&f, 0, k, 0);
    cm_sim_params_init(&p, NULL);
    p.l1_bytes = 48 << 10;
    p.l1_ways = 12;
    p.n_threads = 1;
    p.cap = 1e9;
    f.sim = &p;
    assert_int_equal(cm_features_extract(ir, &f), AT_OK);
    assert_int_equal(f.n_rows, 1);
    assert_feat(&f, 0, CM_F_SIM_STMTS, 4352);
    assert_feat(&f, 0, CM_F_SIM_LINES, 4160);
    assert_feat(&f, 0, CM_F_SIM_L1_MISSES, 48);
    assert_feat(&f, 0, CM_F_SIM_L1_FAR, 3);
    assert_feat(&f, 0, CM_F_SIM_L2_MISSES, 48);
    assert_feat(&f, 0, CM_F_SIM_L2_FAR, 3);
    assert_feat(&f, 0, CM_F_SIM_TLB_MISSES, 3);
    assert_feat(&f, 0, CM_F_SIM_STORE_LINES, 32);
    assert_feat(&f, 0, CM_F_SIM_LINES_PER, 4160.0 / 4352);
    assert_feat(&f, 0, CM_F_SIM_L1_PER, 48.0 / 4352);
    assert_feat(&f, 0, CM_F_SIM_L2_FAR_PER, 3.0 / 4352);
    assert_feat(&f, 0, CM_F_SIM_STORE_PER, 32.0 / 4352);
    assert_feat(&f, 0, CM_F_SIM_PENALTY, 4 * 48 + 8 * 3 + 20 * 48 + 60 * 3 + 10 * 3);
    /* the other groups are what they were */
    assert_feat(&f, 0, CM_F_FLOAT_MAD, 4096);
    kn_ir_free(ir);
    ss_state_free(st);
    ss_dag_unref(dag);
    cm_feats_fini(&f);
}

/* Group 11 on a naive matmul 64^3 built for this machine: 0 unless cm_feats.code asks,
** then the first row holds what cm_code_run reads from the same build (262,144
** multiply-adds: scalar FMAs, or vector ones of up to 16 lanes). */
static void test_machine_code(void **unused)
{
    ss_dag *dag = dag_of("matmul:M=64,N=64,K=64");
    ss_state *st;
    kn_ir *ir;
    kn_artifact *a;
    cm_feats f;
    double c[CM_CODE_N];
    char err[256];
    (void)unused;
    cm_feats_init(&f);
    assert_int_equal(ss_state_new(dag, &st), AT_OK);
    lower_extract(st, &ir, &f);
    for (int k = CM_F_CODE_FMA_SHARE; k < CM_F_CODE_FMA_SHARE + CM_CODE_N; k++)
        assert_feat(&f, 0, k, 0);
    if (host.is_x86) {
        f.code = &host;
        assert_int_equal(cm_features_extract(ir, &f), AT_OK);
        assert_int_equal(kn_build(ir, &host, NULL, &a, err, sizeof err), AT_OK);
        assert_int_equal(cm_code_run(a, &host, c, err, sizeof err), AT_OK);
        kn_artifact_free(a);
        cm_code_per_useful_lane(c, 262144); /* the naive loop's lanes are all used */
        for (int k = 0; k < CM_CODE_N; k++)
            assert_feat(&f, 0, CM_F_CODE_FMA_SHARE + k, c[k]);
        double fmas = exp2(f.rows[CM_F_CODE_DYN_FMAS]) - 1;
        assert_true(fmas >= 262144.0 / 16 * 0.99 && fmas <= 262144.0 * 1.01);
        assert_feat(&f, 0, CM_F_FLOAT_MAD, 262144);
        /* a data set asked for them (cm_data_set_code) holds the same columns */
        cm_data *d;
        cm_sample smp = {"t", st, NULL, NULL, 1e-3, 0};
        int n_rows = 0, unl = -1;
        assert_int_equal(cm_data_new(&d), AT_OK);
        cm_data_set_code(d, &host);
        assert_int_equal(cm_data_add(d, &smp, 1, &unl), AT_OK);
        assert_int_equal(unl, 0);
        const float *rows = cm_data_rows(d, 0, &n_rows);
        assert_int_equal(n_rows, 1);
        for (int k = CM_F_CODE_FMA_SHARE; k < CM_F_CODE_FMA_SHARE + CM_CODE_N; k++)
            assert_true(rows[k] == f.rows[k]);
        cm_data_set_code(d, NULL);
        assert_int_equal(cm_data_add(d, &smp, 1, &unl), AT_OK);
        rows = cm_data_rows(d, 1, &n_rows);
        assert_true(n_rows == 1 && rows[CM_F_CODE_DYN_FMAS] == 0);
        cm_data_free(d);
    }
    kn_ir_free(ir);
    ss_state_free(st);
    ss_dag_unref(dag);
    cm_feats_fini(&f);
}

/* Group 11's lane columns per useful lane (feature version 12): random convolutions built
** for this machine, each first row against cm_code_run's own columns and the statements'
** multiply-adds; where the FMAs' lanes outnumber them (registers partly used) the columns
** carry the idle lanes' log2, at most log2(CM_CODE_MAX_IDLE), and nowhere else move. */
static void test_useful_lanes(void **unused)
{
    ss_dag *dag = dag_of("conv2d:N=1,C=8,H=14,W=14,K=6,R=3,S=3,pad=1");
    ss_space *sp;
    at_rng rng;
    char err[512];
    int n_idle = 0, n_full = 0;
    cm_feats f;
    (void)unused;
    if (!host.is_x86) {
        ss_dag_unref(dag);
        skip();
    }
    cm_feats_init(&f);
    f.code = &host;
    assert_int_equal(ss_space_new(dag, &hw, NULL, &sp, err, sizeof err), AT_OK);
    at_rng_seed(&rng, 5);
    for (int i = 0; i < 40 && (n_idle < 2 || n_full < 2); i++) {
        ss_state *st;
        kn_ir *ir;
        kn_artifact *a;
        double c[CM_CODE_N], mads = 0, want;
        if (ss_space_sample(sp, &rng, &st) != AT_OK)
            continue;
        assert_int_equal(kn_lower(st, &ir, err, sizeof err), AT_OK);
        assert_int_equal(cm_features_extract(ir, &f), AT_OK);
        assert_int_equal(kn_build(ir, &host, NULL, &a, err, sizeof err), AT_OK);
        assert_int_equal(cm_code_run(a, &host, c, err, sizeof err), AT_OK);
        kn_artifact_free(a);
        for (int r = 0; r < f.n_rows; r++)
            mads += exp2(f.rows[(size_t)r * CM_N_FEATS + CM_F_FLOAT_MAD]) - 1;
        assert_true(fabs(mads / (14 * 14 * 6 * 8 * 9) - 1) < 1e-3); /* the conv's own */
        want = c[CM_CODE_EX_LANES] > 1.01 * mads
                   ? log2(fmin(c[CM_CODE_EX_LANES] / mads, CM_CODE_MAX_IDLE))
                   : 0;
        n_idle += want > 0;
        n_full += want == 0 && c[CM_CODE_EX_LANES] > 0;
        for (int k = CM_CODE_LANE_CYCLES; k <= CM_CODE_HOT_LANE_CYCLES; k++)
            if (fabs(f.rows[CM_F_CODE_FMA_SHARE + k] - (c[k] + (c[k] != 0 ? want : 0))) > 1e-4)
                fail_msg("state %d: %s is %g, want %g + %g (lanes %g, multiply-adds %g)", i,
                         cm_feature_name(CM_F_CODE_FMA_SHARE + k),
                         f.rows[CM_F_CODE_FMA_SHARE + k], c[k], want, c[CM_CODE_EX_LANES],
                         mads);
        for (int k = 0; k < CM_CODE_LANE_CYCLES; k++) /* the other columns as read */
            assert_feat(&f, 0, CM_F_CODE_FMA_SHARE + k, c[k]);
        kn_ir_free(ir);
        ss_state_free(st);
    }
    print_message("random convolutions: %d with idle lanes, %d with every lane used\n", n_idle,
                  n_full);
    assert_true(n_idle >= 1 && n_full >= 1); /* 6 output channels: some fill 2 of 4 lanes */
    ss_space_free(sp);
    ss_dag_unref(dag);
    cm_feats_fini(&f);
}

/* i parallel, j split 16 x 4 with the 4 vectorized innermost (after k):
** loops i(64, parallel) j.0(16) k(64) j.1(4, vectorized). */
static void test_annotated_matmul(void **unused)
{
    ss_dag *dag = dag_of("matmul:M=64,N=64,K=64");
    ss_state *st;
    kn_ir *ir;
    cm_feats f;
    char err[256];
    int r;
    (void)unused;
    cm_feats_init(&f);
    assert_int_equal(ss_state_new(dag, &st), AT_OK);
    assert_int_equal(ss_state_split(st, 2, 1, 1, (int64_t[]){4}, err, sizeof err), AT_OK);
    assert_int_equal(ss_state_reorder(st, 2, 4, (int64_t[]){0, 1, 3, 2}, err, sizeof err), AT_OK);
    assert_int_equal(ss_state_annotate(st, 2, 3, SS_ANN_VECTORIZE, err, sizeof err), AT_OK);
    assert_int_equal(ss_state_annotate(st, 2, 0, SS_ANN_PARALLEL, err, sizeof err), AT_OK);
    lower_extract(st, &ir, &f);
    assert_int_equal(f.n_rows, 1);
    r = 0;
    assert_feat(&f, r, CM_F_FLOAT_MAD, 262144); /* lanes count */
    assert_feat(&f, r, CM_F_VEC_NUM, 1);
    assert_feat(&f, r, CM_F_VEC_PROD, 4);
    assert_feat(&f, r, CM_F_VEC_LEN, 4);
    assert_feat(&f, r, CM_F_VEC_POS_INNER_SPATIAL, 1);
    assert_feat(&f, r, CM_F_VEC_POS_NONE, 0);
    assert_feat(&f, r, CM_F_PAR_NUM, 1);
    assert_feat(&f, r, CM_F_PAR_LEN, 64);
    assert_feat(&f, r, CM_F_PAR_POS_OUTER_SPATIAL, 1);
    assert_feat(&f, r, CM_F_UNROLL_POS_NONE, 1);
    assert_feat(&f, r, CM_F_NUM_LOOPS, 4);
    assert_feat(&f, r, CM_F_INNER_LOOP_LEN, 64);
    assert_feat(&f, r, CM_F_ACCUMULATORS, 4);
    assert_feat(&f, r, CM_F_CHAIN, 1);
    /* B[k*64 + j.0*4 + j.1]: one vector load per lane group; A[i*64 + k]: a broadcast;
    ** C: vector load and store.  k is innermost but one: B's stride is now the lane's 1. */
    {
        int contig = 0, gather = 0, broadcast = 0;
        for (int k = 0; k < 3; k++) {
            contig += raw(&f, r, CM_F_B0_VEC_CONTIG + k * CM_BUF_STRIDE) == 1;
            gather += raw(&f, r, CM_F_B0_VEC_GATHER + k * CM_BUF_STRIDE) == 1;
            broadcast += raw(&f, r, CM_F_B0_VEC_CONTIG + k * CM_BUF_STRIDE) == 0 &&
                         raw(&f, r, CM_F_B0_VEC_GATHER + k * CM_BUF_STRIDE) == 0;
        }
        assert_int_equal(contig, 2);   /* B and C */
        assert_int_equal(gather, 0);
        assert_int_equal(broadcast, 1); /* A */
    }
    /* group 8: the 4 accumulators of the block (j.1, 4 lanes) fill one register; per
    ** vector update the block loads A (a broadcast), B and C once each; k, the innermost
    ** loop that stays a loop, reduces into C (the accumulators stay in registers); one k
    ** run touches A 256 B + B 64x4 floats 1 KiB + C 16 B; the largest sub-nest within
    ** 32 KiB is j.0's (A 256 B + B 16 KiB + C 256 B = 16896 B, 16x64x4 multiply-adds), the
    ** whole nest (3 x 16 KiB) fits 1 MiB.  The block is vectorized: inner_unit is 0. */
    assert_feat(&f, r, CM_F_ACC_REGS, 1);
    assert_feat(&f, r, CM_F_BLOCK_LOADS, 3);
    assert_feat(&f, r, CM_F_INNER_REDUCE, 1);
    assert_feat(&f, r, CM_F_INNER_FOOT, 256 + 1024 + 16);
    assert_feat(&f, r, CM_F_AI_L1, 2.0 * 16 * 64 * 4 / 16896);
    assert_feat(&f, r, CM_F_AI_L2, 2.0 * 64 * 64 * 64 / 49152);
    assert_feat(&f, r, CM_F_INNER_UNIT, 0);
    /* group 9: the arithmetic runs on j.1's 4 lanes: 2 x 64^3 float ops in 4-lane vectors */
    assert_feat(&f, r, CM_F_EFF_LANES, 4);
    assert_feat(&f, r, CM_F_LANE_OPS, 2.0 * 64 * 64 * 64 / 4);
    kn_ir_free(ir);
    ss_state_free(st);
    ss_dag_unref(dag);
    cm_feats_fini(&f);
}

/* Loops i, k, j with j innermost and not vectorized: j moves C and B by 1 and A by 0, so
** LLVM can still vectorize its iterations (inner_unit); it does not reduce into C[i, j]
** (inner_reduce 0); j stays a loop, so the block is the one scalar update. */
static void test_unit_stride_inner(void **unused)
{
    ss_dag *dag = dag_of("matmul:M=64,N=64,K=64");
    ss_state *st;
    kn_ir *ir;
    cm_feats f;
    char err[256];
    (void)unused;
    cm_feats_init(&f);
    assert_int_equal(ss_state_new(dag, &st), AT_OK);
    assert_int_equal(ss_state_reorder(st, 2, 3, (int64_t[]){0, 2, 1}, err, sizeof err), AT_OK);
    lower_extract(st, &ir, &f);
    assert_int_equal(f.n_rows, 1);
    assert_feat(&f, 0, CM_F_INNER_LOOP_LEN, 64);
    assert_feat(&f, 0, CM_F_INNER_UNIT, 1);
    assert_feat(&f, 0, CM_F_INNER_REDUCE, 0);
    assert_feat(&f, 0, CM_F_ACC_REGS, 1); /* one accumulator, one register */
    assert_feat(&f, 0, CM_F_BLOCK_LOADS, 3); /* C, A, B: scalar loads per scalar update */
    /* LLVM vectorizes j's 64 iterations 16 lanes (64-byte registers) at a time */
    assert_feat(&f, 0, CM_F_EFF_LANES, 16);
    assert_feat(&f, 0, CM_F_LANE_OPS, 2.0 * 64 * 64 * 64 / 16);
    kn_ir_free(ir);
    ss_state_free(st);
    /* the same with i innermost: C and A move by 64, not a unit stride */
    assert_int_equal(ss_state_new(dag, &st), AT_OK);
    assert_int_equal(ss_state_reorder(st, 2, 3, (int64_t[]){1, 2, 0}, err, sizeof err), AT_OK);
    lower_extract(st, &ir, &f);
    assert_feat(&f, 0, CM_F_INNER_UNIT, 0);
    assert_feat(&f, 0, CM_F_EFF_LANES, 1); /* scalar: one lane */
    assert_feat(&f, 0, CM_F_LANE_OPS, 2.0 * 64 * 64 * 64);
    kn_ir_free(ir);
    ss_state_free(st);
    ss_dag_unref(dag);
    cm_feats_fini(&f);
}

/* A split that does not divide (64 by 5) guards the store with the lane variable: code
** generation cannot vectorize that loop, so it counts as serial, and the guard counts. */
static void test_guarded_vector_is_serial(void **unused)
{
    ss_dag *dag = dag_of("matmul:M=64,N=64,K=64");
    ss_state *st;
    kn_ir *ir;
    cm_feats f;
    char err[256];
    (void)unused;
    cm_feats_init(&f);
    assert_int_equal(ss_state_new(dag, &st), AT_OK);
    assert_int_equal(ss_state_split(st, 2, 1, 1, (int64_t[]){5}, err, sizeof err), AT_OK);
    assert_int_equal(ss_state_reorder(st, 2, 4, (int64_t[]){0, 1, 3, 2}, err, sizeof err), AT_OK);
    assert_int_equal(ss_state_annotate(st, 2, 3, SS_ANN_VECTORIZE, err, sizeof err), AT_OK);
    lower_extract(st, &ir, &f);
    assert_int_equal(f.n_rows, 1);
    assert_feat(&f, 0, CM_F_VEC_NUM, 0);
    assert_feat(&f, 0, CM_F_VEC_POS_NONE, 1);
    assert_true(raw(&f, 0, CM_F_GUARD_OPS) > 0);
    /* 13 x 5 = 65 iterations of j: one more than the tensor, guarded */
    assert_feat(&f, 0, CM_F_OUTER_PROD, 64.0 * 65 * 64);
    kn_ir_free(ir);
    ss_state_free(st);
    ss_dag_unref(dag);
    cm_feats_fini(&f);
}

/* Auto-unroll: a budget of 16 unrolls both loops of a split k (4 x 4 = 16 statements fit)
** but not the loops around them. */
static void test_auto_unroll(void **unused)
{
    ss_dag *dag = dag_of("matmul:M=16,N=16,K=16");
    ss_state *st;
    kn_ir *ir;
    cm_feats f;
    char err[256];
    (void)unused;
    cm_feats_init(&f);
    assert_int_equal(ss_state_new(dag, &st), AT_OK);
    /* k -> k.0 (4) k.1 (4); budget 16: k.1 (4 statements) fits, k.0 (16) fits too, j (256)
    ** does not */
    assert_int_equal(ss_state_split(st, 2, 2, 1, (int64_t[]){4}, err, sizeof err), AT_OK);
    assert_int_equal(ss_state_pragma_unroll(st, 2, 0, 16, err, sizeof err), AT_OK);
    lower_extract(st, &ir, &f);
    assert_feat(&f, 0, CM_F_AUTO_UNROLL_MAX_STEP, 16);
    assert_feat(&f, 0, CM_F_UNROLL_NUM, 2);
    assert_feat(&f, 0, CM_F_UNROLL_PROD, 16);
    assert_feat(&f, 0, CM_F_UNROLL_LEN, 4);
    /* k.1 is the innermost reduction loop, k.0 the outermost: mixed positions */
    assert_feat(&f, 0, CM_F_UNROLL_POS_MIXED, 1);
    assert_feat(&f, 0, CM_F_UNROLL_POS_NONE, 0);
    /* the block around the update: 16 dependent multiply-adds on one accumulator, in j */
    assert_feat(&f, 0, CM_F_INNER_LOOP_LEN, 16);
    assert_feat(&f, 0, CM_F_INNER_BODY, 16);
    assert_feat(&f, 0, CM_F_ACCUMULATORS, 1);
    assert_feat(&f, 0, CM_F_CHAIN, 16);
    kn_ir_free(ir);
    ss_state_free(st);
    ss_dag_unref(dag);
    cm_feats_fini(&f);
}

/* Naive conv2d with padding: a row for 'pad' (selects, compares, clamps) and one for
** 'conv'.  conv reads pad[c*100 + (h+r)*10 + (w+s)]: h and r slide over the same rows, so
** the footprint is 4 x (8+3-1) x (8+3-1) = 400 floats: all of pad. */
static void test_conv_sliding_window(void **unused)
{
    ss_dag *dag = dag_of("conv2d:N=1,C=4,H=8,W=8,K=4,R=3,S=3,pad=1");
    ss_state *st;
    kn_ir *ir;
    cm_feats f;
    int rp, rc, found = 0;
    (void)unused;
    cm_feats_init(&f);
    assert_int_equal(ss_state_new(dag, &st), AT_OK);
    lower_extract(st, &ir, &f);
    assert_int_equal(f.n_rows, 2);
    rp = row_of(ir, &f, "pad");
    rc = row_of(ir, &f, "conv");
    assert_true(rp < rc); /* rows in the order of the first store */
    assert_feat(&f, rp, CM_F_SELECT_OP, 400);
    assert_true(raw(&f, rp, CM_F_INT_CMP) > 0);
    assert_true(raw(&f, rp, CM_F_BOOL_OP) > 0);
    assert_feat(&f, rp, CM_F_FLOAT_MAD, 0);
    assert_feat(&f, rc, CM_F_FLOAT_MAD, 4.0 * 8 * 8 * 4 * 9);
    for (int k = 0; k < 3; k++)
        if (fabs(raw(&f, rc, CM_F_B0_UNIQUE_BYTES + k * CM_BUF_STRIDE) - 1600) < 0.5 &&
            raw(&f, rc, CM_F_B0_ACC_READ + k * CM_BUF_STRIDE) == 1)
            found = 1;
    assert_true(found);
    kn_ir_free(ir);
    ss_state_free(st);
    ss_dag_unref(dag);
    cm_feats_fini(&f);
}

/* A temporary: the cache-write stage of the hand-written matmul schedule is allocated per
** parallel task; its row carries the allocation group. */
static void test_allocation(void **unused)
{
    ss_dag *dag = dag_of("matmul:M=128,N=128,K=128");
    ss_state *st;
    kn_ir *ir;
    cm_feats f;
    char err[256];
    int found = 0;
    (void)unused;
    cm_feats_init(&f);
    assert_int_equal(ss_state_new(dag, &st), AT_OK);
    if (kn_hand_matmul(st, &host, err, sizeof err) != AT_OK)
        fail_msg("%s", err);
    lower_extract(st, &ir, &f);
    for (int r = 0; r < f.n_rows; r++) {
        const kn_buf *b = &ir->bufs[f.row_buf[r]];
        if (b->arg >= 0) {
            assert_feat(&f, r, CM_F_ALLOC_SIZE, 0);
            continue;
        }
        found++;
        assert_feat(&f, r, CM_F_ALLOC_SIZE, (double)b->n_elems * 4);
        assert_true(raw(&f, r, CM_F_ALLOC_OUTER_PROD) >= 1);
        assert_feat(&f, r, CM_F_ALLOC_PROD,
                    raw(&f, r, CM_F_ALLOC_SIZE) * raw(&f, r, CM_F_ALLOC_OUTER_PROD));
        assert_feat(&f, r, CM_F_ALLOC_INNER_PROD,
                    raw(&f, r, CM_F_OUTER_PROD) / raw(&f, r, CM_F_ALLOC_OUTER_PROD));
    }
    assert_true(found >= 1);
    kn_ir_free(ir);
    ss_state_free(st);
    ss_dag_unref(dag);
    cm_feats_fini(&f);
}

/* Random states of several operators: rows are finite, one-hot groups have exactly one 1
** (or are all zero for a missing buffer), extraction is deterministic, and about as fast as
** the search needs. */
static void test_random_states(void **unused)
{
    static const char *ops[] = {
        "matmul:M=64,N=48,K=32",
        "conv2d:N=1,C=8,H=14,W=14,K=16,R=3,S=3,pad=1,bias=1,relu=1",
        "conv2d:layout=NHWC,N=1,C=8,H=14,W=14,K=16,R=3,S=3,stride=2,pad=1",
        "depthwise_conv2d:N=1,C=16,H=14,W=14,R=3,S=3,pad=1",
        "softmax:M=2,N=256",
        "layer_norm:M=8,N=128",
        "dense:M=8,N=48,K=64,bias=1,relu=1",
    };
    cm_feats f, g;
    (void)unused;
    cm_feats_init(&f);
    cm_feats_init(&g);
    for (size_t o = 0; o < AT_ARRAY_LEN(ops); o++) {
        ss_dag *dag = dag_of(ops[o]);
        ss_space *sp;
        at_rng rng;
        char err[512];
        int n_ok = 0;
        assert_int_equal(ss_space_new(dag, &hw, NULL, &sp, err, sizeof err), AT_OK);
        at_rng_seed(&rng, 11 + o);
        for (int i = 0; i < 150; i++) {
            ss_state *st;
            kn_ir *ir;
            if (ss_space_sample(sp, &rng, &st) != AT_OK)
                continue;
            if (kn_lower(st, &ir, err, sizeof err) != AT_OK)
                fail_msg("%s: a sampled state does not lower: %s", ops[o], err);
            assert_int_equal(cm_features_extract(ir, &f), AT_OK);
            assert_int_equal(cm_features_extract(ir, &g), AT_OK);
            assert_int_equal(f.n_rows, g.n_rows);
            assert_memory_equal(f.rows, g.rows, (size_t)f.n_rows * CM_N_FEATS * sizeof(float));
            assert_true(f.n_rows >= 1 && f.n_rows <= ir->n_bufs);
            for (int r = 0; r < f.n_rows; r++) {
                const float *row = f.rows + (size_t)r * CM_N_FEATS;
                for (int k = 0; k < CM_N_FEATS; k++)
                    if (!isfinite(row[k]))
                        fail_msg("%s: feature %s is %g", ops[o], cm_feature_name(k), row[k]);
                for (int grp = 0; grp < 3; grp++) {
                    int base = grp == 0 ? CM_F_VEC_POS_NONE
                               : grp == 1 ? CM_F_UNROLL_POS_NONE
                                          : CM_F_PAR_POS_NONE;
                    float s = 0;
                    for (int k = 0; k < 8; k++)
                        s += row[base + k];
                    assert_float_equal(s, 1, 0);
                }
                for (int k = 0; k < CM_TOP_BUFFERS; k++) {
                    const float *b = row + CM_F_B0_ACC_READ + k * CM_BUF_STRIDE;
                    float acc = b[0] + b[1] + b[2], reuse = b[7] + b[8] + b[9];
                    assert_true(acc == reuse && (acc == 0 || acc == 1));
                }
                for (int k = CM_F_GPU; k <= CM_F_GPU_SYNCS; k++)
                    if (row[k] != 0) /* a CPU program has no GPU launch */
                        fail_msg("%s: CPU row has %s = %g", ops[o], cm_feature_name(k), row[k]);
            }
            n_ok++;
            kn_ir_free(ir);
            ss_state_free(st);
        }
        assert_true(n_ok >= 100);
        ss_space_free(sp);
        ss_dag_unref(dag);
    }
    cm_feats_fini(&f);
    cm_feats_fini(&g);
}

/* A GPU matmul 256^3 in the classic shape: block tile 128 x 128 (i and j split
** [vthread 2, threads 16, 1, 4]), k split [32, 8, 1]: a 2 x 2 grid of blocks, 16 x 16 = 256
** threads, each with 2 x 4 by 2 x 4 = 64 accumulators (C.local: 256 bytes); A.shared and
** B.shared hold 128 x 8 floats each (4096 + 4096 bytes), loaded by all 256 threads; two
** barriers per k.0 iteration (32 of them): 64 barriers. */
static void test_gpu_launch(void **unused)
{
    static const char *json =
        "{\"v\":1,\"steps\":[[\"CHW\",2,\"local\"],[\"SP\",2,2,256,[8,1],1],"
        "[\"SP\",2,1,256,[2,16,1,4],1],[\"SP\",2,0,256,[2,16,1,4],1],"
        "[\"RE\",2,[0,5,1,6,2,7,10,11,3,8,12,4,9]],[\"FSP\",3,1,2,3],[\"FSP\",3,0,3,3],"
        "[\"RE\",3,[0,4,1,5,2,6,3,7]],[\"CA\",2,3,5],[\"CHR\",1,\"shared\",[2]],"
        "[\"CA\",2,3,6],[\"CHR\",0,\"shared\",[3]],[\"CA\",1,4,6],[\"FU\",5,[0,1]],"
        "[\"AN\",5,0,5],[\"FU\",5,[1,2]],[\"AN\",5,1,4],[\"FU\",5,[2,3]],[\"AN\",5,2,6],"
        "[\"FU\",3,[0,1]],[\"SP\",3,0,0,[1],1],[\"AN\",3,1,2],[\"FFSP\",3,0,[2,3],1,1],"
        "[\"AN\",3,1,6],[\"FU\",1,[0,1]],[\"SP\",1,0,0,[1],1],[\"AN\",1,1,2],"
        "[\"FFSP\",1,0,[2,3],1,1],[\"AN\",1,1,6],[\"PR\",4,0,\"auto_unroll_max_step$512\"]]}";
    ss_dag *dag = dag_of("matmul:M=256,N=256,K=256");
    ss_state *st;
    kn_ir *ir;
    kn_target t;
    kn_launch l[KN_MAX_LAUNCHES];
    int nl, rc, ra, rb;
    int64_t ws;
    char *src, err[512];
    cm_feats f;
    (void)unused;
    cm_feats_init(&f);
    assert_int_equal(kn_target_parse("cuda -arch=sm_90", &t, err, sizeof err), AT_OK);
    if (ss_state_from_json(dag, json, strlen(json), &st, err, sizeof err) != AT_OK)
        fail_msg("the GPU matmul state: %s", err);
    lower_extract(st, &ir, &f);
    assert_true(ir->is_gpu);
    assert_int_equal(f.n_rows, 4); /* A.shared, B.shared, C.local, C */
    rc = row_of(ir, &f, "C.local");
    ra = row_of(ir, &f, "A.shared");
    rb = row_of(ir, &f, "B.shared");
    for (int r = 0; r < f.n_rows; r++) {
        assert_feat(&f, r, CM_F_GPU, 1);
        assert_feat(&f, r, CM_F_GPU_BLOCKS, 4);
        assert_feat(&f, r, CM_F_GPU_THREADS, 256);
        assert_feat(&f, r, CM_F_GPU_SHARED_BYTES, 8192);
        assert_feat(&f, r, CM_F_GPU_LOCAL_BYTES, 256);
        assert_feat(&f, r, CM_F_GPU_SYNCS, 64);
        assert_feat(&f, r, CM_F_GPU_STORE_THREADS, 256);
    }
    /* bound loops are parallel loops: block and thread (the only two parallel loops) */
    assert_feat(&f, rc, CM_F_PAR_NUM, 2);
    assert_feat(&f, rc, CM_F_PAR_PROD, 4 * 256);
    /* the update: 8 k.1 x 64 accumulators unrolled inside the serial k.0 loop */
    assert_feat(&f, rc, CM_F_ACCUMULATORS, 64);
    assert_feat(&f, rc, CM_F_INNER_LOOP_LEN, 32);
    (void)ra;
    (void)rb;
    /* the same launch as the CUDA C generator's, computed on its own */
    assert_int_equal(kn_cuda_source(ir, &t, "k", &src, l, &nl, &ws, err, sizeof err), AT_OK);
    assert_int_equal(nl, 1);
    assert_int_equal(l[0].grid[0] * l[0].grid[1] * l[0].grid[2], 4);
    assert_int_equal(l[0].block[0] * l[0].block[1] * l[0].block[2], 256);
    assert_int_equal(l[0].shared_bytes, 8192);
    at_free(src);
    kn_ir_free(ir);
    ss_state_free(st);
    ss_dag_unref(dag);
    cm_feats_fini(&f);
}

/* Random GPU states of several operators: every row's launch features are those of one of
** the launches kn_cuda_source computes (grid, block, shared memory); one-launch programs
** match exactly. */
static void test_gpu_random_states(void **unused)
{
    static const char *ops[] = {
        "matmul:M=64,N=48,K=32",
        "conv2d:N=1,C=8,H=14,W=14,K=16,R=3,S=3,pad=1,bias=1,relu=1",
        "softmax:M=2,N=256",
        "layer_norm:M=8,N=128",
    };
    kn_target t;
    ss_hw ghw;
    cm_feats f;
    char err[512];
    (void)unused;
    cm_feats_init(&f);
    assert_int_equal(kn_target_parse("cuda -arch=sm_90", &t, err, sizeof err), AT_OK);
    kn_target_hw(&t, &ghw);
    for (size_t o = 0; o < AT_ARRAY_LEN(ops); o++) {
        ss_dag *dag = dag_of(ops[o]);
        ss_space *sp;
        at_rng rng;
        int n_ok = 0;
        assert_int_equal(ss_space_new(dag, &ghw, NULL, &sp, err, sizeof err), AT_OK);
        at_rng_seed(&rng, 5 + o);
        for (int i = 0; i < 1000 && n_ok < 30; i++) {
            ss_state *st;
            kn_ir *ir;
            kn_launch l[KN_MAX_LAUNCHES];
            int nl;
            int64_t ws;
            char *src;
            if (ss_space_sample(sp, &rng, &st) != AT_OK)
                continue;
            lower_extract(st, &ir, &f);
            if (kn_cuda_source(ir, &t, "k", &src, l, &nl, &ws, err, sizeof err) != AT_OK)
                fail_msg("%s: a sampled GPU state has no CUDA C: %s", ops[o], err);
            at_free(src);
            for (int r = 0; r < f.n_rows; r++) {
                const float *row = f.rows + (size_t)r * CM_N_FEATS;
                int match = 0;
                for (int k = 0; k < CM_N_FEATS; k++)
                    if (!isfinite(row[k]))
                        fail_msg("%s: feature %s is %g", ops[o], cm_feature_name(k), row[k]);
                assert_feat(&f, r, CM_F_GPU, 1);
                for (int k = 0; k < nl && !match; k++) {
                    double g = (double)l[k].grid[0] * l[k].grid[1] * l[k].grid[2];
                    double b = (double)l[k].block[0] * l[k].block[1] * l[k].block[2];
                    match = fabs(raw(&f, r, CM_F_GPU_BLOCKS) - g) <= 1e-3 * g &&
                            fabs(raw(&f, r, CM_F_GPU_THREADS) - b) <= 1e-3 * b &&
                            fabs(raw(&f, r, CM_F_GPU_SHARED_BYTES) -
                                 (double)l[k].shared_bytes) <= 1e-3 * (double)l[k].shared_bytes + 1e-3;
                }
                if (!match)
                    fail_msg("%s: row %d's launch (blocks %g, threads %g, shared %g) is none of "
                             "the %d launches", ops[o], r, raw(&f, r, CM_F_GPU_BLOCKS),
                             raw(&f, r, CM_F_GPU_THREADS), raw(&f, r, CM_F_GPU_SHARED_BYTES), nl);
                assert_true(raw(&f, r, CM_F_GPU_STORE_THREADS) <= raw(&f, r, CM_F_GPU_THREADS) + 1e-3);
            }
            n_ok++;
            kn_ir_free(ir);
            ss_state_free(st);
        }
        assert_true(n_ok >= 30);
        ss_space_free(sp);
        ss_dag_unref(dag);
    }
    cm_feats_fini(&f);
}

/* A sketch (tile sizes not chosen) does not lower: no rows, the reason in errmsg. */
static void test_unlowerable_state(void **unused)
{
    ss_dag *dag = dag_of("matmul:M=64,N=64,K=64");
    ss_space *sp;
    cm_feats f;
    char err[256];
    int found = 0;
    (void)unused;
    cm_feats_init(&f);
    assert_int_equal(ss_space_new(dag, &hw, NULL, &sp, err, sizeof err), AT_OK);
    for (int i = 0; i < ss_space_n_sketches(sp); i++) {
        const ss_state *st = ss_space_sketch(sp, i);
        if (st->concrete)
            continue;
        found = 1;
        assert_int_equal(cm_features_of_state(st, &f, err, sizeof err), AT_ESCHED);
        assert_int_equal(f.n_rows, 0);
        assert_true(strlen(err) > 0);
    }
    assert_true(found);
    ss_space_free(sp);
    ss_dag_unref(dag);
    cm_feats_fini(&f);
}

static void test_features_survive_oom(void **unused)
{
    ss_dag *dag = dag_of("conv2d:N=1,C=8,H=14,W=14,K=16,R=3,S=3,pad=1,bias=1,relu=1");
    ss_space *sp;
    ss_state *st;
    kn_ir *ir;
    at_rng rng;
    char err[512];
    cm_feats want;
    (void)unused;
    cm_feats_init(&want);
    assert_int_equal(ss_space_new(dag, &hw, NULL, &sp, err, sizeof err), AT_OK);
    at_rng_seed(&rng, 5);
    while (ss_space_sample(sp, &rng, &st) != AT_OK)
        ;
    assert_int_equal(kn_lower(st, &ir, err, sizeof err), AT_OK);
    assert_int_equal(cm_features_extract(ir, &want), AT_OK);
    for (size_t limit = 0;; limit++) {
        cm_feats f;
        long before = at_test_live_allocs();
        at_err e;
        cm_feats_init(&f);
        at_test_alloc_limit(limit);
        e = cm_features_extract(ir, &f);
        at_test_alloc_limit(SIZE_MAX);
        if (e == AT_OK) {
            assert_int_equal(f.n_rows, want.n_rows);
            assert_memory_equal(f.rows, want.rows,
                                (size_t)f.n_rows * CM_N_FEATS * sizeof(float));
            cm_feats_fini(&f);
            break;
        }
        assert_int_equal(e, AT_ENOMEM);
        assert_int_equal(f.n_rows, 0);
        cm_feats_fini(&f);
        assert_int_equal(at_test_live_allocs(), before);
        assert_true(limit < 1000);
    }
    kn_ir_free(ir);
    ss_state_free(st);
    ss_space_free(sp);
    ss_dag_unref(dag);
    cm_feats_fini(&want);
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
        cmocka_unit_test(test_feature_list),
        cmocka_unit_test(test_naive_matmul),
        cmocka_unit_test(test_annotated_matmul),
        cmocka_unit_test(test_caches_simulated),
        cmocka_unit_test(test_machine_code),
        cmocka_unit_test(test_useful_lanes),
        cmocka_unit_test(test_unit_stride_inner),
        cmocka_unit_test(test_guarded_vector_is_serial),
        cmocka_unit_test(test_auto_unroll),
        cmocka_unit_test(test_conv_sliding_window),
        cmocka_unit_test(test_allocation),
        cmocka_unit_test(test_random_states),
        cmocka_unit_test(test_gpu_launch),
        cmocka_unit_test(test_gpu_random_states),
        cmocka_unit_test(test_unlowerable_state),
        cmocka_unit_test(test_features_survive_oom),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
