/* Bootstrap addressing: "host:port" parsing, the interface the root listens on
 * (BRAID_SOCKET_IFNAME), job secrets, and the environment contract of braid_comm_init_env. */
#include "core/bootstrap.h"
#include "core/bootstrap_wire.h"
#include "core/config.h"
#include "core/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <netdb.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

void braid_boot_addr_str(const struct sockaddr_storage *addr, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN + IF_NAMESIZE + 2] = "?";
    if (!buf || !len) return;
    if (addr && addr->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)addr;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        snprintf(buf, len, "%s:%u", host, (unsigned)ntohs(in->sin_port));
    } else if (addr && addr->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)addr;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        if (in6->sin6_scope_id) {
            size_t n = strlen(host);
            snprintf(host + n, sizeof(host) - n, "%%%u", (unsigned)in6->sin6_scope_id);
        }
        snprintf(buf, len, "[%s]:%u", host, (unsigned)ntohs(in6->sin6_port));
    } else {
        snprintf(buf, len, "(unknown address family)");
    }
}

static int parse_port(const char *p, int *port_p)
{
    if (!*p || strlen(p) > 5) return -1;
    int v = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (*p - '0');
    }
    if (v < 1 || v > 65535) return -1;
    *port_p = v;
    return 0;
}

braid_result_t braid_boot_parse_hostport(const char *s, int default_port,
                                         struct sockaddr_storage *addr_p, socklen_t *len_p)
{
    char host[256];
    const char *port = NULL;
    if (!s || !*s) return braid_set_error(BRAID_ERR_INVALID_ARG, "bootstrap address is empty");
    if (!addr_p || !len_p)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "parse_hostport: addr_p/len_p is NULL");
    size_t n = strlen(s);
    if (n >= sizeof(host))
        return braid_set_error(BRAID_ERR_INVALID_ARG, "bootstrap address '%.32s...' is too long",
                               s);
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close)
            return braid_set_error(BRAID_ERR_INVALID_ARG, "bootstrap address '%s': missing ']'", s);
        memcpy(host, s + 1, (size_t)(close - s - 1));
        host[close - s - 1] = '\0';
        if (close[1] == ':')
            port = close + 2;
        else if (close[1] != '\0')
            return braid_set_error(BRAID_ERR_INVALID_ARG,
                                   "bootstrap address '%s': unexpected text after ']'", s);
    } else {
        const char *colon = strchr(s, ':');
        memcpy(host, s, n + 1);
        if (colon && !strchr(colon + 1, ':')) { /* host:port (a bare IPv6 has several ':') */
            host[colon - s] = '\0';
            port = colon + 1;
        }
    }
    if (!host[0])
        return braid_set_error(BRAID_ERR_INVALID_ARG, "bootstrap address '%s': no host", s);
    int portnum = default_port;
    if (port) {
        if (parse_port(port, &portnum))
            return braid_set_error(BRAID_ERR_INVALID_ARG,
                                   "bootstrap address '%s': bad port '%s' (want 1..65535)", s,
                                   port);
    } else if (default_port < 1 || default_port > 65535) {
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "bootstrap address '%s': no port (want host:port)", s);
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc || !res)
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "bootstrap address '%s': cannot resolve '%s': %s", s, host,
                               rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
    struct sockaddr_storage a;
    memset(&a, 0, sizeof(a));
    memcpy(&a, res->ai_addr, res->ai_addrlen);
    socklen_t alen = (socklen_t)res->ai_addrlen;
    freeaddrinfo(res);
    if (a.ss_family == AF_INET)
        ((struct sockaddr_in *)&a)->sin_port = htons((uint16_t)portnum);
    else if (a.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)&a)->sin6_port = htons((uint16_t)portnum);
    else
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "bootstrap address '%s': not an IPv4 or IPv6 address", s);
    *addr_p = a;
    *len_p = alen;
    return BRAID_SUCCESS;
}

