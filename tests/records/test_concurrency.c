/* tests/records/test_concurrency.c -- real processes on one store file: concurrent
** writers (and a reader) lose nothing and see no error; a writer killed with SIGKILL in
** the middle of a batch leaves a store that opens, passes 'tuner db check' and holds
** every committed record and nothing of the batch in flight. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <time.h>

#include "rec_test.h"

#define N_WRITERS 4
#define N_PER_WRITER 5000
#define N_TASKS 10

static char dir[64];

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

/* Exit statuses of the children: 0 fine, 10 + at_err for a failure. */
static void child_fail(const char *what, rec_store *st, at_err err)
{
    fprintf(stderr, "child %d: %s: %s: %s\n", (int)getpid(), what, at_errname(err),
            st ? rec_store_errmsg(st) : "");
    _exit(10 + (int)err);
}

static void writer(const char *path, int w)
{
    static rec_result rows[64];
    static char jobs[64][32], states[64][96];
    rec_store *st;
    char err[512];
    int64_t tasks[N_TASKS], run;
    at_err e;
    double cost[2];
    int i = 0;

    if ((e = rec_store_open(path, REC_OPEN_CREATE, &st, err, sizeof err)) != AT_OK) {
        fprintf(stderr, "writer %d: %s\n", w, err);
        _exit(10 + (int)e);
    }
    for (int t = 0; t < N_TASKS; t++)
        tasks[t] = rt_task(st, t, "llvm -mtriple=x86_64-linux-gnu", "box");
    if ((e = rec_run_begin(st, "tuner (concurrency test)", "test", &run, NULL)) != AT_OK)
        child_fail("run_begin", st, e);
    cost[0] = 1e-3 * (w + 1);
    cost[1] = 2e-3;
    while (i < N_PER_WRITER) {
        int n = 1 + (i * 7 + w * 13) % 40;
        if (n > N_PER_WRITER - i)
            n = N_PER_WRITER - i;
        for (int k = 0; k < n; k++, i++) {
            rec_result *r = &rows[k];
            memset(r, 0, sizeof *r);
            snprintf(jobs[k], sizeof jobs[k], "w%d-%d", w, i);
            snprintf(states[k], sizeof states[k], "{\"v\":1,\"steps\":[],\"w\":%d,\"i\":%d}", w,
                     i);
            r->task_id = tasks[i % N_TASKS];
            r->job_id = jobs[k];
            r->state = states[k];
            r->costs = cost;
            r->n_costs = 2;
            r->status = i % 97 == 0 ? AT_MEASURE_RUN_TIMEOUT : 0;
            r->device = w % 2 ? &rt_dev_x86 : &rt_dev_x86b;
            r->agent = "a";
            r->run_id = run;
            r->trial = i;
        }
        if ((e = rec_put(st, rows, n, NULL)) != AT_OK)
            child_fail("put", st, e);
    }
    if ((e = rec_run_end(st, run, "done")) != AT_OK)
        child_fail("run_end", st, e);
    rec_store_close(st);
    _exit(0);
}

/* Reads while the writers write, until it has seen every record. */
static void reader(const char *path)
{
    rec_store *st;
    char err[512];
    at_err e;
    double deadline = at_time_mono_s() + 120;
    int64_t n = 0;
    if ((e = rec_store_open(path, REC_OPEN_CREATE, &st, err, sizeof err)) != AT_OK) {
        fprintf(stderr, "reader: %s\n", err);
        _exit(10 + (int)e);
    }
    while (n < N_WRITERS * N_PER_WRITER && at_time_mono_s() < deadline) {
        rec_best_query q;
        rec_best_result *r;
        memset(&q, 0, sizeof q);
        q.device_key = "box";
        q.top = 2;
        if ((e = rec_best(st, &q, &r)) != AT_OK)
            child_fail("best", st, e);
        rec_best_free(r);
        if ((e = rec_store_count(st, &n, NULL, NULL, NULL)) != AT_OK)
            child_fail("count", st, e);
    }
    rec_store_close(st);
    _exit(n == N_WRITERS * N_PER_WRITER ? 0 : 9);
}

static void wait_ok(pid_t pid, const char *who)
{
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "%s: %s %d\n", who, WIFEXITED(status) ? "exit" : "signal",
                WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        fail();
    }
}

