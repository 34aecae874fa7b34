/* The device engine's CPU twin (suite "twin"): src/cuda/engine_dev.h's step/flag protocol,
 * compiled by the C compiler, running the CPU engine's plans (ring, recursive doubling, tree)
 * over FIFOs of slots in shared memory. Results are checked against the independent reference
 * of tests/common/data.c, for every collective x dtype x op x count (0, 1, primes, counts not
 * divisible by the ranks), in place and on unaligned buffers, 1..8 ranks.
 *
 * Most runs drive every rank's channels one after another on one thread, each run returning
 * after one poll of a flag that is not set yet (budget 1): no rank ever runs at the same time
 * as its peers, which is what ranks of different processes on one time-sliced GPU see. That
 * they all finish proves the protocol never needs two ranks running at once. The process
 * tests fork the ranks and run each channel on its own thread (thread blocks), as on a GPU. */
#include "core/comm.h"
#include "core/log.h"
#include "cuda/twin.h"
#include "data.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int n, nch, nblk, nslots;
    size_t slot_bytes;
    int coll, algo;
    braid_datatype_t dt;
    braid_redop_t op;
    int root;
    size_t count;
    int in_place;
    size_t off; /* every buffer is shifted by this many bytes, elements for the reductions (the
                 * API refuses device buffers of reductions not aligned to their elements:
                 * the twin, like the GPU, faults on them) */
    int seed;
    const int *order;
    uint64_t budget;
    int off_bytes; /* off is in bytes for the reductions too (what the API refuses) */
} twin_case_t;

static int reduces(int coll)
{
    return coll == BRAID_COLL_ALLREDUCE || coll == BRAID_COLL_REDUCE ||
           coll == BRAID_COLL_REDUCE_SCATTER;
}

/* Buffers of one rank: base allocations and the (shifted) pointers the collective gets. */
typedef struct {
    char *in_base, *out_base;
    const char *send;
    char *recv;
} bufs_t;

static void bufs_make(const twin_case_t *t, int r, bufs_t *b)
{
    size_t es = braid_dtype_size(t->dt), n = (size_t)t->n, c = t->count;
    size_t in_elems = t->coll == BRAID_COLL_REDUCE_SCATTER ? c * n : c;
    size_t out_elems = t->coll == BRAID_COLL_ALLGATHER ? c * n : c;
    size_t off = t->off * (reduces(t->coll) && !t->off_bytes ? es : 1);
    b->in_base = calloc(1, in_elems * es + off + 16 * es);
    b->out_base = calloc(1, (out_elems + in_elems) * es + off + 16 * es);
    char *in = b->in_base + off, *out = b->out_base + off;
    int root_in = t->coll != BRAID_COLL_BROADCAST || r == t->root;
    if (t->in_place) {
        if (t->coll == BRAID_COLL_REDUCE_SCATTER) {
            if (in_elems) data_fill(in, t->dt, t->op, r, 0, in_elems, t->seed);
            b->send = in;
            b->recv = in + (size_t)r * c * es;
        } else if (t->coll == BRAID_COLL_ALLGATHER) {
            if (c) data_fill(out + (size_t)r * c * es, t->dt, t->op, r, 0, c, t->seed);
            b->send = out + (size_t)r * c * es;
            b->recv = out;
        } else {
            if (c && root_in) data_fill(out, t->dt, t->op, r, 0, c, t->seed);
            b->send = out;
            b->recv = out;
        }
    } else {
        if (in_elems && root_in) data_fill(in, t->dt, t->op, r, 0, in_elems, t->seed);
        b->send = in;
        b->recv = out;
    }
}

