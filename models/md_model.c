/* models/md_model.c -- loading a model: decode (md_onnx.c), prepare (md_graph.c) and extract
** the tasks (md_extract.c); and what the model object answers. */
#include "models/md_int.h"

#include <stdio.h>
#include <string.h>

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* Decode, prepare, plan the layout, rewrite the Winograd convolutions named in sel[n_sel]
** (all eligible ones when n_sel < 0, none when 0) and extract. */
static at_err load_one(const void *bytes, size_t n, const char *name, const md_model_opts *opts,
                       int n_sel, const char *const *sel, md_model **out, char *errmsg,
                       size_t errmsg_size)
{
    md_model *m;
    at_err err;
    *out = NULL;
    if ((m = at_calloc(1, sizeof *m)) == NULL)
        return AT_ENOMEM;
    if ((m->tasks = at_calloc(1, sizeof *m->tasks)) == NULL) {
        at_free(m);
        return AT_ENOMEM;
    }
    at_arena_init(&m->tasks->arena, 0);
    if ((m->tasks->model = at_arena_strdup(&m->tasks->arena, name)) == NULL) {
        err = AT_ENOMEM;
        goto fail;
    }
    err = md__onnx_decode(bytes, n, name, opts, &m->g, errmsg, errmsg_size);
    if (err != AT_OK)
        goto fail;
    if ((err = md__graph_prepare(m->g, errmsg, errmsg_size)) != AT_OK)
        goto fail;
    if ((err = md__plan_layout(m->g, opts ? opts->layout : MD_LAYOUT_NHWC, errmsg,
                               errmsg_size)) != AT_OK)
        goto fail;
    for (int i = 0; i < m->g->n_nodes; i++)
        m->n_winograd_eligible += md__winograd_m(m->g, i) != 0;
    if (n_sel != 0 && (err = md__plan_winograd(m->g, n_sel, sel, &m->n_winograd, errmsg,
                                               errmsg_size)) != AT_OK)
        goto fail;
    if ((err = md__extract(m, errmsg, errmsg_size)) != AT_OK)
        goto fail;
    *out = m;
    return AT_OK;
fail:
    md_model_free(m);
    return err;
}

/* The task that runs node 'name' of model m (its group's step), or -1. */
static int task_of(const md_model *m, const char *name)
{
    const md_graph *g = m->g;
    int node = -1, grp;
    for (int i = 0; i < g->n_nodes && node < 0; i++)
        if (!g->nodes[i].dead && strcmp(g->nodes[i].name, name) == 0)
            node = i;
    if (node < 0 || (grp = g->nodes[node].group) < 0)
        return -1;
    for (int s = 0; s < m->n_steps; s++)
        if (m->steps[s].kind == MD_STEP_TASK && g->nodes[m->steps[s].node].group == grp)
            return m->steps[s].task;
    return -1;
}

static char *dup_str(md_task_list *tl, const char *s)
{
    return s ? at_arena_strdup(&tl->arena, s) : NULL;
}

/* Append a copy of task t (from another list) to tl. */
static at_err copy_task(md_task_list *tl, const md_task *t)
{
    md_task c = *t;
    c.name = dup_str(tl, t->name);
    c.desc = dup_str(tl, t->desc);
    c.tag = dup_str(tl, t->tag);
    c.dag_text = dup_str(tl, t->dag_text);
    c.op_types = at_arena_alloc(&tl->arena, (size_t)(t->n_op_types + 1) * sizeof *c.op_types);
    c.uses = at_arena_alloc(&tl->arena, (size_t)(t->n_uses + 1) * sizeof *c.uses);
    if (!c.name || !c.desc || !c.tag || !c.dag_text || !c.op_types || !c.uses)
        return AT_ENOMEM;
    for (int i = 0; i < t->n_op_types; i++)
        if ((c.op_types[i] = dup_str(tl, t->op_types[i])) == NULL)
            return AT_ENOMEM;
    for (int u = 0; u < t->n_uses; u++) {
        c.uses[u].n_nodes = t->uses[u].n_nodes;
        c.uses[u].nodes = at_arena_alloc(&tl->arena,
                                         (size_t)(t->uses[u].n_nodes + 1) * sizeof(char *));
        if (c.uses[u].nodes == NULL)
            return AT_ENOMEM;
        for (int k = 0; k < t->uses[u].n_nodes; k++)
            if ((c.uses[u].nodes[k] = dup_str(tl, t->uses[u].nodes[k])) == NULL)
                return AT_ENOMEM;
    }
    c.dag = ss_dag_ref(t->dag);
    if (at_vec_push(&tl->tasks, &tl->n_tasks, &tl->cap_tasks, c) != AT_OK) {
        ss_dag_unref(c.dag);
        return AT_ENOMEM;
    }
    return AT_OK;
}

