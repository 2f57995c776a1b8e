/* tests/cost_model/test_code.c -- the machine code read back (cm_code.c).
**
** Real builds for this machine: a naive matmul's dynamic FMAs against its multiply-adds
** (every one of them is an FMA once LLVM is done, scalar or vector, so their count times
** the lanes is M N K within the trip counts read), four times the K loop giving four
** times the dynamic FMAs, shares within [0, 1], random states of two operators; code
** assembled by hand (each FMA's lanes, trip counts, the loop run twice on a flag); then the
** errors: another architecture, no object, bytes that are not an object. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cost_model/cost_model.h"

static kn_target host;

static void code_for(const kn_target *tg, const char *spec, int random_seed,
                     double out[CM_CODE_N]);

/* x ~ y, relatively (the ratios and logs are computed from the raw counts) */
static int near(double x, double y)
{
    return fabs(x - y) <= 1e-9 * fmax(1, fmax(fabs(x), fabs(y)));
}

/* The raw counts (feature version 7) agree with the ratios and logs and with each other, and
** with the counts per FMA lane (version 8). */
static void check_raw(const char *spec, const double *o)
{
    static const int in0 = CM_CODE_IN_ALL, ex0 = CM_CODE_EX_ALL, d0 = CM_CODE_D0_ALL;
    const int nk = CM_CODE_EX_ALL - CM_CODE_IN_ALL, nd = (CM_CODE_LOOPS - d0) / nk;
    if (!near(exp2(o[CM_CODE_INSNS]) - 1, o[CM_CODE_IN_ALL]) ||
        !near(exp2(o[CM_CODE_FMAS]) - 1, o[CM_CODE_IN_FMA]) ||
        !near(exp2(o[CM_CODE_DYN_INSNS]) - 1, o[CM_CODE_EX_ALL]) ||
        !near(exp2(o[CM_CODE_DYN_FMAS]) - 1, o[CM_CODE_EX_FMA]) ||
        !near(exp2(o[CM_CODE_CYCLES]) - 1, o[CM_CODE_CYCLE_EST]) ||
        !near(o[CM_CODE_FMA_SHARE], o[CM_CODE_IN_FMA] / fmax(o[CM_CODE_IN_ALL], 1)))
        fail_msg("%s: the raw counts disagree with the logs and ratios", spec);
    assert_int_equal(nd, 5);
    for (int c = 0; c < nk; c++) {
        double all_depths = 0;
        for (int d = 0; d < nd; d++) {
            all_depths += o[d0 + d * nk + c];
            assert_true(o[d0 + d * nk + c] <= o[d0 + d * nk]); /* a class <= all */
        }
        /* the innermost loops' instructions are some of all; the dynamic count at least
        ** the static one (each instruction runs at least once as counted) */
        assert_true(o[in0 + c] <= all_depths && o[ex0 + c] >= o[in0 + c]);
        assert_true(o[in0 + c] <= o[in0] && o[ex0 + c] <= o[ex0]);
    }
    assert_true(o[CM_CODE_BYTES] >= o[d0]); /* an instruction takes a byte at least */
    assert_true(o[CM_CODE_MAX_DEPTH] <= o[CM_CODE_LOOPS]);
    assert_true(o[CM_CODE_DEFAULT_TRIPS] <= o[CM_CODE_LOOPS]);
    assert_true(o[CM_CODE_HOT_FMAS] <= o[CM_CODE_IN_FMA]);
    assert_true(o[CM_CODE_HOT_INSNS] <= o[CM_CODE_IN_ALL]);
    assert_true(o[CM_CODE_HOT_STORES] <= o[CM_CODE_HOT_INSNS]);
    if (o[CM_CODE_HOT_FMAS] > 0)
        assert_true(o[CM_CODE_HOT_TRIP] >= 1 && o[CM_CODE_HOT_RUNS] >= o[CM_CODE_HOT_TRIP] &&
                    o[CM_CODE_HOT_BOUND] >= 0.5); /* 2 FMAs a cycle at most */
    /* per FMA lane (version 8): 1 to 16 lanes an FMA, the logs of the counts' ratios */
    double xl = o[CM_CODE_EX_LANES];
    if (o[CM_CODE_EX_FMA] == 0) {
        for (int c = CM_CODE_EX_LANES; c <= CM_CODE_HOT_LANE_CYCLES; c++)
            assert_true(o[c] == 0);
        return;
    }
    assert_true(o[CM_CODE_FMA_WIDTH] >= 1 && o[CM_CODE_FMA_WIDTH] <= 16);
    if (!near(o[CM_CODE_FMA_WIDTH] * o[CM_CODE_EX_FMA], xl) ||
        !near(exp2(o[CM_CODE_LANE_CYCLES]), 1e-6 + o[CM_CODE_CYCLE_EST] / xl) ||
        !near(exp2(o[CM_CODE_LANE_LOADS]),
              1e-6 + (o[CM_CODE_EX_VLOAD] + o[CM_CODE_EX_BCAST] + o[CM_CODE_EX_MEMFMA]) / xl) ||
        !near(exp2(o[CM_CODE_LANE_STORES]), 1e-6 + o[CM_CODE_EX_VSTORE] / xl) ||
        !near(exp2(o[CM_CODE_LANE_STACK]), 1e-6 + o[CM_CODE_EX_STACK] / xl))
        fail_msg("%s: the counts per FMA lane disagree with the raw counts", spec);
    /* the hot loop's cycles per lane at least those of 2 FMAs of 16 lanes a cycle */
    if (o[CM_CODE_HOT_FMAS] > 0)
        assert_true(o[CM_CODE_HOT_LANE_CYCLES] >= log2(1.0 / 32) - 1e-9);
}

