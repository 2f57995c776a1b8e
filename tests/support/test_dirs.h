/* tests/support/test_dirs.h -- where a test finds the programs built with it, and its own
** temporary directory (header-only; for tests that run the real binaries). */
#ifndef AT_TEST_DIRS_H
#define AT_TEST_DIRS_H

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* 'out' = build/<flavour>/bin/'name' of the build this test belongs to (found from
** /proc/self/exe, cut at "/tests/"); 0, or -1 with a line on stderr when it is missing. */
static inline int td_program(const char *name, char *out, size_t n)
{
    char exe[PATH_MAX], *p;
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0)
        return -1;
    exe[len] = 0;
    if ((p = strstr(exe, "/tests/")) == NULL)
        return -1;
    *p = 0;
    snprintf(out, n, "%s/bin/%s", exe, name);
    if (access(out, X_OK) != 0) {
        fprintf(stderr, "missing %s (make tests-san builds it)\n", out);
        return -1;
    }
    return 0;
}

/* A fresh directory in 'dir' (at least 64 bytes), made by mkdtemp(3) from the template
** "/tmp/<prefix>" followed by the six X characters mkdtemp replaces; 0 or -1. */
static inline int td_mkdtemp(const char *prefix, char *dir, size_t n)
{
    snprintf(dir, n, "/tmp/%sXXXXXX", prefix);
    return mkdtemp(dir) ? 0 : -1;
}

/* Remove it and everything in it; 0 or -1. */
static inline int td_rmtree(const char *dir)
{
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

#endif
