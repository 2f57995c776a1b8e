/* common/at_opts.c -- the command-line flag parser of the three commands (tuner and its
** subcommands, tracker, rpc_agent): one table of at_opt per command, the same syntax, the
** same messages and exit status everywhere.
**
** Syntax: --name VALUE, --name=VALUE, -x VALUE; flags in any order, before, between or
** after positional arguments; "--" ends the flags; "-" is positional; -h/--help sets *help.
** An entry whose help is AT_OPT_OLD("new") is an old spelling: it still works and says
** which flag replaces it.  Errors go to stderr as "PROG: MESSAGE" and return AT_EXIT_USAGE (2). */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static const at_opt *find_long(const at_opt *opts, int n, const char *name, size_t len)
{
    for (int i = 0; i < n; i++)
        if (opts[i].name && strlen(opts[i].name) == len && strncmp(opts[i].name, name, len) == 0)
            return &opts[i];
    return NULL;
}

static const at_opt *find_short(const at_opt *opts, int n, char c)
{
    for (int i = 0; i < n; i++)
        if (opts[i].short_name == c) return &opts[i];
    return NULL;
}

static int is_old(const at_opt *o)
{
    return o->help && o->help[0] == '\001';
}

static int set_value(const char *prog, const at_opt *o, const char *flag, const char *value)
{
    if (o->kind == AT_OPT_STR) {
        *(const char **)o->dest = value;
        return 0;
    }
    if (o->kind == AT_OPT_LIST) {
        at_opt_list *l = o->dest;
        if (l->n == AT_OPT_LIST_MAX) {
            fprintf(stderr, "%s: %s is given more than %d times\n", prog, flag, AT_OPT_LIST_MAX);
            return AT_EXIT_USAGE;
        }
        l->v[l->n++] = value;
        return 0;
    }
    if (o->kind == AT_OPT_NUM) {
        char *end;
        double v = strtod(value, &end);
        if (end == value || *end || !isfinite(v) || v < 0) {
            fprintf(stderr, "%s: %s needs a number >= 0, not '%s'\n", prog, flag, value);
            return AT_EXIT_USAGE;
        }
        *(double *)o->dest = v;
        return 0;
    }
    {
        int64_t v;
        if (at_parse_i64(value, &v) != AT_OK || v < 0 || (o->kind == AT_OPT_INT && v > INT_MAX)) {
            fprintf(stderr, "%s: %s needs a whole number >= 0, not '%s'\n", prog, flag, value);
            return AT_EXIT_USAGE;
        }
        if (o->kind == AT_OPT_INT)
            *(int *)o->dest = (int)v;
        else
            *(int64_t *)o->dest = v;
    }
    return 0;
}

int at_opt_range(const char *prog, const char *flag, int64_t v, int64_t lo, int64_t hi)
{
    if (v >= lo && v <= hi) return 0;
    fprintf(stderr, "%s: %s needs a whole number from %lld to %lld, not %lld\n", prog, flag,
            (long long)lo, (long long)hi, (long long)v);
    return AT_EXIT_USAGE;
}

int at_opts_parse(const char *prog, const at_opt *opts, int n_opts, int argc, char **argv,
                  int *n_pos, int *help)
{
    int n = 0, flags_done = 0, rc;
    *n_pos = 0;
    *help = 0;
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        const at_opt *o;
        char flag[64];
        const char *value = NULL;
        if (flags_done || a[0] != '-' || a[1] == 0) {
            argv[1 + n++] = a;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            flags_done = 1;
            continue;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            *help = 1;
            continue;
        }
        if (a[1] == '-') {
            const char *eq = strchr(a + 2, '=');
            size_t len = eq ? (size_t)(eq - (a + 2)) : strlen(a + 2);
            o = find_long(opts, n_opts, a + 2, len);
            snprintf(flag, sizeof flag, "--%.*s", (int)(len < 50 ? len : 50), a + 2);
            if (eq) value = eq + 1;
        } else {
            o = a[2] == 0 ? find_short(opts, n_opts, a[1]) : NULL;
            snprintf(flag, sizeof flag, "%.50s", a);
        }
        if (o == NULL) {
            fprintf(stderr, "%s: unknown flag '%s' (see '%s --help')\n", prog, flag, prog);
            return AT_EXIT_USAGE;
        }
        if (is_old(o))
            fprintf(stderr, "%s: warning: %s is now --%s (the old spelling still works for now)\n",
                    prog, flag, o->help + 1);
        if (o->kind == AT_OPT_BOOL) {
            if (value) {
                fprintf(stderr, "%s: %s takes no value\n", prog, flag);
                return AT_EXIT_USAGE;
            }
            *(int *)o->dest = 1;
            continue;
        }
        if (value == NULL) {
            if (i + 1 >= argc) {
                fprintf(stderr, "%s: %s needs a value (%s)\n", prog, flag,
                        o->metavar ? o->metavar : "VALUE");
                return AT_EXIT_USAGE;
            }
            value = argv[++i];
        }
        if ((rc = set_value(prog, o, flag, value)) != 0) return rc;
    }
    *n_pos = n;
    return 0;
}

void at_opts_help(FILE *f, const at_opt *opts, int n_opts)
{
    for (int i = 0; i < n_opts; i++) {
        char left[64];
        if (opts[i].help == NULL || is_old(&opts[i])) continue; /* hidden, an old spelling */
        snprintf(left, sizeof left, "%s%c%s--%s%s%s", opts[i].short_name ? "-" : "",
                 opts[i].short_name ? opts[i].short_name : ' ', opts[i].short_name ? ", " : "  ",
                 opts[i].name, opts[i].metavar ? " " : "", opts[i].metavar ? opts[i].metavar : "");
        fprintf(f, "  %-24s %s\n", left + (opts[i].short_name ? 0 : 1), opts[i].help);
    }
    fprintf(f, "  %-24s %s\n", "-h, --help", "this help");
}

int at_usage_error(const char *prog, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(%s --help for usage)\n", prog);
    return AT_EXIT_USAGE;
}

int at_opts_log_level(const char *prog, const char *level)
{
    at_log_level lv;
    if (level == NULL) return 0;
    if (at_log_parse_level(level, &lv) != AT_OK)
        return at_usage_error(prog, "unknown log level '%s' (debug, info, warn, error, off)",
                              level);
    at_log_set_level(lv);
    return 0;
}

int at_opts_command(const char *prog, const at_opt *opts, int n_opts, int argc, char **argv,
                    void (*usage)(FILE *), const int *version, const char *version_line,
                    const char *const *log_level)
{
    int n_pos, help, rc;
    if ((rc = at_opts_parse(prog, opts, n_opts, argc, argv, &n_pos, &help)) != 0) return rc;
    if (help) {
        usage(stdout);
        return 0;
    }
    if (version && *version) {
        printf("%s\n", version_line);
        return 0;
    }
    if (n_pos > 0) return at_usage_error(prog, "unexpected argument '%s'", argv[1]);
    if (log_level && (rc = at_opts_log_level(prog, *log_level)) != 0) return rc;
    return -1;
}