/* Winograd AUTO: 'd' has direct convolutions, 'w' every eligible one as Winograd.  Without
** costs, w's extra tasks join d's list (d is the model); with costs, the convolutions whose
** three Winograd tasks sum below the direct task make the model (*out: d, w or a third
** load). */
static at_err choose(const void *bytes, size_t n, const char *name, const md_model_opts *opts,
                     md_model *d, md_model *w, md_model **out, char *errmsg, size_t errmsg_size)
{
    const md_graph *g = d->g;
    const char **sel = NULL;
    int n_sel = 0;
    at_err err = AT_OK;
    *out = NULL;
    if (opts->cost == NULL) {
        for (int i = 0; i < w->tasks->n_tasks && err == AT_OK; i++) {
            int dup = 0;
            for (int k = 0; k < d->tasks->n_tasks && !dup; k++)
                dup = strcmp(d->tasks->tasks[k].key, w->tasks->tasks[i].key) == 0;
            if (!dup && (err = copy_task(d->tasks, &w->tasks->tasks[i])) == AT_OK)
                d->n_alt_tasks++;
        }
        md_model_free(w);
        if (err != AT_OK) {
            md_model_free(d);
            return err;
        }
        *out = d;
        return AT_OK;
    }
    if ((sel = at_calloc((size_t)g->n_nodes + 1, sizeof *sel)) == NULL) {
        err = AT_ENOMEM;
        goto done;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        static const char *const parts[3] = {"wino_in", "wino_gemm", "wino_out"};
        const md_task_list *dl = d->tasks, *wl = w->tasks;
        double direct = 0, wino = 0, c;
        int td, ok = 1;
        if (md__winograd_m(g, i) == 0)
            continue;
        td = task_of(d, g->nodes[i].name);
        for (int k = 0; k < 3 && ok; k++) {
            char part[300];
            int tw;
            snprintf(part, sizeof part, "%.280s.%s", g->nodes[i].name, parts[k]);
            tw = task_of(w, part);
            ok = tw >= 0 && opts->cost(opts->cost_ctx, &wl->tasks[tw], &c);
            wino += ok ? c : 0;
        }
        if (!ok)
            continue;
        if (td >= 0 && opts->cost(opts->cost_ctx, &dl->tasks[td], &direct) && direct <= wino)
            continue;
        sel[n_sel++] = g->nodes[i].name;
    }
    if (n_sel == 0) {
        *out = d, d = NULL;
    } else if (n_sel == w->n_winograd) {
        *out = w, w = NULL;
    } else {
        err = load_one(bytes, n, name, opts, n_sel, sel, out, errmsg, errmsg_size);
    }
done:
    at_free(sel);
    md_model_free(d);
    md_model_free(w);
    return err;
}

at_err md_model_load_mem(const void *bytes, size_t n, const char *name,
                         const md_model_opts *opts, md_model **out, char *errmsg,
                         size_t errmsg_size)
{
    static const md_model_opts dflt;
    md_model *d = NULL, *w = NULL;
    at_err err;
    *out = NULL;
    if (errmsg_size)
        errmsg[0] = 0;
    if (name == NULL)
        name = "model";
    if (opts == NULL)
        opts = &dflt;
    err = load_one(bytes, n, name, opts, opts->winograd == MD_WINOGRAD_ON ? -1 : 0, NULL, &d,
                   errmsg, errmsg_size);
    if (err == AT_OK && opts->winograd == MD_WINOGRAD_AUTO && d->n_winograd_eligible > 0) {
        err = load_one(bytes, n, name, opts, -1, NULL, &w, errmsg, errmsg_size);
        if (err == AT_OK)
            err = choose(bytes, n, name, opts, d, w, &d, errmsg, errmsg_size);
        else
            md_model_free(d), d = NULL;
    }
    if (err != AT_OK) {
        if (err == AT_ENOMEM && errmsg_size)
            snprintf(errmsg, errmsg_size, "%s: out of memory", name);
        return err;
    }
    *out = d;
    return AT_OK;
}

