/* tuner/tn_search.c -- the evolutionary search of one task.
**
** One round (Ansor's, REFERENCE.md §6):
**   1. an initial population: 'population' states sampled from the sketches, plus the
**      best measured states (measured_ratio of the population); a round that picks few
**      programs (a small task's warm-up of 8) uses a smaller one, 32 per pick and at
**      least 256, so that small tasks do not cost the search time of large ones;
**   2. 'n_generations' generations: score every member with the cost model, offer the
**      unmeasured ones to a heap of the 2 x n_pick best (one entry per program), then breed
**      the next population: a parent drawn with probability growing with its score,
**      mutated with probability mutation_prob (a failed mutation is drawn again);
**      members are sampled, bred and lowered for their features in n_threads threads,
**      each on a random stream of its own drawn in order, so the search does not depend
**      on the number of threads;
**   3. pick n_pick programs to measure: the best of the heap, except a fraction eps_greedy
**      drawn at random from the sampled states (exploration).
** Programs whose code, once unrolled, exceeds max_code_size (kn_ir_code_size) are never
** picked, by the model or at random: they cost the most to build and are rarely the best
** (docs/tuning.md); they still breed, since a mutation may make them small.  Seeds (programs
** of similar tasks, hand-written ones) are not limited, and a round that finds nothing
** within the limit picks the best over it rather than end the task.
** A program is identified by its loop structure (ss_state_hash: what ss_state_print
** prints); every measured or picked program is remembered, so nothing is measured twice. */
#include "tuner/tuner_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cost_model/cost_model.h"

void tn__search_cfg_default(tn_search_cfg *c)
{
    c->population = 2048;
    c->n_generations = 4;
    c->measured_ratio = 0.2;
    c->eps_greedy = 0.05;
    c->mutation_prob = 0.85;
    c->n_threads = 1;
    c->stop = NULL;
    c->max_code_size = TN_MAX_CODE_SIZE;
}

/* Over the code-size limit (known only once lowered for the model's features)? */
static int too_big(const tn_search *s, const cm_feats *f)
{
    return f != NULL && s->cfg.max_code_size > 0 && f->code_size > s->cfg.max_code_size;
}

static int stopped(const tn_search *s)
{
    return s->cfg.stop && *s->cfg.stop;
}

/* ---- the set of programs seen (measured or picked) ---- */

static uint64_t state_id(const ss_state *st)
{
    return ss_state_hash(st) | 1; /* 0 marks an empty slot */
}

/* The program's id once lowered (cm_feats.ir_hash): states that lower to one program share
** it.  0 when the features are not known. */
static uint64_t program_id(const cm_feats *f)
{
    return f != NULL && f->ir_hash != 0 ? f->ir_hash | 1 : 0;
}

static int seen_has(const tn_search *s, uint64_t h)
{
    if (s->cap_seen == 0 || h == 0)
        return 0;
    for (size_t i = h & (size_t)(s->cap_seen - 1);; i = (i + 1) & (size_t)(s->cap_seen - 1)) {
        if (s->seen[i] == 0)
            return 0;
        if (s->seen[i] == h)
            return 1;
    }
}

static at_err seen_add(tn_search *s, uint64_t h)
{
    if (seen_has(s, h))
        return AT_OK;
    if (2 * (s->n_seen + 1) > s->cap_seen) {
        int cap = s->cap_seen ? 2 * s->cap_seen : 1024;
        uint64_t *t = at_calloc((size_t)cap, sizeof *t);
        if (t == NULL)
            return AT_ENOMEM;
        for (int i = 0; i < s->cap_seen; i++) {
            uint64_t v = s->seen[i];
            size_t j;
            if (v == 0)
                continue;
            for (j = v & (size_t)(cap - 1); t[j]; j = (j + 1) & (size_t)(cap - 1))
                ;
            t[j] = v;
        }
        at_free(s->seen);
        s->seen = t;
        s->cap_seen = cap;
    }
    {
        size_t j;
        for (j = h & (size_t)(s->cap_seen - 1); s->seen[j]; j = (j + 1) & (size_t)(s->cap_seen - 1))
            ;
        s->seen[j] = h;
        s->n_seen++;
    }
    return AT_OK;
}

