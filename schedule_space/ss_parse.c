/* schedule_space/ss_parse.c -- the DAG text format (docs/dag_format.md).
**
**   input  A[1024, 1024] float32
**   const  B[1024, 1024] float32
**   C[i:1024, j:1024] = sum[k:1024](A[i, k] * B[k, j])
**   D[i:1024, j:1024] = max(C[i, j], 0.0)
**
** One statement per line (a line break inside brackets or parentheses continues the
** statement); '#' starts a comment.  Every error is "LINE:COL: problem". */
#include "ss_int.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef enum {
    T_EOF,
    T_NL,
    T_IDENT,
    T_INT,
    T_FLOAT,
    T_PUNCT
} tok_kind;

typedef struct token {
    tok_kind kind;
    const char *p;
    int len;
    int line, col;
    int64_t i;
    double f;
} token;

typedef struct parser {
    const char *src, *end, *p, *line_start;
    int line;
    int depth; /* bracket nesting: newlines inside are whitespace */
    int nest;  /* recursion of the expression parser (parentheses, unary operators, ?:) */
    token tok;
    ss_dag *dag;
    char *errmsg;
    size_t errmsg_size;
    at_err err;
    /* the compute op being parsed */
    int n_axes, n_raxes;
    int in_reduce; /* parsing the reduce axes */
    ss_axis axes[SS_MAX_AXES];
    char axis_names[SS_MAX_AXES][64];
    int decl_line[1024]; /* line of each op's statement (for later messages) */
} parser;

static void perr(parser *ps, const token *t, at_err err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void perr(parser *ps, const token *t, at_err err, const char *fmt, ...)
{
    va_list ap;
    int n;
    if (ps->err)
        return;
    ps->err = err;
    if (!ps->errmsg || !ps->errmsg_size)
        return;
    n = snprintf(ps->errmsg, ps->errmsg_size, "%d:%d: ", t->line, t->col);
    if (n < 0 || (size_t)n >= ps->errmsg_size)
        return;
    va_start(ap, fmt);
    vsnprintf(ps->errmsg + n, ps->errmsg_size - (size_t)n, fmt, ap);
    va_end(ap);
}

static void next(parser *ps)
{
    token *t = &ps->tok;
    for (;;) {
        while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\r'))
            ps->p++;
        if (ps->p < ps->end && *ps->p == '#') {
            while (ps->p < ps->end && *ps->p != '\n')
                ps->p++;
        }
        if (ps->p < ps->end && *ps->p == '\n' && ps->depth > 0) {
            ps->p++;
            ps->line++;
            ps->line_start = ps->p;
            continue;
        }
        break;
    }
    t->p = ps->p;
    t->line = ps->line;
    t->col = (int)(ps->p - ps->line_start) + 1;
    t->len = 0;
    if (ps->p >= ps->end) {
        t->kind = T_EOF;
        return;
    }
    if (*ps->p == '\n') {
        t->kind = T_NL;
        t->len = 1;
        ps->p++;
        ps->line++;
        ps->line_start = ps->p;
        return;
    }
    if (isalpha((unsigned char)*ps->p) || *ps->p == '_') {
        const char *s = ps->p;
        while (ps->p < ps->end &&
               (isalnum((unsigned char)*ps->p) || *ps->p == '_' || *ps->p == '.'))
            ps->p++;
        t->kind = T_IDENT;
        t->len = (int)(ps->p - s);
        return;
    }
    if (isdigit((unsigned char)*ps->p) ||
        (*ps->p == '.' && ps->p + 1 < ps->end && isdigit((unsigned char)ps->p[1]))) {
        const char *s = ps->p;
        char tmp[64];
        int is_float = 0;
        while (ps->p < ps->end && isdigit((unsigned char)*ps->p))
            ps->p++;
        if (ps->p < ps->end && *ps->p == '.') {
            is_float = 1;
            ps->p++;
            while (ps->p < ps->end && isdigit((unsigned char)*ps->p))
                ps->p++;
        }
        if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
            const char *q = ps->p + 1;
            if (q < ps->end && (*q == '+' || *q == '-'))
                q++;
            if (q < ps->end && isdigit((unsigned char)*q)) {
                is_float = 1;
                ps->p = q;
                while (ps->p < ps->end && isdigit((unsigned char)*ps->p))
                    ps->p++;
            }
        }
        t->len = (int)(ps->p - s);
        if (t->len >= (int)sizeof tmp) {
            t->kind = T_INT;
            perr(ps, t, AT_EPARSE, "number too long");
            return;
        }
        memcpy(tmp, s, (size_t)t->len);
        tmp[t->len] = 0;
        errno = 0;
        if (is_float) {
            t->kind = T_FLOAT;
            t->f = strtod(tmp, NULL);
        } else {
            t->kind = T_INT;
            t->i = strtoll(tmp, NULL, 10);
            if (errno || t->i > INT32_MAX)
                perr(ps, t, AT_EPARSE, "integer %s does not fit int32", tmp);
        }
        return;
    }
    {
        static const char *const two[] = {"<=", ">=", "==", "!=", "&&", "||"};
        t->kind = T_PUNCT;
        for (size_t i = 0; i < AT_ARRAY_LEN(two); i++) {
            if (ps->end - ps->p >= 2 && ps->p[0] == two[i][0] && ps->p[1] == two[i][1]) {
                t->len = 2;
                ps->p += 2;
                return;
            }
        }
        if (strchr("[](),:=+-*/%<>!?", *ps->p) == NULL) {
            t->len = 1;
            perr(ps, t, AT_EPARSE, "unexpected character '%c'", isprint((unsigned char)*ps->p)
                                                                      ? *ps->p : '?');
            ps->p++;
            return;
        }
        if (*ps->p == '(' || *ps->p == '[')
            ps->depth++;
        if ((*ps->p == ')' || *ps->p == ']') && ps->depth > 0)
            ps->depth--;
        t->len = 1;
        ps->p++;
    }
}

