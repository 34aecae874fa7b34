/* The registration cache (src/core/regcache.c, suite "regcache") with a fake registrar that
 * records every live registration: interval lookups (hits inside a registered range, misses
 * outside every user range), refcounts, the entry bound with LRU eviction of idle entries,
 * invalidation when a range is removed (at once when idle, at the last put when in use), a
 * failing registrar, and teardown leaving nothing registered. */
#include "core/regcache.h"
#include "core/log.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int live; /* registrations not deregistered */
    int regs, deregs;
    int fail_next; /* make the next reg fail */
    uintptr_t last_start;
    size_t last_len;
} fake_t;

typedef struct {
    uintptr_t start;
    size_t len;
} fake_mr_t;

static braid_result_t fake_reg(void *ctx, void *addr, size_t len, void **h)
{
    fake_t *f = ctx;
    if (f->fail_next) {
        f->fail_next = 0;
        return braid_set_error(BRAID_ERR_SYSTEM, "fake: cannot pin %zu bytes", len);
    }
    fake_mr_t *m = malloc(sizeof(*m));
    m->start = (uintptr_t)addr;
    m->len = len;
    f->live++;
    f->regs++;
    f->last_start = m->start;
    f->last_len = len;
    *h = m;
    return BRAID_SUCCESS;
}

static void fake_dereg(void *ctx, void *h)
{
    fake_t *f = ctx;
    f->live--;
    f->deregs++;
    free(h);
}

static braid_regcache_t *mk(fake_t *f, size_t max)
{
    memset(f, 0, sizeof(*f));
    braid_regcache_ops_t ops = {.reg = fake_reg, .dereg = fake_dereg, .ctx = f, .max_entries = max};
    braid_regcache_t *rc = NULL;
    cr_assert_eq(braid_regcache_new(&ops, &rc), BRAID_SUCCESS);
    return rc;
}

static char mem[1 << 16];

Test(regcache, lookup_inside_and_outside_ranges)
{
    fake_t f;
    braid_regcache_t *rc = mk(&f, 8);
    cr_assert_eq(braid_regcache_add_range(rc, mem + 4096, 8192), BRAID_SUCCESS);
    cr_expect_eq(f.regs, 1, "registered at add time");
    braid_reg_entry_t *e;
    /* Inside: a hit on the range's registration. */
    cr_assert_eq(braid_regcache_get(rc, mem + 5000, 100, &e), BRAID_SUCCESS);
    cr_assert_not_null(e);
    cr_expect_eq(e->start, (uintptr_t)(mem + 4096));
    cr_expect_eq(e->end, (uintptr_t)(mem + 4096 + 8192));
    cr_expect_eq(((fake_mr_t *)e->handle)->len, 8192);
    cr_expect_eq(e->refs, 1);
    braid_regcache_put(rc, e);
    cr_expect_eq(e->refs, 0);
    /* The exact range, then one byte past its end: the latter is a miss (not registered). */
    cr_assert_eq(braid_regcache_get(rc, mem + 4096, 8192, &e), BRAID_SUCCESS);
    cr_expect_not_null(e);
    braid_regcache_put(rc, e);
    cr_assert_eq(braid_regcache_get(rc, mem + 4096, 8193, &e), BRAID_SUCCESS);
    cr_expect_null(e, "a range reaching past the user range must miss");
    cr_assert_eq(braid_regcache_get(rc, mem + 100, 10, &e), BRAID_SUCCESS);
    cr_expect_null(e, "memory never registered must miss");
    braid_regcache_stats_t s;
    braid_regcache_stats(rc, &s);
    cr_expect_eq(s.hits, 2);
    cr_expect_eq(s.misses, 2);
    cr_expect_eq(f.regs, 1, "no registration for misses");
    braid_regcache_free(rc);
    cr_expect_eq(f.live, 0);
}

