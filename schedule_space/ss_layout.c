/* schedule_space/ss_layout.c -- layout rewrite of constant inputs (weights).
**
** A tiled stage reads a weight W in an order that jumps across memory (B[k, j] under SSRSRS
** walks j0 j1 k0 j2 k1 j3).  The step adds a tensor "W.layout" whose dimensions are the
** stage's loops over W's axes, in loop order: the innermost tiles then read it
** contiguously.  W.layout is tagged "layout_rewrite": it is not computed by the kernel but
** once, when weights are loaded, by the artifact's pre-transform; the kernel takes it as an
** argument in place of W.
**
** Each new dimension is one split level of one of W's axes; the extents come from the
** splits applied to the whole axis (not to a region of an attached stage), so the layout
** is the same for every tile.  A level of extent 1 is dropped. */
#include "ss_int.h"

#include <stdio.h>
#include <string.h>

#define FAIL(...) ss__fail(errmsg, errmsg_size, AT_ESCHED, __VA_ARGS__)

typedef struct lr_ctx {
    const ss_state *st;
    int stage, input;
    int n_new;
    int64_t extent[SS_MAX_DIMS];   /* of each new dimension */
    int axis_of[SS_MAX_DIMS];      /* the reader's op axis it walks */
    int64_t stride[SS_MAX_DIMS];   /* its weight in that axis' value */
    int64_t len[SS_MAX_DIMS];      /* its extent as a modulus (0: the outermost, no mod) */
    char names[SS_MAX_DIMS][48];
    int dim_axis[SS_MAX_DIMS];     /* for each dimension of W: the reader's axis, or -1 */
} lr_ctx;

/* Full-extent strides and extents of every ivar of the reader (splits only). */
static int full_extents(const ss_stage *sg, const ss_op *op, int64_t *ext, int64_t *gstride,
                        int *axis_of)
{
    for (int i = 0; i < sg->n_ivars; i++) {
        ext[i] = 0;
        gstride[i] = 0;
        axis_of[i] = -1;
        if (sg->ivars[i].rel < 0) {
            ext[i] = op->axes[sg->ivars[i].axis].extent;
            gstride[i] = 1;
            axis_of[i] = sg->ivars[i].axis;
        }
    }
    for (int r = 0; r < sg->n_rels; r++) {
        const ss_rel *rel = &sg->rels[r];
        int64_t stride[SS_MAX_SPLIT], p = 1;
        if (rel->kind != SS_REL_SPLIT) {
            for (int k = 0; k < rel->n_out; k++)
                axis_of[rel->out[k]] = -2; /* fused: not usable */
            continue;
        }
        if (!ss_rel_strides(sg, rel, stride))
            return 0;
        for (int k = 1; k < rel->n_out; k++)
            p *= sg->ivars[rel->out[k]].len;
        if (ext[rel->in[0]] <= 0 || ext[rel->in[0]] % p != 0)
            return 0; /* only dividing splits give a regular layout */
        for (int k = 0; k < rel->n_out; k++) {
            int c = rel->out[k];
            ext[c] = k == 0 ? ext[rel->in[0]] / p : sg->ivars[c].len;
            gstride[c] = gstride[rel->in[0]] * stride[k];
            axis_of[c] = axis_of[rel->in[0]];
        }
    }
    return 1;
}

static int axis_of_index(const ss_expr *e)
{
    if (e->kind == SS_E_AXIS)
        return e->id;
    if (e->kind == SS_E_IMM_INT && e->v.i == 0)
        return -1;
    return -3;
}

static int check_loads(const ss_expr *e, int input, int *dim_axis, int *seen)
{
    if (e->kind == SS_E_LOAD && e->id == input) {
        for (int d = 0; d < e->n; d++) {
            int a = axis_of_index(e->a[d]);
            if (a == -3)
                return 0;
            if (*seen && dim_axis[d] != a)
                return 0;
            dim_axis[d] = a;
        }
        *seen = 1;
        return 1;
    }
    for (int i = 0; i < e->n; i++)
        if (!check_loads(e->a[i], input, dim_axis, seen))
            return 0;
    return 1;
}

