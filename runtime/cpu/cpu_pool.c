/*
 * cpu_pool.c: a persistent pthread pool that runs one function on every
 * thread at once, with a spin barrier for the phases inside it.
 *
 * Owns its worker threads (n - 1 of them; the caller of cpu_pool_run is
 * thread 0) and nothing else. The CPU backend calls cpu_pool_run once per
 * step and separates the step's phases with cpu_pool_barrier, the way
 * ggml's graph compute does: one wake-up per step instead of one per
 * matmul, and a barrier costs well under a microsecond while both threads
 * are running.
 *
 * Worker states:  IDLE  --cpu_pool_run (gen++ under mu, broadcast)--> RUN
 *                 RUN   --fn returns, final barrier with the caller--> IDLE
 *                 IDLE  --cpu_pool_free (stop = 1, broadcast)-------> joined
 *
 * A barrier waiter spins with pause for a few tens of microseconds (the
 * usual wait when threads have cores to themselves) and then sleeps on a
 * futex; the last thread to arrive wakes sleepers. Spinning longer, or
 * yielding in a loop, burns the very core a descheduled partner needs when
 * other processes share the machine.
 */
#include "runtime/cpu/cpu_int.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/err.h"

#define SPIN_PAUSES 2000 /* ~20-50 us of pause before a waiter sleeps */

struct cpu_worker {
    struct cpu_pool *pool; /* borrowed: the owner */
    int ith;               /* 1 .. n-1 */
    pthread_t tid;         /* valid once started */
};

struct cpu_pool {
    int n;                      /* threads including the caller */
    int n_started;              /* workers created (for cleanup after a failure) */
    struct cpu_worker *workers; /* owned: n - 1 entries */
    pthread_mutex_t mu;         /* guards sleeping workers' wake-up */
    pthread_cond_t cv;          /* signalled when gen changes or stop is set */
    atomic_uint gen;            /* job generation: a worker runs each new value once */
    atomic_int stop;            /* 1: workers exit */
    cpu_pool_fn *fn;            /* the job; written before gen is bumped */
    void *arg;                  /* its argument */
    atomic_int bar_count;       /* threads arrived at the current barrier */
    atomic_uint bar_gen;        /* barrier generation (also the futex word) */
    atomic_int bar_sleepers;    /* threads asleep on bar_gen */
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Waits for the worker's next job; returns 0 to run it, 1 to exit. */
static int wait_job(struct cpu_pool *p, unsigned seen)
{
    for (int i = 0; i < SPIN_PAUSES; i++) {
        if (atomic_load_explicit(&p->gen, memory_order_acquire) != seen || atomic_load(&p->stop))
            return atomic_load(&p->stop);
        cpu_relax();
    }
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop))
        pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
    return atomic_load(&p->stop);
}

static void *worker_main(void *arg)
{
    struct cpu_worker *w = arg;
    struct cpu_pool *p = w->pool;
    unsigned seen = 0;

    while (!wait_job(p, seen)) {
        seen = atomic_load_explicit(&p->gen, memory_order_acquire);
        p->fn(p->arg, w->ith, p->n);
        cpu_pool_barrier(p); /* tells the caller the job is done */
    }
    return NULL;
}

/* Sleeps while *word == val (returns at once if it already differs). */
static void futex_wait(atomic_uint *word, unsigned val)
{
    syscall(SYS_futex, (unsigned *)word, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake_all(atomic_uint *word)
{
    syscall(SYS_futex, (unsigned *)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

int cpu_pool_new(int n, struct cpu_pool **out, struct mf_err *err)
{
    struct cpu_pool *p;
    int rc;

    *out = NULL;
    if (n < 1 || n > 1024)
        return mf_err_set(err, MF_EINVAL, "thread count %d is not in 1..1024", n);
    p = calloc(1, sizeof *p);
    if (!p || !(p->workers = calloc((size_t)n, sizeof *p->workers))) {
        free(p);
        return mf_err_set(err, MF_ENOMEM, "out of memory for a pool of %d threads", n);
    }
    p->n = n;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    for (int i = 1; i < n; i++) {
        p->workers[i - 1].pool = p;
        p->workers[i - 1].ith = i;
        rc = pthread_create(&p->workers[i - 1].tid, NULL, worker_main, &p->workers[i - 1]);
        if (rc) {
            cpu_pool_free(p);
            return mf_err_sys(err, MF_EIO, rc, "cannot start CPU worker thread %d of %d", i, n);
        }
        p->n_started++;
    }
    *out = p;
    return 0;
}

void cpu_pool_free(struct cpu_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_started; i++)
        pthread_join(p->workers[i].tid, NULL);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->workers);
    free(p);
}

int cpu_pool_size(const struct cpu_pool *p)
{
    return p->n;
}

void cpu_pool_run(struct cpu_pool *p, cpu_pool_fn *fn, void *arg)
{
    if (p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    fn(arg, 0, p->n);
    cpu_pool_barrier(p); /* every worker has returned from fn */
}

void cpu_pool_barrier(struct cpu_pool *p)
{
    unsigned g;

    if (p->n == 1)
        return;
    g = atomic_load_explicit(&p->bar_gen, memory_order_acquire);
    if (atomic_fetch_add_explicit(&p->bar_count, 1, memory_order_acq_rel) == p->n - 1) {
        atomic_store_explicit(&p->bar_count, 0, memory_order_relaxed);
        atomic_fetch_add(&p->bar_gen, 1);
        if (atomic_load(&p->bar_sleepers))
            futex_wake_all(&p->bar_gen);
        return;
    }
    for (int i = 0; i < SPIN_PAUSES; i++) {
        if (atomic_load_explicit(&p->bar_gen, memory_order_acquire) != g)
            return;
        cpu_relax();
    }
    atomic_fetch_add(&p->bar_sleepers, 1);
    while (atomic_load(&p->bar_gen) == g)
        futex_wait(&p->bar_gen, g);
    atomic_fetch_sub(&p->bar_sleepers, 1);
}
