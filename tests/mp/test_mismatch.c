/* Ranks that disagree on a call: every kind ends in BRAID_ERR_MISMATCH on every rank, naming
 * both calls, within 5 s, a quarter of the timeout (never a timeout, never success everywhere), on
 * shm and tcp, with 2 and 3 ranks. The last rank (rank n-1) is the odd one out.
 *
 * A rank whose own part of the mismatched call was complete (all it had to receive came from
 * ranks that agreed with it) may return success from it: its next call (a barrier here) must
 * then fail with the mismatch. A rank that rejected its call (bad argument) gets
 * BRAID_ERR_INVALID_ARG from it and the mismatch from its next call. */
#include "oddrank.h"
#include "proc.h"

#include <criterion/criterion.h>
#include <string.h>
#include <unistd.h>

typedef enum {
    BCAST_ROOTS,    /* broadcast: rank n-1 names root 1, the others root 0 */
    REDUCE_ROOTS,   /* reduce: the same */
    COUNT_ZERO,     /* all-reduce: rank n-1 passes count 0, the others count > 0 */
    BCAST_ZERO,     /* broadcast from rank 0: rank n-1 passes count 0 */
    SPLIT,          /* rank n-1 calls braid_comm_split, the others an all-reduce */
    SPLIT_MOST,     /* the others call braid_comm_split, rank n-1 an all-reduce */
    REJECTED,       /* rank n-1's all-reduce has a bad op, the others' is valid */
    REJECTED_ROOT,  /* rank n-1's broadcast has root = nranks, the others' root 0 */
    REJECTED_SPLIT, /* rank n-1's braid_comm_split has newcomm_p NULL, the others' is valid */
    /* The collectives on the send/recv connections, rejected on rank n-1 only: */
    P_REJECTED_ALLTOALL, /* alltoall with dtype 99 */
    P_REJECTED_GATHER,   /* gather with root = nranks (the others' root 0) */
    P_REJECTED_SCATTER,  /* scatter with root = nranks */
    P_REJECTED_RSV,      /* reduce_scatterv with op 99 */
    P_REJECTED_AGV,      /* allgatherv with recvcounts NULL */
    P_REJECTED_A2AV,     /* alltoallv sending itself one element more than it receives */
    /* Point-to-point against a collective: rank n-1 calls send / recv with rank n-2 (its ring
     * predecessor) while the others call the collective. */
    SEND_VS_ALLREDUCE,
    RECV_VS_ALLREDUCE,
    /* RECV_VS_ALLREDUCE after a reduce to rank n-2 that rank 0 enters 200 ms late: rank n-1
     * leaves the reduce first, so its receive's notice (sent once) reaches rank n-2 while rank
     * n-2 still waits in the reduce, where it is no mismatch yet (n = 3) */
    RECV_AFTER_LATE_REDUCE,
    SEND_VS_BCAST,
    SEND_VS_ALLTOALL,
    RECV_VS_ALLTOALL,
    ALLTOALL_VS_ALLREDUCE, /* rank n-1 calls alltoall, the others all-reduce */
    /* rank n-1 sends to rank 0, its ring successor (which sends it nothing in the ring when
     * n = 3, but waits for it), while the others call all-reduce */
    SEND_TO_SUCCESSOR
} kind_t;

typedef struct {
    kind_t kind;
    size_t count;
    const char *word1, *word2; /* the final message names both calls with these */
} case_t;

