/* cost_model/cm_feature.c -- per-store features of lowered loop IR.
**
** One walk over the statement tree keeps the loops (with the kind code generation really
** gives them: a vectorized loop whose body cannot be vectorized is a serial loop, a serial
** loop inside an auto-unroll budget that fits is unrolled, as kn_llvm.c decides) and the
** if-guards above the current statement.  At each store:
**   - arithmetic is counted in the stored value and its indices, times the iterations of
**     the nest (vector lanes included);
**   - every access (the store, each load) is decomposed into coefficients per enclosing
**     loop ("affine") or marked non-affine for loops under a div/mod/min/max; from those
**     come footprints of every sub-nest, strides, cache lines and reuse;
**   - the arithmetic-intensity curve samples float ops / bytes over the sub-nests.
** Stores into a buffer already seen add their arithmetic to its row and overwrite the
** rest (a reduction's init, then its update).  Nothing here allocates per store: scratch
** arrays live in cm_feats and grow with the IR. */
#include "cost_model/cost_model_int.h"

#include <math.h>
#include <string.h>

static const struct {
    const char *name, *doc;
    int lg;
} feats[CM_N_FEATS] = {
#define X(id, nm, l, d) {nm, d, l},
    CM_FEATURES(X)
#undef X
};

const char *cm_feature_name(int f)
{
    return f >= 0 && f < CM_N_FEATS ? feats[f].name : "?";
}

const char *cm_feature_doc(int f)
{
    return f >= 0 && f < CM_N_FEATS ? feats[f].doc : "";
}

int cm_feature_is_log(int f)
{
    return f >= 0 && f < CM_N_FEATS ? feats[f].lg : 0;
}

/* ---- scratch ---- */

enum { K_SERIAL, K_PAR, K_VEC, K_UNROLL };

typedef struct loop {
    int var;
    int64_t extent;
    int kind;   /* K_* as code generation applies it */
    int budget; /* auto_unroll_max_step */
    int bind;   /* GPU: B_BLOCK, B_THREAD, or B_NONE */
    int axis;   /* GPU: the kn_for_kind it is bound to (-1: none) */
} loop;

enum { B_NONE, B_BLOCK, B_THREAD };

/* The GPU launch being walked (group 7; all 0 for a CPU program). */
typedef struct launch_info {
    double gpu, threads, shared_bytes, local_bytes, syncs;
} launch_info;

typedef struct guard {
    const ss_expr *cond;
    int n_loops; /* loops enclosing the guard */
} guard;

typedef struct access {
    int buf;
    int is_write;
    const ss_expr *index;
    int64_t *coef;    /* per nest level */
    uint8_t *nonlin;  /* per nest level: the variable appears under a non-affine node */
    int any_nonlin;
} access;

typedef struct scratch {
    int cap_vars, cap_acc, cap_guards, cap_bufs;
    loop *loops;        /* cap_vars */
    int n_loops;
    guard *guards;
    int n_guards;
    int *level_of;      /* var -> nest level, -1 */
    int64_t *lo, *hi;   /* var ranges for ss_expr_bounds */
    access *acc;
    int n_acc;
    int64_t *coefs;     /* cap_acc * cap_vars */
    uint8_t *nonlins;   /* cap_acc * cap_vars */
    double *uniq;       /* cap_acc * (cap_vars + 1): footprint in elements per level */
    int *buf_row;       /* buffer -> row, -1 */
    double *acc_rows;   /* rows being built, in doubles: cap_rows * CM_N_FEATS */
    int cap_acc_rows;
} scratch;

typedef struct ex {
    const kn_ir *ir;
    cm_feats *f;
    scratch *s;
    at_err err;
    launch_info launch;
} ex;

void cm_feats_init(cm_feats *f)
{
    memset(f, 0, sizeof *f);
}

static void scratch_free(scratch *s)
{
    if (s == NULL)
        return;
    at_free(s->loops);
    at_free(s->guards);
    at_free(s->level_of);
    at_free(s->lo);
    at_free(s->hi);
    at_free(s->acc);
    at_free(s->coefs);
    at_free(s->nonlins);
    at_free(s->uniq);
    at_free(s->buf_row);
    at_free(s->acc_rows);
    at_free(s);
}

void cm_feats_fini(cm_feats *f)
{
    at_free(f->rows);
    at_free(f->row_buf);
    scratch_free(f->scratch);
    memset(f, 0, sizeof *f);
}

static at_err grow_rows(cm_feats *f, int n)
{
    float *r;
    int *b;
    int cap;
    if (n <= f->cap_rows)
        return AT_OK;
    cap = f->cap_rows ? f->cap_rows : 4;
    while (cap < n)
        cap *= 2;
    if ((r = at_realloc(f->rows, (size_t)cap * CM_N_FEATS * sizeof *r)) == NULL)
        return AT_ENOMEM;
    f->rows = r;
    if ((b = at_realloc(f->row_buf, (size_t)cap * sizeof *b)) == NULL)
        return AT_ENOMEM;
    f->row_buf = b;
    f->cap_rows = cap;
    return AT_OK;
}

at_err cm_feats_copy(cm_feats *dst, const cm_feats *src)
{
    if (grow_rows(dst, src->n_rows) != AT_OK)
        return AT_ENOMEM;
    if (src->n_rows) {
        memcpy(dst->rows, src->rows, (size_t)src->n_rows * CM_N_FEATS * sizeof *dst->rows);
        memcpy(dst->row_buf, src->row_buf, (size_t)src->n_rows * sizeof *dst->row_buf);
    }
    dst->n_rows = src->n_rows;
    dst->code_size = src->code_size;
    dst->ir_hash = src->ir_hash;
    return AT_OK;
}

