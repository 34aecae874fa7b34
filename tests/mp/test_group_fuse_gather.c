/* A group's small all-gathers and reduce-scatters fused into one call (src/core/group_fuse.c),
 * as real processes: every dtype (all-gathers of mixed dtypes in one run) and every op of the
 * reduce-scatters, counts 0, 1 and primes, in place and out, unaligned, runs broken by a large
 * call, by a collective of another kind and with sends/receives between them, each output
 * checked against the independent reference (tests/common/data.c), the fused runs counted from
 * the debug log against the rule; a call that reads an earlier call's output on one rank only
 * (every rank then runs the calls one by one); calls whose counts or dtypes differ between
 * ranks but add up to the same bytes (a mismatch, not a silent exchange of data), also under
 * the hierarchical reduce-scatter; over tcp. */
#include "data.h"
#include "fuselog.h"
#include "mp.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { NCALLS = 9, LIMIT = 65536, COLL_AG = 0, COLL_RS = 1 };

typedef struct {
    size_t count;
    int in_place;
    size_t off; /* bytes past an aligned start */
} call_t;

/* Call 5 is above the per-call bound (a quarter of 64 KiB) for most dtypes and rank counts;
 * an all-reduce comes before call 7, which ends a run. */
static const call_t calls[NCALLS] = {{0, 0, 0},    {1, 0, 0}, {7, 1, 0},  {13, 0, 1}, {101, 0, 0},
                                     {1021, 1, 3}, {3, 0, 0}, {64, 1, 0}, {2, 0, 5}};

/* The all-gathers' dtypes differ from call to call. */
static braid_datatype_t gather_dtype(int dt, int c)
{
    return (braid_datatype_t)((dt + c) % BRAID_NUM_DTYPES);
}

static int one_group(braid_comm_t comm, int rank, int n, int coll, int dt0, braid_redop_t op)
{
    int gather = coll == COLL_AG;
    char *base[NCALLS], *sbase[NCALLS];
    void *send[NCALLS], *recv[NCALLS];
    for (int c = 0; c < NCALLS; c++) {
        braid_datatype_t dt = gather ? gather_dtype(dt0, c) : (braid_datatype_t)dt0;
        size_t es = braid_dtype_size(dt), cnt = calls[c].count, big = cnt * es * (size_t)n;
        base[c] = data_xmalloc(big);
        sbase[c] = data_xmalloc(big);
        char *out = base[c] + calls[c].off;
        memset(out, 0x5a, gather ? big : cnt * es);
        recv[c] = out;
        if (gather) {
            send[c] = calls[c].in_place ? out + (size_t)rank * cnt * es : sbase[c] + calls[c].off;
            data_fill(send[c], dt, BRAID_SUM, rank, 0, cnt, 200 + c);
        } else {
            char *in = calls[c].in_place ? out : sbase[c] + calls[c].off;
            data_fill(in, dt, op, rank, 0, (size_t)n * cnt, 200 + c);
            send[c] = in;
            if (calls[c].in_place) recv[c] = in + (size_t)rank * cnt * es;
        }
    }
    int32_t ring_in[3] = {rank, rank + 1, rank + 2}, ring_out[3] = {-1, -1, -1};
    int32_t ar[2] = {rank, 1};
    int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    MP_OK(rank, braid_group_start());
    for (int c = 0; c < NCALLS; c++) {
        braid_datatype_t dt = gather ? gather_dtype(dt0, c) : (braid_datatype_t)dt0;
        if (c == 2) MP_OK(rank, braid_send(ring_in, 3, BRAID_INT32, next, comm));
        if (c == 3) MP_OK(rank, braid_recv(ring_out, 3, BRAID_INT32, prev, comm));
        if (c == 7) MP_OK(rank, braid_allreduce(ar, ar, 2, BRAID_INT32, BRAID_SUM, comm));
        if (gather)
            MP_OK(rank, braid_allgather(send[c], recv[c], calls[c].count, dt, comm));
        else
            MP_OK(rank, braid_reduce_scatter(send[c], recv[c], calls[c].count, dt, op, comm));
    }
    MP_OK(rank, braid_group_end());
    int bad = 0;
    for (int c = 0; c < NCALLS; c++) {
        braid_datatype_t dt = gather ? gather_dtype(dt0, c) : (braid_datatype_t)dt0;
        size_t es = braid_dtype_size(dt), cnt = calls[c].count;
        char what[80];
        snprintf(what, sizeof(what), "%s %s op %d call %d", gather ? "allgather" : "reduce_scatter",
                 braid_dtype_name(dt), (int)op, c);
        if (gather) {
            for (int r = 0; r < n; r++)
                bad |= data_check_rank((char *)recv[c] + (size_t)r * cnt * es, dt, BRAID_SUM, r, 0,
                                       cnt, 200 + c, what) != 0;
        } else {
            bad |=
                data_check_reduced(recv[c], dt, op, n, (size_t)rank * cnt, cnt, 200 + c, what) != 0;
        }
        free(base[c]);
        free(sbase[c]);
    }
    MP_CHECK(rank, !bad, "wrong results (above)");
    for (int i = 0; i < 3; i++)
        MP_CHECK(rank, ring_out[i] == prev + i, "received %d from rank %d at %d", ring_out[i], prev,
                 i);
    MP_CHECK(rank, ar[0] == n * (n - 1) / 2 && ar[1] == n, "all-reduce gave %d %d", ar[0], ar[1]);
    return 0;
}

