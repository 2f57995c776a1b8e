/* tuner/tuner.h -- the user-facing 'tuner' command (prefix tn_).
**
**   int main(int argc, char **argv) { return tn_cli_main(argc, argv); }
**
** 'tuner SUBCOMMAND [flags] [args]' runs one subcommand from the table in tn_cli.c
** (docs/cli.md lists them); 'tuner --help' and 'tuner SUBCOMMAND --help' print usage.
** The main tuning run ('tuner [flags] SPEC...') joins the table later. */
#ifndef TN_TUNER_H
#define TN_TUNER_H

#include <stddef.h>

#include "common/common.h"

#define TN_VERSION "0.1.0-dev"

/* Exit statuses of the command, the same for every subcommand. */
#define TN_EXIT_OK 0    /* done */
#define TN_EXIT_FAIL 1  /* the work failed (message on stderr), or a check found damage */
#define TN_EXIT_USAGE 2 /* bad command line: unknown subcommand or flag, missing value */
#define TN_EXIT_EMPTY 3 /* a query ran and found nothing (the notes say why) */
#define TN_EXIT_INTERRUPTED 130 /* a tuning run stopped by SIGINT/SIGTERM (all recorded) */

/* Run the command line; returns the exit status.  Writes results to stdout, messages to
** stderr.  Not reentrant across threads (it parses flags into static tables). */
int tn_cli_main(int argc, char **argv);

/* The replay check the command uses for records ('tuner best', 'tuner db check'), shaped
** as records.h's rec_replay_fn: AT_OK if 'state_json' is a schedule state that replays on
** the DAG of 'dag_text' (ss_state_from_json), otherwise AT_ESCHED with the reason in
** errmsg[0..n) (AT_ENOMEM when memory runs out).  The last parsed DAG is cached per
** thread; calling it with NULL texts releases the cache. */
at_err tn_replay_check(void *ctx, const char *dag_text, const char *state_json, char *errmsg,
                       size_t n);
/* As records.h's rec_task_fn: the workload key and FLOP count of the DAG of 'dag_text'
** (ss_dag_parse), the same cache; AT_ESCHED with the reason when it does not parse. */
at_err tn_task_check(void *ctx, const char *dag_text, char *key, double *flops, char *errmsg,
                     size_t n);


/* ---- measuring through the fleet (tn_fleet.c) -------------------------------------------
**
**   tn_fleet_prepare();                       first thing in main (forks the agent launcher)
**   tn_fleet *f;  tn_fleet_open(&(tn_fleet_cfg){.tracker = NULL, .store = st}, &f, ...);
**   tn_fleet_add_ref(f, ref_artifact, ref_id);            the task's naive reference
**   tn_fleet_submit(f, jobs, n);                          queued at the tracker
**   while (tn_fleet_pending(f) > 0)
**       tn_fleet_wait(f, 1000, on_result, ctx);           each result is committed first
**   tn_fleet_close(f);
**
** With 'tracker' NULL the tracker and one agent run inside this process over inproc://
** (the embedded default): the same code as a fleet, no special measuring path.  With a
** tracker, this client dials it (tcp), and after a reconnection (or a tracker restart) it
** resubmits every job that has no result yet; duplicates are harmless because the store
** keeps one row per job id.  Not thread-safe: one thread uses a tn_fleet. */

#include "common/wire.h"
#include "kernels/kernels.h"
#include "records/records.h"

typedef struct tn_fleet tn_fleet;

typedef struct tn_fleet_cfg {
    const char *tracker;        /* "host:9190" or an nng URL; NULL: embedded */
    const at_wire_key *keys;    /* the fleet key(s); NULL in embedded mode (a random key) */
    int n_keys;
    const char *device_key;     /* where jobs go; embedded default "local" */
    const char *name;           /* shown by the tracker; NULL: "tuner host:pid" */
    int priority;               /* higher first among tuners sharing a key; default 1 */
    int wait_timeout_ms;        /* give up when no agent serves the key this long (600000) */
    rec_store *store;           /* results are committed here as they arrive; may be NULL */
    int embedded_threads;       /* embedded agent: kernel threads (0: online CPUs) */
    int embedded_no_seccomp;    /* embedded agent: no seccomp filter */
} tn_fleet_cfg;

