/* tests/tuner/test_tune.c -- the tuning run, end to end, through the real 'tuner' binary
** (build/<flavour>/bin/tuner): the embedded tracker and agent, build workers, the cost
** model and the records store, all real.
**
**   - a short run steers towards fast programs (keeping the seeds' level) and records every
**     trial, once;
**   - a run killed with SIGKILL and resumed measures no recorded program again and ends
**     with exactly the budgeted number of records;
**   - the same seed gives the same first round;
**   - --max-code-size: no measured program's code is over the limit, and the report says
**     what share of the scored programs it left out;
**   - bad flags and specs give clear errors and exit status 2. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>

#include "kernels/kernels.h"
#include "tests/support/test_dirs.h"
#include "records/records.h"

static char bin[PATH_MAX + 16], dir[64];

/* Start the tuner with 'args' (NULL-terminated) in its own process group; its output goes
** to dir/NAME.out and dir/NAME.err. */
static pid_t start(const char *name, const char *const *args)
{
    pid_t pid;
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid == 0) {
        char out[PATH_MAX], err[PATH_MAX];
        const char *argv[64];
        int argc = 0, fo, fe;
        setpgid(0, 0);
        snprintf(out, sizeof out, "%s/%s.out", dir, name);
        snprintf(err, sizeof err, "%s/%s.err", dir, name);
        fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fo < 0 || fe < 0 || chdir(dir) != 0)
            _exit(120);
        dup2(fo, 1);
        dup2(fe, 2);
        argv[argc++] = "tuner";
        for (int i = 0; args[i] && argc < 63; i++)
            argv[argc++] = args[i];
        argv[argc] = NULL;
        execv(bin, (char *const *)argv);
        _exit(121);
    }
    assert_true(pid > 0);
    return pid;
}

static int finish(pid_t pid, int deadline_s)
{
    int status;
    for (int i = 0; i < deadline_s * 10; i++) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        usleep(100000);
    }
    kill(-pid, SIGKILL);
    waitpid(pid, &status, 0);
    fail_msg("the tuner did not finish within %d s", deadline_s);
    return -1;
}

static int run(const char *name, int deadline_s, const char *const *args)
{
    return finish(start(name, args), deadline_s);
}

#define RUN(name, deadline, ...) run((name), (deadline), (const char *const[]){__VA_ARGS__, NULL})

static char *slurp(const char *name)
{
    char path[PATH_MAX], *text, msg[256];
    size_t n;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (at_file_read(path, &text, &n, msg, sizeof msg) != AT_OK)
        fail_msg("%s", msg);
    return text;
}

static void expect_usage(const char *name, const char *msg, const char *const *args)
{
    int rc = run(name, 120, args);
    char file[128], *err;
    snprintf(file, sizeof file, "%s.err", name);
    err = slurp(file);
    if (rc != 2 || strstr(err, msg) == NULL)
        fail_msg("%s: exit %d, stderr '%s' (wanted 2 and '%s')", name, rc, err, msg);
    at_free(err);
}

#define USAGE(name, msg, ...) expect_usage((name), (msg), (const char *const[]){__VA_ARGS__, NULL})

/* ---- reading a store ---- */

typedef struct rec {
    char *state;
    double mean;
    int status;
    int64_t trial;
    char *run;
    char key[33];
} rec;

/* The records of 'db'; -1 (with 'quiet') when the store cannot be opened yet (a tuner is
** still creating it), else a failure. */
static int load_store(const char *db, rec **out, int quiet)
{
    char path[PATH_MAX], err[256];
    rec_store *st;
    rec_iter *it;
    const rec_record *r;
    rec *v = NULL;
    int n = 0;
    snprintf(path, sizeof path, "%s/%s", dir, db);
    *out = NULL;
    if (rec_store_open(path, REC_OPEN_READONLY, &st, err, sizeof err) != AT_OK) {
        if (quiet)
            return -1;
        fail_msg("%s", err);
    }
    assert_int_equal(rec_iter_open(st, NULL, REC_ORDER_ID, &it), AT_OK);
    while (rec_iter_next(it, &r) == AT_OK && r) {
        v = realloc(v, (size_t)(n + 1) * sizeof *v);
        v[n].state = strdup(r->state);
        v[n].mean = r->mean;
        v[n].status = r->status;
        v[n].trial = r->trial;
        v[n].run = strdup(r->run_uuid ? r->run_uuid : "");
        snprintf(v[n].key, sizeof v[n].key, "%s", r->workload_key ? r->workload_key : "");
        n++;
    }
    rec_iter_close(it);
    rec_store_close(st);
    *out = v;
    return n;
}

