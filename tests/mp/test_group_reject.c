/* A call that fails its argument checks inside a group (braid_group_start/end) on one rank
 * only: none of that rank's calls of the group is issued, but each tells its peers, so every
 * rank ends in an error within 5 s (never a timeout, never success everywhere), on shm
 * and tcp, with 2 and 3 ranks. The last rank (rank n-1) is the odd one out. A peer whose own
 * part of the group was complete (a buffered send, data from ranks that agreed) may return
 * success from its group end: its next call (a barrier) must then fail.
 * When every rank rejects the same group, nothing ran and the communicator stays usable. */
#include "oddrank.h"
#include "proc.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

typedef enum {
    BAD_PEER,     /* ring exchange (send to next, recv from prev): rank n-1's send names peer n+6 */
    BAD_DTYPE,    /* ring exchange: rank n-1's send has dtype 99 */
    BAD_BUF,      /* ring exchange: rank n-1's recv has recvbuf NULL */
    BAD_OP,       /* an all-reduce (op 99 on rank n-1), then the ring exchange */
    BAD_A2A,      /* an alltoall (dtype 99 on rank n-1), then an all-reduce */
    LONE_PEER,    /* rank n-1: a send to peer n+6 alone; rank 0: a receive from rank n-1 */
    BAD_FUSED,    /* three all-reduces that group end fuses (small counts): rank n-1's second has
                   * recvbuf NULL */
    BAD_FUSED_AG, /* the same with three all-gathers */
} kind_t;

typedef struct {
    kind_t kind;
    size_t count;
    const char *why;  /* the rejected call's message on rank n-1 contains it */
    const char *also; /* every rank's final message contains it (NULL: "rejected") */
} case_t;

static void fused_calls(braid_comm_t comm, int odd, float *in, float *out, size_t k,
                        braid_result_t *bad)
{
    braid_allreduce(in, out, k, BRAID_FLOAT32, BRAID_SUM, comm);
    braid_result_t r = braid_allreduce(in, odd ? NULL : out + k, k, BRAID_FLOAT32, BRAID_SUM, comm);
    if (odd) *bad = r;
    braid_allreduce(in, out + 2 * k, k, BRAID_FLOAT32, BRAID_SUM, comm);
}

static void fused_gathers(braid_comm_t comm, int odd, int n, float *in, float *out, size_t k,
                          braid_result_t *bad)
{
    braid_allgather(in, out, k, BRAID_FLOAT32, comm);
    braid_result_t r = braid_allgather(in, odd ? NULL : out + n * k, k, BRAID_FLOAT32, comm);
    if (odd) *bad = r;
    braid_allgather(in, out + 2 * n * k, k, BRAID_FLOAT32, comm);
}

/* Issues the group's calls; *bad = the result of the rejected one on rank n-1. */
static void group_calls(const case_t *c, braid_comm_t comm, int rank, int n, float *in, float *out,
                        braid_result_t *bad)
{
    int odd = rank == n - 1, next = (rank + 1) % n, prev = (rank + n - 1) % n;
    size_t k = c->count;
    braid_result_t r;
    *bad = BRAID_SUCCESS;
    switch (c->kind) {
    case BAD_PEER:
    case BAD_DTYPE:
    case BAD_BUF:
    case BAD_OP:
        if (c->kind == BAD_OP) {
            r = braid_allreduce(in, out + k, k, BRAID_FLOAT32, odd ? (braid_redop_t)99 : BRAID_SUM,
                                comm);
            if (odd) *bad = r;
        }
        r = braid_send(in, k, odd && c->kind == BAD_DTYPE ? (braid_datatype_t)99 : BRAID_FLOAT32,
                       odd && c->kind == BAD_PEER ? n + 6 : next, comm);
        if (odd && (c->kind == BAD_PEER || c->kind == BAD_DTYPE)) *bad = r;
        r = braid_recv(odd && c->kind == BAD_BUF ? NULL : out, k, BRAID_FLOAT32, prev, comm);
        if (odd && c->kind == BAD_BUF) *bad = r;
        break;
    case BAD_A2A:
        r = braid_alltoall(in, out, k, odd ? (braid_datatype_t)99 : BRAID_FLOAT32, comm);
        if (odd) *bad = r;
        braid_allreduce(in, out + 4 * k, k, BRAID_FLOAT32, BRAID_SUM, comm);
        break;
    case LONE_PEER:
        if (odd) *bad = braid_send(in, k, BRAID_FLOAT32, n + 6, comm);
        if (rank == 0) braid_recv(out, k, BRAID_FLOAT32, n - 1, comm);
        break;
    case BAD_FUSED:
        fused_calls(comm, odd, in, out, k, bad);
        break;
    case BAD_FUSED_AG:
        fused_gathers(comm, odd, n, in, out, k, bad);
        break;
    }
}

