/* The measured choice between streaming and plain stores (core/ntpick.h). */
#include "core/ntpick.h"
#include "core/copy.h"
#include "transport/transport.h" /* braid_now_ns */

int braid_nt_pick_best(const braid_nt_pick_t *p)
{
    if (p->timed < BRAID_NT_PICK_WARMUP || p->ns_per_byte[0] <= 0 || p->ns_per_byte[1] <= 0)
        return 0;
    return p->ns_per_byte[1] * BRAID_NT_PICK_FACTOR < p->ns_per_byte[0];
}

int braid_nt_pick_choose(const braid_nt_pick_t *p)
{
    if (p->timed < BRAID_NT_PICK_WARMUP) return (int)(p->timed & 1);
    int best = braid_nt_pick_best(p);
    return p->timed % BRAID_NT_PICK_EXPLORE == 0 ? !best : best;
}

void braid_nt_pick_record(braid_nt_pick_t *p, int nt, size_t bytes, uint64_t ns)
{
    nt = nt != 0;
    double v = (double)(ns ? ns : 1) / (double)(bytes ? bytes : 1), *avg = &p->ns_per_byte[nt];
    *avg = *avg > 0 ? 0.75 * *avg + 0.25 * v : v;
    p->timed++;
    p->count[nt]++;
}

void braid_copy_picked(braid_nt_pick_t *p, void *dst, const void *src, size_t n)
{
    if (n < BRAID_NT_PICK_MIN) {
        braid_copy(dst, src, n);
        return;
    }
    int nt = braid_nt_pick_choose(p);
    uint64_t t0 = braid_now_ns();
    braid_copy_shared(dst, src, n, nt);
    braid_nt_pick_record(p, nt, n, braid_now_ns() - t0);
}
