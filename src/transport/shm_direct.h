/* Direct shared-memory segments (the shm transport's mapping for single-copy collectives).
 *
 * On a communicator whose ranks all share one host, every rank creates one segment at init
 * and maps every other rank's: each rank then reads its peers' data in place, with no FIFO
 * between them (algos/direct.c runs the collectives on it). A segment holds a control page
 * (failure notice, sleepers count) and two slots; a slot is a 64-byte line (a progress tag,
 * the call's descriptor and the first BRAID_DIRECT_INLINE payload bytes) followed by
 * `block` bytes of data. Only the owner writes its segment's lines and data; peers only read
 * them (and count themselves in `sleepers` before a futex sleep).
 *
 * Tags: each rank counts the blocks it ran on the communicator (g, the same on every rank
 * since every rank runs the same calls) and publishes block g's progress in slot g % 2's tag
 * with a release store (2g + 1: the input is in, 2g + 2: its reduced slice is in); readers
 * compare with a wrap-safe difference. 2g + 2 is 0 once in 2^31 blocks, so a tag of 0 never
 * means "no block" by itself: the algorithms count blocks, braid_direct_peek also asks whether
 * the owner ever published 0. A slot is rewritten for block g + 2 only, which needs
 * every peer past block g + 1: so a tag seen is never stale and data never overwritten under a
 * reader (algos/direct.c gives the argument per collective).
 *
 * Setup is collective (two bootstrap allgathers); a rank that cannot create or map a segment
 * makes every rank go without (comm->direct stays NULL: the ring runs). Segments are unlinked
 * as soon as every rank mapped them, so nothing stays in /dev/shm after a crash. */
#ifndef BRAID_TRANSPORT_SHM_DIRECT_H
#define BRAID_TRANSPORT_SHM_DIRECT_H

#include "core/ntpick.h"
#include "transport/transport.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct braid_comm;

#define BRAID_DIRECT_INLINE 40
/* The block is not in the slot: the owner's buffer from braid_mem_alloc holds it, at the
 * reference in the line's data (braid_direct_put_ref). */
#define BRAID_DIRECT_MAPPED 1
/* The owner's output of the call lies in a region of braid_mem_alloc, at the reference it put
 * in its control page for the slot (braid_direct_put_out_ref): the peers write their reduced
 * slices straight into it (algos/direct.c, the large all-reduce). */
#define BRAID_DIRECT_OUT_MAPPED 2

typedef struct {
    _Atomic uint32_t tag;
    uint32_t seq;                   /* the call's sequence number */
    uint8_t coll, dtype, op;        /* as braid_msg_hdr_t */
    uint8_t flags;                  /* BRAID_DIRECT_MAPPED, BRAID_DIRECT_OUT_MAPPED */
    int32_t root;                   /* root rank or -1 */
    uint64_t count;                 /* the call's count argument */
    char data[BRAID_DIRECT_INLINE]; /* the payload starts here (and runs into the slot) */
} braid_direct_line_t;

_Static_assert(sizeof(braid_direct_line_t) == 64, "one cache line");

typedef struct braid_direct braid_direct_t;

/* Data bytes per slot with BRAID_DIRECT_BLOCK=auto, and a model's block when it knows none. */
#define BRAID_DIRECT_BLOCK_DEFAULT ((size_t)1 << 20)
/* The most the all-gather and broadcast of 2 ranks put in a block (braid_direct_copy_block). */
#define BRAID_DIRECT_COPY_BLOCK_2 ((size_t)256 << 10)

/* The block of the direct all-gather and broadcast, which only copy, with slots of block bytes
 * over n ranks: at 2 ranks at most 256 KiB of the slot (1 MiB blocks took 1.02-1.08x the time of
 * 256 KiB ones there, while the reductions gained 0.89-0.98x; at 4 ranks 1 MiB blocks took
 * 0.43-0.72x of the broadcast's time, session 18 in perf/RESULTS.md), else the whole slot. The
 * same on every rank: block and n are. */
static inline size_t braid_direct_copy_block(size_t block, int n)
{
    return n == 2 && block > BRAID_DIRECT_COPY_BLOCK_2 ? BRAID_DIRECT_COPY_BLOCK_2 : block;
}

/* Collective: sets comm->direct when every rank of comm is on this host and every rank could
 * map every segment (block = data bytes per slot); leaves it NULL otherwise. Errors only for
 * the bootstrap itself (a dead peer during init). */
braid_result_t braid_direct_setup(struct braid_comm *comm, size_t block);
/* Marks this rank's segment closed (peers waiting on it learn that it destroyed its
 * communicator), wakes them, unmaps everything. */
void braid_direct_free(struct braid_comm *comm);
/* Tells the peers this rank failed (their waits return BRAID_ERR_REMOTE with why, or code
 * itself when it is BRAID_ERR_MISMATCH) and wakes every waiter, this rank's own too. */
void braid_direct_fail(struct braid_comm *comm, braid_result_t code, const char *why);
/* Wakes every thread sleeping on a tag of the communicator's segments (abort). */
void braid_direct_wake(struct braid_comm *comm);

/* Data bytes per slot. */
size_t braid_direct_block(const braid_direct_t *d);
/* Slot s (0 or 1) of rank r: its line; the data of a block of `bytes` bytes begins at
 * braid_direct_data(): inside the line for a payload that fits it, else at the slot's data. */
