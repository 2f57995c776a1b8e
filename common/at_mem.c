/* common/at_mem.c -- the one allocation hook, arenas, buffers and growable arrays.
**
** The test limit: 'alloc_left' counts allocations still allowed; SIZE_MAX means no
** limit.  'live' counts blocks handed out and not yet freed (only through at_malloc,
** at_calloc, at_realloc of NULL, at_strdup), so a failure path can be checked for
** leaks.  Both are plain atomics so threaded code stays well-defined. */
#include "common.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Atomic size_t alloc_left = SIZE_MAX;
static _Atomic long live;

static int alloc_allowed(void)
{
    size_t left = atomic_load_explicit(&alloc_left, memory_order_relaxed);
    if (left == SIZE_MAX)
        return 1;
    for (;;) {
        if (left == 0)
            return 0;
        if (atomic_compare_exchange_weak(&alloc_left, &left, left - 1))
            return 1;
        if (left == SIZE_MAX)
            return 1;
    }
}

void at_test_alloc_limit(size_t n_allowed)
{
    atomic_store(&alloc_left, n_allowed);
}

long at_test_live_allocs(void)
{
    return atomic_load(&live);
}

void *at_malloc(size_t n)
{
    void *p;
    if (!alloc_allowed())
        return NULL;
    p = malloc(n ? n : 1);
    if (p)
        atomic_fetch_add_explicit(&live, 1, memory_order_relaxed);
    return p;
}

void *at_calloc(size_t n, size_t size)
{
    void *p;
    if (!alloc_allowed())
        return NULL;
    p = calloc(n ? n : 1, size ? size : 1);
    if (p)
        atomic_fetch_add_explicit(&live, 1, memory_order_relaxed);
    return p;
}

void *at_realloc(void *p, size_t n)
{
    void *q;
    if (p == NULL)
        return at_malloc(n);
    if (!alloc_allowed())
        return NULL;
    q = realloc(p, n ? n : 1);
    return q;
}

void at_free(void *p)
{
    if (p == NULL)
        return;
    atomic_fetch_sub_explicit(&live, 1, memory_order_relaxed);
    free(p);
}

char *at_strndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *d = at_malloc(len + 1);
    if (d) {
        memcpy(d, s, len);
        d[len] = 0;
    }
    return d;
}

char *at_strdup(const char *s)
{
    return at_strndup(s, strlen(s));
}

at_err at_vec__grow(void **parr, int *pn, int *pcap, size_t elem_size)
{
    void *p;
    int cap;
    if (*pn < *pcap)
        return AT_OK;
    cap = *pcap < 8 ? 8 : *pcap * 2;
    p = at_realloc(*parr, (size_t)cap * elem_size);
    if (p == NULL)
        return AT_ENOMEM;
    *parr = p;
    *pcap = cap;
    return AT_OK;
}

/* ---- arena ---- */

struct at_arena_chunk {
    at_arena_chunk *next;
    size_t size, used;
    _Alignas(16) unsigned char mem[];
};

void at_arena_init(at_arena *a, size_t chunk_bytes)
{
    a->head = NULL;
    a->chunk_bytes = chunk_bytes ? chunk_bytes : 16384;
    a->used_bytes = 0;
}

void at_arena_fini(at_arena *a)
{
    at_arena_chunk *c = a->head, *next;
    for (; c; c = next) {
        next = c->next;
        at_free(c);
    }
    a->head = NULL;
    a->used_bytes = 0;
}

void at_arena_reset(at_arena *a)
{
    at_arena_chunk *c, *next;
    if (a->head == NULL)
        return;
    /* keep the oldest chunk: it is the one of the default size */
    for (c = a->head; c->next; c = next) {
        next = c->next;
        at_free(c);
    }
    a->head = c;
    c->used = 0;
    a->used_bytes = 0;
}

