/* braid-info: prints what braid was built with and what it detects on this machine.
 *
 *   braid-info            version, build options, host identity, CPUs, transports, kernels
 *   braid-info --params   the table of every BRAID_* variable with its current value
 *                         (BRAID_SECRET hidden, invalid values flagged, unknown ones listed)
 *   braid-info --version  braid-info's and the library's version
 *   braid-info SUBCOMMAND --help, braid-info --help [SUBCOMMAND]
 *   braid-info --tune [nranks [hosts]]
 *                         the cost model's estimates and choice per all-reduce size for nranks
 *                         ranks (default: the cpus available) in contiguous blocks on `hosts`
 *                         hosts (default 1), with BRAID_TUNING_FILE's constants if set
 *   braid-info --tune --measure [FILE]
 *                         under a launcher (braid-run, netns.sh, mpirun): measures the
 *                         model's constants and writes them as a tuning file (stdout without
 *                         FILE): the links as BRAID_TUNE_MEASURE=1 measures them at init (every
 *                         rank at once: step latencies, the slowest link's bandwidth, whether
 *                         the network absorbs a call's bytes), with several hosts the shm
 *                         bandwidth between rank 0 and a rank of its host, and memcpy
 *   braid-info --rings NRANKS HOSTMAP [NUMAMAP|- [NCHANNELS]]
 *                         the rings a communicator builds when rank r lives on the r-th host
 *                         label of the comma list HOSTMAP (and NUMA node, NUMAMAP), with their
 *                         host and NUMA crossings; NCHANNELS defaults to BRAID_NCHANNELS or 1 */
#include "algos/algo.h"
#include "braid/braid.h"
#include "core/comm.h"
#include "core/config.h"
#include "reduce/reduce.h"
#include "transport/rdma.h"
#include "transport/transport.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* --params: the table with each variable's value (BRAID_SECRET masked), invalid values
 * flagged, then the BRAID_* variables of the environment braid does not know. Returns the
 * number of problems found (the exit status is 1 when there are any). */
static int params_problems;

static void params_lint(int level, int kind, const char *msg)
{
    (void)level;
    if (kind != BRAID_LINT_UNKNOWN) return; /* invalid values are flagged in the table */
    if (!params_problems++) printf("\nnot braid variables:\n");
    printf("  %s\n", msg);
}

static int print_params(void)
{
    int invalid = 0;
    printf("%-22s %-10s %-12s %s\n", "variable", "default", "value", "meaning");
    for (const braid_param_t *p = braid_param_table(); p->name; p++) {
        char var[64], why[256];
        snprintf(var, sizeof(var), "BRAID_%s", p->name);
        const char *v = getenv(var);
        if (v && !strcmp(p->name, "SECRET")) v = *v ? "(set, hidden)" : "";
        printf("%-22s %-10s %-12s %s\n", var, *p->defval ? p->defval : "-", v ? v : "-", p->doc);
        if (v && !braid_param_valid(p, why, sizeof(why))) {
            printf("%-22s ^ INVALID: %s\n", "", why);
            invalid++;
        }
    }
    params_problems = 0;
    braid_config_lint(params_lint);
    int problems = invalid + params_problems;
    fflush(stdout); /* the table first: stderr is unbuffered, and both may be one pipe */
    if (problems)
        fprintf(stderr, "braid-info: %d invalid value%s, %d unknown BRAID_* variable%s\n", invalid,
                invalid == 1 ? "" : "s", params_problems, params_problems == 1 ? "" : "s");
    return problems;
}

/* What each algorithm does, for the list print_info prints from braid_algo_name(). */
static const char *algo_doc(const char *name)
{
    static const struct {
        const char *name, *doc;
    } docs[] = {
        {"ring", "all-reduce = reduce-scatter + all-gather, chain broadcast/reduce"},
        {"hier", "2-level all-reduce, broadcast, reduce, reduce-scatter"},
        {"recdbl", "recursive doubling all-reduce"},
        {"tree", "binomial-tree broadcast and reduce, log2(n) steps"},
    };
    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++)
        if (!strcmp(docs[i].name, name)) return docs[i].doc;
    return "see src/algos";
}

