/* tracker/trk_core.c -- the tracker's state machine: sessions and the handshake, agents,
** tuners, queues, leases, results, cancels.  Runs on trk_run's thread only.
**
** Invariants (checked by tests/fleet/test_tracker.c):
**   - a job is QUEUED (in its flow's queue), LEASED (in one agent's held list) or DONE;
**   - pool->n_queued / n_inflight and flow->n_queued / n_inflight count exactly those;
**   - a DONE job stays in 'jobs' (without its artifact) until its tuner acknowledges its
**     result, so a resubmission of it is recognised and ignored;
**   - every job ends with exactly one result sent to its tuner (measured, an error code, or
**     DEVICE_LOST after 'max_attempts' lost leases), unless the tuner canceled it. */
#include <stdio.h>
#include <string.h>

#include "tracker/trk_int.h"

#define WORK_BYTES_MAX (8u << 20) /* artifact bytes in one AGENT_WORK */
#define RESULTS_MAX 512           /* results in one RESULTS */

static void refid_hex(const uint8_t id[AT_WIRE_REFID_BYTES], char out[2 * AT_WIRE_REFID_BYTES + 1])
{
    static const char hx[] = "0123456789abcdef";
    for (int i = 0; i < AT_WIRE_REFID_BYTES; i++) {
        out[2 * i] = hx[id[i] >> 4];
        out[2 * i + 1] = hx[id[i] & 15];
    }
    out[2 * AT_WIRE_REFID_BYTES] = 0;
}

static void stat_add(trk_tracker *t, int64_t *field, int64_t v)
{
    pthread_mutex_lock(&t->smu);
    *field += v;
    pthread_mutex_unlock(&t->smu);
}

/* ---- replies ------------------------------------------------------------------------ */

/* An ERROR reply: signed when the session can sign, else plain.  'close_pipe' drops the
** connection shortly after (refused handshakes, broken sessions). */
static void refuse(trk_tracker *t, trk_ctx *ctx, trk_sess *s, uint64_t re, int code,
                   const char *text, int close_pipe)
{
    at_wire_msg e;
    at_wire_msg_init(&e, AT_WIRE_T_ERROR);
    e.re = re;
    e.u.error.code = code;
    e.u.error.text = text;
    trk__reply(t, ctx, (s && s->ws.keyed && s->stage != TRK_SESS_NEW) ? &s->ws : NULL, &e);
    if (close_pipe && s) s->close_at = t->now + 0.2;
}

/* ---- pools, flows, references ------------------------------------------------------- */

static trk_pool *pool_get(trk_tracker *t, const char *key, int create)
{
    trk_pool *p = trk__map_get(&t->pools_by_key, key);
    if (p || !create) return p;
    if ((p = at_calloc(1, sizeof *p)) == NULL || (p->key = at_strdup(key)) == NULL) {
        at_free(p);
        return NULL;
    }
    trk__list_init(&p->agents);
    trk__list_init(&p->flows);
    if (trk__map_put(&t->pools_by_key, p->key, p) != AT_OK) {
        at_free(p->key);
        at_free(p);
        return NULL;
    }
    trk__list_push_back(&t->pools, &p->link);
    return p;
}

static trk_flow *flow_get(trk_client *c, trk_pool *p)
{
    trk_flow *f;
    for (trk_link *l = p->flows.next; l != &p->flows; l = l->next) {
        f = TRK_OF(l, trk_flow, link);
        if (f->client == c) return f;
    }
    if ((f = at_calloc(1, sizeof *f)) == NULL) return NULL;
    f->client = c;
    f->pool = p;
    f->priority = 1;
    trk__list_init(&f->queue);
    trk__list_push_back(&p->flows, &f->link);
    return f;
}

#define IDLE_REFS_MAX 256
#define IDLE_REF_BYTES_MAX ((size_t)256 << 20)

/* A reference no job uses waits (most recent last) for the task's next batch, so tuners
** need not send it again; the oldest go when there are too many. */
static void ref_release(trk_tracker *t, trk_ref *r)
{
    if (r == NULL || --r->refcount > 0) return;
    trk__list_push_back(&t->idle_refs, &r->idle);
    t->n_idle_refs++;
    t->idle_ref_bytes += r->w.art.obj_size;
    while (t->n_idle_refs > IDLE_REFS_MAX || t->idle_ref_bytes > IDLE_REF_BYTES_MAX) {
        trk_ref *old = TRK_OF(t->idle_refs.next, trk_ref, idle);
        trk__list_remove(&old->idle);
        t->n_idle_refs--;
        t->idle_ref_bytes -= old->w.art.obj_size;
        trk__map_del(&t->refs, old->hex);
        at_arena_fini(&old->arena);
        at_free(old);
    }
}

static void ref_take(trk_tracker *t, trk_ref *r)
{
    if (r->refcount++ == 0 && r->idle.next != NULL) {
        trk__list_remove(&r->idle);
        t->n_idle_refs--;
        t->idle_ref_bytes -= r->w.art.obj_size;
    }
}

/* ---- jobs --------------------------------------------------------------------------- */

static void job_free(trk_tracker *t, trk_job *j)
{
    trk__map_del(&t->jobs, j->id);
    at_arena_fini(&j->arena);
    ref_release(t, j->ref);
    at_free(j->id);
    at_free(j);
}

/* Take 'j' out of its queue or its agent, fixing every count. */
static void job_detach(trk_job *j)
{
    trk_flow *f = j->flow;
    if (j->state == TRK_JOB_QUEUED) {
        trk__list_remove(&j->link);
        f->n_queued--;
        f->pool->n_queued--;
    } else if (j->state == TRK_JOB_LEASED) {
        trk__list_remove(&j->link);
        f->n_inflight--;
        f->pool->n_inflight--;
        if (j->agent) j->agent->n_held--;
        j->agent = NULL;
    }
}

static void client_wake(trk_tracker *t, trk_client *c);

