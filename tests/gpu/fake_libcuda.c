/* tests/gpu/fake_libcuda.c -- a stand-in for the CUDA driver (libcuda.so.1), so that the GPU
** agent's batch path runs on a machine without a GPU (tests/gpu/test_gpu_agent_batch.c compiles
** it with 'cc -shared' and points AT_LIBCUDA at it).  One device, "Fake GPU", sm_90, 132 SMs.
** Device memory is host memory.  A module is a line of text that says what its kernels do:
**
**   FAKE mode=M out=I bytes=N val=V [ms=T]
**
** every launch writes the float V into N bytes of parameter I (a device pointer) and moves
** a virtual clock (what events measure) by T milliseconds (default 0.01: 10 microseconds).  Modes: ok; oob (N + 4 bytes:
** into the guard zone); fault (the launch succeeds, then the context is lost: every later
** call answers 700, CUDA_ERROR_ILLEGAL_ADDRESS); launchfail (the launch answers 701); hang
** (the synchronisation never returns).  A module whose text starts with "BADPTX" does not
** load (218, with a JIT log).  Not part of any build: compiled by the test. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;

typedef struct fake_mod {
    char mode[32];
    int out;
    long bytes;
    float val;
    double ms; /* virtual milliseconds a launch takes (default 0.01) */
} fake_mod;

typedef struct fevent {
    double t;
} fevent;

static int lost;         /* the context is lost: every call fails with 700 */
static double vclock_ms; /* what events measure */

#define CHECK_LOST                                                                                 \
    do {                                                                                           \
        if (lost)                                                                                  \
            return 700;                                                                            \
    } while (0)

CUresult cuInit(unsigned flags)
{
    (void)flags;
    return 0;
}

CUresult cuDriverGetVersion(int *v)
{
    *v = 13000;
    return 0;
}

CUresult cuDeviceGetCount(int *n)
{
    *n = 1;
    return 0;
}

CUresult cuDeviceGet(int *dev, int ordinal)
{
    if (ordinal != 0)
        return 101; /* CUDA_ERROR_INVALID_DEVICE */
    *dev = 0;
    return 0;
}

CUresult cuDeviceGetName(char *name, int len, int dev)
{
    (void)dev;
    snprintf(name, (size_t)len, "Fake GPU");
    return 0;
}

CUresult cuDeviceGetAttribute(int *v, int attr, int dev)
{
    (void)dev;
    switch (attr) {
    case 13: *v = 1980000; break;  /* clock, kHz */
    case 16: *v = 132; break;      /* SMs */
    case 36: *v = 3201000; break;  /* memory clock, kHz */
    case 75: *v = 9; break;        /* compute capability */
    case 76: *v = 0; break;
    case 97: *v = 232448; break;   /* opt-in shared memory */
    default: *v = 0; break;
    }
    return 0;
}

CUresult cuDeviceTotalMem_v2(size_t *n, int dev)
{
    (void)dev;
    *n = (size_t)141 << 30;
    return 0;
}

CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev)
{
    (void)dev;
    *ctx = (void *)&lost;
    return 0;
}

CUresult cuCtxSetCurrent(void *ctx)
{
    (void)ctx;
    return 0;
}

static fake_mod *hung;

CUresult cuCtxSynchronize(void)
{
    CHECK_LOST;
    if (hung)
        for (;;)
            pause();
    return 0;
}

CUresult cuModuleLoadDataEx(void **mod, const void *image, unsigned n_opts, int *opts,
                            void **vals)
{
    const char *text = image;
    fake_mod *m;
    CHECK_LOST;
    if (strncmp(text, "BADPTX", 6) == 0) {
        for (unsigned i = 0; i < n_opts; i++)
            if (opts[i] == 5) /* CU_JIT_ERROR_LOG_BUFFER */
                snprintf(vals[i], 64, "ptxas fatal: fake syntax error");
        return 218; /* CUDA_ERROR_INVALID_PTX */
    }
    if ((m = calloc(1, sizeof *m)) == NULL)
        return 2;
    if (sscanf(text, "FAKE mode=%31s out=%d bytes=%ld val=%f", m->mode, &m->out, &m->bytes,
               &m->val) != 4) {
        free(m);
        return 218;
    }
    m->ms = 0.01;
    if (strstr(text, " ms=") != NULL)
        m->ms = atof(strstr(text, " ms=") + 4);
    *mod = m;
    return 0;
}

