/* tuner/tn_build.c -- building candidates in worker processes.
**
** LLVM runs in build workers: separate processes (the tuner binary started again with the
** hidden argument "__build-worker"), so that a compile that crashes or runs away becomes a
** recorded build error and never a dead tuner.  A worker reads requests on its standard
** input and writes results on its standard output:
**
**   each message: u32 length (little-endian), then a frame of the wire library
**   (common/wire.h) with no session: BUILD_REQ (id, target, DAG text, state JSON, entry)
**   one way, BUILD_RES (id, error and its sentence, or the artifact as the fleet carries
**   it and the compile time) the other
**
** The parent keeps every worker busy, kills one that exceeds the build timeout (the result
** is BUILD_TIMEOUT) and starts a new one; a worker that dies gives COMPILE_HOST with the
** signal.  With 0 workers, builds run in this process (no protection; for library use and
** tests). */
#include "tuner/tuner_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "schedule_space/schedule_space.h"

extern char **environ;

typedef struct pending {
    int64_t id;
    at_buf req; /* the framed request */
} pending;

typedef struct worker {
    pid_t pid;
    int to, from;       /* pipe ends */
    int busy;
    int64_t id;         /* the request in progress */
    double started;
    at_buf in;          /* bytes read so far of the result */
} worker;

struct tn_builder {
    int n_workers;
    int timeout_ms;
    char exe[4096];
    worker *w;
    pending *q;
    int n_q, cap_q;
    int n_busy;
    /* completed results waiting for the next poll (in-process builds) */
    tn_build_res *done;
    int n_done, cap_done;
    int64_t n_built, n_timeouts, n_crashes;
};

/* ---- framing ---- */

static uint32_t rd_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* 'm' encoded into 'out' (reset) behind its length. */
static at_err frame(at_wire_msg *m, at_buf *out)
{
    uint32_t len;
    at_err err;
    at_buf_reset(out);
    at_buf_put(out, "\0\0\0\0", 4);
    if ((err = at_wire_encode(NULL, m, out)) != AT_OK)
        return err;
    if (out->err)
        return AT_ENOMEM;
    len = (uint32_t)(out->len - 4);
    for (int k = 0; k < 4; k++)
        ((uint8_t *)out->data)[k] = (uint8_t)(len >> (8 * k));
    return AT_OK;
}

/* ---- building one request (worker side, and in-process) ---- */

typedef struct build_cache {
    char *dag_text;
    ss_dag *dag;
    char target_text[256];
    kn_target target;
} build_cache;

static void cache_fini(build_cache *c)
{
    at_free(c->dag_text);
    ss_dag_unref(c->dag);
    memset(c, 0, sizeof *c);
}

static at_err build_one(build_cache *c, const char *target, const char *dag_text,
                        const char *state_json, const char *entry, kn_artifact **out,
                        char *errmsg, size_t errmsg_size)
{
    ss_state *st = NULL;
    at_err err;
    *out = NULL;
    if (c->dag_text == NULL || strcmp(c->dag_text, dag_text) != 0) {
        ss_dag *dag;
        err = ss_dag_parse(dag_text, strlen(dag_text), &dag, errmsg, errmsg_size);
        if (err)
            return err;
        at_free(c->dag_text);
        ss_dag_unref(c->dag);
        c->dag = dag;
        c->dag_text = at_strdup(dag_text);
        if (c->dag_text == NULL)
            return AT_ENOMEM;
    }
    if (strcmp(c->target_text, target) != 0) {
        if (strlen(target) >= sizeof c->target_text)
            return AT_EINVAL;
        err = kn_target_parse(target, &c->target, errmsg, errmsg_size);
        if (err)
            return err;
        strcpy(c->target_text, target);
    }
    err = ss_state_from_json(c->dag, state_json, strlen(state_json), &st, errmsg, errmsg_size);
    if (err == AT_OK)
        err = kn_build_state(st, &c->target, entry[0] ? entry : NULL, out, errmsg, errmsg_size);
    ss_state_free(st);
    return err;
}

