/* tests/records/test_io.c -- JSONL export and import (byte-exact round trip, malformed
** lines, conflicts, running out of memory) and merging stores (exact deduplication,
** order independence). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "rec_test.h"

static char dir[64];
static int n_files;

static int setup(void **unused)
{
    (void)unused;
    rt_mkdtemp(dir);
    return 0;
}

static int teardown(void **unused)
{
    (void)unused;
    rt_rmdir(dir);
    return 0;
}

static rec_store *open_new(void)
{
    char path[PATH_MAX], name[32], err[512];
    rec_store *st;
    snprintf(name, sizeof name, "s%d.db", n_files++);
    rt_path(path, dir, name);
    assert_int_equal(rec_store_open(path, REC_OPEN_CREATE, &st, err, sizeof err), AT_OK);
    return st;
}

static int64_t count_records(rec_store *st)
{
    int64_t n = -1;
    assert_int_equal(rec_store_count(st, &n, NULL, NULL, NULL), AT_OK);
    return n;
}

/* Export 'st' (filtered by 'f') and return the text (at_free). */
static char *export_text(rec_store *st, const rec_filter *f, int64_t *n_lines)
{
    char path[PATH_MAX], name[32], err[256], *text;
    size_t n;
    FILE *out;
    snprintf(name, sizeof name, "e%d.jsonl", n_files++);
    rt_path(path, dir, name);
    out = fopen(path, "w");
    assert_non_null(out);
    assert_int_equal(rec_export_jsonl(st, f, out, n_lines), AT_OK);
    fclose(out);
    assert_int_equal(at_file_read(path, &text, &n, err, sizeof err), AT_OK);
    unlink(path);
    return text;
}

/* Import 'text' as a file named "in.jsonl"; returns what rec_import_jsonl returned. */
static at_err import_text(rec_store *st, const char *text, rec_put_stats *stats)
{
    char path[PATH_MAX];
    FILE *in;
    at_err err;
    rt_path(path, dir, "in.jsonl");
    rt_write_file(path, text);
    in = fopen(path, "r");
    assert_non_null(in);
    err = rec_import_jsonl(st, "in.jsonl", in, NULL, stats);
    fclose(in);
    return err;
}

static void put(rec_store *st, int64_t task, const char *prefix, long i, const rec_device *d,
                double seconds, int status)
{
    rt_result x;
    rt_result_init(&x, task, prefix, i, d, seconds, status);
    assert_int_equal(rec_put(st, &x.r, 1, NULL), AT_OK);
}

/* A store with everything the format has to carry: several targets, device keys and
** fingerprints, failures, records with and without trial and run, text that needs
** escaping, and numbers that are not round in binary. */
static rec_store *rich_store(void)
{
    rec_store *st = open_new();
    int64_t run, t1 = rt_task(st, 1, "llvm -mtriple=x86_64-linux-gnu -mcpu=znver4", "box");
    int64_t t2 = rt_task(st, 2, "cuda -arch=sm_90", "h200");
    int64_t t3 = rt_task(st, 1, "llvm -mtriple=aarch64-linux-gnu", "pixel\"7\"");
    rec_device odd = {"aarch64", "Cortex-A76 \xe2\x9c\x93 \\ \"quoted\"", 8, "5.10\t157", ""};
    rt_result x;
    assert_int_equal(rec_run_begin(st, "tuner --trials 3 'x y'", "0.1", &run, NULL), AT_OK);
    assert_int_equal(rec_tx_begin(st), AT_OK);
    for (int i = 0; i < 40; i++) {
        rt_result_init(&x, i % 3 == 0 ? t1 : i % 3 == 1 ? t2 : t3, "rich", i,
                       i % 3 == 0 ? &rt_dev_x86 : i % 3 == 1 ? &rt_dev_h200 : &odd,
                       0.1 * (i + 1) / 3.0e3, i % 7 == 3 ? 1 + i % 9 : 0);
        x.r.run_id = i % 2 ? run : 0;
        if (i % 5 == 0)
            x.r.trial = -1;
        if (i % 4 == 1)
            x.r.n_costs = 1;
        x.r.measured_at = 1.8e9 + i / 7.0;
        x.r.stored_at = 1.8e9 + i / 3.0;
        if (i == 4) {
            x.r.error_text = "line 1\nline 2\ttab \\ \"q\" \x01";
            snprintf(x.state, sizeof x.state, "{\"v\":1,\"steps\":[],\"n\":\"\\u00e9\\n\"}");
        }
        assert_int_equal(rec_put(st, &x.r, 1, NULL), AT_OK);
    }
    assert_int_equal(rec_tx_commit(st), AT_OK);
    return st;
}

