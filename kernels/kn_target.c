/* kernels/kn_target.c -- CPU target strings: "llvm -mtriple=T -mcpu=C -mattr=F -num-cores=N".
**
** "native" (or no -mtriple and no -mcpu) is this host with its CPU features: LLVM 16 calls
** recent CPUs "generic", so the host's feature list is always passed explicitly, or the
** code would use no AVX-512 on a CPU that has it. */
#include "kernels_int.h"

#ifndef AT_NO_LLVM
#include <llvm-c/Core.h>
#include <llvm-c/Support.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#endif
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef AT_NO_LLVM
static pthread_once_t llvm_once = PTHREAD_ONCE_INIT;

static void llvm_init(void)
{
    /* LLVM's own unroller at -O3 (threshold 300) unrolls again the loops the schedule left
    ** rolled, and the machine scheduler then spends most of a build on the huge blocks: on
    ** ResNet-18's NHWC convolutions a build took 0.55 s at 300 and 0.15 s at 50, and the best
    ** tuned kernels ran as fast (13.6 against 13.7 ms for ten of them; the schedule's own
    ** unrolling, explicit in our IR, is what they rely on).  Its partial unrolling (loops of
    ** unknown or large trip count, up to the CPU's loop buffer: 512 micro-ops on Zen) still
    ** grew a rolled Winograd GEMM of 18 KB of IR to 89 KB, built in 0.38 s (0.09 s without it);
    ** at 150 it leaves those bodies alone and still unrolls the small scalar loops the SLP
    ** vectorizer feeds on (an unvectorized max-pool or depthwise).  Tuning ResNet-18,
    ** MobileNetV2 and BERT-base (docs/tuning.md): builds 24-41 % cheaper, the tuned models as
    ** fast within the host's noise.  Set once, for every build. */
    static const char *const opts[] = {"autotune", "-unroll-threshold=50",
                                       "-unroll-partial-threshold=150"};
    LLVMParseCommandLineOptions(3, opts, NULL);
    LLVMInitializeX86TargetInfo();
    LLVMInitializeX86Target();
    LLVMInitializeX86TargetMC();
    LLVMInitializeX86AsmPrinter();
    LLVMInitializeAArch64TargetInfo();
    LLVMInitializeAArch64Target();
    LLVMInitializeAArch64TargetMC();
    LLVMInitializeAArch64AsmPrinter();
}


void kn__llvm_init(void)
{
    pthread_once(&llvm_once, llvm_init);
}

static int64_t read_cache_size(int level, const char *type)
{
    char path[128], buf[64];
    for (int i = 0; i < 8; i++) {
        FILE *f;
        int lv = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        f = fopen(path, "r");
        if (f == NULL)
            break;
        if (fscanf(f, "%d", &lv) != 1)
            lv = 0;
        fclose(f);
        if (lv != level)
            continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        f = fopen(path, "r");
        if (f == NULL)
            continue;
        if (fgets(buf, sizeof buf, f) == NULL)
            buf[0] = 0;
        fclose(f);
        if (strncmp(buf, type, strlen(type)) != 0 && strncmp(buf, "Unified", 7) != 0)
            continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        f = fopen(path, "r");
        if (f == NULL)
            continue;
        {
            long v = 0;
            char unit = 0;
            int n = fscanf(f, "%ld%c", &v, &unit);
            fclose(f);
            if (n >= 1) {
                if (unit == 'K')
                    v *= 1024;
                else if (unit == 'M')
                    v *= 1024 * 1024;
                return v;
            }
        }
    }
    return 0;
}

static const char *const cpus_512[] = {
    "skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake-client",
    "icelake-server", "tigerlake", "rocketlake", "sapphirerapids", "graniterapids",
    "emeraldrapids", "znver4", "znver5", "x86-64-v4", "knl", "knm"};
static const char *const cpus_256[] = {"haswell", "broadwell", "skylake", "alderlake",
                                       "raptorlake", "meteorlake", "znver1", "znver2",
                                       "znver3", "x86-64-v3", "bdver4", "core-avx2"};

static int vector_bytes_of(const kn_target *t)
{
    if (!t->is_x86)
        return 16;
    if (strstr(t->features, "+avx512f"))
        return 64;
    if (strstr(t->features, "-avx512f") == NULL)
        for (size_t i = 0; i < AT_ARRAY_LEN(cpus_512); i++)
            if (strcmp(t->cpu, cpus_512[i]) == 0)
                return 64;
    if (strstr(t->features, "+avx2") || strstr(t->features, "+avx,") ||
        (strlen(t->features) >= 4 && strcmp(t->features + strlen(t->features) - 4, "+avx") == 0))
        return 32;
    for (size_t i = 0; i < AT_ARRAY_LEN(cpus_256); i++)
        if (strcmp(t->cpu, cpus_256[i]) == 0)
            return 32;
    for (size_t i = 0; i < AT_ARRAY_LEN(cpus_512); i++)
        if (strcmp(t->cpu, cpus_512[i]) == 0)
            return 32; /* AVX-512 disabled by -mattr */
    return 16;
}

