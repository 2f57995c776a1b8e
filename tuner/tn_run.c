/* tuner/tn_run.c -- running a whole model here, and choosing each task's schedule.
**
** The plan is tn_model's steps in topological order: a TASK step calls the task's kernel on
** the buffers of its arguments (the DAG's inputs in declaration order, then the output); a
** TRANSPOSE or CONCAT step is a copy done here.  Reshape, Flatten, Squeeze, Unsqueeze,
** Identity and Dropout are no steps at all: their output shares its input's buffer.
**
** Buffers: one 64-byte aligned buffer per root tensor that a step reads or writes.
** Constants are copied into theirs once; graph inputs and weights given without values are
** filled with kn_rt_fill from the seed (stream = their rank among such tensors).  Kernels
** whose schedule rewrote a weight's layout get the rewritten copy, made once before the runs
** by the artifact's pre-transform (weights do not change between runs).
**
** tuner run compares the model run with the chosen kernels against the same model run
** with every task's naive kernel (the naive lowering of its DAG), output by output. */
#include "tuner/tn_graph.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

/* ---- schedules ---- */

at_err tn_task_schedule(const tn_task *t, rec_store *st, const char *target,
                        const char *device_key, ss_state **out, double *cost_s, char *errmsg,
                        size_t errmsg_size)
{
    rec_best_result *res = NULL;
    const rec_best_row *best = NULL;
    at_err err;
    *out = NULL;
    if (cost_s)
        *cost_s = 0;
    if (st) {
        rec_best_query q;
        memset(&q, 0, sizeof q);
        q.workload_key = t->key;
        q.target = target;
        q.device_key = device_key;
        q.top = 1;
        q.replay = tn_replay_check;
        if ((err = rec_best(st, &q, &res)) != AT_OK) {
            snprintf(errmsg, errmsg_size, "records: %s", rec_store_errmsg(st));
            return err;
        }
        /* several devices under the key (or any key): the fastest */
        for (int i = 0; i < res->n_rows; i++)
            if (res->rows[i].rank == 1 && res->rows[i].rec.status == 0 &&
                (best == NULL || res->rows[i].rec.mean < best->rec.mean))
                best = &res->rows[i];
    }
    if (best) {
        err = ss_state_from_json(t->dag, best->rec.state, strlen(best->rec.state), out, errmsg,
                                 errmsg_size);
        if (err == AT_OK && cost_s)
            *cost_s = best->rec.mean;
    } else {
        err = ss_state_new(t->dag, out);
    }
    rec_best_free(res);
    return err;
}

at_err tn__build_state(const ss_state *st, const kn_target *target, const char *entry,
                       kn_artifact **out, char *errmsg, size_t errmsg_size)
{
    kn_ir *ir = NULL;
    at_err err;
    *out = NULL;
    if ((err = kn_lower(st, &ir, errmsg, errmsg_size)) != AT_OK)
        return err;
    err = kn_build(ir, target, entry, out, errmsg, errmsg_size);
    kn_ir_free(ir);
    return err;
}

/* ---- kernels ---- */

typedef int32_t (*lib_run_fn)(int task, void *const *bufs);

typedef struct kset {
    int n;
    kn_artifact **art;     /* per task (NULL in library mode) */
    kn_rt_module **mod;
    kn_rt_kernel_fn *fn, *pre;
    int *lib_task;         /* library mode: the library's index of each task */
    lib_run_fn lib_run;
    void ***layout;        /* per step: rewritten weights per kernel argument (or NULL) */
} kset;

static void kset_fini(kset *k, int n_steps)
{
    for (int i = 0; i < k->n; i++) {
        if (k->mod)
            kn_rt_module_free(k->mod[i]);
        if (k->art)
            kn_artifact_free(k->art[i]);
    }
    for (int s = 0; k->layout && s < n_steps; s++) {
        for (int a = 0; k->layout[s] && a < KN_MAX_ARGS; a++)
            kn_rt_free(k->layout[s][a]);
        at_free(k->layout[s]);
    }
    at_free(k->layout);
    at_free(k->art);
    at_free(k->mod);
    at_free(k->fn);
    at_free(k->pre);
    at_free(k->lib_task);
    memset(k, 0, sizeof *k);
}

