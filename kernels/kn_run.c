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
    kn_rt_kernel_fn fn;
    void *ws = NULL;
    int32_t rc;
    at_err err;
    int64_t ws_bytes = a->ws_fixed + a->ws_per_thread * par->n_threads;
    err = kn_rt_module_load(a->obj, a->obj_size, NULL, &m, errmsg, errmsg_size);
    if (err)
        return err;
    fn = (kn_rt_kernel_fn)kn_rt_module_sym(m, a->entry);
    if (fn == NULL) {
        kn_rt_module_free(m);
        return kn__fail(errmsg, errmsg_size, AT_ELOAD, "the object has no symbol %s", a->entry);
    }
    if (ws_bytes > 0 && (ws = kn_rt_alloc((size_t)ws_bytes)) == NULL) {
        kn_rt_module_free(m);
        return AT_ENOMEM;
    }
    rc = fn(bufs->ptr, ws, par);
    kn_rt_free(ws);
    kn_rt_module_free(m);
    if (rc != 0)
        return kn__fail(errmsg, errmsg_size, AT_EIO, "the kernel returned %d", (int)rc);
    return AT_OK;
}
