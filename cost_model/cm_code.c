/* cost_model/cm_code.c -- what LLVM emitted for a CPU program, read back as numbers.
**
** The object a build produced is disassembled with LLVM's disassembler (x86-64 in AT&T
** syntax, and AArch64: each has its own classes below), loops are found from backward
** branches, and each instruction is classed: FMA, vector load, vector store, broadcast,
** stack access (a spill or reload), prefetch, FMA with a memory operand, 512-bit (or SVE)
** register.  The counts in the innermost loops, and the dynamic counts (each instruction
** times the trip counts of the loops around it, read from the loop's compare and counter
** where LLVM left them; in a parallel loop's task function, the unread loops around every
** read one (the chunks, whose bounds come from counters at run time) take the loop's
** extent from the function's name; else 8), become 17 columns of ratios, logs and a cycle estimate
** (each innermost loop at the bound of its FMAs, loads, stores, issue width and, since
** feature version 14, its chains of FMAs on one accumulator: fma_chain), followed
** by 78 raw counts: the innermost loops', the dynamic ones, the cycle estimate, per loop
** depth, the loops and the code's size, and those of the hot loop (the innermost loop
** with the most FMAs); then 8 columns per FMA lane (each FMA's lanes read from its
** registers and element type), which cm_code_per_useful_lane makes per useful lane.
** docs/cost_model.md, "The machine code read back", says what they did for ranking
** (scripts/cm_study/asm.c is the study's version of the same reading). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost_model/cost_model.h"

void cm_code_per_useful_lane(double out[CM_CODE_N], double mads)
{
    static const int cols[] = {CM_CODE_LANE_CYCLES, CM_CODE_LANE_LOADS, CM_CODE_LANE_STORES,
                               CM_CODE_LANE_STACK, CM_CODE_HOT_LANE_CYCLES};
    double xl = out[CM_CODE_EX_LANES], idle;
    if (!(xl > 0 && mads > 0) || xl <= 1.01 * mads)
        return;
    idle = log2(fmin(xl / mads, CM_CODE_MAX_IDLE));
    for (size_t k = 0; k < sizeof cols / sizeof *cols; k++)
        if (out[cols[k]] != 0)
            out[cols[k]] += idle;
}

#ifdef AT_NO_LLVM /* the GPU bundle's build (docs/gpu.md): no disassembler, code not read */

at_err cm_code_run(const kn_artifact *a, const kn_target *t, double out[CM_CODE_N],
                   char *errmsg, size_t errmsg_size)
{
    (void)a;
    (void)t;
    for (int c = 0; c < CM_CODE_N; c++)
        out[c] = 0;
    if (errmsg && errmsg_size)
        snprintf(errmsg, errmsg_size, "cm_code_run: built without LLVM");
    return AT_EINVAL;
}

#else

#include <pthread.h>

#include <llvm-c/Core.h>
#include <llvm-c/Disassembler.h>
#include <llvm-c/Object.h>
#include <llvm-c/Target.h>

enum { K_ALL, K_FMA, K_VLOAD, K_VSTORE, K_BCAST, K_STACK, K_PREF, K_MEMFMA, K_ZMM, K_N };

/* at most this many instructions read (a build's kernels have thousands) */
#define CODE_MAX_INSNS (1 << 20)
/* loop depths counted apart (the last one: that deep or deeper) */
#define CODE_DEPTHS 5
/* cycles from an FMA's issue to its result: 4 on Zen 4 and 5, Intel's cores since Skylake and
** Arm's since the Cortex-A76 (their two FMA pipes make 8 chains the most a loop needs) */
#define CODE_FMA_LATENCY 4
#define CODE_N_REGS 32 /* vector registers: x86's mm0-31, AArch64's v0-31 */
/* instructions out-of-order execution keeps in flight (Zen 4's reorder buffer holds 320,
** Skylake's 224): chains that many instructions apart run side by side */
#define CODE_WINDOW 256

typedef struct insn {
    uint64_t at;
    int64_t target; /* a branch's destination, else -1 */
    double trip;    /* a loop's branch: its trip count */
    int depth;      /* loops around it */
    unsigned char lanes; /* an FMA's float lanes (16 for a zmm of floats), else 0 */
    unsigned char cls[K_N];
    char text[80];
} insn;

static void put_err(char *errmsg, size_t n, const char *fmt, const char *a)
{
    if (errmsg && n)
        snprintf(errmsg, n, fmt, a);
}

/* The mnemonic of instruction text 't' into mn[32]; returns its operands. */
static const char *mnemonic(const char *t, char mn[32])
{
    int k = 0;
    while (*t == ' ' || *t == '\t')
        t++;
    while (*t && *t != ' ' && *t != '\t' && k < 31)
        mn[k++] = *t++;
    mn[k] = 0;
    return t;
}

