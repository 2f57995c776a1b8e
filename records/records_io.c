/* records/records_io.c -- moving records between stores: merge, JSONL export and import.
**
** The JSONL format (docs/records.md) is one JSON object per line with the keys in one
** fixed order; numbers are written the shortest way that reads back to the same double,
** text fields (the state and the DAG) as JSON strings, so that importing an export and
** exporting again gives the same bytes.  Import and merge store through rec_put inside
** one transaction: either every line lands or none does. */
#include "records_int.h"

#include <math.h>
#include <string.h>

/* ---- the task of the previous record, to skip rec_task_add for runs of one task ---- */

typedef struct task_cache {
    char *workload_key, *target, *device_key;
    int64_t id;
} task_cache;

static void task_cache_fini(task_cache *c)
{
    at_free(c->workload_key);
    at_free(c->target);
    at_free(c->device_key);
    memset(c, 0, sizeof *c);
}

static at_err task_id_of(rec_store *st, task_cache *c, const rec_task *t, int64_t *id)
{
    at_err err;
    if (c->id && strcmp(c->workload_key, t->workload_key) == 0 &&
        strcmp(c->target, t->target) == 0 && strcmp(c->device_key, t->device_key) == 0) {
        *id = c->id;
        return AT_OK;
    }
    task_cache_fini(c);
    if ((err = rec_task_add(st, t, id)) != AT_OK)
        return err;
    c->workload_key = at_strdup(t->workload_key);
    c->target = at_strdup(t->target);
    c->device_key = at_strdup(t->device_key);
    if (c->workload_key && c->target && c->device_key)
        c->id = *id;
    else
        task_cache_fini(c); /* no cache is no harm */
    return AT_OK;
}

static void stats_add(rec_put_stats *to, const rec_put_stats *from)
{
    if (to == NULL)
        return;
    to->n_new += from->n_new;
    to->n_replaced += from->n_replaced;
    to->n_kept += from->n_kept;
    to->n_same_job += from->n_same_job;
}

static void result_from_record(const rec_record *r, int64_t task_id, rec_result *out)
{
    memset(out, 0, sizeof *out);
    out->task_id = task_id;
    out->job_id = r->job_id;
    out->state = r->state;
    out->costs = r->costs;
    out->n_costs = r->n_costs;
    out->status = r->status;
    out->error_text = r->error_text;
    out->device = &r->device;
    out->agent = r->agent;
    out->tuner_version = r->tuner_version;
    out->run_uuid = r->run_uuid;
    out->trial = r->trial;
    out->measured_at = r->measured_at;
    out->stored_at = r->stored_at;
}

/* ---- merge ---- */

static at_err copy_runs(rec_store *dst, rec_store *src)
{
    sqlite3_stmt *s;
    at_err err = AT_OK;
    int rc = sqlite3_prepare_v2(src->db,
                                "SELECT uuid, command_line, tuner_version, host, started_at,"
                                " ended_at, status FROM runs ORDER BY id",
                                -1, &s, NULL);
    if (rc != SQLITE_OK)
        return rec__sqlfail(src, rc, "reading runs");
    while (err == AT_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        const char *t[7];
        for (int i = 0; i < 7; i++)
            t[i] = (const char *)sqlite3_column_text(s, i);
        if (!t[0] || !t[1] || !t[2] || !t[3] || !t[6]) {
            err = rec__fail(dst, AT_ECORRUPT, "%s: a run has a missing field", src->path);
            break;
        }
        err = rec__run_copy(dst, t[0], t[1], t[2], t[3], sqlite3_column_double(s, 4),
                            sqlite3_column_type(s, 5) == SQLITE_NULL
                                ? 0
                                : sqlite3_column_double(s, 5),
                            t[6]);
    }
    if (err == AT_OK && rc != SQLITE_DONE)
        err = rec__sqlfail(src, rc, "reading runs");
    if (err != AT_OK && dst->errmsg[0] == 0)
        snprintf(dst->errmsg, sizeof dst->errmsg, "%s", src->errmsg);
    sqlite3_finalize(s);
    return err;
}

