/* The table of BRAID_* variables and their parsers. */
#include "core/config.h"
#include "core/settings.h"
#include "core/bootstrap.h"
#include "core/log.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const braid_param_t params[] = {
    {"DEBUG", "WARN", BRAID_PARAM_STR, "log level: NONE, WARN, INFO, DEBUG, TRACE"},
    {"DEBUG_SUBSYS", "ALL", BRAID_PARAM_STR,
     "comma list of INIT,BOOT,SHM,NET,COLL,TUNING,ENV (^ excludes)"},
    {"DEBUG_FILE", "", BRAID_PARAM_STR, "log to this file instead of stderr (%h host, %p pid)"},
    {"TIMEOUT", "300", BRAID_PARAM_DOUBLE,
     "seconds a blocking wait on a live but silent peer may last before BRAID_ERR_TIMEOUT; 0 = "
     "no timeout (wait forever; braid_comm_abort still ends every wait); at most 1e9 (about 32 "
     "years: 0 and longer values are taken as 1e9)"},
    {"TRANSPORT", "", BRAID_PARAM_STR,
     "force a transport: shm, tcp, rdma (default: shm within a host, else rdma when a verbs "
     "device is up, else tcp)"},
    {"ALGO", "", BRAID_PARAM_STR,
     "force an algorithm: ring, hier, recdbl, tree, direct (default: the cost model chooses; "
     "under hier the stages within and between hosts still choose theirs)"},
    {"TUNING_FILE", "", BRAID_PARAM_STR,
     "cost-model constants (braid-info --tune --measure writes them), read by rank 0 at init"},
    {"TUNE_MEASURE", "0", BRAID_PARAM_INT,
     "1..20: measure the cost model's links at init (tens of ms times the value, which "
     "scales the calls per median; rank 0's setting and numbers count)"},
    {"NCHANNELS", "0", BRAID_PARAM_INT, "channels (independent rings); 0 = automatic"},
    {"CHUNK_SIZE", "0", BRAID_PARAM_SIZE, "bytes per pipelined chunk (slot size); 0 = automatic"},
    {"DIRECT_BLOCK", "auto", BRAID_PARAM_SIZE,
     "bytes per block of the direct (single-copy) shared-memory collectives on one host: "
     "each rank maps every local rank's segment of two such slots; auto = 1 MiB; the "
     "all-gather and broadcast of 2 ranks use 256 KiB of it; 0 = off (the ring only)"},
    {"NT_MIN", "16777216", BRAID_PARAM_SIZE,
     "output bytes from which the direct shared-memory collectives write their output with "
     "non-temporal (streaming) stores, x86-64; 0 = never"},
    {"DIRECT_NT_SLOTS", "auto", BRAID_PARAM_STR,
     "streaming (non-temporal) stores for the direct shared-memory collectives' copies of 4 KiB "
     "or more into their slots (and the own block of all-to-all, gather, scatter and "
     "all-gatherv from 2 MiB), x86-64: auto = on for AMD CPUs with no more ranks on the machine "
     "than cpus, else off, and the direct collectives measure both kinds; 1 = on, 0 = off"},
    {"DIRECT_PIPELINE", "1", BRAID_PARAM_INT,
     "1 = the direct shared-memory all-reduce copies in its next block while it waits for the "
     "peers' reduced slices of the current one; 0 = one block after the other"},
    {"TRACE", "", BRAID_PARAM_STR,
     "write a Chrome trace (Perfetto JSON) of every call and step on every rank to this file, "
     "merged by rank 0 at braid_comm_destroy; off when empty"},
    {"GROUP_FUSE_BYTES", "64K", BRAID_PARAM_SIZE,
     "consecutive all-reduces (or reduce-scatters: one dtype and op; all-gathers; broadcasts: "
     "one root; reduces: one root, dtype and op, not avg; these two where no rank has a CUDA "
     "device) of a group whose largest buffers add up to at "
     "most this many bytes, each at most a quarter of it, run as one call of their buffers "
     "packed together; set alike on every rank; 0 = each call on its own"},
    {"NSLOTS", "8", BRAID_PARAM_INT,
     "staging slots per connection (chunks in flight; a power of two, 2-64)"},
    {"SPIN_US", "0", BRAID_PARAM_INT,
     "microseconds to spin before sleeping in a wait; 0 = automatic (short when oversubscribed)"},
    {"YIELD_US", "2000", BRAID_PARAM_INT,
     "after spinning, microseconds to call sched_yield() before sleeping in a wait"},
    {"YIELD_SLOW_US", "250", BRAID_PARAM_INT,
     "two sched_yield() in a row in waits that return after more than this (a CPU-bound thread "
     "held the core for its time slice) make the thread's waits sleep without yielding for 1 ms, "
     "doubling while it recurs (until a second passes without), up to 1 s; a process's main "
     "thread always yields; 0 = always yield for BRAID_YIELD_US"},
    {"P2P_CMA", "auto", BRAID_PARAM_STR,
     "single-copy send/recv within a host (process_vm_readv): auto = where a probe at init "
     "reads the peer's memory, each message of at least BRAID_P2P_CMA_MIN bytes by the path "
     "both ends' measured copy times favour (single copy or the slots), 1 = single copy for "
     "every such message where the probe passed, and a failed probe is a warning, 0 = never"},
    {"P2P_NT_SLOTS", "auto", BRAID_PARAM_STR,
     "stores into the shared-memory send slots of send/recv: auto = per peer, the kind "
     "(streaming or plain) of the lower sender + receiver copy time, each measured in runs of "
     "copies of 16 KiB or more (the receiver reports its own), the other kind tried for 16 "
     "copies in every 1024; 1 = streaming, 0 = plain"},
    {"P2P_CMA_MIN", "4M", BRAID_PARAM_SIZE,
     "send/recv messages of at least this many bytes go by single copy where it is on"},
    {"P2P_CMA_HELP", "auto", BRAID_PARAM_STR,
     "a single-copy sender that waits for its receiver also copies pieces of the message into "
     "the receiver's buffer (process_vm_writev), so whichever end has a cpu does the work: auto "
     "= with more ranks on the machine than cpus (where it was measured faster), 1 = on, 0 = "
     "off (the receiver copies alone)"},
    {"P2P_CMA_PIECE", "0", BRAID_PARAM_SIZE,
     "bytes per process_vm_readv / process_vm_writev of a single-copy message (each end checks "
     "for an abort and moves its other operations between them; 4 KiB or more); 0 = 2 MiB where "
     "senders help (BRAID_P2P_CMA_HELP), else 16 MiB"},
    {"P2P_CMA_PROBE_FAIL", "0", BRAID_PARAM_INT,
     "test hook: 1 = this rank's CMA probes fail (as if its peers' memory were unreadable)"},
    {"SOCKET_IFNAME", "", BRAID_PARAM_STR,
     "network interfaces for bootstrap and TCP (NCCL grammar: prefixes, ^ excludes, = exact)"},
    {"NSOCKS_PERPEER", "1", BRAID_PARAM_INT, "TCP sockets per peer and channel (1, 2, 4 or 8)"},
    {"P2P_TCP_CHUNK_SIZE", "0", BRAID_PARAM_SIZE,
     "bytes per message of send/recv and all-to-all over TCP (their connections' slots); "
     "0 = automatic (512 KiB up to 8 ranks, else BRAID_CHUNK_SIZE's; never below it)"},
    {"P2P_TCP_NSOCKS", "0", BRAID_PARAM_INT,
     "TCP sockets per peer of the send/recv and all-to-all connections (1, 2, 4 or 8); 0 = "
     "BRAID_NSOCKS_PERPEER's"},
    {"IB_HCA", "", BRAID_PARAM_STR,
     "RDMA devices and ports (NCCL grammar: mlx5_0:1, prefixes, ^ excludes, = exact); unset: "
     "one on the rank's NUMA node"},
    {"IB_GID_INDEX", "-1", BRAID_PARAM_INT,
     "RoCE GID index for RDMA; -1 = automatic (a RoCE v2 IPv4 GID first)"},
    {"IB_QPS_PER_CONN", "1", BRAID_PARAM_INT,
     "RDMA queue pairs per connection (1, 2, 4 or 8); messages are striped over them in "
     "order"},
    {"HOSTNAME", "", BRAID_PARAM_STR,
     "override the host identity used to group ranks by host (default: the hostname, boot "
     "id, network and PID namespaces: ranks in other namespaces are other hosts)"},
    {"NUMA_ID", "", BRAID_PARAM_STR,
     "override the NUMA node this rank publishes for ring ordering (tests); default: from its "
     "cpu binding"},
    {"NIC_NUMA", "", BRAID_PARAM_STR,
     "test hook: NICs as name:numa_node,... instead of the discovered ones (veth stands in "
     "for a NIC)"},
    {"THREAD_AFFINITY", "rank", BRAID_PARAM_STR,
     "cpus of braid's threads (tcp progress, non-blocking worker): rank = the rank's cpus at "
     "init, numa = their NUMA nodes, none = inherited"},
    {"WORKER_RT", "0", BRAID_PARAM_INT,
     "SCHED_FIFO priority (1-99) for braid's worker thread (non-blocking calls, the DDP layer's "
     "buckets) and TCP progress thread: they then run as soon as their data arrives, ahead of "
     "compute threads, and their waits sleep instead of yielding; needs CAP_SYS_NICE or "
     "RLIMIT_RTPRIO (else a warning); 0 = the normal scheduler"},
    {"WORKER_SLICE_US", "100", BRAID_PARAM_INT,
     "time slice in microseconds (100-100000) that braid's worker and TCP progress threads ask "
     "of the normal scheduler (Linux 6.12+ EEVDF; older kernels ignore it): woken by their "
     "data they preempt a compute thread sooner, with no more cpu time and no privilege; "
     "0 = the kernel's default slice; not used with BRAID_WORKER_RT"},
    {"RANK", "", BRAID_PARAM_INT, "this process's rank (braid_comm_init_env)"},
    {"NRANKS", "", BRAID_PARAM_INT, "number of ranks (braid_comm_init_env)"},
    {"ROOT", "", BRAID_PARAM_STR, "bootstrap root as host:port (braid_comm_init_env)"},
    {"SECRET", "", BRAID_PARAM_STR, "job secret, 32 hex digits (set by braid-run)"},
    {"LOCAL_RANK", "", BRAID_PARAM_INT,
     "rank within the host (set by braid-run; spreads ranks over NICs)"},
    {"REDUCE_ISA", "auto", BRAID_PARAM_STR,
     "CPU reduction kernels: auto, avx512, avx2, generic (for testing)"},
    {"CUDA", "1", BRAID_PARAM_STR,
     "0: never touch CUDA (every buffer is host memory); 1: use a CUDA device if present"},
    {"DEV_ENGINE", "auto", BRAID_PARAM_STR,
     "device buffers: auto (the device engine when every rank has a GPU on one host, else "
     "staged through host memory), device (the device engine or an error), stage"},
    {"DEV_NCHANNELS", "4", BRAID_PARAM_INT, "device engine: channels (rings over disjoint slices)"},
    {"DEV_BLOCKS", "2", BRAID_PARAM_INT, "device engine: thread blocks per channel"},
    {"DEV_CHUNK_SIZE", "524288", BRAID_PARAM_SIZE,
     "device engine: bytes per slot (one block's part of a chunk; a multiple of 16)"},
    {"DEV_NSLOTS", "8", BRAID_PARAM_INT, "device engine: slots per FIFO (chunks in flight)"},
    {"DEV_THREADS", "512", BRAID_PARAM_INT,
     "device engine: threads per block (a multiple of 32 from 32 to 512; another value: the "
     "engine is unavailable, calls are staged)"},
    {"DEV_SPINS", "16384", BRAID_PARAM_INT,
     "device engine: polls of a flag before a kernel returns to the host loop, which relaunches "
     "it (processes time-sliced on one GPU progress)"},
    {NULL, NULL, 0, NULL},
};

