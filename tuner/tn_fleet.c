/* tuner/tn_fleet.c -- the tuner's side of the measurement fleet: submit jobs to a tracker,
** receive results as they arrive, commit each to the records store before anything acts on
** it, cancel, resubmit after a reconnection or a tracker restart; and the embedded mode,
** where the same tracker and agent code run in this process over inproc://.
**
** Durability: a result is acknowledged to the tracker (the 'ack' of the next poll) only
** after rec_put committed it, so a crash between receiving and committing loses nothing:
** the tracker sends the result again, or (after a tracker restart) the job is measured
** again.  The store keeps one row per job id, so a result that arrives twice is stored once. */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "rpc_agent/rpc_agent.h"
#include "tracker/tracker.h"
#include "tuner/tuner.h"

#define SUBMIT_JOBS_MAX 256
#define SUBMIT_BYTES_MAX (8u << 20)

typedef struct fjob {
    at_arena arena;
    tn_fleet_job j;
    int sent; /* on the current session */
} fjob;

typedef struct fref {
    at_arena arena;
    at_wire_ref w;
    int sent;
} fref;

struct tn_fleet {
    tn_fleet_cfg cfg;
    at_wire_key keys[2];
    char url[512], device_key[AT_WIRE_MAX_NAME + 1], name[AT_WIRE_MAX_NAME + 1];
    at_wire_client *client;
    /* embedded mode */
    int embedded;
    trk_tracker *trk;
    agt_agent *agt;
    agt_launcher *launcher;
    pthread_t trk_thread, agt_thread;
    /* jobs without a result, in submission order; 'index' maps id -> slot */
    fjob **jobs; /* NULL where a job was done (compacted from time to time) */
    int n_jobs, cap_jobs;
    int n_live; /* jobs not done */
    int *index; /* open addressing over 'jobs' positions; -1 empty, -2 deleted */
    int cap_index;
    fref **refs;
    int n_refs, cap_refs;
    uint64_t ack;
    char tracker_id[AT_WIRE_MAX_NAME + 1];
    double no_agent_since;
    int n_agents;
    char status[1200];
    tn_fleet_stats stats;
};

/* The launcher forked before any thread, with its CPU affinity then.  An embedded fleet
** takes it; tn_fleet_close gives it back when it is idle (its affinity restored, since
** the tuner's overlap mode pins it), so that a process opening fleets one after another
** never forks a launcher from a threaded process: with a sanitizer runtime that fork can
** leave the child stuck on a lock another thread held. */
static agt_launcher *prepared_launcher;
static cpu_set_t prepared_affinity;
static int prepared_has_affinity;

void tn_fleet_prepare(void)
{
    char err[256];
    if (prepared_launcher == NULL &&
        agt_launcher_open(&prepared_launcher, err, sizeof err) != AT_OK) {
        at_log_warn("tuner: cannot start the agent launcher: %s", err);
        return;
    }
    prepared_has_affinity = sched_getaffinity(agt_launcher_pid(prepared_launcher),
                                              sizeof prepared_affinity, &prepared_affinity) == 0;
}

static void launcher_give_back(agt_launcher *l)
{
    if (l != NULL && prepared_launcher == NULL && prepared_has_affinity &&
        agt_launcher_idle(l) &&
        sched_setaffinity(agt_launcher_pid(l), sizeof prepared_affinity, &prepared_affinity) == 0) {
        prepared_launcher = l;
        return;
    }
    agt_launcher_close(l);
}

/* ---- the job index ---------------------------------------------------------------------- */

static at_err index_rebuild(tn_fleet *f)
{
    int cap = 64;
    while (cap < 2 * f->n_jobs + 2)
        cap *= 2;
    if (cap != f->cap_index) {
        int *v = at_malloc((size_t)cap * sizeof *v);
        if (v == NULL) return AT_ENOMEM;
        at_free(f->index);
        f->index = v;
        f->cap_index = cap;
    }
    for (int i = 0; i < f->cap_index; i++)
        f->index[i] = -1;
    for (int i = 0; i < f->n_jobs; i++) {
        const char *id;
        size_t h;
        if (f->jobs[i] == NULL) continue;
        id = f->jobs[i]->j.w.id;
        h = (size_t)at_hash64(id, strlen(id)) & (size_t)(f->cap_index - 1);
        while (f->index[h] >= 0)
            h = (h + 1) & (size_t)(f->cap_index - 1);
        f->index[h] = i;
    }
    return AT_OK;
}

