/* models/md_infer.c -- shape inference and constant folding, node by node in topological
** order.
**
** A node whose inputs all have values (initializers, Constant nodes, folded results) and
** whose operator can be evaluated here is folded: its outputs get values and the node is
** dead.  That covers the shape arithmetic exporters emit (Shape -> Gather -> Unsqueeze ->
** Concat -> Reshape) and constant subexpressions.  Every other supported node gets its
** output shapes.  A node that cannot be supported (an unknown operator, an attribute
** outside what the library computes, inconsistent shapes) is marked unsupported with a
** warning naming it; its outputs take the shapes the file declares (value_info, graph
** outputs) when it has them, so the rest of the model still gives tasks. */
#include "models/md_int.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define WHY_SIZE 256

at_err md__unsupported(md_graph *g, int node, const char *fmt, ...)
{
    md_node *n = &g->nodes[node];
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    n->unsupported = 1;
    at_free(n->why);
    if ((n->why = at_strdup(text)) == NULL)
        return AT_ENOMEM;
    if (md__warn(g, "%s: node '%s' (%s%s%s): %s", g->name, n->name,
                 n->domain[0] ? n->domain : "", n->domain[0] ? "." : "", n->op_type, text) != AT_OK)
        return AT_ENOMEM;
    return AT_EUNSUPPORTED;
}

at_err md__set_shape(md_graph *g, int t, at_dtype dt, int rank, const int64_t *shape, char *why,
                     size_t why_size)
{
    md_tensor *x = &g->tensors[t];
    int64_t n = 1;
    if (rank < 0 || rank > MD_MAX_RANK) {
        snprintf(why, why_size, "'%s' would have %d dimensions (at most %d)", x->name, rank,
                 MD_MAX_RANK);
        return AT_EUNSUPPORTED;
    }
    for (int d = 0; d < rank; d++) {
        if (shape[d] <= 0) {
            snprintf(why, why_size, "'%s' would have dimension %d of size %lld (empty tensors "
                     "are not supported)", x->name, d, (long long)shape[d]);
            return AT_EUNSUPPORTED;
        }
        if (n > INT32_MAX / shape[d]) {
            snprintf(why, why_size, "'%s' would have more than 2147483647 elements", x->name);
            return AT_EUNSUPPORTED;
        }
        n *= shape[d];
    }
    x->dtype = dt;
    x->known = 1;
    x->rank = rank;
    memcpy(x->shape, shape, (size_t)rank * sizeof *shape);
    x->n_elems = n;
    return AT_OK;
}

/* ---- constants ---- */

static int is_const(const md_graph *g, int t)
{
    return t >= 0 && g->tensors[t].data != NULL;
}

/* The values of an int64 constant: count, or -1 when 't' is not one. */
static int const_ints(const md_graph *g, int t, const int64_t **v)
{
    if (!is_const(g, t) || g->tensors[t].dtype != AT_DT_I64 || g->tensors[t].n_elems > 64)
        return -1;
    *v = g->tensors[t].data;
    return (int)g->tensors[t].n_elems;
}

/* A constant that holds one value (any shape whose elements are all equal). */
static int const_scalar(const md_graph *g, int t, double *v)
{
    const md_tensor *x;
    if (!is_const(g, t))
        return 0;
    x = &g->tensors[t];
    if (x->n_elems < 1)
        return 0;
    for (int64_t i = 0; i < x->n_elems; i++) {
        double e = x->dtype == AT_DT_F32 ? ((const float *)x->data)[i]
                                          : (double)((const int64_t *)x->data)[i];
        if (i == 0)
            *v = e;
        else if (e != *v)
            return 0;
    }
    return 1;
}

static at_err set_data(md_graph *g, int t, at_dtype dt, int rank, const int64_t *shape,
                       void *data, char *why, size_t why_size)
{
    at_err err;
    /* constants may be empty (a Reshape's shape of a scalar, an empty Concat part) */
    int64_t n = 1;
    for (int d = 0; d < rank; d++)
        n *= shape[d];
    if (n == 0 && rank <= MD_MAX_RANK) {
        md_tensor *x = &g->tensors[t];
        x->dtype = dt;
        x->known = 1;
        x->rank = rank;
        memcpy(x->shape, shape, (size_t)rank * sizeof *shape);
        x->n_elems = 0;
        at_free(x->data);
        x->data = data;
        return AT_OK;
    }
    if ((err = md__set_shape(g, t, dt, rank, shape, why, why_size)) != AT_OK) {
        at_free(data);
        return err;
    }
    at_free(g->tensors[t].data);
    g->tensors[t].data = data;
    return AT_OK;
}

/* ---- broadcasting ---- */

static int broadcast(const int64_t *a, int ra, const int64_t *b, int rb, int64_t *out, int *ro)
{
    int r = ra > rb ? ra : rb;
    for (int d = 0; d < r; d++) {
        int64_t x = d - (r - ra) >= 0 ? a[d - (r - ra)] : 1;
        int64_t y = d - (r - rb) >= 0 ? b[d - (r - rb)] : 1;
        if (x != y && x != 1 && y != 1)
            return -1;
        out[d] = x == 1 ? y : x;
    }
    *ro = r;
    return 0;
}

/* Element strides of an input of shape s[r] read at the indices of an output of rank R
** (0 where it broadcasts). */
static void bcast_strides(const int64_t *s, int r, int R, int64_t *st)
{
    int64_t acc = 1;
    for (int d = R - 1; d >= 0; d--) {
        int k = d - (R - r);
        if (k < 0) {
            st[d] = 0;
            continue;
        }
        st[d] = s[k] == 1 ? 0 : acc;
        acc *= s[k];
    }
}

static double ev_unary(md_op_kind k, double x, const md_node *n)
{
    switch (k) {
    case MD_OP_RELU: return x > 0 ? x : 0;
    case MD_OP_SIGMOID: return 1 / (1 + exp(-x));
    case MD_OP_TANH: return tanh(x);
    case MD_OP_ERF: return erf(x);
    case MD_OP_EXP: return exp(x);
    case MD_OP_LOG: return log(x);
    case MD_OP_SQRT: return sqrt(x);
    case MD_OP_ABS: return fabs(x);
    case MD_OP_NEG: return -x;
    case MD_OP_RECIPROCAL: return 1 / x;
    case MD_OP_LEAKYRELU: return x >= 0 ? x : x * md__attr_f(n, "alpha", 0.01);
    case MD_OP_GELU: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    case MD_OP_NOT: return x == 0;
    case MD_OP_TO_BOOL: return x != 0;
    default: return x;
    }
}

static double ev_binary(md_op_kind k, double x, double y, int is_int)
{
    switch (k) {
    case MD_OP_ADD: return x + y;
    case MD_OP_SUB: return x - y;
    case MD_OP_MUL: return x * y;
    case MD_OP_DIV:
        if (is_int)
            return y == 0 ? 0 : (double)((int64_t)x / (int64_t)y);
        return x / y;
    case MD_OP_POW: return pow(x, y);
    case MD_OP_MAX: return x > y ? x : y;
    case MD_OP_MIN: return x < y ? x : y;
    case MD_OP_EQUAL: return x == y;
    case MD_OP_GREATER: return x > y;
    case MD_OP_LESS: return x < y;
    default: return x;
    }
}

static int elem_binary(md_op_kind k);

/* Operators whose result is a bool (int64 0/1 as a constant, float 0/1 at run time). */
static int elem_bool(md_op_kind k)
{
    return k == MD_OP_EQUAL || k == MD_OP_GREATER || k == MD_OP_LESS || k == MD_OP_NOT ||
           k == MD_OP_TO_BOOL;
}

static double elem_at(const md_tensor *t, int64_t i)
{
    return t->dtype == AT_DT_F32 ? ((const float *)t->data)[i]
                                 : (double)((const int64_t *)t->data)[i];
}

