/* The trainer's asynchronous mode (--async): braid_ps_* parameter servers (the last --servers
 * ranks) and workers (the others). Worker w takes, at its step s of an epoch, the same samples
 * a synchronous rank w of nworkers would (the w-th batch/nworkers of global batch s of the
 * epoch's permutation), computes the gradient on its current view of the parameters, pushes
 * it and pulls the servers' parameters; servers apply each gradient with the trainer's
 * optimizer (Adam or SGD with momentum, its state on the shard) as it arrives.
 *
 * Output: rank 0 (worker 0) prints `epoch E loss L test_acc A samples_per_s S` per epoch (L:
 * its mean training loss, A: accuracy of its parameter view on the test set, S: its own
 * samples/s), and as the synchronous trainer `eval step S wall_s W test_acc A` after every K of
 * its steps with --eval-every K and at the end of every epoch (S: worker 0's steps, W: its
 * training time so far with the evaluations excluded, A: the accuracy on the whole test set of
 * the parameters it pulled last, at most --staleness updates behind the servers'); every worker at
 * the end `worker R steps N samples_per_s S wait_s W` (W: time waiting for parameters); every
 * server `server R applied N max_staleness M staleness_hist h0,...,h7 deferred D`; then (after the
 * servers' parameters are gathered everywhere) rank 0 `async workers W servers S staleness B
 * samples_per_s T test_acc A` (T: all workers together) and `comm_bytes_per_step B state_bytes S
 * grad_bytes G optimizer_bytes 0 staging_bytes P hook_bytes 0` (B: bytes worker 0 sends per step,
 * its gradients with headers; S = G + P: its gradients and the ps's buffers), every server
 * `server R state_bytes S optimizer_bytes O buffer_bytes P` (Adam's moments over its shard, and
 * the ps's shard and buffers), and every rank `params_hash H`. With
 * --max-steps, rank 0 also prints main.c's `step_ms M backward_ms B finish_ms F steps K
 * mean_step_ms X` for its own steps (F: the push_pull, which waits for the servers). */
#include "ddp_mlp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    mlp_t *m;
    float *m1, *m2; /* optimizer state of the server's shard */
    size_t lo, cnt; /* the shard: elements [lo, lo + cnt) */
} server_opt_t;

static braid_result_t server_update(void *state, void *param, const void *grad, size_t offset,
                                    size_t count, long version)
{
    server_opt_t *o = state;
    o->m->t = version;
    mlp_update(o->m, param, grad, o->m1 + (offset - o->lo), o->m2 + (offset - o->lo), count);
    return BRAID_SUCCESS;
}

/* Worker 0's evaluation line: its current parameter view over the whole test set. */
static void print_eval(mlp_t *m, const dataset_t *test, long step, double wall)
{
    double acc = (double)mlp_correct_range(m, test, 0, test->n) / test->n;
    printf("eval step %ld wall_s %.3f test_acc %.4f\n", step, wall, acc);
    fflush(stdout);
}

static int fail(braid_comm_t comm, int rank, const char *what, braid_result_t r)
{
    fprintf(stderr, "ddp_mlp rank %d: %s failed: %s: %s\n", rank, what, braid_strerror(r),
            braid_ddp_last_error());
    fflush(stderr);
    braid_comm_destroy(comm);
    exit(1); /* as main.c's die(): the run's buffers stay reachable for LeakSanitizer */
}

