/* tests/cost_model/test_blob.c -- saving and loading models: byte blobs, the records
** store, pre-training from a store, warm-up and retraining, and every way a blob can be
** corrupt or mismatched (a clear error, the model unchanged, and a run that falls back to
** training from scratch and says so).
**
** The data: 32 random matmul states measured here into a temporary store. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>

#include "tests/cost_model/cm_test.h"

#define N_STATES 32
#define TARGET "llvm -mtriple=x86_64-pc-linux-gnu -mcpu=test"

static char dir[64], db[PATH_MAX];
static rec_store *store;
static cm_data *data;
static cm_params params;

static cm_model *trained(void)
{
    cm_model *m;
    char err[512];
    assert_int_equal(cm_model_new(&params, &m), AT_OK);
    if (cm_model_fit(m, data, err, sizeof err) != AT_OK)
        fail_msg("training: %s", err);
    assert_int_equal(cm_model_get_state(m), CM_MODEL_TRAINED);
    return m;
}

static double *predict_all(cm_model *m)
{
    double *s = at_malloc((size_t)cm_data_count(data) * sizeof *s);
    assert_non_null(s);
    assert_int_equal(cm_model_predict_data(m, data, s), AT_OK);
    return s;
}

static void test_blob_round_trip(void **unused)
{
    cm_model *a = trained(), *b;
    void *blob;
    size_t n;
    double *sa, *sb;
    char err[512];
    (void)unused;
    assert_int_equal(cm_model_save(a, &blob, &n), AT_OK);
    assert_true(n > 48);
    assert_memory_equal(blob, "ATCM", 4);
    assert_int_equal(cm_model_new(&params, &b), AT_OK);
    assert_int_equal(cm_model_get_state(b), CM_MODEL_WARMUP);
    if (cm_model_load(b, blob, n, err, sizeof err) != AT_OK)
        fail_msg("%s", err);
    assert_int_equal(cm_model_get_state(b), CM_MODEL_PRETRAINED);
    assert_int_equal(cm_model_n_records(b), N_STATES);
    sa = predict_all(a);
    sb = predict_all(b);
    for (int i = 0; i < cm_data_count(data); i++)
        assert_float_equal(sa[i], sb[i], 1e-4 * (1 + fabs(sa[i])));
    /* and saved again, the loaded model gives the same bytes' worth of trees */
    {
        void *blob2;
        size_t n2;
        assert_int_equal(cm_model_save(b, &blob2, &n2), AT_OK);
        assert_int_equal(n2, n);
        at_free(blob2);
    }
    at_free(sa);
    at_free(sb);
    at_free(blob);
    cm_model_free(a);
    cm_model_free(b);
}

/* Recompute the checksum of a blob whose header the test changed (docs/cost_model.md). */
static void reseal(uint8_t *b, size_t n)
{
    at_sha256 s;
    uint8_t h[32];
    at_sha256_init(&s);
    at_sha256_update(&s, b, 40);
    at_sha256_update(&s, b + 48, n - 48);
    at_sha256_final(&s, h);
    memcpy(b + 40, h, 8);
}

static void expect_refused(cm_model *m, const void *blob, size_t n, at_err want,
                           const char *words)
{
    char err[512];
    at_err e = cm_model_load(m, blob, n, err, sizeof err);
    if (e != want)
        fail_msg("loading a bad blob gave %s (%s), want %s", at_errname(e), err, at_errname(want));
    if (strstr(err, words) == NULL)
        fail_msg("the error '%s' does not say '%s'", err, words);
    /* the model is unchanged: still in warm-up */
    assert_int_equal(cm_model_get_state(m), CM_MODEL_WARMUP);
}

