/* tests/support/ref_ops.c -- plain C reference operators (see ref_ops.h).
**
** Deliberately naive: one loop per index, double accumulators, no blocking, no tricks, so
** that a reader can check each against the operator's definition at a glance. */
#include "tests/support/ref_ops.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- matrix products ------------------------------------------------------------------ */

void ref_matmul(int M, int N, int K, int tb, const float *A, const float *B, float *C)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = 0;
            for (int k = 0; k < K; k++) {
                float b = tb ? B[(size_t)j * K + k] : B[(size_t)k * N + j];
                acc += (double)A[(size_t)i * K + k] * b;
            }
            C[(size_t)i * N + j] = (float)acc;
        }
}

void ref_batch_matmul(int batch, int M, int N, int K, int tb, const float *A, const float *B,
                      float *C)
{
    for (int b = 0; b < batch; b++)
        ref_matmul(M, N, K, tb, A + (size_t)b * M * K, B + (size_t)b * K * N,
                   C + (size_t)b * M * N);
}

void ref_dense(int M, int N, int K, const float *X, const float *W, const float *b, int relu,
               float *out)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = 0;
            for (int k = 0; k < K; k++)
                acc += (double)X[(size_t)i * K + k] * W[(size_t)j * K + k];
            if (b)
                acc += b[j];
            if (relu && acc < 0)
                acc = 0;
            out[(size_t)i * N + j] = (float)acc;
        }
}

/* ---- convolution ---------------------------------------------------------------------- */

static int window_out(int in, int pad, int k, int dil, int stride, int *out)
{
    int span = dil * (k - 1) + 1;
    if (in < 1 || pad < 0 || k < 1 || dil < 1 || stride < 1 || span > in + 2 * pad)
        return 0;
    *out = (in + 2 * pad - span) / stride + 1;
    return 1;
}

int ref_conv2d_out(const ref_conv2d_params *p, int *oh, int *ow)
{
    int h, w;
    if (p->N < 1 || p->C < 1 || p->K < 1 || p->groups < 1 || p->C % p->groups ||
        p->K % p->groups)
        return 0;
    if (!window_out(p->H, p->ph, p->R, p->dh, p->sh, &h) ||
        !window_out(p->W, p->pw, p->S, p->dw, p->sw, &w))
        return 0;
    *oh = h;
    *ow = w;
    return 1;
}

void ref_conv2d(const ref_conv2d_params *p, const float *X, const float *Wt, const float *b,
                float *out)
{
    int OH, OW;
    int Cg = p->C / p->groups, Kg = p->K / p->groups;
    if (!ref_conv2d_out(p, &OH, &OW))
        return;
    for (int n = 0; n < p->N; n++)
        for (int k = 0; k < p->K; k++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    double acc = 0;
                    int g = k / Kg;
                    for (int c = 0; c < Cg; c++)
                        for (int r = 0; r < p->R; r++)
                            for (int s = 0; s < p->S; s++) {
                                int ih = oh * p->sh + r * p->dh - p->ph;
                                int iw = ow * p->sw + s * p->dw - p->pw;
                                int ic = g * Cg + c;
                                size_t xi, wi;
                                if (ih < 0 || ih >= p->H || iw < 0 || iw >= p->W)
                                    continue; /* zero padding */
                                if (p->nhwc) {
                                    xi = (((size_t)n * p->H + ih) * p->W + iw) * p->C + ic;
                                    wi = (((size_t)r * p->S + s) * Cg + c) * p->K + k;
                                } else {
                                    xi = (((size_t)n * p->C + ic) * p->H + ih) * p->W + iw;
                                    wi = (((size_t)k * Cg + c) * p->R + r) * p->S + s;
                                }
                                acc += (double)X[xi] * Wt[wi];
                            }
                    if (b)
                        acc += b[k];
                    if (p->relu && acc < 0)
                        acc = 0;
                    if (p->nhwc)
                        out[(((size_t)n * OH + oh) * OW + ow) * p->K + k] = (float)acc;
                    else
                        out[(((size_t)n * p->K + k) * OH + oh) * OW + ow] = (float)acc;
                }
}

/* ---- pooling -------------------------------------------------------------------------- */

int ref_pool2d_out(const ref_pool2d_params *p, int *oh, int *ow)
{
    int h, w;
    if (p->N < 1 || p->C < 1 || !window_out(p->H, p->ph, p->kh, 1, p->sh, &h) ||
        !window_out(p->W, p->pw, p->kw, 1, p->sw, &w))
        return 0;
    *oh = h;
    *ow = w;
    return 1;
}

