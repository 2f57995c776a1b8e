/* common/at_wire.c -- encoding and decoding of the fleet's messages (msgpack-c).
**
** A frame is one msgpack array [version, type, seq, re, body] followed by a 32-byte tag.
** 'body' is a map with short string keys (docs/protocol.md lists them).  Decoding is in
** three steps: a bounds scan of the raw bytes (prescan: every container's count fits in
** the bytes left, nesting and the number of values are bounded, no ext types), so that
** msgpack-c's unpacker never allocates more than a small multiple of the frame; then
** msgpack_unpack_next into a zone; then the fields, each checked for type and range.
** Strings are copied into the message's arena (NUL-terminated, no embedded NUL); byte
** arrays point into the frame. */
#include "common/wire.h"

#include <math.h>
#include <msgpack.h>
#include <stdio.h>
#include <string.h>

static const char *const type_names[] = {
#define X(num, name, who, what) [num] = #name,
    AT_WIRE_MSG_MAP(X)
#undef X
};

const char *at_wire_type_name(int type)
{
    if (type < 0 || (size_t)type >= AT_ARRAY_LEN(type_names) || type_names[type] == NULL)
        return "?";
    return type_names[type];
}

const char *at_wire_role_name(int role)
{
    switch (role) {
    case AT_WIRE_ROLE_AGENT:
        return "agent";
    case AT_WIRE_ROLE_TUNER:
        return "tuner";
    case AT_WIRE_ROLE_STATUS:
        return "status";
    default:
        return "?";
    }
}

void at_wire_msg_init(at_wire_msg *m, int type)
{
    memset(m, 0, sizeof *m);
    m->type = type;
    m->version = AT_WIRE_VERSION;
    at_arena_init(&m->arena, 0);
}

void at_wire_msg_fini(at_wire_msg *m)
{
    at_arena_fini(&m->arena);
    memset(&m->u, 0, sizeof m->u);
}

void at_wire_settings_default(at_wire_settings *s)
{
    memset(s, 0, sizeof *s);
    s->number = 1;
    s->repeat = 3;
    s->min_repeat_ms = 0;
    s->timeout_ms = 10000;
    s->n_warmup = 1;
}

/* ==== encoding ========================================================================= */

typedef struct enc {
    msgpack_packer pk;
    at_buf *out;
    at_err err; /* first bound violation */
    char what[96];
} enc;

static int enc_write(void *data, const char *p, size_t n)
{
    at_buf *b = data;
    at_buf_put(b, p, n);
    return b->err == AT_OK ? 0 : -1;
}

static void bad(enc *e, const char *what)
{
    if (e->err == AT_OK) {
        e->err = AT_EINVAL;
        snprintf(e->what, sizeof e->what, "%s", what);
    }
}

static void p_key(enc *e, const char *k)
{
    size_t n = strlen(k);
    msgpack_pack_str(&e->pk, n);
    msgpack_pack_str_body(&e->pk, k, n);
}

static void p_str(enc *e, const char *s, size_t max, const char *what)
{
    size_t n;
    if (s == NULL) s = "";
    n = strlen(s);
    if (n > max) {
        bad(e, what);
        n = 0;
    }
    msgpack_pack_str(&e->pk, n);
    msgpack_pack_str_body(&e->pk, s, n);
}

static void p_bin(enc *e, const void *p, size_t n)
{
    msgpack_pack_bin(&e->pk, n);
    if (n) msgpack_pack_bin_body(&e->pk, p, n);
}

static void kv_int(enc *e, const char *k, int64_t v)
{
    p_key(e, k);
    msgpack_pack_int64(&e->pk, v);
}

static void kv_u64(enc *e, const char *k, uint64_t v)
{
    p_key(e, k);
    msgpack_pack_uint64(&e->pk, v);
}

static void kv_dbl(enc *e, const char *k, double v)
{
    p_key(e, k);
    msgpack_pack_double(&e->pk, v);
}

static void kv_bool(enc *e, const char *k, int v)
{
    p_key(e, k);
    if (v)
        msgpack_pack_true(&e->pk);
    else
        msgpack_pack_false(&e->pk);
}

static void kv_str(enc *e, const char *k, const char *s, size_t max)
{
    p_key(e, k);
    p_str(e, s, max, k);
}

static void kv_bin(enc *e, const char *k, const void *p, size_t n)
{
    p_key(e, k);
    p_bin(e, p, n);
}

static void p_strs(enc *e, const char *k, const char *const *v, int n, int max)
{
    p_key(e, k);
    if (n < 0 || n > max || (n > 0 && v == NULL)) {
        bad(e, k);
        n = 0;
    }
    msgpack_pack_array(&e->pk, (size_t)n);
    for (int i = 0; i < n; i++)
        p_str(e, v[i], AT_WIRE_MAX_NAME, k);
}

/* "pre": {"entry": name, "lay": [[arg, [dims]], ...]} (present only when n_pre > 0) */
static void p_pre(enc *e, const at_wire_artifact *a)
{
    int n = a->n_pre;
    p_key(e, "pre");
    msgpack_pack_map(&e->pk, 2);
    kv_str(e, "entry", a->pre_entry, 63);
    if (a->pre_entry == NULL || a->pre_entry[0] == 0) bad(e, "pre");
    p_key(e, "lay");
    if (n > AT_WIRE_MAX_PRE || n > a->n_args) {
        bad(e, "pre");
        n = 0;
    }
    msgpack_pack_array(&e->pk, (size_t)n);
    for (int k = 0; k < n; k++) {
        const at_wire_layout *l = &a->pre[k];
        int nd = l->n_dims;
        if (nd < 1 || nd > AT_WIRE_MAX_DIMS) {
            bad(e, "pre");
            nd = 0;
        }
        msgpack_pack_array(&e->pk, 2);
        msgpack_pack_int(&e->pk, l->arg);
        msgpack_pack_array(&e->pk, (size_t)nd);
        for (int d = 0; d < nd; d++)
            msgpack_pack_int64(&e->pk, l->shape[d]);
    }
}

/* "gpu": {"kind": 1 (PTX) or 2 (cubin), "arch": "sm_90", "launches": [[entry, gx, gy, gz,
** bx, by, bz, shared, regs], ...]} (present only for GPU artifacts) */
static void p_gpu(enc *e, const at_wire_artifact *a)
{
    int n = a->n_launches;
    p_key(e, "gpu");
    msgpack_pack_map(&e->pk, 3);
    kv_int(e, "kind", a->gpu_kind);
    kv_str(e, "arch", a->gpu_arch, 15);
    p_key(e, "launches");
    if (n < 1 || n > AT_WIRE_MAX_LAUNCHES || a->launches == NULL || a->n_pre > 0 ||
        (a->gpu_kind != AT_WIRE_GPU_PTX && a->gpu_kind != AT_WIRE_GPU_CUBIN)) {
        bad(e, "gpu");
        n = 0;
    }
    msgpack_pack_array(&e->pk, (size_t)n);
    for (int k = 0; k < n; k++) {
        const at_wire_launch *l = &a->launches[k];
        msgpack_pack_array(&e->pk, 9);
        p_str(e, l->entry, 63, "gpu");
        for (int d = 0; d < 3; d++)
            msgpack_pack_int(&e->pk, l->grid[d]);
        for (int d = 0; d < 3; d++)
            msgpack_pack_int(&e->pk, l->block[d]);
        msgpack_pack_int(&e->pk, l->shared_bytes);
        msgpack_pack_int(&e->pk, l->n_regs);
    }
}

/* The keys p_artifact writes: 6, one more with a layout rewrite, one more for a GPU. */
static int artifact_keys(const at_wire_artifact *a)
{
    return 6 + (a->n_pre > 0 ? 1 : 0) + (a->gpu_kind != AT_WIRE_GPU_NONE ? 1 : 0);
}

static void p_artifact(enc *e, const at_wire_artifact *a)
{
    kv_bin(e, "obj", a->obj, a->obj_size);
    if (a->obj_size > AT_WIRE_MAX_OBJ || (a->obj_size > 0 && a->obj == NULL)) bad(e, "obj");
    kv_str(e, "entry", a->entry, 63);
    kv_str(e, "triple", a->triple, AT_WIRE_MAX_NAME);
    kv_int(e, "wsf", a->ws_fixed);
    kv_int(e, "wst", a->ws_per_thread);
    p_key(e, "args");
    if (a->n_args < 0 || a->n_args > AT_WIRE_MAX_ARGS || (a->n_args > 0 && a->args == NULL)) {
        bad(e, "args");
        msgpack_pack_array(&e->pk, 0);
        return;
    }
    msgpack_pack_array(&e->pk, (size_t)a->n_args);
    for (int i = 0; i < a->n_args; i++) {
        const at_wire_arg *g = &a->args[i];
        int nd = g->n_dims;
        if (nd < 0 || nd > AT_WIRE_MAX_DIMS) {
            bad(e, "dims");
            nd = 0;
        }
        msgpack_pack_array(&e->pk, 3);
        msgpack_pack_int(&e->pk, g->dtype);
        msgpack_pack_int(&e->pk, g->is_output ? 1 : 0);
        msgpack_pack_array(&e->pk, (size_t)nd);
        for (int d = 0; d < nd; d++)
            msgpack_pack_int64(&e->pk, g->shape[d]);
    }
    if (a->n_pre > 0) p_pre(e, a);
    if (a->gpu_kind != AT_WIRE_GPU_NONE) p_gpu(e, a);
}

static void p_settings(enc *e, const at_wire_settings *s)
{
    int fargs = s->flush_cache && s->flush_args != 0;
    msgpack_pack_map(&e->pk, 8 + (s->cutoff_s > 0) + fargs);
    kv_int(e, "number", s->number);
    kv_int(e, "repeat", s->repeat);
    kv_dbl(e, "min_ms", s->min_repeat_ms);
    kv_bool(e, "flush", s->flush_cache);
    kv_int(e, "timeout_ms", s->timeout_ms);
    kv_int(e, "cool_ms", s->cooldown_ms);
    kv_int(e, "threads", s->n_threads);
    kv_int(e, "warmup", s->n_warmup);
    if (s->cutoff_s > 0) kv_dbl(e, "cutoff_s", s->cutoff_s);
    if (fargs) kv_int(e, "flush_args", (int64_t)(s->flush_args & ~((uint64_t)1 << 63)));
}

