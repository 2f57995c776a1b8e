/* records/records_query.c -- reading: decoding rows, iterators, counts, best-schedule
** queries, history and saved cost models.
**
** The best query works per (workload key, target) pair.  The "exact" tasks of a pair are
** those of the device key asked for (all of them when none was asked for); each of their
** device fingerprints with successful records is a group, and a group's rows come from
** the partial index records_best (task_id, device_id, mean) WHERE error_code = 0, so the
** cost of a query grows with the number of groups and skipped rows, not with the store.
** Only when the exact tasks give nothing, and a fallback was asked for, do records of
** other devices of the same architecture count, all of them marked as fallbacks. */
#include "records_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- decoding ---- */

at_err rec__costs_parse(at_arena *a, const char *text, double **out, int *n)
{
    at_json *j;
    double *v;
    *out = NULL;
    *n = 0;
    if (text == NULL || at_json_parse(a, text, strlen(text), &j, NULL, 0) != AT_OK)
        return AT_ECORRUPT;
    if (j->type != AT_JSON_ARR || j->n < 1)
        return AT_ECORRUPT;
    if ((v = at_arena_alloc(a, sizeof *v * (size_t)j->n)) == NULL)
        return AT_ENOMEM;
    for (int i = 0; i < j->n; i++) {
        if (j->items[i]->type != AT_JSON_NUM)
            return AT_ECORRUPT;
        v[i] = j->items[i]->num;
    }
    *out = v;
    *n = j->n;
    return AT_OK;
}

static const char *col_text(sqlite3_stmt *s, int i, at_arena *a, int *oom)
{
    const unsigned char *t = sqlite3_column_text(s, i);
    char *d;
    if (t == NULL)
        return NULL;
    d = at_arena_strndup(a, (const char *)t, (size_t)sqlite3_column_bytes(s, i));
    if (d == NULL)
        *oom = 1;
    return d;
}

at_err rec__record_read(rec_store *st, sqlite3_stmt *s, at_arena *a, rec_record *r)
{
    const char *fp;
    double *costs;
    at_err err;
    int oom = 0;

    memset(r, 0, sizeof *r);
    r->id = sqlite3_column_int64(s, 0);
    r->job_id = col_text(s, 1, a, &oom);
    r->workload_key = col_text(s, 2, a, &oom);
    r->target = col_text(s, 3, a, &oom);
    r->device_key = col_text(s, 4, a, &oom);
    r->dag = col_text(s, 5, a, &oom);
    r->flops = sqlite3_column_double(s, 6);
    fp = (const char *)sqlite3_column_text(s, 7);
    if (fp && strlen(fp) == REC_FP_LEN)
        memcpy(r->fingerprint, fp, REC_FP_LEN + 1);
    r->device.arch = col_text(s, 8, a, &oom);
    r->device.model = col_text(s, 9, a, &oom);
    r->device.n_cores = sqlite3_column_int(s, 10);
    r->device.os = col_text(s, 11, a, &oom);
    r->device.driver = col_text(s, 12, a, &oom);
    r->tuner_version = col_text(s, 13, a, &oom);
    r->agent = col_text(s, 14, a, &oom);
    r->run_uuid = col_text(s, 15, a, &oom);
    r->trial = sqlite3_column_type(s, 16) == SQLITE_NULL ? -1 : sqlite3_column_int64(s, 16);
    r->state = col_text(s, 17, a, &oom);
    r->mean = sqlite3_column_double(s, 19);
    r->median = sqlite3_column_double(s, 20);
    r->status = sqlite3_column_int(s, 21);
    r->error_text = col_text(s, 22, a, &oom);
    r->measured_at = sqlite3_column_double(s, 23);
    r->stored_at = sqlite3_column_double(s, 24);
    if (oom)
        return rec__fail(st, AT_ENOMEM, "out of memory");
    if (!r->job_id || !r->workload_key || !r->target || !r->device_key || !r->dag ||
        !r->state || !r->device.arch || !r->device.model || !r->device.os ||
        !r->device.driver || !r->tuner_version || !r->agent || !r->error_text ||
        !r->fingerprint[0])
        return rec__fail(st, AT_ECORRUPT, "%s: record %lld has a missing field", st->path,
                         (long long)r->id);
    err = rec__costs_parse(a, (const char *)sqlite3_column_text(s, 18), &costs, &r->n_costs);
    if (err == AT_ENOMEM)
        return rec__fail(st, AT_ENOMEM, "out of memory");
    if (err != AT_OK)
        return rec__fail(st, AT_ECORRUPT, "%s: record %lld (job %s): its costs are not a JSON "
                         "array of numbers", st->path, (long long)r->id, r->job_id);
    r->costs = costs;
    return AT_OK;
}

