/* tests/fleet/test_agent.c -- the agent as a real process behind a real tracker process:
** kernels that crash, loop forever, write out of bounds (into a guard page and into the
** canary slack), write into an input, make a system call, return a wrong result, do not
** load, or were built for another CPU each end with the right status in the records store,
** and the agent serves the next job after each.  Also: a clean stop on SIGTERM gives the
** jobs back, and another agent finishes them; an idle agent stops at once.
**
** The kernels are C compiled with gcc at test time; one object holds them all (one entry
** symbol each); the reference is the correct one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <sched.h>
#include <stdio.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>

#include "fleet_results.h"
#include "fleet_test.h"
#include "records/records.h"
#include "rpc_agent/agt_int.h"
#include "rpc_agent/rpc_agent.h"
#include "tuner/tuner.h"

/* An idle agent stops at once (0.02 s here; it waited out the tracker's 1 s poll hold
** before its signal thread cut the poll short); the sanitizer build's exit takes longer. */
#ifdef __SANITIZE_ADDRESS__
#define AGENT_STOP_S 3.0
#else
#define AGENT_STOP_S 0.8
#endif

#define N_ELEMS 250 /* 1000 bytes: 24 bytes of canary slack before the guard page */

static const char kernels_src[] =
    "#include <stdint.h>\n"
    "#define N 250\n"
    "static void good(void *const *b) { const float *x = b[0]; float *o = b[1];\n"
    "  for (int i = 0; i < N; i++) o[i] = x[i] * 2.0f + 1.0f; }\n"
    "int32_t k_good(void *const *b, void *ws, const void *par) { (void)ws; (void)par; good(b); "
    "return 0; }\n"
    "int32_t k_wrong(void *const *b, void *ws, const void *par) { const float *x = b[0]; float *o "
    "= b[1];\n"
    "  (void)ws; (void)par; for (int i = 0; i < N; i++) o[i] = x[i] * 3.0f; return 0; }\n"
    "int32_t k_segv(void *const *b, void *ws, const void *par) { (void)b; (void)ws; (void)par;\n"
    "  *(volatile int *)(uintptr_t)16 = 1; return 0; }\n"
    "int32_t k_loop(void *const *b, void *ws, const void *par) { volatile int go = 1; (void)b; "
    "(void)ws;\n"
    "  (void)par; while (go) {} return 0; }\n"
    "int32_t k_oob_guard(void *const *b, void *ws, const void *par) { float *o = b[1]; (void)ws; "
    "(void)par;\n"
    "  good(b); ((volatile float *)o)[256 + 8] = 1.0f; return 0; }\n"
    "int32_t k_oob_canary(void *const *b, void *ws, const void *par) { float *o = b[1]; (void)ws; "
    "(void)par;\n"
    "  good(b); ((volatile float *)o)[N + 1] = 1.0f; return 0; }\n"
    "int32_t k_input(void *const *b, void *ws, const void *par) { (void)ws; (void)par; good(b);\n"
    "  ((volatile float *)b[0])[3] = 42.0f; return 0; }\n"
    "int32_t k_ret(void *const *b, void *ws, const void *par) { (void)ws; (void)par; good(b); "
    "return 7; }\n"
    "int32_t k_spin(void *const *b, void *ws, const void *par) { volatile long s = 0; (void)ws; "
    "(void)par;\n"
    "  for (long i = 0; i < 300000000L; i++) s += i; good(b); return 0; }\n"

    "#if defined(__x86_64__)\n"
    "int32_t k_syscall(void *const *b, void *ws, const void *par) { long r; (void)ws; (void)par;\n"
    "  __asm__ volatile(\"syscall\" : \"=a\"(r) : \"a\"(41L), \"D\"(2L), \"S\"(1L), \"d\"(0L)\n"
    "                   : \"rcx\", \"r11\", \"memory\");\n"
    "  (void)r; good(b); return 0; }\n"
    "int32_t k_slow(void *const *b, void *ws, const void *par) { struct { long s, ns; } t = {0, "
    "600000000L};\n"
    "  long r; (void)ws; (void)par; /* nanosleep, 0.6 s: the same on any machine */\n"
    "  __asm__ volatile(\"syscall\" : \"=a\"(r) : \"a\"(35L), \"D\"(&t), \"S\"(0L) : \"rcx\", "
    "\"r11\", \"memory\");\n"
    "  (void)r; good(b); return 0; }\n"
    "#endif\n";

