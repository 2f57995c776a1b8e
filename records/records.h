/* records/records.h -- the SQLite record store (prefix rec_).
**
**   rec_store *st;  char err[256];  int64_t task;
**   rec_store_open("tuning.db", REC_OPEN_CREATE, &st, err, sizeof err);
**   rec_task_add(st, &(rec_task){key, target, "pixel7", dag_text, flops}, &task);
**   rec_put(st, results, n_results, &stats);          committed when it returns
**   rec_best(st, &(rec_best_query){.workload_key = key, .device_key = "pixel7"}, &best);
**   rec_best_free(best);  rec_store_close(st);
**
** Every measurement becomes one row of 'records'.  A row belongs to a task (workload key,
** target string, device key, DAG text, FLOP count) and to the device fingerprint of the
** hardware that measured it.  The store holds at most one row per job id and at most one
** row per (task, state text, device fingerprint); see rec_put for which row wins.  The
** schema, its versions and the JSONL exchange format are documented in docs/records.md.
**
** Threads and processes: a rec_store is one SQLite connection; use it from one thread at a
** time (one store per thread).  Any number of processes may open the same file: the store
** runs in WAL mode with a busy timeout, and every write is one short IMMEDIATE
** transaction, so concurrent writers wait for each other instead of failing.  Every call
** may block on file I/O and on other writers (up to the busy timeout). */
#ifndef REC_RECORDS_H
#define REC_RECORDS_H

#include <stdint.h>
#include <stdio.h>

#include "common/common.h"

#define REC_SCHEMA_VERSION 4    /* newest schema this build writes (PRAGMA user_version) */
#define REC_APPLICATION_ID 0x41545243 /* PRAGMA application_id of every store: "ATRC" */
#define REC_JSONL_VERSION 1     /* the "v" of every exported line */
#define REC_KEY_LEN 32          /* hex characters of a workload key */
#define REC_FP_LEN 16           /* hex characters of a device fingerprint */
#define REC_UUID_LEN 32         /* hex characters of a run id */

typedef struct rec_store rec_store; /* opaque; records_int.h */

/* ---- opening ------------------------------------------------------------------------ */

enum {
    REC_OPEN_CREATE = 1,   /* create the file (and the schema) when it does not exist */
    REC_OPEN_READONLY = 2, /* never write the file; an older schema is migrated in a
                           ** private temporary copy instead of in place */
    REC_OPEN_VERIFY = 4,   /* before anything else, read every page (PRAGMA quick_check;
                           ** about 0.6 s per million records): a damaged store is refused
                           ** with AT_ECORRUPT instead of being written to */
};

/* Open the store at 'path', migrating an older schema to REC_SCHEMA_VERSION (in place, in
** one transaction, unless REC_OPEN_READONLY).  On AT_OK the caller owns *out
** (rec_store_close).  On failure *out is NULL, the file is unchanged, 'errmsg' (if not
** NULL) holds a sentence naming the file, and the return is
**   AT_ENOTFOUND  no such file (and no REC_OPEN_CREATE)
**   AT_ECORRUPT   not a SQLite database, a SQLite database of another program, an empty
**                 file opened without REC_OPEN_CREATE, damaged beyond opening, or (with
**                 REC_OPEN_VERIFY) damaged anywhere
**   AT_EVERSION   written by a newer build (schema version above REC_SCHEMA_VERSION)
**   AT_EBUSY      other writers held the file longer than the busy timeout
**   AT_EIO, AT_ENOMEM. */
at_err rec_store_open(const char *path, int flags, rec_store **out, char *errmsg,
                      size_t errmsg_size);
void rec_store_close(rec_store *st); /* never fails; NULL is fine */

/* Text of the last failure on 'st' ("" if none); valid until the next call on 'st'. */
const char *rec_store_errmsg(const rec_store *st);

/* Schema version the file had when it was opened (0 for a file this call created). */
int rec_store_disk_version(const rec_store *st);

/* How long a write waits for other writers before AT_EBUSY (default 60000 ms). */
void rec_store_set_busy_timeout(rec_store *st, int ms);

/* ---- transactions ------------------------------------------------------------------- */

