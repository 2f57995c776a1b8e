/* schedule_space/ss_sketch_gpu.c -- the sketch rules for NVIDIA GPUs (Ansor's CUDA rules,
** REFERENCE.md §3-§5) and the GPU's hardware description.
**
** Tried in this order for each stage, from the last to the first:
**   add_cache_read           a direct producer of a stage that needs multi-level tiling is
**                            copied into shared memory, computed at the consumer's last
**                            loop of its outermost reduction tile (the producer is visited
**                            again: a placeholder then skips, an elementwise stage inlines)
**   always_inline            every elementwise stage that is not an output
**   cross_thread_reduction   a reduction with little spatial work: its reduction loops fused,
**                            split by the warp size, the inner part bound to threadIdx.x
**   add_cache_write          a tiled reduction with no elementwise consumer gets a .local
**                            stage (then tiled and fused into the copy-out)
**   multi_level_tiling_with_fusion
**                            SSSRRSRS, computed inside the consumer's tiles at level 3
**                            (blocks, virtual threads, threads)
**   multi_level_tiling       SSSRRSRS
**   skip_stage
** Thread binding itself is annotation (ss_sample.c): S0 -> blockIdx.x, S1 -> vthread,
** S2 -> threadIdx.x, and cooperative loading of the shared stages. */
#include "ss_int.h"

#include <string.h>

#define GPU_STRUCTURE "SSSRRSRS"

/* A reduction loop of the stage is bound to threads (the cross-thread reduction rule). */
static int has_cross_thread_reduction(const ss_state *st, int s)
{
    const ss_stage *sg = &st->stages[s];
    for (int q = 0; q < sg->n_leaves; q++) {
        const ss_ivar *v = &sg->ivars[sg->leaves[q]];
        if (v->kind != SS_ITER_SPATIAL && v->ann == SS_ANN_THREAD_X)
            return 1;
    }
    return 0;
}

/* The last loop of the outermost reduction tile: from the first reduction loop, the
** reduction loops that come from distinct axes (rc.0, ry.0, rx.0 of a convolution). */
static int last_outer_reduce_pos(const ss_state *st, int s)
{
    const ss_stage *sg = &st->stages[s];
    int seen[SS_MAX_AXES] = {0}, last = -1;
    for (int q = 0; q < sg->n_leaves; q++) {
        int iv = sg->leaves[q], root = iv;
        if (sg->ivars[iv].kind == SS_ITER_SPATIAL) {
            if (last >= 0)
                break;
            continue;
        }
        /* the op axis this loop comes from, through splits */
        while (sg->ivars[root].rel >= 0)
            root = sg->rels[sg->ivars[root].rel].in[0];
        if (sg->ivars[root].axis < 0 || sg->ivars[root].axis >= SS_MAX_AXES ||
            seen[sg->ivars[root].axis])
            break;
        seen[sg->ivars[root].axis] = 1;
        last = q;
    }
    return last;
}

/* ---- rules ----------------------------------------------------------------------------- */

static ss_rule_answer check_cache_read(const ss_state *st, int s, const ss_hw *hw)
{
    int c;
    (void)hw;
    if (st->stages[s].loc == SS_LOC_INLINE || st->dag->ops[s].is_output)
        return SS_RULE_SKIP;
    c = ss__consumer(st, s);
    if (c < 0 || !ss__needs_mlt(st, c) || has_cross_thread_reduction(st, c) ||
        !ss_op_reads(&st->dag->ops[c], s) || st->stages[c].n_rels == 0 ||
        last_outer_reduce_pos(st, c) < 0)
        return SS_RULE_SKIP;
    return SS_RULE_APPLY_AND_SKIP_REST;
}

static at_err apply_cache_read(ss_rule_ctx *ctx, const ss_state *st, int s, const ss_hw *hw)
{
    ss_state *n;
    int c = ss__consumer(st, s), pos;
    int64_t reader = c;
    at_err err;
    (void)hw;
    if ((err = ss_state_copy(st, &n)))
        return err;
    if ((err = ss_state_cache_read(n, s, "shared", 1, &reader, NULL, 0)))
        goto fail;
    c++; /* the consumer moved up by the new stage */
    pos = last_outer_reduce_pos(n, c);
    if (pos < 0) {
        err = AT_ESCHED;
        goto fail;
    }
    if ((err = ss_state_compute_at(n, s + 1, c, pos, NULL, 0)))
        goto fail;
    ss__rule_desc(ctx, "shared-memory cache read");
    return ss_rule_emit(ctx, n, s); /* the producer again: it may be inlined now */
fail:
    ss_state_free(n);
    return err == AT_ENOMEM ? err : AT_OK;
}

