/* tests/gpu/test_gpu_agent_batch.c -- the GPU agent's batch path without a GPU: a real
** tracker process, a real 'rpc_agent --device cuda:0' whose children load a stand-in driver
** (tests/gpu/fake_libcuda.c, compiled here with 'cc -shared'; AT_LIBCUDA points at it), and
** jobs whose "modules" tell the fake what to do.  Each job ends with the right status and
** text: a good kernel's timing (the fake's virtual clock: 10 us a launch, through CUDA events
** and the growth of 'number' to min_repeat_ms), a wrong answer, a write into the guard zone,
** a fault that loses the context (the child ends, the next job runs in a new one), a launch
** that fails, a module that does not load (with the JIT log), a cubin or PTX for another
** architecture, a missing kernel, a hang (the job's timeout), a CPU artifact, kernels too
** slow for their repeats to fit in the job's budget (fewer repeats, no time-out).  The agent
** registers the fake GPU's model, clocks and driver.  What the fake cannot show -- real
** kernels, real faults, real times -- needs a GPU (scripts/gpu_check.sh). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>

#include "records/records.h"
#include "rpc_agent/rpc_agent.h"
#include "tests/fleet/fleet_results.h"
#include "tests/fleet/fleet_test.h"
#include "tuner/tuner.h"

#define N_ELEMS 250 /* 1000 bytes */

static at_wire_key fleet_key;
static const char *key_path;
static char tracker_out[PATH_MAX], tracker_err[PATH_MAX], fake[PATH_MAX];
static pid_t tracker_pid;
static int port, have_fake;

static at_wire_arg sig[2] = {
    {AT_DT_F32, 0, 1, {N_ELEMS}},
    {AT_DT_F32, 1, 1, {N_ELEMS}},
};

static const at_wire_launch launch_k = {"k", {1, 1, 1}, {256, 1, 1}, 0, 0};
static const at_wire_launch launch_missing = {"missing", {1, 1, 1}, {256, 1, 1}, 0, 0};

