/* records/records_int.h -- what only the files of records/ see: the store's struct, its prepared
** statements, and helpers shared by the module's files (prefix rec__).
**
** Invariants:
**   - 'db' is open for the whole life of a rec_store; 'readonly' stores never write.
**   - 'in_tx' is 1 exactly while a transaction begun by rec_tx_begin or rec__wbegin is
**     open on 'db'; 'tx_user' says it was the caller's (rec_tx_begin).
**   - the device cache maps fingerprints to ids of rows that are committed or belong to
**     the open transaction, and remembers one device key whose pool_devices row exists;
**     'key_task' caches one task's device key, 'run_uuid' one run's id.  A rollback empties both, so no cached id
**     outlives its row.
**   - prepared statements are made on first use and reset after every use. */
#ifndef REC_RECORDS_INT_H
#define REC_RECORDS_INT_H

#include <sqlite3.h>

#include "records/records.h"

/* Statements used on the hot paths.  X(id, sql) */
#define REC_STMT_MAP(X)                                                                    \
    X(TASK_INS, "INSERT INTO tasks(workload_key, target, device_key, dag, flops, created_at)" \
                " VALUES (?1, ?2, ?3, ?4, ?5, ?6)"                                          \
                " ON CONFLICT(workload_key, target, device_key) DO NOTHING")               \
    X(TASK_GET, "SELECT id, dag, flops FROM tasks"                                          \
                " WHERE workload_key = ?1 AND target = ?2 AND device_key = ?3")             \
    X(TASK_KEY, "SELECT device_key FROM tasks WHERE id = ?1")                              \
    X(DEV_INS, "INSERT INTO devices(fingerprint, arch, model, n_cores, os, driver)"        \
               " VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT(fingerprint) DO NOTHING")     \
    X(DEV_GET, "SELECT id FROM devices WHERE fingerprint = ?1")                            \
    X(POOL_INS, "INSERT INTO pool_devices(device_key, device_id, first_seen)"              \
                " VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING")                             \
    X(RUN_INS, "INSERT INTO runs(uuid, command_line, tuner_version, host, started_at,"     \
               " ended_at, status) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"                    \
               " ON CONFLICT(uuid) DO UPDATE SET command_line = excluded.command_line,"    \
               " tuner_version = excluded.tuner_version, host = excluded.host,"            \
               " started_at = excluded.started_at, ended_at = excluded.ended_at,"          \
               " status = excluded.status"                                                 \
               " WHERE runs.status = 'imported' AND excluded.status <> 'imported'")        \
    X(RUN_GET, "SELECT id FROM runs WHERE uuid = ?1")                                      \
    X(RUN_END, "UPDATE runs SET ended_at = ?2, status = ?3 WHERE id = ?1")                 \
    X(REC_INS, "INSERT INTO records(task_id, device_id, run_id, job_id, state_hash, state," \
               " costs, mean, median, error_code, error_text, agent, tuner_version, trial," \
               " measured_at, stored_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10,"  \
               " ?11, ?12, ?13, ?14, ?15, ?16)")                                           \
    X(REC_UPD, "UPDATE records SET task_id = ?1, device_id = ?2, run_id = ?3, job_id = ?4," \
               " state_hash = ?5, state = ?6, costs = ?7, mean = ?8, median = ?9,"         \
               " error_code = ?10, error_text = ?11, agent = ?12, tuner_version = ?13,"    \
               " trial = ?14, measured_at = ?15, stored_at = ?16 WHERE id = ?17")          \
    X(REC_BY_JOB, "SELECT id FROM records WHERE job_id = ?1")                              \
    X(REC_BY_KEY, "SELECT id, state, error_code, mean, measured_at, job_id FROM records"    \
                  " WHERE task_id = ?1 AND state_hash = ?2 AND device_id = ?3")

typedef enum {
#define X(id, sql) REC_S_##id,
    REC_STMT_MAP(X)
#undef X
        REC_N_STMTS
} rec__stmt_id;

#define REC_DEV_CACHE 8

