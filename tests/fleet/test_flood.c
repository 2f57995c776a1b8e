/* tests/fleet/test_flood.c -- a real tracker process under a flood of unauthenticated
** connections on 127.0.0.1 (issue 14, item 7), while a real agent and a tuner-shaped client
** (fleet_client) use it:
**
**   - 100 connections at a time (400 in all) speak SP's TCP framing and declare 60 MiB
**     frames, then stream bytes: each is answered "before authentication" and closed; the
**     tracker's peak RSS (VmHWM) stays under 64 MB, and the client's jobs are all measured
**     by the agent meanwhile.  nng's listener took 60 MiB per such connection;
**   - idle connections beyond --max-unauth close the oldest ones, an authenticated peer
**     (`tracker status`) still gets in, and those that never authenticate are closed after
**     --auth-timeout-ms;
**   - broken messages after a valid handshake (crafted lengths, no request id, truncated
**     and random bodies) are refused and the tracker serves on;
**   - afterwards it stops on SIGTERM with status 0 and no sanitizer report (no leak).
**
** The deadlines are generous: they catch a hang, they do not measure speed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "fleet_test.h"

#define N_AT_ONCE 100
#define N_TOTAL 400 /* at least, and more while the client works */
#define N_MAX 20000
#define MAX_UNAUTH 128 /* above N_AT_ONCE: the flood meets the size limit, not the cap */
#define AUTH_TIMEOUT_MS 3000

static const char *key_path;
static int port;
static pid_t tracker_pid, agent_pid;
static char tracker_out[PATH_MAX], tracker_err[PATH_MAX], agent_log[PATH_MAX];

/* A kB figure of /proc/PID/status ("VmRSS:", "VmHWM:"), or -1. */
static long status_kb(pid_t pid, const char *field)
{
    char path[64], line[256];
    long kb = -1;
    FILE *f;
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    if ((f = fopen(path, "r")) == NULL) return -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, strlen(field)) == 0) kb = atol(line + strlen(field));
    fclose(f);
    return kb;
}

/* A TCP connection to the tracker that has sent req0's SP header (nothing else yet). */
static int sp_connect(int nonblocking)
{
    static const uint8_t sp_req0[8] = {0, 'S', 'P', 0, 0, 0x30, 0, 0};
    struct sockaddr_in sa;
    int s = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(s >= 0);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(s, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(write(s, sp_req0, sizeof sp_req0), (ssize_t)sizeof sp_req0);
    if (nonblocking) fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK);
    return s;
}

