/* The measured choice between streaming and plain stores (core/ntpick.h). */
#include "core/ntpick.h"
#include "core/copy.h"
#include "transport/transport.h" /* braid_now_ns */

const braid_nt_sched_t braid_nt_sched_copies = {BRAID_NT_PICK_TRIAL,
                                                BRAID_NT_PICK_SKIP,
                                                BRAID_NT_PICK_EXPLORE,
                                                BRAID_NT_PICK_EARLY,
                                                BRAID_NT_PICK_FACTOR,
                                                0,
                                                0};
/* Blocks of a direct collective (every rank runs the same blocks, so every rank follows the
 * same schedule; a call of many blocks explores within a call, one of one block per call):
 * a block's time depends on every rank's kind, so the runs that measure are shared, both
 * kinds in a fixed order, and only they count: a rank whose own average favoured the other
 * kind would otherwise slow its peers' blocks of the kind they took. The first 8 blocks take
 * `first` (a class's first calls meet cold caches and ranks that arrive apart); then a run of
 * 6 blocks of the kind not expected to win and 6 of the expected one, the first 2 of each
 * untimed (a block writes one of the two slots, so the first two meet lines the other kind
 * left), each kind's mean without its slowest block (a preemption) the run's figure; one more
 * run from block 32, then one every 512 blocks (6 of the slower kind, maybe 2x slower: +1.2%
 * of the time). */
const braid_nt_sched_t braid_nt_sched_blocks = {6, 2, 512, 1, 1.0, 1, 8};

static const braid_nt_sched_t *sched(const braid_nt_pick_t *p)
{
    return p->sched ? p->sched : &braid_nt_sched_copies;
}

int braid_nt_pick_best(const braid_nt_pick_t *p)
{
    if (p->ns_per_byte[0] <= 0 || p->ns_per_byte[1] <= 0) return p->first;
    if (p->rx_ns_per_byte[0] > 0 && p->rx_ns_per_byte[1] > 0)
        return p->ns_per_byte[1] + p->rx_ns_per_byte[1] < p->ns_per_byte[0] + p->rx_ns_per_byte[0];
    return p->ns_per_byte[1] * sched(p)->factor < p->ns_per_byte[0];
}

/* Where the t-th event lies in a run the schedule fixes: its position from the run's start, or
 * -1. Counted from `start` (before it: -1): the trial (2 * trial events), `early` runs from
 * 4 * trial on (each at twice the last), then one every `explore` events; a run is `trial`
 * events of the kind the picker does not take, or with a shared schedule 2 * trial events of
 * both kinds. */
static int64_t fixed_run(const braid_nt_sched_t *k, uint64_t t)
{
    if (t < k->start) return -1;
    t -= k->start;
    uint64_t len = (k->shared ? 2 : 1) * (uint64_t)k->trial;
    if (t < 2 * (uint64_t)k->trial) return (int64_t)t;
    if (t >= k->explore) return t % k->explore < len ? (int64_t)(t % k->explore) : -1;
    uint64_t s = 4 * (uint64_t)k->trial;
    for (uint32_t i = 0; i < k->early && s < k->explore; i++, s *= 2)
        if (t >= s && t < s + len) return (int64_t)(t - s);
    return -1;
}

/* Whether the t-th event is in the trial. */
static int in_trial(const braid_nt_sched_t *k, uint64_t t)
{
    return t >= k->start && t - k->start < 2 * (uint64_t)k->trial;
}

int braid_nt_pick_fixed(const braid_nt_pick_t *p)
{
    const braid_nt_sched_t *k = sched(p);
    int64_t r = fixed_run(k, p->timed);
    if (in_trial(k, p->timed) || (k->shared && r >= 0))
        return (r >= (int64_t)k->trial) ^ (p->first != 0) ^ (k->shared != 0);
    return -1;
}

int braid_nt_pick_choose(const braid_nt_pick_t *p)
{
    int f = braid_nt_pick_fixed(p);
    if (f >= 0) return f;
    int best = braid_nt_pick_best(p);
    return fixed_run(sched(p), p->timed) >= 0 ? !best : best;
}

void braid_nt_pick_record(braid_nt_pick_t *p, int nt, size_t bytes, uint64_t ns)
{
    const braid_nt_sched_t *k = sched(p);
    int64_t r = fixed_run(k, p->timed);
    nt = nt != 0;
    p->timed++;
    if (nt != p->last) p->run = 0;
    p->last = nt;
    double v = (double)(ns ? ns : 1) / (double)(bytes ? bytes : 1);
    if (k->shared) {
        /* Only the fixed runs count, where every rank used the same kind. Each kind's mean
         * over the run without its slowest event (one that met a preemption) is the run's
         * figure (run_mean), which braid_nt_pick_fold adds to the averages summed over the
         * ranks: not the fastest event, since with more ranks than cpus plain stores' times
         * spread widely, their best far below their mean. */
        if (r < 0) return;
        if (++p->run > k->skip) {
            p->run_sum[nt] += v;
            p->run_max[nt] = v > p->run_max[nt] ? v : p->run_max[nt];
            p->run_n[nt]++;
        }
        if (r + 1 < 2 * (int64_t)k->trial) return;
        p->folded_at = p->timed;
        for (int i = 0; i < 2; i++) {
            uint32_t m = p->run_n[i];
            p->run_mean[i] = m > 2 ? (p->run_sum[i] - p->run_max[i]) / (m - 1)
                             : m   ? p->run_sum[i] / m
                                   : 0;
            p->run_sum[i] = p->run_max[i] = 0;
            p->run_n[i] = 0;
        }
        return;
    }
    if (++p->run <= k->skip) return;
    double *avg = &p->ns_per_byte[nt];
    /* At most BRAID_NT_PICK_CLIP times the average (ntpick.h): a lasting change still moves
     * the average 1.75x per copy. */
    if (*avg > 0 && v > BRAID_NT_PICK_CLIP * *avg) v = BRAID_NT_PICK_CLIP * *avg;
    *avg = *avg > 0 ? 0.75 * *avg + 0.25 * v : v;
    p->count[nt]++;
}

void braid_nt_pick_fold(braid_nt_pick_t *p, const double sum[2])
{
    for (int i = 0; i < 2; i++) {
        double *avg = &p->ns_per_byte[i];
        if (sum[i] <= 0) continue;
        *avg = *avg > 0 ? 0.5 * *avg + 0.5 * sum[i] : sum[i];
        p->count[i]++;
    }
    p->adopted_at = p->folded_at;
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