static void print_info(void)
{
    int v = braid_version();
    printf("braid %d.%d.%d\n", v / 10000, v / 100 % 100, v % 100);
    printf("build: hwloc %s, verbs %s, cuda %s\n", BRAID_HAVE_HWLOC ? "yes" : "no",
           BRAID_HAVE_VERBS ? "yes" : "no", BRAID_HAVE_CUDA ? "yes" : "no");
    char host[BRAID_HOST_ID_BYTES];
    (void)braid_host_id(host);
    printf("host identity: %s\n", host);
    cpu_set_t set;
    int ncpu = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : -1;
    printf("cpus available: %d (online %ld)\n", ncpu, sysconf(_SC_NPROCESSORS_ONLN));
    printf("cpu reduction kernels: %s\n", braid_reduce_isa());
    const char *names[] = {"shm", "tcp", "rdma"};
    printf("transports:");
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        printf(" %s=%s", names[i], braid_transport_by_name(names[i]) ? "built" : "absent");
    printf("\n");
    braid_rdma_print_devices(stdout);
    printf("selection: shm between ranks with the same host identity, else rdma when a verbs "
           "device is up, else tcp; "
           "BRAID_TRANSPORT=%s\n",
           *braid_param_str("TRANSPORT") ? braid_param_str("TRANSPORT") : "(auto)");
    printf("algorithms:");
    for (int a = 0; a < BRAID_ALGO_COUNT; a++)
        printf("%s %s (%s)", a ? "," : "", braid_algo_name(a), algo_doc(braid_algo_name(a)));
    printf("; BRAID_ALGO=%s (see --tune)\n",
           *braid_param_str("ALGO") ? braid_param_str("ALGO") : "(auto)");
    braid_topo_hw_t hw;
    braid_topo_discover(&hw);
    printf("topology:\n");
    braid_topo_hw_print(&hw, stdout);
}

static int parse_pos(const char *s, const char *what, int *v)
{
    char *end;
    long x = strtol(s, &end, 10);
    if (*end || x < 1 || x > 65536) {
        fprintf(stderr, "braid-info: %s '%s' is not a number in [1, 65536]\n", what, s);
        return -1;
    }
    *v = (int)x;
    return 0;
}

/* The model for n ranks in contiguous blocks on h hosts (rank r on host r * h / n). */
static int print_tune(int argc, char **argv)
{
    cpu_set_t set;
    int n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1, h = 1;
    if (argc > 2 && parse_pos(argv[2], "nranks", &n)) return 2;
    if (argc > 3 && parse_pos(argv[3], "hosts", &h)) return 2;
    if (h > n) {
        fprintf(stderr, "braid-info: %d hosts for %d ranks\n", h, n);
        return 2;
    }
    char(*ids)[16] = calloc((size_t)n, sizeof(*ids));
    if (!ids) return 1;
    for (int r = 0; r < n; r++)
        snprintf(ids[r], sizeof(ids[r]), "host%d", (int)((long)r * h / n));
    braid_topo_t t;
    if (braid_topo_group(n, ids[0], sizeof(ids[0]), &t) != BRAID_SUCCESS) {
        fprintf(stderr, "braid-info: %s\n", braid_last_error());
        free(ids);
        return 1;
    }
    braid_model_t m;
    braid_model_init(&m, &t);
    braid_model_force_transport(&m, braid_param_str("TRANSPORT"));
    m.cores = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0; /* this host */
    const char *tf = braid_param_str("TUNING_FILE");
    if (tf && *tf && braid_tuning_read(tf, &m)) {
        fprintf(stderr, "braid-info: %s\n", braid_last_error());
        braid_topo_free(&t);
        free(ids);
        return 1;
    }
    braid_model_print(&m, stdout);
    braid_topo_free(&t);
    free(ids);
    return 0;
}

/* Splits a comma list into exactly n fields of at most width - 1 characters. */
static int split_list(const char *list, const char *what, int n, char *out, size_t width)
{
    int i = 0;
    const char *p = list;
    for (;;) {
        size_t len = strcspn(p, ",");
        if (len == 0 || len >= width) {
            fprintf(stderr, "braid-info: %s: field %d is %s\n", what, i + 1,
                    len ? "too long" : "empty");
            return -1;
        }
        if (i < n) snprintf(out + (size_t)i * width, width, "%.*s", (int)len, p);
        i++;
        if (!p[len]) break;
        p += len + 1;
    }
    if (i != n) {
        fprintf(stderr, "braid-info: %s has %d entries for %d ranks\n", what, i, n);
        return -1;
    }
    return 0;
}