static int is_punct(const token *t, const char *s)
{
    return t->kind == T_PUNCT && (size_t)t->len == strlen(s) && memcmp(t->p, s, strlen(s)) == 0;
}

static int is_ident(const token *t, const char *s)
{
    return t->kind == T_IDENT && (size_t)t->len == strlen(s) && memcmp(t->p, s, strlen(s)) == 0;
}

static const char *tok_text(const token *t, char *buf, size_t size)
{
    if (t->kind == T_EOF)
        return "end of input";
    if (t->kind == T_NL)
        return "end of line";
    snprintf(buf, size, "'%.*s'", t->len > 40 ? 40 : t->len, t->p);
    return buf;
}

static int expect(parser *ps, const char *s)
{
    char tb[64];
    if (ps->err)
        return 0;
    if (!is_punct(&ps->tok, s)) {
        perr(ps, &ps->tok, AT_EPARSE, "expected '%s', found %s", s,
             tok_text(&ps->tok, tb, sizeof tb));
        return 0;
    }
    next(ps);
    return 1;
}

static const char *const reserved[] = {
    "input", "const", "sum", "max", "min", "prod", "select", "exp", "log", "sqrt", "tanh",
    "erf", "abs", "sigmoid", "true", "false", "inf", "nan", "float32", "int32", "bool",
    "float16", "int8", "float64", "int64", "f32", "i32", "f16", "i8", "f64", "i64"};

static int is_reserved(const token *t)
{
    for (size_t i = 0; i < AT_ARRAY_LEN(reserved); i++)
        if (is_ident(t, reserved[i]))
            return 1;
    return 0;
}

static int ident_copy(parser *ps, const token *t, char *out, size_t size, const char *what)
{
    char tb[64];
    if (ps->err)
        return 0;
    if (t->kind != T_IDENT) {
        perr(ps, t, AT_EPARSE, "expected %s, found %s", what, tok_text(t, tb, sizeof tb));
        return 0;
    }
    if ((size_t)t->len >= size) {
        perr(ps, t, AT_EPARSE, "%s is too long (%d characters, at most %d)", what, t->len,
             (int)size - 1);
        return 0;
    }
    if (is_reserved(t)) {
        perr(ps, t, AT_EPARSE, "'%.*s' is a reserved word and cannot name %s", t->len, t->p,
             what);
        return 0;
    }
    memcpy(out, t->p, (size_t)t->len);
    out[t->len] = 0;
    return 1;
}

/* ---- expressions ---- */

static ss_expr *parse_expr(parser *ps);

static ss_expr *oom(parser *ps)
{
    perr(ps, &ps->tok, AT_ENOMEM, "out of memory");
    return NULL;
}

/* Literals adapt to the other operand's type: an integer literal next to a float becomes
** a float.  Anything else must match exactly (checked by ss__check_op later). */
static void unify(parser *ps, ss_expr **a, ss_expr **b)
{
    at_arena *ar = &ps->dag->arena;
    if ((*a)->dtype == (*b)->dtype)
        return;
    if ((*a)->kind == SS_E_IMM_INT && at_dtype_is_float((at_dtype)(*b)->dtype))
        *a = ss_expr_imm_float(ar, (at_dtype)(*b)->dtype, (double)(*a)->v.i);
    else if ((*b)->kind == SS_E_IMM_INT && at_dtype_is_float((at_dtype)(*a)->dtype))
        *b = ss_expr_imm_float(ar, (at_dtype)(*a)->dtype, (double)(*b)->v.i);
    else if ((*a)->kind == SS_E_IMM_FLOAT && at_dtype_is_float((at_dtype)(*b)->dtype))
        *a = ss_expr_imm_float(ar, (at_dtype)(*b)->dtype, (*a)->v.f);
    else if ((*b)->kind == SS_E_IMM_FLOAT && at_dtype_is_float((at_dtype)(*a)->dtype))
        *b = ss_expr_imm_float(ar, (at_dtype)(*a)->dtype, (*b)->v.f);
    if (*a == NULL || *b == NULL)
        oom(ps);
}

