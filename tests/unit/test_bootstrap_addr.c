/* Bootstrap tests (suite "bootstrap") without a network: unique id layout, hello parsing,
 * host:port parsing, BRAID_SOCKET_IFNAME and the launcher environments of
 * braid_comm_init_env. Criterion forks each test, so setenv() stays inside the test. */
#include "core/bootstrap.h"
#include "core/log.h"
#include "proc.h"

#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void v4(braid_boot_addr_t *a, const char *ip, int port)
{
    memset(a, 0, sizeof(*a));
    struct sockaddr_in *in = (struct sockaddr_in *)&a->addr;
    in->sin_family = AF_INET;
    in->sin_port = htons((uint16_t)port);
    cr_assert_eq(inet_pton(AF_INET, ip, &in->sin_addr), 1);
    a->addrlen = sizeof(*in);
    for (int i = 0; i < BRAID_SECRET_BYTES; i++)
        a->secret[i] = (uint8_t)(i * 13 + 7);
}

Test(bootstrap, id_roundtrip_v4, .timeout = 30)
{
    braid_boot_addr_t a, b;
    braid_unique_id_t id;
    v4(&a, "10.1.2.3", 40123);
    braid_boot_id_encode(&a, &id);
    cr_assert_eq(memcmp(id.internal, "BRD1", 4), 0);
    cr_assert_eq(braid_boot_id_decode(&id, &b), 0, "%s", braid_last_error());
    cr_assert_eq(b.addr.ss_family, AF_INET);
    cr_assert_eq(b.addrlen, sizeof(struct sockaddr_in));
    cr_assert_eq(memcmp(&b.addr, &a.addr, sizeof(struct sockaddr_in)), 0);
    cr_assert_eq(memcmp(a.secret, b.secret, BRAID_SECRET_BYTES), 0);
    /* Fixed little-endian layout: port at byte 6. */
    cr_assert_eq((uint8_t)id.internal[6], 40123 & 0xff);
    cr_assert_eq((uint8_t)id.internal[7], 40123 >> 8);
}

Test(bootstrap, id_roundtrip_v6_scope, .timeout = 30)
{
    braid_boot_addr_t a, b;
    braid_unique_id_t id;
    memset(&a, 0, sizeof(a));
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&a.addr;
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(555);
    in6->sin6_scope_id = 3;
    inet_pton(AF_INET6, "fe80::1:2", &in6->sin6_addr);
    a.addrlen = sizeof(*in6);
    memset(a.secret, 0xa5, sizeof(a.secret));
    braid_boot_id_encode(&a, &id);
    cr_assert_eq(braid_boot_id_decode(&id, &b), 0, "%s", braid_last_error());
    const struct sockaddr_in6 *o = (const struct sockaddr_in6 *)&b.addr;
    cr_assert_eq(o->sin6_family, AF_INET6);
    cr_assert_eq(ntohs(o->sin6_port), 555);
    cr_assert_eq(o->sin6_scope_id, 3u);
    cr_assert_eq(memcmp(&o->sin6_addr, &in6->sin6_addr, 16), 0);
    cr_assert_eq(memcmp(a.secret, b.secret, BRAID_SECRET_BYTES), 0);
}

Test(bootstrap, id_rejects_bad, .timeout = 30)
{
    braid_boot_addr_t a, b;
    braid_unique_id_t id, bad;
    v4(&a, "127.0.0.1", 9);
    braid_boot_id_encode(&a, &id);
    bad = id;
    bad.internal[0] = 'X';
    cr_assert_eq(braid_boot_id_decode(&bad, &b), BRAID_ERR_INVALID_ARG);
    cr_assert_not_null(strstr(braid_last_error(), "id"));
    cr_assert_not_null(strstr(braid_last_error(), "magic"));
    bad = id;
    bad.internal[4] = 5; /* family */
    cr_assert_eq(braid_boot_id_decode(&bad, &b), BRAID_ERR_INVALID_ARG);
    bad = id;
    bad.internal[6] = bad.internal[7] = 0; /* port 0 */
    cr_assert_eq(braid_boot_id_decode(&bad, &b), BRAID_ERR_INVALID_ARG);
    bad = id;
    bad.internal[100] = 1; /* reserved */
    cr_assert_eq(braid_boot_id_decode(&bad, &b), BRAID_ERR_INVALID_ARG);
    bad = id;
    bad.internal[20] = 1; /* IPv4 padding */
    cr_assert_eq(braid_boot_id_decode(&bad, &b), BRAID_ERR_INVALID_ARG);
    memset(&bad, 0, sizeof(bad));
    cr_assert_eq(braid_boot_id_decode(&bad, &b), BRAID_ERR_INVALID_ARG);
}

