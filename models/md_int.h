/* models/md_int.h -- what the files of models/ share (private): the imported graph,
** its nodes and tensors, the fused groups that become tasks, and the execution plan.
**
** The pipeline, one file per stage:
**   md_onnx.c     ONNX bytes -> md_graph (protobuf-c over Debian's onnx.proto): tensors,
**                 nodes with their attributes, initializers as constant data
**   md_graph.c    checks and rewrites: topological order, shape inference, constant
**                 folding, BatchNormalization folded into Conv, the decomposed layer norm
**                 recognised, Gemm/MatMul with constant weights turned into 'dense',
**                 dead nodes removed, aliases (Reshape/Flatten/...) resolved
**   md_extract.c  fusion (anchor + elementwise consumers) -> groups -> DAG text -> tasks,
**                 deduplicated by workload key, weighted by their number of uses
**   md_tasks.c    the task list: JSONL writer and reader
**   md_run.c      the whole-model executor (tuned and naive kernels) and the schedule
**                 choice from the records store shared with export
**   md_export.c   the shared library of the tuned kernels and its header
**
** Invariants after md_graph_prepare:
**   - nodes[] is in topological order; a node with 'dead' set is skipped everywhere;
**   - every tensor a live node reads or writes has a known shape (else the node is
**     'unsupported' and so is everything that depends on it without a shape hint);
**   - a tensor with 'data' is a constant (float32 or int64), never written at run time;
**   - 'alias' >= 0 names the tensor whose buffer a reshape-like node's output shares
**     (always a root: alias of an alias is resolved). */
#ifndef MD_INT_H
#define MD_INT_H

#include <stdint.h>

#include "common/common.h"
#include "kernels/kernels.h"
#include "models/models.h"

#define MD_MAX_RANK 8
#define MD_MAX_SYMS 8 /* named symbolic dimensions of one model */
/* An NHWC convolution reads a graph input of at most this many channels in NCHW, as it
** is (md_layout.c): the stem of an image model (3 channels), whose input transpose cost
** MobileNetV2 0.085-0.15 ms of 5 */
#define MD_NCHW_IN_MAX_C 4

/* ---- operators ------------------------------------------------------------------------ */

/* How an operator takes part in task extraction and execution. */
typedef enum {
    MD_CLS_ANCHOR, /* a reduction or a library operator: the head of a task */
    MD_CLS_ELEM,   /* elementwise (with broadcasting): fused into its producer's task */
    MD_CLS_ALIAS,  /* same bytes, another shape (Reshape, Flatten, ...): no work at all */
    MD_CLS_MOVE,   /* pure data movement the executor does as a copy (Transpose, Concat,
                   ** Slice, Gather, Split, Expand) and the conversion of run-time integers
                   ** (a mask) to float, or to a bool held as float 0/1 */
    MD_CLS_CONST,  /* supported only on constants: folded before extraction (Shape, ...) */
} md_op_class;

