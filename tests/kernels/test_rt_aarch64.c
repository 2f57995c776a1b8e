/* tests/kernels/test_rt_aarch64.c -- the runtime on AArch64, under qemu-aarch64, and the
** kn_rt_run command on both machines.
**
** An AArch64 object is built from C (aarch64-linux-gnu-gcc and clang-14, several code
** models) at test time, run by build/aarch64/bin/kn_rt_run ('make rt-aarch64', which
** 'make tests-san' builds) under 'qemu-aarch64 -L /usr/aarch64-linux-gnu', and its output
** compared with the same C computed here, natively (relative 1e-5: AArch64 contracts
** a*b+c into FMA).  A missing runner, qemu or cross compiler fails the test: no skip.
** The kernel's C is written once, in KA_CODE, as in test_rt_loader.c; the AArch64 build
** adds a function in assembly (KA_ASM) for the branch relocations that C alone does not
** produce (TBNZ/CBZ to another section, ADR, LDR literal). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <elf.h>
#include <libgen.h>
#include <math.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/kernels_rt.h"

enum { KA_ROWS = 16, KA_COLS = 24 };

#define KA_CODE                                                                            \
    typedef struct ka_args {                                                               \
        const float *x, *w;                                                                \
        float *y;                                                                          \
        int rows, cols;                                                                    \
        int next; /* the next row to claim (kernels_rt.h: tasks claim their work) */        \
    } ka_args;                                                                             \
    int ka_calls;                                                                          \
    static const float ka_tab[8] = {0.5f, -1.0f, 0.25f, 2.0f, -0.125f, 1.5f, 0.75f, -3.0f}; \
    static const double ka_dtab[4] = {0.1, -0.2, 0.3, -0.4};                               \
    static const unsigned char ka_bytes[16] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3}; \
    static const short ka_shorts[8] = {-300, 200, -100, 0, 100, 200, 300, 400};             \
    static float (*const ka_ops[2])(float) = {expf, sqrtf};                                \
    /* writable statics loaded at fixed offsets: the LDST8..128_ABS_LO12_NC relocations */ \
    typedef float ka_v4 __attribute__((vector_size(16)));                                  \
    static unsigned char ka_s8 = 3;                                                        \
    static short ka_s16 = -5;                                                              \
    static int ka_s32 = 7;                                                                 \
    static double ka_s64 = 0.5;                                                            \
    static ka_v4 ka_s128 = {1.0f, 2.0f, 3.0f, 4.0f};                                       \
    float ka_tail(float v);                                                                \
    float ka_tail(float v)                                                                 \
    {                                                                                      \
        return tanhf(v); /* a tail call */                                                 \
    }                                                                                      \
    float ka_mix(float v, int k);                                                          \
    __attribute__((noinline)) float ka_mix(float v, int k)                                 \
    {                                                                                      \
        switch (k % 7) {                                                                   \
        case 0:                                                                            \
            return logf(v * v + 1.5f);                                                     \
        case 1:                                                                            \
            return sqrtf(fabsf(v)) * 0.5f;                                                 \
        case 2:                                                                            \
            return ka_tail(v);                                                             \
        case 3:                                                                            \
            return erff(v) + floorf(v * 2.0f);                                             \
        case 4:                                                                            \
            return powf(fabsf(v) + 1.0f, 0.75f);                                           \
        case 5:                                                                            \
            return ka_ops[k & 1](fabsf(v));                                                \
        default:                                                                           \
            return sinf(v) - cosf(v * 0.5f);                                               \
        }                                                                                  \
    }                                                                                      \
    static int32_t ka_task(void *closure, int32_t t, int32_t nt)                           \
    {                                                                                      \
        ka_args *a = (ka_args *)closure;                                                   \
        int r;                                                                             \
        (void)t;                                                                           \
        (void)nt;                                                                          \
        while ((r = __atomic_fetch_add(&a->next, 1, __ATOMIC_RELAXED)) < a->rows)          \
            for (int c = 0; c < a->cols; c++) {                                            \
                float v = a->x[r * a->cols + c];                                           \
                a->y[r * a->cols + c] = expf(v) * a->w[c] + ka_tab[c & 7] +               \
                                        (float)ka_dtab[r & 3] + ka_mix(v, r + c) +        \
                                        (float)ka_bytes[(r + c) & 15] * 0.01f +           \
                                        (float)ka_shorts[c & 7] * 0.001f +                \
                                        (float)ka_branchy(r * 3 + c);                      \
            }                                                                              \
        return 0;                                                                          \
    }                                                                                      \
    int32_t ka_main(void *const *bufs, void *ws, const kn_rt_par *par);                   \
    int32_t ka_main(void *const *bufs, void *ws, const kn_rt_par *par)                    \
    {                                                                                      \
        ka_args a;                                                                         \
        float *w = (float *)ws;                                                            \
        int32_t rc;                                                                        \
        a.x = (const float *)bufs[0];                                                      \
        a.rows = 16;                                                                       \
        a.next = 0;                                                                        \
        a.cols = 24;                                                                       \
        memcpy(w, bufs[1], (size_t)a.cols * sizeof(float)); /* through the workspace */    \
        a.w = w;                                                                           \
        a.y = (float *)bufs[2];                                                            \
        ka_calls++;                                                                        \
        rc = par->launch(par, ka_task, &a);                                                \
        if (rc != 0)                                                                       \
            return rc;                                                                     \
        a.y[0] += (float)ka_calls; /* 1: the global was zero */                            \
        a.y[1] += (float)(ka_s8 + ka_s16 + ka_s32) * 0.01f + (float)ka_s64 + ka_s128[3];   \
        if (a.x[0] > 100.0f) { /* never: inputs are in (-1, 1); keeps the statics written */ \
            ka_s8 = (unsigned char)(int)a.x[1]; /* values the compiler cannot know */   \
            ka_s16 = (short)(int)(a.x[2] * 1000.0f);                                       \
            ka_s32 = (int)(a.x[3] * 1000.0f);                                              \
            ka_s64 = a.x[4];                                                               \
            ka_s128 = ka_s128 * a.x[5];                                                    \
        }                                                                                  \
        return 0;                                                                          \
    }

