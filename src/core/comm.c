/* Communicator lifecycle: unique id, init (bootstrap, peer discovery, ring connections),
 * destroy, abort and the sticky asynchronous error (the registry of live communicators and the
 * entry guard are in registry.c). */
#include "core/comm.h"
#include "algos/algo.h"
#include "algos/direct.h"
#include "algos/plan.h"
#include "core/config.h"
#include "core/copy.h"
#include "core/log.h"
#include "core/timeline.h"
#include "core/p2p.h"
#include "core/redop.h"
#include "core/settings.h"
#include "core/split.h"
#include "core/worker.h"
#include "core/yield.h"
#include "cuda/cuda.h"
#include "topo/topo.h"
#include "transport/rdma.h"
#include "transport/shm_direct.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

const char *braid_coll_name(int coll)
{
    switch (coll) {
    case BRAID_COLL_ALLREDUCE:
        return "allreduce";
    case BRAID_COLL_BROADCAST:
        return "broadcast";
    case BRAID_COLL_REDUCE:
        return "reduce";
    case BRAID_COLL_REDUCE_SCATTER:
        return "reduce_scatter";
    case BRAID_COLL_ALLGATHER:
        return "allgather";
    case BRAID_COLL_BARRIER:
        return "barrier";
    case BRAID_COLL_SEND:
        return "send";
    case BRAID_COLL_RECV:
        return "recv";
    case BRAID_COLL_ALLTOALL:
        return "alltoall";
    case BRAID_COLL_ALLTOALLV:
        return "alltoallv";
    case BRAID_COLL_GATHER:
        return "gather";
    case BRAID_COLL_SCATTER:
        return "scatter";
    case BRAID_COLL_ALLGATHERV:
        return "allgatherv";
    case BRAID_COLL_REDUCE_SCATTERV:
        return "reduce_scatterv";
    case BRAID_COLL_COMM_SPLIT:
        return "comm_split";
    case BRAID_COLL_GROUP:
        return "group";
    }
    return "unknown collective";
}

int braid_version(void)
{
    return BRAID_VERSION_CODE;
}

/* ---- errors ----------------------------------------------------------------------------- */
braid_result_t braid_comm_set_error(struct braid_comm *comm, braid_result_t res, const char *fmt,
                                    ...)
{
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&comm->err_lock);
    if (!atomic_load(&comm->error)) {
        braid_str_fit(comm->errmsg, sizeof(comm->errmsg), msg);
        atomic_store(&comm->error, res);
        braid_warn(COLL, "rank %d: %s (%s)", comm->rank, msg, braid_strerror(res));
    }
    pthread_mutex_unlock(&comm->err_lock);
    return braid_set_error(res, "%s", msg);
}

void braid_comm_fail_peers(struct braid_comm *comm, braid_result_t code, const char *why)
{
    for (int c = 0; c < comm->nchannels; c++) {
        braid_ring_t *r = &comm->ring[c];
        if (r->send) r->send->ops->fail(r->send, code, why);
        if (r->recv) r->recv->ops->fail(r->recv, code, why);
    }
    for (int p = 0; comm->p2p_send && p < comm->nranks; p++) {
        if (comm->p2p_send[p]) comm->p2p_send[p]->ops->fail(comm->p2p_send[p], code, why);
        if (comm->p2p_recv[p]) comm->p2p_recv[p]->ops->fail(comm->p2p_recv[p], code, why);
    }
    braid_p2p_fail_peers(comm, code, why);
    braid_direct_fail(comm, code, why);
}

void braid_comm_fail_call(struct braid_comm *comm, braid_result_t res)
{
    char why[1024];
    snprintf(why, sizeof(why), "rank %d: %s", comm->rank, braid_last_error());
    braid_comm_set_error(comm, res, "%s", braid_last_error());
    braid_comm_fail_peers(comm, res, why);
}

braid_result_t braid_comm_get_error(braid_comm_t comm, braid_result_t *err_p, const char **msg_p)
{
    BRAID_CHECK(braid_comm_enter(comm));
    braid_result_t res = BRAID_SUCCESS;
    if (!err_p) {
        res = braid_set_error(BRAID_ERR_INVALID_ARG, "err_p is NULL");
    } else {
        /* The message lives in comm (valid until braid_comm_destroy); it is set once. */
        *err_p = atomic_load(&comm->error);
        if (msg_p) *msg_p = *err_p ? comm->errmsg : "";
    }
    braid_comm_leave(comm);
    return res;
}

