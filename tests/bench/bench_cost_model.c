/* tests/bench/bench_cost_model.c -- speed and ranking quality of the cost model.
**
**   bench cost_model_extract_rate N states/s          lowering + features of a population of
**                                                      2,048 random ResNet conv2d states
**   bench cost_model_predict_rate N states/s          cm_model_predict on that population
**                                                      (lowering, features, XGBoost), 1 thread
**   bench cost_model_population_2048 T s              the same as the time one population
**                                                      takes (goal: under 1 s on one core)
**   bench cost_model_population_2048/goal_1s R x      goal / time
**   bench cost_model_cache_sim_rate N states/s        cm_sim_run (the caches simulated, the
**                                                      target's sizes, a cap of 3e5 accesses)
**                                                      on 64 states of that population
**   bench cost_model_cache_sim_256 T s                the same for 256 states: re-ranking a
**                                                      round's best with it (not yet done)
**   bench cost_model_code_rate N states/s             kn_build + cm_code_run (the machine
**                                                      code read back, group 11; x86-64)
**   bench cost_model_train_10000 T s                  training on 10,000 programs
**   bench cost_model_TASK_pairwise_acc_OBJ A          held-out pairwise accuracy (pairs whose
**   bench cost_model_TASK_top1_recall_OBJ R           costs differ by > 5%), top-1 and top-5
**   bench cost_model_TASK_top5_recall_OBJ R           recall, for OBJ rank and reg, median of
**   bench cost_model_TASK_pairwise_acc/reg R x        21 random 80/20 splits (--splits); rank
**   bench cost_model_TASK_top5_recall_mean_OBJ R      over reg; _mean_: means over the splits
**   bench cost_model_TASK_pairwise_acc_with_others A  rank, the same splits trained with every
**   bench cost_model_TASK_top5_recall_mean_with_others R  record of the other task too (a
**                                                      tuning run trains on its whole store)
**   bench cost_model_TASK_pairwise_acc_with_corpus A  rank, the same splits trained with the
**   bench cost_model_TASK_top1_recall_mean_with_corpus R  pre-training corpus too (--corpus N
**   bench cost_model_TASK_top5_recall_mean_with_corpus R  random states of each of its
**   bench cost_model_TASK_top1_score_mean_with_corpus R   workloads, none of them TASK; 0: off)
**   bench cost_model_TASK_top5_recall_mean_se_OBJ S   the standard error of those means over
**   bench cost_model_TASK_top5_recall_mean_se_with_corpus S  the splits (sd / sqrt(splits))
**   bench cost_model_TASK_top5_recall_mean_cmp_with_corpus R  --cmp: the comparator
**   bench cost_model_TASK_top1_recall_mean_cmp_with_corpus R  (cm_cmp) on the same splits,
**   bench cost_model_TASK_pairwise_acc_cmp_with_corpus A      trained with the corpus
**   bench cost_model_TASK_top5_recall_mean_cmp2_with_corpus R --cmp-max-pairs2 N or
**                                                      --cmp-top-pairs2 X: a second
**                                                      comparator with that cap or top_pairs
**   bench cost_model_TASK_top5_recall_mean_cmp_VARIANT R  --cmp-variants: other ways to rank
**   bench cost_model_TASK_top1_recall_mean_cmp_VARIANT R  with the same comparator: finalF
**                                                      (its F best re-ranked among
**                                                      themselves), elim (the weakest dropped
**                                                      and the rest re-ranked, down to 5),
**                                                      modelsum (its and the model's ranks
**                                                      summed), model12 (the model's 12 best
**                                                      re-ranked by it), known / known20 (each
**                                                      placed among the split's training
**                                                      programs, all or the fastest fifth:
**                                                      cm_cmp_rank_known), knownsum (known's
**                                                      score plus the soft Borda count's)
** --dump-scores FILE: each held-out program's cost and scores, a line each (--dump-cols P,P:
** and those columns of each of its rows, '|' before each row); --drop-cols P,P: an
** experiment, the columns whose names start with one of these set to 0 when loaded;
** --contribs: an experiment, the columns that put false positives above misses (SHAP);
** --exp-ratio NUM,DEN: an experiment, column NUM over column DEN as one more column;
** --refine 1|2: an experiment, each split refines a model of the corpus alone (1: on the
** task's programs, 2: on those and the corpus again), as a tuning run refines a loaded one;
** --task-pct P,P: an experiment, those columns of a program's first row as percentiles among
** its task's programs; --corpus-same-op: an experiment, each task trained with the corpus
** workloads of its own operator only; --split-base N: the splits numbered from N instead of 0
** (other held-out sets and seeds, to confirm a change chosen on the first 21); --seed-base
** N: the models' seeds moved, the same splits (how much a figure moves with the seed alone);
** --exp-threads T: an experiment, the parallel loop's balance over T threads in two of the
** GPU columns.
**   bench cost_model_TASK_records N records           measured records of the task used
**   bench cost_model_TASK_top1_recall_noise_ceiling R  top-1 / top-5 agreement of a record's
**   bench cost_model_TASK_top5_recall_noise_ceiling R  first repeat with its others
**   bench cost_model_TASK_pairwise_acc_remeasured A  how a second measurement of the same
**   bench cost_model_TASK_top1_recall_remeasured R   programs (pass 2 of --passes, measured
**   bench cost_model_TASK_top5_recall_remeasured R   once per host and kept) agrees with the
**                                                      data set's: one measurement's ceiling
**   bench cost_model_TASK_top1_recall_half_passes R  the fastest of the first half of the
**   bench cost_model_TASK_top5_recall_half_passes R  passes against the fastest of the rest
**                                                      (--passes 4 or more): the labels' own
**                                                      steadiness, a floor of it
** The labels are each program's fastest over --passes measurements (default 4: the data set
** and 3 more passes over it, each the same way as the data set, kept in <db>_pass2.db and
** on); one measurement moves too much between jobs on a shared host (see passes_measure).
** --corpus-passes N does the same for the corpus (default 1: one measurement).
** TASK is matmul1024 (matmul 1024^3) or resnet_conv (N=1, C=K=64, 56x56, 3x3, pad 1).
**
** The held-out figures need measured data: --states N random states of each task (default
** 200, or as many as --budget-s seconds per task allow, default 240) are measured here once
** (through the embedded tracker and agent, as every measurement: 2 kernel threads, 3 repeats
** of >= 0.5 ms; a state whose first run takes over 0.25 s is timed once; no output check) into build/rel/bench/cost_model.db and reused by later runs, which measure
** only what is missing (delete the file to measure again).  The corpus (default 200 states
** of each workload of tn_corpus_spec, the same settings) is cached the same way in
** build/rel/bench/corpus.db (--corpus-db): about 10 minutes the first time.  The counts used are printed.  The
** loaded sets (with --sim and --code the most of an hour for the corpus of 400) are kept in
** --data-cache (build/rel/bench/cache) and reused while the store's record count and the
** feature version stay.  The 10,000 programs for the training time are random states of both tasks, lowered and featurized for real, labelled
** by a model trained on the measured data: training time does not depend on where labels
** come from, and measuring 10,000 big kernels would take hours. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cost_model/cost_model.h"
#include "tuner/tuner.h"
#include "cost_model/cost_model_int.h"
#include <unistd.h>

#define POP 2048
#define SIM_N 64
#define REPS 5
#define MAX_SPLITS 256
static int n_splits = 21; /* --splits: held-out 80/20 splits of each task */
static int split_base; /* --split-base: the first split's number (0; other splits to confirm on) */
static int seed_base;  /* --seed-base: the models' seeds moved, the splits the same (0) */
static int n_ensemble = 1; /* --ensemble: models trained per split, their scores summed */
static int use_cmp = 0;    /* --cmp: the comparator's figures too (with the corpus) */
static int cmp_orders = 2; /* --cmp-orders: 2, each pair in both orders (cm_cmp_params) */
static double cmp_top_pairs = 0;  /* --cmp-top-pairs: cm_cmp_params.top_pairs */
static double cmp_top_pairs2 = 0; /* --cmp-top-pairs2: the second comparator's */
static int cmp_max_pairs = 0;  /* --cmp-max-pairs: cm_cmp_params.max_pairs (0: its default) */
static int cmp_max_pairs2 = 0; /* --cmp-max-pairs2: a second comparator with this cap */
static const char *dump_path = ""; /* --dump-scores: each held-out program's scores, a line each */

/* --drop-cols (an experiment): columns whose names start with one of these comma-separated
** prefixes set to 0 in every loaded program, as if the product did not compute them */
static const char *drop_cols = "";

/* mask[k] = 1 for the columns whose names start with one of the comma-separated prefixes
** of 'list'; their number */
static int columns_named(const char *list, unsigned char mask[CM_N_FEATS])
{
    int n = 0;
    for (int k = 0; k < CM_N_FEATS; k++) {
        const char *name = cm_feature_name(k);
        mask[k] = 0;
        for (const char *p = list; *p;) {
            size_t len = strcspn(p, ",");
            if (len && !strncmp(name, p, len))
                mask[k] = 1;
            p += len + (p[len] == ',');
        }
        n += mask[k];
    }
    return n;
}

static void drop_columns(cm_data *d)
{
    static unsigned char drop[CM_N_FEATS];
    int n_drop = columns_named(drop_cols, drop);
    for (int i = 0; d && i < cm_data_count(d); i++) {
        int nr;
        float *r = (float *)cm_data_rows(d, i, &nr);
        for (int j = 0; j < nr; j++)
            for (int k = 0; k < CM_N_FEATS; k++)
                if (drop[k])
                    r[(size_t)j * CM_N_FEATS + k] = 0;
    }
    if (d)
        fprintf(stderr, "# --drop-cols %s: %d columns set to 0\n", drop_cols, n_drop);
}
/* --dump-cols P,P: the named columns of each dumped program's rows, appended to its
** --dump-scores line, a '|' before each row (their names on stderr) */
static const char *dump_cols = "";
static FILE *dump_f;
static void dump_columns(const cm_data *d, int i)
{
    static unsigned char on[CM_N_FEATS];
    static int named;
    int nr;
    const float *r = cm_data_rows(d, i, &nr);
    if (!named) {
        columns_named(dump_cols, on);
        named = 1;
        fprintf(stderr, "# --dump-scores: task split cost score");
        for (int k = 0; k < CM_N_FEATS; k++)
            if (on[k])
                fprintf(stderr, " %s", cm_feature_name(k));
        fprintf(stderr, "\n");
    }
    for (int j = 0; j < nr; j++) {
        fprintf(dump_f, " |");
        for (int k = 0; k < CM_N_FEATS; k++)
            if (on[k])
                fprintf(dump_f, " %.6g", r[(size_t)j * CM_N_FEATS + k]);
    }
    fprintf(dump_f, "\n");
}
/* --exp-threads T (an experiment): the parallel loop's balance over T threads, in the
** GPU launch's columns (0 on a CPU): gpu_blocks = log2(T * ceil(P / T) / P), the share of
** the threads' time lost to the last, short round of P parallel iterations, and gpu_threads
** = min(P, T), the threads the store keeps busy (P: the row's parallel_prod) */
static int exp_threads;
static void die(const char *what, const char *msg);

/* The index of the feature column so named (the experiments' columns). */
static int column_of(const char *name)
{
    for (int k = 0; k < CM_N_FEATS; k++)
        if (!strcmp(cm_feature_name(k), name))
            return k;
    die(name, "no such feature column");
    return -1;
}

static void par_balance(cm_data *d)
{
    int kp = column_of("parallel_prod"), kb = column_of("gpu_blocks"), kt = column_of("gpu_threads");
    for (int i = 0; d && i < cm_data_count(d); i++) {
        int nr;
        float *r = (float *)cm_data_rows(d, i, &nr);
        for (int j = 0; j < nr; j++) {
            float *x = r + (size_t)j * CM_N_FEATS;
            double pp = round(exp2(x[kp]) - 1), t = exp_threads;
            if (pp < 1)
                pp = 1;
            x[kb] = (float)log2(t * ceil(pp / t) / pp);
            x[kt] = (float)AT_MIN(pp, t);
        }
    }
}
/* --exp-roof B (an experiment): on a program's first row, the code's cycles per useful lane
** plus the time its L1 misses take to come in at B bytes a cycle (sim_l1_per lines of 64
** bytes a multiply-add): log2(2^code_lane_cycles + 64 sim_l1_per / B), in the GPU column
** gpu_local_bytes (0 on a CPU); with --exp-roof-in-place in code_lane_cycles instead */
static double exp_roof;
static int exp_roof_in_place;
static void roof_column(cm_data *d)
{
    int kc = column_of("code_lane_cycles"), kl = column_of("sim_l1_per");
    int kg = column_of("gpu_local_bytes");
    for (int i = 0; d && i < cm_data_count(d); i++) {
        int nr;
        float *x = (float *)cm_data_rows(d, i, &nr);
        double b = exp_roof;
        if (nr < 1 || x[kc] == 0)
            continue; /* no code read back */
        x[exp_roof_in_place ? kc : kg] = (float)log2(exp2(x[kc]) + 64.0 * x[kl] / b);
    }
}
/* --exp-ratio NUM,DEN (an experiment): on a program's first row, column NUM over column DEN
** (raw columns; 0 where DEN is 0) as one more column, in gpu_local_bytes (0 on a CPU): a
** ratio the trees cannot form from the two, such as the hot loop's stack accesses per FMA */
static const char *exp_ratio = "";
static void ratio_column(cm_data *d)
{
    char num[64];
    const char *c = strchr(exp_ratio, ',');
    int kn, kd, kg = column_of("gpu_local_bytes");
    if (c == NULL || (size_t)(c - exp_ratio) >= sizeof num)
        die("--exp-ratio", "give NUM,DEN: two column names");
    memcpy(num, exp_ratio, (size_t)(c - exp_ratio));
    num[c - exp_ratio] = 0;
    kn = column_of(num);
    kd = column_of(c + 1);
    if (cm_feature_is_log(kn) || cm_feature_is_log(kd))
        die("--exp-ratio", "both columns must be raw, not log");
    for (int i = 0; d && i < cm_data_count(d); i++) {
        int nr;
        float *x = (float *)cm_data_rows(d, i, &nr);
        if (nr >= 1)
            x[kg] = x[kd] > 0 ? x[kn] / x[kd] : 0;
    }
}
/* --task-pct (an experiment): columns whose names start with one of these prefixes, on each
** program's first row, replaced by their percentile among the first rows of the programs of
** the same task (ties share their mean rank), so that the trees see a program's columns
** relative to its workload's, not in absolute terms that differ from workload to workload */
static const char *task_pct = "";
/* --corpus-same-op (an experiment): each task trained with the corpus workloads of its own
** operator only (conv2d with conv2d; matmul with matmul, dense and batch_matmul) */
static int corpus_same_op = 0;

