/* tests/kernels/test_space.c -- the template-free schedule space.
**
** For every library operator of the schedule-space issue and three DAGs written in the text
** format that are not in the library: 300 random states and 300 mutants lower and pass
** LLVM's module verification; 60 of them are compiled and compute the same result as the
** naive lowering: 16 built as the tuner builds them (LLVM's full optimisation), 44 with
** the quick build (a light IR cleanup and quick instruction selection: the same IR, built
** 4-5x faster in total).  'make test-long' (AT_TEST_LONG=1) checks 2,000 of each and builds
** 400 of them fully and runs them (all 4,000 took about 4 minutes a DAG, an hour in all).
** (2,000 and 200 compiled, then 140, then 100, until the suite grew past 'make test''s 15
** minutes: this test alone is its critical path.)  Also:
** the same seed gives the same sketches, samples and mutants; sketch counts of well-known
** operators; errors for bad targets and DAGs no rule fits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

#define N_STATES (getenv("N_STATES") ? atoi(getenv("N_STATES")) : long_mode ? 2000 : 300)
#define N_MUTANTS N_STATES
#define N_COMPILED 60 /* compiled and run, half of them states and half mutants */
#define N_FULL 16     /* of them, built with the full optimisation; the rest quick builds */
#define N_COMPILED_LONG 400 /* compiled, all fully, and run in test-long */

static kn_target host, host_quick;
static ss_hw hw;
static kn_rt_pool *pool;
static int long_mode;

static const char *custom_dags[] = {
    /* a 1-D convolution (reads at offsets) with a clamp (min/max) */
    "input X[4, 130] float32\n"
    "const K[3] float32\n"
    "Y[b:4, i:128] = sum[t:3](X[b, i + t] * K[t])\n"
    "Z[b:4, i:128] = min(max(Y[b, i], -0.5), 0.5)\n",
    /* a bilinear form with a scaled exponential: two reductions in a chain */
    "input A[16, 24] float32\n"
    "const W[24, 32] float32\n"
    "input V[32] float32\n"
    "H[i:16, j:32] = sum[k:24](A[i, k] * W[k, j])\n"
    "E[i:16, j:32] = exp(H[i, j] * 0.1) * V[j]\n"
    "S[i:16] = sum[j:32](E[i, j])\n",
    /* a strided 2-D pooling-like max over a transposed input, integer arithmetic inside */
    "input P[3, 20, 18] float32\n"
    "T[c:3, x:18, y:20] = P[c, y, x] * float32((x + y) % 3 + 1)\n"
    "M[c:3, x:9, y:10] = max[dx:2, dy:2](T[c, x * 2 + dx, y * 2 + dy])\n",
};

static const char *ops[] = {
    "matmul:M=64,N=48,K=32",
    "batch_matmul:B=2,M=16,N=24,K=16",
    "dense:M=8,N=48,K=64,bias=1,relu=1",
    "conv2d:N=1,C=8,H=14,W=14,K=16,R=3,S=3,pad=1",
    "conv2d:layout=NHWC,N=1,C=8,H=14,W=14,K=16,R=3,S=3,stride=2,pad=1",
    "conv2d:N=1,C=8,H=14,W=14,K=16,R=3,S=3,pad=1,bias=1,relu=1",
    "conv2d:layout=NHWC,N=1,C=8,H=14,W=14,K=16,R=3,S=3,pad=1,bias=1,relu=1",
    "depthwise_conv2d:N=1,C=16,H=14,W=14,R=3,S=3,pad=1",
    "max_pool2d:N=1,C=8,H=16,W=16,kernel=3,stride=2,pad=1",
    "softmax:M=2,N=256",
    "layer_norm:M=8,N=128",
};

static ss_dag *dag_of(const char *spec_or_text)
{
    ss_dag *dag;
    char err[256];
    at_err e = strchr(spec_or_text, '\n')
                   ? ss_dag_parse(spec_or_text, strlen(spec_or_text), &dag, err, sizeof err)
                   : kn_op_build(spec_or_text, &dag, err, sizeof err);
    if (e != AT_OK)
        fail_msg("%s", err);
    return dag;
}

/* Checks run on worker threads: failures are collected as text, reported by the main
** thread (cmocka's asserts are not thread-safe). */
typedef struct job {
    ss_state *st;
    int compile, quick, run;
} job;

typedef struct work {
    job *jobs;
    int n;
    _Atomic int next;
    const kn_bufset *ref;
    const char *what;
    pthread_mutex_t lock;
    char failure[2048];
} work;

