/* tests/records/test_store.c -- opening stores (ours, foreign, damaged, newer, older),
** migrations, tasks, the rules of rec_put, transactions, runs, cost models and the
** measurement status list. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <sqlite3.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rec_test.h"

static char dir[64];

static int setup(void **unused)
{
    (void)unused;
    rt_mkdtemp(dir);
    return 0;
}

static int teardown(void **unused)
{
    (void)unused;
    rt_rmdir(dir);
    return 0;
}

static rec_store *open_new(const char *name)
{
    char path[PATH_MAX], err[512];
    rec_store *st = NULL;
    rt_path(path, dir, name);
    assert_int_equal(rec_store_open(path, REC_OPEN_CREATE, &st, err, sizeof err), AT_OK);
    return st;
}

static int64_t count_records(rec_store *st)
{
    int64_t n = -1;
    assert_int_equal(rec_store_count(st, &n, NULL, NULL, NULL), AT_OK);
    return n;
}

/* Run SQL on a file with plain SQLite (as a user with sqlite3 would). */
static void raw_sql(const char *path, const char *sql)
{
    sqlite3 *db;
    char *msg = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        fprintf(stderr, "%s\n", msg);
        fail();
    }
    sqlite3_close(db);
}

static int64_t raw_int(const char *path, const char *sql)
{
    sqlite3 *db;
    sqlite3_stmt *s;
    int64_t v = -1;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
    if (sqlite3_step(s) == SQLITE_ROW)
        v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    sqlite3_close(db);
    return v;
}

/* ---- measurement statuses ---- */

static void test_measure_map(void **unused)
{
    int code;
    (void)unused;
    assert_int_equal(AT_MEASURE_NO_ERROR, 0);
    assert_int_equal(AT_MEASURE_INSTANTIATION_ERROR, 1);
    assert_int_equal(AT_MEASURE_COMPILE_HOST, 2);
    assert_int_equal(AT_MEASURE_COMPILE_DEVICE, 3);
    assert_int_equal(AT_MEASURE_RUNTIME_DEVICE, 4);
    assert_int_equal(AT_MEASURE_WRONG_ANSWER, 5);
    assert_int_equal(AT_MEASURE_BUILD_TIMEOUT, 6);
    assert_int_equal(AT_MEASURE_RUN_TIMEOUT, 7);
    assert_int_equal(AT_MEASURE_UNKNOWN_ERROR, 8);
    assert_int_equal(AT_MEASURE_DEVICE_LOST, 9);
    for (int c = 0; c < AT_N_MEASURE; c++) {
        assert_true(strlen(at_measure_cause(c)) > 10);
        assert_true(strlen(at_measure_hint(c)) > 5);
        assert_int_equal(at_measure_parse(at_measure_name(c), &code), AT_OK);
        assert_int_equal(code, c);
    }
    assert_string_equal(at_measure_name(7), "RUN_TIMEOUT");
    assert_string_equal(at_measure_name(AT_N_MEASURE + 3), "UNKNOWN_STATUS");
    assert_string_equal(at_measure_name(-1), "UNKNOWN_STATUS");
    assert_int_equal(at_measure_parse("device_lost", &code), AT_OK);
    assert_int_equal(code, 9);
    assert_int_equal(at_measure_parse("42", &code), AT_OK);
    assert_int_equal(code, 42);
    assert_int_equal(at_measure_parse("bogus", &code), AT_EINVAL);
    assert_int_equal(at_measure_parse("-1", &code), AT_EINVAL);
}

/* ---- opening ---- */

static void test_create_and_reopen(void **unused)
{
    char path[PATH_MAX], err[512];
    rec_store *st;
    (void)unused;
    st = open_new("a.db");
    assert_int_equal(rec_store_disk_version(st), 0);
    rec_store_close(st);
    rt_path(path, dir, "a.db");
    assert_int_equal(raw_int(path, "PRAGMA application_id"), REC_APPLICATION_ID);
    assert_int_equal(raw_int(path, "PRAGMA user_version"), REC_SCHEMA_VERSION);
    assert_int_equal(raw_int(path, "SELECT count(*) FROM error_codes"), AT_N_MEASURE);
    assert_int_equal(rec_store_open(path, 0, &st, err, sizeof err), AT_OK);
    assert_int_equal(rec_store_disk_version(st), REC_SCHEMA_VERSION);
    assert_int_equal(count_records(st), 0);
    rec_store_close(st);
    assert_int_equal(rec_store_open(path, REC_OPEN_READONLY, &st, err, sizeof err), AT_OK);
    rec_store_close(st);
    /* WAL is persistent: a plain sqlite3 user sees it too */
    {
        sqlite3 *db;
        sqlite3_stmt *s;
        assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
        assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &s, NULL), SQLITE_OK);
        assert_int_equal(sqlite3_step(s), SQLITE_ROW);
        assert_string_equal((const char *)sqlite3_column_text(s, 0), "wal");
        sqlite3_finalize(s);
        sqlite3_close(db);
    }
}

