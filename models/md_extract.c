/* models/md_extract.c -- tasks from a prepared graph.
**
** Fusion.  Nodes are visited in topological order.  Each anchor (a convolution, dense
** layer, matmul, pool, softmax, layer norm or reduction) starts a group; so does each
** elementwise node that no earlier group took.  A group then takes, scanning forward,
** every elementwise node that
**   - reads a tensor of the group,
**   - reads nothing that depends on the group through a node outside it (that would be a
**     cycle between the task and the rest of the graph), and
**   - computes a tensor of the group's output shape (equal up to dimensions of size 1;
**     broadcasting inputs are fine, a broadcast of the group's own tensors is not).
** Last, the group is cut back to its longest prefix with exactly one tensor needed outside
** it: a task has one output.  This is Ansor's (and TVM's) rule "an operator with a
** reduction, fused with the elementwise operators that consume it" for the graphs CNNs and
** transformers make: conv2d+bias+relu, conv2d+bias+add+relu (the residual), dense+bias+gelu.
**
** DAG text.  An anchor that is a library operator takes the library's text (kn_op_text),
** so a model's conv2d+bias+relu task has the same workload key as the operator
** 'conv2d:...,bias=1,relu=1' tuned alone.  Each fused node appends one compute line over
** the output's axes; an input from outside the group becomes a placeholder ('const' for
** weights and constants, with dimensions of size 1 dropped), a constant of one value a
** literal.  The text is parsed (ss_dag_parse): its canonical form gives the key; identical
** keys are one task whose weight counts the groups. */
#include "models/md_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

typedef struct grp {
    int anchor;       /* node, or -1 for an elementwise-only group */
    int n_nodes, cap_nodes;
    int *nodes;       /* topological order, anchor (or seed) first */
    int out;          /* the tensor needed outside */
} grp;

/* What one group's DAG text is being made of. */
typedef struct dagtext {
    at_buf decl;      /* placeholder lines */
    at_buf body;      /* compute lines */
    int n_args;
    int args[KN_MAX_ARGS]; /* graph tensor of each placeholder, in declaration order */
    char names[KN_MAX_ARGS][16];
    int n_t;          /* group tensors with DAG names */
    int gt[64];       /* graph tensor ... */
    char gname[64][16]; /* ... and its name in the DAG */
    int rank;         /* the DAG output's rank and shape (the appended lines' axes) */
    int64_t shape[MD_MAX_RANK];
    int n_p, n_c, n_e; /* counters for names */
    char why[256];    /* set when something cannot be expressed */
    int oom;          /* a call ran out of memory: the whole load fails with AT_ENOMEM */
} dagtext;

typedef struct ex {
    md_model *m;
    md_graph *g;
    int *cons_start, *cons;  /* consumers of each tensor (CSR over live nodes) */
    int n_groups, cap_groups;
    grp *groups;
    /* transposes a batched MatMul reads or writes through its indexing (per node: the
    ** Transpose node of operand 0, of operand 1 and of the output, or -1) */
    int (*absorb)[3];
    char *absorbed;          /* per node: a Transpose taken into a MatMul's task */
} ex;

/* ---- consumers ---- */

static at_err build_consumers(ex *x)
{
    md_graph *g = x->g;
    int total = 0, *fill;
    x->cons_start = at_calloc((size_t)g->n_tensors + 1, sizeof *x->cons_start);
    if (x->cons_start == NULL)
        return AT_ENOMEM;
    for (int i = 0; i < g->n_nodes; i++) {
        const md_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] >= 0) {
                x->cons_start[n->in[k] + 1]++;
                total++;
            }
    }
    for (int t = 0; t < g->n_tensors; t++)
        x->cons_start[t + 1] += x->cons_start[t];
    x->cons = at_malloc((size_t)(total ? total : 1) * sizeof *x->cons);
    fill = at_calloc((size_t)g->n_tensors + 1, sizeof *fill);
    if (x->cons == NULL || fill == NULL) {
        at_free(fill);
        return AT_ENOMEM;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const md_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        for (int k = 0; k < n->n_in; k++) {
            int t = n->in[k];
            if (t < 0)
                continue;
            /* a node reading t twice is listed twice; callers skip repeats */
            x->cons[x->cons_start[t] + fill[t]++] = i;
        }
    }
    at_free(fill);
    return AT_OK;
}

/* ---- shapes ---- */

/* The dimensions other than 1, in order. */
static int squeeze(const int64_t *s, int r, int64_t *out)
{
    int k = 0;
    for (int d = 0; d < r; d++)
        if (s[d] != 1)
            out[k++] = s[d];
    return k;
}

static int same_squeezed(const int64_t *a, int ra, const int64_t *b, int rb)
{
    int64_t x[MD_MAX_RANK], y[MD_MAX_RANK];
    int n = squeeze(a, ra, x), m = squeeze(b, rb, y);
    return n == m && memcmp(x, y, (size_t)n * sizeof *x) == 0;
}

static void shape_x(const int64_t *s, int r, char *out, size_t size)
{
    size_t k = 0;
    out[0] = 0;
    for (int d = 0; d < r && k < size; d++)
        k += (size_t)snprintf(out + k, size - k, "%s%lld", d ? "x" : "", (long long)s[d]);
    if (r == 0)
        snprintf(out, size, "1");
}

/* The shortest decimal text that reads back as the float32 nearest to v. */
static void float_text(double v, char *s, size_t size)
{
    float f = (float)v;
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(s, size, "%.*g", prec, (double)f);
        if (strtof(s, NULL) == f)
            return;
    }
}

/* ---- anchors: library specs ---- */

static int is_weight(const md_graph *g, int t)
{
    return g->tensors[t].data != NULL || g->tensors[t].is_weight;
}

