/* ddp_mlp: trains a 784-512-512-10 MLP on Fashion-MNIST with braid's DDP layer.
 *
 *   braid-run -n N build/bin/ddp_mlp [--epochs E] [--batch B] [--lr X] [--bucket-mb M]
 *       [--no-overlap | --alternate] [--seed S] [--csv FILE] [--plot FILE.png] [--opt adam|sgd]
 *       [--momentum MU] [--w1-blocks K] [--w2-blocks K] [--train-limit N] [--test-limit N]
 *       [--data DIR] [--max-steps N] [--warmup N] [--timeline FILE]
 *       [--compress none|fp16|bf16|powersgd]
 *       [--zero 0|1|2] [--powersgd-rank R] [--eval-every K] [--local-sgd K [--local-sgd-state]]
 *       [--async [--servers S] [--staleness B]] [--slow-rank R --slow-factor F]
 *
 * Ranks come from the environment (braid-run, mpirun, torchrun-style: braid_comm_init_env).
 * B is the global batch: each rank takes B/N samples of it (B must be divisible by N). Every
 * epoch the training set is permuted from (seed, epoch), identically on every rank, and global
 * batch t is the permutation's slice [tB, (t+1)B); rank r takes the r-th B/N of it (as a
 * distributed sampler; the last partial batch is dropped). The gradients are averaged by the
 * DDP layer, so the run follows one-process training with batch B.
 *
 * Output (rank 0): `epoch E loss L test_acc A samples_per_s S` per epoch (L: mean training
 * loss of the epoch, A: accuracy on the test images, S: training samples per second, all
 * ranks together); every rank at the end: `params_hash H` (FNV-1a of the final parameters'
 * bytes; equal on every rank). With --max-steps, rank 0 also prints `step_ms M backward_ms B
 * finish_ms F steps K mean_step_ms X` (medians over the K steps after --warmup, and their
 * mean: with --local-sgd K', over a multiple of K' steps that includes the averaging steps).
 * --alternate runs the steps with and without overlap in turn (even global steps overlapped,
 * odd ones not) and prints the same figures twice, as `overlap step_ms ...` and `no_overlap
 * step_ms ...`: an A/B within one run, whose two halves meet the same machine speed (on a
 * shared or throttled machine, separate runs a minute apart do not).
 * --timeline FILE writes one step's events per rank to FILE.<rank> (perf/ddp_timeline.py draws
 * them). Rank 0 also prints `eval step S wall_s W test_acc A` after every K steps with --eval-every
 * K and at the end of every epoch (W: the training time so far, evaluations excluded), and at the
 * end `comm_bytes_per_step B state_bytes S grad_bytes G optimizer_bytes O staging_bytes T
 * hook_bytes H` (B: bytes one rank sends per step with ring algorithms, 2(n-1)/n of an
 * all-reduce's bytes; S = G + O + T + H: the gradients the DDP layer keeps, the optimizer
 * state, ZeRO-2's staging buffers, PowerSGD's error/Q/wire buffers). Errors: a message naming
 * the cause on stderr and exit status 1. */
#include "ddp_mlp.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void openblas_set_num_threads(int n);

typedef struct {
    int epochs, batch, overlap, alternate, adam, w1_blocks, w2_blocks, train_limit, test_limit,
        max_steps, warmup;
    double lr, momentum, bucket_mb;
    uint64_t seed;
    const char *csv, *plot, *data, *timeline;
    braid_datatype_t compress; /* BRAID_FLOAT32 = none */
    int zero;                  /* ZeRO stage (0, 1 or 2) */
    int powersgd, psgd_rank;   /* --compress powersgd, --powersgd-rank */
    int eval_every;            /* steps between evaluations (0: per epoch only) */
} args_t;

static braid_comm_t g_comm;
static int g_rank;

static void die(const char *what, braid_result_t r, const char *msg)
{
    fprintf(stderr, "ddp_mlp rank %d: %s failed: %s: %s\n", g_rank, what, braid_strerror(r), msg);
    fflush(stderr);
    if (g_comm) braid_comm_destroy(g_comm);
    exit(1);
}
#define CK(call, what)                                                                             \
    do {                                                                                           \
        braid_result_t r_ = (call);                                                                \
        if (r_) die(what, r_, braid_last_error());                                                 \
    } while (0)
