/* models/md_rewrite.c -- graph rewrites between shape inference and task extraction:
**
**   BatchNormalization after a Conv     folded into the Conv's weights and bias
**   BatchNormalization elsewhere        Mul and Add by per-channel constants
**   Add of a per-channel constant after a Conv, or of a per-column constant after a dense
**                                       layer: folded into its bias
**   Gemm, MatMul with a constant 2-d weight   'dense' (weight [N, K], bias [N]), the layout
**                                       of the library's dense operator
**   ReduceMean, Sub, Pow (or Mul), ReduceMean, Add eps, Sqrt, Div [, Mul gamma, Add beta]
**                                       over the last axis: one LayerNormalization
**   Transpose moving only dimensions of size 1   an alias
**   dense layer read only by Slices of its last dimension   one dense layer per Slice
**   x / c or x * c by one value, x a dense output seen through reshapes and transposes
**                                       folded into that dense layer's weight and bias
**
** Folding needs the values: a weight given as a graph input without an initializer is left
** as it is (its node still computes, as a task of its own where it cannot be fused).
** New nodes are appended, so the nodes are sorted again at the end. */
#include "models/md_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static int has_data(const md_graph *g, int t)
{
    return t >= 0 && g->tensors[t].data != NULL && g->tensors[t].dtype == AT_DT_F32;
}

static int live(const md_node *n)
{
    return !n->dead && !n->unsupported;
}

/* The only node reading tensor t (and t is no graph output), or -1. */
static int sole_consumer(const md_graph *g, int t)
{
    int found = -1;
    if (t < 0 || g->tensors[t].is_output || g->tensors[t].n_consumers != 1)
        return -1;
    for (int i = 0; i < g->n_nodes; i++) {
        const md_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] == t) {
                if (found >= 0 && found != i)
                    return -1;
                found = i;
            }
    }
    return found;
}

/* Is constant c, right-aligned against a tensor of rank 'rank', non-1 only in dimension
** 'dim' (where it has 'len' values)?  A constant of one value counts when len is 1. */
static int per_axis(const md_tensor *c, int rank, int dim, int64_t len)
{
    if (c->rank > rank || c->n_elems != len)
        return 0;
    for (int d = 0; d < c->rank; d++) {
        int od = d + (rank - c->rank);
        if (od != dim && c->shape[d] != 1)
            return 0;
        if (od == dim && c->shape[d] != len)
            return 0;
    }
    return 1;
}

static at_err attr_set_f(md_graph *g, int node, const char *name, double v)
{
    md_node *n = &g->nodes[node];
    md_attr a, *na;
    memset(&a, 0, sizeof a);
    if ((a.name = at_strdup(name)) == NULL)
        return AT_ENOMEM;
    a.type = MD_ATTR_FLOAT;
    a.f = v;
    na = at_realloc(n->attrs, (size_t)(n->n_attrs + 1) * sizeof *na);
    if (na == NULL) {
        at_free(a.name);
        return AT_ENOMEM;
    }
    n->attrs = na;
    n->attrs[n->n_attrs++] = a;
    return AT_OK;
}

/* Make node 'node' produce tensor 'out' instead of its own first output. */
static void take_output(md_graph *g, int node, int out)
{
    md_node *n = &g->nodes[node];
    if (n->out[0] >= 0)
        g->tensors[n->out[0]].producer = -1;
    n->out[0] = out;
    g->tensors[out].producer = node;
}

static at_err set_inputs(md_graph *g, int node, int n_in, const int *in)
{
    md_node *n = &g->nodes[node];
    int *a = at_malloc((size_t)n_in * sizeof *a);
    if (a == NULL)
        return AT_ENOMEM;
    memcpy(a, in, (size_t)n_in * sizeof *a);
    at_free(n->in);
    n->in = a;
    n->n_in = n_in;
    return AT_OK;
}

/* Record that dead node 'src' (and what was merged into it) now lives in node 'dst'. */
static at_err merge_into(md_graph *g, int dst, int src)
{
    md_node *d = &g->nodes[dst];
    const md_node *s = &g->nodes[src];
    int *m = at_realloc(d->merged, (size_t)(d->n_merged + 1 + s->n_merged) * sizeof *m);
    if (m == NULL)
        return AT_ENOMEM;
    d->merged = m;
    m[d->n_merged++] = src;
    for (int k = 0; k < s->n_merged; k++)
        m[d->n_merged++] = s->merged[k];
    return AT_OK;
}

/* A name for a rewrite's constant: "<node>.<what>". */
static void cname(char *out, size_t size, const md_node *n, const char *what)
{
    snprintf(out, size, "%.200s.%s", n->name, what);
}

/* ---- BatchNormalization ---- */

