/* kernels/rt/rt_fill.c -- deterministic inputs, output comparison, aligned buffers and
** IEEE half conversion.
**
** Fill formula (docs/kernel_abi.md; everything modulo 2^64, G = 0x9e3779b97f4a7c15,
** mix = the splitmix64 finaliser):
**
**   key  = mix(seed + G * (stream + 1))
**   u[i] = mix(key + G * (i + 1))
**   f32, f64:  m = u >> 40 (24 bits)   value = (2m + 1 - 2^24) / 2^24
**   f16:       m = u >> 53 (11 bits)   value = (2m + 1 - 2^11) / 2^11  (exact in half)
**   i8/i32/i64: k = u >> 59 (5 bits)   value = k - 16 if k < 16, else k - 15
**   bool:      u >> 63
**
** So a float is an odd multiple of 2^-24 in (-1, 1): never 0, exact in float32, the same
** in float64, and any element can be computed alone from (seed, stream, i). */
#include "rt_int.h"

#include <math.h>
#include <string.h>

#define GOLDEN 0x9e3779b97f4a7c15ull

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ---- IEEE half ------------------------------------------------------------------------ */

float kn_rt__half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, x;
    float f;
    if (e == 0) {
        f = (float)m * (1.0f / 16777216.0f); /* zero or subnormal: m * 2^-24, exact */
        return sign ? -f : f;
    }
    if (e == 0x1f)
        x = sign | 0x7f800000u | m << 13; /* infinity, NaN (payload kept) */
    else
        x = sign | (e - 15 + 127) << 23 | m << 13;
    memcpy(&f, &x, sizeof f);
    return f;
}

/* Shift 'm' right by 's' (1..31) rounding to nearest, ties to even. */
static uint32_t shift_round(uint32_t m, unsigned s)
{
    uint32_t q = m >> s, rem = m & ((1u << s) - 1), half = 1u << (s - 1);
    if (rem > half || (rem == half && (q & 1)))
        q++;
    return q;
}

uint16_t kn_rt__float_to_half(float f)
{
    uint32_t x, sign, ex, man;
    int e;
    memcpy(&x, &f, sizeof x);
    sign = (x >> 16) & 0x8000;
    ex = (x >> 23) & 0xff;
    man = x & 0x7fffff;
    if (ex == 0xff) /* infinity, or a NaN that stays a (quiet) NaN */
        return (uint16_t)(sign | 0x7c00 | (man ? 0x200 | man >> 13 : 0));
    e = (int)ex - 127 + 15;
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00);
    if (e <= 0) {
        if (e < -10)
            return (uint16_t)sign; /* below half of the smallest subnormal */
        /* subnormal result m * 2^-24; a carry into 0x400 is the smallest normal */
        return (uint16_t)(sign | shift_round(man | 0x800000u, (unsigned)(14 - e)));
    }
    /* a carry out of the mantissa moves into the exponent, up to infinity: correct */
    return (uint16_t)(sign | (((uint32_t)e << 10) + shift_round(man, 13)));
}

/* ---- fill ------------------------------------------------------------------------------ */

void kn_rt_fill(void *p, at_dtype dt, int64_t n, uint64_t seed, uint32_t stream)
{
    uint64_t key = mix64(seed + GOLDEN * ((uint64_t)stream + 1));
    unsigned char *b = p;
    if (p == NULL || n <= 0)
        return;
    for (int64_t i = 0; i < n; i++) {
        uint64_t u = mix64(key + GOLDEN * ((uint64_t)i + 1));
        int32_t k = (int32_t)(u >> 59), iv = k < 16 ? k - 16 : k - 15;
        double fv = (double)((int32_t)(2 * (u >> 40) + 1) - (1 << 24)) * 0x1p-24;
        switch (dt) {
        case AT_DT_F32: {
            float f = (float)fv;
            memcpy(b + 4 * i, &f, 4);
            break;
        }
        case AT_DT_F64:
            memcpy(b + 8 * i, &fv, 8);
            break;
        case AT_DT_F16: {
            float f = (float)((int32_t)(2 * (u >> 53) + 1) - (1 << 11)) * 0x1p-11f;
            uint16_t h = kn_rt__float_to_half(f);
            memcpy(b + 2 * i, &h, 2);
            break;
        }
        case AT_DT_I32:
            memcpy(b + 4 * i, &iv, 4);
            break;
        case AT_DT_I64: {
            int64_t v = iv;
            memcpy(b + 8 * i, &v, 8);
            break;
        }
        case AT_DT_I8:
            b[i] = (unsigned char)(int8_t)iv;
            break;
        case AT_DT_BOOL:
            b[i] = (unsigned char)(u >> 63);
            break;
        default:
            return;
        }
    }
}

/* ---- comparison ------------------------------------------------------------------------ */

static double elem(const unsigned char *b, at_dtype dt, int64_t i)
{
    switch (dt) {
    case AT_DT_F32: {
        float f;
        memcpy(&f, b + 4 * i, 4);
        return f;
    }
    case AT_DT_F64: {
        double d;
        memcpy(&d, b + 8 * i, 8);
        return d;
    }
    case AT_DT_F16: {
        uint16_t h;
        memcpy(&h, b + 2 * i, 2);
        return kn_rt__half_to_float(h);
    }
    case AT_DT_I32: {
        int32_t v;
        memcpy(&v, b + 4 * i, 4);
        return v;
    }
    case AT_DT_I64: {
        int64_t v;
        memcpy(&v, b + 8 * i, 8);
        return (double)v;
    }
    case AT_DT_I8:
        return (int8_t)b[i];
    case AT_DT_BOOL:
        return b[i] != 0;
    default:
        return NAN;
    }
}

double kn_rt_rel_err(const void *out, const void *ref, at_dtype dt, int64_t n)
{
    double max_diff = 0, max_ref = 0;
    if (n <= 0)
        return 0;
    if (out == NULL || ref == NULL || (unsigned)dt >= AT_N_DTYPES)
        return INFINITY;
    for (int64_t i = 0; i < n; i++) {
        double o = elem(out, dt, i), r = elem(ref, dt, i);
        if (isnan(o) || isnan(r)) {
            if (isnan(o) && isnan(r))
                continue; /* NaN where NaN is expected */
            return INFINITY;
        }
        if (isinf(o) || isinf(r)) {
            if (o == r)
                continue; /* the same infinity */
            return INFINITY;
        }
        max_diff = fmax(max_diff, fabs(o - r));
        max_ref = fmax(max_ref, fabs(r));
    }
    return max_ref > 0 ? max_diff / max_ref : max_diff;
}

/* ---- aligned buffers ------------------------------------------------------------------ */

/* Through at_malloc, so the test allocation limit applies: the block is over-allocated,
** the 64-byte aligned address is handed out and the block's address sits just before
** it. */
void *kn_rt_alloc(size_t n)
{
    size_t body = n < 64 ? 64 : n;
    unsigned char *raw;
    uintptr_t a;
    if (body > SIZE_MAX - 2 * 64 - sizeof(void *))
        return NULL;
    body = (body + 63) & ~(size_t)63;
    if ((raw = at_malloc(body + 64 + sizeof(void *))) == NULL)
        return NULL;
    a = ((uintptr_t)raw + sizeof(void *) + 63) & ~(uintptr_t)63;
    memcpy((void *)(a - sizeof(void *)), &raw, sizeof raw);
    memset((void *)a, 0, body);
    return (void *)a;
}

void kn_rt_free(void *p)
{
    void *raw;
    if (p == NULL)
        return;
    memcpy(&raw, (unsigned char *)p - sizeof(void *), sizeof raw);
    at_free(raw);
}