static ss_expr *binary(parser *ps, const token *at, ss_expr_kind k, ss_expr *a, ss_expr *b)
{
    ss_expr *e;
    if (a == NULL || b == NULL)
        return NULL;
    unify(ps, &a, &b);
    if (ps->err)
        return NULL;
    if (a->dtype != b->dtype) {
        perr(ps, at, AT_EPARSE, "operands of '%s' have types %s and %s (use a cast)",
             ss_expr_kind_name(k), at_dtype_name((at_dtype)a->dtype),
             at_dtype_name((at_dtype)b->dtype));
        return NULL;
    }
    e = ss_expr_op(&ps->dag->arena, k, a, b);
    return e ? e : oom(ps);
}

static int parse_args(parser *ps, ss_expr **args, int max, const char *close)
{
    int n = 0;
    char tb[64];
    if (is_punct(&ps->tok, close)) {
        next(ps);
        return 0;
    }
    for (;;) {
        token at = ps->tok;
        ss_expr *e = parse_expr(ps);
        if (e == NULL)
            return -1;
        if (n == max) {
            perr(ps, &at, AT_EPARSE, "too many arguments (at most %d)", max);
            return -1;
        }
        args[n++] = e;
        if (is_punct(&ps->tok, ",")) {
            next(ps);
            continue;
        }
        if (is_punct(&ps->tok, close)) {
            next(ps);
            return n;
        }
        perr(ps, &ps->tok, AT_EPARSE, "expected ',' or '%s', found %s", close,
             tok_text(&ps->tok, tb, sizeof tb));
        return -1;
    }
}

static const struct {
    const char *name;
    ss_expr_kind kind;
    int arity;
} funcs[] = {
    {"exp", SS_E_EXP, 1},   {"log", SS_E_LOG, 1},         {"sqrt", SS_E_SQRT, 1},
    {"tanh", SS_E_TANH, 1}, {"erf", SS_E_ERF, 1},         {"abs", SS_E_ABS, 1},
    {"sigmoid", SS_E_SIGMOID, 1}, {"min", SS_E_MIN, 2},   {"max", SS_E_MAX, 2},
    {"select", SS_E_SELECT, 3},
};

