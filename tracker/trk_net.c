/* tracker/trk_net.c -- the tracker's socket: an nng rep0 socket with a growing pool of
** contexts, the event queue that nng's callbacks feed, the loop of trk_run, and replies.
**
** Each context receives one request at a time.  Its callback hands the request to the loop
** (TRK_EV_REQUEST) and the context stays HELD until the loop replies (trk__reply), which
** may be much later for a long poll; so the pool grows when few contexts are left waiting
** for requests.  Pipe removals reach the loop as TRK_EV_PIPE_GONE. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tracker/trk_int.h"

#include <nng/protocol/reqrep0/rep.h>

#define TRK_MAX_CTXS 8192
#define TRK_SPARE_CTXS 8

void trk__push_event(trk_tracker *t, int kind, trk_ctx *ctx, uint32_t pipe, const char *peer,
                     const uint8_t *body, size_t len, void *owner)
{
    trk_event *e = at_calloc(1, sizeof *e);
    if (e == NULL) { /* nothing to queue it in: drop the request, keep the context alive */
        if (ctx && ctx->tcp) {
            at_free(owner);
            at_free(ctx);
        } else if (ctx) {
            if (owner) nng_msg_free(owner);
            ctx->state = TRK_CTX_RECV;
            atomic_fetch_add(&t->n_recv, 1);
            nng_ctx_recv(ctx->ctx, ctx->aio);
        }
        return;
    }
    e->kind = kind;
    e->ctx = ctx;
    e->pipe = pipe;
    if (peer) snprintf(e->peer, sizeof e->peer, "%s", peer);
    e->body = body;
    e->len = len;
    e->owner = owner;
    e->owner_tcp = ctx && ctx->tcp; /* the reply frees a TCP ctx: remember it here */
    pthread_mutex_lock(&t->mu);
    if (t->ev_tail)
        t->ev_tail->next = e;
    else
        t->ev_head = e;
    t->ev_tail = e;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

static void event_free(trk_event *e)
{
    if (e->owner) {
        if (e->owner_tcp)
            at_free(e->owner);
        else
            nng_msg_free(e->owner);
    }
    at_free(e);
}

static void ctx_cb(void *arg)
{
    trk_ctx *c = arg;
    trk_tracker *t = c->t;
    int rv = nng_aio_result(c->aio);

    if (c->state == TRK_CTX_RECV) {
        if (rv != 0) {
            if (rv == NNG_ECLOSED || atomic_load(&t->stop)) {
                c->state = TRK_CTX_DONE;
                atomic_fetch_sub(&t->n_recv, 1);
                return;
            }
            nng_ctx_recv(c->ctx, c->aio);
            return;
        }
        nng_msg *m = nng_aio_get_msg(c->aio);
        atomic_fetch_sub(&t->n_recv, 1);
        c->state = TRK_CTX_HELD;
        trk__push_event(t, TRK_EV_REQUEST, c, (uint32_t)nng_pipe_id(nng_msg_get_pipe(m)), NULL,
                        nng_msg_body(m), nng_msg_len(m), m);
    } else if (c->state == TRK_CTX_SEND) {
        if (rv != 0) nng_msg_free(nng_aio_get_msg(c->aio));
        if (rv == NNG_ECLOSED) {
            c->state = TRK_CTX_DONE;
            return;
        }
        c->state = TRK_CTX_RECV;
        atomic_fetch_add(&t->n_recv, 1);
        nng_ctx_recv(c->ctx, c->aio);
    }
}

static void pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    trk_tracker *t = arg;
    if (ev == NNG_PIPE_EV_REM_POST)
        trk__push_event(t, TRK_EV_PIPE_GONE, NULL, (uint32_t)nng_pipe_id(p), NULL, NULL, 0, NULL);
}

static at_err add_ctxs(trk_tracker *t, int n)
{
    for (int i = 0; i < n && t->n_ctxs < TRK_MAX_CTXS; i++) {
        trk_ctx *c;
        if (t->n_ctxs == t->cap_ctxs) {
            int cap = t->cap_ctxs ? 2 * t->cap_ctxs : 32;
            trk_ctx **v = at_realloc(t->ctxs, (size_t)cap * sizeof *v);
            if (v == NULL) return AT_ENOMEM;
            t->ctxs = v;
            t->cap_ctxs = cap;
        }
        if ((c = at_calloc(1, sizeof *c)) == NULL) return AT_ENOMEM;
        c->t = t;
        c->index = t->n_ctxs;
        if (nng_ctx_open(&c->ctx, t->sock) != 0) {
            at_free(c);
            return AT_EIO;
        }
        if (nng_aio_alloc(&c->aio, ctx_cb, c) != 0) {
            nng_ctx_close(c->ctx);
            at_free(c);
            return AT_ENOMEM;
        }
        t->ctxs[t->n_ctxs++] = c;
        c->state = TRK_CTX_RECV;
        atomic_fetch_add(&t->n_recv, 1);
        nng_ctx_recv(c->ctx, c->aio);
    }
    return AT_OK;
}