static void p_job(enc *e, const at_wire_job *j)
{
    msgpack_pack_map(&e->pk, 4 + artifact_keys(&j->art) + (j->has_ref ? 1 : 0));
    kv_str(e, "id", j->id, AT_WIRE_MAX_NAME);
    p_artifact(e, &j->art);
    p_key(e, "run");
    p_settings(e, &j->run);
    kv_u64(e, "seed", j->seed);
    kv_int(e, "v", 1);
    if (j->has_ref) kv_bin(e, "ref", j->ref, AT_WIRE_REFID_BYTES);
}

static void p_ref(enc *e, const at_wire_ref *r)
{
    msgpack_pack_map(&e->pk, 1 + artifact_keys(&r->art));
    kv_bin(e, "id", r->id, AT_WIRE_REFID_BYTES);
    p_artifact(e, &r->art);
}

static void p_devstate(enc *e, const at_wire_devstate *d)
{
    msgpack_pack_map(&e->pk, 6);
    kv_dbl(e, "mhz", d->cpu_mhz);
    kv_dbl(e, "max_mhz", d->cpu_max_mhz);
    kv_dbl(e, "temp_c", d->temp_c);
    kv_dbl(e, "load1", d->load1);
    kv_bool(e, "throttled", d->throttled);
    kv_bool(e, "loaded", d->loaded);
}

static void p_device(enc *e, const at_wire_device *d)
{
    msgpack_pack_map(&e->pk, 5);
    kv_str(e, "arch", d->arch, AT_WIRE_MAX_NAME);
    kv_str(e, "model", d->model, AT_WIRE_MAX_NAME);
    kv_int(e, "cores", d->n_cores);
    kv_str(e, "os", d->os, AT_WIRE_MAX_NAME);
    kv_str(e, "driver", d->driver, AT_WIRE_MAX_NAME);
}

static void p_result(enc *e, const at_wire_result *r)
{
    msgpack_pack_map(&e->pk, 12);
    kv_str(e, "id", r->id, AT_WIRE_MAX_NAME);
    kv_int(e, "status", r->status);
    kv_dbl(e, "median", r->median_s);
    p_key(e, "costs");
    if (r->n_costs < 0 || r->n_costs > AT_WIRE_MAX_COSTS || (r->n_costs && r->costs == NULL)) {
        bad(e, "costs");
        msgpack_pack_array(&e->pk, 0);
    } else {
        msgpack_pack_array(&e->pk, (size_t)r->n_costs);
        for (int i = 0; i < r->n_costs; i++)
            msgpack_pack_double(&e->pk, r->costs[i]);
    }
    kv_str(e, "err", r->error, AT_WIRE_MAX_TEXT);
    kv_dbl(e, "at", r->measured_at);
    kv_dbl(e, "run_s", r->run_s);
    p_key(e, "state");
    p_devstate(e, &r->state);
    kv_str(e, "agent", r->agent, AT_WIRE_MAX_NAME);
    kv_str(e, "fp", r->fingerprint, AT_WIRE_MAX_NAME);
    p_key(e, "dev");
    p_device(e, &r->dev);
    kv_int(e, "v", 1);
}

static void p_jobs(enc *e, const char *k, const at_wire_job *v, int n)
{
    p_key(e, k);
    if (n < 0 || n > AT_WIRE_MAX_JOBS || (n && v == NULL)) {
        bad(e, k);
        n = 0;
    }
    msgpack_pack_array(&e->pk, (size_t)n);
    for (int i = 0; i < n; i++)
        p_job(e, &v[i]);
}

static void p_refs(enc *e, const char *k, const at_wire_ref *v, int n)
{
    p_key(e, k);
    if (n < 0 || n > AT_WIRE_MAX_REFS || (n && v == NULL)) {
        bad(e, k);
        n = 0;
    }
    msgpack_pack_array(&e->pk, (size_t)n);
    for (int i = 0; i < n; i++)
        p_ref(e, &v[i]);
}

static void p_results(enc *e, const char *k, const at_wire_result *v, int n)
{
    p_key(e, k);
    if (n < 0 || n > AT_WIRE_MAX_JOBS || (n && v == NULL)) {
        bad(e, k);
        n = 0;
    }
    msgpack_pack_array(&e->pk, (size_t)n);
    for (int i = 0; i < n; i++)
        p_result(e, &v[i]);
}

static void p_body(enc *e, const at_wire_msg *m)
{
    msgpack_packer *pk = &e->pk;
    switch (m->type) {
    case AT_WIRE_T_HELLO: {
        const at_wire_hello *h = &m->u.hello;
        msgpack_pack_map(pk, 7);
        kv_int(e, "version", h->version);
        kv_int(e, "role", h->role);
        kv_str(e, "name", h->name, AT_WIRE_MAX_NAME);
        kv_str(e, "id", h->client_id, AT_WIRE_MAX_NAME);
        kv_bin(e, "nonce", h->nonce, AT_WIRE_NONCE_BYTES);
        kv_str(e, "sw", h->software, AT_WIRE_MAX_NAME);
        p_key(e, "keys");
        if (h->n_keys < 0 || h->n_keys > 4) {
            bad(e, "keys");
            msgpack_pack_array(pk, 0);
            break;
        }
        msgpack_pack_array(pk, (size_t)h->n_keys);
        for (int i = 0; i < h->n_keys; i++)
            p_bin(e, h->key_ids[i], AT_WIRE_KEYID_BYTES);
        break;
    }
    case AT_WIRE_T_CHALLENGE:
        msgpack_pack_map(pk, 3);
        kv_int(e, "version", m->u.challenge.version);
        kv_bin(e, "nonce", m->u.challenge.nonce, AT_WIRE_NONCE_BYTES);
        kv_bin(e, "key", m->u.challenge.key_id, AT_WIRE_KEYID_BYTES);
        break;
    case AT_WIRE_T_AUTH:
    case AT_WIRE_T_STATUS_QUERY:
        msgpack_pack_map(pk, 0);
        break;
    case AT_WIRE_T_WELCOME:
        msgpack_pack_map(pk, 4);
        kv_str(e, "tracker", m->u.welcome.tracker_id, AT_WIRE_MAX_NAME);
        kv_int(e, "lease_ms", m->u.welcome.lease_ms);
        kv_int(e, "hb_ms", m->u.welcome.heartbeat_ms);
        kv_int(e, "hold_ms", m->u.welcome.hold_ms);
        break;
    case AT_WIRE_T_ERROR:
        msgpack_pack_map(pk, 2);
        kv_int(e, "code", m->u.error.code);
        kv_str(e, "text", m->u.error.text, AT_WIRE_MAX_TEXT);
        break;
    case AT_WIRE_T_REGISTER: {
        const at_wire_register *r = &m->u.reg;
        msgpack_pack_map(pk, 10);
        kv_str(e, "key", r->device_key, AT_WIRE_MAX_NAME);
        kv_str(e, "triple", r->triple, AT_WIRE_MAX_NAME);
        kv_str(e, "features", r->features, AT_WIRE_MAX_FEATURES);
        kv_str(e, "gpu", r->gpu, AT_WIRE_MAX_NAME);
        p_key(e, "dev");
        p_device(e, &r->dev);
        kv_str(e, "fp", r->fingerprint, AT_WIRE_MAX_NAME);
        p_key(e, "sandbox");
        msgpack_pack_map(pk, 4);
        kv_bool(e, "seccomp", r->sandbox.seccomp);
        kv_bool(e, "rlimits", r->sandbox.rlimits);
        kv_bool(e, "guard", r->sandbox.guard);
        kv_str(e, "note", r->sandbox.note, AT_WIRE_MAX_TEXT);
        kv_int(e, "threads", r->n_threads);
        kv_int(e, "batch", r->max_batch);
        kv_bool(e, "bench", r->bench_ack);
        break;
    }
    case AT_WIRE_T_REGISTERED:
        msgpack_pack_map(pk, 1);
        kv_str(e, "agent", m->u.registered.agent_id, AT_WIRE_MAX_NAME);
        break;
    case AT_WIRE_T_AGENT_POLL: {
        const at_wire_agent_poll *a = &m->u.apoll;
        int nn = a->n_need_refs;
        msgpack_pack_map(pk, 6);
        kv_int(e, "held", a->n_held);
        kv_int(e, "free", a->n_free);
        p_key(e, "state");
        p_devstate(e, &a->state);
        p_results(e, "results", a->results, a->n_results);
        p_strs(e, "returned", a->returned, a->n_returned, AT_WIRE_MAX_JOBS);
        p_key(e, "need_refs");
        if (nn < 0 || nn > AT_WIRE_MAX_REFS || (nn && a->need_refs == NULL)) {
            bad(e, "need_refs");
            nn = 0;
        }
        msgpack_pack_array(pk, (size_t)nn);
        for (int i = 0; i < nn; i++)
            p_bin(e, a->need_refs[i], AT_WIRE_REFID_BYTES);
        break;
    }
    case AT_WIRE_T_AGENT_WORK: {
        const at_wire_agent_work *w = &m->u.work;
        msgpack_pack_map(pk, 3);
        p_jobs(e, "jobs", w->jobs, w->n_jobs);
        p_refs(e, "refs", w->refs, w->n_refs);
        p_strs(e, "cancel", w->cancel, w->n_cancel, AT_WIRE_MAX_JOBS);
        break;
    }
    case AT_WIRE_T_SUBMIT: {
        const at_wire_submit *s = &m->u.submit;
        msgpack_pack_map(pk, 4);
        kv_str(e, "key", s->device_key, AT_WIRE_MAX_NAME);
        kv_int(e, "prio", s->priority);
        p_refs(e, "refs", s->refs, s->n_refs);
        p_jobs(e, "jobs", s->jobs, s->n_jobs);
        break;
    }
    case AT_WIRE_T_SUBMITTED: {
        const at_wire_submitted *s = &m->u.submitted;
        int nk = s->n_keys;
        msgpack_pack_map(pk, 4);
        kv_int(e, "accepted", s->n_accepted);
        kv_int(e, "known", s->n_known);
        kv_int(e, "agents", s->n_agents);
        p_key(e, "keys");
        if (nk < 0 || nk > AT_WIRE_MAX_JOBS || (nk && s->keys == NULL)) {
            bad(e, "keys");
            nk = 0;
        }
        msgpack_pack_array(pk, (size_t)nk);
        for (int i = 0; i < nk; i++) {
            msgpack_pack_array(pk, 4);
            p_str(e, s->keys[i].key, AT_WIRE_MAX_NAME, "keys");
            msgpack_pack_int(pk, s->keys[i].n_agents);
            msgpack_pack_int(pk, s->keys[i].n_idle);
            msgpack_pack_int(pk, s->keys[i].n_queued);
        }
        break;
    }
    case AT_WIRE_T_TUNER_POLL:
        msgpack_pack_map(pk, 2);
        kv_u64(e, "ack", m->u.tpoll.ack);
        kv_int(e, "hold_ms", m->u.tpoll.hold_ms);
        break;
    case AT_WIRE_T_RESULTS: {
        const at_wire_results *r = &m->u.results;
        msgpack_pack_map(pk, 5);
        kv_u64(e, "first", r->first);
        p_results(e, "results", r->results, r->n_results);
        kv_int(e, "queued", r->n_queued);
        kv_int(e, "inflight", r->n_inflight);
        kv_int(e, "agents", r->n_agents);
        break;
    }
    case AT_WIRE_T_CANCEL:
        msgpack_pack_map(pk, 2);
        kv_bool(e, "all", m->u.cancel.all);
        p_strs(e, "ids", m->u.cancel.ids, m->u.cancel.n_ids, AT_WIRE_MAX_JOBS);
        break;
    case AT_WIRE_T_CANCELED:
        msgpack_pack_map(pk, 1);
        kv_int(e, "n", m->u.canceled.n_canceled);
        break;
    case AT_WIRE_T_STATUS:
        msgpack_pack_map(pk, 1);
        kv_str(e, "json", m->u.status.json, AT_WIRE_MAX_JSON);
        break;
    case AT_WIRE_T_SBX_BATCH: {
        const at_wire_sbx_batch *b = &m->u.batch;
        int nr = b->n_refouts;
        msgpack_pack_map(pk, 5);
        p_jobs(e, "jobs", b->jobs, b->n_jobs);
        p_refs(e, "refs", b->refs, b->n_refs);
        kv_int(e, "threads", b->default_threads);
        kv_bool(e, "bench", b->bench_ack);
        p_key(e, "refouts");
        if (nr < 0 || nr > AT_WIRE_MAX_REFS || (nr && b->refouts == NULL)) {
            bad(e, "refouts");
            nr = 0;
        }
        msgpack_pack_array(pk, (size_t)nr);
        for (int i = 0; i < nr; i++) {
            const at_wire_refout *o = &b->refouts[i];
            int no = o->n_outputs;
            msgpack_pack_map(pk, 3);
            kv_bin(e, "ref", o->ref, AT_WIRE_REFID_BYTES);
            kv_u64(e, "seed", o->seed);
            p_key(e, "out");
            if (no < 0 || no > AT_WIRE_MAX_ARGS || (no && (!o->data || !o->n_bytes))) {
                bad(e, "refouts");
                no = 0;
            }
            msgpack_pack_array(pk, (size_t)no);
            for (int k = 0; k < no; k++)
                p_bin(e, o->data[k], o->n_bytes[k]);
        }
        break;
    }
    case AT_WIRE_T_SBX_EVENT: {
        const at_wire_sbx_event *v = &m->u.event;
        switch (v->kind) {
        case AT_WIRE_SBX_READY:
            msgpack_pack_map(pk, 2);
            kv_int(e, "kind", v->kind);
            kv_str(e, "note", v->note, AT_WIRE_MAX_TEXT);
            break;
        case AT_WIRE_SBX_START:
            msgpack_pack_map(pk, 2);
            kv_int(e, "kind", v->kind);
            kv_int(e, "index", v->index);
            break;
        case AT_WIRE_SBX_RESULT:
            msgpack_pack_map(pk, 3);
            kv_int(e, "kind", v->kind);
            kv_int(e, "index", v->index);
            p_key(e, "result");
            p_result(e, &v->result);
            break;
        case AT_WIRE_SBX_REFOUT:
            msgpack_pack_map(pk, 8);
            kv_int(e, "kind", v->kind);
            kv_bin(e, "ref", v->ref, AT_WIRE_REFID_BYTES);
            kv_u64(e, "seed", v->seed);
            kv_int(e, "output", v->output);
            kv_int(e, "n_outputs", v->n_outputs);
            kv_u64(e, "offset", v->offset);
            kv_u64(e, "total", v->total);
            kv_bin(e, "data", v->data, v->n);
            break;
        default:
            bad(e, "event kind");
            msgpack_pack_map(pk, 0);
        }
        break;
    }
    case AT_WIRE_T_BUILD_REQ: {
        const at_wire_build_req *r = &m->u.build;
        msgpack_pack_map(pk, 5);
        kv_int(e, "id", r->id);
        kv_str(e, "target", r->target, AT_WIRE_MAX_TEXT);
        kv_str(e, "dag", r->dag, AT_WIRE_MAX_JSON);
        kv_str(e, "state", r->state, AT_WIRE_MAX_JSON);
        kv_str(e, "entry", r->entry, 63);
        break;
    }
    case AT_WIRE_T_BUILD_RES: {
        const at_wire_build_res *r = &m->u.built;
        msgpack_pack_map(pk, r->err == 0 ? 5 : 3);
        kv_int(e, "id", r->id);
        kv_int(e, "err", r->err);
        kv_str(e, "text", r->text, AT_WIRE_MAX_TEXT);
        if (r->err == 0) {
            kv_dbl(e, "compile_s", r->compile_s);
            p_key(e, "art");
            msgpack_pack_map(pk, (size_t)artifact_keys(&r->art));
            p_artifact(e, &r->art);
        }
        break;
    }
    default:
        bad(e, "message type");
        msgpack_pack_map(pk, 0);
    }
}

