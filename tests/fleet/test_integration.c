/* tests/fleet/test_integration.c -- the whole fleet as real processes on 127.0.0.1: one
** tracker, three x86 agents, one aarch64 agent under qemu-aarch64, and two tuners (the
** fleet_client tool) measuring 500 distinct random schedules of small library operators at
** once: tuner A 250 on key x86; tuner B 200 on x86 and 50 on arm (built for
** aarch64-linux-gnu, cortex-a76).  Mid-batch the test SIGKILLs one x86 agent, then the
** tracker, and restarts the tracker on the same port.  Afterwards each tuner's records store
** holds exactly one row per job (UNIQUE job ids, and the count equals the jobs submitted),
** each measured (checked against the naive reference by the agent) or with a clear error
** code; none is lost.  AT_TEST_LONG=1 runs a larger batch with more kills.
**
** The deadlines are generous (minutes): they catch a hang, they do not measure speed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fleet_test.h"
#include "records/records.h"

typedef struct scale {
    int n_a, n_b_x86, n_b_arm;
    int agent_kills, tracker_kills;
    double deadline_s;
} scale;

static const char *key_path;
static char start_file[PATH_MAX];
static int port;
static pid_t tracker_pid;
static char tracker_out[PATH_MAX], tracker_err[PATH_MAX];
static const char *const tracker_flags[] = {
    "--lease-ms", "3000", "--heartbeat-ms", "300", "--hold-ms", "500", "--log-level", "info", NULL};

static pid_t start_agent(const char *name, const char *device_key, int aarch64)
{
    char bin[PATH_MAX], url[64], log[PATH_MAX];
    char *argv[24];
    int n = 0;
    snprintf(url, sizeof url, "127.0.0.1:%d", port);
    snprintf(log, sizeof log, "%s/%s.log", ft_tmpdir(), name);
    if (aarch64) {
        argv[n++] = (char *)"/usr/bin/qemu-aarch64";
        argv[n++] = (char *)"-L";
        argv[n++] = (char *)"/usr/aarch64-linux-gnu";
        snprintf(bin, sizeof bin, "%s/../aarch64/bin/rpc_agent", ft_build_dir());
    } else {
        ft_path("bin/rpc_agent", bin, sizeof bin);
    }
    argv[n++] = bin;
    argv[n++] = (char *)"--tracker";
    argv[n++] = url;
    argv[n++] = (char *)"--key";
    argv[n++] = (char *)device_key;
    argv[n++] = (char *)"--fleet-key";
    argv[n++] = (char *)key_path;
    argv[n++] = (char *)"--name";
    argv[n++] = (char *)name;
    argv[n++] = (char *)"--threads";
    argv[n++] = (char *)"1";
    argv[n++] = (char *)"--batch";
    argv[n++] = (char *)"8";
    argv[n++] = (char *)"--reconnect-max-ms";
    argv[n++] = (char *)"500";
    argv[n] = NULL;
    return ft_spawn(argv, log, log);
}

static pid_t start_client(const char *name, const char *db, int n_x86, int n_arm, uint64_t seed)
{
    char bin[PATH_MAX], url[64], log[PATH_MAX], out[PATH_MAX], n1[16], n2[16], s[24];
    char *argv[40];
    int n = 0;
    snprintf(url, sizeof url, "127.0.0.1:%d", port);
    snprintf(log, sizeof log, "%s/%s.log", ft_tmpdir(), name);
    snprintf(out, sizeof out, "%s/%s.out", ft_tmpdir(), name);
    snprintf(n1, sizeof n1, "%d", n_x86);
    snprintf(n2, sizeof n2, "%d", n_arm);
    snprintf(s, sizeof s, "%llu", (unsigned long long)seed);
    argv[n++] = (char *)ft_path("tests/tools/fleet_client", bin, sizeof bin);
    argv[n++] = (char *)"--tracker";
    argv[n++] = url;
    argv[n++] = (char *)"--fleet-key";
    argv[n++] = (char *)key_path;
    argv[n++] = (char *)"--db";
    argv[n++] = (char *)db;
    argv[n++] = (char *)"--name";
    argv[n++] = (char *)name;
    argv[n++] = (char *)"--seed";
    argv[n++] = s;
    argv[n++] = (char *)"--repeat";
    argv[n++] = (char *)"2";
    argv[n++] = (char *)"--start-file";
    argv[n++] = start_file;
    argv[n++] = (char *)"--min-repeat-ms";
    argv[n++] = (char *)"15"; /* a measuring phase long enough to kill things in */
    argv[n++] = (char *)"--timeout-ms";
    argv[n++] = (char *)"5000";
    argv[n++] = (char *)"--log-level";
    argv[n++] = (char *)"info";
    argv[n++] = (char *)"--key";
    argv[n++] = (char *)"x86";
    argv[n++] = (char *)"--ops";
    argv[n++] = (char *)"matmul:M=8,N=8,K=8;relu:shape=256;add:shape=64;softmax:M=4,N=16";
    argv[n++] = (char *)"--n";
    argv[n++] = n1;
    if (n_arm > 0) {
        argv[n++] = (char *)"--also-key";
        argv[n++] = (char *)"arm";
        argv[n++] = (char *)"--also-target";
        argv[n++] = (char *)"llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76";
        argv[n++] = (char *)"--also-ops";
        argv[n++] = (char *)"matmul:M=8,N=8,K=8;relu:shape=128";
        argv[n++] = (char *)"--also-n";
        argv[n++] = n2;
    }
    argv[n] = NULL;
    unlink(out);
    return ft_spawn(argv, out, log);
}

