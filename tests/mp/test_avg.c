/* BRAID_AVG of float16, bfloat16 and float8 is NCCL's ncclAvg, a sum of inputs pre-scaled by
 * 1/n (braid.h): no partial sum leaves the inputs' range. Every rank holds a value near the top
 * of its dtype's range, whose sum overflows (float16, bfloat16: inf) or saturates (float8: 448,
 * 57344): the average must be that value within the dtype's rounding, never inf or a saturated
 * sum divided. With n = 3 and 4, on every algorithm (the cost model's
 * choice, ring, tree, recursive doubling, direct, hierarchical over two fake hosts), through
 * all-reduce (in place or not, blocking and braid_i*), reduce, reduce-scatter, reduce_scatterv
 * (the point-to-point path) and a group of fused all-reduces, with every rank's result compared
 * bit for bit with rank 0's. float32 (which sums, then divides) with ordinary rank-dependent
 * values stays within rounding of the mean. A rank calling avg where the others call sum is a
 * mismatch (the wire says avg). Before the pre-scaling, float16 40000 on 3 ranks averaged to inf,
 * e4m3 320 on 4 ranks to 112. */
#include "mp.h"
#include "reduce/reduce.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

TestSuite(avg, .timeout = 240);

typedef struct {
    braid_datatype_t dt;
    double value; /* every rank's input */
    double tol;   /* |average - value| allowed (a couple of the dtype's ulps at value) */
} big_t;

/* e4m3 has no 300: 320 (256..448 step 32); e5m2 40960 (32768..57344 step 8192). */
static const big_t bigs[] = {
    {BRAID_FLOAT16, 40000, 64},
    {BRAID_BFLOAT16, 3e38, 4 * 0x1p120},
    {BRAID_FLOAT8_E4M3, 320, 32},
    {BRAID_FLOAT8_E5M2, 40960, 8192},
};

static void put(braid_datatype_t dt, void *buf, size_t i, double v)
{
    char *p = (char *)buf + i * braid_dtype_size(dt);
    uint16_t h;
    uint8_t b;
    float f;
    switch (dt) {
    case BRAID_FLOAT16:
        h = braid_float_to_half((float)v);
        memcpy(p, &h, 2);
        break;
    case BRAID_BFLOAT16:
        h = braid_float_to_bf16((float)v);
        memcpy(p, &h, 2);
        break;
    case BRAID_FLOAT32:
        f = (float)v;
        memcpy(p, &f, 4);
        break;
    case BRAID_FLOAT8_E4M3:
        b = braid_float_to_e4m3((float)v);
        memcpy(p, &b, 1);
        break;
    case BRAID_FLOAT8_E5M2:
        b = braid_float_to_e5m2((float)v);
        memcpy(p, &b, 1);
        break;
    default:
        memcpy(p, &v, 8);
        break;
    }
}

static double get(braid_datatype_t dt, const void *buf, size_t i)
{
    const char *p = (const char *)buf + i * braid_dtype_size(dt);
    uint16_t h;
    uint8_t b;
    float f;
    double d;
    switch (dt) {
    case BRAID_FLOAT16:
        memcpy(&h, p, 2);
        return braid_half_to_float(h);
    case BRAID_BFLOAT16:
        memcpy(&h, p, 2);
        return braid_bf16_to_float(h);
    case BRAID_FLOAT32:
        memcpy(&f, p, 4);
        return f;
    case BRAID_FLOAT8_E4M3:
        memcpy(&b, p, 1);
        return braid_e4m3_to_float(b);
    case BRAID_FLOAT8_E5M2:
        memcpy(&b, p, 1);
        return braid_e5m2_to_float(b);
    default:
        memcpy(&d, p, 8);
        return d;
    }
}

/* Every element of out (count of them) near want, and the same bytes on every rank. */
static int check_out(braid_comm_t c, int rank, int n, const big_t *b, const void *out, size_t count,
                     const char *what)
{
    for (size_t i = 0; i < count; i++) {
        double v = get(b->dt, out, i);
        MP_CHECK(rank, isfinite(v) && fabs(v - b->value) <= b->tol,
                 "%s %s n=%d: element %zu of %zu is %g, want %g within %g", what,
                 braid_dtype_name(b->dt), n, i, count, v, b->value, b->tol);
    }
    size_t bytes = count * braid_dtype_size(b->dt);
    unsigned char *all = malloc(bytes * (size_t)n + 1);
    MP_CHECK(rank, all != NULL, "out of memory");
    braid_result_t r = braid_allgather(out, all, bytes, BRAID_UINT8, c);
    int same = r == BRAID_SUCCESS;
    for (int j = 1; same && j < n; j++)
        same = !memcmp(all, all + (size_t)j * bytes, bytes);
    free(all);
    MP_CHECK(rank, same, "%s %s n=%d: ranks differ (allgather: %s)", what, braid_dtype_name(b->dt),
             n, braid_strerror(r));
    return 0;
}

