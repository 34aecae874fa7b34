/* The yield phase of waits and its hold-off (core/yield.h): the state machine (pure: a slow
 * yield alone starts nothing, BRAID_YIELD_SLOW_STREAK of them in a row start a 1 ms hold-off,
 * doubling while slow yields recur, at most 1 s, a fast one ends the streak, and the doubling
 * once no yield was slow for 1 s, threshold 0 = never), braid_wait_yield in and out of a hold-off,
 * and, as real processes (4 ranks, more than this machine's cores, so waits happen), that a thread
 * in a hold-off makes no sched_yield in any of the three wait loops (engine: ring and recursive
 * doubling; algos/direct.c; core/p2p.c) and still gets every result right, over shared memory
 * and TCP, unless it is its process's main thread, which yields anyway; with
 * BRAID_YIELD_SLOW_US=1 every yield starts a hold-off, blocking and non-blocking calls stay right;
 * a negative BRAID_YIELD_SLOW_US fails the init naming it; braid's worker thread runs SCHED_FIFO
 * with BRAID_WORKER_RT, and else asks for the time slice of BRAID_WORKER_SLICE_US. */
#include "core/comm.h"
#include "core/yield.h"
#include "transport/tcp.h"
#include "data.h"
#include "mp.h"
#include "proc.h"
#include "transport/transport.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

TestSuite(yield, .timeout = 240);

#define MS 1000000ull

Test(yield, fast_yields_never_hold)
{
    braid_yield_state_t s = {0};
    for (uint64_t t = 0; t < 100; t++)
        braid_yield_note(&s, t * 1000, 249000, 250000);
    cr_assert_eq(s.yields, 100);
    cr_assert_eq(s.slow, 0);
    cr_assert_eq(s.hold_ns, 0);
    cr_assert(braid_yield_allowed(&s, 100000));
}

/* The 4-rank, 2-cpu case that made one slow yield not enough: a rank's one slow yield (a peer
 * still starting) put it in a 10 ms hold-off, longer than a whole 200-call run of 8-64 B
 * all-reduces, and the run took 15-20 us per call instead of 5-8 (perf/RESULTS.md). */
Test(yield, one_slow_yield_alone_holds_nothing)
{
    braid_yield_state_t s = {0};
    for (uint64_t k = 0; k < 10; k++) {
        braid_yield_note(&s, k * 10 * MS, 3 * MS, 250000);        /* slow */
        braid_yield_note(&s, k * 10 * MS + 4 * MS, 1000, 250000); /* fast again */
    }
    cr_assert_eq(s.slow, 10);
    cr_assert_eq(s.hold_ns, 0);
    cr_assert_eq(s.streak, 0);
    cr_assert(braid_yield_allowed(&s, 100 * MS));
}

Test(yield, slow_streak_holds_1ms_from_its_end)
{
    braid_yield_state_t s = {0};
    cr_assert_eq(BRAID_YIELD_SLOW_STREAK, 2);
    braid_yield_note(&s, 1 * MS, 3 * MS, 250000);
    cr_assert_eq(s.hold_ns, 0, "one slow yield: no hold-off yet");
    cr_assert(braid_yield_allowed(&s, 4 * MS));
    braid_yield_note(&s, 4 * MS + 1000, 1 * MS - 1000, 250000);
    cr_assert_eq(s.slow, 2);
    cr_assert_eq(s.hold_ns, 1 * MS);
    cr_assert_eq(s.hold_until, 6 * MS);
    cr_assert(!braid_yield_allowed(&s, 5 * MS + 1));
    cr_assert(!braid_yield_allowed(&s, 6 * MS - 1));
    cr_assert(braid_yield_allowed(&s, 6 * MS));
}

Test(yield, recurring_slow_yields_double_up_to_1s)
{
    braid_yield_state_t s = {0};
    uint64_t t = 2 * MS, want = 1 * MS;
    braid_yield_note(&s, 0, 2 * MS, 250000); /* the streak's first */
    for (int k = 0; k < 12; k++) {
        braid_yield_note(&s, t, 2 * MS, 250000);
        cr_assert_eq(s.hold_ns, want, "slow yield %d: hold %llu ns, want %llu", k,
                     (unsigned long long)s.hold_ns, (unsigned long long)want);
        cr_assert_eq(s.hold_until, t + 2 * MS + want);
        t = s.hold_until; /* the first yield after the hold-off, slow again */
        want = want * 2 > BRAID_YIELD_HOLD_MAX_NS ? BRAID_YIELD_HOLD_MAX_NS : want * 2;
    }
    cr_assert_eq(s.hold_ns, BRAID_YIELD_HOLD_MAX_NS); /* 1, 2, ..., 512 ms, then 1 s twice */
    cr_assert_eq(s.slow, 13);
}

