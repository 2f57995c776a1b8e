/* tests/fleet/test_embedded.c -- the tuner's side: the embedded mode (tracker and agent in
** this process over inproc://) measuring LLVM-built kernels of random schedules and committing
** them to a records store; giving up after --wait-timeout when no agent serves the key; and
** the agent binaries carrying no LLVM, SQLite or XGBoost. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>

#include "fleet_test.h"
#include "kernels/kernels.h"
#include "records/records.h"
#include "tests/support/sched_gen.h"
#include "tracker/tracker.h"
#include "tuner/tuner.h"

/* The embedded fleet (a tracker and an agent in this process), its error message printed
** when it does not open, so that a failure says why.  Every fleet of this process runs its
** kernels through the one launcher that main prepared before any thread: a closed fleet
** gives it back, and a launcher forked later, from a threaded process, can hang under the
** sanitizers (a clean clone's make test saw "the launcher did not start"). */
static tn_fleet *open_embedded(rec_store *st)
{
    static pid_t launcher;
    char err[512] = "";
    tn_fleet *f = NULL;
    at_err e = tn_fleet_open(&(tn_fleet_cfg){.store = st, .embedded_threads = 2}, &f, err,
                             sizeof err);
    if (e != AT_OK)
        print_error("tn_fleet_open (embedded): %s: %s\n", at_errname(e), err);
    assert_int_equal(e, AT_OK);
    assert_true(tn_fleet_kernel_pid(f) > 0);
    if (launcher == 0) launcher = tn_fleet_kernel_pid(f);
    assert_int_equal(tn_fleet_kernel_pid(f), launcher);
    return f;
}

typedef struct tally {
    int n, ok;
    int status[8];
} tally;

static void on_result(void *ctx, const tn_fleet_job *job, const at_wire_result *r)
{
    tally *t = ctx;
    (void)job;
    if (r->status != AT_MEASURE_NO_ERROR)
        fprintf(stderr, "job %s: %s: %s\n", r->id, at_measure_name(r->status), r->error);
    t->ok += r->status == AT_MEASURE_NO_ERROR;
    if (t->n < 8) t->status[t->n] = r->status;
    t->n++;
}

static int64_t count_rows(rec_store *st, int status)
{
    rec_iter *it;
    const rec_record *r;
    int64_t n = 0;
    assert_int_equal(rec_iter_open(st, NULL, REC_ORDER_ID, &it), AT_OK);
    while (rec_iter_next(it, &r) == AT_OK && r != NULL)
        n += status < 0 || r->status == status;
    rec_iter_close(it);
    return n;
}

