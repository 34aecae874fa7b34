/* Single-copy point-to-point messages between processes of one host: the probe at init and
 * the two ends of a message (see p2p_cma.h for the protocol).
 *
 * Probe. A rank with a peer on its host (a shm connection) and CMA not off allows any process of
 * its user to read its memory (prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY), which matters only
 * under Yama's ptrace_scope 1; held per process, see ptracer_hold), then publishes its pid, the
 * address of a random word and the word's value (bootstrap allgather). Each rank reads
 * every peer's word with process_vm_readv; a peer counts as readable only when the read
 * returns that value (a pid of another pid namespace, a denied ptrace, a kernel without CMA
 * fail here). A second allgather publishes who can read whom: a sender uses the path towards
 * a receiver that read it. Everything else keeps the slot path, so mixed settings work. */

#include "core/p2p_cma.h"
#include "core/comm.h"
#include "core/p2p_impl.h"
#include "core/yield.h"
#include "core/config.h"
#include "core/log.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#ifndef PR_SET_PTRACER
#define PR_SET_PTRACER 0x59616d61
#endif
#ifndef PR_SET_PTRACER_ANY
#define PR_SET_PTRACER_ANY ((unsigned long)-1)
#endif

/* PR_SET_PTRACER_ANY is per process: set when the first communicator of the process may use
 * CMA (a peer on its host over shm), counted while communicators use it, and never reset: the
 * setting is the process's, other libraries in it set it too (Open MPI's vader, UCX's CMA
 * transport) and the earlier value cannot be read back (there is no PR_GET_PTRACER), so a reset
 * would take their single copy away; Open MPI does not reset it either. The count belongs to
 * the process that took it: a child forked meanwhile inherits the count but not the setting,
 * and starts over. */
static pthread_mutex_t ptracer_lock = PTHREAD_MUTEX_INITIALIZER;
static int ptracer_refs;
static pid_t ptracer_pid;

static void ptracer_hold(void)
{
    pthread_mutex_lock(&ptracer_lock);
    if (ptracer_pid != getpid()) {
        ptracer_pid = getpid();
        ptracer_refs = 0;
    }
    if (ptracer_refs++ == 0 && prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) != 0)
        braid_debug(INIT, "prctl(PR_SET_PTRACER) failed: %m (no Yama: harmless)");
    pthread_mutex_unlock(&ptracer_lock);
}

static void ptracer_drop(void)
{
    pthread_mutex_lock(&ptracer_lock);
    if (ptracer_pid == getpid() && ptracer_refs > 0) ptracer_refs--; /* the setting stays */
    pthread_mutex_unlock(&ptracer_lock);
}

int braid_p2p_cma_ptracer_refs(void)
{
    pthread_mutex_lock(&ptracer_lock);
    int k = ptracer_pid == getpid() ? ptracer_refs : 0;
    pthread_mutex_unlock(&ptracer_lock);
    return k;
}

typedef struct {
    int32_t pid;
    uint32_t on; /* 0: this rank does not take part (BRAID_P2P_CMA=0) */
    uint64_t addr, value;
} probe_t;

static int probe_read(int pid, uint64_t addr, uint64_t value)
{
    uint64_t got = ~value;
    struct iovec l = {.iov_base = &got, .iov_len = sizeof(got)};
    struct iovec r = {.iov_base = (void *)(uintptr_t)addr, .iov_len = sizeof(got)};
    if (process_vm_readv(pid, &l, 1, &r, 1, 0) != (ssize_t)sizeof(got)) return 0;
    if (got == value) return 1;
    errno = ESRCH; /* another process answered to that pid (another pid namespace) */
    return 0;
}

