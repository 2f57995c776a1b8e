/* tests/models/test_run.c -- whole models with real non-naive schedules: a records store
** holding, for every task, a schedule drawn from the schedule space (with layout rewrites),
** the hand-written elementwise schedule, the naive one, a stale record that no longer
** replays and a faster record for another target; then
**   - tuner run: the model with the chosen kernels against the naive lowering, and the
**     outputs against numpy (scripts/make_models.py --check, float64);
**   - export-lib for x86-64 Linux: the library run as the model's kernels (tuner run --lib)
**     and called from a C program compiled here against its header;
**   - export-lib for aarch64 Linux: the same C program cross-compiled and run under qemu;
**   - export-lib for aarch64 Android: no libc but libm.so/libc.so, only the API exported,
**     and the C program run under qemu with glibc standing in for Android's libraries. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cairo/cairo.h>

#include "kernels/kernels.h"
#include "records/records.h"
#include "model_test.h"

#define DEVICE "local"

static char dir[64];
static char host_target[256];
static const rec_device dev_x86 = {"x86_64", "test host", 2, "test", ""};
static const rec_device dev_a64 = {"aarch64", "test board", 4, "test", ""};

static int setup(void **unused)
{
    kn_target t;
    (void)unused;
    mt_mkdtemp(dir);
    mt_make_models(dir, "small_cnn transformer weights_as_inputs token_embed token_mask "
                        "bert_tiny bert_tiny_dyn bert_tiny_hf mask_ops");
    if (kn_target_host(&t) != AT_OK)
        abort();
    snprintf(host_target, sizeof host_target, "%s", t.text);
    return 0;
}

static int teardown(void **unused)
{
    (void)unused;
    mt_rmtree(dir);
    return 0;
}

static md_model *load(const char *name)
{
    char path[PATH_MAX], err[1024];
    md_model *m = NULL;
    mt_path(path, dir, name);
    if (md_model_load(path, NULL, &m, err, sizeof err) != AT_OK)
        fail_msg("%s", err);
    return m;
}

static md_model *load_opts(const char *name, const md_model_opts *o)
{
    char path[PATH_MAX], err[1024];
    md_model *m = NULL;
    mt_path(path, dir, name);
    if (md_model_load(path, o, &m, err, sizeof err) != AT_OK)
        fail_msg("%s", err);
    return m;
}

static void put(rec_store *st, int64_t task, const char *job, const char *state, double cost,
                const rec_device *dev)
{
    rec_result r;
    memset(&r, 0, sizeof r);
    r.task_id = task;
    r.job_id = job;
    r.state = state;
    r.costs = &cost;
    r.n_costs = 1;
    r.device = dev;
    r.trial = -1;
    assert_int_equal(rec_put(st, &r, 1, NULL), AT_OK);
}

/* Records for every task of 'tl' in a new store at 'path'; *n_sampled counts the tasks whose
** best record is a schedule drawn from the space. */
static void make_store(const char *path, const md_task_list *tl, uint64_t seed, int *n_sampled)
{
    rec_store *st;
    kn_target host;
    ss_hw hw;
    at_rng rng;
    char err[512];
    assert_int_equal(kn_target_host(&host), AT_OK);
    ss_hw_cpu(&hw, host.n_cores, host.vector_bytes, host.l1_bytes, host.l2_bytes);
    at_rng_seed(&rng, seed);
    assert_int_equal(rec_store_open(path, REC_OPEN_CREATE, &st, err, sizeof err), AT_OK);
    *n_sampled = 0;
    for (int i = 0; i < tl->n_tasks; i++) {
        const md_task *t = &tl->tasks[i];
        int64_t id, id_arm;
        ss_space *sp = NULL;
        ss_state *s = NULL;
        at_buf b;
        char job[64];
        assert_int_equal(rec_task_add(st, &(rec_task){t->key, host_target, DEVICE, t->dag_text,
                                                       t->flops}, &id), AT_OK);
        assert_int_equal(rec_task_add(st, &(rec_task){t->key, "llvm -mtriple=aarch64-linux-gnu",
                                                       DEVICE, t->dag_text, t->flops}, &id_arm),
                         AT_OK);
        at_buf_init(&b);
        /* the naive state, the hand-written elementwise schedule */
        assert_int_equal(ss_state_new(t->dag, &s), AT_OK);
        ss_state_to_json(s, &b);
        snprintf(job, sizeof job, "naive-%d", i);
        put(st, id, job, b.data, 5e-3, &dev_x86);
        if (kn_hand_elementwise(s, &host, err, sizeof err) == AT_OK) {
            at_buf_reset(&b);
            ss_state_to_json(s, &b);
            snprintf(job, sizeof job, "hand-%d", i);
            put(st, id, job, b.data, 2e-3, &dev_x86);
        }
        ss_state_free(s);
        s = NULL;
        /* a state from the schedule space: the best record */
        if (ss_space_new(t->dag, &hw, NULL, &sp, err, sizeof err) == AT_OK) {
            for (int tries = 0; tries < 50; tries++) {
                at_err e = ss_space_sample(sp, &rng, &s);
                if (e == AT_OK)
                    break;
                assert_int_equal(e, AT_ESCHED);
            }
            ss_space_free(sp);
        }
        if (s) {
            at_buf_reset(&b);
            ss_state_to_json(s, &b);
            snprintf(job, sizeof job, "space-%d", i);
            put(st, id, job, b.data, 1e-3, &dev_x86);
            (*n_sampled)++;
            ss_state_free(s);
        }
        /* faster, but stale (does not replay), or for another target: never chosen */
        snprintf(job, sizeof job, "stale-%d", i);
        put(st, id, job, "{\"v\":1,\"steps\":[[\"SP\",99,0,8,[2],1]]}", 1e-6, &dev_x86);
        snprintf(job, sizeof job, "arm-%d", i);
        put(st, id_arm, job, "{\"v\":1,\"steps\":[]}", 1e-7, &dev_a64);
        at_buf_fini(&b);
    }
    rec_store_close(st);
}

static void numpy_check(const char *model, const char *dump)
{
    char cmd[PATH_MAX * 4];
    char mp[PATH_MAX];
    mt_path(mp, dir, model);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s/scripts/make_models.py' --check '%s' '%s' "
             "--tol 1e-4 >&2", mt_root(), mp, dump);
    if (system(cmd) != 0)
        fail_msg("the outputs of %s differ from numpy's", model);
}

static void run_loaded_with_records(md_model *m, const char *model, uint64_t seed)
{
    const md_task_list *tl = md_model_tasks(m);
    char db[PATH_MAX], dump[PATH_MAX], err[1024];
    rec_store *st;
    md_run_report rep;
    int n_sampled;
    mt_path(db, dir, "run.db");
    mt_path(dump, dir, "dump");
    unlink(db);
    mkdir(dump, 0755);
    make_store(db, tl, seed, &n_sampled);
    assert_true(n_sampled >= tl->n_tasks - 1);
    assert_int_equal(rec_store_open(db, REC_OPEN_READONLY, &st, err, sizeof err), AT_OK);
    if (md_model_run(m, &(md_run_opts){.store = st, .device_key = DEVICE, .n_threads = 2,
                                       .seed = 5, .dump_dir = dump},
                     &rep, err, sizeof err) != AT_OK)
        fail_msg("%s", err);
    fprintf(stderr, "%s: %d tasks, %d tuned; max relative error %.3g; built in %.2f s\n", model,
            rep.n_tasks, rep.n_tuned, rep.max_rel_err, rep.build_s);
    {
        /* the Winograd alternatives after the model's tasks run in no step: not built */
        md_model_info info;
        md_model_get_info(m, &info);
        assert_int_equal(rep.n_tasks, tl->n_tasks - info.n_alt_tasks);
        assert_int_equal(rep.n_tuned, tl->n_tasks - info.n_alt_tasks);
    }
    /* drawn schedules of conv/dense tasks store weights in their tile order */
    assert_true(rep.n_rewritten > 0);
    assert_true(rep.max_rel_err <= 1e-4);
    assert_true(rep.outputs[0].checksum != 0);
    numpy_check(model, dump);
    rec_store_close(st);
    md_model_free(m);
    unlink(db);
}

static void run_model_with_records(const char *model, uint64_t seed)
{
    run_loaded_with_records(load(model), model, seed);
}

static void test_run_small_cnn(void **unused)
{
    (void)unused;
    run_model_with_records("small_cnn.onnx", 11);
}

static void test_run_transformer(void **unused)
{
    (void)unused;
    run_model_with_records("transformer.onnx", 12);
}

/* ---- Winograd ---- */

typedef struct fake_costs {
    double wino, direct, direct_add; /* seconds; < 0: no record */
    int no_gemm;                     /* the winograd_gemm tasks have no record */
} fake_costs;

static int fake_cost(void *ctx, const md_task *t, double *s)
{
    const fake_costs *f = ctx;
    int wino = strncmp(t->name, "winograd_", 9) == 0;
    if (wino && f->no_gemm && strcmp(t->name, "winograd_gemm") == 0)
        return 0;
    *s = wino ? f->wino : strstr(t->name, "_add") ? f->direct_add : f->direct;
    return *s >= 0;
}

static int count_named(const md_task_list *tl, const char *prefix, int from, int to)
{
    int n = 0;
    for (int i = from; i < to; i++)
        n += strncmp(tl->tasks[i].name, prefix, strlen(prefix)) == 0;
    return n;
}