/* 'C' for what a client sends, 'T' for what the tracker sends. */
static void tag_of(const uint8_t key[32], char dir, const void *p, size_t n, uint8_t out[32]);

at_err at_wire_encode(at_wire_session *s, at_wire_msg *m, at_buf *out)
{
    enc e;
    size_t start = out->len, payload;
    uint8_t tag[AT_WIRE_TAG_BYTES];

    memset(&e, 0, sizeof e);
    e.out = out;
    msgpack_packer_init(&e.pk, out, enc_write);
    m->version = AT_WIRE_VERSION;
    m->seq = s ? s->send_seq + 1 : 0;
    msgpack_pack_array(&e.pk, 5);
    msgpack_pack_int(&e.pk, m->version);
    msgpack_pack_int(&e.pk, m->type);
    msgpack_pack_uint64(&e.pk, m->seq);
    msgpack_pack_uint64(&e.pk, m->re);
    p_body(&e, m);
    if (out->err != AT_OK) return AT_ENOMEM;
    if (e.err != AT_OK) {
        at_log_debug("wire: cannot encode %s: field '%s' out of bounds", at_wire_type_name(m->type),
                     e.what);
        out->len = start;
        return e.err;
    }
    payload = out->len - start;
    if (payload + AT_WIRE_TAG_BYTES > AT_WIRE_MAX_MSG) {
        out->len = start;
        return AT_EINVAL;
    }
    memset(tag, 0, sizeof tag);
    if (s && s->keyed && m->type != AT_WIRE_T_HELLO)
        tag_of(s->skey, s->is_client ? 'C' : 'T', out->data + start, payload, tag);
    at_buf_put(out, tag, sizeof tag);
    if (out->err != AT_OK) return AT_ENOMEM;
    if (s) s->send_seq = m->seq;
    return AT_OK;
}

/* ==== decoding ========================================================================= */

/* The bounds scan.  Returns 0 if p[0..n) is exactly one msgpack value within the bounds. */
static int prescan(const uint8_t *p, size_t n, const char **why)
{
    size_t pos = 0, n_objects = 0;
    uint64_t left[AT_WIRE_MAX_DEPTH + 1]; /* values still expected at each level */
    int depth = 0;

    left[0] = 1;
    while (depth >= 0 && left[depth] > 0) {
        uint8_t b;
        uint64_t len = 0, count = 0;
        int is_container = 0, k;

        if (pos >= n) {
            *why = "truncated";
            return -1;
        }
        if (++n_objects > AT_WIRE_MAX_OBJECTS) {
            *why = "too many values";
            return -1;
        }
        left[depth]--;
        b = p[pos++];
        if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
            /* fixint, nil, bool */
        } else if (b >= 0x80 && b <= 0x8f) {
            count = 2u * (b & 0x0fu), is_container = 1;
        } else if (b >= 0x90 && b <= 0x9f) {
            count = b & 0x0fu, is_container = 1;
        } else if (b >= 0xa0 && b <= 0xbf) {
            len = b & 0x1fu;
        } else {
            switch (b) {
            case 0xcc:
            case 0xd0:
                len = 1;
                break;
            case 0xcd:
            case 0xd1:
                len = 2;
                break;
            case 0xca:
            case 0xce:
            case 0xd2:
                len = 4;
                break;
            case 0xcb:
            case 0xcf:
            case 0xd3:
                len = 8;
                break;
            case 0xc4:
            case 0xd9:
            case 0xc5:
            case 0xda:
            case 0xc6:
            case 0xdb:
            case 0xdc:
            case 0xdd:
            case 0xde:
            case 0xdf:
                k = (b == 0xc4 || b == 0xd9)                             ? 1
                    : (b == 0xc5 || b == 0xda || b == 0xdc || b == 0xde) ? 2
                                                                         : 4;
                if (n - pos < (size_t)k) {
                    *why = "truncated";
                    return -1;
                }
                for (int i = 0; i < k; i++)
                    len = len << 8 | p[pos + (size_t)i];
                pos += (size_t)k;
                if (b >= 0xdc) {
                    count = (b >= 0xde) ? 2 * len : len;
                    len = 0;
                    is_container = 1;
                }
                break;
            default: /* 0xc1 (never used) and the ext types */
                *why = "a msgpack type the protocol does not use";
                return -1;
            }
        }
        if (len > n - pos) {
            *why = "truncated";
            return -1;
        }
        pos += (size_t)len;
        if (is_container && count > 0) {
            if (count > n - pos) { /* every value takes at least one byte */
                *why = "a container larger than the frame";
                return -1;
            }
            if (depth == AT_WIRE_MAX_DEPTH) {
                *why = "nested too deeply";
                return -1;
            }
            left[++depth] = count;
        }
        while (depth > 0 && left[depth] == 0)
            depth--;
        if (depth == 0 && left[0] == 0) break;
    }
    if (pos != n) {
        *why = "bytes after the payload";
        return -1;
    }
    return 0;
}

