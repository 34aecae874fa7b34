/* A complete braid program: run it with `braid-run -n 4 ./allreduce`. Each rank contributes
 * rank+i at index i; the sum over ranks is checked on every rank. */
#include <braid/braid.h>

#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    braid_comm_t comm;
    braid_result_t r = braid_comm_init_env(&comm);
    if (r != BRAID_SUCCESS) {
        fprintf(stderr, "init: %s: %s\n", braid_strerror(r), braid_last_error());
        return 1;
    }
    int rank, n;
    braid_comm_rank(comm, &rank);
    braid_comm_size(comm, &n);
    enum { COUNT = 1000 };
    float *buf = malloc(COUNT * sizeof(float));
    for (int i = 0; i < COUNT; i++)
        buf[i] = (float)(rank + i);
    r = braid_allreduce(buf, buf, COUNT, BRAID_FLOAT32, BRAID_SUM, comm);
    int wrong = 0;
    for (int i = 0; i < COUNT && r == BRAID_SUCCESS; i++)
        wrong += buf[i] != (float)(n * (n - 1) / 2 + n * i);
    if (r != BRAID_SUCCESS)
        fprintf(stderr, "allreduce: %s\n", braid_last_error());
    else if (rank == 0)
        printf("allreduce over %d ranks: %d wrong\n", n, wrong);
    free(buf);
    braid_comm_destroy(comm);
    return r != BRAID_SUCCESS || wrong;
}
