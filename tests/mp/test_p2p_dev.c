/* Device buffers in sends, receives and the collectives on the send/recv connections (suite
 * "p2p_dev"): staged through host memory (src/core/p2p_dev.c). No GPU here: each rank's
 * "device memory" is an arena the classifier hook calls device 0, the communicator's device is
 * set by hand, and the staging copies go through the copier hook (memcpy, counted), so the
 * tests see every byte cross between the arena and the host. On a GPU the same paths run with
 * cudaMemcpy (tests/gpu/run.sh: nccl-tests' sendrecv and alltoall). */
#include "braid/braid.h"
#include "core/comm.h"
#include "core/log.h"
#include "core/p2p.h"
#include "cuda/cuda.h"
#include "mp.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#define ARENA_BYTES ((size_t)1 << 20)
static char arena[ARENA_BYTES] __attribute__((aligned(64)));
static _Atomic size_t to_dev, from_dev; /* bytes the copier moved */
static int fail_to_dev;                 /* the copier refuses copies into the arena */

static int in_arena(const void *p)
{
    uintptr_t x = (uintptr_t)p, b = (uintptr_t)arena;
    return x >= b && x < b + ARENA_BYTES;
}

static int classify(const void *p)
{
    return in_arena(p) ? 0 : -1;
}

static braid_result_t copier(void *dst, const void *src, size_t bytes)
{
    if (in_arena(dst)) {
        if (fail_to_dev) return braid_set_error(BRAID_ERR_SYSTEM, "simulated copy failure");
        to_dev += bytes;
    }
    if (in_arena(src)) from_dev += bytes;
    memcpy(dst, src, bytes);
    return BRAID_SUCCESS;
}

static void fake_device(braid_comm_t c)
{
    braid_cuda_test_set_classifier(classify);
    braid_p2p_test_set_copier(copier);
    c->cuda_dev = 0;
}

static int32_t val(int rank, size_t i, int salt)
{
    return (int32_t)(rank * 100003 + (int)i * 7 + salt);
}