/*  X(id, ONNX op type, class) -- internal operators have names no ONNX op has. */
#define MD_OP_MAP(X)                                                                       \
    X(CONV, "Conv", MD_CLS_ANCHOR)                                                         \
    X(GEMM, "Gemm", MD_CLS_ANCHOR)                                                         \
    X(MATMUL, "MatMul", MD_CLS_ANCHOR)                                                     \
    X(MAXPOOL, "MaxPool", MD_CLS_ANCHOR)                                                   \
    X(AVGPOOL, "AveragePool", MD_CLS_ANCHOR)                                               \
    X(GAP, "GlobalAveragePool", MD_CLS_ANCHOR)                                             \
    X(GMP, "GlobalMaxPool", MD_CLS_ANCHOR)                                                 \
    X(SOFTMAX, "Softmax", MD_CLS_ANCHOR)                                                   \
    X(LAYERNORM, "LayerNormalization", MD_CLS_ANCHOR)                                      \
    X(REDUCEMEAN, "ReduceMean", MD_CLS_ANCHOR)                                             \
    X(REDUCESUM, "ReduceSum", MD_CLS_ANCHOR)                                               \
    X(REDUCEMAX, "ReduceMax", MD_CLS_ANCHOR)                                               \
    X(REDUCEMIN, "ReduceMin", MD_CLS_ANCHOR)                                               \
    X(DENSE, "(dense)", MD_CLS_ANCHOR)                                                     \
    X(WINO_IN, "(winograd_input)", MD_CLS_ANCHOR)                                          \
    X(WINO_GEMM, "(winograd_gemm)", MD_CLS_ANCHOR)                                         \
    X(WINO_OUT, "(winograd_output)", MD_CLS_ANCHOR)                                        \
    X(BATCHNORM, "BatchNormalization", MD_CLS_ELEM)                                        \
    X(ADD, "Add", MD_CLS_ELEM)                                                             \
    X(SUB, "Sub", MD_CLS_ELEM)                                                             \
    X(MUL, "Mul", MD_CLS_ELEM)                                                             \
    X(DIV, "Div", MD_CLS_ELEM)                                                             \
    X(POW, "Pow", MD_CLS_ELEM)                                                             \
    X(MAX, "Max", MD_CLS_ELEM)                                                             \
    X(MIN, "Min", MD_CLS_ELEM)                                                             \
    X(RELU, "Relu", MD_CLS_ELEM)                                                           \
    X(CLIP, "Clip", MD_CLS_ELEM)                                                           \
    X(SIGMOID, "Sigmoid", MD_CLS_ELEM)                                                     \
    X(TANH, "Tanh", MD_CLS_ELEM)                                                           \
    X(ERF, "Erf", MD_CLS_ELEM)                                                             \
    X(GELU, "Gelu", MD_CLS_ELEM)                                                           \
    X(EXP, "Exp", MD_CLS_ELEM)                                                             \
    X(LOG, "Log", MD_CLS_ELEM)                                                             \
    X(SQRT, "Sqrt", MD_CLS_ELEM)                                                           \
    X(ABS, "Abs", MD_CLS_ELEM)                                                             \
    X(NEG, "Neg", MD_CLS_ELEM)                                                             \
    X(RECIPROCAL, "Reciprocal", MD_CLS_ELEM)                                               \
    X(LEAKYRELU, "LeakyRelu", MD_CLS_ELEM)                                                 \
    X(HARDSIGMOID, "HardSigmoid", MD_CLS_ELEM)                                             \
    X(HARDSWISH, "HardSwish", MD_CLS_ELEM)                                                 \
    X(EQUAL, "Equal", MD_CLS_ELEM)                                                         \
    X(GREATER, "Greater", MD_CLS_ELEM)                                                     \
    X(LESS, "Less", MD_CLS_ELEM)                                                           \
    X(NOT, "Not", MD_CLS_ELEM)                                                             \
    X(WHERE, "Where", MD_CLS_ELEM)                                                         \
    X(TO_BOOL, "(to_bool)", MD_CLS_ELEM)                                                   \
    X(IDENTITY, "Identity", MD_CLS_ALIAS)                                                  \
    X(DROPOUT, "Dropout", MD_CLS_ALIAS)                                                    \
    X(RESHAPE, "Reshape", MD_CLS_ALIAS)                                                    \
    X(FLATTEN, "Flatten", MD_CLS_ALIAS)                                                    \
    X(SQUEEZE, "Squeeze", MD_CLS_ALIAS)                                                    \
    X(UNSQUEEZE, "Unsqueeze", MD_CLS_ALIAS)                                                \
    X(TRANSPOSE, "Transpose", MD_CLS_MOVE)                                                 \
    X(CONCAT, "Concat", MD_CLS_MOVE)                                                       \
    X(SLICE, "Slice", MD_CLS_MOVE)                                                         \
    X(GATHER, "Gather", MD_CLS_MOVE)                                                       \
    X(SPLIT, "Split", MD_CLS_MOVE)                                                         \
    X(INT_TO_FLOAT, "(int_to_float)", MD_CLS_MOVE)                                         \
    X(INT_TO_BOOL, "(int_to_bool)", MD_CLS_MOVE)                                           \
    X(EXPAND, "Expand", MD_CLS_MOVE)                                                       \
    X(CONSTANT, "Constant", MD_CLS_CONST)                                                  \
    X(SHAPE, "Shape", MD_CLS_CONST)                                                        \
    X(CAST, "Cast", MD_CLS_CONST)                                                          \
    X(CONSTANTOFSHAPE, "ConstantOfShape", MD_CLS_CONST)                                    \
    X(RANGE, "Range", MD_CLS_CONST)                                                        \
    X(UNKNOWN, "?", MD_CLS_CONST)

