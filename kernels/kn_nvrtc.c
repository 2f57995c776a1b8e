/* kernels/kn_nvrtc.c -- the "cuda" backend: CUDA C (kn_cuda.c) compiled by NVRTC into PTX
** or a cubin.  Compiled only when the Makefile finds the CUDA toolkit (HAVE_CUDA).
**
** NVRTC is loaded with dlopen at the first compile, not linked: the same binary then runs
** with whichever CUDA toolkit a GPU host has (its soname changes with every major
** version: libnvrtc.so.12, .13 ...), and a host without one gets a clear error instead of
** a loader failure.  Only NVRTC's header is needed at build time.  NVRTC is thread-safe
** for distinct programs. */
#include "kernels_int.h"

#include <dlfcn.h>
#include <nvrtc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct nvrtc_api {
    void *lib;
    char path[4096];
    char version[32];
    const char *(*GetErrorString)(nvrtcResult);
    nvrtcResult (*Version)(int *, int *);
    nvrtcResult (*CreateProgram)(nvrtcProgram *, const char *, const char *, int,
                                 const char *const *, const char *const *);
    nvrtcResult (*DestroyProgram)(nvrtcProgram *);
    nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char *const *);
    nvrtcResult (*GetPTXSize)(nvrtcProgram, size_t *);
    nvrtcResult (*GetPTX)(nvrtcProgram, char *);
    nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t *);
    nvrtcResult (*GetCUBIN)(nvrtcProgram, char *);
    nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t *);
    nvrtcResult (*GetProgramLog)(nvrtcProgram, char *);
    char why[8192]; /* why it could not be loaded */
} nvrtc_api;

static nvrtc_api api;
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

static void api_load(void)
{
    const char *env = getenv("AT_NVRTC_LIB"), *home = getenv("CUDA_HOME");
    char cands[8][4096];
    int n = 0;
    if (env && *env)
        snprintf(cands[n++], sizeof cands[0], "%s", env);
    snprintf(cands[n++], sizeof cands[0], "libnvrtc.so");
    snprintf(cands[n++], sizeof cands[0], "libnvrtc.so.13");
    snprintf(cands[n++], sizeof cands[0], "libnvrtc.so.12");
    snprintf(cands[n++], sizeof cands[0], "libnvrtc.so.11.2");
    if (home && *home && strlen(home) < 4000)
        snprintf(cands[n++], sizeof cands[0], "%s/lib64/libnvrtc.so", home);
    snprintf(cands[n++], sizeof cands[0], "/usr/local/cuda/lib64/libnvrtc.so");
    for (int i = 0; i < n && api.lib == NULL; i++) {
        api.lib = dlopen(cands[i], RTLD_NOW | RTLD_LOCAL);
        if (api.lib)
            snprintf(api.path, sizeof api.path, "%.4000s", cands[i]);
    }
    if (api.lib == NULL) {
        snprintf(api.why, sizeof api.why,
                 "NVRTC cannot be loaded (tried libnvrtc.so, .so.13, .so.12, .so.11.2, "
                 "$CUDA_HOME/lib64, /usr/local/cuda/lib64; set AT_NVRTC_LIB): %s",
                 dlerror());
        return;
    }
#define SYM(field, name)                                                                       \
    do {                                                                                       \
        *(void **)&api.field = dlsym(api.lib, name);                                           \
        if (api.field == NULL) {                                                               \
            snprintf(api.why, sizeof api.why, "%s has no %s", api.path, name);                 \
            dlclose(api.lib);                                                                  \
            api.lib = NULL;                                                                    \
            return;                                                                            \
        }                                                                                      \
    } while (0)
    SYM(GetErrorString, "nvrtcGetErrorString");
    SYM(Version, "nvrtcVersion");
    SYM(CreateProgram, "nvrtcCreateProgram");
    SYM(DestroyProgram, "nvrtcDestroyProgram");
    SYM(CompileProgram, "nvrtcCompileProgram");
    SYM(GetPTXSize, "nvrtcGetPTXSize");
    SYM(GetPTX, "nvrtcGetPTX");
    SYM(GetProgramLogSize, "nvrtcGetProgramLogSize");
    SYM(GetProgramLog, "nvrtcGetProgramLog");
#undef SYM
    /* cubins came with CUDA 11.1: older NVRTCs ship PTX only */
    *(void **)&api.GetCUBINSize = dlsym(api.lib, "nvrtcGetCUBINSize");
    *(void **)&api.GetCUBIN = dlsym(api.lib, "nvrtcGetCUBIN");
    {
        int major = 0, minor = 0;
        api.Version(&major, &minor);
        snprintf(api.version, sizeof api.version, "NVRTC %d.%d", major, minor);
    }
}

static const char *nvrtc_version(void)
{
    pthread_once(&api_once, api_load);
    return api.lib ? api.version : NULL;
}

