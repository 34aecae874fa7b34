/* Transport conformance cases (see conformance.h). Connections are made here the way
 * src/core/comm.c makes them (recv_setup, a bootstrap allgather of the info blobs,
 * send_connect, a barrier, recv_accept), on channel ids no communicator uses, so the
 * communicator's own rings stay untouched. */
#include "conformance.h"
#include "mp.h"

#include "core/bootstrap.h"
#include "core/comm.h"
#include "core/log.h"
#include "transport/rdma.h"
#include "transport/transport.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *const conf_cases[] = {"data",  "fail",    "failrecv", "failquiet", "kill",
                                  "close", "timeout", "abort",    "register",  NULL};

#define FAILF(rank, ...)                                                                           \
    do {                                                                                           \
        fprintf(stderr, "rank %d: %s:%d: ", (rank), __FILE__, __LINE__);                           \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        return 1;                                                                                  \
    } while (0)
/* CHECK and OK: tests/common/mp.h's MP_CHECK and MP_OK (this file is also built into the
 * standalone braid_conformance program, which uses only those header macros). */
#define CHECK MP_CHECK
#define OK MP_OK

typedef struct {
    struct braid_comm *comm;
    const braid_transport_t *t;
    int rank, peer;
    braid_conn_t *send, *recv;
} pair_t;

typedef struct {
    uint32_t len;
    uint8_t info[BRAID_CONN_INFO_BYTES];
} blob_t;

static double now_s(void)
{
    return (double)braid_now_ns() * 1e-9;
}

/* A send and a receive connection with the peer on `channel`, slots of `slot` bytes x nslots
 * (both ends size their FIFOs from the communicator at setup, as for p2p connections). */
static int pair_open(pair_t *p, braid_comm_t comm, const char *tname, int channel, size_t slot,
                     int nslots)
{
    memset(p, 0, sizeof(*p));
    p->comm = comm;
    p->rank = comm->rank;
    p->peer = 1 - comm->rank;
    p->t = braid_transport_by_name(tname);
    CHECK(p->rank, p->t != NULL, "transport %s is not built in", tname);
    size_t saved_chunk = comm->chunk_bytes;
    int saved_slots = comm->nslots;
    comm->chunk_bytes = slot;
    comm->nslots = nslots;
    blob_t mine = {0}, all[2];
    size_t len = BRAID_CONN_INFO_BYTES;
    braid_result_t r = p->t->recv_setup(comm, p->peer, channel, &p->recv, mine.info, &len);
    mine.len = (uint32_t)len;
    if (r == BRAID_SUCCESS) r = braid_boot_allgather(comm->boot, &mine, all, sizeof(mine));
    if (r == BRAID_SUCCESS)
        r = p->t->send_connect(comm, p->peer, channel, all[p->peer].info, all[p->peer].len,
                               &p->send);
    comm->chunk_bytes = saved_chunk;
    comm->nslots = saved_slots;
    if (r == BRAID_SUCCESS) r = braid_boot_barrier(comm->boot);
    if (r == BRAID_SUCCESS) r = p->recv->ops->recv_accept(p->recv);
    OK(p->rank, r);
    CHECK(p->rank, p->send->slot_size == slot && p->recv->slot_size == slot,
          "slot sizes %zu/%zu, asked %zu", p->send->slot_size, p->recv->slot_size, slot);
    CHECK(p->rank,
          p->send->peer == p->peer && p->recv->peer == p->peer && p->send->is_send &&
              !p->recv->is_send,
          "connection fields");
    return 0;
}

static void pair_close(pair_t *p)
{
    if (p->send) p->send->ops->close(p->send);
    if (p->recv) p->recv->ops->close(p->recv);
    p->send = p->recv = NULL;
}

/* ---- data ---------------------------------------------------------------------------------- */

static uint8_t pattern(int rank, uint32_t idx, size_t j)
{
    return (uint8_t)(rank * 131 + idx * 31 + j * 7 + (j >> 8) * 3 + 1);
}

static uint32_t msg_bytes(uint32_t idx, size_t slot)
{
    size_t sizes[] = {0, 1, 7, 63, 64, 65, 1001, slot - 1, slot, slot / 2 + 3, 2, slot};
    size_t s = sizes[idx % (sizeof(sizes) / sizeof(sizes[0]))];
    return (uint32_t)(s > slot ? slot : s);
}

