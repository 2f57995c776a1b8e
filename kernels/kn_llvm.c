/* kernels/kn_llvm.c -- LLVM-C code generation from loop IR.
**
** The kernel entry (the ABI of kernels_rt.h) loads the argument pointers and calls an
** internal noinline body function whose pointer parameters are noalias and 64-byte
** aligned.  Loops become rotated loops over an i64 induction variable.  Every access
** carries TBAA metadata with one type node per buffer, so distinct buffers never alias,
** also inside parallel task functions where the pointers come from a closure.
**
**   parallel   the loop becomes a task function (closure, task, n_tasks) launched through
**              par->launch: it claims chunks of iterations (about 4 per task), those of its
**              own block of chunks first, from counters in the closure until none is left,
**              so the tasks that run cover the loop however many run (a late thread is not
**              waited for: kernels_rt.h) and each runs the same part every launch; its
**              temporaries live in the task's frame or its slice of the workspace
**   vectorize  the body is emitted once with the loop variable as the lane vector
**              <0, 1, ..., L-1>: an index with coefficient 1 on it becomes one vector
**              load/store, coefficient 0 a scalar, anything else per-lane accesses.
**              A body that cannot be vectorized (a guard on the lane, an inner parallel
**              or vectorized loop) is emitted as a serial loop instead
**   unroll     the body is emitted 'extent' times with the variable as a constant; inside a
**              stage with auto_unroll_max_step N, serial loops whose unrolled size
**              (statements x extent) stays within N are unrolled too
** Integer arithmetic of the IR (indices and int32 values) is done in i64; int32 buffers
** are truncated on store and sign-extended on load.  a*b+c on floats is llvm.fmuladd. */
#include "kernels_int.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <llvm/Config/llvm-config.h>
#include <stdio.h>
#include <math.h>
#include <string.h>

#define STACK_LIMIT (32 * 1024) /* temporaries up to this size live on the stack */
#define CLAIM_BLOCKS 16         /* a parallel loop's chunk counters (emit_parallel) */

typedef struct val {
    LLVMValueRef v;
    int vec; /* 1: a vector of 'lanes' elements */
} val;

#define KN_LLVM_MAX_LOOPS 64

typedef struct cg {
    LLVMContextRef ctx;
    LLVMModuleRef mod;
    LLVMBuilderRef b;
    LLVMTypeRef i1, i8, i32, i64, f32, f64, ptr, vd;
    const kn_ir *ir;
    const kn_target *tgt;
    LLVMValueRef fn;
    LLVMValueRef *var;      /* value of each loop variable in the current function */
    LLVMValueRef *buf;      /* pointer of each buffer in the current function */
    int vec_var, lanes;     /* the vectorized loop variable, its lane count (0: none) */
    int vec_zero;           /* emit the vector variable as its first lane (base address) */
    int64_t vec_base;       /* the first lane's value (emit_stmt: a long reduction update
                            ** vectorized as register-wide pieces) */
    LLVMValueRef ws, par;   /* workspace and kn_rt_par pointers in the current function */
    LLVMValueRef status;    /* i32 alloca: first failing launch result */
    int64_t *buf_off;       /* workspace offset of each large temporary */
    int64_t ws_fixed, ws_per_thread;
    LLVMValueRef *tbaa;     /* access tag per buffer */
    unsigned tbaa_kind;
    int n_tasks_fn;
    int in_pre;             /* emitting the pre-transform of rewritten weights */
    /* the loops around the statement being emitted, outermost first (rolled, copied out
    ** and a parallel task's chunk loop): where the prefetches look for the next panel */
    const kn_stmt *loops[KN_LLVM_MAX_LOOPS];
    int n_loops;
    /* scalar index arithmetic emitted so far in the current block (ibin): an unrolled body
    ** repeats the same terms in every statement */
    struct memo {
        int op;
        unsigned gen;       /* the slot holds a value iff gen == memo_gen */
        LLVMValueRef a, b, r;
    } *memo;
    int n_memo;
    unsigned memo_gen;
    LLVMBasicBlockRef memo_bb;
    char *errmsg;
    size_t errmsg_size;
    at_err err;
} cg;

