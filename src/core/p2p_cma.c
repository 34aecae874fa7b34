/* Single-copy point-to-point messages between processes of one host: the probe at init and
 * the two ends of a message (see p2p_cma.h for the protocol).
 *
 * Probe. Every rank allows any process of its user to read its memory (prctl(PR_SET_PTRACER,
 * PR_SET_PTRACER_ANY), which matters only under Yama's ptrace_scope 1), then publishes its pid,
 * the address of a random word and the word's value (bootstrap allgather). Each rank reads
 * every peer's word with process_vm_readv; a peer counts as readable only when the read
 * returns that value (a pid of another pid namespace, a denied ptrace, a kernel without CMA
 * fail here). A second allgather publishes who can read whom: a sender uses the path towards
 * a receiver that read it. Everything else keeps the slot path, so mixed settings work. */

#include "core/p2p_cma.h"
#include "core/config.h"
#include "core/log.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/uio.h>
#include <unistd.h>

#ifndef PR_SET_PTRACER
#define PR_SET_PTRACER 0x59616d61
#endif
#ifndef PR_SET_PTRACER_ANY
#define PR_SET_PTRACER_ANY ((unsigned long)-1)
#endif

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
    BRAID_CHECK(braid_param_int("P2P_CMA_MIN", &min));
    BRAID_CHECK(braid_param_int("P2P_CMA_PIECE", &piece));
    BRAID_CHECK(braid_param_int("P2P_CMA_PROBE_FAIL", &fail));
    if (min < 1)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "BRAID_P2P_CMA_MIN=%lld: must be >= 1",
                               (long long)min);
    /* Pieces of 16 MiB (the default) rather than 1 MiB: sendrecv, 2 ranks, 4-64 MiB, took
     * 0.89-0.98 of the time with whole-message reads and 0.92-0.96 with 16 MiB pieces in 31- and
     * 21-round A/Bs, 1.17-1.19 in a 15-round one (session 18, perf/RESULTS.md); an abort is
     * still seen within a piece's copy (a few ms). */
    if (piece < 4096)
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "BRAID_P2P_CMA_PIECE=%lld: must be at least 4096 bytes",
                               (long long)piece);
    braid_p2p_cma_t *cma = calloc(1, sizeof(*cma));
    probe_t *all = calloc((size_t)n, sizeof(*all));
    uint8_t *ok = calloc((size_t)n * (size_t)n, 1);
    braid_result_t res = BRAID_SUCCESS;
    if (!cma || !all || !ok || !(cma->send_ok = calloc((size_t)n, 1)) ||
        !(cma->recv_ok = calloc((size_t)n, 1)) ||
        !(cma->pid = calloc((size_t)n, sizeof(int32_t)))) {
        res = braid_set_error(BRAID_ERR_NOMEM, "out of memory for the CMA probe of %d ranks", n);
        goto out;
    }
    cma->min_bytes = (size_t)min;
    cma->piece = (size_t)piece;
    if (getrandom(&cma->probe, sizeof(cma->probe), 0) != sizeof(cma->probe))
        cma->probe = braid_now_ns() * 0x9e3779b97f4a7c15ull;
    if (on && prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) != 0)
        braid_debug(INIT, "prctl(PR_SET_PTRACER) failed: %m (no Yama: harmless)");
    probe_t mine = {.pid = (int32_t)getpid(),
                    .on = (uint32_t)(on != 0),
                    .addr = (uint64_t)(uintptr_t)&cma->probe,
                    .value = cma->probe};
    BRAID_CHECK_GOTO(braid_boot_allgather(comm->boot, &mine, all, sizeof(mine)), res, out);
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
                          send[p]->ops->peer_check && ok[(size_t)p * (size_t)n + (size_t)me];
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
    free(cma->send_ok);
    free(cma->recv_ok);
    free(cma->pid);
    free(cma);
}

int braid_p2p_cma_use(const braid_p2p_cma_t *cma, const braid_conn_t *c, const braid_p2p_op_t *op,
                      size_t bytes)
{
    /* reduce_scatterv's receiver folds chunk by chunk (step_reduce): it keeps the slots. */
    return cma && bytes >= cma->min_bytes && cma->send_ok[op->peer] &&
           c->slot_size >= sizeof(braid_cma_desc_t) && op->coll != BRAID_COLL_REDUCE_SCATTERV;
}

