/* tests/records/test_cli.c -- the 'tuner' command as a user runs it: usage and exit
** statuses, best and history (table and JSON), export/import/merge through files, and
** 'db check' on good, stale, damaged, foreign and newer files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <sqlite3.h>

#include <cairo/cairo.h>

#include "rec_test.h"

static char dir[64];

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

/* Run the command; check its exit status and that stdout / stderr contain each phrase
** ("" to skip).  Returns stdout (at_free). */
static char *run_expect(int want_rc, const char *in, const char *want_out, const char *want_err,
                        const char *const *args)
{
    char *out = NULL, *err = NULL;
    int rc = rt_tuner(in, &out, &err, args);
    if (rc != want_rc || (want_out[0] && strstr(out, want_out) == NULL) ||
        (want_err[0] && strstr(err, want_err) == NULL)) {
        fprintf(stderr, "tuner");
        for (int i = 0; args[i]; i++)
            fprintf(stderr, " %s", args[i]);
        fprintf(stderr, "\n  exit %d (want %d)\n  stdout: %s\n  stderr: %s\n  want: '%s' / '%s'\n",
                rc, want_rc, out, err, want_out, want_err);
        fail();
    }
    at_free(err);
    return out;
}

#define EXPECT(rc, out, err, ...)                                                          \
    at_free(run_expect((rc), NULL, (out), (err), (const char *const[]){__VA_ARGS__, NULL}))
#define EXPECT_OUT(rc, out, err, ...)                                                      \
    run_expect((rc), NULL, (out), (err), (const char *const[]){__VA_ARGS__, NULL})

#define LLVM "llvm -mtriple=x86_64-linux-gnu"
#define ARM "llvm -mtriple=aarch64-linux-gnu"

/* A store: task 1 on 'box' (x86) and on 'pixel6' (A78) for ARM; task 2 on box only, with
** its best record's state stale; a few failures. */
static void make_store(const char *path)
{
    rec_store *st;
    char err[512];
    int64_t t1, t1arm, t2;
    rt_result x;
    assert_int_equal(rec_store_open(path, REC_OPEN_CREATE, &st, err, sizeof err), AT_OK);
    t1 = rt_task(st, 1, LLVM, "box");
    t1arm = rt_task(st, 1, ARM, "pixel6");
    t2 = rt_task(st, 2, LLVM, "box");
    assert_int_equal(rec_tx_begin(st), AT_OK);
    for (int i = 0; i < 20; i++) {
        rt_result_init(&x, t1, "box", i, &rt_dev_x86, 1e-3 * (1 + (i * 7) % 20), i % 9 == 4);
        assert_int_equal(rec_put(st, &x.r, 1, NULL), AT_OK);
        rt_result_init(&x, t1arm, "p6", i, &rt_dev_a78, 5e-3 * (1 + i % 4), 0);
        assert_int_equal(rec_put(st, &x.r, 1, NULL), AT_OK);
        rt_result_init(&x, t2, "t2", i, &rt_dev_x86, 2e-3 + i * 1e-4, 0);
        if (i == 0)
            strcpy(x.state, "{\"v\":1,\"stages\":\"no steps\"}");
        assert_int_equal(rec_put(st, &x.r, 1, NULL), AT_OK);
    }
    assert_int_equal(rec_tx_commit(st), AT_OK);
    rec_store_close(st);
}