static void code_of(const char *spec, int random_seed, double out[CM_CODE_N])
{
    code_for(&host, spec, random_seed, out);
}

static void code_for(const kn_target *tg, const char *spec, int random_seed,
                     double out[CM_CODE_N])
{
    ss_dag *dag;
    ss_state *st;
    kn_artifact *a;
    char err[512];
    if (kn_op_build(spec, &dag, err, sizeof err) != AT_OK)
        fail_msg("%s: %s", spec, err);
    if (random_seed) {
        ss_hw hw;
        ss_space *sp;
        at_rng rng;
        ss_hw_cpu(&hw, tg->n_cores, tg->vector_bytes, tg->l1_bytes, tg->l2_bytes);
        assert_int_equal(ss_space_new(dag, &hw, NULL, &sp, err, sizeof err), AT_OK);
        at_rng_seed(&rng, (uint64_t)random_seed);
        int tries = 0;
        while (ss_space_sample(sp, &rng, &st) != AT_OK)
            if (++tries == 100)
                fail_msg("%s: no random state in 100 tries", spec);
        ss_space_free(sp);
    } else {
        assert_int_equal(ss_state_new(dag, &st), AT_OK);
    }
    if (kn_build_state(st, tg, NULL, &a, err, sizeof err) != AT_OK)
        fail_msg("%s: build: %s", spec, err);
    if (cm_code_run(a, tg, out, err, sizeof err) != AT_OK)
        fail_msg("%s: cm_code_run: %s", spec, err);
    check_raw(spec, out);
    for (int c = 0; c < CM_CODE_N; c++) /* the logs per FMA lane may be negative */
        assert_true(isfinite(out[c]) &&
                    (out[c] >= 0 || (c >= CM_CODE_LANE_CYCLES && c <= CM_CODE_HOT_LANE_CYCLES)));
    for (int c = CM_CODE_FMA_SHARE; c <= CM_CODE_ZMM_SHARE; c++)
        if (c != CM_CODE_LOADS_PER_FMA)
            assert_true(out[c] <= 1);
    for (int c = CM_CODE_DYN_FMA_SHARE; c <= CM_CODE_DYN_ZMM_SHARE; c++)
        if (c != CM_CODE_DYN_LOADS_PER_FMA)
            assert_true(out[c] <= 1);
    kn_artifact_free(a);
    ss_state_free(st);
    ss_dag_unref(dag);
}

