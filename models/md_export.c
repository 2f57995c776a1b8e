/* models/md_export.c -- 'tuner export-lib': one shared library holding the best kernel of
** every task, each behind a plain C entry point, and its header.
**
** For each task: the best record for the target (and device key) whose state replays, else
** the naive state; lowered and compiled by kn_build for the target with the entry symbol
** tnk_<prefix>_<i>, written as an object.  A generated C file (the "glue") holds what the
** kernel ABI asks of a caller: the parallel runtime (kn_rt_par's layout), the workspaces
** (static, sized for max_threads), the weights rewritten into the kernels' layouts (made by
** the artifact's pre-transform on the first call and again whenever a weight's address
** changes), and the public functions.  Everything is linked into one shared object whose
** only exported symbols are the public functions (a version script):
**
**   x86-64 / aarch64 Linux  glue compiled and linked by the target's gcc driver (cc or
**                           aarch64-linux-gnu-gcc): libc, libm, and a pthread pool
**   aarch64 Android         glue compiled freestanding (aarch64-linux-gnu-gcc), linked by
**                           ld.lld-16 against stub libm.so/libc.so made here, so the library
**                           needs nothing but the symbols the kernels call (expf, memcpy, ...)
**                           from Android's libm and libc; serial only (no threads)
**
** docs/models.md has the calling convention and an example. */
#include "models/md_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/kernels.h"

void md__lib_prefix(const char *path, char *out, size_t size)
{
    const char *b = strrchr(path, '/');
    size_t k = 0, n;
    b = b ? b + 1 : path;
    if (strncmp(b, "lib", 3) == 0 && b[3])
        b += 3;
    n = strcspn(b, ".");
    if (size == 0)
        return;
    if (n == 0 || (b[0] >= '0' && b[0] <= '9'))
        k += (size_t)snprintf(out, size, "m_");
    for (size_t i = 0; i < n && k + 1 < size; i++) {
        char c = b[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        out[k++] = ok ? c : '_';
    }
    out[k < size ? k : size - 1] = 0;
}

/* ---- tools ---- */

typedef enum { PLAT_LINUX_X86, PLAT_LINUX_A64, PLAT_ANDROID_A64 } platform;

/* Full path of an executable found on PATH into out, or 0. */
static int find_tool(const char *name, char *out, size_t size)
{
    const char *path = getenv("PATH");
    char dirs[4096];
    if (path == NULL || path[0] == 0)
        path = "/usr/local/bin:/usr/bin:/bin";
    snprintf(dirs, sizeof dirs, "%s", path);
    for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(out, size, "%s/%s", d, name);
        if (access(out, X_OK) == 0)
            return 1;
    }
    return 0;
}

/* Run argv[] with stdout and stderr into 'log'; AT_OK when it exits 0.  Otherwise AT_EIO
** with the command and the end of its output in errmsg. */
static at_err run_cmd(char *const *argv, const char *log, char *errmsg, size_t errmsg_size)
{
    pid_t pid;
    int status;
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid < 0) {
        snprintf(errmsg, errmsg_size, "cannot start %s: %s", argv[0], strerror(errno));
        return AT_EIO;
    }
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            snprintf(errmsg, errmsg_size, "waiting for %s: %s", argv[0], strerror(errno));
            return AT_EIO;
        }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return AT_OK;
    {
        char *out = NULL, msg[16];
        size_t n = 0;
        at_file_read(log, &out, &n, msg, sizeof msg);
        snprintf(errmsg, errmsg_size, "%s failed (exit %d): %.600s", argv[0],
                 WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
                 out && n > 600 ? out + n - 600 : (out ? out : ""));
        at_free(out);
    }
    return AT_EIO;
}

/* ---- undefined symbols of an ELF64 relocatable object (for Android's stub libraries) ---- */

static uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint16_t rd16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }

/* Call fn(name) for each undefined global symbol; -1 for a malformed object. */
static int undefined_symbols(const uint8_t *o, size_t n, void (*fn)(void *, const char *),
                             void *ctx)
{
    uint64_t shoff;
    uint16_t shentsize, shnum;
    if (n < 64 || memcmp(o, "\177ELF", 4) != 0 || o[4] != 2)
        return -1;
    shoff = rd64(o + 0x28);
    shentsize = rd16(o + 0x3a);
    shnum = rd16(o + 0x3c);
    if (shentsize < 64 || shoff > n || (uint64_t)shnum * shentsize > n - shoff)
        return -1;
    for (uint16_t i = 0; i < shnum; i++) {
        const uint8_t *sh = o + shoff + (uint64_t)i * shentsize, *str;
        uint64_t off, size, entsize, soff, ssize;
        uint32_t link;
        if (rd32(sh + 4) != 2 /* SHT_SYMTAB */)
            continue;
        off = rd64(sh + 0x18);
        size = rd64(sh + 0x20);
        link = rd32(sh + 0x28);
        entsize = rd64(sh + 0x38);
        if (entsize < 24 || off > n || size > n - off || link >= shnum)
            return -1;
        str = o + shoff + (uint64_t)link * shentsize;
        soff = rd64(str + 0x18);
        ssize = rd64(str + 0x20);
        if (soff > n || ssize > n - soff || ssize == 0 || o[soff + ssize - 1] != 0)
            return -1;
        for (uint64_t s = 0; s + entsize <= size; s += entsize) {
            const uint8_t *sym = o + off + s;
            uint32_t name = rd32(sym);
            uint8_t bind = sym[4] >> 4;
            uint16_t shndx = rd16(sym + 6);
            if (shndx == 0 && (bind == 1 || bind == 2) && name > 0 && name < ssize)
                fn(ctx, (const char *)o + soff + name);
        }
    }
    return 0;
}

typedef struct symset {
    int n;
    char names[128][48];
} symset;

static void symset_add(void *ctx, const char *name)
{
    symset *s = ctx;
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->names[i], name) == 0)
            return;
    if (s->n < 128 && strlen(name) < sizeof s->names[0])
        snprintf(s->names[s->n++], sizeof s->names[0], "%s", name);
}

static int is_libc_sym(const char *s)
{
    return strcmp(s, "memcpy") == 0 || strcmp(s, "memset") == 0 || strcmp(s, "memmove") == 0 ||
           strcmp(s, "memcmp") == 0 || strcmp(s, "malloc") == 0 || strcmp(s, "free") == 0;
}

/* ---- the glue and the header ---- */

typedef struct xtask {
    const md_task *t;
    kn_artifact *a;
    int tuned;
    double cost_s;
} xtask;

static const char *const c_words[] = {"auto", "break", "case", "char", "const", "continue",
    "default", "do", "double", "else", "enum", "extern", "float", "for", "goto", "if", "int",
    "long", "register", "return", "short", "signed", "sizeof", "static", "struct", "switch",
    "typedef", "union", "unsigned", "void", "volatile", "while", "bufs", NULL};

/* The DAG name of argument i of a task, as a C identifier. */
static void arg_name(const md_task *t, int i, char *out, size_t size)
{
    const ss_dag *d = t->dag;
    const char *nm = d->ops[d->args[i]].name;
    size_t k = 0;
    for (; *nm && k + 2 < size; nm++)
        out[k++] = ((*nm >= 'a' && *nm <= 'z') || (*nm >= 'A' && *nm <= 'Z') ||
                    (*nm >= '0' && *nm <= '9') || *nm == '_') ? *nm : '_';
    out[k] = 0;
    for (int w = 0; c_words[w]; w++)
        if (strcmp(out, c_words[w]) == 0 && k + 2 < size) {
            out[k++] = '_';
            out[k] = 0;
        }
}

static const char *c_type(at_dtype dt)
{
    switch (dt) {
    case AT_DT_F32: return "float";
    case AT_DT_I32: return "int32_t";
    case AT_DT_F64: return "double";
    case AT_DT_I64: return "int64_t";
    case AT_DT_I8: return "int8_t";
    case AT_DT_F16: return "uint16_t";
    default: return "uint8_t";
    }
}

static int64_t arg_elems(const kn_arg_desc *d)
{
    int64_t n = 1;
    for (int k = 0; k < d->n_dims; k++)
        n *= d->shape[k];
    return n;
}

static void shape_text(at_buf *b, const kn_arg_desc *d)
{
    at_buf_putc(b, '[');
    for (int k = 0; k < d->n_dims; k++)
        at_buf_printf(b, "%s%lld", k ? ", " : "", (long long)d->shape[k]);
    at_buf_putc(b, ']');
}

static void signature(at_buf *b, const char *P, int i, const xtask *x)
{
    const kn_artifact *a = x->a;
    at_buf_printf(b, "int32_t %s_task%d(", P, i);
    for (int k = 0; k < a->n_args; k++) {
        char nm[40];
        arg_name(x->t, k, nm, sizeof nm);
        at_buf_printf(b, "%s%s%s *%s", k ? ", " : "", a->args[k].is_output ? "" : "const ",
                      c_type(a->args[k].dtype), nm);
    }
    at_buf_puts(b, ")");
}

