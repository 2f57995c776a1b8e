/* tracker/trk_int.h -- what only tracker/ sees: the tracker's objects and their lists.
**
** Ownership and lists (all touched by the trk_run thread only, except where marked):
**
**   tracker --sessions--> trk_sess     one per nng pipe (connection); map 'sessions' by pipe
**   tracker --clients---> trk_client   one per tuner process (client id), outlives its session
**                                      for 'client_grace_ms' after a disconnection
**   tracker --pools-----> trk_pool     one per device key; lists its agents and its flows
**   pool    --flows-----> trk_flow     one per (tuner, device key): the tuner's FIFO queue
**   pool    --agents----> trk_agent    an agent registered under the key (owned by its session)
**   tracker --jobs------> trk_job      map 'jobs' by job id; a job is in exactly one of: its
**                                      flow's queue (QUEUED), its agent's 'held' list (LEASED),
**                                      no list (DONE: kept until its result is acknowledged)
**   tracker --refs------> trk_ref      reference artifacts by id, counted by the jobs using them
**   client  --outbox----> trk_result   results not yet acknowledged, numbered from 'first_num'
**
** A job's artifact lives in the job's arena and is freed when the job is done. */
#ifndef TRK_INT_H
#define TRK_INT_H

#include <nng/nng.h>
#include <pthread.h>
#include <stdatomic.h>

#include "tracker/tracker.h"

/* ---- intrusive lists ---------------------------------------------------------------- */

typedef struct trk_link {
    struct trk_link *prev, *next;
} trk_link;

void trk__list_init(trk_link *head);
void trk__list_push_back(trk_link *head, trk_link *l);
void trk__list_push_front(trk_link *head, trk_link *l);
void trk__list_remove(trk_link *l);
int trk__list_empty(const trk_link *head);
#define TRK_OF(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/* ---- string-keyed hash map (keys are borrowed from the values) ----------------------- */

typedef struct trk_map {
    const char **keys; /* NULL: empty slot; TRK_TOMB: deleted */
    void **vals;
    size_t cap, n, n_used;
} trk_map;

void trk__map_init(trk_map *m);
void trk__map_fini(trk_map *m);
void *trk__map_get(const trk_map *m, const char *key);
at_err trk__map_put(trk_map *m, const char *key, void *val); /* replaces */
void trk__map_del(trk_map *m, const char *key);
/* Iterate: i from 0; returns the next value or NULL at the end. */
void *trk__map_next(const trk_map *m, size_t *i);

/* ---- objects ------------------------------------------------------------------------ */

typedef struct trk_ctx trk_ctx;
typedef struct trk_sess trk_sess;
typedef struct trk_client trk_client;
typedef struct trk_pool trk_pool;
typedef struct trk_flow trk_flow;
typedef struct trk_agent trk_agent;

enum { TRK_JOB_QUEUED, TRK_JOB_LEASED, TRK_JOB_DONE };

typedef struct trk_job {
    trk_link link;  /* in its flow's queue or its agent's held list */
    char *id;       /* at_malloc'd; the map key */
    at_arena arena; /* the job's copy (artifact bytes included) */
    at_wire_job w;
    struct trk_ref *ref; /* counted reference, or NULL */
    trk_flow *flow;
    trk_agent *agent; /* LEASED: who holds it */
    int state;
    int attempts; /* leases lost */
    int canceled;
    double queued_at, leased_at;
} trk_job;

typedef struct trk_ref {
    char hex[2 * AT_WIRE_REFID_BYTES + 1]; /* the map key */
    at_arena arena;
    at_wire_ref w;
    int refcount;  /* jobs using it; at 0 it waits in 'idle_refs' for reuse */
    trk_link idle; /* in tracker->idle_refs while refcount is 0 */
} trk_ref;

struct trk_flow {
    trk_link link; /* in pool->flows */
    trk_client *client;
    trk_pool *pool;
    int priority;
    trk_link queue; /* trk_job.link, oldest first */
    int n_queued, n_inflight;
    uint64_t last_served;
};