static int load(const char *db, rec **out)
{
    return load_store(db, out, 0);
}

static void free_recs(rec *v, int n)
{
    for (int i = 0; i < n; i++) {
        free(v[i].state);
        free(v[i].run);
    }
    free(v);
}

static void assert_distinct(const rec *v, int n)
{
    for (int i = 0; i < n; i++)
        for (int k = i + 1; k < n; k++)
            if (strcmp(v[i].state, v[k].state) == 0)
                fail_msg("a program was measured twice: %s", v[i].state);
}

/* ---- the tests ---- */

static void test_bad_command_lines(void **unused)
{
    (void)unused;
    USAGE("b1", "--trials must be at least 1", "--trials", "0", "matmul:M=8,N=8,K=8");
    USAGE("b2", "'nosuchop' is neither a library operator", "nosuchop");
    USAGE("b3", "matmul: M must be a positive integer", "matmul:M=-3");
    USAGE("b4", "--per-round needs a whole number", "--per-round", "many", "matmul");
    USAGE("b5", "not this machine's architecture", "--target",
          "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76", "matmul:M=8,N=8,K=8");
    USAGE("b6", "sm_70 is older than sm_75", "--target", "cuda -arch=sm_70", "matmul");
    USAGE("b6g", "is a GPU: measure it on GPU agents", "--target", "cuda -arch=sm_90",
          "matmul:M=8,N=8,K=8");
    USAGE("b7", "unknown flag '--trails'", "--trails", "10", "matmul");
    USAGE("b8", "a tracker needs the fleet key", "--tracker", "127.0.0.1:1", "--key", "x",
          "matmul:M=8,N=8,K=8");
    USAGE("b9", "nothing to tune", "--trials", "10");
    /* issue 14, item 9: a missing DAG file is named as one; --timeout 0 names the rule */
    USAGE("b10", "/nonexistent/x.dag: cannot read the DAG file: No such file or directory",
          "/nonexistent/x.dag");
    USAGE("b11", "--timeout-s must be at least 1 (whole seconds), not 0", "--timeout-s", "0",
          "matmul:M=8,N=8,K=8");
    /* issue 15, item 4: an old spelling still works and names the new one */
    USAGE("b11o", "warning: --timeout is now --timeout-s (the old spelling still works for now)",
          "--timeout", "0", "matmul:M=8,N=8,K=8");
    USAGE("b12", "--repeat must be 1 to 1024, not 0", "--repeat", "0", "matmul:M=8,N=8,K=8");
    USAGE("b13", "--overlap-builds needs auto, on or off, not 'maybe'", "--overlap-builds",
          "maybe", "matmul:M=8,N=8,K=8");
    USAGE("b14", "--flush-cache, --flush-weights and --no-flush-cache exclude each other",
          "--flush-weights", "--no-flush-cache", "matmul:M=8,N=8,K=8");
    USAGE("b15", "--max-code-size needs a whole number >= 0, not '-5'", "--max-code-size",
          "-5", "matmul:M=8,N=8,K=8");
    {
        char path[PATH_MAX];
        FILE *f;
        snprintf(path, sizeof path, "%s/bad.dag", dir);
        f = fopen(path, "w");
        assert_non_null(f);
        fputs("input A[8] float32\nB[i:8] = A[i] * q\n", f);
        fclose(f);
        USAGE("b10", "bad.dag:2:17: unknown name 'q'", "bad.dag");
    }
}

/* The report's count of lowerings and state parses in the tuner process during the rounds
** (issue 15): every trial lowered once, by the search's scoring (training reuses its
** features) and its JSON never parsed back; a lowering or parse the report cannot place is
** "other", and there must be none.  Returns the seeds' parses. */
static long long check_lowered_once(const char *out, long long want_not_scored)
{
    const char *p = strstr(out, "in this process during the rounds: ");
    long long low, scoring, not_scored, here, other, parsed, seeds, here2, other2;
    if (p == NULL)
        fail_msg("no count of lowerings in the report:\n%s", out);
    if (sscanf(p, "in this process during the rounds: %lld lowerings (%lld scoring new "
                  "programs, %lld of trials not scored, %lld builds here, %lld other), %lld "
                  "state parses (%lld of seeds from similar tasks, %lld builds here, %lld other)",
               &low, &scoring, &not_scored, &here, &other, &parsed, &seeds, &here2,
               &other2) != 9)
        fail_msg("unreadable count of lowerings: %.300s", p);
    if (low <= 0 || scoring <= 0 || other != 0 || other2 != 0 || here != 0 || here2 != 0 ||
        not_scored != want_not_scored || low != scoring + not_scored || parsed != seeds)
        fail_msg("a trial was lowered or parsed more than once in the tuner: %.300s", p);
    return seeds;
}