/* BRAID_SOCKET_IFNAME grammar (NCCL's): a comma-separated list of name prefixes; a leading
 * '^' selects the interfaces that match none of them, a leading '=' (after any '^') makes
 * the names exact instead of prefixes. */
static int ifname_match(const char *spec, const char *name)
{
    int exclude = spec[0] == '^';
    spec += exclude;
    int exact = spec[0] == '=';
    spec += exact;
    int match = 0;
    while (*spec && !match) {
        const char *end = strchr(spec, ',');
        size_t n = end ? (size_t)(end - spec) : strlen(spec);
        if (n > 0)
            match =
                exact ? (strlen(name) == n && !strncmp(name, spec, n)) : !strncmp(name, spec, n);
        spec += n + (end ? 1 : 0);
    }
    return exclude ? !match : match;
}

/* Lower is better; -1 = never. */
static int addr_rank(const struct ifaddrs *ifa, int user_spec)
{
    int loop = (ifa->ifa_flags & IFF_LOOPBACK) != 0;
    if (ifa->ifa_addr->sa_family == AF_INET) return loop ? (user_spec ? 3 : -1) : 0;
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ifa->ifa_addr;
    if (loop) return user_spec ? 4 : -1;
    if (IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr)) return user_spec ? 2 : -1;
    return 1;
}

/* Appends name to the ", "-separated list unless it is there already. */
static void add_name(char *names, size_t cap, const char *name)
{
    size_t nl = strlen(name), o = strlen(names);
    for (const char *p = names; *p;) {
        const char *end = strstr(p, ", ");
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == nl && !strncmp(p, name, n)) return;
        p += n + (end ? 2 : 0);
    }
    if (o + nl + 3 < cap) snprintf(names + o, cap - o, "%s%s", o ? ", " : "", name);
}

braid_result_t braid_boot_local_addr(struct sockaddr_storage *addr_p, socklen_t *len_p)
{
    if (!addr_p || !len_p)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "local_addr: addr_p/len_p is NULL");
    const char *spec = braid_param_str("SOCKET_IFNAME");
    int user = spec[0] != '\0';
    struct ifaddrs *list = NULL;
    if (getifaddrs(&list))
        return braid_set_error(BRAID_ERR_SYSTEM, "bootstrap: getifaddrs failed: %s",
                               strerror(errno));
    const struct ifaddrs *best = NULL;
    int best_rank = INT_MAX;
    char names[512] = "";
    for (const struct ifaddrs *ifa = list; ifa; ifa = ifa->ifa_next) {
        if (!ifa->ifa_addr || !(ifa->ifa_flags & IFF_UP)) continue;
        int fam = ifa->ifa_addr->sa_family;
        if (fam != AF_INET && fam != AF_INET6) continue;
        add_name(names, sizeof(names), ifa->ifa_name); /* for the error message */
        if (user ? !ifname_match(spec, ifa->ifa_name)
                 : (!strncmp(ifa->ifa_name, "docker", 6) || !strncmp(ifa->ifa_name, "virbr", 5)))
            continue;
        int r = addr_rank(ifa, user);
        if (r >= 0 && r < best_rank) {
            best = ifa;
            best_rank = r;
        }
    }
    struct sockaddr_storage a;
    memset(&a, 0, sizeof(a));
    socklen_t alen;
    if (best) {
        alen = best->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                    : sizeof(struct sockaddr_in6);
        memcpy(&a, best->ifa_addr, alen);
        braid_debug(BOOT, "bootstrap interface %s", best->ifa_name);
    } else if (user) {
        braid_result_t res = braid_set_error(
            BRAID_ERR_INVALID_ARG,
            "BRAID_SOCKET_IFNAME=%s matches no interface that is up with an address "
            "(interfaces: %s)",
            spec, names[0] ? names : "none");
        freeifaddrs(list);
        return res;
    } else {
        struct sockaddr_in *in = (struct sockaddr_in *)&a;
        in->sin_family = AF_INET;
        in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        alen = sizeof(*in);
    }
    freeifaddrs(list);
    ((struct sockaddr_in *)&a)->sin_port = 0; /* same offset in sockaddr_in6 */
    *addr_p = a;
    *len_p = alen;
    return BRAID_SUCCESS;
}

