/* The yield phase of braid's waits (spin, then yield, then sleep: core/engine.c, core/p2p.c,
 * algos/direct.c), and when to skip it.
 *
 * sched_yield() hands the core to another runnable thread. With more ranks than cores and
 * every rank inside the collective, that thread is a peer's wait or step: it runs briefly and
 * yields back, and the ring moves at context-switch speed (8 B all-reduce, 4 ranks on 2
 * cores: 3.7 us per call against 155 us with futex sleeps; perf/RESULTS.md). But a thread
 * that yields stays runnable, so nothing wakes it when its data arrives. When the other
 * thread is CPU-bound (a trainer's backward pass while a DDP bucket's all-reduce runs on the
 * worker thread, a rank sharing the core, another job), each yield gives it a whole time
 * slice (1-4 ms measured on the 6.18 kernel here, HZ 250), and every step of the collective
 * waits that long: on 2 netns hosts x 2 ranks the buckets started during backward crawled
 * (a 22 KB all-reduce took 18 ms) and nothing of the communication was hidden. A thread that
 * sleeps instead is woken by its data (futex, poll) and runs at once.
 *
 * So yields that return after more than BRAID_YIELD_SLOW_US (another thread held the core
 * for its slice), BRAID_YIELD_SLOW_STREAK of them in a row, start a hold-off during which
 * this thread's waits skip the yield phase and sleep right after spinning: 1 ms, doubled each
 * time a yield after a hold-off is slow again, at most 1 s. Fast yields end the streak; they
 * end the doubling only once no yield has been slow for BRAID_YIELD_FORGET_NS (1 s), so a
 * trainer's worker, whose competitor comes back every step, stays in its long hold-off
 * between steps. Why a streak and a short first hold-off: with 4 ranks on 2 cpus a rank meets
 * one or two slow yields while its peers still start or connect, and a 10 ms hold-off then
 * outlasted a 200-call run of 8-64 B all-reduces (15-20 us per call in sleeps instead of 5-8
 * us in yields) and a 20-call all-to-all run over tcp (125 us instead of 95). The state is per
 * thread (the worker thread of non-blocking calls and the application's thread see different
 * competitors). BRAID_YIELD_SLOW_US=0: always yield for BRAID_YIELD_US.
 *
 * A process's main thread has no hold-off: it always yields for BRAID_YIELD_US. That thread
 * waits inside a blocking call, with nothing else of its process to run; on a shared cpu the
 * thread that holds the core is then most often a peer rank, whose progress it waits for.
 * With 4 ranks on 2 cpus a few slow yields per run (250 us to 2 ms, some at the start, some
 * sporadic) put every rank in hold-offs that kept doubling, and its waits slept instead: 8 B
 * all-reduces took 60 us per call instead of 11, 64 KiB all-to-alls 86 us instead of 32
 * (perf/RESULTS.md, session 14). The communication threads that compete with their own
 * process's compute keep it: braid's worker (non-blocking calls, the DDP layer's buckets) and
 * any thread other than the main one (a framework's progress thread, as the PyTorch backend's).
 *
 * A real-time worker (BRAID_WORKER_RT) never yields: sched_yield would hand its core only to
 * other real-time threads, so it would spin through the yield phase ahead of every normal
 * thread; its waits sleep right after spinning. */
#ifndef BRAID_CORE_YIELD_H
#define BRAID_CORE_YIELD_H

#include <stdint.h>

#define BRAID_YIELD_HOLD_MIN_NS 1000000ull    /* first hold-off: 1 ms */
#define BRAID_YIELD_HOLD_MAX_NS 1000000000ull /* longest: 1 s */
#define BRAID_YIELD_SLOW_STREAK 2             /* slow yields in a row that start a hold-off */
#define BRAID_YIELD_FORGET_NS 1000000000ull   /* no slow yield for this long: start short again */

typedef struct {
    uint64_t hold_until;       /* no yield before this time (braid_now_ns) */
    uint64_t hold_ns;          /* length of the current / last hold-off; 0 = none */
    uint64_t last_slow;        /* when the last slow yield ended */
    unsigned streak;           /* slow yields in a row, before a first hold-off */
    unsigned long long yields; /* yields made */
    unsigned long long slow;   /* of which slow */
    int main_thread;           /* -1: not looked up yet; 1: the process's main thread (no
                                  hold-off); 0: another thread */
    int no_yield;              /* a real-time thread (BRAID_WORKER_RT): never yields */
} braid_yield_state_t;

/* The spin phase's pause between two looks at a flag: one. A pause takes 25 ns on the AMD
 * EPYC VMs (about 40 on Skylake-era Intel, a few on older parts): the p2p runner and the ring
 * engine paused 16 times between two passes, 0.4 us without looking: an 8-byte send +
 * receive between 2 ranks took 0.53-0.65 us, 0.45 with one pause per look (all-to-all of 64
 * B: 0.53 -> 0.37 us; session 28, perf/RESULTS.md). */
static inline void braid_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Pure: updates s after a yield that began at t0 and took d ns, with threshold slow_ns
 * (0 = never slow). */
void braid_yield_note(braid_yield_state_t *s, uint64_t t0, uint64_t d, uint64_t slow_ns);

/* Whether s allows a yield at time now (not in a hold-off). */
static inline int braid_yield_allowed(const braid_yield_state_t *s, uint64_t now)
{
    return now >= s->hold_until;
}

/* For a wait loop in its yield phase, at time now: yields once and returns 1 (look again),
 * or returns 0 without yielding while the calling thread is in a hold-off (sleep now); the
 * process's main thread always yields. slow_ns = BRAID_YIELD_SLOW_US in ns
 * (comm->yield_slow_ns). */
int braid_wait_yield(uint64_t slow_ns, uint64_t now);

/* The calling thread's state (tests, diagnostics). */
braid_yield_state_t *braid_yield_self(void);

#endif
