/* schedule_space/ss_sample.c -- random annotation of sketches and mutation of states.
**
** A sample starts from a sketch's step list: every split gets lengths drawn uniformly from
** the ordered factorizations of its extent (innermost length bounded), the steps are
** replayed on the task's DAG, and annotation rules append steps: compute locations of
** simple stages, one fused parallel loop per root stage, an auto-unroll pragma on
** reductions, and vectorization of the innermost spatial loops.  Everything draws from the
** caller's at_rng, so a seed replays a run exactly.  Mutations edit a state's step list
** (a tile length moved between levels, an unroll value, a compute location, the
** parallel granularity) and replay it; a mutation that does not replay is rejected. */
#include "ss_int.h"

#include <stdlib.h>
#include <string.h>


/* ---- tile sizes ----------------------------------------------------------------------- */

/* The ordered factorizations of 'extent' into k factors whose last is <= cap, counted for
** every divisor d of extent at once: cnt[j][i] = factorizations of div[i] into j + 1
** factors.  A factorization of d into j + 1 factors is a first factor e | d and one of d / e
** into j, so each row sums the previous one over divisors (a few hundred divisors at most for
** a loop extent; 13 for 4096).  The walk order of nth_fact is the first factor ascending. */
typedef struct fact_table {
    int nd;          /* divisors of the extent, ascending */
    int64_t *div;
    int64_t *cnt;    /* k rows of nd */
} fact_table;