/* The destination of an AT&T instruction (its last operand: "%al", "0x2c(%rsp)"); its
** mnemonic into mn. */
static const char *dest_operand(const char *t, char mn[32])
{
    const char *ops = mnemonic(t, mn), *last = strrchr(ops, ',');
    last = last ? last + 1 : ops;
    return last + strspn(last, " \t");
}

/* Is 'op' the destination of a condition computed in the loop closed by backward branch i:
** a setcc, or the and, or, xor, not of bytes? Then a "testb $1, op" that closes the loop
** tests a condition, not LLVM's run-twice flag. */
static int set_in_loop(const insn *v, int i, const char *op)
{
    for (int j = i - 1; j >= 0 && (int64_t)v[j].at >= v[i].target; j--) {
        char mn[32];
        if (strcmp(dest_operand(v[j].text, mn), op))
            continue;
        if (!strncmp(mn, "set", 3) || !strcmp(mn, "andb") || !strcmp(mn, "orb") ||
            !strcmp(mn, "xorb") || !strcmp(mn, "notb"))
            return 1;
    }
    return 0;
}

/* The lanes of x86 FMA 'mn' ("vfmadd231ps", AT&T operands 'ops'): the register's width
** over the element's ("ps" 32 bits, "pd" 64, "ph" 16); scalar ones ("ss", "sd") 1. */
static unsigned char x86_lanes(const char *mn, const char *ops)
{
    size_t n = strlen(mn);
    int bits = strstr(ops, "zmm") ? 512 : strstr(ops, "ymm") ? 256 : 128;
    if (n < 2 || mn[n - 2] == 's')
        return 1;
    return (unsigned char)(bits / (mn[n - 1] == 'd' ? 64 : mn[n - 1] == 'h' ? 16 : 32));
}

/* Class one instruction of 'size' bytes from its AT&T text. */
static void classify(const char *t, size_t size, insn *in)
{
    char mn[32];
    const char *ops = mnemonic(t, mn);
    int mem = strchr(ops, '(') != NULL, vec = strstr(ops, "mm") != NULL;
    memset(in->cls, 0, sizeof in->cls);
    in->lanes = 0;
    in->cls[K_ALL] = 1;
    in->cls[K_ZMM] = strstr(ops, "zmm") != NULL;
    if (!strncmp(mn, "vfmadd", 6) || !strncmp(mn, "vfnmadd", 7) || !strncmp(mn, "vfmsub", 6) ||
        !strncmp(mn, "vfnmsub", 7)) {
        in->cls[K_FMA] = 1;
        in->cls[K_MEMFMA] = (unsigned char)mem;
        in->lanes = x86_lanes(mn, ops);
    } else if (!strncmp(mn, "prefetch", 8)) {
        in->cls[K_PREF] = 1;
    } else if (!strncmp(mn, "vbroadcast", 10)) {
        in->cls[K_BCAST] = 1;
    } else if (vec && mem && !strncmp(mn, "vmov", 4)) {
        /* AT&T: the source comes first, so a store's memory operand is last */
        const char *par = strchr(ops, '('), *comma = strchr(ops, ',');
        if (comma && par < comma)
            in->cls[K_VLOAD] = 1;
        else
            in->cls[K_VSTORE] = 1;
    }
    in->cls[K_STACK] = mem && (strstr(ops, "(%rsp") || strstr(ops, "(%rbp"));
    in->target = -1;
    if (mn[0] == 'j') { /* a relative displacement, printed as a number */
        char *e;
        long long d = strtoll(ops, &e, 0);
        if (e != ops)
            in->target = (int64_t)(in->at + size) + d;
    }
}

/* The same for AArch64's text ("fmla v0.4s, v1.4s, v2.4s", "ldr q1, [x8, #16]", "b.ne #-24":
** a branch's displacement counts from the branch itself). */
static int a64_fp_reg(const char *op)
{
    while (*op == ' ' || *op == '\t' || *op == '{')
        op++;
    return strchr("qdshbv", op[0]) && op[0] && op[1] >= '0' && op[1] <= '9';
}

/* The lanes of an AArch64 FMA from its first operand: "v0.4s" 4 (the arrangement's count),
** SVE's "z0.s" at 128 bits (4; the vector length is the phone's), a scalar "s0" 1. */
static unsigned char a64_lanes(const char *ops)
{
    while (*ops == ' ' || *ops == '\t')
        ops++;
    const char *dot = strchr(ops, '.'), *comma = strchr(ops, ',');
    if (!dot || (comma && comma < dot))
        return 1;
    if (dot[1] >= '1' && dot[1] <= '9')
        return (unsigned char)atoi(dot + 1);
    return dot[1] == 'd' ? 2 : dot[1] == 'h' ? 8 : 4;
}