/* small_cnn's four 3x3 convolutions with 16 and 32 channels are eligible (conv1 has 3 input
** channels): as Winograd tasks every output matches the naive lowering and numpy; the
** default (no costs) lists the Winograd tasks after the model's and runs the direct ones;
** with costs, each convolution takes whichever measured faster. */
static void test_winograd_model(void **unused)
{
    static const struct {
        fake_costs c;
        int n_wino;
    } choices[] = {
        {{1e-6, 1e-3, 1e-3, 0}, 4},  /* Winograd faster everywhere */
        {{1e-2, 1e-3, 1e-3, 0}, 0},  /* slower everywhere */
        {{1e-6, 1e-3, 1e-9, 0}, 3},  /* the direct conv4 (+ add + relu) is faster */
        {{1e-6, -1, -1, 0}, 4},      /* the direct tasks were never measured */
        {{1e-6, 1e-3, 1e-3, 1}, 0},  /* one Winograd part was never measured */
    };
    md_model *m;
    md_model_info info;
    const md_task_list *tl;
    (void)unused;
    /* on: every eligible one, checked end to end */
    m = load_opts("small_cnn.onnx", &(md_model_opts){.winograd = MD_WINOGRAD_ON});
    md_model_get_info(m, &info);
    assert_int_equal(info.n_winograd_eligible, 4);
    assert_int_equal(info.n_winograd, 4);
    assert_int_equal(info.n_alt_tasks, 0);
    tl = md_model_tasks(m);
    assert_int_equal(count_named(tl, "winograd_gemm", 0, tl->n_tasks), 2);
    assert_int_equal(count_named(tl, "conv2d", 0, tl->n_tasks), 1); /* conv1 */
    run_loaded_with_records(m, "small_cnn.onnx", 21);
    /* the default without costs: direct steps, Winograd tasks listed after them */
    m = load("small_cnn.onnx");
    md_model_get_info(m, &info);
    tl = md_model_tasks(m);
    assert_int_equal(info.n_winograd, 0);
    assert_int_equal(info.n_alt_tasks, 6);
    assert_int_equal(count_named(tl, "winograd_", 0, tl->n_tasks - 6), 0);
    assert_int_equal(count_named(tl, "winograd_", tl->n_tasks - 6, tl->n_tasks), 6);
    run_loaded_with_records(m, "small_cnn.onnx", 22);
    /* off */
    m = load_opts("small_cnn.onnx", &(md_model_opts){.winograd = MD_WINOGRAD_OFF});
    md_model_get_info(m, &info);
    assert_int_equal(info.n_alt_tasks, 0);
    assert_int_equal(count_named(md_model_tasks(m), "winograd_", 0, md_model_tasks(m)->n_tasks),
                     0);
    md_model_free(m);
    /* the choice by cost */
    for (size_t i = 0; i < AT_ARRAY_LEN(choices); i++) {
        fake_costs c = choices[i].c;
        m = load_opts("small_cnn.onnx", &(md_model_opts){.cost = fake_cost, .cost_ctx = &c});
        md_model_get_info(m, &info);
        tl = md_model_tasks(m);
        if (info.n_winograd != choices[i].n_wino)
            fail_msg("choice %zu: %d Winograd convolutions, want %d", i, info.n_winograd,
                     choices[i].n_wino);
        assert_int_equal(info.n_alt_tasks, 0);
        assert_int_equal(count_named(tl, "winograd_output_bias_add_relu", 0, tl->n_tasks),
                         choices[i].n_wino == 4);
        assert_int_equal(count_named(tl, "conv2d_bias_add_relu", 0, tl->n_tasks),
                         choices[i].n_wino != 4);
        md_model_free(m);
    }
}

/* ---- export ---- */

/* A C program that calls task 0 through its typed function and task 1 through
** P_task_run, on inputs from a formula, and writes the outputs. */
static void write_program(const char *path, const char *P, const char *header,
                          const md_task *t0, const md_task *t1, int threads)
{
    at_buf b;
    const md_task *ts[2] = {t0, t1};
    at_buf_init(&b);
    at_buf_printf(&b, "#include <stdio.h>\n#include <stdlib.h>\n#include \"%s\"\n", header);
    at_buf_puts(&b, "static float *make(long n, int k)\n{\n"
                    "    float *p = aligned_alloc(64, (size_t)((n * 4 + 63) / 64 * 64));\n"
                    "    for (long i = 0; i < n; i++)\n"
                    "        p[i] = (float)((i * 7919 + k * 104729) % 2001) / 1000.0f - 1.0f;\n"
                    "    return p;\n}\n");
    at_buf_puts(&b, "int main(int argc, char **argv)\n{\n    FILE *f;\n    (void)argc;\n");
    if (threads > 1)
        at_buf_printf(&b, "    if (%s_set_threads(%d) != 0)\n        return 3;\n", P, threads);
    at_buf_printf(&b, "    if (%s_n_tasks() < 2)\n        return 4;\n", P);
    for (int k = 0; k < 2; k++) {
        const ss_dag *d = ts[k]->dag;
        for (int a = 0; a < d->n_args; a++)
            at_buf_printf(&b, "    float *t%d_%d = make(%lld, %d);\n", k, a,
                          (long long)ss_op_n_elems(&d->ops[d->args[a]]), a);
    }
    at_buf_printf(&b, "    if (%s_task0(", P);
    for (int a = 0; a < t0->dag->n_args; a++)
        at_buf_printf(&b, "%st0_%d", a ? ", " : "", a);
    at_buf_puts(&b, ") != 0)\n        return 5;\n");
    at_buf_printf(&b, "    void *b1[] = {");
    for (int a = 0; a < t1->dag->n_args; a++)
        at_buf_printf(&b, "%st1_%d", a ? ", " : "", a);
    at_buf_printf(&b, "};\n    if (%s_task_run(1, b1) != 0 || %s_task_run(99, b1) != -1)\n"
                      "        return 6;\n", P, P);
    at_buf_puts(&b, "    f = fopen(argv[1], \"wb\");\n");
    at_buf_printf(&b, "    fwrite(t0_%d, 4, %lld, f);\n", t0->dag->n_args - 1,
                  (long long)ss_op_n_elems(&t0->dag->ops[t0->dag->args[t0->dag->n_args - 1]]));
    at_buf_printf(&b, "    fwrite(t1_%d, 4, %lld, f);\n", t1->dag->n_args - 1,
                  (long long)ss_op_n_elems(&t1->dag->ops[t1->dag->args[t1->dag->n_args - 1]]));
    at_buf_puts(&b, "    return fclose(f) != 0;\n}\n");
    assert_int_equal(b.err, AT_OK);
    mt_write(path, b.data, b.len);
    at_buf_fini(&b);
}

/* The outputs of tasks 0 and 1 with their naive kernels on the program's inputs. */
static float *naive_outputs(const md_task *t0, const md_task *t1, size_t *n)
{
    const md_task *ts[2] = {t0, t1};
    kn_target host;
    float *out = NULL;
    size_t used = 0;
    char err[512];
    assert_int_equal(kn_target_host(&host), AT_OK);
    for (int k = 0; k < 2; k++) {
        ss_state *st;
        kn_ir *ir;
        kn_artifact *a;
        kn_bufset bs;
        int64_t ne;
        assert_int_equal(ss_state_new(ts[k]->dag, &st), AT_OK);
        assert_int_equal(kn_lower(st, &ir, err, sizeof err), AT_OK);
        assert_int_equal(kn_build(ir, &host, NULL, &a, err, sizeof err), AT_OK);
        assert_int_equal(kn_bufset_alloc(a, 1, &bs), AT_OK);
        for (int i = 0; i < bs.n; i++)
            for (int64_t e = 0; e < bs.n_elems[i]; e++)
                ((float *)bs.ptr[i])[e] = (float)((e * 7919 + i * 104729) % 2001) / 1000.0f - 1.0f;
        assert_int_equal(kn_run_once(a, &bs, kn_rt_serial_par(), err, sizeof err), AT_OK);
        ne = bs.n_elems[bs.n - 1];
        out = realloc(out, (used + (size_t)ne) * sizeof *out);
        memcpy(out + used, bs.ptr[bs.n - 1], (size_t)ne * sizeof *out);
        used += (size_t)ne;
        kn_bufset_free(&bs);
        kn_artifact_free(a);
        kn_ir_free(ir);
        ss_state_free(st);
    }
    *n = used;
    return out;
}

static void compare_outputs(const char *path, const float *ref, size_t n, const char *what)
{
    size_t got_n;
    char *got = mt_read(path, &got_n);
    double e;
    assert_int_equal(got_n, n * 4);
    e = kn_rt_rel_err(got, ref, AT_DT_F32, (int64_t)n);
    fprintf(stderr, "%s: max relative error %.3g against the naive kernels\n", what, e);
    assert_true(e <= 1e-4);
    at_free(got);
}

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[4 * PATH_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    fflush(stderr);
    return system(cmd);
}

static void export(const md_task_list *tl, const char *db, const char *target, const char *lib,
                   md_export_report *rep)
{
    rec_store *st;
    char err[1024];
    assert_int_equal(rec_store_open(db, REC_OPEN_READONLY, &st, err, sizeof err), AT_OK);
    if (md_export_lib(tl, &(md_export_opts){.store = st, .target = target, .device_key = DEVICE,
                                            .out_path = lib, .max_threads = 4},
                      rep, err, sizeof err) != AT_OK)
        fail_msg("export for %s: %s", target ? target : "the host", err);
    rec_store_close(st);
}