static braid_result_t get_int(braid_comm_t comm, const int *field, int *out_p, const char *name)
{
    BRAID_CHECK(braid_comm_enter(comm));
    braid_result_t res = BRAID_SUCCESS;
    if (!out_p)
        res = braid_set_error(BRAID_ERR_INVALID_ARG, "%s is NULL", name);
    else
        *out_p = *field; /* set at init, never written again */
    braid_comm_leave(comm);
    return res;
}

braid_result_t braid_comm_rank(braid_comm_t comm, int *rank_p)
{
    return get_int(comm, comm ? &comm->rank : NULL, rank_p, "rank_p");
}

braid_result_t braid_comm_size(braid_comm_t comm, int *size_p)
{
    return get_int(comm, comm ? &comm->nranks : NULL, size_p, "size_p");
}

static void set_timeout_tree(struct braid_comm *comm, double timeout_s)
{
    comm->timeout_s = timeout_s;
    braid_algo_state_t *st = comm->algo_state;
    if (st && st->intra) set_timeout_tree(st->intra, timeout_s);
    if (st && st->inter) set_timeout_tree(st->inter, timeout_s);
}

static braid_result_t set_timeout(braid_comm_t comm, double timeout_s)
{
    if (!(timeout_s > 0) || !isfinite(timeout_s))
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "comm_set_timeout: timeout_s %g is not a positive finite number",
                               timeout_s);
    if (timeout_s > BRAID_TIMEOUT_MAX_S) timeout_s = BRAID_TIMEOUT_MAX_S;
    pthread_mutex_lock(&comm->q_lock);
    int pending = comm->q_pending;
    if (!pending) set_timeout_tree(comm, timeout_s);
    pthread_mutex_unlock(&comm->q_lock);
    if (pending)
        return braid_set_error(BRAID_ERR_INVALID_USAGE,
                               "comm_set_timeout: %d non-blocking operation(s) pending on comm",
                               pending);
    return BRAID_SUCCESS;
}

braid_result_t braid_comm_set_timeout(braid_comm_t comm, double timeout_s)
{
    BRAID_CHECK(braid_comm_enter(comm)); /* a destroy from another thread waits for us */
    braid_result_t res = set_timeout(comm, timeout_s);
    braid_comm_leave(comm);
    return res;
}

braid_result_t braid_comm_get_timeout(braid_comm_t comm, double *timeout_s_p)
{
    BRAID_CHECK(braid_comm_enter(comm));
    braid_result_t res = BRAID_SUCCESS;
    if (!timeout_s_p)
        res = braid_set_error(BRAID_ERR_INVALID_ARG, "timeout_s_p is NULL");
    else
        *timeout_s_p = comm->timeout_s;
    braid_comm_leave(comm);
    return res;
}

/* ---- host identity ---------------------------------------------------------------------- */
/* 0, or errno when the process is out of file descriptors (the id would be wrong). */
static int read_boot_id(char *boot, size_t len)
{
    boot[0] = '\0';
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f) return errno == EMFILE || errno == ENFILE ? errno : 0;
    if (!fgets(boot, (int)len, f)) boot[0] = '\0';
    fclose(f);
    boot[strcspn(boot, "\n")] = '\0';
    return 0;
}

int braid_host_id(char out[BRAID_HOST_ID_BYTES])
{
    const char *forced = braid_param_str("HOSTNAME");
    if (*forced) {
        snprintf(out, BRAID_HOST_ID_BYTES, "%s", forced);
        return 0;
    }
    char host[64] = "", boot[40], ns[40] = "";
    gethostname(host, sizeof(host) - 1);
    int err = read_boot_id(boot, sizeof(boot));
    /* Network namespaces act as hosts in tests (and containers are hosts in practice). */
    ssize_t n = readlink("/proc/self/ns/net", ns, sizeof(ns) - 1);
    ns[n > 0 ? n : 0] = '\0';
    /* So do PID namespaces: shared memory's failure checks (pidfd, kill), /proc/<pid>/fd and
     * process_vm_readv name peers by pid, which means nothing in another PID namespace (two
     * containers of one pod share the hostname and network namespace, not the pids). */
    unsigned long long pidns = braid_pidns_id();
    snprintf(out, BRAID_HOST_ID_BYTES, "%.20s|%.8s|%.16s|%llu", host, boot, ns, pidns);
    return err;
}

