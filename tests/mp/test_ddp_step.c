/* Suite `ddp`, continued: no_sync accumulation, gradients never marked ready (error, and
 * find_unused_parameters), communication hooks, bad arguments and mismatched registrations,
 * and a rank SIGKILLed in the middle of training. Model and tolerance as in test_ddp.c. */
#include "ddp_model.h"
#include "mp.h"

#include <criterion/criterion.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TOL 2e-6

static const int g_dims[4] = {7, 11, 9, 5};

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#define DDP_OK(rank, call)                                                                         \
    do {                                                                                           \
        braid_result_t r_ = (call);                                                                \
        MP_CHECK(rank, r_ == BRAID_SUCCESS, "%s -> %s: %s", #call, braid_strerror(r_),             \
                 braid_ddp_last_error());                                                          \
    } while (0)

static braid_ddp_options_t small_buckets(void)
{
    braid_ddp_options_t o;
    braid_ddp_options_init(&o);
    o.first_bucket_bytes = 100;
    o.bucket_cap_bytes = 400;
    return o;
}

typedef struct {
    braid_ddp_t ddp;
    int skip; /* parameter not marked ready (-1: none) */
} ready_arg_t;

static int ready_cb(void *arg, int i)
{
    ready_arg_t *a = arg;
    if (i == a->skip) return 0;
    return braid_ddp_grad_ready(a->ddp, i) ? 1 : 0;
}

/* ---- no_sync ------------------------------------------------------------------------------ */

/* k micro-batches of m samples per rank under no_sync (the last one synchronised) against one
 * step over the k*m samples per rank; both normalised by k*m. */
static int no_sync_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    const int k = 3, m = 4;
    dm_model_t a, b, init;
    dm_init(&a, 3, g_dims, 9);
    dm_init(&b, 3, g_dims, 9);
    dm_init(&init, 3, g_dims, 9);
    braid_ddp_param_t pa[8], pb[8];
    dm_params(&a, pa);
    dm_params(&b, pb);
    braid_ddp_options_t o = small_buckets();
    braid_ddp_t da, db;
    DDP_OK(rank, braid_ddp_create(&da, comm, pa, a.nparams, &o));
    DDP_OK(rank, braid_ddp_create(&db, comm, pb, b.nparams, &o));
    ready_arg_t ra = {da, -1}, rb = {db, -1};
    for (int step = 0; step < 5; step++) {
        long base = (long)step * k * m * n + (long)rank * k * m;
        int err = 0;
        DDP_OK(rank, braid_ddp_no_sync(da, 1));
        for (int j = 0; j < k; j++) {
            if (j == k - 1) DDP_OK(rank, braid_ddp_no_sync(da, 0));
            dm_backward(&a, base + (long)j * m, m, k * m, ready_cb, &ra, &err);
            MP_CHECK(rank, !err, "grad_ready: %s", braid_ddp_last_error());
            if (j == 0) {
                /* Nothing was reduced: rank-local gradients differ across ranks. */
                DDP_OK(rank, braid_ddp_finish(da));
                uint64_t h = 1469598103934665603ull, all[8];
                for (size_t e = 0; e < a.count[4]; e++) {
                    uint32_t v;
                    memcpy(&v, &a.g[4][e], 4);
                    h = (h ^ v) * 1099511628211ull;
                }
                MP_OK(rank, braid_allgather(&h, all, 1, BRAID_UINT64, comm));
                for (int r = 1; r < n; r++)
                    MP_CHECK(rank, all[r] != all[0], "no_sync step reduced the gradients");
            } else {
                DDP_OK(rank, braid_ddp_finish(da));
            }
        }
        dm_backward(&b, base, k * m, k * m, ready_cb, &rb, &err);
        MP_CHECK(rank, !err, "grad_ready: %s", braid_ddp_last_error());
        DDP_OK(rank, braid_ddp_finish(db));
        for (int i = 0; i < a.nparams; i++)
            for (size_t e = 0; e < a.count[i]; e++) {
                double d = fabs((double)a.g[i][e] - (double)b.g[i][e]);
                MP_CHECK(rank, d <= TOL * (fabs((double)b.g[i][e]) + 1e-2),
                         "step %d %s[%zu]: accumulated %.9g vs k-fold batch %.9g", step, a.names[i],
                         e, a.g[i][e], b.g[i][e]);
            }
        dm_sgd(&a, 0.3f);
        dm_sgd(&b, 0.3f);
        MP_CHECK(rank, dm_maxdiff(&a, &b) <= TOL, "step %d: %.3g", step, dm_maxdiff(&a, &b));
    }
    MP_CHECK(rank, dm_maxdiff(&a, &init) > 100 * TOL, "parameters barely moved");
    braid_ddp_destroy(da);
    braid_ddp_destroy(db);
    dm_free(&a);
    dm_free(&b);
    dm_free(&init);
    return 0;
}