/* ---- features kept with programs ---- */

void tn__feats_free(cm_feats *f)
{
    if (f) {
        cm_feats_fini(f);
        at_free(f);
    }
}

/* A heap copy of 'f' (NULL for NULL); *err = AT_ENOMEM when it cannot be made. */
static cm_feats *feats_dup(const cm_feats *f, at_err *err)
{
    cm_feats *c;
    if (f == NULL)
        return NULL;
    if ((c = at_malloc(sizeof *c)) == NULL) {
        *err = AT_ENOMEM;
        return NULL;
    }
    cm_feats_init(c);
    if (cm_feats_copy(c, f) != AT_OK) {
        tn__feats_free(c);
        *err = AT_ENOMEM;
        return NULL;
    }
    return c;
}

/* ---- life cycle ---- */

at_err tn__search_new(ss_dag *dag, const ss_hw *hw, const tn_search_cfg *cfg, uint64_t seed,
                     tn_search **out, char *errmsg, size_t errmsg_size)
{
    tn_search *s;
    at_err err;
    *out = NULL;
    s = at_calloc(1, sizeof *s);
    if (s == NULL)
        return AT_ENOMEM;
    s->cfg = *cfg;
    if (s->cfg.population < 4)
        s->cfg.population = 4;
    at_rng_seed(&s->rng, seed);
    s->dag = ss_dag_ref(dag);
    if ((err = ss_space_new(dag, hw, NULL, &s->sp, errmsg, errmsg_size)) != AT_OK) {
        ss_dag_unref(s->dag);
        at_free(s);
        return err;
    }
    *out = s;
    return AT_OK;
}

void tn__search_free(tn_search *s)
{
    if (s == NULL)
        return;
    for (int i = 0; i < s->n_good; i++) {
        at_free(s->good[i].json);
        ss_state_free(s->good[i].st);
        tn__feats_free(s->good[i].f);
    }
    at_free(s->good);
    for (int i = 0; i < s->n_seeds; i++)
        ss_state_free(s->seeds[i]);
    at_free(s->seeds);
    at_free(s->seen);
    ss_space_free(s->sp);
    ss_dag_unref(s->dag);
    at_free(s);
}

at_err tn__search_add_measured(tn_search *s, const char *state_json, const ss_state *st,
                               const cm_feats *f, double cost_s, int ok)
{
    ss_state *own = NULL;
    tn_search_good *g;
    at_err err = AT_OK;
    if (st == NULL) {
        s->n_parsed++;
        err = ss_state_from_json(s->dag, state_json, strlen(state_json), &own, NULL, 0);
        if (err != AT_OK)
            return err == AT_ENOMEM ? err : AT_OK; /* a record that no longer replays: ignore */
        st = own;
    }
    err = seen_add(s, state_id(st));
    if (err == AT_OK && program_id(f) != 0)
        err = seen_add(s, program_id(f));
    if (err != AT_OK || !ok) {
        ss_state_free(own);
        return err;
    }
    if (s->n_good == s->cap_good) {
        int cap = s->cap_good ? 2 * s->cap_good : 64;
        void *p = at_realloc(s->good, (size_t)cap * sizeof *s->good);
        if (p == NULL) {
            ss_state_free(own);
            return AT_ENOMEM;
        }
        s->good = p;
        s->cap_good = cap;
    }
    g = &s->good[s->n_good];
    memset(g, 0, sizeof *g);
    g->json = at_strdup(state_json);
    if (own) {
        g->st = own;
    } else if (ss_state_copy(st, &g->st) != AT_OK) {
        err = AT_ENOMEM;
    }
    g->f = feats_dup(f, &err);
    if (g->json == NULL || err != AT_OK) {
        at_free(g->json);
        ss_state_free(g->st);
        tn__feats_free(g->f);
        return AT_ENOMEM;
    }
    g->cost = cost_s;
    s->n_good++;
    return AT_OK;
}

void tn__search_set_widen(tn_search *s, int level)
{
    s->widen = level < 0 ? 0 : level > TN_SEARCH_MAX_WIDEN ? TN_SEARCH_MAX_WIDEN : level;
}

