/* cost_model/cm_measure.c -- measuring states on this host, for data sets: lower, build
** for the host target, load with the kernel runtime, check the output against the naive
** schedule's, time with kn_rt_time; and 'cm_dataset_random', which samples random states
** of a task, measures them and stores the results in a records store.
**
** This is the local path of 'tuner dataset' and of the cost model's tests: kernels run in
** this process (no sandbox), so it is for schedules the schedule space produced, which
** lower and compute correctly by the project's invariants.  Noise: every repeat lasts at
** least min_repeat_ms, and the fastest repeat is the figure that matters (another process
** taking the core only ever adds time); when the two fastest repeats disagree by more than
** 10%, the state is timed again, at most twice, and the attempt with the fastest repeat
** is kept. */
#include "cost_model/cost_model_int.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#define CHECK_TOL 1e-4 /* the project's float32 error bound */
#define SLOW_S 0.25    /* seconds per call above which one run is the measurement */

struct cm_measurer {
    ss_dag *dag;
    kn_target t;
    cm_measure_opts o;
    kn_rt_pool *pool;
    const kn_rt_par *par;
    kn_bufset bufs;          /* the task's arguments: inputs filled once, outputs written */
    void *ref[KN_MAX_ARGS];  /* the naive schedule's outputs (NULL for inputs) */
};

void cm_measure_opts_default(cm_measure_opts *o)
{
    o->n_threads = 0;
    o->repeat = 5;
    o->min_repeat_ms = 0.5;
    o->check = 1;
    o->n_build_threads = 0;
}