#define CKD(call, what)                                                                            \
    do {                                                                                           \
        braid_result_t r_ = (call);                                                                \
        if (r_) die(what, r_, braid_ddp_last_error());                                             \
    } while (0)

static void usage(void)
{
    fprintf(
        stderr,
        "usage: ddp_mlp [--epochs E] [--batch B] [--lr X] [--bucket-mb M] "
        "[--no-overlap | --alternate] [--seed S] [--csv FILE] [--plot FILE.png] [--opt adam|sgd] "
        "[--momentum MU] [--w1-blocks K] [--w2-blocks K] [--train-limit N] "
        "[--test-limit N] "
        "[--data DIR] [--max-steps N] [--warmup N] [--timeline FILE] "
        "[--compress none|fp16|bf16|powersgd] [--zero 0|1|2] [--powersgd-rank R] "
        "[--eval-every K]\n");
    exit(2);
}

static void parse(int argc, char **argv, args_t *a)
{
    *a = (args_t){.epochs = 10,
                  .batch = 128,
                  .overlap = 1,
                  .adam = 1,
                  .w1_blocks = 8,
                  .w2_blocks = 1,
                  .warmup = 5,
                  .lr = -1,
                  .momentum = 0.9,
                  .bucket_mb = 25,
                  .seed = 1,
                  .compress = BRAID_FLOAT32,
                  .psgd_rank = 4,
                  .data = "/usr/share/datasets/fashion-mnist"};
    static const struct option opts[] = {{"epochs", 1, 0, 'e'},
                                         {"batch", 1, 0, 'b'},
                                         {"lr", 1, 0, 'l'},
                                         {"bucket-mb", 1, 0, 'm'},
                                         {"no-overlap", 0, 0, 'n'},
                                         {"seed", 1, 0, 's'},
                                         {"csv", 1, 0, 'c'},
                                         {"plot", 1, 0, 'p'},
                                         {"opt", 1, 0, 'o'},
                                         {"momentum", 1, 0, 'u'},
                                         {"w1-blocks", 1, 0, 'k'},
                                         {"w2-blocks", 1, 0, 'K'},
                                         {"train-limit", 1, 0, 'T'},
                                         {"test-limit", 1, 0, 'V'},
                                         {"data", 1, 0, 'd'},
                                         {"max-steps", 1, 0, 'S'},
                                         {"warmup", 1, 0, 'w'},
                                         {"timeline", 1, 0, 't'},
                                         {"compress", 1, 0, 'C'},
                                         {"zero", 1, 0, 'Z'},
                                         {"help", 0, 0, 'h'},
                                         {"powersgd-rank", 1, 0, 'R'},
                                         {"eval-every", 1, 0, 'E'},
                                         {"alternate", 0, 0, 'A'},
                                         {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        char *end = NULL;
        switch (c) {
        case 'e':
            a->epochs = (int)strtol(optarg, &end, 10);
            break;
        case 'b':
            a->batch = (int)strtol(optarg, &end, 10);
            break;
        case 'l':
            a->lr = strtod(optarg, &end);
            break;
        case 'm':
            a->bucket_mb = strtod(optarg, &end);
            break;
        case 'n':
            a->overlap = 0;
            break;
        case 'A':
            a->alternate = 1;
            break;
        case 's':
            a->seed = strtoull(optarg, &end, 10);
            break;
        case 'c':
            a->csv = optarg;
            break;
        case 'p':
            a->plot = optarg;
            break;
        case 'o':
            if (!strcmp(optarg, "adam"))
                a->adam = 1;
            else if (!strcmp(optarg, "sgd"))
                a->adam = 0;
            else
                usage();
            break;
        case 'u':
            a->momentum = strtod(optarg, &end);
            break;
        case 'k':
            a->w1_blocks = (int)strtol(optarg, &end, 10);
            break;
        case 'K':
            a->w2_blocks = (int)strtol(optarg, &end, 10);
            break;
        case 'T':
            a->train_limit = (int)strtol(optarg, &end, 10);
            break;
        case 'V':
            a->test_limit = (int)strtol(optarg, &end, 10);
            break;
        case 'd':
            a->data = optarg;
            break;
        case 'S':
            a->max_steps = (int)strtol(optarg, &end, 10);
            break;
        case 'w':
            a->warmup = (int)strtol(optarg, &end, 10);
            break;
        case 't':
            a->timeline = optarg;
            break;
        case 'Z':
            a->zero = (int)strtol(optarg, &end, 10);
            break;
        case 'R':
            a->psgd_rank = (int)strtol(optarg, &end, 10);
            break;
        case 'E':
            a->eval_every = (int)strtol(optarg, &end, 10);
            break;
        case 'C':
            if (!strcmp(optarg, "fp16"))
                a->compress = BRAID_FLOAT16;
            else if (!strcmp(optarg, "bf16"))
                a->compress = BRAID_BFLOAT16;
            else if (!strcmp(optarg, "none"))
                a->compress = BRAID_FLOAT32;
            else if (!strcmp(optarg, "powersgd"))
                a->powersgd = 1;
            else
                usage();
            break;
        default:
            usage();
        }
        if (end && *end) {
            fprintf(stderr, "ddp_mlp: bad number '%s'\n", optarg);
            exit(2);
        }
    }
    if (optind != argc || a->epochs < 1 || a->batch < 1 || a->bucket_mb <= 0 || a->zero < 0 ||
        a->zero > 2 || (a->zero && (a->compress != BRAID_FLOAT32 || a->powersgd)) ||
        a->psgd_rank < 1 || a->eval_every < 0)
        usage();
    if (a->lr < 0) a->lr = a->adam ? 1e-3 : 0.05;
}

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* The same permutation of [0, n) on every rank, from (seed, epoch). */
void permute(int *perm, int n, uint64_t seed, int epoch)
{
    uint64_t s = (seed + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)epoch * 0xD1B54A32D192ED03ull);
    if (!s) s = 1;
    for (int i = 0; i < n; i++)
        perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(rng(&s) % (uint64_t)(i + 1));
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n)
{
    if (n <= 0) return 0;
    qsort(v, (size_t)n, sizeof(double), cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* --alternate: the figures of print_step_times for the overlapped (even) and the plain (odd)
 * steps after warmup, each on its own line. */
static void print_alternate(const double *t_step, const double *t_bwd, const double *t_fin,
                            int nsteps, int warmup)
{
    int n = nsteps > warmup ? nsteps - warmup : 0, k[2] = {0, 0};
    double *v = malloc((size_t)(n > 0 ? n : 1) * 3 * 2 * sizeof(double));
    if (!v) return;
    for (int i = warmup; i < nsteps; i++) {
        int p = i % 2; /* 0: overlapped */
        double *d = v + (size_t)p * 3 * (size_t)n;
        d[k[p]] = t_step[i];
        d[n + k[p]] = t_bwd[i];
        d[2 * n + k[p]] = t_fin[i];
        k[p]++;
    }
    for (int p = 0; p < 2; p++) {
        double *d = v + (size_t)p * 3 * (size_t)n;
        printf("%s ", p ? "no_overlap" : "overlap");
        print_step_times(d, d + n, d + 2 * n, k[p], 0);
    }
    free(v);
}

void print_step_times(double *t_step, double *t_bwd, double *t_fin, int nsteps, int warmup)
{
    int k = nsteps - warmup;
    int off = k > 0 ? warmup : 0;
    if (k <= 0) k = nsteps;
    double sum = 0;
    for (int i = 0; i < k; i++)
        sum += t_step[off + i];
    double mean = k > 0 ? sum / k * 1e3 : 0; /* before median() sorts t_step */
    double ms = median(t_step + off, k) * 1e3, mb = median(t_bwd + off, k) * 1e3;
    double mf = median(t_fin + off, k) * 1e3;
    printf("step_ms %.3f backward_ms %.3f finish_ms %.3f steps %d mean_step_ms %.3f\n", ms, mb, mf,
           k, mean);
    fflush(stdout);
}

static void write_timeline(const char *file, int rank, braid_ddp_t ddp, const mlp_events_t *ev,
                           double t_fin0, double t_fin1)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s.%d", file, rank);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return;
    }
    fprintf(f, "rank,kind,name,t0,t1\n");
    for (int i = 0; i < ev->n; i++)
        fprintf(f, "%d,backward,%s,%.6f,%.6f\n", rank, ev->name[i], ev->t0[i], ev->t1[i]);
    for (int b = 0; b < braid_ddp_num_buckets(ddp); b++) {
        braid_ddp_bucket_info_t in;
        if (braid_ddp_bucket_info(ddp, b, &in)) continue;
        fprintf(f, "%d,allreduce,bucket %d (%.2f MB),%.6f,%.6f\n", rank, b, (double)in.bytes / 1e6,
                in.t_launch, in.t_done);
    }
    fprintf(f, "%d,finish,finish,%.6f,%.6f\n", rank, t_fin0, t_fin1);
    fclose(f);
}

