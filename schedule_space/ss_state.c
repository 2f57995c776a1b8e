/* schedule_space/ss_state.c -- schedule states and their transform steps.
**
** A state is data: stages (one per op of its DAG) whose loops are described by an
** iterator graph (op axes, then the children of splits and fuses) and a leaf order, plus
** the list of steps that produced it.  Every step is validated against the state before
** anything changes, so a failed step leaves the state as it was.  Steps that add a stage
** (cache_write, cache_read, rfactor) derive a new DAG that keeps its parent alive.
**
** Invariants: stages[i].op == i; an attached stage's consumer has a larger id and its
** attach ivar is a leaf of the consumer; a stage with a step applied has n_steps > 0. */
#include "ss_int.h"

#include <stdlib.h>
#include <string.h>

#define FAIL(...) ss__fail(errmsg, errmsg_size, AT_ESCHED, __VA_ARGS__)

static const char *const step_tags[] = {
#define X(id, tag) tag,
    SS_STEP_MAP(X)
#undef X
};

static const char *const ann_names[] = {
#define X(id, name) name,
    SS_ANN_MAP(X)
#undef X
};

const char *ss_ann_name(ss_ann a)
{
    return (unsigned)a < SS_N_ANNS ? ann_names[a] : "?";
}

/* ---- construction ---- */

static void stage_init(ss_stage *sg, const ss_op *op, int id)
{
    memset(sg, 0, sizeof *sg);
    sg->op = id;
    sg->loc = SS_LOC_ROOT;
    sg->attach_stage = sg->attach_ivar = -1;
    if (op->kind != SS_OP_COMPUTE)
        return;
    sg->n_ivars = sg->n_leaves = op->n_axes + op->n_raxes;
    for (int a = 0; a < sg->n_ivars; a++) {
        ss_ivar *iv = &sg->ivars[a];
        iv->extent = op->axes[a].extent;
        iv->kind = a < op->n_axes ? SS_ITER_SPATIAL : SS_ITER_REDUCE;
        iv->rel = -1;
        iv->axis = (int8_t)a;
        sg->leaves[a] = (int8_t)a;
    }
    for (int d = 0; d < op->n_dims; d++)
        sg->region[d] = op->shape[d];
}

at_err ss_state_new(ss_dag *dag, ss_state **out)
{
    ss_state *st;
    *out = NULL;
    if (!dag->finished)
        return AT_EINVAL;
    st = at_calloc(1, sizeof *st);
    if (st == NULL)
        return AT_ENOMEM;
    st->stages = at_calloc((size_t)dag->n_ops, sizeof *st->stages);
    if (st->stages == NULL) {
        at_free(st);
        return AT_ENOMEM;
    }
    st->n_stages = dag->n_ops;
    for (int i = 0; i < dag->n_ops; i++)
        stage_init(&st->stages[i], &dag->ops[i], i);
    st->dag = ss_dag_ref(dag);
    st->base = ss_dag_ref(dag);
    st->concrete = 1;
    *out = st;
    return AT_OK;
}

void ss_state_free(ss_state *st)
{
    if (st == NULL)
        return;
    ss_dag_unref(st->dag);
    ss_dag_unref(st->base);
    at_free(st->stages);
    at_free(st->steps);
    at_free(st);
}

at_err ss_state_copy(const ss_state *st, ss_state **out)
{
    ss_state *c = at_malloc(sizeof *c);
    *out = NULL;
    if (c == NULL)
        return AT_ENOMEM;
    *c = *st;
    c->stages = at_malloc((size_t)st->n_stages * sizeof *c->stages);
    c->steps = st->n_steps ? at_malloc((size_t)st->n_steps * sizeof *c->steps) : NULL;
    if (c->stages == NULL || (st->n_steps && c->steps == NULL)) {
        at_free(c->stages);
        at_free(c->steps);
        at_free(c);
        return AT_ENOMEM;
    }
    memcpy(c->stages, st->stages, (size_t)st->n_stages * sizeof *c->stages);
    if (st->n_steps)
        memcpy(c->steps, st->steps, (size_t)st->n_steps * sizeof *c->steps);
    c->cap_steps = st->n_steps;
    ss_dag_ref(c->dag);
    ss_dag_ref(c->base);
    *out = c;
    return AT_OK;
}

int ss_state_find_stage(const ss_state *st, const char *name)
{
    return ss_dag_find(st->dag, name);
}

/* ---- names ---- */

/* The name of loop variable 'iv' ("i.0", "i@j@"), or with 'tokens' the same as binary
** tokens (ss_state_hash: an axis by its index, no formatting). */
static void name_walk(const ss_state *st, const ss_stage *sg, int iv, int tokens, at_buf *b)
{
    const ss_ivar *v = &sg->ivars[iv];
    const ss_rel *r;
    int64_t tok;
    if (v->rel < 0) {
        tok = -1 - v->axis;
        if (tokens)
            at_buf_put(b, &tok, sizeof tok);
        else
            at_buf_puts(b, st->dag->ops[sg->op].axes[v->axis].name);
        return;
    }
    r = &sg->rels[v->rel];
    if (r->kind == SS_REL_SPLIT) {
        int k = 0, n = 0;
        char d[16];
        while (k < r->n_out && r->out[k] != iv)
            k++;
        name_walk(st, sg, r->in[0], tokens, b);
        tok = 1000000 + k;
        if (tokens) {
            at_buf_put(b, &tok, sizeof tok);
            return;
        }
        /* the digits by hand: names are built for every leaf of every lowered candidate */
        do
            d[n++] = (char)('0' + k % 10);
        while ((k /= 10) > 0 && n < (int)sizeof d);
        at_buf_putc(b, '.');
        while (n > 0)
            at_buf_putc(b, d[--n]);
    } else {
        tok = 2000000;
        for (int k = 0; k < r->n_in; k++) {
            name_walk(st, sg, r->in[k], tokens, b);
            if (tokens)
                at_buf_put(b, &tok, sizeof tok);
            else
                at_buf_putc(b, '@');
        }
    }
}

void ss_state_ivar_name(const ss_state *st, int stage, int iv, char *out, size_t size)
{
    at_buf b;
    at_buf_init(&b);
    name_walk(st, &st->stages[stage], iv, 0, &b);
    snprintf(out, size, "%s", b.data ? b.data : "?");
    at_buf_fini(&b);
}

static const char *stage_name(const ss_state *st, int stage)
{
    return st->dag->ops[stage].name;
}

/* ---- helpers ---- */

static int attached_at(const ss_state *st, int stage, int iv)
{
    for (int s = 0; s < st->n_stages; s++)
        if (st->stages[s].loc == SS_LOC_AT && st->stages[s].attach_stage == stage &&
            st->stages[s].attach_ivar == iv)
            return s;
    return -1;
}

static int reads_through(const ss_state *st, const ss_expr *e, int tensor, int depth)
{
    if (depth > 64)
        return 0;
    if (e->kind == SS_E_LOAD) {
        if (e->id == tensor)
            return 1;
        if (st->stages[e->id].loc == SS_LOC_INLINE &&
            reads_through(st, st->dag->ops[e->id].body, tensor, depth + 1))
            return 1;
    }
    for (int i = 0; i < e->n; i++)
        if (reads_through(st, e->a[i], tensor, depth))
            return 1;
    return 0;
}

int ss__reads_through_inline(const ss_state *st, int reader, int tensor)
{
    const ss_op *op = &st->dag->ops[reader];
    if (op->kind != SS_OP_COMPUTE || st->stages[reader].loc == SS_LOC_INLINE)
        return 0;
    return reads_through(st, op->body, tensor, 0);
}

static at_err check_stage(const ss_state *st, int stage, int allow_placeholder, char *errmsg,
                          size_t errmsg_size)
{
    if (stage < 0 || stage >= st->n_stages)
        return FAIL("stage %d does not exist (the state has %d stages)", stage, st->n_stages);
    if (!allow_placeholder && st->dag->ops[stage].kind != SS_OP_COMPUTE)
        return FAIL("stage %d (%s) is an input; it has no loops to transform", stage,
                    stage_name(st, stage));
    return AT_OK;
}

static at_err check_leaf(const ss_state *st, int stage, int iter, char *errmsg,
                         size_t errmsg_size)
{
    const ss_stage *sg = &st->stages[stage];
    if (sg->loc == SS_LOC_INLINE)
        return FAIL("stage %s is inlined; it has no loops", stage_name(st, stage));
    if (iter < 0 || iter >= sg->n_leaves)
        return FAIL("stage %s has %d loops; iterator %d does not exist", stage_name(st, stage),
                    sg->n_leaves, iter);
    return AT_OK;
}

static int64_t prod_lengths(int n, const int64_t *len)
{
    int64_t p = 1;
    for (int i = 0; i < n; i++) {
        if (len[i] <= 0)
            return 0;
        p *= len[i];
    }
    return p;
}

static at_err push_step(ss_state *st, const ss_step *step)
{
    if (st->n_steps == st->cap_steps) {
        int cap = st->cap_steps ? st->cap_steps * 2 : 16;
        ss_step *p = at_realloc(st->steps, (size_t)cap * sizeof *p);
        if (p == NULL)
            return AT_ENOMEM;
        st->steps = p;
        st->cap_steps = cap;
    }
    st->steps[st->n_steps++] = *step;
    return AT_OK;
}