static ss_rule_answer check_always_inline(const ss_state *st, int s, const ss_hw *hw)
{
    const ss_op *op = &st->dag->ops[s];
    (void)hw;
    if (op->kind != SS_OP_COMPUTE || op->is_output || op->reduce != SS_RED_NONE ||
        st->stages[s].loc != SS_LOC_ROOT || st->stages[s].n_rels > 0 || op->tag)
        return SS_RULE_SKIP;
    for (int t = 0; t < st->n_stages; t++)
        if (st->stages[t].loc == SS_LOC_AT && st->stages[t].attach_stage == s)
            return SS_RULE_SKIP;
    return SS_RULE_APPLY_AND_SKIP_REST;
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
        return err == AT_ENOMEM ? err : AT_OK;
    }
    ss__rule_desc(ctx, "inline");
    return ss_rule_emit(ctx, n, s - 1);
}

static ss_rule_answer check_cross_thread(const ss_state *st, int s, const ss_hw *hw)
{
    const ss_op *op = &st->dag->ops[s];
    if (op->kind != SS_OP_COMPUTE || op->reduce == SS_RED_NONE || op->n_raxes == 0 ||
        st->stages[s].loc != SS_LOC_ROOT || st->stages[s].n_rels > 0 ||
        ss__is_cache_write_stage(st, s) || op->tag)
        return SS_RULE_SKIP;
    if (ss__needs_mlt(st, s)) {
        if (ss__space_len(op) > hw->max_threads_per_block)
            return SS_RULE_SKIP;
        return ss__space_len(op) < ss__reduce_len(op) ? SS_RULE_APPLY : SS_RULE_SKIP;
    }
    return ss__reduce_len(op) > hw->warp_size ? SS_RULE_APPLY : SS_RULE_SKIP;
}

/* Fuse the reduction loops, split the fused loop by the warp size and bind the inner part
** to threadIdx.x: a block of threads reduces together. */
static at_err apply_cross_thread(ss_rule_ctx *ctx, const ss_state *st, int s, const ss_hw *hw)
{
    const ss_op *op = &st->dag->ops[s];
    ss_state *n;
    int64_t fuse[SS_MAX_AXES], len = hw->warp_size;
    int first = op->n_axes, nr = op->n_raxes;
    at_err err;
    if ((err = ss_state_copy(st, &n)))
        return err;
    for (int r = 0; r < nr; r++)
        fuse[r] = first + r;
    if (nr > 1 && (err = ss_state_fuse(n, s, nr, fuse, NULL, 0)))
        goto fail;
    if (len > ss__reduce_len(op))
        len = ss__reduce_len(op);
    if ((err = ss_state_split(n, s, first, 1, &len, NULL, 0)) ||
        (err = ss_state_annotate(n, s, first + 1, SS_ANN_THREAD_X, NULL, 0)))
        goto fail;
    ss__rule_desc(ctx, "cross-thread reduction");
    return ss_rule_emit(ctx, n, s - 1);
fail:
    ss_state_free(n);
    return err == AT_ENOMEM ? err : AT_OK;
}

static ss_rule_answer check_cache_write(const ss_state *st, int s, const ss_hw *hw)
{
    (void)hw;
    if (st->stages[s].loc != SS_LOC_ROOT || st->stages[s].n_rels > 0 ||
        ss__is_cache_write_stage(st, s) || !ss__needs_mlt(st, s) ||
        ss__single_elementwise_consumer(st, s, NULL))
        return SS_RULE_SKIP;
    return SS_RULE_APPLY_AND_SKIP_REST;
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
    ss__rule_desc(ctx, "cache write");
    return ss_rule_emit(ctx, n, s); /* visit the new C.local (now at s) */
}

static ss_rule_answer check_mlt_fusion(const ss_state *st, int s, const ss_hw *hw)
{
    (void)hw;
    if (st->stages[s].loc != SS_LOC_ROOT || st->stages[s].n_rels > 0 ||
        !ss__needs_mlt(st, s) || !ss__single_elementwise_consumer(st, s, NULL))
        return SS_RULE_SKIP;
    return SS_RULE_APPLY_AND_SKIP_REST;
}

