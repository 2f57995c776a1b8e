/* models/models.h -- whole models (prefix md_): ONNX import, tasks, running and export
** (md_onnx.c, md_graph.c, md_extract.c, md_tasks.c, md_run.c, md_export.c; docs/models.md).
** The private header is md_int.h; tuner/ tunes the tasks and holds the command line.
**
**   md_model *m;  md_model_load("resnet18.onnx", NULL, &m, err, sizeof err);
**   const md_task_list *tl = md_model_tasks(m);      tasks with weights, FLOPs, DAGs, keys
**   md_tasks_write_jsonl(tl, f);                      tune them elsewhere, without the model
**   md_model_run(m, &(md_run_opts){.store = st}, &rep, err, sizeof err);   tuned vs naive
**   md_export_lib(tl, &(md_export_opts){.store = st, .target = T, .out_path = P}, ...);
**   md_model_free(m);
**
** A model is cut into tasks: each anchor operator (a convolution, a dense layer, a pool, a
** softmax, a layer norm, a reduction) with the elementwise operators that consume it, or a
** chain of elementwise operators on its own.  Identical tasks (same workload key) are
** listed once with a weight: the number of times the model runs them.  An operator this
** code does not support is a warning naming its node; the rest of the model still gives
** tasks (but cannot run).  Nothing here is thread-safe across calls on one object. */
#ifndef MD_MODELS_H
#define MD_MODELS_H

#include <stdio.h>

#include "common/common.h"
#include "kernels/kernels.h"
#include "records/records.h"
#include "schedule_space/schedule_space.h"

/* One occurrence of a task in the model: the ONNX nodes it was made from. */
typedef struct md_task_use {
    int n_nodes;
    char **nodes;          /* node names, anchor first */
} md_task_use;

/* A task, as a scheduler consumes it.  Strings belong to the task list. */
typedef struct md_task {
    char key[33];          /* workload key (hex of SHA-256 of the canonical DAG) */
    char *name;            /* what is fused: "conv2d_bias_add_relu" */
    char *desc;            /* shapes: "conv2d:N=1,C=64,...,relu=0 + add[64x56x56] + relu" */
    char *tag;             /* similarity group for the task scheduler: the anchor's kind
                           ** and int(log_1.618(flops + 1)), e.g. "conv2d:44" */
    char *dag_text;        /* the DAG as ss_dag_print writes it (parses to 'key') */
    ss_dag *dag;           /* that DAG, parsed; a reference the list holds */
    double flops;          /* floating-point operations of one run */
    int weight;            /* how many times one run of the model runs it (>= 1) */
    int tunable;           /* 1 if it has a reduction (Ansor tunes only those); 0 for
                           ** elementwise-only tasks, which keep their default schedule */
    int n_op_types;
    char **op_types;       /* ONNX operator types fused into it, anchor first */
    int n_uses;
    md_task_use *uses;     /* where it occurs (n_uses == weight for a model's tasks) */
} md_task;

typedef struct md_task_list {
    char *model;           /* the file the tasks came from */
    int n_tasks, cap_tasks;
    md_task *tasks;        /* in order of first use in the model */
    at_arena arena;        /* the strings */
} md_task_list;

/* Sum of flops * weight: the work of one run of the model (what the tasks cover). */
double md_task_list_flops(const md_task_list *tl);
void md_task_list_free(md_task_list *tl); /* NULL is fine */

/* Write the tasks as JSON lines, one task per line (docs/models.md); AT_EIO on a write
** error. */
at_err md_tasks_write_jsonl(const md_task_list *tl, FILE *f);
/* Read what md_tasks_write_jsonl wrote.  Every line's DAG is parsed and must give the
** line's workload key.  On AT_OK the caller owns *out (md_task_list_free); AT_EPARSE with
** "name:line:col: what" for a malformed line, AT_EINVAL for a line that contradicts itself
** (key, FLOPs), AT_EVERSION for a newer format. */
at_err md_tasks_read_jsonl(const char *name, const char *text, size_t n, md_task_list **out,
                           char *errmsg, size_t errmsg_size);

typedef struct md_model md_model; /* opaque: the graph, its tasks and how to run them */

#define MD_LAYOUT_NHWC 0 /* convolutions in channels-last (the default) */
#define MD_LAYOUT_NCHW 1 /* the ONNX file's own layout everywhere */

