/* models/md_layout.c -- the layout plan: which part of the graph computes in NHWC.
**
** ONNX models are NCHW.  On a CPU a convolution vectorizes best over channels, which NCHW
** keeps far apart: the tuned 3x3 stride-2 and 7x7 stem convolutions of ResNet-18 reach
** about a third of what the same tasks reach in NHWC (docs/models.md has the figures).
** So, as TVM's ConvertLayout and ONNX Runtime's NCHWc transformer do, the plan rewrites the
** graph:
**
**   1. Candidates: Conv, MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool on 4-d
**      float tensors, and elementwise nodes whose output is 4-d and whose inputs are 4-d
**      tensors or constants.  Candidates joined by 4-d tensors form regions (union-find);
**      a region with a convolution computes in NHWC (node->nhwc).
**   2. Every tensor an NHWC node writes gets a twin "NAME.nhwc" of shape [N, H, W, C]
**      that the node writes instead; NHWC readers read twins.  Where the NCHW tensor is
**      still needed (a consumer outside the region, a graph output) a Transpose node
**      (perm 0,3,1,2) makes it from the twin; where an NHWC node reads a tensor made
**      outside (a graph input), a Transpose (perm 0,2,3,1) makes the twin.  A transpose
**      that moves only dimensions of size 1 ([1, 512, 1, 1]) is an Identity: no copy.
**      Except: a Conv reading a graph input of at most MD_NCHW_IN_MAX_C channels (an image
**      model's stem) reads it in NCHW as it is (node->in_nchw, conv2d in_layout=NCHW):
**      with 3 channels the channel order gives the convolution nothing to vectorize, and
**      the transpose is gone.
**   3. Constants read by NHWC nodes are copied in the new order: a Conv's weight
**      [K, C/g, R, S] -> [R, S, C/g, K] (the library's NHWC weight), an elementwise
**      operand of rank <= 4 is broadcast-aligned to rank 4 and permuted ([C, 1, 1] ->
**      [1, 1, 1, C]).  Single-valued constants stay as they are (they become literals).
**
** The original tensors keep their ids, names and shapes, so graph outputs, dumps and the
** numpy check see the model's own layout.  The rewrite runs after md__graph_prepare and
** leaves its invariants (topological order, consumer counts, aliases) true again. */
#include "models/md_int.h"

#include <stdio.h>
#include <string.h>

static int live(const md_node *n)
{
    return !n->dead && !n->unsupported;
}

static int is_act4(const md_graph *g, int t)
{
    const md_tensor *x = &g->tensors[t];
    return t >= 0 && x->known && x->rank == 4 && x->dtype == AT_DT_F32 && x->data == NULL;
}

static int single_valued(const md_tensor *c)
{
    const float *f = c->data;
    if (c->dtype != AT_DT_F32 || c->n_elems < 1)
        return 0;
    for (int64_t i = 1; i < c->n_elems; i++)
        if (f[i] != f[0])
            return 0;
    return 1;
}

static int candidate(const md_graph *g, const md_node *n)
{
    if (!live(n) || n->n_out < 1 || n->out[0] < 0 || !is_act4(g, n->out[0]))
        return 0;
    for (int k = 1; k < n->n_out; k++)
        if (n->out[k] >= 0 && g->tensors[n->out[k]].n_consumers > 0)
            return 0; /* MaxPool's Indices, ... */
    switch (n->kind) {
    case MD_OP_CONV:
        return n->n_in >= 2 && is_act4(g, n->in[0]) && n->in[1] >= 0 &&
               g->tensors[n->in[1]].data != NULL && g->tensors[n->in[1]].rank == 4;
    case MD_OP_MAXPOOL:
    case MD_OP_AVGPOOL:
    case MD_OP_GAP:
    case MD_OP_GMP:
        return is_act4(g, n->in[0]);
    default:
        break;
    }
    if (md_op_class_of(n->kind) != MD_CLS_ELEM)
        return 0;
    for (int k = 0; k < n->n_in; k++) {
        int t = n->in[k];
        if (t < 0)
            continue;
        if (g->tensors[t].data) {
            if (g->tensors[t].rank > 4 || g->tensors[t].dtype != AT_DT_F32)
                if (!(n->kind == MD_OP_CLIP || n->kind == MD_OP_POW) || k == 0)
                    return 0;
            continue;
        }
        if (!is_act4(g, t))
            return 0;
    }
    return 1;
}

