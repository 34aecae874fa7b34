/* The measured choice between streaming and plain stores for send slots (core/ntpick.h):
 * the warm-up is a run of plain stores, then a run of streaming ones; the first
 * BRAID_NT_PICK_SKIP copies of a run stay out of the averages; afterwards, with the receiver's
 * reported costs of both kinds, the kind of the lower sender + receiver cost, else streaming
 * stores only when their time per byte is below 1 / BRAID_NT_PICK_FACTOR of the plain ones';
 * the first BRAID_NT_PICK_TRIAL copies of every BRAID_NT_PICK_EXPLORE are a run of the other
 * kind (and BRAID_NT_PICK_EARLY runs before the first of them), so that a change of the machine
 * is followed both ways; copies below BRAID_NT_PICK_MIN
 * are plain and untimed; braid_copy_picked and braid_copy_from_picked copy every byte whatever
 * they pick (against a byte-by-byte reference). */
#include <criterion/criterion.h>

#include "core/ntpick.h"

#include <stdlib.h>
#include <string.h>

TestSuite(ntpick, .timeout = 60);

/* Runs k timed copies of 1 MiB through the picker with the given speeds (ns per byte of each
 * kind); returns how many were streaming. */
static int feed(braid_nt_pick_t *p, int k, double plain, double nt)
{
    int streamed = 0;
    for (int i = 0; i < k; i++) {
        int kind = braid_nt_pick_choose(p);
        streamed += kind;
        double per = kind ? nt : plain;
        braid_nt_pick_record(p, kind, 1 << 20, (uint64_t)(per * (1 << 20)));
        if (p->sched && p->sched->shared && p->folded_at == p->timed)
            braid_nt_pick_fold(p, p->run_mean); /* one rank's figures */
    }
    return streamed;
}

/* Streaming copies in k explorations after the warm-up (each a run of BRAID_NT_PICK_TRIAL). */
#define EXPLORED(k) ((k)*BRAID_NT_PICK_TRIAL)

Test(ntpick, warmup_runs_each_kind_then_follows_the_faster_by_the_margin)
{
    braid_nt_pick_t p;
    memset(&p, 0, sizeof(p));
    for (int i = 0; i < 2 * BRAID_NT_PICK_TRIAL; i++) {
        int want = i >= BRAID_NT_PICK_TRIAL;
        cr_assert_eq(braid_nt_pick_choose(&p), want, "warm-up copy %d", i);
        if (!p.count[1])
            cr_assert_eq(braid_nt_pick_best(&p), 0, "no choice before both kinds are averaged");
        braid_nt_pick_record(&p, want, 4096, want ? 100 : 1000);
    }
    cr_assert_eq(p.count[0], BRAID_NT_PICK_TRIAL - BRAID_NT_PICK_SKIP);
    cr_assert_eq(p.count[1], BRAID_NT_PICK_TRIAL - BRAID_NT_PICK_SKIP);
    cr_assert_eq(braid_nt_pick_best(&p), 1, "streaming 10x faster");
    /* plain 2x slower only: within the margin, plain */
    memset(&p, 0, sizeof(p));
    int k = 4 * BRAID_NT_PICK_EXPLORE, s = feed(&p, k, 0.2, 0.1);
    cr_assert_eq(braid_nt_pick_best(&p), 0);
    cr_assert_eq(s, BRAID_NT_PICK_TRIAL + EXPLORED(BRAID_NT_PICK_EARLY + 3),
                 "streamed %d: warm-up and explorations only", s);
    /* plain 6x slower: streaming but for the explorations (and the warm-up's plain run) */
    memset(&p, 0, sizeof(p));
    s = feed(&p, k, 0.6, 0.1);
    cr_assert_eq(braid_nt_pick_best(&p), 1);
    cr_assert_eq(s, k - BRAID_NT_PICK_TRIAL - EXPLORED(BRAID_NT_PICK_EARLY + 3), "streamed %d", s);
    cr_assert_eq(p.timed, (uint64_t)k);
}

/* The first copies of a run write slots the other kind left behind: they stay out of the
 * averages, so a slow start of a run does not condemn its kind. */
