/* rpc_agent/agt_agent.c -- the agent: the network loop (agt_run's thread) and the measuring
** thread that drives sandboxed children through the launcher.
**
** Shared state, under 'mu': the queue of jobs not started ('pending'), the count of jobs in
** the running batch, the outbox of results not yet acknowledged, the ids of jobs to give
** back, the references the agent lacks, the reference cache and the reference-output cache.
** The network thread adds jobs and references and removes acknowledged results; the
** measuring thread takes jobs and adds results and reference outputs.
**
** A result leaves the outbox only when a poll that carried it was answered, so a result is
** never lost to a dropped connection: it is sent again on the next session (the tracker
** ignores what it already has). */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rpc_agent/agt_int.h"

#define REF_CACHE 64
#define REFOUT_BYTES_MAX ((size_t)256 << 20)
#define POLL_RESULTS_MAX 256

typedef struct agt_job {
    struct agt_job *next;
    at_arena arena;
    at_wire_job w;
} agt_job;

typedef struct agt_res {
    at_arena arena;
    at_wire_result r;
} agt_res;

typedef struct ref_entry {
    int used;
    uint8_t id[AT_WIRE_REFID_BYTES];
    at_arena arena;
    at_wire_ref w;
    uint64_t last_use;
} ref_entry;

typedef struct refout_entry {
    struct refout_entry *next;
    uint8_t id[AT_WIRE_REFID_BYTES];
    uint64_t seed;
    int n_outputs;
    uint8_t *data[AT_WIRE_MAX_ARGS];
    size_t n_bytes[AT_WIRE_MAX_ARGS];
    size_t total;
} refout_entry;

struct agt_agent {
    agt_config cfg;
    at_wire_key keys[2];
    char url[512], key[AT_WIRE_MAX_NAME + 1], name[AT_WIRE_MAX_NAME + 1];
    agt_launcher *launcher;
    int own_launcher;
    agt_device dev;
    char fingerprint[17];
    at_wire_client *client;
    _Atomic int stop;

    pthread_t measurer;
    int measurer_started;
    pthread_mutex_t mu;
    pthread_cond_t cv_jobs; /* the measurer waits for jobs */
    pthread_cond_t cv_out;  /* the network loop waits for results */
    agt_job *pending, *pending_tail;
    int n_pending, n_running;
    int measurer_idle;
    agt_res **outbox;
    int n_out, cap_out;
    char **returned;
    int n_returned, cap_returned;
    uint8_t need_refs[AT_WIRE_MAX_REFS][AT_WIRE_REFID_BYTES];
    int n_need_refs;
    ref_entry refs[REF_CACHE];
    uint64_t ref_clock;
    refout_entry *refouts; /* newest first */
    size_t refout_bytes;
    agt_stats stats;
    at_wire_devstate state;
    double state_at;
    int is_gpu; /* --device cuda:N */
    agt_gpu gpu;
    char driver[96];
};

static void devstate(agt_agent *a, at_wire_devstate *s)
{
    double now = at_time_mono_s();
    if (now - a->state_at > 0.1) {
        agt_device_state(a->cfg.hot_c, a->cfg.loaded_per_core, a->dev.n_cores, &a->state);
        a->state_at = now;
    }
    *s = a->state;
}

/* ---- caches (under mu) ---------------------------------------------------------------- */

static ref_entry *ref_find(agt_agent *a, const uint8_t id[AT_WIRE_REFID_BYTES])
{
    for (int i = 0; i < REF_CACHE; i++)
        if (a->refs[i].used && memcmp(a->refs[i].id, id, AT_WIRE_REFID_BYTES) == 0) {
            a->refs[i].last_use = ++a->ref_clock;
            return &a->refs[i];
        }
    return NULL;
}

static void ref_add(agt_agent *a, const at_wire_ref *r)
{
    ref_entry *e = ref_find(a, r->id), *old = NULL;
    if (e) return;
    for (int i = 0; i < REF_CACHE && e == NULL; i++)
        if (!a->refs[i].used) e = &a->refs[i];
    if (e == NULL) {
        for (int i = 0; i < REF_CACHE; i++)
            if (old == NULL || a->refs[i].last_use < old->last_use) old = &a->refs[i];
        at_arena_fini(&old->arena);
        old->used = 0;
        e = old;
    }
    at_arena_init(&e->arena, r->art.obj_size + 1024);
    if (at_wire_ref_copy(&e->arena, &e->w, r) != AT_OK) {
        at_arena_fini(&e->arena);
        return;
    }
    memcpy(e->id, r->id, AT_WIRE_REFID_BYTES);
    e->used = 1;
    e->last_use = ++a->ref_clock;
}

static refout_entry *refout_find(agt_agent *a, const uint8_t id[AT_WIRE_REFID_BYTES], uint64_t seed)
{
    for (refout_entry *e = a->refouts; e; e = e->next)
        if (e->seed == seed && memcmp(e->id, id, AT_WIRE_REFID_BYTES) == 0) return e;
    return NULL;
}

static void refout_free(refout_entry *e)
{
    for (int i = 0; i < e->n_outputs; i++)
        at_free(e->data[i]);
    at_free(e);
}

static void refout_add(agt_agent *a, refout_entry *e)
{
    refout_entry **pp;
    if (refout_find(a, e->id, e->seed) != NULL || e->total > REFOUT_BYTES_MAX) {
        refout_free(e);
        return;
    }
    e->next = a->refouts;
    a->refouts = e;
    a->refout_bytes += e->total;
    while (a->refout_bytes > REFOUT_BYTES_MAX) { /* drop the oldest */
        for (pp = &a->refouts; (*pp)->next; pp = &(*pp)->next)
            ;
        a->refout_bytes -= (*pp)->total;
        refout_free(*pp);
        *pp = NULL;
    }
}

/* ---- results and returned jobs (under mu) ------------------------------------------- */