/* Fold an elementwise node whose inputs are all constants (up to three: Where). */
static at_err fold_elem(md_graph *g, int node, char *why, size_t why_size)
{
    const md_node *n = &g->nodes[node];
    const md_tensor *in[3] = {NULL, NULL, NULL};
    int64_t shape[MD_MAX_RANK], st[3][MD_MAX_RANK], idx[MD_MAX_RANK] = {0};
    int r, is_int, out_int, n_in = n->kind == MD_OP_WHERE ? 3 : elem_binary(n->kind) ? 2 : 1;
    int64_t total = 1;
    void *data;
    /* an empty input name ("") is -1: each operand the operator needs must be there */
    for (int k = 0; k < n_in; k++)
        if (n->n_in <= k || n->in[k] < 0) {
            snprintf(why, why_size, "an input it needs is absent (an empty name)");
            return AT_EUNSUPPORTED;
        }
    for (int k = 0; k < n_in; k++)
        in[k] = &g->tensors[n->in[k]];
    r = in[0]->rank;
    memcpy(shape, in[0]->shape, sizeof shape);
    for (int k = 1; k < n_in; k++)
        if (broadcast(shape, r, in[k]->shape, in[k]->rank, shape, &r) != 0) {
            snprintf(why, why_size, "shapes of '%s' and '%s' do not broadcast", in[0]->name,
                     in[k]->name);
            return AT_EUNSUPPORTED;
        }
    /* integer arithmetic when every operand is an integer (Where: both arms) */
    is_int = n->kind == MD_OP_WHERE ? in[1]->dtype == AT_DT_I64 && in[2]->dtype == AT_DT_I64
                                    : in[0]->dtype == AT_DT_I64 &&
                                          (n_in < 2 || in[1]->dtype == AT_DT_I64);
    out_int = is_int || elem_bool(n->kind);
    for (int d = 0; d < r; d++)
        total *= shape[d];
    if (total > (1 << 26)) {
        snprintf(why, why_size, "a constant expression of %lld elements is too large to fold",
                 (long long)total);
        return AT_EUNSUPPORTED;
    }
    for (int k = 0; k < n_in; k++)
        bcast_strides(in[k]->shape, in[k]->rank, r, st[k]);
    data = at_malloc((size_t)(total ? total : 1) * 8);
    if (data == NULL)
        return AT_ENOMEM;
    for (int64_t i = 0; i < total; i++) {
        int64_t off[3] = {0, 0, 0};
        double v;
        for (int d = 0; d < r; d++)
            for (int k = 0; k < n_in; k++)
                off[k] += idx[d] * st[k][d];
        if (n->kind == MD_OP_WHERE)
            v = elem_at(in[0], off[0]) != 0 ? elem_at(in[1], off[1]) : elem_at(in[2], off[2]);
        else if (n_in == 2)
            v = ev_binary(n->kind, elem_at(in[0], off[0]), elem_at(in[1], off[1]), is_int);
        else
            v = ev_unary(n->kind, elem_at(in[0], off[0]), n);
        if (out_int)
            ((int64_t *)data)[i] = (int64_t)v;
        else
            ((float *)data)[i] = (float)v;
        for (int d = r - 1; d >= 0; d--) {
            if (++idx[d] < shape[d])
                break;
            idx[d] = 0;
        }
    }
    return set_data(g, n->out[0], out_int ? AT_DT_I64 : AT_DT_F32, r, shape, data, why, why_size);
}

/* ---- parameters shared with extraction ---- */

static int norm_axis(int64_t axis, int rank, int64_t *out)
{
    if (axis < -rank || axis >= rank)
        return -1;
    *out = axis < 0 ? axis + rank : axis;
    return 0;
}

int md__node_axes(const md_graph *g, const md_node *n, int rank, int64_t *axes, int max)
{
    int64_t raw[MD_MAX_RANK];
    const int64_t *v;
    int cnt = md__attr_ints(n, "axes", raw, MD_MAX_RANK);
    if (cnt < 0 && md__attr(n, "axes") != NULL)
        return -1;
    if (cnt < 0 && n->n_in > 1 && n->in[1] >= 0) {
        cnt = const_ints(g, n->in[1], &v);
        if (cnt < 0 || cnt > MD_MAX_RANK)
            return -1;
        memcpy(raw, v, (size_t)cnt * sizeof *raw);
    }
    if (cnt < 0)
        return 0;
    if (cnt > max)
        return -1;
    for (int i = 0; i < cnt; i++) {
        if (norm_axis(raw[i], rank, &axes[i]) != 0)
            return -1;
        for (int j = 0; j < i; j++)
            if (axes[j] == axes[i])
                return -1;
    }
    return cnt;
}

/* Pads of a 2-D window operator: pads[] = {top, left, bottom, right} from 'pads' or
** 'auto_pad'.  Returns 0, or -1 with why[] set. */
static int window_pads(const md_node *n, const int64_t *in_hw, const int64_t *k, const int64_t *s,
                       const int64_t *d, int64_t pads[4], char *why, size_t why_size)
{
    const char *ap = md__attr_s(n, "auto_pad", "NOTSET");
    int cnt;
    memset(pads, 0, 4 * sizeof *pads);
    if (strcmp(ap, "NOTSET") == 0) {
        cnt = md__attr_ints(n, "pads", pads, 4);
        if (cnt != -1 && cnt != 4) {
            snprintf(why, why_size, "'pads' must have 4 values for a 2-D window");
            return -1;
        }
        for (int i = 0; i < 4; i++)
            if (pads[i] < 0) {
                snprintf(why, why_size, "negative padding is not supported");
                return -1;
            }
        return 0;
    }
    if (strcmp(ap, "VALID") == 0)
        return 0;
    if (strcmp(ap, "SAME_UPPER") == 0 || strcmp(ap, "SAME_LOWER") == 0) {
        for (int i = 0; i < 2; i++) {
            int64_t out = (in_hw[i] + s[i] - 1) / s[i];
            int64_t total = (out - 1) * s[i] + (k[i] - 1) * d[i] + 1 - in_hw[i];
            if (total < 0)
                total = 0;
            pads[i] = ap[5] == 'U' ? total / 2 : total - total / 2;
            pads[i + 2] = total - pads[i];
        }
        return 0;
    }
    snprintf(why, why_size, "unknown auto_pad '%s'", ap);
    return -1;
}

static int ints2(const md_node *n, const char *name, int64_t dflt, int64_t out[2], char *why,
                 size_t why_size)
{
    int cnt = md__attr_ints(n, name, out, 2);
    if (cnt == -1 && md__attr(n, name) == NULL) {
        out[0] = out[1] = dflt;
        return 0;
    }
    if (cnt != 2) {
        snprintf(why, why_size, "'%s' must have 2 values for a 2-D window", name);
        return -1;
    }
    if (out[0] < 1 || out[1] < 1 || out[0] > INT32_MAX || out[1] > INT32_MAX) {
        snprintf(why, why_size, "'%s' must be positive", name);
        return -1;
    }
    return 0;
}

at_err md__conv_params(const md_graph *g, const md_node *n, md_conv_params *p, char *why,
                       size_t why_size)
{
    const md_tensor *x = &g->tensors[n->in[0]], *w;
    int64_t k[2], s[2], d[2], pads[4], ks[2];
    int hp;
    memset(p, 0, sizeof *p);
    if (n->n_in < 2 || n->in[1] < 0) {
        snprintf(why, why_size, "a convolution needs a weight input");
        return AT_EUNSUPPORTED;
    }
    w = &g->tensors[n->in[1]];
    if (x->rank != 4 || w->rank != 4) {
        snprintf(why, why_size, "a convolution over %d spatial dimension(s): only 2-D "
                 "convolutions (4-d tensors, NCHW) are supported", x->rank - 2);
        return AT_EUNSUPPORTED;
    }
    /* a node the layout plan made NHWC reads X[N,H,W,C] (X[N,C,H,W] when in_nchw) and
    ** W[R,S,C/g,K] (md_layout.c) */
    hp = n->nhwc && !n->in_nchw ? 1 : 2;
    p->N = x->shape[0];
    p->C = x->shape[hp == 1 ? 3 : 1];
    p->H = x->shape[hp];
    p->W = x->shape[hp + 1];
    p->K = w->shape[n->nhwc ? 3 : 0];
    p->R = w->shape[n->nhwc ? 0 : 2];
    p->S = w->shape[n->nhwc ? 1 : 3];
    p->groups = md__attr_i(n, "group", 1);
    if (p->groups < 1 || p->groups > p->C || p->C % p->groups || p->K % p->groups ||
        w->shape[n->nhwc ? 2 : 1] * p->groups != p->C) {
        snprintf(why, why_size, "weight %lldx%lldx%lldx%lld does not fit input channels %lld "
                 "with group %lld", (long long)w->shape[0], (long long)w->shape[1],
                 (long long)w->shape[2], (long long)w->shape[3], (long long)p->C,
                 (long long)p->groups);
        return AT_EUNSUPPORTED;
    }
    if (md__attr_ints(n, "kernel_shape", ks, 2) == 2 && (ks[0] != p->R || ks[1] != p->S)) {
        snprintf(why, why_size, "kernel_shape %lldx%lld contradicts the weight's %lldx%lld",
                 (long long)ks[0], (long long)ks[1], (long long)p->R, (long long)p->S);
        return AT_EUNSUPPORTED;
    }
    k[0] = p->R;
    k[1] = p->S;
    if (ints2(n, "strides", 1, s, why, why_size) || ints2(n, "dilations", 1, d, why, why_size))
        return AT_EUNSUPPORTED;
    if (window_pads(n, &x->shape[hp], k, s, d, pads, why, why_size))
        return AT_EUNSUPPORTED;
    if (pads[0] != pads[2] || pads[1] != pads[3]) {
        snprintf(why, why_size, "asymmetric padding (pads %lld, %lld, %lld, %lld) is not "
                 "supported", (long long)pads[0], (long long)pads[1], (long long)pads[2],
                 (long long)pads[3]);
        return AT_EUNSUPPORTED;
    }
    p->sh = s[0];
    p->sw = s[1];
    p->dh = d[0];
    p->dw = d[1];
    p->ph = pads[0];
    p->pw = pads[1];
    if (p->H + 2 * p->ph < p->dh * (p->R - 1) + 1 || p->W + 2 * p->pw < p->dw * (p->S - 1) + 1) {
        snprintf(why, why_size, "the kernel does not fit in the padded input: the output "
                 "would be empty");
        return AT_EUNSUPPORTED;
    }
    p->OH = (p->H + 2 * p->ph - p->dh * (p->R - 1) - 1) / p->sh + 1;
    p->OW = (p->W + 2 * p->pw - p->dw * (p->S - 1) - 1) / p->sw + 1;
    if (n->n_in > 2 && n->in[2] >= 0) {
        const md_tensor *b = &g->tensors[n->in[2]];
        if (b->n_elems != p->K) {
            snprintf(why, why_size, "bias '%s' has %lld values for %lld output channels",
                     b->name, (long long)b->n_elems, (long long)p->K);
            return AT_EUNSUPPORTED;
        }
    }
    return AT_OK;
}

