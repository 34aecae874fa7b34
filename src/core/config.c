/* The table of BRAID_* variables and their parsers. */
#include "core/config.h"
#include "core/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const braid_param_t params[] = {
    {"DEBUG", "WARN", BRAID_PARAM_STR, "log level: NONE, WARN, INFO, DEBUG, TRACE"},
    {"DEBUG_SUBSYS", "ALL", BRAID_PARAM_STR,
     "comma list of INIT,BOOT,SHM,NET,COLL,TUNING,ENV (^ excludes)"},
    {"DEBUG_FILE", "", BRAID_PARAM_STR, "log to this file instead of stderr (%h host, %p pid)"},
    {"TIMEOUT", "300", BRAID_PARAM_DOUBLE,
     "seconds a blocking wait on a live but silent peer may last before BRAID_ERR_TIMEOUT"},
    {"TRANSPORT", "", BRAID_PARAM_STR,
     "force a transport: shm, tcp, rdma (default: shm within a host, else rdma when a verbs "
     "device is up, else tcp)"},
    {"ALGO", "", BRAID_PARAM_STR,
     "force an algorithm: ring, hier, recdbl, tree (default: the cost model chooses; under "
     "hier the stages within and between hosts still choose theirs)"},
    {"TUNING_FILE", "", BRAID_PARAM_STR,
     "cost-model constants (braid-info --tune --measure writes them), read by rank 0 at init"},
    {"TUNE_MEASURE", "0", BRAID_PARAM_INT,
     "1..20: measure the cost model's links at init (tens of ms times the value, which "
     "scales the calls per median; rank 0's setting and numbers count)"},
    {"NCHANNELS", "0", BRAID_PARAM_INT, "channels (independent rings); 0 = automatic"},
    {"CHUNK_SIZE", "0", BRAID_PARAM_SIZE, "bytes per pipelined chunk (slot size); 0 = automatic"},
    {"NSLOTS", "8", BRAID_PARAM_INT, "staging slots per connection (chunks in flight)"},
    {"SPIN_US", "0", BRAID_PARAM_INT,
     "microseconds to spin before sleeping in a wait; 0 = automatic (short when oversubscribed)"},
    {"YIELD_US", "2000", BRAID_PARAM_INT,
     "after spinning, microseconds to call sched_yield() before sleeping in a wait"},
    {"SOCKET_IFNAME", "", BRAID_PARAM_STR,
     "network interfaces for bootstrap and TCP (NCCL grammar: prefixes, ^ excludes, = exact)"},
    {"NSOCKS_PERPEER", "1", BRAID_PARAM_INT, "TCP sockets per peer and channel"},
    {"IB_HCA", "", BRAID_PARAM_STR,
     "RDMA devices and ports (NCCL grammar: mlx5_0:1, prefixes, ^ excludes, = exact); unset: "
     "one on the rank's NUMA node"},
    {"IB_GID_INDEX", "-1", BRAID_PARAM_INT,
     "RoCE GID index for RDMA; -1 = automatic (a RoCE v2 IPv4 GID first)"},
    {"IB_QPS_PER_CONN", "1", BRAID_PARAM_INT,
     "RDMA queue pairs per connection (1-8); messages are striped over them in order"},
    {"HOSTNAME", "", BRAID_PARAM_STR, "override the host identity used to group ranks by host"},
    {"NUMA_ID", "", BRAID_PARAM_STR,
     "override the NUMA node this rank publishes for ring ordering (tests); default: from its "
     "cpu binding"},
    {"NIC_NUMA", "", BRAID_PARAM_STR,
     "test hook: NICs as name:numa_node,... instead of the discovered ones (veth stands in "
     "for a NIC)"},
    {"THREAD_AFFINITY", "rank", BRAID_PARAM_STR,
     "cpus of braid's threads (tcp progress, non-blocking worker): rank = the rank's cpus at "
     "init, numa = their NUMA nodes, none = inherited"},
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