at_err md_model_load(const char *path, const md_model_opts *opts, md_model **out, char *errmsg,
                     size_t errmsg_size)
{
    char *data;
    size_t n;
    at_err err;
    *out = NULL;
    if ((err = at_file_read(path, &data, &n, errmsg, errmsg_size)) != AT_OK)
        return err;
    err = md_model_load_mem(data, n, base_name(path), opts, out, errmsg, errmsg_size);
    at_free(data);
    return err;
}

void md_model_free(md_model *m)
{
    if (m == NULL)
        return;
    for (int i = 0; i < m->n_steps; i++)
        at_free(m->steps[i].args);
    at_free(m->steps);
    md_task_list_free(m->tasks);
    md__graph_free(m->g);
    at_free(m);
}

const md_task_list *md_model_tasks(const md_model *m)
{
    return m->tasks;
}

int md_model_n_warnings(const md_model *m)
{
    return m->g->n_warnings;
}

const char *md_model_warning(const md_model *m, int i)
{
    return i >= 0 && i < m->g->n_warnings ? m->g->warnings[i] : NULL;
}

void md_model_get_info(const md_model *m, md_model_info *out)
{
    const md_graph *g = m->g;
    memset(out, 0, sizeof *out);
    out->opset = g->opset;
    out->ir_version = g->ir_version;
    out->producer = g->producer;
    out->n_nodes = g->n_file_nodes;
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead)
            out->n_live++;
    out->n_unsupported = m->n_unsupported;
    out->n_inputs = g->n_inputs;
    out->n_outputs = g->n_outputs;
    out->n_steps = m->n_steps;
    out->n_winograd = m->n_winograd;
    out->n_winograd_eligible = m->n_winograd_eligible;
    out->n_alt_tasks = m->n_alt_tasks;
}

int md_model_n_dims(const md_model *m)
{
    return m->g->n_syms;
}

const char *md_model_dim_name(const md_model *m, int i)
{
    return i >= 0 && i < m->g->n_syms ? m->g->sym_names[i] : NULL;
}

int64_t md_model_dim_value(const md_model *m, int i)
{
    return i >= 0 && i < m->g->n_syms ? m->g->sym_values[i] : 0;
}

const char *md_model_sig(const md_model *m)
{
    return m->g->sig;
}

at_err md_task_list_union(const md_model *const *ms, int n, md_task_list **out)
{
    md_task_list *tl;
    at_err err = AT_OK;
    *out = NULL;
    if ((tl = at_calloc(1, sizeof *tl)) == NULL)
        return AT_ENOMEM;
    at_arena_init(&tl->arena, 0);
    if (n > 0 && (tl->model = at_arena_strdup(&tl->arena, ms[0]->tasks->model)) == NULL)
        err = AT_ENOMEM;
    for (int k = 0; k < n && err == AT_OK; k++) {
        const md_task_list *src = ms[k]->tasks;
        /* the Winograd alternatives at the end run in no step */
        for (int i = 0; i < src->n_tasks - ms[k]->n_alt_tasks && err == AT_OK; i++) {
            int j = 0;
            while (j < tl->n_tasks && strcmp(tl->tasks[j].key, src->tasks[i].key) != 0)
                j++;
            if (j < tl->n_tasks)
                tl->tasks[j].weight += src->tasks[i].weight;
            else
                err = copy_task(tl, &src->tasks[i]);
        }
    }
    if (err != AT_OK) {
        md_task_list_free(tl);
        return err;
    }
    *out = tl;
    return AT_OK;
}
