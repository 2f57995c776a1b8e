/* common/wire.h -- the fleet's wire protocol (prefix at_wire_): the messages that tuners, the
** tracker and agents exchange, their msgpack encoding with size bounds, authentication with
** the fleet's shared key (HMAC-SHA256 challenge-response, then a MAC and a sequence number
** on every message), and the client end of a connection over nng.
**
**   at_wire_session s;  at_wire_msg m;  at_buf frame;
**   at_wire_msg_init(&m, AT_WIRE_T_SUBMIT);  ...fill m.u.submit...
**   at_wire_encode(&s, &m, &frame);                    bytes to send (payload + 32-byte tag)
**   at_wire_decode(&s, bytes, n, &m, err, sizeof err); checks size, tag, sequence, fields
**   at_wire_msg_fini(&m);
**
** docs/protocol.md is the reference for every message, field, type and bound; docs/security.md
** for the keys and the handshake.  Everything a peer sends is outside data: the decoder
** checks every length, count, range and type and refuses the frame with AT_EPROTO (or
** AT_EAUTH for a bad tag or a replayed sequence number, AT_EVERSION for another protocol
** version) and a sentence in 'errmsg'; it never asserts on input.
**
** The client end (at_wire_client_*) uses nng's req0 protocol; the tracker uses rep0 with
** contexts (tracker/).  This header is the one place common/ uses nng (docs/protocol.md
** says why).  Nothing here keeps global state. */
#ifndef AT_WIRE_H
#define AT_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "common/common.h"

/* ---- versions and bounds ------------------------------------------------------------ */

#define AT_WIRE_VERSION 4 /* the protocol version this build speaks (2: layout rewrite; 3: GPU \
                          ** artifacts; 4: CPU kernels' tasks claim their chunks, so an agent's \
                          ** pool no longer waits for a late worker: kernels_rt.h) */
#define AT_WIRE_SOFTWARE "0.1.0" /* software version sent in HELLO (logs only) */
#define AT_WIRE_TAG_BYTES 32     /* HMAC-SHA256 tag after every payload */
#define AT_WIRE_NONCE_BYTES 32
#define AT_WIRE_KEYID_BYTES 4
#define AT_WIRE_REFID_BYTES 32            /* a reference artifact's id: SHA-256 of its bytes */
#define AT_WIRE_MAX_MSG (64u << 20)       /* one frame, tag included */
#define AT_WIRE_MAX_PREAUTH 4096u         /* a frame before the session is authenticated */
#define AT_WIRE_MAX_OBJ (16u << 20)       /* one artifact's object bytes */
#define AT_WIRE_MAX_JOBS 4096             /* jobs (or results, refs, ids) in one message */
#define AT_WIRE_MAX_REFS 64               /* reference artifacts in one message */
#define AT_WIRE_MAX_COSTS 1024            /* timed repeats of one result */
#define AT_WIRE_MAX_ARGS 64               /* kernel arguments */
#define AT_WIRE_MAX_DIMS 16               /* dimensions of one argument */
#define AT_WIRE_MAX_PRE 8                 /* weights one artifact takes in a new layout */
#define AT_WIRE_MAX_LAUNCHES 32           /* kernel launches of one GPU artifact */
#define AT_WIRE_MAX_BUF_BYTES (1ll << 30) /* one argument buffer or the workspace */
#define AT_WIRE_MAX_NAME 128              /* ids, keys, names, triples (bytes) */
#define AT_WIRE_MAX_FEATURES 4096         /* CPU feature string */
#define AT_WIRE_MAX_TEXT 4096             /* error texts */
#define AT_WIRE_MAX_JSON (4u << 20)       /* the status document */
#define AT_WIRE_MAX_OBJECTS 200000        /* msgpack values in one frame (bounds decoding memory) */
#define AT_WIRE_MAX_DEPTH 8               /* msgpack nesting in one frame */

/* ---- message types -------------------------------------------------------------------- */