/* The anchor's library spec (or "" for text made here), its kind name for task names and
** tags, and the output shape of its DAG.  AT_EUNSUPPORTED with why[] when the node cannot
** be a task. */
static at_err anchor_spec(ex *x, int node, int bias_relu_relu, char *spec, size_t spec_size,
                          char *kind, size_t kind_size, int64_t *oshape, int *orank, char *why,
                          size_t why_size)
{
    md_graph *g = x->g;
    const md_node *n = &g->nodes[node];
    const md_tensor *in0 = &g->tensors[n->in[0]];
    char sh[128];
    at_err err;
    spec[0] = 0;
    switch (n->kind) {
    case MD_OP_CONV: {
        md_conv_params p;
        if ((err = md__conv_params(g, n, &p, why, why_size)) != AT_OK)
            return err;
        snprintf(spec, spec_size,
                 "conv2d:%s%sN=%lld,C=%lld,H=%lld,W=%lld,K=%lld,R=%lld,S=%lld,sh=%lld,sw=%lld,"
                 "ph=%lld,pw=%lld,dh=%lld,dw=%lld,groups=%lld,bias=%d,relu=%d",
                 n->nhwc ? "layout=NHWC," : "", n->nhwc && n->in_nchw ? "in_layout=NCHW," : "",
                 (long long)p.N, (long long)p.C, (long long)p.H, (long long)p.W, (long long)p.K,
                 (long long)p.R, (long long)p.S, (long long)p.sh, (long long)p.sw,
                 (long long)p.ph, (long long)p.pw, (long long)p.dh, (long long)p.dw,
                 (long long)p.groups, n->n_in > 2 && n->in[2] >= 0, bias_relu_relu);
        snprintf(kind, kind_size, "%s",
                 p.groups > 1 && p.groups == p.C && p.groups == p.K ? "depthwise_conv2d"
                                                                     : "conv2d");
        oshape[0] = p.N;
        oshape[1] = n->nhwc ? p.OH : p.K;
        oshape[2] = n->nhwc ? p.OW : p.OH;
        oshape[3] = n->nhwc ? p.K : p.OW;
        *orank = 4;
        return AT_OK;
    }
    case MD_OP_WINO_IN:
    case MD_OP_WINO_GEMM:
    case MD_OP_WINO_OUT: {
        /* md_winograd.c: [a, a, P, C] tiles between the NHWC input and output */
        const md_tensor *o = &g->tensors[n->out[0]];
        if (n->kind == MD_OP_WINO_IN) {
            snprintf(spec, spec_size, "winograd_input:N=%lld,H=%lld,W=%lld,C=%lld,m=%lld",
                     (long long)in0->shape[0], (long long)in0->shape[1],
                     (long long)in0->shape[2], (long long)in0->shape[3],
                     (long long)o->shape[0] - 2);
            snprintf(kind, kind_size, "winograd_input");
        } else if (n->kind == MD_OP_WINO_GEMM) {
            snprintf(spec, spec_size, "winograd_gemm:P=%lld,C=%lld,K=%lld,m=%lld",
                     (long long)in0->shape[2], (long long)in0->shape[3],
                     (long long)o->shape[3], (long long)in0->shape[0] - 2);
            snprintf(kind, kind_size, "winograd_gemm");
        } else {
            snprintf(spec, spec_size,
                     "winograd_output:N=%lld,H=%lld,W=%lld,K=%lld,m=%lld,bias=%d,relu=%d",
                     (long long)o->shape[0], (long long)o->shape[1], (long long)o->shape[2],
                     (long long)o->shape[3], (long long)in0->shape[0] - 2,
                     n->n_in > 2 && n->in[2] >= 0, bias_relu_relu);
            snprintf(kind, kind_size, "winograd_output");
        }
        memcpy(oshape, o->shape, 4 * sizeof *oshape);
        *orank = 4;
        return AT_OK;
    }
    case MD_OP_DENSE:
    case MD_OP_MATMUL: {
        const md_tensor *b = &g->tensors[n->in[1]];
        int64_t M = 1, K = in0->shape[in0->rank - 1];
        int64_t N = n->kind == MD_OP_DENSE ? b->shape[0] : b->shape[b->rank - 1];
        if (n->kind == MD_OP_MATMUL && !(b->rank == 2 && is_weight(g, n->in[1]))) {
            /* both operands computed at run time: batch_matmul over equal batch dims */
            int64_t B1 = 1, B2 = 1;
            for (int d = 0; d < in0->rank - 2; d++)
                B1 *= in0->shape[d];
            for (int d = 0; d < b->rank - 2; d++)
                B2 *= b->shape[d];
            if (B1 != B2 || !same_squeezed(in0->shape, in0->rank - 2, b->shape, b->rank - 2)) {
                snprintf(why, why_size, "a MatMul whose batch dimensions broadcast is not "
                         "supported");
                return AT_EUNSUPPORTED;
            }
            snprintf(spec, spec_size, "batch_matmul:B=%lld,M=%lld,N=%lld,K=%lld",
                     (long long)B1, (long long)in0->shape[in0->rank - 2], (long long)N,
                     (long long)K);
            snprintf(kind, kind_size, "batch_matmul");
            oshape[0] = B1;
            oshape[1] = in0->shape[in0->rank - 2];
            oshape[2] = N;
            *orank = 3;
            return AT_OK;
        }
        for (int d = 0; d < in0->rank - 1; d++)
            M *= in0->shape[d];
        if (n->kind == MD_OP_DENSE) {
            snprintf(spec, spec_size, "dense:M=%lld,N=%lld,K=%lld,bias=%d,relu=%d",
                     (long long)M, (long long)N, (long long)K, n->n_in > 2 && n->in[2] >= 0,
                     bias_relu_relu);
            snprintf(kind, kind_size, "dense");
        } else {
            snprintf(spec, spec_size, "matmul:M=%lld,N=%lld,K=%lld", (long long)M,
                     (long long)N, (long long)K);
            snprintf(kind, kind_size, "matmul");
        }
        oshape[0] = M;
        oshape[1] = N;
        *orank = 2;
        return AT_OK;
    }
    case MD_OP_MAXPOOL:
    case MD_OP_AVGPOOL: {
        md_pool_params p;
        if ((err = md__pool_params(g, n, &p, why, why_size)) != AT_OK)
            return err;
        snprintf(spec, spec_size,
                 "%s:%sN=%lld,C=%lld,H=%lld,W=%lld,kh=%lld,kw=%lld,sh=%lld,sw=%lld,ph=%lld,"
                 "pw=%lld",
                 n->kind == MD_OP_MAXPOOL ? "max_pool2d" : "avg_pool2d",
                 n->nhwc ? "layout=NHWC," : "", (long long)p.N,
                 (long long)p.C, (long long)p.H, (long long)p.W, (long long)p.kh,
                 (long long)p.kw, (long long)p.sh, (long long)p.sw, (long long)p.ph,
                 (long long)p.pw);
        snprintf(kind, kind_size, "%s", n->kind == MD_OP_MAXPOOL ? "max_pool2d" : "avg_pool2d");
        oshape[0] = p.N;
        oshape[1] = n->nhwc ? p.OH : p.C;
        oshape[2] = n->nhwc ? p.OW : p.OH;
        oshape[3] = n->nhwc ? p.C : p.OW;
        *orank = 4;
        return AT_OK;
    }
    case MD_OP_GAP: {
        int c = n->nhwc ? 3 : 1, h = n->nhwc ? 1 : 2;
        snprintf(spec, spec_size, "global_avg_pool:%sN=%lld,C=%lld,H=%lld,W=%lld",
                 n->nhwc ? "layout=NHWC," : "", (long long)in0->shape[0],
                 (long long)in0->shape[c], (long long)in0->shape[h],
                 (long long)in0->shape[h + 1]);
        snprintf(kind, kind_size, "global_avg_pool");
        oshape[0] = in0->shape[0];
        oshape[1] = in0->shape[c];
        *orank = 2;
        return AT_OK;
    }
    case MD_OP_SOFTMAX:
    case MD_OP_LAYERNORM: {
        int64_t s[MD_MAX_RANK];
        int r;
        if (n->kind == MD_OP_SOFTMAX && g->opset < 13) {
            /* before opset 13: the input seen as 2-d, [prod(:axis), prod(axis:)] */
            int64_t axis = md__attr_i(n, "axis", 1), a = 1, b = 1;
            if (axis < 0)
                axis += in0->rank;
            for (int d = 0; d < in0->rank; d++) {
                if (d < axis)
                    a *= in0->shape[d];
                else
                    b *= in0->shape[d];
            }
            s[0] = a;
            s[1] = b;
            r = 2;
        } else {
            /* leading dimensions of size 1 dropped, at least 2 kept */
            int lead = 0;
            while (lead < in0->rank - 2 && in0->shape[lead] == 1)
                lead++;
            r = in0->rank - lead;
            memcpy(s, in0->shape + lead, (size_t)r * sizeof *s);
            if (r == 1) {
                s[1] = s[0];
                s[0] = 1;
                r = 2;
            }
        }
        shape_x(s, r, sh, sizeof sh);
        if (n->kind == MD_OP_SOFTMAX) {
            snprintf(spec, spec_size, "softmax:shape=%s", sh);
            snprintf(kind, kind_size, "softmax");
        } else {
            double eps = md__attr_f(n, "epsilon", 1e-5);
            if (!(eps > 0) || (float)eps <= 0) {
                snprintf(why, why_size, "epsilon %g is not a positive float", eps);
                return AT_EUNSUPPORTED;
            }
            char e[48];
            float_text(eps, e, sizeof e);
            snprintf(spec, spec_size, "layer_norm:shape=%s,eps=%s", sh, e);
            snprintf(kind, kind_size, "layer_norm");
        }
        memcpy(oshape, s, (size_t)r * sizeof *s);
        *orank = r;
        return AT_OK;
    }
    case MD_OP_GMP:
        snprintf(kind, kind_size, "global_max_pool");
        oshape[0] = in0->shape[0];
        oshape[1] = in0->shape[n->nhwc ? 3 : 1];
        *orank = 2;
        return AT_OK;
    case MD_OP_REDUCEMEAN:
    case MD_OP_REDUCESUM:
    case MD_OP_REDUCEMAX:
    case MD_OP_REDUCEMIN: {
        int64_t axes[MD_MAX_RANK];
        int cnt = md__node_axes(g, n, in0->rank, axes, MD_MAX_RANK), r = 0;
        snprintf(kind, kind_size, "%s",
                 n->kind == MD_OP_REDUCEMEAN ? "reduce_mean"
                 : n->kind == MD_OP_REDUCESUM ? "reduce_sum"
                 : n->kind == MD_OP_REDUCEMAX ? "reduce_max" : "reduce_min");
        for (int d = 0; d < in0->rank; d++) {
            int red = cnt == 0;
            for (int i = 0; i < cnt; i++)
                red |= axes[i] == d;
            if (!red)
                oshape[r++] = in0->shape[d];
        }
        if (r == 0)
            oshape[r++] = 1;
        *orank = r;
        return AT_OK;
    }
    default:
        snprintf(why, why_size, "internal: %s is no anchor", n->op_type);
        return AT_EUNSUPPORTED;
    }
}

