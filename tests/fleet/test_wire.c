/* tests/fleet/test_wire.c -- the wire protocol: every message round trip, bounds, malformed
** frames, versions, MACs, replay, keys, HMAC vectors, fingerprints. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "common/wire.h"
#include "records/records.h"

static uint8_t obj_bytes[300];
static at_wire_arg args3[3] = {
    {AT_DT_F32, 0, 2, {4, 8}},
    {AT_DT_F32, 0, 2, {8, 4}},
    {AT_DT_F32, 1, 2, {4, 4}},
};

static void fill_artifact(at_wire_artifact *a)
{
    for (size_t i = 0; i < sizeof obj_bytes; i++)
        obj_bytes[i] = (uint8_t)(i * 7 + 1);
    a->obj = obj_bytes;
    a->obj_size = sizeof obj_bytes;
    a->entry = "at_kernel";
    a->triple = "x86_64-pc-linux-gnu";
    a->n_args = 3;
    a->args = args3;
    a->ws_fixed = 128;
    a->ws_per_thread = 64;
}

static void fill_job(at_wire_job *j, const char *id)
{
    memset(j, 0, sizeof *j);
    j->id = id;
    fill_artifact(&j->art);
    at_wire_settings_default(&j->run);
    j->run.repeat = 5;
    j->run.min_repeat_ms = 2.5;
    j->run.flush_cache = 1;
    j->seed = 0xfedcba9876543210ull;
    j->has_ref = 1;
    memset(j->ref, 0xab, sizeof j->ref);
}

/* Encode with a NULL session and decode again. */
static void roundtrip(at_wire_msg *m, at_wire_msg *out)
{
    at_buf b;
    char err[256];
    at_buf_init(&b);
    assert_int_equal(at_wire_encode(NULL, m, &b), AT_OK);
    assert_int_equal(at_wire_decode(NULL, b.data, b.len, out, err, sizeof err), AT_OK);
    assert_int_equal(out->type, m->type);
    /* byte arrays point into the frame: keep a copy alive for the test's duration */
    {
        static char *keep[64];
        static int n_keep;
        if (n_keep == 64) {
            for (int i = 0; i < 64; i++)
                at_free(keep[i]);
            n_keep = 0;
        }
        keep[n_keep++] = at_buf_take(&b);
    }
    at_buf_fini(&b);
}