static void fail_once(work *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail_once(work *w, const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&w->lock);
    if (w->failure[0] == 0) {
        va_start(ap, fmt);
        vsnprintf(w->failure, sizeof w->failure, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&w->lock);
}

static void check_one(work *w, const job *jb)
{
    kn_ir *ir;
    kn_artifact *a;
    kn_bufset bs;
    char err[512];
    at_buf j;
    at_buf_init(&j);
    ss_state_to_json(jb->st, &j);
    if (kn_lower(jb->st, &ir, err, sizeof err) != AT_OK) {
        fail_once(w, "%s: a state does not lower: %s\n%s", w->what, err, j.data);
        goto out;
    }
    if (kn_verify(ir, &host, err, sizeof err) != AT_OK) {
        fail_once(w, "%s: LLVM rejects a state's module: %s\n%s", w->what, err, j.data);
        goto out_ir;
    }
    if (!jb->compile)
        goto out_ir;
    if (kn_build(ir, jb->quick ? &host_quick : &host, NULL, &a, err, sizeof err) != AT_OK) {
        fail_once(w, "%s: %s build: %s\n%s", w->what, jb->quick ? "quick" : "full", err,
                  j.data);
        goto out_ir;
    }
    if (jb->run && kn_bufset_alloc(a, 3, &bs) == AT_OK) {
        if (kn_run_once(a, &bs, kn_rt_serial_par(), err, sizeof err) != AT_OK)
            fail_once(w, "%s: run (%s build): %s\n%s", w->what, jb->quick ? "quick" : "full",
                      err, j.data);
        else
            for (int o = 0; o < w->ref->n; o++) {
                double e;
                if (w->ref->ptr[o] == NULL || bs.n_bytes[o] != w->ref->n_bytes[o])
                    continue;
                e = kn_rt_rel_err(bs.ptr[o], w->ref->ptr[o], bs.dtype[o], bs.n_elems[o]);
                if (!(e <= 1e-4))
                    fail_once(w, "%s: output %d differs from the naive lowering (rel err %g, "
                              "%s build)\n%s", w->what, o, e, jb->quick ? "quick" : "full",
                              j.data);
            }
        kn_bufset_free(&bs);
    }
    kn_artifact_free(a);
out_ir:
    kn_ir_free(ir);
out:
    at_buf_fini(&j);
}

static void *worker(void *arg)
{
    work *w = arg;
    for (;;) {
        int i = atomic_fetch_add(&w->next, 1);
        if (i >= w->n)
            return NULL;
        check_one(w, &w->jobs[i]);
    }
}

static void run_jobs(work *w)
{
    pthread_t th[2];
    for (int t = 0; t < 2; t++)
        assert_int_equal(pthread_create(&th[t], NULL, worker, w), 0);
    for (int t = 0; t < 2; t++)
        pthread_join(th[t], NULL);
    if (w->failure[0])
        fail_msg("%s", w->failure);
}

static void check_space(const char *spec)
{
    ss_dag *dag = dag_of(spec);
    ss_space *sp;
    ss_state *naive;
    kn_bufset ref;
    kn_artifact *a;
    kn_ir *ir;
    at_rng rng;
    char err[512];
    int n_states = 0, n_mut = 0, tries = 0, n = N_STATES;
    work w;
    memset(&w, 0, sizeof w);
    pthread_mutex_init(&w.lock, NULL);
    w.what = spec;
    w.jobs = calloc((size_t)n * 2, sizeof *w.jobs);
    assert_int_equal(ss_space_new(dag, &hw, NULL, &sp, err, sizeof err), AT_OK);
    assert_true(ss_space_n_sketches(sp) >= 1);
    /* the reference: the naive lowering's outputs */
    assert_int_equal(ss_state_new(dag, &naive), AT_OK);
    assert_int_equal(kn_lower(naive, &ir, err, sizeof err), AT_OK);
    assert_int_equal(kn_build(ir, &host, NULL, &a, err, sizeof err), AT_OK);
    assert_int_equal(kn_bufset_alloc(a, 3, &ref), AT_OK);
    assert_int_equal(kn_run_once(a, &ref, kn_rt_serial_par(), err, sizeof err), AT_OK);
    for (int i = 0; i < dag->n_inputs; i++) {
        kn_rt_free(ref.ptr[i]); /* compare outputs only */
        ref.ptr[i] = NULL;
    }
    kn_artifact_free(a);
    kn_ir_free(ir);
    w.ref = &ref;
    at_rng_seed(&rng, 2024);
    while (n_states < n && tries++ < 2 * n) {
        ss_state *st;
        at_err e = ss_space_sample(sp, &rng, &st);
        if (e == AT_ESCHED)
            continue;
        assert_int_equal(e, AT_OK);
        w.jobs[w.n].st = st;
        w.jobs[w.n].compile = n_states < (long_mode ? N_COMPILED_LONG : N_COMPILED) / 2;
        w.jobs[w.n].quick = !long_mode && n_states >= N_FULL / 2;
        w.jobs[w.n].run = w.jobs[w.n].compile;
        w.n++;
        n_states++;
    }
    assert_int_equal(n_states, n);
    tries = 0;
    while (n_mut < n && tries++ < 20 * n) {
        ss_state *m;
        at_err e = ss_space_mutate(sp, w.jobs[at_rng_below(&rng, (uint64_t)n_states)].st, &rng,
                                   -1, &m);
        if (e == AT_ESCHED)
            continue;
        assert_int_equal(e, AT_OK);
        w.jobs[w.n].st = m;
        w.jobs[w.n].compile = n_mut < (long_mode ? N_COMPILED_LONG : N_COMPILED) / 2;
        w.jobs[w.n].quick = !long_mode && n_mut >= N_FULL / 2;
        w.jobs[w.n].run = w.jobs[w.n].compile;
        w.n++;
        n_mut++;
    }
    if (n_mut < n)
        fail_msg("%s: only %d mutants in %d tries", spec, n_mut, tries);
    run_jobs(&w);
    printf("%-75s %d sketches, %d states, %d mutants\n", spec, ss_space_n_sketches(sp), n_states,
           n_mut);
    for (int i = 0; i < w.n; i++)
        ss_state_free(w.jobs[i].st);
    free(w.jobs);
    pthread_mutex_destroy(&w.lock);
    kn_bufset_free(&ref);
    ss_state_free(naive);
    ss_space_free(sp);
    ss_dag_unref(dag);
}

static void test_library_operators(void **unused)
{
    (void)unused;
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        check_space(ops[i]);
}

static void test_custom_dags(void **unused)
{
    (void)unused;
    for (size_t i = 0; i < sizeof custom_dags / sizeof custom_dags[0]; i++)
        check_space(custom_dags[i]);
}

static char *json_of(const ss_state *st)
{
    at_buf b;
    at_buf_init(&b);
    ss_state_to_json(st, &b);
    return at_buf_take(&b);
}

static void test_same_seed_same_results(void **unused)
{
    ss_dag *dag = dag_of("conv2d:N=1,C=8,H=14,W=14,K=16,R=3,S=3,pad=1,bias=1,relu=1");
    ss_space *a, *b;
    at_rng ra, rb;
    char err[256];
    (void)unused;
    assert_int_equal(ss_space_new(dag, &hw, NULL, &a, err, sizeof err), AT_OK);
    assert_int_equal(ss_space_new(dag, &hw, NULL, &b, err, sizeof err), AT_OK);
    assert_int_equal(ss_space_n_sketches(a), ss_space_n_sketches(b));
    for (int i = 0; i < ss_space_n_sketches(a); i++) {
        char *x = json_of(ss_space_sketch(a, i)), *y = json_of(ss_space_sketch(b, i));
        assert_string_equal(x, y);
        at_free(x);
        at_free(y);
    }
    at_rng_seed(&ra, 77);
    at_rng_seed(&rb, 77);
    for (int i = 0; i < 200; i++) {
        ss_state *sa, *sb, *ma = NULL, *mb = NULL;
        char *x, *y;
        at_err ea = ss_space_sample(a, &ra, &sa), eb = ss_space_sample(b, &rb, &sb);
        assert_int_equal(ea, eb);
        if (ea)
            continue;
        x = json_of(sa), y = json_of(sb);
        assert_string_equal(x, y);
        at_free(x);
        at_free(y);
        ea = ss_space_mutate(a, sa, &ra, -1, &ma);
        eb = ss_space_mutate(b, sb, &rb, -1, &mb);
        assert_int_equal(ea, eb);
        if (ea == AT_OK) {
            x = json_of(ma), y = json_of(mb);
            assert_string_equal(x, y);
            at_free(x);
            at_free(y);
        }
        ss_state_free(ma);
        ss_state_free(mb);
        ss_state_free(sa);
        ss_state_free(sb);
    }
    /* another seed gives other samples */
    {
        ss_state *sa, *sb;
        int differ = 0;
        at_rng_seed(&ra, 1);
        at_rng_seed(&rb, 2);
        for (int i = 0; i < 20 && !differ; i++) {
            char *x, *y;
            if (ss_space_sample(a, &ra, &sa) || ss_space_sample(b, &rb, &sb))
                continue;
            x = json_of(sa), y = json_of(sb);
            differ = strcmp(x, y) != 0;
            at_free(x);
            at_free(y);
            ss_state_free(sa);
            ss_state_free(sb);
        }
        assert_true(differ);
    }
    ss_space_free(a);
    ss_space_free(b);
    ss_dag_unref(dag);
}

static void test_sketch_counts(void **unused)
{
    static const struct {
        const char *spec;
        int cores, n;
    } cases[] = {
        {"matmul:M=512,N=512,K=512", 2, 3},
        {"matmul:M=8,N=8,K=512", 4, 5},
        {"conv2d:N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1,bias=1,relu=1", 2, 3},
        {"max_pool2d", 2, 1},
        {"softmax:M=1,N=1024", 2, 9},
    };
    (void)unused;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ss_dag *dag = dag_of(cases[i].spec);
        ss_space *sp;
        ss_hw h;
        char err[256];
        ss_hw_cpu(&h, cases[i].cores, 64, 32768, 1 << 20);
        assert_int_equal(ss_space_new(dag, &h, NULL, &sp, err, sizeof err), AT_OK);
        if (ss_space_n_sketches(sp) != cases[i].n)
            fail_msg("%s: %d sketches, expected %d", cases[i].spec, ss_space_n_sketches(sp),
                     cases[i].n);
        ss_space_free(sp);
        ss_dag_unref(dag);
    }
}

