/* cost_model/cm_model.c -- the XGBoost model: training with a pack-sum objective of our
** own (XGBoosterBoostOneIter with our gradients), batched prediction, warm-up and the
** retraining policy.
**
** Pack-sum: a program's score is the sum of its rows' margins, so every row of a program
** gets the gradient and hessian of the program's loss with respect to that sum (the
** derivative of a sum by each term is 1).  Objectives (docs/cost_model.md):
**   rank  for pairs (i, j) of programs of one task with label y_i > y_j, the logistic
**         loss log(1 + exp(-(s_i - s_j))); each program meets n_partners random partners
**         of its task per round (all of them in small tasks);
**   reg   Ansor's  w/2 (s - y)^2 with w = y, so fast programs dominate.
** Training starts a new booster on all the data each time; with a loaded model ('base')
** the new booster starts from base's margins (XGBoost's base_margin) and refines it.
** Early stopping holds out valid_frac of each task's programs, keeps the round with the
** lowest held-out loss, then trains again on all data for that many rounds. */
#include "cost_model/cost_model_int.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CM_MAX_BASE CM__MAX_BASE /* boosters a loaded model may chain */

struct cm_model {
    cm_params p;
    cm_data *data;                   /* everything given to update / fit */
    BoosterHandle base[CM_MAX_BASE]; /* a loaded model, never retrained here */
    int n_base;
    int64_t base_records;
    BoosterHandle boost;             /* trained here, on top of base */
    int n_trained_on;                /* programs in 'data' at the last training */
    int *task_trained;               /* programs of each task of 'data' at the last training */
    int n_task_trained;
    int n_trainings;
    at_rng rng;                      /* warm-up scores */
    cm_train_info info;
    cm_feats feats;                  /* prediction scratch */
    float *pbuf;                     /* rows of one prediction batch */
    int64_t pcap;
    int *prow;                       /* rows per program of the batch */
    int prow_cap;
    double *rowsum;
    int64_t rowsum_cap;
};

/* ---- XGBoost plumbing ---- */

static pthread_once_t xgb_once = PTHREAD_ONCE_INIT;

static void xgb_log(const char *msg)
{
    at_log_debug("xgboost: %s", msg);
}

static void xgb_init(void)
{
    XGBRegisterLogCallback(xgb_log);
    XGBSetGlobalConfig("{\"verbosity\": 1}");
}

void cm__xgb_init(void)
{
    pthread_once(&xgb_once, xgb_init);
}

at_err cm__xgb_fail(char *errmsg, size_t errmsg_size, const char *what)
{
    const char *e = XGBGetLastError();
    if (errmsg && errmsg_size)
        snprintf(errmsg, errmsg_size, "XGBoost failed %s: %s", what, e && e[0] ? e : "?");
    at_log_warn("cost model: XGBoost failed %s: %s", what, e && e[0] ? e : "?");
    return AT_EIO;
}

const char *cm_objective_name(cm_objective o)
{
    static const char *const names[] = {
#define X(id, name, doc) name,
        CM_OBJ_MAP(X)
#undef X
    };
    return (unsigned)o < CM_N_OBJS ? names[o] : "?";
}

at_err cm_objective_parse(const char *s, cm_objective *out)
{
    for (int o = 0; o < CM_N_OBJS; o++)
        if (strcmp(s, cm_objective_name((cm_objective)o)) == 0) {
            *out = (cm_objective)o;
            return AT_OK;
        }
    return AT_EINVAL;
}

void cm_params_default(cm_params *p)
{
    memset(p, 0, sizeof *p);
    p->objective = CM_OBJ_RANK;
    p->max_depth = 6;
    p->max_bin = 64;
    p->eta = 0.2;
    p->gamma = 0;
    p->min_child_weight = 0.1;
    p->lambda = 1;
    p->subsample = 1;
    p->colsample = 1;
    p->max_rounds = 150;
    p->early_stop = 0;
    p->valid_frac = 0.15;
    p->n_partners = 32;
    p->pair_weight = 0;
    p->top_weight = 1;
    p->min_pair_ratio = 1.10;
    p->monotone = 1;
    p->warmup = 64;
    p->n_threads = 1;
    p->predict_threads = 1;
    p->retrain_growth_pct = 20;
    p->seed = 43;
}

at_err cm_model_new(const cm_params *p, cm_model **out)
{
    cm_model *m;
    *out = NULL;
    cm__xgb_init();
    if ((m = at_calloc(1, sizeof *m)) == NULL)
        return AT_ENOMEM;
    if (p)
        m->p = *p;
    else
        cm_params_default(&m->p);
    if (cm_data_new(&m->data) != AT_OK) {
        at_free(m);
        return AT_ENOMEM;
    }
    at_rng_seed(&m->rng, m->p.seed ^ 0x9e3779b97f4a7c15ull);
    cm_feats_init(&m->feats);
    *out = m;
    return AT_OK;
}

void cm_model_free(cm_model *m)
{
    if (m == NULL)
        return;
    for (int i = 0; i < m->n_base; i++)
        XGBoosterFree(m->base[i]);
    if (m->boost)
        XGBoosterFree(m->boost);
    cm_data_free(m->data);
    at_free(m->task_trained);
    cm_feats_fini(&m->feats);
    at_free(m->pbuf);
    at_free(m->prow);
    at_free(m->rowsum);
    at_free(m);
}

