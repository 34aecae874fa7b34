/* The direct (single-copy) shared-memory all-reduce as real processes: forced with
 * BRAID_ALGO=direct on a communicator split from the job's, n = 1..8, every dtype x op, counts
 * 0, 1, primes, not divisible by n, on both paths (one synchronisation up to
 * 16 KiB / n, blocks above, several blocks), in place and not, unaligned,
 * bit-exact against the reference data; order-sensitive random floats bit-identical on every
 * rank; a rank killed mid-collective (BRAID_ERR_REMOTE naming it, nothing left in /dev/shm);
 * mismatched calls (another count, another collective) fail naming both; abort from another
 * thread ends a wait; the cost model takes the path by itself on one host; BRAID_DIRECT_BLOCK=0
 * turns it off; buffers from braid_mem_alloc (all ranks, or some) are read in place, and the
 * allocator checks its arguments; when no peer can open a rank's descriptors through /proc
 * (every rank non-dumpable, without CAP_SYS_PTRACE) such buffers are copied in instead;
 * streaming stores for the output (BRAID_NT_MIN) and into the slots (BRAID_DIRECT_NT_SLOTS) give
 * the same results; the next block staged during the gather (BRAID_DIRECT_PIPELINE), with short
 * last blocks and more ranks than cpus, keeps every result exact. */
#include "algos/algo.h"
#include "algos/direct.h"
#include "core/comm.h"
#include "core/copy.h"
#include "data.h"
#include "mp.h"
#include "reduce/reduce.h"
#include "transport/shm_direct.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(direct, .timeout = 400);

/* BRAID_TEST_QUICK (the sanitizer pass): blocks of 4 KiB, so small counts still span several
 * blocks, fewer and smaller counts, n = 1, 2, 3, 5, 8. */
static void quick_blocks(void)
{
    if (data_quick()) setenv("BRAID_DIRECT_BLOCK", "4096", 1);
}

static int skip_n(int n)
{
    return data_quick() && (n == 4 || n == 6 || n == 7);
}

static uint64_t runs(braid_comm_t c, int algo)
{
    braid_algo_state_t *st = ((struct braid_comm *)c)->algo_state;
    return st ? st->runs[algo] : 0;
}

/* ---- the slices (pure) --------------------------------------------------------------------- */
Test(direct, slices_cover_the_block_in_order_on_cache_lines)
{
    size_t es_list[] = {1, 2, 4, 8};
    for (size_t e = 0; e < 4; e++)
        for (int n = 1; n <= 9; n++)
            for (size_t len = 0; len < 700; len += (len < 70 ? 1 : 37)) {
                size_t es = es_list[e], next = 0;
                for (int r = 0; r < n; r++) {
                    size_t off, cnt;
                    braid_direct_slice(len, n, r, es, &off, &cnt);
                    cr_assert_eq(off, next, "len %zu n %d r %d: slice at %zu, want %zu", len, n, r,
                                 off, next);
                    cr_assert(cnt == 0 || (off * es) % 64 == 0, "slice %d starts mid-line", r);
                    next = off + cnt;
                }
                cr_assert_eq(next, len, "len %zu n %d es %zu: slices end at %zu", len, n, es, next);
            }
}

/* ---- every dtype x op x count ------------------------------------------------------------------
 */
static int every_dtype(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    braid_comm_t c = mp_fake_host_comm(comm, rank, 0, "direct");
    MP_CHECK(rank, c != NULL, "no communicator");
    MP_CHECK(rank, n == 1 || ((struct braid_comm *)c)->direct, "no direct segments");
    /* 0, 1, primes (not divisible by n), around the inline line and the small limit, one
     * block and several */
    size_t counts[] = {0, 1, 5, 41, 1009, 2053, 65537, 300007};
    size_t ncounts = data_quick() ? 6 : sizeof(counts) / sizeof(counts[0]);
    braid_redop_t ops[] = {BRAID_SUM, BRAID_MAX, BRAID_AVG, BRAID_PROD, BRAID_MIN};
    int seed = 11;
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++)
        for (size_t oi = 0; oi < sizeof(ops) / sizeof(ops[0]); oi++) {
            if (ops[oi] == BRAID_PROD && dt != BRAID_FLOAT32 && dt != BRAID_INT64 &&
                dt != BRAID_FLOAT16)
                continue;
            for (size_t ci = 0; ci < ncounts; ci++) {
                if (counts[ci] > 65537 && oi > 1 && dt % 3) continue; /* keep the run short */
                size_t off = ci % 3 == 2 ? 3 : 0;                     /* unaligned */
                if (data_check_allreduce(c, rank, n, (braid_datatype_t)dt, ops[oi], counts[ci],
                                         (int)(ci & 1), off, seed++, "direct"))
                    return 1;
            }
        }
    /* Other collectives (the ring) between direct ones. */
    int32_t x = rank + 1, y = 0;
    MP_OK(rank, braid_broadcast(&x, &y, 1, BRAID_INT32, n - 1, c));
    MP_CHECK(rank, y == n, "broadcast gave %d", y);
    MP_OK(rank, braid_barrier(c));
    if (data_check_allreduce(c, rank, n, BRAID_INT32, BRAID_SUM, 77, 0, 1, 5, "after")) return 1;
    MP_CHECK(rank, (runs(c, BRAID_ALGO_DIRECT) > 0) == (n > 1), "direct ran %llu times",
             (unsigned long long)runs(c, BRAID_ALGO_DIRECT));
    MP_OK(rank, braid_comm_destroy(c));
    return 0;
}