static void recompute_concrete(ss_state *st)
{
    st->concrete = 1;
    for (int s = 0; s < st->n_stages && st->concrete; s++) {
        const ss_stage *sg = &st->stages[s];
        if (sg->loc == SS_LOC_INLINE)
            continue;
        for (int i = 0; i < sg->n_ivars; i++)
            if (sg->ivars[i].extent <= 0) {
                st->concrete = 0;
                break;
            }
    }
}

/* Extents of the children of every relation, from the root extents down.  A split is a
** chain of splits by each length, innermost first: a child gets its length, or what is
** left of the parent when that is less (so a tile that covers a whole region leaves its
** outer loops at extent 1 instead of overshooting), and the outermost child the rest. */
static void pass_down(ss_stage *sg)
{
    for (int r = 0; r < sg->n_rels; r++) {
        ss_rel *rel = &sg->rels[r];
        if (rel->kind == SS_REL_SPLIT) {
            int64_t rem = sg->ivars[rel->in[0]].extent;
            int known = rem > 0;
            for (int k = rel->n_out - 1; k >= 1; k--) {
                int64_t l = sg->ivars[rel->out[k]].len;
                if (l <= 0 || !known) {
                    sg->ivars[rel->out[k]].extent = l > 0 ? l : 0;
                    known = 0;
                    continue;
                }
                sg->ivars[rel->out[k]].extent = l < rem ? l : rem;
                rem = (rem + l - 1) / l;
            }
            sg->ivars[rel->out[0]].extent = known ? rem : 0;
        } else {
            int64_t p = 1;
            for (int k = 0; k < rel->n_in; k++) {
                int64_t e = sg->ivars[rel->in[k]].extent;
                p = (p > 0 && e > 0) ? p * e : 0;
            }
            sg->ivars[rel->out[0]].extent = p;
        }
    }
}

/* ---- the steps ---- */

static at_err do_split(ss_state *st, const ss_step *s, const int64_t *lengths, int n,
                       char *errmsg, size_t errmsg_size)
{
    ss_stage *sg;
    int iv, pos = s->iter;
    int64_t E, P;
    ss_rel *rel;
    char nm[64];
    at_err err;
    if ((err = check_stage(st, s->stage, 0, errmsg, errmsg_size)) ||
        (err = check_leaf(st, s->stage, s->iter, errmsg, errmsg_size)))
        return err;
    sg = &st->stages[s->stage];
    iv = sg->leaves[pos];
    ss_state_ivar_name(st, s->stage, iv, nm, sizeof nm);
    if (n < 1 || n >= SS_MAX_SPLIT)
        return FAIL("split of %s.%s: %d lengths (1 to %d)", stage_name(st, s->stage), nm, n,
                    SS_MAX_SPLIT - 1);
    if (attached_at(st, s->stage, iv) >= 0)
        return FAIL("split of %s.%s: stage %s is computed at this loop", stage_name(st, s->stage),
                    nm, stage_name(st, attached_at(st, s->stage, iv)));
    if (sg->ivars[iv].ann != SS_ANN_NONE)
        return FAIL("split of %s.%s: the loop is annotated %s; split before annotating",
                    stage_name(st, s->stage), nm, ss_ann_name((ss_ann)sg->ivars[iv].ann));
    if (sg->n_ivars + n + 1 > SS_MAX_IVARS || sg->n_rels == SS_MAX_RELS ||
        sg->n_leaves + n > SS_MAX_LEAVES)
        return FAIL("split of %s.%s: too many loops in the stage", stage_name(st, s->stage), nm);
    for (int i = 0; i < n; i++)
        if (lengths[i] < 0 || lengths[i] > (1ll << 31))
            return FAIL("split of %s.%s: length %lld is not valid", stage_name(st, s->stage), nm,
                        (long long)lengths[i]);
    E = sg->ivars[iv].extent;
    P = prod_lengths(n, lengths);
    if (E > 0 && P > E)
        return FAIL("split of %s.%s: the lengths' product %lld exceeds the extent %lld",
                    stage_name(st, s->stage), nm, (long long)P, (long long)E);
    if (s->kind == SS_STEP_SPLIT && s->extent > 0 && E > 0 && s->extent != E)
        return FAIL("split of %s.%s: the step was recorded for extent %lld but the loop has "
                    "extent %lld",
                    stage_name(st, s->stage), nm, (long long)s->extent, (long long)E);
    rel = &sg->rels[sg->n_rels];
    memset(rel, 0, sizeof *rel);
    rel->kind = SS_REL_SPLIT;
    rel->n_in = 1;
    rel->in[0] = (int8_t)iv;
    rel->n_out = (uint8_t)(n + 1);
    for (int k = 0; k <= n; k++) {
        ss_ivar *c = &sg->ivars[sg->n_ivars];
        memset(c, 0, sizeof *c);
        c->kind = sg->ivars[iv].kind;
        c->rel = (int8_t)sg->n_rels;
        c->axis = -1;
        c->len = k == 0 ? 0 : lengths[k - 1];
        rel->out[k] = (int8_t)sg->n_ivars++;
    }
    sg->n_rels++;
    pass_down(sg);
    memmove(&sg->leaves[pos + n + 1], &sg->leaves[pos + 1],
            (size_t)(sg->n_leaves - pos - 1) * sizeof sg->leaves[0]);
    for (int k = 0; k <= n; k++)
        sg->leaves[pos + k] = rel->out[k];
    sg->n_leaves += n;
    if (P == 0 || E <= 0)
        st->concrete = 0;
    return AT_OK;
}

static at_err do_reorder(ss_state *st, const ss_step *s, char *errmsg, size_t errmsg_size)
{
    ss_stage *sg;
    int8_t leaves[SS_MAX_LEAVES];
    int seen[SS_MAX_LEAVES] = {0};
    at_err err;
    if ((err = check_stage(st, s->stage, 0, errmsg, errmsg_size)))
        return err;
    sg = &st->stages[s->stage];
    if (sg->loc == SS_LOC_INLINE)
        return FAIL("reorder of %s: the stage is inlined", stage_name(st, s->stage));
    if (s->n_ints != sg->n_leaves)
        return FAIL("reorder of %s: %d positions given, the stage has %d loops",
                    stage_name(st, s->stage), s->n_ints, sg->n_leaves);
    for (int i = 0; i < s->n_ints; i++) {
        int64_t p = s->ints[i];
        if (p < 0 || p >= sg->n_leaves || seen[p])
            return FAIL("reorder of %s: the order is not a permutation of 0..%d",
                        stage_name(st, s->stage), sg->n_leaves - 1);
        seen[p] = 1;
        leaves[i] = sg->leaves[p];
    }
    memcpy(sg->leaves, leaves, (size_t)sg->n_leaves * sizeof leaves[0]);
    return AT_OK;
}

static at_err do_fuse(ss_state *st, const ss_step *s, char *errmsg, size_t errmsg_size)
{
    ss_stage *sg;
    ss_rel *rel;
    ss_ivar *c;
    int n = s->n_ints, first, kinds = 0, holder = -1;
    int64_t ext = 1;
    char nm[64];
    at_err err;
    if ((err = check_stage(st, s->stage, 0, errmsg, errmsg_size)))
        return err;
    sg = &st->stages[s->stage];
    if (sg->loc == SS_LOC_INLINE)
        return FAIL("fuse in %s: the stage is inlined", stage_name(st, s->stage));
    if (n < 1 || n > SS_MAX_FUSE)
        return FAIL("fuse in %s: %d loops (1 to %d)", stage_name(st, s->stage), n, SS_MAX_FUSE);
    first = (int)s->ints[0];
    for (int i = 0; i < n; i++) {
        int64_t p = s->ints[i];
        int iv;
        if (p != first + i || p < 0 || p >= sg->n_leaves)
            return FAIL("fuse in %s: positions must be consecutive loops of the stage",
                        stage_name(st, s->stage));
        iv = sg->leaves[p];
        ss_state_ivar_name(st, s->stage, iv, nm, sizeof nm);
        if (sg->ivars[iv].ann != SS_ANN_NONE)
            return FAIL("fuse in %s: %s is annotated %s", stage_name(st, s->stage), nm,
                        ss_ann_name((ss_ann)sg->ivars[iv].ann));
        if (attached_at(st, s->stage, iv) >= 0) {
            if (i != n - 1)
                return FAIL("fuse in %s: stage %s is computed at %s, which is not the last "
                            "fused loop",
                            stage_name(st, s->stage), stage_name(st, attached_at(st, s->stage, iv)),
                            nm);
            holder = iv;
        }
        kinds |= 1 << sg->ivars[iv].kind;
        ext = (ext > 0 && sg->ivars[iv].extent > 0) ? ext * sg->ivars[iv].extent : 0;
        /* loop variables are int32 in the kernels */
        if (ext > 2147483647)
            return FAIL("fuse in %s: the fused loop would run %lld times or more (at most "
                        "2147483647)", stage_name(st, s->stage), (long long)ext);
    }
    if (n == 1)
        return AT_OK;
    if (sg->n_ivars == SS_MAX_IVARS || sg->n_rels == SS_MAX_RELS)
        return FAIL("fuse in %s: too many loops in the stage", stage_name(st, s->stage));
    rel = &sg->rels[sg->n_rels];
    memset(rel, 0, sizeof *rel);
    rel->kind = SS_REL_FUSE;
    rel->n_in = (uint8_t)n;
    rel->n_out = 1;
    for (int i = 0; i < n; i++)
        rel->in[i] = sg->leaves[first + i];
    c = &sg->ivars[sg->n_ivars];
    memset(c, 0, sizeof *c);
    c->extent = ext;
    c->kind = kinds == (1 << SS_ITER_SPATIAL) ? SS_ITER_SPATIAL
              : kinds == (1 << SS_ITER_REDUCE) ? SS_ITER_REDUCE
                                               : SS_ITER_MIXED;
    c->rel = (int8_t)sg->n_rels;
    c->axis = -1;
    rel->out[0] = (int8_t)sg->n_ivars;
    sg->n_rels++;
    sg->leaves[first] = (int8_t)sg->n_ivars;
    memmove(&sg->leaves[first + 1], &sg->leaves[first + n],
            (size_t)(sg->n_leaves - first - n) * sizeof sg->leaves[0]);
    sg->n_leaves -= n - 1;
    if (holder >= 0)
        for (int t = 0; t < st->n_stages; t++)
            if (st->stages[t].loc == SS_LOC_AT && st->stages[t].attach_stage == s->stage &&
                st->stages[t].attach_ivar == holder)
                st->stages[t].attach_ivar = sg->n_ivars;
    sg->n_ivars++;
    return AT_OK;
}