static void test_roundtrip_all(void **unused)
{
    at_wire_msg m, o;
    at_wire_job jobs[2];
    at_wire_ref ref;
    at_wire_result res[2];
    double costs[3] = {1e-3, 2e-3, 1.5e-3};
    const char *ids[2] = {"j1", "j2"};
    at_wire_keyinfo keys[1] = {{"pixel7", 3, 1, 17}};
    uint8_t need[1][AT_WIRE_REFID_BYTES];
    (void)unused;

    /* HELLO */
    at_wire_msg_init(&m, AT_WIRE_T_HELLO);
    m.u.hello.version = AT_WIRE_VERSION;
    m.u.hello.role = AT_WIRE_ROLE_AGENT;
    m.u.hello.name = "agent-1";
    m.u.hello.client_id = "abc";
    memset(m.u.hello.nonce, 7, AT_WIRE_NONCE_BYTES);
    m.u.hello.n_keys = 2;
    memset(m.u.hello.key_ids[1], 9, AT_WIRE_KEYID_BYTES);
    roundtrip(&m, &o);
    assert_int_equal(o.u.hello.role, AT_WIRE_ROLE_AGENT);
    assert_string_equal(o.u.hello.name, "agent-1");
    assert_int_equal(o.u.hello.n_keys, 2);
    assert_int_equal(o.u.hello.key_ids[1][3], 9);
    assert_int_equal(o.u.hello.nonce[31], 7);
    at_wire_msg_fini(&o);
    at_wire_msg_fini(&m);

    /* SUBMIT with jobs and a reference */
    at_wire_msg_init(&m, AT_WIRE_T_SUBMIT);
    fill_job(&jobs[0], "run1-0");
    fill_job(&jobs[1], "run1-1");
    jobs[1].has_ref = 0;
    jobs[0].run.cutoff_s = 0.125; /* optional: sent only when > 0 */
    jobs[0].run.flush_args = 0x5; /* optional: sent only with flush and when not 0 */
    jobs[1].run.flush_cache = 0;
    jobs[1].run.flush_args = 0x2; /* not sent: nothing is flushed */
    memset(&ref, 0, sizeof ref);
    memset(ref.id, 0xab, sizeof ref.id);
    fill_artifact(&ref.art);
    m.u.submit.device_key = "pixel7";
    m.u.submit.priority = 5;
    m.u.submit.jobs = jobs;
    m.u.submit.n_jobs = 2;
    m.u.submit.refs = &ref;
    m.u.submit.n_refs = 1;
    roundtrip(&m, &o);
    assert_string_equal(o.u.submit.device_key, "pixel7");
    assert_int_equal(o.u.submit.priority, 5);
    assert_int_equal(o.u.submit.n_jobs, 2);
    assert_string_equal(o.u.submit.jobs[1].id, "run1-1");
    assert_int_equal(o.u.submit.jobs[0].has_ref, 1);
    assert_int_equal(o.u.submit.jobs[1].has_ref, 0);
    assert_int_equal(o.u.submit.jobs[0].run.repeat, 5);
    assert_true(o.u.submit.jobs[0].run.min_repeat_ms == 2.5);
    assert_true(o.u.submit.jobs[0].run.cutoff_s == 0.125);
    assert_true(o.u.submit.jobs[1].run.cutoff_s == 0);
    assert_int_equal(o.u.submit.jobs[0].run.flush_cache, 1);
    assert_true(o.u.submit.jobs[0].run.flush_args == 0x5);
    assert_int_equal(o.u.submit.jobs[1].run.flush_cache, 0);
    assert_true(o.u.submit.jobs[1].run.flush_args == 0);
    assert_true(o.u.submit.jobs[0].seed == 0xfedcba9876543210ull);
    assert_int_equal(o.u.submit.jobs[0].art.n_args, 3);
    assert_int_equal(o.u.submit.jobs[0].art.args[2].is_output, 1);
    assert_int_equal(o.u.submit.jobs[0].art.args[1].shape[0], 8);
    assert_int_equal(o.u.submit.jobs[0].art.ws_per_thread, 64);
    assert_int_equal(o.u.submit.jobs[0].art.obj_size, sizeof obj_bytes);
    assert_memory_equal(o.u.submit.jobs[0].art.obj, obj_bytes, sizeof obj_bytes);
    assert_string_equal(o.u.submit.jobs[0].art.entry, "at_kernel");
    assert_int_equal(o.u.submit.n_refs, 1);
    assert_int_equal(o.u.submit.refs[0].id[5], 0xab);
    at_wire_msg_fini(&o);
    at_wire_msg_fini(&m);

    /* AGENT_POLL with results, returned ids, needed references */
    memset(res, 0, sizeof res);
    res[0].id = "run1-0";
    res[0].status = AT_MEASURE_NO_ERROR;
    res[0].costs = costs;
    res[0].n_costs = 3;
    res[0].median_s = 1.5e-3;
    res[0].measured_at = 1.7e9;
    res[0].state.cpu_mhz = 3000;
    res[0].state.temp_c = 55.5;
    res[0].state.throttled = 1;
    res[1].id = "run1-1";
    res[1].status = AT_MEASURE_RUN_TIMEOUT;
    res[1].error = "the kernel ran for more than 10 s";
    memset(need[0], 0x11, AT_WIRE_REFID_BYTES);
    at_wire_msg_init(&m, AT_WIRE_T_AGENT_POLL);
    m.u.apoll.n_held = 3;
    m.u.apoll.n_free = 8;
    m.u.apoll.results = res;
    m.u.apoll.n_results = 2;
    m.u.apoll.returned = ids;
    m.u.apoll.n_returned = 2;
    m.u.apoll.need_refs = (const uint8_t(*)[AT_WIRE_REFID_BYTES])need;
    m.u.apoll.n_need_refs = 1;
    roundtrip(&m, &o);
    assert_int_equal(o.u.apoll.n_results, 2);
    assert_int_equal(o.u.apoll.results[0].n_costs, 3);
    assert_true(o.u.apoll.results[0].costs[1] == 2e-3);
    assert_true(o.u.apoll.results[0].median_s == 1.5e-3);
    assert_int_equal(o.u.apoll.results[0].state.throttled, 1);
    assert_true(o.u.apoll.results[0].state.temp_c == 55.5);
    assert_int_equal(o.u.apoll.results[1].status, AT_MEASURE_RUN_TIMEOUT);
    assert_string_equal(o.u.apoll.results[1].error, "the kernel ran for more than 10 s");
    assert_int_equal(o.u.apoll.n_returned, 2);
    assert_string_equal(o.u.apoll.returned[1], "j2");
    assert_int_equal(o.u.apoll.n_need_refs, 1);
    assert_int_equal(o.u.apoll.need_refs[0][0], 0x11);
    at_wire_msg_fini(&o);
    at_wire_msg_fini(&m);

    /* REGISTER */
    at_wire_msg_init(&m, AT_WIRE_T_REGISTER);
    m.u.reg.device_key = "x86";
    m.u.reg.triple = "x86_64-pc-linux-gnu";
    m.u.reg.features = "+avx2,+fma";
    m.u.reg.dev = (at_wire_device){"x86_64", "AMD EPYC", "6.1", "", 2};
    m.u.reg.fingerprint = "0123456789abcdef";
    m.u.reg.sandbox.seccomp = 1;
    m.u.reg.sandbox.note = "ok";
    m.u.reg.n_threads = 2;
    m.u.reg.max_batch = 16;
    roundtrip(&m, &o);
    assert_string_equal(o.u.reg.dev.model, "AMD EPYC");
    assert_int_equal(o.u.reg.dev.n_cores, 2);
    assert_int_equal(o.u.reg.sandbox.seccomp, 1);
    assert_int_equal(o.u.reg.max_batch, 16);
    at_wire_msg_fini(&o);
    at_wire_msg_fini(&m);

    /* SUBMITTED, RESULTS, CANCEL, STATUS, WELCOME, ERROR */
    at_wire_msg_init(&m, AT_WIRE_T_SUBMITTED);
    m.u.submitted.n_accepted = 2;
    m.u.submitted.keys = keys;
    m.u.submitted.n_keys = 1;
    roundtrip(&m, &o);
    assert_int_equal(o.u.submitted.n_keys, 1);
    assert_string_equal(o.u.submitted.keys[0].key, "pixel7");
    assert_int_equal(o.u.submitted.keys[0].n_queued, 17);
    at_wire_msg_fini(&o);
    at_wire_msg_fini(&m);

    at_wire_msg_init(&m, AT_WIRE_T_RESULTS);
    m.u.results.first = 41;
    m.u.results.results = res;
    m.u.results.n_results = 1;
    m.u.results.n_agents = 4;
    roundtrip(&m, &o);
    assert_true(o.u.results.first == 41);
    assert_int_equal(o.u.results.n_agents, 4);
    at_wire_msg_fini(&o);
    at_wire_msg_fini(&m);

    at_wire_msg_init(&m, AT_WIRE_T_CANCEL);
    m.u.cancel.ids = ids;
    m.u.cancel.n_ids = 2;
    roundtrip(&m, &o);
    assert_int_equal(o.u.cancel.n_ids, 2);
    at_wire_msg_fini(&o);
    at_wire_msg_fini(&m);

    at_wire_msg_init(&m, AT_WIRE_T_ERROR);
    m.u.error.code = AT_EVERSION;
    m.u.error.text = "no";
    roundtrip(&m, &o);
    assert_int_equal(o.u.error.code, AT_EVERSION);
    at_wire_msg_fini(&o);
    at_wire_msg_fini(&m);

    /* sandbox messages */
    at_wire_msg_init(&m, AT_WIRE_T_SBX_EVENT);
    m.u.event.kind = AT_WIRE_SBX_REFOUT;
    m.u.event.n_outputs = 2;
    m.u.event.output = 1;
    m.u.event.total = 100;
    m.u.event.offset = 50;
    m.u.event.data = obj_bytes;
    m.u.event.n = 50;
    roundtrip(&m, &o);
    assert_int_equal(o.u.event.n, 50);
    assert_true(o.u.event.offset == 50);
    at_wire_msg_fini(&o);
    at_wire_msg_fini(&m);
}

