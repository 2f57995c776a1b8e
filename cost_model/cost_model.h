/* cost_model/cost_model.h -- the learned cost model (prefix cm_): features of lowered
** loop IR, an XGBoost model that ranks schedules, and the data it learns from.
**
**   cm_model *m;  cm_model_new(NULL, &m);                       default parameters
**   cm_model_load_store(m, store, target, err, sizeof err);     a pre-trained model, if any
**   cm_model_predict(m, states, n, scores);                     higher = faster
**   cm_model_update(m, samples, n, err, sizeof err);            measured results arrive
**   cm_model_save_store(m, store, target);  cm_model_free(m);
**
** Features (cm_feature.c).  A state is lowered (kn_lower) and every buffer store of the
** loop IR gives one row of CM_N_FEATS numbers, computed from the store and the loops, guards
** and allocations above it; stores into the same buffer (a reduction's init and update)
** share a row.  The list is one X-macro, CM_FEATURES; any change to what a feature means
** bumps CM_FEATURE_VERSION, which every saved model carries (docs/cost_model.md explains
** each feature).
**
** Model (cm_model.c).  Gradient-boosted trees (XGBoost C API) score rows; a program's
** score is the sum of its rows' scores ("pack-sum").  Labels are per task: the task's best
** cost divided by the program's cost (1 = the best known, 0 = failed).  The default
** objective is a pairwise ranking loss on pack-sums within each task, a custom objective
** (XGBoost has no pack-sum); CM_OBJ_REG is Ansor's weighted squared error on pack-sums.
**
** Threads: a cm_model is used by one thread at a time.  Feature extraction is reentrant.
** Scores of failed lowerings are CM_SCORE_INVALID (-inf). */
#ifndef CM_COST_MODEL_H
#define CM_COST_MODEL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "common/common.h"
#include "kernels/kernels.h"
#include "records/records.h"
#include "schedule_space/schedule_space.h"

/* ---- the caches simulated (cm_sim.c) ------------------------------------------------- */

/* What cm_sim_run counts over a CPU program, per thread (thread 0's share of the parallel
** loop), estimated for the whole run when loops are sampled.  A "line" access is one whose
** site (a LOAD or a store) moved to another cache line since its last access; "far"
** misses are those not on the line after the site's last (what a next-line prefetcher
** does not hide). */
enum {
    CM_SIM_STMTS,       /* stores run */
    CM_SIM_LINES,       /* line accesses, loads and stores */
    CM_SIM_L1_MISSES,   /* of them, L1D misses */
    CM_SIM_L1_FAR,      /* ... not on the next line */
    CM_SIM_L2_MISSES,   /* L2 misses */
    CM_SIM_L2_FAR,      /* ... not on the next line */
    CM_SIM_TLB_MISSES,  /* misses of a 64-entry data TLB of 4 KiB pages */
    CM_SIM_STORE_LINES, /* line accesses of stores */
    CM_SIM_N
};

typedef struct cm_sim_params {
    int64_t l1_bytes, l2_bytes; /* per core */
    int l1_ways, l2_ways;
    int n_threads; /* the parallel loop's iterations are shared by this many */
    double cap;    /* accesses to simulate at most, about (loops beyond it are sampled) */
} cm_sim_params;

/* The target's caches (L1D with 64 sets, L2 16-way), cores and a cap of 3e5 accesses
** (docs/cost_model.md: about 15-40 ms a program of the bench's tasks). */
void cm_sim_params_init(cm_sim_params *p, const kn_target *t);
/* Run the loads and stores of CPU program 'ir' through the caches; out[CM_SIM_N].
** AT_EINVAL for a GPU program or bad parameters, AT_ENOMEM; 'errmsg' says which. */
at_err cm_sim_run(const kn_ir *ir, const cm_sim_params *p, double out[CM_SIM_N], char *errmsg,
                  size_t errmsg_size);

/* ---- the machine code read back (cm_code.c) ----------------------------------------- */