/* The job is over: its result goes to its tuner's outbox (unless canceled). */
static void job_finish(trk_tracker *t, trk_job *j, const at_wire_result *r, trk_agent *a)
{
    trk_client *c = j->flow->client;
    trk_result *res;

    job_detach(j);
    j->state = TRK_JOB_DONE;
    c->n_jobs--;
    at_arena_fini(&j->arena);
    at_arena_init(&j->arena, 256);
    ref_release(t, j->ref);
    j->ref = NULL;
    if (j->canceled) {
        job_free(t, j);
        return;
    }
    if (c->n_out == c->cap_out) {
        int cap = c->cap_out ? 2 * c->cap_out : 64;
        trk_result **v = at_realloc(c->outbox, (size_t)cap * sizeof *v);
        if (v == NULL) {
            at_log_error("tracker: out of memory: the result of job %s is lost (its tuner "
                         "will resubmit it)",
                         j->id);
            job_free(t, j);
            return;
        }
        c->outbox = v;
        c->cap_out = cap;
    }
    if ((res = at_calloc(1, sizeof *res)) == NULL) {
        job_free(t, j);
        return;
    }
    at_arena_init(&res->arena, 1024);
    if (at_wire_result_copy(&res->arena, &res->r, r) != AT_OK) {
        at_arena_fini(&res->arena);
        at_free(res);
        job_free(t, j);
        return;
    }
    if (a) { /* what the tuner stores: who measured it, on what hardware */
        res->r.agent = a->id;
        res->r.fingerprint = a->reg.fingerprint;
        res->r.dev = a->reg.dev;
        /* 'a' may go away before the tuner reads this: copy its strings */
        at_wire_result_copy(&res->arena, &res->r, &res->r);
    }
    c->outbox[c->n_out++] = res;
    c->n_results++;
    trk__count_result(t, 1, 0);
    stat_add(t, &t->stats.n_results, 1);
    client_wake(t, c);
}

/* A lease was lost (agent gone or silent): back to the front of the queue, or DEVICE_LOST
** after too many attempts. */
static void job_requeue(trk_tracker *t, trk_job *j, const char *agent_id, int count_attempt)
{
    job_detach(j);
    if (j->canceled) {
        j->state = TRK_JOB_DONE;
        j->flow->client->n_jobs--;
        job_free(t, j);
        return;
    }
    if (count_attempt && ++j->attempts >= t->cfg.max_attempts) {
        at_wire_result r;
        char text[256];
        memset(&r, 0, sizeof r);
        snprintf(text, sizeof text,
                 "lost %d times: the agents running it (last: %s) stopped "
                 "answering",
                 j->attempts, agent_id);
        r.id = j->id;
        r.status = AT_MEASURE_DEVICE_LOST;
        r.error = text;
        r.measured_at = at_time_wall_s();
        r.state.cpu_mhz = r.state.cpu_max_mhz = r.state.temp_c = r.state.load1 = -1;
        r.agent = agent_id;
        r.dev.arch = r.dev.model = r.dev.os = r.dev.driver = "";
        j->state = TRK_JOB_QUEUED; /* job_finish detaches nothing more */
        trk__list_push_front(&j->flow->queue, &j->link);
        j->flow->n_queued++;
        j->flow->pool->n_queued++;
        at_log_warn("tracker: job %s %s", j->id, text);
        stat_add(t, &t->stats.n_lost, 1);
        job_finish(t, j, &r, NULL);
        return;
    }
    j->state = TRK_JOB_QUEUED;
    trk__list_push_front(&j->flow->queue, &j->link);
    j->flow->n_queued++;
    j->flow->pool->n_queued++;
    if (count_attempt) stat_add(t, &t->stats.n_requeued, 1);
}

/* The next job of 'p' by priority, then fewest in flight, then least recently served. */
static trk_job *pick_job(trk_tracker *t, trk_pool *p)
{
    trk_flow *best = NULL;
    trk_job *j;
    for (trk_link *l = p->flows.next; l != &p->flows; l = l->next) {
        trk_flow *f = TRK_OF(l, trk_flow, link);
        if (f->n_queued == 0) continue;
        if (best == NULL || f->priority > best->priority ||
            (f->priority == best->priority &&
             (f->n_inflight < best->n_inflight ||
              (f->n_inflight == best->n_inflight && f->last_served < best->last_served))))
            best = f;
    }
    if (best == NULL) return NULL;
    j = TRK_OF(best->queue.next, trk_job, link);
    best->last_served = ++t->serve_clock;
    return j;
}

static void lease(trk_tracker *t, trk_job *j, trk_agent *a)
{
    job_detach(j);
    j->state = TRK_JOB_LEASED;
    j->agent = a;
    j->leased_at = t->now;
    trk__list_push_back(&a->held, &j->link);
    a->n_held++;
    j->flow->n_inflight++;
    j->flow->pool->n_inflight++;
}

/* ---- agents ------------------------------------------------------------------------- */

static void add_cancel(trk_agent *a, const char *id)
{
    char *c;
    if (a->n_cancels == a->cap_cancels) {
        int cap = a->cap_cancels ? 2 * a->cap_cancels : 16;
        char **v = at_realloc(a->cancels, (size_t)cap * sizeof *v);
        if (v == NULL) return;
        a->cancels = v;
        a->cap_cancels = cap;
    }
    if ((c = at_strdup(id)) != NULL) a->cancels[a->n_cancels++] = c;
}

/* Answer an agent's poll with up to 'want' jobs, the references it lacks, and cancels. */
static void agent_reply(trk_tracker *t, trk_agent *a, trk_ctx *ctx, uint64_t re, int want)
{
    at_wire_msg m;
    at_wire_job *jobs = NULL;
    at_wire_ref *refs = NULL;
    int n_jobs = 0, n_refs = 0;
    size_t bytes = 0;
    trk_job *j;

    at_wire_msg_init(&m, AT_WIRE_T_AGENT_WORK);
    m.re = re;
    if (want > AT_WIRE_MAX_JOBS) want = AT_WIRE_MAX_JOBS;
    if (want > 0 && a->pool->n_queued > 0) {
        jobs = at_arena_alloc(&m.arena, (size_t)want * sizeof *jobs);
        refs = at_arena_alloc(&m.arena, AT_WIRE_MAX_REFS * sizeof *refs);
        while (jobs && refs && n_jobs < want && bytes < WORK_BYTES_MAX &&
               (j = pick_job(t, a->pool)) != NULL) {
            if (j->ref && trk__map_get(&a->refs_sent, j->ref->hex) == NULL) {
                int have = 0;
                for (int i = 0; i < n_refs; i++)
                    have |= memcmp(refs[i].id, j->ref->w.id, AT_WIRE_REFID_BYTES) == 0;
                if (!have) {
                    if (n_refs == AT_WIRE_MAX_REFS) break;
                    refs[n_refs++] = j->ref->w;
                    bytes += j->ref->w.art.obj_size;
                }
            }
            lease(t, j, a);
            jobs[n_jobs++] = j->w;
            bytes += j->w.art.obj_size;
        }
        for (int i = 0; i < n_refs; i++) {
            char hex[2 * AT_WIRE_REFID_BYTES + 1];
            trk_ref *r;
            refid_hex(refs[i].id, hex);
            /* the key is the agent's own copy: the reference may be freed before the agent */
            if ((r = trk__map_get(&t->refs, hex)) != NULL &&
                trk__map_get(&a->refs_sent, hex) == NULL) {
                char *k = at_arena_strdup(&a->arena, hex);
                if (k) trk__map_put(&a->refs_sent, k, a);
            }
        }
    }
    m.u.work.jobs = jobs;
    m.u.work.n_jobs = n_jobs;
    m.u.work.refs = refs;
    m.u.work.n_refs = n_refs;
    m.u.work.cancel = (const char **)a->cancels;
    m.u.work.n_cancel = a->n_cancels;
    trk__reply(t, ctx, &a->sess->ws, &m);
    for (int i = 0; i < a->n_cancels; i++)
        at_free(a->cancels[i]);
    a->n_cancels = 0;
    at_wire_msg_fini(&m);
    if (n_jobs) {
        stat_add(t, &t->stats.n_dispatched, n_jobs);
        trk__count_result(t, n_jobs, 1);
    }
}

