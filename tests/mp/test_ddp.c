/* Suite `ddp`: the DDP layer (include/braid/ddp.h) on real forked ranks. The reference is the
 * same small MLP (tests/common/ddp_model.c) trained inside every rank on the whole global
 * batch without any communication; the layer's replicas must follow it step after step and
 * stay bit-identical to each other.
 *
 * Tolerance of the equivalence checks: every gradient element is (1/B) * a sum of B per-sample
 * float32 terms. On one rank that sum is taken in one order; on n ranks as n partial sums of
 * B/n terms (each scaled by n/B), reduced and divided by n. The two differ only by rounding:
 * at most about (B + n) * 2^-24 relative to the sum of the terms' magnitudes (~1e-6 here,
 * B = 12). Ten SGD steps at lr 0.3 on this smooth loss keep parameter differences of that
 * order, so we allow 2e-6 * (1 + |p|) (observed: ~3e-8). A real defect (a missing 1/n, a shard read
 * twice, a stale bucket) moves parameters by 1e-3 or more; each test also checks that training
 * moved the parameters by far more than the tolerance, so the comparison can fail. */
#include "ddp_model.h"
#include "mp.h"

#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#define TOL 2e-6

static const int g_dims[4] = {7, 11, 9, 5}; /* W1 77, b1 11, W2 99, b2 9, W3 45, b3 5 floats */

static braid_ddp_options_t small_buckets(void)
{
    braid_ddp_options_t o;
    braid_ddp_options_init(&o);
    o.first_bucket_bytes = 100; /* buckets {b3} {W3 b2} {W2} {b1 W1} */
    o.bucket_cap_bytes = 400;
    return o;
}

#define DDP_OK(rank, call)                                                                         \
    do {                                                                                           \
        braid_result_t r_ = (call);                                                                \
        MP_CHECK(rank, r_ == BRAID_SUCCESS, "%s -> %s: %s", #call, braid_strerror(r_),             \
                 braid_ddp_last_error());                                                          \
    } while (0)

typedef struct {
    braid_ddp_t ddp;
} ready_arg_t;

static int ready_cb(void *arg, int i)
{
    return braid_ddp_grad_ready(((ready_arg_t *)arg)->ddp, i) ? 1 : 0;
}

/* Marks every parameter ready in an order shuffled from (rank, step). */
static braid_result_t ready_shuffled(braid_ddp_t ddp, int nparams, int rank, int step)
{
    int ord[16];
    for (int i = 0; i < nparams; i++)
        ord[i] = i;
    uint64_t s = (uint64_t)rank * 1000003u + (uint64_t)step * 7919u + 1;
    for (int i = nparams - 1; i > 0; i--) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        int j = (int)((s >> 33) % (uint64_t)(i + 1));
        int t = ord[i];
        ord[i] = ord[j];
        ord[j] = t;
    }
    for (int i = 0; i < nparams; i++) {
        braid_result_t r = braid_ddp_grad_ready(ddp, ord[i]);
        if (r) return r;
    }
    return BRAID_SUCCESS;
}

/* Bit-identical across ranks: all-gather the parameter hash. */
static int same_everywhere(braid_comm_t comm, int rank, int n, const dm_model_t *m, int step)
{
    uint64_t h = dm_hash(m), all[8];
    MP_OK(rank, braid_allgather(&h, all, 1, BRAID_UINT64, comm));
    for (int k = 0; k < n; k++)
        MP_CHECK(rank, all[k] == all[0], "step %d: rank %d's parameters differ from rank 0's", step,
                 k);
    return 0;
}

/* ---- equivalence with one rank over the full batch ---------------------------------------- */

typedef struct {
    int view;     /* gradient-as-bucket-view */
    int shuffled; /* grad_ready in a per-rank shuffled order after backward */
} equiv_cfg_t;

