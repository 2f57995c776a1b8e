/* schedule_space/ss_sketch.c -- the sketch generator: derivation rules that look only at
** the structure of a DAG (never at an operator's name) and produce the loop structures
** ("sketches") the search fills with tile sizes and annotations.
**
** The generator keeps a work list of (state, stage).  For a stage it tries the rules in
** table order: a rule answers skip, apply, or apply-and-skip-the-rest; applying emits
** derived (state, next stage) pairs.  A pair whose next stage is below 0 is a finished
** sketch.  Stages are visited from the last (the outputs) to the first, so a consumer's
** loop structure exists when its producers decide where to be computed. */
#include "ss_int.h"

#include <stdlib.h>
#include <string.h>

/* ---- analysis of one op -------------------------------------------------------------- */

/* Each load index is a constant or one axis plus a constant. */
static int simple_index(const ss_expr *e, int *axis)
{
    *axis = -1;
    if (e->kind == SS_E_IMM_INT)
        return 1;
    if (e->kind == SS_E_AXIS) {
        *axis = e->id;
        return 1;
    }
    if ((e->kind == SS_E_ADD || e->kind == SS_E_SUB) && e->a[0]->kind == SS_E_AXIS &&
        e->a[1]->kind == SS_E_IMM_INT) {
        *axis = e->a[0]->id;
        return 1;
    }
    return 0;
}

typedef struct walk {
    int simple;       /* every load has simple indices */
    int ordered;      /* ... in increasing axis order, no axis twice */
    int has_exp;
    int has_branch;
} walk;

static void walk_body(const ss_expr *e, walk *w)
{
    if (e->kind == SS_E_LOAD) {
        int last = -1;
        for (int d = 0; d < e->n; d++) {
            int ax;
            if (!simple_index(e->a[d], &ax)) {
                w->simple = 0;
                continue;
            }
            if (ax >= 0) {
                if (ax <= last)
                    w->ordered = 0;
                last = ax;
            }
        }
    }
    if (e->kind == SS_E_EXP || e->kind == SS_E_SIGMOID)
        w->has_exp = 1;
    if (e->kind == SS_E_SELECT)
        w->has_branch = 1;
    for (int i = 0; i < e->n; i++)
        walk_body(e->a[i], w);
}

/* Simple access, no transposition, no exp, no branch (Ansor's "strictly inlineable"). */
static int strictly_inlineable(const ss_op *op)
{
    walk w = {1, 1, 0, 0};
    if (op->kind != SS_OP_COMPUTE || op->reduce != SS_RED_NONE)
        return 0;
    walk_body(op->body, &w);
    return w.simple && w.ordered && !w.has_exp && !w.has_branch;
}

static void axes_used(const ss_expr *e, int tensor, uint32_t *mask, int *seen)
{
    if (e->kind == SS_E_LOAD && e->id == tensor) {
        *seen = 1;
        for (int d = 0; d < e->n; d++)
            axes_used(e->a[d], -2, mask, seen);
        return;
    }
    if (e->kind == SS_E_AXIS && tensor == -2) {
        *mask |= 1u << e->id;
        return;
    }
    for (int i = 0; i < e->n; i++)
        axes_used(e->a[i], tensor, mask, seen);
}

/* Data reuse: inputs that miss some spatial axis (of extent > 1).  Two or more, or one
** with a reduction, means tiling pays (matmul, conv2d). */
static int needs_mlt(const ss_state *st, int s)
{
    const ss_op *op = &st->dag->ops[s];
    int n_reuse = 0;
    if (op->kind != SS_OP_COMPUTE)
        return 0;
    for (int t = 0; t < s; t++) {
        uint32_t mask = 0;
        int seen = 0;
        axes_used(op->body, t, &mask, &seen);
        if (!seen)
            continue;
        for (int a = 0; a < op->n_axes; a++)
            if (op->axes[a].extent > 1 && !(mask & (1u << a))) {
                n_reuse++;
                break;
            }
    }
    return n_reuse >= 2 || (n_reuse >= 1 && op->n_raxes > 0);
}

