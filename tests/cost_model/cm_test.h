/* tests/cost_model/cm_test.h -- helpers of the cost model's tests: temporary folders,
** building a data set of measured random states into a real SQLite store (through the
** tuner's measuring path: build workers, the embedded tracker and agent), and capturing
** what the code logs.  Header-only (static inline): each
** test is one executable. */
#ifndef CM_TEST_H
#define CM_TEST_H

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cost_model/cost_model.h"
#include "tuner/tuner.h"

static inline void ct_mkdtemp(char dir[64])
{
    snprintf(dir, 64, "/tmp/cm_test.XXXXXX");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        abort();
    }
}

/* Remove 'dir' and the files in it. */
static inline void ct_rmdir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[PATH_MAX];
    if (d == NULL)
        return;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

/* The tuner binary of this test's build flavour (build/<flavour>/bin/tuner, from
** /proc/self/exe = build/<flavour>/tests/cost_model/test_x), for build workers; NULL when
** there is none (then builds run in this process). */
static inline const char *ct_tuner_bin(void)
{
    static char bin[PATH_MAX + 16];
    char exe[PATH_MAX], *p;
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return NULL;
    exe[n] = 0;
    if ((p = strstr(exe, "/tests/")) == NULL)
        return NULL;
    *p = 0;
    snprintf(bin, sizeof bin, "%s/bin/tuner", exe);
    return access(bin, X_OK) == 0 ? bin : NULL;
}

/* The measuring configuration of the tests' data sets: the embedded agent on one kernel
** thread, the fastest of 7 repeats (other builds share this host's 2 cores), build
** workers when the tuner binary is there. */
static inline tn_measure_cfg ct_measure_cfg(void)
{
    tn_measure_cfg c;
    memset(&c, 0, sizeof c);
    c.embedded_threads = 1;
    c.repeat = 7;
    c.min_repeat_ms = 0.5;
    c.build_worker_exe = ct_tuner_bin();
    c.build_workers = c.build_worker_exe ? 2 : 0;
    c.command_line = "test";
    c.quiet = 1;
    return c;
}

/* Measure 'n' random states of each spec into 'st' through the embedded fleet (main must
** have called tn_fleet_prepare first).  Returns 0, or -1 after printing why. */
static inline int ct_build_dataset(rec_store *st, const char *const *specs, int n_specs, int n,
                                   uint64_t seed)
{
    tn_measure_cfg c = ct_measure_cfg();
    tn_measurer *m;
    char err[1024];
    int rc = 0;
    if (tn_measurer_open(st, &c, &m, err, sizeof err) != AT_OK) {
        fprintf(stderr, "cannot measure: %s\n", err);
        return -1;
    }
    for (int i = 0; i < n_specs && rc == 0; i++) {
        ss_dag *dag;
        tn_dataset_stats s;
        double t0 = at_time_mono_s();
        at_err e;
        if (kn_op_build(specs[i], &dag, err, sizeof err) != AT_OK) {
            fprintf(stderr, "%s: %s\n", specs[i], err);
            rc = -1;
            break;
        }
        e = tn_dataset_random(m, dag, n, seed + (uint64_t)i, &s, err, sizeof err);
        ss_dag_unref(dag);
        if (e != AT_OK) {
            fprintf(stderr, "%s: %s (%s)\n", specs[i], err, at_strerror(e));
            rc = -1;
            break;
        }
        fprintf(stderr, "data set: %s: %d states measured (%d failed) in %.1f s\n", specs[i],
                s.n_measured, s.n_failed, at_time_mono_s() - t0);
    }
    tn_measurer_close(m, rc != 0);
    return rc;
}

/* Run fn(arg) with standard error going to a file; the text it wrote (at_free). */
static inline char *ct_capture_stderr(void (*fn)(void *), void *arg)
{
    char path[] = "/tmp/cm_test_err.XXXXXX", *text = NULL, err[256];
    size_t n;
    int fd = mkstemp(path), saved;
    if (fd < 0)
        return NULL;
    fflush(stderr);
    saved = dup(2);
    dup2(fd, 2);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fd);
    if (at_file_read(path, &text, &n, err, sizeof err) != AT_OK)
        text = NULL;
    unlink(path);
    return text;
}

#endif /* CM_TEST_H */