/* A trainer's worker: slow yields every step (its backward pass), fast ones in between (the
 * main thread waits): the hold-off keeps doubling across steps; a second without any slow
 * yield forgets it. */
Test(yield, fast_yields_end_the_doubling_only_after_a_quiet_second)
{
    braid_yield_state_t s = {0};
    braid_yield_note(&s, 0, 1 * MS, 250000);
    braid_yield_note(&s, 1 * MS, 1 * MS, 250000);
    cr_assert_eq(s.hold_ns, 1 * MS);
    cr_assert_eq(s.hold_until, 3 * MS);
    braid_yield_note(&s, 4 * MS, 1000, 250000); /* fast: the main thread waits now */
    cr_assert_eq(s.hold_ns, 1 * MS, "a fast yield soon after keeps the hold-off's length");
    cr_assert_eq(s.streak, 0);
    braid_yield_note(&s, 50 * MS, 2 * MS, 250000); /* the next step: slow again */
    cr_assert_eq(s.hold_ns, 2 * MS, "one slow yield doubles it");
    cr_assert_eq(s.hold_until, 54 * MS);
    braid_yield_note(&s, 60 * MS, 1000, 250000);
    cr_assert_eq(s.hold_ns, 2 * MS);
    /* more than BRAID_YIELD_FORGET_NS after the last slow yield (ended at 52 ms) */
    braid_yield_note(&s, 52 * MS + BRAID_YIELD_FORGET_NS, 1000, 250000);
    cr_assert_eq(s.hold_ns, 0, "a quiet second forgets the doubling");
    cr_assert(braid_yield_allowed(&s, 52 * MS + BRAID_YIELD_FORGET_NS + 1000));
    uint64_t t = 2 * BRAID_YIELD_FORGET_NS;
    braid_yield_note(&s, t, 1 * MS, 250000);
    cr_assert_eq(s.hold_ns, 0, "after it a streak is needed again");
    braid_yield_note(&s, t + 1 * MS, 1 * MS, 250000);
    cr_assert_eq(s.hold_ns, 1 * MS, "and a new hold-off starts short");
    cr_assert_eq(s.hold_until, t + 3 * MS);
}

Test(yield, threshold_zero_never_holds)
{
    braid_yield_state_t s = {0};
    braid_yield_note(&s, 0, 500 * MS, 0);
    cr_assert_eq(s.slow, 0);
    cr_assert_eq(s.hold_ns, 0);
    cr_assert(braid_yield_allowed(&s, 1));
}

Test(yield, wait_yield_in_and_out_of_a_hold_off)
{
    braid_yield_state_t *s = braid_yield_self();
    memset(s, 0, sizeof(*s));
    uint64_t now = braid_now_ns();
    s->hold_until = now + 1000 * MS;
    cr_assert_eq(braid_wait_yield(250000, now), 0, "in a hold-off: sleep, do not yield");
    cr_assert_eq(s->yields, 0);
    cr_assert_eq(braid_wait_yield(0, now), 1, "threshold 0: always yield");
    cr_assert_eq(s->yields, 1);
    s->hold_until = 0;
    /* Out of a hold-off: one yield; with a threshold of 100 s it is never slow. */
    cr_assert_eq(braid_wait_yield(100000 * MS, braid_now_ns()), 1);
    cr_assert_eq(s->yields, 2);
    cr_assert_eq(s->slow, 0);
    cr_assert(braid_yield_allowed(s, braid_now_ns()));
}

static void *wait_yield_held(void *arg)
{
    braid_yield_state_t *s = braid_yield_self();
    memset(s, 0, sizeof(*s));
    s->main_thread = -1; /* looked up on the first wait */
    s->hold_until = UINT64_MAX;
    *(int *)arg = braid_wait_yield(250000, braid_now_ns());
    return NULL;
}