Test(bootstrap, hello_parse, .timeout = 30)
{
    braid_boot_hello_t h = {.magic = 0x48445242u, .version = 3, .rank = 5, .nranks = 6}, o;
    for (int i = 0; i < BRAID_NONCE_BYTES; i++)
        h.nonce[i] = (uint8_t)(255 - i);
    uint8_t buf[BRAID_BOOT_HELLO_BYTES + 1];
    braid_boot_hello_pack(&h, buf);
    cr_assert_eq(braid_boot_hello_parse(buf, BRAID_BOOT_HELLO_BYTES, &o), 0, "%s",
                 braid_last_error());
    cr_assert_eq(o.rank, 5);
    cr_assert_eq(o.nranks, 6);
    cr_assert_eq(memcmp(o.nonce, h.nonce, BRAID_NONCE_BYTES), 0);
    cr_assert_eq(braid_boot_hello_parse(buf, BRAID_BOOT_HELLO_BYTES - 1, &o),
                 BRAID_ERR_INVALID_ARG);
    cr_assert_eq(braid_boot_hello_parse(buf, BRAID_BOOT_HELLO_BYTES + 1, &o),
                 BRAID_ERR_INVALID_ARG);
    braid_boot_hello_t bad[] = {
        {.magic = 0x48445243u, .version = 3, .rank = 0, .nranks = 1},
        {.magic = 0x48445242u, .version = 1, .rank = 0, .nranks = 1}, /* the secret in clear */
        {.magic = 0x48445242u, .version = 2, .rank = 0, .nranks = 1}, /* proofs not port-bound */
        {.magic = 0x48445242u, .version = 4, .rank = 0, .nranks = 1},
        {.magic = 0x48445242u, .version = 3, .rank = 1, .nranks = 1},
        {.magic = 0x48445242u, .version = 3, .rank = -1, .nranks = 1},
        {.magic = 0x48445242u, .version = 3, .rank = 0, .nranks = 0},
        {.magic = 0x48445242u, .version = 3, .rank = 0, .nranks = -4},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        braid_boot_hello_pack(&bad[i], buf);
        cr_assert_eq(braid_boot_hello_parse(buf, BRAID_BOOT_HELLO_BYTES, &o), BRAID_ERR_INVALID_ARG,
                     "case %zu accepted", i);
    }
}

Test(bootstrap, secrets, .timeout = 30)
{
    uint8_t a[BRAID_SECRET_BYTES], b[BRAID_SECRET_BYTES];
    cr_assert_eq(braid_boot_random_secret(a), 0);
    cr_assert_eq(braid_boot_random_secret(b), 0);
    cr_assert_neq(memcmp(a, b, sizeof(a)), 0);
    cr_assert_eq(braid_secret_cmp(a, a), 0);
    cr_assert_neq(braid_secret_cmp(a, b), 0);
    memcpy(b, a, sizeof(a));
    b[15] ^= 1;
    cr_assert_neq(braid_secret_cmp(a, b), 0);
}

/* ---- host:port ---------------------------------------------------------------------------- */

