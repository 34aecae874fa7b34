/* Direct shared-memory segments: creation, mapping, failure notices and waits (see
 * shm_direct.h for the layout and the tag protocol). */
#include "transport/shm_direct.h"
#include "core/comm.h"
#include "core/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define CTRL_BYTES 4096
#define FAIL_SET 1
#define FAIL_CLAIMED 2
#define FAIL_CLOSED 4

/* A reference to a region of braid_mem_alloc: the owner's descriptor and the region's id (its
 * peers open it through /proc/<pid>/fd/<fd>), its size, an offset in it. */
typedef struct {
    int32_t fd;
    uint32_t id;
    uint64_t bytes, off;
} ref_t;

_Static_assert(sizeof(ref_t) <= BRAID_DIRECT_INLINE, "a reference fits the line");

typedef struct {
    _Atomic uint32_t sleepers; /* peers in a futex sleep on one of this segment's tags */
    char pad0[60];
    _Atomic int32_t failed; /* FAIL_* bits, written by the owner */
    int32_t code;
    int32_t pid;
    uint32_t block;            /* data bytes per slot, for the peers' check */
    _Atomic uint32_t tag_zero; /* a slot's tag was 0 once (2g + 2 wraps): 0 is a real tag now */
    char msg[BRAID_FAIL_TEXT]; /* a nested cause keeps its end (braid_str_fit) */
    ref_t out_ref[2];          /* per slot: the call's output, with BRAID_DIRECT_OUT_MAPPED */
    struct {
        _Atomic uint64_t stamp;   /* the run's folded_at, 0 = none */
        _Atomic uint64_t mean[2]; /* the doubles' bits */
    } run[BRAID_DIRECT_PICKERS];  /* braid_direct_set_run */
    /* (seq << 1) | 1 while the owner runs direct call seq and may use peers' buffers (from its
     * first mapping of one in the call to braid_direct_leave), else 0; a line of its own. */
    _Alignas(64) _Atomic uint64_t active;
} ctrl_t;
_Static_assert(sizeof(ctrl_t) <= CTRL_BYTES, "the control block fits its page");

typedef struct {
    int rank;
    int32_t fd; /* the owner's descriptor number (its reuse for another region: this one is gone) */
    uint32_t id;
    char *base;
    uint64_t bytes;
    uint64_t used; /* the block counter when it was last looked up */
} peer_map_t;

struct braid_direct {
    int n, me;
    size_t block, slot_bytes, map_len;
    char **seg; /* n mappings, seg[me] this rank's own */
    int *pidfd; /* per peer, -1 when pidfds are missing */
    int *pid;
    uint64_t *next_check_ns; /* per peer: the next pid check */
    uint64_t blocks;         /* the block counter */
    uint64_t synced;         /* blocks below it were published by every peer (algos/direct.c) */
    char *scratch;           /* BRAID_DIRECT_SCRATCH bytes for the algorithms */
    braid_nt_pick_t pick[BRAID_DIRECT_PICKERS];
    peer_map_t *maps; /* peers' braid_mem_alloc regions mapped here, maps_cap entries */
    int nmaps, maps_cap;
    int refs_ok;            /* every rank can open every peer's descriptors (/proc/<pid>/fd/<fd>) */
    uint64_t test_stall_ns; /* braid_direct_test_stall */
    uint32_t call_seq;      /* the call braid_direct_enter began */
    int active_set;         /* this call published it in `active` (its first mapping) */
};

static int futex_wait(_Atomic uint32_t *w, uint32_t val, uint64_t timeout_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(timeout_ns / 1000000000ull),
                          .tv_nsec = (long)(timeout_ns % 1000000000ull)};
    return (int)syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *w)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static ctrl_t *ctrl(const braid_direct_t *d, int r)
{
    return (ctrl_t *)d->seg[r];
}

size_t braid_direct_block(const braid_direct_t *d)
{
    return d->block;
}

braid_direct_line_t *braid_direct_line(const braid_direct_t *d, int r, int s)
{
    return (braid_direct_line_t *)(d->seg[r] + CTRL_BYTES + (size_t)s * d->slot_bytes);
}

char *braid_direct_data(const braid_direct_t *d, int r, int s, size_t bytes)
{
    braid_direct_line_t *l = braid_direct_line(d, r, s);
    return bytes <= BRAID_DIRECT_INLINE ? l->data : (char *)l + sizeof(*l);
}