static void test_export_import_export_is_byte_exact(void **unused)
{
    rec_store *a = rich_store(), *b = open_new();
    rec_put_stats s = {0, 0, 0, 0};
    int64_t n1, n2;
    char *first, *second, *third;
    (void)unused;
    first = export_text(a, NULL, &n1);
    assert_int_equal(n1, 40);
    assert_int_equal(import_text(b, first, &s), AT_OK);
    assert_int_equal(s.n_new, 40);
    second = export_text(b, NULL, &n2);
    assert_int_equal(n2, 40);
    assert_string_equal(first, second);
    /* importing again changes nothing: every job is there */
    assert_int_equal(import_text(b, second, &s), AT_OK);
    assert_int_equal(s.n_same_job, 40);
    third = export_text(b, NULL, NULL);
    assert_string_equal(first, third);

    /* each line is one JSON object, the keys in the documented order */
    {
        int lines = 0;
        for (char *p = first; *p; lines++) {
            char *nl = strchr(p, '\n');
            at_arena ar;
            at_json *j;
            assert_non_null(nl);
            at_arena_init(&ar, 0);
            assert_int_equal(at_json_parse(&ar, p, (size_t)(nl - p), &j, NULL, 0), AT_OK);
            assert_int_equal(j->type, AT_JSON_OBJ);
            assert_string_equal(j->keys[0], "v");
            assert_string_equal(j->keys[1], "job");
            assert_string_equal(j->keys[j->n - 1], "stored_at");
            at_arena_fini(&ar);
            assert_true(strncmp(p, "{\"v\":1,\"job\":\"rich-", 19) == 0);
            p = nl + 1;
        }
        assert_int_equal(lines, 40);
    }
    at_free(first);
    at_free(second);
    at_free(third);
    rec_store_close(a);
    rec_store_close(b);
}

static void test_export_filters(void **unused)
{
    rec_store *a = rich_store();
    char key[REC_KEY_LEN + 1], *text;
    rec_filter f;
    int64_t n;
    (void)unused;
    rt_key(2, key);
    memset(&f, 0, sizeof f);
    f.workload_key = key;
    text = export_text(a, &f, &n);
    assert_int_equal(n, 13); /* i % 3 == 1 for i < 40 */
    assert_null(strstr(text, "box"));
    at_free(text);
    f.workload_key = NULL;
    f.device_key = "pixel\"7\"";
    text = export_text(a, &f, &n);
    assert_int_equal(n, 13);
    at_free(text);
    rec_store_close(a);
}