braid_result_t braid_p2p_cma_connect(struct braid_comm *comm, braid_conn_t **send,
                                     braid_conn_t **recv, braid_p2p_cma_t **cma_p)
{
    int n = comm->nranks, me = comm->rank;
    const char *mode = braid_param_str("P2P_CMA");
    int on;
    if (!strcmp(mode, "0"))
        on = 0;
    else if (!strcmp(mode, "1"))
        on = 2; /* forced: a peer that cannot be read is a warning */
    else if (!strcasecmp(mode, "auto"))
        on = 1;
    else
        return braid_set_error(BRAID_ERR_INVALID_ARG, "BRAID_P2P_CMA=%s: expected 0, 1 or auto",
                               mode);
    /* auto is on with more ranks than cpus too. A CMA send completes only once its receiver
     * has read it, and a receiver that is not running holds its sender: below 1 MiB the slots
     * were faster there (sendrecv, 4 ranks on 2 cpus, 256 KiB-1 MiB: 0.56-0.79 of the CMA time,
     * session 10), but from BRAID_P2P_CMA_MIN (4 MiB) the single copy is at least as fast
     * (session 10: slots 0.91-0.93 of its time; session 13: CMA 0.28-0.54 of the slots' time for
     * sendrecv at 4-64 MiB, 0.57-0.68 for all-to-all at 16-64 MiB; perf/RESULTS.md). */
    int64_t min, fail, piece;
    int help;
    BRAID_CHECK(braid_param_int("P2P_CMA_MIN", &min));
    BRAID_CHECK(braid_param_switch("P2P_CMA_HELP", &help));
    BRAID_CHECK(braid_param_int("P2P_CMA_PIECE", &piece));
    BRAID_CHECK(braid_param_int("P2P_CMA_PROBE_FAIL", &fail));
    if (min < 1)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "BRAID_P2P_CMA_MIN=%lld: must be >= 1",
                               (long long)min);
    /* Senders help where ranks share cpus: with 4 ranks bound two per cpu a receiver whose cpu
     * is busy held its sender while the other cpu idled (sendrecv 16 MiB: 4.96 ms without help,
     * 4.23 with, Open MPI's unbound ranks 4.27; 5 rounds). With a cpu per rank both ends are
     * busy with their own receives, and help cost time (all-to-all, 2 ranks, 16 MiB: 0.98 ms
     * without, 1.24 with; session 21, perf/RESULTS.md). */
    if (help == 2) help = comm->oversubscribed;
    /* Pieces of 16 MiB rather than 1 MiB for a receiver alone: sendrecv, 2 ranks, 4-64 MiB,
     * took 0.89-0.98 of the time with whole-message reads and 0.92-0.96 with 16 MiB pieces in
     * 31- and 21-round A/Bs, 1.17-1.19 in a 15-round one (session 18, perf/RESULTS.md); an abort
     * is still seen within a piece's copy (a few ms). Where senders help, 2 MiB, so that both
     * ends share a message of a few MiB (sendrecv, 4 ranks, 16 MiB: 4.96 ms with 16 MiB pieces
     * and no help, 4.00 / 4.23 with help and 4 / 2 MiB pieces; 4 MiB: 1.10 / 1.02; all-to-all
     * 16 MiB: 3.85 / 3.48; session 21). */
    if (!piece) piece = help ? 2 << 20 : 16 << 20;
    if (piece < 4096)
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "BRAID_P2P_CMA_PIECE=%lld: must be 0 (automatic) or at least 4096 "
                               "bytes",
                               (long long)piece);
    braid_p2p_cma_t *cma = calloc(1, sizeof(*cma));
    probe_t *all = calloc((size_t)n, sizeof(*all));
    uint8_t *ok = calloc((size_t)n * (size_t)n, 1);
    braid_result_t res = BRAID_SUCCESS;
    if (!cma || !all || !ok || !(cma->send_ok = calloc((size_t)n, 1)) ||
        !(cma->recv_ok = calloc((size_t)n, 1)) ||
        !(cma->pid = calloc((size_t)n, sizeof(int32_t))) ||
        !(cma->picked = calloc((size_t)n, sizeof(uint64_t))) ||
        !(cma->rx_avg = calloc((size_t)n * 2, sizeof(double))) ||
        !(cma->rx_n = calloc((size_t)n * 2, sizeof(uint32_t))) ||
        !(cma->tx_avg = calloc((size_t)n * 2, sizeof(double))) ||
        !(cma->tx_n = calloc((size_t)n * 2, sizeof(uint32_t)))) {
        res = braid_set_error(BRAID_ERR_NOMEM, "out of memory for the CMA probe of %d ranks", n);
        goto out;
    }
    cma->min_bytes = (size_t)min;
    cma->measured = on == 1;
    cma->piece = (size_t)piece;
    cma->help = help != 0;
    if (getrandom(&cma->probe, sizeof(cma->probe), 0) != sizeof(cma->probe))
        cma->probe = braid_now_ns() * 0x9e3779b97f4a7c15ull;
    /* Only a peer on this host (shm: the transports that report releases) ever reads or
     * writes this process's memory; the permission must be there before the allgather, after
     * which those peers probe. */
    int local = 0;
    for (int p = 0; p < n; p++)
        local |= p != me && ((recv[p] && recv[p]->ops->send_released) ||
                             (send[p] && send[p]->ops->send_released));
    if (on && local) {
        ptracer_hold();
        cma->ptracer = 1;
    }
    probe_t mine = {.pid = (int32_t)getpid(),
                    .on = (uint32_t)(on != 0),
                    .addr = (uint64_t)(uintptr_t)&cma->probe,
                    .value = cma->probe};
    BRAID_CHECK_GOTO(braid_boot_allgather(comm->boot, &mine, all, sizeof(mine)), res, out);
    if (cma->ptracer) { /* no peer of this host takes part: not counted (the setting stays) */
        int used = 0;
        for (int p = 0; p < n; p++)
            used |= p != me && all[p].on &&
                    ((recv[p] && recv[p]->ops->send_released) ||
                     (send[p] && send[p]->ops->send_released));
        if (!used) {
            ptracer_drop();
            cma->ptracer = 0;
        }
    }
    /* Only peers over a transport that reports releases (shm: the same host). */
    for (int p = 0; p < n; p++) {
        cma->pid[p] = all[p].pid;
        if (p == me || !on || !all[p].on || !recv[p] || !recv[p]->ops->send_released) continue;
        cma->recv_ok[p] = !fail && probe_read(all[p].pid, all[p].addr, all[p].value);
        if (!cma->recv_ok[p]) {
            braid_log_level_t lvl = on == 2 ? BRAID_LOG_WARN : BRAID_LOG_INFO;
            const char *why = fail ? "BRAID_P2P_CMA_PROBE_FAIL is set" : strerror(errno);
            if (braid_log_enabled(lvl, BRAID_SUBSYS_INIT))
                braid_log_msg(lvl, BRAID_SUBSYS_INIT, __FILE__, __LINE__,
                              "rank %d cannot read rank %d's memory (pid %d: %s): its messages "
                              "to this rank use the shared-memory slots",
                              me, p, all[p].pid, why);
        }
    }
    BRAID_CHECK_GOTO(braid_boot_allgather(comm->boot, cma->recv_ok, ok, (size_t)n), res, out);
    for (int p = 0; p < n; p++)
        cma->send_ok[p] = p != me && on && send[p] && send[p]->ops->send_released &&
                          send[p]->ops->peer_check && send[p]->ops->peer_ended &&
                          ok[(size_t)p * (size_t)n + (size_t)me];
    for (int p = 0; p < n; p++)
        if (p != me)
            braid_debug(INIT, "rank %d -> rank %d: single copy (CMA) %s", me, p,
                        cma->send_ok[p] ? "on" : "off");