braid_result_t braid_boot_random_secret(uint8_t secret[BRAID_SECRET_BYTES])
{
    size_t got = 0;
    while (got < BRAID_SECRET_BYTES) {
        ssize_t n = getrandom(secret + got, BRAID_SECRET_BYTES - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0)
            return braid_set_error(BRAID_ERR_SYSTEM, "bootstrap: getrandom failed: %s",
                                   strerror(errno));
        got += (size_t)n;
    }
    return BRAID_SUCCESS;
}

int braid_secret_cmp(const uint8_t *a, const uint8_t *b)
{
    volatile uint8_t diff = 0;
    for (int i = 0; i < BRAID_SECRET_BYTES; i++)
        diff |= (uint8_t)(a[i] ^ b[i]);
    return diff != 0;
}

/* ---- the environment contract of braid_comm_init_env ------------------------------------ */

static int parse_int_var(const char *name, const char *v, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        braid_set_error(BRAID_ERR_INVALID_ARG, "%s='%s' is not an integer in %ld..%ld", name, v, lo,
                        hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A 128-bit mix (two FNV-1a lanes, finalised with splitmix64). Not a cryptographic hash:
 * the derived secret only keeps separate jobs from joining each other by mistake. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void hash_str(uint64_t h[2], const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s;; p++) {
        h[0] = (h[0] ^ *p) * 0x100000001b3ULL;
        h[1] = (h[1] ^ *p ^ 0x5a) * 0x100000001b3ULL;
        h[1] = mix64(h[1] + h[0]);
        if (!*p) break;
    }
}

static void derive_secret(const char *root, int nranks, uint8_t secret[BRAID_SECRET_BYTES])
{
    static const char *ids[] = {"TORCHELASTIC_RUN_ID",
                                "OMPI_MCA_orte_ess_jobid",
                                "OMPI_MCA_ess_base_jobid",
                                "PMIX_NAMESPACE",
                                "SLURM_JOB_ID",
                                "SLURM_STEP_ID"};
    uint64_t h[2] = {0xcbf29ce484222325ULL, 0x84222325cbf29ce4ULL};
    char buf[32];
    hash_str(h, "braid-job-secret-v1");
    hash_str(h, root);
    snprintf(buf, sizeof(buf), "%d", nranks);
    hash_str(h, buf);
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        const char *v = getenv(ids[i]);
        hash_str(h, ids[i]);
        hash_str(h, v ? v : "");
    }
    uint64_t a = mix64(h[0] ^ mix64(h[1])), b = mix64(h[1] + a);
    boot_put_u64(secret, a);
    boot_put_u64(secret + 8, b);
}

/* Prefixes the last error message with the variable it came from. */
static braid_result_t prefix_error(const char *var)
{
    char msg[400];
    snprintf(msg, sizeof(msg), "%s", braid_last_error());
    return braid_set_error(BRAID_ERR_INVALID_ARG, "%s: %s", var, msg);
}

/* The job secret from BRAID_SECRET, else derived from (rootstr, nranks) with a warning when
 * warn is set. */
static braid_result_t resolve_secret(const char *rootstr, int nranks, int warn,
                                     uint8_t secret[BRAID_SECRET_BYTES])
{
    const char *sec = braid_param_str("SECRET");
    if (sec[0]) {
        size_t n = strlen(sec);
        if (n != 2 * BRAID_SECRET_BYTES)
            return braid_set_error(BRAID_ERR_INVALID_ARG,
                                   "BRAID_SECRET must be %d hex digits (it has %zu characters)",
                                   2 * BRAID_SECRET_BYTES, n);
        for (int i = 0; i < BRAID_SECRET_BYTES; i++) {
            int hi = hexval(sec[2 * i]), lo = hexval(sec[2 * i + 1]);
            if (hi < 0 || lo < 0)
                return braid_set_error(BRAID_ERR_INVALID_ARG,
                                       "BRAID_SECRET must be %d hex digits (character %d is not)",
                                       2 * BRAID_SECRET_BYTES, hi < 0 ? 2 * i + 1 : 2 * i + 2);
            secret[i] = (uint8_t)(hi << 4 | lo);
        }
    } else {
        derive_secret(rootstr, nranks, secret);
        if (warn)
            braid_warn(BOOT, "BRAID_SECRET is not set: the bootstrap is not authenticated "
                             "(the job secret is derived from job identifiers)");
    }
    return BRAID_SUCCESS;
}