/* What cm_code_run reads from a built CPU program's object (x86-64, AArch64), group 11's
** columns in order, X(ID, name, log, doc): CM_FEATURES has them as CM_F_ID, cm_code_run's
** out[] as CM_ID.  The 17 ratios and logs first (feature version 6), then the raw counts
** (version 7): the innermost loops', the dynamic ones (each instruction times its loops'
** trip counts), per loop depth, the loops and the code's size, and the hot loop's (the
** innermost loop with the most FMAs); then (version 8) the dynamic counts per FMA lane;
** docs/cost_model.md. */
#define CM_CODE_FEATS(X)                                                                   \
    X(CODE_FMA_SHARE, "code_fma_share", 0, "innermost loops' FMAs / instructions")         \
    X(CODE_STACK_SHARE, "code_stack_share", 0, "innermost loops' stack accesses / instrs") \
    X(CODE_LOADS_PER_FMA, "code_loads_per_fma", 0, "innermost loops' vector loads / FMAs") \
    X(CODE_STORE_SHARE, "code_store_share", 0, "innermost loops' vector stores / instrs")  \
    X(CODE_ZMM_SHARE, "code_zmm_share", 0, "innermost loops' 512-bit instrs / instrs")     \
    X(CODE_INSNS, "code_insns", 0, "log2(1 + innermost loops' instructions)")              \
    X(CODE_FMAS, "code_fmas", 0, "log2(1 + innermost loops' FMAs)")                        \
    X(CODE_DYN_FMA_SHARE, "code_dyn_fma_share", 0, "dynamic FMAs / instructions")          \
    X(CODE_DYN_STACK_SHARE, "code_dyn_stack_share", 0, "dynamic stack accesses / instrs")  \
    X(CODE_DYN_LOADS_PER_FMA, "code_dyn_loads_per_fma", 0, "dynamic vector loads / FMAs")  \
    X(CODE_DYN_STORE_SHARE, "code_dyn_store_share", 0, "dynamic vector stores / instrs")   \
    X(CODE_DYN_ZMM_SHARE, "code_dyn_zmm_share", 0, "dynamic 512-bit instrs / instrs")      \
    X(CODE_DYN_INSNS, "code_dyn_insns", 0, "log2(1 + dynamic instructions)")               \
    X(CODE_DYN_FMAS, "code_dyn_fmas", 0, "log2(1 + dynamic FMAs)")                         \
    X(CODE_DYN_STACK, "code_dyn_stack", 0, "log2(1 + dynamic stack accesses)")             \
    X(CODE_DYN_LOADS, "code_dyn_loads", 0, "log2(1 + dynamic vector loads)")               \
    X(CODE_CYCLES, "code_cycles", 0, "log2(1 + the innermost loops' cycle estimate)")      \
    X(CODE_IN_ALL, "code_in_all", 0, "innermost loops' instructions")                      \
    X(CODE_IN_FMA, "code_in_fma", 0, "innermost loops' FMAs")                              \
    X(CODE_IN_VLOAD, "code_in_vload", 0, "innermost loops' vector loads")                  \
    X(CODE_IN_VSTORE, "code_in_vstore", 0, "innermost loops' vector stores")               \
    X(CODE_IN_BCAST, "code_in_bcast", 0, "innermost loops' broadcasts")                    \
    X(CODE_IN_STACK, "code_in_stack", 0, "innermost loops' stack accesses")                \
    X(CODE_IN_PREF, "code_in_pref", 0, "innermost loops' prefetches")                      \
    X(CODE_IN_MEMFMA, "code_in_memfma", 0, "innermost loops' FMAs with a memory operand")  \
    X(CODE_IN_WIDE, "code_in_wide", 0, "innermost loops' 512-bit (SVE) instrs")            \
    X(CODE_EX_ALL, "code_ex_all", 0, "dynamic instructions (times trips)")                 \
    X(CODE_EX_FMA, "code_ex_fma", 0, "dynamic FMAs (times trips)")                         \
    X(CODE_EX_VLOAD, "code_ex_vload", 0, "dynamic vector loads (times trips)")             \
    X(CODE_EX_VSTORE, "code_ex_vstore", 0, "dynamic vector stores (times trips)")          \
    X(CODE_EX_BCAST, "code_ex_bcast", 0, "dynamic broadcasts (times trips)")               \
    X(CODE_EX_STACK, "code_ex_stack", 0, "dynamic stack accesses (times trips)")           \
    X(CODE_EX_PREF, "code_ex_pref", 0, "dynamic prefetches (times trips)")                 \
    X(CODE_EX_MEMFMA, "code_ex_memfma", 0, "dynamic FMAs with a memory operand")           \
    X(CODE_EX_WIDE, "code_ex_wide", 0, "dynamic 512-bit (SVE) instrs (times trips)")       \
    X(CODE_CYCLE_EST, "code_cycle_est", 0, "the cycle estimate (code_cycles unlogged)")    \
    X(CODE_D0_ALL, "code_d0_all", 0, "instructions at loop depth 0")                       \
    X(CODE_D0_FMA, "code_d0_fma", 0, "FMAs at loop depth 0")                               \
    X(CODE_D0_VLOAD, "code_d0_vload", 0, "vector loads at loop depth 0")                   \
    X(CODE_D0_VSTORE, "code_d0_vstore", 0, "vector stores at loop depth 0")                \
    X(CODE_D0_BCAST, "code_d0_bcast", 0, "broadcasts at loop depth 0")                     \
    X(CODE_D0_STACK, "code_d0_stack", 0, "stack accesses at loop depth 0")                 \
    X(CODE_D0_PREF, "code_d0_pref", 0, "prefetches at loop depth 0")                       \
    X(CODE_D0_MEMFMA, "code_d0_memfma", 0, "FMAs with a memory operand at loop depth 0")   \
    X(CODE_D0_WIDE, "code_d0_wide", 0, "512-bit (SVE) instrs at loop depth 0")             \
    X(CODE_D1_ALL, "code_d1_all", 0, "instructions at loop depth 1")                       \
    X(CODE_D1_FMA, "code_d1_fma", 0, "FMAs at loop depth 1")                               \
    X(CODE_D1_VLOAD, "code_d1_vload", 0, "vector loads at loop depth 1")                   \
    X(CODE_D1_VSTORE, "code_d1_vstore", 0, "vector stores at loop depth 1")                \
    X(CODE_D1_BCAST, "code_d1_bcast", 0, "broadcasts at loop depth 1")                     \
    X(CODE_D1_STACK, "code_d1_stack", 0, "stack accesses at loop depth 1")                 \
    X(CODE_D1_PREF, "code_d1_pref", 0, "prefetches at loop depth 1")                       \
    X(CODE_D1_MEMFMA, "code_d1_memfma", 0, "FMAs with a memory operand at loop depth 1")   \
    X(CODE_D1_WIDE, "code_d1_wide", 0, "512-bit (SVE) instrs at loop depth 1")             \
    X(CODE_D2_ALL, "code_d2_all", 0, "instructions at loop depth 2")                       \
    X(CODE_D2_FMA, "code_d2_fma", 0, "FMAs at loop depth 2")                               \
    X(CODE_D2_VLOAD, "code_d2_vload", 0, "vector loads at loop depth 2")                   \
    X(CODE_D2_VSTORE, "code_d2_vstore", 0, "vector stores at loop depth 2")                \
    X(CODE_D2_BCAST, "code_d2_bcast", 0, "broadcasts at loop depth 2")                     \
    X(CODE_D2_STACK, "code_d2_stack", 0, "stack accesses at loop depth 2")                 \
    X(CODE_D2_PREF, "code_d2_pref", 0, "prefetches at loop depth 2")                       \
    X(CODE_D2_MEMFMA, "code_d2_memfma", 0, "FMAs with a memory operand at loop depth 2")   \
    X(CODE_D2_WIDE, "code_d2_wide", 0, "512-bit (SVE) instrs at loop depth 2")             \
    X(CODE_D3_ALL, "code_d3_all", 0, "instructions at loop depth 3")                       \
    X(CODE_D3_FMA, "code_d3_fma", 0, "FMAs at loop depth 3")                               \
    X(CODE_D3_VLOAD, "code_d3_vload", 0, "vector loads at loop depth 3")                   \
    X(CODE_D3_VSTORE, "code_d3_vstore", 0, "vector stores at loop depth 3")                \
    X(CODE_D3_BCAST, "code_d3_bcast", 0, "broadcasts at loop depth 3")                     \
    X(CODE_D3_STACK, "code_d3_stack", 0, "stack accesses at loop depth 3")                 \
    X(CODE_D3_PREF, "code_d3_pref", 0, "prefetches at loop depth 3")                       \
    X(CODE_D3_MEMFMA, "code_d3_memfma", 0, "FMAs with a memory operand at loop depth 3")   \
    X(CODE_D3_WIDE, "code_d3_wide", 0, "512-bit (SVE) instrs at loop depth 3")             \
    X(CODE_D4_ALL, "code_d4_all", 0, "instructions at loop depth 4+")                      \
    X(CODE_D4_FMA, "code_d4_fma", 0, "FMAs at loop depth 4+")                              \
    X(CODE_D4_VLOAD, "code_d4_vload", 0, "vector loads at loop depth 4+")                  \
    X(CODE_D4_VSTORE, "code_d4_vstore", 0, "vector stores at loop depth 4+")               \
    X(CODE_D4_BCAST, "code_d4_bcast", 0, "broadcasts at loop depth 4+")                    \
    X(CODE_D4_STACK, "code_d4_stack", 0, "stack accesses at loop depth 4+")                \
    X(CODE_D4_PREF, "code_d4_pref", 0, "prefetches at loop depth 4+")                      \
    X(CODE_D4_MEMFMA, "code_d4_memfma", 0, "FMAs with a memory operand at loop depth 4+")  \
    X(CODE_D4_WIDE, "code_d4_wide", 0, "512-bit (SVE) instrs at loop depth 4+")            \
    X(CODE_LOOPS, "code_loops", 0, "loops (backward branches)")                            \
    X(CODE_MAX_DEPTH, "code_max_depth", 0, "deepest loop nesting")                         \
    X(CODE_BYTES, "code_bytes", 0, "bytes of code")                                        \
    X(CODE_DEFAULT_TRIPS, "code_default_trips", 0, "loops with trip count 8 (or unread)")  \
    X(CODE_HOT_FMAS, "code_hot_fmas", 0, "hot loop (most FMAs): FMAs")                     \
    X(CODE_HOT_LOADS, "code_hot_loads", 0, "hot loop: vector and FMA-operand loads")       \
    X(CODE_HOT_STORES, "code_hot_stores", 0, "hot loop: vector stores")                    \
    X(CODE_HOT_INSNS, "code_hot_insns", 0, "hot loop: instructions")                       \
    X(CODE_HOT_STACK, "code_hot_stack", 0, "hot loop: stack accesses")                     \
    X(CODE_HOT_WIDE, "code_hot_wide", 0, "hot loop: 512-bit (SVE) instructions")           \
    X(CODE_HOT_BCAST, "code_hot_bcast", 0, "hot loop: broadcasts")                         \
    X(CODE_HOT_RUNS, "code_hot_runs", 0, "hot loop: iterations, all loops' trips")         \
    X(CODE_HOT_TRIP, "code_hot_trip", 0, "hot loop: its own trip count")                   \
    X(CODE_HOT_BOUND, "code_hot_bound", 0, "hot loop: cycles an FMA (its bound / FMAs)")    \
    X(CODE_EX_LANES, "code_ex_lanes", 0, "dynamic FMA lanes: each FMA's lanes times trips") \
    X(CODE_FMA_WIDTH, "code_fma_width", 0, "lanes per dynamic FMA (0 without FMAs)")        \
    X(CODE_LANE_CYCLES, "code_lane_cycles", 0, "log2(the cycle estimate per useful lane)")  \
    X(CODE_LANE_LOADS, "code_lane_loads", 0, "log2(dynamic loads per useful lane)")        \
    X(CODE_LANE_STORES, "code_lane_stores", 0, "log2(vector stores per useful lane)")       \
    X(CODE_LANE_STACK, "code_lane_stack", 0, "log2(dynamic stack accesses / useful lane)")  \
    X(CODE_HOT_LANE_CYCLES, "code_hot_lane_cycles", 0,                                     \
      "log2(the hot loop's cycle bound per useful lane)")