unsigned long long braid_pidns_id(void)
{
    struct stat st; /* the number in "pid:[4026531836]" */
    return stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long long)st.st_ino : 0;
}

int braid_machine_id(char out[BRAID_HOST_ID_BYTES])
{
    char boot[40];
    int err = read_boot_id(boot, sizeof(boot));
    if (boot[0]) {
        snprintf(out, BRAID_HOST_ID_BYTES, "boot:%s", boot);
        return 0;
    }
    int h = braid_host_id(out);
    return h ? h : err;
}

/* ---- init --------------------------------------------------------------------------------- */
static int count_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* The settings a hier sub-communicator takes from its parent (braid_settings_parent). */
static void inherit_tuning(struct braid_comm *c, const struct braid_comm *p)
{
    c->timeout_s = p->timeout_s; /* braid_comm_set_timeout's value too */
    c->nchannels = p->nchannels;
    c->chunk_bytes = p->chunk_bytes;
    c->nslots = p->nslots;
    c->transport = p->transport;
    /* BRAID_ALGO=hier means the parent: the stages run what their own models pick */
    c->algo = p->algo == BRAID_ALGO_HIER ? BRAID_ALGO_AUTO : p->algo;
}

static braid_result_t read_shared(struct braid_comm *c)
{
    int64_t v;
    BRAID_CHECK(braid_param_double("TIMEOUT", &c->timeout_s));
    if (!(c->timeout_s > 0) || c->timeout_s > BRAID_TIMEOUT_MAX_S)
        c->timeout_s = BRAID_TIMEOUT_MAX_S;
    BRAID_CHECK(braid_param_int("NCHANNELS", &v));
    c->nchannels = v ? (int)v : 1;
    if (c->nchannels > BRAID_MAX_CHANNELS)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "BRAID_NCHANNELS=%lld exceeds %d",
                               (long long)v, BRAID_MAX_CHANNELS);
    BRAID_CHECK(braid_param_int("CHUNK_SIZE", &v));
    c->chunk_bytes = v ? (size_t)v : (size_t)128 << 10;
    if (c->chunk_bytes < 64 || c->chunk_bytes > ((size_t)64 << 20))
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "BRAID_CHUNK_SIZE=%zu is outside [64 B, 64 MiB]", c->chunk_bytes);
    c->chunk_bytes &= ~(size_t)63; /* a multiple of every element size and of a cache line */
    BRAID_CHECK(braid_param_int("NSLOTS", &v));
    c->nslots = (int)v;
    if (c->nslots < 2 || c->nslots > 64)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "BRAID_NSLOTS=%d is outside [2, 64]",
                               c->nslots);
    BRAID_CHECK(braid_algo_parse(braid_param_str("ALGO"), &c->algo));
    const char *t = braid_param_str("TRANSPORT");
    if (!*t)
        c->transport = NULL;
    else if (!strcasecmp(t, "shm"))
        c->transport = &braid_transport_shm;
    else if (!strcasecmp(t, "tcp"))
        c->transport = braid_transport_by_name("tcp");
    else if (!strcasecmp(t, "rdma"))
        c->transport = braid_transport_by_name("rdma");
    else
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "BRAID_TRANSPORT='%s' is not one of: shm, tcp, rdma", t);
    if (*t && !c->transport)
        return braid_set_error(BRAID_ERR_UNSUPPORTED, "BRAID_TRANSPORT=%s is not built in", t);
    return BRAID_SUCCESS;
}

