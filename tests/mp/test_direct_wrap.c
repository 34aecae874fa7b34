/* The direct path's tags at their wrap-around (transport/shm_direct.h: block g publishes
 * 2g + 1 and 2g + 2 as uint32, so 2g + 2 is 0 for g = 2^31 - 1 modulo 2^31). The block counter
 * is started near that point with braid_direct_test_set_counter on every rank. */
#include "core/comm.h"
#include "data.h"
#include "mp.h"
#include "transport/shm_direct.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TestSuite(direct_wrap, .timeout = 120);

/* The first block whose 2g + 2 is 0 (modulo 2^32), in the k-th period of 2^31 blocks. */
static uint64_t wrap_block(int k)
{
    return ((uint64_t)1 << 31) - 1 + ((uint64_t)k << 31);
}

static braid_direct_t *direct_of(braid_comm_t c)
{
    return ((struct braid_comm *)c)->direct;
}

/* Every rank starts c's block counter at g; comm (another communicator, whose collectives do
 * not touch c's segments) fences the ranks around it. */
static int set_counter(braid_comm_t comm, braid_comm_t c, int rank, uint64_t g)
{
    MP_OK(rank, braid_barrier(comm));
    braid_direct_test_set_counter(direct_of(c), g);
    MP_OK(rank, braid_barrier(comm));
    return 0;
}

enum { K_RS, K_AG, K_REDUCE, K_AR, K_BCAST, K_KINDS };

/* One call of kind k on float32 sum (count per rank for reduce-scatter and all-gather), input
 * from braid_mem_alloc when mapped, else malloc; checked against the reference. With scribble,
 * the input is overwritten as soon as the call returned (as a caller may: the peers must be done
 * reading it in place). */
static int one_call(braid_comm_t c, int rank, int n, int k, size_t count, int mapped, int seed,
                    int scribble)
{
    size_t in_n = k == K_RS ? count * (size_t)n : count;
    size_t out_n = k == K_AG ? count * (size_t)n : count;
    float *in = NULL, *out = malloc(out_n * sizeof(float));
    if (mapped)
        MP_OK(rank, braid_mem_alloc((void **)&in, in_n * sizeof(float)));
    else
        in = malloc(in_n * sizeof(float));
    MP_CHECK(rank, in && out, "out of memory");
    data_fill(in, BRAID_FLOAT32, BRAID_SUM, rank, 0, in_n, seed);
    braid_result_t res;
    int root = 1 % n;
    if (k == K_RS)
        res = braid_reduce_scatter(in, out, count, BRAID_FLOAT32, BRAID_SUM, c);
    else if (k == K_AG)
        res = braid_allgather(in, out, count, BRAID_FLOAT32, c);
    else if (k == K_REDUCE)
        res = braid_reduce(in, out, count, BRAID_FLOAT32, BRAID_SUM, root, c);
    else if (k == K_AR)
        res = braid_allreduce(in, out, count, BRAID_FLOAT32, BRAID_SUM, c);
    else
        res = braid_broadcast(in, out, count, BRAID_FLOAT32, root, c);
    if (scribble) memset(in, 0xff, in_n * sizeof(float));
    MP_CHECK(rank, res == BRAID_SUCCESS, "kind %d: %s (%s)", k, braid_strerror(res),
             braid_last_error());
    size_t bad = 0;
    if (k == K_RS)
        bad = data_check_reduced(out, BRAID_FLOAT32, BRAID_SUM, n, (size_t)rank * count, count,
                                 seed, "wrap reduce_scatter");
    else if (k == K_AG)
        for (int j = 0; j < n; j++)
            bad += data_check_rank(out + (size_t)j * count, BRAID_FLOAT32, BRAID_SUM, j, 0, count,
                                   seed, "wrap allgather");
    else if (k == K_AR || (k == K_REDUCE && rank == root))
        bad = data_check_reduced(out, BRAID_FLOAT32, BRAID_SUM, n, 0, count, seed, "wrap reduce");
    else if (k == K_BCAST)
        bad = data_check_rank(out, BRAID_FLOAT32, BRAID_SUM, root, 0, count, seed, "wrap bcast");
    if (mapped)
        braid_mem_free(in);
    else
        free(in);
    free(out);
    MP_CHECK(rank, bad == 0, "kind %d count %zu: %zu wrong elements", k, count, bad);
    return 0;
}

/* Rank 0 reads its input in place (braid_mem_alloc) and arrives late, rank 1 early (asleep on
 * the futex, BRAID_SPIN_US=0): rank 0 must not return before rank 1's 2g + 2 of the call's last
 * block, the block whose 2g + 2 is 0 here (it returned at once when 0 meant "no blocks"). */
