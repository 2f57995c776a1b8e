/* tracker/trk_tcp.c -- the tracker's TCP listener: nng's SP protocol over TCP, served by a
** libuv loop on a thread of its own, so that the tracker decides how much a connection may
** make it hold.  nng's own listener takes one receive limit per socket: every connection,
** authenticated or not, could make it allocate a 64 MiB frame (issue 14, item 7).  Here:
**
**   - a connection that has not authenticated may send frames of at most 4,096 bytes (plus
**     the 4-byte request id); a larger one is answered with an unsigned ERROR naming the
**     limit, its bytes (1 MiB at most) are read into a fixed scratch buffer and dropped, and
**     the connection is closed a second later.  Nothing is allocated for it: the length is
**     checked when the 8-byte length prefix arrives, before the body is read;
**   - at most 'max_unauth' connections may wait unauthenticated at once: a new one evicts
**     the oldest (a flood cannot lock an agent out for longer than the flood's own churn);
**   - a connection that has not authenticated within 'auth_timeout_ms' is closed;
**   - an authenticated connection (the core says so, trk__tcp_authed, before it sends
**     WELCOME) may send frames up to AT_WIRE_MAX_MSG + 1024, as nng allowed everyone before.
**
** The wire (what nng's req0 dialer speaks, and nng's own tcp transport): each side sends an
** 8-byte header 00 'S' 'P' 00, its protocol id (16 bits, big-endian: req0 0x30, rep0 0x31)
** and two zero bytes; then frames of a 64-bit big-endian length and that many bytes.  A
** request starts with its backtrace: 32-bit big-endian words, the last (the request id)
** with the high bit set; a reply starts with the same words.
**
** Threads: the loop thread owns every libuv handle and connection.  It hands each request to
** trk_run's thread as a TRK_EV_REQUEST event with a trk_ctx of its own (freed when the reply
** is queued); trk_run's thread sends replies, closes and 'authenticated' marks back through a
** FIFO command queue and a uv_async_t, so a mark is always applied before the reply after it
** is written.  Pipe ids of TCP connections have the high bit set (TRK_TCP_PIPE); nng's pipe
** ids (inproc://) never do. */
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "tracker/trk_int.h"

#define SP_REQ0 0x30
#define SP_REP0 0x31
#define SP_MAX_HOPS 8                                   /* backtrace words, as nng's rep0 */
#define PREAUTH_FRAME (AT_WIRE_MAX_PREAUTH + 4)         /* a wire frame and its request id */
#define AUTHED_FRAME ((uint64_t)AT_WIRE_MAX_MSG + 1024) /* as nng's RECVMAXSZ was */
#define MAX_QUEUED (2 * (size_t)AT_WIRE_MAX_MSG)        /* reply bytes waiting on one peer */
#define LINGER_S 1.0                                    /* a refused peer's time to read why */
#define DISCARD_MAX (1u << 20)                          /* bytes dropped after a refusal, at most */

enum { R_HS, R_LEN, R_BODY, R_DISCARD };
enum { CMD_WRITE, CMD_CLOSE, CMD_AUTHED };

typedef struct trk_cmd {
    uv_write_t w; /* CMD_WRITE: the write in flight */
    struct trk_cmd *next;
    int kind;
    uint32_t pipe;
    size_t n;
    struct trk_conn *conn;
    uint8_t data[]; /* CMD_WRITE: the whole frame */
} trk_cmd;

typedef struct trk_conn {
    uv_tcp_t h;
    trk_link link; /* in srv->conns, oldest first */
    struct trk_tcp *srv;
    uint32_t pipe;
    char key[12]; /* pipe id in decimal: the map key */
    int rstate;
    int authed, closing, delivered;
    uint8_t hs[8], lenb[8];
    size_t got;
    uint8_t *body;
    size_t body_len;
    uint64_t refused_len; /* > 0: the frame being read is over the limit (its prefix only) */
    size_t discarded;     /* bytes dropped since the refusal */
    double opened_at, linger_until;
    size_t queued;
    char peer[64];
} trk_conn;

struct trk_tcp {
    trk_tracker *t;
    uv_loop_t loop;
    uv_tcp_t server;
    uv_async_t wake;
    uv_timer_t timer;
    pthread_t thread;
    int started;
    pthread_mutex_t mu; /* the command queue and 'stopping' */
    trk_cmd *head, *tail;
    int stopping;
    /* the loop thread's */
    trk_link conns;
    trk_map by_pipe;
    uint32_t next_pipe;
    int n_unauth;
    uint8_t scratch[65536];
};