static int big_values_on(braid_comm_t c, int rank, int n, const char *algo)
{
    static const size_t counts[] = {1, 17, 4099};
    char what[64];
    for (size_t k = 0; k < sizeof(bigs) / sizeof(bigs[0]); k++) {
        const big_t *b = &bigs[k];
        size_t es = braid_dtype_size(b->dt);
        for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
            size_t count = counts[ci];
            char *in = malloc(count * es * (size_t)n), *out = malloc(count * es * (size_t)n);
            MP_CHECK(rank, in && out, "out of memory");
            for (size_t i = 0; i < count * (size_t)n; i++)
                put(b->dt, in, i, b->value);
            snprintf(what, sizeof(what), "%s allreduce", algo);
            MP_OK(rank, braid_allreduce(in, out, count, b->dt, BRAID_AVG, c));
            if (check_out(c, rank, n, b, out, count, what)) return 1;
            snprintf(what, sizeof(what), "%s allreduce in place", algo);
            memcpy(out, in, count * es);
            MP_OK(rank, braid_allreduce(out, out, count, b->dt, BRAID_AVG, c));
            if (check_out(c, rank, n, b, out, count, what)) return 1;
            /* reduce to rank 1: the others check a copy of its result */
            snprintf(what, sizeof(what), "%s reduce", algo);
            MP_OK(rank, braid_reduce(in, out, count, b->dt, BRAID_AVG, 1, c));
            MP_OK(rank, braid_broadcast(out, out, count, b->dt, 1, c));
            if (check_out(c, rank, n, b, out, count, what)) return 1;
            snprintf(what, sizeof(what), "%s reduce_scatter", algo);
            MP_OK(rank, braid_reduce_scatter(in, out, count, b->dt, BRAID_AVG, c));
            if (check_out(c, rank, n, b, out, count, what)) return 1;
            free(in);
            free(out);
        }
    }
    return 0;
}

static int big_values(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    static const char *algos[] = {"", "ring", "tree", "recdbl", "direct", "hier"};
    for (size_t a = 0; a < sizeof(algos) / sizeof(algos[0]); a++) {
        int hier = !strcmp(algos[a], "hier");
        braid_comm_t c = mp_fake_host_comm(comm, rank, hier ? rank / 2 : 0, algos[a]);
        MP_CHECK(rank, c != NULL, "no communicator for algo '%s'", algos[a]);
        int bad = big_values_on(c, rank, n, algos[a][0] ? algos[a] : "auto");
        MP_OK(rank, braid_comm_destroy(c));
        if (bad) return 1;
    }
    return 0;
}

/* reduce_scatterv (point-to-point path), braid_iallreduce, and a group of all-reduces that
 * fuse: the same averages, fused bit for bit as one by one. */
static int other_paths(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    for (size_t k = 0; k < sizeof(bigs) / sizeof(bigs[0]); k++) {
        const big_t *b = &bigs[k];
        size_t es = braid_dtype_size(b->dt), counts[8], total = 0;
        for (int j = 0; j < n; j++)
            total += counts[j] = (size_t)(3 + 5 * j);
        char *in = malloc(total * es), *out = malloc(total * es), *one = malloc(total * es);
        MP_CHECK(rank, in && out && one, "out of memory");
        for (size_t i = 0; i < total; i++)
            put(b->dt, in, i, b->value);
        MP_OK(rank, braid_reduce_scatterv(in, out, counts, b->dt, BRAID_AVG, comm));
        for (size_t i = 0; i < counts[rank]; i++) /* counts differ: values, then 3 compared */
            MP_CHECK(rank, fabs(get(b->dt, out, i) - b->value) <= b->tol,
                     "reduce_scatterv %s: element %zu is %g", braid_dtype_name(b->dt), i,
                     get(b->dt, out, i));
        if (check_out(comm, rank, n, b, out, counts[0], "reduce_scatterv")) return 1;
        braid_request_t req;
        MP_OK(rank, braid_iallreduce(in, out, 20, b->dt, BRAID_AVG, comm, &req));
        MP_OK(rank, braid_wait(req));
        if (check_out(comm, rank, n, b, out, 20, "iallreduce")) return 1;
        /* three small all-reduces one by one, then in one group (fused) */
        for (int j = 0; j < 3; j++)
            MP_OK(rank, braid_allreduce(in + (size_t)j * 5 * es, one + (size_t)j * 5 * es, 5, b->dt,
                                        BRAID_AVG, comm));
        MP_OK(rank, braid_group_start());
        for (int j = 0; j < 3; j++)
            MP_OK(rank, braid_allreduce(in + (size_t)j * 5 * es, out + (size_t)j * 5 * es, 5, b->dt,
                                        BRAID_AVG, comm));
        MP_OK(rank, braid_group_end());
        MP_CHECK(rank, !memcmp(one, out, 15 * es), "%s: fused averages differ from unfused",
                 braid_dtype_name(b->dt));
        if (check_out(comm, rank, n, b, out, 15, "group")) return 1;
        free(in);
        free(out);
        free(one);
    }
    return 0;
}