static braid_result_t odd_call(const case_t *c, braid_comm_t comm, int rank, int n, float *buf)
{
    int odd = rank == n - 1;
    switch (c->kind) {
    case BCAST_ROOTS:
        return braid_broadcast(buf, buf, c->count, BRAID_FLOAT32, odd ? 1 : 0, comm);
    case REDUCE_ROOTS:
        return braid_reduce(buf, buf, c->count, BRAID_FLOAT32, BRAID_SUM, odd ? 1 : 0, comm);
    case COUNT_ZERO:
        return braid_allreduce(buf, buf, odd ? 0 : c->count, BRAID_FLOAT32, BRAID_SUM, comm);
    case BCAST_ZERO:
        return braid_broadcast(buf, buf, odd ? 0 : c->count, BRAID_FLOAT32, 0, comm);
    case SPLIT:
    case SPLIT_MOST:
        if (odd == (c->kind == SPLIT)) {
            braid_comm_t nc = NULL;
            braid_result_t r = braid_comm_split(comm, 0, rank, &nc);
            if (nc) braid_comm_destroy(nc);
            return r;
        }
        return braid_allreduce(buf, buf, c->count, BRAID_FLOAT32, BRAID_SUM, comm);
    case REJECTED:
        return braid_allreduce(buf, buf, c->count, BRAID_FLOAT32,
                               odd ? (braid_redop_t)99 : BRAID_SUM, comm);
    case REJECTED_ROOT:
        return braid_broadcast(buf, buf, c->count, BRAID_FLOAT32, odd ? n : 0, comm);
    case P_REJECTED_ALLTOALL:
        return braid_alltoall(buf, buf + 4 * c->count, c->count,
                              odd ? (braid_datatype_t)99 : BRAID_FLOAT32, comm);
    case P_REJECTED_GATHER:
        return braid_gather(buf, buf + 4 * c->count, c->count, BRAID_FLOAT32, odd ? n : 0, comm);
    case P_REJECTED_SCATTER:
        return braid_scatter(buf, buf + 4 * c->count, c->count, BRAID_FLOAT32, odd ? n : 0, comm);
    case P_REJECTED_A2AV: {
        size_t sc[3], rc[3], dsp[3];
        for (int i = 0; i < 3; i++) {
            sc[i] = rc[i] = c->count;
            dsp[i] = (size_t)i * (c->count + 1);
        }
        if (odd) sc[rank]++;
        return braid_alltoallv(buf, sc, dsp, buf + 4 * c->count, rc, dsp, BRAID_FLOAT32, comm);
    }
    case P_REJECTED_RSV:
    case P_REJECTED_AGV: {
        size_t counts[3] = {c->count, c->count + 1, c->count + 2}, displs[3];
        for (int i = 0; i < 3; i++)
            displs[i] = (size_t)i * (c->count + 2);
        if (c->kind == P_REJECTED_RSV)
            return braid_reduce_scatterv(buf, buf + 4 * c->count, counts, BRAID_FLOAT32,
                                         odd ? (braid_redop_t)99 : BRAID_SUM, comm);
        return braid_allgatherv(buf, counts[rank], buf + 4 * c->count, odd ? NULL : counts, displs,
                                BRAID_FLOAT32, comm);
    }
    case SEND_VS_ALLREDUCE:
    case SEND_VS_BCAST:
    case SEND_VS_ALLTOALL:
        if (odd) return braid_send(buf, 4 * c->count, BRAID_FLOAT32, n - 2, comm);
        if (c->kind == SEND_VS_BCAST)
            return braid_broadcast(buf, buf, c->count, BRAID_FLOAT32, 0, comm);
        if (c->kind == SEND_VS_ALLTOALL)
            return braid_alltoall(buf, buf + 4 * c->count, c->count, BRAID_FLOAT32, comm);
        return braid_allreduce(buf, buf, c->count, BRAID_FLOAT32, BRAID_SUM, comm);
    case RECV_AFTER_LATE_REDUCE: {
        if (rank == 0) usleep(200 * 1000);
        braid_result_t r =
            braid_reduce(buf, buf + 4 * c->count, c->count, BRAID_FLOAT32, BRAID_SUM, n - 2, comm);
        if (r != BRAID_SUCCESS) return r;
    }
    /* fall through */
    case RECV_VS_ALLREDUCE:
    case RECV_VS_ALLTOALL:
        if (odd) return braid_recv(buf, c->count, BRAID_FLOAT32, n - 2, comm);
        if (c->kind == RECV_VS_ALLTOALL)
            return braid_alltoall(buf, buf + 4 * c->count, c->count, BRAID_FLOAT32, comm);
        return braid_allreduce(buf, buf, c->count, BRAID_FLOAT32, BRAID_SUM, comm);
    case ALLTOALL_VS_ALLREDUCE:
        if (odd) return braid_alltoall(buf, buf + 4 * c->count, c->count, BRAID_FLOAT32, comm);
        return braid_allreduce(buf, buf, c->count, BRAID_FLOAT32, BRAID_SUM, comm);
    case SEND_TO_SUCCESSOR:
        if (odd) return braid_send(buf, 4 * c->count, BRAID_FLOAT32, 0, comm);
        return braid_allreduce(buf, buf, c->count, BRAID_FLOAT32, BRAID_SUM, comm);
    case REJECTED_SPLIT: {
        braid_comm_t nc = NULL;
        braid_result_t r = braid_comm_split(comm, 0, rank, odd ? NULL : &nc);
        if (nc) braid_comm_destroy(nc);
        return r;
    }
    }
    return BRAID_ERR_INTERNAL;
}