static void classify_a64(const char *t, insn *in)
{
    char mn[32];
    const char *ops = mnemonic(t, mn);
    int mem = strchr(ops, '[') != NULL, fp = a64_fp_reg(ops);
    memset(in->cls, 0, sizeof in->cls);
    in->lanes = 0;
    in->cls[K_ALL] = 1;
    for (const char *z = ops; (z = strchr(z, 'z')) != NULL; z++) /* SVE's z registers */
        if ((z == ops || z[-1] == ' ' || z[-1] == '{') && z[1] >= '0' && z[1] <= '9')
            in->cls[K_ZMM] = 1;
    if (!strcmp(mn, "fmadd") || !strcmp(mn, "fmsub") || !strcmp(mn, "fnmadd") ||
        !strcmp(mn, "fnmsub") || !strcmp(mn, "fmla") || !strcmp(mn, "fmls")) {
        in->cls[K_FMA] = 1;
        in->lanes = a64_lanes(ops);
    } else if (!strcmp(mn, "prfm") || !strcmp(mn, "prfum")) {
        in->cls[K_PREF] = 1;
    } else if (!strncmp(mn, "ld1r", 4) || !strcmp(mn, "dup")) {
        in->cls[K_BCAST] = 1;
    } else if (mem && fp && (!strncmp(mn, "ldr", 3) || !strncmp(mn, "ldp", 3) ||
                             !strncmp(mn, "ldur", 4) || (!strncmp(mn, "ld", 2) && mn[2] >= '1' &&
                                                         mn[2] <= '4'))) {
        in->cls[K_VLOAD] = 1;
    } else if (mem && fp && (!strncmp(mn, "str", 3) || !strncmp(mn, "stp", 3) ||
                             !strncmp(mn, "stur", 4) || (!strncmp(mn, "st", 2) && mn[2] >= '1' &&
                                                         mn[2] <= '4'))) {
        in->cls[K_VSTORE] = 1;
    }
    in->cls[K_STACK] = mem && (strstr(ops, "[sp") || strstr(ops, "[x29"));
    in->target = -1;
    if (!strcmp(mn, "b") || !strncmp(mn, "b.", 2) || !strcmp(mn, "cbz") || !strcmp(mn, "cbnz") ||
        !strcmp(mn, "tbz") || !strcmp(mn, "tbnz")) {
        const char *h = strrchr(ops, '#');
        char *e;
        long long d = h ? strtoll(h + 1, &e, 0) : 0;
        if (h && e != h + 1)
            in->target = (int64_t)in->at + d;
    }
}

/* A parallel loop's task function ("at_kernel_task<k>_x<extent>", kn_llvm.c): its range in
** the section and the loop's extent. */
typedef struct par_fn {
    uint64_t lo, hi;
    double extent;
} par_fn;
#define CODE_MAX_PAR 64

static int is_loop(const insn *v, int i)
{
    return v[i].target >= 0 && v[i].target <= (int64_t)v[i].at;
}

/* Two of AArch64's registers are one when their numbers are ("w8" and "x8"). */
static int a64_same(const char *a, const char *b)
{
    return a[0] && b[0] && !strcmp(a + 1, b + 1);
}

/* AArch64: "cmp xR, #N" just before the branch and "add xR, xR, #s" in the loop, or
** "subs xR, xR, #s" just before it and "mov xR, #N" before the loop; else 0 (unread). */
static double trip_count_a64(const insn *v, int i)
{
    long long n, st;
    char reg[16], r1[16], r2[16];
    for (int b = i - 1; b >= 0 && b >= i - 2; b--) {
        if (sscanf(v[b].text, " cmp %15[a-z0-9], #%lld", reg, &n) == 2) {
            for (int j = b - 1; j >= 0 && (int64_t)v[j].at >= v[i].target; j--)
                if (sscanf(v[j].text, " add %15[a-z0-9], %15[a-z0-9], #%lld", r1, r2, &st) == 3 &&
                    a64_same(r1, reg) && a64_same(r2, reg) && st > 0)
                    return n / (double)st < 1 ? 1 : n / (double)st;
            break;
        }
    }
    if (i > 0 &&
        sscanf(v[i - 1].text, " subs %15[a-z0-9], %15[a-z0-9], #%lld", reg, r2, &st) == 3 &&
        a64_same(reg, r2) && st > 0)
        for (int j = i - 2; j >= 0 && j >= i - 400; j--) {
            if ((int64_t)v[j].at >= v[i].target)
                continue;
            if (sscanf(v[j].text, " mov %15[a-z0-9], #%lld", r1, &n) == 2 && a64_same(r1, reg) &&
                n > 0)
                return n / (double)st < 1 ? 1 : n / (double)st;
            if ((int64_t)v[j].at < v[i].target - 64)
                break;
        }
    return 0;
}

