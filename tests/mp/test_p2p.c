/* Point-to-point and groups as real processes (n = 1..8) over shm and tcp: braid_send/recv and
 * the i-forms, every dtype, counts 0, 1, primes and multi-chunk sizes, messages to self, order
 * per pair, groups with sends and receives posted in adversarial orders (all sends first, all
 * receives first, a random order per rank), nested groups, collectives inside groups, groups
 * over two communicators, argument errors and mismatches named, a killed peer during a
 * receive; plain, streaming and measured stores into the shm send slots. Every message's data
 * depends on (sender, receiver, index, round) and is checked bit-exactly against
 * tests/common/data.c. */
#include "core/comm.h"
#include "core/p2p_impl.h"
#include "data.h"
#include "mp.h"
#include "proc.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* The data rank s sends to rank d in round it. */
static int seed_of(int s, int d, int it)
{
    return 1 + s * 97 + d * 13 + it * 1001;
}

/* ---- a ring exchange inside a group: every dtype and count --------------------------------- */
static int ring_matrix(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    size_t counts[] = {0, 1, 7, 1009, data_quick() ? 40013 : 100003};
    int next = (rank + 1) % n, prev = (rank + n - 1) % n, it = 0;
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++)
        for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++, it++) {
            size_t count = counts[ci], es = braid_dtype_size(dt);
            size_t off = ci & 1 ? 1 + (size_t)dt % 3 : 0; /* unaligned buffers */
            char *in = data_xmalloc(count * es + 8), *out = data_xmalloc(count * es + 8);
            data_fill(in + off, dt, BRAID_SUM, rank, 0, count, seed_of(rank, next, it));
            memset(out, 0xEE, count * es + 8);
            MP_OK(rank, braid_group_start());
            if (it & 1) { /* receive posted first every other round */
                MP_OK(rank, braid_recv(out + off, count, dt, prev, comm));
                MP_OK(rank, braid_send(in + off, count, dt, next, comm));
            } else {
                MP_OK(rank, braid_send(in + off, count, dt, next, comm));
                MP_OK(rank, braid_recv(out + off, count, dt, prev, comm));
            }
            MP_OK(rank, braid_group_end());
            char what[128];
            snprintf(what, sizeof(what), "ring n=%d %s count=%zu from %d", n, braid_dtype_name(dt),
                     count, prev);
            MP_CHECK(rank,
                     !data_check_rank(out + off, dt, BRAID_SUM, prev, 0, count,
                                      seed_of(prev, rank, it), what),
                     "%s", what);
            MP_CHECK(rank, count == 0 || (unsigned char)out[off + count * es] == 0xEE,
                     "%s: wrote past the end", what);
            free(in);
            free(out);
        }
    return 0;
}

Test(p2p, ring_in_group_every_dtype_and_count_n1_to_8, .timeout = 240)
{
    int ns[] = {1, 2, 3, 4, 5, 8};
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++)
        cr_assert_eq(mp_run(ns[i], ring_matrix, NULL, 200), 0, "n=%d", ns[i]);
}

/* BRAID_P2P_NT_SLOTS plain, streaming and measured (auto, which times its copies of 16 KiB or
 * more into the shm send slots, and the receiver its copies out): the same messages, every
 * dtype and count, unaligned; with auto every rank's picker towards its next rank averaged
 * both kinds, and that rank reported its costs of both (read through the comm). */