typedef struct dec {
    at_arena *arena;
    char *errmsg;
    size_t errn;
    int failed;
    const char *ctx; /* "job 3" */
    int ctx_index;
} dec;

static void fail(dec *d, const char *field, const char *what)
{
    if (d->failed) return;
    d->failed = 1;
    if (d->errmsg && d->errn) {
        if (d->ctx)
            snprintf(d->errmsg, d->errn, "field '%s' of %s %d: %s", field, d->ctx, d->ctx_index,
                     what);
        else
            snprintf(d->errmsg, d->errn, "field '%s': %s", field, what);
    }
}

static const msgpack_object *mget(const msgpack_object *map, const char *key)
{
    size_t kn = strlen(key);
    if (map == NULL || map->type != MSGPACK_OBJECT_MAP) return NULL;
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object *k = &map->via.map.ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == kn &&
            memcmp(k->via.str.ptr, key, kn) == 0)
            return &map->via.map.ptr[i].val;
    }
    return NULL;
}

static int o_int(const msgpack_object *o, int64_t *v)
{
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        if (o->via.u64 > (uint64_t)INT64_MAX) return -1;
        *v = (int64_t)o->via.u64;
        return 0;
    }
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        *v = o->via.i64;
        return 0;
    }
    return -1;
}

/* An integer field in [lo, hi]; 'def' when absent and not required. */
static int64_t g_int(dec *d, const msgpack_object *map, const char *k, int64_t lo, int64_t hi,
                     int64_t def, int required)
{
    const msgpack_object *o = mget(map, k);
    int64_t v;
    if (o == NULL) {
        if (required) fail(d, k, "missing");
        return def;
    }
    if (o_int(o, &v) != 0) {
        fail(d, k, "not an integer");
        return def;
    }
    if (v < lo || v > hi) {
        char t[96];
        snprintf(t, sizeof t, "%lld is outside [%lld, %lld]", (long long)v, (long long)lo,
                 (long long)hi);
        fail(d, k, t);
        return def;
    }
    return v;
}

static uint64_t g_u64(dec *d, const msgpack_object *map, const char *k, int required)
{
    const msgpack_object *o = mget(map, k);
    if (o == NULL) {
        if (required) fail(d, k, "missing");
        return 0;
    }
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
        fail(d, k, "not an unsigned integer");
        return 0;
    }
    return o->via.u64;
}

static int o_dbl(const msgpack_object *o, double *v)
{
    int64_t i;
    if (o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64) {
        *v = o->via.f64;
        return 0;
    }
    if (o_int(o, &i) == 0) {
        *v = (double)i;
        return 0;
    }
    return -1;
}

/* A finite number in [lo, hi]. */
static double g_dbl(dec *d, const msgpack_object *map, const char *k, double lo, double hi,
                    double def, int required)
{
    const msgpack_object *o = mget(map, k);
    double v;
    if (o == NULL) {
        if (required) fail(d, k, "missing");
        return def;
    }
    if (o_dbl(o, &v) != 0) {
        fail(d, k, "not a number");
        return def;
    }
    if (!isfinite(v) || v < lo || v > hi) {
        fail(d, k, "out of range");
        return def;
    }
    return v;
}

static int g_bool(dec *d, const msgpack_object *map, const char *k)
{
    const msgpack_object *o = mget(map, k);
    if (o == NULL) return 0;
    if (o->type != MSGPACK_OBJECT_BOOLEAN) {
        fail(d, k, "not a boolean");
        return 0;
    }
    return o->via.boolean ? 1 : 0;
}

static const char *o_str(dec *d, const msgpack_object *o, const char *k, size_t max)
{
    char *s;
    if (o->type != MSGPACK_OBJECT_STR) {
        fail(d, k, "not a string");
        return "";
    }
    if (o->via.str.size > max) {
        char t[64];
        snprintf(t, sizeof t, "longer than %zu bytes", max);
        fail(d, k, t);
        return "";
    }
    if (o->via.str.size && memchr(o->via.str.ptr, 0, o->via.str.size) != NULL) {
        fail(d, k, "contains a NUL byte");
        return "";
    }
    if ((s = at_arena_strndup(d->arena, o->via.str.ptr, o->via.str.size)) == NULL) {
        fail(d, k, "out of memory");
        return "";
    }
    return s;
}

static const char *g_str(dec *d, const msgpack_object *map, const char *k, size_t max, int required)
{
    const msgpack_object *o = mget(map, k);
    if (o == NULL) {
        if (required) fail(d, k, "missing");
        return "";
    }
    return o_str(d, o, k, max);
}

/* A string that must not be empty (ids, keys). */
static const char *g_name(dec *d, const msgpack_object *map, const char *k)
{
    const char *s = g_str(d, map, k, AT_WIRE_MAX_NAME, 1);
    if (!d->failed && s[0] == 0) fail(d, k, "empty");
    return s;
}

/* A byte string of exactly 'exact' bytes (exact > 0) or at most 'max'. */
static const uint8_t *g_bin(dec *d, const msgpack_object *map, const char *k, size_t exact,
                            size_t max, size_t *n, int required)
{
    const msgpack_object *o = mget(map, k);
    if (n) *n = 0;
    if (o == NULL) {
        if (required) fail(d, k, "missing");
        return NULL;
    }
    if (o->type != MSGPACK_OBJECT_BIN) {
        fail(d, k, "not a byte string");
        return NULL;
    }
    if (exact ? o->via.bin.size != exact : o->via.bin.size > max) {
        fail(d, k, exact ? "wrong length" : "too long");
        return NULL;
    }
    if (n) *n = o->via.bin.size;
    return (const uint8_t *)o->via.bin.ptr;
}

static const msgpack_object *g_arr(dec *d, const msgpack_object *map, const char *k, uint32_t max,
                                   int required)
{
    const msgpack_object *o = mget(map, k);
    if (o == NULL) {
        if (required) fail(d, k, "missing");
        return NULL;
    }
    if (o->type != MSGPACK_OBJECT_ARRAY) {
        fail(d, k, "not an array");
        return NULL;
    }
    if (o->via.array.size > max) {
        fail(d, k, "too many items");
        return NULL;
    }
    return o;
}

static const msgpack_object *g_map(dec *d, const msgpack_object *map, const char *k, int required)
{
    const msgpack_object *o = mget(map, k);
    if (o == NULL) {
        if (required) fail(d, k, "missing");
        return NULL;
    }
    if (o->type != MSGPACK_OBJECT_MAP) {
        fail(d, k, "not a map");
        return NULL;
    }
    return o;
}

static void *arena_array(dec *d, size_t n, size_t size)
{
    void *p;
    if (n == 0) return NULL;
    if ((p = at_arena_alloc(d->arena, n * size)) == NULL) fail(d, "-", "out of memory");
    return p;
}

/* The optional layout rewrite of an artifact whose arguments are decoded. */
static void d_pre(dec *d, const msgpack_object *map, at_wire_artifact *a)
{
    const msgpack_object *pre = g_map(d, map, "pre", 0), *lay;
    if (pre == NULL || d->failed) return;
    a->pre_entry = g_str(d, pre, "entry", 63, 1);
    if (!d->failed && a->pre_entry[0] == 0) fail(d, "pre", "the pre-transform's entry is empty");
    if ((lay = g_arr(d, pre, "lay", AT_WIRE_MAX_PRE, 1)) == NULL || d->failed) return;
    if (lay->via.array.size == 0) {
        fail(d, "pre", "a layout rewrite rewrites at least one weight");
        return;
    }
    a->n_pre = (int)lay->via.array.size;
    for (int k = 0; k < a->n_pre; k++) {
        const msgpack_object *g = &lay->via.array.ptr[k], *dims;
        at_wire_layout *l = &a->pre[k];
        int64_t v, elems;
        if (g->type != MSGPACK_OBJECT_ARRAY || g->via.array.size != 2) {
            fail(d, "pre", "a new layout is [argument, [dims]]");
            return;
        }
        if (o_int(&g->via.array.ptr[0], &v) != 0 || v < 0 || v >= a->n_args ||
            a->args[v].is_output) {
            fail(d, "pre", "a new layout names an input argument of the kernel");
            return;
        }
        l->arg = (int)v;
        for (int j = 0; j < k; j++)
            if (a->pre[j].arg == l->arg) {
                fail(d, "pre", "an argument has two new layouts");
                return;
            }
        dims = &g->via.array.ptr[1];
        if (dims->type != MSGPACK_OBJECT_ARRAY || dims->via.array.size < 1 ||
            dims->via.array.size > AT_WIRE_MAX_DIMS) {
            fail(d, "pre", "dims is an array of 1 to 16 sizes");
            return;
        }
        l->n_dims = (int)dims->via.array.size;
        elems = at_dtype_bytes((at_dtype)a->args[l->arg].dtype);
        for (int j = 0; j < l->n_dims; j++) {
            if (o_int(&dims->via.array.ptr[j], &v) != 0 || v < 1 ||
                v > AT_WIRE_MAX_BUF_BYTES / elems) {
                fail(d, "pre", "a new layout's dimension is an integer >= 1, at most 1 GiB in all");
                return;
            }
            l->shape[j] = v;
            elems *= v;
        }
    }
}

