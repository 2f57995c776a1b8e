/* schedule_space/schedule_space.h -- compute DAGs and schedule states (prefix ss_).
**
**   ss_dag *dag;  ss_dag_parse(text, len, &dag, err, sizeof err);     a DAG from its text
**   ss_state *st; ss_state_new(dag, &st);                              the naive schedule
**   ss_state_split(st, 2, 0, 2, (int64_t[]){8, 16}, err, sizeof err);  steps, validated
**   ss_state_to_json(st, &buf);  ss_state_from_json(dag, json, ...);  replayable data
**   ss_state_free(st);  ss_dag_unref(dag);
**
** A DAG is immutable once finished and reference-counted (atomically), so states, sketches
** and threads share it.  A state owns a reference to the DAG its steps apply to; steps that
** add stages (cache_write, cache_read, rfactor) give the state a new DAG of its own.
**
** Expressions (ss_expr) are one type for DAG bodies and for the lowered loop IR's values
** and indices (kernels/ builds on them).  They are immutable trees allocated from an arena;
** sharing subtrees is allowed. */
#ifndef SS_SCHEDULE_SPACE_H
#define SS_SCHEDULE_SPACE_H

#include <stddef.h>
#include <stdint.h>

#include "common/common.h"

/* ---- expressions -------------------------------------------------------------------- */

/* id, printed name, arity (-1: variable).  Kinds are stored nowhere persistent: the text
** and JSON forms use the printed names. */
#define SS_EXPR_MAP(X)                                                                     \
    X(IMM_INT, "int", 0)     /* integer constant 'i' of an integer/bool dtype */           \
    X(IMM_FLOAT, "float", 0) /* float constant 'f' */                                      \
    X(AXIS, "axis", 0)       /* axis 'id' of the op being defined (spatial, then reduce) */ \
    X(VAR, "var", 0)         /* loop variable 'id' (loop IR only) */                      \
    X(LOAD, "load", -1)      /* tensor 'id' at a[0..n): DAG: one index per dim; IR: flat */ \
    X(ADD, "+", 2)                                                                         \
    X(SUB, "-", 2)                                                                         \
    X(MUL, "*", 2)                                                                         \
    X(DIV, "/", 2)  /* floats: division; integers: floor division */                      \
    X(MOD, "%", 2)  /* integers: floor modulo (result has the divisor's sign) */          \
    X(MIN, "min", 2)                                                                       \
    X(MAX, "max", 2)                                                                       \
    X(LT, "<", 2)                                                                          \
    X(LE, "<=", 2)                                                                         \
    X(GT, ">", 2)                                                                          \
    X(GE, ">=", 2)                                                                         \
    X(EQ, "==", 2)                                                                         \
    X(NE, "!=", 2)                                                                         \
    X(AND, "&&", 2)                                                                        \
    X(OR, "||", 2)                                                                         \
    X(NOT, "!", 1)                                                                         \
    X(NEG, "neg", 1)                                                                       \
    X(SELECT, "select", 3) /* a[0] ? a[1] : a[2]; the untaken arm is never evaluated */  \
    X(CAST, "cast", 1)     /* to 'dtype' */                                                \
    X(EXP, "exp", 1)                                                                       \
    X(LOG, "log", 1)                                                                       \
    X(SQRT, "sqrt", 1)                                                                     \
    X(TANH, "tanh", 1)                                                                     \
    X(ERF, "erf", 1)                                                                       \
    X(ABS, "abs", 1)                                                                       \
    X(SIGMOID, "sigmoid", 1)

typedef enum {
#define X(id, name, arity) SS_E_##id,
    SS_EXPR_MAP(X)
#undef X
        SS_N_EXPR_KINDS
} ss_expr_kind;

typedef struct ss_expr ss_expr;
struct ss_expr {
    uint8_t kind;  /* ss_expr_kind */
    uint8_t dtype; /* at_dtype of the value */
    uint16_t n;    /* number of operands */
    int32_t id;    /* AXIS: axis index; VAR: loop variable; LOAD: tensor (op or buffer) */
    union {
        int64_t i; /* IMM_INT */
        double f;  /* IMM_FLOAT */
    } v;
    ss_expr *a[]; /* operands */
};