Test(direct, forced_n_1_to_8_every_dtype_and_op)
{
    quick_blocks();
    for (int n = 1; n <= 8; n++)
        if (!skip_n(n))
            cr_assert_eq(mp_run(n, every_dtype, NULL, 300), 0,
                         "n=%d: some rank failed (see stderr)", n);
}

/* ---- reduce-scatter, all-gather, broadcast, reduce ------------------------------------------- */
/* One call of coll (count per rank for reduce-scatter / all-gather) checked against the
 * reference: in place or not, buffers shifted by off bytes. */
/* 1: buffers from braid_mem_alloc (2: on odd ranks only; 4: receive buffers only, 5: send
 * buffers only, on every rank) */
static int mapped_bufs;

static int is_mapped(int rank, int recv)
{
    return mapped_bufs == 1 || (mapped_bufs == 2 && rank % 2) || (mapped_bufs == 4 && recv) ||
           (mapped_bufs == 5 && !recv);
}

static void *buf_alloc(int rank, size_t bytes, int recv)
{
    void *p = NULL;
    if (is_mapped(rank, recv)) return braid_mem_alloc(&p, bytes) == BRAID_SUCCESS ? p : NULL;
    return malloc(bytes);
}

static void buf_free(int rank, void *p, int recv)
{
    if (is_mapped(rank, recv))
        braid_mem_free(p);
    else
        free(p);
}

static int check_coll(braid_comm_t c, int rank, int n, int coll, braid_datatype_t dt,
                      braid_redop_t op, size_t count, int in_place, size_t off, int root, int seed)
{
    size_t es = braid_dtype_size(dt), N = (size_t)n;
    size_t in_n = coll == BRAID_COLL_REDUCE_SCATTER ? count * N : count;
    size_t out_n = coll == BRAID_COLL_ALLGATHER ? count * N : count;
    size_t big = (in_n > out_n ? in_n : out_n) * es + off + 8;
    char *sb = buf_alloc(rank, big, 0), *rb = buf_alloc(rank, big, 1);
    MP_CHECK(rank, sb && rb, "allocating %zu bytes: %s", big, braid_last_error());
    char *s = sb + off, *r = rb + off;
    memset(r, 0xEE, out_n * es);
    const char *name = coll == BRAID_COLL_ALLREDUCE        ? "allreduce"
                       : coll == BRAID_COLL_REDUCE_SCATTER ? "reduce_scatter"
                       : coll == BRAID_COLL_ALLGATHER      ? "allgather"
                       : coll == BRAID_COLL_BROADCAST      ? "broadcast"
                                                           : "reduce";
    char what[160];
    snprintf(what, sizeof(what), "direct %s n=%d %s %s count=%zu %s off=%zu root %d%s", name, n,
             braid_dtype_name(dt), braid_op_name(op), count, in_place ? "in place" : "oop", off,
             root,
             mapped_bufs == 4   ? " receive buffer mapped"
             : mapped_bufs == 5 ? " send buffer mapped"
             : mapped_bufs      ? " mapped"
                                : "");
    braid_result_t res;
    size_t bad = 0;
    if (coll == BRAID_COLL_ALLREDUCE) {
        data_fill(s, dt, op, rank, 0, count, seed);
        char *o = in_place ? s : r;
        res = braid_allreduce(s, o, count, dt, op, c);
        if (!res) bad = data_check_reduced(o, dt, op, n, 0, count, seed, what);
    } else if (coll == BRAID_COLL_REDUCE_SCATTER) {
        data_fill(s, dt, op, rank, 0, in_n, seed);
        char *o = in_place ? s + (size_t)rank * count * es : r;
        res = braid_reduce_scatter(s, o, count, dt, op, c);
        if (!res) bad = data_check_reduced(o, dt, op, n, (size_t)rank * count, count, seed, what);
    } else if (coll == BRAID_COLL_ALLGATHER) {
        char *mine = in_place ? r + (size_t)rank * count * es : s;
        data_fill(mine, dt, op, rank, 0, count, seed);
        res = braid_allgather(mine, r, count, dt, c);
        for (int j = 0; !res && j < n; j++)
            bad += data_check_rank(r + (size_t)j * count * es, dt, op, j, 0, count, seed, what);
    } else if (coll == BRAID_COLL_BROADCAST) {
        data_fill(s, dt, op, rank, 0, count, seed);
        char *o = in_place ? s : r;
        res = braid_broadcast(s, o, count, dt, root, c);
        if (!res) bad = data_check_rank(o, dt, op, root, 0, count, seed, what);
    } else {
        data_fill(s, dt, op, rank, 0, count, seed);
        char *o = in_place ? s : r;
        res = braid_reduce(s, rank == root ? o : NULL, count, dt, op, root, c);
        if (!res && rank == root) bad = data_check_reduced(o, dt, op, n, 0, count, seed, what);
    }
    char err[600];
    snprintf(err, sizeof(err), "%s", braid_last_error()); /* braid_mem_free clears it */
    buf_free(rank, sb, 0);
    buf_free(rank, rb, 1);
    MP_CHECK(rank, res == BRAID_SUCCESS, "%s: %s (%s)", what, braid_strerror(res), err);
    MP_CHECK(rank, bad == 0, "%s: %zu wrong elements", what, bad);
    return 0;
}

