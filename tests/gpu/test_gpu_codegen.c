/* tests/gpu/test_gpu_codegen.c -- the NVIDIA GPU target without a GPU.
**
** For every library operator (small shapes): random GPU states and mutants lower and give
** CUDA C within the launch limits, and replay from their JSON; one state of every GPU
** sketch of the operator goes into one CUDA C text that NVRTC compiles to PTX (sm_75,
** sm_80 or sm_90 by turns; every kernel's .entry checked); the first state is also built
** as a cubin for sm_90 (its registers read back); a state runs on the CPU through the
** emulator (tests/support/gpu_emu: the generated CUDA C compiled as C, every thread a
** fiber, barriers honoured) and matches the CPU reference within 1e-4.  Also: target
** strings, launch limits (threads, shared memory, registers, nested block loops), the
** naive GPU reference schedule, artifact packing, sketch counts next to Ansor's.
** AT_TEST_LONG=1 emulates 3 states per operator and the state of every sketch, and builds
** PTX for the three architectures through kn_build for every operator.  Without the CUDA
** toolkit the NVRTC parts print "SKIP (no NVRTC: ...)"; without a C compiler the emulator
** parts print "SKIP (no C compiler)".  No part needs a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "tests/support/gpu_ops.h"
#include "tests/support/gpu_emu.h"

#define N_SAMPLES 24 /* states and mutants per operator: lowered, CUDA C, limits */

static int long_mode; /* AT_TEST_LONG */

static const char *const ops[] = {GPU_TEST_OPS};

static kn_target gpu, host;
static int have_nvrtc, have_cc;
static int n_emulated, n_ptx, n_cubin, n_sketches;

static ss_dag *dag_of(const char *spec)
{
    ss_dag *dag;
    char err[256];
    if (kn_op_build(spec, &dag, err, sizeof err) != AT_OK)
        fail_msg("%s", err);
    return dag;
}

/* The task's outputs from the CPU (LLVM, naive schedule) on seed 11. */
static kn_artifact *cpu_reference(ss_dag *dag, kn_bufset *ref)
{
    ss_state *naive;
    kn_ir *ir;
    kn_artifact *a;
    char err[512];
    assert_int_equal(ss_state_new(dag, &naive), AT_OK);
    assert_int_equal(kn_lower(naive, &ir, err, sizeof err), AT_OK);
    if (kn_build(ir, &host, NULL, &a, err, sizeof err) != AT_OK)
        fail_msg("reference: %s", err);
    assert_int_equal(kn_bufset_alloc(a, 11, ref), AT_OK);
    assert_int_equal(kn_run_once(a, ref, kn_rt_serial_par(), err, sizeof err), AT_OK);
    kn_ir_free(ir);
    ss_state_free(naive);
    return a;
}

static char *json_of(const ss_state *st)
{
    at_buf b;
    at_buf_init(&b);
    ss_state_to_json(st, &b);
    return b.data;
}

/* Run a GPU state through the emulator and compare with the CPU's outputs. */
static void emulate(const char *what, const ss_state *st, const kn_ir *ir, const kn_artifact *ref_a,
                    const kn_bufset *ref)
{
    kn_launch l[KN_MAX_LAUNCHES];
    int n, r;
    int64_t ws;
    char *src, err[1024];
    kn_bufset got;
    if (kn_cuda_source(ir, &gpu, "at_kernel", &src, l, &n, &ws, err, sizeof err) != AT_OK) {
        char *j = json_of(st);
        fail_msg("%s: CUDA C: %s\n%s", what, err, j);
    }
    assert_int_equal(kn_bufset_alloc(ref_a, 11, &got), AT_OK);
    r = gpu_emu_run(src, l, n, ws, ref_a->args, ref_a->n_args, &got, err, sizeof err);
    if (r < 0) {
        char *j = json_of(st);
        fail_msg("%s: emulator: %s\n%s", what, err, j);
    }
    for (int a = 0; r == 1 && a < ref_a->n_args; a++) {
        double e;
        if (!ref_a->args[a].is_output)
            continue;
        e = kn_rt_rel_err(got.ptr[a], ref->ptr[a], got.dtype[a], got.n_elems[a]);
        if (!(e <= 1e-4)) {
            char *j = json_of(st);
            fail_msg("%s: output %d differs from the CPU reference: relative error %g\n%s\n%s",
                     what, a, e, j, src);
        }
    }
    n_emulated += r == 1;
    kn_bufset_free(&got);
    at_free(src);
}