/* Limits of the DAG text (docs/dag_format.md): how deep parentheses, unary operators and
** '?:' nest, and how deep an expression tree may be (a chain of N terms is N - 1 deep). */
#define SS_MAX_NESTING 128
#define SS_MAX_EXPR_DEPTH 256
/* ... and an expression with its inlined producers (ss_state_body gives NULL beyond) */
#define SS_MAX_INLINED_DEPTH 1024

/* The depth of e (operators on the longest path; leaves are 0), computed without
** recursion; it stops counting at 'cap' (returns cap).  -1 on ENOMEM. */
int ss_expr_depth(const ss_expr *e, int cap);

const char *ss_expr_kind_name(ss_expr_kind k);
int ss_expr_kind_arity(ss_expr_kind k); /* -1 for LOAD */

/* Constructors allocate from 'arena' and return NULL when out of memory (or, for the
** checked ones, on a type error).  They fold nothing: see ss_expr_simplify. */
ss_expr *ss_expr_imm_int(at_arena *arena, at_dtype dt, int64_t v);
ss_expr *ss_expr_imm_float(at_arena *arena, at_dtype dt, double v);
ss_expr *ss_expr_axis(at_arena *arena, int axis);                 /* int32 */
ss_expr *ss_expr_var(at_arena *arena, int var);                   /* int32 */
ss_expr *ss_expr_load(at_arena *arena, at_dtype dt, int tensor, int n, ss_expr *const *idx);
/* Operators: the result dtype follows the operands (comparisons, logic: bool). */
ss_expr *ss_expr_op(at_arena *arena, ss_expr_kind k, ss_expr *a, ss_expr *b);
ss_expr *ss_expr_un(at_arena *arena, ss_expr_kind k, ss_expr *a);
ss_expr *ss_expr_select(at_arena *arena, ss_expr *c, ss_expr *a, ss_expr *b);
ss_expr *ss_expr_cast(at_arena *arena, at_dtype dt, ss_expr *a);

/* Structural equality and hash. */
int ss_expr_equal(const ss_expr *a, const ss_expr *b);
uint64_t ss_expr_hash(const ss_expr *e);

/* Print in the DAG text syntax; 'axis_name'/'tensor_name' name the leaves (may be NULL:
** then "ax3", "t2", "v5" are printed). */
typedef const char *(*ss_name_fn)(void *ctx, int id);
void ss_expr_print(at_buf *b, const ss_expr *e, ss_name_fn axis_name, ss_name_fn var_name,
                   ss_name_fn tensor_name, void *ctx);

/* ---- integer index simplification (used by lowering) -------------------------------- */

/* Ranges of loop variables for the simplifier: var v lies in [lo[v], hi[v]]. */
typedef struct ss_var_ranges {
    int n;
    const int64_t *lo, *hi;
} ss_var_ranges;

/* Simplify an int32 index expression: fold constants, normalise to a sum of
** coefficient * atom + constant, cancel terms, remove floor div/mod whose operand's
** range allows it.  Returns a new tree (or 'e' itself), NULL when out of memory. */
ss_expr *ss_expr_simplify(at_arena *arena, const ss_expr *e, const ss_var_ranges *r);

/* Conservative integer bounds of 'e' given variable ranges; 0 if unknown (then lo and hi
** are untouched). */
int ss_expr_bounds(const ss_expr *e, const ss_var_ranges *r, int64_t *lo, int64_t *hi);

/* If 'e' is affine in variable 'var' (e == c * var + rest, rest free of var), set *coef
** and return 1; 0 otherwise. */
int ss_expr_linear_in(const ss_expr *e, int var, int64_t *coef);

/* Replace AXIS leaves (subst_axis != NULL) or VAR leaves (subst_var != NULL) by the
** given expressions (NULL entries leave the leaf); tensor ids are remapped through
** 'tensor_map' when not NULL.  Returns a new tree. */
ss_expr *ss_expr_subst(at_arena *arena, const ss_expr *e, ss_expr *const *subst_axis,
                       int n_axis, ss_expr *const *subst_var, int n_var,
                       const int *tensor_map);

/* ---- compute DAG -------------------------------------------------------------------- */