static void fail_text(char *errmsg, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail_text(char *errmsg, size_t n, const char *fmt, ...)
{
    va_list ap;
    if (errmsg == NULL || n == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(errmsg, n, fmt, ap);
    va_end(ap);
}

/* One loaded artifact, ready to call: module, rewritten weights, workspace. */
typedef struct loaded {
    kn_rt_module *m;
    kn_rt_kernel_fn fn;
    void *args[KN_MAX_ARGS];
    void *layout[KN_MAX_ARGS];
    void *ws;
} loaded;

static void unload(loaded *l)
{
    for (int i = 0; i < KN_MAX_ARGS; i++)
        kn_rt_free(l->layout[i]);
    kn_rt_free(l->ws);
    kn_rt_module_free(l->m);
    memset(l, 0, sizeof *l);
}

/* Load 'a', run its pre-transform of rewritten weights (if any) on 'bufs'; 'status' gets
** the measure code of a failure.  AT_OK, or the failure with text in errmsg. */
static at_err load(const kn_artifact *a, kn_bufset *bufs, const kn_rt_par *par, loaded *l,
                   int *status, char *errmsg, size_t errmsg_size)
{
    kn_rt_kernel_fn pre = NULL;
    int64_t ws_bytes = a->ws_fixed + a->ws_per_thread * par->n_threads;
    at_err err;
    memset(l, 0, sizeof *l);
    *status = AT_MEASURE_COMPILE_DEVICE;
    if ((err = kn_rt_module_load(a->obj, a->obj_size, NULL, &l->m, errmsg, errmsg_size)) !=
        AT_OK)
        return err;
    l->fn = (kn_rt_kernel_fn)kn_rt_module_sym(l->m, a->entry);
    if (a->pre_entry[0])
        pre = (kn_rt_kernel_fn)kn_rt_module_sym(l->m, a->pre_entry);
    if (l->fn == NULL || (a->pre_entry[0] && pre == NULL)) {
        fail_text(errmsg, errmsg_size, "the object has no symbol %s",
                  l->fn ? a->pre_entry : a->entry);
        unload(l);
        return AT_ELOAD;
    }
    *status = AT_MEASURE_RUNTIME_DEVICE;
    for (int i = 0; i < a->n_args; i++) {
        l->args[i] = bufs->ptr[i];
        if (a->kernel_src[i] >= 0) {
            int64_t n = 1;
            for (int d = 0; d < a->kernel_args[i].n_dims; d++)
                n *= a->kernel_args[i].shape[d];
            l->layout[i] =
                kn_rt_alloc((size_t)n * (size_t)at_dtype_bytes(a->kernel_args[i].dtype));
            if (l->layout[i] == NULL) {
                unload(l);
                return AT_ENOMEM;
            }
            l->args[i] = l->layout[i];
        }
    }
    if (pre) {
        void *pargs[2 * KN_MAX_ARGS];
        int k = 0;
        for (int j = 0; j < a->n_pre; j++)
            pargs[k++] = bufs->ptr[a->pre_src[j]];
        for (int j = 0; j < a->n_pre; j++) {
            /* the new layout of weight pre_src[j]: the kernel argument made from it */
            void *p = NULL;
            for (int i = 0; i < a->n_args; i++)
                if (a->kernel_src[i] == a->pre_src[j])
                    p = l->layout[i];
            if (p == NULL) {
                fail_text(errmsg, errmsg_size,
                          "the artifact's pre-transform writes a layout no argument takes");
                *status = AT_MEASURE_COMPILE_DEVICE;
                unload(l);
                return AT_ELOAD;
            }
            pargs[k++] = p;
        }
        if (pre(pargs, NULL, par) != 0) {
            fail_text(errmsg, errmsg_size, "the pre-transform of the weights failed");
            unload(l);
            return AT_EIO;
        }
    }
    if (ws_bytes > 0 && (l->ws = kn_rt_alloc((size_t)ws_bytes)) == NULL) {
        unload(l);
        return AT_ENOMEM;
    }
    *status = AT_MEASURE_NO_ERROR;
    return AT_OK;
}

at_err cm_measurer_new(ss_dag *dag, const kn_target *t, const cm_measure_opts *o,
                       cm_measurer **out, char *errmsg, size_t errmsg_size)
{
    cm_measurer *m;
    ss_state *naive = NULL;
    kn_ir *ir = NULL;
    kn_artifact *a = NULL;
    loaded l;
    int status;
    at_err err;
    *out = NULL;
    if (!t->is_host) {
        fail_text(errmsg, errmsg_size, "target '%s' is not this host: measuring here needs "
                  "a host target", t->text);
        return AT_EINVAL;
    }
    if ((m = at_calloc(1, sizeof *m)) == NULL)
        return AT_ENOMEM;
    m->dag = ss_dag_ref(dag);
    m->t = *t;
    if (o)
        m->o = *o;
    else
        cm_measure_opts_default(&m->o);
    if (m->o.repeat < 1)
        m->o.repeat = 1;
    if (m->o.repeat > (int)AT_ARRAY_LEN(((cm_measure_result *)0)->costs))
        m->o.repeat = (int)AT_ARRAY_LEN(((cm_measure_result *)0)->costs);
    if ((err = kn_rt_pool_new(m->o.n_threads > 0 ? m->o.n_threads : t->n_cores, &m->pool)) !=
        AT_OK)
        goto fail;
    m->par = kn_rt_pool_par(m->pool);
    /* the reference: the naive schedule, run once */
    if ((err = ss_state_new(dag, &naive)) != AT_OK ||
        (err = kn_lower(naive, &ir, errmsg, errmsg_size)) != AT_OK ||
        (err = kn_build(ir, t, NULL, &a, errmsg, errmsg_size)) != AT_OK ||
        (err = kn_bufset_alloc(a, 1, &m->bufs)) != AT_OK)
        goto fail;
    if (!m->o.check)
        goto done; /* the buffers are all that is needed */
    if ((err = load(a, &m->bufs, m->par, &l, &status, errmsg, errmsg_size)) != AT_OK)
        goto fail;
    if (l.fn(l.args, l.ws, m->par) != 0) {
        unload(&l);
        fail_text(errmsg, errmsg_size, "the naive schedule of the task failed to run");
        err = AT_EIO;
        goto fail;
    }
    unload(&l);
    for (int i = 0; i < a->n_args; i++) {
        if (!a->args[i].is_output)
            continue;
        if ((m->ref[i] = kn_rt_alloc(m->bufs.n_bytes[i])) == NULL) {
            err = AT_ENOMEM;
            goto fail;
        }
        memcpy(m->ref[i], m->bufs.ptr[i], m->bufs.n_bytes[i]);
    }
done:
    kn_artifact_free(a);
    kn_ir_free(ir);
    ss_state_free(naive);
    *out = m;
    return AT_OK;
fail:
    kn_artifact_free(a);
    kn_ir_free(ir);
    ss_state_free(naive);
    cm_measurer_free(m);
    return err;
}

void cm_measurer_free(cm_measurer *m)
{
    if (m == NULL)
        return;
    for (int i = 0; i < KN_MAX_ARGS; i++)
        kn_rt_free(m->ref[i]);
    kn_bufset_free(&m->bufs);
    kn_rt_pool_free(m->pool);
    ss_dag_unref(m->dag);
    at_free(m);
}

static void two_fastest(const double *c, int n, double *lo, double *lo2)
{
    *lo = *lo2 = INFINITY;
    for (int i = 0; i < n; i++) {
        if (c[i] < *lo) {
            *lo2 = *lo;
            *lo = c[i];
        } else if (c[i] < *lo2) {
            *lo2 = c[i];
        }
    }
}

static void set_fail(cm_measure_result *r, int status, const char *text)
{
    r->status = status;
    r->n_costs = 1;
    r->costs[0] = AT_MEASURE_FAIL_COST;
    r->mean_s = AT_MEASURE_FAIL_COST;
    r->min_s = AT_MEASURE_FAIL_COST;
    snprintf(r->error_text, sizeof r->error_text, "%s", text);
}

/* Lower and build one state (thread-safe): *a, or a failure in r. */
static at_err build_one(const cm_measurer *m, const ss_state *st, kn_artifact **a,
                        cm_measure_result *r)
{
    kn_ir *ir = NULL;
    char err[512];
    at_err e;
    *a = NULL;
    memset(r, 0, sizeof *r);
    err[0] = 0;
    if ((e = kn_lower(st, &ir, err, sizeof err)) == AT_OK)
        e = kn_build(ir, &m->t, NULL, a, err, sizeof err);
    kn_ir_free(ir);
    if (e == AT_ENOMEM)
        return e;
    if (e != AT_OK)
        set_fail(r, AT_MEASURE_COMPILE_HOST, err);
    else if ((*a)->n_args != m->bufs.n) {
        set_fail(r, AT_MEASURE_COMPILE_HOST, "the artifact's arguments are not the task's");
        kn_artifact_free(*a);
        *a = NULL;
    }
    return AT_OK;
}

/* Load, check and time a built artifact (one thread at a time: it owns the cores). */
static at_err time_one(cm_measurer *m, const kn_artifact *a, cm_measure_result *r)
{
    loaded l;
    double first_s;
    char err[512];
    int status;
    at_err e;
    memset(&l, 0, sizeof l);
    err[0] = 0;
    if ((e = load(a, &m->bufs, m->par, &l, &status, err, sizeof err)) != AT_OK) {
        if (e == AT_ENOMEM)
            return e;
        set_fail(r, status, err);
        return AT_OK;
    }
    /* run once on zeroed outputs and compare */
    for (int i = 0; i < a->n_args; i++)
        if (m->ref[i])
            memset(m->bufs.ptr[i], 0, m->bufs.n_bytes[i]);
    first_s = at_time_mono_s();
    if (l.fn(l.args, l.ws, m->par) != 0) {
        set_fail(r, AT_MEASURE_RUNTIME_DEVICE, "the kernel returned non-zero");
        goto out;
    }
    first_s = at_time_mono_s() - first_s;
    if (m->o.check) {
        for (int i = 0; i < a->n_args; i++) {
            double re;
            if (m->ref[i] == NULL)
                continue;
            re = kn_rt_rel_err(m->bufs.ptr[i], m->ref[i], m->bufs.dtype[i], m->bufs.n_elems[i]);
            if (!(re <= CHECK_TOL)) {
                snprintf(err, sizeof err, "output %d differs from the naive schedule's "
                         "(relative error %.3g)", i, re);
                set_fail(r, AT_MEASURE_WRONG_ANSWER, err);
                goto out;
            }
        }
    }
    /* a state that needs longer than SLOW_S per call is far from the best: its first run
    ** is its cost (data sets of big kernels would otherwise take hours) */
    if (first_s > SLOW_S) {
        r->status = AT_MEASURE_NO_ERROR;
        r->n_costs = 1;
        r->costs[0] = r->mean_s = r->min_s = first_s;
        goto out;
    }
    /* time it (the check run warmed it up): the fastest repeat is the cost (a busy host
    ** only ever adds time); when the two fastest repeats disagree by more than 10%, time
    ** again (at most twice) and keep the attempt with the fastest repeat */
    {
        kn_rt_time_opts to = {1, m->o.repeat, m->o.min_repeat_ms, 0, 0};
        double best[16], best_min = INFINITY;
        for (int attempt = 0; attempt < 3; attempt++) {
            double costs[16], lo, lo2;
            int32_t rc;
            if ((e = kn_rt_time(l.fn, l.args, l.ws, m->par, &to, 0, NULL, costs, &rc)) != AT_OK)
                goto out;
            if (rc != 0) {
                set_fail(r, AT_MEASURE_RUNTIME_DEVICE, "the kernel returned non-zero");
                goto out;
            }
            two_fastest(costs, m->o.repeat, &lo, &lo2);
            if (lo < best_min) {
                best_min = lo;
                memcpy(best, costs, sizeof costs);
            }
            if (m->o.repeat < 2 || lo2 <= 1.1 * lo)
                break;
        }
        r->status = AT_MEASURE_NO_ERROR;
        r->n_costs = m->o.repeat;
        r->mean_s = 0;
        r->min_s = best_min;
        for (int i = 0; i < m->o.repeat; i++) {
            r->costs[i] = best[i];
            r->mean_s += best[i] / m->o.repeat;
        }
    }
out:
    unload(&l);
    return e;
}

at_err cm_measurer_run(cm_measurer *m, const ss_state *st, cm_measure_result *r)
{
    return cm_measurer_run_batch(m, &st, 1, r);
}

typedef struct build_work {
    const cm_measurer *m;
    const ss_state *const *states;
    kn_artifact **arts;
    cm_measure_result *res;
    int n;
    _Atomic int next;
    _Atomic int nomem;
} build_work;

static void *build_worker(void *p)
{
    build_work *w = p;
    for (;;) {
        int i = w->next++;
        if (i >= w->n)
            break;
        if (build_one(w->m, w->states[i], &w->arts[i], &w->res[i]) != AT_OK)
            w->nomem = 1;
    }
    return NULL;
}

at_err cm_measurer_run_batch(cm_measurer *m, const ss_state *const *states, int n,
                             cm_measure_result *res)
{
    build_work w;
    pthread_t th[16];
    int n_th = m->o.n_build_threads > 0 ? m->o.n_build_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    int started = 0;
    at_err err = AT_OK;
    if (n <= 0)
        return AT_OK;
    memset(&w, 0, sizeof w);
    w.m = m;
    w.states = states;
    w.res = res;
    w.n = n;
    if ((w.arts = at_calloc((size_t)n, sizeof *w.arts)) == NULL)
        return AT_ENOMEM;
    n_th = AT_MAX(1, AT_MIN(AT_MIN(n_th, n), (int)AT_ARRAY_LEN(th)));
    /* build everything first (in parallel), then time alone: no compile competes with a
    ** kernel being timed */
    for (int t = 1; t < n_th; t++)
        if (pthread_create(&th[started], NULL, build_worker, &w) == 0)
            started++;
    build_worker(&w);
    for (int t = 0; t < started; t++)
        pthread_join(th[t], NULL);
    if (w.nomem)
        err = AT_ENOMEM;
    for (int i = 0; i < n && err == AT_OK; i++)
        if (w.arts[i])
            err = time_one(m, w.arts[i], &res[i]);
    for (int i = 0; i < n; i++)
        kn_artifact_free(w.arts[i]);
    at_free(w.arts);
    return err;
}

/* ---- the host as a records device ---- */

static void trim(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = 0;
}

void cm_host_device(rec_device *d, char arch[32], char model[128], char os[128])
{
    struct utsname u;
    FILE *f;
    char line[1024];
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(arch, 32, "unknown");
    snprintf(os, 128, "unknown");
    snprintf(model, 128, "unknown");
    if (uname(&u) == 0) {
        snprintf(arch, 32, "%.31s", u.machine);
        snprintf(os, 128, "%.127s", u.release);
    }
    if ((f = fopen("/proc/cpuinfo", "r")) != NULL) {
        while (fgets(line, sizeof line, f)) {
            char *c = strchr(line, ':');
            if (c && (strncmp(line, "model name", 10) == 0 || strncmp(line, "Model", 5) == 0)) {
                c++;
                while (*c == ' ')
                    c++;
                snprintf(model, 128, "%.127s", c);
                trim(model);
                break;
            }
        }
        fclose(f);
    }
    d->arch = arch;
    d->model = model[0] ? model : "unknown";
    d->n_cores = n > 0 ? (int)n : 1;
    d->os = os;
    d->driver = "";
}

/* ---- random data sets ---- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

at_err cm_dataset_random(rec_store *st, ss_dag *dag, const kn_target *t, const char *device_key,
                         int n, uint64_t seed, const cm_measure_opts *o, const char *command_line,
                         cm_dataset_stats *stats, char *errmsg, size_t errmsg_size)
{
    enum { CHUNK = 64 };
    cm_measurer *ms = NULL;
    ss_space *sp = NULL;
    ss_hw hw;
    at_rng rng;
    at_buf dag_text, text;
    at_buf json[CHUNK];
    ss_state *batch[CHUNK];
    cm_measure_result res[CHUNK];
    uint64_t *seen = NULL;
    int n_seen = 0, attempts = 0, n_done = 0, exhausted = 0;
    int64_t task_id, run_id = 0;
    char uuid[REC_UUID_LEN + 1], arch[32], model[128], os[128];
    rec_device dev;
    cm_dataset_stats local;
    double t0 = at_time_mono_s();
    at_err err;
    if (stats == NULL)
        stats = &local;
    memset(stats, 0, sizeof *stats);
    if (errmsg && errmsg_size)
        errmsg[0] = 0;
    if (n < 0 || device_key == NULL || !device_key[0])
        return AT_EINVAL;
    at_buf_init(&dag_text);
    at_buf_init(&text);
    for (int i = 0; i < CHUNK; i++) {
        at_buf_init(&json[i]);
        batch[i] = NULL;
    }
    cm_host_device(&dev, arch, model, os);
    ss_hw_cpu(&hw, t->n_cores, t->vector_bytes, t->l1_bytes, t->l2_bytes);
    ss_dag_print(dag, &dag_text);
    if (dag_text.err || (seen = at_malloc((size_t)(n + 1) * sizeof *seen)) == NULL) {
        err = AT_ENOMEM;
        goto out;
    }
    if ((err = ss_space_new(dag, &hw, NULL, &sp, errmsg, errmsg_size)) != AT_OK ||
        (err = cm_measurer_new(dag, t, o, &ms, errmsg, errmsg_size)) != AT_OK)
        goto out;
    {
        rec_task task = {dag->key, t->text, device_key, dag_text.data, dag->flops};
        if ((err = rec_task_add(st, &task, &task_id)) != AT_OK ||
            (err = rec_run_begin(st, command_line ? command_line : "dataset", "", &run_id,
                                 uuid)) != AT_OK) {
            if (errmsg)
                snprintf(errmsg, errmsg_size, "%s", rec_store_errmsg(st));
            goto out;
        }
    }
    at_rng_seed(&rng, seed);
    while (n_done < n && !exhausted && err == AT_OK) {
        int nb = 0;
        rec_result rows[CHUNK];
        char jobs[CHUNK][96];
        /* a chunk of distinct new states */
        while (nb < CHUNK && n_done + nb < n) {
            ss_state *s = NULL;
            uint64_t h;
            if (++attempts > 20 * n + 100) {
                exhausted = 1; /* the space has fewer distinct states than asked for */
                break;
            }
            err = ss_space_sample(sp, &rng, &s);
            if (err == AT_ESCHED) {
                err = AT_OK;
                continue;
            }
            if (err != AT_OK)
                break;
            at_buf_reset(&text);
            ss_state_print(s, &text);
            if (text.err) {
                ss_state_free(s);
                err = AT_ENOMEM;
                break;
            }
            h = at_hash64(text.data, text.len);
            if (bsearch(&h, seen, (size_t)n_seen, sizeof *seen, cmp_u64)) {
                stats->n_duplicate++;
                ss_state_free(s);
                continue;
            }
            seen[n_seen++] = h;
            qsort(seen, (size_t)n_seen, sizeof *seen, cmp_u64);
            batch[nb++] = s;
        }
        if (err == AT_OK && nb > 0)
            err = cm_measurer_run_batch(ms, (const ss_state *const *)batch, nb, res);
        for (int i = 0; i < nb && err == AT_OK; i++) {
            at_buf_reset(&json[i]);
            ss_state_to_json(batch[i], &json[i]);
            if (json[i].err) {
                err = AT_ENOMEM;
                break;
            }
            snprintf(jobs[i], sizeof jobs[i], "dataset-%s-%d", uuid, n_done + i);
            memset(&rows[i], 0, sizeof rows[i]);
            rows[i].task_id = task_id;
            rows[i].job_id = jobs[i];
            rows[i].state = json[i].data;
            rows[i].costs = res[i].costs;
            rows[i].n_costs = res[i].n_costs;
            rows[i].status = res[i].status;
            rows[i].error_text = res[i].error_text;
            rows[i].device = &dev;
            rows[i].agent = "local";
            rows[i].run_id = run_id;
            rows[i].trial = n_done + i;
        }
        if (err == AT_OK && nb > 0 && (err = rec_put(st, rows, nb, NULL)) != AT_OK && errmsg)
            snprintf(errmsg, errmsg_size, "%s", rec_store_errmsg(st));
        for (int i = 0; i < nb; i++) {
            if (err == AT_OK) {
                stats->n_measured++;
                if (res[i].status != 0)
                    stats->n_failed++;
            }
            ss_state_free(batch[i]);
            batch[i] = NULL;
        }
        n_done += nb;
    }
    rec_run_end(st, run_id, err == AT_OK ? "done" : "failed");
out:
    stats->seconds = at_time_mono_s() - t0;
    cm_measurer_free(ms);
    ss_space_free(sp);
    at_free(seen);
    at_buf_fini(&dag_text);
    at_buf_fini(&text);
    for (int i = 0; i < CHUNK; i++) {
        at_buf_fini(&json[i]);
        ss_state_free(batch[i]);
    }
    return err;
}