static at_err fold_batchnorm(md_graph *g, int bi)
{
    md_node *b = &g->nodes[bi];
    md_tensor xs = g->tensors[b->in[0]]; /* a copy: g->tensors moves as constants are made */
    const md_tensor *x = &xs;
    const float *gam, *bet, *mean, *var;
    int64_t C = x->shape[1], shape[MD_MAX_RANK];
    double eps = md__attr_f(b, "epsilon", 1e-5);
    float *s, *t;
    int p, ts, tt;
    char nm[256];
    at_err err = AT_OK;
    for (int k = 1; k < 5; k++)
        if (!has_data(g, b->in[k]))
            return md__unsupported(g, bi, "BatchNormalization needs its scale, bias, mean and "
                                   "variance as initializers (they are computed at run time "
                                   "or given as graph inputs)") == AT_ENOMEM
                       ? AT_ENOMEM
                       : AT_OK;
    gam = g->tensors[b->in[1]].data;
    bet = g->tensors[b->in[2]].data;
    mean = g->tensors[b->in[3]].data;
    var = g->tensors[b->in[4]].data;
    s = at_malloc((size_t)C * sizeof *s);
    t = at_malloc((size_t)C * sizeof *t);
    if (s == NULL || t == NULL) {
        err = AT_ENOMEM;
        goto out;
    }
    for (int64_t c = 0; c < C; c++) {
        double sc = gam[c] / sqrt((double)var[c] + eps);
        s[c] = (float)sc;
        t[c] = (float)(bet[c] - mean[c] * sc);
    }
    p = g->tensors[b->in[0]].producer;
    if (p >= 0 && live(&g->nodes[p]) && g->nodes[p].kind == MD_OP_CONV &&
        sole_consumer(g, b->in[0]) == bi && has_data(g, g->nodes[p].in[1]) &&
        (g->nodes[p].n_in < 3 || g->nodes[p].in[2] < 0 || has_data(g, g->nodes[p].in[2]))) {
        /* into the convolution: W'[k] = W[k] * s[k], B'[k] = B[k] * s[k] + t[k] */
        const md_node *cv = &g->nodes[p];
        const md_tensor *w = &g->tensors[cv->in[1]];
        const float *bias = cv->n_in > 2 && cv->in[2] >= 0 ? g->tensors[cv->in[2]].data : NULL;
        int64_t per_k = w->n_elems / C;
        float *nw = at_malloc((size_t)w->n_elems * sizeof *nw), *nb = at_malloc((size_t)C * 4);
        int in[3], tw, tb;
        if (nw == NULL || nb == NULL) {
            at_free(nw);
            at_free(nb);
            err = AT_ENOMEM;
            goto out;
        }
        for (int64_t k = 0; k < C; k++) {
            for (int64_t i = 0; i < per_k; i++)
                nw[k * per_k + i] = ((const float *)w->data)[k * per_k + i] * s[k];
            nb[k] = (bias ? bias[k] : 0.0f) * s[k] + t[k];
        }
        cname(nm, sizeof nm, cv, "W_bn");
        tw = md__tensor_const(g, nm, AT_DT_F32, w->rank, w->shape, nw);
        cname(nm, sizeof nm, cv, "B_bn");
        tb = md__tensor_const(g, nm, AT_DT_F32, 1, &C, nb);
        at_free(nw);
        at_free(nb);
        if (tw < 0 || tb < 0) {
            err = AT_ENOMEM;
            goto out;
        }
        in[0] = g->nodes[p].in[0];
        in[1] = tw;
        in[2] = tb;
        if ((err = set_inputs(g, p, 3, in)) != AT_OK)
            goto out;
        take_output(g, p, g->nodes[bi].out[0]);
        g->nodes[bi].dead = 1;
        err = merge_into(g, p, bi);
        goto out;
    }
    /* elsewhere: x * s + t, per channel */
    {
        int r = x->rank, mul_in[2], add_in[2], tmp, ai, out_t = b->out[0];
        shape[0] = C;
        for (int d = 1; d < r - 1; d++)
            shape[d] = 1;
        cname(nm, sizeof nm, b, "scale");
        ts = md__tensor_const(g, nm, AT_DT_F32, r - 1, shape, s);
        cname(nm, sizeof nm, b, "shift");
        tt = md__tensor_const(g, nm, AT_DT_F32, r - 1, shape, t);
        cname(nm, sizeof nm, b, "scaled");
        tmp = ts >= 0 && tt >= 0 ? md__tensor_get(g, nm) : -1;
        if (tmp < 0) {
            err = AT_ENOMEM;
            goto out;
        }
        g->tensors[tmp].dtype = AT_DT_F32;
        g->tensors[tmp].known = 1;
        g->tensors[tmp].rank = x->rank;
        memcpy(g->tensors[tmp].shape, x->shape, sizeof x->shape);
        g->tensors[tmp].n_elems = x->n_elems;
        mul_in[0] = g->nodes[bi].in[0];
        mul_in[1] = ts;
        add_in[0] = tmp;
        add_in[1] = tt;
        /* the Add keeps the BatchNormalization's name and type: tasks list it as such */
        snprintf(nm, sizeof nm, "%s", g->nodes[bi].name);
        if ((ai = md__node_add(g, nm, "BatchNormalization", "")) < 0) {
            err = AT_ENOMEM;
            goto out;
        }
        if ((err = md__node_io(g, ai, 2, add_in, 1, &out_t)) != AT_OK ||
            (err = set_inputs(g, bi, 2, mul_in)) != AT_OK)
            goto out;
        g->nodes[bi].kind = MD_OP_MUL;
        g->nodes[ai].kind = MD_OP_ADD;
        g->nodes[bi].n_out = 1;
        g->nodes[bi].out[0] = tmp;
        g->tensors[tmp].producer = bi;
        g->tensors[out_t].producer = ai;
    }
out:
    at_free(s);
    at_free(t);
    return err;
}