/* Through kn_build: PTX for sm_75, sm_80 and sm_90 (long mode), a cubin for sm_90 with the
** registers of every launch. */
static void compile(const char *what, const ss_state *st, const kn_ir *ir)
{
    static const char *const archs[] = {"cuda -arch=sm_75 -ptx", "cuda -arch=sm_80 -ptx",
                                        "cuda -arch=sm_90 -ptx"};
    char err[2048];
    kn_artifact *a;
    for (int k = 0; long_mode && k < 3; k++) {
        kn_target t;
        char want[32];
        assert_int_equal(kn_target_parse(archs[k], &t, err, sizeof err), AT_OK);
        if (kn_build(ir, &t, NULL, &a, err, sizeof err) != AT_OK) {
            char *j = json_of(st);
            fail_msg("%s: NVRTC (%s): %s\n%s", what, archs[k], err, j);
        }
        assert_int_equal(a->kind, KN_ART_PTX);
        assert_true(a->obj_size > 0 && a->obj[a->obj_size - 1] == 0);
        snprintf(want, sizeof want, ".target sm_%d", t.cuda_arch);
        if (strstr((const char *)a->obj, want) == NULL)
            fail_msg("%s: the PTX has no '%s'", what, want);
        for (int i = 0; i < a->n_launches; i++) {
            char entry[96];
            snprintf(entry, sizeof entry, ".entry %s(", a->launches[i].entry);
            if (strstr((const char *)a->obj, entry) == NULL)
                fail_msg("%s: the PTX has no '%s'", what, entry);
        }
        n_ptx++;
        kn_artifact_free(a);
    }
    if (kn_build(ir, &gpu, NULL, &a, err, sizeof err) != AT_OK)
        fail_msg("%s: cubin: %s", what, err);
    assert_int_equal(a->kind, KN_ART_CUBIN);
    assert_true(a->obj_size > 4 && memcmp(a->obj, "\177ELF", 4) == 0);
    for (int i = 0; i < a->n_launches; i++)
        if (a->launches[i].n_regs <= 0 || a->launches[i].n_regs > 255)
            fail_msg("%s: launch %d: %d registers read from the cubin", what, i,
                     a->launches[i].n_regs);
    n_cubin++;
    kn_artifact_free(a);
}

/* One state of every sketch of 'sp' as CUDA C (entries s<k>_k<i>), all in one text that
** NVRTC compiles to PTX for 'arch'; every kernel must be in the PTX. */
static void compile_sketches(const char *spec, ss_space *sp, at_rng *rng, int arch,
                             const kn_artifact *ref_a, const kn_bufset *ref)
{
    const kn_backend_ops *cuda = kn_backend_find("cuda");
    at_buf text, entries;
    uint8_t *ptx = NULL;
    size_t n_ptx_bytes = 0;
    char err[2048], want[32];
    at_buf_init(&text);
    at_buf_init(&entries);
    for (int k = 0; k < ss_space_n_sketches(sp); k++) {
        ss_state *st = NULL;
        kn_ir *ir;
        kn_launch l[KN_MAX_LAUNCHES];
        int n = 0;
        int64_t ws;
        char entry[16], *src;
        for (int tries = 0; tries < 2000 && st == NULL; tries++)
            if (ss_space_sample_sketch(sp, k, rng, &st) != AT_OK)
                st = NULL;
        if (st == NULL)
            fail_msg("%s: sketch %d (%s) gives no valid GPU state in 2000 tries", spec, k,
                     ss_space_sketch_desc(sp, k));
        if (kn_lower(st, &ir, err, sizeof err) != AT_OK)
            fail_msg("%s: sketch %d: %s", spec, k, err);
        snprintf(entry, sizeof entry, "s%d", k);
        if (kn_cuda_source(ir, &gpu, entry, &src, l, &n, &ws, err, sizeof err) != AT_OK)
            fail_msg("%s: sketch %d: CUDA C: %s", spec, k, err);
        at_buf_puts(&text, src);
        for (int i = 0; i < n; i++)
            at_buf_printf(&entries, ".entry %s(\n", l[i].entry);
        if (long_mode && have_cc)
            emulate(spec, st, ir, ref_a, ref);
        at_free(src);
        kn_ir_free(ir);
        ss_state_free(st);
        n_sketches++;
    }
    assert_int_equal(text.err, AT_OK);
    assert_int_equal(entries.err, AT_OK);
    if (cuda->compile_source(text.data, arch, 1, &ptx, &n_ptx_bytes, err, sizeof err) != AT_OK)
        fail_msg("%s: NVRTC (sm_%d) on the states of its %d sketches: %s", spec, arch,
                 ss_space_n_sketches(sp), err);
    assert_true(n_ptx_bytes > 0 && ptx[n_ptx_bytes - 1] == 0);
    snprintf(want, sizeof want, ".target sm_%d", arch);
    if (strstr((const char *)ptx, want) == NULL)
        fail_msg("%s: the PTX has no '%s'", spec, want);
    for (char *e = entries.data, *nl; e && *e; e = nl + 1) {
        nl = strchr(e, '\n');
        *nl = 0;
        if (strstr((const char *)ptx, e) == NULL)
            fail_msg("%s: the PTX (sm_%d) has no '%s'", spec, arch, e);
    }
    n_ptx++;
    at_free(ptx);
    at_buf_fini(&text);
    at_buf_fini(&entries);
}

