/* The benchmark loop of the perf tools, after nccl-tests' TimeTest/BenchTime (src/common.cu,
 * release 2.19):
 *
 *   for each dtype, for each op, for each root (-r -1: every root in turn):
 *     warm-up: -w iterations (out of place) at every size from minBytes to maxBytes, doubling;
 *     -N times (0: forever) for size = minBytes; size <= maxBytes; size *= f (or += i):
 *       out of place, then in place:
 *         one untimed call and a barrier;
 *         -n iterations (each of -m calls) timed together: time = elapsed / (n * m), where
 *           -z 0 waits only at the end of each -n iteration (-m > 1 starts the calls with the
 *                non-blocking braid_i* calls), -z 1 waits and barriers after every call,
 *           -z 2 waits after every call, -z 3 waits after every call and barriers after every
 *                -n iteration, the barrier left out of the time;
 *         the time is combined over ranks (-a: rank 0, average, min or max);
 *         -c checks: re-initialise inputs, one call, compare with the locally computed result;
 *           #wrong = wrong elements summed over ranks.
 *
 * Iteration i uses buffers shifted by size * (i % (maxBytes / size)), as nccl-tests does, so
 * small sizes are not always timed on the same cache-hot bytes. Checks use shift 0. -u moves
 * both buffers by that many elements past their page-aligned start. */
#include "common.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    perf_backend_t *b;
    const perf_coll_t *coll;
    const perf_opts_t *o;
    int wrank, wn; /* place in the whole job (== b->rank/nranks without NCCL_TESTS_SPLIT) */
    FILE *out;     /* stdout on world rank 0, NULL elsewhere */
    FILE *csv;
    perf_json_t json;
    char *send_base, *recv_base; /* allocations */
    size_t alloc_len;
    char *send, *recv, *exp; /* send/recv: the bases moved by -u elements of the dtype run */
    /* --device: the buffers the collectives get (send/recv: host images), moved by -u alike */
    char *dsend_base, *drecv_base, *dsend, *drecv;
    double *iter_times, *all_iter_times; /* -I: this rank's, and every rank's (world rank 0) */
    int errors;                          /* checks that found wrong elements on this rank */
    double bw_sum;
    int bw_count;
    int rep;
    long sweeps, rows; /* sweeps of a supported dtype/op/root, and the rows they printed */
    int corrupt;       /* test hook PERF_TEST_CORRUPT_RANK: this rank flips an element it checks */
} bench_t;

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Starts the call of iteration 'iter' on the shifted buffers. */
static int start_coll(bench_t *bt, const perf_geom_t *g, int dtype, int op, int root, int in_place,
                      size_t iter, int nonblocking)
{
    perf_backend_t *b = bt->b;
    size_t total = g->size;
    size_t steps = total ? bt->o->max_bytes / total : 1;
    if (steps == 0) steps = 1;
    size_t shift = total * (iter % steps);
    char *recv = (bt->drecv ? bt->drecv : bt->recv) + shift;
    char *send = (bt->dsend ? bt->dsend : bt->send) + shift;
    const void *s = in_place ? recv + g->send_ip_off * (size_t)b->rank : send;
    void *r = in_place ? recv + g->recv_ip_off * (size_t)b->rank : recv;
    return b->start(b, bt->coll, s, r, g->count, dtype, op, root, nonblocking);
}

static int run_once(bench_t *bt, const perf_geom_t *g, int dtype, int op, int root, int in_place,
                    size_t iter)
{
    if (start_coll(bt, g, dtype, op, root, in_place, iter, 0)) return -1;
    return bt->b->complete(bt->b);
}

/* The checked call. With --group, -m > 1 and -z 0, inside one group with the calls of the
 * iteration's other buffer shifts (outputs not checked), as the timed loop runs them: what is
 * checked is the grouped (fused) path. */