uint64_t *braid_direct_counter(braid_direct_t *d)
{
    return &d->blocks;
}

uint64_t *braid_direct_synced(braid_direct_t *d)
{
    return &d->synced;
}

void braid_direct_test_set_counter(braid_direct_t *d, uint64_t g)
{
    d->blocks = g;
    d->synced = g;
    for (uint64_t b = g - 2; b < g; b++)
        braid_direct_publish(d, (int)(b & 1), (uint32_t)(2 * b + 2));
}

void braid_direct_test_stall(braid_direct_t *d, uint64_t ns)
{
    d->test_stall_ns = ns;
}

braid_nt_pick_t *braid_direct_pickers(braid_direct_t *d)
{
    return d->pick;
}

void braid_direct_set_run(braid_direct_t *d, int i, uint64_t stamp, const double mean[2])
{
    ctrl_t *c = ctrl(d, d->me);
    for (int k = 0; k < 2; k++) {
        uint64_t bits;
        memcpy(&bits, &mean[k], sizeof(bits));
        atomic_store_explicit(&c->run[i].mean[k], bits, memory_order_relaxed);
    }
    atomic_store_explicit(&c->run[i].stamp, stamp, memory_order_release);
}

int braid_direct_run_of(const braid_direct_t *d, int r, int i, uint64_t stamp, double mean[2])
{
    const ctrl_t *c = ctrl(d, r);
    if (atomic_load_explicit(&c->run[i].stamp, memory_order_acquire) != stamp) return 0;
    for (int k = 0; k < 2; k++) {
        uint64_t bits = atomic_load_explicit(&c->run[i].mean[k], memory_order_relaxed);
        memcpy(&mean[k], &bits, sizeof(bits));
    }
    return 1;
}

char *braid_direct_scratch(braid_direct_t *d)
{
    return d->scratch;
}

void braid_direct_publish(braid_direct_t *d, int s, uint32_t tag)
{
    braid_direct_line_t *l = braid_direct_line(d, d->me, s);
    /* Once in 2^31 blocks (2g + 2 for g = 2^31 - 1 modulo 2^31): peek must not take this tag
     * for a slot never written. */
    if (!tag) atomic_store_explicit(&ctrl(d, d->me)->tag_zero, 1, memory_order_release);
    atomic_store_explicit(&l->tag, tag, memory_order_release);
    /* A peer announces itself in sleepers, then re-checks the tag (a full fence between on
     * both sides): either it sees this tag or this load sees it. */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&ctrl(d, d->me)->sleepers, memory_order_relaxed)) futex_wake(&l->tag);
}

void braid_direct_sleep(braid_direct_t *d, int r, int s, uint32_t want, uint64_t deadline_ns)
{
    braid_direct_line_t *l = braid_direct_line(d, r, s);
    ctrl_t *c = ctrl(d, r);
    atomic_fetch_add_explicit(&c->sleepers, 1, memory_order_seq_cst);
    atomic_thread_fence(memory_order_seq_cst);
    uint32_t seen = atomic_load_explicit(&l->tag, memory_order_acquire);
    uint64_t now = braid_now_ns();
    if ((int32_t)(seen - want) < 0 && now < deadline_ns) {
        uint64_t slice = deadline_ns - now;
        if (slice > 20000000ull) slice = 20000000ull;
        futex_wait(&l->tag, seen, slice);
    }
    atomic_fetch_sub_explicit(&c->sleepers, 1, memory_order_relaxed);
}

/* Whether rank r's process ended (its pidfd, else /proc). */
static int peer_died(const braid_direct_t *d, int r)
{
    return braid_shm_pid_ended(d->pid[r], d->pidfd[r]);
}