/* A job to measure and where its result goes in the records store. */
typedef struct tn_fleet_job {
    at_wire_job w;              /* id (unique, e.g. run uuid + counter), artifact, settings,
                                ** seed, reference id; copied by tn_fleet_submit */
    int64_t task_id;            /* rec_task_add id in cfg.store */
    const char *state;          /* the schedule's JSON text (stored with the result) */
    int64_t run_id;             /* rec_run_begin id, or 0 */
    int64_t trial;              /* trial index, or -1 */
} tn_fleet_job;

/* Called for each result after it was committed to the store (if any).  'job' and 'r' are
** valid during the call. */
typedef void (*tn_fleet_result_fn)(void *ctx, const tn_fleet_job *job, const at_wire_result *r);

/* Fork the embedded agent's launcher now, while the process has one thread (optional; a
** later tn_fleet_open does it otherwise, which a sanitizer build may not survive). */
void tn_fleet_prepare(void);

/* Connect (or start the embedded tracker and agent).  On AT_OK the caller owns *out
** (tn_fleet_close).  AT_EINVAL for a bad configuration, AT_EIO. */
at_err tn_fleet_open(const tn_fleet_cfg *cfg, tn_fleet **out, char *errmsg, size_t n);
void tn_fleet_close(tn_fleet *f); /* cancels what is pending; NULL is fine */

/* Fill 'w' (and 'args', its argument array) from a built artifact; 'w' points into 'a'. */
void tn_fleet_artifact(const kn_artifact *a, at_wire_artifact *w, at_wire_arg args[64]);

/* Register a task's reference artifact (the naive schedule built for the same target);
** sets id[] (SHA-256 of its object bytes and entry) for at_wire_job.ref.  Copied. */
at_err tn_fleet_add_ref(tn_fleet *f, const kn_artifact *ref, uint8_t id[AT_WIRE_REFID_BYTES]);

/* Queue jobs (copied); they are sent by the next tn_fleet_wait (or now when connected).
** AT_EEXIST when a job id is pending already (nothing queued), AT_EINVAL, AT_ENOMEM. */
at_err tn_fleet_submit(tn_fleet *f, const tn_fleet_job *jobs, int n);

/* Send what is queued, then wait up to 'timeout_ms' for results; each one is committed to
** the store (rec_put) before 'fn' sees it.  Returns AT_OK (results or not), AT_ETIMEDOUT
** when no agent has served the key for cfg.wait_timeout_ms (the jobs stay pending: call
** tn_fleet_fail_pending or keep waiting), AT_EAUTH / AT_EVERSION when the tracker refuses
** us, AT_EIO when the store cannot commit (the result is not acknowledged, so the tracker
** sends it again). */
at_err tn_fleet_wait(tn_fleet *f, int timeout_ms, tn_fleet_result_fn fn, void *ctx);

int tn_fleet_pending(const tn_fleet *f);

/* Cancel every pending job (at the tracker) and record each as 'status' with 'text'
** (e.g. DEVICE_LOST "no agent served key pixel7 within 600 s"), calling 'fn' for each. */
at_err tn_fleet_fail_pending(tn_fleet *f, int status, const char *text, tn_fleet_result_fn fn,
                             void *ctx);

/* A line for the user: "waiting for an agent of key 'pixel7' (keys: x86 3 agents)", or
** "12 queued, 4 in flight on 3 agents". */
const char *tn_fleet_status(const tn_fleet *f);

