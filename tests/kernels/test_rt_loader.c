/* tests/kernels/test_rt_loader.c -- the ELF loader on objects that gcc and clang-14 build
** at test time (they must be installed: a missing compiler fails the test), and on
** malformed objects: truncations, foreign machines, bad offsets and indices, unresolved
** symbols, and a few hundred deterministic byte mutations, which must all give AT_ELOAD
** (or load) and never crash.
**
** The kernel source is written once, in TK_CODE: this file compiles it natively (the
** reference) and stringifies it into the C file that the compilers turn into objects. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <elf.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels/kernels_rt.h"

/* ---- the kernel, compiled here and by the compilers under test ------------------------ */

#define TK_CODE                                                                            \
    typedef struct tk_args {                                                               \
        const float *x;                                                                    \
        float *y;                                                                          \
        float *ws;                                                                         \
        int n;                                                                             \
        int next; /* the next chunk to claim (kernels_rt.h: tasks claim their work) */      \
    } tk_args;                                                                             \
    int tk_counter;                 /* .bss (or a common symbol with -fcommon) */          \
    int tk_calls = 100;             /* .data */                                            \
    static int tk_state[4] = {1, 2, 3, 4}; /* a static table, written */                   \
    static const float tk_coef[8] = {0.125f, -0.5f, 0.75f, 1.25f, -1.5f, 2.0f, 0.3f, -0.7f}; \
    static float (*const tk_ops[3])(float) = {expf, sqrtf, tanhf}; /* pointers in data */  \
    float tk_helper(float v, int k);                                                       \
    __attribute__((noinline)) float tk_helper(float v, int k)                              \
    {                                                                                      \
        switch (k % 9) { /* dense: a jump table */                                         \
        case 0:                                                                            \
            return sinf(v);                                                                \
        case 1:                                                                            \
            return cosf(v) * 2.0f;                                                         \
        case 2:                                                                            \
            return sqrtf(v * v + 1.0f);                                                    \
        case 3:                                                                            \
            return logf(v * v + 2.0f);                                                     \
        case 4:                                                                            \
            return floorf(v * 4.0f) + ceilf(v * 3.0f);                                     \
        case 5:                                                                            \
            return fabsf(v) + 0.25f;                                                       \
        case 6:                                                                            \
            return erff(v);                                                                \
        case 7:                                                                            \
            return powf(fabsf(v) + 0.5f, 1.5f);                                            \
        default:                                                                           \
            return exp2f(v) - log2f(v * v + 1.0f);                                         \
        }                                                                                  \
    }                                                                                      \
    static __attribute__((noinline)) double tk_dhelper(double v)                           \
    {                                                                                      \
        return exp(v) * 0.5 + sqrt(fabs(v)) - tanh(v) + pow(fabs(v), 0.25) + log(2.0 + v); \
    }                                                                                      \
    float tk_apply(int k, float v);                                                        \
    float tk_apply(int k, float v)                                                         \
    {                                                                                      \
        return tk_ops[k % 3](fabsf(v));                                                    \
    }                                                                                      \
    int32_t tk_task(void *closure, int32_t t, int32_t nt);                                 \
    int32_t tk_task(void *closure, int32_t t, int32_t nt)                                  \
    {                                                                                      \
        tk_args *a = (tk_args *)closure;                                                   \
        int k, n_chunks = 4 * nt;                                                          \
        (void)t;                                                                           \
        while ((k = __atomic_fetch_add(&a->next, 1, __ATOMIC_RELAXED)) < n_chunks)         \
        for (int i = (int)((int64_t)a->n * k / n_chunks),                                  \
                 hi = (int)((int64_t)a->n * (k + 1) / n_chunks); i < hi; i++) {           \
            float v = a->ws[i];                                                            \
            a->y[i] = expf(v) * tk_coef[i & 7] + tk_helper(v, i) +                         \
                      (float)tk_dhelper((double)v) + tanhf(v) + fmaxf(v, 0.1f) +           \
                      fminf(v, -0.2f) + tk_apply(i, v);                                    \
        }                                                                                  \
        return 0;                                                                          \
    }                                                                                      \
    int tk_state_get(int k);                                                               \
    int tk_state_get(int k)                                                                \
    {                                                                                      \
        return tk_state[k & 3];                                                            \
    }                                                                                      \
    int32_t tk_main(void *const *bufs, void *ws, const kn_rt_par *par);                   \
    int32_t tk_main(void *const *bufs, void *ws, const kn_rt_par *par)                    \
    {                                                                                      \
        tk_args a;                                                                         \
        a.x = (const float *)bufs[0];                                                      \
        a.y = (float *)bufs[1];                                                            \
        a.ws = (float *)ws;                                                                \
        a.n = *(const int *)bufs[2];                                                       \
        a.next = 0;                                                                        \
        if (a.n < 0)                                                                       \
            return 3;                                                                      \
        memcpy(a.ws, a.x, (size_t)a.n * sizeof(float));                                    \
        tk_counter++;                                                                      \
        tk_calls++;                                                                        \
        tk_state[a.n & 3] += 10;                                                           \
        return par->launch(par, tk_task, &a);                                              \
    }

