/* schedule_space/ss_json.c -- a state's JSON form: {"v":1,"steps":[[tag, ...], ...]}.
**
** Writing is byte-stable (no spaces, integers only, fixed field order), so the text can be
** hashed and compared.  Reading validates every field and replays the steps on the task's
** DAG, so a record that no longer fits the DAG is reported with the failing step. */
#include "ss_int.h"

#include <stdatomic.h>
#include <string.h>

#define SS_JSON_VERSION 1

static const char *const tags[] = {
#define X(id, tag) tag,
    SS_STEP_MAP(X)
#undef X
};

static void ints_json(at_buf *b, const int64_t *v, int n, int null_zero)
{
    at_buf_putc(b, '[');
    for (int i = 0; i < n; i++) {
        if (i)
            at_buf_putc(b, ',');
        if (null_zero && v[i] == 0)
            at_buf_puts(b, "null");
        else
            at_buf_printf(b, "%lld", (long long)v[i]);
    }
    at_buf_putc(b, ']');
}

void ss_step_to_json(const ss_step *s, at_buf *b)
{
    at_buf_printf(b, "[\"%s\",%d", tags[s->kind], s->stage);
    switch (s->kind) {
    case SS_STEP_SPLIT:
        at_buf_printf(b, ",%d,%lld,", s->iter, (long long)s->extent);
        ints_json(b, s->ints, s->n_ints, 1);
        at_buf_puts(b, ",1");
        break;
    case SS_STEP_FOLLOW_SPLIT:
        at_buf_printf(b, ",%d,%d,%d", s->iter, s->a, s->b);
        break;
    case SS_STEP_REORDER:
    case SS_STEP_FUSE:
        at_buf_putc(b, ',');
        ints_json(b, s->ints, s->n_ints, 0);
        break;
    case SS_STEP_ANNOTATE:
        at_buf_printf(b, ",%d,%d", s->iter, s->a);
        break;
    case SS_STEP_PRAGMA:
        at_buf_printf(b, ",%d,\"auto_unroll_max_step$%d\"", s->iter, s->a);
        break;
    case SS_STEP_COMPUTE_AT:
        at_buf_printf(b, ",%d,%d", s->a, s->b);
        break;
    case SS_STEP_CACHE_WRITE:
        at_buf_putc(b, ',');
        at_buf_json_str(b, s->scope);
        break;
    case SS_STEP_CACHE_READ:
        at_buf_putc(b, ',');
        at_buf_json_str(b, s->scope);
        at_buf_putc(b, ',');
        ints_json(b, s->ints, s->n_ints, 0);
        break;
    case SS_STEP_RFACTOR:
        at_buf_printf(b, ",%d,%d", s->iter, s->a);
        break;
    case SS_STEP_LAYOUT_REWRITE:
        at_buf_printf(b, ",%d", s->a);
        break;
    case SS_STEP_FOLLOW_FUSED_SPLIT:
        at_buf_printf(b, ",%d,", s->iter);
        ints_json(b, s->ints, s->n_ints, 0);
        at_buf_printf(b, ",%d,%d", s->a, s->b);
        break;
    default:
        break;
    }
    at_buf_putc(b, ']');
}

void ss_state_to_json(const ss_state *st, at_buf *b)
{
    at_buf_printf(b, "{\"v\":%d,\"steps\":[", SS_JSON_VERSION);
    for (int i = 0; i < st->n_steps; i++) {
        if (i)
            at_buf_putc(b, ',');
        ss_step_to_json(&st->steps[i], b);
    }
    at_buf_puts(b, "]}");
}

/* ---- reading ---- */

typedef struct reader {
    char *errmsg;
    size_t errmsg_size;
    int step_i;
} reader;

static at_err bad(reader *r, const at_json *j, const char *what)
{
    return ss__fail(r->errmsg, r->errmsg_size, AT_EPARSE, "%d:%d: step %d: %s", j ? j->line : 1,
                    j ? j->col : 1, r->step_i, what);
}

static int get_int(const at_json *j, int64_t lo, int64_t hi, int64_t *out)
{
    if (j == NULL || j->type != AT_JSON_NUM || !j->is_int || j->i < lo || j->i > hi)
        return 0;
    *out = j->i;
    return 1;
}

static at_err get_ints(reader *r, const at_json *j, ss_step *s, int allow_null)
{
    if (j == NULL || j->type != AT_JSON_ARR)
        return bad(r, j, "expected an array of integers");
    if (j->n > SS_STEP_MAX_INTS)
        return bad(r, j, "too many integers in the array");
    s->n_ints = j->n;
    for (int i = 0; i < j->n; i++) {
        if (allow_null && j->items[i]->type == AT_JSON_NULL) {
            s->ints[i] = 0;
            continue;
        }
        if (!get_int(j->items[i], allow_null ? 1 : 0, 1ll << 31, &s->ints[i]))
            return bad(r, j->items[i], "expected a non-negative integer");
    }
    return AT_OK;
}