typedef struct tn_fleet_stats {
    int64_t n_submitted, n_results, n_duplicates, n_resubmitted, n_sessions;
} tn_fleet_stats;
void tn_fleet_get_stats(const tn_fleet *f, tn_fleet_stats *out);

/* The embedded tracker's TCP-free address ("inproc://...") or NULL when remote. */
const char *tn_fleet_embedded_url(const tn_fleet *f);


/* ---- building candidates in worker processes (tn_build.c) -----------------------------
**
**   tn_builder *b;  tn_builder_new(2, 60000, NULL, &b, err, sizeof err);
**   tn_builder_submit(b, &(tn_build_req){id, target, dag_text, state_json, NULL});
**   while (tn_builder_pending(b)) tn_builder_poll(b, 100, on_built, ctx);
**   tn_builder_free(b);
**
** LLVM runs in worker processes (this program started again as "tuner __build-worker"),
** so a crashing or runaway compile is a recorded build error, never a dead tuner.  With 0
** workers builds run in this process.  One thread uses a builder. */
typedef struct tn_builder tn_builder;

typedef struct tn_build_req {
    int64_t id;             /* the caller's: handed back with the result */
    const char *target;     /* target string */
    const char *dag_text;   /* the task's DAG (docs/dag_format.md) */
    const char *state_json; /* the schedule */
    const char *entry;      /* entry symbol; NULL: "at_kernel" */
} tn_build_req;

typedef struct tn_build_res {
    int64_t id;
    at_err err;            /* AT_OK; AT_ETIMEDOUT (build timeout); AT_ECODEGEN (worker died)... */
    int timed_out;
    char errmsg[512];
    kn_artifact *art;      /* on AT_OK; the callback takes ownership */
    double build_s;
} tn_build_res;

typedef void (*tn_build_fn)(void *ctx, const tn_build_res *r);

/* Start n_workers workers running 'exe' (NULL: this program).  On AT_OK the caller owns
** *out (tn_builder_free, which kills the workers). */
at_err tn_builder_new(int n_workers, int timeout_ms, const char *exe, tn_builder **out,
                      char *errmsg, size_t errmsg_size);
void tn_builder_free(tn_builder *b);
/* Queue a build (the strings are copied). */
at_err tn_builder_submit(tn_builder *b, const tn_build_req *r);
/* Requests queued, building or built but not yet delivered. */
int tn_builder_pending(const tn_builder *b);
/* Start queued builds on idle workers, wait up to timeout_ms for results and call fn for
** each finished one (it owns r->art).  Kills and replaces a worker past the timeout. */
at_err tn_builder_poll(tn_builder *b, int timeout_ms, tn_build_fn fn, void *ctx);
void tn_builder_stats(const tn_builder *b, int64_t *n_built, int64_t *n_timeouts,
                      int64_t *n_crashes);
/* The worker's main loop ("tuner __build-worker"): requests on stdin, results on stdout. */
int tn_build_worker_main(void);

/* ---- whole models: ONNX import, tasks, running and export -----------------------------
** (tn_onnx.c, tn_graph.c, tn_extract.c, tn_tasks.c, tn_run.c, tn_export.c; docs/models.md)
**
**   tn_model *m;  tn_model_load("resnet18.onnx", NULL, &m, err, sizeof err);
**   const tn_task_list *tl = tn_model_tasks(m);      tasks with weights, FLOPs, DAGs, keys
**   tn_tasks_write_jsonl(tl, f);                      tune them elsewhere, without the model
**   tn_model_run(m, &(tn_run_opts){.store = st}, &rep, err, sizeof err);   tuned vs naive
**   tn_export_lib(tl, &(tn_export_opts){.store = st, .target = T, .out_path = P}, ...);
**   tn_model_free(m);
**
** A model is cut into tasks: each anchor operator (a convolution, a dense layer, a pool, a
** softmax, a layer norm, a reduction) with the elementwise operators that consume it, or a
** chain of elementwise operators on its own.  Identical tasks (same workload key) are
** listed once with a weight: the number of times the model runs them.  An operator this
** code does not support is a warning naming its node; the rest of the model still gives
** tasks (but cannot run).  Nothing here is thread-safe across calls on one object. */