/* Position of job 'id' in 'jobs', or -1; *slot (may be NULL) gets its index slot. */
static int find_slot(const tn_fleet *f, const char *id, size_t *slot)
{
    size_t h;
    if (f->cap_index == 0) return -1;
    h = (size_t)at_hash64(id, strlen(id)) & (size_t)(f->cap_index - 1);
    while (f->index[h] != -1) {
        if (f->index[h] >= 0 && strcmp(f->jobs[f->index[h]]->j.w.id, id) == 0) {
            if (slot) *slot = h;
            return f->index[h];
        }
        h = (h + 1) & (size_t)(f->cap_index - 1);
    }
    return -1;
}

static int find_job(const tn_fleet *f, const char *id)
{
    return find_slot(f, id, NULL);
}

/* Squeeze out the holes of done jobs (keeps the order) and rebuild the index. */
static void compact(tn_fleet *f)
{
    int n = 0;
    for (int i = 0; i < f->n_jobs; i++)
        if (f->jobs[i]) f->jobs[n++] = f->jobs[i];
    f->n_jobs = n;
    index_rebuild(f);
}

static void fjob_free(fjob *j)
{
    if (j == NULL) return;
    at_arena_fini(&j->arena);
    at_free(j);
}

/* Remove jobs[k] (a hole until the next compaction). */
static void remove_job(tn_fleet *f, int k)
{
    size_t slot;
    if (find_slot(f, f->jobs[k]->j.w.id, &slot) == k) f->index[slot] = -2;
    fjob_free(f->jobs[k]);
    f->jobs[k] = NULL;
    f->n_live--;
    if (f->n_jobs - f->n_live > 64 && f->n_jobs - f->n_live > f->n_live) compact(f);
}

/* ---- opening ---------------------------------------------------------------------------- */

static void *trk_thread_main(void *arg)
{
    trk_run(arg);
    return NULL;
}

static void *agt_thread_main(void *arg)
{
    agt_run(arg);
    return NULL;
}

at_err tn_fleet_open(const tn_fleet_cfg *cfg, tn_fleet **out, char *errmsg, size_t n)
{
    tn_fleet *f;
    char host[64];
    at_err e;

    *out = NULL;
    if (cfg->tracker && (cfg->keys == NULL || cfg->n_keys < 1 || cfg->n_keys > 2)) {
        snprintf(errmsg, n, "a remote tracker needs the fleet key");
        return AT_EINVAL;
    }
    if ((f = at_calloc(1, sizeof *f)) == NULL) return AT_ENOMEM;
    f->cfg = *cfg;
    snprintf(f->device_key, sizeof f->device_key, "%s",
             cfg->device_key && cfg->device_key[0] ? cfg->device_key : "local");
    if (cfg->name)
        snprintf(f->name, sizeof f->name, "%s", cfg->name);
    else {
        if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "host");
        host[sizeof host - 1] = 0;
        snprintf(f->name, sizeof f->name, "tuner %s:%d", host, (int)getpid());
    }
    if (f->cfg.priority == 0) f->cfg.priority = 1;
    if (f->cfg.wait_timeout_ms <= 0) f->cfg.wait_timeout_ms = 600000;
    if (index_rebuild(f) != AT_OK) {
        at_free(f);
        return AT_ENOMEM;
    }
    if (cfg->tracker) {
        memcpy(f->keys, cfg->keys, (size_t)cfg->n_keys * sizeof *f->keys);
        f->cfg.n_keys = cfg->n_keys;
        at_wire_url(cfg->tracker, f->url, sizeof f->url);
    } else {
        /* embedded: a tracker and one agent in this process, over inproc, with a key that
        ** exists only in this process's memory */
        uint8_t k[32];
        static int counter;
        agt_config ac;
        f->embedded = 1;
        if (at_wire_random(k, sizeof k) != AT_OK) {
            tn_fleet_close(f);
            snprintf(errmsg, n, "getrandom failed");
            return AT_EIO;
        }
        at_wire_key_from_bytes(k, &f->keys[0]);
        memset(k, 0, sizeof k);
        f->cfg.n_keys = 1;
        snprintf(f->url, sizeof f->url, "inproc://tn-fleet-%d-%d", (int)getpid(), ++counter);
        if ((e = trk_open(&(trk_config){.listen_url = f->url,
                                        .keys = f->keys,
                                        .n_keys = 1,
                                        .name = "embedded",
                                        .hold_ms = 1000},
                          &f->trk, errmsg, n)) != AT_OK) {
            tn_fleet_close(f);
            return e;
        }
        if (pthread_create(&f->trk_thread, NULL, trk_thread_main, f->trk) != 0) {
            trk_close(f->trk);
            f->trk = NULL;
            tn_fleet_close(f);
            return AT_ENOMEM;
        }
        memset(&ac, 0, sizeof ac);
        ac.tracker_url = f->url;
        ac.device_key = f->device_key;
        ac.keys = f->keys;
        ac.n_keys = 1;
        ac.name = "embedded";
        f->launcher = prepared_launcher; /* ours from here; the agent borrows it */
        prepared_launcher = NULL;
        if (f->launcher == NULL && (e = agt_launcher_open(&f->launcher, errmsg, n)) != AT_OK) {
            tn_fleet_close(f);
            return e;
        }
        ac.launcher = f->launcher;
        ac.n_threads = cfg->embedded_threads;
        ac.no_seccomp = cfg->embedded_no_seccomp;
        ac.reconnect_max_ms = 200;
        if ((e = agt_open(&ac, &f->agt, errmsg, n)) != AT_OK) {
            tn_fleet_close(f);
            return e;
        }
        if (pthread_create(&f->agt_thread, NULL, agt_thread_main, f->agt) != 0) {
            agt_close(f->agt);
            f->agt = NULL;
            tn_fleet_close(f);
            return AT_ENOMEM;
        }
        f->cfg.keys = f->keys;
    }
    if ((e = at_wire_client_open(&(at_wire_client_cfg){.url = f->url,
                                                       .role = AT_WIRE_ROLE_TUNER,
                                                       .name = f->name,
                                                       .keys = f->keys,
                                                       .n_keys = f->cfg.n_keys,
                                                       .reconnect_max_ms = 2000},
                                 &f->client, errmsg, n)) != AT_OK) {
        tn_fleet_close(f);
        return e;
    }
    snprintf(f->status, sizeof f->status, "connecting to %s",
             f->embedded ? "the embedded tracker" : f->url);
    *out = f;
    return AT_OK;
}

