/* tests/bench/bench_cost_model.c -- speed and ranking quality of the cost model.
**
**   bench cost_model_extract_rate N states/s          lowering + features of a population of
**                                                      2,048 random ResNet conv2d states
**   bench cost_model_predict_rate N states/s          cm_model_predict on that population
**                                                      (lowering, features, XGBoost), 1 thread
**   bench cost_model_population_2048 T s              the same as the time one population
**                                                      takes (goal: under 1 s on one core)
**   bench cost_model_population_2048/goal_1s R x      goal / time
**   bench cost_model_train_10000 T s                  training on 10,000 programs
**   bench cost_model_TASK_pairwise_acc_OBJ A          held-out pairwise accuracy (pairs whose
**   bench cost_model_TASK_top1_recall_OBJ R           costs differ by > 5%), top-1 and top-5
**   bench cost_model_TASK_top5_recall_OBJ R           recall, for OBJ rank and reg, median of
**   bench cost_model_TASK_pairwise_acc/reg R x        21 random 80/20 splits (--splits); rank
**   bench cost_model_TASK_top5_recall_mean_OBJ R      over reg; _mean_: means over the splits
**   bench cost_model_TASK_pairwise_acc_with_others A  rank, the same splits trained with every
**   bench cost_model_TASK_top5_recall_mean_with_others R  record of the other task too (a
**                                                      tuning run trains on its whole store)
**   bench cost_model_TASK_records N records           measured records of the task used
** TASK is matmul1024 (matmul 1024^3) or resnet_conv (N=1, C=K=64, 56x56, 3x3, pad 1).
**
** The held-out figures need measured data: --states N random states of each task (default
** 200, or as many as --budget-s seconds per task allow, default 240) are measured here once
** (through the embedded tracker and agent, as every measurement: 2 kernel threads, 3 repeats
** of >= 0.5 ms; a state whose first run takes over 0.25 s is timed once; no output check) into build/rel/bench/cost_model.db and reused by later runs, which measure
** only what is missing (delete the file to measure again).  The counts used are printed.  The 10,000 programs for the
** training time are random states of both tasks, lowered and featurized for real, labelled
** by a model trained on the measured data: training time does not depend on where labels
** come from, and measuring 10,000 big kernels would take hours. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cost_model/cost_model.h"
#include "tuner/tuner.h"
#include <unistd.h>

#define POP 2048
#define REPS 5
#define MAX_SPLITS 64
static int n_splits = 21; /* --splits: held-out 80/20 splits of each task */

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

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
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
    memset(&o, 0, sizeof o);
    o.embedded_threads = 2;
    o.repeat = 3;
    o.min_repeat_ms = 0.5;
    o.cutoff_s = 0.25;
    o.timeout_ms = 60000;
    o.no_check = 1; /* the naive matmul 1024 alone takes seconds; tests check correctness */
    o.build_worker_exe = access("build/rel/bin/tuner", X_OK) == 0 ? "build/rel/bin/tuner" : NULL;
    o.build_workers = o.build_worker_exe ? 2 : 0;
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
    printf("bench cost_model_extract_rate %.0f states/s\n", median(ext, REPS));
    printf("bench cost_model_predict_rate %.0f states/s\n", POP / median(pred, REPS));
    printf("bench cost_model_population_2048 %.3f s\n", median(pred, REPS));
    printf("bench cost_model_population_2048/goal_1s %.2f x\n", 1.0 / median(pred, REPS));
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
    printf("bench cost_model_train_10000 %.2f s\n", median(secs, 3));
    for (int i = 0; i < n; i++)
        cm_feats_fini(&f[i]);
    cm_feats_fini(&tmp);
    cm_data_free(d);
    free(s);
    free(f);
    free(fp);
    free(sc);
}