static at_err parse_step(reader *r, const at_json *j, ss_step *s)
{
    int kind = -1;
    int64_t v;
    const at_json *it;
    at_err err;
    memset(s, 0, sizeof *s);
    if (j->type != AT_JSON_ARR || j->n < 2 || j->items[0]->type != AT_JSON_STR)
        return bad(r, j, "a step is an array [\"TAG\", stage, ...]");
    for (int k = 0; k < SS_N_STEP_KINDS; k++)
        if (strcmp(j->items[0]->str, tags[k]) == 0)
            kind = k;
    if (kind < 0)
        return bad(r, j->items[0], "unknown step tag");
    s->kind = (ss_step_kind)kind;
    if (!get_int(j->items[1], 0, 1 << 20, &v))
        return bad(r, j->items[1], "expected a stage number");
    s->stage = (int)v;
    it = j->items[1];
#define NEED(cnt)                                                                              \
    do {                                                                                       \
        if (j->n != (cnt))                                                                     \
            return bad(r, j, "wrong number of fields for this step");                          \
    } while (0)
#define INT_AT(idx, lo, hi, dst)                                                               \
    do {                                                                                       \
        if (!get_int(j->items[idx], lo, hi, &v))                                               \
            return bad(r, j->items[idx], "expected an integer in range");                      \
        dst = (int)v;                                                                          \
    } while (0)
    (void)it;
    switch (s->kind) {
    case SS_STEP_SPLIT:
        NEED(6);
        INT_AT(2, 0, SS_MAX_LEAVES, s->iter);
        if (!get_int(j->items[3], 0, 1ll << 31, &s->extent))
            return bad(r, j->items[3], "expected the split's extent");
        if ((err = get_ints(r, j->items[4], s, 1)))
            return err;
        if (!get_int(j->items[5], 1, 1, &v))
            return bad(r, j->items[5], "only inner_to_outer=1 splits are supported");
        break;
    case SS_STEP_FOLLOW_SPLIT:
        NEED(5);
        INT_AT(2, 0, SS_MAX_LEAVES, s->iter);
        INT_AT(3, 0, 1 << 20, s->a);
        INT_AT(4, 1, SS_MAX_SPLIT, s->b);
        break;
    case SS_STEP_REORDER:
    case SS_STEP_FUSE:
        NEED(3);
        if ((err = get_ints(r, j->items[2], s, 0)))
            return err;
        break;
    case SS_STEP_ANNOTATE:
        NEED(4);
        INT_AT(2, 0, SS_MAX_LEAVES, s->iter);
        INT_AT(3, 0, SS_N_ANNS - 1, s->a);
        break;
    case SS_STEP_PRAGMA: {
        const char *p = "auto_unroll_max_step$";
        int64_t n = 0;
        const char *q;
        NEED(4);
        INT_AT(2, 0, SS_MAX_LEAVES, s->iter);
        if (j->items[3]->type != AT_JSON_STR || strncmp(j->items[3]->str, p, strlen(p)) != 0)
            return bad(r, j->items[3], "expected \"auto_unroll_max_step$N\"");
        q = j->items[3]->str + strlen(p);
        if (*q == 0 || at_parse_i64(q, &n) != AT_OK || n < 0 || n > 65536)
            return bad(r, j->items[3], "bad auto_unroll_max_step value");
        s->a = (int)n;
        break;
    }
    case SS_STEP_COMPUTE_AT:
        NEED(4);
        INT_AT(2, 0, 1 << 20, s->a);
        INT_AT(3, 0, SS_MAX_LEAVES, s->b);
        break;
    case SS_STEP_COMPUTE_INLINE:
    case SS_STEP_COMPUTE_ROOT:
        NEED(2);
        break;
    case SS_STEP_CACHE_WRITE:
    case SS_STEP_CACHE_READ:
        NEED(s->kind == SS_STEP_CACHE_WRITE ? 3 : 4);
        if (j->items[2]->type != AT_JSON_STR || j->items[2]->n == 0 ||
            (size_t)j->items[2]->n >= sizeof s->scope ||
            strlen(j->items[2]->str) != (size_t)j->items[2]->n)
            return bad(r, j->items[2], "expected a scope name");
        strcpy(s->scope, j->items[2]->str);
        if (s->kind == SS_STEP_CACHE_READ && (err = get_ints(r, j->items[3], s, 0)))
            return err;
        break;
    case SS_STEP_RFACTOR:
        NEED(4);
        INT_AT(2, 0, SS_MAX_LEAVES, s->iter);
        INT_AT(3, 0, SS_MAX_DIMS, s->a);
        break;
    case SS_STEP_LAYOUT_REWRITE:
        NEED(3);
        INT_AT(2, 0, 1 << 20, s->a);
        break;
    case SS_STEP_FOLLOW_FUSED_SPLIT:
        NEED(6);
        INT_AT(2, 0, SS_MAX_LEAVES, s->iter);
        if ((err = get_ints(r, j->items[3], s, 0)))
            return err;
        INT_AT(4, 0, SS_MAX_SPLIT, s->a);
        INT_AT(5, 0, 1, s->b);
        break;
    default:
        return bad(r, j, "unknown step");
    }
#undef NEED
#undef INT_AT
    return AT_OK;
}