static void test_export(void **unused)
{
    md_model *m = load_opts("small_cnn.onnx", &(md_model_opts){.winograd = MD_WINOGRAD_OFF});
    const md_task_list *tl = md_model_tasks(m);
    char db[PATH_MAX], lib[PATH_MAX], hdr[PATH_MAX], prog[PATH_MAX], out[PATH_MAX],
        a64[PATH_MAX], andr[PATH_MAX], err[1024];
    md_export_report rep;
    md_run_report rr;
    size_t n_ref;
    float *ref;
    int n_sampled;
    (void)unused;
    mt_path(db, dir, "export.db");
    make_store(db, tl, 21, &n_sampled);
    ref = naive_outputs(&tl->tasks[0], &tl->tasks[1], &n_ref);

    /* x86-64 Linux, this host */
    mt_path(lib, dir, "libsmall_cnn_kernels.so");
    mt_path(hdr, dir, "libsmall_cnn_kernels.h");
    export(tl, db, NULL, lib, &rep);
    assert_int_equal(rep.n_tasks, 7);
    assert_int_equal(rep.n_tuned, 7);
    {
        size_t n;
        char *h = mt_read(hdr, &n);
        assert_non_null(strstr(h, "int32_t small_cnn_kernels_task0(const float *X, const float *W, "
                                  "const float *b, float *relu);"));
        assert_non_null(strstr(h, "tuned schedule (measured 1.0000 ms)"));
        at_free(h);
    }
    /* the whole model with the library's kernels, against the naive lowering */
    if (md_model_run(m, &(md_run_opts){.lib_path = lib, .n_threads = 2, .seed = 3}, &rr, err,
                     sizeof err) != AT_OK)
        fail_msg("%s", err);
    assert_true(rr.max_rel_err <= 1e-4);
    /* only the API is exported */
    assert_int_equal(sh("nm -D --defined-only '%s' | grep -v ' small_cnn_kernels_' | grep -q ' T '",
                        lib) == 0, 0);
    /* a C program against the header, with 2 threads */
    mt_path(prog, dir, "prog.c");
    mt_path(out, dir, "out.bin");
    write_program(prog, "small_cnn_kernels", "libsmall_cnn_kernels.h", &tl->tasks[0],
                  &tl->tasks[1], 2);
    assert_int_equal(sh("cd '%s' && cc -std=c11 -Wall -Werror -o prog prog.c -L. "
                        "-lsmall_cnn_kernels -Wl,-rpath,'%s' && ./prog '%s'", dir, dir, out), 0);
    compare_outputs(out, ref, n_ref, "x86-64 library from C");

    /* aarch64 Linux: cross-compiled, run under qemu, serially (qemu-user 7.2 hangs in
    ** pthread_create of a dynamically linked aarch64 program on this host; the pool's code
    ** is the same C as the x86-64 library's, which ran on 2 threads above) */
    write_program(prog, "small_cnn_kernels", "libsmall_cnn_kernels.h", &tl->tasks[0],
                  &tl->tasks[1], 1);
    mt_path(a64, dir, "a64/libsmall_cnn_kernels.so");
    sh("mkdir -p '%s/a64'", dir);
    export(tl, db, "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76", a64, &rep);
    assert_int_equal(rep.n_naive, 7); /* the store has no aarch64 records for this target */
    assert_int_equal(sh("cd '%s/a64' && aarch64-linux-gnu-gcc -std=c11 -Wall -Werror -o prog "
                        "../prog.c -I. -L. -lsmall_cnn_kernels && qemu-aarch64 -L "
                        "/usr/aarch64-linux-gnu -E LD_LIBRARY_PATH=. ./prog '%s'", dir, out), 0);
    compare_outputs(out, ref, n_ref, "aarch64 Linux library under qemu");

    /* aarch64 Android: serial, no libc but the stubs' libm.so and libc.so */
    mt_path(andr, dir, "android/libsmall_cnn_kernels.so");
    sh("mkdir -p '%s/android'", dir);
    export(tl, db, "llvm -mtriple=aarch64-linux-android -mcpu=cortex-a76", andr, &rep);
    assert_int_equal(sh("readelf -h '%s' | grep -q 'AArch64' && readelf -h '%s' | grep -q DYN",
                        andr, andr), 0);
    assert_int_equal(sh("test \"$(readelf -d '%s' | grep NEEDED | sed 's/.*\\[//; s/\\]//' | sort "
                        "| tr '\\n' ' ')\" = 'libc.so libm.so ' || "
                        "test \"$(readelf -d '%s' | grep NEEDED | sed 's/.*\\[//; s/\\]//' | "
                        "tr '\\n' ' ')\" = 'libm.so '", andr, andr), 0);
    assert_int_equal(sh("readelf -V '%s' | grep -q GLIBC", andr) == 0, 0);
    assert_int_equal(sh("nm -D --defined-only '%s' | grep -q ' small_cnn_kernels_task6$'", andr), 0);
    /* glibc's libm and libc standing in for Android's: the same program, serial */
    assert_int_equal(sh("cd '%s/android' && ln -sf /usr/aarch64-linux-gnu/lib/libm.so.6 libm.so && "
                        "ln -sf /usr/aarch64-linux-gnu/lib/libc.so.6 libc.so && "
                        "aarch64-linux-gnu-gcc -std=c11 -Wall -Werror -o prog ../prog.c -I. "
                        "./libsmall_cnn_kernels.so -Wl,-rpath-link,. && qemu-aarch64 -L /usr/aarch64-linux-gnu "
                        "-E LD_LIBRARY_PATH=. ./prog '%s'", dir, out), 0);
    compare_outputs(out, ref, n_ref, "aarch64 Android library under qemu");
    free(ref);
    md_model_free(m);
}

/* A C program that runs the whole model through the library: reads the model's input from
** argv[1], runs P_model_run 'runs' times, writes the output to argv[2] and the number of
** weight transforms after the first and after the last run to stdout; then calls the task
** 'wtask' (a task used by several layers) through P_task_run alternating two weights four
** times and prints how many transforms that made. */
static void write_model_program(const char *path, const char *P, const char *header, int threads,
                                int runs, const md_task *wt, int wtask)
{
    at_buf b;
    const ss_dag *d = wt->dag;
    at_buf_init(&b);
    at_buf_printf(&b, "#include <stdio.h>\n#include <stdlib.h>\n#include \"%s\"\n", header);
    at_buf_puts(&b, "static float *make(long n, int k)\n{\n"
                    "    float *p = aligned_alloc(64, (size_t)((n * 4 + 63) / 64 * 64));\n"
                    "    for (long i = 0; i < n; i++)\n"
                    "        p[i] = (float)((i * 7919 + k * 104729) % 2001) / 1000.0f - 1.0f;\n"
                    "    return p;\n}\n");
    at_buf_puts(&b, "int main(int argc, char **argv)\n{\n    FILE *f;\n    int t0, t1;\n"
                    "    (void)argc;\n");
    at_buf_printf(&b, "    long n_in = (long)%s_model_input_size(0), n_out = "
                      "(long)%s_model_output_size(0);\n", P, P);
    at_buf_puts(&b, "    float *in = malloc((size_t)n_in * 4), *out = malloc((size_t)n_out * 4);\n"
                    "    f = fopen(argv[1], \"rb\");\n"
                    "    if (!f || fread(in, 4, (size_t)n_in, f) != (size_t)n_in)\n"
                    "        return 2;\n    fclose(f);\n");
    at_buf_printf(&b, "    if (%s_set_threads(%d) != 0 || %s_model_n_inputs() != 1)\n"
                      "        return 3;\n", P, threads, P);
    at_buf_printf(&b, "    for (int r = 0; r < %d; r++) {\n"
                      "        if (%s_model_run((const float *const *)&in, &out) != 0)\n"
                      "            return 4;\n"
                      "        if (r == 0)\n            printf(\"first %%d\\n\", %s_n_weight_transforms());\n"
                      "    }\n", runs, P, P);
    at_buf_printf(&b, "    printf(\"last %%d\\n\", %s_n_weight_transforms());\n", P);
    at_buf_puts(&b, "    f = fopen(argv[2], \"wb\");\n"
                    "    if (!f || fwrite(out, 4, (size_t)n_out, f) != (size_t)n_out)\n"
                    "        return 5;\n    fclose(f);\n");
    /* the shared task with two different weights, alternating */
    for (int a = 0; a < d->n_args; a++)
        at_buf_printf(&b, "    float *u%d = make(%lld, %d);\n", a,
                      (long long)ss_op_n_elems(&d->ops[d->args[a]]), a);
    at_buf_printf(&b, "    float *w2 = make(%lld, 77);\n", (long long)ss_op_n_elems(&d->ops[d->args[1]]));
    at_buf_printf(&b, "    t0 = %s_n_weight_transforms();\n    for (int r = 0; r < 4; r++) {\n"
                      "        void *bufs[%d];\n", P, d->n_args);
    for (int a = 0; a < d->n_args; a++)
        if (a == 1)
            at_buf_puts(&b, "        bufs[1] = r % 2 ? (void *)w2 : (void *)u1;\n");
        else
            at_buf_printf(&b, "        bufs[%d] = u%d;\n", a, a);
    at_buf_printf(&b, "        if (%s_task_run(%d, bufs) != 0)\n            return 6;\n    }\n"
                      "    t1 = %s_n_weight_transforms();\n"
                      "    printf(\"alternating %%d\\n\", t1 - t0);\n    return 0;\n}\n",
                  P, wtask, P);
    assert_int_equal(b.err, AT_OK);
    mt_write(path, b.data, b.len);
    at_buf_fini(&b);
}

static int count_line(const char *text, const char *word)
{
    const char *p = strstr(text, word);
    return p ? atoi(p + strlen(word)) : -1;
}

