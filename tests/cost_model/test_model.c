/* tests/cost_model/test_model.c -- the cost model's acceptance tests on measured data.
**
** The data set is built once per run: 240 random states each of matmul, conv2d and a fused
** conv2d+bias+relu, measured through the embedded tracker and agent as every measurement is
** (one kernel thread, 7 repeats of at least 0.5 ms) into a temporary SQLite store, then read
** back through cm_data_load_store.
**   - trained on 80% of it, the model orders the held-out 20% (pairs of one task whose
**     measured costs differ by more than 5%): median pairwise accuracy over 5 seeds >= 0.75;
**   - trained on all of it, the best predicted of 1,000 new random states is faster, when
**     measured, than the best of 8 random states (median over 3 seeds of the geometric mean
**     over the three tasks of the speed ratio > 1);
**   - the ranking objective beats chance on every task, and prediction is deterministic
**     and gives -inf to what does not lower;
**   - the comparator (cm_cmp) orders the held-out programs as the model must (0.75), beats
**     chance on every task and refuses what it cannot rank.
** AT_TEST_LONG=1 measures twice as many states.  AT_CM_DATASET=FILE reads a store measured
** before (with these three tasks) instead of measuring one, for work on the model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>

#include "tests/cost_model/cm_test.h"

static const char *specs[] = {
    "matmul:M=128,N=128,K=128",
    "conv2d:N=1,C=32,H=14,W=14,K=32,R=3,S=3,pad=1",
    "conv2d:N=1,C=8,H=14,W=14,K=16,R=3,S=3,pad=1,bias=1,relu=1",
};
#define N_TASKS 3
#define N_SEEDS 5      /* splits of the held-out accuracy (training only: cheap) */
#define N_BEST_SEEDS 3 /* draws of the best-of-1,000 test (each measures 27 kernels) */

static char dir[64], db[PATH_MAX];
static rec_store *store;
static cm_data *data;
static cm_params params;
static kn_target host;
static ss_hw hw;
static int n_per_task = 240;

static void test_pairwise_accuracy(void **unused)
{
    double acc[N_SEEDS], med;
    (void)unused;
    for (int s = 0; s < N_SEEDS; s++) {
        cm_data *tr, *te;
        cm_model *m;
        cm_metrics mt;
        double *sc;
        char err[512];
        cm_params p = params;
        p.seed = 100 + (uint64_t)s;
        assert_int_equal(cm_data_split(data, 0.8, 1000 + (uint64_t)s, &tr, &te), AT_OK);
        assert_int_equal(cm_model_new(&p, &m), AT_OK);
        if (cm_model_fit(m, tr, err, sizeof err) != AT_OK)
            fail_msg("training: %s", err);
        sc = at_malloc((size_t)cm_data_count(te) * sizeof *sc);
        assert_int_equal(cm_model_predict_data(m, te, sc), AT_OK);
        cm_metrics_eval(te, sc, 1.05, &mt);
        acc[s] = mt.pairwise_acc;
        fprintf(stderr, "seed %d: trained on %d, held out %d: pairwise accuracy %.3f (%lld "
                "pairs), top-1 recall %.2f, top-5 recall %.2f, top-1 score %.3f\n", s,
                cm_data_count(tr), cm_data_count(te), mt.pairwise_acc, (long long)mt.n_pairs,
                mt.top1_recall, mt.top5_recall, mt.top1_score);
        assert_true(mt.n_pairs > 1000);
        assert_int_equal(mt.n_tasks, N_TASKS);
        at_free(sc);
        cm_model_free(m);
        cm_data_free(tr);
        cm_data_free(te);
    }
    med = at_median_sort(acc, N_SEEDS);
    fprintf(stderr, "median pairwise accuracy %.3f\n", med);
    if (!(med >= 0.75))
        fail_msg("median held-out pairwise accuracy %.3f < 0.75", med);
}

