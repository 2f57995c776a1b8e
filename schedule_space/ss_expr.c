/* schedule_space/ss_expr.c -- expression trees: construction, comparison, printing,
** substitution, and the integer index simplifier used by bound inference and lowering.
**
** The simplifier works on an affine normal form: a sum of coefficient * atom plus a
** constant, where an atom is a VAR/AXIS leaf or an expression that is not affine (a
** floor division or modulo that could not be removed, a product of two variables, ...).
** Floor div/mod by a positive constant d are split into the part that is a multiple of d
** and a rest; when the rest's range lies inside one multiple of d the operation
** disappears.  That is enough for the index arithmetic of split and fuse. */
#include "ss_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    int arity;
} kinds[] = {
#define X(id, name, arity) {name, arity},
    SS_EXPR_MAP(X)
#undef X
};

const char *ss_expr_kind_name(ss_expr_kind k)
{
    return (unsigned)k < SS_N_EXPR_KINDS ? kinds[k].name : "?";
}

int ss_expr_kind_arity(ss_expr_kind k)
{
    return (unsigned)k < SS_N_EXPR_KINDS ? kinds[k].arity : 0;
}

static ss_expr *new_expr(at_arena *arena, ss_expr_kind k, at_dtype dt, int n)
{
    ss_expr *e = at_arena_alloc(arena, sizeof *e + (size_t)n * sizeof(ss_expr *));
    if (e == NULL)
        return NULL;
    e->kind = (uint8_t)k;
    e->dtype = (uint8_t)dt;
    e->n = (uint16_t)n;
    return e;
}

ss_expr *ss_expr_imm_int(at_arena *arena, at_dtype dt, int64_t v)
{
    ss_expr *e = new_expr(arena, SS_E_IMM_INT, dt, 0);
    if (e)
        e->v.i = v;
    return e;
}

ss_expr *ss_expr_imm_float(at_arena *arena, at_dtype dt, double v)
{
    ss_expr *e = new_expr(arena, SS_E_IMM_FLOAT, dt, 0);
    if (e)
        e->v.f = dt == AT_DT_F32 ? (double)(float)v : v;
    return e;
}

ss_expr *ss_expr_axis(at_arena *arena, int axis)
{
    ss_expr *e = new_expr(arena, SS_E_AXIS, AT_DT_I32, 0);
    if (e)
        e->id = axis;
    return e;
}

ss_expr *ss_expr_var(at_arena *arena, int var)
{
    ss_expr *e = new_expr(arena, SS_E_VAR, AT_DT_I32, 0);
    if (e)
        e->id = var;
    return e;
}

ss_expr *ss_expr_load(at_arena *arena, at_dtype dt, int tensor, int n, ss_expr *const *idx)
{
    ss_expr *e;
    for (int i = 0; i < n; i++)
        if (idx[i] == NULL)
            return NULL;
    e = new_expr(arena, SS_E_LOAD, dt, n);
    if (e == NULL)
        return NULL;
    e->id = tensor;
    for (int i = 0; i < n; i++)
        e->a[i] = idx[i];
    return e;
}

static int is_cmp(ss_expr_kind k)
{
    return k >= SS_E_LT && k <= SS_E_NE;
}

ss_expr *ss_expr_op(at_arena *arena, ss_expr_kind k, ss_expr *a, ss_expr *b)
{
    ss_expr *e;
    at_dtype dt;
    if (a == NULL || b == NULL || kinds[k].arity != 2)
        return NULL;
    if (is_cmp(k) || k == SS_E_AND || k == SS_E_OR)
        dt = AT_DT_BOOL;
    else
        dt = (at_dtype)a->dtype;
    e = new_expr(arena, k, dt, 2);
    if (e) {
        e->a[0] = a;
        e->a[1] = b;
    }
    return e;
}