static int checked_call(bench_t *bt, const perf_geom_t *g, int dtype, int op, int root,
                        int in_place)
{
    const perf_opts_t *o = bt->o;
    if (!o->group || o->agg_iters < 2 || o->blocking != 0)
        return run_once(bt, g, dtype, op, root, in_place, 0);
    size_t steps = g->size ? o->max_bytes / g->size : 1; /* distinct shifts only */
    int m = steps < (size_t)o->agg_iters ? (int)(steps ? steps : 1) : o->agg_iters;
    for (int a = 1; a < m; a++)
        if (start_coll(bt, g, dtype, op, root, in_place, (size_t)a, 1)) return -1;
    if (start_coll(bt, g, dtype, op, root, in_place, 0, 1)) return -1;
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

/* The -n timed iterations; returns the time per call in *sec_p. With -I, iter_times[i] is
 * iteration i's time per call. */
static int timed_loop(bench_t *bt, const perf_geom_t *g, int dtype, int op, int root, int in_place,
                      double *sec_p)
{
    perf_backend_t *b = bt->b;
    const perf_opts_t *o = bt->o;
    int z = o->blocking, m = o->agg_iters;
    int nb = m > 1 && z == 0; /* -z 0: the -m calls of an iteration overlap */
    /* Each iteration's own time only where it is used (-z 3, -I): two clock reads per call
     * were a tenth of an 8 B all-reduce's time. */
    int each = z == 3 || bt->iter_times;
    double timed = 0, t0 = now_sec();
    for (int iter = 0; iter < o->iters; iter++) {
        double ti = each ? now_sec() : 0;
        for (int a = 0; a < m; a++) {
            size_t shift_index = (size_t)iter * (size_t)m + (size_t)a; /* int could overflow */
            if (start_coll(bt, g, dtype, op, root, in_place, shift_index, nb)) return -1;
            if (z != 0 && b->complete(b)) return -1;
            if (z == 1 && b->barrier(b)) return -1;
        }
        if (z == 0 && b->complete(b)) return -1;
        if (each) {
            double te = now_sec();
            timed += te - ti;
            if (bt->iter_times) bt->iter_times[iter] = (te - ti) / m;
        }
        if (z == 3 && b->barrier(b)) return -1; /* outside the time */
    }
    double total = z == 3 ? timed : now_sec() - t0;
    *sec_p = total / ((double)o->iters * m);
    return 0;
}

/* -I: the per-iteration columns, from the max over ranks of each iteration's time. */
static int per_iter_report(bench_t *bt, int in_place)
{
    perf_backend_t *b = bt->b;
    const perf_opts_t *o = bt->o;
    size_t len = (size_t)o->iters * sizeof(double);
    if (b->allgather_bytes(b, bt->iter_times, bt->all_iter_times, len)) return -1;
    for (int i = 0; i < o->iters; i++) {
        double mx = 0;
        for (int r = 0; r < bt->wn; r++)
            if (bt->all_iter_times[(size_t)r * o->iters + i] > mx)
                mx = bt->all_iter_times[(size_t)r * o->iters + i];
        bt->iter_times[i] = mx;
    }
    perf_iter_stats_t st;
    perf_iter_stats(bt->iter_times + o->per_iter_skip, o->iters - o->per_iter_skip, &st);
    double cv = st.avg > 0 ? st.stdev / st.avg * 100.0 : 0.0;
    if (bt->out) {
        char mn[8], mx[8], p99[8], cvs[8];
        perf_format_float(mn, 7, st.min * 1e6);
        perf_format_float(mx, 7, st.max * 1e6);
        perf_format_float(p99, 7, st.p99 * 1e6);
        perf_format_float(cvs, 7, cv);
        fprintf(bt->out, "  %7s  %7s  %7s  %7s", mn, mx, p99, cvs);
    }
    perf_json_t *j = &bt->json;
    perf_json_obj(j, in_place ? "in_place_per_iter" : "out_of_place_per_iter");
    perf_json_int(j, "skipped_iterations", o->per_iter_skip);
    perf_json_double(j, "min_us", st.min * 1e6);
    perf_json_double(j, "max_us", st.max * 1e6);
    perf_json_double(j, "avg_us", st.avg * 1e6);
    perf_json_double(j, "p50_us", st.p50 * 1e6);
    perf_json_double(j, "p95_us", st.p95 * 1e6);
    perf_json_double(j, "p99_us", st.p99 * 1e6);
    perf_json_double(j, "stdev_us", st.stdev * 1e6);
    perf_json_double(j, "cv_pct", cv);
    perf_json_list(j, "times_us");
    for (int i = 0; i < o->iters; i++)
        perf_json_double(j, NULL, bt->iter_times[i] * 1e6);
    perf_json_list_end(j);
    perf_json_obj_end(j);
    return 0;
}

/* One timed measurement (out of place or in place) of one row; prints its columns. */
static int bench_time(bench_t *bt, const perf_geom_t *g, int dtype, int op, int root, int in_place,
                      perf_row_t *row)
{
    perf_backend_t *b = bt->b;
    const perf_opts_t *o = bt->o;

    if (run_once(bt, g, dtype, op, root, in_place, 0) || b->barrier(b)) return -1;

    double sec;
    if (timed_loop(bt, g, dtype, op, root, in_place, &sec)) return -1;

    /* Combine over ranks as nccl-tests' -a: 0 rank 0, 1 average, 2 min, 3 max. */
    int red = o->average == 2 ? BRAID_MIN : o->average == 3 ? BRAID_MAX : BRAID_SUM;
    if (o->average == 0 && bt->wrank != 0) sec = 0.0;
    if (b->allreduce_f64(b, &sec, red)) return -1;
    if (o->average == 1) sec /= bt->wn;

    double algbw, busbw;
    perf_bw(bt->coll->kind, g->size, sec, b->nranks, &algbw, &busbw);

    int64_t wrong = -1;
    /* --device: in place, recv holds what send holds out of place too (reduce_scatter's and the
     * scatter root's n blocks of input; the result in block 'rank'): copy the whole size. */
    size_t dev_recv = in_place ? g->size : g->recv_bytes;
    for (int c = 0; c < o->check; c++) {
        char *got;
        size_t n;
        perf_gen_t gen; /* a seed per check: -c K checks K different inputs */
        perf_gen_init(&gen, dtype, op, b->nranks, (uint64_t)++bt->rep);
        init_check(bt, &gen, g, root, in_place, &got, &n);
        if (bt->dsend && (b->dev_copy(b, bt->dsend, bt->send, g->send_bytes) ||
                          b->dev_copy(b, bt->drecv, bt->recv, dev_recv)))
            return -1;
        if (checked_call(bt, g, dtype, op, root, in_place)) return -1;
        if (bt->drecv && b->dev_copy(b, bt->recv, bt->drecv, dev_recv)) return -1;
        if (bt->corrupt && n > 0) got[(n - 1) * perf_dtype_size(dtype)] ^= 0x5a;
        int64_t local = (int64_t)perf_check(&gen, got, bt->exp, n);
        if (local) bt->errors++;
        wrong = local;
        if (b->allreduce_i64(b, &wrong)) return -1;
        if (wrong) break;
    }

    if (bt->out) perf_print_row_result(bt->out, sec * 1e6, algbw, busbw, wrong);
    perf_json_t *j = &bt->json;
    perf_json_obj(j, in_place ? "in_place" : "out_of_place");
    perf_json_double(j, o->report_cputime ? "cpu_time" : "time", sec * 1e6);
    perf_json_double(j, "alg_bw", algbw);
    perf_json_double(j, "bus_bw", busbw);
    if (wrong >= 0)
        perf_json_double(j, "nwrong", (double)wrong);
    else
        perf_json_null(j, "nwrong");
    perf_json_obj_end(j);
    if (o->per_iter_timing && per_iter_report(bt, in_place)) return -1;

    row->time_us[in_place] = sec * 1e6;
    row->algbw[in_place] = algbw;
    row->busbw[in_place] = busbw;
    row->wrong[in_place] = wrong;
    bt->bw_sum += busbw;
    bt->bw_count++;
    return 0;
}

static size_t next_size(const perf_opts_t *o, size_t size)
{
    size_t f = o->step_factor, next;
    if (f > 1)
        next = size > SIZE_MAX / f ? SIZE_MAX : size * f;
    else
        next = size > SIZE_MAX - o->step_bytes ? SIZE_MAX : size + o->step_bytes;
    return next > size ? next : SIZE_MAX; /* a sweep that does not advance ends */
}

/* Warm-up as nccl-tests 2.19: -w out-of-place calls at every size from minBytes to maxBytes,
 * doubling (from 1 when minBytes is 0). */
static int warmup(bench_t *bt, int dtype, int op, int root)
{
    const perf_opts_t *o = bt->o;
    for (size_t size = o->min_bytes; size <= o->max_bytes; size = size ? 2 * size : 1) {
        perf_geom_t g;
        perf_geom(bt->coll->kind, size, perf_dtype_size(dtype), bt->b->nranks, &g);
        for (int iter = 0; g.count > 0 && iter < o->warmup_iters; iter++)
            if (run_once(bt, &g, dtype, op, root, 0, (size_t)iter)) return -1;
        if (size > SIZE_MAX / 2) break;
    }
    return 0;
}

static int sweep(bench_t *bt, int dtype, int op, int root)
{
    perf_backend_t *b = bt->b;
    const perf_opts_t *o = bt->o;
    const char *tname = perf_dtype_name(dtype), *oname = perf_op_name(op);
    for (size_t size = o->min_bytes; size <= o->max_bytes; size = next_size(o, size)) {
        perf_geom_t g;
        perf_geom(bt->coll->kind, size, perf_dtype_size(dtype), b->nranks, &g);
        if (g.count == 0) continue; /* nothing to move: no row */
        if (bt->out) perf_print_row_params(bt->out, g.size, g.count, tname, oname, root);
        perf_json_t *j = &bt->json;
        char rootname[16];
        snprintf(rootname, sizeof(rootname), "%6i", root);
        perf_json_obj(j, NULL);
        perf_json_int(j, "size", (long long)g.size);
        perf_json_int(j, "count", (long long)g.count);
        perf_json_str(j, "type", tname);
        perf_json_str(j, "redop", oname);
        perf_json_str(j, "root", rootname);
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
        if (bt->out && o->report_timestamps) {
            char ts[64];
            perf_format_now(ts, sizeof(ts));
            fprintf(bt->out, "%21s", ts);
        }
        if (bt->out) {
            fprintf(bt->out, "\n");
            fflush(bt->out);
        }
        bt->rows++;
        perf_json_int(j, "actual_iterations", o->iters);
        perf_json_str(j, "experiment_name", "");
        perf_json_obj_end(j);
        if (bt->csv) perf_csv_row(bt->csv, &row);
    }
    return 0;
}

static int time_test(bench_t *bt, int dtype, int op, int root)
{
    perf_backend_t *b = bt->b;
    const perf_opts_t *o = bt->o;
    size_t ts = perf_dtype_size(dtype);

    if (b->barrier(b)) return -1;
    bt->send = bt->send_base + (size_t)o->unalign * ts;
    bt->recv = bt->recv_base + (size_t)o->unalign * ts;
    if (bt->dsend_base) {
        bt->dsend = bt->dsend_base + (size_t)o->unalign * ts;
        bt->drecv = bt->drecv_base + (size_t)o->unalign * ts;
    }
    if (warmup(bt, dtype, op, root)) return -1;
    long cycles = o->run_cycles; /* 0: forever, as nccl-tests' do { } while (--repeat) */
    do {
        bt->sweeps++;
        if (sweep(bt, dtype, op, root)) return -1;
    } while (--cycles != 0);
    return 0;
}

/* "# Using devices": one line per rank of the job, gathered to rank 0, with the rank's index
 * among the ranks on its host as the device number and its NCCL_TESTS_SPLIT color as group. */
typedef struct {
    char host[64];
    int32_t pid, group;
} rank_info_t;

static int print_devices(bench_t *bt)
{
    perf_backend_t *b = bt->b;
    rank_info_t mine, *all = calloc((size_t)bt->wn, sizeof(*all));
    if (!all) return -1;
    memset(&mine, 0, sizeof(mine));
    gethostname(mine.host, sizeof(mine.host) - 1);
    mine.pid = (int32_t)getpid();
    mine.group = b->group;
    if (b->allgather_bytes(b, &mine, all, sizeof(mine))) {
        free(all);
        return -1;
    }
    if (bt->out) fprintf(bt->out, "# Using devices\n");
    perf_json_list(&bt->json, "devices");
    for (int r = 0; r < bt->wn; r++) {
        int local = 0;
        for (int q = 0; q < r; q++)
            local += strcmp(all[q].host, all[r].host) == 0;
        if (bt->out)
            fprintf(bt->out, "#  Rank %2d Group %2d Pid %6d on %10s device %2d [cpu] %s\n", r,
                    (int)all[r].group, (int)all[r].pid, all[r].host, local, b->device_desc);
        perf_json_t *j = &bt->json;
        perf_json_obj(j, NULL);
        perf_json_int(j, "rank", r);
        perf_json_int(j, "group", all[r].group);
        perf_json_int(j, "pid", all[r].pid);
        perf_json_str(j, "hostname", all[r].host);
        perf_json_int(j, "device", local);
        perf_json_str(j, "device_hex", "cpu");
        perf_json_str(j, "device_info", b->device_desc);
        perf_json_obj_end(j);
    }
    perf_json_list_end(&bt->json);
    free(all);
    return 0;
}

/* Page-aligned, zeroed memory (mapped: from the backend's host_alloc, for -R 2). */
static void *alloc_buf(perf_backend_t *b, int mapped, size_t bytes, size_t *len_p)
{
    void *p = NULL;
    if (bytes > SIZE_MAX - 4095) return NULL; /* the rounding would wrap */
    size_t len = (bytes + 4095) / 4096 * 4096;
    if (len == 0) len = 4096;
    if (mapped) {
        if (!(p = b->host_alloc(b, len))) return NULL;
    } else if (posix_memalign(&p, 4096, len))
        return NULL;
    memset(p, 0, len); /* touch every page before timing; zeros are valid in every dtype */
    if (len_p) *len_p = len;
    return p;
}

/* Resident set size of this process in bytes (-M), 0 if unknown. */
static double rss_bytes(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
        fclose(f);
    }
    return (double)resident * (double)sysconf(_SC_PAGESIZE);
}