typedef struct pct_item {
    float v;
    int i;
} pct_item;

static int pct_cmp(const void *a, const void *b)
{
    float x = ((const pct_item *)a)->v, y = ((const pct_item *)b)->v;
    return (x > y) - (x < y);
}

static void task_percentiles(cm_data *d)
{
    static unsigned char on[CM_N_FEATS];
    int n_on, n = d ? cm_data_count(d) : 0;
    pct_item *it;
    if (d == NULL)
        return;
    n_on = columns_named(task_pct, on);
    it = malloc((size_t)(n > 0 ? n : 1) * sizeof *it);
    if (it == NULL)
        die("--task-pct", "out of memory");
    for (int t = 0; t < cm_data_n_tasks(d); t++)
        for (int k = 0; k < CM_N_FEATS; k++) {
            int m = 0;
            if (!on[k])
                continue;
            for (int i = 0; i < n; i++) {
                int nr;
                const float *r = cm_data_rows(d, i, &nr);
                if (cm_data_task_of(d, i) == t && nr > 0)
                    it[m++] = (pct_item){r[k], i};
            }
            qsort(it, (size_t)m, sizeof *it, pct_cmp);
            for (int a = 0; a < m;) {
                int b = a;
                while (b < m && it[b].v == it[a].v)
                    b++;
                for (int c = a; c < b; c++) {
                    int nr;
                    float *r = (float *)cm_data_rows(d, it[c].i, &nr);
                    r[k] = m > 1 ? (float)((a + b - 1) * 0.5 / (m - 1)) : 0.5f;
                }
                a = b;
            }
        }
    free(it);
    fprintf(stderr, "# --task-pct %s: %d columns as percentiles within their task\n", task_pct,
            n_on);
}
#define cmp2 (cmp_max_pairs2 > 0 || cmp_top_pairs2 > 0) /* a second comparator */

static const struct {
    const char *name, *spec;
} tasks[] = {
    {"matmul1024", "matmul:M=1024,N=1024,K=1024"},
    {"resnet_conv", "conv2d:N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1"},
};
#define N_TASKS 2

static kn_target host;
static ss_hw hw;

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "bench_cost_model: %s: %s\n", what, msg);
    exit(1);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double mean(const double *v, int n)
{
    double t = 0;
    for (int i = 0; i < n; i++)
        t += v[i];
    return n > 0 ? t / n : 0;
}

/* The standard error of v's mean over n splits: sd / sqrt(n). The splits share programs
** (each is 80 % of the same 200), so this understates how far the mean could move with
** other splits; it says how many splits a difference needs. */
static double mean_se(const double *v, int n)
{
    if (n < 2)
        return 0;
    double m = mean(v, n), ss = 0;
    for (int i = 0; i < n; i++)
        ss += (v[i] - m) * (v[i] - m);
    return sqrt(ss / (n - 1) / n);
}

static ss_space *space_of(const char *spec, ss_dag **dag)
{
    ss_space *sp;
    char err[512];
    if (kn_op_build(spec, dag, err, sizeof err) != AT_OK)
        die(spec, err);
    if (ss_space_new(*dag, &hw, NULL, &sp, err, sizeof err) != AT_OK)
        die(spec, err);
    return sp;
}

static int sample(ss_space *sp, uint64_t seed, ss_state **out, int n)
{
    at_rng rng;
    int k = 0;
    at_rng_seed(&rng, seed);
    while (k < n)
        if (ss_space_sample(sp, &rng, &out[k]) == AT_OK)
            k++;
    return k;
}

/* How the data set and the corpus are measured: through the embedded fleet, 2 kernel
** threads, 3 repeats of >= 0.5 ms, a state over 0.25 s timed once, no output check (the
** naive matmul 1024 alone takes seconds; tests check correctness). */
static void measure_cfg(tn_measure_cfg *o)
{
    memset(o, 0, sizeof *o);
    o->embedded_threads = 2;
    o->repeat = 3;
    o->min_repeat_ms = 0.5;
    o->cutoff_s = 0.25;
    o->timeout_ms = 60000;
    o->no_check = 1;
    o->build_worker_exe = access("build/rel/bin/tuner", X_OK) == 0 ? "build/rel/bin/tuner" : NULL;
    o->build_workers = o->build_worker_exe ? 2 : 0;
}

/* Records of each task in the cached store; measure what is missing. */
static rec_store *dataset(const char *path, int n_states, double budget_s)
{
    rec_store *st;
    char err[1024];
    tn_measure_cfg o;
    tn_measurer *ms;
    mkdir("build", 0777);
    mkdir("build/rel", 0777);
    mkdir("build/rel/bench", 0777);
    if (rec_store_open(path, REC_OPEN_CREATE, &st, err, sizeof err) != AT_OK)
        die(path, err);
    measure_cfg(&o);
    o.command_line = "bench_cost_model";
    o.quiet = 1;
    if (tn_measurer_open(st, &o, &ms, err, sizeof err) != AT_OK)
        die(path, err);
    for (int t = 0; t < N_TASKS; t++) {
        ss_dag *dag;
        rec_filter f = {NULL, NULL, NULL, NULL};
        int64_t have = 0;
        rec_iter *it;
        const rec_record *r;
        if (kn_op_build(tasks[t].spec, &dag, err, sizeof err) != AT_OK)
            die(tasks[t].spec, err);
        f.workload_key = dag->key;
        if (rec_iter_open(st, &f, REC_ORDER_ID, &it) != AT_OK)
            die(path, rec_store_errmsg(st));
        while (rec_iter_next(it, &r) == AT_OK && r)
            have++;
        rec_iter_close(it);
        if (have < n_states) {
            /* in chunks, until n_states or the time budget: random states of a big matmul
            ** take from 60 ms to 12 s each */
            double t0 = at_time_mono_s();
            int measured = 0, failed = 0;
            fprintf(stderr, "# measuring up to %d random states of %s into %s (%.0f s at most; "
                    "kept for later runs)\n", (int)(n_states - have), tasks[t].spec, path,
                    budget_s);
            while (have < n_states && at_time_mono_s() - t0 < budget_s) {
                tn_dataset_stats s;
                int chunk = (int)AT_MIN(50, n_states - have);
                if (tn_dataset_random(ms, dag, chunk, 1000 + (uint64_t)have, &s, err,
                                      sizeof err) != AT_OK)
                    die(tasks[t].spec, err);
                have += s.n_measured;
                measured += s.n_measured;
                failed += s.n_failed;
                if (s.n_measured == 0)
                    break;
            }
            fprintf(stderr, "# measured %d (%d failed) in %.0f s\n", measured, failed,
                    at_time_mono_s() - t0);
        }
        ss_dag_unref(dag);
    }
    tn_measurer_close(ms, 0);
    return st;
}

/* The pre-training corpus (tn_dataset_corpus: random states of other workloads, none of
** them one of ours), measured as the data set is into its own cached store. */
static rec_store *corpus(const char *path, int n)
{
    rec_store *st;
    char err[1024];
    const char *skip[N_TASKS];
    ss_dag *dags[N_TASKS];
    tn_measure_cfg o;
    tn_measurer *ms;
    tn_corpus_stats s;
    if (rec_store_open(path, REC_OPEN_CREATE, &st, err, sizeof err) != AT_OK)
        die(path, err);
    for (int t = 0; t < N_TASKS; t++) {
        if (kn_op_build(tasks[t].spec, &dags[t], err, sizeof err) != AT_OK)
            die(tasks[t].spec, err);
        skip[t] = dags[t]->key;
    }
    measure_cfg(&o);
    o.command_line = "bench_cost_model --corpus";
    o.quiet = 1;
    if (tn_measurer_open(st, &o, &ms, err, sizeof err) != AT_OK)
        die(path, err);
    if (tn_dataset_corpus(ms, n, 1, skip, N_TASKS, &s, err, sizeof err) != AT_OK)
        die("corpus", err);
    tn_measurer_close(ms, 0);
    if (s.n_measured)
        fprintf(stderr, "# corpus %s: measured %d random states (%d failed) in %.0f s; kept "
                "for later runs\n", path, s.n_measured, s.n_failed, s.seconds);
    fprintf(stderr, "# corpus %s: %d workloads, %d records\n", path, s.n_workloads,
            s.n_present + s.n_measured);
    for (int t = 0; t < N_TASKS; t++)
        ss_dag_unref(dags[t]);
    return st;
}

static void bench_throughput(cm_model *trained)
{
    ss_dag *dag;
    ss_space *sp = space_of(tasks[1].spec, &dag);
    ss_state **pop = malloc(POP * sizeof *pop);
    const ss_state **cpop = (const ss_state **)pop;
    double *scores = malloc(POP * sizeof *scores), ext[REPS], pred[REPS];
    cm_feats f;
    char err[256];
    cm_feats_init(&f);
    sample(sp, 7, pop, POP);
    for (int r = 0; r < REPS; r++) {
        double t0 = at_time_mono_s();
        for (int i = 0; i < POP; i++)
            if (cm_features_of_state(pop[i], &f, err, sizeof err) != AT_OK)
                die("features", err);
        ext[r] = POP / (at_time_mono_s() - t0);
        t0 = at_time_mono_s();
        if (cm_model_predict(trained, (const ss_state *const *)cpop, POP, scores) != AT_OK)
            die("predict", "XGBoost failed");
        pred[r] = at_time_mono_s() - t0;
    }
    printf("bench cost_model_extract_rate %.0f states/s\n", at_median_sort(ext, REPS));
    printf("bench cost_model_predict_rate %.0f states/s\n", POP / at_median_sort(pred, REPS));
    printf("bench cost_model_population_2048 %.3f s\n", at_median_sort(pred, REPS));
    printf("bench cost_model_population_2048/goal_1s %.2f x\n", 1.0 / at_median_sort(pred, REPS));
    {
        /* the caches simulated (cm_sim.c) over the first 64 states: what re-ranking a
        ** round's best candidates with them would cost */
        cm_sim_params sp_;
        double c[CM_SIM_N], t0, secs;
        cm_sim_params_init(&sp_, &host);
        t0 = at_time_mono_s();
        for (int i = 0; i < SIM_N; i++) {
            kn_ir *ir;
            if (kn_lower(pop[i], &ir, err, sizeof err) != AT_OK)
                die("lower", err);
            if (cm_sim_run(ir, &sp_, c, err, sizeof err) != AT_OK)
                die("cache simulation", err);
            kn_ir_free(ir);
        }
        secs = at_time_mono_s() - t0;
        printf("bench cost_model_cache_sim_rate %.1f states/s\n", SIM_N / secs);
        printf("bench cost_model_cache_sim_256 %.2f s\n", 256 * secs / SIM_N);
        /* the machine code read back (cm_code.c) over the same states, each built */
        t0 = at_time_mono_s();
        for (int i = 0; i < SIM_N && host.is_x86; i++) {
            kn_artifact *a;
            double cc[CM_CODE_N];
            if (kn_build_state(pop[i], &host, NULL, &a, err, sizeof err) != AT_OK)
                die("build", err);
            if (cm_code_run(a, &host, cc, err, sizeof err) != AT_OK)
                die("reading the code", err);
            kn_artifact_free(a);
        }
        secs = at_time_mono_s() - t0;
        if (host.is_x86)
            printf("bench cost_model_code_rate %.1f states/s\n", SIM_N / secs);
    }
    for (int i = 0; i < POP; i++)
        ss_state_free(pop[i]);
    free(pop);
    free(scores);
    cm_feats_fini(&f);
    ss_space_free(sp);
    ss_dag_unref(dag);
}