braid_direct_line_t *braid_direct_line(const braid_direct_t *d, int r, int s);
char *braid_direct_data(const braid_direct_t *d, int r, int s, size_t bytes);
/* Publishes tag on this rank's slot s (release) and wakes peers sleeping on it. */
void braid_direct_publish(braid_direct_t *d, int s, uint32_t tag);
/* Whether rank r's slot s reached tag `want` (acquire). */
static inline int braid_direct_ready(const braid_direct_line_t *l, uint32_t want)
{
    return (int32_t)(atomic_load_explicit(&l->tag, memory_order_acquire) - want) >= 0;
}
/* Sleeps (futex) until rank r's slot s may have reached want, or deadline_ns. */
void braid_direct_sleep(braid_direct_t *d, int r, int s, uint32_t want, uint64_t deadline_ns);
/* BRAID_ERR_REMOTE (or the peer's MISMATCH) if rank r failed, closed or died; the pid check
 * runs at most every 20 ms unless force. */
braid_result_t braid_direct_check_peer(braid_direct_t *d, int r, int force);
/* Whether some peer published a block of call number seq on its segment: then 1 with that
 * rank and the call's descriptor (core/engine.c: a rank that runs the call otherwise). */
int braid_direct_peek(struct braid_comm *comm, uint32_t seq, int *peer_p, braid_msg_hdr_t *h_p);
/* The same for one peer from (>= 0): a block of call seq or a later one (from < 0: as above). */
int braid_direct_peek_from(struct braid_comm *comm, uint32_t seq, int from, int *peer_p,
                           braid_msg_hdr_t *h_p);
/* 1 when every rank of the communicator could open every peer's descriptors through /proc at
 * setup (probed with a memfd): only then may a block be published by reference. */
int braid_direct_refs_ok(const braid_direct_t *d);
/* Writes a reference to the owner's memfd region (this process's fd and id, its size, the
 * block's offset in it) into the line's data. */
void braid_direct_put_ref(braid_direct_line_t *l, int fd, uint32_t id, uint64_t bytes,
                          uint64_t off);
/* The same reference to this rank's output for slot s, in its control page (written before
 * the block's first tag is published, read by the peers after they saw it). */
void braid_direct_put_out_ref(braid_direct_t *d, int s, int fd, uint32_t id, uint64_t bytes,
                              uint64_t off);
/* Rank r's block in place, from the reference in its line (its region mapped once through
 * /proc/<pid>/fd, cached; the len bytes the call reads from there faulted in when it is mapped):
 * *p_p. Errors name the rank: BRAID_ERR_REMOTE when it died, closed or failed, else
 * BRAID_ERR_SYSTEM. The cache holds max(BRAID_DIRECT_MAPS, 2n + 8) mappings (a block maps at most
 * 2(n - 1)); a mapping goes when the owner's descriptor number comes back with another region
 * (the old one was freed), or, the cache full, the one looked up longest ago. */
#define BRAID_DIRECT_MAPS 128
braid_result_t braid_direct_peer_buffer(braid_direct_t *d, int r, const braid_direct_line_t *l,
                                        uint64_t len, const char **p_p);
/* Rank r's output for slot s, from the reference in its control page, mapped the same way
 * (writable: the peers' regions are mapped read-write). */
braid_result_t braid_direct_peer_out(braid_direct_t *d, int r, int s, uint64_t len, char **p_p);
/* A call's bounds for its peers: enter notes call seq; the call's first mapping of a peer's
 * buffer publishes it in this rank's marker (before it checks that peer's failure), and leave
 * clears the marker after the call's last access to the peers' memory. */
void braid_direct_enter(braid_direct_t *d, uint32_t seq);
void braid_direct_leave(braid_direct_t *d);
/* After this rank's call seq failed with its own buffers published for the peers to read or
 * write in place (braid_mem_alloc): posts its failure (braid_direct_fail) and waits until no
 * peer can still use them: each peer has left call seq, or has mapped no peer's buffer in it
 * (it sees the failure before it maps one), or closed or died. A peer still in the call after the
 * timeout (100 ms once the communicator is aborted) is named in a warning. The error stays. */
void braid_direct_drain(struct braid_comm *comm, uint32_t seq, braid_result_t code,
                        const char *why);
/* The block counter (blocks this rank ran on the communicator). */
uint64_t *braid_direct_counter(braid_direct_t *d);
/* The algorithms' record of the blocks every peer is known to have published. */
uint64_t *braid_direct_synced(braid_direct_t *d);
/* For tests (the tags' wrap-around): the block counter starts at g >= 2, this rank's slots
 * holding the tags blocks g - 2 and g - 1 left (2b + 2). Every rank sets the same g between
 * direct calls and must see every other rank's set before its next direct call (a barrier). */
void braid_direct_test_set_counter(braid_direct_t *d, uint64_t g);
/* For tests (a peer still writing when a rank fails): the next braid_direct_peer_out sleeps
 * ns after mapping the peer's output, before the caller writes into it. */
void braid_direct_test_stall(braid_direct_t *d, uint64_t ns);
/* The algorithms' pickers of streaming or plain stores into the slots (core/ntpick.h), one
 * per collective and size class (algos/direct.c), zeroed at setup. */
#define BRAID_DIRECT_PICKERS 96
braid_nt_pick_t *braid_direct_pickers(braid_direct_t *d);
/* Publishes in this rank's control page picker i's figures of the run that ended at stamp
 * (its folded_at), for every rank's braid_direct_run_of: 1 with rank r's figures when they
 * are those of stamp, else 0. */
void braid_direct_set_run(braid_direct_t *d, int i, uint64_t stamp, const double mean[2]);
int braid_direct_run_of(const braid_direct_t *d, int r, int i, uint64_t stamp, double mean[2]);
/* BRAID_DIRECT_SCRATCH bytes of private memory for the algorithms. */
#define BRAID_DIRECT_SCRATCH 16384
char *braid_direct_scratch(braid_direct_t *d);

#endif