/* Sends, receives (grouped, blocking, i-forms) and alltoall/gather/scatter on arena buffers. */
static int dev_ranks(braid_comm_t c, int r, int n, void *arg)
{
    (void)arg;
    fake_device(c);
    const size_t cnt = 997; /* prime */
    int32_t *sb = (int32_t *)(void *)arena, *rb = (int32_t *)(void *)(arena + 65536);
    for (size_t i = 0; i < cnt; i++)
        sb[i] = val(r, i, 1);
    memset(rb, 0xa5, cnt * 4);
    int to = (r + 1) % n, from = (r + n - 1) % n;
    /* a ring exchange in a group (NCCL's sendrecv) */
    MP_CHECK(r, braid_group_start() == BRAID_SUCCESS, "%s", braid_last_error());
    MP_CHECK(r, braid_send(sb, cnt, BRAID_INT32, to, c) == BRAID_SUCCESS, "%s", braid_last_error());
    MP_CHECK(r, braid_recv(rb, cnt, BRAID_INT32, from, c) == BRAID_SUCCESS, "%s",
             braid_last_error());
    MP_CHECK(r, braid_group_end() == BRAID_SUCCESS, "%s", braid_last_error());
    for (size_t i = 0; i < cnt; i++)
        MP_CHECK(r, rb[i] == val(from, i, 1), "group: element %zu: %d, want %d", i, rb[i],
                 val(from, i, 1));
    MP_CHECK(r, from_dev >= cnt * 4 && to_dev >= cnt * 4, "copies: %zu from, %zu to the device",
             (size_t)from_dev, (size_t)to_dev);
    /* i-forms, and a receive into the arena at an odd offset (unaligned) */
    int32_t *rb2 = (int32_t *)(void *)(arena + 131072 + 4);
    braid_request_t rq[2];
    MP_CHECK(r, braid_irecv(rb2, cnt, BRAID_INT32, from, c, &rq[0]) == BRAID_SUCCESS, "%s",
             braid_last_error());
    MP_CHECK(r, braid_isend(sb, cnt, BRAID_INT32, to, c, &rq[1]) == BRAID_SUCCESS, "%s",
             braid_last_error());
    for (int i = 0; i < 2; i++)
        MP_CHECK(r, braid_wait(rq[i]) == BRAID_SUCCESS, "%s", braid_last_error());
    MP_CHECK(r, !memcmp(rb2, rb, cnt * 4), "irecv into device memory differs");
    /* blocking, a device send to a host receive (even ranks send first) */
    int32_t host[997];
    if (r % 2 == 0 && to != r) {
        MP_CHECK(r, braid_send(sb, cnt, BRAID_INT32, to, c) == BRAID_SUCCESS, "%s",
                 braid_last_error());
    }
    if (from % 2 == 0 && from != r) {
        MP_CHECK(r, braid_recv(host, cnt, BRAID_INT32, from, c) == BRAID_SUCCESS, "%s",
                 braid_last_error());
        MP_CHECK(r, host[cnt - 1] == val(from, cnt - 1, 1), "blocking recv");
    }
    MP_CHECK(r, braid_barrier(c) == BRAID_SUCCESS, "%s", braid_last_error());
    /* alltoall: device to device, then in place */
    const size_t k = 13;
    int32_t *a_in = (int32_t *)(void *)(arena + 262144), *a_out = a_in + 4096;
    for (size_t i = 0; i < k * (size_t)n; i++)
        a_in[i] = val(r, i, 2);
    size_t f0 = from_dev, t0 = to_dev;
    MP_CHECK(r, braid_alltoall(a_in, a_out, k, BRAID_INT32, c) == BRAID_SUCCESS, "%s",
             braid_last_error());
    MP_CHECK(r, from_dev - f0 >= k * (size_t)n * 4 && to_dev - t0 >= k * (size_t)n * 4,
             "alltoall: %zu B from, %zu B to the device", (size_t)(from_dev - f0),
             (size_t)(to_dev - t0));
    for (int p = 0; p < n; p++)
        for (size_t i = 0; i < k; i++)
            MP_CHECK(r, a_out[(size_t)p * k + i] == val(p, (size_t)r * k + i, 2),
                     "alltoall from %d element %zu", p, i);
    MP_CHECK(r, braid_alltoall(a_in, a_in, k, BRAID_INT32, c) == BRAID_SUCCESS, "%s",
             braid_last_error());
    MP_CHECK(r, !memcmp(a_in, a_out, k * (size_t)n * 4), "alltoall in place differs");
    /* gather to rank n-1 (device output, host input), in place at the root */
    int root = n - 1;
    int32_t g_in[13];
    int32_t *g_out = (int32_t *)(void *)(arena + 393216);
    for (size_t i = 0; i < k; i++)
        g_in[i] = val(r, i, 3);
    const void *gs = g_in;
    if (r == root) {
        memcpy(g_out + (size_t)r * k, g_in, sizeof(g_in));
        gs = g_out + (size_t)r * k;
    }
    MP_CHECK(r, braid_gather(gs, g_out, k, BRAID_INT32, root, c) == BRAID_SUCCESS, "%s",
             braid_last_error());
    if (r == root)
        for (int p = 0; p < n; p++)
            MP_CHECK(r, g_out[(size_t)p * k + 5] == val(p, 5, 3), "gather from %d", p);
    /* scatter from rank 0 (device input) into device output */
    int32_t *s_in = (int32_t *)(void *)(arena + 524288), *s_out = s_in + 4096;
    if (r == 0)
        for (size_t i = 0; i < k * (size_t)n; i++)
            s_in[i] = val(0, i, 4);
    MP_CHECK(r, braid_scatter(s_in, s_out, k, BRAID_INT32, 0, c) == BRAID_SUCCESS, "%s",
             braid_last_error());
    for (size_t i = 0; i < k; i++)
        MP_CHECK(r, s_out[i] == val(0, (size_t)r * k + i, 4), "scatter element %zu", i);
    return 0;
}