int tn_build_worker_main(void)
{
    build_cache cache;
    at_buf out;
    memset(&cache, 0, sizeof cache);
    at_buf_init(&out);
    signal(SIGPIPE, SIG_IGN);
    for (;;) {
        uint8_t hdr[4];
        uint32_t n;
        uint8_t *msg;
        char errmsg[1024] = "";
        at_wire_msg req, res;
        at_wire_arg args[AT_WIRE_MAX_ARGS];
        kn_artifact *a = NULL;
        at_err err;
        if (at_fd_read_all(0, hdr, 4) != 0)
            break;
        n = rd_u32(hdr);
        if (n > AT_WIRE_MAX_MSG || (msg = at_malloc(n ? n : 1)) == NULL ||
            at_fd_read_all(0, msg, n) != 0)
            break;
        at_wire_msg_init(&res, AT_WIRE_T_BUILD_RES);
        err = at_wire_decode(NULL, msg, n, &req, errmsg, sizeof errmsg);
        if (err == AT_OK && req.type != AT_WIRE_T_BUILD_REQ) {
            err = AT_EPROTO;
            snprintf(errmsg, sizeof errmsg, "a build worker got %s", at_wire_type_name(req.type));
        }
        if (err == AT_OK) {
            double t0 = at_time_mono_s();
            const at_wire_build_req *r = &req.u.build;
            res.u.built.id = r->id;
            err = build_one(&cache, r->target, r->dag, r->state, r->entry, &a, errmsg,
                            sizeof errmsg);
            res.u.built.compile_s = at_time_mono_s() - t0;
        }
        res.u.built.err = (int)err;
        res.u.built.text = errmsg;
        if (a)
            kn_artifact_to_wire(a, &res.u.built.art, args);
        err = frame(&res, &out);
        if (err == AT_EINVAL && a) {
            /* an artifact the wire cannot carry (over its limits): say so instead */
            snprintf(errmsg, sizeof errmsg, "the artifact is over the wire's limits (%zu object "
                     "bytes, %d arguments)", a->obj_size, a->n_args);
            res.u.built.err = AT_ECODEGEN;
            err = frame(&res, &out);
        }
        kn_artifact_free(a);
        at_wire_msg_fini(&req);
        at_wire_msg_fini(&res);
        at_free(msg);
        if (err != AT_OK || at_fd_write_all(1, out.data, out.len) != 0)
            break;
    }
    at_buf_fini(&out);
    cache_fini(&cache);
    return 0;
}

/* ---- the pool (parent side) ---- */

static int spawn(tn_builder *b, worker *w)
{
    int to[2], from[2];
    posix_spawn_file_actions_t fa;
    char *argv[] = {(char *)"tuner", (char *)"__build-worker", NULL};
    int rc;
    memset(w, 0, sizeof *w);
    w->to = w->from = -1;
    at_buf_init(&w->in);
    if (pipe2(to, O_CLOEXEC) != 0)
        return -1;
    if (pipe2(from, O_CLOEXEC) != 0) {
        close(to[0]);
        close(to[1]);
        return -1;
    }
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, to[0], 0);
    posix_spawn_file_actions_adddup2(&fa, from[1], 1);
    rc = posix_spawn(&w->pid, b->exe, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(to[0]);
    close(from[1]);
    if (rc != 0) {
        close(to[1]);
        close(from[0]);
        at_log_error("tuner: cannot start a build worker %s: %s", b->exe, strerror(rc));
        return -1;
    }
    w->to = to[1];
    w->from = from[0];
    fcntl(w->from, F_SETFL, O_NONBLOCK);
    return 0;
}

static void reap(worker *w, int sig, int *status_out)
{
    int status = 0;
    if (w->pid > 0) {
        if (sig)
            kill(w->pid, sig);
        while (waitpid(w->pid, &status, 0) < 0 && errno == EINTR)
            ;
    }
    if (w->to >= 0)
        close(w->to);
    if (w->from >= 0)
        close(w->from);
    at_buf_fini(&w->in);
    w->pid = 0;
    w->to = w->from = -1;
    w->busy = 0;
    if (status_out)
        *status_out = status;
}

at_err tn_builder_new(int n_workers, int timeout_ms, const char *exe, tn_builder **out,
                      char *errmsg, size_t errmsg_size)
{
    tn_builder *b;
    *out = NULL;
    b = at_calloc(1, sizeof *b);
    if (b == NULL)
        return AT_ENOMEM;
    b->n_workers = n_workers < 0 ? 0 : n_workers;
    b->timeout_ms = timeout_ms > 0 ? timeout_ms : 60000;
    if (b->n_workers > 0) {
        ssize_t n;
        if (exe) {
            snprintf(b->exe, sizeof b->exe, "%s", exe);
        } else if ((n = readlink("/proc/self/exe", b->exe, sizeof b->exe - 1)) > 0) {
            b->exe[n] = 0;
        } else {
            at_free(b);
            if (errmsg)
                snprintf(errmsg, errmsg_size, "cannot find this program to start build workers");
            return AT_EIO;
        }
        b->w = at_calloc((size_t)b->n_workers, sizeof *b->w);
        if (b->w == NULL) {
            at_free(b);
            return AT_ENOMEM;
        }
        for (int i = 0; i < b->n_workers; i++) {
            if (spawn(b, &b->w[i]) != 0) {
                for (int k = 0; k < i; k++)
                    reap(&b->w[k], SIGKILL, NULL);
                at_free(b->w);
                at_free(b);
                if (errmsg)
                    snprintf(errmsg, errmsg_size, "cannot start build workers (%s)", exe ? exe
                                                                                          : "self");
                return AT_EIO;
            }
        }
    }
    *out = b;
    return AT_OK;
}