static void test_open_missing(void **unused)
{
    char path[PATH_MAX], err[512];
    rec_store *st = (rec_store *)1;
    (void)unused;
    rt_path(path, dir, "missing.db");
    assert_int_equal(rec_store_open(path, 0, &st, err, sizeof err), AT_ENOTFOUND);
    assert_null(st);
    assert_non_null(strstr(err, "missing.db"));
    assert_int_equal(rec_store_open(path, REC_OPEN_READONLY, &st, err, sizeof err),
                     AT_ENOTFOUND);
    assert_false(rt_exists(path));
    assert_int_equal(rec_store_open(path, REC_OPEN_READONLY | REC_OPEN_CREATE, &st, err,
                                    sizeof err),
                     AT_EINVAL);
    assert_false(rt_exists(path));
}

/* Open 'path' every way and expect 'want' with 'phrase' in the message, and the file
** byte for byte as it was, with no side files. */
static void expect_refused(const char *path, at_err want, const char *phrase)
{
    static const int flags[] = {0, REC_OPEN_CREATE, REC_OPEN_READONLY};
    char before[65], after[65], err[512], side[PATH_MAX];
    rt_file_digest(path, before);
    for (size_t i = 0; i < AT_ARRAY_LEN(flags); i++) {
        rec_store *st = (rec_store *)1;
        err[0] = 0;
        assert_int_equal(rec_store_open(path, flags[i], &st, err, sizeof err), want);
        assert_null(st);
        if (strstr(err, phrase) == NULL) {
            fprintf(stderr, "message '%s' lacks '%s'\n", err, phrase);
            fail();
        }
        assert_non_null(strstr(err, path));
        rt_file_digest(path, after);
        assert_string_equal(before, after);
    }
    snprintf(side, sizeof side, "%s-journal", path);
    assert_false(rt_exists(side));
}

static void test_open_foreign_text(void **unused)
{
    char path[PATH_MAX];
    (void)unused;
    rt_path(path, dir, "notes.txt");
    rt_write_file(path, "this is a text file, not a database, and it is long enough to have "
                        "a header's worth of bytes in it: 0123456789abcdef0123456789abcdef\n");
    expect_refused(path, AT_ECORRUPT, "not a records store");
}

static void test_open_foreign_sqlite(void **unused)
{
    char path[PATH_MAX];
    (void)unused;
    rt_path(path, dir, "other.db");
    raw_sql(path, "CREATE TABLE recipes(name TEXT, minutes INTEGER);"
                  "INSERT INTO recipes VALUES ('soup', 30);");
    expect_refused(path, AT_ECORRUPT, "another program");
    raw_sql(path, "PRAGMA application_id = 1234");
    expect_refused(path, AT_ECORRUPT, "another program");
}

static void test_open_newer_schema(void **unused)
{
    char path[PATH_MAX];
    rec_store *st;
    (void)unused;
    st = open_new("newer.db");
    rt_task(st, 1, "llvm", "k");
    rec_store_close(st);
    rt_path(path, dir, "newer.db");
    raw_sql(path, "PRAGMA user_version = 99; CREATE TABLE from_the_future(x);");
    expect_refused(path, AT_EVERSION, "newer tuner (schema version 99");
}

static void test_open_empty_file(void **unused)
{
    char path[PATH_MAX], err[512];
    rec_store *st;
    (void)unused;
    rt_path(path, dir, "empty.db");
    rt_write_file(path, "");
    assert_int_equal(rec_store_open(path, REC_OPEN_READONLY, &st, err, sizeof err),
                     AT_ECORRUPT);
    assert_non_null(strstr(err, "empty"));
    assert_int_equal(rec_store_open(path, 0, &st, err, sizeof err), AT_ECORRUPT);
    assert_int_equal(rec_store_open(path, REC_OPEN_CREATE, &st, err, sizeof err), AT_OK);
    rec_store_close(st);
    assert_int_equal(raw_int(path, "PRAGMA user_version"), REC_SCHEMA_VERSION);
}

