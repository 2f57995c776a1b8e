/* rpc_agent/agt_child.c -- a sandboxed child: runs one batch of jobs and reports events.
**
** Order of work (the sandbox is entered only once nothing more must be allocated):
**   1. decode the batch; reset fatal signals to their default action (so a crash is seen by
**      the agent as a death by that signal, also under a sanitizer); no core dumps;
**   2. load every artifact and reference with the runtime's loader; allocate argument
**      buffers per (signature, seed) with guard pages and canaries, fill inputs from the
**      seed and hash them; one workspace for the largest need; one thread pool per thread
**      count; report jobs that fail here (COMPILE_DEVICE, UNKNOWN_ERROR) at once;
**   3. resource limits (CPU time, no files, address space), then the seccomp filter;
**   4. per job: START, cool-down, the reference output on the same inputs if not cached
**      (reported in REFOUT chunks for the agent's cache), the weights in the kernel's
**      layout when the artifact rewrites them (its pre-transform, untimed, on the filled
**      inputs), one checked run (return code,
**      canaries, inputs untouched, every output within 1e-4 of the reference), timing with
**      the job's number/repeat/min-repeat/flush settings (fewer repeats, no warm-up, for a
**      kernel too slow for them to fit in the job's budget), checks again, RESULT.
** Every event is one datagram on a SOCK_SEQPACKET socket, built in a buffer reserved in
** step 2, so a child killed mid-way never leaves half an event behind.  Nothing here
** returns: the child ends with _exit. */
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kernels/kernels_rt.h"
#include "rpc_agent/agt_int.h"

#define CANARY 0xa5
#define REL_ERR_BOUND 1e-4
#define CHUNK (32u << 10)

/* A buffer with a guard page on each side; the bytes between the guards and the buffer
** (alignment slack) hold canaries. */
typedef struct gbuf {
    uint8_t *map;
    size_t map_n;
    uint8_t *p;       /* 64-byte aligned */
    size_t n;         /* bytes asked for */
    uint8_t *lo, *hi; /* usable region between the guards */
} gbuf;

static int gbuf_alloc(gbuf *g, size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), body, rounded = (n + 63) & ~(size_t)63;
    if (rounded == 0) rounded = 64;
    body = (rounded + page - 1) / page * page;
    g->map_n = body + 2 * page;
    g->map = mmap(NULL, g->map_n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g->map == MAP_FAILED) {
        g->map = NULL;
        return -1;
    }
    mprotect(g->map, page, PROT_NONE);
    mprotect(g->map + page + body, page, PROT_NONE);
    g->lo = g->map + page;
    g->hi = g->map + page + body;
    g->p = g->hi - rounded; /* the end of the buffer (rounded to 64) touches the guard */
    g->n = n;
    memset(g->lo, CANARY, (size_t)(g->p - g->lo));
    memset(g->p + n, CANARY, (size_t)(g->hi - (g->p + n)));
    return 0;
}

/* 0 if both canary regions are intact. */
static int gbuf_intact(const gbuf *g)
{
    for (const uint8_t *c = g->lo; c < g->p; c++)
        if (*c != CANARY) return -1;
    for (const uint8_t *c = g->p + g->n; c < g->hi; c++)
        if (*c != CANARY) return -1;
    return 0;
}

static void gbuf_recanary(gbuf *g)
{
    memset(g->lo, CANARY, (size_t)(g->p - g->lo));
    memset(g->p + g->n, CANARY, (size_t)(g->hi - (g->p + g->n)));
}

/* Argument buffers of one signature filled from one seed. */
typedef struct bufset {
    const at_wire_artifact *sig; /* a job with this signature */
    uint64_t seed;
    gbuf b[AT_WIRE_MAX_ARGS];
    int64_t n_elems[AT_WIRE_MAX_ARGS];
    uint64_t in_hash[AT_WIRE_MAX_ARGS];
} bufset;

/* A reference's outputs on one seed. */
typedef struct refout {
    const at_wire_ref *ref;
    uint64_t seed;
    bufset *set; /* its inputs */
    gbuf out[AT_WIRE_MAX_ARGS];
    int ready; /* computed, or given by the agent */
    int failed;
    char why[256];
} refout;

typedef struct cjob {
    const at_wire_job *w;
    kn_rt_kernel_fn fn;
    kn_rt_kernel_fn pre;         /* the layout rewrite's pre-transform, or NULL */
    gbuf lay[AT_WIRE_MAX_PRE];   /* the weights in the kernel's layout (made by 'pre') */
    int lay_ready;
    bufset *set;
    refout *ro; /* NULL: no check */
    int threads;
    int failed; /* reported during setup */
} cjob;