/* Group several calls into one write transaction.  Without these, each writing call is a
** transaction of its own and is committed (durable: synchronous=FULL) when it returns.
** Between rec_tx_begin and rec_tx_commit nothing is visible to other connections and
** nothing survives a crash.  No nesting: AT_EINVAL if one is open already.  On a failed
** commit the transaction is rolled back.  rec_tx_rollback never fails. */
at_err rec_tx_begin(rec_store *st);
at_err rec_tx_commit(rec_store *st);
void rec_tx_rollback(rec_store *st);

/* ---- tasks, devices, runs ----------------------------------------------------------- */

typedef struct rec_task {
    const char *workload_key; /* REC_KEY_LEN lower-case hex characters */
    const char *target;       /* compilation target string, not empty */
    const char *device_key;   /* the device pool the task is tuned on, not empty */
    const char *dag;          /* canonical DAG text (opaque here) */
    double flops;             /* floating-point operations of one run, >= 0, finite */
} rec_task;

/* Register a task, or find it: (workload key, target, device key) names one task.  Sets
** *id (valid in this store only).  AT_EINVAL for a malformed field; AT_EEXIST when the
** store has that task with another DAG text or FLOP count. */
at_err rec_task_add(rec_store *st, const rec_task *t, int64_t *id);

/* What a device reports about itself: the fields of its fingerprint.  The device key (the
** pool) and the tuner's version are not hardware and are not part of it. */
typedef struct rec_device {
    const char *arch;   /* "x86_64", "aarch64", "sm_90" */
    const char *model;  /* CPU or GPU model name as the device reports it */
    int n_cores;        /* CPU cores, or GPU multiprocessors; >= 1 */
    const char *os;     /* kernel release (uname -r) */
    const char *driver; /* GPU driver version; "" for CPUs */
} rec_device;

/* The fingerprint id: the first REC_FP_LEN hex characters of the SHA-256 of the JSON text
** ["arch","model",n_cores,"os","driver"] (written as at_buf_json_str/%d write them, no
** spaces).  AT_EINVAL if a string is NULL or n_cores < 1. */
at_err rec_device_fingerprint(const rec_device *d, char out[REC_FP_LEN + 1]);

/* Start a run: a row in 'runs' with a fresh random id, status "running".  Sets *run_id
** (for rec_result.run_id) and, if 'uuid' is not NULL, its REC_UUID_LEN-character text. */
at_err rec_run_begin(rec_store *st, const char *command_line, const char *tuner_version,
                     int64_t *run_id, char uuid[REC_UUID_LEN + 1]);
/* End a run: status is "done", "failed" or "interrupted".  AT_ENOTFOUND if no such run. */
at_err rec_run_end(rec_store *st, int64_t run_id, const char *status);

/* Runs of this host (its hostname, as rec_run_begin records it) left "running" by a
** process that is gone (killed by SIGKILL, crashed, the machine restarted): "interrupted",
** ended at their last record's stored_at (their start when they have none).  A run whose
** process still lives, a run of another host, and a run without a pid (an older schema,
** merged from elsewhere) stay as they are.  *n_reaped (may be NULL) gets how many. */
at_err rec_run_reap(rec_store *st, int *n_reaped);

/* ---- writing results ---------------------------------------------------------------- */

typedef struct rec_result {
    int64_t task_id;           /* from rec_task_add on this store */
    const char *job_id;        /* unique across the fleet and across stores, not empty */
    const char *state;         /* the schedule's JSON text; compared byte for byte */
    const double *costs;       /* seconds of each repeat (n_costs >= 1) when status is 0 */
    int n_costs;
    int status;                /* at_measure code, >= 0; a failure stores costs [1e10] */
    const char *error_text;    /* NULL means "" */
    const rec_device *device;  /* the hardware that measured it */
    const char *agent;         /* agent id; NULL means "" */
    const char *tuner_version; /* provenance only; NULL means "" */
    int64_t run_id;            /* from rec_run_begin, or 0 */
    const char *run_uuid;      /* used when run_id is 0: the run with this id, created if
                               ** unknown (import, merge); NULL for none */
    int64_t trial;             /* trial index within the run; -1 for none */
    double measured_at;        /* UNIX seconds; 0 means now */
    double stored_at;          /* UNIX seconds; 0 means now (import and merge keep it) */
} rec_result;