/* The whole model in the library (NHWC inside, the model's layout outside), called from C:
** the same outputs as tuner run on the same input, each layer's weights transformed once,
** and a task shared by two layers keeping both of its weights. */
static void test_export_model(void **unused)
{
    md_model *m = load("small_cnn.onnx");
    const md_task_list *tl = md_model_tasks(m);
    char db[PATH_MAX], lib[PATH_MAX], prog[PATH_MAX], in[PATH_MAX], got[PATH_MAX],
        dump[PATH_MAX], want[PATH_MAX], err[1024], *out = NULL, andr[PATH_MAX];
    rec_store *st;
    md_export_report rep;
    md_run_report rr;
    int n_sampled, wtask = -1, uses_with_pre;
    size_t n;
    (void)unused;
    mt_path(db, dir, "model.db");
    mt_path(dump, dir, "dump_model");
    /* a store whose schedule for a convolution used twice rewrites its weight's layout (the
    ** drawn schedules depend on the machine's vector width: draw again until one does) */
    for (uint64_t seed = 41; wtask < 0 && seed < 41 + 20; seed++) {
        unlink(db);
        make_store(db, tl, seed, &n_sampled);
        assert_int_equal(rec_store_open(db, REC_OPEN_READONLY, &st, err, sizeof err), AT_OK);
        for (int i = 0; i < tl->n_tasks && wtask < 0; i++) {
            ss_state *s = NULL;
            kn_artifact *a = NULL;
            kn_target host;
            if (tl->tasks[i].weight < 2 || strncmp(tl->tasks[i].name, "conv2d", 6) != 0)
                continue;
            assert_int_equal(kn_target_host(&host), AT_OK);
            assert_int_equal(md_task_schedule(&tl->tasks[i], st, host.text, DEVICE, &s, NULL,
                                              err, sizeof err), AT_OK);
            assert_int_equal(kn_build_state(s, &host, "probe", &a, err, sizeof err), AT_OK);
            if (a->pre_entry[0])
                wtask = i;
            kn_artifact_free(a);
            ss_state_free(s);
        }
        rec_store_close(st);
    }
    assert_true(wtask >= 0);
    assert_non_null(strstr(tl->tasks[wtask].desc, "layout=NHWC"));
    /* tuner run: the outputs on seed 8's input */
    assert_int_equal(rec_store_open(db, REC_OPEN_READONLY, &st, err, sizeof err), AT_OK);
    if (md_model_run(m, &(md_run_opts){.store = st, .device_key = DEVICE, .n_threads = 2,
                                       .seed = 8, .dump_dir = dump, .no_check = 1},
                     &rr, err, sizeof err) != AT_OK)
        fail_msg("%s", err);
    mt_path(lib, dir, "libsmall_model.so");
    if (md_export_lib(tl, &(md_export_opts){.store = st, .device_key = DEVICE, .out_path = lib,
                                            .max_threads = 2, .model = m},
                      &rep, err, sizeof err) != AT_OK)
        fail_msg("%s", err);
    rec_store_close(st);
    assert_true(rep.weight_bytes > 0 && rep.arena_bytes > 0);
    uses_with_pre = rep.n_weight_uses;
    assert_true(uses_with_pre >= tl->tasks[wtask].weight);
    {
        char *h = mt_read(lib, &n);
        at_free(h);
        mt_path(prog, dir, "libsmall_model.h");
        h = mt_read(prog, &n);
        assert_non_null(strstr(h, "int32_t small_model_model_run(const float *const *inputs, "
                                  "float *const *outputs);"));
        assert_non_null(strstr(h, "input  0: 'input' float32[1, 3, 32, 32]"));
        assert_non_null(strstr(h, "compute in NHWC"));
        at_free(h);
    }
    mt_path(prog, dir, "model_prog.c");
    mt_path(in, dir, "dump_model/input_0.bin");
    mt_path(got, dir, "model_out.bin");
    mt_path(want, dir, "dump_model/output_0.bin");
    write_model_program(prog, "small_model", "libsmall_model.h", 2, 3, &tl->tasks[wtask], wtask);
    {
        char cmd[4 * PATH_MAX];
        FILE *p;
        snprintf(cmd, sizeof cmd, "cd '%s' && cc -std=c11 -Wall -Werror -o model_prog model_prog.c "
                 "-L. -lsmall_model -Wl,-rpath,'%s' && ./model_prog '%s' '%s'", dir, dir, in, got);
        fflush(stderr);
        assert_non_null(p = popen(cmd, "r"));
        out = at_calloc(1, 4096);
        n = fread(out, 1, 4095, p);
        assert_int_equal(pclose(p), 0);
    }
    fprintf(stderr, "model library from C: %s", out);
    /* every layer's weights once, at the first run; none again; two weights alternating
    ** through the shared task: two more (each layer keeps its own copy) */
    assert_int_equal(count_line(out, "first "), uses_with_pre);
    assert_int_equal(count_line(out, "last "), uses_with_pre);
    assert_int_equal(count_line(out, "alternating "), 2);
    at_free(out);
    {
        size_t n1, n2;
        char *a = mt_read(got, &n1), *b = mt_read(want, &n2);
        double e;
        assert_int_equal(n1, n2);
        e = kn_rt_rel_err(a, b, AT_DT_F32, (int64_t)(n1 / 4));
        fprintf(stderr, "model library from C: max relative error %.3g against tuner run\n", e);
        assert_true(e <= 1e-6);
        at_free(a);
        at_free(b);
    }
    /* Android: the weights' block and the model's copies link without libc but the stubs */
    mt_path(andr, dir, "android_model/libsmall_model.so");
    sh("mkdir -p '%s/android_model'", dir);
    assert_int_equal(rec_store_open(db, REC_OPEN_READONLY, &st, err, sizeof err), AT_OK);
    if (md_export_lib(tl, &(md_export_opts){.store = st, .device_key = DEVICE, .out_path = andr,
                                            .target = "llvm -mtriple=aarch64-linux-android "
                                                      "-mcpu=cortex-a76",
                                            .model = m},
                      &rep, err, sizeof err) != AT_OK)
        fail_msg("%s", err);
    rec_store_close(st);
    write_model_program(prog, "small_model", "libsmall_model.h", 1, 2, &tl->tasks[wtask], wtask);
    assert_int_equal(sh("cd '%s/android_model' && ln -sf /usr/aarch64-linux-gnu/lib/libm.so.6 "
                        "libm.so && ln -sf /usr/aarch64-linux-gnu/lib/libc.so.6 libc.so && "
                        "aarch64-linux-gnu-gcc -std=c11 -Wall -Werror -o prog ../model_prog.c -I. "
                        "./libsmall_model.so -Wl,-rpath-link,. && qemu-aarch64 -L "
                        "/usr/aarch64-linux-gnu -E LD_LIBRARY_PATH=. ./prog '%s' '%s' >/dev/null",
                        dir, in, got), 0);
    {
        size_t n1, n2;
        char *a = mt_read(got, &n1), *b = mt_read(want, &n2);
        double e;
        assert_int_equal(n1, n2);
        e = kn_rt_rel_err(a, b, AT_DT_F32, (int64_t)(n1 / 4));
        fprintf(stderr, "Android model library under qemu: max relative error %.3g (naive "
                "kernels: no aarch64 records) against tuner run\n", e);
        assert_true(e <= 1e-4);
        at_free(a);
        at_free(b);
    }
    md_model_free(m);
}

/* ---- the command ---- */

#define TUNER(out, err, ...) mt_tuner(out, err, (const char *const[]){__VA_ARGS__, NULL})

static int same_file(const char *a, const char *b)
{
    size_t n1, n2;
    char *x = mt_read(a, &n1), *y = mt_read(b, &n2);
    int same = n1 == n2 && memcmp(x, y, n1) == 0;
    at_free(x);
    at_free(y);
    return same;
}

/* Winograd through the commands: records for every task of the default list (direct and
** Winograd); 'on' runs and exports the Winograd form, the library's outputs (from C,
** through its model function) equal tuner run's; the default 'auto' keeps the direct
** convolutions when they measured faster (here they did: 1 ms against 3 x 1 ms), and
** 'tuner run --lib' follows what the library was made with. */
static void test_winograd_cli(void **unused)
{
    md_model *m = load("small_cnn.onnx");
    char db[PATH_MAX], model[PATH_MAX], lib[PATH_MAX], d1[PATH_MAX], d2[PATH_MAX];
    char o1[PATH_MAX + 16], o2[PATH_MAX + 16], *out, *err;
    int n_sampled;
    (void)unused;
    mt_path(db, dir, "wino.db");
    mt_path(model, dir, "small_cnn.onnx");
    mt_path(lib, dir, "libwino.so");
    mt_path(d1, dir, "dump_wino_run");
    mt_path(d2, dir, "dump_wino_lib");
    make_store(db, md_model_tasks(m), 51, &n_sampled);
    md_model_free(m);
    assert_int_equal(TUNER(&out, &err, "run", "--db", db, "--device", DEVICE, "--winograd", "on",
                           "--dump", d1, model), TN_EXIT_OK);
    assert_non_null(strstr(out, "10 with a tuned schedule, 0 naive"));
    assert_non_null(strstr(out, "winograd: 4 of 4 eligible 3x3 convolutions run as Winograd"));
    assert_non_null(strstr(out, "OK: the outputs match the naive lowering"));
    at_free(out);
    at_free(err);
    assert_int_equal(TUNER(&out, &err, "export-lib", "--db", db, "--winograd", "on", "-o", lib,
                           model), TN_EXIT_OK);
    assert_non_null(strstr(out, "10 kernels (10 tuned, 0 naive)"));
    assert_non_null(strstr(out, "winograd: 4 of 4"));
    at_free(out);
    at_free(err);
    assert_int_equal(TUNER(&out, &err, "run", "--lib", lib, "--dump", d2, model), TN_EXIT_OK);
    assert_non_null(strstr(out, "winograd: 4 of 4"));
    assert_non_null(strstr(out, "OK: the outputs match the naive lowering"));
    at_free(out);
    at_free(err);
    snprintf(o1, sizeof o1, "%s/output_0.bin", d1);
    snprintf(o2, sizeof o2, "%s/output_0.bin", d2);
    assert_true(same_file(o1, o2));
    /* auto: the direct tasks measured faster */
    assert_int_equal(TUNER(&out, &err, "run", "--db", db, "--device", DEVICE, model), TN_EXIT_OK);
    assert_non_null(strstr(out, "7 with a tuned schedule, 0 naive"));
    assert_non_null(strstr(out, "winograd: 0 of 4"));
    at_free(out);
    at_free(err);
    assert_int_equal(TUNER(&out, &err, "run", "--winograd", "sometimes", model),
                     TN_EXIT_USAGE);
    assert_non_null(strstr(err, "--winograd must be auto, on or off, not 'sometimes'"));
    at_free(out);
    at_free(err);
}