static void cfail(cg *c, at_err err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void cfail(cg *c, at_err err, const char *fmt, ...)
{
    va_list ap;
    if (c->err)
        return;
    c->err = err;
    if (c->errmsg && c->errmsg_size) {
        va_start(ap, fmt);
        vsnprintf(c->errmsg, c->errmsg_size, fmt, ap);
        va_end(ap);
    }
}

/* ---- types and constants ---- */

static LLVMTypeRef elem_type(cg *c, at_dtype dt)
{
    switch (dt) {
    case AT_DT_F32: return c->f32;
    case AT_DT_F64: return c->f64;
    case AT_DT_I32: return c->i32;
    case AT_DT_I64: return c->i64;
    case AT_DT_I8:
    case AT_DT_BOOL: return c->i8;
    default: return c->f32;
    }
}

/* Register type of a value of dtype 'dt' (ints are i64, bools i1). */
static LLVMTypeRef reg_type(cg *c, at_dtype dt)
{
    if (dt == AT_DT_BOOL)
        return c->i1;
    if (at_dtype_is_float(dt))
        return dt == AT_DT_F64 ? c->f64 : c->f32;
    return c->i64;
}

static LLVMValueRef ci64(cg *c, int64_t v)
{
    return LLVMConstInt(c->i64, (unsigned long long)v, 1);
}

static LLVMValueRef ci32(cg *c, int64_t v)
{
    return LLVMConstInt(c->i32, (unsigned long long)v, 1);
}

static LLVMValueRef splat(cg *c, LLVMValueRef s)
{
    LLVMTypeRef vt = LLVMVectorType(LLVMTypeOf(s), (unsigned)c->lanes);
    LLVMValueRef undef = LLVMGetUndef(vt);
    LLVMValueRef ins = LLVMBuildInsertElement(c->b, undef, s, ci32(c, 0), "");
    LLVMValueRef zero = LLVMConstNull(LLVMVectorType(c->i32, (unsigned)c->lanes));
    return LLVMBuildShuffleVector(c->b, ins, undef, zero, "");
}

static void widen(cg *c, val *a, val *b)
{
    if (a->vec && !b->vec) {
        b->v = splat(c, b->v);
        b->vec = 1;
    } else if (b->vec && !a->vec) {
        a->v = splat(c, a->v);
        a->vec = 1;
    }
}

/* Scalar i64 arithmetic with the identities folded (x + 0, x * 1, x * 0, x / 1) and each
** (op, a, b) built once per basic block: our unrolled bodies index every statement with the
** same sum of loop-invariant terms, which LLVM would otherwise receive tens of thousands of
** times (a Winograd input transform: 31k lines of IR, 3.3k after optimisation) and spend
** its first passes folding.  Only values of the current block are reused, so each dominates
** its new use. */
#define MEMO_SLOTS 4096
enum { IB_ADD, IB_SUB, IB_MUL, IB_DIV, IB_MOD };
static LLVMValueRef ibin(cg *c, int op, LLVMValueRef a, LLVMValueRef b)
{
    int ca = LLVMIsAConstantInt(a) != NULL, cb = LLVMIsAConstantInt(b) != NULL;
    long long ka = ca ? LLVMConstIntGetSExtValue(a) : 0, kb = cb ? LLVMConstIntGetSExtValue(b) : 0;
    LLVMBasicBlockRef bb = LLVMGetInsertBlock(c->b);
    LLVMValueRef r;
    uintptr_t h;
    struct memo *m = NULL;
    if (op == IB_ADD && ca && ka == 0) return b;
    if ((op == IB_ADD || op == IB_SUB) && cb && kb == 0) return a;
    if (op == IB_MUL && ((ca && ka == 0) || (cb && kb == 1))) return a;
    if (op == IB_MUL && ((cb && kb == 0) || (ca && ka == 1))) return b;
    if (op == IB_DIV && cb && kb == 1) return a;
    if (op == IB_MOD && cb && kb == 1) return ci64(c, 0);
    if (!(ca && cb)) {
        if (c->memo == NULL) {
            c->memo = at_calloc(MEMO_SLOTS, sizeof *c->memo);
            if (c->memo == NULL) {
                cfail(c, AT_ENOMEM, "out of memory");
                return a;
            }
        }
        if (bb != c->memo_bb || c->n_memo >= MEMO_SLOTS / 2) {
            /* a new generation empties every slot at once (blocks change at every loop) */
            if (++c->memo_gen == 0) {
                memset(c->memo, 0, MEMO_SLOTS * sizeof *c->memo);
                c->memo_gen = 1;
            }
            c->n_memo = 0;
            c->memo_bb = bb;
        }
        h = ((uintptr_t)a * 31u + (uintptr_t)b) * 2654435761u + (uintptr_t)op;
        for (h = (h ^ (h >> 15)) & (MEMO_SLOTS - 1);; h = (h + 1) & (MEMO_SLOTS - 1)) {
            m = &c->memo[h];
            if (m->gen != c->memo_gen)
                break;
            if (m->op == op && m->a == a && m->b == b)
                return m->r;
        }
    }
    switch (op) {
    case IB_ADD: r = LLVMBuildNSWAdd(c->b, a, b, ""); break;
    case IB_SUB: r = LLVMBuildNSWSub(c->b, a, b, ""); break;
    case IB_MUL: r = LLVMBuildNSWMul(c->b, a, b, ""); break;
    case IB_DIV: r = LLVMBuildSDiv(c->b, a, b, ""); break;
    default: r = LLVMBuildSRem(c->b, a, b, ""); break;
    }
    if (m) {
        m->op = op, m->gen = c->memo_gen, m->a = a, m->b = b, m->r = r;
        c->n_memo++;
    }
    return r;
}

static int is_i64(cg *c, LLVMValueRef a, LLVMValueRef b)
{
    return LLVMTypeOf(a) == c->i64 && LLVMTypeOf(b) == c->i64;
}

static LLVMTypeRef maybe_vec(cg *c, LLVMTypeRef t, int vec)
{
    return vec ? LLVMVectorType(t, (unsigned)c->lanes) : t;
}

static LLVMValueRef intrinsic(cg *c, const char *name, LLVMTypeRef t, LLVMValueRef *args, int n)
{
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    LLVMTypeRef tys[1] = {t};
    LLVMValueRef f = LLVMGetIntrinsicDeclaration(c->mod, id, tys, 1);
    LLVMTypeRef ft = LLVMIntrinsicGetType(c->ctx, id, tys, 1);
    return LLVMBuildCall2(c->b, ft, f, args, (unsigned)n, "");
}

/* A libm function applied lane by lane ("tanhf", ...). */
static LLVMValueRef libcall(cg *c, const char *name, LLVMTypeRef t, val x)
{
    LLVMValueRef f = LLVMGetNamedFunction(c->mod, name), r;
    LLVMTypeRef ft = LLVMFunctionType(t, &t, 1, 0);
    if (f == NULL) {
        f = LLVMAddFunction(c->mod, name, ft);
        LLVMSetLinkage(f, LLVMExternalLinkage);
    }
    if (!x.vec)
        return LLVMBuildCall2(c->b, ft, f, &x.v, 1, "");
    r = LLVMGetUndef(LLVMTypeOf(x.v));
    for (int l = 0; l < c->lanes; l++) {
        LLVMValueRef e = LLVMBuildExtractElement(c->b, x.v, ci32(c, l), "");
        e = LLVMBuildCall2(c->b, ft, f, &e, 1, "");
        r = LLVMBuildInsertElement(c->b, r, e, ci32(c, l), "");
    }
    return r;
}

/* ---- float32 exp, erf and tanh as straight-line code ----
**
** llvm.exp and libm's erff/tanhf are calls lane by lane (LLVM scalarizes vector exp): a
** softmax or a GELU spent most of its time in them.  These are the usual polynomial forms,
** written once for a scalar or a vector of floats, so they vectorize with the loop:
**   exp   Cephes' expf: x = n ln2 + r (ln2 in two parts), e^r by a degree-6 polynomial,
**         2^n put into the exponent bits (as 2^n1 2^n2, so that subnormal results and the
**         overflow round as IEEE says); about 1 ulp
**   erf   x clamped to [-4, 4] (erf is +-1 in float beyond), odd rational x P(x^2)/Q(x^2)
**         of degrees 13/8 (the form of TensorFlow's and Eigen's fast erf), about 2 ulp
**   tanh  1 - 2 / (e^2x + 1), and x - x^3/3 where |x| < 0.04 (no cancellation near 0)
** The naive reference and every tuned kernel share them, so they agree to the bit. */

static LLVMValueRef fconst(cg *c, LLVMTypeRef t, double v)
{
    LLVMValueRef k = LLVMConstReal(c->f32, v);
    return LLVMGetTypeKind(t) == LLVMVectorTypeKind ? splat(c, k) : k;
}

static LLVMValueRef iconst32(cg *c, LLVMTypeRef t, int64_t v)
{
    LLVMValueRef k = ci32(c, v);
    return LLVMGetTypeKind(t) == LLVMVectorTypeKind ? splat(c, k) : k;
}

/* a * b + c */
static LLVMValueRef fma3(cg *c, LLVMValueRef a, LLVMValueRef b, LLVMValueRef d)
{
    LLVMValueRef args[3] = {a, b, d};
    return intrinsic(c, "llvm.fmuladd", LLVMTypeOf(a), args, 3);
}

static LLVMValueRef fsel(cg *c, LLVMRealPredicate p, LLVMValueRef a, LLVMValueRef b,
                         LLVMValueRef t, LLVMValueRef f)
{
    return LLVMBuildSelect(c->b, LLVMBuildFCmp(c->b, p, a, b, ""), t, f, "");
}

static LLVMValueRef exp_f32(cg *c, LLVMValueRef x)
{
    LLVMTypeRef t = LLVMTypeOf(x);
    int vec = LLVMGetTypeKind(t) == LLVMVectorTypeKind;
    LLVMTypeRef it = vec ? LLVMVectorType(c->i32, (unsigned)c->lanes) : c->i32;
    static const double p[6] = {1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
                                4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1};
    LLVMValueRef xc, fx, r, y, n, n1, n2, s1, s2, res;
    /* e^x = e^r 2^n, n in [-150, 128]: 2^n as 2^n1 2^n2, both normal floats, so the
    ** products round into subnormals and overflow as IEEE says */
    xc = fsel(c, LLVMRealOLT, x, fconst(c, t, -103.9), fconst(c, t, -103.9), x);
    xc = fsel(c, LLVMRealOGT, xc, fconst(c, t, 88.8), fconst(c, t, 88.8), xc);
    fx = fma3(c, xc, fconst(c, t, 1.44269504088896341), fconst(c, t, 0.5));
    fx = intrinsic(c, "llvm.floor", t, &fx, 1);
    r = fma3(c, fx, fconst(c, t, -0.693359375), xc);
    r = fma3(c, fx, fconst(c, t, 2.12194440e-4), r);
    y = fconst(c, t, p[0]);
    for (int i = 1; i < 6; i++)
        y = fma3(c, y, r, fconst(c, t, p[i]));
    y = fma3(c, y, LLVMBuildFMul(c->b, r, r, ""), r);
    y = LLVMBuildFAdd(c->b, y, fconst(c, t, 1.0), "");
    n = LLVMBuildFPToSI(c->b, fx, it, "");
    n1 = LLVMBuildAShr(c->b, n, iconst32(c, it, 1), "");
    n2 = LLVMBuildSub(c->b, n, n1, "");
    s1 = LLVMBuildBitCast(c->b, LLVMBuildShl(c->b, LLVMBuildAdd(c->b, n1, iconst32(c, it, 127), ""),
                                             iconst32(c, it, 23), ""), t, "");
    s2 = LLVMBuildBitCast(c->b, LLVMBuildShl(c->b, LLVMBuildAdd(c->b, n2, iconst32(c, it, 127), ""),
                                             iconst32(c, it, 23), ""), t, "");
    res = LLVMBuildFMul(c->b, LLVMBuildFMul(c->b, y, s1, ""), s2, "");
    res = fsel(c, LLVMRealOLT, x, fconst(c, t, -103.9), fconst(c, t, 0.0), res);
    res = fsel(c, LLVMRealOGT, x, fconst(c, t, 88.8), fconst(c, t, INFINITY), res);
    return res;
}

static LLVMValueRef erf_f32(cg *c, LLVMValueRef x)
{
    LLVMTypeRef t = LLVMTypeOf(x);
    static const double a[7] = {-2.72614225801306e-10, 2.77068142495902e-08,
                                -2.10102402082508e-06, -5.69250639462346e-05,
                                -7.34990630326855e-04, -2.95459980854025e-03,
                                -1.60960333262415e-02};
    static const double b[5] = {-1.45660718464996e-05, -2.13374055278905e-04,
                                -1.68282697438203e-03, -7.37332916720468e-03,
                                -1.42647390514189e-02};
    LLVMValueRef xc, x2, pn, qd;
    xc = fsel(c, LLVMRealOLT, x, fconst(c, t, -4.0), fconst(c, t, -4.0), x);
    xc = fsel(c, LLVMRealOGT, xc, fconst(c, t, 4.0), fconst(c, t, 4.0), xc);
    x2 = LLVMBuildFMul(c->b, xc, xc, "");
    pn = fconst(c, t, a[0]);
    for (int i = 1; i < 7; i++)
        pn = fma3(c, x2, pn, fconst(c, t, a[i]));
    pn = LLVMBuildFMul(c->b, xc, pn, "");
    qd = fconst(c, t, b[0]);
    for (int i = 1; i < 5; i++)
        qd = fma3(c, x2, qd, fconst(c, t, b[i]));
    return LLVMBuildFDiv(c->b, pn, qd, "");
}

static LLVMValueRef tanh_f32(cg *c, LLVMValueRef x)
{
    LLVMTypeRef t = LLVMTypeOf(x);
    LLVMValueRef e, big, small, ax;
    e = exp_f32(c, LLVMBuildFMul(c->b, x, fconst(c, t, 2.0), ""));
    big = LLVMBuildFSub(c->b, fconst(c, t, 1.0),
                        LLVMBuildFDiv(c->b, fconst(c, t, 2.0),
                                      LLVMBuildFAdd(c->b, e, fconst(c, t, 1.0), ""), ""), "");
    small = fma3(c, LLVMBuildFMul(c->b, LLVMBuildFMul(c->b, x, x, ""), x, ""),
                 fconst(c, t, -1.0 / 3.0), x);
    ax = intrinsic(c, "llvm.fabs", t, &x, 1);
    return fsel(c, LLVMRealOLT, ax, fconst(c, t, 0.04), small, big);
}

/* ---- expressions ---- */

static val emit(cg *c, const ss_expr *e);

static ss_var_ranges var_ranges(cg *c, int64_t *lo, int64_t *hi)
{
    ss_var_ranges r = {c->ir->n_vars, lo, hi};
    for (int i = 0; i < c->ir->n_vars; i++) {
        lo[i] = 0;
        hi[i] = c->ir->vars[i].extent - 1;
    }
    return r;
}

static int nonneg(cg *c, const ss_expr *e)
{
    int64_t lo, hi, *los, *his;
    int ok;
    ss_var_ranges r;
    los = at_malloc((size_t)(c->ir->n_vars + 1) * 2 * sizeof *los);
    if (los == NULL)
        return 0;
    his = los + c->ir->n_vars + 1;
    r = var_ranges(c, los, his);
    ok = ss_expr_bounds(e, &r, &lo, &hi) && lo >= 0;
    at_free(los);
    return ok;
}

static LLVMValueRef tbaa_tag(cg *c, int buf)
{
    return c->tbaa[buf];
}

static void set_tbaa(cg *c, LLVMValueRef inst, int buf)
{
    LLVMSetMetadata(inst, c->tbaa_kind, tbaa_tag(c, buf));
}

/* Pointer to element 'idx' (scalar i64) of buffer 'b'. */
static LLVMValueRef elem_ptr(cg *c, int b, LLVMValueRef idx)
{
    LLVMTypeRef et = elem_type(c, c->ir->bufs[b].dtype);
    return LLVMBuildInBoundsGEP2(c->b, et, c->buf[b], &idx, 1, "");
}

static LLVMValueRef to_reg(cg *c, LLVMValueRef v, at_dtype dt, int vec)
{
    if (dt == AT_DT_I32 || dt == AT_DT_I8)
        return LLVMBuildSExt(c->b, v, maybe_vec(c, c->i64, vec), "");
    if (dt == AT_DT_BOOL)
        return LLVMBuildTrunc(c->b, v, maybe_vec(c, c->i1, vec), "");
    return v;
}

static LLVMValueRef from_reg(cg *c, LLVMValueRef v, at_dtype dt, int vec)
{
    if (dt == AT_DT_I32 || dt == AT_DT_I8 || dt == AT_DT_BOOL)
        return LLVMBuildTrunc(c->b, v, maybe_vec(c, elem_type(c, dt), vec), "");
    return v;
}

static unsigned align_of(cg *c, int b, const ss_expr *idx)
{
    /* a contiguous vector access is aligned to its element size only; buffers are 64-byte
    ** aligned but the index may be anything */
    (void)idx;
    return (unsigned)at_dtype_bytes(c->ir->bufs[b].dtype);
}

/* The index as a scalar with the vector variable at 0 (base of a contiguous access). */
static LLVMValueRef emit_base_index(cg *c, const ss_expr *idx)
{
    val v;
    int saved = c->vec_zero;
    c->vec_zero = 1;
    v = emit(c, idx);
    c->vec_zero = saved;
    return v.v;
}

static val emit_load(cg *c, const ss_expr *e)
{
    int b = e->id;
    at_dtype dt = c->ir->bufs[b].dtype;
    LLVMTypeRef et = elem_type(c, dt);
    int64_t coef = 0;
    val r = {NULL, 0};
    if (c->lanes && !ss_expr_linear_in(e->a[0], c->vec_var, &coef))
        coef = -1;
    if (c->lanes == 0 || coef == 0) {
        LLVMValueRef p = elem_ptr(c, b, emit(c, e->a[0]).v);
        LLVMValueRef ld = LLVMBuildLoad2(c->b, et, p, "");
        set_tbaa(c, ld, b);
        r.v = to_reg(c, ld, dt, 0);
        return r;
    }
    if (coef == 1) {
        LLVMValueRef p = elem_ptr(c, b, emit_base_index(c, e->a[0]));
        LLVMValueRef ld = LLVMBuildLoad2(c->b, LLVMVectorType(et, (unsigned)c->lanes), p, "");
        LLVMSetAlignment(ld, align_of(c, b, e->a[0]));
        set_tbaa(c, ld, b);
        r.v = to_reg(c, ld, dt, 1);
        r.vec = 1;
        return r;
    }
    /* per-lane loads */
    {
        val idx = emit(c, e->a[0]);
        LLVMValueRef acc = LLVMGetUndef(LLVMVectorType(et, (unsigned)c->lanes));
        for (int l = 0; l < c->lanes; l++) {
            LLVMValueRef li = idx.vec ? LLVMBuildExtractElement(c->b, idx.v, ci32(c, l), "")
                                      : idx.v;
            LLVMValueRef ld = LLVMBuildLoad2(c->b, et, elem_ptr(c, b, li), "");
            set_tbaa(c, ld, b);
            acc = LLVMBuildInsertElement(c->b, acc, ld, ci32(c, l), "");
        }
        r.v = to_reg(c, acc, dt, 1);
        r.vec = 1;
        return r;
    }
}

static LLVMValueRef floordiv(cg *c, const ss_expr *e, LLVMValueRef a, LLVMValueRef b, int vec,
                             int is_mod)
{
    LLVMValueRef q, r, adj, zero = LLVMConstNull(maybe_vec(c, c->i64, vec));
    if (nonneg(c, e->a[0]) && nonneg(c, e->a[1])) {
        if (!vec && is_i64(c, a, b))
            return ibin(c, is_mod ? IB_MOD : IB_DIV, a, b);
        return is_mod ? LLVMBuildSRem(c->b, a, b, "") : LLVMBuildSDiv(c->b, a, b, "");
    }
    q = LLVMBuildSDiv(c->b, a, b, "");
    r = LLVMBuildSRem(c->b, a, b, "");
    /* floor: adjust when the remainder is non-zero and its sign differs from b's */
    adj = LLVMBuildAnd(c->b, LLVMBuildICmp(c->b, LLVMIntNE, r, zero, ""),
                       LLVMBuildICmp(c->b, LLVMIntSLT, LLVMBuildXor(c->b, r, b, ""), zero, ""),
                       "");
    if (is_mod)
        return LLVMBuildSelect(c->b, adj, LLVMBuildAdd(c->b, r, b, ""), r, "");
    return LLVMBuildSub(c->b, q, LLVMBuildZExt(c->b, adj, maybe_vec(c, c->i64, vec), ""), "");
}

static int is_float_expr(const ss_expr *e)
{
    return at_dtype_is_float((at_dtype)e->dtype);
}

static val emit(cg *c, const ss_expr *e);

/* An integer sum's terms: constants added up in *k, the others in t[] with their signs. */
#define SUM_TERMS 32
static void sum_terms(cg *c, const ss_expr *e, int neg, val *t, int *sgn, int *n, int64_t *k)
{
    val v;
    if ((e->kind == SS_E_ADD || e->kind == SS_E_SUB) && !is_float_expr(e) &&
        e->dtype != AT_DT_BOOL && *n < SUM_TERMS - 2) {
        sum_terms(c, e->a[0], neg, t, sgn, n, k);
        sum_terms(c, e->a[1], e->kind == SS_E_SUB ? !neg : neg, t, sgn, n, k);
        return;
    }
    v = emit(c, e);
    if (c->err)
        return;
    if (!v.vec && LLVMIsAConstantInt(v.v)) {
        int64_t x = LLVMConstIntGetSExtValue(v.v);
        *k += neg ? -x : x;
        return;
    }
    t[*n] = v;
    sgn[*n] = neg;
    (*n)++;
}

/* An integer (index) sum: the variable terms in their order, then one constant, so that an
** unrolled body's statements share all but their last add (ibin). */
static val emit_sum(cg *c, const ss_expr *e)
{
    val t[SUM_TERMS], r = {NULL, 0};
    int sgn[SUM_TERMS], n = 0;
    int64_t k = 0;
    sum_terms(c, e, 0, t, sgn, &n, &k);
    if (c->err)
        return r;
    for (int i = 0; i < n; i++) {
        val x = t[i];
        if (i == 0) {
            r = x;
            if (sgn[0])
                r.v = LLVMBuildNSWNeg(c->b, r.v, "");
            continue;
        }
        widen(c, &r, &x);
        if (!r.vec)
            r.v = ibin(c, sgn[i] ? IB_SUB : IB_ADD, r.v, x.v);
        else
            r.v = sgn[i] ? LLVMBuildNSWSub(c->b, r.v, x.v, "") : LLVMBuildNSWAdd(c->b, r.v, x.v, "");
    }
    if (n == 0) {
        r.v = ci64(c, k);
    } else if (k != 0) {
        val x = {ci64(c, k), 0};
        widen(c, &r, &x);
        r.v = r.vec ? LLVMBuildNSWAdd(c->b, r.v, x.v, "") : ibin(c, IB_ADD, r.v, x.v);
    }
    return r;
}

static val emit(cg *c, const ss_expr *e)
{
    val r = {NULL, 0}, a, b, x;
    int fl;
    if (c->err)
        return r;
    switch (e->kind) {
    case SS_E_IMM_INT:
        if (e->dtype == AT_DT_BOOL)
            r.v = LLVMConstInt(c->i1, e->v.i != 0, 0);
        else
            r.v = ci64(c, e->v.i);
        return r;
    case SS_E_IMM_FLOAT:
        r.v = LLVMConstReal(reg_type(c, (at_dtype)e->dtype), e->v.f);
        return r;
    case SS_E_VAR:
        if (c->lanes && e->id == c->vec_var) {
            if (c->vec_zero) {
                r.v = ci64(c, c->vec_base);
                return r;
            }
            {
                LLVMValueRef *lanes = at_malloc((size_t)c->lanes * sizeof *lanes);
                if (lanes == NULL) {
                    cfail(c, AT_ENOMEM, "out of memory");
                    return r;
                }
                for (int l = 0; l < c->lanes; l++)
                    lanes[l] = ci64(c, c->vec_base + l);
                r.v = LLVMConstVector(lanes, (unsigned)c->lanes);
                r.vec = 1;
                at_free(lanes);
                return r;
            }
        }
        if (e->id < 0 || e->id >= c->ir->n_vars || c->var[e->id] == NULL) {
            cfail(c, AT_ECODEGEN, "internal: loop variable %d used outside its loop", e->id);
            return r;
        }
        r.v = c->var[e->id];
        return r;
    case SS_E_LOAD:
        return emit_load(c, e);
    case SS_E_ADD:
    case SS_E_SUB:
        fl = is_float_expr(e);
        /* a*b + c on floats: one fused multiply-add (llvm.fmuladd) */
        if (fl && e->kind == SS_E_ADD && (e->a[0]->kind == SS_E_MUL || e->a[1]->kind == SS_E_MUL)) {
            const ss_expr *m = e->a[1]->kind == SS_E_MUL ? e->a[1] : e->a[0];
            const ss_expr *o = m == e->a[1] ? e->a[0] : e->a[1];
            val p = emit(c, m->a[0]), q = emit(c, m->a[1]), s = emit(c, o);
            LLVMValueRef args[3];
            widen(c, &p, &q);
            widen(c, &p, &s);
            widen(c, &q, &s);
            args[0] = p.v, args[1] = q.v, args[2] = s.v;
            r.v = intrinsic(c, "llvm.fmuladd", LLVMTypeOf(p.v), args, 3);
            r.vec = p.vec;
            return r;
        }
        if (!fl && e->dtype != AT_DT_BOOL)
            return emit_sum(c, e);
        /* fall through */
    case SS_E_MUL:
    case SS_E_DIV:
    case SS_E_MOD:
    case SS_E_MIN:
    case SS_E_MAX:
    case SS_E_LT:
    case SS_E_LE:
    case SS_E_GT:
    case SS_E_GE:
    case SS_E_EQ:
    case SS_E_NE:
    case SS_E_AND:
    case SS_E_OR:
        a = emit(c, e->a[0]);
        b = emit(c, e->a[1]);
        if (c->err)
            return r;
        widen(c, &a, &b);
        r.vec = a.vec;
        fl = is_float_expr(e->a[0]);
        switch (e->kind) {
        case SS_E_ADD: r.v = fl ? LLVMBuildFAdd(c->b, a.v, b.v, "") : LLVMBuildNSWAdd(c->b, a.v, b.v, ""); break;
        case SS_E_SUB: r.v = fl ? LLVMBuildFSub(c->b, a.v, b.v, "") : LLVMBuildNSWSub(c->b, a.v, b.v, ""); break;
        case SS_E_MUL:
            r.v = fl                        ? LLVMBuildFMul(c->b, a.v, b.v, "")
                  : !a.vec && is_i64(c, a.v, b.v) ? ibin(c, IB_MUL, a.v, b.v)
                                            : LLVMBuildNSWMul(c->b, a.v, b.v, "");
            break;
        case SS_E_DIV:
            r.v = fl ? LLVMBuildFDiv(c->b, a.v, b.v, "") : floordiv(c, e, a.v, b.v, a.vec, 0);
            break;
        case SS_E_MOD: r.v = floordiv(c, e, a.v, b.v, a.vec, 1); break;
        case SS_E_MIN:
        case SS_E_MAX: {
            LLVMValueRef cmp = fl ? LLVMBuildFCmp(c->b, e->kind == SS_E_MIN ? LLVMRealOLT : LLVMRealOGT,
                                                  a.v, b.v, "")
                                  : LLVMBuildICmp(c->b, e->kind == SS_E_MIN ? LLVMIntSLT : LLVMIntSGT,
                                                  a.v, b.v, "");
            r.v = LLVMBuildSelect(c->b, cmp, a.v, b.v, "");
            break;
        }
        case SS_E_LT: case SS_E_LE: case SS_E_GT: case SS_E_GE: case SS_E_EQ: case SS_E_NE: {
            static const LLVMRealPredicate fp[] = {LLVMRealOLT, LLVMRealOLE, LLVMRealOGT,
                                                   LLVMRealOGE, LLVMRealOEQ, LLVMRealUNE};
            static const LLVMIntPredicate ip[] = {LLVMIntSLT, LLVMIntSLE, LLVMIntSGT,
                                                  LLVMIntSGE, LLVMIntEQ, LLVMIntNE};
            int k = e->kind - SS_E_LT;
            r.v = fl ? LLVMBuildFCmp(c->b, fp[k], a.v, b.v, "") : LLVMBuildICmp(c->b, ip[k], a.v, b.v, "");
            break;
        }
        case SS_E_AND: r.v = LLVMBuildAnd(c->b, a.v, b.v, ""); break;
        case SS_E_OR: r.v = LLVMBuildOr(c->b, a.v, b.v, ""); break;
        default: break;
        }
        return r;
    case SS_E_NOT:
        a = emit(c, e->a[0]);
        r.v = LLVMBuildNot(c->b, a.v, "");
        r.vec = a.vec;
        return r;
    case SS_E_NEG:
        a = emit(c, e->a[0]);
        r.v = is_float_expr(e) ? LLVMBuildFNeg(c->b, a.v, "") : LLVMBuildNSWNeg(c->b, a.v, "");
        r.vec = a.vec;
        return r;
    case SS_E_SELECT:
        x = emit(c, e->a[0]);
        a = emit(c, e->a[1]);
        b = emit(c, e->a[2]);
        if (c->err)
            return r;
        widen(c, &a, &b);
        if (x.vec && !a.vec) {
            a.v = splat(c, a.v);
            b.v = splat(c, b.v);
            a.vec = b.vec = 1;
        } else if (a.vec && !x.vec) {
            x.v = splat(c, x.v);
            x.vec = 1;
        }
        r.v = LLVMBuildSelect(c->b, x.v, a.v, b.v, "");
        r.vec = a.vec;
        return r;
    case SS_E_CAST: {
        at_dtype from = (at_dtype)e->a[0]->dtype, to = (at_dtype)e->dtype;
        LLVMTypeRef tt;
        a = emit(c, e->a[0]);
        r.vec = a.vec;
        tt = maybe_vec(c, reg_type(c, to), a.vec);
        if (from == to)
            r.v = a.v;
        else if (at_dtype_is_float(to) && at_dtype_is_float(from))
            r.v = LLVMBuildFPCast(c->b, a.v, tt, "");
        else if (at_dtype_is_float(to))
            r.v = from == AT_DT_BOOL ? LLVMBuildUIToFP(c->b, a.v, tt, "") : LLVMBuildSIToFP(c->b, a.v, tt, "");
        else if (to == AT_DT_BOOL)
            r.v = at_dtype_is_float(from)
                      ? LLVMBuildFCmp(c->b, LLVMRealUNE, a.v, LLVMConstNull(LLVMTypeOf(a.v)), "")
                      : LLVMBuildICmp(c->b, LLVMIntNE, a.v, LLVMConstNull(LLVMTypeOf(a.v)), "");
        else if (at_dtype_is_float(from))
            r.v = LLVMBuildFPToSI(c->b, a.v, tt, "");
        else if (from == AT_DT_BOOL)
            r.v = LLVMBuildZExt(c->b, a.v, tt, "");
        else
            r.v = a.v; /* int to int: all ints are i64 in registers */
        return r;
    }
    case SS_E_EXP:
    case SS_E_LOG:
    case SS_E_SQRT:
    case SS_E_ABS:
    case SS_E_TANH:
    case SS_E_ERF:
    case SS_E_SIGMOID: {
        LLVMTypeRef t;
        int f32;
        a = emit(c, e->a[0]);
        if (c->err)
            return r;
        t = LLVMTypeOf(a.v);
        r.vec = a.vec;
        if (!is_float_expr(e)) {
            /* abs of an integer */
            LLVMValueRef neg = LLVMBuildNeg(c->b, a.v, "");
            r.v = LLVMBuildSelect(c->b, LLVMBuildICmp(c->b, LLVMIntSLT, a.v, LLVMConstNull(t), ""),
                                  neg, a.v, "");
            return r;
        }
        f32 = e->dtype == AT_DT_F32;
        switch (e->kind) {
        case SS_E_EXP: r.v = f32 ? exp_f32(c, a.v) : intrinsic(c, "llvm.exp", t, &a.v, 1); break;
        case SS_E_LOG: r.v = intrinsic(c, "llvm.log", t, &a.v, 1); break;
        case SS_E_SQRT: r.v = intrinsic(c, "llvm.sqrt", t, &a.v, 1); break;
        case SS_E_ABS: r.v = intrinsic(c, "llvm.fabs", t, &a.v, 1); break;
        case SS_E_TANH: r.v = f32 ? tanh_f32(c, a.v) : libcall(c, "tanh", reg_type(c, (at_dtype)e->dtype), a); break;
        case SS_E_ERF: r.v = f32 ? erf_f32(c, a.v) : libcall(c, "erf", reg_type(c, (at_dtype)e->dtype), a); break;
        case SS_E_SIGMOID: {
            LLVMValueRef one = LLVMConstReal(reg_type(c, (at_dtype)e->dtype), 1.0);
            LLVMValueRef ex, neg = LLVMBuildFNeg(c->b, a.v, "");
            if (a.vec)
                one = splat(c, one);
            ex = f32 ? exp_f32(c, neg) : intrinsic(c, "llvm.exp", t, &neg, 1);
            r.v = LLVMBuildFDiv(c->b, one, LLVMBuildFAdd(c->b, one, ex, ""), "");
            break;
        }
        default: break;
        }
        return r;
    }
    default:
        cfail(c, AT_ECODEGEN, "internal: expression kind %s in loop IR",
              ss_expr_kind_name((ss_expr_kind)e->kind));
        return r;
    }
}

/* ---- statements ---- */

static void emit_stmt(cg *c, const kn_stmt *s);

static void emit_store(cg *c, const kn_stmt *s)
{
    int b = s->buf;
    at_dtype dt = c->ir->bufs[b].dtype;
    LLVMTypeRef et = elem_type(c, dt);
    int64_t coef = 0;
    val v = emit(c, s->value);
    if (c->err)
        return;
    if (c->lanes && !ss_expr_linear_in(s->index, c->vec_var, &coef))
        coef = -1;
    if (c->lanes && coef == 1) {
        LLVMValueRef p = elem_ptr(c, b, emit_base_index(c, s->index)), st;
        if (!v.vec)
            v.v = splat(c, v.v);
        st = LLVMBuildStore(c->b, from_reg(c, v.v, dt, 1), p);
        LLVMSetAlignment(st, align_of(c, b, s->index));
        set_tbaa(c, st, b);
        (void)et;
        return;
    }
    if (!v.vec && (c->lanes == 0 || coef == 0)) {
        LLVMValueRef p = elem_ptr(c, b, emit(c, s->index).v);
        LLVMValueRef st = LLVMBuildStore(c->b, from_reg(c, v.v, dt, 0), p);
        set_tbaa(c, st, b);
        return;
    }
    /* per-lane stores, in lane order (the last lane wins when indices repeat) */
    {
        val idx = emit(c, s->index);
        LLVMValueRef vv = v.vec ? from_reg(c, v.v, dt, 1) : from_reg(c, v.v, dt, 0);
        for (int l = 0; l < c->lanes; l++) {
            LLVMValueRef li = idx.vec ? LLVMBuildExtractElement(c->b, idx.v, ci32(c, l), "") : idx.v;
            LLVMValueRef x = v.vec ? LLVMBuildExtractElement(c->b, vv, ci32(c, l), "") : vv;
            LLVMValueRef st = LLVMBuildStore(c->b, x, elem_ptr(c, b, li));
            set_tbaa(c, st, b);
        }
    }
}

/* ---- software prefetch of streamed constant inputs ----------------------------------
** In a model, a step's weights come from memory (the steps before read others), while its
** activations are where the step before left them; a kernel timed alone finds both in the
** caches.  A loop emitted rolled whose body has no rolled loop inside (the reduction loop
** around a register tile) prefetches, at the end of its body, the lines of each constant
** input (a weight) that the iteration 'ahead' on will read, ahead = ceil(prefetch_bytes /
** the bytes one iteration moves through it): the memory's latency is then spent while the
** tile computes.  Only loads whose flat index is affine in the loop's and the inner
** loops' variables and moves at least a cache line an iteration; the lines an iteration
** reads (the inner variables' span, at most PF_MAX_LINES) from their lowest; at most
** PF_MAX_BUFS buffers a loop, each larger than the target's L2.  A prefetch never faults,
** so the lines past the end of the loop (often the next block's) are harmless.  The
** prefetches stay in the body's block: in a branch of their own (every other iteration)
** they split the loop, and the register allocation of a dense layer's 8 x 2-vector tile
** spilled (39 -> 255 stack accesses). */
#define PF_MAX_BUFS 4
#define PF_MAX_LINES 32
#define PF_MAX_INNER 32
#define PF_LINE 64

typedef struct pf_scan {
    const cg *c;
    int rolled;                 /* a loop inside is emitted rolled: not innermost */
    int n_inner;
    int inner[PF_MAX_INNER];    /* the inner loops' variables and extents */
    int64_t inner_ext[PF_MAX_INNER];
    int n;
    const ss_expr *load[PF_MAX_BUFS]; /* the first load of each constant input */
} pf_scan;

static int pf_is_const(const cg *c, int b)
{
    int arg = b >= 0 && b < c->ir->n_bufs ? c->ir->bufs[b].arg : -1;
    return arg >= 0 && arg < c->ir->n_args && c->ir->args[arg].is_const &&
           !c->ir->args[arg].is_output;
}

/* Depth is bounded: expressions by SS_MAX_INLINED_DEPTH, statements by the loops. */
static void pf_scan_expr(pf_scan *p, const ss_expr *e)
{
    if (e == NULL)
        return;
    if (e->kind == SS_E_LOAD && pf_is_const(p->c, e->id) && e->n == 1) {
        int seen = 0;
        for (int i = 0; i < p->n; i++)
            seen |= p->load[i]->id == e->id;
        if (!seen && p->n < PF_MAX_BUFS)
            p->load[p->n++] = e;
    }
    for (int i = 0; i < e->n; i++)
        pf_scan_expr(p, e->a[i]);
}

static void pf_scan_stmt(pf_scan *p, const kn_stmt *s)
{
    if (s == NULL || p->rolled)
        return;
    switch (s->kind) {
    case KN_S_SEQ:
        for (int i = 0; i < s->n; i++)
            pf_scan_stmt(p, s->items[i]);
        return;
    case KN_S_STORE:
        pf_scan_expr(p, s->index);
        pf_scan_expr(p, s->value);
        return;
    case KN_S_IF:
        pf_scan_expr(p, s->cond);
        pf_scan_stmt(p, s->body);
        return;
    case KN_S_FOR:
        if (s->for_kind == KN_FOR_PARALLEL ||
            !((s->for_kind == KN_FOR_VECTORIZE && kn_stmt_vectorizable(s->body, s->var)) ||
              kn_stmt_copied_out(s)) ||
            p->n_inner == PF_MAX_INNER) {
            p->rolled = 1;
            return;
        }
        p->inner[p->n_inner] = s->var;
        p->inner_ext[p->n_inner++] = s->extent;
        pf_scan_stmt(p, s->body);
        return;
    default:
        p->rolled = 1;
    }
}

/* The lines of constant input 'b' that iteration 'at_iter' of 'loop' reads (index 'idx',
** the inner variables at 0, 'lo' elements below, 'lines' lines). */
static void prefetch_lines(cg *c, const kn_stmt *loop, const pf_scan *p, const ss_expr *idx,
                           int b, LLVMValueRef at_iter, int64_t lo, int64_t lines)
{
    LLVMValueRef saved[PF_MAX_INNER], at, base, phi = c->var[loop->var];
    int64_t es = at_dtype_bytes(c->ir->bufs[b].dtype);
    for (int j = 0; j < p->n_inner; j++) {
        saved[j] = c->var[p->inner[j]];
        c->var[p->inner[j]] = ci64(c, 0);
    }
    c->var[loop->var] = at_iter;
    at = emit(c, idx).v;
    c->var[loop->var] = phi;
    for (int j = 0; j < p->n_inner; j++)
        c->var[p->inner[j]] = saved[j];
    if (c->err || at == NULL)
        return;
    if (LLVMTypeOf(at) != c->i64)
        at = LLVMBuildSExt(c->b, at, c->i64, "");
    /* not inbounds: the lines ahead may lie past the buffer */
    {
        LLVMValueRef off = LLVMBuildMul(c->b, LLVMBuildAdd(c->b, at, ci64(c, lo), ""), ci64(c, es), "");
        base = LLVMBuildGEP2(c->b, c->i8, c->buf[b], &off, 1, "");
    }
    /* memory(inaccessiblemem: readwrite) at each call: LLVM models llvm.prefetch as reading
    ** and writing what its pointer points to, so LICM kept a tile's accumulators (in a
    ** temporary LLVM cannot tell apart from the weight) in memory, stored every iteration,
    ** and the tile spilled (39 -> 200 stack accesses) */
    LLVMAttributeRef only_inaccessible = LLVMCreateEnumAttribute(
        c->ctx, LLVMGetEnumAttributeKindForName("memory", 6), 3u << 2);
    for (int64_t l = 0; l < lines; l++) {
        LLVMValueRef o = ci64(c, l * PF_LINE);
        LLVMValueRef args[4] = {l ? LLVMBuildGEP2(c->b, c->i8, base, &o, 1, "") : base, ci32(c, 0),
                                ci32(c, 3), ci32(c, 1)};
        LLVMAddCallSiteAttribute(intrinsic(c, "llvm.prefetch", c->ptr, args, 4),
                                 LLVMAttributeFunctionIndex, only_inaccessible);
    }
}

/* The next panel.  A register tile reads its panel of the weight (a block's columns over
** all of k) from memory only on the first pass over it; the other row tiles find it in the
** L2.  So the weight streams in a burst when the block moves, at the tiles' speed (far
** above the memory's), and a prefetch a fixed distance ahead cannot hide it: timed with
** the weight cold, BERT's 80 x 768 x 768 dense layer ran 0.21 ms + 0.08 ms, the time to
** stream its 2.25 MB.  Instead: P is the loop around 'loop' that moves through weight 'b'
** with no loop outside it that does not (one that does not would read P's panels again,
** from the L2), nearest to 'loop'; R the loops between them.  One pass of P reads at most
** stride(P) bytes from idx(R, loop, inner = 0), and the next pass's stride(P) bytes are
** prefetched into the L2 spread over this pass's N = extent(loop) x prod extent(R)
** iterations, ceil(lines / N) lines an iteration: the next block streams while this one
** computes.  Only when the pass is contiguous (its span fits in the stride), moves
** forwards, and two panels and the activations fit the L2 (stride <= L2 / 4).  Returns
** 1 when it emitted the prefetches (the caller's fixed-distance ones are then left out). */
static int prefetch_panel(cg *c, const kn_stmt *loop, const pf_scan *p, const ss_expr *idx,
                          int b, int64_t lo)
{
    int r[KN_LLVM_MAX_LOOPS], nr = 0, at = -1;
    int64_t es = at_dtype_bytes(c->ir->bufs[b].dtype), stride = 0, n_iter = loop->extent, span = 0;
    int64_t lines, per, kl = 0;
    LLVMValueRef saved[PF_MAX_INNER + KN_LLVM_MAX_LOOPS + 1], lin, base, first;
    int reuse = -1;
    if (c->n_loops > KN_LLVM_MAX_LOOPS || c->n_loops < 2 || c->loops[c->n_loops - 1] != loop)
        return 0;
    /* P: the innermost loop that moves through the weight with no loop outside it that
    ** does not (such a loop would read P's panels again: they are in the L2 after its
    ** first pass, and prefetching them on every pass would cost issue slots for nothing) */
    for (int i = 0; i < c->n_loops - 1 && reuse < 0; i++) {
        int64_t k = 0;
        if (!ss_expr_linear_in(idx, c->loops[i]->var, &k))
            return 0;
        if (k == 0 && c->loops[i]->extent > 1)
            reuse = i;
    }
    for (int i = (reuse < 0 ? c->n_loops - 1 : reuse) - 1; i >= 0 && at < 0; i--) {
        int64_t k = 0;
        ss_expr_linear_in(idx, c->loops[i]->var, &k);
        if (k != 0) {
            at = i;
            stride = k * es;
        }
    }
    /* the weight read forwards: P, R and 'loop' move it up (or not at all) */
    if (at < 0 || stride <= 0 || !ss_expr_linear_in(idx, loop->var, &kl) || kl < 0)
        return 0;
    span = kl * (loop->extent - 1);
    for (int i = c->n_loops - 2; i > at; i--) {
        int64_t k = 0;
        if (!ss_expr_linear_in(idx, c->loops[i]->var, &k) || k < 0)
            return 0;
        r[nr++] = i;
        n_iter *= c->loops[i]->extent;
        span += k * (c->loops[i]->extent - 1);
    }
    /* the pass's span must fit in the stride: a contiguous panel per pass */
    for (int j = 0; j < p->n_inner; j++) {
        int64_t k = 0;
        ss_expr_linear_in(idx, p->inner[j], &k);
        span += (k < 0 ? -k : k) * (p->inner_ext[j] - 1);
    }
    if ((span + 1) * es > stride || stride > c->tgt->l2_bytes / 4)
        return 0;
    lines = (stride + PF_LINE - 1) / PF_LINE;
    per = (lines + n_iter - 1) / n_iter;
    if (per > PF_MAX_LINES)
        return 0;
    /* lin: this iteration's number in the pass, R's variables as digits, 'loop' last */
    lin = ci64(c, 0);
    for (int j = nr - 1; j >= 0; j--)
        lin = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, lin, ci64(c, c->loops[r[j]]->extent), ""),
                           c->var[c->loops[r[j]]->var], "");
    lin = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, lin, ci64(c, loop->extent), ""),
                       c->var[loop->var], "");
    /* idx at R, loop and the inner loops 0: the pass's first element */
    for (int j = 0; j < p->n_inner; j++) {
        saved[j] = c->var[p->inner[j]];
        c->var[p->inner[j]] = ci64(c, 0);
    }
    for (int j = 0; j < nr; j++) {
        saved[PF_MAX_INNER + j] = c->var[c->loops[r[j]]->var];
        c->var[c->loops[r[j]]->var] = ci64(c, 0);
    }
    saved[PF_MAX_INNER + KN_LLVM_MAX_LOOPS] = c->var[loop->var];
    c->var[loop->var] = ci64(c, 0);
    first = emit(c, idx).v;
    c->var[loop->var] = saved[PF_MAX_INNER + KN_LLVM_MAX_LOOPS];
    for (int j = 0; j < nr; j++)
        c->var[c->loops[r[j]]->var] = saved[PF_MAX_INNER + j];
    for (int j = 0; j < p->n_inner; j++)
        c->var[p->inner[j]] = saved[j];
    if (c->err || first == NULL)
        return 0;
    if (LLVMTypeOf(first) != c->i64)
        first = LLVMBuildSExt(c->b, first, c->i64, "");
    {
        /* bytes: (first + lo) * es + stride + 64 * (the line of the panel this iteration
        ** starts at: lin * lines / n_iter, then 'per' lines from there) */
        LLVMValueRef line = LLVMBuildSDiv(c->b, LLVMBuildMul(c->b, lin, ci64(c, lines), ""),
                                          ci64(c, n_iter), "");
        LLVMValueRef off = LLVMBuildAdd(
            c->b, LLVMBuildMul(c->b, LLVMBuildAdd(c->b, first, ci64(c, lo), ""), ci64(c, es), ""),
            ci64(c, stride), "");
        off = LLVMBuildAdd(c->b, off, LLVMBuildMul(c->b, line, ci64(c, PF_LINE), ""), "");
        base = LLVMBuildGEP2(c->b, c->i8, c->buf[b], &off, 1, "");
    }
    {
        LLVMAttributeRef only_inaccessible = LLVMCreateEnumAttribute(
            c->ctx, LLVMGetEnumAttributeKindForName("memory", 6), 3u << 2);
        for (int64_t l = 0; l < per; l++) {
            LLVMValueRef o = ci64(c, l * PF_LINE);
            LLVMValueRef args[4] = {l ? LLVMBuildGEP2(c->b, c->i8, base, &o, 1, "") : base,
                                    ci32(c, 0), ci32(c, 2), ci32(c, 1)};
            LLVMAddCallSiteAttribute(intrinsic(c, "llvm.prefetch", c->ptr, args, 4),
                                     LLVMAttributeFunctionIndex, only_inaccessible);
        }
    }
    return 1;
}