static int ring_then_picker(braid_comm_t comm, int rank, int n, void *arg)
{
    if (ring_matrix(comm, rank, n, arg)) return 1;
    /* Enough timed messages (data_quick() shortens the matrix) for the picker's warm-up runs
     * of both kinds and the receiver's reports, each checked. */
    int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    size_t cnt = BRAID_NT_PICK_MIN / sizeof(float) + 101;
    float *in = malloc(cnt * sizeof(float)), *out = malloc(cnt * sizeof(float));
    MP_CHECK(rank, in && out, "out of memory");
    for (int it = 0; n > 1 && it < 3 * BRAID_NT_PICK_TRIAL; it++) {
        data_fill(in, BRAID_FLOAT32, BRAID_SUM, rank, 0, cnt, 500 + it);
        MP_OK(rank, braid_group_start());
        MP_OK(rank, braid_send(in, cnt, BRAID_FLOAT32, next, comm));
        MP_OK(rank, braid_recv(out, cnt, BRAID_FLOAT32, prev, comm));
        MP_OK(rank, braid_group_end());
        MP_CHECK(rank,
                 !data_check_rank(out, BRAID_FLOAT32, BRAID_SUM, prev, 0, cnt, 500 + it, "nt"),
                 "round %d", it);
    }
    free(in);
    free(out);
    const char *mode = getenv("BRAID_P2P_NT_SLOTS");
    if (n > 1 && mode && !strcmp(mode, "auto")) {
        struct braid_comm *c = (struct braid_comm *)comm;
        const braid_nt_pick_t *k = &c->p2p->ntpick[(rank + 1) % n];
        MP_CHECK(rank, k->timed > 0 && k->count[0] > 0 && k->count[1] > 0,
                 "picker to %d: %llu timed, %llu plain, %llu streaming", (rank + 1) % n,
                 (unsigned long long)k->timed, (unsigned long long)k->count[0],
                 (unsigned long long)k->count[1]);
        /* and the next rank reported its copies out of both kinds through the connection */
        braid_conn_t *sc = c->p2p->send[(rank + 1) % n];
        MP_CHECK(rank,
                 sc->ops != &braid_transport_shm ||
                     (braid_shm_rx_cost_get(sc, 0) > 0 && braid_shm_rx_cost_get(sc, 1) > 0),
                 "receiver costs reported: plain %llu, streaming %llu ps/B",
                 (unsigned long long)braid_shm_rx_cost_get(sc, 0),
                 (unsigned long long)braid_shm_rx_cost_get(sc, 1));
    }
    return 0;
}

Test(p2p, ring_with_plain_streaming_and_measured_stores_into_slots, .timeout = 240)
{
    const char *modes[] = {"0", "1", "auto"};
    for (int m = 0; m < 3; m++) {
        setenv("BRAID_P2P_NT_SLOTS", modes[m], 1);
        cr_assert_eq(mp_run(2, ring_then_picker, NULL, 200), 0, "n=2 %s", modes[m]);
        cr_assert_eq(mp_run(3, ring_then_picker, NULL, 200), 0, "n=3 %s", modes[m]);
    }
    unsetenv("BRAID_P2P_NT_SLOTS");
}

/* ---- every pair (self included) in adversarial orders ------------------------------------ */
typedef struct {
    int order; /* 0 all sends first, 1 all receives first, 2 random per rank, 3 nested groups */
    size_t count;
    int iform;
} pairs_t;

static unsigned lcg(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (*s >> 16) & 0x7fff;
}

static int all_pairs(braid_comm_t comm, int rank, int n, void *arg)
{
    const pairs_t *o = arg;
    size_t count = o->count;
    braid_datatype_t dt = BRAID_FLOAT32;
    size_t bytes = count * 4;
    char *in = data_xmalloc(bytes * (size_t)n), *out = data_xmalloc(bytes * (size_t)n);
    for (int d = 0; d < n; d++)
        data_fill(in + (size_t)d * bytes, dt, BRAID_SUM, rank, 0, count, seed_of(rank, d, 1));
    memset(out, 0, bytes * (size_t)n);
    /* calls 0..n-1 send to rank i, n..2n-1 receive from rank i - n */
    int calls[128];
    for (int i = 0; i < 2 * n; i++)
        calls[i] = o->order == 1 ? (i + n) % (2 * n) : i;
    if (o->order == 2) {
        unsigned s = 7u + (unsigned)rank * 31u;
        for (int i = 2 * n - 1; i > 0; i--) {
            int j = (int)(lcg(&s) % (unsigned)(i + 1)), t = calls[i];
            calls[i] = calls[j];
            calls[j] = t;
        }
    }
    braid_request_t reqs[128];
    int nreq = 0;
    MP_OK(rank, braid_group_start());
    for (int i = 0; i < 2 * n; i++) {
        int c = calls[i];
        if (o->order == 3 && i == n) MP_OK(rank, braid_group_start()); /* nested */
        if (o->order == 3 && i == 1) MP_OK(rank, braid_group_start());
        if (o->order == 3 && i == 2) MP_OK(rank, braid_group_end());
        if (c < n) {
            if (o->iform)
                MP_OK(rank, braid_isend(in + (size_t)c * bytes, count, dt, c, comm, &reqs[nreq++]));
            else
                MP_OK(rank, braid_send(in + (size_t)c * bytes, count, dt, c, comm));
        } else {
            int p = c - n;
            if (o->iform)
                MP_OK(rank,
                      braid_irecv(out + (size_t)p * bytes, count, dt, p, comm, &reqs[nreq++]));
            else
                MP_OK(rank, braid_recv(out + (size_t)p * bytes, count, dt, p, comm));
        }
    }
    if (o->order == 3) MP_OK(rank, braid_group_end());
    MP_OK(rank, braid_group_end());
    for (int i = 0; i < nreq; i++) { /* complete at group end */
        int done = 0;
        MP_OK(rank, braid_test(reqs[i], &done));
        MP_CHECK(rank, done, "request %d not done after group end", i);
    }
    for (int p = 0; p < n; p++) {
        char what[96];
        snprintf(what, sizeof(what), "order %d count %zu from %d", o->order, count, p);
        MP_CHECK(rank,
                 !data_check_rank(out + (size_t)p * bytes, dt, BRAID_SUM, p, 0, count,
                                  seed_of(p, rank, 1), what),
                 "%s", what);
    }
    free(in);
    free(out);
    return 0;
}