static void test_cli(void **unused)
{
    md_model *m = load("small_cnn.onnx");
    char db[PATH_MAX], model[PATH_MAX], other[PATH_MAX], lib[PATH_MAX], *out, *err;
    int n_sampled;
    (void)unused;
    mt_path(db, dir, "cli.db");
    mt_path(model, dir, "small_cnn.onnx");
    mt_path(other, dir, "transformer.onnx");
    mt_path(lib, dir, "libcli.so");
    make_store(db, md_model_tasks(m), 31, &n_sampled);
    md_model_free(m);
    assert_int_equal(TUNER(&out, &err, "run", "--db", db, "--device", DEVICE, "--repeat", "2",
                           model), TN_EXIT_OK);
    assert_non_null(strstr(out, "7 with a tuned schedule, 0 naive"));
    assert_non_null(strstr(out, "OK: the outputs match the naive lowering"));
    assert_non_null(strstr(out, "latency: "));
    at_free(out);
    at_free(err);
    {
        /* the latency distribution (issue 17, item 4): percentiles in order, each run
        ** drawn: the PNG read back has the bars' colour, the SVG its glyphs */
        char png[PATH_MAX], svg[PATH_MAX], msg[256], *text;
        double p50, p90, p99, mx, mn;
        int runs, blue = 0;
        size_t n;
        const char *p;
        cairo_surface_t *sf;
        mt_path(png, dir, "lat.png");
        mt_path(svg, dir, "lat.svg");
        assert_int_equal(TUNER(&out, &err, "run", "--db", db, "--device", DEVICE, "--repeat",
                               "40", "--no-check", "--histogram", png, model),
                         TN_EXIT_OK);
        p = strstr(out, "latency distribution over ");
        assert_non_null(p);
        assert_int_equal(sscanf(p, "latency distribution over %d runs: p50 %lf ms, p90 %lf ms, "
                                   "p99 %lf ms, max %lf ms, min %lf ms",
                                &runs, &p50, &p90, &p99, &mx, &mn),
                         6);
        assert_int_equal(runs, 40);
        assert_true(mn > 0 && mn <= p50 && p50 <= p90 && p90 <= p99 && p99 <= mx);
        assert_non_null(strstr(out, "histogram of the 40 runs written to"));
        at_free(out);
        at_free(err);
        sf = cairo_image_surface_create_from_png(png);
        assert_int_equal(cairo_surface_status(sf), CAIRO_STATUS_SUCCESS);
        assert_int_equal(cairo_image_surface_get_width(sf), 800);
        cairo_surface_flush(sf);
        {
            const unsigned char *px = cairo_image_surface_get_data(sf);
            int stride = cairo_image_surface_get_stride(sf);
            for (int y = 0; y < 480; y++)
                for (int x = 0; x < 800; x++) {
                    const unsigned char *q = px + y * stride + 4 * x;
                    blue += q[0] > 180 && q[1] > 80 && q[1] < 140 && q[2] < 60; /* #1f6fd0 */
                }
        }
        assert_true(blue > 1000); /* the bars */
        cairo_surface_destroy(sf);
        assert_int_equal(TUNER(&out, &err, "run", "--db", db, "--device", DEVICE, "--repeat",
                               "5", "--no-check", "--histogram", svg, model),
                         TN_EXIT_OK);
        at_free(out);
        at_free(err);
        assert_int_equal(at_file_read(svg, &text, &n, msg, sizeof msg), AT_OK);
        assert_non_null(strstr(text, "<svg"));
        assert_non_null(strstr(text, "id=\"glyph"));
        at_free(text);
        /* bad command lines: no runs to draw, a name cairo cannot write */
        assert_int_equal(TUNER(&out, &err, "run", "--db", db, "--histogram", png, model),
                         TN_EXIT_USAGE);
        assert_non_null(strstr(err, "--histogram needs --repeat N with N >= 2"));
        at_free(out);
        at_free(err);
        assert_int_equal(TUNER(&out, &err, "run", "--db", db, "--repeat", "3", "--histogram",
                               "lat.gif", model),
                         TN_EXIT_USAGE);
        assert_non_null(strstr(err, "the name must end in .png or .svg"));
        at_free(out);
        at_free(err);
    }
    {
        /* several runners on the same axes (tuner plot-latency, what make bench-model
        ** draws): each one's percentiles printed, both colours in the PNG; a file that is
        ** not latencies is named with its line */
        char a[PATH_MAX], b[PATH_MAX], bad[PATH_MAX], png[PATH_MAX], sa[PATH_MAX + 8],
            sb[PATH_MAX + 8], sbad[PATH_MAX + 8];
        double p50a, p50b;
        int blue = 0, orange = 0;
        cairo_surface_t *sf;
        FILE *f;
        mt_path(a, dir, "lat_a.txt");
        mt_path(b, dir, "lat_b.txt");
        mt_path(bad, dir, "lat_bad.txt");
        mt_path(png, dir, "lat2.png");
        assert_non_null(f = fopen(a, "w"));
        for (int i = 0; i < 300; i++)
            fprintf(f, "%.4f\n", 10.0 + (i % 17) * 0.05);
        fclose(f);
        assert_non_null(f = fopen(b, "w"));
        for (int i = 0; i < 200; i++)
            fprintf(f, "%.4f\n", 12.0 + (i % 13) * 0.08);
        fclose(f);
        assert_non_null(f = fopen(bad, "w"));
        fprintf(f, "1.5\n2.5\nfast\n");
        fclose(f);
        snprintf(sa, sizeof sa, "ours=%s", a);
        snprintf(sb, sizeof sb, "ort=%s", b);
        snprintf(sbad, sizeof sbad, "x=%s", bad);
        assert_int_equal(TUNER(&out, &err, "plot-latency", "-o", png, "--title", "two", sa, sb),
                         TN_EXIT_OK);
        assert_non_null(strstr(out, "ours: 300 runs, p50 "));
        assert_non_null(strstr(out, "ort: 200 runs, p50 "));
        assert_int_equal(sscanf(strstr(out, "ours: "), "ours: 300 runs, p50 %lf", &p50a), 1);
        assert_int_equal(sscanf(strstr(out, "ort: "), "ort: 200 runs, p50 %lf", &p50b), 1);
        assert_true(p50a >= 10.0 && p50a <= 10.8 && p50b >= 12.0 && p50b <= 13.0);
        at_free(out);
        at_free(err);
        sf = cairo_image_surface_create_from_png(png);
        assert_int_equal(cairo_surface_status(sf), CAIRO_STATUS_SUCCESS);
        cairo_surface_flush(sf);
        {
            const unsigned char *px = cairo_image_surface_get_data(sf);
            int stride = cairo_image_surface_get_stride(sf);
            for (int y = 0; y < 480; y++)
                for (int x = 0; x < 800; x++) {
                    const unsigned char *q = px + y * stride + 4 * x; /* B, G, R */
                    blue += q[0] > q[2] + 60 && q[0] > 150;
                    orange += q[2] > q[0] + 60 && q[2] > 150 && q[1] > 80;
                }
        }
        assert_true(blue > 500 && orange > 500);
        cairo_surface_destroy(sf);
        assert_int_equal(TUNER(&out, &err, "plot-latency", "-o", png, sa, sbad), TN_EXIT_FAIL);
        assert_non_null(strstr(err, "lat_bad.txt:3: not a latency in milliseconds"));
        at_free(out);
        at_free(err);
        assert_int_equal(TUNER(&out, &err, "plot-latency", "-o", "x.gif", sa), TN_EXIT_USAGE);
        assert_non_null(strstr(err, "must end in .png or .svg"));
        at_free(out);
        at_free(err);
        assert_int_equal(TUNER(&out, &err, "plot-latency", "-o", png, "ours"), TN_EXIT_USAGE);
        assert_non_null(strstr(err, "give NAME=FILE"));
        at_free(out);
        at_free(err);
    }
    assert_int_equal(TUNER(&out, &err, "export-lib", "--db", db, "-o", lib, model), TN_EXIT_OK);
    assert_non_null(strstr(out, "7 kernels (7 tuned, 0 naive)"));
    at_free(out);
    at_free(err);
    assert_int_equal(TUNER(&out, &err, "run", "--lib", lib, model), TN_EXIT_OK);
    at_free(out);
    at_free(err);
    /* a library of another model */
    assert_int_equal(TUNER(&out, &err, "run", "--lib", lib, other), TN_EXIT_FAIL);
    assert_non_null(strstr(err, "made for another model"));
    at_free(out);
    at_free(err);
    /* a target that does not run here; an unsupported target for a library */
    assert_int_equal(TUNER(&out, &err, "run", "--db", db, "--target",
                           "llvm -mtriple=aarch64-linux-gnu", model), TN_EXIT_FAIL);
    assert_non_null(strstr(err, "does not run on this machine"));
    at_free(out);
    at_free(err);
    assert_int_equal(TUNER(&out, &err, "export-lib", "--db", db, "--target",
                           "llvm -mtriple=x86_64-pc-windows-msvc", "-o", lib, model),
                     TN_EXIT_FAIL);
    assert_non_null(strstr(err, "x86-64 Linux, aarch64 Linux or aarch64 Android only"));
    at_free(out);
    at_free(err);
    assert_int_equal(TUNER(&out, &err, "export-lib", model), TN_EXIT_USAGE);
    at_free(out);
    at_free(err);
}

/* The acceptance run: tune the small CNN on the embedded default (the real tuner: build
** workers, embedded tracker and agent, cost model), export the library, call it from C and
** run the whole model with it against the naive lowering. */
#define TUNER_BIN(out, err, ...)                                                           \
    mt_tuner_bin(dir, 240, out, err, (const char *const[]){__VA_ARGS__, NULL})