static void test_bad_targets(void **unused)
{
    static const struct {
        const char *text, *msg;
    } cases[] = {
        {"", "empty target string"},
        {"rocm -mcpu=gfx90a", "target 'rocm -mcpu=gfx90a': it must start with 'llvm'"},
        {"cuda -arch=sm_70", "target 'cuda -arch=sm_70': sm_70 is older than sm_75"},
        {"llvm -mtriple=riscv64-linux-gnu", "target 'llvm -mtriple=riscv64-linux-gnu': "},
        {"llvm -mcpu", "target 'llvm -mcpu': option '-mcpu' has no value"},
        {"llvm -mfoo=bar", "target 'llvm -mfoo=bar': unknown option '-mfoo'"},
        {"llvm -mattr=avx2", "target 'llvm -mattr=avx2': each -mattr feature starts with + or -"},
        {"llvm -num-cores=0", "target 'llvm -num-cores=0': -num-cores must be 1 to 4096"},
        {"llvm -prefetch-bytes=-64",
         "target 'llvm -prefetch-bytes=-64': -prefetch-bytes must be 0 to 65536"},
        {"llvm -mtriple=aarch64-linux-gnu -mcpu=native", "target 'llvm -mtriple=aarch64-linux-gnu "
                                                        "-mcpu=native': -mcpu=native needs the host's"},
    };
    (void)unused;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kn_target t;
        char err[512];
        assert_int_equal(kn_target_parse(cases[i].text, &t, err, sizeof err), AT_EINVAL);
        if (strncmp(err, cases[i].msg, strlen(cases[i].msg)) != 0)
            fail_msg("'%s': got '%s'", cases[i].text, err);
    }
    {
        kn_target t;
        assert_int_equal(kn_target_parse("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76 "
                                         "-mattr=+neon -num-cores=8",
                                         &t, NULL, 0),
                         AT_OK);
        assert_int_equal(t.vector_bytes, 16);
        assert_int_equal(t.n_cores, 8);
        assert_true(t.is_aarch64);
    }
}

