/* tests/common/test_common.c -- arena, buffer, SHA-256, RNG and JSON. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "common/common.h"

static void test_sha256_known(void **unused)
{
    char hex[65];
    (void)unused;
    at_sha256_hex("", 0, 32, hex);
    assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    at_sha256_hex("abc", 3, 32, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    /* 56 bytes: padding spills into a second block */
    at_sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56, 32, hex);
    assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

/* Every length 0..300 (block and padding edges, fed in pieces too), folded into one digest:
** the figure the project's own implementation (common/at_sha256.c, until mbed TLS) gave,
** and Python's hashlib gives.  Workload keys and stored hashes depend on it staying. */
static void test_sha256_matches_the_old_implementation(void **unused)
{
    uint8_t buf[300], d[32];
    char hex[65];
    at_sha256 all, s;
    (void)unused;
    for (int i = 0; i < 300; i++)
        buf[i] = (uint8_t)(i * 7 + 3);
    at_sha256_init(&all);
    for (size_t n = 0; n <= 300; n++) {
        at_sha256_init(&s);
        for (size_t off = 0; off < n; off += 37) /* in 37-byte pieces */
            at_sha256_update(&s, buf + off, n - off < 37 ? n - off : 37);
        at_sha256_final(&s, d);
        at_sha256_update(&all, d, 32);
    }
    at_sha256_final(&all, d);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
    assert_string_equal(hex, "7d917fbd2cf49ddff9ad0a8706bba32d204e92e71d2e369c5a03d6af29278c9f");
}

static int cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

/* at_hash64: equal bytes hash equal wherever they lie in memory; any one flipped bit, a byte
** more or less, changes the hash; 100,000 short keys neither collide nor crowd the low bits
** that hash tables index with. */
static void test_hash64(void **unused)
{
    enum { N = 1 << 16, KEYS = 100000, BUCKETS = 1 << 16 };
    uint8_t *a = malloc(N + 8), *b = malloc(N + 8);
    uint64_t *hs = malloc(KEYS * sizeof *hs), h0;
    uint16_t *cnt = calloc(BUCKETS, sizeof *cnt);
    at_rng rng;
    int maxc = 0;
    (void)unused;
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(hs);
    assert_non_null(cnt);
    at_rng_seed(&rng, 7);
    for (int i = 0; i < N + 8; i++)
        a[i] = (uint8_t)at_rng_u64(&rng);
    for (int off = 0; off < 8; off++) { /* every alignment, every tail length */
        memcpy(b + off, a, N);
        assert_true(at_hash64(b + off, N) == at_hash64(a, N));
        for (size_t len = 0; len < 70; len++)
            assert_true(at_hash64(b + off, len) == at_hash64(a, len));
    }
    h0 = at_hash64(a, N);
    for (int k = 0; k < 2000; k++) {
        size_t bit = (size_t)(at_rng_u64(&rng) % (uint64_t)(N * 8));
        a[bit / 8] ^= (uint8_t)(1u << bit % 8);
        assert_true(at_hash64(a, N) != h0);
        a[bit / 8] ^= (uint8_t)(1u << bit % 8);
    }
    assert_true(at_hash64(a, N) == h0);
    for (size_t len = 1; len < 70; len++)
        assert_true(at_hash64(a, len) != at_hash64(a, len - 1));
    memset(b, 0, 64); /* zeros of different lengths differ too */
    for (size_t len = 1; len < 64; len++)
        assert_true(at_hash64(b, len) != at_hash64(b, len - 1));
    for (int i = 0; i < KEYS; i++) {
        char key[32];
        int n = snprintf(key, sizeof key, "job-%d", i);
        hs[i] = at_hash64(key, (size_t)n);
        if (++cnt[hs[i] & (BUCKETS - 1)] > maxc)
            maxc = cnt[hs[i] & (BUCKETS - 1)];
    }
    /* 100,000 keys in 65,536 buckets: a uniform hash's fullest bucket holds about 9 */
    if (maxc > 14)
        fail_msg("the low bits crowd: %d keys in one of %d buckets", maxc, BUCKETS);
    qsort(hs, KEYS, sizeof *hs, cmp_u64);
    for (int i = 1; i < KEYS; i++)
        assert_true(hs[i] != hs[i - 1]);
    free(a);
    free(b);
    free(hs);
    free(cnt);
}