/* ---- SQL text with optional filters ---- */

typedef struct sqlq {
    at_buf sql;
    const char *binds[16];
    int n_binds;
    int has_where;
} sqlq;

static void q_init(sqlq *q, const char *head)
{
    at_buf_init(&q->sql);
    at_buf_puts(&q->sql, head);
    q->n_binds = 0;
    q->has_where = 0;
}

/* Append " WHERE|AND cond" where cond has one '?' for 'value' (skipped when NULL). */
static void q_cond(sqlq *q, const char *cond, const char *value)
{
    const char *qm;
    if (value == NULL && strchr(cond, '?'))
        return;
    at_buf_puts(&q->sql, q->has_where ? " AND " : " WHERE ");
    q->has_where = 1;
    qm = strchr(cond, '?');
    if (qm == NULL) {
        at_buf_puts(&q->sql, cond);
        return;
    }
    at_buf_put(&q->sql, cond, (size_t)(qm - cond));
    q->binds[q->n_binds++] = value;
    at_buf_printf(&q->sql, "?%d", q->n_binds);
    at_buf_puts(&q->sql, qm + 1);
}

static void q_filter(sqlq *q, const rec_filter *f)
{
    if (f == NULL)
        return;
    q_cond(q, "t.workload_key = ?", f->workload_key);
    q_cond(q, "t.target = ?", f->target);
    q_cond(q, "t.device_key = ?", f->device_key);
    q_cond(q, "d.fingerprint = ?", f->fingerprint);
}

static at_err q_prepare(rec_store *st, sqlq *q, sqlite3_stmt **out)
{
    int rc;
    *out = NULL;
    if (q->sql.err)
        return rec__fail(st, AT_ENOMEM, "out of memory");
    rc = sqlite3_prepare_v2(st->db, q->sql.data, -1, out, NULL);
    if (rc != SQLITE_OK) {
        sqlite3_finalize(*out);
        *out = NULL;
        return rec__sqlfail(st, rc, "preparing a query");
    }
    for (int i = 0; i < q->n_binds; i++)
        sqlite3_bind_text(*out, i + 1, q->binds[i], -1, SQLITE_STATIC);
    return AT_OK;
}

static void q_fini(sqlq *q)
{
    at_buf_fini(&q->sql);
}

/* ---- iterators ---- */

struct rec_iter {
    rec_store *st;
    sqlite3_stmt *s;
    at_arena a;
    rec_record rec;
};

at_err rec_iter_open(rec_store *st, const rec_filter *f, rec_order order, rec_iter **out)
{
    rec_iter *it;
    sqlq q;
    at_err err;

    *out = NULL;
    if ((it = at_calloc(1, sizeof *it)) == NULL)
        return rec__fail(st, AT_ENOMEM, "out of memory");
    q_init(&q, "SELECT " REC_RECORD_COLS REC_RECORD_FROM);
    q_filter(&q, f);
    at_buf_puts(&q.sql, order == REC_ORDER_STABLE
                            ? " ORDER BY t.workload_key, t.target, t.device_key, r.job_id"
                            : " ORDER BY r.id");
    err = q_prepare(st, &q, &it->s);
    q_fini(&q);
    if (err != AT_OK) {
        at_free(it);
        return err;
    }
    it->st = st;
    at_arena_init(&it->a, 0);
    *out = it;
    return AT_OK;
}

at_err rec_iter_next(rec_iter *it, const rec_record **rec)
{
    int rc;
    at_err err;
    *rec = NULL;
    at_arena_reset(&it->a);
    rc = sqlite3_step(it->s);
    if (rc == SQLITE_DONE)
        return AT_OK;
    if (rc != SQLITE_ROW)
        return rec__sqlfail(it->st, rc, "reading records");
    if ((err = rec__record_read(it->st, it->s, &it->a, &it->rec)) != AT_OK)
        return err;
    *rec = &it->rec;
    return AT_OK;
}

void rec_iter_close(rec_iter *it)
{
    if (it == NULL)
        return;
    sqlite3_finalize(it->s);
    at_arena_fini(&it->a);
    at_free(it);
}

static at_err count_of(rec_store *st, const char *sql, int64_t *out)
{
    sqlite3_stmt *s;
    int rc;
    if (out == NULL)
        return AT_OK;
    rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
    if (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        *out = sqlite3_column_int64(s, 0);
        rc = SQLITE_OK;
    }
    sqlite3_finalize(s);
    return rc == SQLITE_OK ? AT_OK : rec__sqlfail(st, rc, "counting");
}