static void test_tune_end_to_end(void **unused)
{
    md_model *m = load("small_cnn.onnx");
    const md_task_list *tl = md_model_tasks(m);
    char *out, *err, prog[PATH_MAX], res[PATH_MAX];
    size_t n_ref;
    float *ref;
    (void)unused;
    assert_int_equal(TUNER_BIN(&out, &err, "--trials", "14", "--per-round", "2", "--population",
                               "64", "--build-workers", "1", "--flush-weights", "--db",
                               "e2e.db", "small_cnn.onnx"), TN_EXIT_OK);
    /* timed with the weights evicted: the jobs of the convolutions and the gemm carry their
    ** weights' bits, the pooling's have none to evict (and the library below is built
    ** from these records) */
    {
        const char *p = strstr(out, "evicted from the caches before each repeat: the weights of ");
        long long k, n;
        if (strstr(err, "timing with the weights evicted from the caches before each repeat") ==
                NULL || p == NULL ||
            sscanf(p, "evicted from the caches before each repeat: the weights of %lld of %lld",
                   &k, &n) != 2)
            fail_msg("a --flush-weights run does not say it evicts the weights:\n%s\n%s", out,
                     err);
        if (!(n >= 7 && k > 0 && k < n))
            fail_msg("weights evicted in %lld of %lld jobs: expected some, not all (pooling "
                     "has no weights)", k, n);
    }
    at_free(out);
    at_free(err);
    assert_int_equal(TUNER_BIN(&out, &err, "run", "--db", "e2e.db", "--threads", "2",
                               "small_cnn.onnx"), TN_EXIT_OK);
    assert_non_null(strstr(out, "7 with a tuned schedule, 0 naive"));
    assert_non_null(strstr(out, "OK: the outputs match"));
    at_free(out);
    at_free(err);
    assert_int_equal(TUNER_BIN(&out, &err, "export-lib", "--db", "e2e.db", "-o",
                               "libe2e.so", "small_cnn.onnx"), TN_EXIT_OK);
    assert_non_null(strstr(out, "7 kernels (7 tuned, 0 naive)"));
    at_free(out);
    at_free(err);
    assert_int_equal(TUNER_BIN(&out, &err, "run", "--lib", "libe2e.so", "--threads", "2",
                               "small_cnn.onnx"), TN_EXIT_OK);
    assert_non_null(strstr(out, "OK: the outputs match"));
    at_free(out);
    at_free(err);
    mt_path(prog, dir, "e2e.c");
    mt_path(res, dir, "e2e.bin");
    write_program(prog, "e2e", "libe2e.h", &tl->tasks[0], &tl->tasks[1], 2);
    assert_int_equal(sh("cd '%s' && cc -std=c11 -Wall -Werror -o e2e e2e.c -L. -le2e "
                        "-Wl,-rpath,'%s' && ./e2e '%s'", dir, dir, res), 0);
    ref = naive_outputs(&tl->tasks[0], &tl->tasks[1], &n_ref);
    compare_outputs(res, ref, n_ref, "tuned library from C");
    free(ref);
    md_model_free(m);
}

/* Weights given as graph inputs: filled like inputs, and the same values reach numpy. */
static void test_run_weights_as_inputs(void **unused)
{
    md_model *m = load("weights_as_inputs.onnx");
    char dump[PATH_MAX], err[1024];
    md_run_report rep;
    (void)unused;
    mt_path(dump, dir, "dump_wi");
    mkdir(dump, 0755);
    if (md_model_run(m, &(md_run_opts){.n_threads = 1, .seed = 9, .dump_dir = dump}, &rep, err,
                     sizeof err) != AT_OK)
        fail_msg("%s", err);
    assert_int_equal(rep.n_naive, 3);
    assert_true(rep.max_rel_err == 0); /* the same naive kernels twice */
    numpy_check("weights_as_inputs.onnx", dump);
    md_model_free(m);
}

/* Token ids (int64) into an embedding table (issue 17, item 1): random ids spread over the
** table, the run matches numpy; --inputs reads them back; an id outside the table is a
** clear error in tuner run and -2 from the exported library, never a read out of bounds. */
static void test_run_token_ids(void **unused)
{
    md_model *m = load("token_embed.onnx");
    const md_task_list *tl = md_model_tasks(m);
    char dump[PATH_MAX], bad[PATH_MAX], path[2 * PATH_MAX], model[PATH_MAX], lib[PATH_MAX],
        prog[PATH_MAX], err[1024], *out, *errs;
    md_run_report rep, again;
    md_export_report xr;
    int64_t *ids, mn = INT64_MAX, mx = INT64_MIN;
    size_t n;
    (void)unused;
    mt_path(dump, dir, "dump_ids");
    mt_path(bad, dir, "bad_ids");
    mt_path(model, dir, "token_embed.onnx");
    mkdir(bad, 0755);
    if (md_model_run(m, &(md_run_opts){.n_threads = 2, .seed = 4, .dump_dir = dump}, &rep, err,
                     sizeof err) != AT_OK)
        fail_msg("%s", err);
    assert_true(rep.max_rel_err <= 1e-5);
    numpy_check("token_embed.onnx", dump);
    snprintf(path, sizeof path, "%s/input_0.bin", dump);
    ids = (int64_t *)mt_read(path, &n);
    assert_int_equal(n, 8 * sizeof(int64_t));
    for (int i = 0; i < 8; i++) {
        mn = ids[i] < mn ? ids[i] : mn;
        mx = ids[i] > mx ? ids[i] : mx;
    }
    assert_true(mn >= 0 && mx < 50 && mx > 16); /* over the table, not the fill's [-16, 16] */
    /* the same ids read back (another seed would draw others): the same outputs */
    if (md_model_run(m, &(md_run_opts){.n_threads = 1, .seed = 99, .inputs_dir = dump}, &again,
                     err, sizeof err) != AT_OK)
        fail_msg("%s", err);
    assert_true(again.outputs[0].checksum == rep.outputs[0].checksum);
    /* an id past the table, and one before it (-51: ONNX allows -50..-1) */
    ids[5] = 50;
    snprintf(path, sizeof path, "%s/input_0.bin", bad);
    mt_write(path, ids, n);
    assert_int_equal(md_model_run(m, &(md_run_opts){.n_threads = 1, .inputs_dir = bad}, &again,
                                  err, sizeof err), AT_EINVAL);
    assert_non_null(strstr(err, "index 50 at position 5 of 'input_ids' is out of range"));
    assert_int_not_equal(TUNER(&out, &errs, "run", "--inputs", bad, model), 0);
    assert_non_null(strstr(errs, "out of range"));
    at_free(out);
    at_free(errs);
    ids[5] = -51;
    mt_write(path, ids, n);
    assert_int_equal(md_model_run(m, &(md_run_opts){.n_threads = 1, .inputs_dir = bad}, &again,
                                  err, sizeof err), AT_EINVAL);
    /* a file of the wrong size is named */
    mt_write(path, ids, n - 8);
    assert_int_equal(md_model_run(m, &(md_run_opts){.n_threads = 1, .inputs_dir = bad}, &again,
                                  err, sizeof err), AT_EINVAL);
    assert_non_null(strstr(err, "input_0.bin: 56 bytes"));
    assert_non_null(strstr(err, "int64"));
    /* the exported library: the header says int64, an id outside the table returns -2 */
    mt_path(lib, dir, "libtoken_embed.so");
    if (md_export_lib(tl, &(md_export_opts){.out_path = lib, .max_threads = 1, .model = m}, &xr,
                      err, sizeof err) != AT_OK)
        fail_msg("%s", err);
    mt_path(path, dir, "libtoken_embed.h");
    {
        char *h = mt_read(path, &n);
        assert_non_null(strstr(h, "input  0: 'input_ids' int64[1, 8]"));
        assert_non_null(strstr(h, "-2 when an integer input holds an index outside its table"));
        at_free(h);
    }
    mt_path(prog, dir, "ids_prog.c");
    {
        FILE *f = fopen(prog, "w");
        assert_non_null(f);
        fprintf(f, "#include <stdint.h>\n#include <stdio.h>\n#include \"libtoken_embed.h\"\n"
                   "int main(void)\n{\n    int64_t ids[8] = {0, 1, 2, 49, -1, -50, 7, 8};\n"
                   "    float y[8 * 16];\n    const float *in[1] = {(const float *)ids};\n"
                   "    float *outs[1] = {y};\n    int32_t a = token_embed_model_run(in, outs), b, c;\n"
                   "    ids[3] = 50;\n    b = token_embed_model_run(in, outs);\n"
                   "    ids[3] = -51;\n    c = token_embed_model_run(in, outs);\n"
                   "    printf(\"%%d %%d %%d\\n\", (int)a, (int)b, (int)c);\n"
                   "    return a == 0 && b == -2 && c == -2 ? 0 : 1;\n}\n");
        fclose(f);
    }
    assert_int_equal(sh("cd '%s' && cc -std=c11 -Wall -Werror -o ids_prog ids_prog.c -L. "
                        "-ltoken_embed -Wl,-rpath,'%s' && ./ids_prog", dir, dir), 0);
    at_free(ids);
    md_model_free(m);
}

/* An attention mask (int64) made into an additive float mask at run time (Unsqueeze of the
** integers, Cast to float, Sub, Mul) beside token ids: random 0/1 masks, matches numpy. */
static void test_run_attention_mask(void **unused)
{
    md_model *m = load("token_mask.onnx");
    char dump[PATH_MAX], path[2 * PATH_MAX], err[1024];
    md_run_report rep;
    int64_t *mask;
    int zeros = 0, ones = 0;
    size_t n;
    (void)unused;
    mt_path(dump, dir, "dump_mask");
    if (md_model_run(m, &(md_run_opts){.n_threads = 2, .seed = 3, .dump_dir = dump}, &rep, err,
                     sizeof err) != AT_OK)
        fail_msg("%s", err);
    assert_true(rep.max_rel_err <= 1e-4);
    numpy_check("token_mask.onnx", dump);
    snprintf(path, sizeof path, "%s/input_1.bin", dump);
    mask = (int64_t *)mt_read(path, &n);
    assert_int_equal(n, 8 * sizeof(int64_t));
    for (int i = 0; i < 8; i++) {
        assert_true(mask[i] == 0 || mask[i] == 1);
        zeros += mask[i] == 0;
        ones += mask[i] == 1;
    }
    assert_true(zeros > 0 && ones > 0);
    at_free(mask);
    md_model_free(m);
}

/* A small BERT (token ids and a mask, embeddings and their layer norm, 2 encoder layers
** with masked attention) as users export one: imports, runs and matches numpy. */
static void test_run_bert_tiny(void **unused)
{
    md_model *m = load("bert_tiny.onnx");
    char dump[PATH_MAX], err[1024];
    md_run_report rep;
    (void)unused;
    mt_path(dump, dir, "dump_bert");
    if (md_model_run(m, &(md_run_opts){.n_threads = 2, .seed = 5, .dump_dir = dump}, &rep, err,
                     sizeof err) != AT_OK)
        fail_msg("%s", err);
    printf("bert_tiny.onnx: %d tasks; max relative error %.3g against the naive lowering\n",
           rep.n_tasks, rep.max_rel_err);
    assert_true(rep.n_tasks >= 8);
    assert_true(rep.max_rel_err <= 1e-4);
    numpy_check("bert_tiny.onnx", dump);
    md_model_free(m);
}