const braid_param_t *braid_param_table(void)
{
    return params;
}

static const braid_param_t *find(const char *name)
{
    for (const braid_param_t *p = params; p->name; p++)
        if (!strcmp(p->name, name)) return p;
    return NULL;
}

const char *braid_param_str(const char *name)
{
    char var[96];
    snprintf(var, sizeof(var), "BRAID_%s", name);
    const char *v = getenv(var);
    if (v) return v;
    const braid_param_t *p = find(name);
    return p ? p->defval : "";
}

int braid_param_is_auto(const char *name)
{
    return !strcasecmp(braid_param_str(name), "auto");
}

braid_result_t braid_param_switch(const char *name, int *val_p)
{
    const char *s = braid_param_str(name);
    if (braid_param_is_auto(name))
        *val_p = 2;
    else if (!strcmp(s, "0") || !strcmp(s, "1"))
        *val_p = s[0] == '1';
    else
        return braid_set_error(BRAID_ERR_INVALID_ARG, "BRAID_%s=%s: expected 0, 1 or auto", name,
                               s);
    return BRAID_SUCCESS;
}

braid_result_t braid_param_int(const char *name, int64_t *val_p)
{
    const braid_param_t *p = find(name);
    const char *s = braid_param_str(name);
    if (!*s) {
        *val_p = 0;
        return BRAID_SUCCESS;
    }
    errno = 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 0);
    if (errno || end == s) goto bad;
    if (p && p->type == BRAID_PARAM_SIZE) {
        long long mul = 1;
        if (*end == 'k' || *end == 'K')
            mul = 1LL << 10;
        else if (*end == 'm' || *end == 'M')
            mul = 1LL << 20;
        else if (*end == 'g' || *end == 'G')
            mul = 1LL << 30;
        if (mul != 1) end++;
        if (*end == 'B' || *end == 'b') end++;
        v *= mul;
    }
    if (*end != '\0' || v < 0) goto bad;
    *val_p = v;
    return BRAID_SUCCESS;