typedef enum { SS_OP_PLACEHOLDER, SS_OP_COMPUTE } ss_op_kind;

#define SS_REDUCE_MAP(X)                                                                   \
    X(NONE, "none")                                                                        \
    X(SUM, "sum")                                                                          \
    X(MAX, "max")                                                                          \
    X(MIN, "min")                                                                          \
    X(PROD, "prod")

typedef enum {
#define X(id, name) SS_RED_##id,
    SS_REDUCE_MAP(X)
#undef X
        SS_N_REDUCES
} ss_reduce;

#define SS_MAX_DIMS 10
/* The largest tensor of a DAG (specs are held to the same, kn_ops.c): its elements are
** indexed with int32, and an agent takes buffers of at most 1 GiB (AT_WIRE_MAX_BUF_BYTES). */
#define SS_MAX_TENSOR_ELEMS 2147483647ll
#define SS_MAX_TENSOR_BYTES (1ll << 30)
#define SS_MAX_AXES 16 /* spatial + reduce axes of one op */

typedef struct ss_axis {
    const char *name;
    int64_t extent;
} ss_axis;

typedef struct ss_op {
    const char *name;
    ss_op_kind kind;
    at_dtype dtype;
    int is_const;          /* placeholder: a weight, known before the run (layout-free) */
    int n_dims;            /* placeholder dims; compute: number of spatial axes */
    int64_t shape[SS_MAX_DIMS];
    int n_axes;            /* compute: spatial axes (n_axes == n_dims) */
    int n_raxes;           /* compute: reduce axes, numbered n_axes.. in AXIS leaves */
    ss_axis axes[SS_MAX_AXES];
    ss_reduce reduce;
    ss_expr *body;         /* compute: the value (the reduced source when reduce != NONE) */
    const char *tag;       /* what made it: NULL for the task's ops, "cache_write" (the
                           ** new compute stage), "cache_read", "rfactor" (the .rf stage),
                           ** "layout_rewrite" (a weight in its new layout: computed once,
                           ** outside the kernel, by the artifact's pre-transform) */
    /* derived by ss_dag_finish */
    int n_readers;         /* number of compute ops that load this op */
    int is_output;         /* compute op nobody reads */
} ss_op;

typedef struct ss_dag ss_dag;
struct ss_dag {
    int n_ops;
    ss_op *ops;            /* topological order: an op reads only earlier ops */
    at_arena arena;        /* ops' names, bodies */
    int finished;
    /* derived by ss_dag_finish */
    int n_inputs, n_outputs;
    int args[64];          /* kernel argument order: placeholders, then outputs (op ids) */
    int n_args;
    char key[33];          /* workload key: hex of SHA-256 of the canonical text */
    double flops;          /* floating-point (or integer) operations of one evaluation */
    /* private */
    ss_dag *parent;        /* a DAG derived by a step shares expressions with its parent */
    int n_cap;
    _Atomic int refs;
    at_err err;            /* sticky builder error */
    char errmsg[256];
};

/* A new empty DAG with one reference; NULL when out of memory. */
ss_dag *ss_dag_new(void);
ss_dag *ss_dag_ref(ss_dag *dag);
void ss_dag_unref(ss_dag *dag); /* frees at zero; NULL is fine */

/* Builders: return the new op's id, or -1 after an error (sticky on the DAG: every later
** builder call returns -1; ss_dag_finish reports the first error). */
int ss_dag_placeholder(ss_dag *dag, const char *name, at_dtype dt, int n_dims,
                       const int64_t *shape, int is_const);
int ss_dag_compute(ss_dag *dag, const char *name, int n_axes, const ss_axis *axes, int n_raxes,
                   const ss_axis *raxes, ss_reduce red, ss_expr *body);

/* Check the whole DAG (types, names unique, loads in bounds for every axis value except
** inside a select arm, ...), derive readers/outputs, argument order, FLOPs and the
** workload key.  On failure returns AT_EINVAL with the message in dag->errmsg. */
at_err ss_dag_finish(ss_dag *dag);