static const uint8_t sp_rep0_header[8] = {0, 'S', 'P', 0, 0, SP_REP0, 0, 0};

static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

static uint64_t get_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

static void count(trk_tracker *t, int kind, const char *peer)
{
    atomic_fetch_add(&t->tcp_refusals[kind], 1);
    pthread_mutex_lock(&t->smu);
    t->stats.n_refused++;
    snprintf(t->tcp_last_peer[kind], sizeof t->tcp_last_peer[kind], "%s", peer);
    pthread_mutex_unlock(&t->smu);
}

/* ---- connections -------------------------------------------------------------------- */

static void on_closed(uv_handle_t *h)
{
    trk_conn *c = h->data;
    struct trk_tcp *srv = c->srv;
    if (!c->authed) srv->n_unauth--;
    trk__map_del(&srv->by_pipe, c->key);
    trk__list_remove(&c->link);
    if (c->delivered) trk__push_event(srv->t, TRK_EV_PIPE_GONE, NULL, c->pipe, NULL, NULL, 0, NULL);
    at_free(c->body);
    at_free(c);
}

static void on_closed_free(uv_handle_t *h) /* a connection that never got in */
{
    at_free(h->data);
}

static void conn_close(trk_conn *c)
{
    if (c->closing) return;
    c->closing = 1;
    uv_read_stop((uv_stream_t *)&c->h);
    uv_close((uv_handle_t *)&c->h, on_closed);
}

static void on_written(uv_write_t *w, int status)
{
    trk_cmd *cmd = (trk_cmd *)w;
    trk_conn *c = cmd->conn;
    c->queued -= cmd->n;
    if (status < 0 && status != UV_ECANCELED) conn_close(c);
    at_free(cmd);
}

static void conn_write(trk_conn *c, trk_cmd *cmd)
{
    uv_buf_t b = uv_buf_init((char *)cmd->data, (unsigned)cmd->n);
    if (c->closing || c->queued + cmd->n > MAX_QUEUED) {
        if (!c->closing)
            at_log_warn("tracker: %s reads no replies (%zu bytes waiting); closing the connection",
                        c->peer, c->queued);
        conn_close(c);
        at_free(cmd);
        return;
    }
    cmd->conn = c;
    c->queued += cmd->n;
    if (uv_write(&cmd->w, (uv_stream_t *)&c->h, &b, 1, on_written) != 0) {
        c->queued -= cmd->n;
        at_free(cmd);
        conn_close(c);
    }
}

/* A frame and its backtrace 'hdr' as one write. */
static trk_cmd *frame_cmd(const uint8_t *hdr, size_t hdr_len, const void *p, size_t n)
{
    trk_cmd *cmd = at_malloc(sizeof *cmd + 8 + hdr_len + n);
    if (cmd == NULL) return NULL;
    memset(cmd, 0, sizeof *cmd);
    cmd->kind = CMD_WRITE;
    cmd->n = 8 + hdr_len + n;
    put_be64(cmd->data, hdr_len + n);
    memcpy(cmd->data + 8, hdr, hdr_len);
    if (n) memcpy(cmd->data + 8 + hdr_len, p, n);
    return cmd;
}

/* Length of the backtrace at the start of 'p' (words up to the one with the high bit), or
** 0 when there is none within SP_MAX_HOPS words. */
static size_t backtrace_len(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i + 4 <= n && i < 4 * SP_MAX_HOPS; i += 4)
        if (p[i] & 0x80) return i + 4;
    return 0;
}