CUresult cuModuleGetFunction(void **fn, void *mod, const char *name)
{
    CHECK_LOST;
    if (strstr(name, "missing"))
        return 500; /* CUDA_ERROR_NOT_FOUND */
    *fn = mod;
    return 0;
}

CUresult cuModuleUnload(void *mod)
{
    free(mod);
    return 0;
}

CUresult cuFuncSetAttribute(void *fn, int attr, int v)
{
    (void)fn;
    (void)attr;
    (void)v;
    CHECK_LOST;
    return 0;
}

CUresult cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shared, void *stream, void **params,
                        void **extra)
{
    fake_mod *m = fn;
    float *out;
    long n;
    (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared, (void)stream;
    (void)extra;
    CHECK_LOST;
    if (strcmp(m->mode, "launchfail") == 0)
        return 701; /* CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES */
    out = (float *)(uintptr_t) * (unsigned long long *)params[m->out];
    n = m->bytes / 4 + (strcmp(m->mode, "oob") == 0 ? 1 : 0);
    for (long i = 0; i < n; i++)
        out[i] = m->val;
    vclock_ms += m->ms;
    if (strcmp(m->mode, "fault") == 0)
        lost = 1;
    if (strcmp(m->mode, "hang") == 0)
        hung = m;
    return 0;
}

CUresult cuMemAlloc_v2(unsigned long long *p, size_t n)
{
    void *q;
    CHECK_LOST;
    if ((q = malloc(n ? n : 1)) == NULL)
        return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
    *p = (unsigned long long)(uintptr_t)q;
    return 0;
}

CUresult cuMemFree_v2(unsigned long long p)
{
    free((void *)(uintptr_t)p);
    return 0;
}

CUresult cuMemcpyHtoD_v2(unsigned long long dst, const void *src, size_t n)
{
    CHECK_LOST;
    memcpy((void *)(uintptr_t)dst, src, n);
    return 0;
}

CUresult cuMemcpyDtoH_v2(void *dst, unsigned long long src, size_t n)
{
    CHECK_LOST;
    memcpy(dst, (const void *)(uintptr_t)src, n);
    return 0;
}

CUresult cuMemsetD8_v2(unsigned long long dst, unsigned char v, size_t n)
{
    CHECK_LOST;
    memset((void *)(uintptr_t)dst, v, n);
    return 0;
}

CUresult cuEventCreate(void **e, unsigned flags)
{
    (void)flags;
    *e = calloc(1, sizeof(fevent));
    return *e ? 0 : 2;
}

CUresult cuEventRecord(void *e, void *stream)
{
    (void)stream;
    CHECK_LOST;
    ((fevent *)e)->t = vclock_ms;
    return 0;
}

CUresult cuEventSynchronize(void *e)
{
    (void)e;
    return cuCtxSynchronize();
}

CUresult cuEventElapsedTime(float *ms, void *a, void *b)
{
    CHECK_LOST;
    *ms = (float)(((fevent *)b)->t - ((fevent *)a)->t);
    return 0;
}

static const char *name_of(CUresult r)
{
    switch (r) {
    case 0: return "CUDA_SUCCESS";
    case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
    case 101: return "CUDA_ERROR_INVALID_DEVICE";
    case 218: return "CUDA_ERROR_INVALID_PTX";
    case 500: return "CUDA_ERROR_NOT_FOUND";
    case 700: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case 701: return "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
    default: return NULL;
    }
}

CUresult cuGetErrorName(CUresult r, const char **s)
{
    *s = name_of(r);
    return *s ? 0 : 1;
}

CUresult cuGetErrorString(CUresult r, const char **s)
{
    *s = r == 700 ? "an illegal memory access was encountered" : name_of(r);
    return *s ? 0 : 1;
}
