/* Suite `ddp_zero2`: ZeRO stage 2 on the DDP layer against plain DDP, both with Adam, on 1..4
 * ranks, buckets whose counts do not divide by the ranks (uneven, padded shards). Both layers
 * run on one communicator, one after the other, on the same local gradients. Three ways of
 * feeding the gradients: registered buffers copied by grad_ready (mode 0), the staging slots
 * of braid_ddp_grad_buffer written just before each grad_ready (mode 1: in bucket order, the
 * pool of 2 staging buffers is reused and waits), and every slot taken before any grad_ready
 * (mode 2: nothing in flight to wait for, so the pool grows to one buffer per bucket).
 *
 * Tolerance (as for ZeRO-1, tests/mp/test_ddp_zero.c): the shard's gradients come from a
 * reduce-scatter instead of an all-reduce, the same n values per element summed possibly in
 * another order, so they agree within 2n * 2^-24 * sum over ranks of |local gradient| (the
 * magnitudes are all-reduced to state the bound per element). Adam divides by sqrt(v), which
 * can magnify those differences where a gradient nearly cancels, so parameters are compared
 * within lr * 1e-3 after 8 steps of lr = 1e-2; a wrong shard, a stale staging buffer or a
 * missing gather moves them by ~lr per step.
 *
 * Memory, from braid_ddp_stats: ZeRO-2's gradient bytes are the owned shards, ceil(count / n)
 * per bucket, i.e. 1/n of DDP's plus at most n - 1 elements of padding per bucket; the
 * optimizer state (sized from the shards) likewise; the staging pool is staging_buffers
 * buffers of the largest padded bucket (mode 2: one per bucket). */
#include "ddp_model.h"
#include "mp.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const int g_dims[4] = {7, 11, 9, 5};
#define LR 1e-2f
#define STEPS 8

static void adam(float *p, const float *g, float *m, float *v, size_t n, int t)
{
    const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    float c1 = 1.0f - powf(b1, (float)t), c2 = 1.0f - powf(b2, (float)t);
    for (size_t i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        p[i] -= LR * (m[i] / c1) / (sqrtf(v[i] / c2) + eps);
    }
}

static size_t round64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