/* At the end of the body of 'loop' (variable 'phi'): the lines of the iteration 'ahead'
** iterations on. */
static void emit_prefetches(cg *c, const kn_stmt *loop, LLVMValueRef phi)
{
    pf_scan p;
    struct { const ss_expr *idx; int b; int64_t lo, lines, ahead; } plan[PF_MAX_BUFS];
    int n_plan = 0;
    int64_t budget = c->tgt->prefetch_bytes;
    if (budget <= 0 || c->lanes != 0 || c->ir->is_gpu || c->in_pre)
        return;
    memset(&p, 0, sizeof p);
    p.c = c;
    pf_scan_stmt(&p, loop->body);
    if (p.rolled)
        return;
    for (int i = 0; i < p.n; i++) {
        const ss_expr *idx = p.load[i]->a[0];
        int b = p.load[i]->id;
        int64_t es = at_dtype_bytes(c->ir->bufs[b].dtype), k = 0, lo = 0, span = 0;
        int64_t step_bytes, lines;
        int ok = ss_expr_linear_in(idx, loop->var, &k) && k > 0;
        for (int j = 0; j < p.n_inner && ok; j++) {
            int64_t cv = 0;
            ok = ss_expr_linear_in(idx, p.inner[j], &cv);
            span += (cv < 0 ? -cv : cv) * (p.inner_ext[j] - 1);
            lo += cv < 0 ? cv * (p.inner_ext[j] - 1) : 0;
        }
        if (!ok || es <= 0)
            continue;
        /* a weight that fits the core's L2 stays there between calls and the hardware's
        ** prefetchers fetch it well enough from the L3; the prefetches would cost issue
        ** slots and registers (a 1x1 convolution's 221 KB weight: 0.053 -> 0.072 ms) */
        if (c->ir->bufs[b].n_elems * es <= c->tgt->l2_bytes)
            continue;
        step_bytes = k * es;
        if (step_bytes < PF_LINE)
            continue;
        span = (span + 1) * es;
        lines = ((span < step_bytes ? span : step_bytes) + PF_LINE - 1) / PF_LINE;
        if (lines > PF_MAX_LINES)
            lines = PF_MAX_LINES;
        plan[n_plan].idx = idx;
        plan[n_plan].b = b;
        plan[n_plan].lo = lo;
        plan[n_plan].lines = lines;
        plan[n_plan++].ahead = (budget + step_bytes - 1) / step_bytes;
    }
    for (int i = 0; i < n_plan && !c->err; i++)
        if (!prefetch_panel(c, loop, &p, plan[i].idx, plan[i].b, plan[i].lo))
            prefetch_lines(c, loop, &p, plan[i].idx, plan[i].b,
                           LLVMBuildNSWAdd(c->b, phi, ci64(c, plan[i].ahead), ""), plan[i].lo,
                           plan[i].lines);
}