#define STR_(...) #__VA_ARGS__
#define STR(...) STR_(__VA_ARGS__)

/* What the object's C file starts with: the ABI types as the header has them. */
#define KERNEL_PRELUDE                                                                     \
    "#include <math.h>\n#include <stdint.h>\n#include <string.h>\n"                        \
    "typedef int32_t (*kn_rt_task_fn)(void *, int32_t, int32_t);\n"                        \
    "typedef struct kn_rt_par {\n"                                                         \
    "    int32_t (*launch)(const struct kn_rt_par *, kn_rt_task_fn, void *);\n"            \
    "    int32_t n_threads, reserved;\n"                                                   \
    "    void *impl;\n"                                                                    \
    "} kn_rt_par;\n"

TK_CODE /* the native reference */

static const char tk_source[] = KERNEL_PRELUDE STR(TK_CODE) "\n";

/* ---- compiling ------------------------------------------------------------------------ */

static char tmpdir[] = "/tmp/kn_rt_loader.XXXXXX";

static int setup(void **unused)
{
    (void)unused;
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **unused)
{
    char cmd[128];
    (void)unused;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (getenv("KN_RT_KEEP_TMP")) { /* keep the sources and objects to look at */
        fprintf(stderr, "# kept %s\n", tmpdir);
        return 0;
    }
    return system(cmd) == 0 ? 0 : -1;
}

/* Write 'src' to NAME.c, run "CC FLAGS -c NAME.c -o NAME.o" and read the object.  A
** failing compiler fails the test, with its messages. */
static void compile(const char *cc, const char *flags, const char *src, const char *name,
                    char **obj, size_t *n)
{
    char path[256], cmd[1024], err[256];
    FILE *f;
    snprintf(path, sizeof path, "%s/%s.c", tmpdir, name);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(src, f);
    fclose(f);
    if (strcmp(cc, "llc-16") == 0) /* LLVM 16, as the code generator: clang-14's IR */
        snprintf(cmd, sizeof cmd,
                 "cd '%s' && clang-14 -O2 -fPIC -S -emit-llvm -o %s.ll %s.c 2>%s.err && "
                 "llc-16 %s -filetype=obj -o %s.o %s.ll 2>>%s.err",
                 tmpdir, name, name, name, flags, name, name, name);
    else
        snprintf(cmd, sizeof cmd, "cd '%s' && %s %s -c %s.c -o %s.o 2>%s.err", tmpdir, cc,
                 flags, name, name, name);
    if (system(cmd) != 0) {
        snprintf(cmd, sizeof cmd, "cat '%s/%s.err' >&2", tmpdir, name);
        if (system(cmd) != 0)
            fprintf(stderr, "(no compiler messages)\n");
        fail_msg("'%s %s' failed on %s.c (is %s installed?)", cc, flags, name, cc);
    }
    snprintf(path, sizeof path, "%s/%s.o", tmpdir, name);
    assert_int_equal(at_file_read(path, obj, n, err, sizeof err), AT_OK);
}

/* ---- running the kernel --------------------------------------------------------------- */

enum { N_ELEMS = 1000 };

typedef struct run_bufs {
    float *x, *y, *ws;
    int *n;
    void *bufs[3];
} run_bufs;

static void bufs_init(run_bufs *b, int n)
{
    b->x = kn_rt_alloc(N_ELEMS * sizeof(float));
    b->y = kn_rt_alloc(N_ELEMS * sizeof(float));
    b->ws = kn_rt_alloc(N_ELEMS * sizeof(float));
    b->n = kn_rt_alloc(sizeof(int));
    assert_true(b->x && b->y && b->ws && b->n);
    kn_rt_fill(b->x, AT_DT_F32, N_ELEMS, 11, 0);
    *b->n = n;
    b->bufs[0] = b->x;
    b->bufs[1] = b->y;
    b->bufs[2] = b->n;
}

static void bufs_fini(run_bufs *b)
{
    kn_rt_free(b->x);
    kn_rt_free(b->y);
    kn_rt_free(b->ws);
    kn_rt_free(b->n);
}

/* Permissions ("r-xp") of the mapping that holds 'addr', from /proc/self/maps. */
static void perms_of(const void *addr, char perms[5])
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    uintptr_t a = (uintptr_t)addr;
    strcpy(perms, "?");
    assert_non_null(f);
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char p[5];
        if (sscanf(line, "%lx-%lx %4s", &lo, &hi, p) == 3 && a >= lo && a < hi) {
            memcpy(perms, p, 5);
            break;
        }
    }
    fclose(f);
}