Test(p2p_dev, device_buffers_are_staged_for_sends_receives_and_alltoall, .timeout = 60)
{
    for (int n = 1; n <= 4; n += 3)
        cr_assert_eq(mp_run(n, dev_ranks, NULL, 45), 0, "n=%d: see the ranks' messages", n);
}

/* A receive whose copy to the device fails: its call returns that error, naming it. */
static int copy_fails(braid_comm_t c, int r, int n, void *arg)
{
    (void)arg;
    (void)n;
    fake_device(c);
    int32_t *b = (int32_t *)(void *)arena;
    for (int i = 0; i < 64; i++)
        b[i] = i;
    if (r == 0) {
        MP_CHECK(r, braid_send(b, 64, BRAID_INT32, 1, c) == BRAID_SUCCESS, "%s",
                 braid_last_error());
        return 0;
    }
    fail_to_dev = 1;
    braid_result_t res = braid_recv(b + 64, 64, BRAID_INT32, 0, c);
    MP_CHECK(r, res == BRAID_ERR_SYSTEM, "recv returned %d: %s", res, braid_last_error());
    MP_CHECK(r, strstr(braid_last_error(), "simulated copy failure"), "%s", braid_last_error());
    return 0;
}

Test(p2p_dev, a_failed_copy_to_the_device_fails_the_receive, .timeout = 60)
{
    cr_assert_eq(mp_run(2, copy_fails, NULL, 45), 0);
}

/* A communicator of this process alone. */
static braid_comm_t one_rank(void)
{
    braid_unique_id_t id;
    braid_comm_t c = NULL;
    cr_assert_eq(braid_get_unique_id(&id), BRAID_SUCCESS);
    cr_assert_eq(braid_comm_init_rank(&c, 1, id, 0), BRAID_SUCCESS, "%s", braid_last_error());
    return c;
}

Test(p2p_dev, device_buffers_of_another_device_or_without_one_are_refused, .timeout = 30)
{
    braid_comm_t c = one_rank();
    braid_cuda_test_set_classifier(classify);
    int saved = c->cuda_dev;
    c->cuda_dev = -1;
    cr_assert_eq(braid_send(arena, 4, BRAID_INT32, 0, c), BRAID_ERR_UNSUPPORTED);
    cr_assert(strstr(braid_last_error(), "send: sendbuf is CUDA device memory (device 0) but "
                                         "this communicator has no CUDA device"),
              "%s", braid_last_error());
    c->cuda_dev = 1;
    braid_request_t rq = NULL;
    cr_assert_eq(braid_irecv(arena, 4, BRAID_INT32, 0, c, &rq), BRAID_ERR_INVALID_ARG);
    cr_assert(strstr(braid_last_error(), "irecv: recvbuf is memory of CUDA device 0 but this "
                                         "communicator uses device 1"),
              "%s", braid_last_error());
    cr_assert_null(rq);
    int32_t host[4] = {0};
    cr_assert_eq(braid_alltoall(host, arena, 4, BRAID_INT32, c), BRAID_ERR_INVALID_ARG);
    cr_assert(strstr(braid_last_error(), "alltoall: recvbuf is memory of CUDA device 0"), "%s",
              braid_last_error());
    /* count 0 moves nothing: no buffer is looked at */
    cr_assert_eq(braid_group_start(), BRAID_SUCCESS);
    cr_assert_eq(braid_send(arena, 0, BRAID_INT32, 0, c), BRAID_SUCCESS, "%s", braid_last_error());
    cr_assert_eq(braid_recv(arena, 0, BRAID_INT32, 0, c), BRAID_SUCCESS, "%s", braid_last_error());
    cr_assert_eq(braid_group_end(), BRAID_SUCCESS, "%s", braid_last_error());
    braid_cuda_test_set_classifier(NULL);
    c->cuda_dev = saved;
    cr_assert_eq(braid_comm_destroy(c), BRAID_SUCCESS);
}

/* The wait for the device work issued before a call (braid_dev_ready) runs on the caller's
 * thread as the call is made, never on the worker that runs queued operations (it may have to
 * release a stream the legacy stream waits for): recorded through the test hook. */