/* The ceiling measurement noise puts on top-k recall: over 200 random held-out sized (20 %)
** subsets of a task's records timed at least 3 times, the overlap of the k fastest by the
** first repeat with the k fastest by the best of the others. */
static void bench_noise_ceiling(rec_store *st, int t)
{
    enum { MAXN = 8192, DRAWS = 200 };
    static double first[MAXN], rest[MAXN];
    int n = 0, sub[MAXN], byf[MAXN], byr[MAXN];
    double r1 = 0, r5 = 0;
    rec_filter f = {NULL, NULL, NULL, NULL};
    rec_iter *it;
    const rec_record *r;
    ss_dag *dag;
    at_rng rng;
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
    at_rng_seed(&rng, 5);
    for (int d = 0; d < DRAWS; d++) {
        int m = n / 5, h1 = 0, h5 = 0;
        for (int i = 0; i < n; i++)
            sub[i] = i;
        for (int i = 0; i < m; i++) { /* a partial Fisher-Yates shuffle */
            int j = i + (int)at_rng_below(&rng, (uint64_t)(n - i)), x = sub[i];
            sub[i] = sub[j];
            sub[j] = x;
        }
        for (int i = 0; i < m; i++)
            byf[i] = byr[i] = sub[i];
        for (int i = 1; i < m; i++) /* insertion sorts: m is small */
            for (int j = i; j > 0 && first[byf[j]] < first[byf[j - 1]]; j--) {
                int x = byf[j];
                byf[j] = byf[j - 1];
                byf[j - 1] = x;
            }
        for (int i = 1; i < m; i++)
            for (int j = i; j > 0 && rest[byr[j]] < rest[byr[j - 1]]; j--) {
                int x = byr[j];
                byr[j] = byr[j - 1];
                byr[j - 1] = x;
            }
        h1 = byf[0] == byr[0];
        for (int a = 0; a < 5; a++)
            for (int b = 0; b < 5; b++)
                h5 += byf[a] == byr[b];
        r1 += h1;
        r5 += h5 / 5.0;
    }
    printf("bench cost_model_%s_top1_recall_noise_ceiling %.2f\n", tasks[t].name, r1 / DRAWS);
    printf("bench cost_model_%s_top5_recall_noise_ceiling %.2f\n", tasks[t].name, r5 / DRAWS);
    fprintf(stderr, "# %s: noise ceiling over %d records timed 3 times or more\n", tasks[t].name,
            n);
}

static void bench_quality(rec_store *st, const cm_data *all, const cm_params *base)
{
    for (int t = 0; t < N_TASKS; t++) {
        cm_data *d;
        int idx[8192], n = 0, oidx[8192], no = 0;
        double xacc[MAX_SPLITS], xr5[MAX_SPLITS];
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
        if (cm_data_new(&d) != AT_OK || cm_data_append(d, all, idx, n) != AT_OK)
            die("data", "out of memory");
        for (int o = 0; o < CM_N_OBJS; o++) {
            for (int r = 0; r < n_splits; r++) {
                cm_params p = *base;
                cm_data *tr, *te;
                cm_model *m;
                cm_metrics mt;
                double *sc;
                p.objective = (cm_objective)o;
                p.seed = 43 + (uint64_t)r;
                if (cm_data_split(d, 0.8, 500 + (uint64_t)r, &tr, &te) != AT_OK ||
                    cm_model_new(&p, &m) != AT_OK)
                    die("split", "out of memory");
                if (cm_model_fit(m, tr, err, sizeof err) != AT_OK)
                    die("training", err);
                sc = malloc((size_t)cm_data_count(te) * sizeof *sc);
                if (cm_model_predict_data(m, te, sc) != AT_OK)
                    die("predict", "XGBoost failed");
                cm_metrics_eval(te, sc, 1.05, &mt);
                acc[o][r] = mt.pairwise_acc;
                if (o == CM_OBJ_RANK) {
                    /* the same split, trained with every record of the other tasks too (as a
                    ** tuning run trains on its whole store) */
                    cm_data *tr2;
                    cm_model *m2;
                    cm_metrics m2t;
                    int *all_tr = malloc((size_t)cm_data_count(tr) * sizeof *all_tr);
                    for (int i = 0; i < cm_data_count(tr); i++)
                        all_tr[i] = i;
                    if (all_tr == NULL || cm_data_new(&tr2) != AT_OK ||
                        cm_data_append(tr2, tr, all_tr, cm_data_count(tr)) != AT_OK ||
                        cm_data_append(tr2, all, oidx, no) != AT_OK ||
                        cm_model_new(&p, &m2) != AT_OK)
                        die("split", "out of memory");
                    free(all_tr);
                    if (cm_model_fit(m2, tr2, err, sizeof err) != AT_OK)
                        die("training", err);
                    if (cm_model_predict_data(m2, te, sc) != AT_OK)
                        die("predict", "XGBoost failed");
                    cm_metrics_eval(te, sc, 1.05, &m2t);
                    xacc[r] = m2t.pairwise_acc;
                    xr5[r] = m2t.top5_recall;
                    cm_model_free(m2);
                    cm_data_free(tr2);
                }
                r1[o][r] = mt.top1_recall;
                r5[o][r] = mt.top5_recall;
                s1[o][r] = mt.top1_score;
                s5[o][r] = mt.top5_score;
                free(sc);
                cm_model_free(m);
                cm_data_free(tr);
                cm_data_free(te);
            }
            /* the means first (median() sorts): recall moves in steps of 1/k per split */
            printf("bench cost_model_%s_top1_recall_mean_%s %.3f\n", tasks[t].name,
                   cm_objective_name((cm_objective)o), mean(r1[o], n_splits));
            printf("bench cost_model_%s_top5_recall_mean_%s %.3f\n", tasks[t].name,
                   cm_objective_name((cm_objective)o), mean(r5[o], n_splits));
            printf("bench cost_model_%s_top1_score_mean_%s %.3f\n", tasks[t].name,
                   cm_objective_name((cm_objective)o), mean(s1[o], n_splits));
            med_acc[o] = median(acc[o], n_splits);
            printf("bench cost_model_%s_pairwise_acc_%s %.3f\n", tasks[t].name,
                   cm_objective_name((cm_objective)o), med_acc[o]);
            printf("bench cost_model_%s_top1_recall_%s %.2f\n", tasks[t].name,
                   cm_objective_name((cm_objective)o), median(r1[o], n_splits));
            printf("bench cost_model_%s_top5_recall_%s %.2f\n", tasks[t].name,
                   cm_objective_name((cm_objective)o), median(r5[o], n_splits));
            printf("bench cost_model_%s_top1_score_%s %.3f\n", tasks[t].name,
                   cm_objective_name((cm_objective)o), median(s1[o], n_splits));
            printf("bench cost_model_%s_top5_score_%s %.3f\n", tasks[t].name,
                   cm_objective_name((cm_objective)o), median(s5[o], n_splits));
        }
        if (no > 0) {
            printf("bench cost_model_%s_top5_recall_mean_with_others %.3f\n", tasks[t].name,
                   mean(xr5, n_splits));
            printf("bench cost_model_%s_pairwise_acc_with_others %.3f\n", tasks[t].name,
                   median(xacc, n_splits));
        }
        printf("bench cost_model_%s_pairwise_acc/reg %.2f x\n", tasks[t].name,
               med_acc[CM_OBJ_RANK] / med_acc[CM_OBJ_REG]);
        printf("bench cost_model_%s_records %d records\n", tasks[t].name, n);
        bench_noise_ceiling(st, t);
        cm_data_free(d);
    }
}