/* ---- biases ---- */

/* Add of a constant after a Conv (per channel) or a dense layer (per column): into the
** producer's bias. */
static at_err fold_bias_add(md_graph *g, int ai)
{
    const md_node *a = &g->nodes[ai];
    for (int side = 0; side < 2; side++) {
        int x = a->in[side], c = a->in[1 - side], p, dim, bias_in;
        int64_t len;
        const md_node *pn;
        float *nb;
        const float *old = NULL;
        int in[3], tb;
        char nm[256];
        if (x < 0 || c < 0 || !has_data(g, c) || (p = g->tensors[x].producer) < 0)
            continue;
        pn = &g->nodes[p];
        if (!live(pn) || (pn->kind != MD_OP_CONV && pn->kind != MD_OP_DENSE) ||
            sole_consumer(g, x) != ai)
            continue;
        dim = pn->kind == MD_OP_CONV ? 1 : g->tensors[x].rank - 1;
        len = g->tensors[x].shape[dim];
        if (!per_axis(&g->tensors[c], g->tensors[x].rank, dim, len) ||
            g->tensors[a->out[0]].rank != g->tensors[x].rank)
            continue;
        bias_in = pn->n_in > 2 ? pn->in[2] : -1;
        if (bias_in >= 0 && !has_data(g, bias_in))
            continue;
        if (bias_in >= 0)
            old = g->tensors[bias_in].data;
        if ((nb = at_malloc((size_t)len * sizeof *nb)) == NULL)
            return AT_ENOMEM;
        for (int64_t k = 0; k < len; k++)
            nb[k] = (old ? old[k] : 0.0f) + ((const float *)g->tensors[c].data)[k];
        cname(nm, sizeof nm, pn, "B_add");
        tb = md__tensor_const(g, nm, AT_DT_F32, 1, &len, nb);
        at_free(nb);
        if (tb < 0)
            return AT_ENOMEM;
        in[0] = pn->in[0];
        in[1] = pn->in[1];
        in[2] = tb;
        if (set_inputs(g, p, 3, in) != AT_OK)
            return AT_ENOMEM;
        take_output(g, p, g->nodes[ai].out[0]);
        g->nodes[ai].dead = 1;
        return merge_into(g, p, ai);
    }
    return AT_OK;
}

/* ---- Gemm and MatMul into dense ---- */

/* A new constant holding the transpose of 2-d float data [r, c] times 'scale'. */
static int const_transposed(md_graph *g, const char *name, const md_tensor *m, double scale,
                            int transpose)
{
    int64_t r = m->shape[0], c = m->shape[1], shape[2];
    const float *src = m->data;
    float *dst = at_malloc((size_t)(r * c) * sizeof *dst);
    int t;
    if (dst == NULL)
        return -1;
    for (int64_t i = 0; i < r; i++)
        for (int64_t j = 0; j < c; j++) {
            float v = (float)(src[i * c + j] * scale);
            if (transpose)
                dst[j * r + i] = v;
            else
                dst[i * c + j] = v;
        }
    shape[0] = transpose ? c : r;
    shape[1] = transpose ? r : c;
    t = md__tensor_const(g, name, AT_DT_F32, 2, shape, dst);
    at_free(dst);
    return t;
}