/* This process becomes non-dumpable and drops CAP_SYS_PTRACE: no peer can open its descriptors
 * through /proc/<pid>/fd, nor it a non-dumpable peer's (ptrace access mode read). */
static int seal_proc_fds(int rank)
{
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct cd[2];
    MP_CHECK(rank, syscall(SYS_capget, &h, cd) == 0, "capget: %s", strerror(errno));
    cd[CAP_SYS_PTRACE / 32].effective &= ~(1u << (CAP_SYS_PTRACE % 32));
    MP_CHECK(rank, syscall(SYS_capset, &h, cd) == 0, "capset: %s", strerror(errno));
    MP_CHECK(rank, prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0, "prctl: %s", strerror(errno));
    return 0;
}

/* The sealing works: this rank cannot open its successor's standard input through /proc. */
static int check_sealed(braid_comm_t c, int rank, int n)
{
    int32_t me = (int32_t)getpid(), *pids = calloc((size_t)n, sizeof(int32_t));
    MP_CHECK(rank, pids != NULL, "out of memory");
    MP_OK(rank, braid_allgather(&me, pids, 1, BRAID_INT32, c));
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/0", (int)pids[(rank + 1) % n]);
    free(pids);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) close(fd);
    MP_CHECK(rank, fd < 0, "%s opened although its process is sealed", path);
    return 0;
}

static int other_collectives(braid_comm_t comm, int rank, int n, void *arg)
{
    mapped_bufs = arg ? *(int *)arg : 0;
    int sealed = mapped_bufs == 3;
    if (sealed) {
        mapped_bufs = 1;
        if (seal_proc_fds(rank)) return 1;
    }
    braid_comm_t c = mp_fake_host_comm(comm, rank, 0, "direct");
    MP_CHECK(rank, c != NULL, "no communicator");
    if (sealed && n > 1 && check_sealed(c, rank, n)) return 1;
    size_t counts[] = {0, 1, 7, 1009, 70001};
    size_t ncounts = data_quick() ? 4 : 5, big = data_quick() ? 3001 : 100000;
    int colls[] = {BRAID_COLL_REDUCE_SCATTER, BRAID_COLL_ALLGATHER, BRAID_COLL_BROADCAST,
                   BRAID_COLL_REDUCE, BRAID_COLL_ALLREDUCE};
    braid_redop_t ops[] = {BRAID_SUM, BRAID_AVG, BRAID_MIN, BRAID_PROD, BRAID_MAX};
    int seed = 100;
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++)
        for (size_t ci = 0; ci < ncounts; ci++)
            for (int k = 0; k < (mapped_bufs ? 5 : 4); k++) {
                if (counts[ci] > 1009 && dt % 4 != 0 && dt < BRAID_FLOAT8_E4M3) continue;
                braid_redop_t op = ops[(ci + (size_t)dt) % 5];
                if (op == BRAID_PROD && dt != BRAID_FLOAT32 && dt != BRAID_INT64) op = BRAID_SUM;
                int root = (int)(ci + (size_t)k) % n;
                if (check_coll(c, rank, n, colls[k], (braid_datatype_t)dt, op, counts[ci],
                               (int)((ci + (size_t)k) & 1), ci % 2 ? 0 : 5, root, seed++))
                    return 1;
            }
    /* Mixed in one stream: a non-root of a broadcast writes its slot in the next all-reduce
     * only once every peer is past the blocks it may still read (the write rule). */
    for (int it = 0; it < (data_quick() ? 10 : 30); it++) {
        int root = it % n;
        if (check_coll(c, rank, n, BRAID_COLL_BROADCAST, BRAID_INT32, BRAID_SUM, it % 3 ? 3 : big,
                       0, 0, root, seed++) ||
            data_check_allreduce(c, rank, n, BRAID_INT32, BRAID_SUM, it % 2 ? 5 : big - 9, 0, 0,
                                 seed++, "mixed") ||
            check_coll(c, rank, n, BRAID_COLL_REDUCE, BRAID_FLOAT32, BRAID_SUM, big - 30, 0, 0,
                       root, seed++))
            return 1;
    }
    MP_CHECK(rank, (runs(c, BRAID_ALGO_DIRECT) > 0) == (n > 1), "direct ran %llu times",
             (unsigned long long)runs(c, BRAID_ALGO_DIRECT));
    MP_OK(rank, braid_comm_destroy(c));
    return 0;
}