void tn_fleet_close(tn_fleet *f)
{
    if (f == NULL) return;
    if (f->client) { /* best effort: acknowledge what we have, leave no work behind */
        at_wire_msg req, rep;
        char err[256];
        int fresh;
        if (at_wire_client_ensure(f->client, 500, &fresh, err, sizeof err) == AT_OK && !fresh) {
            at_wire_msg_init(&req, AT_WIRE_T_CANCEL);
            req.u.cancel.all = 1;
            if (f->n_live > 0 &&
                at_wire_client_call(f->client, &req, 1000, &rep, err, sizeof err) == AT_OK)
                at_wire_msg_fini(&rep);
            at_wire_msg_init(&req, AT_WIRE_T_TUNER_POLL);
            req.u.tpoll.ack = f->ack;
            if (at_wire_client_call(f->client, &req, 1000, &rep, err, sizeof err) == AT_OK)
                at_wire_msg_fini(&rep);
        }
    }
    at_wire_client_close(f->client);
    if (f->agt) {
        agt_stop(f->agt);
        agt_wake(f->agt); /* an idle agent's poll, held by the tracker up to 1 s */
        pthread_join(f->agt_thread, NULL);
        agt_close(f->agt);
    }
    launcher_give_back(f->launcher); /* the agent, which borrowed it, is closed */
    if (f->trk) {
        trk_stop(f->trk);
        pthread_join(f->trk_thread, NULL);
        trk_close(f->trk);
    }
    for (int i = 0; i < f->n_jobs; i++)
        fjob_free(f->jobs[i]);
    at_free(f->jobs);
    for (int i = 0; i < f->n_refs; i++) {
        at_arena_fini(&f->refs[i]->arena);
        at_free(f->refs[i]);
    }
    at_free(f->refs);
    at_free(f->index);
    memset(f->keys, 0, sizeof f->keys);
    at_free(f);
}

/* ---- jobs and references -------------------------------------------------------------- */