/* 10,000 programs of both tasks, labelled by the trained model. */
static void bench_training(cm_model *trained, const cm_params *p)
{
    enum { N = 10000 };
    cm_sample *s = calloc(N, sizeof *s);
    cm_feats *f = calloc(N, sizeof *f);
    const cm_feats **fp = calloc(N, sizeof *fp);
    double *sc = malloc(N * sizeof *sc), secs[3];
    cm_data *d;
    cm_feats tmp;
    int n = 0;
    char err[512];
    cm_feats_init(&tmp);
    for (int t = 0; t < N_TASKS; t++) {
        ss_dag *dag;
        ss_space *sp = space_of(tasks[t].spec, &dag);
        at_rng rng;
        at_rng_seed(&rng, 99 + (uint64_t)t);
        while (n < N * (t + 1) / N_TASKS) {
            ss_state *st;
            if (ss_space_sample(sp, &rng, &st) != AT_OK)
                continue;
            /* extract with one scratch, keep only the rows */
            cm_feats_init(&f[n]);
            if (cm_features_of_state(st, &tmp, err, sizeof err) == AT_OK &&
                cm_feats_copy(&f[n], &tmp) == AT_OK) {
                s[n].task = tasks[t].name;
                s[n].feats = &f[n];
                fp[n] = &f[n];
                n++;
            } else {
                cm_feats_fini(&f[n]);
            }
            ss_state_free(st);
        }
        ss_space_free(sp);
        ss_dag_unref(dag);
    }
    if (cm_model_predict_feats(trained, fp, n, sc) != AT_OK)
        die("predict", "XGBoost failed");
    for (int i = 0; i < n; i++)
        s[i].cost_s = exp(-sc[i]); /* a higher score means faster */
    if (cm_data_new(&d) != AT_OK || cm_data_add(d, s, n, NULL) != AT_OK)
        die("data", "out of memory");
    for (int r = 0; r < 3; r++) {
        cm_model *m;
        cm_train_info ti;
        if (cm_model_new(p, &m) != AT_OK || cm_model_fit(m, d, err, sizeof err) != AT_OK)
            die("training", err);
        cm_model_train_info(m, &ti);
        secs[r] = ti.seconds;
        if (r == 0)
            fprintf(stderr, "# training set: %d programs, %lld rows, %d rounds\n", ti.n_programs,
                    (long long)ti.n_rows, ti.n_rounds);
        cm_model_free(m);
    }
    printf("bench cost_model_train_10000 %.2f s\n", at_median_sort(secs, 3));
    for (int i = 0; i < n; i++)
        cm_feats_fini(&f[i]);
    cm_feats_fini(&tmp);
    cm_data_free(d);
    free(s);
    free(f);
    free(fp);
    free(sc);
}

/* Over DRAWS random held-out sized (20 %) subsets of n programs with two costs each, a[]
** and b[]: how often the fastest by a is the fastest by b (*r1) and the mean overlap of
** the 5 fastest by each (*r5). */
#define DRAWS 200
static void agreement(const double *a, const double *b, int n, double *r1, double *r5)
{
    int *sub = malloc((size_t)n * sizeof *sub), *bya = malloc((size_t)n * sizeof *bya),
        *byb = malloc((size_t)n * sizeof *byb);
    at_rng rng;
    if (!sub || !bya || !byb)
        die("agreement", "out of memory");
    *r1 = *r5 = 0;
    at_rng_seed(&rng, 5);
    for (int d = 0; d < DRAWS; d++) {
        int m = n / 5, h5 = 0;
        for (int i = 0; i < n; i++)
            sub[i] = i;
        for (int i = 0; i < m; i++) { /* a partial Fisher-Yates shuffle */
            int j = i + (int)at_rng_below(&rng, (uint64_t)(n - i)), x = sub[i];
            sub[i] = sub[j];
            sub[j] = x;
        }
        for (int i = 0; i < m; i++)
            bya[i] = byb[i] = sub[i];
        for (int i = 1; i < m; i++) /* insertion sorts: m is small */
            for (int j = i; j > 0 && a[bya[j]] < a[bya[j - 1]]; j--) {
                int x = bya[j];
                bya[j] = bya[j - 1];
                bya[j - 1] = x;
            }
        for (int i = 1; i < m; i++)
            for (int j = i; j > 0 && b[byb[j]] < b[byb[j - 1]]; j--) {
                int x = byb[j];
                byb[j] = byb[j - 1];
                byb[j - 1] = x;
            }
        for (int x = 0; x < 5; x++)
            for (int y = 0; y < 5; y++)
                h5 += bya[x] == byb[y];
        *r1 += bya[0] == byb[0];
        *r5 += h5 / 5.0;
    }
    *r1 /= DRAWS;
    *r5 /= DRAWS;
    free(sub);
    free(bya);
    free(byb);
}

/* The ceiling measurement noise puts on top-k recall: over 200 random held-out sized (20 %)
** subsets of a task's records timed at least 3 times, the overlap of the k fastest by the
** first repeat with the k fastest by the best of the others.  It sees the noise between
** the repeats of one job only (they run back to back); bench_remeasured sees the rest. */
static void bench_noise_ceiling(rec_store *st, int t)
{
    enum { MAXN = 8192 };
    static double first[MAXN], rest[MAXN];
    int n = 0;
    double r1, r5;
    rec_filter f = {NULL, NULL, NULL, NULL};
    rec_iter *it;
    const rec_record *r;
    ss_dag *dag;
    char err[512];
    if (kn_op_build(tasks[t].spec, &dag, err, sizeof err) != AT_OK)
        die(tasks[t].spec, err);
    f.workload_key = dag->key;
    if (rec_iter_open(st, &f, REC_ORDER_ID, &it) != AT_OK)
        die("records", rec_store_errmsg(st));
    while (rec_iter_next(it, &r) == AT_OK && r && n < MAXN) {
        if (r->status != 0 || r->n_costs < 3)
            continue;
        first[n] = r->costs[0];
        rest[n] = r->costs[1];
        for (int c = 2; c < r->n_costs; c++)
            rest[n] = AT_MIN(rest[n], r->costs[c]);
        n++;
    }
    rec_iter_close(it);
    ss_dag_unref(dag);
    if (n < 25)
        return;
    agreement(first, rest, n, &r1, &r5);
    printf("bench cost_model_%s_top1_recall_noise_ceiling %.2f\n", tasks[t].name, r1);
    printf("bench cost_model_%s_top5_recall_noise_ceiling %.2f\n", tasks[t].name, r5);
    fprintf(stderr, "# %s: noise ceiling over %d records timed 3 times or more\n", tasks[t].name,
            n);
}

/* A record's cost as the labels take it: the fastest repeat. */
static double rec_cost(const rec_record *r)
{
    double c = r->costs[0];
    for (int i = 1; i < r->n_costs; i++)
        c = AT_MIN(c, r->costs[i]);
    return c;
}

/* ---- the data set measured more than once (--passes) --------------------------------------
** On a shared 2-core host a program's time moves between measurements minutes apart by
** far more than between the repeats of one job (the host's speed, another tenant on one of
** the two cores, a kernel's pages): the same 200 convolutions measured twice back to back
** differ by over 15 % for a third of them and one measurement's 5 fastest of a 20 % subset
** are another's for 0.88 (docs/cost_model.md, "Labels").  So every successful state of the
** data set is measured --passes times in all (the data set and N-1 stores of their own, kept
** like it: <db>_pass2.db and on; what is missing is measured), and a program's label is its
** fastest over the passes, as it is already the fastest of one job's repeats (and as a
** tuning run keeps the faster of a re-timed best); the corpus --corpus-passes times the
** same way.  The passes of one host only: the states are the same on every host (seeded). */
#define MAX_PASSES 8
static int n_passes = 4, n_corpus_passes = 1;

typedef struct {
    uint64_t h;              /* of the workload key and the state: the lookup key */
    const char *key, *state; /* owned by the set's strings */
    const char *dag;         /* the task's DAG text, shared by its records */
    double c[MAX_PASSES];    /* fastest repeat in each pass; 0: failed there, -1: missing */
} pass_rec;

typedef struct {
    int n, cap, n_passes;
    pass_rec *r; /* the store's successful records in its stable order (a task at a time) */
    int *by_h;   /* r's indexes by h */
    char **strs; /* every string the records point to */
    int n_strs, cap_strs;
} pass_set;
static pass_set data_passes, corpus_passes;

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

static uint64_t rec_hash(const char *key, const char *state)
{
    return fnv(fnv(14695981039346656037ull, key, strlen(key) + 1), state, strlen(state));
}

static const char *pass_str(pass_set *ps, const char *s)
{
    if (ps->n_strs == ps->cap_strs) {
        ps->cap_strs = ps->cap_strs ? 2 * ps->cap_strs : 1024;
        if ((ps->strs = realloc(ps->strs, (size_t)ps->cap_strs * sizeof *ps->strs)) == NULL)
            die("passes", "out of memory");
    }
    if ((ps->strs[ps->n_strs] = strdup(s)) == NULL)
        die("passes", "out of memory");
    return ps->strs[ps->n_strs++];
}

static void pass_set_free(pass_set *ps)
{
    for (int i = 0; i < ps->n_strs; i++)
        free(ps->strs[i]);
    free(ps->strs);
    free(ps->r);
    free(ps->by_h);
    memset(ps, 0, sizeof *ps);
}

static const pass_set *sort_set; /* for by_h_cmp */
static int by_h_cmp(const void *a, const void *b)
{
    uint64_t x = sort_set->r[*(const int *)a].h, y = sort_set->r[*(const int *)b].h;
    return x < y ? -1 : x > y;
}

/* The record of 'key' and 'state' in ps, or NULL. */
static pass_rec *pass_find(const pass_set *ps, const char *key, const char *state)
{
    uint64_t h = rec_hash(key, state);
    int lo = 0, hi = ps->n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (ps->r[ps->by_h[mid]].h < h)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (; lo < ps->n && ps->r[ps->by_h[lo]].h == h; lo++) {
        pass_rec *p = &ps->r[ps->by_h[lo]];
        if (strcmp(p->key, key) == 0 && strcmp(p->state, state) == 0)
            return p;
    }
    return NULL;
}

static void pass_file(char *out, size_t n, const char *db, int k)
{
    size_t len = strlen(db);
    if (len > 3 && strcmp(db + len - 3, ".db") == 0)
        len -= 3;
    snprintf(out, n, "%.*s_pass%d.db", (int)len, db, k + 1);
}

/* The fastest over passes 'from' to 'to' (excluded) of p. */
static double pass_min(const pass_rec *p, int from, int to)
{
    double c = INFINITY;
    for (int k = from; k < to; k++)
        if (p->c[k] > 0)
            c = AT_MIN(c, p->c[k]);
    return c;
}

/* Pass k's store (this host's records) read into ps. */
static void pass_read(pass_set *ps, rec_store *st2, const char *file, int k)
{
    rec_filter f2 = {NULL, host.text, NULL, NULL};
    rec_iter *it;
    const rec_record *r;
    pass_rec *p;
    if (rec_iter_open(st2, &f2, REC_ORDER_ID, &it) != AT_OK)
        die(file, rec_store_errmsg(st2));
    while (rec_iter_next(it, &r) == AT_OK && r)
        if ((p = pass_find(ps, r->workload_key, r->state)) != NULL && p->c[k] < 0)
            p->c[k] = r->status == 0 && r->n_costs > 0 ? rec_cost(r) : 0;
    rec_iter_close(it);
}

/* The states of ps->r[from..to) (one task) missing from pass k, measured into st2. */
static void pass_measure_task(pass_set *ps, int from, int to, int k, rec_store *st2,
                              const char *file)
{
    ss_dag *dag;
    ss_state **miss = malloc((size_t)(to - from + 1) * sizeof *miss);
    int n_miss = 0;
    char err[1024];
    if (miss == NULL)
        die("passes", "out of memory");
    if (ss_dag_parse(ps->r[from].dag, strlen(ps->r[from].dag), &dag, err, sizeof err) != AT_OK) {
        free(miss); /* as cm_data_load_store: a task whose DAG does not parse is not loaded */
        return;
    }
    for (int i = from; i < to; i++)
        if (ps->r[i].c[k] < 0 && ss_state_from_json(dag, ps->r[i].state, strlen(ps->r[i].state),
                                                    &miss[n_miss], err, sizeof err) == AT_OK)
            n_miss++;
    if (n_miss) {
        tn_measure_cfg o;
        tn_measurer *ms;
        tn_measure_res *res = malloc((size_t)n_miss * sizeof *res);
        double t0 = at_time_mono_s();
        if (!res)
            die("passes", "out of memory");
        measure_cfg(&o);
        o.command_line = "bench_cost_model (a pass over the data set)";
        o.quiet = 1;
        if (tn_measurer_open(st2, &o, &ms, err, sizeof err) != AT_OK)
            die(file, err);
        for (int i = 0; i < n_miss; i += 50)
            if (tn_measurer_run(ms, dag, (const ss_state *const *)miss + i,
                                AT_MIN(50, n_miss - i), res + i, err, sizeof err) != AT_OK)
                die(file, err);
        tn_measurer_close(ms, 0);
        free(res);
        fprintf(stderr, "# %s (pass %d): %d states of task %.12s measured in %.0f s (kept for "
                "later runs)\n", file, k + 1, n_miss, ps->r[from].key, at_time_mono_s() - t0);
    }
    for (int i = 0; i < n_miss; i++)
        ss_state_free(miss[i]);
    free(miss);
    ss_dag_unref(dag);
}

