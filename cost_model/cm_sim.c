/* cost_model/cm_sim.c -- one core's data caches run over a program's loop IR (issue 16).
**
** The loads and stores of a CPU program run, as thread 0 of the target's cores runs them
** (its share of the parallel loop), through a model of the core: L1D and L2,
** set-associative with LRU replacement and 64-byte lines, and a 64-entry data TLB (4-way,
** 4 KiB pages).  Every access evaluates its index from the loop variables: affine indices
** (the split loops') as sums of coefficients, the others (the fused loops' divisions and
** remainders) by walking the expression.  An access on the same line as its site's last
** one is counted once: a register, or a vector's other lanes.
**
** Loops too long to run whole are sampled: a loop whose iterations would exceed its share
** of the cap runs its first k >= 3 iterations, the first only warming the caches and the
** others' counts scaled up to the loop's extent, and its body gets cap / k.  The counts
** are therefore estimates of the whole run; small programs run whole and count exactly.
** docs/cost_model.md ("The caches simulated") has what the counts are worth to the model. */
#include "cost_model/cost_model.h"

#include <string.h>

#define LINE_SHIFT 6
#define PAGE_SHIFT 12

typedef struct cache {
    int sets, ways;
    uint64_t *tag; /* line + 1; 0: empty */
    uint64_t *age;
    uint64_t clock;
} cache;

/* A slot of the pointer-keyed table: an access site (a LOAD or a STORE), a statement's
** memoized cost, or an index's affine form. */
#define AFF_MAX 8
typedef struct slot {
    const void *key;
    uint64_t last_line; /* site: its last line (UINT64_MAX: none yet) */
    double cost;        /* statement: accesses of one run of it (< 0: not yet computed) */
    int8_t aff_state;   /* index: 0 not analysed, 1 affine, -1 walked */
    int8_t n_aff;
    int var[AFF_MAX];
    int64_t coef[AFF_MAX];
    int64_t c;
} slot;

typedef struct sim {
    const kn_ir *ir;
    cache l1, l2, tlb;
    slot *tab;
    size_t mask;
    int64_t *val;      /* loop variables */
    uint64_t *base;    /* buffers' addresses */
    int *esize;
    int n_threads;
    double cnt[CM_SIM_N];
} sim;

static at_err cache_init(cache *c, int64_t bytes, int ways)
{
    int64_t lines = bytes >> LINE_SHIFT;
    if (ways < 1)
        ways = 1;
    if (lines < ways)
        lines = ways;
    c->ways = ways;
    c->sets = (int)(lines / ways);
    c->clock = 0;
    c->tag = at_calloc((size_t)c->sets * (size_t)ways, sizeof *c->tag);
    c->age = at_calloc((size_t)c->sets * (size_t)ways, sizeof *c->age);
    return c->tag && c->age ? AT_OK : AT_ENOMEM;
}

static void cache_fini(cache *c)
{
    at_free(c->tag);
    at_free(c->age);
}

/* 1 on a hit; a miss fills the least recently used way. */
static int cache_access(cache *c, uint64_t key)
{
    uint64_t set = key % (uint64_t)c->sets, t = key + 1;
    uint64_t *tg = c->tag + set * (uint64_t)c->ways, *ag = c->age + set * (uint64_t)c->ways;
    int lru = 0;
    c->clock++;
    for (int w = 0; w < c->ways; w++) {
        if (tg[w] == t) {
            ag[w] = c->clock;
            return 1;
        }
        if (ag[w] < ag[lru])
            lru = w;
    }
    tg[lru] = t;
    ag[lru] = c->clock;
    return 0;
}

static slot *slot_of(sim *s, const void *key)
{
    size_t h = (size_t)(((uintptr_t)key >> 4) * 0x9E3779B97F4A7C15ull >> 20) & s->mask;
    while (s->tab[h].key && s->tab[h].key != key)
        h = (h + 1) & s->mask;
    if (!s->tab[h].key) {
        s->tab[h].key = key;
        s->tab[h].last_line = UINT64_MAX;
        s->tab[h].cost = -1;
    }
    return &s->tab[h];
}