at_err tn_fleet_add_ref(tn_fleet *f, const kn_artifact *ref, uint8_t id[AT_WIRE_REFID_BYTES])
{
    at_sha256 s;
    at_wire_ref w;
    at_wire_arg args[64];
    fref *r;

    at_sha256_init(&s);
    at_sha256_update(&s, ref->obj, ref->obj_size);
    at_sha256_update(&s, ref->entry, strlen(ref->entry) + 1);
    at_sha256_final(&s, id);
    for (int i = 0; i < f->n_refs; i++)
        if (memcmp(f->refs[i]->w.id, id, AT_WIRE_REFID_BYTES) == 0) return AT_OK;
    if (f->n_refs == f->cap_refs) {
        int cap = f->cap_refs ? 2 * f->cap_refs : 8;
        fref **v = at_realloc(f->refs, (size_t)cap * sizeof *v);
        if (v == NULL) return AT_ENOMEM;
        f->refs = v;
        f->cap_refs = cap;
    }
    if ((r = at_calloc(1, sizeof *r)) == NULL) return AT_ENOMEM;
    memcpy(w.id, id, AT_WIRE_REFID_BYTES);
    kn_artifact_to_wire(ref, &w.art, args);
    at_arena_init(&r->arena, ref->obj_size + 1024);
    if (at_wire_ref_copy(&r->arena, &r->w, &w) != AT_OK) {
        at_arena_fini(&r->arena);
        at_free(r);
        return AT_ENOMEM;
    }
    f->refs[f->n_refs++] = r;
    return AT_OK;
}

at_err tn_fleet_submit(tn_fleet *f, const tn_fleet_job *jobs, int n)
{
    int first = f->n_jobs;
    for (int i = 0; i < n; i++) {
        if (jobs[i].w.id == NULL || jobs[i].w.id[0] == 0 || strlen(jobs[i].w.id) > AT_WIRE_MAX_NAME)
            return AT_EINVAL;
        if (find_job(f, jobs[i].w.id) >= 0) return AT_EEXIST;
        for (int k = 0; k < i; k++)
            if (strcmp(jobs[k].w.id, jobs[i].w.id) == 0) return AT_EEXIST;
    }
    if (f->n_jobs + n > f->cap_jobs) {
        int cap = f->cap_jobs ? f->cap_jobs : 64;
        fjob **v;
        while (cap < f->n_jobs + n)
            cap *= 2;
        if ((v = at_realloc(f->jobs, (size_t)cap * sizeof *v)) == NULL) return AT_ENOMEM;
        f->jobs = v;
        f->cap_jobs = cap;
    }
    for (int i = 0; i < n; i++) {
        fjob *j = at_calloc(1, sizeof *j);
        if (j == NULL) goto oom;
        at_arena_init(&j->arena, jobs[i].w.art.obj_size + 1024);
        j->j = jobs[i];
        if (at_wire_job_copy(&j->arena, &j->j.w, &jobs[i].w) != AT_OK ||
            (j->j.state = at_arena_strdup(&j->arena, jobs[i].state ? jobs[i].state : "{}")) ==
                NULL) {
            fjob_free(j);
            goto oom;
        }
        f->jobs[f->n_jobs++] = j;
        f->n_live++;
    }
    if (index_rebuild(f) != AT_OK) goto oom;
    f->stats.n_submitted += n;
    return AT_OK;
oom:
    while (f->n_jobs > first) {
        fjob_free(f->jobs[--f->n_jobs]);
        f->n_live--;
    }
    index_rebuild(f);
    return AT_ENOMEM;
}

int tn_fleet_pending(const tn_fleet *f)
{
    return f->n_live;
}

const char *tn_fleet_status(const tn_fleet *f)
{
    return f->status;
}

void tn_fleet_get_stats(const tn_fleet *f, tn_fleet_stats *out)
{
    *out = f->stats;
}

const char *tn_fleet_embedded_url(const tn_fleet *f)
{
    return f->embedded ? f->url : NULL;
}

pid_t tn_fleet_kernel_pid(const tn_fleet *f)
{
    return f->embedded && f->launcher ? agt_launcher_pid(f->launcher) : -1;
}

/* ---- committing ------------------------------------------------------------------------- */