static void pool(const ref_pool2d_params *p, const float *X, float *out, int is_max)
{
    int OH, OW;
    if (!ref_pool2d_out(p, &OH, &OW))
        return;
    for (int n = 0; n < p->N; n++)
        for (int c = 0; c < p->C; c++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    double acc = is_max ? -INFINITY : 0;
                    for (int r = 0; r < p->kh; r++)
                        for (int s = 0; s < p->kw; s++) {
                            int ih = oh * p->sh + r - p->ph, iw = ow * p->sw + s - p->pw;
                            double v;
                            if (ih < 0 || ih >= p->H || iw < 0 || iw >= p->W)
                                v = is_max ? -INFINITY : 0;
                            else
                                v = X[(((size_t)n * p->C + c) * p->H + ih) * p->W + iw];
                            if (is_max)
                                acc = v > acc ? v : acc;
                            else
                                acc += v;
                        }
                    if (!is_max)
                        acc /= (double)p->kh * p->kw;
                    out[(((size_t)n * p->C + c) * OH + oh) * OW + ow] = (float)acc;
                }
}

void ref_max_pool2d(const ref_pool2d_params *p, const float *X, float *out)
{
    pool(p, X, out, 1);
}

void ref_avg_pool2d(const ref_pool2d_params *p, const float *X, float *out)
{
    pool(p, X, out, 0);
}

void ref_global_avg_pool(int N, int C, int H, int W, const float *X, float *out)
{
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            double acc = 0;
            for (int i = 0; i < H * W; i++)
                acc += X[((size_t)n * C + c) * H * W + i];
            out[(size_t)n * C + c] = (float)(acc / ((double)H * W));
        }
}

/* ---- normalisations ------------------------------------------------------------------ */

void ref_softmax(int64_t rows, int64_t n, const float *X, float *out)
{
    for (int64_t i = 0; i < rows; i++) {
        const float *x = X + i * n;
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < n; j++)
            mx = x[j] > mx ? x[j] : mx;
        for (int64_t j = 0; j < n; j++)
            sum += exp(x[j] - mx);
        for (int64_t j = 0; j < n; j++)
            out[i * n + j] = (float)(exp(x[j] - mx) / sum);
    }
}

void ref_layer_norm(int64_t rows, int64_t n, double eps, const float *X, const float *gamma,
                    const float *beta, float *out)
{
    for (int64_t i = 0; i < rows; i++) {
        const float *x = X + i * n;
        double mean = 0, var = 0;
        for (int64_t j = 0; j < n; j++)
            mean += x[j];
        mean /= (double)n;
        for (int64_t j = 0; j < n; j++)
            var += (x[j] - mean) * (x[j] - mean);
        var /= (double)n;
        for (int64_t j = 0; j < n; j++)
            out[i * n + j] = (float)((x[j] - mean) / sqrt(var + eps) * gamma[j] + beta[j]);
    }
}

/* ---- DAG evaluation ------------------------------------------------------------------- */

/* A value: 'f' for float dtypes, 'i' for int32 and bool. */
typedef struct val {
    double f;
    int64_t i;
} val;

typedef struct evalctx {
    const ss_dag *dag;
    float *const *bufs;
    const int64_t *ax; /* values of the op's axes, spatial then reduce */
    char *err;
    size_t err_size;
    int failed;
} evalctx;