static void check_operator(const char *spec, int arch)
{
    ss_dag *dag = dag_of(spec);
    ss_space *sp;
    ss_hw hw;
    at_rng rng;
    kn_bufset ref;
    kn_artifact *ref_a;
    ss_state *prev = NULL;
    char err[1024];
    int n = 0, tries = 0, emulated = 0, n_emulate = long_mode ? 3 : 1;
    kn_target_hw(&gpu, &hw);
    assert_int_equal(ss_space_new(dag, &hw, NULL, &sp, err, sizeof err), AT_OK);
    ref_a = cpu_reference(dag, &ref);
    at_rng_seed(&rng, 20250 + (uint64_t)strlen(spec));
    while (n < N_SAMPLES && tries++ < 200000) {
        ss_state *st = NULL, *back;
        kn_ir *ir;
        at_err e;
        char *j;
        /* half samples, half mutants of the previous sample */
        if (prev && (n & 1))
            e = ss_space_mutate(sp, prev, &rng, -1, &st);
        else
            e = ss_space_sample(sp, &rng, &st);
        if (e == AT_ESCHED)
            continue;
        assert_int_equal(e, AT_OK);
        /* a GPU state is data: its JSON replays to the same program */
        j = json_of(st);
        if (ss_state_from_json(dag, j, strlen(j), &back, err, sizeof err) != AT_OK)
            fail_msg("%s: a GPU state does not replay: %s\n%s", spec, err, j);
        {
            at_buf p1, p2;
            at_buf_init(&p1);
            at_buf_init(&p2);
            ss_state_print(st, &p1);
            ss_state_print(back, &p2);
            if (strcmp(p1.data, p2.data) != 0)
                fail_msg("%s: replayed state differs\n%s", spec, j);
            at_buf_fini(&p1);
            at_buf_fini(&p2);
        }
        ss_state_free(back);
        if (kn_lower(st, &ir, err, sizeof err) != AT_OK)
            fail_msg("%s: a GPU state does not lower: %s\n%s", spec, err, j);
        assert_true(ir->is_gpu);
        if (kn_verify(ir, &gpu, err, sizeof err) != AT_OK)
            fail_msg("%s: CUDA C or launch limits: %s\n%s", spec, err, j);
        if (emulated < n_emulate && have_cc) {
            emulate(spec, st, ir, ref_a, &ref);
            emulated++;
        }
        if (have_nvrtc && n == 0)
            compile(spec, st, ir);
        at_free(j);
        kn_ir_free(ir);
        ss_state_free(prev);
        prev = st;
        n++;
    }
    if (n < N_SAMPLES)
        fail_msg("%s: only %d valid GPU states in %d tries", spec, n, tries);
    if (have_nvrtc)
        compile_sketches(spec, sp, &rng, arch, ref_a, &ref);
    ss_state_free(prev);
    kn_bufset_free(&ref);
    kn_artifact_free(ref_a);
    ss_space_free(sp);
    ss_dag_unref(dag);
}