/* 1: the peer closed 's' (EOF or reset), 0: still open (non-blocking read). */
static int closed_by_peer(int s)
{
    uint8_t b[4096];
    for (;;) {
        ssize_t r = recv(s, b, sizeof b, MSG_DONTWAIT);
        if (r == 0) return 1;
        if (r < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : 1;
    }
}

static int client_line_counts(const char *out, int *submitted, int *results, int *ok)
{
    char *text = ft_read(out), *p;
    int n = 0;
    if (text && (p = strstr(text, "client done")) != NULL)
        n = sscanf(p, "client done submitted=%d results=%d ok=%d", submitted, results, ok);
    at_free(text);
    return n == 3;
}

typedef struct attacker {
    int fd;
    size_t got;
    uint8_t reply[256];
} attacker;

static void test_flood_of_big_frames_before_authentication(void **unused)
{
    attacker at[N_AT_ONCE];
    char bin[PATH_MAX], url[64], db[PATH_MAX], out[PATH_MAX], log[PATH_MAX];
    uint8_t chunk[65536];
    int opened = 0, closed = 0, answered = 0, st = -1, submitted = 0, results = 0, ok = 0;
    int opened_at_submit = -1;
    long rss0, hwm;
    double end = ft_now() + 120;
    pid_t client;
    char *text;
    (void)unused;

    rss0 = status_kb(tracker_pid, "VmRSS:");
    snprintf(url, sizeof url, "127.0.0.1:%d", port);
    snprintf(db, sizeof db, "%s/flood.db", ft_tmpdir());
    snprintf(out, sizeof out, "%s/client.out", ft_tmpdir());
    snprintf(log, sizeof log, "%s/client.log", ft_tmpdir());
    {
        static const char *const args[] = {"--fleet-key",  NULL,
                                           "--db",         NULL,
                                           "--name",       "flooded-tuner",
                                           "--key",        "x86",
                                           "--repeat",     "2",
                                           "--timeout-ms", "5000",
                                           "--ops",        "relu:shape=256;add:shape=64",
                                           "--n",          "24"};
        char *argv[24];
        int n = 0;
        argv[n++] = (char *)ft_path("tests/tools/fleet_client", bin, sizeof bin);
        argv[n++] = (char *)"--tracker";
        argv[n++] = url;
        for (size_t i = 0; i < sizeof args / sizeof args[0]; i++)
            argv[n++] = (char *)args[i];
        argv[4] = (char *)key_path;
        argv[6] = db;
        argv[n] = NULL;
        client = ft_spawn(argv, out, log);
    }
    memset(chunk, 0x5a, sizeof chunk);
    for (int i = 0; i < N_AT_ONCE; i++)
        at[i].fd = -1;
    /* keep 100 attackers going until the client is done and 400 connections were made */
    while (ft_now() < end && (st < 0 || opened < N_TOTAL)) {
        if (st < 0) st = ft_wait(client, 0);
        if (opened_at_submit < 0 && ft_wait_for_text(out, "client built", 0))
            opened_at_submit = opened; /* its jobs are at the tracker from here on */
        for (int i = 0; i < N_AT_ONCE; i++) {
            attacker *a = &at[i];
            if (a->fd < 0 && opened < N_MAX) {
                uint8_t len[12] = {[8] = 0x80, [11] = 1}; /* the length, a request id */
                uint64_t declared = 60ull << 20;
                for (int k = 0; k < 8; k++)
                    len[k] = (uint8_t)(declared >> (56 - 8 * k));
                a->fd = sp_connect(1);
                a->got = 0;
                assert_int_equal(write(a->fd, len, sizeof len), (ssize_t)sizeof len);
                opened++;
            }
            if (a->fd < 0) continue;
            if (send(a->fd, chunk, sizeof chunk, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 &&
                errno != EAGAIN && errno != EWOULDBLOCK) {
                close(a->fd); /* reset by the tracker */
                a->fd = -1;
                closed++;
                continue;
            }
            for (;;) {
                ssize_t r =
                    recv(a->fd, a->reply + a->got, sizeof a->reply - 1 - a->got, MSG_DONTWAIT);
                if (r > 0) {
                    a->got += (size_t)r;
                    if (a->got == sizeof a->reply - 1) a->got = 0;
                    a->reply[a->got] = 0;
                    if (memmem(a->reply, sizeof a->reply, "before authentication", 21)) {
                        answered++;
                        memset(a->reply, 0, sizeof a->reply);
                        a->got = 0;
                    }
                    continue;
                }
                if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
                    close(a->fd);
                    a->fd = -1;
                    closed++;
                }
                break;
            }
        }
        ft_sleep_ms(5);
    }
    /* the last ones: the tracker closes each within its 1 s linger */
    for (double stop = ft_now() + 5; ft_now() < stop && closed < opened; ft_sleep_ms(20))
        for (int i = 0; i < N_AT_ONCE; i++)
            if (at[i].fd >= 0 && closed_by_peer(at[i].fd)) {
                close(at[i].fd);
                at[i].fd = -1;
                closed++;
            }
    hwm = status_kb(tracker_pid, "VmHWM:");
    for (int i = 0; i < N_AT_ONCE; i++)
        if (at[i].fd >= 0) close(at[i].fd);
    if (st < 0) {
        ft_kill(client);
        fail_msg("the client did not finish under the flood: see %s", log);
    }
    fprintf(stderr,
            "flood: %d connections (%d while the jobs were measured), %d closed by the "
            "tracker, %d answered; tracker RSS %ld kB before, peak %ld kB\n",
            opened, opened - opened_at_submit, closed, answered, rss0, hwm);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_true(client_line_counts(out, &submitted, &results, &ok));
    assert_true(submitted >= 20);
    assert_int_equal(results, submitted);
    assert_int_equal(ok, submitted);
    assert_true(opened >= N_TOTAL);
    assert_true(opened_at_submit >= 0 && opened - opened_at_submit >= N_AT_ONCE);
    assert_int_equal(closed, opened); /* each one the tracker's doing */
    assert_true(answered >= opened / 10);      /* others were reset before they read it */
    assert_true(hwm > 0 && hwm < 64 * 1024);
    assert_int_equal(ft_wait(tracker_pid, 0), -1);
    assert_int_equal(ft_wait(agent_pid, 0), -1);
    assert_true(ft_wait_for_text(tracker_err, "frame(s) over the size limit", 5));
    text = ft_read(agent_log);
    assert_non_null(text);
    assert_null(strstr(text, "lost the tracker")); /* the agent's session was never dropped */
    at_free(text);
}

static void test_idle_unauthenticated_connections_are_capped(void **unused)
{
    enum { N = MAX_UNAUTH + 32 };
    int s[N], n_closed = 0, rc;
    char bin[PATH_MAX], url[64], cmd[3 * PATH_MAX];
    double end;
    (void)unused;
    ft_sleep_ms(1500); /* the previous test's refused connections are gone */
    for (int i = 0; i < N; i++)
        s[i] = sp_connect(0);
    ft_sleep_ms(300);
    /* the oldest went to make room for the newer ones */
    for (int i = 0; i < N - MAX_UNAUTH; i++)
        n_closed += closed_by_peer(s[i]);
    assert_int_equal(n_closed, N - MAX_UNAUTH);
    for (int i = N - MAX_UNAUTH / 2; i < N; i++)
        assert_int_equal(closed_by_peer(s[i]), 0);
    /* an authenticated peer still gets in */
    snprintf(url, sizeof url, "127.0.0.1:%d", port);
    snprintf(cmd, sizeof cmd, "'%s' status --tracker %s --fleet-key '%s' > '%s/status.out' 2>&1",
             ft_path("bin/tracker", bin, sizeof bin), url, key_path, ft_tmpdir());
    rc = system(cmd);
    assert_int_equal(rc, 0);
    {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/status.out", ft_tmpdir());
        assert_true(ft_wait_for_text(p, "flood-agent", 1));
    }
    /* the others never authenticate: closed after --auth-timeout-ms */
    end = ft_now() + AUTH_TIMEOUT_MS / 1000.0 + 5;
    for (;;) {
        int open = 0;
        for (int i = N - MAX_UNAUTH; i < N; i++)
            open += !closed_by_peer(s[i]);
        if (open == 0 || ft_now() > end) {
            assert_int_equal(open, 0);
            break;
        }
        ft_sleep_ms(100);
    }
    for (int i = 0; i < N; i++)
        close(s[i]);
    assert_true(ft_wait_for_text(tracker_err, "to make room for new ones", 5));
    assert_true(ft_wait_for_text(tracker_err, "did not authenticate in time", 5));
    assert_int_equal(ft_wait(tracker_pid, 0), -1);
}

/* Well-formed SP handshakes followed by broken messages: lengths 0, 3, a backtrace without
** a request id, just over the limit, 2^63, truncated frames and random bytes.  Each
** connection is closed or refused, and the tracker serves on. */
static void test_broken_messages_after_the_handshake(void **unused)
{
    static const uint64_t lengths[] = {
        0, 3, 4, 8, AT_WIRE_MAX_PREAUTH + 4, AT_WIRE_MAX_PREAUTH + 5, 1ull << 63, ~0ull};
    char bin[PATH_MAX], cmd[3 * PATH_MAX];
    at_rng rng;
    int s;
    (void)unused;
    at_rng_seed(&rng, 14);
    for (int i = 0; i < 48; i++) {
        uint8_t b[512];
        size_t n = 0;
        if (i < (int)AT_ARRAY_LEN(lengths)) { /* a crafted length, a word without the high bit */
            for (int k = 0; k < 8; k++)
                b[n++] = (uint8_t)(lengths[i] >> (56 - 8 * k));
            b[n++] = 0x12;
            b[n++] = 0x34;
            b[n++] = 0;
            b[n++] = 0;
        } else { /* a plausible length, then a truncated or random body */
            uint64_t len = at_rng_u64(&rng) % 6000;
            for (int k = 0; k < 8; k++)
                b[n++] = (uint8_t)(len >> (56 - 8 * k));
            while (n < 8 + (size_t)(at_rng_u64(&rng) % 400))
                b[n++] = (uint8_t)at_rng_u64(&rng);
        }
        s = sp_connect(0);
        assert_int_equal(write(s, b, n), (ssize_t)n);
        ft_sleep_ms(5);
        close(s);
    }
    /* the old spelling of --fleet-key still works (with a warning) */
    snprintf(cmd, sizeof cmd, "'%s' status --tracker 127.0.0.1:%d --key '%s' > /dev/null 2>&1",
             ft_path("bin/tracker", bin, sizeof bin), port, key_path);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(ft_wait(tracker_pid, 0), -1);
    assert_true(ft_wait_for_text(tracker_err, "do not speak the SP protocol", 5));
}

/* After all that, SIGTERM stops the tracker with status 0: no leak (LeakSanitizer in the
** test build exits non-zero otherwise), no sanitizer report. */
static void test_tracker_stops_cleanly(void **unused)
{
    int st;
    char *text;
    (void)unused;
    kill(tracker_pid, SIGTERM);
    st = ft_wait(tracker_pid, 20);
    tracker_pid = -1;
    assert_true(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    text = ft_read(tracker_err);
    assert_non_null(text);
    assert_null(strstr(text, "Sanitizer"));
    assert_null(strstr(text, "runtime error"));
    at_free(text);
}

static int setup(void **state)
{
    static const char *const flags[] = {
        "--max-unauth", "128", "--auth-timeout-ms", "3000", "--log-level", "info", NULL};
    static const char *const agent_flags[] = {"--name", "flood-agent", "--threads", "1", NULL};
    (void)state;
    key_path = ft_keyfile("fleet.key", NULL);
    snprintf(tracker_out, sizeof tracker_out, "%s/tracker.out", ft_tmpdir());
    snprintf(tracker_err, sizeof tracker_err, "%s/tracker.err", ft_tmpdir());
    snprintf(agent_log, sizeof agent_log, "%s/agent.log", ft_tmpdir());
    tracker_pid = ft_start_tracker(key_path, 0, tracker_out, tracker_err, flags, &port);
    if (port <= 0) return -1;
    agent_pid = ft_start_agent(port, "x86", key_path, agent_log, 500, agent_flags);
    return ft_wait_for_text(tracker_err, "'flood-agent' authenticated", 60) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    ft_stop(agent_pid, 10);
    ft_stop(tracker_pid, 10);
    if (getenv("AT_KEEP_TMP") == NULL) ft_rmtmp();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flood_of_big_frames_before_authentication),
        cmocka_unit_test(test_idle_unauthenticated_connections_are_capped),
        cmocka_unit_test(test_broken_messages_after_the_handshake),
        cmocka_unit_test(test_tracker_stops_cleanly),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, setup, teardown);
}
