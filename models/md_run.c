/* models/md_run.c -- running a whole model here, and choosing each task's schedule.
**
** The plan is md_model's steps in topological order: a TASK step calls the task's kernel on
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
#include "models/md_int.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kernels/kernels.h"

/* ---- schedules ---- */

at_err md_task_schedule(const md_task *t, rec_store *st, const char *target,
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
        q.replay = md_replay_check;
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

int md_store_cost(void *ctx, const md_task *t, double *seconds)
{
    const md_store_cost_ctx *c = ctx;
    ss_state *st = NULL;
    double cost = 0;
    char msg[256];
    int ok;
    *seconds = 0;
    if (c->store == NULL || md_task_schedule(t, c->store, c->target, c->device_key, &st, &cost,
                                             msg, sizeof msg) != AT_OK)
        return 0;
    ok = st->n_steps > 0 && cost > 0;
    ss_state_free(st);
    *seconds = cost;
    return ok;
}

struct md_lib_keys {
    void *h;
    int n;
    const char *(*key)(int);
    int (*n_dims)(void);                /* the model's symbolic dimensions (optional) */
    const char *(*dim_name)(int);
    int (*n_buckets)(int);
    long long (*bucket)(int, int);
};

at_err md_lib_keys_open(const char *path, md_lib_keys **out, char *errmsg, size_t errmsg_size)
{
    char prefix[96], full[4096], sym[160];
    md_lib_keys *k;
    int (*n_tasks)(void);
    *out = NULL;
    md__lib_prefix(path, prefix, sizeof prefix);
    if (realpath(path, full) == NULL) {
        snprintf(errmsg, errmsg_size, "%s: %s", path, strerror(errno));
        return AT_ELOAD;
    }
    if ((k = at_calloc(1, sizeof *k)) == NULL)
        return AT_ENOMEM;
    if ((k->h = dlopen(full, RTLD_NOW | RTLD_LOCAL)) == NULL) {
        snprintf(errmsg, errmsg_size, "%s", dlerror());
        at_free(k);
        return AT_ELOAD;
    }
    snprintf(sym, sizeof sym, "%s_n_tasks", prefix);
    n_tasks = (int (*)(void))dlsym(k->h, sym);
    snprintf(sym, sizeof sym, "%s_task_key", prefix);
    k->key = (const char *(*)(int))dlsym(k->h, sym);
    if (n_tasks == NULL || k->key == NULL) {
        snprintf(errmsg, errmsg_size, "%s has no %s_n_tasks or %s_task_key (the prefix comes "
                 "from the file name)", path, prefix, prefix);
        md_lib_keys_close(k);
        return AT_ELOAD;
    }
    k->n = n_tasks();
    snprintf(sym, sizeof sym, "%s_model_n_dims", prefix);
    k->n_dims = (int (*)(void))dlsym(k->h, sym);
    snprintf(sym, sizeof sym, "%s_model_dim_name", prefix);
    k->dim_name = (const char *(*)(int))dlsym(k->h, sym);
    snprintf(sym, sizeof sym, "%s_model_n_buckets", prefix);
    k->n_buckets = (int (*)(int))dlsym(k->h, sym);
    snprintf(sym, sizeof sym, "%s_model_bucket", prefix);
    k->bucket = (long long (*)(int, int))dlsym(k->h, sym);
    *out = k;
    return AT_OK;
}

void md_lib_buckets(const md_lib_keys *k, const char *name, int64_t *values, int max, int *n)
{
    *n = 0;
    if (!k->n_dims || !k->dim_name || !k->n_buckets || !k->bucket)
        return;
    for (int i = 0; i < k->n_dims(); i++) {
        const char *nm = k->dim_name(i);
        if (nm == NULL || strcmp(nm, name) != 0)
            continue;
        for (int j = 0; j < k->n_buckets(i); j++) {
            if (*n < max)
                values[*n] = k->bucket(i, j);
            ++*n;
        }
        if (*n > max)
            *n = max;
        return;
    }
}

int md_lib_has_task(void *ctx, const md_task *t, double *seconds)
{
    const md_lib_keys *k = ctx;
    *seconds = 0;
    for (int j = 0; j < k->n; j++)
        if (strcmp(k->key(j), t->key) == 0)
            return 1;
    return 0;
}

void md_lib_keys_close(md_lib_keys *k)
{
    if (k == NULL)
        return;
    if (k->h)
        dlclose(k->h);
    at_free(k);
}

/* ---- kernels ---- */

typedef int32_t (*lib_run_fn)(int task, void *const *bufs);
typedef int32_t (*lib_model_fn)(const float *const *inputs, float *const *outputs);

typedef struct kset {
    int n;
    kn_artifact **art;     /* per task (NULL in library mode) */
    kn_rt_module **mod;
    kn_rt_kernel_fn *fn, *pre;
    int *lib_task;         /* library mode: the library's index of each task */
    lib_run_fn lib_run;
    lib_model_fn lib_model; /* the library's whole model (P_model_run), when it has one */
    void ***layout;        /* per step: rewritten weights per kernel argument (or NULL) */
    double *cost;          /* per task: its record's measured seconds (0: naive) */
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
    at_free(k->cost);
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
    k->cost = at_calloc((size_t)n + 1, sizeof *k->cost);
    return k->art && k->mod && k->fn && k->pre && k->lib_task && k->layout && k->cost
               ? AT_OK
               : AT_ENOMEM;
}

/* Build (for the host) and load the kernel of each task: the chosen schedule's, or the
** naive one when 'naive' or when there is no record. */
static at_err kset_build(kset *k, const md_model *m, const md_run_opts *o, const kn_target *tgt,
                         int naive, md_run_report *rep, char *errmsg, size_t errmsg_size)
{
    const md_task_list *tl = m->tasks;
    double t0 = at_time_mono_s();
    at_err err = AT_OK;
    /* the Winograd alternatives at the end of the list run in no step */
    for (int i = 0; i < tl->n_tasks - m->n_alt_tasks && err == AT_OK; i++) {
        ss_state *st = NULL;
        char entry[48], msg[512];
        double cost = 0;
        snprintf(entry, sizeof entry, "md_task%d", i);
        err = naive ? ss_state_new(tl->tasks[i].dag, &st)
                    : md_task_schedule(&tl->tasks[i], o->store, tgt->text, o->device_key, &st,
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
            k->cost[i] = cost;
        }
        err = kn_build_state(st, tgt, entry, &k->art[i], msg, sizeof msg);
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

/* ---- the library of md_export_lib ---- */

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

static at_err lib_open(lib *l, const char *path, kset *k, const md_model *m, int n_threads,
                       char *errmsg, size_t errmsg_size)
{
    char prefix[96], full[4096];
    int n;
    memset(l, 0, sizeof *l);
    md__lib_prefix(path, prefix, sizeof prefix);
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
    for (int i = 0; i < m->tasks->n_tasks - m->n_alt_tasks; i++) {
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
    k->lib_model = (lib_model_fn)lib_sym(l, prefix, "model_run");
    return AT_OK;
}

/* ---- the executor ---- */

typedef struct exec {
    const md_model *m;
    const md_graph *g;
    md_plan plan;
    char *arena, *consts;  /* the plan's two blocks */
    void **buf;            /* per tensor: where its bytes are (aliases: their root's) */
    kn_rt_pool *pool;
    const kn_rt_par *par;
    void *ws;
    int64_t ws_bytes;
    double *step_s;        /* --profile: seconds spent in each step, summed over runs */
    double *prof;          /* step_s while the profiled runs run, else NULL */
} exec;

static int64_t tensor_bytes(const md_tensor *t)
{
    return t->n_elems * (int64_t)at_dtype_bytes(t->dtype);
}

/* The entries of the smallest table an integer tensor indexes (a Gather's indices): its
** random values are drawn below it, as token ids are; 2 when no Gather reads it (0 or 1,
** as in an attention mask). */
static int64_t index_bound(const md_graph *g, int t)
{
    int64_t bound = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const md_node *nd = &g->nodes[i];
        int64_t axis;
        const md_tensor *in;
        if (nd->dead || nd->kind != MD_OP_GATHER || nd->n_in < 2 || nd->in[1] < 0 ||
            md__root(g, nd->in[1]) != t)
            continue;
        in = &g->tensors[nd->in[0]];
        axis = md__attr_i(nd, "axis", 0);
        if (axis < 0)
            axis += in->rank;
        if (axis >= 0 && axis < in->rank && (bound == 0 || in->shape[axis] < bound))
            bound = in->shape[axis];
    }
    return bound ? bound : 2;
}

/* Graph input i from dir/input_<i>.bin (what --dump writes): exactly its bytes. */
static at_err read_input(exec *x, const char *dir, int i, char *errmsg, size_t errmsg_size)
{
    const md_tensor *t = &x->g->tensors[x->g->inputs[i]];
    char path[1024], *data;
    size_t n;
    at_err err;
    snprintf(path, sizeof path, "%s/input_%d.bin", dir, i);
    if ((err = at_file_read(path, &data, &n, errmsg, errmsg_size)) != AT_OK)
        return err;
    if ((int64_t)n != tensor_bytes(t)) {
        snprintf(errmsg, errmsg_size, "%s: %zu bytes, but graph input %d '%s' (%s, %lld "
                 "elements) takes %lld", path, n, i, t->name, at_dtype_name(t->dtype),
                 (long long)t->n_elems, (long long)tensor_bytes(t));
        at_free(data);
        return AT_EINVAL;
    }
    if (x->buf[x->g->inputs[i]])
        memcpy(x->buf[x->g->inputs[i]], data, n);
    at_free(data);
    return AT_OK;
}

static at_err exec_init(exec *x, const md_model *m, const md_run_opts *o, char *errmsg,
                        size_t errmsg_size)
{
    const md_graph *g = m->g;
    uint32_t stream = 0;
    at_err err;
    memset(x, 0, sizeof *x);
    x->m = m;
    x->g = g;
    if ((err = md__plan_make(m, &x->plan)) != AT_OK)
        return err;
    if ((x->buf = at_calloc((size_t)g->n_tensors + 1, sizeof *x->buf)) == NULL ||
        (x->arena = kn_rt_alloc((size_t)x->plan.arena_bytes + 64)) == NULL ||
        (x->consts = kn_rt_alloc((size_t)x->plan.const_bytes + 64)) == NULL)
        return AT_ENOMEM;
    /* constants copied once; graph inputs and weights without values filled once, in the
    ** plan's order (graph inputs first, then as the steps meet them): stream = that rank */
    for (int i = 0; i < x->plan.n_bufs; i++) {
        const md_plan_buf *b = &x->plan.bufs[i];
        const md_tensor *rt = &g->tensors[b->root];
        if (b->kind == MD_BUF_CONST)
            memcpy(x->consts + b->offset, rt->data, (size_t)tensor_bytes(rt));
        else if (b->kind == MD_BUF_INPUT) {
            int64_t bound = rt->dtype == AT_DT_I64 ? index_bound(g, b->root) : 0;
            kn_rt_fill(x->arena + b->offset, rt->dtype, rt->n_elems, o->seed, stream++);
            if (bound > 0) {
                /* ids spread over the whole table, from the same seed */
                int64_t *v = (int64_t *)(x->arena + b->offset);
                at_rng rng;
                at_rng_seed(&rng, o->seed * 1000003u + stream);
                for (int64_t e = 0; e < rt->n_elems; e++)
                    v[e] = (int64_t)at_rng_below(&rng, (uint64_t)bound);
            }
        }
    }
    for (int t = 0; t < g->n_tensors; t++) {
        int k = x->plan.buf_of[t];
        if (k >= 0)
            x->buf[t] = (x->plan.bufs[k].kind == MD_BUF_CONST ? x->consts : x->arena) +
                        x->plan.bufs[k].offset;
    }
    for (int i = 0; o->inputs_dir && i < g->n_inputs; i++)
        if ((err = read_input(x, o->inputs_dir, i, errmsg, errmsg_size)) != AT_OK)
            return err;
    if (o->profile && (x->step_s = at_calloc((size_t)m->n_steps + 1, sizeof *x->step_s)) == NULL)
        return AT_ENOMEM;
    if ((err = kn_rt_pool_new(o->n_threads, &x->pool)) != AT_OK) {
        snprintf(errmsg, errmsg_size, "cannot start %d threads", o->n_threads);
        return err;
    }
    x->par = kn_rt_pool_par(x->pool);
    return AT_OK;
}

static void exec_fini(exec *x)
{
    at_free(x->buf);
    kn_rt_free(x->arena);
    kn_rt_free(x->consts);
    kn_rt_free(x->ws);
    kn_rt_pool_free(x->pool);
    at_free(x->step_s);
    md__plan_free(&x->plan);
}

/* dst (shape dsh) <- src (shape ssh), both dense, 'rank' dimensions of esz-byte elements:
** the box of the smaller extent in each dimension, at the origin of both.  With 'zero', dst
** is zeroed first (padding).  Ranks are at most MD_MAX_RANK: no recursion. */
static void copy_box(char *dst, const int64_t *dsh, const char *src, const int64_t *ssh,
                     int rank, int esz, int zero)
{
    int64_t box[MD_MAX_RANK] = {0}, dst_st[MD_MAX_RANK], src_st[MD_MAX_RANK], idx[MD_MAX_RANK] = {0};
    int64_t dn = 1, sn = 1, row, outer = 1;
    for (int d = rank - 1; d >= 0; d--) {
        box[d] = dsh[d] < ssh[d] ? dsh[d] : ssh[d];
        dst_st[d] = dn;
        src_st[d] = sn;
        dn *= dsh[d];
        sn *= ssh[d];
    }
    if (zero)
        memset(dst, 0, (size_t)(dn * esz));
    if (rank == 0) {
        memcpy(dst, src, (size_t)esz);
        return;
    }
    row = box[rank - 1] * esz;
    for (int d = 0; d < rank - 1; d++)
        outer *= box[d];
    for (int64_t o = 0; o < outer; o++) {
        int64_t doff = 0, soff = 0;
        for (int d = 0; d < rank - 1; d++) {
            doff += idx[d] * dst_st[d];
            soff += idx[d] * src_st[d];
        }
        memcpy(dst + doff * esz, src + soff * esz, (size_t)row);
        for (int d = rank - 2; d >= 0; d--) {
            if (++idx[d] < box[d])
                break;
            idx[d] = 0;
        }
    }
}

/* A run on a bucket: x runs the model loaded at the bucket's dimensions, xe holds the same
** model at the dimensions asked for (smaller or equal in each): its inputs are copied into
** x's, zero-padded (token id 0, mask 0), and x's outputs are cut back into xe's. */
static void pad_inputs(exec *x, const exec *xe)
{
    for (int i = 0; i < x->g->n_inputs; i++) {
        const md_tensor *t = &x->g->tensors[x->g->inputs[i]];
        const md_tensor *te = &xe->g->tensors[xe->g->inputs[i]];
        if (x->buf[x->g->inputs[i]] && xe->buf[xe->g->inputs[i]])
            copy_box(x->buf[x->g->inputs[i]], t->shape, xe->buf[xe->g->inputs[i]], te->shape,
                     t->rank, at_dtype_bytes(t->dtype), 1);
    }
}

static void cut_outputs(const exec *x, exec *xe)
{
    for (int i = 0; i < x->g->n_outputs; i++) {
        const md_tensor *t = &x->g->tensors[x->g->outputs[i]];
        const md_tensor *te = &xe->g->tensors[xe->g->outputs[i]];
        copy_box(xe->buf[xe->g->outputs[i]], te->shape, x->buf[x->g->outputs[i]], t->shape,
                 t->rank, at_dtype_bytes(t->dtype), 0);
    }
}

/* Whether model e (the dimensions asked for) fits model m (a bucket): the same inputs and
** outputs, each dimension of e at most m's. */
static at_err bucket_fits(const md_model *m, const md_model *e, char *errmsg, size_t errmsg_size)
{
    const md_graph *g = m->g, *ge = e->g;
    if (g->n_inputs != ge->n_inputs || g->n_outputs != ge->n_outputs) {
        snprintf(errmsg, errmsg_size, "the model at the dimensions asked for has other inputs or "
                 "outputs than at its bucket's");
        return AT_EINVAL;
    }
    for (int i = 0; i < g->n_inputs + g->n_outputs; i++) {
        int io = i >= g->n_inputs;
        const md_tensor *t = &g->tensors[io ? g->outputs[i - g->n_inputs] : g->inputs[i]];
        const md_tensor *te = &ge->tensors[io ? ge->outputs[i - g->n_inputs] : ge->inputs[i]];
        int ok = t->rank == te->rank && t->dtype == te->dtype;
        for (int d = 0; ok && d < t->rank; d++)
            ok = te->shape[d] <= t->shape[d];
        if (!ok) {
            char a[160], b[160];
            md__shape_str(te->shape, te->rank, a, sizeof a);
            md__shape_str(t->shape, t->rank, b, sizeof b);
            snprintf(errmsg, errmsg_size, "%s '%s' is %s at the dimensions asked for, which does "
                     "not fit in the bucket's %s", io ? "output" : "input", t->name, a, b);
            return AT_EINVAL;
        }
    }
    return AT_OK;
}

/* Workspace big enough for every kernel of 'k'; the rewritten weights of each step. */
static at_err kset_prepare(exec *x, kset *k, char *errmsg, size_t errmsg_size)
{
    const md_model *m = x->m;
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
        const md_step *st = &m->steps[s];
        const kn_artifact *a = st->kind == MD_STEP_TASK ? k->art[st->task] : NULL;
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

static void do_transpose(const exec *x, const md_node *nd)
{
    const md_tensor *in = &x->g->tensors[nd->in[0]], *out = &x->g->tensors[nd->out[0]];
    const float *src = x->buf[nd->in[0]];
    float *dst = x->buf[nd->out[0]];
    int64_t perm[MD_MAX_RANK], st[MD_MAX_RANK], ss[MD_MAX_RANK] = {0}, ds[MD_MAX_RANK];
    int64_t shape[MD_MAX_RANK], idx[MD_MAX_RANK] = {0}, acc = 1, outer = 1, n, di, si;
    int r = in->rank, k = -1;
    if (md__attr_ints(nd, "perm", perm, MD_MAX_RANK) != r)
        for (int d = 0; d < r; d++)
            perm[d] = r - 1 - d;
    if (r == 0) {
        dst[0] = src[0];
        return;
    }
    for (int d = r - 1; d >= 0; d--) {
        st[d] = acc;
        acc *= in->shape[d];
    }
    /* output dimension d walks the input with stride ss[d] and the output with ds[d] */
    acc = 1;
    for (int d = r - 1; d >= 0; d--) {
        ss[d] = st[perm[d]];
        ds[d] = acc;
        shape[d] = out->shape[d];
        acc *= out->shape[d];
    }
    /* the inner loop reads the input contiguously where a dimension allows (NCHW -> NHWC
    ** with C = 3: rows of W, written every 3 floats, not 3-float rows read 3 planes
    ** apart); the others are an odometer */
    for (int d = 0; d < r - 1 && ss[r - 1] != 1; d++)
        if (ss[d] == 1 && shape[d] > 1)
            k = d;
    if (k >= 0) {
        int64_t t;
        t = shape[k], shape[k] = shape[r - 1], shape[r - 1] = t;
        t = ss[k], ss[k] = ss[r - 1], ss[r - 1] = t;
        t = ds[k], ds[k] = ds[r - 1], ds[r - 1] = t;
    }
    n = shape[r - 1], di = ds[r - 1], si = ss[r - 1];
    for (int d = 0; d < r - 1; d++)
        outer *= shape[d];
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i = 0; i < n; i++)
            dst[i * di] = src[i * si];
        for (int d = r - 2; d >= 0; d--) {
            dst += ds[d];
            src += ss[d];
            if (++idx[d] < shape[d])
                break;
            dst -= ds[d] * shape[d];
            src -= ss[d] * shape[d];
            idx[d] = 0;
        }
    }
}

static void do_concat(const exec *x, const md_node *nd)
{
    const md_tensor *out = &x->g->tensors[nd->out[0]];
    int64_t axis = md__attr_i(nd, "axis", 0), outer = 1, tail = 1, off = 0;
    char *dst = x->buf[nd->out[0]];
    if (axis < 0)
        axis += out->rank;
    for (int d = 0; d < axis; d++)
        outer *= out->shape[d];
    for (int d = (int)axis + 1; d < out->rank; d++)
        tail *= out->shape[d];
    for (int k = 0; k < nd->n_in; k++) {
        const md_tensor *in = &x->g->tensors[nd->in[k]];
        const char *src = x->buf[nd->in[k]];
        int64_t row = in->shape[axis] * tail * 4;
        for (int64_t o = 0; o < outer; o++)
            memcpy(dst + (o * out->shape[axis] * tail + off) * 4, src + o * row, (size_t)row);
        off += in->shape[axis] * tail;
    }
}

/* Gather: constant indices (checked when the model was read) or run-time ones (token ids),
** each checked here: an index outside [-n, n) is an error naming it, never a read. */
static at_err do_gather(const exec *x, const md_node *nd, char *errmsg, size_t errmsg_size)
{
    const md_tensor *in = &x->g->tensors[nd->in[0]], *ix = &x->g->tensors[nd->in[1]];
    int64_t axis = md__attr_i(nd, "axis", 0), outer = 1, tail = 1, j = 0;
    const float *src = x->buf[nd->in[0]];
    const int64_t *idx = ix->data ? ix->data : x->buf[nd->in[1]];
    float *dst = x->buf[nd->out[0]];
    if (axis < 0)
        axis += in->rank;
    for (int d = 0; d < axis; d++)
        outer *= in->shape[d];
    for (int d = (int)axis + 1; d < in->rank; d++)
        tail *= in->shape[d];
    for (int64_t i = 0; i < ix->n_elems; i++)
        if (idx[i] < -in->shape[axis] || idx[i] >= in->shape[axis]) {
            snprintf(errmsg, errmsg_size, "node '%s' (Gather): index %lld at position %lld of "
                     "'%s' is out of range: '%s' has %lld entries along axis %lld",
                     nd->name, (long long)idx[i], (long long)i, ix->name, in->name,
                     (long long)in->shape[axis], (long long)axis);
            return AT_EINVAL;
        }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < ix->n_elems; i++) {
            int64_t k = idx[i] < 0 ? idx[i] + in->shape[axis] : idx[i];
            memcpy(dst + (j++) * tail, src + (o * in->shape[axis] + k) * tail,
                   (size_t)tail * sizeof *dst);
        }
    return AT_OK;
}

/* Expand: the input broadcast to the output's shape (float or int64 elements). */
static void do_expand(const exec *x, const md_node *nd)
{
    const md_tensor *in = &x->g->tensors[nd->in[0]], *out = &x->g->tensors[nd->out[0]];
    int64_t st[MD_MAX_RANK], idx[MD_MAX_RANK] = {0}, acc = 1;
    int r = out->rank, esz = at_dtype_bytes(out->dtype);
    const char *src = x->buf[nd->in[0]];
    char *dst = x->buf[nd->out[0]];
    for (int d = r - 1; d >= 0; d--) {
        int k = d - (r - in->rank);
        st[d] = k < 0 || in->shape[k] == 1 ? 0 : acc;
        if (k >= 0)
            acc *= in->shape[k];
    }
    for (int64_t i = 0; i < out->n_elems; i++) {
        int64_t off = 0;
        for (int d = 0; d < r; d++)
            off += idx[d] * st[d];
        memcpy(dst + i * esz, src + off * esz, (size_t)esz);
        for (int d = r - 1; d >= 0; d--) {
            if (++idx[d] < out->shape[d])
                break;
            idx[d] = 0;
        }
    }
}

/* Slice and Split: regions of the input (the parameters were checked by inference). */
static void do_slices(const exec *x, const md_node *nd)
{
    const md_tensor *in = &x->g->tensors[nd->in[0]];
    char why[256];
    for (int k = 0; k < nd->n_out; k++) {
        int64_t lo[MD_MAX_RANK], step[MD_MAX_RANK], out[MD_MAX_RANK];
        at_err e = nd->kind == MD_OP_SLICE ? md__slice_params(x->g, nd, in, lo, step, out, why,
                                                              sizeof why)
                                           : md__split_params(x->g, nd, in, k, lo, step, out,
                                                              why, sizeof why);
        if (nd->out[k] >= 0 && e == AT_OK)
            md__copy_region(x->buf[nd->out[k]], x->buf[nd->in[0]], in, lo, step, out, 4);
    }
}

/* One run of the whole model with kernel set k (with x->prof, each step timed). */
static at_err exec_run(exec *x, const kset *k, char *errmsg, size_t errmsg_size)
{
    const md_model *m = x->m;
    double t0 = x->prof ? at_time_mono_s() : 0;
    if (k->lib_model) {
        /* the library runs the whole model itself, as a C caller would */
        const float *ins[64];
        float *outs[64];
        int32_t rc;
        for (int i = 0; i < x->g->n_inputs && i < 64; i++)
            ins[i] = x->buf[x->g->inputs[i]];
        for (int i = 0; i < x->g->n_outputs && i < 64; i++)
            outs[i] = x->buf[x->g->outputs[i]];
        if ((rc = k->lib_model(ins, outs)) != 0) {
            snprintf(errmsg, errmsg_size, "the library's model_run returned %d", (int)rc);
            return AT_EIO;
        }
        return AT_OK;
    }
    for (int s = 0; s < m->n_steps; s++) {
        const md_step *st = &m->steps[s];
        void *bufs[KN_MAX_ARGS];
        int32_t rc;
        at_err err;
        if (x->prof && s > 0) {
            double t = at_time_mono_s();
            x->prof[s - 1] += t - t0;
            t0 = t;
        }
        if (st->kind == MD_STEP_COPY) {
            const md_node *nd = &x->g->nodes[st->node];
            switch (nd->kind) {
            case MD_OP_TRANSPOSE:
                do_transpose(x, nd);
                break;
            case MD_OP_CONCAT:
                do_concat(x, nd);
                break;
            case MD_OP_GATHER:
                if ((err = do_gather(x, nd, errmsg, errmsg_size)) != AT_OK)
                    return err;
                break;
            case MD_OP_INT_TO_FLOAT:
            case MD_OP_INT_TO_BOOL: {
                const int64_t *src = x->buf[nd->in[0]];
                float *dst = x->buf[nd->out[0]];
                int to_bool = nd->kind == MD_OP_INT_TO_BOOL;
                for (int64_t e = 0; e < x->g->tensors[nd->out[0]].n_elems; e++)
                    dst[e] = to_bool ? (float)(src[e] != 0) : (float)src[e];
                break;
            }
            case MD_OP_EXPAND:
                do_expand(x, nd);
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
    if (x->prof && m->n_steps > 0)
        x->prof[m->n_steps - 1] += at_time_mono_s() - t0;
    return AT_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One run with kernel set k on x, or, with xe, on the bucket x with xe's inputs and
** outputs (a library pads and cuts itself: it runs on xe's buffers). */
static at_err run_on(exec *x, exec *xe, const kset *k, char *errmsg, size_t errmsg_size)
{
    at_err err;
    if (xe == NULL)
        return exec_run(x, k, errmsg, errmsg_size);
    if (k->lib_model)
        return exec_run(xe, k, errmsg, errmsg_size);
    pad_inputs(x, xe);
    if ((err = exec_run(x, k, errmsg, errmsg_size)) == AT_OK)
        cut_outputs(x, xe);
    return err;
}

/* Time 'repeat' runs: their median in *median, and each run's seconds, in order, in
** each_s[0..repeat) when each_s is not NULL. */
static at_err exec_time(exec *x, exec *xe, const kset *k, int repeat, double *median,
                        double *each_s, char *errmsg, size_t errmsg_size)
{
    double *t = at_malloc((size_t)repeat * sizeof *t);
    at_err err = AT_OK;
    if (t == NULL)
        return AT_ENOMEM;
    for (int r = 0; r < repeat && err == AT_OK; r++) {
        double t0 = at_time_mono_s();
        err = run_on(x, xe, k, errmsg, errmsg_size);
        t[r] = at_time_mono_s() - t0;
        if (each_s)
            each_s[r] = t[r];
    }
    if (err == AT_OK) {
        qsort(t, (size_t)repeat, sizeof *t, cmp_double);
        *median = repeat % 2 ? t[repeat / 2] : (t[repeat / 2 - 1] + t[repeat / 2]) / 2;
    }
    at_free(t);
    return err;
}

/* mkdir -p */
static at_err make_dir(const char *dir, char *errmsg, size_t errmsg_size)
{
    char path[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof path) {
        snprintf(errmsg, errmsg_size, "--dump: bad folder name '%s'", dir);
        return AT_EINVAL;
    }
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        struct stat sb;
        if (path[i] != '/' && path[i] != 0)
            continue;
        path[i] = 0;
        if (stat(path, &sb) != 0) {
            if (mkdir(path, 0777) != 0 && errno != EEXIST) {
                snprintf(errmsg, errmsg_size, "cannot make %s: %s", path, strerror(errno));
                return AT_EIO;
            }
        } else if (!S_ISDIR(sb.st_mode)) {
            snprintf(errmsg, errmsg_size, "%s is not a folder", path);
            return AT_EIO;
        }
        path[i] = i < n ? '/' : 0;
    }
    return AT_OK;
}

/* Each step's mean time over the profiled runs, its share of their sum, and for a task
** the time its record measured on the agent (the kernel alone, warm caches). */
static void print_profile(FILE *f, const exec *x, const kset *k, int n_runs, double median_s)
{
    const md_model *m = x->m;
    double total = 0, measured = 0;
    for (int s = 0; s < m->n_steps; s++)
        total += x->step_s[s];
    fprintf(f, "profile: %d runs, %d steps; buffers: arena %.2f MB (planned by liveness), "
               "constants %.2f MB\n", n_runs, m->n_steps, x->plan.arena_bytes / 1e6,
            x->plan.const_bytes / 1e6);
    fprintf(f, "%4s  %-34s %-28s %10s %7s %12s\n", "step", "what", "node", "ms/run", "share",
            "measured ms");
    for (int s = 0; s < m->n_steps; s++) {
        const md_step *st = &m->steps[s];
        char what[64];
        double ms = x->step_s[s] / n_runs * 1e3;
        if (st->kind == MD_STEP_TASK)
            snprintf(what, sizeof what, "task %d %s", st->task, m->tasks->tasks[st->task].name);
        else
            snprintf(what, sizeof what, "copy %s", m->g->nodes[st->node].op_type);
        fprintf(f, "%4d  %-34.34s %-28.28s %10.4f %6.1f%%", s, what, m->g->nodes[st->node].name,
                ms, total > 0 ? 100 * x->step_s[s] / total : 0);
        if (st->kind == MD_STEP_TASK && k->cost && k->cost[st->task] > 0) {
            fprintf(f, " %12.4f", k->cost[st->task] * 1e3);
            measured += k->cost[st->task];
        }
        fputc('\n', f);
    }
    fprintf(f, "sum of steps %.3f ms/run (median run %.3f ms); the tasks' measured kernels sum "
               "to %.3f ms\n", total / n_runs * 1e3, median_s * 1e3, measured * 1e3);
}

/* Set the library's symbolic dimensions to model e's values (P_model_set_dim). */
static at_err lib_set_dims(const lib *l, const char *path, const md_model *e, char *errmsg,
                           size_t errmsg_size)
{
    char prefix[96];
    int (*set_dim)(const char *, long long);
    md__lib_prefix(path, prefix, sizeof prefix);
    set_dim = (int (*)(const char *, long long))lib_sym((lib *)l, prefix, "model_set_dim");
    if (set_dim == NULL) {
        snprintf(errmsg, errmsg_size, "%s has no %s_model_set_dim: it runs its model at one size "
                 "only", path, prefix);
        return AT_EINVAL;
    }
    for (int k = 0; k < e->g->n_syms; k++)
        if (set_dim(e->g->sym_names[k], (long long)e->g->sym_values[k]) != 0) {
            snprintf(errmsg, errmsg_size, "%s cannot run %s=%lld (above its largest bucket?)",
                     path, e->g->sym_names[k], (long long)e->g->sym_values[k]);
            return AT_EINVAL;
        }
    return AT_OK;
}

at_err md_model_run(const md_model *m, const md_run_opts *o, md_run_report *rep, char *errmsg,
                    size_t errmsg_size)
{
    const md_model *e = o->exact && o->exact != m ? o->exact : m; /* the dimensions asked for */
    const md_graph *g = m->g, *ge = e->g;
    kn_target tgt;
    kset tuned, naive;
    exec x, xe_, *xe = e != m ? &xe_ : NULL, *xo = xe ? xe : &x; /* xo: inputs and outputs */
    lib l;
    float **outs = NULL;
    int n_out = g->n_outputs < MD_RUN_MAX_OUTPUTS ? g->n_outputs : MD_RUN_MAX_OUTPUTS;
    at_err err;
    memset(rep, 0, sizeof *rep);
    memset(&tuned, 0, sizeof tuned);
    memset(&naive, 0, sizeof naive);
    memset(&x, 0, sizeof x);
    memset(&xe_, 0, sizeof xe_);
    memset(&l, 0, sizeof l);
    if (errmsg_size)
        errmsg[0] = 0;
    for (int pass = 0; pass < 2; pass++) {
        const md_model *mm = pass ? e : m;
        const md_graph *gg = mm->g;
        if (mm->n_unsupported == 0)
            continue;
        for (int i = 0; i < gg->n_nodes; i++)
            if (!gg->nodes[i].dead && gg->nodes[i].unsupported) {
                snprintf(errmsg, errmsg_size, "%s cannot run: node '%s' (%s) is not supported "
                         "(%s)%s", gg->name, gg->nodes[i].name, gg->nodes[i].op_type,
                         gg->nodes[i].why ? gg->nodes[i].why : "",
                         mm->n_unsupported > 1 ? ", and others: see the warnings" : "");
                break;
            }
        return AT_EUNSUPPORTED;
    }
    if (xe && (err = bucket_fits(m, e, errmsg, errmsg_size)) != AT_OK)
        return err;
    err = o->target ? kn_target_parse(o->target, &tgt, errmsg, errmsg_size) : kn_target_host(&tgt);
    if (err != AT_OK)
        return err;
    if (!tgt.is_host) {
        snprintf(errmsg, errmsg_size, "target '%s' does not run on this machine: 'tuner run' "
                 "runs kernels here (use export-lib for other targets)", tgt.text);
        return AT_EINVAL;
    }
    rep->n_tasks = m->tasks->n_tasks - m->n_alt_tasks;
    if ((err = kset_alloc(&tuned, m->tasks->n_tasks, m->n_steps)) != AT_OK ||
        (err = kset_alloc(&naive, e->tasks->n_tasks, e->n_steps)) != AT_OK)
        goto out;
    /* the inputs are made (or read) at the dimensions asked for */
    if (xe && (err = exec_init(xe, e, o, errmsg, errmsg_size)) != AT_OK)
        goto out;
    if ((err = exec_init(&x, m, o, errmsg, errmsg_size)) != AT_OK)
        goto out;
    if (o->lib_path) {
        err = lib_open(&l, o->lib_path, &tuned, m, x.par->n_threads, errmsg, errmsg_size);
        if (err == AT_OK && tuned.lib_model && xe)
            err = lib_set_dims(&l, o->lib_path, e, errmsg, errmsg_size);
        else if (err == AT_OK && xe) {
            snprintf(errmsg, errmsg_size, "%s has no whole model: it cannot run another size",
                     o->lib_path);
            err = AT_EINVAL;
        }
        rep->n_tuned = m->tasks->n_tasks - m->n_alt_tasks;
    } else {
        err = kset_build(&tuned, m, o, &tgt, 0, rep, errmsg, errmsg_size);
    }
    if (err == AT_OK && !o->no_check)
        err = kset_build(&naive, e, o, &tgt, 1, rep, errmsg, errmsg_size);
    if (err == AT_OK)
        err = kset_prepare(&x, &tuned, errmsg, errmsg_size);
    if (err == AT_OK && !o->no_check)
        err = kset_prepare(xo, &naive, errmsg, errmsg_size);
    if (err != AT_OK)
        goto out;
    /* the chosen kernels: outputs copied aside */
    if ((err = run_on(&x, xe, &tuned, errmsg, errmsg_size)) != AT_OK)
        goto out;
    if ((outs = at_calloc((size_t)n_out + 1, sizeof *outs)) == NULL) {
        err = AT_ENOMEM;
        goto out;
    }
    rep->n_outputs = n_out;
    for (int i = 0; i < n_out; i++) {
        const md_tensor *t = &ge->tensors[ge->outputs[i]];
        double sum = 0;
        if ((outs[i] = at_malloc((size_t)tensor_bytes(t) + 4)) == NULL) {
            err = AT_ENOMEM;
            goto out;
        }
        memcpy(outs[i], xo->buf[ge->outputs[i]], (size_t)tensor_bytes(t));
        for (int64_t v = 0; v < t->n_elems; v++)
            sum += outs[i][v];
        snprintf(rep->outputs[i].name, sizeof rep->outputs[i].name, "%s", t->name);
        rep->outputs[i].n_elems = t->n_elems;
        rep->outputs[i].checksum = sum;
    }
    if (o->dump_dir && (err = make_dir(o->dump_dir, errmsg, errmsg_size)) != AT_OK)
        goto out;
    if (o->dump_dir) {
        for (int i = 0; i < ge->n_inputs + ge->n_outputs && err == AT_OK; i++) {
            int t = i < ge->n_inputs ? ge->inputs[i] : ge->outputs[i - ge->n_inputs];
            char path[1024];
            snprintf(path, sizeof path, "%s/%s_%d.bin", o->dump_dir,
                     i < ge->n_inputs ? "input" : "output",
                     i < ge->n_inputs ? i : i - ge->n_inputs);
            err = at_file_write(path, i < ge->n_inputs ? xo->buf[t] : (void *)outs[i - ge->n_inputs],
                                (size_t)tensor_bytes(&ge->tensors[t]), errmsg, errmsg_size);
        }
        if (err != AT_OK)
            goto out;
    }
    if (!o->no_check) {
        if ((err = exec_run(xo, &naive, errmsg, errmsg_size)) != AT_OK)
            goto out;
        for (int i = 0; i < n_out; i++) {
            const md_tensor *t = &ge->tensors[ge->outputs[i]];
            double v = kn_rt_rel_err(outs[i], xo->buf[ge->outputs[i]], AT_DT_F32, t->n_elems);
            rep->outputs[i].rel_err = v;
            if (!(v <= rep->max_rel_err))
                rep->max_rel_err = v;
        }
    }
    if (o->repeat > 0 || o->profile) {
        int n_runs = o->repeat > 0 ? o->repeat : 10;
        x.prof = x.step_s;
        err = exec_time(&x, xe, &tuned, n_runs, &rep->latency_s,
                        o->repeat > 0 ? o->latencies_s : NULL, errmsg, errmsg_size);
        x.prof = NULL;
        if (err == AT_OK && o->profile && tuned.lib_model)
            fprintf(o->profile, "profile: the library runs the whole model itself (%d runs, "
                    "median %.3f ms); run without --lib for each step\n", n_runs,
                    rep->latency_s * 1e3);
        else if (err == AT_OK && o->profile)
            print_profile(o->profile, &x, &tuned, n_runs, rep->latency_s);
        if (err == AT_OK && !o->no_check && o->repeat > 0)
            err = exec_time(xo, NULL, &naive, AT_MIN(o->repeat, MD_RUN_NAIVE_REPEAT),
                            &rep->naive_latency_s, NULL, errmsg, errmsg_size);
    }
out:
    for (int i = 0; outs && i < n_out; i++)
        at_free(outs[i]);
    at_free(outs);
    kset_fini(&tuned, m->n_steps);
    kset_fini(&naive, e->n_steps);
    exec_fini(&x);
    if (xe)
        exec_fini(xe);
    if (l.h)
        dlclose(l.h);
    md_replay_check(NULL, NULL, NULL, NULL, 0); /* the DAG it cached */
    if (err == AT_ENOMEM && errmsg_size)
        snprintf(errmsg, errmsg_size, "out of memory");
    return err;
}