static ss_expr *parse_primary(parser *ps)
{
    token t = ps->tok;
    at_arena *ar = &ps->dag->arena;
    char tb[64];
    if (ps->err)
        return NULL;
    if (t.kind == T_INT) {
        next(ps);
        ss_expr *e = ss_expr_imm_int(ar, AT_DT_I32, t.i);
        return e ? e : oom(ps);
    }
    if (t.kind == T_FLOAT) {
        next(ps);
        ss_expr *e = ss_expr_imm_float(ar, AT_DT_F32, t.f);
        return e ? e : oom(ps);
    }
    if (is_punct(&t, "(")) {
        next(ps);
        ss_expr *e = parse_expr(ps);
        if (e == NULL || !expect(ps, ")"))
            return NULL;
        return e;
    }
    if (t.kind != T_IDENT) {
        perr(ps, &t, AT_EPARSE, "expected an expression, found %s", tok_text(&t, tb, sizeof tb));
        return NULL;
    }
    next(ps);
    if (is_ident(&t, "true") || is_ident(&t, "false")) {
        ss_expr *e = ss_expr_imm_int(ar, AT_DT_BOOL, is_ident(&t, "true"));
        return e ? e : oom(ps);
    }
    if (is_ident(&t, "inf")) {
        ss_expr *e = ss_expr_imm_float(ar, AT_DT_F32, INFINITY);
        return e ? e : oom(ps);
    }
    if (is_punct(&ps->tok, "(")) {
        ss_expr *args[3];
        at_dtype dt;
        int n;
        next(ps);
        if (at_dtype_parse(t.p, (size_t)t.len, &dt) == AT_OK) {
            n = parse_args(ps, args, 1, ")");
            if (n < 0)
                return NULL;
            if (n != 1) {
                perr(ps, &t, AT_EPARSE, "a cast takes one argument");
                return NULL;
            }
            if (dt != AT_DT_F32 && dt != AT_DT_I32 && dt != AT_DT_BOOL) {
                perr(ps, &t, AT_EPARSE, "type %s is not supported yet (float32, int32, bool)",
                     at_dtype_name(dt));
                return NULL;
            }
            if (args[0]->kind == SS_E_IMM_INT && at_dtype_is_float(dt)) {
                ss_expr *e = ss_expr_imm_float(ar, dt, (double)args[0]->v.i);
                return e ? e : oom(ps);
            }
            ss_expr *e = ss_expr_cast(ar, dt, args[0]);
            return e ? e : oom(ps);
        }
        for (size_t f = 0; f < AT_ARRAY_LEN(funcs); f++) {
            if (!is_ident(&t, funcs[f].name))
                continue;
            n = parse_args(ps, args, 3, ")");
            if (n < 0)
                return NULL;
            if (n != funcs[f].arity) {
                perr(ps, &t, AT_EPARSE, "%s takes %d argument%s, %d given", funcs[f].name,
                     funcs[f].arity, funcs[f].arity == 1 ? "" : "s", n);
                return NULL;
            }
            if (funcs[f].kind == SS_E_SELECT) {
                ss_expr *e;
                unify(ps, &args[1], &args[2]);
                if (ps->err)
                    return NULL;
                if (args[0]->dtype != AT_DT_BOOL) {
                    perr(ps, &t, AT_EPARSE, "select's condition must be a comparison (bool)");
                    return NULL;
                }
                if (args[1]->dtype != args[2]->dtype) {
                    perr(ps, &t, AT_EPARSE, "select's arms have types %s and %s",
                         at_dtype_name((at_dtype)args[1]->dtype),
                         at_dtype_name((at_dtype)args[2]->dtype));
                    return NULL;
                }
                e = ss_expr_select(ar, args[0], args[1], args[2]);
                return e ? e : oom(ps);
            }
            if (n == 2)
                return binary(ps, &t, funcs[f].kind, args[0], args[1]);
            if (funcs[f].kind != SS_E_ABS && !at_dtype_is_float((at_dtype)args[0]->dtype)) {
                if (args[0]->kind == SS_E_IMM_INT)
                    args[0] = ss_expr_imm_float(ar, AT_DT_F32, (double)args[0]->v.i);
                else {
                    perr(ps, &t, AT_EPARSE, "%s needs a float argument (use float32(...))",
                         funcs[f].name);
                    return NULL;
                }
            }
            ss_expr *e = ss_expr_un(ar, funcs[f].kind, args[0]);
            return e ? e : oom(ps);
        }
        perr(ps, &t, AT_EPARSE, "unknown function '%.*s'", t.len, t.p);
        return NULL;
    }
    if (is_punct(&ps->tok, "[")) {
        char name[128];
        ss_expr *idx[SS_MAX_DIMS];
        int op, n;
        if (t.len >= (int)sizeof name) {
            perr(ps, &t, AT_EPARSE, "name too long");
            return NULL;
        }
        memcpy(name, t.p, (size_t)t.len);
        name[t.len] = 0;
        op = ss_dag_find(ps->dag, name);
        if (op < 0) {
            perr(ps, &t, AT_EPARSE, "unknown tensor '%s' (tensors must be defined before use)",
                 name);
            return NULL;
        }
        next(ps);
        n = parse_args(ps, idx, SS_MAX_DIMS, "]");
        if (n < 0)
            return NULL;
        if (n != ps->dag->ops[op].n_dims) {
            perr(ps, &t, AT_EPARSE, "%s has %d dimension%s, %d ind%s given", name,
                 ps->dag->ops[op].n_dims, ps->dag->ops[op].n_dims == 1 ? "" : "s", n,
                 n == 1 ? "ex" : "ices");
            return NULL;
        }
        for (int i = 0; i < n; i++) {
            if (idx[i]->dtype != AT_DT_I32) {
                perr(ps, &t, AT_EPARSE, "index %d of %s is %s, not int32", i, name,
                     at_dtype_name((at_dtype)idx[i]->dtype));
                return NULL;
            }
        }
        ss_expr *e = ss_expr_load(ar, ps->dag->ops[op].dtype, op, n, idx);
        return e ? e : oom(ps);
    }
    for (int a = 0; a < ps->n_axes + ps->n_raxes; a++) {
        if (strlen(ps->axis_names[a]) == (size_t)t.len &&
            memcmp(ps->axis_names[a], t.p, (size_t)t.len) == 0) {
            ss_expr *e = ss_expr_axis(ar, a);
            return e ? e : oom(ps);
        }
    }
    {
        char name[128];
        snprintf(name, sizeof name, "%.*s", t.len, t.p);
        if (ss_dag_find(ps->dag, name) >= 0) {
            perr(ps, &t, AT_EPARSE, "tensor '%s' needs indices: %s[...]", name, name);
            return NULL;
        }
    }
    perr(ps, &t, AT_EPARSE, "unknown name '%.*s' (not an axis of this tensor)", t.len, t.p);
    return NULL;
}

