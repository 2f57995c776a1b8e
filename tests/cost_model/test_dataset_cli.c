/* tests/cost_model/test_dataset_cli.c -- 'tuner dataset': --help lists every flag, bad
** command lines exit 2 with a message naming the problem, and the three modes work on a
** real store: --random (operator spec, DAG file, workload key), --pretrain, --eval, and
** --corpus (every corpus workload measured, topped up, not measured twice). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/cost_model/cm_test.h"
#include "tuner/tuner.h"

static char dir[64], db[PATH_MAX];

typedef struct run_ctx {
    int argc;
    char **argv;
    int rc;
    char *err; /* standard error of the run */
} run_ctx;

static void run_main(void *p)
{
    run_ctx *c = p;
    c->rc = tn_cli_main(c->argc, c->argv);
    fflush(stdout);
}

static void run_err(void *p)
{
    run_ctx *c = p;
    c->err = ct_capture_stderr(run_main, c);
}

/* Run 'tuner ARGS...' in this process; *out gets standard output, *err standard error. */
static int tuner(char **out, char **err, ...)
{
    char *argv[32];
    int argc = 0;
    run_ctx c;
    va_list ap;
    argv[argc++] = (char *)"tuner";
    va_start(ap, err);
    for (const char *a; (a = va_arg(ap, const char *)) != NULL && argc < 31;)
        argv[argc++] = (char *)a;
    va_end(ap);
    argv[argc] = NULL;
    c.argc = argc;
    c.argv = argv;
    c.rc = -1;
    c.err = NULL;
    {
        /* standard output into a file too */
        char path[] = "/tmp/cm_test_out.XXXXXX", e[256];
        size_t n;
        int fd = mkstemp(path), saved;
        assert_true(fd >= 0);
        fflush(stdout);
        saved = dup(1);
        dup2(fd, 1);
        run_err(&c);
        fflush(stdout);
        dup2(saved, 1);
        close(saved);
        close(fd);
        if (out) {
            if (at_file_read(path, out, &n, e, sizeof e) != AT_OK)
                *out = NULL;
        }
        unlink(path);
    }
    if (err)
        *err = c.err;
    else
        at_free(c.err);
    return c.rc;
}

static int64_t count_records(void)
{
    rec_store *st;
    int64_t n = -1;
    char err[512];
    if (rec_store_open(db, REC_OPEN_READONLY, &st, err, sizeof err) != AT_OK)
        fail_msg("%s", err);
    assert_int_equal(rec_store_count(st, &n, NULL, NULL, NULL), AT_OK);
    rec_store_close(st);
    return n;
}

static void test_help(void **unused)
{
    static const char *flags[] = {"--db", "--task", "--random", "--seed", "--target",
                                  "--device", "--threads", "--repeat", "--min-repeat-ms",
                                  "--no-check", "--pretrain", "--eval", "--objective",
                                  "--quiet", "--help", "--tracker", "--fleet-key",
                                  "--build-workers", "--corpus", "--train-db",
                                  "--train-fraction"};
    char *out = NULL;
    (void)unused;
    assert_int_equal(tuner(&out, NULL, "dataset", "--help", NULL), TN_EXIT_OK);
    assert_non_null(out);
    for (size_t i = 0; i < AT_ARRAY_LEN(flags); i++)
        if (strstr(out, flags[i]) == NULL)
            fail_msg("'tuner dataset --help' does not list %s:\n%s", flags[i], out);
    at_free(out);
    /* the command's own help lists the subcommand */
    assert_int_equal(tuner(&out, NULL, "--help", NULL), TN_EXIT_OK);
    assert_non_null(strstr(out, "dataset"));
    at_free(out);
}