Test(p2p, every_pair_in_adversarial_orders_never_deadlocks, .timeout = 240)
{
    int ns[] = {2, 3, 4, 6, 8};
    size_t counts[] = {3, 300007}; /* one message, and far more than the connection's slots */
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++)
        for (int order = 0; order < 4; order++)
            for (size_t ci = 0; ci < 2; ci++) {
                if (data_quick() && ns[i] > 4 && ci) continue;
                pairs_t o = {.order = order, .count = counts[ci], .iform = (order + (int)ci) & 1};
                cr_assert_eq(mp_run(ns[i], all_pairs, &o, 200), 0, "n=%d order=%d count=%zu", ns[i],
                             order, counts[ci]);
            }
}

Test(p2p, every_pair_over_tcp, .timeout = 240)
{
    setenv("BRAID_TRANSPORT", "tcp", 1);
    int ns[] = {2, 3, 5};
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++)
        for (int order = 0; order < 4; order++) {
            pairs_t o = {.order = order, .count = order & 1 ? 200003 : 17, .iform = order >> 1};
            cr_assert_eq(mp_run(ns[i], all_pairs, &o, 200), 0, "tcp n=%d order=%d", ns[i], order);
        }
}

Test(p2p, ring_over_tcp, .timeout = 240)
{
    setenv("BRAID_TRANSPORT", "tcp", 1);
    int ns[] = {2, 3, 4};
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++)
        cr_assert_eq(mp_run(ns[i], ring_matrix, NULL, 200), 0, "tcp n=%d", ns[i]);
}

/* ---- tcp: the send/recv connections' own message size and sockets ------------------------ */
/* Sends, receives and an all-to-all move in messages of the connections' slots (over tcp 512
 * KiB by default, BRAID_P2P_TCP_CHUNK_SIZE; sockets per peer BRAID_P2P_TCP_NSOCKS), but a
 * reduce_scatterv's in messages of the collectives' chunk (its reducing receive takes the same
 * chunk from every peer): both checked with blocks of several messages either way. */