Test(direct, reduce_scatter_allgather_broadcast_reduce_n_1_to_8)
{
    quick_blocks();
    for (int n = 1; n <= 8; n++)
        if (!skip_n(n))
            cr_assert_eq(mp_run(n, other_collectives, NULL, 300), 0,
                         "n=%d: some rank failed (see stderr)", n);
}

/* Buffers from braid_mem_alloc: the peers read them in place (no copy into the segments) and
 * write the all-reduce's slices into the mapped outputs, on every rank or on odd ranks only
 * (mixed in one call); and only the receive or only the send buffers mapped. */
Test(direct, mapped_buffers_every_collective_n_1_to_8)
{
    int all = 1, odd = 2, recv_only = 4, send_only = 5;
    quick_blocks();
    for (int n = 1; n <= 8; n++) {
        if (skip_n(n)) continue;
        cr_assert_eq(mp_run(n, other_collectives, &all, 300), 0,
                     "n=%d mapped: some rank failed (see stderr)", n);
        if (n > 1)
            cr_assert_eq(mp_run(n, other_collectives, &odd, 300), 0,
                         "n=%d odd ranks mapped: some rank failed (see stderr)", n);
        if (n == 2 || n == 3) {
            cr_assert_eq(mp_run(n, other_collectives, &recv_only, 300), 0,
                         "n=%d receive buffers mapped: some rank failed (see stderr)", n);
            cr_assert_eq(mp_run(n, other_collectives, &send_only, 300), 0,
                         "n=%d send buffers mapped: some rank failed (see stderr)", n);
        }
    }
}

/* Every rank sealed (seal_proc_fds): the probe at setup fails, and buffers from braid_mem_alloc
 * are copied into the segments (without the probe every call would fail mapping them). */
Test(direct, mapped_buffers_copied_when_peers_cannot_open_them)
{
    int sealed = 3;
    quick_blocks();
    for (int n = 2; n <= 5; n += data_quick() ? 3 : 1)
        cr_assert_eq(mp_run(n, other_collectives, &sealed, 300), 0,
                     "n=%d sealed: some rank failed (see stderr)", n);
}

/* BRAID_NT_MIN=1: every output copy with streaming stores (unaligned, in place, every size):
 * the same results. */
Test(direct, streaming_stores_give_the_same_results)
{
    int all = 1;
    quick_blocks();
    setenv("BRAID_NT_MIN", "1", 1);
    for (int n = 2; n <= 3; n++) {
        cr_assert_eq(mp_run(n, other_collectives, NULL, 300), 0, "n=%d: some rank failed", n);
        cr_assert_eq(mp_run(n, other_collectives, &all, 300), 0, "n=%d mapped: failed", n);
    }
}

/* BRAID_DIRECT_NT_SLOTS forced on and off (auto picks one by the CPU's vendor): blocks copied into
 * the slots with and without streaming stores, every collective, mapped buffers and not. */
Test(direct, slots_with_and_without_streaming_stores_give_the_same_results)
{
    int all = 1;
    quick_blocks();
    const char *modes[] = {"0", "1"};
    for (int m = 0; m < 2; m++) {
        setenv("BRAID_DIRECT_NT_SLOTS", modes[m], 1);
        cr_assert_eq(mp_run(3, other_collectives, NULL, 300), 0, "BRAID_DIRECT_NT_SLOTS=%s",
                     modes[m]);
        cr_assert_eq(mp_run(2, other_collectives, &all, 300), 0, "BRAID_DIRECT_NT_SLOTS=%s mapped",
                     modes[m]);
    }
    unsetenv("BRAID_DIRECT_NT_SLOTS");
}

/* auto: streaming for an AMD CPU with no more ranks on the machine than cpus; else plain for
 * everything that follows the setting, and the direct collectives measure both (x86-64). */
static int nt_slots_auto(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    struct braid_comm *c = (struct braid_comm *)comm;
    int want = n <= c->machine_ncpus && braid_copy_shared_nt_default();
    MP_CHECK(rank, c->machine_nranks == n, "machine ranks %d", c->machine_nranks);
    MP_CHECK(rank, c->direct_nt_slots == want, "%d ranks on %d cpus: streaming slots %d, want %d",
             n, c->machine_ncpus, c->direct_nt_slots, want);
#if defined(__x86_64__)
    MP_CHECK(rank, c->direct_nt_pick == !want, "%d ranks on %d cpus: measured %d", n,
             c->machine_ncpus, c->direct_nt_pick);
#endif
    return 0;
}

Test(direct, streaming_slots_auto_is_off_with_more_ranks_than_cpus)
{
    long ncpus = sysconf(_SC_NPROCESSORS_ONLN);
    cr_assert(ncpus >= 1);
    cr_assert_eq(mp_run(2, nt_slots_auto, NULL, 100), 0, "n=2 (see stderr)");
    if (ncpus < 8) cr_assert_eq(mp_run((int)ncpus + 1, nt_slots_auto, NULL, 100), 0, "n=cpus+1");
    setenv("BRAID_DIRECT_NT_SLOTS", "AUTO", 1);
    cr_assert_eq(mp_run(1, nt_slots_auto, NULL, 100), 0, "n=1 AUTO (see stderr)");
    unsetenv("BRAID_DIRECT_NT_SLOTS");
}