static void emit_loop(cg *c, const kn_stmt *s, LLVMValueRef begin, LLVMValueRef end)
{
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(c->b);
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(c->ctx, c->fn, "loop");
    LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(c->ctx, c->fn, "loop.end");
    LLVMBasicBlockRef latch;
    LLVMValueRef phi, next, cond;
    if (begin != NULL) {
        /* a block range that may be empty */
        LLVMBasicBlockRef go = LLVMAppendBasicBlockInContext(c->ctx, c->fn, "loop.pre");
        LLVMBuildCondBr(c->b, LLVMBuildICmp(c->b, LLVMIntSLT, begin, end, ""), go, exit);
        LLVMPositionBuilderAtEnd(c->b, go);
        pre = go;
    } else {
        begin = ci64(c, 0);
        end = ci64(c, s->extent);
    }
    LLVMBuildBr(c->b, body);
    LLVMPositionBuilderAtEnd(c->b, body);
    phi = LLVMBuildPhi(c->b, c->i64, c->ir->vars[s->var].name);
    c->var[s->var] = phi;
    if (c->n_loops < KN_LLVM_MAX_LOOPS)
        c->loops[c->n_loops] = s;
    c->n_loops++;
    emit_stmt(c, s->body);
    emit_prefetches(c, s, phi);
    c->n_loops--;
    c->var[s->var] = NULL;
    latch = LLVMGetInsertBlock(c->b);
    next = LLVMBuildNSWAdd(c->b, phi, ci64(c, 1), "");
    cond = LLVMBuildICmp(c->b, LLVMIntSLT, next, end, "");
    LLVMBuildCondBr(c->b, cond, body, exit);
    LLVMAddIncoming(phi, &begin, &pre, 1);
    LLVMAddIncoming(phi, &next, &latch, 1);
    LLVMPositionBuilderAtEnd(c->b, exit);
}