static void push_result(agt_agent *a, const at_wire_result *r)
{
    agt_res *res;
    if (a->n_out == a->cap_out) {
        int cap = a->cap_out ? 2 * a->cap_out : 64;
        agt_res **v = at_realloc(a->outbox, (size_t)cap * sizeof *v);
        if (v == NULL) return;
        a->outbox = v;
        a->cap_out = cap;
    }
    if ((res = at_calloc(1, sizeof *res)) == NULL) return;
    at_arena_init(&res->arena, 512);
    if (at_wire_result_copy(&res->arena, &res->r, r) != AT_OK) {
        at_arena_fini(&res->arena);
        at_free(res);
        return;
    }
    a->outbox[a->n_out++] = res;
    if (r->status != AT_MEASURE_NO_ERROR) a->stats.n_failed++;
    pthread_cond_signal(&a->cv_out);
}

static void push_returned(agt_agent *a, const char *id)
{
    char *c;
    if (a->n_returned == a->cap_returned) {
        int cap = a->cap_returned ? 2 * a->cap_returned : 32;
        char **v = at_realloc(a->returned, (size_t)cap * sizeof *v);
        if (v == NULL) return;
        a->returned = v;
        a->cap_returned = cap;
    }
    if ((c = at_strdup(id)) != NULL) a->returned[a->n_returned++] = c;
}

static void need_ref(agt_agent *a, const uint8_t id[AT_WIRE_REFID_BYTES])
{
    for (int i = 0; i < a->n_need_refs; i++)
        if (memcmp(a->need_refs[i], id, AT_WIRE_REFID_BYTES) == 0) return;
    if (a->n_need_refs < AT_WIRE_MAX_REFS)
        memcpy(a->need_refs[a->n_need_refs++], id, AT_WIRE_REFID_BYTES);
}

static void job_free(agt_job *j)
{
    at_arena_fini(&j->arena);
    at_free(j);
}

/* ---- the measuring thread ------------------------------------------------------------- */

static void make_result(agt_agent *a, const at_wire_job *w, int status, const double *costs,
                        int n_costs, const char *text, double run_s)
{
    at_wire_result r;
    double sorted[AT_WIRE_MAX_COSTS];
    memset(&r, 0, sizeof r);
    if (n_costs > 0 && n_costs <= AT_WIRE_MAX_COSTS) {
        memcpy(sorted, costs, (size_t)n_costs * sizeof *sorted);
        r.median_s = at_median_sort(sorted, n_costs);
    }
    r.id = w->id;
    r.status = status;
    r.costs = (double *)costs;
    r.n_costs = n_costs;
    r.error = text;
    r.measured_at = at_time_wall_s();
    r.run_s = run_s;
    devstate(a, &r.state);
    r.agent = a->name;
    r.fingerprint = a->fingerprint;
    r.dev.arch = r.dev.model = r.dev.os = r.dev.driver = "";
    pthread_mutex_lock(&a->mu);
    push_result(a, &r);
    pthread_mutex_unlock(&a->mu);
}

