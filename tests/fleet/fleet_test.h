/* tests/fleet/fleet_test.h -- helpers shared by the fleet tests (static functions, included
** by each test file): paths of the built commands, starting and stopping real processes,
** temporary directories and keys, kernels compiled from C at test time, waiting with a
** deadline. */
#ifndef FLEET_TEST_H
#define FLEET_TEST_H

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/common.h"
#include "common/wire.h"

/* build/<flavour> of this test executable (…/build/san/tests/fleet/test_x -> …/build/san). */
__attribute__((unused)) static const char *ft_build_dir(void)
{
    static char dir[PATH_MAX];
    if (dir[0] == 0) {
        ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
        char *p;
        if (n <= 0) return "build/san";
        dir[n] = 0;
        if ((p = strstr(dir, "/tests/")) != NULL) *p = 0;
    }
    return dir;
}

__attribute__((unused)) static const char *ft_path(const char *rel, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%s", ft_build_dir(), rel);
    return buf;
}

/* Repository root: build/<flavour>/../.. */
__attribute__((unused)) static const char *ft_root(void)
{
    static char root[PATH_MAX];
    if (root[0] == 0) {
        char *p;
        snprintf(root, sizeof root, "%s", ft_build_dir());
        for (int i = 0; i < 2 && (p = strrchr(root, '/')) != NULL; i++)
            *p = 0;
    }
    return root;
}

static char ft_tmp[PATH_MAX];

__attribute__((unused)) static const char *ft_tmpdir(void)
{
    if (ft_tmp[0] == 0) {
        snprintf(ft_tmp, sizeof ft_tmp, "/tmp/at_fleet_XXXXXX");
        if (mkdtemp(ft_tmp) == NULL) abort();
    }
    return ft_tmp;
}

__attribute__((unused)) static void ft_rmtmp(void)
{
    char cmd[PATH_MAX + 32];
    if (ft_tmp[0]) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", ft_tmp);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", ft_tmp);
    }
}

__attribute__((unused)) static double ft_now(void)
{
    return at_time_mono_s();
}