static void fill_hdr(braid_msg_hdr_t *h, int rank, uint32_t idx, size_t slot)
{
    memset(h, 0, sizeof(*h));
    h->bytes = msg_bytes(idx, slot);
    h->seq = idx * 3 + 1;
    h->coll = (uint8_t)(1 + idx % 6);
    h->dtype = (uint8_t)(idx % 7);
    h->op = (uint8_t)(idx % 5);
    h->root = rank;
    h->count = (uint64_t)idx * 1000003u + (uint64_t)rank;
}

/* Checks a received header against message idx of the peer. */
static int check_hdr(pair_t *p, const braid_msg_hdr_t *h, uint32_t idx, size_t slot)
{
    braid_msg_hdr_t want;
    fill_hdr(&want, p->peer, idx, slot);
    CHECK(p->rank,
          h->bytes == want.bytes && h->seq == want.seq && h->coll == want.coll &&
              h->dtype == want.dtype && h->op == want.op && h->root == want.root &&
              h->count == want.count && h->flags == 0,
          "message %u from rank %d: header bytes %u seq %u count %llu, expected %u %u %llu", idx,
          p->peer, h->bytes, h->seq, (unsigned long long)h->count, want.bytes, want.seq,
          (unsigned long long)want.count);
    return 0;
}

static int check_payload(pair_t *p, const uint8_t *b, uint32_t bytes, uint32_t idx)
{
    for (size_t j = 0; j < bytes; j++)
        CHECK(p->rank, b[j] == pattern(p->peer, idx, j),
              "message %u (%u bytes) byte %zu is %u, expected %u", idx, bytes, j, b[j],
              pattern(p->peer, idx, j));
    return 0;
}

/* A direct receive in progress (exchange with direct set): the caller's buffer, 8 guard
 * bytes on each side, the payload at an odd address. */
typedef struct {
    int on;
    uint32_t bytes;
    uint8_t *mem;
} direct_t;

/* Takes message `got` with recv_peek / recv_into where the transport has them (every
 * message with a payload; every fifth that is still arriving is given back with
 * recv_undirect and read from its slot): 1 when taken, 0 when not there yet (or to be taken
 * with recv_get: *use_get), -1 on failure. */
static int recv_direct(pair_t *p, direct_t *d, uint32_t got, size_t slot, int *use_get)
{
    *use_get = 0;
    if (!d->on) {
        const braid_msg_hdr_t *h;
        braid_result_t r = p->t->recv_peek(p->recv, &h);
        if (r == BRAID_INPROGRESS) return 0;
        if (r < 0) FAILF(p->rank, "recv_peek: %s", braid_last_error());
        if (check_hdr(p, h, got, slot)) return -1;
        if (!h->bytes) {
            *use_get = 1; /* empty messages are taken whole */
            return 0;
        }
        d->on = 1;
        d->bytes = h->bytes;
        memset(d->mem, 0xA5, slot + 17);
    }
    braid_result_t r = p->t->recv_into(p->recv, d->mem + 9);
    if (r == BRAID_INPROGRESS && got % 5 == 4) {
        p->t->recv_undirect(p->recv); /* the rest goes to the slot; the buffer is left alone */
        uint8_t before[8];
        memcpy(before, d->mem + 9, 8);
        d->on = 0;
        *use_get = 1;
        CHECK(p->rank, memcmp(before, d->mem + 9, 8) == 0, "buffer written after undirect");
        return 0;
    }
    if (r == BRAID_INPROGRESS) return 0;
    if (r < 0) FAILF(p->rank, "recv_into: %s", braid_last_error());
    d->on = 0;
    if (check_payload(p, d->mem + 9, d->bytes, got)) return -1;
    for (size_t j = 0; j < 9; j++)
        CHECK(p->rank, d->mem[j] == 0xA5, "message %u: recv_into wrote before the buffer", got);
    for (size_t j = 9 + d->bytes; j < slot + 17; j++)
        CHECK(p->rank, d->mem[j] == 0xA5, "message %u: recv_into wrote past %u bytes", got,
              d->bytes);
    return 1;
}

/* nmsg messages each way, interleaved: each rank sends what its FIFO takes, reads what has
 * arrived, and sleeps in wait() only when neither moved. With direct (and a transport that
 * has them), messages are received with recv_peek / recv_into (recv_direct). */