Test(ntpick, first_copies_of_a_run_stay_out_of_the_averages)
{
    braid_nt_pick_t p;
    memset(&p, 0, sizeof(p));
    for (int i = 0; i < 2 * BRAID_NT_PICK_TRIAL; i++) {
        int nt = i >= BRAID_NT_PICK_TRIAL, pos = i % BRAID_NT_PICK_TRIAL;
        /* streaming copies 20x slower in their run's first BRAID_NT_PICK_SKIP, 4x faster after */
        uint64_t ns = nt ? (pos < BRAID_NT_PICK_SKIP ? 20000 : 250) : 1000;
        braid_nt_pick_record(&p, nt, 1000, ns);
    }
    cr_assert_float_eq(p.ns_per_byte[1], 0.25, 1e-9, "streaming average %g", p.ns_per_byte[1]);
    cr_assert_float_eq(p.ns_per_byte[0], 1.0, 1e-9);
    cr_assert_eq(braid_nt_pick_best(&p), 1);
    /* a single copy of the other kind ends the run: the next streaming ones are skipped again */
    braid_nt_pick_record(&p, 0, 1000, 1000);
    uint64_t before = p.count[1];
    for (int i = 0; i < BRAID_NT_PICK_SKIP; i++)
        braid_nt_pick_record(&p, 1, 1000, 1000000);
    cr_assert_eq(p.count[1], before);
    cr_assert_float_eq(p.ns_per_byte[1], 0.25, 1e-9);
}

/* The receiver's reported cost decides once it has both kinds: session 14's machine, where the
 * sender timed streaming stores only 1.6x faster (within the margin) but the receiver read
 * their data 2x faster too; and the other way, streaming stores 6x faster for the sender but
 * 10x slower to read. */
Test(ntpick, receiver_costs_count_once_both_are_reported)
{
    braid_nt_pick_t p;
    memset(&p, 0, sizeof(p));
    feed(&p, 2 * BRAID_NT_PICK_TRIAL, 0.16, 0.1);
    cr_assert_eq(braid_nt_pick_best(&p), 0, "sender alone: within the margin");
    p.rx_ns_per_byte[1] = 0.03;
    cr_assert_eq(braid_nt_pick_best(&p), 0, "one kind reported only: the margin still rules");
    p.rx_ns_per_byte[0] = 0.06;
    cr_assert_eq(braid_nt_pick_best(&p), 1, "0.13 against 0.22 ns/B: streaming");
    memset(&p, 0, sizeof(p));
    feed(&p, 2 * BRAID_NT_PICK_TRIAL, 0.6, 0.1);
    cr_assert_eq(braid_nt_pick_best(&p), 1);
    p.rx_ns_per_byte[0] = 0.05;
    p.rx_ns_per_byte[1] = 1.0;
    cr_assert_eq(braid_nt_pick_best(&p), 0, "1.1 against 0.65 ns/B: plain");
}

Test(ntpick, follows_the_machine_when_it_changes)
{
    braid_nt_pick_t p;
    memset(&p, 0, sizeof(p));
    feed(&p, 2 * BRAID_NT_PICK_EXPLORE, 0.6, 0.1); /* plain stores wait for invalidations */
    cr_assert_eq(braid_nt_pick_best(&p), 1);
    feed(&p, 4 * BRAID_NT_PICK_EXPLORE, 0.05, 0.1); /* they stopped waiting */
    cr_assert_eq(braid_nt_pick_best(&p), 0, "still streaming after plain stores got fast");
    feed(&p, 4 * BRAID_NT_PICK_EXPLORE, 0.6, 0.1); /* and again */
    cr_assert_eq(braid_nt_pick_best(&p), 1, "still plain after plain stores got slow");
}

/* One copy that took 1000x its kind's time (the process was preempted in it) does not turn the
 * picker: its sample counts at most BRAID_NT_PICK_CLIP times the kind's average. */
Test(ntpick, one_preempted_copy_does_not_turn_the_picker)
{
    braid_nt_pick_t p;
    memset(&p, 0, sizeof(p));
    feed(&p, 600, 1.0, 0.1); /* past the early run at 512, before the one at 1024 */
    cr_assert_eq(braid_nt_pick_best(&p), 1);
    int kind = braid_nt_pick_choose(&p);
    cr_assert_eq(kind, 1, "outside a run of plain stores");
    braid_nt_pick_record(&p, kind, 1 << 20, (uint64_t)(100.0 * (1 << 20)));
    cr_assert(p.ns_per_byte[1] < 0.2, "streaming average %g ns/B after one 100 ns/B copy",
              p.ns_per_byte[1]);
    cr_assert_eq(braid_nt_pick_best(&p), 1, "turned to plain stores by one slow copy");
    int s = feed(&p, 100, 1.0, 0.1);
    cr_assert_eq(s, 100, "%d of the next 100 copies streaming", s);
    /* a lasting slowdown of the same size is followed within 3 copies (0.1 -> 0.175 -> 0.306
     * -> 0.536 ns/B, against plain's 1.0 with the sender's margin of 3) */
    feed(&p, 3, 1.0, 100.0);
    cr_assert_eq(braid_nt_pick_best(&p), 0, "streaming at 100 ns/B for 3 copies: still taken");
}

static void fill(unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        b[i] = (unsigned char)(seed >> 24);
    }
}