bad:
    return braid_set_error(BRAID_ERR_INVALID_ARG, "BRAID_%s='%s' is not a valid %s", name, s,
                           p && p->type == BRAID_PARAM_SIZE ? "size" : "non-negative integer");
}

braid_result_t braid_param_double(const char *name, double *val_p)
{
    const char *s = braid_param_str(name);
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !(v >= 0))
        return braid_set_error(BRAID_ERR_INVALID_ARG, "BRAID_%s='%s' is not a valid number", name,
                               s);
    *val_p = v;
    return BRAID_SUCCESS;
}

/* ---- validation and the environment lint --------------------------------------------------- */

/* What a valid value is, beyond its type: the accepted words of a string (any case; empty is
 * the default) or the range of an integer. */
static const struct {
    const char *name, *choices;
    int64_t lo, hi;
    int pow2; /* 0 or a power of two: the transports map a uint32 frame counter onto slots,
               * sockets and QPs by its remainder (and a socket's or QP's next frame by adding
               * their number), which agree across the counter's wrap at 2^32 only for
               * powers of two */
} checks[] = {
    {"DEBUG", "NONE,WARN,INFO,DEBUG,TRACE", 0, 0, 0},
    {"TRANSPORT", "shm,tcp,rdma", 0, 0, 0},
    {"ALGO", "auto,ring,hier,recdbl,tree,direct", 0, 0, 0},
    {"THREAD_AFFINITY", "rank,numa,none", 0, 0, 0},
    {"REDUCE_ISA", "auto,avx512,avx2,generic", 0, 0, 0},
    {"TUNE_MEASURE", NULL, 0, 20, 0},
    {"NSLOTS", NULL, 2, 64, 1},
    {"NSOCKS_PERPEER", NULL, 1, 8, 1},
    {"WORKER_RT", NULL, 0, 99, 0},
    {"WORKER_SLICE_US", NULL, 0, 100000, 0},
    {"P2P_TCP_NSOCKS", NULL, 0, 8, 1},
    {"P2P_CMA_PIECE", NULL, 0, INT64_MAX, 0},
    {"P2P_CMA_HELP", "auto,0,1", 0, 0, 0},
    {"IB_GID_INDEX", NULL, -1, 255, 0},
    {"IB_QPS_PER_CONN", NULL, 1, 8, 1},
    {"DEV_ENGINE", "auto,device,stage", 0, 0, 0},
    {"DEV_NCHANNELS", NULL, 1, 16, 0},
    {"DEV_BLOCKS", NULL, 1, 8, 0},
    {"DEV_NSLOTS", NULL, 1, 64, 0},
    {"DEV_THREADS", NULL, 32, 512, 0},
    {"DEV_SPINS", NULL, 1, 1 << 30, 0},
};

