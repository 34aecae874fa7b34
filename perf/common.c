/* The braid backend of the perf tools and their shared main(). Public API only (braid.h).
 *
 * The communicator comes from braid_comm_init_env(): braid-run (BRAID_RANK/NRANKS/ROOT/SECRET),
 * Open MPI's mpirun (OMPI_COMM_WORLD_RANK/SIZE plus BRAID_ROOT or MASTER_ADDR/MASTER_PORT),
 * torchrun, PMI or Slurm variables, or BRAID_* set by hand. Started without any of these, a
 * tool runs as a single rank, like nccl-tests on one GPU. */
#include "common.h"
#include "device.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

typedef struct {
    braid_comm_t comm;     /* the collectives' (the group's with NCCL_TESTS_SPLIT) */
    braid_comm_t world;    /* barriers and the combined numbers; == comm without a split */
    braid_request_t *reqs; /* started with -m > 1, completed in order */
    int nreqs, cap;
    braid_reg_t regs[4]; /* -R */
    int nregs;
    void *tmp; /* sendrecv in place: a copy of the input */
    size_t tmp_bytes;
    int group, in_group; /* --group 1: the -m calls of an iteration inside one braid group */
} braid_ctx_t;

static int report(perf_backend_t *b, const char *call, braid_result_t res)
{
    char host[64] = "";
    gethostname(host, sizeof(host) - 1);
    char rank[16] = "?"; /* unknown until the communicator exists */
    if (b->rank >= 0) snprintf(rank, sizeof(rank), "%d", b->rank);
    fprintf(stderr, "%s:%d rank %s: %s failed: %s: %s\n", host, (int)getpid(), rank, call,
            braid_strerror(res), braid_last_error());
    return -1;
}

/* nccl-tests' sendrecv (send to rank+1, receive from rank-1 in one group; in place reads a
 * copy of the input, as sending and receiving one buffer at once is undefined) and hypercube
 * (an all-gather in log2(n) grouped exchanges with rank ^ mask of the blocks gathered so far;
 * n a power of two). */
static braid_result_t p2p_pattern(perf_backend_t *b, perf_coll_kind_t kind, const void *send,
                                  void *recv, size_t count, braid_datatype_t dt)
{
    braid_ctx_t *c = b->ctx;
    int n = b->nranks, rank = b->rank;
    size_t es = braid_dtype_size(dt), blk = count * es;
    braid_result_t res;
    if (kind == PERF_SENDRECV) {
        if (send == recv && blk) {
            if (c->tmp_bytes < blk) {
                void *t = realloc(c->tmp, blk);
                if (!t) return BRAID_ERR_NOMEM;
                c->tmp = t;
                c->tmp_bytes = blk;
            }
            memcpy(c->tmp, send, blk);
            send = c->tmp;
        }
        if ((res = braid_group_start()) != BRAID_SUCCESS) return res;
        braid_send(send, count, dt, (rank + 1) % n, c->comm);
        braid_recv(recv, count, dt, (rank + n - 1) % n, c->comm);
        return braid_group_end();
    }
    if (n & (n - 1)) return BRAID_ERR_UNSUPPORTED; /* bk_supports skips these */
    char *out = recv;
    if (send != out + (size_t)rank * blk && blk) memcpy(out + (size_t)rank * blk, send, blk);
    for (int mask = 1; mask < n; mask <<= 1) {
        int s = rank & ~(mask - 1), r = s ^ mask;
        if ((res = braid_group_start()) != BRAID_SUCCESS) return res;
        braid_send(out + (size_t)s * blk, (size_t)mask * count, dt, rank ^ mask, c->comm);
        braid_recv(out + (size_t)r * blk, (size_t)mask * count, dt, rank ^ mask, c->comm);
        if ((res = braid_group_end()) != BRAID_SUCCESS) return res;
    }
    return BRAID_SUCCESS;
}

static int bk_complete(perf_backend_t *b);