static size_t bufs_check(const twin_case_t *t, int r, const bufs_t *b)
{
    size_t es = braid_dtype_size(t->dt), c = t->count, bad = 0;
    char what[160];
    snprintf(what, sizeof(what), "twin %s algo %d n=%d rank %d %s %s count %zu%s off %zu",
             braid_coll_name(t->coll), t->algo, t->n, r, braid_dtype_name(t->dt),
             braid_op_name(t->op), c, t->in_place ? " in place" : "", t->off);
    if (c == 0) return 0;
    switch (t->coll) {
    case BRAID_COLL_ALLREDUCE:
        return data_check_reduced(b->recv, t->dt, t->op, t->n, 0, c, t->seed, what);
    case BRAID_COLL_REDUCE:
        return r == t->root ? data_check_reduced(b->recv, t->dt, t->op, t->n, 0, c, t->seed, what)
                            : 0;
    case BRAID_COLL_REDUCE_SCATTER:
        return data_check_reduced(b->recv, t->dt, t->op, t->n, (size_t)r * c, c, t->seed, what);
    case BRAID_COLL_BROADCAST:
        return data_check_rank(b->recv, t->dt, t->op, t->root, 0, c, t->seed, what);
    case BRAID_COLL_ALLGATHER:
        for (int j = 0; j < t->n; j++)
            bad +=
                data_check_rank(b->recv + (size_t)j * c * es, t->dt, t->op, j, 0, c, t->seed, what);
        return bad;
    }
    return 1;
}

static braid_twin_args_t args_of(const twin_case_t *t, const bufs_t *b, uint32_t seq)
{
    return (braid_twin_args_t){.coll = t->coll,
                               .algo = t->algo,
                               .dtype = t->dt,
                               .op = reduces(t->coll) ? t->op : BRAID_SUM,
                               .root = t->root,
                               .count = t->count,
                               .sendbuf = b->send,
                               .recvbuf = b->recv,
                               .seq = seq,
                               .order = t->order};
}

/* Every rank on this thread, one after another (time-sliced). Returns the mismatches; *w_p
 * keeps the world for the caller's inspection when given. */
static size_t run_serial(const twin_case_t *t, braid_twin_world_t **w_p, uint64_t *waits_p)
{
    braid_twin_world_t *w;
    cr_assert_eq(
        braid_twin_world_create(t->n, t->nch, t->nblk ? t->nblk : 1, t->nslots, t->slot_bytes, &w),
        BRAID_SUCCESS, "%s", braid_last_error());
    bufs_t b[8];
    braid_twin_rank_t *r[8];
    for (int i = 0; i < t->n; i++) {
        bufs_make(t, i, &b[i]);
        braid_twin_args_t a = args_of(t, &b[i], 7);
        cr_assert_eq(braid_twin_rank_prepare(w, i, &a, &r[i]), BRAID_SUCCESS, "%s",
                     braid_last_error());
    }
    int left = t->n;
    int done[8] = {0};
    for (long round = 0; left > 0; round++) {
        cr_assert_lt(round, 50000000L, "twin made no progress (%s, n=%d)", braid_coll_name(t->coll),
                     t->n);
        for (int i = 0; i < t->n; i++) {
            if (done[i]) continue;
            int st = braid_twin_rank_poll(r[i], t->budget);
            cr_assert_geq(st, 0, "%s", braid_last_error());
            if (st == 1) {
                done[i] = 1;
                left--;
            }
        }
    }
    size_t bad = 0;
    uint64_t waits = 0;
    for (int i = 0; i < t->n; i++) {
        bad += bufs_check(t, i, &b[i]);
        waits += braid_twin_rank_waits(r[i]);
        braid_twin_rank_free(r[i]);
    }
    /* All-reduce: every rank holds the same bits. */
    if (t->coll == BRAID_COLL_ALLREDUCE && t->count)
        for (int i = 1; i < t->n; i++)
            bad += memcmp(b[i].recv, b[0].recv, t->count * braid_dtype_size(t->dt)) != 0;
    for (int i = 0; i < t->n; i++) {
        free(b[i].in_base);
        free(b[i].out_base);
    }
    if (waits_p) *waits_p = waits;
    if (w_p)
        *w_p = w;
    else
        braid_twin_world_destroy(w);
    return bad;
}