static void test_blob_corrupt(void **unused)
{
    cm_model *a = trained(), *m;
    uint8_t *blob, *bad;
    size_t n;
    (void)unused;
    assert_int_equal(cm_model_save(a, (void **)&blob, &n), AT_OK);
    assert_int_equal(cm_model_new(&params, &m), AT_OK);
    bad = at_malloc(n + 16);
    assert_non_null(bad);

    expect_refused(m, NULL, 0, AT_ECORRUPT, "not a cost-model blob");
    expect_refused(m, "hello", 5, AT_ECORRUPT, "not a cost-model blob");
    memcpy(bad, blob, n);
    bad[0] = 'X';
    expect_refused(m, bad, n, AT_ECORRUPT, "not a cost-model blob");
    /* a flipped bit anywhere in the trees */
    memcpy(bad, blob, n);
    bad[n / 2] ^= 0x10;
    expect_refused(m, bad, n, AT_ECORRUPT, "checksum");
    /* truncated, padded */
    expect_refused(m, blob, n - 1, AT_ECORRUPT, "truncated");
    memcpy(bad, blob, n);
    memset(bad + n, 0, 16);
    expect_refused(m, bad, n + 16, AT_ECORRUPT, "truncated");
    expect_refused(m, blob, 40, AT_ECORRUPT, "not a cost-model blob");
    /* another feature version, another number of features, another blob version */
    memcpy(bad, blob, n);
    bad[8] = (uint8_t)(CM_FEATURE_VERSION + 1);
    reseal(bad, n);
    expect_refused(m, bad, n, AT_EVERSION, "mismatched");
    memcpy(bad, blob, n);
    bad[12] = (uint8_t)(CM_N_FEATS - 1);
    reseal(bad, n);
    expect_refused(m, bad, n, AT_EVERSION, "features");
    memcpy(bad, blob, n);
    bad[4] = 99;
    reseal(bad, n);
    expect_refused(m, bad, n, AT_EVERSION, "blob version");
    /* a consistent header over trees XGBoost refuses */
    memcpy(bad, blob, n);
    memset(bad + 56, 'x', 32);
    reseal(bad, n);
    expect_refused(m, bad, n, AT_ECORRUPT, "XGBoost");
    /* a booster size that runs past the end */
    memcpy(bad, blob, n);
    bad[48 + 7] = 0x7f;
    reseal(bad, n);
    expect_refused(m, bad, n, AT_ECORRUPT, "overruns");
    /* nothing to save while in warm-up */
    {
        void *b;
        size_t bn;
        assert_int_equal(cm_model_save(m, &b, &bn), AT_EINVAL);
        assert_null(b);
    }
    at_free(bad);
    at_free(blob);
    cm_model_free(a);
    cm_model_free(m);
}

typedef struct fallback_ctx {
    cm_model *m;
    int loaded;
} fallback_ctx;

static void run_fallback(void *p)
{
    fallback_ctx *c = p;
    c->loaded = cm_model_load_or_scratch(c->m, store, TARGET);
}