#define SS_MAX_VECTOR 64
#define SS_MAX_UNROLL 4096

static at_err do_annotate(ss_state *st, const ss_step *s, char *errmsg, size_t errmsg_size)
{
    ss_stage *sg;
    ss_ivar *v;
    int iv;
    char nm[64];
    at_err err;
    if ((err = check_stage(st, s->stage, 0, errmsg, errmsg_size)) ||
        (err = check_leaf(st, s->stage, s->iter, errmsg, errmsg_size)))
        return err;
    sg = &st->stages[s->stage];
    iv = sg->leaves[s->iter];
    v = &sg->ivars[iv];
    ss_state_ivar_name(st, s->stage, iv, nm, sizeof nm);
    if (s->a < 0 || s->a >= SS_N_ANNS)
        return FAIL("annotate %s.%s: unknown annotation %d", stage_name(st, s->stage), nm, s->a);
    switch ((ss_ann)s->a) {
    case SS_ANN_VECTORIZE:
        if (v->kind != SS_ITER_SPATIAL)
            return FAIL("cannot vectorize %s.%s: it is a %s loop (only spatial loops can be "
                        "vectorized)",
                        stage_name(st, s->stage), nm,
                        v->kind == SS_ITER_REDUCE ? "reduction" : "mixed spatial/reduction");
        if (v->extent <= 0 || v->extent > SS_MAX_VECTOR)
            return FAIL("cannot vectorize %s.%s: extent %lld (vector lengths are 1 to %d)",
                        stage_name(st, s->stage), nm, (long long)v->extent, SS_MAX_VECTOR);
        if (attached_at(st, s->stage, iv) >= 0)
            return FAIL("cannot vectorize %s.%s: stage %s is computed at this loop",
                        stage_name(st, s->stage), nm,
                        stage_name(st, attached_at(st, s->stage, iv)));
        break;
    case SS_ANN_PARALLEL:
        if (v->kind != SS_ITER_SPATIAL)
            return FAIL("cannot parallelize %s.%s: it is a %s loop (its iterations would race "
                        "on the same outputs)",
                        stage_name(st, s->stage), nm,
                        v->kind == SS_ITER_REDUCE ? "reduction" : "mixed spatial/reduction");
        for (int i = 0; i < sg->n_leaves; i++)
            if (sg->leaves[i] != iv && sg->ivars[sg->leaves[i]].ann == SS_ANN_PARALLEL)
                return FAIL("cannot parallelize %s.%s: loop %d of the stage is parallel "
                            "already (parallel loops do not nest)",
                            stage_name(st, s->stage), nm, i);
        break;
    case SS_ANN_UNROLL:
        if (v->extent <= 0 || v->extent > SS_MAX_UNROLL)
            return FAIL("cannot unroll %s.%s: extent %lld (at most %d)", stage_name(st, s->stage),
                        nm, (long long)v->extent, SS_MAX_UNROLL);
        break;
    default:
        break;
    }
    v->ann = (uint8_t)s->a;
    return AT_OK;
}

static at_err do_pragma(ss_state *st, const ss_step *s, char *errmsg, size_t errmsg_size)
{
    at_err err;
    if ((err = check_stage(st, s->stage, 0, errmsg, errmsg_size)) ||
        (err = check_leaf(st, s->stage, s->iter, errmsg, errmsg_size)))
        return err;
    if (s->a < 0 || s->a > 65536)
        return FAIL("pragma on %s: auto_unroll_max_step %d is out of range (0 to 65536)",
                    stage_name(st, s->stage), s->a);
    st->stages[s->stage].auto_unroll_max_step = s->a;
    return AT_OK;
}

static at_err do_compute_at(ss_state *st, const ss_step *s, char *errmsg, size_t errmsg_size)
{
    ss_stage *sg, *tg;
    int iv;
    at_err err;
    if ((err = check_stage(st, s->stage, 0, errmsg, errmsg_size)) ||
        (err = check_stage(st, s->a, 0, errmsg, errmsg_size)))
        return err;
    sg = &st->stages[s->stage];
    tg = &st->stages[s->a];
    if (st->dag->ops[s->stage].is_output)
        return FAIL("compute_at of %s: it is an output of the DAG", stage_name(st, s->stage));
    if (tg->loc == SS_LOC_INLINE)
        return FAIL("compute_at of %s into %s: %s is inlined", stage_name(st, s->stage),
                    stage_name(st, s->a), stage_name(st, s->a));
    if (s->a <= s->stage || !ss__reads_through_inline(st, s->a, s->stage))
        return FAIL("compute_at of %s into %s: %s does not read %s (the target must be a "
                    "consumer)",
                    stage_name(st, s->stage), stage_name(st, s->a), stage_name(st, s->a),
                    stage_name(st, s->stage));
    for (int r = s->stage + 1; r < st->n_stages; r++)
        if (r != s->a && ss__reads_through_inline(st, r, s->stage))
            return FAIL("compute_at of %s into %s: %s also reads %s, and would see only the "
                        "part %s needs",
                        stage_name(st, s->stage), stage_name(st, s->a), stage_name(st, r),
                        stage_name(st, s->stage), stage_name(st, s->a));
    if ((err = check_leaf(st, s->a, s->b, errmsg, errmsg_size)))
        return err;
    iv = tg->leaves[s->b];
    if (tg->ivars[iv].ann == SS_ANN_VECTORIZE)
        return FAIL("compute_at of %s into %s: loop %d is vectorized", stage_name(st, s->stage),
                    stage_name(st, s->a), s->b);
    if (sg->loc == SS_LOC_INLINE)
        return FAIL("compute_at of %s: the stage is inlined", stage_name(st, s->stage));
    sg->loc = SS_LOC_AT;
    sg->attach_stage = s->a;
    sg->attach_ivar = iv;
    st->bounds_dirty = 1;
    return AT_OK;
}

static at_err do_compute_inline(ss_state *st, const ss_step *s, char *errmsg,
                                size_t errmsg_size)
{
    const ss_op *op;
    at_err err;
    if ((err = check_stage(st, s->stage, 0, errmsg, errmsg_size)))
        return err;
    op = &st->dag->ops[s->stage];
    if (op->reduce != SS_RED_NONE)
        return FAIL("cannot inline %s: it is a reduction", op->name);
    if (op->is_output)
        return FAIL("cannot inline %s: it is an output of the DAG", op->name);
    for (int t = 0; t < st->n_stages; t++)
        if (st->stages[t].loc == SS_LOC_AT && st->stages[t].attach_stage == s->stage)
            return FAIL("cannot inline %s: stage %s is computed at one of its loops", op->name,
                        stage_name(st, t));
    st->stages[s->stage].loc = SS_LOC_INLINE;
    st->stages[s->stage].attach_stage = st->stages[s->stage].attach_ivar = -1;
    st->bounds_dirty = 1;
    return AT_OK;
}

static at_err do_compute_root(ss_state *st, const ss_step *s, char *errmsg, size_t errmsg_size)
{
    at_err err;
    if ((err = check_stage(st, s->stage, 0, errmsg, errmsg_size)))
        return err;
    st->stages[s->stage].loc = SS_LOC_ROOT;
    st->stages[s->stage].attach_stage = st->stages[s->stage].attach_ivar = -1;
    st->bounds_dirty = 1;
    return AT_OK;
}

/* ---- steps that add a stage: derive a new DAG ---- */

