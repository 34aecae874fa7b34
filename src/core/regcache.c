/* The registration cache (see regcache.h). Entries sit in an array sorted by start address:
 * a lookup binary-searches the last entry starting at or below the address and walks down to
 * the first one that covers the whole range. Bounded (max_entries), so the walks are short. */
#include "core/regcache.h"

#include "core/log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uintptr_t start, end;
} range_t;

struct braid_regcache {
    braid_regcache_ops_t ops;
    pthread_mutex_t mu;
    braid_reg_entry_t **e; /* live entries, sorted by start */
    size_t n, cap;
    range_t *r; /* user ranges */
    size_t nr, rcap;
    uint64_t clock;
    braid_regcache_stats_t st;
};

braid_result_t braid_regcache_new(const braid_regcache_ops_t *ops, braid_regcache_t **rc_p)
{
    if (!ops || !ops->reg || !ops->dereg || ops->max_entries < 1 || !rc_p)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "regcache: incomplete ops");
    braid_regcache_t *rc = calloc(1, sizeof(*rc));
    if (!rc) return braid_set_error(BRAID_ERR_NOMEM, "regcache: out of memory");
    rc->ops = *ops;
    pthread_mutex_init(&rc->mu, NULL);
    *rc_p = rc;
    return BRAID_SUCCESS;
}

static void entry_drop(braid_regcache_t *rc, braid_reg_entry_t *e)
{
    rc->ops.dereg(rc->ops.ctx, e->handle);
    free(e);
}

void braid_regcache_free(braid_regcache_t *rc)
{
    if (!rc) return;
    for (size_t i = 0; i < rc->n; i++) {
        if (rc->e[i]->refs)
            braid_warn(NET, "regcache: registration of %#lx-%#lx still in use at teardown",
                       (unsigned long)rc->e[i]->start, (unsigned long)rc->e[i]->end);
        entry_drop(rc, rc->e[i]);
    }
    free(rc->e);
    free(rc->r);
    pthread_mutex_destroy(&rc->mu);
    free(rc);
}

/* Number of entries whose start is <= a. */
static size_t upper(const braid_regcache_t *rc, uintptr_t a)
{
    size_t lo = 0, hi = rc->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (rc->e[mid]->start <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static braid_reg_entry_t *find_entry(braid_regcache_t *rc, uintptr_t a, uintptr_t end)
{
    for (size_t i = upper(rc, a); i-- > 0;)
        if (rc->e[i]->end >= end) return rc->e[i];
    return NULL;
}

static void remove_at(braid_regcache_t *rc, size_t i)
{
    memmove(&rc->e[i], &rc->e[i + 1], (rc->n - i - 1) * sizeof(*rc->e));
    rc->n--;
}

/* Evicts the least recently used idle entry; 0 if every entry is in use. */
static int evict_one(braid_regcache_t *rc)
{
    size_t best = rc->n;
    for (size_t i = 0; i < rc->n; i++)
        if (!rc->e[i]->refs && (best == rc->n || rc->e[i]->last_use < rc->e[best]->last_use))
            best = i;
    if (best == rc->n) return 0;
    braid_reg_entry_t *e = rc->e[best];
    remove_at(rc, best);
    entry_drop(rc, e);
    rc->st.evictions++;
    return 1;
}

/* Registers [start, end) and inserts it (refs 0). */
static braid_result_t insert(braid_regcache_t *rc, uintptr_t start, uintptr_t end,
                             braid_reg_entry_t **e_p)
{
    while (rc->n >= rc->ops.max_entries && evict_one(rc)) {
    }
    if (rc->n == rc->cap) {
        size_t cap = rc->cap ? rc->cap * 2 : 16;
        braid_reg_entry_t **e = realloc(rc->e, cap * sizeof(*e));
        if (!e) return braid_set_error(BRAID_ERR_NOMEM, "regcache: out of memory");
        rc->e = e;
        rc->cap = cap;
    }
    braid_reg_entry_t *e = calloc(1, sizeof(*e));
    if (!e) return braid_set_error(BRAID_ERR_NOMEM, "regcache: out of memory");
    braid_result_t r = rc->ops.reg(rc->ops.ctx, (void *)start, end - start, &e->handle);
    if (r != BRAID_SUCCESS) {
        free(e);
        return r;
    }
    e->start = start;
    e->end = end;
    e->last_use = ++rc->clock;
    size_t i = upper(rc, start);
    memmove(&rc->e[i + 1], &rc->e[i], (rc->n - i) * sizeof(*rc->e));
    rc->e[i] = e;
    rc->n++;
    rc->st.registrations++;
    *e_p = e;
    return BRAID_SUCCESS;
}

static braid_result_t check_range(const void *addr, size_t len, uintptr_t *end_p)
{
    uintptr_t a = (uintptr_t)addr;
    if (!addr || !len)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "regcache: empty range %p + %zu", addr, len);
    if (a + len < a)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "regcache: range %p + %zu wraps", addr, len);
    *end_p = a + len;
    return BRAID_SUCCESS;
}