/* Parse the DAG text format (docs/dag_format.md).  On AT_EPARSE/AT_EINVAL 'errmsg' holds
** "LINE:COL: problem"; on AT_OK the caller owns *out (ss_dag_unref). */
at_err ss_dag_parse(const char *text, size_t n, ss_dag **out, char *errmsg, size_t errmsg_size);

/* The canonical text: parseable, names as given.  ss_dag_print_canonical renames
** tensors to t0.. and axes to i0.. / r0.. (this is what the workload key hashes). */
void ss_dag_print(const ss_dag *dag, at_buf *b);
void ss_dag_print_canonical(const ss_dag *dag, at_buf *b);

/* Op id by name, or -1. */
int ss_dag_find(const ss_dag *dag, const char *name);

/* Elements of op 'op' (product of its shape). */
int64_t ss_op_n_elems(const ss_op *op);

/* Does op 'reader' load op 'tensor' directly? */
int ss_op_reads(const ss_op *reader, int tensor);

/* ---- schedule state ----------------------------------------------------------------- */

#define SS_ITER_KIND_MAP(X)                                                                \
    X(SPATIAL, "S")                                                                        \
    X(REDUCE, "R")                                                                         \
    X(MIXED, "M")

typedef enum {
#define X(id, name) SS_ITER_##id,
    SS_ITER_KIND_MAP(X)
#undef X
} ss_iter_kind;

/* Annotations; numbers as TVM's (kNone=0 ... kThreadZ=10), stored in records. */
#define SS_ANN_MAP(X)                                                                      \
    X(NONE, "none")                                                                        \
    X(UNROLL, "unroll")                                                                    \
    X(VECTORIZE, "vectorize")                                                              \
    X(PARALLEL, "parallel")                                                                \
    X(VTHREAD, "vthread")                                                                  \
    X(BLOCK_X, "blockIdx.x")                                                               \
    X(THREAD_X, "threadIdx.x")                                                             \
    X(BLOCK_Y, "blockIdx.y")                                                               \
    X(THREAD_Y, "threadIdx.y")                                                             \
    X(BLOCK_Z, "blockIdx.z")                                                               \
    X(THREAD_Z, "threadIdx.z")

typedef enum {
#define X(id, name) SS_ANN_##id,
    SS_ANN_MAP(X)
#undef X
        SS_N_ANNS
} ss_ann;

const char *ss_ann_name(ss_ann a);

typedef enum { SS_LOC_ROOT, SS_LOC_INLINE, SS_LOC_AT } ss_loc;

/* Steps; the tags are the JSON form's first element (docs/schedule_steps.md). */
#define SS_STEP_MAP(X)                                                                     \
    X(SPLIT, "SP")                                                                         \
    X(FOLLOW_SPLIT, "FSP")                                                                 \
    X(REORDER, "RE")                                                                       \
    X(FUSE, "FU")                                                                          \
    X(ANNOTATE, "AN")                                                                      \
    X(PRAGMA, "PR")                                                                        \
    X(COMPUTE_AT, "CA")                                                                    \
    X(COMPUTE_INLINE, "CI")                                                                \
    X(COMPUTE_ROOT, "CR")                                                                  \
    X(CACHE_WRITE, "CHW")                                                                  \
    X(CACHE_READ, "CHR")                                                                   \
    X(RFACTOR, "RF")                                                                       \
    X(LAYOUT_REWRITE, "LR")                                                                \
    X(FOLLOW_FUSED_SPLIT, "FFSP")

typedef enum {
#define X(id, tag) SS_STEP_##id,
    SS_STEP_MAP(X)
#undef X
        SS_N_STEP_KINDS
} ss_step_kind;

#define SS_STEP_MAX_INTS 32