void tn_builder_free(tn_builder *b)
{
    if (b == NULL)
        return;
    for (int i = 0; i < b->n_workers; i++)
        reap(&b->w[i], SIGKILL, NULL);
    for (int i = 0; i < b->n_q; i++)
        at_buf_fini(&b->q[i].req);
    for (int i = 0; i < b->n_done; i++)
        kn_artifact_free(b->done[i].art);
    at_free(b->q);
    at_free(b->w);
    at_free(b->done);
    at_free(b);
}

static at_err push_done(tn_builder *b, const tn_build_res *r)
{
    if (b->n_done == b->cap_done) {
        int cap = b->cap_done ? 2 * b->cap_done : 16;
        tn_build_res *p = at_realloc(b->done, (size_t)cap * sizeof *p);
        if (p == NULL)
            return AT_ENOMEM;
        b->done = p;
        b->cap_done = cap;
    }
    b->done[b->n_done++] = *r;
    return AT_OK;
}

at_err tn_builder_submit(tn_builder *b, const tn_build_req *r)
{
    pending *p;
    if (b->n_workers == 0) {
        /* in process: build now, deliver at the next poll */
        build_cache c;
        tn_build_res res;
        double t0 = at_time_mono_s();
        at_err err;
        memset(&c, 0, sizeof c);
        memset(&res, 0, sizeof res);
        res.id = r->id;
        res.err = build_one(&c, r->target, r->dag_text, r->state_json, r->entry ? r->entry : "",
                            &res.art, res.errmsg, sizeof res.errmsg);
        res.build_s = at_time_mono_s() - t0;
        cache_fini(&c);
        if ((err = push_done(b, &res)) != AT_OK) {
            kn_artifact_free(res.art);
            return err;
        }
        b->n_built++;
        return AT_OK;
    }
    if (b->n_q == b->cap_q) {
        int cap = b->cap_q ? 2 * b->cap_q : 64;
        pending *np = at_realloc(b->q, (size_t)cap * sizeof *np);
        if (np == NULL)
            return AT_ENOMEM;
        b->q = np;
        b->cap_q = cap;
    }
    p = &b->q[b->n_q];
    p->id = r->id;
    at_buf_init(&p->req);
    {
        at_wire_msg m;
        at_err err;
        at_wire_msg_init(&m, AT_WIRE_T_BUILD_REQ);
        m.u.build.id = r->id;
        m.u.build.target = r->target;
        m.u.build.dag = r->dag_text;
        m.u.build.state = r->state_json;
        m.u.build.entry = r->entry ? r->entry : "";
        err = frame(&m, &p->req);
        at_wire_msg_fini(&m);
        if (err != AT_OK) {
            at_buf_fini(&p->req);
            return err;
        }
    }
    b->n_q++;
    return AT_OK;
}

int tn_builder_pending(const tn_builder *b)
{
    return b->n_q + b->n_busy + b->n_done;
}

static void fail_worker(tn_builder *b, worker *w, int timed_out, tn_build_fn fn, void *ctx)
{
    tn_build_res r;
    int status = 0;
    memset(&r, 0, sizeof r);
    r.id = w->id;
    r.build_s = at_time_mono_s() - w->started;
    reap(w, SIGKILL, &status);
    b->n_busy--;
    if (timed_out) {
        r.err = AT_ETIMEDOUT;
        r.timed_out = 1;
        snprintf(r.errmsg, sizeof r.errmsg, "the build took longer than %d ms", b->timeout_ms);
        b->n_timeouts++;
    } else {
        r.err = AT_ECODEGEN;
        if (WIFSIGNALED(status) && WTERMSIG(status) != SIGKILL)
            snprintf(r.errmsg, sizeof r.errmsg, "the build worker crashed (%s)",
                     strsignal(WTERMSIG(status)));
        else
            snprintf(r.errmsg, sizeof r.errmsg, "the build worker died (status %d)", status);
        b->n_crashes++;
    }
    if (spawn(b, w) != 0)
        at_log_error("tuner: cannot restart a build worker");
    fn(ctx, &r);
}