braid_result_t braid_p2p_cma_post(braid_conn_t *c, void *slot, braid_msg_hdr_t *h, const void *src,
                                  size_t bytes)
{
    braid_cma_desc_t d = {.addr = (uint64_t)(uintptr_t)src,
                          .bytes = bytes,
                          .pid = (int32_t)getpid(),
                          .magic = BRAID_CMA_MAGIC};
    memcpy(slot, &d, sizeof(d));
    h->bytes = (uint32_t)sizeof(d);
    h->flags |= BRAID_MSG_CMA;
    return c->ops->send_post(c, h);
}

braid_result_t braid_p2p_cma_desc(const braid_p2p_cma_t *cma, int peer, const braid_msg_hdr_t *h,
                                  const void *buf, uint64_t *bytes_p)
{
    braid_cma_desc_t d;
    if (h->bytes != sizeof(d))
        return braid_set_error(BRAID_ERR_INTERNAL, "rank %d sent a %u-byte CMA descriptor", peer,
                               h->bytes);
    memcpy(&d, buf, sizeof(d));
    if (d.magic != BRAID_CMA_MAGIC || !cma || !cma->recv_ok[peer] || d.pid != cma->pid[peer])
        return braid_set_error(BRAID_ERR_INTERNAL,
                               "rank %d sent a CMA descriptor this rank cannot use (pid %d, "
                               "probe %s)",
                               peer, d.pid, cma && cma->recv_ok[peer] ? "passed" : "failed");
    *bytes_p = d.bytes;
    return BRAID_SUCCESS;
}

braid_result_t braid_p2p_cma_pull(braid_p2p_cma_t *cma, braid_conn_t *c, const void *buf, char *dst,
                                  size_t total, size_t *off_p)
{
    braid_cma_desc_t d;
    memcpy(&d, buf, sizeof(d)); /* read again from the slot: checked against total again */
    if (d.bytes != total || *off_p > total)
        return braid_set_error(BRAID_ERR_INTERNAL,
                               "rank %d changed its CMA descriptor (%llu bytes, expected %zu)",
                               c->peer, (unsigned long long)d.bytes, total);
    size_t off = *off_p, nb = (size_t)d.bytes - off;
    if (nb > cma->piece) nb = cma->piece;
    if (nb) {
        struct iovec l = {.iov_base = dst + off, .iov_len = nb};
        struct iovec r = {.iov_base = (void *)(uintptr_t)(d.addr + off), .iov_len = nb};
        ssize_t got = process_vm_readv(d.pid, &l, 1, &r, 1, 0);
        if (got != (ssize_t)nb) {
            int err = got < 0 ? errno : EFAULT;
            /* The sender's own failure first (a mismatch it reported before it exited), then
             * a dead sender (ESRCH: no memory left, also as a zombie) is named as such. */
            BRAID_CHECK(c->ops->peer_check(c));
            if (err == ESRCH || (kill(d.pid, 0) != 0 && errno == ESRCH))
                return braid_set_error(BRAID_ERR_REMOTE,
                                       "rank %d (pid %d, same host) died while this rank read "
                                       "its %llu-byte message",
                                       c->peer, d.pid, (unsigned long long)d.bytes);
            return braid_set_error(BRAID_ERR_REMOTE,
                                   "cannot read rank %d's buffer (pid %d, %zu B at offset %zu of "
                                   "%llu): %s",
                                   c->peer, d.pid, nb, off, (unsigned long long)d.bytes,
                                   strerror(err));
        }
        *off_p = off + nb;
        atomic_fetch_add_explicit(&cma->pulled, nb, memory_order_relaxed);
    }
    if (*off_p < d.bytes) return BRAID_SUCCESS;
    /* A sender that failed (abort, timeout) while this rank read may have reused its buffer:
     * the data counts only if it still had not failed after the last read. */
    BRAID_CHECK(c->ops->peer_check(c));
    cma->pulls++;
    return BRAID_SUCCESS;
}
