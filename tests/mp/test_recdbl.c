/* Recursive doubling all-reduce as real processes: forced with BRAID_ALGO=recdbl on a
 * communicator split from the job's (the split re-reads the environment), for n = 1..8 (powers
 * of two and not), every dtype x a few ops, bit-exact against the reference data; results that
 * depend on the reduction order (random floats) must be bit-identical on every rank; faked
 * hosts put some partners on tcp; the model picks recdbl by itself at small sizes. */
#include "algos/algo.h"
#include "core/comm.h"
#include "data.h"
#include "mp.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "reduce/reduce.h"

typedef struct {
    const char *algo;  /* BRAID_ALGO for the split communicator */
    int hosts;         /* rank r is on fake host r % hosts */
    int expect_recdbl; /* recdbl must have run (else it must not have) */
} cfg_t;

static uint64_t recdbl_runs(braid_comm_t c)
{
    braid_algo_state_t *st = ((struct braid_comm *)c)->algo_state;
    return st ? st->runs[BRAID_ALGO_RECDBL] : 0;
}

static int check_one(braid_comm_t c, int rank, int n, braid_datatype_t dt, braid_redop_t op,
                     size_t count, int in_place, int seed)
{
    size_t es = braid_dtype_size(dt);
    char *s = malloc(count * es + 1), *r = malloc(count * es + 1);
    MP_CHECK(rank, s && r, "malloc");
    data_fill(s, dt, op, rank, 0, count, seed);
    char *out = in_place ? s : r;
    if (!in_place) memset(r, 0xEE, count * es);
    char what[128];
    snprintf(what, sizeof(what), "recdbl allreduce n=%d %s %s count=%zu %s", n,
             braid_dtype_name(dt), braid_op_name(op), count, in_place ? "in place" : "oop");
    braid_result_t res = braid_allreduce(s, out, count, dt, op, c);
    size_t bad = res ? count + 1 : data_check_reduced(out, dt, op, n, 0, count, seed, what);
    free(s);
    free(r);
    MP_CHECK(rank, res == BRAID_SUCCESS, "%s: %s", what, braid_last_error());
    MP_CHECK(rank, bad == 0, "%s: %zu wrong elements", what, bad);
    return 0;
}

static int every_dtype(braid_comm_t comm, int rank, int n, void *arg)
{
    const cfg_t *cfg = arg;
    braid_comm_t c = mp_fake_host_comm(comm, rank, rank % cfg->hosts, cfg->algo);
    MP_CHECK(rank, c != NULL, "no communicator");
    /* 0, primes, and more than one 64 KiB chunk for every element size */
    size_t counts[] = {0, 1, 2, 13, 1009, 65537};
    braid_redop_t ops[] = {BRAID_SUM, BRAID_MAX, BRAID_AVG, BRAID_PROD, BRAID_MIN};
    int seed = 1;
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++)
        for (size_t oi = 0; oi < sizeof(ops) / sizeof(ops[0]); oi++) {
            if (ops[oi] >= BRAID_PROD && ops[oi] != BRAID_MIN && dt != BRAID_FLOAT32 &&
                dt != BRAID_INT64)
                continue; /* prod: two dtypes; min: all */
            for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
                if (check_one(c, rank, n, dt, ops[oi], counts[ci], (int)(ci & 1), seed++)) return 1;
        }
    /* The ring collectives still work between recursive doubling ones. */
    int32_t x = rank + 1, y = 0;
    MP_OK(rank, braid_broadcast(&x, &y, 1, BRAID_INT32, n - 1, c));
    MP_CHECK(rank, y == n, "broadcast gave %d", y);
    MP_OK(rank, braid_barrier(c));
    uint64_t runs = recdbl_runs(c);
    MP_CHECK(rank, (runs > 0) == (cfg->expect_recdbl && n > 1), "recdbl ran %llu times",
             (unsigned long long)runs);
    MP_OK(rank, braid_comm_destroy(c));
    return 0;
}

static uint64_t rng(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 11;
}