typedef enum {
#define X(id, name, cls) MD_OP_##id,
    MD_OP_MAP(X)
#undef X
        MD_N_OPS
} md_op_kind;

/* ONNX op type of a kind, and the kind of an op type of the default domain (MD_OP_UNKNOWN
** when it is not supported). */
const char *md_op_name(md_op_kind k);
md_op_class md_op_class_of(md_op_kind k);
md_op_kind md_op_lookup(const char *op_type);

/* ---- the graph ------------------------------------------------------------------------ */

typedef enum { MD_ATTR_FLOAT, MD_ATTR_INT, MD_ATTR_STRING, MD_ATTR_FLOATS, MD_ATTR_INTS,
               MD_ATTR_TENSOR, MD_ATTR_OTHER } md_attr_type;

typedef struct md_attr {
    char *name;
    md_attr_type type;
    double f;
    int64_t i;
    char *s;           /* STRING */
    int n;             /* FLOATS, INTS */
    double *floats;
    int64_t *ints;
    int tensor;        /* TENSOR: a tensor id of the graph holding the value (constant) */
} md_attr;

typedef struct md_tensor {
    char *name;
    at_dtype dtype;   /* AT_DT_F32 or AT_DT_I64 for everything this code computes */
    int known;        /* shape known */
    int rank;
    int64_t shape[MD_MAX_RANK];
    int64_t n_elems;
    void *data;       /* constant value (float or int64_t), or NULL */
    int is_input;     /* a graph input fed at run time (not an initializer) */
    int is_output;    /* a graph output */
    int is_weight;    /* read in a weight position (Conv W, Gemm B, ...): 'const' in DAGs */
    int hint;         /* a shape came from value_info/graph outputs (not checked yet) */
    int hint_rank;
    int64_t hint_shape[MD_MAX_RANK];
    unsigned char sym[MD_MAX_RANK]; /* graph inputs and outputs: per dimension, 1 + the
                      ** index (md_graph.sym_names) of the symbolic dimension the file names
                      ** there, or 0 for a fixed size */
    int sym_rank;     /* the rank the file declares for a graph input or output (0: none) */
    int producer;     /* node id, or -1 */
    int n_consumers;  /* live nodes reading it */
    int alias;        /* the tensor whose buffer this one shares, or -1 */
} md_tensor;

typedef struct md_node {
    char *name;       /* the node's name, or "OpType#index" when the file gives none */
    char *op_type;    /* as written in the file */
    char *domain;     /* "" for the default domain */
    md_op_kind kind;
    int n_in, n_out;
    int *in, *out;    /* tensor ids; -1 for an omitted optional input */
    int n_attrs;
    md_attr *attrs;
    int dead;         /* folded, fused away by a rewrite, or unused */
    int unsupported;  /* the reason is in 'why' */
    char *why;
    int group;        /* md_extract: the group it belongs to, -1 */
    int nhwc;         /* the layout plan (md_layout.c) made it compute in NHWC: its 4-d
                      ** activations are [N, H, W, C] and a Conv's weight [R, S, C/g, K] */
    int in_nchw;      /* an NHWC Conv that reads its input in NCHW all the same (a graph
                      ** input of at most MD_NCHW_IN_MAX_C channels: no transpose) */
    int n_merged;
    int *merged;      /* dead nodes a rewrite folded into this one (a BatchNormalization
                      ** into its Conv): listed with it where tasks name their nodes */
} md_node;