static at_err kset_alloc(kset *k, int n, int n_steps)
{
    k->n = n;
    k->art = at_calloc((size_t)n + 1, sizeof *k->art);
    k->mod = at_calloc((size_t)n + 1, sizeof *k->mod);
    k->fn = at_calloc((size_t)n + 1, sizeof *k->fn);
    k->pre = at_calloc((size_t)n + 1, sizeof *k->pre);
    k->lib_task = at_calloc((size_t)n + 1, sizeof *k->lib_task);
    k->layout = at_calloc((size_t)n_steps + 1, sizeof *k->layout);
    return k->art && k->mod && k->fn && k->pre && k->lib_task && k->layout ? AT_OK : AT_ENOMEM;
}

/* Build (for the host) and load the kernel of each task: the chosen schedule's, or the
** naive one when 'naive' or when there is no record. */
static at_err kset_build(kset *k, const tn_model *m, const tn_run_opts *o, const kn_target *tgt,
                         int naive, tn_run_report *rep, char *errmsg, size_t errmsg_size)
{
    const tn_task_list *tl = m->tasks;
    double t0 = at_time_mono_s();
    at_err err = AT_OK;
    for (int i = 0; i < tl->n_tasks && err == AT_OK; i++) {
        ss_state *st = NULL;
        char entry[48], msg[512];
        double cost = 0;
        snprintf(entry, sizeof entry, "tn_task%d", i);
        err = naive ? ss_state_new(tl->tasks[i].dag, &st)
                    : tn_task_schedule(&tl->tasks[i], o->store, tgt->text, o->device_key, &st,
                                       &cost, msg, sizeof msg);
        if (err != AT_OK) {
            snprintf(errmsg, errmsg_size, "task %d (%s): %s", i, tl->tasks[i].name,
                     err == AT_ENOMEM ? "out of memory" : msg);
            break;
        }
        if (!naive) {
            if (st->n_steps > 0)
                rep->n_tuned++;
            else
                rep->n_naive++;
        }
        err = tn__build_state(st, tgt, entry, &k->art[i], msg, sizeof msg);
        ss_state_free(st);
        if (err == AT_OK)
            err = kn_rt_module_load(k->art[i]->obj, k->art[i]->obj_size, NULL, &k->mod[i], msg,
                                    sizeof msg);
        if (err == AT_OK) {
            k->fn[i] = (kn_rt_kernel_fn)kn_rt_module_sym(k->mod[i], k->art[i]->entry);
            if (k->art[i]->pre_entry[0])
                k->pre[i] = (kn_rt_kernel_fn)kn_rt_module_sym(k->mod[i], k->art[i]->pre_entry);
            if (!naive && k->art[i]->pre_entry[0])
                rep->n_rewritten++;
            if (k->fn[i] == NULL || (k->art[i]->pre_entry[0] && k->pre[i] == NULL)) {
                snprintf(msg, sizeof msg, "the object has no entry %s", k->art[i]->entry);
                err = AT_ELOAD;
            }
        }
        if (err != AT_OK)
            snprintf(errmsg, errmsg_size, "task %d (%s): %s", i, tl->tasks[i].name,
                     err == AT_ENOMEM ? "out of memory" : msg);
    }
    rep->build_s += at_time_mono_s() - t0;
    return err;
}

/* ---- the library of tn_export_lib ---- */

typedef struct lib {
    void *h;
    lib_run_fn run;
    int (*n_tasks)(void);
    const char *(*key)(int);
    int (*set_threads)(int);
} lib;

static void *lib_sym(lib *l, const char *prefix, const char *name)
{
    char s[160];
    snprintf(s, sizeof s, "%s_%s", prefix, name);
    return dlsym(l->h, s);
}