static int exchange(pair_t *p, uint32_t nmsg, double budget_s, int direct)
{
    size_t slot = p->send->slot_size;
    uint32_t sent = 0, got = 0;
    int turn = 0;
    double t_end = now_s() + budget_s;
    direct_t d = {0};
    direct = direct && p->t->recv_peek;
    if (direct && !(d.mem = malloc(slot + 17))) FAILF(p->rank, "out of memory");
    while (sent < nmsg || got < nmsg) {
        int moved = 0;
        while (sent < nmsg) {
            void *buf;
            braid_result_t r = p->t->send_get(p->send, &buf);
            if (r == BRAID_INPROGRESS) break;
            OK(p->rank, r);
            braid_msg_hdr_t h;
            fill_hdr(&h, p->rank, sent, slot);
            for (size_t j = 0; j < h.bytes; j++)
                ((uint8_t *)buf)[j] = pattern(p->rank, sent, j);
            OK(p->rank, p->t->send_post(p->send, &h));
            sent++;
            moved = 1;
        }
        while (got < nmsg) {
            int use_get = 0;
            if (direct) {
                int k = recv_direct(p, &d, got, slot, &use_get);
                if (k < 0) return 1;
                if (k > 0) {
                    got++;
                    moved = 1;
                    continue;
                }
                if (!use_get) break;
            }
            const braid_msg_hdr_t *h;
            const void *buf;
            braid_result_t r = p->t->recv_get(p->recv, &h, &buf);
            if (r == BRAID_INPROGRESS && use_get) continue; /* its payload is still arriving */
            if (r == BRAID_INPROGRESS) break;
            OK(p->rank, r);
            if (check_hdr(p, h, got, slot) || check_payload(p, buf, h->bytes, got)) return 1;
            OK(p->rank, p->t->recv_release(p->recv));
            got++;
            moved = 1;
        }
        if (p->t->progress) {
            OK(p->rank, p->t->progress(p->send));
            OK(p->rank, p->t->progress(p->recv));
        }
        if (moved) continue;
        CHECK(p->rank, now_s() < t_end, "no progress within %.0f s: sent %u, received %u of %u",
              budget_s, sent, got, nmsg);
        /* Alternate, so a send blocked on credits never starves the receive side. */
        turn ^= 1;
        if (sent < nmsg && (turn || got >= nmsg))
            OK(p->rank, p->t->wait(p->send, BRAID_WAIT_SEND, braid_now_ns() + 2000000ull));
        else
            OK(p->rank, p->t->wait(p->recv, BRAID_WAIT_RECV, braid_now_ns() + 2000000ull));
    }
    free(d.mem);
    /* Everything arrived both ways: nothing is held on this side any more. */
    OK(p->rank, braid_boot_barrier(p->comm->boot));
    CHECK(p->rank, !p->t->send_inflight || p->t->send_inflight(p->send) == 0,
          "send_inflight: %u messages still held after the peer received all",
          p->t->send_inflight(p->send));
    return 0;
}

static int case_data(braid_comm_t comm, const char *tname)
{
    pair_t p;
    int rank = comm->rank;
    /* Small slots: 600 messages wrap the 4-slot FIFO 150 times. */
    if (pair_open(&p, comm, tname, 40, 4096, 4)) return 1;
    int rc = exchange(&p, 600, 120, 0);
    pair_close(&p);
    if (rc) return rc;
    /* Bigger slots, 2 of them. */
    if (pair_open(&p, comm, tname, 41, 64 << 10, 2)) return 1;
    rc = exchange(&p, 48, 120, 0);
    pair_close(&p);
    if (rc) return rc;
    /* Direct receives into the caller's buffer, where the transport has them. */
    if (pair_open(&p, comm, tname, 42, 64 << 10, 4)) return 1;
    rc = exchange(&p, 96, 120, 1);
    pair_close(&p);
    if (rc) return rc;
    OK(rank, braid_boot_barrier(comm->boot));
    return 0;
}

/* ---- failures ------------------------------------------------------------------------------ */

/* Sends until the FIFO stays full for 200 ms (tcp's slots also drain into socket buffers). */
static int fill(pair_t *p, uint32_t *n_p)
{
    double t_full = 0, t_end = now_s() + 60;
    uint32_t n = 0;
    for (;;) {
        void *buf;
        braid_result_t r = p->t->send_get(p->send, &buf);
        if (r == BRAID_INPROGRESS) {
            if (!t_full) t_full = now_s();
            if (now_s() - t_full > 0.2) break;
            if (p->t->progress) OK(p->rank, p->t->progress(p->send));
            OK(p->rank, p->t->wait(p->send, BRAID_WAIT_SEND, braid_now_ns() + 10000000ull));
            continue;
        }
        OK(p->rank, r);
        t_full = 0;
        braid_msg_hdr_t h;
        fill_hdr(&h, p->rank, n, p->send->slot_size);
        memset(buf, 0x5a, h.bytes);
        OK(p->rank, p->t->send_post(p->send, &h));
        n++;
        CHECK(p->rank, now_s() < t_end, "the FIFO never filled (%u messages)", n);
    }
    *n_p = n;
    return 0;
}