static int tcp_sizes(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    size_t rc[8], tot = 0;
    for (int i = 0; i < n; i++)
        tot += rc[i] = (size_t)(i + 1) * 150001 + (size_t)i;
    float *in = data_xmalloc(tot * 4), *out = data_xmalloc(tot * 4);
    data_fill(in, BRAID_FLOAT32, BRAID_SUM, rank, 0, tot, 77);
    size_t off = 0;
    for (int i = 0; i < rank; i++)
        off += rc[i];
    MP_OK(rank, braid_reduce_scatterv(in, out, rc, BRAID_FLOAT32, BRAID_SUM, comm));
    MP_CHECK(
        rank,
        !data_check_reduced(out, BRAID_FLOAT32, BRAID_SUM, n, off, rc[rank], 77, "reduce_scatterv"),
        "reduce_scatterv of %zu", rc[rank]);
    size_t c = 350003; /* 1.4 MB per peer */
    float *a = data_xmalloc(c * 4 * (size_t)n), *b = data_xmalloc(c * 4 * (size_t)n);
    for (int d = 0; d < n; d++)
        data_fill(a + (size_t)d * c, BRAID_FLOAT32, BRAID_SUM, rank, 0, c, seed_of(rank, d, 5));
    MP_OK(rank, braid_alltoall(a, b, c, BRAID_FLOAT32, comm));
    for (int s = 0; s < n; s++) {
        char what[64];
        snprintf(what, sizeof(what), "alltoall block from %d", s);
        MP_CHECK(rank,
                 !data_check_rank(b + (size_t)s * c, BRAID_FLOAT32, BRAID_SUM, s, 0, c,
                                  seed_of(s, rank, 5), what),
                 "%s", what);
    }
    free(in);
    free(out);
    free(a);
    free(b);
    return 0;
}

Test(p2p, tcp_message_size_and_sockets, .timeout = 240)
{
    setenv("BRAID_TRANSPORT", "tcp", 1);
    /* default; smaller than the collectives' chunk (raised to it); odd sizes; the most
     * (socket counts are powers of two) */
    const char *sets[][2] = {{NULL, NULL}, {"100", "1"}, {"200000", "4"}, {"2M", "8"}};
    for (size_t i = 0; i < sizeof(sets) / sizeof(sets[0]); i++) {
        if (sets[i][0]) setenv("BRAID_P2P_TCP_CHUNK_SIZE", sets[i][0], 1);
        if (sets[i][1]) setenv("BRAID_P2P_TCP_NSOCKS", sets[i][1], 1);
        pairs_t o = {.order = 2, .count = 300007};
        cr_assert_eq(mp_run(3, all_pairs, &o, 200), 0, "pairs, set %zu", i);
        cr_assert_eq(mp_run(3, tcp_sizes, NULL, 200), 0, "collectives, set %zu", i);
    }
    unsetenv("BRAID_P2P_TCP_CHUNK_SIZE");
    unsetenv("BRAID_P2P_TCP_NSOCKS");
}

/* ---- tcp: frames around the receive bounce buffer's sizes --------------------------------- */
/* A tcp socket whose last frame fit its bounce buffer (transport/tcp.h: 32 KiB of payload)
 * reads as much as that frame next time, else 8 KiB ahead. Messages whose sizes straddle both
 * (0, 1, 8 KiB - 32 +- 1, 32 KiB +- 1, larger), posted in one group (frames back to back in
 * the socket: a whole-frame read takes the start of the next one) and one group per message,
 * then all-reduces of those sizes (the collectives' connections, the same reader). Every
 * byte is checked. */
static const size_t bounce_sizes[] = {0,     1, 8159,  8160,  8161,   20000, 32767,   32768,
                                      32769, 3, 32768, 32768, 100000, 9000,  1 << 20, 12345};
#define NBOUNCE (sizeof(bounce_sizes) / sizeof(bounce_sizes[0]))