typedef struct child {
    int ev;
    at_buf out; /* reserved before the sandbox; never grows after */
    at_wire_sbx_batch *b;
    cjob *jobs;
    bufset *sets;
    int n_sets;
    refout *ros;
    int n_ros;
    kn_rt_kernel_fn *ref_fns; /* per batch reference */
    gbuf ws;
    kn_rt_pool *pools[8];
    int pool_threads[8];
    int n_pools;
} child;

void agt__send(int ev, at_buf *out, at_wire_msg *m)
{
    at_buf_reset(out);
    if (at_wire_encode(NULL, m, out) != AT_OK || out->err != AT_OK) return;
    while (write(ev, out->data, out->len) < 0 && errno == EINTR)
        ;
}

void agt__send_result(int ev, at_buf *out, const char *id, int index, int status,
                      const double *costs, int n_costs, const char *text)
{
    at_wire_msg m;
    at_wire_msg_init(&m, AT_WIRE_T_SBX_EVENT);
    m.u.event.kind = AT_WIRE_SBX_RESULT;
    m.u.event.index = index;
    m.u.event.result.id = id;
    m.u.event.result.status = status;
    m.u.event.result.costs = (double *)costs;
    m.u.event.result.n_costs = n_costs;
    m.u.event.result.error = text;
    agt__send(ev, out, &m);
}

void agt__send_note(int ev, at_buf *out, int kind, int index, const char *note)
{
    at_wire_msg m;
    at_wire_msg_init(&m, AT_WIRE_T_SBX_EVENT);
    m.u.event.kind = kind;
    m.u.event.index = index;
    m.u.event.note = note;
    agt__send(ev, out, &m);
}

static void send_msg(child *c, at_wire_msg *m)
{
    agt__send(c->ev, &c->out, m);
}

int agt__fit_repeats(double check_s, double budget_s, int number, int repeat, int *n_warmup)
{
    double left_s = 0.8 * budget_s, per_rep = check_s * (number > 0 ? number : 1);
    int fit;
    if (!(check_s > 0) || (*n_warmup + repeat) * per_rep <= left_s)
        return repeat;
    *n_warmup = 0;
    fit = left_s > 0 ? (int)(left_s / per_rep) : 0;
    return fit > repeat ? repeat : fit;
}

static void send_result(child *c, int index, int status, const double *costs, int n_costs,
                        const char *text)
{
    agt__send_result(c->ev, &c->out, c->b->jobs[index].id, index, status, costs, n_costs, text);
}

static void send_start(child *c, int index, const char *note)
{
    agt__send_note(c->ev, &c->out, AT_WIRE_SBX_START, index, note);
}

int agt__same_sig(const at_wire_artifact *a, const at_wire_artifact *b)
{
    if (a->n_args != b->n_args) return 0;
    for (int i = 0; i < a->n_args; i++) {
        const at_wire_arg *x = &a->args[i], *y = &b->args[i];
        if (x->dtype != y->dtype || x->is_output != y->is_output || x->n_dims != y->n_dims)
            return 0;
        for (int d = 0; d < x->n_dims; d++)
            if (x->shape[d] != y->shape[d]) return 0;
    }
    return 1;
}

static int64_t arg_elems(const at_wire_arg *a)
{
    int64_t n = 1;
    for (int d = 0; d < a->n_dims; d++)
        n *= a->shape[d];
    return n;
}

static size_t arg_bytes(const at_wire_arg *a)
{
    return (size_t)arg_elems(a) * (size_t)at_dtype_bytes((at_dtype)a->dtype);
}

static uint64_t hash_bytes(const void *p, size_t n)
{
    return at_hash64(p, n);
}

static void fill_inputs(bufset *s)
{
    for (int i = 0; i < s->sig->n_args; i++) {
        const at_wire_arg *a = &s->sig->args[i];
        if (a->is_output) continue;
        kn_rt_fill(s->b[i].p, (at_dtype)a->dtype, s->n_elems[i], s->seed, (uint32_t)i);
        s->in_hash[i] = hash_bytes(s->b[i].p, s->b[i].n);
    }
}