static void alloc_temps(cg *c, int par_var, LLVMValueRef ws_base);

/* Free values a task function needs: every buffer pointer and loop variable in scope. */
static void emit_parallel(cg *c, const kn_stmt *s)
{
    int nb = c->ir->n_bufs, nv = c->ir->n_vars, n_slots = 0, slot;
    LLVMValueRef *saved_var, *saved_buf, saved_fn = c->fn, saved_ws = c->ws, saved_par = c->par;
    LLVMValueRef saved_status = c->status;
    LLVMBuilderRef saved_b = c->b;
    LLVMTypeRef task_params[3] = {c->ptr, c->i32, c->i32}, task_ty, arr_ty, launch_ty;
    LLVMTypeRef launch_params[3] = {c->ptr, c->ptr, c->ptr};
    LLVMValueRef task, closure, launch_fp, args[3], rc;
    char name[64];
    /* count and store the slots: ws, par, buffers, variables */
    for (int i = 0; i < nb; i++)
        n_slots += c->buf[i] != NULL;
    for (int i = 0; i < nv; i++)
        n_slots += c->var[i] != NULL;
    n_slots += 2 + CLAIM_BLOCKS; /* ws, par, the blocks' chunk counters */
    arr_ty = LLVMArrayType(c->i64, (unsigned)n_slots);
    {
        /* the closure lives in the caller's frame (entry block alloca) */
        LLVMBasicBlockRef cur = LLVMGetInsertBlock(c->b);
        LLVMBasicBlockRef entry = LLVMGetEntryBasicBlock(c->fn);
        LLVMValueRef first = LLVMGetFirstInstruction(entry);
        if (first)
            LLVMPositionBuilderBefore(c->b, first);
        else
            LLVMPositionBuilderAtEnd(c->b, entry);
        closure = LLVMBuildAlloca(c->b, arr_ty, "closure");
        LLVMPositionBuilderAtEnd(c->b, cur);
    }
#define SLOT_PTR(base, k)                                                                      \
    LLVMBuildInBoundsGEP2(c->b, c->i64, base, (LLVMValueRef[]){ci64(c, k)}, 1, "")
    slot = 0;
    LLVMBuildStore(c->b, LLVMBuildPtrToInt(c->b, c->ws, c->i64, ""), SLOT_PTR(closure, slot++));
    LLVMBuildStore(c->b, LLVMBuildPtrToInt(c->b, c->par, c->i64, ""), SLOT_PTR(closure, slot++));
    for (int i = 0; i < nb; i++)
        if (c->buf[i])
            LLVMBuildStore(c->b, LLVMBuildPtrToInt(c->b, c->buf[i], c->i64, ""),
                           SLOT_PTR(closure, slot++));
    for (int i = 0; i < nv; i++)
        if (c->var[i])
            LLVMBuildStore(c->b, c->var[i], SLOT_PTR(closure, slot++));
    for (int i = 0; i < CLAIM_BLOCKS; i++) /* no chunk claimed yet */
        LLVMBuildStore(c->b, ci64(c, 0), SLOT_PTR(closure, slot++));
    /* the task function */
    task_ty = LLVMFunctionType(c->i32, task_params, 3, 0);
    /* the extent in the name: the trip counts the code hides (its chunks come from counters
    ** at run time), for the cost model's reading of the code (cm_code.c) */
    snprintf(name, sizeof name, "at_kernel_task%d_x%lld", c->n_tasks_fn++, (long long)s->extent);
    task = LLVMAddFunction(c->mod, name, task_ty);
    LLVMSetLinkage(task, LLVMInternalLinkage);
    saved_var = at_malloc((size_t)(nv + nb + 1) * sizeof *saved_var);
    if (saved_var == NULL) {
        cfail(c, AT_ENOMEM, "out of memory");
        return;
    }
    saved_buf = saved_var + nv;
    memcpy(saved_var, c->var, (size_t)nv * sizeof *saved_var);
    memcpy(saved_buf, c->buf, (size_t)nb * sizeof *saved_buf);
    c->b = LLVMCreateBuilderInContext(c->ctx);
    c->fn = task;
    LLVMPositionBuilderAtEnd(c->b, LLVMAppendBasicBlockInContext(c->ctx, task, "entry"));
    {
        LLVMValueRef cl = LLVMGetParam(task, 0), tid = LLVMGetParam(task, 1);
        LLVMValueRef ntask = LLVMGetParam(task, 2), tid64, n64, chunk, begin, end, ext;
        slot = 0;
        c->ws = LLVMBuildIntToPtr(c->b, LLVMBuildLoad2(c->b, c->i64, SLOT_PTR(cl, slot++), ""), c->ptr, "ws");
        c->par = LLVMBuildIntToPtr(c->b, LLVMBuildLoad2(c->b, c->i64, SLOT_PTR(cl, slot++), ""), c->ptr, "par");
        for (int i = 0; i < nb; i++)
            if (saved_buf[i])
                c->buf[i] = LLVMBuildIntToPtr(c->b, LLVMBuildLoad2(c->b, c->i64, SLOT_PTR(cl, slot++), ""),
                                              c->ptr, c->ir->bufs[i].name);
        for (int i = 0; i < nv; i++)
            if (saved_var[i])
                c->var[i] = LLVMBuildLoad2(c->b, c->i64, SLOT_PTR(cl, slot++), "");
        c->status = LLVMBuildAlloca(c->b, c->i32, "status");
        LLVMBuildStore(c->b, ci32(c, 0), c->status);
        /* this task's slice of the workspace */
        tid64 = LLVMBuildSExt(c->b, tid, c->i64, "");
        {
            LLVMValueRef off = LLVMBuildAdd(c->b, ci64(c, c->ws_fixed),
                                            LLVMBuildMul(c->b, tid64, ci64(c, c->ws_per_thread), ""), "");
            LLVMValueRef tws = LLVMBuildInBoundsGEP2(c->b, c->i8, c->ws, &off, 1, "task_ws");
            alloc_temps(c, s->var, tws);
        }
        /* chunks of ceil(extent / min(extent, 4 n_tasks)) iterations in B = min(n_tasks,
        ** CLAIM_BLOCKS) blocks of consecutive chunks, block b claimed through counter b of
        ** the closure: its owner (tasks t with t % B == b) takes chunks from the front (the
        ** low 32 bits), other tasks, once their own block is done, from the back (the high
        ** bits); a claim is valid while front + back < the block's chunks.  So each task
        ** runs the same part of every launch's iterations (the part of the data it touched in
        ** the step before, in its own core's caches) and a late task's block is still run
        ** by the others (relaxed: the chunks' data is ordered by the launch). */
        n64 = LLVMBuildSExt(c->b, ntask, c->i64, "");
        ext = ci64(c, s->extent);
        {
            LLVMValueRef want = LLVMBuildMul(c->b, n64, ci64(c, 4), ""), n_chunks, nblk, own;
            LLVMValueRef jv = LLVMBuildAlloca(c->b, c->i64, "block_step"), j, b, b0, b1, lenb;
            LLVMValueRef first, inc, old, lo, hi, ok, k, cnt;
            LLVMBasicBlockRef head, body, next, done;
            want = LLVMBuildSelect(c->b, LLVMBuildICmp(c->b, LLVMIntSLT, want, ext, ""), want,
                                   ext, "");
            chunk = LLVMBuildSDiv(c->b, LLVMBuildAdd(c->b, ext, LLVMBuildSub(c->b, want, ci64(c, 1), ""), ""),
                                  want, "chunk");
            n_chunks = LLVMBuildSDiv(c->b, LLVMBuildAdd(c->b, ext, LLVMBuildSub(c->b, chunk, ci64(c, 1), ""), ""),
                                     chunk, "n_chunks");
            nblk = LLVMBuildSelect(c->b, LLVMBuildICmp(c->b, LLVMIntSLT, n64, ci64(c, CLAIM_BLOCKS), ""),
                                   n64, ci64(c, CLAIM_BLOCKS), "n_blocks");
            own = LLVMBuildSRem(c->b, tid64, nblk, "own_block");
            LLVMBuildStore(c->b, ci64(c, 0), jv);
            head = LLVMAppendBasicBlockInContext(c->ctx, task, "claim");
            body = LLVMAppendBasicBlockInContext(c->ctx, task, "chunk_body");
            next = LLVMAppendBasicBlockInContext(c->ctx, task, "next_block");
            done = LLVMAppendBasicBlockInContext(c->ctx, task, "no_chunk_left");
            LLVMBuildBr(c->b, head);
            LLVMPositionBuilderAtEnd(c->b, head);
            j = LLVMBuildLoad2(c->b, c->i64, jv, "");
            b = LLVMBuildSRem(c->b, LLVMBuildAdd(c->b, own, j, ""), nblk, "block");
            b0 = LLVMBuildSDiv(c->b, LLVMBuildMul(c->b, b, n_chunks, ""), nblk, "");
            b1 = LLVMBuildSDiv(c->b, LLVMBuildMul(c->b, LLVMBuildAdd(c->b, b, ci64(c, 1), ""), n_chunks, ""),
                               nblk, "");
            lenb = LLVMBuildSub(c->b, b1, b0, "");
            first = LLVMBuildICmp(c->b, LLVMIntEQ, j, ci64(c, 0), "");
            inc = LLVMBuildSelect(c->b, first, ci64(c, 1), ci64(c, (int64_t)1 << 32), "");
            cnt = LLVMBuildInBoundsGEP2(c->b, c->i64, cl,
                                        (LLVMValueRef[]){LLVMBuildAdd(c->b, b, ci64(c, slot), "")}, 1, "");
            old = LLVMBuildAtomicRMW(c->b, LLVMAtomicRMWBinOpAdd, cnt, inc, LLVMAtomicOrderingMonotonic, 0);
            lo = LLVMBuildAnd(c->b, old, ci64(c, 0xffffffffll), "");
            hi = LLVMBuildLShr(c->b, old, ci64(c, 32), "");
            ok = LLVMBuildICmp(c->b, LLVMIntSLT, LLVMBuildAdd(c->b, lo, hi, ""), lenb, "");
            k = LLVMBuildAdd(c->b, b0,
                             LLVMBuildSelect(c->b, first, lo,
                                             LLVMBuildSub(c->b, LLVMBuildSub(c->b, lenb, ci64(c, 1), ""), hi, ""),
                                             ""), "k");
            LLVMBuildCondBr(c->b, ok, body, next);
            LLVMPositionBuilderAtEnd(c->b, body);
            begin = LLVMBuildMul(c->b, k, chunk, "");
            end = LLVMBuildAdd(c->b, begin, chunk, "");
            end = LLVMBuildSelect(c->b, LLVMBuildICmp(c->b, LLVMIntSLT, end, ext, ""), end, ext, "");
            emit_loop(c, s, begin, end);
            LLVMBuildBr(c->b, head);
            LLVMPositionBuilderAtEnd(c->b, next);
            j = LLVMBuildAdd(c->b, LLVMBuildLoad2(c->b, c->i64, jv, ""), ci64(c, 1), "");
            LLVMBuildStore(c->b, j, jv);
            LLVMBuildCondBr(c->b, LLVMBuildICmp(c->b, LLVMIntSLT, j, nblk, ""), head, done);
            LLVMPositionBuilderAtEnd(c->b, done);
        }
        LLVMBuildRet(c->b, LLVMBuildLoad2(c->b, c->i32, c->status, ""));
    }
    LLVMDisposeBuilder(c->b);
    c->b = saved_b;
    c->fn = saved_fn;
    c->ws = saved_ws;
    c->par = saved_par;
    c->status = saved_status;
    memcpy(c->var, saved_var, (size_t)nv * sizeof *saved_var);
    memcpy(c->buf, saved_buf, (size_t)nb * sizeof *saved_buf);
    at_free(saved_var);
    /* launch: par->launch(par, task, closure); keep the first failure */
    launch_ty = LLVMFunctionType(c->i32, launch_params, 3, 0);
    launch_fp = LLVMBuildLoad2(c->b, c->ptr, c->par, "launch");
    args[0] = c->par;
    args[1] = task;
    args[2] = closure;
    rc = LLVMBuildCall2(c->b, launch_ty, launch_fp, args, 3, "rc");
    {
        LLVMValueRef old = LLVMBuildLoad2(c->b, c->i32, c->status, "");
        LLVMValueRef keep = LLVMBuildICmp(c->b, LLVMIntNE, old, ci32(c, 0), "");
        LLVMBuildStore(c->b, LLVMBuildSelect(c->b, keep, old, rc, ""), c->status);
    }
#undef SLOT_PTR
}