struct trk_pool {
    trk_link link; /* in tracker->pools */
    char *key;
    trk_link agents; /* trk_agent.link, longest idle first */
    trk_link flows;
    int n_agents;
    int n_queued;
    int n_inflight;
};

typedef struct trk_result {
    at_arena arena;
    at_wire_result r;
} trk_result;

struct trk_client {
    trk_link link; /* in tracker->clients */
    char *id;      /* map key */
    char name[AT_WIRE_MAX_NAME + 1];
    trk_sess *sess; /* NULL while disconnected */
    double gone_since;
    trk_result **outbox; /* [n_out] results numbered first_num .. first_num + n_out - 1 */
    int n_out, cap_out;
    uint64_t first_num;
    trk_ctx *parked; /* a held TUNER_POLL */
    uint64_t parked_seq;
    double park_until;
    int n_jobs; /* jobs not done */
    int64_t n_results;
};

struct trk_agent {
    trk_link link; /* in pool->agents */
    trk_sess *sess;
    trk_pool *pool;
    char id[AT_WIRE_MAX_NAME + 16];
    at_arena arena; /* registration copy */
    at_wire_register reg;
    trk_link held; /* leased jobs */
    int n_held;
    int want; /* jobs it asked for in its last poll */
    trk_ctx *parked;
    uint64_t parked_seq;
    double park_until;
    double last_seen, registered_at;
    at_wire_devstate state;
    trk_map refs_sent; /* reference ids (hex) sent on this session */
    char **cancels;    /* job ids to cancel in the next reply */
    int n_cancels, cap_cancels;
    int64_t n_done, n_failed, n_lost;
};

enum { TRK_SESS_NEW, TRK_SESS_CHALLENGED, TRK_SESS_AUTHED };

struct trk_sess {
    trk_link link; /* in tracker->sessions_list */
    uint32_t pipe;
    char pipe_key[16]; /* map key */
    char peer[64];
    at_wire_session ws;
    int stage;
    int role;
    char name[AT_WIRE_MAX_NAME + 1];
    char client_id[AT_WIRE_MAX_NAME + 1];
    uint8_t cnonce[AT_WIRE_NONCE_BYTES], tnonce[AT_WIRE_NONCE_BYTES];
    const at_wire_key *key;
    trk_agent *agent;
    trk_client *client;
    double close_at; /* > 0: close the pipe at this time (after a refusal) */
    double opened_at;
};

/* A request waiting for its reply.  inproc:// (nng): a rep0 context of the pool and the
** one request it holds.  TCP (trk_tcp.c): made for one request, freed when its reply is
** queued; it remembers the connection and the request's backtrace. */
enum {
    TRK_CTX_RECV,
    TRK_CTX_HELD,
    TRK_CTX_SEND,
    TRK_CTX_DONE,
    TRK_CTX_CLOSED /* trk_close stopped it; a reply to it (a parked poll) is dropped */
};
#define TRK_TCP_PIPE 0x80000000u /* pipe ids of TCP connections; nng's never have it */

struct trk_ctx {
    trk_tracker *t;
    int tcp; /* 1: a TCP request */
    nng_ctx ctx;
    nng_aio *aio;
    int state; /* written by the callback (RECV->HELD) and the loop (HELD->SEND) */
    int index;
    uint32_t pipe;   /* TCP */
    uint8_t hdr[32]; /* TCP: the backtrace the reply carries */
    uint8_t hdr_len;
};

enum { TRK_EV_REQUEST, TRK_EV_PIPE_GONE };

typedef struct trk_event {
    struct trk_event *next;
    int kind;
    trk_ctx *ctx;
    uint32_t pipe;
    char peer[64]; /* "" : ask nng */
    const uint8_t *body;
    size_t len;
    void *owner; /* what holds 'body': an nng_msg (inproc) or at_malloc'd bytes (TCP) */
    int owner_tcp;
} trk_event;

#define TRK_RATE_SLOTS 60

/* What trk_tcp.c refuses (counted by kind, logged once a second by watch_listener). */
enum { TRK_TCP_NOT_SP, TRK_TCP_BIG, TRK_TCP_EVICTED, TRK_TCP_TIMED_OUT, TRK_TCP_N_REFUSALS };