/* Give queued jobs of 'p' to its parked (idle) agents, longest idle first. */
static void dispatch(trk_tracker *t, trk_pool *p)
{
    for (trk_link *l = p->agents.next; l != &p->agents && p->n_queued > 0; l = l->next) {
        trk_agent *a = TRK_OF(l, trk_agent, link);
        if (a->parked && a->want > 0) {
            trk_ctx *ctx = a->parked;
            a->parked = NULL;
            agent_reply(t, a, ctx, a->parked_seq, a->want);
        }
    }
}

static void agent_free(trk_tracker *t, trk_agent *a, const char *why)
{
    trk_pool *p = a->pool;
    int n = a->n_held;
    while (!trk__list_empty(&a->held)) {
        trk_job *j = TRK_OF(a->held.next, trk_job, link);
        job_requeue(t, j, a->id, 1);
    }
    if (n > 0)
        at_log_warn("tracker: agent %s (%s) %s: its %d job(s) go back to the queue", a->id, p->key,
                    why, n);
    else
        at_log_info("tracker: agent %s (%s) %s", a->id, p->key, why);
    if (a->parked) { /* nobody reads the answer, but the context must be freed */
        at_wire_msg m;
        at_wire_msg_init(&m, AT_WIRE_T_AGENT_WORK);
        m.re = a->parked_seq;
        trk__reply(t, a->parked, &a->sess->ws, &m);
        a->parked = NULL;
    }
    trk__list_remove(&a->link);
    p->n_agents--;
    a->sess->agent = NULL;
    for (int i = 0; i < a->n_cancels; i++)
        at_free(a->cancels[i]);
    at_free(a->cancels);
    trk__map_fini(&a->refs_sent);
    at_arena_fini(&a->arena);
    at_free(a);
    if (n > 0) dispatch(t, p);
}

static void on_register(trk_tracker *t, trk_sess *s, trk_ctx *ctx, const at_wire_msg *m)
{
    trk_agent *a;
    trk_pool *p;
    at_wire_msg r;
    char fp[17];

    if (s->agent) agent_free(t, s->agent, "registered again");
    if ((p = pool_get(t, m->u.reg.device_key, 1)) == NULL ||
        (a = at_calloc(1, sizeof *a)) == NULL) {
        refuse(t, ctx, s, m->seq, AT_ENOMEM, "the tracker is out of memory", 0);
        return;
    }
    at_arena_init(&a->arena, 1024);
    a->reg = m->u.reg;
    if (at_arena_strdup(&a->arena, "") == NULL ||
        at_wire_device_copy(&a->arena, &a->reg.dev, &m->u.reg.dev) != AT_OK) {
        at_arena_fini(&a->arena);
        at_free(a);
        refuse(t, ctx, s, m->seq, AT_ENOMEM, "the tracker is out of memory", 0);
        return;
    }
    a->reg.device_key = at_arena_strdup(&a->arena, m->u.reg.device_key);
    a->reg.triple = at_arena_strdup(&a->arena, m->u.reg.triple);
    a->reg.features = at_arena_strdup(&a->arena, m->u.reg.features);
    a->reg.gpu = at_arena_strdup(&a->arena, m->u.reg.gpu);
    a->reg.sandbox.note = at_arena_strdup(&a->arena, m->u.reg.sandbox.note);
    if (at_wire_fingerprint(&a->reg.dev, fp) != AT_OK) snprintf(fp, sizeof fp, "unknown");
    a->reg.fingerprint = at_arena_strdup(&a->arena, fp);
    if (!a->reg.device_key || !a->reg.triple || !a->reg.features || !a->reg.gpu ||
        !a->reg.sandbox.note || !a->reg.fingerprint) {
        at_arena_fini(&a->arena);
        at_free(a);
        refuse(t, ctx, s, m->seq, AT_ENOMEM, "the tracker is out of memory", 0);
        return;
    }
    snprintf(a->id, sizeof a->id, "%s#%d", s->name[0] ? s->name : "agent", ++t->agent_counter);
    a->sess = s;
    a->pool = p;
    trk__list_init(&a->held);
    trk__map_init(&a->refs_sent);
    a->last_seen = a->registered_at = t->now;
    a->state.cpu_mhz = a->state.cpu_max_mhz = a->state.temp_c = a->state.load1 = -1;
    trk__list_push_back(&p->agents, &a->link);
    p->n_agents++;
    s->agent = a;
    at_log_info("tracker: agent %s registered for key '%s' from %s: %s, %s, %d cores, "
                "fingerprint %s, sandbox: %s%s%s%s",
                a->id, p->key, s->peer, a->reg.triple, a->reg.dev.model, a->reg.dev.n_cores, fp,
                a->reg.sandbox.seccomp ? "seccomp " : "", a->reg.sandbox.rlimits ? "rlimits " : "",
                a->reg.sandbox.guard ? "guard-pages " : "",
                a->reg.bench_ack ? "(benchmark mode: jobs are acknowledged, not run)" : "timeouts");
    at_wire_msg_init(&r, AT_WIRE_T_REGISTERED);
    r.re = m->seq;
    r.u.registered.agent_id = a->id;
    trk__reply(t, ctx, &s->ws, &r);
}

static void on_agent_result(trk_tracker *t, trk_agent *a, const at_wire_result *r)
{
    trk_job *j = trk__map_get(&t->jobs, r->id);
    if (j == NULL || j->state == TRK_JOB_DONE) {
        at_log_debug("tracker: result for job %s from %s: no such job in flight, dropped", r->id,
                     a->id);
        return;
    }
    if (j->state == TRK_JOB_LEASED && j->agent != a) {
        at_log_info("tracker: job %s was leased to %s but %s answered first", j->id, j->agent->id,
                    a->id);
        add_cancel(j->agent, j->id);
    }
    if (r->status == AT_MEASURE_NO_ERROR)
        a->n_done++;
    else
        a->n_failed++;
    job_finish(t, j, r, a);
}