static void test_encode_refuses_out_of_bounds(void **unused)
{
    at_wire_msg m;
    at_buf b;
    char big[AT_WIRE_MAX_NAME + 2];
    (void)unused;
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    at_buf_init(&b);
    at_wire_msg_init(&m, AT_WIRE_T_REGISTERED);
    m.u.registered.agent_id = big;
    assert_int_equal(at_wire_encode(NULL, &m, &b), AT_EINVAL);
    assert_int_equal(b.len, 0);
    at_wire_msg_init(&m, 99);
    assert_int_equal(at_wire_encode(NULL, &m, &b), AT_EINVAL);
    at_buf_fini(&b);
}

/* Encode a message, then corrupt it in many ways: never a crash, always a clean code. */
static void test_malformed_frames(void **unused)
{
    at_wire_msg m, o;
    at_wire_job job;
    at_buf b;
    char err[256];
    at_rng rng;
    (void)unused;

    at_buf_init(&b);
    at_wire_msg_init(&m, AT_WIRE_T_SUBMIT);
    fill_job(&job, "j");
    m.u.submit.device_key = "k";
    m.u.submit.jobs = &job;
    m.u.submit.n_jobs = 1;
    assert_int_equal(at_wire_encode(NULL, &m, &b), AT_OK);

    /* every truncation */
    for (size_t n = 0; n < b.len; n++) {
        at_err e = at_wire_decode(NULL, b.data, n, &o, err, sizeof err);
        assert_int_not_equal(e, AT_OK);
        at_wire_msg_fini(&o);
    }
    /* random byte flips: either refused with EPROTO/EVERSION or a valid message */
    at_rng_seed(&rng, 1234);
    for (int k = 0; k < 3000; k++) {
        char *c = at_malloc(b.len);
        memcpy(c, b.data, b.len);
        for (int f = 0; f < 1 + (int)at_rng_below(&rng, 4); f++)
            c[at_rng_below(&rng, b.len)] = (char)at_rng_u64(&rng);
        at_err e = at_wire_decode(NULL, c, b.len, &o, err, sizeof err);
        assert_true(e == AT_OK || e == AT_EPROTO || e == AT_EVERSION);
        if (e != AT_OK) assert_true(err[0] != 0);
        at_wire_msg_fini(&o);
        at_free(c);
    }
    /* random bytes */
    for (int k = 0; k < 2000; k++) {
        uint8_t r[200];
        size_t n = 1 + at_rng_below(&rng, sizeof r);
        for (size_t i = 0; i < n; i++)
            r[i] = (uint8_t)at_rng_u64(&rng);
        at_err e = at_wire_decode(NULL, r, n, &o, err, sizeof err);
        assert_true(e == AT_EPROTO || e == AT_EVERSION);
        at_wire_msg_fini(&o);
    }
    at_buf_fini(&b);

    /* an array claiming 2^32-1 items in a few bytes: refused before any allocation */
    {
        uint8_t evil[5 + 1 + AT_WIRE_TAG_BYTES] = {0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0};
        assert_int_equal(at_wire_decode(NULL, evil, sizeof evil, &o, err, sizeof err), AT_EPROTO);
        assert_non_null(strstr(err, "container larger"));
    }
    /* deep nesting */
    {
        uint8_t deep[64 + AT_WIRE_TAG_BYTES];
        memset(deep, 0, sizeof deep);
        for (int i = 0; i < 40; i++)
            deep[i] = 0x91;
        deep[40] = 0xc0;
        assert_int_equal(at_wire_decode(NULL, deep, 41 + AT_WIRE_TAG_BYTES, &o, err, sizeof err),
                         AT_EPROTO);
        assert_non_null(strstr(err, "deeply"));
    }
    /* oversized */
    {
        char *huge = at_calloc(1, (size_t)AT_WIRE_MAX_MSG + 1);
        assert_int_equal(
            at_wire_decode(NULL, huge, (size_t)AT_WIRE_MAX_MSG + 1, &o, err, sizeof err),
            AT_EPROTO);
        assert_non_null(strstr(err, "over the limit"));
        at_free(huge);
    }
}

