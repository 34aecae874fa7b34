/* The registry of live communicators and the entry guard of the public calls (comm.h:
 * braid_comm_check / enter / leave / enter_call), and the quarantine that keeps destroyed
 * communicators' memory so that their stale handles stay detectable. */
#include "core/comm.h"
#include "core/log.h"
#include "core/p2p.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- registry of live communicators (so a destroyed handle gets a clear error) ---------- */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct braid_comm **reg;
static size_t reg_n, reg_cap;

braid_result_t braid_comm_registry_add(struct braid_comm *c)
{
    pthread_mutex_lock(&reg_lock);
    if (reg_n == reg_cap) {
        size_t cap = reg_cap ? reg_cap * 2 : 16;
        struct braid_comm **n = realloc(reg, cap * sizeof(*n));
        if (!n) {
            pthread_mutex_unlock(&reg_lock);
            return braid_set_error(BRAID_ERR_NOMEM, "out of memory registering a communicator");
        }
        reg = n;
        reg_cap = cap;
    }
    reg[reg_n++] = c;
    pthread_mutex_unlock(&reg_lock);
    return BRAID_SUCCESS;
}

/* Removes c from the registry; 0 if it was not there (destroyed already, never created). */
int braid_comm_registry_remove(struct braid_comm *c)
{
    int found = 0;
    pthread_mutex_lock(&reg_lock);
    for (size_t i = 0; i < reg_n; i++)
        if (reg[i] == c) {
            reg[i] = reg[--reg_n];
            found = 1;
            break;
        }
    pthread_mutex_unlock(&reg_lock);
    return found;
}

static braid_result_t not_live(struct braid_comm *comm)
{
    return braid_set_error(BRAID_ERR_INVALID_USAGE,
                           "comm %p is not a live communicator (destroyed or never created)",
                           (void *)comm);
}

/* Looks comm up in the registry (and counts the call in flight when enter is set) under the
 * registry's lock: a destroy removes it under the same lock, so it sees every call counted. */
static braid_result_t lookup(struct braid_comm *comm, int enter)
{
    if (!comm) return braid_set_error(BRAID_ERR_INVALID_ARG, "comm is NULL");
    int found = 0;
    pthread_mutex_lock(&reg_lock);
    for (size_t i = 0; i < reg_n && !found; i++)
        found = reg[i] == comm;
    if (found && enter) atomic_fetch_add(&comm->inflight, 1);
    pthread_mutex_unlock(&reg_lock);
    if (found) braid_log_set_rank(comm->rank); /* this thread's log lines are about comm now */
    return found ? BRAID_SUCCESS : not_live(comm);
}

braid_result_t braid_comm_check(struct braid_comm *comm)
{
    return lookup(comm, 0);
}

braid_result_t braid_comm_enter(struct braid_comm *comm)
{
    return lookup(comm, 1);
}

void braid_comm_leave(struct braid_comm *comm)
{
    atomic_fetch_sub(&comm->inflight, 1);
}

/* A call refused at the entry inside a group counts as a call of the group, whose end reports
 * it (as an argument error). */
static braid_result_t refused(braid_result_t res, const char *what)
{
    if (braid_group_depth() > 0) braid_group_note(res, what);
    return res;
}

braid_result_t braid_comm_enter_call(struct braid_comm *comm, const char *what)
{
    braid_result_t res = braid_comm_enter(comm);
    if (res < 0) return refused(res, what);
    const char *other = NULL;
    if (atomic_compare_exchange_strong(&comm->busy, &other, what)) return BRAID_SUCCESS;
    /* Two threads in one communicator: the order of their calls is not defined, so the peers
     * cannot match them; fail the communicator rather than pair calls wrongly. */
    char msg[300];
    snprintf(msg, sizeof(msg),
             "%s called on comm %p (rank %d) while another thread is in %s on it: one thread "
             "at a time may call a communicator (the communicator is now failed)",
             what, (void *)comm, comm->rank, other);
    char why[400];
    snprintf(why, sizeof(why), "rank %d: %s", comm->rank, msg);
    braid_comm_set_error(comm, BRAID_ERR_INVALID_USAGE, "%s", msg);
    braid_comm_fail_peers(comm, BRAID_ERR_REMOTE, why);
    braid_comm_leave(comm);
    return refused(braid_set_error(BRAID_ERR_INVALID_USAGE, "%s", msg), what);
}

void braid_comm_leave_call(struct braid_comm *comm)
{
    atomic_store(&comm->busy, NULL);
    braid_comm_leave(comm);
}

/* Destroyed communicators are kept (their memory, not their resources) in a quarantine of the
 * last COMM_QUARANTINE ones, so malloc cannot hand their address to a new communicator while
 * a stale handle may still be used: such a handle keeps failing the registry lookup. */
#define COMM_QUARANTINE 64
static struct braid_comm *quarantine[COMM_QUARANTINE];
static size_t quarantine_n;

void braid_comm_registry_retire(struct braid_comm *c)
{
    pthread_mutex_lock(&reg_lock);
    struct braid_comm *old = quarantine[quarantine_n % COMM_QUARANTINE];
    quarantine[quarantine_n++ % COMM_QUARANTINE] = c;
    pthread_mutex_unlock(&reg_lock);
    free(old);
}