/* Make room for an IR with n_vars variables and n_bufs buffers. */
static at_err scratch_fit(cm_feats *f, int n_vars, int n_bufs)
{
    scratch *s = f->scratch;
    if (s == NULL) {
        if ((s = at_calloc(1, sizeof *s)) == NULL)
            return AT_ENOMEM;
        f->scratch = s;
    }
    if (n_vars + 1 > s->cap_vars) {
        int cap = n_vars + 16;
        at_free(s->loops);
        at_free(s->guards);
        at_free(s->level_of);
        at_free(s->lo);
        at_free(s->hi);
        at_free(s->coefs);
        at_free(s->nonlins);
        at_free(s->uniq);
        s->coefs = NULL;
        s->nonlins = NULL;
        s->uniq = NULL;
        s->cap_acc = 0;
        s->loops = at_malloc((size_t)cap * sizeof *s->loops);
        s->guards = at_malloc((size_t)(2 * cap) * sizeof *s->guards);
        s->level_of = at_malloc((size_t)cap * sizeof *s->level_of);
        s->lo = at_calloc((size_t)cap, sizeof *s->lo);
        s->hi = at_calloc((size_t)cap, sizeof *s->hi);
        s->cap_vars = cap;
        if (!s->loops || !s->guards || !s->level_of || !s->lo || !s->hi) {
            s->cap_vars = 0;
            return AT_ENOMEM;
        }
        s->cap_guards = 2 * cap;
    }
    for (int v = 0; v < s->cap_vars; v++)
        s->level_of[v] = -1;
    if (n_bufs > s->cap_bufs) {
        at_free(s->buf_row);
        if ((s->buf_row = at_malloc((size_t)(n_bufs + 8) * sizeof *s->buf_row)) == NULL) {
            s->cap_bufs = 0;
            return AT_ENOMEM;
        }
        s->cap_bufs = n_bufs + 8;
    }
    for (int b = 0; b < n_bufs; b++)
        s->buf_row[b] = -1;
    s->n_loops = s->n_guards = 0;
    return AT_OK;
}

static at_err scratch_fit_acc(scratch *s, int n_acc)
{
    access *a;
    if (n_acc <= s->cap_acc)
        return AT_OK;
    n_acc += 8;
    at_free(s->coefs);
    at_free(s->nonlins);
    at_free(s->uniq);
    s->coefs = at_malloc((size_t)n_acc * (size_t)s->cap_vars * sizeof *s->coefs);
    s->nonlins = at_malloc((size_t)n_acc * (size_t)s->cap_vars * sizeof *s->nonlins);
    s->uniq = at_malloc((size_t)n_acc * (size_t)(s->cap_vars + 1) * sizeof *s->uniq);
    a = at_realloc(s->acc, (size_t)n_acc * sizeof *a);
    if (a)
        s->acc = a;
    if (!s->coefs || !s->nonlins || !s->uniq || !a) {
        s->cap_acc = 0;
        return AT_ENOMEM;
    }
    s->cap_acc = n_acc;
    return AT_OK;
}

static at_err grow_acc_rows(scratch *s, int n)
{
    double *r;
    int cap;
    if (n <= s->cap_acc_rows)
        return AT_OK;
    cap = s->cap_acc_rows ? s->cap_acc_rows * 2 : 8;
    while (cap < n)
        cap *= 2;
    if ((r = at_realloc(s->acc_rows, (size_t)cap * CM_N_FEATS * sizeof *r)) == NULL)
        return AT_ENOMEM;
    s->acc_rows = r;
    s->cap_acc_rows = cap;
    return AT_OK;
}

/* ---- arithmetic ---- */

typedef struct opcount {
    double v[CM_F_GUARD_OPS + 1]; /* indexed by CM_F_FLOAT_MAD .. CM_F_GUARD_OPS */
} opcount;

static int is_float(const ss_expr *e)
{
    return at_dtype_is_float((at_dtype)e->dtype);
}

static void count_ops(const ss_expr *e, opcount *c)
{
    int fl;
    switch ((ss_expr_kind)e->kind) {
    case SS_E_IMM_INT:
    case SS_E_IMM_FLOAT:
    case SS_E_AXIS:
    case SS_E_VAR:
        return;
    case SS_E_LOAD:
        c->v[CM_F_LOADS] += 1;
        break;
    case SS_E_ADD:
    case SS_E_SUB:
        if (is_float(e)) {
            /* a*b + c, c + a*b, a*b - c: one multiply-add, the product not counted again */
            const ss_expr *m = NULL, *o = NULL;
            if (e->a[0]->kind == SS_E_MUL && is_float(e->a[0])) {
                m = e->a[0];
                o = e->a[1];
            } else if (e->kind == SS_E_ADD && e->a[1]->kind == SS_E_MUL && is_float(e->a[1])) {
                m = e->a[1];
                o = e->a[0];
            }
            if (m) {
                c->v[CM_F_FLOAT_MAD] += 1;
                count_ops(m->a[0], c);
                count_ops(m->a[1], c);
                count_ops(o, c);
                return;
            }
            c->v[CM_F_FLOAT_ADDSUB] += 1;
        } else {
            c->v[CM_F_INT_ADDSUB] += 1;
        }
        break;
    case SS_E_NEG:
        c->v[is_float(e) ? CM_F_FLOAT_ADDSUB : CM_F_INT_ADDSUB] += 1;
        break;
    case SS_E_MUL:
        c->v[is_float(e) ? CM_F_FLOAT_MUL : CM_F_INT_MUL] += 1;
        break;
    case SS_E_DIV:
    case SS_E_MOD:
        c->v[is_float(e) ? CM_F_FLOAT_DIVMOD : CM_F_INT_DIVMOD] += 1;
        break;
    case SS_E_MIN:
    case SS_E_MAX:
        c->v[is_float(e) ? CM_F_FLOAT_CMP : CM_F_INT_CMP] += 1;
        break;
    case SS_E_LT:
    case SS_E_LE:
    case SS_E_GT:
    case SS_E_GE:
    case SS_E_EQ:
    case SS_E_NE:
        fl = is_float(e->a[0]);
        c->v[fl ? CM_F_FLOAT_CMP : CM_F_INT_CMP] += 1;
        break;
    case SS_E_AND:
    case SS_E_OR:
    case SS_E_NOT:
        c->v[CM_F_BOOL_OP] += 1;
        break;
    case SS_E_SELECT:
        c->v[CM_F_SELECT_OP] += 1;
        break;
    case SS_E_CAST:
    case SS_E_ABS:
        c->v[is_float(e) || is_float(e->a[0]) ? CM_F_FLOAT_OTHER : CM_F_INT_ADDSUB] += 1;
        break;
    case SS_E_EXP:
    case SS_E_LOG:
    case SS_E_SQRT:
    case SS_E_TANH:
    case SS_E_ERF:
    case SS_E_SIGMOID:
        c->v[CM_F_FLOAT_MATH] += 1;
        break;
    case SS_N_EXPR_KINDS:
        return;
    }
    for (int i = 0; i < e->n; i++)
        count_ops(e->a[i], c);
}

static double total_ops(const ss_expr *e)
{
    opcount c;
    double t = 0;
    memset(&c, 0, sizeof c);
    count_ops(e, &c);
    for (int i = CM_F_FLOAT_MAD; i <= CM_F_SELECT_OP; i++)
        t += c.v[i];
    return t;
}