/* Keys the table may need: statements, LOAD nodes and index expressions. */
static size_t count_expr(const ss_expr *e)
{
    size_t n = 1;
    for (int i = 0; i < e->n; i++)
        n += count_expr(e->a[i]);
    return n;
}

static size_t count_stmt(const kn_stmt *st)
{
    size_t n = 1;
    switch (st->kind) {
    case KN_S_FOR:
        return n + count_stmt(st->body);
    case KN_S_SEQ:
        for (int i = 0; i < st->n; i++)
            n += count_stmt(st->items[i]);
        return n;
    case KN_S_IF:
        return n + count_expr(st->cond) + count_stmt(st->body);
    case KN_S_STORE:
        return n + count_expr(st->index) + count_expr(st->value);
    default:
        return n;
    }
}

static void touch(sim *s, const void *site, int buf, int64_t idx, double w, int is_store)
{
    uint64_t addr = s->base[buf] + (uint64_t)(idx * s->esize[buf]);
    uint64_t line = addr >> LINE_SHIFT;
    slot *sl = slot_of(s, site);
    int near;
    if (sl->last_line == line)
        return;
    near = sl->last_line + 1 == line;
    sl->last_line = line;
    s->cnt[CM_SIM_LINES] += w;
    if (is_store)
        s->cnt[CM_SIM_STORE_LINES] += w;
    if (!cache_access(&s->tlb, addr >> PAGE_SHIFT))
        s->cnt[CM_SIM_TLB_MISSES] += w;
    if (cache_access(&s->l1, line))
        return;
    s->cnt[CM_SIM_L1_MISSES] += w;
    if (!near)
        s->cnt[CM_SIM_L1_FAR] += w;
    if (cache_access(&s->l2, line))
        return;
    s->cnt[CM_SIM_L2_MISSES] += w;
    if (!near)
        s->cnt[CM_SIM_L2_FAR] += w;
}

static int64_t ev(sim *s, const ss_expr *e, double w);

static int affine_of(const ss_expr *e, slot *a, int64_t m)
{
    switch (e->kind) {
    case SS_E_IMM_INT:
        a->c += m * e->v.i;
        return 1;
    case SS_E_VAR:
        for (int i = 0; i < a->n_aff; i++)
            if (a->var[i] == e->id) {
                a->coef[i] += m;
                return 1;
            }
        if (a->n_aff == AFF_MAX)
            return 0;
        a->var[a->n_aff] = e->id;
        a->coef[a->n_aff++] = m;
        return 1;
    case SS_E_ADD:
        return affine_of(e->a[0], a, m) && affine_of(e->a[1], a, m);
    case SS_E_SUB:
        return affine_of(e->a[0], a, m) && affine_of(e->a[1], a, -m);
    case SS_E_CAST:
        return affine_of(e->a[0], a, m);
    case SS_E_MUL:
        if (e->a[1]->kind == SS_E_IMM_INT)
            return affine_of(e->a[0], a, m * e->a[1]->v.i);
        if (e->a[0]->kind == SS_E_IMM_INT)
            return affine_of(e->a[1], a, m * e->a[0]->v.i);
        return 0;
    default:
        return 0;
    }
}

static int64_t index_of(sim *s, const ss_expr *e, double w)
{
    slot *a = slot_of(s, e);
    int64_t v;
    if (a->aff_state == 0) {
        a->n_aff = 0;
        a->c = 0;
        a->aff_state = affine_of(e, a, 1) ? 1 : -1;
    }
    if (a->aff_state < 0)
        return ev(s, e, w);
    v = a->c;
    for (int i = 0; i < a->n_aff; i++)
        v += a->coef[i] * s->val[a->var[i]];
    return v;
}

static int64_t floordiv(int64_t a, int64_t b)
{
    int64_t q;
    if (b == 0)
        return 0;
    q = a / b;
    if ((a % b) && ((a < 0) != (b < 0)))
        q--;
    return q;
}