/* ka_branchy(x): 1 if x is odd, 7 if x is 0, else 2 + (x & 4); the AArch64 build has it
** in assembly, spread over two sections so the branches need relocations. */
#define KA_ASM                                                                             \
    "int ka_branchy(int x);\n"                                                             \
    "__asm__(\".section .text.ka_b,\\\"ax\\\",%progbits\\n\"\n"                            \
    "        \".global ka_branchy\\n.type ka_branchy,%function\\n\"\n"                     \
    "        \"ka_branchy:\\n\"\n"                                                         \
    "        \"  tbnz w0, #0, ka_odd\\n\"\n"   /* R_AARCH64_TSTBR14 */                     \
    "        \"  cbz w0, ka_zero\\n\"\n"       /* R_AARCH64_CONDBR19 */                    \
    "        \"  adr x1, ka_lit\\n\"\n"        /* R_AARCH64_ADR_PREL_LO21 */               \
    "        \"  ldr w2, ka_lit\\n\"\n"        /* R_AARCH64_LD_PREL_LO19 */                \
    "        \"  ldr w3, [x1]\\n\"\n"                                                      \
    "        \"  sub w2, w2, w3\\n\"\n"                                                    \
    "        \"  and w0, w0, #4\\n\"\n"                                                    \
    "        \"  add w0, w0, #2\\n\"\n"                                                    \
    "        \"  add w0, w0, w2\\n\"\n"                                                    \
    "        \"  ret\\n\"\n"                                                               \
    "        \".section .text.ka_c,\\\"ax\\\",%progbits\\n\"\n"                            \
    "        \".global ka_odd\\n.type ka_odd,%function\\n\"\n"                             \
    "        \"ka_odd: mov w0, #1\\n ret\\n\"\n"                                           \
    "        \".global ka_zero\\n.type ka_zero,%function\\n\"\n"                           \
    "        \"ka_zero: mov w0, #7\\n ret\\n\"\n"                                          \
    "        \".global ka_lit\\n\"\n"                                                      \
    "        \".balign 4\\nka_lit: .word 12345\\n\"\n"                                     \
    "        \".text\\n\");\n"