static at_err lib_open(lib *l, const char *path, kset *k, const tn_model *m, int n_threads,
                       char *errmsg, size_t errmsg_size)
{
    char prefix[96], full[4096];
    int n;
    memset(l, 0, sizeof *l);
    tn__lib_prefix(path, prefix, sizeof prefix);
    /* a name without '/' would be looked up on the library path, not here */
    if (realpath(path, full) == NULL) {
        snprintf(errmsg, errmsg_size, "%s: %s", path, strerror(errno));
        return AT_ELOAD;
    }
    if ((l->h = dlopen(full, RTLD_NOW | RTLD_LOCAL)) == NULL) {
        snprintf(errmsg, errmsg_size, "%s", dlerror());
        return AT_ELOAD;
    }
    l->run = (lib_run_fn)lib_sym(l, prefix, "task_run");
    l->n_tasks = (int (*)(void))lib_sym(l, prefix, "n_tasks");
    l->key = (const char *(*)(int))lib_sym(l, prefix, "task_key");
    l->set_threads = (int (*)(int))lib_sym(l, prefix, "set_threads");
    if (!l->run || !l->n_tasks || !l->key || !l->set_threads) {
        snprintf(errmsg, errmsg_size, "%s has no %s_task_run, %s_n_tasks, %s_task_key or "
                 "%s_set_threads (the prefix comes from the file name)", path, prefix, prefix,
                 prefix, prefix);
        return AT_ELOAD;
    }
    n = l->n_tasks();
    for (int i = 0; i < m->tasks->n_tasks; i++) {
        k->lib_task[i] = -1;
        for (int j = 0; j < n; j++)
            if (strcmp(l->key(j), m->tasks->tasks[i].key) == 0)
                k->lib_task[i] = j;
        if (k->lib_task[i] < 0) {
            snprintf(errmsg, errmsg_size, "%s has no kernel for task %d (%s, key %s): it was "
                     "made for another model", path, i, m->tasks->tasks[i].name,
                     m->tasks->tasks[i].key);
            return AT_EINVAL;
        }
    }
    if (l->set_threads(n_threads) != 0)
        l->set_threads(1);
    k->lib_run = l->run;
    return AT_OK;
}

/* ---- the executor ---- */

typedef struct exec {
    const tn_model *m;
    const tn_graph *g;
    void **buf;            /* per tensor: the root's buffer */
    kn_rt_pool *pool;
    const kn_rt_par *par;
    void *ws;
    int64_t ws_bytes;
} exec;

static int64_t tensor_bytes(const tn_tensor *t)
{
    return t->n_elems * (int64_t)at_dtype_bytes(t->dtype);
}

static at_err use_buffer(exec *x, int t, uint64_t seed, uint32_t *stream)
{
    const tn_graph *g = x->g;
    int r = tn__root(g, t);
    const tn_tensor *rt = &g->tensors[r];
    if (x->buf[r] == NULL) {
        if ((x->buf[r] = kn_rt_alloc((size_t)tensor_bytes(rt))) == NULL)
            return AT_ENOMEM;
        if (rt->data)
            memcpy(x->buf[r], rt->data, (size_t)tensor_bytes(rt));
        else if (rt->is_input)
            kn_rt_fill(x->buf[r], rt->dtype, rt->n_elems, seed, (*stream)++);
    }
    x->buf[t] = x->buf[r];
    return AT_OK;
}

static const int *step_tensors(const tn_model *m, const tn_step *s, int *n)
{
    const tn_node *nd = &m->g->nodes[s->node];
    if (s->kind == TN_STEP_TASK) {
        *n = s->n_args;
        return s->args;
    }
    *n = nd->n_in;
    return nd->in;
}