/* A and B share records 400..599 (the same jobs); each has 400 of its own. */
static void test_merge_overlapping_stores(void **unused)
{
    rec_store *a = open_new(), *b = open_new(), *c = open_new(), *d = open_new();
    rec_put_stats s = {0, 0, 0, 0};
    char *ec, *ed;
    (void)unused;
    assert_int_equal(rec_tx_begin(a), AT_OK);
    assert_int_equal(rec_tx_begin(b), AT_OK);
    for (int i = 0; i < 1000; i++) {
        int64_t ta = rt_task(a, i % 10, "llvm", "box");
        int64_t tb = rt_task(b, i % 10, "llvm", "box");
        if (i < 600)
            put(a, ta, "m", i, i % 2 ? &rt_dev_x86 : &rt_dev_x86b, 1e-3 + i * 1e-6, i % 50 == 7);
        if (i >= 400)
            put(b, tb, "m", i, i % 2 ? &rt_dev_x86 : &rt_dev_x86b, 1e-3 + i * 1e-6, i % 50 == 7);
    }
    assert_int_equal(rec_tx_commit(a), AT_OK);
    assert_int_equal(rec_tx_commit(b), AT_OK);
    assert_int_equal(rec_merge(c, a, &s), AT_OK);
    assert_int_equal(rec_merge(c, b, &s), AT_OK);
    assert_int_equal(count_records(c), 1000);
    assert_int_equal(s.n_new, 1000);
    assert_int_equal(s.n_same_job, 200);
    assert_int_equal(s.n_kept + s.n_replaced, 0);
    /* merging again adds nothing */
    memset(&s, 0, sizeof s);
    assert_int_equal(rec_merge(c, b, &s), AT_OK);
    assert_int_equal(s.n_same_job, 600);
    assert_int_equal(count_records(c), 1000);
    /* the other order gives the same store */
    assert_int_equal(rec_merge(d, b, NULL), AT_OK);
    assert_int_equal(rec_merge(d, a, NULL), AT_OK);
    ec = export_text(c, NULL, NULL);
    ed = export_text(d, NULL, NULL);
    assert_string_equal(ec, ed);
    at_free(ec);
    at_free(ed);
    rec_store_close(a);
    rec_store_close(b);
    rec_store_close(c);
    rec_store_close(d);
}

/* The buckets a model was tuned for (schema 4): put keeps what is there, get sorts, merge
** carries them into another store, bad arguments are refused. */
static void test_buckets_put_get_merge(void **unused)
{
    static const char sig[] = "0123456789abcdef0123456789abcdef";
    static const int64_t v1[3] = {128, 32, 64}, v2[2] = {64, 256};
    rec_store *a = open_new(), *b = open_new();
    int64_t got[8];
    int n;
    (void)unused;
    assert_int_equal(rec_buckets_put(a, sig, "seq", v1, 3, "bert.onnx"), AT_OK);
    assert_int_equal(rec_buckets_put(a, sig, "seq", v2, 2, "bert.onnx"), AT_OK);
    assert_int_equal(rec_buckets_get(a, sig, "seq", got, 8, &n), AT_OK);
    assert_int_equal(n, 4);
    assert_true(got[0] == 32 && got[1] == 64 && got[2] == 128 && got[3] == 256);
    assert_int_equal(rec_buckets_get(a, sig, "batch", got, 8, &n), AT_OK);
    assert_int_equal(n, 0);
    assert_int_equal(rec_buckets_get(a, sig, "seq", got, 2, &n), AT_OK);
    assert_int_equal(n, 4); /* all counted, two written */
    assert_int_equal(rec_buckets_put(a, "short", "seq", v1, 3, ""), AT_EINVAL);
    assert_int_equal(rec_buckets_put(a, sig, "", v1, 3, ""), AT_EINVAL);
    assert_int_equal(rec_buckets_put(a, sig, "seq", (int64_t[]){0}, 1, ""), AT_EINVAL);
    assert_int_equal(rec_merge(b, a, NULL), AT_OK);
    assert_int_equal(rec_buckets_get(b, sig, "seq", got, 8, &n), AT_OK);
    assert_int_equal(n, 4);
    assert_true(got[0] == 32 && got[3] == 256);
    rec_store_close(a);
    rec_store_close(b);
}