/* ---- growing a group ---- */

static at_err grp_push(grp *gr, int node)
{
    return at_vec_push(&gr->nodes, &gr->n_nodes, &gr->cap_nodes, node);
}

static int in_list(const int *a, int n, int v)
{
    for (int i = 0; i < n; i++)
        if (a[i] == v)
            return 1;
    return 0;
}

/* Tensors of the first k nodes of the group needed outside those k nodes. */
static int n_live_outputs(const ex *x, const grp *gr, int k, int *last_live)
{
    const md_graph *g = x->g;
    int count = 0;
    for (int i = 0; i < k; i++) {
        int t = g->nodes[gr->nodes[i]].out[0], outside = g->tensors[t].is_output;
        for (int c = x->cons_start[t]; c < x->cons_start[t + 1] && !outside; c++)
            if (!in_list(gr->nodes, k, x->cons[c]))
                outside = 1;
        if (outside) {
            count++;
            *last_live = t;
        }
    }
    return count;
}

/* Grow the group seeded by gr->nodes[0] whose DAG output has shape oshape[orank]. */
static at_err grow(ex *x, grp *gr, int gid, const int64_t *oshape, int orank, char *group_t,
                   char *taint)
{
    md_graph *g = x->g;
    /* the seed: the anchor, or the anchor and the output transpose it absorbed */
    int n_seed = gr->n_nodes, start = gr->nodes[n_seed - 1], seed_out = g->nodes[start].out[0];
    int pending, best = n_seed, live_t = -1;
    at_err err;
    for (int k = 0; k < n_seed; k++)
        group_t[g->nodes[gr->nodes[k]].out[0]] = 1;
    pending = x->cons_start[seed_out + 1] - x->cons_start[seed_out];
    for (int j = start + 1; j < g->n_nodes && pending > 0; j++) {
        md_node *n = &g->nodes[j];
        int reads_group = 0, reads_taint = 0, o;
        if (n->dead)
            continue;
        for (int k = 0; k < n->n_in; k++) {
            int t = n->in[k];
            if (t < 0)
                continue;
            if (group_t[t]) {
                reads_group = 1;
                pending--;
            }
            if (taint[t])
                reads_taint = 1;
        }
        if (!reads_group && !reads_taint)
            continue;
        o = n->out[0];
        /* elementwise nodes, and reshapes of a group tensor that keep its shape up to
        ** dimensions of size 1 (torch's [128, 1, 768] views of a [128, 768] dense output):
        ** an alias's output is the same DAG tensor as its input */
        if (reads_group && !reads_taint && !n->unsupported && n->group < 0 &&
            (md_op_class_of(n->kind) == MD_CLS_ELEM ||
             (md_op_class_of(n->kind) == MD_CLS_ALIAS && n->in[0] >= 0 && group_t[n->in[0]])) &&
            o >= 0 && g->tensors[o].known &&
            same_squeezed(g->tensors[o].shape, g->tensors[o].rank, oshape, orank) &&
            gr->n_nodes < 48) {
            if ((err = grp_push(gr, j)) != AT_OK)
                return err;
            n->group = gid;
            group_t[o] = 1;
            pending += x->cons_start[o + 1] - x->cons_start[o];
            continue;
        }
        for (int k = 0; k < n->n_out; k++)
            if (n->out[k] >= 0)
                taint[n->out[k]] = 1;
    }
    /* the longest prefix with one tensor needed outside */
    for (int k = gr->n_nodes; k >= n_seed; k--) {
        int lt = -1, cnt = n_live_outputs(x, gr, k, &lt);
        if (cnt == 1 || k == n_seed) {
            best = k;
            live_t = lt >= 0 ? lt : g->nodes[gr->nodes[k - 1]].out[0];
            break;
        }
    }
    for (int k = best; k < gr->n_nodes; k++)
        g->nodes[gr->nodes[k]].group = -1;
    gr->n_nodes = best;
    gr->out = live_t;
    /* reset the scratch marks of this group */
    for (int t = 0; t < g->n_tensors; t++)
        group_t[t] = taint[t] = 0;
    return AT_OK;
}

/* ---- DAG text ---- */

static const char *dt_name_of(dagtext *d, int t)
{
    for (int i = 0; i < d->n_t; i++)
        if (d->gt[i] == t)
            return d->gname[i];
    return NULL;
}

static void print_float(at_buf *b, double v)
{
    char s[48];
    float f = (float)v;
    if (isinf(f)) {
        at_buf_puts(b, f > 0 ? "inf" : "(-inf)");
        return;
    }
    float_text(f, s, sizeof s);
    /* a float literal needs a '.' or an exponent */
    if (!strpbrk(s, ".eEn"))
        strcat(s, ".0");
    if (s[0] == '-')
        at_buf_printf(b, "(%s)", s);
    else
        at_buf_puts(b, s);
}

static void axes_ref(at_buf *b, int rank)
{
    at_buf_putc(b, '[');
    for (int d = 0; d < rank; d++)
        at_buf_printf(b, "%sa%d", d ? ", " : "", d);
    at_buf_putc(b, ']');
}

/* An operand of an appended line: a group tensor, a literal or a placeholder.  'oshape' is
** the graph shape of the node's output (what its inputs broadcast against). */
static int operand(ex *x, dagtext *d, int t, const int64_t *oshape, int orank, at_buf *b)
{
    md_graph *g = x->g;
    const md_tensor *tt = &g->tensors[t];
    const char *nm = dt_name_of(d, t);
    double v;
    int map[MD_MAX_RANK], k = 0, kept = 0;
    int64_t pshape[MD_MAX_RANK];
    int pidx[MD_MAX_RANK];
    if (nm) {
        at_buf_puts(b, nm);
        axes_ref(b, d->rank);
        return 0;
    }
    if (tt->data && tt->dtype == AT_DT_F32 && tt->n_elems >= 1) {
        const float *f = tt->data;
        int same = 1;
        for (int64_t i = 1; i < tt->n_elems && same; i++)
            same = f[i] == f[0];
        if (same) {
            v = f[0];
            print_float(b, v);
            return 0;
        }
    }
    if (tt->data && tt->dtype == AT_DT_I64 && tt->n_elems >= 1) {
        /* an integer (or bool) constant of one value: its value as a float literal */
        const int64_t *q = tt->data;
        int same = 1;
        for (int64_t i = 1; i < tt->n_elems && same; i++)
            same = q[i] == q[0];
        if (same) {
            print_float(b, (double)q[0]);
            return 0;
        }
    }
    if (tt->dtype != AT_DT_F32) {
        snprintf(d->why, sizeof d->why, "'%s' is not float32", tt->name);
        return -1;
    }
    /* the k-th output dimension that is not 1 -> the k-th DAG axis that is not 1 */
    {
        int nz[MD_MAX_RANK], n_nz = 0;
        for (int j = 0; j < d->rank; j++)
            if (d->shape[j] != 1)
                nz[n_nz++] = j;
        for (int p = 0; p < orank; p++)
            map[p] = oshape[p] != 1 && k < n_nz ? nz[k++] : -1;
    }
    for (int dd = 0; dd < tt->rank; dd++) {
        int p = dd + (orank - tt->rank);
        if (p < 0 || tt->shape[dd] == 1)
            continue;
        if (tt->shape[dd] != oshape[p] || map[p] < 0) {
            snprintf(d->why, sizeof d->why, "'%s' does not broadcast to the output", tt->name);
            return -1;
        }
        pshape[kept] = tt->shape[dd];
        pidx[kept++] = map[p];
    }
    /* a placeholder: reuse the one bound to t */
    for (int i = 0; i < d->n_args; i++)
        if (d->args[i] == t && (d->names[i][0] == 'p' || d->names[i][0] == 'c')) {
            nm = d->names[i];
            break;
        }
    if (nm == NULL) {
        int cst = is_weight(g, t);
        int i = d->n_args;
        if (i >= KN_MAX_ARGS - 1) {
            snprintf(d->why, sizeof d->why, "too many inputs");
            return -1;
        }
        snprintf(d->names[i], sizeof d->names[i], "%s%d", cst ? "c" : "p",
                 cst ? ++d->n_c : ++d->n_p);
        d->args[i] = t;
        d->n_args++;
        at_buf_printf(&d->decl, "%s %s[", cst ? "const" : "input", d->names[i]);
        if (kept == 0)
            at_buf_puts(&d->decl, "1");
        for (int j = 0; j < kept; j++)
            at_buf_printf(&d->decl, "%s%lld", j ? ", " : "", (long long)pshape[j]);
        at_buf_puts(&d->decl, "] float32\n");
        nm = d->names[i];
    }
    at_buf_puts(b, nm);
    at_buf_putc(b, '[');
    if (kept == 0)
        at_buf_puts(b, "0");
    for (int j = 0; j < kept; j++)
        at_buf_printf(b, "%sa%d", j ? ", " : "", pidx[j]);
    at_buf_putc(b, ']');
    return 0;
}