static int print_rings(int argc, char **argv)
{
    int n, nch = 1;
    if (argc < 4 || argc > 6) {
        fprintf(stderr, "braid-info: --rings NRANKS HOSTMAP [NUMAMAP|- [NCHANNELS]]\n");
        return 2;
    }
    if (parse_pos(argv[2], "NRANKS", &n)) return 2;
    const char *env = braid_param_str("NCHANNELS");
    if (argc > 5) {
        if (parse_pos(argv[5], "NCHANNELS", &nch)) return 2;
    } else if (*env && strcmp(env, "0") && parse_pos(env, "BRAID_NCHANNELS", &nch)) {
        return 2;
    }
    if (nch > BRAID_MAX_CHANNELS) {
        fprintf(stderr, "braid-info: NCHANNELS %d exceeds %d\n", nch, BRAID_MAX_CHANNELS);
        return 2;
    }
    char(*hosts)[32] = calloc((size_t)n, sizeof(*hosts));
    char(*nf)[16] = calloc((size_t)n, sizeof(*nf));
    int *numa = calloc((size_t)n, sizeof(int)), rc = 2;
    if (!hosts || !nf || !numa) {
        rc = 1;
        goto out;
    }
    if (split_list(argv[3], "HOSTMAP", n, hosts[0], sizeof(hosts[0]))) goto out;
    int have_numa = argc > 4 && strcmp(argv[4], "-");
    if (have_numa) {
        if (split_list(argv[4], "NUMAMAP", n, nf[0], sizeof(nf[0]))) goto out;
        for (int r = 0; r < n; r++) {
            char *end;
            long v = strtol(nf[r], &end, 10);
            if (*end || v < -1 || v > 65535) {
                fprintf(stderr, "braid-info: NUMAMAP entry %d '%s' is not a NUMA node (or -1)\n",
                        r + 1, nf[r]);
                goto out;
            }
            numa[r] = (int)v;
        }
    }
    rc = braid_topo_rings_print(n, hosts[0], sizeof(hosts[0]), have_numa ? numa : NULL, nch,
                                stdout) == BRAID_SUCCESS
             ? 0
             : 1;
    if (rc) fprintf(stderr, "braid-info: %s\n", braid_last_error());
out:
    free(hosts);
    free(nf);
    free(numa);
    return rc;
}

/* Inside a launched job (braid-run -n N braid-info --peers): every rank creates the
 * communicator from the environment; rank 0 prints each rank's host, the transport rank 0
 * would use to reach it, the NUMA node and local NICs/GPUs it published, then the ring. */
/* ---- braid-info --tune --measure [FILE] (under a launcher) ---------------------------------- */
static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

/* One-way time of `bytes` between the two ranks of pair: half the best round trip of a
 * broadcast from rank 0 then one from rank 1 (each waits for the other's data). */
static double one_way_us(braid_comm_t pair, char *buf, size_t bytes, int iters)
{
    double best = 1e30;
    for (int i = 0; i < iters; i++) {
        braid_barrier(pair);
        double t0 = now_us();
        if (braid_broadcast(buf, buf, bytes, BRAID_UINT8, 0, pair) ||
            braid_broadcast(buf, buf, bytes, BRAID_UINT8, 1, pair))
            return -1;
        double t = (now_us() - t0) / 2;
        if (t < best) best = t;
    }
    return best;
}

/* Splits comm into {a, b} (everyone else joins nothing) with the ring forced, and measures
 * alpha (one-way small-message time less the launch cost) and bandwidth (from `big` bytes:
 * large enough that a shaper's burst allowance does not count) between them. */
static int measure_pair(braid_comm_t comm, int a, int b, size_t big, double launch_us,
                        braid_link_model_t *l)
{
    int me = comm->rank, in = me == a || me == b;
    setenv("BRAID_ALGO", "ring", 1);
    braid_comm_t pair = NULL;
    braid_result_t r = braid_comm_split(comm, in ? 0 : -1, me, &pair);
    unsetenv("BRAID_ALGO");
    if (r) return fprintf(stderr, "braid-info: split: %s\n", braid_last_error()), -1;
    if (!in) return 0;
    char *buf = calloc(big, 1);
    double t_small = buf ? one_way_us(pair, buf, 8, 200) : -1;
    double t_big = t_small >= 0 ? one_way_us(pair, buf, big, 6) : -1;
    free(buf);
    braid_comm_destroy(pair);
    if (t_small < 0 || t_big <= t_small) {
        fprintf(stderr, "braid-info: measuring ranks %d-%d failed: %s\n", a, b, braid_last_error());
        return -1;
    }
    l->alpha_us = t_small - launch_us > 0.05 ? t_small - launch_us : 0.05;
    l->gbps = (double)(big - 8) / (t_big - t_small) / 1e3;
    return 0;
}