/* The parallel runtime of the Linux libraries: the same protocol as the kernel runtime's
** pool (kernels/rt/rt_pool.c): n - 1 workers that spin about 50 us on a launch counter
** after each launch, then sleep on a futex, so back-to-back launches (the steps of a model)
** never wait for a wake-up; a worker joins a launch only while it is open (the kernels'
** tasks claim their chunks dynamically), so a late one (its CPU busy elsewhere) is not
** waited for. */
static const char pool_text[] =
    "#include <stdatomic.h>\n#include <pthread.h>\n#include <signal.h>\n#include <time.h>\n"
    "#include <unistd.h>\n#include <sys/syscall.h>\n#include <linux/futex.h>\n"
    "#define SPIN_NS 50000\n#define YIELD_AFTER_NS 5000\n#define ENTRY_OPEN 0x80000000u\n"
    "#define ENTRY_COUNT 0xffffu\n#define ENTRY_ID(g) (((unsigned)(g) & 0x7fffu) << 16)\n"
    "static struct {\n"
    "    pthread_t th[MAX_THREADS];\n    unsigned gen0[MAX_THREADS];\n    int n_started, n;\n"
    "    tn_task_fn fn;\n    void *closure;\n"
    "    char pad0[64];\n    _Atomic unsigned gen;\n    _Atomic int n_sleeping, stop;\n"
    "    char pad1[64];\n    _Atomic unsigned entry;\n    _Atomic int launcher_sleeping;\n"
    "    _Atomic int rc, busy;\n    char pad2[64];\n} pool = {.n = 1};\n"
    "static _Thread_local int in_task;\n"
    "static tn_par pool_par;\n"
    "static void relax(void)\n{\n"
    "#if defined(__x86_64__)\n    __builtin_ia32_pause();\n"
    "#elif defined(__aarch64__)\n    __asm__ __volatile__(\"yield\" ::: \"memory\");\n#endif\n}\n"
    "static long long now_ns(void)\n{\n    struct timespec ts;\n"
    "    clock_gettime(CLOCK_MONOTONIC, &ts);\n"
    "    return (long long)ts.tv_sec * 1000000000 + ts.tv_nsec;\n}\n"
    "static void fwait(_Atomic unsigned *w, unsigned v)\n{\n"
    "    syscall(SYS_futex, (unsigned *)w, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);\n}\n"
    "static void fwake(_Atomic unsigned *w, int n)\n{\n"
    "    syscall(SYS_futex, (unsigned *)w, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);\n}\n"
    "/* spin until *w is (eq) or is not (!eq) v; 0 when the time ran out */\n"
    "static int spin(_Atomic unsigned *w, unsigned v, int eq)\n{\n"
    "    long long t0 = 0;\n"
    "    for (unsigned i = 1;; i++) {\n"
    "        if ((atomic_load_explicit(w, memory_order_acquire) == v) == eq)\n"
    "            return 1;\n"
    "        relax();\n"
    "        if ((i & 63) == 0) {\n"
    "            long long t = now_ns();\n"
    "            if (t0 == 0)\n                t0 = t;\n"
    "            else if (t - t0 > SPIN_NS)\n                return 0;\n"
    "            else if (t - t0 > YIELD_AFTER_NS)\n                sched_yield();\n"
    "        }\n    }\n}\n"
    "static void set_rc(int32_t r)\n{\n    int zero = 0;\n"
    "    if (r)\n        atomic_compare_exchange_strong(&pool.rc, &zero, r);\n}\n"
    "static void *worker(void *arg)\n{\n"
    "    int id = (int)(intptr_t)arg;\n"
    "    unsigned seen = pool.gen0[id]; /* the counter when it was made: launches after count */\n"
    "    in_task = 1;\n"
    "    for (;;) {\n"
    "        if (!spin(&pool.gen, seen, 0)) {\n"
    "            for (;;) {\n"
    "                atomic_fetch_add(&pool.n_sleeping, 1);\n"
    "                if (atomic_load(&pool.gen) == seen)\n                    fwait(&pool.gen, seen);\n"
    "                atomic_fetch_sub(&pool.n_sleeping, 1);\n"
    "                if (atomic_load_explicit(&pool.gen, memory_order_acquire) != seen)\n"
    "                    break;\n"
    "            }\n        }\n"
    "        seen = atomic_load_explicit(&pool.gen, memory_order_acquire);\n"
    "        if (atomic_load(&pool.stop))\n            break;\n"
    "        if (id < pool.n) {\n"
    "            /* join while the launch is open; a closed one is over without us */\n"
    "            unsigned e = atomic_load_explicit(&pool.entry, memory_order_relaxed);\n"
    "            int joined = 0;\n"
    "            while ((e & ENTRY_OPEN) && (e & ~(ENTRY_OPEN | ENTRY_COUNT)) == ENTRY_ID(seen) &&\n"
    "                   !joined)\n"
    "                joined = atomic_compare_exchange_weak_explicit(&pool.entry, &e, e + 1,\n"
    "                    memory_order_acquire, memory_order_relaxed);\n"
    "            if (!joined)\n                continue;\n"
    "            set_rc(pool.fn(pool.closure, id, pool.n));\n"
    "            e = atomic_fetch_sub(&pool.entry, 1);\n"
    "            if (!(e & ENTRY_OPEN) && (e & ENTRY_COUNT) == 1 &&\n"
    "                atomic_load(&pool.launcher_sleeping))\n"
    "                fwake(&pool.entry, 1);\n"
    "        }\n    }\n    return NULL;\n}\n"
    "static int32_t pool_launch(const tn_par *p, tn_task_fn fn, void *c)\n{\n"
    "    int32_t r;\n    unsigned lid;\n    (void)p;\n"
    "    if (!fn)\n        return -1;\n"
    "    if (pool.n <= 1 || in_task || atomic_exchange(&pool.busy, 1))\n"
    "        return fn(c, 0, 1); /* nested or concurrent: serially, on this thread */\n"
    "    pool.fn = fn;\n    pool.closure = c;\n    atomic_store(&pool.rc, 0);\n"
    "    lid = ENTRY_ID(atomic_load_explicit(&pool.gen, memory_order_relaxed) + 1);\n"
    "    atomic_store_explicit(&pool.entry, ENTRY_OPEN | lid, memory_order_release);\n"
    "    atomic_fetch_add(&pool.gen, 1);\n"
    "    if (atomic_load(&pool.n_sleeping) > 0)\n        fwake(&pool.gen, 0x7fffffff);\n"
    "    in_task = 1;\n    set_rc(fn(c, 0, pool.n));\n    in_task = 0;\n"
    "    /* close: nobody joins now; wait for those inside */\n"
    "    if ((atomic_fetch_and(&pool.entry, ~ENTRY_OPEN) & ENTRY_COUNT) != 0 &&\n"
    "        !spin(&pool.entry, lid, 1))\n"
    "        for (;;) {\n"
    "            unsigned v;\n"
    "            atomic_store(&pool.launcher_sleeping, 1);\n"
    "            if ((v = atomic_load(&pool.entry)) == lid)\n                break;\n"
    "            fwait(&pool.entry, v);\n"
    "        }\n"
    "    atomic_store(&pool.launcher_sleeping, 0);\n"
    "    r = atomic_load(&pool.rc);\n"
    "    atomic_store_explicit(&pool.busy, 0, memory_order_release);\n"
    "    return r;\n}\n"
    "__attribute__((destructor)) static void pool_stop(void)\n{\n"
    "    atomic_store(&pool.stop, 1);\n    atomic_fetch_add(&pool.gen, 1);\n"
    "    fwake(&pool.gen, 0x7fffffff);\n"
    "    for (int i = 1; i < pool.n_started; i++)\n        pthread_join(pool.th[i], NULL);\n"
    "    pool.n_started = 0;\n}\n"
    "/* workers only ever run launches made after they started: pool.n is raised once they\n"
    "** have read the counter (a worker with id >= n skips a launch) */\n"
    "static int start_threads(int n)\n{\n"
    "    sigset_t all, old;\n    int ok = 1;\n"
    "    if (pool.n_started == 0)\n        pool.n_started = 1;\n"
    "    sigfillset(&all);\n    pthread_sigmask(SIG_SETMASK, &all, &old);\n"
    "    while (pool.n_started < n) {\n"
    "        pool.gen0[pool.n_started] = atomic_load(&pool.gen);\n"
    "        if (pthread_create(&pool.th[pool.n_started], NULL, worker,\n"
    "                           (void *)(intptr_t)pool.n_started) != 0) {\n"
    "            ok = 0;\n            break;\n        }\n"
    "        pool.n_started++;\n    }\n"
    "    pthread_sigmask(SIG_SETMASK, &old, NULL);\n    return ok;\n}\n";

/* The data movement of a model's copy steps: dst and src walked as 'rank'-d arrays of
** shape[] with their own strides (elements); the innermost dimension is the loop. */
static const char copy_text[] =
    "static void copy_nd(float *dst, const long long *ds0, const float *src, const long long *ss0,\n"
    "                    int rank, const long long *shape0)\n{\n"
    "    long long idx[8] = {0}, outer = 1, n, di, si, ds[8], ss[8], shape[8];\n"
    "    int k = -1;\n"
    "    for (int d = 0; d < rank; d++)\n"
    "        ds[d] = ds0[d], ss[d] = ss0[d], shape[d] = shape0[d];\n"
    "    /* the inner loop reads the source contiguously where a dimension allows */\n"
    "    for (int d = 0; d < rank - 1 && ss[rank - 1] != 1; d++)\n"
    "        if (ss[d] == 1 && shape[d] > 1)\n            k = d;\n"
    "    if (k >= 0) {\n"
    "        long long t;\n"
    "        t = shape[k], shape[k] = shape[rank - 1], shape[rank - 1] = t;\n"
    "        t = ss[k], ss[k] = ss[rank - 1], ss[rank - 1] = t;\n"
    "        t = ds[k], ds[k] = ds[rank - 1], ds[rank - 1] = t;\n"
    "    }\n"
    "    n = shape[rank - 1], di = ds[rank - 1], si = ss[rank - 1];\n"
    "    for (int d = 0; d < rank - 1; d++)\n        outer *= shape[d];\n"
    "    for (long long o = 0; o < outer; o++) {\n"
    "        for (long long i = 0; i < n; i++)\n            dst[i * di] = src[i * si];\n"
    "        for (int d = rank - 2; d >= 0; d--) {\n"
    "            dst += ds[d];\n            src += ss[d];\n"
    "            if (++idx[d] < shape[d])\n                break;\n"
    "            dst -= ds[d] * shape[d];\n            src -= ss[d] * shape[d];\n"
    "            idx[d] = 0;\n        }\n    }\n}\n";

