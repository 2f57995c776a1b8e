/* kernels/kn_run.c -- running an artifact on this machine: buffers and one call.
** Used by tests, benchmarks and the embedded agent's reference runs. */
#include "kernels_int.h"

#include <string.h>

at_err kn_bufset_alloc(const kn_artifact *a, uint64_t seed, kn_bufset *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < a->n_args; i++) {
        const kn_arg_desc *d = &a->args[i];
        int64_t n = 1;
        for (int k = 0; k < d->n_dims; k++)
            n *= d->shape[k];
        out->n_elems[i] = n;
        out->dtype[i] = d->dtype;
        out->n_bytes[i] = (size_t)n * (size_t)at_dtype_bytes(d->dtype);
        out->ptr[i] = kn_rt_alloc(out->n_bytes[i]);
        if (out->ptr[i] == NULL) {
            out->n = i;
            kn_bufset_free(out);
            return AT_ENOMEM;
        }
        if (!d->is_output)
            kn_rt_fill(out->ptr[i], d->dtype, n, seed, (uint32_t)i);
    }
    out->n = a->n_args;
    return AT_OK;
}

void kn_bufset_free(kn_bufset *b)
{
    for (int i = 0; i < b->n; i++)
        kn_rt_free(b->ptr[i]);
    memset(b, 0, sizeof *b);
}

at_err kn_run_once(const kn_artifact *a, kn_bufset *bufs, const kn_rt_par *par, char *errmsg,
                   size_t errmsg_size)
{
    kn_rt_module *m = NULL;
    kn_rt_kernel_fn fn, pre = NULL;
    void *ws = NULL, *kargs[KN_MAX_ARGS], *layout[KN_MAX_ARGS] = {0};
    int32_t rc = 0;
    at_err err;
    int64_t ws_bytes = a->ws_fixed + a->ws_per_thread * par->n_threads;
    if (a->kind != KN_ART_ELF)
        return kn__fail(errmsg, errmsg_size, AT_EUNSUPPORTED,
                        "a GPU artifact (%s) runs on a GPU agent, not here", a->gpu_arch);
    err = kn_rt_module_load(a->obj, a->obj_size, NULL, &m, errmsg, errmsg_size);
    if (err)
        return err;
    fn = (kn_rt_kernel_fn)kn_rt_module_sym(m, a->entry);
    if (a->pre_entry[0])
        pre = (kn_rt_kernel_fn)kn_rt_module_sym(m, a->pre_entry);
    if (fn == NULL || (a->pre_entry[0] && pre == NULL)) {
        kn_rt_module_free(m);
        return kn__fail(errmsg, errmsg_size, AT_ELOAD, "the object has no symbol %s",
                        fn ? a->pre_entry : a->entry);
    }
    /* rewritten weights: made once by the pre-transform */
    for (int i = 0; i < a->n_args; i++) {
        kargs[i] = bufs->ptr[i];
        if (a->kernel_src[i] >= 0) {
            int64_t n = 1;
            for (int d = 0; d < a->kernel_args[i].n_dims; d++)
                n *= a->kernel_args[i].shape[d];
            layout[i] = kn_rt_alloc((size_t)n * (size_t)at_dtype_bytes(a->kernel_args[i].dtype));
            if (layout[i] == NULL) {
                err = AT_ENOMEM;
                goto out;
            }
            kargs[i] = layout[i];
        }
    }
    if (pre) {
        void *pargs[2 * KN_MAX_ARGS];
        int k = 0;
        for (int j = 0; j < a->n_pre; j++)
            pargs[k++] = bufs->ptr[a->pre_src[j]];
        for (int j = 0; j < a->n_pre; j++) {
            /* the new layout of weight pre_src[j]: the kernel argument made from it */
            void *p = NULL;
            for (int i = 0; i < a->n_args; i++)
                if (a->kernel_src[i] == a->pre_src[j])
                    p = layout[i];
            if (p == NULL) {
                err = kn__fail(errmsg, errmsg_size, AT_EINVAL,
                               "the artifact's pre-transform writes a layout no argument takes");
                goto out;
            }
            pargs[k++] = p;
        }
        rc = pre(pargs, NULL, par);
        if (rc != 0) {
            err = kn__fail(errmsg, errmsg_size, AT_EIO, "the pre-transform returned %d", (int)rc);
            goto out;
        }
    }
    if (ws_bytes > 0 && (ws = kn_rt_alloc((size_t)ws_bytes)) == NULL) {
        err = AT_ENOMEM;
        goto out;
    }
    rc = fn(kargs, ws, par);
    if (rc != 0)
        err = kn__fail(errmsg, errmsg_size, AT_EIO, "the kernel returned %d", (int)rc);
out:
    for (int i = 0; i < a->n_args; i++)
        kn_rt_free(layout[i]);
    kn_rt_free(ws);
    kn_rt_module_free(m);
    return err;
}