void trk__reply_raw(trk_tracker *t, trk_ctx *ctx, const void *p, size_t n)
{
    nng_msg *m;
    if (ctx->tcp) {
        trk__tcp_reply(t, ctx, p, n);
        return;
    }
    if (ctx->state == TRK_CTX_CLOSED) /* the tracker is closing: nobody reads it */
        return;
    if (nng_msg_alloc(&m, 0) != 0 || nng_msg_append(m, p, n) != 0) {
        at_log_error("tracker: out of memory for a reply");
        return;
    }
    ctx->state = TRK_CTX_SEND;
    nng_aio_set_msg(ctx->aio, m);
    nng_aio_set_timeout(ctx->aio, 30000);
    nng_ctx_send(ctx->ctx, ctx->aio);
}

void trk__reply(trk_tracker *t, trk_ctx *ctx, at_wire_session *s, at_wire_msg *m)
{
    at_buf_reset(&t->frame);
    if (at_wire_encode(s, m, &t->frame) != AT_OK) {
        /* our own message out of bounds: answer with an error the peer can read */
        at_wire_msg e;
        at_log_error("tracker: cannot encode %s (a field is out of bounds)",
                     at_wire_type_name(m->type));
        at_wire_msg_init(&e, AT_WIRE_T_ERROR);
        e.re = m->re;
        e.u.error.code = AT_EINVAL;
        e.u.error.text = "the tracker could not encode its reply";
        at_buf_reset(&t->frame);
        if (at_wire_encode(s, &e, &t->frame) != AT_OK) return;
    }
    trk__reply_raw(t, ctx, t->frame.data, t->frame.len);
}

void trk__close_pipe(trk_tracker *t, uint32_t pipe)
{
    nng_pipe p = NNG_PIPE_INITIALIZER;
    if (pipe & TRK_TCP_PIPE) {
        trk__tcp_close_pipe(t, pipe);
        return;
    }
    p.id = pipe;
    nng_pipe_close(p);
}

void trk__pipe_authed(trk_tracker *t, uint32_t pipe)
{
    if (pipe & TRK_TCP_PIPE) trk__tcp_authed(t, pipe);
}

