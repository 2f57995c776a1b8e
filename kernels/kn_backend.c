/* kernels/kn_backend.c -- the table of code generators, and the calls that go through it.
**
** This is the one place that knows what the build has: "llvm" unless the build defines
** AT_NO_LLVM (the GPU bundle), "cuda" when the Makefile found the CUDA toolkit and defined
** HAVE_CUDA (kn_nvrtc.c is then compiled).  Everything else asks kn_backend_find. */
#include "kernels_int.h"

#include <stdio.h>
#include <string.h>

static const kn_backend_ops *const backends[] = {
#ifndef AT_NO_LLVM
    &kn__llvm_backend,
#endif
#ifdef HAVE_CUDA
    &kn__cuda_backend,
#endif
    NULL,
};

const kn_backend_ops *kn_backend_find(const char *name)
{
    for (int i = 0; backends[i]; i++)
        if (strcmp(backends[i]->name, name) == 0)
            return backends[i];
    return NULL;
}

const kn_backend_ops *kn_backend_for(const kn_target *t)
{
    for (int i = 0; backends[i]; i++)
        if (backends[i]->kind == (kn_target_kind)t->kind)
            return backends[i];
    return NULL;
}

static at_err no_backend(const kn_target *t, char *errmsg, size_t errmsg_size)
{
    return kn__fail(errmsg, errmsg_size, AT_EUNSUPPORTED,
                    t->kind == KN_TARGET_CUDA
                        ? "target '%s': this build has no CUDA backend (build with the CUDA "
                          "toolkit in CUDA_HOME for NVRTC)"
                        : "target '%s': this build has no LLVM backend (CPU targets need it)",
                    t->text);
}

/* A GPU program goes to a GPU target only, and a CPU program to a CPU target. */
static at_err check_kind(const kn_ir *ir, const kn_target *t, char *errmsg, size_t errmsg_size)
{
    if (ir->is_gpu && t->kind != KN_TARGET_CUDA)
        return kn__fail(errmsg, errmsg_size, AT_ESCHED,
                        "the schedule binds loops to GPU blocks or threads; target '%s' is a "
                        "CPU",
                        t->text);
    if (!ir->is_gpu && t->kind == KN_TARGET_CUDA)
        return kn__fail(errmsg, errmsg_size, AT_ESCHED,
                        "the schedule binds no loop to GPU blocks or threads (target '%s')",
                        t->text);
    return AT_OK;
}

at_err kn_build(const kn_ir *ir, const kn_target *target, const char *entry, kn_artifact **out,
                char *errmsg, size_t errmsg_size)
{
    const kn_backend_ops *be = kn_backend_for(target);
    at_err err;
    *out = NULL;
    if ((err = check_kind(ir, target, errmsg, errmsg_size)) != AT_OK)
        return err;
    if (be == NULL) {
        /* a program that breaks a GPU's launch limits says so in every build */
        if (target->kind == KN_TARGET_CUDA &&
            (err = kn_verify(ir, target, errmsg, errmsg_size)) != AT_OK)
            return err;
        return no_backend(target, errmsg, errmsg_size);
    }
    return be->build(ir, target, entry, out, errmsg, errmsg_size);
}

at_err kn_verify(const kn_ir *ir, const kn_target *target, char *errmsg, size_t errmsg_size)
{
    const kn_backend_ops *be = kn_backend_for(target);
    at_err err;
    if ((err = check_kind(ir, target, errmsg, errmsg_size)) != AT_OK)
        return err;
    if (target->kind == KN_TARGET_CUDA) {
        /* the launch limits need no compiler: check them in every build */
        kn_launch l[KN_MAX_LAUNCHES];
        int n;
        int64_t ws;
        char *src = NULL;
        err = kn_cuda_source(ir, target, "at_kernel", &src, l, &n, &ws, errmsg, errmsg_size);
        at_free(src);
        return err;
    }
    if (be == NULL)
        return no_backend(target, errmsg, errmsg_size);
    return be->verify ? be->verify(ir, target, errmsg, errmsg_size) : AT_OK;
}

void kn__artifact_sig(kn_artifact *a, const kn_ir *ir, const kn_target *t, const char *entry)
{
    snprintf(a->entry, sizeof a->entry, "%s", entry);
    snprintf(a->triple, sizeof a->triple, "%s", t->triple);
    a->n_args = ir->dag->n_args;
    for (int i = 0; i < a->n_args; i++) {
        const ss_op *op = &ir->dag->ops[ir->dag->args[i]];
        a->args[i].dtype = op->dtype;
        a->args[i].n_dims = op->n_dims;
        memcpy(a->args[i].shape, op->shape, sizeof op->shape);
        a->args[i].is_output = op->is_output;
        a->args[i].is_const = op->is_const;
        a->kernel_args[i] = ir->args[i];
        a->kernel_src[i] = ir->arg_src[i];
    }
}

void kn_artifact_free(kn_artifact *a)
{
    if (a == NULL)
        return;
    at_free(a->obj);
    at_free(a);
}
