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
#include <sys/types.h>

#include "common/common.h"
#include "models/models.h"

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
    int64_t index;              /* the caller's (e.g. its job table's index): the result
                                ** callback gets it back */
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
/* The process whose children run the embedded agent's kernels, or -1 when remote. */
pid_t tn_fleet_kernel_pid(const tn_fleet *f);


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

/* ---- measuring given states through the fleet (tn_measure.c) -------------------------
**
**   tn_measurer *m;  tn_measurer_open(store, &(tn_measure_cfg){.command_line = "..."}, &m, ...);
**   tn_measurer_run(m, dag, states, n, res, err, sizeof err);   build, measure, store
**   tn_dataset_random(m, dag, 240, seed, &stats, err, sizeof err);
**   tn_measurer_close(m, 0);
**
** The one path for measuring schedules outside a tuning run ('tuner measure', 'tuner
** dataset', the cost model's tests and benchmarks): candidates are built by tn_builder
** (worker processes, or this process with build_workers 0), checked against the task's
** naive schedule and timed by an agent through tn_fleet (the embedded tracker and agent,
** sandboxed, or a real tracker), and every result lands in the store in one run, as a
** tuning run's do; a build failure is recorded by the tuner host (agent "tuner-build").
** Builds and timing do not overlap: a batch is built, then measured. */
typedef struct tn_measure_cfg {
    const char *target;         /* NULL: "llvm -mcpu=native" */
    const char *tracker;        /* NULL: the embedded tracker and agent */
    const at_wire_key *keys;    /* fleet keys (with a tracker) */
    int n_keys;
    const char *device_key;     /* NULL: "local" */
    int priority;               /* 0: 1 */
    int wait_timeout_s;         /* 0: 600 */
    int embedded_threads;       /* the embedded agent's kernel threads (0: every core) */
    int number, repeat;         /* 0: 1 and 3 */
    double min_repeat_ms;
    int timeout_ms;             /* a job's budget on the device (0: 10000) */
    double cutoff_s;            /* > 0: a kernel whose checked run took longer is timed no
                                ** further (that run is its one cost); 0: off */
    int no_check;               /* do not compare outputs with the naive schedule's */
    int build_workers;          /* build worker processes (0: build in this process) */
    int build_timeout_ms;       /* 0: 60000 */
    const char *build_worker_exe; /* NULL: this program */
    const char *command_line;   /* the run's name in the store (NULL: "tuner measure") */
    int quiet;                  /* no progress lines on stderr */
} tn_measure_cfg;

typedef struct tn_measure_res {
    int status;        /* at_measure code */
    double mean_s;     /* mean of the costs (AT_MEASURE_FAIL_COST when failed) */
    double min_s;      /* the fastest repeat (AT_MEASURE_FAIL_COST when failed) */
    double median_s;
    int n_costs;
    char error[256];
} tn_measure_res;

typedef struct tn_measurer tn_measurer;

/* Begin a run in 'st' and open the fleet.  On AT_OK the caller owns *out. */
at_err tn_measurer_open(rec_store *st, const tn_measure_cfg *cfg, tn_measurer **out,
                        char *errmsg, size_t errmsg_size);
/* The run's uuid (job ids are "<uuid>-<counter>"). */
const char *tn_measurer_uuid(const tn_measurer *m);
/* Measure states[0..n) of 'dag': res[i] is the result of states[i] (a failed build or
** run is a result, not an error).  The return is AT_OK, or AT_ETIMEDOUT (no agent served
** the key: the jobs were recorded DEVICE_LOST), AT_EIO (the store), AT_ECODEGEN (the
** naive reference did not build), AT_ENOMEM. */
at_err tn_measurer_run(tn_measurer *m, ss_dag *dag, const ss_state *const *states, int n,
                       tn_measure_res *res, char *errmsg, size_t errmsg_size);
/* End the run ("done", or "failed" when 'failed') and close the fleet; NULL is fine. */
void tn_measurer_close(tn_measurer *m, int failed);

typedef struct tn_dataset_stats {
    int n_measured;  /* records written */
    int n_failed;    /* of which failed (status != 0) */
    int n_duplicate; /* sampled states already drawn in this call (skipped) */
    double seconds;
} tn_dataset_stats;

/* Sample 'n' distinct random states of 'dag' (ss_space_sample with 'seed') and measure
** them with 'm' in batches of 64, each batch committed before the next is drawn.  Fewer
** when the space has fewer distinct states.  'stats' may be NULL. */
at_err tn_dataset_random(tn_measurer *m, ss_dag *dag, int n, uint64_t seed,
                         tn_dataset_stats *stats, char *errmsg, size_t errmsg_size);

typedef struct tn_corpus_stats {
    int n_workloads; /* corpus workloads measured or found complete (not skipped) */
    int n_skipped;   /* workloads whose key was in skip_keys */
    int n_present;   /* records of them the store held before */
    int n_measured;  /* records written */
    int n_failed;    /* of which failed */
    double seconds;
} tn_corpus_stats;

/* The pre-training corpus (docs/cost_model.md): a fixed list of operator specs of common
** vision and language workloads.  tn_corpus_spec(i) for i in [0, tn_corpus_count()). */
int tn_corpus_count(void);
const char *tn_corpus_spec(int i);
/* Top every corpus workload up to 'n' random states measured with 'm' (records of its
** target and device already in the store count), skipping workloads whose key is one of
** skip_keys[0..n_skip).  A progress line per workload on stderr unless the measurer is
** quiet.  Stops at the first error (what was measured stays). */
at_err tn_dataset_corpus(tn_measurer *m, int n, uint64_t seed, const char *const *skip_keys,
                         int n_skip, tn_corpus_stats *stats, char *errmsg, size_t errmsg_size);

/* ---- the cost model's data sets (tn_cli_dataset.c) ---------------------------------- */

/* 'tuner dataset': measure random states of a task into a store, pre-train a cost model on
** a store, or evaluate one on held-out records (docs/cli.md, docs/cost_model.md).  A
** subcommand of the table in tn_cli.c (struct tn_cmd is in tuner_int.h). */
struct tn_cmd;
int tn_cmd_dataset(const struct tn_cmd *cmd, int argc, char **argv);

#endif /* TN_TUNER_H */
