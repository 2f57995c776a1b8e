/* tests/tuner/test_search.c -- the evolutionary search of one task (tuner/tn_search.c), in
** process, with a real cost model trained on real features:
**
**   - scoring a population in several threads picks exactly what one thread picks (the same
**     programs, in the same order, with the same features);
**   - a widened round (tn__search_set_widen, issue 16 item 2) picks more programs at random:
**     eps_greedy + 0.1 per level, capped at TN_SEARCH_MAX_WIDEN, and still never a program
**     it picked before;
**   - a code-size limit (max_code_size, --max-code-size) keeps every program over it out
**     of the picks, by the model and at random, and the features carry the size; a round
**     with nothing within the limit picks the best over it;
**   - states that lower to one program (kn_ir_hash) are picked once in a run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost_model/cost_model.h"
#include "kernels/kernels.h"
#include "tuner/tuner_int.h"

static ss_hw hw;

static ss_dag *dag_of(const char *spec)
{
    ss_dag *dag;
    char err[512];
    if (kn_op_build(spec, &dag, err, sizeof err) != AT_OK)
        fail_msg("%s: %s", spec, err);
    return dag;
}

/* A model trained on 96 random programs whose "cost" is a deterministic function of their
** loop structure (its printed text's hash): what it learns does not matter here, only that
** its scores are real XGBoost predictions on real features. */
static cm_model *trained_model(ss_dag *dag)
{
    ss_space *sp;
    cm_model *m;
    cm_params p;
    cm_sample smp[96];
    ss_state *st[96];
    at_rng rng;
    char err[512];
    int n = 0;
    at_rng_seed(&rng, 7);
    assert_int_equal(ss_space_new(dag, &hw, NULL, &sp, err, sizeof err), AT_OK);
    for (int tries = 0; n < 96 && tries < 1000; tries++) {
        at_buf b;
        if (ss_space_sample(sp, &rng, &st[n]) != AT_OK)
            continue;
        at_buf_init(&b);
        ss_state_print(st[n], &b);
        memset(&smp[n], 0, sizeof smp[n]);
        smp[n].task = "t";
        smp[n].state = st[n];
        smp[n].cost_s = 1e-3 * (1 + (double)(at_hash64(b.data, b.len) % 1000));
        at_buf_fini(&b);
        n++;
    }
    assert_int_equal(n, 96);
    cm_params_default(&p);
    p.n_threads = 1;
    assert_int_equal(cm_model_new(&p, &m), AT_OK);
    assert_int_equal(cm_model_update(m, smp, n, err, sizeof err), AT_OK);
    assert_int_equal(cm_model_get_state(m), CM_MODEL_TRAINED);
    for (int i = 0; i < n; i++)
        ss_state_free(st[i]);
    ss_space_free(sp);
    return m;
}

/* One round of n_pick from a fresh search (seed 11): the picked programs' texts, joined. */
static char *round_text(ss_dag *dag, cm_model *m, int n_threads, int widen, int n_pick,
                        tn_search_stats *stats)
{
    tn_search_cfg cfg;
    tn_search *s;
    ss_state *out[64];
    cm_feats *feats[64];
    int n = 0;
    at_buf b;
    char err[512];
    tn__search_cfg_default(&cfg);
    cfg.population = 512;
    cfg.n_threads = n_threads;
    cfg.max_code_size = 0; /* counts of random picks below: nothing left out for its size */
    assert_int_equal(tn__search_new(dag, &hw, &cfg, 11, &s, err, sizeof err), AT_OK);
    tn__search_set_widen(s, widen);
    assert_int_equal(tn__search_round(s, m, n_pick, out, feats, &n, stats), AT_OK);
    assert_int_equal(n, n_pick);
    at_buf_init(&b);
    for (int i = 0; i < n; i++) {
        ss_state_print(out[i], &b);
        /* the features travel with the program: the same ones as its own lowering */
        assert_non_null(feats[i]);
        at_buf_printf(&b, "|rows %d %.6g\n", feats[i]->n_rows,
                      feats[i]->n_rows ? (double)feats[i]->rows[0] : 0.0);
        ss_state_free(out[i]);
        cm_feats_fini(feats[i]);
        at_free(feats[i]);
    }
    tn__search_free(s);
    return at_buf_take(&b);
}