/* The store: save, load, newest wins; corrupt and mismatched models make a run fall back
** to training from scratch and log why. */
static void test_store_models(void **unused)
{
    cm_model *a = trained(), *b;
    char err[512], *log;
    double *sa, *sb;
    fallback_ctx fc;
    at_log_level lv = at_log_get_level();
    (void)unused;
    assert_int_equal(cm_model_new(&params, &b), AT_OK);
    assert_int_equal(cm_model_load_store(b, store, TARGET, err, sizeof err), AT_ENOTFOUND);
    assert_non_null(strstr(err, "no cost model"));
    if (cm_model_save_store(a, store, TARGET, err, sizeof err) != AT_OK)
        fail_msg("%s", err);
    if (cm_model_load_store(b, store, TARGET, err, sizeof err) != AT_OK)
        fail_msg("%s", err);
    assert_int_equal(cm_model_get_state(b), CM_MODEL_PRETRAINED);
    sa = predict_all(a);
    sb = predict_all(b);
    for (int i = 0; i < cm_data_count(data); i++)
        assert_float_equal(sa[i], sb[i], 1e-4 * (1 + fabs(sa[i])));
    {
        /* what the store says about it */
        void *blob;
        size_t n;
        char format[32];
        int fv;
        int64_t nrec;
        assert_int_equal(rec_model_load(store, TARGET, &blob, &n, format, &fv, &nrec), AT_OK);
        assert_string_equal(format, CM_BLOB_FORMAT);
        assert_int_equal(fv, CM_FEATURE_VERSION);
        assert_int_equal(nrec, N_STATES);
        at_free(blob);
    }
    cm_model_free(b);

    /* a newer model of another feature version: mismatched, the run trains from scratch */
    {
        void *blob;
        size_t n;
        assert_int_equal(cm_model_save(a, &blob, &n), AT_OK);
        assert_int_equal(rec_model_save(store, TARGET, CM_BLOB_FORMAT, CM_FEATURE_VERSION + 1,
                                        10, blob, n, NULL),
                         AT_OK);
        at_free(blob);
    }
    assert_int_equal(cm_model_new(&params, &b), AT_OK);
    assert_int_equal(cm_model_load_store(b, store, TARGET, err, sizeof err), AT_EVERSION);
    assert_non_null(strstr(err, "mismatched"));
    at_log_set_level(AT_LOG_INFO);
    fc.m = b;
    log = ct_capture_stderr(run_fallback, &fc);
    at_log_set_level(lv);
    assert_int_equal(fc.loaded, 0);
    assert_int_equal(cm_model_get_state(b), CM_MODEL_WARMUP);
    assert_non_null(log);
    if (!strstr(log, "mismatched") || !strstr(log, "training from scratch"))
        fail_msg("the fallback does not say why: '%s'", log);
    at_free(log);

    /* a newer one that is garbage: corrupt, same fallback */
    assert_int_equal(rec_model_save(store, TARGET, CM_BLOB_FORMAT, CM_FEATURE_VERSION, 10,
                                    "garbage-garbage-garbage-garbage-garbage-garbage-gar", 51,
                                    NULL),
                     AT_OK);
    assert_int_equal(cm_model_load_store(b, store, TARGET, err, sizeof err), AT_ECORRUPT);
    at_log_set_level(AT_LOG_INFO);
    log = ct_capture_stderr(run_fallback, &fc);
    at_log_set_level(lv);
    assert_int_equal(fc.loaded, 0);
    assert_int_equal(cm_model_get_state(b), CM_MODEL_WARMUP);
    if (!log || !strstr(log, "corrupt") || !strstr(log, "training from scratch"))
        fail_msg("the fallback does not say why: '%s'", log ? log : "(nothing)");
    at_free(log);
    /* another format string */
    assert_int_equal(rec_model_save(store, TARGET, "onnx", CM_FEATURE_VERSION, 10, "x", 1, NULL),
                     AT_OK);
    assert_int_equal(cm_model_load_store(b, store, TARGET, err, sizeof err), AT_EVERSION);
    assert_non_null(strstr(err, "format"));

    /* fixed by saving a good one again: newest wins */
    if (cm_model_save_store(a, store, TARGET, err, sizeof err) != AT_OK)
        fail_msg("%s", err);
    fc.m = b;
    run_fallback(&fc);
    assert_int_equal(fc.loaded, 1);
    assert_int_equal(cm_model_get_state(b), CM_MODEL_PRETRAINED);
    at_free(sa);
    at_free(sb);
    cm_model_free(a);
    cm_model_free(b);
}