static void test_usage_and_exit_statuses(void **unused)
{
    static const char *const subs[] = {"best", "history", "merge", "export", "import", "db"};
    char usage[64];
    (void)unused;
    {
        char *err = NULL;
        assert_int_equal(rt_tuner(NULL, NULL, &err, (const char *const[]){NULL}), 2);
        for (size_t i = 0; i < AT_ARRAY_LEN(subs); i++) {
            snprintf(usage, sizeof usage, "\n  %-9s ", subs[i]);
            assert_non_null(strstr(err, usage));
        }
        at_free(err);
    }
    EXPECT(0, "       tuner SUBCOMMAND [flags] [args]", "", "--help");
    EXPECT(0, "tuner " TN_VERSION, "", "--version");
    EXPECT(2, "", "tuner: 'frob' is neither a library operator", "frob");
    EXPECT(2, "", "tuner: 'best' is a subcommand: it comes first and its flags after it", "--db",
           "x.db", "best");
    EXPECT(2, "", "--log-level needs", "--log-level", "loud", "best");
    EXPECT(2, "", "tuner best: unknown flag '--bogus' (see 'tuner best --help')", "best",
           "--bogus");
    EXPECT(2, "", "tuner best: unknown flag '-x'", "best", "-x");
    EXPECT(2, "", "--top needs a value", "best", "--top");
    EXPECT(2, "", "--top needs a whole number >= 0, not 'many'", "best", "--top", "many");
    EXPECT(2, "", "--top needs a number >= 1", "best", "--top=0");
    EXPECT(2, "", "--json takes no value", "best", "--json=yes");
    EXPECT(2, "", "unexpected argument 'extra'", "best", "extra");
    EXPECT(2, "", "--fallback arch needs --device", "best", "--fallback", "arch");
    EXPECT(2, "", "--fallback takes 'arch' or 'none'", "best", "--device", "x", "--fallback",
           "mars");
    EXPECT(2, "", "tuner merge: needs OUT and at least one IN", "merge", "out.db");
    EXPECT(2, "", "unknown format 'csv'", "export", "--format", "csv");
    EXPECT(2, "", "usage: tuner db check|info", "db");
    EXPECT(2, "", "tuner db: unknown subcommand 'db frob'", "db", "frob");
    EXPECT(2, "", "tuner db check: unknown flag '--fast'", "db", "check", "--fast");
    for (size_t i = 0; i < AT_ARRAY_LEN(subs); i++) {
        snprintf(usage, sizeof usage, "usage: tuner %s", subs[i]);
        EXPECT(0, usage, "", subs[i], "--help");
        EXPECT(0, usage, "", "help", subs[i]);
    }
    EXPECT(0, "usage: tuner db check [--db FILE]", "", "db", "check", "-h");
    EXPECT(0, "usage: tuner db info", "", "db", "info", "--help");
    EXPECT(2, "", "unknown subcommand 'nope'", "help", "nope");
    EXPECT(1, "", "tuner best: /nonexistent/x.db: No such file", "best", "--db",
           "/nonexistent/x.db");
}

static void test_best_command(void **unused)
{
    char path[PATH_MAX], key1[REC_KEY_LEN + 1], key2[REC_KEY_LEN + 1], *out;
    (void)unused;
    rt_path(path, dir, "best.db");
    make_store(path);
    rt_key(1, key1);
    rt_key(2, key2);

    /* box: task 1's best is i with (i*7)%20 == 0 (i = 0), then 1e-3 * 2 (i = 3) */
    out = EXPECT_OUT(0, "device box  fingerprint", "", "best", "--db", path, "--task", key1,
                     "--device", "box", "--top", "2");
    assert_non_null(strstr(out, "task "));
    assert_non_null(strstr(out, key1));
    assert_non_null(strstr(out, "target '" LLVM "'"));
    assert_non_null(strstr(out, "AMD EPYC 9654"));
    assert_true(strstr(out, " box-0\n") && strstr(out, " box-3\n") &&
                strstr(out, " box-0\n") < strstr(out, " box-3\n"));
    /* the task was asked for by name: its ARM target, never tuned on box, gets a note
    ** naming where it was measured, and no row */
    assert_null(strstr(out, "device pixel6"));
    assert_non_null(strstr(out, "note: task "));
    assert_non_null(strstr(out, "target '" ARM "': nothing measured on box; other devices "
                                "have records: pixel6/"));
    at_free(out);

    /* task 2: its fastest record does not replay: skipped, said so, the next one shown */
    out = EXPECT_OUT(0, " t2-1\n", "", "best", "--db", path, "--task", key2);
    assert_non_null(strstr(out, "skipped: record of job t2-0"));
    assert_non_null(strstr(out, "a state is an object {\"v\":1,\"steps\":[...]}"));
    at_free(out);

    /* JSON for scripts */
    out = EXPECT_OUT(0, "{\"results\":[", "", "best", "--db", path, "--json", "--task", key1,
                     "--target", ARM);
    {
        at_arena a;
        at_json *j;
        const at_json *res, *row;
        at_arena_init(&a, 0);
        assert_int_equal(at_json_parse(&a, out, strlen(out), &j, NULL, 0), AT_OK);
        res = at_json_get(j, "results");
        assert_int_equal(res->n, 1);
        row = res->items[0];
        assert_string_equal(at_json_get(row, "job")->str, "p6-0");
        assert_string_equal(at_json_get(row, "device_key")->str, "pixel6");
        assert_string_equal(at_json_get(row, "target")->str, ARM);
        assert_string_equal(at_json_get(at_json_get(row, "device"), "model")->str, "Cortex-A78");
        assert_int_equal(at_json_get(row, "fallback")->type, AT_JSON_BOOL);
        assert_true(at_json_get(row, "fallback")->num == 0);
        assert_true(at_json_get(row, "mean")->num == 5e-3);
        assert_int_equal(at_json_get(j, "notes")->n, 0);
        at_arena_fini(&a);
    }
    at_free(out);

    /* pixel7 has nothing: exit 3 and a note; with the fallback, pixel6 marked FALLBACK */
    EXPECT(3, "note: no successful record matches on device pixel7", "", "best", "--db", path,
           "--device", "pixel7", "--target", ARM);
    out = EXPECT_OUT(3, "note: task", "", "best", "--db", path, "--device", "pixel7",
                     "--target", ARM, "--task", key1);
    assert_non_null(strstr(out, "other devices have records: pixel6/"));
    at_free(out);
    out = EXPECT_OUT(0, "FALLBACK", "", "best", "--db", path, "--device", "pixel7", "--target",
                     ARM, "--fallback", "arch", "--arch", "aarch64");
    assert_non_null(strstr(out, "device pixel6"));
    assert_non_null(strstr(out, "note: task"));
    at_free(out);
    EXPECT(3, "no task for target 'cuda'", "", "best", "--db", path, "--target", "cuda");
}