static braid_result_t read_tuning(struct braid_comm *c)
{
    int64_t v;
    const struct braid_comm *parent = braid_settings_parent();
    if (parent)
        inherit_tuning(c, parent);
    else
        BRAID_CHECK(read_shared(c));
    BRAID_CHECK(braid_param_int("SPIN_US", &v));
    c->spin_us = (int)v;
    BRAID_CHECK(braid_param_int("YIELD_US", &v));
    c->yield_us = (int)v;
    BRAID_CHECK(braid_param_int("WORKER_RT", &v));
    if (v < 0 || v > 99)
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "BRAID_WORKER_RT=%lld is outside [0, 99] (a SCHED_FIFO priority; "
                               "0 = the normal scheduler)",
                               (long long)v);
    c->worker_rt = (int)v;
    BRAID_CHECK(braid_param_int("WORKER_SLICE_US", &v));
    if (v != 0 && (v < 100 || v > 100000))
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "BRAID_WORKER_SLICE_US=%lld is outside [100, 100000] (the "
                               "scheduler's limits; 0 = the kernel's default slice)",
                               (long long)v);
    c->worker_slice_us = (int)v;
    BRAID_CHECK(braid_param_int("YIELD_SLOW_US", &v));
    if (v < 0)
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "BRAID_YIELD_SLOW_US=%lld is negative (0 turns the hold-off off)",
                               (long long)v);
    c->yield_slow_ns = (uint64_t)v * 1000ull;
    BRAID_CHECK(braid_param_switch("P2P_NT_SLOTS", &c->p2p_nt_slots));
    return BRAID_SUCCESS;
}

/* The transport for the connection between this rank and peer. */
braid_result_t braid_comm_pick_transport(struct braid_comm *c, int peer,
                                         const braid_transport_t **t_p)
{
    if (c->transport) {
        if (c->transport == &braid_transport_shm &&
            strcmp(c->peers[peer].host, c->peers[c->rank].host))
            return braid_set_error(BRAID_ERR_INVALID_ARG,
                                   "BRAID_TRANSPORT=shm but rank %d is on another host", peer);
        *t_p = c->transport;
        return BRAID_SUCCESS;
    }
    if (!strcmp(c->peers[peer].host, c->peers[c->rank].host)) {
        *t_p = &braid_transport_shm;
        return BRAID_SUCCESS;
    }
    *t_p = braid_rdma_usable() ? braid_transport_by_name("rdma") : NULL;
    if (!*t_p) *t_p = braid_transport_by_name("tcp");
    if (!*t_p)
        return braid_set_error(BRAID_ERR_UNSUPPORTED,
                               "rank %d is on another host and no network transport is built in",
                               peer);
    return BRAID_SUCCESS;
}

/* Where this rank runs (published in its peer info) and where braid's own threads will run:
 * the rank's cpuset now, at init (taskset, numactl, mpirun --bind-to set it), or the NUMA
 * nodes it touches, or wherever the thread that starts them runs. */
static braid_result_t read_placement(struct braid_comm *c, braid_topo_place_t *place)
{
    cpu_set_t cpus;
    if (sched_getaffinity(0, sizeof(cpus), &cpus))
        return braid_set_error(BRAID_ERR_SYSTEM, "sched_getaffinity: %m");
    const char *mode = braid_param_str("THREAD_AFFINITY");
    const char *what;
    if (!strcasecmp(mode, "rank")) {
        c->pin_threads = 1;
        c->thread_cpus = cpus;
        what = "the rank's cpus";
    } else if (!strcasecmp(mode, "numa")) {
        braid_topo_hw_t *hw = malloc(sizeof(*hw));
        if (!hw) return braid_set_error(BRAID_ERR_NOMEM, "out of memory for the topology");
        braid_topo_discover(hw);
        braid_topo_numa_cpus(hw, &cpus, &c->thread_cpus);
        free(hw);
        c->pin_threads = 1;
        what = "the NUMA node(s) of the rank's cpus";
    } else if (!strcasecmp(mode, "none")) {
        c->pin_threads = 0;
        what = "not pinned";
    } else {
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "BRAID_THREAD_AFFINITY='%s' is not one of: rank, numa, none", mode);
    }
    BRAID_CHECK(braid_topo_place(&cpus, place));
    char mine[256], theirs[256];
    braid_topo_cpulist(&cpus, mine, sizeof(mine));
    braid_topo_cpulist(&c->thread_cpus, theirs, sizeof(theirs));
    braid_info(INIT, "rank %d runs on cpus %s, NUMA node %d%s; braid threads: %s%s%s", c->rank,
               mine, place->numa, place->numa_forced ? " (BRAID_NUMA_ID)" : "", what,
               c->pin_threads ? ", cpus " : "", c->pin_threads ? theirs : "");
    return BRAID_SUCCESS;
}

