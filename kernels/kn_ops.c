/* kernels/kn_ops.c -- the operator library: operator specs to compute DAGs.
**
** A spec is "NAME" or "NAME:KEY=VALUE,KEY=VALUE,...".  Each operator is one line of the
** KN_OPS table: its name, every parameter with its default (the string kn_op_list shows and
** the only place defaults are written), the alias keys it also accepts, and a summary.  A
** generator reads its parameters through the get_* helpers, which validate each value, and
** writes the DAG in the text format of docs/dag_format.md; kn_op_build parses that text.
** The tensors, layouts and FLOP formulas of every operator are in docs/operators.md.
**
** Invariants:
**   - A generator either fails with a message "OP: problem" (AT_EINVAL) or writes text that
**     ss_dag_parse accepts, in the canonical spacing that ss_dag_print writes (only the
**     first line, a comment with the resolved parameters, is extra).
**   - Every tensor has at most INT32_MAX elements and every parameter fits int32, so all
**     index arithmetic of the generated DAG fits int32.
**   - Indices of padded loads stay inside the input: padding is a separate tensor written
**     with select, and a window of a pool always holds at least one real element.
** Nothing here keeps state; every function is safe to call from any thread. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

/* ---- the table of operators ---------------------------------------------------------- */

/* X(name, parameters with defaults, alias keys, summary) */
#define KN_OPS(X)                                                                          \
    X(matmul, "M=1024,N=1024,K=1024,tb=0", "",                                             \
      "C[M,N] = A[M,K] x B[K,N]; B is a weight ([N,K] when tb=1)")                         \
    X(batch_matmul, "B=16,M=128,N=128,K=64,tb=0", "",                                      \
      "C[B,M,N] = A[B,M,K] x B[B,K,N], both inputs ([B,N,K] when tb=1)")                   \
    X(dense, "M=1,N=1000,K=2048,bias=1,relu=0", "",                                        \
      "out[M,N] = X[M,K] x W[N,K]^T (+ b[N]) (then relu); W and b are weights")           \
    X(conv2d,                                                                              \
      "layout=NCHW,N=1,C=64,H=56,W=56,K=64,R=3,S=3,stride=1,pad=1,dilation=1,groups=1,"    \
      "bias=0,relu=0",                                                                     \
      "sh,sw,ph,pw,dh,dw,in_layout",                                                       \
      "2-D convolution (NCHW or NHWC; an NHWC one may read an NCHW input, in_layout=NCHW) " \
      "with stride, padding, dilation, groups, bias, relu")                                \
    X(depthwise_conv2d,                                                                    \
      "layout=NCHW,N=1,C=32,H=112,W=112,R=3,S=3,stride=1,pad=1,dilation=1,bias=0,relu=0",  \
      "sh,sw,ph,pw,dh,dw", "conv2d with groups = C = K")                                   \
    X(max_pool2d, "layout=NCHW,N=1,C=64,H=112,W=112,kernel=3,stride=2,pad=1",             \
      "kh,kw,sh,sw,ph,pw", "max pooling (NCHW or NHWC); padding is -inf")                  \
    X(avg_pool2d, "layout=NCHW,N=1,C=64,H=56,W=56,kernel=3,stride=2,pad=1",                \
      "kh,kw,sh,sw,ph,pw", "average pooling (NCHW or NHWC); divides by kh*kw (padding counts)") \
    X(global_avg_pool, "layout=NCHW,N=1,C=2048,H=7,W=7", "",                               \
      "[N,C,H,W] (or NHWC [N,H,W,C]) -> [N,C], mean over H, W")                           \
    X(softmax, "M=128,N=1000", "shape", "softmax over the last axis of [M,N] (or of 'shape')") \
    X(layer_norm, "M=128,N=768,eps=1e-5", "shape",                                         \
      "layer normalisation over the last axis, then * gamma + beta (weights)")             \
    X(add, "shape=1x64x56x56", "", "out = A + B, elementwise (rank 1 to 6)")               \
    X(mul, "shape=1x64x56x56", "", "out = A * B, elementwise (rank 1 to 6)")               \
    X(relu, "shape=1x64x56x56", "", "out = max(X, 0), elementwise")                        \
    X(gelu, "shape=128x3072", "", "out = 0.5 * X * (1 + erf(X / sqrt(2))), elementwise")   \
    X(transpose, "shape=64x128x32,perm=2x1x0", "",                                         \
      "out = X with axes permuted (out dim d is X dim perm[d]); perm defaults to reversed") \
    X(winograd_input, "N=1,H=56,W=56,C=64,m=4", "",                                       \
      "Winograd F(m x m, 3 x 3) input transform of an NHWC 3x3 pad-1 convolution: "        \
      "V[a,a,P,C] = Bt d Bt^T per m x m output tile (a = m + 2, P tiles; m = 2 or 4)")     \
    X(winograd_gemm, "P=196,C=64,K=64,m=4", "",                                            \
      "Winograd products: M[a,a,P,K] = V[a,a,P,C] x U[a,a,C,K] per (e, f); U is the "      \
      "transformed weight")                                                                \
    X(winograd_output, "N=1,H=56,W=56,K=64,m=4,bias=0,relu=0", "",                          \
      "Winograd output transform: Y = At M At^T per tile, written as the NHWC "            \
      "convolution output [N,H,W,K] (+ b[K]) (then relu)")

typedef struct spec spec;
typedef int (*gen_fn)(spec *sp, at_buf *b);

#define X(name, params, aliases, summary) static int gen_##name(spec *sp, at_buf *b);
KN_OPS(X)
#undef X

static const kn_op_info op_infos[] = {
#define X(name, params, aliases, summary) {#name, params, summary},
    KN_OPS(X)
#undef X
    {NULL, NULL, NULL},
};

static const struct op_def {
    const char *aliases; /* extra keys accepted, comma-separated, no defaults */
    gen_fn gen;
} op_defs[] = {
#define X(name, params, aliases, summary) {aliases, gen_##name},
    KN_OPS(X)
#undef X
};

const kn_op_info *kn_op_list(void)
{
    return op_infos;
}

/* ---- specs ------------------------------------------------------------------------- */

#define MAX_PARAMS 24
#define KEY_MAX 24
#define VAL_MAX 96
#define MAX_RANK 6

struct spec {
    const kn_op_info *info;
    const struct op_def *def;
    int n;
    struct {
        char key[KEY_MAX];
        char val[VAL_MAX];
    } kv[MAX_PARAMS];
    at_buf resolved; /* "KEY=VALUE,..." in the order the generator read them */
    int n_noted;
    const char *noted[MAX_PARAMS]; /* keys already in 'resolved' */
    char *err;
    size_t err_size;
};