Test(ddp, no_sync_over_k_micro_batches_equals_one_k_fold_batch, .timeout = 120)
{
    cr_assert_eq(mp_run(2, no_sync_fn, NULL, 60), 0, "n=2 (see stderr)");
    cr_assert_eq(mp_run(3, no_sync_fn, NULL, 60), 0, "n=3 (see stderr)");
}

/* ---- gradients never marked ready ---------------------------------------------------------- */

typedef struct {
    int skip_rank; /* -1: every rank skips */
    int skip;      /* the parameter */
    int find_unused;
} missing_cfg_t;

static int missing_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    const missing_cfg_t *c = arg;
    dm_model_t m, r0;
    dm_init(&m, 3, g_dims, 3);
    dm_init(&r0, 3, g_dims, 3);
    braid_ddp_param_t ps[8];
    dm_params(&m, ps);
    braid_ddp_options_t o = small_buckets();
    o.find_unused_parameters = c->find_unused;
    braid_ddp_t ddp;
    DDP_OK(rank, braid_ddp_create(&ddp, comm, ps, m.nparams, &o));
    int skips = c->skip_rank < 0 || c->skip_rank == rank;
    ready_arg_t ra = {ddp, skips ? c->skip : -1};
    int err = 0;
    dm_backward(&m, rank * 4, 4, 4, ready_cb, &ra, &err);
    MP_CHECK(rank, !err, "grad_ready: %s", braid_ddp_last_error());
    double t0 = now_s();
    braid_result_t r = braid_ddp_finish(ddp);
    double t = now_s() - t0;
    const char *msg = braid_ddp_last_error();
    if (c->find_unused) {
        MP_CHECK(rank, r == BRAID_SUCCESS, "finish: %s", msg);
        /* The skipping rank contributed zeros: the average of the others' gradients. */
        int err2 = 0;
        for (int q = 0; q < n; q++)
            if (q != c->skip_rank) dm_backward(&r0, q * 4, 4, 4, NULL, NULL, &err2);
        for (size_t e = 0; e < m.count[c->skip]; e++) {
            double want = (double)r0.g[c->skip][e] / n;
            MP_CHECK(rank, fabs(m.g[c->skip][e] - want) <= 1e-6 * (fabs(want) + 1e-3),
                     "%s[%zu] = %.9g, expected %.9g (rank %d's part as zero)", m.names[c->skip], e,
                     m.g[c->skip][e], want, c->skip_rank);
        }
    } else if (skips) {
        fprintf(stderr, "rank %d: finish -> %s: %s\n", rank, braid_strerror(r), msg);
        MP_CHECK(rank, r == BRAID_ERR_INVALID_USAGE, "finish -> %s", braid_strerror(r));
        MP_CHECK(rank, strstr(msg, m.names[c->skip]) && strstr(msg, "never marked ready"),
                 "message does not name %s: %s", m.names[c->skip], msg);
        MP_CHECK(rank, braid_ddp_grad_ready(ddp, 0) == BRAID_ERR_INVALID_USAGE,
                 "the failed layer accepted another step");
    } else {
        /* A rank that readied everything while a peer did not: an error, not a hang. */
        fprintf(stderr, "rank %d: finish -> %s after %.2f s: %s\n", rank, braid_strerror(r), t,
                msg);
        MP_CHECK(rank, r != BRAID_SUCCESS, "finish succeeded though rank %d skipped %s",
                 c->skip_rank, m.names[c->skip]);
        MP_CHECK(rank, t < 20, "finish took %.1f s", t);
    }
    braid_ddp_destroy(ddp);
    dm_free(&m);
    dm_free(&r0);
    return 0;
}