/* Ordinary float32 values: the pre-scaled sum stays within rounding of the exact mean. */
static int float32_mean(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    size_t count = 10007;
    float *in = malloc(count * sizeof(float)), *out = malloc(count * sizeof(float));
    MP_CHECK(rank, in && out, "out of memory");
    for (size_t i = 0; i < count; i++)
        in[i] = (float)(((double)(i % 1009) - 500.0) * 0.37 + rank * 1.25 - (double)(i % 7) / 3);
    MP_OK(rank, braid_allreduce(in, out, count, BRAID_FLOAT32, BRAID_AVG, comm));
    for (size_t i = 0; i < count; i++) {
        double mean = 0, mag = 0;
        for (int r = 0; r < n; r++) {
            double v =
                (float)(((double)(i % 1009) - 500.0) * 0.37 + r * 1.25 - (double)(i % 7) / 3);
            mean += v / n;
            mag += fabs(v) / n;
        }
        /* n scalings and n - 1 additions, each within half an ulp of at most mag */
        double tol = n * mag * 0x1p-23 + 1e-30;
        MP_CHECK(rank, fabs(out[i] - mean) <= tol, "element %zu: %.9g, mean %.9g (tol %g)", i,
                 out[i], mean, tol);
    }
    big_t b = {BRAID_FLOAT32, 0, INFINITY}; /* only the bit comparison */
    if (check_out(comm, rank, n, &b, out, count, "float32 mean")) return 1;
    free(in);
    free(out);
    return 0;
}

/* The last rank calls avg, the others sum (float32): a mismatch, on that call or the next. */
static int avg_vs_sum(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    float buf[64] = {0};
    braid_redop_t op = rank == n - 1 ? BRAID_AVG : BRAID_SUM;
    braid_result_t r1 = braid_allreduce(buf, buf, 64, BRAID_FLOAT32, op, comm);
    braid_result_t r2 = r1 == BRAID_SUCCESS ? braid_barrier(comm) : r1;
    MP_CHECK(rank, r2 == BRAID_ERR_MISMATCH, "avg against sum: %s, then %s (%s)",
             braid_strerror(r1), braid_strerror(r2), braid_last_error());
    return 0;
}

Test(avg, big_values_do_not_overflow_n3)
{
    cr_assert_eq(mp_run(3, big_values, NULL, 220), 0, "some rank failed (see stderr)");
}

Test(avg, big_values_do_not_overflow_n4)
{
    cr_assert_eq(mp_run(4, big_values, NULL, 220), 0, "some rank failed (see stderr)");
}

Test(avg, other_paths)
{
    cr_assert_eq(mp_run(3, other_paths, NULL, 120), 0, "n=3: some rank failed (see stderr)");
    cr_assert_eq(mp_run(4, other_paths, NULL, 120), 0, "n=4: some rank failed (see stderr)");
}

Test(avg, float32_within_rounding)
{
    for (int n = 2; n <= 5; n++)
        cr_assert_eq(mp_run(n, float32_mean, NULL, 60), 0, "n=%d: some rank failed", n);
}

Test(avg, mismatch_with_sum)
{
    cr_assert_eq(mp_run(2, avg_vs_sum, NULL, 60), 0, "n=2: some rank failed (see stderr)");
    cr_assert_eq(mp_run(3, avg_vs_sum, NULL, 60), 0, "n=3: some rank failed (see stderr)");
}
