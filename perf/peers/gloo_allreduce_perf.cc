/* gloo_allreduce_perf: the all_reduce_perf loop (perf/bench.c) on Gloo's TCP ring all-reduce
 * (gloo::allreduce with AllreduceOptions::Algorithm::RING), so braid and Gloo can be compared
 * with the same flags, output columns and --csv rows.
 *
 *   build/bin/braid-run -n 4 build/bin/gloo_allreduce_perf -b 8 -e 64M -f 4 --csv gloo.csv
 *   mpirun -np 4 build/bin/gloo_allreduce_perf ...       (OMPI_COMM_WORLD_RANK/SIZE)
 *
 * Ranks come from BRAID_RANK/BRAID_NRANKS, else OMPI_COMM_WORLD_RANK/SIZE, else PMI_RANK/SIZE,
 * else one rank. Rendezvous is a gloo::rendezvous::FileStore in a directory every rank of the
 * job derives alike: $GLOO_STORE_DIR, else /tmp/gloo_perf.<job> with <job> from BRAID_SECRET
 * (unique per braid-run job), PMIX_NAMESPACE (mpirun) or the parent pid; rank 0 removes it at
 * the end. The TCP device binds $GLOO_HOSTNAME (default 127.0.0.1: loopback), or the interface
 * $GLOO_IFACE when that is set.
 *
 * Types: int8 uint8 int32 uint32 int64 uint64 float double; ops sum prod min max (gloo::sum etc.
 * as the reduce function); half/bfloat16/avg are skipped with a note. Out of place passes input
 * and output buffers, in place only the output (Gloo then reduces in the output). gloo::allreduce
 * blocks, so -m > 1 runs the calls one after the other (there is no non-blocking all-reduce).
 * The harness's own scalar reductions, barrier and all-gather also run on Gloo. Every call gets
 * the next tag (all ranks make the same calls in the same order). Built by
 * perf/peers/gloo_build.sh; braid.h is included for its enums only, nothing links braid. */
/* common.h has no extern "C" guard of its own (braid.h does). */
extern "C" {
#include "../common.h"
}

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/config.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <exception>
#include <memory>
#include <string>

namespace
{

struct gloo_ctx_t {
    std::shared_ptr<gloo::Context> ctx;
    uint32_t tag = 0;
};

gloo_ctx_t *G(perf_backend_t *b)
{
    return static_cast<gloo_ctx_t *>(b->ctx);
}

int gloo_fail(perf_backend_t *b, const char *call, const char *what)
{
    fprintf(stderr, "rank %d: %s failed: %s\n", b->rank, call, what);
    return -1;
}

using Func = gloo::AllreduceOptions::Func;

template <typename T> Func func_for(int op)
{
    switch (op) {
    case BRAID_SUM:
        return Func(
            static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::sum<T>));
    case BRAID_PROD:
        return Func(
            static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::product<T>));
    case BRAID_MIN:
        return Func(
            static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::min<T>));
    case BRAID_MAX:
        return Func(
            static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::max<T>));
    default:
        return Func();
    }
}

template <typename T>
void allreduce_typed(gloo_ctx_t *c, const void *send, void *recv, size_t count, int op)
{
    gloo::AllreduceOptions opts(c->ctx);
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    if (send != recv) opts.setInput(const_cast<T *>(static_cast<const T *>(send)), count);
    opts.setOutput(static_cast<T *>(recv), count);
    opts.setReduceFunction(func_for<T>(op));
    opts.setTag(c->tag++);
    gloo::allreduce(opts);
}

/* Returns 0 when dtype is not handled. */
int dispatch(gloo_ctx_t *c, const void *send, void *recv, size_t count, int dtype, int op)
{
    switch (dtype) {
    case BRAID_INT8:
        allreduce_typed<int8_t>(c, send, recv, count, op);
        return 1;
    case BRAID_UINT8:
        allreduce_typed<uint8_t>(c, send, recv, count, op);
        return 1;
    case BRAID_INT32:
        allreduce_typed<int32_t>(c, send, recv, count, op);
        return 1;
    case BRAID_UINT32:
        allreduce_typed<uint32_t>(c, send, recv, count, op);
        return 1;
    case BRAID_INT64:
        allreduce_typed<int64_t>(c, send, recv, count, op);
        return 1;
    case BRAID_UINT64:
        allreduce_typed<uint64_t>(c, send, recv, count, op);
        return 1;
    case BRAID_FLOAT32:
        allreduce_typed<float>(c, send, recv, count, op);
        return 1;
    case BRAID_FLOAT64:
        allreduce_typed<double>(c, send, recv, count, op);
        return 1;
    default:
        return 0;
    }
}

int g_start(perf_backend_t *b, const perf_coll_t *coll, const void *send, void *recv, size_t count,
            int dtype, int op, int root, int nonblocking)
{
    (void)coll;
    (void)root;
    (void)nonblocking; /* gloo::allreduce blocks */
    if (count == 0) return 0;
    try {
        if (!dispatch(G(b), send, recv, count, dtype, op))
            return gloo_fail(b, "gloo::allreduce", "unsupported dtype");
    } catch (const std::exception &e) {
        return gloo_fail(b, "gloo::allreduce", e.what());
    }
    return 0;
}

int g_complete(perf_backend_t *b)
{
    (void)b;
    return 0;
}

int g_barrier(perf_backend_t *b)
{
    try {
        gloo::BarrierOptions opts(G(b)->ctx);
        opts.setTag(G(b)->tag++);
        gloo::barrier(opts);
    } catch (const std::exception &e) {
        return gloo_fail(b, "gloo::barrier", e.what());
    }
    return 0;
}

