/* models/md_winograd.c -- 3x3 stride-1 convolutions as Winograd F(m x m, 3 x 3).
**
** An eligible convolution (NHWC by the layout plan, 3x3, stride 1, dilation 1, padding 1,
** one group, a constant weight, at least 8 input and output channels) becomes three nodes,
** each the anchor of its own task (the winograd_* operators of kernels/kn_ops.c):
**
**   NAME.wino_in    X [N, H, W, C], Bt        -> NAME.wino_V [a, a, P, C]
**   NAME.wino_gemm  V, NAME.wino_U [a,a,C,K]  -> NAME.wino_M [a, a, P, K]
**   NAME.wino_out   M, At (, bias)            -> the convolution's output [N, H, W, K]
**
** with a = m + 2 and P = N * ceil(H / m) * ceil(W / m) tiles; m = 4 when both output
** dimensions are at least 8, else 2.  The transformed weight U = G w G^T is computed here,
** once, when the model is loaded (kn_winograd_weight); Bt and At are shared constants.  The
** elementwise consumers of the convolution (relu, the residual add) fuse into wino_out as
** they fused into the convolution.  Which convolutions are rewritten is the caller's choice
** (md_model.c: the ones whose three tasks measured faster than the direct one). */
#include "models/md_int.h"

#include <stdio.h>
#include <string.h>

int md__winograd_m(const md_graph *g, int node)
{
    const md_node *n = &g->nodes[node];
    md_conv_params p;
    char why[64];
    const md_tensor *w;
    if (n->dead || n->unsupported || n->kind != MD_OP_CONV || !n->nhwc || n->in_nchw ||
        n->n_in < 2 || n->in[1] < 0)
        return 0;
    if (md__conv_params(g, n, &p, why, sizeof why) != AT_OK)
        return 0;
    w = &g->tensors[n->in[1]];
    if (p.groups != 1 || p.R != 3 || p.S != 3 || p.sh != 1 || p.sw != 1 || p.dh != 1 ||
        p.dw != 1 || p.ph != 1 || p.pw != 1 || p.C < 8 || p.K < 8 || w->data == NULL ||
        w->dtype != AT_DT_F32 || w->rank != 4 || w->shape[0] != 3 || w->shape[1] != 3 ||
        w->shape[2] != p.C || w->shape[3] != p.K)
        return 0;
    return p.OH >= 8 && p.OW >= 8 ? 4 : 2;
}

/* The shared constant "winograd.Bt<m>" / "winograd.At<m>" (made on first use); -1 on
** ENOMEM. */
static int matrix(md_graph *g, int m, int which)
{
    const float *bt, *gm, *at;
    char name[32];
    int a = m + 2, t;
    snprintf(name, sizeof name, "winograd.%s%d", which ? "At" : "Bt", m);
    if ((t = md__tensor_find(g, name)) >= 0)
        return t;
    kn_winograd_matrices(m, &bt, &gm, &at);
    t = which ? md__tensor_const(g, name, AT_DT_F32, 2, (int64_t[]){m, a}, at)
              : md__tensor_const(g, name, AT_DT_F32, 2, (int64_t[]){a, a}, bt);
    if (t >= 0)
        g->tensors[t].is_weight = 1;
    return t;
}

static int activation(md_graph *g, const char *name, int rank, const int64_t *shape)
{
    char why[128];
    int t = md__tensor_get(g, name);
    if (t < 0 || md__set_shape(g, t, AT_DT_F32, rank, shape, why, sizeof why) != AT_OK)
        return -1;
    return t;
}

static int add_node(md_graph *g, const char *conv, const char *suffix, md_op_kind kind, int n_in,
                    const int *in, int out)
{
    char name[300];
    int nd;
    snprintf(name, sizeof name, "%.280s.%s", conv, suffix);
    if ((nd = md__node_add(g, name, "Conv", "")) < 0 ||
        md__node_io(g, nd, n_in, in, 1, &out) != AT_OK)
        return -1;
    g->nodes[nd].kind = kind;
    g->nodes[nd].nhwc = 1;
    g->tensors[out].producer = nd;
    return nd;
}

/* Put each rewritten convolution's three nodes where it was (new_at[i]: the first of them
** for node i, else -1): the graph stays in topological order and fusion sees the nodes in
** the order it saw the convolution (a residual add still joins the convolution's task, not
** a downsampling convolution's that comes later). */
static at_err place(md_graph *g, int n_orig, const int *new_at)
{
    int k = 0;
    int *order = at_malloc((size_t)g->n_nodes * sizeof *order);
    at_err err;
    if (order == NULL)
        return AT_ENOMEM;
    for (int i = 0; i < n_orig; i++) {
        order[k++] = i;
        if (new_at[i] >= 0)
            for (int j = 0; j < 3; j++)
                order[k++] = new_at[i] + j;
    }
    err = md__reorder_nodes(g, order);
    at_free(order);
    return err;
}