static pthread_t caller;
static _Atomic int ready_calls, ready_elsewhere;
static braid_result_t ready_hook(void)
{
    ready_calls++;
    if (!pthread_equal(pthread_self(), caller)) ready_elsewhere++;
    return BRAID_SUCCESS;
}

static int ready_ranks(braid_comm_t c, int r, int n, void *arg)
{
    (void)arg;
    fake_device(c);
    caller = pthread_self();
    braid_dev_test_set_ready(ready_hook);
    int32_t *sb = (int32_t *)(void *)arena, *rb = sb + 4096;
    for (int i = 0; i < 1000; i++)
        sb[i] = val(r, (size_t)i, 5);
    int to = (r + 1) % n, from = (r + n - 1) % n;
    braid_request_t rq[3];
    float x = 1, y = 0;
    /* a host collective queued first, so the sends and receives run on the worker */
    MP_CHECK(r, braid_iallreduce(&x, &y, 1, BRAID_FLOAT32, BRAID_SUM, c, &rq[0]) == BRAID_SUCCESS,
             "%s", braid_last_error());
    MP_CHECK(r, braid_irecv(rb, 1000, BRAID_INT32, from, c, &rq[1]) == BRAID_SUCCESS, "%s",
             braid_last_error());
    MP_CHECK(r, braid_isend(sb, 1000, BRAID_INT32, to, c, &rq[2]) == BRAID_SUCCESS, "%s",
             braid_last_error());
    for (int i = 0; i < 3; i++)
        MP_CHECK(r, braid_wait(rq[i]) == BRAID_SUCCESS, "%s", braid_last_error());
    MP_CHECK(r, rb[999] == val(from, 999, 5) && y == (float)n, "results");
    braid_request_t a2a;
    MP_CHECK(r, braid_ialltoall(sb, rb, 3, BRAID_INT32, c, &a2a) == BRAID_SUCCESS, "%s",
             braid_last_error());
    MP_CHECK(r, braid_wait(a2a) == BRAID_SUCCESS, "%s", braid_last_error());
    MP_CHECK(r, ready_calls == 3 && ready_elsewhere == 0,
             "braid_dev_ready: %d calls, %d on another thread than the caller's", ready_calls,
             ready_elsewhere);
    return 0;
}

Test(p2p_dev, the_wait_for_earlier_device_work_is_on_the_callers_thread, .timeout = 60)
{
    cr_assert_eq(mp_run(2, ready_ranks, NULL, 45), 0);
}

/* Host images are kept for reuse: a loop of calls of one size allocates its images once (they
 * were malloc'd and freed per call: every large message faulted fresh pages in). */
static int reuse_ranks(braid_comm_t c, int r, int n, void *arg)
{
    (void)arg;
    fake_device(c);
    const size_t cnt = 16384; /* 64 KiB */
    int32_t *sb = (int32_t *)(void *)arena, *rb = sb + cnt;
    int to = (r + 1) % n, from = (r + n - 1) % n;
    uint64_t after_first = 0;
    for (int it = 0; it < 20; it++) {
        for (size_t i = 0; i < cnt; i++)
            sb[i] = val(r, i, it);
        MP_CHECK(r, braid_group_start() == BRAID_SUCCESS, "%s", braid_last_error());
        MP_CHECK(r, braid_send(sb, cnt, BRAID_INT32, to, c) == BRAID_SUCCESS, "%s",
                 braid_last_error());
        MP_CHECK(r, braid_recv(rb, cnt, BRAID_INT32, from, c) == BRAID_SUCCESS, "%s",
                 braid_last_error());
        MP_CHECK(r, braid_group_end() == BRAID_SUCCESS, "%s", braid_last_error());
        for (size_t i = 0; i < cnt; i += 997)
            MP_CHECK(r, rb[i] == val(from, i, it), "iteration %d element %zu", it, i);
        MP_CHECK(r, braid_alltoall(sb, rb, cnt / (size_t)n, BRAID_INT32, c) == BRAID_SUCCESS, "%s",
                 braid_last_error());
        if (it == 0) after_first = braid_dev_shadow_allocs(c);
    }
    uint64_t allocs = braid_dev_shadow_allocs(c);
    /* the first iteration: a send and a receive image, one of the alltoall's in and out */
    MP_CHECK(r, after_first >= 2 && after_first <= 3, "first iteration: %llu images",
             (unsigned long long)after_first);
    MP_CHECK(r, allocs == after_first, "%llu images allocated in 20 iterations, %llu in the first",
             (unsigned long long)allocs, (unsigned long long)after_first);
    return 0;
}

