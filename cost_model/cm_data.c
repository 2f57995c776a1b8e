/* cost_model/cm_data.c -- data sets of measured programs (features, task, cost), loading
** them from the records store, splitting them, and the ranking metrics.
**
** Labels follow Ansor: within a task, label = best cost / cost, so the task's best
** program is 1 and a failure is 0; they are recomputed after every addition because a
** new best changes every label of its task. */
#include "cost_model/cost_model_int.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

at_err cm_data_new(cm_data **out)
{
    *out = at_calloc(1, sizeof **out);
    return *out ? AT_OK : AT_ENOMEM;
}

void cm_data_free(cm_data *d)
{
    if (d == NULL)
        return;
    at_free(d->task);
    at_free(d->cost);
    at_free(d->label);
    at_free(d->row_off);
    at_free(d->n_rows);
    at_free(d->rows);
    for (int t = 0; t < d->n_tasks; t++)
        at_free(d->task_names[t]);
    at_free(d->task_names);
    at_free(d);
}

int cm_data_count(const cm_data *d)
{
    return d->n;
}

int cm_data_n_tasks(const cm_data *d)
{
    return d->n_tasks;
}

int64_t cm_data_n_rows(const cm_data *d)
{
    return d->n_all_rows;
}

int cm_data_task_of(const cm_data *d, int i)
{
    return i >= 0 && i < d->n ? d->task[i] : -1;
}

double cm_data_cost(const cm_data *d, int i)
{
    return i >= 0 && i < d->n ? d->cost[i] : AT_MEASURE_FAIL_COST;
}

const char *cm_data_task_name(const cm_data *d, int task)
{
    return task >= 0 && task < d->n_tasks ? d->task_names[task] : NULL;
}

const float *cm_data_rows(const cm_data *d, int i, int *n_rows)
{
    if (i < 0 || i >= d->n) {
        *n_rows = 0;
        return NULL;
    }
    *n_rows = d->n_rows[i];
    return d->rows + (size_t)d->row_off[i] * CM_N_FEATS;
}

int cm__data_task(cm_data *d, const char *name)
{
    char *copy;
    for (int t = d->n_tasks - 1; t >= 0; t--)
        if (strcmp(d->task_names[t], name) == 0)
            return t;
    if ((copy = at_strdup(name)) == NULL)
        return -1;
    if (at_vec_push(&d->task_names, &d->n_tasks, &d->cap_tasks, copy) != AT_OK) {
        at_free(copy);
        return -1;
    }
    return d->n_tasks - 1;
}

static at_err grow_programs(cm_data *d, int n)
{
    int cap = d->cap ? d->cap : 64;
    void *p;
    if (n <= d->cap)
        return AT_OK;
    while (cap < n)
        cap *= 2;
#define GROW(field)                                                                        \
    if ((p = at_realloc(d->field, (size_t)cap * sizeof *d->field)) == NULL)                \
        return AT_ENOMEM;                                                                  \
    d->field = p;
    GROW(task)
    GROW(cost)
    GROW(label)
    GROW(row_off)
    GROW(n_rows)
#undef GROW
    d->cap = cap;
    return AT_OK;
}

static at_err grow_rows(cm_data *d, int64_t n)
{
    int64_t cap = d->cap_rows ? d->cap_rows : 256;
    float *p;
    if (n <= d->cap_rows)
        return AT_OK;
    while (cap < n)
        cap *= 2;
    if ((p = at_realloc(d->rows, (size_t)cap * CM_N_FEATS * sizeof *p)) == NULL)
        return AT_ENOMEM;
    d->rows = p;
    d->cap_rows = cap;
    return AT_OK;
}

at_err cm__data_push(cm_data *d, int task, const float *rows, int n_rows, double cost)
{
    if (grow_programs(d, d->n + 1) != AT_OK || grow_rows(d, d->n_all_rows + n_rows) != AT_OK)
        return AT_ENOMEM;
    d->task[d->n] = task;
    d->cost[d->n] = cost;
    d->label[d->n] = 0;
    d->row_off[d->n] = d->n_all_rows;
    d->n_rows[d->n] = n_rows;
    if (n_rows)
        memcpy(d->rows + (size_t)d->n_all_rows * CM_N_FEATS, rows,
               (size_t)n_rows * CM_N_FEATS * sizeof *rows);
    d->n_all_rows += n_rows;
    d->n++;
    d->labels_dirty = 1;
    return AT_OK;
}