static void parse_ok(const char *s, int defport, int family, const char *ip, int port)
{
    struct sockaddr_storage a;
    socklen_t l;
    char buf[128];
    cr_assert_eq(braid_boot_parse_hostport(s, defport, &a, &l), 0, "'%s': %s", s,
                 braid_last_error());
    cr_assert_eq(a.ss_family, family, "'%s'", s);
    if (family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&a;
        inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
        cr_assert_eq(l, sizeof(*in));
        cr_assert_eq(ntohs(in->sin_port), port, "'%s'", s);
    } else {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&a;
        inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf));
        cr_assert_eq(l, sizeof(*in6));
        cr_assert_eq(ntohs(in6->sin6_port), port, "'%s'", s);
    }
    if (ip) cr_assert_str_eq(buf, ip, "'%s'", s);
}

static void parse_bad(const char *s, int defport)
{
    struct sockaddr_storage a;
    socklen_t l;
    cr_assert_eq(braid_boot_parse_hostport(s, defport, &a, &l), BRAID_ERR_INVALID_ARG,
                 "'%s' accepted", s);
    if (s && *s)
        cr_assert_not_null(strstr(braid_last_error(), s), "'%s' not named in '%s'", s,
                           braid_last_error());
}

Test(bootstrap, hostport_parse, .timeout = 30)
{
    parse_ok("127.0.0.1:1234", 0, AF_INET, "127.0.0.1", 1234);
    parse_ok("[::1]:1234", 0, AF_INET6, "::1", 1234);
    parse_ok("[fd00::2]:65535", 0, AF_INET6, "fd00::2", 65535);
    parse_ok("::1", 77, AF_INET6, "::1", 77);
    parse_ok("10.0.0.7", 29500, AF_INET, "10.0.0.7", 29500);
    struct sockaddr_storage a;
    socklen_t l;
    cr_assert_eq(braid_boot_parse_hostport("localhost:1234", 0, &a, &l), 0, "%s",
                 braid_last_error());
    cr_assert(a.ss_family == AF_INET || a.ss_family == AF_INET6);
    cr_assert_eq(ntohs(((struct sockaddr_in *)&a)->sin_port), 1234);
    cr_assert_eq(braid_boot_parse_hostport("[fe80::1%lo]:5", 0, &a, &l), 0, "%s",
                 braid_last_error());
    cr_assert_neq(((struct sockaddr_in6 *)&a)->sin6_scope_id, 0u);
    char s[96];
    braid_boot_addr_str(&a, s, sizeof(s));
    cr_assert_eq(strncmp(s, "[fe80::1%", 9), 0, "%s", s);

    parse_bad("", 1);
    parse_bad(NULL, 1);
    parse_bad(":1234", 0);
    parse_bad("1.2.3.4:", 0);
    parse_bad("1.2.3.4:0", 0);
    parse_bad("1.2.3.4:65536", 0);
    parse_bad("1.2.3.4:12ab", 0);
    parse_bad("1.2.3.4:-1", 0);
    parse_bad("1.2.3.4", 0); /* no port and no default */
    parse_bad("[::1", 0);
    parse_bad("[::1]x", 0);
    parse_bad("[::1]:", 0);
    parse_bad("[]:80", 0);
    parse_bad("no-such-host.invalid:80", 0);
}

Test(bootstrap, addr_str, .timeout = 30)
{
    struct sockaddr_storage a;
    socklen_t l;
    char s[96];
    cr_assert_eq(braid_boot_parse_hostport("192.0.2.1:80", 0, &a, &l), 0);
    braid_boot_addr_str(&a, s, sizeof(s));
    cr_assert_str_eq(s, "192.0.2.1:80");
    cr_assert_eq(braid_boot_parse_hostport("[2001:db8::5]:443", 0, &a, &l), 0);
    braid_boot_addr_str(&a, s, sizeof(s));
    cr_assert_str_eq(s, "[2001:db8::5]:443");
}

/* ---- BRAID_SOCKET_IFNAME ------------------------------------------------------------------- */

/* Whether an interface other than loopback is up with an IPv4 address. */
static int have_nonloop_v4(void)
{
    struct ifaddrs *list, *i;
    int found = 0;
    cr_assert_eq(getifaddrs(&list), 0);
    for (i = list; i; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
            !(i->ifa_flags & IFF_LOOPBACK) && strncmp(i->ifa_name, "docker", 6))
            found = 1;
    freeifaddrs(list);
    return found;
}