static const size_t counts[] = {0, 1, 2, 13, 97, 1031};
static const int nranks[] = {1, 2, 3, 4, 5, 8};

/* Every dtype x op x count x nranks for one collective and plan family. */
static void sweep(int coll, int algo)
{
    size_t runs = 0, bad = 0;
    int nops = reduces(coll) ? BRAID_NUM_OPS : 1;
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++)
        for (int op = 0; op < nops; op++)
            for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
                for (size_t ni = 0; ni < sizeof(nranks) / sizeof(nranks[0]); ni++) {
                    if (data_quick() && (ci + ni + (size_t)op) % 3) continue;
                    int n = nranks[ni];
                    twin_case_t t = {.n = n,
                                     .nch = algo == BRAID_PLAN_RING ? 2 : 1,
                                     .nblk = 1 + (int)((ci + ni + (size_t)dt) % 3),
                                     .nslots = 4,
                                     .slot_bytes = 96,
                                     .coll = coll,
                                     .algo = algo,
                                     .dt = (braid_datatype_t)dt,
                                     .op = (braid_redop_t)op,
                                     .root = n > 1 ? (int)(ci % (size_t)n) : 0,
                                     .count = counts[ci],
                                     .in_place = (int)((ci + ni) & 1),
                                     .off = counts[ci] == 97 ? 3 : (counts[ci] == 13 ? 1 : 0),
                                     .seed = (int)(ci * 7 + ni),
                                     .budget = 1};
                    bad += run_serial(&t, NULL, NULL);
                    runs++;
                }
    cr_log_info("twin %s (plan %d): %zu runs", braid_coll_name(coll), algo, runs);
    cr_assert_eq(bad, 0, "%zu mismatching elements", bad);
}

Test(twin, allreduce_ring_every_dtype_op_count, .timeout = 300)
{
    sweep(BRAID_COLL_ALLREDUCE, BRAID_PLAN_RING);
}
Test(twin, allreduce_recdbl_every_dtype_op_count, .timeout = 300)
{
    sweep(BRAID_COLL_ALLREDUCE, BRAID_PLAN_RECDBL);
}
Test(twin, reduce_scatter_ring_every_dtype_op_count, .timeout = 300)
{
    sweep(BRAID_COLL_REDUCE_SCATTER, BRAID_PLAN_RING);
}
Test(twin, reduce_chain_and_tree_every_dtype_op_count, .timeout = 300)
{
    sweep(BRAID_COLL_REDUCE, BRAID_PLAN_RING);
    sweep(BRAID_COLL_REDUCE, BRAID_PLAN_TREE);
}
Test(twin, broadcast_allgather_every_dtype_count, .timeout = 300)
{
    sweep(BRAID_COLL_BROADCAST, BRAID_PLAN_RING);
    sweep(BRAID_COLL_BROADCAST, BRAID_PLAN_TREE);
    sweep(BRAID_COLL_ALLGATHER, BRAID_PLAN_RING);
}

/* Reductions over buffers not aligned to their elements: the GPU faults
 * (cudaErrorMisalignedAddress, fatal to the context), and so does the twin (it aborts), so its
 * sweeps would catch such buffers reaching the engine; the API refuses them (test_cuda.c). */
Test(twin, misaligned_reduction_faults_like_the_gpu, .signal = SIGABRT, .timeout = 30)
{
    twin_case_t t = {.n = 2,
                     .nch = 1,
                     .nslots = 4,
                     .slot_bytes = 96,
                     .coll = BRAID_COLL_ALLREDUCE,
                     .algo = BRAID_PLAN_RING,
                     .dt = BRAID_FLOAT32,
                     .op = BRAID_SUM,
                     .count = 13,
                     .off = 1,
                     .off_bytes = 1,
                     .seed = 2,
                     .budget = 1};
    run_serial(&t, NULL, NULL);
}