static void test_embedded_measures_random_schedules(void **unused)
{
    static const char *const specs[] = {"matmul:M=8,N=8,K=8", "relu:shape=256"};
    enum { PER_OP = 6 };
    char err[512], db[PATH_MAX], ids[2 * PER_OP][48];
    tn_fleet *f;
    tn_fleet_job jobs[2 * PER_OP];
    at_wire_arg args[2 * PER_OP][64];
    kn_artifact *arts[2 * PER_OP];
    char *states[2 * PER_OP];
    kn_target target;
    rec_store *st;
    int64_t run;
    char uuid[REC_UUID_LEN + 1];
    at_rng rng;
    int n = 0;
    tally t;
    double end;
    (void)unused;

    snprintf(db, sizeof db, "%s/embedded.db", ft_tmpdir());
    assert_int_equal(rec_store_open(db, REC_OPEN_CREATE, &st, err, sizeof err), AT_OK);
    assert_int_equal(rec_run_begin(st, "test_embedded", TN_VERSION, &run, uuid), AT_OK);
    assert_int_equal(kn_target_host(&target), AT_OK);
    f = open_embedded(st);
    assert_non_null(tn_fleet_embedded_url(f));
    at_rng_seed(&rng, 2024);
    for (int o = 0; o < 2; o++) {
        ss_dag *dag;
        ss_state *naive;
        kn_ir *ir;
        kn_artifact *ref;
        uint8_t ref_id[AT_WIRE_REFID_BYTES];
        int64_t task;
        at_buf text;
        int made = 0, tries = 0;
        assert_int_equal(kn_op_build(specs[o], &dag, err, sizeof err), AT_OK);
        at_buf_init(&text);
        ss_dag_print(dag, &text);
        assert_int_equal(
            rec_task_add(st, &(rec_task){dag->key, target.text, "local", text.data, dag->flops},
                         &task),
            AT_OK);
        at_buf_fini(&text);
        assert_int_equal(ss_state_new(dag, &naive), AT_OK);
        assert_int_equal(kn_lower(naive, &ir, err, sizeof err), AT_OK);
        assert_int_equal(kn_build(ir, &target, NULL, &ref, err, sizeof err), AT_OK);
        kn_ir_free(ir);
        assert_int_equal(tn_fleet_add_ref(f, ref, ref_id), AT_OK);
        kn_artifact_free(ref);
        while (made < PER_OP && tries++ < 400) {
            ss_state *s;
            sg_stats sgs;
            at_buf json;
            int dup = 0;
            if (sg_random_state(dag, &rng, &s, &sgs) != AT_OK) continue;
            at_buf_init(&json);
            ss_state_to_json(s, &json);
            for (int k = 0; k < n; k++)
                dup |= strcmp(states[k], json.data) == 0;
            if (dup || kn_lower(s, &ir, err, sizeof err) != AT_OK) {
                at_buf_fini(&json);
                ss_state_free(s);
                continue;
            }
            assert_int_equal(kn_build(ir, &target, NULL, &arts[n], err, sizeof err), AT_OK);
            kn_ir_free(ir);
            ss_state_free(s);
            states[n] = at_buf_take(&json);
            at_buf_fini(&json);
            snprintf(ids[n], sizeof ids[n], "%s-%d", uuid, n);
            memset(&jobs[n], 0, sizeof jobs[n]);
            kn_artifact_to_wire(arts[n], &jobs[n].w.art, args[n]);
            jobs[n].w.id = ids[n];
            at_wire_settings_default(&jobs[n].w.run);
            jobs[n].w.run.repeat = 2;
            jobs[n].w.seed = 11 + (uint64_t)o;
            jobs[n].w.has_ref = 1;
            memcpy(jobs[n].w.ref, ref_id, sizeof ref_id);
            jobs[n].task_id = task;
            jobs[n].state = states[n];
            jobs[n].run_id = run;
            jobs[n].trial = n;
            n++;
            made++;
        }
        assert_int_equal(made, PER_OP);
        ss_state_free(naive);
        ss_dag_unref(dag);
    }
    assert_int_equal(tn_fleet_submit(f, jobs, n), AT_OK);
    assert_int_equal(tn_fleet_submit(f, jobs, 1), AT_EEXIST); /* a job id twice */
    memset(&t, 0, sizeof t);
    end = ft_now() + 120;
    while (tn_fleet_pending(f) > 0 && ft_now() < end)
        assert_int_equal(tn_fleet_wait(f, 1000, on_result, &t), AT_OK);
    assert_int_equal(t.n, n);
    assert_int_equal(t.ok, n); /* every schedule matches the naive reference */
    assert_int_equal(count_rows(st, AT_MEASURE_NO_ERROR), n);
    tn_fleet_close(f);
    rec_store_close(st);
    for (int i = 0; i < n; i++) {
        kn_artifact_free(arts[i]);
        at_free(states[i]);
    }
}

