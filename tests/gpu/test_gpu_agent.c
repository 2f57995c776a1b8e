/* tests/gpu/test_gpu_agent.c -- 'rpc_agent --device' on a machine without a GPU, through the
** real binary (build/<flavour>/bin/rpc_agent): a device string that is not cpu, cuda or
** cuda:N is a usage error (exit 2) before anything starts; with --device cuda:0 the GPU probe
** (a child of the launcher, the only process that loads the driver) answers "no GPU: ..."
** within seconds, and the agent exits 1 with that sentence: when the driver cannot be loaded
** (AT_LIBCUDA names a missing file), and, with the toolkit's stub driver (which loads but
** has no device), when cuInit or the device fails.  Also the GPU check's tool gpu_verify
** (tests/tools): "no GPU" without one, and with --emulate three operators' naive and random
** GPU states run on the CPU (tests/support/gpu_emu) against the plain-C reference.  A host
** with a real GPU is not needed and not used: AT_LIBCUDA is always set. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/common.h"
#include "kernels/kernels.h"
#include "tests/support/gpu_emu.h"

static char bin[PATH_MAX + 32], verify[PATH_MAX + 32], key[PATH_MAX + 32], dir[64];

/* Run 'exe' with 'libcuda' as AT_LIBCUDA and 'args'; its exit code, stdout and stderr
** (at_malloc'd) and how long it ran. */
static int run_exe(const char *exe, const char *libcuda, const char *const *args, char **out,
                   char **err, double *secs)
{
    char po[PATH_MAX], pe[PATH_MAX];
    double t0 = at_time_mono_s();
    pid_t pid;
    int status = 0;
    snprintf(po, sizeof po, "%s/out", dir);
    snprintf(pe, sizeof pe, "%s/err", dir);
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid == 0) {
        const char *argv[32];
        int argc = 0;
        int fo = open(po, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int fe = open(pe, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fo < 0 || fe < 0)
            _exit(120);
        dup2(fo, 1);
        dup2(fe, 2);
        setpgid(0, 0);
        setenv("AT_LIBCUDA", libcuda, 1);
        argv[argc++] = "rpc_agent";
        for (int i = 0; args[i] && argc < 31; i++)
            argv[argc++] = args[i];
        argv[argc] = NULL;
        execv(exe, (char *const *)argv);
        _exit(121);
    }
    assert_true(pid > 0);
    for (int i = 0; i < 600; i++) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            break;
        usleep(50000);
        if (i == 599) {
            kill(-pid, SIGKILL);
            waitpid(pid, &status, 0);
            fail_msg("%s did not end within 30 s", exe);
        }
    }
    *secs = at_time_mono_s() - t0;
    {
        size_t n;
        char msg[256];
        if (at_file_read(po, out, &n, msg, sizeof msg) != AT_OK ||
            at_file_read(pe, err, &n, msg, sizeof msg) != AT_OK)
            fail_msg("%s", msg);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int run_agent(const char *libcuda, const char *const *args, char **out, char **err,
                     double *secs)
{
    return run_exe(bin, libcuda, args, out, err, secs);
}

static void expect(const char *libcuda, const char *device, int rc, const char *msg)
{
    const char *const args[] = {"--tracker", "127.0.0.1:1", "--key", "gpu", "--fleet-key", key,
                                "--device", device, NULL};
    char *out, *err;
    double secs;
    int got = run_agent(libcuda, args, &out, &err, &secs);
    if (got != rc || strstr(err, msg) == NULL)
        fail_msg("--device %s (AT_LIBCUDA=%s): exit %d, stderr '%s' (wanted %d and '%s')",
                 device, libcuda, got, err, rc, msg);
    if (secs > 20)
        fail_msg("--device %s: took %.1f s", device, secs);
    if (strstr(err, "AddressSanitizer") || strstr(err, "runtime error"))
        fail_msg("--device %s: sanitizer report: %s", device, err);
    at_free(out);
    at_free(err);
}

static void test_bad_device_strings(void **unused)
{
    static const char *const bad[] = {"gpu0", "cuda:", "cuda:x", "cuda:-1", "cuda:64",
                                      "cuda:0x", "CUDA:0", "cuda0", ""};
    (void)unused;
    for (size_t i = 0; i < AT_ARRAY_LEN(bad); i++)
        expect("/nonexistent/libcuda.so.1", bad[i], 2, "unknown device");
}

static void test_no_driver(void **unused)
{
    (void)unused;
    expect("/nonexistent/libcuda.so.1", "cuda:0", 1,
           "no GPU: the CUDA driver (/nonexistent/libcuda.so.1) cannot be loaded");
    expect("/nonexistent/libcuda.so.1", "cuda", 1, "no GPU: the CUDA driver");
}

/* The toolkit's stub libcuda.so loads and answers every call with an error. */
static void test_stub_driver(void **unused)
{
    const char *home = getenv("CUDA_HOME");
    char stub[PATH_MAX];
    (void)unused;
    snprintf(stub, sizeof stub, "%s/lib64/stubs/libcuda.so",
             home && *home ? home : "/usr/local/cuda");
    if (access(stub, R_OK) != 0) {
        printf("SKIP (no %s): the probe's answer for a driver without a device\n", stub);
        return;
    }
    expect(stub, "cuda:3", 1, "no GPU: cuda:3 is not there (error ");
}

static void test_version(void **unused)
{
    const char *const args[] = {"--version", NULL};
    char *out, *err;
    double secs;
    (void)unused;
    assert_int_equal(run_agent("/nonexistent", args, &out, &err, &secs), 0);
    assert_non_null(strstr(out, "rpc_agent "));
    assert_non_null(strstr(out, "(protocol "));
    at_free(out);
    at_free(err);
}

/* gpu_verify (the GPU check's comparison with the CPU reference): without a GPU it says so;
** with --emulate its states run on the CPU and match the plain-C reference. */
static void test_gpu_verify(void **unused)
{
    const char *const plain[] = {"--states", "1", "matmul:M=8,N=8,K=8", NULL};
    const char *const emulated[] = {"--emulate", "--states", "2", "matmul:M=64,N=48,K=32",
                                    "softmax:M=2,N=256",
                                    "conv2d:N=1,C=8,H=14,W=14,K=16,R=3,S=3,pad=1,bias=1,relu=1",
                                    NULL};
    const char *const bad[] = {"--states", "many", NULL};
    char *out, *err;
    double secs;
    int rc;
    (void)unused;
    rc = run_exe(verify, "/nonexistent/libcuda.so.1", plain, &out, &err, &secs);
    if (rc != 1 || strstr(out, kn_backend_find("cuda") ? "no GPU: the CUDA driver"
                                                       : "this build has no CUDA backend") == NULL)
        fail_msg("gpu_verify without a GPU: exit %d, '%s' '%s'", rc, out, err);
    at_free(out);
    at_free(err);
    rc = run_exe(verify, "/nonexistent/libcuda.so.1", bad, &out, &err, &secs);
    assert_int_equal(rc, 2);
    at_free(out);
    at_free(err);
    if (!gpu_emu_available()) {
        printf("SKIP (no C compiler): gpu_verify --emulate\n");
        return;
    }
    rc = run_exe(verify, "/nonexistent/libcuda.so.1", emulated, &out, &err, &secs);
    if (rc != 0 || strstr(out, "every GPU state matches the CPU reference") == NULL)
        fail_msg("gpu_verify --emulate: exit %d, '%s' '%s'", rc, out, err);
    printf("%s", out);
    at_free(out);
    at_free(err);
}

static int setup(void **unused)
{
    char exe[PATH_MAX], cmd[2 * PATH_MAX + 128], *p;
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    (void)unused;
    if (n <= 0)
        return -1;
    exe[n] = 0;
    if ((p = strstr(exe, "/tests/gpu/")) == NULL)
        return -1;
    *p = 0;
    snprintf(bin, sizeof bin, "%s/bin/rpc_agent", exe);
    snprintf(verify, sizeof verify, "%s/tests/tools/gpu_verify", exe);
    if (access(bin, X_OK) != 0 || access(verify, X_OK) != 0) {
        fprintf(stderr, "missing %s or %s (make tests-san builds them)\n", bin, verify);
        return -1;
    }
    snprintf(dir, sizeof dir, "/tmp/at_gpu_agent_XXXXXX");
    if (mkdtemp(dir) == NULL)
        return -1;
    snprintf(key, sizeof key, "%s/fleet.key", dir);
    snprintf(cmd, sizeof cmd, "%s/bin/tracker init-fleet --fleet-key %s >/dev/null", exe, key);
    return system(cmd) == 0 ? 0 : -1;
}

static int teardown(void **unused)
{
    char cmd[128];
    (void)unused;
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_bad_device_strings),
        cmocka_unit_test(test_no_driver),
        cmocka_unit_test(test_stub_driver),
        cmocka_unit_test(test_gpu_verify),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