static at_err commit(tn_fleet *f, const fjob *j, const at_wire_result *r)
{
    rec_result row;
    rec_device dev;
    char note[256];
    if (f->cfg.store == NULL) return AT_OK;
    memset(&row, 0, sizeof row);
    dev.arch = r->dev.arch && r->dev.arch[0] ? r->dev.arch : "unknown";
    dev.model = r->dev.model && r->dev.model[0] ? r->dev.model : "unknown";
    dev.n_cores = r->dev.n_cores > 0 ? r->dev.n_cores : 1;
    dev.os = r->dev.os ? r->dev.os : "";
    dev.driver = r->dev.driver ? r->dev.driver : "";
    row.task_id = j->j.task_id;
    row.job_id = j->j.w.id;
    row.state = j->j.state;
    row.status = r->status;
    row.costs = r->status == AT_MEASURE_NO_ERROR ? r->costs : NULL;
    row.n_costs = r->status == AT_MEASURE_NO_ERROR ? r->n_costs : 0;
    row.error_text = r->error;
    if (r->status == AT_MEASURE_NO_ERROR && (r->state.throttled || r->state.loaded)) {
        /* the records schema has no column for the device state: flag it in the text */
        snprintf(note, sizeof note, "measured while %s%s%s (%.0f/%.0f MHz, %.0f C, load %.2f)",
                 r->state.throttled ? "throttled" : "",
                 r->state.throttled && r->state.loaded ? " and " : "",
                 r->state.loaded ? "loaded" : "", r->state.cpu_mhz, r->state.cpu_max_mhz,
                 r->state.temp_c, r->state.load1);
        row.error_text = note;
    }
    row.device = &dev;
    row.agent = r->agent;
    row.tuner_version = TN_VERSION;
    row.run_id = j->j.run_id;
    row.trial = j->j.trial >= -1 ? j->j.trial : -1;
    row.measured_at = r->measured_at > 0 ? r->measured_at : 0;
    if (rec_put(f->cfg.store, &row, 1, NULL) != AT_OK) {
        at_log_error("tuner: cannot store the result of job %s: %s", j->j.w.id,
                     rec_store_errmsg(f->cfg.store));
        return AT_EIO;
    }
    return AT_OK;
}

/* ---- talking to the tracker ------------------------------------------------------------ */

static void keys_status(tn_fleet *f, const at_wire_submitted *s)
{
    char list[384] = "";
    size_t len = 0;
    for (int i = 0; i < s->n_keys && len < sizeof list - 64; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s (%d agent%s)", i ? ", " : "",
                                s->keys[i].key, s->keys[i].n_agents,
                                s->keys[i].n_agents == 1 ? "" : "s");
    snprintf(f->status, sizeof f->status, "waiting for an agent of key '%s'; the tracker has: %s",
             f->device_key, list[0] ? list : "no agents at all");
}