/* ---- artifact serialisation ----
** Little-endian binary: magic "ATKA", version, then the fields in declaration order; every
** length is checked against the input on unpacking (the bytes may come from a pipe or a
** file).  Version 2 adds, before the object bytes, the GPU fields: kind, architecture and
** the launches (entry, grid[3], block[3], shared bytes, registers).  Version 1 bytes (CPU
** artifacts written before GPUs) still unpack. */

#define KA_MAGIC 0x414b5441u /* "ATKA" */
#define KA_VERSION 2

static void put_u32(at_buf *b, uint32_t v)
{
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    at_buf_put(b, x, 4);
}

static void put_i64(at_buf *b, int64_t v)
{
    put_u32(b, (uint32_t)(uint64_t)v);
    put_u32(b, (uint32_t)((uint64_t)v >> 32));
}

static void put_str(at_buf *b, const char *s)
{
    put_u32(b, (uint32_t)strlen(s));
    at_buf_puts(b, s);
}

static void put_arg(at_buf *b, const kn_arg_desc *d)
{
    put_u32(b, (uint32_t)d->dtype);
    put_u32(b, (uint32_t)d->n_dims);
    for (int k = 0; k < d->n_dims; k++)
        put_i64(b, d->shape[k]);
    put_u32(b, (uint32_t)d->is_output);
    put_u32(b, (uint32_t)d->is_const);
}

void kn_artifact_pack(const kn_artifact *a, at_buf *b)
{
    put_u32(b, KA_MAGIC);
    put_u32(b, KA_VERSION);
    put_str(b, a->entry);
    put_str(b, a->triple);
    put_str(b, a->pre_entry);
    put_i64(b, a->ws_fixed);
    put_i64(b, a->ws_per_thread);
    put_i64(b, (int64_t)(a->compile_s * 1e9));
    put_u32(b, (uint32_t)a->n_args);
    for (int i = 0; i < a->n_args; i++) {
        put_arg(b, &a->args[i]);
        put_arg(b, &a->kernel_args[i]);
        put_u32(b, (uint32_t)a->kernel_src[i]);
    }
    put_u32(b, (uint32_t)a->n_pre);
    for (int i = 0; i < a->n_pre; i++)
        put_u32(b, (uint32_t)a->pre_src[i]);
    put_u32(b, (uint32_t)a->kind);
    put_str(b, a->gpu_arch);
    put_u32(b, (uint32_t)a->n_launches);
    for (int k = 0; k < a->n_launches; k++) {
        const kn_launch *l = &a->launches[k];
        put_str(b, l->entry);
        for (int d = 0; d < 3; d++)
            put_u32(b, (uint32_t)l->grid[d]);
        for (int d = 0; d < 3; d++)
            put_u32(b, (uint32_t)l->block[d]);
        put_u32(b, (uint32_t)l->shared_bytes);
        put_u32(b, (uint32_t)l->n_regs);
    }
    put_i64(b, (int64_t)a->obj_size);
    at_buf_put(b, a->obj, a->obj_size);
}

typedef struct rd {
    const uint8_t *p, *end;
    int bad;
} rd;

static uint32_t get_u32(rd *r)
{
    uint32_t v;
    if (r->end - r->p < 4) {
        r->bad = 1;
        return 0;
    }
    v = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 | (uint32_t)r->p[2] << 16 |
        (uint32_t)r->p[3] << 24;
    r->p += 4;
    return v;
}

static int64_t get_i64(rd *r)
{
    uint64_t lo = get_u32(r), hi = get_u32(r);
    return (int64_t)(lo | hi << 32);
}

static void get_str(rd *r, char *out, size_t size)
{
    uint32_t n = get_u32(r);
    if (r->bad || n >= size || (size_t)(r->end - r->p) < n) {
        r->bad = 1;
        out[0] = 0;
        return;
    }
    memcpy(out, r->p, n);
    out[n] = 0;
    r->p += n;
}