/* The successful records of 'st' matching 'f' and their time in each of 'n' passes, the
** first the store itself, the others in stores of their own named after 'db'; what a pass
** lacks is measured, a task at a time. */
static void passes_measure(rec_store *st, const char *db, const rec_filter *f, int n,
                           pass_set *ps)
{
    rec_iter *it;
    const rec_record *r;
    const char *dag = NULL;
    char file[1100], err[1024];
    memset(ps, 0, sizeof *ps);
    ps->n_passes = n;
    if (rec_iter_open(st, f, REC_ORDER_STABLE, &it) != AT_OK)
        die("records", rec_store_errmsg(st));
    while (rec_iter_next(it, &r) == AT_OK && r)
        if (r->status == 0 && r->n_costs > 0) {
            pass_rec *p;
            if (ps->n == ps->cap) {
                ps->cap = ps->cap ? 2 * ps->cap : 256;
                if ((ps->r = realloc(ps->r, (size_t)ps->cap * sizeof *ps->r)) == NULL)
                    die("passes", "out of memory");
            }
            if (dag == NULL || strcmp(dag, r->dag) != 0)
                dag = pass_str(ps, r->dag);
            p = &ps->r[ps->n++];
            p->key = pass_str(ps, r->workload_key);
            p->state = pass_str(ps, r->state);
            p->dag = dag;
            p->h = rec_hash(p->key, p->state);
            for (int k = 0; k < MAX_PASSES; k++)
                p->c[k] = -1;
            p->c[0] = rec_cost(r);
        }
    rec_iter_close(it);
    if ((ps->by_h = malloc((size_t)(ps->n + 1) * sizeof *ps->by_h)) == NULL)
        die("passes", "out of memory");
    for (int i = 0; i < ps->n; i++)
        ps->by_h[i] = i;
    sort_set = ps;
    qsort(ps->by_h, (size_t)ps->n, sizeof *ps->by_h, by_h_cmp);
    for (int k = 1; k < n; k++) {
        rec_store *st2;
        pass_file(file, sizeof file, db, k);
        if (rec_store_open(file, REC_OPEN_CREATE, &st2, err, sizeof err) != AT_OK)
            die(file, err);
        pass_read(ps, st2, file, k);
        for (int from = 0, to; from < ps->n; from = to) {
            int missing = 0;
            for (to = from; to < ps->n && ps->r[to].dag == ps->r[from].dag; to++)
                missing += ps->r[to].c[k] < 0;
            if (missing)
                pass_measure_task(ps, from, to, k, st2, file);
        }
        pass_read(ps, st2, file, k);
        rec_store_close(st2);
    }
}

/* The labels: each measured program of 'd' (loaded from 'st' with 'f', in its stable order)
** gets its fastest time over ps's passes.  The order is checked against the costs loaded. */
static void passes_apply(rec_store *st, const rec_filter *f, const pass_set *ps, cm_data *d,
                         const char *what)
{
    rec_iter *it;
    const rec_record *r;
    ss_dag *dag = NULL;
    char *dag_text = NULL, err[512];
    int i = 0, faster = 0, found = 0;
    if (ps->n_passes < 2)
        return;
    if (rec_iter_open(st, f, REC_ORDER_STABLE, &it) != AT_OK)
        die("records", rec_store_errmsg(st));
    while (rec_iter_next(it, &r) == AT_OK && r) {
        ss_state *s = NULL;
        const pass_rec *p;
        double c = AT_MEASURE_FAIL_COST, best;
        if (dag_text == NULL || strcmp(dag_text, r->dag) != 0) { /* as cm_data_load_store */
            ss_dag_unref(dag);
            dag = NULL;
            free(dag_text);
            if ((dag_text = strdup(r->dag)) == NULL)
                die("passes", "out of memory");
            if (ss_dag_parse(r->dag, strlen(r->dag), &dag, err, sizeof err) != AT_OK)
                dag = NULL;
        }
        if (dag == NULL ||
            ss_state_from_json(dag, r->state, strlen(r->state), &s, err, sizeof err) != AT_OK)
            continue;
        ss_state_free(s);
        if (r->status == 0)
            for (int k = 0; k < r->n_costs; k++)
                if (r->costs[k] > 0 && r->costs[k] < c)
                    c = r->costs[k];
        if (i >= cm_data_count(d) || fabs(cm_data_cost(d, i) - c) > 1e-9 * c)
            die(what, "the loaded set is not the store's records in their order (delete "
                      "build/rel/bench/cache)");
        if (r->status == 0 && (p = pass_find(ps, r->workload_key, r->state)) != NULL) {
            found++;
            best = pass_min(p, 0, ps->n_passes);
            if (best < c) {
                faster++;
                if (cm_data_set_cost(d, i, best) != AT_OK)
                    die(what, "cm_data_set_cost refused a label");
            }
        }
        i++;
    }
    rec_iter_close(it);
    ss_dag_unref(dag);
    free(dag_text);
    if (i != cm_data_count(d))
        die(what, "the loaded set is not the store's records (delete build/rel/bench/cache)");
    fprintf(stderr, "# %s's labels: each program's fastest of %d measurements (%d programs; "
            "%d faster in another pass than in the store's)\n", what, ps->n_passes, found,
            faster);
}

/* How the passes agree on task t's programs: the data set's against pass 2's, pairwise
** (costs differing by more than 5 % in the data set) and top-1 / top-5 recall over the noise
** ceiling's subsets; that is the ceiling for labels of one measurement.  With 4 passes or
** more, also the fastest of the first half against the fastest of the rest: the ceiling
** for labels of half the passes (the labels, of all of them, are steadier still). */
static void bench_remeasured(int t)
{
    const pass_set *ps = &data_passes;
    double *a = malloc((size_t)(ps->n + 1) * sizeof *a);
    double *b = malloc((size_t)(ps->n + 1) * sizeof *b);
    double r1, r5;
    int n2 = 0, ok = 0, pairs = 0, n_task = 0, np = ps->n_passes;
    ss_dag *dag;
    char err[512];
    if (!a || !b)
        die("passes", "out of memory");
    if (kn_op_build(tasks[t].spec, &dag, err, sizeof err) != AT_OK)
        die(tasks[t].spec, err);
    for (int i = 0; i < ps->n; i++)
        if (strcmp(ps->r[i].key, dag->key) == 0) {
            n_task++;
            if (np >= 2 && ps->r[i].c[1] > 0) {
                a[n2] = ps->r[i].c[0];
                b[n2++] = ps->r[i].c[1];
            }
        }
    if (n2 >= 25) {
        for (int i = 0; i < n2; i++)
            for (int j = i + 1; j < n2; j++)
                if (AT_MAX(a[i], a[j]) > 1.05 * AT_MIN(a[i], a[j])) {
                    pairs++;
                    ok += (a[i] < a[j]) == (b[i] < b[j]);
                }
        agreement(a, b, n2, &r1, &r5);
        printf("bench cost_model_%s_pairwise_acc_remeasured %.3f\n", tasks[t].name,
               (double)ok / AT_MAX(pairs, 1));
        printf("bench cost_model_%s_top1_recall_remeasured %.2f\n", tasks[t].name, r1);
        printf("bench cost_model_%s_top5_recall_remeasured %.2f\n", tasks[t].name, r5);
        for (int i = 0; i < n2; i++)
            a[i] = b[i] / a[i];
        qsort(a, (size_t)n2, sizeof *a, cmp_double);
        fprintf(stderr, "# %s: %d of %d records measured again; second / first cost: 10th "
                "percentile %.2f, median %.2f, 90th %.2f\n", tasks[t].name, n2, n_task,
                a[n2 / 10], a[n2 / 2], a[n2 * 9 / 10]);
    }
    n2 = 0;
    for (int i = 0; i < ps->n && np >= 4; i++)
        if (strcmp(ps->r[i].key, dag->key) == 0) {
            double x = pass_min(&ps->r[i], 0, np / 2), y = pass_min(&ps->r[i], np / 2, np);
            if (isfinite(x) && isfinite(y)) {
                a[n2] = x;
                b[n2++] = y;
            }
        }
    if (n2 >= 25) {
        agreement(a, b, n2, &r1, &r5);
        printf("bench cost_model_%s_top1_recall_half_passes %.2f\n", tasks[t].name, r1);
        printf("bench cost_model_%s_top5_recall_half_passes %.2f\n", tasks[t].name, r5);
    }
    ss_dag_unref(dag);
    free(a);
    free(b);
}

/* Train n_ensemble models on tr (seeds apart) and score te with the sum of their scores. */
/* --contribs (an experiment): with the corpus, each split's false positives (in the model's
** five, not in the measured five) against its misses (the other way round): each column's
** SHAP contribution to the false positive's score minus to the miss's, summed over the
** pairs of all splits, per task; printed at the end of the run */
static int order_by(const double *sc, int n, int *ord);
static int contribs_on = 0, contribs_now = 0, contribs_task = 0;
static double contrib_sum[2][CM_N_FEATS + 1], contrib_abs[2][CM_N_FEATS + 1];
static int contrib_pairs[2];

static void prog_contribs(BoosterHandle h, const cm_data *te, int i, double *out)
{
    int nr;
    const float *x = cm_data_rows(te, i, &nr);
    DMatrixHandle dm;
    bst_ulong len;
    const float *res;
    for (int k = 0; k <= CM_N_FEATS; k++)
        out[k] = 0;
    if (nr < 1)
        return;
    if (XGDMatrixCreateFromMat(x, (bst_ulong)nr, CM_N_FEATS, NAN, &dm) != 0 ||
        XGBoosterPredict(h, dm, 4, 0, 0, &len, &res) != 0)
        die("contribs", XGBGetLastError());
    if (len != (bst_ulong)nr * (CM_N_FEATS + 1))
        die("contribs", "unexpected length");
    for (int r = 0; r < nr; r++)
        for (int k = 0; k <= CM_N_FEATS; k++)
            out[k] += res[(size_t)r * (CM_N_FEATS + 1) + k];
    XGDMatrixFree(dm);
}

/* Whether v is among the first k of ord[0..m). */
static int in_first(const int *ord, int m, int k, int v)
{
    for (int y = 0; y < AT_MIN(k, m); y++)
        if (ord[y] == v)
            return 1;
    return 0;
}

static void contribs(cm_model *m, const cm_data *te, const double *sc)
{
    int n = cm_data_count(te), *po = malloc((size_t)(n + 1) * sizeof *po);
    int *co = malloc((size_t)(n + 1) * sizeof *co);
    double *a = malloc((CM_N_FEATS + 1) * sizeof *a);
    double *b = malloc(5 * (CM_N_FEATS + 1) * sizeof *b), *cost = malloc((size_t)(n + 1) * sizeof *cost);
    BoosterHandle h = cm__model_boost(m);
    int np, nc, t = contribs_task, n_miss = 0;
    if (!po || !co || !a || !b || !cost)
        die("contribs", "out of memory");
    if (h == NULL)
        die("contribs", "the model has no booster of its own");
    for (int i = 0; i < n; i++)
        cost[i] = cm_data_cost(te, i) > 0 ? -cm_data_cost(te, i) : CM_SCORE_INVALID;
    np = order_by(sc, n, po);
    nc = order_by(cost, n, co);
    for (int y = 0; y < AT_MIN(5, nc); y++) /* the misses' contributions, once each */
        if (!in_first(po, np, 5, co[y])) {
            prog_contribs(h, te, co[y], b + n_miss * (CM_N_FEATS + 1));
            n_miss++;
        }
    for (int x = 0; x < AT_MIN(5, np) && n_miss > 0; x++) {
        if (in_first(co, nc, 5, po[x]))
            continue;
        prog_contribs(h, te, po[x], a);
        for (int y = 0; y < n_miss; y++) {
            const double *bm = b + y * (CM_N_FEATS + 1);
            for (int k = 0; k <= CM_N_FEATS; k++) {
                contrib_sum[t][k] += a[k] - bm[k];
                contrib_abs[t][k] += fabs(a[k] - bm[k]);
            }
            contrib_pairs[t]++;
        }
    }
    free(po), free(co), free(a), free(b), free(cost);
}

static void contribs_print(const char *task, int t)
{
    int order[CM_N_FEATS + 1];
    for (int k = 0; k <= CM_N_FEATS; k++)
        order[k] = k;
    for (int i = 0; i <= CM_N_FEATS; i++) /* by the summed difference, largest first */
        for (int j = i + 1; j <= CM_N_FEATS; j++)
            if (contrib_sum[t][order[j]] > contrib_sum[t][order[i]]) {
                int s = order[i];
                order[i] = order[j];
                order[j] = s;
            }
    fprintf(stderr, "# contribs %s: %d pairs (false positive - miss), the columns by mean "
                    "difference (mean |difference|)\n", task, contrib_pairs[t]);
    for (int i = 0; i <= CM_N_FEATS && contrib_pairs[t]; i++) {
        int k = order[i];
        if (i < 25 || i > CM_N_FEATS - 8)
            fprintf(stderr, "#   %-28s %+.3f (%.3f)\n", k < CM_N_FEATS ? cm_feature_name(k) : "bias",
                    contrib_sum[t][k] / contrib_pairs[t], contrib_abs[t][k] / contrib_pairs[t]);
    }
}

static void fit_predict(const cm_data *tr, const cm_params *p, const cm_data *te, double *sc)
{
    int n = cm_data_count(te);
    double *one = malloc((size_t)(n + 1) * sizeof *one);
    char err[512];
    if (one == NULL)
        die("predict", "out of memory");
    for (int i = 0; i < n; i++)
        sc[i] = 0;
    for (int k = 0; k < n_ensemble; k++) {
        cm_params q = *p;
        cm_model *m;
        q.seed = p->seed + 7919 * (uint64_t)k;
        if (cm_model_new(&q, &m) != AT_OK)
            die("model", "out of memory");
        if (cm_model_fit(m, tr, err, sizeof err) != AT_OK)
            die("training", err);
        if (cm_model_predict_data(m, te, one) != AT_OK)
            die("predict", "XGBoost failed");
        for (int i = 0; i < n; i++)
            sc[i] += one[i];
        if (contribs_now && k == 0 && n_ensemble == 1)
            contribs(m, te, one);
        cm_model_free(m);
    }
    free(one);
}

/* A new set of a's programs then b's programs bi[0..nb) (bi NULL: its first nb). */
static cm_data *joined(const cm_data *a, const cm_data *b, const int *bi, int nb)
{
    cm_data *d;
    int n = AT_MAX(cm_data_count(a), nb);
    int *ix = malloc((size_t)(n + 1) * sizeof *ix);
    for (int i = 0; ix && i < n; i++)
        ix[i] = i;
    if (ix == NULL || cm_data_new(&d) != AT_OK ||
        cm_data_append(d, a, ix, cm_data_count(a)) != AT_OK ||
        cm_data_append(d, b, bi ? bi : ix, nb) != AT_OK)
        die("split", "out of memory");
    free(ix);
    return d;
}