static int failed_cost(double c)
{
    return !(c > 0) || !isfinite(c) || c >= AT_MEASURE_FAIL_COST;
}

void cm__data_labels(cm_data *d)
{
    double *best;
    if (!d->labels_dirty)
        return;
    best = at_malloc((size_t)(d->n_tasks ? d->n_tasks : 1) * sizeof *best);
    if (best == NULL) {
        /* keep the old labels; they are refreshed on the next call */
        return;
    }
    for (int t = 0; t < d->n_tasks; t++)
        best[t] = INFINITY;
    for (int i = 0; i < d->n; i++)
        if (!failed_cost(d->cost[i]) && d->n_rows[i] > 0 && d->cost[i] < best[d->task[i]])
            best[d->task[i]] = d->cost[i];
    for (int i = 0; i < d->n; i++)
        d->label[i] = failed_cost(d->cost[i]) || d->n_rows[i] == 0 ? 0
                                                                   : best[d->task[i]] / d->cost[i];
    at_free(best);
    d->labels_dirty = 0;
}

double cm__data_label(const cm_data *d, int i)
{
    return d->label[i];
}

double cm_data_label(const cm_data *d, int i)
{
    if (i < 0 || i >= d->n)
        return 0;
    cm__data_labels((cm_data *)d);
    return d->label[i];
}

at_err cm_data_set_cost(cm_data *d, int i, double cost)
{
    if (i < 0 || i >= d->n || failed_cost(d->cost[i]) || failed_cost(cost))
        return AT_EINVAL;
    d->cost[i] = cost;
    d->labels_dirty = 1;
    return AT_OK;
}

void cm_data_set_sim(cm_data *d, const cm_sim_params *p)
{
    d->use_sim = p != NULL;
    if (p)
        d->sim = *p;
}

void cm_data_set_code(cm_data *d, const kn_target *t)
{
    d->use_code = t != NULL;
    if (t)
        d->code = *t;
}

at_err cm_data_add(cm_data *d, const cm_sample *s, int n, int *n_unlowered)
{
    cm_feats f;
    at_err err = AT_OK;
    char msg[256];
    if (n_unlowered)
        *n_unlowered = 0;
    for (int i = 0; i < n; i++)
        if (s[i].task == NULL || (!s[i].state && !s[i].ir && !s[i].feats))
            return AT_EINVAL;
    cm_feats_init(&f);
    f.sim = d->use_sim ? &d->sim : NULL;
    f.code = d->use_code ? &d->code : NULL;
    for (int i = 0; i < n && err == AT_OK; i++) {
        const cm_feats *use = s[i].feats;
        double cost = s[i].status != 0 || failed_cost(s[i].cost_s) ? AT_MEASURE_FAIL_COST
                                                                   : s[i].cost_s;
        int task = cm__data_task(d, s[i].task);
        if (task < 0) {
            err = AT_ENOMEM;
            break;
        }
        if (use == NULL) {
            at_err e = s[i].ir ? cm_features_extract(s[i].ir, &f)
                               : cm_features_of_state(s[i].state, &f, msg, sizeof msg);
            if (e == AT_ENOMEM) {
                err = e;
                break;
            }
            if (e != AT_OK) {
                f.n_rows = 0;
                cost = AT_MEASURE_FAIL_COST;
                if (n_unlowered)
                    (*n_unlowered)++;
            }
            use = &f;
        }
        err = cm__data_push(d, task, use->rows, use->n_rows, cost);
    }
    cm_feats_fini(&f);
    return err;
}