int tn__search_n_seen(const tn_search *s)
{
    return s->n_seen;
}

int tn__search_seed(tn_search *s, const char *state_json)
{
    ss_state *st, **p;
    at_err err;
    if (s->n_seeds >= TN_SEARCH_MAX_SEEDS)
        return 0;
    s->n_parsed++;
    err = ss_state_from_json_fit(s->dag, state_json, strlen(state_json), &st, NULL, 0);
    if (err == AT_ENOMEM)
        return -1;
    if (err != AT_OK)
        return 0; /* another loop structure: nothing to learn from it here */
    /* kept as this task's own state (tile sizes fitted to its extents) */
    if ((p = at_realloc(s->seeds, (size_t)(s->n_seeds + 1) * sizeof *p)) == NULL) {
        ss_state_free(st);
        return -1;
    }
    s->seeds = p;
    s->seeds[s->n_seeds++] = st;
    return 1;
}

static int cmp_good(const void *a, const void *b);

const char *tn__search_best_json(tn_search *s, int k)
{
    if (k < 0 || k >= s->n_good)
        return NULL;
    qsort(s->good, (size_t)s->n_good, sizeof *s->good, cmp_good);
    return s->good[k].json;
}

/* ---- one round ---- */

typedef struct cand {
    ss_state *st;
    cm_feats *f; /* its features (NULL when scored at random) */
    double score;
    uint64_t id;
} cand;

static int cmp_good(const void *a, const void *b)
{
    const tn_search_good *x = a, *y = b;
    return x->cost < y->cost ? -1 : x->cost > y->cost;
}

static int cmp_cand_desc(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    return x->score > y->score ? -1 : x->score < y->score;
}

/* A population: states and, once scored by a model, their features (have[i]). */
typedef struct popn {
    ss_state **st;
    cm_feats *f;
    unsigned char *have;
} popn;

static void popn_free(popn *p, int P)
{
    for (int i = 0; p->st && i < P; i++)
        ss_state_free(p->st[i]);
    for (int i = 0; p->f && i < P; i++)
        cm_feats_fini(&p->f[i]);
    at_free(p->st);
    at_free(p->f);
    at_free(p->have);
}

#define TN_SEARCH_MAX_THREADS AT_MAX_PARTS

/* Lower to->st[slot] for its features (work: scratch); one that does not lower scores as
** invalid. */
static at_err lower_member(popn *to, int slot, cm_feats *work, int64_t *n_lowered)
{
    at_err e = cm_features_of_state(to->st[slot], work, NULL, 0);
    if (e == AT_ENOMEM)
        return e;
    if (e != AT_OK)
        work->n_rows = 0;
    if (cm_feats_copy(&to->f[slot], work) != AT_OK)
        return AT_ENOMEM;
    to->have[slot] = 1;
    (*n_lowered)++;
    return AT_OK;
}

/* ---- making members (sampled or bred) in threads ----
** The serial part draws what each new member is (a sample, or a parent and whether it is
** mutated) and a seed for its own random stream; threads then make the members and, with
** a model, lower them for their features at once.  Each member's stream is its own, so a
** population does not depend on the number of threads.  (A round of ResNet-18's search
** spent as long mutating and sampling, one thread, as lowering for features in two.) */
typedef struct make_job {
    int parent; /* -1: sampled from the sketches; -2: the member in its slot already, lowered
                ** when it has no features yet */
    int mutate; /* 1: a mutation of the parent (and up to 'widen' more), 0: a copy */
    uint64_t seed;
} make_job;

typedef struct make_part {
    const tn_search *s;
    const popn *from;     /* the parents */
    popn *to;             /* job j makes to->st[base + j] */
    const make_job *jobs;
    unsigned char *made;  /* per job: 1 when made */
    int base, n_jobs, first, stride, lower;
    cm_feats *work;
    int64_t n_lowered;
    at_err err;
} make_part;