static at_err gemm_to_dense(md_graph *g, int gi)
{
    md_node *n = &g->nodes[gi];
    int a = n->in[0], b = n->in[1], c = n->n_in > 2 ? n->in[2] : -1;
    int transb = (int)md__attr_i(n, "transB", 0), in[3], k = 2, out_t = n->out[0];
    double alpha = md__attr_f(n, "alpha", 1.0), beta = md__attr_f(n, "beta", 1.0);
    int64_t N = g->tensors[out_t].shape[1];
    char nm[256];
    int w;
    if (has_data(g, b)) {
        cname(nm, sizeof nm, n, "W");
        if ((w = const_transposed(g, nm, &g->tensors[b], alpha, !transb)) < 0)
            return AT_ENOMEM;
    } else if (transb && alpha == 1.0) {
        w = b; /* a weight given at run time, already [N, K] */
    } else if (!transb && alpha == 1.0) {
        w = -1; /* stays a matmul with a [K, N] weight */
    } else {
        return md__unsupported(g, gi, "Gemm with alpha %g needs its weight as an initializer",
                               alpha) == AT_ENOMEM ? AT_ENOMEM : AT_OK;
    }
    n = &g->nodes[gi];
    in[0] = a;
    in[1] = w >= 0 ? w : b;
    if (c >= 0 && has_data(g, c) && per_axis(&g->tensors[c], 2, 1, N) && w >= 0) {
        float *nb = at_malloc((size_t)N * sizeof *nb);
        int tb;
        if (nb == NULL)
            return AT_ENOMEM;
        for (int64_t j = 0; j < N; j++)
            nb[j] = (float)(((const float *)g->tensors[c].data)[j] * beta);
        cname(nm, sizeof nm, n, "B");
        tb = md__tensor_const(g, nm, AT_DT_F32, 1, &N, nb);
        at_free(nb);
        if (tb < 0)
            return AT_ENOMEM;
        in[k++] = tb;
        c = -1;
    }
    if (c >= 0 && beta != 1.0)
        return md__unsupported(g, gi, "Gemm with beta %g needs C as an initializer", beta) ==
                       AT_ENOMEM ? AT_ENOMEM : AT_OK;
    if (set_inputs(g, gi, k, in) != AT_OK)
        return AT_ENOMEM;
    g->nodes[gi].kind = w >= 0 ? MD_OP_DENSE : MD_OP_MATMUL;
    if (c >= 0) {
        /* C that is no per-column constant: a separate Add after the product */
        int tmp, ai, add_in[2];
        cname(nm, sizeof nm, &g->nodes[gi], "AB");
        if ((tmp = md__tensor_get(g, nm)) < 0)
            return AT_ENOMEM;
        g->tensors[tmp] .dtype = AT_DT_F32;
        g->tensors[tmp].known = 1;
        g->tensors[tmp].rank = 2;
        g->tensors[tmp].shape[0] = g->tensors[out_t].shape[0];
        g->tensors[tmp].shape[1] = N;
        g->tensors[tmp].n_elems = g->tensors[out_t].n_elems;
        cname(nm, sizeof nm, &g->nodes[gi], "C");
        if ((ai = md__node_add(g, nm, "Add", "")) < 0)
            return AT_ENOMEM;
        add_in[0] = tmp;
        add_in[1] = c;
        if (md__node_io(g, ai, 2, add_in, 1, &out_t) != AT_OK)
            return AT_ENOMEM;
        g->nodes[gi].out[0] = tmp;
        g->tensors[tmp].producer = gi;
        g->tensors[out_t].producer = ai;
    }
    return AT_OK;
}

static at_err matmul_to_dense(md_graph *g, int mi)
{
    md_node *n = &g->nodes[mi];
    int b = n->in[1], w, in[2];
    char nm[256];
    if (g->tensors[b].rank != 2 || !has_data(g, b))
        return AT_OK;
    cname(nm, sizeof nm, n, "W");
    if ((w = const_transposed(g, nm, &g->tensors[b], 1.0, 1)) < 0)
        return AT_ENOMEM;
    in[0] = g->nodes[mi].in[0];
    in[1] = w;
    if (set_inputs(g, mi, 2, in) != AT_OK)
        return AT_ENOMEM;
    g->nodes[mi].kind = MD_OP_DENSE;
    return AT_OK;
}

/* ---- the decomposed layer norm ---- */

static int is_last_axis_mean(const md_graph *g, const md_node *n)
{
    int64_t axes[MD_MAX_RANK];
    int rank = g->tensors[n->in[0]].rank;
    return live(n) && n->kind == MD_OP_REDUCEMEAN && md__attr_i(n, "keepdims", 1) == 1 &&
           md__node_axes(g, n, rank, axes, MD_MAX_RANK) == 1 && axes[0] == rank - 1;
}

/* The node reading t that is of kind k with t as input 'pos' (-1: any position). */
static int consumer_of(const md_graph *g, int t, md_op_kind k, int pos)
{
    for (int i = 0; i < g->n_nodes; i++) {
        const md_node *n = &g->nodes[i];
        if (!live(n) || n->kind != k)
            continue;
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j] == t && (pos < 0 || pos == j))
                return i;
    }
    return -1;
}

static int other_input(const md_node *n, int t)
{
    if (n->n_in != 2)
        return -1;
    return n->in[0] == t ? n->in[1] : (n->in[1] == t ? n->in[0] : -1);
}

