/* tests/tools/kn_demo.c -- what 'make demo' runs until the tuner exists: library operators
** compiled with their naive schedule and with a hand-written one, checked against each
** other, timed on this machine.
**
**   kn_demo [--threads N] [SPEC...]     (default: a few representative operators) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

typedef struct result {
    double cost_s, compile_ms;
    kn_bufset bufs;
} result;

static int build_run(const ss_state *st, const kn_target *t, kn_rt_pool *pool, result *r,
                     char *err, size_t err_size)
{
    kn_ir *ir = NULL;
    kn_artifact *a = NULL;
    kn_rt_module *m = NULL;
    void *ws = NULL;
    kn_rt_time_opts o = {.number = 1, .repeat = 5, .min_repeat_ms = 50, .n_warmup = 1};
    double costs[5];
    int32_t rc;
    int n = kn_rt_pool_par(pool)->n_threads;
    if (kn_lower(st, &ir, err, err_size) || kn_build(ir, t, NULL, &a, err, err_size) ||
        kn_bufset_alloc(a, 1, &r->bufs) ||
        kn_rt_module_load(a->obj, a->obj_size, NULL, &m, err, err_size)) {
        kn_ir_free(ir);
        kn_artifact_free(a);
        return 0;
    }
    r->compile_ms = a->compile_s * 1e3;
    if (a->ws_fixed + a->ws_per_thread * n > 0)
        ws = kn_rt_alloc((size_t)(a->ws_fixed + a->ws_per_thread * n));
    kn_rt_time((kn_rt_kernel_fn)kn_rt_module_sym(m, a->entry), r->bufs.ptr, ws,
               kn_rt_pool_par(pool), &o, 0, NULL, costs, &rc);
    for (int i = 1; i < 5; i++)
        if (costs[i] < costs[0])
            costs[0] = costs[i];
    r->cost_s = costs[0];
    kn_rt_free(ws);
    kn_rt_module_free(m);
    kn_artifact_free(a);
    kn_ir_free(ir);
    return rc == 0;
}

int main(int argc, char **argv)
{
    static const char *defaults[] = {
        "matmul:M=512,N=512,K=512",
        "dense:M=16,N=1024,K=1024,bias=1,relu=1",
        "softmax:M=256,N=1000",
        "layer_norm:M=256,N=768",
        "gelu:shape=256x3072",
    };
    const char *specs[64];
    int n_specs = 0, threads = 2, failed = 0;
    kn_target t;
    kn_rt_pool *pool;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: kn_demo [--threads N] [SPEC...]\n");
            return 2;
        } else if (n_specs < 64)
            specs[n_specs++] = argv[i];
    }
    if (n_specs == 0)
        for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
            specs[n_specs++] = defaults[i];
    if (kn_target_host(&t) != AT_OK || kn_rt_pool_new(threads, &pool) != AT_OK) {
        fprintf(stderr, "kn_demo: cannot set up the host target or thread pool\n");
        return 1;
    }
    printf("target: %s (%d-byte vectors), %d threads\n\n", t.text, t.vector_bytes, threads);
    printf("%-42s %12s %12s %8s %10s %8s\n", "operator", "naive GFLOPS", "sched GFLOPS",
           "speedup", "compile ms", "check");
    for (int i = 0; i < n_specs; i++) {
        ss_dag *dag;
        ss_state *naive, *sched;
        result rn, rs;
        char err[512];
        double e = 0;
        int ok;
        if (kn_op_build(specs[i], &dag, err, sizeof err) != AT_OK) {
            fprintf(stderr, "kn_demo: %s\n", err);
            failed = 1;
            continue;
        }
        ss_state_new(dag, &naive);
        ss_state_new(dag, &sched);
        if (strncmp(specs[i], "matmul", 6) == 0)
            ok = kn_hand_matmul(sched, &t, err, sizeof err) == AT_OK;
        else
            ok = kn_hand_elementwise(sched, &t, err, sizeof err) == AT_OK;
        memset(&rn, 0, sizeof rn);
        memset(&rs, 0, sizeof rs);
        ok = ok && build_run(naive, &t, pool, &rn, err, sizeof err) &&
             build_run(sched, &t, pool, &rs, err, sizeof err);
        if (ok)
            for (int o = dag->n_inputs; o < dag->n_args; o++) {
                double eo = kn_rt_rel_err(rs.bufs.ptr[o], rn.bufs.ptr[o], AT_DT_F32, rn.bufs.n_elems[o]);
                if (!(eo <= e))
                    e = eo;
            }
        if (!ok) {
            fprintf(stderr, "kn_demo: %s: %s\n", specs[i], err);
            failed = 1;
        } else {
            printf("%-42s %12.2f %12.2f %7.1fx %10.1f %8s\n", specs[i], dag->flops / rn.cost_s * 1e-9,
                   dag->flops / rs.cost_s * 1e-9, rn.cost_s / rs.cost_s, rs.compile_ms,
                   e <= 1e-4 ? "ok" : "WRONG");
            if (!(e <= 1e-4))
                failed = 1;
        }
        kn_bufset_free(&rn.bufs);
        kn_bufset_free(&rs.bufs);
        ss_state_free(naive);
        ss_state_free(sched);
        ss_dag_unref(dag);
    }
    kn_rt_pool_free(pool);
    return failed;
}