Test(direct, mem_alloc_and_free_check_their_arguments)
{
    void *p = (void *)0x1;
    cr_assert_eq(braid_mem_alloc(NULL, 64), BRAID_ERR_INVALID_ARG);
    cr_assert(strstr(braid_last_error(), "ptr_p"), "%s", braid_last_error());
    cr_assert_eq(braid_mem_alloc(&p, 0), BRAID_ERR_INVALID_ARG);
    cr_assert(strstr(braid_last_error(), "bytes"), "%s", braid_last_error());
    cr_assert_eq(p, (void *)0x1, "output set on failure");
    cr_assert_eq(braid_mem_alloc(&p, 100000), BRAID_SUCCESS, "%s", braid_last_error());
    for (size_t i = 0; i < 100000; i++)
        cr_assert_eq(((unsigned char *)p)[i], 0, "byte %zu not zero", i);
    memset(p, 0x5a, 100000);
    char local[16];
    cr_assert_eq(braid_mem_free(local), BRAID_ERR_INVALID_ARG);
    cr_assert(strstr(braid_last_error(), "ptr="), "%s", braid_last_error());
    cr_assert_eq(braid_mem_free((char *)p + 1), BRAID_ERR_INVALID_ARG, "an interior pointer");
    cr_assert_eq(braid_mem_free(p), BRAID_SUCCESS);
    cr_assert_eq(braid_mem_free(p), BRAID_ERR_INVALID_ARG, "freed twice");
    cr_assert_eq(braid_mem_free(NULL), BRAID_SUCCESS);
}

/* ---- bit-identical results ---------------------------------------------------------------------
 */
static uint64_t rng(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 11;
}

static double rand_val(int rank, size_t i, int seed)
{
    uint64_t s = ((uint64_t)seed << 40) ^ ((uint64_t)rank << 32) ^ (uint64_t)i;
    rng(&s);
    double m = (double)(rng(&s) & 0xfffff) / 1048576.0 - 0.5;
    return ldexp(m, (int)(rng(&s) % 24) - 8);
}

static int bit_identical(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    braid_comm_t c = mp_fake_host_comm(comm, rank, 0, "direct");
    MP_CHECK(rank, c != NULL, "no communicator");
    braid_datatype_t dts[] = {BRAID_FLOAT32, BRAID_FLOAT64, BRAID_FLOAT16, BRAID_BFLOAT16};
    braid_redop_t ops[] = {BRAID_SUM, BRAID_AVG, BRAID_MAX};
    size_t counts[] = {1, 3, 257, 3001, 100003};
    size_t ncounts = data_quick() ? 4 : 5;
    int seed = 7;
    for (size_t di = 0; di < 4; di++)
        for (size_t oi = 0; oi < 3; oi++)
            for (size_t ci = 0; ci < ncounts; ci++, seed++) {
                braid_datatype_t dt = dts[di];
                size_t count = counts[ci], bytes = count * braid_dtype_size(dt);
                char *buf = malloc(bytes), *ref = malloc(bytes);
                MP_CHECK(rank, buf && ref, "malloc");
                for (size_t i = 0; i < count; i++) {
                    double v = rand_val(rank, i, seed);
                    if (dt == BRAID_FLOAT32)
                        ((float *)buf)[i] = (float)v;
                    else if (dt == BRAID_FLOAT64)
                        ((double *)buf)[i] = v;
                    else if (dt == BRAID_FLOAT16)
                        ((uint16_t *)buf)[i] = braid_float_to_half((float)(v / 64));
                    else
                        ((uint16_t *)buf)[i] = braid_float_to_bf16((float)v);
                }
                if (ops[oi] == BRAID_MAX && dt == BRAID_FLOAT32 && count > 2) {
                    if (rank == n - 1) ((float *)buf)[1] = NAN;
                    if (rank == 0) ((float *)buf)[2] = -0.0f;
                }
                MP_OK(rank, braid_allreduce(buf, buf, count, dt, ops[oi], c));
                if (dt == BRAID_FLOAT64 && ops[oi] == BRAID_SUM)
                    for (size_t i = 0; i < count; i++) {
                        double want = 0;
                        for (int r = 0; r < n; r++)
                            want += rand_val(r, i, seed);
                        double got = ((double *)buf)[i];
                        MP_CHECK(rank, fabs(got - want) <= 1e-9 * (1 + fabs(want)),
                                 "elem %zu: %g, want %g", i, got, want);
                    }
                /* rank 0's result, bit for bit (a broadcast of bytes) */
                MP_OK(rank, braid_broadcast(buf, ref, bytes, BRAID_UINT8, 0, c));
                for (size_t i = 0; i < bytes; i++)
                    MP_CHECK(rank, buf[i] == ref[i],
                             "%s %s count %zu: byte %zu differs from rank 0's (0x%02x vs 0x%02x)",
                             braid_dtype_name(dt), braid_op_name(ops[oi]), count, i,
                             (unsigned char)buf[i], (unsigned char)ref[i]);
                free(buf);
                free(ref);
            }
    MP_CHECK(rank, runs(c, BRAID_ALGO_DIRECT) > 0, "direct did not run");
    MP_OK(rank, braid_comm_destroy(c));
    return 0;
}