static void test_fake_gpu_batches(void **unused)
{
    static const struct {
        const char *id, *module;
        int kind;          /* AT_WIRE_GPU_* */
        const char *arch;
        int status;
        const char *text;  /* a piece of the error text */
        int timeout_ms;
        double cost;       /* a good job's seconds per run (0: 10 us, the fake's default) */
        int n_costs;       /* and its repeats (0: all 3) */
    } cases[] = {
        {"good-1", "FAKE mode=ok out=1 bytes=1000 val=3.0", 1, "sm_90", AT_MEASURE_NO_ERROR, "",
         5000, 0, 0},
        {"wrong", "FAKE mode=ok out=1 bytes=1000 val=4.0", 1, "sm_90", AT_MEASURE_WRONG_ANSWER,
         "relative error", 5000, 0, 0},
        {"oob", "FAKE mode=oob out=1 bytes=1000 val=3.0", 1, "sm_90", AT_MEASURE_RUNTIME_DEVICE,
         "out of bounds of argument 1", 5000, 0, 0},
        {"fault", "FAKE mode=fault out=1 bytes=1000 val=3.0", 1, "sm_90",
         AT_MEASURE_RUNTIME_DEVICE, "CUDA_ERROR_ILLEGAL_ADDRESS (700", 5000, 0, 0},
        {"good-2", "FAKE mode=ok out=1 bytes=1000 val=3.0", 1, "sm_90", AT_MEASURE_NO_ERROR, "",
         5000, 0, 0},
        {"launchfail", "FAKE mode=launchfail out=1 bytes=1000 val=3.0", 1, "sm_90",
         AT_MEASURE_RUNTIME_DEVICE, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", 5000, 0, 0},
        {"badptx", "BADPTX", 1, "sm_90", AT_MEASURE_COMPILE_DEVICE, "ptxas fatal", 5000, 0, 0},
        {"cubin80", "FAKE mode=ok out=1 bytes=1000 val=3.0", 2, "sm_80",
         AT_MEASURE_COMPILE_DEVICE, "built for sm_80 (cubin)", 5000, 0, 0},
        {"ptx100", "FAKE mode=ok out=1 bytes=1000 val=3.0", 1, "sm_100",
         AT_MEASURE_COMPILE_DEVICE, "this GPU is sm_90", 5000, 0, 0},
        {"nokernel", "FAKE mode=ok out=1 bytes=1000 val=3.0", 1, "sm_90",
         AT_MEASURE_COMPILE_DEVICE, "no kernel 'missing'", 5000, 0, 0},
        {"hang", "FAKE mode=hang out=1 bytes=1000 val=3.0", 1, "sm_90", AT_MEASURE_RUN_TIMEOUT,
         "longer than 700 ms", 700, 0, 0},
        {"cpu", "FAKE mode=ok out=1 bytes=1000 val=3.0", 0, NULL, AT_MEASURE_COMPILE_DEVICE,
         "not a GPU kernel", 5000, 0, 0},
        {"good-3", "FAKE mode=ok out=1 bytes=1000 val=3.0", 1, "sm_90", AT_MEASURE_NO_ERROR, "",
         5000, 0, 0},
        /* slow kernels (virtual seconds): 3 s a run in a 10 s budget: no warm-up, the 2
        ** repeats that fit in 80% of it; 9 s: the checked run is the one repeat */
        {"slow", "FAKE mode=ok out=1 bytes=1000 val=3.0 ms=3000", 1, "sm_90",
         AT_MEASURE_NO_ERROR, "", 10000, 3.0, 2},
        {"slower", "FAKE mode=ok out=1 bytes=1000 val=3.0 ms=9000", 1, "sm_90",
         AT_MEASURE_NO_ERROR, "", 10000, 9.0, 1},
    };
    enum { N = sizeof cases / sizeof cases[0] };
    static const char ref_module[] = "FAKE mode=ok out=1 bytes=1000 val=3.0";
    tn_fleet *f;
    tn_fleet_job jobs[N];
    char err[512], url[64], log[PATH_MAX];
    uint8_t ref_id[AT_WIRE_REFID_BYTES];
    kn_artifact ref;
    pid_t agent;
    ft_got g;
    double end;
    char *text;
    (void)unused;
    if (!have_fake) {
        printf("SKIP (no C compiler): the fake driver was not built\n");
        return;
    }
    snprintf(url, sizeof url, "127.0.0.1:%d", port);
    snprintf(log, sizeof log, "%s/agent.log", ft_tmpdir());
    setenv("AT_LIBCUDA", fake, 1);
    agent = ft_start_agent(port, "fakegpu", key_path, log, 300,
                           (const char *const[]){"--device", "cuda:0", NULL});
    unsetenv("AT_LIBCUDA");
    if (!ft_wait_for_text(log, "GPU cuda:0: Fake GPU (1980 MHz, memory 3201 MHz), sm_90, 132 "
                               "SMs, CUDA driver 13.0",
                          30)) {
        text = ft_read(log);
        fail_msg("the agent did not describe the fake GPU: %s", text ? text : "(no log)");
    }
    assert_int_equal(tn_fleet_open(&(tn_fleet_cfg){.tracker = url, .keys = &fleet_key,
                                                   .n_keys = 1, .device_key = "fakegpu"},
                                   &f, err, sizeof err),
                     AT_OK);
    /* the reference: a good "kernel" */
    memset(&ref, 0, sizeof ref);
    ref.obj = (uint8_t *)ref_module;
    ref.obj_size = sizeof ref_module;
    snprintf(ref.entry, sizeof ref.entry, "at_ref");
    snprintf(ref.triple, sizeof ref.triple, "nvptx64-nvidia-cuda");
    snprintf(ref.gpu_arch, sizeof ref.gpu_arch, "sm_90");
    ref.kind = KN_ART_PTX;
    ref.n_launches = 1;
    ref.launches[0] = launch_k;
    ref.n_args = 2;
    ref.args[0].dtype = AT_DT_F32;
    ref.args[0].n_dims = 1;
    ref.args[0].shape[0] = N_ELEMS;
    ref.args[1] = ref.args[0];
    ref.args[1].is_output = 1;
    assert_int_equal(tn_fleet_add_ref(f, &ref, ref_id), AT_OK);
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < N; i++) {
        at_wire_artifact *a = &jobs[i].w.art;
        a->obj = (const uint8_t *)cases[i].module;
        a->obj_size = strlen(cases[i].module) + 1;
        a->entry = "at_kernel";
        a->triple = cases[i].kind ? "nvptx64-nvidia-cuda" : "x86_64-pc-linux-gnu";
        a->n_args = 2;
        a->args = sig;
        a->gpu_kind = cases[i].kind;
        a->gpu_arch = cases[i].arch;
        a->n_launches = cases[i].kind ? 1 : 0;
        a->launches = strcmp(cases[i].id, "nokernel") == 0 ? &launch_missing : &launch_k;
        jobs[i].w.id = cases[i].id;
        at_wire_settings_default(&jobs[i].w.run);
        jobs[i].w.run.repeat = 3;
        jobs[i].w.run.min_repeat_ms = 0.1;
        jobs[i].w.run.timeout_ms = cases[i].timeout_ms;
        jobs[i].w.seed = 7;
        jobs[i].w.has_ref = 1;
        memcpy(jobs[i].w.ref, ref_id, sizeof ref_id);
        jobs[i].state = cases[i].id;
        jobs[i].trial = i;
    }
    assert_int_equal(tn_fleet_submit(f, jobs, N), AT_OK);
    memset(&g, 0, sizeof g);
    end = ft_now() + 120; /* generous: it is not a timing */
    while (tn_fleet_pending(f) > 0 && ft_now() < end)
        assert_true(tn_fleet_wait(f, 1000, ft_on_result, &g) == AT_OK);
    assert_int_equal(tn_fleet_pending(f), 0);
    for (int i = 0; i < N; i++) {
        int k = ft_find(&g, cases[i].id);
        assert_true(k >= 0);
        printf("  %-10s %-16s %.3g s  %.150s\n", cases[i].id, at_measure_name(g.status[k]),
               g.cost[k], g.text[k]);
        if (g.status[k] != cases[i].status || strstr(g.text[k], cases[i].text) == NULL)
            fail_msg("job %s: status %s (%s), expected %s with '%s'", cases[i].id,
                     at_measure_name(g.status[k]), g.text[k], at_measure_name(cases[i].status),
                     cases[i].text);
        /* a good job's time: 10 us a launch on the fake's clock (float milliseconds), or
        ** the slow ones' */
        if (cases[i].status == AT_MEASURE_NO_ERROR) {
            double want = cases[i].cost > 0 ? cases[i].cost : 1e-5;
            int reps = cases[i].n_costs > 0 ? cases[i].n_costs : 3;
            if (fabs(g.cost[k] - want) > 1e-2 * want)
                fail_msg("job %s: %g s per run, expected %g", cases[i].id, g.cost[k], want);
            if (g.n_costs[k] != reps)
                fail_msg("job %s: %d repeats, expected %d", cases[i].id, g.n_costs[k], reps);
        }
    }
    /* the agent is still serving, and used a new child after the fault */
    assert_int_equal(ft_wait(agent, 0), -1);
    tn_fleet_close(f);
    kill(agent, SIGTERM);
    assert_true(ft_wait(agent, 20) >= 0);
}