/* Random floats of mixed magnitudes: the sum depends on the order of the additions. */
static double rand_val(int rank, size_t i, int seed)
{
    uint64_t s = ((uint64_t)seed << 40) ^ ((uint64_t)rank << 32) ^ (uint64_t)i;
    rng(&s);
    double m = (double)(rng(&s) & 0xfffff) / 1048576.0 - 0.5;
    return ldexp(m, (int)(rng(&s) % 24) - 8);
}

static void fill_random(void *buf, braid_datatype_t dt, int rank, size_t count, int seed)
{
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
}

static int bit_identical(braid_comm_t comm, int rank, int n, void *arg)
{
    const cfg_t *cfg = arg;
    braid_comm_t c = mp_fake_host_comm(comm, rank, rank % cfg->hosts, cfg->algo);
    MP_CHECK(rank, c != NULL, "no communicator");
    braid_datatype_t dts[] = {BRAID_FLOAT32, BRAID_FLOAT64, BRAID_FLOAT16, BRAID_BFLOAT16};
    braid_redop_t ops[] = {BRAID_SUM, BRAID_AVG, BRAID_MAX};
    size_t counts[] = {1, 3, 257, 40000};
    int seed = 7;
    for (size_t di = 0; di < sizeof(dts) / sizeof(dts[0]); di++)
        for (size_t oi = 0; oi < sizeof(ops) / sizeof(ops[0]); oi++)
            for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++, seed++) {
                braid_datatype_t dt = dts[di];
                size_t count = counts[ci], bytes = count * braid_dtype_size(dt);
                char *buf = malloc(bytes), *ref = malloc(bytes);
                MP_CHECK(rank, buf && ref, "malloc");
                fill_random(buf, dt, rank, count, seed);
                if (ops[oi] == BRAID_MAX && dt == BRAID_FLOAT32 && count > 2) {
                    /* NaN on one rank: max must propagate it the same way everywhere */
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
                /* rank 0's result, copied bit for bit by the (ring) broadcast of bytes */
                MP_OK(rank, braid_broadcast(buf, ref, bytes, BRAID_UINT8, 0, c));
                for (size_t i = 0; i < bytes; i++)
                    MP_CHECK(rank, buf[i] == ref[i],
                             "%s %s count %zu: byte %zu differs from rank 0's (0x%02x vs 0x%02x)",
                             braid_dtype_name(dt), braid_op_name(ops[oi]), count, i,
                             (unsigned char)buf[i], (unsigned char)ref[i]);
                free(buf);
                free(ref);
            }
    MP_CHECK(rank, n == 1 || recdbl_runs(c) > 0, "recdbl did not run");
    MP_OK(rank, braid_comm_destroy(c));
    return 0;
}

TestSuite(recdbl, .timeout = 300);

Test(recdbl, forced_n_1_to_8_every_dtype)
{
    cfg_t cfg = {.algo = "recdbl", .hosts = 1, .expect_recdbl = 1};
    for (int n = 1; n <= 8; n++)
        cr_assert_eq(mp_run(n, every_dtype, &cfg, 200), 0, "n=%d: some rank failed (see stderr)",
                     n);
}

Test(recdbl, order_sensitive_floats_bit_identical_on_every_rank)
{
    cfg_t cfg = {.algo = "recdbl", .hosts = 1, .expect_recdbl = 1};
    int ns[] = {3, 4, 6, 7};
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++)
        cr_assert_eq(mp_run(ns[i], bit_identical, &cfg, 200), 0,
                     "n=%d: some rank failed (see stderr)", ns[i]);
}

Test(recdbl, partners_over_tcp_on_fake_hosts)
{
    /* rank r on host r % 2: every xor-1 pair and the fix-up pair of n=5 cross hosts */
    cfg_t cfg = {.algo = "recdbl", .hosts = 2, .expect_recdbl = 1};
    cr_assert_eq(mp_run(5, bit_identical, &cfg, 200), 0, "some rank failed (see stderr)");
    cr_assert_eq(mp_run(4, every_dtype, &cfg, 200), 0, "some rank failed (see stderr)");
}