static int equiv_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    const equiv_cfg_t *cfg = arg;
    const int B = 12, steps = 10;
    const float lr = 0.3f;
    dm_model_t m, ref, init0;
    dm_init(&m, 3, g_dims, (uint64_t)rank + 100); /* rank-dependent: creation broadcasts */
    dm_init(&ref, 3, g_dims, 100);                /* rank 0's initial parameters */
    dm_init(&init0, 3, g_dims, 100);
    float *own_g[8];
    memcpy(own_g, m.g, sizeof(own_g));
    braid_ddp_param_t ps[8];
    dm_params(&m, ps);
    braid_ddp_options_t o = small_buckets();
    o.grad_as_bucket_view = cfg->view;
    braid_ddp_t ddp;
    DDP_OK(rank, braid_ddp_create(&ddp, comm, ps, m.nparams, &o));
    MP_CHECK(rank, braid_ddp_num_buckets(ddp) == 4, "%d buckets", braid_ddp_num_buckets(ddp));
    MP_CHECK(rank, dm_hash(&m) == dm_hash(&ref), "parameters not broadcast from rank 0");
    if (cfg->view)
        for (int i = 0; i < m.nparams; i++)
            m.g[i] = braid_ddp_grad(ddp, i);
    ready_arg_t ra = {ddp};
    for (int step = 0; step < steps; step++) {
        long base = (long)step * B;
        int per = B / n;
        int err = 0;
        dm_backward(&m, base + (long)rank * per, per, per, cfg->shuffled ? NULL : ready_cb, &ra,
                    &err);
        MP_CHECK(rank, !err, "step %d: grad_ready: %s", step, braid_ddp_last_error());
        if (cfg->shuffled) DDP_OK(rank, ready_shuffled(ddp, m.nparams, rank, step));
        DDP_OK(rank, braid_ddp_finish(ddp));
        dm_sgd(&m, lr);
        dm_backward(&ref, base, B, B, NULL, NULL, &err);
        dm_sgd(&ref, lr);
        double d = dm_maxdiff(&m, &ref);
        MP_CHECK(rank, d <= TOL, "n=%d step %d: parameters differ from 1 rank x batch %d by %.3g",
                 n, step, B, d);
        if (same_everywhere(comm, rank, n, &m, step)) return 1;
    }
    double moved = dm_maxdiff(&m, &init0);
    MP_CHECK(rank, moved > 100 * TOL, "training moved the parameters by only %.3g", moved);
    if (rank == 0) fprintf(stderr, "n=%d: max diff vs 1 rank %.3g\n", n, dm_maxdiff(&m, &ref));
    braid_ddp_destroy(ddp);
    memcpy(m.g, own_g, sizeof(own_g));
    dm_free(&m);
    dm_free(&ref);
    dm_free(&init0);
    return 0;
}

TestSuite(ddp, .timeout = 120);

Test(ddp, equivalent_to_one_rank_full_batch_1_to_4_ranks)
{
    equiv_cfg_t cfg = {0, 0};
    for (int n = 1; n <= 4; n++)
        cr_assert_eq(mp_run(n, equiv_fn, &cfg, 60), 0, "n=%d failed (see stderr)", n);
}

Test(ddp, bucket_views_and_shuffled_ready_orders_are_equivalent)
{
    equiv_cfg_t cfg = {1, 1};
    cr_assert_eq(mp_run(3, equiv_fn, &cfg, 60), 0, "view + shuffled, n=3 (see stderr)");
    cfg = (equiv_cfg_t){0, 1};
    cr_assert_eq(mp_run(4, equiv_fn, &cfg, 60), 0, "copy + shuffled, n=4 (see stderr)");
}

/* View vs copy and shuffled vs in-order, bit for bit: two layers on one communicator (used
 * one after the other), the same data; their parameters must be identical after every step. */