typedef struct rec_put_stats {
    int64_t n_new;      /* rows added */
    int64_t n_replaced; /* a better result replaced the row of the same task+state+device */
    int64_t n_kept;     /* the row of the same task+state+device was better: kept */
    int64_t n_same_job; /* the job id was recorded already: nothing done */
} rec_put_stats;

/* Store 'n' results in one transaction (or in the caller's, see rec_tx_begin) and commit
** it before returning: on AT_OK every result is durable.  All rows are checked first; a
** malformed one gives AT_EINVAL, names its index in the error text and writes nothing.
** Rows with a job id already stored are ignored (a job delivered twice).  For one task,
** state text and device fingerprint the store keeps one row, the better by: success over
** failure, then lower mean, earlier measured_at, smaller job id (so merging is
** order-independent).  'stats' (may be NULL) is added to.  Other failures (AT_EBUSY,
** AT_EIO, AT_ECORRUPT, AT_ENOMEM) roll back the whole batch. */
at_err rec_put(rec_store *st, const rec_result *rows, int n, rec_put_stats *stats);

/* ---- reading records ---------------------------------------------------------------- */

/* One stored record.  Strings and 'costs' belong to whoever handed out the record (an
** iterator until its next call, a best result until it is freed). */
typedef struct rec_record {
    int64_t id; /* row id in this store */
    const char *job_id;
    const char *workload_key, *target, *device_key, *dag;
    double flops;
    char fingerprint[REC_FP_LEN + 1];
    rec_device device;
    const char *tuner_version, *agent;
    const char *run_uuid; /* NULL when the record belongs to no run */
    int64_t trial;        /* -1 when none */
    const char *state;
    const double *costs;
    int n_costs;
    double mean, median; /* seconds; AT_MEASURE_FAIL_COST for failures */
    int status;          /* at_measure code */
    const char *error_text;
    double measured_at, stored_at; /* UNIX seconds */
} rec_record;

/* Which records: NULL fields match anything. */
typedef struct rec_filter {
    const char *workload_key;
    const char *target;
    const char *device_key;
    const char *fingerprint;
} rec_filter;

typedef enum {
    REC_ORDER_ID,    /* insertion order of this store */
    REC_ORDER_STABLE /* workload key, target, device key, job id: the same in every store
                     ** holding the same records (the export order) */
} rec_order;

typedef struct rec_iter rec_iter;

/* Iterate the records that match 'f' (NULL: all).  On AT_OK the caller owns *out
** (rec_iter_close).  The iterator reads one consistent snapshot; writes through other
** connections are not seen. */
at_err rec_iter_open(rec_store *st, const rec_filter *f, rec_order order, rec_iter **out);
/* Next record into *rec, or *rec = NULL at the end; the record lives until the next call.
** AT_ECORRUPT for a row that does not decode (the error text names it). */
at_err rec_iter_next(rec_iter *it, const rec_record **rec);
void rec_iter_close(rec_iter *it); /* NULL is fine */

/* Number of records, tasks, devices and runs (any pointer may be NULL). */
at_err rec_store_count(rec_store *st, int64_t *n_records, int64_t *n_tasks, int64_t *n_devices,
                       int64_t *n_runs);

/* ---- best-schedule queries ---------------------------------------------------------- */

/* Does 'state_json' still replay on 'dag_text'?  AT_OK if it does; otherwise any other
** code with a sentence in errmsg[0..n).  The schedule module provides the real one; the
** store calls it and never interprets a state itself. */
typedef at_err (*rec_replay_fn)(void *ctx, const char *dag_text, const char *state_json,
                                char *errmsg, size_t n);

/* What 'dag_text' says of itself: its workload key (REC_KEY_LEN hex characters and a NUL
** into key[]) and its FLOP count, recomputed from the parsed DAG.  AT_OK; any other code
** with a sentence in errmsg[0..n) when the text is no DAG.  The schedule module provides
** the real one (the store never parses a DAG itself). */
typedef at_err (*rec_task_fn)(void *ctx, const char *dag_text, char *key, double *flops,
                              char *errmsg, size_t n);