/* A frame over the pre-authentication limit: answer why (unsigned ERROR carrying the
** request's backtrace), drop what follows, close after LINGER_S. */
static void refuse_big(trk_conn *c)
{
    trk_tracker *t = c->srv->t;
    size_t hl = backtrace_len(c->body, c->body_len);
    char text[160];
    at_wire_msg e;
    at_buf b;

    count(t, TRK_TCP_BIG, c->peer);
    c->rstate = R_DISCARD;
    c->linger_until = at_time_mono_s() + LINGER_S;
    if (hl == 0) return;
    snprintf(text, sizeof text,
             "a frame of %llu bytes before authentication: the limit is %u bytes until the "
             "session is authenticated",
             (unsigned long long)(c->refused_len - hl), AT_WIRE_MAX_PREAUTH);
    at_wire_msg_init(&e, AT_WIRE_T_ERROR);
    e.u.error.code = AT_EPROTO;
    e.u.error.text = text;
    at_buf_init(&b);
    if (at_wire_encode(NULL, &e, &b) == AT_OK && b.err == AT_OK) {
        trk_cmd *cmd = frame_cmd(c->body, hl, b.data, b.len);
        if (cmd) conn_write(c, cmd);
    }
    at_buf_fini(&b);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    trk_conn *c = h->data;
    (void)suggested;
    switch (c->rstate) {
    case R_HS:
        *buf = uv_buf_init((char *)c->hs + c->got, (unsigned)(8 - c->got));
        break;
    case R_LEN:
        *buf = uv_buf_init((char *)c->lenb + c->got, (unsigned)(8 - c->got));
        break;
    case R_BODY:
        *buf = uv_buf_init((char *)c->body + c->got, (unsigned)(c->body_len - c->got));
        break;
    default:
        *buf = uv_buf_init((char *)c->srv->scratch, sizeof c->srv->scratch);
    }
}

/* A whole frame in c->body: hand it to trk_run's thread. */
static void deliver(trk_conn *c)
{
    size_t hl = backtrace_len(c->body, c->body_len);
    trk_ctx *ctx;
    if (hl == 0) { /* no request id: not a req0 peer */
        count(c->srv->t, TRK_TCP_NOT_SP, c->peer);
        conn_close(c);
        return;
    }
    if ((ctx = at_calloc(1, sizeof *ctx)) == NULL) { /* drop the request, keep the peer */
        at_free(c->body);
        c->body = NULL;
        return;
    }
    ctx->t = c->srv->t;
    ctx->tcp = 1;
    ctx->pipe = c->pipe;
    memcpy(ctx->hdr, c->body, hl);
    ctx->hdr_len = (uint8_t)hl;
    c->delivered = 1;
    trk__push_event(c->srv->t, TRK_EV_REQUEST, ctx, c->pipe, c->peer, c->body + hl,
                    c->body_len - hl, c->body);
    c->body = NULL;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    trk_conn *c = s->data;
    trk_tracker *t = c->srv->t;
    (void)buf;
    if (nread < 0) {
        conn_close(c);
        return;
    }
    if (nread == 0 || c->closing) return;
    if (c->rstate == R_DISCARD) {
        if ((c->discarded += (size_t)nread) > DISCARD_MAX) conn_close(c);
        return;
    }
    c->got += (size_t)nread;
    switch (c->rstate) {
    case R_HS:
        if (c->got < 8) return;
        if (c->hs[0] != 0 || c->hs[1] != 'S' || c->hs[2] != 'P' || c->hs[3] != 0 || c->hs[4] != 0 ||
            c->hs[5] != SP_REQ0 || c->hs[6] != 0 || c->hs[7] != 0) {
            count(t, TRK_TCP_NOT_SP, c->peer);
            conn_close(c);
            return;
        }
        c->rstate = R_LEN;
        c->got = 0;
        return;
    case R_LEN: {
        uint64_t len, limit = c->authed ? AUTHED_FRAME : PREAUTH_FRAME;
        if (c->got < 8) return;
        len = get_be64(c->lenb);
        c->got = 0;
        if (len < 4) {
            count(t, TRK_TCP_NOT_SP, c->peer);
            conn_close(c);
            return;
        }
        if (len > limit && c->authed) {
            at_log_warn("tracker: refused a frame of %llu bytes from %s (the limit is %llu); "
                        "closing the connection",
                        (unsigned long long)len, c->peer, (unsigned long long)limit);
            count(t, TRK_TCP_BIG, c->peer);
            conn_close(c);
            return;
        }
        c->refused_len = len > limit ? len : 0;
        c->body_len = len > limit ? 4 * SP_MAX_HOPS : (size_t)len;
        if ((c->body = at_malloc(c->body_len)) == NULL) {
            at_log_error("tracker: out of memory for a frame of %zu bytes from %s", c->body_len,
                         c->peer);
            conn_close(c);
            return;
        }
        c->rstate = R_BODY;
        return;
    }
    case R_BODY:
        if (c->got < c->body_len) return;
        c->got = 0;
        c->rstate = R_LEN;
        if (c->refused_len)
            refuse_big(c);
        else
            deliver(c);
        at_free(c->body);
        c->body = NULL;
        return;
    }
}