/* The stage that consumes 's', seen through inlined readers; -1 if none or several. */
static int consumer(const ss_state *st, int s)
{
    int c = -1;
    for (int t = s + 1; t < st->n_stages; t++) {
        const ss_op *op = &st->dag->ops[t];
        int r;
        if (op->kind != SS_OP_COMPUTE || !ss_op_reads(op, s))
            continue;
        r = st->stages[t].loc == SS_LOC_INLINE ? consumer(st, t) : t;
        if (r < 0 || (c >= 0 && c != r))
            return -1;
        c = r;
    }
    return c;
}

/* Every load of tensor t in e is t[axis 0, axis 1, ...] over all of c's spatial axes. */
static int loads_identity(const ss_expr *e, int t, int n)
{
    if (e->kind == SS_E_LOAD && e->id == t) {
        if (e->n != n)
            return 0;
        for (int d = 0; d < n; d++)
            if (e->a[d]->kind != SS_E_AXIS || e->a[d]->id != d)
                return 0;
        return 1;
    }
    for (int i = 0; i < e->n; i++)
        if (!loads_identity(e->a[i], t, n))
            return 0;
    return 1;
}

/* 's' has one consumer that reads it elementwise with the same shape. */
static int single_elementwise_consumer(const ss_state *st, int s, int *out)
{
    int c = consumer(st, s);
    const ss_op *op = &st->dag->ops[s], *cop;
    at_arena ar;
    ss_expr *body;
    int ok;
    if (c < 0)
        return 0;
    cop = &st->dag->ops[c];
    if (cop->n_axes != op->n_axes || (cop->reduce != SS_RED_NONE && op->reduce != SS_RED_NONE))
        return 0;
    if (cop->tag && strcmp(cop->tag, "cache_read") == 0)
        return 0; /* a shared-memory copy (GPU) is no place to compute a tile */
    if (cop->reduce != SS_RED_NONE)
        return 0;
    for (int d = 0; d < op->n_axes; d++)
        if (cop->axes[d].extent != op->axes[d].extent)
            return 0;
    at_arena_init(&ar, 4096);
    body = ss_state_body(st, c, &ar);
    ok = body && loads_identity(body, s, op->n_axes);
    at_arena_fini(&ar);
    if (ok && out)
        *out = c;
    return ok;
}

int ss__is_cache_write_stage(const ss_state *st, int s)
{
    const char *tag = st->dag->ops[s].tag;
    return tag && strcmp(tag, "cache_write") == 0;
}

int64_t ss__space_len(const ss_op *op)
{
    int64_t n = 1;
    for (int a = 0; a < op->n_axes; a++)
        n *= op->axes[a].extent;
    return n;
}

int64_t ss__reduce_len(const ss_op *op)
{
    int64_t n = 1;
    for (int a = 0; a < op->n_raxes; a++)
        n *= op->axes[op->n_axes + a].extent;
    return n;
}

/* ---- the generator's work list ------------------------------------------------------- */

typedef struct item {
    ss_state *st;
    int stage;
    char desc[256];
} item;

struct ss_rule_ctx {
    item *items;
    int n, cap;
    const char *rule;     /* the rule being applied, for descriptions */
    const char *base_desc;
    at_err err;
};

at_err ss_rule_emit(ss_rule_ctx *ctx, ss_state *st, int next_stage)
{
    item *it;
    if (ctx->n == ctx->cap) {
        int cap = ctx->cap ? ctx->cap * 2 : 16;
        item *p = at_realloc(ctx->items, (size_t)cap * sizeof *p);
        if (p == NULL) {
            ss_state_free(st);
            return AT_ENOMEM;
        }
        ctx->items = p;
        ctx->cap = cap;
    }
    it = &ctx->items[ctx->n++];
    it->st = st;
    it->stage = next_stage;
    snprintf(it->desc, sizeof it->desc, "%s%s%s", ctx->base_desc,
             ctx->base_desc[0] && ctx->rule[0] ? ", " : "", ctx->rule);
    return AT_OK;
}

