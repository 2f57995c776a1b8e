/* tests/tools/gpu_verify.c -- every library operator's GPU states against the CPU reference,
** on a real GPU (scripts/gpu_check.sh step 2; in the GPU bundle as bin/gpu_verify).
**
**   gpu_verify [--arch sm_XX] [--states N] [--device N] [--seed S] [--emulate] [SPEC...]
**
** For each operator (by default the small shapes of tests/gpu/test_gpu_codegen): the CPU
** reference is ref_dag_eval (tests/support/ref_ops.c: the DAG element by element in plain C,
** accumulating in double; no LLVM, so it runs in the bundle) on the inputs kn_rt_fill makes
** from the seed; then the naive GPU schedule and N random GPU states (one per sketch first)
** are built by NVRTC for the architecture and run once on the GPU (agt_cuda_run_once); every
** output must be within 1e-4 (relative, kn_rt_rel_err) of the reference.  One line per
** operator; exit 0 when all match, 1 when one does not or the GPU fails (its message),
** 2 for a bad command line.  Without a GPU: "no GPU: ..." and exit 1.  --emulate runs the
** states' CUDA C on the CPU instead (tests/support/gpu_emu, needs 'cc' and the repository
** root as the working directory): how tests/gpu/test_gpu_agent checks this tool without a
** GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "rpc_agent/rpc_agent.h"
#include "tests/support/gpu_emu.h"
#include "tests/support/gpu_ops.h"
#include "tests/support/ref_ops.h"
#include "tuner/tuner.h"

static const char *const default_ops[] = {GPU_TEST_OPS};

typedef struct opts {
    kn_target target;
    int n_states, device;
    int emulate; /* --emulate: run on the CPU through tests/support/gpu_emu instead */
    uint64_t seed;
} opts;

/* Run the built state: on the GPU, or (--emulate) its CUDA C on the CPU. */
static at_err run_state(const opts *o, const kn_ir *ir, const kn_artifact *a, kn_bufset *bufs,
                        char *err, size_t n)
{
    at_wire_artifact w;
    at_wire_arg args[64];
    if (o->emulate) {
        kn_launch l[KN_MAX_LAUNCHES];
        int nl, r;
        int64_t ws;
        char *src;
        at_err e = kn_cuda_source(ir, &o->target, "at_kernel", &src, l, &nl, &ws, err, n);
        if (e != AT_OK)
            return e;
        r = gpu_emu_run(src, l, nl, ws, a->args, a->n_args, bufs, err, n);
        at_free(src);
        return r == 1 ? AT_OK : r == 0 ? AT_EUNSUPPORTED : AT_EIO;
    }
    memset(&w, 0, sizeof w);
    kn_artifact_to_wire(a, &w, args);
    return agt_cuda_run_once(o->device, &w, bufs->ptr, err, n);
}