/* Elements of in and out the group's calls touch (group_calls), plus a margin. */
static size_t span(const case_t *c, int n)
{
    size_t k = c->count, m = 1;
    switch (c->kind) {
    case BAD_OP:
        m = 2; /* the all-reduce's output at out + k */
        break;
    case BAD_A2A:
        m = n > 5 ? (size_t)n : 5; /* n blocks; the all-reduce's output at out + 4k */
        break;
    case BAD_FUSED:
        m = 3;
        break;
    case BAD_FUSED_AG:
        m = 3 * (size_t)n;
        break;
    default:
        break;
    }
    return m * k + 16;
}

static int run_case(braid_comm_t comm, int rank, int n, void *arg)
{
    const case_t *c = arg;
    size_t len = span(c, n);
    float *in = calloc(len, sizeof(float)), *out = calloc(len, sizeof(float));
    MP_CHECK(rank, in && out, "out of memory");
    for (size_t i = 0; i < len; i++) {
        in[i] = (float)(rank * 3 + (int)(i % 11));
        out[i] = -1.0f;
    }
    MP_OK(rank, braid_barrier(comm)); /* start together: the time bound is the detection's */
    double t0 = proc_now_s();
    int odd = rank == n - 1;
    braid_result_t bad;
    MP_OK(rank, braid_group_start());
    group_calls(c, comm, rank, n, in, out, &bad);
    braid_result_t r = braid_group_end();
    char first_msg[2048];
    snprintf(first_msg, sizeof(first_msg), "%s", braid_last_error());
    if (odd) {
        MP_CHECK(rank, bad == BRAID_ERR_INVALID_ARG, "the rejected call returned %s",
                 braid_strerror(bad));
        MP_CHECK(rank, r == BRAID_ERR_INVALID_ARG, "group end returned %s: %s", braid_strerror(r),
                 first_msg);
        MP_CHECK(rank, strstr(first_msg, c->why) && strstr(first_msg, "group call"),
                 "group end's message lacks '%s': %s", c->why, first_msg);
        /* None of the group's calls was issued: nothing was received. */
        for (size_t i = 0; i < len; i++)
            MP_CHECK(rank, out[i] == -1.0f, "out[%zu] = %g: a call of the rejected group ran", i,
                     out[i]);
    }
    free(in);
    free(out);
    char who[32];
    snprintf(who, sizeof(who), "rank %d", n - 1);
    int rc = odd_expect_mismatch(comm, rank, n, r, first_msg, odd, t0, who,
                                 c->also ? c->also : "rejected");
    if (rc || (c->kind != BAD_FUSED && c->kind != BAD_FUSED_AG)) return rc;
    /* the rejected call named is the fused one: "rejected its allreduce #2 (..., 3 calls fused,
     * layout ...) (group call 2 ...)" */
    const char *m = braid_last_error(),
               *p = strstr(m, c->kind == BAD_FUSED ? "rejected its allreduce #"
                                                   : "rejected its allgather #");
    const char *q = p ? strstr(p, ") (") : NULL;
    MP_CHECK(rank, p && q && memmem(p, (size_t)(q - p), "3 calls fused", 13),
             "the rejected call named is not the fused one: %s", m);
    return 0;
}