static void on_connection(uv_stream_t *server, int status)
{
    struct trk_tcp *srv = server->data;
    trk_tracker *t = srv->t;
    trk_conn *c;
    struct sockaddr_storage sa;
    int sl = sizeof sa;

    if (status < 0) return;
    if ((c = at_calloc(1, sizeof *c)) == NULL) return;
    c->srv = srv;
    uv_tcp_init(&srv->loop, &c->h);
    c->h.data = c;
    if (uv_accept(server, (uv_stream_t *)&c->h) != 0) {
        uv_close((uv_handle_t *)&c->h, on_closed_free);
        return;
    }
    do
        c->pipe = TRK_TCP_PIPE | (++srv->next_pipe & ~TRK_TCP_PIPE);
    while (c->pipe == TRK_TCP_PIPE ||
           (snprintf(c->key, sizeof c->key, "%u", c->pipe), trk__map_get(&srv->by_pipe, c->key)));
    snprintf(c->peer, sizeof c->peer, "connection %u", c->pipe & ~TRK_TCP_PIPE);
    if (uv_tcp_getpeername(&c->h, (struct sockaddr *)&sa, &sl) == 0) {
        char ip[48] = "?";
        if (sa.ss_family == AF_INET) {
            const struct sockaddr_in *a = (const struct sockaddr_in *)&sa;
            uv_ip4_name(a, ip, sizeof ip);
            snprintf(c->peer, sizeof c->peer, "%s:%u", ip, ntohs(a->sin_port));
        } else if (sa.ss_family == AF_INET6) {
            const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&sa;
            uv_ip6_name(a, ip, sizeof ip);
            snprintf(c->peer, sizeof c->peer, "[%s]:%u", ip, ntohs(a->sin6_port));
        }
    }
    c->opened_at = at_time_mono_s();
    c->rstate = R_HS;
    trk__list_push_back(&srv->conns, &c->link);
    srv->n_unauth++;
    if (trk__map_put(&srv->by_pipe, c->key, c) != AT_OK) {
        trk__list_remove(&c->link);
        srv->n_unauth--;
        uv_close((uv_handle_t *)&c->h, on_closed_free);
        return;
    }
    /* too many waiting unauthenticated: the oldest goes */
    if (srv->n_unauth > t->cfg.max_unauth) {
        for (trk_link *l = srv->conns.next; l != &srv->conns; l = l->next) {
            trk_conn *o = TRK_OF(l, trk_conn, link);
            if (!o->authed && !o->closing && o != c) {
                count(t, TRK_TCP_EVICTED, o->peer);
                conn_close(o);
                break;
            }
        }
    }
    uv_tcp_nodelay(&c->h, 1);
    {
        trk_cmd *cmd = at_calloc(1, sizeof *cmd + 8);
        if (cmd == NULL) {
            conn_close(c);
            return;
        }
        cmd->kind = CMD_WRITE;
        cmd->n = 8;
        memcpy(cmd->data, sp_rep0_header, 8);
        conn_write(c, cmd);
    }
    if (!c->closing && uv_read_start((uv_stream_t *)&c->h, on_alloc, on_read) != 0) conn_close(c);
}

/* Every 100 ms: connections that did not authenticate in time, refused ones that lingered. */
static void on_timer(uv_timer_t *tm)
{
    struct trk_tcp *srv = tm->data;
    trk_tracker *t = srv->t;
    double now = at_time_mono_s(), limit = t->cfg.auth_timeout_ms / 1000.0;
    for (trk_link *l = srv->conns.next; l != &srv->conns; l = l->next) {
        trk_conn *c = TRK_OF(l, trk_conn, link);
        if (c->closing) continue;
        if (c->rstate == R_DISCARD && now >= c->linger_until) {
            conn_close(c);
        } else if (!c->authed && now - c->opened_at > limit) {
            count(t, TRK_TCP_TIMED_OUT, c->peer);
            conn_close(c);
        }
    }
}