static void on_agent_poll(trk_tracker *t, trk_sess *s, trk_ctx *ctx, const at_wire_msg *m)
{
    trk_agent *a = s->agent;
    const at_wire_agent_poll *p = &m->u.apoll;

    if (a == NULL) {
        refuse(t, ctx, s, m->seq, AT_EPROTO, "AGENT_POLL before REGISTER", 0);
        return;
    }
    if (a->parked) { /* cannot happen with one request at a time; stay safe */
        trk_ctx *old = a->parked;
        a->parked = NULL;
        agent_reply(t, a, old, a->parked_seq, 0);
    }
    a->last_seen = t->now;
    a->state = p->state;
    for (int i = 0; i < p->n_results; i++)
        on_agent_result(t, a, &p->results[i]);
    for (int i = 0; i < p->n_need_refs; i++) {
        char hex[2 * AT_WIRE_REFID_BYTES + 1];
        refid_hex(p->need_refs[i], hex);
        trk__map_del(&a->refs_sent, hex);
    }
    for (int i = 0; i < p->n_returned; i++) {
        trk_job *j = trk__map_get(&t->jobs, p->returned[i]);
        if (j && j->state == TRK_JOB_LEASED && j->agent == a) job_requeue(t, j, a->id, 0);
    }
    if (p->n_returned > 0)
        at_log_info("tracker: agent %s gave back %d job(s)%s", a->id, p->n_returned,
                    p->n_need_refs ? " (it lacks their reference: sending it again)" : "");
    a->want = p->n_free;
    if (p->n_returned > 0) dispatch(t, a->pool);
    if ((a->want > 0 && a->pool->n_queued > 0) || a->n_cancels > 0 || a->n_held > 0 ||
        p->n_held > 0 || p->n_results > 0 || a->want == 0) {
        agent_reply(t, a, ctx, m->seq, a->want);
        return;
    }
    /* idle and nothing to do: hold the poll until work arrives or the hold ends; the agent
    ** moves to the back of the idle order */
    a->parked = ctx;
    a->parked_seq = m->seq;
    a->park_until = t->now + t->cfg.hold_ms / 1000.0;
    trk__list_remove(&a->link);
    trk__list_push_back(&a->pool->agents, &a->link);
}

/* ---- tuners ------------------------------------------------------------------------- */

static trk_client *client_attach(trk_tracker *t, trk_sess *s)
{
    trk_client *c = trk__map_get(&t->clients, s->client_id);
    if (c) {
        if (c->sess && c->sess != s) c->sess->client = NULL;
        c->sess = s;
        c->gone_since = 0;
        snprintf(c->name, sizeof c->name, "%s", s->name);
        if (c->parked) { /* a poll held on the old connection: nobody reads it */
            at_wire_msg m;
            at_wire_msg_init(&m, AT_WIRE_T_RESULTS);
            trk__reply(t, c->parked, NULL, &m);
            c->parked = NULL;
        }
        s->client = c;
        return c;
    }
    if ((c = at_calloc(1, sizeof *c)) == NULL || (c->id = at_strdup(s->client_id)) == NULL) {
        at_free(c);
        return NULL;
    }
    if (trk__map_put(&t->clients, c->id, c) != AT_OK) {
        at_free(c->id);
        at_free(c);
        return NULL;
    }
    snprintf(c->name, sizeof c->name, "%s", s->name);
    c->sess = s;
    trk__list_push_back(&t->clients_list, &c->link);
    s->client = c;
    return c;
}

static void client_counts(trk_tracker *t, trk_client *c, int *queued, int *inflight, int *agents)
{
    *queued = *inflight = *agents = 0;
    for (trk_link *l = t->pools.next; l != &t->pools; l = l->next) {
        trk_pool *p = TRK_OF(l, trk_pool, link);
        for (trk_link *k = p->flows.next; k != &p->flows; k = k->next) {
            trk_flow *f = TRK_OF(k, trk_flow, link);
            if (f->client == c) {
                *queued += f->n_queued;
                *inflight += f->n_inflight;
                *agents += p->n_agents;
            }
        }
    }
}

static void results_reply(trk_tracker *t, trk_client *c, trk_ctx *ctx, uint64_t re)
{
    at_wire_msg m;
    at_wire_result *v = NULL;
    int n = c->n_out < RESULTS_MAX ? c->n_out : RESULTS_MAX;

    at_wire_msg_init(&m, AT_WIRE_T_RESULTS);
    m.re = re;
    if (n > 0 && (v = at_arena_alloc(&m.arena, (size_t)n * sizeof *v)) != NULL)
        for (int i = 0; i < n; i++)
            v[i] = c->outbox[i]->r;
    m.u.results.first = c->first_num;
    m.u.results.results = v;
    m.u.results.n_results = v ? n : 0;
    client_counts(t, c, &m.u.results.n_queued, &m.u.results.n_inflight, &m.u.results.n_agents);
    trk__reply(t, ctx, c->sess ? &c->sess->ws : NULL, &m);
    at_wire_msg_fini(&m);
}

static void client_wake(trk_tracker *t, trk_client *c)
{
    if (c->parked && c->sess) {
        trk_ctx *ctx = c->parked;
        c->parked = NULL;
        results_reply(t, c, ctx, c->parked_seq);
    }
}

/* Results below 'ack' were received: free them and forget their jobs. */
static void client_ack(trk_tracker *t, trk_client *c, uint64_t ack)
{
    int k = 0;
    while (k < c->n_out && c->first_num + (uint64_t)k < ack) {
        trk_result *r = c->outbox[k];
        trk_job *j = trk__map_get(&t->jobs, r->r.id);
        if (j && j->state == TRK_JOB_DONE && j->flow->client == c) job_free(t, j);
        at_arena_fini(&r->arena);
        at_free(r);
        k++;
    }
    if (k > 0) {
        memmove(c->outbox, c->outbox + k, (size_t)(c->n_out - k) * sizeof *c->outbox);
        c->n_out -= k;
        c->first_num += (uint64_t)k;
    }
}

