/* records/records_schema.c -- opening a store: telling our files from foreign ones, the
** versioned schema and its migrations, connection settings, errors and transactions.
**
** A store is a SQLite file whose application_id is REC_APPLICATION_ID and whose
** user_version is its schema version.  migrations[v - 1] takes a store from version v - 1
** to v; a new build appends to the list and never edits an entry that has shipped.  Every
** migration runs inside one IMMEDIATE transaction that re-reads the version first, so
** several processes opening one new file at once migrate it exactly once.
**
** Nothing is written before the file has been recognised: a foreign, damaged or newer
** file is left byte for byte as it was. */
#include "records_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* Version 1: tasks, devices, the pools they were seen in, runs and records. */
static const char schema_v1[] =
    "CREATE TABLE tasks (\n"
    "  id           INTEGER PRIMARY KEY,\n"
    "  workload_key TEXT NOT NULL CHECK (length(workload_key) = 32),\n"
    "  target       TEXT NOT NULL CHECK (target <> ''),\n"
    "  device_key   TEXT NOT NULL CHECK (device_key <> ''),\n"
    "  dag          TEXT NOT NULL,\n"
    "  flops        REAL NOT NULL CHECK (flops >= 0),\n"
    "  created_at   REAL NOT NULL,\n"
    "  UNIQUE (workload_key, target, device_key)\n"
    ");\n"
    "CREATE TABLE devices (\n"
    "  id          INTEGER PRIMARY KEY,\n"
    "  fingerprint TEXT NOT NULL UNIQUE CHECK (length(fingerprint) = 16),\n"
    "  arch        TEXT NOT NULL,\n"
    "  model       TEXT NOT NULL,\n"
    "  n_cores     INTEGER NOT NULL CHECK (n_cores >= 1),\n"
    "  os          TEXT NOT NULL,\n"
    "  driver      TEXT NOT NULL\n"
    ");\n"
    "CREATE INDEX devices_arch ON devices(arch);\n"
    "CREATE TABLE pool_devices (\n"
    "  device_key TEXT NOT NULL,\n"
    "  device_id  INTEGER NOT NULL REFERENCES devices(id),\n"
    "  first_seen REAL NOT NULL,\n"
    "  PRIMARY KEY (device_key, device_id)\n"
    ") WITHOUT ROWID;\n"
    "CREATE TABLE runs (\n"
    "  id            INTEGER PRIMARY KEY,\n"
    "  uuid          TEXT NOT NULL UNIQUE,\n"
    "  command_line  TEXT NOT NULL,\n"
    "  tuner_version TEXT NOT NULL,\n"
    "  host          TEXT NOT NULL,\n"
    "  started_at    REAL NOT NULL,\n"
    "  ended_at      REAL,\n"
    "  status        TEXT NOT NULL\n"
    ");\n"
    "CREATE TABLE records (\n"
    "  id            INTEGER PRIMARY KEY,\n"
    "  task_id       INTEGER NOT NULL REFERENCES tasks(id),\n"
    "  device_id     INTEGER NOT NULL REFERENCES devices(id),\n"
    "  run_id        INTEGER REFERENCES runs(id),\n"
    "  job_id        TEXT NOT NULL UNIQUE CHECK (job_id <> ''),\n"
    "  state_hash    TEXT NOT NULL,\n"
    "  state         TEXT NOT NULL,\n"
    "  costs         TEXT NOT NULL,\n"
    "  mean          REAL NOT NULL,\n"
    "  median        REAL NOT NULL,\n"
    "  error_code    INTEGER NOT NULL CHECK (error_code >= 0),\n"
    "  error_text    TEXT NOT NULL,\n"
    "  agent         TEXT NOT NULL,\n"
    "  tuner_version TEXT NOT NULL,\n"
    "  trial         INTEGER,\n"
    "  measured_at   REAL NOT NULL,\n"
    "  stored_at     REAL NOT NULL,\n"
    "  UNIQUE (task_id, state_hash, device_id)\n"
    ");\n"
    "CREATE INDEX records_best ON records(task_id, device_id, mean) WHERE error_code = 0;\n";

