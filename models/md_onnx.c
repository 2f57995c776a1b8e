/* models/md_onnx.c -- ONNX bytes into a md_graph.
**
** The decoder is protobuf-c's, generated at build time by protoc-c from the schema that
** Debian's libonnx-dev ships (/usr/include/onnx/onnx.proto; see the Makefile).  The file is
** outside data: before protobuf-c sees it, a walk over the wire format (driven by the
** generated descriptors) refuses nesting deeper than MAX_DEPTH, since protobuf-c recurses
** once per nested message and a small hostile file could exhaust the stack.  Every count,
** size, name and index the file gives is checked before use; allocations go through
** at_malloc (so the tests' allocation limit reaches them).
**
** What is read: the default domain's opset (MD_OPSET_MIN..MD_OPSET_MAX), the graph's
** initializers (float, double, float16, and the integer types, stored as float32 or
** int64), inputs (an input with an initializer of the same name is a weight), outputs,
** value_info shapes (used for the outputs of unsupported nodes) and the nodes with their
** attributes.  Sparse initializers, external data and string tensors are refused. */
#include "models/md_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "onnx.pb-c.h"

#define MD_OPSET_MIN 7
#define MD_OPSET_MAX 21
#define MAX_DEPTH 64

/* ONNX TensorProto.DataType numbers */
enum { DT_FLOAT = 1, DT_UINT8 = 2, DT_INT8 = 3, DT_UINT16 = 4, DT_INT16 = 5, DT_INT32 = 6,
       DT_INT64 = 7, DT_STRING = 8, DT_BOOL = 9, DT_FLOAT16 = 10, DT_DOUBLE = 11,
       DT_UINT32 = 12, DT_UINT64 = 13 };

static void *pb_alloc(void *data, size_t size)
{
    (void)data;
    return at_malloc(size ? size : 1);
}

static void pb_free(void *data, void *p)
{
    (void)data;
    at_free(p);
}

static ProtobufCAllocator allocator = {pb_alloc, pb_free, NULL};

/* ---- wire-format pre-check ---- */

static int varint(const uint8_t *p, size_t n, size_t *i, uint64_t *v)
{
    uint64_t r = 0;
    for (int s = 0; s < 64 && *i < n; s += 7) {
        uint8_t b = p[(*i)++];
        r |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80)) {
            *v = r;
            return 1;
        }
    }
    return 0;
}

/* Deepest nesting of messages in p[0..n) read as message 'd': -1 when deeper than
** MAX_DEPTH.  A malformed encoding stops the walk (protobuf-c reports it). */
static int wire_depth_ok(const uint8_t *p, size_t n, const ProtobufCMessageDescriptor *d,
                         int depth)
{
    size_t i = 0;
    if (depth > MAX_DEPTH)
        return -1;
    while (i < n) {
        uint64_t tag, len;
        switch (varint(p, n, &i, &tag) ? (int)(tag & 7) : -1) {
        case 0:
            if (!varint(p, n, &i, &len))
                return 0;
            break;
        case 1:
            if (n - i < 8)
                return 0;
            i += 8;
            break;
        case 5:
            if (n - i < 4)
                return 0;
            i += 4;
            break;
        case 2: {
            const ProtobufCFieldDescriptor *f;
            if (!varint(p, n, &i, &len) || len > n - i)
                return 0;
            f = tag >> 3 <= UINT32_MAX ? protobuf_c_message_descriptor_get_field(
                                             d, (unsigned)(tag >> 3))
                                       : NULL;
            if (f && f->type == PROTOBUF_C_TYPE_MESSAGE &&
                wire_depth_ok(p + i, (size_t)len, f->descriptor, depth + 1) < 0)
                return -1;
            i += (size_t)len;
            break;
        }
        default:
            return 0;
        }
    }
    return 0;
}

/* ---- conversion ---- */