at_err cm_data_append(cm_data *dst, const cm_data *src, const int *idx, int n)
{
    for (int k = 0; k < n; k++) {
        int i = idx[k], t;
        at_err err;
        if (i < 0 || i >= src->n)
            return AT_EINVAL;
        if ((t = cm__data_task(dst, src->task_names[src->task[i]])) < 0)
            return AT_ENOMEM;
        err = cm__data_push(dst, t, src->rows + (size_t)src->row_off[i] * CM_N_FEATS,
                            src->n_rows[i], src->cost[i]);
        if (err != AT_OK)
            return err;
    }
    return AT_OK;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

at_err cm_data_split(const cm_data *src, double frac, uint64_t seed, cm_data **a, cm_data **b)
{
    int *idx = NULL, *ia = NULL, *ib = NULL, na = 0, nb = 0;
    at_rng rng;
    at_err err = AT_ENOMEM;
    *a = *b = NULL;
    at_rng_seed(&rng, seed);
    idx = at_malloc((size_t)(src->n + 1) * sizeof *idx);
    ia = at_malloc((size_t)(src->n + 1) * sizeof *ia);
    ib = at_malloc((size_t)(src->n + 1) * sizeof *ib);
    if (!idx || !ia || !ib || cm_data_new(a) != AT_OK || cm_data_new(b) != AT_OK)
        goto fail;
    for (int t = 0; t < src->n_tasks; t++) {
        int m = 0, take;
        for (int i = 0; i < src->n; i++)
            if (src->task[i] == t)
                idx[m++] = i;
        for (int i = m - 1; i > 0; i--) {
            int j = (int)at_rng_below(&rng, (uint64_t)i + 1), tmp = idx[i];
            idx[i] = idx[j];
            idx[j] = tmp;
        }
        take = (int)floor(frac * m + 0.5);
        for (int i = 0; i < m; i++) {
            if (i < take)
                ia[na++] = idx[i];
            else
                ib[nb++] = idx[i];
        }
    }
    /* keep the original order inside each part */
    qsort(ia, (size_t)na, sizeof *ia, cmp_int);
    qsort(ib, (size_t)nb, sizeof *ib, cmp_int);
    err = cm_data_append(*a, src, ia, na);
    if (err == AT_OK)
        err = cm_data_append(*b, src, ib, nb);
    if (err != AT_OK)
        goto fail;
    at_free(idx);
    at_free(ia);
    at_free(ib);
    return AT_OK;
fail:
    at_free(idx);
    at_free(ia);
    at_free(ib);
    cm_data_free(*a);
    cm_data_free(*b);
    *a = *b = NULL;
    return err;
}

/* ---- loading from the records store ---- */

/* With groups 10 or 11 asked for (a simulation or a build a program: 50-250 ms), records
** are taken in batches and their features extracted on every core, then appended in the
** store's order: the same data set as one thread makes, in a fraction of the time. */
#define LOAD_BATCH 32
#define LOAD_MAX_THREADS 8

typedef struct load_item {
    ss_state *state; /* NULL: a free slot */
    char *key;
    double cost;
    int failed;
    at_err err;
    cm_feats feats;
} load_item;

typedef struct load_job {
    load_item *items;
    int n, stride, first;
} load_job;

static void *load_extract(void *arg)
{
    load_job *j = arg;
    char msg[256];
    for (int i = j->first; i < j->n; i += j->stride)
        j->items[i].err = cm_features_of_state(j->items[i].state, &j->items[i].feats, msg,
                                               sizeof msg);
    return NULL;
}

/* Extract the features of items[0..n) on up to n_threads threads, then append them in
** order; frees the states and keys.  AT_ENOMEM stops it (the rest freed too). */
static at_err load_flush(cm_data *d, load_item *items, int n, int n_threads,
                         cm_load_stats *stats)
{
    pthread_t th[LOAD_MAX_THREADS];
    load_job jobs[LOAD_MAX_THREADS];
    int started = 0;
    at_err err = AT_OK;
    for (int t = 0; t < n_threads; t++) {
        jobs[t].items = items;
        jobs[t].n = n;
        jobs[t].stride = n_threads;
        jobs[t].first = t;
    }
    for (int t = 1; t < n_threads; t++) {
        if (pthread_create(&th[t], NULL, load_extract, &jobs[t]) != 0)
            break;
        started = t;
    }
    /* this thread takes its own share, and the shares of threads that did not start */
    for (int t = 0; t < n_threads; t++)
        if (t == 0 || t > started)
            load_extract(&jobs[t]);
    for (int t = 1; t <= started; t++)
        pthread_join(th[t], NULL);
    for (int i = 0; i < n; i++) {
        load_item *it = &items[i];
        int task;
        if (err == AT_OK) {
            if (it->err == AT_ENOMEM) {
                err = AT_ENOMEM;
            } else if (it->err != AT_OK) {
                stats->n_unreplay++;
            } else if ((task = cm__data_task(d, it->key)) < 0) {
                err = AT_ENOMEM;
            } else if ((err = cm__data_push(d, task, it->feats.rows, it->feats.n_rows,
                                            it->cost)) == AT_OK) {
                stats->n_used++;
                stats->n_failed += it->failed;
            }
        }
        ss_state_free(it->state);
        it->state = NULL;
        at_free(it->key);
        it->key = NULL;
    }
    return err;
}

at_err cm_data_load_store(cm_data *d, rec_store *st, const rec_filter *f, cm_load_stats *stats,
                          char *errmsg, size_t errmsg_size)
{
    rec_iter *it = NULL;
    const rec_record *r;
    ss_dag *dag = NULL;
    char *dag_text = NULL, msg[512];
    cm_feats feats;
    cm_load_stats local;
    at_buf key;
    at_err err;
    int last_tasks = d->n_tasks;
    if (stats == NULL)
        stats = &local;
    memset(stats, 0, sizeof *stats);
    if (errmsg && errmsg_size)
        errmsg[0] = 0;
    load_item *items = NULL;
    int n_items = 0, n_threads = 1;
    cm_feats_init(&feats);
    feats.sim = d->use_sim ? &d->sim : NULL;
    feats.code = d->use_code ? &d->code : NULL;
    at_buf_init(&key);
    if (d->use_sim || d->use_code) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = nc < 1 ? 1 : nc > LOAD_MAX_THREADS ? LOAD_MAX_THREADS : (int)nc;
        if ((items = at_calloc(LOAD_BATCH, sizeof *items)) == NULL) {
            err = AT_ENOMEM;
            goto out;
        }
        for (int i = 0; i < LOAD_BATCH; i++) {
            cm_feats_init(&items[i].feats);
            items[i].feats.sim = feats.sim;
            items[i].feats.code = feats.code;
        }
    }
    if ((err = rec_iter_open(st, f, REC_ORDER_STABLE, &it)) != AT_OK) {
        if (errmsg)
            snprintf(errmsg, errmsg_size, "reading records: %s", rec_store_errmsg(st));
        goto out;
    }
    for (;;) {
        ss_state *s = NULL;
        double cost;
        int task;
        if ((err = rec_iter_next(it, &r)) != AT_OK) {
            if (errmsg)
                snprintf(errmsg, errmsg_size, "reading records: %s", rec_store_errmsg(st));
            break;
        }
        if (r == NULL)
            break;
        stats->n_records++;
        /* records come grouped by task: parse each DAG text once */
        if (dag_text == NULL || strcmp(dag_text, r->dag) != 0) {
            ss_dag_unref(dag);
            dag = NULL;
            at_free(dag_text);
            if ((dag_text = at_strdup(r->dag)) == NULL) {
                err = AT_ENOMEM;
                break;
            }
            if ((err = ss_dag_parse(r->dag, strlen(r->dag), &dag, msg, sizeof msg)) != AT_OK) {
                if (err == AT_ENOMEM)
                    break;
                at_log_warn("cost model: task %s: its DAG does not parse (%s); its records "
                            "are skipped", r->workload_key, msg);
                dag = NULL;
                err = AT_OK;
            }
        }
        if (dag == NULL ||
            (err = ss_state_from_json(dag, r->state, strlen(r->state), &s, msg, sizeof msg)) !=
                AT_OK) {
            if (err == AT_ENOMEM)
                break;
            err = AT_OK;
            stats->n_unreplay++;
            continue;
        }
        at_buf_reset(&key);
        at_buf_printf(&key, "%s|%s|%s", r->workload_key, r->target, r->fingerprint);
        if (key.err) {
            ss_state_free(s);
            err = AT_ENOMEM;
            break;
        }
        /* the fastest repeat: on a shared host the others include time the kernel was
        ** not running (docs/cost_model.md) */
        cost = AT_MEASURE_FAIL_COST;
        if (r->status == 0)
            for (int c = 0; c < r->n_costs; c++)
                if (r->costs[c] > 0 && r->costs[c] < cost)
                    cost = r->costs[c];
        if (items) { /* batched: extracted on every core when the batch is full */
            load_item *li = &items[n_items];
            li->state = s;
            li->cost = cost;
            li->failed = r->status != 0;
            if ((li->key = at_strdup(key.data)) == NULL) {
                ss_state_free(s);
                li->state = NULL;
                err = AT_ENOMEM;
                break;
            }
            if (++n_items == LOAD_BATCH) {
                err = load_flush(d, items, n_items, n_threads, stats);
                n_items = 0;
                if (err != AT_OK)
                    break;
            }
            continue;
        }
        err = cm_features_of_state(s, &feats, msg, sizeof msg);
        ss_state_free(s);
        if (err == AT_ENOMEM)
            break;
        if (err != AT_OK) {
            err = AT_OK;
            stats->n_unreplay++;
            continue;
        }
        if ((task = cm__data_task(d, key.data)) < 0) {
            err = AT_ENOMEM;
            break;
        }
        if ((err = cm__data_push(d, task, feats.rows, feats.n_rows, cost)) != AT_OK)
            break;
        stats->n_used++;
        if (r->status != 0)
            stats->n_failed++;
    }
    if (items && n_items && err == AT_OK)
        err = load_flush(d, items, n_items, n_threads, stats);
out:
    if (items) { /* after an error, the batch's states and keys are still here */
        for (int i = 0; i < LOAD_BATCH; i++) {
            ss_state_free(items[i].state);
            at_free(items[i].key);
            cm_feats_fini(&items[i].feats);
        }
        at_free(items);
    }
    stats->n_tasks = d->n_tasks - last_tasks;
    rec_iter_close(it);
    ss_dag_unref(dag);
    at_free(dag_text);
    at_buf_fini(&key);
    cm_feats_fini(&feats);
    return err;
}