struct md_graph {
    char *name;              /* file name, for messages */
    int64_t opset;           /* version of the default domain */
    int64_t ir_version;
    char *producer;          /* "pytorch 2.1" or "" */
    int n_tensors, cap_tensors;
    md_tensor *tensors;
    int n_nodes, cap_nodes;
    md_node *nodes;
    int n_inputs, n_outputs; /* graph inputs (runtime) and outputs, tensor ids */
    int *inputs, *outputs;
    int cap_inputs, cap_outputs;
    int n_warnings, cap_warnings;
    char **warnings;         /* sentences for the user, each naming the node */
    int64_t dim_default;     /* value given to a symbolic dimension */
    int n_syms;              /* named symbolic dimensions of the graph inputs ('seq') */
    char *sym_names[MD_MAX_SYMS];
    int64_t sym_values[MD_MAX_SYMS]; /* the value each was given */
    int sym_given[MD_MAX_SYMS];      /* 1: by md_model_opts.dims, 0: dim_default */
    char sig[33];            /* hex SHA-256 of the file's structure (below), weights left out */
    int n_file_nodes;        /* nodes the file has (rewrites append more) */
};
typedef struct md_graph md_graph;

/* Builders (md_graph.c).  Return AT_OK or AT_ENOMEM. */
at_err md__graph_new(const char *name, md_graph **out);
void md__graph_free(md_graph *g);
/* The tensor named 'name', created (shape unknown) when it does not exist; -1 on ENOMEM. */
int md__tensor_get(md_graph *g, const char *name);
int md__tensor_find(const md_graph *g, const char *name);
/* A new constant tensor holding a copy of 'data' (n_elems elements of 'dt'); -1 on ENOMEM. */
int md__tensor_const(md_graph *g, const char *name, at_dtype dt, int rank, const int64_t *shape,
                     const void *data);