static at_err exec_init(exec *x, const tn_model *m, const tn_run_opts *o, char *errmsg,
                        size_t errmsg_size)
{
    const tn_graph *g = m->g;
    uint32_t stream = 0;
    at_err err;
    memset(x, 0, sizeof *x);
    x->m = m;
    x->g = g;
    if ((x->buf = at_calloc((size_t)g->n_tensors + 1, sizeof *x->buf)) == NULL)
        return AT_ENOMEM;
    /* graph inputs first, in their order, so their fill streams do not depend on the plan */
    for (int i = 0; i < g->n_inputs; i++)
        if ((err = use_buffer(x, g->inputs[i], o->seed, &stream)) != AT_OK)
            return err;
    for (int s = 0; s < m->n_steps; s++) {
        const tn_step *st = &m->steps[s];
        int n;
        const int *ts = step_tensors(m, st, &n);
        for (int k = 0; k < n; k++)
            if (ts[k] >= 0 && (err = use_buffer(x, ts[k], o->seed, &stream)) != AT_OK)
                return err;
        for (int k = 0; st->kind == TN_STEP_COPY && k < g->nodes[st->node].n_out; k++)
            if (g->nodes[st->node].out[k] >= 0 &&
                (err = use_buffer(x, g->nodes[st->node].out[k], o->seed, &stream)) != AT_OK)
                return err;
    }
    /* weights given as graph inputs without values (is_input): filled above; anything a
    ** step reads that nothing writes and that has no value is a bug of the plan */
    for (int i = 0; i < g->n_outputs; i++)
        if ((err = use_buffer(x, g->outputs[i], o->seed, &stream)) != AT_OK)
            return err;
    if ((err = kn_rt_pool_new(o->n_threads, &x->pool)) != AT_OK) {
        snprintf(errmsg, errmsg_size, "cannot start %d threads", o->n_threads);
        return err;
    }
    x->par = kn_rt_pool_par(x->pool);
    return AT_OK;
}

static void exec_fini(exec *x)
{
    if (x->buf) {
        for (int t = 0; t < x->g->n_tensors; t++)
            if (tn__root(x->g, t) == t)
                kn_rt_free(x->buf[t]);
    }
    at_free(x->buf);
    kn_rt_free(x->ws);
    kn_rt_pool_free(x->pool);
}

/* Workspace big enough for every kernel of 'k'; the rewritten weights of each step. */
static at_err kset_prepare(exec *x, kset *k, char *errmsg, size_t errmsg_size)
{
    const tn_model *m = x->m;
    for (int i = 0; i < k->n; i++) {
        const kn_artifact *a = k->art[i];
        int64_t need = a ? a->ws_fixed + a->ws_per_thread * x->par->n_threads : 0;
        if (need > x->ws_bytes) {
            kn_rt_free(x->ws);
            x->ws_bytes = 0;
            if ((x->ws = kn_rt_alloc((size_t)need)) == NULL)
                return AT_ENOMEM;
            x->ws_bytes = need;
        }
    }
    for (int s = 0; s < m->n_steps; s++) {
        const tn_step *st = &m->steps[s];
        const kn_artifact *a = st->kind == TN_STEP_TASK ? k->art[st->task] : NULL;
        void *pargs[2 * KN_MAX_ARGS];
        int n = 0;
        int32_t rc;
        if (a == NULL || !a->pre_entry[0])
            continue;
        if ((k->layout[s] = at_calloc(KN_MAX_ARGS, sizeof *k->layout[s])) == NULL)
            return AT_ENOMEM;
        for (int i = 0; i < a->n_args; i++) {
            int64_t e = 1;
            if (a->kernel_src[i] < 0)
                continue;
            for (int d = 0; d < a->kernel_args[i].n_dims; d++)
                e *= a->kernel_args[i].shape[d];
            k->layout[s][i] = kn_rt_alloc((size_t)e * (size_t)at_dtype_bytes(a->kernel_args[i].dtype));
            if (k->layout[s][i] == NULL)
                return AT_ENOMEM;
        }
        for (int j = 0; j < a->n_pre; j++)
            pargs[n++] = x->buf[st->args[a->pre_src[j]]];
        for (int i = 0; i < a->n_args; i++)
            if (a->kernel_src[i] >= 0)
                pargs[n++] = k->layout[s][i];
        if ((rc = k->pre[st->task](pargs, NULL, x->par)) != 0) {
            snprintf(errmsg, errmsg_size, "task %d: the weight pre-transform returned %d",
                     st->task, (int)rc);
            return AT_EIO;
        }
    }
    return AT_OK;
}