int braid_thread_create_quiet(pthread_t *t, void *(*fn)(void *), void *arg)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(t, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/* BRAID_WORKER_SLICE_US: a short time slice for the calling thread under the normal
 * scheduler (EEVDF, Linux 6.12 and later: sched_setattr's sched_runtime for SCHED_OTHER). A
 * thread with a shorter slice gets an earlier deadline and may preempt a running thread of a
 * longer one when it wakes, instead of waiting out the runner's protected slice (1.4 ms here);
 * it gets no more cpu time than before, so unlike SCHED_FIFO it needs no privilege and
 * cannot starve anything. 2 hosts x 2 ranks on 2 cpus, batch 4096: hidden 47% on average of 5
 * rounds against 42% with the default slice (perf/RESULTS.md, session 15). Older kernels
 * ignore the field or refuse it: a debug line then, and the thread runs as before. The nice
 * value is passed on unchanged (sched_setattr sets it too). */
static void set_slice(struct braid_comm *comm, const char *what)
{
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, (id_t)gettid());
    if (nice == -1 && errno) nice = 0;
    braid_sched_attr_t attr = {.size = sizeof(attr),
                               .policy = SCHED_OTHER,
                               .nice = nice,
                               .runtime = (uint64_t)comm->worker_slice_us * 1000u};
    if (syscall(SYS_sched_setattr, 0, &attr, 0) != 0)
        braid_debug(INIT, "BRAID_WORKER_SLICE_US=%d: the %s thread keeps the default slice: %s",
                    comm->worker_slice_us, what, strerror(errno));
    else if (!strcmp(what, "worker"))
        atomic_store(&comm->worker_slice_on, 1);
}

void braid_comm_thread_start(struct braid_comm *comm, const char *what)
{
    char name[16];
    snprintf(name, sizeof(name), "braid-%s", what);
    braid_log_set_rank(comm->rank);
    int rc = braid_topo_pin_self(name, comm->pin_threads ? &comm->thread_cpus : NULL);
    if (rc) braid_warn(INIT, "cannot pin the %s thread: %s", what, strerror(rc));
    int progress = !strcmp(what, "worker") || !strcmp(what, "tcp");
    if (progress && comm->worker_rt <= 0 && comm->worker_slice_us > 0) set_slice(comm, what);
    if (comm->worker_rt > 0 && progress) {
        /* With compute threads on every cpu, a worker of normal priority woken by its data
         * waited for a time slice at each step of a bucket's all-reduce (2 hosts x 2 ranks on
         * 2 cpus: a 0.25 MiB bucket took 9 ms instead of 2 during a long GEMM), and so did the
         * tcp progress thread that finishes queued sends. A real-time thread must not yield
         * (that would go to real-time threads only): its waits sleep. */
        struct sched_param sp = {.sched_priority = comm->worker_rt};
        rc = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
        if (rc)
            braid_warn(INIT, "BRAID_WORKER_RT=%d: cannot make the %s thread SCHED_FIFO: %s",
                       comm->worker_rt, what, strerror(rc));
        else {
            braid_yield_self()->no_yield = 1;
            if (!strcmp(what, "worker")) atomic_store(&comm->worker_rt_on, 1);
        }
    }
}

static void comm_free(struct braid_comm *c)
{
    braid_comm_reg_cleanup(c);
    free(c->fuse_buf);
    free(c->pc_scratch);
    braid_redop_comm_free(c);
    braid_algo_comm_free(c);
    braid_cuda_comm_free(c);
    braid_dev_shadows_free(c);
    braid_direct_log_picks(c);
    braid_direct_free(c);
    braid_comm_close_conns(c);
    braid_transport_comm_cleanup(c);
    int joined = c->boot != NULL;
    if (c->boot) braid_boot_close(c->boot);
    /* The root service must deliver its last replies before this process may exit (no wait
     * if this rank never joined: then it has nothing to deliver for us). Keep the caller's
     * error message. */
    if (c->root) {
        char saved[512];
        snprintf(saved, sizeof(saved), "%s", braid_last_error());
        if (braid_boot_root_wait(c->root, joined ? 5.0 : 0.0) != BRAID_SUCCESS && joined)
            braid_warn(BOOT, "bootstrap root service did not settle within 5 s");
        braid_restore_error(saved);
    }
    free(c->peers);
    free(c->ring_order);
    pthread_mutex_destroy(&c->err_lock);
    pthread_mutex_destroy(&c->q_lock);
    pthread_cond_destroy(&c->q_cond);
    c->magic = 0;
}