typedef struct conv {
    md_graph *g;
    char *errmsg;
    size_t errmsg_size;
    int neg_dim;         /* value_shape: the first dimension given as a negative size, or -1 */
    int64_t neg_value;
    const char *params[MD_MAX_RANK]; /* value_shape: each dimension's symbolic name, or NULL */
    const md_model_opts *opts;       /* the values of symbolic dimensions */
    at_sha256 sig;                   /* the structure's hash (md_graph.sig) */
} conv;

static at_err fail(conv *c, at_err err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static at_err fail(conv *c, at_err err, const char *fmt, ...)
{
    char text[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    snprintf(c->errmsg, c->errmsg_size, "%s: %s", c->g->name, text);
    return err;
}

static const char *or_empty(const char *s)
{
    return s ? s : "";
}

static const char *dtype_name(int32_t t)
{
    static const char *const names[] = {"undefined", "float", "uint8", "int8", "uint16",
                                        "int16", "int32", "int64", "string", "bool",
                                        "float16", "double", "uint32", "uint64",
                                        "complex64", "complex128", "bfloat16"};
    return t >= 0 && t < (int32_t)AT_ARRAY_LEN(names) ? names[t] : "unknown";
}

static float half_to_float(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float v = e == 0 ? ldexpf((float)m, -24)
                     : (e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 0x400), e - 25));
    return (h & 0x8000) ? -v : v;
}