static void test_rng_reproducible(void **unused)
{
    at_rng a, b;
    (void)unused;
    at_rng_seed(&a, 42);
    at_rng_seed(&b, 42);
    for (int i = 0; i < 1000; i++)
        assert_true(at_rng_u64(&a) == at_rng_u64(&b));
    for (int i = 0; i < 1000; i++) {
        uint64_t v = at_rng_below(&a, 7);
        double d = at_rng_double(&a);
        assert_true(v < 7);
        assert_true(d >= 0.0 && d < 1.0);
    }
    at_rng_seed(&b, 43);
    assert_true(at_rng_u64(&a) != at_rng_u64(&b));
}

static void test_buf_and_arena(void **unused)
{
    at_buf b;
    at_arena a;
    (void)unused;
    at_buf_init(&b);
    for (int i = 0; i < 1000; i++)
        at_buf_printf(&b, "%d,", i);
    assert_int_equal(b.err, AT_OK);
    assert_true(strncmp(b.data, "0,1,2,", 6) == 0);
    at_buf_reset(&b);
    at_buf_json_str(&b, "a\"b\\c\n\x01");
    assert_string_equal(b.data, "\"a\\\"b\\\\c\\n\\u0001\"");
    at_buf_reset(&b);
    at_buf_json_num(&b, 0.1);
    at_buf_putc(&b, ' ');
    at_buf_json_num(&b, 1024);
    at_buf_putc(&b, ' ');
    at_buf_json_num(&b, 1e-300);
    assert_string_equal(b.data, "0.1 1024 1e-300");
    at_buf_fini(&b);

    at_arena_init(&a, 64);
    for (int i = 0; i < 100; i++) {
        char *p = at_arena_alloc(&a, (size_t)i * 7 + 1);
        assert_non_null(p);
        assert_true(((uintptr_t)p & 15) == 0);
        assert_int_equal(p[0], 0);
        memset(p, 1, (size_t)i * 7 + 1);
    }
    at_arena_reset(&a);
    assert_non_null(at_arena_strdup(&a, "hello"));
    at_arena_fini(&a);
}

static void test_json_parse_ok(void **unused)
{
    at_arena a;
    at_json *j;
    char err[128];
    const char *text = " {\"a\": [1, -2.5e3, true, null], \"s\": \"x\\u00e9\\ud83d\\ude00\", "
                       "\"o\": {}} ";
    (void)unused;
    at_arena_init(&a, 0);
    assert_int_equal(at_json_parse(&a, text, strlen(text), &j, err, sizeof err), AT_OK);
    assert_int_equal(j->type, AT_JSON_OBJ);
    const at_json *arr = at_json_get(j, "a");
    assert_non_null(arr);
    assert_int_equal(arr->n, 4);
    assert_true(arr->items[0]->is_int && arr->items[0]->i == 1);
    assert_true(!arr->items[1]->is_int && arr->items[1]->num == -2500.0);
    assert_int_equal(arr->items[2]->type, AT_JSON_BOOL);
    assert_int_equal(arr->items[3]->type, AT_JSON_NULL);
    assert_string_equal(at_json_get(j, "s")->str, "x\xc3\xa9\xf0\x9f\x98\x80");
    assert_int_equal(at_json_get(j, "o")->n, 0);
    assert_null(at_json_get(j, "missing"));
    at_arena_fini(&a);
}