static int late_mapped_rank(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    braid_comm_t c = mp_fake_host_comm(comm, rank, 0, "direct");
    MP_CHECK(rank, c != NULL && direct_of(c), "no direct segments");
    int kinds[] = {K_RS, K_AG, K_REDUCE}; /* reduce: rank 0 is not the root */
    int seed = 1;
    for (int ki = 0; ki < 3; ki++)
        for (int rep = 0; rep < 6; rep++) {
            if (set_counter(comm, c, rank, wrap_block(rep % 3))) return 1;
            if (rank == 0) usleep(20 * 1000);
            if (one_call(c, rank, n, kinds[ki], 1024, rank == 0, seed, rank == 0)) return 1;
            if (rank == 0) {
                braid_direct_t *d = direct_of(c);
                uint64_t g = *braid_direct_counter(d) - 1;
                MP_CHECK(rank, (uint32_t)(2 * g + 2) == 0, "block %llu is not at the wrap",
                         (unsigned long long)g);
                MP_CHECK(rank, braid_direct_ready(braid_direct_line(d, 1, (int)(g & 1)), 0),
                         "kind %d rep %d: returned before rank 1 was done reading its input",
                         kinds[ki], rep);
            }
            /* rank 1 checks its result after rank 0 scribbled its input */
            MP_OK(rank, braid_barrier(comm));
            seed++;
        }
    MP_OK(rank, braid_comm_destroy(c));
    return 0;
}

Test(direct_wrap, mapped_input_waits_for_the_last_block_at_the_tag_wrap)
{
    setenv("BRAID_SPIN_US", "0", 1);
    setenv("BRAID_YIELD_US", "0", 1);
    cr_assert_eq(mp_run(2, late_mapped_rank, NULL, 100), 0, "some rank failed (see stderr)");
    unsetenv("BRAID_YIELD_US");
    unsetenv("BRAID_SPIN_US");
}

/* Every direct collective, one and several blocks, buffers mapped or not, in a stream that
 * starts a few blocks before the wrap: every result exact. */
static int across_the_wrap(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    braid_comm_t c = mp_fake_host_comm(comm, rank, 0, "direct");
    MP_CHECK(rank, c != NULL && direct_of(c), "no direct segments");
    size_t counts[] = {3, 1000, 300001}; /* inline, one block, several */
    int seed = 7;
    for (int w = 0; w < 2; w++) {
        if (set_counter(comm, c, rank, wrap_block(w) - 3)) return 1;
        for (int k = 0; k < K_KINDS; k++)
            for (int ci = 0; ci < 3; ci++)
                for (int mapped = 0; mapped < 2; mapped++)
                    if (one_call(c, rank, n, k, counts[ci], mapped, seed++, 0)) return 1;
        MP_CHECK(rank, *braid_direct_counter(direct_of(c)) > wrap_block(w) + 1,
                 "the stream did not cross the wrap");
    }
    MP_OK(rank, braid_comm_destroy(c));
    return 0;
}

Test(direct_wrap, every_collective_exact_across_the_tag_wrap)
{
    for (int n = 2; n <= 3; n++)
        cr_assert_eq(mp_run(n, across_the_wrap, NULL, 100), 0, "n=%d: some rank failed", n);
}

/* A peer's slot whose tag is 0 because 2g + 2 wrapped is a published block: braid_direct_peek
 * (a rank that runs the call with another algorithm looks there) finds the call in it. */
static int peek_at_zero(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    (void)n;
    braid_comm_t c = mp_fake_host_comm(comm, rank, 0, "direct");
    MP_CHECK(rank, c != NULL && direct_of(c), "no direct segments");
    static float v[4096];       /* 16 KiB: the large all-reduce, which publishes 2g + 2 */
    for (int i = 0; i < 2; i++) /* both slots hold earlier calls' descriptors */
        MP_OK(rank, braid_allreduce(v, v, 4096, BRAID_FLOAT32, BRAID_SUM, c));
    if (set_counter(comm, c, rank, wrap_block(0))) return 1;
    data_fill(v, BRAID_FLOAT32, BRAID_SUM, rank, 0, 4096, 3);
    MP_OK(rank, braid_allreduce(v, v, 4096, BRAID_FLOAT32, BRAID_SUM, c));
    MP_OK(rank, braid_barrier(comm)); /* the peer's last tag is in */
    braid_direct_t *d = direct_of(c);
    int peer = 1 - rank;
    const braid_direct_line_t *l = braid_direct_line(d, peer, (int)(wrap_block(0) & 1));
    MP_CHECK(rank, atomic_load(&l->tag) == 0, "tag %u, not the wrapped 0", atomic_load(&l->tag));
    uint32_t seq = ((struct braid_comm *)c)->seq;
    int got = -1;
    braid_msg_hdr_t h;
    MP_CHECK(rank, braid_direct_peek((struct braid_comm *)c, seq, &got, &h) == 1,
             "call #%u not seen in the peer's slot", seq);
    MP_CHECK(rank, got == peer && h.coll == BRAID_COLL_ALLREDUCE && h.count == 4096,
             "peer %d coll %d count %llu", got, h.coll, (unsigned long long)h.count);
    MP_OK(rank, braid_comm_destroy(c));
    return 0;
}

Test(direct_wrap, peek_sees_a_slot_whose_tag_wrapped_to_0)
{
    cr_assert_eq(mp_run(2, peek_at_zero, NULL, 60), 0, "some rank failed (see stderr)");
}