/* Loss and accuracy curves with gnuplot (rank 0). */
static void plot(const char *png, const double *loss, const double *acc, int n)
{
    char dat[1100];
    snprintf(dat, sizeof(dat), "%s.dat", png);
    FILE *f = fopen(dat, "w");
    if (!f) {
        perror(dat);
        return;
    }
    for (int e = 0; e < n; e++)
        fprintf(f, "%d %.6f %.6f\n", e + 1, loss[e], acc[e]);
    fclose(f);
    FILE *g = popen("gnuplot", "w");
    if (!g) {
        perror("gnuplot");
        return;
    }
    fprintf(
        g,
        "set terminal pngcairo size 800,500\nset output '%s'\nset xlabel 'epoch'\n"
        "set ylabel 'training loss'\nset y2label 'test accuracy'\nset y2tics\nset ytics nomirror\n"
        "set grid\nset key center right\n"
        "plot '%s' using 1:2 with linespoints title 'loss' axes x1y1, "
        "'%s' using 1:3 with linespoints title 'test accuracy' axes x1y2\n",
        png, dat, dat);
    if (pclose(g) != 0) fprintf(stderr, "ddp_mlp: gnuplot failed (is gnuplot installed?)\n");
    remove(dat);
}

/* Test accuracy over the test set's shards (collective). */
static double evaluate(mlp_t *m, const dataset_t *test, int rank, int n)
{
    int lo = (int)((long)test->n * rank / n), hi = (int)((long)test->n * (rank + 1) / n);
    double ok = (double)mlp_correct_range(m, test, lo, hi);
    CK(braid_allreduce(&ok, &ok, 1, BRAID_FLOAT64, BRAID_SUM, g_comm), "evaluation");
    return ok / test->n;
}

