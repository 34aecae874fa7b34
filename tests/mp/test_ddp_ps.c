/* Suite `ddp_ps`: asynchronous data parallelism with parameter servers (braid_ps_*), ranks as
 * real processes.
 *
 * - One worker (1 or 2 servers, staleness 0 and 16): the parameters after every step are
 *   bit-identical to one-process SGD with momentum on the same samples (the servers run the
 *   same update code on their shards; one worker means every gradient is applied to the view
 *   it was computed on).
 * - Bounded staleness, 3 workers of which one is slow, 1 or 2 servers: every server records the
 *   staleness of every gradient it applies; with B = 2 the maximum is <= 2, requests were held
 *   back (deferred > 0), and with B = 50 on the same run the staleness does exceed 2 (so the
 *   bound, not the schedule, kept it there). No gradient is lost or applied twice: with plain
 *   SGD the final parameters equal p0 - lr * (sum of every pushed gradient, in double) within
 *   1e-5 (float32 rounding of 90 updates).
 * - A worker SIGKILLed mid-training: the server fails within the timeout naming its rank, and
 *   the surviving worker fails instead of waiting; a server SIGKILLed: the workers fail naming
 *   it.
 * - Argument errors and ranks disagreeing on the options. */
#include "ddp_model.h"
#include "mp.h"
#include "proc.h"

#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const int g_dims[4] = {7, 11, 9, 5};
#define LR 0.05f
#define MU 0.9f

typedef struct {
    float *mom; /* the whole flat vector's momentum (only the server's shard is used) */
    float mu;
} opt_t;

/* The one update used by the servers and by the reference. */
static void mom_update(float *p, const float *g, float *m, size_t n, float mu)
{
    for (size_t e = 0; e < n; e++) {
        m[e] = mu * m[e] + g[e];
        p[e] -= LR * m[e];
    }
}

static braid_result_t update(void *state, void *param, const void *grad, size_t offset,
                             size_t count, long version)
{
    (void)version;
    opt_t *o = state;
    mom_update(param, grad, o->mom + offset, count, o->mu);
    return BRAID_SUCCESS;
}

static size_t total_count(const dm_model_t *m)
{
    size_t t = 0;
    for (int i = 0; i < m->nparams; i++)
        t += m->count[i];
    return t;
}

static void zero_grads(dm_model_t *m)
{
    for (int i = 0; i < m->nparams; i++)
        memset(m->g[i], 0, m->count[i] * sizeof(float));
}

/* braid_ps_create over m's parameters (registered in pr) with servers and staleness, the
 * servers applying mom_update with o's momentum. */
static braid_result_t ps_start(braid_ps_t *ps, braid_comm_t comm, const dm_model_t *m,
                               braid_ddp_param_t *pr, int servers, int staleness, opt_t *o)
{
    dm_params(m, pr);
    braid_ps_options_t po;
    braid_ps_options_init(&po);
    po.nservers = servers;
    po.staleness = staleness;
    po.update = update;
    po.update_state = o;
    return braid_ps_create(ps, comm, pr, m->nparams, &po);
}

typedef struct {
    int servers, staleness;
} one_arg_t;