/* The report's "where the time went": the rounds' waits for builds and for the agents, the
** search and training happen one after another in the embedded mode, so together they fit
** in the run's wall time; the agents' own time on the jobs fits in the rounds' wait for
** them; and the builds' time in N workers is at most N times the rounds' wait for them. */
static void check_time_accounting(const char *out)
{
    const char *p = strstr(out, " trials in ");
    double total, search, train, build_cpu, build_each, build_wait, measure, measure_wait;
    long long n_builds;
    int workers;
    if (p == NULL || sscanf(p, " trials in %lf s", &total) != 1)
        fail_msg("no wall time in the report:\n%s", out);
    p = strstr(out, "time: search ");
    if (p == NULL)
        fail_msg("no 'time:' line in the report:\n%s", out);
    if (sscanf(p, "time: search %lf s, training %lf s, builds %lf s in %d worker", &search,
               &train, &build_cpu, &workers) != 4 ||
        strchr(p, '(') == NULL ||
        sscanf(strchr(p, '('), "(%lld builds, %lf s each; rounds waited %lf s for them), "
                               "measuring %lf s on the agents (rounds waited %lf s for it)",
               &n_builds, &build_each, &build_wait, &measure, &measure_wait) != 5)
        fail_msg("unreadable 'time:' line: %.300s", p);
    if (!(search > 0 && train >= 0 && build_cpu > 0 && build_wait > 0 && measure >= 0 &&
          n_builds > 0 && workers >= 1))
        fail_msg("a part of the time is missing: %.300s", p);
    /* each of the five figures is printed to 0.1 s: their sum may be off by 0.25 */
    if (search + train + build_wait + measure_wait > total + 0.25)
        fail_msg("the parts (%.2f s) exceed the wall time %.2f s: %.300s",
                 search + train + build_wait + measure_wait, total, p);
    if (measure > measure_wait + 0.1 || build_cpu > workers * build_wait + 0.1)
        fail_msg("work exceeds the time the rounds waited for it: %.300s", p);
}

/* Under --max-code-size 2000 a 64^3 matmul (whose unlimited picks range from 63 to 50,000
** nodes) still gets its 40 trials, none of them over the limit but the seeds of its first
** round (programs of similar tasks and hand-written ones, at most half of its 8 picks, not
** limited): every round scores with the model's features (8 per round: no blind cold
** round). */
static void test_code_size_limit(void **unused)
{
    rec *v;
    int n, n_small = 0, n_seeds = 0;
    ss_dag *dag;
    char err[512], *out;
    (void)unused;
    assert_int_equal(RUN("csize", 600, "--trials", "40", "--per-round", "8", "--population",
                         "64", "--max-code-size", "2000", "--db", "csize.db",
                         "matmul:M=64,N=64,K=64"),
                     0);
    out = slurp("csize.out");
    if (strstr(out, "over the code-size limit (--max-code-size 2000), never picked: ") == NULL)
        fail_msg("the report does not say what the limit left out:\n%s", out);
    at_free(out);
    if (kn_op_build("matmul:M=64,N=64,K=64", &dag, err, sizeof err) != AT_OK)
        fail_msg("%s", err);
    n = load("csize.db", &v);
    assert_int_equal(n, 40);
    for (int i = 0; i < n; i++) {
        ss_state *st;
        kn_ir *ir;
        int64_t size;
        if (ss_state_from_json(dag, v[i].state, strlen(v[i].state), &st, err, sizeof err) !=
                AT_OK ||
            kn_lower(st, &ir, err, sizeof err) != AT_OK)
            fail_msg("record %d: %s", i, err);
        size = kn_ir_code_size(ir);
        if (size > 2000 && v[i].trial < 8 && ++n_seeds <= 4)
            size = 0; /* a seed */
        if (size > 2000)
            fail_msg("trial %lld measured a program of %lld nodes: %s", (long long)v[i].trial,
                     (long long)size, v[i].state);
        n_small += size <= 200;
        kn_ir_free(ir);
        ss_state_free(st);
    }
    assert_true(n_small < n); /* the limit is not all there is: larger programs too */
    free_recs(v, n);
    ss_dag_unref(dag);
}