/* The instruction whose flags branch i tests: the last one before it in its loop that sets
** them, past the vector arithmetic, loads, stores, prefetches, moves and lea that LLVM
** schedules between a counter's add and its branch (a matmul's sixteen FMAs); -1: none
** within 64. */
static int flags_from(const insn *v, int i)
{
    for (int j = i - 1; j >= 0 && j >= i - 64 && (int64_t)v[j].at >= v[i].target; j--) {
        char mn[32];
        mnemonic(v[j].text, mn);
        if ((mn[0] == 'v' && strncmp(mn, "vptest", 6) && strncmp(mn, "vtest", 5) &&
             strncmp(mn, "vcomis", 6) && strncmp(mn, "vucomis", 7)) ||
            !strncmp(mn, "prefetch", 8) || !strncmp(mn, "mov", 3) || !strncmp(mn, "lea", 3) ||
            !strncmp(mn, "nop", 3))
            continue;
        return j;
    }
    return -1;
}

/* The trip count of the loop closed by backward branch i: "cmp $N, %r" setting its flags
** (flags_from) and "add $s, %r" / "inc %r" in the loop (a counter from 0), or "add $s, %r"
** setting them and "mov $-N, %r" before the loop (a counter from -N up to 0); a loop LLVM
** runs twice on a flag ("movb $1, %al" before it, "testb $1, FLAG; jne" closing it, the
** flag maybe in a stack slot and up to eight moves between) 2; else 0 (unread). */
static double trip_count(const insn *v, int i)
{
    /* twice on a flag: "testb $1, FLAG" (a register or its stack slot, not a condition the
    ** loop computes), then only moves, then "jne" */
    char jmn[32];
    mnemonic(v[i].text, jmn);
    for (int b = i - 1; b >= 0 && b >= i - 9 && !strcmp(jmn, "jne"); b--) {
        char mn[32], op[48];
        long long imm;
        mnemonic(v[b].text, mn);
        if (sscanf(v[b].text, " testb $%lli, %47s", &imm, op) == 2) {
            if (imm == 1 && !set_in_loop(v, i, op))
                return 2;
            break;
        }
        if (strncmp(mn, "mov", 3))
            break;
    }
    int b = flags_from(v, i);
    long long n, st;
    char reg[16], r2[16];
    if (b < 0)
        return 0;
    if (sscanf(v[b].text, " cmp%*c $%lld, %%%15[a-z0-9]", &n, reg) == 2) {
        for (int j = b - 1; j >= 0 && (int64_t)v[j].at >= v[i].target; j--) {
            if (sscanf(v[j].text, " add%*c $%lld, %%%15[a-z0-9]", &st, r2) == 2 &&
                !strcmp(r2, reg) && st > 0)
                return n / (double)st < 1 ? 1 : n / (double)st;
            if (sscanf(v[j].text, " inc%*c %%%15[a-z0-9]", r2) == 1 && !strcmp(r2, reg))
                return n < 1 ? 1 : (double)n;
        }
        return 0;
    }
    if (sscanf(v[b].text, " add%*c $%lld, %%%15[a-z0-9]", &st, reg) == 2 && st > 0)
        for (int j = b - 1; j >= 0 && j >= i - 400; j--) {
            char mn[32], dst[20];
            if ((int64_t)v[j].at >= v[i].target)
                continue;
            if ((int64_t)v[j].at < v[i].target - 512)
                break;
            if (sscanf(v[j].text, " mov%*c $%lld, %%%15[a-z0-9]", &n, r2) == 2 && n < 0 &&
                !strcmp(r2, reg))
                return -n / (double)st < 1 ? 1 : -n / (double)st;
            /* before the loop, another write of the counter: not a count from -N */
            snprintf(dst, sizeof dst, "%%%s", reg);
            if (!strcmp(dest_operand(v[j].text, mn), dst))
                break;
        }
    return 0;
}

/* raw[]'s layout: the innermost loops' counts, the dynamic ones, the cycle estimate, the
** counts per loop depth, four about the loops and the code, the hot loop's ten */
enum {
    R_IN = 0,
    R_EX = K_N,
    R_CYC = 2 * K_N,
    R_DEPTH,
    R_LOOPS = R_DEPTH + CODE_DEPTHS * K_N,
    R_MAXD,
    R_BYTES,
    R_DEFAULT,
    R_HOT,
    R_N = R_HOT + 10,
    R_EX_LANES = R_N, /* beyond the raw columns: the dynamic FMA lanes, the hot loop's lanes */
    R_HOT_LANES,
    R_ALL
};
_Static_assert(R_N == CM_CODE_EX_LANES - CM_CODE_IN_ALL, "cm_code_run's raw columns");
_Static_assert(CM_CODE_CYCLE_EST - CM_CODE_IN_ALL == R_CYC &&
                   CM_CODE_D0_ALL - CM_CODE_IN_ALL == R_DEPTH &&
                   CM_CODE_LOOPS - CM_CODE_IN_ALL == R_LOOPS &&
                   CM_CODE_DEFAULT_TRIPS - CM_CODE_IN_ALL == R_DEFAULT &&
                   CM_CODE_HOT_FMAS - CM_CODE_IN_ALL == R_HOT,
               "raw[] in group 11's order");

