/* The device engine's step/flag protocol, written once and compiled twice: by nvcc into the
 * device engine's kernels (engine.cu: one thread block per channel, its threads the lanes) and
 * by the C compiler into the CPU twin (twin.c: one thread per channel, one lane), which the test
 * suite runs on every machine against real shared-memory slots.
 *
 * Connections. A FIFO joins one sender to one receiver: nslots slots of slot_bytes in the
 * receiver's memory (device memory mapped into the sender by CUDA IPC, or shared host memory
 * in the twin) and a control block with two monotone step counters: `head` (messages the
 * sender posted, written by the sender only) and `tail` (messages the receiver consumed,
 * written by the receiver only). Message k lives in slot k % nslots; the sender may write it
 * when k - tail < nslots, the receiver may read it when head > k. Each slot has a tag (the
 * collective's sequence number and the message's byte count) that the receiver checks, so a
 * rank that runs another collective is a clear mismatch error, not corrupt data. Several
 * messages are in flight per FIFO (up to nslots): the pipelining the CPU engine has.
 *
 * Lanes. A channel of the plan runs on a group of lanes (devplan.h: each one thread block on
 * the GPU, with its own FIFOs and its 16-byte-aligned part of every step), so the blocks of a
 * group never synchronise with each other; below, "channel" is one lane.
 *
 * Steps. A channel runs its plan's steps (algos/plan.h, expanded into braid_dev_step_t arrays by
 * the host: plans are data, no algorithm is written for the device) in order, each one primitive
 * over one chunk, with the CPU engine's semantics (core/engine.c apply()): send,
 * recvReduceSend, recvReduceCopySend, recvCopySend, recv, copySend, recvReduceCopy, copy.
 *
 * Time-sliced processes. Ranks of different processes on one GPU do not run at the same time
 * without MPS. So no wait here is unbounded: braid_dev_chan_run polls a flag at most `budget`
 * times and then returns BRAID_DEV_BLOCKED with its state saved (the next step index and its
 * counters, in the channel struct); the step it was blocked on has had no side effect. The
 * host loop (devdrive.h, shared by the twin and the GPU executor) relaunches the channel
 * later, so a rank whose peer is not scheduled gives its time slice back instead of spinning
 * on it, and any interleaving of the ranks' runs makes progress: the twin suite proves it by
 * running every rank's channels one after another on a single thread. Each return publishes
 * the lane's report (status, step, the link it waited on) to host-visible memory.
 *
 * Aborts. A wait also returns (ERR_ABORTED) when the rank's own abort word is set (the host's
 * braid_comm_abort) or the FIFO's in-band one (a failing peer sets it in every FIFO it
 * shares), so a failure reaches the peers' kernels without a timeout. */
#ifndef BRAID_CUDA_ENGINE_DEV_H
#define BRAID_CUDA_ENGINE_DEV_H

#include <stddef.h>
#include <stdint.h>

#define BRAID_DEV_MAX_LINKS 66 /* link 0: the ring; 1 + r: the point-to-point link with rank r */
#define BRAID_DEV_LINK_NONE 0xff

enum {
    BRAID_DEV_DONE = 0,
    BRAID_DEV_BLOCKED = 1,
    BRAID_DEV_ERR_MISMATCH = -7,
    BRAID_DEV_ERR_ABORTED = -6,
    BRAID_DEV_ERR_INTERNAL = -9
};

/* Shared by both ends of a FIFO (its own cache lines for each writer). */
typedef struct {
    uint64_t head;         /* messages posted (the sender writes) */
    uint64_t max_inflight; /* most messages posted and not yet consumed that the sender saw */
    uint64_t pad0[6];
    uint64_t tail; /* messages consumed (the receiver writes) */
    uint64_t pad1[7];
    uint64_t abort; /* nonzero: every end stops at its next wait (set by the host) */
    uint64_t pad2[7];
    uint64_t tag[64]; /* slot k % nslots: (seq << 32) | bytes of the message in it */
} braid_dev_fifo_ctl_t;