at_err md__pool_params(const md_graph *g, const md_node *n, md_pool_params *p, char *why,
                       size_t why_size)
{
    const md_tensor *x = &g->tensors[n->in[0]];
    int64_t k[2], s[2], d[2], pads[4], oh_ceil, ow_ceil;
    memset(p, 0, sizeof *p);
    if (x->rank != 4) {
        snprintf(why, why_size, "pooling over %d spatial dimension(s): only 2-D pooling "
                 "(4-d tensors, NCHW) is supported", x->rank - 2);
        return AT_EUNSUPPORTED;
    }
    if (md__attr_ints(n, "kernel_shape", k, 2) != 2 || k[0] < 1 || k[1] < 1) {
        snprintf(why, why_size, "'kernel_shape' must give 2 positive sizes");
        return AT_EUNSUPPORTED;
    }
    if (ints2(n, "strides", 1, s, why, why_size) || ints2(n, "dilations", 1, d, why, why_size))
        return AT_EUNSUPPORTED;
    if (d[0] != 1 || d[1] != 1) {
        snprintf(why, why_size, "dilated pooling is not supported");
        return AT_EUNSUPPORTED;
    }
    if (md__attr_i(n, "storage_order", 0) != 0) {
        snprintf(why, why_size, "storage_order 1 is not supported");
        return AT_EUNSUPPORTED;
    }
    if (window_pads(n, &x->shape[n->nhwc ? 1 : 2], k, s, d, pads, why, why_size))
        return AT_EUNSUPPORTED;
    if (pads[0] != pads[2] || pads[1] != pads[3]) {
        snprintf(why, why_size, "asymmetric padding (pads %lld, %lld, %lld, %lld) is not "
                 "supported", (long long)pads[0], (long long)pads[1], (long long)pads[2],
                 (long long)pads[3]);
        return AT_EUNSUPPORTED;
    }
    p->N = x->shape[0];
    p->C = x->shape[n->nhwc ? 3 : 1];
    p->H = x->shape[n->nhwc ? 1 : 2];
    p->W = x->shape[n->nhwc ? 2 : 3];
    p->kh = k[0];
    p->kw = k[1];
    p->sh = s[0];
    p->sw = s[1];
    p->ph = pads[0];
    p->pw = pads[1];
    if (2 * p->ph > p->kh || 2 * p->pw > p->kw) {
        snprintf(why, why_size, "padding larger than half the window is not supported");
        return AT_EUNSUPPORTED;
    }
    if (p->H + 2 * p->ph < p->kh || p->W + 2 * p->pw < p->kw) {
        snprintf(why, why_size, "the window does not fit in the padded input");
        return AT_EUNSUPPORTED;
    }
    p->OH = (p->H + 2 * p->ph - p->kh) / p->sh + 1;
    p->OW = (p->W + 2 * p->pw - p->kw) / p->sw + 1;
    oh_ceil = (p->H + 2 * p->ph - p->kh + p->sh - 1) / p->sh + 1;
    ow_ceil = (p->W + 2 * p->pw - p->kw + p->sw - 1) / p->sw + 1;
    if (md__attr_i(n, "ceil_mode", 0) && (oh_ceil != p->OH || ow_ceil != p->OW)) {
        snprintf(why, why_size, "ceil_mode 1 with a partial last window is not supported");
        return AT_EUNSUPPORTED;
    }
    if (n->kind == MD_OP_AVGPOOL && (p->ph || p->pw) && !md__attr_i(n, "count_include_pad", 0)) {
        snprintf(why, why_size, "average pooling with padding and count_include_pad 0 is not "
                 "supported (the library's average counts the padding)");
        return AT_EUNSUPPORTED;
    }
    return AT_OK;
}

/* ---- inference of one node ---- */

/* An optional output must be unused (MaxPool's Indices, Dropout's mask, ...). */
static int extra_outputs_unused(const md_graph *g, const md_node *n, int first)
{
    for (int k = first; k < n->n_out; k++) {
        int t = n->out[k];
        if (t >= 0 && (g->tensors[t].n_consumers > 0 || g->tensors[t].is_output))
            return 0;
    }
    return 1;
}

#define IN(k) (n->n_in > (k) && n->in[k] >= 0 ? &g->tensors[n->in[k]] : NULL)
#define FAIL(...)                                                                          \
    do {                                                                                   \
        snprintf(why, why_size, __VA_ARGS__);                                              \
        return AT_EUNSUPPORTED;                                                            \
    } while (0)

static at_err infer_reshape(md_graph *g, const md_node *n, int64_t *shape, int *rank,
                            char *why, size_t why_size)
{
    const md_tensor *x = IN(0);
    int64_t want[MD_MAX_RANK], known = 1;
    const int64_t *v;
    int cnt, infer_at = -1;
    if (n->n_in > 1 && n->in[1] >= 0) {
        cnt = const_ints(g, n->in[1], &v);
        if (cnt < 0)
            FAIL("the target shape must be a constant (an int64 initializer or folded "
                 "expression)");
        if (cnt > MD_MAX_RANK)
            FAIL("a target shape of %d dimensions (at most %d)", cnt, MD_MAX_RANK);
        memcpy(want, v, (size_t)cnt * sizeof *want);
    } else if ((cnt = md__attr_ints(n, "shape", want, MD_MAX_RANK)) < 0) {
        FAIL("no target shape");
    }
    for (int d = 0; d < cnt; d++) {
        if (want[d] == 0 && !md__attr_i(n, "allowzero", 0)) {
            if (d >= x->rank)
                FAIL("target dimension %d is 0 (copy) but the input has rank %d", d, x->rank);
            want[d] = x->shape[d];
        }
        if (want[d] == -1) {
            if (infer_at >= 0)
                FAIL("more than one -1 in the target shape");
            infer_at = d;
            continue;
        }
        if (want[d] <= 0)
            FAIL("target dimension %d is %lld", d, (long long)want[d]);
        if (known > INT32_MAX / want[d])
            FAIL("the target shape is too large");
        known *= want[d];
    }
    if (infer_at >= 0) {
        if (x->n_elems % known)
            FAIL("cannot reshape %lld elements with a -1 dimension", (long long)x->n_elems);
        want[infer_at] = x->n_elems / known;
        known = x->n_elems;
    }
    if (known != x->n_elems)
        FAIL("cannot reshape %lld elements into %lld", (long long)x->n_elems, (long long)known);
    memcpy(shape, want, (size_t)cnt * sizeof *want);
    *rank = cnt;
    return AT_OK;
}

/* Output shape of an alias (reshape-like) node. */
static at_err infer_alias(md_graph *g, const md_node *n, int64_t *shape, int *rank, char *why,
                          size_t why_size)
{
    const md_tensor *x = IN(0);
    int64_t axes[MD_MAX_RANK], axis;
    int cnt, r = 0;
    switch (n->kind) {
    case MD_OP_IDENTITY:
    case MD_OP_DROPOUT:
    case MD_OP_CAST:
        memcpy(shape, x->shape, (size_t)x->rank * sizeof *shape);
        *rank = x->rank;
        return AT_OK;
    case MD_OP_RESHAPE:
        return infer_reshape(g, n, shape, rank, why, why_size);
    case MD_OP_FLATTEN: {
        int64_t a = 1, b = 1;
        if (norm_axis(md__attr_i(n, "axis", 1), x->rank + 1, &axis))
            FAIL("axis out of range");
        for (int d = 0; d < x->rank; d++) {
            if (d < axis)
                a *= x->shape[d];
            else
                b *= x->shape[d];
        }
        shape[0] = a;
        shape[1] = b;
        *rank = 2;
        return AT_OK;
    }
    case MD_OP_SQUEEZE:
        cnt = md__node_axes(g, n, x->rank, axes, MD_MAX_RANK);
        if (cnt < 0)
            FAIL("bad or non-constant 'axes'");
        for (int d = 0; d < x->rank; d++) {
            int drop = 0;
            for (int i = 0; i < cnt; i++)
                if (axes[i] == d)
                    drop = 1;
            if (cnt == 0)
                drop = x->shape[d] == 1;
            if (drop && x->shape[d] != 1)
                FAIL("cannot squeeze dimension %d of size %lld", d, (long long)x->shape[d]);
            if (!drop)
                shape[r++] = x->shape[d];
        }
        *rank = r;
        return AT_OK;
    case MD_OP_UNSQUEEZE: {
        int out_rank, k = 0;
        cnt = md__attr_ints(n, "axes", axes, MD_MAX_RANK);
        if (cnt < 0) {
            const int64_t *v;
            cnt = n->n_in > 1 ? const_ints(g, n->in[1], &v) : -1;
            if (cnt < 0 || cnt > MD_MAX_RANK)
                FAIL("bad or non-constant 'axes'");
            memcpy(axes, v, (size_t)cnt * sizeof *axes);
        }
        out_rank = x->rank + cnt;
        if (cnt == 0 || out_rank > MD_MAX_RANK)
            FAIL("bad 'axes'");
        for (int i = 0; i < cnt; i++) {
            if (norm_axis(axes[i], out_rank, &axes[i]))
                FAIL("axis out of range");
            for (int j = 0; j < i; j++)
                if (axes[j] == axes[i])
                    FAIL("repeated axis");
        }
        for (int d = 0; d < out_rank; d++) {
            int ins = 0;
            for (int i = 0; i < cnt; i++)
                if (axes[i] == d)
                    ins = 1;
            shape[d] = ins ? 1 : x->shape[k++];
        }
        *rank = out_rank;
        return AT_OK;
    }
    default:
        FAIL("internal: not an alias");
    }
}