/* Hand-made frames: a field of the wrong type or out of range names the field. */
static void test_bad_fields_named(void **unused)
{
    /* [1, 12 (TUNER_POLL), 1, 0, {"ack": "x"}] + tag */
    uint8_t f1[] = {0x95, AT_WIRE_VERSION, 0x0c, 0x01, 0x00, 0x81, 0xa3, 'a', 'c', 'k', 0xa1, 'x'};
    /* [version + 1, 1, 1, 0, {}]: another version */
    uint8_t f2[] = {0x95, AT_WIRE_VERSION + 1, 0x01, 0x01, 0x00, 0x80};
    /* [1, 7 (REGISTERED), 1, 0, {"agent": ""}] */
    uint8_t f3[] = {0x95, AT_WIRE_VERSION, 0x07, 0x01, 0x00, 0x81, 0xa5, 'a', 'g', 'e', 'n', 't', 0xa0};
    char other[32];
    uint8_t buf[128];
    at_wire_msg o;
    char err[256];
    (void)unused;

    memset(buf, 0, sizeof buf);
    memcpy(buf, f1, sizeof f1);
    assert_int_equal(at_wire_decode(NULL, buf, sizeof f1 + AT_WIRE_TAG_BYTES, &o, err, sizeof err),
                     AT_EPROTO);
    assert_non_null(strstr(err, "'ack'"));
    memset(buf, 0, sizeof buf);
    memcpy(buf, f2, sizeof f2);
    assert_int_equal(at_wire_decode(NULL, buf, sizeof f2 + AT_WIRE_TAG_BYTES, &o, err, sizeof err),
                     AT_EVERSION);
    assert_int_equal(o.version, AT_WIRE_VERSION + 1);
    assert_int_equal(o.type, AT_WIRE_T_HELLO);
    snprintf(other, sizeof other, "version %d", AT_WIRE_VERSION + 1);
    assert_non_null(strstr(err, other));
    memset(buf, 0, sizeof buf);
    memcpy(buf, f3, sizeof f3);
    assert_int_equal(at_wire_decode(NULL, buf, sizeof f3 + AT_WIRE_TAG_BYTES, &o, err, sizeof err),
                     AT_EPROTO);
    assert_non_null(strstr(err, "empty"));
}

