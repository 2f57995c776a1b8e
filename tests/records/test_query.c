/* tests/records/test_query.c -- best-schedule queries (devices, fingerprints, targets,
** fallbacks, replay checks), history and iteration order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "rec_test.h"

static char dir[64];
static int n_store;

static int setup(void **unused)
{
    (void)unused;
    rt_mkdtemp(dir);
    return 0;
}

static int teardown(void **unused)
{
    (void)unused;
    rt_rmdir(dir);
    return 0;
}

static rec_store *open_new(void)
{
    char path[PATH_MAX], name[32], err[512];
    rec_store *st;
    snprintf(name, sizeof name, "q%d.db", n_store++);
    rt_path(path, dir, name);
    assert_int_equal(rec_store_open(path, REC_OPEN_CREATE, &st, err, sizeof err), AT_OK);
    return st;
}

static void put(rec_store *st, int64_t task, const char *prefix, long i, const rec_device *d,
                double seconds, int status)
{
    rt_result x;
    rt_result_init(&x, task, prefix, i, d, seconds, status);
    assert_int_equal(rec_put(st, &x.r, 1, NULL), AT_OK);
}

static int has_note(const rec_best_result *r, const char *phrase)
{
    for (int i = 0; i < r->n_notes; i++)
        if (strstr(r->notes[i], phrase))
            return 1;
    return 0;
}

static void dump_notes(const rec_best_result *r)
{
    for (int i = 0; i < r->n_notes; i++)
        fprintf(stderr, "note: %s\n", r->notes[i]);
}

#define LLVM "llvm -mtriple=x86_64-linux-gnu"
#define ARM "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76"

/* One task tuned on 'box' (x86) and the same workload for ARM on two phones. */
static rec_store *sample_store(int64_t *t_box, int64_t *t_p7, int64_t *t_p6)
{
    rec_store *st = open_new();
    *t_box = rt_task(st, 1, LLVM, "box");
    *t_p7 = rt_task(st, 1, ARM, "pixel7");
    *t_p6 = rt_task(st, 1, ARM, "pixel6");
    for (int i = 0; i < 10; i++) {
        put(st, *t_box, "box", i, &rt_dev_x86, 1e-3 * (10 - i), 0);      /* best: i = 9 */
        put(st, *t_p7, "p7", i, &rt_dev_a76, 2e-3 * (1 + i % 5), 0);     /* best: i = 0, 5 */
        put(st, *t_p6, "p6", i, &rt_dev_a78, 5e-4 * (1 + i), i ? 0 : 4); /* i=0 failed */
    }
    put(st, *t_box, "box-fail", 100, &rt_dev_x86, 0, AT_MEASURE_RUNTIME_DEVICE);
    return st;
}

static void test_best_per_device(void **unused)
{
    int64_t tb, t7, t6;
    rec_store *st = sample_store(&tb, &t7, &t6);
    char key[REC_KEY_LEN + 1];
    rec_best_query q;
    rec_best_result *r;
    (void)unused;
    rt_key(1, key);
    memset(&q, 0, sizeof q);
    q.workload_key = key;
    q.target = LLVM;
    q.device_key = "box";
    q.top = 3;
    assert_int_equal(rec_best(st, &q, &r), AT_OK);
    assert_int_equal(r->n_rows, 3);
    assert_string_equal(r->rows[0].rec.job_id, "box-9");
    assert_string_equal(r->rows[1].rec.job_id, "box-8");
    assert_string_equal(r->rows[2].rec.job_id, "box-7");
    for (int i = 0; i < 3; i++) {
        assert_int_equal(r->rows[i].rank, i + 1);
        assert_int_equal(r->rows[i].fallback, 0);
        assert_string_equal(r->rows[i].rec.target, LLVM);
        assert_string_equal(r->rows[i].rec.device_key, "box");
        assert_string_equal(r->rows[i].rec.device.model, "AMD EPYC 9654");
    }
    assert_true(fabs(r->rows[0].gflops - r->rows[0].rec.flops / 1e-3 / 1e9) < 1e-6);
    assert_int_equal(r->n_notes, 0);
    rec_best_free(r);

    /* no target, no device: one group per (target, device key, fingerprint), best first;
    ** the failed record of pixel6 is never a best */
    memset(&q, 0, sizeof q);
    assert_int_equal(rec_best(st, &q, &r), AT_OK);
    assert_int_equal(r->n_rows, 3);
    assert_string_equal(r->rows[0].rec.target, ARM);
    assert_string_equal(r->rows[0].rec.device_key, "pixel6");
    assert_string_equal(r->rows[0].rec.job_id, "p6-1");
    assert_string_equal(r->rows[1].rec.device_key, "pixel7");
    assert_string_equal(r->rows[1].rec.job_id, "p7-0");
    assert_string_equal(r->rows[2].rec.target, LLVM);
    assert_string_equal(r->rows[2].rec.job_id, "box-9");
    assert_true(r->rows[0].group != r->rows[1].group);
    rec_best_free(r);
    rec_store_close(st);
}