at_err rec_store_count(rec_store *st, int64_t *n_records, int64_t *n_tasks, int64_t *n_devices,
                       int64_t *n_runs)
{
    at_err err;
    if ((err = count_of(st, "SELECT count(*) FROM records", n_records)) != AT_OK ||
        (err = count_of(st, "SELECT count(*) FROM tasks", n_tasks)) != AT_OK ||
        (err = count_of(st, "SELECT count(*) FROM devices", n_devices)) != AT_OK)
        return err;
    return count_of(st, "SELECT count(*) FROM runs", n_runs);
}

/* ---- best ---- */

typedef struct best_priv {
    rec_best_result pub; /* first: rec_best_free casts back */
    at_arena a;
    int cap_rows, cap_skipped, cap_notes;
} best_priv;

typedef struct pair_task {
    int64_t id;
    const char *workload_key, *target, *device_key;
} pair_task;

typedef struct best_ctx {
    rec_store *st;
    const rec_best_query *q;
    best_priv *res;
    int top;
    int group;       /* next group number */
    const char **arches; /* for the fallback; NULL until looked up */
    int n_arches;
    int arches_known;
} best_ctx;

static at_err note(best_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static at_err note(best_ctx *c, const char *fmt, ...)
{
    at_buf b;
    va_list ap;
    char *text;
    rec_best_result *r = &c->res->pub;
    at_buf_init(&b);
    va_start(ap, fmt);
    at_buf_vprintf(&b, fmt, ap);
    va_end(ap);
    text = b.err ? NULL : at_arena_strdup(&c->res->a, b.data ? b.data : "");
    at_buf_fini(&b);
    if (text == NULL || at_vec_push(&r->notes, &r->n_notes, &c->res->cap_notes,
                                    (const char *)text) != AT_OK)
        return rec__fail(c->st, AT_ENOMEM, "out of memory");
    return AT_OK;
}

static at_err skip(best_ctx *c, const rec_record *rec, const char *reason)
{
    rec_best_skip k;
    rec_best_result *r = &c->res->pub;
    k.record_id = rec->id;
    k.job_id = rec->job_id;
    k.workload_key = rec->workload_key;
    k.target = rec->target;
    k.device_key = rec->device_key;
    k.reason = at_arena_strdup(&c->res->a, reason);
    if (k.reason == NULL || at_vec_push(&r->skipped, &r->n_skipped, &c->res->cap_skipped, k) !=
                                AT_OK)
        return rec__fail(c->st, AT_ENOMEM, "out of memory");
    return AT_OK;
}

/* Take rows from 's' (ordered best first) until 'top' replay, into group 'group'. */
static at_err collect(best_ctx *c, sqlite3_stmt *s, int group, int fallback, int *n_added)
{
    rec_best_result *r = &c->res->pub;
    char why[512];
    at_err err;
    int rc = SQLITE_DONE;
    *n_added = 0;
    while (*n_added < c->top && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        rec_best_row row;
        memset(&row, 0, sizeof row);
        if ((err = rec__record_read(c->st, s, &c->res->a, &row.rec)) != AT_OK)
            return err;
        if (c->q->replay) {
            why[0] = 0;
            if (c->q->replay(c->q->replay_ctx, row.rec.dag, row.rec.state, why, sizeof why) !=
                AT_OK) {
                if ((err = skip(c, &row.rec, why[0] ? why : "does not replay")) != AT_OK)
                    return err;
                continue;
            }
        }
        row.group = group;
        row.rank = *n_added + 1;
        row.fallback = fallback;
        row.gflops = row.rec.mean > 0 ? row.rec.flops / row.rec.mean / 1e9 : 0;
        if (at_vec_push(&r->rows, &r->n_rows, &c->res->cap_rows, row) != AT_OK)
            return rec__fail(c->st, AT_ENOMEM, "out of memory");
        (*n_added)++;
    }
    if (*n_added < c->top && rc != SQLITE_DONE)
        return rec__sqlfail(c->st, rc, "reading best records");
    return AT_OK;
}

/* The groups of one exact task: one per device fingerprint with successful records. */
static at_err best_exact_task(best_ctx *c, const pair_task *t, int *found)
{
    sqlite3_stmt *devs = NULL, *rows = NULL;
    at_buf fps;
    at_err err = AT_OK;
    int rc, n_groups = 0;

    at_buf_init(&fps);
    rc = sqlite3_prepare_v2(c->st->db,
                            "SELECT d.id, d.fingerprint, d.model, d.os, d.driver FROM devices"
                            " d WHERE d.id IN"
                            " (SELECT device_id FROM records WHERE task_id = ?1 AND"
                            " error_code = 0) AND (?2 IS NULL OR d.fingerprint = ?2)"
                            " ORDER BY d.fingerprint",
                            -1, &devs, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(c->st->db,
                                "SELECT " REC_RECORD_COLS REC_RECORD_FROM
                                " WHERE r.task_id = ?1 AND r.device_id = ?2 AND"
                                " r.error_code = 0 ORDER BY r.mean, r.id",
                                -1, &rows, NULL);
    if (rc != SQLITE_OK) {
        err = rec__sqlfail(c->st, rc, "preparing the best query");
        goto out;
    }
    sqlite3_bind_int64(devs, 1, t->id);
    rec__bind_text(devs, 2, c->q->fingerprint);
    while ((rc = sqlite3_step(devs)) == SQLITE_ROW) {
        int n_added;
        sqlite3_reset(rows);
        sqlite3_bind_int64(rows, 1, t->id);
        sqlite3_bind_int64(rows, 2, sqlite3_column_int64(devs, 0));
        if ((err = collect(c, rows, c->group, 0, &n_added)) != AT_OK)
            goto out;
        if (n_added > 0) {
            c->group++;
            n_groups++;
            const char *drv = (const char *)sqlite3_column_text(devs, 4);
            at_buf_printf(&fps, "%s%s (%s, os %s%s%s)", n_groups > 1 ? ", " : "",
                          (const char *)sqlite3_column_text(devs, 1),
                          (const char *)sqlite3_column_text(devs, 2),
                          (const char *)sqlite3_column_text(devs, 3),
                          drv && drv[0] ? ", driver " : "", drv ? drv : "");
        }
    }
    if (rc != SQLITE_DONE) {
        err = rec__sqlfail(c->st, rc, "reading the devices of a task");
        goto out;
    }
    *found += n_groups;
    if (n_groups > 1)
        err = note(c, "task %s, target '%s': device key %s has records from %d different "
                   "devices: %s; each is listed on its own, never mixed", t->workload_key,
                   t->target, t->device_key, n_groups, fps.data ? fps.data : "");
out:
    at_buf_fini(&fps);
    sqlite3_finalize(devs);
    sqlite3_finalize(rows);
    return err;
}

static int is_exact(const best_ctx *c, const pair_task *t)
{
    return c->q->device_key == NULL || strcmp(t->device_key, c->q->device_key) == 0;
}

/* "pixel7" or "pixel7/0123456789abcdef": the device asked for, for notes. */
static const char *asked_device(best_ctx *c)
{
    const rec_best_query *q = c->q;
    if (q->device_key && q->fingerprint) {
        size_t n = strlen(q->device_key) + strlen(q->fingerprint) + 2;
        char *s = at_arena_alloc(&c->res->a, n);
        if (s)
            snprintf(s, n, "%s/%s", q->device_key, q->fingerprint);
        return s ? s : q->device_key;
    }
    return q->device_key ? q->device_key : q->fingerprint;
}

/* SQL condition (with binds) that excludes the exact device from a fallback. */
static void q_not_exact(sqlq *s, const rec_best_query *q)
{
    if (q->device_key && q->fingerprint) {
        q_cond(s, "NOT (t.device_key = ?", q->device_key);
        at_buf_printf(&s->sql, " AND d.fingerprint = ?%d)", ++s->n_binds);
        s->binds[s->n_binds - 1] = q->fingerprint;
    } else if (q->device_key) {
        q_cond(s, "t.device_key <> ?", q->device_key);
    } else if (q->fingerprint) {
        q_cond(s, "d.fingerprint <> ?", q->fingerprint);
    }
}

static void q_task_ids(sqlq *s, const pair_task *tasks, int n)
{
    at_buf_puts(&s->sql, s->has_where ? " AND r.task_id IN (" : " WHERE r.task_id IN (");
    s->has_where = 1;
    for (int i = 0; i < n; i++)
        at_buf_printf(&s->sql, "%s%lld", i ? ", " : "", (long long)tasks[i].id);
    at_buf_putc(&s->sql, ')');
}

#define MAX_ARCHES 16

static at_err lookup_arches(best_ctx *c)
{
    const rec_best_query *q = c->q;
    sqlite3_stmt *s;
    int rc;
    c->arches_known = 1;
    c->arches = at_arena_alloc(&c->res->a, sizeof *c->arches * MAX_ARCHES);
    if (c->arches == NULL)
        return rec__fail(c->st, AT_ENOMEM, "out of memory");
    if (q->arch) {
        c->arches[0] = q->arch;
        c->n_arches = 1;
        return AT_OK;
    }
    if (q->fingerprint)
        rc = sqlite3_prepare_v2(c->st->db,
                                "SELECT DISTINCT arch FROM devices WHERE fingerprint = ?1", -1,
                                &s, NULL);
    else
        rc = sqlite3_prepare_v2(c->st->db,
                                "SELECT DISTINCT d.arch FROM pool_devices p JOIN devices d ON"
                                " d.id = p.device_id WHERE p.device_key = ?1 ORDER BY d.arch",
                                -1, &s, NULL);
    if (rc != SQLITE_OK)
        return rec__sqlfail(c->st, rc, "preparing the architecture lookup");
    rec__bind_text(s, 1, q->fingerprint ? q->fingerprint : q->device_key);
    while (c->n_arches < MAX_ARCHES && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        int oom = 0;
        const char *a = col_text(s, 0, &c->res->a, &oom);
        if (oom) {
            sqlite3_finalize(s);
            return rec__fail(c->st, AT_ENOMEM, "out of memory");
        }
        if (a)
            c->arches[c->n_arches++] = a;
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW)
        return rec__sqlfail(c->st, rc, "looking up architectures");
    return AT_OK;
}

/* Successful records of the pair on other devices: for a fallback ('fallback' 1: only the
** same architecture, taken as rows) or for a hint (listed in a note). */
static at_err best_other_devices(best_ctx *c, const pair_task *tasks, int n, int fallback,
                                 int *found)
{
    const rec_best_query *q = c->q;
    const char *asked = asked_device(c);
    sqlite3_stmt *s = NULL;
    sqlq sq;
    at_buf list;
    at_err err;
    int rc, n_added = 0;

    at_buf_init(&list);
    if (fallback) {
        q_init(&sq, "SELECT " REC_RECORD_COLS REC_RECORD_FROM);
        q_task_ids(&sq, tasks, n);
        q_cond(&sq, "r.error_code = 0", NULL);
        q_not_exact(&sq, q);
        at_buf_puts(&sq.sql, " AND d.arch IN (");
        for (int i = 0; i < c->n_arches; i++) {
            sq.binds[sq.n_binds++] = c->arches[i];
            at_buf_printf(&sq.sql, "%s?%d", i ? ", " : "", sq.n_binds);
        }
        at_buf_puts(&sq.sql, ") ORDER BY r.mean, r.id");
    } else {
        q_init(&sq, "SELECT DISTINCT t.device_key, d.fingerprint, d.arch, d.model"
                    REC_RECORD_FROM);
        q_task_ids(&sq, tasks, n);
        q_cond(&sq, "r.error_code = 0", NULL);
        q_not_exact(&sq, q);
        at_buf_puts(&sq.sql, " ORDER BY t.device_key, d.fingerprint LIMIT 8");
    }
    err = q_prepare(c->st, &sq, &s);
    q_fini(&sq);
    if (err != AT_OK)
        goto out;
    if (fallback) {
        if ((err = collect(c, s, c->group, 1, &n_added)) != AT_OK)
            goto out;
        if (n_added == 0) {
            err = note(c, "task %s, target '%s': nothing measured on %s, and no record of the "
                       "same architecture either", tasks[0].workload_key, tasks[0].target,
                       asked);
            goto out;
        }
        c->group++;
        *found += 1;
        for (int i = c->res->pub.n_rows - n_added; i < c->res->pub.n_rows; i++) {
            const rec_record *r = &c->res->pub.rows[i].rec;
            at_buf_printf(&list, "%s%s/%s (%s, %s)", i > c->res->pub.n_rows - n_added ? ", " : "",
                          r->device_key, r->fingerprint, r->device.arch, r->device.model);
        }
        err = note(c, "task %s, target '%s': nothing measured on %s; FALLBACK to records of the "
                   "same architecture measured on %s", tasks[0].workload_key, tasks[0].target,
                   asked, list.data ? list.data : "");
        goto out;
    }
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        at_buf_printf(&list, "%s%s/%s (%s, %s)", n_added ? ", " : "",
                      (const char *)sqlite3_column_text(s, 0),
                      (const char *)sqlite3_column_text(s, 1),
                      (const char *)sqlite3_column_text(s, 2),
                      (const char *)sqlite3_column_text(s, 3));
        n_added++;
    }
    if (rc != SQLITE_DONE) {
        err = rec__sqlfail(c->st, rc, "listing other devices");
        goto out;
    }
    if (n_added)
        err = note(c, "task %s, target '%s': nothing measured on %s; other devices have records: "
                   "%s (--fallback arch uses one of the same architecture)",
                   tasks[0].workload_key, tasks[0].target, asked, list.data);
    else
        err = note(c, "task %s, target '%s': no successful record on %s", tasks[0].workload_key,
                   tasks[0].target, asked);
out:
    sqlite3_finalize(s);
    at_buf_fini(&list);
    return err;
}

static at_err best_pair(best_ctx *c, const pair_task *tasks, int n)
{
    const rec_best_query *q = c->q;
    int found = 0, skipped0 = c->res->pub.n_skipped, has_exact = 0;
    at_err err;
    for (int i = 0; i < n; i++) {
        if (!is_exact(c, &tasks[i]))
            continue;
        has_exact = 1;
        if ((err = best_exact_task(c, &tasks[i], &found)) != AT_OK)
            return err;
    }
    if (found > 0)
        return AT_OK;
    if (c->res->pub.n_skipped > skipped0 &&
        (err = note(c, "task %s, target '%s': every successful record on %s was skipped because "
                    "its state does not replay on the task's DAG", tasks[0].workload_key,
                    tasks[0].target, q->device_key || q->fingerprint ? asked_device(c)
                                                                     : "any device")) != AT_OK)
        return err;
    if (q->device_key == NULL && q->fingerprint == NULL)
        return c->res->pub.n_skipped > skipped0
                   ? AT_OK
                   : note(c, "task %s, target '%s': no successful record", tasks[0].workload_key,
                          tasks[0].target);
    if (q->fallback == REC_FALLBACK_ARCH) {
        if (!c->arches_known && (err = lookup_arches(c)) != AT_OK)
            return err;
        if (c->n_arches == 0)
            return note(c, "task %s, target '%s': nothing measured on %s, and its architecture "
                        "is unknown to this store (give --arch)", tasks[0].workload_key,
                        tasks[0].target, asked_device(c));
        return best_other_devices(c, tasks, n, 1, &found);
    }
    /* A broad query (no task named) stays quiet about tasks never tuned on the device
    ** asked for; a task it was tuned on, or the task asked for, gets its note. */
    if (q->workload_key == NULL && !has_exact)
        return AT_OK;
    return best_other_devices(c, tasks, n, 0, &found);
}

/* When a task key matches nothing for the target asked for: say which targets it has. */
static at_err note_other_targets(best_ctx *c)
{
    sqlite3_stmt *s;
    at_buf list;
    at_err err = AT_OK;
    int rc, n = 0;
    rc = sqlite3_prepare_v2(c->st->db,
                            "SELECT DISTINCT target FROM tasks WHERE workload_key = ?1"
                            " ORDER BY target",
                            -1, &s, NULL);
    if (rc != SQLITE_OK)
        return rec__sqlfail(c->st, rc, "listing targets");
    at_buf_init(&list);
    sqlite3_bind_text(s, 1, c->q->workload_key, -1, SQLITE_STATIC);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW)
        at_buf_printf(&list, "%s'%s'", n++ ? ", " : "", (const char *)sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE)
        err = rec__sqlfail(c->st, rc, "listing targets");
    else if (n)
        err = note(c, "task %s has no records for target '%s'; it has some for %s (not shown)",
                   c->q->workload_key, c->q->target, list.data);
    else
        err = note(c, "no task %s in this store", c->q->workload_key);
    at_buf_fini(&list);
    return err;
}