/* Decode a complete result in w->in. */
static void deliver(tn_builder *b, worker *w, tn_build_fn fn, void *ctx)
{
    tn_build_res r;
    at_wire_msg m;
    const at_wire_build_res *x = &m.u.built;
    char why[256];
    int bad = 0;
    memset(&r, 0, sizeof r);
    r.id = w->id;
    r.build_s = at_time_mono_s() - w->started;
    if (at_wire_decode(NULL, w->in.data + 4, w->in.len - 4, &m, why, sizeof why) != AT_OK ||
        m.type != AT_WIRE_T_BUILD_RES || x->id != w->id) {
        bad = 1;
        r.err = AT_EPROTO;
        snprintf(r.errmsg, sizeof r.errmsg, "a build worker sent a malformed result%s%s",
                 why[0] ? ": " : "", why[0] ? why : "");
    } else {
        r.err = (at_err)x->err;
        snprintf(r.errmsg, sizeof r.errmsg, "%s", x->text);
        if (r.err == AT_OK && (r.err = kn_artifact_from_wire(&x->art, &r.art, r.errmsg,
                                                              sizeof r.errmsg)) == AT_OK)
            r.art->compile_s = x->compile_s;
    }
    at_wire_msg_fini(&m);
    at_buf_reset(&w->in);
    w->busy = 0;
    b->n_busy--;
    b->n_built++;
    if (bad) {
        /* a worker that speaks garbage is not trusted with the next request */
        reap(w, SIGKILL, NULL);
        b->n_crashes++;
        if (spawn(b, w) != 0)
            at_log_error("tuner: cannot restart a build worker");
    }
    fn(ctx, &r);
}

at_err tn_builder_poll(tn_builder *b, int timeout_ms, tn_build_fn fn, void *ctx)
{
    struct pollfd pfd[256];
    int map[256], n = 0;
    double deadline = at_time_mono_s() + timeout_ms * 1e-3;
    /* in-process results first */
    if (b->n_done) {
        int k = b->n_done;
        tn_build_res *d = b->done;
        b->done = NULL;
        b->n_done = b->cap_done = 0;
        for (int i = 0; i < k; i++)
            fn(ctx, &d[i]);
        at_free(d);
        return AT_OK;
    }
    /* hand queued requests to idle workers */
    for (int i = 0; i < b->n_workers && b->n_q > 0; i++) {
        worker *w = &b->w[i];
        if (w->busy || w->pid <= 0)
            continue;
        if (at_fd_write_all(w->to, b->q[0].req.data, b->q[0].req.len) != 0) {
            w->id = b->q[0].id;
            w->started = at_time_mono_s();
            w->busy = 1;
            b->n_busy++;
            at_buf_fini(&b->q[0].req);
            memmove(b->q, b->q + 1, (size_t)(b->n_q - 1) * sizeof *b->q);
            b->n_q--;
            fail_worker(b, w, 0, fn, ctx);
            continue;
        }
        w->id = b->q[0].id;
        w->started = at_time_mono_s();
        w->busy = 1;
        b->n_busy++;
        at_buf_fini(&b->q[0].req);
        memmove(b->q, b->q + 1, (size_t)(b->n_q - 1) * sizeof *b->q);
        b->n_q--;
    }
    for (int i = 0; i < b->n_workers && n < 256; i++)
        if (b->w[i].busy) {
            pfd[n].fd = b->w[i].from;
            pfd[n].events = POLLIN;
            map[n++] = i;
        }
    if (n == 0)
        return AT_OK;
    for (;;) {
        int left = (int)((deadline - at_time_mono_s()) * 1e3), rc;
        if (left < 0)
            left = 0;
        rc = poll(pfd, (nfds_t)n, left);
        if (rc < 0 && errno == EINTR)
            continue;
        break;
    }
    for (int k = 0; k < n; k++) {
        worker *w = &b->w[map[k]];
        if (!w->busy)
            continue;
        if (pfd[k].revents & (POLLIN | POLLHUP | POLLERR)) {
            char buf[65536];
            ssize_t r;
            int eof = 0;
            for (;;) {
                r = read(w->from, buf, sizeof buf);
                if (r > 0) {
                    at_buf_put(&w->in, buf, (size_t)r);
                    continue;
                }
                if (r == 0)
                    eof = 1;
                break;
            }
            if (w->in.len >= 4) {
                uint32_t need = rd_u32((const uint8_t *)w->in.data);
                if (need > AT_WIRE_MAX_MSG) {
                    fail_worker(b, w, 0, fn, ctx);
                    continue;
                }
                if (w->in.len >= (size_t)need + 4) {
                    deliver(b, w, fn, ctx);
                    continue;
                }
            }
            if (eof) {
                fail_worker(b, w, 0, fn, ctx);
                continue;
            }
        }
        if (w->busy && (at_time_mono_s() - w->started) * 1e3 > b->timeout_ms)
            fail_worker(b, w, 1, fn, ctx);
    }
    return AT_OK;
}

void tn_builder_stats(const tn_builder *b, int64_t *n_built, int64_t *n_timeouts,
                      int64_t *n_crashes)
{
    *n_built = b->n_built;
    *n_timeouts = b->n_timeouts;
    *n_crashes = b->n_crashes;
}