static void test_no_sketch(void **unused)
{
    ss_space *sp = (ss_space *)1;
    char err[256];
    ss_rule none[] = {{NULL, NULL, NULL, NULL}};
    ss_dag *dag = dag_of("relu:shape=8x8");
    (void)unused;
    /* with no rule at all nothing is derived */
    assert_int_equal(ss_space_new(dag, &hw, none, &sp, err, sizeof err), AT_EUNSUPPORTED);
    assert_null(sp);
    assert_non_null(strstr(err, "no sketch rule applies"));
    ss_dag_unref(dag);
}

static int setup(void **unused)
{
    (void)unused;
    long_mode = getenv("AT_TEST_LONG") != NULL;
    if (kn_target_host(&host) != AT_OK || kn_rt_pool_new(2, &pool) != AT_OK)
        return -1;
    host_quick = host;
    host_quick.quick_build = 1;
    ss_hw_cpu(&hw, host.n_cores, host.vector_bytes, host.l1_bytes, host.l2_bytes);
    return 0;
}

static int teardown(void **unused)
{
    (void)unused;
    kn_rt_pool_free(pool);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_targets),
        cmocka_unit_test(test_no_sketch),
        cmocka_unit_test(test_sketch_counts),
        cmocka_unit_test(test_same_seed_same_results),
        cmocka_unit_test(test_custom_dags),
        cmocka_unit_test(test_library_operators),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
