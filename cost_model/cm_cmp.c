/* cost_model/cm_cmp.c -- the comparator: a booster that, given two programs of one task,
** says how likely the first is the faster (XGBoost's binary:logistic on pair rows), and a
** ranking of a set of programs by their summed win probabilities (a soft Borda count).
**
** A program is one vector: the sum of its feature rows (groups 10 and 11, when filled, sit
** on the first row and pass through unchanged).  A pair row is [x_a, x_b, x_a - x_b], so
** the trees may compare two programs by different columns in different regions of the
** space, which a score's difference f(x_a) - f(x_b) cannot.  docs/cost_model.md ("The
** comparator") gives the figures that chose this and its parameters. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cost_model/cost_model_int.h"

#define NV CM_N_FEATS       /* columns of a program's vector */
#define NP (3 * CM_N_FEATS) /* columns of a pair row */
#define PREDICT_BLOCK 8192  /* pair rows predicted per XGBoost call */

struct cm_cmp {
    cm_cmp_params p;
    BoosterHandle b; /* NULL until trained */
    int n_pairs;     /* of the last training */
    float *rows;     /* prediction scratch: PREDICT_BLOCK pair rows */
    float *vec;      /* program vectors of a ranking */
    int vec_cap;
};

void cm_cmp_params_default(cm_cmp_params *p)
{
    memset(p, 0, sizeof *p);
    p->max_depth = 6;
    p->eta = 0.2;
    p->max_rounds = 150;
    p->n_partners = 24;
    p->min_pair_ratio = 1.05;
    p->max_pairs = 150000;
    p->both_orders = 1;
    p->n_threads = 0;
    p->seed = 1;
}

at_err cm_cmp_new(const cm_cmp_params *p, cm_cmp **out)
{
    cm_cmp *c;
    cm__xgb_init();
    *out = NULL;
    if ((c = at_calloc(1, sizeof *c)) == NULL)
        return AT_ENOMEM;
    if (p)
        c->p = *p;
    else
        cm_cmp_params_default(&c->p);
    if (c->p.max_depth < 1 || c->p.max_rounds < 1 || c->p.n_partners < 1 || !(c->p.eta > 0) ||
        c->p.max_pairs < 1 || !(c->p.top_pairs >= 0 && c->p.top_pairs <= 1)) {
        at_free(c);
        return AT_EINVAL;
    }
    *out = c;
    return AT_OK;
}

void cm_cmp_free(cm_cmp *c)
{
    if (c == NULL)
        return;
    if (c->b)
        XGBoosterFree(c->b);
    at_free(c->rows);
    at_free(c->vec);
    at_free(c);
}

int cm_cmp_n_pairs(const cm_cmp *c)
{
    return c->b ? c->n_pairs : 0;
}

