/* A memory-registration cache (used by the rdma transport for its MRs; generic so it is
 * tested without a verbs device): registrations of address ranges, found by interval lookup,
 * refcounted while in use, bounded in entries with LRU eviction of idle ones.
 *
 * Safety against free(): lookups only succeed for memory inside a range the user added
 * (braid_comm_register: the user promises the memory stays allocated until
 * braid_comm_deregister). Memory outside every range misses (the caller uses its staging
 * buffers instead), and removing a range invalidates every entry overlapping it (deregistered
 * at once when idle, else when its last user puts it back), so a cached registration never
 * outlives the memory it maps. An evicted entry is simply registered again on the next lookup
 * (its range is still promised). Thread-safe (one mutex). */
#ifndef BRAID_CORE_REGCACHE_H
#define BRAID_CORE_REGCACHE_H

#include "braid/braid.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    /* Registers [addr, addr + len): *handle_p on success, else an error set with
     * braid_set_error. */
    braid_result_t (*reg)(void *ctx, void *addr, size_t len, void **handle_p);
    void (*dereg)(void *ctx, void *handle);
    void *ctx;
    size_t max_entries; /* registrations kept at most (idle ones evicted LRU first); >= 1 */
} braid_regcache_ops_t;

typedef struct braid_reg_entry {
    uintptr_t start, end; /* [start, end) */
    void *handle;         /* what ops.reg returned (an ibv_mr for rdma) */
    int refs;             /* users between get and put */
    int dead;             /* invalidated: deregistered when refs drops to 0 */
    uint64_t last_use;    /* LRU clock */
} braid_reg_entry_t;

typedef struct {
    uint64_t hits, misses, registrations, evictions, invalidations;
    size_t entries, ranges;
} braid_regcache_stats_t;

typedef struct braid_regcache braid_regcache_t;

braid_result_t braid_regcache_new(const braid_regcache_ops_t *ops, braid_regcache_t **rc_p);
/* Deregisters every entry (entries still in use are a caller bug: logged, deregistered). */
void braid_regcache_free(braid_regcache_t *rc);
/* Adds the user range [addr, addr + len) (len > 0) and registers it now, so errors (pinned
 * memory limits) show at registration time. */
braid_result_t braid_regcache_add_range(braid_regcache_t *rc, void *addr, size_t len);
/* Removes one range added with exactly these bounds and invalidates the entries overlapping
 * it. BRAID_ERR_INVALID_ARG if no such range. */
braid_result_t braid_regcache_remove_range(braid_regcache_t *rc, void *addr, size_t len);
/* The registration covering [addr, addr + len): a cached one, else one made now for the
 * whole user range containing it; *e_p = NULL (and BRAID_SUCCESS) when no user range contains
 * it. A non-NULL entry must be given back with braid_regcache_put. */
braid_result_t braid_regcache_get(braid_regcache_t *rc, const void *addr, size_t len,
                                  braid_reg_entry_t **e_p);
void braid_regcache_put(braid_regcache_t *rc, braid_reg_entry_t *e);
void braid_regcache_stats(braid_regcache_t *rc, braid_regcache_stats_t *s);

#endif