ss_expr *ss_expr_un(at_arena *arena, ss_expr_kind k, ss_expr *a)
{
    ss_expr *e;
    if (a == NULL || kinds[k].arity != 1 || k == SS_E_CAST)
        return NULL;
    e = new_expr(arena, k, k == SS_E_NOT ? AT_DT_BOOL : (at_dtype)a->dtype, 1);
    if (e)
        e->a[0] = a;
    return e;
}

ss_expr *ss_expr_select(at_arena *arena, ss_expr *c, ss_expr *a, ss_expr *b)
{
    ss_expr *e;
    if (c == NULL || a == NULL || b == NULL)
        return NULL;
    e = new_expr(arena, SS_E_SELECT, (at_dtype)a->dtype, 3);
    if (e) {
        e->a[0] = c;
        e->a[1] = a;
        e->a[2] = b;
    }
    return e;
}

ss_expr *ss_expr_cast(at_arena *arena, at_dtype dt, ss_expr *a)
{
    ss_expr *e;
    if (a == NULL)
        return NULL;
    e = new_expr(arena, SS_E_CAST, dt, 1);
    if (e)
        e->a[0] = a;
    return e;
}

int ss_expr_equal(const ss_expr *a, const ss_expr *b)
{
    if (a == b)
        return 1;
    if (a->kind != b->kind || a->dtype != b->dtype || a->n != b->n || a->id != b->id)
        return 0;
    if (a->kind == SS_E_IMM_INT && a->v.i != b->v.i)
        return 0;
    if (a->kind == SS_E_IMM_FLOAT && memcmp(&a->v.f, &b->v.f, sizeof a->v.f) != 0)
        return 0;
    for (int i = 0; i < a->n; i++)
        if (!ss_expr_equal(a->a[i], b->a[i]))
            return 0;
    return 1;
}

uint64_t ss_expr_hash(const ss_expr *e)
{
    uint64_t h = 1469598103934665603ull;
    h = (h ^ e->kind) * 1099511628211ull;
    h = (h ^ e->dtype) * 1099511628211ull;
    h = (h ^ (uint64_t)(uint32_t)e->id) * 1099511628211ull;
    if (e->kind == SS_E_IMM_INT)
        h = (h ^ (uint64_t)e->v.i) * 1099511628211ull;
    else if (e->kind == SS_E_IMM_FLOAT)
        h ^= at_hash64(&e->v.f, sizeof e->v.f);
    for (int i = 0; i < e->n; i++)
        h = (h ^ ss_expr_hash(e->a[i])) * 1099511628211ull;
    return h;
}

/* ---- printing ---- */

/* Binding strength for the printer (higher binds tighter); matches the parser. */
static int prec(const ss_expr *e)
{
    switch (e->kind) {
    case SS_E_SELECT: return 1;
    case SS_E_OR: return 2;
    case SS_E_AND: return 3;
    case SS_E_LT: case SS_E_LE: case SS_E_GT: case SS_E_GE: case SS_E_EQ: case SS_E_NE:
        return 4;
    case SS_E_ADD: case SS_E_SUB: return 5;
    case SS_E_MUL: case SS_E_DIV: case SS_E_MOD: return 6;
    case SS_E_NOT: case SS_E_NEG: return 7;
    case SS_E_IMM_INT: case SS_E_IMM_FLOAT:
        return e->kind == SS_E_IMM_INT ? (e->v.i < 0 ? 7 : 9) : (e->v.f < 0 ? 7 : 9);
    default: return 9;
    }
}