/* X(number, NAME, who sends it, what it is).  The numbers are on the wire: append only. */
#define AT_WIRE_MSG_MAP(X)                                                                         \
    X(1, HELLO, "client", "opens a session: version, role, client nonce, key ids")                 \
    X(2, CHALLENGE, "tracker", "answers HELLO: tracker nonce, chosen key; tag proves the key")     \
    X(3, AUTH, "client", "answers CHALLENGE; its tag proves the client holds the key")             \
    X(4, WELCOME, "tracker", "answers AUTH: the session is open; tracker's timings")               \
    X(5, ERROR, "tracker", "a refusal: error code and a sentence")                                 \
    X(6, REGISTER, "agent", "device key, target triple, CPU features, fingerprint, sandbox")       \
    X(7, REGISTERED, "tracker", "answers REGISTER")                                                \
    X(8, AGENT_POLL, "agent", "heartbeat: device state, results, free slots, returned jobs")       \
    X(9, AGENT_WORK, "tracker", "answers AGENT_POLL: jobs, reference artifacts, cancels")          \
    X(10, SUBMIT, "tuner", "a batch of jobs for a device key, with reference artifacts")           \
    X(11, SUBMITTED, "tracker", "answers SUBMIT: accepted jobs, the keys agents serve")            \
    X(12, TUNER_POLL, "tuner", "asks for results, acknowledges those received")                    \
    X(13, RESULTS, "tracker", "answers TUNER_POLL: results, queue and agent counts")               \
    X(14, CANCEL, "tuner", "cancels jobs")                                                         \
    X(15, CANCELED, "tracker", "answers CANCEL")                                                   \
    X(16, STATUS_QUERY, "client", "asks for the tracker's status")                                 \
    X(17, STATUS, "tracker", "answers STATUS_QUERY: the status document (JSON text)")              \
    X(32, SBX_BATCH, "agent", "inside an agent: the batch handed to a sandboxed child")            \
    X(33, SBX_EVENT, "child", "inside an agent: a job started, a result, reference output")   \
    X(34, BUILD_REQ, "tuner", "inside a tuner: a state to build, sent to a build worker")          \
    X(35, BUILD_RES, "worker", "inside a tuner: the artifact (or the error) of a BUILD_REQ")

typedef enum {
#define X(num, name, who, what) AT_WIRE_T_##name = num,
    AT_WIRE_MSG_MAP(X)
#undef X
} at_wire_type;

const char *at_wire_type_name(int type); /* "SUBMIT"; "?" when unknown */

/* Roles a client declares in HELLO. */
typedef enum {
    AT_WIRE_ROLE_AGENT = 1,
    AT_WIRE_ROLE_TUNER = 2,
    AT_WIRE_ROLE_STATUS = 3
} at_wire_role;
const char *at_wire_role_name(int role);

/* ---- message bodies --------------------------------------------------------------------- */

/* Strings are NUL-terminated; in a decoded message they live in its arena, and byte
** arrays ('obj') point into the decoded frame (the caller keeps the frame alive) unless
** the message says otherwise.  To encode, point the fields at the caller's data. */

typedef struct at_wire_arg {
    int dtype; /* at_dtype */
    int is_output;
    int n_dims;
    int64_t shape[AT_WIRE_MAX_DIMS];
} at_wire_arg;

/* A weight in the layout the kernel reads (see at_wire_artifact). */
typedef struct at_wire_layout {
    int arg; /* the task's input argument it is the new layout of */
    int n_dims;
    int64_t shape[AT_WIRE_MAX_DIMS];
} at_wire_layout;

/* One kernel launch of a GPU artifact (see at_wire_artifact); also the kernels module's
** kn_launch, so an artifact's launches go on the wire as they are. */
typedef struct at_wire_launch {
    char entry[64];       /* the kernel in the module */
    int32_t grid[3];      /* blocks, each >= 1 */
    int32_t block[3];     /* threads per block, each >= 1, at most 1024 in all */
    int32_t shared_bytes; /* dynamic shared memory per block */
    int32_t n_regs;       /* registers per thread (0: unknown) */
} at_wire_launch;

typedef enum { AT_WIRE_GPU_NONE, AT_WIRE_GPU_PTX, AT_WIRE_GPU_CUBIN } at_wire_gpu_kind;