/* Does loop i (a backward branch) contain instruction j? */
static int loop_has(const insn *v, int i, int j)
{
    return (int64_t)v[j].at >= v[i].target && v[j].at <= v[i].at;
}

/* The trip counts of the loops of task function 'p' that the code hides: the unread loops
** around every loop read in it (the chunk claims and the chunk, whose bounds come from the
** work-stealing counters) run the parallel loop's extent in all, spread evenly over them. */
static void par_trips(insn *v, int ni, const par_fn *p)
{
    int around[64], n_around = 0, n_read = 0;
    for (int i = 0; i < ni && n_around < 64; i++) {
        if (!is_loop(v, i) || v[i].trip > 0 || v[i].at < p->lo || v[i].at >= p->hi)
            continue;
        int all = 1;
        for (int j = 0; j < ni && all; j++)
            if (is_loop(v, j) && v[j].trip > 0 && v[j].at >= p->lo && v[j].at < p->hi)
                all = loop_has(v, i, j) && (int64_t)v[j].target >= v[i].target;
        if (all)
            around[n_around++] = i;
    }
    for (int j = 0; j < ni; j++)
        n_read += is_loop(v, j) && v[j].trip > 0 && v[j].at >= p->lo && v[j].at < p->hi;
    if (!n_read || !n_around)
        return;
    double t = pow(p->extent, 1.0 / n_around);
    for (int k = 0; k < n_around; k++)
        v[around[k]].trip = t < 1 ? 1 : t;
}

/* The vector register instruction 'in' writes (0 to CODE_N_REGS - 1; x86: its last operand,
** "%ymm17 {%k1}" 17; AArch64: its first, "v3.4s", "q3", "s3" 3), or -1: none or another. */
static int dest_reg(const insn *in, int a64)
{
    char mn[32];
    const char *op;
    long n;
    if (a64) {
        op = mnemonic(in->text, mn);
        if (in->cls[K_VSTORE] || !strncmp(mn, "st", 2) || !strncmp(mn, "fcmp", 4))
            return -1; /* their first operand is read */
        while (*op == ' ' || *op == '\t')
            op++;
        if (!strchr("vqdshb", op[0]) || !op[0] || op[1] < '0' || op[1] > '9')
            return -1;
        op++;
    } else {
        op = dest_operand(in->text, mn);
        if (op[0] != '%' || !strchr("xyz", op[1]) || !op[1] || strncmp(op + 2, "mm", 2))
            return -1;
        op += 4;
    }
    n = strtol(op, NULL, 10);
    return n >= 0 && n < CODE_N_REGS ? (int)n : -1;
}

/* Is FMA 'in' an update of its destination (x86's three forms, AArch64's fmla and fmls all
** are; AArch64's fmadd d0, d1, d2, d3 only where d0 is d3)? */
static int fma_accumulates(const insn *in, int a64)
{
    char mn[32];
    const char *ops, *first, *last;
    if (!a64)
        return 1;
    ops = mnemonic(in->text, mn);
    if (!strcmp(mn, "fmla") || !strcmp(mn, "fmls"))
        return 1;
    first = ops + strspn(ops, " \t");
    last = strrchr(ops, ',');
    if (!last)
        return 0;
    last += 1 + strspn(last + 1, " \t");
    return strncmp(first, last, strcspn(first, ",")) == 0;
}

/* The cycles an iteration of the loop v[a0..i] (na instructions, 'trip' iterations) waits on
** its chains of dependent FMAs, at CODE_FMA_LATENCY cycles an FMA. A register that only FMAs
** write in the loop is an accumulator carried across its iterations: one chain of all its
** FMAs of all the iterations; one that something else writes (loaded or zeroed) starts
** again each time: its longest run of FMAs. Chains fewer than CODE_WINDOW instructions
** long run that many side by side (a run's chain beside the next iteration's, a loop's
** beside the next run of the loop), so a chain counts CODE_WINDOW / its instructions times
** less; the longest register's chain is the bound. */
static double fma_chain(const insn *v, int a0, int i, int a64, double na, double trip)
{
    int n[CODE_N_REGS] = {0}, run[CODE_N_REGS] = {0}, longest[CODE_N_REGS] = {0};
    unsigned char other[CODE_N_REGS] = {0};
    double most = 0;
    for (int j = a0; j <= i; j++) {
        int r = dest_reg(&v[j], a64);
        if (r < 0)
            continue;
        if (v[j].cls[K_FMA] && fma_accumulates(&v[j], a64)) {
            n[r]++;
            if (++run[r] > longest[r])
                longest[r] = run[r];
        } else {
            other[r] = 1;
            run[r] = 0;
        }
    }
    for (int r = 0; r < CODE_N_REGS; r++) {
        double fmas = other[r] ? longest[r] : n[r] * trip, insns = other[r] ? na : na * trip;
        double c = fmas * CODE_FMA_LATENCY / fmax(1, CODE_WINDOW / fmax(insns, 1));
        if (!other[r])
            c /= trip; /* an iteration's share */
        most = fmax(most, c);
    }
    return most;
}