/* Load the object of one compiler/flags pair, run it serially and on a pool, compare
** with the native build of TK_CODE, and check its globals. */
static void check_variant(const char *cc, const char *flags, const char *name)
{
    char *obj = NULL, err[512];
    size_t n = 0;
    kn_rt_module *m = NULL, *m2 = NULL;
    kn_rt_kernel_fn fn;
    kn_rt_pool *pool = NULL;
    run_bufs mine, ref;
    int *counter, *calls;
    int (*state_get)(int);
    float (*apply)(int, float);
    char perms[5];
    double e;

    compile(cc, flags, tk_source, name, &obj, &n);
    if (kn_rt_module_load(obj, n, NULL, &m, err, sizeof err) != AT_OK)
        fail_msg("%s %s: %s", cc, flags, err);
    memset(obj, 0, n); /* the module must not use the object's bytes any more */
    at_free(obj);

    fn = (kn_rt_kernel_fn)kn_rt_module_sym(m, "tk_main");
    counter = kn_rt_module_sym(m, "tk_counter");
    calls = kn_rt_module_sym(m, "tk_calls");
    state_get = (int (*)(int))kn_rt_module_sym(m, "tk_state_get");
    apply = (float (*)(int, float))kn_rt_module_sym(m, "tk_apply");
    assert_non_null(fn);
    assert_non_null(counter);
    assert_non_null(calls);
    assert_non_null(state_get);
    assert_non_null(apply);
    assert_non_null(kn_rt_module_sym(m, "tk_helper"));
    assert_null(kn_rt_module_sym(m, "tk_dhelper")); /* static: not exported */
    assert_null(kn_rt_module_sym(m, "tk_coef"));
    assert_null(kn_rt_module_sym(m, "expf"));       /* undefined here */
    assert_null(kn_rt_module_sym(m, "no_such_symbol"));
    assert_int_equal(*counter, 0);
    assert_int_equal(*calls, 100);
    assert_int_equal(state_get(2), 3);

    perms_of((const void *)fn, perms);
    assert_string_equal(perms, "r-xp");
    perms_of(calls, perms);
    assert_string_equal(perms, "rw-p");

    bufs_init(&mine, N_ELEMS);
    bufs_init(&ref, N_ELEMS);
    tk_counter = 0;
    tk_calls = 100;
    assert_int_equal(tk_main(ref.bufs, ref.ws, kn_rt_serial_par()), 0);

    assert_int_equal(fn(mine.bufs, mine.ws, kn_rt_serial_par()), 0);
    e = kn_rt_rel_err(mine.y, ref.y, AT_DT_F32, N_ELEMS);
    printf("# %s %s: serial rel err %g\n", cc, flags, e);
    assert_true(e <= 1e-6);

    assert_int_equal(kn_rt_pool_new(2, &pool), AT_OK);
    memset(mine.y, 0, N_ELEMS * sizeof(float));
    assert_int_equal(fn(mine.bufs, mine.ws, kn_rt_pool_par(pool)), 0);
    e = kn_rt_rel_err(mine.y, ref.y, AT_DT_F32, N_ELEMS);
    assert_true(e <= 1e-6);
    kn_rt_pool_free(pool);

    assert_int_equal(*counter, 2); /* .bss/common and .data globals were written */
    assert_int_equal(*calls, 102);
    assert_int_equal(state_get(N_ELEMS & 3), (N_ELEMS & 3) + 1 + 20);
    assert_true(apply(4, -0.25f) == tk_apply(4, -0.25f)); /* sqrtf through the table */

    *ref.n = -1; /* the kernel's own error return */
    assert_int_equal(fn(ref.bufs, ref.ws, kn_rt_serial_par()), 3);

    /* a second load of the object has its own globals */
    compile(cc, flags, tk_source, name, &obj, &n);
    assert_int_equal(kn_rt_module_load(obj, n, NULL, &m2, err, sizeof err), AT_OK);
    at_free(obj);
    assert_int_equal(*(int *)kn_rt_module_sym(m2, "tk_counter"), 0);
    assert_int_equal(*counter, 2);
    kn_rt_module_free(m2);

    bufs_fini(&mine);
    bufs_fini(&ref);
    kn_rt_module_free(m);
}

static void test_load_gcc_O2(void **unused)
{
    (void)unused;
    check_variant("gcc", "-O2 -fPIC", "gcc_o2");
}

