/* tests/support/sched_gen.c -- random valid schedules (see sched_gen.h). */
#include "tests/support/sched_gen.h"

#include <string.h>

static int chance(at_rng *r, double p)
{
    return at_rng_double(r) < p;
}

static int64_t pick_factor(at_rng *r, int64_t extent)
{
    int64_t divs[64];
    int n = 0;
    if (extent <= 1)
        return 1;
    for (int64_t d = 1; d <= extent && n < 64; d++)
        if (extent % d == 0)
            divs[n++] = d;
    /* mostly divisors, sometimes any length (exercises guards) */
    if (chance(r, 0.2))
        return 1 + (int64_t)at_rng_below(r, (uint64_t)extent);
    return divs[at_rng_below(r, (uint64_t)n)];
}

static void try_step(ss_state *st, const ss_step *s, sg_stats *stats)
{
    char err[256];
    if (ss_state_apply(st, s, err, sizeof err) == AT_OK)
        stats->applied++;
    else
        stats->refused++;
}

static ss_step step(ss_step_kind k, int stage, int iter)
{
    ss_step s;
    memset(&s, 0, sizeof s);
    s.kind = k;
    s.stage = stage;
    s.iter = iter;
    return s;
}

/* The stage that consumes 's' (looking through inlined readers), or -1 when several do. */
static int single_consumer(const ss_state *st, int s)
{
    int c = -1;
    for (int t = s + 1; t < st->n_stages; t++) {
        const ss_op *op = &st->dag->ops[t];
        int r;
        if (op->kind != SS_OP_COMPUTE || !ss_op_reads(op, s))
            continue;
        r = st->stages[t].loc == SS_LOC_INLINE ? single_consumer(st, t) : t;
        if (r < 0 || (c >= 0 && c != r))
            return -1;
        c = r;
    }
    return c;
}

static void tile_stage(ss_state *st, int s, at_rng *r, sg_stats *stats)
{
    ss_stage *sg = &st->stages[s];
    int n0 = sg->n_leaves;
    /* splits */
    for (int q = n0 - 1; q >= 0; q--) {
        ss_step sp;
        int64_t ext;
        if (!chance(r, 0.6))
            continue;
        if (st->bounds_dirty)
            ss_state_infer_bounds(st, NULL, 0);
        ext = st->stages[s].ivars[st->stages[s].leaves[q]].extent;
        if (ext <= 1)
            continue;
        sp = step(SS_STEP_SPLIT, s, q);
        sp.extent = ext;
        sp.n_ints = 1 + (int)at_rng_below(r, 2);
        if (sp.n_ints == 2) {
            sp.ints[0] = pick_factor(r, ext);
            sp.ints[1] = pick_factor(r, ext / (sp.ints[0] ? sp.ints[0] : 1) ?: 1);
        } else {
            sp.ints[0] = pick_factor(r, ext);
        }
        try_step(st, &sp, stats);
    }
    sg = &st->stages[s];
    /* reorder: spatial loops outside, a random interleaving, or a random permutation */
    if (sg->n_leaves > 1 && chance(r, 0.6)) {
        ss_step re = step(SS_STEP_REORDER, s, 0);
        int n = sg->n_leaves;
        re.n_ints = n;
        for (int i = 0; i < n; i++)
            re.ints[i] = i;
        if (chance(r, 0.5)) {
            /* move spatial loops out (keeps things parallelizable) */
            int k = 0;
            for (int i = 0; i < n; i++)
                if (sg->ivars[sg->leaves[i]].kind == SS_ITER_SPATIAL)
                    re.ints[k++] = i;
            for (int i = 0; i < n; i++)
                if (sg->ivars[sg->leaves[i]].kind != SS_ITER_SPATIAL)
                    re.ints[k++] = i;
        } else {
            for (int i = n - 1; i > 0; i--) {
                int j = (int)at_rng_below(r, (uint64_t)i + 1);
                int64_t t = re.ints[i];
                re.ints[i] = re.ints[j];
                re.ints[j] = t;
            }
        }
        try_step(st, &re, stats);
    }
    sg = &st->stages[s];
    /* fuse two adjacent loops */
    if (sg->n_leaves > 2 && chance(r, 0.3)) {
        ss_step fu = step(SS_STEP_FUSE, s, 0);
        int q = (int)at_rng_below(r, (uint64_t)sg->n_leaves - 1);
        fu.n_ints = 2;
        fu.ints[0] = q;
        fu.ints[1] = q + 1;
        try_step(st, &fu, stats);
    }
    sg = &st->stages[s];
    if (st->bounds_dirty)
        ss_state_infer_bounds(st, NULL, 0);
    /* annotations */
    if (chance(r, 0.5)) {
        ss_step an = step(SS_STEP_ANNOTATE, s, 0);
        an.a = SS_ANN_PARALLEL;
        try_step(st, &an, stats);
    }
    if (chance(r, 0.6)) {
        ss_step an = step(SS_STEP_ANNOTATE, s, sg->n_leaves - 1);
        an.a = SS_ANN_VECTORIZE;
        try_step(st, &an, stats);
    }
    if (chance(r, 0.3) && sg->n_leaves > 1) {
        ss_step an = step(SS_STEP_ANNOTATE, s, (int)at_rng_below(r, (uint64_t)sg->n_leaves));
        an.a = SS_ANN_UNROLL;
        if (st->stages[s].ivars[st->stages[s].leaves[an.iter]].extent <= 16)
            try_step(st, &an, stats);
    }
    if (chance(r, 0.3)) {
        static const int vals[] = {0, 16, 64, 512};
        ss_step pr = step(SS_STEP_PRAGMA, s, 0);
        pr.a = vals[at_rng_below(r, 4)];
        try_step(st, &pr, stats);
    }
}