/* Decode an initializer (or a Constant's value) into tensor t. */
static at_err read_tensor(conv *c, const Onnx__TensorProto *tp, int t, const char *what)
{
    md_tensor *x = &c->g->tensors[t];
    int32_t dt = tp->has_data_type ? tp->data_type : 0;
    int64_t n = 1;
    size_t esz, have;
    void *data;
    int is_float = dt == DT_FLOAT || dt == DT_DOUBLE || dt == DT_FLOAT16;
    if (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
        return fail(c, AT_EUNSUPPORTED, "%s '%s' keeps its data in an external file, which is "
                    "not supported (save the model with its weights inside)", what, x->name);
    if (tp->n_dims > MD_MAX_RANK)
        return fail(c, AT_EUNSUPPORTED, "%s '%s' has %zu dimensions (at most %d)", what,
                    x->name, tp->n_dims, MD_MAX_RANK);
    for (size_t d = 0; d < tp->n_dims; d++) {
        if (tp->dims[d] < 0 || (tp->dims[d] > 0 && n > INT32_MAX / tp->dims[d]))
            return fail(c, AT_ECORRUPT, "%s '%s': dimension %zu is %lld", what, x->name, d,
                        (long long)tp->dims[d]);
        n *= tp->dims[d];
    }
    switch (dt) {
    case DT_FLOAT: esz = 4; have = tp->n_float_data; break;
    case DT_DOUBLE: esz = 8; have = tp->n_double_data; break;
    case DT_FLOAT16: esz = 2; have = tp->n_int32_data; break;
    case DT_INT64: esz = 8; have = tp->n_int64_data; break;
    case DT_INT32: case DT_INT16: case DT_UINT16: case DT_INT8: case DT_UINT8: case DT_BOOL:
        esz = dt == DT_INT32 ? 4 : (dt == DT_INT16 || dt == DT_UINT16 ? 2 : 1);
        have = tp->n_int32_data;
        break;
    case DT_UINT32: esz = 4; have = tp->n_uint64_data; break;
    case DT_UINT64: esz = 8; have = tp->n_uint64_data; break;
    default:
        return fail(c, AT_EUNSUPPORTED, "%s '%s' has element type %s (%d), which is not "
                    "supported", what, x->name, dtype_name(dt), (int)dt);
    }
    if (tp->has_raw_data && tp->raw_data.len != (size_t)n * esz)
        return fail(c, AT_ECORRUPT, "%s '%s': %zu bytes of data for %lld %s values (%lld "
                    "bytes): truncated or corrupt", what, x->name, tp->raw_data.len,
                    (long long)n, dtype_name(dt), (long long)n * (long long)esz);
    if (!tp->has_raw_data && have != (size_t)n)
        return fail(c, AT_ECORRUPT, "%s '%s': %zu values for shape with %lld elements: "
                    "truncated or corrupt", what, x->name, have, (long long)n);
    data = at_malloc((size_t)(n ? n : 1) * (is_float ? 4 : 8));
    if (data == NULL)
        return AT_ENOMEM;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *raw = tp->has_raw_data ? tp->raw_data.data + (size_t)i * esz : NULL;
        double v = 0;
        int64_t iv = 0;
        switch (dt) {
        case DT_FLOAT: {
            float f;
            if (raw)
                memcpy(&f, raw, 4);
            else
                f = tp->float_data[i];
            ((float *)data)[i] = f;
            continue;
        }
        case DT_DOUBLE:
            if (raw)
                memcpy(&v, raw, 8);
            else
                v = tp->double_data[i];
            ((float *)data)[i] = (float)v;
            continue;
        case DT_FLOAT16: {
            uint16_t h;
            if (raw)
                memcpy(&h, raw, 2);
            else
                h = (uint16_t)tp->int32_data[i];
            ((float *)data)[i] = half_to_float(h);
            continue;
        }
        case DT_INT64:
            if (raw)
                memcpy(&iv, raw, 8);
            else
                iv = tp->int64_data[i];
            break;
        case DT_INT32: {
            int32_t k;
            if (raw)
                memcpy(&k, raw, 4);
            else
                k = tp->int32_data[i];
            iv = k;
            break;
        }
        case DT_INT16: {
            int16_t k;
            if (raw)
                memcpy(&k, raw, 2);
            else
                k = (int16_t)tp->int32_data[i];
            iv = k;
            break;
        }
        case DT_UINT16: {
            uint16_t k;
            if (raw)
                memcpy(&k, raw, 2);
            else
                k = (uint16_t)tp->int32_data[i];
            iv = k;
            break;
        }
        case DT_INT8:
            iv = raw ? (int8_t)raw[0] : (int8_t)tp->int32_data[i];
            break;
        case DT_UINT8:
        case DT_BOOL:
            iv = raw ? raw[0] : (uint8_t)tp->int32_data[i];
            break;
        case DT_UINT32: {
            uint32_t k;
            if (raw)
                memcpy(&k, raw, 4);
            else
                k = (uint32_t)tp->uint64_data[i];
            iv = k;
            break;
        }
        default: {
            uint64_t k;
            if (raw)
                memcpy(&k, raw, 8);
            else
                k = tp->uint64_data[i];
            iv = (int64_t)k;
            break;
        }
        }
        ((int64_t *)data)[i] = iv;
    }
    at_free(x->data);
    x->data = data;
    x->dtype = is_float ? AT_DT_F32 : AT_DT_I64;
    x->known = 1;
    x->rank = (int)tp->n_dims;
    for (size_t d = 0; d < tp->n_dims; d++)
        x->shape[d] = tp->dims[d];
    x->n_elems = n;
    return AT_OK;
}

/* Shape and element type of a ValueInfoProto; 0 if it has no usable tensor type. */
static int value_shape(conv *c, const Onnx__ValueInfoProto *vi, int *rank, int64_t *shape,
                       int32_t *elem, int *n_symbolic, const char **sym)
{
    const Onnx__TypeProto *tp = vi->type;
    const Onnx__TypeProto__Tensor *tt;
    c->neg_dim = -1;
    *n_symbolic = 0;
    *sym = NULL;
    if (tp == NULL || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE ||
        (tt = tp->tensor_type) == NULL)
        return 0;
    *elem = tt->has_elem_type ? tt->elem_type : 0;
    if (tt->shape == NULL || tt->shape->n_dim > MD_MAX_RANK)
        return 0;
    *rank = (int)tt->shape->n_dim;
    for (size_t d = 0; d < tt->shape->n_dim; d++) {
        const Onnx__TensorShapeProto__Dimension *dm = tt->shape->dim[d];
        c->params[d] = NULL;
        if (dm && dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE &&
            dm->dim_value > 0) {
            shape[d] = dm->dim_value;
        } else {
            shape[d] = -1;
            (*n_symbolic)++;
            if (dm && dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
                dm->dim_param && dm->dim_param[0])
                *sym = c->params[d] = dm->dim_param;
            if (dm && dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE &&
                dm->dim_value < 0 && c->neg_dim < 0)
                c->neg_dim = (int)d, c->neg_value = dm->dim_value; /* not symbolic: wrong */
        }
    }
    return 1;
}