/* Waits like the engine: get, else progress + wait(dir) in slices, until `budget_s`. Returns
 * the transport's error, BRAID_ERR_TIMEOUT when the budget runs out, or BRAID_SUCCESS when
 * the slot came. *late_p: the most a wait() call returned after its deadline (seconds). */
static braid_result_t wait_for(pair_t *p, braid_wait_dir_t dir, double budget_s,
                               const _Atomic int *stop, double *late_p)
{
    braid_conn_t *c = dir == BRAID_WAIT_SEND ? p->send : p->recv;
    uint64_t end = braid_now_ns() + (uint64_t)(budget_s * 1e9);
    double late = 0;
    for (;;) {
        braid_result_t r;
        if (dir == BRAID_WAIT_SEND) {
            void *buf;
            r = p->t->send_get(c, &buf);
        } else {
            const braid_msg_hdr_t *h;
            const void *buf;
            r = p->t->recv_get(c, &h, &buf);
        }
        if (r != BRAID_INPROGRESS) return r;
        if (p->t->progress && (r = p->t->progress(c)) != BRAID_SUCCESS) return r;
        if (stop && atomic_load(stop))
            return braid_set_error(BRAID_ERR_ABORTED, "conformance: woken by abort");
        uint64_t now = braid_now_ns();
        if (now >= end)
            return braid_set_error(BRAID_ERR_TIMEOUT, "conformance: rank %d silent for %.1f s",
                                   p->peer, budget_s);
        uint64_t deadline = now + 250000000ull;
        if (deadline > end) deadline = end;
        r = p->t->wait(c, dir, deadline);
        double over = ((double)braid_now_ns() - (double)deadline) * 1e-9;
        if (over > late) late = over;
        if (late_p) *late_p = late;
        if (r != BRAID_SUCCESS) return r;
    }
}

/* The error must be BRAID_ERR_REMOTE and its message must contain `want`. */
static int expect_remote(int rank, braid_result_t r, const char *want, const char *what)
{
    const char *msg = braid_last_error();
    CHECK(rank, r == BRAID_ERR_REMOTE, "%s: got %s (%s), expected BRAID_ERR_REMOTE", what,
          braid_strerror(r), msg);
    CHECK(rank, strstr(msg, want) != NULL, "%s: message '%s' does not contain '%s'", what, msg,
          want);
    return 0;
}

static int case_fail(braid_comm_t comm, const char *tname)
{
    pair_t p;
    if (pair_open(&p, comm, tname, 42, 4096, 4)) return 1;
    char why[128], want[128];
    snprintf(why, sizeof(why), "conformance: rank %d gives up (code %d)", p.rank, 1000 + p.rank);
    snprintf(want, sizeof(want), "conformance: rank %d gives up (code %d)", p.peer, 1000 + p.peer);
    p.t->fail(p.send, BRAID_ERR_INTERNAL, why);
    double t0 = now_s();
    braid_result_t r = wait_for(&p, BRAID_WAIT_RECV, 30, NULL, NULL);
    int rc = expect_remote(p.rank, r, want, "receive after the peer's fail()");
    if (!rc && now_s() - t0 > 10) FAILF(p.rank, "fail() took %.1f s to arrive", now_s() - t0);
    if (!rc && p.t->peer_failed) /* the notice, as braid_comm_peer_failure reads it */
        rc = expect_remote(p.rank, p.t->peer_failed(p.recv), want, "peer_failed after fail()");
    if (!rc) rc = braid_boot_barrier(comm->boot) != BRAID_SUCCESS;
    pair_close(&p);
    return rc;
}

/* A peer that fails with its own timeout or abort: the waits report it as any failure, but
 * peer_failed does not (ranks waiting on that peer find it themselves; others must not end a
 * call on it before their own timeout). */
static int case_failquiet(braid_comm_t comm, const char *tname)
{
    static const braid_result_t codes[] = {BRAID_ERR_TIMEOUT, BRAID_ERR_ABORTED};
    int rc = 0;
    for (int k = 0; k < 2 && !rc; k++) {
        pair_t p;
        if (pair_open(&p, comm, tname, 46 + k, 4096, 4)) return 1;
        char why[128], want[128];
        snprintf(why, sizeof(why), "conformance: rank %d stops (%d)", p.rank, k);
        snprintf(want, sizeof(want), "conformance: rank %d stops (%d)", p.peer, k);
        p.t->fail(p.send, codes[k], why);
        braid_result_t r = wait_for(&p, BRAID_WAIT_RECV, 30, NULL, NULL);
        rc = expect_remote(p.rank, r, want, "receive after the peer's fail()");
        if (!rc && p.t->peer_failed && p.t->peer_failed(p.recv) != BRAID_SUCCESS)
            FAILF(p.rank, "peer_failed reports the peer's %s: %s", braid_strerror(codes[k]),
                  braid_last_error());
        if (!rc) rc = braid_boot_barrier(comm->boot) != BRAID_SUCCESS;
        pair_close(&p);
    }
    return rc;
}