/* --refine 1|2 (an experiment): with the corpus, a model trained on the corpus alone (once
** a run) is loaded as the base each split's model refines, as a tuning run refines a loaded
** model: 1 on the task's training programs only, 2 on those and the corpus again. */
static int refine_mode = 0;
static void *refine_blob = NULL;
static size_t refine_n = 0;

static void refine_predict(const cm_data *tr, const cm_data *corp, const cm_params *p,
                           const cm_data *te, double *sc)
{
    char err[512];
    cm_model *m;
    if (refine_blob == NULL) {
        cm_params q = *p;
        q.seed = 17 + 1000003 * (uint64_t)seed_base;
        if (cm_model_new(&q, &m) != AT_OK)
            die("model", "out of memory");
        if (cm_model_fit(m, corp, err, sizeof err) != AT_OK)
            die("training", err);
        if (cm_model_save(m, &refine_blob, &refine_n) != AT_OK)
            die("refine", "the corpus's model cannot be saved");
        cm_model_free(m);
    }
    if (cm_model_new(p, &m) != AT_OK)
        die("model", "out of memory");
    if (cm_model_load(m, refine_blob, refine_n, err, sizeof err) != AT_OK)
        die("refine", err);
    if (refine_mode == 2) {
        cm_data *tr2 = joined(tr, corp, NULL, cm_data_count(corp));
        if (cm_model_fit(m, tr2, err, sizeof err) != AT_OK)
            die("training", err);
        cm_data_free(tr2);
    } else if (cm_model_fit(m, tr, err, sizeof err) != AT_OK)
        die("training", err);
    if (cm_model_predict_data(m, te, sc) != AT_OK)
        die("predict", "XGBoost failed");
    cm_model_free(m);
}

/* Train on tr plus the programs xi[0..nx) of 'extra' (xi NULL: its first nx), score te. */
static void eval_with(const cm_data *tr, const cm_data *extra, const int *xi, int nx,
                      const cm_data *te, const cm_params *p, double *sc, cm_metrics *mt)
{
    cm_data *tr2 = joined(tr, extra, xi, nx);
    fit_predict(tr2, p, te, sc);
    cm_metrics_eval(te, sc, 1.05, mt);
    cm_data_free(tr2);
}

/* ---- ways of ranking with the trained comparator (--cmp-variants) ---------------------- */
#define N_VARIANTS 9
static int cmp_variants = 0;
static const char *const variant_names[N_VARIANTS] = {
    "final8", "final12", "final16", "elim", "modelsum", "model12", "known", "known20",
    "knownsum"};

typedef struct {
    double key;
    int i;
} keyed;

static int keyed_desc(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    if (x->key != y->key)
        return x->key > y->key ? -1 : 1;
    return x->i - y->i;
}

/* Indices of te's lowered programs by sc, best first, into ord; returns their count. */
static int order_by(const double *sc, int n, int *ord)
{
    keyed *k = malloc((size_t)(n + 1) * sizeof *k);
    int m = 0;
    if (k == NULL)
        die("variants", "out of memory");
    for (int i = 0; i < n; i++)
        if (sc[i] != CM_SCORE_INVALID)
            k[m].key = sc[i], k[m].i = i, m++;
    qsort(k, (size_t)m, sizeof *k, keyed_desc);
    for (int a = 0; a < m; a++)
        ord[a] = k[a].i;
    free(k);
    return m;
}

/* The comparator's scores of te's programs idx[0..k) among themselves into out[0..k). */
static void rank_among(cm_cmp *c, const cm_data *te, const int *idx, int k, double *out)
{
    cm_data *s;
    if (cm_data_new(&s) != AT_OK || cm_data_append(s, te, idx, k) != AT_OK ||
        cm_cmp_rank_data(c, s, out) != AT_OK)
        die("variants", "ranking failed");
    cm_data_free(s);
}

/* The first f of 'first' (an order, m long) re-ranked among themselves above the rest. */
static void finalists(cm_cmp *c, const cm_data *te, const int *first, int m, int f,
                      double *out)
{
    int n = cm_data_count(te), k = AT_MIN(f, m);
    double sub[64];
    for (int i = 0; i < n; i++)
        out[i] = CM_SCORE_INVALID;
    for (int a = 0; a < m; a++)
        out[first[a]] = -(double)a; /* the order outside the finalists */
    if (k > 64)
        k = 64;
    rank_among(c, te, first, k, sub);
    for (int a = 0; a < k; a++)
        out[first[a]] = 10 + sub[a];
}

/* Each variant's top-5 and top-1 recall on te (sc: the comparator's soft Borda over all of
** te; msc: the model's scores). */
static void eval_variants(cm_cmp *c, const cm_data *known, const cm_data *te, const double *sc,
                          const double *msc, double *v5, double *v1)
{
    int n = cm_data_count(te), m, mm;
    int *ord = malloc((size_t)(n + 1) * sizeof *ord), *mord = malloc((size_t)(n + 1) * sizeof *mord);
    int *alive = malloc((size_t)(n + 1) * sizeof *alive);
    double *out = malloc((size_t)(n + 1) * sizeof *out), *sub = malloc((size_t)(n + 1) * sizeof *sub);
    cm_metrics mt;
    if (!ord || !mord || !alive || !out || !sub)
        die("variants", "out of memory");
    m = order_by(sc, n, ord);
    mm = order_by(msc, n, mord);
    for (int v = 0; v < N_VARIANTS; v++) {
        switch (v) {
        case 0: case 1: case 2:
            finalists(c, te, ord, m, v == 0 ? 8 : v == 1 ? 12 : 16, out);
            break;
        case 3: { /* elimination: drop the weakest, rank the rest again, down to 5 */
            int na = m;
            for (int a = 0; a < m; a++)
                alive[a] = ord[a];
            for (int i = 0; i < n; i++)
                out[i] = sc[i] == CM_SCORE_INVALID ? CM_SCORE_INVALID : 0;
            while (na > 5) {
                int drop = na > 20 ? na / 4 : 1;
                keyed *k = malloc((size_t)na * sizeof *k);
                if (k == NULL)
                    die("variants", "out of memory");
                rank_among(c, te, alive, na, sub);
                for (int a = 0; a < na; a++)
                    k[a].key = sub[a], k[a].i = alive[a];
                qsort(k, (size_t)na, sizeof *k, keyed_desc);
                for (int a = na - drop; a < na; a++) /* dropped later: higher */
                    out[k[a].i] = -1000.0 + (double)(m - na) + k[a].key;
                na -= drop;
                for (int a = 0; a < na; a++)
                    alive[a] = k[a].i;
                free(k);
            }
            rank_among(c, te, alive, na, sub);
            for (int a = 0; a < na; a++)
                out[alive[a]] = 10 + sub[a];
            break;
        }
        case 4: /* the model's and the comparator's ranks summed */
            for (int i = 0; i < n; i++)
                out[i] = sc[i] == CM_SCORE_INVALID ? CM_SCORE_INVALID : 0;
            for (int a = 0; a < m; a++)
                out[ord[a]] -= a;
            for (int a = 0; a < mm; a++)
                if (out[mord[a]] != CM_SCORE_INVALID)
                    out[mord[a]] -= a;
            for (int a = 0; a < m; a++) /* ties: the comparator */
                out[ord[a]] += sc[ord[a]] * 1e-3;
            break;
        case 5: /* the model's 12 best, re-ranked by the comparator */
            finalists(c, te, mord, mm, 12, out);
            for (int i = 0; i < n; i++)
                if (sc[i] == CM_SCORE_INVALID)
                    out[i] = CM_SCORE_INVALID;
            break;
        case 6: case 7: /* placed among the training programs of the task (all, the 20 %
                        ** fastest), whose order is known */
            if (cm_cmp_rank_known(c, known, v == 6 ? 1 : 0.2, te, out) != AT_OK)
                die("variants", "ranking failed");
            break;
        default: /* that and the soft Borda among te summed */
            if (cm_cmp_rank_known(c, known, 1, te, out) != AT_OK)
                die("variants", "ranking failed");
            for (int i = 0; i < n; i++)
                if (out[i] != CM_SCORE_INVALID)
                    out[i] += sc[i];
            break;
        }
        cm_metrics_eval(te, out, 1.05, &mt);
        v5[v] = mt.top5_recall;
        v1[v] = mt.top1_recall;
    }
    free(ord), free(mord), free(alive), free(out), free(sub);
}

/* The comparator (cm_cmp) trained on tr plus 'extra' (all of it), ranking te. */
static void eval_cmp(const cm_data *tr, const cm_data *extra, const cm_data *te, uint64_t seed,
                     int max_pairs, double top_pairs, double *sc, cm_metrics *mt, const double *msc, double *v5,
                     double *v1)
{
    cm_data *tr2 = joined(tr, extra, NULL, cm_data_count(extra));
    cm_cmp *c;
    cm_cmp_params cp;
    char err[512];
    cm_cmp_params_default(&cp);
    cp.seed = seed;
    cp.n_threads = 2;
    cp.both_orders = cmp_orders == 2;
    cp.top_pairs = top_pairs;
    if (max_pairs > 0)
        cp.max_pairs = max_pairs;
    if (cm_cmp_new(&cp, &c) != AT_OK)
        die("comparator", "out of memory");
    if (cm_cmp_fit(c, tr2, err, sizeof err) != AT_OK)
        die("training the comparator", err);
    if (cm_cmp_rank_data(c, te, sc) != AT_OK)
        die("comparator", "ranking failed");
    cm_metrics_eval(te, sc, 1.05, mt);
    if (msc && cmp_variants)
        eval_variants(c, tr, te, sc, msc, v5, v1);
    cm_cmp_free(c);
    cm_data_free(tr2);
}