Test(ddp, gradient_never_marked_ready_is_an_error_naming_it, .timeout = 120)
{
    missing_cfg_t all = {-1, 3, 0}; /* b2, on every rank */
    cr_assert_eq(mp_run(2, missing_fn, &all, 60), 0, "every rank skips b2 (see stderr)");
    missing_cfg_t one = {1, 2, 0}; /* W2 on rank 1 only */
    cr_assert_eq(mp_run(3, missing_fn, &one, 60), 0, "rank 1 skips W2 (see stderr)");
}

Test(ddp, find_unused_parameters_reduces_them_as_zeros, .timeout = 120)
{
    missing_cfg_t c = {1, 2, 1};
    cr_assert_eq(mp_run(2, missing_fn, &c, 60), 0, "see stderr");
    c.skip = 0; /* W1: the last bucket */
    cr_assert_eq(mp_run(3, missing_fn, &c, 60), 0, "see stderr");
}

/* find_unused_parameters with no_sync (PyTorch's semantics): a parameter used in a no_sync
 * micro-batch but not in the synchronised one keeps its accumulated gradient, which is
 * reduced, not replaced by zeros; one never used since the last reduction is reduced as zeros.
 * Four parameters, one bucket (cfg bit 1 clear) or one each; view or copy (bit 0). Micro-batch
 * 1 (no_sync): every parameter but p3 gets v(r, i, e); micro-batch 2: p0 and p2 get it again.
 * Then a plain step where p1 is unused again, without zeroing: it must come out zero (the
 * "accumulated" mark ends with the reduction). */
static float acc_value(int r, int i, size_t e)
{
    return (float)((r + 1) * 10 + i) + 0.25f * (float)(e % 5);
}