/* ---- loop kinds as code generation applies them ---- */

/* ---- accesses ---- */

/* Add mult * (affine part of e) to a->coef; variables under anything else are non-affine. */
static void mark_nonlin(const ex *x, access *a, const ss_expr *e)
{
    if (e->kind == SS_E_VAR) {
        int l = e->id >= 0 && e->id < x->ir->n_vars ? x->s->level_of[e->id] : -1;
        if (l >= 0) {
            a->nonlin[l] = 1;
            a->any_nonlin = 1;
        }
        return;
    }
    for (int i = 0; i < e->n; i++)
        mark_nonlin(x, a, e->a[i]);
}

static void decompose(const ex *x, access *a, const ss_expr *e, int64_t mult)
{
    switch ((ss_expr_kind)e->kind) {
    case SS_E_IMM_INT:
        return;
    case SS_E_VAR: {
        int l = e->id >= 0 && e->id < x->ir->n_vars ? x->s->level_of[e->id] : -1;
        if (l >= 0)
            a->coef[l] += mult;
        return;
    }
    case SS_E_ADD:
        decompose(x, a, e->a[0], mult);
        decompose(x, a, e->a[1], mult);
        return;
    case SS_E_SUB:
        decompose(x, a, e->a[0], mult);
        decompose(x, a, e->a[1], -mult);
        return;
    case SS_E_NEG:
        decompose(x, a, e->a[0], -mult);
        return;
    case SS_E_MUL:
        if (e->a[1]->kind == SS_E_IMM_INT) {
            decompose(x, a, e->a[0], mult * e->a[1]->v.i);
            return;
        }
        if (e->a[0]->kind == SS_E_IMM_INT) {
            decompose(x, a, e->a[1], mult * e->a[0]->v.i);
            return;
        }
        break;
    default:
        break;
    }
    mark_nonlin(x, a, e);
}

static void collect_loads(ex *x, const ss_expr *e)
{
    scratch *s = x->s;
    if (e->kind == SS_E_LOAD) {
        if (e->id >= 0 && e->id < x->ir->n_bufs && e->n == 1) {
            if (s->n_acc < s->cap_acc) {
                access *a = &s->acc[s->n_acc++];
                a->buf = e->id;
                a->is_write = 0;
                a->index = e->a[0];
            } else {
                s->n_acc++; /* counted: the caller grows the arrays and comes again */
            }
        }
        /* an index may hold loads too (never in today's IR) */
    }
    for (int i = 0; i < e->n; i++)
        collect_loads(x, e->a[i]);
}

/* ---- one store ---- */

static double log_tr(double v)
{
    return v >= 0 ? log2(1 + v) : -log2(1 - v);
}

static double prod_from(const scratch *s, int l)
{
    double p = 1;
    for (int i = l; i < s->n_loops; i++)
        p *= (double)s->loops[i].extent;
    return p;
}

/* Footprint, in elements, of access a over the sub-nest of levels l..n-1. */
static double footprint(const ex *x, const access *a, int l)
{
    const scratch *s = x->s;
    int n = s->n_loops;
    double distinct = 1, span = 1, nl_prod = 1;
    int nonlin = 0;
    /* group levels by |coef|: loops with equal coefficients slide over the same
    ** elements (a convolution's h and r), so their extents add */
    for (int i = l; i < n; i++) {
        int64_t c = a->coef[i] < 0 ? -a->coef[i] : a->coef[i];
        int first = 1;
        double ext;
        if (a->nonlin[i]) {
            nonlin = 1;
            nl_prod *= (double)s->loops[i].extent;
            continue;
        }
        if (c == 0)
            continue;
        for (int j = l; j < i; j++) {
            int64_t cj = a->coef[j] < 0 ? -a->coef[j] : a->coef[j];
            if (!a->nonlin[j] && cj == c) {
                first = 0;
                break;
            }
        }
        span += (double)c * (double)(s->loops[i].extent - 1);
        if (!first)
            continue;
        ext = 1;
        for (int j = i; j < n; j++) {
            int64_t cj = a->coef[j] < 0 ? -a->coef[j] : a->coef[j];
            if (!a->nonlin[j] && cj == c)
                ext += (double)(s->loops[j].extent - 1);
        }
        distinct *= ext;
    }
    if (nonlin) {
        ss_var_ranges r = {x->ir->n_vars, s->lo, s->hi};
        int64_t lo, hi;
        distinct *= nl_prod;
        if (ss_expr_bounds(a->index, &r, &lo, &hi) && hi >= lo)
            span = (double)(hi - lo) + 1;
        else
            span = distinct;
    }
    return distinct < span ? distinct : span;
}

/* Elements contiguous in memory at the innermost of access a over the whole nest. */
static double contiguous(const scratch *s, const access *a)
{
    double run = 1;
    for (int step = 0; step < s->n_loops; step++) {
        double ext = 0;
        for (int i = 0; i < s->n_loops; i++) {
            int64_t c = a->coef[i] < 0 ? -a->coef[i] : a->coef[i];
            if (!a->nonlin[i] && c != 0 && (double)c == run)
                ext += (double)(s->loops[i].extent - 1);
        }
        if (ext == 0)
            break;
        run *= ext + 1;
    }
    return run;
}

/* Position code of a loop (CM_POS_MAP order) for the store. */
enum { P_NONE, P_IN_S, P_MID_S, P_OUT_S, P_IN_R, P_MID_R, P_OUT_R, P_MIXED };

static void loop_group(double *row, int base, const scratch *s, int kind, const int *is_red)
{
    int num = 0, pos = -1;
    double prod = 1, len = 0;
    for (int i = 0; i < s->n_loops; i++) {
        int p, rank_in = 0, rank_out = 0;
        if (s->loops[i].kind != kind)
            continue;
        num++;
        prod *= (double)s->loops[i].extent;
        len = (double)s->loops[i].extent;
        for (int j = 0; j < s->n_loops; j++) {
            if (is_red[j] != is_red[i])
                continue;
            if (j > i)
                rank_in++;
            if (j < i)
                rank_out++;
        }
        p = rank_in == 0 ? P_IN_S : rank_out == 0 ? P_OUT_S : P_MID_S;
        if (is_red[i])
            p += P_IN_R - P_IN_S;
        pos = pos < 0 ? p : pos == p ? p : P_MIXED;
    }
    row[base + 0] = num;
    row[base + 1] = num ? prod : 0;
    row[base + 2] = len;
    for (int k = 0; k < 8; k++)
        row[base + 3 + k] = 0;
    row[base + 3 + (pos < 0 ? P_NONE : pos)] = 1;
}