/* The bytes line (rank 0): communication per step and the state kept per rank. */
static void print_bytes(braid_ddp_t ddp, const braid_ddp_hook_t *hook, const args_t *a, int n,
                        size_t state_elems, braid_ddp_localsgd_t ls, int steps_run)
{
    braid_ddp_stats_t st;
    CKD(braid_ddp_stats(ddp, &st), "braid_ddp_stats");
    double steps = st.steps ? (double)st.steps : 1, comm = (double)st.sent_bytes / steps;
    size_t hook_bytes = 0;
    if (a->powersgd) {
        braid_ddp_powersgd_stats_t ps;
        CKD(braid_ddp_powersgd_stats(hook, &ps), "braid_ddp_powersgd_stats");
        comm = (double)ps.sent_bytes / (ps.steps ? (double)ps.steps : 1);
        hook_bytes = ps.state_bytes;
    } else if (a->compress != BRAID_FLOAT32) {
        /* every bucket is float32, sent as 2-byte values in one all-reduce */
        comm = 2.0 * (n - 1) / n * (double)st.padded_count * 2.0;
        for (int b = 0; b < braid_ddp_num_buckets(ddp); b++) {
            braid_ddp_bucket_info_t in;
            CKD(braid_ddp_bucket_info(ddp, b, &in), "braid_ddp_bucket_info");
            hook_bytes += in.count * 2; /* the hook's wire buffers */
        }
    }
    if (ls) /* local SGD: the averages, 2(n-1)/n of a ring all-reduce's bytes, per step */
        comm = 2.0 * (n - 1) / n * (double)braid_ddp_localsgd_bytes(ls, NULL) /
               (steps_run ? steps_run : 1);
    size_t opt = state_elems * (a->adam ? 2 : 1) * 4;
    if (g_rank == 0)
        printf("comm_bytes_per_step %.0f state_bytes %zu grad_bytes %zu optimizer_bytes %zu "
               "staging_bytes %zu hook_bytes %zu\n",
               comm, st.grad_bytes + opt + st.staging_bytes + hook_bytes, st.grad_bytes, opt,
               st.staging_bytes, hook_bytes);
}