/* ---- tiling helpers ------------------------------------------------------------------ */

/* Multi-level tiling of a fresh stage by 'structure' ("SSRSRS"): every spatial loop is
** split into #S parts and every reduction loop into #R parts (lengths not chosen yet),
** then the levels are interleaved in the structure's order.  split_step[a] gets the index
** of the split step of spatial axis a. */
static at_err tile(ss_state *st, int s, const char *structure, int *split_step, char *errmsg,
                   size_t errmsg_size)
{
    ss_stage *sg = &st->stages[s];
    int n_s = 0, n_r = 0, n_leaves = sg->n_leaves, n_sp = 0, n_rd = 0;
    int first_of[SS_MAX_LEAVES], kind_of[SS_MAX_LEAVES], parts_of[SS_MAX_LEAVES];
    int64_t order[SS_MAX_LEAVES], zeros[SS_MAX_SPLIT] = {0};
    int pos = 0, n_order = 0, lvl_s = 0, lvl_r = 0;
    at_err err;
    for (const char *c = structure; *c; c++)
        *c == 'S' ? n_s++ : n_r++;
    /* split from the last loop to the first so positions stay valid */
    for (int q = n_leaves - 1; q >= 0; q--) {
        const ss_ivar *v = &st->stages[s].ivars[st->stages[s].leaves[q]];
        int parts = v->kind == SS_ITER_SPATIAL ? n_s : n_r;
        if (parts > 1) {
            if ((err = ss_state_split(st, s, q, parts - 1, zeros, errmsg, errmsg_size)))
                return err;
            if (v->kind == SS_ITER_SPATIAL && split_step)
                split_step[q] = st->n_steps - 1;
        }
    }
    sg = &st->stages[s];
    /* positions of each original loop's parts */
    for (int q = 0; q < n_leaves; q++) {
        const ss_op *op = &st->dag->ops[s];
        int is_sp = q < op->n_axes;
        kind_of[q] = is_sp;
        parts_of[q] = is_sp ? n_s : n_r;
        if (parts_of[q] < 1)
            parts_of[q] = 1;
        first_of[q] = pos;
        pos += parts_of[q];
        n_sp += is_sp;
        n_rd += !is_sp;
    }
    for (const char *c = structure; *c; c++) {
        int sp = *c == 'S', lvl = sp ? lvl_s++ : lvl_r++;
        for (int q = 0; q < n_leaves; q++)
            if (kind_of[q] == sp && lvl < parts_of[q])
                order[n_order++] = first_of[q] + lvl;
    }
    (void)n_sp;
    (void)n_rd;
    if (n_order != sg->n_leaves)
        return ss__fail(errmsg, errmsg_size, AT_ESCHED, "tiling %s: internal count mismatch",
                        st->dag->ops[s].name);
    return ss_state_reorder(st, s, n_order, order, errmsg, errmsg_size);
}

/* ---- the CPU rules --------------------------------------------------------------------- */

static ss_rule_answer check_always_inline(const ss_state *st, int s, const ss_hw *hw)
{
    const ss_op *op = &st->dag->ops[s];
    (void)hw;
    if (op->kind != SS_OP_COMPUTE || op->is_output || op->reduce != SS_RED_NONE ||
        st->stages[s].loc == SS_LOC_INLINE)
        return SS_RULE_SKIP;
    return strictly_inlineable(op) ? SS_RULE_APPLY_AND_SKIP_REST : SS_RULE_SKIP;
}

static at_err apply_always_inline(ss_rule_ctx *ctx, const ss_state *st, int s, const ss_hw *hw)
{
    ss_state *n;
    at_err err;
    (void)hw;
    if ((err = ss_state_copy(st, &n)))
        return err;
    if ((err = ss_state_compute_inline(n, s, NULL, 0))) {
        ss_state_free(n);
        return err;
    }
    return ss_rule_emit(ctx, n, s - 1);
}