/* The new tensor: W.layout[n0, n1, ...] = W[axis values rebuilt from the new indices]. */
static at_err fill_layout(void *vctx, ss_dag *nd, const int *map)
{
    lr_ctx *c = vctx;
    const ss_op *w = &c->st->dag->ops[c->input];
    ss_op *op = &nd->ops[nd->n_ops];
    ss_expr *idx[SS_MAX_DIMS];
    char name[160];
    (void)map;
    memset(op, 0, sizeof *op);
    snprintf(name, sizeof name, "%s.layout", w->name);
    op->name = at_arena_strdup(&nd->arena, name);
    if (op->name == NULL)
        return AT_ENOMEM;
    op->tag = "layout_rewrite";
    op->kind = SS_OP_COMPUTE;
    op->dtype = w->dtype;
    op->is_const = 1;
    op->n_dims = op->n_axes = c->n_new;
    for (int d = 0; d < c->n_new; d++) {
        op->axes[d].name = at_arena_strdup(&nd->arena, c->names[d]);
        op->axes[d].extent = c->extent[d];
        op->shape[d] = c->extent[d];
        if (op->axes[d].name == NULL)
            return AT_ENOMEM;
    }
    for (int d = 0; d < w->n_dims; d++) {
        ss_expr *acc = NULL;
        for (int k = 0; k < c->n_new; k++) {
            ss_expr *t;
            if (c->axis_of[k] != c->dim_axis[d] || c->dim_axis[d] < 0)
                continue;
            t = ss_expr_axis(&nd->arena, k);
            if (t && c->stride[k] != 1)
                t = ss_expr_op(&nd->arena, SS_E_MUL, t,
                               ss_expr_imm_int(&nd->arena, AT_DT_I32, c->stride[k]));
            acc = acc && t ? ss_expr_op(&nd->arena, SS_E_ADD, acc, t) : t;
            if (acc == NULL)
                return AT_ENOMEM;
        }
        idx[d] = acc ? acc : ss_expr_imm_int(&nd->arena, AT_DT_I32, 0);
        if (idx[d] == NULL)
            return AT_ENOMEM;
    }
    op->body = ss_expr_load(&nd->arena, w->dtype, c->input, w->n_dims, idx);
    if (op->body == NULL)
        return AT_ENOMEM;
    nd->n_ops++;
    return AT_OK;
}

/* Replace the reader's loads of W by loads of W.layout (still numbered W here: derive
** redirects them), indexed by each level's value rebuilt from the reader's axes. */
static ss_expr *rewrite(const lr_ctx *c, ss_dag *nd, const ss_expr *e, int *oom)
{
    ss_expr *kids[SS_MAX_DIMS + 4], *r;
    int changed = 0;
    if (e->kind == SS_E_LOAD && e->id == c->input) {
        ss_expr *idx[SS_MAX_DIMS];
        for (int k = 0; k < c->n_new; k++) {
            ss_expr *t = ss_expr_axis(&nd->arena, c->axis_of[k]);
            if (t && c->stride[k] != 1)
                t = ss_expr_op(&nd->arena, SS_E_DIV, t,
                               ss_expr_imm_int(&nd->arena, AT_DT_I32, c->stride[k]));
            if (t && c->len[k] > 0)
                t = ss_expr_op(&nd->arena, SS_E_MOD, t,
                               ss_expr_imm_int(&nd->arena, AT_DT_I32, c->len[k]));
            if (t == NULL) {
                *oom = 1;
                return NULL;
            }
            idx[k] = t;
        }
        r = ss_expr_load(&nd->arena, (at_dtype)e->dtype, c->input, c->n_new, idx);
        if (r == NULL)
            *oom = 1;
        return r;
    }
    if (e->n == 0)
        return (ss_expr *)e;
    for (int i = 0; i < e->n; i++) {
        kids[i] = rewrite(c, nd, e->a[i], oom);
        if (kids[i] == NULL)
            return NULL;
        changed |= kids[i] != e->a[i];
    }
    if (!changed)
        return (ss_expr *)e;
    r = at_arena_alloc(&nd->arena, sizeof *r + (size_t)e->n * sizeof(ss_expr *));
    if (r == NULL) {
        *oom = 1;
        return NULL;
    }
    memcpy(r, e, sizeof *r);
    for (int i = 0; i < e->n; i++)
        r->a[i] = kids[i];
    return r;
}

static at_err repl_reader(void *vctx, ss_dag *nd, ss_op *op)
{
    lr_ctx *c = vctx;
    int oom = 0;
    *op = c->st->dag->ops[c->stage];
    op->body = rewrite(c, nd, op->body, &oom);
    return op->body ? AT_OK : AT_ENOMEM;
}