static int is_loopback(const struct sockaddr_storage *a)
{
    if (a->ss_family == AF_INET)
        return ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24 == 127;
    return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)a)->sin6_addr);
}

Test(bootstrap, socket_ifname, .timeout = 30)
{
    struct sockaddr_storage a;
    socklen_t l;
    char s[96];
    unsetenv("BRAID_SOCKET_IFNAME");
    cr_assert_eq(braid_boot_local_addr(&a, &l), 0, "%s", braid_last_error());
    cr_assert_eq(a.ss_family, AF_INET);
    cr_assert_eq(is_loopback(&a), !have_nonloop_v4());
    cr_assert_eq(((struct sockaddr_in *)&a)->sin_port, 0);

    setenv("BRAID_SOCKET_IFNAME", "=lo", 1);
    cr_assert_eq(braid_boot_local_addr(&a, &l), 0, "%s", braid_last_error());
    braid_boot_addr_str(&a, s, sizeof(s));
    cr_assert_str_eq(s, "127.0.0.1:0");
    setenv("BRAID_SOCKET_IFNAME", "nosuch,lo", 1); /* prefix list */
    cr_assert_eq(braid_boot_local_addr(&a, &l), 0, "%s", braid_last_error());
    cr_assert(is_loopback(&a));
    setenv("BRAID_SOCKET_IFNAME", "=l", 1); /* exact: "l" is not "lo" */
    cr_assert_eq(braid_boot_local_addr(&a, &l), BRAID_ERR_INVALID_ARG);

    setenv("BRAID_SOCKET_IFNAME", "^lo", 1);
    int rc = braid_boot_local_addr(&a, &l);
    if (have_nonloop_v4()) {
        cr_assert_eq(rc, 0, "%s", braid_last_error());
        cr_assert(!is_loopback(&a));
    }
    setenv("BRAID_SOCKET_IFNAME", "^=lo", 1);
    if (braid_boot_local_addr(&a, &l) == 0) cr_assert(!is_loopback(&a));

    setenv("BRAID_SOCKET_IFNAME", "nosuchif0", 1);
    cr_assert_eq(braid_boot_local_addr(&a, &l), BRAID_ERR_INVALID_ARG);
    const char *m = braid_last_error();
    cr_assert_not_null(strstr(m, "BRAID_SOCKET_IFNAME=nosuchif0"), "%s", m);
    cr_assert_not_null(strstr(m, "interfaces: "), "%s", m);
    cr_assert_not_null(strstr(m, "lo"), "%s", m);
}

/* ---- braid_comm_init_env's environment ------------------------------------------------------ */

