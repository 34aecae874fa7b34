/* The bootstrap root services' threads and handles, process-wide (split from bootstrap_root.c,
 * which has the service itself): the handle a communicator keeps to wait for its root's last
 * replies, and the table of service threads (joined when they end or at exit, forgotten in a
 * forked child). */
#include "core/bootstrap.h"
#include "core/bootstrap_threads.h"
#include "core/log.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static atomic_int live_roots;

/* Shared by the service thread and the braid_boot_root_start_handle caller. */
struct braid_boot_root {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs, exited, quiet;
    atomic_int stop; /* braid_boot_root_stop */
};

void braid_boot_handle_unref(braid_boot_root_t *h)
{
    pthread_mutex_lock(&h->mu);
    int left = --h->refs;
    pthread_mutex_unlock(&h->mu);
    if (left) return;
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h);
}

void braid_boot_handle_set(braid_boot_root_t *h, int exited, int quiet)
{
    if (!h) return;
    pthread_mutex_lock(&h->mu);
    if (h->exited != exited || h->quiet != quiet) {
        h->exited = exited;
        h->quiet = quiet;
        pthread_cond_broadcast(&h->cv);
    }
    pthread_mutex_unlock(&h->mu);
}

int braid_boot_handle_stopped(braid_boot_root_t *h)
{
    return h && atomic_load(&h->stop);
}

void braid_boot_root_stop(braid_boot_root_t *h)
{
    if (!h) return;
    atomic_store(&h->stop, 1);
    braid_boot_handle_unref(h);
}

int braid_boot_root_count(void)
{
    return atomic_load(&live_roots);
}

/* ---- the service threads of this process ---------------------------------------------------
 * Joinable, so that nothing of theirs is left at exit: a thread that ended is joined by the
 * next start (or at exit); at exit (a library destructor) the ones still serving ranks are
 * told to stop (within one 100 ms poll) and joined, as the process's end would cut their
 * connections anyway. Valgrind then sees no thread, and no "possibly lost" thread memory. */
static pthread_mutex_t threads_mu = PTHREAD_MUTEX_INITIALIZER;
static struct root_thread {
    pthread_t tid;
    atomic_int *done;
} * threads;
static int nthreads, capthreads;
static atomic_int stop_all;

/* Joins the threads that ended; with 'all', every one (after stop_all). Call with threads_mu. */
static void reap_locked(int all)
{
    for (int i = 0; i < nthreads; i++) {
        if (!all && !atomic_load(threads[i].done)) continue;
        pthread_join(threads[i].tid, NULL);
        free(threads[i].done);
        threads[i--] = threads[--nthreads];
    }
}

/* The end of a service thread: it takes itself out of the table and detaches, so that a thread
 * that ended leaves nothing behind even if the process then leaves by _exit (no destructor runs:
 * a finished, never-joined thread is what ThreadSanitizer calls a leak). If the exit destructor
 * holds the table (stop_all), it joins this thread: then only raise the flag. */
static void forget_self(atomic_int *done)
{
    while (pthread_mutex_trylock(&threads_mu) != 0) {
        if (atomic_load(&stop_all)) {
            atomic_store(done, 1);
            return;
        }
        usleep(1000);
    }
    pthread_t self = pthread_self();
    int found = 0;
    for (int i = 0; i < nthreads && !found; i++) {
        if (!pthread_equal(threads[i].tid, self)) continue;
        threads[i] = threads[--nthreads];
        found = 1;
    }
    if (found) {
        pthread_detach(self);
        free(done);
    } else {
        atomic_store(done, 1); /* not in the table (cannot happen): reap_locked frees it */
    }
    pthread_mutex_unlock(&threads_mu);
}

static void roots_child_after_fork(void)
{
    /* The child has none of the parent's threads: forget them (their memory is the parent's
     * copy; freeing the flags is all there is to do; their sockets are closed by
     * bootstrap_sock.c's handler). */
    for (int i = 0; i < nthreads; i++)
        free(threads[i].done);
    nthreads = 0;
    atomic_store(&live_roots, 0);
    pthread_mutex_init(&threads_mu, NULL); /* the parent may have held it while forking */
}

static void roots_register_atfork(void)
{
    pthread_atfork(NULL, NULL, roots_child_after_fork);
}

__attribute__((destructor)) static void roots_at_exit(void)
{
    atomic_store(&stop_all, 1);
    if (pthread_mutex_trylock(&threads_mu) != 0) return; /* exit from inside a start */
    reap_locked(1);
    free(threads);
    threads = NULL;
    capthreads = 0;
    pthread_mutex_unlock(&threads_mu);
}

braid_boot_root_t *braid_boot_handle_new(void)
{
    braid_boot_root_t *h = calloc(1, sizeof(*h));
    pthread_condattr_t ca;
    if (!h) return NULL;
    pthread_mutex_init(&h->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cv, &ca);
    pthread_condattr_destroy(&ca);
    h->refs = 2;
    return h;
}

braid_result_t braid_boot_root_wait(braid_boot_root_t *h, double timeout_s)
{
    if (!h) return BRAID_SUCCESS;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double end = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + (timeout_s > 0 ? timeout_s : 0);
    ts.tv_sec = (time_t)end;
    ts.tv_nsec = (long)((end - (double)ts.tv_sec) * 1e9);
    pthread_mutex_lock(&h->mu);
    int rc = 0;
    while (!h->exited && !h->quiet && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&h->cv, &h->mu, &ts);
    int settled = h->exited || h->quiet;
    pthread_mutex_unlock(&h->mu);
    braid_boot_handle_unref(h);
    if (!settled)
        return braid_set_error(BRAID_ERR_TIMEOUT,
                               "bootstrap root: replies still undelivered after %g s", timeout_s);
    return BRAID_SUCCESS;
}

int braid_boot_roots_stopping(void)
{
    return atomic_load(&stop_all);
}

int braid_boot_thread_spawn(void *(*fn)(void *), void *arg, atomic_int *done)
{
    static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
    pthread_once(&atfork_once, roots_register_atfork);
    pthread_t tid;
    sigset_t all, old;
    sigfillset(&all);
    pthread_mutex_lock(&threads_mu);
    reap_locked(0);
    if (nthreads == capthreads) {
        int cap = capthreads ? 2 * capthreads : 8;
        struct root_thread *t = realloc(threads, (size_t)cap * sizeof(*t));
        if (t) {
            threads = t;
            capthreads = cap;
        }
    }
    int rc = nthreads == capthreads ? ENOMEM : 0;
    if (!rc) {
        pthread_sigmask(SIG_BLOCK, &all, &old); /* the thread inherits a mask that blocks all */
        atomic_fetch_add(&live_roots, 1);
        rc = pthread_create(&tid, NULL, fn, arg);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (!rc) {
            threads[nthreads].tid = tid; /* arg may be gone already: done was passed */
            threads[nthreads].done = done;
            nthreads++;
        } else {
            atomic_fetch_sub(&live_roots, 1);
        }
    }
    pthread_mutex_unlock(&threads_mu);
    return rc;
}

void braid_boot_thread_end(atomic_int *done)
{
    atomic_fetch_sub(&live_roots, 1);
    forget_self(done);
}
