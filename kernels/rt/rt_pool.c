/* kernels/rt/rt_pool.c -- the parallel runtime that kernels receive as 'par'.
**
** A pool has n_threads - 1 persistent workers; worker i runs task i, the launching thread
** task 0.  A task function claims its loop's iterations in chunks from a counter in its
** closure (the code generator writes it so), so the tasks that run cover the loop whoever
** runs them: a worker that comes late (its CPU taken by another process, a preempted
** vCPU) does not join a launch that is over, and the launch does not wait for it.  One
** launch:
**
**   launcher: fn, closure, rc = 0                     (plain/relaxed stores)
**             entry = OPEN | id(gen + 1), no worker inside   (release)
**             gen += 1                                (seq_cst)
**             futex-wake 'gen' if a worker sleeps
**             run task 0 (it claims chunks until none is left)
**             entry &= ~OPEN: nobody joins from now on
**             wait until no worker is inside (entry == id)
**   worker:   sees gen change to g, then joins by a CAS entry -> entry + 1 that requires
**             OPEN and the id of g; joined, it reads fn/closure, runs its task, CASes a
**             non-zero return into rc, entry -= 1 (the last one out of a closed launch
**             wakes the launcher if it sleeps).  A worker that finds launch g closed (or
**             another id: it is late) skips it and waits for 'gen' to move again.
**
** fn/closure are written by the launcher only while no worker is inside and none can join
** (closed), and read by a worker only between its join and its leave; the join's acquire
** CAS sees the launcher's release of the open entry.  The id (the low bits of 'gen') keeps
** a worker from joining a launch other than the one it saw, so it never runs one twice.
**
** Waiting is a spin of about SPIN_NS (pause/yield in the loop; after YIELD_AFTER_NS it
** also gives the CPU away, which keeps an oversubscribed pool usable), then a futex sleep.  The
** two sleeps are Dekker pairs done with seq_cst atomics: a sleeper announces itself
** (n_sleeping, launcher_sleeping), then re-reads the word and sleeps only on the value it
** read; the waker changes the word, then reads the announcement.  One of the two always
** sees the other, and FUTEX_WAIT returns at once if the word changed in between.
**
** Nesting: every thread running a task has the thread-local 'in_task' set; a launch from
** there (or a second concurrent launch, which the contract forbids) runs serially on the
** calling thread as fn(closure, 0, 1). */
#include "rt_int.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SPIN_NS 50000       /* how long a waiting thread spins before it sleeps */
#define YIELD_AFTER_NS 5000 /* after this, the spin also yields the CPU */
#define MAX_THREADS 1024
#define ENTRY_OPEN 0x80000000u
#define ENTRY_COUNT 0xffffu      /* workers inside (at most MAX_THREADS - 1) */
#define ENTRY_ID(gen) (((uint32_t)(gen) & 0x7fffu) << 16)

typedef struct worker {
    struct kn_rt_pool *pool;
    int32_t index; /* its task id, 1 .. n_threads - 1 */
} worker;

struct kn_rt_pool {
    kn_rt_par par;       /* what kernels see; par.impl points back here */
    int32_t n_threads;
    int n_started;       /* workers created */
    pthread_t *threads;  /* [n_threads - 1] */
    worker *workers;     /* [n_threads - 1] */

    /* the current launch: written by the launcher before 'gen' moves */
    kn_rt_task_fn fn;
    void *closure;

    char pad0[64];
    _Atomic uint32_t gen;        /* launch generation; the workers' futex word */
    _Atomic int32_t n_sleeping;  /* workers asleep (or about to be) on 'gen' */
    _Atomic int stop;            /* set by kn_rt_pool_free before its last 'gen' move */
    char pad1[64];
    _Atomic uint32_t entry;      /* ENTRY_OPEN while workers may join, plus the number of
                                 ** workers inside; the launcher's futex word */
    _Atomic int launcher_sleeping;
    _Atomic int32_t rc;          /* first non-zero task return of this launch */
    _Atomic int busy;            /* a launch is in progress */
    _Atomic int n_ready;         /* workers past their start-up (kn_rt_pool_new waits) */
    _Atomic uint64_t n_joins;    /* launches joined, summed over the workers */
    uint64_t n_launches;         /* launches run on the pool (the launcher's thread only) */
    uint64_t n_short;            /* of which some worker missed (kn_rt_pool_counts) */
    char pad2[64];
};

static _Thread_local int in_task;

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void futex_wait(_Atomic uint32_t *word, uint32_t expected)
{
    /* EAGAIN (word changed), EINTR and spurious wake-ups all just return: callers loop */
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *word, int n)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