/* One transform step.  Fields by kind (positions are iterator positions in the stage's
** current loop order, stages are ids at the time of the step):
**   SPLIT          stage, iter, extent (0 = unknown), ints = lengths inner to outer... see
**                  docs; n_ints = number of lengths (each 0 = not yet chosen)
**   FOLLOW_SPLIT   stage, iter, a = source split step index, b = number of lengths
**   REORDER        stage, ints = new order (old positions), n_ints = number of iters
**   FUSE           stage, ints = consecutive positions
**   ANNOTATE       stage, iter, a = ss_ann
**   PRAGMA         stage, iter, a = auto_unroll_max_step value
**   COMPUTE_AT     stage, a = target stage, b = target iter position
**   COMPUTE_INLINE stage          COMPUTE_ROOT stage
**   CACHE_WRITE    stage, scope   (new stage inserted at 'stage'; the op moves to stage+1)
**   CACHE_READ     stage, scope, ints = reader stages (new stage at stage+1)
**   RFACTOR        stage, iter, a = factor position (new stage inserted at 'stage')
**   LAYOUT_REWRITE stage (the reader), a = the constant input whose layout follows the
**                  reader's loops (new stage "<input>.layout" inserted at a + 1)
**   FOLLOW_FUSED_SPLIT stage, iter, ints = source split steps, a = level, b = 1: a two-way
**                  split whose inner length is the product of lengths[a] of the source
**                  splits (clamped to the loop's extent); b = 0: that product is the
**                  outer loop's count instead (GPU cooperative fetching: a loader's thread
**                  count follows its consumer's) */
typedef struct ss_step {
    ss_step_kind kind;
    int stage, iter;
    int a, b;
    int64_t extent;
    int n_ints;
    int64_t ints[SS_STEP_MAX_INTS];
    char scope[16];
} ss_step;

#define SS_MAX_IVARS 64
#define SS_MAX_RELS 24
#define SS_MAX_LEAVES 32

typedef struct ss_ivar {
    int64_t extent;   /* after bound inference; 0 = unknown (unfilled split) */
    int64_t len;      /* split child: the length the split gave it (0: the outermost
                      ** child, whose extent is derived; or not chosen yet) */
    uint8_t kind;     /* ss_iter_kind */
    uint8_t ann;      /* ss_ann, leaves only */
    int8_t rel;       /* relation that produced it, -1 for an op axis */
    int8_t axis;      /* op axis index when rel == -1 */
} ss_ivar;

typedef enum { SS_REL_SPLIT, SS_REL_FUSE } ss_rel_kind;

#define SS_MAX_FUSE 16
#define SS_MAX_SPLIT 8

typedef struct ss_rel {
    uint8_t kind; /* ss_rel_kind */
    uint8_t n_in, n_out;
    int8_t in[SS_MAX_FUSE];   /* SPLIT: 1 parent; FUSE: parents outer to inner */
    int8_t out[SS_MAX_SPLIT]; /* SPLIT: children outer to inner; FUSE: 1 child */
} ss_rel;

typedef struct ss_stage {
    int op;               /* op id in the state's DAG (== stage id) */
    uint8_t loc;          /* ss_loc */
    int attach_stage;     /* SS_LOC_AT: consumer stage ... */
    int attach_ivar;      /* ... and its ivar (stable across reorder) */
    int n_ivars, n_rels, n_leaves;
    ss_ivar ivars[SS_MAX_IVARS]; /* op axes first (index == axis) */
    ss_rel rels[SS_MAX_RELS];
    int8_t leaves[SS_MAX_LEAVES]; /* current loops, outer to inner, as ivar indices */
    int auto_unroll_max_step;     /* 0: none */
    int64_t region[SS_MAX_DIMS];  /* extent of each spatial axis after bound inference */
    uint8_t n_steps;              /* transform steps applied to this stage so far */
} ss_stage;

typedef struct ss_state ss_state;
struct ss_state {
    ss_dag *dag;    /* owned reference; the DAG the stages describe */
    ss_dag *base;   /* owned reference; the task's DAG (the one steps replay on) */
    int n_stages;
    ss_stage *stages;
    int n_steps, cap_steps;
    ss_step *steps;
    int concrete;   /* every split length known */
    int bounds_dirty;
};

/* The initial (naive) state of 'dag': every stage at root, loops in axis order.  On AT_OK
** the caller owns *out (ss_state_free); it takes its own reference to 'dag'. */
at_err ss_state_new(ss_dag *dag, ss_state **out);
void ss_state_free(ss_state *st);
at_err ss_state_copy(const ss_state *st, ss_state **out);

/* Apply one step: validated first; on failure the state is unchanged, the return is
** AT_ESCHED (or AT_ENOMEM) and 'errmsg' says what is wrong with which stage/iterator. */
at_err ss_state_apply(ss_state *st, const ss_step *step, char *errmsg, size_t errmsg_size);