static int view_vs_copy_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    dm_model_t a, b;
    dm_init(&a, 3, g_dims, 5);
    dm_init(&b, 3, g_dims, 5);
    float *own_g[8];
    memcpy(own_g, b.g, sizeof(own_g));
    braid_ddp_param_t pa[8], pb[8];
    dm_params(&a, pa);
    dm_params(&b, pb);
    braid_ddp_options_t oa = small_buckets(), ob = small_buckets();
    ob.grad_as_bucket_view = 1;
    braid_ddp_t da, db;
    DDP_OK(rank, braid_ddp_create(&da, comm, pa, a.nparams, &oa));
    DDP_OK(rank, braid_ddp_create(&db, comm, pb, b.nparams, &ob));
    for (int i = 0; i < b.nparams; i++) {
        size_t off;
        int bk = braid_ddp_param_bucket(db, i, &off);
        braid_ddp_bucket_info_t info;
        DDP_OK(rank, braid_ddp_bucket_info(db, bk, &info));
        b.g[i] = braid_ddp_grad(db, i);
        MP_CHECK(rank, b.g[i] != own_g[i], "view mode kept the registered buffer");
    }
    ready_arg_t ra = {da};
    for (int step = 0; step < 6; step++) {
        int err = 0;
        dm_backward(&a, step * 10 + rank * 3, 3, 3, ready_cb, &ra, &err);
        MP_CHECK(rank, !err, "grad_ready: %s", braid_ddp_last_error());
        DDP_OK(rank, braid_ddp_finish(da));
        dm_backward(&b, step * 10 + rank * 3, 3, 3, NULL, NULL, &err);
        DDP_OK(rank, ready_shuffled(db, b.nparams, rank, step));
        DDP_OK(rank, braid_ddp_finish(db));
        for (int i = 0; i < a.nparams; i++)
            MP_CHECK(rank, !memcmp(a.g[i], b.g[i], a.count[i] * sizeof(float)),
                     "step %d: %s's reduced gradient differs (copy vs view)", step, a.names[i]);
        dm_sgd(&a, 0.3f);
        dm_sgd(&b, 0.3f);
        MP_CHECK(rank, dm_hash(&a) == dm_hash(&b), "step %d: parameters differ", step);
        if (same_everywhere(comm, rank, n, &b, step)) return 1;
    }
    braid_ddp_destroy(da);
    braid_ddp_destroy(db);
    memcpy(b.g, own_g, sizeof(own_g));
    dm_free(&a);
    dm_free(&b);
    return 0;
}

Test(ddp, gradient_as_bucket_view_equals_copy_bit_for_bit)
{
    cr_assert_eq(mp_run(3, view_vs_copy_fn, NULL, 60), 0, "see stderr");
}

/* ---- bucket assignment -------------------------------------------------------------------- */