static void test_naive_matmul(void **state)
{
    (void)state;
    double a[CM_CODE_N], b[CM_CODE_N];
    code_of("matmul:M=64,N=64,K=64", 0, a);
    code_of("matmul:M=64,N=64,K=256", 0, b);
    double fmas = exp2(a[CM_CODE_DYN_FMAS]) - 1, fmas4 = exp2(b[CM_CODE_DYN_FMAS]) - 1;
    print_message("naive matmul 64^3: %.0f dynamic FMAs, %.0f instructions, cycles %.0f; "
                  "K=256: %.0f FMAs\n", fmas, exp2(a[CM_CODE_DYN_INSNS]) - 1,
                  exp2(a[CM_CODE_CYCLES]) - 1, fmas4);
    /* 262,144 multiply-adds: scalar FMAs, or vector ones of up to 16 lanes */
    assert_true(fmas >= 262144.0 / 16 * 0.99 && fmas <= 262144.0 * 1.01);
    /* the K loop's trip count is read: four times the FMAs */
    assert_true(fabs(fmas4 / fmas - 4) < 0.05);
    assert_true(a[CM_CODE_FMAS] > 0 && a[CM_CODE_INSNS] >= a[CM_CODE_FMAS]);
    assert_true(a[CM_CODE_DYN_INSNS] > a[CM_CODE_INSNS]);
    assert_true(a[CM_CODE_CYCLES] > 0 && b[CM_CODE_CYCLES] > a[CM_CODE_CYCLES]);
    /* the raw counts: loops i, j, k nested; the hot loop holds FMAs, and with K four times
    ** longer it runs more often */
    print_message("naive matmul 64^3: %.0f loops, depth %.0f, %.0f bytes; hot loop %.0f FMAs, "
                  "%.0f instructions, trip %.0f, runs %.0f (K=256: %.0f)\n", a[CM_CODE_LOOPS],
                  a[CM_CODE_MAX_DEPTH], a[CM_CODE_BYTES], a[CM_CODE_HOT_FMAS],
                  a[CM_CODE_HOT_INSNS], a[CM_CODE_HOT_TRIP], a[CM_CODE_HOT_RUNS],
                  b[CM_CODE_HOT_RUNS]);
    assert_true(a[CM_CODE_LOOPS] >= 3 && a[CM_CODE_MAX_DEPTH] >= 3);
    assert_true(a[CM_CODE_HOT_FMAS] > 0 && b[CM_CODE_HOT_RUNS] > a[CM_CODE_HOT_RUNS]);
    assert_true(a[CM_CODE_EX_FMA] >= 262144.0 / 16 * 0.99);
    /* each FMA's lanes counted: 262,144 lanes in all, whatever the vector width */
    print_message("naive matmul 64^3: %.0f FMA lanes, %.2f an FMA\n", a[CM_CODE_EX_LANES],
                  a[CM_CODE_FMA_WIDTH]);
    assert_true(fabs(a[CM_CODE_EX_LANES] / 262144.0 - 1) < 0.01);
    assert_true(fabs(b[CM_CODE_EX_LANES] / a[CM_CODE_EX_LANES] - 4) < 0.05);
}

/* AArch64's code, built here for a phone (nothing runs): the same naive matmul's FMAs */
static void test_aarch64(void **state)
{
    (void)state;
    kn_target arm;
    char err[256];
    double a[CM_CODE_N], b[CM_CODE_N];
    if (kn_target_parse("llvm -mtriple=aarch64-linux-gnu", &arm, err, sizeof err) != AT_OK)
        fail_msg("aarch64 target: %s", err);
    code_for(&arm, "matmul:M=64,N=64,K=64", 0, a);
    code_for(&arm, "matmul:M=64,N=64,K=256", 0, b);
    double fmas = exp2(a[CM_CODE_DYN_FMAS]) - 1, fmas4 = exp2(b[CM_CODE_DYN_FMAS]) - 1;
    print_message("aarch64 naive matmul 64^3: %.0f dynamic FMAs; K=256: %.0f\n", fmas, fmas4);
    assert_true(fmas >= 262144.0 / 4 * 0.99 && fmas <= 262144.0 * 1.01);
    assert_true(fabs(fmas4 / fmas - 4) < 0.05);
    assert_true(a[CM_CODE_DYN_LOADS] > a[CM_CODE_DYN_FMAS] - 1); /* two loads an FMA */
    assert_true(a[CM_CODE_CYCLES] > 0 && a[CM_CODE_ZMM_SHARE] == 0);
    print_message("aarch64 naive matmul 64^3: %.0f FMA lanes, %.2f an FMA\n",
                  a[CM_CODE_EX_LANES], a[CM_CODE_FMA_WIDTH]);
    assert_true(fabs(a[CM_CODE_EX_LANES] / 262144.0 - 1) < 0.01);
    assert_true(a[CM_CODE_FMA_WIDTH] >= 1 && a[CM_CODE_FMA_WIDTH] <= 4); /* NEON: 4 floats */
    double widest = 0;
    for (int seed = 1; seed <= 4; seed++) {
        double o[CM_CODE_N];
        code_for(&arm, "conv2d:N=1,C=16,H=14,W=14,K=32,R=3,S=3,pad=1", seed, o);
        assert_true(o[CM_CODE_DYN_INSNS] > 0);
        assert_true(o[CM_CODE_FMA_WIDTH] <= 4);
        widest = fmax(widest, o[CM_CODE_FMA_WIDTH]);
    }
    print_message("aarch64 random convolutions: at most %.2f lanes an FMA\n", widest);
    assert_true(widest > 1); /* a vectorized state's fmla v.4s counted as 4 */
}