static void mem_string(char *buf, size_t len, double v)
{
    const char *unit = "B";
    if (v >= 1024.0 * 1024 * 1024)
        v /= 1024.0 * 1024 * 1024, unit = "GB";
    else if (v >= 1024.0 * 1024)
        v /= 1024.0 * 1024, unit = "MB";
    else if (v >= 1024.0)
        v /= 1024.0, unit = "KB";
    snprintf(buf, len, "%.*f %s", v < 10 ? 2 : v < 100 ? 1 : 0, v, unit);
}

static void json_config(bench_t *bt)
{
    const perf_opts_t *o = bt->o;
    perf_json_t *j = &bt->json;
    perf_json_obj(j, "config");
    perf_json_int(j, "nthreads", 1);
    perf_json_int(j, "ngpus", 1);
    perf_json_int(j, "minimum_bytes", (long long)o->min_bytes);
    perf_json_int(j, "maximum_bytes", (long long)o->max_bytes);
    if (o->step_factor > 1)
        perf_json_int(j, "step_factor", (long long)o->step_factor);
    else
        perf_json_int(j, "step_bytes", (long long)o->step_bytes);
    perf_json_int(j, "warmup_iters", o->warmup_iters);
    perf_json_int(j, "iterations", o->iters);
    perf_json_int(j, "aggregated_iterations", o->agg_iters);
    perf_json_int(j, "validation", o->check);
    perf_json_int(j, "graph", 0);
    perf_json_bool(j, "blocking_collectives", o->blocking != 0);
    perf_json_bool(j, "per_iter_timing", o->per_iter_timing);
    perf_json_int(j, "per_iter_skip", o->per_iter_skip);
    perf_json_bool(j, "parallel_init", 0);
    perf_json_int(j, "unalign", o->unalign);
    perf_json_bool(j, "local_register", o->local_register);
    perf_json_int(j, "nranks", bt->wn);
}