static void test_history_command(void **unused)
{
    char path[PATH_MAX], key1[REC_KEY_LEN + 1], *out;
    (void)unused;
    rt_path(path, dir, "hist.db");
    make_store(path);
    rt_key(1, key1);
    out = EXPECT_OUT(0, "new best", "", "history", "--db", path, "--task", key1, "--device",
                     "box");
    assert_non_null(strstr(out, "20 trials, 2 failed; best 1.000000 ms"));
    assert_null(strstr(out, "INSTANTIATION_ERROR")); /* only improvements without --all */
    at_free(out);
    out = EXPECT_OUT(0, "INSTANTIATION_ERROR", "", "history", "--db", path, "--task", key1,
                     "--device", "box", "--all");
    at_free(out);
    out = EXPECT_OUT(0, "{\"groups\":[", "", "history", "--db", path, "--json");
    {
        at_arena a;
        at_json *j;
        at_arena_init(&a, 0);
        assert_int_equal(at_json_parse(&a, out, strlen(out), &j, NULL, 0), AT_OK);
        assert_int_equal(at_json_get(j, "groups")->n, 3);
        at_arena_fini(&a);
    }
    at_free(out);
    EXPECT(3, "no records match", "", "history", "--db", path, "--device", "nobody");
}

/* Dark pixels (all channels below 100) in a box of an RGB24 image: text or lines there. */
static int dark_pixels(cairo_surface_t *s, int x0, int y0, int x1, int y1)
{
    const unsigned char *px = cairo_image_surface_get_data(s);
    int stride = cairo_image_surface_get_stride(s), n = 0;
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) {
            const unsigned char *p = px + y * stride + 4 * x; /* B G R x */
            n += p[0] < 100 && p[1] < 100 && p[2] < 100;
        }
    return n;
}

