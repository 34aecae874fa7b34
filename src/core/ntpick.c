/* The measured choice between streaming and plain stores (core/ntpick.h). */
#include "core/ntpick.h"
#include "core/copy.h"
#include "transport/transport.h" /* braid_now_ns */

int braid_nt_pick_best(const braid_nt_pick_t *p)
{
    if (p->ns_per_byte[0] <= 0 || p->ns_per_byte[1] <= 0) return 0;
    if (p->rx_ns_per_byte[0] > 0 && p->rx_ns_per_byte[1] > 0)
        return p->ns_per_byte[1] + p->rx_ns_per_byte[1] < p->ns_per_byte[0] + p->rx_ns_per_byte[0];
    return p->ns_per_byte[1] * BRAID_NT_PICK_FACTOR < p->ns_per_byte[0];
}

/* Whether the t-th timed copy belongs to an exploration run (ntpick.h). */
static int exploring(uint64_t t)
{
    if (t >= BRAID_NT_PICK_EXPLORE) return t % BRAID_NT_PICK_EXPLORE < BRAID_NT_PICK_TRIAL;
    for (uint64_t s = 4 * BRAID_NT_PICK_TRIAL; s < BRAID_NT_PICK_EXPLORE; s *= 2)
        if (t >= s && t < s + BRAID_NT_PICK_TRIAL) return 1;
    return 0;
}

int braid_nt_pick_choose(const braid_nt_pick_t *p)
{
    if (p->timed < 2 * BRAID_NT_PICK_TRIAL) return p->timed >= BRAID_NT_PICK_TRIAL;
    int best = braid_nt_pick_best(p);
    return exploring(p->timed) ? !best : best;
}

void braid_nt_pick_record(braid_nt_pick_t *p, int nt, size_t bytes, uint64_t ns)
{
    nt = nt != 0;
    p->timed++;
    if (nt != p->last) p->run = 0;
    p->last = nt;
    if (++p->run <= BRAID_NT_PICK_SKIP) return;
    double v = (double)(ns ? ns : 1) / (double)(bytes ? bytes : 1), *avg = &p->ns_per_byte[nt];
    *avg = *avg > 0 ? 0.75 * *avg + 0.25 * v : v;
    p->count[nt]++;
}

int braid_copy_picked(braid_nt_pick_t *p, void *dst, const void *src, size_t n)
{
    if (n < BRAID_NT_PICK_MIN) {
        braid_copy(dst, src, n);
        return 0;
    }
    int nt = braid_nt_pick_choose(p);
    uint64_t t0 = braid_now_ns();
    braid_copy_shared(dst, src, n, nt);
    braid_nt_pick_record(p, nt, n, braid_now_ns() - t0);
    return nt;
}

uint64_t braid_copy_from_picked(braid_nt_pick_t *rx, void *dst, const void *src, size_t n, int nt)
{
    if (n < BRAID_NT_PICK_MIN) {
        braid_copy(dst, src, n);
        return 0;
    }
    uint64_t t0 = braid_now_ns();
    braid_copy(dst, src, n);
    braid_nt_pick_record(rx, nt, n, braid_now_ns() - t0);
    return (uint64_t)(rx->ns_per_byte[nt != 0] * 1000.0 + 0.5);
}
