/* kernels/kernels_int.h -- declarations shared by the files of kernels/ only. */
#ifndef KN_KERNELS_INT_H
#define KN_KERNELS_INT_H

#include "kernels.h"

/* snprintf into errmsg (when not NULL) and return 'err'. */
at_err kn__fail(char *errmsg, size_t errmsg_size, at_err err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Initialise LLVM's X86 and AArch64 targets once per process. */
void kn__llvm_init(void);

/* "cuda -arch=sm_XX ..." (kn_target_cuda.c). */
at_err kn__target_parse_cuda(const char *text, kn_target *out, char *errmsg, size_t errmsg_size);

/* The backends (kn_llvm.c; kn_nvrtc.c when the build has CUDA). */
at_err kn__llvm_build(const kn_ir *ir, const kn_target *target, const char *entry,
                      kn_artifact **out, char *errmsg, size_t errmsg_size);
at_err kn__llvm_verify(const kn_ir *ir, const kn_target *target, char *errmsg,
                       size_t errmsg_size);
extern const kn_backend_ops kn__llvm_backend;
/* Fill an artifact's entry, triple and argument signature from 'ir' (kn_backend.c). */
void kn__artifact_sig(kn_artifact *a, const kn_ir *ir, const kn_target *t, const char *entry);
extern const kn_backend_ops kn__cuda_backend;

#endif