static void test_short_run_improves_and_records_everything(void **unused)
{
    rec *v;
    int n, seen[120] = {0}, n_first = 0, n_late = 0;
    double first = INFINITY, later = INFINITY, first_v[8], late_v[56], first_med, late_med;
    (void)unused;
    /* without re-timing: the first round's figures are its own measurements */
    assert_int_equal(RUN("improve", 900, "--trials", "120", "--per-round", "8", "--population",
                         "64", "--db", "improve.db", "--seed", "5", "--no-retime",
                         "matmul:M=128,N=128,K=64"),
                     0);
    n = load("improve.db", &v);
    assert_int_equal(n, 120);
    assert_distinct(v, n);
    for (int i = 0; i < n; i++) {
        assert_true(v[i].trial >= 0 && v[i].trial < 120);
        seen[v[i].trial]++;
        if (v[i].status != 0)
            continue;
        if (v[i].trial < 8) {
            first = AT_MIN(first, v[i].mean);
            if (n_first < 8)
                first_v[n_first++] = v[i].mean;
        } else {
            later = AT_MIN(later, v[i].mean);
            if (v[i].trial >= 64 && n_late < 56)
                late_v[n_late++] = v[i].mean;
        }
    }
    for (int t = 0; t < 120; t++)
        assert_int_equal(seen[t], 1);
    {
        /* by default nothing is evicted */
        char *err = slurp("improve.err");
        if (strstr(err, "evicted from the caches") != NULL)
            fail_msg("a run without a flush flag evicts its inputs: %s", err);
        at_free(err);
    }
    /* The search steers towards fast programs: the median of the last seven rounds is below
    ** the first round's (half of it hand-written seeds, half sampled), by 2-4x when it
    ** works.  The best found later keeps the seeds' level: for this small shape the seeds
    ** are within 2-15 % of the best the search finds, less than what a 2-thread kernel's
    ** timing moves on a 2-core host beside the tuner's own builds (in CI a seed once timed
    ** faster than every later program; here, under load, 5.45 us against 5.65 us and
    ** over), so the bound is 2x, not 1x. */
    assert_true(n_first >= 4 && n_late >= 28);
    first_med = at_median_sort(first_v, n_first);
    late_med = at_median_sort(late_v, n_late);
    if (!(late_med < first_med))
        fail_msg("the search does not steer: median %g s in the first round, %g s in the "
                 "last seven", first_med, late_med);
    if (!(later < 2 * first))
        fail_msg("the search loses the first round's level: %g s then %g s at best", first,
                 later);
    free_recs(v, n);
    /* the report names the task, and 'tuner best' and 'tuner plot' read the store */
    {
        char *out = slurp("improve.out");
        assert_non_null(strstr(out, "matmul:M=128,N=128,K=64"));
        assert_non_null(strstr(out, "120 trials"));
        check_lowered_once(out, 0);
        check_time_accounting(out);
        assert_null(strstr(out, "re-timed"));
        assert_non_null(strstr(out, "(120 builds,"));
        at_free(out);
        assert_int_equal(RUN("best", 120, "best", "--db", "improve.db"), 0);
        assert_int_equal(RUN("plot", 120, "plot", "--db", "improve.db", "-o", "curve.png"), 0);
        assert_int_equal(RUN("plot2", 120, "plot", "--db", "improve.db", "-o", "curve.svg"), 0);
    }
    /* with re-timing (the default): the first round's best is built and timed once more as
    ** the second round's first job, not a trial: 24 records for 24 trials, each trial once,
    ** 25 builds, and the report counts it */
    {
        int seen2[24] = {0};
        char *out;
        assert_int_equal(RUN("retime", 600, "--trials", "24", "--per-round", "8", "--population",
                             "64", "--db", "retime.db", "--seed", "5", "matmul:M=64,N=64,K=64"),
                         0);
        n = load("retime.db", &v);
        assert_int_equal(n, 24);
        for (int i = 0; i < n; i++) {
            assert_true(v[i].trial >= 0 && v[i].trial < 24);
            seen2[v[i].trial]++;
        }
        for (int t = 0; t < 24; t++)
            assert_int_equal(seen2[t], 1);
        free_recs(v, n);
        out = slurp("retime.out");
        assert_non_null(strstr(out, "24 trials"));
        assert_non_null(strstr(out, "re-timed the first round's best of 1 task:"));
        assert_non_null(strstr(out, "(25 builds,"));
        at_free(out);
    }
}