static int div_index(const fact_table *t, int64_t d)
{
    int lo = 0, hi = t->nd - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (t->div[mid] == d)
            return mid;
        if (t->div[mid] < d)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

static int64_t sat_add(int64_t a, int64_t b)
{
    return a > INT64_MAX - b ? INT64_MAX : a + b;
}

/* Append v to t->div (capacity *cap_d); 0 when memory ran out. */
static int add_div(fact_table *t, int *cap_d, int64_t v)
{
    if (t->nd == *cap_d) {
        int64_t *p = at_realloc(t->div, (size_t)*cap_d * 2 * sizeof *p);
        if (p == NULL)
            return 0;
        t->div = p;
        *cap_d *= 2;
    }
    t->div[t->nd++] = v;
    return 1;
}

static int fact_table_init(fact_table *t, int64_t extent, int k, int64_t cap)
{
    int cap_d = 64, n_small;
    t->nd = 0;
    t->cnt = NULL;
    if ((t->div = at_malloc((size_t)cap_d * sizeof *t->div)) == NULL)
        return 0;
    /* ascending: the divisors up to sqrt(extent), then their cofactors in reverse */
    for (int64_t d = 1; d <= extent / d; d++)
        if (extent % d == 0 && !add_div(t, &cap_d, d))
            return 0;
    n_small = t->nd;
    for (int i = n_small - 1; i >= 0; i--)
        if (extent / t->div[i] != t->div[i] && !add_div(t, &cap_d, extent / t->div[i]))
            return 0;
    if ((t->cnt = at_calloc((size_t)k * (size_t)t->nd, sizeof *t->cnt)) == NULL)
        return 0;
    for (int i = 0; i < t->nd; i++)
        t->cnt[i] = t->div[i] <= cap;
    for (int j = 1; j < k; j++)
        for (int i = 0; i < t->nd; i++) {
            int64_t c = 0, d = t->div[i];
            for (int e = 0; e <= i; e++)
                if (d % t->div[e] == 0)
                    c = sat_add(c, t->cnt[(size_t)(j - 1) * t->nd + div_index(t, d / t->div[e])]);
            t->cnt[(size_t)j * t->nd + i] = c;
        }
    return 1;
}

static void fact_table_fini(fact_table *t)
{
    at_free(t->div);
    at_free(t->cnt);
}

/* Factorizations of divisor n of the table's extent into k factors. */
static int64_t fact_count(const fact_table *t, int64_t n, int k)
{
    int i = div_index(t, n);
    return i < 0 ? 0 : t->cnt[(size_t)(k - 1) * t->nd + i];
}

/* The idx-th factorization (first factor ascending, then the rest in the same order) of n
** into out[0..k). */
static void nth_fact(const fact_table *t, int64_t n, int k, int64_t idx, int64_t *out)
{
    if (k == 1) {
        out[0] = n;
        return;
    }
    for (int e = 0; e < t->nd && t->div[e] <= n; e++) {
        int64_t d = t->div[e], c;
        if (n % d != 0)
            continue;
        c = fact_count(t, n / d, k - 1);
        if (idx < c) {
            out[0] = d;
            nth_fact(t, n / d, k - 1, idx, out + 1);
            return;
        }
        idx -= c;
    }
}

/* Lengths of a split of 'extent' into n+1 loops: factors 1..n of a random factorization
** (factor 0, the outermost, is implied), uniform over the ordered factorizations whose
** innermost factor is <= cap.  0 when there is none (or out of memory). */
int ss__sample_lengths(int64_t extent, int n, int64_t cap, at_rng *rng, int64_t *lengths)
{
    int64_t f[SS_MAX_SPLIT + 1], total;
    fact_table t;
    int ok = 0;
    if (extent <= 0 || n < 1 || n >= SS_MAX_SPLIT)
        return 0;
    if (fact_table_init(&t, extent, n + 1, cap) &&
        (total = fact_count(&t, extent, n + 1)) > 0) {
        nth_fact(&t, extent, n + 1, (int64_t)at_rng_below(rng, (uint64_t)total), f);
        for (int i = 0; i < n; i++)
            lengths[i] = f[i + 1];
        ok = 1;
    }
    fact_table_fini(&t);
    return ok;
}

/* ---- annotation rules ---------------------------------------------------------------- */

static int attached_at(const ss_state *st, int s, int iv)
{
    for (int t = 0; t < st->n_stages; t++)
        if (st->stages[t].loc == SS_LOC_AT && st->stages[t].attach_stage == s &&
            st->stages[t].attach_ivar == iv)
            return 1;
    return 0;
}

static int is_tiled(const ss_state *st, int s)
{
    return st->stages[s].n_rels > 0;
}

/* Candidate attach positions of stage s in its consumer. */
static int location_candidates(const ss_state *st, int s, int *out, int max)
{
    int c = ss__consumer(st, s), n = 0, seen_reduce = 0;
    const ss_stage *cg;
    if (c < 0 || st->stages[c].loc == SS_LOC_INLINE)
        return 0;
    cg = &st->stages[c];
    for (int q = 0; q < cg->n_leaves && n < max; q++) {
        const ss_ivar *v = &cg->ivars[cg->leaves[q]];
        if (v->kind != SS_ITER_SPATIAL) {
            if (!is_tiled(st, c))
                break;
            seen_reduce = 1;
            continue;
        }
        if (seen_reduce)
            break;
        if (v->ann == SS_ANN_UNROLL || v->ann == SS_ANN_VECTORIZE)
            break;
        if (v->extent == 1)
            continue;
        out[n++] = q;
        if (attached_at(st, c, cg->leaves[q]))
            break;
    }
    return n;
}

static at_err change_compute_location(ss_state *st, const ss_hw *hw, at_rng *rng)
{
    (void)hw;
    for (int s = st->n_stages - 1; s >= 0; s--) {
        const ss_op *op = &st->dag->ops[s];
        int cand[SS_MAX_LEAVES], n, choice, c;
        if (op->kind != SS_OP_COMPUTE || op->is_output || st->stages[s].loc == SS_LOC_INLINE ||
            is_tiled(st, s) || ss__needs_mlt(st, s))
            continue;
        if (op->tag && strcmp(op->tag, "rfactor") == 0)
            continue;
        c = ss__consumer(st, s);
        if (c < 0)
            continue;
        n = location_candidates(st, s, cand, SS_MAX_LEAVES);
        choice = (int)at_rng_below(rng, (uint64_t)n + 2);
        if (choice == 0) {
            if (op->reduce == SS_RED_NONE)
                ss_state_compute_inline(st, s, NULL, 0); /* may be refused: keep going */
        } else if (choice == 1) {
            if (st->stages[s].loc != SS_LOC_ROOT)
                ss_state_compute_root(st, s, NULL, 0);
        } else {
            at_err err = ss_state_compute_at(st, s, c, cand[choice - 2], NULL, 0);
            if (err == AT_ENOMEM)
                return err;
        }
    }
    return AT_OK;
}

static at_err annotate_parallel(ss_state *st, const ss_hw *hw)
{
    for (int s = 0; s < st->n_stages; s++) {
        const ss_stage *sg = &st->stages[s];
        int n = 0;
        int64_t prod = 1, fuse[SS_MAX_LEAVES];
        at_err err;
        if (st->dag->ops[s].kind != SS_OP_COMPUTE || sg->loc != SS_LOC_ROOT)
            continue;
        while (n < sg->n_leaves && n < SS_MAX_FUSE) {
            const ss_ivar *v = &sg->ivars[sg->leaves[n]];
            if (v->kind != SS_ITER_SPATIAL || v->ann != SS_ANN_NONE)
                break;
            prod *= v->extent;
            n++;
            if (attached_at(st, s, sg->leaves[n - 1]) || prod > 16 * hw->n_cores)
                break;
        }
        if (n == 0 || prod <= 1)
            continue;
        for (int i = 0; i < n; i++)
            fuse[i] = i;
        if ((err = ss_state_fuse(st, s, n, fuse, NULL, 0)) != AT_OK) {
            if (err == AT_ENOMEM)
                return err;
            continue;
        }
        if ((err = ss_state_annotate(st, s, 0, SS_ANN_PARALLEL, NULL, 0)) == AT_ENOMEM)
            return err;
    }
    return AT_OK;
}

static at_err annotate_unroll(ss_state *st, const ss_hw *hw, at_rng *rng)
{
    for (int s = 0; s < st->n_stages; s++) {
        const ss_stage *sg = &st->stages[s];
        int has_reduce = 0;
        at_err err;
        if (st->dag->ops[s].kind != SS_OP_COMPUTE || sg->loc == SS_LOC_INLINE || sg->n_leaves == 0)
            continue;
        for (int q = 0; q < sg->n_leaves; q++)
            has_reduce |= sg->ivars[sg->leaves[q]].kind != SS_ITER_SPATIAL;
        if (!has_reduce || hw->n_unroll == 0)
            continue;
        err = ss_state_pragma_unroll(st, s, 0, hw->unroll[at_rng_below(rng, (uint64_t)hw->n_unroll)],
                                     NULL, 0);
        if (err == AT_ENOMEM)
            return err;
    }
    return AT_OK;
}

static at_err annotate_vectorize(ss_state *st, const ss_hw *hw, at_rng *rng)
{
    for (int s = 0; s < st->n_stages; s++) {
        const ss_stage *sg = &st->stages[s];
        int n = 0, k, last;
        int64_t prod = 1, fuse[SS_MAX_LEAVES];
        at_err err;
        if (st->dag->ops[s].kind != SS_OP_COMPUTE || sg->loc == SS_LOC_INLINE || sg->n_leaves == 0)
            continue;
        for (int q = sg->n_leaves - 1; q >= 0; q--) {
            const ss_ivar *v = &sg->ivars[sg->leaves[q]];
            if (v->kind != SS_ITER_SPATIAL || v->ann != SS_ANN_NONE ||
                attached_at(st, s, sg->leaves[q]) || prod * v->extent > hw->max_vectorize)
                break;
            prod *= v->extent;
            n++;
            if (ss__needs_mlt(st, s) && n == 1)
                break; /* a tiled stage vectorizes its innermost tile only */
        }
        if (n == 0 || prod < 2)
            continue;
        k = 1 + (int)at_rng_below(rng, (uint64_t)n);
        last = sg->n_leaves - 1;
        if (k > 1) {
            for (int i = 0; i < k; i++)
                fuse[i] = last - k + 1 + i;
            if ((err = ss_state_fuse(st, s, k, fuse, NULL, 0)) != AT_OK) {
                if (err == AT_ENOMEM)
                    return err;
                continue;
            }
            last = st->stages[s].n_leaves - 1;
        }
        if (st->stages[s].ivars[st->stages[s].leaves[last]].extent < 2)
            continue;
        if ((err = ss_state_annotate(st, s, last, SS_ANN_VECTORIZE, NULL, 0)) == AT_ENOMEM)
            return err;
    }
    return AT_OK;
}

/* Weights read by tiled stages are stored in the order of their tiles. */
static at_err annotate_layout(ss_state *st, const ss_hw *hw)
{
    if (!hw->layout_rewrite)
        return AT_OK;
    for (int s = st->n_stages - 1; s >= 0; s--) {
        if (st->dag->ops[s].kind != SS_OP_COMPUTE || !is_tiled(st, s) || !ss__needs_mlt(st, s))
            continue;
        for (int w = 0; w < s; w++) {
            const ss_op *op = &st->dag->ops[w];
            at_err err;
            if (op->kind != SS_OP_PLACEHOLDER || !op->is_const || !ss_op_reads(&st->dag->ops[s], w))
                continue;
            err = ss_state_layout_rewrite(st, s, w, NULL, 0);
            if (err == AT_ENOMEM)
                return err;
            if (err == AT_OK)
                s++; /* the reader moved up by one */
        }
    }
    return AT_OK;
}

/* ---- sampling ------------------------------------------------------------------------- */

static at_err fill_and_replay(const ss_space *sp, const ss_state *sketch, at_rng *rng,
                              ss_state **out)
{
    const ss_hw *hw = ss__space_hw(sp);
    ss_step *steps;
    at_err err;
    int n = sketch->n_steps;
    steps = at_malloc((size_t)(n ? n : 1) * sizeof *steps);
    if (steps == NULL)
        return AT_ENOMEM;
    if (n)
        memcpy(steps, sketch->steps, (size_t)n * sizeof *steps);
    for (int i = 0; i < n; i++) {
        if (steps[i].kind != SS_STEP_SPLIT)
            continue;
        if (!ss__sample_lengths(steps[i].extent, steps[i].n_ints, hw->max_innermost, rng,
                            steps[i].ints)) {
            at_free(steps);
            return AT_ESCHED;
        }
    }
    err = ss_state_replay(ss_space_dag(sp), steps, n, out, NULL, 0);
    at_free(steps);
    return err;
}

at_err ss_space_sample(const ss_space *sp, at_rng *rng, ss_state **out)
{
    return ss_space_sample_sketch(
        sp, (int)at_rng_below(rng, (uint64_t)ss_space_n_sketches(sp)), rng, out);
}

at_err ss_space_sample_sketch(const ss_space *sp, int k, at_rng *rng, ss_state **out)
{
    const ss_hw *hw = ss__space_hw(sp);
    const ss_state *sketch;
    ss_state *st;
    at_err err;
    *out = NULL;
    if (k < 0 || k >= ss_space_n_sketches(sp))
        return AT_EINVAL;
    sketch = ss_space_sketch(sp, k);
    if (hw->is_gpu)
        return ss__gpu_sample(sp, sketch, rng, out);
    if ((err = fill_and_replay(sp, sketch, rng, &st)) != AT_OK)
        return err;
    if ((err = change_compute_location(st, hw, rng)) || (err = annotate_parallel(st, hw)) ||
        (err = annotate_unroll(st, hw, rng)) || (err = annotate_vectorize(st, hw, rng)) ||
        (err = annotate_layout(st, hw))) {
        ss_state_free(st);
        return err;
    }
    *out = st;
    return AT_OK;
}

/* ---- mutations ------------------------------------------------------------------------ */

static at_err replay_steps(const ss_space *sp, ss_step *steps, int n, ss_state **out)
{
    at_err err = ss_state_replay(ss_space_dag(sp), steps, n, out, NULL, 0);
    at_free(steps);
    return err;
}

static ss_step *copy_steps(const ss_state *st)
{
    ss_step *s = at_malloc((size_t)(st->n_steps ? st->n_steps : 1) * sizeof *s);
    if (s && st->n_steps)
        memcpy(s, st->steps, (size_t)st->n_steps * sizeof *s);
    return s;
}

static at_err mutate_tile(const ss_space *sp, const ss_state *st, at_rng *rng, ss_state **out)
{
    const ss_hw *hw = ss__space_hw(sp);
    int cand[256], n = 0;
    ss_step *steps, *s;
    int64_t f[SS_MAX_SPLIT + 1];
    int k, order[SS_MAX_SPLIT + 1], from = -1, to;
    for (int i = 0; i < st->n_steps && n < 256; i++)
        if (st->steps[i].kind == SS_STEP_SPLIT && st->steps[i].extent > 1)
            cand[n++] = i;
    if (n == 0)
        return AT_ESCHED;
    steps = copy_steps(st);
    if (steps == NULL)
        return AT_ENOMEM;
    s = &steps[cand[at_rng_below(rng, (uint64_t)n)]];
    k = s->n_ints + 1;
    f[0] = s->extent;
    for (int i = 0; i < s->n_ints; i++) {
        f[i + 1] = s->ints[i];
        f[0] /= s->ints[i] > 0 ? s->ints[i] : 1;
    }
    for (int i = 0; i < k; i++)
        order[i] = i;
    for (int i = k - 1; i > 0; i--) {
        int j = (int)at_rng_below(rng, (uint64_t)i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (int i = 0; i < k; i++)
        if (f[order[i]] > 1) {
            from = i;
            break;
        }
    if (from < 0) {
        at_free(steps);
        return AT_ESCHED;
    }
    to = order[(from + 1) % k];
    from = order[from];
    {
        /* the divisors of v by pairs up to sqrt(v): a prime extent of 10 million costs
        ** 3,163 divisions, not 10 million, per mutation */
        int64_t divs[512], nd = 0, d, v = f[from];
        for (int64_t x = 1; x <= v / x && nd < 511; x++) {
            int64_t pair[2] = {x, v / x};
            if (v % x != 0)
                continue;
            for (int q = 0; q < (pair[0] == pair[1] ? 1 : 2); q++)
                if (pair[q] >= 2 && (to != k - 1 || f[to] * pair[q] <= hw->max_innermost))
                    divs[nd++] = pair[q];
        }
        if (nd == 0) {
            at_free(steps);
            return AT_ESCHED;
        }
        d = divs[at_rng_below(rng, (uint64_t)nd)];
        f[from] /= d;
        f[to] *= d;
    }
    for (int i = 0; i < s->n_ints; i++)
        s->ints[i] = f[i + 1];
    return replay_steps(sp, steps, st->n_steps, out);
}

static at_err mutate_unroll(const ss_space *sp, const ss_state *st, at_rng *rng, ss_state **out)
{
    const ss_hw *hw = ss__space_hw(sp);
    int cand[256], n = 0, i, v;
    ss_step *steps;
    for (i = 0; i < st->n_steps && n < 256; i++)
        if (st->steps[i].kind == SS_STEP_PRAGMA)
            cand[n++] = i;
    if (n == 0 || hw->n_unroll < 2)
        return AT_ESCHED;
    steps = copy_steps(st);
    if (steps == NULL)
        return AT_ENOMEM;
    i = cand[at_rng_below(rng, (uint64_t)n)];
    do
        v = hw->unroll[at_rng_below(rng, (uint64_t)hw->n_unroll)];
    while (v == steps[i].a);
    steps[i].a = v;
    return replay_steps(sp, steps, st->n_steps, out);
}

static at_err mutate_location(const ss_space *sp, const ss_state *st, at_rng *rng, ss_state **out)
{
    int cand[256], n = 0, i;
    ss_step *steps;
    ss_state *prefix;
    at_err err;
    int locs[SS_MAX_LEAVES], nl;
    for (i = 0; i < st->n_steps && n < 256; i++)
        if (st->steps[i].kind == SS_STEP_COMPUTE_AT)
            cand[n++] = i;
    if (n == 0)
        return AT_ESCHED;
    i = cand[at_rng_below(rng, (uint64_t)n)];
    /* the candidates as of that step */
    if ((err = ss_state_replay(ss_space_dag(sp), st->steps, i, &prefix, NULL, 0)) != AT_OK)
        return err == AT_ENOMEM ? err : AT_ESCHED;
    if (is_tiled(prefix, st->steps[i].stage) || ss__needs_mlt(prefix, st->steps[i].stage)) {
        ss_state_free(prefix);
        return AT_ESCHED;
    }
    nl = location_candidates(prefix, st->steps[i].stage, locs, SS_MAX_LEAVES);
    ss_state_free(prefix);
    if (nl < 2)
        return AT_ESCHED;
    steps = copy_steps(st);
    if (steps == NULL)
        return AT_ENOMEM;
    {
        int old = steps[i].b, v;
        do
            v = locs[at_rng_below(rng, (uint64_t)nl)];
        while (v == old);
        steps[i].b = v;
    }
    return replay_steps(sp, steps, st->n_steps, out);
}

/* Change how many outer loops the parallel loop fuses: shift later positions of that
** stage by the difference. */
static at_err mutate_parallel(const ss_space *sp, const ss_state *st, at_rng *rng, ss_state **out)
{
    int cand[256], n = 0, i, s, old_n, new_n, max_n = 0, delta;
    ss_step *steps;
    ss_state *prefix;
    at_err err;
    for (i = 0; i + 1 < st->n_steps && n < 256; i++)
        if (st->steps[i].kind == SS_STEP_FUSE && st->steps[i].n_ints >= 1 &&
            st->steps[i].ints[0] == 0 &&
            st->steps[i + 1].kind == SS_STEP_ANNOTATE && st->steps[i + 1].a == SS_ANN_PARALLEL &&
            st->steps[i + 1].stage == st->steps[i].stage && st->steps[i + 1].iter == 0)
            cand[n++] = i;
    if (n == 0)
        return AT_ESCHED;
    i = cand[at_rng_below(rng, (uint64_t)n)];
    s = st->steps[i].stage;
    old_n = st->steps[i].n_ints;
    for (int j = i + 2; j < st->n_steps; j++) {
        ss_step_kind k = st->steps[j].kind;
        if (k == SS_STEP_CACHE_WRITE || k == SS_STEP_CACHE_READ || k == SS_STEP_RFACTOR ||
            (st->steps[j].stage == s && (k == SS_STEP_REORDER || k == SS_STEP_SPLIT ||
                                         k == SS_STEP_FOLLOW_SPLIT)))
            return AT_ESCHED;
    }
    if ((err = ss_state_replay(ss_space_dag(sp), st->steps, i, &prefix, NULL, 0)) != AT_OK)
        return err == AT_ENOMEM ? err : AT_ESCHED;
    while (max_n < prefix->stages[s].n_leaves && max_n < SS_MAX_FUSE &&
           prefix->stages[s].ivars[prefix->stages[s].leaves[max_n]].kind == SS_ITER_SPATIAL &&
           prefix->stages[s].ivars[prefix->stages[s].leaves[max_n]].ann == SS_ANN_NONE)
        max_n++;
    ss_state_free(prefix);
    if (max_n < 2)
        return AT_ESCHED;
    new_n = 1 + (int)at_rng_below(rng, (uint64_t)max_n);
    if (new_n == old_n)
        return AT_ESCHED;
    delta = old_n - new_n;
    steps = copy_steps(st);
    if (steps == NULL)
        return AT_ENOMEM;
    steps[i].n_ints = new_n;
    for (int q = 0; q < new_n; q++)
        steps[i].ints[q] = q;
    for (int j = i + 2; j < st->n_steps; j++) {
        ss_step *t = &steps[j];
        if (t->stage == s && t->iter > 0 &&
            (t->kind == SS_STEP_ANNOTATE || t->kind == SS_STEP_PRAGMA))
            t->iter += delta;
        if (t->stage == s && t->kind == SS_STEP_FUSE)
            for (int q = 0; q < t->n_ints; q++)
                t->ints[q] += delta;
        if (t->kind == SS_STEP_COMPUTE_AT && t->a == s && t->b > 0)
            t->b += delta;
    }
    return replay_steps(sp, steps, st->n_steps, out);
}

at_err ss_space_mutate(const ss_space *sp, const ss_state *st, at_rng *rng, int kind,
                       ss_state **out)
{
    static const double weights[] = {
#define X(id, name, w) w,
        SS_MUTATION_MAP(X)
#undef X
    };
    at_err err;
    *out = NULL;
    if (ss__space_hw(sp)->is_gpu)
        return ss__gpu_mutate(sp, st, rng, kind, out);
    if (kind < 0) {
        double r = at_rng_double(rng), acc = 0;
        kind = SS_N_MUTATIONS - 1;
        for (int k = 0; k < SS_N_MUTATIONS; k++) {
            acc += weights[k];
            if (r < acc) {
                kind = k;
                break;
            }
        }
    }
    switch (kind) {
    case SS_MUT_TILE_SIZE: err = mutate_tile(sp, st, rng, out); break;
    case SS_MUT_AUTO_UNROLL: err = mutate_unroll(sp, st, rng, out); break;
    case SS_MUT_COMPUTE_LOCATION: err = mutate_location(sp, st, rng, out); break;
    case SS_MUT_PARALLEL: err = mutate_parallel(sp, st, rng, out); break;
    default: return AT_EINVAL;
    }
    if (err != AT_OK && err != AT_ENOMEM)
        err = AT_ESCHED;
    return err;
}

/* ==== GPU annotation and mutation (hw->is_gpu) ========================================== */
/* Ansor's GPU init rules: tile sizes for the unknown splits only (the sketch's
** cross-thread-reduction split keeps the warp size), thread binding, auto-unroll.  Then
** the state is checked against the GPU's limits, so that candidates a launch would refuse
** never reach a build or a device. */

int ss__stage_at_step(const ss_state *st, int cur, int step)
{
    for (int j = st->n_steps - 1; j >= step && j >= 0; j--) {
        const ss_step *t = &st->steps[j];
        int p;
        switch (t->kind) {
        case SS_STEP_CACHE_WRITE:
        case SS_STEP_RFACTOR: p = t->stage; break;
        case SS_STEP_CACHE_READ: p = t->stage + 1; break;
        case SS_STEP_LAYOUT_REWRITE: p = t->a + 1; break;
        default: continue;
        }
        if (cur == p)
            return -1;
        if (cur > p)
            cur--;
    }
    return cur;
}

static at_err gpu_fill_and_replay(const ss_space *sp, const ss_state *sketch, at_rng *rng,
                                  ss_state **out)
{
    const ss_hw *hw = ss__space_hw(sp);
    ss_step *steps;
    int n = sketch->n_steps;
    steps = copy_steps(sketch);
    if (steps == NULL)
        return AT_ENOMEM;
    for (int i = 0; i < n; i++) {
        int unknown = 0;
        if (steps[i].kind != SS_STEP_SPLIT)
            continue;
        for (int k = 0; k < steps[i].n_ints; k++)
            unknown |= steps[i].ints[k] <= 0;
        if (unknown && !ss__sample_lengths(steps[i].extent, steps[i].n_ints, hw->max_innermost, rng,
                                       steps[i].ints)) {
            at_free(steps);
            return AT_ESCHED;
        }
    }
    return replay_steps(sp, steps, n, out);
}

static int name_ends_with_level(const ss_state *st, int s, int iv, int level)
{
    char nm[64], suf[8];
    size_t n, k;
    ss_state_ivar_name(st, s, iv, nm, sizeof nm);
    snprintf(suf, sizeof suf, ".%d", level);
    n = strlen(nm);
    k = strlen(suf);
    return n > k && strcmp(nm + n - k, suf) == 0;
}

static int is_shared_stage(const ss_state *st, int s)
{
    const ss_op *op = &st->dag->ops[s];
    size_t n = strlen(op->name);
    return op->tag && strcmp(op->tag, "cache_read") == 0 && n > 7 &&
           strcmp(op->name + n - 7, ".shared") == 0;
}

static int bound_leaves(const ss_stage *sg)
{
    int n = 0;
    for (int q = 0; q < sg->n_leaves; q++)
        n += sg->ivars[sg->leaves[q]].ann >= SS_ANN_VTHREAD;
    return n;
}

/* Fuse leaves [pos, pos + n) (n >= 1) and annotate the result. */
static at_err fuse_bind(ss_state *st, int s, int pos, int n, ss_ann ann)
{
    int64_t fuse[SS_MAX_FUSE];
    at_err err;
    if (n > SS_MAX_FUSE)
        return AT_ESCHED;
    for (int i = 0; i < n; i++)
        fuse[i] = pos + i;
    if (n > 1 && (err = ss_state_fuse(st, s, n, fuse, NULL, 0)) != AT_OK)
        return err;
    return ann == SS_ANN_NONE ? AT_OK : ss_state_annotate(st, s, pos, ann, NULL, 0);
}

/* The spatial multi-level splits of stage 'target' (5 parts each), as step indices. */
static int spatial_split_steps(const ss_state *st, int target, int64_t *out, int max)
{
    int n = 0;
    for (int k = 0; k < st->n_steps && n < max; k++)
        if (st->steps[k].kind == SS_STEP_SPLIT && st->steps[k].n_ints == 4 &&
            ss__stage_at_step(st, target, k) == st->steps[k].stage)
            out[n++] = k;
    return n;
}

/* Cooperative fetching: all the block's threads load the shared tile together, each a
** vector of (at first) one element; the thread count follows the consumer's. */
static at_err bind_shared_stage(ss_state *st, int s)
{
    int64_t src[SS_MAX_AXES];
    int n_src, nl = st->stages[s].n_leaves;
    ss_step sp;
    at_err err;
    n_src = spatial_split_steps(st, st->stages[s].attach_stage, src, SS_MAX_AXES);
    if (n_src == 0 || nl == 0)
        return AT_OK; /* every thread loads the whole tile (correct, slow) */
    if ((err = fuse_bind(st, s, 0, nl, SS_ANN_NONE)) != AT_OK)
        return err;
    memset(&sp, 0, sizeof sp);
    sp.kind = SS_STEP_SPLIT;
    sp.stage = s;
    sp.iter = 0;
    sp.extent = 0; /* the region follows the tile sizes: not pinned */
    sp.n_ints = 1;
    sp.ints[0] = 1;
    if ((err = ss_state_apply(st, &sp, NULL, 0)) != AT_OK ||
        (err = ss_state_annotate(st, s, 1, SS_ANN_VECTORIZE, NULL, 0)) != AT_OK ||
        (err = ss_state_follow_fused_split(st, s, 0, n_src, src, 1, 1, NULL, 0)) != AT_OK)
        return err;
    return ss_state_annotate(st, s, 1, SS_ANN_THREAD_X, NULL, 0);
}

static int64_t spatial_extent(const ss_op *op)
{
    int64_t n = 1;
    for (int a = 0; a < op->n_axes; a++)
        n *= op->axes[a].extent;
    return n;
}

static at_err bind_root_stage(ss_state *st, int s, const ss_hw *hw)
{
    const ss_stage *sg = &st->stages[s];
    const ss_op *op = &st->dag->ops[s];
    int n = 0;
    at_err err;
    for (int q = 0; q < sg->n_leaves; q++) {
        const ss_ivar *v = &sg->ivars[sg->leaves[q]];
        if (v->kind != SS_ITER_SPATIAL && v->ann == SS_ANN_THREAD_X) {
            /* cross-thread reduction: the spatial loops become the blocks */
            while (n < sg->n_leaves && sg->ivars[sg->leaves[n]].kind == SS_ITER_SPATIAL &&
                   sg->ivars[sg->leaves[n]].ann == SS_ANN_NONE)
                n++;
            return n > 0 ? fuse_bind(st, s, 0, n, SS_ANN_BLOCK_X) : AT_OK;
        }
    }
    if (bound_leaves(sg) > 0)
        return AT_OK;
    if (sg->n_leaves > 0 && name_ends_with_level(st, s, sg->leaves[0], 0)) {
        /* multi-level tiled: S0 -> blocks, S1 -> virtual threads, S2 -> threads */
        static const ss_ann anns[3] = {SS_ANN_BLOCK_X, SS_ANN_VTHREAD, SS_ANN_THREAD_X};
        for (int level = 0; level < 3; level++) {
            int pos = level, cnt = 0;
            sg = &st->stages[s];
            while (pos + cnt < sg->n_leaves &&
                   sg->ivars[sg->leaves[pos + cnt]].kind == SS_ITER_SPATIAL &&
                   name_ends_with_level(st, s, sg->leaves[pos + cnt], level))
                cnt++;
            if (cnt == 0)
                return AT_ESCHED;
            if ((err = fuse_bind(st, s, pos, cnt, anns[level])) != AT_OK)
                return err;
            sg = &st->stages[s];
            {
                int64_t e = sg->ivars[sg->leaves[pos]].extent;
                if (level == 1 && e > hw->max_vthread)
                    return AT_ESCHED;
                if (level == 2 && e < hw->warp_size && spatial_extent(op) > 2 * hw->warp_size)
                    return AT_ESCHED; /* too few threads for a big tensor */
            }
        }
        return AT_OK;
    }
    /* untiled: fuse the outer spatial loops; one warp per block to begin with (the tile
    ** size mutation tries others) */
    while (n < sg->n_leaves && n < SS_MAX_FUSE &&
           sg->ivars[sg->leaves[n]].kind == SS_ITER_SPATIAL &&
           sg->ivars[sg->leaves[n]].ann == SS_ANN_NONE)
        n++;
    if (n == 0)
        return AT_OK;
    if ((err = fuse_bind(st, s, 0, n, SS_ANN_NONE)) != AT_OK)
        return err;
    sg = &st->stages[s];
    if (sg->ivars[sg->leaves[0]].extent <= hw->warp_size)
        return ss_state_annotate(st, s, 0, SS_ANN_THREAD_X, NULL, 0);
    {
        int64_t w = hw->warp_size;
        if ((err = ss_state_split(st, s, 0, 1, &w, NULL, 0)) != AT_OK ||
            (err = ss_state_annotate(st, s, 0, SS_ANN_BLOCK_X, NULL, 0)) != AT_OK)
            return err;
        return ss_state_annotate(st, s, 1, SS_ANN_THREAD_X, NULL, 0);
    }
}

static at_err thread_bind(ss_state *st, const ss_hw *hw)
{
    for (int s = st->n_stages - 1; s >= 0; s--) {
        const ss_op *op = &st->dag->ops[s];
        at_err err = AT_OK;
        if (op->kind != SS_OP_COMPUTE || st->stages[s].loc == SS_LOC_INLINE)
            continue;
        if (st->stages[s].loc == SS_LOC_ROOT)
            err = bind_root_stage(st, s, hw);
        else if (is_shared_stage(st, s) && bound_leaves(&st->stages[s]) == 0)
            err = bind_shared_stage(st, s);
        if (err != AT_OK)
            return err;
    }
    return AT_OK;
}

/* The stage's root: follow the attach chain. */
static int root_of(const ss_state *st, int s)
{
    int n = 0;
    while (st->stages[s].loc == SS_LOC_AT && n++ < st->n_stages)
        s = st->stages[s].attach_stage;
    return s;
}

static int64_t region_bytes(const ss_state *st, int s)
{
    const ss_op *op = &st->dag->ops[s];
    int64_t n = at_dtype_bytes(op->dtype);
    for (int d = 0; d < op->n_dims; d++)
        n *= st->stages[s].region[d] > 0 ? st->stages[s].region[d] : 1;
    return n;
}

/* The limits of one launch (a root stage with the stages computed inside it). */
static at_err gpu_check_state(ss_state *st, const ss_hw *hw)
{
    if (st->bounds_dirty && ss_state_infer_bounds(st, NULL, 0) != AT_OK)
        return AT_ESCHED;
    if (!st->concrete)
        return AT_ESCHED;
    for (int r = 0; r < st->n_stages; r++) {
        int64_t threads[3] = {1, 1, 1}, shared = 0, local = 0, vthreads = 1;
        int n_bound = 0;
        if (st->dag->ops[r].kind != SS_OP_COMPUTE || st->stages[r].loc != SS_LOC_ROOT)
            continue;
        for (int s = 0; s < st->n_stages; s++) {
            const ss_stage *sg = &st->stages[s];
            if (st->dag->ops[s].kind != SS_OP_COMPUTE || sg->loc == SS_LOC_INLINE ||
                root_of(st, s) != r)
                continue;
            for (int q = 0; q < sg->n_leaves; q++) {
                const ss_ivar *v = &sg->ivars[sg->leaves[q]];
                int d = v->ann == SS_ANN_THREAD_X   ? 0
                        : v->ann == SS_ANN_THREAD_Y ? 1
                        : v->ann == SS_ANN_THREAD_Z ? 2
                                                    : -1;
                n_bound += v->ann >= SS_ANN_VTHREAD;
                if (d >= 0 && v->extent > threads[d])
                    threads[d] = v->extent;
                if (v->ann == SS_ANN_VTHREAD) {
                    if (v->extent > hw->max_vthread)
                        return AT_ESCHED;
                    vthreads *= v->extent;
                }
            }
            if (s != r && is_shared_stage(st, s))
                shared += region_bytes(st, s);
            else if (s != r)
                local += region_bytes(st, s);
        }
        if (n_bound == 0 || threads[0] * threads[1] * threads[2] > hw->max_threads_per_block ||
            shared > hw->max_shared_bytes || local * vthreads > hw->max_local_bytes)
            return AT_ESCHED;
    }
    return AT_OK;
}

at_err ss__gpu_sample(const ss_space *sp, const ss_state *sketch, at_rng *rng, ss_state **out)
{
    const ss_hw *hw = ss__space_hw(sp);
    ss_state *st;
    at_err err;
    *out = NULL;
    if ((err = gpu_fill_and_replay(sp, sketch, rng, &st)) != AT_OK)
        return err;
    if ((err = thread_bind(st, hw)) != AT_OK || (err = annotate_unroll(st, hw, rng)) != AT_OK ||
        (err = gpu_check_state(st, hw)) != AT_OK) {
        ss_state_free(st);
        return err == AT_ENOMEM ? err : AT_ESCHED;
    }
    *out = st;
    return AT_OK;
}

/* The loaders' vector length: a shared stage's split (recorded with extent 0) gets 1, 2
** or 4 elements per thread and load. */
static at_err mutate_fetch(const ss_space *sp, const ss_state *st, int i, at_rng *rng,
                           ss_state **out)
{
    static const int64_t lens[] = {1, 2, 4};
    ss_step *steps = copy_steps(st);
    int64_t v;
    if (steps == NULL)
        return AT_ENOMEM;
    do
        v = lens[at_rng_below(rng, AT_ARRAY_LEN(lens))];
    while (v == steps[i].ints[0]);
    steps[i].ints[0] = v;
    return replay_steps(sp, steps, st->n_steps, out);
}

at_err ss__gpu_mutate(const ss_space *sp, const ss_state *st, at_rng *rng, int kind,
                      ss_state **out)
{
    const ss_hw *hw = ss__space_hw(sp);
    at_err err;
    *out = NULL;
    if (kind < 0)
        kind = at_rng_double(rng) < 0.90 ? SS_MUT_TILE_SIZE : SS_MUT_AUTO_UNROLL;
    if (kind == SS_MUT_TILE_SIZE) {
        int n_fetch = 0, n_tile = 0, fetch[64];
        for (int i = 0; i < st->n_steps; i++) {
            const ss_step *t = &st->steps[i];
            if (t->kind != SS_STEP_SPLIT)
                continue;
            if (t->extent == 0 && t->n_ints == 1 && n_fetch < 64)
                fetch[n_fetch++] = i;
            else if (t->extent > 1)
                n_tile++;
        }
        if (n_fetch + n_tile == 0)
            return AT_ESCHED;
        if (at_rng_below(rng, (uint64_t)(n_fetch + n_tile)) < (uint64_t)n_fetch)
            err = mutate_fetch(sp, st, fetch[at_rng_below(rng, (uint64_t)n_fetch)], rng, out);
        else
            err = mutate_tile(sp, st, rng, out);
    } else if (kind == SS_MUT_AUTO_UNROLL) {
        err = mutate_unroll(sp, st, rng, out);
    } else {
        return kind < SS_N_MUTATIONS && kind >= 0 ? AT_ESCHED : AT_EINVAL;
    }
    if (err == AT_OK && (err = gpu_check_state(*out, hw)) != AT_OK) {
        ss_state_free(*out);
        *out = NULL;
    }
    if (err != AT_OK && err != AT_ENOMEM)
        err = AT_ESCHED;
    return err;
}