braid_result_t braid_direct_check_peer(braid_direct_t *d, int r, int force)
{
    ctrl_t *c = ctrl(d, r);
    int f = atomic_load_explicit(&c->failed, memory_order_acquire);
    if (f & FAIL_SET) {
        if (c->code == BRAID_ERR_MISMATCH) return braid_set_error(BRAID_ERR_MISMATCH, "%s", c->msg);
        return braid_set_error(BRAID_ERR_REMOTE, "rank %d (pid %d) failed: %s", r, d->pid[r],
                               c->msg[0] ? c->msg : "no reason given");
    }
    if (f & FAIL_CLOSED)
        return braid_set_error(BRAID_ERR_REMOTE,
                               "rank %d (pid %d, same host) destroyed its communicator "
                               "(braid_comm_destroy) while this rank still needed it",
                               r, d->pid[r]);
    uint64_t now = braid_now_ns();
    if (!force && now < d->next_check_ns[r]) return BRAID_SUCCESS;
    d->next_check_ns[r] = now + 20000000ull;
    if (peer_died(d, r))
        return braid_set_error(BRAID_ERR_REMOTE, "rank %d (pid %d, same host) died", r, d->pid[r]);
    return BRAID_SUCCESS;
}

/* Whether rank r closed its segments or died (no error set). */
static int peer_gone(braid_direct_t *d, int r)
{
    return (atomic_load_explicit(&ctrl(d, r)->failed, memory_order_acquire) & FAIL_CLOSED) ||
           peer_died(d, r);
}

void braid_direct_enter(braid_direct_t *d, uint32_t seq)
{
    d->call_seq = seq;
}

void braid_direct_leave(braid_direct_t *d)
{
    if (!d->active_set) return;
    atomic_store_explicit(&ctrl(d, d->me)->active, 0, memory_order_release);
    d->active_set = 0;
}

void braid_direct_drain(struct braid_comm *comm, uint32_t seq, braid_result_t code, const char *why)
{
    braid_direct_t *d = comm->direct;
    braid_direct_fail(comm, code, why);
    /* Another thread (braid_comm_abort) may have claimed the notice and still be writing it:
     * the peers look for FAIL_SET, which must be out before `active` is read. */
    ctrl_t *me = ctrl(d, d->me);
    while (!(atomic_load_explicit(&me->failed, memory_order_acquire) & FAIL_SET))
        sched_yield();                         /* a string copy away (braid_direct_fail) */
    atomic_thread_fence(memory_order_seq_cst); /* the failure before the reads of `active` */
    uint64_t want = ((uint64_t)seq << 1) | 1, start = braid_now_ns();
    uint64_t timeout_ns = braid_timeout_ns(comm->timeout_s);
    for (int r = 0; r < d->n; r++) {
        long pause_ns = 20000;
        while (r != d->me &&
               atomic_load_explicit(&ctrl(d, r)->active, memory_order_acquire) == want &&
               !peer_gone(d, r)) {
            uint64_t idle = braid_now_ns() - start;
            int aborted = atomic_load_explicit(&comm->aborted, memory_order_relaxed);
            if (idle > (aborted ? 100000000ull : timeout_ns)) {
                braid_warn(SHM,
                           "rank %d: rank %d has not left the call in %.1f s; it may still read "
                           "or write this rank's buffers of braid_mem_alloc",
                           comm->rank, r, (double)idle / 1e9);
                break;
            }
            struct timespec ts = {0, pause_ns};
            nanosleep(&ts, NULL);
            if (pause_ns < 1000000) pause_ns *= 2;
        }
    }
}

static void wake_all(braid_direct_t *d)
{
    for (int r = 0; r < d->n; r++)
        for (int s = 0; s < 2; s++)
            if (d->seg[r]) futex_wake(&braid_direct_line(d, r, s)->tag);
}

void braid_direct_wake(struct braid_comm *comm)
{
    if (comm->direct) wake_all(comm->direct);
}

void braid_direct_fail(struct braid_comm *comm, braid_result_t code, const char *why)
{
    braid_direct_t *d = comm->direct;
    if (!d) return;
    ctrl_t *c = ctrl(d, d->me);
    if (!(atomic_fetch_or_explicit(&c->failed, FAIL_CLAIMED, memory_order_acquire) &
          FAIL_CLAIMED)) {
        c->code = code;
        braid_str_fit(c->msg, sizeof(c->msg), why);
        atomic_fetch_or_explicit(&c->failed, FAIL_SET, memory_order_release);
    }
    wake_all(d);
}

static void release(braid_direct_t *d)
{
    for (int i = 0; i < d->nmaps; i++)
        munmap(d->maps[i].base, d->maps[i].bytes);
    for (int r = 0; r < d->n; r++) {
        if (d->seg[r]) munmap(d->seg[r], d->map_len);
        if (d->pidfd[r] >= 0) close(d->pidfd[r]);
    }
    free(d->maps);
    free(d->seg);
    free(d->pidfd);
    free(d->pid);
    free(d->next_check_ns);
    free(d->scratch);
    free(d);
}