/* A parameter: a constant (perhaps folded from an Identity of an initializer, as torch
** exports shared weights) or a weight given as a graph input. */
static int is_param(const md_graph *g, int t)
{
    return g->tensors[t].data != NULL || g->tensors[t].producer < 0;
}

static at_err match_layernorm(md_graph *g, int mi)
{
    const md_node *m1 = &g->nodes[mi];
    int x = m1->in[0], mean = m1->out[0], d, sq, m2, e, q, dv, mul, add, tail, gamma = -1;
    int beta = -1, nodes[9], n_nodes = 0, in[3];
    int64_t D;
    double eps, p;
    char nm[256];
    if (!is_last_axis_mean(g, m1))
        return AT_OK;
    D = g->tensors[x].shape[g->tensors[x].rank - 1];
    /* d = x - mean, read by the square and by the division */
    if ((d = sole_consumer(g, mean)) < 0 || !live(&g->nodes[d]) || g->nodes[d].kind != MD_OP_SUB ||
        g->nodes[d].in[0] != x || g->nodes[d].in[1] != mean)
        return AT_OK;
    {
        int dt = g->nodes[d].out[0];
        if (g->tensors[dt].n_consumers != 2 || g->tensors[dt].is_output)
            return AT_OK;
        sq = consumer_of(g, dt, MD_OP_POW, 0);
        if (sq >= 0 && (g->tensors[g->nodes[sq].in[1]].data == NULL ||
                        g->tensors[g->nodes[sq].in[1]].n_elems != 1))
            return AT_OK;
        if (sq >= 0) {
            const md_tensor *ex = &g->tensors[g->nodes[sq].in[1]];
            p = ex->dtype == AT_DT_F32 ? *(const float *)ex->data : (double)*(const int64_t *)ex->data;
            if (p != 2)
                return AT_OK;
        } else {
            sq = consumer_of(g, dt, MD_OP_MUL, -1);
            if (sq < 0 || g->nodes[sq].in[0] != dt || g->nodes[sq].in[1] != dt)
                return AT_OK;
        }
        if ((m2 = sole_consumer(g, g->nodes[sq].out[0])) < 0 ||
            !is_last_axis_mean(g, &g->nodes[m2]))
            return AT_OK;
        if ((e = sole_consumer(g, g->nodes[m2].out[0])) < 0 || !live(&g->nodes[e]) ||
            g->nodes[e].kind != MD_OP_ADD)
            return AT_OK;
        {
            int c = other_input(&g->nodes[e], g->nodes[m2].out[0]);
            if (c < 0 || !has_data(g, c) || g->tensors[c].n_elems != 1)
                return AT_OK;
            eps = *(const float *)g->tensors[c].data;
        }
        if ((q = sole_consumer(g, g->nodes[e].out[0])) < 0 || !live(&g->nodes[q]) ||
            g->nodes[q].kind != MD_OP_SQRT)
            return AT_OK;
        if ((dv = sole_consumer(g, g->nodes[q].out[0])) < 0 || !live(&g->nodes[dv]) ||
            g->nodes[dv].kind != MD_OP_DIV || g->nodes[dv].in[0] != dt ||
            g->nodes[dv].in[1] != g->nodes[q].out[0])
            return AT_OK;
    }
    nodes[n_nodes++] = d;
    nodes[n_nodes++] = sq;
    nodes[n_nodes++] = m2;
    nodes[n_nodes++] = e;
    nodes[n_nodes++] = q;
    nodes[n_nodes++] = dv;
    tail = g->nodes[dv].out[0];
    /* optional scale and shift over the last axis */
    if ((mul = sole_consumer(g, tail)) >= 0 && live(&g->nodes[mul]) &&
        g->nodes[mul].kind == MD_OP_MUL) {
        int c = other_input(&g->nodes[mul], tail);
        if (c >= 0 && is_param(g, c) &&
            per_axis(&g->tensors[c], g->tensors[x].rank, g->tensors[x].rank - 1, D)) {
            gamma = c;
            nodes[n_nodes++] = mul;
            tail = g->nodes[mul].out[0];
            if ((add = sole_consumer(g, tail)) >= 0 && live(&g->nodes[add]) &&
                g->nodes[add].kind == MD_OP_ADD) {
                c = other_input(&g->nodes[add], tail);
                if (c >= 0 && is_param(g, c) &&
                    per_axis(&g->tensors[c], g->tensors[x].rank, g->tensors[x].rank - 1, D)) {
                    beta = c;
                    nodes[n_nodes++] = add;
                    tail = g->nodes[add].out[0];
                }
            }
        }
    }
    if (gamma < 0) {
        float *ones = at_malloc((size_t)D * sizeof *ones);
        if (ones == NULL)
            return AT_ENOMEM;
        for (int64_t j = 0; j < D; j++)
            ones[j] = 1.0f;
        cname(nm, sizeof nm, &g->nodes[mi], "gamma");
        gamma = md__tensor_const(g, nm, AT_DT_F32, 1, &D, ones);
        at_free(ones);
        if (gamma < 0)
            return AT_ENOMEM;
    }
    if (beta < 0) {
        float *zeros = at_calloc((size_t)D, sizeof *zeros);
        if (zeros == NULL)
            return AT_ENOMEM;
        cname(nm, sizeof nm, &g->nodes[mi], "beta");
        beta = md__tensor_const(g, nm, AT_DT_F32, 1, &D, zeros);
        at_free(zeros);
        if (beta < 0)
            return AT_ENOMEM;
    }
    in[0] = x;
    in[1] = gamma;
    in[2] = beta;
    if (set_inputs(g, mi, 3, in) != AT_OK || attr_set_f(g, mi, "epsilon", eps) != AT_OK)
        return AT_ENOMEM;
    {
        md_node *ln = &g->nodes[mi];
        char *ot = at_strdup("LayerNormalization");
        if (ot == NULL)
            return AT_ENOMEM;
        at_free(ln->op_type);
        ln->op_type = ot;
        ln->kind = MD_OP_LAYERNORM;
    }
    /* drop the attribute 'axes' of the ReduceMean: LayerNormalization's axis is -1 */
    for (int k = 0; k < g->nodes[mi].n_attrs; k++)
        if (strcmp(g->nodes[mi].attrs[k].name, "axes") == 0)
            g->nodes[mi].attrs[k].name[0] = '_';
    take_output(g, mi, tail);
    for (int k = 0; k < n_nodes; k++) {
        g->nodes[nodes[k]].dead = 1;
        if (merge_into(g, mi, nodes[k]) != AT_OK)
            return AT_ENOMEM;
    }
    return AT_OK;
}