static int64_t rows_of(const char *db)
{
    rec_store *st;
    char err[256];
    int64_t n = -1;
    if (access(db, R_OK) != 0 ||
        rec_store_open(db, REC_OPEN_READONLY, &st, err, sizeof err) != AT_OK)
        return 0;
    if (rec_store_count(st, &n, NULL, NULL, NULL) != AT_OK) n = -1;
    rec_store_close(st);
    return n;
}

/* Every row: one per job id; tallies statuses and architectures. */
static void check_store(const char *db, int n_expected, int n_arm_expected)
{
    rec_store *st;
    rec_iter *it;
    const rec_record *r;
    char err[256];
    int n = 0, ok = 0, lost = 0, other = 0, arm = 0;
    assert_int_equal(rec_store_open(db, REC_OPEN_READONLY, &st, err, sizeof err), AT_OK);
    assert_int_equal(rec_iter_open(st, NULL, REC_ORDER_ID, &it), AT_OK);
    while (rec_iter_next(it, &r) == AT_OK && r != NULL) {
        n++;
        if (r->status == AT_MEASURE_NO_ERROR)
            ok++;
        else if (r->status == AT_MEASURE_DEVICE_LOST)
            lost++;
        else {
            other++;
            fprintf(stderr, "%s: job %s: %s: %s\n", db, r->job_id, at_measure_name(r->status),
                    r->error_text);
        }
        if (strcmp(r->device_key, "arm") == 0) {
            arm++;
            if (r->status == AT_MEASURE_NO_ERROR) assert_string_equal(r->device.arch, "aarch64");
        } else if (r->status == AT_MEASURE_NO_ERROR) {
            assert_string_equal(r->device.arch, "x86_64");
        }
    }
    rec_iter_close(it);
    rec_store_close(st);
    fprintf(stderr, "%s: %d rows: %d measured, %d device lost, %d other; %d on arm\n", db, n, ok,
            lost, other, arm);
    assert_int_equal(n, n_expected); /* exactly one row per job: job ids are UNIQUE */
    assert_true(arm >= n_arm_expected * 9 / 10 && arm <= n_arm_expected);
    assert_int_equal(other, 0); /* valid schedules: no crash, no wrong answer */
    assert_true(ok >= n_expected - 5);
}