#define MD_WINOGRAD_AUTO 0 /* Winograd where it measured faster (the default, see below) */
#define MD_WINOGRAD_OFF 1  /* direct convolutions only */
#define MD_WINOGRAD_ON 2   /* every eligible convolution as Winograd */

/* The measured cost of a task, for the Winograd choice: 1 and *seconds when the records
** have one, else 0. */
typedef int (*md_task_cost_fn)(void *ctx, const md_task *t, double *seconds);

/* The value of a named symbolic dimension of the graph inputs ('seq' in [1, 'seq']). */
typedef struct md_dim {
    const char *name;
    int64_t value;         /* >= 1 */
} md_dim;

typedef struct md_model_opts {
    int64_t dim_default;   /* the value of a symbolic dimension (a batch 'N'); 0 means 1 */
    int n_dims;            /* values of named symbolic dimensions (they override dim_default;
                           ** a name no graph input has is an error) */
    const md_dim *dims;
    int layout;            /* MD_LAYOUT_NHWC (the default, 0) or MD_LAYOUT_NCHW: the layout
                           ** convolutions and the operators around them compute in (the
                           ** tasks' DAGs and keys depend on it; docs/models.md) */
    int winograd;          /* MD_WINOGRAD_AUTO (0), _OFF or _ON: 3x3 stride-1 convolutions
                           ** (NHWC) as Winograd F(m x m, 3 x 3) tasks.  AUTO with 'cost':
                           ** each such convolution is Winograd when its three tasks' costs
                           ** sum below its direct task's; AUTO without 'cost' (tuning, the
                           ** task list): the model runs direct convolutions and the task
                           ** list has the Winograd tasks too, after the model's own */
    md_task_cost_fn cost;  /* AUTO's measurements (NULL: none) */
    void *cost_ctx;
} md_model_opts;

/* Load an ONNX model: decode (protobuf-c, Debian's onnx.proto), check, fold constants
** (BatchNormalization into the convolution before it), infer shapes and extract the tasks.
** 'opts' may be NULL.  On AT_OK the caller owns *out (md_model_free); unsupported operators
** are warnings (md_model_warning).  Errors come with a sentence naming the file and the
** node or tensor: AT_EIO (cannot read), AT_ECORRUPT (not decodable: truncated or not
** ONNX), AT_EUNSUPPORTED (an opset this code does not know, external data), AT_EINVAL (a
** graph that contradicts itself), AT_ENOMEM.  Blocks on file I/O only. */
at_err md_model_load(const char *path, const md_model_opts *opts, md_model **out,
                     char *errmsg, size_t errmsg_size);
/* The same from bytes in memory; 'name' names them in messages. */
at_err md_model_load_mem(const void *bytes, size_t n, const char *name,
                         const md_model_opts *opts, md_model **out, char *errmsg,
                         size_t errmsg_size);
void md_model_free(md_model *m); /* NULL is fine */

const md_task_list *md_model_tasks(const md_model *m);
/* One list of the tasks of several models (a model's buckets), each workload key once with
** the weights of its uses added.  On AT_OK the caller owns *out (md_task_list_free). */
at_err md_task_list_union(const md_model *const *ms, int n, md_task_list **out);
/* The named symbolic dimensions of the graph inputs ('seq'), in the order the file first
** names them, and the value each was loaded with. */
int md_model_n_dims(const md_model *m);
const char *md_model_dim_name(const md_model *m, int i);
int64_t md_model_dim_value(const md_model *m, int i);
/* The hex SHA-256 (32 characters) of the file's structure: inputs, outputs, operators and
** the names and shapes of the weights, not their values.  What the records store keys a
** model's buckets on (rec_buckets_put): a model exported again with other weights keeps it. */
const char *md_model_sig(const md_model *m);
int md_model_n_warnings(const md_model *m);
const char *md_model_warning(const md_model *m, int i);

typedef struct md_model_info {
    int64_t opset, ir_version;
    const char *producer;  /* "" when the file names none */
    int n_nodes;           /* nodes in the file */
    int n_live;            /* nodes left after folding and dead-code removal */
    int n_unsupported;     /* nodes that give no work: the model has tasks but cannot run */
    int n_inputs, n_outputs, n_steps;
    int n_winograd;        /* convolutions the steps run as Winograd */
    int n_winograd_eligible; /* convolutions that could be */
    int n_alt_tasks;       /* the last tasks of the list are alternatives no step runs (the
                           ** Winograd tasks of a model loaded for tuning) */
} md_model_info;
void md_model_get_info(const md_model *m, md_model_info *out);

