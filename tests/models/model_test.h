/* tests/models/model_test.h -- helpers of the model tests: the repository root, a
** temporary folder with the generated models (scripts/make_models.py with Debian's
** /usr/bin/python3 and python3-onnx), and running 'tuner' subcommands in a child process.
** Header-only (static): each test is one executable. */
#ifndef MODEL_TEST_H
#define MODEL_TEST_H

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"
#include "tuner/tuner.h"

/* The repository root: the test runs as ROOT/build/FLAVOUR/tests/models/test_x. */
static inline const char *mt_root(void)
{
    static char root[PATH_MAX];
    char exe[PATH_MAX];
    ssize_t n;
    char *p;
    if (root[0])
        return root;
    n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        perror("readlink /proc/self/exe");
        abort();
    }
    exe[n] = 0;
    if ((p = strstr(exe, "/build/")) == NULL) {
        fprintf(stderr, "mt_root: %s is not under a build/ folder\n", exe);
        abort();
    }
    *p = 0;
    snprintf(root, sizeof root, "%s", exe);
    return root;
}

static inline void mt_mkdtemp(char dir[64])
{
    snprintf(dir, 64, "/tmp/model_test.XXXXXX");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        abort();
    }
}

static inline void mt_rmtree(const char *dir)
{
    char cmd[PATH_MAX + 32];
    if (strncmp(dir, "/tmp/model_test.", 16) != 0)
        return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "warning: could not remove %s\n", dir);
}

static inline void mt_path(char out[PATH_MAX], const char *dir, const char *name)
{
    snprintf(out, PATH_MAX, "%s/%s", dir, name);
}

/* Generate models NAMES (space-separated) into dir as NAME.onnx; aborts the test when the
** generator cannot run (python3-onnx missing: 'make deps' installs it). */
static inline void mt_make_models(const char *dir, const char *names)
{
    char cmd[PATH_MAX * 2];
    int rc;
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s/scripts/make_models.py' --out '%s' %s "
             ">/dev/null", mt_root(), dir, names);
    rc = system(cmd);
    if (rc != 0) {
        fprintf(stderr, "FAIL: '%s' exited with %d (is python3-onnx installed? 'make deps')\n",
                cmd, rc);
        abort();
    }
}

static inline void mt_write(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

static inline char *mt_read(const char *path, size_t *n)
{
    char *data, err[256];
    if (at_file_read(path, &data, n, err, sizeof err) != AT_OK) {
        fprintf(stderr, "%s\n", err);
        abort();
    }
    return data;
}

/* Run 'tuner ARGS...' (tn_cli_main in a forked child) with stdout and stderr captured
** (at_free them); returns its exit status. */
static inline int mt_tuner(char **out, char **err, const char *const *args)
{
    char dir[64], po[PATH_MAX], pe[PATH_MAX];
    size_t n;
    int status;
    pid_t pid;
    mt_mkdtemp(dir);
    mt_path(po, dir, "stdout");
    mt_path(pe, dir, "stderr");
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid == 0) {
        const char *argv[64];
        int argc = 0, fo = open(po, O_WRONLY | O_CREAT | O_TRUNC, 0644),
            fe = open(pe, O_WRONLY | O_CREAT | O_TRUNC, 0644), rc;
        if (fo < 0 || fe < 0)
            _exit(120);
        dup2(fo, 1);
        dup2(fe, 2);
        argv[argc++] = "tuner";
        for (int i = 0; args[i] && argc < 63; i++)
            argv[argc++] = args[i];
        argv[argc] = NULL;
        rc = tn_cli_main(argc, (char **)argv);
        fflush(stdout);
        fflush(stderr);
        _exit(rc);
    }
    if (pid < 0 || waitpid(pid, &status, 0) != pid) {
        perror("fork/waitpid");
        abort();
    }
    *out = mt_read(po, &n);
    *err = mt_read(pe, &n);
    mt_rmtree(dir);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Run the real command, ROOT/build/FLAVOUR/bin/tuner ARGS..., in 'cwd' (it starts itself
** again as build workers, so it must be the binary); stdout and stderr captured (at_free
** them); returns its exit status, or fails the test after 'deadline_s' seconds. */
static inline int mt_tuner_bin(const char *cwd, int deadline_s, char **out, char **err,
                               const char *const *args)
{
    char exe[PATH_MAX], bin[PATH_MAX + 16], dir[64], po[PATH_MAX], pe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    size_t len;
    char *p;
    int status = 0, rc = -1;
    pid_t pid;
    if (n <= 0 || (exe[n] = 0, p = strstr(exe, "/tests/models/")) == NULL)
        abort();
    *p = 0;
    snprintf(bin, sizeof bin, "%s/bin/tuner", exe);
    if (access(bin, X_OK) != 0) {
        fprintf(stderr, "FAIL: missing %s (make tests-san builds it)\n", bin);
        abort();
    }
    mt_mkdtemp(dir);
    mt_path(po, dir, "stdout");
    mt_path(pe, dir, "stderr");
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid == 0) {
        const char *argv[64];
        int argc = 0, fo = open(po, O_WRONLY | O_CREAT | O_TRUNC, 0644),
            fe = open(pe, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        setpgid(0, 0);
        if (fo < 0 || fe < 0 || chdir(cwd) != 0)
            _exit(120);
        dup2(fo, 1);
        dup2(fe, 2);
        argv[argc++] = "tuner";
        for (int i = 0; args[i] && argc < 63; i++)
            argv[argc++] = args[i];
        argv[argc] = NULL;
        execv(bin, (char *const *)argv);
        _exit(121);
    }
    if (pid < 0)
        abort();
    for (int i = 0; i < deadline_s * 10; i++) {
        if (waitpid(pid, &status, WNOHANG) == pid) {
            rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            break;
        }
        usleep(100000);
    }
    if (rc < 0) {
        kill(-pid, SIGKILL);
        waitpid(pid, &status, 0);
        fprintf(stderr, "FAIL: %s did not finish within %d s\n", bin, deadline_s);
        abort();
    }
    *out = mt_read(po, &len);
    *err = mt_read(pe, &len);
    mt_rmtree(dir);
    return rc;
}

#endif /* MODEL_TEST_H */