at_err rec_best(rec_store *st, const rec_best_query *q, rec_best_result **out)
{
    best_priv *res;
    best_ctx c;
    sqlite3_stmt *s = NULL;
    sqlq sq;
    pair_task *tasks = NULL;
    int n_tasks = 0, cap_tasks = 0, rc;
    at_err err;

    *out = NULL;
    if (q == NULL)
        return rec__fail(st, AT_EINVAL, "rec_best: no query");
    if (q->fallback == REC_FALLBACK_ARCH && q->device_key == NULL && q->fingerprint == NULL)
        return rec__fail(st, AT_EINVAL, "a fallback needs the device asked for (a device key "
                         "or a fingerprint)");
    if ((res = at_calloc(1, sizeof *res)) == NULL)
        return rec__fail(st, AT_ENOMEM, "out of memory");
    at_arena_init(&res->a, 0);
    memset(&c, 0, sizeof c);
    c.st = st;
    c.q = q;
    c.res = res;
    c.top = q->top < 1 ? 1 : q->top;

    /* A read transaction, so that every part of the answer sees the same snapshot. */
    if (!st->in_tx && (err = rec__exec(st, "BEGIN")) != AT_OK)
        goto fail;
    q_init(&sq, "SELECT t.id, t.workload_key, t.target, t.device_key FROM tasks t");
    q_cond(&sq, "t.workload_key = ?", q->workload_key);
    q_cond(&sq, "t.target = ?", q->target);
    at_buf_puts(&sq.sql, " ORDER BY t.workload_key, t.target, t.device_key");
    err = q_prepare(st, &sq, &s);
    q_fini(&sq);
    if (err != AT_OK)
        goto fail_tx;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        pair_task t;
        int oom = 0;
        t.id = sqlite3_column_int64(s, 0);
        t.workload_key = col_text(s, 1, &res->a, &oom);
        t.target = col_text(s, 2, &res->a, &oom);
        t.device_key = col_text(s, 3, &res->a, &oom);
        if (oom || !t.workload_key || !t.target || !t.device_key ||
            at_vec_push(&tasks, &n_tasks, &cap_tasks, t) != AT_OK) {
            err = rec__fail(st, AT_ENOMEM, "out of memory");
            goto fail_tx;
        }
    }
    if (rc != SQLITE_DONE) {
        err = rec__sqlfail(st, rc, "reading tasks");
        goto fail_tx;
    }
    sqlite3_finalize(s);
    s = NULL;
    if (n_tasks == 0) {
        if (q->workload_key && q->target)
            err = note_other_targets(&c);
        else if (q->workload_key)
            err = note(&c, "no task %s in this store", q->workload_key);
        else if (q->target)
            err = note(&c, "no task for target '%s' in this store", q->target);
        else
            err = note(&c, "the store holds no tasks");
        if (err != AT_OK)
            goto fail_tx;
    }
    for (int i = 0, j; i < n_tasks; i = j) {
        for (j = i + 1; j < n_tasks && strcmp(tasks[j].workload_key, tasks[i].workload_key) == 0 &&
                        strcmp(tasks[j].target, tasks[i].target) == 0;
             j++)
            ;
        if ((err = best_pair(&c, tasks + i, j - i)) != AT_OK)
            goto fail_tx;
    }
    if (res->pub.n_rows == 0 && res->pub.n_notes == 0 &&
        (err = note(&c, "no successful record matches%s%s", q->device_key ? " on device " : "",
                    q->device_key ? q->device_key : "")) != AT_OK)
        goto fail_tx;
    if (!st->in_tx)
        sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL);
    at_free(tasks);
    *out = &res->pub;
    return AT_OK;
