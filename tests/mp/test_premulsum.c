/* PreMulSum (braid_redop_create_premulsum / braid_redop_destroy) as real processes: every dtype
 * through all-reduce, reduce (every root) and reduce-scatter, on the ring, recursive doubling,
 * the tree, the hierarchical algorithm (faked hosts) and the cost model's choice, n = 1..8,
 * counts 0, 1, primes and more than a chunk, in place and not, unaligned; each rank scales by
 * its own scalar. Checked bit for bit against a reference computed here: integers wrap (any
 * order gives the same bits), floats use scalars and inputs whose products and partial sums
 * are exact in the element type, so braid's reduction order cannot matter; a rounding case
 * (scalar 1/3) is checked on two ranks against the independent conversions of ref_half.h and
 * ref_fp8.h. Then the errors: destroyed ops, ops of another communicator, dtype mismatch,
 * garbage ops, built-in destroy, a rank calling sum against premulsum; non-blocking calls
 * whose op is destroyed right after they start; float avg's documented overflow. */
#include "algos/algo.h"
#include "core/comm.h"
#include "data.h"
#include "mp.h"
#include "reduce/reduce.h"
#include "ref_fp8.h"
#include "ref_half.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TestSuite(premulsum, .timeout = 240);

/* ---- values ------------------------------------------------------------------------------- */

static int is_fp(braid_datatype_t dt)
{
    return dt >= BRAID_FLOAT16;
}

/* bfloat16 and float8 hold few bits: at most two ranks per element contribute (see fval). */
static int narrow_fp(braid_datatype_t dt)
{
    return dt == BRAID_BFLOAT16 || dt == BRAID_FLOAT8_E4M3 || dt == BRAID_FLOAT8_E5M2;
}

static uint64_t hash3(int r, size_t i, int seed)
{
    return mix64((uint64_t)i * 0x9e3779b97f4a7c15ull ^ (uint64_t)r << 40 ^ (uint64_t)seed << 52);
}

/* Float input of rank r at i: small integers (wide types), or {-1, 0, 1} on the ranks with
 * (r + i) % 4 == 0 and 0 elsewhere (narrow types), so that with the scalars below every
 * product and every partial sum over <= 8 ranks is exact. */
static double fval(braid_datatype_t dt, int r, size_t i, int seed)
{
    uint64_t h = hash3(r, i, seed);
    if (narrow_fp(dt)) return ((size_t)r + i) % 4 == 0 ? (double)((int)(h % 3) - 1) : 0.0;
    return (double)((int)(h % 23) - 11);
}

/* Each rank's scalar: powers of two (exact products), different per rank. */
static double fscale(braid_datatype_t dt, int r)
{
    static const double wide[] = {2, 0.5, -1, 4, 0.25, 1, -2, 0.5};
    static const double narrow[] = {2, -1, 0.5, -2, 1, -0.5, 2, 1};
    return narrow_fp(dt) ? narrow[r % 8] : wide[r % 8];
}

static uint64_t width_mask(braid_datatype_t dt)
{
    size_t s = braid_dtype_size(dt);
    return s == 8 ? ~0ull : (1ull << (8 * s)) - 1;
}

static uint64_t ival(braid_datatype_t dt, int r, size_t i, int seed)
{
    return hash3(r, i, seed) & width_mask(dt);
}

static uint64_t iscale(braid_datatype_t dt, int r)
{
    return (7u * (uint64_t)r + 3u) & width_mask(dt);
}

/* Exact float value -> bits of dt (library conversions: exact values convert exactly). */
static uint64_t enc(braid_datatype_t dt, double v)
{
    switch (dt) {
    case BRAID_FLOAT16:
        return braid_float_to_half((float)v);
    case BRAID_BFLOAT16:
        return braid_float_to_bf16((float)v);
    case BRAID_FLOAT32:
        return f2bits((float)v);
    case BRAID_FLOAT8_E4M3:
        return braid_float_to_e4m3((float)v);
    case BRAID_FLOAT8_E5M2:
        return braid_float_to_e5m2((float)v);
    default:
        return d2bits(v);
    }
}

static void put(braid_datatype_t dt, void *buf, size_t i, uint64_t bits)
{
    size_t es = braid_dtype_size(dt);
    memcpy((char *)buf + i * es, &bits, es);
}