static void test_threads_pick_the_same(void **unused)
{
    ss_dag *dag = dag_of("matmul:M=128,N=128,K=128");
    cm_model *m = trained_model(dag);
    tn_search_stats s1, s4;
    char *one, *four;
    (void)unused;
    one = round_text(dag, m, 1, 0, 16, &s1);
    four = round_text(dag, m, 4, 0, 16, &s4);
    assert_non_null(one);
    assert_non_null(four);
    assert_string_equal(one, four);
    assert_int_equal(s1.n_scored, s4.n_scored);
    assert_true(s1.n_scored >= 512);
    at_free(one);
    at_free(four);
    cm_model_free(m);
    ss_dag_unref(dag);
}

static void test_widen_picks_more_at_random(void **unused)
{
    ss_dag *dag = dag_of("matmul:M=128,N=128,K=128");
    cm_model *m = trained_model(dag);
    tn_search_stats st;
    int want[] = {1, 3, 5, 7, 7}; /* floor((0.05 + 0.1 w) x 20), w capped at 3 */
    (void)unused;
    for (int w = 0; w <= 4; w++) {
        char *t = round_text(dag, m, 2, w, 20, &st);
        assert_int_equal(st.n_picked_random, want[w]);
        assert_int_equal(st.n_picked_model, 20 - want[w]);
        at_free(t);
    }
    cm_model_free(m);
    ss_dag_unref(dag);
}