void ss__print_float(at_buf *b, double v, at_dtype dt)
{
    char tmp[48];
    if (isinf(v)) {
        at_buf_puts(b, v > 0 ? "inf" : "-inf");
        return;
    }
    if (isnan(v)) {
        at_buf_puts(b, "nan");
        return;
    }
    snprintf(tmp, sizeof tmp, "%.*g", dt == AT_DT_F32 ? 9 : 17, v);
    if (dt == AT_DT_F32) {
        /* shortest text that reads back to the same float */
        for (int p = 1; p <= 9; p++) {
            char t2[48];
            snprintf(t2, sizeof t2, "%.*g", p, v);
            if ((float)strtod(t2, NULL) == (float)v) {
                memcpy(tmp, t2, sizeof t2);
                break;
            }
        }
    }
    at_buf_puts(b, tmp);
    if (strpbrk(tmp, ".eEn") == NULL)
        at_buf_puts(b, ".0");
}

static void print_rec(at_buf *b, const ss_expr *e, int min_prec, ss_name_fn an, ss_name_fn vn,
                      ss_name_fn tn, void *ctx)
{
    int p = prec(e), paren = p < min_prec;
    const char *nm;
    if (paren)
        at_buf_putc(b, '(');
    switch (e->kind) {
    case SS_E_IMM_INT:
        if (e->dtype == AT_DT_BOOL)
            at_buf_puts(b, e->v.i ? "true" : "false");
        else if (e->dtype != AT_DT_I32)
            at_buf_printf(b, "%s(%lld)", at_dtype_name((at_dtype)e->dtype), (long long)e->v.i);
        else
            at_buf_printf(b, "%lld", (long long)e->v.i);
        break;
    case SS_E_IMM_FLOAT:
        if (e->dtype != AT_DT_F32) {
            at_buf_printf(b, "%s(", at_dtype_name((at_dtype)e->dtype));
            ss__print_float(b, e->v.f, (at_dtype)e->dtype);
            at_buf_putc(b, ')');
        } else {
            ss__print_float(b, e->v.f, AT_DT_F32);
        }
        break;
    case SS_E_AXIS:
        nm = an ? an(ctx, e->id) : NULL;
        if (nm)
            at_buf_puts(b, nm);
        else
            at_buf_printf(b, "ax%d", e->id);
        break;
    case SS_E_VAR:
        nm = vn ? vn(ctx, e->id) : NULL;
        if (nm)
            at_buf_puts(b, nm);
        else
            at_buf_printf(b, "v%d", e->id);
        break;
    case SS_E_LOAD:
        nm = tn ? tn(ctx, e->id) : NULL;
        if (nm)
            at_buf_puts(b, nm);
        else
            at_buf_printf(b, "t%d", e->id);
        at_buf_putc(b, '[');
        for (int i = 0; i < e->n; i++) {
            if (i)
                at_buf_puts(b, ", ");
            print_rec(b, e->a[i], 0, an, vn, tn, ctx);
        }
        at_buf_putc(b, ']');
        break;
    case SS_E_ADD: case SS_E_SUB: case SS_E_MUL: case SS_E_DIV: case SS_E_MOD:
    case SS_E_LT: case SS_E_LE: case SS_E_GT: case SS_E_GE: case SS_E_EQ: case SS_E_NE:
    case SS_E_AND: case SS_E_OR:
        /* left-associative: the right operand needs parentheses at equal precedence;
        ** comparisons do not chain, so both sides need them */
        print_rec(b, e->a[0], is_cmp(e->kind) ? p + 1 : p, an, vn, tn, ctx);
        at_buf_printf(b, " %s ", kinds[e->kind].name);
        print_rec(b, e->a[1], p + 1, an, vn, tn, ctx);
        break;
    case SS_E_NOT:
        at_buf_putc(b, '!');
        print_rec(b, e->a[0], 7, an, vn, tn, ctx);
        break;
    case SS_E_NEG:
        /* a unary '-' or '!' under it goes without parentheses, "--x" and not "-(-x)",
        ** whose parentheses would count twice against the parser's nesting limit (a DAG
        ** the parser accepted printed as one it refuses); a negative literal keeps them */
        at_buf_putc(b, '-');
        print_rec(b, e->a[0], e->a[0]->kind == SS_E_NEG || e->a[0]->kind == SS_E_NOT ? 7 : 8,
                  an, vn, tn, ctx);
        break;
    case SS_E_SELECT:
        at_buf_puts(b, "select(");
        for (int i = 0; i < 3; i++) {
            if (i)
                at_buf_puts(b, ", ");
            print_rec(b, e->a[i], 0, an, vn, tn, ctx);
        }
        at_buf_putc(b, ')');
        break;
    case SS_E_CAST:
        at_buf_printf(b, "%s(", at_dtype_name((at_dtype)e->dtype));
        print_rec(b, e->a[0], 0, an, vn, tn, ctx);
        at_buf_putc(b, ')');
        break;
    default: /* functions: min, max, exp, ... */
        at_buf_printf(b, "%s(", kinds[e->kind].name);
        for (int i = 0; i < e->n; i++) {
            if (i)
                at_buf_puts(b, ", ");
            print_rec(b, e->a[i], 0, an, vn, tn, ctx);
        }
        at_buf_putc(b, ')');
        break;
    }
    if (paren)
        at_buf_putc(b, ')');
}

