/* braid-info: prints what braid was built with and what it detects on this machine.
 *
 *   braid-info            version, build options, host identity, CPUs, transports, kernels
 *   braid-info --params   the table of every BRAID_* variable with its current value */
#include "braid/braid.h"
#include "core/comm.h"
#include "core/config.h"
#include "reduce/reduce.h"
#include "transport/transport.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void print_params(void)
{
    printf("%-22s %-10s %-12s %s\n", "variable", "default", "value", "meaning");
    for (const braid_param_t *p = braid_param_table(); p->name; p++) {
        char var[64];
        snprintf(var, sizeof(var), "BRAID_%s", p->name);
        const char *v = getenv(var);
        printf("%-22s %-10s %-12s %s\n", var, *p->defval ? p->defval : "-", v ? v : "-",
               p->doc);
    }
}

static void print_info(void)
{
    int v = braid_version();
    printf("braid %d.%d.%d\n", v / 10000, v / 100 % 100, v % 100);
    printf("build: hwloc %s, verbs %s, cuda %s\n", BRAID_HAVE_HWLOC ? "yes" : "no",
           BRAID_HAVE_VERBS ? "yes" : "no", BRAID_HAVE_CUDA ? "yes" : "no");
    char host[BRAID_HOST_ID_BYTES];
    braid_host_id(host);
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
    printf("selection: shm between ranks with the same host identity, else tcp; "
           "BRAID_TRANSPORT=%s\n",
           *braid_param_str("TRANSPORT") ? braid_param_str("TRANSPORT") : "(auto)");
    printf("algorithms: ring (all-reduce = reduce-scatter + all-gather, chain broadcast/reduce)\n");
}

int main(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: braid-info [--params]\n");
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "--params")) {
        print_params();
        return 0;
    }
    if (argc > 1) {
        fprintf(stderr, "braid-info: unknown option '%s' (try --help)\n", argv[1]);
        return 2;
    }
    print_info();
    return 0;
}