static void do_store(ex *x, const kn_stmt *st)
{
    scratch *s = x->s;
    const kn_ir *ir = x->ir;
    int n = s->n_loops, row, n_acc, nb = 0;
    double outer = prod_from(s, 0), *r;
    opcount oc;
    double fops;
    int is_red[256], *isr = is_red, scope_level = -1;
    int bufs[64], buf_nacc[64], buf_first[64], buf_rw[2][64];
    double buf_uniq0[64];
    double level_bytes_stack[257], *level_bytes = level_bytes_stack;
    const kn_buf *sb = &ir->bufs[st->buf];
    int vec_level = -1;

    if (n > 255) {
        /* deeper than any real nest: the per-level arrays go to the heap */
        isr = at_malloc((size_t)n * sizeof *isr);
        level_bytes = at_malloc((size_t)(n + 1) * sizeof *level_bytes);
        if (isr == NULL || level_bytes == NULL) {
            at_free(isr == is_red ? NULL : isr);
            at_free(level_bytes == level_bytes_stack ? NULL : level_bytes);
            x->err = AT_ENOMEM;
            return;
        }
    }
    /* accesses: the store first, then every load of the value */
    for (;;) {
        s->n_acc = 0;
        if (s->cap_acc > 0) {
            s->acc[0].buf = st->buf;
            s->acc[0].is_write = 1;
            s->acc[0].index = st->index;
        }
        s->n_acc = 1;
        collect_loads(x, st->value);
        if (s->n_acc <= s->cap_acc)
            break;
        if (scratch_fit_acc(s, s->n_acc) != AT_OK) {
            x->err = AT_ENOMEM;
            goto out;
        }
    }
    n_acc = s->n_acc;
    for (int i = 0; i < n_acc; i++) {
        access *a = &s->acc[i];
        a->coef = s->coefs + (size_t)i * (size_t)s->cap_vars;
        a->nonlin = s->nonlins + (size_t)i * (size_t)s->cap_vars;
        memset(a->coef, 0, (size_t)n * sizeof *a->coef);
        memset(a->nonlin, 0, (size_t)n);
        a->any_nonlin = 0;
        decompose(x, a, a->index, 1);
    }
    /* the row of this buffer */
    row = s->buf_row[st->buf];
    if (row < 0) {
        row = x->f->n_rows;
        if (grow_acc_rows(s, row + 1) != AT_OK || grow_rows(x->f, row + 1) != AT_OK) {
            x->err = AT_ENOMEM;
            goto out;
        }
        memset(s->acc_rows + (size_t)row * CM_N_FEATS, 0, CM_N_FEATS * sizeof(double));
        s->buf_row[st->buf] = row;
        x->f->row_buf[row] = st->buf;
        x->f->n_rows++;
    }
    r = s->acc_rows + (size_t)row * CM_N_FEATS;

    /* group 1: arithmetic (added to what earlier stores of the buffer counted) */
    memset(&oc, 0, sizeof oc);
    count_ops(st->value, &oc);
    count_ops(st->index, &oc);
    fops = 2 * oc.v[CM_F_FLOAT_MAD];
    for (int i = CM_F_FLOAT_ADDSUB; i <= CM_F_FLOAT_OTHER; i++)
        fops += oc.v[i];
    for (int i = CM_F_FLOAT_MAD; i < CM_F_GUARD_OPS; i++)
        r[i] += oc.v[i] * outer;
    for (int g = 0; g < s->n_guards; g++) {
        double p = 1;
        for (int i = 0; i < s->guards[g].n_loops; i++)
            p *= (double)s->loops[i].extent;
        r[CM_F_GUARD_OPS] += total_ops(s->guards[g].cond) * p;
    }

    /* which loops reduce into the stored element; where a temporary is allocated */
    if (sb->arg < 0 && sb->scope_var >= 0 && sb->scope_var < ir->n_vars)
        scope_level = s->level_of[sb->scope_var];
    for (int i = 0; i < n; i++) {
        const access *w = &s->acc[0];
        isr[i] = st->is_update && i > scope_level && w->coef[i] == 0 && !w->nonlin[i];
        if (s->loops[i].kind == K_VEC)
            vec_level = i;
    }
    loop_group(r, CM_F_VEC_NUM, s, K_VEC, isr);
    loop_group(r, CM_F_UNROLL_NUM, s, K_UNROLL, isr);
    loop_group(r, CM_F_PAR_NUM, s, K_PAR, isr);

    /* buffers of the statement */
    for (int i = 0; i < n_acc; i++) {
        int b = s->acc[i].buf, k;
        for (k = 0; k < nb; k++)
            if (bufs[k] == b)
                break;
        if (k == nb) {
            if (nb == (int)AT_ARRAY_LEN(bufs))
                continue;
            bufs[nb] = b;
            buf_nacc[nb] = 0;
            buf_first[nb] = i;
            buf_rw[0][nb] = buf_rw[1][nb] = 0;
            nb++;
        }
        buf_nacc[k]++;
        buf_rw[s->acc[i].is_write][k] = 1;
    }

    /* footprints per access and level, from the innermost level outwards */
    for (int i = 0; i < n; i++)
        s->lo[s->loops[i].var] = s->hi[s->loops[i].var] = 0;
    for (int l = n; l >= 0; l--) {
        if (l < n)
            s->hi[s->loops[l].var] = s->loops[l].extent - 1;
        level_bytes[l] = 0;
        for (int i = 0; i < n_acc; i++)
            s->uniq[(size_t)i * (size_t)(s->cap_vars + 1) + (size_t)l] =
                footprint(x, &s->acc[i], l);
        for (int k = 0; k < nb; k++) {
            double best = 0;
            int eb = at_dtype_bytes(ir->bufs[bufs[k]].dtype);
            for (int i = 0; i < n_acc; i++) {
                double u = s->uniq[(size_t)i * (size_t)(s->cap_vars + 1) + (size_t)l];
                if (s->acc[i].buf == bufs[k] && u > best) {
                    best = u;
                    if (l == 0)
                        buf_first[k] = i;
                }
            }
            if (best > (double)ir->bufs[bufs[k]].n_elems)
                best = (double)ir->bufs[bufs[k]].n_elems;
            level_bytes[l] += best * eb;
            if (l == 0)
                buf_uniq0[k] = best * eb;
        }
    }
    for (int i = 0; i < n; i++)
        s->hi[s->loops[i].var] = 0;

    /* group 2: per buffer, in the order the statement first accesses them (the stored
    ** buffer, then the loads of the value from left to right), so that a buffer keeps its
    ** slot across the schedules of a task; the first CM_TOP_BUFFERS are kept */
    {
        double feat[64][CM_BUF_STRIDE];
        for (int k = 0; k < nb; k++) {
            const kn_buf *kb = &ir->bufs[bufs[k]];
            int eb = at_dtype_bytes(kb->dtype), touch_inner = -1, reuse_level = -1;
            int klevel = kb->arg < 0 && kb->scope_var >= 0 && kb->scope_var < ir->n_vars
                             ? s->level_of[kb->scope_var]
                             : -1;
            double *fv = feat[k], stride = 0, div = 1, lines, ulines, contig, reuse_ct = 0;
            double dis_iter = 0, dis_bytes = 0, bytes = buf_nacc[k] * outer * eb;
            const access *fa = &s->acc[buf_first[k]];
            memset(fv, 0, sizeof feat[k]);
            /* does level i move any access of this buffer? */
            for (int i = n - 1; i >= 0; i--) {
                int touches = i <= klevel; /* a fresh temporary per iteration out there */
                for (int a = 0; a < n_acc && !touches; a++)
                    if (s->acc[a].buf == bufs[k] && (s->acc[a].coef[i] || s->acc[a].nonlin[i]))
                        touches = 1;
                if (touches && touch_inner < 0) {
                    touch_inner = i;
                    stride = 0;
                    for (int a = 0; a < n_acc; a++)
                        if (s->acc[a].buf == bufs[k] && !s->acc[a].nonlin[i] &&
                            s->acc[a].coef[i]) {
                            double c = fabs((double)s->acc[a].coef[i]);
                            stride = stride == 0 || c < stride ? c : stride;
                        }
                }
                if (!touches && touch_inner < 0)
                    div *= (double)s->loops[i].extent;
                if (!touches && reuse_level < 0)
                    reuse_level = i;
            }
            lines = outer / div;
            if (stride > 0)
                lines *= AT_MIN(1.0, stride * eb / CM_CACHE_LINE);
            lines = AT_MAX(lines, 1.0);
            contig = contiguous(s, fa) * eb;
            ulines = buf_uniq0[k] / AT_MIN(contig, (double)CM_CACHE_LINE);
            ulines = AT_MAX(ulines, 1.0);
            fv[CM_F_B0_ACC_READ - CM_F_B0_ACC_READ] = buf_rw[0][k] && !buf_rw[1][k];
            fv[CM_F_B0_ACC_WRITE - CM_F_B0_ACC_READ] = buf_rw[1][k] && !buf_rw[0][k];
            fv[CM_F_B0_ACC_RW - CM_F_B0_ACC_READ] = buf_rw[0][k] && buf_rw[1][k];
            fv[CM_F_B0_BYTES - CM_F_B0_ACC_READ] = bytes;
            fv[CM_F_B0_UNIQUE_BYTES - CM_F_B0_ACC_READ] = buf_uniq0[k];
            fv[CM_F_B0_LINES - CM_F_B0_ACC_READ] = lines;
            fv[CM_F_B0_UNIQUE_LINES - CM_F_B0_ACC_READ] = ulines;
            if (reuse_level >= 0) {
                fv[CM_F_B0_REUSE_LOOP - CM_F_B0_ACC_READ] = 1;
                reuse_ct = (double)s->loops[reuse_level].extent;
                dis_iter = prod_from(s, reuse_level + 1);
                dis_bytes = level_bytes[reuse_level + 1];
            } else if (buf_nacc[k] > 1) {
                fv[CM_F_B0_REUSE_SERIAL - CM_F_B0_ACC_READ] = 1;
                reuse_ct = buf_nacc[k] - 1;
                dis_iter = 1;
                dis_bytes = level_bytes[n];
            } else {
                fv[CM_F_B0_REUSE_NONE - CM_F_B0_ACC_READ] = 1;
            }
            fv[CM_F_B0_REUSE_DIS_ITER - CM_F_B0_ACC_READ] = dis_iter;
            fv[CM_F_B0_REUSE_DIS_BYTES - CM_F_B0_ACC_READ] = dis_bytes;
            fv[CM_F_B0_REUSE_CT - CM_F_B0_ACC_READ] = reuse_ct;
            {
                double dv = reuse_ct > 0 ? reuse_ct : 0.5;
                fv[CM_F_B0_BYTES_D_REUSE - CM_F_B0_ACC_READ] = bytes / dv;
                fv[CM_F_B0_UBYTES_D_REUSE - CM_F_B0_ACC_READ] = buf_uniq0[k] / dv;
                fv[CM_F_B0_LINES_D_REUSE - CM_F_B0_ACC_READ] = lines / dv;
                fv[CM_F_B0_ULINES_D_REUSE - CM_F_B0_ACC_READ] = ulines / dv;
            }
            fv[CM_F_B0_STRIDE - CM_F_B0_ACC_READ] = stride;
            if (vec_level >= 0) {
                int contig_all = 1, gather = 0;
                for (int a = 0; a < n_acc; a++) {
                    const access *ac = &s->acc[a];
                    if (ac->buf != bufs[k])
                        continue;
                    if (ac->nonlin[vec_level] ||
                        (ac->coef[vec_level] != 0 && ac->coef[vec_level] != 1))
                        gather = 1;
                    if (ac->nonlin[vec_level] || ac->coef[vec_level] != 1)
                        contig_all = 0;
                }
                fv[CM_F_B0_VEC_CONTIG - CM_F_B0_ACC_READ] = contig_all;
                fv[CM_F_B0_VEC_GATHER - CM_F_B0_ACC_READ] = gather;
            }
        }
        for (int k = 0; k < CM_TOP_BUFFERS; k++) {
            double *dst = r + CM_F_B0_ACC_READ + k * CM_BUF_STRIDE;
            if (k < nb)
                memcpy(dst, feat[k], sizeof feat[0]);
            else
                memset(dst, 0, sizeof feat[0]);
        }
    }

    /* group 3: arithmetic intensity over the sub-nests, innermost first: sample it where
    ** the cumulative float ops reach k/10 of the nest's, interpolating between levels */
    {
        double total = fops * outer;
        int k = 0;
        for (int c = 0; c < CM_CURVE_N; c++) {
            double target = total * (c + 1) / CM_CURVE_N, v = 0;
            if (total > 0 && n > 0) {
                double ops, ai, pops, pai;
                while (k < n - 1 && fops * prod_from(s, n - 1 - k) < target * (1 - 1e-9))
                    k++;
                ops = fops * prod_from(s, n - 1 - k);
                ai = level_bytes[n - 1 - k] > 0 ? ops / level_bytes[n - 1 - k] : 0;
                v = ai;
                if (k > 0) {
                    pops = fops * prod_from(s, n - k);
                    pai = level_bytes[n - k] > 0 ? pops / level_bytes[n - k] : 0;
                    if (ops > pops)
                        v = pai + (ai - pai) * (target - pops) / (ops - pops);
                }
            }
            r[CM_F_CURVE_0 + c] = v;
        }
    }

    /* group 4: the stored buffer's allocation */
    if (sb->arg < 0) {
        double alloc_outer = scope_level >= 0 ? outer / prod_from(s, scope_level + 1) : 1;
        double size = (double)sb->n_elems * at_dtype_bytes(sb->dtype);
        r[CM_F_ALLOC_SIZE] = size;
        r[CM_F_ALLOC_PROD] = size * alloc_outer;
        r[CM_F_ALLOC_OUTER_PROD] = alloc_outer;
        r[CM_F_ALLOC_INNER_PROD] = outer / alloc_outer;
    } else {
        r[CM_F_ALLOC_SIZE] = r[CM_F_ALLOC_PROD] = 0;
        r[CM_F_ALLOC_OUTER_PROD] = r[CM_F_ALLOC_INNER_PROD] = 0;
    }

    /* group 5: the scope */
    r[CM_F_OUTER_PROD] = outer;
    r[CM_F_NUM_LOOPS] = n;
    r[CM_F_AUTO_UNROLL_MAX_STEP] = n ? s->loops[n - 1].budget : 0;

    /* group 7: the GPU launch */
    {
        double blocks = 1, threads = 1;
        for (int i = 0; i < n; i++) {
            if (s->loops[i].bind == B_BLOCK)
                blocks *= (double)s->loops[i].extent;
            else if (s->loops[i].bind == B_THREAD)
                threads *= (double)s->loops[i].extent;
        }
        r[CM_F_GPU] = x->launch.gpu;
        r[CM_F_GPU_BLOCKS] = x->launch.gpu ? blocks : 0;
        r[CM_F_GPU_THREADS] = x->launch.threads;
        r[CM_F_GPU_STORE_THREADS] = x->launch.gpu ? threads : 0;
        r[CM_F_GPU_SHARED_BYTES] = x->launch.shared_bytes;
        r[CM_F_GPU_LOCAL_BYTES] = x->launch.local_bytes;
        r[CM_F_GPU_SYNCS] = x->launch.syncs;
    }

    /* group 6: the block code generation expands around the store */
    {
        int inner = -1;
        double acc = 1;
        for (int i = n - 1; i >= 0 && inner < 0; i--)
            if (s->loops[i].kind == K_SERIAL || s->loops[i].kind == K_PAR)
                inner = i;
        r[CM_F_INNER_LOOP_LEN] = inner >= 0 ? (double)s->loops[inner].extent : 0;
        r[CM_F_INNER_BODY] = prod_from(s, inner + 1);
        for (int i = inner + 1; i < n; i++)
            if (!isr[i] && (s->acc[0].coef[i] || s->acc[0].nonlin[i]))
                acc *= (double)s->loops[i].extent;
        r[CM_F_ACCUMULATORS] = st->is_update ? acc : 0;
        r[CM_F_CHAIN] = st->is_update ? prod_from(s, inner + 1) / acc : 0;

        /* group 8: the register tile (64-byte registers) and the cache-sized sub-nests */
        {
            const access *w = &s->acc[0];
            int eb = at_dtype_bytes(sb->dtype);
            double lanes = 1, per_reg = eb > 0 ? 64.0 / eb : 16, loads = 0, updates;
            int vl = vec_level > inner ? vec_level : -1;
            if (vl >= 0 && !w->nonlin[vl] && w->coef[vl] == 1)
                lanes = AT_MIN((double)s->loops[vl].extent, per_reg);
            r[CM_F_ACC_REGS] = st->is_update ? acc / lanes : 0;
            updates = prod_from(s, inner + 1);
            if (vl >= 0)
                updates = updates / (double)s->loops[vl].extent *
                          ceil((double)s->loops[vl].extent / per_reg);
            for (int a = 1; a < n_acc; a++) {
                const access *ac = &s->acc[a];
                double c = 1;
                for (int i = inner + 1; i < n; i++) {
                    if (!ac->coef[i] && !ac->nonlin[i])
                        continue;
                    if (i == vl && !ac->nonlin[i] && ac->coef[i] == 1)
                        c *= ceil((double)s->loops[i].extent / per_reg);
                    else
                        c *= (double)s->loops[i].extent;
                }
                loads += c;
            }
            r[CM_F_BLOCK_LOADS] = updates > 0 ? loads / updates : 0;
            r[CM_F_INNER_REDUCE] = inner >= 0 && isr[inner];
            r[CM_F_INNER_UNIT] = 0;
            if (inner >= 0 && vl < 0 && !w->nonlin[inner] && w->coef[inner] == 1) {
                int unit = 1;
                for (int a = 1; a < n_acc && unit; a++)
                    unit = !s->acc[a].nonlin[inner] &&
                           (s->acc[a].coef[inner] == 0 || s->acc[a].coef[inner] == 1);
                r[CM_F_INNER_UNIT] = unit;
            }
            /* group 9: lanes the store's arithmetic runs on, ours or LLVM's, and the
            ** vector instructions that makes */
            {
                double el = 1;
                if (vl >= 0 && lanes > 1)
                    el = (double)s->loops[vl].extent / ceil((double)s->loops[vl].extent / per_reg);
                else if (r[CM_F_INNER_UNIT] > 0)
                    el = AT_MIN((double)s->loops[inner].extent, per_reg);
                r[CM_F_EFF_LANES] = el;
                r[CM_F_LANE_OPS] += fops * outer / el;
            }
            r[CM_F_INNER_FOOT] = inner >= 0 ? level_bytes[inner] : level_bytes[0];
            r[CM_F_AI_L1] = r[CM_F_AI_L2] = 0;
            for (int l = n; l >= 0; l--) {
                double ai = level_bytes[l] > 0 ? fops * prod_from(s, l) / level_bytes[l] : 0;
                if (level_bytes[l] <= 32768)
                    r[CM_F_AI_L1] = ai;
                if (level_bytes[l] <= 1048576)
                    r[CM_F_AI_L2] = ai;
            }
        }
    }
out:
    if (isr != is_red)
        at_free(isr);
    if (level_bytes != level_bytes_stack)
        at_free(level_bytes);
}