static void test_concurrent_writers_lose_nothing(void **unused)
{
    char path[PATH_MAX];
    pid_t pids[N_WRITERS + 1];
    rec_store *st;
    rec_iter *it;
    const rec_record *r;
    rec_check_report rep;
    static unsigned char seen[N_WRITERS][N_PER_WRITER];
    int64_t n_rec, n_tasks, n_runs;
    char err[512];
    (void)unused;
    rt_path(path, dir, "shared.db");
    fflush(NULL);
    /* the writers and the reader all start on a file that does not exist yet */
    for (int w = 0; w <= N_WRITERS; w++) {
        pids[w] = fork();
        assert_true(pids[w] >= 0);
        if (pids[w] == 0) {
            if (w == N_WRITERS)
                reader(path);
            writer(path, w);
        }
    }
    for (int w = 0; w <= N_WRITERS; w++)
        wait_ok(pids[w], w == N_WRITERS ? "reader" : "writer");

    assert_int_equal(rec_store_open(path, REC_OPEN_READONLY, &st, err, sizeof err), AT_OK);
    assert_int_equal(rec_store_count(st, &n_rec, &n_tasks, NULL, &n_runs), AT_OK);
    assert_int_equal(n_rec, N_WRITERS * N_PER_WRITER);
    assert_int_equal(n_tasks, N_TASKS);
    assert_int_equal(n_runs, N_WRITERS);
    memset(seen, 0, sizeof seen);
    assert_int_equal(rec_iter_open(st, NULL, REC_ORDER_ID, &it), AT_OK);
    while (rec_iter_next(it, &r) == AT_OK && r) {
        int w, i;
        assert_int_equal(sscanf(r->job_id, "w%d-%d", &w, &i), 2);
        assert_true(w >= 0 && w < N_WRITERS && i >= 0 && i < N_PER_WRITER);
        assert_int_equal(seen[w][i], 0);
        seen[w][i] = 1;
        assert_int_equal(r->status, i % 97 == 0 ? AT_MEASURE_RUN_TIMEOUT : 0);
        assert_true(r->trial == i);
        assert_non_null(r->run_uuid);
    }
    rec_iter_close(it);
    for (int w = 0; w < N_WRITERS; w++)
        for (int i = 0; i < N_PER_WRITER; i++)
            assert_int_equal(seen[w][i], 1);
    assert_int_equal(rec_store_check(st, NULL, &rep), AT_OK);
    assert_int_equal(rep.n_problems, 0);
    rec_check_fini(&rep);
    rec_store_close(st);
}

/* Check with the command, then count the records whose job starts with 'prefix'. */
static int64_t check_and_count(const char *path, const char *prefix, int64_t *n_all)
{
    rec_store *st;
    rec_iter *it;
    const rec_record *r;
    char err[512], *out = NULL;
    int64_t n = 0;
    int rc = RT_TUNER(NULL, &out, NULL, "db", "check", "--db", path);
    if (rc != 0 || strstr(out, "\nOK\n") == NULL) {
        fprintf(stderr, "tuner db check: %d\n%s\n", rc, out);
        fail();
    }
    at_free(out);
    assert_int_equal(rec_store_open(path, 0, &st, err, sizeof err), AT_OK);
    assert_int_equal(rec_store_count(st, n_all, NULL, NULL, NULL), AT_OK);
    assert_int_equal(rec_iter_open(st, NULL, REC_ORDER_ID, &it), AT_OK);
    while (rec_iter_next(it, &r) == AT_OK && r)
        n += strncmp(r->job_id, prefix, strlen(prefix)) == 0;
    rec_iter_close(it);
    rec_store_close(st);
    return n;
}

static void put_batch(rec_store *st, int64_t task, const char *prefix, int b, int n,
                      size_t state_bytes)
{
    rec_result *rows = at_calloc((size_t)n, sizeof *rows);
    char (*jobs)[48] = at_calloc((size_t)n, sizeof *jobs);
    char *states = at_calloc((size_t)n, state_bytes);
    double cost = 1e-3;
    at_err e;
    assert_non_null(rows);
    assert_non_null(jobs);
    assert_non_null(states);
    for (int k = 0; k < n; k++) {
        char *s = states + (size_t)k * state_bytes;
        int len;
        snprintf(jobs[k], sizeof jobs[k], "%s-%d-%d", prefix, b, k);
        len = snprintf(s, state_bytes, "{\"v\":1,\"steps\":[],\"job\":\"%s\",\"pad\":\"", jobs[k]);
        memset(s + len, 'x', state_bytes - (size_t)len - 3);
        memcpy(s + state_bytes - 3, "\"}", 3);
        rows[k].task_id = task;
        rows[k].job_id = jobs[k];
        rows[k].state = s;
        rows[k].costs = &cost;
        rows[k].n_costs = 1;
        rows[k].device = &rt_dev_x86;
        rows[k].trial = b * n + k;
    }
    if ((e = rec_put(st, rows, n, NULL)) != AT_OK)
        child_fail("put", st, e);
    at_free(rows);
    at_free(jobs);
    at_free(states);
}