/* The checks of records that come from outside (import) or are on disk (db check) that
** need the schedule module: each may be NULL (not done). */
typedef struct rec_checks {
    rec_task_fn task;     /* a task's key and FLOPs are its DAG's */
    rec_replay_fn replay; /* a successful record's state replays on its task's DAG */
    void *ctx;            /* passed to both */
} rec_checks;

typedef enum {
    REC_FALLBACK_NONE, /* only the device asked for */
    REC_FALLBACK_ARCH  /* if it has nothing: other devices of the same architecture */
} rec_fallback;

typedef struct rec_best_query {
    const char *workload_key; /* NULL: every task */
    const char *target;       /* NULL: every target (each row names its own) */
    const char *device_key;   /* NULL: every device key */
    const char *fingerprint;  /* NULL: any hardware (under device_key); else only this */
    const char *arch;         /* for REC_FALLBACK_ARCH: NULL takes the arch of the
                              ** device key's (or fingerprint's) devices from the store */
    rec_fallback fallback;    /* needs device_key or fingerprint */
    int top;                  /* rows per group; < 1 means 1 */
    rec_replay_fn replay;     /* NULL: no replay check */
    void *replay_ctx;
} rec_best_query;

typedef struct rec_best_row {
    rec_record rec;
    int group;    /* rows of one task, target and device share a group number */
    int rank;     /* 1 = best of its group */
    int fallback; /* 1: measured on another device of the same architecture */
    double gflops;
} rec_best_row;

typedef struct rec_best_skip {
    int64_t record_id;
    const char *job_id, *workload_key, *target, *device_key;
    const char *reason; /* why the state did not replay */
} rec_best_skip;

typedef struct rec_best_result {
    rec_best_row *rows; /* by workload key, target, device key, fingerprint, rank */
    int n_rows;
    rec_best_skip *skipped; /* records passed over because their state did not replay */
    int n_skipped;
    const char **notes; /* sentences the user must see: several devices under one key,
                        ** fallbacks taken, nothing found and why */
    int n_notes;
} rec_best_result;

/* The 'top' best successful records of each group (task and device fingerprint).  Records
** measured for another target or device never appear unless asked for, and then their
** row says so (target, device key and fingerprint are in every row; 'fallback' marks
** fallbacks).  On AT_OK the caller owns *out (rec_best_free), even when it holds no rows
** (then 'notes' says why).  AT_EINVAL for a fallback without a device. */
at_err rec_best(rec_store *st, const rec_best_query *q, rec_best_result **out);
void rec_best_free(rec_best_result *r); /* NULL is fine */

/* ---- history ------------------------------------------------------------------------ */

typedef struct rec_history_point {
    int64_t trial; /* -1 when the record has none */
    double measured_at;
    double cost;   /* mean seconds; AT_MEASURE_FAIL_COST for a failure */
    double best;   /* best mean so far in this group (AT_MEASURE_FAIL_COST before any) */
    int status;
    const char *job_id;
} rec_history_point;

typedef struct rec_history_group {
    const char *workload_key, *target, *device_key;
    char fingerprint[REC_FP_LEN + 1];
    rec_device device;
    double flops;
    rec_history_point *points; /* by trial (none last), measured_at, row id */
    int n_points;
    int n_failed;
} rec_history_group;

typedef struct rec_history {
    rec_history_group *groups; /* by workload key, target, device key, fingerprint */
    int n_groups;
} rec_history;

/* Every record matching 'f', grouped by task and device fingerprint, in trial order, with
** the best cost so far.  On AT_OK the caller owns *out (rec_history_free). */
at_err rec_history_get(rec_store *st, const rec_filter *f, rec_history **out);
void rec_history_free(rec_history *h); /* NULL is fine */

/* ---- integrity ---------------------------------------------------------------------- */

