/* kernels/kernels_rt.h -- the kernel runtime (prefix kn_rt_): what a device needs to run
** a compiled kernel.  It links no LLVM, no compiler and no SQLite: the agent on a phone
** links this archive (build/.../libkernels_rt.a) and common/ only.
**
**   kn_rt_module_load(obj, n, NULL, &m, err, sizeof err);     load a relocatable ELF object
**   fn = (kn_rt_kernel_fn)kn_rt_module_sym(m, "kernel_main");
**   kn_rt_pool_new(2, &pool);                                  threads, made before any sandbox
**   fn(bufs, workspace, kn_rt_pool_par(pool));                 run it
**   kn_rt_time(fn, bufs, ws, par, &opts, costs, &rc);          time it
**   kn_rt_module_free(m); kn_rt_pool_free(pool);
**
** THE KERNEL ABI (what the code generator emits and the runtime calls):
**
**   int32_t kernel(void *const *bufs, void *workspace, const kn_rt_par *par);
**
**   bufs       one pointer per tensor argument, in the artifact's order: the DAG's
**              placeholders in declaration order, then its outputs in declaration order.
**              Every buffer is dense row-major, 64-byte aligned, never aliased.
**   workspace  scratch memory of at least ws_fixed + ws_per_thread * par->n_threads bytes,
**              64-byte aligned (may be NULL when both sizes are 0).  The kernel keeps its
**              temporaries (cache stages, rfactor partials) there or on its stack; it
**              allocates nothing and makes no system call.
**   par        the parallel runtime: a parallel loop becomes one call of par->launch with a
**              task function that claims chunks of the loop's iterations from counters in
**              its closure until none is left (a task may not run at all: see launch).
**   return     0 on success, non-zero if a parallel launch failed.
**
**   The kernel may call only: memcpy, memset, memmove, memcmp, the libm functions listed
**   by kn_rt_symbols() (expf, logf, sqrtf, tanhf, erff, ... and their double forms,
**   sincos[f]) and the compiler helpers there (__powisf2, __powidf2, half conversions);
**   the loader resolves nothing else, except what the caller passes as 'extra'.
**   docs/kernel_abi.md has the whole contract, the relocations the loader applies, the
**   fill formula and the command-line runner.
**
** Layout of kn_rt_par is part of the ABI (generated code loads its fields by offset):
**   offset 0: launch   (pointer)
**   offset 8: n_threads (int32)
*/
#ifndef KN_KERNELS_RT_H
#define KN_KERNELS_RT_H

#include <stddef.h>
#include <stdint.h>

#include "common/common.h"

/* ---- the ABI ------------------------------------------------------------------------ */

typedef struct kn_rt_par kn_rt_par;

/* A task runs iterations of one parallel loop.  'task_id' is in [0, n_tasks) (it selects
** the task's slice of the workspace); the iterations are not divided by it: the task claims
** chunks of them from counters the launching code put in the closure (its own block of
** chunks first, then the others': docs/kernel_abi.md), so whichever tasks run cover the
** whole loop. */
typedef int32_t (*kn_rt_task_fn)(void *closure, int32_t task_id, int32_t n_tasks);

struct kn_rt_par {
    /* Run fn(closure, 0, n_threads) on the calling thread and fn(closure, t, n_threads) on
    ** each worker t in [1, n_threads) that joins while it runs (a worker whose CPU is
    ** busy elsewhere and comes after the launch is over does not run it at all, and is
    ** not waited for); return when every task that started has finished: 0 if each
    ** returned 0, else the first non-zero value.  A task runs at most once a launch.  A
    ** launch from inside a task runs serially on the calling thread (n_tasks 1):
    ** fn(closure, 0, 1).  A NULL 'fn' returns -1. */
    int32_t (*launch)(const kn_rt_par *par, kn_rt_task_fn fn, void *closure);
    int32_t n_threads; /* >= 1 */
    int32_t reserved;
    void *impl; /* runtime-private */
};

typedef int32_t (*kn_rt_kernel_fn)(void *const *bufs, void *workspace, const kn_rt_par *par);

/* ---- loading objects ---------------------------------------------------------------- */

typedef struct kn_rt_module kn_rt_module;

/* One symbol the loader may resolve for a kernel. */
typedef struct kn_rt_symbol {
    const char *name;
    void *addr;
} kn_rt_symbol;