static ss_expr *parse_unary_at(parser *ps);

/* Recursion the input controls is bounded: parentheses, unary operators and '?:' may nest
** SS_MAX_NESTING deep (each level is a few C frames). */
static int enter(parser *ps)
{
    if (++ps->nest > SS_MAX_NESTING) {
        perr(ps, &ps->tok, AT_EPARSE, "expression nested more than %d deep (parentheses, "
             "unary '-' or '!', '?:'): split it into stages", SS_MAX_NESTING);
        ps->nest--;
        return 0;
    }
    return 1;
}

static ss_expr *parse_unary(parser *ps)
{
    ss_expr *e;
    int op = is_punct(&ps->tok, "-") || is_punct(&ps->tok, "!");
    if (!op)
        return parse_unary_at(ps); /* a primary: parentheses count in parse_expr */
    if (!enter(ps))
        return NULL;
    e = parse_unary_at(ps);
    ps->nest--;
    return e;
}

static ss_expr *parse_unary_at(parser *ps)
{
    token t = ps->tok;
    if (is_punct(&t, "-")) {
        ss_expr *a;
        next(ps);
        a = parse_unary(ps);
        if (a == NULL)
            return NULL;
        if (a->kind == SS_E_IMM_INT) {
            ss_expr *e = ss_expr_imm_int(&ps->dag->arena, (at_dtype)a->dtype, -a->v.i);
            return e ? e : oom(ps);
        }
        if (a->kind == SS_E_IMM_FLOAT) {
            ss_expr *e = ss_expr_imm_float(&ps->dag->arena, (at_dtype)a->dtype, -a->v.f);
            return e ? e : oom(ps);
        }
        if (a->dtype == AT_DT_BOOL) {
            perr(ps, &t, AT_EPARSE, "'-' on a bool");
            return NULL;
        }
        ss_expr *e = ss_expr_un(&ps->dag->arena, SS_E_NEG, a);
        return e ? e : oom(ps);
    }
    if (is_punct(&t, "!")) {
        ss_expr *a;
        next(ps);
        a = parse_unary(ps);
        if (a == NULL)
            return NULL;
        if (a->dtype != AT_DT_BOOL) {
            perr(ps, &t, AT_EPARSE, "'!' needs a bool operand (a comparison)");
            return NULL;
        }
        ss_expr *e = ss_expr_un(&ps->dag->arena, SS_E_NOT, a);
        return e ? e : oom(ps);
    }
    return parse_primary(ps);
}

static ss_expr *parse_mul(parser *ps)
{
    ss_expr *a = parse_unary(ps);
    while (a && (is_punct(&ps->tok, "*") || is_punct(&ps->tok, "/") || is_punct(&ps->tok, "%"))) {
        token t = ps->tok;
        ss_expr_kind k = is_punct(&t, "*") ? SS_E_MUL : is_punct(&t, "/") ? SS_E_DIV : SS_E_MOD;
        next(ps);
        a = binary(ps, &t, k, a, parse_unary(ps));
        if (a && k == SS_E_MOD && !(a->dtype == AT_DT_I32)) {
            perr(ps, &t, AT_EPARSE, "'%%' needs int32 operands");
            return NULL;
        }
        if (a && a->dtype == AT_DT_BOOL) {
            perr(ps, &t, AT_EPARSE, "arithmetic on bool");
            return NULL;
        }
    }
    return a;
}

static ss_expr *parse_add(parser *ps)
{
    ss_expr *a = parse_mul(ps);
    while (a && (is_punct(&ps->tok, "+") || is_punct(&ps->tok, "-"))) {
        token t = ps->tok;
        next(ps);
        a = binary(ps, &t, is_punct(&t, "+") ? SS_E_ADD : SS_E_SUB, a, parse_mul(ps));
        if (a && a->dtype == AT_DT_BOOL) {
            perr(ps, &t, AT_EPARSE, "arithmetic on bool");
            return NULL;
        }
    }
    return a;
}