/* LayerNormalization without its optional bias: a zero bias (the library's has one). */
static at_err layernorm_bias(md_graph *g, int li)
{
    const md_node *n = &g->nodes[li];
    int64_t D;
    float *zeros;
    int in[3], t;
    char nm[256];
    if (n->n_in > 2 && n->in[2] >= 0)
        return AT_OK;
    D = g->tensors[n->in[1]].n_elems;
    if ((zeros = at_calloc((size_t)D, sizeof *zeros)) == NULL)
        return AT_ENOMEM;
    cname(nm, sizeof nm, n, "B");
    t = md__tensor_const(g, nm, AT_DT_F32, 1, &D, zeros);
    at_free(zeros);
    if (t < 0)
        return AT_ENOMEM;
    in[0] = g->nodes[li].in[0];
    in[1] = g->nodes[li].in[1];
    in[2] = t;
    return set_inputs(g, li, 3, in);
}

/* ---- driver ---- */

static void mark_weights(md_graph *g)
{
    for (int i = 0; i < g->n_nodes; i++) {
        const md_node *n = &g->nodes[i];
        if (!live(n))
            continue;
        switch (n->kind) {
        case MD_OP_CONV:
        case MD_OP_DENSE:
        case MD_OP_LAYERNORM:
            for (int k = 1; k < n->n_in; k++)
                if (n->in[k] >= 0 && g->tensors[n->in[k]].producer < 0)
                    g->tensors[n->in[k]].is_weight = 1;
            break;
        case MD_OP_MATMUL:
            if (g->tensors[n->in[1]].producer < 0 && g->tensors[n->in[1]].rank == 2)
                g->tensors[n->in[1]].is_weight = 1;
            break;
        default:
            break;
        }
    }
}

/* ---- attention: the packed projection, the scaling, transposes that move nothing ---- */

/* A Transpose that moves only dimensions of size 1 ([1, 128, 768] -> [128, 1, 768]) keeps
** every byte in place: an alias. */
static void trivial_transpose(md_graph *g, int ti)
{
    md_node *n = &g->nodes[ti];
    const md_tensor *x = &g->tensors[n->in[0]];
    int64_t perm[MD_MAX_RANK];
    int last = -1, r = x->rank;
    if (!x->known || x->data)
        return;
    if (md__attr_ints(n, "perm", perm, MD_MAX_RANK) != r)
        for (int d = 0; d < r; d++)
            perm[d] = r - 1 - d;
    for (int d = 0; d < r; d++) {
        if (perm[d] < 0 || perm[d] >= r)
            return;
        if (x->shape[perm[d]] == 1)
            continue;
        if (perm[d] < last)
            return;
        last = (int)perm[d];
    }
    n->kind = MD_OP_IDENTITY;
}

