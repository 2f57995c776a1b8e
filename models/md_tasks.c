/* models/md_tasks.c -- the task list: JSON lines out and in (docs/models.md, "Tasks JSONL").
**
** One task per line, an object with "v" (format version, MD_TASKS_VERSION), "key", "name",
** "desc", "tag", "flops", "weight", "tunable", "ops", "uses", "model" and "dag".  The reader
** parses each line's DAG again and refuses a line whose DAG does not give its key, so a file
** edited by hand cannot send schedules to the wrong task. */
#include "models/models.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define MD_TASKS_VERSION 1

double md_task_list_flops(const md_task_list *tl)
{
    double s = 0;
    for (int i = 0; tl && i < tl->n_tasks; i++)
        s += tl->tasks[i].flops * tl->tasks[i].weight;
    return s;
}

void md_task_list_free(md_task_list *tl)
{
    if (tl == NULL)
        return;
    for (int i = 0; i < tl->n_tasks; i++)
        ss_dag_unref(tl->tasks[i].dag);
    at_free(tl->tasks);
    at_arena_fini(&tl->arena);
    at_free(tl);
}

static void json_strs(at_buf *b, char *const *s, int n)
{
    at_buf_putc(b, '[');
    for (int i = 0; i < n; i++) {
        if (i)
            at_buf_putc(b, ',');
        at_buf_json_str(b, s[i]);
    }
    at_buf_putc(b, ']');
}

at_err md_tasks_write_jsonl(const md_task_list *tl, FILE *f)
{
    at_buf b;
    at_buf_init(&b);
    for (int i = 0; i < tl->n_tasks; i++) {
        const md_task *t = &tl->tasks[i];
        at_buf_reset(&b);
        at_buf_printf(&b, "{\"v\":%d,\"key\":", MD_TASKS_VERSION);
        at_buf_json_str(&b, t->key);
        at_buf_puts(&b, ",\"name\":");
        at_buf_json_str(&b, t->name);
        at_buf_puts(&b, ",\"desc\":");
        at_buf_json_str(&b, t->desc);
        at_buf_puts(&b, ",\"tag\":");
        at_buf_json_str(&b, t->tag);
        at_buf_puts(&b, ",\"flops\":");
        at_buf_json_num(&b, t->flops);
        at_buf_printf(&b, ",\"weight\":%d,\"tunable\":%s,\"ops\":", t->weight,
                      t->tunable ? "true" : "false");
        json_strs(&b, t->op_types, t->n_op_types);
        at_buf_puts(&b, ",\"uses\":[");
        for (int u = 0; u < t->n_uses; u++) {
            if (u)
                at_buf_putc(&b, ',');
            json_strs(&b, t->uses[u].nodes, t->uses[u].n_nodes);
        }
        at_buf_puts(&b, "],\"model\":");
        at_buf_json_str(&b, tl->model ? tl->model : "");
        at_buf_puts(&b, ",\"dag\":");
        at_buf_json_str(&b, t->dag_text);
        at_buf_puts(&b, "}\n");
        if (b.err) {
            at_buf_fini(&b);
            return AT_ENOMEM;
        }
        if (fwrite(b.data, 1, b.len, f) != b.len) {
            at_buf_fini(&b);
            return AT_EIO;
        }
    }
    at_buf_fini(&b);
    return fflush(f) == 0 ? AT_OK : AT_EIO;
}

/* ---- reading ---- */

typedef struct rd {
    const char *name;
    int line;
    char *errmsg;
    size_t errmsg_size;
} rd;