fail_tx:
    sqlite3_finalize(s);
    if (!st->in_tx)
        sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
fail:
    at_free(tasks);
    rec_best_free(&res->pub);
    return err;
}

void rec_best_free(rec_best_result *r)
{
    best_priv *p = (best_priv *)r;
    if (p == NULL)
        return;
    at_free(p->pub.rows);
    at_free(p->pub.skipped);
    at_free(p->pub.notes);
    at_arena_fini(&p->a);
    at_free(p);
}

/* ---- history ---- */

typedef struct hist_priv {
    rec_history pub; /* first: rec_history_free casts back */
    at_arena a;
    int cap_groups;
} hist_priv;

at_err rec_history_get(rec_store *st, const rec_filter *f, rec_history **out)
{
    hist_priv *h;
    sqlite3_stmt *s = NULL;
    sqlq sq;
    rec_history_group *g = NULL;
    int rc, cap_points = 0;
    at_err err;

    *out = NULL;
    if ((h = at_calloc(1, sizeof *h)) == NULL)
        return rec__fail(st, AT_ENOMEM, "out of memory");
    at_arena_init(&h->a, 0);
    q_init(&sq, "SELECT t.workload_key, t.target, t.device_key, t.flops, d.fingerprint, d.arch,"
                " d.model, d.n_cores, d.os, d.driver, r.trial, r.measured_at, r.mean,"
                " r.error_code, r.job_id" REC_RECORD_FROM);
    q_filter(&sq, f);
    at_buf_puts(&sq.sql, " ORDER BY t.workload_key, t.target, t.device_key, d.fingerprint,"
                         " r.trial IS NULL, r.trial, r.measured_at, r.id");
    err = q_prepare(st, &sq, &s);
    q_fini(&sq);
    if (err != AT_OK)
        goto fail;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        const char *key = (const char *)sqlite3_column_text(s, 0);
        const char *target = (const char *)sqlite3_column_text(s, 1);
        const char *dkey = (const char *)sqlite3_column_text(s, 2);
        const char *fp = (const char *)sqlite3_column_text(s, 4);
        rec_history_point p;
        int oom = 0;
        if (!key || !target || !dkey || !fp) {
            err = rec__fail(st, AT_ECORRUPT, "%s: a record has a missing field", st->path);
            goto fail;
        }
        if (g == NULL || strcmp(g->workload_key, key) || strcmp(g->target, target) ||
            strcmp(g->device_key, dkey) || strcmp(g->fingerprint, fp)) {
            rec_history_group ng;
            memset(&ng, 0, sizeof ng);
            ng.workload_key = col_text(s, 0, &h->a, &oom);
            ng.target = col_text(s, 1, &h->a, &oom);
            ng.device_key = col_text(s, 2, &h->a, &oom);
            ng.flops = sqlite3_column_double(s, 3);
            snprintf(ng.fingerprint, sizeof ng.fingerprint, "%s", fp);
            ng.device.arch = col_text(s, 5, &h->a, &oom);
            ng.device.model = col_text(s, 6, &h->a, &oom);
            ng.device.n_cores = sqlite3_column_int(s, 7);
            ng.device.os = col_text(s, 8, &h->a, &oom);
            ng.device.driver = col_text(s, 9, &h->a, &oom);
            if (oom || at_vec_push(&h->pub.groups, &h->pub.n_groups, &h->cap_groups, ng) !=
                           AT_OK) {
                err = rec__fail(st, AT_ENOMEM, "out of memory");
                goto fail;
            }
            g = &h->pub.groups[h->pub.n_groups - 1];
            cap_points = 0;
        }
        p.trial = sqlite3_column_type(s, 10) == SQLITE_NULL ? -1 : sqlite3_column_int64(s, 10);
        p.measured_at = sqlite3_column_double(s, 11);
        p.cost = sqlite3_column_double(s, 12);
        p.status = sqlite3_column_int(s, 13);
        p.job_id = col_text(s, 14, &h->a, &oom);
        p.best = g->n_points ? g->points[g->n_points - 1].best : AT_MEASURE_FAIL_COST;
        if (p.status == 0 && p.cost < p.best)
            p.best = p.cost;
        if (p.status != 0)
            g->n_failed++;
        if (oom || at_vec_push(&g->points, &g->n_points, &cap_points, p) != AT_OK) {
            err = rec__fail(st, AT_ENOMEM, "out of memory");
            goto fail;
        }
    }
    if (rc != SQLITE_DONE) {
        err = rec__sqlfail(st, rc, "reading the history");
        goto fail;
    }
    sqlite3_finalize(s);
    *out = &h->pub;
    return AT_OK;