/* The integer value of e (0 for floats); its loads touch the caches on the way.  The
** untaken arm of a select is not evaluated, as in the generated code. */
static int64_t ev(sim *s, const ss_expr *e, double w)
{
    int64_t a, b;
    switch (e->kind) {
    case SS_E_IMM_INT:
        return e->v.i;
    case SS_E_IMM_FLOAT:
    case SS_E_AXIS:
        return 0;
    case SS_E_VAR:
        return s->val[e->id];
    case SS_E_LOAD:
        if (e->n == 1 && e->id >= 0 && e->id < s->ir->n_bufs)
            touch(s, e, e->id, index_of(s, e->a[0], w), w, 0);
        return 0;
    case SS_E_SELECT:
        return ev(s, e->a[0], w) ? ev(s, e->a[1], w) : ev(s, e->a[2], w);
    default:
        break;
    }
    a = e->n > 0 ? ev(s, e->a[0], w) : 0;
    b = e->n > 1 ? ev(s, e->a[1], w) : 0;
    if (at_dtype_is_float((at_dtype)e->dtype) && e->kind < SS_E_LT)
        return 0;
    switch (e->kind) {
    case SS_E_ADD: return a + b;
    case SS_E_SUB: return a - b;
    case SS_E_MUL: return a * b;
    case SS_E_DIV: return floordiv(a, b);
    case SS_E_MOD: return b ? a - floordiv(a, b) * b : 0;
    case SS_E_MIN: return a < b ? a : b;
    case SS_E_MAX: return a > b ? a : b;
    case SS_E_LT: return a < b;
    case SS_E_LE: return a <= b;
    case SS_E_GT: return a > b;
    case SS_E_GE: return a >= b;
    case SS_E_EQ: return a == b;
    case SS_E_NE: return a != b;
    case SS_E_AND: return a && b;
    case SS_E_OR: return a || b;
    case SS_E_NOT: return !a;
    case SS_E_NEG: return -a;
    case SS_E_CAST: return a;
    case SS_E_ABS: return a < 0 ? -a : a;
    default: return 0;
    }
}

static int64_t thread_extent(const sim *s, const kn_stmt *st)
{
    if (st->for_kind == KN_FOR_PARALLEL)
        return (st->extent + s->n_threads - 1) / s->n_threads;
    return st->extent;
}

/* Accesses of one run of st (each store and its loads as 2), memoized. */
static double cost(sim *s, const kn_stmt *st)
{
    slot *sl = slot_of(s, st);
    double c = 0;
    if (sl->cost >= 0)
        return sl->cost;
    switch (st->kind) {
    case KN_S_FOR:
        c = (double)thread_extent(s, st) * cost(s, st->body);
        break;
    case KN_S_SEQ:
        for (int i = 0; i < st->n; i++)
            c += cost(s, st->items[i]);
        break;
    case KN_S_IF:
        c = cost(s, st->body);
        break;
    case KN_S_STORE:
        c = 2;
        break;
    default:
        break;
    }
    sl->cost = c; /* (the table never moves: 'sl' still points at st's slot) */
    return c;
}

static void run(sim *s, const kn_stmt *st, double w, double cap)
{
    switch (st->kind) {
    case KN_S_FOR: {
        int64_t e = thread_extent(s, st), k;
        double bc = cost(s, st->body), wk;
        if ((double)e * bc <= cap || e <= 2) {
            for (int64_t i = 0; i < e; i++) {
                s->val[st->var] = i;
                run(s, st->body, w, cap / (double)e);
            }
            return;
        }
        k = (int64_t)(cap / bc);
        if (k < 3)
            k = 3;
        if (k > e)
            k = e;
        wk = w * (double)e / (double)(k - 1);
        for (int64_t i = 0; i < k; i++) {
            s->val[st->var] = i;
            run(s, st->body, i ? wk : 0, cap / (double)k);
        }
        return;
    }
    case KN_S_SEQ:
        for (int i = 0; i < st->n; i++)
            run(s, st->items[i], w, cap);
        return;
    case KN_S_IF:
        if (ev(s, st->cond, w))
            run(s, st->body, w, cap);
        return;
    case KN_S_STORE:
        s->cnt[CM_SIM_STMTS] += w;
        ev(s, st->value, w);
        if (st->buf >= 0 && st->buf < s->ir->n_bufs)
            touch(s, st, st->buf, index_of(s, st->index, w), w, 1);
        return;
    default:
        return;
    }
}