static at_err read_attr(conv *c, int node, const Onnx__AttributeProto *ap, md_attr *a)
{
    md_graph *g = c->g;
    memset(a, 0, sizeof *a);
    a->tensor = -1;
    if ((a->name = at_strdup(or_empty(ap->name))) == NULL)
        return AT_ENOMEM;
    switch (ap->has_type ? ap->type : 0) {
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT:
        a->type = MD_ATTR_FLOAT;
        a->f = ap->f;
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT:
        a->type = MD_ATTR_INT;
        a->i = ap->i;
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING:
        a->type = MD_ATTR_STRING;
        if ((a->s = at_strndup(ap->s.data ? (const char *)ap->s.data : "", ap->s.len)) == NULL)
            return AT_ENOMEM;
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS:
        if (ap->n_floats > 4096)
            return fail(c, AT_EUNSUPPORTED, "node '%s': attribute '%s' has %zu values",
                        g->nodes[node].name, a->name, ap->n_floats);
        a->type = MD_ATTR_FLOATS;
        a->n = (int)ap->n_floats;
        if ((a->floats = at_malloc((size_t)(a->n + 1) * sizeof *a->floats)) == NULL)
            return AT_ENOMEM;
        for (int i = 0; i < a->n; i++)
            a->floats[i] = ap->floats[i];
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS:
        if (ap->n_ints > 4096)
            return fail(c, AT_EUNSUPPORTED, "node '%s': attribute '%s' has %zu values",
                        g->nodes[node].name, a->name, ap->n_ints);
        a->type = MD_ATTR_INTS;
        a->n = (int)ap->n_ints;
        if ((a->ints = at_malloc((size_t)(a->n + 1) * sizeof *a->ints)) == NULL)
            return AT_ENOMEM;
        for (int i = 0; i < a->n; i++)
            a->ints[i] = ap->ints[i];
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR: {
        char nm[300];
        int t;
        at_err err;
        if (ap->t == NULL)
            return fail(c, AT_ECORRUPT, "node '%s': tensor attribute '%s' has no tensor",
                        g->nodes[node].name, a->name);
        snprintf(nm, sizeof nm, "%.200s.%.60s", g->nodes[node].name, a->name);
        if ((t = md__tensor_const(g, nm, AT_DT_F32, 0, NULL, NULL)) < 0)
            return AT_ENOMEM;
        if ((err = read_tensor(c, ap->t, t, "tensor attribute")) != AT_OK)
            return err;
        a->type = MD_ATTR_TENSOR;
        a->tensor = t;
        break;
    }
    default:
        a->type = MD_ATTR_OTHER; /* graphs, sparse tensors, types: no supported op uses them */
        break;
    }
    return AT_OK;
}

static at_err add_io(int **arr, int *n, int *cap, int t)
{
    return at_vec_push(arr, n, cap, t);
}

/* The structure's hash (md_graph.sig): names, types, shapes and operators, not weights. */
static void sig_str(conv *c, const char *s)
{
    s = or_empty(s);
    at_sha256_update(&c->sig, s, strlen(s) + 1);
}

static void sig_i64(conv *c, int64_t v)
{
    at_sha256_update(&c->sig, &v, sizeof v);
}

/* The index of symbolic dimension 'name' (added with its value when new); -1 when there are
** too many. */
static int sym_index(conv *c, const char *name)
{
    md_graph *g = c->g;
    int k;
    for (k = 0; k < g->n_syms; k++)
        if (strcmp(g->sym_names[k], name) == 0)
            return k;
    if (k == MD_MAX_SYMS || (g->sym_names[k] = at_strdup(name)) == NULL)
        return -1;
    g->sym_values[k] = g->dim_default;
    for (int i = 0; c->opts && i < c->opts->n_dims; i++)
        if (c->opts->dims[i].name && strcmp(c->opts->dims[i].name, name) == 0 &&
            c->opts->dims[i].value > 0) {
            g->sym_values[k] = c->opts->dims[i].value;
            g->sym_given[k] = 1;
        }
    g->n_syms = k + 1;
    return k;
}