static int case_failrecv(braid_comm_t comm, const char *tname)
{
    pair_t p;
    if (pair_open(&p, comm, tname, 43, 4096, 4)) return 1;
    const char *why = "conformance: receiver refuses more";
    int rc = 0;
    if (p.rank == 1) {
        uint32_t n;
        if (fill(&p, &n)) return 1;
        OK(p.rank, braid_boot_barrier(comm->boot)); /* full */
        braid_result_t r = wait_for(&p, BRAID_WAIT_SEND, 30, NULL, NULL);
        rc = expect_remote(p.rank, r, why, "send after the receiver's fail()");
        if (!rc && p.t->peer_failed) /* found on the send side too */
            rc = expect_remote(p.rank, p.t->peer_failed(p.send), why, "peer_failed (send side)");
    } else {
        OK(p.rank, braid_boot_barrier(comm->boot));
        p.t->fail(p.recv, BRAID_ERR_INTERNAL, why);
    }
    if (!rc) rc = braid_boot_barrier(comm->boot) != BRAID_SUCCESS;
    pair_close(&p);
    return rc;
}

static int case_kill(braid_comm_t comm, const char *tname)
{
    pair_t p;
    if (pair_open(&p, comm, tname, 44, 4096, 4)) return 1;
    if (p.rank == 1) {
        usleep(200000);
        raise(SIGKILL);
    }
    double t0 = now_s();
    braid_result_t r = wait_for(&p, BRAID_WAIT_RECV, 60, NULL, NULL);
    int rc = expect_remote(p.rank, r, "rank 1", "receive from a killed peer");
    /* A dead peer is the waits' news, not a failure notice. */
    if (!rc && p.t->peer_failed && p.t->peer_failed(p.recv) != BRAID_SUCCESS)
        FAILF(p.rank, "peer_failed reports a killed peer: %s", braid_last_error());
    fprintf(stderr, "rank 0: killed peer seen after %.2f s: %s\n", now_s() - t0,
            braid_last_error());
    pair_close(&p);
    return rc;
}

static int case_close(braid_comm_t comm, const char *tname)
{
    pair_t p;
    if (pair_open(&p, comm, tname, 45, 4096, 4)) return 1;
    if (p.rank == 1) {
        OK(p.rank, braid_boot_barrier(comm->boot)); /* rank 0's FIFO is full */
        pair_close(&p);
        usleep(300000);
        return 0; /* then exits */
    }
    uint32_t n;
    if (fill(&p, &n)) return 1;
    OK(p.rank, braid_boot_barrier(comm->boot));
    braid_result_t r = wait_for(&p, BRAID_WAIT_RECV, 60, NULL, NULL);
    int rc = expect_remote(p.rank, r, "rank 1", "receive from a peer that closed");
    if (!rc && p.t->peer_failed && p.t->peer_failed(p.recv) != BRAID_SUCCESS)
        FAILF(p.rank, "peer_failed reports a closed connection: %s", braid_last_error());
    if (!rc) {
        r = wait_for(&p, BRAID_WAIT_SEND, 60, NULL, NULL);
        rc = expect_remote(p.rank, r, "rank 1", "send to a peer that closed");
    }
    pair_close(&p);
    return rc;
}

static int case_timeout(braid_comm_t comm, const char *tname)
{
    pair_t p;
    if (pair_open(&p, comm, tname, 46, 4096, 4)) return 1;
    int rc = 0;
    if (p.rank == 0) {
        for (int dir = 0; dir < 2 && !rc; dir++) {
            uint32_t n = 0;
            if (dir == BRAID_WAIT_SEND && fill(&p, &n)) return 1;
            double late = 0, t0 = now_s();
            braid_result_t r = wait_for(&p, (braid_wait_dir_t)dir, 1.0, NULL, &late);
            double dt = now_s() - t0;
            CHECK(p.rank, r == BRAID_ERR_TIMEOUT, "%s wait on a silent peer: %s (%s)",
                  dir ? "send" : "receive", braid_strerror(r), braid_last_error());
            CHECK(p.rank, dt >= 0.99 && dt < 2.0, "a 1 s budget took %.3f s", dt);
            CHECK(p.rank, late < 0.2, "wait() returned %.3f s after its deadline", late);
        }
    }
    OK(p.rank, braid_boot_barrier(comm->boot));
    pair_close(&p);
    return rc;
}