/* Version 2: saved cost models, the names of measurement statuses, and a view that joins
** a record with everything a plain sqlite3 user wants to see next to it. */
static const char schema_v2[] =
    "CREATE TABLE cost_models (\n"
    "  id              INTEGER PRIMARY KEY,\n"
    "  target          TEXT NOT NULL,\n"
    "  format          TEXT NOT NULL,\n"
    "  feature_version INTEGER NOT NULL,\n"
    "  n_records       INTEGER NOT NULL,\n"
    "  created_at      REAL NOT NULL,\n"
    "  model           BLOB NOT NULL\n"
    ");\n"
    "CREATE INDEX cost_models_target ON cost_models(target, created_at);\n"
    "CREATE TABLE error_codes (\n"
    "  code  INTEGER PRIMARY KEY,\n"
    "  name  TEXT NOT NULL,\n"
    "  cause TEXT NOT NULL,\n"
    "  hint  TEXT NOT NULL\n"
    ");\n"
    "CREATE VIEW records_v AS\n"
    "SELECT r.id, r.job_id, t.workload_key, t.target, t.device_key, d.fingerprint, d.arch,\n"
    "       d.model, d.n_cores, d.os, d.driver, r.state, r.costs, r.mean, r.median,\n"
    "       CASE WHEN r.error_code = 0 AND r.mean > 0 THEN t.flops / r.mean / 1e9 END\n"
    "         AS gflops,\n"
    "       r.error_code, e.name AS error_name, r.error_text, r.agent, r.tuner_version,\n"
    "       u.uuid AS run_uuid, r.trial, r.measured_at, r.stored_at\n"
    "FROM records r\n"
    "JOIN tasks t ON t.id = r.task_id\n"
    "JOIN devices d ON d.id = r.device_id\n"
    "LEFT JOIN runs u ON u.id = r.run_id\n"
    "LEFT JOIN error_codes e ON e.code = r.error_code;\n";

/* Version 3: the process id of a run's tuner, so a later run on the same host can tell a
** run left 'running' by a killed process (SIGKILL, a crash) from a live one (rec_run_reap). */
static const char schema_v3[] = "ALTER TABLE runs ADD COLUMN pid INTEGER;\n";

/* Version 4: the buckets a model's symbolic dimensions were tuned for ('seq' 32, 64, 128),
** keyed by the model's structure hash, so a run at another length finds its bucket. */
static const char schema_v4[] =
    "CREATE TABLE buckets (\n"
    "  model      TEXT NOT NULL CHECK (length(model) = 32),\n"
    "  dim        TEXT NOT NULL CHECK (dim <> ''),\n"
    "  value      INTEGER NOT NULL CHECK (value >= 1),\n"
    "  model_name TEXT NOT NULL,\n"
    "  created_at REAL NOT NULL,\n"
    "  PRIMARY KEY (model, dim, value)\n"
    ") WITHOUT ROWID;\n";

static const char *const migrations[] = {schema_v1, schema_v2, schema_v3, schema_v4};

_Static_assert(sizeof migrations / sizeof migrations[0] == REC_SCHEMA_VERSION,
               "one migration per schema version");

/* ---- errors ---- */

at_err rec__fail(rec_store *st, at_err err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->errmsg, sizeof st->errmsg, fmt, ap);
    va_end(ap);
    return err;
}

at_err rec__sql_err(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_ROW:
    case SQLITE_DONE: return AT_OK;
    case SQLITE_BUSY:
    case SQLITE_LOCKED: return AT_EBUSY;
    case SQLITE_NOMEM: return AT_ENOMEM;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB: return AT_ECORRUPT;
    case SQLITE_CONSTRAINT: return AT_EEXIST;
    case SQLITE_CANTOPEN: return AT_ENOTFOUND;
    case SQLITE_MISUSE:
    case SQLITE_RANGE: return AT_EINVAL;
    default: return AT_EIO;
    }
}

at_err rec__sqlfail(rec_store *st, int rc, const char *what)
{
    at_err err = rec__sql_err(rc);
    if (err == AT_OK)
        err = AT_EIO;
    return rec__fail(st, err, "%s: %s: %s (sqlite %d)", st->path ? st->path : "records", what,
                     st->db ? sqlite3_errmsg(st->db) : sqlite3_errstr(rc), rc);
}