/* Edit distance of a and b, case-insensitive, '_' ignored (CHUNKSIZE ~ CHUNK_SIZE). */
static int distance(const char *a, const char *b)
{
    char x[64], y[64];
    size_t m = 0, n = 0;
    for (; *a && m < sizeof(x) - 1; a++)
        if (*a != '_') x[m++] = (char)toupper((unsigned char)*a);
    for (; *b && n < sizeof(y) - 1; b++)
        if (*b != '_') y[n++] = (char)toupper((unsigned char)*b);
    int d[64][64];
    for (size_t i = 0; i <= m; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= n; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= m; i++)
        for (size_t j = 1; j <= n; j++) {
            int best = d[i - 1][j - 1] + (x[i - 1] != y[j - 1]);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && x[i - 1] == y[j - 2] && x[i - 2] == y[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1; /* transposition */
            d[i][j] = best;
        }
    return d[m][n];
}

const char *braid_did_you_mean(const char *word, const char *words, char *buf, size_t len)
{
    int best = 1 << 30;
    char cand[64];
    const char *p = words;
    buf[0] = '\0';
    while (*p) {
        size_t k = strcspn(p, ",");
        snprintf(cand, sizeof(cand), "%.*s", (int)k, p);
        int d = distance(word, cand);
        if (d < best) {
            best = d;
            snprintf(buf, len, "%s", cand);
        }
        p += k + (p[k] == ',');
    }
    size_t wl = strlen(word);
    int limit = wl <= 3 ? 1 : wl <= 8 ? 2 : 3;
    return buf[0] && best <= limit ? buf : NULL;
}

static int in_choices(const char *v, const char *choices)
{
    size_t vl = strlen(v);
    for (const char *p = choices; *p;) {
        size_t k = strcspn(p, ",");
        if (k == vl && !strncasecmp(p, v, k)) return 1;
        p += k + (p[k] == ',');
    }
    return 0;
}

int braid_param_valid(const braid_param_t *p, char *why, size_t len)
{
    char saved[512], hint[64];
    const char *choices = NULL;
    int64_t lo = 0, hi = 0;
    int pow2 = 0;
    for (size_t i = 0; i < sizeof(checks) / sizeof(checks[0]); i++)
        if (!strcmp(checks[i].name, p->name)) {
            choices = checks[i].choices;
            lo = checks[i].lo;
            hi = checks[i].hi;
            pow2 = checks[i].pow2;
        }
    const char *v = braid_param_str(p->name);
    snprintf(saved, sizeof(saved), "%s", braid_last_error()); /* keep the caller's error */
    why[0] = '\0';
    int ok = 1;
    if (!strcmp(p->name, "SECRET") && *v) {
        size_t n = strlen(v);
        ok = n == 2 * BRAID_SECRET_BYTES && strspn(v, "0123456789abcdefABCDEF") == n;
        if (!ok) snprintf(why, len, "not %d hex digits", 2 * BRAID_SECRET_BYTES);
    } else if (p->type == BRAID_PARAM_STR && choices && *v && !in_choices(v, choices)) {
        const char *dym = braid_did_you_mean(v, choices, hint, sizeof(hint));
        snprintf(why, len, "not one of %s%s%s%s", choices, dym ? "; did you mean " : "",
                 dym ? dym : "", dym ? "?" : "");
        ok = 0;
    } else if (p->type == BRAID_PARAM_INT && lo < hi && *v) {
        errno = 0;
        char *end = NULL;
        long long x = strtoll(v, &end, 0);
        ok = !errno && end != v && *end == '\0' && x >= lo && x <= hi && (!pow2 || !(x & (x - 1)));
        if (!ok)
            snprintf(why, len, "not %s in [%lld, %lld]",
                     !pow2 ? "an integer"
                     : lo  ? "a power of two"
                           : "0 or a power of two",
                     (long long)lo, (long long)hi);
    } else if ((p->type == BRAID_PARAM_INT || p->type == BRAID_PARAM_SIZE) &&
               !(braid_param_is_auto(p->name) && !strcmp(p->defval, "auto"))) {
        int64_t x;
        ok = braid_param_int(p->name, &x) == BRAID_SUCCESS;
        if (!ok)
            snprintf(why, len, "not a %s",
                     p->type == BRAID_PARAM_SIZE ? "size (e.g. 4M)" : "non-negative integer");
    } else if (p->type == BRAID_PARAM_DOUBLE) {
        double x;
        ok = braid_param_double(p->name, &x) == BRAID_SUCCESS;
        if (!ok) snprintf(why, len, "not a non-negative number");
    }
    braid_restore_error(saved);
    return ok;
}

/* BRAID_* variables that belong to the tools and layers on top of the library, or to tests. */
static const char *const foreign_prefixes[] = {
    "BRAID_TEST_",  "BRAID_BIN_DIR", "BRAID_LOCAL_SIZE", "BRAID_RUN_",  "BRAID_DDP_",
    "BRAID_TORCH_", "BRAID_NCCL_",   "BRAID_PERF_",      "BRAID_CUDA_", "BRAID_GPU_",
};

void braid_config_lint(void (*emit)(int level, int kind, const char *msg))
{
    extern char **environ;
    char names[2048] = "", msg[512], hint[64];
    for (const braid_param_t *p = params; p->name; p++) {
        size_t n = strlen(names);
        snprintf(names + n, sizeof(names) - n, "%s%s", n ? "," : "", p->name);
    }
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "BRAID_", 6) != 0) continue;
        const char *eq = strchr(*e, '=');
        char name[96];
        snprintf(name, sizeof(name), "%.*s", (int)(eq ? eq - *e : (long)strlen(*e)), *e);
        int foreign = 0;
        for (size_t i = 0; i < sizeof(foreign_prefixes) / sizeof(foreign_prefixes[0]); i++)
            foreign |= !strncmp(name, foreign_prefixes[i], strlen(foreign_prefixes[i]));
        if (foreign) continue;
        const braid_param_t *p = find(name + 6);
        if (p && !strcmp(p->name, "DEBUG")) continue; /* log.c reports it */
        if (p) {
            char why[256];
            if (!braid_param_valid(p, why, sizeof(why))) {
                /* A near-valid secret must not reach a shared log: masked, as --params does. */
                char shown[48];
                if (!strcmp(p->name, "SECRET"))
                    snprintf(shown, sizeof(shown), "(hidden, %zu characters)",
                             eq ? strlen(eq + 1) : 0);
                snprintf(msg, sizeof(msg), "%s='%s' is invalid: %s", name,
                         !strcmp(p->name, "SECRET") ? shown
                         : eq                       ? eq + 1
                                                    : "",
                         why);
                emit(1, BRAID_LINT_INVALID, msg);
            }
            continue;
        }
        const char *dym = braid_did_you_mean(name + 6, names, hint, sizeof(hint));
        if (dym) {
            snprintf(msg, sizeof(msg),
                     "%s is not a braid variable and has no effect; did you mean BRAID_%s?", name,
                     dym);
            emit(1, BRAID_LINT_UNKNOWN, msg);
        } else {
            snprintf(msg, sizeof(msg),
                     "%s is not a variable of the braid library (braid-info --params lists them)",
                     name);
            emit(2, BRAID_LINT_UNKNOWN, msg);
        }
    }
}

