/* The measured choice between streaming and plain stores for send slots (core/ntpick.h):
 * the warm-up alternates the kinds; afterwards streaming stores only when their time per byte
 * is below 1 / BRAID_NT_PICK_FACTOR of the plain ones'; every BRAID_NT_PICK_EXPLORE-th copy
 * tries the other kind, so that a change of the machine is followed both ways; copies below
 * BRAID_NT_PICK_MIN are plain and untimed; braid_copy_picked copies every byte whatever it
 * picks (against a byte-by-byte reference). */
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
    }
    return streamed;
}

Test(ntpick, warmup_alternates_then_follows_the_faster_kind_by_the_margin)
{
    braid_nt_pick_t p;
    memset(&p, 0, sizeof(p));
    for (int i = 0; i < BRAID_NT_PICK_WARMUP; i++) {
        cr_assert_eq(braid_nt_pick_choose(&p), i & 1, "warm-up copy %d", i);
        braid_nt_pick_record(&p, i & 1, 4096, i & 1 ? 100 : 1000);
    }
    cr_assert_eq(braid_nt_pick_best(&p), 1, "streaming 10x faster");
    /* plain 2x slower only: within the margin, plain */
    memset(&p, 0, sizeof(p));
    int s = feed(&p, 4 * BRAID_NT_PICK_EXPLORE, 0.2, 0.1);
    cr_assert_eq(braid_nt_pick_best(&p), 0);
    cr_assert_eq(s, BRAID_NT_PICK_WARMUP / 2 + 4 - 1, "streamed %d: warm-up and explorations only",
                 s);
    /* plain 6x slower: streaming but for the explorations */
    memset(&p, 0, sizeof(p));
    s = feed(&p, 4 * BRAID_NT_PICK_EXPLORE, 0.6, 0.1);
    cr_assert_eq(braid_nt_pick_best(&p), 1);
    cr_assert_eq(s, 4 * BRAID_NT_PICK_EXPLORE - (BRAID_NT_PICK_WARMUP / 2 + 4 - 1), "streamed %d",
                 s);
    cr_assert_eq(p.count[0] + p.count[1], p.timed);
}

Test(ntpick, follows_the_machine_when_it_changes)
{
    braid_nt_pick_t p;
    memset(&p, 0, sizeof(p));
    feed(&p, 2 * BRAID_NT_PICK_EXPLORE, 0.6, 0.1); /* plain stores wait for invalidations */
    cr_assert_eq(braid_nt_pick_best(&p), 1);
    feed(&p, 8 * BRAID_NT_PICK_EXPLORE, 0.05, 0.1); /* they stopped waiting */
    cr_assert_eq(braid_nt_pick_best(&p), 0, "still streaming after plain stores got fast");
    feed(&p, 8 * BRAID_NT_PICK_EXPLORE, 0.6, 0.1); /* and again */
    cr_assert_eq(braid_nt_pick_best(&p), 1, "still plain after plain stores got slow");
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
    for (int rep = 0; rep < 2 * BRAID_NT_PICK_WARMUP; rep++)
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
