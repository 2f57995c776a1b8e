/* tuner/tn_cli_tune.c -- the main command: 'tuner [flags] SPEC...' tunes operators, DAG text
** files, ONNX models or task lists within a trial budget (docs/cli.md). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "tuner/tuner_int.h"

#define MAX_TASKS 1024

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

typedef struct taskset {
    tn_tune_task t[MAX_TASKS];
    char *names[MAX_TASKS];
    char *tags[MAX_TASKS];
    int n;
    md_model *models[64];
    int n_models;
    md_task_list *lists[64];
    int n_lists;
    md_model_opts mopts;  /* how models are loaded (--layout, --dim) */
    tn_dims dims;         /* --dim */
    md_dim mdims[TN_MAX_DIMS];
    struct tn_tune_buckets buckets[64]; /* models with buckets: recorded in the store */
    int n_buckets;
    tn_tune_use *uses[MAX_TASKS]; /* per task: its uses' choices (models with alternatives) */
    int n_choices;
} taskset;

/* Append n uses to task i's (none: its weight's worth without a choice). */
static int add_uses(const tn_cmd *cmd, taskset *ts, int i, int had, const tn_tune_use *uses,
                    int n)
{
    tn_tune_use *p;
    int old = ts->t[i].n_uses;
    if (n == 0 && old == 0)
        return 0;
    if (old == 0)
        old = had; /* uses before the first with choices: plain */
    if ((p = at_realloc(ts->uses[i], (size_t)(old + (n ? n : ts->t[i].weight - had)) *
                                         sizeof *p)) == NULL) {
        tn__err(cmd, "out of memory");
        return -1;
    }
    for (int k = ts->t[i].n_uses; k < old; k++)
        p[k] = (tn_tune_use){-1, 0};
    if (n)
        memcpy(p + old, uses, (size_t)n * sizeof *p);
    else
        for (int k = 0; k < ts->t[i].weight - had; k++)
            p[old + k] = (tn_tune_use){-1, 0};
    ts->uses[i] = p;
    ts->t[i].uses = p;
    ts->t[i].n_uses = old + (n ? n : ts->t[i].weight - had);
    return 0;
}

static int add_task(const tn_cmd *cmd, taskset *ts, const char *name, ss_dag *dag, int weight,
                    const char *tag, const tn_tune_use *uses, int n_uses)
{
    for (int i = 0; i < ts->n; i++)
        if (strcmp(ts->t[i].dag->key, dag->key) == 0) {
            int had = ts->t[i].weight;
            ts->t[i].weight += weight; /* the same computation twice: one task, more weight */
            ss_dag_unref(dag);
            return add_uses(cmd, ts, i, had, uses, n_uses);
        }
    if (ts->n == MAX_TASKS) {
        tn__err(cmd, "more than %d tasks", MAX_TASKS);
        ss_dag_unref(dag);
        return -1;
    }
    ts->names[ts->n] = at_strdup(name);
    ts->t[ts->n].name = ts->names[ts->n];
    ts->t[ts->n].dag = dag;
    ts->t[ts->n].weight = weight;
    ts->tags[ts->n] = tag && tag[0] ? at_strdup(tag) : NULL;
    ts->t[ts->n].tag = ts->tags[ts->n];
    ts->n++;
    return add_uses(cmd, ts, ts->n - 1, 0, uses, n_uses);
}

/* The convolution X a Winograd task's use serves ("X.wino_in", ...): the length of X, or 0. */
static size_t wino_base(const char *node)
{
    static const char *const sfx[3] = {".wino_in", ".wino_gemm", ".wino_out"};
    size_t n = strlen(node);
    for (int k = 0; k < 3; k++) {
        size_t m = strlen(sfx[k]);
        if (n > m && strcmp(node + n - m, sfx[k]) == 0)
            return n - m;
    }
    return 0;
}