static void test_library_operators(void **unused)
{
    (void)unused;
    static const int archs[] = {75, 80, 90};
    for (size_t i = 0; i < AT_ARRAY_LEN(ops); i++) {
        check_operator(ops[i], archs[i % 3]);
        printf("  %-66s ok\n", ops[i]);
    }
    printf("GPU states: %d emulated against the CPU, %d sketches compiled, %d PTX texts, %d "
           "cubins\n",
           n_emulated, n_sketches, n_ptx, n_cubin);
    if (!have_cc)
        printf("SKIP (no C compiler): GPU states were not run in the emulator\n");
    if (!have_nvrtc)
        printf("SKIP (no NVRTC: %s): GPU states were not compiled\n",
               kn_backend_find("cuda") ? "it cannot be loaded" : "this build has no CUDA");
}

/* The naive GPU schedule (the agents' reference) computes what the CPU computes. */
static void test_naive_reference(void **unused)
{
    (void)unused;
    if (!have_cc) {
        printf("SKIP (no C compiler)\n");
        return;
    }
    for (size_t i = 0; i < AT_ARRAY_LEN(ops); i++) {
        ss_dag *dag = dag_of(ops[i]);
        ss_state *st;
        kn_ir *ir;
        kn_bufset ref;
        kn_artifact *ref_a = cpu_reference(dag, &ref);
        char err[512];
        assert_int_equal(kn_gpu_naive(dag, 64, &st, err, sizeof err), AT_OK);
        assert_int_equal(kn_lower(st, &ir, err, sizeof err), AT_OK);
        emulate(ops[i], st, ir, ref_a, &ref);
        kn_ir_free(ir);
        ss_state_free(st);
        kn_bufset_free(&ref);
        kn_artifact_free(ref_a);
        ss_dag_unref(dag);
    }
    {
        ss_dag *dag = dag_of(ops[0]);
        ss_state *st;
        assert_int_equal(kn_gpu_naive(dag, 0, &st, NULL, 0), AT_EINVAL);
        assert_int_equal(kn_gpu_naive(dag, 2048, &st, NULL, 0), AT_EINVAL);
        ss_dag_unref(dag);
    }
}