/* One occurrence of a task in the model: the ONNX nodes it was made from. */
typedef struct tn_task_use {
    int n_nodes;
    char **nodes;          /* node names, anchor first */
} tn_task_use;

/* A task, as a scheduler consumes it.  Strings belong to the task list. */
typedef struct tn_task {
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
    tn_task_use *uses;     /* where it occurs (n_uses == weight for a model's tasks) */
} tn_task;

typedef struct tn_task_list {
    char *model;           /* the file the tasks came from */
    int n_tasks, cap_tasks;
    tn_task *tasks;        /* in order of first use in the model */
    at_arena arena;        /* the strings */
} tn_task_list;

/* Sum of flops * weight: the work of one run of the model (what the tasks cover). */
double tn_task_list_flops(const tn_task_list *tl);
void tn_task_list_free(tn_task_list *tl); /* NULL is fine */

/* Write the tasks as JSON lines, one task per line (docs/models.md); AT_EIO on a write
** error. */
at_err tn_tasks_write_jsonl(const tn_task_list *tl, FILE *f);
/* Read what tn_tasks_write_jsonl wrote.  Every line's DAG is parsed and must give the
** line's workload key.  On AT_OK the caller owns *out (tn_task_list_free); AT_EPARSE with
** "name:line:col: what" for a malformed line, AT_EINVAL for a line that contradicts itself
** (key, FLOPs), AT_EVERSION for a newer format. */
at_err tn_tasks_read_jsonl(const char *name, const char *text, size_t n, tn_task_list **out,
                           char *errmsg, size_t errmsg_size);

typedef struct tn_model tn_model; /* opaque: the graph, its tasks and how to run them */

#define TN_LAYOUT_NHWC 0 /* convolutions in channels-last (the default) */
#define TN_LAYOUT_NCHW 1 /* the ONNX file's own layout everywhere */

#define TN_WINOGRAD_AUTO 0 /* Winograd where it measured faster (the default, see below) */
#define TN_WINOGRAD_OFF 1  /* direct convolutions only */
#define TN_WINOGRAD_ON 2   /* every eligible convolution as Winograd */

/* The measured cost of a task, for the Winograd choice: 1 and *seconds when the records
** have one, else 0. */
typedef int (*tn_task_cost_fn)(void *ctx, const tn_task *t, double *seconds);

typedef struct tn_model_opts {
    int64_t dim_default;   /* the value of a symbolic dimension (a batch 'N'); 0 means 1 */
    int layout;            /* TN_LAYOUT_NHWC (the default, 0) or TN_LAYOUT_NCHW: the layout
                           ** convolutions and the operators around them compute in (the
                           ** tasks' DAGs and keys depend on it; docs/models.md) */
    int winograd;          /* TN_WINOGRAD_AUTO (0), _OFF or _ON: 3x3 stride-1 convolutions
                           ** (NHWC) as Winograd F(m x m, 3 x 3) tasks.  AUTO with 'cost':
                           ** each such convolution is Winograd when its three tasks' costs
                           ** sum below its direct task's; AUTO without 'cost' (tuning, the
                           ** task list): the model runs direct convolutions and the task
                           ** list has the Winograd tasks too, after the model's own */
    tn_task_cost_fn cost;  /* AUTO's measurements (NULL: none) */
    void *cost_ctx;
} tn_model_opts;

