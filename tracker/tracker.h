/* tracker/tracker.h -- the measurement fleet's tracker (prefix trk_).
**
**   trk_tracker *t;  char err[256];
**   trk_open(&(trk_config){.listen_url = "tcp://0.0.0.0:9190", .keys = &key, .n_keys = 1},
**            &t, err, sizeof err);
**   trk_run(t);          serves until trk_stop(t) (another thread or a signal handler)
**   trk_close(t);
**
** Agents and tuners dial the tracker (nng req0 -> the tracker's rep0 socket), open an
** authenticated session (common/wire.h), and then: agents REGISTER under a device key and
** long-poll for work (AGENT_POLL, which carries their results and heartbeats); tuners
** SUBMIT batches of jobs for a device key and long-poll for results (TUNER_POLL).  The
** tracker keeps one queue per (tuner, device key) and hands jobs to agents of that key:
** higher priority first, then the tuner with the fewest jobs in flight (fair sharing),
** FIFO within one tuner.  Every job handed out is leased to its agent: an agent silent for
** 'lease_ms' (or whose connection closes) loses its jobs, which go back to the front of
** their queue; a job lost 'max_attempts' times ends as DEVICE_LOST.  Results are kept for
** their tuner until it acknowledges them, also across a reconnection of the tuner (within
** 'client_grace_ms').  State lives in memory only: after a restart, agents re-register and
** tuners resubmit what has no result (docs/fleet.md).
**
** Threads: trk_run runs the whole state machine on the calling thread; nng's threads only
** queue events for it.  trk_stop, trk_get_stats and trk_status_json may be called from any
** thread; trk_stop also from a signal handler. */
#ifndef TRK_TRACKER_H
#define TRK_TRACKER_H

#include <stdint.h>
#include <stdio.h>

#include "common/common.h"
#include "common/wire.h"

typedef struct trk_tracker trk_tracker;

typedef struct trk_config {
    const char *listen_url;  /* "tcp://0.0.0.0:9190" (port 0: any free), "inproc://name" */
    const at_wire_key *keys; /* the fleet key, then optionally the next one (rotation) */
    int n_keys;              /* 1 or 2 */
    const char *http_url;    /* read-only status page, e.g. "http://127.0.0.1:9191"; NULL: none */
    const char *name;        /* shown on the status page; NULL: "tracker" */
    int lease_ms;            /* default 10000 */
    int heartbeat_ms;        /* agents' heartbeat period, told in WELCOME; default 1000 */
    int hold_ms;             /* long-poll hold of an idle agent or tuner; default 1000 */
    int client_grace_ms;     /* a disconnected tuner's jobs and results wait this long; 60000 */
    int max_attempts;        /* a job lost this many times ends as DEVICE_LOST; default 3 */
    int max_unauth;          /* TCP connections waiting unauthenticated at once (a new one
                             ** closes the oldest); default 64 */
    int auth_timeout_ms;     /* a TCP connection must authenticate this soon; default 10000 */
} trk_config;

/* Bind the socket (and the HTTP server) and get ready to serve.  On AT_OK the caller owns
** *out (trk_close).  AT_EINVAL for a bad configuration or address, AT_EIO when the address
** cannot be bound; 'errmsg' says which. */
at_err trk_open(const trk_config *cfg, trk_tracker **out, char *errmsg, size_t errmsg_size);

/* The TCP port the tracker listens on (useful with port 0), or 0 for inproc. */
int trk_port(const trk_tracker *t);
/* The HTTP status page's port, or 0 when there is none. */
int trk_http_port(const trk_tracker *t);

/* Serve until trk_stop.  Returns AT_OK after a clean stop. */
at_err trk_run(trk_tracker *t);
/* Ask trk_run to return (within about 100 ms).  Async-signal-safe. */
void trk_stop(trk_tracker *t);
/* Stop serving and free everything (after trk_run returned, or if it never ran). */
void trk_close(trk_tracker *t);

typedef struct trk_stats {
    int64_t n_submitted;   /* jobs accepted from tuners */
    int64_t n_dispatched;  /* jobs handed to agents (a re-lease counts again) */
    int64_t n_results;     /* results forwarded to tuners */
    int64_t n_requeued;    /* jobs taken back from lost agents */
    int64_t n_lost;        /* jobs that ended as DEVICE_LOST */
    int64_t n_refused;     /* frames refused: malformed, bad MAC, replayed, oversized */
    int64_t n_auth_failed; /* handshakes refused */
    int n_agents, n_clients, n_queued, n_inflight;
} trk_stats;

/* A snapshot of the counters (thread-safe). */
void trk_get_stats(trk_tracker *t, trk_stats *out);

/* The status document (agents with fingerprints and health, keys, queues, jobs in flight,
** throughput) as JSON text, as of the last refresh (at most 250 ms old).  The caller owns
** *out (at_free).  Thread-safe. */
at_err trk_status_json(trk_tracker *t, char **out);

/* Print the status document as tables (what 'tracker status' shows). */
void trk_status_print(const char *json, FILE *f);

#endif /* TRK_TRACKER_H */