/* Build one state, run it on the GPU, compare with 'ref'; 0 when it matches. */
static int check_state(const opts *o, const char *spec, const char *what, const ss_state *st,
                       const kn_bufset *ref)
{
    kn_ir *ir = NULL;
    kn_artifact *a = NULL;
    kn_bufset got;
    char err[2048];
    at_err e;
    int bad = 1;
    if ((e = kn_lower(st, &ir, err, sizeof err)) == AT_OK) {
        if (o->emulate && kn_backend_find("cuda") == NULL) {
            /* the emulator needs no NVRTC: the argument signature is enough */
            if ((a = at_calloc(1, sizeof *a)) == NULL)
                e = AT_ENOMEM;
            for (int i = 0; a && i < ir->dag->n_args; i++) {
                a->args[i] = ir->args[i];
                a->kernel_args[i] = ir->args[i];
                a->kernel_src[i] = -1;
                a->n_args = i + 1;
            }
        } else {
            e = kn_build(ir, &o->target, NULL, &a, err, sizeof err);
        }
    }
    if (e != AT_OK) {
        printf("FAIL %s: %s does not build: %s\n", spec, what,
               e == AT_ENOMEM ? "out of memory" : err);
        kn_ir_free(ir);
        return 1;
    }
    if (kn_bufset_alloc(a, o->seed, &got) != AT_OK) {
        printf("FAIL %s: out of memory\n", spec);
        goto out;
    }
    if ((e = run_state(o, ir, a, &got, err, sizeof err)) != AT_OK) {
        printf("%s %s: %s: %s\n", e == AT_EUNSUPPORTED ? "gpu_verify:" : "FAIL", spec, what, err);
        if (e == AT_EUNSUPPORTED)
            exit(1);
        kn_bufset_free(&got);
        goto out;
    }
    bad = 0;
    for (int i = 0; i < a->n_args; i++) {
        double r;
        if (!a->args[i].is_output)
            continue;
        r = kn_rt_rel_err(got.ptr[i], ref->ptr[i], got.dtype[i], got.n_elems[i]);
        if (!(r <= 1e-4)) {
            at_buf b;
            at_buf_init(&b);
            ss_state_to_json(st, &b);
            printf("FAIL %s: %s: output %d differs from the CPU reference: relative error %g\n"
                   "  state: %s\n",
                   spec, what, i, r, b.data ? b.data : "?");
            at_buf_fini(&b);
            bad = 1;
        }
    }
    kn_bufset_free(&got);
out:
    kn_artifact_free(a);
    kn_ir_free(ir);
    return bad;
}

static int check_operator(const opts *o, const char *spec, at_rng *rng)
{
    ss_dag *dag;
    ss_space *sp = NULL;
    ss_state *st;
    ss_hw hw;
    kn_bufset ref;
    kn_artifact sig;
    kn_ir *ir;
    char err[1024], what[64];
    int bad = 0, n = 0;
    if (kn_op_build(spec, &dag, err, sizeof err) != AT_OK) {
        printf("FAIL %s: %s\n", spec, err);
        return 1;
    }
    /* the reference's buffers: the argument signature of the naive GPU schedule */
    if (kn_gpu_naive(dag, 128, &st, err, sizeof err) != AT_OK ||
        kn_lower(st, &ir, err, sizeof err) != AT_OK) {
        printf("FAIL %s: the naive GPU schedule: %s\n", spec, err);
        ss_dag_unref(dag);
        return 1;
    }
    memset(&sig, 0, sizeof sig);
    sig.n_args = dag->n_args;
    for (int i = 0; i < sig.n_args; i++) {
        sig.args[i] = ir->args[i];
        sig.kernel_args[i] = ir->args[i];
        sig.kernel_src[i] = -1;
    }
    kn_ir_free(ir);
    if (kn_bufset_alloc(&sig, o->seed, &ref) != AT_OK) {
        printf("FAIL %s: out of memory\n", spec);
        return 1;
    }
    {
        /* ref_dag_eval takes a buffer per op: the arguments' are the reference's */
        float **per_op = at_calloc((size_t)dag->n_ops, sizeof *per_op);
        at_err e = per_op ? AT_OK : AT_ENOMEM;
        for (int i = 0; i < dag->n_args && e == AT_OK; i++)
            per_op[dag->args[i]] = ref.ptr[i];
        for (int k = 0; k < dag->n_ops && e == AT_OK; k++)
            if (per_op[k] == NULL &&
                (per_op[k] = at_calloc((size_t)ss_op_n_elems(&dag->ops[k]) + 1, 4)) == NULL)
                e = AT_ENOMEM;
        if (e == AT_OK)
            e = ref_dag_eval(dag, per_op, err, sizeof err);
        for (int k = 0; per_op && k < dag->n_ops; k++) {
            int is_arg = 0;
            for (int i = 0; i < dag->n_args; i++)
                is_arg |= dag->args[i] == k;
            if (!is_arg)
                at_free(per_op[k]);
        }
        at_free(per_op);
        if (e != AT_OK) {
            printf("FAIL %s: the CPU reference: %s\n", spec, e == AT_ENOMEM ? "out of memory" : err);
            bad = 1;
            goto out;
        }
    }
    bad |= check_state(o, spec, "the naive GPU schedule", st, &ref);
    kn_target_hw(&o->target, &hw);
    if (ss_space_new(dag, &hw, NULL, &sp, err, sizeof err) != AT_OK) {
        printf("FAIL %s: no GPU sketches: %s\n", spec, err);
        bad = 1;
        goto out;
    }
    for (int tries = 0; n < o->n_states && tries < 100000; tries++) {
        ss_state *s = NULL;
        int k = n < ss_space_n_sketches(sp) ? n : -1; /* every sketch first */
        at_err e = k >= 0 ? ss_space_sample_sketch(sp, k, rng, &s) : ss_space_sample(sp, rng, &s);
        if (e != AT_OK)
            continue;
        snprintf(what, sizeof what, "random state %d (sketch %s)", n,
                 k >= 0 ? ss_space_sketch_desc(sp, k) : "any");
        bad |= check_state(o, spec, what, s, &ref);
        ss_state_free(s);
        n++;
    }
    if (n < o->n_states) {
        printf("FAIL %s: only %d valid GPU states\n", spec, n);
        bad = 1;
    }
    if (!bad)
        printf("ok   %-66s naive + %d random GPU states match the CPU reference\n", spec, n);
out:
    ss_space_free(sp);
    ss_state_free(st);
    kn_bufset_free(&ref);
    ss_dag_unref(dag);
    return bad;
}