Test(p2p_dev, host_images_are_reused_across_calls, .timeout = 60)
{
    cr_assert_eq(mp_run(2, reuse_ranks, NULL, 45), 0);
}

/* The pool's rules: the smallest kept image that fits is taken; at most 4 are kept, the
 * smallest dropped first; one larger than the cap on kept bytes (1 GiB) is never kept. */
Test(p2p_dev, host_image_pool_keeps_a_few_of_the_largest, .timeout = 30)
{
    braid_comm_t c = one_rank();
    void *a = braid_dev_shadow_get(c, 100), *b = braid_dev_shadow_get(c, 20000);
    cr_assert(a && b && ((uintptr_t)a % 64) == 0 && ((uintptr_t)b % 64) == 0);
    memset(b, 1, 20000);
    cr_assert_eq(braid_dev_shadow_allocs(c), 2);
    braid_dev_shadow_put(b);
    braid_dev_shadow_put(a);
    /* 50 B fits both: the smaller (a) is taken; 10000 B only fits b */
    cr_assert_eq(braid_dev_shadow_get(c, 50), a);
    cr_assert_eq(braid_dev_shadow_get(c, 10000), b);
    cr_assert_eq(braid_dev_shadow_allocs(c), 2);
    void *big = braid_dev_shadow_get(c, 30000); /* none kept fits: a third */
    cr_assert_eq(braid_dev_shadow_allocs(c), 3);
    void *more[3];
    for (int i = 0; i < 3; i++)
        more[i] = braid_dev_shadow_get(c, (size_t)(i + 1) << 20);
    braid_dev_shadow_put(a);
    braid_dev_shadow_put(b);
    braid_dev_shadow_put(big);
    for (int i = 0; i < 3; i++)
        braid_dev_shadow_put(more[i]);
    /* six given back, four kept: the 1-3 MiB ones and the 30000 B one; a and b were freed */
    uint64_t n0 = braid_dev_shadow_allocs(c);
    void *x = braid_dev_shadow_get(c, 64);
    cr_assert_eq(x, big, "the smallest kept image that fits");
    cr_assert_eq(braid_dev_shadow_get(c, 64), more[0]);
    cr_assert_eq(braid_dev_shadow_allocs(c), n0);
    braid_dev_shadow_put(x);
    braid_dev_shadow_put(more[0]);
    /* more than 1 GiB is never kept (malloc'd lazily: nothing is touched) */
    void *huge = braid_dev_shadow_get(c, ((size_t)1 << 30) + 1);
    cr_assert_not_null(huge);
    braid_dev_shadow_put(huge);
    uint64_t n1 = braid_dev_shadow_allocs(c);
    huge = braid_dev_shadow_get(c, ((size_t)1 << 30) + 1);
    cr_assert_eq(braid_dev_shadow_allocs(c), n1 + 1, "an image past the cap was kept");
    braid_dev_shadow_put(huge);
    cr_assert_eq(braid_comm_destroy(c), BRAID_SUCCESS);
}

/* allgatherv and alltoallv into a device buffer with gaps between the blocks: the bytes in the
 * gaps stay the caller's (the host image starts as the device's bytes; it was written back
 * whole, so the gaps got whatever the image held). */
