/* rpc_agent/agt_cuda.c -- measuring on an NVIDIA GPU ('rpc_agent --device cuda:N').
**
** The CUDA driver is loaded with dlopen (libcuda.so.1, or $AT_LIBCUDA), never linked, so
** the agent builds and runs everywhere and a host without the driver says "no GPU".  The
** agent itself never loads it: a kernel fault poisons a CUDA context until its process
** ends, so every use of the driver is in a child that the launcher forks -- the probe at
** start-up (an empty batch: the child reports the GPU and exits) and one child per batch.
**
** A batch child (agt__cuda_child_main):
**   1. decode the batch, load the driver, take the device's primary context; READY;
**   2. per job: START; check the artifact is for this GPU (kind, sm_XX); load the module
**      (a PTX or cubin; the JIT log on failure: COMPILE_DEVICE); allocate the arguments on
**      the device with a guard zone after each (filled with a canary), inputs from
**      kn_rt_fill(seed, i) as on CPUs; the reference's outputs on the same inputs (its
**      launches on the GPU, once per reference and seed; START "reference" first);
**   3. one checked run (every output set to NaN first): an error of a launch or of the
**      synchronisation is RUNTIME_DEVICE with the driver's error name, and the child ends
**      right after reporting it (the context is lost; the agent starts a new child for the
**      jobs left); outputs within 1e-4 of the reference, guards and inputs intact;
**   4. timing with CUDA events: n_warmup untimed runs, then 'repeat' times 'number' runs
**      between two events ('number' grown to reach min_repeat_ms, as TVM does), seconds per
**      run of every repeat (the agent reports their median); RESULT.  A slow kernel (the
**      checked run, timed too, says the rest would not fit in 80% of the job's budget) gets
**      no warm-up and the repeats that fit, or the checked run's time as its one repeat.
** A kernel that hangs is killed by the agent's timeout (RUN_TIMEOUT), as on CPUs.  The
** child enters no seccomp filter and takes no address-space limit: the driver needs the
** whole system interface and reserves a large address space; the note in READY says so. */
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernels/kernels_rt.h"
#include "rpc_agent/agt_int.h"

#define REL_ERR_BOUND 1e-4
#define GUARD_BYTES 256
#define CANARY 0xa5

/* ---- the driver API, declared here (no cuda.h needed to build) ---- */

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUevent_st *CUevent;
typedef struct CUstream_st *CUstream;

enum {
    CU_DEVICE_ATTRIBUTE_CLOCK_RATE = 13,
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE = 36,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
    CU_JIT_ERROR_LOG_BUFFER = 5,
    CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
};

typedef struct cuda_api {
    void *lib;
    CUresult (*Init)(unsigned);
    CUresult (*DriverGetVersion)(int *);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetName)(char *, int, CUdevice);
    CUresult (*DeviceGetAttribute)(int *, int, CUdevice);
    CUresult (*DeviceTotalMem)(size_t *, CUdevice);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*CtxSynchronize)(void);
    CUresult (*ModuleLoadDataEx)(CUmodule *, const void *, unsigned, int *, void **);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*ModuleUnload)(CUmodule);
    CUresult (*FuncSetAttribute)(CUfunction, int, int);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, CUstream, void **, void **);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
    CUresult (*EventCreate)(CUevent *, unsigned);
    CUresult (*EventRecord)(CUevent, CUstream);
    CUresult (*EventSynchronize)(CUevent);
    CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
    CUresult (*GetErrorName)(CUresult, const char **);
    CUresult (*GetErrorString)(CUresult, const char **);
} cuda_api;

/* Load the driver; 0 on success, else -1 with the reason in 'why'. */
static int cuda_load(cuda_api *c, char *why, size_t n)
{
    const char *path = getenv("AT_LIBCUDA");
    memset(c, 0, sizeof *c);
    if (path == NULL || path[0] == 0)
        path = "libcuda.so.1";
    if ((c->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL)) == NULL) {
        const char *e = dlerror();
        snprintf(why, n, "no GPU: the CUDA driver (%s) cannot be loaded: %s", path,
                 e ? e : "not found");
        return -1;
    }
#define SYM(field, name)                                                                           \
    do {                                                                                           \
        *(void **)&c->field = dlsym(c->lib, name);                                                 \
        if (c->field == NULL) {                                                                    \
            snprintf(why, n, "no GPU: the CUDA driver %s has no %s", path, name);                  \
            return -1;                                                                             \
        }                                                                                          \
    } while (0)
    SYM(Init, "cuInit");
    SYM(DriverGetVersion, "cuDriverGetVersion");
    SYM(DeviceGetCount, "cuDeviceGetCount");
    SYM(DeviceGet, "cuDeviceGet");
    SYM(DeviceGetName, "cuDeviceGetName");
    SYM(DeviceGetAttribute, "cuDeviceGetAttribute");
    SYM(DeviceTotalMem, "cuDeviceTotalMem_v2");
    SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    SYM(CtxSetCurrent, "cuCtxSetCurrent");
    SYM(CtxSynchronize, "cuCtxSynchronize");
    SYM(ModuleLoadDataEx, "cuModuleLoadDataEx");
    SYM(ModuleGetFunction, "cuModuleGetFunction");
    SYM(ModuleUnload, "cuModuleUnload");
    SYM(FuncSetAttribute, "cuFuncSetAttribute");
    SYM(LaunchKernel, "cuLaunchKernel");
    SYM(MemAlloc, "cuMemAlloc_v2");
    SYM(MemFree, "cuMemFree_v2");
    SYM(MemcpyHtoD, "cuMemcpyHtoD_v2");
    SYM(MemcpyDtoH, "cuMemcpyDtoH_v2");
    SYM(MemsetD8, "cuMemsetD8_v2");
    SYM(EventCreate, "cuEventCreate");
    SYM(EventRecord, "cuEventRecord");
    SYM(EventSynchronize, "cuEventSynchronize");
    SYM(GetErrorName, "cuGetErrorName");
    SYM(GetErrorString, "cuGetErrorString");