typedef struct {
    braid_dev_fifo_ctl_t *ctl;
    char *slots; /* nslots * slot_bytes */
    uint64_t slot_bytes;
    uint32_t nslots; /* <= 64 */
    uint32_t peer;   /* the rank at the other end (for messages) */
} braid_dev_fifo_t;

/* One plan step with its peers resolved to links. Offsets and count in elements. */
typedef struct {
    uint8_t prim, flags, send_link, recv_link;
    uint32_t pad;
    uint64_t in_off, out_off, count;
} braid_dev_step_t;

/* What a lane's last run reports to the host (host-visible memory: mapped pinned memory on
 * the GPU), written by its leader whenever the run returns: the host loop that relaunches
 * blocked lanes reads only this. */
typedef struct {
    int32_t status;    /* BRAID_DEV_* */
    uint32_t pc;       /* next step */
    uint32_t bad_link; /* error detail: the link */
    uint32_t pad;
    uint64_t bad_tag; /* and the tag found there */
    uint64_t waits;   /* runs that returned BLOCKED */
} braid_dev_report_t;

/* A channel's run (a lane: one thread block, or one block of a channel's group): what it runs
 * on and where it is (resumable). */
typedef struct {
    const braid_dev_step_t *steps;
    uint32_t nsteps;
    uint32_t pc; /* next step */
    braid_dev_fifo_t *send[BRAID_DEV_MAX_LINKS], *recv[BRAID_DEV_MAX_LINKS];
    uint64_t posted[BRAID_DEV_MAX_LINKS];   /* messages this channel posted on send[l] */
    uint64_t consumed[BRAID_DEV_MAX_LINKS]; /* messages it consumed from recv[l] */
    const char *in;
    char *out;
    uint32_t es;       /* element size */
    int32_t dtype, op; /* braid_datatype_t, braid_redop_t */
    int32_t nranks;
    int32_t reduces; /* the collective reduces (COPY finalizes avg) */
    uint32_t seq;
    int32_t status;    /* BRAID_DEV_* of the last run */
    uint32_t bad_link; /* error detail: the link */
    uint64_t bad_tag;  /* and the tag found */
    uint64_t waits;    /* runs that returned BLOCKED (statistics) */
    /* This rank's abort word (host-visible; nonzero: every wait returns ERR_ABORTED), NULL for
     * none; every FIFO's ctl->abort is the in-band one a failing peer sets. */
    const uint64_t *abort;
    braid_dev_report_t *report; /* NULL: no report */
} braid_dev_chan_t;

/* Primitive and flag values are algos/plan.h's (BRAID_PRIM_*, BRAID_STEP_*). */
#define BRAID_DEV_PRIM_SEND 0
#define BRAID_DEV_PRIM_RECV 1
#define BRAID_DEV_PRIM_COPY 2
#define BRAID_DEV_PRIM_COPY_SEND 3
#define BRAID_DEV_PRIM_RECV_REDUCE_SEND 4
#define BRAID_DEV_PRIM_RECV_REDUCE_COPY 5
#define BRAID_DEV_PRIM_RECV_REDUCE_COPY_SEND 6
#define BRAID_DEV_PRIM_RECV_COPY_SEND 7
#define BRAID_DEV_STEP_IN_OUT 0x1
#define BRAID_DEV_STEP_SWAP 0x2
#define BRAID_DEV_STEP_NOFINAL 0x4
/* bad_link of a lane that stopped waiting: the link, with these bits */
#define BRAID_DEV_WAIT_SEND 0x100 /* waited for a free slot (else for a message) */
#define BRAID_DEV_WAIT_OWN 0x200  /* stopped by the rank's own abort word */

#endif /* BRAID_CUDA_ENGINE_DEV_H: the types */

/* ---- the protocol: compiled where BRAID_DEV_ENGINE_IMPL is defined (twin.c, engine.cu) ------ */
#if defined(BRAID_DEV_ENGINE_IMPL) && !defined(BRAID_CUDA_ENGINE_DEV_IMPL)
#define BRAID_CUDA_ENGINE_DEV_IMPL

