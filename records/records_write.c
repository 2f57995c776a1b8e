/* records/records_write.c -- writing: tasks, devices, runs, results and cost models.
**
** rec_put is the path every measurement takes.  Rows are checked before the transaction
** starts, so a malformed batch writes nothing; inside it, each row is one INSERT, and
** only when a unique constraint fires does the code look at the row it collided with
** (same job id: ignore; same task, state and device: keep the better of the two). */
#include "records_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <signal.h>
#include <sys/random.h>
#include <unistd.h>

/* ---- small helpers ---- */

int rec__key_ok(const char *s)
{
    int i;
    if (s == NULL)
        return 0;
    for (i = 0; s[i]; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return i == REC_KEY_LEN;
}

void rec__state_hash(const char *state, char out[33])
{
    at_sha256_hex(state, strlen(state), 16, out);
}

void rec__costs_stats(const double *c, int n, double *mean, double *median)
{
    double sum = 0, small[16], *v = small;
    for (int i = 0; i < n; i++)
        sum += c[i];
    *mean = sum / n;
    if (n > (int)AT_ARRAY_LEN(small) && (v = at_malloc(sizeof *v * (size_t)n)) == NULL) {
        *median = *mean; /* out of memory for a statistic: the mean is a fair stand-in */
        return;
    }
    memcpy(v, c, sizeof *v * (size_t)n);
    *median = at_median_sort(v, n);
    if (v != small)
        at_free(v);
}

static double now_or(double t)
{
    return t > 0 ? t : at_time_wall_s();
}

/* Step a statement that returns no rows, then reset it. */
static int step_done(sqlite3_stmt *s)
{
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* ---- devices ---- */

at_err rec_device_fingerprint(const rec_device *d, char out[REC_FP_LEN + 1])
{
    at_buf b;
    out[0] = 0;
    if (d == NULL || d->arch == NULL || d->model == NULL || d->os == NULL ||
        d->driver == NULL || d->n_cores < 1)
        return AT_EINVAL;
    at_buf_init(&b);
    at_buf_putc(&b, '[');
    at_buf_json_str(&b, d->arch);
    at_buf_putc(&b, ',');
    at_buf_json_str(&b, d->model);
    at_buf_printf(&b, ",%d,", d->n_cores);
    at_buf_json_str(&b, d->os);
    at_buf_putc(&b, ',');
    at_buf_json_str(&b, d->driver);
    at_buf_putc(&b, ']');
    if (b.err) {
        at_buf_fini(&b);
        return AT_ENOMEM;
    }
    at_sha256_hex(b.data, b.len, REC_FP_LEN / 2, out);
    at_buf_fini(&b);
    return AT_OK;
}

/* Row id of the device (added if new) and its cache slot. */
static at_err device_id(rec_store *st, const rec_device *d, const char *fp, int *slot,
                        int64_t *id)
{
    sqlite3_stmt *s;
    at_err err;
    int rc, i;
    for (i = 0; i < REC_DEV_CACHE; i++) {
        if (strcmp(st->dev_cache[i].fp, fp) == 0) {
            *slot = i;
            *id = st->dev_cache[i].id;
            return AT_OK;
        }
    }
    if ((err = rec__stmt(st, REC_S_DEV_INS, &s)) != AT_OK)
        return err;
    sqlite3_bind_text(s, 1, fp, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, d->arch, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 3, d->model, -1, SQLITE_STATIC);
    sqlite3_bind_int(s, 4, d->n_cores);
    sqlite3_bind_text(s, 5, d->os, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 6, d->driver, -1, SQLITE_STATIC);
    if ((rc = step_done(s)) != SQLITE_OK)
        return rec__sqlfail(st, rc, "adding a device");
    if ((err = rec__stmt(st, REC_S_DEV_GET, &s)) != AT_OK)
        return err;
    sqlite3_bind_text(s, 1, fp, -1, SQLITE_STATIC);
    rc = sqlite3_step(s);
    if (rc != SQLITE_ROW) {
        sqlite3_reset(s);
        return rec__sqlfail(st, rc == SQLITE_DONE ? SQLITE_CORRUPT : rc, "finding a device");
    }
    *id = sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    i = st->dev_next;
    st->dev_next = (st->dev_next + 1) % REC_DEV_CACHE;
    memcpy(st->dev_cache[i].fp, fp, REC_FP_LEN + 1);
    st->dev_cache[i].device_key[0] = 0;
    st->dev_cache[i].id = *id;
    *slot = i;
    return AT_OK;
}

/* The device key of task 'task_id' into st->key_text (or 'buf' when it is too long for
** the cache); AT_EINVAL if there is no such task. */
static at_err task_device_key(rec_store *st, int64_t task_id, at_buf *buf, const char **key)
{
    sqlite3_stmt *s;
    at_err err;
    const unsigned char *k;
    int rc;
    if (st->key_task == task_id) {
        *key = st->key_text;
        return AT_OK;
    }
    if ((err = rec__stmt(st, REC_S_TASK_KEY, &s)) != AT_OK)
        return err;
    sqlite3_bind_int64(s, 1, task_id);
    rc = sqlite3_step(s);
    if (rc != SQLITE_ROW) {
        sqlite3_reset(s);
        if (rc == SQLITE_DONE)
            return rec__fail(st, AT_EINVAL, "%s: no task with id %lld", st->path,
                             (long long)task_id);
        return rec__sqlfail(st, rc, "finding a task");
    }
    k = sqlite3_column_text(s, 0);
    if (k && strlen((const char *)k) < sizeof st->key_text) {
        strcpy(st->key_text, (const char *)k);
        st->key_task = task_id;
        *key = st->key_text;
    } else {
        at_buf_reset(buf);
        at_buf_puts(buf, k ? (const char *)k : "");
        st->key_task = 0;
        *key = buf->data ? buf->data : "";
        if (buf->err) {
            sqlite3_reset(s);
            return rec__fail(st, AT_ENOMEM, "out of memory");
        }
    }
    sqlite3_reset(s);
    return AT_OK;
}

static at_err note_pool(rec_store *st, int slot, const char *device_key, int64_t dev_id,
                        double t)
{
    sqlite3_stmt *s;
    at_err err;
    int rc;
    if (strcmp(st->dev_cache[slot].device_key, device_key) == 0)
        return AT_OK;
    if ((err = rec__stmt(st, REC_S_POOL_INS, &s)) != AT_OK)
        return err;
    sqlite3_bind_text(s, 1, device_key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, dev_id);
    sqlite3_bind_double(s, 3, t);
    if ((rc = step_done(s)) != SQLITE_OK)
        return rec__sqlfail(st, rc, "noting a device's pool");
    if (strlen(device_key) < sizeof st->dev_cache[slot].device_key)
        strcpy(st->dev_cache[slot].device_key, device_key);
    return AT_OK;
}

/* ---- tasks ---- */

at_err rec_task_add(rec_store *st, const rec_task *t, int64_t *id)
{
    sqlite3_stmt *s;
    at_err err;
    int rc, own;
    const char *dag;

    *id = 0;
    if (t == NULL || !rec__key_ok(t->workload_key))
        return rec__fail(st, AT_EINVAL, "task: the workload key must be %d lower-case hex "
                         "characters", REC_KEY_LEN);
    if (t->target == NULL || !t->target[0] || t->device_key == NULL || !t->device_key[0] ||
        t->dag == NULL || !t->dag[0])
        return rec__fail(st, AT_EINVAL, "task %s: target, device key and DAG must not be "
                         "empty", t->workload_key);
    if (!isfinite(t->flops) || t->flops < 0)
        return rec__fail(st, AT_EINVAL, "task %s: FLOP count %g is not a finite number >= 0",
                         t->workload_key, t->flops);
    if ((err = rec__wbegin(st, &own)) != AT_OK)
        return err;
    if ((err = rec__stmt(st, REC_S_TASK_INS, &s)) != AT_OK) {
        goto out;
    }
    sqlite3_bind_text(s, 1, t->workload_key, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, t->target, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 3, t->device_key, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 4, t->dag, -1, SQLITE_STATIC);
    sqlite3_bind_double(s, 5, t->flops);
    sqlite3_bind_double(s, 6, at_time_wall_s());
    if ((rc = step_done(s)) != SQLITE_OK) {
        err = rec__sqlfail(st, rc, "adding a task");
        goto out;
    }
    if ((err = rec__stmt(st, REC_S_TASK_GET, &s)) != AT_OK) {
        goto out;
    }
    sqlite3_bind_text(s, 1, t->workload_key, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, t->target, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 3, t->device_key, -1, SQLITE_STATIC);
    rc = sqlite3_step(s);
    if (rc != SQLITE_ROW) {
        err = rec__sqlfail(st, rc == SQLITE_DONE ? SQLITE_CORRUPT : rc, "finding a task");
        sqlite3_reset(s);
        goto out;
    }
    dag = (const char *)sqlite3_column_text(s, 1);
    if (dag == NULL || strcmp(dag, t->dag) != 0)
        err = rec__fail(st, AT_EEXIST, "task %s (target '%s', device key %s) is stored with "
                        "another DAG text", t->workload_key, t->target, t->device_key);
    else if (sqlite3_column_double(s, 2) != t->flops)
        err = rec__fail(st, AT_EEXIST, "task %s (target '%s', device key %s) is stored with "
                        "another FLOP count (%.17g, not %.17g)", t->workload_key, t->target,
                        t->device_key, sqlite3_column_double(s, 2), t->flops);
    else
        *id = sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
out:
    err = rec__wend(st, own, err);
    if (err != AT_OK)
        *id = 0;
    return err;
}

/* ---- runs ---- */

static void random_hex(char *out, size_t n_bytes)
{
    unsigned char raw[32];
    size_t got = 0;
    while (got < n_bytes) {
        ssize_t r = getrandom(raw + got, n_bytes - got, 0);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    if (got < n_bytes) { /* no getrandom: the clock and pid still make a run id unique */
        uint64_t x = (uint64_t)(at_time_wall_s() * 1e9) ^ ((uint64_t)getpid() << 32);
        for (; got < n_bytes; got++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            raw[got] = (unsigned char)(x >> 56);
        }
    }
    for (size_t i = 0; i < n_bytes; i++)
        sprintf(out + 2 * i, "%02x", raw[i]);
}

static at_err run_insert(rec_store *st, const char *uuid, const char *cmd, const char *version,
                         const char *host, double started, double ended, const char *status,
                         int64_t *id)
{
    sqlite3_stmt *s;
    at_err err;
    int rc;
    if ((err = rec__stmt(st, REC_S_RUN_INS, &s)) != AT_OK)
        return err;
    sqlite3_bind_text(s, 1, uuid, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, cmd, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 3, version, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 4, host, -1, SQLITE_STATIC);
    sqlite3_bind_double(s, 5, started);
    if (ended > 0)
        sqlite3_bind_double(s, 6, ended);
    else
        sqlite3_bind_null(s, 6);
    sqlite3_bind_text(s, 7, status, -1, SQLITE_STATIC);
    if ((rc = step_done(s)) != SQLITE_OK)
        return rec__sqlfail(st, rc, "adding a run");
    if ((err = rec__stmt(st, REC_S_RUN_GET, &s)) != AT_OK)
        return err;
    sqlite3_bind_text(s, 1, uuid, -1, SQLITE_STATIC);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW)
        *id = sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    if (rc != SQLITE_ROW)
        return rec__sqlfail(st, rc == SQLITE_DONE ? SQLITE_CORRUPT : rc, "finding a run");
    return AT_OK;
}

at_err rec__run_copy(rec_store *st, const char *uuid, const char *cmd, const char *version,
                     const char *host, double started, double ended, const char *status)
{
    int64_t id;
    return run_insert(st, uuid, cmd, version, host, started, ended, status, &id);
}

at_err rec_run_begin(rec_store *st, const char *command_line, const char *tuner_version,
                     int64_t *run_id, char uuid[REC_UUID_LEN + 1])
{
    char id[REC_UUID_LEN + 1], host[256];
    at_err err;
    int own;
    *run_id = 0;
    random_hex(id, REC_UUID_LEN / 2);
    if (gethostname(host, sizeof host) != 0)
        strcpy(host, "?");
    host[sizeof host - 1] = 0;
    if ((err = rec__wbegin(st, &own)) != AT_OK)
        return err;
    err = run_insert(st, id, command_line ? command_line : "",
                     tuner_version ? tuner_version : "", host, at_time_wall_s(), 0, "running",
                     run_id);
    if (err == AT_OK) {
        char sql[96];
        snprintf(sql, sizeof sql, "UPDATE runs SET pid = %ld WHERE id = %lld", (long)getpid(),
                 (long long)*run_id);
        err = rec__exec(st, sql);
    }
    if ((err = rec__wend(st, own, err)) != AT_OK) {
        *run_id = 0;
        return err;
    }
    if (uuid)
        memcpy(uuid, id, sizeof id);
    return AT_OK;
}

at_err rec_run_end(rec_store *st, int64_t run_id, const char *status)
{
    sqlite3_stmt *s;
    at_err err;
    int rc, own;
    if (status == NULL || (strcmp(status, "done") && strcmp(status, "failed") &&
                           strcmp(status, "interrupted")))
        return rec__fail(st, AT_EINVAL, "run status must be done, failed or interrupted");
    if ((err = rec__wbegin(st, &own)) != AT_OK)
        return err;
    if ((err = rec__stmt(st, REC_S_RUN_END, &s)) != AT_OK)
        return rec__wend(st, own, err);
    sqlite3_bind_int64(s, 1, run_id);
    sqlite3_bind_double(s, 2, at_time_wall_s());
    sqlite3_bind_text(s, 3, status, -1, SQLITE_STATIC);
    if ((rc = step_done(s)) != SQLITE_OK)
        err = rec__sqlfail(st, rc, "ending a run");
    else if (sqlite3_changes(st->db) == 0)
        err = rec__fail(st, AT_ENOTFOUND, "%s: no run with id %lld", st->path,
                        (long long)run_id);
    return rec__wend(st, own, err);
}

at_err rec_run_reap(rec_store *st, int *n_reaped)
{
    sqlite3_stmt *s = NULL;
    char host[256];
    int64_t ids[256];
    int n = 0, rc, own;
    at_err err;
    if (n_reaped)
        *n_reaped = 0;
    if (gethostname(host, sizeof host) != 0)
        return AT_OK; /* no name to match: nothing is ours to judge */
    host[sizeof host - 1] = 0;
    if ((err = rec__wbegin(st, &own)) != AT_OK)
        return err;
    rc = sqlite3_prepare_v2(st->db,
                            "SELECT id, pid FROM runs WHERE status = 'running' AND host = ?1"
                            " AND pid IS NOT NULL AND pid <> ?2 ORDER BY id",
                            -1, &s, NULL);
    if (rc != SQLITE_OK)
        return rec__wend(st, own, rec__sqlfail(st, rc, "reading runs"));
    sqlite3_bind_text(s, 1, host, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, (sqlite3_int64)getpid());
    while ((rc = sqlite3_step(s)) == SQLITE_ROW && n < (int)AT_ARRAY_LEN(ids)) {
        long long pid = sqlite3_column_int64(s, 1);
        /* gone: no such process (EPERM means one lives, of another user) */
        if (pid > 0 && pid <= INT32_MAX && kill((pid_t)pid, 0) != 0 && errno == ESRCH)
            ids[n++] = sqlite3_column_int64(s, 0);
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        err = rec__sqlfail(st, rc, "reading runs");
    sqlite3_finalize(s);
    for (int i = 0; i < n && err == AT_OK; i++) {
        char sql[320];
        snprintf(sql, sizeof sql,
                 "UPDATE runs SET status = 'interrupted', ended_at = coalesce((SELECT"
                 " max(stored_at) FROM records WHERE run_id = %lld), started_at)"
                 " WHERE id = %lld AND status = 'running'",
                 (long long)ids[i], (long long)ids[i]);
        err = rec__exec(st, sql);
    }
    if ((err = rec__wend(st, own, err)) == AT_OK && n_reaped)
        *n_reaped = n;
    return err;
}

/* Run id for a record that names its run by uuid: a placeholder row when it is new. */
static at_err run_by_uuid(rec_store *st, const char *uuid, double t, int64_t *id)
{
    at_err err;
    if (strcmp(st->run_uuid, uuid) == 0) {
        *id = st->run_id;
        return AT_OK;
    }
    if ((err = run_insert(st, uuid, "", "", "", t, 0, "imported", id)) != AT_OK)
        return err;
    if (strlen(uuid) < sizeof st->run_uuid) {
        strcpy(st->run_uuid, uuid);
        st->run_id = *id;
    }
    return AT_OK;
}

/* ---- results ---- */

static at_err check_row(rec_store *st, int i, const rec_result *r)
{
    char fp[REC_FP_LEN + 1];
    at_err err;
    if (r->task_id <= 0)
        return rec__fail(st, AT_EINVAL, "result %d: no task id", i);
    if (r->job_id == NULL || !r->job_id[0])
        return rec__fail(st, AT_EINVAL, "result %d: no job id", i);
    if (r->state == NULL || !r->state[0])
        return rec__fail(st, AT_EINVAL, "result %d (job %s): no state", i, r->job_id);
    if (r->status < 0)
        return rec__fail(st, AT_EINVAL, "result %d (job %s): status %d is negative", i,
                         r->job_id, r->status);
    if ((err = rec_device_fingerprint(r->device, fp)) != AT_OK)
        return err == AT_ENOMEM ? rec__fail(st, AT_ENOMEM, "out of memory")
                                : rec__fail(st, AT_EINVAL, "result %d (job %s): incomplete "
                                            "device fingerprint (every field set, n_cores >= "
                                            "1)", i, r->job_id);
    if (r->status == 0) {
        if (r->n_costs < 1 || r->costs == NULL)
            return rec__fail(st, AT_EINVAL, "result %d (job %s): a success needs costs", i,
                             r->job_id);
        for (int k = 0; k < r->n_costs; k++)
            if (!isfinite(r->costs[k]) || r->costs[k] < 0)
                return rec__fail(st, AT_EINVAL, "result %d (job %s): cost %d is %g, not a "
                                 "finite number of seconds", i, r->job_id, k, r->costs[k]);
    }
    if (r->trial < -1)
        return rec__fail(st, AT_EINVAL, "result %d (job %s): trial %lld", i, r->job_id,
                         (long long)r->trial);
    if (!isfinite(r->measured_at) || r->measured_at < 0 || !isfinite(r->stored_at) ||
        r->stored_at < 0)
        return rec__fail(st, AT_EINVAL, "result %d (job %s): bad timestamp", i, r->job_id);
    return AT_OK;
}

/* What one row will hold, ready to bind. */
typedef struct row_vals {
    int64_t device_id, run_id;
    char state_hash[33];
    const char *costs;
    double mean, median, measured_at, stored_at;
} row_vals;

static void bind_row(sqlite3_stmt *s, const rec_result *r, const row_vals *v)
{
    sqlite3_bind_int64(s, 1, r->task_id);
    sqlite3_bind_int64(s, 2, v->device_id);
    if (v->run_id > 0)
        sqlite3_bind_int64(s, 3, v->run_id);
    else
        sqlite3_bind_null(s, 3);
    sqlite3_bind_text(s, 4, r->job_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 5, v->state_hash, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 6, r->state, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 7, v->costs, -1, SQLITE_STATIC);
    sqlite3_bind_double(s, 8, v->mean);
    sqlite3_bind_double(s, 9, v->median);
    sqlite3_bind_int(s, 10, r->status);
    sqlite3_bind_text(s, 11, r->error_text ? r->error_text : "", -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 12, r->agent ? r->agent : "", -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 13, r->tuner_version ? r->tuner_version : "", -1, SQLITE_STATIC);
    if (r->trial >= 0)
        sqlite3_bind_int64(s, 14, r->trial);
    else
        sqlite3_bind_null(s, 14);
    sqlite3_bind_double(s, 15, v->measured_at);
    sqlite3_bind_double(s, 16, v->stored_at);
}

/* Is result (status a, mean ma, time ta, job ja) better than (b, mb, tb, jb)?  A total
** order, so whichever arrives first, the same row survives. */
static int better(int a, double ma, double ta, const char *ja, int b, double mb, double tb,
                  const char *jb)
{
    if ((a == 0) != (b == 0))
        return a == 0;
    if (ma != mb)
        return ma < mb;
    if (ta != tb)
        return ta < tb;
    return strcmp(ja, jb) < 0;
}

/* The INSERT hit a unique constraint: same job, or same task+state+device. */
static at_err resolve_conflict(rec_store *st, const rec_result *r, const row_vals *v,
                               rec_put_stats *stats)
{
    sqlite3_stmt *s;
    int64_t old_id;
    at_err err;
    int rc, replace;
    if ((err = rec__stmt(st, REC_S_REC_BY_JOB, &s)) != AT_OK)
        return err;
    sqlite3_bind_text(s, 1, r->job_id, -1, SQLITE_STATIC);
    rc = sqlite3_step(s);
    sqlite3_reset(s);
    if (rc == SQLITE_ROW) {
        stats->n_same_job++;
        return AT_OK;
    }
    if (rc != SQLITE_DONE)
        return rec__sqlfail(st, rc, "looking up a job");
    if ((err = rec__stmt(st, REC_S_REC_BY_KEY, &s)) != AT_OK)
        return err;
    sqlite3_bind_int64(s, 1, r->task_id);
    sqlite3_bind_text(s, 2, v->state_hash, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, v->device_id);
    rc = sqlite3_step(s);
    if (rc != SQLITE_ROW) {
        sqlite3_reset(s);
        return rec__sqlfail(st, rc == SQLITE_DONE ? SQLITE_CORRUPT : rc,
                            "looking up a record of the same state");
    }
    old_id = sqlite3_column_int64(s, 0);
    if (strcmp((const char *)sqlite3_column_text(s, 1), r->state) != 0) {
        sqlite3_reset(s);
        return rec__fail(st, AT_EEXIST, "job %s: two different states share the hash %s",
                         r->job_id, v->state_hash);
    }
    replace = better(r->status, v->mean, v->measured_at, r->job_id, sqlite3_column_int(s, 2),
                     sqlite3_column_double(s, 3), sqlite3_column_double(s, 4),
                     (const char *)sqlite3_column_text(s, 5));
    sqlite3_reset(s);
    if (!replace) {
        stats->n_kept++;
        return AT_OK;
    }
    if ((err = rec__stmt(st, REC_S_REC_UPD, &s)) != AT_OK)
        return err;
    bind_row(s, r, v);
    sqlite3_bind_int64(s, 17, old_id);
    if ((rc = step_done(s)) != SQLITE_OK)
        return rec__sqlfail(st, rc, "replacing a record");
    stats->n_replaced++;
    return AT_OK;
}

static at_err put_one(rec_store *st, const rec_result *r, at_buf *costs, at_buf *tmp,
                      rec_put_stats *stats)
{
    char fp[REC_FP_LEN + 1];
    const char *key = "";
    row_vals v;
    sqlite3_stmt *s;
    at_err err;
    int rc, slot = 0;

    memset(&v, 0, sizeof v);
    v.measured_at = now_or(r->measured_at);
    v.stored_at = now_or(r->stored_at);
    if ((err = rec_device_fingerprint(r->device, fp)) != AT_OK)
        return rec__fail(st, err, "out of memory"); /* its fields were checked already */
    if ((err = device_id(st, r->device, fp, &slot, &v.device_id)) != AT_OK ||
        (err = task_device_key(st, r->task_id, tmp, &key)) != AT_OK ||
        (err = note_pool(st, slot, key, v.device_id, v.stored_at)) != AT_OK)
        return err;
    if (r->run_id > 0)
        v.run_id = r->run_id;
    else if (r->run_uuid && r->run_uuid[0] &&
             (err = run_by_uuid(st, r->run_uuid, v.measured_at, &v.run_id)) != AT_OK)
        return err;
    at_buf_reset(costs);
    if (r->status == 0) {
        at_buf_putc(costs, '[');
        for (int k = 0; k < r->n_costs; k++) {
            if (k)
                at_buf_putc(costs, ',');
            at_buf_json_num(costs, r->costs[k]);
        }
        at_buf_putc(costs, ']');
        rec__costs_stats(r->costs, r->n_costs, &v.mean, &v.median);
    } else {
        at_buf_putc(costs, '[');
        at_buf_json_num(costs, AT_MEASURE_FAIL_COST);
        at_buf_putc(costs, ']');
        v.mean = v.median = AT_MEASURE_FAIL_COST;
    }
    if (costs->err)
        return rec__fail(st, AT_ENOMEM, "out of memory");
    v.costs = costs->data;
    rec__state_hash(r->state, v.state_hash);

    if ((err = rec__stmt(st, REC_S_REC_INS, &s)) != AT_OK)
        return err;
    bind_row(s, r, &v);
    rc = step_done(s);
    if (rc == SQLITE_OK) {
        stats->n_new++;
        return AT_OK;
    }
    if (rc == SQLITE_CONSTRAINT_UNIQUE)
        return resolve_conflict(st, r, &v, stats);
    if (rc == SQLITE_CONSTRAINT_FOREIGNKEY)
        return rec__fail(st, AT_EINVAL, "job %s: no run with id %lld in this store", r->job_id,
                         (long long)r->run_id);
    return rec__sqlfail(st, rc, "adding a record");
}

at_err rec_put(rec_store *st, const rec_result *rows, int n, rec_put_stats *stats)
{
    rec_put_stats local = {0, 0, 0, 0};
    at_buf costs, tmp;
    at_err err = AT_OK;
    int own;

    if (n < 0 || (n > 0 && rows == NULL))
        return rec__fail(st, AT_EINVAL, "rec_put: bad arguments");
    for (int i = 0; i < n; i++)
        if ((err = check_row(st, i, &rows[i])) != AT_OK)
            return err;
    if (n == 0)
        return AT_OK;
    if ((err = rec__wbegin(st, &own)) != AT_OK)
        return err;
    at_buf_init(&costs);
    at_buf_init(&tmp);
    for (int i = 0; i < n && err == AT_OK; i++)
        err = put_one(st, &rows[i], &costs, &tmp, &local);
    at_buf_fini(&costs);
    at_buf_fini(&tmp);
    err = rec__wend(st, own, err);
    if (err == AT_OK && stats) {
        stats->n_new += local.n_new;
        stats->n_replaced += local.n_replaced;
        stats->n_kept += local.n_kept;
        stats->n_same_job += local.n_same_job;
    }
    return err;
}

/* ---- cost models ---- */

at_err rec_model_save(rec_store *st, const char *target, const char *format,
                      int feature_version, int64_t n_records, const void *blob, size_t n,
                      int64_t *id)
{
    sqlite3_stmt *s;
    at_err err;
    int rc, own;
    if (id)
        *id = 0;
    if (target == NULL || !target[0] || format == NULL || !format[0] || strlen(format) > 31 ||
        blob == NULL || n == 0 || n > 0x7fffffff || n_records < 0)
        return rec__fail(st, AT_EINVAL, "rec_model_save: bad arguments");
    if ((err = rec__wbegin(st, &own)) != AT_OK)
        return err;
    rc = sqlite3_prepare_v2(st->db,
                            "INSERT INTO cost_models(target, format, feature_version,"
                            " n_records, created_at, model) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                            -1, &s, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(s, 1, target, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 2, format, -1, SQLITE_STATIC);
        sqlite3_bind_int(s, 3, feature_version);
        sqlite3_bind_int64(s, 4, n_records);
        sqlite3_bind_double(s, 5, at_time_wall_s());
        sqlite3_bind_blob(s, 6, blob, (int)n, SQLITE_STATIC);
        rc = sqlite3_step(s);
        rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_OK)
        err = rec__sqlfail(st, rc, "saving a cost model");
    else if (id)
        *id = sqlite3_last_insert_rowid(st->db);
    return rec__wend(st, own, err);
}

/* ---- buckets ---- */

at_err rec_buckets_put(rec_store *st, const char *model_sig, const char *dim,
                       const int64_t *values, int n, const char *model_name)
{
    sqlite3_stmt *s;
    at_err err;
    int rc = SQLITE_OK, own;
    if (model_sig == NULL || strlen(model_sig) != 32 || dim == NULL || !dim[0] || n < 0 ||
        (n > 0 && values == NULL))
        return rec__fail(st, AT_EINVAL, "rec_buckets_put: bad arguments");
    for (int i = 0; i < n; i++)
        if (values[i] < 1)
            return rec__fail(st, AT_EINVAL, "rec_buckets_put: bucket %lld of '%s' is not >= 1",
                             (long long)values[i], dim);
    if ((err = rec__wbegin(st, &own)) != AT_OK)
        return err;
    rc = sqlite3_prepare_v2(st->db,
                            "INSERT OR IGNORE INTO buckets(model, dim, value, model_name,"
                            " created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                            -1, &s, NULL);
    for (int i = 0; rc == SQLITE_OK && i < n; i++) {
        sqlite3_reset(s);
        sqlite3_bind_text(s, 1, model_sig, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 2, dim, -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 3, values[i]);
        sqlite3_bind_text(s, 4, model_name ? model_name : "", -1, SQLITE_STATIC);
        sqlite3_bind_double(s, 5, at_time_wall_s());
        rc = sqlite3_step(s);
        rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_OK)
        err = rec__sqlfail(st, rc, "recording buckets");
    return rec__wend(st, own, err);
}