at_err trk_open(const trk_config *cfg, trk_tracker **out, char *errmsg, size_t n)
{
    trk_tracker *t;
    uint8_t rid[16];
    int rv;

    *out = NULL;
    if (cfg->listen_url == NULL || cfg->keys == NULL || cfg->n_keys < 1 || cfg->n_keys > 2) {
        snprintf(errmsg, n, "the tracker needs an address to listen on and the fleet key");
        return AT_EINVAL;
    }
    if ((t = at_calloc(1, sizeof *t)) == NULL) return AT_ENOMEM;
    t->cfg = *cfg;
    memcpy(t->keys, cfg->keys, (size_t)cfg->n_keys * sizeof *t->keys);
    t->n_keys = cfg->n_keys;
    t->cfg.keys = t->keys;
    snprintf(t->name, sizeof t->name, "%s", cfg->name ? cfg->name : "tracker");
    t->cfg.name = t->name;
    snprintf(t->listen_url, sizeof t->listen_url, "%s", cfg->listen_url);
    t->cfg.listen_url = t->listen_url;
    t->cfg.http_url = NULL;
    if (t->cfg.lease_ms <= 0) t->cfg.lease_ms = 10000;
    if (t->cfg.heartbeat_ms <= 0) t->cfg.heartbeat_ms = 1000;
    if (t->cfg.hold_ms <= 0) t->cfg.hold_ms = 1000;
    if (t->cfg.client_grace_ms <= 0) t->cfg.client_grace_ms = 60000;
    if (t->cfg.max_attempts <= 0) t->cfg.max_attempts = 3;
    if (t->cfg.max_unauth <= 0) t->cfg.max_unauth = 64;
    if (t->cfg.auth_timeout_ms <= 0) t->cfg.auth_timeout_ms = 10000;
    at_wire_random(rid, sizeof rid);
    at_sha256_hex(rid, sizeof rid, 16, t->id);
    pthread_mutex_init(&t->mu, NULL);
    pthread_mutex_init(&t->smu, NULL);
    {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&t->cv, &ca);
        pthread_condattr_destroy(&ca);
    }
    trk__map_init(&t->sessions);
    trk__map_init(&t->clients);
    trk__map_init(&t->jobs);
    trk__map_init(&t->refs);
    trk__map_init(&t->pools_by_key);
    trk__list_init(&t->sessions_list);
    trk__list_init(&t->clients_list);
    trk__list_init(&t->pools);
    trk__list_init(&t->idle_refs);
    at_buf_init(&t->frame);
    t->now = at_time_mono_s();

    if (strncmp(t->listen_url, "tcp", 3) == 0) {
        at_err e = trk__tcp_open(t, errmsg, n);
        if (e != AT_OK) {
            t->cfg.http_url = NULL;
            trk_close(t);
            return e;
        }
        goto serving;
    }
    if ((rv = nng_rep0_open(&t->sock)) != 0) {
        snprintf(errmsg, n, "cannot open the tracker socket: %s", nng_strerror(rv));
        goto fail;
    }
    t->have_nng = 1;
    nng_socket_set_size(t->sock, NNG_OPT_RECVMAXSZ, AT_WIRE_MAX_MSG + 1024);
    nng_pipe_notify(t->sock, NNG_PIPE_EV_REM_POST, pipe_cb, t);
    if ((rv = nng_listener_create(&t->listener, t->sock, t->listen_url)) != 0) {
        snprintf(errmsg, n, "bad address '%s': %s", t->listen_url, nng_strerror(rv));
        goto fail_sock;
    }
    nng_listener_set_size(t->listener, NNG_OPT_RECVMAXSZ, AT_WIRE_MAX_MSG + 1024);
    if ((rv = nng_listener_start(t->listener, 0)) != 0) {
        snprintf(errmsg, n, "cannot listen on '%s': %s", t->listen_url, nng_strerror(rv));
        goto fail_sock;
    }
    if (add_ctxs(t, 32) != AT_OK) {
        snprintf(errmsg, n, "cannot create the tracker's contexts");
        goto fail_sock;
    }
serving:
    if (t->port > 0) {
        char *colon = strrchr(t->listen_url, ':');
        if (colon && strcmp(colon, ":0") == 0)
            snprintf(colon, sizeof t->listen_url - (size_t)(colon - t->listen_url), ":%d", t->port);
    }
    if (cfg->http_url && cfg->http_url[0] && trk__http_start(t, cfg->http_url, errmsg, n) != AT_OK)
        goto fail_sock;
    trk__status_refresh(t);
    *out = t;
    return AT_OK;
fail_sock:
    t->cfg.http_url = NULL;
    trk_close(t);
    return AT_EIO;
fail:
    pthread_mutex_destroy(&t->mu);
    pthread_mutex_destroy(&t->smu);
    pthread_cond_destroy(&t->cv);
    at_buf_fini(&t->frame);
    at_free(t);
    return AT_EIO;
}

int trk_port(const trk_tracker *t)
{
    return t->port;
}

int trk_http_port(const trk_tracker *t)
{
    return t->http_port;
}

void trk_stop(trk_tracker *t)
{
    atomic_store(&t->stop, 1);
}

/* Random bytes or another protocol on the port never reach a pipe: nng drops such
** connections during its handshake.  Its listener statistics count them; log increases. */
static void watch_tcp(trk_tracker *t)
{
    static const char *const what[TRK_TCP_N_REFUSALS] = {
        "connection(s) that do not speak the SP protocol (random bytes or another protocol on "
        "the port)",
        "frame(s) over the size limit (4096 bytes before authentication)",
        "unauthenticated connection(s) to make room for new ones (--max-unauth)",
        "connection(s) that did not authenticate in time (--auth-timeout-ms)"};
    for (int i = 0; i < TRK_TCP_N_REFUSALS; i++) {
        int64_t now = atomic_load(&t->tcp_refusals[i]);
        if (now > t->tcp_logged[i]) {
            char peer[64];
            pthread_mutex_lock(&t->smu);
            snprintf(peer, sizeof peer, "%s", t->tcp_last_peer[i]);
            pthread_mutex_unlock(&t->smu);
            at_log_warn("tracker: %s %lld %s; the last from %s",
                        i == TRK_TCP_NOT_SP || i == TRK_TCP_BIG ? "refused" : "closed",
                        (long long)(now - t->tcp_logged[i]), what[i], peer);
            t->tcp_logged[i] = now;
        }
    }
}