/* Convenience wrappers building the step. */
at_err ss_state_split(ss_state *st, int stage, int iter, int n, const int64_t *lengths,
                      char *errmsg, size_t errmsg_size);
at_err ss_state_follow_split(ss_state *st, int stage, int iter, int src_step, int n_split,
                             char *errmsg, size_t errmsg_size);
at_err ss_state_follow_fused_split(ss_state *st, int stage, int iter, int n_src,
                                   const int64_t *src_steps, int level, int factor,
                                   char *errmsg, size_t errmsg_size);
at_err ss_state_reorder(ss_state *st, int stage, int n, const int64_t *order, char *errmsg,
                        size_t errmsg_size);
at_err ss_state_fuse(ss_state *st, int stage, int n, const int64_t *iters, char *errmsg,
                     size_t errmsg_size);
at_err ss_state_annotate(ss_state *st, int stage, int iter, ss_ann ann, char *errmsg,
                         size_t errmsg_size);
at_err ss_state_pragma_unroll(ss_state *st, int stage, int iter, int max_step, char *errmsg,
                              size_t errmsg_size);
at_err ss_state_compute_at(ss_state *st, int stage, int target_stage, int target_iter,
                           char *errmsg, size_t errmsg_size);
at_err ss_state_compute_inline(ss_state *st, int stage, char *errmsg, size_t errmsg_size);
at_err ss_state_compute_root(ss_state *st, int stage, char *errmsg, size_t errmsg_size);
at_err ss_state_cache_write(ss_state *st, int stage, const char *scope, char *errmsg,
                            size_t errmsg_size);
at_err ss_state_cache_read(ss_state *st, int stage, const char *scope, int n_readers,
                           const int64_t *readers, char *errmsg, size_t errmsg_size);
at_err ss_state_rfactor(ss_state *st, int stage, int iter, int factor_pos, char *errmsg,
                        size_t errmsg_size);
/* Store constant input 'input' (a weight) in the order stage 'stage' reads it: one
** dimension per loop of the stage (outer to inner) that walks one of the input's axes, so
** the innermost tiles read it contiguously.  The input's indices in the stage must be
** plain axes (or 0), the splits of those axes must divide them, and no fuse may involve
** them.  Apply it after the stage's tiling steps. */
at_err ss_state_layout_rewrite(ss_state *st, int stage, int input, char *errmsg,
                               size_t errmsg_size);

/* Stage by name (op name in the state's DAG), or -1. */
int ss_state_find_stage(const ss_state *st, const char *name);

/* Recompute the extents of attached stages' loops (done automatically by the steps that
** need it and by lowering).  AT_ESCHED if the attachment cannot be bounded. */
at_err ss_state_infer_bounds(ss_state *st, char *errmsg, size_t errmsg_size);

/* Name of ivar 'iv' of 'stage' ("i", "i.1", "i.0@j.0@") into out[size]. */
void ss_state_ivar_name(const ss_state *st, int stage, int iv, char *out, size_t size);

/* JSON: {"v":1,"steps":[[tag, ...], ...]} -- byte-stable: to_json(from_json(x)) == x for
** any x that to_json wrote.  from_json replays the steps on 'dag' (a task DAG). */
void ss_state_to_json(const ss_state *st, at_buf *b);
at_err ss_state_from_json(ss_dag *dag, const char *json, size_t n, ss_state **out,
                          char *errmsg, size_t errmsg_size);
void ss_step_to_json(const ss_step *s, at_buf *b);
/* The same replay, for a state of another DAG of the same structure (a similar task): a
** split recorded for another extent gets lengths fitted to this one (each the largest
** divisor of what is left not above the recorded length) instead of an error. */
at_err ss_state_from_json_fit(ss_dag *dag, const char *json, size_t n, ss_state **out,
                              char *errmsg, size_t errmsg_size);
/* from_json and from_json_fit calls in this process so far (all threads). */
int64_t ss_state_parse_count(void);