struct rec_store {
    sqlite3 *db;
    char *path;          /* as given to rec_store_open */
    int readonly;        /* REC_OPEN_READONLY */
    int disk_version;    /* user_version when opened; 0 if created now */
    int in_tx, tx_user;  /* see the invariants above */
    int busy_ms;
    char errmsg[1024];
    sqlite3_stmt *stmts[REC_N_STMTS];
    struct {
        char fp[REC_FP_LEN + 1];
        char device_key[64]; /* "" when the pool row is not known to exist */
        int64_t id;
    } dev_cache[REC_DEV_CACHE];
    int dev_next;        /* round-robin slot of the cache */
    int64_t key_task;    /* the task whose device key is in 'key_text'; 0 for none */
    char key_text[64];
    char run_uuid[REC_UUID_LEN + 1]; /* the last run looked up by uuid, "" for none */
    int64_t run_id;
};

/* The columns every record query selects, in the order rec__record_read expects, and the
** joins they need ('r' records, 't' tasks, 'd' devices, 'u' runs). */
#define REC_RECORD_COLS                                                                    \
    "r.id, r.job_id, t.workload_key, t.target, t.device_key, t.dag, t.flops,"              \
    " d.fingerprint, d.arch, d.model, d.n_cores, d.os, d.driver, r.tuner_version, r.agent," \
    " u.uuid, r.trial, r.state, r.costs, r.mean, r.median, r.error_code, r.error_text,"     \
    " r.measured_at, r.stored_at"
#define REC_RECORD_FROM                                                                    \
    " FROM records r JOIN tasks t ON t.id = r.task_id JOIN devices d ON d.id = r.device_id" \
    " LEFT JOIN runs u ON u.id = r.run_id"

/* Set the store's error text (printf-style) and return 'err'. */
at_err rec__fail(rec_store *st, at_err err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Turn SQLite's result 'rc' into an at_err, with "what: sqlite's message" as error text. */
at_err rec__sqlfail(rec_store *st, int rc, const char *what);
/* The at_err that a SQLite result code means. */
at_err rec__sql_err(int rc);

/* The prepared statement 'id' into *out (prepared on first use). */
at_err rec__stmt(rec_store *st, rec__stmt_id id, sqlite3_stmt **out);
void rec__finalize(rec_store *st);

/* Run SQL text without results. */
at_err rec__exec(rec_store *st, const char *sql);

/* Begin a write transaction unless one is open; '*own' says whether this call began it.
** rec__wend commits it (if own and err is AT_OK) or rolls it back (if own), and returns
** the first failure. */
at_err rec__wbegin(rec_store *st, int *own);
at_err rec__wend(rec_store *st, int own, at_err err);

/* Add or complete a run copied from another store (rec_merge); a run known here only as
** a placeholder (status "imported") takes the copied details. */
at_err rec__run_copy(rec_store *st, const char *uuid, const char *cmd, const char *version,
                     const char *host, double started, double ended, const char *status);

/* Migrations (records_schema.c).  rec__migrate brings 'db' from its version to 'to' in
** one transaction; tests use 'to' < REC_SCHEMA_VERSION to make old stores. */
at_err rec__migrate(rec_store *st, int to);

/* Decode the REC_RECORD_COLS of the current row of 's' into 'r', copying text into 'a'.
** AT_ECORRUPT (with error text naming the row) for a row that does not decode. */
at_err rec__record_read(rec_store *st, sqlite3_stmt *s, at_arena *a, rec_record *r);

/* Parse a JSON array of numbers into doubles allocated from 'a'. */
at_err rec__costs_parse(at_arena *a, const char *text, double **out, int *n);

/* Mean and median of 'n' > 0 costs. */
void rec__costs_stats(const double *c, int n, double *mean, double *median);

/* 32-hex SHA-256 prefix of the state text (the state_hash column). */
void rec__state_hash(const char *state, char out[33]);

/* Is 's' exactly REC_KEY_LEN lower-case hex characters? */
int rec__key_ok(const char *s);

/* Bind text, or NULL when 's' is NULL. */
int rec__bind_text(sqlite3_stmt *s, int i, const char *text);

#endif /* REC_RECORDS_INT_H */