/* The built-in table (libm functions and mem*), terminated by {NULL, NULL}. */
const kn_rt_symbol *kn_rt_symbols(void);

/* Load a relocatable ELF object (ET_REL) built for this machine (x86-64 or AArch64):
** map its allocatable sections, apply the relocations, resolve undefined symbols from
** 'extra' (may be NULL; {NULL, NULL}-terminated, searched first) and kn_rt_symbols(),
** and make code executable.  On AT_OK the caller owns *out (kn_rt_module_free).  On
** failure *out is NULL, the return is AT_ELOAD (bad or foreign object, unknown
** relocation, unresolved symbol, a relocated field out of range; 'errmsg' says which
** and names the symbol or section), AT_ENOMEM, or AT_EINVAL when 'out' is NULL.
** 'errmsg' may be NULL; it is always NUL-terminated when errmsg_size > 0.  The object
** is outside data: every offset, size and index in it is checked, nothing in it can
** make the loader read or write out of bounds.  The object bytes are not referenced
** after the call and need no alignment.  Thread-safe; uses mmap/mprotect (call it
** before entering a sandbox that forbids them).  Code ends up R-X, read-only data and
** the GOT R, writable data RW. */
at_err kn_rt_module_load(const void *obj, size_t n_bytes, const kn_rt_symbol *extra,
                         kn_rt_module **out, char *errmsg, size_t errmsg_size);

/* Address of the defined global or weak symbol 'name' (function or data), or NULL
** (also for static symbols, undefined ones and a NULL module). */
void *kn_rt_module_sym(const kn_rt_module *m, const char *name);

void kn_rt_module_free(kn_rt_module *m); /* NULL is fine */

/* ---- thread pool -------------------------------------------------------------------- */

typedef struct kn_rt_pool kn_rt_pool;

/* A pool of n_threads - 1 worker threads plus the caller (1 <= n_threads <= 1024; 0
** means the number of online CPUs; else AT_EINVAL).  Workers spin about 50 us, then
** sleep on a futex; they block every signal.  It returns when every worker is past its
** start-up (so a sandbox entered next may forbid the calls threads make when they start).
** On AT_OK the caller owns *out (kn_rt_pool_free, which joins the workers); AT_ENOMEM if
** memory or threads run out. */
at_err kn_rt_pool_new(int n_threads, kn_rt_pool **out);
void kn_rt_pool_free(kn_rt_pool *p);
/* Pin the calling thread (the launcher) to cpus[0] and worker i to cpus[(i + 1) % n_cpus]:
** for timing, where a worker woken onto the launcher's CPU waits behind it and misses
** launches (docs/kernel_abi.md, "Pinned for timing").  Call it before a sandbox that
** forbids sched_setaffinity.  AT_EINVAL for a NULL pool or list, n_cpus < 1 or a CPU
** outside 0 .. CPU_SETSIZE-1; AT_EIO if the system refuses (a CPU not allowed). */
at_err kn_rt_pool_pin(kn_rt_pool *p, const int *cpus, int n_cpus);
/* The kernel argument for this pool; valid until kn_rt_pool_free.  Launches must come
** from one thread at a time (a second concurrent launch is not an error: it runs
** serially).  NULL gives kn_rt_serial_par(). */
const kn_rt_par *kn_rt_pool_par(kn_rt_pool *p);
/* Launches run on the pool of 'par' so far, and how many of them some worker missed (it
** joined only after the launch had closed, or not at all: asleep, or its CPU taken, while
** the launcher ran every chunk).  Read from the launching thread.  Zeros for a 'par' that
** is not a pool's (NULL, kn_rt_serial_par()). */
void kn_rt_pool_counts(const kn_rt_par *par, uint64_t *n_launches, uint64_t *n_short);
/* A serial runtime (n_threads 1, no threads), for references and tests. */
const kn_rt_par *kn_rt_serial_par(void);

/* ---- timing ------------------------------------------------------------------------- */