/* The native reference of ka_branchy. */
static int ka_branchy(int x)
{
    return (x & 1) ? 1 : x == 0 ? 7 : 2 + (x & 4);
}

KA_CODE

#define STR_(...) #__VA_ARGS__
#define STR(...) STR_(__VA_ARGS__)

#define KERNEL_PRELUDE                                                                     \
    "#include <math.h>\n#include <stdint.h>\n#include <string.h>\n"                        \
    "typedef int32_t (*kn_rt_task_fn)(void *, int32_t, int32_t);\n"                        \
    "typedef struct kn_rt_par {\n"                                                         \
    "    int32_t (*launch)(const struct kn_rt_par *, kn_rt_task_fn, void *);\n"            \
    "    int32_t n_threads, reserved;\n"                                                   \
    "    void *impl;\n"                                                                    \
    "} kn_rt_par;\n"

static const char ka_source_a64[] = KERNEL_PRELUDE KA_ASM STR(KA_CODE) "\n";
static const char ka_source_host[] =
    KERNEL_PRELUDE "static int ka_branchy(int x) { return (x & 1) ? 1 : x == 0 ? 7 : 2 + (x & 4); }\n"
    STR(KA_CODE) "\n";

/* ---- paths and commands --------------------------------------------------------------- */

/* snprintf that fails the test rather than truncate a path or a command. */
static void fmt(char *dst, size_t n, const char *f, ...) __attribute__((format(printf, 3, 4)));

static void fmt(char *dst, size_t n, const char *f, ...)
{
    va_list ap;
    int k;
    va_start(ap, f);
    k = vsnprintf(dst, n, f, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= n)
        fail_msg("a path or command is too long: %s...", dst);
}

static char root[PATH_MAX];      /* the repository: four levels above this executable */
static char host_runner[PATH_MAX]; /* build/<flavour>/tests/tools/kn_rt_run */
static char a64_runner[PATH_MAX];  /* build/aarch64/bin/kn_rt_run */
static char tmpdir[] = "/tmp/kn_rt_a64.XXXXXX";