static int unused_accum_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    const int cfg = *(const int *)arg, view = cfg & 1;
    enum { NP = 4 };
    const size_t cnt[NP] = {5, 7, 3, 6};
    float pbuf[NP][8], gbuf[NP][8];
    braid_ddp_param_t ps[NP];
    const char *names[NP] = {"p0", "p1", "p2", "p3"};
    for (int i = 0; i < NP; i++) {
        for (int e = 0; e < 8; e++)
            pbuf[i][e] = gbuf[i][e] = (float)(i + e);
        ps[i] = (braid_ddp_param_t){pbuf[i], gbuf[i], cnt[i], BRAID_FLOAT32, names[i], 0};
    }
    braid_ddp_options_t o;
    braid_ddp_options_init(&o);
    o.find_unused_parameters = 1;
    o.grad_as_bucket_view = view;
    if (cfg & 2) o.first_bucket_bytes = o.bucket_cap_bytes = 4; /* one bucket each */
    braid_ddp_t d;
    DDP_OK(rank, braid_ddp_create(&d, comm, ps, NP, &o));
    MP_CHECK(rank, braid_ddp_num_buckets(d) == (cfg & 2 ? NP : 1), "%d buckets",
             braid_ddp_num_buckets(d));
    float *g[NP];
    for (int i = 0; i < NP; i++)
        g[i] = braid_ddp_grad(d, i);
    braid_ddp_zero_grad(d);
    for (size_t e = 0; e < cnt[3]; e++)
        g[3][e] = 99; /* never marked ready: zeroed */
    DDP_OK(rank, braid_ddp_no_sync(d, 1));
    for (int i = 0; i < 3; i++) {
        for (size_t e = 0; e < cnt[i]; e++)
            g[i][e] += acc_value(rank, i, e);
        DDP_OK(rank, braid_ddp_grad_ready(d, i));
    }
    DDP_OK(rank, braid_ddp_finish(d));
    DDP_OK(rank, braid_ddp_no_sync(d, 0));
    for (int i = 0; i < 3; i += 2) {
        for (size_t e = 0; e < cnt[i]; e++)
            g[i][e] += acc_value(rank, i, e);
        DDP_OK(rank, braid_ddp_grad_ready(d, i));
    }
    DDP_OK(rank, braid_ddp_finish(d));
    for (int i = 0; i < NP; i++)
        for (size_t e = 0; e < cnt[i]; e++) {
            double want = 0;
            for (int q = 0; q < n && i < 3; q++)
                want += (i == 1 ? 1 : 2) * (double)acc_value(q, i, e);
            want /= n;
            MP_CHECK(rank, fabs(g[i][e] - want) <= 1e-6 * (fabs(want) + 1),
                     "cfg %d: %s[%zu] = %.9g, expected %.9g (the average of the accumulated "
                     "gradients)",
                     cfg, names[i], e, g[i][e], want);
        }
    /* A plain step, p1 unused again and its buffer not zeroed: reduced as zeros now. */
    DDP_OK(rank, braid_ddp_grad_ready(d, 0));
    DDP_OK(rank, braid_ddp_grad_ready(d, 2));
    DDP_OK(rank, braid_ddp_finish(d));
    for (size_t e = 0; e < cnt[1]; e++)
        MP_CHECK(rank, g[1][e] == 0, "cfg %d: p1[%zu] = %.9g after a step without it", cfg, e,
                 g[1][e]);
    braid_ddp_destroy(d);
    return 0;
}

Test(ddp, find_unused_parameters_keeps_gradients_accumulated_under_no_sync, .timeout = 120)
{
    for (int cfg = 0; cfg < 4; cfg++)
        cr_assert_eq(mp_run(cfg < 2 ? 2 : 3, unused_accum_fn, &cfg, 60), 0,
                     "view %d, %s (see stderr)", cfg & 1, cfg & 2 ? "a bucket each" : "one bucket");
}

/* ---- communication hook ------------------------------------------------------------------- */

typedef struct {
    int calls, completes, order_ok;
    int n, nb;
} hook_state_t;

/* Sum all-reduce, averaged in complete(): the shape of a compression hook. */
static braid_result_t sum_launch(void *state, const braid_ddp_bucket_t *b, braid_request_t *req_p)
{
    hook_state_t *s = state;
    if (b->index != s->calls % s->nb) s->order_ok = 0;
    s->calls++;
    return braid_iallreduce(b->data, b->data, b->count, b->dtype, BRAID_SUM, b->comm, req_p);
}

static braid_result_t avg_complete(void *state, const braid_ddp_bucket_t *b)
{
    hook_state_t *s = state;
    if (b->index != s->completes % s->nb) s->order_ok = 0;
    s->completes++;
    float *f = b->data;
    for (size_t i = 0; i < b->count; i++)
        f[i] /= (float)s->n;
    return BRAID_SUCCESS;
}

static braid_result_t failing_launch(void *state, const braid_ddp_bucket_t *b,
                                     braid_request_t *req_p)
{
    (void)state;
    *req_p = NULL;
    return b->index == 1 ? BRAID_ERR_UNSUPPORTED : BRAID_SUCCESS;
}