/* cm_params.top_weight (LambdaRank's position weighting, 1 by default): the model it
** trains ranks held-out programs as well as the plain pairwise loss does, and differently
** (the weighting is applied, not ignored). */
static void test_top_weight(void **unused)
{
    cm_data *tr, *te;
    cm_metrics mt[2];
    double *sc[2];
    char err[512];
    int n, differ = 0;
    (void)unused;
    assert_int_equal(cm_data_split(data, 0.8, 77, &tr, &te), AT_OK);
    n = cm_data_count(te);
    for (int k = 0; k < 2; k++) {
        cm_model *m;
        cm_params p = params;
        p.seed = 7;
        p.top_weight = k ? 3.0 : 0.0;
        assert_int_equal(cm_model_new(&p, &m), AT_OK);
        if (cm_model_fit(m, tr, err, sizeof err) != AT_OK)
            fail_msg("training: %s", err);
        sc[k] = at_malloc((size_t)n * sizeof *sc[k]);
        assert_non_null(sc[k]);
        assert_int_equal(cm_model_predict_data(m, te, sc[k]), AT_OK);
        cm_metrics_eval(te, sc[k], 1.05, &mt[k]);
        fprintf(stderr, "top_weight %.0f: pairwise accuracy %.3f, top-1 recall %.2f, top-5 "
                "recall %.2f\n", p.top_weight, mt[k].pairwise_acc, mt[k].top1_recall,
                mt[k].top5_recall);
        cm_model_free(m);
    }
    for (int i = 0; i < n; i++)
        differ += sc[0][i] != sc[1][i];
    assert_true(differ > n / 2);
    if (!(mt[1].pairwise_acc >= 0.75 && mt[1].pairwise_acc >= mt[0].pairwise_acc - 0.03))
        fail_msg("top_weight 3: pairwise accuracy %.3f (%.3f without)", mt[1].pairwise_acc,
                 mt[0].pairwise_acc);
    at_free(sc[0]);
    at_free(sc[1]);
    cm_data_free(tr);
    cm_data_free(te);
}

/* Predicted best of 1,000 new random states against the best of 8 random states, both
** measured now. */
static void test_best_of_1000(void **unused)
{
    cm_model *m;
    char err[1024];
    double ratio[N_BEST_SEEDS], med;
    (void)unused;
    tn_measure_cfg o = ct_measure_cfg();
    tn_measurer *ms;
    rec_store *out;
    char path[PATH_MAX];
    assert_int_equal(cm_model_new(&params, &m), AT_OK);
    if (cm_model_fit(m, data, err, sizeof err) != AT_OK)
        fail_msg("training: %s", err);
    /* measured into a store of their own (the data set's may be read-only) */
    snprintf(path, sizeof path, "%s/best.db", dir);
    assert_int_equal(rec_store_open(path, REC_OPEN_CREATE, &out, err, sizeof err), AT_OK);
    if (tn_measurer_open(out, &o, &ms, err, sizeof err) != AT_OK)
        fail_msg("measuring: %s", err);
    for (int s = 0; s < N_BEST_SEEDS; s++) {
        double log_sum = 0;
        for (int t = 0; t < N_TASKS; t++) {
            ss_dag *dag;
            ss_space *sp;
            ss_state *st[1000];
            const ss_state *run[9];
            tn_measure_res res[9];
            double *sc = at_malloc(1000 * sizeof *sc), best_rand = INFINITY;
            at_rng rng;
            int n = 0, top = 0;
            assert_int_equal(kn_op_build(specs[t], &dag, err, sizeof err), AT_OK);
            assert_int_equal(ss_space_new(dag, &hw, NULL, &sp, err, sizeof err), AT_OK);
            at_rng_seed(&rng, 5000 + 31 * (uint64_t)s + (uint64_t)t);
            while (n < 1000)
                if (ss_space_sample(sp, &rng, &st[n]) == AT_OK)
                    n++;
            assert_int_equal(cm_model_predict(m, (const ss_state *const *)st, n, sc), AT_OK);
            for (int i = 1; i < n; i++)
                if (sc[i] > sc[top])
                    top = i;
            assert_true(isfinite(sc[top]));
            /* the first 8 samples are 8 uniformly random states */
            run[0] = st[top];
            for (int i = 0; i < 8; i++)
                run[1 + i] = st[i];
            if (tn_measurer_run(ms, dag, run, 9, res, err, sizeof err) != AT_OK)
                fail_msg("measuring: %s", err);
            assert_int_equal(res[0].status, 0);
            for (int i = 1; i < 9; i++)
                if (res[i].status == 0 && res[i].min_s < best_rand)
                    best_rand = res[i].min_s;
            fprintf(stderr, "seed %d %s: predicted best of 1000 %.1f us, best of 8 random "
                    "%.1f us (x%.2f)\n", s, specs[t], res[0].min_s * 1e6, best_rand * 1e6,
                    best_rand / res[0].min_s);
            log_sum += log(best_rand / res[0].min_s);
            for (int i = 0; i < n; i++)
                ss_state_free(st[i]);
            at_free(sc);
            ss_space_free(sp);
            ss_dag_unref(dag);
        }
        ratio[s] = exp(log_sum / N_TASKS);
        fprintf(stderr, "seed %d: predicted best / random best of 8: x%.2f faster (geometric "
                "mean of the tasks)\n", s, ratio[s]);
    }
    tn_measurer_close(ms, 0);
    rec_store_close(out);
    med = at_median_sort(ratio, N_BEST_SEEDS);
    fprintf(stderr, "median x%.2f\n", med);
    if (!(med > 1))
        fail_msg("the predicted best of 1,000 is not faster than the best of 8 random "
                 "states in the median of %d seeds (x%.2f)", N_BEST_SEEDS, med);
    cm_model_free(m);
}