/* Several tasks and a small budget, no --per-round: every task gets its warm-up round
** (Ansor's rule: per round min(64, trials / tasks)). */
/* --overlap-builds on: the next round is searched and built while the agent times this one,
** with the kernels pinned to their own CPU (as the OS reports it back) and the tuner and its
** builders on the others; every trial is recorded once, as without overlap. */
static void test_overlap_builds(void **unused)
{
    rec *v;
    int n, seen[40] = {0}, ok = 0;
    char *err;
    const char *p;
    char kern[64], rest[64];
    (void)unused;
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
        skip(); /* nothing to split: the CLI then overlaps on shared CPUs */
    assert_int_equal(RUN("overlap", 600, "--trials", "40", "--per-round", "8", "--population",
                         "64", "--db", "overlap.db", "--seed", "5", "--threads", "1",
                         "--overlap-builds", "on", "matmul:M=128,N=128,K=64"),
                     0);
    n = load("overlap.db", &v);
    assert_int_equal(n, 40);
    for (int i = 0; i < n; i++) {
        assert_true(v[i].trial >= 0 && v[i].trial < 40);
        seen[v[i].trial]++;
        ok += v[i].status == 0;
    }
    for (int t = 0; t < 40; t++)
        assert_int_equal(seen[t], 1);
    assert_true(ok >= 30);
    free_recs(v, n);
    err = slurp("overlap.err");
    p = strstr(err, "builds overlap the measuring: kernels on CPU ");
    if (p == NULL || sscanf(p, "builds overlap the measuring: kernels on CPU %63[0-9]", kern) != 1 ||
        (p = strstr(p, " build worker")) == NULL || (p = strstr(p, " on CPU")) == NULL ||
        sscanf(p + strlen(" on CPU") + (p[strlen(" on CPU")] == 's'), " %63[0-9,-]", rest) != 1)
        fail_msg("no CPU split in the run's messages: %s", err);
    if (strcmp(kern, rest) == 0 || (strncmp(rest, kern, strlen(kern)) == 0 &&
                                    strchr(",-", rest[strlen(kern)]) != NULL))
        fail_msg("the kernels' CPU (%s) is not theirs alone (the tuner's: %s)", kern, rest);
    at_free(err);
}

static void test_small_budget_reaches_every_task(void **unused)
{
    rec *v;
    int n, n_keys = 0, count[3] = {0};
    char keys[3][33];
    (void)unused;
    assert_int_equal(RUN("split", 600, "--trials", "12", "--population", "32", "--db",
                         "split.db", "matmul:M=16,N=16,K=16", "matmul:M=32,N=16,K=8",
                         "dense:M=4,N=32,K=32"),
                     0);
    n = load("split.db", &v);
    assert_int_equal(n, 12);
    for (int i = 0; i < n; i++) {
        int k = 0;
        while (k < n_keys && strcmp(keys[k], v[i].key) != 0)
            k++;
        if (k == n_keys) {
            assert_true(n_keys < 3);
            memcpy(keys[n_keys++], v[i].key, 33);
        }
        count[k]++;
    }
    assert_int_equal(n_keys, 3);
    for (int k = 0; k < 3; k++)
        assert_int_equal(count[k], 4);
    free_recs(v, n);
}