int g_allreduce_f64(perf_backend_t *b, double *v, int op)
{
    try {
        allreduce_typed<double>(G(b), v, v, 1, op);
    } catch (const std::exception &e) {
        return gloo_fail(b, "gloo::allreduce(double)", e.what());
    }
    return 0;
}

int g_allreduce_i64(perf_backend_t *b, int64_t *v)
{
    try {
        allreduce_typed<int64_t>(G(b), v, v, 1, BRAID_SUM);
    } catch (const std::exception &e) {
        return gloo_fail(b, "gloo::allreduce(int64)", e.what());
    }
    return 0;
}

int g_allgather_bytes(perf_backend_t *b, const void *mine, void *all, size_t len)
{
    try {
        gloo::AllgatherOptions opts(G(b)->ctx);
        opts.setInput(const_cast<char *>(static_cast<const char *>(mine)), len);
        opts.setOutput(static_cast<char *>(all), len * (size_t)b->nranks);
        opts.setTag(G(b)->tag++);
        gloo::allgather(opts);
    } catch (const std::exception &e) {
        return gloo_fail(b, "gloo::allgather", e.what());
    }
    return 0;
}

int g_supports(perf_backend_t *b, const perf_coll_t *coll, int dtype, int op)
{
    (void)b;
    if (coll->kind != PERF_ALLREDUCE) return 0;
    if (op != BRAID_SUM && op != BRAID_PROD && op != BRAID_MIN && op != BRAID_MAX) return 0;
    switch (dtype) {
    case BRAID_INT8:
    case BRAID_UINT8:
    case BRAID_INT32:
    case BRAID_UINT32:
    case BRAID_INT64:
    case BRAID_UINT64:
    case BRAID_FLOAT32:
    case BRAID_FLOAT64:
        return 1;
    default:
        return 0;
    }
}

int env_int(const char *a, const char *b, const char *c, int dflt)
{
    const char *names[] = {a, b, c};
    for (const char *n : names) {
        const char *v = n ? getenv(n) : NULL;
        if (v && *v) return atoi(v);
    }
    return dflt;
}

std::string store_dir()
{
    const char *d = getenv("GLOO_STORE_DIR");
    if (d && *d) return d;
    std::string job;
    if (const char *s = getenv("BRAID_SECRET"))
        job = std::string("braid-") + s;
    else if (const char *s2 = getenv("PMIX_NAMESPACE"))
        job = std::string("pmix-") + s2;
    else if (const char *s3 = getenv("OMPI_MCA_ess_base_jobid"))
        job = std::string("ompi-") + s3;
    else
        job = "ppid-" + std::to_string((long)getppid());
    for (char &ch : job)
        if (ch == '/' || ch == ' ') ch = '_';
    return "/tmp/gloo_perf." + std::to_string((long)getuid()) + "." + job;
}

void remove_dir(const std::string &dir)
{
    std::string cmd = "rm -rf '" + dir + "'"; /* the FileStore leaves one file per key */
    if (system(cmd.c_str()) != 0)
        fprintf(stderr, "gloo_allreduce_perf: could not remove %s\n", dir.c_str());
}

} // namespace

int main(int argc, char **argv)
{
    perf_opts_t opts;
    setlinebuf(stdout);
    int prc = perf_parse_args(argc, argv, &perf_coll_allreduce, &opts);
    if (prc) return prc > 0 ? 0 : 2;

    int rank = env_int("BRAID_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", 0);
    int nranks = env_int("BRAID_NRANKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", 1);
    if (nranks < 1 || rank < 0 || rank >= nranks) {
        fprintf(stderr, "gloo_allreduce_perf: bad rank %d of %d\n", rank, nranks);
        return 2;
    }

    gloo_ctx_t gctx;
    std::string dir = store_dir();
    try {
        if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
            perror(dir.c_str());
            return 2;
        }
        gloo::transport::tcp::attr attr;
        const char *iface = getenv("GLOO_IFACE");
        const char *host = getenv("GLOO_HOSTNAME");
        if (iface && *iface)
            attr.iface = iface;
        else
            attr.hostname = host && *host ? host : "127.0.0.1";
        auto dev = gloo::transport::tcp::CreateDevice(attr);
        gloo::rendezvous::FileStore store(dir);
        auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, nranks);
        ctx->setTimeout(std::chrono::seconds(120));
        ctx->connectFullMesh(store, dev);
        gctx.ctx = ctx;
    } catch (const std::exception &e) {
        fprintf(stderr, "rank %d: gloo rendezvous in %s failed: %s\n", rank, dir.c_str(), e.what());
        return 2;
    }

    perf_backend_t b = {};
    b.name = "gloo";
    b.rank = rank;
    b.nranks = nranks;
    b.ctx = &gctx;
    b.start = g_start;
    b.complete = g_complete;
    b.barrier = g_barrier;
    b.allreduce_f64 = g_allreduce_f64;
    b.allreduce_i64 = g_allreduce_i64;
    b.allgather_bytes = g_allgather_bytes;
    b.supports = g_supports;
    char desc[160];
    snprintf(desc, sizeof(desc), "Gloo %d.%d.%d TCP (gloo::allreduce, ring)", GLOO_VERSION_MAJOR,
             GLOO_VERSION_MINOR, GLOO_VERSION_PATCH);
    b.device_desc = desc;

    int rc = perf_bench_run(&b, &perf_coll_allreduce, &opts);
    /* Every rank is past rendezvous once the final barrier returns: rank 0 cleans up. */
    if (g_barrier(&b) == 0 && rank == 0) remove_dir(dir);
    gctx.ctx.reset();
    return rc;
}