/* Choose the schedule of task 't' for 'target': the best successful record of the store
** for the task's workload key, target text and device key (NULL: any device; the fastest
** wins) whose state replays (md_replay_check), else the naive state.  'st' NULL: always
** naive.  On AT_OK the caller owns *out (ss_state_free); *cost_s (may be NULL) is the
** record's mean cost, 0 for the naive state.  AT_ENOMEM, AT_EIO from the store. */
at_err md_task_schedule(const md_task *t, rec_store *st, const char *target,
                        const char *device_key, ss_state **out, double *cost_s, char *errmsg,
                        size_t errmsg_size);

/* Running a whole model here (md_run.c). */
/* Costs for the Winograd choice (md_model_opts.cost): from a records store (the mean of
** the record md_task_schedule picks; a task without one has no cost), or, for a library
** made by md_export_lib, 1 with cost 0 for each task it has a kernel of (so the choice is
** the one the library was made with). */
typedef struct md_store_cost_ctx {
    rec_store *store;
    const char *target;     /* target text as records have it (kn_target.text) */
    const char *device_key; /* NULL: any */
} md_store_cost_ctx;
int md_store_cost(void *ctx, const md_task *t, double *seconds);
typedef struct md_lib_keys md_lib_keys;
at_err md_lib_keys_open(const char *path, md_lib_keys **out, char *errmsg, size_t errmsg_size);
int md_lib_has_task(void *ctx, const md_task *t, double *seconds);
/* The buckets of symbolic dimension 'name' that a library's model was made for (ascending,
** at most 'max' into values[]); *n = 0 when it has no such dimension. */
void md_lib_buckets(const md_lib_keys *k, const char *name, int64_t *values, int max, int *n);
void md_lib_keys_close(md_lib_keys *k);

typedef struct md_run_opts {
    rec_store *store;       /* best records; NULL: every task runs its naive kernel */
    const char *target;     /* records of this target; NULL: the host ("llvm -mcpu=native");
                            ** it must be a target whose code runs on this machine */
    const char *device_key; /* NULL: any device key */
    const char *lib_path;   /* run the kernels of a library made by md_export_lib instead of
                            ** building them (the library's tasks are matched by key) */
    int n_threads;          /* 0: the online CPUs */
    uint64_t seed;          /* inputs and weights without values are filled from it */
    int repeat;             /* > 0: time that many runs of the whole model (tuned and naive) */
    int no_check;           /* skip the naive run and the comparison */
    const char *dump_dir;   /* write each graph input and output there, raw (float32; int64
                            ** for integer inputs): input_<i>.bin, output_<i>.bin, the
                            ** graph's order; it is made when missing */
    const char *inputs_dir; /* read each graph input from there (input_<i>.bin, raw, in the
                            ** input's type: float32, or int64 for integer inputs; what
                            ** dump_dir writes) instead of random values */
    FILE *profile;          /* print each step's time and share of the run there ('repeat'
                            ** runs, 10 when 0) */
    double *latencies_s;    /* NULL, or room for 'repeat' values: each timed run's seconds
                            ** with the tuned kernels, in the order they ran */
    const md_model *exact;  /* NULL, or the same file loaded at the symbolic dimensions asked
                            ** for, each at most the model's (a bucket's, docs/models.md):
                            ** the inputs are made (or read, dumped) at exact's shapes and
                            ** padded with zeros to the model's, the tuned kernels run the
                            ** model, its outputs are cut back to exact's shapes, and the naive
                            ** reference runs 'exact' itself */
} md_run_opts;

/* The naive kernels (the check's reference) are timed at most this many runs. */
#define MD_RUN_NAIVE_REPEAT 5

#define MD_RUN_MAX_OUTPUTS 16

typedef struct md_run_report {
    int n_tasks, n_tuned, n_naive;   /* kernels built (or found in the library) */
    int n_rewritten;                /* chosen kernels that take a weight in a rewritten layout */
    int n_outputs;
    struct {
        char name[96];
        int64_t n_elems;
        double rel_err;             /* kn_rt_rel_err of the tuned run against the naive one */
        double checksum;            /* sum of the tuned output's elements */
    } outputs[MD_RUN_MAX_OUTPUTS];
    double max_rel_err;
    double build_s;                 /* seconds spent building kernels */
    double latency_s;               /* median of 'repeat' runs; 0 when not timed */
    double naive_latency_s;         /* median of min(repeat, MD_RUN_NAIVE_REPEAT) naive runs */
} md_run_report;