/* The optional GPU part of an artifact. */
static void d_gpu(dec *d, const msgpack_object *map, at_wire_artifact *a)
{
    const msgpack_object *gpu = g_map(d, map, "gpu", 0), *ls;
    at_wire_launch *launches;
    if (gpu == NULL || d->failed) return;
    a->gpu_kind = (int)g_int(d, gpu, "kind", AT_WIRE_GPU_PTX, AT_WIRE_GPU_CUBIN, 0, 1);
    a->gpu_arch = g_str(d, gpu, "arch", 15, 1);
    if (!d->failed && strncmp(a->gpu_arch, "sm_", 3) != 0)
        fail(d, "gpu", "the architecture is sm_XX");
    if (!d->failed && a->n_pre > 0) fail(d, "gpu", "a GPU artifact has no layout rewrite");
    if ((ls = g_arr(d, gpu, "launches", AT_WIRE_MAX_LAUNCHES, 1)) == NULL || d->failed) return;
    if (ls->via.array.size == 0) {
        fail(d, "gpu", "a GPU artifact has at least one launch");
        return;
    }
    a->n_launches = (int)ls->via.array.size;
    if ((launches = arena_array(d, (size_t)a->n_launches, sizeof *launches)) == NULL) return;
    a->launches = launches;
    for (int k = 0; k < a->n_launches; k++) {
        const msgpack_object *g = &ls->via.array.ptr[k];
        at_wire_launch *l = &launches[k];
        int64_t v[8], threads = 1;
        if (g->type != MSGPACK_OBJECT_ARRAY || g->via.array.size != 9 ||
            g->via.array.ptr[0].type != MSGPACK_OBJECT_STR ||
            g->via.array.ptr[0].via.str.size == 0 || g->via.array.ptr[0].via.str.size > 63) {
            fail(d, "gpu", "a launch is [entry, gx, gy, gz, bx, by, bz, shared, regs]");
            return;
        }
        for (int i = 0; i < 8; i++)
            if (o_int(&g->via.array.ptr[1 + i], &v[i]) != 0 || v[i] < (i < 6 ? 1 : 0) ||
                v[i] > INT32_MAX) {
                fail(d, "gpu", "a launch's sizes are integers (grid and block at least 1)");
                return;
            }
        for (int i = 3; i < 6; i++)
            threads *= v[i];
        if (threads > 1024 || v[7] > 255 || v[6] > (1 << 20)) {
            fail(d, "gpu", "a launch has at most 1024 threads, 255 registers, 1 MiB shared");
            return;
        }
        memcpy(l->entry, g->via.array.ptr[0].via.str.ptr, g->via.array.ptr[0].via.str.size);
        l->entry[g->via.array.ptr[0].via.str.size] = 0;
        if (strlen(l->entry) != g->via.array.ptr[0].via.str.size) {
            fail(d, "gpu", "a launch's entry has a NUL byte");
            return;
        }
        for (int i = 0; i < 3; i++) {
            l->grid[i] = (int)v[i];
            l->block[i] = (int)v[3 + i];
        }
        l->shared_bytes = (int)v[6];
        l->n_regs = (int)v[7];
    }
}

static void d_artifact(dec *d, const msgpack_object *map, at_wire_artifact *a)
{
    const msgpack_object *args;
    int64_t total = 0;

    a->obj = g_bin(d, map, "obj", 0, AT_WIRE_MAX_OBJ, &a->obj_size, 1);
    if (!d->failed && a->obj_size == 0) fail(d, "obj", "empty");
    a->entry = g_str(d, map, "entry", 63, 1);
    if (!d->failed && a->entry[0] == 0) fail(d, "entry", "empty");
    a->triple = g_str(d, map, "triple", AT_WIRE_MAX_NAME, 1);
    a->ws_fixed = g_int(d, map, "wsf", 0, AT_WIRE_MAX_BUF_BYTES, 0, 1);
    a->ws_per_thread = g_int(d, map, "wst", 0, AT_WIRE_MAX_BUF_BYTES, 0, 1);
    if ((args = g_arr(d, map, "args", AT_WIRE_MAX_ARGS, 1)) == NULL || d->failed) return;
    a->n_args = (int)args->via.array.size;
    if (a->n_args == 0) {
        fail(d, "args", "a kernel has at least one argument");
        return;
    }
    if ((a->args = arena_array(d, (size_t)a->n_args, sizeof *a->args)) == NULL) return;
    for (int i = 0; i < a->n_args; i++) {
        const msgpack_object *g = &args->via.array.ptr[i], *dims;
        at_wire_arg *w = &a->args[i];
        int64_t v, elems = 1;
        if (g->type != MSGPACK_OBJECT_ARRAY || g->via.array.size != 3) {
            fail(d, "args", "an argument is [dtype, is_output, [dims]]");
            return;
        }
        if (o_int(&g->via.array.ptr[0], &v) != 0 || v < 0 || v >= AT_N_DTYPES) {
            fail(d, "args", "unknown dtype");
            return;
        }
        w->dtype = (int)v;
        if (o_int(&g->via.array.ptr[1], &v) != 0 || (v != 0 && v != 1)) {
            fail(d, "args", "is_output is 0 or 1");
            return;
        }
        w->is_output = (int)v;
        dims = &g->via.array.ptr[2];
        if (dims->type != MSGPACK_OBJECT_ARRAY || dims->via.array.size > AT_WIRE_MAX_DIMS) {
            fail(d, "args", "dims is an array of at most 16 sizes");
            return;
        }
        w->n_dims = (int)dims->via.array.size;
        for (int k = 0; k < w->n_dims; k++) {
            if (o_int(&dims->via.array.ptr[k], &v) != 0 || v < 1 || v > AT_WIRE_MAX_BUF_BYTES) {
                fail(d, "args", "a dimension is an integer >= 1");
                return;
            }
            w->shape[k] = v;
            if (elems > AT_WIRE_MAX_BUF_BYTES / v) {
                fail(d, "args", "buffer larger than 1 GiB");
                return;
            }
            elems *= v;
        }
        elems *= at_dtype_bytes((at_dtype)w->dtype);
        if (elems > AT_WIRE_MAX_BUF_BYTES) {
            fail(d, "args", "buffer larger than 1 GiB");
            return;
        }
        total += elems;
        if (total > 4 * AT_WIRE_MAX_BUF_BYTES) {
            fail(d, "args", "buffers larger than 4 GiB together");
            return;
        }
    }
    d_pre(d, map, a);
    d_gpu(d, map, a);
}

static void d_settings(dec *d, const msgpack_object *map, at_wire_settings *s)
{
    s->number = (int)g_int(d, map, "number", 1, 1 << 20, 1, 1);
    s->repeat = (int)g_int(d, map, "repeat", 1, AT_WIRE_MAX_COSTS, 1, 1);
    s->min_repeat_ms = g_dbl(d, map, "min_ms", 0, 600000, 0, 1);
    s->flush_cache = g_bool(d, map, "flush");
    s->timeout_ms = (int)g_int(d, map, "timeout_ms", 1, 24 * 3600 * 1000, 10000, 1);
    s->cooldown_ms = (int)g_int(d, map, "cool_ms", 0, 600000, 0, 0);
    s->n_threads = (int)g_int(d, map, "threads", 0, 1024, 0, 0);
    s->n_warmup = (int)g_int(d, map, "warmup", 0, 1000, 1, 0);
    s->cutoff_s = g_dbl(d, map, "cutoff_s", 0, 24 * 3600, 0, 0);
    s->flush_args = (uint64_t)g_int(d, map, "flush_args", 0, INT64_MAX, 0, 0);
}

static void d_job(dec *d, const msgpack_object *o, at_wire_job *j)
{
    const msgpack_object *run;
    const uint8_t *ref;
    if (o->type != MSGPACK_OBJECT_MAP) {
        fail(d, "jobs", "a job is a map");
        return;
    }
    j->id = g_name(d, o, "id");
    d_artifact(d, o, &j->art);
    if ((run = g_map(d, o, "run", 1)) != NULL) d_settings(d, run, &j->run);
    j->seed = g_u64(d, o, "seed", 1);
    if ((ref = g_bin(d, o, "ref", AT_WIRE_REFID_BYTES, 0, NULL, 0)) != NULL) {
        j->has_ref = 1;
        memcpy(j->ref, ref, AT_WIRE_REFID_BYTES);
    }
}

static void d_ref(dec *d, const msgpack_object *o, at_wire_ref *r)
{
    const uint8_t *id;
    if (o->type != MSGPACK_OBJECT_MAP) {
        fail(d, "refs", "a reference is a map");
        return;
    }
    if ((id = g_bin(d, o, "id", AT_WIRE_REFID_BYTES, 0, NULL, 1)) != NULL)
        memcpy(r->id, id, AT_WIRE_REFID_BYTES);
    d_artifact(d, o, &r->art);
}

static void d_devstate(dec *d, const msgpack_object *map, at_wire_devstate *s)
{
    s->cpu_mhz = g_dbl(d, map, "mhz", -1, 1e7, -1, 0);
    s->cpu_max_mhz = g_dbl(d, map, "max_mhz", -1, 1e7, -1, 0);
    s->temp_c = g_dbl(d, map, "temp_c", -300, 1000, -1, 0);
    s->load1 = g_dbl(d, map, "load1", -1, 1e6, -1, 0);
    s->throttled = g_bool(d, map, "throttled");
    s->loaded = g_bool(d, map, "loaded");
}

static void d_device(dec *d, const msgpack_object *map, at_wire_device *v)
{
    v->arch = g_str(d, map, "arch", AT_WIRE_MAX_NAME, 0);
    v->model = g_str(d, map, "model", AT_WIRE_MAX_NAME, 0);
    v->n_cores = (int)g_int(d, map, "cores", 0, 1 << 20, 0, 0);
    v->os = g_str(d, map, "os", AT_WIRE_MAX_NAME, 0);
    v->driver = g_str(d, map, "driver", AT_WIRE_MAX_NAME, 0);
}

static void d_result(dec *d, const msgpack_object *o, at_wire_result *r)
{
    const msgpack_object *costs, *m;
    if (o->type != MSGPACK_OBJECT_MAP) {
        fail(d, "results", "a result is a map");
        return;
    }
    r->id = g_name(d, o, "id");
    r->status = (int)g_int(d, o, "status", 0, 1000, 0, 1);
    if ((costs = g_arr(d, o, "costs", AT_WIRE_MAX_COSTS, 1)) != NULL && !d->failed) {
        r->n_costs = (int)costs->via.array.size;
        if ((r->costs = arena_array(d, (size_t)r->n_costs, sizeof(double))) != NULL ||
            r->n_costs == 0) {
            for (int i = 0; i < r->n_costs; i++) {
                double v;
                if (o_dbl(&costs->via.array.ptr[i], &v) != 0 || !isfinite(v) || v < 0) {
                    fail(d, "costs", "a cost is a finite number >= 0");
                    return;
                }
                r->costs[i] = v;
            }
        }
    }
    if (!d->failed && r->status == AT_MEASURE_NO_ERROR && r->n_costs == 0)
        fail(d, "costs", "a successful result has at least one cost");
    r->median_s = g_dbl(d, o, "median", 0, 1e12, 0, 0);
    r->error = g_str(d, o, "err", AT_WIRE_MAX_TEXT, 0);
    r->measured_at = g_dbl(d, o, "at", 0, 1e11, 0, 0);
    r->run_s = g_dbl(d, o, "run_s", 0, 1e9, 0, 0);
    if ((m = g_map(d, o, "state", 0)) != NULL)
        d_devstate(d, m, &r->state);
    else
        r->state.cpu_mhz = r->state.cpu_max_mhz = r->state.temp_c = r->state.load1 = -1;
    r->agent = g_str(d, o, "agent", AT_WIRE_MAX_NAME, 0);
    r->fingerprint = g_str(d, o, "fp", AT_WIRE_MAX_NAME, 0);
    if ((m = g_map(d, o, "dev", 0)) != NULL)
        d_device(d, m, &r->dev);
    else
        r->dev.arch = r->dev.model = r->dev.os = r->dev.driver = "";
}

