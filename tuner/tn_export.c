/* tuner/tn_export.c -- 'tuner export-lib': one shared library holding the best kernel of
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
#include "tuner/tn_graph.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/kernels.h"

void tn__lib_prefix(const char *path, char *out, size_t size)
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
           strcmp(s, "memcmp") == 0;
}

/* ---- the glue and the header ---- */

typedef struct xtask {
    const tn_task *t;
    kn_artifact *a;
    int tuned;
    double cost_s;
} xtask;

static const char *const c_words[] = {"auto", "break", "case", "char", "const", "continue",
    "default", "do", "double", "else", "enum", "extern", "float", "for", "goto", "if", "int",
    "long", "register", "return", "short", "signed", "sizeof", "static", "struct", "switch",
    "typedef", "union", "unsigned", "void", "volatile", "while", "bufs", NULL};

/* The DAG name of argument i of a task, as a C identifier. */
static void arg_name(const tn_task *t, int i, char *out, size_t size)
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
        "static const tn_par *cur_par = &serial_par;\n");
    at_buf_printf(b, "#define MAX_THREADS %d\n", max_threads);
    if (pool) {
        at_buf_puts(b,
            "#include <pthread.h>\n"
            "static struct {\n"
            "    pthread_mutex_t mu;\n    pthread_cond_t go, done;\n"
            "    pthread_t th[MAX_THREADS];\n"
            "    int n_started, n, pending, busy, stop;\n"
            "    unsigned long gen;\n    tn_task_fn fn;\n    void *closure;\n    int32_t rc;\n"
            "    unsigned long gen0[MAX_THREADS]; /* the launches a new worker must not run */\n"
            "} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,\n"
            "          PTHREAD_COND_INITIALIZER, {0}, 0, 1, 0, 0, 0, 0, 0, 0, 0, {0}};\n"
            "static tn_par pool_par;\n"
            "static void *worker(void *arg)\n{\n"
            "    int id = (int)(intptr_t)arg;\n    unsigned long seen = 0;\n"
            "    pthread_mutex_lock(&pool.mu);\n    seen = pool.gen0[id];\n"
            "    for (;;) {\n"
            "        tn_task_fn fn;\n        void *c;\n        int32_t n, rc;\n"
            "        while (!pool.stop && pool.gen == seen)\n"
            "            pthread_cond_wait(&pool.go, &pool.mu);\n"
            "        if (pool.stop)\n            break;\n"
            "        seen = pool.gen;\n"
            "        if (id >= pool.n)\n            continue;\n"
            "        fn = pool.fn;\n        c = pool.closure;\n        n = pool.n;\n"
            "        pthread_mutex_unlock(&pool.mu);\n"
            "        rc = fn(c, id, n);\n"
            "        pthread_mutex_lock(&pool.mu);\n"
            "        if (rc && !pool.rc)\n            pool.rc = rc;\n"
            "        if (--pool.pending == 0)\n            pthread_cond_signal(&pool.done);\n"
            "    }\n    pthread_mutex_unlock(&pool.mu);\n    return NULL;\n}\n"
            "static int32_t pool_launch(const tn_par *p, tn_task_fn fn, void *c)\n{\n"
            "    int32_t rc;\n    (void)p;\n"
            "    if (!fn)\n        return -1;\n"
            "    pthread_mutex_lock(&pool.mu);\n"
            "    if (pool.busy) {   /* nested (or concurrent): serially, on this thread */\n"
            "        pthread_mutex_unlock(&pool.mu);\n        return fn(c, 0, 1);\n    }\n"
            "    pool.busy = 1;\n    pool.fn = fn;\n    pool.closure = c;\n    pool.rc = 0;\n"
            "    pool.pending = pool.n - 1;\n    pool.gen++;\n"
            "    pthread_cond_broadcast(&pool.go);\n    pthread_mutex_unlock(&pool.mu);\n"
            "    rc = fn(c, 0, pool.n);\n"
            "    pthread_mutex_lock(&pool.mu);\n"
            "    while (pool.pending > 0)\n        pthread_cond_wait(&pool.done, &pool.mu);\n"
            "    if (rc == 0)\n        rc = pool.rc;\n"
            "    pool.busy = 0;\n    pthread_mutex_unlock(&pool.mu);\n    return rc;\n}\n"
            "__attribute__((destructor)) static void pool_stop(void)\n{\n"
            "    pthread_mutex_lock(&pool.mu);\n    pool.stop = 1;\n"
            "    pthread_cond_broadcast(&pool.go);\n    pthread_mutex_unlock(&pool.mu);\n"
            "    for (int i = 1; i < pool.n_started; i++)\n"
            "        pthread_join(pool.th[i], NULL);\n    pool.n_started = 0;\n}\n");
        at_buf_printf(b,
            "API int %s_set_threads(int n)\n{\n"
            "    if (n < 1 || n > MAX_THREADS)\n        return -1;\n"
            "    pthread_mutex_lock(&pool.mu);\n"
            "    if (pool.busy) {\n        pthread_mutex_unlock(&pool.mu);\n        return -1;\n    }\n"
            "    if (pool.n_started == 0)\n        pool.n_started = 1;\n"
            "    while (pool.n_started < n) {\n"
            "        pool.gen0[pool.n_started] = pool.gen;\n"
            "        if (pthread_create(&pool.th[pool.n_started], NULL, worker,\n"
            "                           (void *)(intptr_t)pool.n_started) != 0) {\n"
            "            pthread_mutex_unlock(&pool.mu);\n            return -1;\n        }\n"
            "        pool.n_started++;\n    }\n"
            "    pool.n = n;\n    pool_par.launch = pool_launch;\n    pool_par.n_threads = n;\n"
            "    cur_par = n == 1 ? &serial_par : &pool_par;\n"
            "    pthread_mutex_unlock(&pool.mu);\n    return 0;\n}\n", P);
    } else {
        at_buf_printf(b, "API int %s_set_threads(int n)\n{\n    return n == 1 ? 0 : -1;\n}\n", P);
    }
    for (int i = 0; i < n; i++) {
        const kn_artifact *a = xs[i].a;
        int64_t ws = a->ws_fixed + a->ws_per_thread * max_threads;
        at_buf_printf(b, "\n/* task %d: %s */\n", i, xs[i].t->name);
        at_buf_printf(b, "extern int32_t %s(void *const *, void *, const tn_par *);\n", a->entry);
        if (a->pre_entry[0])
            at_buf_printf(b, "extern int32_t %s(void *const *, void *, const tn_par *);\n",
                          a->pre_entry);
        at_buf_printf(b, "static unsigned char ws_%d[%lld] __attribute__((aligned(64)));\n", i,
                      (long long)(ws > 0 ? ws : 64));
        for (int k = 0; k < a->n_args; k++)
            if (a->kernel_src[k] >= 0)
                at_buf_printf(b, "static %s lay_%d_%d[%lld] __attribute__((aligned(64)));\n",
                              c_type(a->kernel_args[k].dtype), i, k,
                              (long long)arg_elems(&a->kernel_args[k]));
        if (a->n_pre)
            at_buf_printf(b, "static const void *src_%d[%d];\n", i, a->n_pre);
        at_buf_printf(b, "static int32_t run_%d(void *const *bufs)\n{\n    void *k[%d];\n", i,
                      a->n_args);
        at_buf_printf(b, "    for (int i = 0; i < %d; i++)\n        k[i] = bufs[i];\n", a->n_args);
        if (a->n_pre) {
            int m = 0;
            at_buf_puts(b, "    if (");
            for (int j = 0; j < a->n_pre; j++)
                at_buf_printf(b, "%ssrc_%d[%d] != bufs[%d]", j ? " || " : "", i, j, a->pre_src[j]);
            at_buf_printf(b, ") {\n        void *p[%d] = {", 2 * a->n_pre);
            for (int j = 0; j < a->n_pre; j++)
                at_buf_printf(b, "%sbufs[%d]", j ? ", " : "", a->pre_src[j]);
            for (int k = 0; k < a->n_args; k++)
                if (a->kernel_src[k] >= 0)
                    at_buf_printf(b, ", lay_%d_%d", i, k);
            at_buf_printf(b, "};\n        int32_t rc = %s(p, NULL, cur_par);\n", a->pre_entry);
            at_buf_puts(b, "        if (rc)\n            return rc;\n");
            for (int j = 0; j < a->n_pre; j++)
                at_buf_printf(b, "        src_%d[%d] = bufs[%d];\n", i, j, a->pre_src[j]);
            at_buf_puts(b, "    }\n");
            for (int k = 0; k < a->n_args; k++)
                if (a->kernel_src[k] >= 0)
                    at_buf_printf(b, "    k[%d] = lay_%d_%d;\n", k, i, k), m++;
            (void)m;
        }
        at_buf_printf(b, "    return %s(k, ws_%d, cur_par);\n}\n", a->entry, i);
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
        for (int j = 0; j < xs[i].a->n_pre; j++)
            at_buf_printf(b, "    src_%d[%d] = NULL;\n", i, j);
    at_buf_puts(b, "}\n");
}