/* Load an ONNX model: decode (protobuf-c, Debian's onnx.proto), check, fold constants
** (BatchNormalization into the convolution before it), infer shapes and extract the tasks.
** 'opts' may be NULL.  On AT_OK the caller owns *out (tn_model_free); unsupported operators
** are warnings (tn_model_warning).  Errors come with a sentence naming the file and the
** node or tensor: AT_EIO (cannot read), AT_ECORRUPT (not decodable: truncated or not
** ONNX), AT_EUNSUPPORTED (an opset this code does not know, external data), AT_EINVAL (a
** graph that contradicts itself), AT_ENOMEM.  Blocks on file I/O only. */
at_err tn_model_load(const char *path, const tn_model_opts *opts, tn_model **out,
                     char *errmsg, size_t errmsg_size);
/* The same from bytes in memory; 'name' names them in messages. */
at_err tn_model_load_mem(const void *bytes, size_t n, const char *name,
                         const tn_model_opts *opts, tn_model **out, char *errmsg,
                         size_t errmsg_size);
void tn_model_free(tn_model *m); /* NULL is fine */

const tn_task_list *tn_model_tasks(const tn_model *m);
int tn_model_n_warnings(const tn_model *m);
const char *tn_model_warning(const tn_model *m, int i);

typedef struct tn_model_info {
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
} tn_model_info;
void tn_model_get_info(const tn_model *m, tn_model_info *out);

/* Choose the schedule of task 't' for 'target': the best successful record of the store
** for the task's workload key, target text and device key (NULL: any device; the fastest
** wins) whose state replays (tn_replay_check), else the naive state.  'st' NULL: always
** naive.  On AT_OK the caller owns *out (ss_state_free); *cost_s (may be NULL) is the
** record's mean cost, 0 for the naive state.  AT_ENOMEM, AT_EIO from the store. */
at_err tn_task_schedule(const tn_task *t, rec_store *st, const char *target,
                        const char *device_key, ss_state **out, double *cost_s, char *errmsg,
                        size_t errmsg_size);

/* Running a whole model here (tn_run.c). */
/* Costs for the Winograd choice (tn_model_opts.cost): from a records store (the mean of
** the record tn_task_schedule picks; a task without one has no cost), or, for a library
** made by tn_export_lib, 1 with cost 0 for each task it has a kernel of (so the choice is
** the one the library was made with). */
typedef struct tn_store_cost_ctx {
    rec_store *store;
    const char *target;     /* target text as records have it (kn_target.text) */
    const char *device_key; /* NULL: any */
} tn_store_cost_ctx;
int tn_store_cost(void *ctx, const tn_task *t, double *seconds);
typedef struct tn_lib_keys tn_lib_keys;
at_err tn_lib_keys_open(const char *path, tn_lib_keys **out, char *errmsg, size_t errmsg_size);
int tn_lib_has_task(void *ctx, const tn_task *t, double *seconds);
void tn_lib_keys_close(tn_lib_keys *k);

typedef struct tn_run_opts {
    rec_store *store;       /* best records; NULL: every task runs its naive kernel */
    const char *target;     /* records of this target; NULL: the host ("llvm -mcpu=native");
                            ** it must be a target whose code runs on this machine */
    const char *device_key; /* NULL: any device key */
    const char *lib_path;   /* run the kernels of a library made by tn_export_lib instead of
                            ** building them (the library's tasks are matched by key) */
    int n_threads;          /* 0: the online CPUs */
    uint64_t seed;          /* inputs and weights without values are filled from it */
    int repeat;             /* > 0: time that many runs of the whole model (tuned and naive) */
    int no_check;           /* skip the naive run and the comparison */
    const char *dump_dir;   /* write each graph input and output there as raw float32
                            ** (input_<i>.bin, output_<i>.bin, the graph's order); it is made
                            ** when missing */
    FILE *profile;          /* print each step's time and share of the run there ('repeat'
                            ** runs, 10 when 0) */
} tn_run_opts;

#define TN_RUN_MAX_OUTPUTS 16