/* Write "OP: message" into the caller's buffer; returns -1 so callers can 'return fail()'. */
static int fail(spec *sp, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(spec *sp, const char *fmt, ...)
{
    va_list ap;
    int n = snprintf(sp->err, sp->err_size, "%s: ", sp->info->name);
    if (n >= 0 && (size_t)n < sp->err_size) {
        va_start(ap, fmt);
        vsnprintf(sp->err + n, sp->err_size - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Trim [*s, *e) of surrounding white space. */
static void trim(const char **s, const char **e)
{
    while (*s < *e && is_space(**s))
        (*s)++;
    while (*e > *s && is_space((*e)[-1]))
        (*e)--;
}

/* Is 'key' ('n' bytes) one of the keys of 'list' ("K=V,K=V" when with_values, else "K,K")?
** When it is and 'val' is not NULL, the default value is copied there. */
static int list_find(const char *list, const char *key, size_t n, int with_values, char *val,
                     size_t val_size)
{
    const char *p = list;
    while (*p) {
        const char *end = strchr(p, ','), *eq;
        if (end == NULL)
            end = p + strlen(p);
        eq = with_values ? memchr(p, '=', (size_t)(end - p)) : end;
        if (eq == NULL)
            eq = end;
        if ((size_t)(eq - p) == n && memcmp(p, key, n) == 0) {
            if (val) {
                size_t vn = eq < end ? (size_t)(end - eq - 1) : 0;
                if (vn >= val_size)
                    vn = val_size - 1;
                memcpy(val, eq < end ? eq + 1 : eq, vn);
                val[vn] = 0;
            }
            return 1;
        }
        p = *end ? end + 1 : end;
    }
    return 0;
}

/* The keys an operator accepts, for the "unknown parameter" message. */
static void known_keys(const spec *sp, char *out, size_t size)
{
    at_buf b;
    const char *p;
    at_buf_init(&b);
    for (p = sp->info->params; *p;) {
        const char *eq = strchr(p, '='), *end = strchr(p, ',');
        at_buf_put(&b, p, (size_t)(eq - p));
        if (end == NULL)
            break;
        at_buf_puts(&b, ", ");
        p = end + 1;
    }
    for (p = sp->def->aliases; *p;) {
        const char *end = strchr(p, ',');
        at_buf_puts(&b, ", ");
        if (end == NULL) {
            at_buf_puts(&b, p);
            break;
        }
        at_buf_put(&b, p, (size_t)(end - p));
        p = end + 1;
    }
    snprintf(out, size, "%s", b.data ? b.data : "");
    at_buf_fini(&b);
}

static int spec_parse(spec *sp, const char *text)
{
    const char *colon, *s, *e, *p;
    size_t n;
    if (text == NULL || *text == 0) {
        snprintf(sp->err, sp->err_size, "empty operator spec (expected NAME:KEY=VALUE,...)");
        return -1;
    }
    colon = strchr(text, ':');
    s = text;
    e = colon ? colon : text + strlen(text);
    trim(&s, &e);
    n = (size_t)(e - s);
    for (size_t i = 0; op_infos[i].name; i++) {
        if (strlen(op_infos[i].name) == n && memcmp(op_infos[i].name, s, n) == 0) {
            sp->info = &op_infos[i];
            sp->def = &op_defs[i];
        }
    }
    if (sp->info == NULL) {
        at_buf names;
        at_buf_init(&names);
        for (size_t i = 0; op_infos[i].name; i++)
            at_buf_printf(&names, "%s%s", i ? ", " : "", op_infos[i].name);
        snprintf(sp->err, sp->err_size, "unknown operator '%.*s' (known: %s)",
                 (int)AT_MIN(n, 64), s, names.data ? names.data : "");
        at_buf_fini(&names);
        return -1;
    }
    if (colon == NULL)
        return 0;
    for (p = colon + 1;;) {
        const char *end = strchr(p, ','), *eq, *ks, *ke, *vs, *ve;
        char key[KEY_MAX];
        if (end == NULL)
            end = p + strlen(p);
        eq = memchr(p, '=', (size_t)(end - p));
        ks = p;
        ke = eq ? eq : end;
        trim(&ks, &ke);
        if (eq == NULL || ke == ks) {
            const char *is = p, *ie = end;
            trim(&is, &ie);
            return fail(sp, "expected KEY=VALUE, got '%.*s'", (int)AT_MIN(ie - is, 64), is);
        }
        if (!list_find(sp->info->params, ks, (size_t)(ke - ks), 1, NULL, 0) &&
            !list_find(sp->def->aliases, ks, (size_t)(ke - ks), 0, NULL, 0)) {
            char known[256];
            known_keys(sp, known, sizeof known);
            return fail(sp, "unknown parameter '%.*s' (known: %s)", (int)AT_MIN(ke - ks, 64),
                        ks, known);
        }
        memcpy(key, ks, (size_t)(ke - ks)); /* known keys are short */
        key[ke - ks] = 0;
        for (int i = 0; i < sp->n; i++)
            if (strcmp(sp->kv[i].key, key) == 0)
                return fail(sp, "parameter '%s' given twice", key);
        vs = eq + 1;
        ve = end;
        trim(&vs, &ve);
        if (ve - vs >= VAL_MAX)
            return fail(sp, "the value of '%s' is too long (%d characters)", key, (int)(ve - vs));
        if (sp->n == MAX_PARAMS)
            return fail(sp, "too many parameters");
        memcpy(sp->kv[sp->n].key, key, sizeof key);
        memcpy(sp->kv[sp->n].val, vs, (size_t)(ve - vs));
        sp->kv[sp->n].val[ve - vs] = 0;
        sp->n++;
        if (*end == 0)
            break;
        p = end + 1;
    }
    return 0;
}

/* The value the user gave for 'key', or NULL. */
static const char *given(const spec *sp, const char *key)
{
    for (int i = 0; i < sp->n; i++)
        if (strcmp(sp->kv[i].key, key) == 0)
            return sp->kv[i].val;
    return NULL;
}

/* The value of 'key': given, or else its default (copied into tmp). */
static const char *value(const spec *sp, const char *key, char *tmp, size_t size)
{
    const char *v = given(sp, key);
    if (v)
        return v;
    if (AT_NEVER(!list_find(sp->info->params, key, strlen(key), 1, tmp, size)))
        tmp[0] = 0; /* a generator asked for a key its table line lacks */
    return tmp;
}

/* Record a resolved parameter for the comment line (once per key). */
static void note(spec *sp, const char *key, const char *val)
{
    for (int i = 0; i < sp->n_noted; i++)
        if (strcmp(sp->noted[i], key) == 0)
            return;
    if (sp->n_noted < MAX_PARAMS)
        sp->noted[sp->n_noted++] = key;
    at_buf_printf(&sp->resolved, "%s%s=%s", sp->resolved.len ? "," : "", key, val);
}

/* Integer parameter 'key' (its value text is 'v') >= 'min' (0 or 1), at most INT32_MAX. */
static int parse_int(spec *sp, const char *key, const char *v, int64_t min, int64_t *out)
{
    int64_t x;
    if (at_parse_i64(v, &x) != AT_OK || x < min || x > INT32_MAX) {
        if (at_parse_i64(v, &x) == AT_OK && x > INT32_MAX)
            return fail(sp, "%s is too large (%s; at most %d)", key, v, INT32_MAX);
        return fail(sp, "%s must be a %s integer, got '%s'", key,
                    min > 0 ? "positive" : "non-negative", v);
    }
    *out = x;
    note(sp, key, v);
    return 0;
}

static int get_int(spec *sp, const char *key, int64_t min, int64_t *out)
{
    char tmp[VAL_MAX];
    return parse_int(sp, key, value(sp, key, tmp, sizeof tmp), min, out);
}

/* 'key' may also be given per dimension as 'alias' (stride as sh and sw; 'other' is the
** alias of the other dimension): 'alias' wins, and giving 'key' and 'alias' is an error.
** When either alias is given, the value is recorded under the alias's name. */
static int get_int_or(spec *sp, const char *key, const char *alias, const char *other,
                      int64_t min, int64_t *out)
{
    char tmp[VAL_MAX];
    const char *a = given(sp, alias);
    if (a && given(sp, key))
        return fail(sp, "'%s' and '%s' both given; use one of them", key, alias);
    if (a)
        return parse_int(sp, alias, a, min, out);
    return parse_int(sp, given(sp, other) ? alias : key, value(sp, key, tmp, sizeof tmp), min,
                     out);
}

static int get_flag(spec *sp, const char *key, int *out)
{
    char tmp[VAL_MAX];
    const char *v = value(sp, key, tmp, sizeof tmp);
    if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
        return fail(sp, "%s must be 0 or 1, got '%s'", key, v);
    *out = v[0] == '1';
    note(sp, key, v);
    return 0;
}

/* A positive finite number. */
static int get_float(spec *sp, const char *key, double *out)
{
    char tmp[VAL_MAX];
    const char *v = value(sp, key, tmp, sizeof tmp);
    double x;
    if (at_parse_double(v, &x) != AT_OK || !isfinite(x) || x <= 0 || !((float)x > 0) ||
        !isfinite((float)x))
        return fail(sp, "%s must be a positive number (as a float32), got '%s'", key, v);
    *out = x;
    note(sp, key, v);
    return 0;
}

/* Layout: 0 = NCHW, 1 = NHWC. */
static int get_layout(spec *sp, const char *key, int *nhwc)
{
    char tmp[VAL_MAX];
    const char *v = value(sp, key, tmp, sizeof tmp);
    if (strcasecmp(v, "NCHW") == 0)
        *nhwc = 0;
    else if (strcasecmp(v, "NHWC") == 0)
        *nhwc = 1;
    else
        return fail(sp, "%s must be NCHW or NHWC, got '%s'", key, v);
    note(sp, key, *nhwc ? "NHWC" : "NCHW");
    return 0;
}

/* A list "AxBxC" of 1..MAX_RANK integers >= min. */
static int parse_dims(const char *v, int64_t min, int64_t *dims, int *rank)
{
    const char *p = v;
    *rank = 0;
    for (;;) {
        char tmp[32];
        const char *x = strchr(p, 'x');
        size_t n = x ? (size_t)(x - p) : strlen(p);
        if (*rank == MAX_RANK || n == 0 || n >= sizeof tmp)
            return -1;
        memcpy(tmp, p, n);
        tmp[n] = 0;
        for (size_t i = 0; i < n; i++)
            if (tmp[i] < '0' || tmp[i] > '9')
                return -1;
        if (at_parse_i64(tmp, &dims[*rank]) != AT_OK || dims[*rank] < min ||
            dims[*rank] > INT32_MAX)
            return -1;
        (*rank)++;
        if (x == NULL)
            return 0;
        p = x + 1;
    }
}

static int get_shape(spec *sp, const char *key, int64_t *dims, int *rank)
{
    char tmp[VAL_MAX];
    const char *v = value(sp, key, tmp, sizeof tmp);
    if (parse_dims(v, 1, dims, rank) != 0)
        return fail(sp,
                    "%s must be 1 to %d positive integers joined by 'x' (e.g. 4x64x56x56), "
                    "got '%s'",
                    key, MAX_RANK, v);
    note(sp, key, v);
    return 0;
}

/* A reduction over the last axis of "shape" or of M x N: at least 2 dimensions. */
static int get_rows_shape(spec *sp, int64_t *dims, int *rank)
{
    if (given(sp, "shape")) {
        if (given(sp, "M") || given(sp, "N"))
            return fail(sp, "'shape' and '%s' both given; use one of them",
                        given(sp, "M") ? "M" : "N");
        if (get_shape(sp, "shape", dims, rank) != 0)
            return -1;
        if (*rank < 2)
            return fail(sp, "shape must have at least 2 dimensions (use 1x%lld), got '%s'",
                        (long long)dims[0], given(sp, "shape"));
        return 0;
    }
    *rank = 2;
    if (get_int(sp, "M", 1, &dims[0]) != 0 || get_int(sp, "N", 1, &dims[1]) != 0)
        return -1;
    return 0;
}

/* ---- text helpers --------------------------------------------------------------------- */

/* A float32 literal as the DAG printer writes it: the shortest text that reads back to the
** same float, always with a '.' or an exponent. */
static void put_float(at_buf *b, double v)
{
    char t[48];
    float f = (float)v;
    if (isinf(f)) {
        at_buf_puts(b, f > 0 ? "inf" : "-inf");
        return;
    }
    for (int p = 1; p <= 9; p++) {
        snprintf(t, sizeof t, "%.*g", p, (double)f);
        if ((float)strtod(t, NULL) == f)
            break;
    }
    at_buf_puts(b, t);
    if (strpbrk(t, ".e") == NULL)
        at_buf_puts(b, ".0");
}

static double n_elems(int rank, const int64_t *dims)
{
    double n = 1;
    for (int i = 0; i < rank; i++)
        n *= (double)dims[i];
    return n;
}

/* The DAG's limits (schedule_space.h), said before the text is made: float32 tensors */
static int check_size(spec *sp, const char *tensor, int rank, const int64_t *dims)
{
    double n = n_elems(rank, dims);
    if (n > (double)SS_MAX_TENSOR_ELEMS || n * 4 > (double)SS_MAX_TENSOR_BYTES)
        return fail(sp, "tensor '%s' would have %.0f elements (%.2f GiB): a tensor holds at "
                    "most %lld elements and 1 GiB (the largest buffer an agent takes)", tensor,
                    n, n * 4 / (1 << 30), SS_MAX_TENSOR_ELEMS);
    return 0;
}

/* "input X[1, 64, 56, 56] float32" */
static int put_placeholder(spec *sp, at_buf *b, const char *kind, const char *name, int rank,
                           const int64_t *dims)
{
    if (check_size(sp, name, rank, dims) != 0)
        return -1;
    at_buf_printf(b, "%s %s[", kind, name);
    for (int i = 0; i < rank; i++)
        at_buf_printf(b, "%s%lld", i ? ", " : "", (long long)dims[i]);
    at_buf_puts(b, "] float32\n");
    return 0;
}

/* "conv[n:1, k:64, h:56, w:56] = " */
static int put_head(spec *sp, at_buf *b, const char *name, int rank, const char *const *axes,
                    const int64_t *dims)
{
    if (check_size(sp, name, rank, dims) != 0)
        return -1;
    at_buf_printf(b, "%s[", name);
    for (int i = 0; i < rank; i++)
        at_buf_printf(b, "%s%s:%lld", i ? ", " : "", axes[i], (long long)dims[i]);
    at_buf_puts(b, "] = ");
    return 0;
}

/* "sum[c:64, r:3, s:3](" */
static void put_reduce(at_buf *b, const char *red, int n, const char *const *axes,
                       const int64_t *ext)
{
    at_buf_printf(b, "%s[", red);
    for (int i = 0; i < n; i++)
        at_buf_printf(b, "%s%s:%lld", i ? ", " : "", axes[i], (long long)ext[i]);
    at_buf_puts(b, "](");
}

/* "X[n, c, h, w]" */
static void put_load(at_buf *b, const char *tensor, int rank, const char *const *idx)
{
    at_buf_printf(b, "%s[", tensor);
    for (int i = 0; i < rank; i++)
        at_buf_printf(b, "%s%s", i ? ", " : "", idx[i]);
    at_buf_putc(b, ']');
}

/* "a * ma + c * mc" into out; a term with a NULL axis is left out, "* 1" is not written,
** and with no term at all the index is "0". */
static const char *lin2(char *out, size_t size, const char *a, int64_t ma, const char *c,
                        int64_t mc)
{
    size_t n = 0;
    const char *names[2] = {a, c};
    int64_t mul[2] = {ma, mc};
    out[0] = 0;
    for (int i = 0; i < 2; i++) {
        if (names[i] == NULL)
            continue;
        n += (size_t)snprintf(out + n, size - n, "%s%s", n ? " + " : "", names[i]);
        if (mul[i] != 1)
            n += (size_t)snprintf(out + n, size - n, " * %lld", (long long)mul[i]);
    }
    if (n == 0)
        snprintf(out, size, "0");
    return out;
}

/* ---- matrix products ------------------------------------------------------------------ */

static int gen_matmul(spec *sp, at_buf *b)
{
    int64_t M, N, K;
    int tb;
    if (get_int(sp, "M", 1, &M) || get_int(sp, "N", 1, &N) || get_int(sp, "K", 1, &K) ||
        get_flag(sp, "tb", &tb))
        return -1;
    if (put_placeholder(sp, b, "input", "A", 2, (int64_t[]){M, K}) ||
        put_placeholder(sp, b, "const", "B", 2, tb ? (int64_t[]){N, K} : (int64_t[]){K, N}) ||
        put_head(sp, b, "C", 2, (const char *[]){"i", "j"}, (int64_t[]){M, N}))
        return -1;
    put_reduce(b, "sum", 1, (const char *[]){"k"}, &K);
    at_buf_printf(b, "A[i, k] * B[%s])\n", tb ? "j, k" : "k, j");
    return 0;
}

static int gen_batch_matmul(spec *sp, at_buf *b)
{
    int64_t Bn, M, N, K;
    int tb;
    if (get_int(sp, "B", 1, &Bn) || get_int(sp, "M", 1, &M) || get_int(sp, "N", 1, &N) ||
        get_int(sp, "K", 1, &K) || get_flag(sp, "tb", &tb))
        return -1;
    if (put_placeholder(sp, b, "input", "A", 3, (int64_t[]){Bn, M, K}) ||
        put_placeholder(sp, b, "input", "B", 3,
                        tb ? (int64_t[]){Bn, N, K} : (int64_t[]){Bn, K, N}) ||
        put_head(sp, b, "C", 3, (const char *[]){"b", "i", "j"}, (int64_t[]){Bn, M, N}))
        return -1;
    put_reduce(b, "sum", 1, (const char *[]){"k"}, &K);
    at_buf_printf(b, "A[b, i, k] * B[%s])\n", tb ? "b, j, k" : "b, k, j");
    return 0;
}

/* Elementwise epilogue shared by dense and conv2d: 'prev' is the tensor so far, with
** 'rank' spatial axes named 'axes' of extents 'dims'; the bias is b[axes[bias_axis]]. */
static int put_epilogue(spec *sp, at_buf *b, int bias, int relu, int rank,
                        const char *const *axes, const int64_t *dims, int bias_axis,
                        const char *prev)
{
    if (bias) {
        if (put_head(sp, b, "bias", rank, axes, dims))
            return -1;
        put_load(b, prev, rank, axes);
        at_buf_printf(b, " + b[%s]\n", axes[bias_axis]);
        prev = "bias";
    }
    if (relu) {
        if (put_head(sp, b, "relu", rank, axes, dims))
            return -1;
        at_buf_puts(b, "max(");
        put_load(b, prev, rank, axes);
        at_buf_puts(b, ", 0.0)\n");
    }
    return 0;
}

static int gen_dense(spec *sp, at_buf *b)
{
    int64_t M, N, K;
    int bias, relu;
    const char *axes[2] = {"i", "j"};
    if (get_int(sp, "M", 1, &M) || get_int(sp, "N", 1, &N) || get_int(sp, "K", 1, &K) ||
        get_flag(sp, "bias", &bias) || get_flag(sp, "relu", &relu))
        return -1;
    if (put_placeholder(sp, b, "input", "X", 2, (int64_t[]){M, K}) ||
        put_placeholder(sp, b, "const", "W", 2, (int64_t[]){N, K}) ||
        (bias && put_placeholder(sp, b, "const", "b", 1, &N)) ||
        put_head(sp, b, "dense", 2, axes, (int64_t[]){M, N}))
        return -1;
    put_reduce(b, "sum", 1, (const char *[]){"k"}, &K);
    at_buf_puts(b, "X[i, k] * W[j, k])\n");
    return put_epilogue(sp, b, bias, relu, 2, axes, (int64_t[]){M, N}, 1, "dense");
}

/* ---- convolution ---------------------------------------------------------------------- */

typedef struct conv_params {
    int nhwc;
    int in_nchw; /* an NHWC convolution whose input X is NCHW (in_layout=NCHW) */
    int64_t N, C, H, W, K, R, S, sh, sw, ph, pw, dh, dw, groups;
    int bias, relu;
} conv_params;

/* stride/pad/dilation, each also as its per-dimension aliases */
static int get_window(spec *sp, int64_t *sh, int64_t *sw, int64_t *ph, int64_t *pw, int64_t *dh,
                      int64_t *dw)
{
    if (get_int_or(sp, "stride", "sh", "sw", 1, sh) ||
        get_int_or(sp, "stride", "sw", "sh", 1, sw) || get_int_or(sp, "pad", "ph", "pw", 0, ph) ||
        get_int_or(sp, "pad", "pw", "ph", 0, pw))
        return -1;
    if (dh == NULL)
        return 0;
    return get_int_or(sp, "dilation", "dh", "dw", 1, dh) ||
                   get_int_or(sp, "dilation", "dw", "dh", 1, dw)
               ? -1
               : 0;
}

/* Output extent of a window of 'span' (dilated kernel) sliding with stride 'st' over
** 'in' + 2 * 'pad'; fails when the window does not fit once. */
static int out_extent(spec *sp, const char *dim, int64_t in, int64_t pad, int64_t span,
                      int64_t st, int64_t *out)
{
    if (span > in + 2 * pad)
        return fail(sp,
                    "the %s of the (dilated) kernel, %lld, exceeds the padded input %s "
                    "%lld: the output would be empty",
                    dim, (long long)span, dim, (long long)(in + 2 * pad));
    *out = (in + 2 * pad - span) / st + 1;
    return 0;
}

/* The padding tensor "pad" of X (dims 'xd', spatial dims at positions hp, hp + 1, padded by
** ph, pw), filled with 'fill' outside X. */
static int put_pad(spec *sp, at_buf *b, int rank, const char *const *axes, const int64_t *xd,
                   int hp, int64_t ph, int64_t pw, const char *fill)
{
    int64_t pd[4];
    char ih[48], iw[48];
    const char *idx[4];
    memcpy(pd, xd, sizeof pd);
    pd[hp] += 2 * ph;
    pd[hp + 1] += 2 * pw;
    if (put_head(sp, b, "pad", rank, axes, pd))
        return -1;
    at_buf_puts(b, "select(");
    if (ph > 0)
        at_buf_printf(b, "%s >= %lld && %s < %lld", axes[hp], (long long)ph, axes[hp],
                      (long long)(ph + xd[hp]));
    if (pw > 0)
        at_buf_printf(b, "%s%s >= %lld && %s < %lld", ph > 0 ? " && " : "", axes[hp + 1],
                      (long long)pw, axes[hp + 1], (long long)(pw + xd[hp + 1]));
    at_buf_puts(b, ", ");
    for (int i = 0; i < rank; i++)
        idx[i] = axes[i];
    if (ph > 0)
        snprintf(ih, sizeof ih, "%s - %lld", axes[hp], (long long)ph), idx[hp] = ih;
    if (pw > 0)
        snprintf(iw, sizeof iw, "%s - %lld", axes[hp + 1], (long long)pw), idx[hp + 1] = iw;
    put_load(b, "X", rank, idx);
    at_buf_printf(b, ", %s)\n", fill);
    return 0;
}

static int conv_emit(spec *sp, at_buf *b, const conv_params *p)
{
    int64_t OH = 0, OW = 0, Cg, Kg;
    int64_t xd[4], wd[4], od[4], rext[3];
    const char *raxes[3], *xidx[4], *widx[4], *oaxes[4], *src;
    char ic[64], ih[64], iw[64];
    int xnhwc = p->nhwc && !p->in_nchw;
    int nr = 0, hp = xnhwc ? 1 : 2; /* position of h in X and pad */
    int has_c, has_r, has_s;

    if (p->C % p->groups != 0 || p->K % p->groups != 0)
        return fail(sp, "groups (%lld) must divide C (%lld) and K (%lld)", (long long)p->groups,
                    (long long)p->C, (long long)p->K);
    Cg = p->C / p->groups;
    Kg = p->K / p->groups;
    if (out_extent(sp, "height", p->H, p->ph, p->dh * (p->R - 1) + 1, p->sh, &OH) ||
        out_extent(sp, "width", p->W, p->pw, p->dw * (p->S - 1) + 1, p->sw, &OW))
        return -1;

    /* shapes: NCHW X[N,C,H,W] W[K,C/g,R,S] out[N,K,OH,OW]; NHWC X[N,H,W,C] W[R,S,C/g,K]
    ** out[N,OH,OW,K] */
    if (p->nhwc) {
        if (xnhwc)
            memcpy(xd, (int64_t[]){p->N, p->H, p->W, p->C}, sizeof xd);
        else
            memcpy(xd, (int64_t[]){p->N, p->C, p->H, p->W}, sizeof xd);
        memcpy(wd, (int64_t[]){p->R, p->S, Cg, p->K}, sizeof wd);
        memcpy(od, (int64_t[]){p->N, OH, OW, p->K}, sizeof od);
    } else {
        memcpy(xd, (int64_t[]){p->N, p->C, p->H, p->W}, sizeof xd);
        memcpy(wd, (int64_t[]){p->K, Cg, p->R, p->S}, sizeof wd);
        memcpy(od, (int64_t[]){p->N, p->K, OH, OW}, sizeof od);
    }
    if (put_placeholder(sp, b, "input", "X", 4, xd) || put_placeholder(sp, b, "const", "W", 4, wd) ||
        (p->bias && put_placeholder(sp, b, "const", "b", 1, &p->K)))
        return -1;
    src = "X";
    if (p->ph > 0 || p->pw > 0) {
        const char *paxes[4] = {"n", "c", "h", "w"};
        if (xnhwc)
            paxes[1] = "h", paxes[2] = "w", paxes[3] = "c";
        if (put_pad(sp, b, 4, paxes, xd, hp, p->ph, p->pw, "0.0"))
            return -1;
        src = "pad";
    }

    /* reduce axes of extent 1 are left out (their index is 0); at least one stays */
    has_c = Cg > 1;
    has_r = p->R > 1;
    has_s = p->S > 1;
    if (!has_c && !has_r && !has_s)
        has_c = 1;
    if (!xnhwc && has_c)
        raxes[nr] = "c", rext[nr++] = Cg;
    if (has_r)
        raxes[nr] = "r", rext[nr++] = p->R;
    if (has_s)
        raxes[nr] = "s", rext[nr++] = p->S;
    if (xnhwc && has_c)
        raxes[nr] = "c", rext[nr++] = Cg;

    /* input channel of (k, c): group k / Kg, channel c within it */
    if (p->groups == 1) {
        snprintf(ic, sizeof ic, "%s", has_c ? "c" : "0");
    } else {
        char g[32];
        int n;
        if (Kg == 1)
            snprintf(g, sizeof g, "k");
        else
            snprintf(g, sizeof g, "k / %lld", (long long)Kg);
        n = Cg == 1 ? snprintf(ic, sizeof ic, "%s", g)
                    : snprintf(ic, sizeof ic, "%s * %lld", g, (long long)Cg);
        if (has_c)
            snprintf(ic + n, sizeof ic - (size_t)n, " + c");
    }
    lin2(ih, sizeof ih, "h", p->sh, has_r ? "r" : NULL, p->dh);
    lin2(iw, sizeof iw, "w", p->sw, has_s ? "s" : NULL, p->dw);
    if (p->nhwc) {
        oaxes[0] = "n", oaxes[1] = "h", oaxes[2] = "w", oaxes[3] = "k";
        if (xnhwc)
            xidx[0] = "n", xidx[1] = ih, xidx[2] = iw, xidx[3] = ic;
        else
            xidx[0] = "n", xidx[1] = ic, xidx[2] = ih, xidx[3] = iw;
        widx[0] = has_r ? "r" : "0", widx[1] = has_s ? "s" : "0";
        widx[2] = has_c ? "c" : "0", widx[3] = "k";
    } else {
        oaxes[0] = "n", oaxes[1] = "k", oaxes[2] = "h", oaxes[3] = "w";
        xidx[0] = "n", xidx[1] = ic, xidx[2] = ih, xidx[3] = iw;
        widx[0] = "k", widx[1] = has_c ? "c" : "0";
        widx[2] = has_r ? "r" : "0", widx[3] = has_s ? "s" : "0";
    }
    if (put_head(sp, b, "conv", 4, oaxes, od))
        return -1;
    put_reduce(b, "sum", nr, raxes, rext);
    put_load(b, src, 4, xidx);
    at_buf_puts(b, " * ");
    put_load(b, "W", 4, widx);
    at_buf_puts(b, ")\n");
    return put_epilogue(sp, b, p->bias, p->relu, 4, oaxes, od, p->nhwc ? 3 : 1, "conv");
}

static int gen_conv2d(spec *sp, at_buf *b)
{
    conv_params p;
    p.in_nchw = 0;
    if (get_layout(sp, "layout", &p.nhwc))
        return -1;
    if (given(sp, "in_layout")) {
        int in_nhwc;
        if (get_layout(sp, "in_layout", &in_nhwc))
            return -1;
        if (in_nhwc && !p.nhwc)
            return fail(sp, "in_layout=NHWC needs layout=NHWC (an NCHW convolution reads NCHW)");
        p.in_nchw = p.nhwc && !in_nhwc;
    }
    if (get_int(sp, "N", 1, &p.N) ||
        get_int(sp, "C", 1, &p.C) || get_int(sp, "H", 1, &p.H) || get_int(sp, "W", 1, &p.W) ||
        get_int(sp, "K", 1, &p.K) || get_int(sp, "R", 1, &p.R) || get_int(sp, "S", 1, &p.S) ||
        get_window(sp, &p.sh, &p.sw, &p.ph, &p.pw, &p.dh, &p.dw) ||
        get_int(sp, "groups", 1, &p.groups) || get_flag(sp, "bias", &p.bias) ||
        get_flag(sp, "relu", &p.relu))
        return -1;
    return conv_emit(sp, b, &p);
}

/* ---- Winograd F(m x m, 3 x 3) ----------------------------------------------------------
**
** A 3x3 stride-1 pad-1 NHWC convolution as three tasks: the input transform (one a x a
** tile of the padded input per m x m output tile, a = m + 2, V = Bt d Bt^T), a batched
** product per tile position (e, f) with the transformed weight U = G w G^T (made once at
** load, kn_winograd_weight), and the output transform (Y = At M At^T, written back as the
** convolution's output, then its bias and relu).  The matrices are constant inputs (Bt,
** At: weights), so the transforms are ordinary reductions of 'a' terms the search tunes
** like any other. */

static int get_wino_m(spec *sp, int64_t *m)
{
    if (get_int(sp, "m", 2, m))
        return -1;
    if (*m != 2 && *m != 4)
        return fail(sp, "m must be 2 or 4 (F(2x2,3x3) or F(4x4,3x3)), got %lld", (long long)*m);
    return 0;
}

static int gen_winograd_input(spec *sp, at_buf *b)
{
    int64_t N, H, W, C, m, a, TH, TW, P;
    if (get_int(sp, "N", 1, &N) || get_int(sp, "H", 1, &H) || get_int(sp, "W", 1, &W) ||
        get_int(sp, "C", 1, &C) || get_wino_m(sp, &m))
        return -1;
    a = m + 2;
    TH = (H + m - 1) / m;
    TW = (W + m - 1) / m;
    P = N * TH * TW;
    if (put_placeholder(sp, b, "input", "X", 4, (int64_t[]){N, H, W, C}) ||
        put_placeholder(sp, b, "const", "Bt", 2, (int64_t[]){a, a}) ||
        put_head(sp, b, "pad", 4, (const char *[]){"n", "h", "w", "c"},
                 (int64_t[]){N, TH * m + 2, TW * m + 2, C}))
        return -1;
    at_buf_printf(b, "select(h >= 1 && h < %lld && w >= 1 && w < %lld, X[n, h - 1, w - 1, c], "
                  "0.0)\n", (long long)(H + 1), (long long)(W + 1));
    if (put_head(sp, b, "T", 4, (const char *[]){"e", "j", "p", "c"}, (int64_t[]){a, a, P, C}))
        return -1;
    put_reduce(b, "sum", 1, (const char *[]){"i"}, &a);
    if (N == 1)
        at_buf_printf(b, "pad[0, p / %lld * %lld + i, p %% %lld * %lld + j, c] * Bt[e, i])\n",
                      (long long)TW, (long long)m, (long long)TW, (long long)m);
    else
        at_buf_printf(b, "pad[p / %lld, p / %lld %% %lld * %lld + i, p %% %lld * %lld + j, c] * "
                      "Bt[e, i])\n", (long long)(TH * TW), (long long)TW, (long long)TH,
                      (long long)m, (long long)TW, (long long)m);
    if (put_head(sp, b, "V", 4, (const char *[]){"e", "f", "p", "c"}, (int64_t[]){a, a, P, C}))
        return -1;
    put_reduce(b, "sum", 1, (const char *[]){"j"}, &a);
    at_buf_puts(b, "T[e, j, p, c] * Bt[f, j])\n");
    return 0;
}

static int gen_winograd_gemm(spec *sp, at_buf *b)
{
    int64_t P, C, K, m, a;
    if (get_int(sp, "P", 1, &P) || get_int(sp, "C", 1, &C) || get_int(sp, "K", 1, &K) ||
        get_wino_m(sp, &m))
        return -1;
    a = m + 2;
    if (put_placeholder(sp, b, "input", "V", 4, (int64_t[]){a, a, P, C}) ||
        put_placeholder(sp, b, "const", "U", 4, (int64_t[]){a, a, C, K}) ||
        put_head(sp, b, "M", 4, (const char *[]){"e", "f", "p", "k"}, (int64_t[]){a, a, P, K}))
        return -1;
    put_reduce(b, "sum", 1, (const char *[]){"c"}, &C);
    at_buf_puts(b, "V[e, f, p, c] * U[e, f, c, k])\n");
    return 0;
}

static int gen_winograd_output(spec *sp, at_buf *b)
{
    int64_t N, H, W, K, m, a, TH, TW, P;
    int bias, relu;
    const char *axes[4] = {"n", "h", "w", "k"};
    if (get_int(sp, "N", 1, &N) || get_int(sp, "H", 1, &H) || get_int(sp, "W", 1, &W) ||
        get_int(sp, "K", 1, &K) || get_wino_m(sp, &m) || get_flag(sp, "bias", &bias) ||
        get_flag(sp, "relu", &relu))
        return -1;
    a = m + 2;
    TH = (H + m - 1) / m;
    TW = (W + m - 1) / m;
    P = N * TH * TW;
    if (put_placeholder(sp, b, "input", "M", 4, (int64_t[]){a, a, P, K}) ||
        put_placeholder(sp, b, "const", "At", 2, (int64_t[]){m, a}) ||
        (bias && put_placeholder(sp, b, "const", "b", 1, &K)) ||
        put_head(sp, b, "Y1", 4, (const char *[]){"q", "f", "p", "k"}, (int64_t[]){m, a, P, K}))
        return -1;
    put_reduce(b, "sum", 1, (const char *[]){"e"}, &a);
    at_buf_puts(b, "M[e, f, p, k] * At[q, e])\n");
    if (put_head(sp, b, "Y", 4, (const char *[]){"q", "g", "p", "k"}, (int64_t[]){m, m, P, K}))
        return -1;
    put_reduce(b, "sum", 1, (const char *[]){"f"}, &a);
    at_buf_puts(b, "Y1[q, f, p, k] * At[g, f])\n");
    if (put_head(sp, b, "conv", 4, axes, (int64_t[]){N, H, W, K}))
        return -1;
    if (N == 1)
        at_buf_printf(b, "Y[h %% %lld, w %% %lld, h / %lld * %lld + w / %lld, k]\n", (long long)m,
                      (long long)m, (long long)m, (long long)TW, (long long)m);
    else
        at_buf_printf(b, "Y[h %% %lld, w %% %lld, n * %lld + h / %lld * %lld + w / %lld, k]\n",
                      (long long)m, (long long)m, (long long)(TH * TW), (long long)m,
                      (long long)TW, (long long)m);
    return put_epilogue(sp, b, bias, relu, 4, axes, (int64_t[]){N, H, W, K}, 3, "conv");
}

/* The matrices of F(m x m, 3 x 3) (Lavin and Gray; points 0, -1, 1 for m = 2 and 0, 1, -1,
** 2, -2 for m = 4): Bt[a][a], G[a][3], At[m][a], row-major. */
static const float wino_bt2[16] = {1, 0, -1, 0, 0, 1, 1, 0, 0, -1, 1, 0, 0, 1, 0, -1};
static const float wino_g2[12] = {1, 0, 0, 0.5f, 0.5f, 0.5f, 0.5f, -0.5f, 0.5f, 0, 0, 1};
static const float wino_at2[8] = {1, 1, 1, 0, 0, 1, -1, -1};
static const float wino_bt4[36] = {4, 0, -5, 0,  1, 0, 0, -4, -4, 1,  1, 0,
                                   0, 4, -4, -1, 1, 0, 0, -2, -1, 2,  1, 0,
                                   0, 2, -1, -2, 1, 0, 0, 4,  0,  -5, 0, 1};
static const float wino_g4[18] = {1.0f / 4,  0,         0,         -1.0f / 6, -1.0f / 6, -1.0f / 6,
                                  -1.0f / 6, 1.0f / 6,  -1.0f / 6, 1.0f / 24, 1.0f / 12, 1.0f / 6,
                                  1.0f / 24, -1.0f / 12, 1.0f / 6, 0,         0,         1};
static const float wino_at4[24] = {1, 1, 1, 1, 1, 0, 0, 1, -1, 2, -2, 0,
                                   0, 1, 1, 4, 4, 0, 0, 1, -1, 8, -8, 1};

at_err kn_winograd_matrices(int m, const float **bt, const float **g, const float **at)
{
    if (m != 2 && m != 4)
        return AT_EINVAL;
    *bt = m == 2 ? wino_bt2 : wino_bt4;
    *g = m == 2 ? wino_g2 : wino_g4;
    *at = m == 2 ? wino_at2 : wino_at4;
    return AT_OK;
}

at_err kn_winograd_weight(int m, int64_t C, int64_t K, const float *w, float *u)
{
    const float *bt, *g, *at;
    int a = m + 2;
    if (kn_winograd_matrices(m, &bt, &g, &at) != AT_OK)
        return AT_EINVAL;
    /* U[e][f][c][k] = sum_r sum_s G[e][r] w[r][s][c][k] G[f][s], in double */
    for (int e = 0; e < a; e++)
        for (int f = 0; f < a; f++)
            for (int64_t c = 0; c < C; c++)
                for (int64_t k = 0; k < K; k++) {
                    double acc = 0;
                    for (int r = 0; r < 3; r++)
                        for (int s = 0; s < 3; s++)
                            acc += (double)g[e * 3 + r] * g[f * 3 + s] *
                                   w[((r * 3 + s) * C + c) * K + k];
                    u[(((int64_t)e * a + f) * C + c) * K + k] = (float)acc;
                }
    return AT_OK;
}

static int gen_depthwise_conv2d(spec *sp, at_buf *b)
{
    conv_params p;
    p.in_nchw = 0;
    if (get_layout(sp, "layout", &p.nhwc) || get_int(sp, "N", 1, &p.N) ||
        get_int(sp, "C", 1, &p.C) || get_int(sp, "H", 1, &p.H) || get_int(sp, "W", 1, &p.W) ||
        get_int(sp, "R", 1, &p.R) || get_int(sp, "S", 1, &p.S) ||
        get_window(sp, &p.sh, &p.sw, &p.ph, &p.pw, &p.dh, &p.dw) ||
        get_flag(sp, "bias", &p.bias) || get_flag(sp, "relu", &p.relu))
        return -1;
    p.K = p.groups = p.C;
    return conv_emit(sp, b, &p);
}

/* ---- pooling -------------------------------------------------------------------------- */

static int pool_emit(spec *sp, at_buf *b, int is_max)
{
    int64_t N = 0, C = 0, H = 0, W = 0, kh = 0, kw = 0, sh = 0, sw = 0, ph = 0, pw = 0;
    int64_t OH = 0, OW = 0, xd[4], od[4];
    const char *axes[4] = {"n", "c", "h", "w"}, *raxes[2] = {"r", "s"}, *idx[4];
    char ih[48], iw[48];
    const char *src = "X";
    int nhwc = 0, hp;
    if (get_layout(sp, "layout", &nhwc) || get_int(sp, "N", 1, &N) || get_int(sp, "C", 1, &C) ||
        get_int(sp, "H", 1, &H) || get_int(sp, "W", 1, &W) ||
        get_int_or(sp, "kernel", "kh", "kw", 1, &kh) ||
        get_int_or(sp, "kernel", "kw", "kh", 1, &kw) ||
        get_window(sp, &sh, &sw, &ph, &pw, NULL, NULL))
        return -1;
    /* every window then holds at least one element of X */
    if (2 * ph > kh || 2 * pw > kw)
        return fail(sp, "padding %lld must be at most half the kernel %lld",
                    (long long)(2 * ph > kh ? ph : pw), (long long)(2 * ph > kh ? kh : kw));
    if (out_extent(sp, "height", H, ph, kh, sh, &OH) || out_extent(sp, "width", W, pw, kw, sw, &OW))
        return -1;
    hp = nhwc ? 1 : 2; /* position of h */
    if (nhwc) {
        axes[1] = "h", axes[2] = "w", axes[3] = "c";
        memcpy(xd, (int64_t[]){N, H, W, C}, sizeof xd);
        memcpy(od, (int64_t[]){N, OH, OW, C}, sizeof od);
    } else {
        memcpy(xd, (int64_t[]){N, C, H, W}, sizeof xd);
        memcpy(od, (int64_t[]){N, C, OH, OW}, sizeof od);
    }
    if (put_placeholder(sp, b, "input", "X", 4, xd))
        return -1;
    if (ph > 0 || pw > 0) {
        if (put_pad(sp, b, 4, axes, xd, hp, ph, pw, is_max ? "-inf" : "0.0"))
            return -1;
        src = "pad";
    }
    if (put_head(sp, b, is_max ? "out" : "pool_sum", 4, axes, od))
        return -1;
    put_reduce(b, is_max ? "max" : "sum", 2, raxes, (int64_t[]){kh, kw});
    for (int d = 0; d < 4; d++)
        idx[d] = axes[d];
    idx[hp] = lin2(ih, sizeof ih, "h", sh, "r", 1);
    idx[hp + 1] = lin2(iw, sizeof iw, "w", sw, "s", 1);
    put_load(b, src, 4, idx);
    at_buf_puts(b, ")\n");
    if (!is_max) {
        if (put_head(sp, b, "out", 4, axes, od))
            return -1;
        put_load(b, "pool_sum", 4, axes);
        at_buf_puts(b, " / ");
        put_float(b, (double)(kh * kw));
        at_buf_putc(b, '\n');
    }
    return 0;
}

static int gen_max_pool2d(spec *sp, at_buf *b)
{
    return pool_emit(sp, b, 1);
}

static int gen_avg_pool2d(spec *sp, at_buf *b)
{
    return pool_emit(sp, b, 0);
}

static int gen_global_avg_pool(spec *sp, at_buf *b)
{
    int64_t N, C, H, W;
    const char *axes[2] = {"n", "c"};
    int nhwc = 0;
    if (get_layout(sp, "layout", &nhwc) || get_int(sp, "N", 1, &N) || get_int(sp, "C", 1, &C) ||
        get_int(sp, "H", 1, &H) || get_int(sp, "W", 1, &W))
        return -1;
    if (put_placeholder(sp, b, "input", "X", 4,
                        nhwc ? (int64_t[]){N, H, W, C} : (int64_t[]){N, C, H, W}) ||
        put_head(sp, b, "pool_sum", 2, axes, (int64_t[]){N, C}))
        return -1;
    put_reduce(b, "sum", 2, (const char *[]){"h", "w"}, (int64_t[]){H, W});
    at_buf_puts(b, nhwc ? "X[n, h, w, c])\n" : "X[n, c, h, w])\n");
    if (put_head(sp, b, "out", 2, axes, (int64_t[]){N, C}))
        return -1;
    at_buf_puts(b, "pool_sum[n, c] / ");
    put_float(b, (double)H * (double)W);
    at_buf_putc(b, '\n');
    return 0;
}

/* ---- normalisations ------------------------------------------------------------------ */

static const char *const axis_names[MAX_RANK] = {"i0", "i1", "i2", "i3", "i4", "i5"};

/* Axis names for a tensor of rank 'rank' reduced over its last axis: i0, i1, ..., then j. */
static void row_axes(int rank, const char **axes)
{
    for (int i = 0; i < rank - 1; i++)
        axes[i] = axis_names[i];
    axes[rank - 1] = "j";
}

static int gen_softmax(spec *sp, at_buf *b)
{
    int64_t d[MAX_RANK];
    int rank;
    const char *axes[MAX_RANK];
    if (get_rows_shape(sp, d, &rank))
        return -1;
    row_axes(rank, axes);
    if (put_placeholder(sp, b, "input", "X", rank, d) ||
        put_head(sp, b, "xmax", rank - 1, axes, d))
        return -1;
    put_reduce(b, "max", 1, &axes[rank - 1], &d[rank - 1]);
    put_load(b, "X", rank, axes);
    at_buf_puts(b, ")\n");
    if (put_head(sp, b, "xexp", rank, axes, d))
        return -1;
    at_buf_puts(b, "exp(");
    put_load(b, "X", rank, axes);
    at_buf_puts(b, " - ");
    put_load(b, "xmax", rank - 1, axes);
    at_buf_puts(b, ")\n");
    if (put_head(sp, b, "xsum", rank - 1, axes, d))
        return -1;
    put_reduce(b, "sum", 1, &axes[rank - 1], &d[rank - 1]);
    put_load(b, "xexp", rank, axes);
    at_buf_puts(b, ")\n");
    if (put_head(sp, b, "out", rank, axes, d))
        return -1;
    put_load(b, "xexp", rank, axes);
    at_buf_puts(b, " / ");
    put_load(b, "xsum", rank - 1, axes);
    at_buf_putc(b, '\n');
    return 0;
}

static int gen_layer_norm(spec *sp, at_buf *b)
{
    int64_t d[MAX_RANK];
    int rank;
    double eps = 0;
    const char *axes[MAX_RANK];
    at_buf x, dev;
    int rc = -1;
    if (get_rows_shape(sp, d, &rank) || get_float(sp, "eps", &eps))
        return -1;
    row_axes(rank, axes);
    at_buf_init(&x);
    at_buf_init(&dev);
    put_load(&x, "X", rank, axes);
    at_buf_printf(&dev, "%s - ", x.data ? x.data : "");
    put_load(&dev, "mean", rank - 1, axes);
    if (x.err || dev.err) {
        b->err = AT_ENOMEM; /* the caller reports it */
        rc = 0;
        goto out;
    }
    if (put_placeholder(sp, b, "input", "X", rank, d) ||
        put_placeholder(sp, b, "const", "gamma", 1, &d[rank - 1]) ||
        put_placeholder(sp, b, "const", "beta", 1, &d[rank - 1]) ||
        put_head(sp, b, "mean", rank - 1, axes, d))
        goto out;
    put_reduce(b, "sum", 1, &axes[rank - 1], &d[rank - 1]);
    at_buf_printf(b, "%s / ", x.data);
    put_float(b, (double)d[rank - 1]);
    at_buf_puts(b, ")\n");
    if (put_head(sp, b, "var", rank - 1, axes, d))
        goto out;
    put_reduce(b, "sum", 1, &axes[rank - 1], &d[rank - 1]);
    at_buf_printf(b, "(%s) * (%s) / ", dev.data, dev.data);
    put_float(b, (double)d[rank - 1]);
    at_buf_puts(b, ")\n");
    if (put_head(sp, b, "out", rank, axes, d))
        goto out;
    at_buf_printf(b, "(%s) / sqrt(", dev.data);
    put_load(b, "var", rank - 1, axes);
    at_buf_puts(b, " + ");
    put_float(b, eps);
    at_buf_puts(b, ") * gamma[j] + beta[j]\n");
    rc = 0;
out:
    at_buf_fini(&x);
    at_buf_fini(&dev);
    return rc;
}

/* ---- elementwise and layout ------------------------------------------------------------ */

static void elem_axes(int rank, const char **axes)
{
    for (int i = 0; i < rank; i++)
        axes[i] = axis_names[i];
}

/* out = A op B (binary) or f(X) (unary): 'pre', operands, 'post' around the loads. */
static int elem_emit(spec *sp, at_buf *b, int binary, const char *pre, const char *mid,
                     const char *post)
{
    int64_t d[MAX_RANK];
    int rank;
    const char *axes[MAX_RANK];
    if (get_shape(sp, "shape", d, &rank))
        return -1;
    elem_axes(rank, axes);
    if (put_placeholder(sp, b, "input", binary ? "A" : "X", rank, d) ||
        (binary && put_placeholder(sp, b, "input", "B", rank, d)) ||
        put_head(sp, b, "out", rank, axes, d))
        return -1;
    at_buf_puts(b, pre);
    put_load(b, binary ? "A" : "X", rank, axes);
    at_buf_puts(b, mid);
    if (binary || *mid)
        put_load(b, binary ? "B" : "X", rank, axes);
    at_buf_puts(b, post);
    at_buf_putc(b, '\n');
    return 0;
}

static int gen_add(spec *sp, at_buf *b)
{
    return elem_emit(sp, b, 1, "", " + ", "");
}

static int gen_mul(spec *sp, at_buf *b)
{
    return elem_emit(sp, b, 1, "", " * ", "");
}

static int gen_relu(spec *sp, at_buf *b)
{
    return elem_emit(sp, b, 0, "max(", "", ", 0.0)");
}

static int gen_gelu(spec *sp, at_buf *b)
{
    /* 1.4142135 is sqrt(2) rounded to float32 as the printer writes it */
    return elem_emit(sp, b, 0, "0.5 * ", " * (1.0 + erf(", " / 1.4142135))");
}

static int gen_transpose(spec *sp, at_buf *b)
{
    int64_t d[MAX_RANK], perm[MAX_RANK], od[MAX_RANK];
    int rank, prank, seen = 0;
    const char *axes[MAX_RANK], *idx[MAX_RANK];
    const char *pv = given(sp, "perm");
    if (get_shape(sp, "shape", d, &rank))
        return -1;
    if (pv == NULL) {
        char tmp[VAL_MAX];
        size_t n = 0;
        for (int i = 0; i < rank; i++) {
            perm[i] = rank - 1 - i;
            n += (size_t)snprintf(tmp + n, sizeof tmp - n, "%s%d", i ? "x" : "", rank - 1 - i);
        }
        note(sp, "perm", tmp);
    } else {
        if (parse_dims(pv, 0, perm, &prank) != 0 || prank != rank)
            goto bad;
        for (int i = 0; i < rank; i++) {
            if (perm[i] >= rank || (seen & (1 << perm[i])))
                goto bad;
            seen |= 1 << perm[i];
        }
        note(sp, "perm", pv);
    }
    elem_axes(rank, axes);
    for (int i = 0; i < rank; i++) {
        od[i] = d[perm[i]];
        idx[perm[i]] = axes[i];
    }
    if (put_placeholder(sp, b, "input", "X", rank, d) || put_head(sp, b, "out", rank, axes, od))
        return -1;
    put_load(b, "X", rank, idx);
    at_buf_putc(b, '\n');
    return 0;
bad:
    return fail(sp, "perm must be a permutation of 0..%d joined by 'x' (e.g. %s), got '%s'",
                rank - 1, rank == 1 ? "0" : rank == 2 ? "1x0" : "2x0x1", pv);
}

/* ---- public --------------------------------------------------------------------------- */

at_err kn_op_text(const char *text, char **out, char *errmsg, size_t errmsg_size)
{
    spec sp;
    at_buf b;
    char local[8];
    at_err err = AT_OK;
    *out = NULL;
    if (errmsg == NULL || errmsg_size == 0)
        errmsg = local, errmsg_size = sizeof local;
    errmsg[0] = 0;
    memset(&sp, 0, sizeof sp);
    sp.err = errmsg;
    sp.err_size = errmsg_size;
    if (spec_parse(&sp, text) != 0)
        return AT_EINVAL;
    at_buf_init(&sp.resolved);
    at_buf_init(&b);
    if (sp.def->gen(&sp, &b) != 0) {
        err = AT_EINVAL;
        goto done;
    }
    if (b.err || sp.resolved.err) {
        snprintf(errmsg, errmsg_size, "%s: out of memory", sp.info->name);
        err = AT_ENOMEM;
        goto done;
    }
    /* the resolved parameters go first, as a comment */
    {
        at_buf head;
        at_buf_init(&head);
        at_buf_printf(&head, "# %s:%s\n", sp.info->name, sp.resolved.data ? sp.resolved.data : "");
        at_buf_put(&head, b.data, b.len);
        if (head.err) {
            at_buf_fini(&head);
            snprintf(errmsg, errmsg_size, "%s: out of memory", sp.info->name);
            err = AT_ENOMEM;
            goto done;
        }
        *out = at_buf_take(&head);
    }
done:
    at_buf_fini(&b);
    at_buf_fini(&sp.resolved);
    return err;
}

at_err kn_op_build(const char *spec_text, ss_dag **out, char *errmsg, size_t errmsg_size)
{
    char *text, perr[256], local[8];
    at_err err;
    *out = NULL;
    if (errmsg == NULL || errmsg_size == 0)
        errmsg = local, errmsg_size = sizeof local;
    if ((err = kn_op_text(spec_text, &text, errmsg, errmsg_size)) != AT_OK)
        return err;
    err = ss_dag_parse(text, strlen(text), out, perr, sizeof perr);
    if (err != AT_OK) {
        /* out of memory, or a bug here: the generators write only valid DAGs */
        snprintf(errmsg, errmsg_size, "%s: the generated DAG does not parse: %s", spec_text,
                 perr);
        if (err != AT_ENOMEM)
            at_log_error("kn_op_build: %s\n%s", errmsg, text);
    }
    at_free(text);
    return err;
}
