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
            /* the j-th rewritten kernel argument, in kernel argument order */
            int seen = 0;
            for (int i = 0; i < a->n_args; i++)
                if (a->kernel_src[i] >= 0 && seen++ == j)
                    pargs[k++] = layout[i];
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