static int transpose_perm(const md_node *n, int rank, int64_t *perm)
{
    int cnt = md__attr_ints(n, "perm", perm, MD_MAX_RANK);
    int seen[MD_MAX_RANK] = {0};
    if (cnt < 0 && md__attr(n, "perm") == NULL) {
        for (int d = 0; d < rank; d++)
            perm[d] = rank - 1 - d;
        return 0;
    }
    if (cnt != rank)
        return -1;
    for (int d = 0; d < rank; d++) {
        if (perm[d] < 0 || perm[d] >= rank || seen[perm[d]])
            return -1;
        seen[perm[d]] = 1;
    }
    return 0;
}

/* ---- slices (folding and the executor's copies) ---- */

void md__copy_region(void *dst, const void *src, const md_tensor *x, const int64_t *lo,
                     const int64_t *step, const int64_t *out, int esz)
{
    int64_t st[MD_MAX_RANK], ss[MD_MAX_RANK], idx[MD_MAX_RANK] = {0}, acc = 1, outer = 1, base = 0;
    int64_t inner;
    int r = x->rank;
    char *d = dst;
    const char *sp;
    if (r == 0) {
        memcpy(dst, src, (size_t)esz);
        return;
    }
    for (int k = r - 1; k >= 0; k--) {
        st[k] = acc;
        acc *= x->shape[k];
    }
    for (int k = 0; k < r; k++) {
        ss[k] = st[k] * step[k];
        base += lo[k] * st[k];
        if (out[k] == 0)
            return;
        if (k < r - 1)
            outer *= out[k];
    }
    /* rows of the last dimension: one memcpy when they are contiguous */
    inner = out[r - 1];
    for (int64_t o = 0; o < outer; o++) {
        sp = (const char *)src + base * esz;
        if (ss[r - 1] == 1)
            memcpy(d, sp, (size_t)(inner * esz));
        else
            for (int64_t i = 0; i < inner; i++)
                memcpy(d + i * esz, sp + i * ss[r - 1] * esz, (size_t)esz);
        d += inner * esz;
        for (int k = r - 2; k >= 0; k--) {
            base += ss[k];
            if (++idx[k] < out[k])
                break;
            base -= ss[k] * out[k];
            idx[k] = 0;
        }
    }
}

at_err md__slice_params(const md_graph *g, const md_node *n, const md_tensor *x, int64_t *lo,
                        int64_t *step, int64_t *out, char *why, size_t why_size)
{
    int64_t starts[MD_MAX_RANK], ends[MD_MAX_RANK], axes[MD_MAX_RANK], steps[MD_MAX_RANK];
    const int64_t *v;
    int cnt;
    if (n->n_in >= 3) {
        cnt = const_ints(g, n->in[1], &v);
        if (cnt < 0 || cnt > x->rank || const_ints(g, n->in[2], &v) != cnt) {
            snprintf(why, why_size, "starts and ends must be int64 constants of one length");
            return AT_EUNSUPPORTED;
        }
        memcpy(starts, g->tensors[n->in[1]].data, (size_t)cnt * 8);
        memcpy(ends, g->tensors[n->in[2]].data, (size_t)cnt * 8);
        for (int i = 0; i < cnt; i++) {
            axes[i] = i;
            steps[i] = 1;
        }
        if (n->n_in > 3 && n->in[3] >= 0) {
            if (const_ints(g, n->in[3], &v) != cnt) {
                snprintf(why, why_size, "axes must be an int64 constant like starts");
                return AT_EUNSUPPORTED;
            }
            memcpy(axes, v, (size_t)cnt * 8);
        }
        if (n->n_in > 4 && n->in[4] >= 0) {
            if (const_ints(g, n->in[4], &v) != cnt) {
                snprintf(why, why_size, "steps must be an int64 constant like starts");
                return AT_EUNSUPPORTED;
            }
            memcpy(steps, v, (size_t)cnt * 8);
        }
    } else {
        cnt = md__attr_ints(n, "starts", starts, MD_MAX_RANK);
        if (cnt < 0 || cnt > x->rank || md__attr_ints(n, "ends", ends, MD_MAX_RANK) != cnt) {
            snprintf(why, why_size, "bad starts/ends");
            return AT_EUNSUPPORTED;
        }
        if (md__attr_ints(n, "axes", axes, MD_MAX_RANK) != cnt)
            for (int i = 0; i < cnt; i++)
                axes[i] = i;
        for (int i = 0; i < cnt; i++)
            steps[i] = 1;
    }
    for (int d = 0; d < x->rank; d++) {
        lo[d] = 0;
        step[d] = 1;
        out[d] = x->shape[d];
    }
    for (int i = 0; i < cnt; i++) {
        int64_t a, dim, b, e;
        if (norm_axis(axes[i], x->rank, &a) || steps[i] == 0 || steps[i] == INT64_MIN) {
            snprintf(why, why_size, "bad axes or steps");
            return AT_EUNSUPPORTED;
        }
        dim = x->shape[a];
        b = starts[i] < 0 ? (starts[i] < -dim ? 0 : starts[i] + dim) : starts[i];
        e = ends[i] < 0 ? (ends[i] < -dim ? -1 : ends[i] + dim) : ends[i];
        if (steps[i] > 0) {
            b = b > dim ? dim : b;
            e = e < 0 ? 0 : (e > dim ? dim : e);
            out[a] = e > b ? (e - b - 1) / steps[i] + 1 : 0;
        } else {
            b = b > dim - 1 ? dim - 1 : b;
            e = e > dim - 1 ? dim - 1 : e;
            out[a] = b > e ? (b - e - 1) / -steps[i] + 1 : 0;
        }
        lo[a] = b;
        step[a] = steps[i];
    }
    return AT_OK;
}

at_err md__split_params(const md_graph *g, const md_node *n, const md_tensor *x, int k,
                        int64_t *lo, int64_t *step, int64_t *out, char *why, size_t why_size)
{
    int64_t axis, sizes[64], off = 0, total = 0;
    const int64_t *v;
    int cnt = -1;
    if (n->n_out < 1 || n->n_out > 64 || norm_axis(md__attr_i(n, "axis", 0), x->rank, &axis)) {
        snprintf(why, why_size, "bad axis or number of outputs");
        return AT_EUNSUPPORTED;
    }
    if (n->n_in > 1 && n->in[1] >= 0) {
        cnt = const_ints(g, n->in[1], &v);
        if (cnt != n->n_out || cnt < 1) {
            snprintf(why, why_size, "the split sizes must be an int64 constant, one per output");
            return AT_EUNSUPPORTED;
        }
        memcpy(sizes, v, (size_t)cnt * 8);
    } else if ((cnt = md__attr_ints(n, "split", sizes, 64)) >= 0 && cnt != n->n_out) {
        snprintf(why, why_size, "'split' must give one size per output");
        return AT_EUNSUPPORTED;
    }
    if (cnt < 0) {
        if (x->shape[axis] % n->n_out) {
            snprintf(why, why_size, "%lld does not split into %d equal parts",
                     (long long)x->shape[axis], n->n_out);
            return AT_EUNSUPPORTED;
        }
        for (int i = 0; i < n->n_out; i++)
            sizes[i] = x->shape[axis] / n->n_out;
    }
    for (int i = 0; i < n->n_out; i++) {
        if (sizes[i] < 0 || sizes[i] > x->shape[axis]) {
            snprintf(why, why_size, "bad split size %lld", (long long)sizes[i]);
            return AT_EUNSUPPORTED;
        }
        total += sizes[i];
        if (i < k)
            off += sizes[i];
    }
    if (total != x->shape[axis]) {
        snprintf(why, why_size, "split sizes add up to %lld, not %lld", (long long)total,
                 (long long)x->shape[axis]);
        return AT_EUNSUPPORTED;
    }
    for (int d = 0; d < x->rank; d++) {
        lo[d] = 0;
        step[d] = 1;
        out[d] = x->shape[d];
    }
    lo[axis] = off;
    out[axis] = sizes[k];
    return AT_OK;
}

