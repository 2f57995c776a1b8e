/* tests/tools/lib_run.c -- a C program calling an exported model library the way users do:
** dlopen, P_set_threads, P_model_run on inputs it fills, timed.
**
**   lib_run LIB.so [--threads N] [--repeat N] [--warmup N] [--seed S] [--dump DIR]
**                  [--inputs DIR] [--dim NAME=V]... [--latencies FILE]
**
** The inputs are filled as 'tuner run' fills float inputs (kn_rt_fill, the same seed,
** stream = the input's position), so the outputs it dumps (output_<i>.bin) can be compared
** with 'tuner run --dump'; --inputs reads them from DIR/input_<i>.bin instead ('tuner run
** --dump' writes them: int64 token ids too, told apart by their size).  --dim sets a
** symbolic dimension first (P_model_set_dim: the library runs that length on a bucket).
** Prints "latency: X ms (median of N runs)" and the number of weight transforms the
** library made (P_n_weight_transforms) after the warm-up and at the end; --latencies
** writes every timed run's milliseconds, one per line. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "kernels/kernels_rt.h"

typedef int32_t (*model_run_fn)(const float *const *, float *const *);

static void *sym(void *h, const char *prefix, const char *name)
{
    char s[256];
    void *p;
    snprintf(s, sizeof s, "%s_%s", prefix, name);
    if ((p = dlsym(h, s)) == NULL) {
        fprintf(stderr, "lib_run: the library has no %s\n", s);
        exit(1);
    }
    return p;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const char *lib = NULL, *dump = NULL, *inputs = NULL, *lat_path = NULL, *dimv[16];
    int n_dimv = 0;
    int threads = 1, repeat = 20, warmup = 5;
    long long seed = 1;
    char prefix[128], full[4096];
    void *h;
    int n_in, n_out, (*n_inputs)(void), (*n_outputs)(void), (*set_threads)(int),
        (*n_transforms)(void);
    long long (*in_size)(int), (*out_size)(int);
    model_run_fn run;
    float **ins, **outs;
    double *t;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc)
            repeat = atoi(argv[++i]);
        else if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc)
            warmup = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
            seed = atoll(argv[++i]);
        else if (strcmp(argv[i], "--dump") == 0 && i + 1 < argc)
            dump = argv[++i];
        else if (strcmp(argv[i], "--inputs") == 0 && i + 1 < argc)
            inputs = argv[++i];
        else if (strcmp(argv[i], "--latencies") == 0 && i + 1 < argc)
            lat_path = argv[++i];
        else if (strcmp(argv[i], "--dim") == 0 && i + 1 < argc && n_dimv < 16)
            dimv[n_dimv++] = argv[++i];
        else if (argv[i][0] != '-' && lib == NULL)
            lib = argv[i];
        else {
            fprintf(stderr, "usage: lib_run LIB.so [--threads N] [--repeat N] [--warmup N] "
                            "[--seed S] [--dump DIR] [--inputs DIR] [--dim NAME=V]... "
                            "[--latencies FILE]\n");
            return 2;
        }
    }
    if (lib == NULL || repeat < 1 || warmup < 0 || threads < 1) {
        fprintf(stderr, "usage: lib_run LIB.so [--threads N] [--repeat N] [--warmup N] "
                        "[--seed S] [--dump DIR]\n");
        return 2;
    }
    {
        /* the prefix: the file name without "lib" and ".so" (tuner export-lib's rule) */
        const char *b = strrchr(lib, '/');
        size_t k = 0;
        b = b ? b + 1 : lib;
        if (strncmp(b, "lib", 3) == 0 && b[3])
            b += 3;
        if (b[0] >= '0' && b[0] <= '9')
            k = (size_t)snprintf(prefix, sizeof prefix, "m_");
        for (; *b && *b != '.' && k + 1 < sizeof prefix; b++)
            prefix[k++] = ((*b >= 'a' && *b <= 'z') || (*b >= 'A' && *b <= 'Z') ||
                           (*b >= '0' && *b <= '9')) ? *b : '_';
        prefix[k] = 0;
    }
    if (realpath(lib, full) == NULL || (h = dlopen(full, RTLD_NOW | RTLD_LOCAL)) == NULL) {
        fprintf(stderr, "lib_run: cannot load %s: %s\n", lib, dlerror());
        return 1;
    }
    n_inputs = (int (*)(void))sym(h, prefix, "model_n_inputs");
    n_outputs = (int (*)(void))sym(h, prefix, "model_n_outputs");
    in_size = (long long (*)(int))sym(h, prefix, "model_input_size");
    out_size = (long long (*)(int))sym(h, prefix, "model_output_size");
    set_threads = (int (*)(int))sym(h, prefix, "set_threads");
    n_transforms = (int (*)(void))sym(h, prefix, "n_weight_transforms");
    run = (model_run_fn)sym(h, prefix, "model_run");
    for (int i = 0; i < n_dimv; i++) {
        int (*set_dim)(const char *, long long) =
            (int (*)(const char *, long long))sym(h, prefix, "model_set_dim");
        char name[64];
        const char *eq = strchr(dimv[i], '=');
        if (eq == NULL || eq - dimv[i] >= (long)sizeof name) {
            fprintf(stderr, "lib_run: --dim %s: NAME=V\n", dimv[i]);
            return 2;
        }
        snprintf(name, sizeof name, "%.*s", (int)(eq - dimv[i]), dimv[i]);
        if (set_dim(name, atoll(eq + 1)) != 0) {
            fprintf(stderr, "lib_run: the library refuses %s\n", dimv[i]);
            return 1;
        }
    }
    n_in = n_inputs();
    n_out = n_outputs();
    ins = calloc((size_t)n_in + 1, sizeof *ins);
    outs = calloc((size_t)n_out + 1, sizeof *outs);
    t = calloc((size_t)repeat, sizeof *t);
    if (ins == NULL || outs == NULL || t == NULL)
        return 1;
    for (int i = 0; i < n_in; i++) {
        if (inputs) {
            char path[4096], err[512], *data;
            size_t n;
            snprintf(path, sizeof path, "%s/input_%d.bin", inputs, i);
            if (at_file_read(path, &data, &n, err, sizeof err) != AT_OK) {
                fprintf(stderr, "lib_run: %s\n", err);
                return 1;
            }
            if (n != (size_t)in_size(i) * 4 && n != (size_t)in_size(i) * 8) {
                fprintf(stderr, "lib_run: %s: %zu bytes, but input %d has %lld elements\n",
                        path, n, i, in_size(i));
                return 1;
            }
            ins[i] = (float *)data;
            continue;
        }
        if ((ins[i] = malloc((size_t)in_size(i) * sizeof(float) + 1)) == NULL)
            return 1;
        kn_rt_fill(ins[i], AT_DT_F32, in_size(i), (uint64_t)seed, (uint32_t)i);
    }
    for (int i = 0; i < n_out; i++)
        if ((outs[i] = malloc((size_t)out_size(i) * sizeof(float) + 1)) == NULL)
            return 1;
    if (set_threads(threads) != 0) {
        fprintf(stderr, "lib_run: the library cannot run %d threads\n", threads);
        return 1;
    }
    for (int r = 0; r < warmup + repeat; r++) {
        double t0 = at_time_mono_s();
        int32_t rc = run((const float *const *)ins, outs);
        if (rc != 0) {
            fprintf(stderr, "lib_run: model_run returned %d\n", (int)rc);
            return 1;
        }
        if (r == 0)
            printf("weight transforms after the first run: %d\n", n_transforms());
        if (r >= warmup)
            t[r - warmup] = at_time_mono_s() - t0;
    }
    if (lat_path) {
        FILE *f = fopen(lat_path, "w");
        for (int r = 0; f && r < repeat; r++)
            fprintf(f, "%.6f\n", t[r] * 1e3);
        if (f == NULL || fclose(f) != 0) {
            fprintf(stderr, "lib_run: cannot write %s\n", lat_path);
            return 1;
        }
    }
    qsort(t, (size_t)repeat, sizeof *t, cmp_d);
    printf("latency: %.3f ms (median of %d runs, %d threads)\n",
           (repeat % 2 ? t[repeat / 2] : (t[repeat / 2 - 1] + t[repeat / 2]) / 2) * 1e3, repeat,
           threads);
    printf("weight transforms in all: %d\n", n_transforms());
    for (int i = 0; dump && i < n_out; i++) {
        char path[4096], err[256];
        snprintf(path, sizeof path, "%s/output_%d.bin", dump, i);
        if (at_file_write(path, outs[i], (size_t)out_size(i) * sizeof(float), err, sizeof err) !=
            AT_OK) {
            fprintf(stderr, "lib_run: %s\n", err);
            return 1;
        }
    }
    return 0;
}