static ss_expr *parse_cmp(parser *ps)
{
    static const struct {
        const char *s;
        ss_expr_kind k;
    } ops[] = {{"<", SS_E_LT}, {"<=", SS_E_LE}, {">", SS_E_GT},
               {">=", SS_E_GE}, {"==", SS_E_EQ}, {"!=", SS_E_NE}};
    ss_expr *a = parse_add(ps);
    for (size_t i = 0; a && i < AT_ARRAY_LEN(ops); i++) {
        if (is_punct(&ps->tok, ops[i].s)) {
            token t = ps->tok;
            next(ps);
            a = binary(ps, &t, ops[i].k, a, parse_add(ps));
            for (size_t j = 0; a && j < AT_ARRAY_LEN(ops); j++)
                if (is_punct(&ps->tok, ops[j].s)) {
                    perr(ps, &ps->tok, AT_EPARSE,
                         "comparisons do not chain: write (a < b) && (b < c)");
                    return NULL;
                }
            return a;
        }
    }
    return a;
}

static ss_expr *parse_logic(parser *ps, int is_or)
{
    ss_expr *a = is_or ? parse_logic(ps, 0) : parse_cmp(ps);
    while (a && is_punct(&ps->tok, is_or ? "||" : "&&")) {
        token t = ps->tok;
        ss_expr *b;
        next(ps);
        b = is_or ? parse_logic(ps, 0) : parse_cmp(ps);
        if (b == NULL)
            return NULL;
        if (a->dtype != AT_DT_BOOL || b->dtype != AT_DT_BOOL) {
            perr(ps, &t, AT_EPARSE, "'%s' needs bool operands (comparisons)",
                 is_or ? "||" : "&&");
            return NULL;
        }
        a = ss_expr_op(&ps->dag->arena, is_or ? SS_E_OR : SS_E_AND, a, b);
        if (a == NULL)
            return oom(ps);
    }
    return a;
}

static ss_expr *parse_expr_at(parser *ps);

static ss_expr *parse_expr(parser *ps)
{
    ss_expr *e;
    if (!enter(ps))
        return NULL;
    e = parse_expr_at(ps);
    ps->nest--;
    return e;
}

static ss_expr *parse_expr_at(parser *ps)
{
    ss_expr *c = parse_logic(ps, 1), *a, *b;
    token t = ps->tok;
    if (c == NULL || !is_punct(&t, "?"))
        return c;
    next(ps);
    if (c->dtype != AT_DT_BOOL) {
        perr(ps, &t, AT_EPARSE, "the condition before '?' must be a comparison (bool)");
        return NULL;
    }
    a = parse_expr(ps);
    if (a == NULL || !expect(ps, ":"))
        return NULL;
    b = parse_expr(ps);
    if (b == NULL)
        return NULL;
    unify(ps, &a, &b);
    if (ps->err)
        return NULL;
    if (a->dtype != b->dtype) {
        perr(ps, &t, AT_EPARSE, "the arms of '?:' have types %s and %s",
             at_dtype_name((at_dtype)a->dtype), at_dtype_name((at_dtype)b->dtype));
        return NULL;
    }
    a = ss_expr_select(&ps->dag->arena, c, a, b);
    return a ? a : oom(ps);
}

/* ---- statements ---- */

/* "name:extent, ..." up to 'close'; appends spatial axes, or reduce axes when
** ps->in_reduce. */
static int parse_axis_list(parser *ps, const char *close)
{
    char tb[64];
    if (is_punct(&ps->tok, close)) {
        next(ps);
        return 1;
    }
    for (;;) {
        token nt = ps->tok;
        int i = ps->n_axes + ps->n_raxes;
        if (i == SS_MAX_AXES || (!ps->in_reduce && i == SS_MAX_DIMS)) {
            perr(ps, &nt, AT_EPARSE, "too many axes (at most %d, %d spatial)", SS_MAX_AXES,
                 SS_MAX_DIMS);
            return 0;
        }
        if (!ident_copy(ps, &nt, ps->axis_names[i], sizeof ps->axis_names[i], "an axis"))
            return 0;
        for (int j = 0; j < i; j++)
            if (strcmp(ps->axis_names[j], ps->axis_names[i]) == 0) {
                perr(ps, &nt, AT_EPARSE, "axis '%s' appears twice", ps->axis_names[i]);
                return 0;
            }
        if (ss_dag_find(ps->dag, ps->axis_names[i]) >= 0) {
            perr(ps, &nt, AT_EPARSE, "axis '%s' has the name of a tensor", ps->axis_names[i]);
            return 0;
        }
        next(ps);
        if (!expect(ps, ":"))
            return 0;
        if (ps->tok.kind != T_INT || ps->tok.i <= 0) {
            perr(ps, &ps->tok, AT_EPARSE, "expected a positive extent for axis '%s', found %s",
                 ps->axis_names[i], tok_text(&ps->tok, tb, sizeof tb));
            return 0;
        }
        ps->axes[i].name = ps->axis_names[i];
        ps->axes[i].extent = ps->tok.i;
        next(ps);
        if (ps->in_reduce)
            ps->n_raxes++;
        else
            ps->n_axes++;
        if (is_punct(&ps->tok, ",")) {
            next(ps);
            continue;
        }
        if (is_punct(&ps->tok, close)) {
            next(ps);
            return 1;
        }
        perr(ps, &ps->tok, AT_EPARSE, "expected ',' or '%s', found %s", close,
             tok_text(&ps->tok, tb, sizeof tb));
        return 0;
    }
}