typedef struct tn_run_report {
    int n_tasks, n_tuned, n_naive;   /* kernels built (or found in the library) */
    int n_rewritten;                /* chosen kernels that take a weight in a rewritten layout */
    int n_outputs;
    struct {
        char name[96];
        int64_t n_elems;
        double rel_err;             /* kn_rt_rel_err of the tuned run against the naive one */
        double checksum;            /* sum of the tuned output's elements */
    } outputs[TN_RUN_MAX_OUTPUTS];
    double max_rel_err;
    double build_s;                 /* seconds spent building kernels */
    double latency_s, naive_latency_s; /* median of 'repeat' runs; 0 when not timed */
} tn_run_report;

/* Run the model once with the tuned kernels (naive ones for tasks without records) and,
** unless 'no_check', once with every task's naive kernel, and compare the outputs (the
** report has the relative error of each).  Inputs and weights without values are filled
** with kn_rt_fill from 'seed' (stream = the tensor's index among them).  AT_OK when the
** runs happened (whatever the error; the caller compares it with 1e-4);
** AT_EUNSUPPORTED when the model has operators that cannot run (named), AT_ECODEGEN,
** AT_ELOAD, AT_EIO (a kernel failed), AT_EINVAL (a target that cannot run here, a library
** that does not fit the model), AT_ENOMEM. */
at_err tn_model_run(const tn_model *m, const tn_run_opts *o, tn_run_report *rep,
                    char *errmsg, size_t errmsg_size);

/* The shared library of the tuned kernels (tn_export.c). */
typedef struct tn_export_opts {
    rec_store *store;        /* best records; NULL: every task gets its naive schedule */
    const char *target;      /* "llvm -mtriple=aarch64-linux-android ..."; NULL: the host */
    const char *device_key;  /* NULL: any */
    const char *out_path;    /* libmodel_kernels.so */
    const char *header_path; /* NULL: out_path with ".h" for ".so" */
    const char *prefix;      /* C names' prefix; NULL: from the file name ("model_kernels") */
    int max_threads;         /* threads the Linux runtime may start (0: the target's cores) */
    int keep_temp;           /* leave the objects in a temporary folder (printed) */
    const tn_model *model;   /* the model of 'tl' (tn_model_tasks): the library also runs the
                             ** whole model (P_model_run), its weights inside; NULL for a task
                             ** list alone */
} tn_export_opts;

typedef struct tn_export_report {
    int n_tasks, n_tuned, n_naive;
    int64_t arena_bytes;     /* with a model: its activations' arena */
    int64_t weight_bytes;    /* ... and the weights the library holds */
    int n_weight_uses;       /* ... and the layers whose kernel reads a weight in a layout
                             ** of its own (the transforms P_model_init makes) */
    char prefix[96];         /* of the C names */
    char link_cmd[512];      /* the linker command that ran */
    char temp_dir[256];      /* with keep_temp */
    double build_s;
} tn_export_report;

/* Build every task's best kernel (naive when there is no record) for 'target' with a C
** entry point each, link them with a small runtime into one shared library and write its
** header (docs/models.md has the calling convention).  x86-64 and aarch64 Linux are linked
** with the target's gcc driver (libc, libm, pthreads), aarch64 Android with ld.lld-16 and
** no libc at all (serial only).  AT_EUNSUPPORTED for a target this cannot link (a missing
** linker is named), AT_ECODEGEN, AT_EIO, AT_EINVAL, AT_ENOMEM. */
at_err tn_export_lib(const tn_task_list *tl, const tn_export_opts *o, tn_export_report *rep,
                     char *errmsg, size_t errmsg_size);

/* ---- the cost model's data sets (tn_cli_dataset.c) ---------------------------------- */

/* 'tuner dataset': measure random states of a task into a store, pre-train a cost model on
** a store, or evaluate one on held-out records (docs/cli.md, docs/cost_model.md).  A
** subcommand of the table in tn_cli.c (struct tn_cmd is in tuner_int.h). */
struct tn_cmd;
int tn_cmd_dataset(const struct tn_cmd *cmd, int argc, char **argv);

#endif /* TN_TUNER_H */
