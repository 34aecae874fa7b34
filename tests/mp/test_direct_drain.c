/* A failed direct call returns only once its peers can no longer use its buffers in place
 * (transport/shm_direct.h braid_direct_drain): a rank whose all-reduce input and output come
 * from braid_mem_alloc fails (its timeout), overwrites its output as soon as the call
 * returned, and that output must stay as it wrote it, whether the peer was writing into it
 * (stalled after mapping it) or called late (it must see the failure before mapping). */
#include "core/comm.h"
#include "mp.h"
#include "proc.h"
#include "transport/shm_direct.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TestSuite(direct_drain, .timeout = 60);

#define COUNT (1u << 20) /* 4 MiB of float32: several blocks */

typedef struct {
    int late; /* 1: rank 1 calls late; 0: rank 1 stalls inside the call */
} drain_case_t;

static int failed_call_keeps_output(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    const drain_case_t *k = arg;
    braid_comm_t c = mp_fake_host_comm(comm, rank, 0, "direct");
    MP_CHECK(rank, c != NULL && ((struct braid_comm *)c)->direct, "no direct segments");
    MP_CHECK(rank, braid_direct_refs_ok(((struct braid_comm *)c)->direct),
             "peers cannot map this rank's regions here");
    float *in = NULL, *out = NULL;
    MP_OK(rank, braid_mem_alloc((void **)&in, COUNT * sizeof(float)));
    MP_OK(rank, braid_mem_alloc((void **)&out, COUNT * sizeof(float)));
    for (size_t i = 0; i < COUNT; i++)
        in[i] = (float)(rank + 1);
    MP_OK(rank, braid_barrier(comm));
    double t0 = proc_now_s();
    if (rank == 0) {
        MP_OK(rank, braid_comm_set_timeout(c, k->late ? 0.5 : 1.0));
        braid_result_t res = braid_allreduce(in, out, COUNT, BRAID_FLOAT32, BRAID_SUM, c);
        MP_CHECK(rank, res == BRAID_ERR_TIMEOUT, "expected a timeout, got %s (%s)",
                 braid_strerror(res), braid_last_error());
        memset(out, 0x5a, COUNT * sizeof(float)); /* the caller's buffer again */
        double end = t0 + 2.5;                    /* past rank 1's last chance to write */
        while (proc_now_s() < end)
            usleep(50000);
        for (size_t i = 0; i < COUNT; i++) {
            uint32_t b;
            memcpy(&b, &out[i], sizeof(b));
            MP_CHECK(rank, b == 0x5a5a5a5au,
                     "element %zu was written after the failed call returned (%s peer)", i,
                     k->late ? "late" : "stalled");
        }
    } else {
        MP_OK(rank, braid_comm_set_timeout(c, 10.0));
        if (k->late)
            usleep(1000000);
        else
            braid_direct_test_stall(((struct braid_comm *)c)->direct, 1500000000ull);
        braid_result_t res = braid_allreduce(in, out, COUNT, BRAID_FLOAT32, BRAID_SUM, c);
        MP_CHECK(rank, res == BRAID_ERR_REMOTE, "expected rank 0's failure, got %s (%s)",
                 braid_strerror(res), braid_last_error());
    }
    MP_OK(rank, braid_barrier(comm));
    braid_mem_free(in);
    braid_mem_free(out);
    braid_comm_destroy(c);
    return 0;
}

Test(direct_drain, a_peer_writing_into_the_output_finishes_before_the_failed_call_returns)
{
    drain_case_t k = {.late = 0};
    cr_assert_eq(mp_run(2, failed_call_keeps_output, &k, 30), 0, "some rank failed (see stderr)");
}

Test(direct_drain, a_late_peer_does_not_use_a_failed_ranks_buffers)
{
    drain_case_t k = {.late = 1};
    cr_assert_eq(mp_run(2, failed_call_keeps_output, &k, 30), 0, "some rank failed (see stderr)");
}