static int bounce_frames(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    for (int together = 0; together < 2; together++) {
        char *in[NBOUNCE], *out[NBOUNCE];
        for (size_t i = 0; i < NBOUNCE; i++) {
            in[i] = data_xmalloc(bounce_sizes[i] + 1);
            out[i] = data_xmalloc(bounce_sizes[i] + 1);
            data_fill(in[i], BRAID_UINT8, BRAID_SUM, rank, 0, bounce_sizes[i],
                      seed_of(rank, next, (int)i + 100 * together));
        }
        if (together) MP_OK(rank, braid_group_start());
        for (size_t i = 0; i < NBOUNCE; i++) {
            if (!together) MP_OK(rank, braid_group_start());
            MP_OK(rank, braid_send(in[i], bounce_sizes[i], BRAID_UINT8, next, comm));
            MP_OK(rank, braid_recv(out[i], bounce_sizes[i], BRAID_UINT8, prev, comm));
            if (!together) MP_OK(rank, braid_group_end());
        }
        if (together) MP_OK(rank, braid_group_end());
        for (size_t i = 0; i < NBOUNCE; i++) {
            char what[96];
            snprintf(what, sizeof(what), "message %zu (%zu bytes, %s) from %d", i, bounce_sizes[i],
                     together ? "one group" : "one by one", prev);
            MP_CHECK(rank,
                     !data_check_rank(out[i], BRAID_UINT8, BRAID_SUM, prev, 0, bounce_sizes[i],
                                      seed_of(prev, rank, (int)i + 100 * together), what),
                     "%s", what);
            free(in[i]);
            free(out[i]);
        }
    }
    for (size_t i = 0; i < NBOUNCE; i++) {
        size_t count = bounce_sizes[i] / 4;
        float *in = data_xmalloc(count * 4 + 4), *out = data_xmalloc(count * 4 + 4);
        data_fill(in, BRAID_FLOAT32, BRAID_SUM, rank, 0, count, 300 + (int)i);
        MP_OK(rank, braid_allreduce(in, out, count, BRAID_FLOAT32, BRAID_SUM, comm));
        char what[64];
        snprintf(what, sizeof(what), "allreduce of %zu", count);
        MP_CHECK(
            rank,
            !data_check_reduced(out, BRAID_FLOAT32, BRAID_SUM, n, 0, count, 300 + (int)i, what),
            "%s", what);
        free(in);
        free(out);
    }
    return 0;
}

Test(p2p, tcp_frames_around_the_bounce_size, .timeout = 240)
{
    setenv("BRAID_TRANSPORT", "tcp", 1);
    for (int n = 2; n <= 3; n++)
        cr_assert_eq(mp_run(n, bounce_frames, NULL, 200), 0, "tcp n=%d", n);
}

/* ---- grouped send/recv followed by collectives, over tcp ---------------------------------- */
/* The perf tools' pattern: a ring exchange of a multi-frame message, then a small all-reduce
 * and a barrier, many times. A rank whose exchange finished with frames still queued in the
 * transport (tcp: not yet in the kernel) enters the collective at once; its peer, still
 * receiving those frames, sees the collective's messages on other sockets: never a mismatch
 * (braid_p2p_flush, and check_coll_foreign's wait for a receive from an asynchronous
 * sender). Every exchange's data is checked. */
static int exchange_then_collective(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    int iters = data_quick() ? 40 : 120;
    for (int it = 0; it < iters; it++) {
        size_t count = (it % 3 == 0 ? 300007 : 70001) + (size_t)it; /* 2.2 MB / 0.5 MB float32 */
        float *in = data_xmalloc(count * 4), *out = data_xmalloc(count * 4);
        data_fill(in, BRAID_FLOAT32, BRAID_SUM, rank, 0, count, seed_of(rank, next, it));
        MP_OK(rank, braid_group_start());
        MP_OK(rank, braid_send(in, count, BRAID_FLOAT32, next, comm));
        MP_OK(rank, braid_recv(out, count, BRAID_FLOAT32, prev, comm));
        MP_OK(rank, braid_group_end());
        char what[96];
        snprintf(what, sizeof(what), "exchange %d (count %zu) from rank %d", it, count, prev);
        MP_CHECK(rank,
                 !data_check_rank(out, BRAID_FLOAT32, BRAID_SUM, prev, 0, count,
                                  seed_of(prev, rank, it), what),
                 "%s", what);
        int64_t v = rank + it, sum = 0;
        MP_OK(rank, braid_allreduce(&v, &sum, 1, BRAID_INT64, BRAID_SUM, comm));
        MP_CHECK(rank, sum == (int64_t)n * (n - 1) / 2 + (int64_t)n * it, "all-reduce %d: %lld", it,
                 (long long)sum);
        if (it % 4 == 3) MP_OK(rank, braid_barrier(comm));
        free(in);
        free(out);
    }
    return 0;
}

Test(p2p, exchange_then_collectives_over_tcp, .timeout = 240)
{
    setenv("BRAID_TRANSPORT", "tcp", 1);
    setenv("BRAID_YIELD_US", "0", 1); /* mismatch checks as soon as a receive waits */
    int ns[] = {2, 3};
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++)
        cr_assert_eq(mp_run(ns[i], exchange_then_collective, NULL, 200), 0, "tcp n=%d", ns[i]);
    unsetenv("BRAID_YIELD_US");
}