static void clear_env(void)
{
    static const char *vars[] = {"BRAID_RANK",
                                 "BRAID_NRANKS",
                                 "BRAID_ROOT",
                                 "BRAID_SECRET",
                                 "RANK",
                                 "WORLD_SIZE",
                                 "OMPI_COMM_WORLD_RANK",
                                 "OMPI_COMM_WORLD_SIZE",
                                 "PMI_RANK",
                                 "PMI_SIZE",
                                 "SLURM_PROCID",
                                 "SLURM_NTASKS",
                                 "MASTER_ADDR",
                                 "MASTER_PORT",
                                 "TORCHELASTIC_RUN_ID",
                                 "OMPI_MCA_orte_ess_jobid",
                                 "OMPI_MCA_ess_base_jobid",
                                 "PMIX_NAMESPACE",
                                 "SLURM_JOB_ID",
                                 "SLURM_STEP_ID"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        unsetenv(vars[i]);
    setenv("BRAID_DEBUG", "NONE", 1); /* the unauthenticated-job warning */
}

static void resolve_ok(int rank, int nranks, const char *ip, int port, braid_boot_addr_t *a_p)
{
    int r = -1, n = -1, root = -1;
    braid_boot_addr_t a;
    char s[96], want[96];
    cr_assert_eq(braid_boot_env_resolve(&r, &n, &a, &root), 0, "%s", braid_last_error());
    cr_assert_eq(r, rank);
    cr_assert_eq(n, nranks);
    cr_assert_eq(root, rank == 0);
    braid_boot_addr_str(&a.addr, s, sizeof(s));
    snprintf(want, sizeof(want), "%s:%d", ip, port);
    cr_assert_str_eq(s, want);
    if (a_p) *a_p = a;
}

static void resolve_bad(const char *needle, const char *needle2)
{
    int r = -7, n = -7, root = -7;
    braid_boot_addr_t a;
    memset(&a, 0x5a, sizeof(a));
    cr_assert_eq(braid_boot_env_resolve(&r, &n, &a, &root), BRAID_ERR_INVALID_ARG);
    const char *m = braid_last_error();
    cr_assert_not_null(strstr(m, needle), "'%s' lacks '%s'", m, needle);
    if (needle2) cr_assert_not_null(strstr(m, needle2), "'%s' lacks '%s'", m, needle2);
    cr_assert(r == -7 && n == -7 && root == -7, "outputs set on failure");
}

Test(bootstrap, env_braid, .timeout = 30)
{
    clear_env();
    setenv("BRAID_RANK", "2", 1);
    setenv("BRAID_NRANKS", "4", 1);
    setenv("BRAID_ROOT", "127.0.0.1:5000", 1);
    setenv("BRAID_SECRET", "00112233445566778899aabbccddeeFF", 1);
    setenv("RANK", "3", 1); /* BRAID_* wins over torchrun's */
    setenv("WORLD_SIZE", "8", 1);
    braid_boot_addr_t a;
    resolve_ok(2, 4, "127.0.0.1", 5000, &a);
    for (int i = 0; i < BRAID_SECRET_BYTES; i++)
        cr_assert_eq(a.secret[i], (uint8_t)(i * 0x11), "secret byte %d", i);
    setenv("BRAID_RANK", "0", 1);
    resolve_ok(0, 4, "127.0.0.1", 5000, NULL);
}

Test(bootstrap, env_torchrun, .timeout = 30)
{
    clear_env();
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "29500", 1);
    setenv("TORCHELASTIC_RUN_ID", "job-a", 1);
    braid_boot_addr_t a, b, c;
    resolve_ok(1, 2, "127.0.0.1", 29501, &a); /* MASTER_PORT + 1 */
    setenv("RANK", "0", 1);
    resolve_ok(0, 2, "127.0.0.1", 29501, &b);
    cr_assert_eq(memcmp(a.secret, b.secret, BRAID_SECRET_BYTES), 0, "ranks derive the same");
    setenv("TORCHELASTIC_RUN_ID", "job-b", 1);
    resolve_ok(0, 2, "127.0.0.1", 29501, &c);
    cr_assert_neq(memcmp(a.secret, c.secret, BRAID_SECRET_BYTES), 0, "jobs derive different");
}