/* Copies move bytes on the GPU too: any offset works. */
Test(twin, misaligned_copies_run, .timeout = 30)
{
    for (int coll = BRAID_COLL_BROADCAST; coll <= BRAID_COLL_ALLGATHER; coll += 3) {
        twin_case_t t = {.n = 3,
                         .nch = 1,
                         .nslots = 4,
                         .slot_bytes = 96,
                         .coll = coll,
                         .algo = BRAID_PLAN_RING,
                         .dt = BRAID_FLOAT64,
                         .root = 1,
                         .count = 29,
                         .off = 3,
                         .off_bytes = 1,
                         .seed = 4,
                         .budget = 1};
        cr_assert_eq(run_serial(&t, NULL, NULL), 0, "%s", braid_coll_name(coll));
    }
}

Test(twin, dev_threads_must_be_whole_warps_up_to_512, .timeout = 10)
{
    static const int64_t good[] = {32, 64, 96, 256, 480, 512};
    static const int64_t bad[] = {0, -32, 1, 31, 33, 100, 544, 1024};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        cr_assert_eq(braid_dev_threads_check(good[i]), BRAID_SUCCESS, "%lld: %s",
                     (long long)good[i], braid_last_error());
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_assert_eq(braid_dev_threads_check(bad[i]), BRAID_ERR_INVALID_ARG, "%lld",
                     (long long)bad[i]);
        char want[64];
        snprintf(want, sizeof(want), "BRAID_DEV_THREADS=%lld:", (long long)bad[i]);
        cr_assert(strstr(braid_last_error(), want), "%s", braid_last_error());
        cr_assert(strstr(braid_last_error(), "multiple of 32 from 32 to 512"), "%s",
                  braid_last_error());
    }
}

Test(twin, shuffled_ring_order, .timeout = 60)
{
    static const int order[5] = {3, 0, 4, 1, 2};
    for (int coll = BRAID_COLL_ALLREDUCE; coll <= BRAID_COLL_ALLGATHER; coll++) {
        twin_case_t t = {.n = 5,
                         .nch = 3,
                         .nslots = 2,
                         .slot_bytes = 64,
                         .coll = coll,
                         .algo = BRAID_PLAN_RING,
                         .dt = BRAID_FLOAT32,
                         .op = BRAID_MAX,
                         .root = 4,
                         .count = 211,
                         .seed = 5,
                         .order = order,
                         .budget = 3};
        cr_assert_eq(run_serial(&t, NULL, NULL), 0, "%s", braid_coll_name(coll));
    }
}

/* Several chunks in flight. A chain broadcast's root only sends: run alone, it fills every
 * slot of its FIFO before it blocks. In a ring all-reduce each rank sends again once it has
 * received, so two messages per FIFO are in flight when ranks take turns. The runs relaunched
 * blocked channels many times (the time slices). */
Test(twin, pipelining_fills_the_fifo, .timeout = 60)
{
    twin_case_t t = {.n = 3,
                     .nch = 1,
                     .nslots = 6,
                     .slot_bytes = 256,
                     .coll = BRAID_COLL_BROADCAST,
                     .algo = BRAID_PLAN_RING,
                     .dt = BRAID_BFLOAT16,
                     .op = BRAID_SUM,
                     .root = 0,
                     .count = 10007,
                     .seed = 9,
                     .budget = 1};
    braid_twin_world_t *w;
    uint64_t waits = 0;
    cr_assert_eq(run_serial(&t, &w, &waits), 0);
    cr_assert_eq(braid_twin_max_inflight(w), 6, "broadcast: max in flight %llu",
                 (unsigned long long)braid_twin_max_inflight(w));
    cr_assert_gt(waits, 10, "waits %llu", (unsigned long long)waits);
    braid_twin_world_destroy(w);
    t.coll = BRAID_COLL_ALLREDUCE;
    t.op = BRAID_AVG;
    cr_assert_eq(run_serial(&t, &w, &waits), 0);
    cr_assert_geq(braid_twin_max_inflight(w), 2, "allreduce: max in flight %llu",
                  (unsigned long long)braid_twin_max_inflight(w));
    braid_twin_world_destroy(w);
}