/* A job whose kernel reads a weight in a new layout: round trip, then every way the
** layout description can be wrong is refused, naming the field. */
static void test_layout_rewrite(void **unused)
{
    static const struct {
        int arg, n_dims;
        int64_t d0;
        const char *what;
    } bad[] = {
        {2, 2, 4, "input argument"},  /* the output */
        {3, 2, 4, "input argument"},  /* no such argument */
        {-1, 2, 4, "input argument"}, /* negative */
        {0, 0, 4, "1 to 16 sizes"},   /* no dimensions */
        {0, 2, 0, "dimension"},       /* a zero dimension */
        {0, 2, 1ll << 40, "dimension"},
    };
    at_wire_msg m, o;
    at_wire_job j;
    at_buf b;
    char err[256];
    (void)unused;

    fill_job(&j, "lay-0");
    j.art.pre_entry = "at_kernel_pre";
    j.art.n_pre = 2;
    j.art.pre[0] = (at_wire_layout){1, 4, {2, 2, 4, 2}};
    j.art.pre[1] = (at_wire_layout){0, 3, {2, 8, 2}};
    at_wire_msg_init(&m, AT_WIRE_T_SUBMIT);
    m.u.submit.jobs = &j;
    m.u.submit.n_jobs = 1;
    m.u.submit.device_key = "x86";
    roundtrip(&m, &o);
    assert_int_equal(o.u.submit.n_jobs, 1);
    assert_string_equal(o.u.submit.jobs[0].art.pre_entry, "at_kernel_pre");
    assert_int_equal(o.u.submit.jobs[0].art.n_pre, 2);
    assert_int_equal(o.u.submit.jobs[0].art.pre[0].arg, 1);
    assert_int_equal(o.u.submit.jobs[0].art.pre[0].n_dims, 4);
    assert_int_equal(o.u.submit.jobs[0].art.pre[0].shape[3], 2);
    assert_int_equal(o.u.submit.jobs[0].art.pre[1].arg, 0);
    assert_int_equal(o.u.submit.jobs[0].art.pre[1].shape[1], 8);
    at_wire_msg_fini(&o);

    /* two layouts of one argument */
    j.art.pre[1].arg = 1;
    at_buf_init(&b);
    assert_int_equal(at_wire_encode(NULL, &m, &b), AT_OK);
    assert_int_equal(at_wire_decode(NULL, b.data, b.len, &o, err, sizeof err), AT_EPROTO);
    assert_non_null(strstr(err, "'pre'"));
    assert_non_null(strstr(err, "two new layouts"));
    at_buf_fini(&b);
    j.art.n_pre = 1;
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        j.art.pre[0] = (at_wire_layout){bad[k].arg, bad[k].n_dims, {bad[k].d0, 2}};
        at_buf_init(&b);
        if (bad[k].n_dims == 0) {
            /* the encoder refuses it itself */
            assert_int_not_equal(at_wire_encode(NULL, &m, &b), AT_OK);
            at_buf_fini(&b);
            continue;
        }
        assert_int_equal(at_wire_encode(NULL, &m, &b), AT_OK);
        assert_int_equal(at_wire_decode(NULL, b.data, b.len, &o, err, sizeof err), AT_EPROTO);
        assert_non_null(strstr(err, "'pre'"));
        assert_non_null(strstr(err, bad[k].what));
        at_buf_fini(&b);
    }
    /* too many layouts: the encoder refuses */
    j.art.n_pre = AT_WIRE_MAX_PRE + 1;
    at_buf_init(&b);
    assert_int_not_equal(at_wire_encode(NULL, &m, &b), AT_OK);
    at_buf_fini(&b);
}

static void test_hmac_vectors(void **unused)
{
    uint8_t out[32];
    uint8_t key20[20], data50[50];
    static const uint8_t want2[32] = {0x5b, 0xdc, 0xc1, 0x46, 0xbf, 0x60, 0x75, 0x4e,
                                      0x6a, 0x04, 0x24, 0x26, 0x08, 0x95, 0x75, 0xc7,
                                      0x5a, 0x00, 0x3f, 0x08, 0x9d, 0x27, 0x39, 0x83,
                                      0x9d, 0xec, 0x58, 0xb9, 0x64, 0xec, 0x38, 0x43};
    static const uint8_t want3[32] = {0x77, 0x3e, 0xa9, 0x1e, 0x36, 0x80, 0x0e, 0x46,
                                      0x85, 0x4d, 0xb8, 0xeb, 0xd0, 0x91, 0x81, 0xa7,
                                      0x29, 0x59, 0x09, 0x8b, 0x3e, 0xf8, 0xc1, 0x22,
                                      0xd9, 0x63, 0x55, 0x14, 0xce, 0xd5, 0x65, 0xfe};
    (void)unused;
    /* RFC 4231 test cases 2 and 3 */
    at_hmac_sha256((const uint8_t *)"Jefe", 4, "what do ya want for nothing?", 28, out);
    assert_memory_equal(out, want2, 32);
    memset(key20, 0xaa, sizeof key20);
    memset(data50, 0xdd, sizeof data50);
    at_hmac_sha256(key20, sizeof key20, data50, sizeof data50, out);
    assert_memory_equal(out, want3, 32);
}

static void hex_of(const uint8_t *p, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", p[i]);
}