static void test_best_several_fingerprints_under_one_key(void **unused)
{
    int64_t tb, t7, t6;
    rec_store *st = sample_store(&tb, &t7, &t6);
    rec_device updated = rt_dev_a76;
    rec_best_query q;
    rec_best_result *r;
    (void)unused;
    updated.os = "6.1.25"; /* the same phone after an OS update is another fingerprint */
    put(st, t7, "p7-new", 50, &updated, 1e-4, 0);
    memset(&q, 0, sizeof q);
    q.device_key = "pixel7";
    assert_int_equal(rec_best(st, &q, &r), AT_OK);
    assert_int_equal(r->n_rows, 2);
    assert_string_not_equal(r->rows[0].rec.fingerprint, r->rows[1].rec.fingerprint);
    assert_true(r->rows[0].group != r->rows[1].group);
    assert_int_equal(r->rows[0].rank, 1);
    assert_int_equal(r->rows[1].rank, 1);
    if (!has_note(r, "device key pixel7 has records from 2 different devices")) {
        dump_notes(r);
        fail();
    }
    rec_best_free(r);

    /* asking for one fingerprint gives only that hardware */
    {
        char fp[REC_FP_LEN + 1];
        assert_int_equal(rec_device_fingerprint(&updated, fp), AT_OK);
        q.fingerprint = fp;
        assert_int_equal(rec_best(st, &q, &r), AT_OK);
        assert_int_equal(r->n_rows, 1);
        assert_string_equal(r->rows[0].rec.job_id, "p7-new-50");
        assert_string_equal(r->rows[0].rec.fingerprint, fp);
        rec_best_free(r);
    }
    rec_store_close(st);
}

static void test_best_other_target_is_named(void **unused)
{
    int64_t tb, t7, t6;
    rec_store *st = sample_store(&tb, &t7, &t6);
    char key[REC_KEY_LEN + 1];
    rec_best_query q;
    rec_best_result *r;
    (void)unused;
    rt_key(1, key);
    memset(&q, 0, sizeof q);
    q.workload_key = key;
    q.target = "cuda -arch=sm_90";
    assert_int_equal(rec_best(st, &q, &r), AT_OK);
    assert_int_equal(r->n_rows, 0);
    if (!has_note(r, "no records for target 'cuda -arch=sm_90'") ||
        !has_note(r, "'" LLVM "'")) {
        dump_notes(r);
        fail();
    }
    rec_best_free(r);
    rt_key(2, key);
    q.workload_key = key;
    q.target = NULL;
    assert_int_equal(rec_best(st, &q, &r), AT_OK);
    assert_int_equal(r->n_rows, 0);
    assert_true(has_note(r, "no task"));
    rec_best_free(r);
    rec_store_close(st);
}

