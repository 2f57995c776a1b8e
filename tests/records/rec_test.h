/* tests/records/rec_test.h -- helpers shared by the records tests: temporary folders,
** sample tasks, devices and results, file digests, a real replay check, and running the
** 'tuner' command as a child process.  Header-only (static inline): each test is one
** executable. */
#ifndef REC_TEST_H
#define REC_TEST_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"
#include "records/records.h"
#include "tuner/tuner.h"

/* ---- temporary folders ---- */

static inline void rt_mkdtemp(char dir[64])
{
    snprintf(dir, 64, "/tmp/rec_test.XXXXXX");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        abort();
    }
}

/* Remove 'dir' and the files in it (the tests make no subfolders). */
static inline void rt_rmdir(const char *dir)
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

static inline void rt_path(char out[PATH_MAX], const char *dir, const char *name)
{
    snprintf(out, PATH_MAX, "%s/%s", dir, name);
}

static inline int rt_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* SHA-256 of a file's bytes as hex, or "missing". */
static inline void rt_file_digest(const char *path, char hex[65])
{
    char *data, err[256];
    size_t n;
    if (at_file_read(path, &data, &n, err, sizeof err) != AT_OK) {
        strcpy(hex, "missing");
        return;
    }
    at_sha256_hex(data, n, 32, hex);
    at_free(data);
}

static inline void rt_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f == NULL || fputs(text, f) < 0 || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

/* Damage the page in the middle of a closed store: 3000 bytes of a pattern over its
** b-tree header and cells, the header of the file left alone.  The file must have at
** least 8 pages. */
static inline void rt_damage(const char *path)
{
    struct stat sb;
    FILE *f;
    if (stat(path, &sb) != 0 || sb.st_size < 8 * 4096) {
        fprintf(stderr, "rt_damage: %s is too small to damage\n", path);
        abort();
    }
    f = fopen(path, "r+b");
    if (f == NULL || fseek(f, (long)(sb.st_size / 4096 / 2) * 4096 + 8, SEEK_SET) != 0)
        abort();
    for (int i = 0; i < 3000; i++)
        fputc((0xA5 ^ (i * 31)) & 0xff, f);
    fclose(f);
}

/* ---- sample data ---- */

/* Workload key number 'i': 32 hex characters. */
/* A DAG text for task 'i' (opaque to the store). */
static inline void rt_dag(int i, char *out, size_t n)
{
    snprintf(out, n, "input A[%d, 64] float32\ninput B[64, 64] float32\n"
                     "C[i:%d, j:64] = sum[k:64](A[i, k] * B[k, j])\n", 16 * (i + 1), 16 * (i + 1));
}

/* Task i's workload key: the real one of rt_dag(i), the hash of its canonical text (names
** numbered, as ss_dag_print_canonical writes it), which 'tuner db check' and 'tuner
** import' recompute. */
static inline void rt_key(int i, char key[REC_KEY_LEN + 1])
{
    char text[256];
    snprintf(text, sizeof text, "input t0[%d, 64] float32\ninput t1[64, 64] float32\n"
             "t2[i0:%d, i1:64] = sum[r0:64](t0[i0, r0] * t1[r0, i1])\n", 16 * (i + 1),
             16 * (i + 1));
    at_sha256_hex(text, strlen(text), REC_KEY_LEN / 2, key);
}

/* A state text that replays on every rt_dag (splits of j and k, an unroll pragma), unique
** for each 'i' below 65536 * 49. */
static inline void rt_state(long i, char *out, size_t n)
{
    static const int div64[7] = {1, 2, 4, 8, 16, 32, 64};
    long v = i % 65536, r = i / 65536;
    snprintf(out, n,
             "{\"v\":1,\"steps\":[[\"SP\",2,1,64,[%d],1],[\"SP\",2,3,64,[%d],1],"
             "[\"PR\",2,0,\"auto_unroll_max_step$%ld\"]]}",
             div64[r % 7], div64[(r / 7) % 7], v);
}

