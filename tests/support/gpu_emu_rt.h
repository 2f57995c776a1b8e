/* tests/support/gpu_emu_rt.h -- runs generated CUDA C on the CPU (tests only).
**
** kn_cuda_source's text is valid C once the CUDA names are defined; this header defines
** them and runs every thread of a block as a fiber (ucontext): __syncthreads() switches to
** the next thread, and a block goes on once all its threads are at the barrier.  Blocks
** run one after another with their own shared memory (filled with garbage, so a read of
** a value never written shows).  Barrier misuse -- some threads at a barrier while others
** have returned -- ends the program with exit code 3.  Compiled by tests with the system C
** compiler (no sanitizer) into a separate program: see gpu_emu.c. */
#ifndef AT_GPU_EMU_RT_H
#define AT_GPU_EMU_RT_H

#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

#define AT_GPU_EMU 1
#define AT_DEV static inline
#define AT_KERNEL(threads) static void
#define AT_SMEM unsigned char *at_smem = at_emu_smem
#define AT_RESTRICT restrict
#define __syncthreads() at_emu_sync()

typedef struct at_dim3 {
    unsigned x, y, z;
} at_dim3;

static at_dim3 threadIdx, blockIdx, blockDim, gridDim;
static unsigned char *at_emu_smem;

static inline float at_inff(void)
{
    return INFINITY;
}
static inline double at_inf(void)
{
    return INFINITY;
}

#define AT_EMU_STACK (256 * 1024)
#define AT_EMU_MAX_THREADS 1024

static ucontext_t at_emu_sched;
static ucontext_t at_emu_ctx[AT_EMU_MAX_THREADS];
static unsigned char *at_emu_stack[AT_EMU_MAX_THREADS];
static int at_emu_state[AT_EMU_MAX_THREADS]; /* 0 running, 1 at a barrier, 2 finished */
static int at_emu_cur;
static void (*at_emu_body)(void);

static void at_emu_sync(void)
{
    at_emu_state[at_emu_cur] = 1;
    swapcontext(&at_emu_ctx[at_emu_cur], &at_emu_sched);
}

static void at_emu_trampoline(void)
{
    at_emu_body();
    at_emu_state[at_emu_cur] = 2;
    swapcontext(&at_emu_ctx[at_emu_cur], &at_emu_sched);
}

static void at_emu_set_thread(int t)
{
    threadIdx.x = (unsigned)t % blockDim.x;
    threadIdx.y = (unsigned)t / blockDim.x % blockDim.y;
    threadIdx.z = (unsigned)t / (blockDim.x * blockDim.y);
}

/* Run body() as a launch of grid x block threads with 'smem' bytes of shared memory. */
static void at_emu_launch(const int grid[3], const int block[3], int smem, void (*body)(void))
{
    int n = block[0] * block[1] * block[2];
    unsigned char *shared = malloc((size_t)smem + 16);
    if (n > AT_EMU_MAX_THREADS || shared == NULL)
        exit(4);
    gridDim.x = (unsigned)grid[0];
    gridDim.y = (unsigned)grid[1];
    gridDim.z = (unsigned)grid[2];
    blockDim.x = (unsigned)block[0];
    blockDim.y = (unsigned)block[1];
    blockDim.z = (unsigned)block[2];
    at_emu_body = body;
    for (int t = 0; t < n; t++)
        if (at_emu_stack[t] == NULL) {
            at_emu_stack[t] = mmap(NULL, AT_EMU_STACK, PROT_READ | PROT_WRITE,
                                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (at_emu_stack[t] == MAP_FAILED)
                exit(4);
        }
    for (int bz = 0; bz < grid[2]; bz++)
        for (int by = 0; by < grid[1]; by++)
            for (int bx = 0; bx < grid[0]; bx++) {
                int live = n;
                blockIdx.x = (unsigned)bx;
                blockIdx.y = (unsigned)by;
                blockIdx.z = (unsigned)bz;
                memset(shared, 0xcb, (size_t)smem + 16); /* garbage: NaN-like floats */
                at_emu_smem = shared;
                for (int t = 0; t < n; t++) {
                    getcontext(&at_emu_ctx[t]);
                    at_emu_ctx[t].uc_stack.ss_sp = at_emu_stack[t];
                    at_emu_ctx[t].uc_stack.ss_size = AT_EMU_STACK;
                    at_emu_ctx[t].uc_link = NULL;
                    makecontext(&at_emu_ctx[t], at_emu_trampoline, 0);
                    at_emu_state[t] = 0;
                }
                while (live > 0) {
                    int at_barrier = 0, finished = 0;
                    for (int t = 0; t < n; t++) {
                        if (at_emu_state[t] == 2)
                            continue;
                        at_emu_state[t] = 0;
                        at_emu_cur = t;
                        at_emu_set_thread(t);
                        swapcontext(&at_emu_sched, &at_emu_ctx[t]);
                    }
                    for (int t = 0; t < n; t++) {
                        at_barrier += at_emu_state[t] == 1;
                        finished += at_emu_state[t] == 2;
                    }
                    if (at_barrier > 0 && finished > 0) {
                        fprintf(stderr, "emu: block %d: %d threads at a barrier, %d returned\n",
                                bx, at_barrier, finished);
                        exit(3);
                    }
                    live = n - finished;
                }
            }
    free(shared);
}

#endif