static void fill_keys(trk_tracker *t, at_wire_msg *m)
{
    int n = 0;
    at_wire_keyinfo *v;
    for (trk_link *l = t->pools.next; l != &t->pools; l = l->next)
        n++;
    if (n == 0 || (v = at_arena_alloc(&m->arena, (size_t)n * sizeof *v)) == NULL) return;
    n = 0;
    for (trk_link *l = t->pools.next; l != &t->pools && n < AT_WIRE_MAX_JOBS; l = l->next) {
        trk_pool *p = TRK_OF(l, trk_pool, link);
        int idle = 0;
        if (p->n_agents == 0 && p->n_queued == 0 && p->n_inflight == 0) continue;
        for (trk_link *k = p->agents.next; k != &p->agents; k = k->next)
            idle += TRK_OF(k, trk_agent, link)->n_held == 0;
        v[n].key = p->key;
        v[n].n_agents = p->n_agents;
        v[n].n_idle = idle;
        v[n].n_queued = p->n_queued;
        n++;
    }
    m->u.submitted.keys = v;
    m->u.submitted.n_keys = n;
}

static void on_submit(trk_tracker *t, trk_sess *s, trk_ctx *ctx, const at_wire_msg *m)
{
    const at_wire_submit *sub = &m->u.submit;
    trk_client *c = s->client;
    trk_pool *p;
    trk_flow *f;
    at_wire_msg r;
    int n_new = 0, n_known = 0, n_created = 0;
    trk_ref *created[AT_WIRE_MAX_REFS];
    char hex[2 * AT_WIRE_REFID_BYTES + 1], text[512];

    /* every job's reference must be in this message or already known */
    for (int i = 0; i < sub->n_jobs; i++) {
        int found = 0;
        if (!sub->jobs[i].has_ref) continue;
        for (int k = 0; k < sub->n_refs && !found; k++)
            found = memcmp(sub->refs[k].id, sub->jobs[i].ref, AT_WIRE_REFID_BYTES) == 0;
        refid_hex(sub->jobs[i].ref, hex);
        if (!found && trk__map_get(&t->refs, hex) == NULL) {
            snprintf(text, sizeof text,
                     "job %s refers to reference %.16s..., which this "
                     "tracker does not hold: send it",
                     sub->jobs[i].id, hex);
            refuse(t, ctx, s, m->seq, AT_ENOTFOUND, text, 0);
            return;
        }
    }
    if ((p = pool_get(t, sub->device_key, 1)) == NULL || (f = flow_get(c, p)) == NULL) {
        refuse(t, ctx, s, m->seq, AT_ENOMEM, "the tracker is out of memory", 0);
        return;
    }
    f->priority = sub->priority;
    for (int i = 0; i < sub->n_refs; i++) {
        trk_ref *ref;
        refid_hex(sub->refs[i].id, hex);
        if (trk__map_get(&t->refs, hex) != NULL) continue;
        if ((ref = at_calloc(1, sizeof *ref)) == NULL) break;
        memcpy(ref->hex, hex, sizeof hex);
        at_arena_init(&ref->arena, 0);
        if (at_wire_ref_copy(&ref->arena, &ref->w, &sub->refs[i]) != AT_OK ||
            trk__map_put(&t->refs, ref->hex, ref) != AT_OK) {
            at_arena_fini(&ref->arena);
            at_free(ref);
            break;
        }
        created[n_created++] = ref; /* its jobs below take their counts */
    }
    for (int i = 0; i < sub->n_jobs; i++) {
        const at_wire_job *w = &sub->jobs[i];
        trk_job *j = trk__map_get(&t->jobs, w->id);
        if (j) {
            if (j->flow->client != c)
                at_log_warn("tracker: job id %s submitted by two tuners (%s and %s): the second "
                            "is ignored",
                            w->id, j->flow->client->name, c->name);
            n_known++;
            continue;
        }
        if ((j = at_calloc(1, sizeof *j)) == NULL || (j->id = at_strdup(w->id)) == NULL) {
            at_free(j);
            break;
        }
        at_arena_init(&j->arena, w->art.obj_size + 1024);
        if (at_wire_job_copy(&j->arena, &j->w, w) != AT_OK ||
            trk__map_put(&t->jobs, j->id, j) != AT_OK) {
            at_arena_fini(&j->arena);
            at_free(j->id);
            at_free(j);
            break;
        }
        if (w->has_ref) {
            refid_hex(w->ref, hex);
            if ((j->ref = trk__map_get(&t->refs, hex)) != NULL) ref_take(t, j->ref);
        }
        j->flow = f;
        j->state = TRK_JOB_QUEUED;
        j->queued_at = t->now;
        trk__list_push_back(&f->queue, &j->link);
        f->n_queued++;
        p->n_queued++;
        c->n_jobs++;
        n_new++;
    }
    for (int i = 0; i < n_created; i++) /* a reference no job uses goes to the idle list */
        if (created[i]->refcount == 0) {
            created[i]->refcount = 1;
            ref_release(t, created[i]);
        }
    stat_add(t, &t->stats.n_submitted, n_new);
    if (p->n_agents == 0)
        at_log_info("tracker: tuner %s queued %d job(s) for key '%s', which no agent serves "
                    "yet",
                    c->name, n_new, p->key);
    else
        at_log_debug("tracker: tuner %s queued %d job(s) for key '%s' (%d known)", c->name, n_new,
                     p->key, n_known);
    at_wire_msg_init(&r, AT_WIRE_T_SUBMITTED);
    r.re = m->seq;
    r.u.submitted.n_accepted = n_new;
    r.u.submitted.n_known = n_known;
    r.u.submitted.n_agents = p->n_agents;
    fill_keys(t, &r);
    trk__reply(t, ctx, &s->ws, &r);
    at_wire_msg_fini(&r);
    dispatch(t, p);
}

static void on_tuner_poll(trk_tracker *t, trk_sess *s, trk_ctx *ctx, const at_wire_msg *m)
{
    trk_client *c = s->client;
    client_ack(t, c, m->u.tpoll.ack);
    if (c->parked) {
        trk_ctx *old = c->parked;
        c->parked = NULL;
        results_reply(t, c, old, c->parked_seq);
    }
    if (c->n_out > 0 || m->u.tpoll.hold_ms == 0) {
        results_reply(t, c, ctx, m->seq);
        return;
    }
    c->parked = ctx;
    c->parked_seq = m->seq;
    c->park_until = t->now + AT_MIN(m->u.tpoll.hold_ms, 10000) / 1000.0;
}

static int cancel_job(trk_tracker *t, trk_job *j)
{
    if (j->state == TRK_JOB_DONE || j->canceled) return 0;
    if (j->state == TRK_JOB_QUEUED) {
        job_detach(j);
        j->state = TRK_JOB_DONE;
        j->flow->client->n_jobs--;
        job_free(t, j);
    } else {
        j->canceled = 1;
        add_cancel(j->agent, j->id);
    }
    return 1;
}