Test(twin, mismatched_collective_is_named, .timeout = 30)
{
    braid_twin_world_t *w;
    cr_assert_eq(braid_twin_world_create(2, 1, 1, 4, 64, &w), BRAID_SUCCESS);
    float x[8] = {0}, y[8];
    braid_twin_args_t a = {.coll = BRAID_COLL_ALLREDUCE,
                           .dtype = BRAID_FLOAT32,
                           .op = BRAID_SUM,
                           .count = 8,
                           .sendbuf = x,
                           .recvbuf = y,
                           .seq = 5,
                           .root = -1};
    braid_twin_rank_t *r0, *r1;
    cr_assert_eq(braid_twin_rank_prepare(w, 0, &a, &r0), BRAID_SUCCESS);
    a.seq = 6;
    cr_assert_eq(braid_twin_rank_prepare(w, 1, &a, &r1), BRAID_SUCCESS);
    int st0 = 0, st1 = 0;
    for (int i = 0; i < 100 && st0 >= 0 && st1 >= 0; i++) {
        st0 = braid_twin_rank_poll(r0, 4);
        if (st0 < 0) break;
        st1 = braid_twin_rank_poll(r1, 4);
    }
    cr_assert(st0 == BRAID_ERR_MISMATCH || st1 == BRAID_ERR_MISMATCH, "%d %d", st0, st1);
    cr_assert(strstr(braid_last_error(), "expected collective #"), "%s", braid_last_error());
    braid_twin_rank_free(r0);
    braid_twin_rank_free(r1);
    braid_twin_world_destroy(w);
}

Test(twin, abort_ends_a_waiting_channel, .timeout = 30)
{
    braid_twin_world_t *w;
    cr_assert_eq(braid_twin_world_create(3, 1, 1, 4, 64, &w), BRAID_SUCCESS);
    int32_t x[40] = {0}, y[40];
    braid_twin_args_t a = {.coll = BRAID_COLL_ALLREDUCE,
                           .dtype = BRAID_INT32,
                           .op = BRAID_SUM,
                           .count = 40,
                           .sendbuf = x,
                           .recvbuf = y,
                           .seq = 1,
                           .root = -1};
    braid_twin_rank_t *r0;
    cr_assert_eq(braid_twin_rank_prepare(w, 0, &a, &r0), BRAID_SUCCESS);
    cr_assert_eq(braid_twin_rank_poll(r0, 100), 0); /* blocked: its peers never run */
    braid_twin_rank_abort(w, 0);                    /* its own abort word */
    cr_assert_eq(braid_twin_rank_poll(r0, 100), BRAID_ERR_ABORTED);
    cr_assert(strstr(braid_last_error(), "channel 0 aborted at step 1"), "%s", braid_last_error());
    braid_twin_rank_free(r0);
    braid_twin_world_destroy(w);
}

/* A failing peer sets the in-band abort word of the FIFOs it shares: the waiting lane names
 * the peer it waited for. */
Test(twin, in_band_abort_names_the_peer, .timeout = 30)
{
    braid_twin_world_t *w;
    cr_assert_eq(braid_twin_world_create(3, 1, 2, 4, 64, &w), BRAID_SUCCESS);
    int32_t x[40] = {0}, y[40];
    braid_twin_args_t a = {.coll = BRAID_COLL_ALLREDUCE,
                           .dtype = BRAID_INT32,
                           .op = BRAID_SUM,
                           .count = 40,
                           .sendbuf = x,
                           .recvbuf = y,
                           .seq = 1,
                           .root = -1};
    braid_twin_rank_t *r1;
    cr_assert_eq(braid_twin_rank_prepare(w, 1, &a, &r1), BRAID_SUCCESS);
    cr_assert_eq(braid_twin_rank_poll(r1, 10), 0);
    braid_twin_world_abort(w);
    cr_assert_eq(braid_twin_rank_poll(r1, 10), BRAID_ERR_REMOTE);
    cr_assert(strstr(braid_last_error(), "from rank 0 (ring link) was aborted"), "%s",
              braid_last_error());
    braid_twin_rank_free(r1);
    braid_twin_world_destroy(w);
}