static int valid_word(const char *s, const char *extra)
{
    if (*s == 0)
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              strchr(extra, *s)))
            return 0;
    return 1;
}

at_err kn_target_parse(const char *text, kn_target *out, char *errmsg, size_t errmsg_size)
{
    char buf[512], *tok, *save = NULL;
    char triple[96] = "", cpu[64] = "", attr[1024] = "";
    int64_t cores = 0, prefetch = KN_PREFETCH_BYTES_DEFAULT;
    int first = 1;
    LLVMTargetRef tgt;
    char *err = NULL, *host;
    const char *lead = text + strspn(text, " \t");
    if (strncmp(lead, "cuda", 4) == 0 && (lead[4] == 0 || lead[4] == ' ' || lead[4] == '\t'))
        return kn__target_parse_cuda(lead, out, errmsg, errmsg_size);
    memset(out, 0, sizeof *out);
    kn__llvm_init();
    if (strlen(text) >= sizeof buf)
        return kn__fail(errmsg, errmsg_size, AT_EINVAL, "target string too long");
    strcpy(buf, text);
    for (tok = strtok_r(buf, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
        char *eq = strchr(tok, '=');
        if (first) {
            first = 0;
            if (strcmp(tok, "llvm") != 0)
                return kn__fail(errmsg, errmsg_size, AT_EINVAL,
                                   "target '%s': it must start with 'llvm' (CPU targets) "
                                   "or 'cuda' (NVIDIA GPUs)",
                                   text);
            continue;
        }
        if (eq == NULL)
            return kn__fail(errmsg, errmsg_size, AT_EINVAL, "target '%s': option '%s' has no value "
                               "(expected -mtriple=, -mcpu=, -mattr=, -num-cores= or -prefetch-bytes=)", text, tok);
        *eq = 0;
        if (strcmp(tok, "-mtriple") == 0) {
            if (!valid_word(eq + 1, "-_.") || strlen(eq + 1) >= sizeof triple)
                return kn__fail(errmsg, errmsg_size, AT_EINVAL, "target '%s': bad triple '%s'", text,
                                   eq + 1);
            strcpy(triple, eq + 1);
        } else if (strcmp(tok, "-mcpu") == 0) {
            if (!valid_word(eq + 1, "-_.") || strlen(eq + 1) >= sizeof cpu)
                return kn__fail(errmsg, errmsg_size, AT_EINVAL, "target '%s': bad cpu '%s'", text,
                                   eq + 1);
            strcpy(cpu, eq + 1);
        } else if (strcmp(tok, "-mattr") == 0) {
            if (!valid_word(eq + 1, "-_.+,") || strlen(eq + 1) >= sizeof attr)
                return kn__fail(errmsg, errmsg_size, AT_EINVAL, "target '%s': bad -mattr '%s'", text,
                                   eq + 1);
            for (const char *p = eq + 1; *p;) {
                if (*p != '+' && *p != '-')
                    return kn__fail(errmsg, errmsg_size, AT_EINVAL,
                                       "target '%s': each -mattr feature starts with + or - "
                                       "(got '%s')",
                                       text, p);
                p = strchr(p, ',');
                if (p == NULL)
                    break;
                p++;
            }
            strcpy(attr, eq + 1);
        } else if (strcmp(tok, "-num-cores") == 0) {
            if (at_parse_i64(eq + 1, &cores) != AT_OK || cores < 1 || cores > 4096)
                return kn__fail(errmsg, errmsg_size, AT_EINVAL,
                                   "target '%s': -num-cores must be 1 to 4096, got '%s'", text,
                                   eq + 1);
        } else if (strcmp(tok, "-prefetch-bytes") == 0) {
            if (at_parse_i64(eq + 1, &prefetch) != AT_OK || prefetch < 0 || prefetch > 65536)
                return kn__fail(errmsg, errmsg_size, AT_EINVAL,
                                "target '%s': -prefetch-bytes must be 0 to 65536, got '%s'",
                                text, eq + 1);
        } else if (strcmp(tok, "-keys") == 0 || strcmp(tok, "-model") == 0) {
            /* accepted for compatibility with TVM target strings; not used */
        } else {
            return kn__fail(errmsg, errmsg_size, AT_EINVAL,
                               "target '%s': unknown option '%s' (expected -mtriple, -mcpu, "
                               "-mattr, -num-cores or -prefetch-bytes)",
                               text, tok);
        }
    }
    if (first)
        return kn__fail(errmsg, errmsg_size, AT_EINVAL, "empty target string (try 'llvm -mcpu=native')");
    host = LLVMGetDefaultTargetTriple();
    if (triple[0] == 0) {
        snprintf(out->triple, sizeof out->triple, "%s", host);
        if (cpu[0] == 0)
            strcpy(cpu, "native");
    } else {
        snprintf(out->triple, sizeof out->triple, "%s", triple);
    }
    if (LLVMGetTargetFromTriple(out->triple, &tgt, &err) != 0) {
        kn__fail(errmsg, errmsg_size, AT_EINVAL, "target '%s': unknown triple '%s' (%s)", text,
                    out->triple, err ? err : "no such target");
        LLVMDisposeMessage(err);
        LLVMDisposeMessage(host);
        return AT_EINVAL;
    }
    out->is_x86 = strncmp(out->triple, "x86_64", 6) == 0;
    out->is_aarch64 = strncmp(out->triple, "aarch64", 7) == 0 || strncmp(out->triple, "arm64", 5) == 0;
    if (!out->is_x86 && !out->is_aarch64) {
        kn__fail(errmsg, errmsg_size, AT_EINVAL,
                    "target '%s': triple '%s' is not supported (x86_64 and aarch64 are)", text,
                    out->triple);
        LLVMDisposeMessage(host);
        return AT_EINVAL;
    }
    {
        /* same architecture as this host: its objects can be loaded here */
        const char *dash = strchr(host, '-');
        size_t n = dash ? (size_t)(dash - host) : strlen(host);
        out->is_host = strncmp(out->triple, host, n) == 0 && out->triple[n] == '-';
    }
    LLVMDisposeMessage(host);
    if (strcmp(cpu, "native") == 0) {
        char *name, *feat;
        if (!out->is_host)
            return kn__fail(errmsg, errmsg_size, AT_EINVAL,
                               "target '%s': -mcpu=native needs the host's architecture", text);
        name = LLVMGetHostCPUName();
        feat = LLVMGetHostCPUFeatures();
        snprintf(out->cpu, sizeof out->cpu, "%s", name);
        snprintf(out->features, sizeof out->features, "%s", feat);
        LLVMDisposeMessage(name);
        LLVMDisposeMessage(feat);
        if (attr[0]) {
            size_t len = strlen(out->features);
            snprintf(out->features + len, sizeof out->features - len, "%s%s", len ? "," : "",
                     attr);
        }
        if (cores == 0)
            cores = sysconf(_SC_NPROCESSORS_ONLN);
        out->l1_bytes = read_cache_size(1, "Data");
        out->l2_bytes = read_cache_size(2, "Unified");
    } else {
        snprintf(out->cpu, sizeof out->cpu, "%s", cpu[0] ? cpu : "generic");
        snprintf(out->features, sizeof out->features, "%s", attr);
    }
    if (out->is_aarch64 && strstr(out->features, "-neon"))
        return kn__fail(errmsg, errmsg_size, AT_EINVAL, "target '%s': AArch64 without NEON is not "
                           "supported", text);
    out->n_cores = cores ? (int)cores : 4;
    out->prefetch_bytes = prefetch;
    if (out->l1_bytes <= 0)
        out->l1_bytes = out->is_aarch64 ? 64 * 1024 : 32 * 1024;
    if (out->l2_bytes <= 0)
        out->l2_bytes = out->is_aarch64 ? 512 * 1024 : 1024 * 1024;
    out->vector_bytes = vector_bytes_of(out);
    {
        at_buf b;
        at_buf_init(&b);
        at_buf_printf(&b, "llvm -mtriple=%s -mcpu=%s%s%s -num-cores=%d", out->triple,
                      strcmp(cpu, "native") == 0 ? "native" : out->cpu, attr[0] ? " -mattr=" : "",
                      attr, out->n_cores);
        if (prefetch != KN_PREFETCH_BYTES_DEFAULT)
            at_buf_printf(&b, " -prefetch-bytes=%lld", (long long)prefetch);
        if (b.data == NULL || b.len >= sizeof out->text) {
            at_buf_fini(&b);
            return kn__fail(errmsg, errmsg_size, AT_EINVAL, "target '%s' is too long", text);
        }
        memcpy(out->text, b.data, b.len + 1);
        at_buf_fini(&b);
    }
    return AT_OK;
}

at_err kn_target_host(kn_target *out)
{
    return kn_target_parse("llvm -mcpu=native", out, NULL, 0);
}

#else /* AT_NO_LLVM: a build without LLVM (the GPU bundle) knows 'cuda' targets only */

void kn__llvm_init(void)
{
}

at_err kn_target_parse(const char *text, kn_target *out, char *errmsg, size_t errmsg_size)
{
    const char *lead = text + strspn(text, " \t");
    memset(out, 0, sizeof *out);
    if (strncmp(lead, "cuda", 4) == 0 && (lead[4] == 0 || lead[4] == ' ' || lead[4] == '\t'))
        return kn__target_parse_cuda(lead, out, errmsg, errmsg_size);
    return kn__fail(errmsg, errmsg_size, AT_EUNSUPPORTED,
                    "target '%s': this build has no LLVM (a GPU bundle): only 'cuda "
                    "-arch=sm_XX' targets",
                    text);
}

at_err kn_target_host(kn_target *out)
{
    memset(out, 0, sizeof *out);
    return AT_EUNSUPPORTED;
}

#endif

at_err kn__fail(char *errmsg, size_t errmsg_size, at_err err, const char *fmt, ...)
{
    va_list ap;
    if (errmsg && errmsg_size) {
        va_start(ap, fmt);
        vsnprintf(errmsg, errmsg_size, fmt, ap);
        va_end(ap);
    }
    return err;
}