typedef struct {
    pair_t *p;
    _Atomic int stop;
    _Atomic uint64_t woken_ns;
} waker_t;

static void *waker(void *arg)
{
    waker_t *w = arg;
    usleep(300000);
    atomic_store(&w->stop, 1);
    atomic_store(&w->woken_ns, braid_now_ns());
    w->p->t->wake(w->p->recv);
    return NULL;
}

static int case_abort(braid_comm_t comm, const char *tname)
{
    pair_t p;
    if (pair_open(&p, comm, tname, 47, 4096, 4)) return 1;
    int rc = 0;
    if (p.rank == 0) {
        waker_t w = {.p = &p};
        pthread_t th;
        CHECK(p.rank, pthread_create(&th, NULL, waker, &w) == 0, "pthread_create");
        /* One wait() with a 20 s deadline, then the loop's flag check. */
        braid_result_t r = BRAID_SUCCESS;
        const braid_msg_hdr_t *h;
        const void *buf;
        while (!atomic_load(&w.stop) && r == BRAID_SUCCESS &&
               p.t->recv_get(p.recv, &h, &buf) == BRAID_INPROGRESS)
            r = p.t->wait(p.recv, BRAID_WAIT_RECV, braid_now_ns() + 20000000000ull);
        uint64_t back = braid_now_ns();
        pthread_join(th, NULL);
        double dt = ((double)back - (double)atomic_load(&w.woken_ns)) * 1e-9;
        CHECK(p.rank, r == BRAID_SUCCESS, "wait: %s (%s)", braid_strerror(r), braid_last_error());
        CHECK(p.rank, atomic_load(&w.stop), "the silent peer's receive completed");
        CHECK(p.rank, dt < 0.5, "the wait returned %.3f s after wake()", dt);
    }
    OK(p.rank, braid_boot_barrier(comm->boot));
    pair_close(&p);
    return rc;
}

/* ---- braid_comm_register ---------------------------------------------------------------- */

/* Registered buffers used by collectives (results checked), overlapping registrations, the
 * rdma registration cache's view of them, bad arguments, a handle left for destroy. */