/* Budget where it pays: a pooling task's warm-up is a handful of trials where a
** convolution's is a full round, and the second convolution of a tag starts from the first
** one's best programs.  The budget is exactly the warm-ups: 16 + 8 + 16. */
static void test_warmup_by_share_and_seeds(void **unused)
{
    static const char *const specs[3] = {"conv2d:C=8,H=16,W=16,K=16,layout=NHWC",
                                         "max_pool2d:C=8,H=16,W=16,layout=NHWC",
                                         "conv2d:C=16,H=16,W=16,K=8,layout=NHWC"};
    static const int want[3] = {16, 8, 16};
    rec *v;
    int n, count[3] = {0};
    char keys[3][33], err[512], *out;
    (void)unused;
    for (int k = 0; k < 3; k++) {
        ss_dag *d;
        assert_int_equal(kn_op_build(specs[k], &d, err, sizeof err), AT_OK);
        memcpy(keys[k], d->key, 33);
        ss_dag_unref(d);
    }
    assert_int_equal(RUN("warm", 600, "--trials", "40", "--per-round", "16", "--population",
                         "64", "--db", "warm.db", specs[0], specs[1], specs[2]),
                     0);
    n = load("warm.db", &v);
    assert_int_equal(n, 40);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 3; k++)
            count[k] += strcmp(keys[k], v[i].key) == 0;
    for (int k = 0; k < 3; k++)
        if (count[k] != want[k])
            fail_msg("%s: %d trials in its warm-up, want %d", specs[k], count[k], want[k]);
    free_recs(v, n);
    out = slurp("warm.err");
    if (strstr(out, "conv2d:C=16,H=16,W=16,K=8,layout=NHWC: its first round was seeded with") ==
        NULL)
        fail_msg("the second convolution was not seeded: %s", out);
    at_free(out);
    /* seeds are parsed once, when offered; nothing else is parsed or lowered twice */
    out = slurp("warm.out");
    assert_true(check_lowered_once(out, 0) > 0);
    at_free(out);
}

/* Issue 16: a run whose cost model has nothing to go on measures a first round of 16
** random programs, then lets the model trained on them pick (TN_COLD_ROUND); a run on a
** store with records trains one on them at its start, saved model or not, and a run with
** --pretrain-max below the store's records starts from the saved model, each saying so;
** a trained start halves the default rounds (not a --per-round given). */
static void test_cold_start_and_pretrained_start(void **unused)
{
    char *err;
    (void)unused;
    /* no model at all (--no-model): nothing saved, 24 random trials recorded */
    assert_int_equal(RUN("cold0", 600, "--trials", "24", "--population", "64", "--no-cost-model",
                         "--db", "cold.db", "matmul:M=64,N=64,K=32"),
                     0);
    /* a model, but none saved and 24 records of another task: trained on them at the start;
    ** the run's first round is still 16 random programs of this task (the model is refined
    ** on them before it picks) */
    assert_int_equal(RUN("cold1", 600, "--trials", "40", "--population", "64", "--db",
                         "cold.db", "matmul:M=32,N=64,K=64"),
                     0);
    err = slurp("cold1.err");
    if (strstr(err, "cost model: trained at the start on 24 records of 1 task in") == NULL)
        fail_msg("no pre-training at the start: %s", err);
    if (strstr(err, "trials 16/40") == NULL || strstr(err, "trials 40/40") == NULL)
        fail_msg("want a first round of 16, then the rest: %s", err);
    at_free(err);
    /* the saved model of that run: a run told to train on no records starts from it */
    assert_int_equal(RUN("cold2", 600, "--trials", "8", "--population", "64", "--pretrain-max",
                         "0", "--db", "cold.db", "dense:M=4,N=32,K=32"),
                     0);
    err = slurp("cold2.err");
    if (strstr(err, "cost model: starting from the model saved in") == NULL)
        fail_msg("the saved model was not used: %s", err);
    if (strstr(err, "trained at the start") != NULL)
        fail_msg("trained on the records though --pretrain-max 0: %s", err);
    at_free(err);
    /* by default a store with records (72 of 3 tasks) trains on them though it has a saved
    ** model: the run's retrains then keep learning from the other tasks' records */
    assert_int_equal(RUN("cold2b", 600, "--trials", "8", "--population", "64", "--db",
                         "cold.db", "dense:M=8,N=32,K=32"),
                     0);
    err = slurp("cold2b.err");
    if (strstr(err, "cost model: trained at the start on 72 records of 3 tasks in") == NULL)
        fail_msg("not trained on the store's records: %s", err);
    if (strstr(err, "starting from the model saved") != NULL)
        fail_msg("started from the saved model: %s", err);
    at_free(err);
    /* a model that starts trained halves the default rounds (32 trials of one task: rounds
    ** of 16), and says so; --per-round given is kept as it is */
    assert_int_equal(RUN("cold2c", 600, "--trials", "32", "--population", "64", "--db",
                         "cold.db", "dense:M=8,N=16,K=32"),
                     0);
    err = slurp("cold2c.err");
    if (strstr(err, "rounds of 16 programs (half of trials / tasks: the cost model starts "
                    "trained") == NULL ||
        strstr(err, "trials 16/32") == NULL || strstr(err, "trials 32/32") == NULL)
        fail_msg("want rounds of 16 from a trained start: %s", err);
    at_free(err);
    assert_int_equal(RUN("cold2d", 600, "--trials", "32", "--per-round", "32", "--population",
                         "64", "--db", "cold.db", "dense:M=8,N=24,K=32"),
                     0);
    err = slurp("cold2d.err");
    if (strstr(err, "rounds of") != NULL || strstr(err, "trials 32/32") == NULL)
        fail_msg("--per-round 32 was not kept: %s", err);
    at_free(err);
    /* an empty store and a model: 16 random programs first, then the model's picks */
    assert_int_equal(RUN("cold3", 600, "--trials", "40", "--population", "64", "--db",
                         "cold3.db", "matmul:M=64,N=64,K=32"),
                     0);
    err = slurp("cold3.err");
    if (strstr(err, "trials 16/40") == NULL || strstr(err, "trials 40/40") == NULL)
        fail_msg("want a first round of 16, then the rest: %s", err);
    if (strstr(err, "cost model:") != NULL)
        fail_msg("an empty store has no model to start from: %s", err);
    if (strstr(err, "no cost model to start from") == NULL ||
        strstr(err, "tuner dataset --corpus") == NULL)
        fail_msg("an empty store's run does not point at the corpus: %s", err);
    at_free(err);
}