static int bk_start_call(perf_backend_t *b, const perf_coll_t *coll, const void *send, void *recv,
                         size_t count, int dtype, int op, int root, int nonblocking)
{
    braid_ctx_t *c = b->ctx;
    braid_datatype_t dt = (braid_datatype_t)dtype;
    braid_redop_t rop = (braid_redop_t)(op < 0 ? BRAID_SUM : op);
    braid_request_t req = NULL, *rp = nonblocking ? &req : NULL;
    braid_result_t res;
    const char *call;
    if (op == PERF_OP_MULSUM) { /* as nccl-tests: an op per call, destroyed once started */
        uint64_t s;
        perf_mulsum_scalar_bits(dtype, b->rank, &s);
        res = braid_redop_create_premulsum(&rop, &s, dt, c->comm);
        if (res != BRAID_SUCCESS) return report(b, "braid_redop_create_premulsum", res);
    }

    if (nonblocking && c->group && !c->in_group) { /* as nccl-tests' -m: one group */
        if ((res = braid_group_start()) != BRAID_SUCCESS)
            return report(b, "braid_group_start", res);
        c->in_group = 1;
    }
    if (nonblocking && c->nreqs == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        braid_request_t *r = realloc(c->reqs, (size_t)cap * sizeof(*r));
        if (!r) return report(b, "realloc", BRAID_ERR_NOMEM);
        c->reqs = r;
        c->cap = cap;
    }
    void *stream = perf_dev_stream();
    if (stream) {
        rp = NULL;
        switch (coll->kind) {
        case PERF_ALLREDUCE:
            call = "braid_allreduce_stream";
            res = braid_allreduce_stream(send, recv, count, dt, rop, c->comm, stream);
            break;
        case PERF_BROADCAST:
            call = "braid_broadcast_stream";
            res = braid_broadcast_stream(send, recv, count, dt, root, c->comm, stream);
            break;
        case PERF_REDUCE:
            call = "braid_reduce_stream";
            res = braid_reduce_stream(send, recv, count, dt, rop, root, c->comm, stream);
            break;
        case PERF_REDUCE_SCATTER:
            call = "braid_reduce_scatter_stream";
            res = braid_reduce_scatter_stream(send, recv, count, dt, rop, c->comm, stream);
            break;
        case PERF_ALLGATHER:
            call = "braid_allgather_stream";
            res = braid_allgather_stream(send, recv, count, dt, c->comm, stream);
            break;
        default: /* perf_parse_args refuses --device 2 for these */
            call = "--device 2 (braid has no stream-ordered form of this collective)";
            res = BRAID_ERR_UNSUPPORTED;
            break;
        }
        return res == BRAID_SUCCESS ? 0 : report(b, call, res);
    }
    switch (coll->kind) {
    case PERF_ALLREDUCE:
        call = rp ? "braid_iallreduce" : "braid_allreduce";
        res = rp ? braid_iallreduce(send, recv, count, dt, rop, c->comm, rp)
                 : braid_allreduce(send, recv, count, dt, rop, c->comm);
        break;
    case PERF_BROADCAST:
        call = rp ? "braid_ibroadcast" : "braid_broadcast";
        res = rp ? braid_ibroadcast(send, recv, count, dt, root, c->comm, rp)
                 : braid_broadcast(send, recv, count, dt, root, c->comm);
        break;
    case PERF_REDUCE:
        call = rp ? "braid_ireduce" : "braid_reduce";
        res = rp ? braid_ireduce(send, recv, count, dt, rop, root, c->comm, rp)
                 : braid_reduce(send, recv, count, dt, rop, root, c->comm);
        break;
    case PERF_REDUCE_SCATTER:
        call = rp ? "braid_ireduce_scatter" : "braid_reduce_scatter";
        res = rp ? braid_ireduce_scatter(send, recv, count, dt, rop, c->comm, rp)
                 : braid_reduce_scatter(send, recv, count, dt, rop, c->comm);
        break;
    case PERF_ALLGATHER:
        call = rp ? "braid_iallgather" : "braid_allgather";
        res = rp ? braid_iallgather(send, recv, count, dt, c->comm, rp)
                 : braid_allgather(send, recv, count, dt, c->comm);
        break;
    case PERF_ALLTOALL:
        call = rp ? "braid_ialltoall" : "braid_alltoall";
        res = rp ? braid_ialltoall(send, recv, count, dt, c->comm, rp)
                 : braid_alltoall(send, recv, count, dt, c->comm);
        break;
    case PERF_GATHER:
        call = rp ? "braid_igather" : "braid_gather";
        res = rp ? braid_igather(send, recv, count, dt, root, c->comm, rp)
                 : braid_gather(send, recv, count, dt, root, c->comm);
        break;
    case PERF_SCATTER:
        call = rp ? "braid_iscatter" : "braid_scatter";
        res = rp ? braid_iscatter(send, recv, count, dt, root, c->comm, rp)
                 : braid_scatter(send, recv, count, dt, root, c->comm);
        break;
    case PERF_SENDRECV:
    case PERF_HYPERCUBE:
        call = coll->kind == PERF_SENDRECV ? "sendrecv" : "hypercube";
        res = p2p_pattern(b, coll->kind, send, recv, count, dt);
        rp = NULL; /* complete: a group returns when done */
        break;
    default:
        return report(b, "start", BRAID_ERR_INTERNAL);
    }
    if (op == PERF_OP_MULSUM) {
        braid_result_t dres = braid_redop_destroy(rop, c->comm);
        if (res == BRAID_SUCCESS && dres != BRAID_SUCCESS)
            return report(b, "braid_redop_destroy", dres);
    }
    if (res != BRAID_SUCCESS) return report(b, call, res);
    if (rp) c->reqs[c->nreqs++] = req;
    return 0;
}