/* A rank whose peers never run times out in the host loop, naming where it waits. */
Test(twin, no_progress_times_out_naming_the_wait, .timeout = 30)
{
    braid_twin_world_t *w;
    cr_assert_eq(braid_twin_world_create(4, 2, 1, 2, 64, &w), BRAID_SUCCESS);
    float x[100] = {0}, y[100];
    braid_twin_args_t a = {.coll = BRAID_COLL_BROADCAST,
                           .dtype = BRAID_FLOAT32,
                           .op = BRAID_SUM,
                           .count = 100,
                           .sendbuf = x,
                           .recvbuf = y,
                           .seq = 3,
                           .root = 0};
    braid_twin_rank_t *r0;
    cr_assert_eq(braid_twin_rank_prepare(w, 0, &a, &r0), BRAID_SUCCESS);
    braid_twin_rank_set_timeout(r0, 0.2);
    int st = 0;
    for (int i = 0; i < 10000000 && st == 0; i++)
        st = braid_twin_rank_poll(r0, 2);
    cr_assert_eq(st, BRAID_ERR_TIMEOUT, "%d %s", st, braid_last_error());
    /* the root fills both slots of its FIFO to rank 1, then waits for a free one */
    cr_assert(strstr(braid_last_error(), "stuck at step 2 waiting for a free slot to rank 1"), "%s",
              braid_last_error());
    braid_twin_rank_free(r0);
    braid_twin_world_destroy(w);
}

/* The block split: part b of every step is a 16-byte multiple from the step's start, the parts
 * cover the step exactly, and sender and receiver split a message alike. */
Test(twin, lanes_split_steps_at_16_bytes, .timeout = 30)
{
    for (int nparts = 1; nparts <= 5; nparts++)
        for (size_t es = 1; es <= 8; es *= 2) {
            braid_plan_params_t p = {.coll = BRAID_COLL_ALLREDUCE,
                                     .nranks = 3,
                                     .rank = 1,
                                     .root = -1,
                                     .count = 1000003,
                                     .chunk = 4099,
                                     .nchannels = 2};
            braid_dev_step_t *whole, *parts[5];
            uint32_t nw, np[5];
            cr_assert_eq(braid_dev_plan_expand(&p, 1, 0, 1, es, &whole, &nw), BRAID_SUCCESS);
            for (int b = 0; b < nparts; b++) {
                cr_assert_eq(braid_dev_plan_expand(&p, 1, b, nparts, es, &parts[b], &np[b]),
                             BRAID_SUCCESS);
                cr_assert_eq(np[b], nw);
            }
            for (uint32_t i = 0; i < nw; i++) {
                uint64_t at = whole[i].in_off;
                for (int b = 0; b < nparts; b++) {
                    cr_assert_eq(parts[b][i].in_off, at, "step %u part %d", i, b);
                    cr_assert_eq(parts[b][i].prim, whole[i].prim);
                    cr_assert_eq(((at - whole[i].in_off) * es) % 16, 0);
                    at += parts[b][i].count;
                }
                cr_assert_eq(at, whole[i].in_off + whole[i].count, "step %u", i);
            }
            free(whole);
            for (int b = 0; b < nparts; b++)
                free(parts[b]);
        }
}

/* ---- ranks as processes, channels as threads ---------------------------------------------- */

/* Child: runs rank r of t on threads, checks, exits 0 on success. skip_rank never runs (a
 * killed rank): the others must then time out, not hang. */