const char *rec_store_errmsg(const rec_store *st)
{
    return st ? st->errmsg : "";
}

int rec_store_disk_version(const rec_store *st)
{
    return st->disk_version;
}

void rec_store_set_busy_timeout(rec_store *st, int ms)
{
    st->busy_ms = ms < 0 ? 0 : ms;
    sqlite3_busy_timeout(st->db, st->busy_ms);
}

/* ---- statements ---- */

static const char *const stmt_sql[] = {
#define X(id, sql) sql,
    REC_STMT_MAP(X)
#undef X
};

at_err rec__stmt(rec_store *st, rec__stmt_id id, sqlite3_stmt **out)
{
    int rc;
    if (st->stmts[id] == NULL) {
        rc = sqlite3_prepare_v3(st->db, stmt_sql[id], -1, SQLITE_PREPARE_PERSISTENT,
                                &st->stmts[id], NULL);
        if (rc != SQLITE_OK) {
            st->stmts[id] = NULL;
            *out = NULL;
            return rec__sqlfail(st, rc, "preparing a statement");
        }
    }
    *out = st->stmts[id];
    return AT_OK;
}

void rec__finalize(rec_store *st)
{
    for (int i = 0; i < REC_N_STMTS; i++) {
        sqlite3_finalize(st->stmts[i]);
        st->stmts[i] = NULL;
    }
}

at_err rec__exec(rec_store *st, const char *sql)
{
    int rc = sqlite3_exec(st->db, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? AT_OK : rec__sqlfail(st, rc, "executing SQL");
}

int rec__bind_text(sqlite3_stmt *s, int i, const char *text)
{
    return text ? sqlite3_bind_text(s, i, text, -1, SQLITE_STATIC) : sqlite3_bind_null(s, i);
}

/* ---- transactions ---- */

static void forget_caches(rec_store *st)
{
    memset(st->dev_cache, 0, sizeof st->dev_cache);
    st->dev_next = 0;
    st->key_task = 0;
    st->run_uuid[0] = 0;
    st->run_id = 0;
}

static at_err tx_begin(rec_store *st)
{
    at_err err;
    if (st->readonly)
        return rec__fail(st, AT_EINVAL, "%s: opened read-only", st->path);
    if ((err = rec__exec(st, "BEGIN IMMEDIATE")) != AT_OK)
        return err;
    st->in_tx = 1;
    return AT_OK;
}

static at_err tx_commit(rec_store *st)
{
    int rc = sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL);
    at_err err;
    if (rc == SQLITE_OK) {
        st->in_tx = st->tx_user = 0;
        return AT_OK;
    }
    err = rec__sqlfail(st, rc, "committing");
    if (!sqlite3_get_autocommit(st->db))
        sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
    forget_caches(st);
    st->in_tx = st->tx_user = 0;
    return err;
}

static void tx_rollback(rec_store *st)
{
    if (!sqlite3_get_autocommit(st->db))
        sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
    forget_caches(st);
    st->in_tx = st->tx_user = 0;
}

at_err rec_tx_begin(rec_store *st)
{
    at_err err;
    if (st->in_tx)
        return rec__fail(st, AT_EINVAL, "%s: a transaction is open already", st->path);
    if ((err = tx_begin(st)) == AT_OK)
        st->tx_user = 1;
    return err;
}

at_err rec_tx_commit(rec_store *st)
{
    if (!st->in_tx || !st->tx_user)
        return rec__fail(st, AT_EINVAL, "%s: no transaction is open", st->path);
    return tx_commit(st);
}

void rec_tx_rollback(rec_store *st)
{
    if (st->in_tx)
        tx_rollback(st);
}

at_err rec__wbegin(rec_store *st, int *own)
{
    *own = 0;
    if (st->in_tx)
        return AT_OK;
    *own = 1;
    return tx_begin(st);
}

at_err rec__wend(rec_store *st, int own, at_err err)
{
    char keep[sizeof st->errmsg];
    if (!own)
        return err;
    if (err == AT_OK)
        return tx_commit(st);
    memcpy(keep, st->errmsg, sizeof keep); /* the first failure is the one to report */
    tx_rollback(st);
    memcpy(st->errmsg, keep, sizeof keep);
    return err;
}

/* ---- recognising the file ---- */