/* The parent of the sub-communicators this thread initializes (core/settings.h); here, not in
 * settings.c, so that what links config.c alone (the fuzzers) has it. */
static _Thread_local const struct braid_comm *inherit_from;

void braid_settings_inherit(const struct braid_comm *parent)
{
    inherit_from = parent;
}

const struct braid_comm *braid_settings_parent(void)
{
    return inherit_from;
}

braid_result_t braid_config_check_transport(void)
{
    char why[256];
    static const char *const socks[] = {"NSLOTS", "NSOCKS_PERPEER", "P2P_TCP_NSOCKS",
                                        "IB_QPS_PER_CONN"};
    for (size_t i = 0; i < sizeof(socks) / sizeof(socks[0]); i++) {
        const braid_param_t *p = find(socks[i]);
        /* a hier sub-communicator takes its parent's slots (core/settings.h) */
        if (i == 0 && braid_settings_parent()) continue;
        if (p && !braid_param_valid(p, why, sizeof(why)))
            return braid_set_error(BRAID_ERR_INVALID_ARG, "BRAID_%s='%s' is %s", socks[i],
                                   braid_param_str(socks[i]), why);
    }
    if (*braid_param_str("SOCKET_IFNAME")) {
        /* The same lookup TCP and the bootstrap make: it names the interfaces there are. */
        struct sockaddr_storage a;
        socklen_t alen;
        BRAID_CHECK(braid_boot_local_addr(&a, &alen));
    }
    return BRAID_SUCCESS;
}