static void test_bad_command_lines(void **unused)
{
    static const struct {
        const char *args[8];
        const char *words;
    } cases[] = {
        {{"dataset", "--bogus"}, "unknown flag '--bogus'"},
        {{"dataset"}, "exactly one of"},
        {{"dataset", "--random", "5"}, "--random needs --task"},
        {{"dataset", "--random", "x", "--task", "matmul"}, "--random needs a whole number"},
        {{"dataset", "--random", "3", "--pretrain", "--task", "matmul"}, "exactly one of"},
        {{"dataset", "--eval", "--task", "matmul"}, "--task goes with --random"},
        {{"dataset", "--random", "3", "--task", "matmul", "--repeat", "0"}, "--repeat"},
        {{"dataset", "--eval", "--objective", "best"}, "--objective must be rank or reg"},
        {{"dataset", "--pretrain", "--train-db", "x.db"}, "--train-db goes with --eval"},
        {{"dataset", "--pretrain", "--train-fraction", "0.5"}, "--train-fraction goes with --eval"},
        {{"dataset", "--eval", "--train-fraction", "1"}, "--train-fraction must be above 0"},
        {{"dataset", "--eval", "--train-fraction", "0"}, "--train-fraction must be above 0"},
        {{"dataset", "--eval", "--train-db", "x.db", "--train-fraction", "1.5"},
         "--train-fraction must be 0 or more and below 1"},
        {{"dataset", "--random", "2", "--task", "nosuchop:X=1"}, "no operator spec"},
        {{"dataset", "--random", "2", "--task", "matmul", "--target",
          "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76"}, "not this host"},
        {{"dataset", "--random", "2", "--task", "matmul", "--device", ""}, "--device"},
        {{"dataset", "--random", "2", "--task", "matmul", "extra"}, "unexpected argument"},
        {{"dataset", "--corpus", "2", "--random", "2", "--task", "matmul"}, "exactly one of"},
        {{"dataset", "--corpus", "2", "--task", "matmul"}, "--task goes with --random"},
        {{"dataset", "--corpus", "many"}, "--corpus needs a whole number"},
        {{"dataset", "--corpus", "1000000"}, "--corpus must be 0..100000"},
    };
    (void)unused;
    for (size_t i = 0; i < AT_ARRAY_LEN(cases); i++) {
        char *argv[12], *err = NULL;
        int argc = 0, rc;
        run_ctx c;
        char dbflag[PATH_MAX + 8];
        argv[argc++] = (char *)"tuner";
        for (int k = 0; k < 8 && cases[i].args[k]; k++)
            argv[argc++] = (char *)cases[i].args[k];
        snprintf(dbflag, sizeof dbflag, "--db=%s/bad.db", dir);
        argv[argc++] = dbflag;
        argv[argc] = NULL;
        c.argc = argc;
        c.argv = argv;
        c.err = NULL;
        err = ct_capture_stderr(run_main, &c);
        rc = c.rc;
        if (rc != TN_EXIT_USAGE || err == NULL || strstr(err, cases[i].words) == NULL)
            fail_msg("case %zu: exit %d, stderr '%s' (want 2 and '%s')", i, rc,
                     err ? err : "", cases[i].words);
        at_free(err);
    }
}

