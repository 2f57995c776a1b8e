/* kernels/kn_target_cuda.c -- CUDA target strings and the hardware descriptions the
** schedule space gets from a target.  No LLVM, no CUDA toolkit: this file is in every
** build (also the GPU bundle's, which has no LLVM).
**
**   cuda -arch=sm_90 [-max-threads-per-block=N] [-max-shared-memory-per-block=N]
**        [-max-registers-per-block=N] [-num-sms=N] [-ptx]
** Options may also be written "-name N" or with underscores.  Limits default to the
** architecture's (shared memory: the 48 KiB a block gets without opting in; up to the
** architecture's opt-in maximum when given). */
#include "kernels_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cuda_arch {
    int sm;
    int n_sms;             /* a typical part, for the search's hardware description */
    int64_t max_shared;    /* opt-in maximum of dynamic shared memory per block */
    const char *example;
} cuda_arch;

static const cuda_arch archs[] = {
    {75, 40, 65536, "T4, RTX 20"},
    {80, 108, 166912, "A100"},
    {86, 84, 101376, "A10, RTX 30"},
    {87, 16, 166912, "Jetson Orin"},
    {89, 128, 101376, "L4, L40, RTX 40"},
    {90, 132, 232448, "H100, H200"},
    {100, 148, 232448, "B200"},
    {120, 170, 101376, "RTX 50"},
};

#define DEFAULT_SHARED (48 * 1024)

static const cuda_arch *find_arch(int sm)
{
    for (size_t i = 0; i < AT_ARRAY_LEN(archs); i++)
        if (archs[i].sm == sm)
            return &archs[i];
    return NULL;
}

/* "-max_threads_per_block" and "-max-threads-per-block" are one option. */
static int opt_is(const char *tok, const char *name)
{
    if (*tok != '-')
        return 0;
    for (tok++; *tok && *name; tok++, name++)
        if (*tok != *name && !(*tok == '_' && *name == '-'))
            return 0;
    return *tok == 0 && *name == 0;
}

