/* An NCCL program (nccl.h only) on host buffers, for braid's NCCL drop-in (README, "NCCL
 * drop-in"). Build it against build/nccl and run it under braid-run:
 *   cc examples/nccl_allreduce.c -Ibuild/nccl/include -Lbuild/nccl/lib \
 *      -Wl,-rpath,$PWD/build/nccl/lib -lnccl -o nccl_allreduce
 *   build/bin/braid-run -n 4 ./nccl_allreduce
 * braid-run gives each rank BRAID_RANK, BRAID_NRANKS and BRAID_ROOT (host:port); with
 * NCCL_COMM_ID set to that address every rank makes the same ncclUniqueId itself. */
#define _POSIX_C_SOURCE 200112L /* setenv */
#include <nccl.h>

#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        if (r_ != ncclSuccess) {                                                                   \
            fprintf(stderr, "%s: %s (%s)\n", #call, ncclGetErrorString(r_),                        \
                    ncclGetLastError(NULL));                                                       \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(void)
{
    const char *r = getenv("BRAID_RANK"), *n = getenv("BRAID_NRANKS"), *root = getenv("BRAID_ROOT");
    if (!r || !n || !root) {
        fprintf(stderr, "run me under braid-run\n");
        return 2;
    }
    int rank = atoi(r), nranks = atoi(n);
    setenv("NCCL_COMM_ID", root, 0);
    ncclUniqueId id;
    CHECK(ncclGetUniqueId(&id));
    ncclComm_t comm;
    CHECK(ncclCommInitRank(&comm, nranks, id, rank));
    enum { COUNT = 1000 };
    static float buf[COUNT]; /* host memory: a braid extension of NCCL */
    for (int i = 0; i < COUNT; i++)
        buf[i] = (float)(rank + i);
    CHECK(ncclAllReduce(buf, buf, COUNT, ncclFloat, ncclSum, comm, NULL)); /* done on return */
    int bad = 0;
    for (int i = 0; i < COUNT; i++)
        bad += buf[i] != (float)(nranks * i + nranks * (nranks - 1) / 2);
    int version;
    CHECK(ncclGetVersion(&version));
    printf("rank %d of %d: allreduce %s (libnccl %d)\n", rank, nranks, bad ? "WRONG" : "ok",
           version);
    CHECK(ncclCommDestroy(comm));
    return bad != 0;
}