static void walk(ex *x, const kn_stmt *st, int in_unrolled)
{
    scratch *s = x->s;
    if (st == NULL || x->err)
        return;
    switch (st->kind) {
    case KN_S_SEQ:
        for (int i = 0; i < st->n && !x->err; i++)
            walk(x, st->items[i], in_unrolled);
        return;
    case KN_S_IF:
        if (s->n_guards == s->cap_guards) {
            x->err = AT_EINVAL; /* more guards than loops and buffers: not a lowered IR */
            return;
        }
        s->guards[s->n_guards].cond = st->cond;
        s->guards[s->n_guards].n_loops = s->n_loops;
        s->n_guards++;
        walk(x, st->body, in_unrolled);
        s->n_guards--;
        return;
    case KN_S_STORE:
        if (st->buf >= 0 && st->buf < x->ir->n_bufs)
            do_store(x, st);
        return;
    case KN_S_FOR: {
        loop *lp = &s->loops[s->n_loops];
        int unrolled = in_unrolled, outer_bound = -1;
        int64_t outer_extent = 1;
        if (st->var < 0 || st->var >= x->ir->n_vars || s->level_of[st->var] >= 0) {
            x->err = AT_EINVAL; /* a malformed IR: a loop variable out of range or reused */
            return;
        }
        lp->var = st->var;
        lp->extent = st->extent > 0 ? st->extent : 1;
        lp->budget = st->unroll_max_step;
        lp->bind = B_NONE;
        lp->axis = -1;
        switch (st->for_kind) {
        case KN_FOR_PARALLEL:
            lp->kind = K_PAR;
            break;
        case KN_FOR_BLOCK_X:
        case KN_FOR_BLOCK_Y:
        case KN_FOR_BLOCK_Z:
        case KN_FOR_THREAD_X:
        case KN_FOR_THREAD_Y:
        case KN_FOR_THREAD_Z:
            lp->kind = K_PAR; /* each iteration on its own block or thread */
            lp->bind = st->for_kind <= KN_FOR_BLOCK_Z ? B_BLOCK : B_THREAD;
            lp->axis = st->for_kind;
            break;
        case KN_FOR_VECTORIZE:
            lp->kind = kn_stmt_vectorizable(st->body, st->var) ? K_VEC : K_SERIAL;
            break;
        case KN_FOR_UNROLL:
            lp->kind = K_UNROLL;
            break;
        default:
            lp->kind = K_SERIAL;
            if (in_unrolled ||
                (st->unroll_max_step > 0 && kn_stmt_unrolled_size(st, st->unroll_max_step) >= 0)) {
                lp->kind = K_UNROLL;
                unrolled = 1;
            }
            break;
        }
        /* A loop bound to the axis an enclosing loop is bound to (a shared stage's loader
        ** inside its consumer's threads) re-binds the same threads: inside it, the
        ** enclosing one stands for no iterations of its own. */
        if (lp->axis >= 0)
            for (int i = s->n_loops - 1; i >= 0 && outer_bound < 0; i--)
                if (s->loops[i].axis == lp->axis)
                    outer_bound = i;
        if (outer_bound >= 0) {
            outer_extent = s->loops[outer_bound].extent;
            s->loops[outer_bound].extent = 1;
        }
        s->level_of[st->var] = s->n_loops;
        s->n_loops++;
        walk(x, st->body, unrolled);
        s->n_loops--;
        s->level_of[st->var] = -1;
        if (outer_bound >= 0)
            s->loops[outer_bound].extent = outer_extent;
        return;
    }
    }
}