Test(regcache, many_ranges_sorted_lookup)
{
    fake_t f;
    braid_regcache_t *rc = mk(&f, 64);
    /* 32 disjoint ranges added in a scrambled order. */
    for (int k = 0; k < 32; k++) {
        int i = (k * 13) % 32;
        cr_assert_eq(braid_regcache_add_range(rc, mem + i * 1024, 1000), BRAID_SUCCESS);
    }
    for (int i = 0; i < 32; i++) {
        braid_reg_entry_t *e;
        cr_assert_eq(braid_regcache_get(rc, mem + i * 1024 + 10, 990, &e), BRAID_SUCCESS);
        cr_assert_not_null(e, "range %d", i);
        cr_expect_eq(e->start, (uintptr_t)(mem + i * 1024), "range %d", i);
        braid_regcache_put(rc, e);
        /* The 24-byte gap after each range is not registered. */
        cr_assert_eq(braid_regcache_get(rc, mem + i * 1024 + 1000, 1, &e), BRAID_SUCCESS);
        cr_expect_null(e, "gap after range %d", i);
    }
    cr_expect_eq(f.regs, 32);
    braid_regcache_free(rc);
    cr_expect_eq(f.live, 0);
}

Test(regcache, bounded_with_lru_eviction_of_idle_entries)
{
    fake_t f;
    braid_regcache_t *rc = mk(&f, 3);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(braid_regcache_add_range(rc, mem + i * 4096, 4096), BRAID_SUCCESS);
    braid_reg_entry_t *e0, *e1, *e;
    /* Use 0 then 1: 2 is now the least recently used. */
    cr_assert_eq(braid_regcache_get(rc, mem, 10, &e0), BRAID_SUCCESS);
    braid_regcache_put(rc, e0);
    cr_assert_eq(braid_regcache_get(rc, mem + 4096, 10, &e1), BRAID_SUCCESS);
    braid_regcache_put(rc, e1);
    /* A fourth range evicts 2. */
    cr_assert_eq(braid_regcache_add_range(rc, mem + 3 * 4096, 4096), BRAID_SUCCESS);
    braid_regcache_stats_t s;
    braid_regcache_stats(rc, &s);
    cr_expect_eq(s.entries, 3);
    cr_expect_eq(s.evictions, 1);
    cr_expect_eq(f.live, 3);
    /* Range 2 is still promised by the user: a lookup registers it again (evicting 0, the
     * LRU one now). */
    int regs = f.regs;
    cr_assert_eq(braid_regcache_get(rc, mem + 2 * 4096 + 1, 10, &e), BRAID_SUCCESS);
    cr_assert_not_null(e);
    cr_expect_eq(f.regs, regs + 1);
    cr_expect_eq(f.last_start, (uintptr_t)(mem + 2 * 4096));
    cr_expect_eq(f.last_len, 4096);
    /* Entries in use are never evicted: hold 2, 1 and 3; a new range exceeds the bound. */
    braid_reg_entry_t *h1, *h3;
    cr_assert_eq(braid_regcache_get(rc, mem + 4096, 1, &h1), BRAID_SUCCESS);
    cr_assert_eq(braid_regcache_get(rc, mem + 3 * 4096, 1, &h3), BRAID_SUCCESS);
    cr_assert_not_null(h1);
    cr_assert_not_null(h3);
    cr_assert_eq(braid_regcache_add_range(rc, mem + 8 * 4096, 4096), BRAID_SUCCESS);
    braid_regcache_stats(rc, &s);
    cr_expect_eq(s.entries, 4, "over the bound while all are in use");
    cr_expect_eq(f.live, 4);
    braid_regcache_put(rc, e);
    braid_regcache_put(rc, h1);
    braid_regcache_put(rc, h3);
    braid_regcache_free(rc);
    cr_expect_eq(f.live, 0);
}