Test(direct, order_sensitive_floats_bit_identical_on_every_rank)
{
    quick_blocks();
    int ns[] = {2, 3, 5, 8};
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++)
        cr_assert_eq(mp_run(ns[i], bit_identical, NULL, 200), 0,
                     "n=%d: some rank failed (see stderr)", ns[i]);
}

/* ---- the model's choice, and off ----------------------------------------------------------------
 */
static int automatic(braid_comm_t comm, int rank, int n, void *arg)
{
    const char *block = arg;
    (void)n;
    setenv("BRAID_DIRECT_BLOCK", block, 1);
    braid_comm_t c = mp_fake_host_comm(comm, rank, 0, "");
    unsetenv("BRAID_DIRECT_BLOCK");
    MP_CHECK(rank, c != NULL, "no communicator");
    int off = !strcmp(block, "0");
    MP_CHECK(rank, (((struct braid_comm *)c)->direct == NULL) == off, "segments %s",
             off ? "mapped though off" : "missing");
    size_t counts[] = {2, 4096, 1 << 20};
    for (size_t i = 0; i < 3; i++) {
        uint64_t before = runs(c, BRAID_ALGO_DIRECT);
        if (data_check_allreduce(c, rank, n, BRAID_FLOAT32, BRAID_SUM, counts[i], 0, 0, 3, "auto"))
            return 1;
        MP_CHECK(rank, runs(c, BRAID_ALGO_DIRECT) == before + !off, "count %zu: direct %s",
                 counts[i], off ? "ran though off" : "did not run");
    }
    MP_OK(rank, braid_comm_destroy(c));
    return 0;
}

Test(direct, chosen_on_one_host_and_off_with_block_0)
{
    cr_assert_eq(mp_run(3, automatic, "262144", 100), 0, "some rank failed (see stderr)");
    cr_assert_eq(mp_run(3, automatic, "0", 100), 0, "some rank failed (see stderr)");
    cr_assert_eq(mp_run(2, automatic, "4096", 100), 0, "some rank failed (see stderr)");
}

/* BRAID_DIRECT_BLOCK's value (NULL: unset, the default auto) and the block the segments get:
 * auto is 1 MiB, 4 MiB with more ranks on the machine than cpus; a set value is kept; a
 * multi-block all-reduce is still right. */
typedef struct {
    const char *value;
    size_t want;
} block_case_t;

static int block_size(braid_comm_t comm, int rank, int n, void *arg)
{
    const block_case_t *bc = arg;
    if (bc->value)
        setenv("BRAID_DIRECT_BLOCK", bc->value, 1);
    else
        unsetenv("BRAID_DIRECT_BLOCK");
    braid_comm_t c = mp_fake_host_comm(comm, rank, 0, "direct");
    unsetenv("BRAID_DIRECT_BLOCK");
    MP_CHECK(rank, c != NULL, "no communicator");
    struct braid_comm *ci = (struct braid_comm *)c;
    /* auto: 1 MiB, also with more ranks than cpus (3 and 4 ranks on a 2-cpu machine) */
    size_t want = bc->want ? bc->want : (size_t)1 << 20;
    MP_CHECK(rank, ci->direct != NULL && ci->direct_block == want,
             "n=%d BRAID_DIRECT_BLOCK=%s: block %zu, want %zu", n,
             bc->value ? bc->value : "(unset)", ci->direct_block, want);
    MP_CHECK(rank, braid_direct_block(ci->direct) == want, "segment slots of %zu bytes",
             braid_direct_block(ci->direct));
    MP_CHECK(rank,
             ci->algo_state->model.direct_block_auto ==
                 (!bc->value || !strcasecmp(bc->value, "auto")),
             "the model's auto flag");
    /* several blocks and a short last one, forced onto the direct path */
    size_t count = 3 * want / sizeof(float) + 37;
    uint64_t before = runs(c, BRAID_ALGO_DIRECT);
    if (data_check_allreduce(c, rank, n, BRAID_FLOAT32, BRAID_SUM, count, 0, 0, 1, "blocks"))
        return 1;
    MP_CHECK(rank, runs(c, BRAID_ALGO_DIRECT) == before + 1, "the direct path did not run");
    /* The all-gather and broadcast, which only copy, take at most 256 KiB of the slot per block
     * at 2 ranks, the whole slot otherwise: counted on the segment's block counter. */
    size_t cb = n == 2 && want > ((size_t)256 << 10) ? (size_t)256 << 10 : want;
    size_t per = 3 * cb / sizeof(float) + 37;
    int colls[] = {BRAID_COLL_ALLGATHER, BRAID_COLL_BROADCAST};
    for (int k = 0; k < 2; k++) {
        uint64_t g0 = *braid_direct_counter(ci->direct);
        if (check_coll(c, rank, n, colls[k], BRAID_FLOAT32, BRAID_SUM, per, k, 0, n - 1, 50 + k))
            return 1;
        uint64_t blocks = *braid_direct_counter(ci->direct) - g0;
        MP_CHECK(rank, blocks == 4,
                 "n=%d %s of %zu floats: %llu blocks of the slot's %zu bytes, "
                 "want 4 of %zu",
                 n, k ? "broadcast" : "allgather", per, (unsigned long long)blocks, want, cb);
    }
    MP_OK(rank, braid_comm_destroy(c));
    return 0;
}