/* The main thread has no hold-off (yield.h): in one it still yields; any other thread (here a
 * new one) sleeps through it. */
Test(yield, main_thread_yields_through_a_hold_off)
{
    cr_assert_eq(gettid(), getpid(), "the test body runs in its process's main thread");
    braid_yield_state_t *s = braid_yield_self();
    memset(s, 0, sizeof(*s));
    s->main_thread = -1;
    s->hold_until = UINT64_MAX;
    cr_assert_eq(braid_wait_yield(250000, braid_now_ns()), 1, "main thread: yields");
    cr_assert_eq(s->main_thread, 1);
    cr_assert_eq(s->yields, 1);
    int other = -1;
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, wait_yield_held, &other), 0);
    cr_assert_eq(pthread_join(t, NULL), 0);
    cr_assert_eq(other, 0, "another thread in a hold-off: sleeps, no yield");
}

/* ---- as real processes -------------------------------------------------------------------- */

typedef struct {
    int hold;     /* put the thread in a permanent hold-off and check that it never yields */
    int nonblock; /* also non-blocking all-reduces (worker thread) */
    int main;     /* the rank's thread counts as its main thread (else as another thread) */
} yopts_t;

/* All-reduces of several sizes (recursive doubling, ring or the direct path, whatever
 * BRAID_ALGO / the model takes), a ring exchange of send/recv, checked against the
 * reference. */
static int calls(braid_comm_t comm, int rank, int n, void *arg)
{
    const yopts_t *o = arg;
    braid_yield_state_t *s = braid_yield_self();
    memset(s, 0, sizeof(*s));
    if (o->main) s->main_thread = -1; /* as a real main thread: looked up on its first wait */
    if (o->hold) s->hold_until = UINT64_MAX;
    size_t counts[] = {1, 7, 1009, 65537, 300007};
    for (int it = 0; it < 3; it++)
        for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
            if (data_check_allreduce(comm, rank, n, BRAID_FLOAT32, BRAID_SUM, counts[ci], it & 1, 0,
                                     11 + it, "yield"))
                return 1;
    int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    size_t cnt = 100003;
    float *in = malloc(cnt * sizeof(float)), *out = malloc(cnt * sizeof(float));
    MP_CHECK(rank, in && out, "out of memory");
    for (int it = 0; it < 4; it++) {
        data_fill(in, BRAID_FLOAT32, BRAID_SUM, rank, 0, cnt, 70 + it);
        MP_OK(rank, braid_group_start());
        MP_OK(rank, braid_send(in, cnt, BRAID_FLOAT32, next, comm));
        MP_OK(rank, braid_recv(out, cnt, BRAID_FLOAT32, prev, comm));
        MP_OK(rank, braid_group_end());
        MP_CHECK(rank,
                 !data_check_rank(out, BRAID_FLOAT32, BRAID_SUM, prev, 0, cnt, 70 + it, "p2p"),
                 "send/recv round %d", it);
    }
    if (o->nonblock) {
        enum { K = 4 };
        braid_request_t req[K];
        float *b[K];
        for (int k = 0; k < K; k++) {
            b[k] = malloc(cnt * sizeof(float));
            MP_CHECK(rank, b[k], "out of memory");
            data_fill(b[k], BRAID_FLOAT32, BRAID_SUM, rank, 0, cnt, 90 + k);
            MP_OK(rank, braid_iallreduce(b[k], b[k], cnt, BRAID_FLOAT32, BRAID_SUM, comm, &req[k]));
        }
        for (int k = 0; k < K; k++) {
            MP_OK(rank, braid_wait(req[k]));
            MP_CHECK(rank,
                     !data_check_reduced(b[k], BRAID_FLOAT32, BRAID_SUM, n, 0, cnt, 90 + k,
                                         "iallreduce"),
                     "iallreduce %d", k);
            free(b[k]);
        }
    }
    free(in);
    free(out);
    if (o->hold && !o->main)
        MP_CHECK(rank, s->yields == 0, "%llu sched_yield calls in a hold-off",
                 (unsigned long long)s->yields);
    if (o->hold && o->main)
        MP_CHECK(rank, s->yields > 0 && s->main_thread == 1,
                 "main thread in a hold-off: %llu sched_yield calls (main_thread %d)",
                 (unsigned long long)s->yields, s->main_thread);
    return 0;
}

