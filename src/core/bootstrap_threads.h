/* Internal to the bootstrap root (bootstrap_root.c, bootstrap_threads.c, bootstrap_sock.c). */
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
/* 1 once braid_boot_root_stop was called on the handle: the service exits. */
int braid_boot_handle_stopped(braid_boot_root_t *h);

/* Starts fn(arg) as a service thread with every signal blocked, counted in the live roots and
 * kept in the thread table with its flag `done`: 0 or an errno. The thread's last call is
 * braid_boot_thread_end(done). */
int braid_boot_thread_spawn(void *(*fn)(void *), void *arg, atomic_int *done);
void braid_boot_thread_end(atomic_int *done);
/* Set at exit: service threads stop (within one poll). */
int braid_boot_roots_stopping(void);

/* ---- bootstrap_sock.c ---- */
/* Opens a non-blocking listener on addr (port 0: any), or with every_address on every address
 * of this host ([::] dual-stack, else 0.0.0.0) with addr's port; an addr that is not this
 * host's (EADDRNOTAVAIL) gets the wildcard of its family. The address bound in *bound_p.
 * Returns the fd, or -1 with the error set. */
int braid_boot_sock_listen(const braid_boot_addr_t *addr, int every_address,
                           struct sockaddr_storage *bound_p);
/* accept4 (non-blocking, close-on-exec) and close of a root's connections: the descriptors of
 * live roots are closed in a forked child. */
int braid_boot_sock_accept(int lfd, struct sockaddr_storage *peer_p, socklen_t *len_p);
void braid_boot_sock_close(int fd);
/* How many connections without a hello may wait: most, or a quarter of the descriptor limit
 * when that is less. */
int braid_boot_sock_unauth_cap(int most);
/* Answers a hello of another protocol version on fd with a BOOT_MSG_FAIL (BRAID_ERR_UNSUPPORTED)
 * naming both versions, non-blocking (the caller closes fd), and logs it. */
void braid_boot_refuse_version(int fd, const char *where, const char *peer, uint32_t version);
/* Formats the ranks for which have[i] is 0: "rank 3" or "ranks 2,3" (the first 32, then how
 * many more). */
void braid_boot_rank_list(char *buf, size_t len, const uint8_t *have, int nranks);
/* strerror, and for EMFILE/ENFILE what to do about it. */
void braid_boot_accept_why(int err, char *buf, size_t len);
/* Records that the root (secret, port) fails to accept with err since `since` (boot_now), or,
 * with err 0, that it accepts again or exited. */
void braid_boot_accept_record(const uint8_t *secret, int port, int err, double since);

#endif