static void run_all(const case_t *c)
{
    cr_expect_eq(odd_run_all(run_case, (void *)c), 0, "kind %d (see stderr)", (int)c->kind);
}

TestSuite(group_reject, .timeout = 240);

/* The case with 5 elements: within the FIFOs (the sends are buffered); and with 2^20: beyond
 * (they block). */
static void run_both_counts(kind_t kind, const char *why)
{
    static const size_t counts[] = {5, (size_t)1 << 20};
    for (int k = 0; k < 2; k++) {
        case_t c = {kind, counts[k], why, NULL};
        run_all(&c);
    }
}

Test(group_reject, send_with_a_bad_peer)
{
    run_both_counts(BAD_PEER, "is outside [0, nranks");
}

Test(group_reject, send_with_a_bad_dtype)
{
    run_both_counts(BAD_DTYPE, "dtype=99");
}

Test(group_reject, recv_with_a_null_buffer)
{
    run_both_counts(BAD_BUF, "recvbuf is NULL");
}

Test(group_reject, allreduce_with_a_bad_op_among_sends)
{
    run_both_counts(BAD_OP, "op");
}

Test(group_reject, alltoall_with_a_bad_dtype_before_an_allreduce)
{
    run_both_counts(BAD_A2A, "dtype=99");
}

Test(group_reject, lone_send_with_a_bad_peer)
{
    run_both_counts(LONE_PEER, "is outside [0, nranks");
}

/* 5 elements each: the peers fuse the three calls, and so does rank n-1's rejection (its
 * REJECTED message names the fused call, not its first call). */
Test(group_reject, allreduce_with_a_null_buffer_among_fused_ones)
{
    case_t c = {BAD_FUSED, 5, "recvbuf", "3 calls fused"};
    run_all(&c);
}

Test(group_reject, allgather_with_a_null_buffer_among_fused_ones)
{
    case_t c = {BAD_FUSED_AG, 5, "recvbuf", "3 calls fused"};
    run_all(&c);
}

/* Every rank rejects the same group (each kind above, all ranks odd): nothing ran, every rank
 * gets BRAID_ERR_INVALID_ARG from group end without "did not match", and the communicator
 * stays usable: a valid group of the same shape then gives the right answers. */
static int all_reject(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    enum { K = 7 };
    float in[4 * K], out[8 * K], sum[K];
    for (int i = 0; i < 4 * K; i++)
        in[i] = (float)(rank * 100 + i);
    for (int kind = BAD_PEER; kind <= BAD_FUSED_AG; kind++) {
        for (int i = 0; i < 8 * K; i++)
            out[i] = -1.0f;
        braid_result_t bad;
        MP_OK(rank, braid_group_start());
        switch (kind) {
        case LONE_PEER:
            bad = braid_send(in, K, BRAID_FLOAT32, n + 6, comm);
            break;
        case BAD_A2A:
            bad = braid_alltoall(in, out, K, (braid_datatype_t)99, comm);
            braid_allreduce(in, out + 4 * K, K, BRAID_FLOAT32, BRAID_SUM, comm);
            break;
        case BAD_FUSED:
            fused_calls(comm, 1, in, out, K, &bad);
            break;
        case BAD_FUSED_AG: /* 3 x n elements of out */
            fused_gathers(comm, 1, n, in, out, 1, &bad);
            break;
        default: {
            int next = (rank + 1) % n, prev = (rank + n - 1) % n;
            bad = BRAID_SUCCESS;
            if (kind == BAD_OP)
                bad = braid_allreduce(in, out + K, K, BRAID_FLOAT32, (braid_redop_t)99, comm);
            braid_result_t s =
                braid_send(in, K, kind == BAD_DTYPE ? (braid_datatype_t)99 : BRAID_FLOAT32,
                           kind == BAD_PEER ? n + 6 : next, comm);
            braid_result_t v =
                braid_recv(kind == BAD_BUF ? NULL : out, K, BRAID_FLOAT32, prev, comm);
            if (kind == BAD_PEER || kind == BAD_DTYPE) bad = s;
            if (kind == BAD_BUF) bad = v;
        }
        }
        braid_result_t r = braid_group_end();
        MP_CHECK(rank, bad == BRAID_ERR_INVALID_ARG, "kind %d: the rejected call returned %s", kind,
                 braid_strerror(bad));
        MP_CHECK(rank, r == BRAID_ERR_INVALID_ARG && !strstr(braid_last_error(), "did not match"),
                 "kind %d: group end returned %s: %s", kind, braid_strerror(r), braid_last_error());
        for (int i = 0; i < 8 * K; i++)
            MP_CHECK(rank, out[i] == -1.0f, "kind %d: out[%d] = %g: a rejected call ran", kind, i,
                     out[i]);
        /* Still usable: a ring exchange and an all-reduce, checked against the inputs. */
        int next = (rank + 1) % n, prev = (rank + n - 1) % n;
        MP_OK(rank, braid_group_start());
        MP_OK(rank, braid_allreduce(in, sum, K, BRAID_FLOAT32, BRAID_SUM, comm));
        MP_OK(rank, braid_send(in, K, BRAID_FLOAT32, next, comm));
        MP_OK(rank, braid_recv(out, K, BRAID_FLOAT32, prev, comm));
        MP_OK(rank, braid_group_end());
        for (int i = 0; i < K; i++) {
            float want = 0;
            for (int q = 0; q < n; q++)
                want += (float)(q * 100 + i);
            MP_CHECK(rank, sum[i] == want, "kind %d: sum[%d] = %g, want %g", kind, i, sum[i], want);
            MP_CHECK(rank, out[i] == (float)(prev * 100 + i), "kind %d: out[%d] = %g from rank %d",
                     kind, i, out[i], prev);
        }
    }
    MP_OK(rank, braid_barrier(comm));
    return 0;
}