static at_err pragma_int(rec_store *st, const char *sql, int64_t *out)
{
    sqlite3_stmt *s;
    int rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(s);
        if (rc == SQLITE_ROW) {
            *out = sqlite3_column_int64(s, 0);
            rc = SQLITE_OK;
        } else if (rc == SQLITE_DONE) {
            *out = 0;
            rc = SQLITE_OK;
        }
    }
    sqlite3_finalize(s);
    return rc == SQLITE_OK ? AT_OK : rec__sqlfail(st, rc, "reading the store");
}

typedef struct probe {
    int64_t app_id, version, n_objects;
} probe;

/* Read the header fields and the number of schema objects in one statement, so that all
** three come from one snapshot even while another process is migrating the file. */
static at_err probe_file(rec_store *st, probe *p)
{
    sqlite3_stmt *s;
    int rc = sqlite3_prepare_v2(st->db,
                                "SELECT (SELECT application_id FROM pragma_application_id),"
                                " (SELECT user_version FROM pragma_user_version),"
                                " (SELECT count(*) FROM sqlite_schema)",
                                -1, &s, NULL);
    if (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        p->app_id = sqlite3_column_int64(s, 0);
        p->version = sqlite3_column_int64(s, 1);
        p->n_objects = sqlite3_column_int64(s, 2);
        rc = SQLITE_OK;
    }
    sqlite3_finalize(s);
    if (rc == SQLITE_OK)
        return AT_OK;
    if (rec__sql_err(rc) == AT_ECORRUPT)
        return rec__fail(st, AT_ECORRUPT,
                         "%s: not a records store: the file is not a SQLite database or is "
                         "damaged (%s)",
                         st->path, sqlite3_errmsg(st->db));
    return rec__sqlfail(st, rc, "reading the file's header");
}

/* AT_OK if 'p' describes one of our stores this build can read, or an empty file when
** creating is allowed. */
static at_err judge(rec_store *st, const probe *p, int may_create)
{
    uint32_t app = (uint32_t)p->app_id;
    if (app == 0 && p->n_objects == 0 && p->version == 0) {
        if (may_create)
            return AT_OK;
        return rec__fail(st, AT_ECORRUPT, "%s: not a records store: the database is empty",
                         st->path);
    }
    if (app != REC_APPLICATION_ID)
        return rec__fail(st, AT_ECORRUPT,
                         "%s: not a records store: a SQLite database of another program "
                         "(application id 0x%08x, %lld schema objects)",
                         st->path, app, (long long)p->n_objects);
    if (p->version < 1)
        return rec__fail(st, AT_ECORRUPT,
                         "%s: damaged records store: it has no schema version", st->path);
    if (p->version > REC_SCHEMA_VERSION)
        return rec__fail(st, AT_EVERSION,
                         "%s: written by a newer tuner (schema version %lld; this build reads "
                         "versions 1 to %d): use a newer tuner",
                         st->path, (long long)p->version, REC_SCHEMA_VERSION);
    return AT_OK;
}

/* PRAGMA quick_check: every page read, every b-tree's structure checked (not the index
** contents, which integrity_check in rec_store_check compares as well). */
static at_err quick_check(rec_store *st)
{
    sqlite3_stmt *s;
    at_err err = AT_OK;
    int rc = sqlite3_prepare_v2(st->db, "PRAGMA quick_check(1)", -1, &s, NULL);
    if (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        const char *first = (const char *)sqlite3_column_text(s, 0);
        if (first == NULL || strcmp(first, "ok") != 0)
            err = rec__fail(st, AT_ECORRUPT, "%s: damaged records store: %s (see 'tuner db "
                            "check')", st->path, first ? first : "?");
        rc = SQLITE_OK;
    }
    if (rc != SQLITE_OK)
        err = rec__sql_err(rc) == AT_ECORRUPT
                  ? rec__fail(st, AT_ECORRUPT, "%s: damaged records store: %s (see 'tuner db "
                              "check')", st->path, sqlite3_errmsg(st->db))
                  : rec__sqlfail(st, rc, "checking the store");
    sqlite3_finalize(s);
    return err;
}

/* ---- migrations ---- */