/* Kernels that read a weight in a new layout (the schedule space's layout rewrite): the
** agent makes the layout with the artifact's pre-transform and the output still matches
** the naive reference.  A kernel run on the original layout would not. */
static void test_embedded_runs_layout_rewritten_kernels(void **unused)
{
    enum { N = 4 };
    static const char *const spec = "dense:M=24,N=40,K=36";
    char err[512], db[PATH_MAX], ids[N][48];
    tn_fleet *f;
    tn_fleet_job jobs[N];
    at_wire_arg args[N][64];
    kn_artifact *arts[N];
    char *states[N];
    kn_target target;
    rec_store *st;
    ss_dag *dag;
    ss_state *naive;
    ss_space *sp;
    ss_hw hw;
    kn_ir *ir;
    kn_artifact *ref;
    uint8_t ref_id[AT_WIRE_REFID_BYTES];
    int64_t run, task;
    char uuid[REC_UUID_LEN + 1];
    at_rng rng;
    at_buf text;
    int n = 0, tries = 0;
    tally t;
    double end;
    (void)unused;

    snprintf(db, sizeof db, "%s/layout.db", ft_tmpdir());
    assert_int_equal(rec_store_open(db, REC_OPEN_CREATE, &st, err, sizeof err), AT_OK);
    assert_int_equal(rec_run_begin(st, "test_embedded", TN_VERSION, &run, uuid), AT_OK);
    assert_int_equal(kn_target_host(&target), AT_OK);
    f = open_embedded(st);
    assert_int_equal(kn_op_build(spec, &dag, err, sizeof err), AT_OK);
    at_buf_init(&text);
    ss_dag_print(dag, &text);
    assert_int_equal(
        rec_task_add(st, &(rec_task){dag->key, target.text, "local", text.data, dag->flops}, &task),
        AT_OK);
    at_buf_fini(&text);
    assert_int_equal(ss_state_new(dag, &naive), AT_OK);
    assert_int_equal(kn_lower(naive, &ir, err, sizeof err), AT_OK);
    assert_int_equal(kn_build(ir, &target, NULL, &ref, err, sizeof err), AT_OK);
    kn_ir_free(ir);
    ss_state_free(naive);
    assert_int_equal(tn_fleet_add_ref(f, ref, ref_id), AT_OK);
    kn_artifact_free(ref);
    ss_hw_cpu(&hw, 2, 32, 32 << 10, 1 << 20);
    hw.layout_rewrite = 1;
    assert_int_equal(ss_space_new(dag, &hw, NULL, &sp, err, sizeof err), AT_OK);
    at_rng_seed(&rng, 77);
    while (n < N && tries++ < 400) {
        ss_state *s;
        at_buf json;
        if (ss_space_sample(sp, &rng, &s) != AT_OK) continue;
        if (kn_lower(s, &ir, err, sizeof err) != AT_OK) {
            ss_state_free(s);
            continue;
        }
        assert_int_equal(kn_build(ir, &target, NULL, &arts[n], err, sizeof err), AT_OK);
        kn_ir_free(ir);
        if (arts[n]->pre_entry[0] == 0) { /* no weight rewritten in this one */
            kn_artifact_free(arts[n]);
            ss_state_free(s);
            continue;
        }
        at_buf_init(&json);
        ss_state_to_json(s, &json);
        ss_state_free(s);
        states[n] = at_buf_take(&json);
        at_buf_fini(&json);
        snprintf(ids[n], sizeof ids[n], "%s-%d", uuid, n);
        memset(&jobs[n], 0, sizeof jobs[n]);
        kn_artifact_to_wire(arts[n], &jobs[n].w.art, args[n]);
        assert_true(jobs[n].w.art.n_pre >= 1);
        jobs[n].w.id = ids[n];
        at_wire_settings_default(&jobs[n].w.run);
        jobs[n].w.run.repeat = 2;
        jobs[n].w.seed = 5;
        jobs[n].w.has_ref = 1;
        memcpy(jobs[n].w.ref, ref_id, sizeof ref_id);
        jobs[n].task_id = task;
        jobs[n].state = states[n];
        jobs[n].run_id = run;
        jobs[n].trial = n;
        n++;
    }
    assert_int_equal(n, N);
    assert_int_equal(tn_fleet_submit(f, jobs, n), AT_OK);
    memset(&t, 0, sizeof t);
    end = ft_now() + 120;
    while (tn_fleet_pending(f) > 0 && ft_now() < end)
        assert_int_equal(tn_fleet_wait(f, 1000, on_result, &t), AT_OK);
    assert_int_equal(t.n, n);
    assert_int_equal(t.ok, n);
    assert_int_equal(count_rows(st, AT_MEASURE_NO_ERROR), n);
    tn_fleet_close(f);
    rec_store_close(st);
    ss_space_free(sp);
    ss_dag_unref(dag);
    for (int i = 0; i < n; i++) {
        kn_artifact_free(arts[i]);
        at_free(states[i]);
    }
}

static void *run_tracker(void *arg)
{
    trk_run(arg);
    return NULL;
}