/* Whether a root string ("host:port", "[v6]:port", "host") names only this machine's loopback
 * by its spelling alone: a loopback address literal (127.0.0.0/8, ::1, ::ffff:127.x) or one of
 * the standard loopback names. Nothing is resolved: any other name (the hostname, an alias or
 * FQDN in /etc/hosts) may map to 127.0.1.1 or 127.0.0.1 locally while the other hosts resolve
 * it through DNS to the real address, so its root must listen on every address. */
int braid_boot_root_loopback_only(const char *hostport)
{
    static const char *const names[] = {"localhost", "localhost.localdomain", "ip6-localhost",
                                        "ip6-loopback"};
    char host[256];
    const char *colon = strchr(hostport, ':');
    if (hostport[0] == '[') {
        const char *close = strchr(hostport, ']');
        if (!close || close - hostport - 1 >= (long)sizeof(host)) return 0;
        snprintf(host, sizeof(host), "%.*s", (int)(close - hostport - 1), hostport + 1);
    } else if (colon && !strchr(colon + 1, ':')) {
        snprintf(host, sizeof(host), "%.*s", (int)(colon - hostport), hostport);
    } else {
        snprintf(host, sizeof(host), "%s", hostport);
    }
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!strcasecmp(host, names[i])) return 1;
    return 0;
}

braid_result_t braid_boot_fixed_root(const char *hostport, braid_boot_addr_t *root_p)
{
    if (!hostport || !root_p) return braid_set_error(BRAID_ERR_INVALID_ARG, "root: NULL pointer");
    braid_boot_addr_t root;
    memset(&root, 0, sizeof(root));
    if (braid_boot_parse_hostport(hostport, 0, &root.addr, &root.addrlen) < 0)
        return prefix_error("root");
    /* nranks is not known here: 0 stands for it in the derived secret. */
    if (resolve_secret(hostport, 0, 1, root.secret) != BRAID_SUCCESS) return BRAID_ERR_INVALID_ARG;
    root.rank0_hosts = 1;
    root.loopback_only = (uint8_t)braid_boot_root_loopback_only(hostport);
    *root_p = root;
    return BRAID_SUCCESS;
}

/* The launchers whose variables give the rank, innermost first: a launcher started by another
 * one (braid-run or torchrun inside srun or mpirun, mpirun inside an sbatch allocation) sets
 * its own variables on top of the outer one's, so the first complete pair is the one that
 * describes this process's job. */