enum {
#define X(id, name, lg, doc) CM_##id,
    CM_CODE_FEATS(X)
#undef X
        CM_CODE_N
};

/* Read the code of 'a', built for CPU target 't' (x86-64, AArch64); out[CM_CODE_N].
** AT_EINVAL for another architecture, no object or a malformed one, AT_ENOMEM; 'errmsg'
** says which. */
at_err cm_code_run(const kn_artifact *a, const kn_target *t, double out[CM_CODE_N],
                   char *errmsg, size_t errmsg_size);

/* Group 11's five columns per FMA lane (CM_CODE_LANE_CYCLES .. CM_CODE_HOT_LANE_CYCLES, as
** cm_code_run gives them in 'out') made per *useful* lane (feature version 12): where the
** FMAs' lanes (CM_CODE_EX_LANES) outnumber the program's multiply-adds 'mads' (its
** statements' float_mad, summed), the lanes they leave idle count against the program (2 of
** an xmm's 4 used: each column + 1), by at most CM_CODE_MAX_IDLE times (one of a 512-bit
** register's 16 float lanes used; beyond that the lanes are a trip count the code hides,
** not idle lanes).  Columns at 0 (not computed) stay 0; nothing changes where the lanes are
** no more than the multiply-adds (within 1 %) or either is unknown. */
#define CM_CODE_MAX_IDLE 16
void cm_code_per_useful_lane(double out[CM_CODE_N], double mads);

/* ---- features (cm_feature.c) --------------------------------------------------------- */

/* Bump whenever a feature is added, removed, reordered or computed differently: models
** saved with another version are refused ("mismatched") and the run trains from scratch. */
#define CM_FEATURE_VERSION 15 /* 2: group 7, GPU launches; 3: group 8, registers and caches;
                                 ** 4: group 9, lanes; 5: group 10, the caches simulated;
                                 ** 6: group 11, the machine code read back; 7: its raw
                                 ** counts; 8: its counts per FMA lane; 9: the parallel
                                 ** loops' trip counts from their extents; 10: more of
                                 ** LLVM's run-twice flags read, only unread loops counted
                                 ** as unread; 11: a counter's add read past the vector
                                 ** work before the branch; 12: the lane columns per
                                 ** useful lane (cm_code_per_useful_lane); 13: a
                                 ** loop's cycles at least its longest chain of
                                 ** FMAs on one accumulator; 14: chains short
                                 ** enough to run side by side count less; 15:
                                 ** code_lane_insns dropped, the column that
                                 ** put the false positives in the five */

#define CM_TOP_BUFFERS 5 /* buffers described per row: the stored one, then the loaded
                         ** ones in the order the value reads them */
#define CM_CURVE_N 10    /* samples of the arithmetic-intensity curve */
#define CM_CACHE_LINE 64 /* bytes, for the cache-line counts */

/* Positions of an annotated loop among the loops of a store (one-hot). */
#define CM_POS_MAP(X)                                                                      \
    X(NONE, "none", "no loop of this kind encloses the store")                             \
    X(INNER_SPATIAL, "inner_spatial", "innermost of the store's spatial loops")            \
    X(MIDDLE_SPATIAL, "middle_spatial", "a spatial loop, neither innermost nor outermost") \
    X(OUTER_SPATIAL, "outer_spatial", "outermost of several spatial loops")                \
    X(INNER_REDUCE, "inner_reduce", "innermost of the store's reduction loops")            \
    X(MIDDLE_REDUCE, "middle_reduce", "a reduction loop, neither innermost nor outermost") \
    X(OUTER_REDUCE, "outer_reduce", "outermost of several reduction loops")                \
    X(MIXED, "mixed", "several loops of this kind in different positions")