typedef struct kn_rt_time_opts {
    int number;          /* calls per timed repeat (>= 1); grown to reach min_repeat_ms */
    int repeat;          /* timed repeats (>= 1); one cost each */
    double min_repeat_ms; /* grow 'number' until one repeat takes at least this long */
    int flush_cache;     /* evict every input buffer from the caches before each repeat */
    int n_warmup;        /* untimed calls before timing (0 is allowed); when > 0 the
                         ** warm-up also lasts 2 ms at least (docs/kernel_abi.md) */
    int max_redo;        /* repeats that may be timed again, in all, because a launch in
                         ** them ran short-handed (kn_rt_pool_counts); 0: none */
    struct kn_rt_time_info *info; /* NULL, or filled in */
} kn_rt_time_opts;

typedef struct kn_rt_time_info {
    int n_redone;        /* repeats timed again: a pool worker missed one of their launches */
    int n_short;         /* repeats kept with a missed launch (max_redo spent) */
} kn_rt_time_info;

/* Time fn(bufs, ws, par): n_warmup untimed calls, then 'repeat' repeats of 'number'
** back-to-back calls (number grown by 1.618x until a repeat lasts min_repeat_ms; at most
** 2^20 calls), writing the seconds per call of each repeat to costs_s[0..repeat).
** Growing happens in repeat 0 only: it is timed again with the larger 'number' (at
** least 1.618x, or TVM's estimate of what reaches min_repeat_ms) and the later repeats
** keep it.  The buffers to flush are bufs[0..n_flush) with sizes n_bytes[] (a size of 0
** is skipped); pass n_flush 0 to skip them all.  'par' NULL means kn_rt_serial_par().
** A repeat in which a launch of the pool ran short-handed (a worker missed it: the
** launcher ran every chunk, so that repeat timed fewer threads than the pool's) is timed
** again, up to opts->max_redo times in all; opts->info says how often.
** If the kernel returns non-zero, stops and sets *kernel_rc (else *kernel_rc = 0); the
** costs of repeats not finished are 0.  The return is AT_OK either way (a failing kernel
** is a result, not an error), or AT_EINVAL for a NULL fn/opts/costs_s/kernel_rc, number
** or repeat < 1, n_warmup < 0, min_repeat_ms < 0 or NaN, n_flush < 0, or flushing asked
** with NULL bufs/n_bytes. */
at_err kn_rt_time(kn_rt_kernel_fn fn, void *const *bufs, void *ws, const kn_rt_par *par,
                  const kn_rt_time_opts *opts, int n_flush, const size_t *n_bytes,
                  double *costs_s, int32_t *kernel_rc);

/* Evict [p, p+n) from the CPU caches (clflush + mfence on x86-64, dc civac + dsb on
** AArch64; elsewhere only a fence).  The contents are unchanged. */
void kn_rt_flush(const void *p, size_t n);

/* ---- inputs and comparison ---------------------------------------------------------- */

/* Fill 'n' elements of type 'dt' with values that depend only on (seed, stream, index),
** identical on every machine: floats uniform in [-1, 1) and never 0, integers in
** [-16, 16] and never 0, bools alternating pseudo-randomly.  'stream' separates buffers
** filled from one seed (use the buffer's argument index).  Element i depends on
** (seed, stream, i) only (formula in docs/kernel_abi.md): floats are odd multiples of
** 2^-24 (float16: 2^-11), the same numbers in float32 and float64.  n <= 0, a NULL 'p'
** or an unknown dtype writes nothing. */
void kn_rt_fill(void *p, at_dtype dt, int64_t n, uint64_t seed, uint32_t stream);

/* max|out - ref| / max|ref| over n elements (max|out - ref| when ref is all zero);
** NaN in 'out' where 'ref' is not NaN gives +inf, and so does NaN where NaN is not
** expected or an infinity that differs; equal infinities and NaN against NaN count as
** equal.  Integers compare exactly (as doubles), bools by truth (any non-zero byte is
** true), float16 after conversion.  n <= 0 gives 0; NULL buffers or an unknown dtype
** give +inf.  The error bound of the project is 1e-4 for float32. */
double kn_rt_rel_err(const void *out, const void *ref, at_dtype dt, int64_t n);

/* ---- aligned buffers ---------------------------------------------------------------- */

/* 64-byte aligned memory of n bytes (at least 64, rounded up to 64), zeroed, or NULL;
** kn_rt_free releases it (NULL is fine).  Allocated through at_malloc, so the test
** allocation limit applies. */
void *kn_rt_alloc(size_t n);
void kn_rt_free(void *p);

#endif /* KN_KERNELS_RT_H */