/* The choices of a task list with Winograd alternatives: each convolution that has them
** gets an id; uses[] (n_uses[i] for task i) says which choice and side each use is. */
static int list_choices(const tn_cmd *cmd, taskset *ts, const md_task_list *tl,
                        tn_tune_use **uses)
{
    const char **conv = NULL;
    int n_conv = 0, cap = 0, rc = 0;
    *uses = NULL;
    for (int i = 0; i < tl->n_tasks; i++)
        for (int u = 0; u < tl->tasks[i].n_uses; u++) {
            const char *nm = tl->tasks[i].uses[u].n_nodes ? tl->tasks[i].uses[u].nodes[0] : "";
            size_t b = wino_base(nm);
            if (b == 0 || strstr(nm, ".wino_in") != nm + b)
                continue;
            if (n_conv == cap) {
                const char **p = at_realloc(conv, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *p);
                if (p == NULL)
                    goto oom;
                conv = p;
            }
            conv[n_conv++] = nm;
        }
    if (n_conv == 0)
        return 0;
    {
        int total = 0, k = 0;
        for (int i = 0; i < tl->n_tasks; i++)
            total += tl->tasks[i].n_uses;
        if ((*uses = at_calloc((size_t)total + 1, sizeof **uses)) == NULL)
            goto oom;
        for (int i = 0; i < tl->n_tasks; i++)
            for (int u = 0; u < tl->tasks[i].n_uses; u++, k++) {
                const char *nm =
                    tl->tasks[i].uses[u].n_nodes ? tl->tasks[i].uses[u].nodes[0] : "";
                size_t b = wino_base(nm);
                (*uses)[k] = (tn_tune_use){-1, 0};
                for (int c = 0; c < n_conv; c++) {
                    size_t cb = wino_base(conv[c]);
                    if ((b ? b == cb && strncmp(nm, conv[c], b) == 0
                           : strlen(nm) == cb && strncmp(nm, conv[c], cb) == 0)) {
                        (*uses)[k] = (tn_tune_use){ts->n_choices + c, b ? 1 : 0};
                        break;
                    }
                }
            }
    }
    ts->n_choices += n_conv;
    at_free(conv);
    return rc;
oom:
    at_free(conv);
    tn__err(cmd, "out of memory");
    return -1;
}

static int add_list(const tn_cmd *cmd, taskset *ts, const md_task_list *tl, const char *what)
{
    int n0 = ts->n, k = 0;
    tn_tune_use *uses;
    if (list_choices(cmd, ts, tl, &uses) != 0)
        return -1;
    for (int i = 0; i < tl->n_tasks; k += tl->tasks[i].n_uses, i++) {
        const md_task *t = &tl->tasks[i];
        if (!t->tunable)
            continue;
        if (add_task(cmd, ts, t->name, ss_dag_ref(t->dag), t->weight, t->tag,
                     uses ? uses + k : NULL, uses ? t->n_uses : 0) != 0) {
            at_free(uses);
            return -1;
        }
    }
    at_free(uses);
    if (ts->n == n0) {
        tn__err(cmd, "%s: no task to tune (no convolution, dense layer or other reduction)", what);
        return -1;
    }
    return 0;
}