static at_err convert(conv *c, const Onnx__ModelProto *mp)
{
    md_graph *g = c->g;
    const Onnx__GraphProto *gp = mp->graph;
    int have_opset = 0;
    at_err err;
    g->ir_version = mp->has_ir_version ? mp->ir_version : 0;
    if (mp->producer_name && mp->producer_name[0]) {
        char buf[256];
        char *p;
        snprintf(buf, sizeof buf, "%.120s%s%.120s", mp->producer_name,
                 mp->producer_version && mp->producer_version[0] ? " " : "",
                 or_empty(mp->producer_version));
        if ((p = at_strdup(buf)) == NULL)
            return AT_ENOMEM;
        at_free(g->producer);
        g->producer = p;
    }
    if (gp == NULL)
        return fail(c, AT_ECORRUPT, "not an ONNX model: it has no graph (a truncated file, or "
                    "another kind of file)");
    for (size_t i = 0; i < mp->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *op = mp->opset_import[i];
        const char *dom = op ? or_empty(op->domain) : "";
        if (op == NULL || (dom[0] && strcmp(dom, "ai.onnx") != 0))
            continue;
        if (!op->has_version)
            return fail(c, AT_ECORRUPT, "the default domain's opset import has no version");
        have_opset = 1;
        g->opset = op->version;
    }
    if (!have_opset) {
        if (mp->n_opset_import == 0 && g->ir_version == 0)
            return fail(c, AT_ECORRUPT, "not an ONNX model: no IR version and no opset (a "
                        "truncated file, or another kind of file)");
        return fail(c, AT_EUNSUPPORTED, "the model imports no opset of the default ONNX "
                    "domain, so its operators have no defined meaning");
    }
    if (g->opset > MD_OPSET_MAX)
        return fail(c, AT_EUNSUPPORTED, "opset %lld of the default ONNX domain is newer than "
                    "this tuner knows (%d to %d); export the model with opset %d or older",
                    (long long)g->opset, MD_OPSET_MIN, MD_OPSET_MAX, MD_OPSET_MAX);
    if (g->opset < MD_OPSET_MIN)
        return fail(c, AT_EUNSUPPORTED, "opset %lld of the default ONNX domain is older than "
                    "this tuner supports (%d to %d); convert the model to a newer opset "
                    "(onnx.version_converter)", (long long)g->opset, MD_OPSET_MIN,
                    MD_OPSET_MAX);
    if (gp->n_sparse_initializer)
        return fail(c, AT_EUNSUPPORTED, "sparse initializers are not supported");
    /* initializers */
    for (size_t i = 0; i < gp->n_initializer; i++) {
        const Onnx__TensorProto *tp = gp->initializer[i];
        int t;
        if (tp == NULL || tp->name == NULL || tp->name[0] == 0)
            return fail(c, AT_ECORRUPT, "initializer %zu has no name", i);
        if (md__tensor_find(g, tp->name) >= 0)
            return fail(c, AT_EINVAL, "two initializers are named '%s'", tp->name);
        if ((t = md__tensor_get(g, tp->name)) < 0)
            return AT_ENOMEM;
        if ((err = read_tensor(c, tp, t, "initializer")) != AT_OK)
            return err;
        sig_str(c, tp->name);
        for (size_t d = 0; d < tp->n_dims; d++)
            sig_i64(c, tp->dims[d]);
    }
    /* inputs: those without an initializer are fed at run time */
    for (size_t i = 0; i < gp->n_input; i++) {
        const Onnx__ValueInfoProto *vi = gp->input[i];
        int64_t shape[MD_MAX_RANK];
        unsigned char symd[MD_MAX_RANK];
        int rank = 0, n_sym, t;
        int32_t elem = 0;
        const char *sym;
        char why[256];
        if (vi == NULL || vi->name == NULL || vi->name[0] == 0)
            return fail(c, AT_ECORRUPT, "graph input %zu has no name", i);
        if ((t = md__tensor_find(g, vi->name)) >= 0 && g->tensors[t].data)
            continue; /* a weight listed among the inputs (older exporters) */
        if (t >= 0)
            return fail(c, AT_EINVAL, "graph input '%s' is listed twice", vi->name);
        if (!value_shape(c, vi, &rank, shape, &elem, &n_sym, &sym))
            return fail(c, AT_EUNSUPPORTED, "graph input '%s' has no tensor shape (give the "
                        "input a fixed shape when exporting)", vi->name);
        if (elem != DT_FLOAT && elem != DT_INT64 && elem != DT_INT32)
            return fail(c, AT_EUNSUPPORTED, "graph input '%s' has element type %s: only float, "
                        "int64 and int32 inputs are supported", vi->name, dtype_name(elem));
        if (c->neg_dim >= 0)
            return fail(c, AT_EINVAL, "graph input '%s': dimension %d is %lld (a dimension is "
                        "a positive size or a symbolic name)", vi->name, c->neg_dim,
                        (long long)c->neg_value);
        sig_str(c, vi->name);
        sig_i64(c, elem);
        for (int d = 0; d < rank; d++) {
            sig_i64(c, shape[d]);
            sig_str(c, c->params[d]);
        }
        symd[0] = 0;
        if (n_sym) {
            int n_default = 0;
            for (int d = 0; d < rank; d++) {
                int k;
                symd[d] = 0;
                if (shape[d] >= 0)
                    continue;
                shape[d] = g->dim_default;
                if (c->params[d] == NULL) {
                    n_default++;
                    continue;
                }
                if ((k = sym_index(c, c->params[d])) < 0)
                    return fail(c, AT_EUNSUPPORTED, "graph input '%s': more than %d names of "
                                "symbolic dimensions", vi->name, MD_MAX_SYMS);
                shape[d] = g->sym_values[k];
                symd[d] = (unsigned char)(k + 1);
                n_default += !g->sym_given[k];
            }
            if (n_default &&
                (err = md__warn(g, "%s: graph input '%s' has %d symbolic dimension(s)%s%s%s; "
                                "using %lld", g->name, vi->name, n_sym, sym ? " ('" : "",
                                sym ? sym : "", sym ? "')" : "", (long long)g->dim_default)) !=
                AT_OK)
                return err;
        }
        if ((t = md__tensor_get(g, vi->name)) < 0)
            return AT_ENOMEM;
        g->tensors[t].sym_rank = rank;
        for (int d = 0; d < rank && n_sym; d++)
            g->tensors[t].sym[d] = symd[d];
        if (md__set_shape(g, t, elem == DT_FLOAT ? AT_DT_F32 : AT_DT_I64, rank, shape, why,
                          sizeof why) != AT_OK)
            return fail(c, AT_EUNSUPPORTED, "graph input %s", why);
        g->tensors[t].is_input = 1;
        if ((err = add_io(&g->inputs, &g->n_inputs, &g->cap_inputs, t)) != AT_OK)
            return err;
    }
    /* nodes */
    for (size_t i = 0; i < gp->n_node; i++) {
        const Onnx__NodeProto *np = gp->node[i];
        char name[256];
        int node, *in, *out;
        if (np == NULL || np->op_type == NULL || np->op_type[0] == 0)
            return fail(c, AT_ECORRUPT, "node %zu has no operator type", i);
        if (np->name && np->name[0])
            snprintf(name, sizeof name, "%.250s", np->name);
        else
            snprintf(name, sizeof name, "%.200s#%zu", np->op_type, i);
        if (np->n_input > 4096 || np->n_output > 4096 || np->n_attribute > 4096)
            return fail(c, AT_EUNSUPPORTED, "node '%s' has too many inputs, outputs or "
                        "attributes", name);
        if ((node = md__node_add(g, name, np->op_type, np->domain)) < 0)
            return AT_ENOMEM;
        sig_str(c, np->op_type);
        sig_str(c, np->domain);
        for (size_t k = 0; k < np->n_input; k++)
            sig_str(c, np->input[k]);
        for (size_t k = 0; k < np->n_output; k++)
            sig_str(c, np->output[k]);
        in = at_malloc((np->n_input + 1) * sizeof *in);
        out = at_malloc((np->n_output + 1) * sizeof *out);
        if (in == NULL || out == NULL) {
            at_free(in);
            at_free(out);
            return AT_ENOMEM;
        }
        err = AT_OK;
        for (size_t k = 0; k < np->n_input && err == AT_OK; k++) {
            const char *nm = or_empty(np->input[k]);
            in[k] = nm[0] ? md__tensor_find(g, nm) : -1;
            if (nm[0] && in[k] < 0)
                err = fail(c, AT_EINVAL, "node '%s' (%s) reads '%s', which no earlier node, "
                           "initializer or graph input provides", name, np->op_type, nm);
        }
        for (size_t k = 0; k < np->n_output && err == AT_OK; k++) {
            const char *nm = or_empty(np->output[k]);
            out[k] = -1;
            if (nm[0] == 0)
                continue;
            if ((out[k] = md__tensor_find(g, nm)) >= 0) {
                const md_tensor *x = &g->tensors[out[k]];
                err = x->producer >= 0
                          ? fail(c, AT_EINVAL, "'%s' is written by node '%s' and by node '%s'",
                                 nm, g->nodes[x->producer].name, name)
                          : fail(c, AT_EINVAL, "node '%s' writes '%s', which is a graph input "
                                 "or initializer", name, nm);
            } else if ((out[k] = md__tensor_get(g, nm)) < 0) {
                err = AT_ENOMEM;
            } else {
                g->tensors[out[k]].producer = node;
            }
        }
        if (err == AT_OK)
            err = md__node_io(g, node, (int)np->n_input, in, (int)np->n_output, out);
        at_free(in);
        at_free(out);
        if (err != AT_OK)
            return err;
        if (np->n_attribute) {
            md_attr *attrs = at_calloc(np->n_attribute, sizeof *attrs);
            if (attrs == NULL)
                return AT_ENOMEM;
            g->nodes[node].attrs = attrs;
            for (size_t k = 0; k < np->n_attribute; k++) {
                if (np->attribute[k] == NULL)
                    return fail(c, AT_ECORRUPT, "node '%s': empty attribute", name);
                err = read_attr(c, node, np->attribute[k], &g->nodes[node].attrs[k]);
                g->nodes[node].n_attrs = (int)k + 1; /* so a failure frees what is there */
                if (err != AT_OK)
                    return err;
            }
        }
    }
    g->n_file_nodes = g->n_nodes;
    /* outputs and declared shapes */
    for (size_t i = 0; i < gp->n_output + gp->n_value_info; i++) {
        const Onnx__ValueInfoProto *vi =
            i < gp->n_output ? gp->output[i] : gp->value_info[i - gp->n_output];
        int64_t shape[MD_MAX_RANK];
        int rank = 0, n_sym, t;
        int32_t elem = DT_FLOAT;
        const char *sym;
        if (vi == NULL || vi->name == NULL || vi->name[0] == 0) {
            if (i < gp->n_output)
                return fail(c, AT_ECORRUPT, "graph output %zu has no name", i);
            continue;
        }
        t = md__tensor_find(g, vi->name);
        if (i < gp->n_output) {
            if (t < 0)
                return fail(c, AT_EINVAL, "graph output '%s' is not computed by any node",
                            vi->name);
            if (!g->tensors[t].is_output) {
                g->tensors[t].is_output = 1;
                if ((err = add_io(&g->outputs, &g->n_outputs, &g->cap_outputs, t)) != AT_OK)
                    return err;
            }
        }
        if (i < gp->n_output) {
            sig_str(c, vi->name);
            if (value_shape(c, vi, &rank, shape, &elem, &n_sym, &sym) && n_sym > 0) {
                /* which dimensions follow a symbolic dimension of the inputs */
                md_tensor *x = &g->tensors[t];
                x->sym_rank = rank;
                for (int d = 0; d < rank; d++)
                    for (int k = 0; c->params[d] && k < g->n_syms; k++)
                        if (strcmp(g->sym_names[k], c->params[d]) == 0)
                            x->sym[d] = (unsigned char)(k + 1);
                for (int d = 0; d < rank; d++)
                    sig_str(c, c->params[d]);
            }
        }
        if (t >= 0 && value_shape(c, vi, &rank, shape, &elem, &n_sym, &sym) && n_sym == 0) {
            md_tensor *x = &g->tensors[t];
            x->hint = 1;
            x->hint_rank = rank;
            memcpy(x->hint_shape, shape, (size_t)rank * sizeof *shape);
            if (!x->known && elem != DT_FLOAT)
                x->dtype = AT_DT_I64;
        }
    }
    if (g->n_outputs == 0)
        return fail(c, AT_EINVAL, "the graph has no outputs");
    for (int i = 0; c->opts && i < c->opts->n_dims; i++) {
        int k = 0;
        char names[256] = "";
        size_t L = 0;
        while (k < g->n_syms && strcmp(g->sym_names[k], or_empty(c->opts->dims[i].name)) != 0)
            k++;
        if (k < g->n_syms)
            continue;
        for (k = 0; k < g->n_syms && L < sizeof names; k++)
            L += (size_t)snprintf(names + L, sizeof names - L, "%s'%s'", k ? ", " : "",
                                  g->sym_names[k]);
        return fail(c, AT_EINVAL, "no graph input has a symbolic dimension named '%s' (%s%s)",
                    or_empty(c->opts->dims[i].name), g->n_syms ? "it has " : "it has none",
                    names);
    }
    return AT_OK;
}