static at_err rewrite(md_graph *g, int node, int m)
{
    /* g->nodes and g->tensors move as nodes and tensors are added: indices only */
    int x = g->nodes[node].in[0], w = g->nodes[node].in[1], y = g->nodes[node].out[0];
    int b = g->nodes[node].n_in > 2 ? g->nodes[node].in[2] : -1;
    int64_t N = g->tensors[x].shape[0], H = g->tensors[y].shape[1], W = g->tensors[y].shape[2];
    int64_t C = g->tensors[x].shape[3], K = g->tensors[y].shape[3], a = m + 2;
    int64_t P = N * ((H + m - 1) / m) * ((W + m - 1) / m);
    char name[300], *conv = g->nodes[node].name;
    int bt, at, u, v, mm, ni, ng, no;
    if ((bt = matrix(g, m, 0)) < 0 || (at = matrix(g, m, 1)) < 0)
        return AT_ENOMEM;
    snprintf(name, sizeof name, "%.280s.wino_U", conv);
    if ((u = md__tensor_const(g, name, AT_DT_F32, 4, (int64_t[]){a, a, C, K}, NULL)) < 0)
        return AT_ENOMEM;
    g->tensors[u].is_weight = 1;
    kn_winograd_weight(m, C, K, g->tensors[w].data, g->tensors[u].data);
    snprintf(name, sizeof name, "%.280s.wino_V", conv);
    if ((v = activation(g, name, 4, (int64_t[]){a, a, P, C})) < 0)
        return AT_ENOMEM;
    snprintf(name, sizeof name, "%.280s.wino_M", conv);
    if ((mm = activation(g, name, 4, (int64_t[]){a, a, P, K})) < 0)
        return AT_ENOMEM;
    conv = g->nodes[node].name;
    if ((ni = add_node(g, conv, "wino_in", MD_OP_WINO_IN, 2, (int[]){x, bt}, v)) < 0)
        return AT_ENOMEM;
    conv = g->nodes[node].name;
    if ((ng = add_node(g, conv, "wino_gemm", MD_OP_WINO_GEMM, 2, (int[]){v, u}, mm)) < 0)
        return AT_ENOMEM;
    conv = g->nodes[node].name;
    if ((no = add_node(g, conv, "wino_out", MD_OP_WINO_OUT, b >= 0 ? 3 : 2,
                       (int[]){mm, at, b}, y)) < 0)
        return AT_ENOMEM;
    /* the convolution (and what was folded into it) is named with the output transform */
    {
        md_node *c = &g->nodes[node], *o = &g->nodes[no];
        int *mg = at_malloc((size_t)(c->n_merged + 1) * sizeof *mg);
        if (mg == NULL)
            return AT_ENOMEM;
        mg[0] = node;
        if (c->n_merged)
            memcpy(mg + 1, c->merged, (size_t)c->n_merged * sizeof *mg);
        o->merged = mg;
        o->n_merged = c->n_merged + 1;
        c->dead = 1;
    }
    (void)ni;
    (void)ng;
    return AT_OK;
}

static int selected(const md_graph *g, int node, int n_sel, const char *const *sel)
{
    if (n_sel < 0)
        return 1;
    for (int i = 0; i < n_sel; i++)
        if (strcmp(sel[i], g->nodes[node].name) == 0)
            return 1;
    return 0;
}

at_err md__plan_winograd(md_graph *g, int n_sel, const char *const *sel, int *n_done,
                         char *errmsg, size_t errmsg_size)
{
    int n = g->n_nodes, done = 0, *new_at;
    at_err err = AT_OK;
    *n_done = 0;
    (void)errmsg;
    (void)errmsg_size;
    if ((new_at = at_malloc((size_t)(n ? n : 1) * sizeof *new_at)) == NULL)
        return AT_ENOMEM;
    for (int i = 0; i < n && err == AT_OK; i++) {
        int m = md__winograd_m(g, i);
        new_at[i] = -1;
        if (m == 0 || !selected(g, i, n_sel, sel))
            continue;
        new_at[i] = g->n_nodes;
        if ((err = rewrite(g, i, m)) == AT_OK)
            done++;
    }
    if (err == AT_OK && done > 0)
        err = place(g, n, new_at);
    at_free(new_at);
    if (err != AT_OK || done == 0)
        return err;
    md__resolve_aliases(g);
    md__count_consumers(g);
    *n_done = done;
    return AT_OK;
}