static void test_no_agent_gives_up_after_wait_timeout(void **unused)
{
    trk_tracker *trk;
    pthread_t th;
    at_wire_key key;
    uint8_t k[32], obj[16] = {0};
    at_wire_arg arg = {AT_DT_F32, 1, 1, {4}};
    char err[512], url[64], db[PATH_MAX];
    tn_fleet *f;
    tn_fleet_job jobs[2];
    rec_store *st;
    int64_t task;
    at_err e = AT_OK;
    tally t;
    double end;
    (void)unused;

    memset(k, 9, sizeof k);
    at_wire_key_from_bytes(k, &key);
    assert_int_equal(trk_open(&(trk_config){.listen_url = "tcp://127.0.0.1:0",
                                            .keys = &key,
                                            .n_keys = 1,
                                            .hold_ms = 200},
                              &trk, err, sizeof err),
                     AT_OK);
    assert_int_equal(pthread_create(&th, NULL, run_tracker, trk), 0);
    snprintf(url, sizeof url, "127.0.0.1:%d", trk_port(trk));
    snprintf(db, sizeof db, "%s/giveup.db", ft_tmpdir());
    assert_int_equal(rec_store_open(db, REC_OPEN_CREATE, &st, err, sizeof err), AT_OK);
    assert_int_equal(
        rec_task_add(st, &(rec_task){"fedcba9876543210fedcba9876543210", "llvm", "phone", "dag", 1},
                     &task),
        AT_OK);
    assert_int_equal(tn_fleet_open(&(tn_fleet_cfg){.tracker = url,
                                                   .keys = &key,
                                                   .n_keys = 1,
                                                   .device_key = "phone",
                                                   .store = st,
                                                   .wait_timeout_ms = 1000},
                                   &f, err, sizeof err),
                     AT_OK);
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < 2; i++) {
        jobs[i].w.id = i ? "giveup-1" : "giveup-0";
        jobs[i].w.art.obj = obj;
        jobs[i].w.art.obj_size = sizeof obj;
        jobs[i].w.art.entry = "k";
        jobs[i].w.art.triple = "aarch64-linux-gnu";
        jobs[i].w.art.n_args = 1;
        jobs[i].w.art.args = &arg;
        at_wire_settings_default(&jobs[i].w.run);
        jobs[i].task_id = task;
        jobs[i].state = jobs[i].w.id;
    }
    assert_int_equal(tn_fleet_submit(f, jobs, 2), AT_OK);
    end = ft_now() + 30;
    while (ft_now() < end && (e = tn_fleet_wait(f, 500, NULL, NULL)) == AT_OK)
        ;
    assert_int_equal(e, AT_ETIMEDOUT);
    assert_non_null(strstr(tn_fleet_status(f), "phone"));
    memset(&t, 0, sizeof t);
    assert_int_equal(
        tn_fleet_fail_pending(f, AT_MEASURE_DEVICE_LOST, tn_fleet_status(f), on_result, &t), AT_OK);
    assert_int_equal(t.n, 2);
    assert_int_equal(tn_fleet_pending(f), 0);
    assert_int_equal(count_rows(st, AT_MEASURE_DEVICE_LOST), 2);
    tn_fleet_close(f);
    rec_store_close(st);
    trk_stop(trk);
    pthread_join(th, NULL);
    trk_close(trk);
}

static int count_symbols(const char *bin, const char *pattern)
{
    char cmd[2 * PATH_MAX];
    FILE *p;
    int n = -1;
    snprintf(cmd, sizeof cmd, "nm '%s' 2>/dev/null | grep -ciE '%s'", bin, pattern);
    if ((p = popen(cmd, "r")) != NULL) {
        if (fscanf(p, "%d", &n) != 1) n = -1;
        pclose(p);
    }
    return n;
}

static void test_agent_binaries_hold_no_llvm_sqlite_xgboost(void **unused)
{
    char bin[PATH_MAX], a64[PATH_MAX];
    const char *forbidden = "llvm|sqlite3|xgboost|XGB";
    (void)unused;
    ft_path("bin/rpc_agent", bin, sizeof bin);
    assert_int_equal(access(bin, X_OK), 0);
    assert_int_equal(count_symbols(bin, forbidden), 0);
    /* the check does see such symbols where they are: this test links LLVM and SQLite */
    ft_path("tests/fleet/test_embedded", bin, sizeof bin);
    assert_true(count_symbols(bin, "LLVM") > 0);
    assert_true(count_symbols(bin, "sqlite3") > 0);
    snprintf(a64, sizeof a64, "%s/../aarch64/bin/rpc_agent", ft_build_dir());
    assert_int_equal(access(a64, R_OK), 0); /* 'make tests-san' builds agent-aarch64 */
    assert_int_equal(count_symbols(a64, forbidden), 0);
    assert_true(count_symbols(a64, "kn_rt_module_load") > 0);
}

static int teardown(void **state)
{
    (void)state;
    if (getenv("AT_KEEP_TMP") == NULL) ft_rmtmp();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embedded_measures_random_schedules),
        cmocka_unit_test(test_embedded_runs_layout_rewritten_kernels),
        cmocka_unit_test(test_no_agent_gives_up_after_wait_timeout),
        cmocka_unit_test(test_agent_binaries_hold_no_llvm_sqlite_xgboost),
    };
    tn_fleet_prepare(); /* the embedded agent's launcher, before any thread */
    signal(SIGPIPE, SIG_IGN);
    at_log_set_level(AT_LOG_WARN);
    return cmocka_run_group_tests(tests, NULL, teardown);
}