/* A compiled kernel: relocatable ELF object, entry symbol, argument signature. */
typedef struct at_wire_artifact {
    const uint8_t *obj;
    size_t obj_size;
    const char *entry;
    const char *triple;
    int n_args;
    at_wire_arg *args; /* [n_args] */
    int64_t ws_fixed, ws_per_thread;
    /* Layout rewrite (n_pre > 0): the kernel takes task inputs pre[k].arg in a new layout
    ** (same dtype, shape pre[k].shape), made on the device before the first call by
    ** pre_entry(bufs = [the n_pre original inputs, then their n_pre new layouts], NULL
    ** workspace); the kernel gets each new layout in its argument's place.  The
    ** pre-transform is not timed (weights are rewritten once, ahead of inference). */
    const char *pre_entry;
    int n_pre;
    at_wire_layout pre[AT_WIRE_MAX_PRE];
    /* GPU artifacts (gpu_kind != AT_WIRE_GPU_NONE): 'obj' is PTX text (NUL-terminated) or a
    ** cubin for 'gpu_arch' ("sm_90"), 'entry' names the artifact only; the launches run in
    ** order, each on the device pointers of the task's arguments and then a workspace of
    ** ws_fixed bytes (ws_per_thread is 0, no layout rewrite). */
    int gpu_kind;
    const char *gpu_arch;
    int n_launches;
    const at_wire_launch *launches; /* [n_launches] */
} at_wire_artifact;

/* How to time one job (TVM's runner settings, plus ours). */
typedef struct at_wire_settings {
    int number;           /* calls per repeat, >= 1 (grown to reach min_repeat_ms) */
    int repeat;           /* timed repeats, >= 1 */
    double min_repeat_ms; /* >= 0 */
    int flush_cache;      /* evict the inputs from the caches before each repeat */
    uint64_t flush_args;  /* with flush_cache: the arguments to evict, bit i for argument i
                          ** (an input); 0: every input.  A model's tuner sends its weights
                          ** (they come from memory when the model runs; the activations
                          ** were just written by the step before).  Optional on the wire
                          ** (older agents ignore it and evict every input); bit 63 unused */
    int timeout_ms;       /* the job's wall-clock budget on the device, >= 1 */
    int cooldown_ms;      /* pause before the job, >= 0 */
    int n_threads;        /* 0: the agent's default */
    int n_warmup;         /* untimed calls before timing, >= 0 */
    double cutoff_s;      /* > 0: a kernel whose checked run took longer is not timed further:
                          ** that run is its one cost (a tuner sends 10x the task's best so
                          ** far); 0: off.  Optional on the wire (older agents ignore it) */
} at_wire_settings;

typedef struct at_wire_job {
    const char *id; /* unique across the fleet (run id + counter) */
    at_wire_artifact art;
    at_wire_settings run;
    uint64_t seed; /* inputs are kn_rt_fill(seed, argument index) */
    int has_ref;   /* check the output against reference 'ref' */
    uint8_t ref[AT_WIRE_REFID_BYTES];
} at_wire_job;

/* A task's reference kernel (the naive schedule), cached by agents under its id. */
typedef struct at_wire_ref {
    uint8_t id[AT_WIRE_REFID_BYTES];
    at_wire_artifact art;
} at_wire_ref;

/* What the agent reads about its device when it reports a result. -1 where unknown. */
typedef struct at_wire_devstate {
    double cpu_mhz;     /* current frequency of CPU 0 */
    double cpu_max_mhz; /* its maximum */
    double temp_c;      /* hottest thermal zone */
    double load1;       /* 1-minute load average */
    int throttled;      /* hot, or running well below its maximum frequency */
    int loaded;         /* other work was running (load average above a threshold) */
} at_wire_devstate;

/* The hardware description an agent registers with; the tracker copies it into every
** result it forwards (the tuner stores it as records' rec_device). */
typedef struct at_wire_device {
    const char *arch, *model, *os, *driver;
    int n_cores;
} at_wire_device;