static int one_worker_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    const one_arg_t *a = arg;
    dm_model_t m, ref;
    dm_init(&m, 3, g_dims, 31 + rank); /* create broadcasts rank 0's */
    dm_init(&ref, 3, g_dims, 31);
    size_t total = total_count(&m);
    opt_t o = {calloc(total, sizeof(float)), MU};
    float *rmom[8];
    for (int i = 0; i < ref.nparams; i++)
        rmom[i] = calloc(ref.count[i], sizeof(float));
    braid_ddp_param_t pr[8];
    braid_ps_t ps;
    MP_CHECK(rank, !ps_start(&ps, comm, &m, pr, a->servers, a->staleness, &o), "%s",
             braid_ddp_last_error());
    MP_CHECK(rank, braid_ps_is_server(ps) == (rank >= n - a->servers), "role");
    if (braid_ps_is_server(ps)) {
        MP_CHECK(rank, !braid_ps_serve(ps), "serve: %s", braid_ddp_last_error());
        braid_ps_stats_t st;
        braid_ps_stats(ps, &st);
        MP_CHECK(rank, st.pushes == 12 && st.max_staleness == 0, "%ld applied, max staleness %ld",
                 st.pushes, st.max_staleness);
    } else {
        MP_CHECK(rank, !braid_ps_push_pull(ps), "%s", braid_ddp_last_error());
        for (int step = 0; step < 12; step++) {
            int err = 0;
            zero_grads(&m);
            dm_backward(&m, step * 13L, 6, 6, NULL, NULL, &err);
            MP_CHECK(rank, !braid_ps_push_pull(ps), "step %d: %s", step, braid_ddp_last_error());
            zero_grads(&ref);
            dm_backward(&ref, step * 13L, 6, 6, NULL, NULL, &err);
            for (int i = 0; i < ref.nparams; i++)
                mom_update(ref.p[i], ref.g[i], rmom[i], ref.count[i], MU);
            MP_CHECK(rank, dm_hash(&m) == dm_hash(&ref),
                     "step %d: the pulled parameters differ from one-process SGD (max %.3g)", step,
                     dm_maxdiff(&m, &ref));
        }
        MP_CHECK(rank, !braid_ps_done(ps), "%s", braid_ddp_last_error());
        MP_CHECK(rank, braid_ps_push_pull(ps) == BRAID_ERR_INVALID_USAGE, "push after done");
    }
    MP_CHECK(rank, !braid_ps_gather(ps), "%s", braid_ddp_last_error());
    uint64_t h = dm_hash(&m), all[8];
    MP_OK(rank, braid_allgather(&h, all, 1, BRAID_UINT64, comm));
    for (int q = 0; q < n; q++)
        MP_CHECK(rank, all[q] == all[0], "rank %d's final parameters differ", q);
    braid_ps_destroy(ps);
    free(o.mom);
    for (int i = 0; i < ref.nparams; i++)
        free(rmom[i]);
    dm_free(&m);
    dm_free(&ref);
    return 0;
}

Test(ddp_ps, one_worker_is_bit_identical_to_plain_sgd, .timeout = 120)
{
    one_arg_t cases[] = {{1, 0}, {1, 16}, {2, 0}, {2, 16}};
    for (int c = 0; c < 4; c++)
        cr_assert_eq(mp_run(1 + cases[c].servers, one_worker_fn, &cases[c], 60), 0,
                     "servers %d staleness %d (see stderr)", cases[c].servers, cases[c].staleness);
}

#define SLOW_STEPS 30

typedef struct {
    int servers, staleness;
    long max_seen; /* set by... each server checks its own */
    int expect_bound_active;
} stale_arg_t;

static void sleep_ms(double ms)
{
    struct timespec ts = {0, (long)(ms * 1e6)};
    nanosleep(&ts, NULL);
}