/* Each task on its own is ranked well above chance, by both objectives; predictions are
** deterministic; a state that does not lower gets -inf. */
static void test_per_task_and_determinism(void **unused)
{
    cm_data *tr, *te;
    double *a, *b;
    char err[512];
    (void)unused;
    assert_int_equal(cm_data_split(data, 0.8, 77, &tr, &te), AT_OK);
    a = at_malloc((size_t)cm_data_count(te) * sizeof *a);
    b = at_malloc((size_t)cm_data_count(te) * sizeof *b);
    for (int o = 0; o < CM_N_OBJS; o++) {
        cm_params p = params;
        cm_model *m;
        p.objective = (cm_objective)o;
        assert_int_equal(cm_model_new(&p, &m), AT_OK);
        if (cm_model_fit(m, tr, err, sizeof err) != AT_OK)
            fail_msg("%s", err);
        assert_int_equal(cm_model_predict_data(m, te, a), AT_OK);
        assert_int_equal(cm_model_predict_data(m, te, b), AT_OK);
        assert_memory_equal(a, b, (size_t)cm_data_count(te) * sizeof *a);
        for (int t = 0; t < cm_data_n_tasks(te); t++) {
            int idx[4096], n = 0;
            cm_data *one;
            cm_metrics mt;
            double sc[4096];
            for (int i = 0; i < cm_data_count(te) && n < 4096; i++)
                if (cm_data_task_of(te, i) == t) {
                    sc[n] = a[i];
                    idx[n++] = i;
                }
            assert_int_equal(cm_data_new(&one), AT_OK);
            assert_int_equal(cm_data_append(one, te, idx, n), AT_OK);
            cm_metrics_eval(one, sc, 1.05, &mt);
            fprintf(stderr, "objective %s, task %s: pairwise accuracy %.3f (%lld pairs)\n",
                    cm_objective_name((cm_objective)o), cm_data_task_name(te, t),
                    mt.pairwise_acc, (long long)mt.n_pairs);
            if (!(mt.pairwise_acc > 0.6))
                fail_msg("objective %s ranks task %d at chance: %.3f",
                         cm_objective_name((cm_objective)o), t, mt.pairwise_acc);
            cm_data_free(one);
        }
        {
            /* a sketch does not lower: -inf, next to a state that does */
            ss_dag *dag;
            ss_space *sp;
            const ss_state *two[2];
            ss_state *st;
            at_rng rng;
            double v[2];
            assert_int_equal(kn_op_build(specs[0], &dag, err, sizeof err), AT_OK);
            assert_int_equal(ss_space_new(dag, &hw, NULL, &sp, err, sizeof err), AT_OK);
            at_rng_seed(&rng, 9);
            while (ss_space_sample(sp, &rng, &st) != AT_OK)
                ;
            two[0] = ss_space_sketch(sp, 0);
            two[1] = st;
            assert_int_equal(cm_model_predict(m, two, 2, v), AT_OK);
            assert_true(isinf(v[0]) && v[0] < 0);
            assert_true(isfinite(v[1]));
            ss_state_free(st);
            ss_space_free(sp);
            ss_dag_unref(dag);
        }
        cm_model_free(m);
    }
    at_free(a);
    at_free(b);
    cm_data_free(tr);
    cm_data_free(te);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The comparator (cm_cmp): trained on 80%, its soft Borda count orders the held-out 20% of
** each task well above chance and overall as the model's acceptance asks (0.75); scores are
** win probabilities in [0, 1], deterministic, -inf for a program with no rows; it refuses to
** rank untrained and to train on data without a pair apart by more than 5%. */
static void test_comparator(void **unused)
{
    cm_data *tr, *te, *one;
    cm_cmp *c;
    cm_cmp_params cp;
    cm_metrics mt;
    double *a, *b;
    char err[512];
    int n;
    (void)unused;
    cm_cmp_params_default(&cp);
    cp.n_threads = 1;
    cp.seed = 3;
    assert_int_equal(cm_data_split(data, 0.8, 78, &tr, &te), AT_OK);
    n = cm_data_count(te);
    a = at_malloc((size_t)n * sizeof *a);
    b = at_malloc((size_t)n * sizeof *b);
    assert_int_equal(cm_cmp_new(&cp, &c), AT_OK);
    assert_int_equal(cm_cmp_n_pairs(c), 0);
    assert_int_equal(cm_cmp_rank_data(c, te, a), AT_EINVAL);
    if (cm_cmp_fit(c, tr, err, sizeof err) != AT_OK)
        fail_msg("training the comparator: %s", err);
    assert_true(cm_cmp_n_pairs(c) > cm_data_count(tr));
    assert_int_equal(cm_cmp_rank_data(c, te, a), AT_OK);
    assert_int_equal(cm_cmp_rank_data(c, te, b), AT_OK);
    assert_memory_equal(a, b, (size_t)n * sizeof *a);
    for (int i = 0; i < n; i++) {
        int rows;
        cm_data_rows(te, i, &rows);
        assert_true(rows == 0 ? isinf(a[i]) && a[i] < 0 : a[i] >= 0 && a[i] <= 1);
    }
    cm_metrics_eval(te, a, 1.05, &mt);
    fprintf(stderr, "comparator: %d pairs; held out: pairwise accuracy %.3f, top-1 recall %.2f, "
            "top-5 recall %.2f\n", cm_cmp_n_pairs(c), mt.pairwise_acc, mt.top1_recall,
            mt.top5_recall);
    if (!(mt.pairwise_acc >= 0.75))
        fail_msg("comparator: held-out pairwise accuracy %.3f < 0.75", mt.pairwise_acc);
    for (int t = 0; t < cm_data_n_tasks(te); t++) {
        int idx[4096], k = 0;
        double sc[4096];
        cm_metrics m1;
        for (int i = 0; i < n && k < 4096; i++)
            if (cm_data_task_of(te, i) == t)
                sc[k] = a[i], idx[k++] = i;
        assert_int_equal(cm_data_new(&one), AT_OK);
        assert_int_equal(cm_data_append(one, te, idx, k), AT_OK);
        cm_metrics_eval(one, sc, 1.05, &m1);
        if (!(m1.pairwise_acc > 0.6))
            fail_msg("comparator ranks task %d at chance: %.3f", t, m1.pairwise_acc);
        /* ranked alone, the task's programs get the scores they got among all tasks */
        assert_int_equal(cm_cmp_rank_data(c, one, b), AT_OK);
        for (int i = 0; i < k; i++)
            assert_true(b[i] == sc[i] || fabs(b[i] - sc[i]) < 1e-9);
        cm_data_free(one);
    }
    {
        /* placed among the training programs, whose order is known (cm_cmp_rank_known) */
        double *k1 = at_malloc((size_t)n * sizeof *k1), *k2 = at_malloc((size_t)n * sizeof *k2);
        double two[2];
        cm_metrics mk;
        cm_data *kn, *pair;
        int idx[4096], k = 0, i0 = -1, j0 = -1;
        assert_non_null(k1);
        assert_non_null(k2);
        assert_int_equal(cm_cmp_rank_known(c, tr, 1, te, k1), AT_OK);
        assert_int_equal(cm_cmp_rank_known(c, tr, 1, te, k2), AT_OK);
        assert_memory_equal(k1, k2, (size_t)n * sizeof *k1);
        for (int i = 0; i < n; i++) {
            int rows;
            cm_data_rows(te, i, &rows);
            assert_true(rows == 0 ? isinf(k1[i]) && k1[i] < 0 : k1[i] >= 0 && k1[i] <= 1);
        }
        cm_metrics_eval(te, k1, 1.05, &mk);
        fprintf(stderr, "comparator among the known: pairwise accuracy %.3f, top-1 recall %.2f, "
                "top-5 recall %.2f\n", mk.pairwise_acc, mk.top1_recall, mk.top5_recall);
        if (!(mk.pairwise_acc >= 0.75))
            fail_msg("comparator among the known: pairwise accuracy %.3f < 0.75", mk.pairwise_acc);
        assert_int_equal(cm_cmp_rank_known(c, tr, 0.2, te, k2), AT_OK);
        for (int i = 0; i < n; i++)
            assert_true(isinf(k2[i]) ? isinf(k1[i]) : k2[i] >= 0 && k2[i] <= 1);
        assert_int_equal(cm_cmp_rank_known(c, tr, 1.5, te, k2), AT_EINVAL);
        assert_int_equal(cm_cmp_rank_known(c, tr, -0.1, te, k2), AT_EINVAL);
        /* known programs of task 0 only: the other tasks' programs keep their scores among
        ** themselves (a[], from cm_cmp_rank_data) */
        for (int i = 0; i < cm_data_count(tr) && k < 4096; i++)
            if (cm_data_task_of(tr, i) == 0)
                idx[k++] = i;
        assert_int_equal(cm_data_new(&kn), AT_OK);
        assert_int_equal(cm_data_append(kn, tr, idx, k), AT_OK);
        assert_int_equal(cm_cmp_rank_known(c, kn, 1, te, k2), AT_OK);
        for (int i = 0; i < n; i++)
            if (strcmp(cm_data_task_name(te, cm_data_task_of(te, i)), cm_data_task_name(tr, 0)))
                assert_true(k2[i] == a[i] || (isinf(k2[i]) && isinf(a[i])));
            else /* the same anchors in the same order */
                assert_true(k2[i] == k1[i] || (isinf(k2[i]) && isinf(k1[i])));
        cm_data_free(kn);
        /* one known program: the candidate's score is its soft Borda count in the pair */
        for (int i = 0; i < n && i0 < 0; i++) {
            int rows;
            cm_data_rows(te, i, &rows);
            if (rows > 0 && cm_data_cost(te, i) < AT_MEASURE_FAIL_COST)
                i0 = i;
        }
        for (int j = 0; j < cm_data_count(tr) && j0 < 0; j++) {
            int rows;
            cm_data_rows(tr, j, &rows);
            if (rows > 0 && cm_data_cost(tr, j) > 0 && cm_data_cost(tr, j) < AT_MEASURE_FAIL_COST &&
                strcmp(cm_data_task_name(tr, cm_data_task_of(tr, j)),
                       cm_data_task_name(te, cm_data_task_of(te, i0))) == 0)
                j0 = j;
        }
        assert_true(i0 >= 0 && j0 >= 0);
        assert_int_equal(cm_data_new(&kn), AT_OK);
        assert_int_equal(cm_data_append(kn, tr, &j0, 1), AT_OK);
        assert_int_equal(cm_data_new(&one), AT_OK);
        assert_int_equal(cm_data_append(one, te, &i0, 1), AT_OK);
        assert_int_equal(cm_data_new(&pair), AT_OK);
        assert_int_equal(cm_data_append(pair, te, &i0, 1), AT_OK);
        assert_int_equal(cm_data_append(pair, tr, &j0, 1), AT_OK);
        assert_int_equal(cm_cmp_rank_known(c, kn, 1, one, &two[0]), AT_OK);
        assert_int_equal(cm_cmp_rank_data(c, pair, k2), AT_OK);
        two[1] = k2[0];
        if (!(fabs(two[0] - two[1]) < 1e-6))
            fail_msg("one known program: %.9f, the pair's soft Borda count %.9f", two[0], two[1]);
        cm_data_free(kn);
        cm_data_free(one);
        cm_data_free(pair);
        at_free(k1);
        at_free(k2);
    }
    {
        /* feature sets: NULL and a sketch that does not lower score -inf */
        ss_dag *dag;
        ss_space *sp;
        ss_state *st[3];
        cm_feats f[3];
        const cm_feats *fp[4];
        at_rng rng;
        double v[4];
        assert_int_equal(kn_op_build(specs[0], &dag, err, sizeof err), AT_OK);
        assert_int_equal(ss_space_new(dag, &hw, NULL, &sp, err, sizeof err), AT_OK);
        at_rng_seed(&rng, 11);
        for (int i = 0; i < 2; i++)
            while (ss_space_sample(sp, &rng, &st[i]) != AT_OK)
                ;
        for (int i = 0; i < 3; i++)
            cm_feats_init(&f[i]);
        assert_int_equal(cm_features_of_state(st[0], &f[0], err, sizeof err), AT_OK);
        assert_int_equal(cm_features_of_state(st[1], &f[1], err, sizeof err), AT_OK);
        assert_int_not_equal(cm_features_of_state(ss_space_sketch(sp, 0), &f[2], err, sizeof err),
                             AT_OK);
        fp[0] = &f[0], fp[1] = NULL, fp[2] = &f[2], fp[3] = &f[1];
        assert_int_equal(cm_cmp_rank_feats(c, fp, 4, v), AT_OK);
        assert_true(isinf(v[1]) && v[1] < 0 && isinf(v[2]) && v[2] < 0);
        assert_true(v[0] >= 0 && v[0] <= 1 && v[3] >= 0 && v[3] <= 1);
        assert_true(fabs(v[0] + v[3] - 1) < 1e-6); /* two programs: P(a) + P(b) = 1 */
        for (int i = 0; i < 3; i++)
            cm_feats_fini(&f[i]);
        for (int i = 0; i < 2; i++)
            ss_state_free(st[i]);
        ss_space_free(sp);
        ss_dag_unref(dag);
    }
    cm_cmp_free(c);
    {
        /* one program a task: no pair to learn from */
        int idx[N_TASKS], k = 0;
        for (int i = 0; i < cm_data_count(tr) && k < N_TASKS; i++)
            if (cm_data_task_of(tr, i) == k)
                idx[k++] = i;
        assert_int_equal(cm_data_new(&one), AT_OK);
        assert_int_equal(cm_data_append(one, tr, idx, k), AT_OK);
        assert_int_equal(cm_cmp_new(&cp, &c), AT_OK);
        err[0] = 0;
        assert_int_equal(cm_cmp_fit(c, one, err, sizeof err), AT_EINVAL);
        assert_non_null(strstr(err, "two programs"));
        assert_int_equal(cm_cmp_rank_data(c, one, a), AT_EINVAL);
        assert_int_equal(cm_cmp_rank_known(c, tr, 1, one, a), AT_EINVAL);
        cm_cmp_free(c);
        cm_data_free(one);
        cp.max_rounds = 0;
        assert_int_equal(cm_cmp_new(&cp, &c), AT_EINVAL);
        assert_null(c);
        cm_cmp_params_default(&cp);
        cp.top_pairs = 1.5;
        assert_int_equal(cm_cmp_new(&cp, &c), AT_EINVAL);
        cp.top_pairs = -0.1;
        assert_int_equal(cm_cmp_new(&cp, &c), AT_EINVAL);
    }
    {
        /* top_pairs: every pair among each task's fastest quarter (apart by more than 5 %)
        ** added to the random partners' pairs, in both orders */
        int base, extra = 0;
        cm_cmp_params_default(&cp);
        cp.n_threads = 1;
        cp.seed = 3;
        assert_int_equal(cm_cmp_new(&cp, &c), AT_OK);
        if (cm_cmp_fit(c, tr, err, sizeof err) != AT_OK)
            fail_msg("training the comparator: %s", err);
        base = cm_cmp_n_pairs(c);
        cm_cmp_free(c);
        for (int t = 0; t < cm_data_n_tasks(tr); t++) {
            double cost[4096];
            int m = 0, nt;
            for (int i = 0; i < cm_data_count(tr) && m < 4096; i++) {
                int rows;
                double x = cm_data_cost(tr, i);
                cm_data_rows(tr, i, &rows);
                if (cm_data_task_of(tr, i) == t && rows > 0 && x > 0 && x < AT_MEASURE_FAIL_COST)
                    cost[m++] = x;
            }
            qsort(cost, (size_t)m, sizeof *cost, cmp_double);
            nt = (int)ceil(0.25 * m);
            nt = nt < 2 ? 2 : nt > m ? m : nt;
            for (int x = 0; x < nt; x++)
                for (int z = x + 1; z < nt; z++)
                    extra += cost[z] > cost[x] * 1.05 ? 2 : 0;
        }
        assert_true(extra > 0);
        cp.top_pairs = 0.25;
        assert_int_equal(cm_cmp_new(&cp, &c), AT_OK);
        if (cm_cmp_fit(c, tr, err, sizeof err) != AT_OK)
            fail_msg("training the comparator with top_pairs: %s", err);
        assert_int_equal(cm_cmp_n_pairs(c), base + extra);
        assert_int_equal(cm_cmp_rank_data(c, te, a), AT_OK);
        cm_metrics_eval(te, a, 1.05, &mt);
        fprintf(stderr, "comparator with top_pairs 0.25: %d pairs (%d more); held out: pairwise "
                "accuracy %.3f, top-5 recall %.2f\n", cm_cmp_n_pairs(c), extra,
                mt.pairwise_acc, mt.top5_recall);
        if (!(mt.pairwise_acc >= 0.75))
            fail_msg("comparator with top_pairs: held-out pairwise accuracy %.3f < 0.75",
                     mt.pairwise_acc);
        cm_cmp_free(c);
    }
    at_free(a);
    at_free(b);
    cm_data_free(tr);
    cm_data_free(te);
}

static int setup(void **unused)
{
    cm_load_stats ls;
    char err[1024];
    (void)unused;
    if (getenv("AT_TEST_LONG"))
        n_per_task *= 2;
    if (kn_target_host(&host) != AT_OK)
        return -1;
    ss_hw_cpu(&hw, host.n_cores, host.vector_bytes, host.l1_bytes, host.l2_bytes);
    ct_mkdtemp(dir);
    if (getenv("AT_CM_DATASET")) {
        /* a data set measured before (for working on the model): read it, measure nothing */
        snprintf(db, sizeof db, "%s", getenv("AT_CM_DATASET"));
        if (rec_store_open(db, REC_OPEN_READONLY, &store, err, sizeof err) != AT_OK) {
            fprintf(stderr, "%s\n", err);
            return -1;
        }
    } else {
        snprintf(db, sizeof db, "%s/model.db", dir);
        if (rec_store_open(db, REC_OPEN_CREATE, &store, err, sizeof err) != AT_OK) {
            fprintf(stderr, "%s\n", err);
            return -1;
        }
        if (ct_build_dataset(store, specs, N_TASKS, n_per_task, 1) != 0)
            return -1;
    }
    if (cm_data_new(&data) != AT_OK ||
        cm_data_load_store(data, store, NULL, &ls, err, sizeof err) != AT_OK) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    fprintf(stderr, "data set: %lld records, %lld used, %lld failed, %d tasks\n",
            (long long)ls.n_records, (long long)ls.n_used, (long long)ls.n_failed, ls.n_tasks);
    if (ls.n_tasks != N_TASKS ||
        (!getenv("AT_CM_DATASET") && cm_data_count(data) < N_TASKS * n_per_task * 9 / 10))
        return -1;
    cm_params_default(&params);
    params.n_threads = 1;
    return 0;
}

static int teardown(void **unused)
{
    (void)unused;
    cm_data_free(data);
    rec_store_close(store);
    ct_rmdir(dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pairwise_accuracy),
        cmocka_unit_test(test_top_weight),
        cmocka_unit_test(test_best_of_1000),
        cmocka_unit_test(test_per_task_and_determinism),
        cmocka_unit_test(test_comparator),
    };
    tn_fleet_prepare(); /* the embedded agent's launcher, before any thread */
    return cmocka_run_group_tests(tests, setup, teardown);
}