out:
    free(all);
    free(ok);
    if (res != BRAID_SUCCESS) {
        braid_p2p_cma_free(cma);
        return res;
    }
    *cma_p = cma;
    return BRAID_SUCCESS;
}

void braid_p2p_cma_free(braid_p2p_cma_t *cma)
{
    if (!cma) return;
    if (cma->ptracer) ptracer_drop();
    free(cma->send_ok);
    free(cma->recv_ok);
    free(cma->pid);
    free(cma->picked);
    free(cma->rx_avg);
    free(cma->rx_n);
    free(cma->tx_avg);
    free(cma->tx_n);
    free(cma);
}

int braid_p2p_cma_pick(uint64_t sent, uint64_t cost_slots, uint64_t cost_cma, uint32_t samples)
{
    if (!cost_slots || !cost_cma)
        return sent >= BRAID_CMA_PICK_TRIAL ? cost_cma || !cost_slots : !(sent & 1);
    int best = cost_cma <= cost_slots;
    /* One message of the other path in `every`, so that it costs about 2% of the time: the
     * ratio r of the two costs makes that message take r - 1 messages' time more. While a path
     * has few samples (one of them may have met a preemption or cold pages) at most 256. */
    uint64_t lo = best ? cost_cma : cost_slots, hi = best ? cost_slots : cost_cma;
    double every = ((double)hi / (double)lo - 1.0) / BRAID_CMA_PICK_BUDGET;
    if (every < BRAID_CMA_PICK_EXPLORE) every = BRAID_CMA_PICK_EXPLORE;
    if (samples < BRAID_CMA_PICK_SETTLE && every > BRAID_CMA_PICK_EXPLORE_EARLY)
        every = BRAID_CMA_PICK_EXPLORE_EARLY;
    if (every > BRAID_CMA_PICK_EXPLORE_MAX) every = BRAID_CMA_PICK_EXPLORE_MAX;
    uint64_t e = (uint64_t)every;
    return sent % e == e - 1 ? !best : best;
}