void ss_expr_print(at_buf *b, const ss_expr *e, ss_name_fn axis_name, ss_name_fn var_name,
                   ss_name_fn tensor_name, void *ctx)
{
    print_rec(b, e, 0, axis_name, var_name, tensor_name, ctx);
}

/* ---- substitution ---- */

ss_expr *ss_expr_subst(at_arena *arena, const ss_expr *e, ss_expr *const *subst_axis,
                       int n_axis, ss_expr *const *subst_var, int n_var, const int *tensor_map)
{
    ss_expr *r, *kids[SS_MAX_DIMS * 2 + 4];
    int changed = 0;
    if (e->kind == SS_E_AXIS && subst_axis && e->id < n_axis && subst_axis[e->id])
        return subst_axis[e->id];
    if (e->kind == SS_E_VAR && subst_var && e->id < n_var && subst_var[e->id])
        return subst_var[e->id];
    if (e->n == 0)
        return (ss_expr *)e;
    if (e->n > (int)AT_ARRAY_LEN(kids))
        return NULL;
    for (int i = 0; i < e->n; i++) {
        kids[i] = ss_expr_subst(arena, e->a[i], subst_axis, n_axis, subst_var, n_var,
                                tensor_map);
        if (kids[i] == NULL)
            return NULL;
        changed |= kids[i] != e->a[i];
    }
    if (e->kind == SS_E_LOAD && tensor_map && tensor_map[e->id] != e->id)
        changed = 1;
    if (!changed)
        return (ss_expr *)e;
    r = new_expr(arena, (ss_expr_kind)e->kind, (at_dtype)e->dtype, e->n);
    if (r == NULL)
        return NULL;
    r->id = e->id;
    r->v = e->v;
    if (e->kind == SS_E_LOAD && tensor_map)
        r->id = tensor_map[e->id];
    for (int i = 0; i < e->n; i++)
        r->a[i] = kids[i];
    return r;
}

/* ---- bounds ---- */

static int64_t floordiv64(int64_t a, int64_t b)
{
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0)))
        q--;
    return q;
}

static int64_t floormod64(int64_t a, int64_t b)
{
    return a - floordiv64(a, b) * b;
}