static void test_load_gcc_variants(void **unused)
{
    (void)unused;
    check_variant("gcc", "-O2 -fPIC -fno-plt", "gcc_noplt");       /* calls through the GOT */
    check_variant("gcc", "-O2 -fPIC -fcommon -ffunction-sections -fdata-sections",
                  "gcc_sections");                                 /* common, many sections */
    check_variant("gcc", "-O0 -fPIC", "gcc_o0");
    check_variant("gcc", "-O3 -fPIC -g", "gcc_o3g");               /* with debug sections */
    check_variant("gcc", "-O2 -fPIC -mcmodel=large", "gcc_large"); /* GOT64, PLTOFF64 ... */
}

static void test_load_clang(void **unused)
{
    (void)unused;
    check_variant("clang-14", "-O2 -fPIC", "clang_o2");
    check_variant("clang-14", "-O2 -fPIC -fno-plt -ffunction-sections", "clang_noplt");
    check_variant("llc-16", "-O3 -relocation-model=pic", "llc16");
    check_variant("llc-16", "-O3 -relocation-model=pic -code-model=large", "llc16_large");
}

/* ---- symbols ----------------------------------------------------------------------------- */

static const char far_src[] =
    "int kn_far_fn(void);\n"
    "int tk_far(void);\n"
    "int tk_far(void) { return kn_far_fn() + 1; }\n"
    "int tk_far_tail(void);\n"
    "int tk_far_tail(void) { return kn_far_fn(); }\n"
    "float expf(float);\n"
    "float tk_expf(float x);\n"
    "float tk_expf(float x) { return expf(x); }\n";

/* A function that returns 42, written as machine code into a page mapped far (many
** GiB) from where the loader's images go: a direct call could not reach it. */
static void *far_function(void)
{
#if defined(__x86_64__)
    static const uint8_t code[] = {0xb8, 42, 0, 0, 0, 0xc3}; /* mov $42, %eax; ret */
#elif defined(__aarch64__)
    static const uint8_t code[] = {0x40, 0x05, 0x80, 0x52, 0xc0, 0x03, 0x5f, 0xd6};
#endif
    /* where mmap puts things now (and so the loader's image), then free places far from
    ** it; ASan owns some ranges (its allocator sits at 0x600000000000), hence a list */
    void *probe = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), *p = NULL;
    uintptr_t near, hints[4];
    assert_true(probe != MAP_FAILED);
    near = (uintptr_t)probe;
    munmap(probe, 4096);
    hints[0] = near - ((uintptr_t)64 << 30);
    hints[1] = near - ((uintptr_t)1 << 40);
    hints[2] = (uintptr_t)0x500000000000ull;
    hints[3] = (uintptr_t)0x300000000000ull;
    for (int i = 0; i < 4 && p == NULL; i++) {
        p = mmap((void *)(hints[i] & ~(uintptr_t)4095), 4096, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (p == MAP_FAILED)
            p = NULL;
    }
    if (p == NULL)
        fail_msg("could not map a page far from %p", probe);
    memcpy(p, code, sizeof code);
    assert_int_equal(mprotect(p, 4096, PROT_READ | PROT_EXEC), 0);
    __builtin___clear_cache((char *)p, (char *)p + sizeof code);
    return p;
}

static float fake_expf(float x)
{
    return x + 1000.0f;
}

static void test_far_and_extra_symbols(void **unused)
{
    const char *flags[] = {"-O2 -fPIC", "-O2 -fPIC -fno-plt", "-O2 -fPIC -mcmodel=large"};
    void *far = far_function();
    (void)unused;
    for (size_t k = 0; k < AT_ARRAY_LEN(flags); k++) {
        kn_rt_symbol extra[] = {{"kn_far_fn", far}, {"expf", (void *)fake_expf}, {NULL, NULL}};
        char *obj = NULL, err[256], name[32];
        size_t n = 0;
        kn_rt_module *m = NULL;
        int (*f)(void), (*ft)(void);
        float (*e)(float);
        intptr_t dist;
        snprintf(name, sizeof name, "far%zu", k);
        compile("gcc", flags[k], far_src, name, &obj, &n);
        /* without 'extra' the symbol is unknown: an error that names it */
        assert_int_equal(kn_rt_module_load(obj, n, NULL, &m, err, sizeof err), AT_ELOAD);
        assert_null(m);
        assert_non_null(strstr(err, "kn_far_fn"));
        assert_int_equal(kn_rt_module_load(obj, n, extra, &m, err, sizeof err), AT_OK);
        f = (int (*)(void))kn_rt_module_sym(m, "tk_far");
        ft = (int (*)(void))kn_rt_module_sym(m, "tk_far_tail");
        e = (float (*)(float))kn_rt_module_sym(m, "tk_expf");
        assert_true(f && ft && e);
        dist = (intptr_t)((uintptr_t)far - (uintptr_t)f);
        printf("# far function at %p, module code at %p\n", far, (void *)f);
        assert_true(dist > ((intptr_t)1 << 33) || dist < -((intptr_t)1 << 33));
        assert_int_equal(f(), 43);   /* through a call stub */
        assert_int_equal(ft(), 42);  /* a tail call through a stub */
        assert_true(e(1.0f) == 1001.0f); /* 'extra' comes before the built-in table */
        kn_rt_module_free(m);
        at_free(obj);
    }
    munmap(far, 4096);
}