static void emit_stmt(cg *c, const kn_stmt *s)
{
    if (s == NULL || c->err)
        return;
    switch (s->kind) {
    case KN_S_SEQ:
        for (int i = 0; i < s->n; i++)
            emit_stmt(c, s->items[i]);
        return;
    case KN_S_STORE:
        emit_store(c, s);
        return;
    case KN_S_IF: {
        val cond = emit(c, s->cond);
        LLVMBasicBlockRef then = LLVMAppendBasicBlockInContext(c->ctx, c->fn, "then");
        LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(c->ctx, c->fn, "endif");
        if (c->err)
            return;
        if (cond.vec) {
            cfail(c, AT_ECODEGEN, "internal: a vector guard");
            return;
        }
        LLVMBuildCondBr(c->b, cond.v, then, done);
        LLVMPositionBuilderAtEnd(c->b, then);
        emit_stmt(c, s->body);
        LLVMBuildBr(c->b, done);
        LLVMPositionBuilderAtEnd(c->b, done);
        return;
    }
    case KN_S_FOR:
        break;
    }
    if (s->for_kind == KN_FOR_PARALLEL && c->lanes == 0) {
        emit_parallel(c, s);
        return;
    }
    if (s->for_kind == KN_FOR_VECTORIZE && c->lanes == 0 && kn_stmt_vectorizable(s->body, s->var)) {
        /* One vector of 'extent' lanes; but one longer than a register and not a power of
        ** two goes in pieces of a register and a power-of-two rest, in lane order (no
        ** dependence across lanes: any in-order grouping computes the same).  LLVM
        ** legalizes a loop-carried <56 x float> into 4-lane pieces rebuilt with vinsertps
        ** and stack reloads every iteration: an NCHW convolution's 4 x 56 register block
        ** (kn_hand_conv_nchw) ran at 11 GFLOPS as one vector, 305 in pieces. */
        int64_t reg = c->tgt->vector_bytes >= 4 ? c->tgt->vector_bytes / 4 : 0, left = s->extent;
        int split = reg > 0 && s->extent > reg && (s->extent & (s->extent - 1)) != 0;
        c->vec_var = s->var;
        c->var[s->var] = NULL;
        c->vec_base = 0;
        while (left > 0 && !c->err) {
            int64_t piece = left;
            if (split) {
                piece = reg;
                while (piece > left)
                    piece /= 2;
            }
            c->lanes = (int)piece;
            emit_stmt(c, s->body);
            c->vec_base += piece;
            left -= piece;
        }
        c->vec_base = 0;
        c->lanes = 0;
        c->vec_var = -1;
        return;
    }
    if (kn_stmt_copied_out(s)) {
        if (c->n_loops < KN_LLVM_MAX_LOOPS)
            c->loops[c->n_loops] = s;
        c->n_loops++;
        for (int64_t i = 0; i < s->extent && !c->err; i++) {
            c->var[s->var] = ci64(c, i);
            emit_stmt(c, s->body);
        }
        c->n_loops--;
        c->var[s->var] = NULL;
        return;
    }
    emit_loop(c, s, NULL, NULL);
}