const cm_params *cm_model_params(const cm_model *m)
{
    return &m->p;
}

cm_model_state cm_model_get_state(const cm_model *m)
{
    if (m->boost)
        return CM_MODEL_TRAINED;
    if (m->n_base)
        return CM_MODEL_PRETRAINED;
    return CM_MODEL_WARMUP;
}

int64_t cm_model_n_records(const cm_model *m)
{
    return m->base_records + (m->boost ? m->n_trained_on : 0);
}

const cm_data *cm_model_data(const cm_model *m)
{
    return m->data;
}

void cm_model_train_info(const cm_model *m, cm_train_info *out)
{
    *out = m->info;
}

int cm__model_n_base(const cm_model *m)
{
    return m->n_base;
}

BoosterHandle cm__model_base(const cm_model *m, int i)
{
    return i >= 0 && i < m->n_base ? m->base[i] : NULL;
}

BoosterHandle cm__model_boost(const cm_model *m)
{
    return m->boost;
}

at_err cm__model_set_base(cm_model *m, BoosterHandle *b, int n, int64_t n_records)
{
    if (n < 1 || n > CM_MAX_BASE)
        return AT_EINVAL;
    for (int i = 0; i < m->n_base; i++)
        XGBoosterFree(m->base[i]);
    if (m->boost)
        XGBoosterFree(m->boost);
    m->boost = NULL;
    for (int i = 0; i < n; i++)
        m->base[i] = b[i];
    m->n_base = n;
    m->base_records = n_records;
    m->n_trained_on = 0;
    return AT_OK;
}