at_err kn__target_parse_cuda(const char *text, kn_target *out, char *errmsg, size_t errmsg_size)
{
    char buf[512], *tok, *save = NULL, *toks[32];
    int n = 0, sm = 0;
    int64_t threads = 0, shared = 0, regs = 0, sms = 0;
    const cuda_arch *arch;
    memset(out, 0, sizeof *out);
    if (strlen(text) >= sizeof buf)
        return kn__fail(errmsg, errmsg_size, AT_EINVAL, "target string too long");
    strcpy(buf, text);
    for (tok = strtok_r(buf, " \t", &save); tok && n < 32; tok = strtok_r(NULL, " \t", &save))
        toks[n++] = tok;
    if (n == 0 || strcmp(toks[0], "cuda") != 0)
        return kn__fail(errmsg, errmsg_size, AT_EINVAL, "target '%s' does not start with 'cuda'",
                        text);
    for (int i = 1; i < n; i++) {
        char *name = toks[i], *val = strchr(name, '=');
        int64_t *dst = NULL;
        if (val)
            *val++ = 0;
        if (opt_is(name, "ptx")) {
            if (val)
                return kn__fail(errmsg, errmsg_size, AT_EINVAL,
                                "target '%s': -ptx takes no value", text);
            out->cuda_ptx = 1;
            continue;
        }
        if (opt_is(name, "keys") || opt_is(name, "model") || opt_is(name, "thread-warp-size")) {
            if (!val && i + 1 < n && toks[i + 1][0] != '-')
                i++;
            continue; /* TVM target options we accept and ignore */
        }
        if (!opt_is(name, "arch") && !opt_is(name, "mcpu") &&
            !opt_is(name, "max-threads-per-block") && !opt_is(name, "max-shared-memory-per-block") &&
            !opt_is(name, "max-registers-per-block") && !opt_is(name, "num-sms"))
            return kn__fail(errmsg, errmsg_size, AT_EINVAL,
                            "target '%s': unknown option '%s' (expected -arch, "
                            "-max-threads-per-block, -max-shared-memory-per-block, "
                            "-max-registers-per-block, -num-sms or -ptx)",
                            text, name);
        if (!val) {
            if (i + 1 >= n)
                return kn__fail(errmsg, errmsg_size, AT_EINVAL,
                                "target '%s': option '%s' has no value", text, name);
            val = toks[++i];
        }
        if (opt_is(name, "arch") || opt_is(name, "mcpu")) {
            char *end;
            long v;
            if (strncmp(val, "sm_", 3) != 0 || (v = strtol(val + 3, &end, 10), *end != 0) ||
                end == val + 3)
                return kn__fail(errmsg, errmsg_size, AT_EINVAL,
                                "target '%s': -arch must be sm_XX (e.g. sm_90), not '%s'", text,
                                val);
            if (v < 75)
                return kn__fail(errmsg, errmsg_size, AT_EINVAL,
                                "target '%s': %s is older than sm_75 (Turing), the oldest "
                                "architecture NVRTC in CUDA 13 compiles for",
                                text, val);
            sm = (int)v;
            continue;
        }
        if (opt_is(name, "max-threads-per-block"))
            dst = &threads;
        else if (opt_is(name, "max-shared-memory-per-block"))
            dst = &shared;
        else if (opt_is(name, "max-registers-per-block"))
            dst = &regs;
        else
            dst = &sms;
        if (at_parse_i64(val, dst) != AT_OK || *dst < 1)
            return kn__fail(errmsg, errmsg_size, AT_EINVAL,
                            "target '%s': %s needs a positive integer, not '%s'", text, name, val);
    }
    if (sm == 0)
        return kn__fail(errmsg, errmsg_size, AT_EINVAL,
                        "target '%s': give the GPU architecture, e.g. 'cuda -arch=sm_90'", text);
    if ((arch = find_arch(sm)) == NULL) {
        char known[256] = "";
        for (size_t i = 0; i < AT_ARRAY_LEN(archs); i++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%ssm_%d",
                     i ? ", " : "", archs[i].sm);
        return kn__fail(errmsg, errmsg_size, AT_EINVAL,
                        "target '%s': sm_%d is not a known architecture (%s)", text, sm, known);
    }
    if (threads == 0)
        threads = 1024;
    if (shared == 0)
        shared = DEFAULT_SHARED;
    if (regs == 0)
        regs = 65536;
    if (sms == 0)
        sms = arch->n_sms;
    if (threads > 1024)
        return kn__fail(errmsg, errmsg_size, AT_EINVAL,
                        "target '%s': -max-threads-per-block %lld exceeds 1024", text,
                        (long long)threads);
    if (shared > arch->max_shared)
        return kn__fail(errmsg, errmsg_size, AT_EINVAL,
                        "target '%s': -max-shared-memory-per-block %lld exceeds sm_%d's %lld "
                        "bytes",
                        text, (long long)shared, sm, (long long)arch->max_shared);
    if (regs > 65536 || regs < 1024)
        return kn__fail(errmsg, errmsg_size, AT_EINVAL,
                        "target '%s': -max-registers-per-block must be 1024 to 65536", text);
    if (sms > 1024)
        return kn__fail(errmsg, errmsg_size, AT_EINVAL, "target '%s': -num-sms is at most 1024",
                        text);
    out->kind = KN_TARGET_CUDA;
    out->cuda_arch = sm;
    out->cuda_max_threads = (int)threads;
    out->cuda_max_shared = shared;
    out->cuda_max_regs = regs;
    out->cuda_n_sms = (int)sms;
    snprintf(out->triple, sizeof out->triple, "nvptx64-nvidia-cuda");
    snprintf(out->cpu, sizeof out->cpu, "sm_%d", sm);
    out->n_cores = (int)sms;
    out->vector_bytes = 16;
    out->l1_bytes = shared;
    out->l2_bytes = 0;
    snprintf(out->text, sizeof out->text,
             "cuda -arch=sm_%d -max-threads-per-block=%lld -max-shared-memory-per-block=%lld "
             "-max-registers-per-block=%lld%s",
             sm, (long long)threads, (long long)shared, (long long)regs,
             out->cuda_ptx ? " -ptx" : "");
    return AT_OK;
}

void kn_target_hw(const kn_target *t, ss_hw *hw)
{
    if (t->kind == KN_TARGET_CUDA) {
        ss_hw_gpu(hw, t->cuda_n_sms, t->cuda_max_threads, t->cuda_max_shared);
        return;
    }
    ss_hw_cpu(hw, t->n_cores, t->vector_bytes, t->l1_bytes, t->l2_bytes);
}
