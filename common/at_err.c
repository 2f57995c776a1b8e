/* common/at_err.c -- error names and texts, built from AT_ERR_MAP. */
#include "common.h"

#include <string.h>
#include <strings.h>

static const char *const err_text[] = {
#define X(name, text) text,
    AT_ERR_MAP(X)
#undef X
};

static const char *const err_name[] = {
#define X(name, text) #name,
    AT_ERR_MAP(X)
#undef X
};

const char *at_strerror(at_err e)
{
    if ((unsigned)e >= AT_N_ERRS)
        return "unknown error";
    return err_text[e];
}

const char *at_errname(at_err e)
{
    if ((unsigned)e >= AT_N_ERRS)
        return "EUNKNOWN";
    return err_name[e];
}

/* ---- element types ---- */

static const struct {
    const char *name, *short_name;
    int bytes, is_float;
} dtypes[] = {
#define X(id, name, bytes) {name, #id, bytes, 0},
    AT_DTYPE_MAP(X)
#undef X
};

const char *at_dtype_name(at_dtype t)
{
    return (unsigned)t < AT_N_DTYPES ? dtypes[t].name : "?";
}

int at_dtype_bytes(at_dtype t)
{
    return (unsigned)t < AT_N_DTYPES ? dtypes[t].bytes : 0;
}

int at_dtype_is_float(at_dtype t)
{
    return t == AT_DT_F32 || t == AT_DT_F16 || t == AT_DT_F64;
}

at_err at_dtype_parse(const char *s, size_t n, at_dtype *out)
{
    for (int i = 0; i < AT_N_DTYPES; i++) {
        const char *sh = dtypes[i].short_name;
        if (strlen(dtypes[i].name) == n && strncmp(s, dtypes[i].name, n) == 0) {
            *out = (at_dtype)i;
            return AT_OK;
        }
        /* short form: "f32", "i32", "bool", "f16", "i8" */
        if (strlen(sh) == n && strncasecmp(s, sh, n) == 0) {
            *out = (at_dtype)i;
            return AT_OK;
        }
    }
    return AT_EINVAL;
}
