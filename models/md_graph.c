/* models/md_graph.c -- the imported model graph: builders, attributes, the operator table,
** and md__graph_prepare, which puts the nodes in topological order, infers shapes and
** folds constants (md_infer.c), rewrites (md_rewrite.c), removes dead nodes and resolves
** aliases.  See md_graph.h for the invariants it establishes. */
#include "models/md_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- operators ---- */

static const struct {
    const char *name;
    md_op_class cls;
} op_table[] = {
#define X(id, name, cls) {name, cls},
    MD_OP_MAP(X)
#undef X
};

const char *md_op_name(md_op_kind k)
{
    return (unsigned)k < MD_N_OPS ? op_table[k].name : "?";
}

md_op_class md_op_class_of(md_op_kind k)
{
    return (unsigned)k < MD_N_OPS ? op_table[k].cls : MD_CLS_CONST;
}

md_op_kind md_op_lookup(const char *op_type)
{
    if (op_type == NULL)
        return MD_OP_UNKNOWN;
    for (int k = 0; k < MD_OP_UNKNOWN; k++)
        if (op_table[k].name[0] != '(' && strcmp(op_table[k].name, op_type) == 0)
            return (md_op_kind)k;
    return MD_OP_UNKNOWN;
}

/* ---- builders ---- */

at_err md__graph_new(const char *name, md_graph **out)
{
    md_graph *g = at_calloc(1, sizeof *g);
    *out = NULL;
    if (g == NULL)
        return AT_ENOMEM;
    g->name = at_strdup(name ? name : "model");
    g->producer = at_strdup("");
    g->dim_default = 1;
    if (g->name == NULL || g->producer == NULL) {
        md__graph_free(g);
        return AT_ENOMEM;
    }
    *out = g;
    return AT_OK;
}

static void attr_fini(md_attr *a)
{
    at_free(a->name);
    at_free(a->s);
    at_free(a->floats);
    at_free(a->ints);
}

void md__graph_free(md_graph *g)
{
    if (g == NULL)
        return;
    for (int i = 0; i < g->n_tensors; i++) {
        at_free(g->tensors[i].name);
        at_free(g->tensors[i].data);
    }
    for (int i = 0; i < g->n_nodes; i++) {
        md_node *n = &g->nodes[i];
        at_free(n->name);
        at_free(n->op_type);
        at_free(n->domain);
        at_free(n->in);
        at_free(n->out);
        at_free(n->why);
        at_free(n->merged);
        for (int k = 0; k < n->n_attrs; k++)
            attr_fini(&n->attrs[k]);
        at_free(n->attrs);
    }
    for (int i = 0; i < g->n_warnings; i++)
        at_free(g->warnings[i]);
    for (int i = 0; i < g->n_syms; i++)
        at_free(g->sym_names[i]);
    at_free(g->warnings);
    at_free(g->tensors);
    at_free(g->nodes);
    at_free(g->inputs);
    at_free(g->outputs);
    at_free(g->name);
    at_free(g->producer);
    at_free(g);
}

int md__tensor_find(const md_graph *g, const char *name)
{
    /* Models have hundreds to a few thousand tensors; a linear scan from the end (recent
    ** tensors are looked up most) keeps this simple and fast enough. */
    for (int i = g->n_tensors - 1; i >= 0; i--)
        if (strcmp(g->tensors[i].name, name) == 0)
            return i;
    return -1;
}

static int tensor_new(md_graph *g, const char *name)
{
    md_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = AT_DT_F32;
    t.producer = -1;
    t.alias = -1;
    if ((t.name = at_strdup(name)) == NULL)
        return -1;
    if (at_vec_push(&g->tensors, &g->n_tensors, &g->cap_tensors, t) != AT_OK) {
        at_free(t.name);
        return -1;
    }
    return g->n_tensors - 1;
}

int md__tensor_get(md_graph *g, const char *name)
{
    int t = md__tensor_find(g, name);
    return t >= 0 ? t : tensor_new(g, name);
}

int md__tensor_const(md_graph *g, const char *name, at_dtype dt, int rank, const int64_t *shape,
                     const void *data)
{
    char unique[256];
    int64_t n = 1, dims[MD_MAX_RANK];
    int t;
    size_t bytes;
    /* 'shape' may point into g->tensors, which tensor_new may move */
    if (rank < 0 || rank > MD_MAX_RANK)
        return -1;
    if (rank > 0)
        memcpy(dims, shape, (size_t)rank * sizeof *dims);
    shape = dims;
    /* a fresh name: constants made by rewrites must not collide with the file's names */
    snprintf(unique, sizeof unique, "%s", name);
    for (int k = 1; md__tensor_find(g, unique) >= 0; k++)
        snprintf(unique, sizeof unique, "%.200s~%d", name, k);
    if ((t = tensor_new(g, unique)) < 0)
        return -1;
    for (int d = 0; d < rank; d++)
        n *= shape[d];
    bytes = (size_t)n * (size_t)at_dtype_bytes(dt);
    g->tensors[t].data = at_calloc(1, bytes ? bytes : 1);
    if (g->tensors[t].data == NULL)
        return -1;
    if (bytes && data)
        memcpy(g->tensors[t].data, data, bytes);
    g->tensors[t].dtype = dt;
    g->tensors[t].known = 1;
    g->tensors[t].rank = rank;
    if (rank > 0)
        memcpy(g->tensors[t].shape, shape, (size_t)rank * sizeof *shape);
    g->tensors[t].n_elems = n;
    return t;
}

