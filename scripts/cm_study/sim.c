/* scripts/cm_study/sim.c -- issue 16 study, not the product: every record of a store lowered
** to loop IR and its memory accesses run through a model of one core's caches (L1D and L2,
** set-associative, LRU, 64-byte lines) and data TLB, as thread 0 of 2 runs them.  Loops too
** long to simulate whole are sampled: the first k iterations, the first one only warming
** the caches, the others' counts scaled to the loop's extent.  One line a record:
**   id, then per thread: statements run, line accesses, L1 misses, of them not the next line
**   of the same access site, L2 misses, of them not the next line, TLB misses, stores'
**   line accesses, simulated accesses (with SIM_STRIDE=1 'not the next line' is 'not the
**   same change of line as the site's last': what a stride prefetcher would not fetch), line accesses that miss a 32-line and a 16-line
**   fully associative LRU (a register file; SIM_REG=1, else 0), iterations of the loops the
**   code keeps (not copied out, not one vector), of those with no such loop inside.
** The product's cost_model/cm_sim.c counts the same (without the SIM_* variants below);
** this prototype stays as the study's record of them.
** Usage: sim STORE [L1_KB L1_WAYS L2_KB L2_WAYS [CAP]] (default 48 12 1024 16: AMD Zen 5; CAP
** 3e6 accesses a program); SIM_EVERY=N SIM_FIRST=I: only records I, I+N, ... */
#include "kernels/kernels.h"
#include "records/records.h"
#include "schedule_space/schedule_space.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int sets, ways;
    uint64_t *tag, *age;
    uint64_t clock;
} cache;

static void cache_init(cache *c, int kb, int ways, int line)
{
    c->ways = ways; c->sets = kb * 1024 / line / ways;
    c->tag = calloc((size_t)c->sets * ways, sizeof *c->tag);
    c->age = calloc((size_t)c->sets * ways, sizeof *c->age);
    c->clock = 0;
}
static void cache_clear(cache *c)
{
    memset(c->tag, 0, (size_t)c->sets * c->ways * sizeof *c->tag);
    memset(c->age, 0, (size_t)c->sets * c->ways * sizeof *c->age);
}
/* 1 on a hit; on a miss the line is filled (LRU). tags are line+1 so 0 is empty. */
static int cache_access(cache *c, uint64_t line)
{
    uint64_t set = line % (uint64_t)c->sets, t = line + 1;
    uint64_t *tg = c->tag + set * c->ways, *ag = c->age + set * c->ways;
    int lru = 0;
    c->clock++;
    for (int w = 0; w < c->ways; w++) {
        if (tg[w] == t) { ag[w] = c->clock; return 1; }
        if (ag[w] < ag[lru]) lru = w;
    }
    tg[lru] = t; ag[lru] = c->clock;
    return 0;
}

enum { C_STMTS, C_ACC, C_M1, C_M1N, C_M2, C_M2N, C_TLB, C_ST, C_SIM, C_R32, C_R16, C_ITER, C_INNER, C_N };
static double cnt[C_N];
static cache l1, l2, tlb, r32, r16;
static int use_reg; /* SIM_REG=1: the register-file columns (else 0) */
static const kn_ir *IR;
static int64_t *val;
static uint64_t base[1024];
static int esize[1024];

/* per access site (expression or store): the last line it touched */
#define SITES 8192
static const void *site_key[SITES];
static uint64_t site_line[SITES];
static int64_t site_delta[SITES]; /* its last change of line (SIM_STRIDE=1) */
static int use_stride;
static uint64_t *site_slot(const void *k)
{
    size_t h = ((uintptr_t)k >> 4) * 0x9E3779B97F4A7C15ull >> 51;
    for (;;) {
        if (site_key[h] == k) return &site_line[h];
        if (!site_key[h]) { site_key[h] = k; site_line[h] = UINT64_MAX; return &site_line[h]; }
        h = (h + 1) & (SITES - 1);
    }
}