void *at_arena_alloc(at_arena *a, size_t n)
{
    at_arena_chunk *c = a->head;
    void *p;
    n = (n + 15) & ~(size_t)15;
    if (n == 0)
        n = 16;
    if (c == NULL || c->size - c->used < n) {
        size_t size = n > a->chunk_bytes ? n : a->chunk_bytes;
        at_arena_chunk *nc = at_malloc(sizeof *nc + size);
        if (nc == NULL)
            return NULL;
        nc->size = size;
        nc->used = 0;
        if (c && n > a->chunk_bytes && c->size - c->used >= 256) {
            /* a big one-off block: put it behind the current chunk so the current
            ** chunk keeps serving small requests */
            nc->next = c->next;
            c->next = nc;
            nc->used = n;
            a->used_bytes += n;
            memset(nc->mem, 0, n);
            return nc->mem;
        }
        nc->next = c;
        a->head = c = nc;
    }
    p = c->mem + c->used;
    c->used += n;
    a->used_bytes += n;
    memset(p, 0, n);
    return p;
}

char *at_arena_strndup(at_arena *a, const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *d = at_arena_alloc(a, len + 1);
    if (d)
        memcpy(d, s, len);
    return d;
}

char *at_arena_strdup(at_arena *a, const char *s)
{
    return at_arena_strndup(a, s, strlen(s));
}

/* ---- buffer ---- */

void at_buf_init(at_buf *b)
{
    b->data = NULL;
    b->len = b->cap = 0;
    b->err = AT_OK;
}

void at_buf_fini(at_buf *b)
{
    at_free(b->data);
    at_buf_init(b);
}

void at_buf_reset(at_buf *b)
{
    b->len = 0;
    b->err = AT_OK;
    if (b->data)
        b->data[0] = 0;
}

static int buf_reserve(at_buf *b, size_t extra)
{
    size_t need, cap;
    char *p;
    if (b->err)
        return 0;
    need = b->len + extra + 1;
    if (need <= b->cap)
        return 1;
    cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap *= 2;
    p = at_realloc(b->data, cap);
    if (p == NULL) {
        b->err = AT_ENOMEM;
        return 0;
    }
    b->data = p;
    b->cap = cap;
    return 1;
}

void at_buf_put(at_buf *b, const void *p, size_t n)
{
    if (!buf_reserve(b, n))
        return;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
}

void at_buf_puts(at_buf *b, const char *s)
{
    at_buf_put(b, s, strlen(s));
}

void at_buf_putc(at_buf *b, char c)
{
    at_buf_put(b, &c, 1);
}

void at_buf_vprintf(at_buf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    int n;
    char small[256];
    if (b->err)
        return;
    va_copy(ap2, ap);
    n = vsnprintf(small, sizeof small, fmt, ap2);
    va_end(ap2);
    if (n < 0)
        return;
    if ((size_t)n < sizeof small) {
        at_buf_put(b, small, (size_t)n);
        return;
    }
    if (!buf_reserve(b, (size_t)n))
        return;
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
}

void at_buf_printf(at_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    at_buf_vprintf(b, fmt, ap);
    va_end(ap);
}

void at_buf_json_str(at_buf *b, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    at_buf_putc(b, '"');
    for (; *p; p++) {
        switch (*p) {
        case '"': at_buf_puts(b, "\\\""); break;
        case '\\': at_buf_puts(b, "\\\\"); break;
        case '\n': at_buf_puts(b, "\\n"); break;
        case '\r': at_buf_puts(b, "\\r"); break;
        case '\t': at_buf_puts(b, "\\t"); break;
        default:
            if (*p < 0x20)
                at_buf_printf(b, "\\u%04x", *p);
            else
                at_buf_putc(b, (char)*p);
        }
    }
    at_buf_putc(b, '"');
}

void at_buf_json_num(at_buf *b, double v)
{
    char tmp[40];
    int prec;
    if (v != v || v > 1.7976931348623157e308 || v < -1.7976931348623157e308) {
        at_buf_puts(b, "null"); /* JSON has no NaN or infinity */
        return;
    }
    if (v == (double)(int64_t)v && v > -9.2e18 && v < 9.2e18) {
        at_buf_printf(b, "%lld", (long long)v);
        return;
    }
    for (prec = 15; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, v);
        if (strtod(tmp, NULL) == v)
            break;
    }
    at_buf_puts(b, tmp);
}

char *at_buf_take(at_buf *b)
{
    char *p;
    if (b->err) {
        at_buf_fini(b);
        return NULL;
    }
    if (b->data == NULL && !buf_reserve(b, 0))
        return NULL;
    if (b->len == 0)
        b->data[0] = 0;
    p = b->data;
    at_buf_init(b);
    return p;
}
