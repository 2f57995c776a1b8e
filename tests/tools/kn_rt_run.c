/* tests/tools/kn_rt_run.c -- load a kernel object with the kernel runtime and run it once.
**
**   kn_rt_run OBJ.o ENTRY [--threads N] [--seed S] [--ws BYTES]
**             [--buf DTYPE:SHAPE:in|out]... [--out FILE] [--time REPEAT]
**
** Buffers are the kernel's 'bufs' in the order given; SHAPE is like 64x128 (one
** dimension is fine).  An 'in' buffer i is filled with kn_rt_fill(seed, stream i), an
** 'out' buffer starts zeroed.  After one call, the raw bytes of the 'out' buffers, in
** order, are written to FILE.  With --time, the kernel is then timed with kn_rt_time
** (one warm-up call, REPEAT repeats of at least 1 ms, every buffer flushed from the
** caches before each) and the seconds per call are printed, one line "cost_s C1 C2 ...".
** Exit status: 0 success, 2 bad arguments or a load error (the message names the
** problem), 3 the kernel returned non-zero.
**
** Built for the host (build/<flavour>/tests/tools/kn_rt_run) and, statically, for
** aarch64 (build/aarch64/bin/kn_rt_run, 'make rt-aarch64') to run under qemu-aarch64. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "kernels/kernels_rt.h"

#define MAX_BUFS 64
#define MAX_BYTES ((uint64_t)1 << 30)
#define EXIT_USAGE 2
#define EXIT_KERNEL 3

typedef struct buf_spec {
    at_dtype dt;
    int64_t n_elems;
    size_t n_bytes;
    int is_out;
    void *p;
} buf_spec;

static void usage(FILE *f)
{
    fprintf(f, "usage: kn_rt_run OBJ.o ENTRY [--threads N] [--seed S] [--ws BYTES]\n"
               "                 [--buf DTYPE:SHAPE:in|out]... [--out FILE] [--time REPEAT]\n"
               "  DTYPE  float32 int32 bool float16 int8 float64 int64 (or f32, i32, ...)\n"
               "  SHAPE  dimensions joined by 'x', e.g. 64x128\n"
               "  exit   0 ok, 2 bad argument or load error, 3 kernel returned non-zero\n");
}

static int die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int die(const char *fmt, ...)
{
    va_list ap;
    fputs("kn_rt_run: error: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return EXIT_USAGE;
}

/* A whole decimal number in [lo, hi]. */
static int parse_num(const char *opt, const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end;
    unsigned long long v;
    if (s == NULL)
        return die("%s needs a value", opt);
    errno = 0;
    v = strtoull(s, &end, 10);
    if (s[0] < '0' || s[0] > '9' || *end != 0 || errno != 0 || v < lo || v > hi)
        return die("%s: '%s' is not a number in [%llu, %llu]", opt, s, (unsigned long long)lo,
                   (unsigned long long)hi);
    *out = v;
    return 0;
}

/* "DTYPE:SHAPE:in|out" */
static int parse_buf(const char *s, buf_spec *b)
{
    const char *c1 = strchr(s, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL, *p;
    uint64_t n = 1;
    if (c1 == NULL || c2 == NULL)
        return die("--buf '%s': expected DTYPE:SHAPE:in|out", s);
    if (at_dtype_parse(s, (size_t)(c1 - s), &b->dt) != AT_OK)
        return die("--buf '%s': unknown dtype '%.*s'", s, (int)(c1 - s), s);
    if (strcmp(c2 + 1, "in") == 0)
        b->is_out = 0;
    else if (strcmp(c2 + 1, "out") == 0)
        b->is_out = 1;
    else
        return die("--buf '%s': the last part must be 'in' or 'out', not '%s'", s, c2 + 1);
    p = c1 + 1;
    if (p == c2)
        return die("--buf '%s': empty shape", s);
    while (p < c2) {
        uint64_t d = 0;
        const char *q = p;
        while (q < c2 && *q >= '0' && *q <= '9') {
            d = d * 10 + (uint64_t)(*q - '0');
            if (d > MAX_BYTES)
                return die("--buf '%s': dimension too large", s);
            q++;
        }
        if (q == p || d == 0 || (q < c2 && *q != 'x') || (q + 1 == c2 && *q == 'x'))
            return die("--buf '%s': bad shape '%.*s' (positive dimensions joined by 'x')", s,
                       (int)(c2 - c1 - 1), c1 + 1);
        n *= d;
        if (n * (uint64_t)at_dtype_bytes(b->dt) > MAX_BYTES)
            return die("--buf '%s': more than %llu bytes", s, (unsigned long long)MAX_BYTES);
        p = q < c2 ? q + 1 : q;
    }
    b->n_elems = (int64_t)n;
    b->n_bytes = (size_t)(n * (uint64_t)at_dtype_bytes(b->dt));
    return 0;
}

static int write_outputs(const char *path, const buf_spec *bufs, int n_bufs)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return die("--out %s: %s", path, strerror(errno));
    for (int i = 0; i < n_bufs; i++) {
        if (bufs[i].is_out && fwrite(bufs[i].p, 1, bufs[i].n_bytes, f) != bufs[i].n_bytes) {
            fclose(f);
            return die("--out %s: write failed: %s", path, strerror(errno));
        }
    }
    if (fclose(f) != 0)
        return die("--out %s: %s", path, strerror(errno));
    return 0;
}