int ss_expr_bounds(const ss_expr *e, const ss_var_ranges *r, int64_t *lo, int64_t *hi)
{
    int64_t l0, h0, l1, h1;
    switch (e->kind) {
    case SS_E_IMM_INT:
        *lo = *hi = e->v.i;
        return 1;
    case SS_E_VAR:
        if (r == NULL || e->id >= r->n || e->id < 0)
            return 0;
        *lo = r->lo[e->id];
        *hi = r->hi[e->id];
        return 1;
    case SS_E_ADD:
    case SS_E_SUB:
    case SS_E_MUL:
    case SS_E_MIN:
    case SS_E_MAX:
        if (!ss_expr_bounds(e->a[0], r, &l0, &h0) || !ss_expr_bounds(e->a[1], r, &l1, &h1))
            return 0;
        if (e->kind == SS_E_ADD) {
            *lo = l0 + l1, *hi = h0 + h1;
        } else if (e->kind == SS_E_SUB) {
            *lo = l0 - h1, *hi = h0 - l1;
        } else if (e->kind == SS_E_MIN) {
            *lo = AT_MIN(l0, l1), *hi = AT_MIN(h0, h1);
        } else if (e->kind == SS_E_MAX) {
            *lo = AT_MAX(l0, l1), *hi = AT_MAX(h0, h1);
        } else {
            int64_t c[4] = {l0 * l1, l0 * h1, h0 * l1, h0 * h1};
            *lo = *hi = c[0];
            for (int i = 1; i < 4; i++) {
                *lo = AT_MIN(*lo, c[i]);
                *hi = AT_MAX(*hi, c[i]);
            }
        }
        return 1;
    case SS_E_DIV:
    case SS_E_MOD:
        if (e->dtype == AT_DT_F32 || e->a[1]->kind != SS_E_IMM_INT || e->a[1]->v.i <= 0)
            return 0;
        if (!ss_expr_bounds(e->a[0], r, &l0, &h0)) {
            if (e->kind == SS_E_MOD) {
                *lo = 0, *hi = e->a[1]->v.i - 1;
                return 1;
            }
            return 0;
        }
        if (e->kind == SS_E_DIV) {
            *lo = floordiv64(l0, e->a[1]->v.i);
            *hi = floordiv64(h0, e->a[1]->v.i);
        } else if (floordiv64(l0, e->a[1]->v.i) == floordiv64(h0, e->a[1]->v.i)) {
            *lo = floormod64(l0, e->a[1]->v.i);
            *hi = floormod64(h0, e->a[1]->v.i);
        } else {
            *lo = 0, *hi = e->a[1]->v.i - 1;
        }
        return 1;
    case SS_E_SELECT:
        if (!ss_expr_bounds(e->a[1], r, &l0, &h0) || !ss_expr_bounds(e->a[2], r, &l1, &h1))
            return 0;
        *lo = AT_MIN(l0, l1), *hi = AT_MAX(h0, h1);
        return 1;
    default:
        return 0;
    }
}

int ss_expr_linear_in(const ss_expr *e, int var, int64_t *coef)
{
    int64_t c0, c1;
    switch (e->kind) {
    case SS_E_VAR:
        *coef = e->id == var;
        return 1;
    case SS_E_IMM_INT:
    case SS_E_IMM_FLOAT:
    case SS_E_AXIS:
        *coef = 0;
        return 1;
    case SS_E_ADD:
    case SS_E_SUB:
        if (!ss_expr_linear_in(e->a[0], var, &c0) || !ss_expr_linear_in(e->a[1], var, &c1))
            return 0;
        *coef = e->kind == SS_E_ADD ? c0 + c1 : c0 - c1;
        return 1;
    case SS_E_NEG:
        if (!ss_expr_linear_in(e->a[0], var, &c0))
            return 0;
        *coef = -c0;
        return 1;
    case SS_E_MUL:
        if (!ss_expr_linear_in(e->a[0], var, &c0) || !ss_expr_linear_in(e->a[1], var, &c1))
            return 0;
        if (c0 != 0 && c1 != 0)
            return 0;
        if (c0 == 0 && c1 == 0) {
            *coef = 0;
            return 1;
        }
        if (c0 != 0 && e->a[1]->kind == SS_E_IMM_INT) {
            *coef = c0 * e->a[1]->v.i;
            return 1;
        }
        if (c1 != 0 && e->a[0]->kind == SS_E_IMM_INT) {
            *coef = c1 * e->a[0]->v.i;
            return 1;
        }
        return 0;
    default:
        for (int i = 0; i < e->n; i++) {
            if (!ss_expr_linear_in(e->a[i], var, &c0) || c0 != 0)
                return 0;
        }
        *coef = 0;
        return 1;
    }
}