/* Spin about SPIN_NS until '*word' is (want_equal) or is not (!want_equal) 'value';
** true when that happened, false when the time ran out. */
static int spin(_Atomic uint32_t *word, uint32_t value, int want_equal)
{
    int64_t t0 = 0;
    for (unsigned i = 1;; i++) {
        if ((atomic_load_explicit(word, memory_order_acquire) == value) == want_equal)
            return 1;
        cpu_relax();
        if ((i & 63) == 0) {
            int64_t t = now_ns();
            if (t0 == 0)
                t0 = t;
            else if (t - t0 > SPIN_NS)
                return 0;
            else if (t - t0 > YIELD_AFTER_NS)
                sched_yield(); /* more threads than free cores: let the others run */
        }
    }
}

static void set_rc(kn_rt_pool *p, int32_t r)
{
    int32_t zero = 0;
    if (r != 0)
        atomic_compare_exchange_strong(&p->rc, &zero, r);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    kn_rt_pool *p = w->pool;
    uint32_t seen = 0; /* no launch happens before kn_rt_pool_new returns */

    in_task = 1;
    atomic_fetch_add(&p->n_ready, 1);
    for (;;) {
        kn_rt_task_fn fn;
        void *closure;
        if (!spin(&p->gen, seen, 0)) {
            for (;;) {
                atomic_fetch_add(&p->n_sleeping, 1);
                if (atomic_load(&p->gen) == seen)
                    futex_wait(&p->gen, seen);
                atomic_fetch_sub(&p->n_sleeping, 1);
                if (atomic_load_explicit(&p->gen, memory_order_acquire) != seen)
                    break;
            }
        }
        seen = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (atomic_load_explicit(&p->stop, memory_order_acquire))
            break;
        {
            /* join launch 'seen' while it is open; one that is over goes on without us */
            uint32_t e = atomic_load_explicit(&p->entry, memory_order_relaxed);
            int joined = 0;
            while ((e & ENTRY_OPEN) && (e & ~(ENTRY_OPEN | ENTRY_COUNT)) == ENTRY_ID(seen) &&
                   !joined)
                joined = atomic_compare_exchange_weak_explicit(&p->entry, &e, e + 1,
                                                               memory_order_acquire,
                                                               memory_order_relaxed);
            if (!joined)
                continue;
            atomic_fetch_add_explicit(&p->n_joins, 1, memory_order_relaxed);
        }
        fn = p->fn;
        closure = p->closure;
        set_rc(p, fn(closure, w->index, p->n_threads));
        {
            uint32_t old = atomic_fetch_sub(&p->entry, 1);
            /* the last one out of a closed launch: the launcher may sleep on it */
            if (!(old & ENTRY_OPEN) && (old & ENTRY_COUNT) == 1 &&
                atomic_load(&p->launcher_sleeping))
                futex_wake(&p->entry, 1);
        }
    }
    return NULL;
}

static int32_t run_serial(kn_rt_task_fn fn, void *closure)
{
    int saved = in_task;
    int32_t r;
    in_task = 1;
    r = fn(closure, 0, 1);
    in_task = saved;
    return r;
}

/* Close the launch (nobody joins any more) and wait for the workers inside to leave:
** then the entry word is the launch's id alone. */
static void wait_workers(kn_rt_pool *p, uint32_t id)
{
    if ((atomic_fetch_and(&p->entry, ~ENTRY_OPEN) & ENTRY_COUNT) == 0 ||
        spin(&p->entry, id, 1))
        return;
    for (;;) {
        uint32_t v;
        atomic_store(&p->launcher_sleeping, 1);
        if ((v = atomic_load(&p->entry)) == id)
            break;
        futex_wait(&p->entry, v);
    }
    atomic_store(&p->launcher_sleeping, 0);
}

static int32_t pool_launch(const kn_rt_par *par, kn_rt_task_fn fn, void *closure)
{
    kn_rt_pool *p;
    int32_t r;
    uint32_t id;
    uint64_t joins;
    if (fn == NULL)
        return -1;
    p = par ? par->impl : NULL;
    if (p == NULL || p->n_threads <= 1 || in_task)
        return run_serial(fn, closure);
    if (atomic_exchange_explicit(&p->busy, 1, memory_order_acquire))
        return run_serial(fn, closure); /* a concurrent launch: not allowed, but safe */

    joins = atomic_load_explicit(&p->n_joins, memory_order_relaxed);
    p->fn = fn;
    p->closure = closure;
    atomic_store_explicit(&p->rc, 0, memory_order_relaxed);
    id = ENTRY_ID(atomic_load_explicit(&p->gen, memory_order_relaxed) + 1);
    atomic_store_explicit(&p->entry, ENTRY_OPEN | id, memory_order_release);
    atomic_fetch_add(&p->gen, 1);
    if (atomic_load(&p->n_sleeping) > 0)
        futex_wake(&p->gen, INT_MAX);

    in_task = 1;
    set_rc(p, fn(closure, 0, p->n_threads));
    in_task = 0;

    wait_workers(p, id);
    /* every worker that joined has left (wait_workers' acquire): its count is in */
    p->n_launches++;
    p->n_short += atomic_load_explicit(&p->n_joins, memory_order_relaxed) - joins <
                  (uint64_t)(p->n_threads - 1);
    r = atomic_load(&p->rc);
    atomic_store_explicit(&p->busy, 0, memory_order_release);
    return r;
}