static void get_arg(rd *r, kn_arg_desc *d)
{
    d->dtype = (at_dtype)get_u32(r);
    d->n_dims = (int)get_u32(r);
    if ((unsigned)d->dtype >= AT_N_DTYPES || d->n_dims < 0 || d->n_dims > SS_MAX_DIMS) {
        r->bad = 1;
        return;
    }
    for (int k = 0; k < d->n_dims; k++) {
        d->shape[k] = get_i64(r);
        if (d->shape[k] < 1 || d->shape[k] > (1ll << 31))
            r->bad = 1;
    }
    d->is_output = get_u32(r) != 0;
    d->is_const = get_u32(r) != 0;
}

at_err kn_artifact_unpack(const void *bytes, size_t n, kn_artifact **out, char *errmsg,
                          size_t errmsg_size)
{
    rd r = {bytes, (const uint8_t *)bytes + n, 0};
    kn_artifact *a;
    int64_t obj_size;
    uint32_t version;
    *out = NULL;
    if (get_u32(&r) != KA_MAGIC || ((version = get_u32(&r)) != KA_VERSION && version != 1))
        return kn__fail(errmsg, errmsg_size, AT_EPROTO, "not a packed artifact of this version");
    a = at_calloc(1, sizeof *a);
    if (a == NULL)
        return AT_ENOMEM;
    get_str(&r, a->entry, sizeof a->entry);
    get_str(&r, a->triple, sizeof a->triple);
    get_str(&r, a->pre_entry, sizeof a->pre_entry);
    a->ws_fixed = get_i64(&r);
    a->ws_per_thread = get_i64(&r);
    a->compile_s = (double)get_i64(&r) * 1e-9;
    a->n_args = (int)get_u32(&r);
    if (a->n_args < 0 || a->n_args > KN_MAX_ARGS || a->ws_fixed < 0 || a->ws_per_thread < 0)
        r.bad = 1;
    for (int i = 0; i < a->n_args && !r.bad; i++) {
        get_arg(&r, &a->args[i]);
        get_arg(&r, &a->kernel_args[i]);
        a->kernel_src[i] = (int)get_u32(&r);
        if (a->kernel_src[i] < -1 || a->kernel_src[i] >= a->n_args)
            r.bad = 1;
    }
    a->n_pre = (int)get_u32(&r);
    if (a->n_pre < 0 || a->n_pre > KN_MAX_ARGS)
        r.bad = 1;
    for (int i = 0; i < a->n_pre && !r.bad; i++) {
        a->pre_src[i] = (int)get_u32(&r);
        if (a->pre_src[i] < 0 || a->pre_src[i] >= a->n_args)
            r.bad = 1;
    }
    if (version >= 2 && !r.bad) {
        a->kind = (int)get_u32(&r);
        get_str(&r, a->gpu_arch, sizeof a->gpu_arch);
        a->n_launches = (int)get_u32(&r);
        if (a->kind < KN_ART_ELF || a->kind > KN_ART_CUBIN || a->n_launches < 0 ||
            a->n_launches > KN_MAX_LAUNCHES || (a->kind == KN_ART_ELF) != (a->n_launches == 0))
            r.bad = 1;
        for (int k = 0; k < a->n_launches && !r.bad; k++) {
            kn_launch *l = &a->launches[k];
            int64_t threads = 1;
            get_str(&r, l->entry, sizeof l->entry);
            for (int d = 0; d < 3; d++)
                l->grid[d] = (int32_t)get_u32(&r);
            for (int d = 0; d < 3; d++) {
                l->block[d] = (int32_t)get_u32(&r);
                threads *= l->block[d];
            }
            l->shared_bytes = (int32_t)get_u32(&r);
            l->n_regs = (int32_t)get_u32(&r);
            for (int d = 0; d < 3; d++)
                if (l->grid[d] < 1 || l->block[d] < 1)
                    r.bad = 1;
            if (l->entry[0] == 0 || threads > 1024 || l->shared_bytes < 0 || l->n_regs < 0)
                r.bad = 1;
        }
    }
    obj_size = get_i64(&r);
    if (r.bad || obj_size < 0 || obj_size != (int64_t)(r.end - r.p)) {
        at_free(a);
        return kn__fail(errmsg, errmsg_size, AT_EPROTO, "a packed artifact is malformed");
    }
    a->obj = at_malloc((size_t)obj_size);
    if (a->obj == NULL) {
        at_free(a);
        return AT_ENOMEM;
    }
    memcpy(a->obj, r.p, (size_t)obj_size);
    a->obj_size = (size_t)obj_size;
    *out = a;
    return AT_OK;
}