/* Copy st->dag into a new DAG with one new op inserted at 'at' (built by the caller
** through 'fill'), and loads of 'redirect_from' by ops in 'redirect_readers' (or every
** later op when NULL and redirect_from >= 0) pointing at 'redirect_to' (ids in the new
** DAG).  Later ops shift by one. */
typedef ss__fill_fn fill_fn;
/* Build the op that replaces 'replace_op' into *op, allocating from nd->arena; its loads
** use the old DAG's ids (derive maps them). */
typedef ss__repl_fn repl_fn;

static at_err derive(ss_state *st, int at, fill_fn fill, void *ctx, int redirect_from,
                     int redirect_to, const int64_t *readers, int n_readers, int replace_op,
                     repl_fn fill_repl, char *errmsg, size_t errmsg_size)
{
    const ss_dag *od = st->dag;
    ss_dag *nd = ss_dag_new();
    int *map, *map2;
    ss_stage *stages;
    at_err err = AT_ENOMEM;
    if (nd == NULL)
        return AT_ENOMEM;
    map = at_malloc((size_t)(od->n_ops + 1) * 2 * sizeof *map);
    if (map == NULL)
        goto fail;
    map2 = map + od->n_ops + 1;
    for (int i = 0; i < od->n_ops; i++)
        map[i] = i < at ? i : i + 1;
    nd->parent = ss_dag_ref(st->dag);
    for (int i = 0; i <= od->n_ops; i++) {
        ss_op *op;
        int oi = i < at ? i : i - 1;
        if (nd->n_ops == nd->n_cap) {
            int cap = nd->n_cap ? nd->n_cap * 2 : od->n_ops + 2;
            ss_op *p = at_realloc(nd->ops, (size_t)cap * sizeof *p);
            if (p == NULL)
                goto fail;
            nd->ops = p;
            nd->n_cap = cap;
        }
        op = &nd->ops[nd->n_ops];
        if (i == at) {
            if ((err = fill(ctx, nd, map)) != AT_OK)
                goto fail;
            continue;
        }
        if (oi == replace_op && fill_repl) {
            if ((err = fill_repl(ctx, nd, op)) != AT_OK)
                goto fail;
            err = AT_ENOMEM;
        } else {
            *op = od->ops[oi];
        }
        if (op->kind == SS_OP_COMPUTE) {
            int redirect = 0;
            for (int k = 0; k < od->n_ops; k++)
                map2[k] = map[k];
            if (redirect_from >= 0) {
                if (readers == NULL)
                    redirect = oi > redirect_from && oi != replace_op;
                for (int r = 0; r < n_readers; r++)
                    redirect |= readers[r] == oi;
            }
            if (redirect)
                map2[redirect_from] = redirect_to;
            op->body = ss_expr_subst(&nd->arena, op->body, NULL, 0, NULL, 0, map2);
            if (op->body == NULL)
                goto fail;
        }
        nd->n_ops++;
    }
    err = ss_dag_finish(nd);
    if (err == AT_ENOMEM)
        goto fail;
    if (err) {
        err = ss__fail(errmsg, errmsg_size, AT_ESCHED, "the derived DAG is invalid: %s",
                       nd->errmsg);
        goto fail;
    }
    stages = at_realloc(st->stages, (size_t)(st->n_stages + 1) * sizeof *stages);
    if (stages == NULL) {
        err = AT_ENOMEM;
        goto fail;
    }
    st->stages = stages;
    memmove(&stages[at + 1], &stages[at], (size_t)(st->n_stages - at) * sizeof *stages);
    st->n_stages++;
    stage_init(&stages[at], &nd->ops[at], at);
    for (int s = 0; s < st->n_stages; s++) {
        if (s != at)
            stages[s].op = s;
        if (stages[s].attach_stage >= at)
            stages[s].attach_stage++;
    }
    at_free(map);
    ss_dag_unref(st->dag);
    st->dag = nd;
    st->bounds_dirty = 1;
    return AT_OK;
fail:
    at_free(map);
    ss_dag_unref(nd);
    return err;
}

at_err ss__derive(ss_state *st, int at, ss__fill_fn fill, void *ctx, int redirect_from,
                  int redirect_to, const int64_t *readers, int n_readers, int replace_op,
                  ss__repl_fn fill_repl, char *errmsg, size_t errmsg_size)
{
    return derive(st, at, fill, ctx, redirect_from, redirect_to, readers, n_readers, replace_op,
                  fill_repl, errmsg, errmsg_size);
}

static at_err check_fresh(const ss_state *st, int stage, const char *what, char *errmsg,
                          size_t errmsg_size)
{
    const ss_stage *sg = &st->stages[stage];
    if (sg->n_rels > 0 || sg->n_steps > 0)
        return FAIL("%s of %s: it must come before other steps on the stage", what,
                    stage_name(st, stage));
    for (int t = 0; t < st->n_stages; t++)
        if (st->stages[t].loc == SS_LOC_AT && st->stages[t].attach_stage == stage)
            return FAIL("%s of %s: stage %s is computed at one of its loops", what,
                        stage_name(st, stage), stage_name(st, t));
    if (sg->loc == SS_LOC_INLINE)
        return FAIL("%s of %s: the stage is inlined", what, stage_name(st, stage));
    return AT_OK;
}

typedef struct copy_ctx {
    const ss_op *src;  /* op whose shape/axes the new op takes */
    int src_id;        /* new id of the tensor it reads (copy) or -1 (take src's body) */
    const char *name;
} copy_ctx;

/* The new op: a copy of src's value (src_id >= 0) or src's whole computation. */
static at_err fill_copy(void *vctx, ss_dag *nd, const int *map)
{
    copy_ctx *c = vctx;
    ss_op *op = &nd->ops[nd->n_ops];
    memset(op, 0, sizeof *op);
    op->name = at_arena_strdup(&nd->arena, c->name);
    if (op->name == NULL)
        return AT_ENOMEM;
    op->tag = c->src_id >= 0 ? "cache_read" : "cache_write";
    op->kind = SS_OP_COMPUTE;
    op->dtype = c->src->dtype;
    op->n_dims = op->n_axes = c->src->n_dims;
    memcpy(op->shape, c->src->shape, sizeof op->shape);
    for (int d = 0; d < op->n_dims; d++) {
        char an[32];
        op->axes[d].extent = c->src->shape[d];
        if (c->src->kind == SS_OP_COMPUTE)
            op->axes[d].name = c->src->axes[d].name;
        else {
            snprintf(an, sizeof an, "ax%d", d);
            op->axes[d].name = at_arena_strdup(&nd->arena, an);
            if (op->axes[d].name == NULL)
                return AT_ENOMEM;
        }
    }
    if (c->src_id >= 0) {
        ss_expr *idx[SS_MAX_DIMS];
        for (int d = 0; d < op->n_dims; d++)
            if ((idx[d] = ss_expr_axis(&nd->arena, d)) == NULL)
                return AT_ENOMEM;
        op->body = ss_expr_load(&nd->arena, op->dtype, c->src_id, op->n_dims, idx);
    } else {
        op->n_raxes = c->src->n_raxes;
        memcpy(op->axes, c->src->axes, sizeof op->axes);
        op->reduce = c->src->reduce;
        op->body = ss_expr_subst(&nd->arena, c->src->body, NULL, 0, NULL, 0, map);
    }
    if (op->body == NULL)
        return AT_ENOMEM;
    nd->n_ops++;
    return AT_OK;
}

/* cache_write: the original op becomes a copy of the new one (same id as the original in
** the old numbering; derive redirects that load to the new op). */
static at_err repl_copy_out(void *vctx, ss_dag *nd, ss_op *op)
{
    copy_ctx *c = vctx;
    ss_expr *idx[SS_MAX_DIMS];
    int old_id = (int)(c->src - ((const ss_dag *)nd->parent)->ops);
    *op = *c->src;
    op->n_raxes = 0;
    op->reduce = SS_RED_NONE;
    for (int d = 0; d < op->n_dims; d++)
        if ((idx[d] = ss_expr_axis(&nd->arena, d)) == NULL)
            return AT_ENOMEM;
    op->body = ss_expr_load(&nd->arena, op->dtype, old_id, op->n_dims, idx);
    return op->body ? AT_OK : AT_ENOMEM;
}

