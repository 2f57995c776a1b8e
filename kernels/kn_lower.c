/* kernels/kn_lower.c -- lowering a schedule state to loop IR.
**
** One recursive emitter per stage, driven by its leaf loops and the stages attached to
** them.  For a stage:
**   - every leaf loop of extent > 1 gets a loop variable; op axes are rebuilt from the
**     leaves through the splits and fuses (local coordinates), then offset by the stage's
**     region min (global coordinates);
**   - the body is the op's expression with inlined stages substituted, axes replaced by
**     their global values, and every load turned into a flat index into the producer's
**     buffer, relative to the producer's region, clamped when it might leave the buffer
**     (this is what makes padding selects safe);
**   - a store writes the stage's buffer at its local coordinates, under guards for splits
**     that do not divide and for regions that stick out of the tensor;
**   - a reduction gets an init nest before its first reduction loop (over copies of the
**     spatial loops inside that point) and an update store in the full nest;
**   - stages attached at a loop are emitted at the start of that loop's body; their
**     buffers live there (per task when inside a parallel loop).
** GPU states (loops bound to blocks, threads or virtual threads) take a few more steps,
** in separate functions at the end of this file: buffer scopes, barriers around shared
** stages, cross-thread reductions, one launch per root stage and the virtual-thread pass.
** A CPU state never reaches them: its lowering is the same as before GPUs existed. */
#include "kernels_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdatomic.h>
#include <string.h>

typedef struct lower {
    const ss_state *st;
    kn_ir *ir;
    at_arena *ar;
    ss_region *regs;
    int *stage_buf;       /* buffer of each stage's tensor, -1 if inlined */
    ss_expr **leafsub;    /* SS_LEAF_VAR(stage, pos) -> expression of that loop variable */
    int n_leafsub;
    int var_cap;
    int64_t *lo, *hi;     /* ranges of ir vars (for the simplifier) */
    int cur_par;          /* enclosing parallel loop variable, -1 */
    int cur_scope;        /* innermost enclosing emitted loop variable, -1 */
    int in_vector;        /* inside a vectorized loop */
    int gpu;              /* the state binds loops to GPU blocks/threads */
    char *errmsg;
    size_t errmsg_size;
    at_err err;
} lower;