static int hook_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    dm_model_t a, b;
    dm_init(&a, 3, g_dims, 4);
    dm_init(&b, 3, g_dims, 4);
    braid_ddp_param_t pa[8], pb[8];
    dm_params(&a, pa);
    dm_params(&b, pb);
    hook_state_t st = {0, 0, 1, n, 4};
    braid_ddp_hook_t hook = {sum_launch, avg_complete, &st, NULL};
    braid_ddp_options_t oa = small_buckets(), ob = small_buckets();
    ob.hook = &hook;
    braid_ddp_t da, db;
    DDP_OK(rank, braid_ddp_create(&da, comm, pa, a.nparams, &oa));
    DDP_OK(rank, braid_ddp_create(&db, comm, pb, b.nparams, &ob));
    int nb = braid_ddp_num_buckets(db);
    MP_CHECK(rank, nb == st.nb, "%d buckets", nb);
    for (int step = 0; step < 4; step++) {
        ready_arg_t ra = {da, -1}, rb = {db, -1};
        int err = 0;
        dm_backward(&a, step * 8 + rank * 2, 2, 2, ready_cb, &ra, &err);
        DDP_OK(rank, braid_ddp_finish(da));
        dm_backward(&b, step * 8 + rank * 2, 2, 2, ready_cb, &rb, &err);
        MP_CHECK(rank, !err, "grad_ready: %s", braid_ddp_last_error());
        DDP_OK(rank, braid_ddp_finish(db));
        MP_CHECK(rank, st.calls == nb * (step + 1) && st.completes == st.calls && st.order_ok,
                 "hook calls %d completes %d order_ok %d", st.calls, st.completes, st.order_ok);
        for (int i = 0; i < a.nparams; i++)
            for (size_t e = 0; e < a.count[i]; e++)
                MP_CHECK(rank, fabs(a.g[i][e] - b.g[i][e]) <= 1e-6 * (fabs(a.g[i][e]) + 1e-3),
                         "%s[%zu]: hook %.9g default %.9g", a.names[i], e, b.g[i][e], a.g[i][e]);
        dm_sgd(&a, 0.3f);
        dm_sgd(&b, 0.3f);
    }
    braid_ddp_destroy(da);
    braid_ddp_destroy(db);
    /* A hook's error fails the step with its code, and the layer stays failed. */
    braid_ddp_hook_t bad = {failing_launch, NULL, NULL, NULL};
    braid_ddp_options_t oc = small_buckets();
    oc.hook = &bad;
    DDP_OK(rank, braid_ddp_create(&da, comm, pa, a.nparams, &oc));
    braid_result_t r = BRAID_SUCCESS;
    for (int i = a.nparams - 1; i >= 0 && r == BRAID_SUCCESS; i--)
        r = braid_ddp_grad_ready(da, i);
    MP_CHECK(rank, r == BRAID_ERR_UNSUPPORTED && strstr(braid_ddp_last_error(), "bucket 1"),
             "-> %s: %s", braid_strerror(r), braid_ddp_last_error());
    MP_CHECK(rank, braid_ddp_finish(da) == BRAID_ERR_UNSUPPORTED, "finish after a hook error");
    braid_ddp_destroy(da);
    dm_free(&a);
    dm_free(&b);
    return 0;
}

Test(ddp, communication_hook_sees_flat_buckets_in_order, .timeout = 120)
{
    cr_assert_eq(mp_run(3, hook_fn, NULL, 60), 0, "see stderr");
}

/* A hook that fails on one rank only (say out of memory there): that rank never starts bucket
 * 1's all-reduce, which its peers have started. It must abort the communicator so that they
 * fail at once; before, they waited for the whole timeout (100 s here) although the failing
 * rank stays alive (it waits, on a pipe, until rank 0 has seen its error). */
static braid_result_t plain_launch(void *state, const braid_ddp_bucket_t *b, braid_request_t *req_p)
{
    (void)state;
    return braid_iallreduce(b->data, b->data, b->count, b->dtype, b->op, b->comm, req_p);
}

static braid_result_t nomem_launch(void *state, const braid_ddp_bucket_t *b, braid_request_t *req_p)
{
    if (b->index == 1) return BRAID_ERR_NOMEM;
    return plain_launch(state, b, req_p);
}