static void bench_quality(rec_store *st, const cm_data *all, const cm_data *corp,
                          const cm_params *base)
{
    for (int t = 0; t < N_TASKS; t++) {
        cm_data *d;
        int idx[8192], n = 0, oidx[8192], no = 0;
        static int sidx[16384];
        int ns = 0;
        double xacc[MAX_SPLITS], xr5[MAX_SPLITS];
        double cacc[MAX_SPLITS], cr1[MAX_SPLITS], cr5[MAX_SPLITS], cs1[MAX_SPLITS];
        double kacc[MAX_SPLITS], kr1[MAX_SPLITS], kr5[MAX_SPLITS];
        double k2acc[MAX_SPLITS], k2r1[MAX_SPLITS], k2r5[MAX_SPLITS];
        double vr5[N_VARIANTS][MAX_SPLITS], vr1[N_VARIANTS][MAX_SPLITS];
        double acc[CM_N_OBJS][MAX_SPLITS], r1[CM_N_OBJS][MAX_SPLITS], r5[CM_N_OBJS][MAX_SPLITS];
        double s1[CM_N_OBJS][MAX_SPLITS], s5[CM_N_OBJS][MAX_SPLITS];
        double med_acc[CM_N_OBJS];
        char err[512];
        ss_dag *dag;
        /* the data's tasks are named "workload key|target|fingerprint" */
        if (kn_op_build(tasks[t].spec, &dag, err, sizeof err) != AT_OK)
            die(tasks[t].spec, err);
        for (int i = 0; i < cm_data_count(all) && n < 8192 && no < 8192; i++)
            if (strncmp(cm_data_task_name(all, cm_data_task_of(all, i)), dag->key,
                        REC_KEY_LEN) == 0)
                idx[n++] = i;
            else
                oidx[no++] = i;
        ss_dag_unref(dag);
        if (corpus_same_op && corp) {
            /* the corpus workloads whose operator is this task's family */
            int conv = strncmp(tasks[t].spec, "conv2d:", 7) == 0;
            char keys[64][REC_KEY_LEN + 1];
            int nk = 0;
            for (int c = 0; c < tn_corpus_count() && nk < 64; c++) {
                const char *spec = tn_corpus_spec(c);
                int cconv = strncmp(spec, "conv2d:", 7) == 0;
                int cmm = !strncmp(spec, "matmul:", 7) || !strncmp(spec, "dense:", 6) ||
                          !strncmp(spec, "batch_matmul:", 13);
                ss_dag *cd;
                if (!(conv ? cconv : cmm))
                    continue;
                if (kn_op_build(spec, &cd, err, sizeof err) != AT_OK)
                    die(spec, err);
                memcpy(keys[nk], cd->key, REC_KEY_LEN);
                keys[nk++][REC_KEY_LEN] = 0;
                ss_dag_unref(cd);
            }
            ns = 0;
            for (int i = 0; i < cm_data_count(corp) && ns < 16384; i++)
                for (int k = 0; k < nk; k++)
                    if (strncmp(cm_data_task_name(corp, cm_data_task_of(corp, i)), keys[k],
                                REC_KEY_LEN) == 0) {
                        sidx[ns++] = i;
                        break;
                    }
            fprintf(stderr, "# %s: trained with %d corpus workloads of its operator, %d "
                            "programs\n", tasks[t].name, nk, ns);
        }
        if (cm_data_new(&d) != AT_OK || cm_data_append(d, all, idx, n) != AT_OK)
            die("data", "out of memory");
        for (int o = 0; o < CM_N_OBJS; o++) {
            for (int r = 0; r < n_splits; r++) {
                cm_params p = *base;
                cm_data *tr, *te;
                cm_metrics mt;
                double *sc;
                p.objective = (cm_objective)o;
                p.seed = 43 + (uint64_t)(split_base + r) + 1000003 * (uint64_t)seed_base;
                if (cm_data_split(d, 0.8, 500 + (uint64_t)(split_base + r), &tr, &te) != AT_OK)
                    die("split", "out of memory");
                sc = malloc((size_t)cm_data_count(te) * sizeof *sc);
                if (sc == NULL)
                    die("split", "out of memory");
                fit_predict(tr, &p, te, sc);
                cm_metrics_eval(te, sc, 1.05, &mt);
                acc[o][r] = mt.pairwise_acc;
                if (o == CM_OBJ_RANK) {
                    /* the same split, trained with every record of the other tasks too (as a
                    ** tuning run trains on its whole store) */
                    cm_metrics m2t;
                    eval_with(tr, all, oidx, no, te, &p, sc, &m2t);
                    xacc[r] = m2t.pairwise_acc;
                    xr5[r] = m2t.top5_recall;
                    if (corp) {
                        /* and with the pre-training corpus instead: other workloads */
                        if (corpus_same_op)
                            eval_with(tr, corp, sidx, ns, te, &p, sc, &m2t);
                        else {
                            contribs_now = contribs_on;
                            contribs_task = t;
                            if (refine_mode) {
                                refine_predict(tr, corp, &p, te, sc);
                                cm_metrics_eval(te, sc, 1.05, &m2t);
                            } else
                                eval_with(tr, corp, NULL, cm_data_count(corp), te, &p, sc,
                                          &m2t);
                            contribs_now = 0;
                        }
                        cacc[r] = m2t.pairwise_acc;
                        cr1[r] = m2t.top1_recall;
                        cr5[r] = m2t.top5_recall;
                        cs1[r] = m2t.top1_score;
                        if (dump_f && !use_cmp)
                            for (int i = 0; i < cm_data_count(te); i++) {
                                fprintf(dump_f, "%s %d %.9g %.9g", tasks[t].name, r,
                                        cm_data_cost(te, i), sc[i]);
                                dump_columns(te, i);
                            }
                        if (use_cmp) {
                            double *msc = malloc((size_t)cm_data_count(te) * sizeof *msc);
                            double v5[N_VARIANTS], v1[N_VARIANTS];
                            if (msc == NULL)
                                die("split", "out of memory");
                            memcpy(msc, sc, (size_t)cm_data_count(te) * sizeof *msc);
                            eval_cmp(tr, corp, te, p.seed, cmp_max_pairs, cmp_top_pairs, sc, &m2t,
                                     msc, v5, v1);
                            for (int i = 0; dump_f && i < cm_data_count(te); i++)
                                fprintf(dump_f, "%s %d %.9g %.9g %.9g\n", tasks[t].name, r,
                                        cm_data_cost(te, i), msc[i], sc[i]);
                            free(msc);
                            if (cmp_variants) {
                                fprintf(stderr, "# %s split %d: variants", tasks[t].name, r);
                                for (int v = 0; v < N_VARIANTS; v++) {
                                    vr5[v][r] = v5[v], vr1[v][r] = v1[v];
                                    fprintf(stderr, " %s %.2f %.0f", variant_names[v], v5[v], v1[v]);
                                }
                                fprintf(stderr, "\n");
                            }
                            kacc[r] = m2t.pairwise_acc;
                            kr1[r] = m2t.top1_recall;
                            kr5[r] = m2t.top5_recall;
                            if (cmp2) {
                                eval_cmp(tr, corp, te, p.seed, cmp_max_pairs2, cmp_top_pairs2, sc,
                                         &m2t, NULL, NULL,
                                         NULL);
                                k2acc[r] = m2t.pairwise_acc;
                                k2r1[r] = m2t.top1_recall;
                                k2r5[r] = m2t.top5_recall;
                                fprintf(stderr, "# %s split %d: comparator 2 top-5 %.2f "
                                        "top-1 %.0f\n", tasks[t].name, r, k2r5[r], k2r1[r]);
                            }
                            fprintf(stderr, "# %s split %d: comparator top-5 %.2f top-1 %.0f, "
                                    "model with the corpus %.2f %.0f\n", tasks[t].name, r,
                                    kr5[r], kr1[r], cr5[r], cr1[r]);
                        }
                    }
                }
                r1[o][r] = mt.top1_recall;
                r5[o][r] = mt.top5_recall;
                s1[o][r] = mt.top1_score;
                s5[o][r] = mt.top5_score;
                free(sc);
                cm_data_free(tr);
                cm_data_free(te);
            }
            /* the means first (at_median_sort sorts them): recall moves in steps of 1/k per split
             */
            printf("bench cost_model_%s_top1_recall_mean_%s %.3f\n", tasks[t].name,
                   cm_objective_name((cm_objective)o), mean(r1[o], n_splits));
            printf("bench cost_model_%s_top5_recall_mean_%s %.3f\n", tasks[t].name,
                   cm_objective_name((cm_objective)o), mean(r5[o], n_splits));
            printf("bench cost_model_%s_top5_recall_mean_se_%s %.3f\n", tasks[t].name,
                   cm_objective_name((cm_objective)o), mean_se(r5[o], n_splits));
            printf("bench cost_model_%s_top1_score_mean_%s %.3f\n", tasks[t].name,
                   cm_objective_name((cm_objective)o), mean(s1[o], n_splits));
            med_acc[o] = at_median_sort(acc[o], n_splits);
            printf("bench cost_model_%s_pairwise_acc_%s %.3f\n", tasks[t].name,
                   cm_objective_name((cm_objective)o), med_acc[o]);
            printf("bench cost_model_%s_top1_recall_%s %.2f\n", tasks[t].name,
                   cm_objective_name((cm_objective)o), at_median_sort(r1[o], n_splits));
            printf("bench cost_model_%s_top5_recall_%s %.2f\n", tasks[t].name,
                   cm_objective_name((cm_objective)o), at_median_sort(r5[o], n_splits));
            printf("bench cost_model_%s_top1_score_%s %.3f\n", tasks[t].name,
                   cm_objective_name((cm_objective)o), at_median_sort(s1[o], n_splits));
            printf("bench cost_model_%s_top5_score_%s %.3f\n", tasks[t].name,
                   cm_objective_name((cm_objective)o), at_median_sort(s5[o], n_splits));
        }
        if (no > 0) {
            printf("bench cost_model_%s_top5_recall_mean_with_others %.3f\n", tasks[t].name,
                   mean(xr5, n_splits));
            printf("bench cost_model_%s_pairwise_acc_with_others %.3f\n", tasks[t].name,
                   at_median_sort(xacc, n_splits));
        }
        if (corp) {
            printf("bench cost_model_%s_top1_recall_mean_with_corpus %.3f\n", tasks[t].name,
                   mean(cr1, n_splits));
            printf("bench cost_model_%s_top5_recall_mean_with_corpus %.3f\n", tasks[t].name,
                   mean(cr5, n_splits));
            printf("bench cost_model_%s_top5_recall_mean_se_with_corpus %.3f\n", tasks[t].name,
                   mean_se(cr5, n_splits));
            printf("bench cost_model_%s_top1_score_mean_with_corpus %.3f\n", tasks[t].name,
                   mean(cs1, n_splits));
            printf("bench cost_model_%s_pairwise_acc_with_corpus %.3f\n", tasks[t].name,
                   at_median_sort(cacc, n_splits));
            if (use_cmp) {
                printf("bench cost_model_%s_top1_recall_mean_cmp_with_corpus %.3f\n",
                       tasks[t].name, mean(kr1, n_splits));
                printf("bench cost_model_%s_top5_recall_mean_cmp_with_corpus %.3f\n",
                       tasks[t].name, mean(kr5, n_splits));
                printf("bench cost_model_%s_pairwise_acc_cmp_with_corpus %.3f\n",
                       tasks[t].name, at_median_sort(kacc, n_splits));
                for (int v = 0; cmp_variants && v < N_VARIANTS; v++) {
                    printf("bench cost_model_%s_top5_recall_mean_cmp_%s %.3f\n", tasks[t].name,
                           variant_names[v], mean(vr5[v], n_splits));
                    printf("bench cost_model_%s_top1_recall_mean_cmp_%s %.3f\n", tasks[t].name,
                           variant_names[v], mean(vr1[v], n_splits));
                }
                if (cmp2) {
                    printf("bench cost_model_%s_top1_recall_mean_cmp2_with_corpus %.3f\n",
                           tasks[t].name, mean(k2r1, n_splits));
                    printf("bench cost_model_%s_top5_recall_mean_cmp2_with_corpus %.3f\n",
                           tasks[t].name, mean(k2r5, n_splits));
                    printf("bench cost_model_%s_pairwise_acc_cmp2_with_corpus %.3f\n",
                           tasks[t].name, at_median_sort(k2acc, n_splits));
                }
            }
        }
        printf("bench cost_model_%s_pairwise_acc/reg %.2f x\n", tasks[t].name,
               med_acc[CM_OBJ_RANK] / med_acc[CM_OBJ_REG]);
        printf("bench cost_model_%s_records %d records\n", tasks[t].name, n);
        if (contribs_on)
            contribs_print(tasks[t].name, t);
        bench_noise_ceiling(st, t);
        bench_remeasured(t);
        cm_data_free(d);
    }
}

/* ---- the loaded data sets, cached (--data-cache) ----------------------------------------
** Loading replays, lowers and featurizes every record; with --sim and --code it also
** simulates the caches and builds each program (about 45 minutes for the corpus of 400 at
** --sim-cap 3e6).  The loaded set is kept in DIR under a key of what decides its rows:
** the store (path and record count), the filter's target, CM_N_FEATS and
** CM_FEATURE_VERSION, --sim with its caches and cap, --code with its target.  A change to
** the features that keeps their version must bump it (the project's rule for saved models
** already) or run with --data-cache "".  A file that does not read back whole is ignored
** and written again. */
static const char *cache_dir = "build/rel/bench/cache";
#define CACHE_MAGIC "atcm-bench-data-v1"


/* A cached file's key: the store (path, record count), what it holds (two numbers: columns
** and version), the filter's target; then key_sim's caches and cap. */
static uint64_t key_of(rec_store *st, const char *store_path, int what, int version,
                       const char *filter_target)
{
    int64_t n_rec = -1;
    int v[2] = {what, version};
    uint64_t h = 1469598103934665603ull;
    rec_store_count(st, &n_rec, NULL, NULL, NULL);
    h = fnv(h, store_path, strlen(store_path) + 1);
    h = fnv(h, &n_rec, sizeof n_rec);
    h = fnv(h, v, sizeof v);
    return fnv(h, filter_target ? filter_target : "",
               filter_target ? strlen(filter_target) + 1 : 1);
}

static uint64_t key_sim(uint64_t h, const cm_sim_params *sim)
{
    h = fnv(h, &sim->l1_bytes, sizeof sim->l1_bytes);
    h = fnv(h, &sim->l2_bytes, sizeof sim->l2_bytes);
    h = fnv(h, &sim->l1_ways, sizeof sim->l1_ways);
    h = fnv(h, &sim->l2_ways, sizeof sim->l2_ways);
    h = fnv(h, &sim->n_threads, sizeof sim->n_threads);
    return fnv(h, &sim->cap, sizeof sim->cap);
}

static void cache_file(char *out, size_t n, rec_store *st, const char *store_path,
                       const char *filter_target, const cm_sim_params *sim,
                       const kn_target *code)
{
    uint64_t h = key_of(st, store_path, CM_N_FEATS, CM_FEATURE_VERSION, filter_target);
    if (sim)
        h = key_sim(fnv(h, "sim", 3), sim);
    if (code)
        h = fnv(fnv(h, "code", 4), code->text, strlen(code->text) + 1);
    snprintf(out, n, "%s/data-%016llx.bin", cache_dir, (unsigned long long)h);
}

/* The cached set into a new *out (1), or 0 when there is none or it does not read back. */
static int cache_load(const char *file, cm_data **out, cm_load_stats *ls)
{
    FILE *f = fopen(file, "rb");
    char magic[sizeof CACHE_MAGIC];
    int32_t nf = 0, n = 0;
    cm_data *d = NULL;
    float *rows = NULL;
    int ok = 0, cap = 0;
    if (f == NULL)
        return 0;
    if (fread(magic, 1, sizeof magic, f) != sizeof magic || memcmp(magic, CACHE_MAGIC, sizeof magic) ||
        fread(&nf, sizeof nf, 1, f) != 1 || nf != CM_N_FEATS || fread(&n, sizeof n, 1, f) != 1 ||
        n < 0 || cm_data_new(&d) != AT_OK)
        goto done;
    memset(ls, 0, sizeof *ls);
    for (int i = 0; i < n; i++) {
        char task[512];
        int32_t len, nr;
        double cost;
        cm_feats fe;
        cm_sample s;
        if (fread(&len, sizeof len, 1, f) != 1 || len < 1 || len >= (int32_t)sizeof task ||
            fread(task, 1, (size_t)len, f) != (size_t)len || fread(&cost, sizeof cost, 1, f) != 1 ||
            fread(&nr, sizeof nr, 1, f) != 1 || nr < 0 || nr > 1 << 20)
            goto done;
        task[len] = 0;
        if (nr > cap) {
            float *r = realloc(rows, (size_t)nr * CM_N_FEATS * sizeof *r);
            if (r == NULL)
                goto done;
            rows = r, cap = nr;
        }
        if (fread(rows, sizeof *rows * CM_N_FEATS, (size_t)nr, f) != (size_t)nr)
            goto done;
        memset(&fe, 0, sizeof fe);
        fe.rows = rows, fe.n_rows = nr;
        memset(&s, 0, sizeof s);
        s.task = task, s.feats = &fe, s.cost_s = cost;
        s.status = !(cost > 0 && cost < AT_MEASURE_FAIL_COST);
        if (cm_data_add(d, &s, 1, NULL) != AT_OK)
            goto done;
        ls->n_used++, ls->n_records++;
        ls->n_failed += s.status != 0;
    }
    ls->n_tasks = cm_data_n_tasks(d);
    ok = fgetc(f) == EOF;
done:
    fclose(f);
    free(rows);
    if (!ok) {
        cm_data_free(d);
        fprintf(stderr, "# %s does not read back: loading the store again\n", file);
        return 0;
    }
    *out = d;
    return 1;
}