static int uf_find(int *p, int i)
{
    while (p[i] != i)
        i = p[i] = p[p[i]];
    return i;
}

static int64_t perm_nhwc[4] = {0, 2, 3, 1}; /* NHWC dim d is NCHW dim perm_nhwc[d] */
static int64_t perm_nchw[4] = {0, 3, 1, 2}; /* NCHW dim d is NHWC dim perm_nchw[d] */

/* Only dimensions of size 1 move: the bytes are the same in both layouts. */
static int trivial_perm(const int64_t *shape, const int64_t *perm)
{
    int last = -1;
    for (int d = 0; d < 4; d++) {
        int s = (int)perm[d];
        if (shape[s] == 1)
            continue;
        if (s < last)
            return 0;
        last = s;
    }
    return 1;
}

static at_err attr_ints(md_graph *g, int node, const char *name, int n, const int64_t *v)
{
    md_node *nd = &g->nodes[node];
    md_attr a, *na;
    memset(&a, 0, sizeof a);
    a.type = MD_ATTR_INTS;
    a.n = n;
    a.name = at_strdup(name);
    a.ints = at_malloc((size_t)n * sizeof *a.ints);
    if (a.name == NULL || a.ints == NULL)
        goto oom;
    memcpy(a.ints, v, (size_t)n * sizeof *v);
    na = at_realloc(nd->attrs, (size_t)(nd->n_attrs + 1) * sizeof *na);
    if (na == NULL)
        goto oom;
    nd->attrs = na;
    nd->attrs[nd->n_attrs++] = a;
    return AT_OK;
oom:
    at_free(a.name);
    at_free(a.ints);
    return AT_ENOMEM;
}

/* A new tensor "NAME.nhwc" (or .nchw) with t's shape permuted; -1 on ENOMEM. */
static int twin(md_graph *g, int t, const int64_t *perm, const char *suffix)
{
    char name[300];
    int u;
    int64_t shape[4];
    snprintf(name, sizeof name, "%.280s.%s", g->tensors[t].name, suffix);
    for (int k = 1; md__tensor_find(g, name) >= 0; k++)
        snprintf(name, sizeof name, "%.270s.%s~%d", g->tensors[t].name, suffix, k);
    if ((u = md__tensor_get(g, name)) < 0)
        return -1;
    for (int d = 0; d < 4; d++)
        shape[d] = g->tensors[t].shape[perm[d]];
    g->tensors[u].dtype = g->tensors[t].dtype;
    g->tensors[u].known = 1;
    g->tensors[u].rank = 4;
    memcpy(g->tensors[u].shape, shape, sizeof shape);
    g->tensors[u].n_elems = g->tensors[t].n_elems;
    g->tensors[u].producer = -1;
    return u;
}

/* A node 'src' -> 'dst' converting layouts: Transpose(perm), or Identity when trivial. */
static at_err convert(md_graph *g, int src, int dst, const int64_t *perm, const char *what)
{
    char name[300];
    int triv = trivial_perm(g->tensors[src].shape, perm), nd;
    snprintf(name, sizeof name, "%.270s.%s", g->tensors[src].name, what);
    if ((nd = md__node_add(g, name, triv ? "Identity" : "Transpose", "")) < 0)
        return AT_ENOMEM;
    if (md__node_io(g, nd, 1, &src, 1, &dst) != AT_OK)
        return AT_ENOMEM;
    g->tensors[dst].producer = nd;
    if (!triv)
        return attr_ints(g, nd, "perm", 4, perm);
    return AT_OK;
}