Test(direct, block_is_1m_also_oversubscribed_unless_set)
{
    block_case_t unset = {NULL, 0}, aut = {"AUTO", 0}, set = {"128K", (size_t)128 << 10};
    cr_assert_eq(mp_run(2, block_size, &unset, 100), 0, "n=2 unset (see stderr)");
    cr_assert_eq(mp_run(3, block_size, &unset, 100), 0, "n=3 unset (see stderr)");
    cr_assert_eq(mp_run(4, block_size, &aut, 100), 0, "n=4 auto (see stderr)");
    cr_assert_eq(mp_run(3, block_size, &set, 100), 0, "n=3 128K (see stderr)");
}

/* ---- the next block staged during the gather (BRAID_DIRECT_PIPELINE) ------------------------ */
/* Counts whose last block is short (the one block that must not be staged early: its slice
 * sits elsewhere in the slot than the slice peers may still be gathering), and one of whole
 * blocks, many calls in a row, in place and not, every rank checked against the reference;
 * with more ranks than cpus the ranks are preempted at every step, so a peer is often still
 * gathering a block when another stages the block after next. */
static int staged_blocks(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    braid_comm_t c = mp_fake_host_comm(comm, rank, 0, "direct");
    MP_CHECK(rank, c != NULL && ((struct braid_comm *)c)->direct, "no direct segments");
    size_t blk = braid_direct_block(((struct braid_comm *)c)->direct) / sizeof(float);
    size_t counts[] = {2 * blk + blk / 2, 3 * blk + 17,  2 * blk + 1,
                       4 * blk,           blk + blk / 3, 5 * blk + blk - 3};
    int seed = 100;
    for (int it = 0; it < 12; it++)
        for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
            if (data_check_allreduce(c, rank, n, BRAID_FLOAT32, BRAID_SUM, counts[ci],
                                     (it + (int)ci) & 1, 0, seed++, "staged"))
                return 1;
    MP_OK(rank, braid_comm_destroy(c));
    return 0;
}

Test(direct, next_block_staged_during_the_gather_keeps_every_result_exact)
{
    setenv("BRAID_DIRECT_BLOCK", "4096", 1);
    const char *modes[] = {"1", "0"};
    for (int m = 0; m < 2; m++) {
        setenv("BRAID_DIRECT_PIPELINE", modes[m], 1);
        for (int n = 2; n <= 5; n++)
            cr_assert_eq(mp_run(n, staged_blocks, NULL, 300), 0,
                         "BRAID_DIRECT_PIPELINE=%s n=%d: some rank failed (see stderr)", modes[m],
                         n);
    }
    unsetenv("BRAID_DIRECT_PIPELINE");
}

/* ---- faults ---------------------------------------------------------------------------------- */
static int loop_until_error(braid_comm_t comm, int rank, int n, void *arg)
{
    size_t count = *(size_t *)arg;
    (void)n;
    float *buf = calloc(count, sizeof(float));
    MP_CHECK(rank, buf != NULL, "calloc");
    braid_result_t res = BRAID_SUCCESS;
    for (int it = 0; it < 100000000 && res == BRAID_SUCCESS; it++) {
        res = braid_allreduce(buf, buf, count, BRAID_FLOAT32, BRAID_SUM, comm);
        if (rank == 1 && it == 20) { /* mid-loop: the parent may kill this rank now */
            FILE *f = fopen(getenv("DIRECT_KILL_MARK"), "w");
            if (f) fclose(f);
        }
    }
    free(buf);
    MP_CHECK(rank, res == BRAID_ERR_REMOTE, "got %s (%s)", braid_strerror(res), braid_last_error());
    MP_CHECK(rank, strstr(braid_last_error(), "rank 1"), "message '%s' does not name rank 1",
             braid_last_error());
    MP_CHECK(rank, runs(comm, BRAID_ALGO_DIRECT) > 0, "direct never ran");
    return 0;
}

Test(direct, killed_rank_gives_remote_error_naming_it_and_leaves_no_shm)
{
    setenv("BRAID_ALGO", "direct", 1);
    int ns[] = {2, 3, 5};
    size_t counts[] = {1 << 18, 2}; /* blocks, and the small path */
    for (size_t ci = 0; ci < 2; ci++)
        for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
            int n = ns[i];
            char mark[64];
            snprintf(mark, sizeof(mark), "/tmp/braid-direct-kill-%d", (int)getpid());
            unlink(mark);
            setenv("DIRECT_KILL_MARK", mark, 1);
            mp_job_t job;
            mp_start(&job, n, loop_until_error, &counts[ci]);
            for (int w = 0; w < 3000 && access(mark, F_OK) != 0; w++)
                usleep(10 * 1000);
            cr_assert_eq(access(mark, F_OK), 0, "n=%d: rank 1 never got to its 20th call", n);
            kill(job.pids[1], SIGKILL);
            unlink(mark);
            mp_wait(&job, 60);
            for (int r = 0; r < n; r++) {
                if (r == 1) continue;
                cr_assert(WIFEXITED(job.status[r]) && WEXITSTATUS(job.status[r]) == 0,
                          "n=%d count %zu: survivor rank %d failed (see stderr)", n, counts[ci], r);
            }
            cr_assert_eq(mp_shm_leftovers(&job), 0, "n=%d: shm segments left in /dev/shm", n);
        }
    unsetenv("BRAID_ALGO");
}

