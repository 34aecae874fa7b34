/* sendrecv_perf: nccl-tests' sendrecv_perf for braid (see perf/README.md). */
#include "common.h"

int main(int argc, char **argv)
{
    return perf_braid_main(argc, argv, &perf_coll_sendrecv);
}