static int case_register(braid_comm_t comm, const char *tname)
{
    int rank = comm->rank, n = comm->nranks;
    size_t count = (size_t)1 << 20; /* 4 MiB of int32 */
    /* `other` is static: it stays registered until braid_comm_destroy, after this returns. */
    static int32_t other[4096];
    int32_t *big = malloc(count * sizeof(int32_t));
    CHECK(rank, big, "out of memory");
    braid_reg_t hb, hsub, ho, hz, bad = NULL;
    OK(rank, braid_comm_register(comm, big, count * sizeof(int32_t), &hb));
    OK(rank, braid_comm_register(comm, big + 1000, 4096, &hsub)); /* inside big */
    OK(rank, braid_comm_register(comm, other, 4096 * sizeof(int32_t), &ho));
    OK(rank, braid_comm_register(comm, NULL, 0, &hz)); /* empty: a handle doing nothing */
#if BRAID_HAVE_VERBS
    uint64_t regs = 0;
    size_t ranges = 0, entries = 0;
    int have = braid_rdma_reg_stats(comm, &regs, &ranges, &entries) == 0;
    if (!strcmp(tname, "rdma")) {
        CHECK(rank, have && ranges == 3 && regs == 2 && entries == 2,
              "rdma cache: have %d, %zu ranges, %llu registrations, %zu entries (want 3, 2, 2)",
              have, ranges, (unsigned long long)regs, entries);
    } else {
        CHECK(rank, !have, "a %s communicator has rdma registrations", tname);
    }
#endif
    /* Collectives on registered memory: exact integer results. */
    for (size_t i = 0; i < count; i++)
        big[i] = (int32_t)((i * 7 + (size_t)rank * 1000003u) & 0xffffff);
    OK(rank, braid_allreduce(big, big, count, BRAID_INT32, BRAID_SUM, comm));
    for (size_t i = 0; i < count; i++) {
        int64_t want = 0;
        for (int r = 0; r < n; r++)
            want += (int64_t)((i * 7 + (size_t)r * 1000003u) & 0xffffff);
        CHECK(rank, big[i] == (int32_t)want, "allreduce element %zu: %d, expected %lld", i, big[i],
              (long long)want);
    }
    for (int i = 0; i < 2048; i++)
        other[rank * 2048 + i] = rank * 100000 + i;
    OK(rank, braid_allgather(other + rank * 2048, other, 2048, BRAID_INT32, comm));
    for (int r = 0; r < n; r++)
        for (int i = 0; i < 2048; i++)
            CHECK(rank, other[r * 2048 + i] == r * 100000 + i, "allgather [%d][%d] = %d", r, i,
                  other[r * 2048 + i]);
    /* Ring all-gather and broadcast into registered outputs: on rdma the chunks go straight
     * into the receiver's buffer (zero-copy), bit-identical to the reference; an unregistered
     * output takes the staging path. */
    uint64_t zc0 = 0, zc1 = 0, zc2 = 0;
#if BRAID_HAVE_VERBS
    zc0 = braid_rdma_zc_received(comm);
#endif
    for (int i = 0; i < 2048; i++)
        other[rank * 2048 + i] = -rank * 7 - i;
    OK(rank, braid_allgather(other + rank * 2048, other, 2048, BRAID_INT32, comm));
    for (size_t i = 0; i < count; i++)
        big[i] = rank == 1 ? (int32_t)(i * 2654435761u) : -1;
    OK(rank, braid_broadcast(big, big, count, BRAID_INT32, 1, comm));
    for (int r = 0; r < n; r++)
        for (int i = 0; i < 2048; i++)
            CHECK(rank, other[r * 2048 + i] == -r * 7 - i, "allgather [%d][%d] = %d", r, i,
                  other[r * 2048 + i]);
    for (size_t i = 0; i < count; i++)
        CHECK(rank, big[i] == (int32_t)(i * 2654435761u), "broadcast element %zu = %d", i, big[i]);
#if BRAID_HAVE_VERBS
    zc1 = braid_rdma_zc_received(comm);
#endif
    int32_t *unreg = malloc(4096 * sizeof(int32_t));
    CHECK(rank, unreg, "out of memory");
    for (int i = 0; i < 2048; i++)
        unreg[rank * 2048 + i] = rank * 3 + i;
    OK(rank, braid_allgather(unreg + rank * 2048, unreg, 2048, BRAID_INT32, comm));
    for (int r = 0; r < n; r++)
        for (int i = 0; i < 2048; i++)
            CHECK(rank, unreg[r * 2048 + i] == r * 3 + i, "unregistered allgather [%d][%d]", r, i);
    free(unreg);
#if BRAID_HAVE_VERBS
    zc2 = braid_rdma_zc_received(comm);
#endif
    if (!strcmp(tname, "rdma")) {
        /* Zero-copy is opportunistic: a chunk posted before the receiver's exposure arrived
         * takes the staging path (the 2-rank all-gather's single message usually does). Rank 0
         * receives the chunks of the 4 MiB broadcast: beyond the first FIFO-full of each
         * channel, the root posts a chunk only after a credit that rank 0 sent after its
         * exposure on the same QP, so every later chunk must arrive zero-copy. */
        size_t chunks = (count * sizeof(int32_t) + comm->chunk_bytes - 1) / comm->chunk_bytes;
        size_t early = (size_t)comm->nslots * (size_t)comm->nchannels;
        uint64_t want = rank == 0 && chunks > early ? chunks - early : 0;
        CHECK(rank, zc1 - zc0 >= want,
              "zero-copy messages received: %llu, expected at least %llu of %zu",
              (unsigned long long)(zc1 - zc0), (unsigned long long)want, chunks);
        CHECK(rank, zc2 == zc1, "an unregistered output got %llu zero-copy messages",
              (unsigned long long)(zc2 - zc1));
        fprintf(stderr, "rank %d: %llu messages received zero-copy\n", rank,
                (unsigned long long)(zc1 - zc0));
    } else {
        CHECK(rank, zc0 == 0 && zc2 == 0, "zero-copy on %s", tname);
    }
    /* Bad arguments and stale handles are refused with a message. */
    CHECK(rank, braid_comm_register(comm, big, 8, NULL) == BRAID_ERR_INVALID_ARG, "NULL handle_p");
    CHECK(rank, braid_comm_register(comm, NULL, 8, &bad) == BRAID_ERR_INVALID_ARG && !bad,
          "NULL buf");
    CHECK(rank, strstr(braid_last_error(), "buf is NULL"), "message: %s", braid_last_error());
    OK(rank, braid_comm_deregister(comm, hsub));
    CHECK(rank, braid_comm_deregister(comm, hsub) == BRAID_ERR_INVALID_ARG, "double deregister");
    CHECK(rank, strstr(braid_last_error(), "not registered"), "message: %s", braid_last_error());
    CHECK(rank, braid_comm_deregister(comm, NULL) == BRAID_ERR_INVALID_ARG, "NULL handle");
    OK(rank, braid_comm_deregister(comm, hz));
    OK(rank, braid_comm_deregister(comm, hb));
#if BRAID_HAVE_VERBS
    if (!strcmp(tname, "rdma")) {
        CHECK(rank, braid_rdma_reg_stats(comm, &regs, &ranges, &entries) == 0, "stats");
        CHECK(rank, ranges == 1 && entries == 1, "after deregistering big: %zu ranges, %zu entries",
              ranges, entries);
    }
#endif
    /* `other` stays registered: braid_comm_destroy deregisters it. */
    (void)ho;
    OK(rank, braid_boot_barrier(comm->boot));
    free(big);
    return 0;
}