static void close_all(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (h->type == UV_TCP && h->data != NULL &&
        h != (uv_handle_t *)&((struct trk_tcp *)arg)->server)
        conn_close(h->data);
    else if (!uv_is_closing(h))
        uv_close(h, NULL);
}

static void on_wake(uv_async_t *a)
{
    struct trk_tcp *srv = a->data;
    trk_cmd *cmd;
    int stopping;
    pthread_mutex_lock(&srv->mu);
    cmd = srv->head;
    srv->head = srv->tail = NULL;
    stopping = srv->stopping;
    pthread_mutex_unlock(&srv->mu);
    while (cmd) {
        trk_cmd *next = cmd->next;
        char key[12];
        trk_conn *c;
        snprintf(key, sizeof key, "%u", cmd->pipe);
        c = trk__map_get(&srv->by_pipe, key);
        if (c && c->closing) c = NULL;
        if (cmd->kind == CMD_WRITE && c) {
            conn_write(c, cmd);
            cmd = next;
            continue;
        }
        if (cmd->kind == CMD_CLOSE && c) conn_close(c);
        if (cmd->kind == CMD_AUTHED && c && !c->authed) {
            c->authed = 1;
            srv->n_unauth--;
        }
        at_free(cmd);
        cmd = next;
    }
    if (stopping) uv_walk(&srv->loop, close_all, srv);
}

static void *loop_main(void *arg)
{
    struct trk_tcp *srv = arg;
    uv_run(&srv->loop, UV_RUN_DEFAULT);
    return NULL;
}

static void post(trk_tracker *t, trk_cmd *cmd)
{
    struct trk_tcp *srv = t->tcp;
    pthread_mutex_lock(&srv->mu);
    if (srv->stopping) {
        pthread_mutex_unlock(&srv->mu);
        at_free(cmd);
        return;
    }
    if (srv->tail)
        srv->tail->next = cmd;
    else
        srv->head = cmd;
    srv->tail = cmd;
    pthread_mutex_unlock(&srv->mu);
    uv_async_send(&srv->wake);
}

/* ---- what trk_run's thread calls ---------------------------------------------------- */

void trk__tcp_reply(trk_tracker *t, trk_ctx *ctx, const void *p, size_t n)
{
    trk_cmd *cmd;
    if (t->tcp == NULL) { /* stopped: nobody to answer */
        at_free(ctx);
        return;
    }
    cmd = frame_cmd(ctx->hdr, ctx->hdr_len, p, n);
    if (cmd == NULL) {
        at_log_error("tracker: out of memory for a reply");
    } else {
        cmd->pipe = ctx->pipe;
        post(t, cmd);
    }
    at_free(ctx);
}

static void post_simple(trk_tracker *t, int kind, uint32_t pipe)
{
    trk_cmd *cmd;
    if (t->tcp == NULL || (cmd = at_calloc(1, sizeof *cmd)) == NULL) return;
    cmd->kind = kind;
    cmd->pipe = pipe;
    post(t, cmd);
}

void trk__tcp_close_pipe(trk_tracker *t, uint32_t pipe)
{
    post_simple(t, CMD_CLOSE, pipe);
}

void trk__tcp_authed(trk_tracker *t, uint32_t pipe)
{
    post_simple(t, CMD_AUTHED, pipe);
}