int variant_async(mlp_t *m, const dataset_t *train, const dataset_t *test, const async_run_t *run,
                  const variant_args_t *v, braid_comm_t comm)
{
    int rank, n;
    braid_comm_rank(comm, &rank);
    braid_comm_size(comm, &n);
    int nw = n - v->servers;
    if (v->servers >= n || run->batch % (nw > 0 ? nw : 1)) {
        if (rank == 0)
            fprintf(stderr,
                    "ddp_mlp: --async needs more ranks (%d) than --servers (%d), and --batch %d "
                    "divisible by the %d workers\n",
                    n, v->servers, run->batch, nw);
        braid_comm_destroy(comm);
        return 2;
    }
    int per = run->batch / nw, steps_per_epoch = train->n / run->batch;
    server_opt_t so = {m, NULL, NULL, 0, 0};
    braid_ps_options_t po;
    braid_ps_options_init(&po);
    po.nservers = v->servers;
    po.staleness = v->staleness;
    po.update = server_update;
    po.update_state = &so;
    braid_ps_t ps;
    braid_result_t r = braid_ps_create(&ps, comm, m->reg, m->nparams, &po);
    if (r) return fail(comm, rank, "braid_ps_create", r);
    long steps = 0;     /* worker: steps done */
    double train_s = 0; /* worker: training time (evaluations excluded) */
    size_t total = 0;
    for (int i = 0; i < m->nparams; i++)
        total += m->reg[i].count;
    if (braid_ps_is_server(ps)) {
        int s = rank - nw;
        so.lo = total * (size_t)s / (size_t)v->servers;
        so.cnt = total * (size_t)(s + 1) / (size_t)v->servers - so.lo;
        so.m1 = calloc(so.cnt, sizeof(float));
        so.m2 = calloc(so.cnt, sizeof(float));
        if (!so.m1 || !so.m2) return fail(comm, rank, "server state", BRAID_ERR_NOMEM);
        if ((r = braid_ps_serve(ps))) return fail(comm, rank, "braid_ps_serve", r);
    } else {
        int *perm = malloc((size_t)train->n * sizeof(int));
        float *xb = malloc((size_t)per * 784 * sizeof(float));
        uint8_t *yb = malloc((size_t)per);
        /* with --max-steps: each step's time, its backward and its push_pull */
        size_t cap = run->max_steps > 0 ? (size_t)run->max_steps : 1;
        double *t_step = calloc(cap, sizeof(double)), *t_bwd = calloc(cap, sizeof(double)),
               *t_pp = calloc(cap, sizeof(double));
        if (!perm || !xb || !yb || !t_step || !t_bwd || !t_pp)
            return fail(comm, rank, "worker buffers", BRAID_ERR_NOMEM);
        if ((r = braid_ps_push_pull(ps))) return fail(comm, rank, "first pull", r);
        int done = 0;
        for (int epoch = 1; epoch <= run->epochs && !done; epoch++) {
            permute(perm, train->n, run->seed, epoch);
            double loss = 0, dt = 0; /* dt: this epoch's training time */
            int es = 0;
            for (int s = 0; s < steps_per_epoch; s++) {
                double ts = now_s();
                const int *idx = perm + (size_t)s * (size_t)run->batch + (size_t)rank * per;
                dataset_rows(train, idx, per, xb);
                for (int q = 0; q < per; q++)
                    yb[q] = train->label[idx[q]];
                loss += mlp_forward(m, xb, yb, per);
                double tb = now_s();
                mlp_backward(m, xb, yb, per, per, NULL, 0, NULL);
                double tf = now_s();
                variant_slow(v, rank, tf - ts);
                double tp = now_s();
                if ((r = braid_ps_push_pull(ps))) return fail(comm, rank, "braid_ps_push_pull", r);
                double te = now_s();
                dt += te - ts;
                if (run->max_steps > 0) {
                    t_step[steps] = te - ts;
                    t_bwd[steps] = tf - tb;
                    t_pp[steps] = te - tp;
                }
                es++;
                if (rank == 0 && run->eval_every && (steps + 1) % run->eval_every == 0)
                    print_eval(m, test, steps + 1, train_s + dt);
                if (++steps >= (run->max_steps > 0 ? run->max_steps : 1L << 40)) {
                    done = 1;
                    break;
                }
            }
            train_s += dt;
            if (rank == 0) {
                double acc = (double)mlp_correct_range(m, test, 0, test->n) / test->n;
                printf("epoch %d loss %.4f test_acc %.4f samples_per_s %.0f\n", epoch,
                       loss / ((double)es * per), acc, (double)es * per / dt);
                printf("eval step %ld wall_s %.3f test_acc %.4f\n", steps, train_s, acc);
                fflush(stdout);
            }
        }
        if ((r = braid_ps_done(ps))) return fail(comm, rank, "braid_ps_done", r);
        braid_ps_stats_t st;
        braid_ps_stats(ps, &st);
        printf("worker %d steps %ld samples_per_s %.0f wait_s %.3f\n", rank, steps,
               (double)steps * per / train_s, st.wait_s);
        if (rank == 0) /* a worker keeps gradients and the ps's buffers, no optimizer state */
            printf("comm_bytes_per_step %.0f state_bytes %zu grad_bytes %zu optimizer_bytes 0 "
                   "staging_bytes %zu hook_bytes 0\n",
                   (double)st.sent_bytes / (steps ? steps : 1),
                   total * sizeof(float) + st.buffer_bytes, total * sizeof(float), st.buffer_bytes);
        if (rank == 0 && run->max_steps > 0)
            print_step_times(t_step, t_bwd, t_pp, (int)steps, run->warmup);
        fflush(stdout);
        free(t_step);
        free(t_bwd);
        free(t_pp);
        free(perm);
        free(xb);
        free(yb);
    }
    braid_ps_stats_t st;
    braid_ps_stats(ps, &st);
    if (braid_ps_is_server(ps)) {
        printf("server %d applied %ld max_staleness %ld staleness_hist", rank, st.pushes,
               st.max_staleness);
        for (int k = 0; k < 8; k++)
            printf("%c%ld", k ? ',' : ' ', st.hist[k]);
        printf(" deferred %ld\n", st.deferred);
        /* its state: the optimizer's moments over the shard, and the ps's shard and buffers */
        size_t opt = 2 * so.cnt * sizeof(float);
        printf("server %d state_bytes %zu optimizer_bytes %zu buffer_bytes %zu\n", rank,
               opt + st.buffer_bytes, opt, st.buffer_bytes);
        fflush(stdout);
    }
    if ((r = braid_ps_gather(ps))) return fail(comm, rank, "braid_ps_gather", r);
    /* samples/s of all workers, and the final parameters' accuracy over the test shards */
    int lo = (int)((long)test->n * rank / n), hi = (int)((long)test->n * (rank + 1) / n);
    double red[2] = {0, (double)mlp_correct_range(m, test, lo, hi)};
    if (!braid_ps_is_server(ps) && train_s > 0) red[0] = (double)steps * per / train_s;
    if ((r = braid_allreduce(red, red, 2, BRAID_FLOAT64, BRAID_SUM, comm)))
        return fail(comm, rank, "final statistics", r);
    if (rank == 0)
        printf("async workers %d servers %d staleness %d samples_per_s %.0f test_acc %.4f\n", nw,
               v->servers, v->staleness, red[0], red[1] / test->n);
    printf("params_hash %016llx\n", (unsigned long long)mlp_hash(m));
    fflush(stdout);
    braid_ps_destroy(ps);
    free(so.m1);
    free(so.m2);
    braid_comm_destroy(comm);
    return 0;
}