/* Temporaries of one scope: small ones on the stack of the current function, large ones
** in the workspace at their offsets from 'ws_base'. */
static void alloc_temps(cg *c, int par_var, LLVMValueRef ws_base)
{
    for (int i = 0; i < c->ir->n_bufs; i++) {
        const kn_buf *b = &c->ir->bufs[i];
        int64_t bytes = b->n_elems * at_dtype_bytes(b->dtype);
        if (b->arg >= 0 || b->par_var != par_var)
            continue;
        if (bytes <= STACK_LIMIT) {
            LLVMValueRef a = LLVMBuildAlloca(c->b, LLVMArrayType(elem_type(c, b->dtype), (unsigned)b->n_elems),
                                             b->name);
            LLVMSetAlignment(a, 64);
            c->buf[i] = a;
        } else {
            LLVMValueRef off = ci64(c, c->buf_off[i]);
            c->buf[i] = LLVMBuildInBoundsGEP2(c->b, c->i8, ws_base, &off, 1, b->name);
        }
    }
}

/* Workspace layout: large temporaries outside parallel loops first (ws_fixed), then one
** slice per task for those inside (ws_per_thread: the largest of the parallel loops). */
static void plan_workspace(cg *c)
{
    int64_t fixed = 0;
    int64_t per[64] = {0};
    int par_vars[64], n_par = 0;
    for (int i = 0; i < c->ir->n_bufs; i++) {
        const kn_buf *b = &c->ir->bufs[i];
        int64_t bytes = (b->n_elems * at_dtype_bytes(b->dtype) + 63) & ~(int64_t)63;
        int k;
        if (b->arg >= 0 || b->n_elems * at_dtype_bytes(b->dtype) <= STACK_LIMIT)
            continue;
        if (b->par_var < 0) {
            c->buf_off[i] = fixed;
            fixed += bytes;
            continue;
        }
        for (k = 0; k < n_par && par_vars[k] != b->par_var; k++)
            ;
        if (k == n_par && n_par < 64)
            par_vars[n_par++] = b->par_var;
        c->buf_off[i] = per[k];
        per[k] += bytes;
    }
    c->ws_fixed = fixed;
    c->ws_per_thread = 0;
    for (int k = 0; k < n_par; k++)
        c->ws_per_thread = AT_MAX(c->ws_per_thread, per[k]);
}

static void setup_tbaa(cg *c)
{
    LLVMValueRef root_s = LLVMMDStringInContext(c->ctx, "at-tbaa", 7), root;
    c->tbaa_kind = LLVMGetMDKindIDInContext(c->ctx, "tbaa", 4);
    root = LLVMMDNodeInContext(c->ctx, &root_s, 1);
    for (int i = 0; i < c->ir->n_bufs; i++) {
        char nm[32];
        LLVMValueRef ops[3], type, tag[3];
        snprintf(nm, sizeof nm, "buf%d", i);
        ops[0] = LLVMMDStringInContext(c->ctx, nm, (unsigned)strlen(nm));
        ops[1] = root;
        ops[2] = LLVMConstInt(c->i64, 0, 0);
        type = LLVMMDNodeInContext(c->ctx, ops, 3);
        tag[0] = type;
        tag[1] = type;
        tag[2] = LLVMConstInt(c->i64, 0, 0);
        c->tbaa[i] = LLVMMDNodeInContext(c->ctx, tag, 3);
    }
}

static void add_attr(cg *c, LLVMValueRef fn, unsigned idx, const char *name, uint64_t v)
{
    unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
    LLVMAddAttributeAtIndex(fn, idx, LLVMCreateEnumAttribute(c->ctx, kind, v));
}

static void add_str_attr(cg *c, LLVMValueRef fn, const char *k, const char *v)
{
    LLVMAddAttributeAtIndex(fn, (unsigned)LLVMAttributeFunctionIndex,
                            LLVMCreateStringAttribute(c->ctx, k, (unsigned)strlen(k), v,
                                                      (unsigned)strlen(v)));
}

/* Build the module: the entry point and the body function. */
static void emit_module(cg *c, const char *entry)
{
    const kn_ir *ir = c->ir;
    int n_args = ir->n_args;
    LLVMTypeRef entry_params[3] = {c->ptr, c->ptr, c->ptr}, entry_ty, body_ty;
    LLVMTypeRef *body_params = at_malloc((size_t)(n_args + 2) * sizeof *body_params);
    LLVMValueRef efn, bfn, *bargs;
    char bname[160];
    if (body_params == NULL) {
        cfail(c, AT_ENOMEM, "out of memory");
        return;
    }
    for (int i = 0; i < n_args + 2; i++)
        body_params[i] = c->ptr;
    entry_ty = LLVMFunctionType(c->i32, entry_params, 3, 0);
    body_ty = LLVMFunctionType(c->i32, body_params, (unsigned)(n_args + 2), 0);
    at_free(body_params);
    efn = LLVMAddFunction(c->mod, entry, entry_ty);
    snprintf(bname, sizeof bname, "%s_body", entry);
    bfn = LLVMAddFunction(c->mod, bname, body_ty);
    LLVMSetLinkage(bfn, LLVMInternalLinkage);
    add_attr(c, bfn, (unsigned)LLVMAttributeFunctionIndex, "noinline", 0);
    for (int i = 0; i < n_args; i++) {
        add_attr(c, bfn, (unsigned)i + 1, "noalias", 0);
        add_attr(c, bfn, (unsigned)i + 1, "align", 64);
        add_attr(c, bfn, (unsigned)i + 1, "nonnull", 0);
    }
    /* entry: unpack bufs[] and call the body */
    {
        LLVMBuilderRef b = c->b;
        LLVMValueRef bufs = LLVMGetParam(efn, 0);
        bargs = at_malloc((size_t)(n_args + 2) * sizeof *bargs);
        if (bargs == NULL) {
            cfail(c, AT_ENOMEM, "out of memory");
            return;
        }
        LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(c->ctx, efn, "entry"));
        for (int i = 0; i < n_args; i++) {
            LLVMValueRef idx = ci64(c, i);
            LLVMValueRef p = LLVMBuildInBoundsGEP2(b, c->ptr, bufs, &idx, 1, "");
            bargs[i] = LLVMBuildLoad2(b, c->ptr, p, "");
        }
        bargs[n_args] = LLVMGetParam(efn, 1);
        bargs[n_args + 1] = LLVMGetParam(efn, 2);
        LLVMBuildRet(b, LLVMBuildCall2(b, body_ty, bfn, bargs, (unsigned)(n_args + 2), ""));
        at_free(bargs);
    }
    /* body */
    c->fn = bfn;
    LLVMPositionBuilderAtEnd(c->b, LLVMAppendBasicBlockInContext(c->ctx, bfn, "entry"));
    for (int i = 0; i < ir->n_bufs; i++)
        if (ir->bufs[i].arg >= 0)
            c->buf[i] = LLVMGetParam(bfn, (unsigned)ir->bufs[i].arg);
    c->ws = LLVMGetParam(bfn, (unsigned)n_args);
    c->par = LLVMGetParam(bfn, (unsigned)n_args + 1);
    c->status = LLVMBuildAlloca(c->b, c->i32, "status");
    LLVMBuildStore(c->b, ci32(c, 0), c->status);
    alloc_temps(c, -1, c->ws);
    emit_stmt(c, ir->body);
    if (!c->err)
        LLVMBuildRet(c->b, LLVMBuildLoad2(c->b, c->i32, c->status, ""));
    /* every function: the target's CPU and features, no NaNs assumed away (we keep IEEE) */
    for (LLVMValueRef f = LLVMGetFirstFunction(c->mod); f; f = LLVMGetNextFunction(f)) {
        if (LLVMCountBasicBlocks(f) == 0)
            continue;
        add_str_attr(c, f, "target-cpu", c->tgt->cpu);
        if (c->tgt->features[0])
            add_str_attr(c, f, "target-features", c->tgt->features);
        add_attr(c, f, (unsigned)LLVMAttributeFunctionIndex, "nounwind", 0);
    }
}