static uint8_t *obj;
static size_t obj_n;
static at_wire_key fleet_key;
static const char *key_path;
static char tracker_out[PATH_MAX], tracker_err[PATH_MAX];
static pid_t tracker_pid;
static int port;

static at_wire_arg sig[2] = {
    {AT_DT_F32, 0, 1, {N_ELEMS}},
    {AT_DT_F32, 1, 1, {N_ELEMS}},
};

static void art_of(at_wire_artifact *a, const char *entry)
{
    memset(a, 0, sizeof *a);
    a->obj = obj;
    a->obj_size = obj_n;
    a->entry = entry;
    a->triple = "x86_64-pc-linux-gnu";
    a->n_args = 2;
    a->args = sig;
}

static pid_t start_agent(const char *name, const char *extra)
{
    char out[PATH_MAX];
    snprintf(out, sizeof out, "%s/%s.log", ft_tmpdir(), name);
    return ft_start_agent(port, "x86", key_path, out, 300,
                          (const char *const[]){"--name", name, "--threads", "1", extra, NULL});
}

static void test_bad_kernels_each_get_their_code(void **unused)
{
    static const struct {
        const char *id, *entry;
        int status;
        const char *text; /* a piece of the error text */
        int timeout_ms;
    } cases[] = {
        {"good-1", "k_good", AT_MEASURE_NO_ERROR, "", 5000},
        {"segv", "k_segv", AT_MEASURE_RUNTIME_DEVICE, "SIGSEGV", 5000},
        {"good-2", "k_good", AT_MEASURE_NO_ERROR, "", 5000},
        {"loop", "k_loop", AT_MEASURE_RUN_TIMEOUT, "longer than 700 ms", 700},
        {"good-3", "k_good", AT_MEASURE_NO_ERROR, "", 5000},
        {"oob-guard", "k_oob_guard", AT_MEASURE_RUNTIME_DEVICE, "SIGSEGV", 5000},
        {"oob-canary", "k_oob_canary", AT_MEASURE_RUNTIME_DEVICE, "out of bounds", 5000},
        {"wrong", "k_wrong", AT_MEASURE_WRONG_ANSWER, "relative error", 5000},
        {"input", "k_input", AT_MEASURE_RUNTIME_DEVICE, "input", 5000},
        {"ret", "k_ret", AT_MEASURE_RUNTIME_DEVICE, "returned 7", 5000},
        {"nosym", "k_missing", AT_MEASURE_COMPILE_DEVICE, "no symbol", 5000},
        {"badobj", "k_good", AT_MEASURE_COMPILE_DEVICE, "cannot load", 5000},
        {"arm", "k_good", AT_MEASURE_COMPILE_DEVICE, "built for aarch64", 5000},
        {"syscall", "k_syscall", AT_MEASURE_RUNTIME_DEVICE, "SIGSYS", 5000},
        {"good-4", "k_good", AT_MEASURE_NO_ERROR, "", 5000},
        /* 0.6 s a run (it sleeps), 8 repeats and a warm-up asked in a 2 s budget: they cannot
        ** all fit, so no warm-up and the one repeat that fits, and no time-out */
        {"slow", "k_slow", AT_MEASURE_NO_ERROR, "", 2000},
        /* a cutoff of 0.1 s (a tuner sends 10x the task's best): the 0.6 s checked run is the
        ** cost, not repeated, and the result says so; good-4 below its cutoff is timed */
        {"cut", "k_slow", AT_MEASURE_NO_ERROR, "not repeated: the checked run took", 5000},
    };
    enum { N = sizeof cases / sizeof cases[0] };
    tn_fleet *f;
    tn_fleet_job jobs[N];
    char err[512], db[PATH_MAX], url[64];
    uint8_t ref_id[AT_WIRE_REFID_BYTES], garbage[512];
    kn_artifact ref;
    rec_store *st;
    int64_t task;
    pid_t agent;
    ft_got g;
    double end;
    (void)unused;

    agent = start_agent("agent-errors", NULL);
    snprintf(db, sizeof db, "%s/errors.db", ft_tmpdir());
    assert_int_equal(rec_store_open(db, REC_OPEN_CREATE, &st, err, sizeof err), AT_OK);
    assert_int_equal(rec_task_add(st,
                                  &(rec_task){"0123456789abcdef0123456789abcdef",
                                              "llvm -mcpu=native", "x86", "test kernels", 500},
                                  &task),
                     AT_OK);
    snprintf(url, sizeof url, "127.0.0.1:%d", port);
    assert_int_equal(
        tn_fleet_open(
            &(tn_fleet_cfg){
                .tracker = url, .keys = &fleet_key, .n_keys = 1, .device_key = "x86", .store = st},
            &f, err, sizeof err),
        AT_OK);
    memset(&ref, 0, sizeof ref);
    ref.obj = obj;
    ref.obj_size = obj_n;
    snprintf(ref.entry, sizeof ref.entry, "k_good");
    snprintf(ref.triple, sizeof ref.triple, "x86_64-pc-linux-gnu");
    ref.n_args = 2;
    ref.args[0].dtype = AT_DT_F32;
    ref.args[0].n_dims = 1;
    ref.args[0].shape[0] = N_ELEMS;
    ref.args[1] = ref.args[0];
    ref.args[1].is_output = 1;
    assert_int_equal(tn_fleet_add_ref(f, &ref, ref_id), AT_OK);
    for (size_t i = 0; i < sizeof garbage; i++)
        garbage[i] = (uint8_t)(i * 37 + 11);
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < N; i++) {
        art_of(&jobs[i].w.art, cases[i].entry);
        jobs[i].w.id = cases[i].id;
        at_wire_settings_default(&jobs[i].w.run);
        jobs[i].w.run.repeat = 2;
        jobs[i].w.run.timeout_ms = cases[i].timeout_ms;
        jobs[i].w.seed = 7;
        jobs[i].w.has_ref = 1;
        memcpy(jobs[i].w.ref, ref_id, sizeof ref_id);
        jobs[i].task_id = task;
        jobs[i].state = cases[i].id; /* distinct state texts */
        jobs[i].trial = i;
        if (strcmp(cases[i].id, "badobj") == 0) {
            jobs[i].w.art.obj = garbage;
            jobs[i].w.art.obj_size = sizeof garbage;
        }
        if (strcmp(cases[i].id, "arm") == 0) jobs[i].w.art.triple = "aarch64-linux-gnu";
        if (strcmp(cases[i].id, "slow") == 0) jobs[i].w.run.repeat = 8;
        if (strcmp(cases[i].id, "cut") == 0) jobs[i].w.run.cutoff_s = 0.1;
        if (strcmp(cases[i].id, "good-4") == 0) jobs[i].w.run.cutoff_s = 10;
        /* evicting: good-2 every input, good-3 the input of bit 0 (as a model's weights) */
        if (strcmp(cases[i].id, "good-2") == 0) jobs[i].w.run.flush_cache = 1;
        if (strcmp(cases[i].id, "good-3") == 0) {
            jobs[i].w.run.flush_cache = 1;
            jobs[i].w.run.flush_args = 1;
        }
    }
    assert_int_equal(tn_fleet_submit(f, jobs, N), AT_OK);
    memset(&g, 0, sizeof g);
    end = ft_now() + 120; /* generous: it is not a timing */
    while (tn_fleet_pending(f) > 0 && ft_now() < end)
        assert_true(tn_fleet_wait(f, 1000, ft_on_result, &g) == AT_OK);
    assert_int_equal(tn_fleet_pending(f), 0);
    for (int i = 0; i < N; i++) {
        int k = ft_find(&g, cases[i].id);
        assert_true(k >= 0);
        if (g.status[k] != cases[i].status || strstr(g.text[k], cases[i].text) == NULL)
            fail_msg("job %s: status %s (%s), expected %s with '%s'", cases[i].id,
                     at_measure_name(g.status[k]), g.text[k], at_measure_name(cases[i].status),
                     cases[i].text);
        if (strcmp(cases[i].id, "slow") == 0 &&
            !(g.n_costs[k] >= 1 && g.n_costs[k] <= 2 && g.cost[k] >= 0.55 && g.cost[k] < 1.0))
            fail_msg("job slow: %d repeats of %.2f s; expected 1 or 2 of about 0.6 s",
                     g.n_costs[k], g.cost[k]);
        if (strcmp(cases[i].id, "cut") == 0 &&
            !(g.n_costs[k] == 1 && g.cost[k] >= 0.55 && g.cost[k] < 1.0))
            fail_msg("job cut: %d repeats of %.2f s; expected the checked run alone, 0.6 s",
                     g.n_costs[k], g.cost[k]);
        if ((strcmp(cases[i].id, "good-2") == 0 || strcmp(cases[i].id, "good-3") == 0) &&
            g.n_costs[k] != 2)
            fail_msg("job %s (evicting inputs): %d repeats, expected 2", cases[i].id,
                     g.n_costs[k]);
        if (strcmp(cases[i].id, "good-4") == 0 && g.n_costs[k] != 2)
            fail_msg("job good-4 (under its cutoff): %d repeats, expected 2", g.n_costs[k]);
    }
    /* the records store has one row per job with that status */
    {
        rec_iter *it;
        const rec_record *r;
        int rows = 0;
        assert_int_equal(rec_iter_open(st, NULL, REC_ORDER_ID, &it), AT_OK);
        while (rec_iter_next(it, &r) == AT_OK && r != NULL) {
            int k = ft_find(&g, r->job_id);
            assert_true(k >= 0);
            assert_int_equal(r->status, g.status[k]);
            rows++;
        }
        rec_iter_close(it);
        assert_int_equal(rows, N);
    }
    /* the agent is still serving */
    assert_int_equal(kill(agent, 0), 0);
    assert_int_equal(ft_wait(agent, 0), -1);
    tn_fleet_close(f);
    rec_store_close(st);
    {
        /* idle, it is in a poll the tracker holds (1 s): SIGTERM cuts it short */
        double t0 = ft_now(), took;
        int st2;
        kill(agent, SIGTERM);
        st2 = ft_wait(agent, 20);
        took = ft_now() - t0;
        assert_true(st2 >= 0 && WIFEXITED(st2) && WEXITSTATUS(st2) == 0);
        if (took > AGENT_STOP_S)
            fail_msg("an idle agent took %.2f s to stop on SIGTERM", took);
    }
}