static void stop_workers(kn_rt_pool *p)
{
    atomic_store_explicit(&p->stop, 1, memory_order_release);
    atomic_fetch_add(&p->gen, 1);
    futex_wake(&p->gen, INT_MAX);
    for (int i = 0; i < p->n_started; i++)
        pthread_join(p->threads[i], NULL);
    p->n_started = 0;
}

at_err kn_rt_pool_new(int n_threads, kn_rt_pool **out)
{
    kn_rt_pool *p;
    sigset_t all, old;
    at_err err = AT_OK;

    if (out == NULL)
        return AT_EINVAL;
    *out = NULL;
    if (n_threads == 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = c > 0 ? (int)AT_MIN(c, (long)MAX_THREADS) : 1;
    }
    if (n_threads < 1 || n_threads > MAX_THREADS)
        return AT_EINVAL;
    if ((p = at_calloc(1, sizeof *p)) == NULL)
        return AT_ENOMEM;
    p->n_threads = n_threads;
    p->par.launch = pool_launch;
    p->par.n_threads = n_threads;
    p->par.impl = p;
    if (n_threads > 1 &&
        ((p->threads = at_calloc((size_t)n_threads - 1, sizeof *p->threads)) == NULL ||
         (p->workers = at_calloc((size_t)n_threads - 1, sizeof *p->workers)) == NULL)) {
        err = AT_ENOMEM;
        goto fail;
    }
    /* workers take no signals: they belong to the thread that owns the process */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (int i = 0; i < n_threads - 1; i++) {
        p->workers[i].pool = p;
        p->workers[i].index = i + 1;
        if (pthread_create(&p->threads[i], NULL, worker_main, &p->workers[i]) != 0) {
            at_log_error("kernel runtime: cannot start worker thread %d of %d", i + 1,
                         n_threads - 1);
            err = AT_ENOMEM;
            break;
        }
        p->n_started++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err != AT_OK)
        goto fail;
    /* every worker past its start-up (glibc's rseq and robust-list calls, a sanitizer's
    ** per-thread set-up) before the caller goes on: a launch no longer waits for a worker
    ** that has not joined, so a caller that then enters a sandbox forbidding those calls
    ** (the agent's child) must not find a worker still starting */
    while (atomic_load(&p->n_ready) < p->n_started)
        sched_yield();
    *out = p;
    return AT_OK;
fail:
    stop_workers(p);
    at_free(p->workers);
    at_free(p->threads);
    at_free(p);
    return err;
}

void kn_rt_pool_free(kn_rt_pool *p)
{
    if (p == NULL)
        return;
    stop_workers(p);
    at_free(p->workers);
    at_free(p->threads);
    at_free(p);
}

const kn_rt_par *kn_rt_pool_par(kn_rt_pool *p)
{
    return p ? &p->par : kn_rt_serial_par();
}

static int32_t serial_launch(const kn_rt_par *par, kn_rt_task_fn fn, void *closure)
{
    (void)par;
    return fn ? run_serial(fn, closure) : -1;
}

static const kn_rt_par serial_par = {serial_launch, 1, 0, NULL};

const kn_rt_par *kn_rt_serial_par(void)
{
    return &serial_par;
}

void kn_rt_pool_counts(const kn_rt_par *par, uint64_t *n_launches, uint64_t *n_short)
{
    const kn_rt_pool *p = par && par->launch == pool_launch ? par->impl : NULL;
    if (n_launches)
        *n_launches = p ? p->n_launches : 0;
    if (n_short)
        *n_short = p ? p->n_short : 0;
}

at_err kn_rt_pool_pin(kn_rt_pool *p, const int *cpus, int n_cpus)
{
    cpu_set_t one;
    if (p == NULL || cpus == NULL || n_cpus < 1)
        return AT_EINVAL;
    for (int i = 0; i < n_cpus; i++)
        if (cpus[i] < 0 || cpus[i] >= CPU_SETSIZE)
            return AT_EINVAL;
    for (int i = 0; i < p->n_started; i++) {
        CPU_ZERO(&one);
        CPU_SET(cpus[(i + 1) % n_cpus], &one);
        if (pthread_setaffinity_np(p->threads[i], sizeof one, &one) != 0)
            return AT_EIO;
    }
    CPU_ZERO(&one);
    CPU_SET(cpus[0], &one);
    return sched_setaffinity(0, sizeof one, &one) == 0 ? AT_OK : AT_EIO;
}