static void test_best_no_silent_fallback(void **unused)
{
    int64_t tb, t7, t6;
    rec_store *st = sample_store(&tb, &t7, &t6);
    char key2[REC_KEY_LEN + 1];
    rec_best_query q;
    rec_best_result *r;
    (void)unused;
    /* task 2 for ARM was measured on pixel6 (A78) and on a GPU pool, never on pixel7 */
    int64_t t2_p6 = rt_task(st, 2, ARM, "pixel6");
    int64_t t2_gpu = rt_task(st, 2, ARM, "gpu");
    put(st, t2_p6, "t2p6", 1, &rt_dev_a78, 3e-3, 0);
    put(st, t2_gpu, "t2gpu", 1, &rt_dev_h200, 1e-6, 0); /* faster, other architecture */

    memset(&q, 0, sizeof q);
    q.target = ARM;
    q.device_key = "pixel7";
    assert_int_equal(rec_best(st, &q, &r), AT_OK);
    assert_int_equal(r->n_rows, 1); /* task 1 only: task 2 has nothing on pixel7 */
    assert_string_equal(r->rows[0].rec.device_key, "pixel7");
    assert_int_equal(r->n_notes, 0); /* a broad query lists what there is */
    rec_best_free(r);
    rt_key(2, key2);
    q.workload_key = key2; /* asked for by name: the answer says where it was measured */
    assert_int_equal(rec_best(st, &q, &r), AT_OK);
    assert_int_equal(r->n_rows, 0);
    if (!has_note(r, "nothing measured on pixel7; other devices have records") ||
        !has_note(r, "pixel6/") || !has_note(r, "gpu/") || !has_note(r, "--fallback arch")) {
        dump_notes(r);
        fail();
    }
    rec_best_free(r);
    q.workload_key = NULL;

    q.fallback = REC_FALLBACK_ARCH;
    assert_int_equal(rec_best(st, &q, &r), AT_OK);
    assert_int_equal(r->n_rows, 2);
    {
        /* rows are by workload key: find the fallback one */
        int k = r->rows[0].fallback ? 0 : 1;
        assert_int_equal(r->rows[k].fallback, 1);
        assert_int_equal(r->rows[1 - k].fallback, 0);
        assert_string_equal(r->rows[1 - k].rec.device_key, "pixel7");
        assert_string_equal(r->rows[k].rec.job_id, "t2p6-1"); /* the A78, never the GPU */
        assert_string_equal(r->rows[k].rec.device.arch, "aarch64");
        assert_string_equal(r->rows[k].rec.device_key, "pixel6");
    }
    if (!has_note(r, "FALLBACK") || !has_note(r, "pixel6/")) {
        dump_notes(r);
        fail();
    }
    rec_best_free(r);

    /* a device key the store has never seen: its architecture is unknown */
    q.device_key = "pixel9";
    assert_int_equal(rec_best(st, &q, &r), AT_OK);
    assert_int_equal(r->n_rows, 0);
    assert_true(has_note(r, "architecture is unknown"));
    rec_best_free(r);
    q.arch = "aarch64";
    assert_int_equal(rec_best(st, &q, &r), AT_OK);
    assert_int_equal(r->n_rows, 2);
    assert_int_equal(r->rows[0].fallback, 1);
    assert_int_equal(r->rows[1].fallback, 1);
    rec_best_free(r);
    q.arch = "riscv64";
    assert_int_equal(rec_best(st, &q, &r), AT_OK);
    assert_int_equal(r->n_rows, 0);
    assert_true(has_note(r, "no record of the same architecture"));
    rec_best_free(r);

    /* a fallback needs a device */
    memset(&q, 0, sizeof q);
    q.fallback = REC_FALLBACK_ARCH;
    r = (rec_best_result *)1;
    assert_int_equal(rec_best(st, &q, &r), AT_EINVAL);
    assert_null(r);
    rec_store_close(st);
}

static void test_best_skips_states_that_do_not_replay(void **unused)
{
    rec_store *st = open_new();
    int64_t t = rt_task(st, 1, LLVM, "box");
    rec_best_query q;
    rec_best_result *r;
    rt_result x;
    int calls = 0;
    (void)unused;
    put(st, t, "good", 1, &rt_dev_x86, 2e-3, 0);
    rt_result_init(&x, t, "stale", 2, &rt_dev_x86, 1e-3, 0);
    strcpy(x.state, "{\"v\":1,\"stages\":[]}"); /* the best one: no "steps" any more */
    assert_int_equal(rec_put(st, &x.r, 1, NULL), AT_OK);
    rt_result_init(&x, t, "garbage", 3, &rt_dev_x86, 1.5e-3, 0);
    strcpy(x.state, "{\"v\":1,\"steps\":[[\"SP\",0");
    assert_int_equal(rec_put(st, &x.r, 1, NULL), AT_OK);

    memset(&q, 0, sizeof q);
    q.device_key = "box";
    assert_int_equal(rec_best(st, &q, &r), AT_OK); /* without a check the stale one wins */
    assert_string_equal(r->rows[0].rec.job_id, "stale-2");
    rec_best_free(r);
    q.replay = rt_replay;
    q.replay_ctx = &calls;
    assert_int_equal(rec_best(st, &q, &r), AT_OK);
    assert_int_equal(r->n_rows, 1);
    assert_string_equal(r->rows[0].rec.job_id, "good-1");
    assert_int_equal(r->n_skipped, 2);
    assert_string_equal(r->skipped[0].job_id, "stale-2");
    assert_non_null(strstr(r->skipped[0].reason, "no \"steps\""));
    assert_string_equal(r->skipped[1].job_id, "garbage-3");
    assert_non_null(strstr(r->skipped[1].reason, "not JSON"));
    assert_int_equal(calls, 3);
    rec_best_free(r);

    /* when every successful record is stale, nothing is handed back and the notes say why */
    {
        rec_store *st2 = open_new();
        int64_t t2 = rt_task(st2, 1, LLVM, "box");
        rt_result_init(&x, t2, "only", 1, &rt_dev_x86, 1e-3, 0);
        strcpy(x.state, "[]");
        assert_int_equal(rec_put(st2, &x.r, 1, NULL), AT_OK);
        assert_int_equal(rec_best(st2, &q, &r), AT_OK);
        assert_int_equal(r->n_rows, 0);
        assert_int_equal(r->n_skipped, 1);
        assert_true(has_note(r, "does not replay"));
        rec_best_free(r);
        rec_store_close(st2);
    }
    rec_store_close(st);
}