/* "tcp://HOST:PORT" (tcp4://, tcp6://; HOST empty or '*': every address; [v6]) */
static at_err resolve(const char *url, struct sockaddr_storage *out, char *errmsg, size_t n)
{
    char host[256], port[16];
    const char *p = strstr(url, "://"), *colon;
    struct addrinfo hints, *res = NULL;
    size_t hl;
    int family = AF_UNSPEC, rv;
    if (strncmp(url, "tcp4://", 7) == 0) family = AF_INET;
    if (strncmp(url, "tcp6://", 7) == 0) family = AF_INET6;
    p = p ? p + 3 : url;
    if ((colon = strrchr(p, ':')) == NULL || colon[1] == 0 || strlen(colon + 1) >= sizeof port) {
        snprintf(errmsg, n, "bad address '%s': no port (tcp://HOST:PORT)", url);
        return AT_EINVAL;
    }
    hl = (size_t)(colon - p);
    if (hl >= sizeof host) {
        snprintf(errmsg, n, "bad address '%s': the host name is too long", url);
        return AT_EINVAL;
    }
    memcpy(host, p, hl);
    host[hl] = 0;
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = 0;
    }
    snprintf(port, sizeof port, "%s", colon + 1);
    for (const char *q = port; *q; q++)
        if (*q < '0' || *q > '9') {
            snprintf(errmsg, n, "bad address '%s': the port '%s' is not a number", url, port);
            return AT_EINVAL;
        }
    memset(&hints, 0, sizeof hints);
    hints.ai_family = family;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    rv = getaddrinfo(host[0] && strcmp(host, "*") != 0 ? host : NULL, port, &hints, &res);
    if (rv != 0 || res == NULL) {
        snprintf(errmsg, n, "bad address '%s': %s", url, gai_strerror(rv));
        if (res) freeaddrinfo(res);
        return AT_EINVAL;
    }
    /* with no host, prefer the IPv4 wildcard (as nng's tcp:// did) */
    {
        struct addrinfo *pick = res;
        for (struct addrinfo *a = res; a; a = a->ai_next)
            if (a->ai_family == AF_INET && family == AF_UNSPEC &&
                (host[0] == 0 || host[0] == '*')) {
                pick = a;
                break;
            }
        memcpy(out, pick->ai_addr, pick->ai_addrlen);
    }
    freeaddrinfo(res);
    return AT_OK;
}

at_err trk__tcp_open(trk_tracker *t, char *errmsg, size_t n)
{
    struct trk_tcp *srv;
    struct sockaddr_storage sa;
    int rv, sl = sizeof sa;
    at_err e;

    if ((e = resolve(t->listen_url, &sa, errmsg, n)) != AT_OK) return e;
    if ((srv = at_calloc(1, sizeof *srv)) == NULL) return AT_ENOMEM;
    srv->t = t;
    trk__list_init(&srv->conns);
    trk__map_init(&srv->by_pipe);
    pthread_mutex_init(&srv->mu, NULL);
    if ((rv = uv_loop_init(&srv->loop)) != 0) {
        snprintf(errmsg, n, "cannot start the tracker's event loop: %s", uv_strerror(rv));
        pthread_mutex_destroy(&srv->mu);
        at_free(srv);
        return AT_EIO;
    }
    t->tcp = srv;
    uv_tcp_init(&srv->loop, &srv->server);
    srv->server.data = srv;
    uv_async_init(&srv->loop, &srv->wake, on_wake);
    srv->wake.data = srv;
    uv_timer_init(&srv->loop, &srv->timer);
    srv->timer.data = srv;
    if ((rv = uv_tcp_bind(&srv->server, (const struct sockaddr *)&sa, 0)) != 0 ||
        (rv = uv_listen((uv_stream_t *)&srv->server, 128, on_connection)) != 0) {
        snprintf(errmsg, n, "cannot listen on '%s': %s", t->listen_url, uv_strerror(rv));
        return AT_EIO; /* trk__tcp_close frees it */
    }
    if (uv_tcp_getsockname(&srv->server, (struct sockaddr *)&sa, &sl) == 0)
        t->port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                                 : ((struct sockaddr_in *)&sa)->sin_port);
    uv_timer_start(&srv->timer, on_timer, 100, 100);
    if (pthread_create(&srv->thread, NULL, loop_main, srv) != 0) {
        snprintf(errmsg, n, "cannot start the tracker's network thread");
        return AT_EIO;
    }
    srv->started = 1;
    return AT_OK;
}

void trk__tcp_close(trk_tracker *t)
{
    struct trk_tcp *srv = t->tcp;
    trk_cmd *cmd;
    if (srv == NULL) return;
    pthread_mutex_lock(&srv->mu);
    srv->stopping = 1;
    pthread_mutex_unlock(&srv->mu);
    if (srv->started) {
        uv_async_send(&srv->wake);
        pthread_join(srv->thread, NULL);
    } else {
        uv_walk(&srv->loop, close_all, srv);
        uv_run(&srv->loop, UV_RUN_DEFAULT);
    }
    uv_loop_close(&srv->loop);
    for (cmd = srv->head; cmd;) {
        trk_cmd *next = cmd->next;
        at_free(cmd);
        cmd = next;
    }
    trk__map_fini(&srv->by_pipe);
    pthread_mutex_destroy(&srv->mu);
    at_free(srv);
    t->tcp = NULL;
}
