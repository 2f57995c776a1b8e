/* schedule_space/ss_bound.c -- bound inference: which part of each tensor a stage
** computes, and the extents of its loops.
**
** A root stage computes its whole tensor.  A stage P attached at loop L of its consumer C
** computes what C reads of it during one iteration of L: C's loops up to and including L
** are fixed (their variables are symbols), the loops inside L run over their whole range.
** Each of C's op axes is then an interval {min, width, align} built by passing the leaf
** intervals up through C's splits and fuses; P's region in dimension d is the union, over
** C's loads of P, of the interval of the index expression.  Stages are visited from the
** last to the first, so a consumer's own region (if it is attached too) is known first and
** P's region mins are expressed in the variables of the whole attach chain.
**
** An interval's 'align' is a number that divides its min for every value of the symbols
** (0 when the min is exactly 0): it lets floor division and modulo of fused loops stay
** exact instead of widening to the whole range.
**
** GPU: a shared-memory stage (a cache_read named "*.shared") is computed by all the threads
** of a block together, so loops bound to threads or virtual threads do not fix its region:
** those loop variables run over their whole range (in the consumer and in every stage of
** the attach chain), and the region covers the block's tile.  CPU states never bind loops
** to threads, so nothing changes for them. */
#include "ss_int.h"

#include <string.h>

typedef struct ival {
    ss_expr *min;  /* int32 expression in SS_LEAF_VAR variables */
    int64_t w;     /* number of values (>= 1) */
    int64_t align; /* divides min; 0: min == 0 */
} ival;

typedef struct bctx {
    const ss_state *st;
    at_arena *ar;
    int oom;
    int relax; /* loop variables bound to GPU threads run over their range (shared stages) */
} bctx;

static int is_thread_bound(int ann)
{
    return ann == SS_ANN_VTHREAD || ann == SS_ANN_THREAD_X || ann == SS_ANN_THREAD_Y ||
           ann == SS_ANN_THREAD_Z;
}

static int is_shared_stage(const ss_state *st, int s)
{
    const ss_op *op = &st->dag->ops[s];
    size_t n = strlen(op->name);
    return op->tag && strcmp(op->tag, "cache_read") == 0 && n > 7 &&
           strcmp(op->name + n - 7, ".shared") == 0;
}

