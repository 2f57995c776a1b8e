/* tests/kernels/test_aarch64_codegen.c -- kernels cross-compiled for aarch64 by our code
** generator run correctly under qemu-aarch64 through the aarch64 build of the runtime's
** loader (build/aarch64/bin/kn_rt_run, made by 'make rt-aarch64'), and agree with the same
** kernels run natively.  qemu is about 67x slower than native, so shapes are small. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "tests/support/sched_gen.h"

static kn_target host, a64;
static char tmpdir[256];
static const char *runner = "build/aarch64/bin/kn_rt_run";

static void build_both(const ss_state *st, kn_artifact **native, kn_artifact **cross)
{
    kn_ir *ir;
    char err[512];
    if (kn_lower(st, &ir, err, sizeof err) != AT_OK)
        fail_msg("lower: %s", err);
    if (kn_build(ir, &host, "k_native", native, err, sizeof err) != AT_OK)
        fail_msg("build native: %s", err);
    if (kn_build(ir, &a64, "k_a64", cross, err, sizeof err) != AT_OK)
        fail_msg("build aarch64: %s", err);
    kn_ir_free(ir);
}

/* Run 'a' under qemu with the same seed as kn_bufset_alloc uses; compare outputs. */
static void run_under_qemu(const kn_artifact *a, const kn_bufset *native_out, int idx)
{
    char obj[300], out[300], cmd[4096];
    FILE *f;
    int n;
    snprintf(obj, sizeof obj, "%s/k%d.o", tmpdir, idx);
    snprintf(out, sizeof out, "%s/k%d.out", tmpdir, idx);
    f = fopen(obj, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(a->obj, 1, a->obj_size, f), a->obj_size);
    fclose(f);
    n = snprintf(cmd, sizeof cmd, "qemu-aarch64 -L /usr/aarch64-linux-gnu %s %s %s --threads 2 "
                 "--seed 5 --ws %lld --out %s",
                 runner, obj, a->entry, (long long)(a->ws_fixed + a->ws_per_thread * 2), out);
    for (int i = 0; i < a->n_args; i++) {
        n += snprintf(cmd + n, sizeof cmd - (size_t)n, " --buf %s:", at_dtype_name(a->args[i].dtype));
        for (int d = 0; d < a->args[i].n_dims; d++)
            n += snprintf(cmd + n, sizeof cmd - (size_t)n, "%s%lld", d ? "x" : "",
                          (long long)a->args[i].shape[d]);
        if (a->args[i].n_dims == 0)
            n += snprintf(cmd + n, sizeof cmd - (size_t)n, "1");
        n += snprintf(cmd + n, sizeof cmd - (size_t)n, ":%s", a->args[i].is_output ? "out" : "in");
    }
    if (system(cmd) != 0)
        fail_msg("qemu run failed: %s", cmd);
    f = fopen(out, "rb");
    assert_non_null(f);
    for (int i = 0; i < a->n_args; i++) {
        void *got;
        double e;
        if (!a->args[i].is_output)
            continue;
        got = malloc(native_out->n_bytes[i]);
        assert_int_equal(fread(got, 1, native_out->n_bytes[i], f), native_out->n_bytes[i]);
        /* aarch64 contracts a*b+c into FMA where x86 may not: compare with a tolerance */
        e = kn_rt_rel_err(got, native_out->ptr[i], a->args[i].dtype, native_out->n_elems[i]);
        if (!(e <= 1e-4))
            fail_msg("aarch64 output %d differs from native: rel err %g (%s)", i, e, cmd);
        free(got);
    }
    fclose(f);
    unlink(obj);
    unlink(out);
}

static void check(const char *spec, int n_random, uint64_t seed)
{
    ss_dag *dag;
    ss_state *st;
    char err[256];
    at_rng rng;
    assert_int_equal(kn_op_build(spec, &dag, err, sizeof err), AT_OK);
    at_rng_seed(&rng, seed);
    for (int i = 0; i <= n_random; i++) {
        kn_artifact *na, *xa;
        kn_bufset bs;
        kn_rt_pool *pool;
        if (i == 0) {
            assert_int_equal(ss_state_new(dag, &st), AT_OK);
        } else {
            sg_stats stats;
            kn_ir *ir;
            /* a random schedule that lowers */
            for (;;) {
                assert_int_equal(sg_random_state(dag, &rng, &st, &stats), AT_OK);
                if (kn_lower(st, &ir, err, sizeof err) == AT_OK) {
                    kn_ir_free(ir);
                    break;
                }
                ss_state_free(st);
            }
        }
        build_both(st, &na, &xa);
        assert_int_equal(kn_bufset_alloc(na, 5, &bs), AT_OK);
        assert_int_equal(kn_rt_pool_new(2, &pool), AT_OK);
        if (kn_run_once(na, &bs, kn_rt_pool_par(pool), err, sizeof err) != AT_OK)
            fail_msg("native run: %s", err);
        run_under_qemu(xa, &bs, i);
        kn_rt_pool_free(pool);
        kn_bufset_free(&bs);
        kn_artifact_free(na);
        kn_artifact_free(xa);
        ss_state_free(st);
    }
    ss_dag_unref(dag);
}

static void test_matmul(void **unused)
{
    (void)unused;
    check("matmul:M=32,N=48,K=24", 3, 1);
}

static void test_conv2d_bias_relu(void **unused)
{
    (void)unused;
    check("conv2d:N=1,C=4,H=8,W=8,K=8,R=3,S=3,pad=1,bias=1,relu=1", 3, 2);
}

static void test_softmax(void **unused)
{
    (void)unused;
    check("softmax:M=4,N=40", 2, 3);
}

static void test_gelu_layer_norm(void **unused)
{
    (void)unused;
    check("gelu:shape=8x24", 1, 4);
    check("layer_norm:M=4,N=32", 1, 5);
}

static int setup(void **unused)
{
    char err[256];
    (void)unused;
    if (access(runner, X_OK) != 0) {
        fprintf(stderr, "missing %s: run 'make rt-aarch64'\n", runner);
        return -1;
    }
    if (kn_target_host(&host) != AT_OK)
        return -1;
    if (kn_target_parse("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76", &a64, err,
                        sizeof err) != AT_OK) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    snprintf(tmpdir, sizeof tmpdir, "/tmp/at_a64_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **unused)
{
    (void)unused;
    rmdir(tmpdir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_conv2d_bias_relu),
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_gelu_layer_norm),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