static void on_cancel(trk_tracker *t, trk_sess *s, trk_ctx *ctx, const at_wire_msg *m)
{
    trk_client *c = s->client;
    at_wire_msg r;
    int n = 0;
    if (m->u.cancel.all) {
        for (trk_link *l = t->pools.next; l != &t->pools; l = l->next) {
            trk_pool *p = TRK_OF(l, trk_pool, link);
            for (trk_link *k = p->flows.next; k != &p->flows; k = k->next) {
                trk_flow *f = TRK_OF(k, trk_flow, link);
                if (f->client != c) continue;
                while (!trk__list_empty(&f->queue))
                    n += cancel_job(t, TRK_OF(f->queue.next, trk_job, link));
            }
            for (trk_link *k = p->agents.next; k != &p->agents; k = k->next) {
                trk_agent *a = TRK_OF(k, trk_agent, link);
                for (trk_link *h = a->held.next; h != &a->held; h = h->next) {
                    trk_job *j = TRK_OF(h, trk_job, link);
                    if (j->flow->client == c) n += cancel_job(t, j);
                }
            }
        }
    }
    for (int i = 0; i < m->u.cancel.n_ids; i++) {
        trk_job *j = trk__map_get(&t->jobs, m->u.cancel.ids[i]);
        if (j && j->flow->client == c) n += cancel_job(t, j);
    }
    at_wire_msg_init(&r, AT_WIRE_T_CANCELED);
    r.re = m->seq;
    r.u.canceled.n_canceled = n;
    trk__reply(t, ctx, &s->ws, &r);
}

/* Drop a tuner for good: its queued jobs, its leases (canceled on their agents), results. */
static void client_free(trk_tracker *t, trk_client *c)
{
    { /* done jobs waiting for their acknowledgement */
        size_t i = 0;
        trk_job *j, *v[256];
        int n;
        do {
            n = 0;
            i = 0;
            while ((j = trk__map_next(&t->jobs, &i)) != NULL && n < 256)
                if (j->state == TRK_JOB_DONE && j->flow->client == c) v[n++] = j;
            for (int k = 0; k < n; k++)
                job_free(t, v[k]);
        } while (n == 256);
    }
    for (trk_link *l = t->pools.next; l != &t->pools; l = l->next) {
        trk_pool *p = TRK_OF(l, trk_pool, link);
        for (trk_link *k = p->agents.next; k != &p->agents; k = k->next) {
            trk_agent *a = TRK_OF(k, trk_agent, link);
            for (trk_link *h = a->held.next; h != &a->held;) {
                trk_job *j = TRK_OF(h, trk_job, link);
                h = h->next;
                if (j->flow->client == c) {
                    add_cancel(a, j->id);
                    job_detach(j);
                    job_free(t, j);
                }
            }
        }
        for (trk_link *k = p->flows.next; k != &p->flows;) {
            trk_flow *f = TRK_OF(k, trk_flow, link);
            k = k->next;
            if (f->client != c) continue;
            while (!trk__list_empty(&f->queue)) {
                trk_job *j = TRK_OF(f->queue.next, trk_job, link);
                job_detach(j);
                job_free(t, j);
            }
            trk__list_remove(&f->link);
            at_free(f);
        }
    }
    for (int i = 0; i < c->n_out; i++) {
        at_arena_fini(&c->outbox[i]->arena);
        at_free(c->outbox[i]);
    }
    at_free(c->outbox);
    if (c->sess) c->sess->client = NULL;
    trk__map_del(&t->clients, c->id);
    trk__list_remove(&c->link);
    at_free(c->id);
    at_free(c);
}

/* ---- status ------------------------------------------------------------------------- */

at_err trk__status_build(trk_tracker *t, at_buf *b);

static void on_status(trk_tracker *t, trk_sess *s, trk_ctx *ctx, const at_wire_msg *m)
{
    at_buf b;
    at_wire_msg r;
    at_buf_init(&b);
    trk__status_build(t, &b);
    at_wire_msg_init(&r, AT_WIRE_T_STATUS);
    r.re = m->seq;
    r.u.status.json = b.err == AT_OK && b.data ? b.data : "{}";
    trk__reply(t, ctx, &s->ws, &r);
    at_buf_fini(&b);
}

/* ---- sessions and the handshake ----------------------------------------------------- */

static trk_sess *sess_get(trk_tracker *t, uint32_t pipe, const char *peer, int create)
{
    char key[16];
    trk_sess *s;
    snprintf(key, sizeof key, "%u", pipe);
    if ((s = trk__map_get(&t->sessions, key)) != NULL || !create) return s;
    if ((s = at_calloc(1, sizeof *s)) == NULL) return NULL;
    s->pipe = pipe;
    memcpy(s->pipe_key, key, sizeof key);
    at_wire_session_init(&s->ws, 0);
    s->opened_at = t->now;
    if (peer) {
        snprintf(s->peer, sizeof s->peer, "%s", peer);
    } else {
        nng_pipe p = NNG_PIPE_INITIALIZER;
        nng_sockaddr sa;
        p.id = pipe;
        snprintf(s->peer, sizeof s->peer, "pipe %u", pipe);
        if (nng_pipe_get_addr(p, NNG_OPT_REMADDR, &sa) == 0) {
            if (sa.s_family == NNG_AF_INET) {
                const uint8_t *a = (const uint8_t *)&sa.s_in.sa_addr;
                unsigned port = ((unsigned)((const uint8_t *)&sa.s_in.sa_port)[0] << 8) |
                                ((const uint8_t *)&sa.s_in.sa_port)[1];
                snprintf(s->peer, sizeof s->peer, "%u.%u.%u.%u:%u", a[0], a[1], a[2], a[3], port);
            } else if (sa.s_family == NNG_AF_INPROC) {
                snprintf(s->peer, sizeof s->peer, "inproc");
            }
        }
    }
    if (trk__map_put(&t->sessions, s->pipe_key, s) != AT_OK) {
        at_free(s);
        return NULL;
    }
    trk__list_push_back(&t->sessions_list, &s->link);
    return s;
}

