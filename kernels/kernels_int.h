/* kernels/kernels_int.h -- declarations shared by the files of kernels/ only. */
#ifndef KN_KERNELS_INT_H
#define KN_KERNELS_INT_H

#include "kernels.h"

/* snprintf into errmsg (when not NULL) and return 'err'. */
at_err kn__fail(char *errmsg, size_t errmsg_size, at_err err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Initialise LLVM's X86 and AArch64 targets once per process. */
void kn__llvm_init(void);

#endif