static void glue_text(at_buf *b, const char *P, const xtask *xs, int n, int pool,
                      int max_threads, const char *model, const char *target)
{
    at_buf_printf(b, "/* Generated by 'tuner export-lib' for %s, target %s. */\n", model, target);
    at_buf_puts(b,
        "#include <stddef.h>\n#include <stdint.h>\n"
        "typedef int32_t (*tn_task_fn)(void *closure, int32_t task_id, int32_t n_tasks);\n"
        "typedef struct tn_par {\n"
        "    int32_t (*launch)(const struct tn_par *par, tn_task_fn fn, void *closure);\n"
        "    int32_t n_threads;\n    int32_t reserved;\n    void *impl;\n} tn_par;\n"
        "#define API __attribute__((visibility(\"default\")))\n"
        "static int32_t serial_launch(const tn_par *p, tn_task_fn fn, void *c)\n"
        "{\n    (void)p;\n    return fn ? fn(c, 0, 1) : -1;\n}\n"
        "static const tn_par serial_par = {serial_launch, 1, 0, 0};\n"
        "static const tn_par *cur_par = &serial_par;\n"
        "static int n_transforms; /* weight pre-transforms made */\n"
        "void *malloc(size_t n);\nvoid free(void *p);\n"
        "/* 64-byte aligned memory that lives as long as the library (the weights a kernel\n"
        "** reads in its own layout: made on first use, so a bucket never run costs nothing);\n"
        "** the block malloc gave is kept just before it, for keep_free at unload */\n"
        "static void *keep_alloc(size_t n)\n{\n"
        "    char *p = malloc(n + 64 + sizeof(void *)), *q;\n"
        "    if (p == NULL)\n        return NULL;\n"
        "    q = (char *)(((uintptr_t)p + sizeof(void *) + 63) & ~(uintptr_t)63);\n"
        "    ((void **)q)[-1] = p;\n"
        "    return q;\n}\n"
        "static void keep_free(void *q)\n{\n"
        "    if (q)\n        free(((void **)q)[-1]);\n}\n");
    at_buf_printf(b, "#define MAX_THREADS %d\n", max_threads);
    if (pool) {
        at_buf_puts(b, pool_text);
        at_buf_printf(b,
            "API int %s_set_threads(int n)\n{\n"
            "    if (n < 1 || n > MAX_THREADS || atomic_load(&pool.busy))\n        return -1;\n"
            "    if (!start_threads(n))\n        return -1;\n"
            "    pool.n = n;\n    pool_par.launch = pool_launch;\n    pool_par.n_threads = n;\n"
            "    cur_par = n == 1 ? &serial_par : &pool_par;\n    return 0;\n}\n", P);
    } else {
        at_buf_printf(b, "API int %s_set_threads(int n)\n{\n    return n == 1 ? 0 : -1;\n}\n", P);
    }
    for (int i = 0; i < n; i++) {
        const kn_artifact *a = xs[i].a;
        int64_t ws = a->ws_fixed + a->ws_per_thread * max_threads;
        int slots = xs[i].t->weight > 0 ? xs[i].t->weight : 1;
        at_buf_printf(b, "\n/* task %d: %s */\n", i, xs[i].t->name);
        at_buf_printf(b, "extern int32_t %s(void *const *, void *, const tn_par *);\n", a->entry);
        if (a->pre_entry[0])
            at_buf_printf(b, "extern int32_t %s(void *const *, void *, const tn_par *);\n",
                          a->pre_entry);
        at_buf_printf(b, "static unsigned char ws_%d[%lld] __attribute__((aligned(64)));\n", i,
                      (long long)(ws > 0 ? ws : 64));
        if (a->n_pre) {
            /* one slot of rewritten weights per use of the task (a model's layers each keep
            ** theirs); a call with weights no slot holds takes the next slot in turn */
            for (int k = 0; k < a->n_args; k++)
                if (a->kernel_src[k] >= 0)
                    at_buf_printf(b, "static %s (*lay_%d_%d)[%lld]; /* [%d] slots, on first use */\n",
                                  c_type(a->kernel_args[k].dtype), i, k,
                                  (long long)arg_elems(&a->kernel_args[k]), slots);
            at_buf_printf(b, "static const void *src_%d[%d][%d];\nstatic int next_%d;\n", i,
                          slots, a->n_pre, i);
            at_buf_printf(b, "/* the slot holding bufs' weights in their new layout (made when "
                             "none does), or -1 */\n"
                             "static int prep_%d(void *const *bufs)\n{\n    int s;\n"
                             "    for (s = 0; s < %d; s++)\n        if (", i, slots);
            for (int j = 0; j < a->n_pre; j++)
                at_buf_printf(b, "%ssrc_%d[s][%d] == bufs[%d]", j ? " && " : "", i, j,
                              a->pre_src[j]);
            at_buf_printf(b, ")\n            return s;\n    s = next_%d;\n    next_%d = (s + 1) %% %d;\n",
                          i, i, slots);
            for (int k = 0; k < a->n_args; k++)
                if (a->kernel_src[k] >= 0)
                    at_buf_printf(b, "    if (!lay_%d_%d && !(lay_%d_%d = keep_alloc(%d * sizeof *lay_%d_%d)))\n"
                                     "        return -1;\n", i, k, i, k, slots, i, k);
            at_buf_printf(b, "    {\n        void *p[%d] = {", 2 * a->n_pre);
            for (int j = 0; j < a->n_pre; j++)
                at_buf_printf(b, "%sbufs[%d]", j ? ", " : "", a->pre_src[j]);
            for (int k = 0; k < a->n_args; k++)
                if (a->kernel_src[k] >= 0)
                    at_buf_printf(b, ", lay_%d_%d[s]", i, k);
            at_buf_printf(b, "};\n        if (%s(p, NULL, cur_par) != 0)\n            return -1;\n"
                             "    }\n", a->pre_entry);
            for (int j = 0; j < a->n_pre; j++)
                at_buf_printf(b, "    src_%d[s][%d] = bufs[%d];\n", i, j, a->pre_src[j]);
            at_buf_puts(b, "    n_transforms++;\n    return s;\n}\n");
        }
        at_buf_printf(b, "static int32_t run_%d(void *const *bufs)\n{\n", i);
        if (a->n_pre) {
            at_buf_printf(b, "    void *k[%d];\n    int s = prep_%d(bufs);\n"
                             "    if (s < 0)\n        return -1;\n", a->n_args, i);
            at_buf_printf(b, "    for (int i = 0; i < %d; i++)\n        k[i] = bufs[i];\n", a->n_args);
            for (int k = 0; k < a->n_args; k++)
                if (a->kernel_src[k] >= 0)
                    at_buf_printf(b, "    k[%d] = lay_%d_%d[s];\n", k, i, k);
            at_buf_printf(b, "    return %s(k, ws_%d, cur_par);\n}\n", a->entry, i);
        } else {
            at_buf_printf(b, "    return %s(bufs, ws_%d, cur_par);\n}\n", a->entry, i);
        }
        at_buf_puts(b, "API ");
        signature(b, P, i, &xs[i]);
        at_buf_puts(b, "\n{\n    void *tn_args_[] = {");
        for (int k = 0; k < a->n_args; k++) {
            char nm[40];
            arg_name(xs[i].t, k, nm, sizeof nm);
            at_buf_printf(b, "%s(void *)%s", k ? ", " : "", nm);
        }
        at_buf_printf(b, "};\n    return run_%d(tn_args_);\n}\n", i);
    }
    at_buf_puts(b, "\n/* at unload: the weights made in the kernels' layouts */\n"
                   "__attribute__((destructor)) static void keep_free_all(void)\n{\n");
    for (int i = 0; i < n; i++)
        for (int k = 0; xs[i].a->n_pre && k < xs[i].a->n_args; k++)
            if (xs[i].a->kernel_src[k] >= 0)
                at_buf_printf(b, "    keep_free(lay_%d_%d);\n    lay_%d_%d = NULL;\n", i, k, i, k);
    at_buf_puts(b, "}\n");
    at_buf_printf(b, "\nAPI int %s_n_tasks(void)\n{\n    return %d;\n}\n", P, n);
    at_buf_printf(b, "static const char *const keys[%d] = {", n + 1);
    for (int i = 0; i < n; i++)
        at_buf_printf(b, "%s\"%s\"", i ? ", " : "", xs[i].t->key);
    at_buf_puts(b, "};\n");
    at_buf_printf(b, "static const char *const names[%d] = {", n + 1);
    for (int i = 0; i < n; i++)
        at_buf_printf(b, "%s\"%s\"", i ? ", " : "", xs[i].t->name);
    at_buf_puts(b, "};\n");
    at_buf_printf(b, "API const char *%s_task_key(int i)\n{\n"
                     "    return i >= 0 && i < %d ? keys[i] : NULL;\n}\n", P, n);
    at_buf_printf(b, "API const char *%s_task_name(int i)\n{\n"
                     "    return i >= 0 && i < %d ? names[i] : NULL;\n}\n", P, n);
    at_buf_printf(b, "API int32_t %s_task_run(int i, void *const *bufs)\n{\n    switch (i) {\n", P);
    for (int i = 0; i < n; i++)
        at_buf_printf(b, "    case %d:\n        return run_%d(bufs);\n", i, i);
    at_buf_puts(b, "    default:\n        return -1;\n    }\n}\n");
    at_buf_printf(b, "API void %s_reset_weights(void)\n{\n", P);
    for (int i = 0; i < n; i++)
        if (xs[i].a->n_pre)
            at_buf_printf(b, "    for (int s = 0; s < %d; s++)\n"
                             "        for (int j = 0; j < %d; j++)\n"
                             "            src_%d[s][j] = NULL;\n",
                          xs[i].t->weight > 0 ? xs[i].t->weight : 1, xs[i].a->n_pre, i);
    at_buf_puts(b, "}\n");
    at_buf_printf(b, "API int %s_n_weight_transforms(void)\n{\n    return n_transforms;\n}\n", P);
}

/* ---- the whole model in the library ---- */

/* The pointer expression of graph tensor t: in the arena or the weights' block. */
static void buf_expr(at_buf *b, const md_plan *pl, int t)
{
    const md_plan_buf *pb = &pl->bufs[pl->buf_of[t]];
    at_buf_printf(b, "%s(%lld)", pb->kind == MD_BUF_CONST ? "WB" : "AR", (long long)pb->offset);
}

static void ll_array(at_buf *b, const int64_t *v, int n)
{
    at_buf_putc(b, '{');
    for (int i = 0; i < n; i++)
        at_buf_printf(b, "%s%lld", i ? ", " : "", (long long)v[i]);
    at_buf_putc(b, '}');
}

/* A copy: dst[shape] (strides ds) <- src + src_off (strides ss); offsets in elements. */
static void copy_call(at_buf *b, const md_plan *pl, int dst, int64_t dst_off, const int64_t *ds,
                      int src, int64_t src_off, const int64_t *ss, int rank, const int64_t *shape)
{
    at_buf_puts(b, "    {\n        static const long long ds[] = ");
    ll_array(b, ds, rank);
    at_buf_puts(b, ", ss[] = ");
    ll_array(b, ss, rank);
    at_buf_puts(b, ", sh[] = ");
    ll_array(b, shape, rank);
    at_buf_puts(b, ";\n        copy_nd((float *)");
    buf_expr(b, pl, dst);
    at_buf_printf(b, " + %lld, ds, (const float *)", (long long)dst_off);
    buf_expr(b, pl, src);
    at_buf_printf(b, " + %lld, ss, %d, sh);\n    }\n", (long long)src_off, rank);
}

static void strides_of(const int64_t *shape, int r, int64_t *st)
{
    int64_t acc = 1;
    for (int d = r - 1; d >= 0; d--) {
        st[d] = acc;
        acc *= shape[d];
    }
}