struct trk_tracker {
    trk_config cfg;
    at_wire_key keys[2];
    int n_keys;
    char name[AT_WIRE_MAX_NAME + 1];
    char id[33];
    char listen_url[512];
    nng_socket sock; /* inproc:// */
    nng_listener listener;
    int have_nng;
    struct trk_tcp *tcp; /* tcp:// (trk_tcp.c) */
    int port;
    void *http; /* nng_http_server * */
    int http_port;

    trk_ctx **ctxs;
    int n_ctxs, cap_ctxs;
    _Atomic int n_recv; /* contexts waiting for a request */

    pthread_mutex_t mu; /* the event queue and 'stop' */
    pthread_cond_t cv;
    trk_event *ev_head, *ev_tail;
    _Atomic int stop;

    /* state: trk_run's thread only */
    trk_map sessions, clients, jobs, refs, pools_by_key;
    trk_link sessions_list, clients_list, pools;
    trk_link idle_refs; /* references no job uses, oldest first (kept for reuse) */
    int n_idle_refs;
    size_t idle_ref_bytes;
    uint64_t serve_clock;
    int agent_counter;
    at_buf frame;
    double now;
    double next_tick;
    uint64_t listener_bad; /* last seen listener error counters (random bytes on the port) */
    /* trk_tcp.c's refusals, counted by its thread, logged by trk_run's once a second */
    _Atomic int64_t tcp_refusals[TRK_TCP_N_REFUSALS];
    int64_t tcp_logged[TRK_TCP_N_REFUSALS];
    char tcp_last_peer[TRK_TCP_N_REFUSALS][64]; /* under 'smu' */

    /* statistics and status: written by trk_run, read by others under 'smu' */
    pthread_mutex_t smu;
    trk_stats stats;
    char *status_json;
    double status_at;
    int64_t rate[TRK_RATE_SLOTS]; /* results per second, ring by whole second */
    int64_t rate_sec;
    int64_t dispatch_rate[TRK_RATE_SLOTS];
};

/* trk_core.c: the state machine.  'peer' names the connection (NULL: ask nng). */
void trk__handle(trk_tracker *t, trk_ctx *ctx, uint32_t pipe, const char *peer, const uint8_t *body,
                 size_t len);
void trk__pipe_gone(trk_tracker *t, uint32_t pipe);
void trk__tick(trk_tracker *t);
void trk__free_state(trk_tracker *t);

/* trk_net.c: replying and the context pool */
void trk__reply(trk_tracker *t, trk_ctx *ctx, at_wire_session *s, at_wire_msg *m);
void trk__reply_raw(trk_tracker *t, trk_ctx *ctx, const void *p, size_t n);
void trk__close_pipe(trk_tracker *t, uint32_t pipe);
/* The session on 'pipe' is authenticated: its connection may send full-size frames. */
void trk__pipe_authed(trk_tracker *t, uint32_t pipe);
/* Queue an event for trk_run (any thread).  'owner' holds 'body' (see trk_event). */
void trk__push_event(trk_tracker *t, int kind, trk_ctx *ctx, uint32_t pipe, const char *peer,
                     const uint8_t *body, size_t len, void *owner);

/* trk_tcp.c: the TCP listener (t->listen_url tcp://, tcp4://, tcp6://) */
at_err trk__tcp_open(trk_tracker *t, char *errmsg, size_t n);
void trk__tcp_close(trk_tracker *t);
void trk__tcp_reply(trk_tracker *t, trk_ctx *ctx, const void *p, size_t n); /* frees ctx */
void trk__tcp_close_pipe(trk_tracker *t, uint32_t pipe);
void trk__tcp_authed(trk_tracker *t, uint32_t pipe);

/* trk_status.c */
void trk__status_refresh(trk_tracker *t);
void trk__count_result(trk_tracker *t, int64_t n, int dispatched);
at_err trk__http_start(trk_tracker *t, const char *url, char *errmsg, size_t n);
void trk__http_stop(trk_tracker *t);

#endif /* TRK_INT_H */