/* Pre-training reads every record of the store; a model loaded at the start of a run is
** used at once and then refined by what the run measures. */
static void test_pretrain_and_refine(void **unused)
{
    cm_model *p, *m;
    cm_load_stats ls;
    cm_data *a, *b;
    cm_sample *s;
    char err[512];
    double *sc;
    int n;
    (void)unused;
    assert_int_equal(cm_model_new(&params, &p), AT_OK);
    if (cm_model_pretrain(p, store, NULL, &ls, err, sizeof err) != AT_OK)
        fail_msg("%s", err);
    assert_int_equal(ls.n_records, N_STATES);
    assert_int_equal(ls.n_used, N_STATES);
    assert_int_equal(ls.n_tasks, 1);
    assert_int_equal(cm_model_n_records(p), N_STATES);
    assert_int_equal(cm_model_get_state(p), CM_MODEL_TRAINED);

    /* a fresh run: load, predict at once (not random), then refine with new results */
    assert_int_equal(cm_data_split(data, 0.5, 3, &a, &b), AT_OK);
    assert_int_equal(cm_model_new(&params, &m), AT_OK);
    {
        void *blob;
        size_t bn;
        assert_int_equal(cm_model_save(p, &blob, &bn), AT_OK);
        assert_int_equal(cm_model_load(m, blob, bn, err, sizeof err), AT_OK);
        at_free(blob);
    }
    n = cm_data_count(b);
    sc = at_malloc((size_t)n * sizeof *sc);
    assert_int_equal(cm_model_predict_data(m, b, sc), AT_OK);
    {
        /* a loaded model's scores are not the warm-up's uniform [0, 1) */
        int outside = 0;
        for (int i = 0; i < n; i++)
            outside += sc[i] < 0 || sc[i] >= 1;
        assert_true(outside > 0);
    }
    /* refine with the other half as samples (features given directly) */
    s = at_calloc((size_t)cm_data_count(a), sizeof *s);
    {
        cm_feats *f = at_calloc((size_t)cm_data_count(a), sizeof *f);
        for (int i = 0; i < cm_data_count(a); i++) {
            cm_feats_init(&f[i]);
            f[i].rows = (float *)cm_data_rows(a, i, &f[i].n_rows);
            s[i].task = "matmul";
            s[i].feats = &f[i];
            s[i].cost_s = cm_data_cost(a, i);
        }
        assert_int_equal(cm_model_update(m, s, cm_data_count(a), err, sizeof err), AT_OK);
        at_free(f);
    }
    assert_int_equal(cm_model_get_state(m), CM_MODEL_TRAINED);
    assert_int_equal(cm_model_n_records(m), N_STATES + cm_data_count(a));
    {
        /* the refined model is saved as a chain of two boosters and loads as one model */
        void *blob;
        size_t bn;
        cm_model *c;
        double *sc2 = at_malloc((size_t)n * sizeof *sc2), *sc3 = at_malloc((size_t)n * sizeof *sc3);
        assert_int_equal(cm_model_save(m, &blob, &bn), AT_OK);
        assert_int_equal(blob ? ((uint8_t *)blob)[20] : 0, 2);
        assert_int_equal(cm_model_new(&params, &c), AT_OK);
        assert_int_equal(cm_model_load(c, blob, bn, err, sizeof err), AT_OK);
        assert_int_equal(cm_model_predict_data(m, b, sc2), AT_OK);
        assert_int_equal(cm_model_predict_data(c, b, sc3), AT_OK);
        for (int i = 0; i < n; i++)
            assert_float_equal(sc2[i], sc3[i], 1e-4 * (1 + fabs(sc2[i])));
        at_free(sc2);
        at_free(sc3);
        at_free(blob);
        cm_model_free(c);
    }
    at_free(s);
    at_free(sc);
    cm_data_free(a);
    cm_data_free(b);
    cm_model_free(p);
    cm_model_free(m);
}

/* Warm-up: too few programs give uniform random scores in [0, 1) (a state that does not
** lower: -inf); enough of them train a model; retrain_growth_pct holds retraining back. */
/* The data set's programs as samples of task "t" (their features borrowed from 'data'). */
static void samples_of_data(cm_sample *s, cm_feats *f)
{
    for (int i = 0; i < N_STATES; i++) {
        cm_feats_init(&f[i]);
        f[i].rows = (float *)cm_data_rows(data, i, &f[i].n_rows);
        memset(&s[i], 0, sizeof s[i]);
        s[i].task = "t";
        s[i].feats = &f[i];
        s[i].cost_s = cm_data_cost(data, i);
    }
}

