/* records/records_check.c -- the integrity check behind 'tuner db check'.
**
** Three layers, each reported on its own: SQLite's own checks (page structure, indexes,
** foreign keys), the store's invariants on every row (what rec_put guarantees: state
** hashes, costs and their statistics, fingerprints, pools), and, when a replay function
** is given, whether each successful record's state still replays on its task's DAG.  The
** first two are damage; the third is a finding about old records, not damage. */
#include "records_int.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

#define MAX_LINES_PER_KIND 20

typedef struct check_ctx {
    rec_store *st;
    rec_check_report *rep;
    int cap_lines;
    int n_kind[3]; /* lines written per kind: damage, replay, unknown status */
} check_ctx;

enum { K_DAMAGE, K_REPLAY, K_STATUS };

static at_err line(check_ctx *c, int kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static at_err line(check_ctx *c, int kind, const char *fmt, ...)
{
    at_buf b;
    va_list ap;
    char *text;
    if (c->n_kind[kind]++ >= MAX_LINES_PER_KIND)
        return AT_OK;
    at_buf_init(&b);
    va_start(ap, fmt);
    at_buf_vprintf(&b, fmt, ap);
    va_end(ap);
    text = at_buf_take(&b);
    if (text == NULL || at_vec_push(&c->rep->lines, &c->rep->n_lines, &c->cap_lines, text) !=
                            AT_OK) {
        at_free(text);
        return rec__fail(c->st, AT_ENOMEM, "out of memory");
    }
    return AT_OK;
}

static at_err damage(check_ctx *c, const char *what, const char *detail)
{
    c->rep->n_problems++;
    return line(c, K_DAMAGE, "DAMAGE %s: %s", what, detail);
}

static at_err count(rec_store *st, const char *sql, int64_t *out)
{
    sqlite3_stmt *s;
    int rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
    if (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        *out = sqlite3_column_int64(s, 0);
        rc = SQLITE_OK;
    }
    sqlite3_finalize(s);
    return rc == SQLITE_OK ? AT_OK : rec__sqlfail(st, rc, "counting");
}

/* Run a PRAGMA whose rows are findings; 'ok_row' is the single row meaning "fine". */
static at_err pragma_findings(check_ctx *c, const char *sql, const char *what,
                              const char *ok_row)
{
    sqlite3_stmt *s;
    at_err err = AT_OK;
    int rc = sqlite3_prepare_v2(c->st->db, sql, -1, &s, NULL);
    if (rc != SQLITE_OK)
        return rec__sqlfail(c->st, rc, what);
    while (err == AT_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        at_buf b;
        int n = sqlite3_column_count(s);
        const char *first = (const char *)sqlite3_column_text(s, 0);
        if (ok_row && n == 1 && first && strcmp(first, ok_row) == 0)
            continue;
        at_buf_init(&b);
        for (int i = 0; i < n; i++) {
            const char *v = (const char *)sqlite3_column_text(s, i);
            at_buf_printf(&b, "%s%s", i ? " | " : "", v ? v : "NULL");
        }
        err = damage(c, what, b.data ? b.data : "");
        at_buf_fini(&b);
    }
    if (err == AT_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
        if ((rc & 0xff) == SQLITE_CORRUPT || (rc & 0xff) == SQLITE_NOTADB)
            err = damage(c, what, sqlite3_errmsg(c->st->db));
        else
            err = rec__sqlfail(c->st, rc, what);
    }
    sqlite3_finalize(s);
    return err;
}

static int close_enough(double a, double b)
{
    return a == b || fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b));
}

static at_err check_devices(check_ctx *c)
{
    sqlite3_stmt *s;
    at_err err = AT_OK;
    int rc = sqlite3_prepare_v2(c->st->db,
                                "SELECT id, fingerprint, arch, model, n_cores, os, driver"
                                " FROM devices ORDER BY id",
                                -1, &s, NULL);
    if (rc != SQLITE_OK)
        return rec__sqlfail(c->st, rc, "reading devices");
    while (err == AT_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        rec_device d;
        char fp[REC_FP_LEN + 1], detail[256];
        const char *stored = (const char *)sqlite3_column_text(s, 1);
        d.arch = (const char *)sqlite3_column_text(s, 2);
        d.model = (const char *)sqlite3_column_text(s, 3);
        d.n_cores = sqlite3_column_int(s, 4);
        d.os = (const char *)sqlite3_column_text(s, 5);
        d.driver = (const char *)sqlite3_column_text(s, 6);
        if (rec_device_fingerprint(&d, fp) != AT_OK || stored == NULL || strcmp(fp, stored)) {
            snprintf(detail, sizeof detail, "device %lld: stored fingerprint %s, its fields "
                     "give %s", (long long)sqlite3_column_int64(s, 0), stored ? stored : "NULL",
                     fp[0] ? fp : "nothing (a field is missing)");
            err = damage(c, "devices", detail);
        }
    }
    if (err == AT_OK && rc != SQLITE_DONE)
        err = rec__sqlfail(c->st, rc, "reading devices");
    sqlite3_finalize(s);
    return err;
}