Test(bootstrap, env_ompi_pmi_slurm, .timeout = 30)
{
    clear_env();
    setenv("OMPI_COMM_WORLD_RANK", "3", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
    setenv("BRAID_ROOT", "[::1]:7000", 1);
    resolve_ok(3, 8, "[::1]", 7000, NULL);

    clear_env();
    setenv("PMI_RANK", "0", 1);
    setenv("PMI_SIZE", "3", 1);
    setenv("MASTER_ADDR", "10.0.0.1", 1);
    setenv("MASTER_PORT", "1000", 1);
    resolve_ok(0, 3, "10.0.0.1", 1001, NULL);

    clear_env();
    setenv("SLURM_PROCID", "5", 1);
    setenv("SLURM_NTASKS", "6", 1);
    setenv("SLURM_JOB_ID", "4242", 1);
    setenv("BRAID_ROOT", "10.0.0.2:1234", 1);
    resolve_ok(5, 6, "10.0.0.2", 1234, NULL);
}

/* The first complete pair wins: a lone WORLD_SIZE (an sbatch script's
 * `export WORLD_SIZE=$SLURM_NTASKS`) does not hide Slurm's complete pair. */
Test(bootstrap, env_partial_pair_is_skipped, .timeout = 30)
{
    clear_env();
    setenv("WORLD_SIZE", "2", 1);
    setenv("SLURM_PROCID", "1", 1);
    setenv("SLURM_NTASKS", "2", 1);
    setenv("BRAID_ROOT", "127.0.0.1:4500", 1);
    resolve_ok(1, 2, "127.0.0.1", 4500, NULL);
    cr_assert_str_eq(braid_boot_env_local_rank_var(), "SLURM_LOCALID");
}

/* Nested launchers disagree legitimately; a 1-rank job under a launcher of several processes
 * is stale variables and fails, naming both pairs. */
Test(bootstrap, env_conflicting_pairs, .timeout = 30)
{
    clear_env();
    setenv("BRAID_ROOT", "127.0.0.1:4501", 1);
    setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    setenv("RANK", "5", 1); /* torchrun started by each of mpirun's 2 processes */
    setenv("WORLD_SIZE", "8", 1);
    resolve_ok(5, 8, "127.0.0.1", 4501, NULL);
    cr_assert_str_eq(braid_boot_env_local_rank_var(), "LOCAL_RANK");

    setenv("RANK", "0", 1); /* a stale `export RANK=0 WORLD_SIZE=1` */
    setenv("WORLD_SIZE", "1", 1);
    int r = -7, n = -7, root = -7;
    braid_boot_addr_t a;
    cr_assert_eq(braid_boot_env_resolve(&r, &n, &a, &root), BRAID_ERR_INVALID_USAGE);
    const char *m = braid_last_error();
    cr_assert(strstr(m, "RANK=0 WORLD_SIZE=1 (torchrun)") &&
                  strstr(m, "OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 (Open MPI)"),
              "%s", m);
    cr_assert(r == -7 && n == -7 && root == -7, "outputs set on failure");

    /* Slurm's pair describes the allocation: a 1-process torchrun in an sbatch script is fine. */
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("OMPI_COMM_WORLD_SIZE");
    setenv("SLURM_PROCID", "0", 1);
    setenv("SLURM_NTASKS", "4", 1);
    resolve_ok(0, 1, "127.0.0.1", 4501, NULL);

    /* mpirun inside an allocation: Open MPI's pair, and Open MPI's local rank. */
    clear_env();
    setenv("BRAID_ROOT", "127.0.0.1:4501", 1);
    setenv("OMPI_COMM_WORLD_RANK", "3", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    setenv("SLURM_PROCID", "1", 1);
    setenv("SLURM_NTASKS", "2", 1);
    resolve_ok(3, 4, "127.0.0.1", 4501, NULL);
    cr_assert_str_eq(braid_boot_env_local_rank_var(), "OMPI_COMM_WORLD_LOCAL_RANK");
    clear_env();
    cr_assert_null(braid_boot_env_local_rank_var());
}

/* srun --mpi=pmi2: PMI_RANK/PMI_SIZE without MPI_LOCALRANKID take Slurm's local rank when
 * Slurm's pair is the same rank of the same size; never another job's (a different pair). */
Test(bootstrap, env_pmi_local_rank_from_slurm, .timeout = 30)
{
    clear_env();
    unsetenv("MPI_LOCALRANKID");
    setenv("PMI_RANK", "3", 1);
    setenv("PMI_SIZE", "4", 1);
    cr_assert_str_eq(braid_boot_env_local_rank_var(), "MPI_LOCALRANKID"); /* no Slurm */
    setenv("SLURM_PROCID", "3", 1);
    setenv("SLURM_NTASKS", "4", 1);
    setenv("SLURM_LOCALID", "1", 1);
    cr_assert_str_eq(braid_boot_env_local_rank_var(), "SLURM_LOCALID");
    setenv("MPI_LOCALRANKID", "1", 1); /* the family's own, when set */
    cr_assert_str_eq(braid_boot_env_local_rank_var(), "MPI_LOCALRANKID");
    unsetenv("MPI_LOCALRANKID");
    setenv("SLURM_NTASKS", "2", 1); /* an outer allocation, not this job */
    setenv("SLURM_PROCID", "1", 1);
    cr_assert_str_eq(braid_boot_env_local_rank_var(), "MPI_LOCALRANKID");
    unsetenv("SLURM_LOCALID");
}

/* `mpirun -n 2 braid-run -n 1 prog` (or `srun -n 2 braid-run -n 1`): braid-run's own 1-rank
 * pair wins over the outer launcher's without an error; it is never taken for stale variables. */
Test(bootstrap, env_braid_run_one_rank_under_mpirun, .timeout = 30)
{
    static const char *const outer[][2] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                           {"PMI_RANK", "PMI_SIZE"},
                                           {"RANK", "WORLD_SIZE"}};
    for (size_t i = 0; i < sizeof(outer) / sizeof(outer[0]); i++) {
        clear_env();
        setenv("BRAID_ROOT", "127.0.0.1:4505", 1);
        setenv(outer[i][0], "1", 1);
        setenv(outer[i][1], "2", 1);
        setenv("BRAID_RANK", "0", 1);
        setenv("BRAID_NRANKS", "1", 1);
        setenv("BRAID_LOCAL_RANK", "0", 1);
        resolve_ok(0, 1, "127.0.0.1", 4505, NULL);
        cr_assert_str_eq(braid_boot_env_local_rank_var(), "BRAID_LOCAL_RANK");
    }
}

Test(bootstrap, env_errors, .timeout = 30)
{
    clear_env();
    resolve_bad("BRAID_RANK", "SLURM_PROCID");
    setenv("RANK", "0", 1);
    resolve_bad("WORLD_SIZE", NULL);
    setenv("WORLD_SIZE", "two", 1);
    resolve_bad("WORLD_SIZE", "two");
    setenv("WORLD_SIZE", "2", 1);
    setenv("RANK", "2", 1);
    resolve_bad("RANK", "0..1");
    setenv("RANK", "1", 1);
    resolve_bad("BRAID_ROOT", "MASTER_ADDR");
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    resolve_bad("MASTER_PORT", NULL);
    setenv("MASTER_PORT", "70000", 1);
    resolve_bad("MASTER_PORT", NULL);
    setenv("MASTER_PORT", "29500", 1);
    setenv("BRAID_ROOT", "127.0.0.1", 1);
    resolve_bad("BRAID_ROOT", "no port");
    setenv("BRAID_ROOT", "127.0.0.1:9", 1);
    setenv("BRAID_SECRET", "abc", 1);
    resolve_bad("BRAID_SECRET", NULL);
    setenv("BRAID_SECRET", "0011223344556677889900112233445g", 1);
    resolve_bad("BRAID_SECRET", "character 32");
    setenv("BRAID_SECRET", "00112233445566778899001122334455", 1);
    resolve_ok(1, 2, "127.0.0.1", 9, NULL);
}

/* The local address (hex, as /proc/net/tcp{,6} print it) of the TCP listener on port; "" when
 * there is none. */
static void listener_addr(int port, char *out, size_t len)
{
    static const char *const files[] = {"/proc/net/tcp", "/proc/net/tcp6"};
    out[0] = '\0';
    for (int i = 0; i < 2; i++) {
        FILE *f = fopen(files[i], "r");
        char line[512], local[64];
        unsigned p, st;
        while (f && fgets(line, sizeof(line), f))
            if (sscanf(line, " %*d: %63[0-9A-Fa-f]:%x %*s %x", local, &p, &st) == 3 &&
                (int)p == port && st == 0x0A)
                snprintf(out, len, "%s", local);
        if (f) fclose(f);
    }
}

static void root_listens(const char *host, int want_loopback_only, const char *want_hex)
{
    char hp[320], hex[64];
    int port = proc_free_port();
    snprintf(hp, sizeof(hp), "%s:%d", host, port);
    braid_boot_addr_t a;
    cr_assert_eq(braid_boot_fixed_root(hp, &a), 0, "%s", braid_last_error());
    cr_assert_eq(a.loopback_only, want_loopback_only, "%s", hp);
    braid_boot_root_t *h = NULL;
    cr_assert_eq(braid_boot_root_start_every(&a, 5, &h), 0, "%s", braid_last_error());
    listener_addr(port, hex, sizeof(hex));
    braid_boot_root_stop(h);
    if (want_hex)
        cr_assert_str_eq(hex, want_hex, "the root of %s listens on %s", hp, hex);
    else /* the wildcard: [::] (dual stack), or 0.0.0.0 without IPv6 */
        cr_assert(hex[0] && strspn(hex, "0") == strlen(hex), "the root of %s listens on '%s'", hp,
                  hex);
}

/* A name from /etc/hosts that maps to a loopback address and is none of the standard loopback
 * names (Debian's "127.0.1.1 node1.example.com node1"), or "" when the file has none. */
static void hosts_loopback_alias(char *out, size_t len)
{
    FILE *f = fopen("/etc/hosts", "r");
    char line[512];
    out[0] = '\0';
    while (f && !out[0] && fgets(line, sizeof(line), f)) {
        char *save = NULL, *addr = strtok_r(line, " \t\r\n", &save), *name;
        if (!addr || addr[0] == '#' || strncmp(addr, "127.", 4)) continue;
        while (!out[0] && (name = strtok_r(NULL, " \t\r\n", &save)) && name[0] != '#')
            if (!braid_boot_root_loopback_only(name)) snprintf(out, len, "%s", name);
    }
    if (f) fclose(f);
}

/* Only the spelling decides: loopback literals and the standard loopback names; every other
 * name keeps the every-address root, whatever it resolves to here (an alias or FQDN of the
 * hostname maps to 127.0.1.1 locally on Debian while the other nodes get the real address). */
Test(bootstrap, loopback_only_decided_by_spelling)
{
    static const char *const yes[] = {"127.0.0.1:4500",  "127.0.1.1:1", "127.255.0.9",
                                      "[::1]:80",        "::1",         "[::ffff:127.0.0.1]:9",
                                      "localhost:29500", "LocalHost",   "localhost.localdomain:7",
                                      "ip6-localhost:7", "ip6-loopback"};
    static const char *const no[] = {
        "node1.example.com:29500", "node1:29500",    "runsc:4500",  "vm",
        "10.0.0.1:4500",           "[fe80::1]:4500", "128.0.0.1:1", "localhost2:1",
        "my.localhost:1",          "[::2]:1",        "0.0.0.0:1"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
        cr_expect_eq(braid_boot_root_loopback_only(yes[i]), 1, "%s", yes[i]);
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
        cr_expect_eq(braid_boot_root_loopback_only(no[i]), 0, "%s", no[i]);
}

/* A loopback root (braid-run's 127.0.0.1, localhost, ::1) is not reachable from the network;
 * the machine's hostname (which Debian maps to 127.0.1.1 locally) and any other name that
 * resolves to loopback here still listen everywhere. */
Test(bootstrap, loopback_root_listens_on_loopback_only, .timeout = 30)
{
    clear_env();
    root_listens("127.0.0.1", 1, "0100007F");
    char self[256] = "", alias[256];
    cr_assert_eq(gethostname(self, sizeof(self) - 1), 0);
    root_listens(self, 0, NULL);
    hosts_loopback_alias(alias, sizeof(alias));
    if (alias[0]) root_listens(alias, 0, NULL); /* resolves to loopback, yet every address */
    braid_boot_addr_t a;
    cr_assert_eq(braid_boot_fixed_root("localhost:4502", &a), 0, "%s", braid_last_error());
    cr_assert_eq(a.loopback_only, 1);
    braid_unique_id_t id;
    braid_boot_id_encode(&a, &id); /* the flag travels in the id */
    braid_boot_addr_t b;
    cr_assert_eq(braid_boot_id_decode(&id, &b), 0);
    cr_assert(b.loopback_only && b.rank0_hosts);
    /* BRAID_ROOT through the environment: rank 0 gets the flag. */
    setenv("BRAID_RANK", "0", 1);
    setenv("BRAID_NRANKS", "2", 1);
    setenv("BRAID_ROOT", "[::1]:4503", 1);
    resolve_ok(0, 2, "[::1]", 4503, &a);
    cr_assert_eq(a.loopback_only, 1);
}