static int run_case(braid_comm_t comm, int rank, int n, void *arg)
{
    const case_t *c = arg;
    /* Room for every call's input and output (n <= 3): 4 * count + 8 elements each. */
    float *buf = calloc(8 * c->count + 16, sizeof(float));
    MP_CHECK(rank, buf, "out of memory");
    for (size_t i = 0; i < 8 * c->count + 16; i++)
        buf[i] = (float)(rank * 3 + (int)(i % 11));
    MP_OK(rank, braid_barrier(comm)); /* start together: the time bound is the detection's */
    double t0 = proc_now_s();
    braid_result_t r = odd_call(c, comm, rank, n, buf);
    char first_msg[600];
    snprintf(first_msg, sizeof(first_msg), "%s", braid_last_error());
    int rejecter = (c->kind == REJECTED || c->kind == REJECTED_ROOT || c->kind == REJECTED_SPLIT ||
                    (c->kind >= P_REJECTED_ALLTOALL && c->kind <= P_REJECTED_A2AV)) &&
                   rank == n - 1;
    free(buf);
    if (rejecter)
        MP_CHECK(rank, r == BRAID_ERR_INVALID_ARG, "the rejected call returned %s: %s",
                 braid_strerror(r), first_msg);
    return odd_expect_mismatch(comm, rank, n, r, first_msg, rejecter, t0, c->word1, c->word2);
}

static void run_all(const case_t *c)
{
    cr_expect_eq(odd_run_all(run_case, (void *)c), 0, "kind %d (see stderr)", (int)c->kind);
}

TestSuite(mismatch, .timeout = 240);

Test(mismatch, broadcast_with_different_roots_small)
{
    case_t c = {BCAST_ROOTS, 5, "root 0", "root 1"};
    run_all(&c);
}

Test(mismatch, broadcast_with_different_roots_large)
{
    case_t c = {BCAST_ROOTS, (size_t)1 << 20, "root 0", "root 1"};
    run_all(&c);
}

Test(mismatch, reduce_with_different_roots_small)
{
    case_t c = {REDUCE_ROOTS, 5, "root 0", "root 1"};
    run_all(&c);
}

Test(mismatch, reduce_with_different_roots_large)
{
    case_t c = {REDUCE_ROOTS, (size_t)1 << 20, "root 0", "root 1"};
    run_all(&c);
}

Test(mismatch, count_zero_against_count_nonzero)
{
    case_t c = {COUNT_ZERO, 7, "count 0", "count 7"};
    run_all(&c);
    case_t big = {COUNT_ZERO, (size_t)1 << 20, "count 0", "count 1048576"};
    run_all(&big);
}

Test(mismatch, broadcast_count_zero_against_count_nonzero)
{
    case_t c = {BCAST_ZERO, 9, "count 0", "count 9"};
    run_all(&c);
}

Test(mismatch, split_against_a_collective)
{
    case_t c = {SPLIT, 9, "comm_split", "allreduce"};
    run_all(&c);
    case_t big = {SPLIT, (size_t)1 << 20, "comm_split", "allreduce"};
    run_all(&big);
    case_t most = {SPLIT_MOST, 9, "comm_split", "allreduce"};
    run_all(&most);
}

Test(mismatch, call_rejected_on_one_rank_only)
{
    case_t c = {REJECTED, 9, "rejected", "op 99"};
    run_all(&c);
    case_t root = {REJECTED_ROOT, 9, "rejected", "root 0"};
    run_all(&root);
}

/* Seven ranks, where recursive doubling pairs extra ranks with core ones: the rejecting rank
 * tells its ring successor, whose failure notice must reach ranks that wait on other peers
 * (they waited out their timeout in a cycle before braid_comm_peer_failure). Every forced
 * algorithm and the automatic choice, over shm and tcp. */
Test(mismatch, call_rejected_on_one_rank_at_7_ranks_every_algorithm, .timeout = 400)
{
    static const char *algos[] = {"", "ring", "recdbl", "tree"}, *transports[] = {"shm", "tcp"};
    setenv("BRAID_TIMEOUT", "20", 1);
    case_t c = {REJECTED, 9, "rejected", "op 99"};
    for (size_t t = 0; t < 2; t++)
        for (size_t a = 0; a < sizeof(algos) / sizeof(algos[0]); a++) {
            setenv("BRAID_TRANSPORT", transports[t], 1);
            if (algos[a][0])
                setenv("BRAID_ALGO", algos[a], 1);
            else
                unsetenv("BRAID_ALGO");
            cr_expect_eq(mp_run(7, run_case, &c, 60), 0, "%s, algorithm '%s'", transports[t],
                         algos[a]);
        }
    unsetenv("BRAID_ALGO");
    unsetenv("BRAID_TRANSPORT");
    unsetenv("BRAID_TIMEOUT");
}

Test(mismatch, split_rejected_on_one_rank_only)
{
    case_t c = {REJECTED_SPLIT, 0, "rejected its comm_split", "called comm_split"};
    run_all(&c);
}

