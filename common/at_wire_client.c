/* common/at_wire_client.c -- the client end of a fleet connection: an nng req0 socket that
** dials the tracker (and redials with back-off), the handshake, and request/reply calls
** on the authenticated session.
**
** A session belongs to one nng pipe (one TCP connection).  When that pipe goes away (the
** tracker restarted, the network dropped) the session is gone with it: the next call
** answers AT_ECLOSED and at_wire_client_ensure opens a new one on the new pipe.  Requests
** are never resent by nng (resend time infinite), so a request is delivered at most once
** per session; the callers make their requests idempotent (job ids, result acks). */
#include "common/wire.h"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

struct at_wire_client {
    nng_socket sock;
    nng_dialer dialer;
    nng_ctx ctx;
    nng_aio *aio;
    int role;
    char url[512];
    char name[AT_WIRE_MAX_NAME + 1];
    char id[33];
    at_wire_key keys[2];
    int n_keys;
    at_wire_session sess;
    uint32_t sess_pipe;         /* pipe id of the open session; 0 when none */
    _Atomic uint32_t dead_pipe; /* the last pipe that went away */
    at_wire_welcome welcome;
    char tracker_id[AT_WIRE_MAX_NAME + 1];
    nng_msg *last_reply; /* keeps the byte arrays of the last reply alive */
    at_buf frame;
};

static void pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    at_wire_client *c = arg;
    if (ev == NNG_PIPE_EV_REM_POST) atomic_store(&c->dead_pipe, (uint32_t)nng_pipe_id(p));
}

void at_wire_url(const char *addr, char *out, size_t n)
{
    if (strstr(addr, "://") != NULL)
        snprintf(out, n, "%s", addr);
    else
        snprintf(out, n, "tcp://%s", addr);
}

at_err at_wire_client_open(const at_wire_client_cfg *cfg, at_wire_client **out, char *errmsg,
                           size_t n)
{
    at_wire_client *c;
    uint8_t rid[16];
    int rv;

    *out = NULL;
    if (cfg->url == NULL || cfg->n_keys < 1 || cfg->n_keys > 2 || cfg->keys == NULL) {
        snprintf(errmsg, n, "a client needs a tracker address and the fleet key");
        return AT_EINVAL;
    }
    if ((c = at_calloc(1, sizeof *c)) == NULL) return AT_ENOMEM;
    c->role = cfg->role;
    at_wire_url(cfg->url, c->url, sizeof c->url);
    snprintf(c->name, sizeof c->name, "%s", cfg->name ? cfg->name : "");
    memcpy(c->keys, cfg->keys, (size_t)cfg->n_keys * sizeof *c->keys);
    c->n_keys = cfg->n_keys;
    at_buf_init(&c->frame);
    at_wire_session_init(&c->sess, 1);
    if (at_wire_random(rid, sizeof rid) != AT_OK) {
        at_free(c);
        snprintf(errmsg, n, "getrandom failed");
        return AT_EIO;
    }
    at_sha256_hex(rid, sizeof rid, 16, c->id);

    if ((rv = nng_req0_open(&c->sock)) != 0) {
        snprintf(errmsg, n, "cannot open a socket: %s", nng_strerror(rv));
        at_free(c);
        return AT_EIO;
    }
    nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, AT_WIRE_MAX_MSG + 1024);
    nng_pipe_notify(c->sock, NNG_PIPE_EV_REM_POST, pipe_cb, c);
    if ((rv = nng_ctx_open(&c->ctx, c->sock)) != 0 ||
        (rv = nng_aio_alloc(&c->aio, NULL, NULL)) != 0) {
        snprintf(errmsg, n, "cannot set up the socket: %s", nng_strerror(rv));
        nng_close(c->sock);
        at_free(c);
        return AT_EIO;
    }
    nng_ctx_set_ms(c->ctx, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    if ((rv = nng_dialer_create(&c->dialer, c->sock, c->url)) != 0) {
        snprintf(errmsg, n, "bad tracker address '%s': %s", c->url, nng_strerror(rv));
        nng_aio_free(c->aio);
        nng_close(c->sock);
        at_free(c);
        return AT_EINVAL;
    }
    nng_dialer_set_ms(c->dialer, NNG_OPT_RECONNMINT,
                      cfg->reconnect_min_ms > 0 ? cfg->reconnect_min_ms : 100);
    nng_dialer_set_ms(c->dialer, NNG_OPT_RECONNMAXT,
                      cfg->reconnect_max_ms > 0 ? cfg->reconnect_max_ms : 5000);
    nng_dialer_set_size(c->dialer, NNG_OPT_RECVMAXSZ, AT_WIRE_MAX_MSG + 1024);
    if ((rv = nng_dialer_start(c->dialer, NNG_FLAG_NONBLOCK)) != 0) {
        snprintf(errmsg, n, "cannot dial '%s': %s", c->url, nng_strerror(rv));
        nng_aio_free(c->aio);
        nng_close(c->sock);
        at_free(c);
        return AT_EINVAL;
    }
    *out = c;
    return AT_OK;
}