Test(regcache, remove_invalidates_idle_at_once_busy_at_last_put)
{
    fake_t f;
    braid_regcache_t *rc = mk(&f, 8);
    cr_assert_eq(braid_regcache_add_range(rc, mem, 4096), BRAID_SUCCESS);
    cr_assert_eq(braid_regcache_add_range(rc, mem + 8192, 4096), BRAID_SUCCESS);
    /* Idle: deregistered by the remove, and later lookups miss. */
    cr_assert_eq(braid_regcache_remove_range(rc, mem, 4096), BRAID_SUCCESS);
    cr_expect_eq(f.live, 1);
    braid_reg_entry_t *e;
    cr_assert_eq(braid_regcache_get(rc, mem + 1, 1, &e), BRAID_SUCCESS);
    cr_expect_null(e, "a removed range must miss (its memory may be freed)");
    /* In use: stays registered until the put, but is no longer found. */
    braid_reg_entry_t *busy;
    cr_assert_eq(braid_regcache_get(rc, mem + 8192, 64, &busy), BRAID_SUCCESS);
    cr_assert_not_null(busy);
    cr_assert_eq(braid_regcache_remove_range(rc, mem + 8192, 4096), BRAID_SUCCESS);
    cr_expect_eq(f.live, 1, "in use: not deregistered under its user");
    cr_assert_eq(braid_regcache_get(rc, mem + 8192, 64, &e), BRAID_SUCCESS);
    cr_expect_null(e);
    braid_regcache_put(rc, busy);
    cr_expect_eq(f.live, 0, "deregistered at the last put");
    braid_regcache_stats_t s;
    braid_regcache_stats(rc, &s);
    cr_expect_eq(s.invalidations, 2);
    cr_expect_eq(s.ranges, 0);
    /* Removing what is not there, or with other bounds, is an error naming it. */
    cr_expect_eq(braid_regcache_remove_range(rc, mem, 4096), BRAID_ERR_INVALID_ARG);
    cr_expect(strstr(braid_last_error(), "was not registered"), "%s", braid_last_error());
    braid_regcache_free(rc);
    cr_expect_eq(f.deregs, f.regs);
}

Test(regcache, overlapping_ranges_and_removal)
{
    fake_t f;
    braid_regcache_t *rc = mk(&f, 8);
    /* A big range and a sub-range (the user registered both): removing the sub-range drops
     * the overlapping registrations; the big range is registered again when used. */
    cr_assert_eq(braid_regcache_add_range(rc, mem, 16384), BRAID_SUCCESS);
    cr_assert_eq(braid_regcache_add_range(rc, mem + 4096, 4096), BRAID_SUCCESS);
    cr_expect_eq(f.regs, 1, "the sub-range is covered by the big range's registration");
    cr_assert_eq(braid_regcache_remove_range(rc, mem + 4096, 4096), BRAID_SUCCESS);
    cr_expect_eq(f.live, 0);
    braid_reg_entry_t *e;
    cr_assert_eq(braid_regcache_get(rc, mem + 4100, 8, &e), BRAID_SUCCESS);
    cr_assert_not_null(e, "still inside the big range");
    cr_expect_eq(e->end - e->start, 16384);
    braid_regcache_put(rc, e);
    braid_regcache_free(rc);
    cr_expect_eq(f.live, 0);
}

Test(regcache, errors)
{
    fake_t f;
    braid_regcache_t *rc = mk(&f, 4);
    braid_reg_entry_t *e;
    cr_expect_eq(braid_regcache_add_range(rc, NULL, 10), BRAID_ERR_INVALID_ARG);
    cr_expect_eq(braid_regcache_add_range(rc, mem, 0), BRAID_ERR_INVALID_ARG);
    cr_expect_eq(braid_regcache_add_range(rc, (void *)(UINTPTR_MAX - 10), 100),
                 BRAID_ERR_INVALID_ARG);
    cr_expect_eq(braid_regcache_get(rc, mem, 0, &e), BRAID_ERR_INVALID_ARG);
    /* A registrar failure is reported and leaves no range behind. */
    f.fail_next = 1;
    cr_expect_eq(braid_regcache_add_range(rc, mem, 4096), BRAID_ERR_SYSTEM);
    cr_expect(strstr(braid_last_error(), "cannot pin"), "%s", braid_last_error());
    cr_assert_eq(braid_regcache_get(rc, mem, 1, &e), BRAID_SUCCESS);
    cr_expect_null(e);
    braid_regcache_stats_t s;
    braid_regcache_stats(rc, &s);
    cr_expect_eq(s.ranges, 0);
    braid_regcache_ops_t bad = {.reg = fake_reg, .dereg = fake_dereg, .max_entries = 0};
    braid_regcache_t *rc2 = NULL;
    cr_expect_eq(braid_regcache_new(&bad, &rc2), BRAID_ERR_INVALID_ARG);
    braid_regcache_free(rc);
    cr_expect_eq(f.live, 0);
}