/* Conv weight [K, C/g, R, S] -> [R, S, C/g, K]; -1 on ENOMEM. */
static int conv_weight(md_graph *g, int w)
{
    const md_tensor *t = &g->tensors[w];
    int64_t K = t->shape[0], Cg = t->shape[1], R = t->shape[2], S = t->shape[3];
    int64_t shape[4] = {R, S, Cg, K};
    char name[300];
    float *d;
    int u;
    if ((d = at_malloc((size_t)t->n_elems * sizeof *d)) == NULL)
        return -1;
    for (int64_t k = 0; k < K; k++)
        for (int64_t c = 0; c < Cg; c++)
            for (int64_t r = 0; r < R; r++)
                for (int64_t s = 0; s < S; s++)
                    d[((r * S + s) * Cg + c) * K + k] =
                        ((const float *)t->data)[((k * Cg + c) * R + r) * S + s];
    snprintf(name, sizeof name, "%.280s.rsck", t->name);
    u = md__tensor_const(g, name, AT_DT_F32, 4, shape, d);
    at_free(d);
    if (u >= 0)
        g->tensors[u].is_weight = g->tensors[w].is_weight;
    return u;
}

/* An elementwise constant operand broadcast-aligned to rank 4 and permuted to NHWC; -1 on
** ENOMEM. */
static int elem_const(md_graph *g, int c)
{
    const md_tensor *t = &g->tensors[c];
    int64_t s4[4] = {1, 1, 1, 1}, o4[4], st[4], acc = 1;
    char name[300];
    float *d;
    int u;
    for (int d0 = 0; d0 < t->rank; d0++)
        s4[4 - t->rank + d0] = t->shape[d0];
    for (int k = 3; k >= 0; k--) {
        st[k] = acc;
        acc *= s4[k];
    }
    for (int k = 0; k < 4; k++)
        o4[k] = s4[perm_nhwc[k]];
    if ((d = at_malloc((size_t)(acc ? acc : 1) * sizeof *d)) == NULL)
        return -1;
    {
        int64_t i = 0;
        for (int64_t a = 0; a < o4[0]; a++)
            for (int64_t b = 0; b < o4[1]; b++)
                for (int64_t e = 0; e < o4[2]; e++)
                    for (int64_t f = 0; f < o4[3]; f++) {
                        int64_t idx[4] = {a, b, e, f}, src = 0;
                        for (int k = 0; k < 4; k++)
                            src += idx[k] * st[perm_nhwc[k]];
                        d[i++] = ((const float *)t->data)[src];
                    }
    }
    snprintf(name, sizeof name, "%.280s.nhwc", t->name);
    u = md__tensor_const(g, name, AT_DT_F32, 4, o4, d);
    at_free(d);
    if (u >= 0)
        g->tensors[u].is_weight = g->tensors[c].is_weight;
    return u;
}