Test(ntpick, copies_every_byte_below_and_above_the_timed_size)
{
    size_t cap = 3 * BRAID_NT_PICK_MIN + 256;
    unsigned char *src = malloc(cap), *dst = malloc(cap);
    cr_assert(src && dst);
    fill(src, cap, 5);
    braid_nt_pick_t p;
    memset(&p, 0, sizeof(p));
    size_t sizes[] = {0,
                      1,
                      100,
                      BRAID_NT_PICK_MIN - 1,
                      BRAID_NT_PICK_MIN,
                      BRAID_NT_PICK_MIN + 77,
                      3 * BRAID_NT_PICK_MIN + 5};
    uint64_t timed = 0;
    for (int rep = 0; rep < 2 * BRAID_NT_PICK_TRIAL; rep++)
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
            size_t n = sizes[k], so = (size_t)rep % 7, dop = (size_t)(rep * 3 + (int)k) % 11;
            memset(dst, 0xa5, cap);
            braid_copy_picked(&p, dst + dop, src + so, n);
            for (size_t i = 0; i < cap; i++) {
                int in = i >= dop && i < dop + n;
                unsigned char want = in ? src[so + i - dop] : 0xa5;
                if (dst[i] != want)
                    cr_assert_fail("n %zu (copy %llu): byte %zu is %#x, expected %#x", n,
                                   (unsigned long long)p.timed, i, dst[i], want);
            }
            timed += n >= BRAID_NT_PICK_MIN;
        }
    cr_assert_eq(p.timed, timed, "timed %llu copies, expected %llu", (unsigned long long)p.timed,
                 (unsigned long long)timed);
    cr_assert(p.count[0] > 0 && p.count[1] > 0, "both kinds ran: %llu plain, %llu streaming",
              (unsigned long long)p.count[0], (unsigned long long)p.count[1]);
    free(src);
    free(dst);
}

/* The receiving end: every byte copied whatever the kind; untimed below BRAID_NT_PICK_MIN (0
 * reported), and a cost reported only past the first BRAID_NT_PICK_SKIP copies of a kind. */
Test(ntpick, receiver_copies_every_byte_and_reports_past_the_skip)
{
    size_t cap = 2 * BRAID_NT_PICK_MIN + 64;
    unsigned char *src = malloc(cap), *dst = malloc(cap);
    cr_assert(src && dst);
    fill(src, cap, 9);
    braid_nt_pick_t rx;
    memset(&rx, 0, sizeof(rx));
    for (int i = 0; i < 3 * BRAID_NT_PICK_SKIP; i++) {
        size_t n = i % 3 == 0 ? BRAID_NT_PICK_MIN - 1 : 2 * BRAID_NT_PICK_MIN + 3 + (size_t)i;
        if (n > cap - 8) n = cap - 8;
        size_t so = (size_t)i % 5, dop = (size_t)i % 7;
        memset(dst, 0x5a, cap);
        uint64_t ps = braid_copy_from_picked(&rx, dst + dop, src + so, n, 1);
        for (size_t b = 0; b < cap; b++) {
            int in = b >= dop && b < dop + n;
            if (dst[b] != (in ? src[so + b - dop] : 0x5a))
                cr_assert_fail("copy %d (n %zu): byte %zu wrong", i, n, b);
        }
        if (n < BRAID_NT_PICK_MIN)
            cr_assert_eq(ps, 0, "copy %d below the timed size reported %llu", i,
                         (unsigned long long)ps);
        else
            cr_assert_eq(ps != 0, rx.count[1] > 0, "copy %d: reported %llu with %llu averaged", i,
                         (unsigned long long)ps, (unsigned long long)rx.count[1]);
    }
    cr_assert_eq(rx.count[1], rx.timed - BRAID_NT_PICK_SKIP);
    cr_assert_eq(rx.count[0], 0);
    free(src);
    free(dst);
}

/* A warm-up misled by cold slots (plain stores timed 10x slower than they are) is corrected at
 * the first early exploration, long before copy BRAID_NT_PICK_EXPLORE. */
Test(ntpick, a_misled_warmup_is_corrected_early)
{
    braid_nt_pick_t p;
    memset(&p, 0, sizeof(p));
    feed(&p, BRAID_NT_PICK_TRIAL, 1.0, 0.1); /* the plain run, cold */
    feed(&p, BRAID_NT_PICK_TRIAL, 1.0, 0.2); /* the streaming run */
    cr_assert_eq(braid_nt_pick_best(&p), 1, "misled: streaming");
    feed(&p, 4 * BRAID_NT_PICK_TRIAL + BRAID_NT_PICK_TRIAL - 2 * BRAID_NT_PICK_TRIAL, 0.05, 0.2);
    cr_assert_eq(p.timed, 5 * BRAID_NT_PICK_TRIAL);
    cr_assert_eq(braid_nt_pick_best(&p), 0, "after the run from copy 64: plain, %g vs %g ns/B",
                 p.ns_per_byte[0], p.ns_per_byte[1]);
}