int conf_ring_zc(braid_comm_t comm, const char *tname)
{
    int rank = comm->rank, n = comm->nranks;
    size_t per = 3001, count = (size_t)1 << 20; /* all-gather block, broadcast elements */
    size_t bytes = (per * (size_t)n > count ? per * (size_t)n : count) * sizeof(int32_t);
    int32_t *out = malloc(bytes);
    CHECK(rank, out, "out of memory");
    braid_reg_t h;
    OK(rank, braid_comm_register(comm, out, bytes, &h));
    for (int round = 0; round < 2; round++) {
        for (size_t i = 0; i < per; i++)
            out[(size_t)rank * per + i] = (int32_t)(rank * 1000003 + (int)i * 7 + round);
        OK(rank, braid_allgather(out + (size_t)rank * per, out, per, BRAID_INT32, comm));
        for (int r = 0; r < n; r++)
            for (size_t i = 0; i < per; i++)
                CHECK(rank, out[(size_t)r * per + i] == (int32_t)(r * 1000003 + (int)i * 7 + round),
                      "all-gather round %d block %d element %zu = %d", round, r, i,
                      out[(size_t)r * per + i]);
    }
    size_t chunks = (count * sizeof(int32_t) + comm->chunk_bytes - 1) / comm->chunk_bytes;
    size_t early = (size_t)comm->nslots * (size_t)comm->nchannels;
    for (int root = 0; root < n; root++) {
        uint64_t zc0 = 0, zc1 = 0;
#if BRAID_HAVE_VERBS
        zc0 = braid_rdma_zc_received(comm);
#endif
        for (size_t i = 0; i < count; i++)
            out[i] = rank == root ? (int32_t)(i * 2654435761u + (unsigned)root) : -1;
        OK(rank, braid_broadcast(out, out, count, BRAID_INT32, root, comm));
        for (size_t i = 0; i < count; i++)
            CHECK(rank, out[i] == (int32_t)(i * 2654435761u + (unsigned)root),
                  "broadcast from %d element %zu = %d", root, i, out[i]);
#if BRAID_HAVE_VERBS
        zc1 = braid_rdma_zc_received(comm);
#endif
        uint64_t want =
            !strcmp(tname, "rdma") && rank != root && chunks > early ? chunks - early : 0;
        CHECK(rank, zc1 - zc0 >= want, "broadcast from %d: %llu chunks zero-copy, expected >= %llu",
              root, (unsigned long long)(zc1 - zc0), (unsigned long long)want);
        if (root == (rank + 1) % n)
            fprintf(stderr, "rank %d: broadcast from %d: %llu of %zu chunks zero-copy\n", rank,
                    root, (unsigned long long)(zc1 - zc0), chunks);
    }
    OK(rank, braid_comm_deregister(comm, h));
    free(out);
    return 0;
}

int conf_run(braid_comm_t comm, const char *transport, const char *name)
{
    int n = comm->nranks;
    if (n != 2) FAILF(comm->rank, "conformance needs 2 ranks, not %d", n);
    if (!strcmp(name, "data")) return case_data(comm, transport);
    if (!strcmp(name, "fail")) return case_fail(comm, transport);
    if (!strcmp(name, "failrecv")) return case_failrecv(comm, transport);
    if (!strcmp(name, "failquiet")) return case_failquiet(comm, transport);
    if (!strcmp(name, "kill")) return case_kill(comm, transport);
    if (!strcmp(name, "close")) return case_close(comm, transport);
    if (!strcmp(name, "timeout")) return case_timeout(comm, transport);
    if (!strcmp(name, "abort")) return case_abort(comm, transport);
    if (!strcmp(name, "register")) return case_register(comm, transport);
    FAILF(comm->rank, "unknown conformance case '%s'", name);
}