/* A failed start inside a --group group ends the group (its peers are told) and waits for
 * the calls started in it. */
static int bk_start(perf_backend_t *b, const perf_coll_t *coll, const void *send, void *recv,
                    size_t count, int dtype, int op, int root, int nonblocking)
{
    int rc = bk_start_call(b, coll, send, recv, count, dtype, op, root, nonblocking);
    if (rc && ((braid_ctx_t *)b->ctx)->in_group) bk_complete(b);
    return rc;
}

static int bk_complete(perf_backend_t *b)
{
    braid_ctx_t *c = b->ctx;
    int rc = 0;
    if (c->in_group) {
        c->in_group = 0;
        braid_result_t res = braid_group_end();
        if (res != BRAID_SUCCESS) rc = report(b, "braid_group_end", res);
    }
    for (int i = 0; i < c->nreqs; i++) {
        braid_result_t res = braid_wait(c->reqs[i]); /* frees the request, even on error */
        if (res != BRAID_SUCCESS && rc == 0) rc = report(b, "braid_wait", res);
    }
    c->nreqs = 0;
    if (perf_dev_stream()) {
        /* stream-ordered: done when the stream is; a failure is the comm's async error */
        if (perf_dev_sync()) return report(b, "cudaStreamSynchronize", BRAID_ERR_SYSTEM);
        braid_result_t err = BRAID_SUCCESS;
        const char *msg = NULL;
        braid_comm_get_error(c->comm, &err, &msg);
        if (err != BRAID_SUCCESS) {
            fprintf(stderr, "rank %d: stream-ordered collective failed: %s\n", b->rank, msg);
            return -1;
        }
    }
    return rc;
}

static int bk_barrier(perf_backend_t *b)
{
    braid_ctx_t *c = b->ctx;
    braid_result_t res = braid_barrier(c->world);
    return res == BRAID_SUCCESS ? 0 : report(b, "braid_barrier", res);
}

static int bk_allreduce_f64(perf_backend_t *b, double *v, int op)
{
    braid_ctx_t *c = b->ctx;
    braid_result_t res = braid_allreduce(v, v, 1, BRAID_FLOAT64, (braid_redop_t)op, c->world);
    return res == BRAID_SUCCESS ? 0 : report(b, "braid_allreduce(float64)", res);
}

static int bk_allreduce_i64(perf_backend_t *b, int64_t *v)
{
    braid_ctx_t *c = b->ctx;
    braid_result_t res = braid_allreduce(v, v, 1, BRAID_INT64, BRAID_SUM, c->world);
    return res == BRAID_SUCCESS ? 0 : report(b, "braid_allreduce(int64)", res);
}