/* Append the compute line of elementwise node 'node' (an alias in the group adds no line:
** its output is its input's DAG tensor). */
static int append_elem(ex *x, dagtext *d, int node)
{
    md_graph *g = x->g;
    const md_node *n = &g->nodes[node];
    const md_tensor *o = &g->tensors[n->out[0]];
    at_buf a, b, c3, line;
    int rc = 0;
    double lo = -INFINITY, hi = INFINITY, e;
    char name[16];
    if (md_op_class_of(n->kind) == MD_CLS_ALIAS) {
        const char *src = dt_name_of(d, n->in[0]);
        if (src == NULL || d->n_t >= 64) {
            snprintf(d->why, sizeof d->why, "internal: alias '%s' of no group tensor", n->name);
            return -1;
        }
        d->gt[d->n_t] = n->out[0];
        memmove(d->gname[d->n_t], src, strlen(src) + 1); /* src is another gname */
        d->n_t++;
        return 0;
    }
    at_buf_init(&a);
    at_buf_init(&b);
    at_buf_init(&c3);
    at_buf_init(&line);
    if (n->n_in < 1 || n->in[0] < 0 || operand(x, d, n->in[0], o->shape, o->rank, &a) ||
        (n->n_in > 1 && n->in[1] >= 0 && n->kind != MD_OP_CLIP && n->kind != MD_OP_POW &&
         operand(x, d, n->in[1], o->shape, o->rank, &b)) ||
        (n->kind == MD_OP_WHERE && (n->n_in < 3 || n->in[2] < 0 ||
                                    operand(x, d, n->in[2], o->shape, o->rank, &c3)))) {
        rc = -1;
        goto out;
    }
    if (a.err || b.err || d->decl.err || a.data == NULL) {
        snprintf(d->why, sizeof d->why, "out of memory");
        rc = -1;
        goto out;
    }
    switch (n->kind) {
    case MD_OP_ADD: at_buf_printf(&line, "%s + %s", a.data, b.data ? b.data : ""); break;
    case MD_OP_SUB: at_buf_printf(&line, "%s - (%s)", a.data, b.data ? b.data : ""); break;
    case MD_OP_MUL: at_buf_printf(&line, "%s * %s", a.data, b.data ? b.data : ""); break;
    case MD_OP_DIV: at_buf_printf(&line, "%s / (%s)", a.data, b.data ? b.data : ""); break;
    case MD_OP_MAX: at_buf_printf(&line, "max(%s, %s)", a.data, b.data ? b.data : ""); break;
    case MD_OP_MIN: at_buf_printf(&line, "min(%s, %s)", a.data, b.data ? b.data : ""); break;
    case MD_OP_POW: {
        const md_tensor *ex_t = &g->tensors[n->in[1]];
        e = ex_t->dtype == AT_DT_F32 ? *(const float *)ex_t->data
                                     : (double)*(const int64_t *)ex_t->data;
        if (e == 2)
            at_buf_printf(&line, "%s * %s", a.data, a.data);
        else if (e == 3)
            at_buf_printf(&line, "%s * %s * %s", a.data, a.data, a.data);
        else if (e == 0.5)
            at_buf_printf(&line, "sqrt(%s)", a.data);
        else if (e == 1)
            at_buf_printf(&line, "%s", a.data);
        else if (e == -1)
            at_buf_printf(&line, "1.0 / %s", a.data);
        else
            at_buf_printf(&line, "1.0 / sqrt(%s)", a.data);
        break;
    }
    case MD_OP_RELU: at_buf_printf(&line, "max(%s, 0.0)", a.data); break;
    case MD_OP_CLIP:
        if (g->opset < 11) {
            lo = md__attr_f(n, "min", -INFINITY);
            hi = md__attr_f(n, "max", INFINITY);
        } else {
            for (int k = 1; k < 3 && k < n->n_in; k++) {
                const md_tensor *c = n->in[k] >= 0 ? &g->tensors[n->in[k]] : NULL;
                double v;
                if (c == NULL)
                    continue;
                v = c->dtype == AT_DT_F32 ? *(const float *)c->data
                                          : (double)*(const int64_t *)c->data;
                if (k == 1)
                    lo = v;
                else
                    hi = v;
            }
        }
        {
            at_buf t;
            at_buf_init(&t);
            at_buf_puts(&t, a.data);
            if (lo > -INFINITY) {
                at_buf tmp;
                at_buf_init(&tmp);
                at_buf_printf(&tmp, "max(%s, ", t.data ? t.data : "");
                print_float(&tmp, lo);
                at_buf_putc(&tmp, ')');
                at_buf_fini(&t);
                t = tmp;
            }
            if (hi < INFINITY) {
                at_buf tmp;
                at_buf_init(&tmp);
                at_buf_printf(&tmp, "min(%s, ", t.data ? t.data : "");
                print_float(&tmp, hi);
                at_buf_putc(&tmp, ')');
                at_buf_fini(&t);
                t = tmp;
            }
            at_buf_puts(&line, t.data ? t.data : "");
            at_buf_fini(&t);
        }
        break;
    case MD_OP_SIGMOID: at_buf_printf(&line, "sigmoid(%s)", a.data); break;
    case MD_OP_TANH: at_buf_printf(&line, "tanh(%s)", a.data); break;
    case MD_OP_ERF: at_buf_printf(&line, "erf(%s)", a.data); break;
    case MD_OP_EXP: at_buf_printf(&line, "exp(%s)", a.data); break;
    case MD_OP_LOG: at_buf_printf(&line, "log(%s)", a.data); break;
    case MD_OP_SQRT: at_buf_printf(&line, "sqrt(%s)", a.data); break;
    case MD_OP_ABS: at_buf_printf(&line, "abs(%s)", a.data); break;
    case MD_OP_NEG: at_buf_printf(&line, "-%s", a.data); break;
    case MD_OP_RECIPROCAL: at_buf_printf(&line, "1.0 / %s", a.data); break;
    case MD_OP_GELU:
        if (strcmp(md__attr_s(n, "approximate", "none"), "tanh") == 0)
            at_buf_printf(&line, "0.5 * %s * (1.0 + tanh(0.797884561 * (%s + 0.044715 * %s * "
                          "%s * %s)))", a.data, a.data, a.data, a.data, a.data);
        else
            at_buf_printf(&line, "0.5 * %s * (1.0 + erf(%s / 1.41421354))", a.data, a.data);
        break;
    case MD_OP_LEAKYRELU:
        at_buf_printf(&line, "select(%s >= 0.0, %s, %s * ", a.data, a.data, a.data);
        print_float(&line, md__attr_f(n, "alpha", 0.01));
        at_buf_putc(&line, ')');
        break;
    case MD_OP_HARDSIGMOID:
        at_buf_puts(&line, "max(min(");
        print_float(&line, md__attr_f(n, "alpha", 0.2));
        at_buf_printf(&line, " * %s + ", a.data);
        print_float(&line, md__attr_f(n, "beta", 0.5));
        at_buf_puts(&line, ", 1.0), 0.0)");
        break;
    case MD_OP_HARDSWISH:
        at_buf_printf(&line, "%s * max(min(%s / 6.0 + 0.5, 1.0), 0.0)", a.data, a.data);
        break;
    /* bools are floats 0 and 1 at run time */
    case MD_OP_EQUAL: at_buf_printf(&line, "select(%s == %s, 1.0, 0.0)", a.data, b.data ? b.data : ""); break;
    case MD_OP_GREATER: at_buf_printf(&line, "select(%s > %s, 1.0, 0.0)", a.data, b.data ? b.data : ""); break;
    case MD_OP_LESS: at_buf_printf(&line, "select(%s < %s, 1.0, 0.0)", a.data, b.data ? b.data : ""); break;
    case MD_OP_NOT: at_buf_printf(&line, "select(%s == 0.0, 1.0, 0.0)", a.data); break;
    case MD_OP_TO_BOOL: at_buf_printf(&line, "select(%s != 0.0, 1.0, 0.0)", a.data); break;
    case MD_OP_WHERE:
        at_buf_printf(&line, "select(%s != 0.0, %s, %s)", a.data, b.data ? b.data : "",
                      c3.data ? c3.data : "");
        break;
    default:
        snprintf(d->why, sizeof d->why, "internal: %s is not elementwise here", n->op_type);
        rc = -1;
        goto out;
    }
    if (d->n_t >= 64) {
        snprintf(d->why, sizeof d->why, "too many fused operators");
        rc = -1;
        goto out;
    }
    snprintf(name, sizeof name, "e%d", ++d->n_e);
    at_buf_printf(&d->body, "%s[", name);
    for (int k = 0; k < d->rank; k++)
        at_buf_printf(&d->body, "%sa%d:%lld", k ? ", " : "", k, (long long)d->shape[k]);
    at_buf_printf(&d->body, "] = %s\n", line.data ? line.data : "");
    d->gt[d->n_t] = n->out[0];
    snprintf(d->gname[d->n_t], sizeof d->gname[0], "%s", name);
    d->n_t++;
    if (line.err || a.err || b.err || c3.err) {
        snprintf(d->why, sizeof d->why, "out of memory");
        rc = -1;
    }
out:
    at_buf_fini(&a);
    at_buf_fini(&b);
    at_buf_fini(&c3);
    at_buf_fini(&line);
    return rc;
}