/* SIGTERM while a job runs: the agent finishes or gives back its jobs, exits 0; a second
** agent measures the rest; every job gets exactly one result. */
static void test_sigterm_returns_jobs(void **unused)
{
    enum { N = 6 };
    tn_fleet *f;
    tn_fleet_job jobs[N];
    char ids[N][32], err[512], url[64];
    uint8_t ref_id[AT_WIRE_REFID_BYTES];
    kn_artifact ref;
    pid_t a1, a2;
    int st;
    ft_got g;
    double end;
    (void)unused;

    a1 = start_agent("agent-term-1", NULL);
    snprintf(url, sizeof url, "127.0.0.1:%d", port);
    assert_int_equal(
        tn_fleet_open(
            &(tn_fleet_cfg){.tracker = url, .keys = &fleet_key, .n_keys = 1, .device_key = "x86"},
            &f, err, sizeof err),
        AT_OK);
    memset(&ref, 0, sizeof ref);
    ref.obj = obj;
    ref.obj_size = obj_n;
    snprintf(ref.entry, sizeof ref.entry, "k_good");
    ref.n_args = 2;
    ref.args[0].dtype = AT_DT_F32;
    ref.args[0].n_dims = 1;
    ref.args[0].shape[0] = N_ELEMS;
    ref.args[1] = ref.args[0];
    ref.args[1].is_output = 1;
    assert_int_equal(tn_fleet_add_ref(f, &ref, ref_id), AT_OK);
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < N; i++) {
        snprintf(ids[i], sizeof ids[i], "spin-%d", i);
        art_of(&jobs[i].w.art, "k_spin");
        jobs[i].w.id = ids[i];
        at_wire_settings_default(&jobs[i].w.run);
        jobs[i].w.run.repeat = 1;
        jobs[i].w.run.n_warmup = 0;
        jobs[i].w.run.timeout_ms = 30000;
        jobs[i].w.has_ref = 1;
        memcpy(jobs[i].w.ref, ref_id, sizeof ref_id);
    }
    assert_int_equal(tn_fleet_submit(f, jobs, N), AT_OK);
    memset(&g, 0, sizeof g);
    /* let the first agent take the jobs and start one, then stop it */
    end = ft_now() + 60;
    while (g.n == 0 && ft_now() < end)
        assert_true(tn_fleet_wait(f, 300, ft_on_result, &g) == AT_OK);
    assert_true(g.n >= 1);
    kill(a1, SIGTERM);
    st = ft_wait(a1, 60);
    assert_true(st >= 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    a2 = start_agent("agent-term-2", NULL);
    end = ft_now() + 120;
    while (tn_fleet_pending(f) > 0 && ft_now() < end)
        assert_true(tn_fleet_wait(f, 1000, ft_on_result, &g) == AT_OK);
    assert_int_equal(tn_fleet_pending(f), 0);
    assert_int_equal(g.n, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(g.status[ft_find(&g, ids[i])], AT_MEASURE_NO_ERROR);
    }
    tn_fleet_close(f);
    kill(a2, SIGTERM);
    assert_true(ft_wait(a2, 30) >= 0);
}