static void test_builtin_symbol_table(void **unused)
{
    const char *need[] = {"memcpy", "memset", "memmove", "expf", "exp", "logf", "log",
                          "sqrtf", "sqrt", "tanhf", "tanh", "erff", "erf", "powf", "pow",
                          "fabsf", "fabs", "floorf", "floor", "ceilf", "ceil", "fmaxf",
                          "fminf", "sinf", "cosf", "exp2f", "log2f", "sincosf"};
    const kn_rt_symbol *t = kn_rt_symbols();
    size_t n = 0;
    (void)unused;
    while (t[n].name) {
        assert_non_null(t[n].addr);
        n++;
    }
    assert_true(n >= AT_ARRAY_LEN(need));
    for (size_t i = 0; i < AT_ARRAY_LEN(need); i++) {
        size_t k = 0;
        while (t[k].name && strcmp(t[k].name, need[i]) != 0)
            k++;
        if (t[k].name == NULL)
            fail_msg("'%s' is missing from kn_rt_symbols()", need[i]);
    }
}

/* ---- malformed objects ------------------------------------------------------------------- */

static char *good_obj;
static size_t good_n;

static void need_good_object(void)
{
    if (good_obj == NULL)
        compile("gcc", "-O2 -fPIC", tk_source, "good", &good_obj, &good_n);
}

/* Load a copy of the object; the result code (AT_ELOAD expected). */
static at_err try_load(const uint8_t *p, size_t n, char *err, size_t err_size)
{
    kn_rt_module *m = (kn_rt_module *)1;
    uint8_t *copy = malloc(n ? n : 1); /* exact size: ASan sees any read past the end */
    at_err rc;
    assert_non_null(copy);
    memcpy(copy, p, n);
    rc = kn_rt_module_load(copy, n, NULL, &m, err, err_size);
    if (rc == AT_OK)
        kn_rt_module_free(m);
    else
        assert_null(m);
    free(copy);
    return rc;
}

static Elf64_Ehdr ehdr_get(const uint8_t *p)
{
    Elf64_Ehdr e;
    memcpy(&e, p, sizeof e);
    return e;
}

static Elf64_Shdr shdr_get(const uint8_t *p, size_t i)
{
    Elf64_Shdr s;
    memcpy(&s, p + ehdr_get(p).e_shoff + i * sizeof s, sizeof s);
    return s;
}

static void shdr_put(uint8_t *p, size_t i, const Elf64_Shdr *s)
{
    memcpy(p + ehdr_get(p).e_shoff + i * sizeof *s, s, sizeof *s);
}

static size_t find_section(const uint8_t *p, const char *name)
{
    Elf64_Ehdr e = ehdr_get(p);
    Elf64_Shdr str = shdr_get(p, e.e_shstrndx);
    for (size_t i = 1; i < e.e_shnum; i++)
        if (strcmp((const char *)p + str.sh_offset + shdr_get(p, i).sh_name, name) == 0)
            return i;
    fail_msg("no section %s in the test object", name);
    return 0;
}

static void expect_eload(const uint8_t *p, size_t n, const char *words)
{
    char err[300];
    at_err rc = try_load(p, n, err, sizeof err);
    if (rc != AT_ELOAD)
        fail_msg("expected AT_ELOAD (%s), got %s: %s", words, at_errname(rc), err);
    if (words && strstr(err, words) == NULL)
        fail_msg("error text \"%s\" does not mention \"%s\"", err, words);
}

static void test_truncated(void **unused)
{
    (void)unused;
    need_good_object();
    assert_int_equal(try_load((const uint8_t *)good_obj, good_n, NULL, 0), AT_OK);
    expect_eload((const uint8_t *)good_obj, 0, "too small");
    for (size_t len = 1; len < good_n; len += 1 + len / 50)
        expect_eload((const uint8_t *)good_obj, len, NULL);
    expect_eload((const uint8_t *)good_obj, good_n - 1, NULL);
}