/* Send every job not sent on this session, with the references they need. */
static at_err flush(tn_fleet *f, char *err, size_t n)
{
    int k = 0, retried = 0;
    while (k < f->n_jobs) {
        int first_k = k;
        at_wire_msg req, rep;
        at_wire_job *jv;
        at_wire_ref *rv;
        int nj = 0, nr = 0, idx[SUBMIT_JOBS_MAX];
        size_t bytes = 0;
        at_err e;

        at_wire_msg_init(&req, AT_WIRE_T_SUBMIT);
        jv = at_arena_alloc(&req.arena, SUBMIT_JOBS_MAX * sizeof *jv);
        rv = at_arena_alloc(&req.arena, AT_WIRE_MAX_REFS * sizeof *rv);
        if (jv == NULL || rv == NULL) {
            at_wire_msg_fini(&req);
            return AT_ENOMEM;
        }
        for (; k < f->n_jobs && nj < SUBMIT_JOBS_MAX && bytes < SUBMIT_BYTES_MAX; k++) {
            fjob *j = f->jobs[k];
            if (j == NULL || j->sent) continue;
            if (j->j.w.has_ref) {
                int have = 0;
                for (int r = 0; r < f->n_refs; r++)
                    if (memcmp(f->refs[r]->w.id, j->j.w.ref, AT_WIRE_REFID_BYTES) == 0) {
                        have = 1;
                        if (!f->refs[r]->sent) {
                            int dup = 0;
                            for (int q = 0; q < nr; q++)
                                dup |= memcmp(rv[q].id, j->j.w.ref, AT_WIRE_REFID_BYTES) == 0;
                            if (!dup) {
                                if (nr == AT_WIRE_MAX_REFS) goto full;
                                rv[nr++] = f->refs[r]->w;
                                bytes += f->refs[r]->w.art.obj_size;
                            }
                        }
                    }
                if (!have) {
                    snprintf(err, n,
                             "job %s refers to a reference never added "
                             "(tn_fleet_add_ref)",
                             j->j.w.id);
                    at_wire_msg_fini(&req);
                    return AT_EINVAL;
                }
            }
            idx[nj] = k;
            jv[nj++] = j->j.w;
            bytes += j->j.w.art.obj_size;
        }
    full:
        if (nj == 0) {
            at_wire_msg_fini(&req);
            break;
        }
        req.u.submit.device_key = f->device_key;
        req.u.submit.priority = f->cfg.priority;
        req.u.submit.jobs = jv;
        req.u.submit.n_jobs = nj;
        req.u.submit.refs = rv;
        req.u.submit.n_refs = nr;
        e = at_wire_client_call(f->client, &req, 10000, &rep, err, n);
        if (e != AT_OK) {
            at_wire_msg_fini(&req);
            return e;
        }
        if (rep.type == AT_WIRE_T_ERROR && rep.u.error.code == AT_ENOTFOUND && !retried) {
            /* the tracker dropped a reference we sent earlier: send them all again */
            at_wire_msg_fini(&rep);
            at_wire_msg_fini(&req);
            for (int r = 0; r < f->n_refs; r++)
                f->refs[r]->sent = 0;
            retried = 1;
            k = first_k;
            continue;
        }
        if (rep.type == AT_WIRE_T_ERROR) {
            snprintf(err, n, "the tracker refused the jobs: %s", rep.u.error.text);
            e = rep.u.error.code == AT_ECLOSED ? AT_ECLOSED : AT_EPROTO;
            at_wire_msg_fini(&rep);
            at_wire_msg_fini(&req);
            return e;
        }
        if (rep.type == AT_WIRE_T_SUBMITTED) {
            for (int i = 0; i < nj; i++)
                f->jobs[idx[i]]->sent = 1;
            for (int q = 0; q < nr; q++)
                for (int r = 0; r < f->n_refs; r++)
                    if (memcmp(f->refs[r]->w.id, rv[q].id, AT_WIRE_REFID_BYTES) == 0)
                        f->refs[r]->sent = 1;
            f->n_agents = rep.u.submitted.n_agents;
            if (f->n_agents == 0) {
                keys_status(f, &rep.u.submitted);
                if (f->no_agent_since == 0) {
                    f->no_agent_since = at_time_mono_s();
                    at_log_warn("tuner: %s", f->status);
                }
            }
        }
        at_wire_msg_fini(&rep);
        at_wire_msg_fini(&req);
    }
    return AT_OK;
}