/* The same state measured by two stores under different jobs: one row survives, the
** better one, whichever store is merged first. */
static void test_merge_dedupes_task_state_device(void **unused)
{
    rec_store *a = open_new(), *b = open_new(), *ab = open_new(), *ba = open_new();
    int64_t ta = rt_task(a, 1, "llvm", "box"), tb = rt_task(b, 1, "llvm", "box");
    rec_put_stats s = {0, 0, 0, 0};
    char *e1, *e2;
    (void)unused;
    for (int i = 0; i < 20; i++) {
        /* the same states (i) under different jobs: A has 0..14 (i % 5 == 0 failed),
        ** B has 0..19, 18 and 19 on another device; B is faster on even i, A on odd i */
        if (i < 15)
            put(a, ta, "a", i, &rt_dev_x86, i % 2 ? 1e-3 : 2e-3, i % 5 == 0 ? 6 : 0);
        put(b, tb, "b", i, i >= 18 ? &rt_dev_x86b : &rt_dev_x86, i % 2 ? 3e-3 : 1e-3, 0);
    }
    assert_int_equal(rec_merge(ab, a, NULL), AT_OK);
    assert_int_equal(rec_merge(ab, b, &s), AT_OK);
    assert_int_equal(rec_merge(ba, b, NULL), AT_OK);
    assert_int_equal(rec_merge(ba, a, NULL), AT_OK);
    /* 18 states on x86 + 2 on the other device */
    assert_int_equal(count_records(ab), 20);
    assert_int_equal(count_records(ba), 20);
    e1 = export_text(ab, NULL, NULL);
    e2 = export_text(ba, NULL, NULL);
    assert_string_equal(e1, e2);
    /* even i: b wins (faster); odd i: a wins unless it failed (i % 5 == 0) or lacks it */
    for (int i = 0; i < 20; i++) {
        char want[32];
        snprintf(want, sizeof want, "\"job\":\"%s-%d\"",
                 i % 2 == 0 || i % 5 == 0 || i >= 15 ? "b" : "a", i);
        if (strstr(e1, want) == NULL) {
            fprintf(stderr, "missing %s\n", want);
            fail();
        }
    }
    assert_int_equal(s.n_new, 5);
    assert_int_equal(s.n_replaced, 9); /* even i < 15 (faster or A failed), and i = 5 */
    assert_int_equal(s.n_kept, 6);     /* odd i < 15 that A measured */
    at_free(e1);
    at_free(e2);
    rec_store_close(a);
    rec_store_close(b);
    rec_store_close(ab);
    rec_store_close(ba);
}

/* Replace the value of the first member "key" in 'line' by 'value' (into out).  Values
** here are strings, numbers or flat arrays. */
static void edit_value(char *out, size_t n, const char *line, const char *key,
                       const char *value)
{
    char pat[64];
    const char *v, *end;
    snprintf(pat, sizeof pat, "\"%s\":", key);
    v = strstr(line, pat);
    assert_non_null(v);
    v += strlen(pat);
    if (*v == '"') {
        for (end = v + 1; *end != '"'; end++)
            if (*end == '\\')
                end++;
        end++;
    } else if (*v == '[') {
        end = strchr(v, ']') + 1;
    } else {
        end = v + strcspn(v, ",}");
    }
    snprintf(out, n, "%.*s%s%s", (int)(v - line), line, value, end);
}

/* Replace the first 'from' in 'line' by 'to' (into out). */
static void edit(char *out, size_t n, const char *line, const char *from, const char *to)
{
    const char *p = strstr(line, from);
    assert_non_null(p);
    snprintf(out, n, "%.*s%s%s", (int)(p - line), line, to, p + strlen(from));
}