/* One GPU launch's totals for group 7: the widest loop bound to each thread axis, the
** shared and per-thread buffers its stores write, the barriers with their loops' trips. */
typedef struct launch_walk {
    const kn_ir *ir;
    int64_t thread_ext[3];
    uint8_t *seen; /* per buffer */
    double shared, local, syncs;
    int64_t red;   /* the largest allreduce's scratch */
} launch_walk;

static void launch_scan(launch_walk *w, const kn_stmt *st, double trips)
{
    if (st == NULL)
        return;
    switch (st->kind) {
    case KN_S_SEQ:
        for (int i = 0; i < st->n; i++)
            launch_scan(w, st->items[i], trips);
        return;
    case KN_S_IF:
        launch_scan(w, st->body, trips);
        return;
    case KN_S_SYNC:
        w->syncs += trips;
        return;
    case KN_S_STORE:
    case KN_S_ALLREDUCE:
        if (st->buf >= 0 && st->buf < w->ir->n_bufs) {
            const kn_buf *b = &w->ir->bufs[st->buf];
            int64_t bytes = b->n_elems * at_dtype_bytes(b->dtype);
            if (st->kind == KN_S_ALLREDUCE) {
                /* the allreduce's scratch in shared memory: a word per thread */
                int64_t red = st->extent * (at_dtype_bytes(b->dtype) == 8 ? 8 : 4);
                if (red > w->red)
                    w->red = red;
            }
            if (w->seen[st->buf])
                return;
            w->seen[st->buf] = 1;
            /* as kn_cuda.c lays out shared memory: each buffer 16-byte aligned */
            if (b->arg < 0 && b->scope == KN_SCOPE_SHARED)
                w->shared += (double)((bytes + 15) / 16 * 16);
            else if (b->arg < 0 && b->scope == KN_SCOPE_LOCAL)
                w->local += (double)bytes;
        }
        return;
    case KN_S_FOR:
        if (st->for_kind >= KN_FOR_THREAD_X && st->for_kind <= KN_FOR_THREAD_Z) {
            int a = st->for_kind - KN_FOR_THREAD_X;
            if (st->extent > w->thread_ext[a])
                w->thread_ext[a] = st->extent;
            launch_scan(w, st->body, trips);
        } else if (st->for_kind >= KN_FOR_BLOCK_X && st->for_kind <= KN_FOR_BLOCK_Z) {
            launch_scan(w, st->body, trips);
        } else {
            launch_scan(w, st->body, trips * (double)(st->extent > 0 ? st->extent : 1));
        }
        return;
    }
}