static void run_with(const char *transport, const char *algo, int hold, int nonblock)
{
    if (transport) setenv("BRAID_TRANSPORT", transport, 1);
    if (algo) setenv("BRAID_ALGO", algo, 1);
    yopts_t o = {.hold = hold, .nonblock = nonblock};
    cr_assert_eq(mp_run(4, calls, &o, 200), 0, "transport %s algo %s hold %d: a rank failed",
                 transport ? transport : "auto", algo ? algo : "auto", hold);
}

Test(yield, hold_off_never_yields_ring_shm)
{
    run_with(NULL, "ring", 1, 0);
}

Test(yield, hold_off_never_yields_recdbl_shm)
{
    run_with(NULL, "recdbl", 1, 0);
}

Test(yield, hold_off_never_yields_direct)
{
    run_with(NULL, "direct", 1, 0);
}

Test(yield, hold_off_never_yields_tcp)
{
    run_with("tcp", NULL, 1, 0);
}

/* 4 ranks on this machine's cpus, every main thread in a permanent hold-off: they yield anyway
 * (blocking calls only: the worker thread would keep its hold-off) and get every result right. */
Test(yield, main_threads_yield_in_a_hold_off_shm_and_tcp)
{
    yopts_t o = {.hold = 1, .main = 1};
    cr_assert_eq(mp_run(4, calls, &o, 200), 0, "shm: a rank failed");
    setenv("BRAID_TRANSPORT", "tcp", 1);
    cr_assert_eq(mp_run(4, calls, &o, 200), 0, "tcp: a rank failed");
}

/* BRAID_WORKER_RT=1: the worker thread (and over tcp the progress thread) runs SCHED_FIFO at
 * priority 1 and never yields; the non-blocking calls it runs (and the blocking ones) stay
 * right, over shm and tcp. */
static int rt_calls(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    yopts_t o = {.nonblock = 1, .main = 1};
    if (calls(comm, rank, n, &o)) return 1;
    struct braid_comm *c = (struct braid_comm *)comm;
    MP_CHECK(rank, atomic_load(&c->worker_rt_on) == 1, "the worker did not get SCHED_FIFO");
    int policy = -1;
    struct sched_param sp = {0};
    MP_CHECK(rank, pthread_getschedparam(c->worker, &policy, &sp) == 0, "getschedparam");
    MP_CHECK(rank, policy == SCHED_FIFO && sp.sched_priority == 1, "worker policy %d priority %d",
             policy, sp.sched_priority);
    if (c->tcp_state) { /* and the tcp progress thread, which finishes queued sends */
        policy = -1;
        MP_CHECK(rank,
                 pthread_getschedparam(((tcp_state_t *)c->tcp_state)->thread, &policy, &sp) == 0,
                 "getschedparam (tcp)");
        MP_CHECK(rank, policy == SCHED_FIFO && sp.sched_priority == 1,
                 "tcp thread policy %d priority %d", policy, sp.sched_priority);
    }
    return 0;
}

Test(yield, rt_worker_runs_fifo_and_results_stay_right)
{
    if (geteuid() != 0) cr_skip_test("SCHED_FIFO needs root (CAP_SYS_NICE) here");
    setenv("BRAID_WORKER_RT", "1", 1);
    cr_assert_eq(mp_run(4, rt_calls, NULL, 200), 0, "shm: a rank failed");
    setenv("BRAID_TRANSPORT", "tcp", 1);
    cr_assert_eq(mp_run(4, rt_calls, NULL, 200), 0, "tcp: a rank failed");
}

Test(yield, every_yield_slow_blocking_and_nonblocking_right)
{
    setenv("BRAID_YIELD_SLOW_US", "1", 1);
    run_with(NULL, NULL, 0, 1);
    run_with("tcp", NULL, 0, 1);
}

Test(yield, negative_threshold_is_an_error)
{
    setenv("BRAID_YIELD_SLOW_US", "-5", 1);
    braid_unique_id_t id;
    cr_assert_eq(braid_get_unique_id(&id), BRAID_SUCCESS);
    braid_comm_t c = NULL;
    braid_result_t r = braid_comm_init_rank(&c, 1, id, 0);
    cr_assert_eq(r, BRAID_ERR_INVALID_ARG, "init: %s", braid_strerror(r));
    cr_assert(strstr(braid_last_error(), "BRAID_YIELD_SLOW_US"), "message: %s", braid_last_error());
}