static uint64_t get(braid_datatype_t dt, const void *buf, size_t i)
{
    uint64_t v = 0;
    size_t es = braid_dtype_size(dt);
    memcpy(&v, (const char *)buf + i * es, es);
    return v;
}

static uint64_t input_bits(braid_datatype_t dt, int r, size_t i, int seed)
{
    return is_fp(dt) ? enc(dt, fval(dt, r, i, seed)) : ival(dt, r, i, seed);
}

static uint64_t scalar_bits(braid_datatype_t dt, int r)
{
    return is_fp(dt) ? enc(dt, fscale(dt, r)) : iscale(dt, r);
}

/* sum over ranks of scalar_r * input_r at element i. */
static uint64_t expected_bits(braid_datatype_t dt, int n, size_t i, int seed)
{
    if (!is_fp(dt)) {
        uint64_t acc = 0;
        for (int r = 0; r < n; r++)
            acc += ival(dt, r, i, seed) * iscale(dt, r);
        return acc & width_mask(dt);
    }
    double acc = 0;
    for (int r = 0; r < n; r++)
        acc += fval(dt, r, i, seed) * fscale(dt, r);
    return enc(dt, acc);
}

/* ---- one collective, checked -------------------------------------------------------------- */

enum { C_ALLREDUCE, C_REDUCE, C_REDUCE_SCATTER, C_REDUCE_SCATTERV };
static const char *const cname[] = {"allreduce", "reduce", "reduce_scatter", "reduce_scatterv"};

/* reduce_scatterv's block sizes: count + (i * 3) % 5 elements for rank i, rank 1's empty. */
static size_t vcount(size_t count, int i)
{
    return i == 1 ? 0 : count + (size_t)(i * 3) % 5;
}

static int check_coll(braid_comm_t c, int rank, int n, int coll, braid_datatype_t dt, size_t count,
                      int in_place, int root, int seed)
{
    size_t es = braid_dtype_size(dt), off = (size_t)seed % 3; /* unaligned for wide types */
    size_t n_in = coll == C_REDUCE_SCATTER ? count * (size_t)n : count;
    size_t rc[8], base = coll == C_REDUCE_SCATTER ? (size_t)rank * count : 0;
    if (coll == C_REDUCE_SCATTERV) {
        n_in = base = 0;
        for (int i = 0; i < n; i++) {
            rc[i] = vcount(count, i);
            if (i < rank) base += rc[i];
            n_in += rc[i];
        }
        count = rc[rank]; /* this rank's output */
    }
    char *sb = malloc(n_in * es + off + 1), *rb = malloc(n_in * es + off + 1);
    MP_CHECK(rank, sb && rb, "malloc");
    char *s = sb + off, *r = rb + off;
    for (size_t i = 0; i < n_in; i++)
        put(dt, s, i, input_bits(dt, rank, i, seed));
    uint64_t sc = scalar_bits(dt, rank);
    braid_redop_t op;
    MP_OK(rank, braid_redop_create_premulsum(&op, &sc, dt, c));
    MP_CHECK(rank, (int)op >= (int)BRAID_NUM_OPS, "created op %d", (int)op);
    char *out = r;
    if (in_place) out = coll >= C_REDUCE_SCATTER ? s + base * es : s;
    if (!in_place) memset(r, 0xEE, count * es);
    braid_result_t res;
    braid_request_t req;
    if (coll == C_ALLREDUCE)
        res = braid_allreduce(s, out, count, dt, op, c);
    else if (coll == C_REDUCE)
        res = braid_reduce(s, rank == root ? out : NULL, count, dt, op, root, c);
    else if (coll == C_REDUCE_SCATTER)
        res = braid_reduce_scatter(s, out, count, dt, op, c);
    else if (seed % 2) { /* the i-form */
        res = braid_ireduce_scatterv(s, out, rc, dt, op, c, &req);
        if (res == BRAID_SUCCESS) res = braid_wait(req);
    } else
        res = braid_reduce_scatterv(s, out, rc, dt, op, c);
    MP_OK(rank, braid_redop_destroy(op, c));
    MP_CHECK(rank, res == BRAID_SUCCESS, "%s %s count=%zu n=%d: %s", cname[coll],
             braid_dtype_name(dt), count, n, braid_last_error());
    int check = coll != C_REDUCE || rank == root;
    for (size_t i = 0; check && i < count; i++) {
        uint64_t want = expected_bits(dt, n, base + i, seed), got = get(dt, out, i);
        MP_CHECK(rank, got == want, "%s %s count=%zu n=%d %s root %d: [%zu] = 0x%llx, want 0x%llx",
                 cname[coll], braid_dtype_name(dt), count, n, in_place ? "in place" : "oop", root,
                 i, (unsigned long long)got, (unsigned long long)want);
    }
    free(sb);
    free(rb);
    return 0;
}