static void test_open_damaged(void **unused)
{
    char path[PATH_MAX], err[512], before[65], after[65];
    rec_store *st = open_new("damaged.db");
    int64_t task = rt_task(st, 1, "llvm", "box");
    rt_result x;
    (void)unused;
    assert_int_equal(rec_tx_begin(st), AT_OK);
    for (int i = 0; i < 400; i++) {
        rt_result_init(&x, task, "d", i, &rt_dev_x86, 1e-3, 0);
        assert_int_equal(rec_put(st, &x.r, 1, NULL), AT_OK);
    }
    assert_int_equal(rec_tx_commit(st), AT_OK);
    rec_store_close(st);
    rt_path(path, dir, "damaged.db");
    rt_damage(path);
    rt_file_digest(path, before);
    /* a plain open only reads the header: it works (queries report the damage they meet) */
    assert_int_equal(rec_store_open(path, REC_OPEN_READONLY, &st, err, sizeof err), AT_OK);
    rec_store_close(st);
    /* a verifying open reads every page first */
    st = (rec_store *)1;
    assert_int_equal(rec_store_open(path, REC_OPEN_VERIFY, &st, err, sizeof err), AT_ECORRUPT);
    assert_null(st);
    assert_non_null(strstr(err, "damaged records store"));
    assert_int_equal(rec_store_open(path, REC_OPEN_VERIFY | REC_OPEN_READONLY, &st, err,
                                    sizeof err),
                     AT_ECORRUPT);
    rt_file_digest(path, after);
    assert_string_equal(before, after);
    /* a healthy store passes the same open */
    st = open_new("healthy.db");
    rec_store_close(st);
    rt_path(path, dir, "healthy.db");
    assert_int_equal(rec_store_open(path, REC_OPEN_VERIFY, &st, err, sizeof err), AT_OK);
    rec_store_close(st);
}

/* ---- migrations ---- */

/* Version 1 of the schema as it shipped, frozen here: if the migration in the source is
** ever edited, this test still makes stores the way old builds did. */
static const char v1_store[] =
    "PRAGMA journal_mode = WAL;"
    "CREATE TABLE tasks (id INTEGER PRIMARY KEY, workload_key TEXT NOT NULL CHECK"
    " (length(workload_key) = 32), target TEXT NOT NULL CHECK (target <> ''), device_key TEXT"
    " NOT NULL CHECK (device_key <> ''), dag TEXT NOT NULL, flops REAL NOT NULL CHECK (flops"
    " >= 0), created_at REAL NOT NULL, UNIQUE (workload_key, target, device_key));"
    "CREATE TABLE devices (id INTEGER PRIMARY KEY, fingerprint TEXT NOT NULL UNIQUE CHECK"
    " (length(fingerprint) = 16), arch TEXT NOT NULL, model TEXT NOT NULL, n_cores INTEGER"
    " NOT NULL CHECK (n_cores >= 1), os TEXT NOT NULL, driver TEXT NOT NULL);"
    "CREATE INDEX devices_arch ON devices(arch);"
    "CREATE TABLE pool_devices (device_key TEXT NOT NULL, device_id INTEGER NOT NULL"
    " REFERENCES devices(id), first_seen REAL NOT NULL, PRIMARY KEY (device_key, device_id))"
    " WITHOUT ROWID;"
    "CREATE TABLE runs (id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, command_line TEXT"
    " NOT NULL, tuner_version TEXT NOT NULL, host TEXT NOT NULL, started_at REAL NOT NULL,"
    " ended_at REAL, status TEXT NOT NULL);"
    "CREATE TABLE records (id INTEGER PRIMARY KEY, task_id INTEGER NOT NULL REFERENCES"
    " tasks(id), device_id INTEGER NOT NULL REFERENCES devices(id), run_id INTEGER"
    " REFERENCES runs(id), job_id TEXT NOT NULL UNIQUE CHECK (job_id <> ''), state_hash TEXT"
    " NOT NULL, state TEXT NOT NULL, costs TEXT NOT NULL, mean REAL NOT NULL, median REAL NOT"
    " NULL, error_code INTEGER NOT NULL CHECK (error_code >= 0), error_text TEXT NOT NULL,"
    " agent TEXT NOT NULL, tuner_version TEXT NOT NULL, trial INTEGER, measured_at REAL NOT"
    " NULL, stored_at REAL NOT NULL, UNIQUE (task_id, state_hash, device_id));"
    "CREATE INDEX records_best ON records(task_id, device_id, mean) WHERE error_code = 0;"
    /* one task, one device, two records written by a version-1 build */
    "INSERT INTO tasks VALUES (1, '0123456789abcdef0123456789abcdef', 'llvm -mtriple=x86_64',"
    " 'box', 'input A[4] float32\nB[i:4] = A[i] * 2.0\n', 4, 1.7e9);"
    "INSERT INTO devices VALUES (1, '%s', 'x86_64', 'AMD EPYC 9654', 96, '6.1.0-18-amd64', '');"
    "INSERT INTO pool_devices VALUES ('box', 1, 1.7e9);"
    "INSERT INTO records VALUES (1, 1, 1, NULL, 'old-1', '%s', '%s', '[0.002]', 0.002, 0.002,"
    " 0, '', 'a', '0.0.1', 0, 1.7e9, 1.7e9);"
    "INSERT INTO records VALUES (2, 1, 1, NULL, 'old-2', '%s', '%s', '[0.001,0.003]', 0.002,"
    " 0.002, 0, '', 'a', '0.0.1', 1, 1.7e9, 1.7e9);"
    "PRAGMA application_id = 1096045123; PRAGMA user_version = 1;";