static int child(braid_twin_world_t *w, const twin_case_t *t, int r, uint32_t seq, int expect_ok)
{
    bufs_t b;
    bufs_make(t, r, &b);
    braid_twin_args_t a = args_of(t, &b, seq);
    braid_twin_rank_t *rk;
    if (braid_twin_rank_prepare(w, r, &a, &rk) != BRAID_SUCCESS) return 2;
    braid_result_t res = braid_twin_rank_run_threads(rk, t->budget, expect_ok ? 60.0 : 1.0);
    braid_twin_rank_free(rk);
    if (!expect_ok) {
        if (res == BRAID_ERR_TIMEOUT && strstr(braid_last_error(), "stuck at step")) return 0;
        fprintf(stderr, "rank %d: expected a timeout, got %d (%s)\n", r, res, braid_last_error());
        return 3;
    }
    if (res != BRAID_SUCCESS) {
        fprintf(stderr, "rank %d: %s\n", r, braid_last_error());
        return 4;
    }
    return bufs_check(t, r, &b) ? 5 : 0;
}

static void run_procs(const twin_case_t *t, int dead_rank)
{
    braid_twin_world_t *w;
    cr_assert_eq(
        braid_twin_world_create(t->n, t->nch, t->nblk ? t->nblk : 1, t->nslots, t->slot_bytes, &w),
        BRAID_SUCCESS);
    pid_t pids[8];
    for (int r = 0; r < t->n; r++) {
        pids[r] = fork();
        cr_assert_geq(pids[r], 0);
        if (pids[r] == 0) {
            if (r == dead_rank) _exit(0); /* dies before its first step */
            /* two collectives back to back: the FIFO counters carry over */
            int rc = child(w, t, r, 1, dead_rank < 0);
            if (rc == 0 && dead_rank < 0) rc = child(w, t, r, 2, 1);
            _exit(rc);
        }
    }
    int failed = 0;
    for (int r = 0; r < t->n; r++) {
        int st;
        cr_assert_eq(waitpid(pids[r], &st, 0), pids[r]);
        failed += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    braid_twin_world_destroy(w);
    cr_assert_eq(failed, 0, "%d rank(s) failed (%s n=%d)", failed, braid_coll_name(t->coll), t->n);
}

Test(twin, processes_and_threads_1_to_8_ranks, .timeout = 240)
{
    static const braid_datatype_t dts[] = {BRAID_FLOAT32, BRAID_BFLOAT16, BRAID_INT8, BRAID_FLOAT16,
                                           BRAID_UINT64};
    static const braid_redop_t ops[] = {BRAID_SUM, BRAID_AVG, BRAID_MIN, BRAID_PROD, BRAID_MAX};
    for (int n = 1; n <= 8; n++)
        for (int coll = BRAID_COLL_ALLREDUCE; coll <= BRAID_COLL_ALLGATHER; coll++) {
            if (data_quick() && n % 3 != 1) continue;
            int k = (n + coll) % 5;
            twin_case_t t = {.n = n,
                             .nch = 2,
                             .nslots = 4,
                             .slot_bytes = 512,
                             .coll = coll,
                             .algo = BRAID_PLAN_RING,
                             .dt = dts[k],
                             .op = ops[k],
                             .root = n - 1,
                             .count = 4099,
                             .in_place = n & 1,
                             .off = (size_t)(n & 2),
                             .seed = n,
                             .budget = 64};
            run_procs(&t, -1);
            if (coll == BRAID_COLL_ALLREDUCE && n > 1) {
                t.algo = BRAID_PLAN_RECDBL;
                run_procs(&t, -1);
            }
        }
}

Test(twin, a_dead_rank_times_out_its_peers, .timeout = 60)
{
    twin_case_t t = {.n = 3,
                     .nch = 2,
                     .nslots = 4,
                     .slot_bytes = 256,
                     .coll = BRAID_COLL_ALLREDUCE,
                     .algo = BRAID_PLAN_RING,
                     .dt = BRAID_FLOAT64,
                     .op = BRAID_SUM,
                     .count = 5000,
                     .seed = 3,
                     .budget = 64};
    run_procs(&t, 1);
}