/* The C statements of copy step 'nd'; -1 when a parameter cannot be read (never after
** the graph was checked). */
static int copy_step_text(at_buf *b, const md_graph *g, const md_plan *pl, const md_node *nd)
{
    const md_tensor *in = &g->tensors[nd->in[0]];
    int64_t st[MD_MAX_RANK], ds[MD_MAX_RANK], ss[MD_MAX_RANK], shape[MD_MAX_RANK];
    int r = in->rank;
    char why[256];
    strides_of(in->shape, r, st);
    switch (nd->kind) {
    case MD_OP_TRANSPOSE: {
        const md_tensor *out = &g->tensors[nd->out[0]];
        int64_t perm[MD_MAX_RANK];
        if (md__attr_ints(nd, "perm", perm, MD_MAX_RANK) != r)
            for (int d = 0; d < r; d++)
                perm[d] = r - 1 - d;
        strides_of(out->shape, r, ds);
        for (int d = 0; d < r; d++)
            ss[d] = st[perm[d]];
        if (r == 0)
            return -1;
        copy_call(b, pl, nd->out[0], 0, ds, nd->in[0], 0, ss, r, out->shape);
        return 0;
    }
    case MD_OP_CONCAT: {
        const md_tensor *out = &g->tensors[nd->out[0]];
        int64_t axis = md__attr_i(nd, "axis", 0), off = 0;
        if (axis < 0)
            axis += out->rank;
        strides_of(out->shape, out->rank, ds);
        for (int k = 0; k < nd->n_in; k++) {
            const md_tensor *x = &g->tensors[nd->in[k]];
            strides_of(x->shape, x->rank, ss);
            copy_call(b, pl, nd->out[0], off * ds[axis], ds, nd->in[k], 0, ss, x->rank,
                      x->shape);
            off += x->shape[axis];
        }
        return 0;
    }
    case MD_OP_GATHER: {
        const md_tensor *ix = &g->tensors[nd->in[1]];
        int64_t axis = md__attr_i(nd, "axis", 0), outer = 1, tail = 1;
        if (axis < 0)
            axis += r;
        for (int d = 0; d < axis; d++)
            outer *= in->shape[d];
        for (int d = (int)axis + 1; d < r; d++)
            tail *= in->shape[d];
        if (ix->data == NULL) {
            /* run-time indices (token ids): each checked, -2 when outside the table */
            long long nax = (long long)in->shape[axis];
            at_buf_puts(b, "    {\n        const int64_t *ix = (const int64_t *)");
            buf_expr(b, pl, nd->in[1]);
            at_buf_puts(b, ";\n        const float *src = (const float *)");
            buf_expr(b, pl, nd->in[0]);
            at_buf_puts(b, ";\n        float *dst = (float *)");
            buf_expr(b, pl, nd->out[0]);
            at_buf_printf(b, ";\n        for (long long i = 0; i < %lldLL; i++)\n"
                             "            if (ix[i] < -%lldLL || ix[i] >= %lldLL)\n"
                             "                return -2;\n"
                             "        for (long long o = 0; o < %lldLL; o++)\n"
                             "            for (long long i = 0; i < %lldLL; i++) {\n"
                             "                long long k = ix[i] < 0 ? ix[i] + %lldLL : ix[i];\n"
                             "                memcpy(dst + (o * %lldLL + i) * %lldLL,\n"
                             "                       src + (o * %lldLL + k) * %lldLL, %lldu);\n"
                             "            }\n    }\n",
                          (long long)ix->n_elems, nax, nax, (long long)outer,
                          (long long)ix->n_elems, nax, (long long)ix->n_elems, (long long)tail,
                          nax, (long long)tail, (long long)(tail * 4));
            return 0;
        }
        /* out[o, i, t] = in[o, idx[i], t] */
        for (int64_t i = 0; i < ix->n_elems; i++) {
            int64_t k = ((const int64_t *)ix->data)[i];
            int64_t d3[2] = {ix->n_elems * tail, 1}, s3[2] = {in->shape[axis] * tail, 1};
            int64_t sh[2] = {outer, tail};
            if (k < 0)
                k += in->shape[axis];
            copy_call(b, pl, nd->out[0], i * tail, d3, nd->in[0], k * tail, s3, 2, sh);
        }
        return 0;
    }
    case MD_OP_INT_TO_FLOAT: /* an integer mask to float, or to a bool held as 0/1 */
    case MD_OP_INT_TO_BOOL:
        at_buf_puts(b, "    {\n        const int64_t *src = (const int64_t *)");
        buf_expr(b, pl, nd->in[0]);
        at_buf_puts(b, ";\n        float *dst = (float *)");
        buf_expr(b, pl, nd->out[0]);
        at_buf_printf(b, ";\n        for (long long e = 0; e < %lldLL; e++)\n"
                         "            dst[e] = (float)%s;\n    }\n",
                      (long long)g->tensors[nd->out[0]].n_elems,
                      nd->kind == MD_OP_INT_TO_BOOL ? "(src[e] != 0)" : "src[e]");
        return 0;
    case MD_OP_EXPAND: {
        /* a broadcast copy: the input's strides, 0 where it broadcasts; int64 elements as
        ** pairs of floats (one more dimension) */
        const md_tensor *out = &g->tensors[nd->out[0]];
        int64_t acc = 1, sh[MD_MAX_RANK + 1];
        int ro = out->rank, w = at_dtype_bytes(out->dtype) / 4;
        if (ro + 1 > MD_MAX_RANK)
            return -1;
        for (int d = ro - 1; d >= 0; d--) {
            int k = d - (ro - r);
            ss[d] = (k < 0 || in->shape[k] == 1 ? 0 : acc) * w;
            if (k >= 0)
                acc *= in->shape[k];
        }
        strides_of(out->shape, ro, ds);
        for (int d = 0; d < ro; d++) {
            ds[d] *= w;
            sh[d] = out->shape[d];
        }
        if (w == 2) {
            ds[ro] = ss[ro] = 1;
            sh[ro] = 2;
        }
        copy_call(b, pl, nd->out[0], 0, ds, nd->in[0], 0, ss, ro + (w == 2), sh);
        return 0;
    }
    default: /* Slice, Split */
        for (int k = 0; k < nd->n_out; k++) {
            int64_t lo[MD_MAX_RANK], step[MD_MAX_RANK], base = 0;
            at_err e = nd->kind == MD_OP_SLICE
                           ? md__slice_params(g, nd, in, lo, step, shape, why, sizeof why)
                           : md__split_params(g, nd, in, k, lo, step, shape, why, sizeof why);
            if (nd->out[k] < 0 || pl->buf_of[nd->out[k]] < 0)
                continue;
            if (e != AT_OK)
                return -1;
            strides_of(shape, r, ds);
            for (int d = 0; d < r; d++) {
                base += lo[d] * st[d];
                ss[d] = st[d] * step[d];
            }
            copy_call(b, pl, nd->out[k], 0, ds, nd->in[0], base, ss, r, shape);
        }
        return 0;
    }
}

/* The whole model in the library: one plan per bucket (one when the model has a single
** size), their constants in one block with each distinct constant once. */
typedef struct xmodel {
    int nb;                      /* buckets */
    const md_model *const *ms;   /* the model at each bucket, ascending */
    md_plan *plans;              /* per bucket; constants' offsets are in the shared block */
    int **map;                   /* per bucket: its task index -> the library's (xs[]) */
    int dims;                    /* the model has named symbolic dimensions: the dims API */
    int multi;                   /* the symbolic dimension the buckets differ in, or -1 */
    int64_t arena_bytes;         /* the largest bucket's arena (one arena for all) */
    char *blob;                  /* the constants' block */
    int64_t blob_bytes;
} xmodel;

static void xmodel_fini(xmodel *x)
{
    for (int b = 0; b < x->nb; b++) {
        if (x->plans)
            md__plan_free(&x->plans[b]);
        if (x->map)
            at_free(x->map[b]);
    }
    at_free(x->plans);
    at_free(x->map);
    at_free(x->blob);
    memset(x, 0, sizeof *x);
}