/* A dense layer read only by Slices that each take a range of its last dimension (torch's
** packed Q/K/V projection, cut in three) becomes one dense layer per Slice, each with its
** rows of the weight and bias, writing the Slice's output: no copy at run time, and three
** tasks of the shape of the output projection instead of one three times as wide. */
static at_err split_dense(md_graph *g, int di)
{
    const md_node *n = &g->nodes[di];
    int t = n->out[0], w = n->in[1], b = n->n_in > 2 ? n->in[2] : -1, x = n->in[0];
    const md_tensor *o = &g->tensors[t];
    int slices[16], n_sl = 0, r = o->rank;
    int64_t lo[16], len[16], K;
    char why[256], nm[300];
    if (!has_data(g, w) || (b >= 0 && !has_data(g, b)) || o->is_output || !o->known || r < 1 ||
        o->n_consumers < 2 || o->n_consumers > 16)
        return AT_OK;
    for (int i = 0; i < g->n_nodes; i++) {
        const md_node *c = &g->nodes[i];
        int64_t l[MD_MAX_RANK], st[MD_MAX_RANK], out[MD_MAX_RANK];
        int reads = 0;
        if (c->dead)
            continue;
        for (int k = 0; k < c->n_in; k++)
            reads += c->in[k] == t;
        if (!reads)
            continue;
        if (!live(c) || c->kind != MD_OP_SLICE || c->in[0] != t || reads != 1 ||
            c->out[0] < 0 || n_sl == 16 ||
            md__slice_params(g, c, o, l, st, out, why, sizeof why) != AT_OK)
            return AT_OK;
        for (int d = 0; d < r - 1; d++)
            if (l[d] != 0 || st[d] != 1 || out[d] != o->shape[d])
                return AT_OK;
        if (st[r - 1] != 1 || out[r - 1] < 1)
            return AT_OK;
        slices[n_sl] = i;
        lo[n_sl] = l[r - 1];
        len[n_sl++] = out[r - 1];
    }
    if (n_sl != o->n_consumers)
        return AT_OK;
    K = g->tensors[w].shape[1];
    for (int s = 0; s < n_sl; s++) {
        int nw, nb = -1, nd, in[3], sl = slices[s], y = g->nodes[sl].out[0];
        int64_t wshape[2] = {len[s], K};
        snprintf(nm, sizeof nm, "%.250s.part%d.W", g->nodes[di].name, s);
        nw = md__tensor_const(g, nm, AT_DT_F32, 2, wshape,
                              (const float *)g->tensors[w].data + lo[s] * K);
        if (nw < 0)
            return AT_ENOMEM;
        if (b >= 0) {
            snprintf(nm, sizeof nm, "%.250s.part%d.B", g->nodes[di].name, s);
            if ((nb = md__tensor_const(g, nm, AT_DT_F32, 1, &len[s],
                                       (const float *)g->tensors[b].data + lo[s])) < 0)
                return AT_ENOMEM;
        }
        snprintf(nm, sizeof nm, "%.250s.part%d", g->nodes[di].name, s);
        if ((nd = md__node_add(g, nm, g->nodes[di].op_type, "")) < 0)
            return AT_ENOMEM;
        in[0] = x;
        in[1] = nw;
        in[2] = nb;
        if (md__node_io(g, nd, nb >= 0 ? 3 : 2, in, 1, &y) != AT_OK)
            return AT_ENOMEM;
        g->nodes[nd].kind = MD_OP_DENSE;
        g->tensors[y].producer = nd;
        if (merge_into(g, nd, di) != AT_OK || merge_into(g, nd, sl) != AT_OK)
            return AT_ENOMEM;
        g->nodes[sl].dead = 1;
    }
    g->nodes[di].dead = 1;
    return AT_OK;
}