/* A peer that pretends to be the tracker: it answers the agent's requests with random bytes,
** an oversized frame, and a CHALLENGE not signed with the fleet key.  The agent refuses each,
** says so in its log, never registers, and keeps running (and redialing). */
static void test_agent_refuses_an_impostor_tracker(void **unused)
{
    nng_socket rep;
    nng_listener lis;
    char bin[PATH_MAX], url[64], log[PATH_MAX], *text;
    char *argv[16];
    int n = 0, fake_port = 0, answered = 0;
    pid_t agent;
    at_rng rng;
    double end;
    (void)unused;
    assert_int_equal(nng_rep0_open(&rep), 0);
    nng_socket_set_ms(rep, NNG_OPT_RECVTIMEO, 500);
    assert_int_equal(nng_listener_create(&lis, rep, "tcp://127.0.0.1:0"), 0);
    assert_int_equal(nng_listener_start(lis, 0), 0);
    assert_int_equal(nng_listener_get_int(lis, NNG_OPT_TCP_BOUND_PORT, &fake_port), 0);
    snprintf(url, sizeof url, "127.0.0.1:%d", fake_port);
    snprintf(log, sizeof log, "%s/agent-impostor.log", ft_tmpdir());
    argv[n++] = (char *)ft_path("bin/rpc_agent", bin, sizeof bin);
    argv[n++] = (char *)"--tracker";
    argv[n++] = url;
    argv[n++] = (char *)"--key";
    argv[n++] = (char *)"x86";
    argv[n++] = (char *)"--fleet-key";
    argv[n++] = (char *)key_path;
    argv[n++] = (char *)"--reconnect-max-ms";
    argv[n++] = (char *)"200";
    argv[n] = NULL;
    agent = ft_spawn(argv, log, log);
    at_rng_seed(&rng, 5);
    end = ft_now() + 60;
    while (answered < 9 && ft_now() < end) {
        nng_msg *m;
        if (nng_recvmsg(rep, &m, 0) != 0) continue;
        nng_msg_clear(m);
        if (answered % 3 == 0) { /* random bytes */
            for (int i = 0; i < 300; i++)
                nng_msg_append_u32(m, (uint32_t)at_rng_u64(&rng));
        } else if (answered % 3 == 1) { /* far over the pre-authentication limit */
            static uint8_t big[200000];
            nng_msg_append(m, big, sizeof big);
        } else { /* a CHALLENGE signed with some other key */
            at_wire_session s;
            at_wire_key wrong;
            at_wire_msg c;
            at_buf b;
            uint8_t k[32], nonce[32];
            memset(k, 0x77, sizeof k);
            at_wire_key_from_bytes(k, &wrong);
            memset(nonce, 1, sizeof nonce);
            at_wire_session_init(&s, 0);
            at_wire_session_key(&s, &wrong, nonce, nonce);
            at_wire_msg_init(&c, AT_WIRE_T_CHALLENGE);
            c.re = 1;
            c.u.challenge.version = AT_WIRE_VERSION;
            memcpy(c.u.challenge.key_id, fleet_key.id, AT_WIRE_KEYID_BYTES); /* claims ours */
            at_buf_init(&b);
            s.send_seq = 0;
            assert_int_equal(at_wire_encode(&s, &c, &b), AT_OK);
            nng_msg_append(m, b.data, b.len);
            at_buf_fini(&b);
        }
        assert_int_equal(nng_sendmsg(rep, m, 0), 0);
        answered++;
    }
    assert_int_equal(answered, 9);
    assert_int_equal(ft_wait(agent, 0), -1); /* still running */
    nng_close(rep);
    kill(agent, SIGTERM);
    assert_true(ft_wait(agent, 30) >= 0);
    text = ft_read(log);
    assert_non_null(text);
    assert_non_null(strstr(text, "does not hold the fleet key"));
    assert_non_null(strstr(text, "refused a malformed answer"));
    assert_null(strstr(text, "registered as"));
    at_free(text);
}