/* Fold a data-movement or alias node on constant data; and the CONST-class operators. */
/* The output shape of an Expand of x to the constant shape in input 1 (ONNX's
** bidirectional broadcast); -1 when the shape is not a constant or does not broadcast. */
static int expand_shape(const md_graph *g, const md_node *n, const md_tensor *x,
                        int64_t *shape, int *rank)
{
    const int64_t *v;
    int cnt = n->n_in > 1 ? const_ints(g, n->in[1], &v) : -1;
    int64_t want[MD_MAX_RANK];
    if (cnt < 0 || cnt > MD_MAX_RANK)
        return -1;
    for (int d = 0; d < cnt; d++) {
        if (v[d] < 1)
            return -1;
        want[d] = v[d];
    }
    return broadcast(x->shape, x->rank, want, cnt, shape, rank);
}

static at_err fold_move(md_graph *g, int node, char *why, size_t why_size)
{
    const md_node *n = &g->nodes[node];
    const md_tensor *x = IN(0);
    int64_t shape[MD_MAX_RANK];
    int rank = 0, esz;
    void *data;
    at_err err;
    if (x == NULL)
        FAIL("its first input is missing");
    switch (md_op_class_of(n->kind)) {
    case MD_CLS_ALIAS:
        if ((err = infer_alias(g, n, shape, &rank, why, why_size)) != AT_OK)
            return err;
        esz = at_dtype_bytes(x->dtype);
        if ((data = at_malloc((size_t)(x->n_elems ? x->n_elems : 1) * (size_t)esz)) == NULL)
            return AT_ENOMEM;
        memcpy(data, x->data, (size_t)x->n_elems * (size_t)esz);
        return set_data(g, n->out[0], x->dtype, rank, shape, data, why, why_size);
    default:
        break;
    }
    switch (n->kind) {
    case MD_OP_TRANSPOSE: {
        int64_t perm[MD_MAX_RANK], st[MD_MAX_RANK], idx[MD_MAX_RANK] = {0}, acc = 1;
        if (transpose_perm(n, x->rank, perm))
            FAIL("bad 'perm'");
        for (int d = x->rank - 1; d >= 0; d--) {
            st[d] = acc;
            acc *= x->shape[d];
        }
        for (int d = 0; d < x->rank; d++)
            shape[d] = x->shape[perm[d]];
        esz = at_dtype_bytes(x->dtype);
        if ((data = at_malloc((size_t)(x->n_elems ? x->n_elems : 1) * (size_t)esz)) == NULL)
            return AT_ENOMEM;
        for (int64_t i = 0; i < x->n_elems; i++) {
            int64_t src = 0;
            for (int d = 0; d < x->rank; d++)
                src += idx[d] * st[perm[d]];
            memcpy((char *)data + i * esz, (const char *)x->data + src * esz, (size_t)esz);
            for (int d = x->rank - 1; d >= 0; d--) {
                if (++idx[d] < shape[d])
                    break;
                idx[d] = 0;
            }
        }
        return set_data(g, n->out[0], x->dtype, x->rank, shape, data, why, why_size);
    }
    case MD_OP_CONCAT: {
        int64_t axis, outer = 1, total_axis = 0, off = 0;
        if (norm_axis(md__attr_i(n, "axis", INT64_MAX), x->rank, &axis))
            FAIL("missing or bad 'axis'");
        for (int k = 0; k < n->n_in; k++) {
            const md_tensor *y = IN(k);
            if (y == NULL || y->rank != x->rank || y->dtype != x->dtype)
                FAIL("inputs of different ranks or types");
            for (int d = 0; d < x->rank; d++)
                if (d != axis && y->shape[d] != x->shape[d])
                    FAIL("inputs of different shapes");
            total_axis += y->shape[axis];
        }
        memcpy(shape, x->shape, sizeof shape);
        shape[axis] = total_axis;
        for (int d = 0; d < axis; d++)
            outer *= x->shape[d];
        esz = at_dtype_bytes(x->dtype);
        {
            int64_t n_total = outer * total_axis;
            for (int d = (int)axis + 1; d < x->rank; d++)
                n_total *= x->shape[d];
            if (n_total > (1 << 26))
                FAIL("a constant of %lld elements is too large to fold", (long long)n_total);
            if ((data = at_malloc((size_t)(n_total ? n_total : 1) * (size_t)esz)) == NULL)
                return AT_ENOMEM;
        }
        for (int k = 0; k < n->n_in; k++) {
            const md_tensor *y = IN(k);
            int64_t inner = y->shape[axis];
            int64_t row = total_axis, tail = 1;
            for (int d = (int)axis + 1; d < x->rank; d++)
                tail *= x->shape[d];
            for (int64_t o = 0; o < outer; o++)
                memcpy((char *)data + ((o * row + off) * tail) * esz,
                       (const char *)y->data + (o * inner * tail) * esz,
                       (size_t)(inner * tail * esz));
            off += inner;
        }
        return set_data(g, n->out[0], x->dtype, x->rank, shape, data, why, why_size);
    }
    case MD_OP_SPLIT:
        for (int k = 0; k < n->n_out; k++) {
            int64_t lo[MD_MAX_RANK], step[MD_MAX_RANK], total = 1;
            if (n->out[k] < 0)
                continue;
            if ((err = md__split_params(g, n, x, k, lo, step, shape, why, why_size)) != AT_OK)
                return err;
            for (int d = 0; d < x->rank; d++)
                total *= shape[d];
            esz = at_dtype_bytes(x->dtype);
            if ((data = at_malloc((size_t)(total + 1) * (size_t)esz)) == NULL)
                return AT_ENOMEM;
            if (total > 0)
                md__copy_region(data, x->data, x, lo, step, shape, esz);
            if ((err = set_data(g, n->out[k], x->dtype, x->rank, shape, data, why, why_size)) !=
                AT_OK)
                return err;
        }
        return AT_OK;
    case MD_OP_GATHER: {
        const md_tensor *ix = IN(1);
        int64_t axis, outer = 1, tail = 1, j = 0;
        if (ix == NULL || ix->data == NULL || ix->dtype != AT_DT_I64)
            FAIL("the indices must be an int64 constant");
        if (norm_axis(md__attr_i(n, "axis", 0), x->rank, &axis))
            FAIL("bad 'axis'");
        rank = 0;
        for (int d = 0; d < axis; d++) {
            shape[rank++] = x->shape[d];
            outer *= x->shape[d];
        }
        if (rank + ix->rank + x->rank - axis - 1 > MD_MAX_RANK)
            FAIL("the result has too many dimensions");
        for (int d = 0; d < ix->rank; d++)
            shape[rank++] = ix->shape[d];
        for (int d = (int)axis + 1; d < x->rank; d++) {
            shape[rank++] = x->shape[d];
            tail *= x->shape[d];
        }
        esz = at_dtype_bytes(x->dtype);
        if (outer * ix->n_elems * tail > (1 << 26))
            FAIL("too large to fold");
        data = at_malloc((size_t)(outer * ix->n_elems * tail + 1) * (size_t)esz);
        if (data == NULL)
            return AT_ENOMEM;
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < ix->n_elems; i++) {
                int64_t k = ((const int64_t *)ix->data)[i];
                if (k < 0)
                    k += x->shape[axis];
                if (k < 0 || k >= x->shape[axis]) {
                    at_free(data);
                    FAIL("index %lld out of range", (long long)((const int64_t *)ix->data)[i]);
                }
                memcpy((char *)data + (j++ * tail) * esz,
                       (const char *)x->data + ((o * x->shape[axis] + k) * tail) * esz,
                       (size_t)(tail * esz));
            }
        return set_data(g, n->out[0], x->dtype, rank, shape, data, why, why_size);
    }
    case MD_OP_CAST: {
        int64_t to = md__attr_i(n, "to", 0);
        at_dtype dt;
        if (to == 1)
            dt = AT_DT_F32;
        else if (to == 6 || to == 7 || to == 9 || to == 2 || to == 3 || to == 4 || to == 5)
            dt = AT_DT_I64;
        else
            FAIL("cast to ONNX type %lld is not supported", (long long)to);
        if ((data = at_malloc((size_t)(x->n_elems + 1) * 8)) == NULL)
            return AT_ENOMEM;
        for (int64_t i = 0; i < x->n_elems; i++) {
            double v = x->dtype == AT_DT_F32 ? ((const float *)x->data)[i]
                                             : (double)((const int64_t *)x->data)[i];
            if (to == 9)
                v = v != 0;
            if (dt == AT_DT_F32)
                ((float *)data)[i] = (float)v;
            else
                ((int64_t *)data)[i] = (int64_t)v;
        }
        return set_data(g, n->out[0], dt, x->rank, x->shape, data, why, why_size);
    }
    case MD_OP_SLICE: {
        int64_t lo[MD_MAX_RANK], step[MD_MAX_RANK], total = 1;
        if ((err = md__slice_params(g, n, x, lo, step, shape, why, why_size)) != AT_OK)
            return err;
        for (int d = 0; d < x->rank; d++)
            total *= shape[d];
        esz = at_dtype_bytes(x->dtype);
        if ((data = at_malloc((size_t)(total + 1) * (size_t)esz)) == NULL)
            return AT_ENOMEM;
        if (total > 0)
            md__copy_region(data, x->data, x, lo, step, shape, esz);
        return set_data(g, n->out[0], x->dtype, x->rank, shape, data, why, why_size);
    }
    case MD_OP_EXPAND: {
        int64_t st[MD_MAX_RANK], idx[MD_MAX_RANK] = {0}, total = 1;
        if (expand_shape(g, n, x, shape, &rank) != 0)
            FAIL("the shape must be an int64 constant that '%s' broadcasts to", x->name);
        for (int d = 0; d < rank; d++)
            total *= shape[d];
        if (total > (1 << 26))
            FAIL("a constant of %lld elements is too large to fold", (long long)total);
        bcast_strides(x->shape, x->rank, rank, st);
        esz = at_dtype_bytes(x->dtype);
        if ((data = at_malloc((size_t)(total + 1) * (size_t)esz)) == NULL)
            return AT_ENOMEM;
        for (int64_t i = 0; i < total; i++) {
            int64_t src = 0;
            for (int d = 0; d < rank; d++)
                src += idx[d] * st[d];
            memcpy((char *)data + i * esz, (const char *)x->data + src * esz, (size_t)esz);
            for (int d = rank - 1; d >= 0; d--) {
                if (++idx[d] < shape[d])
                    break;
                idx[d] = 0;
            }
        }
        return set_data(g, n->out[0], x->dtype, rank, shape, data, why, why_size);
    }
    case MD_OP_RANGE: {
        /* start, limit, delta: scalars; ceil((limit - start) / delta) elements */
        double a, lim, dl, cnt;
        const md_tensor *t1 = IN(1), *t2 = IN(2);
        if (n->n_in != 3 || t1 == NULL || t2 == NULL || x->n_elems != 1 || t1->n_elems != 1 ||
            t2->n_elems != 1)
            FAIL("start, limit and delta must be scalars");
        a = elem_at(x, 0);
        lim = elem_at(t1, 0);
        dl = elem_at(t2, 0);
        if (dl == 0)
            FAIL("delta is 0");
        cnt = ceil((lim - a) / dl);
        if (!(cnt >= 1) || cnt > (1 << 26))
            FAIL("%g elements", cnt);
        shape[0] = (int64_t)cnt;
        if ((data = at_malloc((size_t)(shape[0] + 1) * 8)) == NULL)
            return AT_ENOMEM;
        for (int64_t i = 0; i < shape[0]; i++) {
            if (x->dtype == AT_DT_F32)
                ((float *)data)[i] = (float)(a + (double)i * dl);
            else
                ((int64_t *)data)[i] = (int64_t)a + i * (int64_t)dl;
        }
        return set_data(g, n->out[0], x->dtype, 1, shape, data, why, why_size);
    }
    case MD_OP_CONSTANTOFSHAPE: {
        const int64_t *v;
        const md_attr *a = md__attr(n, "value");
        int64_t total = 1;
        double val = 0;
        at_dtype dt = AT_DT_F32;
        int cnt = const_ints(g, n->in[0], &v);
        if (cnt < 0 || cnt > MD_MAX_RANK)
            FAIL("the shape must be an int64 constant");
        for (int d = 0; d < cnt; d++) {
            if (v[d] < 0 || (v[d] && total > (1 << 26) / v[d]))
                FAIL("bad or too large shape");
            shape[d] = v[d];
            total *= v[d];
        }
        if (a && a->type == MD_ATTR_TENSOR) {
            const md_tensor *c = &g->tensors[a->tensor];
            if (c->n_elems != 1)
                FAIL("'value' must hold one element");
            dt = c->dtype;
            val = dt == AT_DT_F32 ? *(const float *)c->data : (double)*(const int64_t *)c->data;
        }
        if ((data = at_malloc((size_t)(total + 1) * 8)) == NULL)
            return AT_ENOMEM;
        for (int64_t i = 0; i < total; i++) {
            if (dt == AT_DT_F32)
                ((float *)data)[i] = (float)val;
            else
                ((int64_t *)data)[i] = (int64_t)val;
        }
        return set_data(g, n->out[0], dt, cnt, shape, data, why, why_size);
    }
    default:
        FAIL("cannot be evaluated on constants");
    }
}