/* ---- metrics ---- */

typedef struct ranked {
    double key;
    int i;
} ranked;

static int by_key_desc(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->key != y->key)
        return x->key > y->key ? -1 : 1;
    return x->i - y->i;
}

void cm_metrics_eval(const cm_data *d, const double *scores, double min_ratio, cm_metrics *out)
{
    int *members = at_malloc((size_t)(d->n + 1) * sizeof *members);
    ranked *byp = at_malloc((size_t)(d->n + 1) * sizeof *byp);
    ranked *byc = at_malloc((size_t)(d->n + 1) * sizeof *byc);
    double correct = 0, r1 = 0, r5 = 0, s1 = 0, s5 = 0;
    int n_rank_tasks = 0;
    memset(out, 0, sizeof *out);
    if (!members || !byp || !byc)
        goto out;
    for (int t = 0; t < d->n_tasks; t++) {
        int m = 0, ns = 0;
        double best = INFINITY;
        for (int i = 0; i < d->n; i++)
            if (d->task[i] == t && d->n_rows[i] > 0)
                members[m++] = i;
        /* pairs of measured programs whose costs differ by more than min_ratio */
        for (int a = 0; a < m; a++) {
            int i = members[a];
            if (failed_cost(d->cost[i]))
                continue;
            ns++;
            if (d->cost[i] < best)
                best = d->cost[i];
            for (int b = a + 1; b < m; b++) {
                int j = members[b];
                double ci = d->cost[i], cj = d->cost[j];
                if (failed_cost(cj))
                    continue;
                if (ci > cj * min_ratio || cj > ci * min_ratio) {
                    out->n_pairs++;
                    if (scores[i] == scores[j])
                        correct += 0.5;
                    else if ((scores[i] > scores[j]) == (ci < cj))
                        correct += 1;
                }
            }
        }
        if (ns == 0)
            continue;
        /* top-k recall and score: the k best predicted (any lowered program) against the
        ** k best measured */
        for (int a = 0; a < m; a++) {
            int i = members[a];
            byp[a].key = scores[i];
            byp[a].i = i;
            byc[a].key = failed_cost(d->cost[i]) ? -INFINITY : -d->cost[i];
            byc[a].i = i;
        }
        qsort(byp, (size_t)m, sizeof *byp, by_key_desc);
        qsort(byc, (size_t)m, sizeof *byc, by_key_desc);
        for (int pass = 0; pass < 2; pass++) {
            int k = pass == 0 ? 1 : 5, kk = AT_MIN(k, ns), hit = 0;
            double top_best = INFINITY;
            for (int a = 0; a < AT_MIN(k, m); a++) {
                int i = byp[a].i;
                if (!failed_cost(d->cost[i]) && d->cost[i] < top_best)
                    top_best = d->cost[i];
                for (int b = 0; b < kk; b++)
                    if (byc[b].i == i)
                        hit++;
            }
            if (pass == 0) {
                r1 += (double)hit / kk;
                s1 += isfinite(top_best) ? best / top_best : 0;
            } else {
                r5 += (double)hit / kk;
                s5 += isfinite(top_best) ? best / top_best : 0;
            }
        }
        n_rank_tasks++;
    }
    out->pairwise_acc = out->n_pairs ? correct / (double)out->n_pairs : 0.5;
    if (n_rank_tasks) {
        out->top1_recall = r1 / n_rank_tasks;
        out->top5_recall = r5 / n_rank_tasks;
        out->top1_score = s1 / n_rank_tasks;
        out->top5_score = s5 / n_rank_tasks;
    }
    out->n_tasks = n_rank_tasks;
out:
    at_free(members);
    at_free(byp);
    at_free(byc);
}