static void header_text(at_buf *b, const char *P, const char *file, const xtask *xs, int n,
                        int pool, int max_threads, const tn_task_list *tl, const char *target)
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
        "** and again whenever their address changes: after changing a weight's values in\n"
        "** place, call P_reset_weights().  Calls must not overlap (one thread at a time).\n");
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
    for (int i = 0; i < n; i++) {
        const xtask *x = &xs[i];
        const tn_task *t = x->t;
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
    at_buf_printf(b, "\n#ifdef __cplusplus\n}\n#endif\n\n#endif /* %s */\n", guard);
}

/* The version script: only the public names leave the library. */
static void exports_text(at_buf *b, const char *P, int n)
{
    at_buf_puts(b, "{\n  global:\n");
    at_buf_printf(b, "    %s_n_tasks;\n    %s_task_key;\n    %s_task_name;\n    %s_task_run;\n"
                     "    %s_set_threads;\n    %s_reset_weights;\n", P, P, P, P, P, P);
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
    if (strncmp(dir, "/tmp/tn_export.", 15) != 0)
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

at_err tn_export_lib(const tn_task_list *tl, const tn_export_opts *o, tn_export_report *rep,
                     char *errmsg, size_t errmsg_size)
{
    kn_target tgt;
    platform plat;
    char P[96], tmp[64] = "", cc[512], ld[512], hdr[1024], glue_c[300], glue_o[300], map[300];
    char log[300], file[256];
    xtask *xs = NULL;
    symset undef;
    int pool, max_threads, n = tl->n_tasks;
    double t0 = at_time_mono_s();
    at_err err;
    at_buf b;
    memset(rep, 0, sizeof *rep);
    memset(&undef, 0, sizeof undef);
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
        tn__lib_prefix(o->prefix, P, sizeof P);
        if (strcmp(P, o->prefix) != 0) {
            snprintf(errmsg, errmsg_size, "prefix '%s' is not a C identifier", o->prefix);
            return AT_EINVAL;
        }
    } else {
        tn__lib_prefix(o->out_path, P, sizeof P);
    }
    if (o->header_path)
        snprintf(hdr, sizeof hdr, "%s", o->header_path);
    else {
        size_t L = strlen(o->out_path);
        if (L > 3 && strcmp(o->out_path + L - 3, ".so") == 0)
            snprintf(hdr, sizeof hdr, "%.*s.h", (int)(L - 3), o->out_path);
        else
            snprintf(hdr, sizeof hdr, "%s.h", o->out_path);
    }
    snprintf(tmp, sizeof tmp, "/tmp/tn_export.XXXXXX");
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
        err = tn_task_schedule(&tl->tasks[i], o->store, tgt.text, o->device_key, &st,
                               &xs[i].cost_s, msg, sizeof msg);
        if (err == AT_OK) {
            xs[i].tuned = st->n_steps > 0 && xs[i].cost_s > 0;
            snprintf(entry, sizeof entry, "tnk_%s_%d", P, i);
            err = tn__build_state(st, &tgt, entry, &xs[i].a, msg, sizeof msg);
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
    if ((err = write_text(glue_c, &b, errmsg, errmsg_size)) != AT_OK)
        goto out;
    at_buf_reset(&b);
    exports_text(&b, P, n);
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
        header_text(&b, P, hb ? hb + 1 : hdr, xs, n, pool, max_threads, tl, tgt.text);
    }
    if ((err = write_text(hdr, &b, errmsg, errmsg_size)) != AT_OK)
        goto out;
out:
    for (int i = 0; xs && i < n; i++)
        kn_artifact_free(xs[i].a);
    at_free(xs);
    at_buf_fini(&b);
    tn_replay_check(NULL, NULL, NULL, NULL, 0); /* the DAG it cached */
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