static int needs_rfactor(const ss_state *st, int s, const ss_hw *hw)
{
    const ss_op *op = &st->dag->ops[s];
    if (op->kind != SS_OP_COMPUTE || op->reduce == SS_RED_NONE || op->n_raxes == 0)
        return 0;
    /* both kinds need little spatial parallelism: otherwise the spatial loops feed the
    ** cores and the reduction stays sequential and vectorizable */
    if (ss__space_len(op) > 16 * hw->n_cores)
        return 0;
    if (needs_mlt(st, s))
        return ss__space_len(op) <= ss__reduce_len(op);
    return ss__reduce_len(op) > hw->n_cores;
}

static ss_rule_answer check_rfactor(const ss_state *st, int s, const ss_hw *hw)
{
    const ss_op *op = &st->dag->ops[s];
    if (st->stages[s].loc == SS_LOC_INLINE || ss__is_cache_write_stage(st, s) ||
        (op->tag && strcmp(op->tag, "rfactor") == 0) || st->stages[s].n_steps > 0)
        return SS_RULE_SKIP;
    return needs_rfactor(st, s, hw) ? SS_RULE_APPLY : SS_RULE_SKIP;
}

/* Fuse the reduction loops, split the fused loop in two, and factor out either part. */
static at_err apply_rfactor(ss_rule_ctx *ctx, const ss_state *st, int s, const ss_hw *hw)
{
    const ss_op *op = &st->dag->ops[s];
    (void)hw;
    for (int part = 0; part < 2; part++) {
        ss_state *n;
        int64_t fuse[SS_MAX_AXES], len;
        int nr = op->n_raxes, first = op->n_axes, rf_leaf;
        at_err err;
        if ((err = ss_state_copy(st, &n)))
            return err;
        for (int r = 0; r < nr; r++)
            fuse[r] = first + r;
        if (nr > 1 && (err = ss_state_fuse(n, s, nr, fuse, NULL, 0)))
            goto fail;
        /* a provisional length: the sampler chooses the real one */
        len = 1;
        for (int64_t d = 2; d <= 16 && d <= ss__reduce_len(op); d++)
            if (ss__reduce_len(op) % d == 0)
                len = d;
        if ((err = ss_state_split(n, s, first, 1, &len, NULL, 0)))
            goto fail;
        rf_leaf = first + part;
        if ((err = ss_state_rfactor(n, s, rf_leaf, op->n_axes, NULL, 0)))
            goto fail;
        /* the .rf stage is at s; with the inner part factored out, put it innermost */
        if (part == 1) {
            int64_t order[SS_MAX_LEAVES];
            int nl = n->stages[s].n_leaves;
            for (int q = 0; q < nl; q++)
                order[q] = q;
            if (nl >= 2) {
                order[nl - 2] = nl - 1;
                order[nl - 1] = nl - 2;
                if ((err = ss_state_reorder(n, s, nl, order, NULL, 0)))
                    goto fail;
            }
        }
        ctx->rule = part == 0 ? "rfactor (outer part)" : "rfactor (inner part)";
        if ((err = ss_rule_emit(ctx, n, s - 1)))
            return err;
        continue;
    fail:
        ss_state_free(n);
        if (err == AT_ENOMEM)
            return err;
    }
    return AT_OK;
}

static ss_rule_answer check_cache_write(const ss_state *st, int s, const ss_hw *hw)
{
    (void)hw;
    if (st->stages[s].loc == SS_LOC_INLINE || st->stages[s].n_steps > 0 ||
        ss__is_cache_write_stage(st, s) || !needs_mlt(st, s) ||
        st->dag->ops[s].reduce == SS_RED_NONE)
        return SS_RULE_SKIP;
    return single_elementwise_consumer(st, s, NULL) ? SS_RULE_SKIP : SS_RULE_APPLY;
}

static at_err apply_cache_write(ss_rule_ctx *ctx, const ss_state *st, int s, const ss_hw *hw)
{
    ss_state *n;
    at_err err;
    (void)hw;
    if ((err = ss_state_copy(st, &n)))
        return err;
    if ((err = ss_state_cache_write(n, s, "local", NULL, 0))) {
        ss_state_free(n);
        return err == AT_ENOMEM ? err : AT_OK;
    }
    return ss_rule_emit(ctx, n, s); /* visit the new C.local (now at s) */
}