static void *make_members(void *arg)
{
    make_part *p = arg;
    const ss_space *sp = p->s->sp;
    for (int j = p->first; j < p->n_jobs && p->err == AT_OK; j += p->stride) {
        const make_job *jb = &p->jobs[j];
        int slot = p->base + j;
        ss_state *st = NULL;
        at_rng rng;
        at_err e;
        p->made[j] = 0;
        if (jb->parent == -2) {
            if ((p->made[j] = p->to->st[slot] != NULL) && p->lower && !p->to->have[slot] &&
                (p->err = lower_member(p->to, slot, p->work, &p->n_lowered)) != AT_OK)
                break;
            continue;
        }
        at_rng_seed(&rng, jb->seed);
        if (jb->parent < 0) {
            e = ss_space_sample(sp, &rng, &st);
        } else if (jb->mutate) {
            e = ss_space_mutate(sp, p->from->st[jb->parent], &rng, -1, &st);
            /* a widened round: up to 'widen' further mutations of the child (one that
            ** fails leaves the child as it was) */
            for (int extra = p->s->widen > 0
                                 ? (int)at_rng_below(&rng, (uint64_t)p->s->widen + 1)
                                 : 0;
                 e == AT_OK && extra > 0; extra--) {
                ss_state *further;
                at_err e2 = ss_space_mutate(sp, st, &rng, -1, &further);
                if (e2 == AT_ENOMEM) {
                    ss_state_free(st);
                    st = NULL;
                    e = e2;
                } else if (e2 == AT_OK) {
                    ss_state_free(st);
                    st = further;
                }
            }
        } else {
            e = ss_state_copy(p->from->st[jb->parent], &st) == AT_OK ? AT_OK : AT_ENOMEM;
            /* a copy is the same program: its features too */
            if (e == AT_OK && p->from->have[jb->parent]) {
                if (cm_feats_copy(&p->to->f[slot], &p->from->f[jb->parent]) != AT_OK)
                    e = AT_ENOMEM;
                else
                    p->to->have[slot] = 1;
            }
        }
        if (e == AT_ENOMEM) {
            ss_state_free(st);
            p->err = e;
            break;
        }
        if (e != AT_OK)
            continue;
        p->to->st[slot] = st;
        p->made[j] = 1;
        if (p->lower && !p->to->have[slot] &&
            (p->err = lower_member(p->to, slot, p->work, &p->n_lowered)) != AT_OK)
            break;
    }
    return NULL;
}

/* Make to->st[base .. base + n_jobs) by the jobs (in threads when n_work of them are worth
** it), then move the members made to the front: returns how many were made (*made_n) at
** to[base ..). */
static at_err make_all(tn_search *s, const popn *from, popn *to, int base, const make_job *jobs,
                       int n_jobs, int n_work, unsigned char *made, int lower, cm_feats *work,
                       int *made_n)
{
    make_part part[TN_SEARCH_MAX_THREADS];
    cm_feats works[TN_SEARCH_MAX_THREADS];
    int nt = 1, w = base;
    at_err err = AT_OK;
    /* a thread costs ~50 us, a member ~30-70 us */
    if (n_work >= 128)
        nt = AT_MAX(1, AT_MIN(s->cfg.n_threads, TN_SEARCH_MAX_THREADS));
    for (int t = 0; t < nt; t++) {
        part[t] = (make_part){s, from, to, jobs, made, base, n_jobs, t, nt, lower,
                              t == 0 ? work : &works[t], 0, AT_OK};
        if (t > 0)
            cm_feats_init(&works[t]);
    }
    at_run_parts(make_members, part, sizeof *part, nt);
    for (int t = 0; t < nt; t++) {
        if (part[t].err != AT_OK)
            err = part[t].err;
        s->n_lowered += part[t].n_lowered;
        if (t > 0)
            cm_feats_fini(&works[t]);
    }
    /* the members made, to the front, in job order (a slot not made holds no state) */
    for (int j = 0; j < n_jobs; j++) {
        int slot = base + j;
        if (!made[j]) {
            to->have[slot] = 0;
            continue;
        }
        if (slot != w) {
            cm_feats f = to->f[w];
            to->f[w] = to->f[slot];
            to->f[slot] = f;
            to->st[w] = to->st[slot];
            to->st[slot] = NULL;
            to->have[w] = to->have[slot];
            to->have[slot] = 0;
        }
        w++;
    }
    *made_n = w - base;
    return err;
}