static void end_of_statement(parser *ps)
{
    char tb[64];
    if (ps->err)
        return;
    if (ps->tok.kind != T_NL && ps->tok.kind != T_EOF) {
        perr(ps, &ps->tok, AT_EPARSE, "expected end of line, found %s",
             tok_text(&ps->tok, tb, sizeof tb));
        return;
    }
    if (ps->tok.kind == T_NL)
        next(ps);
}

static void parse_placeholder(parser *ps, int is_const)
{
    char name[128], tb[64];
    int64_t shape[SS_MAX_DIMS];
    int n = 0;
    token nt;
    at_dtype dt;
    next(ps); /* input / const */
    nt = ps->tok;
    if (!ident_copy(ps, &nt, name, sizeof name, "a tensor"))
        return;
    if (ss_dag_find(ps->dag, name) >= 0) {
        perr(ps, &nt, AT_EPARSE, "tensor '%s' is defined twice", name);
        return;
    }
    next(ps);
    if (!expect(ps, "["))
        return;
    if (!is_punct(&ps->tok, "]")) {
        for (;;) {
            if (ps->tok.kind != T_INT || ps->tok.i <= 0) {
                perr(ps, &ps->tok, AT_EPARSE, "expected a positive extent, found %s",
                     tok_text(&ps->tok, tb, sizeof tb));
                return;
            }
            if (n == SS_MAX_DIMS) {
                perr(ps, &ps->tok, AT_EPARSE, "too many dimensions (at most %d)", SS_MAX_DIMS);
                return;
            }
            shape[n++] = ps->tok.i;
            next(ps);
            if (is_punct(&ps->tok, ","))
                next(ps);
            else
                break;
        }
    }
    if (!expect(ps, "]"))
        return;
    if (ps->tok.kind != T_IDENT || at_dtype_parse(ps->tok.p, (size_t)ps->tok.len, &dt)) {
        perr(ps, &ps->tok, AT_EPARSE, "expected an element type (float32, int32), found %s",
             tok_text(&ps->tok, tb, sizeof tb));
        return;
    }
    if (dt != AT_DT_F32 && dt != AT_DT_I32) {
        perr(ps, &ps->tok, AT_EPARSE, "type %s is not supported yet (float32, int32)",
             at_dtype_name(dt));
        return;
    }
    next(ps);
    if (ss_dag_placeholder(ps->dag, name, dt, n, shape, is_const) < 0)
        perr(ps, &nt, ps->dag->err, "%s", ps->dag->errmsg);
    else if (ps->dag->n_ops <= (int)AT_ARRAY_LEN(ps->decl_line))
        ps->decl_line[ps->dag->n_ops - 1] = nt.line;
    end_of_statement(ps);
}