/* The buckets of src's models, added to dst's. */
static at_err copy_buckets(rec_store *dst, rec_store *src)
{
    sqlite3_stmt *s;
    at_err err = AT_OK;
    int rc = sqlite3_prepare_v2(src->db, "SELECT model, dim, value, model_name FROM buckets",
                                -1, &s, NULL);
    if (rc != SQLITE_OK)
        return rec__sqlfail(src, rc, "reading buckets");
    while (err == AT_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        const char *model = (const char *)sqlite3_column_text(s, 0);
        const char *dim = (const char *)sqlite3_column_text(s, 1);
        const char *name = (const char *)sqlite3_column_text(s, 3);
        int64_t v = sqlite3_column_int64(s, 2);
        if (!model || !dim) {
            err = rec__fail(dst, AT_ECORRUPT, "%s: a bucket has a missing field", src->path);
            break;
        }
        err = rec_buckets_put(dst, model, dim, &v, 1, name);
    }
    if (err == AT_OK && rc != SQLITE_DONE)
        err = rec__sqlfail(src, rc, "reading buckets");
    if (err != AT_OK && dst->errmsg[0] == 0)
        snprintf(dst->errmsg, sizeof dst->errmsg, "%s", src->errmsg);
    sqlite3_finalize(s);
    return err;
}

at_err rec_merge(rec_store *dst, rec_store *src, rec_put_stats *stats)
{
    rec_put_stats local = {0, 0, 0, 0};
    task_cache tc;
    rec_iter *it = NULL;
    const rec_record *r;
    at_err err;
    int own;

    memset(&tc, 0, sizeof tc);
    dst->errmsg[0] = 0;
    if ((err = rec__wbegin(dst, &own)) != AT_OK)
        return err;
    if ((err = copy_runs(dst, src)) != AT_OK || (err = copy_buckets(dst, src)) != AT_OK)
        goto out;
    if ((err = rec_iter_open(src, NULL, REC_ORDER_ID, &it)) != AT_OK) {
        snprintf(dst->errmsg, sizeof dst->errmsg, "%s", src->errmsg);
        goto out;
    }
    for (;;) {
        rec_task t;
        rec_result res;
        int64_t task_id;
        if ((err = rec_iter_next(it, &r)) != AT_OK) {
            snprintf(dst->errmsg, sizeof dst->errmsg, "%s", src->errmsg);
            break;
        }
        if (r == NULL)
            break;
        t.workload_key = r->workload_key;
        t.target = r->target;
        t.device_key = r->device_key;
        t.dag = r->dag;
        t.flops = r->flops;
        if ((err = task_id_of(dst, &tc, &t, &task_id)) != AT_OK)
            break;
        result_from_record(r, task_id, &res);
        if ((err = rec_put(dst, &res, 1, &local)) != AT_OK)
            break;
    }
out:
    rec_iter_close(it);
    task_cache_fini(&tc);
    err = rec__wend(dst, own, err);
    if (err == AT_OK)
        stats_add(stats, &local);
    return err;
}

/* ---- export ---- */

static void put_key(at_buf *b, const char *key)
{
    at_buf_putc(b, ',');
    at_buf_json_str(b, key);
    at_buf_putc(b, ':');
}

static void put_str(at_buf *b, const char *key, const char *v)
{
    put_key(b, key);
    if (v)
        at_buf_json_str(b, v);
    else
        at_buf_puts(b, "null");
}

static void put_num(at_buf *b, const char *key, double v)
{
    put_key(b, key);
    at_buf_json_num(b, v);
}