__attribute__((unused)) static void ft_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Start argv[0] (a path) with stdout and stderr to files (NULL: /dev/null). */
__attribute__((unused)) static pid_t ft_spawn(char *const argv[], const char *out_path,
                                              const char *err_path)
{
    pid_t pid, parent = getpid();
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid == 0) {
        int o;
        /* a test that fails half-way (cmocka jumps out of it) leaves no daemon running:
        ** the child dies with the test process */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        o = open(out_path ? out_path : "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0644);
        int e = open(err_path ? err_path : "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (o >= 0) dup2(o, 1);
        if (e >= 0) dup2(e, 2);
        setpgid(0, 0);
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

/* Wait up to timeout_s for 'pid'; returns its wait status, or -1 when it is still running. */
__attribute__((unused)) static int ft_wait(pid_t pid, double timeout_s)
{
    double end = ft_now() + timeout_s;
    int st;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return st;
        if (r < 0) return -2;
        if (ft_now() > end) return -1;
        ft_sleep_ms(20);
    }
}

/* SIGKILL the process group of 'pid' and reap it. */
__attribute__((unused)) static void ft_kill(pid_t pid)
{
    if (pid <= 0) return;
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
    ft_wait(pid, 10);
}

/* SIGTERM 'pid', give it 'grace_s' to exit, then SIGKILL it (a teardown's stop). */
__attribute__((unused)) static void ft_stop(pid_t pid, double grace_s)
{
    if (pid <= 0) return;
    kill(pid, SIGTERM);
    if (ft_wait(pid, grace_s) < 0) ft_kill(pid);
}

/* The whole file as a string (at_free), or NULL. */
__attribute__((unused)) static char *ft_read(const char *path)
{
    char *s = NULL, err[256];
    size_t n;
    if (at_file_read(path, &s, &n, err, sizeof err) != AT_OK) return NULL;
    return s;
}

/* Poll 'path' until it contains 'needle' (or the deadline); returns 1 when found. */
__attribute__((unused)) static int ft_wait_for_text(const char *path, const char *needle,
                                                    double timeout_s)
{
    double end = ft_now() + timeout_s;
    do {
        char *s = ft_read(path);
        int found = s && strstr(s, needle) != NULL;
        at_free(s);
        if (found) return 1;
        ft_sleep_ms(50);
    } while (ft_now() < end);
    return 0;
}

/* Create a fleet key file in the temporary directory. */
__attribute__((unused)) static const char *ft_keyfile(const char *name, at_wire_key *key)
{
    static char path[PATH_MAX];
    char err[256];
    at_wire_key k;
    snprintf(path, sizeof path, "%s/%s", ft_tmpdir(), name);
    unlink(path);
    if (at_wire_key_generate(path, key ? key : &k, err, sizeof err) != AT_OK) {
        fprintf(stderr, "%s\n", err);
        abort();
    }
    return path;
}

/* Start the tracker command; returns its pid and sets *port (read from its ready line). */
__attribute__((unused)) static pid_t ft_start_tracker(const char *key_path, int port,
                                                      const char *out, const char *err,
                                                      const char *const *extra, int *port_out)
{
    char bin[PATH_MAX], port_s[16];
    char *argv[32];
    int n = 0;
    pid_t pid;
    snprintf(port_s, sizeof port_s, "%d", port);
    argv[n++] = (char *)ft_path("bin/tracker", bin, sizeof bin);
    argv[n++] = (char *)"--port";
    argv[n++] = port_s;
    argv[n++] = (char *)"--bind";
    argv[n++] = (char *)"127.0.0.1";
    argv[n++] = (char *)"--fleet-key";
    argv[n++] = (char *)key_path;
    argv[n++] = (char *)"--no-http";
    for (int i = 0; extra && extra[i] && n < 30; i++)
        argv[n++] = (char *)extra[i];
    argv[n] = NULL;
    unlink(out);
    pid = ft_spawn(argv, out, err);
    *port_out = 0;
    if (ft_wait_for_text(out, "tracker ready port=", 30)) {
        char *s = ft_read(out), *p = s ? strstr(s, "port=") : NULL;
        if (p) *port_out = atoi(p + 5);
        at_free(s);
    }
    return pid;
}

/* Start bin/rpc_agent serving 'device_key' for the tracker at 127.0.0.1:'port' (reconnecting
** within 'reconnect_ms'), output to 'log'; 'extra' (NULL-terminated, may be NULL) follows. */
__attribute__((unused)) static pid_t ft_start_agent(int port, const char *device_key,
                                                    const char *key_path, const char *log,
                                                    int reconnect_ms, const char *const *extra)
{
    char bin[PATH_MAX], url[64], rc[16];
    char *argv[32];
    int n = 0;
    snprintf(url, sizeof url, "127.0.0.1:%d", port);
    snprintf(rc, sizeof rc, "%d", reconnect_ms);
    argv[n++] = (char *)ft_path("bin/rpc_agent", bin, sizeof bin);
    argv[n++] = (char *)"--tracker";
    argv[n++] = url;
    argv[n++] = (char *)"--key";
    argv[n++] = (char *)device_key;
    argv[n++] = (char *)"--fleet-key";
    argv[n++] = (char *)key_path;
    argv[n++] = (char *)"--reconnect-max-ms";
    argv[n++] = rc;
    for (int i = 0; extra && extra[i] && n < 31; i++)
        argv[n++] = (char *)extra[i];
    argv[n] = NULL;
    return ft_spawn(argv, log, log);
}

/* Compile C source to an object with gcc -O2 -fPIC (or 'cc' and 'flags'); the caller owns
** *obj (at_free).  Returns 0 on success. */
__attribute__((unused)) static int ft_compile(const char *cc, const char *flags, const char *src,
                                              const char *name, uint8_t **obj, size_t *n)
{
    char c_path[PATH_MAX], o_path[PATH_MAX], cmd[3 * PATH_MAX], err[256];
    FILE *f;
    snprintf(c_path, sizeof c_path, "%s/%s.c", ft_tmpdir(), name);
    snprintf(o_path, sizeof o_path, "%s/%s.o", ft_tmpdir(), name);
    if ((f = fopen(c_path, "w")) == NULL) return -1;
    fputs(src, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s %s -c -o '%s' '%s'", cc, flags, o_path, c_path);
    if (system(cmd) != 0) return -1;
    return at_file_read(o_path, (char **)obj, n, err, sizeof err) == AT_OK ? 0 : -1;
}

#endif /* FLEET_TEST_H */