static at_err do_cache_write(ss_state *st, const ss_step *s, char *errmsg, size_t errmsg_size)
{
    const ss_op *op;
    copy_ctx c;
    char name[160];
    at_err err;
    int loc, attach_stage, attach_ivar, n_steps;
    int64_t reader = s->stage;
    if ((err = check_stage(st, s->stage, 0, errmsg, errmsg_size)) ||
        (err = check_fresh(st, s->stage, "cache_write", errmsg, errmsg_size)))
        return err;
    if (s->scope[0] == 0 || strchr(s->scope, '.'))
        return FAIL("cache_write of %s: scope '%s' is not a name", stage_name(st, s->stage),
                    s->scope);
    op = &st->dag->ops[s->stage];
    snprintf(name, sizeof name, "%s.%s", op->name, s->scope);
    if (ss_dag_find(st->dag, name) >= 0)
        return FAIL("cache_write of %s: %s exists already", op->name, name);
    c.src = op;
    c.src_id = -1;
    c.name = name;
    loc = st->stages[s->stage].loc;
    attach_stage = st->stages[s->stage].attach_stage;
    attach_ivar = st->stages[s->stage].attach_ivar;
    n_steps = st->stages[s->stage].n_steps;
    /* the copy-out (old id) reads the new op at 'stage': redirect its load there */
    err = derive(st, s->stage, fill_copy, &c, s->stage, s->stage, &reader, 1, s->stage,
                 repl_copy_out, errmsg, errmsg_size);
    if (err)
        return err;
    /* the copy-out stage keeps the original's place; its loops are the spatial axes */
    stage_init(&st->stages[s->stage + 1], &st->dag->ops[s->stage + 1], s->stage + 1);
    st->stages[s->stage + 1].loc = (uint8_t)loc;
    st->stages[s->stage + 1].attach_stage = attach_stage >= s->stage ? attach_stage + 1
                                                                      : attach_stage;
    st->stages[s->stage + 1].attach_ivar = attach_ivar;
    st->stages[s->stage + 1].n_steps = (uint8_t)n_steps;
    return AT_OK;
}

static at_err do_cache_read(ss_state *st, const ss_step *s, char *errmsg, size_t errmsg_size)
{
    const ss_op *op;
    copy_ctx c;
    char name[160];
    at_err err;
    if ((err = check_stage(st, s->stage, 1, errmsg, errmsg_size)))
        return err;
    op = &st->dag->ops[s->stage];
    if (s->scope[0] == 0 || strchr(s->scope, '.'))
        return FAIL("cache_read of %s: scope '%s' is not a name", op->name, s->scope);
    if (s->n_ints < 1)
        return FAIL("cache_read of %s: no reader given", op->name);
    for (int r = 0; r < s->n_ints; r++) {
        int64_t rd = s->ints[r];
        if (rd <= s->stage || rd >= st->n_stages || !ss_op_reads(&st->dag->ops[rd], s->stage))
            return FAIL("cache_read of %s: stage %lld does not read it", op->name,
                        (long long)rd);
        if (st->stages[rd].loc == SS_LOC_INLINE)
            return FAIL("cache_read of %s: reader %s is inlined", op->name,
                        stage_name(st, (int)rd));
    }
    snprintf(name, sizeof name, "%s.%s", op->name, s->scope);
    if (ss_dag_find(st->dag, name) >= 0)
        return FAIL("cache_read of %s: %s exists already", op->name, name);
    c.src = op;
    c.src_id = s->stage;
    c.name = name;
    return derive(st, s->stage + 1, fill_copy, &c, s->stage, s->stage + 1, s->ints, s->n_ints,
                  -1, NULL, errmsg, errmsg_size);
}

/* rfactor: the new op C.rf computes partial reductions with the chosen reduce loop as a
** spatial axis; C then reduces over that axis. */
typedef struct rf_ctx {
    const ss_state *st;
    int stage, factor_leaf, factor_pos;
    char name[160];
    char factor_name[64];
} rf_ctx;

static ss_expr *reduce_identity(at_arena *ar, ss_reduce red, at_dtype dt)
{
    int is_f = at_dtype_is_float(dt);
    switch (red) {
    case SS_RED_SUM:
        return is_f ? ss_expr_imm_float(ar, dt, 0.0) : ss_expr_imm_int(ar, dt, 0);
    case SS_RED_PROD:
        return is_f ? ss_expr_imm_float(ar, dt, 1.0) : ss_expr_imm_int(ar, dt, 1);
    case SS_RED_MAX:
        return is_f ? ss_expr_imm_float(ar, dt, -1.0 / 0.0) : ss_expr_imm_int(ar, dt, INT32_MIN);
    case SS_RED_MIN:
        return is_f ? ss_expr_imm_float(ar, dt, 1.0 / 0.0) : ss_expr_imm_int(ar, dt, INT32_MAX);
    default:
        return NULL;
    }
}

/* Express each ivar of stage 'sg' through the leaves, which are AXIS leaves numbered by
** leaf_axis[leaf position]; fills val[ivar] for op axes.  Returns 0 out of memory. */
static int leaves_to_axes(at_arena *ar, const ss_stage *sg, const int *leaf_axis,
                          ss_expr **val)
{
    for (int i = 0; i < sg->n_ivars; i++)
        val[i] = NULL;
    for (int p = 0; p < sg->n_leaves; p++)
        if (leaf_axis[p] >= 0 && (val[sg->leaves[p]] = ss_expr_axis(ar, leaf_axis[p])) == NULL)
            return 0;
    for (int r = sg->n_rels - 1; r >= 0; r--) {
        const ss_rel *rel = &sg->rels[r];
        if (rel->kind == SS_REL_SPLIT) {
            int64_t stride[SS_MAX_SPLIT];
            ss_expr *acc = NULL;
            ss_rel_strides(sg, rel, stride);
            for (int k = 0; k < rel->n_out; k++) {
                ss_expr *t = val[rel->out[k]];
                if (t == NULL)
                    continue;
                if (stride[k] != 1)
                    t = ss_expr_op(ar, SS_E_MUL, t, ss_expr_imm_int(ar, AT_DT_I32, stride[k]));
                acc = acc ? ss_expr_op(ar, SS_E_ADD, acc, t) : t;
                if (acc == NULL)
                    return 0;
            }
            val[rel->in[0]] = acc ? acc : ss_expr_imm_int(ar, AT_DT_I32, 0);
        } else {
            ss_expr *f = val[rel->out[0]];
            int64_t inner = 1;
            for (int k = rel->n_in - 1; k >= 0; k--) {
                int64_t e = sg->ivars[rel->in[k]].extent;
                ss_expr *t = f;
                if (f == NULL) {
                    val[rel->in[k]] = NULL;
                    continue;
                }
                if (inner != 1)
                    t = ss_expr_op(ar, SS_E_DIV, t, ss_expr_imm_int(ar, AT_DT_I32, inner));
                if (k > 0)
                    t = ss_expr_op(ar, SS_E_MOD, t, ss_expr_imm_int(ar, AT_DT_I32, e));
                if (t == NULL)
                    return 0;
                val[rel->in[k]] = t;
                inner *= e;
            }
        }
    }
    return 1;
}

static at_err fill_rf(void *vctx, ss_dag *nd, const int *map)
{
    rf_ctx *c = vctx;
    const ss_state *st = c->st;
    const ss_stage *sg = &st->stages[c->stage];
    const ss_op *src = &st->dag->ops[c->stage];
    ss_op *op = &nd->ops[nd->n_ops];
    int leaf_axis[SS_MAX_LEAVES], n_sp = src->n_axes, n_new_sp = n_sp + 1, nr = 0;
    ss_expr *val[SS_MAX_IVARS], *subst[SS_MAX_AXES], *body, *cond = NULL;
    char nm[64];
    memset(op, 0, sizeof *op);
    op->name = at_arena_strdup(&nd->arena, c->name);
    if (op->name == NULL)
        return AT_ENOMEM;
    op->tag = "rfactor";
    op->kind = SS_OP_COMPUTE;
    op->dtype = src->dtype;
    op->reduce = src->reduce;
    /* spatial axes: the op's, with the factor loop inserted at factor_pos */
    for (int d = 0, k = 0; d < n_new_sp; d++) {
        if (d == c->factor_pos) {
            ss_state_ivar_name(st, c->stage, sg->leaves[c->factor_leaf], nm, sizeof nm);
            op->axes[d].name = at_arena_strdup(&nd->arena, nm);
            op->axes[d].extent = sg->ivars[sg->leaves[c->factor_leaf]].extent;
        } else {
            op->axes[d] = src->axes[k++];
        }
        if (op->axes[d].name == NULL)
            return AT_ENOMEM;
        op->shape[d] = op->axes[d].extent;
    }
    op->n_dims = op->n_axes = n_new_sp;
    /* reduce axes: the other reduction leaves, in loop order */
    for (int p = 0; p < sg->n_leaves; p++) {
        const ss_ivar *v = &sg->ivars[sg->leaves[p]];
        leaf_axis[p] = -1;
        if (p == c->factor_leaf) {
            leaf_axis[p] = c->factor_pos;
        } else if (v->kind == SS_ITER_REDUCE) {
            ss_state_ivar_name(st, c->stage, sg->leaves[p], nm, sizeof nm);
            op->axes[n_new_sp + nr].name = at_arena_strdup(&nd->arena, nm);
            op->axes[n_new_sp + nr].extent = v->extent;
            if (op->axes[n_new_sp + nr].name == NULL)
                return AT_ENOMEM;
            leaf_axis[p] = n_new_sp + nr++;
        } else if (v->rel < 0) {
            int a = v->axis; /* an untouched spatial axis */
            leaf_axis[p] = a < c->factor_pos ? a : a + 1;
        }
    }
    op->n_raxes = nr;
    if (nr == 0) {
        /* a reduction over nothing else: C.rf is a plain copy of the body */
        op->reduce = SS_RED_NONE;
    }
    if (!leaves_to_axes(&nd->arena, sg, leaf_axis, val))
        return AT_ENOMEM;
    for (int a = 0; a < src->n_axes + src->n_raxes; a++) {
        subst[a] = val[a];
        if (subst[a] == NULL)
            return AT_ESCHED;
        if (a >= src->n_axes && sg->ivars[a].extent > 0) {
            /* a reduce axis covered by loops whose product exceeds its extent: guard */
            int64_t lo = 0, hi = 0;
            int64_t los[SS_MAX_AXES], his[SS_MAX_AXES];
            ss_expr *vars[SS_MAX_AXES], *ve;
            ss_var_ranges r = {n_new_sp + nr, los, his};
            for (int k = 0; k < n_new_sp + nr; k++) {
                los[k] = 0;
                his[k] = op->axes[k].extent - 1;
                vars[k] = ss_expr_var(&nd->arena, k);
            }
            ve = ss_expr_subst(&nd->arena, subst[a], vars, n_new_sp + nr, NULL, 0, NULL);
            if (ve == NULL)
                return AT_ENOMEM;
            if (!ss_expr_bounds(ve, &r, &lo, &hi) || hi >= src->axes[a].extent) {
                ss_expr *lt = ss_expr_op(&nd->arena, SS_E_LT, subst[a],
                                         ss_expr_imm_int(&nd->arena, AT_DT_I32,
                                                         src->axes[a].extent));
                cond = cond ? ss_expr_op(&nd->arena, SS_E_AND, cond, lt) : lt;
                if (cond == NULL)
                    return AT_ENOMEM;
            }
        }
    }
    /* spatial axes of the source op map to the new op's spatial axes */
    for (int a = 0; a < n_sp; a++) {
        subst[a] = ss_expr_axis(&nd->arena, a < c->factor_pos ? a : a + 1);
        if (subst[a] == NULL)
            return AT_ENOMEM;
    }
    body = ss_expr_subst(&nd->arena, src->body, subst, src->n_axes + src->n_raxes, NULL, 0, map);
    if (body == NULL)
        return AT_ENOMEM;
    if (cond) {
        body = ss_expr_select(&nd->arena, cond, body,
                              reduce_identity(&nd->arena, src->reduce, src->dtype));
        if (body == NULL)
            return AT_ENOMEM;
    }
    op->body = body;
    nd->n_ops++;
    return AT_OK;
}