/* Dynamic sequence length (issue 17, item 2): a BERT whose sequence dimension is symbolic,
** with records for two buckets (seq 8 and 16) and the buckets recorded in the store, runs
** at 11 and at 5 without another tuning: the inputs padded to the bucket (16, 8), the
** outputs cut back; each matches the naive lowering at its own length and numpy.  tuner run
** finds the bucket in the store (and refuses 17); the exported library holds both buckets
** and runs 11 from C through P_model_set_dim, giving tuner run's outputs. */
static void test_run_bert_buckets(void **unused)
{
    static const int64_t buckets[2] = {8, 16};
    md_model *bm[2], *e;
    md_task_list *tl;
    char db[PATH_MAX], model[PATH_MAX], dump[PATH_MAX], lib[PATH_MAX], prog[PATH_MAX],
        err[1024], *out, *errs;
    md_run_report rep;
    md_export_report xr;
    rec_store *st;
    int n_sampled;
    (void)unused;
    mt_path(model, dir, "bert_tiny_dyn.onnx");
    mt_path(db, dir, "buckets.db");
    for (int b = 0; b < 2; b++)
        bm[b] = load_opts("bert_tiny_dyn.onnx",
                          &(md_model_opts){.n_dims = 1, .dims = &(md_dim){"seq", buckets[b]}});
    assert_int_equal(md_task_list_union((const md_model *const *)bm, 2, &tl), AT_OK);
    assert_int_equal(tl->n_tasks, md_model_tasks(bm[0])->n_tasks + md_model_tasks(bm[1])->n_tasks);
    unlink(db);
    make_store(db, tl, 17, &n_sampled);
    assert_true(n_sampled >= tl->n_tasks - 4);
    assert_int_equal(rec_store_open(db, REC_OPEN_CREATE, &st, err, sizeof err), AT_OK);
    assert_int_equal(rec_buckets_put(st, md_model_sig(bm[0]), "seq", buckets, 2,
                                     "bert_tiny_dyn.onnx"), AT_OK);
    {
        int64_t v[4];
        int n;
        assert_int_equal(rec_buckets_get(st, md_model_sig(bm[0]), "seq", v, 4, &n), AT_OK);
        assert_int_equal(n, 2);
        assert_true(v[0] == 8 && v[1] == 16);
    }
    /* two lengths on the two buckets' kernels */
    for (int k = 1; k >= 0; k--) {
        int64_t len = k ? 11 : 5;
        char name[32];
        e = load_opts("bert_tiny_dyn.onnx",
                      &(md_model_opts){.n_dims = 1, .dims = &(md_dim){"seq", len}});
        snprintf(name, sizeof name, "dump_seq%lld", (long long)len);
        mt_path(dump, dir, name);
        if (md_model_run(bm[k], &(md_run_opts){.store = st, .device_key = DEVICE, .n_threads = 2,
                                               .seed = 6, .dump_dir = dump, .exact = e},
                         &rep, err, sizeof err) != AT_OK)
            fail_msg("%s", err);
        printf("bert_tiny_dyn at seq=%lld on bucket %lld: %d tuned of %d; max relative error "
               "%.3g\n", (long long)len, (long long)buckets[k], rep.n_tuned, rep.n_tasks,
               rep.max_rel_err);
        assert_true(rep.n_tuned == rep.n_tasks);
        assert_int_equal(rep.outputs[0].n_elems, len * 32);
        assert_true(rep.max_rel_err <= 1e-4);
        numpy_check("bert_tiny_dyn.onnx", dump);
        md_model_free(e);
    }
    /* a length above the largest bucket does not fit */
    e = load_opts("bert_tiny_dyn.onnx", &(md_model_opts){.n_dims = 1, .dims = &(md_dim){"seq", 12}});
    assert_int_equal(md_model_run(bm[0], &(md_run_opts){.store = st, .n_threads = 1, .exact = e},
                                  &rep, err, sizeof err), AT_EINVAL);
    assert_non_null(strstr(err, "does not fit in the bucket's"));
    md_model_free(e);
    /* the command: the store says which bucket */
    mt_path(dump, dir, "dump_seq11");
    assert_int_equal(TUNER(&out, &errs, "run", "--db", db, "--device", DEVICE, "--dim", "seq=11",
                           "--threads", "2", model), TN_EXIT_OK);
    assert_non_null(strstr(out, "dimensions: seq=11 on bucket 16 (of 8 16); inputs padded"));
    assert_non_null(strstr(out, "OK: the outputs match"));
    assert_null(strstr(errs, "warning"));
    at_free(out);
    at_free(errs);
    assert_int_equal(TUNER(&out, &errs, "run", "--db", db, "--dim", "seq=17", model),
                     TN_EXIT_FAIL);
    assert_non_null(strstr(errs, "seq=17 is above the largest bucket this model was tuned for "
                                 "(16)"));
    at_free(out);
    at_free(errs);
    assert_int_equal(TUNER(&out, &errs, "run", "--db", db, "--dim", "seq=8,16", model),
                     TN_EXIT_USAGE);
    at_free(out);
    at_free(errs);
    rec_store_close(st);
    /* the library: both buckets, the length from C */
    assert_int_equal(rec_store_open(db, REC_OPEN_READONLY, &st, err, sizeof err), AT_OK);
    mt_path(lib, dir, "libbert_dyn.so");
    if (md_export_lib(tl, &(md_export_opts){.store = st, .device_key = DEVICE, .out_path = lib,
                                            .max_threads = 2,
                                            .buckets = (const md_model *const *)bm,
                                            .n_buckets = 2},
                      &xr, err, sizeof err) != AT_OK)
        fail_msg("%s", err);
    rec_store_close(st);
    assert_int_equal(xr.n_buckets, 2);
    assert_int_equal(xr.n_tuned, tl->n_tasks);
    {
        char path[PATH_MAX];
        size_t n;
        char *h;
        mt_path(path, dir, "libbert_dyn.h");
        h = mt_read(path, &n);
        assert_non_null(strstr(h, "input  0: 'input_ids' int64[1, seq]"));
        assert_non_null(strstr(h, "'seq' buckets 8, 16"));
        assert_non_null(strstr(h, "int bert_dyn_model_set_dim(const char *name, long long n);"));
        at_free(h);
    }
    mt_path(prog, dir, "len_prog.c");
    {
        FILE *f = fopen(prog, "w");
        assert_non_null(f);
        fprintf(f,
            "#include <math.h>\n#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n"
            "#include \"libbert_dyn.h\"\n"
            "static void *rd(const char *p, long n)\n{\n    void *b = malloc(n);\n"
            "    FILE *f = fopen(p, \"rb\");\n"
            "    if (!f || fread(b, 1, n, f) != (size_t)n) exit(3);\n    fclose(f);\n    return b;\n}\n"
            "int main(int argc, char **argv)\n{\n    char p[4096];\n    int64_t *ids, *mask;\n"
            "    float *ref, y[16 * 32], worst = 0, big = 0;\n    int rc;\n"
            "    if (argc < 2) return 2;\n"
            "    /* the sizes follow the length; outside the buckets, or another name: -1 */\n"
            "    if (bert_dyn_model_n_dims() != 1 || bert_dyn_model_n_buckets(0) != 2 ||\n"
            "        bert_dyn_model_bucket(0, 1) != 16 || bert_dyn_model_input_size(0) != 16)\n"
            "        return 4;\n"
            "    if (bert_dyn_model_set_dim(\"seq\", 17) != -1 || bert_dyn_model_set_dim(\"seq\", 0) != -1 ||\n"
            "        bert_dyn_model_set_dim(\"len\", 4) != -1 || bert_dyn_model_set_dim(\"seq\", 11) != 0)\n"
            "        return 5;\n"
            "    if (bert_dyn_model_dim(\"seq\") != 11 || bert_dyn_model_input_size(1) != 11 ||\n"
            "        bert_dyn_model_output_size(0) != 11 * 32)\n        return 6;\n"
            "    snprintf(p, sizeof p, \"%%s/input_0.bin\", argv[1]);\n    ids = rd(p, 11 * 8);\n"
            "    snprintf(p, sizeof p, \"%%s/input_1.bin\", argv[1]);\n    mask = rd(p, 11 * 8);\n"
            "    snprintf(p, sizeof p, \"%%s/output_0.bin\", argv[1]);\n    ref = rd(p, 11 * 32 * 4);\n"
            "    bert_dyn_set_threads(2);\n"
            "    {\n        const float *in[2] = {(const float *)ids, (const float *)mask};\n"
            "        float *outs[1] = {y};\n"
            "        y[11 * 32] = 12345.0f; /* past the cut: never written */\n"
            "        if ((rc = bert_dyn_model_run(in, outs)) != 0) return 7;\n"
            "        if (y[11 * 32] != 12345.0f) return 8;\n"
            "        for (int i = 0; i < 11 * 32; i++) {\n"
            "            float d = fabsf(y[i] - ref[i]);\n"
            "            worst = d > worst ? d : worst;\n"
            "            big = fabsf(ref[i]) > big ? fabsf(ref[i]) : big;\n        }\n"
            "        printf(\"seq 11 from C: max error %%g of %%g\\n\", worst, big);\n"
            "        if (!(worst <= 1e-5f * big)) return 9;\n"
            "        ids[3] = 1000; /* outside the table: -2 */\n"
            "        if (bert_dyn_model_run(in, outs) != -2) return 10;\n    }\n"
            "    return 0;\n}\n");
        fclose(f);
    }
    mt_path(dump, dir, "dump_seq11");
    assert_int_equal(sh("cd '%s' && cc -std=c11 -Wall -Werror -o len_prog len_prog.c -L. "
                        "-lbert_dyn -lm -Wl,-rpath,'%s' && ./len_prog '%s'", dir, dir, dump), 0);
    md_task_list_free(tl);
    md_model_free(bm[0]);
    md_model_free(bm[1]);
    unlink(db);
}

