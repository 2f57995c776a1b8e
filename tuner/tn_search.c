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
**   3. pick n_pick programs to measure: the best of the heap, except a fraction eps_greedy
**      drawn at random from the sampled states (exploration).
** A program is identified by the text of its loop structure (ss_state_print); every
** measured or picked program is remembered, so nothing is measured twice. */
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
    c->stop = NULL;
}

static int stopped(const tn_search *s)
{
    return s->cfg.stop && *s->cfg.stop;
}

/* ---- the set of programs seen (measured or picked) ---- */

static uint64_t state_id(const ss_state *st)
{
    at_buf b;
    uint64_t h;
    at_buf_init(&b);
    ss_state_print(st, &b);
    h = b.data ? at_hash64(b.data, b.len) : 0;
    at_buf_fini(&b);
    return h | 1; /* 0 marks an empty slot */
}

static int seen_has(const tn_search *s, uint64_t h)
{
    if (s->cap_seen == 0)
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
    for (int i = 0; i < s->n_good; i++)
        at_free(s->good[i].json);
    at_free(s->good);
    for (int i = 0; i < s->n_seeds; i++)
        at_free(s->seeds[i]);
    at_free(s->seeds);
    at_free(s->seen);
    ss_space_free(s->sp);
    ss_dag_unref(s->dag);
    at_free(s);
}

at_err tn__search_add_measured(tn_search *s, const char *state_json, double cost_s, int ok)
{
    ss_state *st;
    at_err err = ss_state_from_json(s->dag, state_json, strlen(state_json), &st, NULL, 0);
    if (err != AT_OK)
        return err == AT_ENOMEM ? err : AT_OK; /* a record that no longer replays: ignore */
    err = seen_add(s, state_id(st));
    ss_state_free(st);
    if (err != AT_OK || !ok)
        return err;
    if (s->n_good == s->cap_good) {
        int cap = s->cap_good ? 2 * s->cap_good : 64;
        void *p = at_realloc(s->good, (size_t)cap * sizeof *s->good);
        if (p == NULL)
            return AT_ENOMEM;
        s->good = p;
        s->cap_good = cap;
    }
    s->good[s->n_good].json = at_strdup(state_json);
    if (s->good[s->n_good].json == NULL)
        return AT_ENOMEM;
    s->good[s->n_good].cost = cost_s;
    s->n_good++;
    return AT_OK;
}

int tn__search_n_seen(const tn_search *s)
{
    return s->n_seen;
}