static void test_random_pretrain_eval(void **unused)
{
    char *out = NULL, *err = NULL, dbflag[PATH_MAX + 8], key[REC_KEY_LEN + 1], dagfile[PATH_MAX];
    char fileerr[256];
    int64_t n1, n2;
    (void)unused;
    snprintf(dbflag, sizeof dbflag, "--db=%s", db);
    /* an operator spec */
    assert_int_equal(tuner(&out, &err, "dataset", dbflag, "--task", "matmul:M=64,N=64,K=64",
                           "--random", "12", "--seed", "3", "--threads", "1", "--repeat", "2",
                           "--min-repeat-ms", "0", "--build-workers", "0", NULL),
                     TN_EXIT_OK);
    if (out == NULL || strstr(out, "measured 12 random states") == NULL)
        fail_msg("stdout: %s\nstderr: %s", out ? out : "", err ? err : "");
    assert_non_null(strstr(out, "best:"));
    at_free(out);
    at_free(err);
    n1 = count_records();
    assert_int_equal(n1, 12);
    {
        /* records name their run and the local device, job ids are <run uuid>-<i>, and the
        ** embedded agent measured them (the fleet, not an in-process path) */
        rec_store *st;
        rec_iter *it;
        const rec_record *r;
        char e[512];
        int n = 0;
        assert_int_equal(rec_store_open(db, REC_OPEN_READONLY, &st, e, sizeof e), AT_OK);
        assert_int_equal(rec_iter_open(st, NULL, REC_ORDER_ID, &it), AT_OK);
        while (rec_iter_next(it, &r) == AT_OK && r) {
            assert_int_equal(strncmp(r->job_id, r->run_uuid, strlen(r->run_uuid)), 0);
            assert_int_equal(r->job_id[strlen(r->run_uuid)], '-');
            assert_non_null(strstr(r->agent, "embedded"));
            assert_string_equal(r->device_key, "local");
            assert_non_null(r->run_uuid);
            assert_int_equal(r->status, 0);
            assert_int_equal(r->n_costs, 2);
            snprintf(key, sizeof key, "%s", r->workload_key);
            n++;
        }
        assert_int_equal(n, 12);
        rec_iter_close(it);
        rec_store_close(st);
    }
    /* the same task by its workload key, more states */
    assert_int_equal(tuner(NULL, NULL, "dataset", dbflag, "--task", key, "--random", "8",
                           "--seed", "4", "--threads", "1", "--repeat", "2", "--min-repeat-ms",
                           "0", "--quiet", "--build-workers", "0", NULL),
                     TN_EXIT_OK);
    n2 = count_records();
    assert_true(n2 > n1 && n2 <= n1 + 8);
    /* a key the store does not know: the work fails (exit 1), saying why */
    assert_int_equal(tuner(NULL, &err, "dataset", dbflag, "--task",
                           "0123456789abcdef0123456789abcdef", "--random", "2", NULL),
                     TN_EXIT_FAIL);
    assert_non_null(strstr(err, "no record of task"));
    at_free(err);
    /* a DAG file */
    {
        char *text;
        snprintf(dagfile, sizeof dagfile, "%s/task.dag", dir);
        assert_int_equal(kn_op_text("conv2d:N=1,C=4,H=8,W=8,K=8,R=3,S=3,pad=1", &text, fileerr,
                                    sizeof fileerr),
                         AT_OK);
        assert_int_equal(at_file_write(dagfile, text, strlen(text), fileerr, sizeof fileerr),
                         AT_OK);
        at_free(text);
    }
    assert_int_equal(tuner(NULL, NULL, "dataset", dbflag, "--task", dagfile, "--random", "10",
                           "--threads", "1", "--repeat", "2", "--min-repeat-ms", "0", "--quiet",
                           "--build-workers", "0", NULL),
                     TN_EXIT_OK);
    assert_true(count_records() > n2);
    /* pre-train: a model saved for the target, with the feature version */
    assert_int_equal(tuner(&out, &err, "dataset", dbflag, "--pretrain", "--target",
                           "llvm -mtriple=x86_64-pc-linux-gnu -mcpu=znver4", NULL),
                     TN_EXIT_OK);
    if (out == NULL || strstr(out, "pre-trained a cost model") == NULL)
        fail_msg("stdout: %s\nstderr: %s", out ? out : "", err ? err : "");
    at_free(out);
    at_free(err);
    {
        rec_store *st;
        char e[512], format[32];
        void *blob;
        size_t n;
        int fv;
        int64_t nrec;
        cm_model *m;
        kn_target t;
        assert_int_equal(kn_target_parse("llvm -mtriple=x86_64-pc-linux-gnu -mcpu=znver4", &t,
                                         e, sizeof e),
                         AT_OK);
        assert_int_equal(rec_store_open(db, REC_OPEN_READONLY, &st, e, sizeof e), AT_OK);
        assert_int_equal(rec_model_load(st, t.text, &blob, &n, format, &fv, &nrec), AT_OK);
        assert_string_equal(format, CM_BLOB_FORMAT);
        assert_int_equal(fv, CM_FEATURE_VERSION);
        assert_int_equal(nrec, count_records());
        at_free(blob);
        assert_int_equal(cm_model_new(NULL, &m), AT_OK);
        assert_int_equal(cm_model_load_or_scratch(m, st, t.text), 1);
        assert_int_equal(cm_model_get_state(m), CM_MODEL_PRETRAINED);
        cm_model_free(m);
        rec_store_close(st);
    }
    /* evaluation */
    assert_int_equal(tuner(&out, NULL, "dataset", dbflag, "--eval", "--objective", "reg", NULL),
                     TN_EXIT_OK);
    assert_non_null(out);
    assert_non_null(strstr(out, "pairwise accuracy"));
    assert_non_null(strstr(out, "objective reg"));
    at_free(out);
    /* --train-db: trained on every record of that store, scored on every record of --db
    ** (here the same one: the model has seen every program, so it must order most pairs) */
    {
        char tflag[PATH_MAX + 16];
        const char *p;
        double acc = 0;
        snprintf(tflag, sizeof tflag, "--train-db=%s", db);
        assert_int_equal(tuner(&out, &err, "dataset", dbflag, "--eval", tflag, NULL), TN_EXIT_OK);
        if (out == NULL || strstr(out, "every record of --db") == NULL ||
            (p = strstr(out, "pairwise accuracy ")) == NULL)
            fail_msg("stdout: %s\nstderr: %s", out ? out : "", err ? err : "");
        acc = atof(p + strlen("pairwise accuracy "));
        if (!(acc > 0.7))
            fail_msg("trained on the records it scores, pairwise accuracy %.3f:\n%s", acc, out);
        at_free(out);
        at_free(err);
        /* and half of --db's own records besides: the other half is scored */
        assert_int_equal(tuner(&out, &err, "dataset", dbflag, "--eval", tflag,
                               "--train-fraction", "0.5", NULL),
                         TN_EXIT_OK);
        if (out == NULL || strstr(out, "(--train-db's and some of --db's)") == NULL ||
            strstr(out, "held out") == NULL)
            fail_msg("stdout: %s\nstderr: %s", out ? out : "", err ? err : "");
        at_free(out);
        at_free(err);
        snprintf(tflag, sizeof tflag, "--train-db=%s/nosuch.db", dir);
        assert_int_equal(tuner(&out, &err, "dataset", dbflag, "--eval", tflag, NULL),
                         TN_EXIT_FAIL);
        if (err == NULL || strstr(err, "--train-db") == NULL || strstr(err, "nosuch.db") == NULL)
            fail_msg("stderr: %s", err ? err : "");
        at_free(out);
        at_free(err);
    }
}