static int n_threads(const cm_model *m)
{
    long n = m->p.n_threads > 0 ? m->p.n_threads : sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* Margins of 'n' rows by booster h, added to out[0..n). */
static at_err predict_add(BoosterHandle h, const float *rows, int64_t n, double *out)
{
    char arr[256];
    const bst_ulong *shape;
    bst_ulong dim;
    const float *res;
    if (n == 0)
        return AT_OK;
    snprintf(arr, sizeof arr,
             "{\"data\": [%llu, true], \"shape\": [%lld, %d], \"typestr\": \"<f4\", "
             "\"version\": 3}",
             (unsigned long long)(uintptr_t)rows, (long long)n, CM_N_FEATS);
    if (XGBoosterPredictFromDense(h, arr,
                                  "{\"type\": 1, \"training\": false, \"iteration_begin\": 0, "
                                  "\"iteration_end\": 0, \"strict_shape\": false, \"cache_id\": 0, "
                                  "\"missing\": NaN}",
                                  NULL, &shape, &dim, &res) != 0)
        return cm__xgb_fail(NULL, 0, "predicting");
    for (int64_t i = 0; i < n; i++)
        out[i] += res[i];
    return AT_OK;
}

/* Margins of every booster of the model (base ones, then 'boost' when with_boost). */
static at_err predict_rows(cm_model *m, const float *rows, int64_t n, double *out, int with_boost)
{
    at_err err;
    for (int64_t i = 0; i < n; i++)
        out[i] = 0;
    for (int b = 0; b < m->n_base; b++)
        if ((err = predict_add(m->base[b], rows, n, out)) != AT_OK)
            return err;
    if (with_boost && m->boost)
        return predict_add(m->boost, rows, n, out);
    return AT_OK;
}

static at_err set_param(BoosterHandle h, const char *k, const char *v, char *errmsg, size_t n)
{
    if (XGBoosterSetParam(h, k, v) != 0)
        return cm__xgb_fail(errmsg, n, "setting a parameter");
    return AT_OK;
}

static at_err set_params(const cm_model *m, BoosterHandle h, uint64_t seed, char *errmsg,
                         size_t n)
{
    char v[64];
    at_err err = AT_OK;
#define P(k, fmt, val)                                                                     \
    if (err == AT_OK) {                                                                    \
        snprintf(v, sizeof v, fmt, val);                                                   \
        err = set_param(h, k, v, errmsg, n);                                               \
    }
    P("booster", "%s", "gbtree")
    P("tree_method", "%s", "hist")
    P("max_bin", "%d", m->p.max_bin > 1 ? m->p.max_bin : 64)
    P("objective", "%s", "reg:squarederror") /* unused: gradients are ours */
    P("base_score", "%s", "0")
    P("max_depth", "%d", m->p.max_depth)
    P("eta", "%g", m->p.eta)
    P("gamma", "%g", m->p.gamma)
    P("min_child_weight", "%g", m->p.min_child_weight)
    P("lambda", "%g", m->p.lambda)
    P("subsample", "%g", m->p.subsample)
    P("colsample_bytree", "%g", m->p.colsample)
    P("nthread", "%d", n_threads(m))
    P("seed", "%llu", (unsigned long long)(seed & 0x7fffffff))
    P("disable_default_eval_metric", "%d", 1)
#undef P
    if (err == AT_OK && m->p.monotone) {
        /* "(0,...,-1,...,1,...)": one entry per feature */
        char mc[2 * CM_N_FEATS + 4 * 2 + 3];
        int o = 0;
        mc[o++] = '(';
        for (int f = 0; f < CM_N_FEATS; f++)
            o += snprintf(mc + o, sizeof mc - (size_t)o, "%s%s", f ? "," : "",
                          f == CM_F_LANE_OPS ? "-1" : f == CM_F_EFF_LANES ? "1" : "0");
        mc[o++] = ')';
        mc[o] = 0;
        err = set_param(h, "monotone_constraints", mc, errmsg, n);
    }
    return err;
}

/* ---- training sets ---- */

/* A program in the rank gradients' scratch (tset_gradients). */
typedef struct pairprog {
    double y, e, g, h; /* a cache line holds two programs: one miss a partner */
} pairprog;

/* Programs of a training or validation set, as XGBoost sees them. */
typedef struct tset {
    int n;            /* programs */
    int *prog;        /* program index in the data */
    int *task;        /* their task */
    double *y;        /* labels */
    int64_t *off;     /* first row */
    int *nr;          /* rows */
    int64_t n_rows;
    float *rows;      /* copies of the rows, n_rows * CM_N_FEATS */
    DMatrixHandle dm;
    double *score;    /* pack sums */
    float *grad, *hess; /* per row */
    double *pg, *ph;  /* per program */
    int *by_task;     /* programs grouped by task: indices into prog */
    int *task_start;  /* n_tasks + 1 */
    int n_tasks;
    double *disc;     /* rank with top_weight: D(current rank in its task) per program */
    pairprog *pb;     /* rank: one task's programs at a time (pairbuf) */
    double *pbd;      /* and their discounts */
} tset;

static void tset_free(tset *s)
{
    if (s->dm)
        XGDMatrixFree(s->dm);
    at_free(s->prog);
    at_free(s->task);
    at_free(s->y);
    at_free(s->off);
    at_free(s->nr);
    at_free(s->rows);
    at_free(s->score);
    at_free(s->grad);
    at_free(s->hess);
    at_free(s->pg);
    at_free(s->ph);
    at_free(s->by_task);
    at_free(s->task_start);
    at_free(s->disc);
    at_free(s->pb);
    at_free(s->pbd);
    memset(s, 0, sizeof *s);
}

/* Build a set from programs 'idx[0..n)' of d (all with rows), with base margins. */
static at_err tset_build(cm_model *m, const cm_data *d, const int *idx, int n, tset *s,
                         char *errmsg, size_t errmsg_size)
{
    int64_t r = 0;
    at_err err = AT_ENOMEM;
    memset(s, 0, sizeof *s);
    s->n = n;
    s->n_tasks = d->n_tasks;
    for (int k = 0; k < n; k++)
        s->n_rows += d->n_rows[idx[k]];
    s->prog = at_malloc((size_t)(n + 1) * sizeof *s->prog);
    s->task = at_malloc((size_t)(n + 1) * sizeof *s->task);
    s->y = at_malloc((size_t)(n + 1) * sizeof *s->y);
    s->off = at_malloc((size_t)(n + 1) * sizeof *s->off);
    s->nr = at_malloc((size_t)(n + 1) * sizeof *s->nr);
    s->score = at_malloc((size_t)(n + 1) * sizeof *s->score);
    s->pg = at_malloc((size_t)(n + 1) * sizeof *s->pg);
    s->ph = at_malloc((size_t)(n + 1) * sizeof *s->ph);
    s->by_task = at_malloc((size_t)(n + 1) * sizeof *s->by_task);
    s->task_start = at_calloc((size_t)d->n_tasks + 2, sizeof *s->task_start);
    s->disc = at_malloc((size_t)(n + 1) * sizeof *s->disc);
    s->pb = at_malloc((size_t)(n + 1) * sizeof *s->pb);
    s->pbd = at_malloc((size_t)(n + 1) * sizeof *s->pbd);
    s->rows = at_malloc((size_t)(s->n_rows + 1) * CM_N_FEATS * sizeof *s->rows);
    s->grad = at_malloc((size_t)(s->n_rows + 1) * sizeof *s->grad);
    s->hess = at_malloc((size_t)(s->n_rows + 1) * sizeof *s->hess);
    if (!s->prog || !s->task || !s->y || !s->off || !s->nr || !s->score || !s->pg || !s->ph ||
        !s->by_task || !s->task_start || !s->rows || !s->grad || !s->hess || !s->disc ||
        !s->pb || !s->pbd)
        goto fail;
    for (int k = 0; k < n; k++) {
        int i = idx[k];
        s->prog[k] = i;
        s->task[k] = d->task[i];
        s->y[k] = d->label[i];
        s->off[k] = r;
        s->nr[k] = d->n_rows[i];
        memcpy(s->rows + (size_t)r * CM_N_FEATS, d->rows + (size_t)d->row_off[i] * CM_N_FEATS,
               (size_t)d->n_rows[i] * CM_N_FEATS * sizeof *s->rows);
        r += d->n_rows[i];
        s->task_start[d->task[i] + 1]++;
    }
    for (int t = 0; t < d->n_tasks; t++)
        s->task_start[t + 1] += s->task_start[t];
    {
        int *fill = at_malloc((size_t)d->n_tasks * sizeof *fill + 1);
        if (fill == NULL)
            goto fail;
        for (int t = 0; t < d->n_tasks; t++)
            fill[t] = s->task_start[t];
        for (int k = 0; k < n; k++)
            s->by_task[fill[s->task[k]]++] = k;
        at_free(fill);
    }
    if (XGDMatrixCreateFromMat(s->rows, (bst_ulong)s->n_rows, CM_N_FEATS, NAN, &s->dm) != 0) {
        err = cm__xgb_fail(errmsg, errmsg_size, "making a training matrix");
        goto fail;
    }
    if (m->n_base) {
        double *bm = at_malloc((size_t)(s->n_rows + 1) * sizeof *bm);
        float *bmf = at_malloc((size_t)(s->n_rows + 1) * sizeof *bmf);
        if (bm == NULL || bmf == NULL) {
            at_free(bm);
            at_free(bmf);
            goto fail;
        }
        err = predict_rows(m, s->rows, s->n_rows, bm, 0);
        for (int64_t i = 0; i < s->n_rows; i++)
            bmf[i] = (float)bm[i];
        if (err == AT_OK &&
            XGDMatrixSetFloatInfo(s->dm, "base_margin", bmf, (bst_ulong)s->n_rows) != 0)
            err = cm__xgb_fail(errmsg, errmsg_size, "setting base margins");
        at_free(bm);
        at_free(bmf);
        if (err != AT_OK)
            goto fail;
    }
    return AT_OK;
fail:
    tset_free(s);
    return err;
}

/* Pack sums of the set from the booster's margins (base margins included). */
static at_err tset_scores(BoosterHandle h, tset *s, int training, char *errmsg, size_t n)
{
    bst_ulong len;
    const float *out;
    if (XGBoosterPredict(h, s->dm, 1, 0, training, &len, &out) != 0)
        return cm__xgb_fail(errmsg, n, "predicting the training set");
    if ((int64_t)len != s->n_rows) {
        if (errmsg && n)
            snprintf(errmsg, n, "XGBoost returned %llu margins for %lld rows",
                     (unsigned long long)len, (long long)s->n_rows);
        return AT_EIO;
    }
    for (int k = 0; k < s->n; k++) {
        double sum = 0;
        for (int r = 0; r < s->nr[k]; r++)
            sum += out[s->off[k] + r];
        s->score[k] = sum;
    }
    return AT_OK;
}

/* One task's programs in contiguous scratch, for the rank gradients: labels, exp(score -
** the task's best score) (so that 1 / (1 + exp(s_i - s_j)) = e_j / (e_i + e_j), no exp per
** pair), discounts, and the gradient and hessian sums. */
typedef struct pairbuf {
    pairprog *p;
    double *d;
} pairbuf;

/* The logistic pair loss's gradient for programs a and b (positions in 'l'), when their
** labels are apart by more than min_ratio (a failure, label 0, always is). */
static inline void pair_grad(pairbuf *l, int a, int b, double pw, double tw, double min_ratio)
{
    double ya = l->p[a].y, yb = l->p[b].y;
    int hi, lo;
    if (ya > yb * min_ratio)
        hi = a, lo = b;
    else if (yb > ya * min_ratio)
        hi = b, lo = a;
    else
        return;
    double rho = l->p[lo].e / (l->p[hi].e + l->p[lo].e); /* 1 / (1 + exp(s_hi - s_lo)) */
    double w = pw > 0 ? pow(l->p[hi].y - l->p[lo].y, pw) : 1;
    if (tw > 0)
        w *= 1 + tw * fabs(l->d[hi] - l->d[lo]);
    double hh = w * rho * (1 - rho);
    l->p[hi].g -= w * rho;
    l->p[lo].g += w * rho;
    l->p[hi].h += hh;
    l->p[lo].h += hh;
}

typedef struct scored {
    double score;
    int k;
} scored;

static int cmp_scored_desc(const void *a, const void *b)
{
    const scored *x = a, *y = b;
    return x->score > y->score ? -1 : x->score < y->score ? 1 : x->k - y->k;
}

/* D(r) = 1 / log2(2 + r) of every program's rank by its current score within its task. */
static void tset_discounts(tset *s)
{
    scored *ord = at_malloc((size_t)(s->n + 1) * sizeof *ord);
    for (int k = 0; k < s->n; k++)
        s->disc[k] = 0;
    if (ord == NULL)
        return;
    for (int t = 0; t < s->n_tasks; t++) {
        int a0 = s->task_start[t], cnt = s->task_start[t + 1] - a0;
        for (int a = 0; a < cnt; a++) {
            ord[a].k = s->by_task[a0 + a];
            ord[a].score = s->score[ord[a].k];
        }
        qsort(ord, (size_t)cnt, sizeof *ord, cmp_scored_desc);
        for (int r = 0; r < cnt; r++)
            s->disc[ord[r].k] = 1 / log2(2.0 + r);
    }
    at_free(ord);
}

/* Gradients of the objective at the current scores, per program then per row. */
static void tset_gradients(const cm_model *m, tset *s, at_rng *rng)
{
    for (int k = 0; k < s->n; k++)
        s->pg[k] = s->ph[k] = 0;
    if (m->p.objective == CM_OBJ_REG) {
        for (int k = 0; k < s->n; k++) {
            double w = s->y[k];
            s->pg[k] = w * (s->score[k] - s->y[k]);
            s->ph[k] = w;
        }
    } else {
        int np = m->p.n_partners > 0 ? m->p.n_partners : 1;
        double min_ratio = m->p.min_pair_ratio > 1 ? m->p.min_pair_ratio : 1;
        double tw = m->p.top_weight, pw = m->p.pair_weight;
        pairbuf l = {s->pb, s->pbd};
        if (tw > 0)
            tset_discounts(s);
        for (int t = 0; t < s->n_tasks; t++) {
            int a0 = s->task_start[t], cnt = s->task_start[t + 1] - a0;
            double top = -INFINITY;
            if (cnt < 2)
                continue;
            for (int a = 0; a < cnt; a++)
                if (s->score[s->by_task[a0 + a]] > top)
                    top = s->score[s->by_task[a0 + a]];
            for (int a = 0; a < cnt; a++) {
                int k = s->by_task[a0 + a];
                double x = s->score[k] - top;
                l.p[a].y = s->y[k];
                l.p[a].e = exp(x > -700 ? x : -700); /* no underflow to 0 (NaN: -700) */
                l.d[a] = tw > 0 ? s->disc[k] : 0;
                l.p[a].g = l.p[a].h = 0;
            }
            if (cnt <= np + 1) {
                for (int a = 0; a < cnt; a++)
                    for (int b = a + 1; b < cnt; b++)
                        pair_grad(&l, a, b, pw, tw, min_ratio);
            } else {
                /* Partners drawn 32 bits at a time, b = (x * (cnt - 1)) >> 32 (Lemire's
                ** multiply-shift; a bias of at most cnt / 2^32 between partners). */
                uint64_t nb = (uint64_t)cnt - 1;
                for (int a = 0; a < cnt; a++) {
                    double ya = l.p[a].y, ea = l.p[a].e, ga = 0, ha = 0;
                    for (int q0 = 0; q0 < np; q0 += 64) {
                        int part[64], nq = np - q0 < 64 ? np - q0 : 64;
                        /* drawn first, so that the partners' loads do not wait on the rng */
                        for (int q = 0; q < nq; q += 2) {
                            uint64_t x = at_rng_u64(rng);
                            part[q] = (int)(((x & 0xffffffffu) * nb) >> 32);
                            part[q + 1] = (int)((((x >> 32) & 0xffffffffu) * nb) >> 32);
                        }
                        for (int q = 0; q < nq; q++) {
                            int b = part[q] + (part[q] >= a);
                            if (pw > 0 || tw > 0) {
                                pair_grad(&l, a, b, pw, tw, min_ratio);
                                continue;
                            }
                            /* pair_grad without branches: 1 where a (b) is the faster */
                            double yb = l.p[b].y, eb = l.p[b].e;
                            double fa = ya > yb * min_ratio, fb = yb > ya * min_ratio;
                            double inv = 1 / (ea + eb);
                            double rho = (fa * eb + fb * ea) * inv, sg = (fa - fb) * rho;
                            double hh = rho * (1 - rho);
                            ga -= sg;
                            l.p[b].g += sg;
                            ha += hh;
                            l.p[b].h += hh;
                        }
                    }
                    l.p[a].g += ga;
                    l.p[a].h += ha;
                }
            }
            for (int a = 0; a < cnt; a++) {
                int k = s->by_task[a0 + a];
                s->pg[k] = l.p[a].g;
                s->ph[k] = l.p[a].h;
            }
        }
    }
    for (int k = 0; k < s->n; k++)
        for (int r = 0; r < s->nr[k]; r++) {
            s->grad[s->off[k] + r] = (float)s->pg[k];
            s->hess[s->off[k] + r] = (float)(s->ph[k] > 1e-6 ? s->ph[k] : 1e-6);
        }
}

/* The objective's loss on a set (all pairs of each task for rank), lower is better. */
static double tset_loss(const cm_model *m, const tset *s)
{
    double loss = 0, wsum = 0;
    if (m->p.objective == CM_OBJ_REG) {
        for (int k = 0; k < s->n; k++) {
            double e = s->score[k] - s->y[k];
            loss += s->y[k] * e * e;
            wsum += s->y[k];
        }
        return wsum > 0 ? loss / wsum : 0;
    }
    for (int t = 0; t < s->n_tasks; t++)
        for (int a = s->task_start[t]; a < s->task_start[t + 1]; a++)
            for (int b = a + 1; b < s->task_start[t + 1]; b++) {
                int i = s->by_task[a], j = s->by_task[b], hi, lo;
                double d;
                if (s->y[i] == s->y[j])
                    continue;
                hi = s->y[i] > s->y[j] ? i : j;
                lo = hi == i ? j : i;
                d = s->score[hi] - s->score[lo];
                loss += d > 35 ? exp(-d) : log1p(exp(-d));
                wsum += 1;
            }
    return wsum > 0 ? loss / wsum : 0;
}

/* Boost 'rounds' rounds on 'tr' (or until early stopping on 'va' when va != NULL);
** *best_rounds gets the rounds to keep. */
static at_err boost_rounds(cm_model *m, BoosterHandle h, tset *tr, tset *va, int rounds,
                           uint64_t seed, int *best_rounds, char *errmsg, size_t n)
{
    at_rng rng;
    double best = INFINITY;
    at_err err;
    at_rng_seed(&rng, seed);
    *best_rounds = rounds;
    for (int it = 0; it < rounds; it++) {
        if ((err = tset_scores(h, tr, 1, errmsg, n)) != AT_OK)
            return err;
        tset_gradients(m, tr, &rng);
        if (XGBoosterBoostOneIter(h, tr->dm, tr->grad, tr->hess, (bst_ulong)tr->n_rows) != 0)
            return cm__xgb_fail(errmsg, n, "boosting");
        if (va) {
            double l;
            if ((err = tset_scores(h, va, 0, errmsg, n)) != AT_OK)
                return err;
            l = tset_loss(m, va);
            if (l < best - 1e-9) {
                best = l;
                *best_rounds = it + 1;
            } else if (it + 1 - *best_rounds >= m->p.early_stop) {
                break;
            }
        }
    }
    return AT_OK;
}

static at_err new_booster(cm_model *m, DMatrixHandle *dms, int n_dm, uint64_t seed,
                          BoosterHandle *out, char *errmsg, size_t n)
{
    at_err err;
    if (XGBoosterCreate(dms, (bst_ulong)n_dm, out) != 0)
        return cm__xgb_fail(errmsg, n, "creating a booster");
    if ((err = set_params(m, *out, seed, errmsg, n)) != AT_OK) {
        XGBoosterFree(*out);
        *out = NULL;
    }
    return err;
}

/* Train a new booster on all of m->data (on top of base), replacing m->boost. */
static at_err train(cm_model *m, char *errmsg, size_t errmsg_size)
{
    cm_data *d = m->data;
    int *all = NULL, *tr_idx = NULL, *va_idx = NULL, n_all = 0, n_tr = 0, n_va = 0;
    tset tr, va, full;
    BoosterHandle h = NULL;
    int rounds = m->p.max_rounds, kept;
    uint64_t seed = m->p.seed + 1000003ull * (uint64_t)m->n_trainings;
    double t0 = at_time_mono_s();
    at_err err = AT_ENOMEM;
    at_rng rng;
    memset(&tr, 0, sizeof tr);
    memset(&va, 0, sizeof va);
    memset(&full, 0, sizeof full);
    cm__data_labels(d);
    all = at_malloc((size_t)(d->n + 1) * sizeof *all);
    tr_idx = at_malloc((size_t)(d->n + 1) * sizeof *tr_idx);
    va_idx = at_malloc((size_t)(d->n + 1) * sizeof *va_idx);
    if (!all || !tr_idx || !va_idx)
        goto out;
    for (int i = 0; i < d->n; i++)
        if (d->n_rows[i] > 0)
            all[n_all++] = i;
    if (n_all == 0) {
        if (errmsg && errmsg_size)
            snprintf(errmsg, errmsg_size, "no program to train on (none lowered)");
        err = AT_EINVAL;
        goto out;
    }
    /* hold out valid_frac of every task with enough programs, for early stopping */
    at_rng_seed(&rng, seed ^ 0x5bd1e995u);
    {
        int *cnt = at_calloc((size_t)d->n_tasks + 1, sizeof *cnt);
        if (cnt == NULL)
            goto out;
        for (int k = 0; k < n_all; k++)
            cnt[d->task[all[k]]]++;
        for (int k = 0; k < n_all; k++) {
            if (m->p.early_stop > 0 && m->p.valid_frac > 0 && cnt[d->task[all[k]]] >= 20 &&
                at_rng_double(&rng) < m->p.valid_frac)
                va_idx[n_va++] = all[k];
            else
                tr_idx[n_tr++] = all[k];
        }
        at_free(cnt);
    }
    if (n_va > 0 && n_tr > 0) {
        DMatrixHandle dms[2];
        if ((err = tset_build(m, d, tr_idx, n_tr, &tr, errmsg, errmsg_size)) != AT_OK ||
            (err = tset_build(m, d, va_idx, n_va, &va, errmsg, errmsg_size)) != AT_OK)
            goto out;
        dms[0] = tr.dm;
        dms[1] = va.dm;
        if ((err = new_booster(m, dms, 2, seed, &h, errmsg, errmsg_size)) != AT_OK ||
            (err = boost_rounds(m, h, &tr, &va, rounds, seed, &rounds, errmsg, errmsg_size)) !=
                AT_OK)
            goto out;
        XGBoosterFree(h);
        h = NULL;
        tset_free(&tr);
        tset_free(&va);
    }
    /* the final booster: all programs, the chosen number of rounds */
    if ((err = tset_build(m, d, all, n_all, &full, errmsg, errmsg_size)) != AT_OK ||
        (err = new_booster(m, &full.dm, 1, seed, &h, errmsg, errmsg_size)) != AT_OK ||
        (err = boost_rounds(m, h, &full, NULL, rounds, seed + 1, &kept, errmsg, errmsg_size)) !=
            AT_OK)
        goto out;
    if (m->boost)
        XGBoosterFree(m->boost);
    m->boost = h;
    h = NULL;
    m->n_trained_on = d->n;
    {
        /* each task's programs now, for the retraining rule (cm_model_update) */
        int *tt = at_calloc((size_t)d->n_tasks + 1, sizeof *tt);
        if (tt) {
            for (int i = 0; i < d->n; i++) {
                int t = cm_data_task_of(d, i);
                if (t >= 0 && t < d->n_tasks)
                    tt[t]++;
            }
            at_free(m->task_trained);
            m->task_trained = tt;
            m->n_task_trained = d->n_tasks;
        }
    }
    m->n_trainings++;
    m->info.n_rounds = rounds;
    m->info.n_programs = n_all;
    m->info.n_rows = full.n_rows;
    m->info.seconds = at_time_mono_s() - t0;
    at_log_info("cost model: trained on %d programs (%lld rows, %d tasks) in %.2f s, %d rounds",
                n_all, (long long)full.n_rows, d->n_tasks, m->info.seconds, rounds);
    err = AT_OK;
out:
    if (h)
        XGBoosterFree(h);
    tset_free(&tr);
    tset_free(&va);
    tset_free(&full);
    at_free(all);
    at_free(tr_idx);
    at_free(va_idx);
    return err;
}

static int n_lowered(const cm_data *d)
{
    int n = 0;
    for (int i = 0; i < d->n; i++)
        n += d->n_rows[i] > 0;
    return n;
}

/* Has a task grown enough since the last training that the model must see it, however
** little the data grew as a whole?  Two cases:
** - the last 'n_new' programs brought a task to 'warmup' programs: a model trained before
**   (on other tasks: a store's other networks, a run's other tasks) has not seen it yet
**   (16 matmul programs next to 1,000 of a convolution are 1.6 %, and without a retraining
**   the convolution's model went on picking the matmul's programs);
** - a task has CM_RETRAIN_TASK_NEW programs more than at the last training, and grew by
**   retrain_growth_pct of its own count: a run in a store holding a corpus of thousands of
**   other programs would otherwise learn nothing more of its own task for several rounds
**   (64 new programs against 3,200 are 2 %). */
#define CM_RETRAIN_TASK_NEW 64
static int task_needs_training(const cm_model *m, int n_new)
{
    const cm_data *d = m->data;
    int nt = cm_data_n_tasks(d), n = cm_data_count(d), hit = 0, warmup = m->p.warmup;
    double g = 1 + m->p.retrain_growth_pct / 100.0;
    int *cnt, *fresh;
    if (n_new <= 0 || nt <= 0)
        return 0;
    cnt = at_calloc((size_t)nt, sizeof *cnt);
    fresh = at_calloc((size_t)nt, sizeof *fresh);
    if (cnt == NULL || fresh == NULL) {
        at_free(cnt);
        at_free(fresh);
        return 1; /* cannot tell: retrain */
    }
    for (int i = 0; i < n; i++) {
        int t = cm_data_task_of(d, i);
        if (t >= 0 && t < nt) {
            cnt[t]++;
            fresh[t] += i >= n - n_new;
        }
    }
    for (int t = 0; t < nt && !hit; t++) {
        int before = t < m->n_task_trained ? m->task_trained[t] : 0;
        hit = (fresh[t] > 0 && cnt[t] >= warmup && cnt[t] - fresh[t] < warmup) ||
              (cnt[t] - before >= CM_RETRAIN_TASK_NEW && cnt[t] >= before * g);
    }
    at_free(cnt);
    at_free(fresh);
    return hit;
}

at_err cm_model_update(cm_model *m, const cm_sample *s, int n, char *errmsg, size_t errmsg_size)
{
    at_err err;
    int have;
    if (errmsg && errmsg_size)
        errmsg[0] = 0;
    if ((err = cm_data_add(m->data, s, n, NULL)) != AT_OK)
        return err;
    have = n_lowered(m->data);
    if (have < m->p.warmup)
        return AT_OK; /* warm-up (or the loaded model) until there is enough data */
    if (m->boost && m->p.retrain_growth_pct > 0 &&
        (double)m->data->n < m->n_trained_on * (1 + m->p.retrain_growth_pct / 100.0) &&
        !task_needs_training(m, n))
        return AT_OK;
    return train(m, errmsg, errmsg_size);
}

at_err cm_model_fit(cm_model *m, const cm_data *d, char *errmsg, size_t errmsg_size)
{
    cm_data *copy;
    int *idx;
    at_err err;
    if (errmsg && errmsg_size)
        errmsg[0] = 0;
    if (cm_data_new(&copy) != AT_OK)
        return AT_ENOMEM;
    if ((idx = at_malloc((size_t)(d->n + 1) * sizeof *idx)) == NULL) {
        cm_data_free(copy);
        return AT_ENOMEM;
    }
    for (int i = 0; i < d->n; i++)
        idx[i] = i;
    err = cm_data_append(copy, d, idx, d->n);
    at_free(idx);
    if (err != AT_OK) {
        cm_data_free(copy);
        return err;
    }
    cm_data_free(m->data);
    m->data = copy;
    return train(m, errmsg, errmsg_size);
}

/* ---- prediction ---- */

static at_err grow_batch(cm_model *m, int n_prog, int64_t n_rows)
{
    if (n_prog > m->prow_cap) {
        int *p = at_realloc(m->prow, (size_t)n_prog * sizeof *p);
        if (p == NULL)
            return AT_ENOMEM;
        m->prow = p;
        m->prow_cap = n_prog;
    }
    if (n_rows > m->pcap) {
        int64_t cap = m->pcap ? m->pcap : 1024;
        float *p;
        while (cap < n_rows)
            cap *= 2;
        if ((p = at_realloc(m->pbuf, (size_t)cap * CM_N_FEATS * sizeof *p)) == NULL)
            return AT_ENOMEM;
        m->pbuf = p;
        m->pcap = cap;
    }
    if (n_rows > m->rowsum_cap) {
        int64_t cap = m->rowsum_cap ? m->rowsum_cap : 1024;
        double *p;
        while (cap < n_rows)
            cap *= 2;
        if ((p = at_realloc(m->rowsum, (size_t)cap * sizeof *p)) == NULL)
            return AT_ENOMEM;
        m->rowsum = p;
        m->rowsum_cap = cap;
    }
    return AT_OK;
}

/* A share of a batch's rows, predicted in a thread of its own. */
typedef struct pred_part {
    cm_model *m;
    const float *rows;
    int64_t n;
    double *out;
    at_err err;
} pred_part;

static void *predict_part(void *arg)
{
    pred_part *p = arg;
    p->err = predict_rows(p->m, p->rows, p->n, p->out, 1);
    return NULL;
}

/* Margins of rows[0..n) into out, in p.predict_threads threads when the batch is large (a
** thread costs ~50 us, a row ~5 us). */
static at_err predict_split(cm_model *m, const float *rows, int64_t n, double *out)
{
    pred_part part[AT_MAX_PARTS];
    int nt = n >= 1024 ? AT_MAX(1, AT_MIN(m->p.predict_threads, AT_MAX_PARTS)) : 1;
    at_err err = AT_OK;
    for (int t = 0; t < nt; t++) {
        int64_t a = n * t / nt, b = n * (t + 1) / nt;
        part[t] = (pred_part){m, rows + a * CM_N_FEATS, b - a, out + a, AT_OK};
    }
    at_run_parts(predict_part, part, sizeof *part, nt);
    for (int t = 0; t < nt; t++)
        if (part[t].err != AT_OK)
            err = part[t].err;
    return err;
}

/* Score the programs whose rows are in m->pbuf (m->prow[i] rows each, 0 = invalid). */
static at_err score_batch(cm_model *m, int n, int64_t n_rows, double *scores)
{
    int64_t r = 0;
    at_err err;
    if (!m->boost && !m->n_base) {
        for (int i = 0; i < n; i++)
            scores[i] = m->prow[i] > 0 ? at_rng_double(&m->rng) : CM_SCORE_INVALID;
        return AT_OK;
    }
    if ((err = predict_split(m, m->pbuf, n_rows, m->rowsum)) != AT_OK)
        return err;
    for (int i = 0; i < n; i++) {
        double s = 0;
        for (int k = 0; k < m->prow[i]; k++)
            s += m->rowsum[r + k];
        scores[i] = m->prow[i] > 0 ? s : CM_SCORE_INVALID;
        r += m->prow[i];
    }
    return AT_OK;
}

/* Append one program's rows to the batch. */
static at_err batch_add(cm_model *m, int i, const cm_feats *f, int64_t *n_rows)
{
    at_err err;
    if ((err = grow_batch(m, i + 1, *n_rows + f->n_rows)) != AT_OK)
        return err;
    if (f->n_rows)
        memcpy(m->pbuf + (size_t)*n_rows * CM_N_FEATS, f->rows,
               (size_t)f->n_rows * CM_N_FEATS * sizeof *f->rows);
    m->prow[i] = f->n_rows;
    *n_rows += f->n_rows;
    return AT_OK;
}

at_err cm_model_predict_feats(cm_model *m, const cm_feats *const *f, int n, double *scores)
{
    int64_t n_rows = 0;
    at_err err;
    for (int i = 0; i < n; i++)
        if ((err = batch_add(m, i, f[i], &n_rows)) != AT_OK)
            return err;
    return score_batch(m, n, n_rows, scores);
}

at_err cm_model_predict_ir(cm_model *m, const kn_ir *const *irs, int n, double *scores)
{
    int64_t n_rows = 0;
    at_err err;
    for (int i = 0; i < n; i++) {
        err = irs[i] ? cm_features_extract(irs[i], &m->feats) : AT_EINVAL;
        if (err == AT_ENOMEM)
            return err;
        if (err != AT_OK)
            m->feats.n_rows = 0;
        if ((err = batch_add(m, i, &m->feats, &n_rows)) != AT_OK)
            return err;
    }
    return score_batch(m, n, n_rows, scores);
}

at_err cm_model_predict(cm_model *m, const ss_state *const *states, int n, double *scores)
{
    int64_t n_rows = 0;
    char msg[256];
    at_err err;
    for (int i = 0; i < n; i++) {
        err = states[i] ? cm_features_of_state(states[i], &m->feats, msg, sizeof msg) : AT_EINVAL;
        if (err == AT_ENOMEM)
            return err;
        if (err != AT_OK)
            m->feats.n_rows = 0;
        if ((err = batch_add(m, i, &m->feats, &n_rows)) != AT_OK)
            return err;
    }
    return score_batch(m, n, n_rows, scores);
}

at_err cm_model_predict_data(cm_model *m, const cm_data *d, double *scores)
{
    at_err err;
    if ((err = grow_batch(m, d->n + 1, d->n_all_rows + 1)) != AT_OK)
        return err;
    for (int i = 0; i < d->n; i++)
        m->prow[i] = d->n_rows[i];
    /* the data's rows are contiguous in program order: predict them in place */
    if (!m->boost && !m->n_base) {
        for (int i = 0; i < d->n; i++)
            scores[i] = d->n_rows[i] > 0 ? at_rng_double(&m->rng) : CM_SCORE_INVALID;
        return AT_OK;
    }
    if ((err = predict_rows(m, d->rows, d->n_all_rows, m->rowsum, 1)) != AT_OK)
        return err;
    for (int i = 0; i < d->n; i++) {
        double s = 0;
        for (int k = 0; k < d->n_rows[i]; k++)
            s += m->rowsum[d->row_off[i] + k];
        scores[i] = d->n_rows[i] > 0 ? s : CM_SCORE_INVALID;
    }
    return AT_OK;
}