static int read_report(agt_launcher *l, agt_report *rep, int timeout_ms)
{
    struct pollfd p = {l->ctl_fd, POLLIN, 0};
    char *c = (char *)rep;
    size_t got = 0;
    while (got < sizeof *rep) {
        ssize_t r;
        int pr = poll(&p, 1, timeout_ms);
        if (pr < 0 && errno == EINTR) continue;
        if (pr <= 0) return -1;
        r = read(l->ctl_fd, c + got, sizeof *rep - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    return 0;
}

int agt__write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reference output being received in chunks. */
typedef struct refout_rx {
    refout_entry *e;
    int n_done;
} refout_rx;

static void on_refout(agt_agent *a, refout_rx *rx, const at_wire_sbx_event *v)
{
    refout_entry *e = rx->e;
    if (e && (memcmp(e->id, v->ref, AT_WIRE_REFID_BYTES) != 0 || e->seed != v->seed ||
              e->n_outputs != v->n_outputs)) {
        refout_free(e);
        rx->e = e = NULL;
    }
    if (e == NULL) {
        if (v->offset != 0 || v->output != 0 || (e = at_calloc(1, sizeof *e)) == NULL) return;
        memcpy(e->id, v->ref, AT_WIRE_REFID_BYTES);
        e->seed = v->seed;
        e->n_outputs = v->n_outputs;
        rx->e = e;
        rx->n_done = 0;
    }
    if (v->output != rx->n_done) return;
    if (v->offset == 0) {
        if (e->data[v->output] != NULL) return;
        if ((e->data[v->output] = at_malloc(v->total ? (size_t)v->total : 1)) == NULL) return;
        e->n_bytes[v->output] = (size_t)v->total;
        e->total += (size_t)v->total;
    }
    if (e->data[v->output] == NULL || v->total != e->n_bytes[v->output]) return;
    memcpy(e->data[v->output] + v->offset, v->data, v->n);
    if (v->offset + v->n == v->total) {
        rx->n_done++;
        if (rx->n_done == e->n_outputs) {
            pthread_mutex_lock(&a->mu);
            refout_add(a, e);
            a->stats.n_refs_run++;
            pthread_mutex_unlock(&a->mu);
            rx->e = NULL;
            rx->n_done = 0;
        }
    }
}

/* Run jobs[0..n) in as many children as it takes; every job gets a result, or is given
** back when the agent stops. */
static void run_batch(agt_agent *a, agt_job **jobs, int n)
{
    int *done = at_calloc((size_t)n, sizeof *done);
    int *map = at_calloc((size_t)n, sizeof *map);
    uint8_t(*bad_refs)[AT_WIRE_REFID_BYTES + 8] = at_calloc((size_t)n, AT_WIRE_REFID_BYTES + 8);
    int n_bad_refs = 0, remaining = n, n_children = 0;
    uint8_t *rxbuf = at_malloc(256u << 10);
    at_buf frame;

    at_buf_init(&frame);
    if (!done || !map || !bad_refs || !rxbuf) {
        for (int i = 0; i < n; i++)
            make_result(a, &jobs[i]->w, AT_MEASURE_UNKNOWN_ERROR, NULL, 0,
                        "the agent is out of memory", 0);
        goto out;
    }
    while (remaining > 0) {
        at_wire_msg m;
        at_wire_job *bj;
        at_wire_ref *br;
        at_wire_refout *bo;
        int nb = 0, nr = 0, no = 0, current = -1, ref_phase = 0, timed_out = 0, exited = 0;
        int got_any = 0, wstatus = 0, stopping = 0;
        double deadline, started = 0, now, max_cool_s = 0;
        agt_launch_hdr h;
        agt_report rep;
        refout_rx rx = {NULL, 0};
        pid_t pid;

        /* every child ends at least one job, so more children than jobs means a child that
        ** ends none (its events do not decode): give up on what is left */
        if (++n_children > n + 2) {
            for (int i = 0; i < n; i++)
                if (!done[i]) {
                    make_result(a, &jobs[i]->w, AT_MEASURE_UNKNOWN_ERROR, NULL, 0,
                                "the sandboxed child reported no result for this job", 0);
                    done[i] = 1;
                    remaining--;
                }
            break;
        }
        /* the sub-batch: jobs without a result, minus those whose reference failed or
        ** is missing from the cache */
        at_wire_msg_init(&m, AT_WIRE_T_SBX_BATCH);
        bj = at_arena_alloc(&m.arena, (size_t)n * sizeof *bj);
        br = at_arena_alloc(&m.arena, AT_WIRE_MAX_REFS * sizeof *br);
        bo = at_arena_alloc(&m.arena, AT_WIRE_MAX_REFS * sizeof *bo);
        if (!bj || !br || !bo) {
            at_wire_msg_fini(&m);
            break;
        }
        pthread_mutex_lock(&a->mu);
        for (int i = 0; i < n; i++) {
            const at_wire_job *w = &jobs[i]->w;
            ref_entry *re;
            int bad = 0;
            if (done[i]) continue;
            if (atomic_load(&a->stop)) {
                push_returned(a, w->id);
                done[i] = 1;
                remaining--;
                continue;
            }
            if (w->has_ref) {
                for (int k = 0; k < n_bad_refs; k++)
                    bad |= memcmp(bad_refs[k], w->ref, AT_WIRE_REFID_BYTES) == 0 &&
                           memcmp(bad_refs[k] + AT_WIRE_REFID_BYTES, &w->seed, 8) == 0;
                if (bad) {
                    pthread_mutex_unlock(&a->mu);
                    make_result(a, w, AT_MEASURE_UNKNOWN_ERROR, NULL, 0,
                                "the task's reference kernel failed on this input (see the "
                                "result of the first job of this task)",
                                0);
                    pthread_mutex_lock(&a->mu);
                    done[i] = 1;
                    remaining--;
                    continue;
                }
                if ((re = ref_find(a, w->ref)) == NULL) {
                    push_returned(a, w->id);
                    need_ref(a, w->ref);
                    done[i] = 1;
                    remaining--;
                    continue;
                }
                {
                    int have = 0;
                    refout_entry *oe;
                    for (int k = 0; k < nr; k++)
                        have |= memcmp(br[k].id, w->ref, AT_WIRE_REFID_BYTES) == 0;
                    if (!have && nr < AT_WIRE_MAX_REFS) br[nr++] = re->w;
                    if ((oe = refout_find(a, w->ref, w->seed)) != NULL) {
                        have = 0;
                        for (int k = 0; k < no; k++)
                            have |= memcmp(bo[k].ref, w->ref, AT_WIRE_REFID_BYTES) == 0 &&
                                    bo[k].seed == w->seed;
                        if (!have && no < AT_WIRE_MAX_REFS) {
                            memcpy(bo[no].ref, oe->id, AT_WIRE_REFID_BYTES);
                            bo[no].seed = oe->seed;
                            bo[no].n_outputs = oe->n_outputs;
                            bo[no].data = (const uint8_t **)oe->data;
                            bo[no].n_bytes = oe->n_bytes;
                            no++;
                        }
                    }
                }
            }
            map[nb] = i;
            bj[nb++] = *w;
            if (w->run.cooldown_ms / 1000.0 > max_cool_s) max_cool_s = w->run.cooldown_ms / 1000.0;
        }
        m.u.batch.jobs = bj;
        m.u.batch.n_jobs = nb;
        m.u.batch.refs = br;
        m.u.batch.n_refs = nr;
        m.u.batch.refouts = bo;
        m.u.batch.n_refouts = no;
        m.u.batch.default_threads = a->cfg.n_threads;
        at_buf_reset(&frame);
        if (nb > 0 && at_wire_encode(NULL, &m, &frame) != AT_OK) {
            pthread_mutex_unlock(&a->mu);
            at_wire_msg_fini(&m);
            for (int k = 0; k < nb; k++) {
                make_result(a, &jobs[map[k]]->w, AT_MEASURE_UNKNOWN_ERROR, NULL, 0,
                            "the agent could not hand the batch to a child (too large)", 0);
                done[map[k]] = 1;
                remaining--;
            }
            continue;
        }
        pthread_mutex_unlock(&a->mu);
        at_wire_msg_fini(&m);
        if (nb == 0) break;

        /* launch */
        memset(&h, 0, sizeof h);
        h.magic = AGT_LAUNCH_MAGIC;
        h.len = (uint32_t)frame.len;
        h.flags = (a->launcher->caps.seccomp && !a->cfg.no_seccomp) ? AGT_LAUNCH_SECCOMP : 0;
        if (a->cfg.no_pin)
            h.flags |= AGT_LAUNCH_NO_PIN;
        h.mem_limit = a->cfg.mem_limit_bytes;
        if (a->is_gpu) {
            h.flags = AGT_LAUNCH_CUDA;
            h.reserved = (uint32_t)a->gpu.index;
            h.mem_limit = 0;
        }
        if (agt__write_all(a->launcher->ctl_fd, &h, sizeof h) != 0 ||
            agt__write_all(a->launcher->ctl_fd, frame.data, frame.len) != 0 ||
            read_report(a->launcher, &rep, 20000) != 0 || rep.kind != AGT_REP_STARTED) {
            at_log_error("agent: the launcher is gone or cannot fork: the batch fails");
            for (int k = 0; k < nb; k++) {
                make_result(a, &jobs[map[k]]->w, AT_MEASURE_UNKNOWN_ERROR, NULL, 0,
                            "the agent cannot start sandboxed children (launcher failed)", 0);
                done[map[k]] = 1;
                remaining--;
            }
            continue;
        }
        pid = rep.pid;
        pthread_mutex_lock(&a->mu);
        a->stats.n_children++;
        pthread_mutex_unlock(&a->mu);
        deadline = at_time_mono_s() + 30.0 + 0.25 * nb;

        /* events until the child is gone */
        while (!exited) {
            struct pollfd p[2] = {{a->launcher->ev_fd, POLLIN, 0},
                                  {a->launcher->ctl_fd, POLLIN, 0}};
            int wait_ms;
            now = at_time_mono_s();
            if (!timed_out && now >= deadline) {
                kill(-pid, SIGKILL);
                kill(pid, SIGKILL);
                timed_out = 1;
            }
            if (!stopping && atomic_load(&a->stop) && current < 0) {
                kill(-pid, SIGKILL); /* between jobs: stop here */
                kill(pid, SIGKILL);
                stopping = 1;
            }
            wait_ms = timed_out ? 1000 : (int)((deadline - now) * 1000) + 1;
            if (wait_ms > 100) wait_ms = 100;
            if (poll(p, 2, wait_ms) < 0 && errno != EINTR) break;
            /* events first: all of a child's events are queued before its exit report */
            for (;;) {
                ssize_t got;
                at_wire_msg ev;
                int idx;
                struct pollfd q = {a->launcher->ev_fd, POLLIN, 0};
                if (poll(&q, 1, 0) != 1) break;
                got = recv(a->launcher->ev_fd, rxbuf, 256u << 10, MSG_DONTWAIT | MSG_TRUNC);
                if (got <= 0) break;
                if ((size_t)got > (256u << 10)) continue;
                if (at_wire_decode(NULL, rxbuf, (size_t)got, &ev, NULL, 0) != AT_OK ||
                    ev.type != AT_WIRE_T_SBX_EVENT) {
                    at_log_warn("agent: a malformed event from a sandboxed child was ignored");
                    at_wire_msg_fini(&ev);
                    continue;
                }
                idx = ev.u.event.index;
                now = at_time_mono_s();
                switch (ev.u.event.kind) {
                case AT_WIRE_SBX_READY:
                    at_log_debug("agent: child %d ready: %s", (int)pid, ev.u.event.note);
                    deadline = now + 10.0 + 0.1 * nb;
                    break;
                case AT_WIRE_SBX_START:
                    if (idx < 0 || idx >= nb || done[map[idx]]) break;
                    current = idx;
                    ref_phase = ev.u.event.note && strcmp(ev.u.event.note, "reference") == 0;
                    if (ref_phase || started == 0 || current != idx) started = now;
                    deadline = now +
                               jobs[map[idx]]->w.run.timeout_ms / 1000.0 * (ref_phase ? 4.0 : 1.0) +
                               (ref_phase ? 5.0 : 0.05);
                    break;
                case AT_WIRE_SBX_RESULT: {
                    at_wire_result *r = &ev.u.event.result;
                    if (idx < 0 || idx >= nb || done[map[idx]] ||
                        strcmp(r->id, jobs[map[idx]]->w.id) != 0)
                        break;
                    make_result(a, &jobs[map[idx]]->w, r->status, r->costs, r->n_costs, r->error,
                                current == idx ? now - started : 0);
                    done[map[idx]] = 1;
                    remaining--;
                    got_any = 1;
                    if (current == idx) {
                        current = -1;
                        started = 0;
                    }
                    deadline = now + 5.0 + max_cool_s; /* the next job's cool-down first */
                    break;
                }
                case AT_WIRE_SBX_REFOUT:
                    on_refout(a, &rx, &ev.u.event);
                    break;
                }
                at_wire_msg_fini(&ev);
            }
            if (p[1].revents & (POLLIN | POLLHUP)) {
                if (read_report(a->launcher, &rep, 1000) != 0) {
                    at_log_error("agent: lost the launcher");
                    kill(-pid, SIGKILL);
                    exited = 1;
                    wstatus = -1;
                    break;
                }
                if (rep.kind == AGT_REP_EXITED && rep.pid == pid) {
                    exited = 1;
                    wstatus = rep.status;
                }
            }
        }
        if (rx.e) refout_free(rx.e);
        /* drain what the child wrote just before dying */
        for (;;) {
            ssize_t got = recv(a->launcher->ev_fd, rxbuf, 256u << 10, MSG_DONTWAIT);
            at_wire_msg ev;
            int idx;
            if (got <= 0) break;
            if (at_wire_decode(NULL, rxbuf, (size_t)got, &ev, NULL, 0) != AT_OK) {
                at_wire_msg_fini(&ev);
                continue;
            }
            idx = ev.u.event.index;
            if (ev.type == AT_WIRE_T_SBX_EVENT && ev.u.event.kind == AT_WIRE_SBX_RESULT &&
                idx >= 0 && idx < nb && !done[map[idx]] &&
                strcmp(ev.u.event.result.id, jobs[map[idx]]->w.id) == 0) {
                at_wire_result *r = &ev.u.event.result;
                make_result(a, &jobs[map[idx]]->w, r->status, r->costs, r->n_costs, r->error, 0);
                done[map[idx]] = 1;
                remaining--;
                got_any = 1;
                if (current == idx) current = -1;
            }
            at_wire_msg_fini(&ev);
        }

        /* why the child ended, for the job it was running */
        if (current >= 0 && !done[map[current]]) {
            const at_wire_job *w = &jobs[map[current]]->w;
            char text[512];
            int status;
            if (timed_out) {
                status = ref_phase ? AT_MEASURE_UNKNOWN_ERROR : AT_MEASURE_RUN_TIMEOUT;
                snprintf(text, sizeof text, "%s ran longer than %s%d ms and was killed",
                         ref_phase ? "the task's reference kernel" : "the kernel",
                         ref_phase ? "4 x " : "", w->run.timeout_ms);
            } else if (wstatus != -1 && WIFSIGNALED(wstatus)) {
                status = ref_phase ? AT_MEASURE_UNKNOWN_ERROR : AT_MEASURE_RUNTIME_DEVICE;
                snprintf(text, sizeof text, "%s died of %s",
                         ref_phase ? "the task's reference "
                                     "kernel"
                                   : "the kernel",
                         agt__signal_text(WTERMSIG(wstatus)));
            } else {
                status = AT_MEASURE_RUNTIME_DEVICE;
                snprintf(text, sizeof text,
                         "the sandboxed child ended (status %d) while running "
                         "the kernel",
                         wstatus != -1 && WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1);
            }
            if (stopping && !timed_out) {
                pthread_mutex_lock(&a->mu);
                push_returned(a, w->id);
                pthread_mutex_unlock(&a->mu);
            } else {
                make_result(a, w, status, NULL, 0, text, at_time_mono_s() - started);
                if (ref_phase && n_bad_refs < n) {
                    memcpy(bad_refs[n_bad_refs], w->ref, AT_WIRE_REFID_BYTES);
                    memcpy(bad_refs[n_bad_refs] + AT_WIRE_REFID_BYTES, &w->seed, 8);
                    n_bad_refs++;
                }
            }
            done[map[current]] = 1;
            remaining--;
            got_any = 1;
        }
        if (!got_any && remaining > 0 && !stopping) {
            /* died before any job: the setup itself fails; do not loop */
            char text[256];
            if (timed_out)
                snprintf(text, sizeof text, "the sandboxed child did not finish its setup in time");
            else if (wstatus != -1 && WIFSIGNALED(wstatus))
                snprintf(text, sizeof text, "the sandboxed child died during its setup: %s",
                         agt__signal_text(WTERMSIG(wstatus)));
            else
                snprintf(text, sizeof text,
                         "the sandboxed child ended during its setup "
                         "(status %d)",
                         wstatus != -1 && WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1);
            for (int k = 0; k < nb; k++)
                if (!done[map[k]]) {
                    make_result(a, &jobs[map[k]]->w, AT_MEASURE_UNKNOWN_ERROR, NULL, 0, text, 0);
                    done[map[k]] = 1;
                    remaining--;
                }
        }
    }
out:
    for (int i = 0; done && i < n; i++)
        if (!done[i]) {
            pthread_mutex_lock(&a->mu);
            push_returned(a, jobs[i]->w.id);
            pthread_mutex_unlock(&a->mu);
        }
    at_buf_fini(&frame);
    at_free(done);
    at_free(map);
    at_free(bad_refs);
    at_free(rxbuf);
}

static void bench_batch(agt_agent *a, agt_job **jobs, int n)
{
    static const double cost = 1e-9;
    for (int i = 0; i < n; i++)
        make_result(a, &jobs[i]->w, AT_MEASURE_NO_ERROR, &cost, 1,
                    "benchmark mode: acknowledged, not run", 0);
}

static void *measurer_main(void *arg)
{
    agt_agent *a = arg;
    agt_job **batch = at_calloc((size_t)a->cfg.max_batch, sizeof *batch);
    if (batch == NULL) return NULL;
    for (;;) {
        int n = 0;
        pthread_mutex_lock(&a->mu);
        a->measurer_idle = 1;
        pthread_cond_broadcast(&a->cv_out);
        while (a->pending == NULL && !atomic_load(&a->stop))
            pthread_cond_wait(&a->cv_jobs, &a->mu);
        if (atomic_load(&a->stop)) {
            pthread_mutex_unlock(&a->mu);
            break;
        }
        a->measurer_idle = 0;
        while (a->pending && n < a->cfg.max_batch) {
            batch[n++] = a->pending;
            a->pending = a->pending->next;
            a->n_pending--;
        }
        if (a->pending == NULL) a->pending_tail = NULL;
        a->n_running = n;
        pthread_mutex_unlock(&a->mu);
        if (a->cfg.bench_ack)
            bench_batch(a, batch, n);
        else
            run_batch(a, batch, n);
        pthread_mutex_lock(&a->mu);
        a->n_running = 0;
        pthread_mutex_unlock(&a->mu);
        for (int i = 0; i < n; i++)
            job_free(batch[i]);
    }
    at_free(batch);
    pthread_mutex_lock(&a->mu);
    a->measurer_idle = 1;
    pthread_cond_broadcast(&a->cv_out);
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

/* ---- the network loop ------------------------------------------------------------------ */

static void on_work(agt_agent *a, const at_wire_agent_work *w)
{
    pthread_mutex_lock(&a->mu);
    for (int i = 0; i < w->n_refs; i++)
        ref_add(a, &w->refs[i]);
    for (int i = 0; i < w->n_cancel; i++) {
        agt_job **pp = &a->pending, *prev = NULL;
        while (*pp) {
            if (strcmp((*pp)->w.id, w->cancel[i]) == 0) {
                agt_job *j = *pp;
                *pp = j->next;
                if (a->pending_tail == j) a->pending_tail = prev;
                a->n_pending--;
                job_free(j);
                break;
            }
            prev = *pp;
            pp = &(*pp)->next;
        }
    }
    for (int i = 0; i < w->n_jobs; i++) {
        agt_job *j = at_calloc(1, sizeof *j);
        if (j == NULL) break;
        at_arena_init(&j->arena, w->jobs[i].art.obj_size + 1024);
        if (at_wire_job_copy(&j->arena, &j->w, &w->jobs[i]) != AT_OK) {
            job_free(j);
            break;
        }
        if (atomic_load(&a->stop)) {
            push_returned(a, j->w.id);
            job_free(j);
            continue;
        }
        if (a->pending_tail)
            a->pending_tail->next = j;
        else
            a->pending = j;
        a->pending_tail = j;
        a->n_pending++;
        a->stats.n_jobs++;
    }
    pthread_cond_signal(&a->cv_jobs);
    pthread_mutex_unlock(&a->mu);
}

/* --device cuda:N: the GPU (asked through the launcher) describes this device. */
static at_err use_gpu(agt_agent *a, char *errmsg, size_t n)
{
    int index;
    at_err e;
    if (agt_device_parse(a->cfg.device, &index) != 0 || index < 0) {
        snprintf(errmsg, n, "unknown device '%s' (expected cuda or cuda:N)", a->cfg.device);
        return AT_EINVAL;
    }
    if (a->launcher == NULL) {
        snprintf(errmsg, n, "a GPU agent needs the launcher (no --bench-ack)");
        return AT_EINVAL;
    }
    if ((e = agt__cuda_probe(a->launcher, index, &a->gpu, errmsg, n)) != AT_OK)
        return e;
    a->is_gpu = 1;
    snprintf(a->dev.arch, sizeof a->dev.arch, "sm_%d%d", a->gpu.cc_major, a->gpu.cc_minor);
    snprintf(a->dev.model, sizeof a->dev.model, "%.80s (%d MHz, memory %d MHz)", a->gpu.name,
             a->gpu.clock_khz / 1000, a->gpu.mem_clock_khz / 1000);
    snprintf(a->dev.triple, sizeof a->dev.triple, "nvptx64-nvidia-cuda");
    snprintf(a->dev.features, sizeof a->dev.features, "sm_%d%d,sms=%d,mem=%lldMiB,smem=%d",
             a->gpu.cc_major, a->gpu.cc_minor, a->gpu.n_sms, a->gpu.mem_bytes >> 20,
             a->gpu.max_shared);
    a->dev.n_cores = a->gpu.n_sms;
    snprintf(a->driver, sizeof a->driver, "CUDA driver %d.%d", a->gpu.driver / 1000,
             a->gpu.driver % 1000 / 10);
    {
        at_wire_device d = {a->dev.arch, a->dev.model, a->dev.os, a->driver, a->dev.n_cores};
        if (at_wire_fingerprint(&d, a->fingerprint) != AT_OK)
            snprintf(a->fingerprint, sizeof a->fingerprint, "unknown");
    }
    at_log_info("agent: GPU cuda:%d: %s, sm_%d%d, %d SMs, %s", index, a->dev.model,
                a->gpu.cc_major, a->gpu.cc_minor, a->gpu.n_sms, a->driver);
    return AT_OK;
}

static at_err do_register(agt_agent *a, char *err, size_t n)
{
    at_wire_msg req, rep;
    at_err e;
    at_wire_msg_init(&req, AT_WIRE_T_REGISTER);
    req.u.reg.device_key = a->key;
    req.u.reg.triple = a->dev.triple;
    req.u.reg.features = a->dev.features;
    req.u.reg.gpu = a->is_gpu ? a->gpu.name : "";
    req.u.reg.dev.arch = a->dev.arch;
    req.u.reg.dev.model = a->dev.model;
    req.u.reg.dev.os = a->dev.os;
    req.u.reg.dev.driver = a->driver;
    req.u.reg.dev.n_cores = a->dev.n_cores;
    req.u.reg.fingerprint = a->fingerprint;
    req.u.reg.sandbox.seccomp = a->launcher ? a->launcher->caps.seccomp && !a->cfg.no_seccomp : 0;
    req.u.reg.sandbox.rlimits = 1;
    req.u.reg.sandbox.guard = 1;
    req.u.reg.sandbox.note = a->launcher ? (a->cfg.no_seccomp ? "seccomp disabled by --no-seccomp"
                                                              : a->launcher->caps.note)
                                         : "benchmark mode: nothing runs";
    if (a->is_gpu) {
        req.u.reg.sandbox.seccomp = 0;
        req.u.reg.sandbox.note = "GPU: process isolation, timeouts, guard zones (no seccomp)";
    }
    req.u.reg.n_threads = a->cfg.n_threads;
    req.u.reg.max_batch = a->cfg.max_batch;
    req.u.reg.bench_ack = a->cfg.bench_ack;
    e = at_wire_client_call(a->client, &req, 5000, &rep, err, n);
    if (e == AT_OK && rep.type != AT_WIRE_T_REGISTERED) {
        snprintf(err, n, "registration refused: %s",
                 rep.type == AT_WIRE_T_ERROR ? rep.u.error.text : "unexpected answer");
        e = AT_EPROTO;
    }
    if (e == AT_OK)
        at_log_info("agent: registered as %s for key '%s' (%s, %s, %d cores, sandbox: %s)",
                    rep.u.registered.agent_id, a->key, a->dev.triple, a->dev.model, a->dev.n_cores,
                    req.u.reg.sandbox.seccomp ? "seccomp" : req.u.reg.sandbox.note);
    at_wire_msg_fini(&rep);
    return e;
}

at_err agt_run(agt_agent *a)
{
    int backoff_ms = 100, registered = 0, connected_once = 0, lost_logged = 0, gave_back = 0;
    double quiet_since = 0;
    char err[512], last_err[512] = "";
    at_wire_devstate st;

    if (pthread_create(&a->measurer, NULL, measurer_main, a) != 0) return AT_ENOMEM;
    a->measurer_started = 1;
    at_log_info("agent: serving key '%s' for the tracker at %s", a->key, a->url);
    for (;;) {
        at_wire_msg req, rep;
        at_wire_result *res = NULL;
        const char **ret = NULL;
        int n_res, n_ret, n_need, held, fresh, idle;
        uint8_t need[AT_WIRE_MAX_REFS][AT_WIRE_REFID_BYTES];
        at_err e;

        if (atomic_load(&a->stop)) {
            int quiet, finished, late;
            double now = at_time_mono_s();
            pthread_mutex_lock(&a->mu);
            if (!gave_back) { /* give back what has not started */
                while (a->pending) {
                    agt_job *j = a->pending;
                    a->pending = j->next;
                    push_returned(a, j->w.id);
                    job_free(j);
                }
                a->pending_tail = NULL;
                a->n_pending = 0;
                gave_back = 1;
                pthread_cond_broadcast(&a->cv_jobs);
            }
            quiet = a->measurer_idle && a->n_running == 0;
            if (quiet && quiet_since == 0) quiet_since = now;
            finished = quiet && a->n_out == 0 && a->n_returned == 0;
            late = quiet && now - quiet_since > 5.0;
            if (late && !finished)
                at_log_warn("agent: stopping with %d result(s) and %d returned job(s) not "
                            "delivered (no tracker)",
                            a->n_out, a->n_returned);
            pthread_mutex_unlock(&a->mu);
            if (finished || late) break;
        }

        e = at_wire_client_ensure(a->client, 2000, &fresh, err, sizeof err);
        if (e != AT_OK) {
            if (e == AT_EAUTH || e == AT_EVERSION || e == AT_EPROTO) {
                if (strcmp(err, last_err) != 0)
                    at_log_error("agent: %s%s",
                                 e == AT_EPROTO ? "refused a malformed answer "
                                                  "from the tracker: "
                                                : "",
                                 err);
                snprintf(last_err, sizeof last_err, "%s", err);
            } else if (connected_once && !lost_logged) {
                at_log_warn("agent: lost the tracker (%s); reconnecting", err);
                lost_logged = 1;
            }
            registered = 0;
            if (e != AT_ETIMEDOUT) {
                struct timespec ts = {backoff_ms / 1000, (long)(backoff_ms % 1000) * 1000000L};
                nanosleep(&ts, NULL);
            }
            backoff_ms =
                backoff_ms * 2 > a->cfg.reconnect_max_ms ? a->cfg.reconnect_max_ms : backoff_ms * 2;
            continue;
        }
        backoff_ms = 100;
        last_err[0] = 0;
        if (fresh) {
            registered = 0;
            pthread_mutex_lock(&a->mu);
            a->stats.n_sessions++;
            a->stats.registered = 0;
            pthread_mutex_unlock(&a->mu);
            if (connected_once) at_log_info("agent: connected to the tracker again");
            connected_once = 1;
            lost_logged = 0;
        }
        if (!registered) {
            if (do_register(a, err, sizeof err) != AT_OK) {
                at_log_warn("agent: %s", err);
                continue;
            }
            registered = 1;
            pthread_mutex_lock(&a->mu);
            a->stats.registered = 1;
            pthread_mutex_unlock(&a->mu);
        }

        /* one poll: heartbeat, results, returned jobs, missing references */
        at_wire_msg_init(&req, AT_WIRE_T_AGENT_POLL);
        devstate(a, &st);
        pthread_mutex_lock(&a->mu);
        n_res = a->n_out < POLL_RESULTS_MAX ? a->n_out : POLL_RESULTS_MAX;
        if (n_res > 0 && (res = at_arena_alloc(&req.arena, (size_t)n_res * sizeof *res)) != NULL)
            for (int i = 0; i < n_res; i++)
                at_wire_result_copy(&req.arena, &res[i], &a->outbox[i]->r);
        if (res == NULL) n_res = 0;
        n_ret = a->n_returned < AT_WIRE_MAX_JOBS ? a->n_returned : AT_WIRE_MAX_JOBS;
        if (n_ret > 0 && (ret = at_arena_alloc(&req.arena, (size_t)n_ret * sizeof *ret)) != NULL)
            for (int i = 0; i < n_ret; i++)
                ret[i] = at_arena_strdup(&req.arena, a->returned[i]);
        if (ret == NULL) n_ret = 0;
        n_need = a->n_need_refs;
        if (n_need > 0) memcpy(need, a->need_refs, (size_t)n_need * AT_WIRE_REFID_BYTES);
        held = a->n_pending + a->n_running;
        idle = held == 0 && n_res == 0 && n_ret == 0;
        req.u.apoll.n_held = held;
        req.u.apoll.n_free = atomic_load(&a->stop) ? 0 : AT_MAX(0, 2 * a->cfg.max_batch - held);
        pthread_mutex_unlock(&a->mu);
        req.u.apoll.state = st;
        req.u.apoll.results = res;
        req.u.apoll.n_results = n_res;
        req.u.apoll.returned = ret;
        req.u.apoll.n_returned = n_ret;
        req.u.apoll.need_refs = (const uint8_t(*)[AT_WIRE_REFID_BYTES])need;
        req.u.apoll.n_need_refs = n_need;
        e = at_wire_client_call(a->client, &req,
                                idle ? at_wire_client_welcome(a->client)->hold_ms + 5000 : 5000,
                                &rep, err, sizeof err);
        at_wire_msg_fini(&req);
        if (e != AT_OK) {
            if (!atomic_load(&a->stop)) /* stopping: agt_wake may have cut it short */
                at_log_info("agent: poll failed: %s", err);
            continue;
        }
        if (rep.type == AT_WIRE_T_ERROR) {
            at_log_warn("agent: the tracker refused a poll: %s", rep.u.error.text);
            at_wire_msg_fini(&rep);
            registered = 0;
            continue;
        }
        if (rep.type != AT_WIRE_T_AGENT_WORK) {
            at_wire_msg_fini(&rep);
            continue;
        }
        /* delivered: drop what the poll carried */
        pthread_mutex_lock(&a->mu);
        for (int i = 0; i < n_res; i++) {
            at_arena_fini(&a->outbox[i]->arena);
            at_free(a->outbox[i]);
        }
        if (n_res > 0)
            memmove(a->outbox, a->outbox + n_res, (size_t)(a->n_out - n_res) * sizeof *a->outbox);
        a->n_out -= n_res;
        a->stats.n_results += n_res;
        for (int i = 0; i < n_ret; i++)
            at_free(a->returned[i]);
        if (n_ret > 0)
            memmove(a->returned, a->returned + n_ret,
                    (size_t)(a->n_returned - n_ret) * sizeof(char *));
        a->n_returned -= n_ret;
        if (n_need > 0)
            memmove(a->need_refs, a->need_refs + n_need,
                    (size_t)(a->n_need_refs - n_need) * AT_WIRE_REFID_BYTES);
        a->n_need_refs -= n_need;
        pthread_mutex_unlock(&a->mu);
        on_work(a, &rep.u.work);
        at_wire_msg_fini(&rep);

        /* busy: wait for a result or the heartbeat period, whichever comes first (stopping
        ** with the measurer idle, nothing will come: the loop's top ends the run) */
        pthread_mutex_lock(&a->mu);
        if (((a->n_pending + a->n_running) > 0 ||
             (atomic_load(&a->stop) && !a->measurer_idle)) &&
            a->n_out == 0 && a->n_returned == 0) {
            struct timespec ts;
            int hb = at_wire_client_welcome(a->client)->heartbeat_ms;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += hb / 1000;
            ts.tv_nsec += (long)(hb % 1000) * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&a->cv_out, &a->mu, &ts);
        }
        pthread_mutex_unlock(&a->mu);
    }
    pthread_mutex_lock(&a->mu);
    pthread_cond_broadcast(&a->cv_jobs);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->measurer, NULL);
    a->measurer_started = 0;
    at_log_info("agent: stopped");
    return AT_OK;
}

void agt_stop(agt_agent *a)
{
    atomic_store(&a->stop, 1);
}

void agt_wake(agt_agent *a)
{
    if (a != NULL && atomic_load(&a->stop))
        at_wire_client_cancel(a->client);
}

void agt_get_stats(agt_agent *a, agt_stats *out)
{
    pthread_mutex_lock(&a->mu);
    *out = a->stats;
    pthread_mutex_unlock(&a->mu);
}

at_err agt_open(const agt_config *cfg, agt_agent **out, char *errmsg, size_t n)
{
    agt_agent *a;
    char host[64];
    at_err e;

    *out = NULL;
    if (cfg->tracker_url == NULL || cfg->device_key == NULL || cfg->device_key[0] == 0 ||
        strlen(cfg->device_key) > AT_WIRE_MAX_NAME) {
        snprintf(errmsg, n, "an agent needs a tracker address and a device key (1 to %d bytes)",
                 AT_WIRE_MAX_NAME);
        return AT_EINVAL;
    }
    if (cfg->keys == NULL || cfg->n_keys < 1 || cfg->n_keys > 2) {
        snprintf(errmsg, n, "an agent needs the fleet key");
        return AT_EINVAL;
    }
    if ((a = at_calloc(1, sizeof *a)) == NULL) return AT_ENOMEM;
    a->cfg = *cfg;
    memcpy(a->keys, cfg->keys, (size_t)cfg->n_keys * sizeof *a->keys);
    a->cfg.keys = a->keys;
    at_wire_url(cfg->tracker_url, a->url, sizeof a->url);
    snprintf(a->key, sizeof a->key, "%s", cfg->device_key);
    if (cfg->name && cfg->name[0])
        snprintf(a->name, sizeof a->name, "%s", cfg->name);
    else {
        if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "agent");
        host[sizeof host - 1] = 0;
        snprintf(a->name, sizeof a->name, "%s:%d", host, (int)getpid());
    }
    agt_device_read(&a->dev);
    {
        at_wire_device d = {a->dev.arch, a->dev.model, a->dev.os, "", a->dev.n_cores};
        if (at_wire_fingerprint(&d, a->fingerprint) != AT_OK)
            snprintf(a->fingerprint, sizeof a->fingerprint, "unknown");
    }
    if (a->cfg.n_threads <= 0) a->cfg.n_threads = a->dev.n_cores;
    if (a->cfg.n_threads > 1024) a->cfg.n_threads = 1024;
    if (a->cfg.max_batch <= 0) a->cfg.max_batch = 16;
    if (a->cfg.max_batch > 1024) a->cfg.max_batch = 1024;
    if (a->cfg.hot_c <= 0) a->cfg.hot_c = 85;
    if (a->cfg.loaded_per_core <= 0) a->cfg.loaded_per_core = 0.75;
    if (a->cfg.reconnect_max_ms <= 0) a->cfg.reconnect_max_ms = 5000;
    a->state_at = -1;
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv_jobs, NULL);
    pthread_cond_init(&a->cv_out, NULL);
    a->measurer_idle = 1;
    a->launcher = cfg->launcher;
    if (a->launcher == NULL && !cfg->bench_ack) {
        if ((e = agt_launcher_open(&a->launcher, errmsg, n)) != AT_OK) {
            agt_close(a);
            return e;
        }
        a->own_launcher = 1;
    }
    if (cfg->device && cfg->device[0] && strcmp(cfg->device, "cpu") != 0 &&
        (e = use_gpu(a, errmsg, n)) != AT_OK) {
        agt_close(a);
        return e;
    }
    if ((e = at_wire_client_open(&(at_wire_client_cfg){.url = a->url,
                                                       .role = AT_WIRE_ROLE_AGENT,
                                                       .name = a->name,
                                                       .keys = a->keys,
                                                       .n_keys = cfg->n_keys,
                                                       .reconnect_max_ms = a->cfg.reconnect_max_ms},
                                 &a->client, errmsg, n)) != AT_OK) {
        agt_close(a);
        return e;
    }
    *out = a;
    return AT_OK;
}