/* The figures of the project's own HMAC and session code before mbed TLS (keys of 0..130
** bytes, longer than a block too, over messages of 0..130 bytes; a session key; a whole
** tagged frame): peers of either build still verify each other's MACs. */
static void test_mac_bytes_match_the_old_implementation(void **unused)
{
    uint8_t buf[300], d[32], kb[32], cn[32], tn[32];
    char hex[2 * 64 + 1];
    at_sha256 all;
    at_wire_key key;
    at_wire_session ws;
    at_wire_msg m;
    at_buf b;
    (void)unused;
    for (int i = 0; i < 300; i++)
        buf[i] = (uint8_t)(i * 7 + 3);
    at_sha256_init(&all);
    for (size_t k = 0; k <= 130; k += 13)
        for (size_t n = 0; n <= 130; n += 11) {
            at_hmac_sha256(buf, k, buf + 100, n, d);
            at_sha256_update(&all, d, 32);
        }
    at_sha256_final(&all, d);
    hex_of(d, 32, hex);
    assert_string_equal(hex, "3b5af3ababddb28e9de112b93f7c11fb145444afa11794c086b3586abf14c67d");
    for (int i = 0; i < 32; i++) {
        kb[i] = (uint8_t)i;
        cn[i] = (uint8_t)(0xa0 + i);
        tn[i] = (uint8_t)(0x40 + i);
    }
    at_wire_key_from_bytes(kb, &key);
    at_wire_session_init(&ws, 1);
    at_wire_session_key(&ws, &key, cn, tn);
    hex_of(ws.skey, 32, hex);
    assert_string_equal(hex, "3a642a74e73e6ddb157022900048d01af986a0bec9dbf46c0db1aeb899c58ab5");
    ws.authed = 1;
    at_wire_msg_init(&m, AT_WIRE_T_STATUS_QUERY);
    at_buf_init(&b);
    assert_int_equal(at_wire_encode(&ws, &m, &b), AT_OK);
    assert_int_equal(b.len, 38);
    hex_of((const uint8_t *)b.data, b.len, hex);
    /* protocol version 4: the tag is Python's hmac.new(skey, b"C" + frame[:6], sha256), as
    ** the old implementation's was for the version-3 frame (...805c4b3f3dec...) */
    assert_string_equal(hex, "95041001008096e806f8d1b316695bf49f7d7620d4f465616734ac6993a9d381"
                             "0ba4fe333b14");
    at_buf_fini(&b);
}

/* A session pair: MACs, sequence numbers, replay, tampering, wrong key. */
static void test_session_mac_and_replay(void **unused)
{
    at_wire_key key, other;
    uint8_t k[32], cn[32], tn[32];
    at_wire_session cli, trk, evil;
    at_wire_msg m, o;
    at_buf b1, b2;
    char err[256];
    (void)unused;

    memset(k, 3, 32);
    at_wire_key_from_bytes(k, &key);
    memset(k, 4, 32);
    at_wire_key_from_bytes(k, &other);
    memset(cn, 1, 32);
    memset(tn, 2, 32);
    at_wire_session_init(&cli, 1);
    at_wire_session_init(&trk, 0);
    at_wire_session_key(&cli, &key, cn, tn);
    at_wire_session_key(&trk, &key, cn, tn);
    cli.authed = trk.authed = 1;

    at_buf_init(&b1);
    at_buf_init(&b2);
    at_wire_msg_init(&m, AT_WIRE_T_TUNER_POLL);
    m.u.tpoll.ack = 5;
    assert_int_equal(at_wire_encode(&cli, &m, &b1), AT_OK);
    assert_int_equal(at_wire_encode(&cli, &m, &b2), AT_OK);
    assert_int_equal(at_wire_decode(&trk, b1.data, b1.len, &o, err, sizeof err), AT_OK);
    assert_true(o.seq == 1);
    at_wire_msg_fini(&o);
    /* the same frame again: replay */
    assert_int_equal(at_wire_decode(&trk, b1.data, b1.len, &o, err, sizeof err), AT_EAUTH);
    assert_non_null(strstr(err, "replayed"));
    /* the next one passes */
    assert_int_equal(at_wire_decode(&trk, b2.data, b2.len, &o, err, sizeof err), AT_OK);
    at_wire_msg_fini(&o);
    /* a frame from the tracker's own direction is refused (reflection) */
    at_buf_reset(&b1);
    assert_int_equal(at_wire_encode(&trk, &m, &b1), AT_OK);
    trk.recv_seq = 0;
    assert_int_equal(at_wire_decode(&trk, b1.data, b1.len, &o, err, sizeof err), AT_EAUTH);
    /* tampering with one payload byte */
    at_buf_reset(&b1);
    m.u.tpoll.ack = 6;
    assert_int_equal(at_wire_encode(&cli, &m, &b1), AT_OK);
    b1.data[b1.len - AT_WIRE_TAG_BYTES - 1] ^= 1;
    assert_int_equal(at_wire_decode(&trk, b1.data, b1.len, &o, err, sizeof err), AT_EAUTH);
    assert_non_null(strstr(err, "MAC"));
    /* a session keyed with another fleet key */
    at_wire_session_init(&evil, 1);
    at_wire_session_key(&evil, &other, cn, tn);
    evil.authed = 1;
    evil.send_seq = 100;
    at_buf_reset(&b1);
    assert_int_equal(at_wire_encode(&evil, &m, &b1), AT_OK);
    assert_int_equal(at_wire_decode(&trk, b1.data, b1.len, &o, err, sizeof err), AT_EAUTH);
    /* before authentication, only the handshake passes, and frames are small */
    {
        at_wire_session fresh;
        at_wire_session_init(&fresh, 0);
        at_buf_reset(&b1);
        assert_int_equal(at_wire_encode(NULL, &m, &b1), AT_OK);
        assert_int_equal(at_wire_decode(&fresh, b1.data, b1.len, &o, err, sizeof err), AT_EAUTH);
        assert_non_null(strstr(err, "before authentication"));
    }
    at_buf_fini(&b1);
    at_buf_fini(&b2);
    at_wire_msg_fini(&m);
}