typedef struct rec_check_report {
    int schema_version;    /* on disk when opened */
    int64_t n_records, n_tasks, n_devices, n_runs, n_models;
    int64_t n_problems;    /* damage: SQLite integrity, foreign keys, broken rows */
    int64_t n_unreplayable;/* records whose state no longer replays (not damage) */
    int64_t n_unknown_status; /* statuses this build does not know (newer writer) */
    char **lines;          /* one sentence per finding, first ones of each kind */
    int n_lines;
} rec_check_report;

/* Check the whole store: SQLite's integrity_check and foreign_key_check, then every row
** (state hash, costs, mean and median, fingerprints), then, with chk->task, whether each
** task's workload key and FLOP count are its DAG's (damage when not), and with
** chk->replay, whether every successful record's state replays on its task's DAG.  'chk'
** may be NULL (neither).  Reads only.  AT_OK when the check ran (its findings are in
** 'rep'; fill it with rec_check_fini); AT_ECORRUPT when SQLite cannot even read the file
** through. */
at_err rec_store_check(rec_store *st, const rec_checks *chk, rec_check_report *rep);
void rec_check_fini(rec_check_report *rep);

/* ---- merge, import, export ---------------------------------------------------------- */

/* Copy every record of 'src' into 'dst' with rec_put's rules (so records of the same
** task, state and device are deduplicated, and a job already in 'dst' is skipped), with
** their runs.  One transaction on 'dst' unless the caller has one open: on failure 'dst'
** is unchanged.  'stats' (may be NULL) is added to. */
at_err rec_merge(rec_store *dst, rec_store *src, rec_put_stats *stats);

/* Write the records matching 'f' (NULL: all) to 'out' as JSONL, one record per line, in
** REC_ORDER_STABLE order (docs/records.md).  *n (may be NULL) gets the number of lines.
** AT_EIO when writing fails. */
at_err rec_export_jsonl(rec_store *st, const rec_filter *f, FILE *out, int64_t *n);

/* Read JSONL records (as rec_export_jsonl writes them) from 'in' and store them with
** rec_put's rules, in one transaction unless the caller has one open.  'name' names the
** input in messages.  A malformed line gives AT_EPARSE with "name:line:col: what" in the
** error text, AT_EVERSION for a line of a newer format, AT_EEXIST for a task that
** contradicts the store; then nothing is stored.  Blank lines are skipped.  With
** chk->task ('chk' may be NULL), a line whose task's workload key or FLOP count is not its
** DAG's is AT_EPARSE ("name:line: ..."), and nothing is stored either.  chk->replay is not
** used: a state that no longer replays is kept, as the store keeps it (queries skip it). */
at_err rec_import_jsonl(rec_store *st, const char *name, FILE *in, const rec_checks *chk,
                        rec_put_stats *stats);

/* ---- cost models -------------------------------------------------------------------- */

/* Save a trained model ('format' e.g. "xgboost-ubj") for 'target', trained on
** 'n_records' records with feature set 'feature_version'.  Sets *id if not NULL. */
at_err rec_model_save(rec_store *st, const char *target, const char *format,
                      int feature_version, int64_t n_records, const void *blob, size_t n,
                      int64_t *id);
/* The newest model saved for 'target': on AT_OK the caller owns *blob (at_free); any of
** the other outputs may be NULL.  AT_ENOTFOUND if there is none. */
at_err rec_model_load(rec_store *st, const char *target, void **blob, size_t *n,
                      char format[32], int *feature_version, int64_t *n_records);

/* ---- buckets of symbolic dimensions -------------------------------------------------- */

/* A model tuned for several values of a symbolic dimension (--dim seq=32,64,128) records
** them, keyed by the model's structure hash (md_model_sig, 32 hex) and the dimension's
** name; 'model_name' (the file) is for people.  Values already there are kept.  AT_EINVAL
** for bad arguments. */
at_err rec_buckets_put(rec_store *st, const char *model_sig, const char *dim,
                       const int64_t *values, int n, const char *model_name);
/* The recorded values of dimension 'dim' of model 'model_sig', ascending, at most 'max'
** of them into values[]; *n gets how many there are (0: none recorded). */
at_err rec_buckets_get(rec_store *st, const char *model_sig, const char *dim, int64_t *values,
                       int max, int *n);

#endif /* REC_RECORDS_H */