int md__node_add(md_graph *g, const char *name, const char *op_type, const char *domain)
{
    md_node n;
    memset(&n, 0, sizeof n);
    n.group = -1;
    n.name = at_strdup(name);
    n.op_type = at_strdup(op_type);
    n.domain = at_strdup(domain ? domain : "");
    if (n.name == NULL || n.op_type == NULL || n.domain == NULL)
        goto fail;
    n.kind = (domain == NULL || domain[0] == 0 || strcmp(domain, "ai.onnx") == 0)
                 ? md_op_lookup(op_type)
                 : MD_OP_UNKNOWN;
    if (domain && strcmp(domain, "com.microsoft") == 0 && strcmp(op_type, "Gelu") == 0)
        n.kind = MD_OP_GELU; /* onnxruntime's contrib Gelu is the exact (erf) form */
    if (at_vec_push(&g->nodes, &g->n_nodes, &g->cap_nodes, n) != AT_OK)
        goto fail;
    return g->n_nodes - 1;
fail:
    at_free(n.name);
    at_free(n.op_type);
    at_free(n.domain);
    return -1;
}

at_err md__node_io(md_graph *g, int node, int n_in, const int *in, int n_out, const int *out)
{
    md_node *n = &g->nodes[node];
    int *a = at_malloc((size_t)(n_in ? n_in : 1) * sizeof *a);
    int *b = at_malloc((size_t)(n_out ? n_out : 1) * sizeof *b);
    if (a == NULL || b == NULL) {
        at_free(a);
        at_free(b);
        return AT_ENOMEM;
    }
    if (n_in)
        memcpy(a, in, (size_t)n_in * sizeof *a);
    if (n_out)
        memcpy(b, out, (size_t)n_out * sizeof *b);
    at_free(n->in);
    at_free(n->out);
    n->in = a;
    n->out = b;
    n->n_in = n_in;
    n->n_out = n_out;
    return AT_OK;
}

at_err md__warn(md_graph *g, const char *fmt, ...)
{
    char text[1024];
    char *s;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (g->n_warnings >= 1000)
        return AT_OK; /* a hostile file could make millions; the first thousand say enough */
    if ((s = at_strdup(text)) == NULL)
        return AT_ENOMEM;
    if (at_vec_push(&g->warnings, &g->n_warnings, &g->cap_warnings, s) != AT_OK) {
        at_free(s);
        return AT_ENOMEM;
    }
    return AT_OK;
}

/* ---- attributes ---- */

const md_attr *md__attr(const md_node *n, const char *name)
{
    for (int i = 0; i < n->n_attrs; i++)
        if (strcmp(n->attrs[i].name, name) == 0)
            return &n->attrs[i];
    return NULL;
}

int64_t md__attr_i(const md_node *n, const char *name, int64_t dflt)
{
    const md_attr *a = md__attr(n, name);
    if (a && a->type == MD_ATTR_INT)
        return a->i;
    if (a && a->type == MD_ATTR_FLOAT)
        return (int64_t)a->f;
    return dflt;
}

double md__attr_f(const md_node *n, const char *name, double dflt)
{
    const md_attr *a = md__attr(n, name);
    if (a && a->type == MD_ATTR_FLOAT)
        return a->f;
    if (a && a->type == MD_ATTR_INT)
        return (double)a->i;
    return dflt;
}

const char *md__attr_s(const md_node *n, const char *name, const char *dflt)
{
    const md_attr *a = md__attr(n, name);
    return a && a->type == MD_ATTR_STRING && a->s ? a->s : dflt;
}

int md__attr_ints(const md_node *n, const char *name, int64_t *out, int max)
{
    const md_attr *a = md__attr(n, name);
    if (a == NULL || a->type != MD_ATTR_INTS || a->n > max)
        return -1;
    for (int i = 0; i < a->n; i++)
        out[i] = a->ints[i];
    return a->n;
}

