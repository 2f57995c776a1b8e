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

/* ---- the artifact on the wire ----
** The wire library encodes artifacts (at_wire_artifact); these two convert.  The wire
** describes a layout rewrite as (task input, new shape) pairs: the kernel takes each new
** layout in its argument's place, which is how kn_build makes them. */

void kn_artifact_to_wire(const kn_artifact *a, at_wire_artifact *w,
                         at_wire_arg args[AT_WIRE_MAX_ARGS])
{
    memset(w, 0, sizeof *w);
    w->obj = a->obj;
    w->obj_size = a->obj_size;
    w->entry = a->entry;
    w->triple = a->triple;
    w->n_args = a->n_args <= AT_WIRE_MAX_ARGS ? a->n_args : AT_WIRE_MAX_ARGS + 1; /* refused */
    w->args = args;
    w->ws_fixed = a->ws_fixed;
    w->ws_per_thread = a->ws_per_thread;
    for (int i = 0; i < a->n_args && i < AT_WIRE_MAX_ARGS; i++) {
        memset(&args[i], 0, sizeof args[i]);
        args[i].dtype = a->args[i].dtype;
        args[i].is_output = a->args[i].is_output;
        args[i].n_dims = a->args[i].n_dims;
        for (int d = 0; d < a->args[i].n_dims && d < AT_WIRE_MAX_DIMS; d++)
            args[i].shape[d] = a->args[i].shape[d];
    }
    if (a->kind != KN_ART_ELF) {
        /* a GPU artifact: its launches go as they are (kn_launch is at_wire_launch) */
        w->gpu_kind = a->kind == KN_ART_PTX ? AT_WIRE_GPU_PTX : AT_WIRE_GPU_CUBIN;
        w->gpu_arch = a->gpu_arch;
        w->n_launches = a->n_launches;
        w->launches = a->launches;
    }
    if (a->pre_entry[0] && a->n_pre > 0) {
        w->pre_entry = a->pre_entry;
        w->n_pre = a->n_pre <= AT_WIRE_MAX_PRE ? a->n_pre : AT_WIRE_MAX_PRE + 1; /* refused */
        for (int k = 0; k < a->n_pre && k < AT_WIRE_MAX_PRE; k++) {
            at_wire_layout *l = &w->pre[k];
            l->arg = a->pre_src[k];
            for (int i = 0; i < a->n_args; i++)
                if (a->kernel_src[i] == a->pre_src[k]) {
                    l->n_dims = a->kernel_args[i].n_dims;
                    for (int d = 0; d < l->n_dims && d < AT_WIRE_MAX_DIMS; d++)
                        l->shape[d] = a->kernel_args[i].shape[d];
                }
        }
    }
}

static int wire_name(char *dst, size_t size, const char *src)
{
    size_t n = src ? strlen(src) : 0;
    if (n >= size)
        return -1;
    memcpy(dst, src ? src : "", n + 1);
    return 0;
}

at_err kn_artifact_from_wire(const at_wire_artifact *w, kn_artifact **out, char *errmsg,
                             size_t errmsg_size)
{
    kn_artifact *a;
    *out = NULL;
    if (w->n_args < 1 || w->n_args > KN_MAX_ARGS || w->n_pre < 0 || w->n_pre > AT_WIRE_MAX_PRE ||
        w->n_launches < 0 || w->n_launches > KN_MAX_LAUNCHES || w->obj_size == 0)
        return kn__fail(errmsg, errmsg_size, AT_EPROTO, "an artifact is malformed: %d arguments, "
                        "%d rewritten weights, %d launches, %zu object bytes", w->n_args, w->n_pre,
                        w->n_launches, w->obj_size);
    if ((a = at_calloc(1, sizeof *a)) == NULL)
        return AT_ENOMEM;
    if (wire_name(a->entry, sizeof a->entry, w->entry) != 0 ||
        wire_name(a->triple, sizeof a->triple, w->triple) != 0 ||
        wire_name(a->pre_entry, sizeof a->pre_entry, w->n_pre > 0 ? w->pre_entry : "") != 0 ||
        wire_name(a->gpu_arch, sizeof a->gpu_arch, w->gpu_kind ? w->gpu_arch : "") != 0) {
        at_free(a);
        return kn__fail(errmsg, errmsg_size, AT_EPROTO, "an artifact's name is too long");
    }
    a->n_args = w->n_args;
    a->ws_fixed = w->ws_fixed;
    a->ws_per_thread = w->ws_per_thread;
    for (int i = 0; i < a->n_args; i++) {
        kn_arg_desc *d = &a->args[i];
        d->dtype = (at_dtype)w->args[i].dtype;
        d->n_dims = w->args[i].n_dims;
        if ((unsigned)d->dtype >= AT_N_DTYPES || d->n_dims < 0 || d->n_dims > SS_MAX_DIMS) {
            at_free(a);
            return kn__fail(errmsg, errmsg_size, AT_EPROTO, "an artifact's argument %d is "
                            "malformed", i);
        }
        memcpy(d->shape, w->args[i].shape, (size_t)d->n_dims * sizeof d->shape[0]);
        d->is_output = w->args[i].is_output;
        a->kernel_args[i] = *d;
        a->kernel_src[i] = -1;
    }
    a->n_pre = w->n_pre;
    for (int k = 0; k < w->n_pre; k++) {
        const at_wire_layout *l = &w->pre[k];
        kn_arg_desc *d;
        if (l->arg < 0 || l->arg >= a->n_args || a->kernel_src[l->arg] >= 0 ||
            l->n_dims < 1 || l->n_dims > SS_MAX_DIMS) {
            at_free(a);
            return kn__fail(errmsg, errmsg_size, AT_EPROTO, "an artifact's new layout %d is "
                            "malformed", k);
        }
        a->pre_src[k] = l->arg;
        a->kernel_src[l->arg] = l->arg;
        d = &a->kernel_args[l->arg];
        d->n_dims = l->n_dims;
        memcpy(d->shape, l->shape, (size_t)l->n_dims * sizeof d->shape[0]);
    }
    a->kind = w->gpu_kind == AT_WIRE_GPU_PTX     ? KN_ART_PTX
              : w->gpu_kind == AT_WIRE_GPU_CUBIN ? KN_ART_CUBIN
                                                 : KN_ART_ELF;
    a->n_launches = a->kind == KN_ART_ELF ? 0 : w->n_launches;
    if (a->n_launches)
        memcpy(a->launches, w->launches, (size_t)a->n_launches * sizeof a->launches[0]);
    if ((a->obj = at_malloc(w->obj_size)) == NULL) {
        at_free(a);
        return AT_ENOMEM;
    }
    memcpy(a->obj, w->obj, w->obj_size);
    a->obj_size = w->obj_size;
    *out = a;
    return AT_OK;
}

at_err kn_build_state(const ss_state *st, const kn_target *target, const char *entry,
                      kn_artifact **out, char *errmsg, size_t errmsg_size)
{
    kn_ir *ir = NULL;
    at_err err;
    *out = NULL;
    if ((err = kn_lower(st, &ir, errmsg, errmsg_size)) != AT_OK)
        return err;
    err = kn_build(ir, target, entry, out, errmsg, errmsg_size);
    kn_ir_free(ir);
    return err;
}
