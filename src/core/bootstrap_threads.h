/* Internal to the bootstrap root (bootstrap_root.c, bootstrap_threads.c). */
#ifndef BRAID_CORE_BOOTSTRAP_THREADS_H
#define BRAID_CORE_BOOTSTRAP_THREADS_H

#include "core/bootstrap.h"

#include <stdatomic.h>

/* A handle (braid_boot_root_start_handle's) with two references: the caller's (dropped by
 * braid_boot_root_wait) and the service thread's. set publishes the service's state (exited,
 * quiet = every reply delivered) to braid_boot_root_wait. */
braid_boot_root_t *braid_boot_handle_new(void);
void braid_boot_handle_set(braid_boot_root_t *h, int exited, int quiet);
void braid_boot_handle_unref(braid_boot_root_t *h);

/* Starts fn(arg) as a service thread with every signal blocked, counted in the live roots and
 * kept in the thread table with its flag `done`: 0 or an errno. The thread's last call is
 * braid_boot_thread_end(done). */
int braid_boot_thread_spawn(void *(*fn)(void *), void *arg, atomic_int *done);
void braid_boot_thread_end(atomic_int *done);
/* Set at exit: service threads stop (within one poll). */
int braid_boot_roots_stopping(void);

#endif