/* Run the model once with the tuned kernels (naive ones for tasks without records) and,
** unless 'no_check', once with every task's naive kernel, and compare the outputs (the
** report has the relative error of each).  Inputs and weights without values are filled
** with kn_rt_fill from 'seed' (stream = the tensor's index among them).  AT_OK when the
** runs happened (whatever the error; the caller compares it with 1e-4);
** AT_EUNSUPPORTED when the model has operators that cannot run (named), AT_ECODEGEN,
** AT_ELOAD, AT_EIO (a kernel failed), AT_EINVAL (a target that cannot run here, a library
** that does not fit the model), AT_ENOMEM. */
at_err md_model_run(const md_model *m, const md_run_opts *o, md_run_report *rep,
                    char *errmsg, size_t errmsg_size);

/* The shared library of the tuned kernels (md_export.c). */
typedef struct md_export_opts {
    rec_store *store;        /* best records; NULL: every task gets its naive schedule */
    const char *target;      /* "llvm -mtriple=aarch64-linux-android ..."; NULL: the host */
    const char *device_key;  /* NULL: any */
    const char *out_path;    /* libmodel_kernels.so */
    const char *header_path; /* NULL: out_path with ".h" for ".so" */
    const char *prefix;      /* C names' prefix; NULL: from the file name ("model_kernels") */
    int max_threads;         /* threads the Linux runtime may start (0: the target's cores) */
    int keep_temp;           /* leave the objects in a temporary folder (printed) */
    const md_model *model;   /* the model of 'tl' (md_model_tasks): the library also runs the
                             ** whole model (P_model_run), its weights inside; NULL for a task
                             ** list alone */
    const md_model *const *buckets; /* n_buckets > 0, in place of 'model': the model loaded at
                             ** each value of one symbolic dimension, ascending; the library
                             ** runs any value up to the largest on the smallest bucket that
                             ** holds it (P_model_set_dim, padded); 'tl' has every bucket's
                             ** tasks (md_task_list_union) */
    int n_buckets;
} md_export_opts;

typedef struct md_export_report {
    int n_tasks, n_tuned, n_naive;
    int64_t arena_bytes;     /* with a model: its activations' arena */
    int64_t weight_bytes;    /* ... and the weights the library holds */
    int n_weight_uses;       /* ... and the layers whose kernel reads a weight in a layout
                             ** of its own (the transforms P_model_init makes) */
    char prefix[96];         /* of the C names */
    char link_cmd[512];      /* the linker command that ran */
    char temp_dir[256];      /* with keep_temp */
    double build_s;
    int n_buckets;           /* ... its buckets (0: one size) */
} md_export_report;

/* Build every task's best kernel (naive when there is no record) for 'target' with a C
** entry point each, link them with a small runtime into one shared library and write its
** header (docs/models.md has the calling convention).  x86-64 and aarch64 Linux are linked
** with the target's gcc driver (libc, libm, pthreads), aarch64 Android with ld.lld-16 and
** no libc at all (serial only).  AT_EUNSUPPORTED for a target this cannot link (a missing
** linker is named), AT_ECODEGEN, AT_EIO, AT_EINVAL, AT_ENOMEM. */
at_err md_export_lib(const md_task_list *tl, const md_export_opts *o, md_export_report *rep,
                     char *errmsg, size_t errmsg_size);

/* The replay check the command uses for records ('tuner best', 'tuner db check'), shaped
** as records.h's rec_replay_fn: AT_OK if 'state_json' is a schedule state that replays on
** the DAG of 'dag_text' (ss_state_from_json), otherwise AT_ESCHED with the reason in
** errmsg[0..n) (AT_ENOMEM when memory runs out).  The last parsed DAG is cached per
** thread; calling it with NULL texts releases the cache. */
at_err md_replay_check(void *ctx, const char *dag_text, const char *state_json, char *errmsg,
                       size_t n);
/* As records.h's rec_task_fn: the workload key and FLOP count of the DAG of 'dag_text'
** (ss_dag_parse), the same cache; AT_ESCHED with the reason when it does not parse. */
at_err md_task_check(void *ctx, const char *dag_text, char *key, double *flops, char *errmsg,
                     size_t n);

#endif /* MD_MODELS_H */