int braid_p2p_cma_use(braid_p2p_cma_t *cma, const braid_conn_t *c, braid_p2p_op_t *op, size_t bytes)
{
    if (op->cma_pick) return op->cma_pick == 2;
    /* reduce_scatterv's receiver folds chunk by chunk (step_reduce): it keeps the slots. */
    int can = cma && bytes >= cma->min_bytes && cma->send_ok[op->peer] &&
              c->slot_size >= sizeof(braid_cma_desc_t) && op->coll != BRAID_COLL_REDUCE_SCATTERV;
    int use = can;
    if (can && cma->measured) {
        uint64_t cost[2];
        braid_p2p_cma_costs(cma, c, op->peer, cost);
        const uint32_t *tn = &cma->tx_n[(size_t)op->peer * 2];
        use = braid_p2p_cma_pick(cma->picked[op->peer]++, cost[0], cost[1],
                                 tn[0] < tn[1] ? tn[0] : tn[1]);
        op->timed = 1;
    }
    op->cma_pick = use ? 2 : 1;
    return use;
}

/* Both ends' copy time per byte, each end's moving average (ps per byte): the slots are the
 * sender's copies in and the receiver's copies out, the single copy the receiver's reads and
 * the sender's writes where it helps (none: 0). Measured once the receiver reported the path
 * (and the sender timed the slots' copies in). */
void braid_p2p_cma_costs(const braid_p2p_cma_t *cma, const braid_conn_t *c, int peer,
                         uint64_t cost[2])
{
    for (int k = 0; k < 2; k++) {
        size_t i = (size_t)peer * 2 + (size_t)k;
        uint64_t rx = braid_shm_msg_cost_get(c, k);
        int tx_ok = k == 1 || cma->tx_n[i] > 1;
        cost[k] = rx && tx_ok ? rx + (uint64_t)(cma->tx_avg[i] * 1000.0) : 0;
    }
}

/* A path's next sample (ns per byte) into its average, n samples counted before it: the least
 * of the first BRAID_CMA_PICK_SEED (a copy that met a preemption or pages touched for the
 * first time, a slot ring's pages on its first laps, must not stand for the path), then a
 * moving average of samples clipped at 4x the larger of it and floor (a helping sender's
 * share may be 0: then the receiver's figure for the path bounds it). */
static double fold(double avg, uint32_t n, size_t bytes, uint64_t ns, double floor)
{
    double v = (double)ns / (double)bytes;
    if (n == 0) return v;
    if (n < BRAID_CMA_PICK_SEED) return avg < v ? avg : v;
    double cap = 4 * (avg > floor ? avg : floor);
    if (cap > 0 && v > cap) v = cap;
    return 0.75 * avg + 0.25 * v;
}

void braid_p2p_cma_tx_done(braid_p2p_cma_t *cma, const braid_conn_t *c, int peer, int cma_path,
                           size_t bytes, uint64_t ns)
{
    size_t k = (size_t)peer * 2 + (cma_path != 0);
    if (bytes && cma->tx_n[k]++ > 0)
        cma->tx_avg[k] = fold(cma->tx_avg[k], cma->tx_n[k] - 2, bytes, ns,
                              (double)braid_shm_msg_cost_get(c, cma_path) / 1000.0);
}