static int gaps_ranks(braid_comm_t c, int r, int n, void *arg)
{
    (void)arg;
    fake_device(c);
    int32_t *out = (int32_t *)(void *)arena, in[16];
    for (int i = 0; i < 16; i++)
        in[i] = val(r, (size_t)i, 6);
    size_t counts[2] = {16, 16}, displs[2] = {0, 32}, sd[2] = {0, 8}, sc[2] = {8, 8};
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 64; i++)
            out[i] = -7 - i;
        braid_result_t res = round == 0
                                 ? braid_allgatherv(in, 16, out, counts, displs, BRAID_INT32, c)
                                 : braid_alltoallv(in, sc, sd, out, sc, displs, BRAID_INT32, c);
        MP_CHECK(r, res == BRAID_SUCCESS, "%s", braid_last_error());
        for (int i = round ? 8 : 16; i < 32; i++)
            MP_CHECK(r, out[i] == -7 - i, "%s: gap element %d overwritten (%d)",
                     round ? "alltoallv" : "allgatherv", i, out[i]);
        for (int p = 0; p < n; p++)
            for (int i = 0; i < (round ? 8 : 16); i++)
                MP_CHECK(r, out[32 * p + i] == val(p, (size_t)(round ? 8 * r + i : i), 6),
                         "round %d block %d element %d", round, p, i);
    }
    return 0;
}

Test(p2p_dev, v_collectives_leave_the_gaps_of_a_device_output_alone, .timeout = 60)
{
    cr_assert_eq(mp_run(2, gaps_ranks, NULL, 45), 0);
}

/* The cap on kept bytes (1 GiB): a put drops the kept images no larger than it, smallest first,
 * only when that makes room; else the put image goes and the kept ones stay. (The images are
 * malloc'd and never touched here: nothing is faulted in.) */
Test(p2p_dev, host_image_pool_drops_smaller_images_only_when_that_makes_room, .timeout = 30)
{
    braid_comm_t c = one_rank();
    const size_t MiB = (size_t)1 << 20;
    void *a = braid_dev_shadow_get(c, 200 * MiB), *b = braid_dev_shadow_get(c, 700 * MiB);
    void *d = braid_dev_shadow_get(c, 300 * MiB), *e = braid_dev_shadow_get(c, 100 * MiB);
    void *f = braid_dev_shadow_get(c, 900 * MiB);
    cr_assert(a && b && d && e && f, "%s", braid_last_error());
    braid_dev_shadow_put(a);
    braid_dev_shadow_put(b); /* kept: 200 + 700 MiB */
    braid_dev_shadow_put(f); /* 900 MiB: both smaller ones go to make room: {900} */
    uint64_t n0 = braid_dev_shadow_allocs(c);
    cr_assert_eq(braid_dev_shadow_get(c, 1), f, "the 900 MiB image replaces the two smaller");
    cr_assert_eq(braid_dev_shadow_allocs(c), n0);
    a = braid_dev_shadow_get(c, 200 * MiB);
    b = braid_dev_shadow_get(c, 700 * MiB);
    cr_assert_eq(braid_dev_shadow_allocs(c), n0 + 2, "200 or 700 MiB kept next to 900");
    braid_dev_shadow_put(f); /* kept {900} */
    braid_dev_shadow_put(a); /* 200: nothing no larger to drop: it goes */
    cr_assert_eq(braid_dev_shadow_get(c, 1), f, "a 200 MiB image kept past the cap");
    braid_dev_shadow_put(a = braid_dev_shadow_get(c, 200 * MiB)); /* kept {200} */
    braid_dev_shadow_put(b);                                      /* kept {200, 700} */
    braid_dev_shadow_put(d); /* 300: the 200 one goes to make room: {700, 300} */
    braid_dev_shadow_put(e); /* 100: nothing no larger to drop: it goes, {700, 300} stay */
    uint64_t n1 = braid_dev_shadow_allocs(c);
    cr_assert_eq(braid_dev_shadow_get(c, 50 * MiB), d, "the smallest kept should be 300 MiB");
    cr_assert_eq(braid_dev_shadow_get(c, 650 * MiB), b, "the 700 MiB image was not kept");
    cr_assert_eq(braid_dev_shadow_allocs(c), n1);
    braid_dev_shadow_put(d);
    braid_dev_shadow_put(b);
    braid_dev_shadow_put(f);
    cr_assert_eq(braid_comm_destroy(c), BRAID_SUCCESS);
}