/* Score pop[0..n): with a model, each member lowered once for its features (a copy of a
** scored parent keeps the parent's; members made by make_all have theirs), else at
** random.  jobs, made: scratch for n. */
static at_err score(tn_search *s, cm_model *model, popn *pop, int n, double *scores,
                    const cm_feats **ptr, cm_feats *work, make_job *jobs, unsigned char *made)
{
    int missing = 0, n_made;
    at_err err;
    if (model == NULL) {
        for (int i = 0; i < n; i++)
            scores[i] = at_rng_double(&s->rng);
        return AT_OK;
    }
    for (int i = 0; i < n; i++) {
        missing += !pop->have[i];
        jobs[i] = (make_job){-2, 0, 0};
    }
    if (missing > 0 &&
        (err = make_all(s, pop, pop, 0, jobs, n, missing, made, 1, work, &n_made)) != AT_OK)
        return err;
    for (int i = 0; i < n; i++)
        ptr[i] = &pop->f[i];
    return cm_model_predict_feats(model, ptr, n, scores);
}

/* Keep the best 'cap' unmeasured programs (one entry per program). */
static void heap_offer(cand *heap, int *n, int cap, const ss_state *st, const cm_feats *f,
                       double sc, uint64_t id, at_err *err)
{
    int worst = -1, k;
    ss_state *c;
    if (!isfinite(sc) || sc <= -1e30)
        return;
    for (int i = 0; i < *n; i++) {
        if (heap[i].id == id)
            return;
        if (worst < 0 || heap[i].score < heap[worst].score)
            worst = i;
    }
    if (*n < cap)
        k = (*n)++;
    else if (worst >= 0 && sc > heap[worst].score)
        k = worst;
    else
        return;
    if (ss_state_copy(st, &c) != AT_OK) {
        *err = AT_ENOMEM;
        if (k == *n - 1 && heap[k].st == NULL)
            (*n)--;
        return;
    }
    ss_state_free(heap[k].st);
    tn__feats_free(heap[k].f);
    heap[k].st = c;
    heap[k].f = feats_dup(f, err);
    heap[k].score = sc;
    heap[k].id = id;
}