typedef struct at_wire_result {
    const char *id; /* the job id */
    int status;     /* at_measure */
    int n_costs;
    double *costs;      /* seconds per call of each repeat */
    double median_s;    /* median of 'costs' (0 when there are none) */
    const char *error;  /* "" on success */
    double measured_at; /* UNIX seconds */
    double run_s;       /* wall seconds the agent spent on the job */
    at_wire_devstate state;
    const char *agent; /* agent id (filled by the tracker when forwarding) */
    const char *fingerprint;
    at_wire_device dev; /* filled by the tracker when forwarding */
} at_wire_result;

typedef struct at_wire_sandbox {
    int seccomp;      /* kernels run under a seccomp filter */
    int rlimits;      /* resource limits on the child */
    int guard;        /* guard pages around buffers */
    const char *note; /* why something is missing */
} at_wire_sandbox;

typedef struct at_wire_hello {
    int version;           /* the client's protocol version */
    int role;              /* at_wire_role */
    const char *name;      /* free text for logs ("rpc_agent pixel7 host:pid") */
    const char *client_id; /* stable across reconnections of one client process */
    uint8_t nonce[AT_WIRE_NONCE_BYTES];
    int n_keys;
    uint8_t key_ids[4][AT_WIRE_KEYID_BYTES];
    const char *software;
} at_wire_hello;

typedef struct at_wire_challenge {
    int version;
    uint8_t nonce[AT_WIRE_NONCE_BYTES];
    uint8_t key_id[AT_WIRE_KEYID_BYTES];
} at_wire_challenge;

typedef struct at_wire_welcome {
    const char *tracker_id;
    int lease_ms, heartbeat_ms, hold_ms;
} at_wire_welcome;

typedef struct at_wire_error {
    int code; /* at_err */
    const char *text;
} at_wire_error;

typedef struct at_wire_register {
    const char *device_key;
    const char *triple;
    const char *features; /* CPU features ("+neon,+dotprod" or /proc/cpuinfo flags) */
    const char *gpu;      /* GPU model; "" for CPU agents */
    at_wire_device dev;
    const char *fingerprint; /* at_wire_fingerprint of dev */
    at_wire_sandbox sandbox;
    int n_threads; /* default threads per kernel */
    int max_batch; /* jobs it takes at once */
    int bench_ack; /* benchmark mode: acknowledges jobs without running them */
} at_wire_register;

typedef struct at_wire_registered {
    const char *agent_id;
} at_wire_registered;

typedef struct at_wire_agent_poll {
    int n_held; /* jobs the agent holds (running or waiting) */
    int n_free; /* jobs it would take now */
    at_wire_devstate state;
    int n_results;
    at_wire_result *results;
    int n_returned; /* jobs it gives back unmeasured (shutting down, or a reference missing) */
    const char **returned;
    int n_need_refs; /* reference artifacts it lacks (send them again) */
    const uint8_t (*need_refs)[AT_WIRE_REFID_BYTES];
} at_wire_agent_poll;

typedef struct at_wire_agent_work {
    int n_jobs;
    at_wire_job *jobs;
    int n_refs;
    at_wire_ref *refs;
    int n_cancel;
    const char **cancel;
} at_wire_agent_work;

typedef struct at_wire_submit {
    const char *device_key;
    int priority; /* higher first; default 1 */
    int n_refs;
    at_wire_ref *refs;
    int n_jobs;
    at_wire_job *jobs;
} at_wire_submit;

typedef struct at_wire_keyinfo {
    const char *key;
    int n_agents, n_idle, n_queued;
} at_wire_keyinfo;

typedef struct at_wire_submitted {
    int n_accepted; /* new jobs queued */
    int n_known;    /* jobs this client had submitted already (ignored) */
    int n_agents;   /* agents serving the device key now */
    int n_keys;
    at_wire_keyinfo *keys; /* every key the tracker knows, with its agents */
} at_wire_submitted;

typedef struct at_wire_tuner_poll {
    uint64_t ack; /* results numbered below this were received */
    int hold_ms;  /* wait up to this long for a result */
} at_wire_tuner_poll;

typedef struct at_wire_results {
    uint64_t first; /* number of results[0]; the next ones follow */
    int n_results;
    at_wire_result *results;
    int n_queued, n_inflight, n_agents; /* this client's jobs; agents of its keys */
} at_wire_results;