/* --corpus N: N random states of every corpus workload, each its own task; a second run
** finds them there and measures nothing. */
static void test_corpus(void **unused)
{
    char *out = NULL, *err = NULL, dbflag[PATH_MAX + 8], cdb[PATH_MAX], e[512];
    rec_store *st;
    int64_t n_rec = -1, n_tasks = -1;
    (void)unused;
    snprintf(cdb, sizeof cdb, "%s/corpus.db", dir);
    snprintf(dbflag, sizeof dbflag, "--db=%s", cdb);
    assert_true(tn_corpus_count() >= 10);
    assert_null(tn_corpus_spec(tn_corpus_count()));
    assert_int_equal(tuner(&out, &err, "dataset", dbflag, "--corpus", "1", "--threads", "1",
                           "--repeat", "1", "--min-repeat-ms", "0", "--no-check",
                           "--build-workers", "0", NULL),
                     TN_EXIT_OK);
    if (out == NULL || strstr(out, "random states measured") == NULL)
        fail_msg("stdout: %s\nstderr: %s", out ? out : "", err ? err : "");
    /* a progress line per workload, naming it */
    assert_non_null(strstr(err, tn_corpus_spec(0)));
    assert_non_null(strstr(err, tn_corpus_spec(tn_corpus_count() - 1)));
    at_free(out);
    at_free(err);
    assert_int_equal(rec_store_open(cdb, REC_OPEN_READONLY, &st, e, sizeof e), AT_OK);
    assert_int_equal(rec_store_count(st, &n_rec, &n_tasks, NULL, NULL), AT_OK);
    rec_store_close(st);
    assert_int_equal(n_rec, tn_corpus_count());
    assert_int_equal(n_tasks, tn_corpus_count());
    /* topped up already: nothing measured */
    assert_int_equal(tuner(&out, NULL, "dataset", dbflag, "--corpus", "1", "--threads", "1",
                           "--repeat", "1", "--min-repeat-ms", "0", "--no-check",
                           "--build-workers", "0", NULL),
                     TN_EXIT_OK);
    assert_non_null(out);
    if (strstr(out, ": 0 random states measured") == NULL)
        fail_msg("second run: %s", out);
    at_free(out);
    assert_int_equal(rec_store_open(cdb, REC_OPEN_READONLY, &st, e, sizeof e), AT_OK);
    assert_int_equal(rec_store_count(st, &n_rec, NULL, NULL, NULL), AT_OK);
    rec_store_close(st);
    assert_int_equal(n_rec, tn_corpus_count());
}

static int setup(void **unused)
{
    (void)unused;
    ct_mkdtemp(dir);
    snprintf(db, sizeof db, "%s/ds.db", dir);
    return 0;
}

static int teardown(void **unused)
{
    (void)unused;
    ct_rmdir(dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help),
        cmocka_unit_test(test_bad_command_lines),
        cmocka_unit_test(test_random_pretrain_eval),
        cmocka_unit_test(test_corpus),
    };
    tn_fleet_prepare(); /* the embedded agent's launcher, before any thread */
    return cmocka_run_group_tests(tests, setup, teardown);
}