/* One record as one line of JSONL, with its newline.  The key order is part of the
** format. */
static void record_line(at_buf *b, const rec_record *r)
{
    at_buf_printf(b, "{\"v\":%d", REC_JSONL_VERSION);
    put_str(b, "job", r->job_id);
    at_buf_puts(b, ",\"task\":{");
    at_buf_puts(b, "\"workload_key\":");
    at_buf_json_str(b, r->workload_key);
    put_str(b, "target", r->target);
    put_str(b, "device_key", r->device_key);
    put_num(b, "flops", r->flops);
    put_str(b, "dag", r->dag);
    at_buf_puts(b, "},\"device\":{\"fingerprint\":");
    at_buf_json_str(b, r->fingerprint);
    put_str(b, "arch", r->device.arch);
    put_str(b, "model", r->device.model);
    put_key(b, "n_cores");
    at_buf_printf(b, "%d", r->device.n_cores);
    put_str(b, "os", r->device.os);
    put_str(b, "driver", r->device.driver);
    at_buf_putc(b, '}');
    put_str(b, "state", r->state);
    put_key(b, "costs");
    at_buf_putc(b, '[');
    for (int i = 0; i < r->n_costs; i++) {
        if (i)
            at_buf_putc(b, ',');
        at_buf_json_num(b, r->costs[i]);
    }
    at_buf_putc(b, ']');
    put_num(b, "mean", r->mean);
    put_num(b, "median", r->median);
    put_key(b, "error_code");
    at_buf_printf(b, "%d", r->status);
    put_str(b, "error_text", r->error_text);
    put_str(b, "agent", r->agent);
    put_str(b, "tuner_version", r->tuner_version);
    put_str(b, "run", r->run_uuid);
    put_key(b, "trial");
    if (r->trial >= 0)
        at_buf_printf(b, "%lld", (long long)r->trial);
    else
        at_buf_puts(b, "null");
    put_num(b, "measured_at", r->measured_at);
    put_num(b, "stored_at", r->stored_at);
    at_buf_puts(b, "}\n");
}

at_err rec_export_jsonl(rec_store *st, const rec_filter *f, FILE *out, int64_t *n)
{
    rec_iter *it;
    const rec_record *r;
    at_buf line;
    at_err err;
    int64_t count = 0;

    if (n)
        *n = 0;
    if ((err = rec_iter_open(st, f, REC_ORDER_STABLE, &it)) != AT_OK)
        return err;
    at_buf_init(&line);
    while ((err = rec_iter_next(it, &r)) == AT_OK && r != NULL) {
        at_buf_reset(&line);
        record_line(&line, r);
        if (line.err) {
            err = rec__fail(st, AT_ENOMEM, "out of memory");
            break;
        }
        if (fwrite(line.data, 1, line.len, out) != line.len) {
            err = rec__fail(st, AT_EIO, "export: write error");
            break;
        }
        count++;
    }
    at_buf_fini(&line);
    rec_iter_close(it);
    if (err == AT_OK && (fflush(out) != 0 || ferror(out)))
        err = rec__fail(st, AT_EIO, "export: write error");
    if (n)
        *n = count;
    return err;
}

/* ---- import ---- */

/* Where a line is being read, for messages "name:line:col: what". */
typedef struct line_ctx {
    rec_store *st;
    const char *name;
    long lineno;
} line_ctx;