static int stale_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    const stale_arg_t *a = arg;
    int nw = n - a->servers;
    dm_model_t m, p0;
    dm_init(&m, 3, g_dims, 41);
    dm_init(&p0, 3, g_dims, 41);
    size_t total = total_count(&m);
    opt_t o = {calloc(total, sizeof(float)), 0.0f}; /* plain SGD: the sum check below */
    braid_ddp_param_t pr[8];
    braid_ps_t ps;
    MP_CHECK(rank, !ps_start(&ps, comm, &m, pr, a->servers, a->staleness, &o), "%s",
             braid_ddp_last_error());
    double *gsum = calloc(total, sizeof(double));
    long stale_max = -1, deferred = 0;
    if (braid_ps_is_server(ps)) {
        MP_CHECK(rank, !braid_ps_serve(ps), "serve: %s", braid_ddp_last_error());
        braid_ps_stats_t st;
        braid_ps_stats(ps, &st);
        long hsum = 0;
        for (int k = 0; k < 8; k++)
            hsum += st.hist[k];
        MP_CHECK(rank, st.pushes == (long)nw * SLOW_STEPS && hsum == st.pushes,
                 "%ld applied (%ld in the histogram), expected %d", st.pushes, hsum,
                 nw * SLOW_STEPS);
        MP_CHECK(rank, st.max_staleness <= a->staleness,
                 "a gradient was applied %ld updates stale (bound %d)", st.max_staleness,
                 a->staleness);
        stale_max = st.max_staleness;
        deferred = st.deferred;
        fprintf(stderr,
                "ps B=%d servers=%d: server rank %d max staleness %ld deferred %ld hist "
                "%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld\n",
                a->staleness, a->servers, rank, st.max_staleness, st.deferred, st.hist[0],
                st.hist[1], st.hist[2], st.hist[3], st.hist[4], st.hist[5], st.hist[6], st.hist[7]);
    } else {
        MP_CHECK(rank, !braid_ps_push_pull(ps), "%s", braid_ddp_last_error());
        for (int step = 0; step < SLOW_STEPS; step++) {
            int err = 0;
            zero_grads(&m);
            dm_backward(&m, step * 17L + rank * 5, 5, 5, NULL, NULL, &err);
            size_t at = 0;
            for (int i = 0; i < m.nparams; i++)
                for (size_t e = 0; e < m.count[i]; e++)
                    gsum[at++] += m.g[i][e];
            if (rank == 0) sleep_ms(8); /* the slow worker */
            MP_CHECK(rank, !braid_ps_push_pull(ps), "step %d: %s", step, braid_ddp_last_error());
        }
        MP_CHECK(rank, !braid_ps_done(ps), "%s", braid_ddp_last_error());
    }
    MP_CHECK(rank, !braid_ps_gather(ps), "%s", braid_ddp_last_error());
    /* every gradient applied exactly once: p = p0 - lr * sum */
    MP_OK(rank, braid_allreduce(gsum, gsum, total, BRAID_FLOAT64, BRAID_SUM, comm));
    double d = 0;
    size_t at = 0;
    for (int i = 0; i < m.nparams; i++)
        for (size_t e = 0; e < m.count[i]; e++, at++)
            d = fmax(d, fabs((double)m.p[i][e] - ((double)p0.p[i][e] - LR * gsum[at])));
    MP_CHECK(rank, d <= 1e-5, "final parameters differ from p0 - lr * sum(gradients) by %.3g", d);
    long mx[2] = {stale_max, deferred};
    MP_OK(rank, braid_allreduce(mx, mx, 1, BRAID_INT64, BRAID_MAX, comm));
    MP_OK(rank, braid_allreduce(mx + 1, mx + 1, 1, BRAID_INT64, BRAID_SUM, comm));
    if (a->expect_bound_active)
        MP_CHECK(rank, mx[1] > 0, "B=%d: no request was ever held back", a->staleness);
    else
        MP_CHECK(rank, mx[0] > 2,
                 "B=%d: staleness never exceeded 2 (%ld): the B=2 run proves nothing", a->staleness,
                 mx[0]);
    braid_ps_destroy(ps);
    free(gsum);
    free(o.mom);
    dm_free(&m);
    dm_free(&p0);
    return 0;
}

Test(ddp_ps, staleness_bound_holds_with_a_slow_worker, .timeout = 180)
{
    for (int servers = 1; servers <= 2; servers++) {
        stale_arg_t bound = {servers, 2, 0, 1}, loose = {servers, 50, 0, 0};
        cr_assert_eq(mp_run(3 + servers, stale_fn, &bound, 90), 0, "B=2, %d servers", servers);
        cr_assert_eq(mp_run(3 + servers, stale_fn, &loose, 90), 0, "B=50, %d servers", servers);
    }
}

/* kill_rank: the rank SIGKILLed (by itself after 5 steps if a worker; by the test if not) */
static int kill_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    int victim = *(const int *)arg;
    MP_OK(rank, braid_comm_set_timeout(comm, 20));
    dm_model_t m;
    dm_init(&m, 3, g_dims, 51);
    opt_t o = {calloc(total_count(&m), sizeof(float)), MU};
    braid_ddp_param_t pr[8];
    braid_ps_t ps; /* the defaults: 1 server, staleness 16 */
    MP_CHECK(rank, !ps_start(&ps, comm, &m, pr, 1, 16, &o), "%s", braid_ddp_last_error());
    char want[32];
    snprintf(want, sizeof(want), "rank %d (", victim); /* braid's naming of a failed peer */
    double t0 = proc_now_s();
    braid_result_t r;
    if (braid_ps_is_server(ps)) {
        r = braid_ps_serve(ps);
    } else {
        r = braid_ps_push_pull(ps);
        for (long step = 0; !r && proc_now_s() - t0 < 60; step++) {
            int err = 0;
            zero_grads(&m);
            dm_backward(&m, step, 4, 4, NULL, NULL, &err);
            if (rank == victim && step == 5) raise(SIGKILL);
            sleep_ms(1);
            r = braid_ps_push_pull(ps);
        }
    }
    double t = proc_now_s() - t0;
    MP_CHECK(rank, r != BRAID_SUCCESS, "no error after %.1f s", t);
    /* the rank that saw the death names it; the others may see the abort that followed */
    if (braid_ps_is_server(ps) != (victim == n - 1))
        MP_CHECK(rank, strstr(braid_ddp_last_error(), want), "error does not name %s: %s", want,
                 braid_ddp_last_error());
    MP_CHECK(rank, t < 25, "took %.1f s to fail", t);
    fprintf(stderr, "ps kill %d: rank %d failed after %.2f s: %s\n", victim, rank, t,
            braid_ddp_last_error());
    braid_ps_destroy(ps);
    free(o.mom);
    dm_free(&m);
    return 0;
}