static ss_rule_answer check_mlt_fusion(const ss_state *st, int s, const ss_hw *hw)
{
    (void)hw;
    if (st->stages[s].loc == SS_LOC_INLINE || st->stages[s].n_steps > 0 || !needs_mlt(st, s) ||
        !single_elementwise_consumer(st, s, NULL))
        return SS_RULE_SKIP;
    return ss__is_cache_write_stage(st, s) ? SS_RULE_APPLY_AND_SKIP_REST : SS_RULE_APPLY;
}

static at_err apply_mlt_fusion(ss_rule_ctx *ctx, const ss_state *st, int s, const ss_hw *hw)
{
    int c = -1, n_sp = st->dag->ops[s].n_axes;
    (void)hw;
    single_elementwise_consumer(st, s, &c);
    for (int level = 1; level <= 2; level++) {
        ss_state *n;
        int split_step[SS_MAX_LEAVES];
        int64_t order[SS_MAX_LEAVES];
        int n_order = 0;
        at_err err;
        if ((err = ss_state_copy(st, &n)))
            return err;
        for (int q = 0; q < SS_MAX_LEAVES; q++)
            split_step[q] = -1;
        if ((err = tile(n, s, "SSRSRS", split_step, NULL, 0)))
            goto fail;
        /* the consumer's spatial loops follow the producer's tiles down to 'level' */
        for (int d = n_sp - 1; d >= 0; d--) {
            if (split_step[d] < 0)
                continue;
            if ((err = ss_state_follow_split(n, c, d, split_step[d], level, NULL, 0)))
                goto fail;
        }
        for (int l = 0; l <= level; l++)
            for (int d = 0; d < n_sp; d++)
                order[n_order++] = d * (level + 1) + l;
        for (int q = n_order; q < n->stages[c].n_leaves; q++)
            order[n_order++] = q;
        if ((err = ss_state_reorder(n, c, n_order, order, NULL, 0)))
            goto fail;
        if ((err = ss_state_compute_at(n, s, c, level * n_sp - 1, NULL, 0)))
            goto fail;
        ctx->rule = level == 1 ? "multi-level tiling fused into the consumer at level 1"
                               : "multi-level tiling fused into the consumer at level 2";
        if ((err = ss_rule_emit(ctx, n, s - 1)))
            return err;
        continue;
    fail:
        ss_state_free(n);
        if (err == AT_ENOMEM)
            return err;
    }
    return AT_OK;
}

static ss_rule_answer check_mlt(const ss_state *st, int s, const ss_hw *hw)
{
    (void)hw;
    if (st->stages[s].loc == SS_LOC_INLINE || st->stages[s].n_steps > 0 || !needs_mlt(st, s))
        return SS_RULE_SKIP;
    return SS_RULE_APPLY_AND_SKIP_REST;
}

static at_err apply_mlt(ss_rule_ctx *ctx, const ss_state *st, int s, const ss_hw *hw)
{
    ss_state *n;
    at_err err;
    (void)hw;
    if ((err = ss_state_copy(st, &n)))
        return err;
    if ((err = tile(n, s, "SSRSRS", NULL, NULL, 0))) {
        ss_state_free(n);
        return err == AT_ENOMEM ? err : AT_OK;
    }
    ctx->rule = "multi-level tiling";
    return ss_rule_emit(ctx, n, s - 1);
}

ss_rule_answer ss__check_skip(const ss_state *st, int s, const ss_hw *hw)
{
    (void)st;
    (void)s;
    (void)hw;
    return SS_RULE_APPLY;
}

at_err ss__apply_skip(ss_rule_ctx *ctx, const ss_state *st, int s, const ss_hw *hw)
{
    ss_state *n;
    at_err err;
    (void)hw;
    if ((err = ss_state_copy(st, &n)))
        return err;
    ctx->rule = "";
    return ss_rule_emit(ctx, n, s - 1);
}