static void test_json_parse_errors(void **unused)
{
    static const struct {
        const char *text, *msg;
    } cases[] = {
        {"", "1:1: value expected, found end of input"},
        {"[1,2", "1:5: ',' or ']' expected in array"},
        {"{\"a\" 1}", "1:6: ':' expected after object key"},
        {"[1]\n x", "2:2: trailing characters after the JSON value"},
        {"\"abc", "1:5: unterminated string"},
        {"01", "1:2: trailing characters after the JSON value"},
        {"[tru]", "1:2: unknown literal"},
        {"\"\\ud800\"", "1:8: lone surrogate in \\u escape"},
        {"{1:2}", "1:2: object key (a string) expected"},
        {"-", "1:2: bad number"},
    };
    (void)unused;
    for (size_t i = 0; i < AT_ARRAY_LEN(cases); i++) {
        at_arena a;
        at_json *j = (at_json *)1;
        char err[128];
        at_arena_init(&a, 0);
        assert_int_equal(at_json_parse(&a, cases[i].text, strlen(cases[i].text), &j, err,
                                       sizeof err),
                         AT_EPARSE);
        assert_null(j);
        assert_string_equal(err, cases[i].msg);
        at_arena_fini(&a);
    }
}

static void test_json_deep_nesting_refused(void **unused)
{
    char text[2000];
    at_arena a;
    at_json *j;
    char err[128];
    (void)unused;
    memset(text, '[', sizeof text);
    at_arena_init(&a, 0);
    assert_int_equal(at_json_parse(&a, text, sizeof text, &j, err, sizeof err), AT_EPARSE);
    assert_non_null(strstr(err, "nesting too deep"));
    at_arena_fini(&a);
}

static void test_json_survives_oom(void **unused)
{
    const char *text = "{\"steps\": [[\"SP\", 2, 0, 1024, [16, 4], 1], [\"RE\", 2, [0, 1]]]}";
    (void)unused;
    for (size_t limit = 0;; limit++) {
        at_arena a;
        at_json *j;
        long live0 = at_test_live_allocs();
        at_err err;
        at_arena_init(&a, 64);
        at_test_alloc_limit(limit);
        err = at_json_parse(&a, text, strlen(text), &j, NULL, 0);
        at_test_alloc_limit(SIZE_MAX);
        at_arena_fini(&a);
        assert_int_equal(at_test_live_allocs(), live0);
        if (err == AT_OK)
            break;
        assert_int_equal(err, AT_ENOMEM);
        assert_true(limit < 1000);
    }
}

/* Split 'line' (modified) at spaces into argv; returns argc. */
static int split_args(char *line, char **argv, int max)
{
    int n = 0;
    for (char *t = strtok(line, " "); t && n < max - 1; t = strtok(NULL, " "))
        argv[n++] = t;
    argv[n] = NULL;
    return n;
}

/* The flag parser of the three commands: forms, positional order, old spellings, errors. */
static void test_opts_parse(void **unused)
{
    const char *file = NULL, *old = NULL;
    int flag = 0, n = 7, n_pos = 0, help = 0;
    int64_t big = 0;
    double x = 0;
    const at_opt opts[] = {
        {"fleet-key", 0, AT_OPT_STR, &file, "FILE", "the key"},
        {"key", 0, AT_OPT_STR, &old, "FILE", AT_OPT_OLD("fleet-key")},
        {"json", 'j', AT_OPT_BOOL, &flag, NULL, "json"},
        {"top", 'n', AT_OPT_INT, &n, "N", "how many"},
        {"bytes", 0, AT_OPT_I64, &big, "B", "bytes"},
        {"scale", 0, AT_OPT_NUM, &x, "X", "scale"},
    };
    char line1[] = "p a --fleet-key=f1 -j b --top 3 --bytes 8589934592 --scale 0.5 -- --json";
    char *argv1[16];
    int argc1 = split_args(line1, argv1, 16);
    (void)unused;
    assert_int_equal(argc1, 13);
    assert_int_equal(at_opts_parse("p", opts, 6, argc1, argv1, &n_pos, &help), 0);
    assert_int_equal(n_pos, 3); /* a, b, and --json after "--" */
    assert_string_equal(argv1[1], "a");
    assert_string_equal(argv1[2], "b");
    assert_string_equal(argv1[3], "--json");
    assert_string_equal(file, "f1");
    assert_int_equal(flag, 1);
    assert_int_equal(n, 3);
    assert_true(big == 8589934592LL);
    assert_true(x == 0.5);
    assert_int_equal(help, 0);
    {
        char line2[] = "p --key old.key -h", *argv2[8];
        assert_int_equal(at_opts_parse("p", opts, 6, split_args(line2, argv2, 8), argv2, &n_pos,
                                       &help),
                         0);
        assert_string_equal(old, "old.key"); /* the old spelling still works */
        assert_int_equal(help, 1);
        assert_int_equal(n_pos, 0);
    }
    {
        static const char *const bad[] = {"--bogus", "--top",  "--top=-1",   "--json=1",
                                          "--top=x", "-x",     "--scale=nan", "--top=99999999999"};
        for (size_t i = 0; i < AT_ARRAY_LEN(bad); i++) {
            char line[64], *argv3[8];
            snprintf(line, sizeof line, "p %s", bad[i]);
            assert_int_equal(at_opts_parse("p", opts, 6, split_args(line, argv3, 8), argv3,
                                           &n_pos, &help),
                             AT_EXIT_USAGE);
        }
    }
    assert_int_equal(at_opt_range("p", "--threads", 0, 1, 1024), AT_EXIT_USAGE);
    assert_int_equal(at_opt_range("p", "--threads", 1024, 1, 1024), 0);
    assert_int_equal(at_opts_log_level("p", "loud"), AT_EXIT_USAGE);
    assert_int_equal(at_opts_log_level("p", NULL), 0);
}