static void test_warmup_and_retraining(void **unused)
{
    cm_params p = params;
    cm_model *m;
    cm_sample s[N_STATES];
    cm_feats f[N_STATES];
    cm_train_info ti;
    double sc[N_STATES];
    char err[512];
    const cm_feats *fp[N_STATES];
    (void)unused;
    p.warmup = 16;
    p.retrain_growth_pct = 50;
    assert_int_equal(cm_model_new(&p, &m), AT_OK);
    samples_of_data(s, f);
    for (int i = 0; i < N_STATES; i++)
        fp[i] = &f[i];
    assert_int_equal(cm_model_update(m, s, 10, err, sizeof err), AT_OK);
    assert_int_equal(cm_model_get_state(m), CM_MODEL_WARMUP);
    assert_int_equal(cm_model_predict_feats(m, fp, N_STATES, sc), AT_OK);
    for (int i = 0; i < N_STATES; i++)
        assert_true(sc[i] >= 0 && sc[i] < 1);
    {
        cm_feats empty;
        const cm_feats *e = &empty;
        double v;
        cm_feats_init(&empty);
        assert_int_equal(cm_model_predict_feats(m, &e, 1, &v), AT_OK);
        assert_true(isinf(v) && v < 0);
    }
    assert_int_equal(cm_model_update(m, s + 10, 6, err, sizeof err), AT_OK);
    assert_int_equal(cm_model_get_state(m), CM_MODEL_TRAINED);
    cm_model_train_info(m, &ti);
    assert_int_equal(ti.n_programs, 16);
    /* 16 -> 20: less than 50% more, no retraining; 20 -> 28: retrained on all 28 */
    assert_int_equal(cm_model_update(m, s + 16, 4, err, sizeof err), AT_OK);
    cm_model_train_info(m, &ti);
    assert_int_equal(ti.n_programs, 16);
    assert_int_equal(cm_model_update(m, s + 20, 8, err, sizeof err), AT_OK);
    cm_model_train_info(m, &ti);
    assert_int_equal(ti.n_programs, 28);
    assert_int_equal(cm_data_count(cm_model_data(m)), 28);
    /* a malformed sample is refused before anything is added */
    {
        cm_sample bad = s[0];
        bad.task = NULL;
        assert_int_equal(cm_model_update(m, &bad, 1, err, sizeof err), AT_EINVAL);
        assert_int_equal(cm_data_count(cm_model_data(m)), 28);
    }
    cm_model_free(m);
}

/* A task of its own reaching the warm-up count retrains the model however little the data
** grew as a whole (a store's 1,000 programs of other tasks, then 16 of a new one): 32
** programs of "t", then 15 of "u" (47 < 64: no retraining), then one more: 16 of "u". */
static void test_new_task_retrains(void **unused)
{
    cm_params p = params;
    cm_model *m;
    cm_sample s[N_STATES], u[16];
    cm_feats f[N_STATES];
    cm_train_info ti;
    char err[512];
    (void)unused;
    p.warmup = 16;
    p.retrain_growth_pct = 100;
    assert_int_equal(cm_model_new(&p, &m), AT_OK);
    samples_of_data(s, f);
    for (int i = 0; i < 16; i++) {
        u[i] = s[i];
        u[i].task = "u";
    }
    assert_int_equal(cm_model_update(m, s, N_STATES, err, sizeof err), AT_OK);
    cm_model_train_info(m, &ti);
    assert_int_equal(ti.n_programs, 32);
    assert_int_equal(cm_model_update(m, u, 15, err, sizeof err), AT_OK);
    cm_model_train_info(m, &ti);
    assert_int_equal(ti.n_programs, 32);
    assert_int_equal(cm_model_update(m, u + 15, 1, err, sizeof err), AT_OK);
    cm_model_train_info(m, &ti);
    assert_int_equal(ti.n_programs, 48);
    cm_model_free(m);
}