/* 'tuner plot' draws the curve with labelled axes (PNG read back with cairo: the curve's
** colour, text under the x axis and left of the y axis) and writes SVG with glyphs. */
static void test_plot_command(void **unused)
{
    char path[PATH_MAX], png[PATH_MAX], svg[PATH_MAX], key1[REC_KEY_LEN + 1], *out, *text;
    cairo_surface_t *s;
    int blue = 0;
    size_t n;
    (void)unused;
    rt_path(path, dir, "plot.db");
    rt_path(png, dir, "curve.png");
    rt_path(svg, dir, "curve.svg");
    make_store(path);
    rt_key(1, key1);
    EXPECT(2, "", "the store has several tasks: choose one with --task KEY", "plot", "--db", path,
           "-o", png);
    EXPECT(2, "", "the name must end in .svg or .png", "plot", "--db", path, "--task", key1,
           "-o", "curve.gif");
    EXPECT(3, "", "no records", "plot", "--db", path, "--task", key1, "--device", "nobody", "-o",
           png);
    out = EXPECT_OUT(0, "20 trials, best", "", "plot", "--db", path, "--task", key1, "--device",
                     "box", "-o", png);
    at_free(out);
    s = cairo_image_surface_create_from_png(png);
    assert_int_equal(cairo_surface_status(s), CAIRO_STATUS_SUCCESS);
    assert_int_equal(cairo_image_surface_get_width(s), 800);
    assert_int_equal(cairo_image_surface_get_height(s), 480);
    cairo_surface_flush(s);
    {
        const unsigned char *px = cairo_image_surface_get_data(s);
        int stride = cairo_image_surface_get_stride(s);
        for (int y = 0; y < 480; y++)
            for (int x = 0; x < 800; x++) {
                const unsigned char *p = px + y * stride + 4 * x;
                blue += p[0] > 180 && p[1] > 80 && p[1] < 140 && p[2] < 60; /* #1f6fd0 */
            }
    }
    assert_true(blue > 200);                                /* the curve */
    assert_true(dark_pixels(s, 200, 450, 600, 480) > 100);  /* the x axis title */
    assert_true(dark_pixels(s, 0, 100, 30, 380) > 100);     /* the y axis title */
    assert_true(dark_pixels(s, 80, 10, 700, 36) > 300);     /* the title */
    cairo_surface_destroy(s);
    out = EXPECT_OUT(0, "20 trials, best", "", "plot", "--db", path, "--task", key1, "--device",
                     "box", "-o", svg);
    at_free(out);
    {
        char err[256];
        assert_int_equal(at_file_read(svg, &text, &n, err, sizeof err), AT_OK);
        assert_non_null(strstr(text, "<svg"));
        assert_non_null(strstr(text, "width=\"800")); /* "800pt" */
        assert_non_null(strstr(text, "id=\"glyph")); /* text drawn as font glyphs */
        assert_non_null(strstr(text, "rgb(12.156863%,43.529412%,81.568627%)")); /* the curve */
        at_free(text);
    }
}