/* ---- the two compilations ------------------------------------------------------------------ */
#if defined(__CUDACC__)
#define BDE_FN static __device__ __forceinline__
#define BDE_LANE ((size_t)threadIdx.x)
#define BDE_NLANES ((size_t)blockDim.x)
#define BDE_SYNC() __syncthreads()
#define BDE_LEADER (threadIdx.x == 0)
/* Flags cross processes and the PCIe/NVLink fabric: system-scope fences. */
BDE_FN uint64_t bde_load_acquire(const uint64_t *p)
{
    uint64_t v = *(const volatile uint64_t *)p;
    __threadfence_system();
    return v;
}
BDE_FN void bde_store_release(uint64_t *p, uint64_t v)
{
    __threadfence_system();
    *(volatile uint64_t *)p = v;
}
/* A step's flags: one fence, then plain stores (the end of braid_dev_chan_run's step). */
BDE_FN void bde_fence_release(void)
{
    __threadfence_system();
}
BDE_FN void bde_store_flag(uint64_t *p, uint64_t v)
{
    *(volatile uint64_t *)p = v;
}
BDE_FN uint64_t bde_load_relaxed(const uint64_t *p)
{
    return *(const volatile uint64_t *)p;
}
/* The block agrees on a value its leader read. */
BDE_FN uint64_t bde_bcast(uint64_t v)
{
    __shared__ uint64_t s;
    BDE_SYNC();
    if (BDE_LEADER) s = v;
    BDE_SYNC();
    return s;
}
#else
#define BDE_FN static inline
#define BDE_LANE ((size_t)0)
#define BDE_NLANES ((size_t)1)
#define BDE_SYNC() ((void)0)
#define BDE_LEADER 1
static inline uint64_t bde_load_acquire(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
static inline void bde_store_release(uint64_t *p, uint64_t v)
{
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
/* Nothing on the host: its flag stores below are release stores (and GCC refuses
 * atomic_thread_fence under ThreadSanitizer, which does not model fences). */
static inline void bde_fence_release(void) {}
static inline void bde_store_flag(uint64_t *p, uint64_t v)
{
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
static inline uint64_t bde_load_relaxed(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}
static inline uint64_t bde_bcast(uint64_t v)
{
    return v;
}
#endif

/* The data movement the includer defines (engine.cu: reduce_dev.cuh's ranges over the lanes;
 * twin.c: the CPU kernels of src/reduce, which use the same element functions). */
BDE_FN void bde_copy(void *dst, const void *src, size_t bytes);
/* dst = src and dst2 = src from one read (dst == src: only dst2 is written) */
BDE_FN void bde_copy2(void *dst, void *dst2, const void *src, size_t bytes);
/* dst = x op y over count elements (final: avg divides by nranks) */
BDE_FN void bde_reduce(const braid_dev_chan_t *ch, void *dst, const void *x, const void *y,
                       size_t count, int final);
/* dst = dst2 = final(x op y) (the result written twice from one computation) */
BDE_FN void bde_reduce2(const braid_dev_chan_t *ch, void *dst, void *dst2, const void *x,
                        const void *y, size_t count);
/* dst = final(src) (avg: src / nranks, else a copy) */
BDE_FN void bde_finalize(const braid_dev_chan_t *ch, void *dst, const void *src, size_t count);

BDE_FN uint64_t bde_tag(uint32_t seq, uint64_t bytes)
{
    return ((uint64_t)seq << 32) | (bytes & 0xffffffffu);
}

/* The channel struct is shared by the block's threads: only the leader writes it, between
 * barriers, so every lane reads the same state. */
#define BDE_LEADER_DO(stmt)                                                                        \
    do {                                                                                           \
        BDE_SYNC();                                                                                \
        if (BDE_LEADER) {                                                                          \
            stmt;                                                                                  \
        }                                                                                          \
        BDE_SYNC();                                                                                \
    } while (0)

BDE_FN void bde_report(braid_dev_chan_t *ch)
{
    braid_dev_report_t *r = ch->report;
    if (!r) return;
    r->pc = ch->pc;
    r->bad_link = ch->bad_link;
    r->bad_tag = ch->bad_tag;
    r->waits = ch->waits;
    /* the status last: a host that sees it sees the rest */
    bde_store_release((uint64_t *)(void *)r,
                      (uint64_t)(uint32_t)ch->status | ((uint64_t)ch->pc << 32));
}

BDE_FN int32_t bde_status(braid_dev_chan_t *ch, int32_t st, int waited)
{
    BDE_LEADER_DO(ch->status = st; ch->waits += (uint64_t)waited; bde_report(ch));
    return st;
}

/* A wait that returns: the link it waited on (BRAID_DEV_WAIT_SEND set: for a free slot there;
 * BRAID_DEV_WAIT_OWN: the rank's own abort word) goes into bad_link for the host's message. */
BDE_FN int32_t bde_stop(braid_dev_chan_t *ch, int32_t st, uint32_t link)
{
    BDE_LEADER_DO(ch->bad_link = link);
    return bde_status(ch, st, st == BRAID_DEV_BLOCKED);
}

/* Whether this lane must stop waiting on ctl's FIFO: 1 when the FIFO's in-band abort word is
 * set (a peer failed), 2 for the rank's own abort word (host memory on the GPU: read every 64th
 * poll), else 0. */
BDE_FN int bde_aborted(const braid_dev_chan_t *ch, const braid_dev_fifo_ctl_t *ctl, uint64_t polls)
{
    uint64_t a = bde_load_acquire(&ctl->abort) ? 1 : 0;
    if (!a && ch->abort && (polls & 63) == 0 && bde_load_acquire(ch->abort)) a = 2;
    return (int)bde_bcast(a);
}

/* Runs ch's steps from ch->pc until done, an error, or a wait that polled `budget` times.
 * Returns (and stores in ch->status) a BRAID_DEV_* value. */
BDE_FN int32_t braid_dev_chan_run(braid_dev_chan_t *ch, uint64_t budget)
{
    while (ch->pc < ch->nsteps) {
        const braid_dev_step_t s = ch->steps[ch->pc];
        const size_t bytes = (size_t)s.count * ch->es;
        const int recvs =
            s.prim == BRAID_DEV_PRIM_RECV || s.prim >= BRAID_DEV_PRIM_RECV_REDUCE_SEND;
        const int sends = s.prim == BRAID_DEV_PRIM_SEND || s.prim == BRAID_DEV_PRIM_COPY_SEND ||
                          s.prim == BRAID_DEV_PRIM_RECV_REDUCE_SEND ||
                          s.prim == BRAID_DEV_PRIM_RECV_REDUCE_COPY_SEND ||
                          s.prim == BRAID_DEV_PRIM_RECV_COPY_SEND;
        braid_dev_fifo_t *rf = recvs ? ch->recv[s.recv_link] : 0;
        braid_dev_fifo_t *sf = sends ? ch->send[s.send_link] : 0;
        if ((recvs && !rf) || (sends && !sf) || (sf && bytes > sf->slot_bytes)) {
            BDE_LEADER_DO(ch->bad_link = recvs && !rf ? s.recv_link : s.send_link);
            return bde_status(ch, BRAID_DEV_ERR_INTERNAL, 0);
        }
        /* Wait (bounded) for the received message and for a free send slot. */
        uint64_t polls = 0;
        if (recvs) {
            uint64_t k = ch->consumed[s.recv_link];
            while (bde_bcast(bde_load_acquire(&rf->ctl->head)) <= k) {
                int ab = bde_aborted(ch, rf->ctl, polls);
                if (ab)
                    return bde_stop(ch, BRAID_DEV_ERR_ABORTED,
                                    ab == 2 ? BRAID_DEV_WAIT_OWN : s.recv_link);
                if (++polls >= budget) return bde_stop(ch, BRAID_DEV_BLOCKED, s.recv_link);
            }
            uint64_t tag = bde_bcast(bde_load_acquire(&rf->ctl->tag[k % rf->nslots]));
            if (tag != bde_tag(ch->seq, bytes)) {
                BDE_LEADER_DO(ch->bad_link = s.recv_link; ch->bad_tag = tag);
                return bde_status(ch, BRAID_DEV_ERR_MISMATCH, 0);
            }
        }
        if (sends) {
            uint64_t k = ch->posted[s.send_link];
            while (k - bde_bcast(bde_load_acquire(&sf->ctl->tail)) >= sf->nslots) {
                int ab = bde_aborted(ch, sf->ctl, polls);
                if (ab)
                    return bde_stop(ch, BRAID_DEV_ERR_ABORTED,
                                    ab == 2 ? BRAID_DEV_WAIT_OWN
                                            : (uint32_t)s.send_link | BRAID_DEV_WAIT_SEND);
                if (++polls >= budget)
                    return bde_stop(ch, BRAID_DEV_BLOCKED,
                                    (uint32_t)s.send_link | BRAID_DEV_WAIT_SEND);
            }
        }
        /* Both acquired: apply the primitive (R = received slot, S = send slot). */
        const char *R =
            recvs ? rf->slots + (ch->consumed[s.recv_link] % rf->nslots) * rf->slot_bytes : 0;
        char *S = sends ? sf->slots + (ch->posted[s.send_link] % sf->nslots) * sf->slot_bytes : 0;
        const char *in = (s.flags & BRAID_DEV_STEP_IN_OUT ? ch->out : ch->in) + s.in_off * ch->es;
        char *out = ch->out + s.out_off * ch->es;
        const char *x = R, *y = in;
        if (s.flags & BRAID_DEV_STEP_SWAP) {
            x = in;
            y = R;
        }
        switch (s.prim) {
        case BRAID_DEV_PRIM_SEND:
            bde_copy(S, in, bytes);
            break;
        case BRAID_DEV_PRIM_RECV:
            bde_copy(out, R, bytes);
            break;
        case BRAID_DEV_PRIM_COPY:
            if (ch->reduces)
                bde_finalize(ch, out, in, s.count);
            else
                bde_copy(out, in, bytes);
            break;
        case BRAID_DEV_PRIM_COPY_SEND:
            bde_copy2(out, S, in, bytes);
            break;
        case BRAID_DEV_PRIM_RECV_REDUCE_SEND:
            bde_reduce(ch, S, x, y, s.count, 0);
            break;
        case BRAID_DEV_PRIM_RECV_REDUCE_COPY:
            bde_reduce(ch, out, x, y, s.count, !(s.flags & BRAID_DEV_STEP_NOFINAL));
            break;
        case BRAID_DEV_PRIM_RECV_REDUCE_COPY_SEND:
            bde_reduce2(ch, out, S, x, y, s.count);
            break;
        case BRAID_DEV_PRIM_RECV_COPY_SEND:
            bde_copy2(out, S, R, bytes);
            break;
        default:
            return bde_status(ch, BRAID_DEV_ERR_INTERNAL, 0);
        }
        /* The data is written and the received slot read (barrier) before the flags say so:
         * the leader stores the slot's tag, then one release fence orders all of it before
         * the head and tail stores. (A fence before each of the three stores cost a
         * system-scope fence per flag, on a GPU the step's dearest instructions.) */
        BDE_SYNC();
        if (BDE_LEADER) {
            if (sends)
                bde_store_flag(&sf->ctl->tag[ch->posted[s.send_link] % sf->nslots],
                               bde_tag(ch->seq, bytes));
            bde_fence_release();
            if (sends) {
                uint64_t k = ch->posted[s.send_link];
                uint64_t inflight = k + 1 - bde_load_relaxed(&sf->ctl->tail); /* statistics */
                if (inflight > sf->ctl->max_inflight) sf->ctl->max_inflight = inflight;
                bde_store_flag(&sf->ctl->head, k + 1);
                ch->posted[s.send_link] = k + 1;
            }
            if (recvs) {
                uint64_t k = ch->consumed[s.recv_link];
                bde_store_flag(&rf->ctl->tail, k + 1);
                ch->consumed[s.recv_link] = k + 1;
            }
            ch->pc++;
        }
        BDE_SYNC();
    }
    return bde_status(ch, BRAID_DEV_DONE, 0);
}

#endif