static const rec_device rt_dev_x86 = {"x86_64", "AMD EPYC 9654", 96, "6.1.0-18-amd64", ""};
static const rec_device rt_dev_x86b = {"x86_64", "Intel Xeon 8480", 56, "6.1.0-18-amd64", ""};
static const rec_device rt_dev_a76 = {"aarch64", "Cortex-A76", 8, "5.10.157", ""};
static const rec_device rt_dev_a78 = {"aarch64", "Cortex-A78", 8, "5.15.41", ""};
static const rec_device rt_dev_h200 = {"sm_90", "NVIDIA H200", 132, "6.1.0", "550.54"};

/* Register task 'i' for 'target' and 'device_key'; aborts the test on failure. */
static inline int64_t rt_task(rec_store *st, int i, const char *target, const char *device_key)
{
    char key[REC_KEY_LEN + 1], dag[256];
    rec_task t;
    int64_t id = 0;
    at_err err;
    rt_key(i, key);
    rt_dag(i, dag, sizeof dag);
    t.workload_key = key;
    t.target = target;
    t.device_key = device_key;
    t.dag = dag;
    t.flops = 2.0 * 16 * (i + 1) * 64 * 64;
    if ((err = rec_task_add(st, &t, &id)) != AT_OK) {
        fprintf(stderr, "rec_task_add: %s: %s\n", at_errname(err), rec_store_errmsg(st));
        abort();
    }
    return id;
}

/* A result of 'task' with one cost 'seconds' (status 0) or a failure. */
typedef struct rt_result {
    rec_result r;
    char job[64], state[256];
    double costs[3];
} rt_result;

static inline void rt_result_init(rt_result *x, int64_t task, const char *job_prefix, long i,
                                  const rec_device *dev, double seconds, int status)
{
    memset(x, 0, sizeof *x);
    snprintf(x->job, sizeof x->job, "%s-%ld", job_prefix, i);
    rt_state(i, x->state, sizeof x->state);
    x->costs[0] = seconds;
    x->costs[1] = seconds * 1.01;
    x->costs[2] = seconds * 0.99;
    x->r.task_id = task;
    x->r.job_id = x->job;
    x->r.state = x->state;
    x->r.costs = x->costs;
    x->r.n_costs = 3;
    x->r.status = status;
    x->r.error_text = status ? "it broke" : "";
    x->r.device = dev;
    x->r.agent = "agent-1";
    x->r.tuner_version = "test";
    x->r.trial = i;
    x->r.measured_at = 1.8e9 + (double)i;
    x->r.stored_at = 1.8e9 + (double)i + 0.5; /* as if copied from one source */
}

/* ---- a real replay check for the tests ---- */

/* Accepts a state that parses as a JSON object with a "steps" array, and a DAG text that
** declares an input; rejects everything else, with the reason. */
static inline at_err rt_replay(void *ctx, const char *dag, const char *state, char *errmsg,
                               size_t n)
{
    at_arena a;
    at_json *j;
    const at_json *steps;
    at_err err = AT_ESCHED;
    char jerr[128];
    if (ctx)
        ++*(int *)ctx; /* counts calls */
    at_arena_init(&a, 0);
    if (strstr(dag, "input ") == NULL)
        snprintf(errmsg, n, "the DAG declares no input");
    else if (at_json_parse(&a, state, strlen(state), &j, jerr, sizeof jerr) != AT_OK)
        snprintf(errmsg, n, "state is not JSON: %s", jerr);
    else if (j->type != AT_JSON_OBJ || (steps = at_json_get(j, "steps")) == NULL ||
             steps->type != AT_JSON_ARR)
        snprintf(errmsg, n, "state has no \"steps\" array");
    else
        err = AT_OK;
    at_arena_fini(&a);
    return err;
}

/* ---- running the tuner command ---- */

