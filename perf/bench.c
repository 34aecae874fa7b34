/* The benchmark loop of the perf tools, after nccl-tests' TimeTest/BenchTime (src/common.cu):
 *
 *   for each dtype, for each op:
 *     warm-up: -w iterations at maxBytes, then -w at minBytes (out of place);
 *     for size = minBytes; size <= maxBytes; size *= f (or += i):
 *       out of place, then in place:
 *         one untimed call and a barrier;
 *         -n iterations (each of -m calls) timed together: time = elapsed / (n * m);
 *         the time is combined over ranks (-a: rank 0, average, min or max);
 *         -c checks: re-initialise inputs, one call, compare with the locally computed result;
 *           #wrong = wrong elements summed over ranks.
 *
 * Iteration i uses buffers shifted by size * (i % (maxBytes / size)), as nccl-tests does, so
 * small sizes are not always timed on the same cache-hot bytes. Checks use shift 0. */
#include "common.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    perf_backend_t *b;
    const perf_coll_t *coll;
    const perf_opts_t *o;
    FILE *out; /* stdout on rank 0, NULL elsewhere */
    FILE *csv;
    char *send, *recv, *exp;
    char *dsend, *drecv; /* --device: the buffers the collectives get (send/recv: host images) */
    int errors;          /* checks that found wrong elements on this rank */
    double bw_sum;
    int bw_count;
    int rep;
} bench_t;

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Starts the call of iteration 'iter' on the shifted buffers. */
static int start_coll(bench_t *bt, const perf_geom_t *g, int dtype, int op, int root, int in_place,
                      int iter, int nonblocking)
{
    perf_backend_t *b = bt->b;
    size_t total = g->size;
    size_t steps = total ? bt->o->max_bytes / total : 1;
    if (steps == 0) steps = 1;
    size_t shift = total * ((size_t)iter % steps);
    char *recv = (bt->drecv ? bt->drecv : bt->recv) + shift;
    char *send = (bt->dsend ? bt->dsend : bt->send) + shift;
    const void *s = in_place ? recv + g->send_ip_off * (size_t)b->rank : send;
    void *r = in_place ? recv + g->recv_ip_off * (size_t)b->rank : recv;
    return b->start(b, bt->coll, s, r, g->count, dtype, op, root, nonblocking);
}

static int run_once(bench_t *bt, const perf_geom_t *g, int dtype, int op, int root, int in_place,
                    int iter)
{
    if (start_coll(bt, g, dtype, op, root, in_place, iter, 0)) return -1;
    return bt->b->complete(bt->b);
}

/* Fills inputs (and poisons outputs) for one checked call; returns the bytes to compare in
 * *got_p and the element count in *n_p (0: nothing to check on this rank). */