static int n_threads(const cm_cmp *c)
{
    long n = c->p.n_threads > 0 ? c->p.n_threads : sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* A program's vector: the sum of its rows. */
static void prog_vec(const float *rows, int n_rows, float *v)
{
    for (int f = 0; f < NV; f++)
        v[f] = 0;
    for (int r = 0; r < n_rows; r++)
        for (int f = 0; f < NV; f++)
            v[f] += rows[(size_t)r * NV + f];
}

static void pair_row(const float *a, const float *b, float *row)
{
    for (int f = 0; f < NV; f++) {
        row[f] = a[f];
        row[NV + f] = b[f];
        row[2 * NV + f] = a[f] - b[f];
    }
}

static at_err set_params(cm_cmp *c, BoosterHandle h, char *errmsg, size_t n)
{
    char v[64];
#define P(k, fmt, val)                                                                     \
    do {                                                                                   \
        snprintf(v, sizeof v, fmt, val);                                                   \
        if (XGBoosterSetParam(h, k, v) != 0)                                               \
            return cm__xgb_fail(errmsg, n, "setting a comparator parameter");              \
    } while (0)
    P("booster", "%s", "gbtree");
    P("tree_method", "%s", "hist");
    P("max_bin", "%d", 64);
    P("objective", "%s", "binary:logistic");
    P("max_depth", "%d", c->p.max_depth);
    P("eta", "%g", c->p.eta);
    P("min_child_weight", "%g", 1.0);
    P("nthread", "%d", n_threads(c));
    P("seed", "%llu", (unsigned long long)(c->p.seed & 0x7fffffff));
    P("disable_default_eval_metric", "%d", 1);
#undef P
    return AT_OK;
}

/* Lowered and measured. */
static int usable(const cm_data *d, int i)
{
    return d->n_rows[i] > 0 && d->cost[i] > 0 && d->cost[i] < AT_MEASURE_FAIL_COST;
}

/* The pair of usable programs a and b (indices into ok[] and vec) as training row n, and
** (b, a) as row n + 1 with both_orders; returns the rows added (0: within the noise). */
static int push_pair(const cm_cmp *c, const cm_data *d, const int *ok, const float *vec, int a,
                     int b, double lo, float *rows, float *y, int n)
{
    double ratio = d->cost[ok[a]] / d->cost[ok[b]];
    if (ratio <= lo && ratio >= 1 / lo)
        return 0;
    pair_row(vec + (size_t)a * NV, vec + (size_t)b * NV, rows + (size_t)n * NP);
    y[n] = ratio < 1 ? 1.0f : 0.0f;
    if (!c->p.both_orders)
        return 1;
    pair_row(vec + (size_t)b * NV, vec + (size_t)a * NV, rows + (size_t)(n + 1) * NP);
    y[n + 1] = ratio < 1 ? 0.0f : 1.0f;
    return 2;
}

/* Programs of a task of 'm' whose every pair top_pairs adds. */
static int n_top(const cm_cmp *c, int m)
{
    int nt = (int)ceil(c->p.top_pairs * m);
    return c->p.top_pairs > 0 ? AT_MIN(m, AT_MAX(2, nt)) : 0;
}

/* qsort's order of a task's programs (indices into by_cost_ok), fastest first; the data
** it reads is set by each cm_cmp_fit call, per thread */
static _Thread_local const cm_data *by_cost_d;
static _Thread_local const int *by_cost_ok;
static int by_cost(const void *a, const void *b)
{
    double x = by_cost_d->cost[by_cost_ok[*(const int *)a]];
    double y = by_cost_d->cost[by_cost_ok[*(const int *)b]];
    if (x != y)
        return x < y ? -1 : 1;
    return *(const int *)a - *(const int *)b;
}

at_err cm_cmp_fit(cm_cmp *c, const cm_data *d, char *errmsg, size_t errmsg_size)
{
    int n = d->n, n_ok = 0, k, n_pairs = 0, cap;
    int *ok = NULL, *start = NULL, *fill = NULL, *perm = NULL;
    float *vec = NULL, *rows = NULL, *y = NULL;
    DMatrixHandle dm = NULL;
    BoosterHandle h = NULL;
    at_rng rng;
    at_err err = AT_ENOMEM;
    double lo = c->p.min_pair_ratio > 1 ? c->p.min_pair_ratio : 1;
    /* usable programs (lowered, measured), grouped by task */
    ok = at_malloc((size_t)(n + 1) * sizeof *ok);
    start = at_calloc((size_t)d->n_tasks + 2, sizeof *start);
    fill = at_malloc((size_t)(d->n_tasks + 1) * sizeof *fill);
    perm = at_malloc((size_t)(n + 1) * sizeof *perm);
    vec = at_malloc((size_t)(n + 1) * NV * sizeof *vec);
    if (!ok || !start || !fill || !perm || !vec)
        goto done;
    for (int i = 0; i < n; i++)
        if (usable(d, i))
            start[d->task[i] + 1]++, n_ok++;
    for (int t = 0; t < d->n_tasks; t++)
        start[t + 1] += start[t];
    for (int t = 0; t < d->n_tasks; t++)
        fill[t] = start[t];
    for (int i = 0; i < n; i++)
        if (usable(d, i)) {
            ok[fill[d->task[i]]] = i;
            prog_vec(d->rows + (size_t)d->row_off[i] * NV, d->n_rows[i],
                     vec + (size_t)fill[d->task[i]] * NV);
            fill[d->task[i]]++;
        }
    /* partners per program: n_partners, fewer when the pairs would pass max_pairs */
    k = c->p.n_partners;
    if (n_ok > 0 && (int64_t)n_ok * k * (c->p.both_orders ? 2 : 1) > c->p.max_pairs)
        k = AT_MAX(1, c->p.max_pairs / (n_ok * (c->p.both_orders ? 2 : 1)));
    cap = n_ok * k * (c->p.both_orders ? 2 : 1);
    if (c->p.top_pairs > 0)
        for (int t = 0; t < d->n_tasks; t++) {
            int nt = n_top(c, start[t + 1] - start[t]);
            cap += nt * (nt - 1) / 2 * (c->p.both_orders ? 2 : 1);
        }
    rows = at_malloc((size_t)(cap + 1) * NP * sizeof *rows);
    y = at_malloc((size_t)(cap + 1) * sizeof *y);
    if (!rows || !y)
        goto done;
    at_rng_seed(&rng, c->p.seed);
    for (int t = 0; t < d->n_tasks; t++) {
        int s = start[t], m = start[t + 1] - s;
        for (int a = 0; a < m && m > 1; a++) {
            int np = AT_MIN(k, m - 1);
            for (int j = 0; j < m - 1; j++) /* the others, a skipped */
                perm[j] = j < a ? j : j + 1;
            for (int j = 0; j < np; j++) { /* partial Fisher-Yates */
                int r = j + (int)at_rng_below(&rng, (uint64_t)(m - 1 - j)), b, tmp;
                tmp = perm[j], perm[j] = perm[r], perm[r] = tmp;
                b = perm[j];
                n_pairs += push_pair(c, d, ok, vec, s + a, s + b, lo, rows, y, n_pairs);
            }
        }
    }
    /* every pair among each task's fastest programs */
    for (int t = 0; t < d->n_tasks && c->p.top_pairs > 0; t++) {
        int s = start[t], m = start[t + 1] - s, nt = n_top(c, m);
        by_cost_d = d, by_cost_ok = ok + s;
        for (int j = 0; j < m; j++)
            perm[j] = j;
        qsort(perm, (size_t)m, sizeof *perm, by_cost);
        for (int x = 0; x < nt; x++)
            for (int z = x + 1; z < nt; z++)
                n_pairs += push_pair(c, d, ok, vec, s + perm[x], s + perm[z], lo, rows, y,
                                     n_pairs);
    }
    if (n_pairs < 2) {
        if (errmsg && errmsg_size)
            snprintf(errmsg, errmsg_size,
                     "the comparator needs two programs of one task whose costs differ by "
                     "more than %.0f%% (%d measured programs)", (lo - 1) * 100, n_ok);
        err = AT_EINVAL;
        goto done;
    }
    if (XGDMatrixCreateFromMat(rows, (bst_ulong)n_pairs, NP, NAN, &dm) != 0 ||
        XGDMatrixSetFloatInfo(dm, "label", y, (bst_ulong)n_pairs) != 0) {
        err = cm__xgb_fail(errmsg, errmsg_size, "making the comparator's pairs");
        goto done;
    }
    at_free(rows), rows = NULL; /* XGBoost copied them */
    if (XGBoosterCreate(&dm, 1, &h) != 0) {
        err = cm__xgb_fail(errmsg, errmsg_size, "creating the comparator");
        goto done;
    }
    if ((err = set_params(c, h, errmsg, errmsg_size)) != AT_OK)
        goto done;
    for (int it = 0; it < c->p.max_rounds; it++)
        if (XGBoosterUpdateOneIter(h, it, dm) != 0) {
            err = cm__xgb_fail(errmsg, errmsg_size, "training the comparator");
            goto done;
        }
    if (c->b)
        XGBoosterFree(c->b);
    c->b = h, h = NULL;
    c->n_pairs = n_pairs;
    err = AT_OK;
done:
    if (h)
        XGBoosterFree(h);
    if (dm)
        XGDMatrixFree(dm);
    at_free(ok);
    at_free(start);
    at_free(fill);
    at_free(perm);
    at_free(vec);
    at_free(rows);
    at_free(y);
    return err;
}

/* P(a faster than b) of 'n' pair rows in c->rows into p[0..n). */
static at_err predict_pairs(cm_cmp *c, int n, float *p)
{
    char arr[256], cfg[256];
    const bst_ulong *shape;
    bst_ulong dim;
    const float *res;
    snprintf(arr, sizeof arr,
             "{\"data\": [%llu, true], \"shape\": [%d, %d], \"typestr\": \"<f4\", "
             "\"version\": 3}",
             (unsigned long long)(uintptr_t)c->rows, n, NP);
    snprintf(cfg, sizeof cfg,
             "{\"type\": 0, \"training\": false, \"iteration_begin\": 0, \"iteration_end\": 0, "
             "\"strict_shape\": false, \"cache_id\": 0, \"missing\": NaN}");
    if (XGBoosterPredictFromDense(c->b, arr, cfg, NULL, &shape, &dim, &res) != 0)
        return cm__xgb_fail(NULL, 0, "predicting with the comparator");
    memcpy(p, res, (size_t)n * sizeof *p);
    return AT_OK;
}

/* Rank 'n' programs given as rows (rows[i] with nr[i] rows; 0: not lowered) in groups
** (group[i]; programs of different groups are not compared). */
static at_err rank(cm_cmp *c, const float *const *rows, const int *nr, const int *group, int n,
                   double *scores)
{
    float pbuf[PREDICT_BLOCK];
    int pi[PREDICT_BLOCK], pj[PREDICT_BLOCK], np = 0;
    int *cnt;
    at_err err = AT_OK;
    if (c->b == NULL)
        return AT_EINVAL;
    if (n <= 0)
        return AT_OK;
    if (c->rows == NULL && (c->rows = at_malloc((size_t)PREDICT_BLOCK * NP * sizeof *c->rows)) == NULL)
        return AT_ENOMEM;
    if (n > c->vec_cap) {
        float *v = at_realloc(c->vec, (size_t)n * NV * sizeof *v);
        if (v == NULL)
            return AT_ENOMEM;
        c->vec = v, c->vec_cap = n;
    }
    if ((cnt = at_calloc((size_t)n, sizeof *cnt)) == NULL)
        return AT_ENOMEM;
    for (int i = 0; i < n; i++) {
        scores[i] = 0;
        if (nr[i] > 0)
            prog_vec(rows[i], nr[i], c->vec + (size_t)i * NV);
    }
    /* every ordered pair of one group, both lowered: scores[a] += P(a, b), scores[b] += 1 -
    ** P(a, b), in blocks of PREDICT_BLOCK rows */
    for (int a = 0; a < n && err == AT_OK; a++) {
        if (nr[a] <= 0)
            continue;
        for (int b = 0; b < n && err == AT_OK; b++) {
            if (b == a || nr[b] <= 0 || group[a] != group[b])
                continue;
            pair_row(c->vec + (size_t)a * NV, c->vec + (size_t)b * NV,
                     c->rows + (size_t)np * NP);
            pi[np] = a, pj[np] = b, np++;
            if (np == PREDICT_BLOCK) {
                if ((err = predict_pairs(c, np, pbuf)) == AT_OK)
                    for (int k = 0; k < np; k++) {
                        scores[pi[k]] += pbuf[k], cnt[pi[k]]++;
                        scores[pj[k]] += 1 - pbuf[k], cnt[pj[k]]++;
                    }
                np = 0;
            }
        }
    }
    if (err == AT_OK && np > 0 && (err = predict_pairs(c, np, pbuf)) == AT_OK)
        for (int k = 0; k < np; k++) {
            scores[pi[k]] += pbuf[k], cnt[pi[k]]++;
            scores[pj[k]] += 1 - pbuf[k], cnt[pj[k]]++;
        }
    for (int i = 0; i < n; i++)
        scores[i] = nr[i] <= 0 ? CM_SCORE_INVALID : cnt[i] ? scores[i] / cnt[i] : 0.5;
    at_free(cnt);
    return err;
}

at_err cm_cmp_rank_feats(cm_cmp *c, const cm_feats *const *f, int n, double *scores)
{
    const float **rows = at_malloc((size_t)(n + 1) * sizeof *rows);
    int *nr = at_malloc((size_t)(n + 1) * sizeof *nr);
    int *group = at_calloc((size_t)n + 1, sizeof *group);
    at_err err = AT_ENOMEM;
    if (rows && nr && group) {
        for (int i = 0; i < n; i++)
            rows[i] = f[i] ? f[i]->rows : NULL, nr[i] = f[i] ? f[i]->n_rows : 0;
        err = rank(c, rows, nr, group, n, scores);
    }
    at_free(rows);
    at_free(nr);
    at_free(group);
    return err;
}

at_err cm_cmp_rank_data(cm_cmp *c, const cm_data *d, double *scores)
{
    int n = d->n;
    const float **rows = at_malloc((size_t)(n + 1) * sizeof *rows);
    int *nr = at_malloc((size_t)(n + 1) * sizeof *nr);
    at_err err = AT_ENOMEM;
    if (rows && nr) {
        for (int i = 0; i < n; i++)
            rows[i] = d->rows + (size_t)d->row_off[i] * NV, nr[i] = d->n_rows[i];
        err = rank(c, rows, nr, d->task, n, scores);
    }
    at_free(rows);
    at_free(nr);
    return err;
}

/* qsort's order of known programs by cost (indices into 'known'), for cm_cmp_rank_known */
static _Thread_local const cm_data *known_d;
static int known_by_cost(const void *a, const void *b)
{
    double x = known_d->cost[*(const int *)a], y = known_d->cost[*(const int *)b];
    if (x != y)
        return x < y ? -1 : 1;
    return *(const int *)a - *(const int *)b;
}

at_err cm_cmp_rank_known(cm_cmp *c, const cm_data *known, double top, const cm_data *d,
                         double *scores)
{
    float pbuf[PREDICT_BLOCK];
    int pi[PREDICT_BLOCK], np = 0, nk = 0;
    signed char po[PREDICT_BLOCK];
    int *kt = NULL, *ki = NULL, *kstart = NULL, *cnt = NULL;
    float *kvec = NULL, v[NV];
    at_err err = AT_ENOMEM;
    if (c->b == NULL || !(top >= 0 && top <= 1))
        return AT_EINVAL;
    if (d->n <= 0)
        return AT_OK;
    if (c->rows == NULL && (c->rows = at_malloc((size_t)PREDICT_BLOCK * NP * sizeof *c->rows)) == NULL)
        return AT_ENOMEM;
    /* d's task of each known task (-1: none), the known programs grouped by it, fastest
    ** first, and cut to the fastest 'top' of each */
    kt = at_malloc((size_t)(known->n_tasks + 1) * sizeof *kt);
    ki = at_malloc((size_t)(known->n + 1) * sizeof *ki);
    kstart = at_calloc((size_t)d->n_tasks + 2, sizeof *kstart);
    cnt = at_calloc((size_t)d->n + 1, sizeof *cnt);
    if (!kt || !ki || !kstart || !cnt)
        goto out;
    for (int t = 0; t < known->n_tasks; t++) {
        kt[t] = -1;
        for (int u = 0; u < d->n_tasks && kt[t] < 0; u++)
            if (strcmp(known->task_names[t], d->task_names[u]) == 0)
                kt[t] = u;
    }
    for (int u = 0; u < d->n_tasks; u++) {
        int first = nk, m;
        for (int j = 0; j < known->n; j++)
            if (kt[known->task[j]] == u && usable(known, j))
                ki[nk++] = j;
        known_d = known;
        qsort(ki + first, (size_t)(nk - first), sizeof *ki, known_by_cost);
        m = nk - first;
        if (top > 0 && top < 1 && m > 0)
            nk = first + AT_MAX(1, (int)ceil(top * m));
        kstart[u] = first;
        kstart[u + 1] = nk;
    }
    /* a program without known programs of its task keeps its score among its own in 'd';
    ** ranked so only when there is one (n(n - 1) predictions) */
    for (int i = 0; i < d->n; i++)
        if (d->n_rows[i] > 0 && kstart[d->task[i] + 1] == kstart[d->task[i]]) {
            if ((err = cm_cmp_rank_data(c, d, scores)) != AT_OK)
                goto out;
            err = AT_ENOMEM;
            break;
        }
    if ((kvec = at_malloc((size_t)(nk + 1) * NV * sizeof *kvec)) == NULL)
        goto out;
    for (int k = 0; k < nk; k++)
        prog_vec(known->rows + (size_t)known->row_off[ki[k]] * NV, known->n_rows[ki[k]],
                 kvec + (size_t)k * NV);
    err = AT_OK;
    for (int i = 0; i < d->n && err == AT_OK; i++) {
        int u = d->task[i];
        if (d->n_rows[i] <= 0)
            scores[i] = CM_SCORE_INVALID;
        if (d->n_rows[i] <= 0 || kstart[u + 1] == kstart[u])
            continue;
        scores[i] = 0;
        prog_vec(d->rows + (size_t)d->row_off[i] * NV, d->n_rows[i], v);
        for (int k = kstart[u]; k < kstart[u + 1] && err == AT_OK; k++)
            for (int o = 0; o < 2 && err == AT_OK; o++) {
                /* (i, k): P(i faster); (k, i): 1 - P(k faster) */
                if (o == 0)
                    pair_row(v, kvec + (size_t)k * NV, c->rows + (size_t)np * NP);
                else
                    pair_row(kvec + (size_t)k * NV, v, c->rows + (size_t)np * NP);
                pi[np] = i, po[np] = (signed char)o, np++;
                if (np == PREDICT_BLOCK || (k == kstart[u + 1] - 1 && o == 1)) {
                    if ((err = predict_pairs(c, np, pbuf)) == AT_OK)
                        for (int q = 0; q < np; q++) {
                            scores[pi[q]] += po[q] ? 1 - pbuf[q] : pbuf[q];
                            cnt[pi[q]]++;
                        }
                    np = 0;
                }
            }
        if (err == AT_OK && cnt[i] > 0)
            scores[i] /= cnt[i];
    }
out:
    at_free(kt);
    at_free(ki);
    at_free(kstart);
    at_free(cnt);
    at_free(kvec);
    return err;
}
