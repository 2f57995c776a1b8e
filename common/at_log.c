/* common/at_log.c -- timestamped logging to stderr.  One line per call, written with a
** single fwrite so lines of several threads or processes do not interleave. */
#include "common.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static _Atomic int log_level = AT_LOG_INFO;

void at_log_set_level(at_log_level lv)
{
    atomic_store(&log_level, (int)lv);
}

at_log_level at_log_get_level(void)
{
    return (at_log_level)atomic_load(&log_level);
}

at_err at_log_parse_level(const char *s, at_log_level *out)
{
    static const char *const names[] = {"debug", "info", "warn", "error", "off"};
    for (size_t i = 0; i < AT_ARRAY_LEN(names); i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = (at_log_level)i;
            return AT_OK;
        }
    }
    return AT_EINVAL;
}

void at_log(at_log_level lv, const char *fmt, ...)
{
    static const char *const tag[] = {"debug", "info", "warn", "error"};
    char line[2048], ts[32];
    va_list ap;
    int n, m;
    if ((int)lv < atomic_load(&log_level) || lv >= AT_LOG_OFF)
        return;
    at_time_iso8601(at_time_wall_s(), ts);
    n = snprintf(line, sizeof line, "%s [%d] %s: ", ts, (int)getpid(), tag[lv]);
    va_start(ap, fmt);
    m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        m = 0;
    n += m;
    if ((size_t)n > sizeof line - 2)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    fwrite(line, 1, (size_t)n, stderr);
}