static at_err launch_of(const kn_ir *ir, const kn_stmt *kernel, launch_info *out)
{
    launch_walk w;
    memset(&w, 0, sizeof w);
    w.ir = ir;
    w.thread_ext[0] = w.thread_ext[1] = w.thread_ext[2] = 1;
    if ((w.seen = at_calloc((size_t)ir->n_bufs + 1, 1)) == NULL)
        return AT_ENOMEM;
    launch_scan(&w, kernel, 1);
    at_free(w.seen);
    out->gpu = 1;
    out->threads = (double)w.thread_ext[0] * (double)w.thread_ext[1] * (double)w.thread_ext[2];
    out->shared_bytes = w.shared + (double)w.red;
    out->local_bytes = w.local;
    out->syncs = w.syncs;
    return AT_OK;
}

at_err cm_features_extract(const kn_ir *ir, cm_feats *f)
{
    ex x;
    scratch *s;
    at_err err;
    f->n_rows = 0;
    f->code_size = kn_ir_code_size(ir);
    f->ir_hash = kn_ir_hash(ir);
    if ((err = scratch_fit(f, ir->n_vars, ir->n_bufs)) != AT_OK)
        return err;
    s = f->scratch;
    if (s->cap_acc == 0 && (err = scratch_fit_acc(s, 8)) != AT_OK)
        return err;
    x.ir = ir;
    x.f = f;
    x.s = s;
    x.err = AT_OK;
    memset(&x.launch, 0, sizeof x.launch);
    if (ir->is_gpu && ir->n_kernels > 0) {
        /* the launches are the items of the body, in order: walk each with its totals */
        for (int k = 0; k < ir->n_kernels && x.err == AT_OK; k++) {
            if ((x.err = launch_of(ir, ir->kernels[k], &x.launch)) == AT_OK)
                walk(&x, ir->kernels[k], 0);
        }
    } else {
        walk(&x, ir->body, 0);
    }
    if (x.err != AT_OK) {
        f->n_rows = 0;
        return x.err;
    }
    if (f->n_rows == 0)
        return AT_EINVAL;
    if (f->sim && !ir->is_gpu) {
        /* group 10, on the first row: the program's counts, and per store run */
        double c[CM_SIM_N], *r0 = s->acc_rows, st;
        if ((err = cm_sim_run(ir, f->sim, c, NULL, 0)) != AT_OK) {
            f->n_rows = 0;
            return err;
        }
        st = c[CM_SIM_STMTS] > 0 ? c[CM_SIM_STMTS] : 1;
        r0[CM_F_SIM_STMTS] = c[CM_SIM_STMTS];
        r0[CM_F_SIM_LINES] = c[CM_SIM_LINES];
        r0[CM_F_SIM_L1_MISSES] = c[CM_SIM_L1_MISSES];
        r0[CM_F_SIM_L1_FAR] = c[CM_SIM_L1_FAR];
        r0[CM_F_SIM_L2_MISSES] = c[CM_SIM_L2_MISSES];
        r0[CM_F_SIM_L2_FAR] = c[CM_SIM_L2_FAR];
        r0[CM_F_SIM_TLB_MISSES] = c[CM_SIM_TLB_MISSES];
        r0[CM_F_SIM_STORE_LINES] = c[CM_SIM_STORE_LINES];
        r0[CM_F_SIM_LINES_PER] = c[CM_SIM_LINES] / st;
        r0[CM_F_SIM_L1_PER] = c[CM_SIM_L1_MISSES] / st;
        r0[CM_F_SIM_L1_FAR_PER] = c[CM_SIM_L1_FAR] / st;
        r0[CM_F_SIM_L2_PER] = c[CM_SIM_L2_MISSES] / st;
        r0[CM_F_SIM_L2_FAR_PER] = c[CM_SIM_L2_FAR] / st;
        r0[CM_F_SIM_TLB_PER] = c[CM_SIM_TLB_MISSES] / st;
        r0[CM_F_SIM_STORE_PER] = c[CM_SIM_STORE_LINES] / st;
        r0[CM_F_SIM_PENALTY] = 4 * c[CM_SIM_L1_MISSES] + 8 * c[CM_SIM_L1_FAR] +
                               20 * c[CM_SIM_L2_MISSES] + 60 * c[CM_SIM_L2_FAR] +
                               10 * c[CM_SIM_TLB_MISSES];
    }
    if (f->code && !ir->is_gpu) {
        /* group 11, on the first row: the program built, its code read back */
        double c[CM_CODE_N], *r0 = s->acc_rows;
        kn_artifact *a;
        if ((err = kn_build(ir, f->code, NULL, &a, NULL, 0)) != AT_OK) {
            f->n_rows = 0;
            return err;
        }
        err = cm_code_run(a, f->code, c, NULL, 0);
        kn_artifact_free(a);
        if (err != AT_OK) {
            f->n_rows = 0;
            return err;
        }
        _Static_assert(CM_F_CODE_CYCLES - CM_F_CODE_FMA_SHARE == CM_CODE_CYCLES,
                       "group 11 follows cm_code_run's order");
        {
            /* the lane columns per useful lane: the statements' multiply-adds */
            double mads = 0;
            for (int r = 0; r < f->n_rows; r++)
                mads += s->acc_rows[(size_t)r * CM_N_FEATS + CM_F_FLOAT_MAD];
            cm_code_per_useful_lane(c, mads);
        }
        for (int k = 0; k < CM_CODE_N; k++)
            r0[CM_F_CODE_FMA_SHARE + k] = c[k];
    }
    for (int r = 0; r < f->n_rows; r++) {
        const double *src = s->acc_rows + (size_t)r * CM_N_FEATS;
        float *dst = f->rows + (size_t)r * CM_N_FEATS;
        for (int i = 0; i < CM_N_FEATS; i++)
            dst[i] = (float)(feats[i].lg ? log_tr(src[i]) : src[i]);
    }
    return AT_OK;
}

at_err cm_features_of_state(const ss_state *st, cm_feats *f, char *errmsg, size_t errmsg_size)
{
    kn_ir *ir;
    at_err err;
    f->n_rows = 0;
    f->code_size = 0;
    f->ir_hash = 0;
    if ((err = kn_lower(st, &ir, errmsg, errmsg_size)) != AT_OK)
        return err;
    err = cm_features_extract(ir, f);
    kn_ir_free(ir);
    return err;
}