/* The writer kills itself in the middle of a big transaction, after SQLite has had to
** spill part of it into the WAL file. */
static void test_sigkill_mid_batch(void **unused)
{
    char path[PATH_MAX], wal[PATH_MAX + 8], err[512];
    int status;
    int64_t n_all;
    pid_t pid;
    (void)unused;
    rt_path(path, dir, "killed.db");
    snprintf(wal, sizeof wal, "%s-wal", path);
    fflush(NULL);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        rec_store *st;
        int64_t task;
        at_err e;
        if ((e = rec_store_open(path, REC_OPEN_CREATE, &st, err, sizeof err)) != AT_OK)
            _exit(10 + (int)e);
        task = rt_task(st, 1, "llvm", "box");
        for (int b = 0; b < 5; b++)
            put_batch(st, task, "done", b, 200, 200);
        if ((e = rec_tx_begin(st)) != AT_OK)
            child_fail("begin", st, e);
        /* 10000 rows of 8 KiB: more than the store's 64 MiB page cache holds */
        put_batch(st, task, "lost", 0, 10000, 8192);
        kill(getpid(), SIGKILL);
        _exit(99);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGKILL);
    {
        struct stat sb;
        assert_int_equal(stat(wal, &sb), 0);
        assert_true(sb.st_size > 16 << 20); /* the batch had spilled into the WAL */
    }
    assert_int_equal(check_and_count(path, "done-", &n_all), 1000);
    assert_int_equal(n_all, 1000);
    (void)err;
}

/* The writer commits batch after batch and says so through a pipe; it is killed at a
** random moment.  Every batch it reported is there, and no batch is there in part. */
static void test_sigkill_at_random_moments(void **unused)
{
    unsigned seed = (unsigned)time(NULL);
    (void)unused;
    fprintf(stderr, "seed %u\n", seed);
    srand(seed);
    for (int round = 0; round < 3; round++) {
        char path[PATH_MAX], name[32], err[512];
        int fds[2], status, last = -1, b;
        int64_t n_done, n_all;
        pid_t pid;
        snprintf(name, sizeof name, "random%d.db", round);
        rt_path(path, dir, name);
        assert_int_equal(pipe(fds), 0);
        fflush(NULL);
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            rec_store *st;
            int64_t task;
            at_err e;
            close(fds[0]);
            if ((e = rec_store_open(path, REC_OPEN_CREATE, &st, err, sizeof err)) != AT_OK)
                _exit(10 + (int)e);
            task = rt_task(st, 1, "llvm", "box");
            for (b = 0;; b++) {
                put_batch(st, task, "r", b, 100, 300);
                if (write(fds[1], &b, sizeof b) != sizeof b)
                    _exit(98);
            }
        }
        close(fds[1]);
        for (int seen = 0; seen < 3;) {
            assert_int_equal(read(fds[0], &b, sizeof b), (ssize_t)sizeof b);
            last = b;
            seen++;
        }
        usleep((useconds_t)(rand() % 20000));
        kill(pid, SIGKILL);
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFSIGNALED(status));
        while (read(fds[0], &b, sizeof b) == (ssize_t)sizeof b)
            last = b;
        close(fds[0]);
        n_done = check_and_count(path, "r-", &n_all);
        /* batches 0..last were reported committed; one more may have committed before it
        ** could say so; none is there in part */
        assert_int_equal(n_done % 100, 0);
        if (n_done != (last + 1) * 100 && n_done != (last + 2) * 100) {
            fprintf(stderr, "round %d: %lld records, last reported batch %d\n", round,
                    (long long)n_done, last);
            fail();
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_writers_lose_nothing),
        cmocka_unit_test(test_sigkill_mid_batch),
        cmocka_unit_test(test_sigkill_at_random_moments),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