static void test_targets(void **unused)
{
    static const struct {
        const char *text, *msg;
    } bad[] = {
        {"cuda", "target 'cuda': give the GPU architecture"},
        {"cuda -arch=sm_70", "target 'cuda -arch=sm_70': sm_70 is older than sm_75"},
        {"cuda -arch=sm_61", "target 'cuda -arch=sm_61': sm_61 is older than sm_75"},
        {"cuda -arch=compute_90", "target 'cuda -arch=compute_90': -arch must be sm_XX"},
        {"cuda -arch=sm_91", "target 'cuda -arch=sm_91': sm_91 is not a known architecture"},
        {"cuda -arch=sm_90 -max-threads-per-block=2048", "target 'cuda -arch=sm_90 "
                                                         "-max-threads-per-block=2048': "
                                                         "-max-threads-per-block 2048 exceeds"},
        {"cuda -arch=sm_75 -max-shared-memory-per-block=100000",
         "target 'cuda -arch=sm_75 -max-shared-memory-per-block=100000': "
         "-max-shared-memory-per-block 100000 exceeds sm_75's 65536"},
        {"cuda -arch=sm_90 -max-registers-per-block=10", "target 'cuda -arch=sm_90 "
                                                         "-max-registers-per-block=10': "},
        {"cuda -arch=sm_90 -max-threads-per-block", "target 'cuda -arch=sm_90 "
                                                    "-max-threads-per-block': option"},
        {"cuda -arch=sm_90 -max-threads-per-block=lots", "target 'cuda -arch=sm_90 "
                                                         "-max-threads-per-block=lots': "},
        {"cuda -arch=sm_90 -fast", "target 'cuda -arch=sm_90 -fast': unknown option '-fast'"},
        {"cudax -arch=sm_90", "target 'cudax -arch=sm_90': it must start with 'llvm'"},
    };
    kn_target t;
    char err[512];
    (void)unused;
    for (size_t i = 0; i < AT_ARRAY_LEN(bad); i++) {
        assert_int_equal(kn_target_parse(bad[i].text, &t, err, sizeof err), AT_EINVAL);
        if (strncmp(err, bad[i].msg, strlen(bad[i].msg)) != 0)
            fail_msg("'%s': got '%s'", bad[i].text, err);
    }
    assert_int_equal(kn_target_parse("cuda -arch=sm_90", &t, err, sizeof err), AT_OK);
    assert_int_equal(t.kind, KN_TARGET_CUDA);
    assert_int_equal(t.cuda_arch, 90);
    assert_int_equal(t.cuda_max_threads, 1024);
    assert_int_equal(t.cuda_max_shared, 49152);
    assert_int_equal(t.cuda_max_regs, 65536);
    assert_string_equal(t.triple, "nvptx64-nvidia-cuda");
    assert_string_equal(t.text, "cuda -arch=sm_90 -max-threads-per-block=1024 "
                                "-max-shared-memory-per-block=49152 "
                                "-max-registers-per-block=65536");
    /* "-name N", underscores, the opt-in shared memory of an H100 */
    assert_int_equal(kn_target_parse(" cuda -arch sm_80 -max_threads_per_block 256 "
                                     "-max-shared-memory-per-block=166912 -ptx",
                                     &t, err, sizeof err),
                     AT_OK);
    assert_int_equal(t.cuda_arch, 80);
    assert_int_equal(t.cuda_max_threads, 256);
    assert_int_equal(t.cuda_max_shared, 166912);
    assert_int_equal(t.cuda_ptx, 1);
    assert_string_equal(t.text, "cuda -arch=sm_80 -max-threads-per-block=256 "
                                "-max-shared-memory-per-block=166912 "
                                "-max-registers-per-block=65536 -ptx");
    {
        ss_hw hw;
        kn_target_hw(&t, &hw);
        assert_true(hw.is_gpu);
        assert_int_equal(hw.max_threads_per_block, 256);
        assert_int_equal(hw.warp_size, 32);
        assert_int_equal(hw.max_vthread, 8);
        assert_int_equal(hw.layout_rewrite, 0);
    }
    /* CPU strings are parsed as before */
    assert_int_equal(kn_target_parse("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76", &t, err,
                                     sizeof err),
                     AT_OK);
    assert_int_equal(t.kind, KN_TARGET_LLVM);
    assert_true(t.is_aarch64);
}

/* Sketch counts next to Ansor's GPU column (REFERENCE.md §4). */
static void test_sketch_counts(void **unused)
{
    static const struct {
        const char *spec;
        int n;
    } cases[] = {
        {"matmul:M=512,N=512,K=512", 1},
        {"matmul:M=8,N=8,K=1024", 2},
        {"conv2d:N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1,bias=1,relu=1", 1},
        {"max_pool2d:N=1,C=8,H=16,W=16,kernel=3,stride=2,pad=1", 1},
        {"softmax:M=2,N=1024", 4},
    };
    (void)unused;
    for (size_t i = 0; i < AT_ARRAY_LEN(cases); i++) {
        ss_dag *dag = dag_of(cases[i].spec);
        ss_space *sp;
        ss_hw hw;
        char err[256];
        kn_target_hw(&gpu, &hw);
        assert_int_equal(ss_space_new(dag, &hw, NULL, &sp, err, sizeof err), AT_OK);
        if (ss_space_n_sketches(sp) != cases[i].n)
            fail_msg("%s: %d GPU sketches, expected %d", cases[i].spec, ss_space_n_sketches(sp),
                     cases[i].n);
        ss_space_free(sp);
        ss_dag_unref(dag);
    }
}

/* Lower a state given as JSON on 'spec'. */
static kn_ir *lower_json(const char *spec, const char *json)
{
    ss_dag *dag = dag_of(spec);
    ss_state *st;
    kn_ir *ir;
    char err[512];
    if (ss_state_from_json(dag, json, strlen(json), &st, err, sizeof err) != AT_OK)
        fail_msg("%s", err);
    if (kn_lower(st, &ir, err, sizeof err) != AT_OK)
        fail_msg("%s", err);
    ss_state_free(st);
    ss_dag_unref(dag);
    return ir;
}