/* The text of an anchor this file writes itself (global max pool, reductions). */
static int own_anchor_text(ex *x, dagtext *d, int node)
{
    md_graph *g = x->g;
    const md_node *n = &g->nodes[node];
    const md_tensor *in = &g->tensors[n->in[0]];
    int64_t axes[MD_MAX_RANK];
    int red[MD_MAX_RANK] = {0}, cnt, k = 0, rk = 0, sp = 0;
    int64_t rsize = 1;
    const char *op;
    d->args[0] = n->in[0];
    snprintf(d->names[0], sizeof d->names[0], "X");
    d->n_args = 1;
    at_buf_puts(&d->decl, "input X[");
    for (int dd = 0; dd < in->rank; dd++)
        at_buf_printf(&d->decl, "%s%lld", dd ? ", " : "", (long long)in->shape[dd]);
    at_buf_puts(&d->decl, "] float32\n");
    if (n->kind == MD_OP_GMP) {
        red[n->nhwc ? 1 : 2] = red[n->nhwc ? 2 : 3] = 1;
        op = "max";
    } else {
        cnt = md__node_axes(g, n, in->rank, axes, MD_MAX_RANK);
        for (int i = 0; i < cnt; i++)
            red[axes[i]] = 1;
        for (int dd = 0; dd < in->rank; dd++)
            if (cnt == 0)
                red[dd] = 1;
        op = n->kind == MD_OP_REDUCEMAX ? "max" : n->kind == MD_OP_REDUCEMIN ? "min" : "sum";
    }
    at_buf_puts(&d->body, "r[");
    for (int dd = 0; dd < in->rank; dd++)
        if (!red[dd])
            at_buf_printf(&d->body, "%sa%d:%lld", k++ ? ", " : "", sp++, (long long)in->shape[dd]);
        else
            rsize *= in->shape[dd];
    if (k == 0)
        at_buf_puts(&d->body, "a0:1");
    at_buf_printf(&d->body, "] = %s[", op);
    for (int dd = 0; dd < in->rank; dd++)
        if (red[dd])
            at_buf_printf(&d->body, "%sr%d:%lld", rk++ ? ", " : "", dd, (long long)in->shape[dd]);
    at_buf_puts(&d->body, "](X[");
    sp = 0;
    for (int dd = 0; dd < in->rank; dd++) {
        if (red[dd])
            at_buf_printf(&d->body, "%sr%d", dd ? ", " : "", dd);
        else
            at_buf_printf(&d->body, "%sa%d", dd ? ", " : "", sp++);
    }
    at_buf_puts(&d->body, "])\n");
    d->gt[0] = n->out[0];
    snprintf(d->gname[0], sizeof d->gname[0], "r");
    if (n->kind == MD_OP_REDUCEMEAN) {
        at_buf_puts(&d->body, "mean[");
        for (int j = 0; j < d->rank; j++)
            at_buf_printf(&d->body, "%sa%d:%lld", j ? ", " : "", j, (long long)d->shape[j]);
        at_buf_puts(&d->body, "] = r");
        axes_ref(&d->body, d->rank);
        at_buf_puts(&d->body, " / ");
        print_float(&d->body, (double)rsize);
        at_buf_putc(&d->body, '\n');
        snprintf(d->gname[0], sizeof d->gname[0], "mean");
    }
    d->n_t = 1;
    return 0;
}

/* The library text of an anchor, its placeholders bound to the node's inputs. */
static int library_text(ex *x, dagtext *d, int node, const char *spec)
{
    md_graph *g = x->g;
    const md_node *n = &g->nodes[node];
    char err[256], *text = NULL;
    const char *p, *line;
    ss_dag *dag = NULL;
    int in_idx = 0;
    {
        at_err e = kn_op_text(spec, &text, err, sizeof err);
        if (e != AT_OK) {
            d->oom = e == AT_ENOMEM;
            snprintf(d->why, sizeof d->why, "%s", err);
            return -1;
        }
    }
    /* placeholder lines go to 'decl', in order; they bind the node's inputs in order */
    for (line = text; *line; line = p) {
        size_t len;
        p = strchr(line, '\n');
        p = p ? p + 1 : line + strlen(line);
        len = (size_t)(p - line);
        if (line[0] == '#')
            continue;
        if (strncmp(line, "input ", 6) == 0 || strncmp(line, "const ", 6) == 0) {
            const char *nm = line + 6;
            size_t nl = strcspn(nm, "[");
            while (in_idx < n->n_in && n->in[in_idx] < 0)
                in_idx++;
            if (in_idx >= n->n_in || nl >= sizeof d->names[0]) {
                snprintf(d->why, sizeof d->why, "internal: %.200s has more inputs than the node",
                         spec);
                at_free(text);
                return -1;
            }
            d->args[d->n_args] = n->in[in_idx++];
            snprintf(d->names[d->n_args], sizeof d->names[0], "%.*s", (int)nl, nm);
            d->n_args++;
            at_buf_put(&d->decl, line, len);
        } else {
            at_buf_put(&d->body, line, len);
        }
    }
    if (d->body.len && d->body.data[d->body.len - 1] != '\n')
        at_buf_putc(&d->body, '\n');
    /* the name of the library's output: the last compute line */
    if ((d->oom = ss_dag_parse(text, strlen(text), &dag, err, sizeof err)) != AT_OK) {
        d->oom = d->oom == AT_ENOMEM;
        snprintf(d->why, sizeof d->why, "internal: %.100s: %.140s", spec, err);
        at_free(text);
        return -1;
    }
    d->gt[0] = n->out[0];
    snprintf(d->gname[0], sizeof d->gname[0], "%s", dag->ops[dag->n_ops - 1].name);
    d->n_t = 1;
    ss_dag_unref(dag);
    at_free(text);
    return 0;
}

/* ---- batched MatMul through transposes ----
**
** Attention permutes its operands around the products ([128, 12, 64] -> [12, 128, 64] for
** Q and V, -> [12, 64, 128] for K, and the product back): as copies that is 4 transposes of
** 100k floats a layer.  A batched MatMul reads an operand that a Transpose made (seen
** through aliases) from the Transpose's input instead, with the permuted indices, and one
** whose only reader is a Transpose writes the permuted tensor directly (its loops in that
** order): the transposes are no steps, only indexing of the task's DAG. */