fail:
    sqlite3_finalize(s);
    rec_history_free(&h->pub);
    return err;
}

void rec_history_free(rec_history *hist)
{
    hist_priv *h = (hist_priv *)hist;
    if (h == NULL)
        return;
    for (int i = 0; i < h->pub.n_groups; i++)
        at_free(h->pub.groups[i].points);
    at_free(h->pub.groups);
    at_arena_fini(&h->a);
    at_free(h);
}

/* ---- cost models ---- */

at_err rec_model_load(rec_store *st, const char *target, void **blob, size_t *n,
                      char format[32], int *feature_version, int64_t *n_records)
{
    sqlite3_stmt *s;
    at_err err = AT_OK;
    int rc;
    *blob = NULL;
    rc = sqlite3_prepare_v2(st->db,
                            "SELECT model, format, feature_version, n_records FROM cost_models"
                            " WHERE target = ?1 ORDER BY created_at DESC, id DESC LIMIT 1",
                            -1, &s, NULL);
    if (rc != SQLITE_OK)
        return rec__sqlfail(st, rc, "preparing a model query");
    rec__bind_text(s, 1, target);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        int bytes = sqlite3_column_bytes(s, 0);
        const void *p = sqlite3_column_blob(s, 0);
        if ((*blob = at_malloc((size_t)bytes + 1)) == NULL) {
            err = rec__fail(st, AT_ENOMEM, "out of memory");
        } else {
            if (bytes)
                memcpy(*blob, p, (size_t)bytes);
            if (n)
                *n = (size_t)bytes;
            if (format)
                snprintf(format, 32, "%s", (const char *)sqlite3_column_text(s, 1));
            if (feature_version)
                *feature_version = sqlite3_column_int(s, 2);
            if (n_records)
                *n_records = sqlite3_column_int64(s, 3);
        }
    } else if (rc == SQLITE_DONE) {
        err = rec__fail(st, AT_ENOTFOUND, "%s: no cost model for target '%s'", st->path,
                        target ? target : "");
    } else {
        err = rec__sqlfail(st, rc, "loading a cost model");
    }
    sqlite3_finalize(s);
    return err;
}

/* ---- buckets ---- */

at_err rec_buckets_get(rec_store *st, const char *model_sig, const char *dim, int64_t *values,
                       int max, int *n)
{
    sqlite3_stmt *s;
    int rc, k = 0;
    *n = 0;
    rc = sqlite3_prepare_v2(st->db,
                            "SELECT value FROM buckets WHERE model = ?1 AND dim = ?2"
                            " ORDER BY value",
                            -1, &s, NULL);
    if (rc != SQLITE_OK)
        return rec__sqlfail(st, rc, "preparing a bucket query");
    rec__bind_text(s, 1, model_sig);
    rec__bind_text(s, 2, dim);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (k < max)
            values[k] = sqlite3_column_int64(s, 0);
        k++;
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE)
        return rec__sqlfail(st, rc, "reading buckets");
    *n = k;
    return AT_OK;
}