static void expect_refused(const kn_ir *ir, const char *target, const char *msg)
{
    kn_target t;
    kn_artifact *a = NULL;
    char err[512];
    assert_int_equal(kn_target_parse(target, &t, err, sizeof err), AT_OK);
    assert_int_equal(kn_verify(ir, &t, err, sizeof err), AT_ESCHED);
    if (strstr(err, msg) == NULL)
        fail_msg("%s: expected '%s', got '%s'", target, msg, err);
    assert_int_equal(kn_build(ir, &t, NULL, &a, err, sizeof err), AT_ESCHED);
    assert_null(a);
}

/* Launches a GPU would refuse are rejected before anything is built or measured. */
static void test_launch_limits(void **unused)
{
    /* 2048 threads in one block; then 256 threads (allowed by default) */
    static const char many_threads[] =
        "{\"v\":1,\"steps\":[[\"FU\",2,[0,1]],[\"SP\",2,0,4096,[2048],1],[\"AN\",2,0,5],"
        "[\"AN\",2,1,6]]}";
    static const char nested_blocks[] =
        "{\"v\":1,\"steps\":[[\"AN\",2,0,5],[\"AN\",2,1,5]]}";
    ss_dag *dag;
    ss_space *sp;
    ss_hw hw;
    at_rng rng;
    kn_ir *ir;
    char err[512];
    (void)unused;
    ir = lower_json("matmul:M=64,N=64,K=8", many_threads);
    expect_refused(ir, "cuda -arch=sm_90", "2048 threads per block");
    kn_ir_free(ir);
    ir = lower_json("matmul:M=64,N=64,K=8", "{\"v\":1,\"steps\":[[\"FU\",2,[0,1]],"
                                            "[\"SP\",2,0,4096,[256],1],[\"AN\",2,0,5],"
                                            "[\"AN\",2,1,6]]}");
    expect_refused(ir, "cuda -arch=sm_90 -max-threads-per-block=128", "256 threads per block");
    {
        kn_target t;
        assert_int_equal(kn_target_parse("cuda -arch=sm_90", &t, err, sizeof err), AT_OK);
        assert_int_equal(kn_verify(ir, &t, err, sizeof err), AT_OK);
        /* a GPU program for a CPU target, and a CPU program for a GPU target */
        assert_int_equal(kn_verify(ir, &host, err, sizeof err), AT_ESCHED);
        assert_non_null(strstr(err, "binds loops to GPU blocks or threads"));
    }
    kn_ir_free(ir);
    ir = lower_json("matmul:M=64,N=64,K=8", nested_blocks);
    expect_refused(ir, "cuda -arch=sm_90", "two loops are bound to blockIdx.x");
    kn_ir_free(ir);
    {
        ss_state *naive;
        dag = dag_of("matmul:M=64,N=64,K=8");
        assert_int_equal(ss_state_new(dag, &naive), AT_OK);
        assert_int_equal(kn_lower(naive, &ir, err, sizeof err), AT_OK);
        expect_refused(ir, "cuda -arch=sm_90", "binds no loop to GPU blocks or threads");
        kn_ir_free(ir);
        ss_state_free(naive);
        ss_dag_unref(dag);
    }
    /* shared memory: sampled matmul states need more than 1 KiB; the sampler keeps within
    ** the hardware it is given, and the CUDA C check refuses what exceeds the target */
    dag = dag_of("matmul:M=128,N=128,K=128");
    ss_hw_gpu(&hw, 132, 1024, 48 * 1024);
    assert_int_equal(ss_space_new(dag, &hw, NULL, &sp, err, sizeof err), AT_OK);
    at_rng_seed(&rng, 5);
    {
        int refused = 0, n = 0;
        for (int tries = 0; tries < 100000 && n < 20; tries++) {
            ss_state *st;
            kn_target small;
            if (ss_space_sample(sp, &rng, &st) != AT_OK)
                continue;
            n++;
            assert_int_equal(kn_lower(st, &ir, err, sizeof err), AT_OK);
            assert_int_equal(kn_target_parse("cuda -arch=sm_90 -max-shared-memory-per-block=1024",
                                             &small, err, sizeof err),
                             AT_OK);
            if (kn_verify(ir, &small, err, sizeof err) == AT_ESCHED) {
                assert_non_null(strstr(err, "bytes of shared memory per block"));
                refused++;
            }
            kn_ir_free(ir);
            ss_state_free(st);
        }
        assert_int_equal(n, 20);
        assert_true(refused >= 15);
    }
    ss_space_free(sp);
    /* the sampler under small limits: every state it gives fits them */
    ss_hw_gpu(&hw, 132, 64, 4096);
    assert_int_equal(ss_space_new(dag, &hw, NULL, &sp, err, sizeof err), AT_OK);
    {
        kn_target t;
        int n = 0;
        assert_int_equal(kn_target_parse("cuda -arch=sm_90 -max-threads-per-block=64 "
                                         "-max-shared-memory-per-block=4096",
                                         &t, err, sizeof err),
                         AT_OK);
        for (int tries = 0; tries < 200000 && n < 10; tries++) {
            ss_state *st;
            if (ss_space_sample(sp, &rng, &st) != AT_OK)
                continue;
            n++;
            assert_int_equal(kn_lower(st, &ir, err, sizeof err), AT_OK);
            if (kn_verify(ir, &t, err, sizeof err) != AT_OK)
                fail_msg("a sample breaks the limits it was drawn under: %s", err);
            kn_ir_free(ir);
            ss_state_free(st);
        }
        assert_int_equal(n, 10);
    }
    ss_space_free(sp);
    ss_dag_unref(dag);
    /* registers: a block of 256 threads cannot live with 1024 registers (cubin needed) */
    if (have_nvrtc) {
        kn_target t;
        kn_artifact *a = NULL;
        ir = lower_json("matmul:M=64,N=64,K=8", "{\"v\":1,\"steps\":[[\"FU\",2,[0,1]],"
                                                "[\"SP\",2,0,4096,[256],1],[\"AN\",2,0,5],"
                                                "[\"AN\",2,1,6]]}");
        assert_int_equal(kn_target_parse("cuda -arch=sm_90 -max-registers-per-block=1024", &t,
                                         err, sizeof err),
                         AT_OK);
        assert_int_equal(kn_build(ir, &t, NULL, &a, err, sizeof err), AT_ESCHED);
        assert_non_null(strstr(err, "registers x 256 threads"));
        kn_ir_free(ir);
    } else {
        printf("SKIP (no NVRTC): the register limit needs a cubin\n");
    }
}