static void parse_compute(parser *ps)
{
    static const struct {
        const char *name;
        ss_reduce red;
    } reds[] = {{"sum", SS_RED_SUM}, {"max", SS_RED_MAX}, {"min", SS_RED_MIN},
                {"prod", SS_RED_PROD}};
    char name[128], msg[512];
    token nt = ps->tok, rt;
    ss_reduce red = SS_RED_NONE;
    ss_expr *body;
    int op;
    if (!ident_copy(ps, &nt, name, sizeof name, "a tensor"))
        return;
    if (ss_dag_find(ps->dag, name) >= 0) {
        perr(ps, &nt, AT_EPARSE, "tensor '%s' is defined twice", name);
        return;
    }
    next(ps);
    ps->n_axes = ps->n_raxes = 0;
    ps->in_reduce = 0;
    if (!expect(ps, "[") || !parse_axis_list(ps, "]") || !expect(ps, "="))
        return;
    rt = ps->tok;
    for (size_t r = 0; r < AT_ARRAY_LEN(reds); r++) {
        if (is_ident(&rt, reds[r].name)) {
            /* 'max[' starts a reduction, 'max(' is the binary function */
            const char *q = rt.p + rt.len;
            while (q < ps->end && (*q == ' ' || *q == '\t'))
                q++;
            if (q < ps->end && *q == '[')
                red = reds[r].red;
        }
    }
    if (red != SS_RED_NONE) {
        next(ps);
        ps->in_reduce = 1;
        if (!expect(ps, "[") || !parse_axis_list(ps, "]"))
            return;
        ps->in_reduce = 0;
        if (ps->n_raxes == 0) {
            perr(ps, &rt, AT_EPARSE, "a reduction needs at least one reduce axis");
            return;
        }
        if (!expect(ps, "("))
            return;
        body = parse_expr(ps);
        if (body == NULL || !expect(ps, ")"))
            return;
    } else {
        body = parse_expr(ps);
        if (body == NULL)
            return;
    }
    if (ps->err)
        return;
    {
        /* a long chain (a sum of many terms) nests as deep as it is long: everything that
        ** walks expressions recursively later (checks, simplification, lowering) stays
        ** bounded */
        int d = ss_expr_depth(body, SS_MAX_EXPR_DEPTH + 1);
        if (d < 0) {
            oom(ps);
            return;
        }
        if (d > SS_MAX_EXPR_DEPTH) {
            perr(ps, &nt, AT_EPARSE, "the expression of '%s' is more than %d operations deep "
                 "(a chain of more than %d terms?): split it into stages", name,
                 SS_MAX_EXPR_DEPTH, SS_MAX_EXPR_DEPTH);
            return;
        }
    }
    end_of_statement(ps);
    if (ps->err)
        return;
    op = ss_dag_compute(ps->dag, name, ps->n_axes, ps->axes, ps->n_raxes,
                        ps->axes + ps->n_axes, red, body);
    if (op < 0) {
        perr(ps, &nt, ps->dag->err, "%s", ps->dag->errmsg);
        return;
    }
    if (op < (int)AT_ARRAY_LEN(ps->decl_line))
        ps->decl_line[op] = nt.line;
    {
        at_err e = ss__check_op(ps->dag, op, msg, sizeof msg);
        if (e != AT_OK)
            perr(ps, &nt, e, "%s", msg);
    }
}

at_err ss_dag_parse(const char *text, size_t n, ss_dag **out, char *errmsg, size_t errmsg_size)
{
    parser *ps;
    at_err err;
    *out = NULL;
    if (errmsg && errmsg_size)
        errmsg[0] = 0;
    ps = at_calloc(1, sizeof *ps);
    if (ps == NULL)
        return ss__fail(errmsg, errmsg_size, AT_ENOMEM, "out of memory");
    ps->src = ps->p = ps->line_start = text;
    ps->end = text + n;
    ps->line = 1;
    ps->errmsg = errmsg;
    ps->errmsg_size = errmsg_size;
    ps->dag = ss_dag_new();
    if (ps->dag == NULL) {
        at_free(ps);
        return ss__fail(errmsg, errmsg_size, AT_ENOMEM, "out of memory");
    }
    for (const char *q = text; q < text + n; q++)
        if (*q == 0) {
            token t = {T_EOF, q, 0, 1, 1, 0, 0};
            for (const char *r = text; r < q; r++)
                if (*r == '\n')
                    t.line++;
            perr(ps, &t, AT_EPARSE, "NUL byte in the text");
            break;
        }
    if (!ps->err)
        next(ps);
    while (!ps->err && ps->tok.kind != T_EOF) {
        if (ps->tok.kind == T_NL)
            next(ps);
        else if (is_ident(&ps->tok, "input") || is_ident(&ps->tok, "const"))
            parse_placeholder(ps, is_ident(&ps->tok, "const"));
        else
            parse_compute(ps);
        if (ps->dag->n_ops > 1024)
            perr(ps, &ps->tok, AT_EPARSE, "too many tensors (at most 1024)");
    }
    if (!ps->err) {
        err = ss_dag_finish(ps->dag);
        if (err) {
            /* name the line of the tensor the message starts with, when there is one */
            int line = 0;
            for (int i = 0; i < ps->dag->n_ops; i++) {
                size_t len = strlen(ps->dag->ops[i].name);
                const char *m = ps->dag->errmsg;
                if ((strncmp(m, ps->dag->ops[i].name, len) == 0 && m[len] == ':') ||
                    (strncmp(m, "input ", 6) == 0 && strncmp(m + 6, ps->dag->ops[i].name, len) == 0 &&
                     m[6 + len] == ' '))
                    line = ps->decl_line[i];
            }
            if (line)
                ss__fail(errmsg, errmsg_size, err, "%d:1: %s", line, ps->dag->errmsg);
            else
                ss__fail(errmsg, errmsg_size, err, "%s", ps->dag->errmsg);
            ps->err = err;
        }
    }
    err = ps->err;
    if (err)
        ss_dag_unref(ps->dag);
    else
        *out = ps->dag;
    at_free(ps);
    return err;
}
