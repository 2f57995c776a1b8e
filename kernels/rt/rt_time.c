/* kernels/rt/rt_time.c -- timing a kernel (the semantics of TVM's time evaluator) and
** evicting buffers from the caches.
**
** kn_rt_time: warm-up calls, then repeat 0 calibrates 'number': it is timed with the
** current 'number' and, while it lasts less than min_repeat_ms, 'number' grows to
** max(1.618 * number, the estimate that would reach min_repeat_ms) and repeat 0 is
** timed again (the shorter tries are discarded).  The later repeats keep that 'number'.
** All times are CLOCK_MONOTONIC; a cost is the repeat's time divided by 'number'. */
#include "rt_int.h"

#include <math.h>
#include <stdatomic.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define MAX_NUMBER (1 << 20) /* calls per repeat at most */
#define WARMUP_MIN_S 2e-3 /* a requested warm-up lasts this long at least */

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void kn_rt_flush(const void *p, size_t n)
{
    uintptr_t a, end;
    if (p == NULL || n == 0)
        return;
    end = (uintptr_t)p + n;
#if defined(__x86_64__)
    for (a = (uintptr_t)p & ~(uintptr_t)63; a < end; a += 64)
        _mm_clflush((const void *)a);
    _mm_mfence();
#elif defined(__aarch64__)
    {
        uint64_t ctr;
        uintptr_t line;
        __asm__ __volatile__("mrs %0, ctr_el0" : "=r"(ctr));
        line = (uintptr_t)4 << ((ctr >> 16) & 15); /* DminLine: log2 of 4-byte words */
        for (a = (uintptr_t)p & ~(line - 1); a < end; a += line)
            __asm__ __volatile__("dc civac, %0" : : "r"(a) : "memory");
        __asm__ __volatile__("dsb ish" : : : "memory");
    }
#else
    (void)a;
    (void)end;
    atomic_thread_fence(memory_order_seq_cst); /* no portable eviction: order only */
#endif
}

static void flush_inputs(const kn_rt_time_opts *o, void *const *bufs, int n_flush,
                         const size_t *n_bytes)
{
    if (!o->flush_cache)
        return;
    for (int i = 0; i < n_flush; i++)
        kn_rt_flush(bufs[i], n_bytes[i]);
}

at_err kn_rt_time(kn_rt_kernel_fn fn, void *const *bufs, void *ws, const kn_rt_par *par,
                  const kn_rt_time_opts *opts, int n_flush, const size_t *n_bytes,
                  double *costs_s, int32_t *kernel_rc)
{
    int number, redo_left;
    double t_warm;
    kn_rt_time_info info = {0, 0};
    if (fn == NULL || opts == NULL || costs_s == NULL || kernel_rc == NULL ||
        opts->number < 1 || opts->repeat < 1 || opts->n_warmup < 0 ||
        !(opts->min_repeat_ms >= 0) || n_flush < 0 ||
        (n_flush > 0 && opts->flush_cache && (bufs == NULL || n_bytes == NULL)))
        return AT_EINVAL;
    if (par == NULL)
        par = kn_rt_serial_par();
    *kernel_rc = 0;
    if (opts->info)
        *opts->info = info;
    for (int i = 0; i < opts->repeat; i++)
        costs_s[i] = 0;

    /* the warm-up: n_warmup calls, and calls for WARMUP_MIN_S at least when it is asked for
    ** at all: after an idle spell (a sleeping pool, a halted virtual CPU, a clock that
    ** slowed) the first calls of a short kernel run up to 2x slower for 1-2 ms
    ** (docs/fleet.md), which three repeats of one call would take as the kernel's cost */
    t_warm = mono_s();
    for (int i = 0; i < opts->n_warmup || (opts->n_warmup > 0 && i < MAX_NUMBER &&
                                            mono_s() - t_warm < WARMUP_MIN_S);
         i++) {
        int32_t r = fn(bufs, ws, par);
        if (r != 0) {
            *kernel_rc = r;
            return AT_OK;
        }
    }

    number = AT_MIN(opts->number, MAX_NUMBER);
    redo_left = opts->max_redo > 0 ? opts->max_redo : 0;
    for (int rep = 0; rep < opts->repeat; rep++) {
        double dt;
        for (;;) {
            double t0, need;
            uint64_t launch0, launch1, short0, short1;
            int missed;
            flush_inputs(opts, bufs, n_flush, n_bytes);
            kn_rt_pool_counts(par, &launch0, &short0);
            t0 = mono_s();
            for (int k = 0; k < number; k++) {
                int32_t r = fn(bufs, ws, par);
                if (r != 0) {
                    *kernel_rc = r;
                    return AT_OK;
                }
            }
            dt = mono_s() - t0;
            kn_rt_pool_counts(par, &launch1, &short1);
            /* a worker missed one launch in 20 or more (any, in a repeat of 20 launches or
            ** fewer): the launcher ran its chunks too, and those launches took up to
            ** n_threads times as long (2x on two threads; docs/kernel_abi.md) */
            missed = short1 > short0 && (short1 - short0) * 20 >= launch1 - launch0;
            if (missed && redo_left > 0) {
                redo_left--;
                info.n_redone++;
                continue;
            }
            if (rep > 0 || dt * 1e3 >= opts->min_repeat_ms || number >= MAX_NUMBER) {
                info.n_short += missed;
                break;
            }
            /* grow by 1.618x at least, or straight to the estimate (TVM's rule) */
            need = dt > 0 ? opts->min_repeat_ms * 1e-3 / (dt / number) + 1 : 0;
            need = fmax(need, ceil(number * 1.618));
            number = need >= MAX_NUMBER ? MAX_NUMBER : (int)need;
        }
        costs_s[rep] = dt / number;
    }
    if (opts->info)
        *opts->info = info;
    return AT_OK;
}