static void test_key_files(void **unused)
{
    char dir[] = "/tmp/at_wire_keyXXXXXX", path[256], err[256];
    at_wire_key k1, k2;
    (void)unused;
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/fleet.key", dir);
    assert_int_equal(at_wire_key_generate(path, &k1, err, sizeof err), AT_OK);
    assert_int_equal(at_wire_key_generate(path, &k2, err, sizeof err), AT_EEXIST);
    assert_int_equal(at_wire_key_load(path, &k2, err, sizeof err), AT_OK);
    assert_memory_equal(k1.k, k2.k, 32);
    assert_memory_equal(k1.id, k2.id, AT_WIRE_KEYID_BYTES);
    chmod(path, 0644);
    assert_int_equal(at_wire_key_load(path, &k2, err, sizeof err), AT_EAUTH);
    assert_non_null(strstr(err, "chmod 600"));
    unlink(path);
    assert_int_equal(at_wire_key_load(path, &k2, err, sizeof err), AT_EIO);
    assert_int_equal(at_wire_key_parse("zz", 2, &k2), AT_EINVAL);
    assert_int_equal(
        at_wire_key_parse("00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n", 65,
                          &k2),
        AT_OK);
    assert_int_equal(k2.k[31], 0xff);
    assert_int_equal(
        at_wire_key_parse("00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff00", 66,
                          &k2),
        AT_EINVAL);
    rmdir(dir);
}

static void test_fingerprint_matches_records(void **unused)
{
    at_wire_device d = {"aarch64", "Cortex-A76 \"big\"", "6.1.0", "", 8};
    rec_device r = {"aarch64", "Cortex-A76 \"big\"", 8, "6.1.0", ""};
    char a[17], b[REC_FP_LEN + 1];
    (void)unused;
    assert_int_equal(at_wire_fingerprint(&d, a), AT_OK);
    assert_int_equal(rec_device_fingerprint(&r, b), AT_OK);
    assert_string_equal(a, b);
    d.n_cores = 0;
    assert_int_equal(at_wire_fingerprint(&d, a), AT_EINVAL);
}

static void test_deep_copies(void **unused)
{
    at_wire_job j, c;
    at_arena a;
    (void)unused;
    fill_job(&j, "copy-me");
    at_arena_init(&a, 0);
    assert_int_equal(at_wire_job_copy(&a, &c, &j), AT_OK);
    assert_true(c.art.obj != j.art.obj);
    assert_memory_equal(c.art.obj, j.art.obj, j.art.obj_size);
    assert_string_equal(c.id, "copy-me");
    assert_true(c.art.args != j.art.args);
    assert_int_equal(c.art.args[1].shape[1], 4);
    at_arena_fini(&a);
}

