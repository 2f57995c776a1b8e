/* tests/support/gpu_emu.h -- run a GPU program's CUDA C on the CPU (prefix gpu_emu_).
**
**   kn_cuda_source(ir, &target, "at_kernel", &src, launches, &n, &ws, err, sizeof err);
**   gpu_emu_run(src, launches, n, ws, artifact_args, n_args, bufs, err, sizeof err);
**
** The text is compiled with the system C compiler ('cc', no sanitizer) together with
** tests/support/gpu_emu_rt.h into a small program in a temporary directory, which reads
** the argument buffers, runs the launches (every block's threads as fibers, barriers
** honoured) and writes the outputs back.  Tests run from the repository root. */
#ifndef GPU_EMU_H
#define GPU_EMU_H

#include "kernels/kernels.h"

/* 1: ran, outputs written into bufs; 0: skipped (no C compiler: 'msg' says so); -1: the
** program failed to build or run ('msg' says how). */
int gpu_emu_run(const char *src, const kn_launch *launches, int n_launches, int64_t ws_bytes,
                const kn_arg_desc *args, int n_args, kn_bufset *bufs, char *msg, size_t n);

/* The system C compiler can be run (checked once). */
int gpu_emu_available(void);

#endif