/* Lengths of a split recorded for another extent, fitted to extent E: each length (in the
** order given) becomes the largest divisor of what is left of E that is not larger. */
static void fit_split(ss_state *st, ss_step *s)
{
    const ss_stage *sg;
    int64_t E, rem;
    if (s->kind != SS_STEP_SPLIT || s->stage < 0 || s->stage >= st->n_stages)
        return;
    sg = &st->stages[s->stage];
    if (s->iter < 0 || s->iter >= sg->n_leaves)
        return;
    E = sg->ivars[sg->leaves[s->iter]].extent;
    if (E <= 0 || s->extent <= 0 || s->extent == E)
        return;
    rem = E;
    for (int k = 0; k < s->n_ints; k++) {
        int64_t l = s->ints[k], d = 1;
        if (l <= 0)
            continue;
        for (int64_t c = l < rem ? l : rem; c >= 1; c--)
            if (rem % c == 0) {
                d = c;
                break;
            }
        s->ints[k] = d;
        rem /= d;
    }
    s->extent = E;
}

static at_err from_json(ss_dag *dag, const char *json, size_t n, int fit, ss_state **out,
                        char *errmsg, size_t errmsg_size);

at_err ss_state_from_json(ss_dag *dag, const char *json, size_t n, ss_state **out, char *errmsg,
                          size_t errmsg_size)
{
    return from_json(dag, json, n, 0, out, errmsg, errmsg_size);
}

at_err ss_state_from_json_fit(ss_dag *dag, const char *json, size_t n, ss_state **out,
                              char *errmsg, size_t errmsg_size)
{
    return from_json(dag, json, n, 1, out, errmsg, errmsg_size);
}

static _Atomic int64_t n_parsed;

int64_t ss_state_parse_count(void)
{
    return atomic_load_explicit(&n_parsed, memory_order_relaxed);
}

static at_err from_json(ss_dag *dag, const char *json, size_t n, int fit, ss_state **out,
                        char *errmsg, size_t errmsg_size)
{
    atomic_fetch_add_explicit(&n_parsed, 1, memory_order_relaxed);
    at_arena ar;
    at_json *root;
    const at_json *v, *steps;
    ss_state *st = NULL;
    reader r = {errmsg, errmsg_size, 0};
    char msg[256];
    at_err err;
    *out = NULL;
    at_arena_init(&ar, 8192);
    err = at_json_parse(&ar, json, n, &root, msg, sizeof msg);
    if (err) {
        ss__fail(errmsg, errmsg_size, err, "%s", err == AT_EPARSE ? msg : at_strerror(err));
        goto done;
    }
    v = at_json_get(root, "v");
    steps = at_json_get(root, "steps");
    if (root->type != AT_JSON_OBJ || v == NULL || steps == NULL || steps->type != AT_JSON_ARR) {
        err = ss__fail(errmsg, errmsg_size, AT_EPARSE,
                       "a state is an object {\"v\":1,\"steps\":[...]}");
        goto done;
    }
    if (v->type != AT_JSON_NUM || !v->is_int || v->i < 1) {
        err = ss__fail(errmsg, errmsg_size, AT_EPARSE, "%d:%d: bad version", v->line, v->col);
        goto done;
    }
    if (v->i > SS_JSON_VERSION) {
        err = ss__fail(errmsg, errmsg_size, AT_EVERSION,
                       "the state has format version %lld; this build reads up to %d",
                       (long long)v->i, SS_JSON_VERSION);
        goto done;
    }
    if ((err = ss_state_new(dag, &st)) != AT_OK)
        goto done;
    for (int i = 0; i < steps->n; i++) {
        ss_step s;
        r.step_i = i;
        if ((err = parse_step(&r, steps->items[i], &s)) != AT_OK)
            goto done;
        if (fit)
            fit_split(st, &s);
        if ((err = ss_state_apply(st, &s, msg, sizeof msg)) != AT_OK) {
            ss__fail(errmsg, errmsg_size, err, "step %d (%s) does not replay: %s", i,
                     tags[s.kind], msg);
            goto done;
        }
    }
    if (st->bounds_dirty && (err = ss_state_infer_bounds(st, msg, sizeof msg)) != AT_OK) {
        ss__fail(errmsg, errmsg_size, err, "%s", msg);
        goto done;
    }
    *out = st;
    st = NULL;
done:
    ss_state_free(st);
    at_arena_fini(&ar);
    return err;
}