/* Tile SSSRRSRS and compute the stage inside its consumer's level-3 tiles: the consumer's
** spatial loops follow the stage's splits into 4 parts (blocks, virtual threads, threads,
** the rest), so each thread computes its own tile in local memory. */
static at_err apply_mlt_fusion(ss_rule_ctx *ctx, const ss_state *st, int s, const ss_hw *hw)
{
    const int level = 3;
    int c = -1, n_sp = st->dag->ops[s].n_axes;
    int split_step[SS_MAX_LEAVES];
    int64_t order[SS_MAX_LEAVES];
    int n_order = 0;
    ss_state *n;
    at_err err;
    (void)hw;
    ss__single_elementwise_consumer(st, s, &c);
    if ((err = ss_state_copy(st, &n)))
        return err;
    for (int q = 0; q < SS_MAX_LEAVES; q++)
        split_step[q] = -1;
    if ((err = ss__tile(n, s, GPU_STRUCTURE, split_step, NULL, 0)))
        goto fail;
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
    if ((err = ss_state_reorder(n, c, n_order, order, NULL, 0)) ||
        (err = ss_state_compute_at(n, s, c, level * n_sp - 1, NULL, 0)))
        goto fail;
    ss__rule_desc(ctx, "multi-level tiling (SSSRRSRS) fused into the consumer's threads");
    return ss_rule_emit(ctx, n, s - 1);
fail:
    ss_state_free(n);
    return err == AT_ENOMEM ? err : AT_OK;
}

static ss_rule_answer check_mlt(const ss_state *st, int s, const ss_hw *hw)
{
    (void)hw;
    if (st->stages[s].loc != SS_LOC_ROOT || st->stages[s].n_rels > 0 || !ss__needs_mlt(st, s))
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
    if ((err = ss__tile(n, s, GPU_STRUCTURE, NULL, NULL, 0))) {
        ss_state_free(n);
        return err == AT_ENOMEM ? err : AT_OK;
    }
    ss__rule_desc(ctx, "multi-level tiling (SSSRRSRS)");
    return ss_rule_emit(ctx, n, s - 1);
}

static const ss_rule gpu_rules[] = {
    {"add_cache_read",
     "a direct producer (not an output) of the only stage that reads it, which needs "
     "multi-level tiling and reduces within a thread: copy it to shared memory at the "
     "consumer's outermost reduction tile",
     check_cache_read, apply_cache_read},
    {"always_inline", "a compute tensor that is neither an output nor a reduction",
     check_always_inline, apply_always_inline},
    {"cross_thread_reduction",
     "a reduction whose spatial work is small: space < reduce and space <= threads per "
     "block for ops that need tiling, reduce > warp size for the others",
     check_cross_thread, apply_cross_thread},
    {"add_cache_write",
     "a tensor that needs multi-level tiling and has no single elementwise consumer",
     check_cache_write, apply_cache_write},
    {"multi_level_tiling_with_fusion",
     "a tensor that needs multi-level tiling and has one consumer reading it elementwise: "
     "tile SSSRRSRS and compute it inside the consumer's thread tiles",
     check_mlt_fusion, apply_mlt_fusion},
    {"multi_level_tiling",
     "a tensor that needs multi-level tiling: split spatial loops in 5 and reduction loops "
     "in 3 levels, ordered SSSRRSRS",
     check_mlt, apply_mlt},
    {"skip_stage", "always: leave the stage as it is (its loops are bound to threads later)",
     ss__check_skip, ss__apply_skip},
    {NULL, NULL, NULL, NULL},
};

const ss_rule *ss_rules_gpu(void)
{
    return gpu_rules;
}

void ss_hw_gpu(ss_hw *hw, int n_sms, int max_threads, int64_t max_shared_bytes)
{
    static const int unroll[] = {0, 16, 64, 512, 1024};
    memset(hw, 0, sizeof *hw);
    hw->n_cores = n_sms > 0 ? n_sms : 1;
    hw->vector_bytes = 16;
    hw->max_innermost = 64;
    hw->max_vectorize = 4;
    hw->n_unroll = 5;
    memcpy(hw->unroll, unroll, sizeof unroll);
    hw->layout_rewrite = 0;
    hw->is_gpu = 1;
    hw->warp_size = 32;
    hw->max_threads_per_block = max_threads > 0 ? max_threads : 1024;
    hw->max_shared_bytes = max_shared_bytes > 0 ? max_shared_bytes : 48 * 1024;
    hw->max_vthread = hw->warp_size / 4;
    hw->max_local_bytes = 16 * 1024;
}