/* The per-buffer block, repeated for the first CM_TOP_BUFFERS buffers ('k' = 0..4).
** X(ID, name, log, doc): 'log' 1 = stored as sign(x)*log2(1+|x|), 0 = stored as is. */
#define CM_BUF_FEATURES(X, k)                                                              \
    X(B##k##_ACC_READ, "b" #k ".acc_read", 0, "1 if the statement only reads the buffer")  \
    X(B##k##_ACC_WRITE, "b" #k ".acc_write", 0, "1 if the statement only writes the buffer") \
    X(B##k##_ACC_RW, "b" #k ".acc_rw", 0, "1 if the statement reads and writes the buffer") \
    X(B##k##_BYTES, "b" #k ".bytes", 1,                                                   \
      "bytes moved by the statement's accesses to the buffer over the whole nest")          \
    X(B##k##_UNIQUE_BYTES, "b" #k ".unique_bytes", 1,                                     \
      "bytes of the distinct elements the nest touches (footprint)")                        \
    X(B##k##_LINES, "b" #k ".lines", 1,                                                   \
      "cache lines fetched: iterations outside the innermost non-touching loops, scaled "   \
      "by min(1, stride*elem/line)")                                                        \
    X(B##k##_UNIQUE_LINES, "b" #k ".unique_lines", 1,                                     \
      "distinct cache lines: footprint / min(contiguous bytes, line)")                      \
    X(B##k##_REUSE_LOOP, "b" #k ".reuse_loop", 0,                                         \
      "1 if a loop whose variable is absent from the indices re-reads the buffer")          \
    X(B##k##_REUSE_SERIAL, "b" #k ".reuse_serial", 0,                                     \
      "1 if the statement itself accesses the same element several times")                 \
    X(B##k##_REUSE_NONE, "b" #k ".reuse_none", 0, "1 if there is no reuse")                 \
    X(B##k##_REUSE_DIS_ITER, "b" #k ".reuse_dis_iter", 1,                                 \
      "iterations between two uses of an element (product of the extents inside the "      \
      "reusing loop)")                                                                      \
    X(B##k##_REUSE_DIS_BYTES, "b" #k ".reuse_dis_bytes", 1,                               \
      "bytes all buffers of the statement touch between two uses")                          \
    X(B##k##_REUSE_CT, "b" #k ".reuse_ct", 1,                                             \
      "times an element is reused (reusing loop's extent, or accesses - 1)")               \
    X(B##k##_BYTES_D_REUSE, "b" #k ".bytes_d_reuse_ct", 1,                                \
      "bytes / reuse_ct (2 x bytes with no reuse)")                                         \
    X(B##k##_UBYTES_D_REUSE, "b" #k ".unique_bytes_d_reuse_ct", 1,                        \
      "unique_bytes / reuse_ct (2 x with no reuse)")                                        \
    X(B##k##_LINES_D_REUSE, "b" #k ".lines_d_reuse_ct", 1,                                \
      "lines / reuse_ct (2 x with no reuse)")                                               \
    X(B##k##_ULINES_D_REUSE, "b" #k ".unique_lines_d_reuse_ct", 1,                        \
      "unique_lines / reuse_ct (2 x with no reuse)")                                        \
    X(B##k##_STRIDE, "b" #k ".stride", 1,                                                 \
      "element stride of the innermost loop that moves the index (0 if not affine)")       \
    X(B##k##_VEC_CONTIG, "b" #k ".vec_contig", 0,                                         \
      "1 if a vectorized loop encloses the statement and moves this index by 1 per lane "  \
      "(one vector load/store)")                                                            \
    X(B##k##_VEC_GATHER, "b" #k ".vec_gather", 0,                                         \
      "1 if a vectorized loop moves this index by other than 0 or 1 per lane (per-lane "   \
      "accesses)")

#define CM_LOOP_FEATURES(X, P, p, what)                                                    \
    X(P##_NUM, p "_num", 1, "number of " what " loops enclosing the store")               \
    X(P##_PROD, p "_prod", 1, "product of the extents of the " what " loops")             \
    X(P##_LEN, p "_len", 1, "extent of the innermost " what " loop (0 if none)")          \
    X(P##_POS_NONE, p "_pos.none", 0, "position one-hot: no " what " loop")               \
    X(P##_POS_INNER_SPATIAL, p "_pos.inner_spatial", 0,                                   \
      "position one-hot: the innermost spatial loop")                                       \
    X(P##_POS_MIDDLE_SPATIAL, p "_pos.middle_spatial", 0,                                 \
      "position one-hot: a middle spatial loop")                                            \
    X(P##_POS_OUTER_SPATIAL, p "_pos.outer_spatial", 0,                                   \
      "position one-hot: the outermost spatial loop")                                       \
    X(P##_POS_INNER_REDUCE, p "_pos.inner_reduce", 0,                                     \
      "position one-hot: the innermost reduction loop")                                     \
    X(P##_POS_MIDDLE_REDUCE, p "_pos.middle_reduce", 0,                                   \
      "position one-hot: a middle reduction loop")                                          \
    X(P##_POS_OUTER_REDUCE, p "_pos.outer_reduce", 0,                                     \
      "position one-hot: the outermost reduction loop")                                     \
    X(P##_POS_MIXED, p "_pos.mixed", 0, "position one-hot: several, in different positions")

/* Every feature, in column order.  X(ID, name, log, doc). */
#define CM_FEATURES(X)                                                                     \
    /* group 1: arithmetic, counted per evaluation times the iterations of the nest */     \
    X(FLOAT_MAD, "float_mad", 1, "float multiply-adds a*b+c, a*b-c (counted once each)")    \
    X(FLOAT_ADDSUB, "float_addsub", 1, "float additions, subtractions and negations")      \
    X(FLOAT_MUL, "float_mul", 1, "float multiplications not part of a multiply-add")       \
    X(FLOAT_DIVMOD, "float_divmod", 1, "float divisions and modulos")                      \
    X(FLOAT_CMP, "float_cmp", 1, "float comparisons, min and max")                         \
    X(FLOAT_MATH, "float_math", 1, "float math functions: exp, log, sqrt, tanh, erf, sigmoid") \
    X(FLOAT_OTHER, "float_other", 1, "other float operations: abs, casts")                 \
    X(INT_ADDSUB, "int_addsub", 1, "integer additions and subtractions (indices included)") \
    X(INT_MUL, "int_mul", 1, "integer multiplications (indices included)")                 \
    X(INT_DIVMOD, "int_divmod", 1, "integer floor divisions and modulos (fused loops)")    \
    X(INT_CMP, "int_cmp", 1, "integer comparisons, min and max (padding clamps)")          \
    X(BOOL_OP, "bool_op", 1, "logical and, or, not")                                       \
    X(SELECT_OP, "select_op", 1, "selects (padding)")                                      \
    X(LOADS, "loads", 1, "buffer loads")                                                   \
    X(GUARD_OPS, "guard_ops", 1,                                                           \
      "operations evaluated by the if-guards around the store (splits that do not divide)") \
    /* group 1: loop annotations (the kinds code generation really applies) */              \
    CM_LOOP_FEATURES(X, VEC, "vec", "vectorized")                                          \
    CM_LOOP_FEATURES(X, UNROLL, "unroll", "unrolled (explicitly or by auto-unroll)")       \
    CM_LOOP_FEATURES(X, PAR, "parallel", "parallel")                                       \
    /* group 2: the buffers of the statement, the stored one first */                       \
    CM_BUF_FEATURES(X, 0)                                                                   \
    CM_BUF_FEATURES(X, 1)                                                                   \
    CM_BUF_FEATURES(X, 2)                                                                   \
    CM_BUF_FEATURES(X, 3)                                                                   \
    CM_BUF_FEATURES(X, 4)                                                                   \
    /* group 3: arithmetic intensity curve */                                               \
    X(CURVE_0, "ai_curve.0", 0, "float ops / bytes where the nest has done 10% of its ops") \
    X(CURVE_1, "ai_curve.1", 0, "... 20%")                                                  \
    X(CURVE_2, "ai_curve.2", 0, "... 30%")                                                  \
    X(CURVE_3, "ai_curve.3", 0, "... 40%")                                                  \
    X(CURVE_4, "ai_curve.4", 0, "... 50%")                                                  \
    X(CURVE_5, "ai_curve.5", 0, "... 60%")                                                  \
    X(CURVE_6, "ai_curve.6", 0, "... 70%")                                                  \
    X(CURVE_7, "ai_curve.7", 0, "... 80%")                                                  \
    X(CURVE_8, "ai_curve.8", 0, "... 90%")                                                  \
    X(CURVE_9, "ai_curve.9", 0, "... 100% (the whole nest)")                                \
    /* group 4: allocation of the stored buffer (temporaries only) */                       \
    X(ALLOC_SIZE, "alloc_size", 1, "bytes of the temporary the store writes (0: argument)") \
    X(ALLOC_PROD, "alloc_prod", 1, "alloc_size times the times it is allocated")           \
    X(ALLOC_OUTER_PROD, "alloc_outer_prod", 1,                                             \
      "iterations of the loops around the allocation")                                      \
    X(ALLOC_INNER_PROD, "alloc_inner_prod", 1,                                             \
      "iterations of the store per allocation (outer_prod / alloc_outer_prod)")             \
    /* group 5: the enclosing scope */                                                      \
    X(OUTER_PROD, "outer_prod", 1, "product of the extents of every loop around the store") \
    X(NUM_LOOPS, "num_loops", 1, "number of loops around the store")                       \
    X(AUTO_UNROLL_MAX_STEP, "auto_unroll_max_step", 1,                                     \
      "auto-unroll budget of the store's stage (0: none)")                                   \
    /* group 6: the code around the store after unrolling and vectorizing */                \
    X(INNER_LOOP_LEN, "inner_loop_len", 1,                                                 \
      "extent of the innermost loop that stays a loop (serial or parallel; 0: none)")       \
    X(INNER_BODY, "inner_body", 1,                                                         \
      "iterations of the store inside that loop: the unrolled and vectorized block")        \
    X(ACCUMULATORS, "accumulators", 1,                                                     \
      "reductions: distinct elements the block updates (the register tile); 0 otherwise")   \
    X(CHAIN, "chain", 1,                                                                   \
      "reductions: dependent updates of each accumulator in the block (inner_body / "       \
      "accumulators); 0 otherwise")                                                         \
    /* group 7: the store's GPU launch (all 0 for CPU programs) */                          \
    X(GPU, "gpu", 0, "1 for a GPU program (loops bound to blocks and threads)")            \
    X(GPU_BLOCKS, "gpu_blocks", 1, "blocks of the launch: the loops bound to blockIdx")    \
    X(GPU_THREADS, "gpu_threads", 1,                                                       \
      "threads per block of the launch (the widest loop bound to each threadIdx axis)")    \
    X(GPU_STORE_THREADS, "gpu_store_threads", 1,                                           \
      "threads that execute the store: the thread-bound loops around it (fewer than "       \
      "gpu_threads for a narrower stage, e.g. a shared-memory loader)")                     \
    X(GPU_SHARED_BYTES, "gpu_shared_bytes", 1,                                             \
      "shared memory per block of the launch (16-byte aligned stages, allreduce scratch)") \
    X(GPU_LOCAL_BYTES, "gpu_local_bytes", 1,                                               \
      "per-thread arrays of the launch (registers, or local memory when they do not fit)") \
    X(GPU_SYNCS, "gpu_syncs", 1,                                                           \
      "barriers around shared stages a thread passes in the launch (each counted with "     \
      "its enclosing loops)")                                                               \
    /* group 8: the register tile and the caches */                                         \
    X(ACC_REGS, "acc_regs", 1,                                                             \
      "reductions: 64-byte registers the block's accumulators fill (accumulators / the "    \
      "lanes of a register their vectorized loop fills; scalar accumulators one each)")     \
    X(BLOCK_LOADS, "block_loads", 1,                                                       \
      "vector (or scalar) loads the block issues per vector update of the store")           \
    X(INNER_REDUCE, "inner_reduce", 0,                                                     \
      "1 when the innermost loop that stays a loop reduces into the stored element "        \
      "(the accumulators stay in registers across it)")                                     \
    X(INNER_FOOT, "inner_foot", 1,                                                         \
      "bytes every buffer of the store touches in one run of the innermost loop that "      \
      "stays a loop")                                                                       \
    X(AI_L1, "ai_l1", 0,                                                                   \
      "float ops per byte of the largest sub-nest whose footprint fits 32 KiB")             \
    X(AI_L2, "ai_l2", 0,                                                                   \
      "float ops per byte of the largest sub-nest whose footprint fits 1 MiB")              \
    X(INNER_UNIT, "inner_unit", 0,                                                         \
      "1 when the innermost loop that stays a loop, not vectorized, moves the store by 1 "  \
      "and every load by 0 or 1 element: LLVM's unroller and SLP vectorizer can still "     \
      "make vectors of its iterations")                                                     \
    /* group 9: lanes */                                                                    \
    X(EFF_LANES, "eff_lanes", 0,                                                           \
      "float lanes the store's arithmetic runs on: its vectorized loop's extent over the "   \
      "registers it fills, or the innermost loop's (at most a register) when inner_unit, "  \
      "else 1")                                                                             \
    X(LANE_OPS, "lane_ops", 1,                                                             \
      "float ops of the store over the whole nest / eff_lanes: the vector instructions "    \
      "its arithmetic takes")                                                               \
    /* group 10: the caches simulated (first row only, when asked: cm_feats.sim) */        \
    X(SIM_STMTS, "sim_stmts", 1, "stores thread 0 runs (cm_sim_run)")                      \
    X(SIM_LINES, "sim_lines", 1, "its line accesses")                                      \
    X(SIM_L1_MISSES, "sim_l1_misses", 1, "its L1D misses")                                 \
    X(SIM_L1_FAR, "sim_l1_far", 1, "its L1D misses not on the site's next line")           \
    X(SIM_L2_MISSES, "sim_l2_misses", 1, "its L2 misses")                                  \
    X(SIM_L2_FAR, "sim_l2_far", 1, "its L2 misses not on the site's next line")            \
    X(SIM_TLB_MISSES, "sim_tlb_misses", 1, "its data TLB misses")                          \
    X(SIM_STORE_LINES, "sim_store_lines", 1, "its stores' line accesses")                  \
    X(SIM_LINES_PER, "sim_lines_per", 0, "sim_lines per store run")                        \
    X(SIM_L1_PER, "sim_l1_per", 0, "sim_l1_misses per store run")                          \
    X(SIM_L1_FAR_PER, "sim_l1_far_per", 0, "sim_l1_far per store run")                     \
    X(SIM_L2_PER, "sim_l2_per", 0, "sim_l2_misses per store run")                          \
    X(SIM_L2_FAR_PER, "sim_l2_far_per", 0, "sim_l2_far per store run")                     \
    X(SIM_TLB_PER, "sim_tlb_per", 0, "sim_tlb_misses per store run")                       \
    X(SIM_STORE_PER, "sim_store_per", 0, "sim_store_lines per store run")                  \
    X(SIM_PENALTY, "sim_penalty", 1,                                                       \
      "4 x L1 misses + 8 x far ones + 20 x L2 misses + 60 x far ones + 10 x TLB misses")    \
    /* group 11: the machine code read back (first row only, when asked: cm_feats.code) */ \
    CM_CODE_FEATS(X)

typedef enum cm_feat {
#define X(id, name, lg, doc) CM_F_##id,
    CM_FEATURES(X)
#undef X
        CM_N_FEATS
} cm_feat;

/* Per-buffer block: feature of buffer k is CM_F_B0_x + k * CM_BUF_STRIDE. */
#define CM_BUF_STRIDE (CM_F_B1_ACC_READ - CM_F_B0_ACC_READ)

const char *cm_feature_name(int f); /* "float_mad"; "?" when out of range */
const char *cm_feature_doc(int f);  /* one sentence; "" when out of range */
int cm_feature_is_log(int f);       /* stored as sign(x)*log2(1+|x|) */

/* The features of one program: n_rows rows of CM_N_FEATS floats, one per stored buffer,
** in the order the IR first stores them.  Reusable: extraction keeps its storage. */
typedef struct cm_feats {
    int n_rows;
    float *rows;   /* n_rows * CM_N_FEATS */
    int *row_buf;  /* IR buffer index of each row */
    int cap_rows;
    int64_t code_size; /* kn_ir_code_size of the program (the search's code-size limit) */
    uint64_t ir_hash;  /* kn_ir_hash of the program: which states are one program */
    /* Group 10: NULL (cm_feats_init), its columns are 0; else the first row of a CPU
    ** program gets cm_sim_run's counts with these caches (about 50 ms a program, not for
    ** populations).  Set by the caller; cm_feats_copy leaves it. */
    const cm_sim_params *sim;
    /* Group 11: NULL (cm_feats_init), its columns are 0; else a CPU program is built for
    ** this target (x86-64, AArch64) and the first row gets cm_code_run's columns (a
    ** build, 100-200 ms a program: for programs about to be built anyway).  Set by the
    ** caller, as 'sim'. */
    const kn_target *code;
    void *scratch; /* private working storage */
} cm_feats;

void cm_feats_init(cm_feats *f);
void cm_feats_fini(cm_feats *f);
/* Copy 'src' into 'dst' (whose previous rows are dropped). */
at_err cm_feats_copy(cm_feats *dst, const cm_feats *src);

/* Replace the rows of 'f' by the features of 'ir'.  AT_ENOMEM, or AT_EINVAL for an IR that
** stores nothing (then f->n_rows is 0).  Reentrant; about 10-30 microseconds per program. */
at_err cm_features_extract(const kn_ir *ir, cm_feats *f);

/* Lower 'st' and extract: AT_ESCHED (errmsg says why) when it does not lower. */
at_err cm_features_of_state(const ss_state *st, cm_feats *f, char *errmsg, size_t errmsg_size);

/* ---- data sets of measured programs (cm_data.c) ---------------------------------------- */

/* What a model learns from: programs with their features, task and measured cost. */
typedef struct cm_sample {
    const char *task;       /* labels are normalised within a task: the workload key, plus
                            ** target and device when several are mixed (any string) */
    const ss_state *state;  /* the program: one of state, ir or feats (first non-NULL) */
    const kn_ir *ir;
    const cm_feats *feats;
    double cost_s;          /* measured seconds per call (status 0): the mean of the
                            ** repeats, or their fastest on a shared device (see docs) */
    int status;             /* at_measure code; non-zero = failed, label 0 */
} cm_sample;

typedef struct cm_data cm_data;

at_err cm_data_new(cm_data **out);
void cm_data_free(cm_data *d); /* NULL is fine */
/* Append samples (features are extracted now).  A sample that does not lower is kept as a
** failure with no rows, counted in *n_unlowered (may be NULL).  AT_ENOMEM, AT_EINVAL for a
** sample with no program or no task. */
at_err cm_data_add(cm_data *d, const cm_sample *s, int n, int *n_unlowered);
/* Later cm_data_add and cm_data_load_store fill group 10 (the caches simulated) with these
** caches; NULL: leave it 0 (the default).  The parameters are copied. */
void cm_data_set_sim(cm_data *d, const cm_sim_params *p);
/* Later cm_data_add and cm_data_load_store fill group 11 (the machine code read back) with
** each program built for 't' (NULL: off, the default); a program that does not build, or
** whose code cannot be read, is counted as unlowered. */
void cm_data_set_code(cm_data *d, const kn_target *t);
int cm_data_count(const cm_data *d);   /* programs */
int cm_data_n_tasks(const cm_data *d);
int64_t cm_data_n_rows(const cm_data *d);
/* Program i: its task index (0..n_tasks-1), measured cost (AT_MEASURE_FAIL_COST for a
** failure), label (best cost of its task / its cost; 0 when failed) and task name. */
int cm_data_task_of(const cm_data *d, int i);
double cm_data_cost(const cm_data *d, int i);
double cm_data_label(const cm_data *d, int i);
const char *cm_data_task_name(const cm_data *d, int task);
/* A measured program's cost replaced by a faster measurement of the same program (another
** pass over it, a re-time); its task's labels follow.  AT_EINVAL when i is out of range,
** program i failed, or 'cost' is not a success's (above 0, below AT_MEASURE_FAIL_COST). */
at_err cm_data_set_cost(cm_data *d, int i, double cost);
/* Program i's feature rows (n_rows * CM_N_FEATS floats owned by 'd', valid until it
** changes) and their number in *n_rows (0: it did not lower). */
const float *cm_data_rows(const cm_data *d, int i, int *n_rows);
/* Append programs idx[0..n) of 'src' to 'dst'. */
at_err cm_data_append(cm_data *dst, const cm_data *src, const int *idx, int n);
/* Split 'src' at random into two new sets, about 'frac' of each task's programs into *a and
** the rest into *b; the same seed gives the same split. */
at_err cm_data_split(const cm_data *src, double frac, uint64_t seed, cm_data **a, cm_data **b);

typedef struct cm_load_stats {
    int64_t n_records;   /* records read */
    int64_t n_used;      /* programs added */
    int64_t n_failed;    /* of which failed measurements (label 0) */
    int64_t n_unreplay;  /* states that no longer replay or lower (skipped) */
    int n_tasks;         /* distinct (workload key, target, device fingerprint) groups */
} cm_load_stats;

/* Add every record of 'st' matching 'f' (NULL: all): each task's DAG is parsed once, each
** state replayed (ss_state_from_json), lowered and its features extracted; a record's cost
** is its fastest repeat (failures: label 0).  Tasks are (workload key, target, device
** fingerprint).  'stats' may be NULL.  AT_ECORRUPT for a
** record that does not decode; other store errors as rec_iter_next. */
at_err cm_data_load_store(cm_data *d, rec_store *st, const rec_filter *f, cm_load_stats *stats,
                          char *errmsg, size_t errmsg_size);

/* ---- metrics (cm_data.c) ----------------------------------------------------------- */

typedef struct cm_metrics {
    double pairwise_acc;  /* share of pairs (same task, costs differing by more than the
                          ** threshold, both measured) that the scores order correctly */
    int64_t n_pairs;
    double top1_recall;   /* TenSet: |top-k predicted ∩ top-k measured| / k, mean over tasks */
    double top5_recall;
    double top1_score;    /* TenSet top-k score: best cost / best cost among the k best
                          ** predicted, mean over tasks */
    double top5_score;
    int n_tasks;
} cm_metrics;

/* Metrics of 'scores' (one per program of 'd', higher = predicted faster) against the
** measured costs.  'min_ratio' (e.g. 1.05) is the cost ratio a pair must exceed to count. */
void cm_metrics_eval(const cm_data *d, const double *scores, double min_ratio, cm_metrics *out);

/* ---- the model (cm_model.c) ---------------------------------------------------------- */

#define CM_SCORE_INVALID (-INFINITY) /* the score of a program that does not lower */

#define CM_OBJ_MAP(X)                                                                      \
    X(RANK, "rank", "pairwise logistic loss on pack-sums within each task (default)")      \
    X(REG, "reg", "Ansor's pack-sum squared error weighted by the label")

typedef enum {
#define X(id, name, doc) CM_OBJ_##id,
    CM_OBJ_MAP(X)
#undef X
        CM_N_OBJS
} cm_objective;

const char *cm_objective_name(cm_objective o);
at_err cm_objective_parse(const char *s, cm_objective *out);

typedef struct cm_params {
    cm_objective objective;
    int max_depth;           /* tree depth */
    int max_bin;             /* histogram bins per feature (tree_method hist) */
    double eta;              /* learning rate */
    double gamma;            /* minimum loss reduction of a split */
    double min_child_weight; /* minimum hessian in a leaf */
    double lambda;           /* L2 regularisation of leaf weights */
    double subsample;        /* rows sampled per tree */
    double colsample;        /* features sampled per tree */
    int max_rounds;          /* boosting rounds at most */
    int early_stop;          /* rounds without improvement of the held-out loss before
                             ** stopping (0: always max_rounds) */
    double valid_frac;       /* share of each task's programs held out for early stopping */
    int n_partners;          /* rank: partners sampled per program and round */
    double pair_weight;      /* rank: a pair's loss is weighted by |y_i - y_j|^pair_weight
                             ** (labels best/cost: pairs near the task's best weigh most);
                             ** 0: every pair alike */
    double top_weight;       /* rank: a pair also weighs top_weight * |D(r_i) - D(r_j)|, D(r)
                             ** = 1 / log2(2 + r) of the programs' current ranks in their
                             ** task (LambdaRank's position discount: pairs that move a
                             ** program in or out of the top weigh most); 0: off */
    double min_pair_ratio;   /* rank: pairs whose costs differ by this ratio or less are not
                             ** trained on (measurement noise; default 1.10; 0: every pair) */
    int monotone;            /* 1 (default): scores fall as lane_ops grows and rise with
                             ** eff_lanes, all else equal (XGBoost monotone constraints) */
    int warmup;              /* programs needed before a model trained here is used;
                             ** fewer: random scores (a loaded model is used at once) */
    int n_threads;           /* XGBoost threads (default 1; 0: online CPUs) */
    int predict_threads;     /* threads of our own that split a large prediction batch
                             ** (XGBoost's in-place prediction is thread-safe; each call
                             ** uses n_threads); default 1 */
    int retrain_growth_pct;  /* retrain when the data grew by this many percent since the
                             ** last training (default 20; 0: on every update) */
    uint64_t seed;
} cm_params;

/* The defaults (docs/cost_model.md says why each). */
void cm_params_default(cm_params *p);

typedef struct cm_model cm_model;

/* A model with no training ('p' NULL: defaults).  AT_ENOMEM. */
at_err cm_model_new(const cm_params *p, cm_model **out);
void cm_model_free(cm_model *m); /* NULL is fine */
const cm_params *cm_model_params(const cm_model *m);

typedef enum {
    CM_MODEL_WARMUP,     /* too little data and nothing loaded: random scores */
    CM_MODEL_PRETRAINED, /* a loaded model, not (yet) refined here */
    CM_MODEL_TRAINED     /* trained on this model's data (on top of a loaded one, if any) */
} cm_model_state;

cm_model_state cm_model_get_state(const cm_model *m);
/* Records behind the current prediction: loaded model's count plus this model's data. */
int64_t cm_model_n_records(const cm_model *m);
/* This model's own data (every sample given to cm_model_update / cm_model_fit). */
const cm_data *cm_model_data(const cm_model *m);

/* Add measured programs and retrain (after the warm-up, when the data grew by
** cm_params.retrain_growth_pct since the last training): a new booster from scratch on
** all data seen (on top of a loaded model's scores, which it refines).  AT_ENOMEM, AT_EINVAL (a malformed sample), AT_EIO when XGBoost fails (errmsg
** has its message). */
at_err cm_model_update(cm_model *m, const cm_sample *s, int n, char *errmsg, size_t errmsg_size);
/* Replace the model's data by a copy of 'd' and train now (whatever the warm-up). */
at_err cm_model_fit(cm_model *m, const cm_data *d, char *errmsg, size_t errmsg_size);

/* Scores of 'n' states, IRs, feature sets or data-set programs (one thread).  Higher
** scores mean faster; only their order within one call means anything.  A state that
** does not lower (or a program with no rows) scores CM_SCORE_INVALID.  AT_ENOMEM, AT_EIO
** (XGBoost failed; the log says why). */
at_err cm_model_predict(cm_model *m, const ss_state *const *states, int n, double *scores);
at_err cm_model_predict_ir(cm_model *m, const kn_ir *const *irs, int n, double *scores);
at_err cm_model_predict_feats(cm_model *m, const cm_feats *const *f, int n, double *scores);
at_err cm_model_predict_data(cm_model *m, const cm_data *d, double *scores);

typedef struct cm_train_info {
    int n_rounds;       /* boosting rounds kept */
    double seconds;     /* wall time of the last training */
    int n_programs;     /* programs trained on */
    int64_t n_rows;
} cm_train_info;
void cm_model_train_info(const cm_model *m, cm_train_info *out);

/* ---- the comparator (cm_cmp.c) ----------------------------------------------------- */

/* A second model that compares two programs of one task instead of scoring each: a booster
** (XGBoost binary:logistic) on pair rows [x_a, x_b, x_a - x_b], x a program's rows summed,
** trained to say whether a is the faster; a set is ranked by each program's mean win
** probability against the others of its task (a soft Borda count).  Ranking n programs
** takes n(n - 1) predictions: it re-ranks a round's candidates (tens), never a population.
** It pays with the columns that need a build, groups 10 and 11 (cm_data_set_sim,
** cm_data_set_code; docs/cost_model.md, "The comparator"). */
typedef struct cm_cmp_params {
    int max_depth;         /* 6 */
    double eta;            /* 0.2 */
    int max_rounds;        /* 150 */
    int n_partners;        /* random partners per program (24) */
    double min_pair_ratio; /* pairs whose costs differ by this ratio or less are left out
                           ** (1.05) */
    int max_pairs;         /* at most this many pair rows (150,000: 530 MB while training);
                           ** fewer partners per program beyond it */
    int both_orders;       /* 1 (default): each pair trained on in both orders, (a, b) and
                           ** (b, a), so the comparator learns P(b, a) = 1 - P(a, b) */
    double top_pairs;      /* besides the random partners, every pair among this fraction
                           ** of each task's fastest programs (0, the default: none) */
    int n_threads;         /* XGBoost threads (0: online CPUs) */
    uint64_t seed;
} cm_cmp_params;

void cm_cmp_params_default(cm_cmp_params *p);

typedef struct cm_cmp cm_cmp;

/* 'p' NULL: defaults.  AT_EINVAL for parameters out of range, AT_ENOMEM. */
at_err cm_cmp_new(const cm_cmp_params *p, cm_cmp **out);
void cm_cmp_free(cm_cmp *c); /* NULL is fine */
/* Train on the pairs of each task of 'd' (programs that lowered and were measured).
** AT_EINVAL when no task has two programs apart by more than min_pair_ratio, AT_ENOMEM,
** AT_EIO (XGBoost failed); 'errmsg' says which. */
at_err cm_cmp_fit(cm_cmp *c, const cm_data *d, char *errmsg, size_t errmsg_size);
/* Pairs the last training used (0: not trained). */
int cm_cmp_n_pairs(const cm_cmp *c);
/* Rank 'n' programs of one task: scores[i] is program i's mean probability of beating each
** other one (0..1, higher = faster); a program with no rows (NULL or not lowered) scores
** CM_SCORE_INVALID.  AT_EINVAL before training, AT_ENOMEM, AT_EIO. */
at_err cm_cmp_rank_feats(cm_cmp *c, const cm_feats *const *f, int n, double *scores);
/* The same for every program of 'd', compared within its task only. */
at_err cm_cmp_rank_data(cm_cmp *c, const cm_data *d, double *scores);
/* Rank the programs of 'd' against the measured programs of 'known' (those that lowered
** and did not fail) of the same task (equal task names): scores[i] is program i's mean
** probability of beating them, each pair asked in both orders (0..1, higher = faster), so
** a candidate is placed among programs whose order is known instead of among the other
** candidates.  With 'top' in (0, 1) only the fastest 'top' fraction of each task's known
** programs are compared against (0 or 1: all).  A program of a task without known programs
** keeps its score among its own task in 'd' (cm_cmp_rank_data); one that did not lower
** scores CM_SCORE_INVALID.  AT_EINVAL before training or for 'top' outside 0..1,
** AT_ENOMEM, AT_EIO. */
at_err cm_cmp_rank_known(cm_cmp *c, const cm_data *known, double top, const cm_data *d,
                         double *scores);

/* ---- saving and loading (cm_blob.c) -------------------------------------------------- */

#define CM_BLOB_FORMAT "atcm-xgb-ubj-v1" /* the format string stored in the records store */

/* The model as bytes (docs/cost_model.md: header, checksum, XGBoost UBJSON boosters).  On
** AT_OK the caller owns *blob (at_free).  AT_EINVAL for a model in warm-up (nothing to
** save), AT_EIO when XGBoost fails. */
at_err cm_model_save(const cm_model *m, void **blob, size_t *n);
/* Load a blob: the model then predicts with it at once (CM_MODEL_PRETRAINED) and later
** updates refine it.  Its own data is kept.  AT_ECORRUPT (not a model blob, truncated,
** checksum, XGBoost refuses it) or AT_EVERSION (another feature version or blob version:
** "mismatched"), with a sentence in errmsg; the model is then unchanged. */
at_err cm_model_load(cm_model *m, const void *blob, size_t n, char *errmsg, size_t errmsg_size);

/* Save into / load from the records store for 'target' (rec_model_save/rec_model_load)
** with the feature version and the record count.  Loading: AT_ENOTFOUND when the store has
** no model for the target; AT_ECORRUPT/AT_EVERSION as cm_model_load. */
at_err cm_model_save_store(const cm_model *m, rec_store *st, const char *target,
                           char *errmsg, size_t errmsg_size);
at_err cm_model_load_store(cm_model *m, rec_store *st, const char *target, char *errmsg,
                           size_t errmsg_size);

/* What a run does at its start: load the newest model of 'target' from 'st'; when there is
** none, or it is corrupt or mismatched, log a warning that says so and that the model
** trains from scratch, and carry on with 'm' as it was.  Returns 1 if a model was
** loaded, 0 otherwise (never an error). */
int cm_model_load_or_scratch(cm_model *m, rec_store *st, const char *target);

/* Pre-training: train 'm' on every record of 'st' matching 'f' (NULL: every task and
** device), then it predicts with that.  'stats' may be NULL. */
at_err cm_model_pretrain(cm_model *m, rec_store *st, const rec_filter *f, cm_load_stats *stats,
                         char *errmsg, size_t errmsg_size);

#endif /* CM_COST_MODEL_H */