static void make_v1_store(const char *path)
{
    char fp[REC_FP_LEN + 1], h1[33], h2[33], sql[sizeof v1_store + 512];
    const char *s1 = "{\"v\":1,\"steps\":[]}", *s2 = "{\"v\":1,\"steps\":[[\"AN\",0,0,3]]}";
    assert_int_equal(rec_device_fingerprint(&rt_dev_x86, fp), AT_OK);
    at_sha256_hex(s1, strlen(s1), 16, h1);
    at_sha256_hex(s2, strlen(s2), 16, h2);
    snprintf(sql, sizeof sql, v1_store, fp, h1, s1, h2, s2);
    raw_sql(path, sql);
}

static void test_migrate_from_v1(void **unused)
{
    char path[PATH_MAX], err[512], before[65], after[65];
    rec_store *st;
    rec_best_result *best;
    rec_best_query q;
    rec_check_report rep;
    (void)unused;
    assert_int_equal(REC_APPLICATION_ID, 1096045123);
    rt_path(path, dir, "v1.db");
    make_v1_store(path);
    rt_file_digest(path, before);

    /* read-only: readable, migrated in a private copy, the file untouched */
    assert_int_equal(rec_store_open(path, REC_OPEN_READONLY, &st, err, sizeof err), AT_OK);
    assert_int_equal(rec_store_disk_version(st), 1);
    memset(&q, 0, sizeof q);
    q.device_key = "box";
    assert_int_equal(rec_best(st, &q, &best), AT_OK);
    assert_int_equal(best->n_rows, 1);
    assert_string_equal(best->rows[0].rec.job_id, "old-1"); /* same mean: the lower row id */
    assert_int_equal(best->rows[0].rec.n_costs, 1);
    rec_best_free(best);
    assert_int_equal(rec_store_check(st, &(rec_checks){NULL, rt_replay, NULL}, &rep), AT_OK);
    assert_int_equal(rep.n_problems, 0);
    assert_int_equal(rep.schema_version, 1);
    assert_int_equal(rep.n_records, 2);
    rec_check_fini(&rep);
    rec_store_close(st);
    rt_file_digest(path, after);
    assert_string_equal(before, after);
    assert_int_equal(raw_int(path, "PRAGMA user_version"), 1);

    /* read-write: migrated in place, nothing lost */
    assert_int_equal(rec_store_open(path, 0, &st, err, sizeof err), AT_OK);
    assert_int_equal(rec_store_disk_version(st), 1);
    assert_int_equal(count_records(st), 2);
    rec_store_close(st);
    assert_int_equal(raw_int(path, "PRAGMA user_version"), REC_SCHEMA_VERSION);
    assert_int_equal(raw_int(path, "SELECT count(*) FROM records_v WHERE error_name ="
                                   " 'NO_ERROR'"),
                     2);
    assert_int_equal(raw_int(path, "SELECT count(*) FROM cost_models"), 0);
}

/* ---- tasks ---- */

