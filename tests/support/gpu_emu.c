/* tests/support/gpu_emu.c -- see gpu_emu.h.  The generated program: the runtime header,
** the CUDA C text, one trampoline per launch that calls the kernel with the argument
** buffers, and a main that reads the buffers from a file, runs the launches in order and
** writes every output buffer to another file. */
#include "tests/support/gpu_emu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int gpu_emu_available(void)
{
    static int known = -1;
    if (known < 0)
        known = system("cc --version >/dev/null 2>&1") == 0;
    return known;
}

static int write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(p, 1, n, f) == n;
    if (f && fclose(f) != 0)
        ok = 0;
    return ok;
}

int gpu_emu_run(const char *src, const kn_launch *launches, int n_launches, int64_t ws_bytes,
                const kn_arg_desc *args, int n_args, kn_bufset *bufs, char *msg, size_t n)
{
    char dir[] = "/tmp/at_gpu_emu_XXXXXX", path[256], cmd[1024];
    at_buf b;
    FILE *f;
    int rc, ok = -1;
    if (!gpu_emu_available()) {
        snprintf(msg, n, "no C compiler ('cc') to run the CUDA C on the CPU");
        return 0;
    }
    if (mkdtemp(dir) == NULL) {
        snprintf(msg, n, "mkdtemp failed");
        return -1;
    }
    at_buf_init(&b);
    at_buf_puts(&b, src);
    at_buf_puts(&b, "\nstatic unsigned char *A[64], *WS;\n");
    for (int k = 0; k < n_launches; k++) {
        at_buf_printf(&b, "static void tramp_%d(void) { %s(", k, launches[k].entry);
        for (int i = 0; i < n_args; i++)
            at_buf_printf(&b, "(void *)A[%d], ", i);
        at_buf_puts(&b, "WS); }\n");
    }
    at_buf_puts(&b, "int main(int argc, char **argv)\n{\n"
                    "    FILE *f = fopen(argv[1], \"rb\"), *o;\n"
                    "    (void)argc;\n");
    at_buf_printf(&b, "    static const long long sizes[] = {");
    for (int i = 0; i < n_args; i++)
        at_buf_printf(&b, "%zuLL, ", bufs->n_bytes[i]);
    at_buf_puts(&b, "0};\n");
    at_buf_printf(&b, "    for (int i = 0; i < %d; i++) {\n"
                      "        A[i] = aligned_alloc(64, (size_t)(sizes[i] + 64) / 64 * 64);\n"
                      "        if (!A[i] || fread(A[i], 1, (size_t)sizes[i], f) != (size_t)sizes[i]) return 5;\n"
                      "    }\n"
                      "    fclose(f);\n"
                      "    WS = calloc(1, (size_t)%lld + 64);\n",
                  n_args, (long long)ws_bytes);
    for (int k = 0; k < n_launches; k++)
        at_buf_printf(&b, "    { int g[3] = {%d, %d, %d}, t[3] = {%d, %d, %d};\n"
                          "      at_emu_launch(g, t, %d, tramp_%d); }\n",
                      launches[k].grid[0], launches[k].grid[1], launches[k].grid[2],
                      launches[k].block[0], launches[k].block[1], launches[k].block[2],
                      launches[k].shared_bytes, k);
    at_buf_puts(&b, "    o = fopen(argv[2], \"wb\");\n");
    for (int i = 0; i < n_args; i++)
        if (args[i].is_output)
            at_buf_printf(&b, "    fwrite(A[%d], 1, (size_t)sizes[%d], o);\n", i, i);
    at_buf_puts(&b, "    return fclose(o) == 0 ? 0 : 6;\n}\n");
    snprintf(path, sizeof path, "%s/k.c", dir);
    if (b.err != AT_OK || !write_file(path, b.data, b.len)) {
        snprintf(msg, n, "cannot write %s", path);
        goto done;
    }
    snprintf(cmd, sizeof cmd,
             "cc -std=gnu11 -O0 -w -include tests/support/gpu_emu_rt.h -o %s/k %s/k.c -lm "
             ">%s/cc.log 2>&1",
             dir, dir, dir);
    if ((rc = system(cmd)) != 0) {
        snprintf(msg, n, "the emulator program does not compile (see %s/cc.log)", dir);
        goto done_keep;
    }
    /* the inputs */
    snprintf(path, sizeof path, "%s/in", dir);
    f = fopen(path, "wb");
    for (int i = 0; f && i < n_args; i++)
        fwrite(bufs->ptr[i], 1, bufs->n_bytes[i], f);
    if (f == NULL || fclose(f) != 0) {
        snprintf(msg, n, "cannot write %s", path);
        goto done;
    }
    snprintf(cmd, sizeof cmd, "%s/k %s/in %s/out 2>%s/run.log", dir, dir, dir, dir);
    rc = system(cmd);
    if (rc != 0) {
        snprintf(msg, n, "the emulated kernel failed (status %d; see %s/run.log)", rc, dir);
        goto done_keep;
    }
    snprintf(path, sizeof path, "%s/out", dir);
    f = fopen(path, "rb");
    ok = f != NULL;
    for (int i = 0; ok && i < n_args; i++)
        if (args[i].is_output && fread(bufs->ptr[i], 1, bufs->n_bytes[i], f) != bufs->n_bytes[i])
            ok = 0;
    if (f)
        fclose(f);
    if (!ok) {
        snprintf(msg, n, "short output from the emulated kernel");
        ok = -1;
        goto done;
    }
    ok = 1;
done:
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        ok = ok == 1 ? 1 : -1;
    at_buf_fini(&b);
    return ok;
done_keep: /* leave the directory for the person reading the failure */
    at_buf_fini(&b);
    return -1;
}