/* A tensor seen as 3-d: rank 3, or rank 4 with a leading 1 (attention's [1, heads, S, d]);
** its three sizes into v (may be NULL); 0, or -1 when it is neither. */
static int view3(const md_tensor *t, int64_t *v)
{
    int off = t->rank == 4 && t->shape[0] == 1 ? 1 : t->rank == 3 ? 0 : -1;
    if (off < 0)
        return -1;
    for (int d = 0; v && d < 3; d++)
        v[d] = t->shape[off + d];
    return 0;
}

/* The Transpose behind operand tensor t (through aliases with one reader each), or -1. */
static int transpose_behind(const ex *x, int t)
{
    const md_graph *g = x->g;
    for (int hops = 0; hops < 8 && t >= 0; hops++) {
        int p = g->tensors[t].producer;
        const md_node *n;
        if (p < 0 || g->tensors[t].is_output || g->tensors[t].n_consumers != 1)
            return -1;
        n = &g->nodes[p];
        if (n->dead || n->unsupported)
            return -1;
        if (n->kind == MD_OP_TRANSPOSE)
            return view3(&g->tensors[n->in[0]], NULL) == 0 && !g->tensors[n->in[0]].data &&
                           g->tensors[n->in[0]].known ? p : -1;
        if (md_op_class_of(n->kind) != MD_CLS_ALIAS)
            return -1;
        t = n->in[0];
    }
    return -1;
}

/* The permutation of a Transpose of a 3-d view (a rank-4 one that keeps its leading 1 in
** place: perm[0] == 0) into perm[3]; 0 when it is not one. */
static int perm3(const md_node *n, int64_t *perm)
{
    int64_t p4[4];
    int cnt = md__attr_ints(n, "perm", p4, 4);
    if (cnt == 4) {
        if (p4[0] != 0)
            return 0;
        for (int d = 0; d < 3; d++)
            perm[d] = p4[d + 1] - 1;
    } else if (cnt == 3) {
        memcpy(perm, p4, 3 * sizeof *perm);
    } else if (cnt < 0 && n->n_in > 0) {
        perm[0] = 2, perm[1] = 1, perm[2] = 0; /* the default: reversed (rank 3 only) */
    } else {
        return 0;
    }
    return perm[0] >= 0 && perm[1] >= 0 && perm[2] >= 0 &&
           perm[0] + perm[1] + perm[2] == 3 && perm[0] != perm[1] && perm[1] != perm[2] &&
           perm[0] != perm[2];
}

static int batched_matmul(const md_graph *g, const md_node *n)
{
    const md_tensor *a, *b, *o;
    if (n->kind != MD_OP_MATMUL || n->n_in < 2 || n->in[0] < 0 || n->in[1] < 0 || n->n_out < 1 ||
        n->out[0] < 0 || n->dead || n->unsupported)
        return 0;
    a = &g->tensors[n->in[0]];
    b = &g->tensors[n->in[1]];
    o = &g->tensors[n->out[0]];
    {
        int64_t va[3], vb[3], vo[3];
        return a->known && b->known && o->known && view3(a, va) == 0 && view3(b, vb) == 0 &&
               view3(o, vo) == 0 && !a->data && !b->data && va[0] == vb[0];
    }
}

static at_err plan_absorb(ex *x)
{
    md_graph *g = x->g;
    x->absorb = at_malloc((size_t)(g->n_nodes + 1) * sizeof *x->absorb);
    x->absorbed = at_calloc((size_t)g->n_nodes + 1, 1);
    if (x->absorb == NULL || x->absorbed == NULL)
        return AT_ENOMEM;
    for (int i = 0; i < g->n_nodes; i++) {
        const md_node *n = &g->nodes[i];
        int64_t perm[3];
        x->absorb[i][0] = x->absorb[i][1] = x->absorb[i][2] = -1;
        if (!batched_matmul(g, n))
            continue;
        for (int k = 0; k < 2; k++) {
            int p = transpose_behind(x, n->in[k]);
            /* B only when its source keeps j innermost (V's [S, H, d] -> [H, S, d]): a B read
            ** across j (K's [S, H, d] -> [H, d, S]) vectorizes only through packing, which the
            ** search finds late (BERT-base's scores: 0.29 ms after 54 trials against 0.10
            ** reading the copy), so that transpose stays a copy */
            if (p >= 0 && !x->absorbed[p] && perm3(&g->nodes[p], perm) && (k == 0 || perm[2] == 2)) {
                x->absorb[i][k] = p;
                x->absorbed[p] = 1;
            }
        }
        /* the output: its only reader a Transpose */
        {
            int t = n->out[0], c = -1;
            if (!g->tensors[t].is_output && x->cons_start[t + 1] - x->cons_start[t] == 1)
                c = x->cons[x->cons_start[t]];
            if (c >= 0 && g->nodes[c].kind == MD_OP_TRANSPOSE && !g->nodes[c].dead &&
                !g->nodes[c].unsupported && g->nodes[c].out[0] >= 0 && !x->absorbed[c] &&
                perm3(&g->nodes[c], perm)) {
                x->absorb[i][2] = c;
                x->absorbed[c] = 1;
            }
        }
    }
    return AT_OK;
}

/* The DAG text of batched MatMul 'node' with its absorbed transposes:
**   C[b, i, j] = sum[k](A[b, i, k] * B[b, k, j]), A and B read through their transposes,
**   the result's loops in the order of the output transpose. */
static int bmm_text(ex *x, dagtext *d, int node)
{
    md_graph *g = x->g;
    const md_node *n = &g->nodes[node];
    const char *lname[3] = {"b", "i", "k"}, *rname[3] = {"b", "k", "j"}, *oname[3] = {"b", "i", "j"};
    const char *idx[2][3];
    int64_t ext[3], av[3]; /* B, M, N; A's logical sizes */
    int64_t K;
    view3(&g->tensors[n->out[0]], ext);
    view3(&g->tensors[n->in[0]], av);
    K = av[2];
    for (int k = 0; k < 2; k++) {
        int p = x->absorb[node][k], src = p >= 0 ? g->nodes[p].in[0] : n->in[k];
        int64_t tv[3];
        const char **nm = k ? rname : lname;
        int64_t perm[3] = {0, 1, 2};
        if (p >= 0)
            perm3(&g->nodes[p], perm);
        /* operand dim e is source dim perm[e] */
        for (int e = 0; e < 3; e++)
            idx[k][perm[e]] = nm[e];
        d->args[d->n_args] = src;
        snprintf(d->names[d->n_args], sizeof d->names[0], "%s", k ? "B" : "A");
        d->n_args++;
        view3(&g->tensors[src], tv);
        at_buf_printf(&d->decl, "input %s[%lld, %lld, %lld] float32\n", k ? "B" : "A",
                      (long long)tv[0], (long long)tv[1], (long long)tv[2]);
    }
    {
        int q = x->absorb[node][2];
        int64_t perm[3] = {0, 1, 2};
        if (q >= 0)
            perm3(&g->nodes[q], perm);
        /* output dim e holds logical axis perm[e] */
        at_buf_puts(&d->body, "C[");
        for (int e = 0; e < 3; e++)
            at_buf_printf(&d->body, "%s%s:%lld", e ? ", " : "", oname[perm[e]],
                          (long long)ext[perm[e]]);
        at_buf_printf(&d->body, "] = sum[k:%lld](A[%s, %s, %s] * B[%s, %s, %s])\n", (long long)K,
                      idx[0][0], idx[0][1], idx[0][2], idx[1][0], idx[1][1], idx[1][2]);
        d->gt[0] = q >= 0 ? g->nodes[q].out[0] : n->out[0];
    }
    snprintf(d->gname[0], sizeof d->gname[0], "C");
    d->n_t = 1;
    return 0;
}

/* ---- tasks ---- */

static char *arena_str(md_task_list *tl, const char *s)
{
    return at_arena_strdup(&tl->arena, s);
}

static int find_task(const md_task_list *tl, const char *key)
{
    for (int i = 0; i < tl->n_tasks; i++)
        if (strcmp(tl->tasks[i].key, key) == 0)
            return i;
    return -1;
}

static int has_reduction(const ss_dag *dag)
{
    for (int i = 0; i < dag->n_ops; i++)
        if (dag->ops[i].kind == SS_OP_COMPUTE && dag->ops[i].reduce != SS_RED_NONE)
            return 1;
    return 0;
}

