/* schedule_space/ss_int.h -- declarations shared by the files of schedule_space/ only. */
#ifndef SS_INT_H
#define SS_INT_H

#include "schedule_space.h"

#include <stdio.h>

/* Print a float literal so that it reads back to the same value of type 'dt'. */
void ss__print_float(at_buf *b, double v, at_dtype dt);

/* Validate one compute op against the ops before it; message into 'msg'. */
at_err ss__check_op(const ss_dag *dag, int op, char *msg, size_t msg_size);

/* snprintf into errmsg when it is not NULL; returns 'err'. */
at_err ss__fail(char *errmsg, size_t errmsg_size, at_err err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Bound inference of a state; see ss_bound.c. */
at_err ss__infer_bounds(ss_state *st, char *errmsg, size_t errmsg_size);

/* Does stage 'reader' read stage 'tensor', looking through inlined stages? */
int ss__reads_through_inline(const ss_state *st, int reader, int tensor);

/* Extents of split/fuse children from the root extents (ss_state.c). */
void ss__pass_down(ss_stage *sg);
void ss__recompute_concrete(ss_state *st);

/* Sketch analysis shared with sampling (ss_sketch.c). */
const ss_hw *ss__space_hw(const ss_space *sp);
int ss__needs_mlt(const ss_state *st, int s);
/* Tile sizes (ss_sample.c): lengths[0..n) of a split of 'extent' into n + 1 loops, the
** factors 1..n of an ordered factorization drawn uniformly from those whose innermost factor
** is <= cap (factor 0, the outermost, is implied); 0 when there is none or memory ran out. */
int ss__sample_lengths(int64_t extent, int n, int64_t cap, at_rng *rng, int64_t *lengths);
int ss__consumer(const ss_state *st, int s);
/* Multi-level tiling of a fresh stage by a structure string ("SSRSRS", "SSSRRSRS");
** split_step[axis] gets the step index of each spatial axis' split (may be NULL). */
at_err ss__tile(ss_state *st, int s, const char *structure, int *split_step, char *errmsg,
                size_t errmsg_size);
/* Shared by the CPU and GPU rule tables (ss_sketch.c): a stage made by cache_write; the
** product of an op's spatial / reduction extents; the rule that leaves a stage as it is. */
int ss__is_cache_write_stage(const ss_state *st, int s);
int64_t ss__space_len(const ss_op *op);
int64_t ss__reduce_len(const ss_op *op);
ss_rule_answer ss__check_skip(const ss_state *st, int s, const ss_hw *hw);
at_err ss__apply_skip(ss_rule_ctx *ctx, const ss_state *st, int s, const ss_hw *hw);
/* The description the next ss_rule_emit gives its sketch (a string literal). */
void ss__rule_desc(ss_rule_ctx *ctx, const char *desc);
/* 's' has one consumer reading it elementwise with the same shape (its id in *out). */
int ss__single_elementwise_consumer(const ss_state *st, int s, int *out);

/* GPU annotation and mutation (ss_sample.c), used by ss_space_sample/ss_space_mutate when
** the space's hardware is a GPU. */
at_err ss__gpu_sample(const ss_space *sp, const ss_state *sketch, at_rng *rng, ss_state **out);
at_err ss__gpu_mutate(const ss_space *sp, const ss_state *st, at_rng *rng, int kind,
                      ss_state **out);
/* The id, just before step 'step' was applied, of the stage that is 'cur' now; -1 when a
** later step created it. */
int ss__stage_at_step(const ss_state *st, int cur, int step);

/* Derive a new DAG for a stage-inserting step (ss_state.c): the new op is built by 'fill'
** at position 'at'; loads of 'redirect_from' by the ops in 'readers' (old ids) point at
** 'redirect_to' (new id); op 'replace_op' (old id) is rebuilt by 'fill_repl' if not NULL.
** On success the state's stages and DAG are updated. */
typedef at_err (*ss__fill_fn)(void *ctx, ss_dag *nd, const int *map);
typedef at_err (*ss__repl_fn)(void *ctx, ss_dag *nd, ss_op *op);
at_err ss__derive(ss_state *st, int at, ss__fill_fn fill, void *ctx, int redirect_from,
                  int redirect_to, const int64_t *readers, int n_readers, int replace_op,
                  ss__repl_fn fill_repl, char *errmsg, size_t errmsg_size);
at_err ss__do_layout_rewrite(ss_state *st, const ss_step *s, char *errmsg, size_t errmsg_size);

#endif