void braid_direct_free(struct braid_comm *comm)
{
    braid_direct_t *d = comm->direct;
    if (!d) return;
    comm->direct = NULL;
    atomic_fetch_or_explicit(&ctrl(d, d->me)->failed, FAIL_CLOSED, memory_order_release);
    wake_all(d);
    release(d);
}

typedef struct {
    int32_t ok;
    int32_t probe_fd; /* a memfd of PROBE_BYTES the peers open through /proc, -1 if none */
    char name[56];
} seg_info_t;

/* Bits of the second allgather: every segment mapped; every peer's probe opened. */
#define OK_SEGS 1
#define OK_REFS 2
#define PROBE_BYTES 4096

/* Whether this process can open rank r's probe memfd the way braid_direct_peer_buffer opens
 * its braid_mem_alloc regions (a non-dumpable peer, or a reader without CAP_SYS_PTRACE in
 * another user namespace, cannot: the direct path then copies such buffers in). */
static int probe_peer(int pid, int fd)
{
    if (fd < 0) return 0;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", pid, fd);
    int pfd = open(path, O_RDWR | O_CLOEXEC);
    if (pfd < 0) {
        braid_info(SHM, "direct: cannot open %s (%m): buffers from braid_mem_alloc are copied",
                   path);
        return 0;
    }
    struct stat st;
    int ok = fstat(pfd, &st) == 0 && st.st_size == PROBE_BYTES;
    close(pfd);
    return ok;
}