static void test_task_add(void **unused)
{
    rec_store *st = open_new("tasks.db");
    char key[REC_KEY_LEN + 1], dag[256];
    rec_task t;
    int64_t id1, id2, id;
    (void)unused;
    id1 = rt_task(st, 1, "llvm", "box");
    assert_true(id1 > 0);
    assert_int_equal(rt_task(st, 1, "llvm", "box"), id1); /* idempotent */
    id2 = rt_task(st, 1, "llvm", "phone");                /* another device key */
    assert_true(id2 != id1);
    rt_key(1, key);
    rt_dag(1, dag, sizeof dag);
    t.workload_key = key;
    t.target = "llvm";
    t.device_key = "box";
    t.dag = "input X[1] float32\n";
    t.flops = 2.0 * 16 * 2 * 64 * 64;
    assert_int_equal(rec_task_add(st, &t, &id), AT_EEXIST);
    assert_non_null(strstr(rec_store_errmsg(st), "another DAG"));
    t.dag = dag;
    t.flops = 1;
    assert_int_equal(rec_task_add(st, &t, &id), AT_EEXIST);
    assert_non_null(strstr(rec_store_errmsg(st), "FLOP"));
    t.flops = -1;
    assert_int_equal(rec_task_add(st, &t, &id), AT_EINVAL);
    t.flops = 1;
    t.workload_key = "0123456789ABCDEF0123456789ABCDEF"; /* upper case */
    assert_int_equal(rec_task_add(st, &t, &id), AT_EINVAL);
    t.workload_key = "0123";
    assert_int_equal(rec_task_add(st, &t, &id), AT_EINVAL);
    t.workload_key = key;
    t.target = "";
    assert_int_equal(rec_task_add(st, &t, &id), AT_EINVAL);
    assert_int_equal(id, 0);
    rec_store_close(st);
}

/* ---- rec_put ---- */

static const rec_record *find_job(rec_store *st, const char *job, rec_iter **it)
{
    const rec_record *r;
    assert_int_equal(rec_iter_open(st, NULL, REC_ORDER_ID, it), AT_OK);
    while (rec_iter_next(*it, &r) == AT_OK && r)
        if (strcmp(r->job_id, job) == 0)
            return r;
    return NULL;
}

static void test_put_rules(void **unused)
{
    rec_store *st = open_new("put.db");
    int64_t task = rt_task(st, 1, "llvm", "box");
    rec_put_stats s = {0, 0, 0, 0};
    rt_result a, b;
    rec_iter *it;
    const rec_record *r;
    (void)unused;

    rt_result_init(&a, task, "job", 1, &rt_dev_x86, 2e-3, 0);
    assert_int_equal(rec_put(st, &a.r, 1, &s), AT_OK);
    assert_int_equal(s.n_new, 1);
    /* the same job again (delivered twice): nothing */
    assert_int_equal(rec_put(st, &a.r, 1, &s), AT_OK);
    assert_int_equal(s.n_same_job, 1);
    /* the same state on the same device, slower, another job: the first stays */
    rt_result_init(&b, task, "other", 1, &rt_dev_x86, 3e-3, 0);
    assert_int_equal(rec_put(st, &b.r, 1, &s), AT_OK);
    assert_int_equal(s.n_kept, 1);
    /* faster: replaces it */
    b.costs[0] = b.costs[1] = b.costs[2] = 1e-3;
    assert_int_equal(rec_put(st, &b.r, 1, &s), AT_OK);
    assert_int_equal(s.n_replaced, 1);
    assert_int_equal(count_records(st), 1);
    r = find_job(st, "other-1", &it);
    assert_non_null(r);
    assert_true(r->mean == 1e-3);
    assert_true(r->median == 1e-3);
    rec_iter_close(it);
    /* the same state on another device: a row of its own */
    rt_result_init(&b, task, "arm", 1, &rt_dev_a76, 5e-3, 0);
    assert_int_equal(rec_put(st, &b.r, 1, &s), AT_OK);
    assert_int_equal(s.n_new, 2);
    assert_int_equal(count_records(st), 2);

    /* a failure first, then a success of that state: the success replaces it; a later
    ** failure does not replace a success */
    rt_result_init(&a, task, "fail", 2, &rt_dev_x86, 0, AT_MEASURE_DEVICE_LOST);
    a.costs[0] = 0.5; /* whatever a failure carries, it is stored as [1e10] */
    assert_int_equal(rec_put(st, &a.r, 1, &s), AT_OK);
    r = find_job(st, "fail-2", &it);
    assert_non_null(r);
    assert_int_equal(r->status, AT_MEASURE_DEVICE_LOST);
    assert_int_equal(r->n_costs, 1);
    assert_true(r->costs[0] == AT_MEASURE_FAIL_COST);
    assert_true(r->mean == AT_MEASURE_FAIL_COST && r->median == AT_MEASURE_FAIL_COST);
    assert_string_equal(r->error_text, "it broke");
    rec_iter_close(it);
    rt_result_init(&b, task, "retry", 2, &rt_dev_x86, 4e-3, 0);
    assert_int_equal(rec_put(st, &b.r, 1, &s), AT_OK);
    assert_int_equal(s.n_replaced, 2);
    rt_result_init(&a, task, "late-fail", 2, &rt_dev_x86, 0, AT_MEASURE_RUN_TIMEOUT);
    assert_int_equal(rec_put(st, &a.r, 1, &s), AT_OK);
    assert_int_equal(s.n_kept, 2);
    assert_int_equal(count_records(st), 3);
    r = find_job(st, "retry-2", &it);
    assert_non_null(r);
    assert_int_equal(r->status, 0);
    assert_int_equal(r->n_costs, 3);
    assert_true(fabs(r->median - 4e-3) < 1e-15);
    rec_iter_close(it);
    rec_store_close(st);
}