static const ss_rule cpu_rules[] = {
    {"always_inline",
     "a compute tensor that is not an output and not a reduction, reads its inputs with "
     "simple indices (an axis plus a constant) in axis order, and has no exp and no select",
     check_always_inline, apply_always_inline},
    {"add_rfactor",
     "a reduction with little spatial parallelism (space <= 16 x cores) and a long reduction "
     "(reduce >= space for ops that need tiling, reduce > cores for the others); not a "
     "cache-write stage",
     check_rfactor, apply_rfactor},
    {"add_cache_write",
     "a reduction that needs multi-level tiling (its inputs miss some of its axes: data "
     "reuse) and has no single elementwise consumer to fuse into",
     check_cache_write, apply_cache_write},
    {"multi_level_tiling_with_fusion",
     "a tensor that needs multi-level tiling and has one consumer reading it elementwise "
     "(same shape, same indices): tile SSRSRS and compute it inside the consumer's tiles at "
     "level 1 or 2; stops the other rules when the tensor is a cache-write stage",
     check_mlt_fusion, apply_mlt_fusion},
    {"multi_level_tiling",
     "a tensor that needs multi-level tiling: split spatial loops in 4 and reduction loops "
     "in 2 levels, ordered SSRSRS",
     check_mlt, apply_mlt},
    {"skip_stage", "always: leave the stage as it is (its loops are annotated later)",
     ss__check_skip, ss__apply_skip},
    {NULL, NULL, NULL, NULL},
};

const ss_rule *ss_rules_cpu(void)
{
    return cpu_rules;
}

void ss_hw_cpu(ss_hw *hw, int n_cores, int vector_bytes, int64_t l1_bytes, int64_t l2_bytes)
{
    static const int unroll[] = {0, 16, 64, 512};
    memset(hw, 0, sizeof *hw);
    hw->n_cores = n_cores > 0 ? n_cores : 1;
    hw->vector_bytes = vector_bytes > 0 ? vector_bytes : 16;
    hw->l1_bytes = l1_bytes;
    hw->l2_bytes = l2_bytes;
    hw->max_innermost = 64;
    hw->max_vectorize = 4 * hw->vector_bytes / 4;
    if (hw->max_vectorize > 64)
        hw->max_vectorize = 64;
    hw->n_unroll = 4;
    memcpy(hw->unroll, unroll, sizeof unroll);
    hw->layout_rewrite = 1;
}

/* ---- the space ------------------------------------------------------------------------ */

struct ss_space {
    ss_dag *dag;
    ss_hw hw;
    int n_sketches;
    ss_state **sketches;
    char **desc;
};