/* A SPEC: an ONNX model, a task list (JSON lines), a DAG text file or a library operator. */
static int load_spec(const tn_cmd *cmd, taskset *ts, const char *spec)
{
    char err[512];
    struct stat sb;
    if (ends_with(spec, ".onnx")) {
        /* once per bucket of the dimension given several values: their tasks together */
        const tn_dims *d = &ts->dims;
        int nb = d->multi >= 0 ? d->n_values[d->multi] : 1;
        for (int b = 0; b < nb; b++) {
            md_model *m;
            if (ts->n_models == 64) {
                tn__err(cmd, "too many models (or buckets)");
                return -1;
            }
            ts->mopts.n_dims = tn__dims_at(d, b, ts->mdims);
            ts->mopts.dims = ts->mdims;
            if (md_model_load(spec, &ts->mopts, &m, err, sizeof err) != AT_OK) {
                tn__err(cmd, "%s", err);
                return -1;
            }
            ts->models[ts->n_models++] = m;
            if (b == 0 && d->multi >= 0 && ts->n_buckets < 64)
                ts->buckets[ts->n_buckets++] = (struct tn_tune_buckets){
                    md_model_sig(m), d->name[d->multi], spec, nb, d->values[d->multi]};
            if (add_list(cmd, ts, md_model_tasks(m), spec) != 0)
                return -1;
        }
        return 0;
    }
    if (ends_with(spec, ".jsonl")) {
        md_task_list *tl;
        char *text;
        size_t n;
        if (ts->n_lists == 64 || at_file_read(spec, &text, &n, err, sizeof err) != AT_OK) {
            tn__err(cmd, "%s", err);
            return -1;
        }
        if (md_tasks_read_jsonl(spec, text, n, &tl, err, sizeof err) != AT_OK) {
            at_free(text);
            tn__err(cmd, "%s", err);
            return -1;
        }
        at_free(text);
        ts->lists[ts->n_lists++] = tl;
        return add_list(cmd, ts, tl, spec);
    }
    if (stat(spec, &sb) == 0 && S_ISREG(sb.st_mode)) {
        ss_dag *dag;
        char *text;
        size_t n;
        if (at_file_read(spec, &text, &n, err, sizeof err) != AT_OK) {
            tn__err(cmd, "%s", err);
            return -1;
        }
        if (ss_dag_parse(text, n, &dag, err, sizeof err) != AT_OK) {
            at_free(text);
            tn__err(cmd, "%s:%s", spec, err);
            return -1;
        }
        at_free(text);
        return add_task(cmd, ts, spec, dag, 1, NULL, NULL, 0); /* similar to nothing */
    }
    {
        ss_dag *dag;
        char tag[96];
        if (kn_op_build(spec, &dag, err, sizeof err) != AT_OK) {
            if (tn__find_cmd(spec) != NULL)
                tn__err(cmd, "'%s' is a subcommand: it comes first and its flags after it "
                       "('tuner %s [flags]'; see 'tuner %s --help')", spec, spec, spec);
            else if (ends_with(spec, ".dag") ||
                     (strchr(spec, '/') != NULL && strchr(spec, ':') == NULL))
                tn__err(cmd, "%s: cannot read the DAG file: %s", spec,
                       stat(spec, &sb) != 0 ? strerror(errno) : "not a regular file");
            else if (strchr(spec, ':') == NULL && strchr(spec, '/') == NULL)
                tn__err(cmd, "'%s' is neither a library operator (see docs/operators.md), a DAG "
                       "file, an ONNX model nor a task list (%s)", spec, err);
            else
                tn__err(cmd, "%s", err);
            return -1;
        }
        /* the similarity tag of model tasks: the operator and its FLOPs' order of magnitude */
        snprintf(tag, sizeof tag, "%.*s:%d", (int)strcspn(spec, ":"), spec,
                 (int)floor(log(dag->flops + 1) / log(1.618)));
        return add_task(cmd, ts, spec, dag, 1, tag, NULL, 0);
    }
}