static void touch(const void *site, int buf, int64_t idx, double w, int is_store)
{
    uint64_t addr = base[buf] + (uint64_t)(idx * esize[buf]), line = addr >> 6;
    uint64_t *last = site_slot(site);
    cnt[C_SIM] += 1;
    /* a register file of 32 (16) vectors, fully associative, LRU, seen before the sites' filter */
    if (use_reg && !cache_access(&r32, line)) cnt[C_R32] += w;
    if (use_reg && !cache_access(&r16, line)) cnt[C_R16] += w;
    if (*last == line) return; /* the same line as this site's last access: a register or a vector's other lanes */
    int seq = *last + 1 == line;
    if (use_stride) { /* a stride prefetcher: the same change of line as this site's last */
        int64_t *dl = &site_delta[last - site_line], d = (int64_t)(line - *last);
        seq = *last != UINT64_MAX && d == *dl;
        *dl = d;
    }
    *last = line;
    cnt[C_ACC] += w;
    if (is_store) cnt[C_ST] += w;
    if (!cache_access(&tlb, addr >> 12)) cnt[C_TLB] += w;
    if (cache_access(&l1, line)) return;
    cnt[C_M1] += w; if (!seq) cnt[C_M1N] += w;
    if (cache_access(&l2, line)) return;
    cnt[C_M2] += w; if (!seq) cnt[C_M2N] += w;
}

/* An index as sum(coef[v] * var v) + c when it is affine in the loop variables (the common
** case: split loops); otherwise it is walked as a tree each time.  Memoized by expression. */
typedef struct { int n; int var[8]; int64_t coef[8]; int64_t c; int ok; } affine;
#define AMEMO 8192
static const void *aff_key[AMEMO];
static affine aff_val[AMEMO];
static int affine_of(const ss_expr *e, affine *a, int64_t m)
{
    switch (e->kind) {
    case SS_E_IMM_INT: a->c += m * e->v.i; return 1;
    case SS_E_VAR:
        for (int i = 0; i < a->n; i++) if (a->var[i] == e->id) { a->coef[i] += m; return 1; }
        if (a->n == 8) return 0;
        a->var[a->n] = e->id; a->coef[a->n++] = m; return 1;
    case SS_E_ADD: return affine_of(e->a[0], a, m) && affine_of(e->a[1], a, m);
    case SS_E_SUB: return affine_of(e->a[0], a, m) && affine_of(e->a[1], a, -m);
    case SS_E_CAST: return affine_of(e->a[0], a, m);
    case SS_E_MUL:
        if (e->a[1]->kind == SS_E_IMM_INT) return affine_of(e->a[0], a, m * e->a[1]->v.i);
        if (e->a[0]->kind == SS_E_IMM_INT) return affine_of(e->a[1], a, m * e->a[0]->v.i);
        return 0;
    default: return 0;
    }
}
static int64_t ev(const ss_expr *e, double w);
static int64_t index_of(const ss_expr *e, double w)
{
    size_t h = ((uintptr_t)e >> 4) * 0x9E3779B97F4A7C15ull >> 51;
    while (aff_key[h] && aff_key[h] != e) h = (h + 1) & (AMEMO - 1);
    affine *a = &aff_val[h];
    if (!aff_key[h]) { aff_key[h] = e; memset(a, 0, sizeof *a); a->ok = affine_of(e, a, 1); }
    if (!a->ok) return ev(e, w);
    int64_t v = a->c;
    for (int i = 0; i < a->n; i++) v += a->coef[i] * val[a->var[i]];
    return v;
}