/* ---- simplification ---- */

#define AFF_MAX 24

typedef struct affine {
    int n;
    int ok;                   /* 0 after overflow of the term table */
    const ss_expr *atom[AFF_MAX];
    int64_t coef[AFF_MAX];
    int64_t c;
} affine;

typedef struct simp {
    at_arena *arena;
    const ss_var_ranges *r;
    int oom;
} simp;

static void aff_add_term(affine *f, const ss_expr *atom, int64_t coef)
{
    if (coef == 0)
        return;
    for (int i = 0; i < f->n; i++) {
        if (ss_expr_equal(f->atom[i], atom)) {
            f->coef[i] += coef;
            if (f->coef[i] == 0) {
                f->n--;
                f->atom[i] = f->atom[f->n];
                f->coef[i] = f->coef[f->n];
            }
            return;
        }
    }
    if (f->n == AFF_MAX) {
        f->ok = 0;
        return;
    }
    f->atom[f->n] = atom;
    f->coef[f->n++] = coef;
}

static void aff_add(affine *f, const affine *g, int64_t scale)
{
    for (int i = 0; i < g->n; i++)
        aff_add_term(f, g->atom[i], g->coef[i] * scale);
    f->c += g->c * scale;
    f->ok &= g->ok;
}

static ss_expr *aff_build(simp *s, const affine *f);
static void to_affine(simp *s, const ss_expr *e, affine *f);

static int aff_bounds(simp *s, const affine *f, int64_t *lo, int64_t *hi)
{
    int64_t l = f->c, h = f->c;
    for (int i = 0; i < f->n; i++) {
        int64_t al, ah;
        if (!ss_expr_bounds(f->atom[i], s->r, &al, &ah))
            return 0;
        if (f->coef[i] >= 0) {
            l += f->coef[i] * al;
            h += f->coef[i] * ah;
        } else {
            l += f->coef[i] * ah;
            h += f->coef[i] * al;
        }
    }
    *lo = l, *hi = h;
    return 1;
}

/* An atom for a non-affine node whose children are simplified. */
static const ss_expr *simplify_children(simp *s, const ss_expr *e)
{
    ss_expr *r;
    int changed = 0;
    ss_expr *kids[16];
    if (e->n == 0 || e->n > 16)
        return e;
    for (int i = 0; i < e->n; i++) {
        kids[i] = ss_expr_simplify(s->arena, e->a[i], s->r);
        if (kids[i] == NULL) {
            s->oom = 1;
            return e;
        }
        changed |= kids[i] != e->a[i];
    }
    if (!changed)
        return e;
    r = new_expr(s->arena, (ss_expr_kind)e->kind, (at_dtype)e->dtype, e->n);
    if (r == NULL) {
        s->oom = 1;
        return e;
    }
    r->id = e->id;
    r->v = e->v;
    for (int i = 0; i < e->n; i++)
        r->a[i] = kids[i];
    return r;
}