void md__shape_str(const int64_t *shape, int rank, char *out, size_t size)
{
    size_t k = 0;
    if (size == 0)
        return;
    out[0] = 0;
    k += (size_t)snprintf(out + k, size - k, "[");
    for (int d = 0; d < rank && k < size; d++)
        k += (size_t)snprintf(out + k, size - k, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (k < size)
        snprintf(out + k, size - k, "]");
}

/* ---- topological order ---- */

/* Reorder g->nodes so that every node comes after the producers of its inputs (stable:
** an already sorted file keeps its order).  A cycle is an error. */
at_err md__reorder_nodes(md_graph *g, const int *order)
{
    int n = g->n_nodes;
    md_node *sorted = at_malloc((size_t)(n ? n : 1) * sizeof *sorted);
    int *remap = at_malloc((size_t)(n ? n : 1) * sizeof *remap);
    if (sorted == NULL || remap == NULL) {
        at_free(sorted);
        at_free(remap);
        return AT_ENOMEM;
    }
    for (int i = 0; i < n; i++) {
        sorted[i] = g->nodes[order[i]];
        remap[order[i]] = i;
    }
    memcpy(g->nodes, sorted, (size_t)n * sizeof *sorted);
    for (int t = 0; t < g->n_tensors; t++)
        if (g->tensors[t].producer >= 0)
            g->tensors[t].producer = remap[g->tensors[t].producer];
    for (int i = 0; i < n; i++)
        for (int k = 0; k < g->nodes[i].n_merged; k++)
            g->nodes[i].merged[k] = remap[g->nodes[i].merged[k]];
    at_free(sorted);
    at_free(remap);
    return AT_OK;
}

at_err md__topo_sort(md_graph *g, char *errmsg, size_t errmsg_size)
{
    int n = g->n_nodes;
    int *order, *pending;
    char *done;
    at_err err = AT_OK;
    int n_done = 0;
    if (n <= 0)
        return AT_OK;
    order = at_malloc((size_t)n * sizeof *order);
    pending = at_malloc((size_t)n * sizeof *pending);
    done = at_calloc((size_t)n, 1);
    if (order == NULL || pending == NULL || done == NULL) {
        err = AT_ENOMEM;
        goto out;
    }
    /* Repeated stable passes: each takes every node whose producers are done.  A sorted
    ** graph needs one pass; the number of passes is the depth of the disorder. */
    while (n_done < n) {
        int progress = 0;
        for (int i = 0; i < n; i++) {
            const md_node *nd = &g->nodes[i];
            int ready = 1;
            if (done[i])
                continue;
            for (int k = 0; k < nd->n_in && ready; k++) {
                int t = nd->in[k];
                int p = t >= 0 ? g->tensors[t].producer : -1;
                if (p >= 0 && !done[p])
                    ready = 0;
            }
            if (ready) {
                done[i] = 1;
                order[n_done++] = i;
                progress = 1;
            }
        }
        if (!progress) {
            for (int i = 0; i < n; i++)
                if (!done[i]) {
                    snprintf(errmsg, errmsg_size,
                             "%s: the graph has a cycle: node '%s' (%s) depends on its own "
                             "output", g->name, g->nodes[i].name, g->nodes[i].op_type);
                    break;
                }
            err = AT_EINVAL;
            goto out;
        }
    }
    err = md__reorder_nodes(g, order);
out:
    at_free(order);
    at_free(pending);
    at_free(done);
    return err;
}

/* ---- liveness, consumers, aliases ---- */

void md__count_consumers(md_graph *g)
{
    for (int t = 0; t < g->n_tensors; t++)
        g->tensors[t].n_consumers = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const md_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] >= 0)
                g->tensors[n->in[k]].n_consumers++;
    }
}

/* Mark nodes dead whose outputs nobody needs (backwards, so chains go at once). */
static void remove_dead(md_graph *g)
{
    md__count_consumers(g);
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        md_node *n = &g->nodes[i];
        int needed = 0;
        if (n->dead)
            continue;
        for (int k = 0; k < n->n_out; k++) {
            int t = n->out[k];
            if (t >= 0 && (g->tensors[t].n_consumers > 0 || g->tensors[t].is_output))
                needed = 1;
        }
        if (!needed) {
            n->dead = 1;
            for (int k = 0; k < n->n_in; k++)
                if (n->in[k] >= 0)
                    g->tensors[n->in[k]].n_consumers--;
        }
    }
}

void md__resolve_aliases(md_graph *g)
{
    for (int t = 0; t < g->n_tensors; t++)
        g->tensors[t].alias = -1;
    for (int i = 0; i < g->n_nodes; i++) {
        const md_node *n = &g->nodes[i];
        int src, dst;
        if (n->dead || n->unsupported || md_op_class_of(n->kind) != MD_CLS_ALIAS)
            continue;
        src = n->in[0];
        dst = n->out[0];
        if (src < 0 || dst < 0 || g->tensors[src].data)
            continue;
        g->tensors[dst].alias = md__root(g, src);
    }
}

at_err md__graph_prepare(md_graph *g, char *errmsg, size_t errmsg_size)
{
    at_err err;
    if ((err = md__topo_sort(g, errmsg, errmsg_size)) != AT_OK)
        return err;
    if ((err = md__infer(g, errmsg, errmsg_size)) != AT_OK)
        return err;
    remove_dead(g);
    if ((err = md__rewrite(g, errmsg, errmsg_size)) != AT_OK)
        return err;
    remove_dead(g);
    md__resolve_aliases(g);
    md__count_consumers(g);
    return AT_OK;
}