static at_err fill_error_codes(rec_store *st)
{
    sqlite3_stmt *s;
    int rc = sqlite3_prepare_v2(st->db,
                                "INSERT OR REPLACE INTO error_codes(code, name, cause, hint)"
                                " VALUES (?1, ?2, ?3, ?4)",
                                -1, &s, NULL);
    if (rc != SQLITE_OK)
        return rec__sqlfail(st, rc, "preparing the error code table");
    for (int c = 0; c < AT_N_MEASURE && rc == SQLITE_OK; c++) {
        sqlite3_bind_int(s, 1, c);
        sqlite3_bind_text(s, 2, at_measure_name(c), -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 3, at_measure_cause(c), -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 4, at_measure_hint(c), -1, SQLITE_STATIC);
        rc = sqlite3_step(s);
        rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
        sqlite3_reset(s);
    }
    sqlite3_finalize(s);
    return rc == SQLITE_OK ? AT_OK : rec__sqlfail(st, rc, "filling the error code table");
}

at_err rec__migrate(rec_store *st, int to)
{
    probe p;
    at_err err;
    char sql[96];
    int own;

    if ((err = rec__wbegin(st, &own)) != AT_OK)
        return err;
    /* Another process may have migrated the file since we looked: look again, now that
    ** we hold the write lock. */
    if ((err = probe_file(st, &p)) != AT_OK || (err = judge(st, &p, 1)) != AT_OK)
        return rec__wend(st, own, err);
    for (int v = (int)p.version + 1; v <= to && err == AT_OK; v++) {
        at_log_debug("records: %s: migrating schema %d -> %d", st->path, v - 1, v);
        err = rec__exec(st, migrations[v - 1]);
        if (err == AT_OK && v == 2)
            err = fill_error_codes(st);
    }
    if (err == AT_OK && p.version < to) {
        snprintf(sql, sizeof sql, "PRAGMA application_id = %d; PRAGMA user_version = %d",
                 (int)REC_APPLICATION_ID, to);
        err = rec__exec(st, sql);
    }
    return rec__wend(st, own, err);
}

/* Statuses appended by a newer build than the one that created the store: add their
** names (only when the table misses some, so a normal open writes nothing). */
static at_err refresh_error_codes(rec_store *st)
{
    int64_t n = 0;
    at_err err;
    int own;
    if ((err = pragma_int(st, "SELECT count(*) FROM error_codes", &n)) != AT_OK)
        return err;
    if (n >= AT_N_MEASURE)
        return AT_OK;
    if ((err = rec__wbegin(st, &own)) != AT_OK)
        return err;
    return rec__wend(st, own, fill_error_codes(st));
}

/* Switch to WAL.  Changing the journal mode needs a moment with no other connection
** inside a transaction, which the busy handler does not always wait for: retry. */
static at_err set_wal(rec_store *st)
{
    double deadline = at_time_mono_s() + st->busy_ms / 1000.0;
    for (;;) {
        sqlite3_stmt *s;
        int rc = sqlite3_prepare_v2(st->db, "PRAGMA journal_mode = WAL", -1, &s, NULL);
        const unsigned char *mode = NULL;
        if (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
            mode = sqlite3_column_text(s, 0);
            if (mode && strcmp((const char *)mode, "wal") != 0)
                at_log_warn("records: %s: journal mode is %s, not wal", st->path,
                            (const char *)mode);
            rc = SQLITE_OK;
        }
        sqlite3_finalize(s);
        if (rc == SQLITE_OK)
            return AT_OK;
        if ((rc & 0xff) != SQLITE_BUSY || at_time_mono_s() > deadline)
            return rec__sqlfail(st, rc, "switching to WAL mode");
        sqlite3_sleep(5);
    }
}