static void divmod_affine(simp *s, const ss_expr *e, affine *f)
{
    int64_t d = e->a[1]->v.i, lo, hi;
    affine x, q, rest;
    memset(&x, 0, sizeof x);
    x.ok = 1;
    to_affine(s, e->a[0], &x);
    memset(&q, 0, sizeof q);
    memset(&rest, 0, sizeof rest);
    q.ok = rest.ok = 1;
    if (!x.ok) {
        aff_add_term(f, simplify_children(s, e), 1);
        return;
    }
    for (int i = 0; i < x.n; i++) {
        aff_add_term(&q, x.atom[i], floordiv64(x.coef[i], d));
        aff_add_term(&rest, x.atom[i], floormod64(x.coef[i], d));
    }
    q.c = floordiv64(x.c, d);
    rest.c = floormod64(x.c, d);
    if (aff_bounds(s, &rest, &lo, &hi) && floordiv64(lo, d) == floordiv64(hi, d)) {
        int64_t k = floordiv64(lo, d);
        if (e->kind == SS_E_DIV) {
            aff_add(f, &q, 1);
            f->c += k;
        } else {
            aff_add(f, &rest, 1);
            f->c -= k * d;
        }
        return;
    }
    /* keep the operation on the rest only: (d*q + rest) / d = q + rest / d */
    {
        ss_expr *re = aff_build(s, &rest), *de, *node;
        if (re == NULL)
            return;
        de = ss_expr_imm_int(s->arena, (at_dtype)e->dtype, d);
        node = ss_expr_op(s->arena, (ss_expr_kind)e->kind, re, de);
        if (node == NULL) {
            s->oom = 1;
            return;
        }
        node->dtype = e->dtype;
        if (e->kind == SS_E_DIV)
            aff_add(f, &q, 1);
        aff_add_term(f, node, 1);
    }
}

static void to_affine(simp *s, const ss_expr *e, affine *f)
{
    affine a, b;
    switch (e->kind) {
    case SS_E_IMM_INT:
        f->c += e->v.i;
        return;
    case SS_E_VAR:
    case SS_E_AXIS:
        aff_add_term(f, e, 1);
        return;
    case SS_E_ADD:
    case SS_E_SUB:
        to_affine(s, e->a[0], f);
        memset(&b, 0, sizeof b);
        b.ok = 1;
        to_affine(s, e->a[1], &b);
        aff_add(f, &b, e->kind == SS_E_ADD ? 1 : -1);
        return;
    case SS_E_NEG:
        memset(&b, 0, sizeof b);
        b.ok = 1;
        to_affine(s, e->a[0], &b);
        aff_add(f, &b, -1);
        return;
    case SS_E_MUL:
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        a.ok = b.ok = 1;
        to_affine(s, e->a[0], &a);
        to_affine(s, e->a[1], &b);
        if (a.ok && b.ok && a.n == 0) {
            aff_add(f, &b, a.c);
            return;
        }
        if (a.ok && b.ok && b.n == 0) {
            aff_add(f, &a, b.c);
            return;
        }
        aff_add_term(f, simplify_children(s, e), 1);
        return;
    case SS_E_DIV:
    case SS_E_MOD:
        if (e->dtype != AT_DT_F32 && e->dtype != AT_DT_F64 && e->a[1]->kind == SS_E_IMM_INT &&
            e->a[1]->v.i > 0) {
            if (e->a[1]->v.i == 1) {
                if (e->kind == SS_E_DIV)
                    to_affine(s, e->a[0], f);
                return;
            }
            divmod_affine(s, e, f);
            return;
        }
        aff_add_term(f, simplify_children(s, e), 1);
        return;
    case SS_E_MIN:
    case SS_E_MAX: {
        int64_t l0, h0, l1, h1;
        const ss_expr *c = simplify_children(s, e);
        if (ss_expr_bounds(c->a[0], s->r, &l0, &h0) &&
            ss_expr_bounds(c->a[1], s->r, &l1, &h1)) {
            int first = e->kind == SS_E_MIN ? h0 <= l1 : l0 >= h1;
            int second = e->kind == SS_E_MIN ? h1 <= l0 : l1 >= h0;
            if (first || second) {
                to_affine(s, first ? c->a[0] : c->a[1], f);
                return;
            }
        }
        aff_add_term(f, c, 1);
        return;
    }
    default:
        aff_add_term(f, simplify_children(s, e), 1);
        return;
    }
}

