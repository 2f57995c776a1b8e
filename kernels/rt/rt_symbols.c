/* kernels/rt/rt_symbols.c -- the functions a kernel may call: the mem* functions, the
** float/double libm functions a code generator emits for math intrinsics (and sincos,
** which gcc and LLVM form from a sin and a cos of one argument), integer powers and
** IEEE half conversions that compilers call as helpers.  The list is part of the kernel
** ABI (docs/kernel_abi.md): append, never remove. */
#include "rt_int.h"

#include <math.h>
#include <string.h>

#define KN_RT_LIBM_PAIRS(X)                                                                \
    X(exp) X(exp2) X(expm1) X(log) X(log2) X(log10) X(log1p) X(sqrt) X(cbrt) X(pow)        \
    X(sin) X(cos) X(tan) X(asin) X(acos) X(atan) X(atan2) X(sinh) X(cosh) X(tanh)          \
    X(asinh) X(acosh) X(atanh) X(erf) X(erfc) X(fabs) X(floor) X(ceil) X(round) X(trunc)    \
    X(rint) X(nearbyint) X(fmod) X(fmax) X(fmin) X(fma) X(hypot) X(copysign) X(ldexp)       \
    X(frexp) X(remainder)

/* The compiler helpers that LLVM calls for llvm.powi (compiler-rt semantics). */
static float powi_f32(float a, int b)
{
    float r = 1.0f;
    int neg = b < 0;
    unsigned e = neg ? 0u - (unsigned)b : (unsigned)b;
    for (; e; e >>= 1, a *= a)
        if (e & 1)
            r *= a;
    return neg ? 1.0f / r : r;
}

static double powi_f64(double a, int b)
{
    double r = 1.0;
    int neg = b < 0;
    unsigned e = neg ? 0u - (unsigned)b : (unsigned)b;
    for (; e; e >>= 1, a *= a)
        if (e & 1)
            r *= a;
    return neg ? 1.0 / r : r;
}

/* Half conversions with the psABI's _Float16 convention (value in an FP register), as
** gcc and LLVM >= 15 call them, when this compiler has _Float16 (gcc >= 12, clang >= 15
** on x86-64; both on AArch64); and the older integer-register GNU names always. */
#if defined(__FLT16_MAX__)
#define HAVE_FLOAT16 1
static float half_extend(_Float16 h)
{
    return (float)h;
}

static _Float16 half_trunc(float f)
{
    return (_Float16)f;
}
#endif

static float gnu_h2f(uint16_t h)
{
    return kn_rt__half_to_float(h);
}

static uint16_t gnu_f2h(float f)
{
    return kn_rt__float_to_half(f);
}

static const kn_rt_symbol builtin_symbols[] = {
    {"memcpy", (void *)memcpy},
    {"memset", (void *)memset},
    {"memmove", (void *)memmove},
    {"memcmp", (void *)memcmp},
#define X(fn) {#fn "f", (void *)fn##f}, {#fn, (void *)fn},
    KN_RT_LIBM_PAIRS(X)
#undef X
    {"sincosf", (void *)sincosf},
    {"sincos", (void *)sincos},
    {"__powisf2", (void *)powi_f32},
    {"__powidf2", (void *)powi_f64},
#if defined(HAVE_FLOAT16)
    {"__extendhfsf2", (void *)half_extend},
    {"__truncsfhf2", (void *)half_trunc},
#endif
    {"__gnu_h2f_ieee", (void *)gnu_h2f},
    {"__gnu_f2h_ieee", (void *)gnu_f2h},
    {NULL, NULL},
};

const kn_rt_symbol *kn_rt_symbols(void)
{
    return builtin_symbols;
}