void agt_close(agt_agent *a)
{
    if (a == NULL) return;
    if (a->measurer_started) {
        agt_stop(a);
        pthread_mutex_lock(&a->mu);
        pthread_cond_broadcast(&a->cv_jobs);
        pthread_mutex_unlock(&a->mu);
        pthread_join(a->measurer, NULL);
    }
    at_wire_client_close(a->client);
    if (a->own_launcher) agt_launcher_close(a->launcher);
    while (a->pending) {
        agt_job *j = a->pending;
        a->pending = j->next;
        job_free(j);
    }
    for (int i = 0; i < a->n_out; i++) {
        at_arena_fini(&a->outbox[i]->arena);
        at_free(a->outbox[i]);
    }
    at_free(a->outbox);
    for (int i = 0; i < a->n_returned; i++)
        at_free(a->returned[i]);
    at_free(a->returned);
    for (int i = 0; i < REF_CACHE; i++)
        if (a->refs[i].used) at_arena_fini(&a->refs[i].arena);
    while (a->refouts) {
        refout_entry *e = a->refouts;
        a->refouts = e->next;
        refout_free(e);
    }
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv_jobs);
    pthread_cond_destroy(&a->cv_out);
    memset(a->keys, 0, sizeof a->keys);
    at_free(a);
}
