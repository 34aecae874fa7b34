/* The yield phase of waits and its hold-off (see yield.h). */
#include "core/yield.h"
#include "transport/transport.h"

#include <sched.h>
#include <unistd.h>

static _Thread_local braid_yield_state_t g_self = {.main_thread = -1};

static int is_main_thread(braid_yield_state_t *s)
{
    if (s->main_thread < 0) s->main_thread = gettid() == getpid();
    return s->main_thread;
}

void braid_yield_note(braid_yield_state_t *s, uint64_t t0, uint64_t d, uint64_t slow_ns)
{
    s->yields++;
    uint64_t end = t0 + d;
    if (!slow_ns || d <= slow_ns) {
        s->streak = 0;
        /* fast for BRAID_YIELD_FORGET_NS since the last slow one: a later hold-off starts short */
        if (s->hold_ns && end - s->last_slow > BRAID_YIELD_FORGET_NS) s->hold_ns = 0;
        return;
    }
    s->slow++;
    s->last_slow = end;
    /* A first hold-off needs BRAID_YIELD_SLOW_STREAK slow yields in a row: one alone is a peer
     * still starting up or a passing interruption, not a thread that keeps the core. */
    if (!s->hold_ns && ++s->streak < BRAID_YIELD_SLOW_STREAK) return;
    s->streak = 0;
    uint64_t h = s->hold_ns ? s->hold_ns * 2 : BRAID_YIELD_HOLD_MIN_NS;
    if (h > BRAID_YIELD_HOLD_MAX_NS) h = BRAID_YIELD_HOLD_MAX_NS;
    s->hold_ns = h;
    s->hold_until = end + h;
}

int braid_wait_yield(uint64_t slow_ns, uint64_t now)
{
    braid_yield_state_t *s = &g_self;
    if (s->no_yield) return 0;
    /* BRAID_YIELD_SLOW_US=0, or the main thread: yield for BRAID_YIELD_US, whatever the state */
    if (!slow_ns || is_main_thread(s)) {
        s->yields++;
        sched_yield();
        return 1;
    }
    if (!braid_yield_allowed(s, now)) return 0;
    sched_yield();
    braid_yield_note(s, now, braid_now_ns() - now, slow_ns);
    return 1;
}

braid_yield_state_t *braid_yield_self(void)
{
    return &g_self;
}