static int64_t gcd64(int64_t a, int64_t b)
{
    if (a < 0)
        a = -a;
    if (b < 0)
        b = -b;
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static ss_expr *imm(bctx *c, int64_t v)
{
    ss_expr *e = ss_expr_imm_int(c->ar, AT_DT_I32, v);
    if (e == NULL)
        c->oom = 1;
    return e;
}

static int is_zero(const ss_expr *e)
{
    return e && e->kind == SS_E_IMM_INT && e->v.i == 0;
}

static ss_expr *op2(bctx *c, ss_expr_kind k, ss_expr *a, ss_expr *b)
{
    ss_expr *e;
    if (a == NULL || b == NULL) {
        c->oom = 1;
        return NULL;
    }
    if ((k == SS_E_ADD || k == SS_E_SUB) && is_zero(b))
        return a;
    if (k == SS_E_ADD && is_zero(a))
        return b;
    if (k == SS_E_MUL && ((a->kind == SS_E_IMM_INT && a->v.i == 1)))
        return b;
    if (k == SS_E_MUL && ((b->kind == SS_E_IMM_INT && b->v.i == 1)))
        return a;
    if (k == SS_E_MUL && (is_zero(a) || is_zero(b)))
        return imm(c, 0);
    if ((k == SS_E_DIV) && b->kind == SS_E_IMM_INT && b->v.i == 1)
        return a;
    if (a->kind == SS_E_IMM_INT && b->kind == SS_E_IMM_INT) {
        int64_t x = a->v.i, y = b->v.i, r;
        switch (k) {
        case SS_E_ADD: return imm(c, x + y);
        case SS_E_SUB: return imm(c, x - y);
        case SS_E_MUL: return imm(c, x * y);
        case SS_E_DIV:
            r = x / y;
            if ((x % y != 0) && ((x < 0) != (y < 0)))
                r--;
            return imm(c, r);
        case SS_E_MOD:
            r = x % y;
            if (r != 0 && ((r < 0) != (y < 0)))
                r += y;
            return imm(c, r);
        default: break;
        }
    }
    e = ss_expr_op(c->ar, k, a, b);
    if (e == NULL)
        c->oom = 1;
    else
        e->dtype = AT_DT_I32;
    return e;
}

static ival full(bctx *c, int64_t extent)
{
    ival v = {imm(c, 0), extent > 0 ? extent : 1, 0};
    return v;
}

static ival point(ss_expr *min, int64_t align)
{
    ival v = {min, 1, align};
    return v;
}

static int64_t align_add(int64_t a, int64_t b)
{
    /* gcd with 0 as the identity (0 means "exactly zero") */
    return a == 0 ? b : b == 0 ? a : gcd64(a, b);
}

/* floor((min + t) / d) for t in [0, w). */
static ival ival_div(bctx *c, ival x, int64_t d)
{
    ival r;
    if (d == 1)
        return x;
    if (x.align == 0 || x.align % d == 0) {
        r.min = x.align == 0 ? imm(c, 0) : op2(c, SS_E_DIV, x.min, imm(c, d));
        r.w = (x.w - 1) / d + 1;
        r.align = x.align / d;
        return r;
    }
    r.min = op2(c, SS_E_DIV, x.min, imm(c, d));
    r.w = (x.w + d - 2) / d + 1;
    r.align = 1;
    return r;
}

/* (min + t) mod d for t in [0, w); 'extent' bounds the answer when nothing better holds. */
static ival ival_mod(bctx *c, ival x, int64_t d)
{
    int64_t g;
    ival r;
    if (x.align == 0) {
        if (x.w <= d)
            return x; /* [0, w) */
        return full(c, d);
    }
    g = gcd64(x.align, d);
    if (x.w <= g) {
        /* min mod d is a multiple of g and at most d - g: no wrap */
        r.min = op2(c, SS_E_MOD, x.min, imm(c, d));
        r.w = x.w;
        r.align = g;
        return r;
    }
    return full(c, d);
}

/* Interval of an index expression over axis intervals ax[] (NULL result: unknown). */
static int eval(bctx *c, const ss_expr *e, const ival *ax, int n_ax, ival *out)
{
    ival a, b;
    switch (e->kind) {
    case SS_E_IMM_INT:
        *out = point(imm(c, e->v.i), e->v.i < 0 ? -e->v.i : e->v.i);
        return 1;
    case SS_E_AXIS:
        if (e->id < 0 || e->id >= n_ax)
            return 0;
        *out = ax[e->id];
        return 1;
    case SS_E_VAR: {
        /* a loop variable in a region min (relaxed regions only) */
        int vs = e->id / SS_MAX_LEAVES, vq = e->id % SS_MAX_LEAVES;
        const ss_stage *vg;
        const ss_ivar *v;
        if (!c->relax || e->id < 0 || vs >= c->st->n_stages)
            return 0;
        vg = &c->st->stages[vs];
        if (vq >= vg->n_leaves)
            return 0;
        v = &vg->ivars[vg->leaves[vq]];
        if (is_thread_bound(v->ann) && v->extent > 0)
            *out = full(c, v->extent);
        else
            *out = point((ss_expr *)e, 1);
        return 1;
    }
    case SS_E_ADD:
    case SS_E_SUB:
        if (!eval(c, e->a[0], ax, n_ax, &a) || !eval(c, e->a[1], ax, n_ax, &b))
            return 0;
        if (e->kind == SS_E_ADD) {
            out->min = op2(c, SS_E_ADD, a.min, b.min);
            out->align = align_add(a.align, b.align);
        } else {
            out->min = op2(c, SS_E_SUB, a.min, op2(c, SS_E_ADD, b.min, imm(c, b.w - 1)));
            out->align = align_add(align_add(a.align, b.align), b.w - 1);
        }
        out->w = a.w + b.w - 1;
        return 1;
    case SS_E_NEG:
        if (!eval(c, e->a[0], ax, n_ax, &a))
            return 0;
        out->min = op2(c, SS_E_SUB, imm(c, 0), op2(c, SS_E_ADD, a.min, imm(c, a.w - 1)));
        out->w = a.w;
        out->align = align_add(a.align, a.w - 1);
        return 1;
    case SS_E_MUL: {
        const ss_expr *k = NULL, *x = NULL;
        int64_t m;
        if (e->a[0]->kind == SS_E_IMM_INT)
            k = e->a[0], x = e->a[1];
        else if (e->a[1]->kind == SS_E_IMM_INT)
            k = e->a[1], x = e->a[0];
        else
            return 0;
        if (!eval(c, x, ax, n_ax, &a))
            return 0;
        m = k->v.i;
        if (m >= 0) {
            out->min = op2(c, SS_E_MUL, a.min, imm(c, m));
            out->w = (a.w - 1) * m + 1;
            out->align = a.align * m;
        } else {
            out->min = op2(c, SS_E_MUL, op2(c, SS_E_ADD, a.min, imm(c, a.w - 1)), imm(c, m));
            out->w = (a.w - 1) * -m + 1;
            out->align = align_add(a.align * -m, (a.w - 1) * -m);
        }
        if (m == 0)
            *out = point(imm(c, 0), 0);
        return 1;
    }
    case SS_E_DIV:
    case SS_E_MOD:
        if (e->a[1]->kind != SS_E_IMM_INT || e->a[1]->v.i <= 0)
            return 0;
        if (!eval(c, e->a[0], ax, n_ax, &a))
            return 0;
        *out = e->kind == SS_E_DIV ? ival_div(c, a, e->a[1]->v.i) : ival_mod(c, a, e->a[1]->v.i);
        return 1;
    default:
        return 0;
    }
}

/* Intervals of every ivar of stage 'cs' when its leaves at positions <= pos are fixed
** and the others run fully; ivars of unknown extent make the answer 0. */
static int consumer_ivars(bctx *c, int cs, int pos, ival *iv)
{
    const ss_stage *sg = &c->st->stages[cs];
    for (int i = 0; i < sg->n_ivars; i++)
        iv[i] = full(c, 1);
    for (int q = 0; q < sg->n_leaves; q++) {
        int v = sg->leaves[q];
        int64_t e = sg->ivars[v].extent;
        if (e <= 0)
            return 0;
        if (q <= pos && !(c->relax && is_thread_bound(sg->ivars[v].ann)))
            iv[v] = e == 1 ? point(imm(c, 0), 0) : point(ss_expr_var(c->ar, SS_LEAF_VAR(cs, q)), 1);
        else
            iv[v] = full(c, e);
        if (iv[v].min == NULL)
            c->oom = 1;
    }
    for (int r = sg->n_rels - 1; r >= 0; r--) {
        const ss_rel *rel = &sg->rels[r];
        if (rel->kind == SS_REL_SPLIT) {
            int64_t stride[SS_MAX_SPLIT], E = sg->ivars[rel->in[0]].extent;
            ival p = {imm(c, 0), 1, 0};
            if (!ss_rel_strides(sg, rel, stride))
                return 0;
            for (int k = 0; k < rel->n_out; k++) {
                ival ch = iv[rel->out[k]];
                p.min = op2(c, SS_E_ADD, p.min, op2(c, SS_E_MUL, ch.min, imm(c, stride[k])));
                p.w += (ch.w - 1) * stride[k];
                p.align = align_add(p.align, ch.align * stride[k]);
            }
            if (E > 0 && p.w > E)
                p.w = E;
            iv[rel->in[0]] = p;
        } else {
            ival f = iv[rel->out[0]];
            int64_t inner = 1;
            for (int k = rel->n_in - 1; k >= 0; k--) {
                int64_t e = sg->ivars[rel->in[k]].extent;
                ival x;
                if (f.w == 1) {
                    x.min = inner == 1 ? f.min : op2(c, SS_E_DIV, f.min, imm(c, inner));
                    if (k > 0)
                        x.min = op2(c, SS_E_MOD, x.min, imm(c, e));
                    x.w = 1;
                    x.align = f.align == 0 ? 0 : 1;
                } else if ((f.align == 0 || f.align % inner == 0) && f.w % inner == 0) {
                    int64_t q = f.w / inner, a2 = f.align / inner;
                    if (q >= e)
                        x = full(c, e);
                    else if (f.align == 0 || a2 % e == 0)
                        x = (ival){imm(c, 0), q, 0};
                    else if (e % q == 0 && a2 % q == 0)
                        x = (ival){op2(c, SS_E_MOD, op2(c, SS_E_DIV, f.min, imm(c, inner)),
                                       imm(c, e)),
                                   q, q};
                    else
                        x = full(c, e);
                } else if ((f.align == 0 || f.align % inner == 0) && f.w <= inner) {
                    x.min = op2(c, SS_E_DIV, f.min, imm(c, inner));
                    if (k > 0)
                        x.min = op2(c, SS_E_MOD, x.min, imm(c, e));
                    x.w = 1;
                    x.align = 1;
                } else {
                    x = full(c, e);
                }
                if (k == 0 && x.w == 1 && f.w == 1)
                    x.align = f.align == 0 ? 0 : 1;
                iv[rel->in[k]] = x;
                inner *= e;
            }
        }
    }
    return 1;
}

/* ---- inlined bodies ---- */

static ss_expr *inline_rec(const ss_state *st, const ss_expr *e, at_arena *ar, int depth)
{
    ss_expr *kids[SS_MAX_DIMS + 4], *r;
    int changed = 0;
    if (depth > SS_MAX_INLINED_DEPTH || e->n > (int)AT_ARRAY_LEN(kids))
        return NULL;
    for (int i = 0; i < e->n; i++) {
        kids[i] = inline_rec(st, e->a[i], ar, depth + 1);
        if (kids[i] == NULL)
            return NULL;
        changed |= kids[i] != e->a[i];
    }
    if (e->kind == SS_E_LOAD && e->id < st->n_stages && st->stages[e->id].loc == SS_LOC_INLINE) {
        const ss_op *op = &st->dag->ops[e->id];
        ss_expr *body = inline_rec(st, op->body, ar, depth + 1);
        if (body == NULL)
            return NULL;
        return ss_expr_subst(ar, body, kids, e->n, NULL, 0, NULL);
    }
    if (!changed)
        return (ss_expr *)e;
    r = at_arena_alloc(ar, sizeof *r + (size_t)e->n * sizeof(ss_expr *));
    if (r == NULL)
        return NULL;
    memcpy(r, e, sizeof *r);
    for (int i = 0; i < e->n; i++)
        r->a[i] = kids[i];
    return r;
}

ss_expr *ss_state_body(const ss_state *st, int stage, at_arena *arena)
{
    const ss_op *op = &st->dag->ops[stage];
    if (op->kind != SS_OP_COMPUTE)
        return NULL;
    return inline_rec(st, op->body, arena, 0);
}

/* ---- regions ---- */

typedef struct load_list {
    const ss_expr *load[64];
    int n;
} load_list;

static void collect_loads(const ss_expr *e, int tensor, load_list *ll)
{
    if (e->kind == SS_E_LOAD && e->id == tensor && ll->n < (int)AT_ARRAY_LEN(ll->load))
        ll->load[ll->n++] = e;
    for (int i = 0; i < e->n; i++)
        collect_loads(e->a[i], tensor, ll);
}

/* Split a simplified int expression into (rest, constant). */
static void peel_const(bctx *c, ss_expr *e, ss_expr **rest, int64_t *k)
{
    *k = 0;
    *rest = e;
    if (e->kind == SS_E_IMM_INT) {
        *k = e->v.i;
        *rest = NULL;
    } else if ((e->kind == SS_E_ADD || e->kind == SS_E_SUB) && e->a[1]->kind == SS_E_IMM_INT) {
        *k = e->kind == SS_E_ADD ? e->a[1]->v.i : -e->a[1]->v.i;
        *rest = e->a[0];
    }
    (void)c;
}

static at_err region_of(bctx *c, int s, ss_region *regs, ss_region *out, char *errmsg,
                        size_t errmsg_size)
{
    const ss_state *st = c->st;
    const ss_stage *sg = &st->stages[s];
    const ss_op *op = &st->dag->ops[s];
    int cs = sg->attach_stage, pos = -1;
    const ss_stage *cg;
    const ss_op *cop;
    ival iv[SS_MAX_IVARS], ax[SS_MAX_AXES];
    ss_expr *body;
    load_list ll;
    for (int d = 0; d < op->n_dims; d++) {
        out->min[d] = imm(c, 0);
        out->width[d] = op->shape[d];
        out->align[d] = 0;
    }
    if (sg->loc != SS_LOC_AT || op->kind != SS_OP_COMPUTE)
        return AT_OK;
    cg = &st->stages[cs];
    cop = &st->dag->ops[cs];
    for (int q = 0; q < cg->n_leaves; q++)
        if (cg->leaves[q] == sg->attach_ivar)
            pos = q;
    if (pos < 0)
        return ss__fail(errmsg, errmsg_size, AT_ESCHED,
                        "stage %s is attached to a loop of %s that no longer exists", op->name,
                        cop->name);
    c->relax = is_shared_stage(st, s);
    if (!consumer_ivars(c, cs, pos, iv))
        return AT_OK; /* extents unknown (a sketch): the whole tensor */
    for (int a = 0; a < cop->n_axes + cop->n_raxes; a++) {
        ax[a] = iv[a];
        if (a < cop->n_axes && st->stages[cs].loc == SS_LOC_AT && c->relax) {
            /* the consumer's own region, its threads' variables running over their range */
            ival m;
            if (!eval(c, regs[cs].min[a], NULL, 0, &m)) {
                ax[a] = full(c, cop->axes[a].extent);
                continue;
            }
            ax[a].min = op2(c, SS_E_ADD, m.min, iv[a].min);
            ax[a].w = m.w + iv[a].w - 1;
            ax[a].align = align_add(m.align, iv[a].align);
        } else if (a < cop->n_axes && st->stages[cs].loc == SS_LOC_AT) {
            ax[a].min = op2(c, SS_E_ADD, regs[cs].min[a], iv[a].min);
            ax[a].align = (regs[cs].align[a] == 0) ? iv[a].align
                          : iv[a].align == 0       ? regs[cs].align[a]
                                                   : gcd64(regs[cs].align[a], iv[a].align);
        }
    }
    body = ss_state_body(st, cs, c->ar);
    if (body == NULL) {
        c->oom = 1;
        return AT_ENOMEM;
    }
    ll.n = 0;
    collect_loads(body, s, &ll);
    if (ll.n == 0)
        return ss__fail(errmsg, errmsg_size, AT_ESCHED,
                        "stage %s is computed at %s, which does not read it", op->name,
                        cop->name);
    for (int d = 0; d < op->n_dims; d++) {
        ss_expr *base = NULL;
        int64_t lo = 0, hi = 0, al = 0;
        int ok = 1;
        for (int l = 0; l < ll.n && ok; l++) {
            ival v;
            ss_expr *rest, *simp;
            int64_t k;
            if (!eval(c, ll.load[l]->a[d], ax, cop->n_axes + cop->n_raxes, &v)) {
                ok = 0;
                break;
            }
            simp = ss_expr_simplify(c->ar, v.min, NULL);
            if (simp == NULL) {
                c->oom = 1;
                return AT_ENOMEM;
            }
            peel_const(c, simp, &rest, &k);
            if (l == 0) {
                base = rest;
                lo = k;
                hi = k + v.w;
                al = v.align;
            } else if ((base == NULL) == (rest == NULL) &&
                       (base == NULL || ss_expr_equal(base, rest))) {
                lo = AT_MIN(lo, k);
                hi = AT_MAX(hi, k + v.w);
                al = align_add(al, v.align);
                al = align_add(al, k);
            } else {
                ok = 0;
            }
        }
        if (!ok)
            continue; /* the whole dimension */
        if (base == NULL) {
            /* constant region: clamp to the tensor */
            lo = AT_MAX(lo, 0);
            hi = AT_MIN(hi, op->shape[d]);
            if (hi <= lo)
                hi = lo + 1;
            out->min[d] = imm(c, lo);
            out->width[d] = hi - lo;
            out->align[d] = lo;
        } else {
            out->min[d] = lo ? op2(c, SS_E_ADD, base, imm(c, lo)) : base;
            out->width[d] = AT_MIN(hi - lo, op->shape[d]);
            out->align[d] = al == 0 ? 1 : al;
        }
    }
    return c->oom ? AT_ENOMEM : AT_OK;
}

static at_err compute_regions(ss_state *st, at_arena *arena, ss_region *out, int update,
                              char *errmsg, size_t errmsg_size)
{
    bctx c = {st, arena, 0, 0};
    for (int s = st->n_stages - 1; s >= 0; s--) {
        ss_stage *sg = &st->stages[s];
        const ss_op *op = &st->dag->ops[s];
        at_err err = region_of(&c, s, out, &out[s], errmsg, errmsg_size);
        if (err)
            return err;
        if (c.oom)
            return AT_ENOMEM;
        if (!update || op->kind != SS_OP_COMPUTE || sg->loc == SS_LOC_INLINE)
            continue;
        for (int d = 0; d < op->n_axes; d++) {
            sg->region[d] = out[s].width[d];
            sg->ivars[d].extent = out[s].width[d];
        }
        ss__pass_down(sg);
    }
    return AT_OK;
}

at_err ss__infer_bounds(ss_state *st, char *errmsg, size_t errmsg_size)
{
    at_arena ar;
    ss_region *regs;
    at_err err;
    regs = at_malloc((size_t)st->n_stages * sizeof *regs);
    if (regs == NULL)
        return AT_ENOMEM;
    at_arena_init(&ar, 16384);
    err = compute_regions(st, &ar, regs, 1, errmsg, errmsg_size);
    at_arena_fini(&ar);
    at_free(regs);
    if (err == AT_OK) {
        st->bounds_dirty = 0;
        ss__recompute_concrete(st);
    }
    return err;
}

at_err ss_state_regions(const ss_state *st, at_arena *arena, ss_region *out, char *errmsg,
                        size_t errmsg_size)
{
    if (st->bounds_dirty)
        return ss__fail(errmsg, errmsg_size, AT_EINVAL, "bounds are not inferred");
    return compute_regions((ss_state *)st, arena, out, 0, errmsg, errmsg_size);
}