static int time_kernel(kn_rt_kernel_fn fn, void **ptrs, void *ws, const kn_rt_par *par,
                       const buf_spec *bufs, int n_bufs, int repeat, const char *entry)
{
    kn_rt_time_opts o = {.number = 1, .repeat = repeat, .min_repeat_ms = 1.0,
                         .flush_cache = 1, .n_warmup = 1};
    size_t n_bytes[MAX_BUFS];
    double costs[1000];
    int32_t rc;
    at_err e;
    for (int i = 0; i < n_bufs; i++)
        n_bytes[i] = bufs[i].n_bytes;
    if ((e = kn_rt_time(fn, ptrs, ws, par, &o, n_bufs, n_bytes, costs, &rc)) != AT_OK)
        return die("timing failed: %s", at_strerror(e));
    if (rc != 0) {
        fprintf(stderr, "kn_rt_run: kernel '%s' returned %d while timed\n", entry, (int)rc);
        return EXIT_KERNEL;
    }
    printf("cost_s");
    for (int i = 0; i < repeat; i++)
        printf(" %.9g", costs[i]);
    printf("\n");
    return 0;
}

static int run(int argc, char **argv, buf_spec *bufs, int *n_bufs, kn_rt_module **mod,
               kn_rt_pool **pool, void **ws)
{
    const char *obj_path = NULL, *entry = NULL, *out_path = NULL;
    uint64_t threads = 1, seed = 0, ws_bytes = 0, repeat = 0;
    char *obj = NULL, err[512];
    size_t obj_n = 0;
    void *ptrs[MAX_BUFS + 1];
    kn_rt_kernel_fn fn;
    int32_t rc;
    at_err e;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(a, "--threads") == 0) {
            bad = parse_num(a, v, 0, 1024, &threads);
            i++;
        } else if (strcmp(a, "--seed") == 0) {
            bad = parse_num(a, v, 0, UINT64_MAX, &seed);
            i++;
        } else if (strcmp(a, "--time") == 0) {
            bad = parse_num(a, v, 1, 1000, &repeat);
            i++;
        } else if (strcmp(a, "--ws") == 0) {
            bad = parse_num(a, v, 0, MAX_BYTES, &ws_bytes);
            i++;
        } else if (strcmp(a, "--buf") == 0) {
            if (v == NULL)
                return die("--buf needs a value");
            if (*n_bufs == MAX_BUFS)
                return die("more than %d buffers", MAX_BUFS);
            bad = parse_buf(v, &bufs[*n_bufs]);
            (*n_bufs)++;
            i++;
        } else if (strcmp(a, "--out") == 0) {
            if (v == NULL)
                return die("--out needs a file name");
            out_path = v;
            i++;
        } else if (a[0] == '-' && a[1] != 0) {
            usage(stderr);
            return die("unknown option '%s'", a);
        } else if (obj_path == NULL) {
            obj_path = a;
        } else if (entry == NULL) {
            entry = a;
        } else {
            return die("unexpected argument '%s'", a);
        }
        if (bad)
            return bad;
    }
    if (obj_path == NULL || entry == NULL) {
        usage(stderr);
        return die("need an object file and an entry symbol");
    }

    if (at_file_read(obj_path, &obj, &obj_n, err, sizeof err) != AT_OK)
        return die("%s", err);
    e = kn_rt_module_load(obj, obj_n, NULL, mod, err, sizeof err);
    at_free(obj);
    if (e != AT_OK)
        return die("cannot load %s: %s (%s)", obj_path, err, at_errname(e));
    if ((fn = (kn_rt_kernel_fn)kn_rt_module_sym(*mod, entry)) == NULL)
        return die("%s defines no global symbol '%s'", obj_path, entry);

    for (int i = 0; i < *n_bufs; i++) {
        if ((bufs[i].p = kn_rt_alloc(bufs[i].n_bytes)) == NULL)
            return die("out of memory for buffer %d (%zu bytes)", i, bufs[i].n_bytes);
        if (!bufs[i].is_out)
            kn_rt_fill(bufs[i].p, bufs[i].dt, bufs[i].n_elems, seed, (uint32_t)i);
        ptrs[i] = bufs[i].p;
    }
    ptrs[*n_bufs] = NULL;
    if (ws_bytes && (*ws = kn_rt_alloc((size_t)ws_bytes)) == NULL)
        return die("out of memory for the workspace (%llu bytes)",
                   (unsigned long long)ws_bytes);
    if ((e = kn_rt_pool_new((int)threads, pool)) != AT_OK)
        return die("cannot start %llu threads: %s", (unsigned long long)threads,
                   at_strerror(e));

    rc = fn(ptrs, *ws, kn_rt_pool_par(*pool));
    if (rc != 0) {
        fprintf(stderr, "kn_rt_run: kernel '%s' returned %d\n", entry, (int)rc);
        return EXIT_KERNEL;
    }
    if (out_path && write_outputs(out_path, bufs, *n_bufs) != 0)
        return EXIT_USAGE;
    if (repeat)
        return time_kernel(fn, ptrs, *ws, kn_rt_pool_par(*pool), bufs, *n_bufs, (int)repeat,
                           entry);
    return 0;
}

int main(int argc, char **argv)
{
    buf_spec bufs[MAX_BUFS];
    int n_bufs = 0, status;
    kn_rt_module *mod = NULL;
    kn_rt_pool *pool = NULL;
    void *ws = NULL;

    memset(bufs, 0, sizeof bufs);
    status = run(argc, argv, bufs, &n_bufs, &mod, &pool, &ws);
    kn_rt_pool_free(pool);
    for (int i = 0; i < n_bufs; i++)
        kn_rt_free(bufs[i].p);
    kn_rt_free(ws);
    kn_rt_module_free(mod);
    return status;
}