static void test_put_validation(void **unused)
{
    rec_store *st = open_new("valid.db");
    int64_t task = rt_task(st, 1, "llvm", "box");
    rt_result x[4];
    rec_device bad_dev = rt_dev_x86;
    rec_put_stats s = {0, 0, 0, 0};
    (void)unused;
    for (int i = 0; i < 4; i++)
        rt_result_init(&x[i], task, "v", i, &rt_dev_x86, 1e-3, 0);
    rec_result rows[4] = {x[0].r, x[1].r, x[2].r, x[3].r};

    rows[2].state = "";
    assert_int_equal(rec_put(st, rows, 4, &s), AT_EINVAL);
    assert_non_null(strstr(rec_store_errmsg(st), "result 2"));
    rows[2].state = x[2].state;
    rows[1].n_costs = 0;
    assert_int_equal(rec_put(st, rows, 4, &s), AT_EINVAL);
    rows[1].n_costs = 3;
    x[3].costs[1] = -1;
    assert_int_equal(rec_put(st, rows, 4, &s), AT_EINVAL);
    x[3].costs[1] = 1e-3;
    bad_dev.n_cores = 0;
    rows[0].device = &bad_dev;
    assert_int_equal(rec_put(st, rows, 4, &s), AT_EINVAL);
    assert_non_null(strstr(rec_store_errmsg(st), "fingerprint"));
    rows[0].device = &rt_dev_x86;
    rows[0].job_id = "";
    assert_int_equal(rec_put(st, rows, 4, &s), AT_EINVAL);
    rows[0].job_id = x[0].job;
    /* a task that does not exist: found inside the transaction, which is rolled back */
    rows[3].task_id = task + 100;
    assert_int_equal(rec_put(st, rows, 4, &s), AT_EINVAL);
    assert_non_null(strstr(rec_store_errmsg(st), "no task"));
    rows[3].task_id = task;
    rows[3].run_id = 777;
    assert_int_equal(rec_put(st, rows, 4, &s), AT_EINVAL);
    assert_non_null(strstr(rec_store_errmsg(st), "no run"));
    rows[3].run_id = 0;
    assert_int_equal(count_records(st), 0);
    assert_int_equal(s.n_new + s.n_kept + s.n_replaced + s.n_same_job, 0);
    assert_int_equal(rec_put(st, rows, 4, &s), AT_OK);
    assert_int_equal(s.n_new, 4);
    assert_int_equal(count_records(st), 4);
    rec_store_close(st);
}

static void test_transactions(void **unused)
{
    rec_store *st = open_new("tx.db");
    int64_t task = rt_task(st, 1, "llvm", "box");
    rt_result a;
    (void)unused;
    assert_int_equal(rec_tx_commit(st), AT_EINVAL);
    assert_int_equal(rec_tx_begin(st), AT_OK);
    assert_int_equal(rec_tx_begin(st), AT_EINVAL);
    /* a new device and a new run inside the transaction, then a rollback: both are gone,
    ** and the store must not remember their ids */
    rt_result_init(&a, task, "tx", 1, &rt_dev_h200, 1e-3, 0);
    assert_int_equal(rec_run_begin(st, "tuner x", "t", &a.r.run_id, NULL), AT_OK);
    assert_int_equal(rec_put(st, &a.r, 1, NULL), AT_OK);
    assert_int_equal(count_records(st), 1);
    rec_tx_rollback(st);
    assert_int_equal(count_records(st), 0);
    a.r.run_id = 0;
    assert_int_equal(rec_put(st, &a.r, 1, NULL), AT_OK);
    assert_int_equal(rec_tx_begin(st), AT_OK);
    rt_result_init(&a, task, "tx", 2, &rt_dev_h200, 1e-3, 0);
    assert_int_equal(rec_put(st, &a.r, 1, NULL), AT_OK);
    assert_int_equal(rec_tx_commit(st), AT_OK);
    assert_int_equal(count_records(st), 2);
    rec_store_close(st);
}