at_err tn__search_round(tn_search *s, cm_model *model, int n_pick, ss_state **out,
                        cm_feats **out_feats, int *n_out, tn_search_stats *stats)
{
    int P = AT_MIN(s->cfg.population, AT_MAX(256, 32 * n_pick));
    int n_init = 0, n_rand = 0, n_eps, heap_cap = 2 * n_pick, n_heap = 0;
    int n_must = 0, n_from_good = 0;
    int must_at[TN_SEARCH_MAX_SEEDS], *rand_at = NULL, *good_of = NULL;
    popn pop = {0}, next = {0};
    ss_state **init = NULL, *must[TN_SEARCH_MAX_SEEDS] = {0};
    cm_feats **initf = NULL, *mustf[TN_SEARCH_MAX_SEEDS] = {0}, work;
    const cm_feats **ptr = NULL;
    /* big_heap: the best over the code-size limit; twice the picks, as heap, since states
    ** of one program are picked once */
    cand *heap = NULL, *big_heap = NULL;
    int n_big_heap = 0;
    double *scores = NULL;
    make_job *jobs = NULL;
    unsigned char *made = NULL;
    at_err err = AT_OK;
    int tries;
    *n_out = 0;
    memset(stats, 0, sizeof *stats);
    cm_feats_init(&work);
    if (n_pick <= 0)
        return AT_OK;
    n_eps = (int)floor(AT_MIN(0.5, s->cfg.eps_greedy + 0.1 * s->widen) * n_pick);
    pop.st = at_calloc((size_t)P, sizeof *pop.st);
    pop.f = at_calloc((size_t)P, sizeof *pop.f);
    pop.have = at_calloc((size_t)P, 1);
    next.st = at_calloc((size_t)P, sizeof *next.st);
    next.f = at_calloc((size_t)P, sizeof *next.f);
    next.have = at_calloc((size_t)P, 1);
    init = at_calloc((size_t)(3 * n_eps + 1), sizeof *init);
    initf = at_calloc((size_t)(3 * n_eps + 1), sizeof *initf);
    rand_at = at_calloc((size_t)(3 * n_eps + 1), sizeof *rand_at);
    good_of = at_calloc((size_t)P, sizeof *good_of);
    ptr = at_calloc((size_t)P, sizeof *ptr);
    scores = at_calloc((size_t)P, sizeof *scores);
    jobs = at_calloc((size_t)P, sizeof *jobs);
    made = at_calloc((size_t)P, 1);
    heap = at_calloc((size_t)heap_cap, sizeof *heap);
    big_heap = at_calloc((size_t)heap_cap, sizeof *big_heap);
    if (!pop.st || !pop.f || !pop.have || !next.st || !next.f || !next.have || !init ||
        !initf || !rand_at || !good_of || !ptr || !scores || !heap || !big_heap ||
        !jobs || !made) {
        err = AT_ENOMEM;
        goto done;
    }
    for (int i = 0; i < P; i++) {
        cm_feats_init(&pop.f[i]);
        cm_feats_init(&next.f[i]);
    }
    /* 1. the initial population: the best measured (with their features when known), then
    ** samples */
    if (s->n_good > 0) {
        int n_best = (int)(s->cfg.measured_ratio / (1 + s->widen) * P);
        qsort(s->good, (size_t)s->n_good, sizeof *s->good, cmp_good);
        for (int i = 0; i < s->n_good && n_init < n_best; i++) {
            if (ss_state_copy(s->good[i].st, &pop.st[n_init]) != AT_OK) {
                err = AT_ENOMEM;
                goto done;
            }
            if (s->good[i].f && model) {
                if (cm_feats_copy(&pop.f[n_init], s->good[i].f) != AT_OK) {
                    err = AT_ENOMEM;
                    goto done;
                }
                pop.have[n_init] = 1;
            }
            good_of[n_init] = i;
            n_init++;
        }
        n_from_good = n_init;
    }
    /* states of similar tasks replayed here (the first round of a task): in the
    ** population, and measured in this round whatever the (untrained) model says */
    for (int i = 0; i < s->n_seeds; i++) {
        if (n_init < P && n_must < TN_SEARCH_MAX_SEEDS) {
            pop.st[n_init] = s->seeds[i];
            s->seeds[i] = NULL;
            must_at[n_must++] = n_init++;
        }
        ss_state_free(s->seeds[i]);
        s->seeds[i] = NULL;
    }
    s->n_seeds = 0;
    tries = 0;
    while (n_init < P && tries < 4 * P && !stopped(s)) {
        int n_jobs = AT_MIN(P - n_init, 4 * P - tries), n_made;
        for (int j = 0; j < n_jobs; j++)
            jobs[j] = (make_job){-1, 0, at_rng_u64(&s->rng)};
        err = make_all(s, &pop, &pop, n_init, jobs, n_jobs, n_jobs, made, model != NULL, &work,
                       &n_made);
        if (err)
            goto done;
        tries += n_jobs;
        n_init += n_made;
        stats->n_sampled += n_made;
        stats->n_sample_fail += n_jobs - n_made;
    }
    /* the exploration pool: random members of the first population (copied, with their
    ** features, once it is scored) */
    for (int i = 0; i < 3 * n_eps && n_init > 0; i++)
        rand_at[n_rand++] = (int)at_rng_below(&s->rng, (uint64_t)n_init);
    /* 2. evolution */
    for (int g = 0; n_init > 0 && !stopped(s); g++) {
        double lo = INFINITY, total = 0;
        if ((err = score(s, model, &pop, n_init, scores, ptr, &work, jobs, made)) != AT_OK)
            goto done;
        stats->n_scored += n_init;
        if (g == 0) {
            /* what the first scoring learnt, for the seeds, the exploration pool and the
            ** measured programs of the store (lowered once) */
            for (int i = 0; i < n_must; i++) {
                if (ss_state_copy(pop.st[must_at[i]], &must[i]) != AT_OK) {
                    err = AT_ENOMEM;
                    goto done;
                }
                if (pop.have[must_at[i]])
                    mustf[i] = feats_dup(&pop.f[must_at[i]], &err);
            }
            for (int i = 0; i < n_rand; i++) {
                if (ss_state_copy(pop.st[rand_at[i]], &init[i]) != AT_OK) {
                    err = AT_ENOMEM;
                    goto done;
                }
                if (pop.have[rand_at[i]])
                    initf[i] = feats_dup(&pop.f[rand_at[i]], &err);
            }
            for (int i = 0; i < n_from_good && err == AT_OK; i++)
                if (pop.have[i] && s->good[good_of[i]].f == NULL) {
                    s->good[good_of[i]].f = feats_dup(&pop.f[i], &err);
                    /* a measured program is never measured again in another state's form */
                    if (err == AT_OK && program_id(&pop.f[i]) != 0)
                        err = seen_add(s, program_id(&pop.f[i]));
                }
            if (err)
                goto done;
        }
        for (int i = 0; i < n_init; i++) {
            uint64_t id = state_id(pop.st[i]);
            int big = pop.have[i] && too_big(s, &pop.f[i]);
            stats->n_too_big += big;
            if (!seen_has(s, id) && !seen_has(s, pop.have[i] ? program_id(&pop.f[i]) : 0)) {
                if (!big)
                    heap_offer(heap, &n_heap, heap_cap, pop.st[i],
                               pop.have[i] ? &pop.f[i] : NULL, scores[i], id, &err);
                else
                    heap_offer(big_heap, &n_big_heap, heap_cap, pop.st[i], &pop.f[i], scores[i],
                               id, &err);
            }
            if (err)
                goto done;
            if (isfinite(scores[i]) && scores[i] > -1e30 && scores[i] < lo)
                lo = scores[i];
        }
        if (g >= s->cfg.n_generations)
            break;
        /* roulette weights: scores shifted to be positive; invalid programs never breed.
        ** scores[i] becomes the running sum of the weights up to member i, and a parent is
        ** the first member whose sum passes a uniform draw (a binary search: a linear scan
        ** cost 2048 x 1024 additions a generation) */
        for (int i = 0; i < n_init; i++) {
            double w = isfinite(scores[i]) && scores[i] > -1e30 ? scores[i] - lo + 1e-3 : 0;
            total += w;
            scores[i] = total;
        }
        if (total <= 0)
            break;
        for (int k = 0; k < P && !stopped(s);) {
            int n_jobs = P - k, n_made;
            for (int jb = 0; jb < n_jobs; jb++) {
                double r = at_rng_double(&s->rng) * total;
                int a = 0, b = n_init - 1; /* the first i with r < scores[i], else the last */
                while (a < b) {
                    int mid = a + (b - a) / 2;
                    if (r < scores[mid])
                        b = mid;
                    else
                        a = mid + 1;
                }
                jobs[jb].parent = a;
                jobs[jb].mutate = at_rng_double(&s->rng) < s->cfg.mutation_prob;
                jobs[jb].seed = at_rng_u64(&s->rng);
            }
            err = make_all(s, &pop, &next, k, jobs, n_jobs, n_jobs, made, model != NULL, &work,
                           &n_made);
            if (err)
                goto done;
            for (int jb = 0; jb < n_jobs; jb++)
                if (jobs[jb].mutate) {
                    stats->n_mutated += made[jb];
                    stats->n_mutation_fail += !made[jb];
                }
            k += n_made;
            if (stats->n_mutation_fail > 50 * P)
                break;
        }
        for (int i = 0; i < n_init; i++) {
            ss_state_free(pop.st[i]);
            pop.st[i] = NULL;
        }
        {
            popn t = pop;
            pop = next;
            next = t;
        }
        memset(next.have, 0, (size_t)P);
        n_init = 0;
        while (n_init < P && pop.st[n_init])
            n_init++;
    }
    /* 3. pick: the seeds, the best predicted, and a few random ones */
    for (int i = 0; i < n_must && *n_out < (n_pick + 1) / 2; i++) {
        uint64_t id;
        if (must[i] == NULL)
            continue;
        id = state_id(must[i]);
        if (seen_has(s, id) || seen_has(s, program_id(mustf[i]))) {
            stats->n_same_program += !seen_has(s, id);
            continue;
        }
        if ((err = seen_add(s, id)) != AT_OK ||
            (program_id(mustf[i]) && (err = seen_add(s, program_id(mustf[i]))) != AT_OK))
            goto done;
        if (out_feats)
            out_feats[*n_out] = mustf[i];
        else
            tn__feats_free(mustf[i]);
        mustf[i] = NULL;
        out[(*n_out)++] = must[i];
        must[i] = NULL;
    }
    qsort(heap, (size_t)n_heap, sizeof *heap, cmp_cand_desc);
    {
        int want_model = n_pick - n_eps, hi = 0, ri = 0;
        while (*n_out < n_pick && (hi < n_heap || ri < n_rand)) {
            ss_state *st = NULL;
            cm_feats *f = NULL;
            int from_model = (*n_out < want_model && hi < n_heap) || ri >= n_rand;
            uint64_t id;
            if (from_model) {
                st = heap[hi].st;
                f = heap[hi].f;
                heap[hi].st = NULL;
                heap[hi++].f = NULL;
            } else {
                st = init[ri];
                f = initf[ri];
                init[ri] = NULL;
                initf[ri++] = NULL;
            }
            if (st == NULL || too_big(s, f)) {
                ss_state_free(st);
                tn__feats_free(f);
                continue;
            }
            id = state_id(st);
            if (!seen_has(s, id) && seen_has(s, program_id(f)))
                stats->n_same_program++;
            if (seen_has(s, id) || seen_has(s, program_id(f)) ||
                (err = seen_add(s, id)) != AT_OK ||
                (program_id(f) && (err = seen_add(s, program_id(f))) != AT_OK)) {
                ss_state_free(st);
                tn__feats_free(f);
                if (err)
                    goto done;
                continue;
            }
            if (out_feats)
                out_feats[*n_out] = f;
            else
                tn__feats_free(f);
            out[(*n_out)++] = st;
            if (from_model)
                stats->n_picked_model++;
            else
                stats->n_picked_random++;
        }
    }
    /* nothing within the code-size limit: the best over it rather than a task declared
    ** exhausted for its size */
    if (*n_out == 0 && n_big_heap > 0) {
        qsort(big_heap, (size_t)n_big_heap, sizeof *big_heap, cmp_cand_desc);
        for (int i = 0; i < n_big_heap && *n_out < n_pick; i++) {
            uint64_t id = big_heap[i].id, pid = program_id(big_heap[i].f);
            if (big_heap[i].st == NULL || seen_has(s, id) || seen_has(s, pid))
                continue;
            if ((err = seen_add(s, id)) != AT_OK || (pid && (err = seen_add(s, pid)) != AT_OK))
                goto done;
            if (out_feats)
                out_feats[*n_out] = big_heap[i].f;
            else
                tn__feats_free(big_heap[i].f);
            big_heap[i].f = NULL;
            out[(*n_out)++] = big_heap[i].st;
            big_heap[i].st = NULL;
            stats->n_picked_model++;
            stats->n_picked_big++;
        }
    }
done:
    popn_free(&pop, P);
    popn_free(&next, P);
    for (int i = 0; init && i < 3 * n_eps + 1; i++) {
        ss_state_free(init[i]);
        tn__feats_free(initf[i]);
    }
    for (int i = 0; heap && i < n_heap; i++) {
        ss_state_free(heap[i].st);
        tn__feats_free(heap[i].f);
    }
    for (int i = 0; big_heap && i < n_big_heap; i++) {
        ss_state_free(big_heap[i].st);
        tn__feats_free(big_heap[i].f);
    }
    for (int i = 0; i < n_must; i++) {
        ss_state_free(must[i]);
        tn__feats_free(mustf[i]);
    }
    cm_feats_fini(&work);
    at_free(init);
    at_free(initf);
    at_free(rand_at);
    at_free(good_of);
    at_free(ptr);
    at_free(scores);
    at_free(heap);
    at_free(big_heap);
    at_free(jobs);
    at_free(made);
    if (err != AT_OK) {
        for (int i = 0; i < *n_out; i++) {
            ss_state_free(out[i]);
            if (out_feats) {
                tn__feats_free(out_feats[i]);
                out_feats[i] = NULL;
            }
        }
        *n_out = 0;
    }
    return err;
}