void braid_p2p_cma_rx_done(braid_p2p_cma_t *cma, braid_conn_t *c, int peer, int cma_path,
                           size_t bytes, uint64_t ns)
{
    size_t k = (size_t)peer * 2 + (cma_path != 0);
    if (!bytes || cma->rx_n[k]++ == 0) return;
    if (cma->test_scale[cma_path != 0] > 0)
        ns = (uint64_t)((double)ns * cma->test_scale[cma_path != 0]);
    cma->rx_avg[k] = fold(cma->rx_avg[k], cma->rx_n[k] - 2, bytes, ns, 0);
    uint64_t ps = (uint64_t)(cma->rx_avg[k] * 1000.0);
    braid_shm_msg_cost_set(c, cma_path, ps ? ps : 1);
}

braid_result_t braid_p2p_cma_post(braid_conn_t *c, void *slot, braid_msg_hdr_t *h, const void *src,
                                  size_t bytes)
{
    if ((uintptr_t)slot % _Alignof(braid_cma_desc_t))
        return braid_set_error(BRAID_ERR_INTERNAL, "CMA descriptor slot %p is not aligned", slot);
    braid_cma_desc_t *d = slot;
    d->addr = (uint64_t)(uintptr_t)src;
    d->bytes = bytes;
    d->pid = (int32_t)getpid();
    d->magic = BRAID_CMA_MAGIC;
    atomic_store_explicit(&d->dst, 0, memory_order_relaxed);
    atomic_store_explicit(&d->claim, 0, memory_order_relaxed);
    atomic_store_explicit(&d->done, 0, memory_order_relaxed);
    h->bytes = (uint32_t)sizeof(*d);
    h->flags |= BRAID_MSG_CMA;
    return c->ops->send_post(c, h); /* publishes the descriptor (release) */
}

braid_result_t braid_p2p_cma_desc(const braid_p2p_cma_t *cma, int peer, const braid_msg_hdr_t *h,
                                  const void *buf, uint64_t *bytes_p)
{
    const braid_cma_desc_t *d = buf;
    if (h->bytes != sizeof(*d) || (uintptr_t)buf % _Alignof(braid_cma_desc_t))
        return braid_set_error(BRAID_ERR_INTERNAL, "rank %d sent a %u-byte CMA descriptor at %p",
                               peer, h->bytes, buf);
    if (d->magic != BRAID_CMA_MAGIC || !cma || !cma->recv_ok[peer] || d->pid != cma->pid[peer])
        return braid_set_error(BRAID_ERR_INTERNAL,
                               "rank %d sent a CMA descriptor this rank cannot use (pid %d, "
                               "probe %s)",
                               peer, d->pid, cma && cma->recv_ok[peer] ? "passed" : "failed");
    *bytes_p = d->bytes;
    return BRAID_SUCCESS;
}

/* Takes the next piece of d: its offset in *off_p and size in *nb_p, or 0 when none is left. */
static int claim_piece(const braid_p2p_cma_t *cma, braid_cma_desc_t *d, uint64_t *off_p,
                       size_t *nb_p)
{
    if (atomic_load_explicit(&d->claim, memory_order_relaxed) >= d->bytes) return 0;
    uint64_t off = atomic_fetch_add_explicit(&d->claim, cma->piece, memory_order_relaxed);
    if (off >= d->bytes) return 0;
    *off_p = off;
    *nb_p = d->bytes - off < cma->piece ? (size_t)(d->bytes - off) : cma->piece;
    return 1;
}

/* The receiver, every piece claimed: waits for the sender to finish the ones it copies. */
static braid_result_t wait_done(struct braid_comm *comm, braid_conn_t *c, braid_cma_desc_t *d)
{
    uint64_t t0 = 0, next_check = 0, timeout_ns = braid_timeout_ns(comm->timeout_s);
    for (unsigned i = 0; atomic_load_explicit(&d->done, memory_order_acquire) < d->bytes; i++) {
        if (i < 256) {
            braid_cpu_relax();
            continue;
        }
        uint64_t now = braid_now_ns();
        if (!t0) t0 = next_check = now;
        if (atomic_load_explicit(&comm->aborted, memory_order_relaxed))
            return braid_set_error(BRAID_ERR_ABORTED, "%s", braid_comm_abort_reason(comm));
        if (now >= next_check) {
            BRAID_CHECK(c->ops->peer_check(c));
            next_check = now + 1000000ull;
        }
        if (now - t0 > timeout_ns)
            return braid_set_error(BRAID_ERR_TIMEOUT,
                                   "timed out after %.1f s waiting for rank %d to finish copying "
                                   "its %llu-byte message; rank %d may be hung",
                                   comm->timeout_s, c->peer, (unsigned long long)d->bytes, c->peer);
        sched_yield(); /* a sender that shares this cpu finishes its piece */
    }
    return BRAID_SUCCESS;
}