Test(recdbl, ring_forced_never_runs_recdbl)
{
    cfg_t cfg = {.algo = "ring", .hosts = 1, .expect_recdbl = 0};
    cr_assert_eq(mp_run(3, every_dtype, &cfg, 200), 0, "some rank failed (see stderr)");
}

/* Automatic: the model takes recdbl for a few bytes and the ring for megabytes. */
static int automatic(braid_comm_t comm, int rank, int n, void *arg)
{
    const cfg_t *cf = arg;
    braid_comm_t c = mp_fake_host_comm(comm, rank, rank % cf->hosts, cf->algo);
    MP_CHECK(rank, c != NULL, "no communicator");
    braid_algo_state_t *st = ((struct braid_comm *)c)->algo_state;
    if (check_one(c, rank, n, BRAID_FLOAT32, BRAID_SUM, 2, 0, 3)) return 1;
    MP_CHECK(rank, st->runs[BRAID_ALGO_RECDBL] == 1 && st->runs[BRAID_ALGO_RING] == 0,
             "8 B: recdbl %llu, ring %llu", (unsigned long long)st->runs[BRAID_ALGO_RECDBL],
             (unsigned long long)st->runs[BRAID_ALGO_RING]);
    if (check_one(c, rank, n, BRAID_FLOAT32, BRAID_SUM, 1 << 20, 1, 4)) return 1;
    MP_CHECK(rank, st->runs[BRAID_ALGO_RECDBL] == 1 && st->runs[BRAID_ALGO_RING] == 1,
             "4 MiB: recdbl %llu, ring %llu", (unsigned long long)st->runs[BRAID_ALGO_RECDBL],
             (unsigned long long)st->runs[BRAID_ALGO_RING]);
    MP_OK(rank, braid_comm_destroy(c));
    return 0;
}

Test(recdbl, automatic_small_recdbl_large_ring)
{
    cfg_t cfg = {.algo = "", .hosts = 1};
    /* without the direct shared-memory path, which the model prefers on one host */
    setenv("BRAID_DIRECT_BLOCK", "0", 1);
    cr_assert_eq(mp_run(3, automatic, &cfg, 100), 0, "some rank failed (see stderr)");
    unsetenv("BRAID_DIRECT_BLOCK");
}

/* Ranks that call different counts may pick different algorithms (so different connections):
 * each must still get a mismatch error naming both calls, not hang. */
static int mismatch_across_algorithms(braid_comm_t comm, int rank, int n, void *arg)
{
    const cfg_t *cf = arg;
    braid_comm_t c = mp_fake_host_comm(comm, rank, rank % cf->hosts, cf->algo);
    MP_CHECK(rank, c != NULL, "no communicator");
    size_t count = rank == 1 ? 2 : (size_t)1 << 20;
    float *buf = calloc(count, sizeof(float));
    MP_CHECK(rank, buf != NULL, "calloc");
    braid_result_t r = braid_allreduce(buf, buf, count, BRAID_FLOAT32, BRAID_SUM, c);
    if (r == BRAID_SUCCESS) r = braid_barrier(c); /* a rank may finish first: then its next call */
    free(buf);
    MP_CHECK(rank, r == BRAID_ERR_MISMATCH || r == BRAID_ERR_REMOTE, "got %s: %s",
             braid_strerror(r), braid_last_error());
    MP_CHECK(rank, strstr(braid_last_error(), "count 2,") || n < 2, "message: %s",
             braid_last_error());
    braid_comm_destroy(c);
    return 0;
}

Test(recdbl, mismatched_counts_across_algorithms_fail_clearly)
{
    setenv("BRAID_TIMEOUT", "20", 1);
    cfg_t cfg = {.algo = "", .hosts = 1};
    cr_assert_eq(mp_run(2, mismatch_across_algorithms, &cfg, 60), 0, "n=2 (see stderr)");
    cr_assert_eq(mp_run(5, mismatch_across_algorithms, &cfg, 60), 0, "n=5 (see stderr)");
}