/* Node names of a group's use: members with what was merged into them. */
static at_err make_use(ex *x, const grp *gr, md_task_use *u)
{
    md_graph *g = x->g;
    md_task_list *tl = x->m->tasks;
    int n = 0;
    for (int i = 0; i < gr->n_nodes; i++)
        n += 1 + g->nodes[gr->nodes[i]].n_merged;
    u->nodes = at_arena_alloc(&tl->arena, (size_t)n * sizeof *u->nodes);
    if (u->nodes == NULL)
        return AT_ENOMEM;
    u->n_nodes = 0;
    for (int i = 0; i < gr->n_nodes; i++) {
        const md_node *nd = &g->nodes[gr->nodes[i]];
        for (int k = -1; k < nd->n_merged; k++) {
            const char *nm = k < 0 ? nd->name : g->nodes[nd->merged[k]].name;
            if (u->n_nodes && strcmp(u->nodes[u->n_nodes - 1], nm) == 0)
                continue;
            if ((u->nodes[u->n_nodes++] = arena_str(tl, nm)) == NULL)
                return AT_ENOMEM;
        }
    }
    return AT_OK;
}

static at_err add_use(ex *x, int task, const grp *gr)
{
    md_task *t = &x->m->tasks->tasks[task];
    md_task_use *nu = at_arena_alloc(&x->m->tasks->arena, (size_t)(t->n_uses + 1) * sizeof *nu);
    if (nu == NULL)
        return AT_ENOMEM;
    if (t->n_uses)
        memcpy(nu, t->uses, (size_t)t->n_uses * sizeof *nu);
    t->uses = nu;
    t->weight++;
    return make_use(x, gr, &t->uses[t->n_uses++]);
}

static at_err new_task(ex *x, const grp *gr, ss_dag *dag, const char *name, const char *desc,
                       const char *kind, int *task)
{
    md_graph *g = x->g;
    md_task_list *tl = x->m->tasks;
    md_task t;
    at_buf b;
    char tag[96];
    int n_ops = 0;
    memset(&t, 0, sizeof t);
    memcpy(t.key, dag->key, sizeof t.key);
    at_buf_init(&b);
    ss_dag_print(dag, &b);
    if (b.err) {
        at_buf_fini(&b);
        return AT_ENOMEM;
    }
    t.dag_text = arena_str(tl, b.data);
    at_buf_fini(&b);
    snprintf(tag, sizeof tag, "%s:%d", kind, (int)floor(log(dag->flops + 1) / log(1.618)));
    t.name = arena_str(tl, name);
    t.desc = arena_str(tl, desc);
    t.tag = arena_str(tl, tag);
    t.flops = dag->flops;
    t.tunable = has_reduction(dag);
    for (int i = 0; i < gr->n_nodes; i++)
        n_ops += 1 + g->nodes[gr->nodes[i]].n_merged;
    t.op_types = at_arena_alloc(&tl->arena, (size_t)n_ops * sizeof *t.op_types);
    if (t.dag_text == NULL || t.name == NULL || t.desc == NULL || t.tag == NULL ||
        t.op_types == NULL)
        return AT_ENOMEM;
    for (int i = 0; i < gr->n_nodes; i++) {
        const md_node *nd = &g->nodes[gr->nodes[i]];
        for (int k = -1; k < nd->n_merged; k++) {
            const char *op = k < 0 ? nd->op_type : g->nodes[nd->merged[k]].op_type;
            if ((t.op_types[t.n_op_types++] = arena_str(tl, op)) == NULL)
                return AT_ENOMEM;
        }
    }
    t.dag = ss_dag_ref(dag);
    if (at_vec_push(&tl->tasks, &tl->n_tasks, &tl->cap_tasks, t) != AT_OK) {
        ss_dag_unref(dag);
        return AT_ENOMEM;
    }
    *task = tl->n_tasks - 1;
    return add_use(x, *task, gr);
}

static void lower_str(char *s)
{
    for (; *s; s++)
        if (*s >= 'A' && *s <= 'Z')
            *s = (char)(*s - 'A' + 'a');
}

/* Build the DAG of group 'gid', find or make its task, and add the TASK step. */
static at_err group_task(ex *x, int gid, const char *spec, const char *kind, int relu_absorbed)
{
    md_graph *g = x->g;
    grp *gr = &x->groups[gid];
    dagtext *d = at_calloc(1, sizeof *d);
    at_buf text, name, desc;
    ss_dag *dag = NULL;
    char err[512];
    int first_elem, task = -1, rc = 0;
    at_err e = AT_OK;
    md_step st;
    if (d == NULL)
        return AT_ENOMEM;
    at_buf_init(&d->decl);
    at_buf_init(&d->body);
    at_buf_init(&text);
    at_buf_init(&name);
    at_buf_init(&desc);
    if (gr->anchor >= 0) {
        const md_node *an = &g->nodes[gr->anchor];
        char why[256];
        int r;
        int64_t s[MD_MAX_RANK];
        char sp2[512], k2[64];
        anchor_spec(x, gr->anchor, 0, sp2, sizeof sp2, k2, sizeof k2, s, &r, why, sizeof why);
        d->rank = r;
        memcpy(d->shape, s, sizeof s);
        if (x->absorb[gr->anchor][0] >= 0 || x->absorb[gr->anchor][1] >= 0 ||
            x->absorb[gr->anchor][2] >= 0) {
            rc = bmm_text(x, d, gr->anchor);
            if (x->absorb[gr->anchor][2] >= 0) {
                const md_tensor *o = &g->tensors[g->nodes[x->absorb[gr->anchor][2]].out[0]];
                d->rank = o->rank;
                memcpy(d->shape, o->shape, sizeof d->shape);
            }
        } else {
            rc = spec[0] ? library_text(x, d, gr->anchor, spec)
                         : own_anchor_text(x, d, gr->anchor);
        }
        at_buf_puts(&name, kind);
        if (an->kind == MD_OP_CONV || an->kind == MD_OP_DENSE || an->kind == MD_OP_WINO_OUT) {
            if (an->n_in > 2 && an->in[2] >= 0)
                at_buf_puts(&name, "_bias");
        }
        at_buf_puts(&desc, spec[0] ? spec : kind);
        if (!spec[0]) {
            char sh[128];
            shape_x(g->tensors[an->in[0]].shape, g->tensors[an->in[0]].rank, sh, sizeof sh);
            at_buf_printf(&desc, "[%s]", sh);
        }
        first_elem = 1;
        if (x->absorb[gr->anchor][0] >= 0 || x->absorb[gr->anchor][1] >= 0)
            at_buf_puts(&desc, " (operands read through their transposes)");
        if (x->absorb[gr->anchor][2] >= 0) {
            at_buf_puts(&desc, " (written transposed)");
            first_elem = 2; /* the output transpose is the anchor's own */
        }
        if (relu_absorbed) {
            /* the library's relu=1 line: named like an appended one would be */
            at_buf_puts(&name, "_relu");
            d->gt[0] = g->nodes[gr->nodes[1]].out[0];
            first_elem = 2;
        }
    } else {
        const md_tensor *o = &g->tensors[g->nodes[gr->nodes[0]].out[0]];
        char sh[128];
        d->rank = squeeze(o->shape, o->rank, d->shape);
        if (d->rank == 0)
            d->shape[d->rank++] = 1;
        shape_x(d->shape, d->rank, sh, sizeof sh);
        at_buf_puts(&name, "elementwise");
        at_buf_printf(&desc, "elementwise[%s]", sh);
        first_elem = 0;
    }
    for (int i = first_elem, printed = 0; i < gr->n_nodes && rc == 0; i++) {
        const md_node *n = &g->nodes[gr->nodes[i]];
        char op[64];
        snprintf(op, sizeof op, "%s", n->op_type);
        lower_str(op);
        if (n->kind == MD_OP_ADD && strcmp(n->op_type, "BatchNormalization") == 0)
            continue; /* the shift of a split BatchNormalization: named once, by its Mul */
        if (md_op_class_of(n->kind) == MD_CLS_ALIAS)
            continue; /* a view: no work */
        at_buf_printf(&name, "_%s", op);
        at_buf_printf(&desc, "%s%s", i == 0 ? ": " : (!printed && gr->anchor >= 0 ? " + " : ", "), op);
        printed = 1;
    }
    for (int i = first_elem; i < gr->n_nodes && rc == 0; i++)
        rc = append_elem(x, d, gr->nodes[i]);
    if (rc == 0) {
        at_buf_puts(&text, d->decl.data ? d->decl.data : "");
        at_buf_puts(&text, d->body.data ? d->body.data : "");
        if (text.err || name.err || desc.err || d->decl.err || d->body.err) {
            e = AT_ENOMEM;
            goto out;
        }
        at_err pe = ss_dag_parse(text.data, text.len, &dag, err, sizeof err);
        if (pe == AT_ENOMEM) {
            e = AT_ENOMEM;
            goto out;
        }
        if (pe != AT_OK) {
            snprintf(d->why, sizeof d->why, "its DAG does not parse (%.220s)", err);
            rc = -1;
        } else if (dag->n_outputs != 1 || dag->n_args != d->n_args + 1) {
            snprintf(d->why, sizeof d->why, "internal: its DAG has %d outputs and %d "
                     "arguments (want 1 and %d)", dag->n_outputs, dag->n_args, d->n_args + 1);
            rc = -1;
        }
    }
    if (rc != 0 && (d->oom || d->decl.err || d->body.err || name.err || desc.err ||
                    strcmp(d->why, "out of memory") == 0)) {
        e = AT_ENOMEM;
        goto out;
    }
    if (rc != 0) {
        /* cannot be a task: the group's nodes are unsupported, named */
        for (int i = 0; i < gr->n_nodes; i++) {
            e = md__unsupported(g, gr->nodes[i], "cannot be made a task: %s", d->why);
            if (e == AT_ENOMEM)
                goto out;
            g->nodes[gr->nodes[i]].group = -1;
        }
        x->m->n_unsupported += gr->n_nodes;
        gr->n_nodes = 0;
        e = AT_OK;
        goto out;
    }
    task = find_task(x->m->tasks, dag->key);
    if (task >= 0)
        e = add_use(x, task, gr);
    else
        e = new_task(x, gr, dag, name.data, desc.data, kind, &task);
    if (e != AT_OK)
        goto out;
    memset(&st, 0, sizeof st);
    st.kind = MD_STEP_TASK;
    st.node = gr->nodes[gr->n_nodes - 1];
    st.task = task;
    st.n_args = d->n_args + 1;
    if ((st.args = at_malloc((size_t)st.n_args * sizeof *st.args)) == NULL) {
        e = AT_ENOMEM;
        goto out;
    }
    memcpy(st.args, d->args, (size_t)d->n_args * sizeof *st.args);
    st.args[d->n_args] = gr->out;
    if (at_vec_push(&x->m->steps, &x->m->n_steps, &x->m->cap_steps, st) != AT_OK) {
        at_free(st.args);
        e = AT_ENOMEM;
    }
out:
    ss_dag_unref(dag);
    at_buf_fini(&d->decl);
    at_buf_fini(&d->body);
    at_buf_fini(&text);
    at_buf_fini(&name);
    at_buf_fini(&desc);
    at_free(d);
    return e;
}