static int bk_allgather_bytes(perf_backend_t *b, const void *mine, void *all, size_t len)
{
    braid_ctx_t *c = b->ctx;
    braid_result_t res = braid_allgather(mine, all, len, BRAID_UINT8, c->world);
    return res == BRAID_SUCCESS ? 0 : report(b, "braid_allgather", res);
}

static int bk_register(perf_backend_t *b, void *buf, size_t bytes)
{
    braid_ctx_t *c = b->ctx;
    if (c->nregs == (int)(sizeof(c->regs) / sizeof(c->regs[0])))
        return report(b, "braid_comm_register", BRAID_ERR_INTERNAL);
    braid_result_t res = braid_comm_register(c->comm, buf, bytes, &c->regs[c->nregs]);
    if (res != BRAID_SUCCESS) return report(b, "braid_comm_register", res);
    c->nregs++;
    return 0;
}

static void bk_deregister_all(perf_backend_t *b)
{
    braid_ctx_t *c = b->ctx;
    for (int i = 0; i < c->nregs; i++) {
        braid_result_t res = braid_comm_deregister(c->comm, c->regs[i]);
        if (res != BRAID_SUCCESS) report(b, "braid_comm_deregister", res);
    }
    c->nregs = 0;
}

static void *bk_host_alloc(perf_backend_t *b, size_t bytes)
{
    void *p = NULL;
    braid_result_t res = braid_mem_alloc(&p, bytes);
    if (res != BRAID_SUCCESS) {
        report(b, "braid_mem_alloc", res);
        return NULL;
    }
    return p;
}

static void bk_host_free(perf_backend_t *b, void *p)
{
    braid_result_t res = braid_mem_free(p);
    if (res != BRAID_SUCCESS) report(b, "braid_mem_free", res);
}

static int bk_supports(perf_backend_t *b, const perf_coll_t *coll, int dtype, int op)
{
    (void)dtype;
    (void)op;
    return coll->kind != PERF_HYPERCUBE || !(b->nranks & (b->nranks - 1));
}

/* "<cpu model> (braid 0.1.0, transport auto)" */
static void device_desc(char *buf, size_t len)
{
    char model[128] = "cpu", line[256];
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof(line), f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) != 0 || !colon) continue;
        colon++;
        while (*colon == ' ' || *colon == '\t')
            colon++;
        snprintf(model, sizeof(model), "%s", colon);
        model[strcspn(model, "\n")] = '\0';
        break;
    }
    if (f) fclose(f);
    int v = braid_version();
    const char *tr = getenv("BRAID_TRANSPORT");
    snprintf(buf, len, "%s (braid %d.%d.%d, transport %s)", model, v / 10000, v / 100 % 100,
             v % 100, tr && *tr ? tr : "auto");
}