static void test_export_import_merge_commands(void **unused)
{
    char a[PATH_MAX], b[PATH_MAX], m[PATH_MAX], f1[PATH_MAX], f2[PATH_MAX], bad[PATH_MAX];
    char foreign[PATH_MAX], fresh[PATH_MAX], d1[65], d2[65], *t1, *t2, *out, msg[128];
    size_t n;
    rec_store *st;
    int64_t count;
    (void)unused;
    rt_path(a, dir, "a.db");
    rt_path(b, dir, "b.db");
    rt_path(m, dir, "m.db");
    rt_path(f1, dir, "one.jsonl");
    rt_path(f2, dir, "two.jsonl");
    rt_path(bad, dir, "bad.jsonl");
    rt_path(foreign, dir, "foreign.txt");
    rt_path(fresh, dir, "fresh.db");
    make_store(a);

    /* export -> import -> export is byte for byte the same */
    EXPECT(0, "", "tuner export: 60 records", "export", "--db", a, "-o", f1);
    EXPECT(0, "imported 60 records into", "", "import", "--db", b, f1);
    EXPECT(0, "", "", "export", "--db", b, "--output", f2, "--quiet");
    assert_int_equal(at_file_read(f1, &t1, &n, msg, sizeof msg), AT_OK);
    assert_int_equal(at_file_read(f2, &t2, &n, msg, sizeof msg), AT_OK);
    assert_string_equal(t1, t2);
    at_free(t2);
    /* to standard output, the same text; from standard input, the same import */
    out = EXPECT_OUT(0, "", "", "export", "--db", a, "-q");
    assert_string_equal(out, t1);
    at_free(out);
    out = run_expect(0, f1, "60 already there", "",
                     (const char *const[]){"import", "--db", b, "-", NULL});
    at_free(out);

    /* merge two overlapping stores: a and b hold the same 60 records */
    EXPECT(0, "merged 120 records into", "", "merge", m, a, b);
    assert_int_equal(rec_store_open(m, 0, &st, msg, sizeof msg), AT_OK);
    assert_int_equal(rec_store_count(st, &count, NULL, NULL, NULL), AT_OK);
    assert_int_equal(count, 60);
    rec_store_close(st);
    out = EXPECT_OUT(0, "", "", "export", "--db", m, "-q");
    assert_string_equal(out, t1);
    at_free(out);
    EXPECT(2, "", "is also an input", "merge", m, a, m);

    /* a foreign input: nothing is created or changed */
    rt_write_file(foreign, "name,minutes\nsoup,30\n");
    EXPECT(1, "", "not a records store", "merge", fresh, a, foreign);
    assert_false(rt_exists(fresh));
    rt_file_digest(m, d1);
    EXPECT(1, "", "not a records store", "merge", m, foreign);
    EXPECT(1, "", "not a records store", "merge", foreign, a);
    rt_file_digest(m, d2);
    assert_string_equal(d1, d2);

    /* a malformed import line: the position, and nothing imported */
    {
        char text[20000];
        char *nl = strchr(t1, '\n');
        snprintf(text, sizeof text, "%.*s\n{\"v\":1,\"job\":\"x\" \"task\":{}}\n",
                 (int)(nl - t1), t1);
        rt_write_file(bad, text);
    }
    EXPECT(1, "", "bad.jsonl:2:18: ',' or '}' expected in object (nothing was imported)", "import", "--db", fresh, bad);
    assert_false(rt_exists(fresh));
    rt_file_digest(m, d1);
    EXPECT(1, "", "(nothing was imported)", "import", "--db", m, f1, bad);
    rt_file_digest(m, d2);
    assert_string_equal(d1, d2);
    EXPECT(1, "", "not a records store", "import", "--db", foreign, f1);
    EXPECT(1, "", "missing.jsonl: No such file", "import", "--db", m, "missing.jsonl");

    /* a task whose FLOP count, workload key or DAG text is not its DAG's (issue 14, item 6):
    ** refused with the line and both values, nothing imported; before, the store took it
    ** and then refused to tune the operator ("is stored with another FLOP count") */
    {
        static const struct {
            const char *from, *to, *msg;
        } lies[] = {
            {"\"flops\":", NULL, "bad.jsonl:2: the task's FLOP count "}, /* doubled */
            {NULL, NULL, "bad.jsonl:2: workload key "}, /* one hex digit of the key changed */
            {"j:64]", "j:32]", "bad.jsonl:2: workload key "},
            {"sum[k:64]", "sum[k:64](", "bad.jsonl:2: the task's DAG text is no DAG: "},
        };
        const char *nl = strchr(t1, '\n'), *second = nl + 1, *end = strchr(second, '\n');
        for (size_t i = 0; i < AT_ARRAY_LEN(lies); i++) {
            char line[20000], text[40000], want[128] = "", *at;
            snprintf(line, sizeof line, "%.*s", (int)(end - second), second);
            if (i == 0) {
                char rest[20000], *e;
                double f;
                at = strstr(line, lies[i].from);
                assert_non_null(at);
                at += strlen(lies[i].from);
                f = strtod(at, &e);
                snprintf(rest, sizeof rest, "%s", e);
                snprintf(at, sizeof line - (size_t)(at - line), "%.17g%s", 2 * f, rest);
                snprintf(want, sizeof want, "FLOP count %.17g is not its DAG's (%.17g)", 2 * f, f);
            } else if (lies[i].from) {
                char rest[20000];
                at = strstr(line, lies[i].from);
                assert_non_null(at);
                snprintf(rest, sizeof rest, "%s", at + strlen(lies[i].from));
                snprintf(at, sizeof line - (size_t)(at - line), "%s%s", lies[i].to, rest);
            } else {
                at = strstr(line, "\"workload_key\":\"");
                assert_non_null(at);
                at += strlen("\"workload_key\":\"");
                *at = *at == '0' ? '1' : '0';
            }
            snprintf(text, sizeof text, "%.*s\n%s\n", (int)(nl - t1), t1, line);
            rt_write_file(bad, text);
            rt_file_digest(m, d1);
            EXPECT(1, "", lies[i].msg, "import", "--db", m, bad);
            EXPECT(1, "", i == 0 ? want : "(nothing was imported)", "import", "--db", m, bad);
            rt_file_digest(m, d2);
            assert_string_equal(d1, d2);
        }
    }
    at_free(t1);
}