static at_err fold_constant_node(md_graph *g, int node, char *why, size_t why_size)
{
    const md_node *n = &g->nodes[node];
    const md_attr *a;
    void *data;
    int64_t shape[1];
    if ((a = md__attr(n, "value")) && a->type == MD_ATTR_TENSOR) {
        const md_tensor *c = &g->tensors[a->tensor];
        size_t bytes = (size_t)c->n_elems * (size_t)at_dtype_bytes(c->dtype);
        if ((data = at_malloc(bytes ? bytes : 1)) == NULL)
            return AT_ENOMEM;
        memcpy(data, c->data, bytes);
        return set_data(g, n->out[0], c->dtype, c->rank, c->shape, data, why, why_size);
    }
    if ((a = md__attr(n, "value_float")) || (a = md__attr(n, "value_int"))) {
        int is_f = strcmp(a->name, "value_float") == 0;
        if ((data = at_malloc(8)) == NULL)
            return AT_ENOMEM;
        if (is_f)
            *(float *)data = (float)a->f;
        else
            *(int64_t *)data = a->i;
        return set_data(g, n->out[0], is_f ? AT_DT_F32 : AT_DT_I64, 0, shape, data, why,
                        why_size);
    }
    if (((a = md__attr(n, "value_floats")) && a->type == MD_ATTR_FLOATS) ||
        ((a = md__attr(n, "value_ints")) && a->type == MD_ATTR_INTS)) {
        int is_f = a->type == MD_ATTR_FLOATS;
        if ((data = at_malloc((size_t)(a->n + 1) * 8)) == NULL)
            return AT_ENOMEM;
        for (int i = 0; i < a->n; i++) {
            if (is_f)
                ((float *)data)[i] = (float)a->floats[i];
            else
                ((int64_t *)data)[i] = a->ints[i];
        }
        shape[0] = a->n;
        return set_data(g, n->out[0], is_f ? AT_DT_F32 : AT_DT_I64, 1, shape, data, why,
                        why_size);
    }
    FAIL("a Constant without a value this code reads (value, value_float(s), value_int(s))");
}

static at_err fold_shape_node(md_graph *g, int node, char *why, size_t why_size)
{
    const md_node *n = &g->nodes[node];
    const md_tensor *x = IN(0);
    int64_t start = md__attr_i(n, "start", 0), end = md__attr_i(n, "end", x->rank), shape[1];
    int64_t *data;
    if (start < 0)
        start += x->rank;
    if (end < 0)
        end += x->rank;
    start = start < 0 ? 0 : (start > x->rank ? x->rank : start);
    end = end < start ? start : (end > x->rank ? x->rank : end);
    if ((data = at_malloc((size_t)(end - start + 1) * sizeof *data)) == NULL)
        return AT_ENOMEM;
    for (int64_t d = start; d < end; d++)
        data[d - start] = x->shape[d];
    shape[0] = end - start;
    return set_data(g, n->out[0], AT_DT_I64, 1, shape, data, why, why_size);
}

static int elem_unary(md_op_kind k)
{
    switch (k) {
    case MD_OP_RELU: case MD_OP_SIGMOID: case MD_OP_TANH: case MD_OP_ERF: case MD_OP_GELU:
    case MD_OP_EXP: case MD_OP_LOG: case MD_OP_SQRT: case MD_OP_ABS: case MD_OP_NEG:
    case MD_OP_RECIPROCAL: case MD_OP_LEAKYRELU: case MD_OP_HARDSIGMOID: case MD_OP_HARDSWISH:
    case MD_OP_NOT: case MD_OP_TO_BOOL:
        return 1;
    default:
        return 0;
    }
}

static int elem_binary(md_op_kind k)
{
    switch (k) {
    case MD_OP_ADD: case MD_OP_SUB: case MD_OP_MUL: case MD_OP_DIV: case MD_OP_POW:
    case MD_OP_MAX: case MD_OP_MIN: case MD_OP_EQUAL: case MD_OP_GREATER: case MD_OP_LESS:
        return 1;
    default:
        return 0;
    }
}