int md__node_add(md_graph *g, const char *name, const char *op_type, const char *domain);
at_err md__node_io(md_graph *g, int node, int n_in, const int *in, int n_out, const int *out);
at_err md__warn(md_graph *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

const md_attr *md__attr(const md_node *n, const char *name);
int64_t md__attr_i(const md_node *n, const char *name, int64_t dflt);
double md__attr_f(const md_node *n, const char *name, double dflt);
const char *md__attr_s(const md_node *n, const char *name, const char *dflt);
/* INTS attribute into out[max]; returns the count, or -1 when absent (or longer than max). */
int md__attr_ints(const md_node *n, const char *name, int64_t *out, int max);

/* Decode ONNX bytes (md_onnx.c).  On AT_OK the caller owns *out (md__graph_free).  Errors
** (AT_ECORRUPT undecodable, AT_EUNSUPPORTED an unknown opset or external data, AT_EINVAL a
** graph that contradicts itself, AT_ENOMEM) come with a sentence naming the file and,
** where there is one, the node or tensor.  A symbolic dimension of a graph input takes the
** value opts->dims gives its name, else opts->dim_default (1 when opts is NULL); a name in
** opts->dims that no input has is an error (AT_EINVAL). */
at_err md__onnx_decode(const void *bytes, size_t n, const char *name, const md_model_opts *opts,
                       md_graph **out, char *errmsg, size_t errmsg_size);

/* Parameters of a Conv node as the library's conv2d takes them (md_infer.c); AT_OK, or
** AT_EUNSUPPORTED with the reason in why[]. */
typedef struct md_conv_params {
    int64_t N, C, H, W, K, R, S, sh, sw, ph, pw, dh, dw, groups, OH, OW;
} md_conv_params;
at_err md__conv_params(const md_graph *g, const md_node *n, md_conv_params *p, char *why,
                       size_t why_size);

/* Parameters of a MaxPool/AveragePool node as max_pool2d/avg_pool2d take them. */
typedef struct md_pool_params {
    int64_t N, C, H, W, kh, kw, sh, sw, ph, pw, OH, OW;
} md_pool_params;
at_err md__pool_params(const md_graph *g, const md_node *n, md_pool_params *p, char *why,
                       size_t why_size);

/* The axes of a ReduceX, Squeeze or Unsqueeze node (attribute or, from the opsets that moved
** them, its second input), normalised to [0, rank); returns the count, 0 for "none given",
** -1 when they are not constant or out of range. */
int md__node_axes(const md_graph *g, const md_node *n, int rank, int64_t *axes, int max);

/* Where a Slice node's output comes from in its input x: element i of the output (per
** dimension d) is input element lo[d] + i*step[d]; out[] gets the output shape.  Also the
** parts of a Split (output k) as slices.  AT_EUNSUPPORTED with why[] for non-constant or
** bad parameters. */
at_err md__slice_params(const md_graph *g, const md_node *n, const md_tensor *x, int64_t *lo,
                        int64_t *step, int64_t *out, char *why, size_t why_size);
at_err md__split_params(const md_graph *g, const md_node *n, const md_tensor *x, int k,
                        int64_t *lo, int64_t *step, int64_t *out, char *why, size_t why_size);
/* Copy the region of src (shape x) that lo/step/out describe into dst (esz-byte elements). */
void md__copy_region(void *dst, const void *src, const md_tensor *x, const int64_t *lo,
                     const int64_t *step, const int64_t *out, int esz);

/* Stages of md__graph_prepare, in this order (md_infer.c, md_rewrite.c). */
at_err md__infer(md_graph *g, char *errmsg, size_t errmsg_size);
at_err md__rewrite(md_graph *g, char *errmsg, size_t errmsg_size);
void md__count_consumers(md_graph *g);
/* Put node order[i] at position i (a permutation), producers and merged lists remapped;
** AT_OK or AT_ENOMEM. */
at_err md__reorder_nodes(md_graph *g, const int *order);
/* Put the nodes in topological order (stable); AT_EINVAL naming a node on a cycle. */
at_err md__topo_sort(md_graph *g, char *errmsg, size_t errmsg_size);
/* Mark node 'node' unsupported with a reason (also a warning naming it); AT_EUNSUPPORTED,
** or AT_ENOMEM. */
at_err md__unsupported(md_graph *g, int node, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Set a tensor's shape; AT_EUNSUPPORTED for an empty or too large tensor (reason in why). */
at_err md__set_shape(md_graph *g, int t, at_dtype dt, int rank, const int64_t *shape,
                     char *why, size_t why_size);

/* Checks and rewrites (md_graph.c, see the invariants above).  Unsupported operators are
** warnings; a graph that cannot be made sense of at all is an error. */
at_err md__graph_prepare(md_graph *g, char *errmsg, size_t errmsg_size);
/* Set every tensor's 'alias' from the live alias nodes (Reshape, Identity, ...), in
** topological order. */
void md__resolve_aliases(md_graph *g);

/* The layout plan (md_layout.c), after md__graph_prepare: with MD_LAYOUT_NHWC, the
** convolutions, pools and the elementwise nodes around them compute in NHWC (n->nhwc):
** their 4-d activations get new tensors in [N, H, W, C] order, a Conv's weight a copy in
** [R, S, C/g, K], constants that broadcast against them a copy in the same order, and a
** Transpose node (an Identity when only dimensions of size 1 move) converts where an NCHW
** producer or consumer meets them (graph inputs and outputs, a Flatten before a dense).
** AT_OK or AT_ENOMEM. */
at_err md__plan_layout(md_graph *g, int layout, char *errmsg, size_t errmsg_size);

/* Winograd (md_winograd.c), after the layout plan: the m of F(m x m, 3 x 3) a Conv node
** would use (2 or 4), or 0 when it is not eligible (NHWC, 3x3, stride 1, dilation 1, pad 1,
** one group, a constant weight, C and K >= 8); and the rewrite of the eligible Conv nodes
** named in sel[n_sel] (every one when n_sel < 0) into the three Winograd nodes, *n_done of
** them.  AT_OK or AT_ENOMEM. */
int md__winograd_m(const md_graph *g, int node);
at_err md__plan_winograd(md_graph *g, int n_sel, const char *const *sel, int *n_done,
                         char *errmsg, size_t errmsg_size);

/* "[1, 64, 56, 56]" into out[size]. */
void md__shape_str(const int64_t *shape, int rank, char *out, size_t size);

/* ---- groups, tasks and the plan (md_extract.c) ------------------------------------------ */

/* One step of the whole-model execution, in topological order. */
typedef enum {
    MD_STEP_TASK, /* a task's kernel on the buffers of its arguments */
    MD_STEP_COPY  /* a data-movement node (Transpose, Concat, Slice, Gather, Split) */
} md_step_kind;

typedef struct md_step {
    md_step_kind kind;
    int node;          /* COPY: the node; TASK: the group's last node */
    int task;          /* TASK: index in the task list */
    int n_args;        /* TASK: graph tensor of each DAG argument (inputs, then the output) */
    int *args;
} md_step;

struct md_model {
    md_graph *g;
    md_task_list *tasks;
    int n_steps, cap_steps;
    md_step *steps;
    int n_unsupported;       /* nodes that could not be turned into work */
    int n_winograd, n_winograd_eligible; /* convolutions run as Winograd, and could be */
    int n_alt_tasks;         /* the last tasks of the list: Winograd alternatives no step
                             ** runs (MD_WINOGRAD_AUTO without costs) */
};

/* Build the groups, tasks and steps of a prepared graph into 'm'. */
at_err md__extract(md_model *m, char *errmsg, size_t errmsg_size);

/* ---- the buffer plan of a run (md_plan.c) ---- */

typedef enum {
    MD_BUF_ARENA, /* in the arena, at 'offset', while live */
    MD_BUF_INPUT, /* a graph input or a weight without values: in the arena, always live */
    MD_BUF_CONST  /* a constant: in the constants' block at 'offset' */
} md_buf_kind;

typedef struct md_plan_buf {
    int root;            /* the graph tensor (a root: not an alias) */
    md_buf_kind kind;
    int64_t bytes;       /* rounded up to 64 */
    int64_t offset;      /* 64-byte aligned, in the arena or the constants' block */
    int first, last;     /* steps that use it (-1: before the first; n_steps: after the last) */
} md_plan_buf;

typedef struct md_plan {
    int n_bufs;
    md_plan_buf *bufs;
    int *buf_of;         /* per graph tensor: its buffer (aliases too), or -1 if no step uses it */
    int64_t arena_bytes, const_bytes;
} md_plan;

/* Plan the buffers of the model's steps (see md_plan.c); AT_OK or AT_ENOMEM. */
at_err md__plan_make(const md_model *m, md_plan *p);
void md__plan_free(md_plan *p);
/* The graph tensors a step reads (first *n_in) and writes (*n_out, TASK steps; a COPY
** step's outputs are its node's). */
const int *md__step_tensors(const md_model *m, const md_step *s, int *n_in, int *n_out);

/* The C prefix of a library file: "libmodel_kernels.so" -> "model_kernels" (letters,
** digits and '_' only; md_export.c). */
void md__lib_prefix(const char *path, char *out, size_t size);

/* The root buffer of tensor t (following 'alias'). */
static inline int md__root(const md_graph *g, int t)
{
    return g->tensors[t].alias >= 0 ? g->tensors[t].alias : t;
}

#endif /* MD_INT_H */