/* The direct shared-memory segments (transport/shm_direct.h) of BRAID_DIRECT_BLOCK bytes per
 * slot; 0 = none. Every rank must agree (a rank without them would run other algorithms).
 * auto: 1 MiB. Each block costs two synchronisations of every rank, and with more ranks the
 * slices shrink (block / n) while a synchronisation costs more (n - 1 lines; with more ranks
 * than cpus, context switches): 1 MiB blocks took 0.59-0.96 of the time of 256 KiB ones at
 * n = 3, 4 and 8 from 1 MiB to 256 MiB (session 11). At n = 2 they took 0.95-1.07 then, and
 * 0.89-0.98 from 1 MiB once the next block was staged during the gather (session 18), but for
 * the all-reduce, reduce and reduce-scatter only: the all-gather and broadcast of 2 ranks
 * keep 256 KiB blocks in the slot (braid_direct_copy_block; perf/RESULTS.md). With more ranks
 * on the machine than cpus, 4 MiB blocks took 0.82-0.92 of the 1 MiB time at 3 and 4 ranks on
 * 2 cpus in session 18, but since the reductions take up to four sources per pass (session
 * 23) 1 MiB blocks are as fast or faster there too: 0.80-0.90 of the 4 MiB time for the
 * all-reduce of 4 ranks at 4 MiB, 0.63-0.68 for the reduce-scatter, 0.69-0.83 for the reduce,
 * 0.97-1.03 at 8 ranks, 0.83-0.88 for 2 ranks on one cpu (session 27). */
static braid_result_t setup_direct(struct braid_comm *c)
{
    int64_t v;
    BRAID_CHECK(braid_param_int("NT_MIN", &v));
    if (v < 0)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "BRAID_NT_MIN=%lld is negative",
                               (long long)v);
    c->direct_nt_min = (size_t)v;
    BRAID_CHECK(braid_param_int("DIRECT_PIPELINE", &v));
    c->direct_pipeline = v != 0;
    /* auto: streaming stores on AMD with no more ranks than cpus (0.45-0.64x the time at 2
     * ranks from 256 KiB in sessions 13 and 22); elsewhere on x86-64 the direct collectives
     * measure both kinds (algos/direct_pick.c), starting from plain ones: with more ranks than
     * cpus, peers share a cpu's caches, and plain stores won in sessions 13 and 15 (4 ranks on
     * 2 cpus, 1-16 MiB, 1.24-1.40x the time with streaming ones) where streaming ones won in
     * session 22 (0.67-0.87x); Intel was not measured. Everything else that follows the
     * setting (point-to-point's local copies) takes the first kind. */
    BRAID_CHECK(braid_param_switch("DIRECT_NT_SLOTS", &c->direct_nt_slots));
    if (c->direct_nt_slots == 2) {
        c->direct_nt_slots = braid_copy_shared_nt_default() && !c->oversubscribed;
#if defined(__x86_64__)
        c->direct_nt_pick = !c->direct_nt_slots;
#endif
    }
    /* c->direct_block: read and agreed on by braid_settings_agree */
    return c->direct_block ? braid_direct_setup(c, c->direct_block) : BRAID_SUCCESS;
}