/* Whether a launcher (or the user) set the variables braid_comm_init_env() reads. */
static int have_launcher_env(void)
{
    static const char *const vars[] = {"BRAID_RANK",  "BRAID_NRANKS",         "RANK",
                                       "WORLD_SIZE",  "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                       "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

/* nccl-tests' parseInt: leading blanks, then 0b binary or strtoul base 0; 0 if none. */
static int split_int(const char *s, long *v)
{
    while (*s == ' ' || *s == '\t')
        s++;
    char *end = NULL;
    unsigned long x = strncasecmp(s, "0b", 2) == 0 ? strtoul(s + 2, &end, 2) : strtoul(s, &end, 0);
    if (end == s || (s[0] == '0' && (s[1] == 'b' || s[1] == 'B') && end == s + 2)) return 0;
    while (*end == ' ' || *end == '\t')
        end++;
    if (*end != '\0' || x > INT32_MAX) return 0;
    *v = (long)x;
    return 1;
}

/* The color of world rank 'rank' under NCCL_TESTS_SPLIT_MASK (hex: rank & mask) or
 * NCCL_TESTS_SPLIT ("AND 0x4" "&4" "OR 1" "|1" "MOD 2" "%2" "DIV 4" "/4"); 0 without either.
 * -1 (after a message on rank 0) for a value nccl-tests would misread. */
static int split_color(int rank, int *color_p)
{
    const char *mask = getenv("NCCL_TESTS_SPLIT_MASK"), *spec = getenv("NCCL_TESTS_SPLIT");
    *color_p = 0;
    if (mask && *mask) {
        char *end = NULL;
        unsigned long m = strtoul(mask, &end, 16);
        if (end == mask || *end != '\0' || m > INT32_MAX) {
            if (rank == 0)
                fprintf(stderr, "NCCL_TESTS_SPLIT_MASK='%s' is not a hexadecimal mask\n", mask);
            return -1;
        }
        *color_p = rank & (int)m;
        return 0;
    }
    if (!spec || !*spec) return 0;
    static const struct {
        const char *word, *sym;
        char op;
    } ops[] = {{"AND", "&", '&'}, {"OR", "|", '|'}, {"MOD", "%", '%'}, {"DIV", "/", '/'}};
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        size_t wl = strlen(ops[i].word);
        const char *arg = strncasecmp(spec, ops[i].word, wl) == 0 ? spec + wl
                          : spec[0] == ops[i].sym[0]              ? spec + 1
                                                                  : NULL;
        long v;
        if (!arg) continue;
        if (!split_int(arg, &v) || ((ops[i].op == '%' || ops[i].op == '/') && v == 0)) break;
        *color_p = ops[i].op == '&'   ? (rank & (int)v)
                   : ops[i].op == '|' ? (rank | (int)v)
                   : ops[i].op == '%' ? rank % (int)v
                                      : rank / (int)v;
        return 0;
    }
    if (rank == 0)
        fprintf(stderr,
                "NCCL_TESTS_SPLIT='%s' is not understood: use AND n, OR n, MOD n or DIV n "
                "(or &n, |n, %%n, /n; n decimal, 0x hex or 0b binary, not 0 for MOD/DIV)\n",
                spec);
    return -1;
}

/* Splits the world by NCCL_TESTS_SPLIT(_MASK): ctx->comm becomes the rank's group. Groups
 * must be of one size (the rows of every group must be the same calls over the world). */
static int split_world(perf_backend_t *b, braid_ctx_t *ctx)
{
    int color;
    /* Every rank finds a bad value alike; rank 0 prints it before anybody exits (a barrier:
     * a launcher kills the job as soon as one rank exits non-zero). */
    if (split_color(b->world_rank, &color)) return braid_barrier(ctx->world), -1;
    if (!getenv("NCCL_TESTS_SPLIT_MASK") && !getenv("NCCL_TESTS_SPLIT")) return 0;
    braid_result_t res = braid_comm_split(ctx->world, color, b->world_rank, &ctx->comm);
    if (res != BRAID_SUCCESS) return report(b, "braid_comm_split", res);
    b->group = color;
    if ((res = braid_comm_rank(ctx->comm, &b->rank)) != BRAID_SUCCESS ||
        (res = braid_comm_size(ctx->comm, &b->nranks)) != BRAID_SUCCESS)
        return report(b, "braid_comm_rank/size", res);
    int64_t lo = b->nranks, hi = b->nranks;
    double v[2] = {(double)lo, (double)hi};
    if ((res = braid_allreduce(&v[0], &v[0], 1, BRAID_FLOAT64, BRAID_MIN, ctx->world)) ||
        (res = braid_allreduce(&v[1], &v[1], 1, BRAID_FLOAT64, BRAID_MAX, ctx->world)))
        return report(b, "braid_allreduce", res);
    if (v[0] != v[1]) {
        if (b->world_rank == 0)
            fprintf(stderr,
                    "NCCL_TESTS_SPLIT: the groups have %g to %g ranks; braid's perf tools need "
                    "groups of one size\n",
                    v[0], v[1]);
        braid_barrier(ctx->world);
        return -1;
    }
    return 0;
}

/* -T: nccl-tests aborts a call that takes longer; braid's BRAID_TIMEOUT bounds every wait the
 * same way. The variable, if set, wins (with a note when they differ). */
static void apply_timeout(const perf_opts_t *o)
{
    if (o->timeout <= 0) return;
    const char *env = getenv("BRAID_TIMEOUT");
    char v[32];
    snprintf(v, sizeof(v), "%g", o->timeout);
    if (env && *env) {
        if (strcmp(env, v) != 0)
            fprintf(stderr, "-T %s: BRAID_TIMEOUT=%s is set and wins\n", v, env);
        return;
    }
    setenv("BRAID_TIMEOUT", v, 1);
}

static long long rss_now(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
        fclose(f);
    }
    return (long long)resident * sysconf(_SC_PAGESIZE);
}

