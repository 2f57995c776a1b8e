/* common/at_json.c -- a strict RFC 8259 JSON parser into arena-allocated nodes.
**
** Used for schedule states, records import lines and configuration: every input is
** outside data, so every error returns AT_EPARSE with "line:col: problem" and nothing
** is asserted.  Depth is bounded so hostile input cannot exhaust the stack. */
#include "common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 256

typedef struct parser {
    at_arena *arena;
    const char *p, *end, *line_start;
    int line;
    char *errmsg;
    size_t errmsg_size;
    at_err err;
} parser;

static void fail(parser *ps, const char *what)
{
    if (ps->err)
        return;
    ps->err = AT_EPARSE;
    if (ps->errmsg && ps->errmsg_size)
        snprintf(ps->errmsg, ps->errmsg_size, "%d:%d: %s", ps->line,
                 (int)(ps->p - ps->line_start) + 1, what);
}

static void skip_ws(parser *ps)
{
    while (ps->p < ps->end) {
        char c = *ps->p;
        if (c == '\n') {
            ps->line++;
            ps->p++;
            ps->line_start = ps->p;
        } else if (c == ' ' || c == '\t' || c == '\r') {
            ps->p++;
        } else {
            break;
        }
    }
}

static at_json *new_node(parser *ps, at_json_type t)
{
    at_json *j = at_arena_alloc(ps->arena, sizeof *j);
    if (j == NULL) {
        ps->err = AT_ENOMEM;
        return NULL;
    }
    j->type = t;
    j->line = ps->line;
    j->col = (int)(ps->p - ps->line_start) + 1;
    return j;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int read_hex4(parser *ps, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h;
        if (ps->p >= ps->end || (h = hexval(*ps->p)) < 0) {
            fail(ps, "bad \\u escape");
            return 0;
        }
        v = v * 16 + (unsigned)h;
        ps->p++;
    }
    *out = v;
    return 1;
}

static void put_utf8(at_buf *b, unsigned cp)
{
    char u[4];
    if (cp < 0x80) {
        u[0] = (char)cp;
        at_buf_put(b, u, 1);
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        at_buf_put(b, u, 2);
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        at_buf_put(b, u, 3);
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        at_buf_put(b, u, 4);
    }
}

/* Parse a string literal at ps->p (which is at the opening quote). */
static const char *parse_string(parser *ps, int *len_out)
{
    at_buf b;
    char *s;
    at_buf_init(&b);
    ps->p++; /* opening quote */
    for (;;) {
        const char *run = ps->p;
        while (ps->p < ps->end && *ps->p != '"' && *ps->p != '\\' &&
               (unsigned char)*ps->p >= 0x20)
            ps->p++;
        at_buf_put(&b, run, (size_t)(ps->p - run));
        if (ps->p >= ps->end) {
            fail(ps, "unterminated string");
            goto out;
        }
        if (*ps->p == '"') {
            ps->p++;
            break;
        }
        if ((unsigned char)*ps->p < 0x20) {
            fail(ps, "control character in string");
            goto out;
        }
        ps->p++; /* backslash */
        if (ps->p >= ps->end) {
            fail(ps, "unterminated string");
            goto out;
        }
        switch (*ps->p++) {
        case '"': at_buf_putc(&b, '"'); break;
        case '\\': at_buf_putc(&b, '\\'); break;
        case '/': at_buf_putc(&b, '/'); break;
        case 'b': at_buf_putc(&b, '\b'); break;
        case 'f': at_buf_putc(&b, '\f'); break;
        case 'n': at_buf_putc(&b, '\n'); break;
        case 'r': at_buf_putc(&b, '\r'); break;
        case 't': at_buf_putc(&b, '\t'); break;
        case 'u': {
            unsigned cp, lo;
            if (!read_hex4(ps, &cp))
                goto out;
            if (cp >= 0xD800 && cp < 0xDC00) {
                if (ps->end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u') {
                    fail(ps, "lone surrogate in \\u escape");
                    goto out;
                }
                ps->p += 2;
                if (!read_hex4(ps, &lo))
                    goto out;
                if (lo < 0xDC00 || lo >= 0xE000) {
                    fail(ps, "bad surrogate pair");
                    goto out;
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp < 0xE000) {
                fail(ps, "lone surrogate in \\u escape");
                goto out;
            }
            put_utf8(&b, cp);
            break;
        }
        default:
            ps->p--;
            fail(ps, "bad escape in string");
            goto out;
        }
    }
out:
    if (ps->err || b.err) {
        if (!ps->err)
            ps->err = AT_ENOMEM;
        at_buf_fini(&b);
        return NULL;
    }
    s = at_arena_alloc(ps->arena, b.len + 1);
    if (s == NULL) {
        ps->err = AT_ENOMEM;
        at_buf_fini(&b);
        return NULL;
    }
    if (b.len)
        memcpy(s, b.data, b.len);
    *len_out = (int)b.len;
    at_buf_fini(&b);
    return s;
}

static at_json *parse_value(parser *ps, int depth);

static at_json *parse_number(parser *ps)
{
    const char *start = ps->p;
    char tmp[64];
    int is_int = 1;
    at_json *j = new_node(ps, AT_JSON_NUM);
    if (j == NULL)
        return NULL;
    if (ps->p < ps->end && *ps->p == '-')
        ps->p++;
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') {
        fail(ps, "bad number");
        return NULL;
    }
    if (*ps->p == '0')
        ps->p++;
    else
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            ps->p++;
    if (ps->p < ps->end && *ps->p == '.') {
        is_int = 0;
        ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') {
            fail(ps, "bad number: digit expected after '.'");
            return NULL;
        }
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            ps->p++;
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        is_int = 0;
        ps->p++;
        if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-'))
            ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') {
            fail(ps, "bad number: digit expected in exponent");
            return NULL;
        }
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            ps->p++;
    }
    if ((size_t)(ps->p - start) >= sizeof tmp) {
        fail(ps, "number too long");
        return NULL;
    }
    memcpy(tmp, start, (size_t)(ps->p - start));
    tmp[ps->p - start] = 0;
    j->num = strtod(tmp, NULL);
    if (is_int) {
        errno = 0;
        long long v = strtoll(tmp, NULL, 10);
        if (errno == 0) {
            j->is_int = 1;
            j->i = v;
        }
    }
    return j;
}