/* Masks as transformers' newer code exports them (issue 17, item 1): the mask Expanded to
** [1, 1, S, S] with a shape computed from the ids' Shape, Cast to float, inverted, Cast to
** bool and filled by Where with finfo.min; positions from Range.  At seq 11 on bucket 16's
** drawn schedules (padded), against the naive lowering at 11 and numpy.  And mask_ops: the
** comparisons, Not, Where and Casts to bool at run time, Range/Expand/Where on constants. */
static void test_run_bert_hf_mask(void **unused)
{
    md_model *b16, *e11, *mo;
    char db[PATH_MAX], dump[PATH_MAX], err[1024];
    md_run_report rep;
    rec_store *st;
    int n_sampled;
    (void)unused;
    mo = load("mask_ops.onnx");
    mt_path(dump, dir, "dump_mask_ops");
    if (md_model_run(mo, &(md_run_opts){.n_threads = 1, .seed = 3, .dump_dir = dump}, &rep, err,
                     sizeof err) != AT_OK)
        fail_msg("%s", err);
    assert_true(rep.max_rel_err <= 1e-6);
    numpy_check("mask_ops.onnx", dump);
    md_model_free(mo);
    b16 = load_opts("bert_tiny_hf.onnx", &(md_model_opts){.n_dims = 1, .dims = &(md_dim){"seq", 16}});
    e11 = load_opts("bert_tiny_hf.onnx", &(md_model_opts){.n_dims = 1, .dims = &(md_dim){"seq", 11}});
    assert_int_equal(md_model_n_warnings(b16), 0);
    {
        int where = 0;
        const md_task_list *tl = md_model_tasks(b16);
        for (int i = 0; i < tl->n_tasks; i++)
            where += strstr(tl->tasks[i].desc, "where") != NULL;
        assert_int_equal(where, 1); /* the mask's elementwise task */
    }
    mt_path(db, dir, "hf.db");
    unlink(db);
    make_store(db, md_model_tasks(b16), 23, &n_sampled);
    assert_int_equal(rec_store_open(db, REC_OPEN_READONLY, &st, err, sizeof err), AT_OK);
    mt_path(dump, dir, "dump_hf11");
    if (md_model_run(b16, &(md_run_opts){.store = st, .device_key = DEVICE, .n_threads = 2,
                                         .seed = 7, .dump_dir = dump, .exact = e11},
                     &rep, err, sizeof err) != AT_OK)
        fail_msg("%s", err);
    printf("bert_tiny_hf at seq=11 on bucket 16: %d tuned; max relative error %.3g\n",
           rep.n_tuned, rep.max_rel_err);
    assert_true(rep.max_rel_err <= 1e-4);
    numpy_check("bert_tiny_hf.onnx", dump);
    rec_store_close(st);
    md_model_free(b16);
    md_model_free(e11);
    unlink(db);
}

/* BertModel's computation written in torch and exported with the sequence symbolic
** (make_models.py tv_bert_small, when python3-torch is installed): tuned-like records for
** buckets 16 and 32, runs at 20 and at 9 on them, against the naive lowering and numpy. */
static void test_run_torch_bert(void **unused)
{
    static const int64_t buckets[2] = {16, 32}, lens[2] = {9, 20};
    md_model *bm[2];
    md_task_list *tl;
    char db[PATH_MAX], err[1024];
    rec_store *st;
    int n_sampled;
    (void)unused;
    if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
        fprintf(stderr, "SKIP (python3-torch not installed)\n");
        skip();
    }
    mt_make_models(dir, "tv_bert_small");
    for (int b = 0; b < 2; b++) {
        bm[b] = load_opts("tv_bert_small.onnx",
                          &(md_model_opts){.n_dims = 1, .dims = &(md_dim){"seq", buckets[b]}});
        assert_int_equal(md_model_n_warnings(bm[b]), 0);
    }
    assert_int_equal(md_task_list_union((const md_model *const *)bm, 2, &tl), AT_OK);
    mt_path(db, dir, "torch_bert.db");
    unlink(db);
    make_store(db, tl, 29, &n_sampled);
    assert_int_equal(rec_store_open(db, REC_OPEN_READONLY, &st, err, sizeof err), AT_OK);
    for (int k = 0; k < 2; k++) {
        md_model *e = load_opts("tv_bert_small.onnx",
                                &(md_model_opts){.n_dims = 1, .dims = &(md_dim){"seq", lens[k]}});
        md_run_report rep;
        char dump[PATH_MAX], name[32];
        snprintf(name, sizeof name, "dump_tb%lld", (long long)lens[k]);
        mt_path(dump, dir, name);
        if (md_model_run(bm[k], &(md_run_opts){.store = st, .device_key = DEVICE,
                                               .n_threads = 2, .seed = 9, .dump_dir = dump,
                                               .exact = e},
                         &rep, err, sizeof err) != AT_OK)
            fail_msg("%s", err);
        printf("tv_bert_small at seq=%lld on bucket %lld: %d tuned of %d; max relative error "
               "%.3g\n", (long long)lens[k], (long long)buckets[k], rep.n_tuned, rep.n_tasks,
               rep.max_rel_err);
        assert_true(rep.max_rel_err <= 1e-4);
        numpy_check("tv_bert_small.onnx", dump);
        md_model_free(e);
    }
    rec_store_close(st);
    md_task_list_free(tl);
    md_model_free(bm[0]);
    md_model_free(bm[1]);
    unlink(db);
}

/* torch.nn.TransformerEncoderLayer as torch exports it (packed QKV projection cut with
** Slice at run time, Shape/Gather/Concat arithmetic, decomposed layer norms, Erf GELU):
** run here against numpy (when python3-torch is installed). */
static void test_run_torch_encoder(void **unused)
{
    md_model *m;
    char dump[PATH_MAX], err[1024];
    md_run_report rep;
    (void)unused;
    if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
        fprintf(stderr, "SKIP (python3-torch not installed)\n");
        skip();
    }
    mt_make_models(dir, "tv_encoder");
    m = load("tv_encoder.onnx");
    assert_int_equal(md_model_n_warnings(m), 0);
    /* 8: the packed projection is three dense layers of the output projection's shape, the
    ** 1/sqrt(d) scaling is in the Q weights, the residual Add is fused */
    assert_int_equal(md_model_tasks(m)->n_tasks, 8);
    mt_path(dump, dir, "dump_enc");
    mkdir(dump, 0755);
    if (md_model_run(m, &(md_run_opts){.n_threads = 2, .seed = 4, .dump_dir = dump}, &rep, err,
                     sizeof err) != AT_OK)
        fail_msg("%s", err);
    numpy_check("tv_encoder.onnx", dump);
    md_model_free(m);
}

/* AT_TEST_LONG=1: ResNet-18 and MobileNetV2 run here (naive kernels, 2 threads) and
** checked against numpy: the BatchNormalization folding, residuals, depthwise convolutions
** and Clip of the large models end to end (a minute or two); ResNet-18 also with its 13
** 3x3 convolutions as Winograd (MobileNetV2 has none eligible). */
static void test_long_large_models(void **unused)
{
    static const char *const models[] = {"resnet18.onnx", "mobilenet_v2.onnx"};
    (void)unused;
    if (getenv("AT_TEST_LONG") == NULL || strcmp(getenv("AT_TEST_LONG"), "1") != 0) {
        fprintf(stderr, "SKIP (AT_TEST_LONG=1 runs ResNet-18 and MobileNetV2)\n");
        skip();
    }
    mt_make_models(dir, "resnet18 mobilenet_v2");
    for (size_t i = 0; i <= AT_ARRAY_LEN(models); i++) {
        int wino = i == AT_ARRAY_LEN(models);
        md_model *m = wino ? load_opts(models[0], &(md_model_opts){.winograd = MD_WINOGRAD_ON})
                           : load(models[i]);
        char dump[PATH_MAX], err[1024];
        md_run_report rep;
        mt_path(dump, dir, "dump_long");
        mkdir(dump, 0755);
        if (md_model_run(m, &(md_run_opts){.n_threads = 2, .seed = 6, .no_check = 1,
                                           .dump_dir = dump},
                         &rep, err, sizeof err) != AT_OK)
            fail_msg("%s: %s", models[wino ? 0 : i], err);
        if (wino) {
            md_model_info info;
            md_model_get_info(m, &info);
            assert_int_equal(info.n_winograd, 13);
        }
        numpy_check(models[wino ? 0 : i], dump);
        md_model_free(m);
    }
}

static void test_cannot_run_unsupported(void **unused)
{
    char path[PATH_MAX], err[1024];
    md_model *m;
    md_run_report rep;
    (void)unused;
    mt_make_models(dir, "unsupported_op");
    mt_path(path, dir, "unsupported_op.onnx");
    assert_int_equal(md_model_load(path, NULL, &m, err, sizeof err), AT_OK);
    assert_int_equal(md_model_run(m, &(md_run_opts){.n_threads = 1}, &rep, err, sizeof err),
                     AT_EUNSUPPORTED);
    assert_non_null(strstr(err, "node 'mystery' (FancyOp) is not supported"));
    md_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_small_cnn),
        cmocka_unit_test(test_run_transformer),
        cmocka_unit_test(test_winograd_model),
        cmocka_unit_test(test_run_weights_as_inputs),
        cmocka_unit_test(test_run_token_ids),
        cmocka_unit_test(test_run_attention_mask),
        cmocka_unit_test(test_run_bert_tiny),
        cmocka_unit_test(test_run_bert_buckets),
        cmocka_unit_test(test_run_bert_hf_mask),
        cmocka_unit_test(test_run_torch_encoder),
        cmocka_unit_test(test_run_torch_bert),
        cmocka_unit_test(test_export),
        cmocka_unit_test(test_export_model),
        cmocka_unit_test(test_cli),
        cmocka_unit_test(test_winograd_cli),
        cmocka_unit_test(test_tune_end_to_end),
        cmocka_unit_test(test_cannot_run_unsupported),
        cmocka_unit_test(test_long_large_models),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