/* Decode array 'k' of maps with 'fn' into an arena array; sets *n. */
typedef void (*item_fn)(dec *d, const msgpack_object *o, void *item);

static void *d_list(dec *d, const msgpack_object *map, const char *k, uint32_t max, size_t size,
                    item_fn fn, const char *what, int *n, int required)
{
    const msgpack_object *a = g_arr(d, map, k, max, required);
    uint8_t *v;
    *n = 0;
    if (a == NULL || d->failed || a->via.array.size == 0) return NULL;
    if ((v = arena_array(d, a->via.array.size, size)) == NULL) return NULL;
    d->ctx = what;
    for (uint32_t i = 0; i < a->via.array.size && !d->failed; i++) {
        d->ctx_index = (int)i;
        fn(d, &a->via.array.ptr[i], v + i * size);
    }
    if (!d->failed) d->ctx = NULL;
    *n = (int)a->via.array.size;
    return v;
}

static void job_item(dec *d, const msgpack_object *o, void *item)
{
    d_job(d, o, item);
}

static void ref_item(dec *d, const msgpack_object *o, void *item)
{
    d_ref(d, o, item);
}

static void result_item(dec *d, const msgpack_object *o, void *item)
{
    d_result(d, o, item);
}

static void str_item(dec *d, const msgpack_object *o, void *item)
{
    const char *s = o_str(d, o, "id", AT_WIRE_MAX_NAME);
    if (!d->failed && s[0] == 0) fail(d, "id", "empty");
    *(const char **)item = s;
}

static void d_body(dec *d, const msgpack_object *b, at_wire_msg *m)
{
    const msgpack_object *a, *o;
    const uint8_t *bin;

    switch (m->type) {
    case AT_WIRE_T_HELLO: {
        at_wire_hello *h = &m->u.hello;
        h->version = (int)g_int(d, b, "version", 0, INT32_MAX, 0, 1);
        h->role = (int)g_int(d, b, "role", AT_WIRE_ROLE_AGENT, AT_WIRE_ROLE_STATUS, 0, 1);
        h->name = g_str(d, b, "name", AT_WIRE_MAX_NAME, 0);
        h->client_id = g_name(d, b, "id");
        h->software = g_str(d, b, "sw", AT_WIRE_MAX_NAME, 0);
        if ((bin = g_bin(d, b, "nonce", AT_WIRE_NONCE_BYTES, 0, NULL, 1)) != NULL)
            memcpy(h->nonce, bin, AT_WIRE_NONCE_BYTES);
        if ((a = g_arr(d, b, "keys", 4, 1)) != NULL && !d->failed) {
            h->n_keys = (int)a->via.array.size;
            for (int i = 0; i < h->n_keys; i++) {
                o = &a->via.array.ptr[i];
                if (o->type != MSGPACK_OBJECT_BIN || o->via.bin.size != AT_WIRE_KEYID_BYTES) {
                    fail(d, "keys", "a key id is 4 bytes");
                    break;
                }
                memcpy(h->key_ids[i], o->via.bin.ptr, AT_WIRE_KEYID_BYTES);
            }
        }
        break;
    }
    case AT_WIRE_T_CHALLENGE:
        m->u.challenge.version = (int)g_int(d, b, "version", 0, INT32_MAX, 0, 1);
        if ((bin = g_bin(d, b, "nonce", AT_WIRE_NONCE_BYTES, 0, NULL, 1)) != NULL)
            memcpy(m->u.challenge.nonce, bin, AT_WIRE_NONCE_BYTES);
        if ((bin = g_bin(d, b, "key", AT_WIRE_KEYID_BYTES, 0, NULL, 1)) != NULL)
            memcpy(m->u.challenge.key_id, bin, AT_WIRE_KEYID_BYTES);
        break;
    case AT_WIRE_T_AUTH:
    case AT_WIRE_T_STATUS_QUERY:
        break;
    case AT_WIRE_T_WELCOME:
        m->u.welcome.tracker_id = g_str(d, b, "tracker", AT_WIRE_MAX_NAME, 0);
        m->u.welcome.lease_ms = (int)g_int(d, b, "lease_ms", 1, INT32_MAX, 10000, 1);
        m->u.welcome.heartbeat_ms = (int)g_int(d, b, "hb_ms", 1, INT32_MAX, 1000, 1);
        m->u.welcome.hold_ms = (int)g_int(d, b, "hold_ms", 0, INT32_MAX, 1000, 1);
        break;
    case AT_WIRE_T_ERROR:
        m->u.error.code = (int)g_int(d, b, "code", 0, 1000, AT_EPROTO, 1);
        m->u.error.text = g_str(d, b, "text", AT_WIRE_MAX_TEXT, 0);
        break;
    case AT_WIRE_T_REGISTER: {
        at_wire_register *r = &m->u.reg;
        r->device_key = g_name(d, b, "key");
        r->triple = g_str(d, b, "triple", AT_WIRE_MAX_NAME, 1);
        r->features = g_str(d, b, "features", AT_WIRE_MAX_FEATURES, 0);
        r->gpu = g_str(d, b, "gpu", AT_WIRE_MAX_NAME, 0);
        if ((o = g_map(d, b, "dev", 1)) != NULL) d_device(d, o, &r->dev);
        r->fingerprint = g_str(d, b, "fp", AT_WIRE_MAX_NAME, 0);
        if ((o = g_map(d, b, "sandbox", 1)) != NULL) {
            r->sandbox.seccomp = g_bool(d, o, "seccomp");
            r->sandbox.rlimits = g_bool(d, o, "rlimits");
            r->sandbox.guard = g_bool(d, o, "guard");
            r->sandbox.note = g_str(d, o, "note", AT_WIRE_MAX_TEXT, 0);
        }
        r->n_threads = (int)g_int(d, b, "threads", 1, 1024, 1, 1);
        r->max_batch = (int)g_int(d, b, "batch", 1, AT_WIRE_MAX_JOBS, 1, 1);
        r->bench_ack = g_bool(d, b, "bench");
        break;
    }
    case AT_WIRE_T_REGISTERED:
        m->u.registered.agent_id = g_name(d, b, "agent");
        break;
    case AT_WIRE_T_AGENT_POLL: {
        at_wire_agent_poll *p = &m->u.apoll;
        p->n_held = (int)g_int(d, b, "held", 0, 1 << 20, 0, 1);
        p->n_free = (int)g_int(d, b, "free", 0, AT_WIRE_MAX_JOBS, 0, 1);
        if ((o = g_map(d, b, "state", 0)) != NULL) d_devstate(d, o, &p->state);
        p->results = d_list(d, b, "results", AT_WIRE_MAX_JOBS, sizeof *p->results, result_item,
                            "result", &p->n_results, 0);
        p->returned = d_list(d, b, "returned", AT_WIRE_MAX_JOBS, sizeof *p->returned, str_item,
                             "returned job", &p->n_returned, 0);
        if ((a = g_arr(d, b, "need_refs", AT_WIRE_MAX_REFS, 0)) != NULL && !d->failed &&
            a->via.array.size > 0) {
            uint8_t(*ids)[AT_WIRE_REFID_BYTES] =
                arena_array(d, a->via.array.size, AT_WIRE_REFID_BYTES);
            if (ids == NULL) break;
            for (uint32_t i = 0; i < a->via.array.size; i++) {
                o = &a->via.array.ptr[i];
                if (o->type != MSGPACK_OBJECT_BIN || o->via.bin.size != AT_WIRE_REFID_BYTES) {
                    fail(d, "need_refs", "a reference id is 32 bytes");
                    break;
                }
                memcpy(ids[i], o->via.bin.ptr, AT_WIRE_REFID_BYTES);
            }
            p->need_refs = (const uint8_t(*)[AT_WIRE_REFID_BYTES])ids;
            p->n_need_refs = (int)a->via.array.size;
        }
        break;
    }
    case AT_WIRE_T_AGENT_WORK: {
        at_wire_agent_work *w = &m->u.work;
        w->jobs =
            d_list(d, b, "jobs", AT_WIRE_MAX_JOBS, sizeof *w->jobs, job_item, "job", &w->n_jobs, 0);
        w->refs = d_list(d, b, "refs", AT_WIRE_MAX_REFS, sizeof *w->refs, ref_item, "reference",
                         &w->n_refs, 0);
        w->cancel = d_list(d, b, "cancel", AT_WIRE_MAX_JOBS, sizeof *w->cancel, str_item, "cancel",
                           &w->n_cancel, 0);
        break;
    }
    case AT_WIRE_T_SUBMIT: {
        at_wire_submit *s = &m->u.submit;
        s->device_key = g_name(d, b, "key");
        s->priority = (int)g_int(d, b, "prio", -1000000, 1000000, 1, 0);
        s->refs = d_list(d, b, "refs", AT_WIRE_MAX_REFS, sizeof *s->refs, ref_item, "reference",
                         &s->n_refs, 0);
        s->jobs =
            d_list(d, b, "jobs", AT_WIRE_MAX_JOBS, sizeof *s->jobs, job_item, "job", &s->n_jobs, 1);
        break;
    }
    case AT_WIRE_T_SUBMITTED: {
        at_wire_submitted *s = &m->u.submitted;
        s->n_accepted = (int)g_int(d, b, "accepted", 0, AT_WIRE_MAX_JOBS, 0, 1);
        s->n_known = (int)g_int(d, b, "known", 0, AT_WIRE_MAX_JOBS, 0, 0);
        s->n_agents = (int)g_int(d, b, "agents", 0, 1 << 20, 0, 1);
        if ((a = g_arr(d, b, "keys", AT_WIRE_MAX_JOBS, 0)) != NULL && !d->failed &&
            a->via.array.size > 0) {
            s->n_keys = (int)a->via.array.size;
            if ((s->keys = arena_array(d, (size_t)s->n_keys, sizeof *s->keys)) == NULL) break;
            for (int i = 0; i < s->n_keys; i++) {
                const msgpack_object *ki = &a->via.array.ptr[i];
                int64_t v[3];
                if (ki->type != MSGPACK_OBJECT_ARRAY || ki->via.array.size != 4) {
                    fail(d, "keys", "an entry is [key, agents, idle, queued]");
                    break;
                }
                s->keys[i].key = o_str(d, &ki->via.array.ptr[0], "keys", AT_WIRE_MAX_NAME);
                for (int k = 0; k < 3; k++)
                    if (o_int(&ki->via.array.ptr[k + 1], &v[k]) != 0 || v[k] < 0 ||
                        v[k] > INT32_MAX) {
                        fail(d, "keys", "counts are integers >= 0");
                        v[k] = 0;
                    }
                s->keys[i].n_agents = (int)v[0];
                s->keys[i].n_idle = (int)v[1];
                s->keys[i].n_queued = (int)v[2];
            }
        }
        break;
    }
    case AT_WIRE_T_TUNER_POLL:
        m->u.tpoll.ack = g_u64(d, b, "ack", 1);
        m->u.tpoll.hold_ms = (int)g_int(d, b, "hold_ms", 0, 60000, 0, 0);
        break;
    case AT_WIRE_T_RESULTS: {
        at_wire_results *r = &m->u.results;
        r->first = g_u64(d, b, "first", 1);
        r->results = d_list(d, b, "results", AT_WIRE_MAX_JOBS, sizeof *r->results, result_item,
                            "result", &r->n_results, 0);
        r->n_queued = (int)g_int(d, b, "queued", 0, INT32_MAX, 0, 0);
        r->n_inflight = (int)g_int(d, b, "inflight", 0, INT32_MAX, 0, 0);
        r->n_agents = (int)g_int(d, b, "agents", 0, INT32_MAX, 0, 0);
        break;
    }
    case AT_WIRE_T_CANCEL:
        m->u.cancel.all = g_bool(d, b, "all");
        m->u.cancel.ids = d_list(d, b, "ids", AT_WIRE_MAX_JOBS, sizeof *m->u.cancel.ids, str_item,
                                 "id", &m->u.cancel.n_ids, 0);
        break;
    case AT_WIRE_T_CANCELED:
        m->u.canceled.n_canceled = (int)g_int(d, b, "n", 0, INT32_MAX, 0, 1);
        break;
    case AT_WIRE_T_STATUS:
        m->u.status.json = g_str(d, b, "json", AT_WIRE_MAX_JSON, 1);
        break;
    case AT_WIRE_T_SBX_BATCH: {
        at_wire_sbx_batch *sb = &m->u.batch;
        sb->jobs = d_list(d, b, "jobs", AT_WIRE_MAX_JOBS, sizeof *sb->jobs, job_item, "job",
                          &sb->n_jobs, 1);
        sb->refs = d_list(d, b, "refs", AT_WIRE_MAX_REFS, sizeof *sb->refs, ref_item, "reference",
                          &sb->n_refs, 0);
        sb->default_threads = (int)g_int(d, b, "threads", 1, 1024, 1, 1);
        sb->bench_ack = g_bool(d, b, "bench");
        if ((a = g_arr(d, b, "refouts", AT_WIRE_MAX_REFS, 0)) != NULL && !d->failed &&
            a->via.array.size > 0) {
            sb->n_refouts = (int)a->via.array.size;
            if ((sb->refouts = arena_array(d, a->via.array.size, sizeof *sb->refouts)) == NULL)
                break;
            for (int i = 0; i < sb->n_refouts && !d->failed; i++) {
                at_wire_refout *ro = &sb->refouts[i];
                const msgpack_object *ri = &a->via.array.ptr[i], *outs;
                if (ri->type != MSGPACK_OBJECT_MAP) {
                    fail(d, "refouts", "not a map");
                    break;
                }
                if ((bin = g_bin(d, ri, "ref", AT_WIRE_REFID_BYTES, 0, NULL, 1)) != NULL)
                    memcpy(ro->ref, bin, AT_WIRE_REFID_BYTES);
                ro->seed = g_u64(d, ri, "seed", 1);
                if ((outs = g_arr(d, ri, "out", AT_WIRE_MAX_ARGS, 1)) == NULL || d->failed) break;
                ro->n_outputs = (int)outs->via.array.size;
                ro->data = arena_array(d, outs->via.array.size, sizeof *ro->data);
                ro->n_bytes = arena_array(d, outs->via.array.size, sizeof *ro->n_bytes);
                for (int k = 0; k < ro->n_outputs && !d->failed; k++) {
                    const msgpack_object *ob = &outs->via.array.ptr[k];
                    if (ob->type != MSGPACK_OBJECT_BIN) {
                        fail(d, "refouts", "an output is a byte string");
                        break;
                    }
                    ro->data[k] = (const uint8_t *)ob->via.bin.ptr;
                    ro->n_bytes[k] = ob->via.bin.size;
                }
            }
        }
        break;
    }
    case AT_WIRE_T_SBX_EVENT: {
        at_wire_sbx_event *v = &m->u.event;
        v->kind = (int)g_int(d, b, "kind", AT_WIRE_SBX_READY, AT_WIRE_SBX_REFOUT, 0, 1);
        if (d->failed) break;
        if (v->kind == AT_WIRE_SBX_READY) {
            v->note = g_str(d, b, "note", AT_WIRE_MAX_TEXT, 0);
        } else if (v->kind == AT_WIRE_SBX_START) {
            v->index = (int)g_int(d, b, "index", 0, AT_WIRE_MAX_JOBS - 1, 0, 1);
        } else if (v->kind == AT_WIRE_SBX_RESULT) {
            v->index = (int)g_int(d, b, "index", 0, AT_WIRE_MAX_JOBS - 1, 0, 1);
            if ((o = g_map(d, b, "result", 1)) != NULL) d_result(d, o, &v->result);
        } else {
            if ((bin = g_bin(d, b, "ref", AT_WIRE_REFID_BYTES, 0, NULL, 1)) != NULL)
                memcpy(v->ref, bin, AT_WIRE_REFID_BYTES);
            v->seed = g_u64(d, b, "seed", 1);
            v->n_outputs = (int)g_int(d, b, "n_outputs", 1, AT_WIRE_MAX_ARGS, 1, 1);
            v->output = (int)g_int(d, b, "output", 0, AT_WIRE_MAX_ARGS - 1, 0, 1);
            v->offset = g_u64(d, b, "offset", 1);
            v->total = g_u64(d, b, "total", 1);
            v->data = g_bin(d, b, "data", 0, AT_WIRE_MAX_MSG, &v->n, 1);
            if (!d->failed &&
                (v->output >= v->n_outputs || v->total > (uint64_t)AT_WIRE_MAX_BUF_BYTES ||
                 v->offset > v->total || v->n > v->total - v->offset))
                fail(d, "data", "chunk outside its output");
        }
        break;
    }
    case AT_WIRE_T_BUILD_REQ: {
        at_wire_build_req *r = &m->u.build;
        r->id = g_int(d, b, "id", INT64_MIN, INT64_MAX, 0, 1);
        r->target = g_str(d, b, "target", AT_WIRE_MAX_TEXT, 1);
        r->dag = g_str(d, b, "dag", AT_WIRE_MAX_JSON, 1);
        r->state = g_str(d, b, "state", AT_WIRE_MAX_JSON, 1);
        r->entry = g_str(d, b, "entry", 63, 0);
        break;
    }
    case AT_WIRE_T_BUILD_RES: {
        at_wire_build_res *r = &m->u.built;
        r->id = g_int(d, b, "id", INT64_MIN, INT64_MAX, 0, 1);
        r->err = (int)g_int(d, b, "err", 0, AT_N_ERRS - 1, 0, 1);
        r->text = g_str(d, b, "text", AT_WIRE_MAX_TEXT, 0);
        if (r->err == 0 && !d->failed) {
            r->compile_s = g_dbl(d, b, "compile_s", 0, 1e6, 0, 0);
            if ((o = g_map(d, b, "art", 1)) != NULL) d_artifact(d, o, &r->art);
        }
        break;
    }
    default:
        fail(d, "type", "unknown message type");
    }
}