/* The tuner binary of this test's build flavour: build/<flavour>/bin/tuner, derived from
** /proc/self/exe (build/<flavour>/tests/records/test_x).  Used when it is at least as new
** as every archive of that flavour (so it holds today's code); otherwise the test runs the
** same entry point, tn_cli_main, in a forked child, which is all the binary's main does. */
static inline const char *rt_tuner_bin(void)
{
    static char bin[PATH_MAX + 16], lib[PATH_MAX + 300];
    static int done;
    char exe[PATH_MAX];
    struct stat sb_bin, sb_lib;
    struct dirent *e;
    ssize_t n;
    char *p;
    DIR *d;
    if (done)
        return bin[0] ? bin : NULL;
    done = 1;
    n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return NULL;
    exe[n] = 0;
    p = strstr(exe, "/tests/records/");
    if (p == NULL)
        return NULL;
    *p = 0;
    snprintf(bin, sizeof bin, "%s/bin/tuner", exe);
    snprintf(lib, sizeof lib, "%s/lib", exe);
    if (stat(bin, &sb_bin) != 0 || (d = opendir(lib)) == NULL) {
        fprintf(stderr, "note: no %s: running tn_cli_main in a child process instead\n", bin);
        bin[0] = 0;
        return NULL;
    }
    while ((e = readdir(d)) != NULL) {
        snprintf(lib, sizeof lib, "%s/lib/%s", exe, e->d_name);
        if (e->d_name[0] != '.' && stat(lib, &sb_lib) == 0 &&
            sb_lib.st_mtime > sb_bin.st_mtime) {
            fprintf(stderr, "note: %s is older than %s: running tn_cli_main in a child "
                            "process instead\n", bin, lib);
            bin[0] = 0;
            break;
        }
    }
    closedir(d);
    if (bin[0])
        fprintf(stderr, "note: running %s\n", bin);
    return bin[0] ? bin : NULL;
}

/* Run 'tuner args...' (NULL-terminated) with stdin from 'in_path' (or /dev/null); its
** stdout and stderr are written to out/err (NUL-terminated, at_free) when not NULL.
** Returns the exit status, or 128 + signal. */
static inline int rt_tuner(const char *in_path, char **out, char **err, const char *const *args)
{
    char dir[64], out_path[PATH_MAX], err_path[PATH_MAX], msg[128];
    const char *bin = rt_tuner_bin();
    int status, rc;
    size_t n;
    pid_t pid;
    rt_mkdtemp(dir);
    rt_path(out_path, dir, "stdout");
    rt_path(err_path, dir, "stderr");
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid == 0) {
        const char *argv[64];
        int argc = 0;
        int fd_in = open(in_path ? in_path : "/dev/null", O_RDONLY);
        int fd_out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int fd_err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd_in < 0 || fd_out < 0 || fd_err < 0)
            _exit(120);
        dup2(fd_in, 0);
        dup2(fd_out, 1);
        dup2(fd_err, 2);
        argv[argc++] = "tuner";
        for (int i = 0; args[i] && argc < 63; i++)
            argv[argc++] = args[i];
        argv[argc] = NULL;
        if (bin) {
            execv(bin, (char *const *)argv);
            _exit(121);
        }
        rc = tn_cli_main(argc, (char **)argv);
        fflush(stdout);
        fflush(stderr);
        _exit(rc);
    }
    if (pid < 0 || waitpid(pid, &status, 0) != pid) {
        perror("fork/waitpid");
        abort();
    }
    if (out && at_file_read(out_path, out, &n, msg, sizeof msg) != AT_OK)
        abort();
    if (err && at_file_read(err_path, err, &n, msg, sizeof msg) != AT_OK)
        abort();
    rt_rmdir(dir);
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
}

#define RT_TUNER(in, out, err, ...) rt_tuner((in), (out), (err), (const char *const[]){__VA_ARGS__, NULL})

#endif /* REC_TEST_H */