#undef SYM
    *(void **)&c->EventElapsedTime = dlsym(c->lib, "cuEventElapsedTime_v2");
    if (c->EventElapsedTime == NULL)
        *(void **)&c->EventElapsedTime = dlsym(c->lib, "cuEventElapsedTime");
    if (c->EventElapsedTime == NULL) {
        snprintf(why, n, "no GPU: the CUDA driver %s has no cuEventElapsedTime", path);
        return -1;
    }
    return 0;
}

static const char *cu_name(const cuda_api *c, CUresult r)
{
    const char *s = NULL;
    if (c->GetErrorName == NULL || c->GetErrorName(r, &s) != 0 || s == NULL)
        return "CUDA_ERROR_UNKNOWN";
    return s;
}

static const char *cu_text(const cuda_api *c, CUresult r)
{
    const char *s = NULL;
    if (c->GetErrorString == NULL || c->GetErrorString(r, &s) != 0 || s == NULL)
        return "";
    return s;
}

/* The device's description: "gpu|name|major|minor|sms|clock kHz|memory clock kHz|driver
** version|memory bytes|shared opt-in bytes" (what the probe sends in READY). */
static int describe(const cuda_api *c, CUdevice dev, char *out, size_t n, char *why, size_t wn)
{
    char name[256] = "";
    int att[6] = {0}, drv = 0;
    static const int which[6] = {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                 CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                 CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                 CU_DEVICE_ATTRIBUTE_CLOCK_RATE,
                                 CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE,
                                 CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN};
    size_t mem = 0;
    CUresult r;
    if ((r = c->DeviceGetName(name, (int)sizeof name - 1, dev)) != 0) {
        snprintf(why, wn, "cuDeviceGetName: %s", cu_name(c, r));
        return -1;
    }
    for (int i = 0; i < 6; i++)
        c->DeviceGetAttribute(&att[i], which[i], dev);
    c->DriverGetVersion(&drv);
    c->DeviceTotalMem(&mem, dev);
    for (char *p = name; *p; p++)
        if (*p == '|')
            *p = '/';
    snprintf(out, n, "gpu|%s|%d|%d|%d|%d|%d|%d|%zu|%d", name, att[0], att[1], att[2], att[3],
             att[4], drv, mem, att[5]);
    return 0;
}

/* ---- the agent's side: the probe ---- */

int agt_device_parse(const char *s, int *index)
{
    char *end;
    long v;
    if (s != NULL && strcmp(s, "cpu") == 0) {
        *index = -1;
        return 0;
    }
    if (s == NULL || strncmp(s, "cuda", 4) != 0)
        return -1;
    if (s[4] == 0) {
        *index = 0;
        return 0;
    }
    if (s[4] != ':' || s[5] < '0' || s[5] > '9')
        return -1;
    v = strtol(s + 5, &end, 10);
    if (*end != 0 || v < 0 || v > 63)
        return -1;
    *index = (int)v;
    return 0;
}