static int atom_order(const ss_expr *a, const ss_expr *b)
{
    /* VARs first by id, then AXIS by id, then everything else by hash */
    int ra = a->kind == SS_E_VAR ? 0 : a->kind == SS_E_AXIS ? 1 : 2;
    int rb = b->kind == SS_E_VAR ? 0 : b->kind == SS_E_AXIS ? 1 : 2;
    uint64_t ha, hb;
    if (ra != rb)
        return ra - rb;
    if (ra < 2)
        return a->id - b->id;
    ha = ss_expr_hash(a), hb = ss_expr_hash(b);
    return ha < hb ? -1 : ha > hb;
}

static ss_expr *aff_build(simp *s, const affine *f)
{
    int order[AFF_MAX];
    ss_expr *acc = NULL;
    for (int i = 0; i < f->n; i++)
        order[i] = i;
    for (int i = 1; i < f->n; i++) /* insertion sort: few terms */
        for (int j = i; j > 0 && atom_order(f->atom[order[j - 1]], f->atom[order[j]]) > 0;
             j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (int k = 0; k < f->n; k++) {
        int i = order[k];
        ss_expr *term = (ss_expr *)f->atom[i];
        int64_t c = f->coef[i];
        int neg = acc && c < 0;
        if (neg)
            c = -c;
        if (c != 1)
            term = ss_expr_op(s->arena, SS_E_MUL, term, ss_expr_imm_int(s->arena, AT_DT_I32, c));
        if (term == NULL) {
            s->oom = 1;
            return NULL;
        }
        acc = acc ? ss_expr_op(s->arena, neg ? SS_E_SUB : SS_E_ADD, acc, term) : term;
        if (acc == NULL) {
            s->oom = 1;
            return NULL;
        }
    }
    if (acc == NULL)
        acc = ss_expr_imm_int(s->arena, AT_DT_I32, f->c);
    else if (f->c > 0)
        acc = ss_expr_op(s->arena, SS_E_ADD, acc, ss_expr_imm_int(s->arena, AT_DT_I32, f->c));
    else if (f->c < 0)
        acc = ss_expr_op(s->arena, SS_E_SUB, acc, ss_expr_imm_int(s->arena, AT_DT_I32, -f->c));
    if (acc == NULL)
        s->oom = 1;
    return acc;
}

ss_expr *ss_expr_simplify(at_arena *arena, const ss_expr *e, const ss_var_ranges *r)
{
    simp s = {arena, r, 0};
    affine f;
    ss_expr *out;
    if (e->dtype != AT_DT_I32 && e->dtype != AT_DT_I64)
        return (ss_expr *)simplify_children(&s, e);
    memset(&f, 0, sizeof f);
    f.ok = 1;
    to_affine(&s, e, &f);
    if (s.oom)
        return NULL;
    if (!f.ok)
        return (ss_expr *)e;
    out = aff_build(&s, &f);
    if (out == NULL || s.oom)
        return NULL;
    return out;
}

int ss_expr_depth(const ss_expr *e, int cap)
{
    /* depth-first with an explicit stack of (node, depth of the node) */
    struct item {
        const ss_expr *e;
        int d;
    } *st, *grown;
    int n = 0, size = 64, best = 0;
    if (e == NULL)
        return 0;
    if ((st = at_malloc((size_t)size * sizeof *st)) == NULL)
        return -1;
    st[n++] = (struct item){e, 0};
    while (n > 0) {
        struct item it = st[--n];
        int k = it.e->n;
        if (k > 0) {
            if (it.d + 1 > best)
                best = it.d + 1;
            if (best >= cap)
                break;
        }
        if (n + k > size) {
            while (n + k > size)
                size *= 2;
            if ((grown = at_realloc(st, (size_t)size * sizeof *st)) == NULL) {
                at_free(st);
                return -1;
            }
            st = grown;
        }
        for (int i = 0; i < k; i++)
            if (it.e->a[i])
                st[n++] = (struct item){it.e->a[i], it.d + 1};
    }
    at_free(st);
    return best < cap ? best : cap;
}