static void sess_free(trk_tracker *t, trk_sess *s, const char *why)
{
    if (s->agent) agent_free(t, s->agent, why);
    if (s->client) {
        trk_client *c = s->client;
        if (c->parked) {
            at_wire_msg m;
            at_wire_msg_init(&m, AT_WIRE_T_RESULTS);
            m.re = c->parked_seq;
            trk__reply(t, c->parked, &s->ws, &m);
            c->parked = NULL;
        }
        c->sess = NULL;
        c->gone_since = t->now;
        at_log_info("tracker: tuner %s %s; its jobs wait %d ms for it to come back", c->name, why,
                    t->cfg.client_grace_ms);
    }
    trk__map_del(&t->sessions, s->pipe_key);
    trk__list_remove(&s->link);
    memset(&s->ws, 0, sizeof s->ws);
    at_free(s);
}

void trk__pipe_gone(trk_tracker *t, uint32_t pipe)
{
    trk_sess *s = sess_get(t, pipe, NULL, 0);
    if (s) sess_free(t, s, "disconnected");
}

static void on_hello(trk_tracker *t, trk_sess *s, trk_ctx *ctx, const at_wire_msg *m)
{
    const at_wire_hello *h = &m->u.hello;
    at_wire_msg r;
    char text[512];

    if (s->stage != TRK_SESS_NEW) { /* a new handshake on the same connection */
        if (s->agent) agent_free(t, s->agent, "opened a new session");
        s->client = NULL;
        s->stage = TRK_SESS_NEW;
        s->ws.keyed = s->ws.authed = 0;
    }
    s->key = NULL;
    for (int k = 0; k < t->n_keys && s->key == NULL; k++)
        for (int i = 0; i < h->n_keys; i++)
            if (memcmp(h->key_ids[i], t->keys[k].id, AT_WIRE_KEYID_BYTES) == 0)
                s->key = &t->keys[k];
    snprintf(s->name, sizeof s->name, "%s", h->name);
    snprintf(s->client_id, sizeof s->client_id, "%s", h->client_id);
    s->role = h->role;
    if (s->key == NULL) {
        char ids[64];
        at_wire_key_id_hex(&t->keys[0], ids);
        if (t->n_keys > 1) {
            strcat(ids, ", ");
            at_wire_key_id_hex(&t->keys[1], ids + strlen(ids));
        }
        snprintf(text, sizeof text,
                 "none of the keys of %s '%s' is a fleet key of this tracker "
                 "(key ids %s): check the key file",
                 at_wire_role_name(h->role), h->name, ids);
        at_log_warn("tracker: refused %s: %s", s->peer, text);
        stat_add(t, &t->stats.n_auth_failed, 1);
        refuse(t, ctx, s, m->seq, AT_EAUTH, text, 1);
        return;
    }
    memcpy(s->cnonce, h->nonce, AT_WIRE_NONCE_BYTES);
    if (at_wire_random(s->tnonce, sizeof s->tnonce) != AT_OK) {
        refuse(t, ctx, s, m->seq, AT_EIO, "the tracker has no randomness", 1);
        return;
    }
    at_wire_session_key(&s->ws, s->key, s->cnonce, s->tnonce);
    s->stage = TRK_SESS_CHALLENGED;
    at_wire_msg_init(&r, AT_WIRE_T_CHALLENGE);
    r.re = m->seq;
    r.u.challenge.version = AT_WIRE_VERSION;
    memcpy(r.u.challenge.nonce, s->tnonce, AT_WIRE_NONCE_BYTES);
    memcpy(r.u.challenge.key_id, s->key->id, AT_WIRE_KEYID_BYTES);
    trk__reply(t, ctx, &s->ws, &r);
}

static void on_auth(trk_tracker *t, trk_sess *s, trk_ctx *ctx, const at_wire_msg *m)
{
    at_wire_msg r;
    s->stage = TRK_SESS_AUTHED;
    s->ws.authed = 1;
    if (s->role == AT_WIRE_ROLE_TUNER && client_attach(t, s) == NULL) {
        refuse(t, ctx, s, m->seq, AT_ENOMEM, "the tracker is out of memory", 1);
        return;
    }
    at_log_info("tracker: %s '%s' authenticated from %s", at_wire_role_name(s->role), s->name,
                s->peer);
    trk__pipe_authed(t, s->pipe); /* before WELCOME: the peer's next frame may be large */
    at_wire_msg_init(&r, AT_WIRE_T_WELCOME);
    r.re = m->seq;
    r.u.welcome.tracker_id = t->id;
    r.u.welcome.lease_ms = t->cfg.lease_ms;
    r.u.welcome.heartbeat_ms = t->cfg.heartbeat_ms;
    r.u.welcome.hold_ms = t->cfg.hold_ms;
    trk__reply(t, ctx, &s->ws, &r);
}