at_err md__onnx_decode(const void *bytes, size_t n, const char *name, const md_model_opts *opts,
                       md_graph **out, char *errmsg, size_t errmsg_size)
{
    Onnx__ModelProto *mp;
    conv c;
    at_err err;
    *out = NULL;
    if (errmsg_size)
        errmsg[0] = 0;
    if ((err = md__graph_new(name, &c.g)) != AT_OK)
        return err;
    c.g->dim_default = opts && opts->dim_default > 0 ? opts->dim_default : 1;
    c.opts = opts;
    at_sha256_init(&c.sig);
    c.errmsg = errmsg;
    c.errmsg_size = errmsg_size;
    if (n == 0) {
        err = fail(&c, AT_ECORRUPT, "the file is empty");
        goto out;
    }
    if (wire_depth_ok(bytes, n, &onnx__model_proto__descriptor, 0) < 0) {
        err = fail(&c, AT_ECORRUPT, "messages nested more than %d deep: corrupt or hostile",
                   MAX_DEPTH);
        goto out;
    }
    mp = onnx__model_proto__unpack(&allocator, n, bytes);
    if (mp == NULL) {
        /* protobuf-c says nothing more; out of memory looks the same, so ask once more
        ** with a probe allocation to tell the two apart */
        void *probe = at_malloc(n < (1 << 20) ? n : (1 << 20));
        err = probe ? fail(&c, AT_ECORRUPT, "not a valid ONNX file: the protobuf encoding is "
                           "broken (truncated or corrupt)")
                    : AT_ENOMEM;
        at_free(probe);
        goto out;
    }
    err = convert(&c, mp);
    onnx__model_proto__free_unpacked(mp, &allocator);
out:
    {
        uint8_t h[32];
        at_sha256_final(&c.sig, h);
        for (int k = 0; k < 16; k++)
            snprintf(c.g->sig + 2 * k, 3, "%02x", h[k]);
    }
    if (err != AT_OK) {
        md__graph_free(c.g);
        return err;
    }
    *out = c.g;
    return AT_OK;
}