static void init_check(bench_t *bt, const perf_gen_t *gen, const perf_geom_t *g, int root,
                       int in_place, char **got_p, size_t *n_p)
{
    int rank = bt->b->rank, n = bt->b->nranks;
    size_t count = g->count, ts = perf_dtype_size(gen->dtype), blk = count * ts;
    char *send = bt->send, *recv = bt->recv, *exp = bt->exp;
    *got_p = recv;
    *n_p = count;
    switch (bt->coll->kind) {
    case PERF_ALLREDUCE:
    case PERF_REDUCE:
        perf_fill_expected(gen, exp, count, 0);
        perf_fill(gen, in_place ? recv : send, count, 0, rank);
        if (!in_place) perf_poison(recv, exp, blk);
        if (bt->coll->kind == PERF_REDUCE && rank != root) *n_p = 0; /* only root's is defined */
        break;
    case PERF_BROADCAST:
        perf_fill(gen, exp, count, 0, root);
        perf_fill(gen, in_place ? recv : send, count, 0, rank);
        if (!in_place) perf_poison(recv, exp, blk);
        break;
    case PERF_REDUCE_SCATTER:
        perf_fill_expected(gen, exp, count, (uint64_t)rank * count);
        perf_fill(gen, in_place ? recv : send, count * (size_t)n, 0, rank);
        if (in_place)
            *got_p = recv + (size_t)rank * blk;
        else
            perf_poison(recv, exp, blk);
        break;
    case PERF_ALLGATHER:
        for (int q = 0; q < n; q++)
            perf_fill(gen, exp + (size_t)q * blk, count, (uint64_t)q * count, q);
        perf_poison(recv, exp, blk * (size_t)n);
        perf_fill(gen, in_place ? recv + (size_t)rank * blk : send, count, (uint64_t)rank * count,
                  rank);
        *n_p = count * (size_t)n;
        break;
    case PERF_GATHER: /* rank q's block is its elements q*count.. */
    case PERF_HYPERCUBE:
        for (int q = 0; q < n; q++)
            perf_fill(gen, exp + (size_t)q * blk, count, (uint64_t)q * count, q);
        perf_poison(recv, exp, blk * (size_t)n);
        perf_fill(gen, in_place ? recv + (size_t)rank * blk : send, count, (uint64_t)rank * count,
                  rank);
        *n_p = bt->coll->kind == PERF_GATHER && rank != root ? 0 : count * (size_t)n;
        break;
    case PERF_SCATTER: /* the root's elements rank*count.. */
        perf_fill(gen, exp, count, (uint64_t)rank * count, root);
        if (rank == root) perf_fill(gen, in_place ? recv : send, count * (size_t)n, 0, root);
        *got_p = in_place ? recv + (size_t)rank * blk : recv;
        if (!in_place || rank != root) perf_poison(*got_p, exp, blk);
        break;
    case PERF_ALLTOALL: /* rank q's elements d*count.. go to rank d */
        for (int q = 0; q < n; q++)
            perf_fill(gen, exp + (size_t)q * blk, count, (uint64_t)rank * count, q);
        perf_fill(gen, in_place ? recv : send, count * (size_t)n, 0, rank);
        if (!in_place) perf_poison(recv, exp, blk * (size_t)n);
        *n_p = count * (size_t)n;
        break;
    case PERF_SENDRECV: /* from rank - 1 */
        perf_fill(gen, exp, count, 0, (rank + n - 1) % n);
        perf_fill(gen, in_place ? recv : send, count, 0, rank);
        if (!in_place) perf_poison(recv, exp, blk);
        break;
    }
}

/* One timed measurement (out of place or in place) of one row; prints its columns. */
static int bench_time(bench_t *bt, const perf_geom_t *g, int dtype, int op, int root, int in_place,
                      perf_row_t *row)
{
    perf_backend_t *b = bt->b;
    const perf_opts_t *o = bt->o;

    if (run_once(bt, g, dtype, op, root, in_place, 0) || b->barrier(b)) return -1;

    double t0 = now_sec();
    for (int iter = 0; iter < o->iters; iter++) {
        for (int a = 0; a < o->agg_iters; a++) {
            int nb = o->agg_iters > 1 && !o->blocking;
            if (start_coll(bt, g, dtype, op, root, in_place, iter * o->agg_iters + a, nb))
                return -1;
            if (o->blocking && (b->complete(b) || b->barrier(b))) return -1;
        }
        if (!o->blocking && b->complete(b)) return -1;
    }
    double sec = (now_sec() - t0) / ((double)o->iters * o->agg_iters);

    /* Combine over ranks as nccl-tests' -a: 0 rank 0, 1 average, 2 min, 3 max. */
    int red = o->average == 2 ? BRAID_MIN : o->average == 3 ? BRAID_MAX : BRAID_SUM;
    if (o->average == 0 && b->rank != 0) sec = 0.0;
    if (b->allreduce_f64(b, &sec, red)) return -1;
    if (o->average == 1) sec /= b->nranks;

    double algbw, busbw;
    perf_bw(bt->coll->kind, g->size, sec, b->nranks, &algbw, &busbw);

    int64_t wrong = -1;
    if (o->check > 0) {
        bt->rep++;
        perf_gen_t gen;
        perf_gen_init(&gen, dtype, op, b->nranks, (uint64_t)bt->rep);
        for (int c = 0; c < o->check; c++) {
            char *got;
            size_t n;
            init_check(bt, &gen, g, root, in_place, &got, &n);
            if (bt->dsend && (b->dev_copy(b, bt->dsend, bt->send, g->send_bytes) ||
                              b->dev_copy(b, bt->drecv, bt->recv, g->recv_bytes)))
                return -1;
            if (run_once(bt, g, dtype, op, root, in_place, 0)) return -1;
            if (bt->drecv && b->dev_copy(b, bt->recv, bt->drecv, g->recv_bytes)) return -1;
            int64_t local = (int64_t)perf_check(&gen, got, bt->exp, n);
            if (local) bt->errors++;
            wrong = local;
            if (b->allreduce_i64(b, &wrong)) return -1;
            if (wrong) break;
        }
    }

    if (bt->out) perf_print_row_result(bt->out, sec * 1e6, algbw, busbw, wrong);
    row->time_us[in_place] = sec * 1e6;
    row->algbw[in_place] = algbw;
    row->busbw[in_place] = busbw;
    row->wrong[in_place] = wrong;
    bt->bw_sum += busbw;
    bt->bw_count++;
    return 0;
}