static int read_all_timeout(int fd, void *p, size_t n, int timeout_ms)
{
    char *c = p;
    double end = at_time_mono_s() + timeout_ms / 1000.0;
    while (n > 0) {
        struct pollfd q = {fd, POLLIN, 0};
        int left = (int)((end - at_time_mono_s()) * 1000);
        ssize_t r;
        if (left <= 0 || poll(&q, 1, left) <= 0)
            return -1;
        r = read(fd, c, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

at_err agt__cuda_probe(agt_launcher *l, int index, agt_gpu *gpu, char *errmsg, size_t n)
{
    at_wire_msg m;
    at_buf frame;
    agt_launch_hdr h;
    agt_report rep;
    char note[1024] = "";
    uint8_t *rx;
    double end;
    int exited = 0, pid;
    memset(gpu, 0, sizeof *gpu);
    at_buf_init(&frame);
    at_wire_msg_init(&m, AT_WIRE_T_SBX_BATCH);
    m.u.batch.default_threads = 1;
    if (at_wire_encode(NULL, &m, &frame) != AT_OK) {
        at_wire_msg_fini(&m);
        at_buf_fini(&frame);
        return AT_ENOMEM;
    }
    at_wire_msg_fini(&m);
    memset(&h, 0, sizeof h);
    h.magic = AGT_LAUNCH_MAGIC;
    h.len = (uint32_t)frame.len;
    h.flags = AGT_LAUNCH_CUDA;
    h.reserved = (uint32_t)index;
    if (agt__write_all(l->ctl_fd, &h, sizeof h) != 0 || agt__write_all(l->ctl_fd, frame.data, frame.len) != 0 ||
        read_all_timeout(l->ctl_fd, &rep, sizeof rep, 20000) != 0 || rep.kind != AGT_REP_STARTED) {
        at_buf_fini(&frame);
        snprintf(errmsg, n, "the launcher cannot start the GPU probe");
        return AT_EIO;
    }
    at_buf_fini(&frame);
    pid = rep.pid;
    rx = at_malloc(64u << 10);
    if (rx == NULL) {
        kill(-pid, SIGKILL);
        return AT_ENOMEM;
    }
    /* the READY event, then the child's exit (a child that ends without READY says
    ** nothing: "the probe reported nothing") */
    end = at_time_mono_s() + 60.0;
    while (!exited && at_time_mono_s() < end) {
        struct pollfd q[2] = {{l->ev_fd, POLLIN, 0}, {l->ctl_fd, POLLIN, 0}};
        if (poll(q, 2, 200) <= 0)
            continue;
        for (;;) { /* every event queued, before the exit report is read */
            ssize_t got = recv(l->ev_fd, rx, 64u << 10, MSG_DONTWAIT);
            at_wire_msg ev;
            if (got <= 0)
                break;
            if (at_wire_decode(NULL, rx, (size_t)got, &ev, NULL, 0) == AT_OK &&
                ev.type == AT_WIRE_T_SBX_EVENT && ev.u.event.kind == AT_WIRE_SBX_READY &&
                ev.u.event.note && note[0] == 0)
                snprintf(note, sizeof note, "%s", ev.u.event.note);
            at_wire_msg_fini(&ev);
        }
        if (q[1].revents & (POLLIN | POLLHUP)) {
            if (read_all_timeout(l->ctl_fd, &rep, sizeof rep, 1000) != 0)
                break;
            exited = rep.kind == AGT_REP_EXITED && rep.pid == pid;
        }
    }
    at_free(rx);
    if (!exited) {
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
        if (read_all_timeout(l->ctl_fd, &rep, sizeof rep, 5000) != 0)
            snprintf(errmsg, n, "the GPU probe did not end within 60 s, and the launcher is gone");
        else
            snprintf(errmsg, n, "the GPU probe did not end within 60 s (killed)");
        return AT_EIO;
    }
    if (note[0] == 0 && WIFSIGNALED(rep.status)) {
        snprintf(errmsg, n, "no GPU: the probe died of %s (the CUDA driver?)",
                 agt__signal_text(WTERMSIG(rep.status)));
        return AT_EUNSUPPORTED;
    }
    if (strncmp(note, "gpu|", 4) == 0) {
        char *f[10], *save = NULL, *p;
        int k = 0;
        for (p = strtok_r(note, "|", &save); p && k < 10; p = strtok_r(NULL, "|", &save))
            f[k++] = p;
        if (k != 10) {
            snprintf(errmsg, n, "the GPU probe sent a malformed description");
            return AT_EIO;
        }
        snprintf(gpu->name, sizeof gpu->name, "%s", f[1]);
        gpu->cc_major = atoi(f[2]);
        gpu->cc_minor = atoi(f[3]);
        gpu->n_sms = atoi(f[4]);
        gpu->clock_khz = atoi(f[5]);
        gpu->mem_clock_khz = atoi(f[6]);
        gpu->driver = atoi(f[7]);
        gpu->mem_bytes = strtoll(f[8], NULL, 10);
        gpu->max_shared = atoi(f[9]);
        gpu->index = index;
        return AT_OK;
    }
    if (note[0])
        snprintf(errmsg, n, "%s", note);
    else
        snprintf(errmsg, n, "no GPU: the probe reported nothing (exit status %d)",
                 WIFEXITED(rep.status) ? WEXITSTATUS(rep.status) : -1);
    return AT_EUNSUPPORTED;
}

/* ---- the batch child ---- */

typedef struct dset {
    const at_wire_artifact *sig;
    uint64_t seed;
    CUdeviceptr base[AT_WIRE_MAX_ARGS]; /* allocation: buffer, then GUARD_BYTES */
    size_t n[AT_WIRE_MAX_ARGS];
    uint64_t in_hash[AT_WIRE_MAX_ARGS];
} dset;

typedef struct cref {
    const at_wire_ref *ref;
    uint64_t seed;
    void *out[AT_WIRE_MAX_ARGS]; /* host copies of its outputs */
    int failed;
    char why[512];
} cref;

typedef struct cchild {
    int ev;
    at_buf out;
    const at_wire_sbx_batch *b;
    cuda_api cu;
    int cc_major, cc_minor, max_shared;
    dset *sets;
    int n_sets;
    cref *refs;
    int n_refs;
    CUevent ev0, ev1;
} cchild;

static void send_ready(cchild *c, const char *note)
{
    agt__send_note(c->ev, &c->out, AT_WIRE_SBX_READY, 0, note);
}

static void send_start(cchild *c, int index, const char *note)
{
    agt__send_note(c->ev, &c->out, AT_WIRE_SBX_START, index, note);
}

static void send_result(cchild *c, int index, int status, const double *costs, int n_costs,
                        const char *text)
{
    agt__send_result(c->ev, &c->out, c->b->jobs[index].id, index, status, costs, n_costs, text);
}

static size_t arg_bytes(const at_wire_arg *a)
{
    int64_t n = at_dtype_bytes((at_dtype)a->dtype);
    for (int d = 0; d < a->n_dims; d++)
        n *= a->shape[d];
    return (size_t)n;
}

/* A device buffer and its guard zone: set the guard to the canary. */
static CUresult dalloc(cchild *c, size_t n, CUdeviceptr *out)
{
    CUresult r = c->cu.MemAlloc(out, n + GUARD_BYTES);
    if (r == 0)
        r = c->cu.MemsetD8(*out + n, CANARY, GUARD_BYTES);
    return r;
}

static int guard_intact(cchild *c, CUdeviceptr p, size_t n)
{
    unsigned char g[GUARD_BYTES];
    if (c->cu.MemcpyDtoH(g, p + n, GUARD_BYTES) != 0)
        return 0;
    for (int i = 0; i < GUARD_BYTES; i++)
        if (g[i] != CANARY)
            return 0;
    return 1;
}

/* Inputs on the device, filled from the seed; outputs allocated. */
static dset *get_set(cchild *c, const at_wire_artifact *sig, uint64_t seed, char *why, size_t wn)
{
    dset *s;
    for (int i = 0; i < c->n_sets; i++)
        if (c->sets[i].seed == seed && agt__same_sig(c->sets[i].sig, sig))
            return &c->sets[i];
    s = &c->sets[c->n_sets];
    memset(s, 0, sizeof *s);
    s->sig = sig;
    s->seed = seed;
    for (int i = 0; i < sig->n_args; i++) {
        const at_wire_arg *a = &sig->args[i];
        CUresult r;
        s->n[i] = arg_bytes(a);
        if ((r = dalloc(c, s->n[i], &s->base[i])) != 0) {
            snprintf(why, wn, "cannot allocate %zu bytes on the GPU for argument %d: %s", s->n[i],
                     i, cu_name(&c->cu, r));
            return NULL;
        }
        if (!a->is_output) {
            void *h = malloc(s->n[i] ? s->n[i] : 1);
            int64_t elems = (int64_t)(s->n[i] / (size_t)at_dtype_bytes((at_dtype)a->dtype));
            if (h == NULL) {
                snprintf(why, wn, "out of host memory");
                return NULL;
            }
            kn_rt_fill(h, (at_dtype)a->dtype, elems, seed, (uint32_t)i);
            s->in_hash[i] = at_hash64(h, s->n[i]);
            r = c->cu.MemcpyHtoD(s->base[i], h, s->n[i]);
            free(h);
            if (r != 0) {
                snprintf(why, wn, "cannot copy argument %d to the GPU: %s", i, cu_name(&c->cu, r));
                return NULL;
            }
        }
    }
    c->n_sets++;
    return s;
}

typedef struct kmod {
    CUmodule mod;
    CUfunction fn[AT_WIRE_MAX_LAUNCHES];
    CUdeviceptr ws;
    size_t ws_n;
} kmod;

static void kmod_free(cchild *c, kmod *k)
{
    if (k->mod)
        c->cu.ModuleUnload(k->mod);
    if (k->ws)
        c->cu.MemFree(k->ws);
    memset(k, 0, sizeof *k);
}

/* Load an artifact's module, its kernels and its workspace; 0 or -1 with 'why'. */
static int kmod_load(cchild *c, const at_wire_artifact *a, kmod *k, char *why, size_t wn)
{
    char log[2048] = "";
    int opts[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *vals[2] = {log, (void *)(uintptr_t)(sizeof log - 1)};
    int arch = 0;
    CUresult r;
    memset(k, 0, sizeof *k);
    if (a->gpu_kind == AT_WIRE_GPU_NONE || a->n_launches < 1) {
        snprintf(why, wn, "the artifact is not a GPU kernel (%s)", a->triple);
        return -1;
    }
    if (a->gpu_arch == NULL || sscanf(a->gpu_arch, "sm_%d", &arch) != 1 || arch <= 0) {
        snprintf(why, wn, "the artifact names no GPU architecture");
        return -1;
    }
    /* a cubin runs on its own major version with the same or a newer minor; PTX on any
    ** newer GPU (the driver compiles it) */
    if ((a->gpu_kind == AT_WIRE_GPU_CUBIN &&
         (arch / 10 != c->cc_major || arch % 10 > c->cc_minor)) ||
        (a->gpu_kind == AT_WIRE_GPU_PTX && arch > c->cc_major * 10 + c->cc_minor)) {
        snprintf(why, wn, "the kernel was built for %s (%s); this GPU is sm_%d%d", a->gpu_arch,
                 a->gpu_kind == AT_WIRE_GPU_CUBIN ? "cubin" : "PTX", c->cc_major, c->cc_minor);
        return -1;
    }
    if (a->gpu_kind == AT_WIRE_GPU_PTX && memchr(a->obj, 0, a->obj_size) == NULL) {
        snprintf(why, wn, "the PTX text is not NUL-terminated");
        return -1;
    }
    if ((r = c->cu.ModuleLoadDataEx(&k->mod, a->obj, 2, opts, vals)) != 0) {
        k->mod = NULL;
        snprintf(why, wn, "the GPU cannot load the module: %s (%s) %.1500s", cu_name(&c->cu, r),
                 cu_text(&c->cu, r), log);
        return -1;
    }
    for (int i = 0; i < a->n_launches; i++) {
        const at_wire_launch *l = &a->launches[i];
        if ((r = c->cu.ModuleGetFunction(&k->fn[i], k->mod, l->entry)) != 0) {
            snprintf(why, wn, "the module has no kernel '%s': %s", l->entry, cu_name(&c->cu, r));
            kmod_free(c, k);
            return -1;
        }
        if (l->shared_bytes > 48 * 1024) {
            if (l->shared_bytes > c->max_shared) {
                snprintf(why, wn, "launch %d needs %d bytes of shared memory; this GPU has %d", i,
                         l->shared_bytes, c->max_shared);
                kmod_free(c, k);
                return -1;
            }
            if ((r = c->cu.FuncSetAttribute(k->fn[i], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                            l->shared_bytes)) != 0) {
                snprintf(why, wn, "launch %d: cannot allow %d bytes of shared memory: %s", i,
                         l->shared_bytes, cu_name(&c->cu, r));
                kmod_free(c, k);
                return -1;
            }
        }
    }
    k->ws_n = (size_t)a->ws_fixed;
    if (k->ws_n > 0 && (r = dalloc(c, k->ws_n, &k->ws)) != 0) {
        snprintf(why, wn, "cannot allocate the %zu-byte workspace: %s", k->ws_n, cu_name(&c->cu, r));
        k->ws = 0;
        kmod_free(c, k);
        return -1;
    }
    return 0;
}

/* Every launch of 'a' on the buffers 'bufs' (device pointers); the first error. */
static CUresult run_launches(cchild *c, const at_wire_artifact *a, const kmod *k,
                             const CUdeviceptr *bufs)
{
    void *params[AT_WIRE_MAX_ARGS + 1];
    CUdeviceptr args[AT_WIRE_MAX_ARGS + 1];
    for (int i = 0; i < a->n_args; i++) {
        args[i] = bufs[i];
        params[i] = &args[i];
    }
    args[a->n_args] = k->ws;
    params[a->n_args] = &args[a->n_args];
    for (int i = 0; i < a->n_launches; i++) {
        const at_wire_launch *l = &a->launches[i];
        CUresult r = c->cu.LaunchKernel(k->fn[i], (unsigned)l->grid[0], (unsigned)l->grid[1],
                                        (unsigned)l->grid[2], (unsigned)l->block[0],
                                        (unsigned)l->block[1], (unsigned)l->block[2],
                                        (unsigned)l->shared_bytes, NULL, params, NULL);
        if (r != 0)
            return r;
    }
    return 0;
}

/* A fatal device error: report it and end (the context cannot be used again). */
static void fatal(cchild *c, int index, int status, const char *what, CUresult r)
    __attribute__((noreturn));
static void fatal(cchild *c, int index, int status, const char *what, CUresult r)
{
    char text[512];
    snprintf(text, sizeof text, "%s: %s (%d: %s)", what, cu_name(&c->cu, r), r,
             cu_text(&c->cu, r));
    send_result(c, index, status, NULL, 0, text);
    _exit(0);
}

static const at_wire_ref *find_ref(const at_wire_sbx_batch *b, const uint8_t *id)
{
    for (int i = 0; i < b->n_refs; i++)
        if (memcmp(b->refs[i].id, id, AT_WIRE_REFID_BYTES) == 0)
            return &b->refs[i];
    return NULL;
}

/* The reference's outputs on the set's inputs (computed once). */
static cref *get_ref(cchild *c, int index, const at_wire_ref *ref, dset *s)
{
    cref *o;
    kmod k;
    CUdeviceptr bufs[AT_WIRE_MAX_ARGS];
    CUresult r;
    for (int i = 0; i < c->n_refs; i++)
        if (c->refs[i].ref == ref && c->refs[i].seed == s->seed)
            return &c->refs[i];
    o = &c->refs[c->n_refs++];
    memset(o, 0, sizeof *o);
    o->ref = ref;
    o->seed = s->seed;
    send_start(c, index, "reference");
    if (kmod_load(c, &ref->art, &k, o->why, sizeof o->why) != 0) {
        o->failed = 1;
        return o;
    }
    for (int i = 0; i < ref->art.n_args; i++) {
        bufs[i] = s->base[i];
        if (ref->art.args[i].is_output && (r = c->cu.MemsetD8(s->base[i], 0xff, s->n[i])) != 0)
            fatal(c, index, AT_MEASURE_UNKNOWN_ERROR, "the reference's outputs", r);
    }
    if ((r = run_launches(c, &ref->art, &k, bufs)) != 0 || (r = c->cu.CtxSynchronize()) != 0)
        fatal(c, index, AT_MEASURE_UNKNOWN_ERROR, "the task's reference kernel failed on the GPU",
              r);
    for (int i = 0; i < ref->art.n_args; i++) {
        if (!ref->art.args[i].is_output)
            continue;
        if ((o->out[i] = malloc(s->n[i] ? s->n[i] : 1)) == NULL ||
            (r = c->cu.MemcpyDtoH(o->out[i], s->base[i], s->n[i])) != 0) {
            o->failed = 1;
            snprintf(o->why, sizeof o->why, "cannot read the reference's output %d", i);
        }
    }
    kmod_free(c, &k);
    return o;
}

static void run_job(cchild *c, int index)
{
    const at_wire_job *w = &c->b->jobs[index];
    const at_wire_artifact *a = &w->art;
    char why[2048];
    dset *s;
    cref *ro = NULL;
    kmod k;
    CUdeviceptr bufs[AT_WIRE_MAX_ARGS];
    double costs[AT_WIRE_MAX_COSTS];
    CUresult r;
    int number, n_warmup = w->run.n_warmup, repeat = w->run.repeat;
    double t_job, check_ms = 0;

    if (w->run.cooldown_ms > 0) {
        struct timespec ts = {w->run.cooldown_ms / 1000, (long)(w->run.cooldown_ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
    send_start(c, index, "");
    t_job = at_time_mono_s();
    if ((s = get_set(c, a, w->seed, why, sizeof why)) == NULL) {
        send_result(c, index, AT_MEASURE_UNKNOWN_ERROR, NULL, 0, why);
        return;
    }
    if (w->has_ref) {
        const at_wire_ref *ref = find_ref(c->b, w->ref);
        if (ref == NULL) {
            send_result(c, index, AT_MEASURE_UNKNOWN_ERROR, NULL, 0,
                        "the task's reference artifact did not reach the device");
            return;
        }
        if (!agt__same_sig(&ref->art, a)) {
            send_result(c, index, AT_MEASURE_UNKNOWN_ERROR, NULL, 0,
                        "the task's reference has another argument signature than the kernel");
            return;
        }
        ro = get_ref(c, index, ref, s);
        if (ro->failed) {
            snprintf(why, sizeof why, "the task's reference kernel: %s", ro->why);
            send_result(c, index, AT_MEASURE_UNKNOWN_ERROR, NULL, 0, why);
            return;
        }
        send_start(c, index, ""); /* the job's own time starts now */
        t_job = at_time_mono_s();
    }
    if (kmod_load(c, a, &k, why, sizeof why) != 0) {
        send_result(c, index, AT_MEASURE_COMPILE_DEVICE, NULL, 0, why);
        return;
    }
    /* the checked run */
    for (int i = 0; i < a->n_args; i++) {
        bufs[i] = s->base[i];
        if (a->args[i].is_output && (r = c->cu.MemsetD8(s->base[i], 0xff, s->n[i])) != 0)
            fatal(c, index, AT_MEASURE_RUNTIME_DEVICE, "clearing the outputs", r);
    }
    {
        /* timed too (events; 0 when they fail): a slow kernel's timing is cut to fit below */
        int timed = c->cu.EventRecord(c->ev0, NULL) == 0;
        float ms = 0;
        if ((r = run_launches(c, a, &k, bufs)) != 0)
            fatal(c, index, AT_MEASURE_RUNTIME_DEVICE, "the launch failed", r);
        timed = timed && c->cu.EventRecord(c->ev1, NULL) == 0;
        if ((r = c->cu.CtxSynchronize()) != 0)
            fatal(c, index, AT_MEASURE_RUNTIME_DEVICE, "the kernel failed on the GPU", r);
        if (timed && c->cu.EventElapsedTime(&ms, c->ev0, c->ev1) == 0 && ms > 0)
            check_ms = ms;
    }
    for (int i = 0; i < a->n_args; i++) {
        if (!guard_intact(c, s->base[i], s->n[i])) {
            snprintf(why, sizeof why, "the kernel wrote out of bounds of argument %d", i);
            c->cu.MemsetD8(s->base[i] + s->n[i], CANARY, GUARD_BYTES);
            send_result(c, index, AT_MEASURE_RUNTIME_DEVICE, NULL, 0, why);
            kmod_free(c, &k);
            return;
        }
        if (ro && a->args[i].is_output) {
            void *h = malloc(s->n[i] ? s->n[i] : 1);
            double e = 1.0 / 0.0;
            int64_t elems = (int64_t)(s->n[i] / (size_t)at_dtype_bytes((at_dtype)a->args[i].dtype));
            if (h && c->cu.MemcpyDtoH(h, s->base[i], s->n[i]) == 0)
                e = kn_rt_rel_err(h, ro->out[i], (at_dtype)a->args[i].dtype, elems);
            free(h);
            if (!(e <= REL_ERR_BOUND)) {
                snprintf(why, sizeof why, "output argument %d differs from the reference: relative "
                         "error %.3g (bound %g)", i, e, REL_ERR_BOUND);
                send_result(c, index, AT_MEASURE_WRONG_ANSWER, NULL, 0, why);
                kmod_free(c, &k);
                return;
            }
        }
    }
    if (k.ws && !guard_intact(c, k.ws, k.ws_n)) {
        send_result(c, index, AT_MEASURE_RUNTIME_DEVICE, NULL, 0,
                    "the kernel wrote out of bounds of its workspace");
        kmod_free(c, &k);
        return;
    }
    /* A slow kernel: when the warm-ups and repeats would not fit in 80% of what is left of
    ** the job's budget, no warm-up and only the repeats that fit; none fits: the checked
    ** run's time is the one repeat.  A result with fewer repeats instead of a timeout that
    ** loses the measurement (and the context with it). */
    repeat = agt__fit_repeats(check_ms / 1000.0,
                              w->run.timeout_ms / 1000.0 - (at_time_mono_s() - t_job),
                              w->run.number, repeat, &n_warmup);
    if (repeat == 0) {
        costs[0] = check_ms / 1000.0;
        kmod_free(c, &k);
        send_result(c, index, AT_MEASURE_NO_ERROR, costs, 1, "");
        return;
    }
    /* timing */
    for (int i = 0; i < n_warmup; i++)
        if ((r = run_launches(c, a, &k, bufs)) != 0)
            fatal(c, index, AT_MEASURE_RUNTIME_DEVICE, "a warm-up launch failed", r);
    number = w->run.number;
    for (int rep = 0; rep < repeat; rep++) {
        float ms = 0;
        for (int grow = 0; grow < 20; grow++) {
            if ((r = c->cu.EventRecord(c->ev0, NULL)) != 0)
                fatal(c, index, AT_MEASURE_RUNTIME_DEVICE, "cuEventRecord", r);
            for (int i = 0; i < number; i++)
                if ((r = run_launches(c, a, &k, bufs)) != 0)
                    fatal(c, index, AT_MEASURE_RUNTIME_DEVICE, "a timed launch failed", r);
            if ((r = c->cu.EventRecord(c->ev1, NULL)) != 0 ||
                (r = c->cu.EventSynchronize(c->ev1)) != 0)
                fatal(c, index, AT_MEASURE_RUNTIME_DEVICE, "the kernel failed while timed", r);
            if ((r = c->cu.EventElapsedTime(&ms, c->ev0, c->ev1)) != 0)
                fatal(c, index, AT_MEASURE_RUNTIME_DEVICE, "cuEventElapsedTime", r);
            if (ms >= w->run.min_repeat_ms || number >= (1 << 20))
                break;
            /* too short to time well: more calls, as TVM's time_evaluator does */
            {
                double per = ms > 0 ? ms / number : 1e-3;
                int next = (int)(w->run.min_repeat_ms / per) + 1;
                if (next < number * 1.618)
                    next = (int)(number * 1.618) + 1;
                number = next > (1 << 20) ? (1 << 20) : next;
            }
        }
        costs[rep] = ms / 1000.0 / number;
    }
    kmod_free(c, &k);
    send_result(c, index, AT_MEASURE_NO_ERROR, costs, repeat, "");
}

/* ---- one run in this process, for tools ---- */

at_err agt_cuda_run_once(int device, const at_wire_artifact *a, void *const *bufs,
                         char *errmsg, size_t n)
{
    static cchild c; /* the driver and the context stay for the process */
    static int ready = 0;
    CUdeviceptr dev[AT_WIRE_MAX_ARGS];
    size_t bytes[AT_WIRE_MAX_ARGS];
    kmod k;
    CUresult r = 0;
    at_err err = AT_OK;
    if (a->n_args > AT_WIRE_MAX_ARGS)
        return AT_EINVAL;
    if (!ready) {
        CUdevice d;
        CUcontext ctx;
        if (cuda_load(&c.cu, errmsg, n) != 0)
            return AT_EUNSUPPORTED;
        if ((r = c.cu.Init(0)) != 0 || (r = c.cu.DeviceGet(&d, device)) != 0) {
            snprintf(errmsg, n, "no GPU: cuda:%d is not there (error %d, %s)", device, r,
                     cu_name(&c.cu, r));
            return AT_EUNSUPPORTED;
        }
        c.cu.DeviceGetAttribute(&c.cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d);
        c.cu.DeviceGetAttribute(&c.cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d);
        c.cu.DeviceGetAttribute(&c.max_shared,
                                CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, d);
        if ((r = c.cu.DevicePrimaryCtxRetain(&ctx, d)) != 0 || (r = c.cu.CtxSetCurrent(ctx)) != 0) {
            snprintf(errmsg, n, "the GPU's context cannot be made: %s", cu_name(&c.cu, r));
            return AT_EIO;
        }
        ready = 1;
    }
    if (kmod_load(&c, a, &k, errmsg, n) != 0)
        return AT_ECODEGEN;
    memset(dev, 0, sizeof dev);
    for (int i = 0; i < a->n_args && r == 0; i++) {
        bytes[i] = arg_bytes(&a->args[i]);
        if ((r = dalloc(&c, bytes[i], &dev[i])) == 0)
            r = a->args[i].is_output ? c.cu.MemsetD8(dev[i], 0xff, bytes[i])
                                     : c.cu.MemcpyHtoD(dev[i], bufs[i], bytes[i]);
    }
    if (r != 0) {
        snprintf(errmsg, n, "cannot set up the arguments on the GPU: %s", cu_name(&c.cu, r));
        err = AT_EIO;
    } else if ((r = run_launches(&c, a, &k, dev)) != 0 || (r = c.cu.CtxSynchronize()) != 0) {
        snprintf(errmsg, n, "the kernel failed on the GPU: %s (%d: %s)", cu_name(&c.cu, r), r,
                 cu_text(&c.cu, r));
        err = AT_EIO;
    }
    for (int i = 0; i < a->n_args && err == AT_OK; i++) {
        if (!guard_intact(&c, dev[i], bytes[i])) {
            snprintf(errmsg, n, "the kernel wrote out of bounds of argument %d", i);
            err = AT_EIO;
        } else if (a->args[i].is_output && (r = c.cu.MemcpyDtoH(bufs[i], dev[i], bytes[i])) != 0) {
            snprintf(errmsg, n, "cannot read output %d: %s", i, cu_name(&c.cu, r));
            err = AT_EIO;
        }
    }
    if (err == AT_OK && k.ws && !guard_intact(&c, k.ws, k.ws_n)) {
        snprintf(errmsg, n, "the kernel wrote out of bounds of its workspace");
        err = AT_EIO;
    }
    for (int i = 0; i < a->n_args; i++)
        if (dev[i])
            c.cu.MemFree(dev[i]);
    kmod_free(&c, &k);
    return err;
}

void agt__cuda_child_main(const uint8_t *batch, size_t n, int ev, int device)
{
    static const int fatal_sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGSYS, SIGTRAP};
    at_wire_msg m;
    cchild c;
    char err[512], note[1024];
    CUdevice dev;
    CUcontext ctx;
    CUresult r;
    struct rlimit rl;
    memset(&c, 0, sizeof c);
    c.ev = ev;
    for (size_t i = 0; i < AT_ARRAY_LEN(fatal_sigs); i++)
        signal(fatal_sigs[i], SIG_DFL);
    rl.rlim_cur = rl.rlim_max = 0;
    setrlimit(RLIMIT_CORE, &rl);
    at_buf_init(&c.out);
    if (at_wire_decode(NULL, batch, n, &m, err, sizeof err) != AT_OK ||
        m.type != AT_WIRE_T_SBX_BATCH)
        _exit(3);
    c.b = &m.u.batch;
    if (cuda_load(&c.cu, note, sizeof note) != 0) {
        if (c.b->n_jobs == 0)
            send_ready(&c, note);
        for (int i = 0; i < c.b->n_jobs; i++)
            send_result(&c, i, AT_MEASURE_DEVICE_LOST, NULL, 0, note);
        _exit(0);
    }
    if ((r = c.cu.Init(0)) != 0 || (r = c.cu.DeviceGet(&dev, device)) != 0) {
        int count = 0;
        c.cu.DeviceGetCount(&count);
        snprintf(note, sizeof note, "no GPU: cuda:%d is not there (error %d, %s%s%s; %d devices)",
                 device, r, cu_name(&c.cu, r), cu_text(&c.cu, r)[0] ? ": " : "",
                 cu_text(&c.cu, r), count);
        if (c.b->n_jobs == 0)
            send_ready(&c, note);
        for (int i = 0; i < c.b->n_jobs; i++)
            send_result(&c, i, AT_MEASURE_DEVICE_LOST, NULL, 0, note);
        _exit(0);
    }
    if (c.b->n_jobs == 0) {
        /* the probe */
        if (describe(&c.cu, dev, note, sizeof note, err, sizeof err) != 0)
            snprintf(note, sizeof note, "no GPU: %s", err);
        send_ready(&c, note);
        _exit(0);
    }
    c.cu.DeviceGetAttribute(&c.cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    c.cu.DeviceGetAttribute(&c.cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    c.cu.DeviceGetAttribute(&c.max_shared, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                            dev);
    if ((r = c.cu.DevicePrimaryCtxRetain(&ctx, dev)) != 0 || (r = c.cu.CtxSetCurrent(ctx)) != 0 ||
        (r = c.cu.EventCreate(&c.ev0, 0)) != 0 || (r = c.cu.EventCreate(&c.ev1, 0)) != 0) {
        snprintf(note, sizeof note, "the GPU's context cannot be made: %s (%s)", cu_name(&c.cu, r),
                 cu_text(&c.cu, r));
        for (int i = 0; i < c.b->n_jobs; i++)
            send_result(&c, i, AT_MEASURE_DEVICE_LOST, NULL, 0, note);
        _exit(0);
    }
    c.sets = calloc((size_t)c.b->n_jobs + 1, sizeof *c.sets);
    c.refs = calloc((size_t)c.b->n_jobs + 1, sizeof *c.refs);
    if (c.sets == NULL || c.refs == NULL)
        _exit(4);
    send_ready(&c, "CUDA (no seccomp: the GPU driver needs the whole system interface; one "
                   "process per batch)");
    for (int i = 0; i < c.b->n_jobs; i++)
        run_job(&c, i);
    _exit(0);
}