/* 'tuner measure' with a key the tracker does not know: the refusal on stderr, exit 1, and
** no "results stored" (issue 14, item 9: it printed "results stored in w.db" after it). */
static void test_measure_with_a_wrong_key(void **unused)
{
    char bin[PATH_MAX], url[64], db[PATH_MAX], out[PATH_MAX], err[PATH_MAX];
    const char *wrong = ft_keyfile("wrong.key", NULL);
    char *argv[16], *text;
    int n = 0, st;
    pid_t pid;
    (void)unused;
    snprintf(url, sizeof url, "127.0.0.1:%d", port);
    snprintf(db, sizeof db, "%s/wrong.db", ft_tmpdir());
    snprintf(out, sizeof out, "%s/measure.out", ft_tmpdir());
    snprintf(err, sizeof err, "%s/measure.err", ft_tmpdir());
    argv[n++] = (char *)ft_path("bin/tuner", bin, sizeof bin);
    argv[n++] = (char *)"measure";
    argv[n++] = (char *)"--tracker";
    argv[n++] = url;
    argv[n++] = (char *)"--fleet-key";
    argv[n++] = (char *)wrong;
    argv[n++] = (char *)"--key";
    argv[n++] = (char *)"x86";
    argv[n++] = (char *)"--db";
    argv[n++] = db;
    argv[n++] = (char *)"--wait-timeout-s";
    argv[n++] = (char *)"10";
    argv[n++] = (char *)"matmul:M=8,N=8,K=8";
    argv[n] = NULL;
    pid = ft_spawn(argv, out, err);
    st = ft_wait(pid, 120);
    assert_true(st >= 0 && WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 1);
    text = ft_read(err);
    assert_non_null(text);
    assert_non_null(strstr(text, "the tracker refused us"));
    at_free(text);
    text = ft_read(out);
    assert_non_null(text);
    assert_null(strstr(text, "results stored"));
    assert_non_null(strstr(text, "nothing was measured: no result of the 2 jobs reached"));
    at_free(text);
}