static int local_fail_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    const int *fds = arg; /* a pipe: rank 0 writes once it has its error */
    MP_OK(rank, braid_comm_set_timeout(comm, 100));
    dm_model_t m;
    dm_init(&m, 3, g_dims, 8);
    braid_ddp_param_t ps[8];
    dm_params(&m, ps);
    braid_ddp_hook_t hook = {rank == 1 ? nomem_launch : plain_launch, NULL, NULL, NULL};
    braid_ddp_options_t o = small_buckets();
    o.hook = &hook;
    braid_ddp_t d;
    DDP_OK(rank, braid_ddp_create(&d, comm, ps, m.nparams, &o));
    int err = 0;
    dm_backward(&m, rank * 3, 3, 3, NULL, NULL, &err);
    double t0 = now_s();
    braid_result_t r = BRAID_SUCCESS;
    for (int i = m.nparams - 1; i >= 0 && !r; i--)
        r = braid_ddp_grad_ready(d, i);
    if (!r) r = braid_ddp_finish(d);
    double t = now_s() - t0;
    char msg[1200];
    snprintf(msg, sizeof(msg), "%s", braid_ddp_last_error());
    fprintf(stderr, "rank %d: %s after %.2f s: %s\n", rank, braid_strerror(r), t, msg);
    if (rank == 0) {
        char c = 1;
        MP_CHECK(rank, write(fds[1], &c, 1) == 1, "pipe");
        MP_CHECK(rank, r != BRAID_SUCCESS, "the step succeeded without rank 1's bucket 1");
        MP_CHECK(rank, t < 20, "rank 0 got its error after %.1f s (timeout 100 s)", t);
        MP_CHECK(rank, strstr(msg, "rank 1"), "the error does not name rank 1: %s", msg);
    } else {
        MP_CHECK(rank, r == BRAID_ERR_NOMEM && strstr(msg, "bucket 1"), "-> %s: %s",
                 braid_strerror(r), msg);
        struct pollfd pf = {fds[0], POLLIN, 0};
        MP_CHECK(rank, poll(&pf, 1, 60000) == 1, "rank 0 never reported its error");
    }
    braid_ddp_destroy(d);
    dm_free(&m);
    return 0;
}

Test(ddp, hook_failing_on_one_rank_aborts_so_peers_fail_before_the_timeout, .timeout = 120)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    int rc = mp_run(2, local_fail_fn, fds, 45);
    close(fds[0]);
    close(fds[1]);
    cr_assert_eq(rc, 0, "see stderr");
}

/* The creation check covers broadcast_params and the hook: a rank that differs would skip
 * the broadcasts (or run other collectives per bucket); every rank must get
 * BRAID_ERR_MISMATCH naming it, none may hang or succeed. */
static int mismatch_opts_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    const int what = *(const int *)arg;
    float p[4] = {1, 2, 3, 4}, g[4] = {0};
    braid_ddp_param_t ps[2] = {{p, g, 2, BRAID_FLOAT32, "a", 0},
                               {p + 2, g + 2, 2, BRAID_FLOAT32, "b", 0}};
    braid_ddp_hook_t hook = {plain_launch, NULL, NULL, NULL};
    braid_ddp_options_t o;
    braid_ddp_options_init(&o);
    if (rank == 1 && what == 0) o.broadcast_params = 0;
    if (rank == 1 && what == 1) o.hook = &hook;
    braid_ddp_t d = NULL;
    braid_result_t r = braid_ddp_create(&d, comm, ps, 2, &o);
    const char *msg = braid_ddp_last_error();
    MP_CHECK(rank, r == BRAID_ERR_MISMATCH && strstr(msg, "rank 1"), "case %d -> %s: %s", what,
             braid_strerror(r), msg);
    MP_CHECK(rank, strstr(msg, what == 0 ? "broadcast_params" : "hook"), "%s", msg);
    return 0;
}