typedef struct at_wire_cancel {
    int all;
    int n_ids;
    const char **ids;
} at_wire_cancel;

typedef struct at_wire_canceled {
    int n_canceled;
} at_wire_canceled;

typedef struct at_wire_status {
    const char *json;
} at_wire_status;

/* A reference output the child computed (or the agent cached): one output buffer. */
typedef struct at_wire_refout {
    uint8_t ref[AT_WIRE_REFID_BYTES];
    uint64_t seed;
    int n_outputs;
    const uint8_t **data; /* [n_outputs] */
    size_t *n_bytes;      /* [n_outputs] */
} at_wire_refout;

/* The batch a sandboxed child runs. */
typedef struct at_wire_sbx_batch {
    int n_jobs;
    at_wire_job *jobs;
    int n_refs;
    at_wire_ref *refs;
    int n_refouts;
    at_wire_refout *refouts;
    int default_threads;
    int bench_ack;
} at_wire_sbx_batch;

typedef enum {
    AT_WIRE_SBX_READY = 1,  /* set up; the sandbox is entered */
    AT_WIRE_SBX_START = 2,  /* job 'index' starts */
    AT_WIRE_SBX_RESULT = 3, /* job 'index' is done: 'result' */
    AT_WIRE_SBX_REFOUT = 4, /* a chunk of a reference output */
} at_wire_sbx_kind;

typedef struct at_wire_sbx_event {
    int kind;  /* at_wire_sbx_kind */
    int index; /* job index in the batch */
    at_wire_result result;
    /* REFOUT: bytes [offset, offset + n) of output 'output' (of 'n_outputs', each
    ** 'total' bytes long) of reference 'ref' on 'seed' */
    uint8_t ref[AT_WIRE_REFID_BYTES];
    uint64_t seed;
    int output, n_outputs;
    uint64_t offset, total;
    const uint8_t *data;
    size_t n;
    const char *note; /* READY: the sandbox the child entered */
} at_wire_sbx_event;

/* A tuner's build request: lower and compile 'state' (JSON) of the task 'dag' (text) for
** 'target' (kn_target text) with entry symbol 'entry' ("": the default). */
typedef struct at_wire_build_req {
    int64_t id;
    const char *target, *dag, *state, *entry;
} at_wire_build_req;

/* Its answer: 'err' (an at_err) and its sentence, or (err == 0) the artifact and the
** seconds spent in the compiler. */
typedef struct at_wire_build_res {
    int64_t id;
    int err;
    const char *text;
    double compile_s;
    at_wire_artifact art; /* when err == 0 */
} at_wire_build_res;

/* ---- a message ------------------------------------------------------------------------ */

typedef struct at_wire_msg {
    int type;       /* at_wire_type */
    int version;    /* of the frame; AT_WIRE_VERSION when encoding */
    uint64_t seq;   /* set by at_wire_encode */
    uint64_t re;    /* a reply: seq of the request it answers; 0 in requests */
    at_arena arena; /* a decoded message's strings and arrays */
    union {
        at_wire_hello hello;
        at_wire_challenge challenge;
        at_wire_welcome welcome;
        at_wire_error error;
        at_wire_register reg;
        at_wire_registered registered;
        at_wire_agent_poll apoll;
        at_wire_agent_work work;
        at_wire_submit submit;
        at_wire_submitted submitted;
        at_wire_tuner_poll tpoll;
        at_wire_results results;
        at_wire_cancel cancel;
        at_wire_canceled canceled;
        at_wire_status status;
        at_wire_sbx_batch batch;
        at_wire_sbx_event event;
        at_wire_build_req build;
        at_wire_build_res built;
    } u;
} at_wire_msg;

/* Zero 'm', set its type, version and an empty arena (for building a message to encode:
** fields of the body default to 0/NULL, strings NULL mean ""). */
void at_wire_msg_init(at_wire_msg *m, int type);
void at_wire_msg_fini(at_wire_msg *m); /* frees the arena; 'm' may be reused after init */

/* Default run settings: number 1, repeat 3, min_repeat_ms 0, timeout 10 s, warmup 1. */
void at_wire_settings_default(at_wire_settings *s);