static int64_t ev(const ss_expr *e, double w)
{
    switch (e->kind) {
    case SS_E_IMM_INT: return e->v.i;
    case SS_E_IMM_FLOAT: return 0;
    case SS_E_VAR: return val[e->id];
    case SS_E_LOAD: { int64_t i = index_of(e->a[0], w); touch(e, e->id, i, w, 0); return 0; }
    case SS_E_SELECT: return ev(e->a[0], w) ? ev(e->a[1], w) : ev(e->a[2], w);
    default: break;
    }
    int64_t a = e->n > 0 ? ev(e->a[0], w) : 0, b = e->n > 1 ? ev(e->a[1], w) : 0;
    if (!at_dtype_is_float((at_dtype)e->dtype) || e->kind >= SS_E_LT) switch (e->kind) {
    case SS_E_ADD: return a + b;
    case SS_E_SUB: return a - b;
    case SS_E_MUL: return a * b;
    case SS_E_DIV: if (!b) return 0; { int64_t q = a / b; if ((a % b) && ((a < 0) != (b < 0))) q--; return q; }
    case SS_E_MOD: if (!b) return 0; { int64_t r = a % b; if (r && ((r < 0) != (b < 0))) r += b; return r; }
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
    return 0;
}

/* static cost of one run of s: accesses (memoized by statement) */
#define MEMO 16384
static const void *memo_key[MEMO];
static double memo_val[MEMO];
static double cost_(const kn_stmt *s);
static double cost(const kn_stmt *s)
{
    size_t h = ((uintptr_t)s >> 4) * 0x9E3779B97F4A7C15ull >> 50;
    for (;;) {
        if (memo_key[h] == s) return memo_val[h];
        if (!memo_key[h]) break;
        h = (h + 1) & (MEMO - 1);
    }
    double c = cost_(s);
    /* (re-probe: cost_ may have filled slots) */
    h = ((uintptr_t)s >> 4) * 0x9E3779B97F4A7C15ull >> 50;
    while (memo_key[h] && memo_key[h] != s) h = (h + 1) & (MEMO - 1);
    memo_key[h] = s; memo_val[h] = c;
    return c;
}
static double cost_(const kn_stmt *s)
{
    switch (s->kind) {
    case KN_S_FOR: {
        double e = (double)s->extent;
        if (s->for_kind == KN_FOR_PARALLEL) e = ceil(e / 2);
        return e * cost(s->body);
    }
    case KN_S_SEQ: { double c = 0; for (int i = 0; i < s->n; i++) c += cost(s->items[i]); return c; }
    case KN_S_IF: return cost(s->body);
    case KN_S_STORE: return 2;
    default: return 0;
    }
}

/* Does the back end emit s as a loop (not copied out, not one vector)? */
static int emitted(const kn_stmt *s)
{
    return s->kind == KN_S_FOR && !kn_stmt_copied_out(s) &&
           !(s->for_kind == KN_FOR_VECTORIZE && kn_stmt_vectorizable(s->body, s->var));
}
/* Does s hold an emitted loop? */
static int holds_loop(const kn_stmt *s)
{
    switch (s->kind) {
    case KN_S_FOR: return emitted(s) || holds_loop(s->body);
    case KN_S_SEQ: for (int i = 0; i < s->n; i++) if (holds_loop(s->items[i])) return 1; return 0;
    case KN_S_IF: return holds_loop(s->body);
    default: return 0;
    }
}

static void run(const kn_stmt *s, double w, double cap)
{
    switch (s->kind) {
    case KN_S_FOR: {
        int64_t e = s->extent;
        if (s->for_kind == KN_FOR_PARALLEL) e = (e + 1) / 2;
        double bc = cost(s->body);
        if (emitted(s)) {  /* iterations of loops the code keeps: their overhead, counted whole */
            cnt[C_ITER] += w * (double)e;
            if (!holds_loop(s->body)) cnt[C_INNER] += w * (double)e;
        }
        if ((double)e * bc <= cap || e <= 2) {
            for (int64_t i = 0; i < e; i++) { val[s->var] = i; run(s->body, w, cap / (double)e); }
            return;
        }
        int64_t k = (int64_t)(cap / bc);
        if (k < 3) k = 3;
        if (k > e) k = e;
        double wk = w * (double)e / (double)(k - 1);
        for (int64_t i = 0; i < k; i++) { val[s->var] = i; run(s->body, i ? wk : 0, cap / (double)k); }
        return;
    }
    case KN_S_SEQ: for (int i = 0; i < s->n; i++) run(s->items[i], w, cap); return;
    case KN_S_IF: if (ev(s->cond, w)) run(s->body, w, cap); return;
    case KN_S_STORE:
        cnt[C_STMTS] += w;
        ev(s->value, w);
        touch(s, s->buf, index_of(s->index, w), w, 1);
        return;
    default: return;
    }
}

int main(int argc, char **argv)
{
    rec_store *st; rec_iter *it; const rec_record *r; char msg[512];
    ss_dag *dag = NULL; char *dag_text = NULL;
    if (argc < 2) { fprintf(stderr, "usage: sim STORE [L1_KB L1_WAYS L2_KB L2_WAYS [CAP]]\n"); return 2; }
    int l1kb = argc > 5 ? atoi(argv[2]) : 48, l1w = argc > 5 ? atoi(argv[3]) : 12;
    int l2kb = argc > 5 ? atoi(argv[4]) : 1024, l2w = argc > 5 ? atoi(argv[5]) : 16;
    double CAP = argc > 6 ? atof(argv[6]) : 3e6;
    cache_init(&l1, l1kb, l1w, 64); cache_init(&l2, l2kb, l2w, 64);
    use_reg = getenv("SIM_REG") && atoi(getenv("SIM_REG"));
    use_stride = getenv("SIM_STRIDE") && atoi(getenv("SIM_STRIDE"));
    cache_init(&r32, 2, 32, 64); cache_init(&r16, 1, 16, 64);
    tlb.ways = 4; tlb.sets = 16; tlb.tag = calloc(64, 8); tlb.age = calloc(64, 8);
    if (rec_store_open(argv[1], REC_OPEN_READONLY, &st, msg, sizeof msg) != AT_OK) { fprintf(stderr, "sim: %s: %s\n", argv[1], msg); return 1; }
    int every = getenv("SIM_EVERY") ? atoi(getenv("SIM_EVERY")) : 1;
    int first = getenv("SIM_FIRST") ? atoi(getenv("SIM_FIRST")) : 0, k = 0;
    rec_iter_open(st, NULL, REC_ORDER_STABLE, &it);
    while (rec_iter_next(it, &r) == AT_OK && r) {
        ss_state *s = NULL; kn_ir *ir = NULL;
        if (k++ % every != first) continue;
        if (!dag_text || strcmp(dag_text, r->dag)) { ss_dag_unref(dag); dag = NULL; free(dag_text); dag_text = strdup(r->dag);
            if (ss_dag_parse(r->dag, strlen(r->dag), &dag, msg, sizeof msg) != AT_OK) dag = NULL; }
        if (!dag || ss_state_from_json(dag, r->state, strlen(r->state), &s, msg, sizeof msg) != AT_OK) continue;
        at_err e = kn_lower(s, &ir, msg, sizeof msg);
        ss_state_free(s);
        if (e != AT_OK || ir->is_gpu || ir->n_bufs > 1024) { if (ir) kn_ir_free(ir); continue; }
        IR = ir;
        val = calloc((size_t)ir->n_vars + 1, sizeof *val);
        uint64_t b = 1ull << 32;
        for (int i = 0; i < ir->n_bufs; i++) {
            esize[i] = at_dtype_bytes(ir->bufs[i].dtype);
            if (esize[i] <= 0) esize[i] = 4;
            base[i] = b + 64 * (uint64_t)((i * 37) % 64); /* page-aligned allocations, a few lines apart */
            b += ((uint64_t)ir->bufs[i].n_elems * esize[i] + 8192 + 4095) & ~4095ull;
        }
        memset(cnt, 0, sizeof cnt); cache_clear(&l1); cache_clear(&l2); cache_clear(&tlb); cache_clear(&r32); cache_clear(&r16);
        memset(site_key, 0, sizeof site_key); memset(memo_key, 0, sizeof memo_key);
        memset(aff_key, 0, sizeof aff_key);
        run(ir->body, 1, CAP);
        printf("%lld", (long long)r->id);
        for (int c = 0; c < C_N; c++) printf(" %.6g", cnt[c]);
        printf("\n");
        fflush(stdout);
        free(val); kn_ir_free(ir);
    }
    rec_iter_close(it); rec_store_close(st);
    return 0;
}