/* A build worker's result (BUILD_RES) carrying 'a', encoded by the wire library. */
static void pack_built(const kn_artifact *a, at_buf *buf)
{
    at_wire_msg m;
    at_wire_arg args[AT_WIRE_MAX_ARGS];
    at_wire_msg_init(&m, AT_WIRE_T_BUILD_RES);
    m.u.built.id = 7;
    kn_artifact_to_wire(a, &m.u.built.art, args);
    assert_int_equal(at_wire_encode(NULL, &m, buf), AT_OK);
    at_wire_msg_fini(&m);
}

static at_err unpack_built(const void *p, size_t n, kn_artifact **out, char *err, size_t size)
{
    at_wire_msg m;
    at_err e = at_wire_decode(NULL, p, n, &m, err, size);
    *out = NULL;
    if (e == AT_OK && (m.type != AT_WIRE_T_BUILD_RES || m.u.built.id != 7))
        e = AT_EPROTO;
    if (e == AT_OK)
        e = kn_artifact_from_wire(&m.u.built.art, out, err, size);
    at_wire_msg_fini(&m);
    return e;
}

/* GPU artifacts survive the wire; malformed bytes are refused. */
static void test_pack(void **unused)
{
    kn_artifact a, *b;
    at_buf buf;
    char err[256];
    (void)unused;
    memset(&a, 0, sizeof a);
    a.obj = (uint8_t *)"// PTX\n.version 8.0\n";
    a.obj_size = strlen((const char *)a.obj) + 1;
    snprintf(a.entry, sizeof a.entry, "at_kernel");
    snprintf(a.triple, sizeof a.triple, "nvptx64-nvidia-cuda");
    snprintf(a.gpu_arch, sizeof a.gpu_arch, "sm_90");
    a.kind = KN_ART_PTX;
    a.n_args = 1;
    a.args[0].dtype = AT_DT_F32;
    a.args[0].n_dims = 1;
    a.args[0].shape[0] = 16;
    a.args[0].is_output = 1;
    a.kernel_args[0] = a.args[0];
    a.kernel_src[0] = -1;
    a.ws_fixed = 256;
    a.n_launches = 2;
    for (int k = 0; k < 2; k++) {
        snprintf(a.launches[k].entry, sizeof a.launches[k].entry, "at_kernel_k%d", k);
        a.launches[k].grid[0] = 7 + k;
        a.launches[k].grid[1] = a.launches[k].grid[2] = 1;
        a.launches[k].block[0] = 128;
        a.launches[k].block[1] = a.launches[k].block[2] = 1;
        a.launches[k].shared_bytes = 4096 * k;
        a.launches[k].n_regs = 40;
    }
    /* through the wire library, as a build worker's result carries it */
    at_buf_init(&buf);
    pack_built(&a, &buf);
    assert_int_equal(unpack_built(buf.data, buf.len, &b, err, sizeof err), AT_OK);
    assert_int_equal(b->kind, KN_ART_PTX);
    assert_string_equal(b->gpu_arch, "sm_90");
    assert_int_equal(b->n_launches, 2);
    assert_string_equal(b->launches[1].entry, "at_kernel_k1");
    assert_int_equal(b->launches[1].grid[0], 8);
    assert_int_equal(b->launches[1].shared_bytes, 4096);
    assert_int_equal(b->launches[0].n_regs, 40);
    assert_int_equal(b->ws_fixed, 256);
    assert_memory_equal(b->obj, a.obj, a.obj_size);
    kn_artifact_free(b);
    /* every truncation is refused, and so is a block of 2048 threads */
    for (size_t n = 0; n < buf.len; n++)
        assert_int_equal(unpack_built(buf.data, n, &b, err, sizeof err), AT_EPROTO);
    a.launches[0].block[0] = 2048;
    at_buf_reset(&buf);
    pack_built(&a, &buf);
    assert_int_equal(unpack_built(buf.data, buf.len, &b, err, sizeof err), AT_EPROTO);
    at_buf_fini(&buf);
    /* a GPU artifact does not run on the CPU */
    {
        kn_bufset bs;
        a.launches[0].block[0] = 128;
        assert_int_equal(kn_bufset_alloc(&a, 1, &bs), AT_OK);
        assert_int_equal(kn_run_once(&a, &bs, kn_rt_serial_par(), err, sizeof err),
                         AT_EUNSUPPORTED);
        kn_bufset_free(&bs);
    }
}