static braid_result_t comm_init(braid_comm_t *comm_p, int nranks, const braid_boot_addr_t *root,
                                int rank, braid_boot_root_t *hosted_root)
{
    braid_result_t res;
    struct braid_comm *c = calloc(1, sizeof(*c));
    if (!c) {
        if (hosted_root) braid_boot_root_wait(hosted_root, 0.1);
        return braid_set_error(BRAID_ERR_NOMEM, "out of memory for a communicator");
    }
    c->root = hosted_root;
    c->magic = BRAID_COMM_MAGIC;
    c->tl_index = c->tl_algo = -1;
    c->rank = rank;
    c->boot_addr = *root;
    c->nranks = nranks;
    pthread_mutex_init(&c->err_lock, NULL);
    pthread_mutex_init(&c->q_lock, NULL);
    pthread_condattr_t ca; /* the worker's timed waits (worker.c) count on CLOCK_MONOTONIC */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->q_cond, &ca);
    pthread_condattr_destroy(&ca);
    braid_log_set_rank(rank);
    c->cuda_dev = -1;
    BRAID_CHECK_GOTO(braid_config_check_transport(), res, fail);
    BRAID_CHECK_GOTO(read_tuning(c), res, fail);
    BRAID_CHECK_GOTO(braid_cuda_comm_init(c), res, fail);
    /* a hier sub-communicator in the making ends with its parent's abort (nothing can abort
     * it yet; its parent aborts it once it exists, and outlives it) */
    const struct braid_comm *parent = braid_settings_parent();
    BRAID_CHECK_GOTO(
        braid_boot_init(&c->boot, root, rank, nranks, c->timeout_s,
                        (const volatile int *)(parent ? &parent->aborted : &c->aborted)),
        res, fail);
    BRAID_CHECK_GOTO(braid_settings_agree(c), res, fail);
    braid_peer_info_t me;
    memset(&me, 0, sizeof(me));
    BRAID_CHECK_GOTO(read_placement(c, &me.place), res, fail);
    const char *inherited = braid_split_parent_host();
    int id_err = 0;
    if (inherited)
        snprintf(me.host, sizeof(me.host), "%s", inherited);
    else
        id_err = braid_host_id(me.host);
    int m_err = braid_machine_id(me.machine);
    if (m_err) id_err = m_err;
    if (id_err) {
        res = braid_set_error(BRAID_ERR_SYSTEM,
                              "rank %d: reading the host identity "
                              "(/proc/sys/kernel/random/boot_id) failed: %s%s",
                              rank, strerror(id_err), braid_errno_hint(id_err));
        goto fail;
    }
    if (sched_getaffinity(0, sizeof(me.cpus), &me.cpus) != 0) CPU_ZERO(&me.cpus);
    braid_topo_addrs_collect(&me.addrs);
    me.pid = (int32_t)getpid();
    me.rank = rank;
    me.cuda_dev = c->cuda_dev;
    c->peers = calloc((size_t)nranks, sizeof(*c->peers));
    if (!c->peers) {
        res = braid_set_error(BRAID_ERR_NOMEM, "out of memory for %d peers", nranks);
        goto fail;
    }
    BRAID_CHECK_GOTO(braid_boot_allgather(c->boot, &me, c->peers, sizeof(me)), res, fail);
    for (int i = 0; i < nranks; i++) {
        c->local_nranks += !strcmp(c->peers[i].host, me.host);
        c->machine_nranks += !strcmp(c->peers[i].machine, me.machine);
    }
    if (c->machine_nranks < c->local_nranks) c->machine_nranks = c->local_nranks;
    c->ncpus = CPU_COUNT(&me.cpus) > 0 ? CPU_COUNT(&me.cpus) : count_cpus();
    /* ranks of other hosts on this machine (namespaces, containers) compete for its cpus too:
     * the machine's ranks against the cpus they are bound to, together */
    cpu_set_t all_cpus;
    CPU_ZERO(&all_cpus);
    for (int i = 0; i < nranks; i++)
        if (!strcmp(c->peers[i].machine, me.machine))
            CPU_OR(&all_cpus, &all_cpus, &c->peers[i].cpus);
    c->machine_ncpus = CPU_COUNT(&all_cpus) > c->ncpus ? CPU_COUNT(&all_cpus) : c->ncpus;
    c->oversubscribed = c->machine_nranks > c->machine_ncpus;
    if (c->spin_us == 0) c->spin_us = c->oversubscribed ? 1 : 5;
    BRAID_CHECK_GOTO(braid_group_fuse_init(c), res, fail);
    BRAID_CHECK_GOTO(braid_comm_order_ring(c), res, fail);
    BRAID_CHECK_GOTO(braid_comm_connect_rings(c), res, fail);
    BRAID_CHECK_GOTO(braid_comm_connect_latency(c), res, fail);
    BRAID_CHECK_GOTO(braid_p2p_connect(c), res, fail);
    BRAID_CHECK_GOTO(setup_direct(c), res, fail);
    BRAID_CHECK_GOTO(braid_algo_comm_init(c), res, fail);
    BRAID_CHECK_GOTO(braid_boot_barrier(c->boot), res, fail);
    BRAID_CHECK_GOTO(braid_comm_registry_add(c), res, fail);
    braid_timeline_comm_init(c);
    braid_info(INIT,
               "rank %d/%d ready: %d local ranks (%d on this machine, bound to %d cpus) on %d "
               "cpus, %d channel(s), chunk %zu B, %d slots, spin %d us",
               rank, nranks, c->local_nranks, c->machine_nranks, c->machine_ncpus, c->ncpus,
               c->nchannels, c->chunk_bytes, c->nslots, c->spin_us);
    *comm_p = c;
    return BRAID_SUCCESS;