static void test_readonly_refuses_writes(void **unused)
{
    char path[PATH_MAX], err[512];
    rec_store *st = open_new("ro.db");
    int64_t task = rt_task(st, 1, "llvm", "box"), id;
    rt_result a;
    (void)unused;
    rec_store_close(st);
    rt_path(path, dir, "ro.db");
    assert_int_equal(rec_store_open(path, REC_OPEN_READONLY, &st, err, sizeof err), AT_OK);
    rt_result_init(&a, task, "ro", 1, &rt_dev_x86, 1e-3, 0);
    assert_int_equal(rec_put(st, &a.r, 1, NULL), AT_EINVAL);
    assert_non_null(strstr(rec_store_errmsg(st), "read-only"));
    assert_int_equal(rec_run_begin(st, "x", "y", &id, NULL), AT_EINVAL);
    assert_int_equal(count_records(st), 0);
    rec_store_close(st);
}

/* ---- runs, cost models, fingerprints ---- */

static void test_runs_and_models(void **unused)
{
    rec_store *st = open_new("runs.db");
    char uuid[REC_UUID_LEN + 1], path[PATH_MAX], fmt[32];
    int64_t run, id1, id2, n_rec;
    void *blob;
    size_t n;
    int fv;
    (void)unused;
    assert_int_equal(rec_run_begin(st, "tuner --trials 10 x.dag", "0.1", &run, uuid), AT_OK);
    assert_int_equal((int)strlen(uuid), REC_UUID_LEN);
    assert_int_equal(rec_run_end(st, run, "done"), AT_OK);
    assert_int_equal(rec_run_end(st, run, "finished"), AT_EINVAL);
    assert_int_equal(rec_run_end(st, run + 5, "failed"), AT_ENOTFOUND);

    assert_int_equal(rec_model_load(st, "llvm", &blob, &n, fmt, &fv, &n_rec), AT_ENOTFOUND);
    assert_int_equal(rec_model_save(st, "llvm", "xgboost-ubj", 3, 100, "old", 3, &id1), AT_OK);
    assert_int_equal(rec_model_save(st, "llvm", "xgboost-ubj", 4, 250, "newer!", 6, &id2),
                     AT_OK);
    assert_true(id2 > id1);
    assert_int_equal(rec_model_save(st, "cuda", "xgboost-ubj", 4, 9, "gpu", 3, NULL), AT_OK);
    assert_int_equal(rec_model_save(st, "llvm", "", 4, 9, "x", 1, NULL), AT_EINVAL);
    assert_int_equal(rec_model_load(st, "llvm", &blob, &n, fmt, &fv, &n_rec), AT_OK);
    assert_int_equal(n, 6);
    assert_memory_equal(blob, "newer!", 6);
    assert_string_equal(fmt, "xgboost-ubj");
    assert_int_equal(fv, 4);
    assert_int_equal(n_rec, 250);
    at_free(blob);
    rec_store_close(st);
    rt_path(path, dir, "runs.db");
    assert_int_equal(raw_int(path, "SELECT count(*) FROM runs WHERE status = 'done' AND"
                                   " ended_at IS NOT NULL"),
                     1);
}

/* rec_run_reap: a run whose process is gone (here: a child that began it and exited
** without ending it, as SIGKILL leaves one) becomes 'interrupted'; a run whose process lives
** and this process's own run stay 'running'. */
static void test_run_reap(void **unused)
{
    char path[PATH_MAX], err[256];
    int fds[2], n = -1;
    pid_t kids[2];
    rec_store *st;
    int64_t mine;
    (void)unused;
    rt_path(path, dir, "reap.db");
    st = open_new("reap.db");
    rec_store_close(st);
    assert_int_equal(pipe(fds), 0);
    for (int k = 0; k < 2; k++) {
        if ((kids[k] = fork()) == 0) {
            rec_store *c;
            int64_t run;
            char one = 1;
            prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives a failed test */
            if (rec_store_open(path, 0, &c, err, sizeof err) != AT_OK ||
                rec_run_begin(c, "tuner child", "test", &run, NULL) != AT_OK)
                _exit(3);
            rec_store_close(c);
            if (write(fds[1], &one, 1) != 1)
                _exit(4);
            if (k == 1)
                for (;;)
                    pause(); /* alive until killed */
            _exit(0);
        }
        assert_true(kids[k] > 0);
    }
    for (int k = 0; k < 2; k++) {
        char c;
        assert_int_equal(read(fds[0], &c, 1), 1);
    }
    assert_int_equal(waitpid(kids[0], NULL, 0), kids[0]);
    assert_int_equal(rec_store_open(path, 0, &st, err, sizeof err), AT_OK);
    assert_int_equal(rec_run_begin(st, "tuner parent", "test", &mine, NULL), AT_OK);
    assert_int_equal(rec_run_reap(st, &n), AT_OK);
    assert_int_equal(n, 1);
    assert_int_equal(raw_int(path, "SELECT count(*) FROM runs WHERE status = 'interrupted'"
                                   " AND command_line = 'tuner child' AND ended_at > 0"),
                     1);
    assert_int_equal(raw_int(path, "SELECT count(*) FROM runs WHERE status = 'running'"), 2);
    kill(kids[1], SIGKILL);
    assert_int_equal(waitpid(kids[1], NULL, 0), kids[1]);
    assert_int_equal(rec_run_reap(st, &n), AT_OK);
    assert_int_equal(n, 1);
    assert_int_equal(rec_run_reap(st, &n), AT_OK);
    assert_int_equal(n, 0);
    assert_int_equal(raw_int(path, "SELECT count(*) FROM runs WHERE status = 'running'"), 1);
    assert_int_equal(rec_run_end(st, mine, "done"), AT_OK);
    rec_store_close(st);
    close(fds[0]);
    close(fds[1]);
}