typedef struct {
    const char *algo; /* BRAID_ALGO of the split communicator ("" = the cost model) */
    int hosts;        /* rank r on fake host r % hosts */
    int must_run;     /* braid_algo_t that must have run, or -1 */
} cfg_t;

static int every_dtype(braid_comm_t comm, int rank, int n, void *arg)
{
    const cfg_t *cfg = arg;
    braid_comm_t c = mp_fake_host_comm(comm, rank, rank % cfg->hosts, cfg->algo);
    MP_CHECK(rank, c != NULL, "no communicator");
    const size_t counts[] = {0, 1, 7, 1009, data_quick() ? 16411 : 65537};
    int seed = 1;
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++)
        for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
            if (counts[ci] > 1009 && dt % 4 != 0 && dt < BRAID_FLOAT8_E4M3) continue;
            int ip = (int)(ci & 1);
            if (check_coll(c, rank, n, C_ALLREDUCE, (braid_datatype_t)dt, counts[ci], ip, 0,
                           seed++) ||
                check_coll(c, rank, n, C_REDUCE, (braid_datatype_t)dt, counts[ci], !ip,
                           (int)(ci + (size_t)dt) % n, seed++) ||
                check_coll(c, rank, n, C_REDUCE_SCATTER, (braid_datatype_t)dt, counts[ci], ip, 0,
                           seed++) ||
                check_coll(c, rank, n, C_REDUCE_SCATTERV, (braid_datatype_t)dt, counts[ci], !ip, 0,
                           seed++))
                return 1;
        }
    if (cfg->must_run >= 0 && n > 1) {
        braid_algo_state_t *st = ((struct braid_comm *)c)->algo_state;
        MP_CHECK(rank, st && st->runs[cfg->must_run] > 0, "algorithm %s never ran", cfg->algo);
    }
    braid_comm_destroy(c);
    return 0;
}

Test(premulsum, ring_n1_to_n8_every_dtype_and_collective)
{
    cfg_t cfg = {"ring", 1, BRAID_ALGO_RING};
    for (int n = 1; n <= 8; n++)
        if (!data_quick() || (n != 6 && n != 7)) /* the sanitizer pass: 1-5 and 8 */
            cr_assert_eq(mp_run(n, every_dtype, &cfg, 200), 0, "n=%d failed (see stderr)", n);
}

Test(premulsum, recdbl_tree_hier_and_auto)
{
    static const cfg_t cfgs[] = {{"recdbl", 1, BRAID_ALGO_RECDBL},
                                 {"tree", 1, BRAID_ALGO_TREE},
                                 {"hier", 2, BRAID_ALGO_HIER},
                                 {"", 2, -1}};
    static const int ns[] = {3, 4, 5};
    for (size_t k = 0; k < sizeof(cfgs) / sizeof(cfgs[0]); k++)
        for (size_t j = 0; j < sizeof(ns) / sizeof(ns[0]); j++)
            cr_assert_eq(mp_run(ns[j], every_dtype, (void *)&cfgs[k], 200), 0,
                         "BRAID_ALGO=%s n=%d failed (see stderr)", cfgs[k].algo, ns[j]);
}

/* The direct shared-memory path (all-reduce, reduce, reduce-scatter on one host). */
Test(premulsum, direct_n2_to_n8)
{
    static const cfg_t cfg = {"direct", 1, BRAID_ALGO_DIRECT};
    for (int n = 2; n <= 8; n++)
        if (!data_quick() || (n != 6 && n != 7)) /* the sanitizer pass: 2-5 and 8 */
            cr_assert_eq(mp_run(n, every_dtype, (void *)&cfg, 200), 0,
                         "BRAID_ALGO=direct n=%d failed (see stderr)", n);
}