static void do_transpose(const exec *x, const tn_node *nd)
{
    const tn_tensor *in = &x->g->tensors[nd->in[0]], *out = &x->g->tensors[nd->out[0]];
    const float *src = x->buf[nd->in[0]];
    float *dst = x->buf[nd->out[0]];
    int64_t perm[TN_MAX_RANK], st[TN_MAX_RANK], idx[TN_MAX_RANK] = {0}, acc = 1;
    int r = in->rank;
    if (tn__attr_ints(nd, "perm", perm, TN_MAX_RANK) != r)
        for (int d = 0; d < r; d++)
            perm[d] = r - 1 - d;
    for (int d = r - 1; d >= 0; d--) {
        st[d] = acc;
        acc *= in->shape[d];
    }
    for (int64_t i = 0; i < out->n_elems; i++) {
        int64_t s = 0;
        for (int d = 0; d < r; d++)
            s += idx[d] * st[perm[d]];
        dst[i] = src[s];
        for (int d = r - 1; d >= 0; d--) {
            if (++idx[d] < out->shape[d])
                break;
            idx[d] = 0;
        }
    }
}

static void do_concat(const exec *x, const tn_node *nd)
{
    const tn_tensor *out = &x->g->tensors[nd->out[0]];
    int64_t axis = tn__attr_i(nd, "axis", 0), outer = 1, tail = 1, off = 0;
    char *dst = x->buf[nd->out[0]];
    if (axis < 0)
        axis += out->rank;
    for (int d = 0; d < axis; d++)
        outer *= out->shape[d];
    for (int d = (int)axis + 1; d < out->rank; d++)
        tail *= out->shape[d];
    for (int k = 0; k < nd->n_in; k++) {
        const tn_tensor *in = &x->g->tensors[nd->in[k]];
        const char *src = x->buf[nd->in[k]];
        int64_t row = in->shape[axis] * tail * 4;
        for (int64_t o = 0; o < outer; o++)
            memcpy(dst + (o * out->shape[axis] * tail + off) * 4, src + o * row, (size_t)row);
        off += in->shape[axis] * tail;
    }
}

static void do_gather(const exec *x, const tn_node *nd)
{
    const tn_tensor *in = &x->g->tensors[nd->in[0]], *ix = &x->g->tensors[nd->in[1]];
    int64_t axis = tn__attr_i(nd, "axis", 0), outer = 1, tail = 1, j = 0;
    const float *src = x->buf[nd->in[0]];
    float *dst = x->buf[nd->out[0]];
    if (axis < 0)
        axis += in->rank;
    for (int d = 0; d < axis; d++)
        outer *= in->shape[d];
    for (int d = (int)axis + 1; d < in->rank; d++)
        tail *= in->shape[d];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < ix->n_elems; i++) {
            int64_t k = ((const int64_t *)ix->data)[i];
            if (k < 0)
                k += in->shape[axis];
            memcpy(dst + (j++) * tail, src + (o * in->shape[axis] + k) * tail,
                   (size_t)tail * sizeof *dst);
        }
}

/* Slice and Split: regions of the input (the parameters were checked by inference). */
static void do_slices(const exec *x, const tn_node *nd)
{
    const tn_tensor *in = &x->g->tensors[nd->in[0]];
    char why[256];
    for (int k = 0; k < nd->n_out; k++) {
        int64_t lo[TN_MAX_RANK], step[TN_MAX_RANK], out[TN_MAX_RANK];
        at_err e = nd->kind == TN_OP_SLICE ? tn__slice_params(x->g, nd, in, lo, step, out, why,
                                                              sizeof why)
                                           : tn__split_params(x->g, nd, in, k, lo, step, out,
                                                              why, sizeof why);
        if (nd->out[k] >= 0 && e == AT_OK)
            tn__copy_region(x->buf[nd->out[k]], x->buf[nd->in[0]], in, lo, step, out, 4);
    }
}