static int zero2_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    const int mode = *(const int *)arg;
    dm_model_t a, z;
    dm_init(&a, 3, g_dims, 33);
    dm_init(&z, 3, g_dims, 33 + rank); /* broadcast from rank 0 fixes it */
    braid_ddp_param_t pa[8], pz[8];
    dm_params(&a, pa);
    dm_params(&z, pz);
    braid_ddp_options_t oa, oz;
    braid_ddp_options_init(&oa);
    oa.first_bucket_bytes = 100;
    oa.bucket_cap_bytes = 400;
    oz = oa;
    oz.zero_stage = 2;
    oz.grad_as_bucket_view = mode != 0;
    braid_ddp_t da, dz;
    MP_CHECK(rank, !braid_ddp_create(&da, comm, pa, a.nparams, &oa), "create: %s",
             braid_ddp_last_error());
    MP_CHECK(rank, !braid_ddp_create(&dz, comm, pz, z.nparams, &oz), "create zero2: %s",
             braid_ddp_last_error());
    const int np = a.nparams, nb = braid_ddp_num_buckets(dz);
    MP_CHECK(rank, nb == 4, "%d buckets", nb);
    float *sa_m[8], *sa_v[8], *sz_m[8], *sz_v[8], *mag[8];
    size_t total = 0, owned = 0, shard_sum = 0, max_padded = 0;
    int uneven = 0;
    for (int i = 0; i < np; i++) {
        sa_m[i] = calloc(a.count[i], sizeof(float));
        sa_v[i] = calloc(a.count[i], sizeof(float));
        mag[i] = calloc(a.count[i], sizeof(float));
        total += a.count[i];
    }
    for (int b = 0; b < nb; b++) {
        braid_ddp_shard_t sh;
        braid_ddp_bucket_info_t in;
        MP_OK(rank, braid_ddp_shard(dz, b, &sh));
        MP_OK(rank, braid_ddp_bucket_info(dz, b, &in));
        size_t per = (in.count + (size_t)n - 1) / (size_t)n;
        size_t want = in.count > (size_t)rank * per ? in.count - (size_t)rank * per : 0;
        if (want > per) want = per;
        MP_CHECK(rank, sh.offset == (size_t)rank * per && sh.count == want,
                 "bucket %d (%zu): shard at %zu of %zu, expected %zu of %zu", b, in.count,
                 sh.offset, sh.count, (size_t)rank * per, want);
        uneven += in.count % (size_t)n != 0;
        sz_m[b] = calloc(sh.count + 1, sizeof(float));
        sz_v[b] = calloc(sh.count + 1, sizeof(float));
        owned += sh.count;
        shard_sum += per;
        if (per * (size_t)n > max_padded) max_padded = per * (size_t)n;
    }
    MP_CHECK(rank, n == 1 || uneven > 0, "no uneven bucket");
    /* misuse: no_sync; grad_ready of a view never taken */
    MP_CHECK(rank, braid_ddp_no_sync(dz, 1) == BRAID_ERR_INVALID_USAGE, "no_sync accepted");
    if (mode != 0) {
        MP_CHECK(rank, braid_ddp_grad(dz, np - 1) == NULL, "a slot before grad_buffer");
        MP_CHECK(rank, braid_ddp_grad_ready(dz, np - 1) == BRAID_ERR_INVALID_USAGE,
                 "grad_ready without grad_buffer accepted");
    }
    MP_CHECK(rank, braid_ddp_grad_buffer(dz, np, &(void *){0}) == BRAID_ERR_INVALID_ARG,
             "index out of range accepted");
    double maxd = 0;
    for (int step = 1; step <= STEPS; step++) {
        int err = 0;
        long base = (long)step * 40 + rank * 5;
        /* the local gradient, into z.g (registered buffers in mode 0, scratch otherwise) */
        for (int i = 0; i < np; i++)
            memset(z.g[i], 0, z.count[i] * sizeof(float));
        dm_backward(&z, base, 5, 5, NULL, NULL, &err);
        for (int i = 0; i < np; i++)
            memcpy(a.g[i], z.g[i], a.count[i] * sizeof(float));
        for (int i = np - 1; i >= 0; i--)
            MP_CHECK(rank, !braid_ddp_grad_ready(da, i), "ready: %s", braid_ddp_last_error());
        MP_CHECK(rank, !braid_ddp_finish(da), "finish: %s", braid_ddp_last_error());
        for (int i = 0; i < np; i++) {
            adam(a.p[i], a.g[i], sa_m[i], sa_v[i], a.count[i], step);
            for (size_t e = 0; e < z.count[i]; e++)
                mag[i][e] = fabsf(z.g[i][e]);
            MP_OK(rank,
                  braid_allreduce(mag[i], mag[i], z.count[i], BRAID_FLOAT32, BRAID_SUM, comm));
        }
        if (mode == 2)
            for (int i = np - 1; i >= 0; i--) {
                void *slot = NULL;
                MP_CHECK(rank, !braid_ddp_grad_buffer(dz, i, &slot) && slot, "grad_buffer: %s",
                         braid_ddp_last_error());
                memcpy(slot, z.g[i], z.count[i] * sizeof(float));
            }
        for (int i = np - 1; i >= 0; i--) {
            if (mode == 1) {
                void *slot = NULL;
                MP_CHECK(rank, !braid_ddp_grad_buffer(dz, i, &slot) && slot, "grad_buffer: %s",
                         braid_ddp_last_error());
                const float *s = slot;
                for (size_t e = 0; e < z.count[i]; e++) /* taken zeroed, then written */
                    MP_CHECK(rank, s[e] == 0.0f, "step %d: slot of param %d not zeroed", step, i);
                MP_CHECK(rank, braid_ddp_grad(dz, i) == slot, "braid_ddp_grad != slot");
                memcpy(slot, z.g[i], z.count[i] * sizeof(float));
            }
            MP_CHECK(rank, !braid_ddp_grad_ready(dz, i), "ready: %s", braid_ddp_last_error());
        }
        MP_CHECK(rank, !braid_ddp_finish(dz), "finish: %s", braid_ddp_last_error());
        for (int b = 0; b < nb; b++) {
            braid_ddp_shard_t sh;
            braid_ddp_bucket_info_t in;
            braid_ddp_shard(dz, b, &sh);
            braid_ddp_bucket_info(dz, b, &in);
            const float *g = sh.grad;
            MP_CHECK(rank, !dm_check_shard(&sh, &in, z.count, a.g, mag, n), "step %d bucket %d",
                     step, b);
            adam(sh.param, g, sz_m[b], sz_v[b], sh.count, step);
        }
        MP_CHECK(rank, !braid_ddp_gather_params(dz), "gather: %s", braid_ddp_last_error());
        dm_sgd(&a, 0); /* zero a's gradients */
        uint64_t h = dm_hash(&z), all[8];
        MP_OK(rank, braid_allgather(&h, all, 1, BRAID_UINT64, comm));
        for (int q = 0; q < n; q++)
            MP_CHECK(rank, all[q] == all[0], "step %d: rank %d's parameters differ", step, q);
        double d = 0;
        for (int i = 0; i < np; i++)
            for (size_t e = 0; e < a.count[i]; e++)
                d = fmax(d, fabs((double)a.p[i][e] - (double)z.p[i][e]));
        MP_CHECK(rank, d <= LR * 1e-3, "step %d: ZeRO-2 parameters differ from DDP by %.3g", step,
                 d);
        maxd = fmax(maxd, d);
    }
    braid_ddp_stats_t st, sd;
    MP_OK(rank, braid_ddp_stats(dz, &st));
    MP_OK(rank, braid_ddp_stats(da, &sd));
    MP_CHECK(rank, sd.grad_bytes == total * 4 && sd.shard_count == total, "DDP: %zu bytes",
             sd.grad_bytes);
    MP_CHECK(rank, st.grad_bytes == shard_sum * 4, "ZeRO-2 gradient bytes %zu, shards %zu",
             st.grad_bytes, shard_sum * 4);
    MP_CHECK(rank,
             st.grad_bytes * (size_t)n >= sd.grad_bytes &&
                 st.grad_bytes * (size_t)n <= sd.grad_bytes + (size_t)nb * (size_t)(n - 1) * 4,
             "ZeRO-2 gradient bytes %zu x %d ranks vs DDP's %zu (+ padding)", st.grad_bytes, n,
             sd.grad_bytes);
    MP_CHECK(rank, st.shard_count == owned && owned * (size_t)n <= total + (size_t)nb * (size_t)n,
             "optimizer state %zu of %zu elements", owned, total);
    /* in bucket order the pool never outgrows its 2 buffers (1 if every bucket was done before
     * the next one started); with every slot taken first it holds one per bucket */
    size_t one = round64(max_padded * 4);
    MP_CHECK(rank,
             mode == 2 ? st.staging_bytes == (size_t)nb * one
                       : st.staging_bytes >= one && st.staging_bytes <= 2 * one,
             "staging %zu bytes (buffers of %zu)", st.staging_bytes, one);
    MP_CHECK(rank, st.steps == STEPS && sd.steps == STEPS, "steps %llu %llu", st.steps, sd.steps);
    /* traffic: reduce-scatter + all-gather of the padded buckets = DDP's all-reduce + padding */
    MP_CHECK(rank,
             st.sent_bytes >= sd.sent_bytes &&
                 st.sent_bytes <= sd.sent_bytes + (unsigned long long)STEPS * 2 * 4 * nb * n,
             "sent %llu vs DDP %llu", st.sent_bytes, sd.sent_bytes);
    if (rank == 0)
        fprintf(stderr,
                "zero2 n=%d mode=%d: max |ZeRO-2 - DDP| %.3g; grad bytes %zu (DDP %zu), staging "
                "%zu, optimizer state %zu\n",
                n, mode, maxd, st.grad_bytes, sd.grad_bytes, st.staging_bytes, owned * 8);
    braid_ddp_destroy(da);
    braid_ddp_destroy(dz);
    for (int i = 0; i < np; i++) {
        free(sa_m[i]);
        free(sa_v[i]);
        free(mag[i]);
    }
    for (int b = 0; b < nb; b++) {
        free(sz_m[b]);
        free(sz_v[b]);
    }
    dm_free(&a);
    dm_free(&z);
    return 0;
}