/* Compile 'src' for sm_'arch': PTX (ptx != 0) or a cubin into *out (at_malloc'd; PTX with
** its NUL). */
static at_err nvrtc_compile(const char *src, int arch, int ptx, uint8_t **out, size_t *n,
                            char *errmsg, size_t errmsg_size)
{
    nvrtcProgram prog = NULL;
    nvrtcResult r;
    char opt_arch[64];
    const char *opts[4];
    int n_opts = 0;
    size_t size = 0;
    at_err err = AT_OK;
    *out = NULL;
    *n = 0;
    pthread_once(&api_once, api_load);
    if (api.lib == NULL)
        return kn__fail(errmsg, errmsg_size, AT_EUNSUPPORTED, "%s", api.why);
    if (!ptx && (api.GetCUBIN == NULL || api.GetCUBINSize == NULL))
        ptx = 1;
    snprintf(opt_arch, sizeof opt_arch, "--gpu-architecture=%s_%d", ptx ? "compute" : "sm", arch);
    opts[n_opts++] = opt_arch;
    opts[n_opts++] = "--std=c++17";
    if ((r = api.CreateProgram(&prog, src, "at_kernel.cu", 0, NULL, NULL)) != NVRTC_SUCCESS)
        return kn__fail(errmsg, errmsg_size, r == NVRTC_ERROR_OUT_OF_MEMORY ? AT_ENOMEM
                                                                            : AT_ECODEGEN,
                        "nvrtcCreateProgram: %s", api.GetErrorString(r));
    r = api.CompileProgram(prog, n_opts, opts);
    if (r != NVRTC_SUCCESS) {
        size_t log_n = 0;
        char *log = NULL;
        if (api.GetProgramLogSize(prog, &log_n) == NVRTC_SUCCESS && log_n > 0 &&
            (log = at_malloc(log_n + 1)) != NULL && api.GetProgramLog(prog, log) == NVRTC_SUCCESS)
            log[log_n] = 0;
        err = kn__fail(errmsg, errmsg_size, AT_ECODEGEN, "NVRTC (%s, %s): %s: %.900s",
                       api.version, opt_arch, api.GetErrorString(r), log ? log : "");
        at_free(log);
        goto done;
    }
    r = ptx ? api.GetPTXSize(prog, &size) : api.GetCUBINSize(prog, &size);
    if (r != NVRTC_SUCCESS || size == 0) {
        err = kn__fail(errmsg, errmsg_size, AT_ECODEGEN, "NVRTC produced no %s: %s",
                       ptx ? "PTX" : "cubin", api.GetErrorString(r));
        goto done;
    }
    if ((*out = at_malloc(size)) == NULL) {
        err = AT_ENOMEM;
        goto done;
    }
    r = ptx ? api.GetPTX(prog, (char *)*out) : api.GetCUBIN(prog, (char *)*out);
    if (r != NVRTC_SUCCESS) {
        at_free(*out);
        *out = NULL;
        err = kn__fail(errmsg, errmsg_size, AT_ECODEGEN, "NVRTC: %s", api.GetErrorString(r));
        goto done;
    }
    *n = size;
done:
    api.DestroyProgram(&prog);
    return err;
}

static at_err cuda_build(const kn_ir *ir, const kn_target *t, const char *entry,
                         kn_artifact **out, char *errmsg, size_t errmsg_size)
{
    kn_artifact *a;
    char *src = NULL;
    double t0 = at_time_mono_s();
    at_err err;
    *out = NULL;
    if (entry == NULL)
        entry = "at_kernel";
    if (strlen(entry) + 8 >= sizeof a->entry)
        return kn__fail(errmsg, errmsg_size, AT_EINVAL, "entry name too long");
    if ((a = at_calloc(1, sizeof *a)) == NULL)
        return AT_ENOMEM;
    err = kn_cuda_source(ir, t, entry, &src, a->launches, &a->n_launches, &a->ws_fixed, errmsg,
                         errmsg_size);
    if (err == AT_OK)
        err = nvrtc_compile(src, t->cuda_arch, t->cuda_ptx, &a->obj, &a->obj_size, errmsg,
                            errmsg_size);
    at_free(src);
    if (err != AT_OK) {
        kn_artifact_free(a);
        return err;
    }
    a->kind = t->cuda_ptx || a->obj_size < 4 || memcmp(a->obj, "\177ELF", 4) != 0 ? KN_ART_PTX
                                                                                 : KN_ART_CUBIN;
    for (int k = 0; k < a->n_launches && a->kind == KN_ART_CUBIN; k++) {
        kn_launch *l = &a->launches[k];
        int64_t threads = (int64_t)l->block[0] * l->block[1] * l->block[2];
        l->n_regs = kn_cubin_regs(a->obj, a->obj_size, l->entry);
        if (l->n_regs > 0 && (int64_t)l->n_regs * threads > t->cuda_max_regs) {
            err = kn__fail(errmsg, errmsg_size, AT_ESCHED,
                           "launch %d uses %d registers x %lld threads; %s allows %lld per "
                           "block",
                           k, l->n_regs, (long long)threads, t->text, (long long)t->cuda_max_regs);
            kn_artifact_free(a);
            return err;
        }
    }
    kn__artifact_sig(a, ir, t, entry);
    snprintf(a->gpu_arch, sizeof a->gpu_arch, "sm_%d", t->cuda_arch);
    a->compile_s = at_time_mono_s() - t0;
    *out = a;
    return AT_OK;
}

const kn_backend_ops kn__cuda_backend = {"cuda", KN_TARGET_CUDA, cuda_build, NULL,
                                         nvrtc_version, nvrtc_compile};