/* Shape inference for a node on run-time data. */
static at_err infer_runtime(md_graph *g, int node, char *why, size_t why_size)
{
    md_node *n = &g->nodes[node];
    const md_tensor *x = IN(0);
    int64_t shape[MD_MAX_RANK];
    int rank = 0, int_ok;
    at_dtype out_dt = AT_DT_F32;
    at_err err;
    if (x == NULL)
        FAIL("its first input is missing");
    /* integers at run time (token ids, masks): indices of a Gather, reshaped by an alias,
    ** or converted to float by a Cast; nothing else computes on them */
    int_ok = n->kind == MD_OP_SHAPE || n->kind == MD_OP_CAST || n->kind == MD_OP_EXPAND ||
             md_op_class_of(n->kind) == MD_CLS_ALIAS;
    if (x->dtype != AT_DT_F32 && !int_ok)
        FAIL("'%s' is an integer tensor computed at run time: only float32 is computed",
             x->name);
    for (int k = 1; k < n->n_in; k++)
        if (IN(k) && IN(k)->dtype != AT_DT_F32 && IN(k)->data == NULL &&
            !(n->kind == MD_OP_GATHER && k == 1))
            FAIL("'%s' is an integer tensor computed at run time: only float32 is computed",
                 IN(k)->name);
    switch (n->kind) {
    case MD_OP_CONV: {
        md_conv_params p;
        if ((err = md__conv_params(g, n, &p, why, why_size)) != AT_OK)
            return err;
        shape[0] = p.N;
        shape[1] = p.K;
        shape[2] = p.OH;
        shape[3] = p.OW;
        rank = 4;
        break;
    }
    case MD_OP_MAXPOOL:
    case MD_OP_AVGPOOL: {
        md_pool_params p;
        if (!extra_outputs_unused(g, n, 1))
            FAIL("the Indices output is not supported");
        if ((err = md__pool_params(g, n, &p, why, why_size)) != AT_OK)
            return err;
        shape[0] = p.N;
        shape[1] = p.C;
        shape[2] = p.OH;
        shape[3] = p.OW;
        rank = 4;
        break;
    }
    case MD_OP_GAP:
    case MD_OP_GMP:
        if (x->rank != 4)
            FAIL("global pooling of a %d-d tensor: only 4-d (NCHW) is supported", x->rank);
        shape[0] = x->shape[0];
        shape[1] = x->shape[1];
        shape[2] = shape[3] = 1;
        rank = 4;
        break;
    case MD_OP_GEMM: {
        const md_tensor *b = IN(1), *c = IN(2);
        int64_t m, k, k2, nn, cs[MD_MAX_RANK];
        int cr;
        if (b == NULL || x->rank != 2 || b->rank != 2)
            FAIL("Gemm needs two 2-d inputs");
        if (md__attr_i(n, "transA", 0))
            FAIL("transA 1 is not supported");
        m = x->shape[0];
        k = x->shape[1];
        k2 = md__attr_i(n, "transB", 0) ? b->shape[1] : b->shape[0];
        nn = md__attr_i(n, "transB", 0) ? b->shape[0] : b->shape[1];
        if (k != k2)
            FAIL("inner dimensions %lld and %lld differ", (long long)k, (long long)k2);
        shape[0] = m;
        shape[1] = nn;
        rank = 2;
        if (c && (broadcast(shape, 2, c->shape, c->rank, cs, &cr) || cr != 2 || cs[0] != m ||
                  cs[1] != nn))
            FAIL("C does not broadcast to [%lld, %lld]", (long long)m, (long long)nn);
        break;
    }
    case MD_OP_MATMUL: {
        const md_tensor *b = IN(1);
        int64_t bs[MD_MAX_RANK];
        int br;
        if (b == NULL || x->rank < 2 || b->rank < 2)
            FAIL("MatMul of 1-d tensors is not supported");
        if (x->shape[x->rank - 1] != b->shape[b->rank - 2])
            FAIL("inner dimensions %lld and %lld differ", (long long)x->shape[x->rank - 1],
                 (long long)b->shape[b->rank - 2]);
        if (broadcast(x->shape, x->rank - 2, b->shape, b->rank - 2, bs, &br))
            FAIL("batch dimensions do not broadcast");
        memcpy(shape, bs, (size_t)br * sizeof *bs);
        shape[br] = x->shape[x->rank - 2];
        shape[br + 1] = b->shape[b->rank - 1];
        rank = br + 2;
        break;
    }
    case MD_OP_DENSE: {
        const md_tensor *w = IN(1);
        memcpy(shape, x->shape, sizeof shape);
        shape[x->rank - 1] = w->shape[0];
        rank = x->rank;
        break;
    }
    case MD_OP_SOFTMAX: {
        int64_t axis;
        if (norm_axis(md__attr_i(n, "axis", g->opset < 13 ? 1 : -1), x->rank, &axis))
            FAIL("axis out of range");
        if (g->opset >= 13 && axis != x->rank - 1)
            FAIL("softmax over axis %lld of a %d-d tensor: only the last axis is supported",
                 (long long)axis, x->rank);
        memcpy(shape, x->shape, sizeof shape);
        rank = x->rank;
        break;
    }
    case MD_OP_LAYERNORM: {
        int64_t axis;
        const md_tensor *sc = IN(1), *bi = IN(2);
        if (norm_axis(md__attr_i(n, "axis", -1), x->rank, &axis) || axis != x->rank - 1)
            FAIL("normalisation over more than the last axis is not supported");
        if (!extra_outputs_unused(g, n, 1))
            FAIL("the Mean and InvStdDev outputs are not supported");
        if (sc == NULL || sc->n_elems != x->shape[x->rank - 1] ||
            (bi && bi->n_elems != x->shape[x->rank - 1]))
            FAIL("scale and bias must have %lld values", (long long)x->shape[x->rank - 1]);
        memcpy(shape, x->shape, sizeof shape);
        rank = x->rank;
        break;
    }
    case MD_OP_REDUCEMEAN:
    case MD_OP_REDUCESUM:
    case MD_OP_REDUCEMAX:
    case MD_OP_REDUCEMIN: {
        int64_t axes[MD_MAX_RANK];
        int cnt = md__node_axes(g, n, x->rank, axes, MD_MAX_RANK), keep = (int)md__attr_i(n, "keepdims", 1);
        if (cnt < 0)
            FAIL("bad or non-constant 'axes'");
        if (cnt == 0 && md__attr_i(n, "noop_with_empty_axes", 0)) {
            n->kind = MD_OP_IDENTITY;
            memcpy(shape, x->shape, sizeof shape);
            rank = x->rank;
            break;
        }
        for (int d = 0; d < x->rank; d++) {
            int red = cnt == 0;
            for (int i = 0; i < cnt; i++)
                red |= axes[i] == d;
            if (!red)
                shape[rank++] = x->shape[d];
            else if (keep)
                shape[rank++] = 1;
        }
        break;
    }
    case MD_OP_BATCHNORM:
        if (x->rank < 2)
            FAIL("BatchNormalization of a %d-d tensor", x->rank);
        if (md__attr_i(n, "training_mode", 0) || !extra_outputs_unused(g, n, 1))
            FAIL("training mode is not supported");
        for (int k = 1; k < 5; k++)
            if (IN(k) == NULL || IN(k)->n_elems != x->shape[1])
                FAIL("parameter %d must have %lld values (one per channel)", k,
                     (long long)x->shape[1]);
        memcpy(shape, x->shape, sizeof shape);
        rank = x->rank;
        break;
    case MD_OP_CLIP:
        for (int k = 1; k < n->n_in; k++) {
            double v;
            if (IN(k) && !const_scalar(g, n->in[k], &v))
                FAIL("the bounds must be constants");
        }
        memcpy(shape, x->shape, sizeof shape);
        rank = x->rank;
        break;
    case MD_OP_DROPOUT:
        if (!extra_outputs_unused(g, n, 1))
            FAIL("the mask output is not supported");
        memcpy(shape, x->shape, sizeof shape);
        rank = x->rank;
        break;
    case MD_OP_CAST: {
        int64_t to = md__attr_i(n, "to", 1);
        if (to != 1 && to != 9)
            FAIL("a cast of run-time data to ONNX type %lld (only casts to float and bool are "
                 "computed)", (long long)to);
        /* float to float: the same bytes; integers (a mask) to float: a conversion step; to
        ** bool (held as float 0/1): x != 0, elementwise on floats, a step on integers */
        if (to == 1)
            n->kind = x->dtype == AT_DT_F32 ? MD_OP_IDENTITY : MD_OP_INT_TO_FLOAT;
        else
            n->kind = x->dtype == AT_DT_F32 ? MD_OP_TO_BOOL : MD_OP_INT_TO_BOOL;
        memcpy(shape, x->shape, sizeof shape);
        rank = x->rank;
        break;
    }
    case MD_OP_EXPAND:
        if (expand_shape(g, n, x, shape, &rank) != 0)
            FAIL("the shape must be an int64 constant that '%s' broadcasts to", x->name);
        out_dt = x->dtype; /* an integer mask expanded stays one */
        break;
    case MD_OP_WHERE: {
        int r2;
        if (n->n_in != 3 || IN(1) == NULL || IN(2) == NULL)
            FAIL("three inputs are needed");
        if (broadcast(x->shape, x->rank, IN(1)->shape, IN(1)->rank, shape, &r2) ||
            broadcast(shape, r2, IN(2)->shape, IN(2)->rank, shape, &rank))
            FAIL("shapes of '%s', '%s' and '%s' do not broadcast", x->name, IN(1)->name,
                 IN(2)->name);
        break;
    }
    case MD_OP_IDENTITY:
    case MD_OP_RESHAPE:
    case MD_OP_FLATTEN:
    case MD_OP_SQUEEZE:
    case MD_OP_UNSQUEEZE:
        if ((err = infer_alias(g, n, shape, &rank, why, why_size)) != AT_OK)
            return err;
        break;
    case MD_OP_TRANSPOSE: {
        int64_t perm[MD_MAX_RANK];
        if (transpose_perm(n, x->rank, perm))
            FAIL("'perm' is not a permutation of the %d axes", x->rank);
        for (int d = 0; d < x->rank; d++)
            shape[d] = x->shape[perm[d]];
        rank = x->rank;
        break;
    }
    case MD_OP_SLICE: {
        int64_t lo[MD_MAX_RANK], step[MD_MAX_RANK];
        if ((err = md__slice_params(g, n, x, lo, step, shape, why, why_size)) != AT_OK)
            return err;
        rank = x->rank;
        break;
    }
    case MD_OP_SPLIT:
        for (int k = 0; k < n->n_out; k++) {
            int64_t lo[MD_MAX_RANK], step[MD_MAX_RANK];
            if (n->out[k] < 0)
                continue;
            if ((err = md__split_params(g, n, x, k, lo, step, shape, why, why_size)) != AT_OK ||
                (err = md__set_shape(g, n->out[k], AT_DT_F32, x->rank, shape, why, why_size)) !=
                    AT_OK)
                return err;
        }
        return AT_OK;
    case MD_OP_GATHER: {
        /* constant indices (checked here), or integers known only at run time (token ids
        ** into an embedding table: the executor and the exported library check each one) */
        const md_tensor *ix = IN(1);
        int64_t axis;
        if (ix == NULL || ix->dtype != AT_DT_I64)
            FAIL("the indices must be integers");
        if (x->dtype != AT_DT_F32)
            FAIL("a Gather at run time reads float data ('%s' is %s)", x->name,
                 at_dtype_name(x->dtype));
        if (norm_axis(md__attr_i(n, "axis", 0), x->rank, &axis))
            FAIL("bad 'axis'");
        if (x->rank - 1 + ix->rank > MD_MAX_RANK)
            FAIL("the result has too many dimensions");
        for (int64_t i = 0; ix->data && i < ix->n_elems; i++) {
            int64_t k = ((const int64_t *)ix->data)[i];
            if (k < -x->shape[axis] || k >= x->shape[axis])
                FAIL("index %lld out of range", (long long)k);
        }
        for (int d = 0; d < axis; d++)
            shape[rank++] = x->shape[d];
        for (int d = 0; d < ix->rank; d++)
            shape[rank++] = ix->shape[d];
        for (int d = (int)axis + 1; d < x->rank; d++)
            shape[rank++] = x->shape[d];
        break;
    }
    case MD_OP_CONCAT: {
        int64_t axis, total = 0;
        if (norm_axis(md__attr_i(n, "axis", INT64_MAX), x->rank, &axis))
            FAIL("missing or bad 'axis'");
        for (int k = 0; k < n->n_in; k++) {
            const md_tensor *y = IN(k);
            if (y == NULL || y->rank != x->rank)
                FAIL("inputs of different ranks");
            for (int d = 0; d < x->rank; d++)
                if (d != axis && y->shape[d] != x->shape[d])
                    FAIL("input '%s' does not match the others outside axis %lld", y->name,
                         (long long)axis);
            total += y->shape[axis];
        }
        memcpy(shape, x->shape, sizeof shape);
        shape[axis] = total;
        rank = x->rank;
        break;
    }
    default:
        if (elem_unary(n->kind)) {
            if (n->kind == MD_OP_GELU) {
                const char *ap = md__attr_s(n, "approximate", "none");
                if (strcmp(ap, "none") != 0 && strcmp(ap, "tanh") != 0)
                    FAIL("unknown approximate '%s'", ap);
            }
            memcpy(shape, x->shape, sizeof shape);
            rank = x->rank;
            break;
        }
        if (elem_binary(n->kind)) {
            const md_tensor *y = IN(1);
            if ((n->kind == MD_OP_MAX || n->kind == MD_OP_MIN) && n->n_in != 2)
                FAIL("only 2 inputs are supported");
            if (y == NULL)
                FAIL("two inputs are needed");
            if (n->kind == MD_OP_POW) {
                double e;
                if (!const_scalar(g, n->in[1], &e) ||
                    (e != 0.5 && e != 1 && e != 2 && e != 3 && e != -1 && e != -0.5))
                    FAIL("the exponent must be a constant 0.5, 1, 2, 3, -1 or -0.5");
            }
            if (broadcast(x->shape, x->rank, y->shape, y->rank, shape, &rank))
                FAIL("shapes of '%s' and '%s' do not broadcast", x->name, y->name);
            break;
        }
        FAIL("not supported on run-time data");
    }
    if (md_op_class_of(n->kind) == MD_CLS_ALIAS)
        out_dt = x->dtype; /* an integer tensor reshaped stays one */
    for (int k = 0; k < n->n_out && k < 1; k++)
        if (n->out[k] >= 0 && (err = md__set_shape(g, n->out[k], out_dt, rank, shape, why,
                                                   why_size)) != AT_OK)
            return err;
    return AT_OK;
}