static bufset *get_set(child *c, const at_wire_artifact *sig, uint64_t seed, char *why, size_t n)
{
    bufset *s;
    for (int i = 0; i < c->n_sets; i++)
        if (c->sets[i].seed == seed && agt__same_sig(c->sets[i].sig, sig)) return &c->sets[i];
    s = &c->sets[c->n_sets];
    memset(s, 0, sizeof *s);
    s->sig = sig;
    s->seed = seed;
    for (int i = 0; i < sig->n_args; i++) {
        s->n_elems[i] = arg_elems(&sig->args[i]);
        if (gbuf_alloc(&s->b[i], arg_bytes(&sig->args[i])) != 0) {
            snprintf(why, n, "cannot allocate %zu bytes for argument %d", arg_bytes(&sig->args[i]),
                     i);
            return NULL;
        }
    }
    fill_inputs(s);
    c->n_sets++;
    return s;
}

static const at_wire_ref *find_ref(const at_wire_sbx_batch *b,
                                   const uint8_t id[AT_WIRE_REFID_BYTES])
{
    for (int i = 0; i < b->n_refs; i++)
        if (memcmp(b->refs[i].id, id, AT_WIRE_REFID_BYTES) == 0) return &b->refs[i];
    return NULL;
}

static refout *get_refout(child *c, const at_wire_ref *r, bufset *set, char *why, size_t n)
{
    refout *ro;
    for (int i = 0; i < c->n_ros; i++)
        if (c->ros[i].ref == r && c->ros[i].seed == set->seed) return &c->ros[i];
    ro = &c->ros[c->n_ros];
    memset(ro, 0, sizeof *ro);
    ro->ref = r;
    ro->seed = set->seed;
    ro->set = set;
    for (int i = 0; i < r->art.n_args; i++) {
        if (!r->art.args[i].is_output) continue;
        if (gbuf_alloc(&ro->out[i], arg_bytes(&r->art.args[i])) != 0) {
            snprintf(why, n, "cannot allocate the reference's output %d", i);
            return NULL;
        }
    }
    /* outputs the agent kept from an earlier child */
    for (int k = 0; k < c->b->n_refouts; k++) {
        const at_wire_refout *o = &c->b->refouts[k];
        int ok = 1, j = 0;
        if (memcmp(o->ref, r->id, AT_WIRE_REFID_BYTES) != 0 || o->seed != set->seed) continue;
        for (int i = 0; i < r->art.n_args; i++) {
            if (!r->art.args[i].is_output) continue;
            if (j >= o->n_outputs || o->n_bytes[j] != ro->out[i].n) {
                ok = 0;
                break;
            }
            j++;
        }
        if (!ok || j != o->n_outputs) continue;
        j = 0;
        for (int i = 0; i < r->art.n_args; i++)
            if (r->art.args[i].is_output) {
                memcpy(ro->out[i].p, o->data[j], o->n_bytes[j]);
                j++;
            }
        ro->ready = 1;
    }
    c->n_ros++;
    return ro;
}

int agt__pin_order(int *cpus, int max)
{
    cpu_set_t own;
    long freq[CPU_SETSIZE];
    int all[CPU_SETSIZE];
    int n = 0;
    if (max < 1 || sched_getaffinity(0, sizeof own, &own) != 0)
        return 0;
    for (int c = 0; c < CPU_SETSIZE; c++) {
        char path[96];
        FILE *f;
        int k;
        if (!CPU_ISSET(c, &own))
            continue;
        freq[c] = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/cpufreq/cpuinfo_max_freq", c);
        if ((f = fopen(path, "r")) != NULL) {
            if (fscanf(f, "%ld", &freq[c]) != 1)
                freq[c] = 0;
            fclose(f);
        }
        /* insertion: faster first, lower numbers first among equals */
        for (k = n++; k > 0 && freq[all[k - 1]] < freq[c]; k--)
            all[k] = all[k - 1];
        all[k] = c;
    }
    n = n < max ? n : max;
    memcpy(cpus, all, (size_t)n * sizeof *cpus);
    return n;
}

static int32_t noop_task(void *closure, int32_t t, int32_t n)
{
    (void)closure;
    (void)t;
    (void)n;
    return 0;
}

static const kn_rt_par *par_for(child *c, int threads)
{
    for (int i = 0; i < c->n_pools; i++)
        if (c->pool_threads[i] == threads) return kn_rt_pool_par(c->pools[i]);
    return kn_rt_serial_par();
}

