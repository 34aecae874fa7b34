/* The measured choice between single copy and the slots (BRAID_P2P_CMA=auto,
 * braid_p2p_cma_pick) as real processes: the receiver's report of one path made 20x slower
 * (braid_p2p_cma_test_scale) turns the sender to the other after the trial, and it keeps
 * exploring the slow one only rarely; every message arrives bit-exact either way. */
#include "core/p2p.h"
#include "data.h"
#include "mp.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>

#define MSGS 120
#define COUNT (128 * 1024) /* int32: 512 KiB (a slot ring), 8x BRAID_P2P_CMA_MIN */

static int ping_pong(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    int slow = *(const int *)arg; /* the path rank 1 reports 20x slower */
    if (rank == 1) braid_p2p_cma_test_scale(comm, slow, 20.0);
    int32_t *buf = data_xmalloc(COUNT * sizeof(int32_t)), ack = 0;
    for (int m = 0; m < MSGS; m++) {
        if (rank == 0) {
            data_fill(buf, BRAID_INT32, BRAID_SUM, 0, 0, COUNT, m);
            MP_OK(rank, braid_send(buf, COUNT, BRAID_INT32, 1, comm));
            MP_OK(rank, braid_recv(&ack, 1, BRAID_INT32, 1, comm)); /* no running ahead */
        } else {
            MP_OK(rank, braid_recv(buf, COUNT, BRAID_INT32, 0, comm));
            MP_CHECK(rank, !data_check_rank(buf, BRAID_INT32, BRAID_SUM, 0, 0, COUNT, m, "pick"),
                     "message %d", m);
            MP_OK(rank, braid_send(&ack, 1, BRAID_INT32, 0, comm));
        }
    }
    free(buf);
    if (rank == 1) {
        uint64_t pulls = braid_p2p_cma_pulls(comm, NULL);
        fprintf(stderr, "slow path %s: %llu of %d messages by single copy\n",
                slow ? "single copy" : "slots", (unsigned long long)pulls, MSGS);
        /* the trial sends at most 4 of each path; then one message in 256 at most explores
         * while the sender has sent fewer than 8 of the slow path (the paths are 10x or more
         * apart): at most 4 + 1 */
        if (slow)
            MP_CHECK(rank, pulls >= 1 && pulls <= 5, "single copy slow: %llu pulls",
                     (unsigned long long)pulls);
        else
            MP_CHECK(rank, pulls >= MSGS - 5, "slots slow: %llu pulls", (unsigned long long)pulls);
    }
    return 0;
}

Test(p2p_cma_pick, a_slower_path_is_left_after_the_trial, .timeout = 120)
{
    setenv("BRAID_P2P_CMA", "auto", 1);
    setenv("BRAID_P2P_CMA_MIN", "64K", 1);
    setenv("BRAID_P2P_CMA_HELP", "0", 1);
    for (int slow = 0; slow < 2; slow++)
        cr_expect_eq(mp_run(2, ping_pong, &slow, 60), 0, "slow path %d", slow);
}