/* SIGINT (and SIGTERM) end a run within 1 s with exit 130 and keep every trial the report
** counts (issue 14, item 5): once at least 8 trials are stored, interrupt; the tuner's
** report and the store agree.  It takes 0.3 s here: a quarter of a second for results in
** flight, then the embedded agent's held poll is cut short (it took up to 1 s more before
** agt_wake, and failed the 2 s of the old limit now and then).  The sanitizer build's exit,
** with its leak check, takes longer: 2.5 s there. */
#ifdef __SANITIZE_ADDRESS__
#define STOP_S 2.5
#else
#define STOP_S 1.0
#endif
static void test_interrupt(void **unused)
{
    static const int sigs[2] = {SIGINT, SIGTERM};
    (void)unused;
    for (int k = 0; k < 2; k++) {
        char db[32], path[PATH_MAX + 40], name[16];
        const char *args[] = {"--trials", "2000", "--per-round", "8", "--db", db, "--seed", "3",
                              "matmul:M=64,N=64,K=64", NULL};
        pid_t pid;
        rec *v;
        int n = 0, rc;
        double t0;
        snprintf(db, sizeof db, "int%d.db", k);
        snprintf(name, sizeof name, "int%d", k);
        snprintf(path, sizeof path, "%s/%s", dir, db);
        pid = start(name, args);
        for (int i = 0; i < 6000 && n < 8; i++) {
            struct stat sb;
            usleep(100000);
            if (stat(path, &sb) == 0 && sb.st_size > 0) {
                n = load_store(db, &v, 1);
                free_recs(v, n > 0 ? n : 0);
            }
            if (waitpid(pid, NULL, WNOHANG) == pid)
                fail_msg("the tuner ended before it could be interrupted");
        }
        assert_true(n >= 8);
        t0 = at_time_mono_s();
        kill(pid, sigs[k]);
        rc = finish(pid, 30);
        if (at_time_mono_s() - t0 > STOP_S)
            fail_msg("signal %d: the tuner took %.2f s to stop", sigs[k], at_time_mono_s() - t0);
        if (rc != 130) {
            /* say why: the tuner's own words (once seen in CI, rc 1, and not reproduced) */
            char file[32], *err;
            snprintf(file, sizeof file, "%s.err", name);
            err = slurp(file);
            print_message("the tuner's stderr (its end):\n%s\n",
                          strlen(err) > 3000 ? err + strlen(err) - 3000 : err);
            at_free(err);
            fail_msg("signal %d: exit %d, want 130 (its stderr is above)", sigs[k], rc);
        }
        n = load(db, &v);
        {
            char file[32], *err, want[64];
            snprintf(file, sizeof file, "%s.out", name); /* the report */
            err = slurp(file);
            snprintf(want, sizeof want, "%d trials in ", n);
            if (strstr(err, want) == NULL)
                fail_msg("the report does not count the %d stored trials: %s", n, err);
            at_free(err);
        }
        free_recs(v, n);
    }
}