Test(ddp_ps, killed_worker_fails_the_server_naming_it, .timeout = 90)
{
    int victim = 1;
    mp_job_t job;
    mp_start(&job, 3, kill_fn, &victim);
    mp_wait(&job, 60);
    cr_assert(WIFSIGNALED(job.status[1]) && WTERMSIG(job.status[1]) == SIGKILL, "victim %d",
              job.status[1]);
    cr_assert(WIFEXITED(job.status[2]) && WEXITSTATUS(job.status[2]) == 0, "server: %d",
              job.status[2]);
    cr_assert(WIFEXITED(job.status[0]) && WEXITSTATUS(job.status[0]) == 0, "worker 0: %d",
              job.status[0]);
}

Test(ddp_ps, killed_server_fails_the_workers_naming_it, .timeout = 90)
{
    int victim = 2;
    mp_job_t job;
    mp_start(&job, 3, kill_fn, &victim);
    sleep(2);
    kill(job.pids[2], SIGKILL);
    mp_wait(&job, 60);
    for (int r = 0; r < 2; r++)
        cr_assert(WIFEXITED(job.status[r]) && WEXITSTATUS(job.status[r]) == 0, "worker %d: %d", r,
                  job.status[r]);
}

static int bad_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    float p[6] = {1, 2, 3, 4, 5, (float)rank}, g[6] = {0};
    double pd[2] = {1, 2}, gd[2] = {0};
    braid_ddp_param_t pr[2] = {{p, g, 6, BRAID_FLOAT32, "p", 0},
                               {pd, gd, 2, BRAID_FLOAT64, "d", 0}};
    opt_t o = {calloc(8, sizeof(float)), MU};
    braid_ps_options_t po;
    braid_ps_options_init(&po);
    po.update = update;
    po.update_state = &o;
    braid_ps_t ps = NULL;
    struct {
        int nservers, staleness, nparams, null_update;
        const char *word;
    } cases[] = {{0, 16, 1, 0, "nservers"},
                 {n, 16, 1, 0, "nservers"},
                 {1, -1, 1, 0, "staleness"},
                 {1, 16, 1, 1, "update"},
                 {1, 16, 2, 0, "params[1]"}};
    for (int c = 0; c < 5; c++) {
        braid_ps_options_t q = po;
        q.nservers = cases[c].nservers;
        q.staleness = cases[c].staleness;
        if (cases[c].null_update) q.update = NULL;
        braid_result_t r = braid_ps_create(&ps, comm, pr, cases[c].nparams, &q);
        MP_CHECK(rank, r == BRAID_ERR_INVALID_ARG && strstr(braid_ddp_last_error(), cases[c].word),
                 "case %d: %d %s", c, r, braid_ddp_last_error());
    }
    braid_ps_options_t q = po;
    q.staleness = 3 + rank;
    braid_result_t r = braid_ps_create(&ps, comm, pr, 1, &q);
    MP_CHECK(rank, r == BRAID_ERR_MISMATCH && strstr(braid_ddp_last_error(), "staleness"),
             "staleness differs: %d %s", r, braid_ddp_last_error());
    MP_CHECK(rank, !braid_ps_create(&ps, comm, pr, 1, &po), "%s", braid_ddp_last_error());
    if (braid_ps_is_server(ps)) {
        MP_CHECK(rank, braid_ps_push_pull(ps) == BRAID_ERR_INVALID_USAGE, "push on a server");
        MP_CHECK(rank, !braid_ps_serve(ps), "%s", braid_ddp_last_error());
    } else {
        MP_CHECK(rank, braid_ps_serve(ps) == BRAID_ERR_INVALID_USAGE, "serve on a worker");
        MP_CHECK(rank, !braid_ps_done(ps), "done without a step: %s", braid_ddp_last_error());
    }
    MP_CHECK(rank, !braid_ps_gather(ps), "%s", braid_ddp_last_error());
    MP_CHECK(rank, p[5] == 0.0f, "the parameters are not rank 0's");
    braid_ps_destroy(ps);
    free(o.mom);
    return 0;
}

Test(ddp_ps, bad_arguments_and_mismatched_options, .timeout = 60)
{
    cr_assert_eq(mp_run(3, bad_fn, NULL, 30), 0, "see stderr");
}