static const struct {
    const char *name, *rank, *size, *local_rank;
} families[] = {
    {"braid-run", "BRAID_RANK", "BRAID_NRANKS", "BRAID_LOCAL_RANK"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};
#define NFAMILIES (sizeof(families) / sizeof(families[0]))
#define SLURM_FAMILY (NFAMILIES - 1)
#define PMI_FAMILY (NFAMILIES - 2)

static int family_complete(size_t k)
{
    return getenv(families[k].rank) && getenv(families[k].size);
}

static int same_number(const char *a, const char *b)
{
    char *e1, *e2;
    long x = strtol(a, &e1, 10), y = strtol(b, &e2, 10);
    return *a && *b && !*e1 && !*e2 && x == y;
}

const char *braid_boot_env_local_rank_var(void)
{
    for (size_t k = 0; k < NFAMILIES; k++) {
        if (!family_complete(k)) continue;
        /* srun --mpi=pmi2 sets PMI_RANK/PMI_SIZE without MPI_LOCALRANKID: when Slurm's pair
         * names the same rank of the same size, SLURM_LOCALID numbers the same processes. */
        if (k == PMI_FAMILY && !getenv(families[k].local_rank) && family_complete(SLURM_FAMILY) &&
            getenv(families[SLURM_FAMILY].local_rank) &&
            same_number(getenv(families[k].rank), getenv(families[SLURM_FAMILY].rank)) &&
            same_number(getenv(families[k].size), getenv(families[SLURM_FAMILY].size)))
            return families[SLURM_FAMILY].local_rank;
        return families[k].local_rank;
    }
    return NULL;
}

/* Another complete pair that disagrees with the chosen one (k: rank of nranks). A nested
 * launcher legitimately differs from the outer one (torchrun's WORLD_SIZE spans the nodes that
 * mpirun's processes started agents on; braid-run -n 4 in each task of srun -n 2), and Slurm's
 * pair describes the allocation or the step that holds the launcher (SLURM_NTASKS in an sbatch
 * script running mpirun), so those only leave a note. The exception: a one-process job under a
 * launcher of several processes, the mark of stale variables (an `export RANK=0 WORLD_SIZE=1`
 * left from single-process debugging, then mpirun): every process would run alone, reduce
 * nothing and report no error; that fails. braid's own BRAID_RANK/BRAID_NRANKS are never taken
 * for stale ones: braid-run sets them for the processes it starts (`mpirun -n 2 braid-run -n 1
 * prog` runs two 1-rank jobs on purpose), and a user who sets them chose braid's rank. */
static braid_result_t check_other_families(size_t k, int rank, int nranks)
{
    for (size_t j = 0; j < NFAMILIES; j++) {
        int r, n;
        if (j == k || !family_complete(j)) continue;
        const char *rv = getenv(families[j].rank), *nv = getenv(families[j].size);
        char *e1, *e2;
        long lr = strtol(rv, &e1, 10), ln = strtol(nv, &e2, 10);
        if (*e1 || *e2 || !*rv || !*nv || ln < 1 || ln > BOOT_MAX_NRANKS || lr < 0 || lr >= ln)
            continue; /* not a pair this process could have used anyway */
        r = (int)lr;
        n = (int)ln;
        if (r == rank && n == nranks) continue;
        if (k != 0 && j != SLURM_FAMILY && nranks == 1 && n > 1) /* 0: braid-run */
            return braid_set_error(
                BRAID_ERR_INVALID_USAGE,
                "%s=%d %s=1 (%s) make this a 1-rank job, but %s=%d %s=%d (%s) say it is one of "
                "%d processes: stale variables? unset %s and %s, or those of %s",
                families[k].rank, rank, families[k].size, families[k].name, families[j].rank, r,
                families[j].size, n, families[j].name, n, families[k].rank, families[k].size,
                families[j].name);
        braid_info(BOOT, "rank %d of %d from %s (%s/%s); %s says %d of %d (an outer launcher)",
                   rank, nranks, families[k].name, families[k].rank, families[k].size,
                   families[j].name, r, n);
    }
    return BRAID_SUCCESS;
}

braid_result_t braid_boot_env_resolve(int *rank_p, int *nranks_p, braid_boot_addr_t *root_p,
                                      int *is_root_p)
{
    if (!rank_p || !nranks_p || !root_p || !is_root_p)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "env_resolve: an output pointer is NULL");
    int rank = -1, nranks = 0;
    size_t k = 0, partial = NFAMILIES;
    for (; k < NFAMILIES; k++) {
        if (family_complete(k)) break;
        if (partial == NFAMILIES && (getenv(families[k].rank) || getenv(families[k].size)))
            partial = k;
    }
    if (k == NFAMILIES && partial < NFAMILIES) {
        size_t f = partial;
        const char *rv = getenv(families[f].rank);
        return braid_set_error(BRAID_ERR_INVALID_ARG, "%s is set but %s is not",
                               rv ? families[f].rank : families[f].size,
                               rv ? families[f].size : families[f].rank);
    }
    if (k == NFAMILIES)
        return braid_set_error(
            BRAID_ERR_INVALID_ARG,
            "no rank in the environment: set BRAID_RANK and BRAID_NRANKS (also read: "
            "RANK/WORLD_SIZE, OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE, PMI_RANK/PMI_SIZE, "
            "SLURM_PROCID/SLURM_NTASKS)");
    if (partial < k)
        braid_info(BOOT, "only one of %s/%s is set; using %s/%s", families[partial].rank,
                   families[partial].size, families[k].rank, families[k].size);
    const char *rv = getenv(families[k].rank), *nv = getenv(families[k].size);
    if (parse_int_var(families[k].size, nv, 1, BOOT_MAX_NRANKS, &nranks))
        return BRAID_ERR_INVALID_ARG;
    if (parse_int_var(families[k].rank, rv, 0, nranks - 1, &rank)) return BRAID_ERR_INVALID_ARG;
    BRAID_CHECK(check_other_families(k, rank, nranks));

    braid_boot_addr_t root;
    memset(&root, 0, sizeof(root));
    char rootstr[300];
    const char *broot = braid_param_str("ROOT");
    if (broot[0]) {
        if (braid_boot_parse_hostport(broot, 0, &root.addr, &root.addrlen) < 0)
            return prefix_error("BRAID_ROOT");
        snprintf(rootstr, sizeof(rootstr), "%s", broot);
    } else {
        const char *ma = getenv("MASTER_ADDR"), *mp = getenv("MASTER_PORT");
        int port;
        if (!ma || !mp || !ma[0])
            return braid_set_error(BRAID_ERR_INVALID_ARG,
                                   "no bootstrap root in the environment: set BRAID_ROOT=host:port "
                                   "(or MASTER_ADDR and MASTER_PORT; %s is not set)",
                                   !ma || !ma[0] ? "MASTER_ADDR" : "MASTER_PORT");
        if (parse_int_var("MASTER_PORT", mp, 1, 65534, &port)) return BRAID_ERR_INVALID_ARG;
        /* MASTER_PORT is torch's TCPStore; braid's root listens on the next port. */
        if (braid_boot_parse_hostport(ma, port + 1, &root.addr, &root.addrlen) < 0)
            return prefix_error("MASTER_ADDR");
        snprintf(rootstr, sizeof(rootstr), "%s:%d", ma, port);
    }

    if (resolve_secret(rootstr, nranks, rank == 0, root.secret) != BRAID_SUCCESS)
        return BRAID_ERR_INVALID_ARG;
    if (rank == 0)
        root.loopback_only = (uint8_t)braid_boot_root_loopback_only(rootstr); /* it listens */
    *rank_p = rank;
    *nranks_p = nranks;
    *root_p = root;
    *is_root_p = rank == 0;
    return BRAID_SUCCESS;
}

braid_result_t braid_boot_listen_addr(const braid_boot_addr_t *root, struct sockaddr_storage *a_p,
                                      socklen_t *len_p)
{
    if (*braid_param_str("SOCKET_IFNAME")) return braid_boot_local_addr(a_p, len_p);
    if (root && root->addrlen) {
        /* A connected UDP socket reveals the source address the kernel routes to the root. */
        int fd = socket(root->addr.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        struct sockaddr_storage s;
        socklen_t sl = sizeof(s);
        int ok = fd >= 0 && connect(fd, (const struct sockaddr *)&root->addr, root->addrlen) == 0 &&
                 getsockname(fd, (struct sockaddr *)&s, &sl) == 0;
        if (fd >= 0) close(fd);
        if (ok && (s.ss_family == AF_INET || s.ss_family == AF_INET6)) {
            ((struct sockaddr_in *)&s)->sin_port = 0; /* same offset in sockaddr_in6 */
            *a_p = s;
            *len_p = sl;
            return BRAID_SUCCESS;
        }
    }
    return braid_boot_local_addr(a_p, len_p);
}