/* ---- order per pair, blocking and non-blocking forms without groups ----------------------- */
static int in_order(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    /* 0 -> n-1: a train of messages of varying sizes and dtypes, small ones blocking (they
     * are buffered), big ones with isend; the receiver takes them in order with irecv. */
    size_t counts[] = {5, 0, 1, 70001, 3, 250007, 2};
    int k = sizeof(counts) / sizeof(counts[0]);
    int last = n - 1;
    if (rank == 0) {
        char *bufs[16];
        braid_request_t reqs[16];
        int nr = 0;
        for (int i = 0; i < k; i++) {
            braid_datatype_t dt = (braid_datatype_t)(i % BRAID_NUM_DTYPES);
            bufs[i] = data_xmalloc(counts[i] * 8 + 8);
            data_fill(bufs[i], dt, BRAID_SUM, 0, 0, counts[i], seed_of(0, last, i));
            if (counts[i] > 1000)
                MP_OK(rank, braid_isend(bufs[i], counts[i], dt, last, comm, &reqs[nr++]));
            else
                MP_OK(rank, braid_send(bufs[i], counts[i], dt, last, comm));
        }
        for (int i = 0; i < nr; i++)
            MP_OK(rank, braid_wait(reqs[i]));
        for (int i = 0; i < k; i++)
            free(bufs[i]);
    }
    if (rank == last) {
        char *bufs[16];
        braid_request_t reqs[16];
        for (int i = 0; i < k; i++) {
            bufs[i] = data_xmalloc(counts[i] * 8 + 8);
            braid_datatype_t dt = (braid_datatype_t)(i % BRAID_NUM_DTYPES);
            MP_OK(rank, braid_irecv(bufs[i], counts[i], dt, 0, comm, &reqs[i]));
        }
        for (int i = 0; i < k; i++) {
            MP_OK(rank, braid_wait(reqs[i]));
            braid_datatype_t dt = (braid_datatype_t)(i % BRAID_NUM_DTYPES);
            MP_CHECK(rank,
                     !data_check_rank(bufs[i], dt, BRAID_SUM, 0, 0, counts[i], seed_of(0, last, i),
                                      "train"),
                     "message %d", i);
            free(bufs[i]);
        }
    }
    /* isend to next and irecv from prev without a group (the worker runs them together). */
    size_t big = 300007;
    float *in = data_xmalloc(big * 4), *out = data_xmalloc(big * 4);
    int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    data_fill(in, BRAID_FLOAT32, BRAID_SUM, rank, 0, big, seed_of(rank, next, 9));
    braid_request_t rs, rr;
    MP_OK(rank, braid_isend(in, big, BRAID_FLOAT32, next, comm, &rs));
    MP_OK(rank, braid_irecv(out, big, BRAID_FLOAT32, prev, comm, &rr));
    MP_OK(rank, braid_wait(rr));
    MP_OK(rank, braid_wait(rs));
    MP_CHECK(rank,
             !data_check_rank(out, BRAID_FLOAT32, BRAID_SUM, prev, 0, big, seed_of(prev, rank, 9),
                              "iring"),
             "isend/irecv ring");
    /* A collective right after (its own connections, its own numbering). */
    float x = (float)rank, y = 0;
    MP_OK(rank, braid_allreduce(&x, &y, 1, BRAID_FLOAT32, BRAID_SUM, comm));
    MP_CHECK(rank, y == (float)(n * (n - 1) / 2), "allreduce after p2p: %g", y);
    free(in);
    free(out);
    return 0;
}

Test(p2p, messages_keep_their_order_per_pair, .timeout = 120)
{
    int ns[] = {1, 2, 3, 4};
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++)
        cr_assert_eq(mp_run(ns[i], in_order, NULL, 100), 0, "n=%d", ns[i]);
    setenv("BRAID_TRANSPORT", "tcp", 1);
    cr_assert_eq(mp_run(3, in_order, NULL, 100), 0, "tcp n=3");
}