braid_result_t braid_p2p_cma_pull(struct braid_comm *comm, braid_conn_t *c, void *buf, char *dst,
                                  size_t total, size_t *off_p, uint64_t *copy_ns)
{
    braid_p2p_cma_t *cma = comm->p2p->cma;
    braid_cma_desc_t *d = buf;
    if (d->bytes != total || *off_p >= total)
        return braid_set_error(BRAID_ERR_INTERNAL,
                               "rank %d changed its CMA descriptor (%llu bytes, expected %zu)",
                               c->peer, (unsigned long long)d->bytes, total);
    if (!atomic_load_explicit(&d->dst, memory_order_relaxed))
        atomic_store_explicit(&d->dst, (uint64_t)(uintptr_t)dst, memory_order_release);
    if (cma->test_leave_first) { /* braid_p2p_cma_test_stall */
        if (!atomic_load_explicit(&d->claim, memory_order_relaxed)) return BRAID_SUCCESS;
        cma->test_leave_first = 0;
    }
    uint64_t off;
    size_t nb;
    if (claim_piece(cma, d, &off, &nb)) {
        struct iovec l = {.iov_base = dst + off, .iov_len = nb};
        struct iovec r = {.iov_base = (void *)(uintptr_t)(d->addr + off), .iov_len = nb};
        uint64_t t0 = copy_ns ? braid_now_ns() : 0;
        ssize_t got = process_vm_readv(d->pid, &l, 1, &r, 1, 0);
        if (copy_ns) *copy_ns += braid_now_ns() - t0;
        if (got != (ssize_t)nb) {
            int err = got < 0 ? errno : EFAULT;
            /* Accounted as finished: the revoke of the failed receive waits for the sender's
             * pieces only. */
            atomic_fetch_add_explicit(&d->done, nb, memory_order_relaxed);
            /* The sender's own failure first (a mismatch it reported before it exited), then
             * a dead sender (ESRCH: no memory left, also as a zombie) is named as such. */
            BRAID_CHECK(c->ops->peer_check(c));
            if (err == ESRCH || (kill(d->pid, 0) != 0 && errno == ESRCH))
                return braid_set_error(BRAID_ERR_REMOTE,
                                       "rank %d (pid %d, same host) died while this rank read "
                                       "its %llu-byte message",
                                       c->peer, d->pid, (unsigned long long)d->bytes);
            return braid_set_error(BRAID_ERR_REMOTE,
                                   "cannot read rank %d's buffer (pid %d, %zu B at offset %llu "
                                   "of %llu): %s",
                                   c->peer, d->pid, nb, (unsigned long long)off,
                                   (unsigned long long)d->bytes, strerror(err));
        }
        atomic_fetch_add_explicit(&d->done, nb, memory_order_relaxed);
        atomic_fetch_add_explicit(&cma->pulled, nb, memory_order_relaxed);
        return BRAID_SUCCESS;
    }
    BRAID_CHECK(wait_done(comm, c, d));
    /* A sender that failed (abort, timeout) while this rank read may have reused its buffer:
     * the data counts only if it still had not failed after the last piece. */
    BRAID_CHECK(c->ops->peer_check(c));
    if (atomic_load_explicit(&d->done, memory_order_acquire) & BRAID_CMA_DONE_FAILED)
        return braid_set_error(BRAID_ERR_REMOTE,
                               "rank %d (pid %d) could not write its part of its %llu-byte "
                               "message into this rank's buffer",
                               c->peer, d->pid, (unsigned long long)d->bytes);
    cma->pulls++;
    *off_p = total;
    return BRAID_SUCCESS;
}