/* x / c or x * c with c a constant of one value, where x is a dense layer's output seen
** through reshapes and transposes nobody else reads (attention's 1/sqrt(d) on Q): the
** dense layer's weight and bias are scaled instead, and the node becomes an alias. */
static at_err fold_scale(md_graph *g, int mi)
{
    const md_node *n = &g->nodes[mi];
    int x, c, t, p;
    double v;
    if (n->n_in != 2 || n->in[0] < 0 || n->in[1] < 0)
        return AT_OK;
    x = n->in[0];
    c = n->in[1];
    if (n->kind == MD_OP_MUL && has_data(g, x) && !has_data(g, c)) {
        x = n->in[1];
        c = n->in[0];
    }
    if (!has_data(g, c) || has_data(g, x) || g->tensors[c].n_elems < 1)
        return AT_OK;
    v = ((const float *)g->tensors[c].data)[0];
    for (int64_t i = 1; i < g->tensors[c].n_elems; i++)
        if (((const float *)g->tensors[c].data)[i] != v)
            return AT_OK;
    if (n->kind == MD_OP_DIV) {
        if (v == 0 || !isfinite(v))
            return AT_OK;
        v = 1.0 / v;
    }
    /* back through aliases and transposes with one consumer each */
    for (t = x;;) {
        if (g->tensors[t].is_output || g->tensors[t].n_consumers != 1)
            return AT_OK;
        p = g->tensors[t].producer;
        if (p < 0 || !live(&g->nodes[p]))
            return AT_OK;
        if (g->nodes[p].kind == MD_OP_DENSE)
            break;
        if (md_op_class_of(g->nodes[p].kind) != MD_CLS_ALIAS &&
            g->nodes[p].kind != MD_OP_TRANSPOSE)
            return AT_OK;
        t = g->nodes[p].in[0];
        if (t < 0)
            return AT_OK;
    }
    {
        md_node *d = &g->nodes[p];
        int w = d->in[1], b = d->n_in > 2 ? d->in[2] : -1, nw, nb = -1, in[3];
        char nm[300];
        if (!has_data(g, w) || (b >= 0 && !has_data(g, b)))
            return AT_OK;
        snprintf(nm, sizeof nm, "%.250s.scaled", g->tensors[w].name);
        if ((nw = const_transposed(g, nm, &g->tensors[w], v, 0)) < 0)
            return AT_ENOMEM;
        if (b >= 0) {
            float *sb = at_malloc((size_t)g->tensors[b].n_elems * sizeof *sb);
            if (sb == NULL)
                return AT_ENOMEM;
            for (int64_t i = 0; i < g->tensors[b].n_elems; i++)
                sb[i] = (float)(((const float *)g->tensors[b].data)[i] * v);
            snprintf(nm, sizeof nm, "%.250s.scaled", g->tensors[b].name);
            nb = md__tensor_const(g, nm, AT_DT_F32, g->tensors[b].rank, g->tensors[b].shape, sb);
            at_free(sb);
            if (nb < 0)
                return AT_ENOMEM;
        }
        d = &g->nodes[p];
        in[0] = d->in[0];
        in[1] = nw;
        in[2] = nb;
        if (set_inputs(g, p, nb >= 0 ? 3 : 2, in) != AT_OK)
            return AT_ENOMEM;
        if (merge_into(g, p, mi) != AT_OK)
            return AT_ENOMEM;
        in[0] = x;
        if (set_inputs(g, mi, 1, in) != AT_OK)
            return AT_ENOMEM;
        g->nodes[mi].kind = MD_OP_IDENTITY;
    }
    return AT_OK;
}

at_err md__rewrite(md_graph *g, char *errmsg, size_t errmsg_size)
{
    at_err err = AT_OK;
    int n0 = g->n_nodes;
    md__count_consumers(g);
    for (int i = 0; i < n0 && err == AT_OK; i++) {
        md_node *n = &g->nodes[i];
        if (!live(n))
            continue;
        if (n->kind == MD_OP_GEMM)
            err = gemm_to_dense(g, i);
        else if (n->kind == MD_OP_MATMUL)
            err = matmul_to_dense(g, i);
    }
    md__count_consumers(g);
    for (int i = 0; i < n0 && err == AT_OK; i++)
        if (live(&g->nodes[i]) && g->nodes[i].kind == MD_OP_BATCHNORM) {
            err = fold_batchnorm(g, i);
            md__count_consumers(g);
        }
    for (int i = 0; i < g->n_nodes && err == AT_OK; i++)
        if (live(&g->nodes[i]) && g->nodes[i].kind == MD_OP_ADD) {
            err = fold_bias_add(g, i);
            md__count_consumers(g);
        }
    for (int i = 0; i < g->n_nodes && err == AT_OK; i++)
        if (live(&g->nodes[i]) && g->nodes[i].kind == MD_OP_REDUCEMEAN) {
            err = match_layernorm(g, i);
            md__count_consumers(g);
        }
    for (int i = 0; i < g->n_nodes && err == AT_OK; i++)
        if (live(&g->nodes[i]) && g->nodes[i].kind == MD_OP_LAYERNORM)
            err = layernorm_bias(g, i);
    for (int i = 0; i < g->n_nodes && err == AT_OK; i++)
        if (live(&g->nodes[i]) && g->nodes[i].kind == MD_OP_TRANSPOSE)
            trivial_transpose(g, i);
    md__count_consumers(g);
    for (int i = 0, n1 = g->n_nodes; i < n1 && err == AT_OK; i++)
        if (live(&g->nodes[i]) && g->nodes[i].kind == MD_OP_DENSE) {
            err = split_dense(g, i);
            md__count_consumers(g);
        }
    for (int i = 0; i < g->n_nodes && err == AT_OK; i++)
        if (live(&g->nodes[i]) &&
            (g->nodes[i].kind == MD_OP_DIV || g->nodes[i].kind == MD_OP_MUL)) {
            err = fold_scale(g, i);
            md__count_consumers(g);
        }
    if (err != AT_OK)
        return err;
    mark_weights(g);
    return md__topo_sort(g, errmsg, errmsg_size);
}
