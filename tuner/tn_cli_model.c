/* tuner/tn_cli_model.c -- the subcommands over whole models: tasks, run and export-lib
** (docs/models.md, docs/cli.md).
**
** A MODEL argument is an ONNX file, or (for tasks and export-lib) a task list written by
** 'tuner tasks -o' (a file whose name ends in .jsonl), so that a library can be built on
** another machine from the tasks alone. */
#include "tuner/tuner_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "records/records.h"

#define DEFAULT_DB "tuning.db"

static int one_positional(const tn_cmd *cmd, int n_pos, char **argv, const char *what)
{
    if (n_pos == 1)
        return TN_EXIT_OK;
    if (n_pos == 0)
        tn__err(cmd, "missing %s (see 'tuner %s --help')", what, cmd->name);
    else
        tn__err(cmd, "unexpected argument '%s' (one %s only)", argv[2], what);
    return TN_EXIT_USAGE;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

int tn__parse_layout(const tn_cmd *cmd, const char *s, int *layout)
{
    *layout = MD_LAYOUT_NHWC;
    if (s == NULL || strcasecmp(s, "nhwc") == 0)
        return 0;
    if (strcasecmp(s, "nchw") == 0) {
        *layout = MD_LAYOUT_NCHW;
        return 0;
    }
    tn__err(cmd, "--layout must be nhwc or nchw, not '%s'", s);
    return -1;
}

int tn__parse_winograd(const tn_cmd *cmd, const char *s, int *mode)
{
    *mode = MD_WINOGRAD_AUTO;
    if (s == NULL || strcasecmp(s, "auto") == 0)
        return 0;
    if (strcasecmp(s, "on") == 0) {
        *mode = MD_WINOGRAD_ON;
        return 0;
    }
    if (strcasecmp(s, "off") == 0) {
        *mode = MD_WINOGRAD_OFF;
        return 0;
    }
    tn__err(cmd, "--winograd must be auto, on or off, not '%s'", s);
    return -1;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The buckets of a range LO..HI: multiples of 16 (one AVX-512 register of floats, four
** of NEON), each at most 1.25 times the one before where a step of 16 allows it (a request
** pads by at most 25 % above 64), the first LO rounded up to 16 (HI where that is above
** it), the last HI.  16..256: 16 32 48 64 80 96 112 128 160 192 240 256. */
int tn__dim_range(int64_t lo, int64_t hi, int64_t *out, int max)
{
    int n = 0;
    int64_t b = (lo + 15) / 16 * 16;
    if (b > hi)
        b = hi;
    while (n < max) {
        int64_t next;
        out[n++] = b;
        if (b >= hi)
            break;
        next = b + b / 4;
        next -= next % 16;
        if (next < b + 16)
            next = b + 16;
        b = next < hi ? next : hi;
    }
    return n;
}

int tn__parse_dims(const tn_cmd *cmd, const at_opt_list *l, tn_dims *d)
{
    memset(d, 0, sizeof *d);
    d->dflt = 1;
    d->multi = -1;
    for (int i = 0; i < l->n; i++) {
        const char *v = l->v[i], *eq = strchr(v, '=');
        int k;
        if (eq == NULL) {
            if (at_parse_i64(v, &d->dflt) != AT_OK || d->dflt < 1) {
                tn__err(cmd, "--dim %s: give a whole number >= 1, or NAME=V for a named "
                        "dimension (seq=128; seq=32,64,128 for buckets)", v);
                return -1;
            }
            continue;
        }
        if (eq == v || (size_t)(eq - v) >= sizeof d->name[0]) {
            tn__err(cmd, "--dim %s: the dimension's name is missing or too long", v);
            return -1;
        }
        for (k = 0; k < d->n; k++)
            if (strlen(d->name[k]) == (size_t)(eq - v) && strncmp(d->name[k], v, (size_t)(eq - v)) == 0)
                break;
        if (k < d->n) {
            tn__err(cmd, "--dim %s: '%.*s' is given twice", v, (int)(eq - v), v);
            return -1;
        }
        if (d->n == TN_MAX_DIMS) {
            tn__err(cmd, "--dim: more than %d named dimensions", TN_MAX_DIMS);
            return -1;
        }
        snprintf(d->name[k], sizeof d->name[k], "%.*s", (int)(eq - v), v);
        for (const char *p = eq + 1;;) {
            char num[48], *dots;
            size_t len = strcspn(p, ",");
            int64_t x, hi, b[TN_MAX_BUCKETS + 1];
            int nb = 0;
            snprintf(num, sizeof num, "%.*s", (int)(len < 47 ? len : 47), p);
            if ((dots = strstr(num, "..")) != NULL) {
                /* a range: the buckets tn__dim_range chooses */
                *dots = 0;
                if (len > 42 || at_parse_i64(num, &x) != AT_OK || at_parse_i64(dots + 2, &hi) != AT_OK ||
                    x < 1 || hi < x) {
                    tn__err(cmd, "--dim %s: '%.*s' is not a range LO..HI of whole numbers, 1 <= LO "
                            "<= HI", v, (int)len, p);
                    return -1;
                }
                nb = tn__dim_range(x, hi, b, TN_MAX_BUCKETS + 1);
            } else if (len == 0 || len > 20 || at_parse_i64(num, &x) != AT_OK || x < 1) {
                tn__err(cmd, "--dim %s: '%.*s' is not a whole number >= 1", v, (int)len, p);
                return -1;
            } else {
                b[nb++] = x;
            }
            for (int j = 0; j < nb; j++) {
                if (d->n_values[k] == TN_MAX_BUCKETS) {
                    tn__err(cmd, "--dim %s: more than %d values", v, TN_MAX_BUCKETS);
                    return -1;
                }
                d->values[k][d->n_values[k]++] = b[j];
            }
            if (p[len] == 0)
                break;
            p += len + 1;
        }
        qsort(d->values[k], (size_t)d->n_values[k], sizeof d->values[k][0], cmp_i64);
        for (int j = 1; j < d->n_values[k]; j++)
            if (d->values[k][j] == d->values[k][j - 1]) {
                tn__err(cmd, "--dim %s: %lld is given twice", v, (long long)d->values[k][j]);
                return -1;
            }
        if (d->n_values[k] > 1) {
            if (d->multi >= 0) {
                tn__err(cmd, "--dim %s: only one dimension may have several values (buckets); "
                        "'%s' has them already", v, d->name[d->multi]);
                return -1;
            }
            d->multi = k;
        }
        d->n = k + 1;
    }
    return 0;
}

int tn__dims_at(const tn_dims *d, int b, md_dim *out)
{
    for (int k = 0; k < d->n; k++) {
        out[k].name = d->name[k];
        out[k].value = k == d->multi ? d->values[k][b] : d->values[k][0];
    }
    return d->n;
}

/* --layout and --winograd checked before anything is loaded: TN_EXIT_USAGE when wrong. */
static int check_flags(const tn_cmd *cmd, const char *layout, const char *wino)
{
    int x;
    return tn__parse_layout(cmd, layout, &x) != 0 || tn__parse_winograd(cmd, wino, &x) != 0
               ? TN_EXIT_USAGE
               : TN_EXIT_OK;
}

/* How to load: the flags, and the costs of the Winograd choice (NULL: none). */
typedef struct load_how {
    const tn_dims *dims;   /* NULL: every symbolic dimension 1 */
    int bucket;            /* the value of dims->multi's list to load at */
    const char *layout, *winograd;
    md_task_cost_fn cost;
    void *cost_ctx;
} load_how;

static void print_warnings(const tn_cmd *cmd, const md_model *m)
{
    for (int i = 0; i < md_model_n_warnings(m); i++)
        tn__err(cmd, "warning: %s", md_model_warning(m, i));
}

/* Load a model and print its warnings; NULL after printing the error. */
static md_model *load_model(const tn_cmd *cmd, const char *path, const load_how *how, int quiet)
{
    md_model *m;
    md_dim dims[TN_MAX_DIMS];
    md_model_opts o = {.dim_default = how->dims ? how->dims->dflt : 1, .cost = how->cost,
                       .cost_ctx = how->cost_ctx, .dims = dims};
    char err[1024];
    if (how->dims)
        o.n_dims = tn__dims_at(how->dims, how->bucket, dims);
    if (tn__parse_layout(cmd, how->layout, &o.layout) != 0 ||
        tn__parse_winograd(cmd, how->winograd, &o.winograd) != 0)
        return NULL;
    if (md_model_load(path, &o, &m, err, sizeof err) != AT_OK) {
        tn__err(cmd, "%s", err);
        return NULL;
    }
    for (int i = 0; i < md_model_n_warnings(m) && !quiet; i++)
        tn__err(cmd, "warning: %s", md_model_warning(m, i));
    return m;
}

static md_task_list *load_task_file(const tn_cmd *cmd, const char *path)
{
    char *data, err[1024];
    size_t n;
    md_task_list *tl;
    const char *base = strrchr(path, '/');
    if (at_file_read(path, &data, &n, err, sizeof err) != AT_OK) {
        tn__err(cmd, "%s", err);
        return NULL;
    }
    if (md_tasks_read_jsonl(base ? base + 1 : path, data, n, &tl, err, sizeof err) != AT_OK) {
        tn__err(cmd, "%s", err);
        tl = NULL;
    }
    at_free(data);
    return tl;
}

#define LAYOUT_HELP "convolutions' layout: nhwc (default) or nchw (the model's own)"
#define WINOGRAD_HELP "3x3 stride-1 convolutions as Winograd: auto (default: where the " \
    "records measured it faster), on or off"

/* ---- tasks ---- */

static void print_tasks(FILE *f, const md_task_list *tl, int verbose)
{
    fprintf(f, "%4s  %-12s %6s %12s  %-20s %s\n", "task", "key", "weight", "MFLOPs", "tag",
            "name and shapes");
    for (int i = 0; i < tl->n_tasks; i++) {
        const md_task *t = &tl->tasks[i];
        fprintf(f, "%4d  %-12.12s %6d %12.3f  %-20s %s%s\n", i, t->key, t->weight,
                t->flops / 1e6, t->tag, t->name, t->tunable ? "" : " (not tuned: no reduction)");
        fprintf(f, "%4s  %-12s %6s %12s  %-20s %s\n", "", "", "", "", "", t->desc);
        if (!verbose)
            continue;
        fprintf(f, "      key %s\n", t->key);
        for (int u = 0; u < t->n_uses; u++) {
            fprintf(f, "      use %d:", u + 1);
            for (int k = 0; k < t->uses[u].n_nodes; k++)
                fprintf(f, " %s", t->uses[u].nodes[k]);
            fputc('\n', f);
        }
        fprintf(f, "      DAG:\n");
        for (const char *p = t->dag_text; *p;) {
            const char *e = strchr(p, '\n');
            int len = e ? (int)(e - p) : (int)strlen(p);
            fprintf(f, "        %.*s\n", len, p);
            p += len + (e != NULL);
        }
    }
}

static int write_jsonl(const tn_cmd *cmd, const md_task_list *tl, const char *path)
{
    char *buf = NULL, err[512];
    size_t n = 0;
    FILE *mem;
    at_err e;
    if (strcmp(path, "-") == 0) {
        if (md_tasks_write_jsonl(tl, stdout) != AT_OK) {
            tn__err(cmd, "write error on standard output");
            return TN_EXIT_FAIL;
        }
        return TN_EXIT_OK;
    }
    if ((mem = open_memstream(&buf, &n)) == NULL) {
        tn__err(cmd, "out of memory");
        return TN_EXIT_FAIL;
    }
    e = md_tasks_write_jsonl(tl, mem);
    fclose(mem);
    if (e == AT_OK)
        e = at_file_write(path, buf, n, err, sizeof err);
    else
        snprintf(err, sizeof err, "%s", at_strerror(e));
    free(buf);
    if (e != AT_OK) {
        tn__err(cmd, "%s", err);
        return TN_EXIT_FAIL;
    }
    return TN_EXIT_OK;
}

int tn__cmd_tasks(const tn_cmd *cmd, int argc, char **argv)
{
    const char *out = NULL, *layout = NULL, *wino = NULL;
    int verbose = 0, quiet = 0, n_pos, done, rc;
    at_opt_list dim_l = {0};
    tn_dims dims;
    const at_opt opts[] = {
        {"out", 'o', AT_OPT_STR, &out, "FILE", "write the tasks as JSON lines ('-': stdout)"},
        {"verbose", 'v', AT_OPT_BOOL, &verbose, NULL, "also the nodes of each use and the DAG"},
        {"dim", 0, AT_OPT_LIST, &dim_l, "D", "symbolic input dimensions: " TN_DIM_HELP
         "; NAME=V,V,... lists each bucket's tasks" TN_DIM_RANGE_HELP},
        {"layout", 0, AT_OPT_STR, &layout, "L", LAYOUT_HELP},
        {"winograd", 0, AT_OPT_STR, &wino, "W", "auto (default: the Winograd tasks listed "
         "after the model's), on or off"},
        {"quiet", 'q', AT_OPT_BOOL, &quiet, NULL, "no table (with -o) and no warnings"},
    };
    md_model *m = NULL;
    md_task_list *own = NULL;
    const md_task_list *tl;
    rc = tn__opts_cmd(NULL, cmd, opts, (int)AT_ARRAY_LEN(opts), argc, argv, &n_pos, &done);
    if (done)
        return rc;
    if ((rc = one_positional(cmd, n_pos, argv, "model file")) != TN_EXIT_OK ||
        (rc = check_flags(cmd, layout, wino)) != TN_EXIT_OK)
        return rc;
    if (tn__parse_dims(cmd, &dim_l, &dims) != 0)
        return TN_EXIT_USAGE;
    if (dims.multi >= 0 && out) {
        tn__err(cmd, "-o writes the tasks of one size: give --dim %s one value (each bucket's "
                "tasks are tuned together by 'tuner --dim %s=...')", dims.name[dims.multi],
                dims.name[dims.multi]);
        return TN_EXIT_USAGE;
    }
    if (dims.multi >= 0 && !ends_with(argv[1], ".jsonl")) {
        /* each bucket's table in turn */
        for (int b = 0; b < dims.n_values[dims.multi]; b++) {
            if ((m = load_model(cmd, argv[1], &(load_how){.dims = &dims, .bucket = b,
                                .layout = layout, .winograd = wino}, quiet || b > 0)) == NULL)
                return TN_EXIT_FAIL;
            tl = md_model_tasks(m);
            printf("%sbucket %s=%lld: %d tasks, %.3f MFLOPs per run\n", b ? "\n" : "",
                   dims.name[dims.multi], (long long)dims.values[dims.multi][b], tl->n_tasks,
                   md_task_list_flops(tl) / 1e6);
            print_tasks(stdout, tl, verbose);
            md_model_free(m);
        }
        return TN_EXIT_OK;
    }
    if (ends_with(argv[1], ".jsonl")) {
        if ((own = load_task_file(cmd, argv[1])) == NULL)
            return TN_EXIT_FAIL;
        tl = own;
        printf("tasks %s: %d tasks, %.3f MFLOPs per run of the model\n", argv[1], tl->n_tasks,
               md_task_list_flops(tl) / 1e6);
    } else {
        md_model_info info;
        int n_tunable = 0;
        if ((m = load_model(cmd, argv[1], &(load_how){.dims = &dims, .layout = layout,
                                                      .winograd = wino}, quiet)) == NULL)
            return TN_EXIT_FAIL;
        tl = md_model_tasks(m);
        md_model_get_info(m, &info);
        for (int i = 0; i < tl->n_tasks; i++)
            n_tunable += tl->tasks[i].tunable;
        double flops = 0;
        for (int i = 0; i < tl->n_tasks - info.n_alt_tasks; i++)
            flops += tl->tasks[i].flops * tl->tasks[i].weight;
        if (!(quiet && out))
            printf("model %s (opset %lld%s%s): %d nodes, %d tasks (%d tunable), %.3f MFLOPs "
                   "per run%s\n", argv[1], (long long)info.opset, info.producer[0] ? ", " : "",
                   info.producer, info.n_nodes, tl->n_tasks, n_tunable, flops / 1e6,
                   info.n_unsupported ? " (unsupported nodes left out: see the warnings)" : "");
        if (!(quiet && out) && info.n_alt_tasks)
            printf("winograd: the last %d tasks are the Winograd alternatives of %d 3x3 "
                   "convolutions, tuned beside the direct ones (run and export-lib take "
                   "whichever measured faster)\n", info.n_alt_tasks, info.n_winograd_eligible);
        else if (!(quiet && out) && info.n_winograd)
            printf("winograd: %d of %d eligible 3x3 convolutions run as Winograd\n",
                   info.n_winograd, info.n_winograd_eligible);
    }
    if (!(quiet && out))
        print_tasks(stdout, tl, verbose);
    rc = out ? write_jsonl(cmd, tl, out) : TN_EXIT_OK;
    md_model_free(m);
    md_task_list_free(own);
    return rc;
}

/* ---- run ---- */

/* The records store for reading: --db, else ./tuning.db when it exists, else none. */
static int open_db(const tn_cmd *cmd, const char *db, rec_store **st)
{
    char err[1024];
    *st = NULL;
    if (db == NULL) {
        if (access(DEFAULT_DB, R_OK) != 0) {
            tn__err(cmd, "note: no records store (--db; ./%s does not exist): every task gets "
                   "its naive schedule", DEFAULT_DB);
            return TN_EXIT_OK;
        }
        db = DEFAULT_DB;
    }
    if (rec_store_open(db, REC_OPEN_READONLY, st, err, sizeof err) != AT_OK) {
        tn__err(cmd, "%s", err);
        return TN_EXIT_FAIL;
    }
    return TN_EXIT_OK;
}

static int cmp_ms(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The buckets of each symbolic dimension of model *m (loaded at the dimensions asked for):
** from the library, else recorded in the store for the model's structure.  A dimension not
** given with --dim runs at its largest bucket (the model is loaded again at it); one given
** below a bucket runs on the smallest bucket above it: *m becomes the model loaded at the
** buckets and *exact the one at the dimensions asked for (its inputs padded, docs/models.md).
** 0, or -1 after a message. */
static int choose_bucket(const tn_cmd *cmd, const char *path, rec_store *st,
                         md_lib_keys *keys, const tn_dims *dims, md_model **m,
                         md_model **exact, const load_how *how)
{
    tn_dims at = *dims, bk = *dims; /* the dimensions to run at, and the buckets' */
    int reload = 0, pad = 0;
    char note[512] = "";
    size_t L = 0;
    *exact = NULL;
    for (int k = 0; k < md_model_n_dims(*m); k++) {
        const char *name = md_model_dim_name(*m, k);
        int64_t v[TN_MAX_BUCKETS], want = md_model_dim_value(*m, k), b;
        int n = 0, given = 0, j;
        if (keys)
            md_lib_buckets(keys, name, v, TN_MAX_BUCKETS, &n);
        else if (st && rec_buckets_get(st, md_model_sig(*m), name, v, TN_MAX_BUCKETS, &n) != AT_OK) {
            tn__err(cmd, "%s", rec_store_errmsg(st));
            return -1;
        }
        if (n > TN_MAX_BUCKETS)
            n = TN_MAX_BUCKETS;
        if (n == 0)
            continue;
        for (j = 0; j < dims->n; j++)
            given |= strcmp(dims->name[j], name) == 0;
        if (!given) {
            want = v[n - 1];
            reload = 1;
        }
        if (want > v[n - 1]) {
            tn__err(cmd, "%s=%lld is above the largest bucket this model was %s for (%lld): "
                    "tune it with --dim %s=...,%lld", name, (long long)want,
                    keys ? "exported" : "tuned", (long long)v[n - 1], name, (long long)want);
            return -1;
        }
        for (j = 0; v[j] < want; j++)
            ;
        b = v[j];
        /* both dimension sets name it with its value */
        for (j = 0; j < at.n && strcmp(at.name[j], name) != 0; j++)
            ;
        if (j == at.n && at.n == TN_MAX_DIMS)
            continue;
        if (j == at.n) {
            snprintf(at.name[j], sizeof at.name[j], "%s", name);
            snprintf(bk.name[j], sizeof bk.name[j], "%s", name);
            at.n++, bk.n++;
        }
        at.n_values[j] = bk.n_values[j] = 1;
        at.values[j][0] = want;
        bk.values[j][0] = b;
        pad |= b != want;
        L += (size_t)snprintf(note + L, L < sizeof note ? sizeof note - L : 0,
                              "%s%s=%lld on bucket %lld (of", L ? "; " : "", name,
                              (long long)want, (long long)b);
        for (j = 0; j < n; j++)
            L += (size_t)snprintf(note + L, L < sizeof note ? sizeof note - L : 0, " %lld",
                                  (long long)v[j]);
        L += (size_t)snprintf(note + L, L < sizeof note ? sizeof note - L : 0, ")");
    }
    if (note[0])
        printf("dimensions: %s%s\n", note, pad ? "; inputs padded with zeros to the bucket, "
               "outputs cut back" : "");
    if (reload) {
        load_how h = *how;
        md_model_free(*m);
        h.dims = &at;
        if ((*m = load_model(cmd, path, &h, 1)) == NULL)
            return -1;
    }
    if (pad) {
        load_how h = *how;
        h.dims = &bk;
        *exact = *m;
        if ((*m = load_model(cmd, path, &h, 1)) == NULL) {
            md_model_free(*exact);
            *exact = NULL;
            return -1;
        }
    }
    return 0;
}

int tn__cmd_run(const tn_cmd *cmd, int argc, char **argv)
{
    const char *db = NULL, *target = NULL, *device = NULL, *lib = NULL, *dump = NULL,
               *inputs = NULL, *layout = NULL, *wino = NULL, *histogram = NULL;
    int threads = 0, seed = 1, repeat = 0, no_check = 0, profile = 0, n_pos, done, rc;
    at_opt_list dim_l = {0};
    tn_dims dims;
    double *lat = NULL;
    const at_opt opts[] = {
        {"db", 0, AT_OPT_STR, &db, "FILE", "records store (default ./" DEFAULT_DB " if present)"},
        {"target", 0, AT_OPT_STR, &target, "T", "records of this target (default: this host)"},
        {"device", 0, AT_OPT_STR, &device, "KEY", "records of this device key (default: any)"},
        {"lib", 0, AT_OPT_STR, &lib, "FILE", "run the kernels of a library from export-lib"},
        {"threads", 0, AT_OPT_INT, &threads, "N", "threads (default: the online CPUs)"},
        {"seed", 0, AT_OPT_INT, &seed, "N", "seed of the input values (default 1)"},
        {"repeat", 0, AT_OPT_INT, &repeat, "N",
         "time N runs of the model: the median, and from 2 runs p50, p90, p99 and max"},
        {"histogram", 0, AT_OPT_STR, &histogram, "FILE",
         "draw the --repeat runs' latencies as a histogram (.png or .svg)"},
        {"no-check", 0, AT_OPT_BOOL, &no_check, NULL, "skip the naive run and the comparison"},
        {"dim", 0, AT_OPT_LIST, &dim_l, "D", "symbolic input dimensions: " TN_DIM_HELP
         "; a value below a tuned bucket runs on the bucket's kernels, padded"},
        {"dump", 0, AT_OPT_STR, &dump, "DIR", "write the inputs and outputs there (raw float32; "
                                               "int64 for integer inputs)"},
        {"inputs", 0, AT_OPT_STR, &inputs, "DIR", "read the inputs from DIR/input_<i>.bin (as "
                                                  "--dump writes them) instead of random values"},
        {"layout", 0, AT_OPT_STR, &layout, "L", LAYOUT_HELP},
        {"profile", 0, AT_OPT_BOOL, &profile, NULL, "each step's time and share of the run "
         "(over the --repeat runs, or 10)"},
        {"winograd", 0, AT_OPT_STR, &wino, "W", WINOGRAD_HELP " (with --lib: as the library "
         "was made)"},
    };
    md_model *m = NULL, *exact = NULL;
    rec_store *st = NULL;
    md_lib_keys *keys = NULL;
    md_run_report rep;
    md_model_info info;
    char err[1024];
    at_err e;
    rc = tn__opts_cmd(NULL, cmd, opts, (int)AT_ARRAY_LEN(opts), argc, argv, &n_pos, &done);
    if (done)
        return rc;
    if ((rc = one_positional(cmd, n_pos, argv, "model file")) != TN_EXIT_OK ||
        (rc = check_flags(cmd, layout, wino)) != TN_EXIT_OK)
        return rc;
    if (tn__parse_dims(cmd, &dim_l, &dims) != 0)
        return TN_EXIT_USAGE;
    if (dims.multi >= 0) {
        tn__err(cmd, "--dim %s: a run takes one value per dimension (the buckets it was tuned "
                "for are in the records store)", dims.name[dims.multi]);
        return TN_EXIT_USAGE;
    }
    if (repeat < 0) {
        tn__err(cmd, "--repeat must be 0 or more, not %d", repeat);
        return TN_EXIT_USAGE;
    }
    if (histogram) {
        size_t hl = strlen(histogram);
        if (repeat < 2) {
            tn__err(cmd, "--histogram needs --repeat N with N >= 2 (the runs it draws)");
            return TN_EXIT_USAGE;
        }
        if (hl <= 4 || (strcmp(histogram + hl - 4, ".png") != 0 &&
                        strcmp(histogram + hl - 4, ".svg") != 0)) {
            tn__err(cmd, "--histogram %s: the name must end in .png or .svg", histogram);
            return TN_EXIT_USAGE;
        }
    }
    if (repeat > 0 && (lat = at_calloc((size_t)repeat, sizeof *lat)) == NULL) {
        tn__err(cmd, "out of memory for %d runs", repeat);
        return TN_EXIT_FAIL;
    }
    if (lib == NULL && (rc = open_db(cmd, db, &st)) != TN_EXIT_OK) {
        at_free(lat);
        return rc;
    }
    if (lib && md_lib_keys_open(lib, &keys, err, sizeof err) != AT_OK) {
        tn__err(cmd, "%s", err);
        return TN_EXIT_FAIL;
    }
    {
        kn_target tgt;
        md_store_cost_ctx cc = {.store = st, .device_key = device};
        if ((target ? kn_target_parse(target, &tgt, err, sizeof err)
                    : kn_target_host(&tgt)) != AT_OK) {
            tn__err(cmd, "--target: %s", err);
            rec_store_close(st);
            md_lib_keys_close(keys);
            at_free(lat);
            return TN_EXIT_USAGE;
        }
        cc.target = tgt.text;
        load_how how = {.dims = &dims, .layout = layout, .winograd = wino,
                        .cost = keys ? md_lib_has_task : md_store_cost,
                        .cost_ctx = keys ? (void *)keys : (void *)&cc};
        /* the warnings of the model that runs: a dimension not given may load again */
        m = load_model(cmd, argv[1], &how, 1);
        if (m && choose_bucket(cmd, argv[1], st, keys, &dims, &m, &exact, &how) != 0) {
            md_model_free(m);
            m = NULL;
        }
        if (m)
            print_warnings(cmd, exact ? exact : m);
        md_lib_keys_close(keys);
    }
    if (m == NULL) {
        rec_store_close(st);
        at_free(lat);
        return TN_EXIT_FAIL;
    }
    md_model_get_info(m, &info);
    e = md_model_run(m, &(md_run_opts){.store = st, .target = target, .device_key = device,
                                       .lib_path = lib, .n_threads = threads,
                                       .seed = (uint64_t)seed, .repeat = repeat,
                                       .no_check = no_check, .dump_dir = dump,
                                       .inputs_dir = inputs,
                                       .profile = profile ? stdout : NULL,
                                       .latencies_s = lat, .exact = exact},
                     &rep, err, sizeof err);
    rec_store_close(st);
    md_model_free(exact);
    if (e != AT_OK) {
        tn__err(cmd, "%s", err[0] ? err : at_strerror(e));
        md_model_free(m);
        at_free(lat);
        return TN_EXIT_FAIL;
    }
    printf("model %s: %d tasks, ", argv[1], rep.n_tasks);
    if (lib)
        printf("kernels from %s\n", lib);
    else
        printf("%d with a tuned schedule, %d naive; kernels built in %.2f s\n", rep.n_tuned,
               rep.n_naive, rep.build_s);
    if (info.n_winograd_eligible)
        printf("winograd: %d of %d eligible 3x3 convolutions run as Winograd\n",
               info.n_winograd, info.n_winograd_eligible);
    for (int i = 0; i < rep.n_outputs; i++) {
        printf("output '%s' (%lld values): checksum %.9g", rep.outputs[i].name,
               (long long)rep.outputs[i].n_elems, rep.outputs[i].checksum);
        if (!no_check)
            printf(", max relative error %.3g against the naive lowering",
                   rep.outputs[i].rel_err);
        putchar('\n');
    }
    if (repeat > 0) {
        printf("latency: %.3f ms with %s", rep.latency_s * 1e3, lib ? "the library" : "these kernels");
        if (!no_check)
            printf(", %.3f ms naive", rep.naive_latency_s * 1e3);
        printf(" (median of %d runs", repeat);
        if (!no_check)
            printf("; naive: %d", AT_MIN(repeat, MD_RUN_NAIVE_REPEAT));
        printf(")\n");
    }
    if (repeat >= 2) {
        /* the distribution users compare (a server's tail, not only its median) */
        for (int i = 0; i < repeat; i++)
            lat[i] *= 1e3;
        qsort(lat, (size_t)repeat, sizeof *lat, cmp_ms);
        printf("latency distribution over %d runs: p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, "
               "max %.3f ms, min %.3f ms\n",
               repeat, tn__percentile(lat, repeat, 50), tn__percentile(lat, repeat, 90),
               tn__percentile(lat, repeat, 99), lat[repeat - 1], lat[0]);
        if (histogram) {
            char title[256];
            long nt = threads > 0 ? threads : sysconf(_SC_NPROCESSORS_ONLN);
            snprintf(title, sizeof title, "%.120s, %ld thread%s", argv[1], nt,
                     nt == 1 ? "" : "s");
            if (tn__plot_histogram(lat, repeat, title, histogram, err, sizeof err) != 0) {
                tn__err(cmd, "%s", err);
                md_model_free(m);
                at_free(lat);
                return TN_EXIT_FAIL;
            }
            printf("histogram of the %d runs written to %s\n", repeat, histogram);
        }
    }
    at_free(lat);
    md_model_free(m);
    if (!no_check && !(rep.max_rel_err <= 1e-4)) {
        printf("MISMATCH: max relative error %.3g exceeds 1e-4\n", rep.max_rel_err);
        return TN_EXIT_FAIL;
    }
    if (!no_check)
        printf("OK: the outputs match the naive lowering (max relative error %.3g <= 1e-4)\n",
               rep.max_rel_err);
    return TN_EXIT_OK;
}

/* ---- export-lib ---- */

int tn__cmd_export_lib(const tn_cmd *cmd, int argc, char **argv)
{
    const char *db = NULL, *target = NULL, *device = NULL, *out = NULL, *header = NULL,
               *prefix = NULL, *layout = NULL, *wino = NULL;
    int threads = 0, keep = 0, n_pos, done, rc, nb = 0;
    at_opt_list dim_l = {0};
    tn_dims dims;
    md_model *bm[TN_MAX_BUCKETS] = {0};
    md_task_list *uni = NULL;
    const at_opt opts[] = {
        {"db", 0, AT_OPT_STR, &db, "FILE", "records store (default ./" DEFAULT_DB " if present)"},
        {"target", 0, AT_OPT_STR, &target, "T", "compilation target (default: this host)"},
        {"device", 0, AT_OPT_STR, &device, "KEY", "records of this device key (default: any)"},
        {"out", 'o', AT_OPT_STR, &out, "FILE", "the library (e.g. libmodel_kernels.so)"},
        {"header", 0, AT_OPT_STR, &header, "FILE", "its header (default: FILE with .h)"},
        {"prefix", 0, AT_OPT_STR, &prefix, "NAME", "C names' prefix (default: from FILE)"},
        {"threads", 0, AT_OPT_INT, &threads, "N", "most threads the library may use (Linux; "
         "default: the target's cores)"},
        {"keep", 0, AT_OPT_BOOL, &keep, NULL, "keep the objects and the glue source"},
        {"dim", 0, AT_OPT_LIST, &dim_l, "D", "symbolic input dimensions: " TN_DIM_HELP
         "; NAME=V,V,... builds a bucket of each (default: the buckets the store recorded)"
         TN_DIM_RANGE_HELP},
        {"layout", 0, AT_OPT_STR, &layout, "L", LAYOUT_HELP},
        {"winograd", 0, AT_OPT_STR, &wino, "W", WINOGRAD_HELP},
    };
    md_model *m = NULL;
    md_task_list *own = NULL;
    const md_task_list *tl;
    rec_store *st = NULL;
    md_export_report rep;
    char err[1024];
    at_err e;
    rc = tn__opts_cmd(NULL, cmd, opts, (int)AT_ARRAY_LEN(opts), argc, argv, &n_pos, &done);
    if (done)
        return rc;
    if ((rc = one_positional(cmd, n_pos, argv, "model file")) != TN_EXIT_OK ||
        (rc = check_flags(cmd, layout, wino)) != TN_EXIT_OK)
        return rc;
    if (out == NULL) {
        tn__err(cmd, "missing -o FILE (the library to write)");
        return TN_EXIT_USAGE;
    }
    if (tn__parse_dims(cmd, &dim_l, &dims) != 0)
        return TN_EXIT_USAGE;
    if (ends_with(argv[1], ".jsonl")) {
        if ((own = load_task_file(cmd, argv[1])) == NULL)
            return TN_EXIT_FAIL;
        tl = own;
    }
    if ((rc = open_db(cmd, db, &st)) != TN_EXIT_OK)
        goto done;
    if (own == NULL) {
        kn_target tgt;
        md_store_cost_ctx cc = {.store = st, .device_key = device};
        if ((target ? kn_target_parse(target, &tgt, err, sizeof err)
                    : kn_target_host(&tgt)) != AT_OK) {
            tn__err(cmd, "--target: %s", err);
            rc = TN_EXIT_USAGE;
            goto done;
        }
        cc.target = tgt.text;
        load_how how = {.dims = &dims, .layout = layout, .winograd = wino,
                        .cost = md_store_cost, .cost_ctx = &cc};
        if ((m = load_model(cmd, argv[1], &how, 0)) == NULL) {
            rc = TN_EXIT_FAIL;
            goto done;
        }
        tl = md_model_tasks(m);
        /* the buckets: the values given for one dimension, else those the store recorded
        ** for a dimension not given */
        if (dims.multi < 0 && st) {
            for (int k = 0; k < md_model_n_dims(m) && dims.multi < 0; k++) {
                const char *name = md_model_dim_name(m, k);
                int given = 0, nv = 0;
                for (int j = 0; j < dims.n; j++)
                    given |= strcmp(dims.name[j], name) == 0;
                if (given || dims.n == TN_MAX_DIMS ||
                    rec_buckets_get(st, md_model_sig(m), name, dims.values[dims.n],
                                    TN_MAX_BUCKETS, &nv) != AT_OK || nv == 0)
                    continue;
                snprintf(dims.name[dims.n], sizeof dims.name[0], "%s", name);
                dims.n_values[dims.n] = nv < TN_MAX_BUCKETS ? nv : TN_MAX_BUCKETS;
                dims.multi = dims.n++;
                printf("buckets of '%s' recorded in the store:", name);
                for (int j = 0; j < dims.n_values[dims.multi]; j++)
                    printf(" %lld", (long long)dims.values[dims.multi][j]);
                putchar('\n');
            }
        }
        if (dims.multi >= 0) {
            nb = dims.n_values[dims.multi];
            for (int b = 0; b < nb; b++) {
                how.bucket = b;
                if ((bm[b] = load_model(cmd, argv[1], &how, 1)) == NULL) {
                    rc = TN_EXIT_FAIL;
                    goto done;
                }
            }
            if (md_task_list_union((const md_model *const *)bm, nb, &uni) != AT_OK) {
                tn__err(cmd, "out of memory");
                rc = TN_EXIT_FAIL;
                goto done;
            }
            tl = uni;
        }
    }
    e = md_export_lib(tl, &(md_export_opts){.store = st, .target = target, .device_key = device,
                                            .out_path = out, .header_path = header,
                                            .prefix = prefix, .max_threads = threads,
                                            .keep_temp = keep, .model = nb ? NULL : m,
                                            .buckets = (const md_model *const *)bm,
                                            .n_buckets = nb},
                      &rep, err, sizeof err);
    if (e != AT_OK) {
        tn__err(cmd, "%s", err[0] ? err : at_strerror(e));
        rc = TN_EXIT_FAIL;
        goto done;
    }
    printf("%s: %d kernels (%d tuned, %d naive) in %.2f s\n", out, rep.n_tasks, rep.n_tuned,
           rep.n_naive, rep.build_s);
    if (m) {
        md_model_info info;
        md_model_get_info(m, &info);
        printf("the whole model: %s_model_run; weights %.2f MB inside, activations' arena "
               "%.2f MB\n", rep.prefix, rep.weight_bytes / 1e6, rep.arena_bytes / 1e6);
        if (rep.n_buckets)
            printf("buckets: %d sizes of '%s' (%s_model_set_dim chooses; docs/models.md)\n",
                   rep.n_buckets, dims.name[dims.multi], rep.prefix);
        if (info.n_winograd_eligible)
            printf("winograd: %d of %d eligible 3x3 convolutions run as Winograd\n",
                   info.n_winograd, info.n_winograd_eligible);
    }
    printf("linked: %s\n", rep.link_cmd);
    if (rep.temp_dir[0])
        printf("objects and glue kept in %s\n", rep.temp_dir);
    rc = TN_EXIT_OK;
done:
    rec_store_close(st);
    md_model_free(m);
    for (int b = 0; b < nb; b++)
        md_model_free(bm[b]);
    md_task_list_free(uni);
    md_task_list_free(own);
    return rc;
}