at_err ss__do_layout_rewrite(ss_state *st, const ss_step *s, char *errmsg, size_t errmsg_size)
{
    lr_ctx c;
    const ss_op *op, *w;
    const ss_stage *sg;
    int64_t ext[SS_MAX_IVARS], gstride[SS_MAX_IVARS];
    int axis_of[SS_MAX_IVARS], seen = 0, loc, as, ai, n_steps;
    int64_t reader;
    at_err err;
    if (s->stage < 0 || s->stage >= st->n_stages || s->a < 0 || s->a >= s->stage)
        return FAIL("layout_rewrite: stage %d does not read tensor %d", s->stage, s->a);
    op = &st->dag->ops[s->stage];
    w = &st->dag->ops[s->a];
    sg = &st->stages[s->stage];
    if (w->kind != SS_OP_PLACEHOLDER || !w->is_const)
        return FAIL("layout_rewrite of %s: only constant inputs (weights) can be rewritten",
                    w->name);
    if (op->kind != SS_OP_COMPUTE || sg->loc == SS_LOC_INLINE || !ss_op_reads(op, s->a))
        return FAIL("layout_rewrite of %s: stage %s does not read it", w->name, op->name);
    for (int t = 0; t < st->n_stages; t++)
        if (t != s->stage && ss_op_reads(&st->dag->ops[t], s->a))
            return FAIL("layout_rewrite of %s: %s reads it too", w->name, st->dag->ops[t].name);
    memset(&c, 0, sizeof c);
    c.st = st;
    c.stage = s->stage;
    c.input = s->a;
    for (int d = 0; d < SS_MAX_DIMS; d++)
        c.dim_axis[d] = -1;
    if (!check_loads(op->body, s->a, c.dim_axis, &seen) || !seen)
        return FAIL("layout_rewrite of %s: %s must index it with plain axes", w->name, op->name);
    if (!full_extents(sg, op, ext, gstride, axis_of))
        return FAIL("layout_rewrite of %s: the splits of %s must divide its axes", w->name,
                    op->name);
    for (int q = 0; q < sg->n_leaves; q++) {
        int iv = sg->leaves[q], used = 0;
        for (int d = 0; d < w->n_dims; d++)
            used |= c.dim_axis[d] >= 0 && c.dim_axis[d] == axis_of[iv];
        if (axis_of[iv] == -2) {
            for (int d = 0; d < w->n_dims; d++)
                if (c.dim_axis[d] >= 0)
                    return FAIL("layout_rewrite of %s: a loop of %s fuses other loops",
                                w->name, op->name);
        }
        if (!used || ext[iv] <= 1)
            continue;
        if (c.n_new == SS_MAX_DIMS)
            return FAIL("layout_rewrite of %s: more than %d tiled dimensions", w->name,
                        SS_MAX_DIMS);
        c.extent[c.n_new] = ext[iv];
        c.axis_of[c.n_new] = axis_of[iv];
        c.stride[c.n_new] = gstride[iv];
        c.len[c.n_new] = sg->ivars[iv].rel < 0 ? 0 : (gstride[iv] * ext[iv] ==
                                                       op->axes[axis_of[iv]].extent ? 0 : ext[iv]);
        ss_state_ivar_name(st, s->stage, iv, c.names[c.n_new], sizeof c.names[c.n_new]);
        for (char *p = c.names[c.n_new]; *p; p++)
            if (*p == '@')
                *p = '_';
        c.n_new++;
    }
    if (c.n_new == 0) {
        c.extent[0] = 1;
        c.axis_of[0] = -1;
        c.stride[0] = 1;
        snprintf(c.names[0], sizeof c.names[0], "one");
        c.n_new = 1;
    }
    loc = sg->loc, as = sg->attach_stage, ai = sg->attach_ivar, n_steps = sg->n_steps;
    reader = s->stage;
    {
        /* keep the reader's loops: its op is rebuilt, its stage must not be reset */
        ss_stage saved = *sg;
        err = ss__derive(st, s->a + 1, fill_layout, &c, s->a, s->a + 1, &reader, 1, s->stage,
                         repl_reader, errmsg, errmsg_size);
        if (err)
            return err;
        saved.op = s->stage + 1;
        saved.loc = (uint8_t)loc;
        saved.attach_stage = as >= s->a + 1 ? as + 1 : as;
        saved.attach_ivar = ai;
        saved.n_steps = (uint8_t)n_steps;
        st->stages[s->stage + 1] = saved;
    }
    return AT_OK;
}