static int warmup(bench_t *bt, size_t bytes, int dtype, int op, int root)
{
    perf_geom_t g;
    perf_geom(bt->coll->kind, bytes, perf_dtype_size(dtype), bt->b->nranks, &g);
    if (g.count == 0) return 0;
    for (int iter = 0; iter < bt->o->warmup_iters; iter++)
        if (run_once(bt, &g, dtype, op, root, 0, iter)) return -1;
    return 0;
}

static size_t next_size(const perf_opts_t *o, size_t size)
{
    size_t next = o->step_factor > 1 ? size * o->step_factor : size + o->step_bytes;
    return next > size ? next : SIZE_MAX; /* a sweep that does not advance ends */
}

static int time_test(bench_t *bt, int dtype, int op)
{
    perf_backend_t *b = bt->b;
    const perf_opts_t *o = bt->o;
    int root = bt->coll->has_root ? o->root : -1;
    const char *tname = perf_dtype_name(dtype), *oname = perf_op_name(op);

    if (b->barrier(b)) return -1;
    if (warmup(bt, o->max_bytes, dtype, op, root) || warmup(bt, o->min_bytes, dtype, op, root))
        return -1;

    for (size_t size = o->min_bytes; size <= o->max_bytes; size = next_size(o, size)) {
        perf_geom_t g;
        perf_geom(bt->coll->kind, size, perf_dtype_size(dtype), b->nranks, &g);
        if (g.count == 0) continue; /* nothing to move: no row */
        if (bt->out) perf_print_row_params(bt->out, g.size, g.count, tname, oname, root);
        perf_row_t row = {.collective = bt->coll->name,
                          .nranks = b->nranks,
                          .size = g.size,
                          .count = g.count,
                          .type = tname,
                          .redop = oname,
                          .root = root};
        if (bench_time(bt, &g, dtype, op, root, 0, &row) ||
            bench_time(bt, &g, dtype, op, root, 1, &row)) {
            if (bt->out) fprintf(bt->out, "\n");
            return -1;
        }
        if (bt->out) {
            fprintf(bt->out, "\n");
            fflush(bt->out);
        }
        if (bt->csv) perf_csv_row(bt->csv, &row);
    }
    return 0;
}

/* "# Using devices": one line per rank, gathered to rank 0, with the rank's index among the
 * ranks on its host as the device number. */
typedef struct {
    char host[64];
    int32_t pid;
} rank_info_t;

static int print_devices(bench_t *bt)
{
    perf_backend_t *b = bt->b;
    rank_info_t mine, *all = calloc((size_t)b->nranks, sizeof(*all));
    if (!all) return -1;
    memset(&mine, 0, sizeof(mine));
    gethostname(mine.host, sizeof(mine.host) - 1);
    mine.pid = (int32_t)getpid();
    if (b->allgather_bytes(b, &mine, all, sizeof(mine))) {
        free(all);
        return -1;
    }
    if (bt->out) {
        fprintf(bt->out, "# Using devices\n");
        for (int r = 0; r < b->nranks; r++) {
            int local = 0;
            for (int q = 0; q < r; q++)
                local += strcmp(all[q].host, all[r].host) == 0;
            fprintf(bt->out, "#  Rank %2d Group %2d Pid %6d on %10s device %2d [cpu] %s\n", r, 0,
                    (int)all[r].pid, all[r].host, local, b->device_desc);
        }
    }
    free(all);
    return 0;
}