static int tag_equal(const uint8_t *a, const uint8_t *b)
{
    uint8_t x = 0;
    for (int i = 0; i < AT_WIRE_TAG_BYTES; i++)
        x |= (uint8_t)(a[i] ^ b[i]);
    return x == 0;
}

static void tag_of(const uint8_t key[32], char dir, const void *p, size_t n, uint8_t out[32])
{
    /* HMAC(key, dir || payload), computed without copying the payload */
    uint8_t k_ipad[64], k_opad[64], inner[32];
    at_sha256 s;
    for (int i = 0; i < 64; i++) {
        k_ipad[i] = (uint8_t)((i < 32 ? key[i] : 0) ^ 0x36);
        k_opad[i] = (uint8_t)((i < 32 ? key[i] : 0) ^ 0x5c);
    }
    at_sha256_init(&s);
    at_sha256_update(&s, k_ipad, 64);
    at_sha256_update(&s, &dir, 1);
    at_sha256_update(&s, p, n);
    at_sha256_final(&s, inner);
    at_sha256_init(&s);
    at_sha256_update(&s, k_opad, 64);
    at_sha256_update(&s, inner, 32);
    at_sha256_final(&s, out);
}

/* Is the tag of this frame right for the session key? (exposed to wire_auth via decode) */
static int tag_ok(const at_wire_session *s, const uint8_t *p, size_t payload)
{
    uint8_t want[AT_WIRE_TAG_BYTES];
    tag_of(s->skey, s->is_client ? 'T' : 'C', p, payload, want);
    return tag_equal(want, p + payload);
}