/* Deep copies into 'a' (strings, arrays and object bytes): the copy lives as long as the
** arena.  AT_ENOMEM. */
at_err at_wire_artifact_copy(at_arena *a, at_wire_artifact *dst, const at_wire_artifact *src);
at_err at_wire_job_copy(at_arena *a, at_wire_job *dst, const at_wire_job *src);
at_err at_wire_ref_copy(at_arena *a, at_wire_ref *dst, const at_wire_ref *src);
at_err at_wire_result_copy(at_arena *a, at_wire_result *dst, const at_wire_result *src);
at_err at_wire_device_copy(at_arena *a, at_wire_device *dst, const at_wire_device *src);

/* ---- keys and sessions ------------------------------------------------------------------ */

/* A fleet key: 32 random bytes, stored as 64 hex characters and a newline in a file of
** mode 0600.  'id' is the first AT_WIRE_KEYID_BYTES of SHA-256("at-fleet-key-id" || key). */
typedef struct at_wire_key {
    uint8_t k[32];
    uint8_t id[AT_WIRE_KEYID_BYTES];
} at_wire_key;

/* Create a new key file at 'path' (never overwrites: AT_EEXIST) from getrandom(), mode
** 0600.  AT_EIO with a sentence otherwise. */
at_err at_wire_key_generate(const char *path, at_wire_key *out, char *errmsg, size_t n);
/* Read a key file.  AT_EINVAL if it is not 64 hex characters (and optional whitespace),
** AT_EAUTH if group or others may read it (the message says to chmod 600), AT_EIO. */
at_err at_wire_key_load(const char *path, at_wire_key *out, char *errmsg, size_t n);
/* Parse the text of a key file (what at_wire_key_load checks after reading). */
at_err at_wire_key_parse(const char *text, size_t n, at_wire_key *out);
/* A key from raw bytes (embedded mode makes a random one per process). */
void at_wire_key_from_bytes(const uint8_t k[32], at_wire_key *out);
/* 8 hex characters of the key id, for logs. */
void at_wire_key_id_hex(const at_wire_key *key, char out[2 * AT_WIRE_KEYID_BYTES + 1]);

/* HMAC-SHA256 (RFC 2104). */
void at_hmac_sha256(const uint8_t *key, size_t key_n, const void *p, size_t n, uint8_t out[32]);

/* Fill 'p' with 'n' bytes from getrandom(2) (AT_EIO if it fails). */
at_err at_wire_random(void *p, size_t n);

/* One end of an authenticated connection.  Before 'authed', only HELLO, CHALLENGE, AUTH
** and ERROR pass; frames carry a zero tag except CHALLENGE and AUTH, whose tags (with
** the session key derived from both nonces) prove that the sender holds the fleet key.
** After it, every frame carries HMAC(session key, direction || payload) and a sequence
** number above the last one received (replay and reordering are refused). */
typedef struct at_wire_session {
    int is_client; /* 1: agent/tuner end; 0: tracker end */
    int authed;
    int keyed; /* 'skey' holds the session key (from CHALLENGE on) */
    uint8_t skey[32];
    uint64_t send_seq; /* last sequence number sent */
    uint64_t recv_seq; /* last sequence number accepted */
} at_wire_session;

void at_wire_session_init(at_wire_session *s, int is_client);
/* Derive the session key from the fleet key and both nonces; sets 'keyed'. */
void at_wire_session_key(at_wire_session *s, const at_wire_key *key,
                         const uint8_t client_nonce[AT_WIRE_NONCE_BYTES],
                         const uint8_t tracker_nonce[AT_WIRE_NONCE_BYTES]);

/* ---- encoding and decoding ------------------------------------------------------------ */

/* Encode 'm' as one frame into 'out' (appended): msgpack payload [version, type, seq, re,
** body] and the tag.  Takes the next sequence number of 's' (s may be NULL: sequence 0
** and a zero tag, for messages inside an agent).  AT_EINVAL if a field is out of its
** bound (the frame would be refused by the peer), AT_ENOMEM. */
at_err at_wire_encode(at_wire_session *s, at_wire_msg *m, at_buf *out);