/* Where event t lies in a fixed run of schedule k (from the run's start), or -1: written out
 * from ntpick.h's description, apart from the code. */
static int64_t run_pos(const braid_nt_sched_t *k, uint64_t t)
{
    if (t < k->start) return -1;
    uint64_t u = t - k->start, len = 2 * (uint64_t)k->trial;
    if (u < len) return (int64_t)u;
    if (u >= k->explore) return u % k->explore < len ? (int64_t)(u % k->explore) : -1;
    for (uint64_t i = 0, s = 4 * (uint64_t)k->trial; i < k->early; i++, s *= 2)
        if (u >= s && u < s + len) return (int64_t)(u - s);
    return -1;
}

/* The blocks' schedule (shared by every rank of a direct collective): `start` events of the
 * first kind, then fixed runs (the trial, `early` runs, then one every `explore` events) that
 * each take both kinds, the one not expected to win (not `first`) first, whatever the averages
 * say, and braid_nt_pick_fixed names their kind (-1 elsewhere); only those runs count: each
 * kind's mean over a run without its slowest timed event is the run's figure, folded into the
 * averages (here as one rank's sum); outside them the picker takes the lower average. */
Test(ntpick, blocks_schedule_fixes_shared_runs_and_averages_only_them)
{
    const braid_nt_sched_t *k = &braid_nt_sched_blocks;
    cr_assert(k->shared && k->trial >= 2 && k->skip < k->trial && k->explore > 16 * k->trial);
    for (int first = 0; first < 2; first++) {
        braid_nt_pick_t p;
        memset(&p, 0, sizeof(p));
        p.sched = k;
        p.first = first;
        cr_assert_eq(braid_nt_pick_best(&p), first, "no averages yet: the first kind");
        uint64_t fixed = 0, other = 0, total = 3 * (uint64_t)k->explore;
        for (uint64_t t = 0; t < total; t++) {
            int f = braid_nt_pick_fixed(&p), kind = braid_nt_pick_choose(&p);
            int64_t pos = run_pos(k, t);
            int in_run = pos >= 0;
            cr_assert_eq(f >= 0, in_run, "event %llu: fixed %d", (unsigned long long)t, f);
            if (in_run) {
                /* the kind not expected to win first */
                int want = (pos >= (int64_t)k->trial) ^ first ^ 1;
                cr_assert_eq(f, want, "event %llu", (unsigned long long)t);
                cr_assert_eq(kind, f);
                fixed++;
            } else {
                /* the first kind before the trial; then streaming, twice as fast */
                cr_assert_eq(kind, t < k->start ? first : 1, "event %llu outside the runs",
                             (unsigned long long)t);
            }
            other += in_run && kind == 0;
            /* streaming 1 ns/B; plain 2 ns/B, except one slow event per run half (a
             * preemption); outside the fixed runs 100x faster, which must not count */
            double per = kind ? 1.0 : 2.0;
            if (!in_run) per = 0.01;
            if (in_run && pos % k->trial == k->trial - 1) per *= 10.0;
            braid_nt_pick_record(&p, kind, 1 << 20, (uint64_t)(per * (1 << 20)));
            if (p.folded_at == p.timed) braid_nt_pick_fold(&p, p.run_mean); /* one rank */
        }
        cr_assert_float_eq(p.ns_per_byte[1], 1.0, 1e-9, "streaming average %g", p.ns_per_byte[1]);
        cr_assert_float_eq(p.ns_per_byte[0], 2.0, 1e-9, "plain average %g", p.ns_per_byte[0]);
        cr_assert_eq(p.count[0], p.count[1], "one average per kind and run");
        cr_assert_eq(p.count[0], fixed / (2 * k->trial), "%llu runs",
                     (unsigned long long)p.count[0]);
        cr_assert_eq(other, fixed / 2, "half of every run plain");
    }
}

/* A shared schedule follows a change of the machine at its next fixed run: plain stores become
 * faster, and after the next run's averages (at most `explore` calls later, the average halves
 * the distance per run) the picker takes them. */
Test(ntpick, blocks_schedule_follows_a_change_at_the_next_runs)
{
    braid_nt_pick_t p;
    memset(&p, 0, sizeof(p));
    p.sched = &braid_nt_sched_blocks;
    p.first = 0;
    uint32_t e = braid_nt_sched_blocks.explore;
    feed(&p, (int)e, 2.0, 1.0);
    cr_assert_eq(braid_nt_pick_best(&p), 1);
    int streamed = feed(&p, (int)(4 * e), 0.25, 1.0);
    cr_assert_eq(braid_nt_pick_best(&p), 0, "plain 4x faster now");
    cr_assert_lt(streamed, (int)(2 * e), "followed within two periods (%d streaming)", streamed);
}