at_err tn_fleet_wait(tn_fleet *f, int timeout_ms, tn_fleet_result_fn fn, void *ctx)
{
    double deadline = at_time_mono_s() + timeout_ms / 1000.0;
    char err[512];
    int got = 0;

    do {
        at_wire_msg req, rep;
        double now = at_time_mono_s();
        int fresh, hold;
        at_err e = at_wire_client_ensure(f->client,
                                         AT_MAX(200, AT_MIN(2000, (int)((deadline - now) * 1000))),
                                         &fresh, err, sizeof err);
        if (e == AT_EAUTH || e == AT_EVERSION) {
            snprintf(f->status, sizeof f->status, "%s", err);
            at_log_error("tuner: %s", err);
            return e;
        }
        if (e != AT_OK) {
            snprintf(f->status, sizeof f->status, "waiting for the tracker at %.300s (%.300s)",
                     f->url, err);
            if (e != AT_ETIMEDOUT) usleep(100000);
            continue;
        }
        if (fresh) {
            const at_wire_welcome *w = at_wire_client_welcome(f->client);
            int resent = 0;
            if (strcmp(w->tracker_id, f->tracker_id) != 0) {
                if (f->tracker_id[0])
                    at_log_warn("tuner: the tracker restarted: resubmitting %d job(s) without a "
                                "result",
                                f->n_live);
                snprintf(f->tracker_id, sizeof f->tracker_id, "%s", w->tracker_id);
                f->ack = 0;
            }
            for (int i = 0; i < f->n_jobs; i++)
                if (f->jobs[i]) {
                    resent += f->jobs[i]->sent;
                    f->jobs[i]->sent = 0;
                }
            for (int i = 0; i < f->n_refs; i++)
                f->refs[i]->sent = 0;
            f->stats.n_resubmitted += resent;
            f->stats.n_sessions++;
        }
        if ((e = flush(f, err, sizeof err)) != AT_OK) {
            if (e == AT_EINVAL || e == AT_EPROTO) {
                at_log_error("tuner: %s", err);
                return e;
            }
            continue;
        }
        now = at_time_mono_s();
        hold = (int)((deadline - now) * 1000);
        hold = hold < 0 ? 0 : hold > 1000 ? 1000 : hold;
        if (f->n_live == 0) hold = 0;
        at_wire_msg_init(&req, AT_WIRE_T_TUNER_POLL);
        req.u.tpoll.ack = f->ack;
        req.u.tpoll.hold_ms = hold;
        e = at_wire_client_call(f->client, &req, hold + 5000, &rep, err, sizeof err);
        at_wire_msg_fini(&req);
        if (e != AT_OK) continue;
        if (rep.type == AT_WIRE_T_RESULTS) {
            const at_wire_results *rs = &rep.u.results;
            for (int i = 0; i < rs->n_results; i++) {
                uint64_t num = rs->first + (uint64_t)i;
                const at_wire_result *r = &rs->results[i];
                int k;
                if (num < f->ack) continue; /* seen: our ack crossed this reply */
                if ((k = find_job(f, r->id)) < 0) {
                    f->stats.n_duplicates++;
                    f->ack = num + 1;
                    continue;
                }
                if (commit(f, f->jobs[k], r) != AT_OK) {
                    at_wire_msg_fini(&rep);
                    return AT_EIO; /* not acknowledged: it comes again */
                }
                f->ack = num + 1;
                f->stats.n_results++;
                got++;
                if (fn) fn(ctx, &f->jobs[k]->j, r);
                remove_job(f, k);
            }
            f->n_agents = rs->n_agents;
            if (rs->n_agents > 0 || f->n_live == 0) {
                f->no_agent_since = 0;
                snprintf(f->status, sizeof f->status,
                         "%d job(s) waiting: %d queued, %d in flight; "
                         "%d agent(s)",
                         f->n_live, rs->n_queued, rs->n_inflight, rs->n_agents);
            } else if (f->no_agent_since == 0) {
                f->no_agent_since = at_time_mono_s();
            }
        }
        at_wire_msg_fini(&rep);
        if (got > 0) return AT_OK;
        if (f->no_agent_since > 0 && f->n_live > 0 &&
            at_time_mono_s() - f->no_agent_since > f->cfg.wait_timeout_ms / 1000.0) {
            snprintf(f->status, sizeof f->status, "no agent served key '%s' for %d s: giving up",
                     f->device_key, f->cfg.wait_timeout_ms / 1000);
            return AT_ETIMEDOUT;
        }
    } while (at_time_mono_s() < deadline);
    return AT_OK;
}

at_err tn_fleet_fail_pending(tn_fleet *f, int status, const char *text, tn_fleet_result_fn fn,
                             void *ctx)
{
    at_wire_msg req, rep;
    char err[256];
    int fresh;
    at_err e = AT_OK;

    if (at_wire_client_ensure(f->client, 1000, &fresh, err, sizeof err) == AT_OK) {
        at_wire_msg_init(&req, AT_WIRE_T_CANCEL);
        req.u.cancel.all = 1;
        if (at_wire_client_call(f->client, &req, 2000, &rep, err, sizeof err) == AT_OK)
            at_wire_msg_fini(&rep);
    }
    for (int k = 0; k < f->n_jobs; k++) {
        at_wire_result r;
        if (f->jobs[k] == NULL) continue;
        memset(&r, 0, sizeof r);
        r.id = f->jobs[k]->j.w.id;
        r.status = status;
        r.error = text;
        r.measured_at = at_time_wall_s();
        r.state.cpu_mhz = r.state.cpu_max_mhz = r.state.temp_c = r.state.load1 = -1;
        r.agent = "";
        r.fingerprint = "";
        r.dev.arch = r.dev.model = r.dev.os = r.dev.driver = "";
        if (commit(f, f->jobs[k], &r) != AT_OK) e = AT_EIO;
        if (fn) fn(ctx, &f->jobs[k]->j, &r);
        fjob_free(f->jobs[k]);
        f->jobs[k] = NULL;
        f->n_live--;
    }
    compact(f);
    return e;
}