static void test_history(void **unused)
{
    rec_store *st = open_new();
    int64_t t = rt_task(st, 1, LLVM, "box");
    static const double cost[] = {5, 6, 4, 0, 4.5, 2, 3};
    rec_filter f;
    rec_history *h;
    rt_result x;
    (void)unused;
    /* stored out of order: the history is by trial */
    for (int k = 6; k >= 0; k--) {
        rt_result_init(&x, t, "h", k, &rt_dev_x86, cost[k] * 1e-3, cost[k] == 0 ? 7 : 0);
        assert_int_equal(rec_put(st, &x.r, 1, NULL), AT_OK);
    }
    rt_result_init(&x, t, "no-trial", 99, &rt_dev_x86, 1e-3, 0);
    x.r.trial = -1;
    assert_int_equal(rec_put(st, &x.r, 1, NULL), AT_OK);
    memset(&f, 0, sizeof f);
    f.device_key = "box";
    assert_int_equal(rec_history_get(st, &f, &h), AT_OK);
    assert_int_equal(h->n_groups, 1);
    assert_int_equal(h->groups[0].n_points, 8);
    assert_int_equal(h->groups[0].n_failed, 1);
    static const double best[] = {5, 5, 4, 4, 4, 2, 2, 1};
    for (int k = 0; k < 8; k++) {
        assert_int_equal(h->groups[0].points[k].trial, k < 7 ? k : -1);
        assert_true(fabs(h->groups[0].points[k].best - best[k] * 1e-3) < 1e-12);
    }
    assert_int_equal(h->groups[0].points[3].status, AT_MEASURE_RUN_TIMEOUT);
    rec_history_free(h);
    f.device_key = "nobody";
    assert_int_equal(rec_history_get(st, &f, &h), AT_OK);
    assert_int_equal(h->n_groups, 0);
    rec_history_free(h);
    rec_store_close(st);
}

/* Two stores with the same records written in different orders iterate alike in the
** stable order. */
static void test_stable_order(void **unused)
{
    rec_store *a = open_new(), *b = open_new();
    rec_iter *ia, *ib;
    const rec_record *ra, *rb;
    int n = 0;
    (void)unused;
    for (int i = 0; i < 30; i++) {
        int j = 29 - i;
        int64_t ta = rt_task(a, i % 3, i % 2 ? LLVM : ARM, "k");
        int64_t tb = rt_task(b, j % 3, j % 2 ? LLVM : ARM, "k");
        put(a, ta, "s", i, &rt_dev_x86, 1e-3, 0);
        put(b, tb, "s", j, &rt_dev_x86, 1e-3, 0);
    }
    assert_int_equal(rec_iter_open(a, NULL, REC_ORDER_STABLE, &ia), AT_OK);
    assert_int_equal(rec_iter_open(b, NULL, REC_ORDER_STABLE, &ib), AT_OK);
    for (;;) {
        assert_int_equal(rec_iter_next(ia, &ra), AT_OK);
        assert_int_equal(rec_iter_next(ib, &rb), AT_OK);
        if (ra == NULL || rb == NULL)
            break;
        assert_string_equal(ra->job_id, rb->job_id);
        n++;
    }
    assert_null(ra);
    assert_null(rb);
    assert_int_equal(n, 30);
    rec_iter_close(ia);
    rec_iter_close(ib);
    rec_store_close(a);
    rec_store_close(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_best_per_device),
        cmocka_unit_test(test_best_several_fingerprints_under_one_key),
        cmocka_unit_test(test_best_other_target_is_named),
        cmocka_unit_test(test_best_no_silent_fallback),
        cmocka_unit_test(test_best_skips_states_that_do_not_replay),
        cmocka_unit_test(test_history),
        cmocka_unit_test(test_stable_order),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