static at_err check_pools(check_ctx *c)
{
    int64_t n = 0;
    char detail[128];
    at_err err = count(c->st,
                       "SELECT count(*) FROM (SELECT DISTINCT t.device_key, r.device_id FROM"
                       " records r JOIN tasks t ON t.id = r.task_id EXCEPT SELECT device_key,"
                       " device_id FROM pool_devices)",
                       &n);
    if (err != AT_OK || n == 0)
        return err;
    snprintf(detail, sizeof detail, "%lld (device key, device) pairs of records are missing "
             "from pool_devices", (long long)n);
    return damage(c, "pool_devices", detail);
}

/* Each task's workload key and FLOP count against what its DAG text says of itself: a
** store written by a tool that got them wrong (or edited) would otherwise refuse to tune
** the operator ("is stored with another FLOP count") or never find its records. */
static at_err check_tasks(check_ctx *c, rec_task_fn task, void *ctx)
{
    sqlite3_stmt *s;
    at_err err = AT_OK;
    int rc = sqlite3_prepare_v2(c->st->db,
                                "SELECT id, workload_key, dag, flops FROM tasks ORDER BY id", -1,
                                &s, NULL);
    if (rc != SQLITE_OK)
        return rec__sqlfail(c->st, rc, "reading tasks");
    while (err == AT_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        long long id = sqlite3_column_int64(s, 0);
        const char *key = (const char *)sqlite3_column_text(s, 1);
        const char *dag = (const char *)sqlite3_column_text(s, 2);
        double flops = sqlite3_column_double(s, 3), f = 0;
        char k[REC_KEY_LEN + 1] = "", why[512] = "", detail[900];
        at_err e;
        key = key ? key : "?";
        if (dag == NULL)
            continue; /* rows without a DAG are the row check's finding */
        e = task(ctx, dag, k, &f, why, sizeof why);
        if (e == AT_ENOMEM) {
            err = rec__fail(c->st, AT_ENOMEM, "out of memory");
            break;
        }
        if (e != AT_OK)
            snprintf(detail, sizeof detail, "task %lld (key %s): its DAG text is no DAG: %s", id,
                     key, why[0] ? why : "no reason given");
        else if (strcmp(k, key) != 0)
            snprintf(detail, sizeof detail, "task %lld: workload key %s is not its DAG's (%s)",
                     id, key, k);
        else if (!close_enough(f, flops))
            snprintf(detail, sizeof detail, "task %lld (key %s): FLOP count %.17g is not its "
                     "DAG's (%.17g)", id, key, flops, f);
        else
            continue;
        err = damage(c, "tasks", detail);
    }
    if (err == AT_OK && rc != SQLITE_DONE)
        err = (rc & 0xff) == SQLITE_CORRUPT ? damage(c, "tasks", sqlite3_errmsg(c->st->db))
                                            : rec__sqlfail(c->st, rc, "reading tasks");
    sqlite3_finalize(s);
    return err;
}