static int setup(void **unused)
{
    char err[256];
    const kn_backend_ops *cuda = kn_backend_find("cuda");
    (void)unused;
    if (kn_target_host(&host) != AT_OK ||
        kn_target_parse("cuda -arch=sm_90", &gpu, err, sizeof err) != AT_OK)
        return -1;
    have_nvrtc = cuda != NULL && cuda->version() != NULL;
    have_cc = gpu_emu_available();
    long_mode = getenv("AT_TEST_LONG") != NULL;
    printf("cuda backend: %s%s%s; emulator: %s\n", cuda ? "yes" : "not in this build",
           cuda ? ", " : "", cuda ? (cuda->version() ? cuda->version() : "NVRTC not loadable")
                              : "",
           have_cc ? "cc" : "no C compiler");
    return 0;
}

/* LeakSanitizer (the sanitizer build): no scan of thread-local storage in this program.
** It loads NVRTC, and LeakSanitizer's tracer then crashed while walking the main thread's
** dynamic TLS ("Tracer caught signal 11", "LeakSanitizer has encountered a fatal error") in
** most runs on a loaded machine (7 of 8 beside two busy processes), after every test had
** passed.  Our code keeps no heap pointer only in thread-local storage that this program
** reaches; what glibc keeps there (thread-specific data, dlerror's buffer) is suppressed. */
const char *__lsan_default_options(void);
const char *__lsan_default_suppressions(void);
const char *__lsan_default_options(void)
{
    return "use_tls=0";
}
const char *__lsan_default_suppressions(void)
{
    return "leak:pthread_setspecific\nleak:_dlerror_run\nleak:_dl_exception_create\n";
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_targets),
        cmocka_unit_test(test_sketch_counts),
        cmocka_unit_test(test_pack),
        cmocka_unit_test(test_launch_limits),
        cmocka_unit_test(test_naive_reference),
        cmocka_unit_test(test_library_operators),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