at_err ss_space_new(ss_dag *dag, const ss_hw *hw, const ss_rule *rules, ss_space **out,
                    char *errmsg, size_t errmsg_size)
{
    ss_rule_ctx ctx;
    ss_space *sp;
    ss_state *init;
    at_err err;
    int head = 0;
    *out = NULL;
    if (rules == NULL)
        rules = hw->is_gpu ? ss_rules_gpu() : cpu_rules;
    memset(&ctx, 0, sizeof ctx);
    sp = at_calloc(1, sizeof *sp);
    if (sp == NULL)
        return AT_ENOMEM;
    sp->dag = ss_dag_ref(dag);
    sp->hw = *hw;
    if ((err = ss_state_new(dag, &init)) != AT_OK)
        goto fail;
    ctx.rule = "";
    ctx.base_desc = "";
    if ((err = ss_rule_emit(&ctx, init, dag->n_ops - 1)) != AT_OK)
        goto fail;
    /* breadth-first over the work list; items are appended while we walk it */
    while (head < ctx.n) {
        item it = ctx.items[head++];
        if (it.stage < 0) {
            ss_state **ns = at_realloc(sp->sketches, (size_t)(sp->n_sketches + 1) * sizeof *ns);
            char **nd = at_realloc(sp->desc, (size_t)(sp->n_sketches + 1) * sizeof *nd);
            if (ns)
                sp->sketches = ns;
            if (nd)
                sp->desc = nd;
            if (ns == NULL || nd == NULL) {
                ss_state_free(it.st);
                err = AT_ENOMEM;
                goto fail;
            }
            sp->sketches[sp->n_sketches] = it.st;
            sp->desc[sp->n_sketches] = at_strdup(it.desc[0] ? it.desc : "untouched");
            sp->n_sketches++;
            if (sp->n_sketches > 256) {
                err = ss__fail(errmsg, errmsg_size, AT_EUNSUPPORTED,
                               "more than 256 sketches: the DAG is too large for the rules");
                goto fail;
            }
            continue;
        }
        for (const ss_rule *r = rules; r->name; r++) {
            ss_rule_answer a = r->check(it.st, it.stage, &sp->hw);
            if (a == SS_RULE_SKIP)
                continue;
            ctx.rule = r->name;
            ctx.base_desc = it.desc;
            err = r->apply(&ctx, it.st, it.stage, &sp->hw);
            if (err == AT_ENOMEM) {
                ss_state_free(it.st);
                goto fail;
            }
            if (a == SS_RULE_APPLY_AND_SKIP_REST)
                break;
        }
        ss_state_free(it.st);
        if (ctx.n > 4096) {
            err = ss__fail(errmsg, errmsg_size, AT_EUNSUPPORTED, "the sketch rules do not end");
            goto fail;
        }
    }
    at_free(ctx.items);
    ctx.items = NULL;
    if (sp->n_sketches == 0) {
        ss_space_free(sp);
        return ss__fail(errmsg, errmsg_size, AT_EUNSUPPORTED,
                        "no sketch rule applies to this DAG");
    }
    *out = sp;
    return AT_OK;
fail:
    while (head < ctx.n)
        ss_state_free(ctx.items[head++].st);
    at_free(ctx.items);
    ss_space_free(sp);
    return err;
}

void ss_space_free(ss_space *sp)
{
    if (sp == NULL)
        return;
    for (int i = 0; i < sp->n_sketches; i++) {
        ss_state_free(sp->sketches[i]);
        at_free(sp->desc[i]);
    }
    at_free(sp->sketches);
    at_free(sp->desc);
    ss_dag_unref(sp->dag);
    at_free(sp);
}

int ss_space_n_sketches(const ss_space *sp)
{
    return sp->n_sketches;
}

const ss_state *ss_space_sketch(const ss_space *sp, int i)
{
    return i >= 0 && i < sp->n_sketches ? sp->sketches[i] : NULL;
}

const char *ss_space_sketch_desc(const ss_space *sp, int i)
{
    return i >= 0 && i < sp->n_sketches ? sp->desc[i] : NULL;
}

ss_dag *ss_space_dag(const ss_space *sp)
{
    return sp->dag;
}

const ss_hw *ss__space_hw(const ss_space *sp)
{
    return &sp->hw;
}

int ss__needs_mlt(const ss_state *st, int s)
{
    return needs_mlt(st, s);
}

int ss__consumer(const ss_state *st, int s)
{
    return consumer(st, s);
}

void ss__rule_desc(ss_rule_ctx *ctx, const char *desc)
{
    ctx->rule = desc;
}

at_err ss__tile(ss_state *st, int s, const char *structure, int *split_step, char *errmsg,
                size_t errmsg_size)
{
    return tile(st, s, structure, split_step, errmsg, errmsg_size);
}

int ss__single_elementwise_consumer(const ss_state *st, int s, int *out)
{
    return single_elementwise_consumer(st, s, out);
}

at_err ss_state_replay(ss_dag *dag, const ss_step *steps, int n_steps, ss_state **out,
                       char *errmsg, size_t errmsg_size)
{
    ss_state *st;
    at_err err;
    *out = NULL;
    if ((err = ss_state_new(dag, &st)) != AT_OK)
        return err;
    for (int i = 0; i < n_steps; i++) {
        if ((err = ss_state_apply(st, &steps[i], errmsg, errmsg_size)) != AT_OK) {
            ss_state_free(st);
            return err;
        }
    }
    *out = st;
    return AT_OK;
}