void braid_p2p_cma_revoke(struct braid_comm *comm, braid_conn_t *c, void *buf)
{
    braid_cma_desc_t *d = buf;
    uint64_t claimed = atomic_exchange_explicit(&d->claim, UINT64_MAX / 2, memory_order_acq_rel);
    if (claimed > d->bytes) claimed = d->bytes;
    uint64_t t0 = braid_now_ns(), timeout_ns = braid_timeout_ns(comm->timeout_s);
    long pause_ns = 20000;
    /* Every piece claimed is finished (a failed write counts too, p2p_cma.h), whatever the
     * sender's failure flags say: a sender whose communicator failed (an abort from another
     * of its threads) may still be inside process_vm_writev. Only its process's end stops
     * the writes; a sender hung in a piece is given the timeout, and an abort of this
     * communicator (which must end the wait) a second more than a piece takes. */
    while (atomic_load_explicit(&d->done, memory_order_acquire) < claimed) {
        if (c->ops->peer_ended(c)) return;
        uint64_t idle = braid_now_ns() - t0, bound = timeout_ns;
        if (atomic_load_explicit(&comm->aborted, memory_order_relaxed) && bound > 1000000000ull)
            bound = 1000000000ull;
        if (idle > bound) {
            braid_warn(SHM,
                       "rank %d: rank %d (pid %d) has not finished writing its pieces of a "
                       "%llu-byte message into this rank's buffer in %.1f s; it may still write "
                       "there after the failed receive returned",
                       comm->rank, c->peer, d->pid, (unsigned long long)d->bytes,
                       (double)idle / 1e9);
            return;
        }
        struct timespec ts = {0, pause_ns};
        nanosleep(&ts, NULL);
        if (pause_ns < 1000000) pause_ns *= 2;
    }
}

braid_result_t braid_p2p_cma_push(braid_p2p_cma_t *cma, braid_conn_t *c, void *slot,
                                  const char *src, int *moved)
{
    braid_cma_desc_t *d = slot;
    uint64_t dst = atomic_load_explicit(&d->dst, memory_order_acquire);
    uint64_t off;
    size_t nb;
    if (!cma->help || !dst || !cma->recv_ok[c->peer] || !claim_piece(cma, d, &off, &nb))
        return BRAID_SUCCESS;
    if (cma->test_stall_ns) {
        uint64_t ns = cma->test_stall_ns;
        cma->test_stall_ns = 0;
        atomic_store_explicit(&cma->test_stalled, 1, memory_order_release);
        struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
    /* The pid is the one the receiver had at init: once that process has ended the pid may
     * belong to another process of this user, which must not get the data (its pidfd tells). */
    int ended = c->ops->peer_ended(c);
    ssize_t got = -1;
    int err = ESRCH;
    if (!ended) {
        struct iovec l = {.iov_base = (void *)(src + off), .iov_len = nb};
        struct iovec r = {.iov_base = (void *)(uintptr_t)(dst + off), .iov_len = nb};
        got = process_vm_writev(cma->pid[c->peer], &l, 1, &r, 1, 0);
        err = got < 0 ? errno : EFAULT;
    }
    if (got != (ssize_t)nb) {
        /* Accounted as finished but failed, so that a receiver waiting for its pieces (its
         * wait_done, or the revoke of its failed receive) is not held to its timeout, and does
         * not take the message for complete. */
        atomic_fetch_add_explicit(&d->done, nb + BRAID_CMA_DONE_FAILED, memory_order_release);
        BRAID_CHECK(c->ops->peer_check(c));
        return braid_set_error(BRAID_ERR_REMOTE,
                               "cannot write rank %d's buffer (pid %d, %zu B at offset %llu of "
                               "%llu): %s",
                               c->peer, cma->pid[c->peer], nb, (unsigned long long)off,
                               (unsigned long long)d->bytes,
                               err == ESRCH ? "the rank died" : strerror(err));
    }
    /* Release: the receiver's acquire load of done sees the bytes the kernel wrote. */
    atomic_fetch_add_explicit(&d->done, nb, memory_order_release);
    atomic_fetch_add_explicit(&cma->pushed, nb, memory_order_relaxed);
    *moved = 1;
    return BRAID_SUCCESS;
}