#undef IN
#undef FAIL

/* Take the declared shapes (value_info, graph outputs) for the outputs of a node that
** cannot be inferred. */
static void use_hints(md_graph *g, const md_node *n)
{
    char why[WHY_SIZE];
    for (int k = 0; k < n->n_out; k++) {
        int t = n->out[k];
        if (t < 0 || g->tensors[t].known || !g->tensors[t].hint)
            continue;
        if (md__set_shape(g, t, g->tensors[t].dtype, g->tensors[t].hint_rank,
                          g->tensors[t].hint_shape, why, sizeof why) != AT_OK)
            continue;
    }
}

at_err md__infer(md_graph *g, char *errmsg, size_t errmsg_size)
{
    char why[WHY_SIZE];
    int n_dependent = 0, first_dependent = -1;
    (void)errmsg;
    (void)errmsg_size;
    md__count_consumers(g);
    for (int i = 0; i < g->n_nodes; i++) {
        md_node *n = &g->nodes[i];
        int all_const = 1, unknown = -1;
        at_err err = AT_OK;
        if (n->dead)
            continue;
        for (int k = 0; k < n->n_in; k++) {
            int t = n->in[k];
            if (t < 0)
                continue;
            if (!g->tensors[t].known && unknown < 0)
                unknown = t;
            if (g->tensors[t].data == NULL)
                all_const = 0;
        }
        if (n->n_out < 1 || n->out[0] < 0) {
            n->dead = 1; /* nothing to compute */
            continue;
        }
        why[0] = 0;
        if (n->kind == MD_OP_UNKNOWN) {
            err = n->domain[0] && strcmp(n->domain, "ai.onnx") != 0
                      ? md__unsupported(g, i, "operator '%s' of domain '%s' is not supported",
                                        n->op_type, n->domain)
                      : md__unsupported(g, i, "operator '%s' is not supported", n->op_type);
        } else if (unknown >= 0) {
            /* one warning for all of them, after the loop */
            char *w = at_strdup("it depends on an unsupported node");
            if (w == NULL)
                return AT_ENOMEM;
            at_free(n->why);
            n->why = w;
            n->unsupported = 1;
            if (n_dependent++ == 0)
                first_dependent = i;
            use_hints(g, n);
            continue;
        } else if (n->kind == MD_OP_CONSTANT) {
            err = fold_constant_node(g, i, why, sizeof why);
            if (err == AT_OK)
                n->dead = 1;
        } else if (n->kind == MD_OP_SHAPE) {
            err = fold_shape_node(g, i, why, sizeof why);
            if (err == AT_OK)
                n->dead = 1;
        } else if (all_const && n->n_in > 0) {
            md_op_class c = md_op_class_of(n->kind);
            if (c == MD_CLS_ELEM && (elem_unary(n->kind) || elem_binary(n->kind) ||
                                     n->kind == MD_OP_WHERE))
                err = fold_elem(g, i, why, sizeof why);
            else if (c == MD_CLS_ALIAS || c == MD_CLS_MOVE || c == MD_CLS_CONST)
                err = fold_move(g, i, why, sizeof why);
            else
                err = infer_runtime(g, i, why, sizeof why); /* e.g. a Conv of constants */
            if (err == AT_OK && g->tensors[n->out[0]].data)
                n->dead = 1;
        } else if (md_op_class_of(n->kind) == MD_CLS_CONST && n->kind != MD_OP_CAST) {
            err = AT_EUNSUPPORTED;
            snprintf(why, sizeof why, "supported only on constants, and an input is computed "
                     "at run time");
        } else {
            err = infer_runtime(g, i, why, sizeof why);
        }
        if (err == AT_ENOMEM)
            return err;
        if (err != AT_OK && !n->unsupported) {
            if (md__unsupported(g, i, "%s", why[0] ? why : at_strerror(err)) == AT_ENOMEM)
                return AT_ENOMEM;
        }
        if (n->unsupported)
            use_hints(g, n);
    }
    if (n_dependent > 0 &&
        md__warn(g, "%s: %d more node%s depend on unsupported nodes and are left out (the "
                 "first: '%s' (%s))", g->name, n_dependent, n_dependent == 1 ? "" : "s",
                 g->nodes[first_dependent].name, g->nodes[first_dependent].op_type) != AT_OK)
        return AT_ENOMEM;
    return AT_OK;
}