static void test_fingerprint(void **unused)
{
    char fp[REC_FP_LEN + 1], want[REC_FP_LEN + 1];
    const char *text = "[\"sm_90\",\"NVIDIA H200\",132,\"6.1.0\",\"550.54\"]";
    rec_device d = rt_dev_h200;
    (void)unused;
    assert_int_equal(rec_device_fingerprint(&d, fp), AT_OK);
    at_sha256_hex(text, strlen(text), REC_FP_LEN / 2, want);
    assert_string_equal(fp, want); /* the documented definition */
    d.driver = "550.90";           /* a driver update is another device */
    assert_int_equal(rec_device_fingerprint(&d, want), AT_OK);
    assert_string_not_equal(fp, want);
    d.driver = NULL;
    assert_int_equal(rec_device_fingerprint(&d, fp), AT_EINVAL);
    assert_int_equal(rec_device_fingerprint(NULL, fp), AT_EINVAL);
}

/* Every failure of rec_best's own allocations gives AT_ENOMEM and leaks nothing. */
static void test_best_survives_oom(void **unused)
{
    rec_store *st = open_new("oom.db");
    int64_t t1 = rt_task(st, 1, "llvm", "box"), t2 = rt_task(st, 2, "llvm", "phone");
    rec_best_query q;
    rt_result a;
    (void)unused;
    for (int i = 0; i < 6; i++) {
        rt_result_init(&a, i % 2 ? t1 : t2, "oom", i, i % 3 ? &rt_dev_x86 : &rt_dev_a76,
                       1e-3 * (i + 1), 0);
        assert_int_equal(rec_put(st, &a.r, 1, NULL), AT_OK);
    }
    memset(&q, 0, sizeof q);
    q.top = 2;
    q.replay = rt_replay;
    for (size_t limit = 0;; limit++) {
        rec_best_result *r = (rec_best_result *)1;
        long live0 = at_test_live_allocs();
        at_err err;
        at_test_alloc_limit(limit);
        err = rec_best(st, &q, &r);
        at_test_alloc_limit(SIZE_MAX);
        if (err == AT_OK) {
            assert_true(r->n_rows >= 3);
            rec_best_free(r);
            assert_int_equal(at_test_live_allocs(), live0);
            break;
        }
        assert_int_equal(err, AT_ENOMEM);
        assert_null(r);
        assert_int_equal(at_test_live_allocs(), live0);
        assert_true(limit < 5000);
    }
    rec_store_close(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_measure_map),
        cmocka_unit_test(test_create_and_reopen),
        cmocka_unit_test(test_open_missing),
        cmocka_unit_test(test_open_foreign_text),
        cmocka_unit_test(test_open_foreign_sqlite),
        cmocka_unit_test(test_open_newer_schema),
        cmocka_unit_test(test_open_empty_file),
        cmocka_unit_test(test_open_damaged),
        cmocka_unit_test(test_migrate_from_v1),
        cmocka_unit_test(test_task_add),
        cmocka_unit_test(test_put_rules),
        cmocka_unit_test(test_put_validation),
        cmocka_unit_test(test_transactions),
        cmocka_unit_test(test_readonly_refuses_writes),
        cmocka_unit_test(test_runs_and_models),
        cmocka_unit_test(test_run_reap),
        cmocka_unit_test(test_fingerprint),
        cmocka_unit_test(test_best_survives_oom),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