static uint64_t fnv(const void *p, size_t n)
{
    const unsigned char *c = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

/* Plan every bucket, map its tasks to the library's, and lay out the shared constants'
** block.  AT_EINVAL with a sentence when the buckets do not belong together. */
static at_err xmodel_make(xmodel *x, const md_model *const *ms, int nb, const md_task_list *tl,
                          char *errmsg, size_t errmsg_size)
{
    const md_graph *g0 = ms[0]->g;
    int n_consts = 0, cap = 0;
    struct cst { uint64_t h; int64_t bytes, off; const void *data; } *cs = NULL;
    at_err err = AT_OK;
    memset(x, 0, sizeof *x);
    x->nb = nb;
    x->ms = ms;
    x->multi = -1;
    x->dims = g0->n_syms > 0;
    if ((x->plans = at_calloc((size_t)nb, sizeof *x->plans)) == NULL ||
        (x->map = at_calloc((size_t)nb, sizeof *x->map)) == NULL)
        return AT_ENOMEM;
    /* the buckets: one file, one dimension that changes */
    for (int b = 1; b < nb; b++) {
        const md_graph *g = ms[b]->g;
        if (strcmp(g->sig, g0->sig) != 0 || g->n_syms != g0->n_syms ||
            g->n_inputs != g0->n_inputs || g->n_outputs != g0->n_outputs) {
            snprintf(errmsg, errmsg_size, "the buckets are not one model");
            return AT_EINVAL;
        }
        for (int k = 0; k < g->n_syms; k++)
            if (g->sym_values[k] != g0->sym_values[k]) {
                if (x->multi >= 0 && x->multi != k) {
                    snprintf(errmsg, errmsg_size, "the buckets differ in two dimensions");
                    return AT_EINVAL;
                }
                x->multi = k;
            }
    }
    for (int b = 0; b < nb && err == AT_OK; b++) {
        const md_model *m = ms[b];
        const md_graph *g = m->g;
        md_plan *pl = &x->plans[b];
        if ((err = md__plan_make(m, pl)) != AT_OK)
            break;
        if (pl->arena_bytes > x->arena_bytes)
            x->arena_bytes = pl->arena_bytes;
        if ((x->map[b] = at_calloc((size_t)m->tasks->n_tasks + 1, sizeof *x->map[b])) == NULL) {
            err = AT_ENOMEM;
            break;
        }
        for (int i = 0; i < m->tasks->n_tasks; i++) {
            x->map[b][i] = -1;
            for (int j = 0; j < tl->n_tasks && x->map[b][i] < 0; j++)
                if (strcmp(tl->tasks[j].key, m->tasks->tasks[i].key) == 0)
                    x->map[b][i] = j;
        }
        for (int s = 0; s < m->n_steps; s++)
            if (m->steps[s].kind == MD_STEP_TASK && x->map[b][m->steps[s].task] < 0) {
                snprintf(errmsg, errmsg_size, "internal: the task list has no task %s of the "
                         "model", m->tasks->tasks[m->steps[s].task].key);
                err = AT_EINVAL;
            }
        /* each input and output: a symbolic dimension has the bucket's value, the others
        ** are the same in every bucket (else the library could not size it for other
        ** lengths) */
        for (int i = 0; i < g->n_inputs + g->n_outputs && err == AT_OK && x->dims; i++) {
            int io = i >= g->n_inputs, t = io ? g->outputs[i - g->n_inputs] : g->inputs[i];
            int t0 = io ? g0->outputs[i - g->n_inputs] : g0->inputs[i];
            const md_tensor *tt = &g->tensors[t], *tt0 = &g0->tensors[t0];
            for (int d = 0; d < tt->rank && err == AT_OK; d++) {
                int k = tt->sym_rank == tt->rank ? tt->sym[d] - 1 : -1;
                if (k >= 0 ? tt->shape[d] == g->sym_values[k]
                           : tt->rank == tt0->rank && tt->shape[d] == tt0->shape[d])
                    continue;
                snprintf(errmsg, errmsg_size, "%s '%s': its dimension %d is %lld at %s=%lld "
                         "but the file does not name it with a symbolic dimension of the "
                         "inputs, so it cannot be sized for other values", io ? "output" :
                         "input", tt->name, d, (long long)tt->shape[d],
                         x->multi >= 0 ? g->sym_names[x->multi] : g->sym_names[0],
                         (long long)(x->multi >= 0 ? g->sym_values[x->multi]
                                                   : g->sym_values[0]));
                err = AT_EINVAL;
            }
        }
        /* constants: each distinct one once */
        for (int k = 0; k < pl->n_bufs && err == AT_OK; k++) {
            md_plan_buf *pb = &pl->bufs[k];
            const md_tensor *t = &g->tensors[pb->root];
            int64_t bytes = t->n_elems * at_dtype_bytes(t->dtype);
            uint64_t h;
            int c;
            if (pb->kind != MD_BUF_CONST)
                continue;
            h = fnv(t->data, (size_t)bytes);
            for (c = 0; c < n_consts; c++)
                if (cs[c].h == h && cs[c].bytes == bytes && memcmp(cs[c].data, t->data,
                                                                   (size_t)bytes) == 0)
                    break;
            if (c == n_consts) {
                if (n_consts == cap) {
                    struct cst *p = at_realloc(cs, (size_t)(cap = cap ? 2 * cap : 64) * sizeof *p);
                    if (p == NULL) {
                        err = AT_ENOMEM;
                        break;
                    }
                    cs = p;
                }
                cs[c] = (struct cst){h, bytes, x->blob_bytes, t->data};
                x->blob_bytes += (bytes + 63) / 64 * 64;
                n_consts++;
            }
            pb->offset = cs[c].off;
        }
    }
    if (err == AT_OK && (x->blob = at_calloc(1, (size_t)x->blob_bytes + 64)) == NULL)
        err = AT_ENOMEM;
    for (int c = 0; err == AT_OK && c < n_consts; c++)
        memcpy(x->blob + cs[c].off, cs[c].data, (size_t)cs[c].bytes);
    at_free(cs);
    return err;
}

/* The C text of the model part: per bucket, its steps (run_bN) and the weight transforms
** of its layers (init_bN); the dims API when the model has symbolic dimensions; and
** P_model_run and the rest.  Returns -1 when a step cannot be written (copy_step_text). */
static int model_text(at_buf *b, const char *P, const xtask *xs, const xmodel *xm)
{
    const md_graph *gl = xm->ms[xm->nb - 1]->g; /* the largest bucket */
    at_buf_puts(b, "\n/* ---- the whole model ---- */\n");
    at_buf_puts(b, "#include <string.h>\n");
    at_buf_puts(b, copy_text);
    at_buf_printf(b, "static unsigned char arena[%lld] __attribute__((aligned(64)));\n",
                  (long long)(xm->arena_bytes > 0 ? xm->arena_bytes : 64));
    at_buf_printf(b, "extern const unsigned char tn_weights_%s[] "
                     "__attribute__((visibility(\"hidden\")));\n", P);
    at_buf_printf(b, "#define AR(o) ((void *)(arena + (o)))\n"
                     "#define WB(o) ((void *)(tn_weights_%s + (o)))\n", P);
    if (xm->dims) {
        /* the symbolic dimensions: their buckets and current values; each input's and
        ** output's shape at the current values */
        int ns = gl->n_syms, nio = gl->n_inputs + gl->n_outputs;
        at_buf_printf(b, "#define N_DIMS %d\n#define N_BUCKETS %d\n", ns, xm->nb);
        at_buf_puts(b, "static const char *const dim_names[N_DIMS] = {");
        for (int k = 0; k < ns; k++) {
            at_buf_puts(b, k ? ", \"" : "\"");
            for (const char *c = gl->sym_names[k]; *c; c++)
                at_buf_printf(b, (*c == '"' || *c == '\\') ? "\\%c" : (*c < 32 || *c > 126) ?
                              "?" : "%c", *c);
            at_buf_putc(b, '"');
        }
        at_buf_puts(b, "};\n/* bucket_dims[j][k]: dimension k in bucket j */\n"
                       "static const long long bucket_dims[N_BUCKETS][N_DIMS] = {");
        for (int j = 0; j < xm->nb; j++) {
            at_buf_puts(b, j ? ", {" : "{");
            for (int k = 0; k < ns; k++)
                at_buf_printf(b, "%s%lld", k ? ", " : "", (long long)xm->ms[j]->g->sym_values[k]);
            at_buf_puts(b, "}");
        }
        at_buf_puts(b, "};\nstatic long long cur_dim[N_DIMS] = {");
        for (int k = 0; k < ns; k++)
            at_buf_printf(b, "%s%lld", k ? ", " : "", (long long)gl->sym_values[k]);
        at_buf_printf(b, "};\nstatic int cur_bucket = %d;\n", xm->nb - 1);
        at_buf_printf(b, "/* per input, then output: rank, element bytes, sizes (the largest "
                         "bucket's), and 1 + the dimension each size follows (0: fixed) */\n"
                         "static const int io_rank[%d] = {", nio);
        for (int i = 0; i < nio; i++) {
            int t = i < gl->n_inputs ? gl->inputs[i] : gl->outputs[i - gl->n_inputs];
            at_buf_printf(b, "%s%d", i ? ", " : "", gl->tensors[t].rank);
        }
        at_buf_printf(b, "}, io_esz[%d] = {", nio);
        for (int i = 0; i < nio; i++) {
            int t = i < gl->n_inputs ? gl->inputs[i] : gl->outputs[i - gl->n_inputs];
            at_buf_printf(b, "%s%d", i ? ", " : "", at_dtype_bytes(gl->tensors[t].dtype));
        }
        at_buf_printf(b, "};\nstatic const long long io_fixed[%d][8] = {", nio);
        for (int i = 0; i < nio; i++) {
            int t = i < gl->n_inputs ? gl->inputs[i] : gl->outputs[i - gl->n_inputs];
            at_buf_puts(b, i ? ", " : "");
            ll_array(b, gl->tensors[t].shape, gl->tensors[t].rank > 0 ? gl->tensors[t].rank : 0);
        }
        at_buf_printf(b, "};\nstatic const unsigned char io_sym[%d][8] = {", nio);
        for (int i = 0; i < nio; i++) {
            const md_tensor *tt = &gl->tensors[i < gl->n_inputs ? gl->inputs[i]
                                                                : gl->outputs[i - gl->n_inputs]];
            at_buf_puts(b, i ? ", {" : "{");
            for (int d = 0; d < tt->rank; d++)
                at_buf_printf(b, "%s%d", d ? ", " : "", tt->sym_rank == tt->rank ? tt->sym[d] : 0);
            at_buf_puts(b, tt->rank ? "}" : "0}");
        }
        at_buf_puts(b, "};\n");
        at_buf_puts(b,
            "static long long io_shape(int i, long long *s)\n{\n    long long n = 1;\n"
            "    for (int d = 0; d < io_rank[i]; d++) {\n"
            "        s[d] = io_sym[i][d] ? cur_dim[io_sym[i][d] - 1] : io_fixed[i][d];\n"
            "        n *= s[d];\n    }\n    return n;\n}\n"
            "/* dst (shape dsh) <- the box of src (shape ssh) at the origin; with zero, dst is\n"
            "** zeroed first (padding) */\n"
            "static void copy_box(char *dst, const long long *dsh, const char *src,\n"
            "                     const long long *ssh, int rank, int esz, int zero)\n{\n"
            "    long long box[8] = {0}, dst_st[8], src_st[8], idx[8] = {0}, dn = 1, sn = 1,\n"
            "              outer = 1, row;\n"
            "    int same = 1;\n"
            "    for (int d = rank - 1; d >= 0; d--) {\n"
            "        box[d] = dsh[d] < ssh[d] ? dsh[d] : ssh[d];\n"
            "        same &= dsh[d] == ssh[d];\n"
            "        dst_st[d] = dn;\n        src_st[d] = sn;\n"
            "        dn *= dsh[d];\n        sn *= ssh[d];\n    }\n"
            "    if (same) {\n        memcpy(dst, src, (size_t)(dn * esz));\n        return;\n    }\n"
            "    if (zero)\n        memset(dst, 0, (size_t)(dn * esz));\n"
            "    row = box[rank - 1] * esz;\n"
            "    for (int d = 0; d < rank - 1; d++)\n        outer *= box[d];\n"
            "    for (long long o = 0; o < outer; o++) {\n"
            "        long long doff = 0, soff = 0;\n"
            "        for (int d = 0; d < rank - 1; d++) {\n"
            "            doff += idx[d] * dst_st[d];\n            soff += idx[d] * src_st[d];\n"
            "        }\n"
            "        memcpy(dst + doff * esz, src + soff * esz, (size_t)row);\n"
            "        for (int d = rank - 2; d >= 0; d--) {\n"
            "            if (++idx[d] < box[d])\n                break;\n"
            "            idx[d] = 0;\n        }\n    }\n}\n");
    }
    for (int bk = 0; bk < xm->nb; bk++) {
        const md_model *m = xm->ms[bk];
        const md_graph *g = m->g;
        const md_plan *pl = &xm->plans[bk];
        const int *map = xm->map[bk];
        at_buf_printf(b, "\n/* bucket %d */\nstatic int ready_b%d;\n"
                         "static int init_b%d(void)\n{\n    if (ready_b%d)\n        return 0;\n",
                      bk, bk, bk, bk);
        for (int s = 0; s < m->n_steps; s++) {
            const md_step *st = &m->steps[s];
            if (st->kind != MD_STEP_TASK || !xs[map[st->task]].a->n_pre)
                continue;
            at_buf_puts(b, "    {\n        void *bufs[] = {");
            for (int k = 0; k < st->n_args; k++) {
                at_buf_puts(b, k ? ", " : "");
                buf_expr(b, pl, st->args[k]);
            }
            at_buf_printf(b, "};\n        if (prep_%d(bufs) < 0)\n            return -1;\n    }\n",
                          map[st->task]);
        }
        at_buf_printf(b, "    ready_b%d = 1;\n    return 0;\n}\n", bk);
        at_buf_printf(b, "static int32_t run_b%d(const float *const *inputs, float *const *outputs)\n"
                         "{\n    int32_t rc;\n"
                         "    if (!ready_b%d && (rc = init_b%d()) != 0)\n        return rc;\n",
                      bk, bk, bk);
        for (int i = 0; i < g->n_inputs; i++) {
            const md_tensor *t = &g->tensors[g->inputs[i]];
            if (pl->buf_of[g->inputs[i]] < 0)
                continue;
            if (xm->dims) {
                /* at the current dimensions, zero-padded to the bucket's */
                at_buf_puts(b, "    {\n        static const long long bs[] = ");
                ll_array(b, t->shape, t->rank);
                at_buf_printf(b, ";\n        long long cs[8];\n        io_shape(%d, cs);\n"
                                 "        copy_box((char *)", i);
                buf_expr(b, pl, g->inputs[i]);
                at_buf_printf(b, ", bs, (const char *)inputs[%d], cs, %d, %d, 1);\n    }\n", i,
                              t->rank, at_dtype_bytes(t->dtype));
                continue;
            }
            at_buf_puts(b, "    memcpy(");
            buf_expr(b, pl, g->inputs[i]);
            at_buf_printf(b, ", inputs[%d], %lld);\n", i,
                          (long long)(t->n_elems * at_dtype_bytes(t->dtype)));
        }
        for (int s = 0; s < m->n_steps; s++) {
            const md_step *st = &m->steps[s];
            const md_node *nd = &g->nodes[st->node];
            if (st->kind == MD_STEP_COPY) {
                at_buf_printf(b, "    /* step %d: %s '%s' */\n", s, nd->op_type, nd->name);
                if (copy_step_text(b, g, pl, nd) != 0)
                    return -1;
                continue;
            }
            at_buf_printf(b, "    /* step %d: task %d, node '%s' */\n    {\n        void *bufs[] = {",
                          s, map[st->task], nd->name);
            for (int k = 0; k < st->n_args; k++) {
                at_buf_puts(b, k ? ", " : "");
                buf_expr(b, pl, st->args[k]);
            }
            at_buf_printf(b, "};\n        if ((rc = run_%d(bufs)) != 0)\n            return rc;\n    }\n",
                          map[st->task]);
        }
        for (int i = 0; i < g->n_outputs; i++) {
            const md_tensor *t = &g->tensors[g->outputs[i]];
            if (xm->dims) {
                /* cut back to the current dimensions */
                at_buf_puts(b, "    {\n        static const long long bs[] = ");
                ll_array(b, t->shape, t->rank);
                at_buf_printf(b, ";\n        long long cs[8];\n        io_shape(%d, cs);\n"
                                 "        copy_box((char *)outputs[%d], cs, (const char *)",
                              g->n_inputs + i, i);
                buf_expr(b, pl, g->outputs[i]);
                at_buf_printf(b, ", bs, %d, %d, 0);\n    }\n", t->rank, at_dtype_bytes(t->dtype));
                continue;
            }
            at_buf_printf(b, "    memcpy(outputs[%d], ", i);
            buf_expr(b, pl, g->outputs[i]);
            at_buf_printf(b, ", %lld);\n", (long long)(t->n_elems * at_dtype_bytes(t->dtype)));
        }
        at_buf_puts(b, "    return 0;\n}\n");
    }
    /* the API */
    at_buf_printf(b, "API int %s_model_init(void)\n{\n", P);
    if (xm->dims) {
        at_buf_puts(b, "    switch (cur_bucket) {\n");
        for (int bk = 0; bk < xm->nb; bk++)
            at_buf_printf(b, "    case %d:\n        return init_b%d();\n", bk, bk);
        at_buf_puts(b, "    default:\n        return -1;\n    }\n}\n");
        at_buf_printf(b, "API int32_t %s_model_run(const float *const *inputs, float *const *outputs)\n"
                         "{\n    switch (cur_bucket) {\n", P);
        for (int bk = 0; bk < xm->nb; bk++)
            at_buf_printf(b, "    case %d:\n        return run_b%d(inputs, outputs);\n", bk, bk);
        at_buf_puts(b, "    default:\n        return -1;\n    }\n}\n");
        at_buf_printf(b,
            "API int %s_model_n_dims(void)\n{\n    return N_DIMS;\n}\n"
            "API const char *%s_model_dim_name(int i)\n{\n"
            "    return i >= 0 && i < N_DIMS ? dim_names[i] : NULL;\n}\n"
            "static int dim_index(const char *name)\n{\n"
            "    for (int k = 0; name && k < N_DIMS; k++)\n"
            "        if (strcmp(dim_names[k], name) == 0)\n            return k;\n"
            "    return -1;\n}\n"
            "API int %s_model_n_buckets(int i)\n{\n    return i >= 0 && i < N_DIMS ? N_BUCKETS : 0;\n}\n"
            "API long long %s_model_bucket(int i, int j)\n{\n"
            "    return i >= 0 && i < N_DIMS && j >= 0 && j < N_BUCKETS ? bucket_dims[j][i] : -1;\n}\n"
            "API long long %s_model_dim(const char *name)\n{\n"
            "    int k = dim_index(name);\n    return k < 0 ? -1 : cur_dim[k];\n}\n"
            "API int %s_model_set_dim(const char *name, long long value)\n{\n"
            "    int k = dim_index(name), j;\n"
            "    if (k < 0 || value < 1 || value > bucket_dims[N_BUCKETS - 1][k])\n"
            "        return -1;\n"
            "    cur_dim[k] = value;\n"
            "    /* the smallest bucket that holds every current value */\n"
            "    for (j = 0; j < N_BUCKETS - 1; j++) {\n"
            "        int fits = 1;\n"
            "        for (int d = 0; d < N_DIMS; d++)\n"
            "            fits &= cur_dim[d] <= bucket_dims[j][d];\n"
            "        if (fits)\n            break;\n    }\n"
            "    cur_bucket = j;\n    return 0;\n}\n", P, P, P, P, P, P);
    } else {
        at_buf_puts(b, "    return init_b0();\n}\n");
        at_buf_printf(b, "API int32_t %s_model_run(const float *const *inputs, float *const *outputs)\n"
                         "{\n    return run_b0(inputs, outputs);\n}\n", P);
    }
    at_buf_printf(b, "API int %s_model_n_inputs(void)\n{\n    return %d;\n}\n", P, gl->n_inputs);
    at_buf_printf(b, "API int %s_model_n_outputs(void)\n{\n    return %d;\n}\n", P, gl->n_outputs);
    for (int io = 0; io < 2; io++) {
        int n = io ? gl->n_outputs : gl->n_inputs;
        const int *ts = io ? gl->outputs : gl->inputs;
        const char *w = io ? "output" : "input";
        at_buf_printf(b, "static const char *const %s_names[%d] = {", w, n + 1);
        for (int i = 0; i < n; i++) {
            at_buf_puts(b, i ? ", \"" : "\"");
            for (const char *c = gl->tensors[ts[i]].name; *c; c++)
                at_buf_printf(b, (*c == '"' || *c == '\\') ? "\\%c" : (*c < 32 || *c > 126) ?
                              "?" : "%c", *c);
            at_buf_putc(b, '"');
        }
        at_buf_puts(b, "};\n");
        at_buf_printf(b, "API const char *%s_model_%s_name(int i)\n{\n"
                         "    return i >= 0 && i < %d ? %s_names[i] : NULL;\n}\n", P, w, n, w);
        if (xm->dims) {
            at_buf_printf(b, "API long long %s_model_%s_size(int i)\n{\n    long long s[8];\n"
                             "    return i >= 0 && i < %d ? io_shape(%si, s) : -1;\n}\n", P, w,
                          n, io ? "N_INPUTS + " : "");
            if (!io)
                at_buf_printf(b, "#define N_INPUTS %d\n", gl->n_inputs);
            continue;
        }
        at_buf_printf(b, "static const long long %s_sizes[%d] = {", w, n + 1);
        for (int i = 0; i < n; i++)
            at_buf_printf(b, "%s%lld", i ? ", " : "", (long long)gl->tensors[ts[i]].n_elems);
        at_buf_puts(b, "};\n");
        at_buf_printf(b, "API long long %s_model_%s_size(int i)\n{\n"
                         "    return i >= 0 && i < %d ? %s_sizes[i] : -1;\n}\n", P, w, n, w);
    }
    return 0;
}

/* The weights' block as an assembler file that includes the binary (fast to build however
** large the model). */
static void weights_asm(at_buf *b, const char *P, const char *bin)
{
    at_buf_printf(b, "\t.section .rodata\n\t.balign 64\n\t.globl tn_weights_%s\n"
                     "\t.hidden tn_weights_%s\n\t.type tn_weights_%s, %%object\n"
                     "tn_weights_%s:\n\t.incbin \"%s\"\n\t.byte 0\n"
                     "\t.section .note.GNU-stack,\"\",%%progbits\n", P, P, P, P, bin);
}

/* The model part of the header: the inputs and outputs in the model's own layout, the
** symbolic dimensions and their buckets, and the layouts the tasks use inside. */
static void header_model_text(at_buf *b, const char *P, const xmodel *xm)
{
    const md_graph *g = xm->ms[xm->nb - 1]->g;
    int nhwc = 0;
    for (int i = 0; i < g->n_nodes; i++)
        nhwc |= !g->nodes[i].dead && g->nodes[i].nhwc;
    at_buf_printf(b, "\n/* ---- the whole model ----\n"
                     "** %s_model_run(inputs, outputs) runs one inference: inputs[i] and outputs[i]\n"
                     "** point to the model's tensors below, dense float32 in the model's own\n"
                     "** layout (any alignment; they are copied in and out).  The weights are in the\n"
                     "** library.  The first call (or %s_model_init()) makes the weights each\n"
                     "** layer's kernel reads in its own layout, once; later calls only run.\n", P, P);
    if (nhwc)
        at_buf_puts(b, "** Inside, convolutions and the operators between them compute in NHWC (the\n"
                       "** layout plan, docs/models.md): the task functions above take those tensors\n"
                       "** in that order, as their shapes say; the model's inputs and outputs are not\n"
                       "** affected.\n");
    for (int io = 0; io < 2; io++) {
        int n = io ? g->n_outputs : g->n_inputs;
        const int *ts = io ? g->outputs : g->inputs;
        for (int i = 0; i < n; i++) {
            const md_tensor *t = &g->tensors[ts[i]];
            char sh[200];
            size_t L = 0;
            sh[0] = 0;
            for (int d = 0; d < t->rank && L < sizeof sh; d++) {
                int k = xm->dims && t->sym_rank == t->rank ? t->sym[d] - 1 : -1;
                if (k >= 0)
                    L += (size_t)snprintf(sh + L, sizeof sh - L, "%s%s", d ? ", " : "[",
                                          g->sym_names[k]);
                else
                    L += (size_t)snprintf(sh + L, sizeof sh - L, "%s%lld", d ? ", " : "[",
                                          (long long)t->shape[d]);
            }
            if (L < sizeof sh)
                snprintf(sh + L, sizeof sh - L, "]");
            at_buf_printf(b, "**   %s %d: '%s' %s%s\n", io ? "output" : "input ", i, t->name,
                          t->dtype == AT_DT_I64 ? "int64" : "float32", t->rank ? sh : "[]");
        }
    }
    if (xm->dims) {
        at_buf_puts(b, "** Symbolic dimensions (names in the shapes above), with the sizes the kernels\n"
                       "** were built for:");
        for (int k = 0; k < g->n_syms; k++) {
            at_buf_printf(b, "%s '%s'", k ? ";" : "", g->sym_names[k]);
            if (k == xm->multi) {
                at_buf_puts(b, " buckets");
                for (int j = 0; j < xm->nb; j++)
                    at_buf_printf(b, "%s %lld", j ? "," : "", (long long)xm->ms[j]->g->sym_values[k]);
            } else {
                at_buf_printf(b, " %lld", (long long)g->sym_values[k]);
            }
        }
        at_buf_printf(b, ".\n"
            "** %s_model_set_dim(name, n) makes the next runs take their inputs and give their\n"
            "** outputs at size n (1 <= n <= the largest bucket): the model runs on the smallest\n"
            "** bucket that holds n, its inputs padded with zeros there (token id 0, attention\n"
            "** mask 0: padded positions are masked out, so a model whose positions meet only in\n"
            "** masked attention, as BERT's, gives the outputs of a run at n) and its outputs cut\n"
            "** back to n.  The sizes start at the largest bucket; %s_model_input_size and\n"
            "** %s_model_output_size follow the current values.\n", P, P, P);
    }
    at_buf_puts(b, "** An int64 input (token ids) is passed as its pointer cast to (const float *);\n"
                   "** each id is checked against the table it indexes.\n"
                   "** Returns 0; -2 when an integer input holds an index outside its table\n"
                   "** (nothing was read out of bounds; the outputs are not written); or what a\n"
                   "** kernel returned. */\n");
    at_buf_printf(b, "int32_t %s_model_run(const float *const *inputs, float *const *outputs);\n", P);
    at_buf_printf(b, "int %s_model_init(void);       /* 0, or -1 when a weight transform failed */\n", P);
    at_buf_printf(b, "int %s_model_n_inputs(void);\nint %s_model_n_outputs(void);\n", P, P);
    at_buf_printf(b, "const char *%s_model_input_name(int i);\nconst char *%s_model_output_name(int i);\n", P, P);
    at_buf_printf(b, "long long %s_model_input_size(int i);   /* elements */\n"
                     "long long %s_model_output_size(int i);\n", P, P);
    if (xm->dims)
        at_buf_printf(b, "int %s_model_set_dim(const char *name, long long n); /* 0, or -1: unknown name, n out of range */\n"
                         "long long %s_model_dim(const char *name);  /* the current value, -1 for an unknown name */\n"
                         "int %s_model_n_dims(void);\nconst char *%s_model_dim_name(int i);\n"
                         "int %s_model_n_buckets(int i);              /* of dimension i */\n"
                         "long long %s_model_bucket(int i, int j);    /* bucket j of dimension i, ascending */\n",
                      P, P, P, P, P, P);
}

static void header_text(at_buf *b, const char *P, const char *file, const xtask *xs, int n,
                        int pool, int max_threads, const md_task_list *tl, const char *target,
                        const xmodel *m)
{
    char guard[140], up[128];
    size_t k = 0;
    for (const char *p = P; *p && k + 4 < sizeof guard; p++)
        up[k++] = (*p >= 'a' && *p <= 'z') ? (char)(*p - 'a' + 'A') : *p;
    up[k] = 0;
    snprintf(guard, sizeof guard, "%s_H", up);
    at_buf_printf(b, "/* %s -- the tuned kernels of %s, one C function per task.\n", file,
                  tl->model ? tl->model : "a model");
    at_buf_printf(b, "** Made by 'tuner export-lib' for target: %s\n**\n", target);
    at_buf_puts(b,
        "** Calling convention: each P_taskN takes pointers to the task's tensors in the order\n"
        "** listed (its inputs as declared, then its output), dense, row-major, 64-byte\n"
        "** aligned (aligned_alloc(64, ...)) and not overlapping.  It returns 0 on success\n"
        "** (non-zero only if a parallel launch failed).  Workspaces are inside the library.  Weights\n"
        "** ('const' tensors) whose layout a kernel rewrote are transformed on the first call\n"
        "** with them: a task keeps one transformed copy per use in the model, so each of the\n"
        "** layers that share a task keeps its own (a call with yet other weights replaces the\n"
        "** oldest).  After changing a weight's values in place, call P_reset_weights();\n"
        "** P_n_weight_transforms() counts the transforms made.  Calls must not overlap (one\n"
        "** thread at a time).\n");
    if (pool)
        at_buf_printf(b, "** Threads: P_set_threads(n), 1 <= n <= %d (default 1: serial); the\n"
                         "** library starts n - 1 threads and reuses them.\n", max_threads);
    else
        at_buf_puts(b, "** Threads: this library is serial (P_set_threads accepts only 1); it\n"
                       "** needs no libc beyond the libm/libc functions its kernels call.\n");
    at_buf_puts(b, "** (P stands for the prefix of the names below.) */\n");
    at_buf_printf(b, "#ifndef %s\n#define %s\n\n#include <stdint.h>\n\n#ifdef __cplusplus\n"
                     "extern \"C\" {\n#endif\n\n", guard, guard);
    at_buf_printf(b, "#define %s_N_TASKS %d\n\n", up, n);
    at_buf_printf(b, "int %s_n_tasks(void);\n", P);
    at_buf_printf(b, "const char *%s_task_key(int i);   /* workload key of task i */\n", P);
    at_buf_printf(b, "const char *%s_task_name(int i);\n", P);
    at_buf_printf(b, "/* Task i on bufs[] in the order of its function's arguments. */\n"
                     "int32_t %s_task_run(int i, void *const *bufs);\n", P);
    at_buf_printf(b, "int %s_set_threads(int n);      /* 0, or -1 when n is not possible */\n", P);
    at_buf_printf(b, "void %s_reset_weights(void);\n", P);
    at_buf_printf(b, "int %s_n_weight_transforms(void);\n", P);
    for (int i = 0; i < n; i++) {
        const xtask *x = &xs[i];
        const md_task *t = x->t;
        at_buf_printf(b, "\n/* task %d: %s, run %d time%s per inference", i, t->name, t->weight,
                      t->weight == 1 ? "" : "s");
        if (t->n_uses > 0) {
            at_buf_puts(b, " (nodes");
            for (int k2 = 0; k2 < t->uses[0].n_nodes && k2 < 6; k2++)
                at_buf_printf(b, " %s", t->uses[0].nodes[k2]);
            at_buf_puts(b, t->n_uses > 1 || t->uses[0].n_nodes > 6 ? " ...)" : ")");
        }
        at_buf_printf(b, "\n**   %s\n**   key %s, %.0f FLOPs; ", t->desc, t->key, t->flops);
        if (x->tuned)
            at_buf_printf(b, "tuned schedule (measured %.4f ms)\n", x->cost_s * 1e3);
        else
            at_buf_puts(b, "naive schedule (no record)\n");
        for (int a = 0; a < x->a->n_args; a++) {
            char nm[40];
            arg_name(t, a, nm, sizeof nm);
            at_buf_printf(b, "**   %-8s %s", nm, at_dtype_name(x->a->args[a].dtype));
            shape_text(b, &x->a->args[a]);
            at_buf_printf(b, "  %s\n", x->a->args[a].is_output ? "output"
                                       : x->a->args[a].is_const ? "weight" : "input");
        }
        at_buf_puts(b, "*/\n");
        signature(b, P, i, x);
        at_buf_puts(b, ";\n");
    }
    if (m)
        header_model_text(b, P, m);
    at_buf_printf(b, "\n#ifdef __cplusplus\n}\n#endif\n\n#endif /* %s */\n", guard);
}

/* The version script: only the public names leave the library. */
static void exports_text(at_buf *b, const char *P, int n, int model, int dims)
{
    at_buf_puts(b, "{\n  global:\n");
    at_buf_printf(b, "    %s_n_tasks;\n    %s_task_key;\n    %s_task_name;\n    %s_task_run;\n"
                     "    %s_set_threads;\n    %s_reset_weights;\n    %s_n_weight_transforms;\n",
                  P, P, P, P, P, P, P);
    if (model)
        at_buf_printf(b, "    %s_model_run;\n    %s_model_init;\n    %s_model_n_inputs;\n"
                         "    %s_model_n_outputs;\n    %s_model_input_name;\n"
                         "    %s_model_output_name;\n    %s_model_input_size;\n"
                         "    %s_model_output_size;\n", P, P, P, P, P, P, P, P);
    if (dims)
        at_buf_printf(b, "    %s_model_set_dim;\n    %s_model_dim;\n    %s_model_n_dims;\n"
                         "    %s_model_dim_name;\n    %s_model_n_buckets;\n    %s_model_bucket;\n",
                      P, P, P, P, P, P);
    for (int i = 0; i < n; i++)
        at_buf_printf(b, "    %s_task%d;\n", P, i);
    at_buf_puts(b, "  local:\n    *;\n};\n");
}

/* ---- driver ---- */

static at_err write_text(const char *path, at_buf *b, char *errmsg, size_t errmsg_size)
{
    if (b->err)
        return AT_ENOMEM;
    return at_file_write(path, b->data ? b->data : "", b->len, errmsg, errmsg_size);
}

static void rm_tree(const char *dir)
{
    char cmd[400];
    if (strncmp(dir, "/tmp/md_export.", 15) != 0)
        return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        at_log_warn("export-lib: could not remove %s", dir);
}

/* Android: stub libm.so and libc.so (each symbol a function that returns) with the names
** Android's libraries have, so the library records them as its DT_NEEDED. */
static at_err android_stubs(const char *tmp, const char *cc, const char *ld, const symset *u,
                            char *errmsg, size_t errmsg_size)
{
    for (int lib = 0; lib < 2; lib++) {
        const char *so = lib ? "libc.so" : "libm.so";
        char src[300], obj[300], out[300], log[300];
        at_buf b;
        at_err err;
        at_buf_init(&b);
        at_buf_puts(&b, "\t.text\n");
        for (int i = 0; i < u->n; i++) {
            if (is_libc_sym(u->names[i]) != lib)
                continue;
            at_buf_printf(&b, "\t.globl %s\n\t.type %s, %%function\n%s:\n\tret\n", u->names[i],
                          u->names[i], u->names[i]);
        }
        snprintf(src, sizeof src, "%s/stub_%d.s", tmp, lib);
        snprintf(obj, sizeof obj, "%s/stub_%d.o", tmp, lib);
        snprintf(out, sizeof out, "%s/%s", tmp, so);
        snprintf(log, sizeof log, "%s/stub.log", tmp);
        err = write_text(src, &b, errmsg, errmsg_size);
        at_buf_fini(&b);
        if (err != AT_OK)
            return err;
        {
            char *argv1[] = {(char *)cc, (char *)"-c", src, (char *)"-o", obj, NULL};
            char soname[64];
            char *argv2[] = {(char *)ld, (char *)"-shared", (char *)"-soname", soname, obj,
                             (char *)"-o", out, NULL};
            snprintf(soname, sizeof soname, "%s", so);
            if ((err = run_cmd(argv1, log, errmsg, errmsg_size)) != AT_OK ||
                (err = run_cmd(argv2, log, errmsg, errmsg_size)) != AT_OK)
                return err;
        }
    }
    return AT_OK;
}

/* weights.bin (the shared constants' block), weights.S that includes it, assembled into
** weights.o. */
static at_err write_weights(const char *tmp, const char *P, const xmodel *xm, const char *cc,
                            const char *log, char *errmsg, size_t errmsg_size)
{
    char bin[300], S[300], obj[300];
    at_buf b;
    at_err err;
    snprintf(bin, sizeof bin, "%s/weights.bin", tmp);
    snprintf(S, sizeof S, "%s/weights.S", tmp);
    snprintf(obj, sizeof obj, "%s/weights.o", tmp);
    err = at_file_write(bin, xm->blob, (size_t)xm->blob_bytes, errmsg, errmsg_size);
    if (err != AT_OK)
        return err;
    at_buf_init(&b);
    weights_asm(&b, P, bin);
    err = write_text(S, &b, errmsg, errmsg_size);
    at_buf_fini(&b);
    if (err == AT_OK) {
        char *argv[] = {(char *)cc, (char *)"-c", S, (char *)"-o", obj, NULL};
        err = run_cmd(argv, log, errmsg, errmsg_size);
    }
    return err;
}

at_err md_export_lib(const md_task_list *tl, const md_export_opts *o, md_export_report *rep,
                     char *errmsg, size_t errmsg_size)
{
    kn_target tgt;
    platform plat;
    char P[96], tmp[64] = "", cc[512], ld[512], hdr[1024], glue_c[300], glue_o[300], map[300];
    char log[300], file[256];
    xtask *xs = NULL;
    symset undef;
    xmodel xm;
    const md_model *const *ms = o->n_buckets > 0 ? o->buckets : &o->model;
    int nb = o->n_buckets > 0 ? o->n_buckets : o->model != NULL;
    int pool, max_threads, n = tl->n_tasks;
    double t0 = at_time_mono_s();
    at_err err;
    at_buf b;
    memset(rep, 0, sizeof *rep);
    memset(&undef, 0, sizeof undef);
    memset(&xm, 0, sizeof xm);
    at_buf_init(&b);
    if (errmsg_size)
        errmsg[0] = 0;
    if (o->out_path == NULL || o->out_path[0] == 0) {
        snprintf(errmsg, errmsg_size, "no output file");
        return AT_EINVAL;
    }
    err = o->target ? kn_target_parse(o->target, &tgt, errmsg, errmsg_size) : kn_target_host(&tgt);
    if (err != AT_OK)
        return err;
    if (strstr(tgt.triple, "android"))
        plat = PLAT_ANDROID_A64;
    else if (tgt.is_aarch64 && strstr(tgt.triple, "linux"))
        plat = PLAT_LINUX_A64;
    else if (tgt.is_x86 && strstr(tgt.triple, "linux"))
        plat = PLAT_LINUX_X86;
    else {
        snprintf(errmsg, errmsg_size, "target '%s': a library is made for x86-64 Linux, aarch64 "
                 "Linux or aarch64 Android only", tgt.text);
        return AT_EUNSUPPORTED;
    }
    if (plat == PLAT_ANDROID_A64 && !tgt.is_aarch64) {
        snprintf(errmsg, errmsg_size, "target '%s': only aarch64 Android is supported", tgt.text);
        return AT_EUNSUPPORTED;
    }
    pool = plat != PLAT_ANDROID_A64;
    max_threads = pool ? (o->max_threads > 0 ? o->max_threads : tgt.n_cores) : 1;
    if (max_threads > 256)
        max_threads = 256;
    {
        const char *want_cc = plat == PLAT_LINUX_X86 ? "cc" : "aarch64-linux-gnu-gcc";
        if (!find_tool(want_cc, cc, sizeof cc)) {
            snprintf(errmsg, errmsg_size, "'%s' is not installed (package %s; 'make deps')",
                     want_cc, plat == PLAT_LINUX_X86 ? "gcc" : "gcc-aarch64-linux-gnu");
            return AT_EUNSUPPORTED;
        }
        if (plat == PLAT_ANDROID_A64 && !find_tool("ld.lld-16", ld, sizeof ld) &&
            !find_tool("ld.lld", ld, sizeof ld)) {
            snprintf(errmsg, errmsg_size, "'ld.lld-16' is not installed (package lld-16; 'make "
                     "deps')");
            return AT_EUNSUPPORTED;
        }
    }
    if (o->prefix && o->prefix[0]) {
        md__lib_prefix(o->prefix, P, sizeof P);
        if (strcmp(P, o->prefix) != 0) {
            snprintf(errmsg, errmsg_size, "prefix '%s' is not a C identifier", o->prefix);
            return AT_EINVAL;
        }
    } else {
        md__lib_prefix(o->out_path, P, sizeof P);
    }
    snprintf(rep->prefix, sizeof rep->prefix, "%s", P);
    if (o->header_path)
        snprintf(hdr, sizeof hdr, "%s", o->header_path);
    else {
        size_t L = strlen(o->out_path);
        if (L > 3 && strcmp(o->out_path + L - 3, ".so") == 0)
            snprintf(hdr, sizeof hdr, "%.*s.h", (int)(L - 3), o->out_path);
        else
            snprintf(hdr, sizeof hdr, "%s.h", o->out_path);
    }
    snprintf(tmp, sizeof tmp, "/tmp/md_export.XXXXXX");
    if (mkdtemp(tmp) == NULL) {
        snprintf(errmsg, errmsg_size, "cannot make a temporary folder: %s", strerror(errno));
        return AT_EIO;
    }
    if ((xs = at_calloc((size_t)n + 1, sizeof *xs)) == NULL) {
        err = AT_ENOMEM;
        goto out;
    }
    rep->n_tasks = n;
    /* the kernels */
    for (int i = 0; i < n; i++) {
        ss_state *st = NULL;
        char entry[128], msg[768], path[300];
        xs[i].t = &tl->tasks[i];
        err = md_task_schedule(&tl->tasks[i], o->store, tgt.text, o->device_key, &st,
                               &xs[i].cost_s, msg, sizeof msg);
        if (err == AT_OK) {
            xs[i].tuned = st->n_steps > 0 && xs[i].cost_s > 0;
            snprintf(entry, sizeof entry, "tnk_%s_%d", P, i);
            err = kn_build_state(st, &tgt, entry, &xs[i].a, msg, sizeof msg);
        }
        ss_state_free(st);
        if (err == AT_OK) {
            snprintf(path, sizeof path, "%s/k%d.o", tmp, i);
            err = at_file_write(path, xs[i].a->obj, xs[i].a->obj_size, msg, sizeof msg);
        }
        if (err == AT_OK && plat == PLAT_ANDROID_A64 &&
            undefined_symbols(xs[i].a->obj, xs[i].a->obj_size, symset_add, &undef) != 0) {
            snprintf(msg, sizeof msg, "cannot read the symbols of its object");
            err = AT_ECODEGEN;
        }
        if (err != AT_OK) {
            snprintf(errmsg, errmsg_size, "task %d (%s): %s", i, tl->tasks[i].name,
                     err == AT_ENOMEM ? "out of memory" : msg);
            goto out;
        }
        if (xs[i].tuned)
            rep->n_tuned++;
        else
            rep->n_naive++;
    }
    symset_add(&undef, "malloc"); /* the weights in their kernels' layouts (keep_alloc) */
    symset_add(&undef, "free");
    /* the glue, the version script, the header */
    snprintf(glue_c, sizeof glue_c, "%s/glue.c", tmp);
    snprintf(glue_o, sizeof glue_o, "%s/glue.o", tmp);
    snprintf(map, sizeof map, "%s/exports.map", tmp);
    snprintf(log, sizeof log, "%s/build.log", tmp);
    {
        const char *base = strrchr(o->out_path, '/');
        snprintf(file, sizeof file, "%s", base ? base + 1 : o->out_path);
    }
    glue_text(&b, P, xs, n, pool, max_threads, tl->model ? tl->model : "tasks", tgt.text);
    if (nb > 0) {
        if ((err = xmodel_make(&xm, ms, nb, tl, errmsg, errmsg_size)) != AT_OK)
            goto out;
        if (model_text(&b, P, xs, &xm) != 0) {
            snprintf(errmsg, errmsg_size, "internal: a copy step of the model cannot be written");
            err = AT_EINVAL;
            goto out;
        }
        if ((err = write_weights(tmp, P, &xm, cc, log, errmsg, errmsg_size)) != AT_OK)
            goto out;
        symset_add(&undef, "memcpy");
        symset_add(&undef, "memset");
        rep->arena_bytes = xm.arena_bytes;
        for (int k = 0; k < nb; k++)
            for (int s = 0; s < ms[k]->n_steps; s++)
                rep->n_weight_uses += ms[k]->steps[s].kind == MD_STEP_TASK &&
                                      xs[xm.map[k][ms[k]->steps[s].task]].a->n_pre > 0;
        rep->weight_bytes = xm.blob_bytes;
        rep->n_buckets = xm.multi >= 0 ? nb : 0;
    }
    if ((err = write_text(glue_c, &b, errmsg, errmsg_size)) != AT_OK)
        goto out;
    at_buf_reset(&b);
    exports_text(&b, P, n, nb > 0, nb > 0 && xm.dims);
    if ((err = write_text(map, &b, errmsg, errmsg_size)) != AT_OK)
        goto out;
    {
        char *argv[24];
        int k = 0;
        argv[k++] = cc;
        argv[k++] = (char *)"-c";
        argv[k++] = (char *)"-O2";
        argv[k++] = (char *)"-fPIC";
        argv[k++] = (char *)"-fvisibility=hidden";
        if (pool) {
            argv[k++] = (char *)"-pthread";
        } else {
            argv[k++] = (char *)"-ffreestanding";
            argv[k++] = (char *)"-fno-builtin";
            argv[k++] = (char *)"-fno-stack-protector";
            argv[k++] = (char *)"-fno-asynchronous-unwind-tables";
        }
        argv[k++] = glue_c;
        argv[k++] = (char *)"-o";
        argv[k++] = glue_o;
        argv[k] = NULL;
        if ((err = run_cmd(argv, log, errmsg, errmsg_size)) != AT_OK)
            goto out;
    }
    /* link */
    {
        char **argv = at_calloc((size_t)n + 40, sizeof *argv);
        char (*objs)[300] = at_calloc((size_t)n + 1, sizeof *objs);
        char vs[400], so[300], lpath[300];
        int k = 0;
        size_t L = 0;
        if (argv == NULL || objs == NULL) {
            at_free(argv);
            at_free(objs);
            err = AT_ENOMEM;
            goto out;
        }
        if (plat == PLAT_ANDROID_A64 &&
            (err = android_stubs(tmp, cc, ld, &undef, errmsg, errmsg_size)) != AT_OK) {
            at_free(argv);
            at_free(objs);
            goto out;
        }
        argv[k++] = plat == PLAT_ANDROID_A64 ? ld : cc;
        argv[k++] = (char *)"-shared";
        argv[k++] = (char *)"-o";
        argv[k++] = (char *)o->out_path;
        argv[k++] = glue_o;
        for (int i = 0; i < n; i++) {
            snprintf(objs[i], sizeof objs[i], "%s/k%d.o", tmp, i);
            argv[k++] = objs[i];
        }
        if (nb > 0) {
            snprintf(objs[n], sizeof objs[n], "%s/weights.o", tmp);
            argv[k++] = objs[n];
        }
        if (plat == PLAT_ANDROID_A64) {
            snprintf(vs, sizeof vs, "--version-script=%s", map);
            snprintf(so, sizeof so, "-soname=%s", file);
            snprintf(lpath, sizeof lpath, "-L%s", tmp);
            argv[k++] = vs;
            argv[k++] = so;
            argv[k++] = (char *)"-z";
            argv[k++] = (char *)"noexecstack";
            argv[k++] = (char *)"-z";
            argv[k++] = (char *)"now";
            argv[k++] = (char *)"--hash-style=both";
            argv[k++] = (char *)"--no-undefined";
            argv[k++] = lpath;
            argv[k++] = (char *)"-lm";
            argv[k++] = (char *)"-lc";
        } else {
            snprintf(vs, sizeof vs, "-Wl,--version-script=%s", map);
            snprintf(so, sizeof so, "-Wl,-soname,%s", file);
            argv[k++] = vs;
            argv[k++] = so;
            argv[k++] = (char *)"-Wl,-z,noexecstack";
            argv[k++] = (char *)"-Wl,--no-undefined";
            argv[k++] = (char *)"-pthread";
            argv[k++] = (char *)"-lm";
        }
        argv[k] = NULL;
        /* the command as the user would type it, the objects abridged */
        for (int i = 0; i < k && L < sizeof rep->link_cmd; i++) {
            const char *a = argv[i];
            char ab[64];
            if (i >= 5 && i < 5 + n) {
                if (i > 5 && i < 5 + n - 1)
                    continue;
                snprintf(ab, sizeof ab, "%sk%d.o", i == 5 + n - 1 && n > 2 ? "... " : "", i - 5);
                a = ab;
            }
            L += (size_t)snprintf(rep->link_cmd + L, sizeof rep->link_cmd - L, "%s%s",
                                  i ? " " : "", a);
        }
        err = run_cmd(argv, log, errmsg, errmsg_size);
        at_free(argv);
        at_free(objs);
        if (err != AT_OK)
            goto out;
    }
    at_buf_reset(&b);
    {
        const char *hb = strrchr(hdr, '/');
        header_text(&b, P, hb ? hb + 1 : hdr, xs, n, pool, max_threads, tl, tgt.text,
                    nb > 0 ? &xm : NULL);
    }
    if ((err = write_text(hdr, &b, errmsg, errmsg_size)) != AT_OK)
        goto out;
out:
    xmodel_fini(&xm);
    for (int i = 0; xs && i < n; i++)
        kn_artifact_free(xs[i].a);
    at_free(xs);
    at_buf_fini(&b);
    md_replay_check(NULL, NULL, NULL, NULL, 0); /* the DAG it cached */
    rep->build_s = at_time_mono_s() - t0;
    if (tmp[0]) {
        if (o->keep_temp)
            snprintf(rep->temp_dir, sizeof rep->temp_dir, "%s", tmp);
        else
            rm_tree(tmp);
    }
    if (err == AT_ENOMEM && errmsg_size)
        snprintf(errmsg, errmsg_size, "out of memory");
    return err;
}