static void test_header_errors(void **unused)
{
    uint8_t *p;
    Elf64_Ehdr e, orig;
    (void)unused;
    need_good_object();
    p = malloc(good_n);
    assert_non_null(p);
    memcpy(p, good_obj, good_n);
    orig = ehdr_get(p);
#define WITH(field, value, words)                                                          \
    do {                                                                                   \
        e = orig;                                                                          \
        e.field = value;                                                                   \
        memcpy(p, &e, sizeof e);                                                           \
        expect_eload(p, good_n, words);                                                    \
    } while (0)
    WITH(e_machine, orig.e_machine == EM_X86_64 ? EM_AARCH64 : EM_X86_64, "object is for");
    WITH(e_machine, EM_RISCV, "RISC-V");
    WITH(e_type, ET_DYN, "not a relocatable object");
    WITH(e_ident[EI_MAG1], 'X', "not an ELF file");
    WITH(e_ident[EI_CLASS], ELFCLASS32, "64-bit");
    WITH(e_ident[EI_DATA], ELFDATA2MSB, "little-endian");
    WITH(e_version, 7, "version");
    WITH(e_shentsize, 40, "section header size");
    WITH(e_shoff, good_n, "section header table");
    WITH(e_shoff, UINT64_MAX - 7, "section header table");
    WITH(e_shoff, 0, "section header table");
    WITH(e_shnum, 0xfff0, "does not fit");
    WITH(e_shstrndx, 0xfff0, "name table");
    WITH(e_shstrndx, 0, "name table");
#undef WITH
    memcpy(p, &orig, sizeof orig);
    assert_int_equal(try_load(p, good_n, NULL, 0), AT_OK);
    free(p);
}

static void test_section_errors(void **unused)
{
    uint8_t *p;
    size_t text, rela, symtab;
    Elf64_Shdr s, orig;
    (void)unused;
    need_good_object();
    p = malloc(good_n);
    assert_non_null(p);
    memcpy(p, good_obj, good_n);
    text = find_section(p, ".text");
    rela = find_section(p, ".rela.text");
    symtab = find_section(p, ".symtab");
#define WITH(sec, field, value, words)                                                     \
    do {                                                                                   \
        orig = s = shdr_get(p, sec);                                                       \
        s.field = value;                                                                   \
        shdr_put(p, sec, &s);                                                              \
        expect_eload(p, good_n, words);                                                    \
        shdr_put(p, sec, &orig);                                                           \
    } while (0)
    WITH(text, sh_offset, good_n, "outside the object");
    WITH(text, sh_offset, UINT64_MAX - 3, "outside the object");
    WITH(text, sh_size, good_n, "outside the object");
    WITH(text, sh_size, UINT64_MAX, "outside the object");
    WITH(text, sh_addralign, 24, "power of two");
    WITH(text, sh_addralign, (uint64_t)1 << 40, "larger than a page");
    WITH(text, sh_name, 0x7fffffff, "name offset");
    WITH(text, sh_flags, SHF_ALLOC | SHF_EXECINSTR | SHF_WRITE, "writable and executable");
    WITH(text, sh_flags, SHF_ALLOC | SHF_EXECINSTR | SHF_TLS, "thread-local");
    WITH(rela, sh_link, 0, "symbol table");
    WITH(rela, sh_link, 9999, "symbol table");
    WITH(rela, sh_entsize, 16, "entry size");
    WITH(rela, sh_type, SHT_REL, "SHT_REL");
    WITH(symtab, sh_link, 9999, "string table");
    WITH(symtab, sh_entsize, 0, "entry size");
    WITH(symtab, sh_size, 25, "entry size");
#undef WITH
    /* a huge .bss: refused, not mapped */
    {
        size_t bss = find_section(p, ".bss");
        orig = s = shdr_get(p, bss);
        s.sh_size = (uint64_t)1 << 40;
        shdr_put(p, bss, &s);
        expect_eload(p, good_n, "too large");
        s.sh_size = (uint64_t)200 << 20; /* large but allowed: mapped, never touched */
        shdr_put(p, bss, &s);
        assert_int_equal(try_load(p, good_n, NULL, 0), AT_OK);
        shdr_put(p, bss, &orig);
    }
    assert_int_equal(try_load(p, good_n, NULL, 0), AT_OK);
    free(p);
}