at_err sg_random_state(ss_dag *dag, at_rng *r, ss_state **out, sg_stats *stats)
{
    ss_state *st;
    at_err err;
    memset(stats, 0, sizeof *stats);
    if ((err = ss_state_new(dag, &st)) != AT_OK)
        return err;
    /* structure first: from the last stage to the first, as the sketch rules do */
    for (int s = st->n_stages - 1; s >= 0; s--) {
        const ss_op *op = &st->dag->ops[s];
        if (op->kind != SS_OP_COMPUTE)
            continue;
        if (op->reduce != SS_RED_NONE && chance(r, 0.15)) {
            /* rfactor: split a reduction loop, factor out one part */
            ss_stage *sg = &st->stages[s];
            int q = -1;
            for (int i = 0; i < sg->n_leaves; i++)
                if (sg->ivars[sg->leaves[i]].kind == SS_ITER_REDUCE)
                    q = i;
            if (q >= 0 && sg->ivars[sg->leaves[q]].extent > 1) {
                ss_step sp = step(SS_STEP_SPLIT, s, q), rf;
                sp.extent = sg->ivars[sg->leaves[q]].extent;
                sp.n_ints = 1;
                sp.ints[0] = pick_factor(r, sp.extent);
                try_step(st, &sp, stats);
                rf = step(SS_STEP_RFACTOR, s, q + (int)at_rng_below(r, 2));
                rf.a = (int)at_rng_below(r, (uint64_t)op->n_axes + 1);
                try_step(st, &rf, stats);
                continue;
            }
        }
        if (op->reduce != SS_RED_NONE && chance(r, 0.35)) {
            ss_step cw = step(SS_STEP_CACHE_WRITE, s, 0);
            strcpy(cw.scope, "local");
            try_step(st, &cw, stats);
        }
    }
    /* then tiling and placement, consumers before producers */
    for (int s = st->n_stages - 1; s >= 0; s--) {
        const ss_op *op = &st->dag->ops[s];
        int c;
        if (op->kind != SS_OP_COMPUTE)
            continue;
        if (op->reduce == SS_RED_NONE && !op->is_output && chance(r, 0.35)) {
            ss_step ci = step(SS_STEP_COMPUTE_INLINE, s, 0);
            try_step(st, &ci, stats);
            if (st->stages[s].loc == SS_LOC_INLINE)
                continue;
        }
        tile_stage(st, s, r, stats);
        c = single_consumer(st, s);
        if (!op->is_output && c > 0 && chance(r, 0.6)) {
            ss_step ca = step(SS_STEP_COMPUTE_AT, s, 0);
            ca.a = c;
            ca.b = (int)at_rng_below(r, (uint64_t)st->stages[c].n_leaves);
            try_step(st, &ca, stats);
        }
    }
    if (st->bounds_dirty && (err = ss_state_infer_bounds(st, NULL, 0)) != AT_OK) {
        ss_state_free(st);
        return err;
    }
    *out = st;
    return AT_OK;
}