/* ---- rounding of the product: scalar 1/3 on rank 0, 0 on rank 1 ------------------------- */

static double dec(braid_datatype_t dt, uint64_t b)
{
    switch (dt) {
    case BRAID_FLOAT16:
        return ref_h2d((uint16_t)b);
    case BRAID_BFLOAT16:
        return ref_bf2d((uint16_t)b);
    case BRAID_FLOAT32:
        return bits2f((uint32_t)b);
    case BRAID_FLOAT8_E4M3:
        return ref_e4m3_to_d((uint8_t)b);
    case BRAID_FLOAT8_E5M2:
        return ref_e5m2_to_d((uint8_t)b);
    default:
        return bits2d(b);
    }
}

/* Rounds an exact (double) product to dt once, independently of src/reduce. */
static uint64_t round_to(braid_datatype_t dt, double v)
{
    switch (dt) {
    case BRAID_FLOAT16:
        return ref_d2h(v);
    case BRAID_BFLOAT16:
        return ref_d2bf(v);
    case BRAID_FLOAT32:
        return f2bits((float)v);
    case BRAID_FLOAT8_E4M3:
        return ref_d_to_e4m3(v);
    case BRAID_FLOAT8_E5M2:
        return ref_d_to_e5m2(v);
    default:
        return d2bits(v);
    }
}

/* Finite, moderate bit patterns of dt (products with 1/3 neither overflow nor underflow). */
static uint64_t moderate_bits(braid_datatype_t dt, size_t i)
{
    uint64_t h = mix64(i + 977), s = h & 1;
    switch (dt) {
    case BRAID_FLOAT16:
        return s << 15 | (10 + (h >> 8) % 10) << 10 | (h >> 20 & 0x3ff);
    case BRAID_BFLOAT16:
        return s << 15 | (120 + (h >> 8) % 10) << 7 | (h >> 20 & 0x7f);
    case BRAID_FLOAT32:
        return s << 31 | (120 + (h >> 8) % 10) << 23 | (h >> 20 & 0x7fffff);
    case BRAID_FLOAT8_E4M3:
        return s << 7 | (3 + (h >> 8) % 10) << 3 | (h >> 20 & 7);
    case BRAID_FLOAT8_E5M2:
        return s << 7 | (5 + (h >> 8) % 20) << 2 | (h >> 20 & 3);
    default:
        return s << 63 | (1020 + (h >> 8) % 10) << 52 | (mix64(h) >> 12);
    }
}

static int rounding(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    (void)n;
    enum { COUNT = 4099 };
    for (int dt = BRAID_FLOAT16; dt < BRAID_NUM_DTYPES; dt++) {
        size_t es = braid_dtype_size(dt);
        char *buf = malloc(COUNT * es), *out = malloc(COUNT * es);
        MP_CHECK(rank, buf && out, "malloc");
        for (size_t i = 0; i < COUNT; i++)
            put(dt, buf, i, moderate_bits(dt, i * 2 + (size_t)rank));
        uint64_t third = round_to(dt, 1.0 / 3.0), zero = 0;
        braid_redop_t op;
        MP_OK(rank, braid_redop_create_premulsum(&op, rank == 0 ? (void *)&third : (void *)&zero,
                                                 dt, comm));
        MP_OK(rank, braid_allreduce(buf, out, COUNT, dt, op, comm));
        MP_OK(rank, braid_redop_destroy(op, comm));
        for (size_t i = 0; i < COUNT; i++) {
            double x0 = dec(dt, moderate_bits(dt, i * 2)),
                   x1 = dec(dt, moderate_bits(dt, i * 2 + 1));
            double p0 = x0 * dec(dt, third); /* exact in double for every type but float64 */
            uint64_t want = round_to(dt, dec(dt, round_to(dt, p0)) + x1 * 0.0);
            MP_CHECK(rank, get(dt, out, i) == want, "%s x=%a * 1/3 [%zu] = 0x%llx, want 0x%llx",
                     braid_dtype_name(dt), x0, i, (unsigned long long)get(dt, out, i),
                     (unsigned long long)want);
        }
        free(buf);
        free(out);
    }
    return 0;
}

Test(premulsum, product_rounded_once_in_the_element_type)
{
    cr_assert_eq(mp_run(2, rounding, NULL, 60), 0, "see stderr");
}