static void test_random_states(void **state)
{
    (void)state;
    static const char *const specs[] = {"matmul:M=128,N=128,K=128",
                                        "conv2d:N=1,C=16,H=14,W=14,K=32,R=3,S=3,pad=1"};
    double widest = 0;
    int exact = 0;
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++)
        for (int seed = 1; seed <= 6; seed++) {
            double o[CM_CODE_N];
            code_of(specs[i], seed, o);
            assert_true(o[CM_CODE_DYN_INSNS] >= o[CM_CODE_DYN_FMAS]);
            assert_true(o[CM_CODE_DYN_INSNS] > 0);
            widest = fmax(widest, o[CM_CODE_FMA_WIDTH]);
            if (i == 0) {
                print_message("matmul 128^3, random state %d: %.3g FMA lanes of 2097152, %.0f "
                              "of %.0f loops unread\n", seed, o[CM_CODE_EX_LANES],
                              o[CM_CODE_DEFAULT_TRIPS], o[CM_CODE_LOOPS]);
                exact += fabs(o[CM_CODE_EX_LANES] / 2097152 - 1) < 0.1;
            }
        }
    /* x86-64 has 128-bit vectors at least: some random state's FMAs are vector ones */
    print_message("random states: at most %.2f lanes an FMA (%d-byte vectors)\n", widest,
                  host.vector_bytes);
    assert_true(widest > 1 && widest <= host.vector_bytes / 4 + 1e-9);
    /* the parallel loops' hidden trip counts from their extents (version 9): the FMA lanes
    ** are the multiply-adds within 10% for most states (not all: LLVM lays some loops out
    ** apart from their branch, and those are read by address) */
    print_message("matmul 128^3: %d of 6 random states within 10%% of 2097152 FMA lanes\n", exact);
    assert_true(exact >= 3);
}

/* The lane columns made per useful lane (feature version 12) on columns given by hand: idle
** lanes add their log2 to each computed column, capped at CM_CODE_MAX_IDLE; no change
** where every lane is used, within 1 %, or where the counts are unknown. */
static void test_per_useful_lane(void **state)
{
    static const int cols[] = {CM_CODE_LANE_CYCLES, CM_CODE_LANE_LOADS, CM_CODE_LANE_STORES,
                               CM_CODE_LANE_STACK, CM_CODE_HOT_LANE_CYCLES};
    static const struct {
        double lanes, mads, add;
    } cases[] = {{400, 100, 2},  {400, 200, 1},   {400, 400, 0}, {400, 399, 0},
                 {400, 800, 0},  {1e6, 100, 4},   {1600, 100, 4}, {0, 100, 0},
                 {400, 0, 0},    {400, -1, 0}};
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        double o[CM_CODE_N];
        for (int k = 0; k < CM_CODE_N; k++)
            o[k] = k + 0.5;
        o[CM_CODE_EX_LANES] = cases[i].lanes;
        o[CM_CODE_LANE_STACK] = 0; /* not computed: stays 0 */
        cm_code_per_useful_lane(o, cases[i].mads);
        for (int k = 0; k < CM_CODE_N; k++) {
            int lane = 0;
            double want;
            for (size_t c = 0; c < sizeof cols / sizeof *cols; c++)
                lane |= cols[c] == k;
            want = k == CM_CODE_EX_LANES    ? cases[i].lanes
                   : k == CM_CODE_LANE_STACK ? 0
                                             : k + 0.5 + (lane ? cases[i].add : 0);
            if (!near(o[k], want))
                fail_msg("lanes %g, multiply-adds %g: column %d is %g, want %g", cases[i].lanes,
                         cases[i].mads, k, o[k], want);
        }
    }
}