static at_err rd_fail(rd *r, const at_json *at, at_err err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static at_err rd_fail(rd *r, const at_json *at, at_err err, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    snprintf(r->errmsg, r->errmsg_size, "%s:%d:%d: %s", r->name, r->line, at ? at->col : 1,
             text);
    return err;
}

static const at_json *member(const at_json *o, const char *key, at_json_type type)
{
    const at_json *v = at_json_get(o, key);
    return v && v->type == type ? v : NULL;
}

static at_err str_list(rd *r, md_task_list *tl, const at_json *a, char ***out, int *n)
{
    *out = NULL;
    *n = 0;
    if (a == NULL)
        return AT_OK;
    *out = at_arena_alloc(&tl->arena, (size_t)(a->n ? a->n : 1) * sizeof **out);
    if (*out == NULL)
        return AT_ENOMEM;
    for (int i = 0; i < a->n; i++) {
        if (a->items[i]->type != AT_JSON_STR)
            return rd_fail(r, a->items[i], AT_EPARSE, "expected a string");
        if (((*out)[i] = at_arena_strdup(&tl->arena, a->items[i]->str)) == NULL)
            return AT_ENOMEM;
    }
    *n = a->n;
    return AT_OK;
}

static at_err read_line(rd *r, md_task_list *tl, const char *text, size_t n)
{
    at_arena ar;
    at_json *j;
    const at_json *v, *key, *dag_t, *wt, *fl;
    char msg[256];
    md_task t;
    ss_dag *dag = NULL;
    at_err err;
    memset(&t, 0, sizeof t);
    at_arena_init(&ar, 0);
    if ((err = at_json_parse(&ar, text, n, &j, msg, sizeof msg)) != AT_OK) {
        if (err != AT_ENOMEM) {
            /* at_json says "1:COL: what" of the one line it saw */
            const char *m = strncmp(msg, "1:", 2) == 0 ? msg + 2 : msg;
            snprintf(r->errmsg, r->errmsg_size, "%s:%d:%s", r->name, r->line, m);
            err = AT_EPARSE;
        }
        goto out;
    }
    if (j->type != AT_JSON_OBJ) {
        err = rd_fail(r, j, AT_EPARSE, "expected an object (one task per line)");
        goto out;
    }
    v = member(j, "v", AT_JSON_NUM);
    if (v == NULL || !v->is_int) {
        err = rd_fail(r, j, AT_EPARSE, "missing format version \"v\"");
        goto out;
    }
    if (v->i > MD_TASKS_VERSION) {
        err = rd_fail(r, v, AT_EVERSION, "format version %lld is newer than this tuner's (%d)",
                      (long long)v->i, MD_TASKS_VERSION);
        goto out;
    }
    key = member(j, "key", AT_JSON_STR);
    dag_t = member(j, "dag", AT_JSON_STR);
    wt = member(j, "weight", AT_JSON_NUM);
    fl = member(j, "flops", AT_JSON_NUM);
    if (key == NULL || dag_t == NULL || wt == NULL) {
        err = rd_fail(r, j, AT_EPARSE, "a task needs \"key\", \"dag\" and \"weight\"");
        goto out;
    }
    if (!wt->is_int || wt->i < 1 || wt->i > 1000000000) {
        err = rd_fail(r, wt, AT_EINVAL, "weight must be a whole number >= 1");
        goto out;
    }
    if ((err = ss_dag_parse(dag_t->str, (size_t)dag_t->n, &dag, msg, sizeof msg)) != AT_OK) {
        err = err == AT_ENOMEM ? err : rd_fail(r, dag_t, AT_EINVAL, "the DAG does not parse: %s", msg);
        goto out;
    }
    if (strcmp(dag->key, key->str) != 0) {
        err = rd_fail(r, key, AT_EINVAL, "the DAG's workload key is %s, not %s", dag->key,
                      key->str);
        goto out;
    }
    if (fl && fabs(fl->num - dag->flops) > 1e-9 * (dag->flops + 1)) {
        err = rd_fail(r, fl, AT_EINVAL, "the DAG has %.17g FLOPs, not %.17g", dag->flops,
                      fl->num);
        goto out;
    }
    memcpy(t.key, dag->key, sizeof t.key);
    t.flops = dag->flops;
    t.weight = (int)wt->i;
    v = member(j, "tunable", AT_JSON_BOOL);
    t.tunable = v ? v->num != 0 : 1;
    {
        const char *nm = (v = member(j, "name", AT_JSON_STR)) ? v->str : "task";
        const char *desc = (v = member(j, "desc", AT_JSON_STR)) ? v->str : "";
        char tag[96];
        snprintf(tag, sizeof tag, "task:%d", (int)floor(log(dag->flops + 1) / log(1.618)));
        t.name = at_arena_strdup(&tl->arena, nm);
        t.desc = at_arena_strdup(&tl->arena, desc);
        t.tag = at_arena_strdup(&tl->arena, (v = member(j, "tag", AT_JSON_STR)) ? v->str : tag);
        t.dag_text = at_arena_strdup(&tl->arena, dag_t->str);
        if (t.name == NULL || t.desc == NULL || t.tag == NULL || t.dag_text == NULL) {
            err = AT_ENOMEM;
            goto out;
        }
    }
    if ((err = str_list(r, tl, member(j, "ops", AT_JSON_ARR), &t.op_types, &t.n_op_types)) !=
        AT_OK)
        goto out;
    if ((v = member(j, "uses", AT_JSON_ARR)) != NULL && v->n > 0) {
        t.uses = at_arena_alloc(&tl->arena, (size_t)v->n * sizeof *t.uses);
        if (t.uses == NULL) {
            err = AT_ENOMEM;
            goto out;
        }
        for (int u = 0; u < v->n; u++) {
            if (v->items[u]->type != AT_JSON_ARR) {
                err = rd_fail(r, v->items[u], AT_EPARSE, "each use is a list of node names");
                goto out;
            }
            if ((err = str_list(r, tl, v->items[u], &t.uses[u].nodes, &t.uses[u].n_nodes)) !=
                AT_OK)
                goto out;
        }
        t.n_uses = v->n;
    }
    if (tl->model == NULL && (v = member(j, "model", AT_JSON_STR)) != NULL &&
        (tl->model = at_arena_strdup(&tl->arena, v->str)) == NULL) {
        err = AT_ENOMEM;
        goto out;
    }
    for (int i = 0; i < tl->n_tasks; i++)
        if (strcmp(tl->tasks[i].key, t.key) == 0) {
            err = rd_fail(r, key, AT_EINVAL, "task %s is listed twice", t.key);
            goto out;
        }
    t.dag = dag;
    if (at_vec_push(&tl->tasks, &tl->n_tasks, &tl->cap_tasks, t) != AT_OK) {
        err = AT_ENOMEM;
        goto out;
    }
    dag = NULL;
out:
    ss_dag_unref(dag);
    at_arena_fini(&ar);
    return err;
}

at_err md_tasks_read_jsonl(const char *name, const char *text, size_t n, md_task_list **out,
                           char *errmsg, size_t errmsg_size)
{
    md_task_list *tl;
    rd r;
    size_t i = 0;
    at_err err = AT_OK;
    *out = NULL;
    if (errmsg_size)
        errmsg[0] = 0;
    if ((tl = at_calloc(1, sizeof *tl)) == NULL)
        return AT_ENOMEM;
    at_arena_init(&tl->arena, 0);
    r.name = name ? name : "tasks";
    r.line = 0;
    r.errmsg = errmsg;
    r.errmsg_size = errmsg_size;
    while (i < n && err == AT_OK) {
        size_t e = i;
        int blank = 1;
        while (e < n && text[e] != '\n')
            e++;
        r.line++;
        for (size_t k = i; k < e; k++)
            if (text[k] != ' ' && text[k] != '\t' && text[k] != '\r')
                blank = 0;
        if (!blank)
            err = read_line(&r, tl, text + i, e - i);
        i = e + 1;
    }
    if (err == AT_OK && tl->n_tasks == 0)
        err = rd_fail(&r, NULL, AT_EINVAL, "no tasks");
    if (err != AT_OK) {
        md_task_list_free(tl);
        return err;
    }
    *out = tl;
    return AT_OK;
}