static void test_import_malformed_lines(void **unused)
{
    rec_store *st = rich_store(), *one = open_new();
    char *all, *good, *nl, bad[8192], fresh[8192], text[20000];
    int64_t t;
    struct {
        const char *from, *to; /* edit of a good line; from NULL: 'to' is the line; from
                               ** "=key": 'to' is the new value of member "key" */
        at_err err;
        const char *msg;
    } cases[] = {
        {NULL, "{\"v\":1,\"job\":", AT_EPARSE, "in.jsonl:2:14: value expected"},
        {NULL, "[1, 2]", AT_EPARSE, "in.jsonl:2:1: a record must be a JSON object"},
        {NULL, "{\"job\":\"x\"}", AT_EPARSE, "in.jsonl:2:1: missing field \"v\""},
        {"{\"v\":1,", "{\"v\":2,", AT_EVERSION, "in.jsonl:2:6: format version 2 is newer"},
        {"\"state\":", "\"colour\":\"red\",\"state\":", AT_EPARSE, "unknown field \"colour\""},
        {",\"state\":\"", ",\"stat\":\"", AT_EPARSE, "unknown field \"stat\""},
        {"=costs", "\"fast\"", AT_EPARSE, "\"costs\" must be a non-empty array"},
        {"=costs", "[]", AT_EPARSE, "\"costs\" must be a non-empty array"},
        {"=costs", "[0.001,\"x\"]", AT_EPARSE, "a cost must be"},
        {"=trial", "-3", AT_EPARSE, "\"trial\" must be an integer"},
        {"=trial", "1.5", AT_EPARSE, "\"trial\" must be an integer"},
        {"=run", "\"\"", AT_EPARSE, "\"run\" must be null"},
        {"=flops", "-1", AT_EPARSE, "\"flops\" must be >= 0"},
        {"=state", "\"\"", AT_EPARSE, "\"state\" must not be empty"},
        {"=v", "0", AT_EPARSE, "format version must be 1"},
        {"\"costs\":[", "\"costs\":[-1,", AT_EPARSE, "a cost must be"},
        {"\"workload_key\":\"", "\"workload_key\":\"XY", AT_EPARSE, "lower-case hex"},
        {"\"fingerprint\":\"", "\"fingerprint\":\"0", AT_EPARSE, "does not match the device"},
        {"=mean", "7", AT_EPARSE, "\"mean\" 7 does not match the costs"},
        {"=median", "1e-300", AT_EPARSE, "\"median\" 1e-300 does not match"},
        {"\"n_cores\":96", "\"n_cores\":0", AT_EPARSE, "\"n_cores\" must be an integer"},
        {"\"error_code\":0", "\"error_code\":\"ok\"", AT_EPARSE, "\"error_code\" must be"},
        {"=job", "3", AT_EPARSE, "\"job\" must be a string"},
        {"\"arch\":\"x86_64\",", "", AT_EPARSE, "missing field \"arch\""},
        {"=dag", "\"\"", AT_EPARSE, "must not be empty"},
        {"\"stored_at\":", "\"stored_at\":-", AT_EPARSE, "in.jsonl:2:"},
    };
    (void)unused;
    /* a good line: the first record of the x86 task, which ran on 96 cores */
    {
        char key[REC_KEY_LEN + 1];
        rec_filter f;
        memset(&f, 0, sizeof f);
        rt_key(1, key);
        f.workload_key = key;
        f.device_key = "box";
        all = export_text(st, &f, &t);
        assert_true(t > 1);
    }
    /* line 1 of every import: another record, renamed so that it is new to the store */
    nl = strchr(all, '\n');
    *nl = 0;
    good = all;
    *strchr(nl + 1, '\n') = 0;
    edit(fresh, sizeof fresh, nl + 1, "\"job\":\"rich-", "\"job\":\"fresh-");
    {
        char *before = export_text(st, NULL, NULL);
        for (size_t i = 0; i < AT_ARRAY_LEN(cases); i++) {
            rec_put_stats s = {0, 0, 0, 0};
            char *after;
            at_err err;
            if (cases[i].from && cases[i].from[0] == '=')
                edit_value(bad, sizeof bad, good, cases[i].from + 1, cases[i].to);
            else if (cases[i].from)
                edit(bad, sizeof bad, good, cases[i].from, cases[i].to);
            else
                snprintf(bad, sizeof bad, "%s", cases[i].to);
            snprintf(text, sizeof text, "%s\n%s\n", fresh, bad);
            err = import_text(st, text, &s);
            if (err != cases[i].err || strstr(rec_store_errmsg(st), cases[i].msg) == NULL ||
                strncmp(rec_store_errmsg(st), "in.jsonl:2:", 11) != 0) {
                fprintf(stderr, "case %zu: %s: '%s'\n", i, at_errname(err),
                        rec_store_errmsg(st));
                fail();
            }
            assert_int_equal(s.n_new + s.n_same_job, 0);
            after = export_text(st, NULL, NULL);
            assert_string_equal(before, after);
            at_free(after);
        }
        at_free(before);
    }
    /* the good line alone imports */
    snprintf(text, sizeof text, "\n%s\n\n", good);
    assert_int_equal(import_text(one, text, NULL), AT_OK);
    assert_int_equal(count_records(one), 1);
    at_free(all);
    rec_store_close(st);
    rec_store_close(one);
}

