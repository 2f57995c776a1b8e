/* tests/tuner/test_build.c -- the build workers (tuner/tn_build.c), through real worker
** processes: the tuner binary (build/<flavour>/bin/tuner __build-worker) and, for the ways a
** worker can fail, small shell scripts in its place.
**
**   - random states of a matmul and a conv2d (with its layout rewrite) come back from a
**     worker as artifacts, carried by the wire library's BUILD_RES, that compute what the
**     naive lowering computes on random inputs; so do the same states built in process
**     (0 workers);
**   - a state that does not parse comes back as that error, with the parser's sentence;
**   - a worker that answers garbage, one that dies and one that hangs give a malformed-
**     result error, a died error and a timeout, and the pool goes on with new workers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "tests/support/test_dirs.h"
#include "tuner/tuner.h"

static char bin[PATH_MAX + 16], dir[64];

#define MAX_RES 16
#define N_STATES 3 /* per operator and pool */

typedef struct got {
    int n;
    tn_build_res r[MAX_RES];
} got;

static void on_built(void *ctx, const tn_build_res *r)
{
    got *g = ctx;
    if (g->n < MAX_RES)
        g->r[g->n++] = *r;
    else
        kn_artifact_free(r->art);
}

/* Poll until 'n' results came (at most 'limit_s' seconds). */
static void wait_for(tn_builder *b, got *g, int n, double limit_s)
{
    double end = at_time_mono_s() + limit_s;
    while (g->n < n && at_time_mono_s() < end)
        assert_int_equal(tn_builder_poll(b, 200, on_built, g), AT_OK);
    assert_int_equal(g->n, n);
}

static const tn_build_res *by_id(const got *g, int64_t id)
{
    for (int i = 0; i < g->n; i++)
        if (g->r[i].id == id)
            return &g->r[i];
    fail_msg("no result for request %lld", (long long)id);
    return NULL;
}

/* The naive lowering of 'dag', built here, run on random inputs. */
static void naive_outputs(ss_dag *dag, kn_bufset *y)
{
    ss_state *naive;
    kn_artifact *ref;
    kn_target host;
    char err[512];
    assert_int_equal(kn_target_host(&host), AT_OK);
    assert_int_equal(ss_state_new(dag, &naive), AT_OK);
    assert_int_equal(kn_build_state(naive, &host, NULL, &ref, err, sizeof err), AT_OK);
    assert_int_equal(kn_bufset_alloc(ref, 11, y), AT_OK);
    assert_int_equal(kn_run_once(ref, y, kn_rt_serial_par(), err, sizeof err), AT_OK);
    kn_artifact_free(ref);
    ss_state_free(naive);
}

/* The outputs of 'a' on the same inputs match the naive lowering's ('y'). */
static void check_matches_naive(const kn_bufset *y, const kn_artifact *a)
{
    kn_bufset x;
    char err[512];
    int n_out = 0;
    assert_int_equal(kn_bufset_alloc(a, 11, &x), AT_OK);
    assert_int_equal(kn_run_once(a, &x, kn_rt_serial_par(), err, sizeof err), AT_OK);
    for (int i = 0; i < a->n_args; i++) {
        if (!a->args[i].is_output)
            continue;
        n_out++;
        assert_true(kn_rt_rel_err(x.ptr[i], y->ptr[i], x.dtype[i], x.n_elems[i]) <= 1e-4);
    }
    assert_true(n_out >= 1);
    kn_bufset_free(&x);
}

/* Random states of 'spec' built by 'n_workers' workers (0: in process). */
static void build_random(const char *spec, int n_workers, int want_rewrite)
{
    ss_dag *dag;
    ss_space *sp;
    ss_hw hw;
    kn_target host;
    tn_builder *b;
    at_rng rng;
    at_buf dag_text, js[N_STATES];
    char err[512];
    got g;
    kn_bufset y;
    int n = 0, rewrites = 0;
    memset(&g, 0, sizeof g);
    assert_int_equal(kn_target_host(&host), AT_OK);
    ss_hw_cpu(&hw, host.n_cores, host.vector_bytes, host.l1_bytes, host.l2_bytes);
    assert_int_equal(kn_op_build(spec, &dag, err, sizeof err), AT_OK);
    assert_int_equal(ss_space_new(dag, &hw, NULL, &sp, err, sizeof err), AT_OK);
    naive_outputs(dag, &y);
    at_buf_init(&dag_text);
    ss_dag_print(dag, &dag_text);
    assert_int_equal(tn_builder_new(n_workers, 60000, n_workers ? bin : NULL, &b, err,
                                    sizeof err), AT_OK);
    at_rng_seed(&rng, 77);
    for (int tries = 0; n < N_STATES && tries < 100; tries++) {
        ss_state *st;
        tn_build_req r;
        if (ss_space_sample(sp, &rng, &st) != AT_OK)
            continue;
        at_buf_init(&js[n]);
        ss_state_to_json(st, &js[n]);
        ss_state_free(st);
        memset(&r, 0, sizeof r);
        r.id = 100 + n;
        r.target = "llvm -mcpu=native";
        r.dag_text = dag_text.data;
        r.state_json = js[n].data;
        assert_int_equal(tn_builder_submit(b, &r), AT_OK);
        n++;
    }
    assert_int_equal(n, N_STATES);
    wait_for(b, &g, n, 120);
    for (int i = 0; i < n; i++) {
        const tn_build_res *r = by_id(&g, 100 + i);
        if (r->err != AT_OK)
            fail_msg("%s: state %d: %s: %s", spec, i, at_errname(r->err), r->errmsg);
        assert_non_null(r->art);
        assert_true(r->art->compile_s > 0);
        assert_true(r->build_s >= r->art->compile_s * 0.5);
        rewrites += r->art->n_pre > 0;
        check_matches_naive(&y, r->art);
        kn_artifact_free(r->art);
        at_buf_fini(&js[i]);
    }
    if (want_rewrite)
        printf("%s: %d of %d states rewrite weights\n", spec, rewrites, n);
    tn_builder_free(b);
    kn_bufset_free(&y);
    at_buf_fini(&dag_text);
    ss_space_free(sp);
    ss_dag_unref(dag);
}