static int mismatched(braid_comm_t comm, int rank, int n, void *arg)
{
    int kind = *(int *)arg;
    (void)n;
    static float buf[300000];
    braid_result_t r;
    size_t big = 100000;
    if (kind == 0) /* counts that differ (small path) */
        r = braid_allreduce(buf, buf, rank == 1 ? 200 : 100, BRAID_FLOAT32, BRAID_SUM, comm);
    else if (kind == 1) /* counts that differ (blocks) */
        r = braid_allreduce(buf, buf, rank == 1 ? big + 1 : big, BRAID_FLOAT32, BRAID_SUM, comm);
    else if (rank == 1) /* another collective (the ring) against the direct all-reduce */
        r = braid_allgather(buf, buf + 1000, 100, BRAID_FLOAT32, comm);
    else
        r = braid_allreduce(buf, buf, big, BRAID_FLOAT32, BRAID_SUM, comm);
    if (r == BRAID_SUCCESS) r = braid_barrier(comm);
    MP_CHECK(rank, r == BRAID_ERR_MISMATCH || r == BRAID_ERR_REMOTE, "got %s: %s",
             braid_strerror(r), braid_last_error());
    const char *m = braid_last_error();
    if (kind == 0)
        MP_CHECK(rank, strstr(m, "count 100") && strstr(m, "count 200"), "message: %s", m);
    else if (kind == 1)
        MP_CHECK(rank, strstr(m, "count 100000") && strstr(m, "count 100001"), "message: %s", m);
    else
        MP_CHECK(rank, strstr(m, "allgather") || strstr(m, "rank 1"), "message: %s", m);
    return 0;
}

Test(direct, mismatched_calls_name_both)
{
    setenv("BRAID_ALGO", "direct", 1);
    setenv("BRAID_TIMEOUT", "30", 1);
    for (int kind = 0; kind < 3; kind++) {
        cr_assert_eq(mp_run(2, mismatched, &kind, 60), 0, "kind %d n=2 (see stderr)", kind);
        cr_assert_eq(mp_run(4, mismatched, &kind, 60), 0, "kind %d n=4 (see stderr)", kind);
    }
    unsetenv("BRAID_TIMEOUT");
    unsetenv("BRAID_ALGO");
}

static void *abort_later(void *c)
{
    usleep(300 * 1000);
    braid_comm_abort(c);
    return NULL;
}

/* Rank 0 waits in a direct all-reduce that rank 1 enters only after the abort: rank 0 gets
 * BRAID_ERR_ABORTED. Rank 1 may still complete that call correctly (rank 0's input was in
 * its segment before it waited), but its next call needs rank 0, which failed: an error. */
static int abort_from_thread(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    int32_t buf[64];
    for (int i = 0; i < 64; i++)
        buf[i] = rank * 1000 + i;
    if (rank == 1) {
        usleep(1500 * 1000);
        braid_result_t r = braid_allreduce(buf, buf, 64, BRAID_INT32, BRAID_SUM, comm);
        for (int i = 0; r == BRAID_SUCCESS && i < 64; i++)
            MP_CHECK(rank, buf[i] == 1000 + 2 * i, "[%d] = %d", i, (int)buf[i]);
        if (r == BRAID_SUCCESS) r = braid_allreduce(buf, buf, 64, BRAID_INT32, BRAID_SUM, comm);
        MP_CHECK(rank, r == BRAID_ERR_REMOTE || r == BRAID_ERR_ABORTED, "got %s: %s",
                 braid_strerror(r), braid_last_error());
        MP_CHECK(rank, strstr(braid_last_error(), "rank 0"), "message: %s", braid_last_error());
        return 0;
    }
    (void)n;
    pthread_t t;
    pthread_create(&t, NULL, abort_later, comm);
    braid_result_t r = braid_allreduce(buf, buf, 64, BRAID_INT32, BRAID_SUM, comm);
    pthread_join(t, NULL);
    MP_CHECK(rank, r == BRAID_ERR_ABORTED, "got %s: %s", braid_strerror(r), braid_last_error());
    return 0;
}

Test(direct, abort_from_another_thread_ends_the_wait)
{
    setenv("BRAID_ALGO", "direct", 1);
    setenv("BRAID_YIELD_US", "100", 1); /* asleep on the futex when the abort comes */
    cr_assert_eq(mp_run(2, abort_from_thread, NULL, 30), 0);
    unsetenv("BRAID_YIELD_US");
    unsetenv("BRAID_ALGO");
}