/* BRAID_WORKER_SLICE_US (default 100): the worker thread asks the normal scheduler for a slice
 * of that many microseconds (EEVDF, Linux 6.12+), read back with sched_getattr by its name;
 * 0 leaves the kernel's default (the main thread's). A kernel that refused it leaves
 * worker_slice_on at 0, and then only the default is checked. */
static uint64_t worker_slice_ns(void)
{
    pid_t tid = proc_thread_named("braid-worker");
    braid_sched_attr_t a = {0};
    if (tid < 0 || syscall(SYS_sched_getattr, tid, &a, sizeof(a), 0) != 0) return 0;
    return a.runtime;
}

/* Whether this kernel takes and reports a fair thread's slice: set 250 us on a thread of its
 * own, read back. */
static void *probe_slice(void *arg)
{
    braid_sched_attr_t a = {.size = sizeof(a), .policy = SCHED_OTHER, .runtime = 250000};
    braid_sched_attr_t b = {0};
    *(int *)arg = syscall(SYS_sched_setattr, 0, &a, 0) == 0 &&
                  syscall(SYS_sched_getattr, 0, &b, sizeof(b), 0) == 0 && b.runtime == 250000;
    return NULL;
}

static int kernel_takes_slices(void)
{
    int ok = 0;
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, probe_slice, &ok), 0);
    cr_assert_eq(pthread_join(t, NULL), 0);
    return ok;
}

typedef struct {
    int want_us;   /* BRAID_WORKER_SLICE_US in force */
    int supported; /* kernel_takes_slices() */
} slice_opts_t;

static int slice_calls(braid_comm_t comm, int rank, int n, void *arg)
{
    const slice_opts_t *o = arg;
    const int *want_us = &o->want_us;
    size_t cnt = 4099;
    float *b = malloc(cnt * sizeof(float));
    MP_CHECK(rank, b, "out of memory");
    data_fill(b, BRAID_FLOAT32, BRAID_SUM, rank, 0, cnt, 5);
    braid_request_t req;
    MP_OK(rank, braid_iallreduce(b, b, cnt, BRAID_FLOAT32, BRAID_SUM, comm, &req));
    MP_OK(rank, braid_wait(req));
    MP_CHECK(rank, !data_check_reduced(b, BRAID_FLOAT32, BRAID_SUM, n, 0, cnt, 5, "slice"),
             "iallreduce");
    free(b);
    struct braid_comm *c = (struct braid_comm *)comm;
    braid_sched_attr_t mine = {0};
    MP_CHECK(rank, syscall(SYS_sched_getattr, 0, &mine, sizeof(mine), 0) == 0, "sched_getattr");
    uint64_t w = worker_slice_ns();
    MP_CHECK(rank, w > 0, "no braid-worker thread found");
    MP_CHECK(rank, atomic_load(&c->worker_slice_on) == (*want_us && o->supported),
             "worker_slice_on %d (want %d us, kernel takes slices: %d)",
             atomic_load(&c->worker_slice_on), *want_us, o->supported);
    if (*want_us && o->supported)
        MP_CHECK(rank, w == (uint64_t)*want_us * 1000u, "worker slice %llu ns, want %d us",
                 (unsigned long long)w, *want_us);
    else
        MP_CHECK(rank, w == mine.runtime, "worker slice %llu ns, the main thread's %llu",
                 (unsigned long long)w, (unsigned long long)mine.runtime);
    return 0;
}

Test(yield, worker_asks_for_a_short_slice)
{
    slice_opts_t o = {.want_us = 100, .supported = kernel_takes_slices()};
    if (!o.supported) cr_log_warn("this kernel does not take a fair thread's slice (< 6.12)");
    cr_assert_eq(mp_run(2, slice_calls, &o, 60), 0, "default");
    setenv("BRAID_WORKER_SLICE_US", "300", 1);
    o.want_us = 300;
    cr_assert_eq(mp_run(2, slice_calls, &o, 60), 0, "300 us");
    setenv("BRAID_WORKER_SLICE_US", "0", 1);
    o.want_us = 0;
    cr_assert_eq(mp_run(2, slice_calls, &o, 60), 0, "0: the kernel's default");
    unsetenv("BRAID_WORKER_SLICE_US");
}
