/* tests/tools/wire_seeds.c -- write one valid frame of every message type, as seed corpora
** for the fuzz targets (scripts/fuzz.sh runs it):
**
**   wire_seeds DIR     frames in DIR/wire, flag byte + payload in DIR/session,
**                      key file texts in DIR/key */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/wire.h"

static uint8_t obj[96];
static at_wire_arg args[2] = {{AT_DT_F32, 0, 2, {4, 8}}, {AT_DT_F32, 1, 1, {32}}};
static int n_written;

static void put(const char *dir, const char *sub, const char *name, const void *p, size_t n)
{
    char path[1024];
    FILE *f;
    snprintf(path, sizeof path, "%s/%s/%s", dir, sub, name);
    if ((f = fopen(path, "wb")) == NULL) return;
    fwrite(p, 1, n, f);
    fclose(f);
    n_written++;
}

static void emit(const char *dir, at_wire_msg *m, const char *name)
{
    at_buf b;
    at_buf_init(&b);
    if (at_wire_encode(NULL, m, &b) == AT_OK) {
        put(dir, "wire", name, b.data, b.len);
        for (int flags = 0; flags < 8; flags += 2) { /* signed by the fuzz target */
            char sname[128];
            at_buf s;
            at_buf_init(&s);
            at_buf_putc(&s, (char)(flags | 2 | (flags >> 1 & 1)));
            at_buf_put(&s, b.data, b.len - AT_WIRE_TAG_BYTES);
            snprintf(sname, sizeof sname, "%s-%d", name, flags);
            put(dir, "session", sname, s.data, s.len);
            at_buf_fini(&s);
        }
    }
    at_buf_fini(&b);
    at_wire_msg_fini(m);
}