static void test_errors(void **state)
{
    (void)state;
    double o[CM_CODE_N];
    char err[256];
    kn_artifact a;
    memset(&a, 0, sizeof a);
    assert_int_equal(cm_code_run(NULL, &host, o, err, sizeof err), AT_EINVAL);
    assert_non_null(strstr(err, "no object"));
    assert_int_equal(cm_code_run(&a, &host, o, err, sizeof err), AT_EINVAL);
    uint8_t junk[64];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (uint8_t)(i * 37 + 11);
    a.obj = junk;
    a.obj_size = sizeof junk;
    assert_int_equal(cm_code_run(&a, &host, o, err, sizeof err), AT_EINVAL);
    assert_non_null(strstr(err, "not an object"));
    kn_target gpu;
    if (kn_target_parse("cuda -arch=sm_90", &gpu, err, sizeof err) != AT_OK)
        fail_msg("cuda target: %s", err);
    assert_int_equal(cm_code_run(&a, &gpu, o, err, sizeof err), AT_EINVAL);
    assert_non_null(strstr(err, "only x86-64's and AArch64's"));
    for (int c = 0; c < CM_CODE_N; c++)
        assert_true(o[c] == 0);
}

/* Hand-written code assembled by binutils (gcc's and gcc-aarch64-linux-gnu's 'as', both in
** make deps) and read back: each FMA's lanes from its registers and element type, a loop's
** trip count from its counter, and LLVM's loop that runs twice on a flag. */
static void assembled(const char *as, const char *src, const kn_target *tg, double o[CM_CODE_N])
{
    char dir[] = "/tmp/at_code.XXXXXX", s_path[64], o_path[64], cmd[256], err[256];
    if (!mkdtemp(dir))
        fail_msg("mkdtemp: %s", strerror(errno));
    snprintf(s_path, sizeof s_path, "%s/a.s", dir);
    snprintf(o_path, sizeof o_path, "%s/a.o", dir);
    FILE *f = fopen(s_path, "w");
    assert_non_null(f);
    fputs(src, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s -o %s %s", as, o_path, s_path);
    if (system(cmd) != 0)
        fail_msg("%s failed", cmd);
    static uint8_t obj[1 << 16];
    f = fopen(o_path, "rb");
    assert_non_null(f);
    size_t n = fread(obj, 1, sizeof obj, f);
    fclose(f);
    unlink(s_path);
    unlink(o_path);
    rmdir(dir);
    kn_artifact a;
    memset(&a, 0, sizeof a);
    a.obj = obj;
    a.obj_size = n;
    if (cm_code_run(&a, tg, o, err, sizeof err) != AT_OK)
        fail_msg("%s: cm_code_run: %s", as, err);
    check_raw(as, o);
}

static void test_assembled(void **state)
{
    (void)state;
    kn_target x86, arm;
    char err[256];
    double o[CM_CODE_N];
    if (kn_target_parse("llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512", &x86, err,
                        sizeof err) != AT_OK ||
        kn_target_parse("llvm -mtriple=aarch64-linux-gnu", &arm, err, sizeof err) != AT_OK)
        fail_msg("targets: %s", err);
    /* twice on a flag: 16 + 8 + 16 lanes (a broadcast operand: still a zmm's 16); then 10
    ** times: 1 + 4 lanes (a scalar float, a ymm of doubles) */
    assembled("as --64",
              ".text\nf:\n  movb $1, %al\n"
              "1:\n  vfmadd231ps %zmm1, %zmm2, %zmm0\n  vfmadd231ps %ymm1, %ymm2, %ymm0\n"
              "  vfmadd231ps (%rdi){1to16}, %zmm1, %zmm0\n"
              "  testb $1, %al\n  movl $0, %eax\n  jne 1b\n"
              "  xorl %ecx, %ecx\n"
              "2:\n  vfmadd231ss %xmm1, %xmm2, %xmm0\n  vfmadd231pd %ymm1, %ymm2, %ymm0\n"
              "  addq $1, %rcx\n  cmpq $10, %rcx\n  jne 2b\n  ret\n",
              &x86, o);
    print_message("x86-64: %.0f loops (%.0f unread), %.0f FMAs, %.0f lanes\n", o[CM_CODE_LOOPS],
                  o[CM_CODE_DEFAULT_TRIPS], o[CM_CODE_EX_FMA], o[CM_CODE_EX_LANES]);
    assert_true(o[CM_CODE_LOOPS] == 2 && o[CM_CODE_DEFAULT_TRIPS] == 0);
    assert_true(o[CM_CODE_EX_FMA] == 2 * 3 + 10 * 2);
    assert_true(o[CM_CODE_EX_LANES] == 2 * (16 + 8 + 16) + 10 * (1 + 4));
    assert_true(o[CM_CODE_EX_MEMFMA] == 2 && o[CM_CODE_HOT_FMAS] == 3);
    /* 3 FMAs: 1.5 cycles (their chain on register 0, 6 FMAs over the 2 runs, is short
    ** enough to overlap the next run of the loop: test_fma_chain) */
    assert_true(near(o[CM_CODE_HOT_LANE_CYCLES], log2(1e-6 + 1.5 / 40)));
    /* the flag in a stack slot, tested with no "movl $0" after it and six moves before the
    ** branch (LLVM clears it elsewhere): twice; a loop closed on a condition computed in it
    ** (setl, then testb $1) is not LLVM's flag: unread */
    assembled("as --64",
              ".text\nf:\n  movb $1, %al\n"
              "1:\n  movl %eax, 0x10(%rsp)\n  vfmadd231ps %zmm1, %zmm2, %zmm0\n  xorl %eax, %eax\n"
              "  testb $1, 0x10(%rsp)\n  movq %rdi, %r8\n  movq %rsi, %r9\n  movl $1, %edx\n"
              "  movl $0, %ecx\n  movq %r8, %r10\n  movl $1, %ebx\n  jne 1b\n"
              "2:\n  vfmadd231ps %ymm1, %ymm2, %ymm0\n  cmpq %rsi, %rdi\n  setl %dl\n"
              "  testb $1, %dl\n  jne 2b\n  ret\n",
              &x86, o);
    print_message("x86-64 flags: %.0f loops (%.0f unread), %.0f lanes\n", o[CM_CODE_LOOPS],
                  o[CM_CODE_DEFAULT_TRIPS], o[CM_CODE_EX_LANES]);
    assert_true(o[CM_CODE_LOOPS] == 2 && o[CM_CODE_DEFAULT_TRIPS] == 1);
    assert_true(o[CM_CODE_EX_LANES] == 2 * 16 + 8 * 8); /* the unread loop: 8 trips */
    /* a counter from -4096 by 4 (1,024 trips), its add 2 FMAs before the branch and its
    ** mov 80 bytes of zeroing before the loop, as LLVM schedules a matmul's */
    {
        char src[1024];
        int o_ = snprintf(src, sizeof src, ".text\nf:\n  movq $-4096, %%rbp\n");
        for (int k = 0; k < 16; k++)
            o_ += snprintf(src + o_, sizeof src - (size_t)o_, "  vxorps %%xmm%d, %%xmm%d, %%xmm%d\n",
                           k, k, k);
        snprintf(src + o_, sizeof src - (size_t)o_,
                 "1:\n  vfmadd231ps %%zmm1, %%zmm2, %%zmm0\n  addq $4, %%rbp\n"
                 "  vfmadd231ps %%zmm3, %%zmm4, %%zmm5\n  prefetcht0 64(%%rdi)\n  jne 1b\n  ret\n");
        assembled("as --64", src, &x86, o);
        print_message("x86-64 counter: %.0f loops (%.0f unread), %.0f lanes\n",
                      o[CM_CODE_LOOPS], o[CM_CODE_DEFAULT_TRIPS], o[CM_CODE_EX_LANES]);
        assert_true(o[CM_CODE_LOOPS] == 1 && o[CM_CODE_DEFAULT_TRIPS] == 0);
        assert_true(o[CM_CODE_EX_LANES] == 1024 * 2 * 16);
    }
    /* AArch64: 6 times 4 + 2 + 1 lanes */
    assembled("aarch64-linux-gnu-as",
              ".text\nf:\n  mov x8, #0\n"
              "1:\n  fmla v0.4s, v1.4s, v2.4s\n  fmla v3.2d, v4.2d, v5.2d\n"
              "  fmadd s0, s1, s2, s3\n  add x8, x8, #1\n  cmp x8, #6\n  b.ne 1b\n  ret\n",
              &arm, o);
    print_message("aarch64: %.0f loops (%.0f unread), %.0f FMAs, %.0f lanes\n", o[CM_CODE_LOOPS],
                  o[CM_CODE_DEFAULT_TRIPS], o[CM_CODE_EX_FMA], o[CM_CODE_EX_LANES]);
    assert_true(o[CM_CODE_LOOPS] == 1 && o[CM_CODE_DEFAULT_TRIPS] == 0);
    assert_true(o[CM_CODE_EX_FMA] == 6 * 3 && o[CM_CODE_EX_LANES] == 6 * (4 + 2 + 1));
}

/* One loop of 8 FMAs, 'acc' the destination of the k-th ("%zmm0") and 'pre' an instruction
** before them in the loop (or ""), assembled for x86-64; its cycles per FMA. */
static double chain_bound(const kn_target *x86, const char *pre, const char *const acc[8])
{
    char src[1024];
    double o[CM_CODE_N];
    int n = snprintf(src, sizeof src, ".text\nf:\n  xorl %%ecx, %%ecx\n1:\n%s", pre);
    for (int k = 0; k < 8; k++) /* the sources as wide as the destination */
        n += snprintf(src + n, sizeof src - (size_t)n, "  vfmadd231ps %%%cmm20, %%%cmm21, %s\n",
                      acc[k][1], acc[k][1], acc[k]);
    snprintf(src + n, sizeof src - (size_t)n,
             "  addq $1, %%rcx\n  cmpq $100, %%rcx\n  jne 1b\n  ret\n");
    assembled("as --64", src, x86, o);
    assert_true(o[CM_CODE_LOOPS] == 1 && o[CM_CODE_DEFAULT_TRIPS] == 0);
    assert_true(o[CM_CODE_HOT_FMAS] == 8 && o[CM_CODE_EX_FMA] == 800);
    return o[CM_CODE_HOT_BOUND];
}

/* A loop of 'n' FMAs a run into 'regs' registers in turn, each register loaded before its
** first FMA of the run and stored after its last; cycles per FMA. */
static double run_bound(const kn_target *x86, int n, int regs)
{
    size_t cap = (size_t)(n + 2 * regs + 8) * 64;
    char *src = malloc(cap);
    double o[CM_CODE_N];
    int w;
    assert_non_null(src);
    w = snprintf(src, cap, ".text\nf:\n  xorl %%ecx, %%ecx\n1:\n");
    for (int r = 0; r < regs; r++)
        w += snprintf(src + w, cap - (size_t)w, "  vmovups %d(%%rsi), %%zmm%d\n", 64 * r, r);
    for (int k = 0; k < n; k++)
        w += snprintf(src + w, cap - (size_t)w, "  vfmadd231ps %%zmm20, %%zmm21, %%zmm%d\n",
                      k % regs);
    for (int r = 0; r < regs; r++)
        w += snprintf(src + w, cap - (size_t)w, "  vmovups %%zmm%d, %d(%%rdi)\n", r, 64 * r);
    snprintf(src + w, cap - (size_t)w, "  addq $1, %%rcx\n  cmpq $100, %%rcx\n  jne 1b\n  ret\n");
    assembled("as --64", src, x86, o);
    free(src);
    assert_true(o[CM_CODE_LOOPS] == 1 && o[CM_CODE_DEFAULT_TRIPS] == 0);
    assert_true(o[CM_CODE_HOT_FMAS] == n);
    return o[CM_CODE_HOT_BOUND];
}

/* A loop's cycles are at least its longest chain of FMAs on one accumulator, 4 cycles an FMA,
** less where out-of-order execution runs several side by side (feature version 13). An
** accumulator carried across 100 iterations: 8 FMAs on 8 registers issue in 4 cycles (2 a
** cycle), on 2 registers wait 4 x 4 cycles, on one 8 x 4; a mask or a ymm or xmm name is
** the same register. A register loaded or zeroed in the loop starts its chain again each
** iteration: 8 FMAs after the zeroing, 12 instructions, run beside 21 iterations' others
** (256 / 12), under their issue time; 300 FMAs on one register (304 instructions) wait 300 x
** 4 cycles, on 10 (30 each) issue first. AArch64: fmla updates its first operand, fmadd its
** first only where it is also its last. */
static void test_fma_chain(void **state)
{
    (void)state;
    kn_target x86, arm;
    char err[256];
    double o[CM_CODE_N];
    static const char *const eight[8] = {"%zmm0", "%zmm1", "%zmm2", "%zmm3",
                                         "%zmm4", "%zmm5", "%zmm6", "%zmm7"};
    static const char *const two[8] = {"%zmm0", "%zmm1", "%zmm0", "%zmm1",
                                       "%zmm0", "%zmm1", "%zmm0", "%zmm1"};
    static const char *const one[8] = {"%zmm9", "%ymm9", "%zmm9 {%k1}", "%xmm9",
                                       "%zmm9", "%zmm9", "%zmm9", "%zmm9"};
    if (kn_target_parse("llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512", &x86, err,
                        sizeof err) != AT_OK ||
        kn_target_parse("llvm -mtriple=aarch64-linux-gnu", &arm, err, sizeof err) != AT_OK)
        fail_msg("targets: %s", err);
    assert_true(near(chain_bound(&x86, "", eight), 0.5));
    assert_true(near(chain_bound(&x86, "", two), 2));
    assert_true(near(chain_bound(&x86, "", one), 4));
    /* zeroed in the loop: each iteration's chain starts afresh */
    assert_true(near(chain_bound(&x86, "  vxorps %xmm9, %xmm9, %xmm9\n", one), 0.5));
    assert_true(near(run_bound(&x86, 300, 1), 4));
    assert_true(near(run_bound(&x86, 300, 10), 0.5));
    /* a store of the register or a load into another leaves the chain */
    assert_true(near(chain_bound(&x86, "  vmovups %zmm9, (%rdi)\n  vmovups (%rsi), %zmm8\n",
                                 one), 4));
    /* AArch64, 1,000 iterations: 4 fmla on v0 (16 cycles), fmadd s1 = s2 * s3 + s4 no chain,
    ** fmadd s5 = s2 * s3 + s5 a chain of 1; 6 FMAs: 16 / 6 cycles an FMA */
    assembled("aarch64-linux-gnu-as",
              ".text\nf:\n  mov x8, #0\n"
              "1:\n  fmla v0.4s, v1.4s, v2.4s\n  fmla v0.4s, v3.4s, v2.4s\n"
              "  fmla v0.4s, v4.4s, v2.4s\n  fmla v0.4s, v5.4s, v2.4s\n"
              "  fmadd s1, s2, s3, s4\n  fmadd s5, s2, s3, s5\n"
              "  str q0, [x1]\n  add x8, x8, #1\n  cmp x8, #1000\n  b.ne 1b\n  ret\n",
              &arm, o);
    assert_true(o[CM_CODE_HOT_FMAS] == 6);
    assert_true(near(o[CM_CODE_HOT_BOUND], 16.0 / 6));
}

int main(void)
{
    if (kn_target_host(&host) != AT_OK)
        return 1;
    if (!host.is_x86) {
        print_message("not x86-64: this machine's own builds are not read here\n");
        const struct CMUnitTest only[] = {cmocka_unit_test(test_aarch64),
                                          cmocka_unit_test(test_assembled),
                                          cmocka_unit_test(test_errors),
                                          cmocka_unit_test(test_fma_chain),
                                          cmocka_unit_test(test_per_useful_lane)};
        return cmocka_run_group_tests(only, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_naive_matmul),
        cmocka_unit_test(test_random_states),
        cmocka_unit_test(test_aarch64),
        cmocka_unit_test(test_assembled),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_fma_chain),
        cmocka_unit_test(test_per_useful_lane),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