/* The loop structure as text (one line per loop/stage): equal texts = equal programs.
** This is the identity used to avoid measuring a program twice. */
void ss_state_print(const ss_state *st, at_buf *b);
/* A 64-bit hash of what ss_state_print prints, without formatting it (5-10x cheaper): the
** search's identity of a candidate. */
uint64_t ss_state_hash(const ss_state *st);

/* ---- what lowering needs ------------------------------------------------------------ */

/* Loop variable of leaf position 'pos' of stage 'stage' in region expressions. */
#define SS_LEAF_VAR(stage, pos) ((stage) * SS_MAX_LEAVES + (pos))

/* Where a stage's buffer lives in its tensor's coordinates: for each spatial dimension d,
** element [min[d], min[d] + width[d]) is computed; min[d] is an int32 expression over
** SS_LEAF_VAR variables of the stages it is attached to (constant 0 for root stages);
** align[d] divides min[d] for every value of those variables (0: min[d] is always 0). */
typedef struct ss_region {
    ss_expr *min[SS_MAX_DIMS];
    int64_t width[SS_MAX_DIMS];
    int64_t align[SS_MAX_DIMS];
} ss_region;

/* Regions of every stage (out[n_stages]); expressions from 'arena'.  The state must be
** concrete.  AT_ESCHED when an attachment cannot be bounded. */
at_err ss_state_regions(const ss_state *st, at_arena *arena, ss_region *out, char *errmsg,
                        size_t errmsg_size);

/* The body of stage 'stage' with every inlined stage substituted (loads of inlined
** stages replaced by their bodies); NULL when out of memory. */
ss_expr *ss_state_body(const ss_state *st, int stage, at_arena *arena);

/* Stride of each child of split relation 'rel' of 'stage' (product of the lengths of
** the children inside it) into stride[n_out]; 0 if a length is unknown. */
int ss_rel_strides(const ss_stage *sg, const ss_rel *rel, int64_t *stride);

/* ---- the schedule space: sketches, sampling, mutation (ss_sketch.c, ss_sample.c) ------ */

/* What the rules know of the hardware (filled from the compilation target). */
typedef struct ss_hw {
    int n_cores;           /* threads a kernel runs on */
    int vector_bytes;      /* widest SIMD register */
    int64_t l1_bytes, l2_bytes;
    int max_innermost;     /* largest innermost tile length (default 64) */
    int max_vectorize;     /* largest vectorized extent in elements (default 4 vectors) */
    int n_unroll;          /* auto-unroll candidates in 'unroll' (default {0,16,64,512}) */
    int unroll[8];
    int layout_rewrite;    /* store weights in the order tiled stages read them (default 1) */
    /* GPU targets (ss_hw_gpu); all 0 for CPUs */
    int is_gpu;            /* use the GPU rules, annotation and mutations */
    int warp_size;         /* threads of a warp (32) */
    int max_threads_per_block;
    int64_t max_shared_bytes; /* shared memory of one block */
    int max_vthread;       /* largest virtual-thread extent (warp_size / 4) */
    int64_t max_local_bytes; /* per-thread local buffers (registers / local memory) */
} ss_hw;

/* Fill the defaults of a CPU with 'n_cores' cores and 'vector_bytes' SIMD registers. */
void ss_hw_cpu(ss_hw *hw, int n_cores, int vector_bytes, int64_t l1_bytes, int64_t l2_bytes);
/* Fill the defaults of an NVIDIA GPU: 'n_sms' multiprocessors, at most 'max_threads'
** threads and 'max_shared_bytes' of shared memory per block (ss_sketch_gpu.c). */
void ss_hw_gpu(ss_hw *hw, int n_sms, int max_threads, int64_t max_shared_bytes);

/* One derivation rule of the sketch generator: a condition on a stage of a state and an
** action producing new states.  The table (ss_rules()) is tried in order for each stage,
** from the last stage to the first; see docs/schedule_space.md. */
typedef enum { SS_RULE_SKIP, SS_RULE_APPLY, SS_RULE_APPLY_AND_SKIP_REST } ss_rule_answer;

typedef struct ss_rule_ctx ss_rule_ctx; /* private: the generator's work list */