static int setup(void **unused)
{
    char exe[PATH_MAX], dir[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    (void)unused;
    if (n <= 0 || mkdtemp(tmpdir) == NULL)
        return -1;
    exe[n] = 0;
    /* .../build/<flavour>/tests/kernels/test_rt_aarch64 */
    fmt(dir, sizeof dir, "%s", exe);
    fmt(exe, sizeof exe, "%s", dirname(dir));
    fmt(host_runner, sizeof host_runner, "%s/../tools/kn_rt_run", exe);
    fmt(dir, sizeof dir, "%s/../../../..", exe);
    if (realpath(dir, root) == NULL && getcwd(root, sizeof root) == NULL)
        return -1; /* else the working directory, where run_tests.sh starts tests */
    fmt(a64_runner, sizeof a64_runner, "%s/build/aarch64/bin/kn_rt_run", root);
    return 0;
}

static int teardown(void **unused)
{
    char cmd[128];
    (void)unused;
    if (getenv("KN_RT_KEEP_TMP")) { /* keep the sources, objects and outputs to look at */
        fprintf(stderr, "# kept %s\n", tmpdir);
        return 0;
    }
    fmt(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Run a shell command; its exit status (-1 if it did not exit).  stderr goes to
** TMP/last.err, which last_err() returns. */
static int sh(const char *cmd)
{
    char full[4096];
    int st;
    fmt(full, sizeof full, "cd '%s' && { %s ; } 2>last.err", tmpdir, cmd);
    st = system(full);
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static const char *last_err(void)
{
    static char text[4096];
    char path[PATH_MAX];
    FILE *f;
    size_t n;
    fmt(path, sizeof path, "%s/last.err", tmpdir);
    text[0] = 0;
    if ((f = fopen(path, "r")) != NULL) {
        n = fread(text, 1, sizeof text - 1, f);
        text[n] = 0;
        fclose(f);
    }
    return text;
}

static void need_file(const char *path, const char *what)
{
    if (access(path, X_OK) != 0)
        fail_msg("%s is missing: %s (build it with 'make %s')", what, path,
                 strstr(path, "aarch64") ? "rt-aarch64" : "tests-san");
}

static void write_source(const char *name, const char *src)
{
    char path[PATH_MAX];
    FILE *f;
    fmt(path, sizeof path, "%s/%s.c", tmpdir, name);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(src, f);
    fclose(f);
}

static void build(const char *cc_flags, const char *name, const char *src)
{
    char cmd[1024];
    write_source(name, src);
    fmt(cmd, sizeof cmd, "%s -c %s.c -o %s.o", cc_flags, name, name);
    if (sh(cmd) != 0)
        fail_msg("'%s' failed: %s", cmd, last_err());
}

static float *read_floats(const char *name, size_t n)
{
    char path[PATH_MAX];
    float *p = malloc(n * sizeof *p);
    FILE *f;
    fmt(path, sizeof path, "%s/%s", tmpdir, name);
    f = fopen(path, "rb");
    assert_non_null(p);
    if (f == NULL)
        fail_msg("no output file %s", path);
    assert_int_equal(fread(p, sizeof *p, n, f), n);
    assert_int_equal(fgetc(f), EOF); /* exactly the 'out' bytes */
    fclose(f);
    return p;
}

/* The native result of ka_main for inputs filled with 'seed'. */
static void reference(uint64_t seed, float *y)
{
    float *x = kn_rt_alloc(KA_ROWS * KA_COLS * sizeof(float));
    float *w = kn_rt_alloc(KA_COLS * sizeof(float));
    float *ws = kn_rt_alloc(KA_COLS * sizeof(float));
    void *bufs[3];
    assert_true(x && w && ws);
    kn_rt_fill(x, AT_DT_F32, KA_ROWS * KA_COLS, seed, 0);
    kn_rt_fill(w, AT_DT_F32, KA_COLS, seed, 1);
    bufs[0] = x;
    bufs[1] = w;
    bufs[2] = y;
    ka_calls = 0;
    assert_int_equal(ka_main(bufs, ws, kn_rt_serial_par()), 0);
    kn_rt_free(x);
    kn_rt_free(w);
    kn_rt_free(ws);
}

#define KA_BUFS "--buf f32:16x24:in --buf float32:24:in --buf f32:16x24:out --ws 96"

/* Collect the relocation types of an object (sections other than .eh_frame's). */
static void reloc_types(const char *name, uint8_t seen[512])
{
    char path[PATH_MAX], err[256];
    char *obj = NULL;
    size_t n = 0;
    Elf64_Ehdr eh;
    fmt(path, sizeof path, "%s/%s.o", tmpdir, name);
    assert_int_equal(at_file_read(path, &obj, &n, err, sizeof err), AT_OK);
    memcpy(&eh, obj, sizeof eh);
    for (size_t i = 0; i < eh.e_shnum; i++) {
        Elf64_Shdr s, str;
        memcpy(&s, obj + eh.e_shoff + i * sizeof s, sizeof s);
        memcpy(&str, obj + eh.e_shoff + eh.e_shstrndx * sizeof s, sizeof s);
        if (s.sh_type != SHT_RELA || strcmp(obj + str.sh_offset + s.sh_name, ".rela.eh_frame") == 0)
            continue;
        for (size_t k = 0; k < s.sh_size / sizeof(Elf64_Rela); k++) {
            Elf64_Rela r;
            memcpy(&r, obj + s.sh_offset + k * sizeof r, sizeof r);
            if (ELF64_R_TYPE(r.r_info) < 512)
                seen[ELF64_R_TYPE(r.r_info)] = 1;
        }
    }
    at_free(obj);
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_aarch64_objects_under_qemu(void **unused)
{
    static const struct {
        const char *cc, *name, *threads;
    } variants[] = {
        {"aarch64-linux-gnu-gcc -O2 -fPIC -mno-outline-atomics", "a64_gcc", "2"},
        {"clang-14 --target=aarch64-linux-gnu -mno-outline-atomics -O2 -fPIC", "a64_clang", "1"},
        {"aarch64-linux-gnu-gcc -O2 -fPIC -mno-outline-atomics -fno-plt -ffunction-sections -fno-section-anchors",
         "a64_noplt", "3"},
        {"aarch64-linux-gnu-gcc -O2 -fno-pic -mno-outline-atomics -mcmodel=large", "a64_large", "1"},
        {"clang-14 --target=aarch64-linux-gnu -mno-outline-atomics -O2 -fno-pic -mcmodel=large", "a64_clang_large",
         "2"},
        {"clang-14 --target=aarch64-linux-gnu -mno-outline-atomics -O3 -fPIC -g", "a64_clang_o3", "2"},
    };
    static const uint32_t want[] = {
        R_AARCH64_CALL26,           R_AARCH64_JUMP26,          R_AARCH64_ADR_PREL_PG_HI21,
        R_AARCH64_ADD_ABS_LO12_NC,  R_AARCH64_LDST8_ABS_LO12_NC, R_AARCH64_LDST16_ABS_LO12_NC,
        R_AARCH64_LDST32_ABS_LO12_NC, R_AARCH64_LDST64_ABS_LO12_NC,
        R_AARCH64_LDST128_ABS_LO12_NC, R_AARCH64_ADR_GOT_PAGE, R_AARCH64_LD64_GOT_LO12_NC,
        R_AARCH64_MOVW_UABS_G0_NC,  R_AARCH64_MOVW_UABS_G1_NC, R_AARCH64_MOVW_UABS_G2_NC,
        R_AARCH64_MOVW_UABS_G3,     R_AARCH64_TSTBR14,         R_AARCH64_CONDBR19,
        R_AARCH64_ADR_PREL_LO21,    R_AARCH64_LD_PREL_LO19,    R_AARCH64_ABS64,
    };
    uint8_t seen[512] = {0};
    float ref[KA_ROWS * KA_COLS];
    (void)unused;
    need_file(a64_runner, "the aarch64 runner");
    reference(77, ref);
    for (size_t v = 0; v < AT_ARRAY_LEN(variants); v++) {
        char cmd[2048], out[64];
        float *y;
        double e;
        build(variants[v].cc, variants[v].name, ka_source_a64);
        reloc_types(variants[v].name, seen);
        fmt(out, sizeof out, "%s.bin", variants[v].name);
        fmt(cmd, sizeof cmd,
                 "qemu-aarch64 -L /usr/aarch64-linux-gnu '%s' %s.o ka_main --threads %s "
                 "--seed 77 " KA_BUFS " --out %s",
                 a64_runner, variants[v].name, variants[v].threads, out);
        if (sh(cmd) != 0)
            fail_msg("%s: %s", cmd, last_err());
        y = read_floats(out, KA_ROWS * KA_COLS);
        e = kn_rt_rel_err(y, ref, AT_DT_F32, KA_ROWS * KA_COLS);
        printf("# %s: rel err %g vs native x86\n", variants[v].cc, e);
        assert_true(e <= 1e-5);
        free(y);
    }
    for (size_t i = 0; i < AT_ARRAY_LEN(want); i++)
        if (!seen[want[i]])
            fail_msg("no object of this test has relocation type %u", want[i]);
}

/* kn_rt_time and kn_rt_flush (dc civac) on AArch64: three positive costs. */
static void test_aarch64_timing_under_qemu(void **unused)
{
    char cmd[2048], line[256];
    double c[3];
    FILE *f;
    (void)unused;
    need_file(a64_runner, "the aarch64 runner");
    build("aarch64-linux-gnu-gcc -O2 -fPIC -mno-outline-atomics", "a64_time", ka_source_a64);
    fmt(cmd, sizeof cmd,
        "qemu-aarch64 -L /usr/aarch64-linux-gnu '%s' a64_time.o ka_main --threads 2 " KA_BUFS
        " --time 3 >time.txt",
        a64_runner);
    if (sh(cmd) != 0)
        fail_msg("%s: %s", cmd, last_err());
    fmt(line, sizeof line, "%s/time.txt", tmpdir);
    f = fopen(line, "r");
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    printf("# %s", line);
    assert_int_equal(sscanf(line, "cost_s %lf %lf %lf", &c[0], &c[1], &c[2]), 3);
    for (int i = 0; i < 3; i++)
        assert_true(c[i] > 0 && c[i] < 1.0);
}

static void test_runner_on_host(void **unused)
{
    char cmd[2048];
    float ref[KA_ROWS * KA_COLS], *y;
    (void)unused;
    need_file(host_runner, "the host runner");
    reference(5, ref);
    build("gcc -O2 -fPIC", "host", ka_source_host);
    fmt(cmd, sizeof cmd, "'%s' host.o ka_main --seed 5 --threads 2 " KA_BUFS " --out h.bin",
             host_runner);
    if (sh(cmd) != 0)
        fail_msg("%s: %s", cmd, last_err());
    y = read_floats("h.bin", KA_ROWS * KA_COLS);
    assert_true(kn_rt_rel_err(y, ref, AT_DT_F32, KA_ROWS * KA_COLS) <= 1e-6);
    free(y);
}

static void test_runner_errors(void **unused)
{
    static const struct {
        const char *args, *words;
        int status;
    } cases[] = {
        {"", "need an object file", 2},
        {"host.o", "need an object file", 2},
        {"nosuch.o ka_main", "nosuch.o", 2},
        {"host.o no_such_entry", "no_such_entry", 2},
        {"host.o ka_main --buf f33:4:in", "unknown dtype", 2},
        {"host.o ka_main --buf f32:4x:in", "bad shape", 2},
        {"host.o ka_main --buf f32:0:in", "bad shape", 2},
        {"host.o ka_main --buf f32:4:inout", "'in' or 'out'", 2},
        {"host.o ka_main --buf f32", "DTYPE:SHAPE", 2},
        {"host.o ka_main --buf f32:99999x99999x99:in", "bytes", 2},
        {"host.o ka_main --threads -1", "--threads", 2},
        {"host.o ka_main --threads", "needs a value", 2},
        {"host.o ka_main --seed x1", "--seed", 2},
        {"host.o ka_main --frobnicate", "unknown option", 2},
        {"host.o ka_main extra", "unexpected argument", 2},
        {"host.o ka_main --time 0", "--time", 2},
        {"a64_foreign.o ka_main", "AArch64", 2},
        {"fail.o kfail", "returned 5", 3},
        {"fail.o kfail --out /nonexistent/dir/x.bin", "returned 5", 3},
        {"fail.o kok --out /nonexistent/dir/x.bin", "/nonexistent/dir/x.bin", 2},
    };
    (void)unused;
    need_file(host_runner, "the host runner");
    build("gcc -O2 -fPIC", "host", ka_source_host);
    build("aarch64-linux-gnu-gcc -O2 -fPIC -mno-outline-atomics", "a64_foreign", ka_source_a64);
    build("gcc -O2 -fPIC", "fail",
          "#include <stdint.h>\n"
          "int32_t kfail(void *const *b, void *w, const void *p);\n"
          "int32_t kfail(void *const *b, void *w, const void *p) { (void)b; (void)w; (void)p; "
          "return 5; }\n"
          "int32_t kok(void *const *b, void *w, const void *p);\n"
          "int32_t kok(void *const *b, void *w, const void *p) { (void)b; (void)w; (void)p; "
          "return 0; }\n");
    for (size_t i = 0; i < AT_ARRAY_LEN(cases); i++) {
        char cmd[1024];
        int st;
        fmt(cmd, sizeof cmd, "'%s' %s", host_runner, cases[i].args);
        st = sh(cmd);
        if (st != cases[i].status || strstr(last_err(), cases[i].words) == NULL)
            fail_msg("kn_rt_run %s: status %d (want %d), stderr: %s (want \"%s\")",
                     cases[i].args, st, cases[i].status, last_err(), cases[i].words);
    }
    /* the AArch64 runner refuses an x86-64 object the same way */
    need_file(a64_runner, "the aarch64 runner");
    {
        char cmd[1024];
        int st;
        fmt(cmd, sizeof cmd, "qemu-aarch64 -L /usr/aarch64-linux-gnu '%s' host.o ka_main",
                 a64_runner);
        st = sh(cmd);
        assert_int_equal(st, 2);
        assert_non_null(strstr(last_err(), "x86-64"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_aarch64_objects_under_qemu),
        cmocka_unit_test(test_aarch64_timing_under_qemu),
        cmocka_unit_test(test_runner_on_host),
        cmocka_unit_test(test_runner_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