static void test_kill_and_resume(void **unused)
{
    const char *const args[] = {"--trials", "64", "--per-round", "8", "--population", "64",
                                "--db", "resume.db", "--seed", "9", "matmul:M=96,N=64,K=32",
                                NULL};
    const char *const args_resume[] = {"--trials", "64", "--per-round", "8", "--population",
                                       "64", "--db", "resume.db", "--seed", "9", "--resume",
                                       "matmul:M=96,N=64,K=32", NULL};
    pid_t pid;
    rec *a, *b;
    int na = 0, nb;
    char path[PATH_MAX];
    (void)unused;
    snprintf(path, sizeof path, "%s/resume.db", dir);
    pid = start("kill", args);
    /* wait until some trials are recorded, then kill the whole process group */
    for (int i = 0; i < 6000 && na < 16; i++) {
        struct stat sb;
        usleep(100000);
        if (stat(path, &sb) == 0 && sb.st_size > 0) {
            na = load_store("resume.db", &a, 1); /* the store may be half made */
            free_recs(a, na > 0 ? na : 0);
        }
        if (waitpid(pid, NULL, WNOHANG) == pid)
            fail_msg("the tuner ended before it could be killed");
    }
    assert_true(na >= 16);
    kill(-pid, SIGKILL);
    waitpid(pid, NULL, 0);
    na = load("resume.db", &a);
    assert_true(na >= 16 && na < 64);
    assert_int_equal(run("resume", 900, args_resume), 0);
    /* the killed run is 'interrupted' now, not 'running' forever (issue 14, item 9) */
    {
        sqlite3 *db;
        sqlite3_stmt *s;
        assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
        assert_int_equal(sqlite3_prepare_v2(db, "SELECT group_concat(status, ' ') FROM"
                                                " (SELECT status FROM runs ORDER BY id)",
                                            -1, &s, NULL),
                         SQLITE_OK);
        assert_int_equal(sqlite3_step(s), SQLITE_ROW);
        assert_string_equal((const char *)sqlite3_column_text(s, 0), "interrupted done");
        sqlite3_finalize(s);
        sqlite3_close(db);
    }
    nb = load("resume.db", &b);
    /* exactly the budget, nothing measured twice */
    assert_int_equal(nb, 64);
    assert_distinct(b, nb);
    /* the records of the killed run are all still there */
    for (int i = 0; i < na; i++) {
        int found = 0;
        for (int k = 0; k < nb && !found; k++)
            found = strcmp(a[i].state, b[k].state) == 0;
        assert_true(found);
    }
    free_recs(a, na);
    free_recs(b, nb);
}

static void test_same_seed_same_first_round(void **unused)
{
    rec *a, *b;
    int na, nb;
    (void)unused;
    assert_int_equal(RUN("seed1", 600, "--trials", "12", "--per-round", "12", "--population",
                         "64", "--db", "seed1.db", "--seed", "42", "matmul:M=64,N=64,K=64"),
                     0);
    assert_int_equal(RUN("seed2", 600, "--trials", "12", "--per-round", "12", "--population",
                         "64", "--db", "seed2.db", "--seed", "42", "matmul:M=64,N=64,K=64"),
                     0);
    na = load("seed1.db", &a);
    nb = load("seed2.db", &b);
    assert_int_equal(na, 12);
    assert_int_equal(nb, 12);
    for (int i = 0; i < na; i++) {
        int found = 0;
        for (int k = 0; k < nb && !found; k++)
            found = strcmp(a[i].state, b[k].state) == 0;
        if (!found)
            fail_msg("the second run did not pick %s", a[i].state);
    }
    free_recs(a, na);
    free_recs(b, nb);
}

static int setup(void **unused)
{
    (void)unused;
    if (td_program("tuner", bin, sizeof bin) != 0)
        return -1;
    return td_mkdtemp("at_tune_", dir, sizeof dir);
}

static int teardown(void **unused)
{
    (void)unused;
    return td_rmtree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_command_lines),
        cmocka_unit_test(test_same_seed_same_first_round),
        cmocka_unit_test(test_interrupt),
        cmocka_unit_test(test_kill_and_resume),
        cmocka_unit_test(test_short_run_improves_and_records_everything),
        cmocka_unit_test(test_code_size_limit),
        cmocka_unit_test(test_overlap_builds),
        cmocka_unit_test(test_small_budget_reaches_every_task),
        cmocka_unit_test(test_warmup_by_share_and_seeds),
        cmocka_unit_test(test_cold_start_and_pretrained_start),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