/* at_run_parts: every part runs exactly once, part 0 in the caller's thread and the others
** in threads of their own, all done when it returns; n = 1 and n = 0 stay in the caller. */
typedef struct part_rec {
    int runs;
    pthread_t self;
    long sum;
} part_rec;

static void *run_part(void *arg)
{
    part_rec *p = arg;
    p->runs++;
    p->self = pthread_self();
    for (long i = 0; i < 100000; i++) /* some work, so that the threads overlap */
        p->sum += i % 7;
    return NULL;
}

/* at_median_sort: odd and even counts, duplicates, negative numbers and the empty array;
** the array comes back sorted. */
static void test_median_sort(void **unused)
{
    double odd[] = {5, -1, 3, 3, 9}, even[] = {4, 1, 8, 2}, one[] = {7}, none[1] = {0};
    (void)unused;
    assert_true(at_median_sort(odd, 5) == 3);
    for (int i = 1; i < 5; i++)
        assert_true(odd[i - 1] <= odd[i]);
    assert_true(at_median_sort(even, 4) == 3); /* (2 + 4) / 2 */
    assert_true(even[0] == 1 && even[3] == 8);
    assert_true(at_median_sort(one, 1) == 7);
    assert_true(at_median_sort(none, 0) == 0);
}

static void test_run_parts(void **unused)
{
    part_rec parts[AT_MAX_PARTS];
    (void)unused;
    for (int n = 0; n <= 5; n++) {
        memset(parts, 0, sizeof parts);
        at_run_parts(run_part, parts, sizeof *parts, n);
        for (int t = 0; t < AT_MAX_PARTS; t++) {
            assert_int_equal(parts[t].runs, t < n);
            if (t < n)
                assert_int_equal(parts[t].sum, 299995); /* sum of i % 7 below 100000 */
        }
        if (n >= 1)
            assert_true(pthread_equal(parts[0].self, pthread_self()));
        for (int t = 1; t < n; t++)
            assert_false(pthread_equal(parts[t].self, pthread_self()));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_known),
        cmocka_unit_test(test_sha256_matches_the_old_implementation),
        cmocka_unit_test(test_opts_parse),
        cmocka_unit_test(test_hash64),
        cmocka_unit_test(test_run_parts),
        cmocka_unit_test(test_median_sort),
        cmocka_unit_test(test_rng_reproducible),
        cmocka_unit_test(test_buf_and_arena),
        cmocka_unit_test(test_json_parse_ok),
        cmocka_unit_test(test_json_parse_errors),
        cmocka_unit_test(test_json_deep_nesting_refused),
        cmocka_unit_test(test_json_survives_oom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