void trk__handle(trk_tracker *t, trk_ctx *ctx, uint32_t pipe, const char *peer, const uint8_t *body,
                 size_t len)
{
    trk_sess *s = sess_get(t, pipe, peer, 1);
    at_wire_msg m;
    char err[512], text[768];
    at_err e;

    if (s == NULL) {
        at_wire_msg_init(&m, 0);
        refuse(t, ctx, NULL, 0, AT_ENOMEM, "the tracker is out of memory", 0);
        return;
    }
    e = at_wire_decode(&s->ws, body, len, &m, err, sizeof err);
    if (e != AT_OK) {
        stat_add(t, &t->stats.n_refused, 1);
        if (e == AT_EVERSION) {
            snprintf(text, sizeof text,
                     "the peer speaks protocol version %d; this tracker speaks "
                     "version %d: upgrade the older side",
                     m.version, AT_WIRE_VERSION);
            at_log_warn("tracker: refused %s: %s", s->peer, text);
            refuse(t, ctx, s, 0, AT_EVERSION, text, 1);
        } else if (s->stage == TRK_SESS_NEW && e == AT_EAUTH && m.type != AT_WIRE_T_HELLO &&
                   m.type != AT_WIRE_T_AUTH) {
            /* a request on a connection without a session: a client of a tracker that
            ** restarted, or a replayed frame */
            at_log_warn("tracker: refused %s from %s: no session on this connection (%s)",
                        at_wire_type_name(m.type), s->peer, err);
            refuse(t, ctx, s, 0, AT_ECLOSED, "no session on this connection: open one (HELLO)", 0);
        } else if (e == AT_EAUTH) {
            at_log_warn("tracker: refused a frame from %s (%s '%s'): %s; closing the connection",
                        s->peer, at_wire_role_name(s->role), s->name, err);
            if (s->stage != TRK_SESS_AUTHED) stat_add(t, &t->stats.n_auth_failed, 1);
            refuse(t, ctx, s, 0, AT_EAUTH, "authentication failed", 1);
        } else {
            at_log_warn("tracker: refused a malformed frame (%zu bytes) from %s: %s", len, s->peer,
                        err);
            refuse(t, ctx, s, 0, e, err, s->stage != TRK_SESS_AUTHED);
        }
        return;
    }

    switch (m.type) {
    case AT_WIRE_T_HELLO:
        if (m.u.hello.version != AT_WIRE_VERSION) {
            snprintf(text, sizeof text,
                     "the %s speaks protocol version %d; this tracker speaks "
                     "version %d: upgrade the older side",
                     at_wire_role_name(m.u.hello.role), m.u.hello.version, AT_WIRE_VERSION);
            at_log_warn("tracker: refused %s: %s", s->peer, text);
            stat_add(t, &t->stats.n_refused, 1);
            refuse(t, ctx, s, m.seq, AT_EVERSION, text, 1);
            break;
        }
        on_hello(t, s, ctx, &m);
        break;
    case AT_WIRE_T_AUTH:
        if (s->stage != TRK_SESS_CHALLENGED) {
            refuse(t, ctx, s, m.seq, AT_EPROTO, "AUTH without CHALLENGE", 1);
            break;
        }
        on_auth(t, s, ctx, &m);
        break;
    case AT_WIRE_T_REGISTER:
        if (s->role != AT_WIRE_ROLE_AGENT)
            refuse(t, ctx, s, m.seq, AT_EPROTO, "only agents register", 0);
        else
            on_register(t, s, ctx, &m);
        break;
    case AT_WIRE_T_AGENT_POLL:
        if (s->role != AT_WIRE_ROLE_AGENT)
            refuse(t, ctx, s, m.seq, AT_EPROTO, "only agents poll for work", 0);
        else
            on_agent_poll(t, s, ctx, &m);
        break;
    case AT_WIRE_T_SUBMIT:
    case AT_WIRE_T_TUNER_POLL:
    case AT_WIRE_T_CANCEL:
        if (s->role != AT_WIRE_ROLE_TUNER || s->client == NULL) {
            refuse(t, ctx, s, m.seq, AT_EPROTO, "only tuners submit, poll for results or cancel",
                   0);
        } else if (m.type == AT_WIRE_T_SUBMIT) {
            on_submit(t, s, ctx, &m);
        } else if (m.type == AT_WIRE_T_TUNER_POLL) {
            on_tuner_poll(t, s, ctx, &m);
        } else {
            on_cancel(t, s, ctx, &m);
        }
        break;
    case AT_WIRE_T_STATUS_QUERY:
        on_status(t, s, ctx, &m);
        break;
    default:
        snprintf(text, sizeof text, "a tracker does not take %s", at_wire_type_name(m.type));
        refuse(t, ctx, s, m.seq, AT_EPROTO, text, 0);
    }
    at_wire_msg_fini(&m);
}

/* ---- timers ------------------------------------------------------------------------- */

void trk__tick(trk_tracker *t)
{
    /* sessions refused earlier: close them now that the answer went out */
    for (trk_link *l = t->sessions_list.next; l != &t->sessions_list;) {
        trk_sess *s = TRK_OF(l, trk_sess, link);
        l = l->next;
        if (s->close_at > 0 && t->now >= s->close_at) {
            uint32_t pipe = s->pipe;
            sess_free(t, s, "was refused");
            trk__close_pipe(t, pipe);
        }
    }
    /* leases and long polls */
    for (trk_link *l = t->pools.next; l != &t->pools; l = l->next) {
        trk_pool *p = TRK_OF(l, trk_pool, link);
        for (trk_link *k = p->agents.next; k != &p->agents;) {
            trk_agent *a = TRK_OF(k, trk_agent, link);
            k = k->next;
            if (a->parked && t->now >= a->park_until) {
                trk_ctx *ctx = a->parked;
                a->parked = NULL;
                agent_reply(t, a, ctx, a->parked_seq, a->want);
            }
            if (!a->parked && a->n_held > 0 && t->now - a->last_seen > t->cfg.lease_ms / 1000.0) {
                trk_sess *s = a->sess;
                char why[128];
                snprintf(why, sizeof why, "sent no heartbeat for %.1f s (lease %d ms)",
                         t->now - a->last_seen, t->cfg.lease_ms);
                a->n_lost++;
                sess_free(t, s, why);
                /* the connection stays: the agent's next request gets "no session" and it
                ** opens a new one (as after a tracker restart).  Dropping the connection of
                ** a peer that may be sending meanwhile can hang the peer's nng_close in nng
                ** 1.5.2 (Debian 12; docs/fleet.md, known issues). */
                k = p->agents.next; /* the list changed */
            }
        }
    }
    for (trk_link *l = t->clients_list.next; l != &t->clients_list;) {
        trk_client *c = TRK_OF(l, trk_client, link);
        l = l->next;
        if (c->parked && t->now >= c->park_until) {
            trk_ctx *ctx = c->parked;
            c->parked = NULL;
            results_reply(t, c, ctx, c->parked_seq);
        }
        if (c->sess == NULL && t->now - c->gone_since > t->cfg.client_grace_ms / 1000.0) {
            at_log_warn("tracker: tuner %s did not come back within %d ms: its %d job(s) and %d "
                        "result(s) are dropped",
                        c->name, t->cfg.client_grace_ms, c->n_jobs, c->n_out);
            client_free(t, c);
        }
    }
    trk__status_refresh(t);
}

void trk__free_state(trk_tracker *t)
{
    while (!trk__list_empty(&t->sessions_list))
        sess_free(t, TRK_OF(t->sessions_list.next, trk_sess, link), "tracker stopped");
    while (!trk__list_empty(&t->clients_list))
        client_free(t, TRK_OF(t->clients_list.next, trk_client, link));
    {
        size_t i = 0;
        trk_job *j;
        while ((j = trk__map_next(&t->jobs, &i)) != NULL) {
            job_free(t, j);
            i = 0;
        }
    }
    {
        size_t i = 0;
        trk_ref *r;
        while ((r = trk__map_next(&t->refs, &i)) != NULL) {
            trk__list_remove(&r->idle);
            trk__map_del(&t->refs, r->hex);
            at_arena_fini(&r->arena);
            at_free(r);
            i = 0;
        }
    }
    while (!trk__list_empty(&t->pools)) {
        trk_pool *p = TRK_OF(t->pools.next, trk_pool, link);
        while (!trk__list_empty(&p->flows)) {
            trk_flow *f = TRK_OF(p->flows.next, trk_flow, link);
            trk__list_remove(&f->link);
            at_free(f);
        }
        trk__map_del(&t->pools_by_key, p->key);
        trk__list_remove(&p->link);
        at_free(p->key);
        at_free(p);
    }
}