int main(int argc, char **argv)
{
    const char *dir;
    char path[1024];
    at_wire_msg m;
    at_wire_job job;
    at_wire_ref ref;
    at_wire_result res;
    double costs[2] = {1e-3, 2e-3};
    const char *ids[1] = {"j0"};
    at_wire_keyinfo ki = {"x86", 2, 1, 3};
    const uint8_t *outs[1];
    size_t out_n[1] = {16};
    at_wire_refout ro;

    if (argc != 2) {
        fprintf(stderr, "usage: wire_seeds DIR\n");
        return 2;
    }
    dir = argv[1];
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/wire", dir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/session", dir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/key", dir);
    mkdir(path, 0755);
    for (size_t i = 0; i < sizeof obj; i++)
        obj[i] = (uint8_t)i;
    memset(&job, 0, sizeof job);
    job.id = "run-0";
    job.art = (at_wire_artifact){.obj = obj,
                                 .obj_size = sizeof obj,
                                 .entry = "at_kernel",
                                 .triple = "x86_64-pc-linux-gnu",
                                 .n_args = 2,
                                 .args = args,
                                 .ws_fixed = 64,
                                 .ws_per_thread = 8,
                                 .pre_entry = "at_kernel_pre",
                                 .n_pre = 1,
                                 .pre = {{0, 3, {2, 4, 4}}}};
    at_wire_settings_default(&job.run);
    job.run.cutoff_s = 0.01; /* the optional keys, so that the fuzzer starts from them too */
    job.run.flush_cache = 1;
    job.run.flush_args = 2;
    job.seed = 3;
    job.has_ref = 1;
    memset(job.ref, 7, sizeof job.ref);
    memset(&ref, 0, sizeof ref);
    memset(ref.id, 7, sizeof ref.id);
    ref.art = job.art;
    ref.art.n_pre = 0; /* references read the task's own layouts */
    memset(&res, 0, sizeof res);
    res.id = "run-0";
    res.costs = costs;
    res.n_costs = 2;
    res.error = "";
    res.dev = (at_wire_device){"x86_64", "cpu", "6.1", "", 2};

    at_wire_msg_init(&m, AT_WIRE_T_HELLO);
    m.u.hello.version = AT_WIRE_VERSION;
    m.u.hello.role = AT_WIRE_ROLE_AGENT;
    m.u.hello.client_id = "c1";
    m.u.hello.n_keys = 1;
    emit(dir, &m, "hello");
    at_wire_msg_init(&m, AT_WIRE_T_CHALLENGE);
    m.u.challenge.version = AT_WIRE_VERSION;
    emit(dir, &m, "challenge");
    at_wire_msg_init(&m, AT_WIRE_T_AUTH);
    emit(dir, &m, "auth");
    at_wire_msg_init(&m, AT_WIRE_T_WELCOME);
    m.u.welcome.tracker_id = "t";
    m.u.welcome.lease_ms = m.u.welcome.heartbeat_ms = m.u.welcome.hold_ms = 1000;
    emit(dir, &m, "welcome");
    at_wire_msg_init(&m, AT_WIRE_T_ERROR);
    m.u.error.code = AT_EAUTH;
    m.u.error.text = "no";
    emit(dir, &m, "error");
    at_wire_msg_init(&m, AT_WIRE_T_REGISTER);
    m.u.reg.device_key = "x86";
    m.u.reg.triple = "x86_64-pc-linux-gnu";
    m.u.reg.dev = res.dev;
    m.u.reg.n_threads = 2;
    m.u.reg.max_batch = 8;
    emit(dir, &m, "register");
    at_wire_msg_init(&m, AT_WIRE_T_REGISTERED);
    m.u.registered.agent_id = "a#1";
    emit(dir, &m, "registered");
    at_wire_msg_init(&m, AT_WIRE_T_AGENT_POLL);
    m.u.apoll.n_free = 4;
    m.u.apoll.results = &res;
    m.u.apoll.n_results = 1;
    m.u.apoll.returned = ids;
    m.u.apoll.n_returned = 1;
    emit(dir, &m, "agent_poll");
    at_wire_msg_init(&m, AT_WIRE_T_AGENT_WORK);
    m.u.work.jobs = &job;
    m.u.work.n_jobs = 1;
    m.u.work.refs = &ref;
    m.u.work.n_refs = 1;
    m.u.work.cancel = ids;
    m.u.work.n_cancel = 1;
    emit(dir, &m, "agent_work");
    at_wire_msg_init(&m, AT_WIRE_T_SUBMIT);
    m.u.submit.device_key = "x86";
    m.u.submit.jobs = &job;
    m.u.submit.n_jobs = 1;
    m.u.submit.refs = &ref;
    m.u.submit.n_refs = 1;
    emit(dir, &m, "submit");
    at_wire_msg_init(&m, AT_WIRE_T_SUBMITTED);
    m.u.submitted.n_accepted = 1;
    m.u.submitted.keys = &ki;
    m.u.submitted.n_keys = 1;
    emit(dir, &m, "submitted");
    at_wire_msg_init(&m, AT_WIRE_T_TUNER_POLL);
    m.u.tpoll.ack = 3;
    emit(dir, &m, "tuner_poll");
    at_wire_msg_init(&m, AT_WIRE_T_RESULTS);
    m.u.results.results = &res;
    m.u.results.n_results = 1;
    emit(dir, &m, "results");
    at_wire_msg_init(&m, AT_WIRE_T_CANCEL);
    m.u.cancel.ids = ids;
    m.u.cancel.n_ids = 1;
    emit(dir, &m, "cancel");
    at_wire_msg_init(&m, AT_WIRE_T_CANCELED);
    emit(dir, &m, "canceled");
    at_wire_msg_init(&m, AT_WIRE_T_STATUS_QUERY);
    emit(dir, &m, "status_query");
    at_wire_msg_init(&m, AT_WIRE_T_STATUS);
    m.u.status.json = "{\"agents\":[]}";
    emit(dir, &m, "status");
    outs[0] = obj;
    memset(&ro, 0, sizeof ro);
    memset(ro.ref, 7, sizeof ro.ref);
    ro.n_outputs = 1;
    ro.data = outs;
    ro.n_bytes = out_n;
    at_wire_msg_init(&m, AT_WIRE_T_SBX_BATCH);
    m.u.batch.jobs = &job;
    m.u.batch.n_jobs = 1;
    m.u.batch.refs = &ref;
    m.u.batch.n_refs = 1;
    m.u.batch.refouts = &ro;
    m.u.batch.n_refouts = 1;
    m.u.batch.default_threads = 1;
    emit(dir, &m, "sbx_batch");
    /* GPU artifacts: a job and its reference with the 'gpu' part (PTX, two launches) */
    {
        static const char ptx[] = ".version 9.0\n.target sm_90\n.entry at_kernel_k0(";
        static at_wire_launch gl[2] = {{"at_kernel_k0", {8, 1, 1}, {256, 1, 1}, 0, 32},
                                       {"at_kernel_k1", {4, 2, 1}, {32, 4, 1}, 8192, 64}};
        at_wire_job gjob = job;
        at_wire_ref gref = ref;
        gjob.id = "gpu-0";
        gjob.art.obj = (const uint8_t *)ptx;
        gjob.art.obj_size = sizeof ptx;
        gjob.art.triple = "nvptx64-nvidia-cuda";
        gjob.art.n_pre = 0;
        gjob.art.ws_per_thread = 0;
        gjob.art.gpu_kind = AT_WIRE_GPU_PTX;
        gjob.art.gpu_arch = "sm_90";
        gjob.art.n_launches = 2;
        gjob.art.launches = gl;
        gref.art = gjob.art;
        at_wire_msg_init(&m, AT_WIRE_T_SUBMIT);
        m.u.submit.device_key = "h200";
        m.u.submit.jobs = &gjob;
        m.u.submit.n_jobs = 1;
        m.u.submit.refs = &gref;
        m.u.submit.n_refs = 1;
        emit(dir, &m, "submit_gpu");
        at_wire_msg_init(&m, AT_WIRE_T_AGENT_WORK);
        m.u.work.jobs = &gjob;
        m.u.work.n_jobs = 1;
        m.u.work.refs = &gref;
        m.u.work.n_refs = 1;
        emit(dir, &m, "agent_work_gpu");
        at_wire_msg_init(&m, AT_WIRE_T_SBX_BATCH);
        m.u.batch.jobs = &gjob;
        m.u.batch.n_jobs = 1;
        m.u.batch.refs = &gref;
        m.u.batch.n_refs = 1;
        m.u.batch.default_threads = 1;
        emit(dir, &m, "sbx_batch_gpu");
    }
    at_wire_msg_init(&m, AT_WIRE_T_SBX_EVENT);
    m.u.event.kind = AT_WIRE_SBX_RESULT;
    m.u.event.result = res;
    emit(dir, &m, "sbx_result");
    at_wire_msg_init(&m, AT_WIRE_T_SBX_EVENT);
    m.u.event.kind = AT_WIRE_SBX_REFOUT;
    m.u.event.n_outputs = 1;
    m.u.event.total = 16;
    m.u.event.data = obj;
    m.u.event.n = 16;
    emit(dir, &m, "sbx_refout");
    /* a tuner and its build workers */
    at_wire_msg_init(&m, AT_WIRE_T_BUILD_REQ);
    m.u.build.id = 42;
    m.u.build.target = "x86_64-linux-gnu";
    m.u.build.dag = "input A[4] float32\nB[i:4] = A[i] * 2.0\n";
    m.u.build.state = "{\"steps\":[]}";
    emit(dir, &m, "build_req");
    at_wire_msg_init(&m, AT_WIRE_T_BUILD_RES);
    m.u.built.id = 42;
    m.u.built.compile_s = 0.25;
    m.u.built.art = job.art;
    emit(dir, &m, "build_res");
    at_wire_msg_init(&m, AT_WIRE_T_BUILD_RES);
    m.u.built.id = 43;
    m.u.built.err = AT_ECODEGEN;
    m.u.built.text = "LLVM refused the module";
    emit(dir, &m, "build_res_error");
    put(dir, "key", "good.txt",
        "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n", 65);
    put(dir, "key", "short.txt", "0011\n", 5);
    printf("wire_seeds: %d files in %s\n", n_written, dir);
    return 0;
}