/* Counts of one section's code ('bytes' long; its parallel loops' task functions par[0..np))
** added to raw[R_ALL]. */
static void analyse(insn *v, int ni, int a64, size_t bytes, const par_fn *par, int np,
                    int *inner, double *w, double *raw)
{
    double hot[11] = {0};
    memset(inner, 0, sizeof(int) * (size_t)ni);
    for (int j = 0; j < ni; j++) {
        w[j] = 1;
        v[j].depth = 0;
        v[j].trip = is_loop(v, j) ? (a64 ? trip_count_a64(v, j) : trip_count(v, j)) : 0;
    }
    for (int k = 0; k < np; k++)
        par_trips(v, ni, &par[k]);
    for (int i = 0; i < ni; i++) {
        if (!is_loop(v, i))
            continue;
        int contains_other = 0;
        for (int j = 0; j < ni && !contains_other; j++)
            contains_other = j != i && is_loop(v, j) && v[j].target >= v[i].target &&
                             v[j].at < v[i].at;
        raw[R_DEFAULT] += v[i].trip <= 0;
        if (v[i].trip <= 0) /* unread: 8 */
            v[i].trip = 8;
        double trip = v[i].trip;
        raw[R_LOOPS] += 1;
        for (int j = 0; j < ni; j++)
            if ((int64_t)v[j].at >= v[i].target && v[j].at <= v[i].at) {
                w[j] *= trip;
                if (w[j] > 1e30)
                    w[j] = 1e30;
                v[j].depth++;
                if (!contains_other)
                    inner[j] = 1;
            }
    }
    /* each innermost loop at the bound of its FMAs (2 a cycle), loads (3), stores (2),
    ** instructions (6) and its longest accumulator chain (fma_chain); the rest at 4
    ** instructions a cycle */
    double cyc = 0;
    for (int i = 0; i < ni; i++) {
        if (!is_loop(v, i))
            continue;
        int a0 = -1;
        for (int j = 0; j <= i; j++)
            if ((int64_t)v[j].at >= v[i].target) {
                if (!inner[j]) {
                    a0 = -1;
                    break;
                }
                if (a0 < 0)
                    a0 = j;
            }
        if (a0 < 0)
            continue;
        double nf = 0, nl = 0, ns = 0, na = 0, sk = 0, z = 0, bc = 0, ln = 0;
        for (int j = a0; j <= i; j++) {
            nf += v[j].cls[K_FMA];
            ln += v[j].lanes;
            na += 1;
            ns += v[j].cls[K_VSTORE];
            nl += v[j].cls[K_VLOAD] + v[j].cls[K_BCAST] + v[j].cls[K_MEMFMA];
            if (v[j].cls[K_STACK] && !v[j].cls[K_VSTORE] && !v[j].cls[K_VLOAD])
                nl += 1;
            sk += v[j].cls[K_STACK];
            z += v[j].cls[K_ZMM];
            bc += v[j].cls[K_BCAST];
            inner[j] = 2; /* counted in a loop's bound */
        }
        double b = fmax(fmax(nf / 2, nl / 3), fmax(ns / 2, na / 6));
        b = fmax(b, fma_chain(v, a0, i, a64, na, fmax(v[i].trip, 1)));
        cyc += b * w[i];
        if (nf > hot[0] || (nf == hot[0] && w[i] > hot[7])) { /* the hot loop: most FMAs */
            double h[11] = {nf, nl, ns, na, sk, z, bc, w[i], v[i].trip, nf > 0 ? b / nf : 0, ln};
            memcpy(hot, h, sizeof hot);
        }
    }
    int maxd = 0;
    for (int j = 0; j < ni; j++) {
        int d = v[j].depth < CODE_DEPTHS ? v[j].depth : CODE_DEPTHS - 1;
        maxd = v[j].depth > maxd ? v[j].depth : maxd;
        if (inner[j] != 2)
            cyc += w[j] / 4;
        for (int c = 0; c < K_N; c++) {
            raw[R_IN + c] += inner[j] ? v[j].cls[c] : 0;
            raw[R_EX + c] += w[j] * v[j].cls[c];
            raw[R_DEPTH + d * K_N + c] += v[j].cls[c];
        }
        raw[R_EX_LANES] += w[j] * v[j].lanes;
    }
    raw[R_CYC] += cyc;
    raw[R_MAXD] += maxd;
    raw[R_BYTES] += (double)bytes;
    for (int k = 0; k < 10; k++)
        raw[R_HOT + k] += hot[k];
    raw[R_HOT_LANES] += hot[10];
}