int tn__cmd_tune(const tn_cmd *cmd, int argc, char **argv)
{
    const char *target = "llvm -mcpu=native", *db = "tuning.db", *tracker = NULL,
               *key_path = NULL, *next_key = NULL, *device_key = NULL, *min_ms = "0",
               *seed_s = "1", *log_level = NULL, *layout = NULL, *wino = NULL,
               *overlap_s = "auto";
    double cutoff = 10;
    int trials = 1000, timeout_s = 10, resume = 0, per_round = 0, number = 1, repeat = 3,
        flush = 0, flush_weights = 0, no_flush = 0, early_stop = 0, build_workers = -1,
        build_timeout_s = 60, wait_s = 600,
        priority = 1, threads = 0, population = 2048, no_model = 0, quiet = 0, no_layout = 0,
        max_code_size = TN_MAX_CODE_SIZE, pretrain_max = TN_PRETRAIN_MAX,
        no_retime = 0,
        n_pos, help, rc;
    at_opt_list dim_l = {0};
    at_opt opts[] = {
        {"trials", 0, AT_OPT_INT, &trials, "N", "measurements in all (default 1000)"},
        {"target", 0, AT_OPT_STR, &target, "T",
         "compilation target (default 'llvm -mcpu=native'; 'cuda -arch=sm_90' for GPU agents)"},
        {"tracker", 0, AT_OPT_STR, &tracker, "HOST:PORT", "measure on this tracker's agents "
                                                          "(default: embedded, this machine)"},
        {"key", 0, AT_OPT_STR, &device_key, "NAME", "device key of the agents (default 'local')"},
        {"fleet-key", 0, AT_OPT_STR, &key_path, "FILE", "the fleet key (or $AT_FLEET_KEY)"},
        {"next-fleet-key", 0, AT_OPT_STR, &next_key, "FILE", "a second key (rotation)"},
        {"db", 0, AT_OPT_STR, &db, "FILE", "the records store (default tuning.db)"},
        {"seed", 0, AT_OPT_STR, &seed_s, "S", "random seed (default 1)"},
        {"timeout-s", 0, AT_OPT_INT, &timeout_s, "S", "run timeout of one kernel (default 10)"},
        {"timeout", 0, AT_OPT_INT, &timeout_s, "S", AT_OPT_OLD("timeout-s")},
        {"resume", 0, AT_OPT_BOOL, &resume, NULL, "continue from the store: count and reuse its "
                                                  "trials"},
        {"per-round", 0, AT_OPT_INT, &per_round, "N", "measurements per round (default: 64, "
         "or trials / tasks when less; half that when the cost model starts trained)"},
        {"number", 0, AT_OPT_INT, &number, "N", "calls per timed repeat (default 1)"},
        {"repeat", 0, AT_OPT_INT, &repeat, "N", "timed repeats (default 3)"},
        {"cutoff", 0, AT_OPT_NUM, &cutoff, "X",
         "a candidate whose checked run takes over X times the task's best is not repeated "
         "(10; 0: off)"},
        {"no-retime", 0, AT_OPT_BOOL, &no_retime, NULL, "do not time a task's first-round best "
         "again in its second round"},
        {"min-repeat-ms", 0, AT_OPT_STR, &min_ms, "MS", "a repeat lasts at least this (default 0)"},
        {"flush-cache", 0, AT_OPT_BOOL, &flush, NULL, "evict every input from the caches "
                                                      "before each repeat"},
        {"flush-weights", 0, AT_OPT_BOOL, &flush_weights, NULL, "evict the weights (constant "
         "inputs) from the caches before each repeat"},
        {"no-flush-cache", 0, AT_OPT_BOOL, &no_flush, NULL, "evict nothing (the default)"},
        {"early-stop", 0, AT_OPT_INT, &early_stop, "N", "stop a task after N trials without a new "
                                                        "best (default 0: off)"},
        {"build-workers", 0, AT_OPT_INT, &build_workers, "N", "build processes (default: cores)"},
        {"build-timeout-s", 0, AT_OPT_INT, &build_timeout_s, "S", "per build (default 60)"},
        {"build-timeout", 0, AT_OPT_INT, &build_timeout_s, "S", AT_OPT_OLD("build-timeout-s")},
        {"wait-timeout-s", 0, AT_OPT_INT, &wait_s, "S", "give up when no agent serves the key "
                                                       "this long (600)"},
        {"wait-timeout", 0, AT_OPT_INT, &wait_s, "S", AT_OPT_OLD("wait-timeout-s")},
        {"priority", 0, AT_OPT_INT, &priority, "N", "among tuners sharing a key (1)"},
        {"threads", 0, AT_OPT_INT, &threads, "N", "embedded agent's kernel threads (all cores)"},
        {"overlap-builds", 0, AT_OPT_STR, &overlap_s, "W", "embedded agent: search and build "
         "the next round while this one is timed, kernels and builds on separate cores: auto "
         "(default: when --threads leaves 2 cores or more), on or off"},
        {"population", 0, AT_OPT_INT, &population, "N", "evolution population (default 2048)"},
        {"max-code-size", 0, AT_OPT_INT, &max_code_size, "N", "never measure a program whose "
         "unrolled code exceeds N expression nodes (CPU targets; default 16000, 0: no limit)"},
        {"pretrain-max", 0, AT_OPT_INT, &pretrain_max, "N", "train the cost model at the start "
         "on the store's records when it holds 16 to N (default 20000); above N (0: always), or "
         "with none of this target, start from the model saved in the store"},
        {"no-cost-model", 0, AT_OPT_BOOL, &no_model, NULL, "random scores (experiments only)"},
        {"no-layout-rewrite", 0, AT_OPT_BOOL, &no_layout, NULL, "keep weights in their own "
         "layout (no pre-transform step in the kernels)"},
        {"layout", 0, AT_OPT_STR, &layout, "L", "models: convolutions' layout, nhwc (default) "
         "or nchw"},
        {"dim", 0, AT_OPT_LIST, &dim_l, "D", "models: symbolic input dimensions: " TN_DIM_HELP
         "; NAME=V,V,... tunes each value (bucket) of one dimension" TN_DIM_RANGE_HELP},
        {"winograd", 0, AT_OPT_STR, &wino, "W", "models: 3x3 stride-1 convolutions' Winograd "
         "tasks, auto (default: tuned beside the direct ones), on (only them) or off"},
        {"quiet", 'q', AT_OPT_BOOL, &quiet, NULL, "no progress and no report"},
        {"log-level", 0, AT_OPT_STR, &log_level, "LEVEL", "debug, info, warn, error or off"},
    };
    static taskset ts;
    tn_tune_opts o;
    tn_tune_report rep;
    at_wire_key keys[2];
    char err[512], cmdline[1024];
    double min_repeat_ms;
    int64_t seed;
    at_err e;
    size_t used = 0;

    for (int i = 0; i < argc && used < sizeof cmdline - 1; i++)
        used += (size_t)snprintf(cmdline + used, sizeof cmdline - used, "%s%s", i ? " " : "",
                                 argv[i]);
    if ((rc = tn__opts_cmd(NULL, cmd, opts, (int)AT_ARRAY_LEN(opts), argc, argv, &n_pos,
                           &help)) != TN_EXIT_OK || help)
        return rc;
    if (log_level) {
        at_log_level lv;
        if (at_log_parse_level(log_level, &lv) != AT_OK) {
            tn__err(cmd, "--log-level needs debug, info, warn, error or off, not '%s'", log_level);
            return TN_EXIT_USAGE;
        }
        at_log_set_level(lv);
    }
    if (n_pos == 0) {
        tn__err(cmd, "nothing to tune: give a library operator (matmul:M=512,N=512,K=512), a DAG "
               "file, an ONNX model or a task list");
        return TN_EXIT_USAGE;
    }
    if (trials < 1) {
        tn__err(cmd, "--trials must be at least 1");
        return TN_EXIT_USAGE;
    }
    {
        /* each setting's rule, named with the value given */
        static const char *const fmt[] = {
            "--per-round must be 0 (automatic) to 4096, not %d",
            "--repeat must be 1 to 1024, not %d", "--number must be at least 1, not %d",
            "--timeout-s must be at least 1 (whole seconds), not %d",
            "--population must be at least 8, not %d",
            "--build-timeout-s must be at least 1 (whole seconds), not %d"};
        const int bad[] = {per_round < 0 || per_round > 4096, repeat < 1 || repeat > 1024,
                           number < 1, timeout_s < 1, population < 8, build_timeout_s < 1};
        const int val[] = {per_round, repeat, number, timeout_s, population, build_timeout_s};
        for (size_t i = 0; i < AT_ARRAY_LEN(bad); i++)
            if (bad[i]) {
                tn__err(cmd, fmt[i], val[i]);
                return TN_EXIT_USAGE;
            }
    }
    if (at_parse_double(min_ms, &min_repeat_ms) != AT_OK || min_repeat_ms < 0) {
        tn__err(cmd, "--min-repeat-ms needs a number >= 0, not '%s'", min_ms);
        return TN_EXIT_USAGE;
    }
    if (strcmp(overlap_s, "auto") != 0 && strcmp(overlap_s, "on") != 0 &&
        strcmp(overlap_s, "off") != 0) {
        tn__err(cmd, "--overlap-builds needs auto, on or off, not '%s'", overlap_s);
        return TN_EXIT_USAGE;
    }
    if (at_parse_i64(seed_s, &seed) != AT_OK) {
        tn__err(cmd, "--seed needs a whole number, not '%s'", seed_s);
        return TN_EXIT_USAGE;
    }
    {
        kn_target t;
        if (kn_target_parse(target, &t, err, sizeof err) != AT_OK) {
            tn__err(cmd, "%s", err);
            return TN_EXIT_USAGE;
        }
        if (tracker == NULL && t.kind == KN_TARGET_CUDA) {
            tn__err(cmd, "target '%s' is a GPU: measure it on GPU agents (--tracker HOST:PORT "
                   "--key NAME; rpc_agent --device cuda:N)", target);
            return TN_EXIT_USAGE;
        }
        if (tracker == NULL && !t.is_host) {
            tn__err(cmd, "target '%s' is not this machine's architecture: measure it on a fleet "
                   "(--tracker HOST:PORT --key NAME)", target);
            return TN_EXIT_USAGE;
        }
    }
    memset(&o, 0, sizeof o);
    if (tracker) {
        int n_keys = 0;
        if (key_path == NULL)
            key_path = getenv("AT_FLEET_KEY");
        if (key_path == NULL) {
            tn__err(cmd, "a tracker needs the fleet key: --fleet-key FILE (docs/security.md)");
            return TN_EXIT_USAGE;
        }
        if (device_key == NULL) {
            tn__err(cmd, "with --tracker, say which agents measure: --key NAME");
            return TN_EXIT_USAGE;
        }
        if (at_wire_key_load(key_path, &keys[n_keys++], err, sizeof err) != AT_OK ||
            (next_key && at_wire_key_load(next_key, &keys[n_keys++], err, sizeof err) != AT_OK)) {
            tn__err(cmd, "%s", err);
            return TN_EXIT_FAIL;
        }
        o.keys = keys;
        o.n_keys = n_keys;
    } else {
        tn_fleet_prepare(); /* the embedded agent's launcher, while this process has one thread */
    }
    memset(&ts, 0, sizeof ts);
    if (tn__parse_dims(cmd, &dim_l, &ts.dims) != 0 ||
        tn__parse_layout(cmd, layout, &ts.mopts.layout) != 0 ||
        tn__parse_winograd(cmd, wino, &ts.mopts.winograd) != 0)
        return TN_EXIT_USAGE;
    ts.mopts.dim_default = ts.dims.dflt;
    for (int i = 0; i < n_pos; i++)
        if (load_spec(cmd, &ts, argv[1 + i]) != 0) {
            rc = TN_EXIT_USAGE;
            goto out;
        }
    o.trials = trials;
    o.target = target;
    o.tracker = tracker;
    o.device_key = device_key ? device_key : "local";
    o.priority = priority;
    o.wait_timeout_s = wait_s;
    o.db = db;
    o.cmdline = cmdline;
    o.seed = (uint64_t)seed;
    o.resume = resume;
    /* Ansor's: every task gets a warm-up round even when the budget is small */
    o.per_round =
        per_round > 0 ? per_round : (int)AT_MAX(1, AT_MIN(64, trials / AT_MAX(1, ts.n)));
    o.per_round_auto = per_round == 0;
    o.number = number;
    o.repeat = repeat;
    o.min_repeat_ms = min_repeat_ms;
    if (flush + flush_weights + no_flush > 1) {
        tn__err(cmd, "--flush-cache, --flush-weights and --no-flush-cache exclude each other");
        rc = TN_EXIT_USAGE;
        goto out;
    }
    o.flush_cache = flush ? TN_FLUSH_ALL : flush_weights ? TN_FLUSH_WEIGHTS : TN_FLUSH_OFF;
    o.timeout_ms = timeout_s * 1000;
    o.cutoff = cutoff;
    o.no_retime = no_retime;
    o.early_stop = early_stop;
    {
        /* overlap (embedded mode): the kernels keep their --threads cores to themselves, the
        ** search and the builds share the others; otherwise building and timing alternate
        ** and each has every core (docs/tuning.md, "Pipelining and clean timings") */
        int ncpu = tn__usable_cpus(), kthreads = threads > 0 ? threads : ncpu;
        o.overlap = tracker == NULL &&
                    (strcmp(overlap_s, "on") == 0 ||
                     (strcmp(overlap_s, "auto") == 0 && ncpu >= kthreads + 2));
        o.kernel_cpus = o.overlap && ncpu > kthreads ? kthreads : 0;
        int spare = o.kernel_cpus > 0 ? ncpu - kthreads : ncpu;
        o.build_workers = build_workers >= 0 ? build_workers : spare;
        o.search.n_threads = spare > 16 ? 16 : spare;
    }
    o.build_timeout_ms = build_timeout_s * 1000;
    o.embedded_threads = threads;
    o.layout_rewrite = !no_layout;
    o.no_model = no_model;
    o.pretrain_max = pretrain_max;
    o.quiet = quiet;
    o.n_buckets = ts.n_buckets;
    o.buckets = ts.buckets;
    {
        int n_threads = o.search.n_threads; /* set above with the build workers */
        tn__search_cfg_default(&o.search);
        o.search.n_threads = n_threads;
    }
    o.search.population = population;
    o.search.max_code_size = max_code_size;
    e = tn__tune(&o, ts.t, ts.n, &rep, err, sizeof err);
    if (e != AT_OK) {
        tn__err(cmd, "%s", err);
        rc = TN_EXIT_FAIL;
    } else {
        rc = rep.interrupted ? TN_EXIT_INTERRUPTED : TN_EXIT_OK;
        if (rep.interrupted && !quiet)
            fprintf(stderr, "tuner: interrupted; every finished trial is recorded in %s (rerun "
                            "with --resume to continue)\n", db);
    }
out:
    for (int i = 0; i < ts.n; i++) {
        ss_dag_unref(ts.t[i].dag);
        at_free(ts.names[i]);
        at_free(ts.tags[i]);
        at_free(ts.uses[i]);
    }
    for (int i = 0; i < ts.n_models; i++)
        md_model_free(ts.models[i]);
    for (int i = 0; i < ts.n_lists; i++)
        md_task_list_free(ts.lists[i]);
    return rc;
}