void at_wire_client_close(at_wire_client *c)
{
    if (c == NULL) return;
    nng_aio_stop(c->aio);
    nng_ctx_close(c->ctx);
    nng_close(c->sock);
    nng_aio_free(c->aio);
    if (c->last_reply) nng_msg_free(c->last_reply);
    at_buf_fini(&c->frame);
    memset(c->keys, 0, sizeof c->keys);
    memset(&c->sess, 0, sizeof c->sess);
    at_free(c);
}

void at_wire_client_cancel(at_wire_client *c)
{
    if (c != NULL)
        nng_aio_cancel(c->aio);
}

const at_wire_welcome *at_wire_client_welcome(const at_wire_client *c)
{
    return &c->welcome;
}

const char *at_wire_client_id(const at_wire_client *c)
{
    return c->id;
}

static void drop_session(at_wire_client *c)
{
    at_wire_session_init(&c->sess, 1);
    c->sess_pipe = 0;
}

/* Send 'frame' and wait for one reply (kept in c->last_reply). */
static at_err exchange(at_wire_client *c, int timeout_ms, nng_msg **reply, char *errmsg, size_t n)
{
    nng_msg *m;
    int rv;

    *reply = NULL;
    if (c->last_reply) {
        nng_msg_free(c->last_reply);
        c->last_reply = NULL;
    }
    if ((rv = nng_msg_alloc(&m, 0)) != 0 ||
        (rv = nng_msg_append(m, c->frame.data, c->frame.len)) != 0) {
        if (rv == 0) nng_msg_free(m);
        return AT_ENOMEM;
    }
    nng_aio_set_msg(c->aio, m);
    nng_aio_set_timeout(c->aio, timeout_ms);
    nng_ctx_send(c->ctx, c->aio);
    nng_aio_wait(c->aio);
    if ((rv = nng_aio_result(c->aio)) != 0) {
        nng_msg_free(m);
        snprintf(errmsg, n, "cannot send to %s: %s", c->url, nng_strerror(rv));
        return rv == NNG_ETIMEDOUT ? AT_ETIMEDOUT : AT_ECLOSED;
    }
    nng_aio_set_timeout(c->aio, timeout_ms);
    nng_ctx_recv(c->ctx, c->aio);
    nng_aio_wait(c->aio);
    if ((rv = nng_aio_result(c->aio)) != 0) {
        snprintf(errmsg, n, "no reply from %s: %s", c->url, nng_strerror(rv));
        return rv == NNG_ETIMEDOUT ? AT_ETIMEDOUT : AT_ECLOSED;
    }
    *reply = c->last_reply = nng_aio_get_msg(c->aio);
    return AT_OK;
}

static at_err refused(const at_wire_msg *rep, char *errmsg, size_t n)
{
    snprintf(errmsg, n, "the tracker refused us: %s", rep->u.error.text);
    if (rep->u.error.code == AT_EVERSION) return AT_EVERSION;
    if (rep->u.error.code == AT_ECLOSED) return AT_ECLOSED;
    return AT_EAUTH;
}

