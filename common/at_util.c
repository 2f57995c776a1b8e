/* common/at_util.c -- clocks, threads for shares of work, whole-file and descriptor I/O,
** strict number parsing. */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void at_run_parts(void *(*fn)(void *), void *parts, size_t size, int n)
{
    pthread_t tid[AT_MAX_PARTS];
    int started[AT_MAX_PARTS] = {0};
    if (n > AT_MAX_PARTS)
        n = AT_MAX_PARTS;
    for (int t = 1; t < n; t++)
        started[t] = pthread_create(&tid[t], NULL, fn, (char *)parts + (size_t)t * size) == 0;
    if (n > 0)
        fn(parts);
    for (int t = 1; t < n; t++) {
        if (started[t])
            pthread_join(tid[t], NULL);
        else
            fn((char *)parts + (size_t)t * size);
    }
}

double at_time_mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double at_time_wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void at_time_iso8601(double t, char out[32])
{
    time_t sec = (time_t)t;
    struct tm tm;
    int ms = (int)((t - (double)sec) * 1000.0);
    if (ms < 0)
        ms = 0;
    if (ms > 999)
        ms = 999;
    gmtime_r(&sec, &tm);
    /* the result is checked only to tell gcc -O2 (-Wformat-truncation) that the bound on
    ** the fields of 'tm' is known; a valid time always fits */
    if (snprintf(out, 32, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms) >= 32)
        out[31] = '\0';
}

at_err at_file_read(const char *path, char **out, size_t *n_out, char *errmsg, size_t errmsg_size)
{
    FILE *f;
    char *data = NULL, *p;
    size_t n = 0, cap = 0, got;
    *out = NULL;
    if (n_out)
        *n_out = 0;
    f = fopen(path, "rb");
    if (f == NULL) {
        if (errmsg)
            snprintf(errmsg, errmsg_size, "%s: %s", path, strerror(errno));
        return AT_EIO;
    }
    for (;;) {
        if (cap - n < 4096) {
            cap = cap ? cap * 2 : 8192;
            p = at_realloc(data, cap + 1);
            if (p == NULL) {
                at_free(data);
                fclose(f);
                if (errmsg)
                    snprintf(errmsg, errmsg_size, "%s: out of memory", path);
                return AT_ENOMEM;
            }
            data = p;
        }
        got = fread(data + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        if (errmsg)
            snprintf(errmsg, errmsg_size, "%s: read error: %s", path, strerror(errno));
        at_free(data);
        fclose(f);
        return AT_EIO;
    }
    fclose(f);
    data[n] = 0;
    *out = data;
    if (n_out)
        *n_out = n;
    return AT_OK;
}

at_err at_file_write(const char *path, const void *p, size_t n, char *errmsg, size_t errmsg_size)
{
    char tmp[4096];
    int fd;
    const char *q = p;
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        goto fail;
    while (n > 0) {
        ssize_t w = write(fd, q, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            close(fd);
            unlink(tmp);
            goto fail;
        }
        q += w;
        n -= (size_t)w;
    }
    if (close(fd) != 0 || rename(tmp, path) != 0) {
        unlink(tmp);
        goto fail;
    }
    return AT_OK;
fail:
    if (errmsg)
        snprintf(errmsg, errmsg_size, "%s: %s", path, strerror(errno));
    return AT_EIO;
}

int at_fd_write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

int at_fd_read_all(int fd, void *p, size_t n)
{
    char *c = p;
    while (n > 0) {
        ssize_t r = read(fd, c, n);
        if (r == 0)
            return -1;
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

at_err at_parse_i64(const char *s, int64_t *out)
{
    char *end;
    long long v;
    if (s == NULL || *s == 0)
        return AT_EINVAL;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno || *end)
        return AT_EINVAL;
    *out = v;
    return AT_OK;
}

at_err at_parse_double(const char *s, double *out)
{
    char *end;
    double v;
    if (s == NULL || *s == 0)
        return AT_EINVAL;
    errno = 0;
    v = strtod(s, &end);
    if (errno || *end)
        return AT_EINVAL;
    *out = v;
    return AT_OK;
}