static void *alloc_buf(size_t bytes)
{
    void *p = NULL;
    size_t len = (bytes + 4095) / 4096 * 4096;
    if (len == 0) len = 4096;
    if (posix_memalign(&p, 4096, len)) return NULL;
    memset(p, 0, len); /* touch every page before timing; zeros are valid in every dtype */
    return p;
}

int perf_bench_run(perf_backend_t *b, const perf_coll_t *coll, const perf_opts_t *o)
{
    bench_t bt = {.b = b, .coll = coll, .o = o, .out = b->rank == 0 ? stdout : NULL};
    int rc = 2;

    if (coll->has_root && (o->root < 0 || o->root >= b->nranks)) {
        if (bt.out) fprintf(stderr, "invalid root %d: the job has %d ranks\n", o->root, b->nranks);
        return 2;
    }
    if (bt.out) perf_print_header(bt.out, o);
    if (print_devices(&bt)) return 2;
    if (bt.out) fflush(bt.out);

    bt.send = alloc_buf(o->max_bytes);
    bt.recv = alloc_buf(o->max_bytes);
    bt.exp = o->check ? alloc_buf(o->max_bytes) : NULL;
    if (!bt.send || !bt.recv || (o->check && !bt.exp)) {
        fprintf(stderr, "rank %d: cannot allocate 3 buffers of %zu bytes\n", b->rank, o->max_bytes);
        goto out;
    }
    if (o->device) {
        if (!b->dev_setup || b->dev_setup(b, o->device)) {
            fprintf(stderr, "rank %d: --device %d: %s has no device buffers here\n", b->rank,
                    o->device, b->name);
            goto out;
        }
        bt.dsend = b->dev_alloc(b, o->max_bytes);
        bt.drecv = b->dev_alloc(b, o->max_bytes);
        if (!bt.dsend || !bt.drecv) goto out;
        /* the host images are zero: start the device buffers equal to them */
        if (b->dev_copy(b, bt.dsend, bt.send, o->max_bytes) ||
            b->dev_copy(b, bt.drecv, bt.recv, o->max_bytes))
            goto out;
    }
    if (bt.out && o->csv_path) {
        bt.csv = perf_csv_open(o->csv_path);
        if (!bt.csv) {
            perror(o->csv_path);
            goto out;
        }
    }
    if (bt.out) perf_print_columns(bt.out, o);

    int ntypes = o->dtype == PERF_ALL ? BRAID_NUM_DTYPES : 1;
    int nops = coll->has_op && o->op == PERF_ALL ? PERF_NUM_OPS : 1;
    for (int t = 0; t < ntypes; t++) {
        int dtype = o->dtype == PERF_ALL ? perf_all_dtypes[t] : o->dtype;
        for (int k = 0; k < nops; k++) {
            int op = !coll->has_op ? PERF_NO_OP : o->op == PERF_ALL ? perf_all_ops[k] : o->op;
            if (!b->supports(b, coll, dtype, op)) {
                if (bt.out)
                    fprintf(bt.out, "# skipping %s %s: not supported by %s\n",
                            perf_dtype_name(dtype), perf_op_name(op), b->name);
                continue;
            }
            if (time_test(&bt, dtype, op)) goto out;
        }
    }

    int64_t errors = bt.errors;
    if (b->allreduce_i64(b, &errors)) goto out;
    double avg_bw = bt.bw_count ? bt.bw_sum / bt.bw_count : 0.0;
    const char *env = getenv("NCCL_TESTS_MIN_BW");
    double min_bw = env ? atof(env) : -1;
    int bw_fail = min_bw != -1 && avg_bw < min_bw * 0.9;
    if (bt.out) {
        fprintf(bt.out, "# Out of bounds values : %d %s\n", (int)errors, errors ? "FAILED" : "OK");
        fprintf(bt.out, "# Avg bus bandwidth    : %g %s\n", avg_bw,
                min_bw == -1 ? ""
                : bw_fail    ? "FAILED"
                             : "OK");
        fprintf(bt.out, "#\n");
        fflush(bt.out);
    }
    rc = errors || bw_fail ? 1 : 0;
out:
    if (bt.csv) fclose(bt.csv);
    if (bt.dsend) b->dev_free(b, bt.dsend);
    if (bt.drecv) b->dev_free(b, bt.drecv);
    free(bt.send);
    free(bt.recv);
    free(bt.exp);
    return rc;
}