int perf_braid_main(int argc, char **argv, const perf_coll_t *coll)
{
    perf_opts_t opts;
    setlinebuf(stdout);
    int prc = perf_parse_args(argc, argv, coll, &opts);
    if (prc) return prc > 0 ? 0 : 2;
    apply_timeout(&opts);
    /* A communicator uses the device current at its init: pick it first. */
    if (opts.device) {
        const char *lr = getenv("BRAID_LOCAL_RANK");
        if (perf_dev_select(lr ? atoi(lr) : 0)) return 2;
    }

    braid_ctx_t ctx = {.group = opts.group};
    perf_backend_t b = {.name = "braid", .rank = -1, .ctx = &ctx};
    braid_result_t res;
    long long mem0 = rss_now();
    if (have_launcher_env()) {
        res = braid_comm_init_env(&ctx.world);
        if (res != BRAID_SUCCESS) return report(&b, "braid_comm_init_env", res), 2;
    } else {
        braid_unique_id_t id;
        res = braid_get_unique_id(&id);
        if (res != BRAID_SUCCESS) return report(&b, "braid_get_unique_id", res), 2;
        res = braid_comm_init_rank(&ctx.world, 1, id, 0);
        if (res != BRAID_SUCCESS) return report(&b, "braid_comm_init_rank", res), 2;
    }
    b.init_mem = rss_now() - mem0;
    ctx.comm = ctx.world;
    if ((res = braid_comm_rank(ctx.world, &b.rank)) != BRAID_SUCCESS ||
        (res = braid_comm_size(ctx.world, &b.nranks)) != BRAID_SUCCESS) {
        report(&b, "braid_comm_rank/size", res);
        braid_comm_destroy(ctx.world);
        return 2;
    }
    b.world_rank = b.rank;
    b.world_nranks = b.nranks;
    if (split_world(&b, &ctx)) {
        braid_comm_abort(ctx.world);
        if (ctx.comm && ctx.comm != ctx.world) braid_comm_destroy(ctx.comm);
        braid_comm_destroy(ctx.world);
        return 2;
    }

    char desc[256];
    device_desc(desc, sizeof(desc));
    b.device_desc = desc;
    b.version = braid_version();
    b.start = bk_start;
    b.complete = bk_complete;
    b.barrier = bk_barrier;
    b.allreduce_f64 = bk_allreduce_f64;
    b.allreduce_i64 = bk_allreduce_i64;
    b.allgather_bytes = bk_allgather_bytes;
    b.supports = bk_supports;
    b.register_buffer = bk_register;
    b.deregister_all = bk_deregister_all;
    b.host_alloc = bk_host_alloc;
    b.host_free = bk_host_free;
    b.dev_setup = perf_dev_setup;
    b.dev_alloc = perf_dev_alloc;
    b.dev_free = perf_dev_free;
    b.dev_copy = perf_dev_copy;

    int rc = perf_bench_run(&b, coll, &opts);
    if (rc == 2) { /* let the peers fail now rather than time out */
        braid_comm_abort(ctx.comm);
        if (ctx.world != ctx.comm) braid_comm_abort(ctx.world);
    }
    if (ctx.comm != ctx.world) braid_comm_destroy(ctx.comm);
    braid_comm_destroy(ctx.world);
    free(ctx.reqs);
    free(ctx.tmp);
    return rc;
}