static int grow(parser *ps, void **arr, int n, int *cap, size_t elem)
{
    void *p;
    if (n < *cap)
        return 1;
    *cap = *cap ? *cap * 2 : 4;
    p = at_arena_alloc(ps->arena, (size_t)*cap * elem);
    if (p == NULL) {
        ps->err = AT_ENOMEM;
        return 0;
    }
    if (n)
        memcpy(p, *arr, (size_t)n * elem);
    *arr = p;
    return 1;
}

static at_json *parse_container(parser *ps, int depth, int is_obj)
{
    at_json *j = new_node(ps, is_obj ? AT_JSON_OBJ : AT_JSON_ARR);
    int cap = 0, kcap = 0;
    char close = is_obj ? '}' : ']';
    if (j == NULL)
        return NULL;
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        return j;
    }
    for (;;) {
        const char *key = NULL;
        at_json *v;
        skip_ws(ps);
        if (is_obj) {
            int klen;
            if (ps->p >= ps->end || *ps->p != '"') {
                fail(ps, "object key (a string) expected");
                return NULL;
            }
            key = parse_string(ps, &klen);
            if (key == NULL)
                return NULL;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') {
                fail(ps, "':' expected after object key");
                return NULL;
            }
            ps->p++;
        }
        v = parse_value(ps, depth + 1);
        if (v == NULL)
            return NULL;
        if (!grow(ps, (void **)&j->items, j->n, &cap, sizeof *j->items))
            return NULL;
        if (is_obj && !grow(ps, (void **)&j->keys, j->n, &kcap, sizeof *j->keys))
            return NULL;
        j->items[j->n] = v;
        if (is_obj)
            j->keys[j->n] = key;
        j->n++;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == close) {
            ps->p++;
            return j;
        }
        fail(ps, is_obj ? "',' or '}' expected in object" : "',' or ']' expected in array");
        return NULL;
    }
}

static at_json *parse_value(parser *ps, int depth)
{
    at_json *j;
    if (depth > MAX_DEPTH) {
        fail(ps, "nesting too deep");
        return NULL;
    }
    skip_ws(ps);
    if (ps->p >= ps->end) {
        fail(ps, "value expected, found end of input");
        return NULL;
    }
    switch (*ps->p) {
    case '{': return parse_container(ps, depth, 1);
    case '[': return parse_container(ps, depth, 0);
    case '"': {
        int len;
        const char *s;
        j = new_node(ps, AT_JSON_STR);
        if (j == NULL)
            return NULL;
        s = parse_string(ps, &len);
        if (s == NULL)
            return NULL;
        j->str = s;
        j->n = len;
        return j;
    }
    case 't':
    case 'f':
    case 'n': {
        static const char *const words[] = {"true", "false", "null"};
        for (int w = 0; w < 3; w++) {
            size_t len = strlen(words[w]);
            if ((size_t)(ps->end - ps->p) >= len && memcmp(ps->p, words[w], len) == 0) {
                j = new_node(ps, w == 2 ? AT_JSON_NULL : AT_JSON_BOOL);
                if (j == NULL)
                    return NULL;
                j->num = w == 0;
                j->i = w == 0;
                ps->p += len;
                return j;
            }
        }
        fail(ps, "unknown literal");
        return NULL;
    }
    default:
        if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9'))
            return parse_number(ps);
        fail(ps, "unexpected character");
        return NULL;
    }
}

at_err at_json_parse(at_arena *arena, const char *text, size_t n, at_json **out, char *errmsg,
                     size_t errmsg_size)
{
    parser ps = {arena, text, text + n, text, 1, errmsg, errmsg_size, AT_OK};
    at_json *j;
    *out = NULL;
    if (errmsg && errmsg_size)
        errmsg[0] = 0;
    j = parse_value(&ps, 0);
    if (j) {
        skip_ws(&ps);
        if (ps.p < ps.end)
            fail(&ps, "trailing characters after the JSON value");
    }
    if (ps.err) {
        if (ps.err == AT_ENOMEM && errmsg && errmsg_size)
            snprintf(errmsg, errmsg_size, "out of memory");
        return ps.err;
    }
    *out = j;
    return AT_OK;
}

const at_json *at_json_get(const at_json *obj, const char *key)
{
    if (obj == NULL || obj->type != AT_JSON_OBJ)
        return NULL;
    for (int i = 0; i < obj->n; i++)
        if (strcmp(obj->keys[i], key) == 0)
            return obj->items[i];
    return NULL;
}