Test(ddp, broadcast_params_or_hook_differing_on_one_rank_fails_creation, .timeout = 120)
{
    for (int what = 0; what < 2; what++)
        cr_assert_eq(mp_run(3, mismatch_opts_fn, &what, 30), 0, "%s on rank 1 only (see stderr)",
                     what ? "a hook" : "broadcast_params 0");
}

/* ---- bad arguments, mismatched registrations ---------------------------------------------- */

static int bad_args_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    (void)arg;
    float p[4] = {1, 2, 3, 4}, g[4] = {0};
    braid_ddp_param_t ps[2] = {{p, g, 2, BRAID_FLOAT32, "a", 0},
                               {p + 2, g + 2, 2, BRAID_FLOAT32, "b", 0}};
    braid_ddp_t ddp = NULL;
    braid_ddp_options_t o;
    braid_ddp_options_init(&o);
    struct {
        braid_result_t r;
        const char *word;
    } cases[8];
    int nc = 0;
    cases[nc].r = braid_ddp_create(NULL, comm, ps, 2, NULL), cases[nc++].word = "ddp_p";
    cases[nc].r = braid_ddp_create(&ddp, NULL, ps, 2, NULL), cases[nc++].word = "comm";
    cases[nc].r = braid_ddp_create(&ddp, comm, ps, 0, NULL), cases[nc++].word = "nparams";
    braid_ddp_param_t bad = ps[1];
    bad.dtype = (braid_datatype_t)42;
    braid_ddp_param_t two[2] = {ps[0], bad};
    cases[nc].r = braid_ddp_create(&ddp, comm, two, 2, NULL), cases[nc++].word = "params[1]";
    two[1] = ps[1];
    two[1].grad = NULL;
    cases[nc].r = braid_ddp_create(&ddp, comm, two, 2, NULL), cases[nc++].word = "grad";
    o.op = BRAID_MAX;
    cases[nc].r = braid_ddp_create(&ddp, comm, ps, 2, &o), cases[nc++].word = "op";
    braid_ddp_options_init(&o);
    o.bucket_cap_bytes = 0;
    cases[nc].r = braid_ddp_create(&ddp, comm, ps, 2, &o), cases[nc++].word = "bucket_cap";
    for (int i = 0; i < nc; i++)
        MP_CHECK(rank, cases[i].r == BRAID_ERR_INVALID_ARG, "case %d: %s", i,
                 braid_strerror(cases[i].r));
    /* messages name the argument (checked on the last one) */
    MP_CHECK(rank, strstr(braid_ddp_last_error(), "bucket_cap_bytes"), "%s",
             braid_ddp_last_error());
    DDP_OK(rank, braid_ddp_create(&ddp, comm, ps, 2, NULL));
    MP_CHECK(rank, braid_ddp_grad_ready(ddp, 2) == BRAID_ERR_INVALID_ARG, "index 2");
    MP_CHECK(rank, braid_ddp_grad_ready(ddp, -1) == BRAID_ERR_INVALID_ARG, "index -1");
    DDP_OK(rank, braid_ddp_grad_ready(ddp, 1));
    MP_CHECK(rank,
             braid_ddp_grad_ready(ddp, 1) == BRAID_ERR_INVALID_USAGE &&
                 strstr(braid_ddp_last_error(), "b was already marked ready"),
             "twice: %s", braid_ddp_last_error());
    MP_CHECK(rank, braid_ddp_no_sync(ddp, 1) == BRAID_ERR_INVALID_USAGE, "no_sync mid-step");
    DDP_OK(rank, braid_ddp_grad_ready(ddp, 0));
    DDP_OK(rank, braid_ddp_finish(ddp));
    braid_ddp_destroy(ddp);
    /* Rank 1 registers a different count: every rank gets MISMATCH, nobody hangs. */
    braid_ddp_param_t mine[2] = {ps[0], ps[1]};
    if (rank == 1) mine[1].count = 1;
    braid_result_t r = braid_ddp_create(&ddp, comm, mine, 2, NULL);
    MP_CHECK(rank, r == BRAID_ERR_MISMATCH && strstr(braid_ddp_last_error(), "rank 1"),
             "mismatch -> %s: %s", braid_strerror(r), braid_ddp_last_error());
    return 0;
}

