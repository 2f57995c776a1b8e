/* tests/cost_model/cm_test.h -- helpers of the cost model's tests: temporary folders,
** building a data set of measured random states into a real SQLite store (the local
** measuring path), and capturing what the code logs.  Header-only (static inline): each
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

/* Measure 'n' random states of each spec here into 'st' (one kernel thread, the fastest of
** 7 repeats, so a busy host disturbs the timings as little as possible).  Returns 0, or -1
** after printing why. */
static inline int ct_build_dataset(rec_store *st, const char *const *specs, int n_specs, int n,
                                   uint64_t seed)
{
    kn_target host;
    cm_measure_opts o;
    char err[1024];
    if (kn_target_host(&host) != AT_OK)
        return -1;
    cm_measure_opts_default(&o);
    o.n_threads = 1;
    o.repeat = 7; /* the fastest of 7: other builds share this host's 2 cores */
    for (int i = 0; i < n_specs; i++) {
        ss_dag *dag;
        cm_dataset_stats s;
        double t0 = at_time_mono_s();
        at_err e;
        if (kn_op_build(specs[i], &dag, err, sizeof err) != AT_OK) {
            fprintf(stderr, "%s: %s\n", specs[i], err);
            return -1;
        }
        e = cm_dataset_random(st, dag, &host, "local", n, seed + (uint64_t)i, &o, "test", &s,
                              err, sizeof err);
        ss_dag_unref(dag);
        if (e != AT_OK) {
            fprintf(stderr, "%s: %s (%s)\n", specs[i], err, at_strerror(e));
            return -1;
        }
        fprintf(stderr, "data set: %s: %d states measured (%d failed) in %.1f s\n", specs[i],
                s.n_measured, s.n_failed, at_time_mono_s() - t0);
    }
    return 0;
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