static int every_case(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++) {
        if (one_group(comm, rank, n, COLL_AG, dt, BRAID_SUM)) return 1;
        for (int op = 0; op < BRAID_NUM_OPS; op++)
            if (one_group(comm, rank, n, COLL_RS, dt, (braid_redop_t)op)) return 1;
    }
    return 0;
}

/* What every_case fuses on each of n ranks: runs and calls of all-gathers, of reduce-scatters. */
static void expected(int n, int want[2][2])
{
    memset(want, 0, 4 * sizeof(int));
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++) {
        for (int g = 0; g < 2; g++) { /* 0: all-gathers, 1: reduce-scatters */
            long bytes[NCALLS + 1];
            int k = 0;
            for (int c = 0; c < NCALLS; c++) {
                if (c == 7) bytes[k++] = -1; /* the all-reduce */
                braid_datatype_t t = g == 0 ? gather_dtype(dt, c) : (braid_datatype_t)dt;
                bytes[k++] = (long)(calls[c].count * braid_dtype_size(t) * (size_t)n);
            }
            for (int op = 0; op < (g == 0 ? 1 : BRAID_NUM_OPS); op++) {
                int is_float = dt >= BRAID_FLOAT16;
                if (g == 1 && op == BRAID_AVG && !is_float) continue; /* never fused */
                fuselog_rule(bytes, k, LIMIT, &want[g][0], &want[g][1]);
            }
        }
    }
}

Test(group_fuse_gather, every_dtype_and_op_against_the_reference, .timeout = 300)
{
    for (int n = 1; n <= 4; n++) {
        char dir[32];
        cr_assert_eq(fuselog_start(dir), 0);
        cr_expect_eq(mp_run(n, every_case, NULL, 150), 0, "n=%d (see stderr)", n);
        static const char *const what[2] = {" allgathers fused", " reduce_scatters fused"};
        int lines[2], calls[2], got[2][2], want[2][2];
        int files = fuselog_count(dir, what, 2, lines, calls);
        for (int g = 0; g < 2; g++) {
            got[g][0] = lines[g];
            got[g][1] = calls[g];
        }
        expected(n, want);
        cr_expect_eq(files, n, "n=%d: %d log files", n, files);
        for (int g = 0; g < 2; g++) {
            /* one rank: nothing to fuse; else every rank fuses every run */
            cr_expect_gt(want[g][0], 0, "the calls fuse nowhere: the test tests nothing");
            cr_expect_eq(got[g][0], n > 1 ? n * want[g][0] : 0, "n=%d %s: %d fused runs", n,
                         g ? "reduce_scatter" : "allgather", got[g][0]);
            cr_expect_eq(got[g][1], n > 1 ? n * want[g][1] : 0, "n=%d %s: %d calls fused", n,
                         g ? "reduce_scatter" : "allgather", got[g][1]);
        }
    }
}

Test(group_fuse_gather, every_dtype_and_op_over_tcp, .timeout = 300)
{
    setenv("BRAID_TRANSPORT", "tcp", 1);
    cr_expect_eq(mp_run(3, every_case, NULL, 150), 0, "see stderr");
}

/* Rank 1's second all-gather sends its own block of the first one's output; the others send
 * what that block will hold. Every rank then gets the same: rank 1 cannot pack its second
 * input before the first call ran, so every rank runs the calls one by one. The same with
 * reduce-scatters: rank 1's second call reduces the first one's output. */