fail:
    if (c->boot) braid_boot_report_error(c->boot, braid_last_error());
    comm_free(c);
    free(c);
    return res;
}

braid_result_t braid_comm_init_rank(braid_comm_t *comm_p, int nranks, braid_unique_id_t id,
                                    int rank)
{
    braid_clear_error();
    if (!comm_p) return braid_set_error(BRAID_ERR_INVALID_ARG, "comm_p is NULL");
    if (nranks < 1)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "nranks=%d must be at least 1", nranks);
    if (rank < 0 || rank >= nranks)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "rank=%d is outside [0, nranks=%d)", rank,
                               nranks);
    braid_boot_addr_t root;
    BRAID_CHECK(braid_boot_id_decode(&id, &root));
    braid_boot_root_t *hosted_root = braid_hosted_take(root.secret);
    if (root.rank0_hosts && rank == 0 && !hosted_root) {
        /* An id from braid_unique_id_from_root: nobody listens yet; rank 0 opens the root, on
         * every address (the others may have resolved its name to another one). */
        double timeout;
        BRAID_CHECK(braid_param_double("TIMEOUT", &timeout));
        braid_boot_addr_t listen = root;
        BRAID_CHECK(braid_boot_root_start_every(&listen, timeout, &hosted_root));
    }
    return comm_init(comm_p, nranks, &root, rank, hosted_root);
}

braid_result_t braid_comm_init_env(braid_comm_t *comm_p)
{
    braid_clear_error();
    if (!comm_p) return braid_set_error(BRAID_ERR_INVALID_ARG, "comm_p is NULL");
    int rank, nranks, is_root;
    braid_boot_addr_t root;
    BRAID_CHECK(braid_boot_env_resolve(&rank, &nranks, &root, &is_root));
    braid_boot_root_t *hosted_root = NULL;
    if (is_root) {
        double timeout;
        BRAID_CHECK(braid_param_double("TIMEOUT", &timeout));
        braid_boot_addr_t listen = root; /* on every address, as above */
        BRAID_CHECK(braid_boot_root_start_every(&listen, timeout, &hosted_root));
    }
    return comm_init(comm_p, nranks, &root, rank, hosted_root);
}

static void abort_calls(struct braid_comm *comm, const char *why)
{
    atomic_store(&comm->aborted, 1);
    braid_comm_fail_peers(comm, BRAID_ERR_ABORTED, why);
    braid_algo_comm_abort(comm);
    braid_worker_wake(comm);
}

braid_result_t braid_comm_abort(braid_comm_t comm)
{
    BRAID_CHECK(braid_comm_enter(comm));
    abort_calls(comm, "communicator aborted by braid_comm_abort");
    braid_comm_leave(comm);
    return BRAID_SUCCESS;
}

/* Destroy from another thread acts like abort for the calls in flight (they return
 * BRAID_ERR_ABORTED saying the communicator was destroyed), waits until they left, then
 * frees. Requests still queued complete with that error and stay valid until waited on. */
braid_result_t braid_comm_destroy(braid_comm_t comm)
{
    if (!comm) return braid_set_error(BRAID_ERR_INVALID_ARG, "comm is NULL");
    /* A traced job's owner communicator gathers the timeline first (while it still works). */
    if (braid_comm_check(comm) == BRAID_SUCCESS) braid_timeline_comm_destroy(comm);
    if (!braid_comm_registry_remove(comm)) return braid_comm_check(comm);
    atomic_store(&comm->destroying, 1);
    if (atomic_load(&comm->inflight) > 0 || braid_worker_pending(comm)) {
        char why[160];
        snprintf(why, sizeof(why), "rank %d destroyed the communicator during a call", comm->rank);
        abort_calls(comm, why);
        while (atomic_load(&comm->inflight) > 0)
            usleep(100);
    }
    braid_worker_stop(comm);
    comm_free(comm);
    /* The quarantine keeps the memory, not the contents: a buffer comm_free missed is then
     * unreachable, a leak LeakSanitizer reports (the tests check every rank after destroy). */
    memset(comm, 0, sizeof(*comm));
    braid_comm_registry_retire(comm);
    return BRAID_SUCCESS;
}