/* The number of jobs a tuner submitted, from its summary line. */
static int submitted(const char *out)
{
    char *text = ft_read(out), *p;
    int n = -1;
    if (text && (p = strstr(text, "client done submitted=")) != NULL)
        n = atoi(p + strlen("client done submitted="));
    at_free(text);
    return n;
}

static void run_scale(const scale *sc)
{
    char db_a[PATH_MAX], db_b[PATH_MAX], out_a[PATH_MAX], out_b[PATH_MAX];
    pid_t agents[3], arm, ca, cb;
    int st_a = -1, st_b = -1, kills_agent = 0, kills_tracker = 0;
    double start = ft_now(), end = start + sc->deadline_s;
    char *text;

    snprintf(db_a, sizeof db_a, "%s/tuner-a.db", ft_tmpdir());
    snprintf(db_b, sizeof db_b, "%s/tuner-b.db", ft_tmpdir());
    snprintf(out_a, sizeof out_a, "%s/tuner-a.out", ft_tmpdir());
    snprintf(out_b, sizeof out_b, "%s/tuner-b.out", ft_tmpdir());
    unlink(db_a);
    unlink(db_b);
    snprintf(start_file, sizeof start_file, "%s/go", ft_tmpdir());
    unlink(start_file);
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "x86-agent-%d", i);
        agents[i] = start_agent(name, "x86", 0);
    }
    arm = start_agent("arm-agent", "arm", 1);
    ca = start_client("tuner-a", db_a, sc->n_a, 0, 1);
    cb = start_client("tuner-b", db_b, sc->n_b_x86, sc->n_b_arm, 2);

    /* both tuners build their candidates first (LLVM), then submit */
    while (ft_now() < end && !(ft_wait_for_text(out_a, "client built", 0.1) &&
                               ft_wait_for_text(out_b, "client built", 0.1)))
        ft_sleep_ms(200);
    {
        FILE *go = fopen(start_file, "w"); /* both submit now, at the same time */
        if (go) fclose(go);
    }
    fprintf(stderr, "[%.1f s] both tuners built their candidates and submit them\n",
            ft_now() - start);
    while (ft_now() < end && (st_a < 0 || st_b < 0)) {
        int64_t done = rows_of(db_a) + rows_of(db_b);
        int total = sc->n_a + sc->n_b_x86 + sc->n_b_arm;
        if (st_a < 0) st_a = ft_wait(ca, 0);
        if (st_b < 0) st_b = ft_wait(cb, 0);
        if (ft_wait(tracker_pid, 0) >= 0) {
            fprintf(stderr, "the tracker died on its own: see %s\n", tracker_err);
            break;
        }
        /* an agent dies with jobs in flight (SIGKILL: no goodbye) */
        if (kills_agent < sc->agent_kills &&
            done >= total * (kills_agent + 1) / (4 * sc->agent_kills + 4)) {
            int k = kills_agent % 3;
            fprintf(stderr, "[%.1f s] killing x86 agent %d at %lld rows\n", ft_now() - start, k,
                    (long long)done);
            ft_kill(agents[k]);
            if (kills_agent + 1 < sc->agent_kills) { /* in the long run it comes back */
                char name[32];
                snprintf(name, sizeof name, "x86-agent-%d-again", k);
                agents[k] = start_agent(name, "x86", 0);
            } else {
                agents[k] = -1;
            }
            kills_agent++;
        }
        /* the tracker dies mid-batch and comes back on the same port */
        if (kills_tracker < sc->tracker_kills &&
            done >= total * (kills_tracker + 1) * 2 / (4 * sc->tracker_kills + 4) + total / 10 &&
            kills_agent >= 1) {
            int p = port;
            fprintf(stderr, "[%.1f s] killing the tracker at %lld rows\n", ft_now() - start,
                    (long long)done);
            ft_kill(tracker_pid);
            ft_sleep_ms(1000);
            tracker_pid =
                ft_start_tracker(key_path, p, tracker_out, tracker_err, tracker_flags, &port);
            assert_int_equal(port, p);
            fprintf(stderr, "[%.1f s] tracker restarted\n", ft_now() - start);
            kills_tracker++;
        }
        ft_sleep_ms(200);
    }
    fprintf(stderr, "[%.1f s] tuners finished (status %d, %d)\n", ft_now() - start, st_a, st_b);
    if ((text = ft_read(out_a)) != NULL) {
        char *d = strstr(text, "client done");
        fprintf(stderr, "tuner A: %s", d ? d : "(no summary)\n");
        at_free(text);
    }
    if ((text = ft_read(out_b)) != NULL) {
        char *d = strstr(text, "client done");
        fprintf(stderr, "tuner B: %s", d ? d : "(no summary)\n");
        at_free(text);
    }
    if (st_a < 0) ft_kill(ca);
    if (st_b < 0) ft_kill(cb);
    assert_true(st_a >= 0 && WIFEXITED(st_a) && WEXITSTATUS(st_a) == 0);
    assert_true(st_b >= 0 && WIFEXITED(st_b) && WEXITSTATUS(st_b) == 0);
    assert_int_equal(kills_agent, sc->agent_kills);
    assert_int_equal(kills_tracker, sc->tracker_kills);
    /* a tuner builds fewer candidates when an operator has fewer distinct schedules */
    {
        int sub_a = submitted(out_a), sub_b = submitted(out_b);
        assert_true(sub_a >= sc->n_a * 9 / 10 && sub_a <= sc->n_a);
        assert_true(sub_b >= (sc->n_b_x86 + sc->n_b_arm) * 9 / 10);
        check_store(db_a, sub_a, 0);
        check_store(db_b, sub_b, sc->n_b_arm);
    }
    /* the surviving agents are still there and came back to the new tracker */
    for (int i = 0; i < 3; i++)
        if (agents[i] > 0) {
            assert_int_equal(ft_wait(agents[i], 0), -1);
            kill(agents[i], SIGTERM);
        }
    assert_int_equal(ft_wait(arm, 0), -1);
    kill(arm, SIGTERM);
    for (int i = 0; i < 3; i++)
        if (agents[i] > 0 && ft_wait(agents[i], 30) < 0) ft_kill(agents[i]);
    if (ft_wait(arm, 30) < 0) ft_kill(arm);
}