Test(group_reject, rejected_everywhere_leaves_the_communicator_usable)
{
    cr_expect_eq(odd_run_all(all_reject, NULL), 0, "see stderr");
}

/* An i-form call of a rejected group gets a request that completes with the rejection (its
 * call was valid but is not issued); the peers fail as above. */
static int iform_request(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    float in[5] = {1, 2, 3, 4, 5}, out[5] = {-1, -1, -1, -1, -1};
    int odd = rank == n - 1, next = (rank + 1) % n, prev = (rank + n - 1) % n;
    braid_request_t req = NULL;
    MP_OK(rank, braid_group_start());
    MP_OK(rank, braid_irecv(out, 5, BRAID_FLOAT32, prev, comm, &req));
    braid_send(in, 5, odd ? (braid_datatype_t)99 : BRAID_FLOAT32, next, comm);
    braid_result_t r = braid_group_end();
    braid_result_t w = braid_wait(req);
    if (odd) {
        MP_CHECK(rank, r == BRAID_ERR_INVALID_ARG, "group end: %s", braid_strerror(r));
        MP_CHECK(rank, w == BRAID_ERR_INVALID_ARG && strstr(braid_last_error(), "not issued"),
                 "the irecv's request: %s: %s", braid_strerror(w), braid_last_error());
        MP_CHECK(rank, out[0] == -1.0f, "the irecv ran: out[0] = %g", out[0]);
    } else if (r == BRAID_SUCCESS) {
        r = braid_barrier(comm);
    }
    if (!odd)
        MP_CHECK(rank, r == BRAID_ERR_MISMATCH, "ended in %s: %s", braid_strerror(r),
                 braid_last_error());
    return 0;
}

Test(group_reject, iform_request_of_a_rejected_group)
{
    cr_expect_eq(odd_run_all(iform_request, NULL), 0, "see stderr");
}

/* braid_group_reject: a layer above braid (the NCCL drop-in) drops a group it recorded for a
 * reason of its own. Rank n-1 issues the same valid group as its peers (an all-reduce and a
 * ring exchange) and rejects it: nothing of it runs there, group end returns the error with
 * the reason, and the peers fail naming the rejection and the reason instead of pairing the
 * group with rank n-1's next calls. When every rank rejects it, the communicator stays usable.
 * The entry's own checks: no open group, a non-error err, a NULL reason; and a group already
 * rejected by a call keeps that call's error. */
