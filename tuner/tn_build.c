/* tuner/tn_build.c -- building candidates in worker processes.
**
** LLVM runs in build workers: separate processes (the tuner binary started again with the
** hidden argument "__build-worker"), so that a compile that crashes or runs away becomes a
** recorded build error and never a dead tuner.  A worker reads requests on its standard
** input and writes results on its standard output:
**
**   request:  u32 length, then i64 id, then four strings (u32 length + bytes): the target,
**             the task's DAG text, the state JSON, the entry symbol
**   result:   u32 length, then i64 id, i32 at_err, a string (the error text), then the
**             packed artifact (kn_artifact_pack) when the error is AT_OK
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

#define MAX_MSG (256u << 20)

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

static void put_u32(at_buf *b, uint32_t v)
{
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    at_buf_put(b, x, 4);
}

static void put_i64(at_buf *b, int64_t v)
{
    put_u32(b, (uint32_t)(uint64_t)v);
    put_u32(b, (uint32_t)((uint64_t)v >> 32));
}

static void put_str(at_buf *b, const char *s)
{
    put_u32(b, (uint32_t)strlen(s));
    at_buf_puts(b, s);
}

static uint32_t rd_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

typedef struct cursor {
    const uint8_t *p, *end;
    int bad;
} cursor;

static uint32_t cur_u32(cursor *c)
{
    uint32_t v;
    if (c->end - c->p < 4) {
        c->bad = 1;
        return 0;
    }
    v = rd_u32(c->p);
    c->p += 4;
    return v;
}

static int64_t cur_i64(cursor *c)
{
    uint64_t lo = cur_u32(c), hi = cur_u32(c);
    return (int64_t)(lo | hi << 32);
}

/* A string of the message, NUL-terminated into a fresh heap copy. */
static char *cur_str(cursor *c)
{
    uint32_t n = cur_u32(c);
    char *s;
    if (c->bad || (size_t)(c->end - c->p) < n) {
        c->bad = 1;
        return NULL;
    }
    s = at_malloc((size_t)n + 1);
    if (s == NULL) {
        c->bad = 1;
        return NULL;
    }
    memcpy(s, c->p, n);
    s[n] = 0;
    c->p += n;
    return s;
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *q = p;
    while (n > 0) {
        ssize_t w = write(fd, q, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        q += w;
        n -= (size_t)w;
    }
    return 0;
}

static int read_all(int fd, void *p, size_t n)
{
    char *q = p;
    while (n > 0) {
        ssize_t r = read(fd, q, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        q += r;
        n -= (size_t)r;
    }
    return 0;
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
    kn_ir *ir = NULL;
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
        err = kn_lower(st, &ir, errmsg, errmsg_size);
    if (err == AT_OK)
        err = kn_build(ir, &c->target, entry[0] ? entry : NULL, out, errmsg, errmsg_size);
    kn_ir_free(ir);
    ss_state_free(st);
    return err;
}

int tn_build_worker_main(void)
{
    build_cache cache;
    memset(&cache, 0, sizeof cache);
    signal(SIGPIPE, SIG_IGN);
    for (;;) {
        uint8_t hdr[4];
        uint32_t n;
        uint8_t *msg;
        cursor c;
        int64_t id;
        char *target, *dag, *state, *entry, errmsg[1024] = "";
        kn_artifact *a = NULL;
        at_err err;
        at_buf out;
        if (read_all(0, hdr, 4) != 0)
            break;
        n = rd_u32(hdr);
        if (n > MAX_MSG || (msg = at_malloc(n ? n : 1)) == NULL || read_all(0, msg, n) != 0)
            break;
        c.p = msg;
        c.end = msg + n;
        c.bad = 0;
        id = cur_i64(&c);
        target = cur_str(&c);
        dag = cur_str(&c);
        state = cur_str(&c);
        entry = cur_str(&c);
        if (c.bad) {
            err = AT_EPROTO;
            snprintf(errmsg, sizeof errmsg, "malformed build request");
        } else {
            double t0 = at_time_mono_s();
            err = build_one(&cache, target, dag, state, entry, &a, errmsg, sizeof errmsg);
            if (err == AT_OK)
                a->compile_s = at_time_mono_s() - t0;
        }
        at_free(target);
        at_free(dag);
        at_free(state);
        at_free(entry);
        at_free(msg);
        at_buf_init(&out);
        put_u32(&out, 0); /* length, patched below */
        put_i64(&out, id);
        put_u32(&out, (uint32_t)err);
        put_str(&out, errmsg);
        if (a)
            kn_artifact_pack(a, &out);
        kn_artifact_free(a);
        if (out.err) {
            at_buf_fini(&out);
            break;
        }
        {
            uint32_t len = (uint32_t)(out.len - 4);
            uint8_t l[4] = {(uint8_t)len, (uint8_t)(len >> 8), (uint8_t)(len >> 16),
                            (uint8_t)(len >> 24)};
            memcpy(out.data, l, 4);
        }
        if (write_all(1, out.data, out.len) != 0) {
            at_buf_fini(&out);
            break;
        }
        at_buf_fini(&out);
    }
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
    put_u32(&p->req, 0);
    put_i64(&p->req, r->id);
    put_str(&p->req, r->target);
    put_str(&p->req, r->dag_text);
    put_str(&p->req, r->state_json);
    put_str(&p->req, r->entry ? r->entry : "");
    if (p->req.err) {
        at_buf_fini(&p->req);
        return AT_ENOMEM;
    }
    {
        uint32_t len = (uint32_t)(p->req.len - 4);
        uint8_t l[4] = {(uint8_t)len, (uint8_t)(len >> 8), (uint8_t)(len >> 16),
                        (uint8_t)(len >> 24)};
        memcpy(p->req.data, l, 4);
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

/* Parse a complete result in w->in. */
static void deliver(tn_builder *b, worker *w, tn_build_fn fn, void *ctx)
{
    cursor c = {(const uint8_t *)w->in.data + 4, (const uint8_t *)w->in.data + w->in.len, 0};
    tn_build_res r;
    char *msg;
    memset(&r, 0, sizeof r);
    r.id = cur_i64(&c);
    r.err = (at_err)cur_u32(&c);
    msg = cur_str(&c);
    r.build_s = at_time_mono_s() - w->started;
    if (msg)
        snprintf(r.errmsg, sizeof r.errmsg, "%s", msg);
    at_free(msg);
    if (c.bad || r.id != w->id) {
        r.id = w->id;
        r.err = AT_EPROTO;
        snprintf(r.errmsg, sizeof r.errmsg, "a build worker sent a malformed result");
    } else if (r.err == AT_OK &&
               kn_artifact_unpack(c.p, (size_t)(c.end - c.p), &r.art, r.errmsg,
                                  sizeof r.errmsg) != AT_OK) {
        r.err = AT_EPROTO;
    }
    at_buf_reset(&w->in);
    w->busy = 0;
    b->n_busy--;
    b->n_built++;
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
        if (write_all(w->to, b->q[0].req.data, b->q[0].req.len) != 0) {
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
                if (need > MAX_MSG) {
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
