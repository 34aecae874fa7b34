/* Direct receives in ring plans over TCP (src/core/engine.c, recv_direct): the steps that only
 * copy what they receive (recv, recvCopySend) take the payload from the socket straight into
 * the output. As real processes on loopback (BRAID_TRANSPORT=tcp): the data is bit-exact for
 * all-gather, broadcast and all-reduce (several chunks per call, in place and not, an odd
 * count, misaligned buffers), every byte of an all-gather or broadcast reaches the output
 * through a direct receive (the transport's counters: read straight from the socket plus
 * copied from a frame read ahead into a slot equal the bytes received), and most come
 * straight from the socket. The faults (a killed rank, an abort) are test_tcp.c's, which run
 * the same plans. */
#include "core/comm.h"
#include "data.h"
#include "mp.h"
#include "transport/tcp.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

/* The ring connections' counters since the last call (deltas). */
static void rx_delta(braid_comm_t comm, uint64_t *direct_p, uint64_t *copied_p, uint64_t last[2])
{
    uint64_t d, c;
    braid_tcp_ring_rx_bytes(comm, &d, &c);
    *direct_p = d - last[0];
    *copied_p = c - last[1];
    last[0] = d;
    last[1] = c;
}

static int ring_direct(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    /* 1 MiB + 3 elements per rank: 8+ frames of 128 KiB per block; +1 byte misaligns. */
    size_t count = (1u << 20) / 4 + 3, es = 4, total = count * (size_t)n * es;
    char *in_mem = data_xmalloc(total + 1), *out_mem = data_xmalloc(total + 1);
    char *in = in_mem + 1, *out = out_mem + 1;
    uint64_t last[2] = {0, 0}, direct, copied, sum_direct = 0, sum_all = 0;
    char what[128];
    rx_delta(comm, &direct, &copied, last);
    for (int round = 0; round < 3; round++) {
        int seed = 50 + round;
        /* All-gather: every block but this rank's own arrives through a copy step. */
        data_fill(in, BRAID_FLOAT32, BRAID_SUM, rank, 0, count, seed);
        memset(out, 0xCD, total);
        snprintf(what, sizeof(what), "tcp allgather n=%d round %d", n, round);
        MP_OK(rank, braid_allgather(in, out, count, BRAID_FLOAT32, comm));
        for (int b = 0; b < n; b++)
            MP_CHECK(rank,
                     !data_check_rank(out + (size_t)b * count * es, BRAID_FLOAT32, BRAID_SUM, b, 0,
                                      count, seed, what),
                     "%s block %d", what, b);
        rx_delta(comm, &direct, &copied, last);
        MP_CHECK(rank, direct + copied == (uint64_t)(n - 1) * count * es,
                 "%s: %llu bytes straight + %llu copied, expected %zu received", what,
                 (unsigned long long)direct, (unsigned long long)copied,
                 (size_t)(n - 1) * count * es);
        sum_direct += direct;
        sum_all += direct + copied;
        /* Broadcast from a rotating root, in place: everyone but the root receives it all. */
        int root = round % n;
        data_fill(out, BRAID_FLOAT32, BRAID_SUM, rank == root ? root : 99, 0, count, seed);
        snprintf(what, sizeof(what), "tcp broadcast n=%d root %d", n, root);
        MP_OK(rank, braid_broadcast(out, out, count, BRAID_FLOAT32, root, comm));
        MP_CHECK(rank, !data_check_rank(out, BRAID_FLOAT32, BRAID_SUM, root, 0, count, seed, what),
                 "%s", what);
        rx_delta(comm, &direct, &copied, last);
        uint64_t want = rank == root ? 0 : (uint64_t)count * es;
        MP_CHECK(rank, direct + copied == want,
                 "%s: %llu bytes straight + %llu copied, expected %llu", what,
                 (unsigned long long)direct, (unsigned long long)copied, (unsigned long long)want);
        sum_direct += direct;
        sum_all += direct + copied;
        /* All-reduce, out of place and in place: its all-gather half goes direct. */
        for (int in_place = 0; in_place < 2; in_place++) {
            if (data_check_allreduce(comm, rank, n, BRAID_FLOAT32, BRAID_SUM, count * (size_t)n,
                                     in_place, 0, seed + 10 * in_place, "tcp direct"))
                return 1;
            rx_delta(comm, &direct, &copied, last);
            MP_CHECK(rank, direct > 0, "all-reduce n=%d in_place=%d: nothing received directly", n,
                     in_place);
        }
    }
    /* Frames read ahead into a slot are the exception: the engine asks for the next frame
     * only when it has its place in the output. */
    MP_CHECK(rank, sum_direct * 2 > sum_all,
             "only %llu of %llu bytes came straight from the socket",
             (unsigned long long)sum_direct, (unsigned long long)sum_all);
    free(in_mem);
    free(out_mem);
    return 0;
}

TestSuite(tcp_direct, .timeout = 120);

Test(tcp_direct, copy_steps_receive_straight_into_the_output)
{
    setenv("BRAID_TRANSPORT", "tcp", 1);
    setenv("BRAID_ALGO", "ring", 1);
    for (int n = 2; n <= 4; n++)
        cr_assert_eq(mp_run(n, ring_direct, NULL, 100), 0, "n=%d: some rank failed (see stderr)",
                     n);
}

/* Several channels and a small slot: a call's frames are spread over the ring connections and
 * the output is written by many short direct receives. */
Test(tcp_direct, channels_and_small_chunks)
{
    setenv("BRAID_TRANSPORT", "tcp", 1);
    setenv("BRAID_ALGO", "ring", 1);
    setenv("BRAID_NCHANNELS", "2", 1);
    setenv("BRAID_CHUNK_SIZE", "4K", 1);
    setenv("BRAID_NSLOTS", "2", 1);
    cr_assert_eq(mp_run(3, ring_direct, NULL, 100), 0, "see stderr");
}