/* A task that gained CM_RETRAIN_TASK_NEW (64) programs since the last training, and grew by
** retrain_growth_pct of its own, retrains the model however little the data grew as a whole
** (a run in a store holding a corpus of thousands of other programs): 320 programs of "t",
** 16 of "u" (warm-up: retrained on 336), 63 more of "u" (399 < 672 and 63 < 64: not
** retrained), one more (64 new of "u", 80 >= 2 x 16: retrained on 400). */
static void test_task_growth_retrains(void **unused)
{
    cm_params p = params;
    cm_model *m;
    cm_sample s[N_STATES], big[10 * N_STATES], u[80];
    cm_feats f[N_STATES];
    cm_train_info ti;
    char err[512];
    (void)unused;
    p.warmup = 16;
    p.retrain_growth_pct = 100;
    assert_int_equal(cm_model_new(&p, &m), AT_OK);
    samples_of_data(s, f);
    for (int i = 0; i < 10 * N_STATES; i++)
        big[i] = s[i % N_STATES];
    for (int i = 0; i < 80; i++) {
        u[i] = s[i % N_STATES];
        u[i].task = "u";
    }
    assert_int_equal(cm_model_update(m, big, 10 * N_STATES, err, sizeof err), AT_OK);
    cm_model_train_info(m, &ti);
    assert_int_equal(ti.n_programs, 10 * N_STATES);
    assert_int_equal(cm_model_update(m, u, 16, err, sizeof err), AT_OK);
    cm_model_train_info(m, &ti);
    assert_int_equal(ti.n_programs, 10 * N_STATES + 16);
    for (int i = 16; i < 79; i += 9) /* in rounds, as a run adds them */
        assert_int_equal(cm_model_update(m, u + i, AT_MIN(9, 79 - i), err, sizeof err), AT_OK);
    cm_model_train_info(m, &ti);
    assert_int_equal(ti.n_programs, 10 * N_STATES + 16);
    assert_int_equal(cm_data_count(cm_model_data(m)), 10 * N_STATES + 79);
    assert_int_equal(cm_model_update(m, u + 79, 1, err, sizeof err), AT_OK);
    cm_model_train_info(m, &ti);
    assert_int_equal(ti.n_programs, 10 * N_STATES + 80);
    cm_model_free(m);
}