/* C reduces the partials over the factor axis (loads use the old id of C, which derive
** redirects to C.rf). */
static at_err repl_rf(void *vctx, ss_dag *nd, ss_op *op)
{
    rf_ctx *c = vctx;
    const ss_op *src = &c->st->dag->ops[c->stage];
    const ss_stage *sg = &c->st->stages[c->stage];
    ss_expr *idx[SS_MAX_DIMS];
    *op = *src;
    op->n_raxes = 1;
    op->axes[src->n_axes].name = at_arena_strdup(&nd->arena, c->factor_name);
    op->axes[src->n_axes].extent = sg->ivars[sg->leaves[c->factor_leaf]].extent;
    if (op->axes[src->n_axes].name == NULL)
        return AT_ENOMEM;
    for (int d = 0, k = 0; d <= src->n_axes; d++) {
        idx[d] = ss_expr_axis(&nd->arena, d == c->factor_pos ? src->n_axes : k++);
        if (idx[d] == NULL)
            return AT_ENOMEM;
    }
    op->body = ss_expr_load(&nd->arena, src->dtype, c->stage, src->n_axes + 1, idx);
    return op->body ? AT_OK : AT_ENOMEM;
}

static at_err do_rfactor(ss_state *st, const ss_step *s, char *errmsg, size_t errmsg_size)
{
    const ss_stage *sg;
    const ss_op *op;
    rf_ctx c;
    int fleaf, fiv;
    at_err err;
    char nm[64];
    if ((err = check_stage(st, s->stage, 0, errmsg, errmsg_size)) ||
        (err = check_leaf(st, s->stage, s->iter, errmsg, errmsg_size)))
        return err;
    sg = &st->stages[s->stage];
    op = &st->dag->ops[s->stage];
    fleaf = s->iter;
    fiv = sg->leaves[fleaf];
    ss_state_ivar_name(st, s->stage, fiv, nm, sizeof nm);
    if (op->reduce == SS_RED_NONE)
        return FAIL("rfactor of %s: it is not a reduction", op->name);
    if (sg->ivars[fiv].kind != SS_ITER_REDUCE)
        return FAIL("rfactor of %s on %s: the loop is not a reduction loop", op->name, nm);
    if (s->a < 0 || s->a > op->n_axes)
        return FAIL("rfactor of %s: factor position %d is out of 0..%d", op->name, s->a,
                    op->n_axes);
    if (op->n_axes + 1 > SS_MAX_DIMS)
        return FAIL("rfactor of %s: too many dimensions", op->name);
    for (int r = 0; r < sg->n_rels; r++) {
        const ss_rel *rel = &sg->rels[r];
        for (int k = 0; k < rel->n_in; k++)
            if (sg->ivars[rel->in[k]].kind != SS_ITER_REDUCE)
                return FAIL("rfactor of %s: only reduction loops may be split or fused before "
                            "rfactor",
                            op->name);
    }
    for (int i = 0; i < sg->n_ivars; i++)
        if (sg->ivars[i].extent <= 0)
            return FAIL("rfactor of %s: a split length is not known yet", op->name);
    for (int t = 0; t < st->n_stages; t++)
        if (st->stages[t].loc == SS_LOC_AT && st->stages[t].attach_stage == s->stage)
            return FAIL("rfactor of %s: stage %s is computed at one of its loops", op->name,
                        stage_name(st, t));
    if (sg->loc == SS_LOC_INLINE)
        return FAIL("rfactor of %s: the stage is inlined", op->name);
    memset(&c, 0, sizeof c);
    c.st = st;
    c.stage = s->stage;
    c.factor_leaf = fleaf;
    c.factor_pos = s->a;
    snprintf(c.name, sizeof c.name, "%s.rf", op->name);
    snprintf(c.factor_name, sizeof c.factor_name, "%s", nm);
    if (ss_dag_find(st->dag, c.name) >= 0)
        return FAIL("rfactor of %s: %s exists already", op->name, c.name);
    {
        int64_t reader = s->stage;
        int loc = sg->loc, as = sg->attach_stage, ai = sg->attach_ivar;
        err = derive(st, s->stage, fill_rf, &c, s->stage, s->stage, &reader, 1, s->stage,
                     repl_rf, errmsg, errmsg_size);
        if (err)
            return err;
        stage_init(&st->stages[s->stage + 1], &st->dag->ops[s->stage + 1], s->stage + 1);
        st->stages[s->stage + 1].loc = (uint8_t)loc;
        st->stages[s->stage + 1].attach_stage = as >= s->stage ? as + 1 : as;
        st->stages[s->stage + 1].attach_ivar = ai;
    }
    return AT_OK;
}

int ss_rel_strides(const ss_stage *sg, const ss_rel *rel, int64_t *stride)
{
    int64_t p = 1;
    for (int k = rel->n_out - 1; k >= 0; k--) {
        stride[k] = p;
        if (k > 0) {
            int64_t l = sg->ivars[rel->out[k]].len;
            if (l <= 0)
                p = 0;
            p *= l;
        }
    }
    return p > 0;
}

/* ---- apply ---- */

/* The length of a follow_fused_split: the product of lengths[level] of its source splits
** (0 while one is unknown), as the inner length (factor) or the outer count (nparts),
** clamped to the loop's extent so that a small region still splits. */
static at_err follow_fused_lengths(const ss_state *st, const ss_step *step, int64_t *len,
                                   char *errmsg, size_t errmsg_size)
{
    int64_t p = 1, E = 0;
    at_err err;
    if ((err = check_stage(st, step->stage, 0, errmsg, errmsg_size)) ||
        (err = check_leaf(st, step->stage, step->iter, errmsg, errmsg_size)))
        return err;
    if (step->n_ints < 1)
        return FAIL("follow_fused_split of %s: no source split", stage_name(st, step->stage));
    if (step->b != 0 && step->b != 1)
        return FAIL("follow_fused_split of %s: factor_or_nparts is 0 or 1, not %d",
                    stage_name(st, step->stage), step->b);
    for (int i = 0; i < step->n_ints; i++) {
        int64_t k = step->ints[i];
        const ss_step *src;
        if (k < 0 || k >= st->n_steps || st->steps[k].kind != SS_STEP_SPLIT)
            return FAIL("follow_fused_split of %s: step %lld is not an earlier split",
                        stage_name(st, step->stage), (long long)k);
        src = &st->steps[k];
        if (step->a < 0 || step->a >= src->n_ints)
            return FAIL("follow_fused_split of %s: level %d, split step %lld has %d lengths",
                        stage_name(st, step->stage), step->a, (long long)k, src->n_ints);
        if (src->ints[step->a] <= 0 || p == 0)
            p = 0;
        else if ((p *= src->ints[step->a]) > (1ll << 31))
            return FAIL("follow_fused_split of %s: the product is too large",
                        stage_name(st, step->stage));
    }
    E = st->stages[step->stage].ivars[st->stages[step->stage].leaves[step->iter]].extent;
    if (p > 0 && E > 0) {
        if (step->b == 0)
            p = (E + p - 1) / p; /* nparts: the inner loop takes the rest */
        if (p > E)
            p = E;
    } else if (step->b == 0) {
        p = 0;
    }
    len[0] = p;
    return AT_OK;
}