static void test_fleet_survives_agent_and_tracker_kills(void **unused)
{
    static const scale normal = {250, 200, 50, 1, 1, 300};
    static const scale lng = {1200, 1000, 150, 3, 2, 1800};
    (void)unused;
    run_scale(getenv("AT_TEST_LONG") ? &lng : &normal);
}

static int setup(void **state)
{
    char a64[PATH_MAX];
    (void)state;
    snprintf(a64, sizeof a64, "%s/../aarch64/bin/rpc_agent", ft_build_dir());
    if (access(a64, R_OK) != 0 || access("/usr/bin/qemu-aarch64", X_OK) != 0) {
        fprintf(stderr, "missing %s or qemu-aarch64 (make agent-aarch64, make deps)\n", a64);
        return -1;
    }
    key_path = ft_keyfile("fleet.key", NULL);
    snprintf(tracker_out, sizeof tracker_out, "%s/tracker.out", ft_tmpdir());
    snprintf(tracker_err, sizeof tracker_err, "%s/tracker.err", ft_tmpdir());
    tracker_pid = ft_start_tracker(key_path, 0, tracker_out, tracker_err, tracker_flags, &port);
    return port > 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    ft_stop(tracker_pid, 10);
    if (getenv("AT_KEEP_TMP") == NULL) ft_rmtmp();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fleet_survives_agent_and_tracker_kills),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, setup, teardown);
}
