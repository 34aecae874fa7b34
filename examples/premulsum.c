/* PreMulSum and float8: run it with `braid-run -n 4 ./premulsum`. Each rank scales its
 * gradient by its own weight w_r = 1/(r+1) (a PreMulSum op holds the rank's scalar), so the
 * all-reduce returns sum_r w_r * g_r; then the same data in float8 e4m3, where the sum rounds
 * to nearest even and saturates at 448. Checked on every rank. */
#include <braid/braid.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>

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
    static double g[COUNT], out[COUNT];
    for (int i = 0; i < COUNT; i++)
        g[i] = (double)(i % 7) * (rank + 1); /* so that w_r * g_r = i % 7 on every rank */
    double w = 1.0 / (rank + 1);
    braid_redop_t op;
    r = braid_redop_create_premulsum(&op, &w, BRAID_FLOAT64, comm); /* w is read now */
    if (r == BRAID_SUCCESS) r = braid_allreduce(g, out, COUNT, BRAID_FLOAT64, op, comm);
    if (r == BRAID_SUCCESS) r = braid_redop_destroy(op, comm);
    int wrong = 0;
    for (int i = 0; i < COUNT && r == BRAID_SUCCESS; i++) /* w*g rounds: compare loosely */
        wrong += fabs(out[i] - (double)(n * (i % 7))) > 1e-9 * n;

    /* float8 e4m3 (bits as uint8_t): 1.0 is 0x38, 448 (the largest value) 0x7e. Every rank
     * adds 1.0 and 448: the first sum is n exactly (n <= 16), the second saturates. */
    uint8_t f8[2] = {0x38, 0x7e}, f8out[2];
    if (r == BRAID_SUCCESS) r = braid_allreduce(f8, f8out, 2, BRAID_FLOAT8_E4M3, BRAID_SUM, comm);
    if (r == BRAID_SUCCESS && n > 1 && n <= 16) {
        static const uint8_t e4m3_of_n[17] = {0,    0x38, 0x40, 0x44, 0x48, 0x4a, 0x4c, 0x4e, 0x50,
                                              0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58};
        wrong += f8out[0] != e4m3_of_n[n] || f8out[1] != 0x7e;
    }
    if (r != BRAID_SUCCESS)
        fprintf(stderr, "premulsum: %s: %s\n", braid_strerror(r), braid_last_error());
    else if (rank == 0)
        printf("premulsum and float8 over %d ranks: %d wrong\n", n, wrong);
    braid_comm_destroy(comm);
    return r != BRAID_SUCCESS || wrong;
}