static int chained(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    enum { K = 11 };
    int32_t x[K], y[4 * K], z[4 * K];
    for (int i = 0; i < K; i++)
        x[i] = rank * 100 + i;
    for (int i = 0; i < 4 * K; i++)
        y[i] = z[i] = -1;
    MP_OK(rank, braid_group_start());
    MP_OK(rank, braid_allgather(x, y, K, BRAID_INT32, comm));
    MP_OK(rank, braid_allgather(rank == 1 ? y + K : x, z, K, BRAID_INT32, comm));
    MP_OK(rank, braid_group_end());
    for (int r = 0; r < n; r++)
        for (int i = 0; i < K; i++) {
            MP_CHECK(rank, y[r * K + i] == r * 100 + i, "y[%d] = %d", r * K + i, y[r * K + i]);
            MP_CHECK(rank, z[r * K + i] == r * 100 + i, "z[%d] = %d", r * K + i, z[r * K + i]);
        }
    /* out1 = block `rank` of the sum of in (n * (rank * K + i)); the second call reduces one
     * element per rank from rank 1's out1 (the others: the values it will hold there). */
    int32_t in[4 * K], out1[K], in2[K], out2[1] = {-1};
    for (int i = 0; i < n * K; i++)
        in[i] = i;
    for (int i = 0; i < K; i++) {
        out1[i] = -7;
        in2[i] = n * (1 * K + i);
    }
    MP_OK(rank, braid_group_start());
    MP_OK(rank, braid_reduce_scatter(in, out1, K, BRAID_INT32, BRAID_SUM, comm));
    MP_OK(rank,
          braid_reduce_scatter(rank == 1 ? out1 : in2, out2, 1, BRAID_INT32, BRAID_SUM, comm));
    MP_OK(rank, braid_group_end());
    for (int i = 0; i < K; i++)
        MP_CHECK(rank, out1[i] == n * (rank * K + i), "out1[%d] = %d", i, out1[i]);
    MP_CHECK(rank, out2[0] == n * n * (K + rank), "out2 = %d, want %d", out2[0],
             n * n * (K + rank));
    return 0;
}

Test(group_fuse_gather, a_call_reading_an_earlier_output_on_one_rank, .timeout = 120)
{
    for (int n = 2; n <= 4; n++)
        cr_expect_eq(mp_run(n, chained, NULL, 60), 0, "n=%d (see stderr)", n);
}

/* Rank 0's two all-gathers have 3 then 5 elements, the others' 5 then 3; or rank 0's are 4
 * float16 then 4 int32, the others' 4 int32 then 4 float16 (the same counts and bytes). Either way
 * the fused calls have the same size on every rank: the layout in the descriptor must tell them
 * apart. The same with reduce-scatters of swapped counts. */
static int swapped(braid_comm_t comm, int rank, int n, void *arg)
{
    const char *algo = arg; /* non-NULL: 2 fake hosts, the reduce-scatters on that algorithm */
    char a[64] = {0}, b[64 * 8];
    for (int kase = algo ? 2 : 0; kase < 3; kase++) {
        braid_comm_t c = NULL;
        if (algo)
            c = mp_fake_host_comm(comm, rank, rank % 2, algo);
        else
            MP_OK(rank, braid_comm_split(comm, 0, rank, &c));
        MP_CHECK(rank, c, "no communicator");
        int zero = rank == 0;
        MP_OK(rank, braid_group_start());
        if (kase == 0) {
            MP_OK(rank, braid_allgather(a, b, zero ? 3 : 5, BRAID_FLOAT32, c));
            MP_OK(rank, braid_allgather(a, b, zero ? 5 : 3, BRAID_FLOAT32, c));
        } else if (kase == 1) {
            MP_OK(rank, braid_allgather(a, b, 4, zero ? BRAID_FLOAT16 : BRAID_INT32, c));
            MP_OK(rank, braid_allgather(a, b, 4, zero ? BRAID_INT32 : BRAID_FLOAT16, c));
        } else {
            MP_OK(rank, braid_reduce_scatter(b, a, zero ? 1 : 2, BRAID_INT32, BRAID_SUM, c));
            MP_OK(rank, braid_reduce_scatter(b, a, zero ? 2 : 1, BRAID_INT32, BRAID_SUM, c));
        }
        braid_result_t r = braid_group_end();
        const char *msg = braid_last_error();
        MP_CHECK(rank, r == BRAID_ERR_MISMATCH || r == BRAID_ERR_REMOTE,
                 "case %d, %d ranks: group end returned %s: %s", kase, n, braid_strerror(r), msg);
        if (r == BRAID_ERR_MISMATCH)
            MP_CHECK(rank, strstr(msg, "2 calls fused"),
                     "the message does not name the fused calls: %s", msg);
        braid_comm_destroy(c);
    }
    return 0;
}

Test(group_fuse_gather, layouts_that_add_up_alike_are_a_mismatch, .timeout = 120)
{
    setenv("BRAID_TIMEOUT", "20", 1);
    cr_expect_eq(mp_run(2, swapped, NULL, 60), 0, "2 ranks (see stderr)");
    /* The hierarchical reduce-scatter checks the layout in its stages. */
    cr_expect_eq(mp_run(4, swapped, "hier", 60), 0, "4 ranks on 2 fake hosts, hier (see stderr)");
    cr_expect_eq(mp_run(3, swapped, NULL, 60), 0, "3 ranks (see stderr)");
    setenv("BRAID_TRANSPORT", "tcp", 1);
    cr_expect_eq(mp_run(3, swapped, NULL, 60), 0, "3 ranks, tcp (see stderr)");
}