static LLVMTargetMachineRef make_tm(const kn_target *t, char *errmsg, size_t errmsg_size)
{
    LLVMTargetRef tgt;
    char *err = NULL;
    kn__llvm_init();
    if (LLVMGetTargetFromTriple(t->triple, &tgt, &err) != 0) {
        kn__fail(errmsg, errmsg_size, AT_ECODEGEN, "unknown triple %s: %s", t->triple,
                 err ? err : "");
        LLVMDisposeMessage(err);
        return NULL;
    }
    return LLVMCreateTargetMachine(tgt, t->triple, t->cpu, t->features,
                                   t->quick_build ? LLVMCodeGenLevelNone
                                                  : LLVMCodeGenLevelAggressive,
                                   LLVMRelocPIC, LLVMCodeModelSmall);
}

/* Generate, verify and optimise (passes: 0 none, 1 the quick build's cleanup, 2 -O3); on
** success c->mod holds the module. */
static at_err generate(cg *c, const kn_ir *ir, const kn_target *t, const char *entry,
                       LLVMTargetMachineRef tm, int passes)
{
    char *msg = NULL;
    c->ir = ir;
    c->tgt = t;
    c->ctx = LLVMContextCreate();
    c->mod = LLVMModuleCreateWithNameInContext("at_kernel", c->ctx);
    c->b = LLVMCreateBuilderInContext(c->ctx);
    c->i1 = LLVMInt1TypeInContext(c->ctx);
    c->i8 = LLVMInt8TypeInContext(c->ctx);
    c->i32 = LLVMInt32TypeInContext(c->ctx);
    c->i64 = LLVMInt64TypeInContext(c->ctx);
    c->f32 = LLVMFloatTypeInContext(c->ctx);
    c->f64 = LLVMDoubleTypeInContext(c->ctx);
    c->ptr = LLVMPointerTypeInContext(c->ctx, 0);
    c->vd = LLVMVoidTypeInContext(c->ctx);
    c->vec_var = -1;
    LLVMSetTarget(c->mod, t->triple);
    {
        LLVMTargetDataRef td = LLVMCreateTargetDataLayout(tm);
        char *dl = LLVMCopyStringRepOfTargetData(td);
        LLVMSetDataLayout(c->mod, dl);
        LLVMDisposeMessage(dl);
        LLVMDisposeTargetData(td);
    }
    /* the kernel, then the pre-transform of rewritten weights (if any) */
    for (const kn_ir *f = ir; f && !c->err; f = f->pre) {
        char name[96];
        int64_t ws_fixed = c->ws_fixed, ws_per_thread = c->ws_per_thread;
        snprintf(name, sizeof name, "%s%s", entry, f == ir ? "" : "_pre");
        at_free(c->var);
        at_free(c->buf);
        at_free(c->tbaa);
        at_free(c->buf_off);
        c->ir = f;
        c->n_tasks_fn = f == ir ? 0 : 1000;
        c->in_pre = f != ir;
        c->var = at_calloc((size_t)f->n_vars + 1, sizeof *c->var);
        c->buf = at_calloc((size_t)f->n_bufs + 1, sizeof *c->buf);
        c->tbaa = at_calloc((size_t)f->n_bufs + 1, sizeof *c->tbaa);
        c->buf_off = at_calloc((size_t)f->n_bufs + 1, sizeof *c->buf_off);
        if (!c->var || !c->buf || !c->tbaa || !c->buf_off) {
            cfail(c, AT_ENOMEM, "out of memory");
            return c->err;
        }
        setup_tbaa(c);
        plan_workspace(c);
        if (f != ir) {
            if (c->ws_fixed || c->ws_per_thread) {
                cfail(c, AT_ECODEGEN, "the pre-transform needs a workspace");
                return c->err;
            }
            c->ws_fixed = ws_fixed;
            c->ws_per_thread = ws_per_thread;
        }
        emit_module(c, name);
    }
    c->ir = ir;
    if (c->err)
        return c->err;
    if (LLVMVerifyModule(c->mod, LLVMReturnStatusAction, &msg)) {
        cfail(c, AT_ECODEGEN, "LLVM rejects the generated module: %.400s", msg ? msg : "");
        LLVMDisposeMessage(msg);
        return c->err;
    }
    LLVMDisposeMessage(msg);
    if (passes > 0) {
        LLVMPassBuilderOptionsRef opts = LLVMCreatePassBuilderOptions();
        LLVMErrorRef e;
        /* we vectorize explicitly; LLVM's loop vectorizer only adds code size */
        LLVMPassBuilderOptionsSetLoopVectorization(opts, 0);
        LLVMPassBuilderOptionsSetSLPVectorization(opts, 1);
        /* The quick build still promotes our stack slots to registers and folds the
        ** unrolled blocks' redundant address arithmetic: without it, instruction selection
        ** at -O0 on a block of thousands of loads and stores takes seconds (7.4 s against
        ** 0.07 s for one unrolled convolution, 0.33 s fully optimised). */
        e = LLVMRunPasses(c->mod,
                          passes == 2 ? "default<O3>"
                                      : "function(sroa,early-cse,instcombine,simplifycfg)",
                          tm, opts);
        LLVMDisposePassBuilderOptions(opts);
        if (e) {
            char *em = LLVMGetErrorMessage(e);
            cfail(c, AT_ECODEGEN, "LLVM optimisation failed: %.400s", em);
            LLVMDisposeErrorMessage(em);
            return c->err;
        }
    }
    return AT_OK;
}

static void cg_fini(cg *c)
{
    if (c->b)
        LLVMDisposeBuilder(c->b);
    if (c->mod)
        LLVMDisposeModule(c->mod);
    if (c->ctx)
        LLVMContextDispose(c->ctx);
    at_free(c->var);
    at_free(c->buf);
    at_free(c->tbaa);
    at_free(c->buf_off);
    at_free(c->memo);
}

at_err kn__llvm_build(const kn_ir *ir, const kn_target *target, const char *entry,
                      kn_artifact **out, char *errmsg, size_t errmsg_size)
{
    cg c;
    LLVMTargetMachineRef tm;
    LLVMMemoryBufferRef mb = NULL;
    kn_artifact *a;
    char *msg = NULL;
    double t0 = at_time_mono_s();
    at_err err;
    *out = NULL;
    if (entry == NULL)
        entry = "at_kernel";
    if (strlen(entry) + 4 >= sizeof a->entry)
        return kn__fail(errmsg, errmsg_size, AT_EINVAL, "entry name too long");
    memset(&c, 0, sizeof c);
    c.errmsg = errmsg;
    c.errmsg_size = errmsg_size;
    tm = make_tm(target, errmsg, errmsg_size);
    if (tm == NULL)
        return AT_ECODEGEN;
    err = generate(&c, ir, target, entry, tm, target->quick_build ? 1 : 2);
    if (err == AT_OK &&
        LLVMTargetMachineEmitToMemoryBuffer(tm, c.mod, LLVMObjectFile, &msg, &mb)) {
        err = kn__fail(errmsg, errmsg_size, AT_ECODEGEN, "LLVM cannot emit the object: %.400s",
                       msg ? msg : "");
        LLVMDisposeMessage(msg);
    }
    a = err ? NULL : at_calloc(1, sizeof *a);
    if (err == AT_OK && a == NULL)
        err = AT_ENOMEM;
    if (err == AT_OK) {
        size_t n = LLVMGetBufferSize(mb);
        a->obj = at_malloc(n);
        if (a->obj == NULL) {
            at_free(a);
            a = NULL;
            err = AT_ENOMEM;
        } else {
            memcpy(a->obj, LLVMGetBufferStart(mb), n);
            a->obj_size = n;
            kn__artifact_sig(a, ir, target, entry);
            if (ir->pre) {
                snprintf(a->pre_entry, sizeof a->pre_entry, "%s_pre", entry);
                a->n_pre = ir->pre->n_args / 2;
                for (int k = 0; k < a->n_pre; k++)
                    a->pre_src[k] = ir->pre->arg_src[k];
            }
            a->ws_fixed = c.ws_fixed;
            a->ws_per_thread = c.ws_per_thread;
            a->compile_s = at_time_mono_s() - t0;
        }
    }
    if (mb)
        LLVMDisposeMemoryBuffer(mb);
    cg_fini(&c);
    LLVMDisposeTargetMachine(tm);
    if (err == AT_OK)
        *out = a;
    return err;
}

at_err kn__llvm_verify(const kn_ir *ir, const kn_target *target, char *errmsg,
                       size_t errmsg_size)
{
    cg c;
    LLVMTargetMachineRef tm;
    at_err err;
    memset(&c, 0, sizeof c);
    c.errmsg = errmsg;
    c.errmsg_size = errmsg_size;
    tm = make_tm(target, errmsg, errmsg_size);
    if (tm == NULL)
        return AT_ECODEGEN;
    err = generate(&c, ir, target, "at_kernel", tm, 0);
    cg_fini(&c);
    LLVMDisposeTargetMachine(tm);
    return err;
}

at_err kn_build_llvm_text(const kn_ir *ir, const kn_target *target, int optimized, char **out,
                          char *errmsg, size_t errmsg_size)
{
    cg c;
    LLVMTargetMachineRef tm;
    at_err err;
    *out = NULL;
    memset(&c, 0, sizeof c);
    c.errmsg = errmsg;
    c.errmsg_size = errmsg_size;
    tm = make_tm(target, errmsg, errmsg_size);
    if (tm == NULL)
        return AT_ECODEGEN;
    err = generate(&c, ir, target, "at_kernel", tm, optimized ? 2 : 0);
    if (err == AT_OK) {
        char *s = LLVMPrintModuleToString(c.mod);
        *out = at_strdup(s);
        LLVMDisposeMessage(s);
        if (*out == NULL)
            err = AT_ENOMEM;
    }
    cg_fini(&c);
    LLVMDisposeTargetMachine(tm);
    return err;
}

static const char *llvm_version(void)
{
    return "LLVM " LLVM_VERSION_STRING;
}

const kn_backend_ops kn__llvm_backend = {"llvm", KN_TARGET_LLVM, kn__llvm_build, kn__llvm_verify,
                                         llvm_version, NULL};