static void watch_listener(trk_tracker *t)
{
    nng_stat *all, *ls, *s;
    uint64_t bad = 0;
    if (t->tcp) {
        watch_tcp(t);
        return;
    }
    if (nng_stats_get(&all) != 0) return;
    if ((ls = nng_stat_find_listener(all, t->listener)) != NULL) {
        static const char *const names[] = {"proto", "reject", "auth"};
        for (size_t i = 0; i < AT_ARRAY_LEN(names); i++)
            if ((s = nng_stat_find(ls, names[i])) != NULL) bad += nng_stat_value(s);
    }
    nng_stats_free(all);
    if (bad > t->listener_bad) {
        at_log_warn("tracker: refused %llu connection(s) that do not speak the SP protocol "
                    "(random bytes or another protocol on the port)",
                    (unsigned long long)(bad - t->listener_bad));
        pthread_mutex_lock(&t->smu);
        t->stats.n_refused += (int64_t)(bad - t->listener_bad);
        pthread_mutex_unlock(&t->smu);
        t->listener_bad = bad;
    }
}

at_err trk_run(trk_tracker *t)
{
    double next_watch = 0;
    at_log_info("tracker: serving on %s%s (tracker id %.8s)", t->listen_url,
                t->http_port ? " with a status page" : "", t->id);
    while (!atomic_load(&t->stop)) {
        trk_event *ev;
        pthread_mutex_lock(&t->mu);
        if (t->ev_head == NULL) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            ts.tv_nsec += 20 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&t->cv, &t->mu, &ts);
        }
        ev = t->ev_head;
        t->ev_head = t->ev_tail = NULL;
        pthread_mutex_unlock(&t->mu);
        t->now = at_time_mono_s();
        while (ev != NULL) {
            trk_event *next = ev->next;
            if (ev->kind == TRK_EV_REQUEST)
                trk__handle(t, ev->ctx, ev->pipe, ev->peer[0] ? ev->peer : NULL, ev->body, ev->len);
            else if (ev->kind == TRK_EV_PIPE_GONE)
                trk__pipe_gone(t, ev->pipe);
            event_free(ev);
            ev = next;
        }
        t->now = at_time_mono_s();
        if (t->now >= t->next_tick) {
            trk__tick(t);
            t->next_tick = t->now + 0.02;
        }
        if (t->now >= next_watch) {
            watch_listener(t);
            next_watch = t->now + 1.0;
        }
        if (t->have_nng && atomic_load(&t->n_recv) < TRK_SPARE_CTXS && add_ctxs(t, 16) != AT_OK)
            at_log_warn("tracker: cannot add contexts (%d open)", t->n_ctxs);
    }
    at_log_info("tracker: stopping");
    return AT_OK;
}

void trk_close(trk_tracker *t)
{
    trk_event *ev;
    if (t == NULL) return;
    atomic_store(&t->stop, 1);
    trk__http_stop(t);
    trk__tcp_close(t);
    if (t->have_nng) nng_close(t->sock);
    for (int i = 0; i < t->n_ctxs; i++) {
        nng_aio_stop(t->ctxs[i]->aio); /* its callback freed what it held */
        nng_aio_free(t->ctxs[i]->aio);
        t->ctxs[i]->aio = NULL;
        t->ctxs[i]->state = TRK_CTX_CLOSED; /* freed below, after the state that may hold it */
    }
    pthread_mutex_lock(&t->mu);
    ev = t->ev_head;
    t->ev_head = t->ev_tail = NULL;
    pthread_mutex_unlock(&t->mu);
    while (ev) {
        trk_event *next = ev->next;
        if (ev->ctx && ev->ctx->tcp) at_free(ev->ctx); /* never answered */
        event_free(ev);
        ev = next;
    }
    trk__free_state(t); /* answers parked polls: dropped on the closed contexts */
    for (int i = 0; i < t->n_ctxs; i++)
        at_free(t->ctxs[i]);
    at_free(t->ctxs);
    trk__map_fini(&t->sessions);
    trk__map_fini(&t->clients);
    trk__map_fini(&t->jobs);
    trk__map_fini(&t->refs);
    trk__map_fini(&t->pools_by_key);
    at_buf_fini(&t->frame);
    at_free(t->status_json);
    pthread_mutex_destroy(&t->mu);
    pthread_mutex_destroy(&t->smu);
    pthread_cond_destroy(&t->cv);
    memset(t->keys, 0, sizeof t->keys);
    at_free(t);
}