static void test_relocation_and_symbol_errors(void **unused)
{
    uint8_t *p;
    size_t rela, symtab, text;
    Elf64_Shdr rs, ss, ts;
    Elf64_Rela r, orig;
    Elf64_Sym sym, osym;
    uint64_t nsyms;
    size_t at;
    (void)unused;
    need_good_object();
    p = malloc(good_n);
    assert_non_null(p);
    memcpy(p, good_obj, good_n);
    rela = find_section(p, ".rela.text");
    symtab = find_section(p, ".symtab");
    text = find_section(p, ".text");
    rs = shdr_get(p, rela);
    ss = shdr_get(p, symtab);
    ts = shdr_get(p, text);
    nsyms = ss.sh_size / sizeof(Elf64_Sym);
    at = (size_t)rs.sh_offset;
    memcpy(&orig, p + at, sizeof orig);
#define WITH_RELA(expr, words)                                                             \
    do {                                                                                   \
        r = orig;                                                                          \
        expr;                                                                              \
        memcpy(p + at, &r, sizeof r);                                                      \
        expect_eload(p, good_n, words);                                                    \
        memcpy(p + at, &orig, sizeof orig);                                                \
    } while (0)
    WITH_RELA(r.r_info = ELF64_R_INFO(nsyms + 5, ELF64_R_TYPE(orig.r_info)), "symbol index");
    WITH_RELA(r.r_info = ELF64_R_INFO(0xffffff, ELF64_R_TYPE(orig.r_info)), "symbol index");
    WITH_RELA(r.r_info = ELF64_R_INFO(ELF64_R_SYM(orig.r_info), 200), "unsupported relocation");
    WITH_RELA(r.r_offset = ts.sh_size - 1, "outside section");
    WITH_RELA(r.r_offset = UINT64_MAX - 2, "outside section");
#undef WITH_RELA

    /* a GOT relocation (the kernel's globals go through the GOT) without a symbol */
    at = 0;
    for (size_t k = 0; k < rs.sh_size / sizeof r && at == 0; k++) {
        size_t kat = (size_t)rs.sh_offset + k * sizeof r;
        uint32_t type;
        memcpy(&orig, p + kat, sizeof orig);
        type = (uint32_t)ELF64_R_TYPE(orig.r_info);
        if (type != R_X86_64_REX_GOTPCRELX && type != R_X86_64_GOTPCRELX &&
            type != R_X86_64_GOTPCREL && type != R_AARCH64_ADR_GOT_PAGE)
            continue;
        r = orig;
        r.r_info = ELF64_R_INFO(0, type);
        memcpy(p + kat, &r, sizeof r);
        expect_eload(p, good_n, "without a symbol");
        memcpy(p + kat, &orig, sizeof orig);
        at = kat;
    }
    assert_true(at != 0); /* the object has a GOT relocation to break */

    /* a symbol whose section index is out of range, or whose value is past its section */
    for (uint64_t i = 1; i < nsyms; i++) {
        size_t sat = (size_t)(ss.sh_offset + i * sizeof sym);
        memcpy(&osym, p + sat, sizeof osym);
        if (osym.st_shndx != text)
            continue;
        sym = osym;
        sym.st_shndx = 0xfe00;
        memcpy(p + sat, &sym, sizeof sym);
        expect_eload(p, good_n, "section index");
        sym = osym;
        sym.st_value = ts.sh_size + 1;
        memcpy(p + sat, &sym, sizeof sym);
        expect_eload(p, good_n, "past the end");
        sym = osym;
        sym.st_name = 0x7fffffff;
        memcpy(p + sat, &sym, sizeof sym);
        expect_eload(p, good_n, "name offset");
        memcpy(p + sat, &osym, sizeof osym);
        break;
    }
    assert_int_equal(try_load(p, good_n, NULL, 0), AT_OK);
    free(p);
}

static void test_unresolved_symbol(void **unused)
{
    static const char src[] = "float kn_no_such_function_xyz(float);\n"
                              "float tk_u(float x);\n"
                              "float tk_u(float x) { return kn_no_such_function_xyz(x) * 2; }\n";
    char *obj = NULL, err[256];
    size_t n = 0;
    kn_rt_module *m = (kn_rt_module *)1;
    (void)unused;
    compile("gcc", "-O2 -fPIC", src, "unresolved", &obj, &n);
    assert_int_equal(kn_rt_module_load(obj, n, NULL, &m, err, sizeof err), AT_ELOAD);
    assert_null(m);
    assert_non_null(strstr(err, "kn_no_such_function_xyz"));
    /* no message buffer, or a tiny one, is fine */
    assert_int_equal(kn_rt_module_load(obj, n, NULL, &m, NULL, 0), AT_ELOAD);
    assert_int_equal(kn_rt_module_load(obj, n, NULL, &m, err, 5), AT_ELOAD);
    assert_int_equal(strlen(err), 4);
    assert_int_equal(kn_rt_module_load(NULL, 0, NULL, &m, err, sizeof err), AT_ELOAD);
    assert_int_equal(kn_rt_module_load(obj, n, NULL, NULL, err, sizeof err), AT_EINVAL);
    at_free(obj);
}

static void test_non_pic_object_overflows(void **unused)
{
    char *obj = NULL, err[512];
    size_t n = 0;
    kn_rt_module *m = NULL;
    (void)unused;
    /* -fno-pic addresses data with 32-bit absolute fields (R_X86_64_32S, AArch64 too far
    ** for ...) that cannot hold an address of a high mmap: out of range, not truncated */
#if defined(__x86_64__)
    compile("gcc", "-O2 -fno-pic -mcmodel=small", tk_source, "nopic", &obj, &n);
    assert_int_equal(kn_rt_module_load(obj, n, NULL, &m, err, sizeof err), AT_ELOAD);
    assert_non_null(strstr(err, "out of range"));
    assert_null(m);
    at_free(obj);
#else
    compile("gcc", "-O2 -fno-pic", tk_source, "nopic", &obj, &n);
    assert_int_equal(kn_rt_module_load(obj, n, NULL, &m, err, sizeof err), AT_OK);
    kn_rt_module_free(m);
    at_free(obj);
#endif
}

