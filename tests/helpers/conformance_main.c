/* The transport conformance cases (tests/common/conformance.c) as a program, for runs where
 * the ranks are started by a script (the rdma transport inside the Soft-RoCE VM,
 * tests/rdma/inner.sh): the communicator comes from the BRAID_* environment (BRAID_RANK,
 * BRAID_NRANKS=2, BRAID_ROOT, ...).
 *   braid_conformance TRANSPORT CASE     (CASE "list" prints the case names; "zcring" runs
 *                                         conf_ring_zc on any number of ranks; "zcsmall",
 *                                         "zcbcast", "zclate" the cases of conf_zc.c) */
#include "conformance.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "list")) {
        for (int i = 0; conf_cases[i]; i++)
            printf("%s\n", conf_cases[i]);
        return 0;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: %s TRANSPORT CASE | list\n", argv[0]);
        return 2;
    }
    braid_comm_t comm;
    braid_result_t r = braid_comm_init_env(&comm);
    if (r) {
        fprintf(stderr, "braid_comm_init_env: %s: %s\n", braid_strerror(r), braid_last_error());
        return 3;
    }
    int rank = -1;
    braid_comm_rank(comm, &rank);
    const char *c = argv[2];
    int rc = !strcmp(c, "zcring")    ? conf_ring_zc(comm, argv[1])
             : !strcmp(c, "zcsmall") ? conf_zc_small(comm, argv[1])
             : !strcmp(c, "zcbcast") ? conf_zc_bcast(comm, argv[1])
             : !strcmp(c, "zclate")  ? conf_zc_late(comm, argv[1])
                                     : conf_run(comm, argv[1], c);
    braid_comm_destroy(comm);
    printf("rank %d: conformance %s/%s: %s\n", rank, argv[1], argv[2], rc ? "FAIL" : "pass");
    return rc ? 1 : 0;
}