static void test_import_conflicting_task(void **unused)
{
    rec_store *a = open_new(), *b = open_new();
    int64_t ta = rt_task(a, 1, "llvm", "box");
    char *text, *line2, bad[8192];
    (void)unused;
    put(a, ta, "c", 1, &rt_dev_x86, 1e-3, 0);
    text = export_text(a, NULL, NULL);
    assert_int_equal(import_text(b, text, NULL), AT_OK);
    /* the same task with another DAG text */
    edit(bad, sizeof bad, text, "\"dag\":\"input A", "\"dag\":\"input Z");
    line2 = strstr(bad, "\"job\":\"c-1\"");
    memcpy(line2, "\"job\":\"c-2\"", 11);
    assert_int_equal(import_text(b, bad, NULL), AT_EEXIST);
    assert_non_null(strstr(rec_store_errmsg(b), "in.jsonl:1: task"));
    assert_non_null(strstr(rec_store_errmsg(b), "another DAG"));
    assert_int_equal(count_records(b), 1);
    at_free(text);
    rec_store_close(a);
    rec_store_close(b);
}

/* Every allocation failure during an import gives AT_ENOMEM, stores nothing and leaks
** nothing. */
static void test_import_survives_oom(void **unused)
{
    rec_store *a = rich_store(), *b = open_new();
    char *text = export_text(a, NULL, NULL);
    size_t limit;
    (void)unused;
    /* keep three lines */
    {
        char *p = text;
        for (int i = 0; i < 3; i++)
            p = strchr(p, '\n') + 1;
        *p = 0;
    }
    for (limit = 0;; limit++) {
        long live0 = at_test_live_allocs();
        at_err err;
        char path[PATH_MAX];
        FILE *in;
        rt_path(path, dir, "oom.jsonl");
        rt_write_file(path, text);
        in = fopen(path, "r");
        at_test_alloc_limit(limit);
        err = rec_import_jsonl(b, "oom.jsonl", in, NULL, NULL);
        at_test_alloc_limit(SIZE_MAX);
        fclose(in);
        assert_int_equal(at_test_live_allocs(), live0);
        if (err == AT_OK)
            break;
        if (err != AT_ENOMEM) {
            fprintf(stderr, "limit %zu: %s: %s\n", limit, at_errname(err), rec_store_errmsg(b));
            fail();
        }
        assert_int_equal(count_records(b), 0);
        assert_true(limit < 2000);
    }
    assert_true(limit > 3);
    assert_int_equal(count_records(b), 3);
    at_free(text);
    rec_store_close(a);
    rec_store_close(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_export_import_export_is_byte_exact),
        cmocka_unit_test(test_export_filters),
        cmocka_unit_test(test_merge_overlapping_stores),
        cmocka_unit_test(test_buckets_put_get_merge),
        cmocka_unit_test(test_merge_dedupes_task_state_device),
        cmocka_unit_test(test_import_malformed_lines),
        cmocka_unit_test(test_import_conflicting_task),
        cmocka_unit_test(test_import_survives_oom),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