Test(ddp_zero2, stage2_follows_ddp_with_adam_on_uneven_shards, .timeout = 180)
{
    int mode = 0;
    for (int n = 1; n <= 4; n++)
        cr_assert_eq(mp_run(n, zero2_fn, &mode, 60), 0, "copied gradients, n=%d (see stderr)", n);
    mode = 1;
    for (int n = 1; n <= 4; n++)
        cr_assert_eq(mp_run(n, zero2_fn, &mode, 60), 0, "staging slots, n=%d (see stderr)", n);
    mode = 2;
    cr_assert_eq(mp_run(3, zero2_fn, &mode, 60), 0, "every slot taken first, n=3 (see stderr)");
}

Test(ddp_zero2, bad_options_are_rejected)
{
    float p[4] = {0}, g[4] = {0};
    braid_ddp_param_t ps[1] = {{p, g, 4, BRAID_FLOAT32, "x", 3}};
    braid_ddp_options_t o;
    braid_ddp_options_init(&o);
    braid_ddp_t d = NULL;
    /* count 4 is not a multiple of rows 3: rejected before the communicator is used */
    cr_assert_eq(braid_ddp_create(&d, (braid_comm_t)ps, ps, 1, &o), BRAID_ERR_INVALID_ARG);
    cr_assert(strstr(braid_ddp_last_error(), "rows"), "%s", braid_ddp_last_error());
    ps[0].rows = 0;
    o.zero_stage = 3;
    cr_assert_eq(braid_ddp_create(&d, (braid_comm_t)ps, ps, 1, &o), BRAID_ERR_INVALID_ARG);
    cr_assert(strstr(braid_ddp_last_error(), "zero_stage"), "%s", braid_ddp_last_error());
    o.zero_stage = 2;
    o.staging_buffers = 0;
    cr_assert_eq(braid_ddp_create(&d, (braid_comm_t)ps, ps, 1, &o), BRAID_ERR_INVALID_ARG);
    cr_assert(strstr(braid_ddp_last_error(), "staging_buffers"), "%s", braid_ddp_last_error());
    cr_assert_eq(braid_ddp_grad_buffer(NULL, 0, &(void *){0}), BRAID_ERR_INVALID_ARG);
    braid_ddp_stats_t st;
    cr_assert_eq(braid_ddp_stats(NULL, &st), BRAID_ERR_INVALID_ARG);
}