static int buckets_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    (void)arg;
    /* float32 counts; param 4 (4000 B) is larger than the cap; param 6 is float64. */
    const size_t counts[] = {10, 300, 5, 70, 1000, 3, 40, 20, 8};
    const braid_datatype_t dts[] = {BRAID_FLOAT32, BRAID_FLOAT32, BRAID_FLOAT32,
                                    BRAID_FLOAT32, BRAID_FLOAT32, BRAID_FLOAT32,
                                    BRAID_FLOAT64, BRAID_FLOAT32, BRAID_FLOAT32};
    const int np = 9;
    const size_t first = 100, cap = 1000;
    braid_ddp_param_t ps[9];
    void *bufs[18];
    for (int i = 0; i < np; i++) {
        size_t bytes = counts[i] * braid_dtype_size(dts[i]);
        bufs[2 * i] = calloc(1, bytes);
        bufs[2 * i + 1] = calloc(1, bytes);
        ps[i] = (braid_ddp_param_t){bufs[2 * i], bufs[2 * i + 1], counts[i], dts[i], NULL, 0};
    }
    braid_ddp_options_t o;
    braid_ddp_options_init(&o);
    MP_CHECK(rank, o.bucket_cap_bytes == 25u << 20 && o.first_bucket_bytes == 1u << 20,
             "defaults %zu / %zu", o.bucket_cap_bytes, o.first_bucket_bytes);
    o.first_bucket_bytes = first;
    o.bucket_cap_bytes = cap;
    braid_ddp_t ddp;
    DDP_OK(rank, braid_ddp_create(&ddp, comm, ps, np, &o));
    int nb = braid_ddp_num_buckets(ddp);
    /* Worked by hand from the rule (reverse order, one open bucket per dtype, close when the
     * next parameter would not fit, first bucket 100 B, others 1000 B):
     * 8 (32 B) opens b0; 7 (80 B) would make 112 > 100: b1 = {7}; 6 (f64) opens b2; 5 fits b1
     * (92 B); 4 (4000 B) does not fit: b3 = {4} alone, full; 3 opens b4, 2 fits (300 B);
     * 1 (1200 B) does not fit: b5 = {1} alone; 0 opens b6. */
    const int want[][3] = {{8, -1, -1}, {7, 5, -1},  {6, -1, -1}, {4, -1, -1},
                           {3, 2, -1},  {1, -1, -1}, {0, -1, -1}};
    MP_CHECK(rank, nb == 7, "%d buckets, expected 7", nb);
    int seen = 0, prev_first = np;
    for (int b = 0; b < nb; b++) {
        braid_ddp_bucket_info_t in;
        DDP_OK(rank, braid_ddp_bucket_info(ddp, b, &in));
        size_t c = b == 0 ? first : cap, sum = 0;
        MP_CHECK(rank, in.bytes <= c || in.nparams == 1,
                 "bucket %d: %zu bytes over its capacity %zu with %d params", b, in.bytes, c,
                 in.nparams);
        for (int k = 0; k < 3; k++) {
            int p = k < in.nparams ? in.params[k] : -1;
            MP_CHECK(rank, p == want[b][k], "bucket %d slot %d holds %d, expected %d", b, k, p,
                     want[b][k]);
        }
        MP_CHECK(rank, in.params[0] < prev_first, "bucket %d does not continue reverse order", b);
        prev_first = in.params[0];
        for (int k = 0; k < in.nparams; k++) {
            int p = in.params[k];
            size_t off;
            MP_CHECK(rank, braid_ddp_param_bucket(ddp, p, &off) == b && off == sum,
                     "param %d: bucket/offset wrong", p);
            MP_CHECK(rank, dts[p] == in.dtype, "param %d in a bucket of another dtype", p);
            MP_CHECK(rank, k == 0 || in.params[k] < in.params[k - 1], "not reverse within");
            sum += counts[p];
            seen++;
        }
        MP_CHECK(rank, sum == in.count, "bucket %d count %zu != %zu", b, in.count, sum);
    }
    MP_CHECK(rank, seen == np, "%d parameters in buckets", seen);
    braid_ddp_destroy(ddp);
    /* The defaults on a 784-512-512-10 MLP: {b3 W3 b2} (22568 B <= 1 MiB), {W2 b1 W1}. */
    size_t mc[] = {784 * 512, 512, 512 * 512, 512, 512 * 10, 10};
    float *big = calloc(784 * 512, sizeof(float));
    for (int i = 0; i < 6; i++)
        ps[i] = (braid_ddp_param_t){big, big, mc[i], BRAID_FLOAT32, NULL, 0};
    o.bucket_cap_bytes = 25u << 20;
    o.first_bucket_bytes = 1u << 20;
    o.broadcast_params = 0; /* the buffers alias */
    DDP_OK(rank, braid_ddp_create(&ddp, comm, ps, 6, &o));
    braid_ddp_bucket_info_t in0, in1;
    MP_CHECK(rank, braid_ddp_num_buckets(ddp) == 2, "%d", braid_ddp_num_buckets(ddp));
    DDP_OK(rank, braid_ddp_bucket_info(ddp, 0, &in0));
    DDP_OK(rank, braid_ddp_bucket_info(ddp, 1, &in1));
    MP_CHECK(rank, in0.nparams == 3 && in0.bytes == 22568 && in1.nparams == 3,
             "default buckets: %d params %zu B, %d params", in0.nparams, in0.bytes, in1.nparams);
    braid_ddp_destroy(ddp);
    free(big);
    for (int i = 0; i < 18; i++)
        free(bufs[i]);
    return 0;
}

Test(ddp, buckets_reverse_order_capacity_oversized_alone_per_dtype)
{
    cr_assert_eq(mp_run(2, buckets_fn, NULL, 60), 0, "see stderr");
}