int main(int argc, char **argv)
{
    opts o;
    const char *arch = "sm_90";
    const char **specs = NULL;
    int n_specs = 0, bad = 0;
    char target[64], err[512];
    at_rng rng;
    memset(&o, 0, sizeof o);
    o.n_states = 8;
    o.seed = 11;
    specs = calloc((size_t)argc + AT_ARRAY_LEN(default_ops) + 1, sizeof *specs);
    if (specs == NULL)
        return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--arch") == 0 && v) {
            arch = v;
            i++;
        } else if (strcmp(a, "--states") == 0 && v) {
            char *end;
            o.n_states = (int)strtol(v, &end, 10);
            if (*end || end == v)
                o.n_states = -1;
            i++;
        } else if (strcmp(a, "--device") == 0 && v) {
            o.device = atoi(v);
            i++;
        } else if (strcmp(a, "--emulate") == 0) {
            o.emulate = 1;
        } else if (strcmp(a, "--seed") == 0 && v) {
            o.seed = strtoull(v, NULL, 10);
            i++;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "--version") == 0) {
            printf("usage: gpu_verify [--arch sm_XX] [--states N] [--device N] [--seed S] "
                   "[--emulate] [SPEC...]\n");
            free(specs);
            return 0;
        } else if (a[0] == '-') {
            fprintf(stderr, "gpu_verify: unknown flag '%s' (gpu_verify --help)\n", a);
            free(specs);
            return 2;
        } else {
            specs[n_specs++] = a;
        }
    }
    snprintf(target, sizeof target, "cuda -arch=%s -ptx", arch);
    if (o.n_states < 0 || o.n_states > 1000 ||
        kn_target_parse(target, &o.target, err, sizeof err) != AT_OK) {
        fprintf(stderr, "gpu_verify: %s\n", o.n_states < 0 || o.n_states > 1000
                                                 ? "--states is 0 to 1000"
                                                 : err);
        free(specs);
        return 2;
    }
    if (!o.emulate && kn_backend_find("cuda") == NULL) {
        printf("gpu_verify: this build has no CUDA backend (NVRTC; build with the CUDA toolkit "
               "in CUDA_HOME): nothing can be built for a GPU\n");
        free(specs);
        return 1;
    }
    if (n_specs == 0)
        for (size_t i = 0; i < AT_ARRAY_LEN(default_ops); i++)
            specs[n_specs++] = default_ops[i];
    at_rng_seed(&rng, o.seed);
    for (int i = 0; i < n_specs; i++)
        bad |= check_operator(&o, specs[i], &rng);
    free(specs);
    printf("gpu_verify: %s\n", bad ? "FAILED" : "every GPU state matches the CPU reference");
    return bad ? 1 : 0;
}