static void lfail(lower *L, at_err err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void lfail(lower *L, at_err err, const char *fmt, ...)
{
    va_list ap;
    if (L->err)
        return;
    L->err = err;
    if (L->errmsg && L->errmsg_size) {
        va_start(ap, fmt);
        vsnprintf(L->errmsg, L->errmsg_size, fmt, ap);
        va_end(ap);
    }
}

static void *lalloc(lower *L, size_t n)
{
    void *p = at_arena_alloc(L->ar, n);
    if (p == NULL)
        lfail(L, AT_ENOMEM, "out of memory");
    return p;
}

static ss_expr *chk(lower *L, ss_expr *e)
{
    if (e == NULL)
        lfail(L, AT_ENOMEM, "out of memory");
    return e;
}

static ss_expr *imm(lower *L, int64_t v)
{
    return chk(L, ss_expr_imm_int(L->ar, AT_DT_I32, v));
}

static ss_expr *iop(lower *L, ss_expr_kind k, ss_expr *a, ss_expr *b)
{
    ss_expr *e;
    if (a == NULL || b == NULL)
        return NULL;
    e = chk(L, ss_expr_op(L->ar, k, a, b));
    return e;
}

static ss_var_ranges ranges(lower *L)
{
    ss_var_ranges r = {L->ir->n_vars, L->lo, L->hi};
    return r;
}

static ss_expr *simp(lower *L, ss_expr *e)
{
    ss_var_ranges r = ranges(L);
    if (e == NULL)
        return NULL;
    return chk(L, ss_expr_simplify(L->ar, e, &r));
}

static int new_var(lower *L, const char *name, int64_t extent)
{
    kn_ir *ir = L->ir;
    if (ir->n_vars == L->var_cap) {
        int cap = L->var_cap ? L->var_cap * 2 : 64;
        kn_var *v = at_realloc(ir->vars, (size_t)cap * sizeof *v);
        int64_t *lo = at_realloc(L->lo, (size_t)cap * sizeof *lo);
        int64_t *hi;
        if (v)
            ir->vars = v;
        if (lo)
            L->lo = lo;
        hi = at_realloc(L->hi, (size_t)cap * sizeof *hi);
        if (hi)
            L->hi = hi;
        if (v == NULL || lo == NULL || hi == NULL) {
            lfail(L, AT_ENOMEM, "out of memory");
            return -1;
        }
        L->var_cap = cap;
    }
    ir->vars[ir->n_vars].name = at_arena_strdup(L->ar, name);
    ir->vars[ir->n_vars].extent = extent;
    L->lo[ir->n_vars] = 0;
    L->hi[ir->n_vars] = extent - 1;
    return ir->n_vars++;
}

static int new_buf(lower *L, const char *name, at_dtype dt, int n_dims, const int64_t *shape,
                   int arg, int stage)
{
    kn_ir *ir = L->ir;
    kn_buf *b;
    kn_buf *nb = at_realloc(ir->bufs, (size_t)(ir->n_bufs + 1) * sizeof *nb);
    if (nb == NULL) {
        lfail(L, AT_ENOMEM, "out of memory");
        return -1;
    }
    ir->bufs = nb;
    b = &ir->bufs[ir->n_bufs];
    memset(b, 0, sizeof *b);
    b->name = name;
    b->dtype = dt;
    b->n_dims = n_dims;
    b->n_elems = 1;
    for (int d = 0; d < n_dims; d++) {
        b->shape[d] = shape[d];
        b->n_elems *= shape[d];
    }
    b->arg = arg;
    b->stage = stage;
    b->par_var = L->cur_par;
    b->scope_var = L->cur_scope;
    return ir->n_bufs++;
}

static kn_stmt *new_stmt(lower *L, kn_stmt_kind k)
{
    kn_stmt *s = lalloc(L, sizeof *s);
    if (s)
        s->kind = (uint8_t)k;
    return s;
}

static kn_stmt *seq(lower *L, kn_stmt **items, int n)
{
    kn_stmt *s;
    int m = 0;
    for (int i = 0; i < n; i++)
        m += items[i] != NULL;
    if (m == 1)
        for (int i = 0; i < n; i++)
            if (items[i])
                return items[i];
    s = new_stmt(L, KN_S_SEQ);
    if (s == NULL)
        return NULL;
    s->items = lalloc(L, (size_t)(m ? m : 1) * sizeof *s->items);
    if (s->items == NULL)
        return NULL;
    for (int i = 0; i < n; i++)
        if (items[i])
            s->items[s->n++] = items[i];
    return s;
}

/* Local values of the op axes of stage 's' from leaf values (pass up the relations). */
static void axis_values(lower *L, const ss_stage *sg, ss_expr *const *leafval, ss_expr **val)
{
    for (int i = 0; i < sg->n_ivars; i++)
        val[i] = NULL;
    for (int q = 0; q < sg->n_leaves; q++)
        val[sg->leaves[q]] = leafval[q];
    for (int r = sg->n_rels - 1; r >= 0 && !L->err; r--) {
        const ss_rel *rel = &sg->rels[r];
        if (rel->kind == SS_REL_SPLIT) {
            int64_t stride[SS_MAX_SPLIT];
            ss_expr *acc = NULL;
            ss_rel_strides(sg, rel, stride);
            for (int k = 0; k < rel->n_out; k++) {
                ss_expr *t = val[rel->out[k]] ? val[rel->out[k]] : imm(L, 0);
                if (stride[k] != 1)
                    t = iop(L, SS_E_MUL, t, imm(L, stride[k]));
                acc = acc ? iop(L, SS_E_ADD, acc, t) : t;
            }
            val[rel->in[0]] = simp(L, acc);
        } else {
            ss_expr *f = val[rel->out[0]] ? val[rel->out[0]] : imm(L, 0);
            int64_t inner = 1;
            for (int k = rel->n_in - 1; k >= 0; k--) {
                int64_t e = sg->ivars[rel->in[k]].extent;
                ss_expr *t = f;
                if (inner != 1)
                    t = iop(L, SS_E_DIV, t, imm(L, inner));
                if (k > 0)
                    t = iop(L, SS_E_MOD, t, imm(L, e));
                val[rel->in[k]] = simp(L, t);
                inner *= e;
            }
        }
    }
}

static ss_expr *and_cond(lower *L, ss_expr *c, ss_expr *d)
{
    if (d == NULL)
        return c;
    return c ? iop(L, SS_E_AND, c, d) : d;
}

/* Guard 'e < limit' (and 'e >= 0' when 'check_lo') unless the ranges prove it. */
static ss_expr *guard(lower *L, ss_expr *cond, ss_expr *e, int64_t limit, int check_lo)
{
    ss_var_ranges r = ranges(L);
    int64_t lo, hi;
    if (e == NULL)
        return cond;
    if (ss_expr_bounds(e, &r, &lo, &hi)) {
        if (lo >= 0 || !check_lo)
            check_lo = 0;
        if (hi < limit && !check_lo)
            return cond;
        if (hi < limit)
            return and_cond(L, cond, iop(L, SS_E_GE, e, imm(L, 0)));
        if (!check_lo)
            return and_cond(L, cond, iop(L, SS_E_LT, e, imm(L, limit)));
    }
    if (check_lo)
        cond = and_cond(L, cond, iop(L, SS_E_GE, e, imm(L, 0)));
    return and_cond(L, cond, iop(L, SS_E_LT, e, imm(L, limit)));
}

/* Guards of a stage's store: splits whose loops cover more than their parent, and
** regions that may stick out of the tensor. */
static ss_expr *store_guards(lower *L, const ss_stage *sg, const ss_op *op, ss_expr **local,
                             ss_expr **global, int spatial_only)
{
    ss_expr *cond = NULL;
    for (int r = 0; r < sg->n_rels; r++) {
        const ss_rel *rel = &sg->rels[r];
        int64_t cover = 1, E;
        if (rel->kind != SS_REL_SPLIT)
            continue;
        if (spatial_only && sg->ivars[rel->in[0]].kind != SS_ITER_SPATIAL)
            continue;
        for (int k = 0; k < rel->n_out; k++)
            cover *= sg->ivars[rel->out[k]].extent;
        E = sg->ivars[rel->in[0]].extent;
        if (cover > E && local[rel->in[0]])
            cond = guard(L, cond, local[rel->in[0]], E, 0);
    }
    for (int a = 0; global && a < op->n_axes; a++)
        if (global[a])
            cond = guard(L, cond, global[a], op->shape[a], 1);
    return cond;
}

static ss_expr *reduce_identity(lower *L, ss_reduce red, at_dtype dt)
{
    int f = at_dtype_is_float(dt);
    ss_expr *e = NULL;
    switch (red) {
    case SS_RED_SUM: e = f ? ss_expr_imm_float(L->ar, dt, 0) : ss_expr_imm_int(L->ar, dt, 0); break;
    case SS_RED_PROD: e = f ? ss_expr_imm_float(L->ar, dt, 1) : ss_expr_imm_int(L->ar, dt, 1); break;
    case SS_RED_MAX:
        e = f ? ss_expr_imm_float(L->ar, dt, -1.0 / 0.0) : ss_expr_imm_int(L->ar, dt, INT32_MIN);
        break;
    case SS_RED_MIN:
        e = f ? ss_expr_imm_float(L->ar, dt, 1.0 / 0.0) : ss_expr_imm_int(L->ar, dt, INT32_MAX);
        break;
    default: break;
    }
    return chk(L, e);
}

static ss_expr_kind combiner(ss_reduce red)
{
    switch (red) {
    case SS_RED_SUM: return SS_E_ADD;
    case SS_RED_PROD: return SS_E_MUL;
    case SS_RED_MAX: return SS_E_MAX;
    default: return SS_E_MIN;
    }
}

/* Flat index of local coordinates in a buffer of 'shape'. */
static ss_expr *flatten(lower *L, int n, ss_expr **idx, const int64_t *shape)
{
    ss_expr *acc = imm(L, 0);
    int64_t stride = 1;
    for (int d = n - 1; d >= 0; d--) {
        ss_expr *t = idx[d];
        if (stride != 1)
            t = iop(L, SS_E_MUL, t, imm(L, stride));
        acc = iop(L, SS_E_ADD, acc, t);
        stride *= shape[d];
    }
    return simp(L, acc);
}

/* Rewrite a value expression: axes are already global values; loads become flat loads. */
/* A copy of 'e' whose operands are kids[0..e->n) (in the lowering's arena). */
static ss_expr *with_kids(lower *L, const ss_expr *e, ss_expr *const *kids)
{
    ss_expr *r = lalloc(L, sizeof *r + (size_t)e->n * sizeof(ss_expr *));
    if (r == NULL)
        return NULL;
    memcpy(r, e, sizeof *r);
    for (int i = 0; i < e->n; i++)
        r->a[i] = kids[i];
    return r;
}

static ss_expr *rewrite_loads(lower *L, const ss_expr *e)
{
    ss_expr *kids[SS_MAX_DIMS + 4], *r;
    int changed = 0;
    if (L->err)
        return NULL;
    if (e->kind == SS_E_LOAD) {
        int t = e->id, b = L->stage_buf[t];
        const kn_buf *buf;
        ss_expr *idx[SS_MAX_DIMS], *flat;
        if (b < 0) {
            lfail(L, AT_ESCHED, "internal: load of %s, which has no buffer",
                  L->st->dag->ops[t].name);
            return NULL;
        }
        buf = &L->ir->bufs[b];
        for (int d = 0; d < e->n; d++) {
            ss_var_ranges rg = ranges(L);
            int64_t lo, hi;
            ss_expr *mn = ss_expr_subst(L->ar, L->regs[t].min[d], NULL, 0, L->leafsub,
                                        L->n_leafsub, NULL);
            ss_expr *ix = rewrite_loads(L, e->a[d]);
            if (mn == NULL || ix == NULL)
                return chk(L, NULL);
            ix = simp(L, iop(L, SS_E_SUB, ix, mn));
            if (ix == NULL)
                return NULL;
            /* a load that may leave the buffer (under a select arm) is clamped */
            if (!ss_expr_bounds(ix, &rg, &lo, &hi) || lo < 0 || hi >= buf->shape[d]) {
                ix = iop(L, SS_E_MAX, iop(L, SS_E_MIN, ix, imm(L, buf->shape[d] - 1)), imm(L, 0));
                if (ix == NULL)
                    return NULL;
            }
            idx[d] = ix;
        }
        flat = flatten(L, e->n, idx, buf->shape);
        r = chk(L, ss_expr_load(L->ar, (at_dtype)e->dtype, b, 1, &flat));
        return r;
    }
    if (e->n == 0)
        return (ss_expr *)e;
    for (int i = 0; i < e->n; i++) {
        kids[i] = rewrite_loads(L, e->a[i]);
        if (kids[i] == NULL)
            return NULL;
        changed |= kids[i] != e->a[i];
    }
    return changed ? with_kids(L, e, kids) : (ss_expr *)e;
}

static kn_stmt *emit_stage(lower *L, int s);
static int gpu_is_shared_stage(const ss_state *st, int s);
static kn_stmt *gpu_sync(lower *L);
static uint8_t gpu_for_kind(int ann);
static int gpu_cross_thread_leaf(const ss_state *st, int s);
static kn_stmt *gpu_emit_cross_thread(lower *L, int s, int q_t);
static int gpu_state(const ss_state *st);
static kn_stmt *gpu_finish_kernel(lower *L, kn_stmt *k);

/* Stages attached at leaf 'q' of stage 's', in stage order. */
static kn_stmt *emit_attached(lower *L, int s, int q)
{
    const ss_state *st = L->st;
    int iv = st->stages[s].leaves[q];
    kn_stmt *items[64];
    int n = 0, first_shared = -1, last_shared = -1;
    for (int t = 0; t < st->n_stages && !L->err; t++) {
        const ss_stage *tg = &st->stages[t];
        if (tg->loc != SS_LOC_AT || tg->attach_stage != s || tg->attach_ivar != iv)
            continue;
        if (L->in_vector) {
            lfail(L, AT_ESCHED, "stage %s is computed inside a vectorized loop of %s",
                  st->dag->ops[t].name, st->dag->ops[s].name);
            return NULL;
        }
        if (n + 2 >= (int)AT_ARRAY_LEN(items)) {
            lfail(L, AT_ESCHED, "too many stages attached at one loop");
            return NULL;
        }
        if (L->gpu && gpu_is_shared_stage(st, t)) {
            /* a barrier before the first shared stage (the threads are done reading the
            ** previous tile) and after the last (the new tile is complete) */
            if (first_shared < 0) {
                first_shared = n;
                items[n++] = gpu_sync(L);
            }
            items[n++] = emit_stage(L, t);
            last_shared = n;
            items[n++] = gpu_sync(L);
            continue;
        }
        items[n++] = emit_stage(L, t);
    }
    /* one barrier between consecutive shared stages is enough: keep the last */
    for (int i = first_shared + 1; first_shared >= 0 && i < last_shared; i++)
        if (items[i] && items[i]->kind == KN_S_SYNC)
            items[i] = NULL;
    return n ? seq(L, items, n) : NULL;
}

typedef struct nest {
    const ss_stage *sg;
    const ss_op *op;
    int s;
    int first_red;        /* position of the first leaf carrying a reduction, or n_leaves */
    int vars[SS_MAX_LEAVES];
    kn_stmt *store;       /* the innermost store (update or plain), guarded */
    kn_stmt *init;        /* the init nest, or NULL */
} nest;

static kn_stmt *build_loops(lower *L, nest *N, int q)
{
    const ss_stage *sg = N->sg;
    kn_stmt *items[3], *body, *f;
    int saved_scope = L->cur_scope, saved_par = L->cur_par, saved_vec = L->in_vector;
    const ss_ivar *v;
    if (L->err)
        return NULL;
    if (q == sg->n_leaves)
        return N->store;
    v = &sg->ivars[sg->leaves[q]];
    if (N->vars[q] >= 0) {
        L->cur_scope = N->vars[q];
        if (v->ann == SS_ANN_PARALLEL) {
            if (L->cur_par >= 0) {
                lfail(L, AT_ESCHED, "nested parallel loops: %s has a parallel loop inside the "
                      "parallel loop %s", N->op->name, L->ir->vars[L->cur_par].name);
                return NULL;
            }
            L->cur_par = N->vars[q];
        }
        if (v->ann == SS_ANN_VECTORIZE)
            L->in_vector = 1;
    }
    items[0] = emit_attached(L, N->s, q);
    items[1] = q + 1 == N->first_red ? N->init : NULL;
    items[2] = build_loops(L, N, q + 1);
    body = seq(L, items, 3);
    L->cur_scope = saved_scope;
    L->cur_par = saved_par;
    L->in_vector = saved_vec;
    if (N->vars[q] < 0 || body == NULL)
        return body;
    f = new_stmt(L, KN_S_FOR);
    if (f == NULL)
        return NULL;
    f->var = N->vars[q];
    f->extent = v->extent;
    f->stage = N->s;
    f->unroll_max_step = sg->auto_unroll_max_step;
    f->for_kind = v->ann == SS_ANN_PARALLEL    ? KN_FOR_PARALLEL
                  : v->ann == SS_ANN_VECTORIZE ? KN_FOR_VECTORIZE
                  : v->ann == SS_ANN_UNROLL    ? KN_FOR_UNROLL
                                               : KN_FOR_SERIAL;
    if (v->ann > SS_ANN_PARALLEL && L->gpu) {
        f->for_kind = gpu_for_kind(v->ann);
    } else if (v->ann > SS_ANN_PARALLEL) {
        lfail(L, AT_ESCHED, "%s: annotation %s is for GPU targets", N->op->name,
              ss_ann_name((ss_ann)v->ann));
        return NULL;
    } else if (L->gpu && v->ann == SS_ANN_PARALLEL) {
        lfail(L, AT_ESCHED, "%s: a GPU program has no parallel loops (bind the loop to "
              "blocks or threads)", N->op->name);
        return NULL;
    }
    f->body = body;
    return f;
}

static kn_stmt *guarded(lower *L, ss_expr *cond, kn_stmt *s)
{
    kn_stmt *g;
    if (cond == NULL || s == NULL)
        return s;
    g = new_stmt(L, KN_S_IF);
    if (g == NULL)
        return NULL;
    g->cond = simp(L, cond);
    g->body = s;
    return g;
}

static kn_stmt *emit_stage(lower *L, int s)
{
    const ss_state *st = L->st;
    const ss_stage *sg = &st->stages[s];
    const ss_op *op = &st->dag->ops[s];
    ss_expr *leafval[SS_MAX_LEAVES], *local[SS_MAX_IVARS], *global[SS_MAX_AXES];
    ss_expr *store_idx[SS_MAX_DIMS], *body, *value, *index, *cond;
    const kn_buf *buf;
    kn_stmt *store;
    nest N;
    char name[128], ivn[64];
    int b;
    if (L->err)
        return NULL;
    memset(&N, 0, sizeof N);
    N.sg = sg;
    N.op = op;
    N.s = s;
    if (L->gpu) {
        int q_t = gpu_cross_thread_leaf(st, s);
        if (q_t >= 0)
            return gpu_emit_cross_thread(L, s, q_t);
    }
    /* the stage's buffer: outputs are arguments, other tensors temporaries here */
    b = L->stage_buf[s];
    if (b < 0) {
        b = new_buf(L, op->name, op->dtype, op->n_dims, L->regs[s].width, -1, s);
        if (b < 0)
            return NULL;
        L->stage_buf[s] = b;
        if (L->gpu && sg->loc == SS_LOC_AT)
            L->ir->bufs[b].scope =
                (uint8_t)(gpu_is_shared_stage(st, s) ? KN_SCOPE_SHARED : KN_SCOPE_LOCAL);
    }
    /* loop variables */
    for (int q = 0; q < sg->n_leaves; q++) {
        const ss_ivar *v = &sg->ivars[sg->leaves[q]];
        if (v->extent <= 0) {
            lfail(L, AT_ESCHED, "%s: a split length is not chosen yet", op->name);
            return NULL;
        }
        if (v->extent == 1) {
            N.vars[q] = -1;
            leafval[q] = imm(L, 0);
        } else {
            ss_state_ivar_name(st, s, sg->leaves[q], ivn, sizeof ivn);
            snprintf(name, sizeof name, "%s.%s", op->name, ivn);
            N.vars[q] = new_var(L, name, v->extent);
            if (N.vars[q] < 0)
                return NULL;
            leafval[q] = chk(L, ss_expr_var(L->ar, N.vars[q]));
        }
        L->leafsub[SS_LEAF_VAR(s, q)] = leafval[q];
    }
    N.first_red = sg->n_leaves;
    for (int q = 0; q < sg->n_leaves; q++)
        if (sg->ivars[sg->leaves[q]].kind != SS_ITER_SPATIAL) {
            N.first_red = q;
            break;
        }
    if (op->reduce == SS_RED_NONE)
        N.first_red = sg->n_leaves;
    /* axis values */
    axis_values(L, sg, leafval, local);
    for (int a = 0; a < op->n_axes + op->n_raxes && !L->err; a++) {
        if (a < op->n_axes && sg->loc == SS_LOC_AT) {
            ss_expr *mn = ss_expr_subst(L->ar, L->regs[s].min[a], NULL, 0, L->leafsub,
                                        L->n_leafsub, NULL);
            global[a] = simp(L, iop(L, SS_E_ADD, chk(L, mn), local[a]));
        } else {
            global[a] = local[a];
        }
    }
    if (L->err)
        return NULL;
    buf = &L->ir->bufs[b];
    /* the innermost statement is filled in after the loops exist: the value may load
    ** stages attached inside them, whose buffers are made while emitting the loops */
    N.store = new_stmt(L, KN_S_SEQ);
    if (N.store == NULL || (N.store->items = lalloc(L, sizeof *N.store->items)) == NULL)
        return NULL;
    /* the init nest: copies of the spatial loops inside the first reduction loop */
    if (op->reduce != SS_RED_NONE) {
        ss_expr *ival[SS_MAX_LEAVES], *ilocal[SS_MAX_IVARS], *iglobal[SS_MAX_AXES];
        ss_expr *iidx[SS_MAX_DIMS], *iindex;
        int ivars[SS_MAX_LEAVES];
        kn_stmt *init, *nestb;
        for (int q = 0; q < sg->n_leaves; q++) {
            const ss_ivar *v = &sg->ivars[sg->leaves[q]];
            ivars[q] = -1;
            if (q < N.first_red) {
                ival[q] = leafval[q];
            } else if (v->kind == SS_ITER_REDUCE || v->extent == 1) {
                ival[q] = imm(L, 0);
            } else {
                ss_state_ivar_name(st, s, sg->leaves[q], ivn, sizeof ivn);
                snprintf(name, sizeof name, "%s.%s.init", op->name, ivn);
                ivars[q] = new_var(L, name, v->extent);
                if (ivars[q] < 0)
                    return NULL;
                ival[q] = chk(L, ss_expr_var(L->ar, ivars[q]));
            }
        }
        axis_values(L, sg, ival, ilocal);
        for (int a = 0; a < op->n_axes && !L->err; a++) {
            if (sg->loc == SS_LOC_AT) {
                ss_expr *mn = ss_expr_subst(L->ar, L->regs[s].min[a], NULL, 0, L->leafsub,
                                            L->n_leafsub, NULL);
                iglobal[a] = simp(L, iop(L, SS_E_ADD, chk(L, mn), ilocal[a]));
            } else {
                iglobal[a] = ilocal[a];
            }
            iidx[a] = buf->arg >= 0 ? iglobal[a] : ilocal[a];
        }
        if (L->err)
            return NULL;
        iindex = flatten(L, op->n_axes, iidx, buf->shape);
        init = new_stmt(L, KN_S_STORE);
        if (init == NULL || iindex == NULL)
            return NULL;
        init->buf = b;
        init->index = iindex;
        init->value = reduce_identity(L, op->reduce, op->dtype);
        init->is_init = 1;
        init->stage = s;
        nestb = guarded(L, store_guards(L, sg, op, ilocal, sg->loc == SS_LOC_AT ? iglobal : NULL, 1),
                        init);
        for (int q = sg->n_leaves - 1; q >= N.first_red && nestb; q--) {
            kn_stmt *f;
            const ss_ivar *v = &sg->ivars[sg->leaves[q]];
            if (ivars[q] < 0)
                continue;
            f = new_stmt(L, KN_S_FOR);
            if (f == NULL)
                return NULL;
            f->var = ivars[q];
            f->extent = v->extent;
            f->stage = s;
            f->unroll_max_step = sg->auto_unroll_max_step;
            f->for_kind = v->ann == SS_ANN_VECTORIZE ? KN_FOR_VECTORIZE
                          : v->ann == SS_ANN_UNROLL  ? KN_FOR_UNROLL
                                                     : KN_FOR_SERIAL;
            f->body = nestb;
            nestb = f;
        }
        N.init = nestb;
    }
    if (L->err)
        return NULL;
    {
        kn_stmt *loops = build_loops(L, &N, 0), *result = loops;
        kn_stmt *store_slot = N.store;
        if (L->err)
            return NULL;
        if (N.first_red == 0 && N.init) {
            kn_stmt *items[2] = {N.init, loops};
            result = seq(L, items, 2);
        }
        buf = &L->ir->bufs[b];
        for (int a = 0; a < op->n_axes; a++)
            store_idx[a] = buf->arg >= 0 ? global[a] : local[a];
        index = flatten(L, op->n_axes, store_idx, buf->shape);
        /* the value */
        body = ss_state_body(st, s, L->ar);
        if (body == NULL) {
            lfail(L, AT_ENOMEM, "out of memory (or stage %s is more than %d operations deep "
                  "with its inlined producers)", op->name, SS_MAX_INLINED_DEPTH);
            return NULL;
        }
        body = chk(L, ss_expr_subst(L->ar, body, global, op->n_axes + op->n_raxes, NULL, 0, NULL));
        value = body ? rewrite_loads(L, body) : NULL;
        if (value == NULL || index == NULL)
            return NULL;
        value = simp(L, value);
        store = new_stmt(L, KN_S_STORE);
        if (store == NULL)
            return NULL;
        store->buf = b;
        store->index = index;
        store->stage = s;
        if (op->reduce != SS_RED_NONE) {
            ss_expr *cur = chk(L, ss_expr_load(L->ar, op->dtype, b, 1, &index));
            store->value = chk(L, ss_expr_op(L->ar, combiner(op->reduce), cur, value));
            store->is_update = 1;
        } else {
            store->value = value;
        }
        /* root stages cover their tensor exactly: only splits can overshoot */
        cond = store_guards(L, sg, op, local, sg->loc == SS_LOC_AT ? global : NULL, 0);
        store_slot->items[0] = guarded(L, cond, store);
        store_slot->n = 1;

        return L->err ? NULL : result;
    }
}

static int is_layout_stage(const ss_state *st, int s)
{
    const char *tag = st->dag->ops[s].tag;
    return tag && strcmp(tag, "layout_rewrite") == 0;
}

/* The layout stage that holds task input 'name' in its new layout, or -1. */
static int layout_of(const ss_state *st, const char *name)
{
    for (int s = 0; s < st->n_stages; s++) {
        const ss_op *op = &st->dag->ops[s];
        size_t n = strlen(name);
        if (is_layout_stage(st, s) && strncmp(op->name, name, n) == 0 &&
            strcmp(op->name + n, ".layout") == 0)
            return s;
    }
    return -1;
}

static void set_arg(kn_ir *ir, int i, const ss_op *op, int is_output, int src)
{
    kn_arg_desc *d = &ir->args[i];
    d->dtype = op->dtype;
    d->n_dims = op->n_dims;
    memcpy(d->shape, op->shape, sizeof d->shape);
    d->is_output = is_output;
    d->is_const = op->is_const;
    ir->arg_src[i] = src;
}

/* Lower one function: the kernel (pre == 0: every stage but the layout stages, with the
** rewritten weights as arguments) or the pre-transform (pre == 1: the layout stages only;
** arguments are the original weights, then their new layouts). */
static at_err lower_fn(const ss_state *st, int pre, kn_ir **out, char *errmsg, size_t errmsg_size)
{
    lower L;
    kn_ir *ir;
    kn_stmt **roots;
    int n_roots = 0;
    *out = NULL;
    memset(&L, 0, sizeof L);
    L.errmsg = errmsg;
    L.errmsg_size = errmsg_size;
    L.cur_par = L.cur_scope = -1;
    ir = at_calloc(1, sizeof *ir);
    if (ir == NULL)
        return AT_ENOMEM;
    at_arena_init(&ir->arena, 65536);
    ir->dag = ss_dag_ref(st->base);
    ir->flops = pre ? 0 : st->base->flops;
    L.st = st;
    L.ir = ir;
    L.ar = &ir->arena;
    L.gpu = !pre && gpu_state(st);
    ir->is_gpu = L.gpu;
    L.regs = at_calloc((size_t)st->n_stages, sizeof *L.regs);
    L.stage_buf = at_malloc((size_t)st->n_stages * sizeof *L.stage_buf);
    L.n_leafsub = st->n_stages * SS_MAX_LEAVES;
    L.leafsub = at_calloc((size_t)L.n_leafsub, sizeof *L.leafsub);
    roots = at_calloc((size_t)st->n_stages + 1, sizeof *roots);
    if (L.regs == NULL || L.stage_buf == NULL || L.leafsub == NULL || roots == NULL) {
        lfail(&L, AT_ENOMEM, "out of memory");
        goto done;
    }
    {
        at_err err = ss_state_regions(st, L.ar, L.regs, errmsg, errmsg_size);
        if (err != AT_OK) {
            L.err = err;
            goto done;
        }
    }
    for (int s = 0; s < st->n_stages; s++)
        L.stage_buf[s] = -1;
    if (!pre) {
        /* the task's inputs then outputs, matched by name in the state's DAG (steps may
        ** have inserted stages, so ids differ); a rewritten weight is passed in its new
        ** layout */
        for (int a = 0; a < st->base->n_args && !L.err; a++) {
            const ss_op *bop = &st->base->ops[st->base->args[a]];
            int s = ss_dag_find(st->dag, bop->name), lay, b;
            if (s < 0) {
                lfail(&L, AT_ESCHED, "tensor %s of the task is missing from the state",
                      bop->name);
                break;
            }
            if (st->stages[s].loc == SS_LOC_INLINE) {
                lfail(&L, AT_ESCHED, "output %s is inlined", bop->name);
                break;
            }
            lay = bop->kind == SS_OP_PLACEHOLDER ? layout_of(st, bop->name) : -1;
            if (lay >= 0) {
                const ss_op *lop = &st->dag->ops[lay];
                b = new_buf(&L, lop->name, lop->dtype, lop->n_dims, lop->shape, a, lay);
                L.stage_buf[lay] = b;
                set_arg(ir, a, lop, 0, a);
            } else {
                b = new_buf(&L, bop->name, bop->dtype, bop->n_dims, bop->shape, a, s);
                L.stage_buf[s] = b;
                set_arg(ir, a, bop, bop->is_output, -1);
            }
        }
        ir->n_args = st->base->n_args;
    } else {
        int n = 0, lays[64];
        for (int s = 0; s < st->n_stages && n < 64; s++)
            if (is_layout_stage(st, s))
                lays[n++] = s;
        for (int k = 0; k < n; k++) {
            /* the layout stage reads its weight directly */
            const ss_op *lop = &st->dag->ops[lays[k]];
            int w = lop->body->id, a = -1;
            const ss_op *wop = &st->dag->ops[w];
            for (int i = 0; i < st->base->n_args; i++)
                if (strcmp(st->base->ops[st->base->args[i]].name, wop->name) == 0)
                    a = i;
            L.stage_buf[w] = new_buf(&L, wop->name, wop->dtype, wop->n_dims, wop->shape, k, w);
            set_arg(ir, k, wop, 0, a);
        }
        for (int k = 0; k < n; k++) {
            const ss_op *lop = &st->dag->ops[lays[k]];
            L.stage_buf[lays[k]] = new_buf(&L, lop->name, lop->dtype, lop->n_dims, lop->shape,
                                           n + k, lays[k]);
            set_arg(ir, n + k, lop, 1, -1);
        }
        ir->n_args = 2 * n;
    }
    for (int s = 0; s < st->n_stages && !L.err; s++) {
        const ss_op *op = &st->dag->ops[s];
        if (op->kind != SS_OP_COMPUTE || is_layout_stage(st, s) != pre)
            continue;
        if (st->stages[s].loc != SS_LOC_ROOT && !pre)
            continue;
        roots[n_roots] = emit_stage(&L, s);
        if (L.gpu && roots[n_roots])
            roots[n_roots] = gpu_finish_kernel(&L, roots[n_roots]);
        if (roots[n_roots])
            n_roots++;
    }
    if (!L.err && L.gpu) {
        ir->kernels = at_arena_alloc(L.ar, (size_t)(n_roots ? n_roots : 1) * sizeof *ir->kernels);
        if (ir->kernels == NULL)
            lfail(&L, AT_ENOMEM, "out of memory");
        else
            memcpy(ir->kernels, roots, (size_t)n_roots * sizeof *roots);
        ir->n_kernels = n_roots;
    }
    if (!L.err)
        ir->body = seq(&L, roots, n_roots);
    if (!L.err && ir->body == NULL)
        lfail(&L, AT_ESCHED, "the state computes nothing");
done:
    at_free(L.regs);
    at_free(L.stage_buf);
    at_free(L.leafsub);
    at_free(L.lo);
    at_free(L.hi);
    at_free(roots);
    if (L.err) {
        kn_ir_free(ir);
        return L.err;
    }
    *out = ir;
    return AT_OK;
}

static _Atomic int64_t n_lowered;

int64_t kn_lower_count(void)
{
    return atomic_load_explicit(&n_lowered, memory_order_relaxed);
}

at_err kn_lower(const ss_state *st, kn_ir **out, char *errmsg, size_t errmsg_size)
{
    ss_state *cp = NULL;
    kn_ir *ir = NULL;
    at_err err;
    int has_layout = 0;
    *out = NULL;
    atomic_fetch_add_explicit(&n_lowered, 1, memory_order_relaxed);
    if (errmsg && errmsg_size)
        errmsg[0] = 0;
    if (st->bounds_dirty) {
        /* bounds are derived data: infer them on a copy */
        if ((err = ss_state_copy(st, &cp)) != AT_OK)
            return err;
        if ((err = ss_state_infer_bounds(cp, errmsg, errmsg_size)) != AT_OK) {
            ss_state_free(cp);
            return err;
        }
        st = cp;
    }
    if (!st->concrete) {
        ss_state_free(cp);
        if (errmsg && errmsg_size)
            snprintf(errmsg, errmsg_size, "the state has split lengths not chosen yet");
        return AT_ESCHED;
    }
    for (int s = 0; s < st->n_stages; s++)
        has_layout |= is_layout_stage(st, s);
    err = lower_fn(st, 0, &ir, errmsg, errmsg_size);
    if (err == AT_OK && has_layout) {
        err = lower_fn(st, 1, &ir->pre, errmsg, errmsg_size);
        if (err != AT_OK) {
            kn_ir_free(ir);
            ir = NULL;
        }
    }
    ss_state_free(cp);
    if (err == AT_OK)
        *out = ir;
    return err;
}

void kn_ir_free(kn_ir *ir)
{
    if (ir == NULL)
        return;
    kn_ir_free(ir->pre);
    at_arena_fini(&ir->arena);
    at_free(ir->bufs);
    at_free(ir->vars);
    ss_dag_unref(ir->dag);
    at_free(ir);
}


/* ==== GPU lowering ======================================================================= */

static int gpu_is_shared_stage(const ss_state *st, int s)
{
    const ss_op *op = &st->dag->ops[s];
    size_t n = strlen(op->name);
    return st->stages[s].loc == SS_LOC_AT && op->tag && strcmp(op->tag, "cache_read") == 0 &&
           n > 7 && strcmp(op->name + n - 7, ".shared") == 0;
}

/* A GPU state binds some loop to blocks, threads or virtual threads. */
static int gpu_state(const ss_state *st)
{
    for (int s = 0; s < st->n_stages; s++) {
        const ss_stage *sg = &st->stages[s];
        if (st->dag->ops[s].kind != SS_OP_COMPUTE || sg->loc == SS_LOC_INLINE)
            continue;
        for (int q = 0; q < sg->n_leaves; q++)
            if (sg->ivars[sg->leaves[q]].ann >= SS_ANN_VTHREAD)
                return 1;
    }
    return 0;
}

static kn_stmt *gpu_sync(lower *L)
{
    return new_stmt(L, KN_S_SYNC);
}

static uint8_t gpu_for_kind(int ann)
{
    switch ((ss_ann)ann) {
    case SS_ANN_BLOCK_X: return KN_FOR_BLOCK_X;
    case SS_ANN_BLOCK_Y: return KN_FOR_BLOCK_Y;
    case SS_ANN_BLOCK_Z: return KN_FOR_BLOCK_Z;
    case SS_ANN_THREAD_X: return KN_FOR_THREAD_X;
    case SS_ANN_THREAD_Y: return KN_FOR_THREAD_Y;
    case SS_ANN_THREAD_Z: return KN_FOR_THREAD_Z;
    case SS_ANN_VTHREAD: return KN_FOR_VTHREAD;
    case SS_ANN_UNROLL: return KN_FOR_UNROLL;
    case SS_ANN_VECTORIZE: return KN_FOR_VECTORIZE;
    default: return KN_FOR_SERIAL;
    }
}

/* The position of a reduction loop (of extent > 1) bound to threads, or -1. */
static int gpu_cross_thread_leaf(const ss_state *st, int s)
{
    const ss_stage *sg = &st->stages[s];
    for (int q = 0; q < sg->n_leaves; q++) {
        const ss_ivar *v = &sg->ivars[sg->leaves[q]];
        if (v->kind != SS_ITER_SPATIAL && v->extent > 1 &&
            (v->ann == SS_ANN_THREAD_X || v->ann == SS_ANN_THREAD_Y || v->ann == SS_ANN_THREAD_Z))
            return q;
    }
    return -1;
}

static kn_stmt *gpu_for(lower *L, uint8_t kind, int var, int64_t extent, int stage, int unroll,
                        kn_stmt *body)
{
    kn_stmt *f;
    if (body == NULL)
        return NULL;
    f = new_stmt(L, KN_S_FOR);
    if (f == NULL)
        return NULL;
    f->for_kind = kind;
    f->var = var;
    f->extent = extent;
    f->stage = stage;
    f->unroll_max_step = unroll;
    f->body = body;
    return f;
}

/* A reduction with a loop bound to threads (Ansor's cross-thread reduction), at root with
** its spatial loops outside its reduction loops:
**   for <spatial loops> {                     (blocks)
**     thread loop t {                         the bound reduction loop, hoisted
**       P = identity
**       for <the other reduction loops> { P = P op value }
**       allreduce P over t                    every thread gets the total
**       if (t == 0) out[...] = P
**   } }                                                                                   */
static kn_stmt *gpu_emit_cross_thread(lower *L, int s, int q_t)
{
    const ss_state *st = L->st;
    const ss_stage *sg = &st->stages[s];
    const ss_op *op = &st->dag->ops[s];
    ss_expr *leafval[SS_MAX_LEAVES], *local[SS_MAX_IVARS], *idx[SS_MAX_DIMS];
    ss_expr *zero, *index, *body, *value, *cur, *cond;
    int vars[SS_MAX_LEAVES], first_red = sg->n_leaves, b, p;
    int64_t one = 1;
    char name[128], ivn[64];
    kn_stmt *upd, *init, *ar, *out, *items[4], *k;
    if (op->reduce == SS_RED_NONE || sg->loc != SS_LOC_ROOT) {
        lfail(L, AT_ESCHED, "%s: a reduction loop bound to threads needs a reduction at root "
              "(cross-thread reduction)", op->name);
        return NULL;
    }
    for (int t = 0; t < st->n_stages; t++)
        if (st->stages[t].loc == SS_LOC_AT && st->stages[t].attach_stage == s) {
            lfail(L, AT_ESCHED, "%s: a cross-thread reduction cannot host stage %s", op->name,
                  st->dag->ops[t].name);
            return NULL;
        }
    for (int q = 0; q < sg->n_leaves; q++) {
        const ss_ivar *v = &sg->ivars[sg->leaves[q]];
        if (v->kind != SS_ITER_SPATIAL && first_red == sg->n_leaves)
            first_red = q;
        if ((v->kind == SS_ITER_SPATIAL && q > first_red) || v->kind == SS_ITER_MIXED ||
            (q != q_t && v->kind != SS_ITER_SPATIAL && v->ann >= SS_ANN_VTHREAD) ||
            (v->kind == SS_ITER_SPATIAL && v->ann == sg->ivars[sg->leaves[q_t]].ann)) {
            lfail(L, AT_ESCHED, "%s: a cross-thread reduction needs its spatial loops outside "
                  "its reduction loops and one reduction loop bound to threads", op->name);
            return NULL;
        }
    }
    /* the output's buffer */
    b = L->stage_buf[s];
    if (b < 0) {
        b = new_buf(L, op->name, op->dtype, op->n_dims, L->regs[s].width, -1, s);
        if (b < 0)
            return NULL;
        L->stage_buf[s] = b;
    }
    snprintf(name, sizeof name, "%s.red", op->name);
    p = new_buf(L, at_arena_strdup(L->ar, name), op->dtype, 1, &one, -1, s);
    if (p < 0)
        return NULL;
    L->ir->bufs[p].scope = KN_SCOPE_LOCAL;
    for (int q = 0; q < sg->n_leaves; q++) {
        const ss_ivar *v = &sg->ivars[sg->leaves[q]];
        if (v->extent <= 0) {
            lfail(L, AT_ESCHED, "%s: a split length is not chosen yet", op->name);
            return NULL;
        }
        if (v->extent == 1) {
            vars[q] = -1;
            leafval[q] = imm(L, 0);
        } else {
            ss_state_ivar_name(st, s, sg->leaves[q], ivn, sizeof ivn);
            snprintf(name, sizeof name, "%s.%s", op->name, ivn);
            if ((vars[q] = new_var(L, name, v->extent)) < 0)
                return NULL;
            leafval[q] = chk(L, ss_expr_var(L->ar, vars[q]));
        }
        L->leafsub[SS_LEAF_VAR(s, q)] = leafval[q];
    }
    axis_values(L, sg, leafval, local);
    if (L->err)
        return NULL;
    for (int a = 0; a < op->n_axes; a++)
        idx[a] = local[a];
    index = flatten(L, op->n_axes, idx, L->ir->bufs[b].shape);
    body = ss_state_body(st, s, L->ar);
    if (body == NULL) {
        lfail(L, AT_ENOMEM, "out of memory (or stage %s is more than %d operations deep "
              "with its inlined producers)", op->name, SS_MAX_INLINED_DEPTH);
        return NULL;
    }
    body = chk(L, ss_expr_subst(L->ar, body, local, op->n_axes + op->n_raxes, NULL, 0, NULL));
    value = body ? simp(L, rewrite_loads(L, body)) : NULL;
    zero = imm(L, 0);
    cur = chk(L, ss_expr_load(L->ar, op->dtype, p, 1, &zero));
    if (value == NULL || index == NULL || cur == NULL)
        return NULL;
    upd = new_stmt(L, KN_S_STORE);
    init = new_stmt(L, KN_S_STORE);
    ar = new_stmt(L, KN_S_ALLREDUCE);
    out = new_stmt(L, KN_S_STORE);
    if (upd == NULL || init == NULL || ar == NULL || out == NULL)
        return NULL;
    upd->buf = init->buf = p;
    upd->index = init->index = zero;
    upd->stage = init->stage = out->stage = ar->stage = s;
    upd->value = chk(L, ss_expr_op(L->ar, combiner(op->reduce), cur, value));
    upd->is_update = 1;
    init->value = reduce_identity(L, op->reduce, op->dtype);
    init->is_init = 1;
    ar->buf = p;
    ar->index = zero;
    ar->var = vars[q_t];
    ar->extent = sg->ivars[sg->leaves[q_t]].extent;
    ar->red = (uint8_t)op->reduce;
    out->buf = b;
    out->index = index;
    out->value = cur;
    /* every split that may overshoot guards the update; the spatial ones the output */
    k = guarded(L, store_guards(L, sg, op, local, NULL, 0), upd);
    for (int q = sg->n_leaves - 1; q >= first_red && k; q--) {
        const ss_ivar *v = &sg->ivars[sg->leaves[q]];
        if (q == q_t || vars[q] < 0)
            continue;
        k = gpu_for(L, v->ann == SS_ANN_UNROLL ? KN_FOR_UNROLL : KN_FOR_SERIAL, vars[q],
                    v->extent, s, sg->auto_unroll_max_step, k);
    }
    cond = iop(L, SS_E_EQ, chk(L, ss_expr_var(L->ar, vars[q_t])), imm(L, 0));
    cond = and_cond(L, cond, store_guards(L, sg, op, local, NULL, 1));
    items[0] = init;
    items[1] = k;
    items[2] = ar;
    items[3] = guarded(L, cond, out);
    if (L->err || k == NULL)
        return NULL;
    k = gpu_for(L, gpu_for_kind(sg->ivars[sg->leaves[q_t]].ann), vars[q_t],
                sg->ivars[sg->leaves[q_t]].extent, s, sg->auto_unroll_max_step,
                seq(L, items, 4));
    for (int q = first_red - 1; q >= 0 && k; q--) {
        const ss_ivar *v = &sg->ivars[sg->leaves[q]];
        if (vars[q] < 0)
            continue;
        k = gpu_for(L, gpu_for_kind(v->ann), vars[q], v->extent, s, sg->auto_unroll_max_step, k);
    }
    return L->err ? NULL : k;
}

/* ---- virtual threads ----
** A loop bound to virtual threads is not a loop of the kernel: like TVM's virtual-thread
** injection, it is pushed down through every loop and sequence to the statements that use
** its variable, which then run once per virtual thread (an unrolled loop).  Statements
** that do not use it (the shared-memory loads: their regions cover every virtual thread)
** run once.  Per-thread temporaries that live inside it get one copy per virtual thread,
** so interleaving the virtual threads cannot mix their values. */

static int expr_refs_var(const ss_expr *e, int v)
{
    if (e == NULL)
        return 0;
    if (e->kind == SS_E_VAR)
        return e->id == v;
    for (int i = 0; i < e->n; i++)
        if (expr_refs_var(e->a[i], v))
            return 1;
    return 0;
}

static int stmt_refs_var(const kn_stmt *s, int v)
{
    if (s == NULL)
        return 0;
    switch (s->kind) {
    case KN_S_FOR: return stmt_refs_var(s->body, v);
    case KN_S_SEQ:
        for (int i = 0; i < s->n; i++)
            if (stmt_refs_var(s->items[i], v))
                return 1;
        return 0;
    case KN_S_IF: return expr_refs_var(s->cond, v) || stmt_refs_var(s->body, v);
    case KN_S_STORE: return expr_refs_var(s->index, v) || expr_refs_var(s->value, v);
    case KN_S_ALLREDUCE: return expr_refs_var(s->index, v);
    default: return 0;
    }
}

static void mark_vars(const kn_stmt *s, uint8_t *mark)
{
    if (s == NULL)
        return;
    if (s->kind == KN_S_FOR)
        mark[s->var] = 1;
    if (s->kind == KN_S_SEQ)
        for (int i = 0; i < s->n; i++)
            mark_vars(s->items[i], mark);
    if (s->kind == KN_S_FOR || s->kind == KN_S_IF)
        mark_vars(s->body, mark);
}

typedef struct vt_ctx {
    int vt;               /* the virtual thread variable */
    const uint8_t *grow;  /* buffers that get a copy per virtual thread */
} vt_ctx;

static ss_expr *vt_index(lower *L, const vt_ctx *c, int buf, ss_expr *index)
{
    int64_t n = L->ir->bufs[buf].n_elems; /* already multiplied */
    int64_t per = n / L->ir->vars[c->vt].extent;
    return simp(L, iop(L, SS_E_ADD, iop(L, SS_E_MUL, chk(L, ss_expr_var(L->ar, c->vt)),
                                        imm(L, per)),
                       index));
}

static ss_expr *vt_expr(lower *L, const vt_ctx *c, const ss_expr *e)
{
    ss_expr *kids[SS_MAX_DIMS + 4];
    int changed = 0;
    if (e == NULL || L->err)
        return NULL;
    if (e->n == 0)
        return (ss_expr *)e;
    if (e->n > (int)AT_ARRAY_LEN(kids)) {
        lfail(L, AT_ESCHED, "internal: an expression with %d operands", e->n);
        return NULL;
    }
    for (int i = 0; i < e->n; i++) {
        kids[i] = vt_expr(L, c, e->a[i]);
        if (kids[i] == NULL)
            return NULL;
        changed |= kids[i] != e->a[i];
    }
    if (e->kind == SS_E_LOAD && c->grow[e->id]) {
        kids[0] = vt_index(L, c, e->id, kids[0]);
        changed = 1;
    }
    return changed ? with_kids(L, e, kids) : (ss_expr *)e;
}

static void vt_rewrite(lower *L, const vt_ctx *c, kn_stmt *s)
{
    if (s == NULL || L->err)
        return;
    switch (s->kind) {
    case KN_S_FOR: vt_rewrite(L, c, s->body); break;
    case KN_S_SEQ:
        for (int i = 0; i < s->n; i++)
            vt_rewrite(L, c, s->items[i]);
        break;
    case KN_S_IF:
        s->cond = vt_expr(L, c, s->cond);
        vt_rewrite(L, c, s->body);
        break;
    case KN_S_STORE:
        s->value = vt_expr(L, c, s->value);
        s->index = vt_expr(L, c, s->index);
        if (c->grow[s->buf])
            s->index = vt_index(L, c, s->buf, s->index);
        break;
    case KN_S_ALLREDUCE:
        s->index = vt_expr(L, c, s->index);
        if (c->grow[s->buf])
            s->index = vt_index(L, c, s->buf, s->index);
        break;
    default: break;
    }
}

/* "for vt in 0..V: s", with the loop pushed down to the statements that use vt. */
static kn_stmt *vt_sink(lower *L, const kn_stmt *vfor, kn_stmt *s)
{
    if (s == NULL || L->err || !stmt_refs_var(s, vfor->var))
        return s;
    switch (s->kind) {
    case KN_S_SEQ:
        for (int i = 0; i < s->n; i++)
            s->items[i] = vt_sink(L, vfor, s->items[i]);
        return s;
    case KN_S_FOR:
        s->body = vt_sink(L, vfor, s->body);
        return s;
    case KN_S_IF:
        if (!expr_refs_var(s->cond, vfor->var)) {
            s->body = vt_sink(L, vfor, s->body);
            return s;
        }
        /* fall through */
    default:
        return gpu_for(L, KN_FOR_UNROLL, vfor->var, vfor->extent, vfor->stage,
                       vfor->unroll_max_step, s);
    }
}

static kn_stmt *vt_inject(lower *L, kn_stmt *s)
{
    uint8_t *mark, *grow;
    vt_ctx c;
    if (s == NULL || L->err)
        return s;
    switch (s->kind) {
    case KN_S_SEQ:
        for (int i = 0; i < s->n; i++)
            s->items[i] = vt_inject(L, s->items[i]);
        return s;
    case KN_S_IF:
        s->body = vt_inject(L, s->body);
        return s;
    case KN_S_FOR:
        s->body = vt_inject(L, s->body);
        if (s->for_kind != KN_FOR_VTHREAD || L->err)
            return s;
        break;
    default:
        return s;
    }
    mark = at_calloc((size_t)L->ir->n_vars + 1, 1);
    grow = at_calloc((size_t)L->ir->n_bufs + 1, 1);
    if (mark == NULL || grow == NULL) {
        at_free(mark);
        at_free(grow);
        lfail(L, AT_ENOMEM, "out of memory");
        return NULL;
    }
    mark_vars(s, mark);
    for (int b = 0; b < L->ir->n_bufs; b++) {
        kn_buf *bf = &L->ir->bufs[b];
        if (bf->scope != KN_SCOPE_LOCAL || bf->scope_var < 0 || !mark[bf->scope_var])
            continue;
        grow[b] = 1;
        bf->n_elems *= s->extent;
        if (bf->n_dims < SS_MAX_DIMS) {
            memmove(&bf->shape[1], &bf->shape[0], (size_t)bf->n_dims * sizeof bf->shape[0]);
            bf->shape[0] = s->extent;
            bf->n_dims++;
        }
    }
    c.vt = s->var;
    c.grow = grow;
    vt_rewrite(L, &c, s->body);
    at_free(mark);
    at_free(grow);
    return vt_sink(L, s, s->body);
}

static kn_stmt *gpu_finish_kernel(lower *L, kn_stmt *k)
{
    return vt_inject(L, k);
}

/* ---- printing ---- */

static const char *pr_var(void *ctx, int id)
{
    const kn_ir *ir = ctx;
    return id >= 0 && id < ir->n_vars ? ir->vars[id].name : NULL;
}

static const char *pr_buf(void *ctx, int id)
{
    const kn_ir *ir = ctx;
    return id >= 0 && id < ir->n_bufs ? ir->bufs[id].name : NULL;
}

static const char *reduce_name(int red)
{
    static const char *const names[] = {
#define X(id, name) name,
        SS_REDUCE_MAP(X)
#undef X
    };
    return red >= 0 && red < SS_N_REDUCES ? names[red] : "?";
}

static void print_stmt(const kn_ir *ir, const kn_stmt *s, int depth, at_buf *b)
{
    static const char *const kinds[] = {"for",         "parallel",    "vectorize",
                                        "unroll",      "blockIdx.x",  "blockIdx.y",
                                        "blockIdx.z",  "threadIdx.x", "threadIdx.y",
                                        "threadIdx.z", "vthread"};
    if (s == NULL)
        return;
    switch (s->kind) {
    case KN_S_FOR:
        at_buf_printf(b, "%*s%s %s in 0..%lld%s\n", 2 * depth, "", kinds[s->for_kind],
                      ir->vars[s->var].name, (long long)s->extent,
                      s->unroll_max_step ? " (auto-unroll)" : "");
        print_stmt(ir, s->body, depth + 1, b);
        break;
    case KN_S_SEQ:
        for (int i = 0; i < s->n; i++)
            print_stmt(ir, s->items[i], depth, b);
        break;
    case KN_S_IF:
        at_buf_printf(b, "%*sif ", 2 * depth, "");
        ss_expr_print(b, s->cond, NULL, pr_var, pr_buf, (void *)ir);
        at_buf_putc(b, '\n');
        print_stmt(ir, s->body, depth + 1, b);
        break;
    case KN_S_STORE:
        at_buf_printf(b, "%*s%s[", 2 * depth, "", ir->bufs[s->buf].name);
        ss_expr_print(b, s->index, NULL, pr_var, pr_buf, (void *)ir);
        at_buf_puts(b, "] = ");
        ss_expr_print(b, s->value, NULL, pr_var, pr_buf, (void *)ir);
        at_buf_putc(b, '\n');
        break;
    case KN_S_SYNC:
        at_buf_printf(b, "%*ssync_threads\n", 2 * depth, "");
        break;
    case KN_S_ALLREDUCE:
        at_buf_printf(b, "%*sallreduce %s %s[", 2 * depth, "", reduce_name(s->red),
                      ir->bufs[s->buf].name);
        ss_expr_print(b, s->index, NULL, pr_var, pr_buf, (void *)ir);
        at_buf_printf(b, "] over %s (%lld threads)\n", ir->vars[s->var].name,
                      (long long)s->extent);
        break;
    }
}

void kn_ir_print(const kn_ir *ir, at_buf *b)
{
    for (int i = 0; i < ir->n_bufs; i++) {
        const kn_buf *bf = &ir->bufs[i];
        at_buf_printf(b, "buffer %s %s[", bf->name, at_dtype_name(bf->dtype));
        for (int d = 0; d < bf->n_dims; d++)
            at_buf_printf(b, "%s%lld", d ? ", " : "", (long long)bf->shape[d]);
        at_buf_printf(b, "]%s%s\n", bf->arg >= 0 ? " (argument)" : "",
                      bf->scope == KN_SCOPE_SHARED  ? " shared"
                      : bf->scope == KN_SCOPE_LOCAL ? " local"
                                                    : "");
    }
    print_stmt(ir, ir->body, 0, b);
}

/* ---- questions about loop IR (the code generator and the cost model) ---- */

static int expr_uses_var(const ss_expr *e, int var)
{
    if (e->kind == SS_E_VAR)
        return e->id == var;
    for (int i = 0; i < e->n; i++)
        if (expr_uses_var(e->a[i], var))
            return 1;
    return 0;
}

/* Can the body of vectorized loop 'var' be emitted with the variable as a lane vector? */
int kn_stmt_vectorizable(const kn_stmt *s, int var)
{
    switch (s->kind) {
    case KN_S_SEQ:
        for (int i = 0; i < s->n; i++)
            if (!kn_stmt_vectorizable(s->items[i], var))
                return 0;
        return 1;
    case KN_S_STORE:
        return 1;
    case KN_S_IF:
        return !expr_uses_var(s->cond, var) && kn_stmt_vectorizable(s->body, var);
    case KN_S_FOR:
        if (s->for_kind == KN_FOR_PARALLEL || s->for_kind == KN_FOR_VECTORIZE)
            return 0;
        return kn_stmt_vectorizable(s->body, var);
    }
    return 0;
}

/* Expression nodes of 'e', counting stops at 'cap' (a shared subtree counts each time it
** is used; lowering bounds the depth, SS_MAX_INLINED_DEPTH). */
static int64_t expr_nodes(const ss_expr *e, int64_t cap)
{
    int64_t n = 1;
    if (e == NULL)
        return 0;
    for (int i = 0; i < e->n && n < cap; i++)
        n += expr_nodes(e->a[i], cap - n);
    return n;
}

#define CODE_SIZE_MAX ((int64_t)1 << 40)

int kn_stmt_copied_out(const kn_stmt *s)
{
    return s->kind == KN_S_FOR &&
           (s->for_kind == KN_FOR_UNROLL ||
            (s->for_kind == KN_FOR_SERIAL && s->unroll_max_step > 0 &&
             kn_stmt_unrolled_size(s, s->unroll_max_step) >= 0));
}

static int64_t stmt_code_size(const kn_stmt *s)
{
    int64_t n = 0, m;
    switch (s->kind) {
    case KN_S_SEQ:
        for (int i = 0; i < s->n && n < CODE_SIZE_MAX; i++)
            n += stmt_code_size(s->items[i]);
        return AT_MIN(n, CODE_SIZE_MAX);
    case KN_S_STORE:
        return 1 + expr_nodes(s->index, CODE_SIZE_MAX) + expr_nodes(s->value, CODE_SIZE_MAX);
    case KN_S_IF:
        return AT_MIN(CODE_SIZE_MAX, 1 + expr_nodes(s->cond, CODE_SIZE_MAX) +
                                         stmt_code_size(s->body));
    case KN_S_FOR:
        m = stmt_code_size(s->body);
        if (kn_stmt_copied_out(s))
            return s->extent > 0 && m > CODE_SIZE_MAX / s->extent ? CODE_SIZE_MAX
                                                                 : 1 + s->extent * m;
        return 1 + m;
    default: /* ALLREDUCE */
        return 1 + expr_nodes(s->index, CODE_SIZE_MAX);
    }
}

int64_t kn_ir_code_size(const kn_ir *ir)
{
    int64_t n = 0;
    for (const kn_ir *f = ir; f && n < CODE_SIZE_MAX; f = f->pre)
        if (f->body)
            n += stmt_code_size(f->body);
    return AT_MIN(n, CODE_SIZE_MAX);
}

/* ---- the program's identity (kn_ir_hash) ---- */

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

static uint64_t expr_hash(uint64_t h, const ss_expr *e)
{
    if (e == NULL)
        return mix(h, 0x5a);
    h = mix(h, (uint64_t)e->kind | (uint64_t)e->dtype << 8 | (uint64_t)e->n << 16 |
                   (uint64_t)(uint32_t)e->id << 32);
    if (e->kind == SS_E_IMM_INT)
        h = mix(h, (uint64_t)e->v.i);
    else if (e->kind == SS_E_IMM_FLOAT) {
        uint64_t bits;
        memcpy(&bits, &e->v.f, sizeof bits);
        h = mix(h, bits);
    }
    for (int i = 0; i < e->n; i++)
        h = expr_hash(h, e->a[i]);
    return h;
}

/* An auto-unroll budget matters only through what it decides: on a CPU whether the loop is
** copied out (kn_stmt_copied_out), so budgets of 16 and 512 over a loop of 8 stores are one
** program; the CUDA generator's own rule reads the number, which is hashed as it is. */
static uint64_t stmt_hash(uint64_t h, const kn_stmt *s, int gpu)
{
    if (s == NULL)
        return mix(h, 0xa5);
    h = mix(h, (uint64_t)s->kind | (uint64_t)s->for_kind << 8 | (uint64_t)s->is_init << 16 |
                   (uint64_t)s->is_update << 24 | (uint64_t)s->red << 32);
    switch (s->kind) {
    case KN_S_SEQ:
        h = mix(h, (uint64_t)s->n);
        for (int i = 0; i < s->n; i++)
            h = stmt_hash(h, s->items[i], gpu);
        return h;
    case KN_S_STORE:
        h = mix(h, (uint64_t)s->buf);
        return expr_hash(expr_hash(h, s->index), s->value);
    case KN_S_IF:
        return stmt_hash(expr_hash(h, s->cond), s->body, gpu);
    case KN_S_FOR:
        h = mix(mix(h, (uint64_t)s->var), (uint64_t)s->extent);
        h = mix(h, gpu ? (uint64_t)s->unroll_max_step : (uint64_t)kn_stmt_copied_out(s));
        return stmt_hash(h, s->body, gpu);
    case KN_S_ALLREDUCE:
        h = mix(mix(mix(h, (uint64_t)s->buf), (uint64_t)s->var), (uint64_t)s->extent);
        return expr_hash(h, s->index);
    default: /* SYNC */
        return h;
    }
}

uint64_t kn_ir_hash(const kn_ir *ir)
{
    uint64_t h = 0x6b6e69722d763100ull; /* "knir-v1" */
    for (const kn_ir *f = ir; f; f = f->pre) {
        h = mix(mix(mix(h, 0x9f), (uint64_t)f->is_gpu), (uint64_t)f->n_bufs);
        for (int i = 0; i < f->n_bufs; i++) {
            const kn_buf *b = &f->bufs[i];
            h = mix(h, (uint64_t)b->dtype | (uint64_t)b->scope << 8 | (uint64_t)b->n_dims << 16);
            h = mix(mix(h, (uint64_t)b->n_elems), (uint64_t)(uint32_t)b->arg);
            h = mix(mix(h, (uint64_t)(uint32_t)b->par_var), (uint64_t)(uint32_t)b->scope_var);
            for (int d = 0; d < b->n_dims; d++)
                h = mix(h, (uint64_t)b->shape[d]);
        }
        h = mix(h, (uint64_t)f->n_vars);
        for (int i = 0; i < f->n_vars; i++)
            h = mix(h, (uint64_t)f->vars[i].extent);
        h = mix(h, (uint64_t)f->n_args);
        for (int i = 0; i < f->n_args && i < KN_MAX_ARGS; i++) {
            const kn_arg_desc *a = &f->args[i];
            h = mix(h, (uint64_t)a->dtype | (uint64_t)a->n_dims << 8 | (uint64_t)a->is_output << 16 |
                           (uint64_t)a->is_const << 24 | (uint64_t)(uint32_t)f->arg_src[i] << 32);
            for (int d = 0; d < a->n_dims; d++)
                h = mix(h, (uint64_t)a->shape[d]);
        }
        h = mix(h, (uint64_t)f->n_kernels);
        h = stmt_hash(h, f->body, f->is_gpu);
    }
    return h ^ (h >> 31);
}

/* Statements after unrolling, or -1 if a loop that stays a loop is inside. */
int64_t kn_stmt_unrolled_size(const kn_stmt *s, int budget)
{
    int64_t n = 0, m;
    switch (s->kind) {
    case KN_S_SEQ:
        for (int i = 0; i < s->n; i++) {
            if ((m = kn_stmt_unrolled_size(s->items[i], budget)) < 0)
                return -1;
            n += m;
        }
        return n;
    case KN_S_STORE:
        return 1;
    case KN_S_IF:
        m = kn_stmt_unrolled_size(s->body, budget);
        return m < 0 ? -1 : m + 1;
    case KN_S_FOR:
        m = kn_stmt_unrolled_size(s->body, budget);
        if (m < 0)
            return -1;
        if (s->for_kind == KN_FOR_VECTORIZE)
            return m;
        if (s->for_kind == KN_FOR_UNROLL ||
            (s->for_kind == KN_FOR_SERIAL && s->extent * m <= budget))
            return s->extent * m;
        return -1;
    }
    return -1;
}