int main(int argc, char **argv)
{
    args_t a;
    variant_args_t va; /* the switches of variants.c, taken out of argv */
    variant_args(&argc, argv, &va);
    parse(argc, argv, &a);
    if (va.local_sgd && (a.zero || a.compress != BRAID_FLOAT32)) usage();
    openblas_set_num_threads(1); /* one BLAS thread per rank */
    CK(braid_comm_init_env(&g_comm), "braid_comm_init_env");
    int n;
    CK(braid_comm_rank(g_comm, &g_rank), "braid_comm_rank");
    CK(braid_comm_size(g_comm, &n), "braid_comm_size");
    int nw = va.async && n > va.servers ? n - va.servers : n; /* ranks that take samples */
    if (a.batch % nw) {
        fprintf(stderr, "ddp_mlp: --batch %d is not divisible by the %d ranks that take samples\n",
                a.batch, nw);
        braid_comm_destroy(g_comm);
        return 2;
    }
    int per = a.batch / nw;
    dataset_t train, test;
    if (dataset_load(&train, a.data, "train", a.train_limit) ||
        dataset_load(&test, a.data, "t10k", a.test_limit)) {
        braid_comm_destroy(g_comm);
        return 1;
    }
    const int dims[MLP_LAYERS + 1] = {784, 512, 512, 10};
    mlp_t m;
    const int wblocks[MLP_LAYERS] = {a.w1_blocks, a.w2_blocks, 1};
    if (mlp_init(&m, dims, wblocks, per > 500 ? per : 500, a.seed)) {
        fprintf(stderr, "ddp_mlp: model initialisation failed\n");
        return 1;
    }
    m.adam = a.adam;
    m.lr = (float)a.lr;
    m.momentum = (float)a.momentum;
    m.beta1 = 0.9f;
    m.beta2 = 0.999f;
    m.eps = 1e-8f;
    if (va.async) {
        async_run_t run = {a.epochs, a.batch, a.max_steps, a.warmup, a.eval_every, a.seed};
        int rc = variant_async(&m, &train, &test, &run, &va, g_comm);
        mlp_free(&m);
        dataset_free(&train);
        dataset_free(&test);
        return rc;
    }
    braid_ddp_options_t o;
    braid_ddp_options_init(&o);
    o.bucket_cap_bytes = (size_t)(a.bucket_mb * 1048576.0);
    if (o.first_bucket_bytes > o.bucket_cap_bytes) o.first_bucket_bytes = o.bucket_cap_bytes;
    o.grad_as_bucket_view = 1;
    braid_ddp_hook_t hook = {0};
    if (a.compress != BRAID_FLOAT32) {
        CKD(braid_ddp_hook_compress(&hook, a.compress), "braid_ddp_hook_compress");
        o.hook = &hook;
    }
    if (a.powersgd) {
        braid_ddp_powersgd_options_t po;
        braid_ddp_powersgd_options_init(&po);
        po.rank = a.psgd_rank;
        CKD(braid_ddp_hook_powersgd(&hook, &po), "braid_ddp_hook_powersgd");
        o.hook = &hook;
    }
    o.zero_stage = a.zero;
    braid_ddp_t ddp;
    CKD(braid_ddp_create(&ddp, g_comm, m.reg, m.nparams, &o), "braid_ddp_create");
    mlp_use_views(&m, ddp);
    braid_ddp_localsgd_t ls = NULL;
    if (va.local_sgd) ls = variant_localsgd(&m, ddp, g_comm, &va);
    /* ZeRO-1: the optimizer's state covers this rank's shard of every bucket only. */
    int nb = braid_ddp_num_buckets(ddp);
    float **zm1 = calloc((size_t)nb, sizeof(float *)), **zm2 = calloc((size_t)nb, sizeof(float *));
    size_t state_elems = 0;
    for (int i = 0; i < m.nparams && !a.zero; i++)
        state_elems += m.reg[i].count;
    for (int b = 0; b < nb && a.zero; b++) {
        braid_ddp_shard_t sh;
        CKD(braid_ddp_shard(ddp, b, &sh), "braid_ddp_shard");
        zm1[b] = calloc(sh.count + 1, sizeof(float));
        zm2[b] = calloc(sh.count + 1, sizeof(float));
        state_elems += sh.count;
    }
    if (a.zero)
        for (int i = 0; i < m.nparams; i++) {
            free(m.m1[i]);
            free(m.m2[i]);
            m.m1[i] = m.m2[i] = NULL;
        }
    if (g_rank == 0) {
        printf("optimizer_state_bytes_per_rank %zu\n", state_elems * (a.adam ? 2 : 1) * 4);
        fflush(stdout);
    }

    int steps_per_epoch = train.n / a.batch;
    int *perm = malloc((size_t)train.n * sizeof(int));
    float *xb = malloc((size_t)per * 784 * sizeof(float));
    uint8_t *yb = malloc((size_t)per);
    int cap_steps = a.max_steps > 0 ? a.max_steps : steps_per_epoch * a.epochs;
    double *t_step = calloc((size_t)cap_steps + 1, sizeof(double));
    double *t_bwd = calloc((size_t)cap_steps + 1, sizeof(double));
    double *t_fin = calloc((size_t)cap_steps + 1, sizeof(double));
    double *loss_hist = calloc((size_t)a.epochs, sizeof(double));
    double *acc_hist = calloc((size_t)a.epochs, sizeof(double));
    if (!perm || !xb || !yb || !t_step || !t_bwd || !t_fin || !loss_hist || !acc_hist) {
        fprintf(stderr, "ddp_mlp: out of memory\n");
        return 1;
    }
    if (steps_per_epoch < 1) {
        fprintf(stderr, "ddp_mlp: %d training images < one batch of %d\n", train.n, a.batch);
        return 2;
    }
    FILE *csv = NULL;
    if (a.csv && g_rank == 0) {
        csv = fopen(a.csv, "w");
        if (!csv) {
            perror(a.csv);
            return 1;
        }
        fprintf(csv, "epoch,loss,test_acc,samples_per_s\n");
    }
    int timeline_step = a.max_steps > 0 ? a.max_steps - 1 : 20;
    mlp_events_t ev;
    int gstep = 0, done = 0, epochs_run = 0;
    double wall = 0; /* training time so far (rank 0's steps) */
    for (int epoch = 1; epoch <= a.epochs && !done; epoch++) {
        permute(perm, train.n, a.seed, epoch);
        double loss_sum = 0, t0 = now_s();
        int steps = 0;
        for (int s = 0; s < steps_per_epoch; s++) {
            double ts = now_s();
            const int *idx = perm + (size_t)s * (size_t)a.batch + (size_t)g_rank * (size_t)per;
            dataset_rows(&train, idx, per, xb);
            for (int r = 0; r < per; r++)
                yb[r] = train.label[idx[r]];
            loss_sum += mlp_forward(&m, xb, yb, per);
            ev.n = 0;
            double tb = now_s();
            int ov = a.alternate ? gstep % 2 == 0 : a.overlap;
            CKD(mlp_backward(&m, xb, yb, per, per, ddp, ov, &ev), "backward (grad_ready)");
            double tf = now_s();
            variant_slow(&va, g_rank, tf - ts);
            CKD(braid_ddp_finish(ddp), "braid_ddp_finish");
            double te = now_s();
            if (a.zero) {
                m.t++;
                for (int b = 0; b < nb; b++) {
                    braid_ddp_shard_t sh;
                    CKD(braid_ddp_shard(ddp, b, &sh), "braid_ddp_shard");
                    mlp_update(&m, sh.param, sh.grad, zm1[b], zm2[b], sh.count);
                }
                CKD(braid_ddp_gather_params(ddp), "braid_ddp_gather_params");
            } else {
                mlp_step(&m);
            }
            if (ls) CKD(braid_ddp_localsgd_step(ls, NULL), "braid_ddp_localsgd_step");
            t_step[gstep] = now_s() - ts;
            wall += t_step[gstep];
            if (a.eval_every && (gstep + 1) % a.eval_every == 0) {
                double acc = evaluate(&m, &test, g_rank, n);
                if (g_rank == 0) {
                    printf("eval step %d wall_s %.3f test_acc %.4f\n", gstep + 1, wall, acc);
                    fflush(stdout); /* a run killed at its cap keeps its curve so far */
                }
            }
            t_bwd[gstep] = tf - tb;
            t_fin[gstep] = te - tf;
            if (a.timeline && gstep == timeline_step)
                write_timeline(a.timeline, g_rank, ddp, &ev, tf, te);
            steps++;
            if (++gstep >= cap_steps) {
                done = 1;
                break;
            }
        }
        if (ls) CKD(braid_ddp_localsgd_sync(ls), "braid_ddp_localsgd_sync");
        double train_s = now_s() - t0;
        /* epoch loss over every rank's samples, test accuracy over the test set's shards */
        int lo = (int)((long)test.n * g_rank / n), hi = (int)((long)test.n * (g_rank + 1) / n);
        int *tidx = malloc((size_t)(hi - lo > 0 ? hi - lo : 1) * sizeof(int));
        float *tx = malloc((size_t)(hi - lo > 0 ? hi - lo : 1) * 784 * sizeof(float));
        if (!tidx || !tx) {
            fprintf(stderr, "ddp_mlp: out of memory\n");
            return 1;
        }
        for (int i = lo; i < hi; i++)
            tidx[i - lo] = i;
        dataset_rows(&test, tidx, hi - lo, tx);
        double red[3] = {loss_sum, (double)steps * per,
                         (double)mlp_correct(&m, tx, test.label + lo, hi - lo)};
        free(tidx);
        free(tx);
        CK(braid_allreduce(red, red, 3, BRAID_FLOAT64, BRAID_SUM, g_comm), "epoch statistics");
        double loss = red[0] / (red[1] > 0 ? red[1] : 1), acc = red[2] / test.n;
        double sps = (double)steps * a.batch / train_s;
        loss_hist[epochs_run] = loss;
        acc_hist[epochs_run++] = acc;
        if (g_rank == 0) {
            printf("epoch %d loss %.4f test_acc %.4f samples_per_s %.0f\n", epoch, loss, acc, sps);
            printf("eval step %d wall_s %.3f test_acc %.4f\n", gstep, wall, acc);
            fflush(stdout);
            if (csv) {
                fprintf(csv, "%d,%.6f,%.6f,%.1f\n", epoch, loss, acc, sps);
                fflush(csv);
            }
        }
    }
    if (a.max_steps > 0 && g_rank == 0 && a.alternate)
        print_alternate(t_step, t_bwd, t_fin, gstep, a.warmup);
    else if (a.max_steps > 0 && g_rank == 0)
        print_step_times(t_step, t_bwd, t_fin, gstep, a.warmup);
    print_bytes(ddp, &hook, &a, n, state_elems, ls, gstep);
    braid_ddp_localsgd_destroy(ls);
    if (csv) fclose(csv);
    if (a.plot && g_rank == 0) plot(a.plot, loss_hist, acc_hist, epochs_run);
    printf("params_hash %016llx\n", (unsigned long long)mlp_hash(&m));
    fflush(stdout);
    braid_ddp_destroy(ddp);
    braid_ddp_hook_compress_free(&hook);
    braid_ddp_hook_powersgd_free(&hook);
    for (int b = 0; b < nb; b++) {
        free(zm1[b]);
        free(zm2[b]);
    }
    free(zm1);
    free(zm2);
    braid_comm_destroy(g_comm);
    mlp_free(&m);
    dataset_free(&train);
    dataset_free(&test);
    free(perm);
    free(xb);
    free(yb);
    free(t_step);
    free(t_bwd);
    free(t_fin);
    free(loss_hist);
    free(acc_hist);
    return 0;
}