typedef struct ss_rule {
    const char *name;
    const char *condition; /* the condition it checks, in words (docs, --help) */
    ss_rule_answer (*check)(const ss_state *st, int stage, const ss_hw *hw);
    /* Append the derived (state, next stage) pairs with ss_rule_emit; 'st' is not changed. */
    at_err (*apply)(ss_rule_ctx *ctx, const ss_state *st, int stage, const ss_hw *hw);
} ss_rule;

/* The CPU rule table, terminated by a rule with name NULL. */
const ss_rule *ss_rules_cpu(void);
/* The GPU rule table (Ansor's CUDA rules: shared-memory cache reads, cross-thread
** reduction, cache write, SSSRRSRS tiling fused into the consumer; ss_sketch_gpu.c). */
const ss_rule *ss_rules_gpu(void);
/* For rules: hand a derived state (ownership moves to the generator on AT_OK) and the
** stage to continue from (-1: finished). */
at_err ss_rule_emit(ss_rule_ctx *ctx, ss_state *st, int next_stage);

typedef struct ss_space ss_space;

/* Derive the sketches of 'dag' for the hardware 'hw' with the rule table 'rules' (NULL:
** ss_rules_gpu() when hw->is_gpu, else ss_rules_cpu()).  On AT_OK the caller owns *out
** (ss_space_free).  AT_EUNSUPPORTED with a message if no sketch can be derived (e.g. a
** DAG with no compute tensor). */
at_err ss_space_new(ss_dag *dag, const ss_hw *hw, const ss_rule *rules, ss_space **out,
                    char *errmsg, size_t errmsg_size);
void ss_space_free(ss_space *sp);
int ss_space_n_sketches(const ss_space *sp);
/* Sketch i: its state (split lengths not chosen yet) and the rules that made it. */
const ss_state *ss_space_sketch(const ss_space *sp, int i);
const char *ss_space_sketch_desc(const ss_space *sp, int i);
ss_dag *ss_space_dag(const ss_space *sp);

/* A random complete state: a sketch chosen uniformly, tile sizes from the extents'
** factorizations, compute locations, parallel, unroll and vectorize annotations, and
** (hw->layout_rewrite) the layout rewrite of the weights read by tiled stages.  For a GPU
** (hw->is_gpu): tile sizes, thread binding (blocks, virtual threads, threads, cooperative
** fetching of shared stages) and auto-unroll, and AT_ESCHED when the state breaks the
** GPU's limits (threads, virtual threads, shared memory, local memory).  The
** same rng state gives the same result.  Thread-safe for distinct rngs.  AT_ESCHED when
** the drawn annotation does not replay (rare; draw again). */
at_err ss_space_sample(const ss_space *sp, at_rng *rng, ss_state **out);
/* The same from sketch 'k' (0 <= k < ss_space_n_sketches; else AT_EINVAL). */
at_err ss_space_sample_sketch(const ss_space *sp, int k, at_rng *rng, ss_state **out);

/* Mutation kinds, with their default weights. */
#define SS_MUTATION_MAP(X)                                                                 \
    X(TILE_SIZE, "tile_size", 0.90)                                                        \
    X(AUTO_UNROLL, "auto_unroll", 0.04)                                                    \
    X(COMPUTE_LOCATION, "compute_location", 0.05)                                          \
    X(PARALLEL, "parallel", 0.01)

typedef enum {
#define X(id, name, w) SS_MUT_##id,
    SS_MUTATION_MAP(X)
#undef X
        SS_N_MUTATIONS
} ss_mutation;

/* A mutant of 'st' (a state this space produced): one mutation chosen by weight (or the
** given kind when kind >= 0).  On a GPU only TILE_SIZE (0.90, also the loaders' vector
** length) and AUTO_UNROLL (0.10) apply, and mutants must keep within the GPU's limits.  AT_ESCHED when the mutation does not apply or gives an
** invalid state (cheap: draw again); on AT_OK the caller owns *out. */
at_err ss_space_mutate(const ss_space *sp, const ss_state *st, at_rng *rng, int kind,
                       ss_state **out);

/* Replay steps on a task DAG: the state they describe. */
at_err ss_state_replay(ss_dag *dag, const ss_step *steps, int n_steps, ss_state **out,
                       char *errmsg, size_t errmsg_size);

#endif /* SS_SCHEDULE_SPACE_H */
