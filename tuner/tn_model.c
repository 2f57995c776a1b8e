/* tuner/tn_model.c -- loading a model: decode (tn_onnx.c), prepare (tn_graph.c) and extract
** the tasks (tn_extract.c); and what the model object answers. */
#include "tuner/tn_graph.h"

#include <stdio.h>
#include <string.h>

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

at_err tn_model_load_mem(const void *bytes, size_t n, const char *name,
                         const tn_model_opts *opts, tn_model **out, char *errmsg,
                         size_t errmsg_size)
{
    tn_model *m;
    at_err err;
    *out = NULL;
    if (errmsg_size)
        errmsg[0] = 0;
    if ((m = at_calloc(1, sizeof *m)) == NULL)
        return AT_ENOMEM;
    if ((m->tasks = at_calloc(1, sizeof *m->tasks)) == NULL) {
        at_free(m);
        return AT_ENOMEM;
    }
    at_arena_init(&m->tasks->arena, 0);
    if ((m->tasks->model = at_arena_strdup(&m->tasks->arena, name ? name : "model")) == NULL) {
        err = AT_ENOMEM;
        goto fail;
    }
    err = tn__onnx_decode(bytes, n, name ? name : "model", opts ? opts->dim_default : 1, &m->g,
                          errmsg, errmsg_size);
    if (err != AT_OK)
        goto fail;
    if ((err = tn__graph_prepare(m->g, errmsg, errmsg_size)) != AT_OK)
        goto fail;
    if ((err = tn__plan_layout(m->g, opts ? opts->layout : TN_LAYOUT_NHWC, errmsg,
                               errmsg_size)) != AT_OK)
        goto fail;
    if ((err = tn__extract(m, errmsg, errmsg_size)) != AT_OK)
        goto fail;
    *out = m;
    return AT_OK;
fail:
    if (err == AT_ENOMEM && errmsg_size)
        snprintf(errmsg, errmsg_size, "%s: out of memory", name ? name : "model");
    tn_model_free(m);
    return err;
}

at_err tn_model_load(const char *path, const tn_model_opts *opts, tn_model **out, char *errmsg,
                     size_t errmsg_size)
{
    char *data;
    size_t n;
    at_err err;
    *out = NULL;
    if ((err = at_file_read(path, &data, &n, errmsg, errmsg_size)) != AT_OK)
        return err;
    err = tn_model_load_mem(data, n, base_name(path), opts, out, errmsg, errmsg_size);
    at_free(data);
    return err;
}

void tn_model_free(tn_model *m)
{
    if (m == NULL)
        return;
    for (int i = 0; i < m->n_steps; i++)
        at_free(m->steps[i].args);
    at_free(m->steps);
    tn_task_list_free(m->tasks);
    tn__graph_free(m->g);
    at_free(m);
}

const tn_task_list *tn_model_tasks(const tn_model *m)
{
    return m->tasks;
}

int tn_model_n_warnings(const tn_model *m)
{
    return m->g->n_warnings;
}

const char *tn_model_warning(const tn_model *m, int i)
{
    return i >= 0 && i < m->g->n_warnings ? m->g->warnings[i] : NULL;
}

void tn_model_get_info(const tn_model *m, tn_model_info *out)
{
    const tn_graph *g = m->g;
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
}