void cm_sim_params_init(cm_sim_params *p, const kn_target *t)
{
    memset(p, 0, sizeof *p);
    p->l1_bytes = t && t->l1_bytes > 0 ? t->l1_bytes : 32768;
    p->l2_bytes = t && t->l2_bytes > 0 ? t->l2_bytes : 1 << 20;
    p->l1_ways = (int)(p->l1_bytes / 4096); /* 64 sets: x86's L1Ds (32 KiB 8-way, 48 KiB 12-way) */
    if (p->l1_ways < 1)
        p->l1_ways = 1;
    p->l2_ways = 16;
    p->n_threads = t && t->n_cores > 0 ? t->n_cores : 1;
    p->cap = 3e5;
}

at_err cm_sim_run(const kn_ir *ir, const cm_sim_params *p, double out[CM_SIM_N], char *errmsg,
                  size_t errmsg_size)
{
    sim s;
    size_t keys, size = 64;
    uint64_t addr = (uint64_t)1 << 32;
    at_err err = AT_OK;
    memset(out, 0, CM_SIM_N * sizeof *out);
    if (!ir || !p || ir->is_gpu || p->l1_bytes < 64 || p->l2_bytes < 64 || p->cap < 1 ||
        p->n_threads < 1) {
        if (errmsg && errmsg_size)
            snprintf(errmsg, errmsg_size, "cache simulation: %s",
                     !ir ? "no program" : !p ? "no parameters" : ir->is_gpu ? "a GPU program"
                                                                           : "bad parameters");
        return AT_EINVAL;
    }
    memset(&s, 0, sizeof s);
    s.ir = ir;
    s.n_threads = p->n_threads;
    keys = count_stmt(ir->body) + 1;
    while (size < 2 * keys)
        size <<= 1;
    s.mask = size - 1;
    s.tab = at_calloc(size, sizeof *s.tab);
    s.val = at_calloc((size_t)ir->n_vars + 1, sizeof *s.val);
    s.base = at_calloc((size_t)ir->n_bufs + 1, sizeof *s.base);
    s.esize = at_calloc((size_t)ir->n_bufs + 1, sizeof *s.esize);
    if (!s.tab || !s.val || !s.base || !s.esize)
        err = AT_ENOMEM;
    if (err == AT_OK && (cache_init(&s.l1, p->l1_bytes, p->l1_ways) != AT_OK ||
                         cache_init(&s.l2, p->l2_bytes, p->l2_ways) != AT_OK ||
                         cache_init(&s.tlb, 64 << LINE_SHIFT, 4) != AT_OK))
        err = AT_ENOMEM;
    if (err == AT_OK) {
        /* page-aligned allocations a few lines apart, as a heap of large blocks gives */
        for (int i = 0; i < ir->n_bufs; i++) {
            int b = at_dtype_bytes(ir->bufs[i].dtype);
            s.esize[i] = b > 0 ? b : 4;
            s.base[i] = addr + (uint64_t)((i * 37) % 64) * 64;
            addr += ((uint64_t)ir->bufs[i].n_elems * (uint64_t)s.esize[i] + 8192 + 4095) & ~(uint64_t)4095;
        }
        run(&s, ir->body, 1, p->cap);
        memcpy(out, s.cnt, sizeof s.cnt);
    } else if (errmsg && errmsg_size) {
        snprintf(errmsg, errmsg_size, "cache simulation: out of memory");
    }
    cache_fini(&s.l1);
    cache_fini(&s.l2);
    cache_fini(&s.tlb);
    at_free(s.tab);
    at_free(s.val);
    at_free(s.base);
    at_free(s.esize);
    return err;
}