Test(ddp, bad_arguments_and_mismatched_registrations, .timeout = 120)
{
    cr_assert_eq(mp_run(3, bad_args_fn, NULL, 60), 0, "see stderr");
}

/* ---- a rank killed in the middle of training ---------------------------------------------- */

static int killed_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    char *dir = arg;
    dm_model_t m;
    const int dims[4] = {64, 128, 64, 10}; /* ~17k parameters: a few buckets */
    dm_init(&m, 3, dims, 1);
    braid_ddp_param_t ps[8];
    dm_params(&m, ps);
    braid_ddp_options_t o;
    braid_ddp_options_init(&o);
    o.first_bucket_bytes = 4096;
    o.bucket_cap_bytes = 16384;
    braid_ddp_t ddp;
    DDP_OK(rank, braid_ddp_create(&ddp, comm, ps, m.nparams, &o));
    braid_result_t r = BRAID_SUCCESS;
    double t_step = 0;
    for (int step = 0; step < 100000 && r == BRAID_SUCCESS; step++) {
        t_step = now_s();
        int err = 0;
        dm_backward(&m, step * 8 + rank * 4, 4, 4, NULL, NULL, &err);
        for (int i = m.nparams - 1; i >= 0 && r == BRAID_SUCCESS; i--) {
            if (rank == 1 && step == 30 && i == 2) raise(SIGKILL); /* mid-backward */
            r = braid_ddp_grad_ready(ddp, i);
        }
        if (r == BRAID_SUCCESS) r = braid_ddp_finish(ddp);
        dm_sgd(&m, 0.01f);
    }
    double t = now_s() - t_step;
    const char *msg = braid_ddp_last_error();
    char path[300];
    snprintf(path, sizeof(path), "%s/rank%d", dir, rank);
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "%d %.3f %s\n", (int)r, t, msg);
        fclose(f);
    }
    fprintf(stderr, "rank %d: %s after %.2f s: %s\n", rank, braid_strerror(r), t, msg);
    MP_CHECK(rank, r == BRAID_ERR_REMOTE || r == BRAID_ERR_TIMEOUT, "got %s", braid_strerror(r));
    MP_CHECK(rank, strstr(msg, "rank 1"), "message does not name rank 1: %s", msg);
    MP_CHECK(rank, t < 10, "the failing step took %.2f s", t);
    braid_ddp_destroy(ddp);
    dm_free(&m);
    return 0;
}

Test(ddp, rank_killed_mid_training_fails_every_survivor_naming_it, .timeout = 120)
{
    char dir[] = "/tmp/braid-ddp-kill-XXXXXX";
    cr_assert(mkdtemp(dir));
    mp_job_t job;
    mp_start(&job, 3, killed_fn, dir);
    mp_wait(&job, 60);
    cr_assert(WIFSIGNALED(job.status[1]) && WTERMSIG(job.status[1]) == SIGKILL, "rank 1");
    for (int r = 0; r < 3; r++) {
        if (r == 1) continue;
        cr_assert(WIFEXITED(job.status[r]) && WEXITSTATUS(job.status[r]) == 0,
                  "survivor rank %d did not report the dead rank (see stderr)", r);
        char path[300];
        snprintf(path, sizeof(path), "%s/rank%d", dir, r);
        cr_assert_eq(access(path, F_OK), 0, "rank %d wrote no result", r);
        unlink(path);
    }
    rmdir(dir);
    cr_assert_eq(mp_shm_leftovers(&job), 0, "shm segments left");
}