/* Deterministic mutations: 1..4 bytes of one region (ELF header, section headers,
** symbol table, relocations, anywhere) get XORed or set to 0x00/0xff/0x7f.  600 of them;
** AT_TEST_LONG=1 runs 50000. */
static void test_random_mutations(void **unused)
{
    at_rng rng;
    uint8_t *p;
    int n_ok = 0, n_err = 0, n_iter = getenv("AT_TEST_LONG") ? 50000 : 600;
    size_t sh_lo, sh_hi, sym, rela;
    Elf64_Shdr ss, rs;
    (void)unused;
    need_good_object();
    p = malloc(good_n);
    assert_non_null(p);
    sh_lo = (size_t)ehdr_get((const uint8_t *)good_obj).e_shoff;
    sh_hi = sh_lo + ehdr_get((const uint8_t *)good_obj).e_shnum * sizeof(Elf64_Shdr);
    sym = find_section((const uint8_t *)good_obj, ".symtab");
    rela = find_section((const uint8_t *)good_obj, ".rela.text");
    ss = shdr_get((const uint8_t *)good_obj, sym);
    rs = shdr_get((const uint8_t *)good_obj, rela);
    at_rng_seed(&rng, 20261129);
    for (int iter = 0; iter < n_iter; iter++) {
        size_t lo = 0, hi = good_n;
        int n_bytes = 1 + (int)at_rng_below(&rng, 4);
        char err[256];
        at_err rc;
        switch (at_rng_below(&rng, 5)) {
        case 0:
            hi = sizeof(Elf64_Ehdr);
            break;
        case 1:
            lo = sh_lo;
            hi = sh_hi;
            break;
        case 2:
            lo = (size_t)ss.sh_offset;
            hi = lo + (size_t)ss.sh_size;
            break;
        case 3:
            lo = (size_t)rs.sh_offset;
            hi = lo + (size_t)rs.sh_size;
            break;
        default:
            break;
        }
        memcpy(p, good_obj, good_n);
        for (int k = 0; k < n_bytes; k++) {
            size_t at = lo + (size_t)at_rng_below(&rng, hi - lo);
            switch (at_rng_below(&rng, 4)) {
            case 0:
                p[at] = 0;
                break;
            case 1:
                p[at] = 0xff;
                break;
            case 2:
                p[at] = 0x7f;
                break;
            default:
                p[at] ^= (uint8_t)(1 + at_rng_below(&rng, 255));
                break;
            }
        }
        rc = try_load(p, good_n, err, sizeof err);
        if (rc != AT_OK && rc != AT_ELOAD)
            fail_msg("mutation %d: %s (%s)", iter, at_errname(rc), err);
        if (rc == AT_OK)
            n_ok++;
        else
            n_err++;
    }
    printf("# %d mutations: %d loaded, %d refused\n", n_iter, n_ok, n_err);
    assert_true(n_err > n_iter / 6); /* the mutations do reach the checks */
    free(p);
}

static void test_load_survives_oom(void **unused)
{
    (void)unused;
    need_good_object();
    for (size_t limit = 0;; limit++) {
        kn_rt_module *m = NULL;
        long live = at_test_live_allocs();
        char err[128];
        at_err rc;
        at_test_alloc_limit(limit);
        rc = kn_rt_module_load(good_obj, good_n, NULL, &m, err, sizeof err);
        at_test_alloc_limit(SIZE_MAX);
        if (rc == AT_OK) {
            assert_non_null(kn_rt_module_sym(m, "tk_main"));
            kn_rt_module_free(m);
            assert_int_equal(at_test_live_allocs(), live);
            break;
        }
        assert_int_equal(rc, AT_ENOMEM);
        assert_null(m);
        assert_int_equal(at_test_live_allocs(), live);
    }
    at_free(good_obj);
    good_obj = NULL;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_gcc_O2),
        cmocka_unit_test(test_load_gcc_variants),
        cmocka_unit_test(test_load_clang),
        cmocka_unit_test(test_far_and_extra_symbols),
        cmocka_unit_test(test_builtin_symbol_table),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_header_errors),
        cmocka_unit_test(test_section_errors),
        cmocka_unit_test(test_relocation_and_symbol_errors),
        cmocka_unit_test(test_unresolved_symbol),
        cmocka_unit_test(test_non_pic_object_overflows),
        cmocka_unit_test(test_random_mutations),
        cmocka_unit_test(test_load_survives_oom),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
