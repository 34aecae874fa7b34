/* Device collectives across ranks without a GPU (suite "cuda"): each rank's "device memory" is
 * an arena the classifier hook calls device 0 and the communicator's device is set by hand, so
 * every call on it passes the argument checks and then fails where the CUDA work would begin
 * (no CUDA state, or built without CUDA). What is tested is what the ranks tell each other:
 * a call one rank refuses before queuing it fails the peers' call of that number at once,
 * naming the reason, rather than after the timeout; and group end prepares the device calls
 * of a group on the caller's thread (seen through the prepare hook). */
#include "braid/braid.h"
#include "core/comm.h"
#include "core/log.h"
#include "core/p2p.h"
#include "cuda/cuda.h"
#include "mp.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char arena[1 << 16] __attribute__((aligned(64)));

static int classify(const void *p)
{
    uintptr_t x = (uintptr_t)p, b = (uintptr_t)arena;
    return x >= b && x < b + sizeof(arena) ? 0 : -1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Rank 0 makes a stream-ordered all-reduce that it refuses before queuing it (arg 0: on device
 * buffers, refused by the enqueue, as a stream under graph capture is; arg 1: its
 * communicator has no device); rank 1 makes a host all-reduce, which must fail within a few
 * seconds (the timeout is 60 s), naming rank 0's refusal. */
static int stream_refused(braid_comm_t c, int r, int n, void *arg)
{
    (void)n;
    int no_dev = *(int *)arg;
    MP_OK(r, braid_comm_set_timeout(c, 60));
    float host[8], out[8];
    for (int i = 0; i < 8; i++)
        host[i] = (float)(r * 10 + i);
    double t0 = now_s();
    if (r == 0) {
        braid_cuda_test_set_classifier(classify);
        c->cuda_dev = no_dev ? -1 : 0;
        braid_result_t res =
            braid_allreduce_stream(arena, arena + 64, 8, BRAID_FLOAT32, BRAID_SUM, c, NULL);
        MP_CHECK(r, res < 0, "the stream call succeeded");
        MP_CHECK(r, strstr(braid_last_error(), "allreduce_stream"), "%s", braid_last_error());
        c->cuda_dev = -1;
        braid_cuda_test_set_classifier(NULL);
    } else {
        braid_result_t res = braid_allreduce(host, out, 8, BRAID_FLOAT32, BRAID_SUM, c);
        double dt = now_s() - t0;
        MP_CHECK(r, res < 0, "the peer's call succeeded");
        MP_CHECK(r, dt < 10, "the peer's call failed only after %.1f s: %s", dt,
                 braid_last_error());
        MP_CHECK(r, strstr(braid_last_error(), "allreduce_stream"), "the reason is not named: %s",
                 braid_last_error());
    }
    return 0;
}

Test(cuda, a_stream_call_refused_before_queuing_fails_the_peers_at_once, .timeout = 60)
{
    int on_dev = 0, no_dev = 1;
    cr_assert_eq(mp_run(2, stream_refused, &on_dev, 45), 0, "on device: see the ranks' messages");
    cr_assert_eq(mp_run(2, stream_refused, &no_dev, 45), 0, "no device: see the ranks' messages");
}

/* Rank 1's device all-reduce is misaligned where the engine runs the call (forced): refused,
 * and rank 0's call of that number (on host buffers: a device call would fail here before
 * any exchange, without a real device) fails at once naming it. */
static int misaligned_refused(braid_comm_t c, int r, int n, void *arg)
{
    (void)n;
    (void)arg;
    MP_OK(r, braid_comm_set_timeout(c, 60));
    braid_cuda_test_set_classifier(classify);
    braid_cuda_test_set_engine_runs(1);
    c->cuda_dev = 0;
    double t0 = now_s();
    float host[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8];
    braid_result_t res =
        r ? braid_allreduce(arena + 1, arena + 1024, 8, BRAID_FLOAT32, BRAID_SUM, c)
          : braid_allreduce(host, out, 8, BRAID_FLOAT32, BRAID_SUM, c);
    double dt = now_s() - t0;
    MP_CHECK(r, res < 0, "the call succeeded");
    if (r == 1)
        MP_CHECK(r, res == BRAID_ERR_INVALID_ARG && strstr(braid_last_error(), "not aligned"), "%s",
                 braid_last_error());
    MP_CHECK(r, dt < 10, "failed only after %.1f s: %s", dt, braid_last_error());
    if (r == 0)
        MP_CHECK(r, strstr(braid_last_error(), "not aligned"), "the reason is not named: %s",
                 braid_last_error());
    c->cuda_dev = -1;
    braid_cuda_test_set_engine_runs(-1);
    braid_cuda_test_set_classifier(NULL);
    return 0;
}

Test(cuda, a_misaligned_engine_call_on_one_rank_fails_the_peers_at_once, .timeout = 60)
{
    cr_assert_eq(mp_run(2, misaligned_refused, NULL, 45), 0, "see the ranks' messages");
}

/* Group end prepares each device collective of the group on the caller's thread, in call
 * order, also when the group's parts go to the workers (two communicators here). */
static pthread_t caller;
static int nprepared, off_thread;
static struct braid_comm *prepared[4];

static braid_result_t on_prepare(struct braid_comm *comm, const struct braid_op_args *a)
{
    (void)a;
    if (!pthread_equal(pthread_self(), caller)) off_thread++;
    if (nprepared < 4) prepared[nprepared] = comm;
    nprepared++;
    return BRAID_SUCCESS;
}

static braid_result_t ready_ok(void)
{
    return BRAID_SUCCESS; /* no earlier device work to wait for (no real device) */
}

static int group_prepares(braid_comm_t c, int r, int n, void *arg)
{
    (void)n;
    (void)arg;
    braid_comm_t c2 = NULL;
    MP_OK(r, braid_comm_split(c, 0, r, &c2));
    MP_OK(r, braid_comm_set_timeout(c, 30));
    MP_OK(r, braid_comm_set_timeout(c2, 30));
    caller = pthread_self();
    braid_cuda_test_set_classifier(classify);
    braid_cuda_test_set_prepare_hook(on_prepare);
    braid_dev_test_set_ready(ready_ok);
    c->cuda_dev = c2->cuda_dev = 0;
    MP_OK(r, braid_group_start());
    MP_OK(r, braid_allreduce(arena, arena + 1024, 8, BRAID_FLOAT32, BRAID_SUM, c));
    MP_OK(r, braid_allreduce(arena + 2048, arena + 3072, 8, BRAID_FLOAT32, BRAID_SUM, c2));
    MP_CHECK(r, nprepared == 0, "prepared before group end: %d", nprepared);
    braid_result_t res = braid_group_end(); /* runs and fails on the workers: no real device */
    MP_CHECK(r, nprepared == 2, "group end prepared %d device calls, want 2 (%s)", nprepared,
             braid_last_error());
    MP_CHECK(r, !off_thread, "%d prepares ran off the caller's thread", off_thread);
    MP_CHECK(r, prepared[0] == c && prepared[1] == c2, "not in call order");
    (void)res;
    braid_cuda_test_set_prepare_hook(NULL);
    braid_dev_test_set_ready(NULL);
    braid_cuda_test_set_classifier(NULL);
    c->cuda_dev = c2->cuda_dev = -1;
    braid_comm_destroy(c2);
    return 0;
}

Test(cuda, group_end_prepares_device_calls_on_the_callers_thread, .timeout = 60)
{
    cr_assert_eq(mp_run(2, group_prepares, NULL, 45), 0, "see the ranks' messages");
}