/* ---- driver ---- */

static int step_cmp_node(const void *a, const void *b)
{
    const md_step *x = a, *y = b;
    return (x->node > y->node) - (x->node < y->node);
}

at_err md__extract(md_model *m, char *errmsg, size_t errmsg_size)
{
    ex x;
    md_graph *g = m->g;
    char *group_t = NULL, *taint = NULL;
    at_err err = AT_OK;
    (void)errmsg;
    (void)errmsg_size;
    memset(&x, 0, sizeof x);
    x.m = m;
    x.g = g;
    if ((err = build_consumers(&x)) != AT_OK || (err = plan_absorb(&x)) != AT_OK)
        goto out;
    group_t = at_calloc((size_t)g->n_tensors + 1, 1);
    taint = at_calloc((size_t)g->n_tensors + 1, 1);
    if (group_t == NULL || taint == NULL) {
        err = AT_ENOMEM;
        goto out;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        md_node *n = &g->nodes[i];
        md_op_class c = md_op_class_of(n->kind);
        grp gr;
        char spec[512] = "", kind[64] = "", why[256] = "";
        int64_t oshape[MD_MAX_RANK];
        int orank = 0, relu = 0;
        if (n->dead)
            continue;
        if (n->unsupported) {
            m->n_unsupported++;
            continue;
        }
        if (c == MD_CLS_MOVE && x.absorbed[i])
            continue; /* a batched MatMul's task reads or writes through it */
        if (c == MD_CLS_MOVE) {
            md_step st;
            memset(&st, 0, sizeof st);
            st.kind = MD_STEP_COPY;
            st.node = i;
            st.task = -1;
            if (at_vec_push(&m->steps, &m->n_steps, &m->cap_steps, st) != AT_OK) {
                err = AT_ENOMEM;
                goto out;
            }
            continue;
        }
        if (n->group >= 0 || (c != MD_CLS_ANCHOR && c != MD_CLS_ELEM))
            continue;
        memset(&gr, 0, sizeof gr);
        gr.anchor = c == MD_CLS_ANCHOR ? i : -1;
        if (gr.anchor >= 0) {
            if (anchor_spec(&x, i, 0, spec, sizeof spec, kind, sizeof kind, oshape, &orank, why,
                            sizeof why) != AT_OK) {
                if ((err = md__unsupported(g, i, "%s", why)) == AT_ENOMEM)
                    goto out;
                err = AT_OK;
                m->n_unsupported++;
                continue;
            }
            /* the library computes the anchor's output in its own shape: fusion needs the
            ** graph's to be the same up to dimensions of size 1 */
            if (!same_squeezed(g->tensors[n->out[0]].shape, g->tensors[n->out[0]].rank,
                               oshape, orank))
                orank = -1;
        } else {
            const md_tensor *o = &g->tensors[n->out[0]];
            memcpy(oshape, o->shape, sizeof oshape);
            orank = o->rank;
            snprintf(kind, sizeof kind, "elementwise");
        }
        if ((err = grp_push(&gr, i)) != AT_OK)
            goto out;
        n->group = x.n_groups;
        if (gr.anchor >= 0 && x.absorb[i][2] >= 0) {
            /* the output transpose belongs to the MatMul: fusion continues after it */
            const md_tensor *o = &g->tensors[g->nodes[x.absorb[i][2]].out[0]];
            if ((err = grp_push(&gr, x.absorb[i][2])) != AT_OK)
                goto out;
            g->nodes[x.absorb[i][2]].group = x.n_groups;
            memcpy(oshape, o->shape, sizeof oshape);
            orank = o->rank;
        }
        if (orank >= 0 && (err = grow(&x, &gr, x.n_groups, oshape, orank, group_t, taint)) != AT_OK) {
            at_free(gr.nodes);
            goto out;
        }
        if (orank < 0)
            gr.out = n->out[0];
        /* conv2d / dense with bias followed at once by Relu: the library's relu=1 */
        if (gr.anchor >= 0 && gr.n_nodes > 1 &&
            (n->kind == MD_OP_CONV || n->kind == MD_OP_DENSE || n->kind == MD_OP_WINO_OUT) &&
            n->n_in > 2 && n->in[2] >= 0 && g->nodes[gr.nodes[1]].kind == MD_OP_RELU &&
            g->nodes[gr.nodes[1]].in[0] == n->out[0] && g->tensors[n->out[0]].n_consumers == 1 &&
            !g->tensors[n->out[0]].is_output) {
            relu = 1;
            anchor_spec(&x, i, 1, spec, sizeof spec, kind, sizeof kind, oshape, &orank, why,
                        sizeof why);
        }
        if (at_vec_push(&x.groups, &x.n_groups, &x.cap_groups, gr) != AT_OK) {
            at_free(gr.nodes);
            err = AT_ENOMEM;
            goto out;
        }
        if ((err = group_task(&x, x.n_groups - 1, spec, kind, relu)) != AT_OK)
            goto out;
    }
    /* steps in the order of the node that ends each (a task's last node, a copy's node) */
    if (m->n_steps > 1)
        qsort(m->steps, (size_t)m->n_steps, sizeof *m->steps, step_cmp_node);
out:
    for (int i = 0; i < x.n_groups; i++)
        at_free(x.groups[i].nodes);
    at_free(x.groups);
    at_free(x.cons_start);
    at_free(x.cons);
    at_free(x.absorb);
    at_free(x.absorbed);
    at_free(group_t);
    at_free(taint);
    return err;
}