/* Read-only store of an older schema: migrate a private temporary copy. */
static at_err migrate_copy(rec_store *st)
{
    sqlite3 *tmp = NULL;
    sqlite3_backup *b;
    at_err err;
    int rc = sqlite3_open_v2("", &tmp, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    if (rc != SQLITE_OK) {
        sqlite3_close(tmp);
        return rec__sqlfail(st, rc, "opening a temporary copy");
    }
    b = sqlite3_backup_init(tmp, "main", st->db, "main");
    if (b == NULL) {
        err = rec__fail(st, AT_EIO, "%s: copying an old store: %s", st->path,
                               sqlite3_errmsg(tmp));
        sqlite3_close(tmp);
        return err;
    }
    rc = sqlite3_backup_step(b, -1);
    sqlite3_backup_finish(b);
    if (rc != SQLITE_DONE) {
        err = rec__sqlfail(st, rc, "copying an old store");
        sqlite3_close(tmp);
        return err;
    }
    sqlite3_close(st->db);
    st->db = tmp;
    sqlite3_extended_result_codes(st->db, 1);
    st->readonly = 0; /* the copy is ours to migrate */
    err = rec__migrate(st, REC_SCHEMA_VERSION);
    st->readonly = 1;
    if (err == AT_OK)
        err = rec__exec(st, "PRAGMA query_only = 1");
    return err;
}

at_err rec_store_open(const char *path, int flags, rec_store **out, char *errmsg,
                      size_t errmsg_size)
{
    rec_store *st;
    struct stat sb;
    probe p;
    at_err err;
    int rc, oflags;

    *out = NULL;
    if (errmsg && errmsg_size)
        errmsg[0] = 0;
    if ((flags & REC_OPEN_CREATE) && (flags & REC_OPEN_READONLY)) {
        if (errmsg)
            snprintf(errmsg, errmsg_size, "%s: cannot create a store read-only", path);
        return AT_EINVAL;
    }
    if ((st = at_calloc(1, sizeof *st)) == NULL)
        return AT_ENOMEM;
    st->busy_ms = 60000;
    st->readonly = (flags & REC_OPEN_READONLY) != 0;
    if ((st->path = at_strdup(path)) == NULL) {
        err = AT_ENOMEM;
        goto fail;
    }
    if (!(flags & REC_OPEN_CREATE) && stat(path, &sb) != 0) {
        err = rec__fail(st, errno == ENOENT ? AT_ENOTFOUND : AT_EIO, "%s: %s", path,
                        strerror(errno));
        goto fail;
    }
    oflags = st->readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE;
    if (flags & REC_OPEN_CREATE)
        oflags |= SQLITE_OPEN_CREATE;
    rc = sqlite3_open_v2(path, &st->db, oflags | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        err = rec__sqlfail(st, rc, "opening");
        if (err == AT_ENOTFOUND && (flags & REC_OPEN_CREATE))
            err = AT_EIO; /* could not create it: a directory or permission problem */
        goto fail;
    }
    sqlite3_extended_result_codes(st->db, 1);
    sqlite3_busy_timeout(st->db, st->busy_ms);

    if ((err = probe_file(st, &p)) != AT_OK ||
        (err = judge(st, &p, (flags & REC_OPEN_CREATE) != 0)) != AT_OK)
        goto fail;
    st->disk_version = (int)p.version;
    if ((flags & REC_OPEN_VERIFY) && p.n_objects > 0 && (err = quick_check(st)) != AT_OK)
        goto fail;

    if (st->readonly) {
        if (p.version < REC_SCHEMA_VERSION && (err = migrate_copy(st)) != AT_OK)
            goto fail;
        if ((err = rec__exec(st, "PRAGMA foreign_keys = ON")) != AT_OK)
            goto fail;
    } else {
        if ((err = set_wal(st)) != AT_OK ||
            (err = rec__exec(st, "PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;"
                                 " PRAGMA cache_size = -65536")) != AT_OK)
            goto fail;
        if (p.version < REC_SCHEMA_VERSION && (err = rec__migrate(st, REC_SCHEMA_VERSION)) !=
                                                   AT_OK)
            goto fail;
        if ((err = refresh_error_codes(st)) != AT_OK)
            goto fail;
    }
    st->errmsg[0] = 0;
    *out = st;
    return AT_OK;
fail:
    if (errmsg)
        snprintf(errmsg, errmsg_size, "%s", st->errmsg[0] ? st->errmsg : at_strerror(err));
    rec_store_close(st);
    return err;
}

void rec_store_close(rec_store *st)
{
    if (st == NULL)
        return;
    if (st->in_tx)
        tx_rollback(st);
    rec__finalize(st);
    sqlite3_close(st->db);
    at_free(st->path);
    at_free(st);
}