static void test_workers_build_what_the_naive_lowering_computes(void **unused)
{
    (void)unused;
    build_random("matmul:M=64,N=48,K=32", 2, 0);
    build_random("conv2d:N=1,C=8,H=14,W=14,K=16,R=3,S=3,pad=1", 2, 1);
    build_random("matmul:M=64,N=48,K=32", 0, 0);
}

static void test_bad_state_is_an_error_with_its_sentence(void **unused)
{
    tn_builder *b;
    tn_build_req r;
    char err[512];
    got g;
    (void)unused;
    memset(&g, 0, sizeof g);
    assert_int_equal(tn_builder_new(1, 60000, bin, &b, err, sizeof err), AT_OK);
    memset(&r, 0, sizeof r);
    r.id = 5;
    r.target = "llvm -mcpu=native";
    r.dag_text = "input A[4] float32\nB[i:4] = A[i] * 2.0\n";
    r.state_json = "{\"steps\": [";
    assert_int_equal(tn_builder_submit(b, &r), AT_OK);
    r.id = 6;
    r.dag_text = "B[i:4] = A[i] +";
    r.state_json = "{}";
    assert_int_equal(tn_builder_submit(b, &r), AT_OK);
    wait_for(b, &g, 2, 60);
    assert_int_not_equal(by_id(&g, 5)->err, AT_OK);
    assert_null(by_id(&g, 5)->art);
    assert_true(strlen(by_id(&g, 5)->errmsg) > 0);
    assert_int_equal(by_id(&g, 6)->err, AT_EPARSE);
    assert_true(strlen(by_id(&g, 6)->errmsg) > 0);
    tn_builder_free(b);
}

/* A worker script that reads its request and then does 'what'. */
static void worker_script(const char *name, const char *what, char *path, size_t n)
{
    FILE *f;
    snprintf(path, n, "%s/%s.sh", dir, name);
    f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "#!/bin/sh\nhead -c 4 >/dev/null\n%s\n", what);
    fclose(f);
    assert_int_equal(chmod(path, 0755), 0);
}

static void one_failure(const char *name, const char *what, int timeout_ms, at_err want,
                        const char *want_text)
{
    tn_builder *b;
    tn_build_req r;
    char err[512], exe[PATH_MAX];
    got g;
    int64_t built, timeouts, crashes;
    memset(&g, 0, sizeof g);
    worker_script(name, what, exe, sizeof exe);
    assert_int_equal(tn_builder_new(1, timeout_ms, exe, &b, err, sizeof err), AT_OK);
    memset(&r, 0, sizeof r);
    r.target = "llvm -mcpu=native";
    r.dag_text = "input A[4] float32\nB[i:4] = A[i] * 2.0\n";
    r.state_json = "{}";
    for (int i = 0; i < 2; i++) { /* the second goes to the replacement worker */
        r.id = i;
        assert_int_equal(tn_builder_submit(b, &r), AT_OK);
    }
    wait_for(b, &g, 2, 30);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(g.r[i].err, want);
        assert_null(g.r[i].art);
        if (strstr(g.r[i].errmsg, want_text) == NULL)
            fail_msg("%s: '%s' does not say '%s'", name, g.r[i].errmsg, want_text);
    }
    tn_builder_stats(b, &built, &timeouts, &crashes);
    assert_int_equal(timeouts, want == AT_ETIMEDOUT ? 2 : 0);
    tn_builder_free(b);
}

static void test_failing_workers(void **unused)
{
    (void)unused;
    /* a frame of 16 bytes that is not a message */
    one_failure("garbage", "printf '\\020\\000\\000\\000garbagegarbage!!'; exec sleep 5", 20000,
                AT_EPROTO, "malformed result");
    one_failure("dies", "exit 3", 20000, AT_ECODEGEN, "died");
    one_failure("hangs", "exec sleep 30", 500, AT_ETIMEDOUT, "longer than 500 ms");
}

static int setup(void **unused)
{
    (void)unused;
    if (td_program("tuner", bin, sizeof bin) != 0)
        return -1;
    return td_mkdtemp("at_build_", dir, sizeof dir);
}

static int teardown(void **unused)
{
    (void)unused;
    return td_rmtree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_state_is_an_error_with_its_sentence),
        cmocka_unit_test(test_failing_workers),
        cmocka_unit_test(test_workers_build_what_the_naive_lowering_computes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