/* Run the reference of 'j' if its output is not known yet; sends REFOUT chunks. */
static int ensure_ref(child *c, int index, cjob *j, kn_rt_kernel_fn ref_fn)
{
    refout *ro = j->ro;
    void *bufs[AT_WIRE_MAX_ARGS];
    int32_t rc;
    int n_out = 0, k = 0;

    if (ro->ready || ro->failed) return ro->failed ? -1 : 0;
    send_start(c, index, "reference");
    for (int i = 0; i < ro->ref->art.n_args; i++) {
        bufs[i] = ro->ref->art.args[i].is_output ? ro->out[i].p : ro->set->b[i].p;
        n_out += ro->ref->art.args[i].is_output;
    }
    rc = ref_fn(bufs, c->ws.p, kn_rt_serial_par());
    if (rc != 0) {
        ro->failed = 1;
        snprintf(ro->why, sizeof ro->why, "the task's reference kernel returned %d", (int)rc);
        return -1;
    }
    for (int i = 0; i < ro->ref->art.n_args; i++)
        if (ro->ref->art.args[i].is_output && gbuf_intact(&ro->out[i]) != 0) {
            ro->failed = 1;
            snprintf(ro->why, sizeof ro->why, "the task's reference kernel wrote out of bounds");
            return -1;
        }
    ro->ready = 1;
    /* hand the outputs to the agent's cache, in chunks */
    for (int i = 0; i < ro->ref->art.n_args; i++) {
        at_wire_msg m;
        size_t total;
        if (!ro->ref->art.args[i].is_output) continue;
        total = ro->out[i].n;
        for (size_t off = 0; off < total || (total == 0 && off == 0); off += CHUNK) {
            at_wire_msg_init(&m, AT_WIRE_T_SBX_EVENT);
            m.u.event.kind = AT_WIRE_SBX_REFOUT;
            memcpy(m.u.event.ref, ro->ref->id, AT_WIRE_REFID_BYTES);
            m.u.event.seed = ro->seed;
            m.u.event.output = k;
            m.u.event.n_outputs = n_out;
            m.u.event.offset = off;
            m.u.event.total = total;
            m.u.event.data = ro->out[i].p + off;
            m.u.event.n = total - off < CHUNK ? total - off : CHUNK;
            send_msg(c, &m);
            if (total == 0) break;
        }
        k++;
    }
    return 0;
}

/* Which argument's canaries or input bytes changed; -1 if none. */
static int check_args(child *c, cjob *j, int *input_written)
{
    const at_wire_artifact *a = &j->w->art;
    *input_written = 0;
    for (int i = 0; i < a->n_args; i++) {
        if (gbuf_intact(&j->set->b[i]) != 0) return i;
        if (!a->args[i].is_output &&
            hash_bytes(j->set->b[i].p, j->set->b[i].n) != j->set->in_hash[i]) {
            *input_written = 1;
            return i;
        }
    }
    for (int k = 0; k < a->n_pre; k++)
        if (j->lay[k].map && gbuf_intact(&j->lay[k]) != 0) return a->pre[k].arg;
    if (c->ws.map && gbuf_intact(&c->ws) != 0) return a->n_args; /* the workspace */
    return -1;
}

/* Put the argument buffers of 'j' back in shape after a failed check. */
static void repair(child *c, cjob *j)
{
    for (int i = 0; i < j->w->art.n_args; i++)
        gbuf_recanary(&j->set->b[i]);
    for (int k = 0; k < j->w->art.n_pre; k++)
        if (j->lay[k].map) gbuf_recanary(&j->lay[k]);
    j->lay_ready = 0; /* made again from the refilled inputs */
    fill_inputs(j->set);
    if (c->ws.map) gbuf_recanary(&c->ws);
}