int main(int argc, char **argv)
{
    const char *path = "build/rel/bench/cost_model.db";
    int n_states = 200;
    double budget_s = 240;
    rec_store *st;
    cm_data *d;
    cm_load_stats ls;
    cm_params p;
    cm_model *m;
    char err[1024];
    int quality_only = 0;
    double pair_weight = -1, min_pair_ratio = -1;
    int monotone = -1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--states") == 0 && i + 1 < argc)
            n_states = atoi(argv[++i]);
        else if (strcmp(argv[i], "--db") == 0 && i + 1 < argc)
            path = argv[++i];
        else if (strcmp(argv[i], "--budget-s") == 0 && i + 1 < argc)
            budget_s = atof(argv[++i]);
        else if (strcmp(argv[i], "--pair-weight") == 0 && i + 1 < argc)
            pair_weight = atof(argv[++i]);
        else if (strcmp(argv[i], "--min-pair-ratio") == 0 && i + 1 < argc)
            min_pair_ratio = atof(argv[++i]);
        else if (strcmp(argv[i], "--monotone") == 0 && i + 1 < argc)
            monotone = atoi(argv[++i]) != 0;
        else if (strcmp(argv[i], "--quality-only") == 0)
            quality_only = 1;
        else if (strcmp(argv[i], "--splits") == 0 && i + 1 < argc &&
                 (n_splits = atoi(argv[++i])) >= 1 && n_splits <= MAX_SPLITS)
            ;
        else
            die("usage", "bench_cost_model [--states N] [--budget-s S] [--db FILE] "
                         "[--pair-weight W] [--min-pair-ratio R] [--monotone 0|1] "
                         "[--splits N (1-64)] [--quality-only]");
    }
    at_log_set_level(AT_LOG_WARN);
    tn_fleet_prepare(); /* the embedded agent's launcher, before any thread */
    if (kn_target_host(&host) != AT_OK)
        die("target", "no host target");
    ss_hw_cpu(&hw, host.n_cores, host.vector_bytes, host.l1_bytes, host.l2_bytes);
    st = dataset(path, n_states, budget_s);
    if (cm_data_new(&d) != AT_OK || cm_data_load_store(d, st, NULL, &ls, err, sizeof err) != AT_OK)
        die(path, err);
    fprintf(stderr, "# data set %s: %lld records (%lld failed) of %d tasks\n", path,
            (long long)ls.n_used, (long long)ls.n_failed, ls.n_tasks);
    cm_params_default(&p);
    p.n_threads = 1;
    if (pair_weight >= 0)
        p.pair_weight = pair_weight;
    if (min_pair_ratio >= 0)
        p.min_pair_ratio = min_pair_ratio;
    if (monotone >= 0)
        p.monotone = monotone;
    if (cm_model_new(&p, &m) != AT_OK || cm_model_fit(m, d, err, sizeof err) != AT_OK)
        die("training", err);
    if (!quality_only) {
        bench_throughput(m);
        bench_training(m, &p);
    }
    bench_quality(st, d, &p);
    cm_model_free(m);
    cm_data_free(d);
    rec_store_close(st);
    return 0;
}