static void test_db_check_command(void **unused)
{
    char good[PATH_MAX], bad[PATH_MAX], newer[PATH_MAX], foreign[PATH_MAX], d1[65], d2[65];
    char *out;
    sqlite3 *db;
    (void)unused;
    rt_path(good, dir, "good.db");
    rt_path(bad, dir, "damaged.db");
    rt_path(newer, dir, "newer.db");
    rt_path(foreign, dir, "foreign.db");
    make_store(good);

    rt_file_digest(good, d1);
    out = EXPECT_OUT(0, "\nOK\n", "", "db", "check", "--db", good);
    assert_non_null(strstr(out, "60 records, 3 tasks, 2 devices"));
    assert_non_null(strstr(out, "STALE record"));
    assert_non_null(strstr(out, "1 successful records do not replay"));
    at_free(out);
    EXPECT(0, "schema version 4", "", "db", "info", "--db", good);
    out = EXPECT_OUT(0, "\nOK\n", "", "db", "check", "--db", good, "--no-replay");
    assert_null(strstr(out, "STALE"));
    at_free(out);
    rt_file_digest(good, d2);
    assert_string_equal(d1, d2);

    /* a task whose FLOP count or workload key is not its DAG's is damage (issue 14,
    ** item 6); the check still only reads */
    {
        char lie[PATH_MAX];
        rt_path(lie, dir, "lie.db");
        for (int k = 0; k < 2; k++) {
            make_store(lie);
            assert_int_equal(sqlite3_open(lie, &db), SQLITE_OK);
            assert_int_equal(sqlite3_exec(db, k == 0 ? "UPDATE tasks SET flops = flops * 2 WHERE id = 1"
                                                     : "UPDATE tasks SET workload_key = "
                                                       "'0123456789abcdef0123456789abcdef' WHERE id = 2",
                                          NULL, NULL, NULL),
                             SQLITE_OK);
            sqlite3_close(db);
            rt_file_digest(lie, d1);
            out = EXPECT_OUT(1, "FAILED: 1 problems", "", "db", "check", "--db", lie);
            assert_non_null(strstr(out, k == 0 ? "DAMAGE tasks: task 1 (key "
                                               : "DAMAGE tasks: task 2: workload key "
                                                 "0123456789abcdef0123456789abcdef is not its DAG's ("));
            if (k == 0)
                assert_non_null(strstr(out, "): FLOP count "));
            at_free(out);
            rt_file_digest(lie, d2);
            assert_string_equal(d1, d2);
            remove(lie);
        }
    }

    /* damage pages in the middle of a copy of the store */
    {
        char *data, msg[128];
        size_t n;
        assert_int_equal(at_file_read(good, &data, &n, msg, sizeof msg), AT_OK);
        FILE *f = fopen(bad, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(data, 1, n, f), n);
        fclose(f);
        at_free(data);
        rt_damage(bad);
    }
    rt_file_digest(bad, d1);
    out = EXPECT_OUT(1, "FAILED", "", "db", "check", "--db", bad);
    assert_non_null(strstr(out, "DAMAGE"));
    at_free(out);
    /* the writers refuse a damaged store, as output and as input */
    {
        char f1[PATH_MAX], m[PATH_MAX];
        rt_path(f1, dir, "check.jsonl");
        rt_path(m, dir, "merged.db");
        EXPECT(0, "", "", "export", "--db", good, "-o", f1, "-q");
        EXPECT(1, "", "damaged records store", "import", "--db", bad, f1);
        EXPECT(1, "", "damaged records store", "merge", bad, good);
        EXPECT(1, "", "damaged records store", "merge", m, good, bad);
        assert_false(rt_exists(m));
        /* and so does a tuning run, naming the file, before it writes a run row (issue 14,
        ** item 8: it wrote a 'failed' run and said "corrupt or foreign data") */
        {
            char want[PATH_MAX + 64];
            snprintf(want, sizeof want, "%s: damaged records store", bad);
            EXPECT(1, "", want, "--trials", "1", "--db", bad, "matmul:M=8,N=8,K=8");
        }
    }
    rt_file_digest(bad, d2);
    assert_string_equal(d1, d2);

    /* a newer schema, a foreign database, a text file, an empty file */
    make_store(newer);
    assert_int_equal(sqlite3_open(newer, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "PRAGMA user_version = 7", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    EXPECT(1, "FAILED: ", "", "db", "check", "--db", newer);
    EXPECT(1, "newer tuner (schema version 7", "", "db", "check", "--db", newer);
    EXPECT(1, "", "newer tuner", "best", "--db", newer);
    assert_int_equal(sqlite3_open(foreign, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "CREATE TABLE t(x)", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    EXPECT(1, "another program", "", "db", "check", "--db", foreign);
    rt_write_file(foreign, "just text, nothing else, and not a database at all, really.\n");
    EXPECT(1, "not a records store", "", "db", "check", "--db", foreign);
    rt_write_file(foreign, "");
    EXPECT(1, "the database is empty", "", "db", "check", "--db", foreign);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usage_and_exit_statuses),
        cmocka_unit_test(test_best_command),
        cmocka_unit_test(test_history_command),
        cmocka_unit_test(test_plot_command),
        cmocka_unit_test(test_export_import_merge_commands),
        cmocka_unit_test(test_db_check_command),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