static int measure(const char *path)
{
    braid_comm_t comm;
    setenv("BRAID_TUNE_MEASURE", "5", 1); /* five times the calls of an init measurement */
    braid_result_t r = braid_comm_init_env(&comm);
    unsetenv("BRAID_TUNE_MEASURE");
    if (r) return fprintf(stderr, "braid-info: %s: %s\n", braid_strerror(r), braid_last_error()), 1;
    const braid_topo_t *t = &comm->algo_state->topo;
    braid_model_t m = comm->algo_state->model;
    int me = comm->rank, rc = 0;
    int peer_intra = -1, peer_inter = -1;
    for (int q = 1; q < t->nranks; q++) {
        if (t->host[q] == t->host[0] && peer_intra < 0) peer_intra = q;
        if (t->host[q] != t->host[0] && peer_inter < 0) peer_inter = q;
    }
    /* the init measurement gave the step latencies, and the bandwidth of the network (several
     * hosts) or of shm (one host); with several hosts shm's bandwidth comes from a pair */
    braid_link_model_t pair = m.intra;
    if (t->nhosts > 1 && peer_intra > 0 &&
        measure_pair(comm, 0, peer_intra, (size_t)4 << 20, m.launch_us, &pair))
        rc = 1;
    m.intra.gbps = pair.gbps;
    if (me == 0 && !rc) {
        size_t big = (size_t)64 << 20;
        char *a = malloc(big), *b = malloc(big);
        double best = 1e30;
        for (int i = 0; a && b && i < 4; i++) {
            memset(a, i, big);
            double t0 = now_us();
            memcpy(b, a, big);
            double d = now_us() - t0;
            if (i && d < best) best = d; /* the first pass faults the pages in */
        }
        if (a && b) m.copy.gbps = (double)big / best / 1e3;
        free(a);
        free(b);
        char note[200];
        snprintf(note, sizeof(note), "braid-info --tune --measure: %d ranks on %d host(s); %s%s",
                 t->nranks, t->nhosts,
                 peer_intra > 0 ? "shm measured" : "shm default (one rank per host)",
                 peer_inter > 0 ? ", net measured" : ", net default (one host)");
        FILE *f = path ? fopen(path, "w") : stdout;
        if (!f) {
            fprintf(stderr, "braid-info: cannot write %s\n", path);
            rc = 1;
        } else {
            braid_tuning_write(f, &m, note);
            if (path) fclose(f);
        }
    }
    if (braid_barrier(comm)) rc = 1;
    braid_comm_destroy(comm);
    return rc;
}

/* Inside a launched job (braid-run -n N braid-info --peers): every rank creates the
 * communicator from the environment; rank 0 prints each rank's host and the transport rank 0
 * would use to reach it, then every rank's ring neighbours. */
static int print_peers(void)
{
    braid_comm_t comm;
    braid_result_t r = braid_comm_init_env(&comm);
    if (r) {
        fprintf(stderr, "braid-info: %s: %s\n", braid_strerror(r), braid_last_error());
        return 1;
    }
    if (comm->rank == 0) {
        printf("%d ranks, %d on this host\n", comm->nranks, comm->local_nranks);
        printf("%6s %8s  %-44s %-10s %5s  %s\n", "rank", "pid", "host identity", "transport",
               "numa", "local NICs / GPUs");
        for (int p = 0; p < comm->nranks; p++) {
            const braid_transport_t *t = NULL;
            const char *name = p == 0 ? "(self)" : "none";
            if (p && braid_comm_pick_transport(comm, p, &t) == BRAID_SUCCESS) name = t->name;
            const braid_topo_place_t *pl = &comm->peers[p].place;
            printf("%6d %8d  %-44s %-10s %5d ", p, comm->peers[p].pid, comm->peers[p].host, name,
                   pl->numa);
            for (int i = 0; i < pl->nnics && i < BRAID_TOPO_PEER_DEVS; i++)
                printf(" %.15s", pl->nic[i]);
            for (int i = 0; i < pl->ngpus && i < BRAID_TOPO_PEER_DEVS; i++)
                printf(" %.15s", pl->gpu[i]);
            printf("%s\n", pl->nnics + pl->ngpus ? "" : " -");
        }
        printf("ring (every channel):");
        for (int q = 0; q < comm->nranks; q++)
            printf(" %d", comm->ring_order[q]);
        printf("\n");
    }
    braid_comm_destroy(comm);
    return 0;
}