at_err at_wire_client_ensure(at_wire_client *c, int timeout_ms, int *fresh, char *errmsg, size_t n)
{
    at_wire_msg req, rep;
    nng_msg *raw;
    uint8_t cnonce[AT_WIRE_NONCE_BYTES];
    const at_wire_key *key = NULL;
    uint32_t pipe;
    at_err err;

    *fresh = 0;
    if (c->sess.authed && atomic_load(&c->dead_pipe) != c->sess_pipe) return AT_OK;
    drop_session(c);

    /* HELLO -> CHALLENGE */
    if (at_wire_random(cnonce, sizeof cnonce) != AT_OK) return AT_EIO;
    at_wire_msg_init(&req, AT_WIRE_T_HELLO);
    req.u.hello.version = AT_WIRE_VERSION;
    req.u.hello.role = c->role;
    req.u.hello.name = c->name;
    req.u.hello.client_id = c->id;
    req.u.hello.software = "autotune " AT_WIRE_SOFTWARE;
    memcpy(req.u.hello.nonce, cnonce, sizeof cnonce);
    req.u.hello.n_keys = c->n_keys;
    for (int i = 0; i < c->n_keys; i++)
        memcpy(req.u.hello.key_ids[i], c->keys[i].id, AT_WIRE_KEYID_BYTES);
    at_buf_reset(&c->frame);
    err = at_wire_encode(&c->sess, &req, &c->frame);
    at_wire_msg_fini(&req);
    if (err != AT_OK) return err;
    if ((err = exchange(c, timeout_ms, &raw, errmsg, n)) != AT_OK) return err;
    pipe = (uint32_t)nng_pipe_id(nng_msg_get_pipe(raw));
    err = at_wire_decode(&c->sess, nng_msg_body(raw), nng_msg_len(raw), &rep, errmsg, n);
    if (err != AT_OK) {
        drop_session(c);
        return err == AT_EVERSION ? AT_EVERSION : AT_EPROTO;
    }
    if (rep.type == AT_WIRE_T_ERROR) {
        err = refused(&rep, errmsg, n);
        at_wire_msg_fini(&rep);
        drop_session(c);
        return err;
    }
    if (rep.type != AT_WIRE_T_CHALLENGE || rep.re != req.seq) {
        snprintf(errmsg, n, "the tracker answered HELLO with %s", at_wire_type_name(rep.type));
        at_wire_msg_fini(&rep);
        drop_session(c);
        return AT_EPROTO;
    }
    for (int i = 0; i < c->n_keys; i++)
        if (memcmp(c->keys[i].id, rep.u.challenge.key_id, AT_WIRE_KEYID_BYTES) == 0)
            key = &c->keys[i];
    if (key == NULL) {
        snprintf(errmsg, n, "the tracker chose a key we do not hold");
        at_wire_msg_fini(&rep);
        drop_session(c);
        return AT_EAUTH;
    }
    at_wire_session_key(&c->sess, key, cnonce, rep.u.challenge.nonce);
    at_wire_msg_fini(&rep);
    {
        int at_wire__tag_ok(const at_wire_session *s, const void *p, size_t len);
        if (!at_wire__tag_ok(&c->sess, nng_msg_body(raw), nng_msg_len(raw))) {
            snprintf(errmsg, n,
                     "the tracker does not hold the fleet key (its CHALLENGE is "
                     "not signed with it): refusing to talk to it");
            drop_session(c);
            return AT_EAUTH;
        }
    }

    /* AUTH -> WELCOME */
    at_wire_msg_init(&req, AT_WIRE_T_AUTH);
    at_buf_reset(&c->frame);
    err = at_wire_encode(&c->sess, &req, &c->frame);
    at_wire_msg_fini(&req);
    if (err != AT_OK) {
        drop_session(c);
        return err;
    }
    if ((err = exchange(c, timeout_ms, &raw, errmsg, n)) != AT_OK) {
        drop_session(c);
        return err;
    }
    if ((uint32_t)nng_pipe_id(nng_msg_get_pipe(raw)) != pipe) {
        snprintf(errmsg, n, "the connection changed during the handshake");
        drop_session(c);
        return AT_ECLOSED;
    }
    err = at_wire_decode(&c->sess, nng_msg_body(raw), nng_msg_len(raw), &rep, errmsg, n);
    if (err != AT_OK) {
        /* an unsigned ERROR (e.g. a wrong key on our side) still says why */
        at_wire_msg plain;
        if (at_wire_decode(NULL, nng_msg_body(raw), nng_msg_len(raw), &plain, NULL, 0) == AT_OK &&
            plain.type == AT_WIRE_T_ERROR) {
            err = refused(&plain, errmsg, n);
            at_wire_msg_fini(&plain);
        }
        drop_session(c);
        return err == AT_EVERSION ? AT_EVERSION : err == AT_EPROTO ? AT_EPROTO : AT_EAUTH;
    }
    if (rep.type == AT_WIRE_T_ERROR) {
        err = refused(&rep, errmsg, n);
        at_wire_msg_fini(&rep);
        drop_session(c);
        return err;
    }
    if (rep.type != AT_WIRE_T_WELCOME) {
        snprintf(errmsg, n, "the tracker answered AUTH with %s", at_wire_type_name(rep.type));
        at_wire_msg_fini(&rep);
        drop_session(c);
        return AT_EPROTO;
    }
    c->welcome = rep.u.welcome;
    snprintf(c->tracker_id, sizeof c->tracker_id, "%s", rep.u.welcome.tracker_id);
    c->welcome.tracker_id = c->tracker_id;
    at_wire_msg_fini(&rep);
    c->sess.authed = 1;
    c->sess_pipe = pipe;
    if (atomic_load(&c->dead_pipe) == pipe) { /* it went away meanwhile */
        drop_session(c);
        return AT_ECLOSED;
    }
    *fresh = 1;
    return AT_OK;
}