/* The invariants rec_put establishes, row by row, and the replay check. */
static at_err check_records(check_ctx *c, rec_replay_fn replay, void *replay_ctx)
{
    sqlite3_stmt *s;
    at_arena a;
    at_err err = AT_OK;
    int rc = sqlite3_prepare_v2(c->st->db,
                                "SELECT r.id, r.job_id, r.state_hash, r.state, r.costs,"
                                " r.mean, r.median, r.error_code, t.dag, t.workload_key"
                                " FROM records r LEFT JOIN tasks t ON t.id = r.task_id"
                                " ORDER BY r.id",
                                -1, &s, NULL);
    if (rc != SQLITE_OK)
        return rec__sqlfail(c->st, rc, "reading records");
    at_arena_init(&a, 0);
    while (err == AT_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        long long id = sqlite3_column_int64(s, 0);
        const char *job = (const char *)sqlite3_column_text(s, 1);
        const char *hash = (const char *)sqlite3_column_text(s, 2);
        const char *state = (const char *)sqlite3_column_text(s, 3);
        const char *costs = (const char *)sqlite3_column_text(s, 4);
        double mean = sqlite3_column_double(s, 5), median = sqlite3_column_double(s, 6);
        int status = sqlite3_column_int(s, 7);
        const char *dag = (const char *)sqlite3_column_text(s, 8);
        const char *key = (const char *)sqlite3_column_text(s, 9);
        char h[33], detail[700], why[512];
        double *cv, m, md;
        int n;
        at_err e;

        at_arena_reset(&a);
        job = job ? job : "?";
        if (state == NULL || hash == NULL) {
            snprintf(detail, sizeof detail, "record %lld (job %s): no state", id, job);
            err = damage(c, "records", detail);
            continue;
        }
        rec__state_hash(state, h);
        if (strcmp(h, hash) != 0) {
            snprintf(detail, sizeof detail, "record %lld (job %s): state hash %s does not "
                     "match its state (%s)", id, job, hash, h);
            if ((err = damage(c, "records", detail)) != AT_OK)
                break;
        }
        e = rec__costs_parse(&a, costs, &cv, &n);
        if (e == AT_ENOMEM) {
            err = rec__fail(c->st, AT_ENOMEM, "out of memory");
            break;
        }
        if (e != AT_OK) {
            snprintf(detail, sizeof detail, "record %lld (job %s): costs are not a JSON array "
                     "of numbers", id, job);
            err = damage(c, "records", detail);
            continue;
        }
        if (status == 0) {
            rec__costs_stats(cv, n, &m, &md);
        } else {
            m = md = AT_MEASURE_FAIL_COST;
        }
        if (!close_enough(m, mean) || !close_enough(md, median)) {
            snprintf(detail, sizeof detail, "record %lld (job %s): mean %.17g / median %.17g "
                     "do not match its costs (%.17g / %.17g)", id, job, mean, median, m, md);
            if ((err = damage(c, "records", detail)) != AT_OK)
                break;
        }
        if (status >= AT_N_MEASURE) {
            c->rep->n_unknown_status++;
            if ((err = line(c, K_STATUS, "NOTE record %lld (job %s): status %d is unknown to "
                            "this build (written by a newer one)", id, job, status)) != AT_OK)
                break;
        }
        if (replay && status == 0 && dag) {
            why[0] = 0;
            if (replay(replay_ctx, dag, state, why, sizeof why) != AT_OK) {
                c->rep->n_unreplayable++;
                if ((err = line(c, K_REPLAY, "STALE record %lld (job %s, task %s): its state "
                                "does not replay on the task's DAG: %s", id, job,
                                key ? key : "?", why[0] ? why : "no reason given")) != AT_OK)
                    break;
            }
        }
    }
    if (err == AT_OK && rc != SQLITE_DONE) {
        if ((rc & 0xff) == SQLITE_CORRUPT)
            err = damage(c, "records", sqlite3_errmsg(c->st->db));
        else
            err = rec__sqlfail(c->st, rc, "reading records");
    }
    sqlite3_finalize(s);
    at_arena_fini(&a);
    return err;
}

at_err rec_store_check(rec_store *st, const rec_checks *chk, rec_check_report *rep)
{
    check_ctx c;
    at_err err;
    int began = 0;

    memset(rep, 0, sizeof *rep);
    memset(&c, 0, sizeof c);
    c.st = st;
    c.rep = rep;
    rep->schema_version = st->disk_version;
    if (!st->in_tx) {
        if ((err = rec__exec(st, "BEGIN")) != AT_OK)
            return err;
        began = 1;
    }
    if ((err = pragma_findings(&c, "PRAGMA integrity_check", "integrity_check", "ok")) !=
            AT_OK ||
        (err = pragma_findings(&c, "PRAGMA foreign_key_check", "foreign_key_check", NULL)) !=
            AT_OK)
        goto out;
    if (rep->n_problems > 0) {
        /* the file is damaged: reading rows through it would report the same damage
        ** again, or worse, read garbage as if it were data */
        goto out;
    }
    if ((err = count(st, "SELECT count(*) FROM records", &rep->n_records)) != AT_OK ||
        (err = count(st, "SELECT count(*) FROM tasks", &rep->n_tasks)) != AT_OK ||
        (err = count(st, "SELECT count(*) FROM devices", &rep->n_devices)) != AT_OK ||
        (err = count(st, "SELECT count(*) FROM runs", &rep->n_runs)) != AT_OK ||
        (err = count(st, "SELECT count(*) FROM cost_models", &rep->n_models)) != AT_OK ||
        (err = check_devices(&c)) != AT_OK || (err = check_pools(&c)) != AT_OK ||
        (chk && chk->task && (err = check_tasks(&c, chk->task, chk->ctx)) != AT_OK) ||
        (err = check_records(&c, chk ? chk->replay : NULL, chk ? chk->ctx : NULL)) != AT_OK)
        goto out;
out:
    if (began)
        sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL);
    if (err != AT_OK && err != AT_ENOMEM && rec__sql_err(sqlite3_errcode(st->db)) == AT_ECORRUPT)
        err = AT_ECORRUPT;
    if (err != AT_OK)
        rec_check_fini(rep);
    return err;
}

void rec_check_fini(rec_check_report *rep)
{
    for (int i = 0; i < rep->n_lines; i++)
        at_free(rep->lines[i]);
    at_free(rep->lines);
    rep->lines = NULL;
    rep->n_lines = 0;
}