Test(mismatch, p2p_collective_rejected_on_one_rank_only)
{
    const size_t counts[] = {5, (size_t)1 << 18}; /* within the FIFOs, and beyond */
    for (int k = 0; k < 2; k++) {
        case_t a2a = {P_REJECTED_ALLTOALL, counts[k], "rejected its alltoall", "dtype=99"};
        run_all(&a2a);
        case_t g = {P_REJECTED_GATHER, counts[k], "rejected its gather", "is outside [0, nranks"};
        run_all(&g);
        case_t sc = {P_REJECTED_SCATTER, counts[k], "rejected its scatter", "called scatter"};
        run_all(&sc);
        case_t rsv = {P_REJECTED_RSV, counts[k], "rejected its reduce_scatterv", "op=99"};
        run_all(&rsv);
        case_t agv = {P_REJECTED_AGV, counts[k], "rejected its allgatherv", "recvcounts is NULL"};
        run_all(&agv);
        case_t a2av = {P_REJECTED_A2AV, counts[k], "rejected its alltoallv", "own block"};
        run_all(&a2av);
    }
}

/* Every rank rejects its p2p collective: nothing ran, the communicator stays usable (the next
 * calls pair with each other and give the right answers). */
static int all_reject(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    float in[8], out[8];
    for (int i = 0; i < 8; i++)
        in[i] = (float)(rank * 10 + i);
    for (int k = 0; k < 2; k++) {
        braid_result_t r = braid_alltoall(in, out, 1, (braid_datatype_t)99, comm);
        MP_CHECK(rank, r == BRAID_ERR_INVALID_ARG && strstr(braid_last_error(), "dtype=99"),
                 "rejected alltoall: %s: %s", braid_strerror(r), braid_last_error());
        r = braid_gather(in, out, 1, BRAID_FLOAT32, -1, comm);
        MP_CHECK(rank, r == BRAID_ERR_INVALID_ARG, "rejected gather: %s", braid_strerror(r));
    }
    MP_OK(rank, braid_alltoall(in, out, 2, BRAID_FLOAT32, comm));
    for (int src = 0; src < n; src++)
        for (int j = 0; j < 2; j++)
            MP_CHECK(rank, out[src * 2 + j] == (float)(src * 10 + rank * 2 + j),
                     "out[%d] = %g from rank %d", src * 2 + j, out[src * 2 + j], src);
    MP_OK(rank, braid_barrier(comm));
    return 0;
}

Test(mismatch, p2p_collective_rejected_everywhere_leaves_the_communicator_usable)
{
    cr_expect_eq(odd_run_all(all_reject, NULL), 0, "see stderr");
}

Test(mismatch, p2p_call_against_a_collective)
{
    /* sends of 4 * count float32 elements: 16 KiB (buffered) and 16 MiB (more than the FIFOs
     * and tcp's socket buffers: the send blocks) */
    const size_t counts[] = {1024, (size_t)1 << 20};
    for (int k = 0; k < 2; k++) {
        case_t sa = {SEND_VS_ALLREDUCE, counts[k], "called send", "called allreduce"};
        if (k == 1) run_all(&sa); /* a buffered send is followed by a barrier: tested below */
        case_t ra = {RECV_VS_ALLREDUCE, counts[k], "called recv", "called allreduce"};
        run_all(&ra);
        case_t sb = {SEND_VS_BCAST, counts[k], "send", "broadcast"};
        if (k == 1) run_all(&sb);
        case_t st = {SEND_VS_ALLTOALL, counts[k], "called send", "called alltoall"};
        if (k == 1) run_all(&st);
        case_t rt = {RECV_VS_ALLTOALL, counts[k], "called recv", "called alltoall"};
        run_all(&rt);
        case_t ta = {ALLTOALL_VS_ALLREDUCE, counts[k], "alltoall", "allreduce"};
        run_all(&ta);
    }
    /* A buffered send returns; the sender's next call (the barrier) meets the collective. */
    case_t small = {SEND_VS_ALLREDUCE, 16, "barrier", "allreduce"};
    run_all(&small);
}

/* The receive's notice reaches its peer inside an earlier collective (which the receiver left
 * first): the peer keeps it for its next one (over tcp nothing else tells either rank). */
Test(mismatch, recv_notice_taken_in_an_earlier_collective)
{
    case_t c = {RECV_AFTER_LATE_REDUCE, 1024, "called recv", "called allreduce"};
    run_all(&c);
}

/* A send of 16 MiB (more than the FIFOs and tcp's socket buffers) to the ring successor,
 * whose all-reduce sends the sender nothing with 3 ranks but waits for it: the successor's
 * notice tells the blocked sender. */
Test(mismatch, large_send_to_the_ring_successor_against_a_collective)
{
    case_t c = {SEND_TO_SUCCESSOR, (size_t)1 << 20, "called send", "called allreduce"};
    run_all(&c);
}