static int reject_entry(braid_comm_t comm, int rank, int n, void *arg)
{
    int everyone = arg != NULL, odd = everyone || rank == n - 1;
    int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    float in[6], out[12];
    for (int i = 0; i < 6; i++)
        in[i] = (float)(rank * 10 + i);
    for (int i = 0; i < 12; i++)
        out[i] = -1.0f;
    MP_CHECK(rank, braid_group_reject(BRAID_ERR_INVALID_USAGE, "x") == BRAID_ERR_INVALID_USAGE,
             "braid_group_reject outside a group");
    MP_OK(rank, braid_group_start());
    MP_CHECK(rank, braid_group_reject(BRAID_SUCCESS, "x") == BRAID_ERR_INVALID_ARG, "err 0");
    MP_CHECK(rank, braid_group_reject(BRAID_ERR_INVALID_USAGE, NULL) == BRAID_ERR_INVALID_ARG,
             "reason NULL");
    MP_OK(rank, braid_group_end()); /* the refused rejections left the (empty) group alone */
    MP_OK(rank, braid_barrier(comm));
    double t0 = proc_now_s();
    MP_OK(rank, braid_group_start());
    MP_OK(rank, braid_allreduce(in, out, 6, BRAID_FLOAT32, BRAID_SUM, comm));
    MP_OK(rank, braid_send(in, 6, BRAID_FLOAT32, next, comm));
    MP_OK(rank, braid_recv(out + 6, 6, BRAID_FLOAT32, prev, comm));
    if (odd) MP_OK(rank, braid_group_reject(BRAID_ERR_INVALID_USAGE, "dropped by the layer"));
    braid_result_t r = braid_group_end();
    char first_msg[2048];
    snprintf(first_msg, sizeof(first_msg), "%s", braid_last_error());
    if (odd) {
        MP_CHECK(rank, r == BRAID_ERR_INVALID_USAGE && strstr(first_msg, "dropped by the layer"),
                 "group end: %s: %s", braid_strerror(r), first_msg);
        for (int i = 0; i < 12; i++)
            MP_CHECK(rank, out[i] == -1.0f, "out[%d] = %g: a call of the rejected group ran", i,
                     out[i]);
    }
    if (!everyone) {
        char who[32];
        snprintf(who, sizeof(who), "rank %d", n - 1);
        return odd_expect_mismatch(comm, rank, n, r, first_msg, odd, t0, who,
                                   "dropped by the layer");
    }
    MP_CHECK(rank, !strstr(first_msg, "did not match"), "every rank rejected: %s", first_msg);
    /* Still usable, and a call's rejection stands over a later braid_group_reject. */
    MP_OK(rank, braid_allreduce(in, out, 6, BRAID_FLOAT32, BRAID_SUM, comm));
    for (int i = 0; i < 6; i++)
        MP_CHECK(rank, out[i] == (float)(10 * n * (n - 1) / 2 + n * i), "out[%d] = %g", i, out[i]);
    MP_OK(rank, braid_group_start());
    braid_result_t bad = braid_allreduce(in, out, 6, (braid_datatype_t)99, BRAID_SUM, comm);
    MP_OK(rank, braid_group_reject(BRAID_ERR_INVALID_USAGE, "dropped by the layer"));
    r = braid_group_end();
    MP_CHECK(rank,
             bad == BRAID_ERR_INVALID_ARG && r == BRAID_ERR_INVALID_ARG &&
                 strstr(braid_last_error(), "dtype=99"),
             "a call's rejection, then braid_group_reject: %s: %s", braid_strerror(r),
             braid_last_error());
    MP_OK(rank, braid_barrier(comm));
    return 0;
}

Test(group_reject, group_rejected_by_the_caller_on_one_rank)
{
    cr_expect_eq(odd_run_all(reject_entry, NULL), 0, "see stderr");
}

Test(group_reject, group_rejected_by_the_caller_everywhere)
{
    cr_expect_eq(odd_run_all(reject_entry, (void *)1), 0, "see stderr");
}