braid_result_t braid_regcache_add_range(braid_regcache_t *rc, void *addr, size_t len)
{
    uintptr_t end = 0;
    BRAID_CHECK(check_range(addr, len, &end));
    pthread_mutex_lock(&rc->mu);
    braid_result_t r = BRAID_SUCCESS;
    if (rc->nr == rc->rcap) {
        size_t cap = rc->rcap ? rc->rcap * 2 : 16;
        range_t *nr = realloc(rc->r, cap * sizeof(*nr));
        if (!nr) {
            r = braid_set_error(BRAID_ERR_NOMEM, "regcache: out of memory");
            goto out;
        }
        rc->r = nr;
        rc->rcap = cap;
    }
    braid_reg_entry_t *e = find_entry(rc, (uintptr_t)addr, end);
    if (!e) r = insert(rc, (uintptr_t)addr, end, &e);
    if (r == BRAID_SUCCESS) rc->r[rc->nr++] = (range_t){(uintptr_t)addr, end};
out:
    pthread_mutex_unlock(&rc->mu);
    return r;
}

braid_result_t braid_regcache_remove_range(braid_regcache_t *rc, void *addr, size_t len)
{
    uintptr_t a = (uintptr_t)addr, end = 0;
    BRAID_CHECK(check_range(addr, len, &end));
    pthread_mutex_lock(&rc->mu);
    size_t k = rc->nr;
    for (size_t i = 0; i < rc->nr && k == rc->nr; i++)
        if (rc->r[i].start == a && rc->r[i].end == end) k = i;
    if (k == rc->nr) {
        pthread_mutex_unlock(&rc->mu);
        return braid_set_error(BRAID_ERR_INVALID_ARG, "regcache: %p + %zu was not registered", addr,
                               len);
    }
    rc->r[k] = rc->r[--rc->nr];
    /* Invalidate every entry overlapping [a, end). */
    for (size_t i = 0; i < rc->n;) {
        braid_reg_entry_t *e = rc->e[i];
        if (e->start < end && e->end > a) {
            remove_at(rc, i);
            rc->st.invalidations++;
            if (e->refs)
                e->dead = 1;
            else
                entry_drop(rc, e);
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&rc->mu);
    return BRAID_SUCCESS;
}

braid_result_t braid_regcache_get(braid_regcache_t *rc, const void *addr, size_t len,
                                  braid_reg_entry_t **e_p)
{
    uintptr_t a = (uintptr_t)addr, end = 0;
    *e_p = NULL;
    BRAID_CHECK(check_range(addr, len, &end));
    pthread_mutex_lock(&rc->mu);
    braid_result_t r = BRAID_SUCCESS;
    braid_reg_entry_t *e = find_entry(rc, a, end);
    if (e) {
        rc->st.hits++;
    } else {
        const range_t *in = NULL;
        for (size_t i = 0; i < rc->nr && !in; i++)
            if (rc->r[i].start <= a && rc->r[i].end >= end) in = &rc->r[i];
        rc->st.misses++;
        if (in) r = insert(rc, in->start, in->end, &e);
    }
    if (e && r == BRAID_SUCCESS) {
        e->refs++;
        e->last_use = ++rc->clock;
        *e_p = e;
    }
    pthread_mutex_unlock(&rc->mu);
    return r;
}

void braid_regcache_put(braid_regcache_t *rc, braid_reg_entry_t *e)
{
    if (!e) return;
    pthread_mutex_lock(&rc->mu);
    if (e->refs > 0) e->refs--;
    if (e->dead && !e->refs) entry_drop(rc, e);
    pthread_mutex_unlock(&rc->mu);
}

void braid_regcache_stats(braid_regcache_t *rc, braid_regcache_stats_t *s)
{
    pthread_mutex_lock(&rc->mu);
    *s = rc->st;
    s->entries = rc->n;
    s->ranges = rc->nr;
    pthread_mutex_unlock(&rc->mu);
}