/* One run of the whole model with kernel set k. */
static at_err exec_run(exec *x, const kset *k, char *errmsg, size_t errmsg_size)
{
    const tn_model *m = x->m;
    for (int s = 0; s < m->n_steps; s++) {
        const tn_step *st = &m->steps[s];
        void *bufs[KN_MAX_ARGS];
        int32_t rc;
        if (st->kind == TN_STEP_COPY) {
            const tn_node *nd = &x->g->nodes[st->node];
            switch (nd->kind) {
            case TN_OP_TRANSPOSE:
                do_transpose(x, nd);
                break;
            case TN_OP_CONCAT:
                do_concat(x, nd);
                break;
            case TN_OP_GATHER:
                do_gather(x, nd);
                break;
            default:
                do_slices(x, nd);
                break;
            }
            continue;
        }
        for (int i = 0; i < st->n_args && i < KN_MAX_ARGS; i++)
            bufs[i] = k->layout && k->layout[s] && k->layout[s][i] ? k->layout[s][i]
                                                                  : x->buf[st->args[i]];
        rc = k->lib_run ? k->lib_run(k->lib_task[st->task], bufs)
                        : k->fn[st->task](bufs, x->ws, x->par);
        if (rc != 0) {
            snprintf(errmsg, errmsg_size, "task %d (%s, node '%s') returned %d", st->task,
                     m->tasks->tasks[st->task].name, m->g->nodes[st->node].name, (int)rc);
            return AT_EIO;
        }
    }
    return AT_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static at_err exec_time(exec *x, const kset *k, int repeat, double *median, char *errmsg,
                        size_t errmsg_size)
{
    double *t = at_malloc((size_t)repeat * sizeof *t);
    at_err err = AT_OK;
    if (t == NULL)
        return AT_ENOMEM;
    for (int r = 0; r < repeat && err == AT_OK; r++) {
        double t0 = at_time_mono_s();
        err = exec_run(x, k, errmsg, errmsg_size);
        t[r] = at_time_mono_s() - t0;
    }
    if (err == AT_OK) {
        qsort(t, (size_t)repeat, sizeof *t, cmp_double);
        *median = repeat % 2 ? t[repeat / 2] : (t[repeat / 2 - 1] + t[repeat / 2]) / 2;
    }
    at_free(t);
    return err;
}

at_err tn_model_run(const tn_model *m, const tn_run_opts *o, tn_run_report *rep, char *errmsg,
                    size_t errmsg_size)
{
    const tn_graph *g = m->g;
    kn_target tgt;
    kset tuned, naive;
    exec x;
    lib l;
    float **outs = NULL;
    int n_out = g->n_outputs < TN_RUN_MAX_OUTPUTS ? g->n_outputs : TN_RUN_MAX_OUTPUTS;
    at_err err;
    memset(rep, 0, sizeof *rep);
    memset(&tuned, 0, sizeof tuned);
    memset(&naive, 0, sizeof naive);
    memset(&x, 0, sizeof x);
    memset(&l, 0, sizeof l);
    if (errmsg_size)
        errmsg[0] = 0;
    if (m->n_unsupported > 0) {
        for (int i = 0; i < g->n_nodes; i++)
            if (!g->nodes[i].dead && g->nodes[i].unsupported) {
                snprintf(errmsg, errmsg_size, "%s cannot run: node '%s' (%s) is not supported "
                         "(%s)%s", g->name, g->nodes[i].name, g->nodes[i].op_type,
                         g->nodes[i].why ? g->nodes[i].why : "",
                         m->n_unsupported > 1 ? ", and others: see the warnings" : "");
                break;
            }
        return AT_EUNSUPPORTED;
    }
    err = o->target ? kn_target_parse(o->target, &tgt, errmsg, errmsg_size) : kn_target_host(&tgt);
    if (err != AT_OK)
        return err;
    if (!tgt.is_host) {
        snprintf(errmsg, errmsg_size, "target '%s' does not run on this machine: 'tuner run' "
                 "runs kernels here (use export-lib for other targets)", tgt.text);
        return AT_EINVAL;
    }
    rep->n_tasks = m->tasks->n_tasks;
    if ((err = kset_alloc(&tuned, m->tasks->n_tasks, m->n_steps)) != AT_OK ||
        (err = kset_alloc(&naive, m->tasks->n_tasks, m->n_steps)) != AT_OK)
        goto out;
    if ((err = exec_init(&x, m, o, errmsg, errmsg_size)) != AT_OK)
        goto out;
    if (o->lib_path) {
        err = lib_open(&l, o->lib_path, &tuned, m, x.par->n_threads, errmsg, errmsg_size);
        rep->n_tuned = m->tasks->n_tasks;
    } else {
        err = kset_build(&tuned, m, o, &tgt, 0, rep, errmsg, errmsg_size);
    }
    if (err == AT_OK && !o->no_check)
        err = kset_build(&naive, m, o, &tgt, 1, rep, errmsg, errmsg_size);
    if (err == AT_OK)
        err = kset_prepare(&x, &tuned, errmsg, errmsg_size);
    if (err == AT_OK && !o->no_check)
        err = kset_prepare(&x, &naive, errmsg, errmsg_size);
    if (err != AT_OK)
        goto out;
    /* the chosen kernels: outputs copied aside */
    if ((err = exec_run(&x, &tuned, errmsg, errmsg_size)) != AT_OK)
        goto out;
    if ((outs = at_calloc((size_t)n_out + 1, sizeof *outs)) == NULL) {
        err = AT_ENOMEM;
        goto out;
    }
    rep->n_outputs = n_out;
    for (int i = 0; i < n_out; i++) {
        const tn_tensor *t = &g->tensors[g->outputs[i]];
        double sum = 0;
        if ((outs[i] = at_malloc((size_t)tensor_bytes(t) + 4)) == NULL) {
            err = AT_ENOMEM;
            goto out;
        }
        memcpy(outs[i], x.buf[g->outputs[i]], (size_t)tensor_bytes(t));
        for (int64_t e = 0; e < t->n_elems; e++)
            sum += outs[i][e];
        snprintf(rep->outputs[i].name, sizeof rep->outputs[i].name, "%s", t->name);
        rep->outputs[i].n_elems = t->n_elems;
        rep->outputs[i].checksum = sum;
    }
    if (o->dump_dir) {
        for (int i = 0; i < g->n_inputs + g->n_outputs && err == AT_OK; i++) {
            int t = i < g->n_inputs ? g->inputs[i] : g->outputs[i - g->n_inputs];
            char path[1024];
            snprintf(path, sizeof path, "%s/%s_%d.bin", o->dump_dir,
                     i < g->n_inputs ? "input" : "output",
                     i < g->n_inputs ? i : i - g->n_inputs);
            err = at_file_write(path, x.buf[t], (size_t)tensor_bytes(&g->tensors[t]), errmsg,
                                errmsg_size);
        }
        if (err != AT_OK)
            goto out;
    }
    if (!o->no_check) {
        if ((err = exec_run(&x, &naive, errmsg, errmsg_size)) != AT_OK)
            goto out;
        for (int i = 0; i < n_out; i++) {
            const tn_tensor *t = &g->tensors[g->outputs[i]];
            double e = kn_rt_rel_err(outs[i], x.buf[g->outputs[i]], AT_DT_F32, t->n_elems);
            rep->outputs[i].rel_err = e;
            if (!(e <= rep->max_rel_err))
                rep->max_rel_err = e;
        }
    }
    if (o->repeat > 0) {
        err = exec_time(&x, &tuned, o->repeat, &rep->latency_s, errmsg, errmsg_size);
        if (err == AT_OK && !o->no_check)
            err = exec_time(&x, &naive, o->repeat, &rep->naive_latency_s, errmsg, errmsg_size);
    }
out:
    for (int i = 0; outs && i < n_out; i++)
        at_free(outs[i]);
    at_free(outs);
    kset_fini(&tuned, m->n_steps);
    kset_fini(&naive, m->n_steps);
    exec_fini(&x);
    if (l.h)
        dlclose(l.h);
    tn_replay_check(NULL, NULL, NULL, NULL, 0); /* the DAG it cached */
    if (err == AT_ENOMEM && errmsg_size)
        snprintf(errmsg, errmsg_size, "out of memory");
    return err;
}