int tn__search_seed(tn_search *s, const char *state_json)
{
    ss_state *st;
    char **p;
    at_err err;
    if (s->n_seeds >= TN_SEARCH_MAX_SEEDS)
        return 0;
    at_buf b;
    err = ss_state_from_json_fit(s->dag, state_json, strlen(state_json), &st, NULL, 0);
    if (err == AT_ENOMEM)
        return -1;
    if (err != AT_OK)
        return 0; /* another loop structure: nothing to learn from it here */
    /* kept as this task's own state (tile sizes fitted to its extents) */
    at_buf_init(&b);
    ss_state_to_json(st, &b);
    ss_state_free(st);
    if (b.err || (p = at_realloc(s->seeds, (size_t)(s->n_seeds + 1) * sizeof *p)) == NULL) {
        at_buf_fini(&b);
        return -1;
    }
    s->seeds = p;
    s->seeds[s->n_seeds++] = at_buf_take(&b);
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

static at_err score(cm_model *model, at_rng *rng, ss_state **pop, int n, double *scores)
{
    if (model)
        return cm_model_predict(model, (const ss_state *const *)pop, n, scores);
    for (int i = 0; i < n; i++)
        scores[i] = at_rng_double(rng);
    return AT_OK;
}

/* Keep the best 'cap' unmeasured programs (one entry per program). */
static void heap_offer(cand *heap, int *n, int cap, const ss_state *st, double sc, uint64_t id,
                       at_err *err)
{
    int worst = -1;
    if (!isfinite(sc) || sc <= -1e30)
        return;
    for (int i = 0; i < *n; i++) {
        if (heap[i].id == id)
            return;
        if (worst < 0 || heap[i].score < heap[worst].score)
            worst = i;
    }
    if (*n < cap) {
        if (ss_state_copy(st, &heap[*n].st) != AT_OK) {
            *err = AT_ENOMEM;
            return;
        }
        heap[*n].score = sc;
        heap[*n].id = id;
        (*n)++;
    } else if (worst >= 0 && sc > heap[worst].score) {
        ss_state *c;
        if (ss_state_copy(st, &c) != AT_OK) {
            *err = AT_ENOMEM;
            return;
        }
        ss_state_free(heap[worst].st);
        heap[worst].st = c;
        heap[worst].score = sc;
        heap[worst].id = id;
    }
}

at_err tn__search_round(tn_search *s, cm_model *model, int n_pick, ss_state **out, int *n_out,
                       tn_search_stats *stats)
{
    int P = AT_MIN(s->cfg.population, AT_MAX(256, 32 * n_pick));
    int n_init = 0, n_rand, n_eps, heap_cap = 2 * n_pick, n_heap = 0;
    int n_must = 0;
    ss_state **pop = NULL, **next = NULL, **init = NULL, *must[TN_SEARCH_MAX_SEEDS] = {0};
    cand *heap = NULL;
    double *scores = NULL;
    at_err err = AT_OK;
    int tries;
    *n_out = 0;
    memset(stats, 0, sizeof *stats);
    if (n_pick <= 0)
        return AT_OK;
    pop = at_calloc((size_t)P, sizeof *pop);
    next = at_calloc((size_t)P, sizeof *next);
    init = at_calloc((size_t)P, sizeof *init);
    scores = at_calloc((size_t)P, sizeof *scores);
    heap = at_calloc((size_t)heap_cap, sizeof *heap);
    if (!pop || !next || !init || !scores || !heap) {
        err = AT_ENOMEM;
        goto done;
    }
    /* 1. the initial population: the best measured, then samples */
    if (s->n_good > 0) {
        int n_best = (int)(s->cfg.measured_ratio * P);
        qsort(s->good, (size_t)s->n_good, sizeof *s->good, cmp_good);
        for (int i = 0; i < s->n_good && n_init < n_best; i++)
            if (ss_state_from_json(s->dag, s->good[i].json, strlen(s->good[i].json),
                                   &pop[n_init], NULL, 0) == AT_OK)
                n_init++;
    }
    /* states of similar tasks replayed here (the first round of a task): in the
    ** population, and measured in this round whatever the (untrained) model says */
    for (int i = 0; i < s->n_seeds; i++) {
        if (n_init < P && ss_state_from_json(s->dag, s->seeds[i], strlen(s->seeds[i]),
                                             &pop[n_init], NULL, 0) == AT_OK) {
            if (n_must < TN_SEARCH_MAX_SEEDS && ss_state_copy(pop[n_init], &must[n_must]) == AT_OK)
                n_must++;
            n_init++;
        }
        at_free(s->seeds[i]);
    }
    s->n_seeds = 0;
    tries = 0;
    while (n_init < P && tries++ < 4 * P && !stopped(s)) {
        ss_state *st;
        at_err e = ss_space_sample(s->sp, &s->rng, &st);
        if (e == AT_ENOMEM) {
            err = e;
            goto done;
        }
        if (e != AT_OK) {
            stats->n_sample_fail++;
            continue;
        }
        pop[n_init++] = st;
        stats->n_sampled++;
    }
    /* the exploration pool: random sampled states not measured yet */
    n_eps = (int)floor(s->cfg.eps_greedy * n_pick);
    n_rand = 0;
    for (int i = 0; i < 3 * n_eps && n_init > 0; i++) {
        ss_state *st = pop[at_rng_below(&s->rng, (uint64_t)n_init)];
        if (ss_state_copy(st, &init[n_rand]) != AT_OK) {
            err = AT_ENOMEM;
            goto done;
        }
        n_rand++;
    }
    /* 2. evolution */
    for (int g = 0; n_init > 0 && !stopped(s); g++) {
        double lo = INFINITY, total = 0;
        if ((err = score(model, &s->rng, pop, n_init, scores)) != AT_OK)
            goto done;
        stats->n_scored += n_init;
        for (int i = 0; i < n_init; i++) {
            uint64_t id = state_id(pop[i]);
            if (!seen_has(s, id))
                heap_offer(heap, &n_heap, heap_cap, pop[i], scores[i], id, &err);
            if (err)
                goto done;
            if (isfinite(scores[i]) && scores[i] > -1e30 && scores[i] < lo)
                lo = scores[i];
        }
        if (g >= s->cfg.n_generations)
            break;
        /* roulette weights: scores shifted to be positive; invalid programs never breed */
        for (int i = 0; i < n_init; i++) {
            double w = isfinite(scores[i]) && scores[i] > -1e30 ? scores[i] - lo + 1e-3 : 0;
            scores[i] = w;
            total += w;
        }
        if (total <= 0)
            break;
        for (int k = 0; k < P && !stopped(s);) {
            double r = at_rng_double(&s->rng) * total, acc = 0;
            int parent = n_init - 1;
            for (int i = 0; i < n_init; i++) {
                acc += scores[i];
                if (r < acc) {
                    parent = i;
                    break;
                }
            }
            if (at_rng_double(&s->rng) < s->cfg.mutation_prob) {
                at_err e = ss_space_mutate(s->sp, pop[parent], &s->rng, -1, &next[k]);
                if (e == AT_ENOMEM) {
                    err = e;
                    goto done;
                }
                if (e != AT_OK) {
                    stats->n_mutation_fail++;
                    if (stats->n_mutation_fail > 50 * P)
                        break;
                    continue;
                }
                stats->n_mutated++;
            } else if (ss_state_copy(pop[parent], &next[k]) != AT_OK) {
                err = AT_ENOMEM;
                goto done;
            }
            k++;
        }
        for (int i = 0; i < n_init; i++)
            ss_state_free(pop[i]);
        for (int i = 0; i < P; i++) {
            pop[i] = next[i];
            next[i] = NULL;
        }
        n_init = 0;
        while (n_init < P && pop[n_init])
            n_init++;
    }
    /* 3. pick: the seeds, the best predicted, and a few random ones */
    for (int i = 0; i < n_must && *n_out < (n_pick + 1) / 2; i++) {
        uint64_t id = state_id(must[i]);
        if (seen_has(s, id))
            continue;
        if ((err = seen_add(s, id)) != AT_OK)
            goto done;
        out[(*n_out)++] = must[i];
        must[i] = NULL;
    }
    qsort(heap, (size_t)n_heap, sizeof *heap, cmp_cand_desc);
    {
        int want_model = n_pick - n_eps, hi = 0, ri = 0;
        while (*n_out < n_pick && (hi < n_heap || ri < n_rand)) {
            ss_state *st = NULL;
            int from_model = (*n_out < want_model && hi < n_heap) || ri >= n_rand;
            uint64_t id;
            if (from_model) {
                st = heap[hi].st;
                heap[hi++].st = NULL;
            } else {
                st = init[ri];
                init[ri++] = NULL;
            }
            id = state_id(st);
            if (seen_has(s, id)) {
                ss_state_free(st);
                continue;
            }
            if ((err = seen_add(s, id)) != AT_OK) {
                ss_state_free(st);
                goto done;
            }
            out[(*n_out)++] = st;
            if (from_model)
                stats->n_picked_model++;
            else
                stats->n_picked_random++;
        }
    }
done:
    for (int i = 0; pop && i < P; i++)
        ss_state_free(pop[i]);
    for (int i = 0; next && i < P; i++)
        ss_state_free(next[i]);
    for (int i = 0; init && i < P; i++)
        ss_state_free(init[i]);
    for (int i = 0; heap && i < n_heap; i++)
        ss_state_free(heap[i].st);
    for (int i = 0; i < n_must; i++)
        ss_state_free(must[i]);
    at_free(pop);
    at_free(next);
    at_free(init);
    at_free(scores);
    at_free(heap);
    if (err != AT_OK) {
        for (int i = 0; i < *n_out; i++)
            ss_state_free(out[i]);
        *n_out = 0;
    }
    return err;
}