static int64_t floordiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static val eval(evalctx *cx, const ss_expr *e)
{
    val r = {0, 0}, a, b;
    int fl;
    if (cx->failed)
        return r;
    switch ((ss_expr_kind)e->kind) {
    case SS_E_IMM_INT:
        r.i = e->v.i;
        return r;
    case SS_E_IMM_FLOAT:
        r.f = e->v.f;
        return r;
    case SS_E_AXIS:
        r.i = cx->ax[e->id];
        return r;
    case SS_E_LOAD: {
        const ss_op *op = &cx->dag->ops[e->id];
        int64_t flat = 0;
        for (int d = 0; d < e->n; d++) {
            int64_t x = eval(cx, e->a[d]).i;
            if (x < 0 || x >= op->shape[d]) {
                if (!cx->failed)
                    snprintf(cx->err, cx->err_size,
                             "load of %s: index %d is %lld, outside [0, %lld)", op->name, d,
                             (long long)x, (long long)op->shape[d]);
                cx->failed = 1;
                return r;
            }
            flat = flat * op->shape[d] + x;
        }
        r.f = cx->bufs[e->id][flat];
        return r;
    }
    case SS_E_SELECT:
        return eval(cx, e->a[0]).i ? eval(cx, e->a[1]) : eval(cx, e->a[2]);
    case SS_E_AND:
        r.i = eval(cx, e->a[0]).i && eval(cx, e->a[1]).i;
        return r;
    case SS_E_OR:
        r.i = eval(cx, e->a[0]).i || eval(cx, e->a[1]).i;
        return r;
    case SS_E_NOT:
        r.i = !eval(cx, e->a[0]).i;
        return r;
    case SS_E_CAST:
        a = eval(cx, e->a[0]);
        fl = at_dtype_is_float((at_dtype)e->a[0]->dtype);
        if (at_dtype_is_float((at_dtype)e->dtype))
            r.f = fl ? a.f : (double)a.i;
        else if (e->dtype == AT_DT_BOOL)
            r.i = fl ? a.f != 0 : a.i != 0;
        else
            r.i = fl ? (int64_t)a.f : a.i;
        return r;
    default:
        break;
    }
    fl = at_dtype_is_float((at_dtype)e->a[0]->dtype);
    a = eval(cx, e->a[0]);
    if (e->n == 1) {
        switch ((ss_expr_kind)e->kind) {
        case SS_E_NEG: r.f = -a.f, r.i = -a.i; break;
        case SS_E_EXP: r.f = exp(a.f); break;
        case SS_E_LOG: r.f = log(a.f); break;
        case SS_E_SQRT: r.f = sqrt(a.f); break;
        case SS_E_TANH: r.f = tanh(a.f); break;
        case SS_E_ERF: r.f = erf(a.f); break;
        case SS_E_ABS: r.f = fabs(a.f), r.i = a.i < 0 ? -a.i : a.i; break;
        case SS_E_SIGMOID: r.f = 1 / (1 + exp(-a.f)); break;
        default: goto unknown;
        }
        return r;
    }
    b = eval(cx, e->a[1]);
    switch ((ss_expr_kind)e->kind) {
    case SS_E_ADD: r.f = a.f + b.f, r.i = a.i + b.i; break;
    case SS_E_SUB: r.f = a.f - b.f, r.i = a.i - b.i; break;
    case SS_E_MUL: r.f = a.f * b.f, r.i = a.i * b.i; break;
    case SS_E_DIV:
        if (fl)
            r.f = a.f / b.f;
        else if (b.i != 0)
            r.i = floordiv(a.i, b.i);
        break;
    case SS_E_MOD:
        if (b.i != 0)
            r.i = a.i - floordiv(a.i, b.i) * b.i;
        break;
    case SS_E_MIN: r.f = a.f < b.f ? a.f : b.f, r.i = a.i < b.i ? a.i : b.i; break;
    case SS_E_MAX: r.f = a.f > b.f ? a.f : b.f, r.i = a.i > b.i ? a.i : b.i; break;
    case SS_E_LT: r.i = fl ? a.f < b.f : a.i < b.i; break;
    case SS_E_LE: r.i = fl ? a.f <= b.f : a.i <= b.i; break;
    case SS_E_GT: r.i = fl ? a.f > b.f : a.i > b.i; break;
    case SS_E_GE: r.i = fl ? a.f >= b.f : a.i >= b.i; break;
    case SS_E_EQ: r.i = fl ? a.f == b.f : a.i == b.i; break;
    case SS_E_NE: r.i = fl ? a.f != b.f : a.i != b.i; break;
    default: goto unknown;
    }
    return r;
unknown:
    snprintf(cx->err, cx->err_size, "cannot evaluate a '%s' expression",
             ss_expr_kind_name((ss_expr_kind)e->kind));
    cx->failed = 1;
    return r;
}

/* Advance the odometer idx[0..n) over extents ext; 0 when it wrapped around. */
static int next_index(int64_t *idx, const int64_t *ext, int n)
{
    for (int d = n - 1; d >= 0; d--) {
        if (++idx[d] < ext[d])
            return 1;
        idx[d] = 0;
    }
    return 0;
}

at_err ref_dag_eval(const ss_dag *dag, float *const *bufs, char *errmsg, size_t errmsg_size)
{
    char local[8];
    if (errmsg == NULL || errmsg_size == 0)
        errmsg = local, errmsg_size = sizeof local;
    errmsg[0] = 0;
    for (int o = 0; o < dag->n_ops; o++) {
        const ss_op *op = &dag->ops[o];
        int64_t ax[SS_MAX_AXES] = {0}, ext[SS_MAX_AXES];
        int nr = op->n_raxes, ns = op->n_axes;
        evalctx cx = {dag, bufs, ax, errmsg, errmsg_size, 0};
        int64_t flat = 0;
        if (op->dtype != AT_DT_F32) {
            snprintf(errmsg, errmsg_size, "%s is %s; only float32 is evaluated", op->name,
                     at_dtype_name(op->dtype));
            return AT_EUNSUPPORTED;
        }
        if (op->kind != SS_OP_COMPUTE)
            continue;
        for (int i = 0; i < ns + nr; i++)
            ext[i] = op->axes[i].extent;
        do {
            double acc;
            memset(ax + ns, 0, sizeof ax[0] * (size_t)nr);
            if (op->reduce == SS_RED_NONE) {
                acc = eval(&cx, op->body).f;
            } else {
                acc = op->reduce == SS_RED_SUM    ? 0
                      : op->reduce == SS_RED_PROD ? 1
                      : op->reduce == SS_RED_MAX  ? -INFINITY
                                                  : INFINITY;
                do {
                    double v = eval(&cx, op->body).f;
                    switch (op->reduce) {
                    case SS_RED_SUM: acc += v; break;
                    case SS_RED_PROD: acc *= v; break;
                    case SS_RED_MAX: acc = v > acc ? v : acc; break;
                    default: acc = v < acc ? v : acc; break;
                    }
                } while (next_index(ax + ns, ext + ns, nr));
            }
            if (cx.failed)
                return AT_EINVAL;
            bufs[o][flat++] = (float)acc;
        } while (next_index(ax, ext, ns));
    }
    return AT_OK;
}