/* Decode one frame.  Checks, in order: size (AT_EPROTO beyond AT_WIRE_MAX_MSG, or
** AT_WIRE_MAX_PREAUTH before authentication), msgpack well-formedness and bounds
** (AT_EPROTO), protocol version (AT_EVERSION; *out's 'version' and 'type' are still
** set, so a HELLO's sender can be told both versions), the tag and sequence number
** (AT_EAUTH; s NULL skips both), then the body's fields (AT_EPROTO).  On AT_OK the caller
** owns *out (at_wire_msg_fini) and keeps 'p' alive while it uses byte arrays of the
** message.  On failure *out holds nothing to free (fini is still harmless) and 'errmsg'
** says what was wrong.  The session's receive sequence advances only on AT_OK. */
at_err at_wire_decode(at_wire_session *s, const void *p, size_t n, at_wire_msg *out, char *errmsg,
                      size_t errmsg_size);

/* The device fingerprint id: the first 16 hex characters of SHA-256 of
** ["arch","model",n_cores,"os","driver"] -- the same formula as records' rec_device. */
at_err at_wire_fingerprint(const at_wire_device *d, char out[17]);

/* ---- the client end of a connection (nng req0) ----------------------------------------- */

typedef struct at_wire_client at_wire_client;

typedef struct at_wire_client_cfg {
    const char *url;         /* "tcp://host:9190", "inproc://name" */
    int role;                /* at_wire_role */
    const char *name;        /* for the tracker's logs and status page */
    const at_wire_key *keys; /* the fleet key(s): current first, then the next one */
    int n_keys;              /* 1 or 2 */
    int reconnect_min_ms;    /* dialer back-off (default 100) */
    int reconnect_max_ms;    /* (default 5000) */
} at_wire_client_cfg;

/* Open a client and start dialing (returns at once; nng keeps redialing with back-off).
** On AT_OK the caller owns *out (at_wire_client_close).  AT_EINVAL for a bad URL. */
at_err at_wire_client_open(const at_wire_client_cfg *cfg, at_wire_client **out, char *errmsg,
                           size_t n);
void at_wire_client_close(at_wire_client *c); /* NULL is fine */

/* Make sure the session is authenticated: when the connection is new (or was lost),
** run the handshake.  Waits up to 'timeout_ms' for a connection.  AT_OK when the session
** is (or already was) open -- *fresh is set to 1 when it was just opened, so the caller
** re-registers or resubmits; AT_ETIMEDOUT; AT_EAUTH / AT_EVERSION when the tracker
** refused us (errmsg has its sentence; retrying later is the caller's choice). */
at_err at_wire_client_ensure(at_wire_client *c, int timeout_ms, int *fresh, char *errmsg, size_t n);

/* Send request 'req' on the open session and wait up to 'timeout_ms' for the reply,
** decoded into *rep (the caller owns it: at_wire_msg_fini; its byte arrays live until the
** next call on 'c').  A reply of type ERROR is returned as AT_OK with rep->type ERROR.
** AT_ECLOSED when the connection was lost or the session must be opened again (call
** at_wire_client_ensure), AT_ETIMEDOUT, AT_EPROTO / AT_EAUTH for a bad reply (the
** session is then dropped). */
at_err at_wire_client_call(at_wire_client *c, at_wire_msg *req, int timeout_ms, at_wire_msg *rep,
                           char *errmsg, size_t n);

/* Cut short the call in flight on 'c', from another thread: it fails at once with
** AT_ECLOSED (a stopping agent's poll that the tracker holds).  Nothing happens when no call
** is in flight; not async-signal-safe. */
void at_wire_client_cancel(at_wire_client *c);

/* The tracker's WELCOME timings (valid once a session was opened). */
const at_wire_welcome *at_wire_client_welcome(const at_wire_client *c);

/* Stable random id of this client (hex), sent in HELLO. */
const char *at_wire_client_id(const at_wire_client *c);

/* "host:port" or a URL -> a URL ("tcp://host:port"); a string with "://" is kept. */
void at_wire_url(const char *addr, char *out, size_t n);

#endif /* AT_WIRE_H */