static int has_shared_stage(const ss_state *st)
{
    for (int s = 0; s < st->n_stages; s++) {
        const ss_op *op = &st->dag->ops[s];
        size_t n = strlen(op->name);
        if (st->stages[s].loc == SS_LOC_AT && op->tag && strcmp(op->tag, "cache_read") == 0 &&
            n > 7 && strcmp(op->name + n - 7, ".shared") == 0)
            return 1;
    }
    return 0;
}

at_err ss_state_apply(ss_state *st, const ss_step *step, char *errmsg, size_t errmsg_size)
{
    ss_state *backup = NULL;
    at_err err;
    int64_t lengths[SS_STEP_MAX_INTS];
    int n = 0, touches = step->stage;
    if (errmsg && errmsg_size)
        errmsg[0] = 0;
    if ((unsigned)step->kind >= SS_N_STEP_KINDS)
        return FAIL("unknown step kind %d", (int)step->kind);
    if (step->n_ints < 0 || step->n_ints > SS_STEP_MAX_INTS)
        return FAIL("step %s: %d integers (at most %d)", step_tags[step->kind], step->n_ints,
                    SS_STEP_MAX_INTS);
    if (st->bounds_dirty && (step->kind == SS_STEP_SPLIT || step->kind == SS_STEP_FOLLOW_SPLIT ||
                             step->kind == SS_STEP_FOLLOW_FUSED_SPLIT ||
                             step->kind == SS_STEP_ANNOTATE || step->kind == SS_STEP_RFACTOR)) {
        if ((err = ss__infer_bounds(st, errmsg, errmsg_size)) != AT_OK)
            return err;
    }
    /* steps that derive a DAG or move stages change many things: work on a copy, so that
    ** a refusal (or a later failure of bound inference) restores the state exactly */
    if (step->kind == SS_STEP_CACHE_WRITE || step->kind == SS_STEP_CACHE_READ ||
        step->kind == SS_STEP_RFACTOR || step->kind == SS_STEP_LAYOUT_REWRITE ||
        step->kind == SS_STEP_COMPUTE_AT ||
        step->kind == SS_STEP_COMPUTE_INLINE || step->kind == SS_STEP_COMPUTE_ROOT ||
        step->kind == SS_STEP_SPLIT || step->kind == SS_STEP_FOLLOW_SPLIT ||
        step->kind == SS_STEP_FOLLOW_FUSED_SPLIT ||
        step->kind == SS_STEP_FUSE || step->kind == SS_STEP_REORDER) {
        if ((err = ss_state_copy(st, &backup)) != AT_OK)
            return err;
    }
    switch (step->kind) {
    case SS_STEP_SPLIT:
        err = do_split(st, step, step->ints, step->n_ints, errmsg, errmsg_size);
        break;
    case SS_STEP_FOLLOW_SPLIT: {
        const ss_step *src;
        if (step->a < 0 || step->a >= st->n_steps || st->steps[step->a].kind != SS_STEP_SPLIT) {
            err = FAIL("follow_split: step %d is not an earlier split", step->a);
            break;
        }
        src = &st->steps[step->a];
        if (step->b < 1 || step->b > src->n_ints) {
            err = FAIL("follow_split: %d lengths asked, split step %d has %d", step->b, step->a,
                       src->n_ints);
            break;
        }
        for (n = 0; n < step->b - 1; n++)
            lengths[n] = src->ints[n];
        lengths[n] = prod_lengths(src->n_ints - n, src->ints + n);
        n++;
        err = do_split(st, step, lengths, n, errmsg, errmsg_size);
        break;
    }
    case SS_STEP_FOLLOW_FUSED_SPLIT:
        err = follow_fused_lengths(st, step, lengths, errmsg, errmsg_size);
        if (err == AT_OK)
            err = do_split(st, step, lengths, 1, errmsg, errmsg_size);
        break;
    case SS_STEP_REORDER:
        err = do_reorder(st, step, errmsg, errmsg_size);
        break;
    case SS_STEP_FUSE:
        err = do_fuse(st, step, errmsg, errmsg_size);
        break;
    case SS_STEP_ANNOTATE:
        err = do_annotate(st, step, errmsg, errmsg_size);
        break;
    case SS_STEP_PRAGMA:
        err = do_pragma(st, step, errmsg, errmsg_size);
        break;
    case SS_STEP_COMPUTE_AT:
        err = do_compute_at(st, step, errmsg, errmsg_size);
        break;
    case SS_STEP_COMPUTE_INLINE:
        err = do_compute_inline(st, step, errmsg, errmsg_size);
        break;
    case SS_STEP_COMPUTE_ROOT:
        err = do_compute_root(st, step, errmsg, errmsg_size);
        break;
    case SS_STEP_CACHE_WRITE:
        err = do_cache_write(st, step, errmsg, errmsg_size);
        touches = step->stage + 1;
        break;
    case SS_STEP_CACHE_READ:
        err = do_cache_read(st, step, errmsg, errmsg_size);
        touches = -1; /* the producer's loops are not changed: later steps may still tile it */
        break;
    case SS_STEP_RFACTOR:
        err = do_rfactor(st, step, errmsg, errmsg_size);
        touches = step->stage + 1;
        break;
    case SS_STEP_LAYOUT_REWRITE:
        err = ss__do_layout_rewrite(st, step, errmsg, errmsg_size);
        touches = -1;
        break;
    default:
        err = FAIL("unknown step kind %d", (int)step->kind);
    }
    if (err == AT_OK && (step->kind == SS_STEP_SPLIT || step->kind == SS_STEP_FOLLOW_SPLIT ||
                         step->kind == SS_STEP_FOLLOW_FUSED_SPLIT ||
                         step->kind == SS_STEP_FUSE || step->kind == SS_STEP_REORDER)) {
        for (int t = 0; t < st->n_stages; t++)
            if (st->stages[t].loc == SS_LOC_AT && st->stages[t].attach_stage == step->stage)
                st->bounds_dirty = 1;
    }
    /* a binding to GPU threads widens the regions of shared stages inside (ss_bound.c) */
    if (err == AT_OK && step->kind == SS_STEP_ANNOTATE && step->a >= SS_ANN_VTHREAD &&
        has_shared_stage(st))
        st->bounds_dirty = 1;
    /* keep the state consistent: extents of attached stages follow every step */
    if (err == AT_OK && st->bounds_dirty)
        err = ss__infer_bounds(st, errmsg, errmsg_size);
    if (err == AT_OK)
        err = push_step(st, step);
    if (err != AT_OK) {
        if (backup) {
            /* restore: swap the backup's contents in */
            ss_state tmp = *st;
            *st = *backup;
            *backup = tmp;
        }
        ss_state_free(backup);
        return err;
    }
    ss_state_free(backup);
    if (touches >= 0 && touches < st->n_stages && st->stages[touches].n_steps < 255)
        st->stages[touches].n_steps++;
    if (step->kind == SS_STEP_SPLIT || step->kind == SS_STEP_FOLLOW_SPLIT ||
        step->kind == SS_STEP_FOLLOW_FUSED_SPLIT)
        recompute_concrete(st);
    return AT_OK;
}

at_err ss_state_infer_bounds(ss_state *st, char *errmsg, size_t errmsg_size)
{
    return ss__infer_bounds(st, errmsg, errmsg_size);
}

void ss__pass_down(ss_stage *sg)
{
    pass_down(sg);
}

void ss__recompute_concrete(ss_state *st)
{
    recompute_concrete(st);
}

/* ---- wrappers ---- */

static ss_step mk(ss_step_kind k, int stage, int iter)
{
    ss_step s;
    memset(&s, 0, sizeof s);
    s.kind = k;
    s.stage = stage;
    s.iter = iter;
    return s;
}

at_err ss_state_split(ss_state *st, int stage, int iter, int n, const int64_t *lengths,
                      char *errmsg, size_t errmsg_size)
{
    ss_step s = mk(SS_STEP_SPLIT, stage, iter);
    if (n < 0 || n > SS_STEP_MAX_INTS)
        return FAIL("split: %d lengths", n);
    s.n_ints = n;
    memcpy(s.ints, lengths, (size_t)n * sizeof *lengths);
    if (stage >= 0 && stage < st->n_stages && iter >= 0 && iter < st->stages[stage].n_leaves) {
        if (st->bounds_dirty && ss__infer_bounds(st, NULL, 0) != AT_OK)
            s.extent = 0;
        else
            s.extent = st->stages[stage].ivars[st->stages[stage].leaves[iter]].extent;
    }
    return ss_state_apply(st, &s, errmsg, errmsg_size);
}

at_err ss_state_follow_split(ss_state *st, int stage, int iter, int src_step, int n_split,
                             char *errmsg, size_t errmsg_size)
{
    ss_step s = mk(SS_STEP_FOLLOW_SPLIT, stage, iter);
    s.a = src_step;
    s.b = n_split;
    return ss_state_apply(st, &s, errmsg, errmsg_size);
}