static braid_result_t direct_setup(struct braid_comm *comm, size_t block, braid_direct_t *d,
                                   seg_info_t *all, char *name)
{
    int n = comm->nranks;
    seg_info_t mine;
    memset(&mine, 0, sizeof(mine));
    braid_shm_segment_name(name, sizeof(mine.name), "d");
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {
        if (ftruncate(fd, (off_t)d->map_len) == 0) {
            void *m = mmap(NULL, d->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (m != MAP_FAILED) {
                d->seg[d->me] = m;
                mine.ok = 1;
                ctrl_t *c = m;
                c->pid = (int32_t)getpid();
                c->block = (uint32_t)block;
            } else {
                braid_info(SHM, "direct: mmap of %zu bytes failed: %m", d->map_len);
            }
        } else {
            braid_info(SHM, "direct: ftruncate(%s, %zu) failed: %m", name, d->map_len);
        }
        close(fd);
        if (!mine.ok) shm_unlink(name);
    } else {
        braid_info(SHM, "direct: shm_open(%s) failed: %m", name);
    }
    if (mine.ok) snprintf(mine.name, sizeof(mine.name), "%s", name);
    mine.probe_fd = (int32_t)syscall(SYS_memfd_create, "braid-probe", 1u /* MFD_CLOEXEC */);
    if (mine.probe_fd >= 0 && ftruncate(mine.probe_fd, PROBE_BYTES) != 0) {
        close(mine.probe_fd);
        mine.probe_fd = -1;
    }
    braid_result_t res = braid_boot_allgather(comm->boot, &mine, all, sizeof(mine));
    if (res != BRAID_SUCCESS) {
        if (mine.probe_fd >= 0) close(mine.probe_fd);
        return res;
    }
    /* Map every peer's; the second allgather says whether every rank mapped every one. */
    int32_t ok = OK_SEGS | OK_REFS;
    for (int r = 0; r < n; r++)
        if (!all[r].ok) ok = 0;
    for (int r = 0; ok && r < n; r++) {
        if (r == d->me) continue;
        all[r].name[sizeof(all[r].name) - 1] = '\0';
        int pfd = shm_open(all[r].name, O_RDWR | O_CLOEXEC, 0600);
        struct stat st;
        void *m = MAP_FAILED;
        if (pfd >= 0 && fstat(pfd, &st) == 0 && (size_t)st.st_size == d->map_len)
            m = mmap(NULL, d->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, pfd, 0);
        if (pfd >= 0) close(pfd);
        if (m == MAP_FAILED || ((ctrl_t *)m)->block != (uint32_t)block) {
            braid_info(SHM, "direct: cannot map rank %d's segment %s: %m", r, all[r].name);
            if (m != MAP_FAILED) munmap(m, d->map_len);
            ok = 0;
            break;
        }
        d->seg[r] = m;
        d->pid[r] = comm->peers[r].pid;
        if (!probe_peer(d->pid[r], all[r].probe_fd)) ok &= ~OK_REFS;
#ifdef SYS_pidfd_open
        d->pidfd[r] = (int)syscall(SYS_pidfd_open, d->pid[r], 0);
#endif
    }
    int32_t *oks = malloc((size_t)n * sizeof(int32_t));
    if (!oks) ok = 0;
    res = braid_boot_allgather(comm->boot, &ok, oks ? (void *)oks : (void *)all, sizeof(ok));
    /* Every peer has opened (or failed to open) the probe: it can go. */
    if (mine.probe_fd >= 0) close(mine.probe_fd);
    if (res == BRAID_SUCCESS && oks)
        for (int r = 0; r < n; r++)
            ok &= oks[r];
    free(oks);
    if (res == BRAID_SUCCESS && !(ok & OK_SEGS)) res = BRAID_ERR_UNSUPPORTED;
    d->refs_ok = (ok & OK_REFS) != 0;
    return res;
}

braid_result_t braid_direct_setup(struct braid_comm *comm, size_t block)
{
    int n = comm->nranks;
    if (n < 2 || comm->local_nranks != n) return BRAID_SUCCESS;
    if (comm->transport && comm->transport != &braid_transport_shm) return BRAID_SUCCESS;
    braid_direct_t *d = calloc(1, sizeof(*d));
    seg_info_t *all = calloc((size_t)n, sizeof(seg_info_t));
    if (d) {
        d->seg = calloc((size_t)n, sizeof(char *));
        d->pidfd = malloc((size_t)n * sizeof(int));
        d->pid = calloc((size_t)n, sizeof(int));
        d->next_check_ns = calloc((size_t)n, sizeof(uint64_t));
        d->scratch = malloc(BRAID_DIRECT_SCRATCH);
        /* One block may map every peer's input and output (the large all-reduce). */
        d->maps_cap = 2 * n + 8 > BRAID_DIRECT_MAPS ? 2 * n + 8 : BRAID_DIRECT_MAPS;
        d->maps = calloc((size_t)d->maps_cap, sizeof(peer_map_t));
    }
    if (!d || !all || !d->seg || !d->pidfd || !d->pid || !d->next_check_ns || !d->scratch ||
        !d->maps) {
        if (d) {
            for (int r = 0; d->pidfd && r < n; r++)
                d->pidfd[r] = -1;
            if (d->seg && d->pidfd) {
                d->n = n;
                release(d);
                d = NULL;
            } else {
                free(d->seg);
                free(d->pidfd);
                free(d->pid);
                free(d->next_check_ns);
                free(d->scratch);
                free(d->maps);
            }
        }
        free(d);
        free(all);
        return braid_set_error(BRAID_ERR_NOMEM, "out of memory for the direct segments");
    }
    for (int r = 0; r < n; r++)
        d->pidfd[r] = -1;
    d->n = n;
    d->me = comm->rank;
    d->block = block;
    d->slot_bytes = sizeof(braid_direct_line_t) + ((block + 63) & ~(size_t)63);
    d->map_len = CTRL_BYTES + 2 * d->slot_bytes;
    char name[64] = "";
    braid_result_t res = direct_setup(comm, block, d, all, name);
    /* Every rank mapped (or gave up on) every segment: unlink ours now. */
    if (name[0] && d->seg[d->me]) shm_unlink(name);
    free(all);
    if (res == BRAID_SUCCESS) {
        comm->direct = d;
        braid_info(SHM, "direct: %d segments of %zu bytes mapped (blocks of %zu bytes)%s", n,
                   d->map_len, block,
                   d->refs_ok ? "" : "; peers' braid_mem_alloc buffers cannot be opened: copied");
        return BRAID_SUCCESS;
    }
    release(d);
    if (res == BRAID_ERR_UNSUPPORTED) {
        braid_info(SHM, "direct: not every rank could map every segment: the ring runs");
        return BRAID_SUCCESS;
    }
    return res;
}

int braid_direct_peek(struct braid_comm *comm, uint32_t seq, int *peer_p, braid_msg_hdr_t *h_p)
{
    return braid_direct_peek_from(comm, seq, -1, peer_p, h_p);
}

int braid_direct_peek_from(struct braid_comm *comm, uint32_t seq, int from, int *peer_p,
                           braid_msg_hdr_t *h_p)
{
    braid_direct_t *d = comm->direct;
    for (int r = 0; d && r < d->n; r++) {
        if (r == d->me || (from >= 0 && r != from)) continue;
        for (int s = 0; s < 2; s++) {
            braid_direct_line_t *l = braid_direct_line(d, r, s);
            /* Tag 0: never published, unless the owner's tags wrapped (then it is 2g + 2 of a
             * block g = 2^31 - 1 modulo 2^31, its flag set before that tag). */
            if (!atomic_load_explicit(&l->tag, memory_order_acquire) &&
                !atomic_load_explicit(&ctrl(d, r)->tag_zero, memory_order_acquire))
                continue;
            if (from < 0 ? l->seq != seq : (int32_t)(l->seq - seq) < 0) continue;
            *peer_p = r;
            *h_p = (braid_msg_hdr_t){.seq = l->seq,
                                     .coll = l->coll,
                                     .dtype = l->dtype,
                                     .op = l->op,
                                     .root = l->root,
                                     .count = l->count};
            return 1;
        }
    }
    return 0;
}

/* ---- peers' buffers from braid_mem_alloc ---------------------------------------------------- */
void braid_direct_put_ref(braid_direct_line_t *l, int fd, uint32_t id, uint64_t bytes, uint64_t off)
{
    ref_t r = {.fd = fd, .id = id, .bytes = bytes, .off = off};
    memcpy(l->data, &r, sizeof(r));
}

void braid_direct_put_out_ref(braid_direct_t *d, int s, int fd, uint32_t id, uint64_t bytes,
                              uint64_t off)
{
    ctrl(d, d->me)->out_ref[s] = (ref_t){.fd = fd, .id = id, .bytes = bytes, .off = off};
}

int braid_direct_refs_ok(const braid_direct_t *d)
{
    return d->refs_ok;
}

/* Drops the mappings of rank r's regions that the reference ref proves closed: the owner
 * reuses a descriptor number only after it closed it (braid_mem_free), so an entry with ref's
 * descriptor and another id maps a freed region, whose pages only this mapping keeps alive.
 * Entries looked up in this block stay (the algorithm may hold their pointers). */
static void drop_closed(braid_direct_t *d, int r, ref_t ref)
{
    for (int i = 0; i < d->nmaps; i++) {
        peer_map_t *m = &d->maps[i];
        if (m->rank != r || m->fd != ref.fd || m->id == ref.id || m->used == d->blocks) continue;
        munmap(m->base, m->bytes);
        *m = d->maps[--d->nmaps];
        i--;
    }
}

/* Faults in the pages of [off, off + len) of a region of `bytes` just mapped at base: the
 * call's bytes, not the region's (a 32 GiB arena of which a call uses 1 MiB). With no fault-in a
 * page's first read cost about 1 us on the VMs this was measured on, which made a 2-rank
 * all-reduce of 256 KiB from a 16 MiB region take 88 us per call in a 100-call sweep (30 with the
 * pages faulted in at mapping; 23-26 in a 3000-call one). MADV_POPULATE_READ (Linux 5.14) in
 * one call, else a read per page. */
static void fault_in(char *base, uint64_t bytes, uint64_t off, uint64_t len)
{
    long ps = sysconf(_SC_PAGESIZE); /* 16 or 64 KiB on some arm64 kernels */
    uint64_t page = ps > 0 ? (uint64_t)ps : 4096;
    uint64_t lo = off & ~(page - 1), hi = len > bytes - off ? bytes : off + len;
    if (hi <= lo) return;
#ifdef MADV_POPULATE_READ
    if (madvise(base + lo, hi - lo, MADV_POPULATE_READ) == 0) return;
#endif
    volatile const char *p = base;
    for (uint64_t o = lo; o < hi; o += page)
        (void)p[o];
}

/* Rank r's region of ref, mapped (cached) here: *p_p = the byte at ref.off, the call using len
 * bytes from there. An error names the rank: BRAID_ERR_REMOTE when it died, closed or failed
 * (then its descriptors may be gone), else BRAID_ERR_SYSTEM. */
static braid_result_t map_ref(braid_direct_t *d, int r, ref_t ref, uint64_t len, char **p_p)
{
    /* A peer that failed may have returned from the call, its buffers its own again (see
     * braid_direct_drain): checked before each use of them. This rank's `active` is published
     * at its first mapping of the call (calls that map nothing never write it), and the fence
     * orders it before the read, as the failing rank orders its failure before reading
     * `active`, so one of the two sees the other. */
    if (!d->active_set) {
        atomic_store_explicit(&ctrl(d, d->me)->active, ((uint64_t)d->call_seq << 1) | 1,
                              memory_order_relaxed);
        d->active_set = 1;
    }
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&ctrl(d, r)->failed, memory_order_acquire) & (FAIL_SET | FAIL_CLOSED))
        return braid_direct_check_peer(d, r, 1);
    for (int i = 0; i < d->nmaps; i++) {
        peer_map_t *m = &d->maps[i];
        if (m->rank == r && m->id == ref.id && ref.off <= m->bytes) {
            m->used = d->blocks;
            *p_p = m->base + ref.off;
            return BRAID_SUCCESS;
        }
    }
    drop_closed(d, r, ref);
    /* A bounded cache (peers' regions may be freed and others allocated over a long run): the
     * mapping looked up longest ago makes room, never one looked up in this block, whose
     * pointers the algorithm may still hold (its inputs while it writes into the outputs). The
     * cache holds 2n + 8 entries at least, more than a block maps. */
    int full = d->nmaps == d->maps_cap;
    peer_map_t *slot = full ? &d->maps[0] : &d->maps[d->nmaps];
    for (int i = 1; full && i < d->nmaps; i++)
        if (d->maps[i].used < slot->used) slot = &d->maps[i];
    if (full && slot->used == d->blocks)
        return braid_set_error(BRAID_ERR_INTERNAL,
                               "direct: cannot map rank %d's buffer from braid_mem_alloc: %d peer "
                               "regions are in use in this block already",
                               r, d->maps_cap);
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", d->pid[r], (int)ref.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        /* A peer that died (or failed, or closed) since it published the reference. */
        int e = errno;
        BRAID_CHECK(braid_direct_check_peer(d, r, 1));
        errno = e;
        return braid_set_error(BRAID_ERR_SYSTEM,
                               "direct: cannot open rank %d's buffer from braid_mem_alloc (%s): %m",
                               r, path);
    }
    struct stat st;
    void *base = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (uint64_t)st.st_size >= ref.bytes && ref.off <= ref.bytes)
        base = mmap(NULL, ref.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED)
        return braid_set_error(BRAID_ERR_SYSTEM,
                               "direct: cannot map rank %d's buffer from braid_mem_alloc (%s, %llu "
                               "bytes): %m",
                               r, path, (unsigned long long)ref.bytes);
    fault_in(base, ref.bytes, ref.off, len);
    if (full)
        munmap(slot->base, slot->bytes);
    else
        d->nmaps++;
    *slot = (peer_map_t){
        .rank = r, .fd = ref.fd, .id = ref.id, .base = base, .bytes = ref.bytes, .used = d->blocks};
    *p_p = (char *)base + ref.off;
    return BRAID_SUCCESS;
}

braid_result_t braid_direct_peer_buffer(braid_direct_t *d, int r, const braid_direct_line_t *l,
                                        uint64_t len, const char **p_p)
{
    ref_t ref;
    memcpy(&ref, l->data, sizeof(ref));
    char *p;
    BRAID_CHECK(map_ref(d, r, ref, len, &p));
    *p_p = p;
    return BRAID_SUCCESS;
}

braid_result_t braid_direct_peer_out(braid_direct_t *d, int r, int s, uint64_t len, char **p_p)
{
    BRAID_CHECK(map_ref(d, r, ctrl(d, r)->out_ref[s], len, p_p));
    if (d->test_stall_ns) {
        struct timespec ts = {(time_t)(d->test_stall_ns / 1000000000ull),
                              (long)(d->test_stall_ns % 1000000000ull)};
        d->test_stall_ns = 0;
        nanosleep(&ts, NULL);
    }
    return BRAID_SUCCESS;
}