static void cache_save(const char *file, const cm_data *d)
{
    char tmp[1200];
    FILE *f;
    int32_t nf = CM_N_FEATS, n = cm_data_count(d);
    int ok;
    mkdir(cache_dir, 0777);
    snprintf(tmp, sizeof tmp, "%s.tmp", file);
    if ((f = fopen(tmp, "wb")) == NULL)
        return;
    ok = fwrite(CACHE_MAGIC, 1, sizeof CACHE_MAGIC, f) == sizeof CACHE_MAGIC &&
         fwrite(&nf, sizeof nf, 1, f) == 1 && fwrite(&n, sizeof n, 1, f) == 1;
    for (int i = 0; i < n && ok; i++) {
        const char *task = cm_data_task_name(d, cm_data_task_of(d, i));
        int32_t len = (int32_t)strlen(task), nr;
        double cost = cm_data_cost(d, i);
        const float *rows = cm_data_rows(d, i, &nr);
        ok = fwrite(&len, sizeof len, 1, f) == 1 && fwrite(task, 1, (size_t)len, f) == (size_t)len &&
             fwrite(&cost, sizeof cost, 1, f) == 1 && fwrite(&nr, sizeof nr, 1, f) == 1 &&
             fwrite(rows, sizeof *rows * CM_N_FEATS, (size_t)nr, f) == (size_t)nr;
    }
    if (fclose(f) != 0 || !ok || rename(tmp, file) != 0)
        remove(tmp);
    else
        fprintf(stderr, "# loaded set kept in %s (--data-cache)\n", file);
}

/* ---- group 10 kept apart (--sim with --code) -------------------------------------------
** Simulating the caches is most of a load (about an hour for the corpus of 400 at cap 3e6;
** building and reading the code about 10 minutes), and group 10 does not change when
** another column does.  So its columns are kept in a file of their own, sim-KEY.bin, under a
** key of the store, the filter's target, the caches, the cap and SIM_COLS_VERSION (bump it
** when cm_sim_run or group 10's columns change), and a set that wants both is loaded without
** the simulation and given them: each program matched in order by task, cost and row count
** (the same programs in the same order, unless one failed to build, which the other load
** keeps and this one skips). */
#define SIM_COLS_VERSION 1
#define SIM_MAGIC "atcm-bench-sim-v1"
#define N_SIM_COLS (CM_F_SIM_PENALTY - CM_F_SIM_STMTS + 1)

typedef struct {
    int n;
    char **task;
    double *cost;
    int32_t *n_rows;
    float *cols; /* n * N_SIM_COLS */
} sim_cols;

static void sim_cols_free(sim_cols *c)
{
    for (int i = 0; i < c->n; i++)
        free(c->task[i]);
    free(c->task);
    free(c->cost);
    free(c->n_rows);
    free(c->cols);
    memset(c, 0, sizeof *c);
}

static void sim_file(char *out, size_t n, rec_store *st, const char *store_path,
                     const char *filter_target, const cm_sim_params *sim)
{
    uint64_t h = key_sim(key_of(st, store_path, N_SIM_COLS, SIM_COLS_VERSION, filter_target), sim);
    snprintf(out, n, "%s/sim-%016llx.bin", cache_dir, (unsigned long long)h);
}

/* Group 10 of every program of 'd' into *c. */
static void sim_cols_of(const cm_data *d, sim_cols *c)
{
    int n = cm_data_count(d);
    memset(c, 0, sizeof *c);
    c->task = calloc((size_t)n + 1, sizeof *c->task);
    c->cost = calloc((size_t)n + 1, sizeof *c->cost);
    c->n_rows = calloc((size_t)n + 1, sizeof *c->n_rows);
    c->cols = calloc((size_t)n * N_SIM_COLS + 1, sizeof *c->cols);
    if (!c->task || !c->cost || !c->n_rows || !c->cols)
        die("sim columns", "out of memory");
    for (int i = 0; i < n; i++, c->n++) {
        int nr;
        const float *r = cm_data_rows(d, i, &nr);
        if ((c->task[i] = strdup(cm_data_task_name(d, cm_data_task_of(d, i)))) == NULL)
            die("sim columns", "out of memory");
        c->cost[i] = cm_data_cost(d, i);
        c->n_rows[i] = nr;
        if (nr > 0)
            memcpy(c->cols + (size_t)i * N_SIM_COLS, r + CM_F_SIM_STMTS, sizeof(float) * N_SIM_COLS);
    }
}

static void sim_save(const char *file, const sim_cols *c)
{
    char tmp[1200];
    int32_t nc = N_SIM_COLS, n = c->n;
    FILE *f;
    snprintf(tmp, sizeof tmp, "%s.tmp", file);
    mkdir(cache_dir, 0777);
    if ((f = fopen(tmp, "wb")) == NULL)
        return;
    int ok = fwrite(SIM_MAGIC, 1, sizeof SIM_MAGIC, f) == sizeof SIM_MAGIC &&
             fwrite(&nc, sizeof nc, 1, f) == 1 && fwrite(&n, sizeof n, 1, f) == 1;
    for (int i = 0; i < n && ok; i++) {
        int32_t len = (int32_t)strlen(c->task[i]);
        ok = fwrite(&len, sizeof len, 1, f) == 1 && fwrite(c->task[i], 1, (size_t)len, f) == (size_t)len &&
             fwrite(&c->cost[i], sizeof c->cost[i], 1, f) == 1 &&
             fwrite(&c->n_rows[i], sizeof c->n_rows[i], 1, f) == 1 &&
             fwrite(c->cols + (size_t)i * N_SIM_COLS, sizeof(float), N_SIM_COLS, f) == N_SIM_COLS;
    }
    if (fclose(f) != 0 || !ok || rename(tmp, file) != 0)
        remove(tmp);
    else
        fprintf(stderr, "# group 10 kept in %s (--data-cache)\n", file);
}

static int sim_load(const char *file, sim_cols *c)
{
    FILE *f = fopen(file, "rb");
    char magic[sizeof SIM_MAGIC];
    int32_t nc = 0, n = 0;
    int ok = 0;
    memset(c, 0, sizeof *c);
    if (f == NULL)
        return 0;
    if (fread(magic, 1, sizeof magic, f) != sizeof magic || memcmp(magic, SIM_MAGIC, sizeof magic) ||
        fread(&nc, sizeof nc, 1, f) != 1 || nc != N_SIM_COLS || fread(&n, sizeof n, 1, f) != 1 ||
        n < 0 || n > 1 << 24)
        goto done;
    c->task = calloc((size_t)n + 1, sizeof *c->task);
    c->cost = calloc((size_t)n + 1, sizeof *c->cost);
    c->n_rows = calloc((size_t)n + 1, sizeof *c->n_rows);
    c->cols = calloc((size_t)n * N_SIM_COLS + 1, sizeof *c->cols);
    if (!c->task || !c->cost || !c->n_rows || !c->cols)
        goto done;
    for (int i = 0; i < n; i++, c->n++) {
        int32_t len;
        if (fread(&len, sizeof len, 1, f) != 1 || len < 1 || len > 4096 ||
            (c->task[i] = calloc((size_t)len + 1, 1)) == NULL ||
            fread(c->task[i], 1, (size_t)len, f) != (size_t)len ||
            fread(&c->cost[i], sizeof c->cost[i], 1, f) != 1 ||
            fread(&c->n_rows[i], sizeof c->n_rows[i], 1, f) != 1 ||
            fread(c->cols + (size_t)i * N_SIM_COLS, sizeof(float), N_SIM_COLS, f) != N_SIM_COLS) {
            if (c->task[i]) /* counted, so that sim_cols_free frees it */
                c->n++;
            goto done;
        }
    }
    ok = fgetc(f) == EOF;
done:
    fclose(f);
    if (!ok)
        sim_cols_free(c);
    return ok;
}

/* Group 10 from 'c' into each program of 'd' (loaded without it); 0 when a program of 'd'
** has no match in 'c'. */
static int sim_merge(cm_data *d, const sim_cols *c)
{
    int j = 0;
    for (int i = 0; i < cm_data_count(d); i++, j++) {
        int nr;
        float *r = (float *)cm_data_rows(d, i, &nr);
        const char *task = cm_data_task_name(d, cm_data_task_of(d, i));
        double cost = cm_data_cost(d, i);
        while (j < c->n && !(c->cost[j] == cost && c->n_rows[j] == nr && !strcmp(c->task[j], task)))
            j++;
        if (j == c->n)
            return 0;
        if (nr > 0)
            memcpy(r + CM_F_SIM_STMTS, c->cols + (size_t)j * N_SIM_COLS, sizeof(float) * N_SIM_COLS);
    }
    return 1;
}

static cm_data *load_set(rec_store *st, const char *store_path, const rec_filter *filter,
                         const cm_sim_params *sim, const kn_target *code, cm_load_stats *ls);

/* A set with group 10 and 11: group 10 from its file (simulated and kept there the first
** time), the rest loaded with the code; NULL when they do not match. */
static cm_data *load_split(rec_store *st, const char *store_path, const rec_filter *filter,
                           const cm_sim_params *sim, const kn_target *code, cm_load_stats *ls)
{
    char file[1024];
    sim_cols c;
    cm_load_stats ls_sim;
    sim_file(file, sizeof file, st, store_path, filter ? filter->target : NULL, sim);
    if (sim_load(file, &c)) {
        fprintf(stderr, "# %s: group 10 from %s\n", store_path, file);
    } else {
        cm_data *sd = load_set(st, store_path, filter, sim, NULL, &ls_sim);
        sim_cols_of(sd, &c);
        cm_data_free(sd);
        sim_save(file, &c);
    }
    cm_data *d = load_set(st, store_path, filter, NULL, code, ls);
    if (!sim_merge(d, &c)) {
        fprintf(stderr, "# %s: group 10 in %s does not match the programs: loading them all\n",
                store_path, file);
        cm_data_free(d);
        d = NULL;
    }
    sim_cols_free(&c);
    return d;
}

/* cm_data_load_store, or its cached copy. */
static cm_data *load_set(rec_store *st, const char *store_path, const rec_filter *filter,
                         const cm_sim_params *sim, const kn_target *code, cm_load_stats *ls)
{
    char file[1024], err[1024];
    cm_data *d = NULL;
    if (cache_dir[0]) {
        cache_file(file, sizeof file, st, store_path, filter ? filter->target : NULL, sim, code);
        if (cache_load(file, &d, ls)) {
            fprintf(stderr, "# %s: the loaded set from %s\n", store_path, file);
            if (sim && code) { /* group 10 kept apart too, for the next change of the rest */
                char sf[1024];
                sim_cols c;
                sim_file(sf, sizeof sf, st, store_path, filter ? filter->target : NULL, sim);
                if (access(sf, R_OK) != 0) {
                    sim_cols_of(d, &c);
                    sim_save(sf, &c);
                    sim_cols_free(&c);
                }
            }
            return d;
        }
        char sf[1024], cf[1024];
        if (sim && code) {
            sim_file(sf, sizeof sf, st, store_path, filter ? filter->target : NULL, sim);
            /* group 10 kept, or the rest: only what is missing is computed */
            cache_file(cf, sizeof cf, st, store_path, filter ? filter->target : NULL, NULL,
                       code);
            if ((access(sf, R_OK) == 0 || access(cf, R_OK) == 0) &&
                (d = load_split(st, store_path, filter, sim, code, ls)) != NULL) {
                cache_save(file, d);
                return d;
            }
        }
    }
    if (cm_data_new(&d) != AT_OK)
        die("data", "out of memory");
    cm_data_set_sim(d, sim);
    cm_data_set_code(d, code);
    if (cm_data_load_store(d, st, filter, ls, err, sizeof err) != AT_OK)
        die(store_path, err);
    if (cache_dir[0]) {
        cache_save(file, d);
        if (sim && code) { /* group 10 kept apart too */
            char sf[1024];
            sim_cols c;
            sim_file(sf, sizeof sf, st, store_path, filter ? filter->target : NULL, sim);
            sim_cols_of(d, &c);
            sim_save(sf, &c);
            sim_cols_free(&c);
        }
    }
    return d;
}