at_err ss_state_follow_fused_split(ss_state *st, int stage, int iter, int n_src,
                                   const int64_t *src_steps, int level, int factor,
                                   char *errmsg, size_t errmsg_size)
{
    ss_step s = mk(SS_STEP_FOLLOW_FUSED_SPLIT, stage, iter);
    if (n_src < 1 || n_src > SS_STEP_MAX_INTS)
        return FAIL("follow_fused_split: %d source splits", n_src);
    s.n_ints = n_src;
    memcpy(s.ints, src_steps, (size_t)n_src * sizeof *src_steps);
    s.a = level;
    s.b = factor ? 1 : 0;
    return ss_state_apply(st, &s, errmsg, errmsg_size);
}

at_err ss_state_reorder(ss_state *st, int stage, int n, const int64_t *order, char *errmsg,
                        size_t errmsg_size)
{
    ss_step s = mk(SS_STEP_REORDER, stage, 0);
    if (n < 0 || n > SS_STEP_MAX_INTS)
        return FAIL("reorder: %d positions", n);
    s.n_ints = n;
    memcpy(s.ints, order, (size_t)n * sizeof *order);
    return ss_state_apply(st, &s, errmsg, errmsg_size);
}

at_err ss_state_fuse(ss_state *st, int stage, int n, const int64_t *iters, char *errmsg,
                     size_t errmsg_size)
{
    ss_step s = mk(SS_STEP_FUSE, stage, 0);
    if (n < 0 || n > SS_STEP_MAX_INTS)
        return FAIL("fuse: %d positions", n);
    s.n_ints = n;
    memcpy(s.ints, iters, (size_t)n * sizeof *iters);
    return ss_state_apply(st, &s, errmsg, errmsg_size);
}

at_err ss_state_annotate(ss_state *st, int stage, int iter, ss_ann ann, char *errmsg,
                         size_t errmsg_size)
{
    ss_step s = mk(SS_STEP_ANNOTATE, stage, iter);
    s.a = (int)ann;
    return ss_state_apply(st, &s, errmsg, errmsg_size);
}

at_err ss_state_pragma_unroll(ss_state *st, int stage, int iter, int max_step, char *errmsg,
                              size_t errmsg_size)
{
    ss_step s = mk(SS_STEP_PRAGMA, stage, iter);
    s.a = max_step;
    return ss_state_apply(st, &s, errmsg, errmsg_size);
}

at_err ss_state_compute_at(ss_state *st, int stage, int target_stage, int target_iter,
                           char *errmsg, size_t errmsg_size)
{
    ss_step s = mk(SS_STEP_COMPUTE_AT, stage, 0);
    s.a = target_stage;
    s.b = target_iter;
    return ss_state_apply(st, &s, errmsg, errmsg_size);
}

at_err ss_state_compute_inline(ss_state *st, int stage, char *errmsg, size_t errmsg_size)
{
    ss_step s = mk(SS_STEP_COMPUTE_INLINE, stage, 0);
    return ss_state_apply(st, &s, errmsg, errmsg_size);
}

at_err ss_state_compute_root(ss_state *st, int stage, char *errmsg, size_t errmsg_size)
{
    ss_step s = mk(SS_STEP_COMPUTE_ROOT, stage, 0);
    return ss_state_apply(st, &s, errmsg, errmsg_size);
}

at_err ss_state_cache_write(ss_state *st, int stage, const char *scope, char *errmsg,
                            size_t errmsg_size)
{
    ss_step s = mk(SS_STEP_CACHE_WRITE, stage, 0);
    if (strlen(scope) >= sizeof s.scope)
        return FAIL("cache_write: scope name too long");
    strcpy(s.scope, scope);
    return ss_state_apply(st, &s, errmsg, errmsg_size);
}

at_err ss_state_cache_read(ss_state *st, int stage, const char *scope, int n_readers,
                           const int64_t *readers, char *errmsg, size_t errmsg_size)
{
    ss_step s = mk(SS_STEP_CACHE_READ, stage, 0);
    if (strlen(scope) >= sizeof s.scope)
        return FAIL("cache_read: scope name too long");
    if (n_readers < 0 || n_readers > SS_STEP_MAX_INTS)
        return FAIL("cache_read: %d readers", n_readers);
    strcpy(s.scope, scope);
    s.n_ints = n_readers;
    memcpy(s.ints, readers, (size_t)n_readers * sizeof *readers);
    return ss_state_apply(st, &s, errmsg, errmsg_size);
}

at_err ss_state_rfactor(ss_state *st, int stage, int iter, int factor_pos, char *errmsg,
                        size_t errmsg_size)
{
    ss_step s = mk(SS_STEP_RFACTOR, stage, iter);
    s.a = factor_pos;
    return ss_state_apply(st, &s, errmsg, errmsg_size);
}

at_err ss_state_layout_rewrite(ss_state *st, int stage, int input, char *errmsg,
                               size_t errmsg_size)
{
    ss_step s = mk(SS_STEP_LAYOUT_REWRITE, stage, 0);
    s.a = input;
    return ss_state_apply(st, &s, errmsg, errmsg_size);
}

/* ---- printing the loop structure ---- */

static void print_stage(const ss_state *st, int s, int depth, at_buf *b);

static void print_attached(const ss_state *st, int s, int iv, int depth, at_buf *b)
{
    for (int t = 0; t < st->n_stages; t++)
        if (st->stages[t].loc == SS_LOC_AT && st->stages[t].attach_stage == s &&
            st->stages[t].attach_ivar == iv)
            print_stage(st, t, depth, b);
}

static void print_stage(const ss_state *st, int s, int depth, at_buf *b)
{
    const ss_stage *sg = &st->stages[s];
    char nm[64];
    int d = depth;
    if (sg->auto_unroll_max_step)
        at_buf_printf(b, "%*s%s auto_unroll_max_step=%d\n", 2 * d, "", st->dag->ops[s].name,
                      sg->auto_unroll_max_step);
    for (int p = 0; p < sg->n_leaves; p++) {
        const ss_ivar *v = &sg->ivars[sg->leaves[p]];
        ss_state_ivar_name(st, s, sg->leaves[p], nm, sizeof nm);
        at_buf_printf(b, "%*s%s%s %s (0,%lld)\n", 2 * d, "",
                      v->ann ? ss_ann_name((ss_ann)v->ann) : "for",
                      v->kind == SS_ITER_REDUCE ? " reduce" : "", nm, (long long)v->extent);
        d++;
        print_attached(st, s, sg->leaves[p], d, b);
    }
    at_buf_printf(b, "%*s%s = ...\n", 2 * d, "", st->dag->ops[s].name);
}

void ss_state_print(const ss_state *st, at_buf *b)
{
    for (int s = 0; s < st->n_stages; s++) {
        const ss_stage *sg = &st->stages[s];
        if (st->dag->ops[s].kind != SS_OP_COMPUTE)
            continue;
        if (sg->loc == SS_LOC_INLINE) {
            at_buf_printf(b, "%s inlined\n", st->dag->ops[s].name);
            continue;
        }
        if (sg->loc == SS_LOC_ROOT)
            print_stage(st, s, 0, b);
    }
}

/* ---- hashing the loop structure ---- */

/* What print_stage prints, as binary tokens instead of text: the same fields in the same
** order, so states print alike exactly when they hash alike (up to 64-bit collisions). */
static void hash_stage(const ss_state *st, int s, at_buf *b)
{
    const ss_stage *sg = &st->stages[s];
    int64_t tok[4] = {3000000 + s, sg->auto_unroll_max_step, 0, 0};
    at_buf_put(b, tok, 2 * sizeof tok[0]);
    for (int p = 0; p < sg->n_leaves; p++) {
        const ss_ivar *v = &sg->ivars[sg->leaves[p]];
        tok[0] = 4000000;
        tok[1] = v->ann;
        tok[2] = v->kind == SS_ITER_REDUCE;
        tok[3] = v->extent;
        at_buf_put(b, tok, sizeof tok);
        name_walk(st, sg, sg->leaves[p], 1, b);
        for (int t = 0; t < st->n_stages; t++) /* print_attached */
            if (st->stages[t].loc == SS_LOC_AT && st->stages[t].attach_stage == s &&
                st->stages[t].attach_ivar == sg->leaves[p])
                hash_stage(st, t, b);
    }
    tok[0] = 5000000 + s; /* "name = ..." */
    at_buf_put(b, tok, sizeof tok[0]);
}

uint64_t ss_state_hash(const ss_state *st)
{
    at_buf b;
    uint64_t h;
    at_buf_init(&b);
    for (int s = 0; s < st->n_stages; s++) {
        int64_t tok = 6000000 + s; /* "name inlined" */
        if (st->dag->ops[s].kind != SS_OP_COMPUTE)
            continue;
        if (st->stages[s].loc == SS_LOC_INLINE)
            at_buf_put(&b, &tok, sizeof tok);
        else if (st->stages[s].loc == SS_LOC_ROOT)
            hash_stage(st, s, &b);
    }
    h = b.data ? at_hash64(b.data, b.len) : 0;
    at_buf_fini(&b);
    return h;
}