/* A data set loaded with groups 10 and 11 (extracted on every core, in batches of 32):
** the same programs in the same order, the same rows outside the two groups, and the
** groups filled; 37 records, so the last batch is a partial one. */
static void test_load_with_sim_and_code(void **unused)
{
    static const char *specs[] = {"matmul:M=32,N=32,K=32"};
    char path[600], err[1024];
    rec_store *st;
    cm_data *plain, *full;
    cm_load_stats a, b;
    kn_target host;
    cm_sim_params sp;
    (void)unused;
    snprintf(path, sizeof path, "%s/load.db", dir);
    assert_int_equal(rec_store_open(path, REC_OPEN_CREATE, &st, err, sizeof err), AT_OK);
    assert_int_equal(ct_build_dataset(st, specs, 1, 37, 5), 0);
    assert_int_equal(kn_target_host(&host), AT_OK);
    cm_sim_params_init(&sp, &host);
    assert_int_equal(cm_data_new(&plain), AT_OK);
    assert_int_equal(cm_data_new(&full), AT_OK);
    assert_int_equal(cm_data_load_store(plain, st, NULL, &a, err, sizeof err), AT_OK);
    cm_data_set_sim(full, &sp);
    cm_data_set_code(full, host.is_x86 || host.is_aarch64 ? &host : NULL);
    assert_int_equal(cm_data_load_store(full, st, NULL, &b, err, sizeof err), AT_OK);
    assert_int_equal(a.n_records, 37);
    assert_int_equal(b.n_records, 37);
    assert_int_equal(a.n_used, b.n_used);
    assert_int_equal(a.n_failed, b.n_failed);
    assert_int_equal(a.n_unreplay, b.n_unreplay);
    assert_int_equal(cm_data_count(plain), cm_data_count(full));
    assert_true(cm_data_count(full) >= 30);
    for (int i = 0; i < cm_data_count(full); i++) {
        int na, nb;
        const float *ra = cm_data_rows(plain, i, &na), *rb = cm_data_rows(full, i, &nb);
        assert_int_equal(na, nb);
        assert_true(cm_data_cost(plain, i) == cm_data_cost(full, i));
        for (int r = 0; r < na; r++)
            for (int k = 0; k < CM_N_FEATS; k++) {
                const float x = ra[r * CM_N_FEATS + k], y = rb[r * CM_N_FEATS + k];
                if (k >= CM_F_SIM_STMTS && k < CM_F_CODE_FMA_SHARE + CM_CODE_N)
                    assert_true(x == 0);
                else if (x != y)
                    fail_msg("program %d row %d feature %s: %g against %g", i, r,
                             cm_feature_name(k), x, y);
            }
        if (na > 0) {
            assert_true(rb[CM_F_SIM_STMTS] > 0);
            assert_true(rb[CM_F_CODE_DYN_INSNS] > 0 || !(host.is_x86 || host.is_aarch64));
        }
    }
    /* a faster measurement of one program (another pass, a re-time): its cost and its
    ** task's labels follow; failures, nonsense costs and bad indexes are refused */
    {
        int best = -1, other = -1, failed = -1;
        double c;
        for (int i = 0; i < cm_data_count(plain); i++) {
            int nr;
            c = cm_data_cost(plain, i);
            cm_data_rows(plain, i, &nr);
            if (c >= AT_MEASURE_FAIL_COST)
                failed = i;
            else if (nr > 0 && cm_data_label(plain, i) == 1)
                best = i;
            else if (nr > 0 && other < 0)
                other = i;
        }
        assert_true(best >= 0 && other >= 0);
        c = cm_data_cost(plain, best);
        assert_true(cm_data_label(plain, other) < 1);
        assert_int_equal(cm_data_set_cost(plain, other, c / 2), AT_OK);
        assert_true(cm_data_cost(plain, other) == c / 2);
        assert_true(cm_data_label(plain, other) == 1);
        assert_true(fabs(cm_data_label(plain, best) - 0.5) < 1e-12);
        assert_int_equal(cm_data_set_cost(plain, other, 0), AT_EINVAL);
        assert_int_equal(cm_data_set_cost(plain, other, -1), AT_EINVAL);
        assert_int_equal(cm_data_set_cost(plain, other, AT_MEASURE_FAIL_COST), AT_EINVAL);
        assert_int_equal(cm_data_set_cost(plain, other, NAN), AT_EINVAL);
        assert_int_equal(cm_data_set_cost(plain, -1, c), AT_EINVAL);
        assert_int_equal(cm_data_set_cost(plain, cm_data_count(plain), c), AT_EINVAL);
        if (failed >= 0)
            assert_int_equal(cm_data_set_cost(plain, failed, c), AT_EINVAL);
        assert_true(cm_data_cost(plain, other) == c / 2);
    }
    cm_data_free(plain);
    cm_data_free(full);
    rec_store_close(st);
}

static int setup(void **unused)
{
    static const char *specs[] = {"matmul:M=64,N=64,K=64"};
    cm_load_stats ls;
    char err[1024];
    (void)unused;
    ct_mkdtemp(dir);
    snprintf(db, sizeof db, "%s/blob.db", dir);
    if (rec_store_open(db, REC_OPEN_CREATE, &store, err, sizeof err) != AT_OK) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    if (ct_build_dataset(store, specs, 1, N_STATES, 21) != 0)
        return -1;
    if (cm_data_new(&data) != AT_OK ||
        cm_data_load_store(data, store, NULL, &ls, err, sizeof err) != AT_OK) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    if (cm_data_count(data) != N_STATES) {
        fprintf(stderr, "%d programs loaded\n", cm_data_count(data));
        return -1;
    }
    cm_params_default(&params);
    params.max_rounds = 30;
    params.n_threads = 1;
    params.warmup = 8;
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
        cmocka_unit_test(test_blob_round_trip),
        cmocka_unit_test(test_load_with_sim_and_code),
        cmocka_unit_test(test_blob_corrupt),
        cmocka_unit_test(test_store_models),
        cmocka_unit_test(test_pretrain_and_refine),
        cmocka_unit_test(test_warmup_and_retraining),
        cmocka_unit_test(test_new_task_retrains),
        cmocka_unit_test(test_task_growth_retrains),
    };
    tn_fleet_prepare(); /* the embedded agent's launcher, before any thread */
    return cmocka_run_group_tests(tests, setup, teardown);
}