int main(int argc, char **argv)
{
    const char *path = "build/rel/bench/cost_model.db";
    const char *corpus_path = "build/rel/bench/corpus.db";
    int n_states = 200, n_corpus = 200;
    rec_store *cst = NULL;
    cm_data *corp = NULL;
    double budget_s = 240;
    rec_store *st;
    cm_data *d;
    cm_load_stats ls;
    cm_params p;
    cm_model *m;
    char err[1024];
    int quality_only = 0, use_sim = 0, use_code = 0;
    cm_sim_params sim;
    double sim_cap = 0;
    double pair_weight = -1, min_pair_ratio = -1, top_weight = -1;
    int monotone = -1, rounds = -1, depth = -1, partners = -1, max_bin = -1;
    double eta = -1, subsample = -1, colsample = -1, lambda = -1, min_child = -1, gamma = -1;
    {
        int n_pos = 0, help = 0;
        at_opt opts[] = {
            {"states", 0, AT_OPT_INT, &n_states, "N", "random states of each task (200)"},
            {"db", 0, AT_OPT_STR, &path, "FILE", "the data set's store"},
            {"corpus", 0, AT_OPT_INT, &n_corpus, "N",
             "random states of each corpus workload (200; 0: no corpus lines)"},
            {"corpus-db", 0, AT_OPT_STR, &corpus_path, "FILE", "the corpus's store"},
            {"passes", 0, AT_OPT_INT, &n_passes, "N",
             "measurements of the data set, the labels their fastest (4; 1 to 8)"},
            {"corpus-passes", 0, AT_OPT_INT, &n_corpus_passes, "N",
             "measurements of the corpus, the labels their fastest (1; 1 to 8)"},
            {"budget-s", 0, AT_OPT_NUM, &budget_s, "S", "seconds of measuring per task (240)"},
            {"pair-weight", 0, AT_OPT_NUM, &pair_weight, "W", "cm_params.pair_weight"},
            {"top-weight", 0, AT_OPT_NUM, &top_weight, "W", "cm_params.top_weight"},
            {"min-pair-ratio", 0, AT_OPT_NUM, &min_pair_ratio, "R", "cm_params.min_pair_ratio"},
            {"monotone", 0, AT_OPT_INT, &monotone, "0|1", "cm_params.monotone"},
            {"rounds", 0, AT_OPT_INT, &rounds, "N", "cm_params.max_rounds"},
            {"depth", 0, AT_OPT_INT, &depth, "N", "cm_params.max_depth"},
            {"lambda", 0, AT_OPT_NUM, &lambda, "X", "cm_params.lambda"},
            {"min-child", 0, AT_OPT_NUM, &min_child, "X", "cm_params.min_child_weight"},
            {"gamma", 0, AT_OPT_NUM, &gamma, "X", "cm_params.gamma"},
            {"max-bin", 0, AT_OPT_INT, &max_bin, "N", "cm_params.max_bin (2-1024)"},
            {"eta", 0, AT_OPT_NUM, &eta, "X", "cm_params.eta"},
            {"partners", 0, AT_OPT_INT, &partners, "N", "cm_params.n_partners"},
            {"splits", 0, AT_OPT_INT, &n_splits, "N", "held-out splits, 1-256 (21)"},
            {"dump-cols", 0, AT_OPT_STR, &dump_cols, "P,P",
             "--dump-scores: these columns of each program's rows too"},
            {"exp-roof", 0, AT_OPT_NUM, &exp_roof, "B",
             "an experiment: code_lane_cycles plus the L1 misses' time at B bytes a cycle, as a column"},
            {"exp-roof-in-place", 0, AT_OPT_BOOL, &exp_roof_in_place, NULL,
             "--exp-roof: in code_lane_cycles instead"},
            {"exp-ratio", 0, AT_OPT_STR, &exp_ratio, "NUM,DEN",
             "an experiment: column NUM over column DEN as one more column"},
            {"refine", 0, AT_OPT_INT, &refine_mode, "1|2",
             "an experiment: each split refines a model of the corpus alone (1: on the "
             "task's programs, 2: and the corpus)"},
            {"contribs", 0, AT_OPT_BOOL, &contribs_on, NULL,
             "an experiment: the columns that put false positives in the model's five"},
            {"exp-threads", 0, AT_OPT_INT, &exp_threads, "T",
             "an experiment: the parallel loop's balance over T threads as two columns"},
            {"split-base", 0, AT_OPT_INT, &split_base, "N",
             "the first split's number (0): other splits, to confirm a change on"},
            {"seed-base", 0, AT_OPT_INT, &seed_base, "N",
             "the models' seeds N * 1000003 apart (0): their own randomness, the same splits"},
            {"ensemble", 0, AT_OPT_INT, &n_ensemble, "K",
             "models per split, seeds apart, their scores summed (1)"},
            {"subsample", 0, AT_OPT_NUM, &subsample, "X", "cm_params.subsample"},
            {"colsample", 0, AT_OPT_NUM, &colsample, "X", "cm_params.colsample"},
            {"quality-only", 0, AT_OPT_BOOL, &quality_only, NULL, "only the held-out figures"},
            {"sim", 0, AT_OPT_BOOL, &use_sim, NULL,
             "group 10, the caches simulated, for every record (cm_sim_run: minutes)"},
            {"cmp-orders", 0, AT_OPT_INT, &cmp_orders, "1|2",
             "--cmp: each training pair in one order or both (2; cm_cmp_params.both_orders)"},
            {"sim-cap", 0, AT_OPT_NUM, &sim_cap, "N",
             "--sim: accesses simulated per program at most (cm_sim_params.cap, 3e5)"},
            {"cmp-max-pairs", 0, AT_OPT_INT, &cmp_max_pairs, "N",
             "--cmp: at most N pair rows (cm_cmp_params.max_pairs; 0: its default, 150000)"},
            {"cmp-max-pairs2", 0, AT_OPT_INT, &cmp_max_pairs2, "N",
             "--cmp: a second comparator with at most N pair rows, its figures as _cmp2_"},
            {"cmp", 0, AT_OPT_BOOL, &use_cmp, NULL,
             "the comparator (cm_cmp) too, trained with the corpus on each split"},
            {"cmp-top-pairs", 0, AT_OPT_NUM, &cmp_top_pairs, "X",
             "--cmp: cm_cmp_params.top_pairs, every pair among each task's fastest X (0)"},
            {"cmp-top-pairs2", 0, AT_OPT_NUM, &cmp_top_pairs2, "X",
             "--cmp: a second comparator with top_pairs X, its figures as _cmp2_"},
            {"cmp-variants", 0, AT_OPT_BOOL, &cmp_variants, NULL,
             "--cmp: other ways of ranking with the same comparator, their figures too"},
            {"drop-cols", 0, AT_OPT_STR, &drop_cols, "P,P",
             "an experiment: columns whose names start with one of these set to 0 when loaded"},
            {"corpus-same-op", 0, AT_OPT_BOOL, &corpus_same_op, NULL,
             "an experiment: each task trained with the corpus workloads of its operator only"},
            {"task-pct", 0, AT_OPT_STR, &task_pct, "P,P",
             "an experiment: these columns of a program's first row as percentiles in its task"},
            {"dump-scores", 0, AT_OPT_STR, &dump_path, "FILE",
             "each held-out program's measured cost and scores with the corpus, a line each"},
            {"data-cache", 0, AT_OPT_STR, &cache_dir, "DIR",
             "keep the loaded sets here (build/rel/bench/cache; \"\": off)"},
            {"code", 0, AT_OPT_BOOL, &use_code, NULL,
             "group 11, the machine code read back, for every record (a build each: minutes)"},
        };
        if (at_opts_parse("bench_cost_model", opts, (int)AT_ARRAY_LEN(opts), argc, argv, &n_pos,
                          &help) != 0 ||
            at_opt_range("bench_cost_model", "--splits", n_splits, 1, MAX_SPLITS) != 0 ||
            at_opt_range("bench_cost_model", "--split-base", split_base, 0, 1000000) != 0 ||
            at_opt_range("bench_cost_model", "--seed-base", seed_base, 0, 1000) != 0 ||
            at_opt_range("bench_cost_model", "--ensemble", n_ensemble, 1, 16) != 0 ||
            at_opt_range("bench_cost_model", "--monotone", monotone, -1, 1) != 0 ||
            (max_bin != -1 && at_opt_range("bench_cost_model", "--max-bin", max_bin, 2, 1024) != 0) ||
            at_opt_range("bench_cost_model", "--cmp-orders", cmp_orders, 1, 2) != 0 ||
            at_opt_range("bench_cost_model", "--cmp-max-pairs", cmp_max_pairs, 0, 50000000) ||
            at_opt_range("bench_cost_model", "--cmp-max-pairs2", cmp_max_pairs2, 0, 50000000) ||
            at_opt_range("bench_cost_model", "--passes", n_passes, 1, MAX_PASSES) ||
            at_opt_range("bench_cost_model", "--corpus-passes", n_corpus_passes, 1, MAX_PASSES) ||
            at_opt_range("bench_cost_model", "--refine", refine_mode, 0, 2))
            return 2;
        if ((refine_mode && (contribs_on || n_ensemble > 1)) || (*exp_ratio && exp_roof != 0)) {
            fprintf(stderr, "bench_cost_model: %s\n",
                    refine_mode ? "--refine trains one model a split: not with --contribs or --ensemble"
                                : "--exp-ratio and --exp-roof write the same column: one of them");
            return 2;
        }
        if (*exp_ratio)
            ratio_column(NULL); /* the names checked before anything is loaded */
        if (!(cmp_top_pairs >= 0 && cmp_top_pairs <= 1) ||
            !(cmp_top_pairs2 >= 0 && cmp_top_pairs2 <= 1)) {
            fprintf(stderr, "bench_cost_model: --cmp-top-pairs%s must be 0 to 1\n",
                    cmp_top_pairs >= 0 && cmp_top_pairs <= 1 ? "2" : "");
            return 2;
        }
        if ((subsample != -1 && !(subsample > 0 && subsample <= 1)) ||
            (colsample != -1 && !(colsample > 0 && colsample <= 1))) {
            fprintf(stderr, "bench_cost_model: --%s must be above 0 and at most 1\n",
                    subsample != -1 && !(subsample > 0 && subsample <= 1) ? "subsample"
                                                                        : "colsample");
            return 2;
        }
        if (help || n_pos) {
            fprintf(help ? stdout : stderr, "usage: bench_cost_model [flags]\n\nflags:\n");
            at_opts_help(help ? stdout : stderr, opts, (int)AT_ARRAY_LEN(opts));
            return help ? 0 : 2;
        }
    }
    at_log_set_level(AT_LOG_WARN);
    tn_fleet_prepare(); /* the embedded agent's launcher, before any thread */
    if (kn_target_host(&host) != AT_OK)
        die("target", "no host target");
    ss_hw_cpu(&hw, host.n_cores, host.vector_bytes, host.l1_bytes, host.l2_bytes);
    st = dataset(path, n_states, budget_s);
    cm_sim_params_init(&sim, &host);
    if (sim_cap > 0)
        sim.cap = sim_cap;
    rec_filter host_filter = {NULL, host.text, NULL, NULL}; /* a corpus: this host's only */
    /* measuring first, before anything else runs: the data set's passes, the corpus and its */
    passes_measure(st, path, NULL, n_passes, &data_passes);
    if (n_corpus > 0) {
        cst = corpus(corpus_path, n_corpus);
        passes_measure(cst, corpus_path, &host_filter, n_corpus_passes, &corpus_passes);
    }
    d = load_set(st, path, NULL, use_sim ? &sim : NULL, use_code ? &host : NULL, &ls);
    passes_apply(st, NULL, &data_passes, d, path);
    fprintf(stderr, "# data set %s: %lld records (%lld failed) of %d tasks\n", path,
            (long long)ls.n_used, (long long)ls.n_failed, ls.n_tasks);
    if (n_corpus > 0) {
        /* this host's records only: a store measured on another CPU keeps its records */
        corp = load_set(cst, corpus_path, &host_filter, use_sim ? &sim : NULL,
                        use_code ? &host : NULL, &ls);
        passes_apply(cst, &host_filter, &corpus_passes, corp, corpus_path);
        fprintf(stderr, "# corpus %s: %lld records (%lld failed) of %d tasks\n", corpus_path,
                (long long)ls.n_used, (long long)ls.n_failed, ls.n_tasks);
    }
    if (drop_cols[0]) {
        drop_columns(d);
        drop_columns(corp);
    }
    if (task_pct[0]) {
        task_percentiles(d);
        task_percentiles(corp);
    }
    if (exp_threads > 0) {
        par_balance(d);
        par_balance(corp);
    }
    if (exp_roof != 0) {
        roof_column(d);
        roof_column(corp);
    }
    if (*exp_ratio) {
        ratio_column(d);
        ratio_column(corp);
    }
    cm_params_default(&p);
    p.n_threads = 1;
    if (pair_weight >= 0)
        p.pair_weight = pair_weight;
    if (min_pair_ratio >= 0)
        p.min_pair_ratio = min_pair_ratio;
    if (top_weight >= 0)
        p.top_weight = top_weight;
    if (monotone >= 0)
        p.monotone = monotone;
    if (rounds > 0)
        p.max_rounds = rounds;
    if (depth > 0)
        p.max_depth = depth;
    if (max_bin > 0)
        p.max_bin = max_bin;
    if (lambda >= 0)
        p.lambda = lambda;
    if (min_child >= 0)
        p.min_child_weight = min_child;
    if (gamma >= 0)
        p.gamma = gamma;
    if (eta > 0)
        p.eta = eta;
    if (partners > 0)
        p.n_partners = partners;
    if (subsample > 0)
        p.subsample = subsample;
    if (colsample > 0)
        p.colsample = colsample;
    if (cm_model_new(&p, &m) != AT_OK || cm_model_fit(m, d, err, sizeof err) != AT_OK)
        die("training", err);
    if (!quality_only) {
        bench_throughput(m);
        bench_training(m, &p);
    }
    if (dump_path[0] && (dump_f = fopen(dump_path, "w")) == NULL)
        die(dump_path, strerror(errno));
    bench_quality(st, d, corp, &p);
    if (dump_f && fclose(dump_f) != 0)
        die(dump_path, "cannot be written");
    cm_model_free(m);
    cm_data_free(d);
    cm_data_free(corp);
    pass_set_free(&data_passes);
    pass_set_free(&corpus_passes);
    at_free(refine_blob);
    if (cst)
        rec_store_close(cst);
    rec_store_close(st);
    return 0;
}