static int setup(void **state)
{
    char cmd[3 * PATH_MAX];
    (void)state;
    key_path = ft_keyfile("fleet.key", &fleet_key);
    snprintf(tracker_out, sizeof tracker_out, "%s/tracker.out", ft_tmpdir());
    snprintf(tracker_err, sizeof tracker_err, "%s/tracker.err", ft_tmpdir());
    snprintf(fake, sizeof fake, "%s/libcuda_fake.so", ft_tmpdir());
    snprintf(cmd, sizeof cmd, "cc -std=gnu11 -O1 -shared -fPIC -o '%s' '%s/tests/gpu/fake_libcuda.c'",
             fake, ft_root());
    have_fake = system("cc --version >/dev/null 2>&1") == 0;
    if (have_fake && system(cmd) != 0) {
        fprintf(stderr, "the fake driver does not compile: %s\n", cmd);
        return -1;
    }
    tracker_pid = ft_start_tracker(key_path, 0, tracker_out, tracker_err, NULL, &port);
    return port > 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    if (tracker_pid > 0) {
        kill(tracker_pid, SIGTERM);
        if (ft_wait(tracker_pid, 10) < 0)
            ft_kill(tracker_pid);
    }
    if (getenv("AT_KEEP_TMP") == NULL)
        ft_rmtmp();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fake_gpu_batches),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, setup, teardown);
}