static void run_job(child *c, int index, kn_rt_kernel_fn ref_fn)
{
    cjob *j = &c->jobs[index];
    const at_wire_job *w = j->w;
    const at_wire_artifact *a = &w->art;
    void *bufs[AT_WIRE_MAX_ARGS];
    size_t n_bytes[AT_WIRE_MAX_ARGS], flush_bytes[AT_WIRE_MAX_ARGS];
    double costs[AT_WIRE_MAX_COSTS];
    char text[512];
    const kn_rt_par *par = par_for(c, j->threads);
    kn_rt_time_opts opts;
    kn_rt_time_info tinfo = {0, 0};
    int n_inputs = 0, bad, input_written;
    int32_t rc;
    double t_job, check_s;

    if (w->run.cooldown_ms > 0) {
        struct timespec ts = {w->run.cooldown_ms / 1000,
                              (long)(w->run.cooldown_ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
    send_start(c, index, "");
    if (j->ro && ensure_ref(c, index, j, ref_fn) != 0) {
        send_result(c, index, AT_MEASURE_UNKNOWN_ERROR, NULL, 0, j->ro->why);
        return;
    }
    if (j->ro) send_start(c, index, ""); /* the job's own time starts now */
    t_job = at_time_mono_s();
    for (int i = 0; i < a->n_args; i++) {
        bufs[i] = j->set->b[i].p;
        n_bytes[i] = j->set->b[i].n;
        if (a->args[i].is_output)
            memset(j->set->b[i].p, 0xff, j->set->b[i].n); /* NaN: unwritten outputs show */
        else if (n_inputs == i)
            n_inputs++;
    }
    if (j->pre) {
        /* the weights in the kernel's layout: [originals, then new layouts] */
        void *pbufs[2 * AT_WIRE_MAX_PRE];
        if (!j->lay_ready) {
            for (int k = 0; k < a->n_pre; k++) {
                pbufs[k] = j->set->b[a->pre[k].arg].p;
                pbufs[a->n_pre + k] = j->lay[k].p;
            }
            rc = j->pre(pbufs, NULL, par);
            if (rc != 0) {
                snprintf(text, sizeof text, "the layout pre-transform returned %d", (int)rc);
                send_result(c, index, AT_MEASURE_RUNTIME_DEVICE, NULL, 0, text);
                return;
            }
            j->lay_ready = 1;
        }
        for (int k = 0; k < a->n_pre; k++) {
            bufs[a->pre[k].arg] = j->lay[k].p;
            n_bytes[a->pre[k].arg] = j->lay[k].n;
        }
    }
    check_s = at_time_mono_s();
    rc = j->fn(bufs, c->ws.p, par);
    check_s = at_time_mono_s() - check_s;
    if (rc != 0) {
        snprintf(text, sizeof text, "the kernel returned %d (a parallel launch failed)", (int)rc);
        send_result(c, index, AT_MEASURE_RUNTIME_DEVICE, NULL, 0, text);
        return;
    }
    if ((bad = check_args(c, j, &input_written)) >= 0) {
        if (bad == a->n_args)
            snprintf(text, sizeof text, "the kernel wrote out of bounds of its workspace");
        else if (input_written)
            snprintf(text, sizeof text,
                     "the kernel wrote into its input argument %d (inputs are "
                     "read-only)",
                     bad);
        else
            snprintf(text, sizeof text, "the kernel wrote out of bounds of argument %d", bad);
        repair(c, j);
        send_result(c, index, AT_MEASURE_RUNTIME_DEVICE, NULL, 0, text);
        return;
    }
    if (j->ro) {
        for (int i = 0; i < a->n_args; i++) {
            double e;
            if (!a->args[i].is_output) continue;
            e = kn_rt_rel_err(j->set->b[i].p, j->ro->out[i].p, (at_dtype)a->args[i].dtype,
                              j->set->n_elems[i]);
            if (!(e <= REL_ERR_BOUND)) {
                snprintf(text, sizeof text,
                         "output argument %d differs from the reference: "
                         "relative error %.3g (bound %g)",
                         i, e, REL_ERR_BOUND);
                send_result(c, index, AT_MEASURE_WRONG_ANSWER, NULL, 0, text);
                return;
            }
        }
    }
    memset(&opts, 0, sizeof opts);
    opts.number = w->run.number;
    opts.repeat = w->run.repeat;
    opts.min_repeat_ms = w->run.min_repeat_ms;
    opts.flush_cache = w->run.flush_cache;
    opts.n_warmup = w->run.n_warmup;
    /* a kernel too slow for its repeats: fewer of them, or the checked run alone */
    opts.repeat = agt__fit_repeats(check_s,
                                   w->run.timeout_ms / 1000.0 - (at_time_mono_s() - t_job),
                                   opts.number, opts.repeat, &opts.n_warmup);
    if (opts.repeat == 0) {
        costs[0] = check_s;
        send_result(c, index, AT_MEASURE_NO_ERROR, costs, 1, "");
        return;
    }
    /* far slower than the task's best: the checked run is its cost, and the result says so */
    if (w->run.cutoff_s > 0 && check_s > w->run.cutoff_s) {
        costs[0] = check_s;
        snprintf(text, sizeof text,
                 "not repeated: the checked run took %.3g ms, over the cutoff of %.3g ms", check_s * 1e3,
                 w->run.cutoff_s * 1e3);
        send_result(c, index, AT_MEASURE_NO_ERROR, costs, 1, text);
        return;
    }
    /* the inputs to evict: every one, or those of the settings' bitmask (a size of 0 is
    ** not flushed) */
    for (int i = 0; i < n_inputs; i++)
        flush_bytes[i] = w->run.flush_args == 0 || (i < 63 && (w->run.flush_args >> i & 1))
                             ? n_bytes[i]
                             : 0;
    /* a repeat in which a pool thread missed a launch is timed again, once per repeat at
    ** most, where twice the repeats fit the job's time */
    {
        int warm2 = opts.n_warmup;
        if (agt__fit_repeats(check_s, w->run.timeout_ms / 1000.0 - (at_time_mono_s() - t_job),
                             opts.number, 2 * opts.repeat, &warm2) == 2 * opts.repeat &&
            warm2 == opts.n_warmup)
            opts.max_redo = opts.repeat;
    }
    opts.info = &tinfo;
    if (kn_rt_time(j->fn, bufs, c->ws.p, par, &opts, opts.flush_cache ? n_inputs : 0,
                   flush_bytes, costs, &rc) != AT_OK) {
        send_result(c, index, AT_MEASURE_UNKNOWN_ERROR, NULL, 0, "bad run settings");
        return;
    }
    if (rc != 0) {
        snprintf(text, sizeof text, "the kernel returned %d while being timed", (int)rc);
        send_result(c, index, AT_MEASURE_RUNTIME_DEVICE, NULL, 0, text);
        return;
    }
    if ((bad = check_args(c, j, &input_written)) >= 0) {
        snprintf(text, sizeof text,
                 "the kernel wrote out of bounds or into an input (argument "
                 "%d) while being timed",
                 bad);
        repair(c, j);
        send_result(c, index, AT_MEASURE_RUNTIME_DEVICE, NULL, 0, text);
        return;
    }
    text[0] = 0;
    if (tinfo.n_redone > 0 || tinfo.n_short > 0)
        snprintf(text, sizeof text,
                 "a pool thread missed a launch: %d repeat%s timed again, %d kept so",
                 tinfo.n_redone, tinfo.n_redone == 1 ? "" : "s", tinfo.n_short);
    send_result(c, index, AT_MEASURE_NO_ERROR, costs, opts.repeat, text);
}

/* Buffers for the weights in the kernel's layout (before the sandbox: no mmap after). */
static int alloc_layouts(cjob *j, char *why, size_t n)
{
    const at_wire_artifact *a = &j->w->art;
    for (int k = 0; k < a->n_pre; k++) {
        at_wire_arg g;
        memset(&g, 0, sizeof g);
        g.dtype = a->args[a->pre[k].arg].dtype;
        g.n_dims = a->pre[k].n_dims;
        memcpy(g.shape, a->pre[k].shape, sizeof g.shape);
        if (gbuf_alloc(&j->lay[k], arg_bytes(&g)) != 0) {
            snprintf(why, n, "cannot allocate %zu bytes for the new layout of argument %d",
                     arg_bytes(&g), a->pre[k].arg);
            return -1;
        }
    }
    return 0;
}

static const char *arch_of(const char *triple, char *buf, size_t n)
{
    const char *dash = strchr(triple, '-');
    size_t k = dash ? (size_t)(dash - triple) : strlen(triple);
    snprintf(buf, n, "%.*s", (int)k, triple);
    if (strcmp(buf, "arm64") == 0) snprintf(buf, n, "aarch64");
    return buf;
}

void agt__child_main(const uint8_t *batch, size_t n, int ev, uint32_t flags, int64_t mem_limit)
{
    static const int fatal[] = {SIGSEGV, SIGBUS,  SIGFPE,  SIGILL, SIGABRT,
                                SIGSYS,  SIGTRAP, SIGXCPU, SIGPIPE};
    at_wire_msg m;
    child c;
    char err[512], why[256], mine[32], theirs[32];
    kn_rt_module **mods, **ref_mods;
    kn_rt_kernel_fn *ref_fns;
    size_t ws_need = 0;
    double cpu_budget_s = 10;
    struct rlimit rl;
    const char *sandbox_note;
    agt_device dev;

    memset(&c, 0, sizeof c);
    c.ev = ev;
    for (size_t i = 0; i < AT_ARRAY_LEN(fatal); i++)
        signal(fatal[i], SIG_DFL);
    rl.rlim_cur = rl.rlim_max = 0;
    setrlimit(RLIMIT_CORE, &rl);
    at_buf_init(&c.out);
    at_buf_put(&c.out, "", 0);
    {
        static char reserve[CHUNK + (64u << 10)];
        at_buf_put(&c.out, reserve, sizeof reserve); /* capacity for any event */
        at_buf_reset(&c.out);
    }
    if (at_wire_decode(NULL, batch, n, &m, err, sizeof err) != AT_OK ||
        m.type != AT_WIRE_T_SBX_BATCH)
        _exit(3);
    c.b = &m.u.batch;
    c.jobs = at_calloc((size_t)c.b->n_jobs + 1, sizeof *c.jobs);
    c.sets = at_calloc((size_t)c.b->n_jobs + 1, sizeof *c.sets);
    c.ros = at_calloc((size_t)c.b->n_jobs + 1, sizeof *c.ros);
    mods = at_calloc((size_t)c.b->n_jobs + 1, sizeof *mods);
    ref_mods = at_calloc((size_t)c.b->n_refs + 1, sizeof *ref_mods);
    ref_fns = at_calloc((size_t)c.b->n_refs + 1, sizeof *ref_fns);
    if (!c.jobs || !c.sets || !c.ros || !mods || !ref_mods || !ref_fns) _exit(4);
    agt_device_read(&dev);

    /* references first: every job with a reference needs it loaded */
    for (int r = 0; r < c.b->n_refs; r++) {
        const at_wire_ref *ref = &c.b->refs[r];
        if (ref->art.n_pre == 0 && /* a reference reads the task's own layouts */
            kn_rt_module_load(ref->art.obj, ref->art.obj_size, NULL, &ref_mods[r], err,
                              sizeof err) == AT_OK)
            ref_fns[r] = (kn_rt_kernel_fn)kn_rt_module_sym(ref_mods[r], ref->art.entry);
        size_t need = (size_t)(ref->art.ws_fixed + ref->art.ws_per_thread);
        if (need > ws_need) ws_need = need;
    }
    for (int i = 0; i < c.b->n_jobs; i++) {
        cjob *j = &c.jobs[i];
        const at_wire_job *w = &c.b->jobs[i];
        const char *fail_text = NULL;
        int status = AT_MEASURE_COMPILE_DEVICE;
        size_t need;
        j->w = w;
        j->threads = w->run.n_threads > 0 ? w->run.n_threads : c.b->default_threads;
        cpu_budget_s += (w->run.timeout_ms / 1000.0 + 1.0) * j->threads;
        if (strcmp(arch_of(w->art.triple, theirs, sizeof theirs),
                   arch_of(dev.triple, mine, sizeof mine)) != 0) {
            snprintf(err, sizeof err, "the artifact was built for %s (%s); this device is %s",
                     theirs, w->art.triple, mine);
            fail_text = err;
        } else if (kn_rt_module_load(w->art.obj, w->art.obj_size, NULL, &mods[i], err,
                                     sizeof err) != AT_OK) {
            static char t[640];
            snprintf(t, sizeof t, "the device cannot load the kernel: %s", err);
            fail_text = t;
        } else if ((j->fn = (kn_rt_kernel_fn)kn_rt_module_sym(mods[i], w->art.entry)) == NULL) {
            snprintf(err, sizeof err, "the kernel object defines no symbol '%s'", w->art.entry);
            fail_text = err;
        } else if (w->art.n_pre > 0 &&
                   (j->pre = (kn_rt_kernel_fn)kn_rt_module_sym(mods[i], w->art.pre_entry)) ==
                       NULL) {
            snprintf(err, sizeof err, "the kernel object defines no symbol '%s'",
                     w->art.pre_entry);
            fail_text = err;
        } else if ((j->set = get_set(&c, &w->art, w->seed, why, sizeof why)) == NULL) {
            status = AT_MEASURE_UNKNOWN_ERROR;
            fail_text = why;
        } else if (alloc_layouts(j, why, sizeof why) != 0) {
            status = AT_MEASURE_UNKNOWN_ERROR;
            fail_text = why;
        } else if (w->has_ref) {
            const at_wire_ref *ref = find_ref(c.b, w->ref);
            status = AT_MEASURE_UNKNOWN_ERROR;
            if (ref == NULL)
                fail_text = "the task's reference artifact did not reach the device";
            else if (!agt__same_sig(&ref->art, &w->art))
                fail_text = "the task's reference has another argument signature than the "
                            "kernel (a tuner bug)";
            else if (ref_fns[ref - c.b->refs] == NULL)
                fail_text = "the task's reference kernel does not load on this device";
            else if ((j->ro = get_refout(&c, ref, j->set, why, sizeof why)) == NULL)
                fail_text = why;
        }
        if (fail_text) {
            j->failed = 1;
            send_result(&c, i, status, NULL, 0, fail_text);
            continue;
        }
        need = (size_t)(w->art.ws_fixed + w->art.ws_per_thread * j->threads);
        if (need > ws_need) ws_need = need;
        if (c.n_pools < 8) {
            int have = 0;
            for (int k = 0; k < c.n_pools; k++)
                have |= c.pool_threads[k] == j->threads;
            if (!have && j->threads > 1 && kn_rt_pool_new(j->threads, &c.pools[c.n_pools]) == AT_OK)
                c.pool_threads[c.n_pools++] = j->threads;
        }
    }
    if (ws_need > 0 && gbuf_alloc(&c.ws, ws_need) != 0) {
        for (int i = 0; i < c.b->n_jobs; i++)
            if (!c.jobs[i].failed) {
                c.jobs[i].failed = 1;
                send_result(&c, i, AT_MEASURE_UNKNOWN_ERROR, NULL, 0,
                            "cannot allocate the workspace");
            }
    }

    /* a pool as large as this process's CPUs is pinned, launcher and workers one CPU each
    ** (unless --no-pin): a worker the scheduler woke onto the launcher's CPU waited there
    ** while the launcher ran every chunk, and up to 6 % of MobileNetV2's jobs were timed up
    ** to 2x slow (docs/kernel_abi.md).  A smaller pool is left to the scheduler: agents
    ** sharing a host without taskset would otherwise all pile onto the same CPUs. */
    if (c.n_pools > 0 && !(flags & AGT_LAUNCH_NO_PIN)) {
        int cpus[256], n_cpus = agt__pin_order(cpus, 256);
        for (int k = 0; k < c.n_pools && n_cpus >= 2; k++)
            if (c.pool_threads[k] >= n_cpus && kn_rt_pool_pin(c.pools[k], cpus, n_cpus) != AT_OK)
                break; /* unpinned: timed as before */
    }
    /* every pool thread is past its start-up (glibc's rseq and robust-list calls, the
    ** sanitizer's per-thread set-up) before the filter forbids those calls:
    ** kn_rt_pool_new waits for that; one launch each besides (a worker that joins it
    ** has touched what a launch touches) */
    for (int k = 0; k < c.n_pools; k++) {
        const kn_rt_par *par = kn_rt_pool_par(c.pools[k]);
        par->launch(par, noop_task, NULL);
    }

    /* limits, then the filter */
    rl.rlim_cur = rl.rlim_max = (rlim_t)(cpu_budget_s + 1);
    setrlimit(RLIMIT_CPU, &rl);
    rl.rlim_cur = rl.rlim_max = 0;
    setrlimit(RLIMIT_FSIZE, &rl);
#if !AGT_SANITIZER
    if (mem_limit > 0) {
        rl.rlim_cur = rl.rlim_max = (rlim_t)mem_limit;
        setrlimit(RLIMIT_AS, &rl);
    }
#else
    (void)mem_limit;
#endif
    sandbox_note = "no seccomp (disabled or unavailable): process isolation, limits, timeouts";
    if (flags & AGT_LAUNCH_SECCOMP) {
        if (agt__seccomp_enter(err, sizeof err) == 0)
            sandbox_note =
                AGT_SANITIZER ? "seccomp (sanitizer build: a wider allow-list)" : "seccomp";
        else
            sandbox_note = err;
    }
    {
        at_wire_msg r;
        at_wire_msg_init(&r, AT_WIRE_T_SBX_EVENT);
        r.u.event.kind = AT_WIRE_SBX_READY;
        r.u.event.note = sandbox_note;
        send_msg(&c, &r);
    }
    for (int i = 0; i < c.b->n_jobs; i++) {
        kn_rt_kernel_fn rf = NULL;
        if (c.jobs[i].failed) continue;
        if (c.jobs[i].ro) rf = ref_fns[c.jobs[i].ro->ref - c.b->refs];
        run_job(&c, i, rf);
    }
    _exit(0);
}