/* ---- errors ------------------------------------------------------------------------------- */

#define EXPECT_ERR(rank, call, code, needle)                                                       \
    do {                                                                                           \
        braid_result_t r_ = (call);                                                                \
        MP_CHECK(rank, r_ == (code), "%s -> %d (%s), want %d", #call, (int)r_, braid_last_error(), \
                 (int)(code));                                                                     \
        MP_CHECK(rank, strstr(braid_last_error(), (needle)) != NULL,                               \
                 "%s: message '%s' does not name '%s'", #call, braid_last_error(), (needle));      \
    } while (0)

static int errors(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    float one = 1.0f, x[4] = {1, 2, 3, 4}, y[4];
    braid_redop_t op = BRAID_SUM, op2 = BRAID_SUM;
    EXPECT_ERR(rank, braid_redop_create_premulsum(NULL, &one, BRAID_FLOAT32, comm),
               BRAID_ERR_INVALID_ARG, "op_p");
    EXPECT_ERR(rank, braid_redop_create_premulsum(&op, NULL, BRAID_FLOAT32, comm),
               BRAID_ERR_INVALID_ARG, "scalar");
    EXPECT_ERR(rank, braid_redop_create_premulsum(&op, &one, (braid_datatype_t)12, comm),
               BRAID_ERR_INVALID_ARG, "dtype=12");
    EXPECT_ERR(rank, braid_redop_create_premulsum(&op, &one, BRAID_FLOAT32, NULL),
               BRAID_ERR_INVALID_ARG, "comm");
    MP_CHECK(rank, op == BRAID_SUM, "op_p written on failure");
    /* Garbage ops in every reducing collective. */
    EXPECT_ERR(rank, braid_allreduce(x, y, 4, BRAID_FLOAT32, (braid_redop_t)77, comm),
               BRAID_ERR_INVALID_ARG, "op=77");
    EXPECT_ERR(rank, braid_reduce(x, y, 4, BRAID_FLOAT32, (braid_redop_t)-3, 0, comm),
               BRAID_ERR_INVALID_ARG, "op=-3");
    EXPECT_ERR(rank, braid_reduce_scatter(x, y, 2, BRAID_FLOAT32, (braid_redop_t)5, comm),
               BRAID_ERR_INVALID_ARG, "op=5");
    MP_OK(rank, braid_redop_create_premulsum(&op, &one, BRAID_FLOAT32, comm));
    MP_CHECK(rank, strcmp(braid_op_name(op), "premulsum") == 0, "name %s", braid_op_name(op));
    /* Another dtype than the op's. */
    EXPECT_ERR(rank, braid_allreduce(x, y, 4, BRAID_FLOAT64, op, comm), BRAID_ERR_INVALID_ARG,
               "created for dtype float32, called with float64");
    size_t rcs[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    EXPECT_ERR(rank, braid_reduce_scatterv(x, y, rcs, BRAID_FLOAT64, op, comm),
               BRAID_ERR_INVALID_ARG, "reduce_scatterv: op=");
    /* An op of another communicator (a split of this one, same ranks). */
    braid_comm_t sub = NULL;
    MP_OK(rank, braid_comm_split(comm, 0, rank, &sub));
    EXPECT_ERR(rank, braid_allreduce(x, y, 4, BRAID_FLOAT32, op, sub), BRAID_ERR_INVALID_ARG,
               "not a braid_redop_t nor a live op");
    EXPECT_ERR(rank, braid_redop_destroy(op, sub), BRAID_ERR_INVALID_ARG, "not a live op");
    MP_OK(rank, braid_redop_create_premulsum(&op2, &one, BRAID_FLOAT32, sub));
    MP_CHECK(rank, op2 != op, "two live ops share the value %d", (int)op);
    MP_OK(rank, braid_allreduce(x, y, 4, BRAID_FLOAT32, op2, sub));
    MP_CHECK(rank, y[3] == 4.0f * (float)n, "premulsum(1) = %g", (double)y[3]);
    braid_comm_destroy(sub); /* its ops go with it */
    /* Built-in ops are not destroyed; a destroyed op is dead, also when its slot is reused. */
    EXPECT_ERR(rank, braid_redop_destroy(BRAID_AVG, comm), BRAID_ERR_INVALID_ARG, "built in");
    MP_OK(rank, braid_redop_destroy(op, comm));
    EXPECT_ERR(rank, braid_redop_destroy(op, comm), BRAID_ERR_INVALID_ARG, "not a live op");
    EXPECT_ERR(rank, braid_allreduce(x, y, 4, BRAID_FLOAT32, op, comm), BRAID_ERR_INVALID_ARG,
               "not a braid_redop_t nor a live op");
    braid_request_t req = NULL;
    EXPECT_ERR(rank, braid_iallreduce(x, y, 4, BRAID_FLOAT32, op, comm, &req),
               BRAID_ERR_INVALID_ARG, "live op");
    MP_CHECK(rank, req == NULL, "request returned for a rejected call");
    MP_OK(rank, braid_redop_create_premulsum(&op2, &one, BRAID_FLOAT32, comm)); /* same slot */
    MP_CHECK(rank, op2 != op, "a new op reuses the destroyed value");
    EXPECT_ERR(rank, braid_allreduce(x, y, 4, BRAID_FLOAT32, op, comm), BRAID_ERR_INVALID_ARG,
               "live op");
    MP_OK(rank, braid_redop_destroy(op2, comm));
    /* Everything above failed locally: the communicator still works. */
    MP_OK(rank, braid_allreduce(x, y, 4, BRAID_FLOAT32, BRAID_SUM, comm));
    MP_CHECK(rank, y[0] == (float)n, "sum %g", (double)y[0]);
    return 0;
}

Test(premulsum, errors_name_the_argument)
{
    cr_assert_eq(mp_run(2, errors, NULL, 60), 0, "see stderr");
}

/* Rank 0 calls premulsum where the others call sum: a mismatch on every rank, naming both. */
static int mismatch(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    (void)n;
    int32_t x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8], two = 2;
    braid_redop_t op = BRAID_SUM;
    if (rank == 0) MP_OK(rank, braid_redop_create_premulsum(&op, &two, BRAID_INT32, comm));
    braid_result_t r = braid_allreduce(x, y, 8, BRAID_INT32, op, comm);
    MP_CHECK(rank, r == BRAID_ERR_MISMATCH, "got %d: %s", (int)r, braid_last_error());
    MP_CHECK(rank, strstr(braid_last_error(), "premulsum") && strstr(braid_last_error(), "sum"),
             "message: %s", braid_last_error());
    return 0;
}

Test(premulsum, premulsum_against_sum_is_a_mismatch)
{
    cr_assert_eq(mp_run(3, mismatch, NULL, 60), 0, "see stderr");
}

/* Non-blocking calls copy the scalar when they start: destroying the op at once (and making a
 * new one with another scalar in its slot) does not change them. */
static int nonblocking(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    enum { COUNT = 100003, K = 4 };
    double *in = malloc(COUNT * sizeof(double)), *out[K];
    MP_CHECK(rank, in != NULL, "malloc");
    for (size_t i = 0; i < COUNT; i++)
        in[i] = (double)((int)(hash3(rank, i, 9) % 1001) - 500);
    braid_request_t req[K];
    for (int k = 0; k < K; k++) {
        out[k] = malloc(COUNT * sizeof(double));
        MP_CHECK(rank, out[k] != NULL, "malloc");
        double s = (double)(k + 1) * (rank + 1);
        braid_redop_t op;
        MP_OK(rank, braid_redop_create_premulsum(&op, &s, BRAID_FLOAT64, comm));
        MP_OK(rank, braid_iallreduce(in, out[k], COUNT, BRAID_FLOAT64, op, comm, &req[k]));
        MP_OK(rank, braid_redop_destroy(op, comm));
    }
    for (int k = 0; k < K; k++)
        MP_OK(rank, braid_wait(req[k]));
    for (int k = 0; k < K; k++)
        for (size_t i = 0; i < COUNT; i++) {
            double want = 0;
            for (int r = 0; r < n; r++)
                want += (double)((int)(hash3(r, i, 9) % 1001) - 500) * (k + 1) * (r + 1);
            MP_CHECK(rank, out[k][i] == want, "k=%d [%zu] = %g, want %g", k, i, out[k][i], want);
        }
    for (int k = 0; k < K; k++)
        free(out[k]);
    free(in);
    return 0;
}

Test(premulsum, nonblocking_calls_keep_their_scalar)
{
    cr_assert_eq(mp_run(3, nonblocking, NULL, 60), 0, "see stderr");
}

/* The documented avg semantics (README "Reduction operations"): float32 avg sums first, so
 * avg(3e38, 3e38) overflows to inf, where PreMulSum with 1/n (NCCL's form) gives 3e38; float16
 * avg is NCCL's form itself (inputs scaled by (float)(1/n), then summed): 40000 on every rank
 * averages to 40000, and on 2 ranks (1/2 exact in float16) it is bit for bit PreMulSum(0.5).
 * Integer avg divides the wrapped sum, truncating toward zero. */
static int avg_semantics(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    float big[3] = {3e38f, -3e38f, 1.0f}, out[3];
    MP_OK(rank, braid_allreduce(big, out, 3, BRAID_FLOAT32, BRAID_AVG, comm));
    MP_CHECK(rank, isinf(out[0]) && out[0] > 0 && isinf(out[1]) && out[1] < 0 && out[2] == 1.0f,
             "avg: %g %g %g", (double)out[0], (double)out[1], (double)out[2]);
    float inv = 1.0f / (float)n;
    braid_redop_t op;
    MP_OK(rank, braid_redop_create_premulsum(&op, &inv, BRAID_FLOAT32, comm));
    MP_OK(rank, braid_allreduce(big, out, 3, BRAID_FLOAT32, op, comm));
    MP_OK(rank, braid_redop_destroy(op, comm));
    MP_CHECK(rank, fabsf(out[0] - 3e38f) <= 3e31f && fabsf(out[1] + 3e38f) <= 3e31f,
             "premulsum(1/n): %g %g %g", (double)out[0], (double)out[1], (double)out[2]);
    uint16_t h[3] = {0x78e2, 0xf8e2, (uint16_t)(0x3c00 + rank)}, ho[3], hp[3]; /* +-40000 */
    MP_OK(rank, braid_allreduce(h, ho, 3, BRAID_FLOAT16, BRAID_AVG, comm));
    MP_CHECK(rank, fabs(ref_h2d(ho[0]) - 40000) <= 32 && fabs(ref_h2d(ho[1]) + 40000) <= 32,
             "float16 avg of 40000: %g %g", ref_h2d(ho[0]), ref_h2d(ho[1]));
    if (n == 2) {
        uint16_t half = 0x3800;
        MP_OK(rank, braid_redop_create_premulsum(&op, &half, BRAID_FLOAT16, comm));
        MP_OK(rank, braid_allreduce(h, hp, 3, BRAID_FLOAT16, op, comm));
        MP_OK(rank, braid_redop_destroy(op, comm));
        MP_CHECK(rank, !memcmp(ho, hp, sizeof(ho)),
                 "float16 avg %04x %04x %04x, premulsum(0.5) "
                 "%04x %04x %04x",
                 ho[0], ho[1], ho[2], hp[0], hp[1], hp[2]);
    }
    int8_t i8[2] = {100, -100}, o8[2];
    MP_OK(rank, braid_allreduce(i8, o8, 2, BRAID_INT8, BRAID_AVG, comm));
    int8_t w0 = (int8_t)((int8_t)(uint8_t)(100 * n) / n), w1 = (int8_t)-w0;
    MP_CHECK(rank, o8[0] == w0 && o8[1] == w1, "int8 avg of %d x 100 wraps: %d %d (want %d %d)", n,
             o8[0], o8[1], w0, w1);
    uint32_t u32[1] = {0x90000000u}, o32[1];
    MP_OK(rank, braid_allreduce(u32, o32, 1, BRAID_UINT32, BRAID_AVG, comm));
    MP_CHECK(rank, o32[0] == (uint32_t)(0x90000000u * (uint32_t)n) / (uint32_t)n,
             "uint32 avg wraps: 0x%x", o32[0]);
    return 0;
}

Test(premulsum, avg_semantics_as_documented)
{
    cr_assert_eq(mp_run(2, avg_semantics, NULL, 60), 0, "n=2: see stderr");
    cr_assert_eq(mp_run(3, avg_semantics, NULL, 60), 0, "n=3: see stderr");
}