static const struct {
    const char *cmd, *usage, *help;
} subcommands[] = {
    {"", "braid-info",
     "prints braid's version and build options, the host identity, cpus, transports, CPU "
     "reduction kernels, the algorithms and the topology braid detects"},
    {"--params", "braid-info --params",
     "prints every BRAID_* variable: default, current value (BRAID_SECRET hidden) and meaning; "
     "flags invalid values and lists BRAID_* variables braid does not know (with a \"did you "
     "mean\"); exit status 1 when there are any"},
    {"--tune", "braid-info --tune [nranks [hosts]] | braid-info --tune --measure [FILE]",
     "--tune: the cost model's estimates and choice per all-reduce size for nranks ranks "
     "(default: the cpus available) in contiguous blocks on hosts hosts (default 1), with "
     "BRAID_TUNING_FILE's constants if set.\n--tune --measure (under a launcher: braid-run, "
     "mpirun): measures the model's constants and writes them as a tuning file (stdout without "
     "FILE)"},
    {"--peers", "braid-info --peers (under a launcher)",
     "every rank's host, pid, NUMA node and devices, the transport rank 0 uses to reach it, "
     "and the ring"},
    {"--rings", "braid-info --rings NRANKS HOSTMAP [NUMAMAP|- [NCHANNELS]]",
     "the rings a communicator builds when rank r lives on the r-th host label of the comma "
     "list HOSTMAP (and NUMA node, NUMAMAP), with their host and NUMA crossings; NCHANNELS "
     "defaults to BRAID_NCHANNELS or 1"},
    {"--version", "braid-info --version", "prints braid-info's and the library's version"},
};

static int is_help(const char *a)
{
    return !strcmp(a, "-h") || !strcmp(a, "--help");
}

static void usage(FILE *f, const char *cmd)
{
    for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++) {
        if (cmd && strcmp(cmd, subcommands[i].cmd)) continue;
        fprintf(f, "usage: %s\n", subcommands[i].usage);
        if (cmd) fprintf(f, "\n%s\n", subcommands[i].help);
    }
    if (!cmd) fprintf(f, "\n'braid-info SUBCOMMAND --help' describes one.\n");
}

int main(int argc, char **argv)
{
    if (argc > 1 && is_help(argv[1])) {
        /* braid-info --help [SUBCOMMAND] */
        const char *cmd = argc > 2 ? argv[2] : NULL;
        char dashed[64];
        if (cmd && strncmp(cmd, "--", 2)) {
            snprintf(dashed, sizeof(dashed), "--%s", cmd);
            cmd = dashed;
        }
        int known = !cmd;
        for (size_t i = 0; cmd && i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
            known |= !strcmp(cmd, subcommands[i].cmd) && *cmd;
        if (!known) {
            fprintf(stderr, "braid-info: no subcommand '%s'\n", argv[2]);
            usage(stderr, NULL);
            return 2;
        }
        usage(stdout, cmd);
        return 0;
    }
    for (int i = 2; i < argc; i++)
        if (is_help(argv[i])) { /* braid-info SUBCOMMAND ... --help */
            int known = 0;
            for (size_t k = 1; k < sizeof(subcommands) / sizeof(subcommands[0]); k++)
                known |= !strcmp(argv[1], subcommands[k].cmd);
            if (!known) break;
            usage(stdout, argv[1]);
            return 0;
        }
    if (argc > 1 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V"))) {
        int v = braid_version();
        printf("braid-info %d.%d.%d (library %d.%d.%d)\n", BRAID_VERSION_CODE / 10000,
               BRAID_VERSION_CODE / 100 % 100, BRAID_VERSION_CODE % 100, v / 10000, v / 100 % 100,
               v % 100);
        return argc > 2 ? 2 : 0;
    }
    if (argc > 2 && !strcmp(argv[1], "--tune") && !strcmp(argv[2], "--measure")) {
        if (argc > 4) {
            fprintf(stderr, "braid-info: --tune --measure takes at most an output file\n");
            return 2;
        }
        return measure(argc > 3 ? argv[3] : NULL);
    }
    if (argc > 1 && !strcmp(argv[1], "--tune")) {
        if (argc > 4) {
            fprintf(stderr, "braid-info: --tune takes at most nranks and hosts\n");
            return 2;
        }
        return print_tune(argc, argv);
    }
    if (argc > 1 && !strcmp(argv[1], "--peers")) return print_peers();
    if (argc > 1 && !strcmp(argv[1], "--rings")) return print_rings(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "--params")) {
        if (argc > 2) {
            fprintf(stderr, "braid-info: --params takes no arguments\n");
            return 2;
        }
        return print_params() ? 1 : 0;
    }
    if (argc > 1) {
        fprintf(stderr, "braid-info: unknown option '%s' (try --help)\n", argv[1]);
        return 2;
    }
    print_info();
    return 0;
}