/* The JSON file's opening: version, start time, the command line, the BRAID_* and NCCL_*
 * environment (BRAID_SECRET masked: the file is meant to be shared). */
static void json_begin(bench_t *bt)
{
    extern char **environ;
    const perf_opts_t *o = bt->o;
    perf_json_t *j = &bt->json;
    char now[64];
    perf_format_now(now, sizeof(now));
    perf_json_obj(j, NULL);
    perf_json_int(j, "version", 3);
    perf_json_str(j, "start_time", now);
    perf_json_list(j, "args");
    for (int i = 0; i < o->argc; i++)
        perf_json_str(j, NULL, o->argv[i]);
    perf_json_list_end(j);
    perf_json_list(j, "env");
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "BRAID_", 6) != 0 && strncmp(*e, "NCCL_", 5) != 0) continue;
        perf_json_str(j, NULL, strncmp(*e, "BRAID_SECRET=", 13) == 0 ? "BRAID_SECRET=***" : *e);
    }
    perf_json_list_end(j);
    perf_json_int(j, "braid_version", bt->b->version);
}

int perf_bench_run(perf_backend_t *b, const perf_coll_t *coll, const perf_opts_t *o)
{
    bench_t bt = {.b = b, .coll = coll, .o = o};
    bt.wrank = b->world_nranks ? b->world_rank : b->rank;
    bt.wn = b->world_nranks ? b->world_nranks : b->nranks;
    bt.out = bt.wrank == 0 ? stdout : NULL;
    const char *hook = getenv("PERF_TEST_CORRUPT_RANK");
    bt.corrupt = hook && *hook && atoi(hook) == bt.wrank;
    int rc = 2, registered = 0;
    double mem0 = rss_bytes(), mem_bufs = 0;

    if (coll->has_root && o->root != PERF_ALL && (o->root < 0 || o->root >= b->nranks)) {
        if (bt.out) fprintf(stderr, "invalid root %d: the job has %d ranks\n", o->root, b->nranks);
        b->barrier(b); /* rank 0 printed it before anybody exits */
        return 2;
    }
    if (bt.out && o->json_path) {
        char used[4096];
        bt.json.f = perf_json_open(o->json_path, used, sizeof(used));
        if (bt.json.f)
            printf("# Writing JSON output to %s\n", used);
        else
            printf("# skipping json output; %s not accessible: %s\n", used, strerror(errno));
    }
    json_begin(&bt);
    if (bt.out) perf_print_header(bt.out, o, b->version);
    json_config(&bt);
    if (print_devices(&bt)) goto out;
    perf_json_obj_end(&bt.json); /* config */
    if (bt.out) fflush(bt.out);

    size_t pad = 8 * (size_t)o->unalign; /* the largest element times -u */
    if (o->local_register == 2 && (!b->host_alloc || !b->register_buffer)) {
        if (bt.out) fprintf(stderr, "-R 2: %s has no mappable host memory\n", b->name);
        goto out;
    }
    if (o->max_bytes > SIZE_MAX - pad) { /* perf_parse_args caps sizes; other callers too */
        fprintf(stderr, "rank %d: maxbytes %zu is too large\n", bt.wrank, o->max_bytes);
        goto out;
    }
    bt.send_base = alloc_buf(b, o->local_register == 2, o->max_bytes + pad, &bt.alloc_len);
    bt.recv_base = alloc_buf(b, o->local_register == 2, o->max_bytes + pad, NULL);
    bt.exp = o->check ? alloc_buf(b, 0, o->max_bytes, NULL) : NULL;
    if (o->per_iter_timing) {
        bt.iter_times = calloc((size_t)o->iters, sizeof(double));
        bt.all_iter_times = calloc((size_t)o->iters * (size_t)bt.wn, sizeof(double));
    }
    if (!bt.send_base || !bt.recv_base || (o->check && !bt.exp) ||
        (o->per_iter_timing && (!bt.iter_times || !bt.all_iter_times))) {
        fprintf(stderr, "rank %d: cannot allocate 3 buffers of %zu bytes\n", bt.wrank,
                o->max_bytes);
        goto out;
    }
    mem_bufs = rss_bytes() - mem0;
    if (o->device) {
        if (!b->dev_setup || b->dev_setup(b, o->device)) {
            fprintf(stderr, "rank %d: --device %d: %s has no device buffers here\n", b->rank,
                    o->device, b->name);
            goto out;
        }
        bt.dsend_base = b->dev_alloc(b, o->max_bytes + pad);
        bt.drecv_base = b->dev_alloc(b, o->max_bytes + pad);
        if (!bt.dsend_base || !bt.drecv_base) goto out;
        /* the host images are zero: start the device buffers equal to them */
        if (b->dev_copy(b, bt.dsend_base, bt.send_base, o->max_bytes + pad) ||
            b->dev_copy(b, bt.drecv_base, bt.recv_base, o->max_bytes + pad))
            goto out;
    }
    if (o->local_register) {
        if (!b->register_buffer) {
            if (bt.out) fprintf(stderr, "-R: %s cannot register buffers\n", b->name);
            goto out;
        }
        registered = 1; /* the buffers the collectives get: the device ones with --device */
        size_t rlen = bt.dsend_base ? o->max_bytes + pad : bt.alloc_len;
        if (b->register_buffer(b, bt.dsend_base ? bt.dsend_base : bt.send_base, rlen) ||
            b->register_buffer(b, bt.drecv_base ? bt.drecv_base : bt.recv_base, rlen))
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
    perf_json_list(&bt.json, "results");

    int ntypes = o->dtype == PERF_ALL ? BRAID_NUM_DTYPES : 1;
    int nops = coll->has_op && o->op == PERF_ALL ? PERF_NUM_OPS : 1;
    int r0 = !coll->has_root ? -1 : o->root == PERF_ALL ? 0 : o->root;
    int r1 = !coll->has_root ? -1 : o->root == PERF_ALL ? b->nranks - 1 : o->root;
    for (int t = 0; t < ntypes; t++) {
        int dtype = o->dtype == PERF_ALL ? perf_all_dtypes[t] : o->dtype;
        for (int k = 0; k < nops; k++) {
            int op = !coll->has_op ? PERF_NO_OP : o->op == PERF_ALL ? perf_all_ops[k] : o->op;
            if (!b->supports(b, coll, dtype, op)) {
                if (bt.out && coll->kind == PERF_HYPERCUBE)
                    fprintf(bt.out,
                            "# skipping %s: the hypercube needs a power-of-two number "
                            "of ranks, not %d\n",
                            perf_dtype_name(dtype), b->nranks);
                else if (bt.out)
                    fprintf(bt.out, "# skipping %s %s: not supported by %s\n",
                            perf_dtype_name(dtype), perf_op_name(op), b->name);
                continue;
            }
            for (int root = r0; root <= r1; root++)
                if (time_test(&bt, dtype, op, root)) goto out;
        }
    }
    perf_json_list_end(&bt.json);
    /* Sizes below one element per block (-b 2 -e 2 with float) measure nothing: an error, not a
     * passing run (every rank sees the same sizes, so all of them exit 2). */
    int nothing = bt.sweeps > 0 && bt.rows == 0;
    if (nothing && bt.out)
        fprintf(stderr,
                "%s: nothing was measured: every size from %zu to %zu bytes gives a count of 0 "
                "(fewer bytes than one element per rank's block); raise -b/-e\n",
                o->prog, o->min_bytes, o->max_bytes);

    /* Every rank's error count is summed before anybody returns, and the footer is printed
     * before the last barrier: a rank that saw wrong data exits 1 only after rank 0 printed
     * "# Out of bounds values : N FAILED" (a launcher kills the job when one rank fails). */
    int64_t errors = bt.errors;
    if (b->allreduce_i64(b, &errors)) goto out;
    double mem_end = rss_bytes() - mem0 - mem_bufs;
    double mem_max[3] = {(double)b->init_mem, mem_bufs, mem_end};
    for (int i = 0; o->memory_report && i < 3; i++)
        if (b->allreduce_f64(b, &mem_max[i], BRAID_MAX)) goto out;
    double avg_bw = bt.bw_count ? bt.bw_sum / bt.bw_count : 0.0;
    const char *env = getenv("NCCL_TESTS_MIN_BW");
    double min_bw = env ? atof(env) : -1;
    int bw_fail = min_bw != -1 && avg_bw < min_bw * 0.9;
    if (bt.out) {
        fprintf(bt.out, "# %-20s : %d %s\n", "Out of bounds values", (int)errors,
                errors ? "FAILED" : "OK");
        fprintf(bt.out, "# %-20s : %g %s\n", "Avg bus bandwidth", avg_bw,
                min_bw == -1 ? ""
                : bw_fail    ? "FAILED"
                             : "OK");
        fprintf(bt.out, "#\n");
        fprintf(bt.out, "# Collective test concluded: %s\n", o->prog);
        if (o->memory_report) {
            char m[3][32], tot[32];
            for (int i = 0; i < 3; i++)
                mem_string(m[i], sizeof(m[i]), mem_max[i] > 0 ? mem_max[i] : 0);
            mem_string(tot, sizeof(tot),
                       (mem_max[0] > 0 ? mem_max[0] : 0) + mem_max[1] +
                           (mem_max[2] > 0 ? mem_max[2] : 0));
            fprintf(bt.out,
                    "# %-20s : Initialization %s | User-Allocated %s | Collective %s | Total  %s\n",
                    "Host memory usage", m[0], m[1], m[2], tot);
        }
        fprintf(bt.out, "#\n\n");
        fflush(bt.out);
    }
    perf_json_obj(&bt.json, "out_of_bounds");
    perf_json_int(&bt.json, "count", errors);
    perf_json_bool(&bt.json, "okay", errors == 0);
    perf_json_obj_end(&bt.json);
    perf_json_obj(&bt.json, "average_bus_bandwidth");
    perf_json_double(&bt.json, "bandwidth", avg_bw);
    if (min_bw == -1)
        perf_json_str(&bt.json, "okay", "unchecked");
    else
        perf_json_bool(&bt.json, "okay", !bw_fail);
    perf_json_obj_end(&bt.json);
    perf_json_list(&bt.json, "errors");
    perf_json_list_end(&bt.json);
    if (b->barrier(b)) goto out;
    rc = nothing ? 2 : errors || bw_fail ? 1 : 0;
out:
    if (registered && b->deregister_all) b->deregister_all(b);
    if (bt.json.f) {
        char now[64];
        perf_format_now(now, sizeof(now));
        while (bt.json.depth > 1) /* an error left a row open */
            (bt.json.closer[bt.json.depth - 1] == '}' ? perf_json_obj_end
                                                      : perf_json_list_end)(&bt.json);
        perf_json_str(&bt.json, "end_time", now);
        perf_json_close(&bt.json);
    }
    if (bt.csv) fclose(bt.csv);
    if (bt.dsend_base) b->dev_free(b, bt.dsend_base);
    if (bt.drecv_base) b->dev_free(b, bt.drecv_base);
    if (o->local_register == 2) {
        if (bt.send_base) b->host_free(b, bt.send_base);
        if (bt.recv_base) b->host_free(b, bt.recv_base);
    } else {
        free(bt.send_base);
        free(bt.recv_base);
    }
    free(bt.exp);
    free(bt.iter_times);
    free(bt.all_iter_times);
    return rc;
}