/* One round of 32 picks (seed 11) under a code-size limit: the picked programs' sizes,
** recomputed from their own lowering and checked against what their features carry. */
static int round_sizes(ss_dag *dag, cm_model *m, int64_t limit, int64_t *sizes,
                       tn_search_stats *stats)
{
    tn_search_cfg cfg;
    tn_search *s;
    ss_state *out[32];
    cm_feats *feats[32];
    int n = 0;
    char err[512];
    tn__search_cfg_default(&cfg);
    assert_int_equal(cfg.max_code_size, TN_MAX_CODE_SIZE);
    cfg.population = 512;
    cfg.max_code_size = limit;
    assert_int_equal(tn__search_new(dag, &hw, &cfg, 11, &s, err, sizeof err), AT_OK);
    assert_int_equal(tn__search_round(s, m, 32, out, feats, &n, stats), AT_OK);
    for (int i = 0; i < n; i++) {
        kn_ir *ir;
        assert_int_equal(kn_lower(out[i], &ir, err, sizeof err), AT_OK);
        sizes[i] = kn_ir_code_size(ir);
        kn_ir_free(ir);
        assert_non_null(feats[i]);
        assert_int_equal(feats[i]->code_size, sizes[i]);
        ss_state_free(out[i]);
        cm_feats_fini(feats[i]);
        at_free(feats[i]);
    }
    tn__search_free(s);
    return n;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_code_size_limit(void **unused)
{
    ss_dag *dag = dag_of("matmul:M=128,N=128,K=128");
    cm_model *m = trained_model(dag);
    tn_search_stats st;
    int64_t free_sizes[32], sizes[32], limit;
    int n;
    (void)unused;
    n = round_sizes(dag, m, 0, free_sizes, &st);
    assert_int_equal(n, 32);
    assert_int_equal(st.n_too_big, 0);
    qsort(free_sizes, (size_t)n, sizeof *free_sizes, cmp_i64);
    limit = free_sizes[n / 2]; /* about half of the unlimited picks are over it */
    if (free_sizes[n - 1] <= limit)
        fail_msg("the unlimited picks all have %lld nodes or fewer: nothing to limit",
                 (long long)limit);
    n = round_sizes(dag, m, limit, sizes, &st);
    assert_int_equal(n, 32); /* the population has enough programs within the limit */
    assert_true(st.n_too_big > 0);
    for (int i = 0; i < n; i++)
        if (sizes[i] > limit)
            fail_msg("pick %d has %lld nodes, over the limit of %lld", i, (long long)sizes[i],
                     (long long)limit);
    assert_int_equal(st.n_picked_big, 0);
    /* nothing within a limit of 1 node: the round picks the best over it, not nothing */
    n = round_sizes(dag, m, 1, sizes, &st);
    assert_int_equal(n, 32);
    assert_int_equal(st.n_picked_big, 32);
    cm_model_free(m);
    ss_dag_unref(dag);
}

/* Rounds of a search whose picks are all "measured" (tn__search_add_measured with their
** features): no two picks of the run are one program (kn_ir_hash of their own lowering),
** though states that lower to one program are common in the population; the features carry
** the hash. */
static void test_one_program_once(void **unused)
{
    ss_dag *dag = dag_of("matmul:M=128,N=128,K=128");
    cm_model *m = trained_model(dag);
    tn_search_cfg cfg;
    tn_search *s;
    tn_search_stats st;
    uint64_t picked[12 * 32];
    int n_picked = 0, same = 0;
    char err[512];
    (void)unused;
    tn__search_cfg_default(&cfg);
    cfg.population = 256;
    assert_int_equal(tn__search_new(dag, &hw, &cfg, 5, &s, err, sizeof err), AT_OK);
    for (int r = 0; r < 12; r++) {
        ss_state *out[32];
        cm_feats *feats[32];
        int n = 0;
        assert_int_equal(tn__search_round(s, m, 32, out, feats, &n, &st), AT_OK);
        assert_true(n > 0);
        same += st.n_same_program;
        for (int i = 0; i < n; i++) {
            kn_ir *ir;
            uint64_t h;
            assert_int_equal(kn_lower(out[i], &ir, err, sizeof err), AT_OK);
            h = kn_ir_hash(ir);
            kn_ir_free(ir);
            assert_non_null(feats[i]);
            assert_true(feats[i]->ir_hash == h);
            for (int k = 0; k < n_picked; k++)
                if (picked[k] == h)
                    fail_msg("round %d pick %d is the program of an earlier pick (%d)", r, i, k);
            picked[n_picked++] = h;
            assert_int_equal(tn__search_add_measured(s, "{}", out[i], feats[i],
                                                     1e-3 * (1 + (double)(h % 100)), 1),
                             AT_OK);
            ss_state_free(out[i]);
            cm_feats_fini(feats[i]);
            at_free(feats[i]);
        }
    }
    /* the rule had something to do: other states of picked programs were passed over */
    if (same == 0)
        fail_msg("no pick was passed over as an earlier pick's program in %d picks", n_picked);
    tn__search_free(s);
    cm_model_free(m);
    ss_dag_unref(dag);
}

/* '--dim seq=LO..HI': multiples of 16, at most 1.25x apart where a step of 16 allows (a
** request pays at most 25 % of padding above 64), LO rounded up to 16, HI last. */
static void test_dim_range(void **unused)
{
    static const int64_t want[] = {16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 240, 256};
    int64_t b[40];
    int n = tn__dim_range(1, 256, b, 40);
    (void)unused;
    assert_int_equal(n, 12);
    for (int i = 0; i < n; i++)
        assert_int_equal(b[i], want[i]);
    for (int64_t len = 65; len <= 256; len++) { /* the bucket of every length above 64 */
        int k = 0;
        while (b[k] < len)
            k++;
        assert_true(b[k] * 4 <= len * 5);
    }
    assert_int_equal(tn__dim_range(16, 256, b, 40), 12);
    assert_int_equal(tn__dim_range(5, 12, b, 40), 1);
    assert_int_equal(b[0], 12);
    assert_int_equal(tn__dim_range(33, 40, b, 40), 1); /* 33 rounds up to 48 > 40: 40 */
    assert_int_equal(b[0], 40);
    assert_int_equal(tn__dim_range(1, 9999, b, 8), 8); /* no more than asked for */
    assert_int_equal(b[7], 128);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_pick_the_same),
        cmocka_unit_test(test_widen_picks_more_at_random),
        cmocka_unit_test(test_code_size_limit),
        cmocka_unit_test(test_one_program_once),
        cmocka_unit_test(test_dim_range),
    };
    ss_hw_cpu(&hw, 2, 32, 32768, 1 << 20);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
