/* common/at_measure.c -- names, causes and hints of measurement statuses, built from
** AT_MEASURE_MAP.  The table is indexed by number; the map lists the numbers in order
** without gaps, which the static assertion below holds. */
#include "common.h"

#include <stdlib.h>
#include <strings.h>

static const struct {
    int num;
    const char *name, *cause, *hint;
} statuses[] = {
#define X(num, id, cause, hint) {num, #id, cause, hint},
    AT_MEASURE_MAP(X)
#undef X
};

_Static_assert(sizeof statuses / sizeof statuses[0] == AT_N_MEASURE,
               "AT_MEASURE_MAP numbers must run 0, 1, 2, ... without gaps");

static int known(int code)
{
    return code >= 0 && code < AT_N_MEASURE && statuses[code].num == code;
}

const char *at_measure_name(int code)
{
    return known(code) ? statuses[code].name : "UNKNOWN_STATUS";
}

const char *at_measure_cause(int code)
{
    return known(code) ? statuses[code].cause
                       : "a status this build does not know (written by a newer version)";
}

const char *at_measure_hint(int code)
{
    return known(code) ? statuses[code].hint : "read the record with a newer tuner";
}

at_err at_measure_parse(const char *s, int *out)
{
    int64_t v;
    if (s == NULL)
        return AT_EINVAL;
    for (int i = 0; i < AT_N_MEASURE; i++) {
        if (strcasecmp(s, statuses[i].name) == 0) {
            *out = statuses[i].num;
            return AT_OK;
        }
    }
    if (at_parse_i64(s, &v) == AT_OK && v >= 0 && v <= 0x7fffffff) {
        *out = (int)v;
        return AT_OK;
    }
    return AT_EINVAL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double at_median_sort(double *v, int n)
{
    if (n <= 0) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