at_err at_wire_decode(at_wire_session *s, const void *pv, size_t n, at_wire_msg *out, char *errmsg,
                      size_t errmsg_size)
{
    const uint8_t *p = pv;
    const char *why = NULL;
    msgpack_unpacked up;
    const msgpack_object *root, *body;
    size_t payload, off = 0;
    int64_t v;
    dec d;
    at_err err = AT_EPROTO;

    at_wire_msg_init(out, 0);
    out->version = 0;
    if (errmsg && errmsg_size) errmsg[0] = 0;
#define REFUSE(code, ...)                                                                          \
    do {                                                                                           \
        if (errmsg && errmsg_size) snprintf(errmsg, errmsg_size, __VA_ARGS__);                     \
        err = (code);                                                                              \
        goto fail;                                                                                 \
    } while (0)

    if (n < AT_WIRE_TAG_BYTES + 1) REFUSE(AT_EPROTO, "frame of %zu bytes is too short", n);
    if (n > AT_WIRE_MAX_MSG)
        REFUSE(AT_EPROTO, "frame of %zu bytes is over the limit of %u bytes", n, AT_WIRE_MAX_MSG);
    if (s && !s->authed && n > AT_WIRE_MAX_PREAUTH)
        REFUSE(AT_EPROTO, "frame of %zu bytes before authentication (limit %u)", n,
               AT_WIRE_MAX_PREAUTH);
    payload = n - AT_WIRE_TAG_BYTES;
    if (prescan(p, payload, &why) != 0) REFUSE(AT_EPROTO, "not a well-formed message: %s", why);

    msgpack_unpacked_init(&up);
    if (msgpack_unpack_next(&up, (const char *)p, payload, &off) != MSGPACK_UNPACK_SUCCESS ||
        off != payload) {
        msgpack_unpacked_destroy(&up);
        REFUSE(AT_EPROTO, "not a well-formed message: msgpack refused it");
    }
    root = &up.data;
    if (root->type != MSGPACK_OBJECT_ARRAY || root->via.array.size != 5 ||
        o_int(&root->via.array.ptr[0], &v) != 0) {
        msgpack_unpacked_destroy(&up);
        REFUSE(AT_EPROTO, "not a message: the frame is not [version, type, seq, re, body]");
    }
    out->version = (int)(v > INT32_MAX || v < 0 ? -1 : v);
    if (o_int(&root->via.array.ptr[1], &v) == 0 && v > 0 && v < 256) out->type = (int)v;
    if (out->version != AT_WIRE_VERSION) {
        msgpack_unpacked_destroy(&up);
        REFUSE(AT_EVERSION, "protocol version %d; this build speaks version %d", out->version,
               AT_WIRE_VERSION);
    }
    if (out->type == 0 || strcmp(at_wire_type_name(out->type), "?") == 0) {
        msgpack_unpacked_destroy(&up);
        REFUSE(AT_EPROTO, "unknown message type");
    }
    if (root->via.array.ptr[2].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
        root->via.array.ptr[3].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
        root->via.array.ptr[4].type != MSGPACK_OBJECT_MAP) {
        msgpack_unpacked_destroy(&up);
        REFUSE(AT_EPROTO, "not a message: bad seq, re or body");
    }
    out->seq = root->via.array.ptr[2].via.u64;
    out->re = root->via.array.ptr[3].via.u64;
    body = &root->via.array.ptr[4];

    if (s) {
        int t = out->type;
        if (t == AT_WIRE_T_SBX_BATCH || t == AT_WIRE_T_SBX_EVENT || t == AT_WIRE_T_BUILD_REQ ||
            t == AT_WIRE_T_BUILD_RES) {
            msgpack_unpacked_destroy(&up);
            REFUSE(AT_EPROTO, "%s is not a network message", at_wire_type_name(t));
        }
        int tagged = 1;
        if (t == AT_WIRE_T_HELLO || (t == AT_WIRE_T_ERROR && !s->keyed) ||
            (t == AT_WIRE_T_CHALLENGE && !s->keyed)) {
            /* no tag yet: a CHALLENGE's tag is checked by the client once it has the key */
            tagged = 0;
        } else if (!s->keyed) {
            msgpack_unpacked_destroy(&up);
            REFUSE(AT_EAUTH, "%s before authentication", at_wire_type_name(t));
        } else if (!tag_ok(s, p, payload)) {
            msgpack_unpacked_destroy(&up);
            REFUSE(AT_EAUTH, "%s with a wrong MAC (not signed with this session's key)",
                   at_wire_type_name(t));
        } else if (!s->authed && t != AT_WIRE_T_AUTH && t != AT_WIRE_T_WELCOME &&
                   t != AT_WIRE_T_ERROR) {
            msgpack_unpacked_destroy(&up);
            REFUSE(AT_EAUTH, "%s before authentication", at_wire_type_name(t));
        }
        if (tagged && out->seq <= s->recv_seq) {
            msgpack_unpacked_destroy(&up);
            REFUSE(AT_EAUTH, "%s with sequence number %llu, not above %llu: replayed",
                   at_wire_type_name(t), (unsigned long long)out->seq,
                   (unsigned long long)s->recv_seq);
        }
    }

    memset(&d, 0, sizeof d);
    d.arena = &out->arena;
    d.errmsg = errmsg;
    d.errn = errmsg_size;
    d_body(&d, body, out);
    msgpack_unpacked_destroy(&up);
    if (d.failed) {
        if (errmsg && errmsg_size) {
            char t[512];
            snprintf(t, sizeof t, "%s", errmsg);
            snprintf(errmsg, errmsg_size, "%s: %s", at_wire_type_name(out->type), t);
        }
        err = AT_EPROTO;
        goto fail;
    }
    if (s) s->recv_seq = out->seq;
    return AT_OK;
#undef REFUSE
fail : {
    int type = out->type, version = out->version;
    at_wire_msg_fini(out);
    out->type = type;
    out->version = version;
    return err;
}
}

/* Used by at_wire_auth.c for the CHALLENGE a client checks after deriving its key. */
int at_wire__tag_ok(const at_wire_session *s, const void *p, size_t n);
int at_wire__tag_ok(const at_wire_session *s, const void *p, size_t n)
{
    if (n < AT_WIRE_TAG_BYTES + 1 || !s->keyed) return 0;
    return tag_ok(s, p, n - AT_WIRE_TAG_BYTES);
}

at_err at_wire_fingerprint(const at_wire_device *dv, char out[17])
{
    at_buf b;
    char hex[65];
    if (dv->arch == NULL || dv->model == NULL || dv->os == NULL || dv->driver == NULL ||
        dv->n_cores < 1)
        return AT_EINVAL;
    at_buf_init(&b);
    at_buf_putc(&b, '[');
    at_buf_json_str(&b, dv->arch);
    at_buf_putc(&b, ',');
    at_buf_json_str(&b, dv->model);
    at_buf_printf(&b, ",%d,", dv->n_cores);
    at_buf_json_str(&b, dv->os);
    at_buf_putc(&b, ',');
    at_buf_json_str(&b, dv->driver);
    at_buf_putc(&b, ']');
    if (b.err != AT_OK) {
        at_buf_fini(&b);
        return AT_ENOMEM;
    }
    at_sha256_hex(b.data, b.len, 32, hex);
    memcpy(out, hex, 16);
    out[16] = 0;
    at_buf_fini(&b);
    return AT_OK;
}

/* ==== deep copies ====================================================================== */

static const char *cp_str(at_arena *a, const char *s, int *bad)
{
    char *c = at_arena_strdup(a, s ? s : "");
    if (c == NULL) *bad = 1;
    return c ? c : "";
}

at_err at_wire_artifact_copy(at_arena *a, at_wire_artifact *dst, const at_wire_artifact *src)
{
    int bad = 0;
    uint8_t *obj = NULL;
    at_wire_arg *args = NULL;
    if (src->obj_size) {
        if ((obj = at_arena_alloc(a, src->obj_size)) == NULL) return AT_ENOMEM;
        memcpy(obj, src->obj, src->obj_size);
    }
    if (src->n_args > 0) {
        if ((args = at_arena_alloc(a, (size_t)src->n_args * sizeof *args)) == NULL)
            return AT_ENOMEM;
        memcpy(args, src->args, (size_t)src->n_args * sizeof *args);
    }
    *dst = *src;
    dst->obj = obj;
    dst->args = args;
    dst->entry = cp_str(a, src->entry, &bad);
    dst->triple = cp_str(a, src->triple, &bad);
    if (src->n_pre > 0) dst->pre_entry = cp_str(a, src->pre_entry, &bad);
    if (src->gpu_kind != AT_WIRE_GPU_NONE) {
        at_wire_launch *l = NULL;
        dst->gpu_arch = cp_str(a, src->gpu_arch, &bad);
        if (src->n_launches > 0 &&
            (l = at_arena_alloc(a, (size_t)src->n_launches * sizeof *l)) == NULL)
            return AT_ENOMEM;
        for (int k = 0; k < src->n_launches; k++)
            l[k] = src->launches[k];
        dst->launches = l;
    }
    return bad ? AT_ENOMEM : AT_OK;
}

at_err at_wire_job_copy(at_arena *a, at_wire_job *dst, const at_wire_job *src)
{
    int bad = 0;
    at_wire_artifact art;
    if (at_wire_artifact_copy(a, &art, &src->art) != AT_OK) return AT_ENOMEM;
    *dst = *src;
    dst->art = art;
    dst->id = cp_str(a, src->id, &bad);
    return bad ? AT_ENOMEM : AT_OK;
}

at_err at_wire_ref_copy(at_arena *a, at_wire_ref *dst, const at_wire_ref *src)
{
    at_wire_artifact art;
    if (at_wire_artifact_copy(a, &art, &src->art) != AT_OK) return AT_ENOMEM;
    *dst = *src;
    dst->art = art;
    return AT_OK;
}

at_err at_wire_device_copy(at_arena *a, at_wire_device *dst, const at_wire_device *src)
{
    int bad = 0;
    dst->n_cores = src->n_cores;
    dst->arch = cp_str(a, src->arch, &bad);
    dst->model = cp_str(a, src->model, &bad);
    dst->os = cp_str(a, src->os, &bad);
    dst->driver = cp_str(a, src->driver, &bad);
    return bad ? AT_ENOMEM : AT_OK;
}

at_err at_wire_result_copy(at_arena *a, at_wire_result *dst, const at_wire_result *src)
{
    int bad = 0;
    double *costs = NULL;
    if (src->n_costs > 0) {
        if ((costs = at_arena_alloc(a, (size_t)src->n_costs * sizeof *costs)) == NULL)
            return AT_ENOMEM;
        memcpy(costs, src->costs, (size_t)src->n_costs * sizeof *costs);
    }
    *dst = *src;
    dst->costs = costs;
    dst->id = cp_str(a, src->id, &bad);
    dst->error = cp_str(a, src->error, &bad);
    dst->agent = cp_str(a, src->agent, &bad);
    dst->fingerprint = cp_str(a, src->fingerprint, &bad);
    if (at_wire_device_copy(a, &dst->dev, &src->dev) != AT_OK) bad = 1;
    return bad ? AT_ENOMEM : AT_OK;
}