/* ---- messages to self --------------------------------------------------------------------- */
static int to_self(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    (void)n;
    int32_t a[5] = {rank, 2, 3, 4, 5}, b[5] = {0};
    MP_OK(rank, braid_send(a, 5, BRAID_INT32, rank, comm)); /* buffered */
    a[0] = -1;
    MP_OK(rank, braid_recv(b, 5, BRAID_INT32, rank, comm));
    MP_CHECK(rank, b[0] == rank && b[4] == 5, "self message: %d %d", b[0], b[4]);
    /* nothing sent to self: an error now, not a hang */
    braid_result_t r = braid_recv(b, 5, BRAID_INT32, rank, comm);
    MP_CHECK(rank, r == BRAID_ERR_INVALID_USAGE && strstr(braid_last_error(), "self"),
             "recv from self with nothing sent: %s %s", braid_strerror(r), braid_last_error());
    return 0;
}

/* A group's receive from self with no send to self, among receives from a peer that sends
 * later: an error at once (not after the timeout) naming the receive; the peer's send then
 * finds the communicator failed. */
static int self_recv_among_others(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    (void)n;
    int32_t a[4] = {1, 2, 3, 4}, b[4], c[4];
    if (rank == 1) {
        sleep(4); /* without the early error, rank 0 waited for this send */
        braid_send(a, 4, BRAID_INT32, 0, comm); /* fails or is buffered: either is fine */
        return 0;
    }
    double t0 = proc_now_s();
    MP_OK(rank, braid_group_start());
    MP_OK(rank, braid_recv(c, 4, BRAID_INT32, 1, comm));
    MP_OK(rank, braid_recv(b, 4, BRAID_INT32, rank, comm));
    braid_result_t r = braid_group_end();
    MP_CHECK(rank,
             r == BRAID_ERR_INVALID_USAGE && strstr(braid_last_error(), "group call 2") &&
                 strstr(braid_last_error(), "self"),
             "group end: %s: %s", braid_strerror(r), braid_last_error());
    MP_CHECK(rank, proc_now_s() - t0 < 2, "the error took %.1f s", proc_now_s() - t0);
    return 0;
}

Test(p2p, a_groups_receive_from_self_with_no_send_fails_at_once, .timeout = 60)
{
    setenv("BRAID_TIMEOUT", "30", 1);
    cr_assert_eq(mp_run(2, self_recv_among_others, NULL, 40), 0);
}

static int to_self_group(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    (void)n;
    size_t count = 200003; /* more than a connection holds: the group must not wait */
    int64_t *a = data_xmalloc(count * 8), *b = data_xmalloc(count * 8);
    data_fill(a, BRAID_INT64, BRAID_SUM, rank, 0, count, 5);
    MP_OK(rank, braid_group_start());
    MP_OK(rank, braid_recv(b, count, BRAID_INT64, rank, comm)); /* the receive first */
    MP_OK(rank, braid_send(a, count, BRAID_INT64, rank, comm));
    MP_OK(rank, braid_group_end());
    MP_CHECK(rank, !data_check_rank(b, BRAID_INT64, BRAID_SUM, rank, 0, count, 5, "self"), "self");
    /* irecv before isend, no group: the worker matches them */
    braid_request_t rr, rs;
    memset(b, 0, count * 8);
    MP_OK(rank, braid_irecv(b, count, BRAID_INT64, rank, comm, &rr));
    MP_OK(rank, braid_isend(a, count, BRAID_INT64, rank, comm, &rs));
    MP_OK(rank, braid_wait(rs));
    MP_OK(rank, braid_wait(rr));
    MP_CHECK(rank, !data_check_rank(b, BRAID_INT64, BRAID_SUM, rank, 0, count, 5, "iself"),
             "iself");
    free(a);
    free(b);
    return 0;
}

Test(p2p, messages_to_self, .timeout = 60)
{
    cr_assert_eq(mp_run(1, to_self, NULL, 30), 0);
    cr_assert_eq(mp_run(3, to_self, NULL, 30), 0);
    cr_assert_eq(mp_run(1, to_self_group, NULL, 30), 0);
    cr_assert_eq(mp_run(2, to_self_group, NULL, 30), 0);
}