/* 'tuner measure --state FILE --rounds N' on the embedded fleet: the file's states (the
** naive and a hand-written matmul) measured N times over, each row the median of its
** rounds with every round's median after it; a line that is no state of the operator
** exits 2 naming the file and the line, before a store is created. */
static void test_measure_states_in_rounds(void **unused)
{
    static const char states[] =
        "{\"v\":1,\"steps\":[]}\n"
        "\n"
        "{\"v\":1,\"steps\":[[\"CHW\",2,\"local\"],[\"CHR\",1,\"local\",[2]],[\"SP\",4,0,64,[64],"
        "1],[\"SP\",4,2,64,[64],1],[\"RE\",4,[0,2,1,3]],[\"FU\",4,[0,1]],[\"AN\",4,0,3],[\"SP\","
        "4,2,64,[16],1],[\"AN\",4,3,2],[\"CA\",3,4,0],[\"SP\",3,0,64,[8],1],[\"SP\",3,2,64,[32],"
        "1],[\"SP\",3,4,64,[64],1],[\"RE\",3,[4,2,0,5,1,3]],[\"AN\",3,4,1],[\"AN\",3,5,2],[\"CA\","
        "2,3,1],[\"AN\",2,1,2]]}\n";
    char bin[PATH_MAX], db[PATH_MAX], out[PATH_MAX], err[PATH_MAX], file[PATH_MAX], bad[PATH_MAX];
    char *argv[16], *text, *a, *b;
    int n = 0, st;
    FILE *f;
    (void)unused;
    snprintf(db, sizeof db, "%s/states.db", ft_tmpdir());
    snprintf(out, sizeof out, "%s/states.out", ft_tmpdir());
    snprintf(err, sizeof err, "%s/states.err", ft_tmpdir());
    snprintf(file, sizeof file, "%s/states.jsonl", ft_tmpdir());
    snprintf(bad, sizeof bad, "%s/bad_states.jsonl", ft_tmpdir());
    assert_non_null(f = fopen(file, "w"));
    fputs(states, f);
    fclose(f);
    assert_non_null(f = fopen(bad, "w"));
    fputs("{\"v\":1,\"steps\":[]}\n{\"v\":1,\"steps\":[[\"SP\",4,0,999,[7],1]]}\n", f);
    fclose(f);
    argv[n++] = (char *)ft_path("bin/tuner", bin, sizeof bin);
    argv[n++] = (char *)"measure";
    argv[n++] = (char *)"--db";
    argv[n++] = db;
    argv[n++] = (char *)"--threads";
    argv[n++] = (char *)"1";
    argv[n++] = (char *)"--rounds";
    argv[n++] = (char *)"2";
    argv[n++] = (char *)"--state";
    argv[n++] = file;
    argv[n++] = (char *)"matmul:M=64,N=64,K=64";
    argv[n] = NULL;
    st = ft_wait(ft_spawn(argv, out, err), 120);
    assert_true(st >= 0 && WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    text = ft_read(out);
    assert_non_null(text);
    a = strstr(text, "state 1");
    b = strstr(text, "state 2");
    assert_non_null(a);
    assert_non_null(b);
    assert_null(strstr(text, "state 3"));
    assert_non_null(strstr(a, "NO_ERROR"));
    assert_non_null(strstr(a, "rounds (ms, 2 of 2):"));
    assert_non_null(strstr(b, "rounds (ms, 2 of 2):"));
    assert_non_null(strstr(text, "4 of 4 results stored in"));
    {
        /* the hand-written tile is faster than the naive loops (median of the rounds) */
        double ms1 = 0, ms2 = 0;
        assert_int_equal(sscanf(strstr(a, "NO_ERROR") + 8, "%lf", &ms1), 1);
        assert_int_equal(sscanf(strstr(b, "NO_ERROR") + 8, "%lf", &ms2), 1);
        assert_true(ms1 > 0 && ms2 > 0 && ms2 < ms1);
    }
    at_free(text);

    /* a state of another extent: exit 2, FILE:2 named, nothing stored */
    snprintf(db, sizeof db, "%s/states_bad.db", ft_tmpdir());
    argv[3] = db;
    argv[9] = bad;
    st = ft_wait(ft_spawn(argv, out, err), 120);
    assert_true(st >= 0 && WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 2);
    text = ft_read(err);
    assert_non_null(text);
    assert_non_null(strstr(text, "bad_states.jsonl:2: not a state of this operator"));
    at_free(text);
    assert_int_equal(access(db, F_OK), -1);
}

static int setup(void **state)
{
    (void)state;
    key_path = ft_keyfile("fleet.key", &fleet_key);
    snprintf(tracker_out, sizeof tracker_out, "%s/tracker.out", ft_tmpdir());
    snprintf(tracker_err, sizeof tracker_err, "%s/tracker.err", ft_tmpdir());
    if (ft_compile("gcc", "-O2 -fPIC", kernels_src, "kernels", &obj, &obj_n) != 0) return -1;
    tracker_pid = ft_start_tracker(key_path, 0, tracker_out, tracker_err,
                                   (const char *const[]){"--log-level", "debug", NULL}, &port);
    return port > 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    ft_stop(tracker_pid, 10);
    at_free(obj);
    if (getenv("AT_KEEP_TMP") == NULL) ft_rmtmp();
    return 0;
}

/* The pinning order: every CPU of the affinity once, fastest first, then by number. */
static void test_pin_order(void **unused)
{
    cpu_set_t own;
    int cpus[CPU_SETSIZE], n, seen = 0;
    long prev_freq = -1;
    (void)unused;
    assert_int_equal(sched_getaffinity(0, sizeof own, &own), 0);
    n = agt__pin_order(cpus, CPU_SETSIZE);
    assert_int_equal(n, CPU_COUNT(&own));
    for (int i = 0; i < n; i++) {
        char path[96];
        long f = 0;
        FILE *fp;
        assert_true(CPU_ISSET(cpus[i], &own));
        for (int k = 0; k < i; k++)
            assert_true(cpus[k] != cpus[i]);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/cpufreq/cpuinfo_max_freq",
                 cpus[i]);
        if ((fp = fopen(path, "r")) != NULL) {
            if (fscanf(fp, "%ld", &f) != 1)
                f = 0;
            fclose(fp);
        }
        if (i > 0) {
            assert_true(f <= prev_freq);
            if (f == prev_freq)
                assert_true(cpus[i] > cpus[i - 1]);
        }
        prev_freq = f;
        seen++;
    }
    assert_int_equal(seen, n);
    /* capped at 'max' */
    if (n >= 2) {
        int two[2];
        assert_int_equal(agt__pin_order(two, 1), 1);
        assert_int_equal(two[0], cpus[0]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_kernels_each_get_their_code),
        cmocka_unit_test(test_sigterm_returns_jobs),
        cmocka_unit_test(test_agent_refuses_an_impostor_tracker),
        cmocka_unit_test(test_measure_with_a_wrong_key),
        cmocka_unit_test(test_measure_states_in_rounds),
        cmocka_unit_test(test_pin_order),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, setup, teardown);
}