at_err at_wire_client_call(at_wire_client *c, at_wire_msg *req, int timeout_ms, at_wire_msg *rep,
                           char *errmsg, size_t n)
{
    nng_msg *raw;
    at_err err;

    at_wire_msg_init(rep, 0);
    if (!c->sess.authed || atomic_load(&c->dead_pipe) == c->sess_pipe) {
        drop_session(c);
        snprintf(errmsg, n, "no open session");
        return AT_ECLOSED;
    }
    at_buf_reset(&c->frame);
    if ((err = at_wire_encode(&c->sess, req, &c->frame)) != AT_OK) {
        snprintf(errmsg, n, "cannot encode %s: a field is out of bounds",
                 at_wire_type_name(req->type));
        return err;
    }
    if ((err = exchange(c, timeout_ms, &raw, errmsg, n)) != AT_OK) {
        if (err == AT_ECLOSED) drop_session(c);
        /* a timed-out request may still be answered later: its session cannot be trusted
        ** to stay in step, so open a new one */
        if (err == AT_ETIMEDOUT) drop_session(c);
        return err;
    }
    if ((uint32_t)nng_pipe_id(nng_msg_get_pipe(raw)) != c->sess_pipe) {
        drop_session(c);
        snprintf(errmsg, n, "the connection to the tracker was replaced");
        return AT_ECLOSED;
    }
    err = at_wire_decode(&c->sess, nng_msg_body(raw), nng_msg_len(raw), rep, errmsg, n);
    if (err != AT_OK) {
        at_wire_msg plain;
        /* the tracker lost our session (restarted) and says so unsigned */
        if (at_wire_decode(NULL, nng_msg_body(raw), nng_msg_len(raw), &plain, NULL, 0) == AT_OK &&
            plain.type == AT_WIRE_T_ERROR && plain.u.error.code == AT_ECLOSED) {
            snprintf(errmsg, n, "%s", plain.u.error.text);
            at_wire_msg_fini(&plain);
            drop_session(c);
            return AT_ECLOSED;
        }
        drop_session(c);
        return err;
    }
    if (rep->re != req->seq) {
        snprintf(errmsg, n, "the reply answers request %llu, not %llu", (unsigned long long)rep->re,
                 (unsigned long long)req->seq);
        at_wire_msg_fini(rep);
        drop_session(c);
        return AT_EPROTO;
    }
    if (rep->type == AT_WIRE_T_ERROR && rep->u.error.code == AT_ECLOSED) drop_session(c);
    return AT_OK;
}