static pthread_once_t disasm_once = PTHREAD_ONCE_INIT;

static void disasm_init(void)
{
    LLVMInitializeX86TargetInfo();
    LLVMInitializeX86TargetMC();
    LLVMInitializeX86Disassembler();
    LLVMInitializeAArch64TargetInfo();
    LLVMInitializeAArch64TargetMC();
    LLVMInitializeAArch64Disassembler();
}

at_err cm_code_run(const kn_artifact *a, const kn_target *t, double out[CM_CODE_N],
                   char *errmsg, size_t errmsg_size)
{
    if (errmsg && errmsg_size)
        errmsg[0] = 0;
    for (int c = 0; c < CM_CODE_N; c++)
        out[c] = 0;
    if (!a || !t || !a->obj || !a->obj_size) {
        put_err(errmsg, errmsg_size, "%s", "cm_code_run: no object");
        return AT_EINVAL;
    }
    if (!t->is_x86 && !t->is_aarch64) {
        put_err(errmsg, errmsg_size,
                "cm_code_run: %s: only x86-64's and AArch64's code is read", t->triple);
        return AT_EINVAL;
    }
    pthread_once(&disasm_once, disasm_init); /* data sets load on several threads */
    at_err err = AT_OK;
    LLVMDisasmContextRef dc =
        LLVMCreateDisasmCPUFeatures(t->triple, t->cpu, t->features, NULL, 0, NULL, NULL);
    if (!dc) {
        put_err(errmsg, errmsg_size, "cm_code_run: no disassembler for %s", t->triple);
        return AT_EINVAL;
    }
    LLVMMemoryBufferRef mb =
        LLVMCreateMemoryBufferWithMemoryRange((const char *)a->obj, a->obj_size, "obj", 0);
    char *lerr = NULL;
    LLVMBinaryRef bin = mb ? LLVMCreateBinary(mb, NULL, &lerr) : NULL;
    if (!bin) {
        put_err(errmsg, errmsg_size, "cm_code_run: not an object: %s", lerr ? lerr : "?");
        if (lerr)
            LLVMDisposeMessage(lerr);
        if (mb)
            LLVMDisposeMemoryBuffer(mb);
        LLVMDisasmDispose(dc);
        return AT_EINVAL;
    }
    double raw[R_ALL] = {0};
    insn *v = NULL;
    int *inner = NULL;
    double *w = NULL;
    int cap = 0, n_text = 0;
    LLVMSectionIteratorRef si = LLVMObjectFileCopySectionIterator(bin);
    for (; err == AT_OK && !LLVMObjectFileIsSectionIteratorAtEnd(bin, si);
         LLVMMoveToNextSection(si)) {
        const char *nm = LLVMGetSectionName(si);
        if (!nm || strncmp(nm, ".text", 5))
            continue;
        const uint8_t *code = (const uint8_t *)LLVMGetSectionContents(si);
        size_t n = (size_t)LLVMGetSectionSize(si);
        int ni = 0;
        n_text++;
        for (size_t at = 0; at < n;) {
            char text[256];
            if (ni == CODE_MAX_INSNS) {
                put_err(errmsg, errmsg_size, "cm_code_run: %s: over 2^20 instructions", nm);
                err = AT_EINVAL;
                break;
            }
            if (ni == cap) {
                int nc = cap ? 2 * cap : 4096;
                insn *nv = realloc(v, sizeof *v * (size_t)nc);
                int *nin = nv ? realloc(inner, sizeof *inner * (size_t)nc) : NULL;
                double *nw = nin ? realloc(w, sizeof *w * (size_t)nc) : NULL;
                if (nv)
                    v = nv;
                if (nin)
                    inner = nin;
                if (!nw) {
                    put_err(errmsg, errmsg_size, "%s", "cm_code_run: out of memory");
                    err = AT_ENOMEM;
                    break;
                }
                w = nw;
                cap = nc;
            }
            size_t sz = LLVMDisasmInstruction(dc, (uint8_t *)code + at, n - at, at, text,
                                              sizeof text);
            if (!sz) { /* not an instruction: skip a byte (AArch64: a word) */
                at += t->is_aarch64 ? 4 : 1;
                continue;
            }
            v[ni].at = at;
            snprintf(v[ni].text, sizeof v[ni].text, "%.79s", text);
            if (t->is_aarch64)
                classify_a64(text, &v[ni]);
            else
                classify(text, sz, &v[ni]);
            ni++;
            at += sz;
        }
        par_fn par[CODE_MAX_PAR];
        int np = 0;
        LLVMSymbolIteratorRef sy = LLVMObjectFileCopySymbolIterator(bin);
        for (; sy && !LLVMObjectFileIsSymbolIteratorAtEnd(bin, sy); LLVMMoveToNextSymbol(sy)) {
            const char *sn = LLVMGetSymbolName(sy), *x;
            long long k, ext;
            if (np < CODE_MAX_PAR && sn && !strncmp(sn, "at_kernel_task", 14) &&
                (x = strstr(sn, "_x")) != NULL && sscanf(x + 2, "%lld", &ext) == 1 &&
                sscanf(sn + 14, "%lld", &k) == 1 && ext > 0 &&
                LLVMGetSectionContainsSymbol(si, sy)) {
                uint64_t lo = LLVMGetSymbolAddress(sy), sz = LLVMGetSymbolSize(sy);
                par[np++] = (par_fn){lo, sz ? lo + sz : (uint64_t)n, (double)ext};
            }
        }
        if (sy)
            LLVMDisposeSymbolIterator(sy);
        if (err == AT_OK && ni)
            analyse(v, ni, t->is_aarch64, n, par, np, inner, w, raw);
    }
    LLVMDisposeSectionIterator(si);
    LLVMDisposeBinary(bin);
    LLVMDisposeMemoryBuffer(mb);
    LLVMDisasmDispose(dc);
    free(v);
    free(inner);
    free(w);
    if (err != AT_OK)
        return err;
    if (!n_text) {
        put_err(errmsg, errmsg_size, "%s", "cm_code_run: the object has no code");
        return AT_EINVAL;
    }
    const double *in = raw, *dy = raw + K_N;
    double al = in[K_ALL], dal = dy[K_ALL];
    double ld = in[K_VLOAD] + in[K_BCAST] + in[K_MEMFMA];
    double dld = dy[K_VLOAD] + dy[K_BCAST] + dy[K_MEMFMA];
    out[CM_CODE_FMA_SHARE] = in[K_FMA] / fmax(al, 1);
    out[CM_CODE_STACK_SHARE] = in[K_STACK] / fmax(al, 1);
    out[CM_CODE_LOADS_PER_FMA] = ld / fmax(in[K_FMA], 1);
    out[CM_CODE_STORE_SHARE] = in[K_VSTORE] / fmax(al, 1);
    out[CM_CODE_ZMM_SHARE] = in[K_ZMM] / fmax(al, 1);
    out[CM_CODE_INSNS] = log2(1 + al);
    out[CM_CODE_FMAS] = log2(1 + in[K_FMA]);
    out[CM_CODE_DYN_FMA_SHARE] = dy[K_FMA] / fmax(dal, 1);
    out[CM_CODE_DYN_STACK_SHARE] = dy[K_STACK] / fmax(dal, 1);
    out[CM_CODE_DYN_LOADS_PER_FMA] = dld / fmax(dy[K_FMA], 1);
    out[CM_CODE_DYN_STORE_SHARE] = dy[K_VSTORE] / fmax(dal, 1);
    out[CM_CODE_DYN_ZMM_SHARE] = dy[K_ZMM] / fmax(dal, 1);
    out[CM_CODE_DYN_INSNS] = log2(1 + dal);
    out[CM_CODE_DYN_FMAS] = log2(1 + dy[K_FMA]);
    out[CM_CODE_DYN_STACK] = log2(1 + dy[K_STACK]);
    out[CM_CODE_DYN_LOADS] = log2(1 + dld);
    out[CM_CODE_CYCLES] = log2(1 + raw[R_CYC]);
    for (int k = 0; k < R_N; k++) /* the raw counts, in raw[]'s order */
        out[CM_CODE_IN_ALL + k] = raw[k];
    /* per FMA lane (version 8): the loops whose trip counts the code hides (the parallel
    ** driver's) multiply every dynamic count alike, so their ratios keep what they lose */
    double xl = raw[R_EX_LANES];
    if (dy[K_FMA] > 0 && xl > 0) {
        double hl = raw[R_HOT_LANES], hb = raw[R_HOT + 9] * raw[R_HOT];
        out[CM_CODE_EX_LANES] = xl;
        out[CM_CODE_FMA_WIDTH] = xl / dy[K_FMA];
        out[CM_CODE_LANE_CYCLES] = log2(1e-6 + raw[R_CYC] / xl);
        out[CM_CODE_LANE_LOADS] = log2(1e-6 + dld / xl);
        out[CM_CODE_LANE_STORES] = log2(1e-6 + dy[K_VSTORE] / xl);
        out[CM_CODE_LANE_STACK] = log2(1e-6 + dy[K_STACK] / xl);
        out[CM_CODE_HOT_LANE_CYCLES] = hl > 0 ? log2(1e-6 + hb / hl) : 0;
    }
    return AT_OK;
}

#endif /* AT_NO_LLVM */