at_err md__plan_layout(md_graph *g, int layout, char *errmsg, size_t errmsg_size)
{
    int n = g->n_nodes, nt = g->n_tensors;
    int *parent = NULL, *has_conv = NULL, *twin_of = NULL;
    char *cand = NULL, *outside = NULL;
    int any = 0;
    at_err err = AT_OK;
    if (layout == MD_LAYOUT_NCHW || n == 0)
        return AT_OK;
    parent = at_malloc((size_t)n * sizeof *parent);
    has_conv = at_calloc((size_t)n, sizeof *has_conv);
    cand = at_calloc((size_t)n, 1);
    twin_of = at_malloc((size_t)nt * sizeof *twin_of);
    outside = at_calloc((size_t)nt, 1);
    if (parent == NULL || has_conv == NULL || cand == NULL || twin_of == NULL ||
        outside == NULL) {
        err = AT_ENOMEM;
        goto out;
    }
    /* 1. regions */
    for (int i = 0; i < n; i++) {
        parent[i] = i;
        cand[i] = (char)candidate(g, &g->nodes[i]);
    }
    for (int i = 0; i < n; i++) {
        const md_node *nd = &g->nodes[i];
        if (!cand[i])
            continue;
        for (int k = 0; k < nd->n_in; k++) {
            int t = nd->in[k], p;
            if (t < 0 || g->tensors[t].data)
                continue;
            p = g->tensors[t].producer;
            if (p >= 0 && cand[p])
                parent[uf_find(parent, i)] = uf_find(parent, p);
        }
    }
    for (int i = 0; i < n; i++)
        if (cand[i] && g->nodes[i].kind == MD_OP_CONV)
            has_conv[uf_find(parent, i)] = 1;
    for (int i = 0; i < n; i++) {
        g->nodes[i].nhwc = cand[i] && has_conv[uf_find(parent, i)];
        any |= g->nodes[i].nhwc;
    }
    if (!any)
        goto out;
    /* which tensors of NHWC nodes are still needed in NCHW */
    for (int t = 0; t < nt; t++) {
        twin_of[t] = -1;
        outside[t] = (char)g->tensors[t].is_output;
    }
    for (int i = 0; i < n; i++) {
        const md_node *nd = &g->nodes[i];
        if (nd->dead || nd->nhwc)
            continue;
        for (int k = 0; k < nd->n_in; k++)
            if (nd->in[k] >= 0)
                outside[nd->in[k]] = 1;
    }
    /* 2. twins of what NHWC nodes write, converted back where needed */
    for (int i = 0; i < n; i++) {
        int t, u;
        if (!g->nodes[i].nhwc)
            continue;
        t = g->nodes[i].out[0];
        if ((u = twin(g, t, perm_nhwc, "nhwc")) < 0) {
            err = AT_ENOMEM;
            goto out;
        }
        twin_of[t] = u;
        g->nodes[i].out[0] = u;
        g->tensors[u].producer = i;
        g->tensors[t].producer = -1;
        if (outside[t] && (err = convert(g, u, t, perm_nchw, "to_nchw")) != AT_OK)
            goto out;
    }
    /* 3. inputs of NHWC nodes: twins, converted copies, permuted constants */
    for (int i = 0; i < n; i++) {
        /* convert() adds nodes: g->nodes may move, so no pointer into it is kept */
        md_op_kind kind = g->nodes[i].kind;
        if (!g->nodes[i].nhwc)
            continue;
        for (int k = 0; k < g->nodes[i].n_in; k++) {
            int t = g->nodes[i].in[k], u;
            if (t < 0)
                continue;
            if (g->tensors[t].data) {
                if (kind == MD_OP_CONV && k == 1)
                    u = conv_weight(g, t);
                else if (kind == MD_OP_CONV || single_valued(&g->tensors[t]) ||
                         kind == MD_OP_CLIP || kind == MD_OP_POW)
                    continue; /* a bias [K], a literal, bounds and exponents */
                else
                    u = elem_const(g, t);
                if (u < 0) {
                    err = AT_ENOMEM;
                    goto out;
                }
                g->nodes[i].in[k] = u;
                continue;
            }
            if (twin_of[t] < 0 && kind == MD_OP_CONV && k == 0 &&
                g->tensors[t].producer < 0 && g->tensors[t].shape[1] <= MD_NCHW_IN_MAX_C) {
                g->nodes[i].in_nchw = 1; /* reads the graph input as it is */
                continue;
            }
            if (twin_of[t] < 0) {
                if ((u = twin(g, t, perm_nhwc, "nhwc")) < 0 ||
                    (err = convert(g, t, u, perm_nhwc, "to_nhwc")) != AT_OK) {
                    if (err == AT_OK)
                        err = AT_ENOMEM;
                    goto out;
                }
                twin_of[t] = u;
            }
            g->nodes[i].in[k] = twin_of[t];
        }
    }
    if ((err = md__topo_sort(g, errmsg, errmsg_size)) != AT_OK)
        goto out;
    md__resolve_aliases(g);
    md__count_consumers(g);
out:
    at_free(parent);
    at_free(has_conv);
    at_free(cand);
    at_free(twin_of);
    at_free(outside);
    return err;
}