static at_err bad(line_ctx *lc, at_err err, const at_json *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static at_err bad(line_ctx *lc, at_err err, const at_json *at, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return rec__fail(lc->st, err, "%s:%ld:%d: %s", lc->name, lc->lineno, at ? at->col : 1,
                     what);
}

static const char *const top_keys[] = {
    "v",          "job",           "task",  "device", "state",       "costs",
    "mean",       "median",        "error_code", "error_text", "agent", "tuner_version",
    "run",        "trial",         "measured_at", "stored_at",
};
static const char *const task_keys[] = {"workload_key", "target", "device_key", "flops", "dag"};
static const char *const device_keys[] = {"fingerprint", "arch", "model", "n_cores", "os",
                                          "driver"};

static at_err only_keys(line_ctx *lc, const at_json *obj, const char *where,
                        const char *const *keys, size_t n_keys)
{
    for (int i = 0; i < obj->n; i++) {
        size_t k;
        for (k = 0; k < n_keys && strcmp(obj->keys[i], keys[k]) != 0; k++)
            ;
        if (k == n_keys)
            return bad(lc, AT_EPARSE, obj->items[i], "unknown field \"%s\" in %s",
                       obj->keys[i], where);
    }
    return AT_OK;
}

/* A string member: required (error if missing), or optional (NULL if missing or null). */
static at_err get_str(line_ctx *lc, const at_json *obj, const char *key, int required,
                      const char **out)
{
    const at_json *v = at_json_get(obj, key);
    *out = NULL;
    if (v == NULL || (!required && v->type == AT_JSON_NULL)) {
        if (required)
            return bad(lc, AT_EPARSE, obj, "missing field \"%s\"", key);
        return AT_OK;
    }
    if (v->type != AT_JSON_STR)
        return bad(lc, AT_EPARSE, v, "\"%s\" must be a string", key);
    if ((int)strlen(v->str) != v->n)
        return bad(lc, AT_EPARSE, v, "\"%s\" contains a NUL character", key);
    *out = v->str;
    return AT_OK;
}

static at_err get_num(line_ctx *lc, const at_json *obj, const char *key, int required,
                      double *out, int *present)
{
    const at_json *v = at_json_get(obj, key);
    if (present)
        *present = 0;
    if (v == NULL) {
        if (required)
            return bad(lc, AT_EPARSE, obj, "missing field \"%s\"", key);
        return AT_OK;
    }
    if (v->type != AT_JSON_NUM || !isfinite(v->num))
        return bad(lc, AT_EPARSE, v, "\"%s\" must be a finite number", key);
    *out = v->num;
    if (present)
        *present = 1;
    return AT_OK;
}

/* An integer in [lo, hi]; 'null_ok' allows null (then *present is 0). */
static at_err get_int(line_ctx *lc, const at_json *obj, const char *key, int required,
                      int null_ok, int64_t lo, int64_t hi, int64_t *out, int *present)
{
    const at_json *v = at_json_get(obj, key);
    *present = 0;
    if (v == NULL || (null_ok && v->type == AT_JSON_NULL)) {
        if (v == NULL && required)
            return bad(lc, AT_EPARSE, obj, "missing field \"%s\"", key);
        return AT_OK;
    }
    if (v->type != AT_JSON_NUM || !v->is_int || v->i < lo || v->i > hi)
        return bad(lc, AT_EPARSE, v, "\"%s\" must be an integer from %lld to %lld", key,
                   (long long)lo, (long long)hi);
    *out = v->i;
    *present = 1;
    return AT_OK;
}

static at_err get_obj(line_ctx *lc, const at_json *obj, const char *key, const at_json **out)
{
    const at_json *v = at_json_get(obj, key);
    *out = NULL;
    if (v == NULL)
        return bad(lc, AT_EPARSE, obj, "missing field \"%s\"", key);
    if (v->type != AT_JSON_OBJ)
        return bad(lc, AT_EPARSE, v, "\"%s\" must be an object", key);
    *out = v;
    return AT_OK;
}

/* One parsed line: everything rec_task_add and rec_put need. */
typedef struct line_rec {
    rec_task task;
    rec_device dev;
    rec_result res;
} line_rec;

static int close_enough(double a, double b)
{
    return a == b || fabs(a - b) <= 1e-12 * fmax(fabs(a), fabs(b));
}

static at_err parse_line(line_ctx *lc, at_arena *a, const char *text, size_t n, line_rec *lr)
{
    char jerr[256];
    at_json *j;
    const at_json *task, *dev, *costs;
    const char *fp;
    char fp_calc[REC_FP_LEN + 1];
    double mean = 0, median = 0, calc_mean, calc_median, t;
    int64_t iv;
    int has, has_mean, has_median;
    double *cv;
    at_err err;

    memset(lr, 0, sizeof *lr);
    if ((err = at_json_parse(a, text, n, &j, jerr, sizeof jerr)) != AT_OK) {
        const char *colon = strchr(jerr, ':'); /* "1:col: what" -> "col: what" */
        if (err == AT_ENOMEM)
            return rec__fail(lc->st, AT_ENOMEM, "out of memory");
        return rec__fail(lc->st, AT_EPARSE, "%s:%ld:%s", lc->name, lc->lineno,
                         colon ? colon + 1 : jerr);
    }
    if (j->type != AT_JSON_OBJ)
        return bad(lc, AT_EPARSE, j, "a record must be a JSON object");
    if ((err = get_int(lc, j, "v", 1, 0, 0, INT32_MAX, &iv, &has)) != AT_OK)
        return err;
    if (iv > REC_JSONL_VERSION)
        return bad(lc, AT_EVERSION, at_json_get(j, "v"),
                   "format version %lld is newer than this build reads (%d): use a newer tuner",
                   (long long)iv, REC_JSONL_VERSION);
    if (iv < 1)
        return bad(lc, AT_EPARSE, at_json_get(j, "v"), "format version must be 1");
    if ((err = only_keys(lc, j, "the record", top_keys, AT_ARRAY_LEN(top_keys))) != AT_OK)
        return err;

    if ((err = get_obj(lc, j, "task", &task)) != AT_OK ||
        (err = only_keys(lc, task, "\"task\"", task_keys, AT_ARRAY_LEN(task_keys))) != AT_OK ||
        (err = get_str(lc, task, "workload_key", 1, &lr->task.workload_key)) != AT_OK ||
        (err = get_str(lc, task, "target", 1, &lr->task.target)) != AT_OK ||
        (err = get_str(lc, task, "device_key", 1, &lr->task.device_key)) != AT_OK ||
        (err = get_num(lc, task, "flops", 1, &lr->task.flops, NULL)) != AT_OK ||
        (err = get_str(lc, task, "dag", 1, &lr->task.dag)) != AT_OK)
        return err;
    if (!rec__key_ok(lr->task.workload_key))
        return bad(lc, AT_EPARSE, at_json_get(task, "workload_key"),
                   "\"workload_key\" must be %d lower-case hex characters", REC_KEY_LEN);
    if (!lr->task.target[0] || !lr->task.device_key[0] || !lr->task.dag[0])
        return bad(lc, AT_EPARSE, task, "\"target\", \"device_key\" and \"dag\" must not be "
                   "empty");
    if (lr->task.flops < 0)
        return bad(lc, AT_EPARSE, at_json_get(task, "flops"), "\"flops\" must be >= 0");

    if ((err = get_obj(lc, j, "device", &dev)) != AT_OK ||
        (err = only_keys(lc, dev, "\"device\"", device_keys, AT_ARRAY_LEN(device_keys))) !=
            AT_OK ||
        (err = get_str(lc, dev, "fingerprint", 0, &fp)) != AT_OK ||
        (err = get_str(lc, dev, "arch", 1, &lr->dev.arch)) != AT_OK ||
        (err = get_str(lc, dev, "model", 1, &lr->dev.model)) != AT_OK ||
        (err = get_int(lc, dev, "n_cores", 1, 0, 1, INT32_MAX, &iv, &has)) != AT_OK ||
        (err = get_str(lc, dev, "os", 1, &lr->dev.os)) != AT_OK ||
        (err = get_str(lc, dev, "driver", 1, &lr->dev.driver)) != AT_OK)
        return err;
    lr->dev.n_cores = (int)iv;
    if (rec_device_fingerprint(&lr->dev, fp_calc) != AT_OK)
        return rec__fail(lc->st, AT_ENOMEM, "out of memory");
    if (fp && strcmp(fp, fp_calc) != 0)
        return bad(lc, AT_EPARSE, at_json_get(dev, "fingerprint"),
                   "\"fingerprint\" %s does not match the device's fields (they give %s)", fp,
                   fp_calc);

    if ((err = get_str(lc, j, "job", 1, &lr->res.job_id)) != AT_OK ||
        (err = get_str(lc, j, "state", 1, &lr->res.state)) != AT_OK)
        return err;
    if (!lr->res.job_id[0])
        return bad(lc, AT_EPARSE, at_json_get(j, "job"), "\"job\" must not be empty");
    if (!lr->res.state[0])
        return bad(lc, AT_EPARSE, at_json_get(j, "state"), "\"state\" must not be empty");
    if ((err = get_int(lc, j, "error_code", 1, 0, 0, INT32_MAX, &iv, &has)) != AT_OK)
        return err;
    lr->res.status = (int)iv;

    costs = at_json_get(j, "costs");
    if (costs == NULL)
        return bad(lc, AT_EPARSE, j, "missing field \"costs\"");
    if (costs->type != AT_JSON_ARR || costs->n < 1)
        return bad(lc, AT_EPARSE, costs, "\"costs\" must be a non-empty array of seconds");
    if ((cv = at_arena_alloc(a, sizeof *cv * (size_t)costs->n)) == NULL)
        return rec__fail(lc->st, AT_ENOMEM, "out of memory");
    for (int i = 0; i < costs->n; i++) {
        const at_json *c = costs->items[i];
        if (c->type != AT_JSON_NUM || !isfinite(c->num) || c->num < 0)
            return bad(lc, AT_EPARSE, c, "a cost must be a finite number of seconds >= 0");
        cv[i] = c->num;
    }
    lr->res.costs = cv;
    lr->res.n_costs = costs->n;
    if (lr->res.status == 0) {
        rec__costs_stats(cv, costs->n, &calc_mean, &calc_median);
    } else {
        calc_mean = calc_median = AT_MEASURE_FAIL_COST;
    }
    if ((err = get_num(lc, j, "mean", 0, &mean, &has_mean)) != AT_OK ||
        (err = get_num(lc, j, "median", 0, &median, &has_median)) != AT_OK)
        return err;
    if (has_mean && !close_enough(mean, calc_mean))
        return bad(lc, AT_EPARSE, at_json_get(j, "mean"),
                   "\"mean\" %.17g does not match the costs (%.17g)", mean, calc_mean);
    if (has_median && !close_enough(median, calc_median))
        return bad(lc, AT_EPARSE, at_json_get(j, "median"),
                   "\"median\" %.17g does not match the costs (%.17g)", median, calc_median);

    if ((err = get_str(lc, j, "error_text", 0, &lr->res.error_text)) != AT_OK ||
        (err = get_str(lc, j, "agent", 0, &lr->res.agent)) != AT_OK ||
        (err = get_str(lc, j, "tuner_version", 0, &lr->res.tuner_version)) != AT_OK ||
        (err = get_str(lc, j, "run", 0, &lr->res.run_uuid)) != AT_OK)
        return err;
    if (lr->res.run_uuid && !lr->res.run_uuid[0])
        return bad(lc, AT_EPARSE, at_json_get(j, "run"), "\"run\" must be null or an id");
    if ((err = get_int(lc, j, "trial", 0, 1, 0, INT64_MAX, &iv, &has)) != AT_OK)
        return err;
    lr->res.trial = has ? iv : -1;
    t = 0;
    if ((err = get_num(lc, j, "measured_at", 0, &t, &has)) != AT_OK)
        return err;
    if (t < 0)
        return bad(lc, AT_EPARSE, at_json_get(j, "measured_at"), "a time must be >= 0");
    lr->res.measured_at = t;
    t = 0;
    if ((err = get_num(lc, j, "stored_at", 0, &t, &has)) != AT_OK)
        return err;
    if (t < 0)
        return bad(lc, AT_EPARSE, at_json_get(j, "stored_at"), "a time must be >= 0");
    lr->res.stored_at = t;
    lr->res.device = &lr->dev;
    return AT_OK;
}

/* Read one line (without its newline) into 'b'; *eof when there was none. */
static at_err read_line(FILE *in, at_buf *b, int *eof)
{
    char chunk[65536];
    at_buf_reset(b);
    *eof = 1;
    while (fgets(chunk, sizeof chunk, in)) {
        size_t n = strlen(chunk);
        *eof = 0;
        if (n && chunk[n - 1] == '\n') {
            at_buf_put(b, chunk, n - 1);
            break;
        }
        at_buf_put(b, chunk, n);
    }
    if (ferror(in))
        return AT_EIO;
    if (b->err)
        return AT_ENOMEM;
    return AT_OK;
}

static int blank(const at_buf *b)
{
    for (size_t i = 0; i < b->len; i++)
        if (b->data[i] != ' ' && b->data[i] != '\t' && b->data[i] != '\r')
            return 0;
    return 1;
}

/* The task check of one imported line (rec_checks.task).  'last' keeps the DAG text last
** checked and what it says of itself, since lines come grouped by task. */
typedef struct checked_dag {
    char *text;
    char key[REC_KEY_LEN + 1];
    double flops;
} checked_dag;

static at_err check_line(rec_store *st, const line_ctx *lc, const rec_checks *chk,
                         const line_rec *lr, checked_dag *last)
{
    char why[512] = "";
    at_err e;
    if (chk->task == NULL)
        return AT_OK;
    if (last->text == NULL || strcmp(last->text, lr->task.dag) != 0) {
        at_free(last->text);
        last->text = NULL;
        if ((e = chk->task(chk->ctx, lr->task.dag, last->key, &last->flops, why, sizeof why)) !=
            AT_OK)
            return e == AT_ENOMEM ? rec__fail(st, e, "out of memory")
                                  : rec__fail(st, AT_EPARSE, "%s:%ld: the task's DAG text is "
                                              "no DAG: %s", lc->name, lc->lineno,
                                              why[0] ? why : "no reason given");
        if ((last->text = at_strdup(lr->task.dag)) == NULL)
            return rec__fail(st, AT_ENOMEM, "out of memory");
    }
    if (strcmp(last->key, lr->task.workload_key) != 0)
        return rec__fail(st, AT_EPARSE, "%s:%ld: workload key %s is not its DAG's (%s)",
                         lc->name, lc->lineno, lr->task.workload_key, last->key);
    if (!close_enough(last->flops, lr->task.flops))
        return rec__fail(st, AT_EPARSE, "%s:%ld: the task's FLOP count %.17g is not its DAG's "
                         "(%.17g)", lc->name, lc->lineno, lr->task.flops, last->flops);
    return AT_OK;
}

at_err rec_import_jsonl(rec_store *st, const char *name, FILE *in, const rec_checks *chk,
                        rec_put_stats *stats)
{
    rec_put_stats local = {0, 0, 0, 0};
    checked_dag last_dag = {NULL, "", 0};
    line_ctx lc = {st, name ? name : "input", 0};
    task_cache tc;
    at_arena a;
    at_buf line;
    at_err err;
    int own, eof = 0;

    memset(&tc, 0, sizeof tc);
    if ((err = rec__wbegin(st, &own)) != AT_OK)
        return err;
    at_arena_init(&a, 0);
    at_buf_init(&line);
    while (err == AT_OK) {
        line_rec lr;
        if ((err = read_line(in, &line, &eof)) != AT_OK) {
            err = rec__fail(st, err, "%s:%ld: %s", lc.name, lc.lineno + 1,
                            err == AT_EIO ? "read error" : "out of memory");
            break;
        }
        if (eof)
            break;
        lc.lineno++;
        if (blank(&line))
            continue;
        if (memchr(line.data, 0, line.len)) {
            err = rec__fail(st, AT_EPARSE, "%s:%ld:%d: NUL byte in the line", lc.name,
                            lc.lineno, (int)((const char *)memchr(line.data, 0, line.len) -
                                             line.data) + 1);
            break;
        }
        at_arena_reset(&a);
        if ((err = parse_line(&lc, &a, line.data, line.len, &lr)) != AT_OK)
            break;
        if (chk && (err = check_line(st, &lc, chk, &lr, &last_dag)) != AT_OK)
            break;
        if ((err = task_id_of(st, &tc, &lr.task, &lr.res.task_id)) != AT_OK ||
            (err = rec_put(st, &lr.res, 1, &local)) != AT_OK) {
            char keep[sizeof st->errmsg];
            snprintf(keep, sizeof keep, "%s", st->errmsg);
            rec__fail(st, err, "%s:%ld: %s", lc.name, lc.lineno, keep);
            break;
        }
    }
    at_free(last_dag.text);
    at_buf_fini(&line);
    at_arena_fini(&a);
    task_cache_fini(&tc);
    err = rec__wend(st, own, err);
    if (err == AT_OK)
        stats_add(stats, &local);
    return err;
}