/* A GPU artifact's 'gpu' part: round trip, deep copy, and what the decoder refuses. */
static void test_gpu_artifact(void **unused)
{
    static const char ptx[] = "//\n.version 9.0\n.target sm_90\n.entry at_kernel_k0(";
    static const struct {
        int field, value; /* launch 0: 0 grid x, 1 block x, 2 shared, 3 regs */
        const char *what;
    } bad[] = {
        {0, 0, "grid and block at least 1"},
        {1, 0, "grid and block at least 1"},
        {1, 2048, "at most 1024 threads"},
        {2, 2 << 20, "1 MiB shared"},
        {3, 256, "255 registers"},
        {2, -1, "integers"},
    };
    at_wire_launch l[2];
    at_wire_msg m, o;
    at_wire_job j;
    at_wire_ref r, rc;
    at_arena ar;
    at_buf b;
    char err[256];
    (void)unused;
    memset(l, 0, sizeof l);
    for (int k = 0; k < 2; k++) {
        snprintf(l[k].entry, sizeof l[k].entry, "at_kernel_k%d", k);
        l[k].grid[0] = 132 + k;
        l[k].grid[1] = l[k].grid[2] = 1;
        l[k].block[0] = 256;
        l[k].block[1] = 2;
        l[k].block[2] = 1;
        l[k].shared_bytes = 4096 * k;
        l[k].n_regs = 40 + k;
    }
    fill_job(&j, "gpu-0");
    j.art.obj = (const uint8_t *)ptx;
    j.art.obj_size = sizeof ptx;
    j.art.triple = "nvptx64-nvidia-cuda";
    j.art.ws_per_thread = 0;
    j.art.gpu_kind = AT_WIRE_GPU_PTX;
    j.art.gpu_arch = "sm_90";
    j.art.n_launches = 2;
    j.art.launches = l;
    at_wire_msg_init(&m, AT_WIRE_T_SUBMIT);
    m.u.submit.jobs = &j;
    m.u.submit.n_jobs = 1;
    m.u.submit.device_key = "h200";
    roundtrip(&m, &o);
    {
        const at_wire_artifact *a = &o.u.submit.jobs[0].art;
        assert_int_equal(a->gpu_kind, AT_WIRE_GPU_PTX);
        assert_string_equal(a->gpu_arch, "sm_90");
        assert_int_equal(a->n_launches, 2);
        assert_string_equal(a->launches[1].entry, "at_kernel_k1");
        assert_int_equal(a->launches[1].grid[0], 133);
        assert_int_equal(a->launches[0].block[1], 2);
        assert_int_equal(a->launches[1].shared_bytes, 4096);
        assert_int_equal(a->launches[1].n_regs, 41);
        assert_int_equal(a->obj_size, sizeof ptx);
    }
    at_wire_msg_fini(&o);
    /* a CPU artifact has no 'gpu' part after decoding */
    {
        at_wire_job cj;
        fill_job(&cj, "cpu-0");
        m.u.submit.jobs = &cj;
        roundtrip(&m, &o);
        assert_int_equal(o.u.submit.jobs[0].art.gpu_kind, AT_WIRE_GPU_NONE);
        assert_int_equal(o.u.submit.jobs[0].art.n_launches, 0);
        at_wire_msg_fini(&o);
        m.u.submit.jobs = &j;
    }
    /* deep copy of a GPU reference */
    memset(&r, 0, sizeof r);
    memset(r.id, 0x5a, sizeof r.id);
    r.art = j.art;
    at_arena_init(&ar, 0);
    assert_int_equal(at_wire_ref_copy(&ar, &rc, &r), AT_OK);
    assert_true(rc.art.launches != l);
    assert_string_equal(rc.art.gpu_arch, "sm_90");
    assert_string_equal(rc.art.launches[1].entry, "at_kernel_k1");
    at_arena_fini(&ar);
    /* the decoder refuses launches a GPU cannot run, and names the field */
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        at_wire_launch save = l[0];
        switch (bad[k].field) {
        case 0: l[0].grid[0] = bad[k].value; break;
        case 1: l[0].block[0] = bad[k].value; break;
        case 2: l[0].shared_bytes = bad[k].value; break;
        default: l[0].n_regs = bad[k].value; break;
        }
        at_buf_init(&b);
        assert_int_equal(at_wire_encode(NULL, &m, &b), AT_OK);
        assert_int_equal(at_wire_decode(NULL, b.data, b.len, &o, err, sizeof err), AT_EPROTO);
        if (strstr(err, "'gpu'") == NULL || strstr(err, bad[k].what) == NULL)
            fail_msg("case %zu: '%s' (wanted 'gpu' and '%s')", k, err, bad[k].what);
        at_buf_fini(&b);
        l[0] = save;
    }
    /* an architecture that is not sm_XX */
    j.art.gpu_arch = "compute_90";
    at_buf_init(&b);
    assert_int_equal(at_wire_encode(NULL, &m, &b), AT_OK);
    assert_int_equal(at_wire_decode(NULL, b.data, b.len, &o, err, sizeof err), AT_EPROTO);
    assert_non_null(strstr(err, "sm_XX"));
    at_buf_fini(&b);
    j.art.gpu_arch = "sm_90";
    /* the encoder refuses no launches, an unknown kind, and a GPU artifact with a layout
    ** rewrite */
    j.art.n_launches = 0;
    at_buf_init(&b);
    assert_int_not_equal(at_wire_encode(NULL, &m, &b), AT_OK);
    at_buf_fini(&b);
    j.art.n_launches = 2;
    j.art.gpu_kind = 7;
    at_buf_init(&b);
    assert_int_not_equal(at_wire_encode(NULL, &m, &b), AT_OK);
    at_buf_fini(&b);
    j.art.gpu_kind = AT_WIRE_GPU_CUBIN;
    j.art.pre_entry = "at_kernel_pre";
    j.art.n_pre = 1;
    j.art.pre[0] = (at_wire_layout){1, 2, {8, 4}};
    at_buf_init(&b);
    assert_int_not_equal(at_wire_encode(NULL, &m, &b), AT_OK);
    at_buf_fini(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_all),
        cmocka_unit_test(test_encode_refuses_out_of_bounds),
        cmocka_unit_test(test_malformed_frames),
        cmocka_unit_test(test_bad_fields_named),
        cmocka_unit_test(test_layout_rewrite),
        cmocka_unit_test(test_hmac_vectors),
        cmocka_unit_test(test_mac_bytes_match_the_old_implementation),
        cmocka_unit_test(test_session_mac_and_replay),
        cmocka_unit_test(test_key_files),
        cmocka_unit_test(test_fingerprint_matches_records),
        cmocka_unit_test(test_deep_copies),
        cmocka_unit_test(test_gpu_artifact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
