/* Shared-memory transport.
 *
 * Each connection is one POSIX shared-memory segment created by the receiver, holding a FIFO
 * of nslots slots of slot_size bytes. The sender owns `head` (slots posted), the receiver owns
 * `tail` (slots released); each is a 32-bit counter on its own cache line, published with
 * release stores and read with acquire loads, so the payload and header written before a post
 * are visible after the matching load. A slot is free for the sender while head - tail < nslots.
 *
 * Waiting: the engine spins on send_get/recv_get first; wait() then sleeps on the counter with
 * futex (shared, not private: the word is in a shared mapping). A waiter announces itself in
 * head_waiters/tail_waiters before re-checking, and a poster checks the count after its store,
 * with a full fence between on both sides, so no wake-up is lost. Sleeps are sliced (<= 50 ms)
 * to check the peer: a dead peer process (pidfd, or /proc when pidfd is missing) or a peer that
 * marked the FIFO failed becomes BRAID_ERR_REMOTE naming it.
 *
 * Cleanup: the receiver unlinks the segment in recv_accept, once the sender has mapped it (the
 * communicator runs a bootstrap barrier between), so nothing stays in /dev/shm after a crash.
 * Segment names carry the creator's PID namespace and pid (braid_shm_segment_name); at setup,
 * segments of dead creators of this PID namespace (left by a crash during setup) are removed. */
#include "core/comm.h"
#include "core/log.h"
#include "transport/transport.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SHM_MAX_SLOTS 64
#define SHM_FAIL_SENDER 1
#define SHM_FAIL_RECEIVER 2
#define SHM_FAIL_CLAIMED(bit) ((bit) << 2) /* that side's code and message are being written */
#define SHM_CLOSED(bit) ((bit) << 4)       /* that side closed the connection (destroy) */

/* One slot's header on its own cache line. The sender publishes a message by storing
 * flag = (its sequence number + 1) with release order after the payload and header; the
 * receiver polls this line only, so a small message costs two cache-line transfers (this
 * line and the payload), not three. */
typedef struct {
    braid_msg_hdr_t h;
    _Atomic uint32_t flag;
    char pad[64 - sizeof(braid_msg_hdr_t) - sizeof(uint32_t)];
} shm_slot_hdr_t;

typedef struct {
    _Atomic uint32_t head;
    _Atomic uint32_t head_waiters;
    char pad0[56];
    _Atomic uint32_t tail;
    _Atomic uint32_t tail_waiters;
    char pad1[56];
    _Atomic uint64_t rx_cost[2];  /* braid_shm_rx_cost_set: written by the receiver */
    _Atomic uint64_t msg_cost[2]; /* braid_shm_msg_cost_set: written by the receiver */
    char pad2[32];
    _Atomic int32_t sender_pid;
    _Atomic int32_t failed; /* SHM_FAIL_* bits */
    int32_t fail_code[2];   /* braid_result_t of each side's failure */
    uint32_t nslots;
    uint32_t slot_size;
    uint64_t data_off;
    /* [0] written by the sender, [1] by the receiver; a nested cause ("rank 1: alltoall #2
     * (...): rank 2: recv #1 ...") keeps its end (braid_str_fit) */
    char fail_msg[2][BRAID_FAIL_TEXT];
    shm_slot_hdr_t hdr[SHM_MAX_SLOTS] __attribute__((aligned(64)));
} shm_fifo_t;

typedef struct {
    braid_conn_t base;
    shm_fifo_t *f;
    char *data;
    size_t map_len;
    char name[80];
    int peer_pid;
    int pidfd;
    uint32_t pos;       /* sender: next slot to post; receiver: next slot to read */
    uint32_t tail_seen; /* sender's cached copy of tail */
    uint64_t next_live_check_ns;
    int linked;
} shm_conn_t;

uint64_t braid_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void braid_shm_rx_cost_set(braid_conn_t *recv_conn, int nt, uint64_t ps_per_byte)
{
    shm_conn_t *c = (shm_conn_t *)recv_conn;
    atomic_store_explicit(&c->f->rx_cost[nt != 0], ps_per_byte, memory_order_relaxed);
}

uint64_t braid_shm_rx_cost_get(const braid_conn_t *send_conn, int nt)
{
    const shm_conn_t *c = (const shm_conn_t *)send_conn;
    return atomic_load_explicit(&c->f->rx_cost[nt != 0], memory_order_relaxed);
}

void braid_shm_msg_cost_set(braid_conn_t *recv_conn, int cma, uint64_t ps_per_byte)
{
    shm_conn_t *c = (shm_conn_t *)recv_conn;
    atomic_store_explicit(&c->f->msg_cost[cma != 0], ps_per_byte, memory_order_relaxed);
}

uint64_t braid_shm_msg_cost_get(const braid_conn_t *send_conn, int cma)
{
    const shm_conn_t *c = (const shm_conn_t *)send_conn;
    return atomic_load_explicit(&c->f->msg_cost[cma != 0], memory_order_relaxed);
}

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

int braid_shm_pid_ended(int pid, int pidfd)
{
    if (pidfd >= 0) {
        struct pollfd p = {.fd = pidfd, .events = POLLIN};
        return poll(&p, 1, 0) > 0;
    }
    if (pid <= 0) return 0; /* not known: never taken for dead */
    if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
    /* A killed process that its parent has not reaped is a zombie: dead for us. */
    char path[64], buf[256];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    const char *rp = strrchr(buf, ')');
    return rp && (rp[2] == 'Z' || rp[2] == 'X');
}

static int open_pidfd(int pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    (void)pid;
    return -1;
#endif
}

void braid_shm_segment_name(char *out, size_t len, const char *tag)
{
    static _Atomic uint32_t counter;
    uint32_t rnd = 0;
    if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd)) rnd = (uint32_t)braid_now_ns();
    snprintf(out, len, "/braid-ns%llu-%d-%s%u-%08x", braid_pidns_id(), (int)getpid(), tag,
             atomic_fetch_add(&counter, 1), rnd);
}

/* Removes segments whose creator is dead (left by a crash between create and unlink), of this
 * PID namespace only: /dev/shm may be shared with other PID namespaces (docker --ipc=host, the
 * containers of a pod), whose pids mean nothing here, so their live segments would look stale.
 * Names of the format before the namespace was in them (braid-<pid>-...) are left alone too:
 * which namespace made them cannot be told, and braid no longer makes them. */
static void sweep_stale_segments(void)
{
    DIR *d = opendir("/dev/shm");
    if (!d) return;
    unsigned long long mine = braid_pidns_id();
    struct dirent *e;
    while ((e = readdir(d))) {
        unsigned long long ns;
        int pid, end = 0;
        if (sscanf(e->d_name, "braid-ns%llu-%d-%n", &ns, &pid, &end) == 2 && end > 0 &&
            ns == mine && pid > 0 && braid_shm_pid_ended(pid, -1)) {
            char name[300];
            snprintf(name, sizeof(name), "/%s", e->d_name);
            if (shm_unlink(name) == 0) braid_info(SHM, "removed stale segment %s", name);
        }
    }
    closedir(d);
}

static braid_result_t shm_recv_setup(struct braid_comm *comm, int peer, int channel,
                                     braid_conn_t **conn_p, void *info, size_t *info_len_p)
{
    static pthread_once_t sweep_once = PTHREAD_ONCE_INIT;
    pthread_once(&sweep_once, sweep_stale_segments);

    shm_conn_t *c = calloc(1, sizeof(*c));
    if (!c) return braid_set_error(BRAID_ERR_NOMEM, "shm: out of memory for a connection");
    c->pidfd = -1;
    uint32_t nslots = (uint32_t)comm->nslots;
    size_t slot = comm->chunk_bytes;
    uint64_t data_off = (sizeof(shm_fifo_t) + 4095) & ~(uint64_t)4095;
    c->map_len = data_off + (size_t)nslots * slot;
    braid_shm_segment_name(c->name, sizeof(c->name), "");
    int fd = shm_open(c->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        braid_result_t r =
            braid_set_error(BRAID_ERR_SYSTEM, "shm: shm_open(%s) failed: %m", c->name);
        free(c);
        return r;
    }
    c->linked = 1;
    if (ftruncate(fd, (off_t)c->map_len) != 0) {
        braid_set_error(BRAID_ERR_SYSTEM, "shm: ftruncate(%s, %zu) failed: %m", c->name,
                        c->map_len);
        goto fail;
    }
    void *m = mmap(NULL, c->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        braid_set_error(BRAID_ERR_SYSTEM, "shm: mmap of %zu bytes failed: %m", c->map_len);
        goto fail;
    }
    close(fd);
    fd = -1;
    c->f = m;
    c->f->nslots = nslots;
    c->f->slot_size = (uint32_t)slot;
    c->f->data_off = data_off;
    c->data = (char *)m + data_off;
    c->peer_pid = comm->peers[peer].pid;
    c->base = (braid_conn_t){.ops = &braid_transport_shm,
                             .comm = comm,
                             .peer = peer,
                             .channel = channel,
                             .slot_size = slot,
                             .is_send = 0};
    size_t len = strlen(c->name) + 1;
    memcpy(info, c->name, len);
    *info_len_p = len;
    *conn_p = &c->base;
    return BRAID_SUCCESS;
fail:
    if (fd >= 0) close(fd);
    shm_unlink(c->name);
    free(c);
    return BRAID_ERR_SYSTEM;
}

static braid_result_t shm_send_connect(struct braid_comm *comm, int peer, int channel,
                                       const void *info, size_t info_len, braid_conn_t **conn_p)
{
    if (info_len < 2 || info_len > 80 || ((const char *)info)[info_len - 1] != '\0')
        return braid_set_error(BRAID_ERR_INTERNAL, "shm: malformed connection info from rank %d",
                               peer);
    shm_conn_t *c = calloc(1, sizeof(*c));
    if (!c) return braid_set_error(BRAID_ERR_NOMEM, "shm: out of memory for a connection");
    c->pidfd = -1;
    memcpy(c->name, info, info_len);
    int fd = shm_open(c->name, O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        free(c);
        return braid_set_error(BRAID_ERR_SYSTEM, "shm: cannot open rank %d's segment %s: %m", peer,
                               (const char *)info);
    }
    struct stat st;
    void *m = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(shm_fifo_t))
        m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        free(c);
        return braid_set_error(BRAID_ERR_SYSTEM, "shm: cannot map rank %d's segment: %m", peer);
    }
    c->f = m;
    c->map_len = (size_t)st.st_size;
    if (c->f->nslots == 0 || c->f->nslots > SHM_MAX_SLOTS ||
        c->f->data_off + (uint64_t)c->f->nslots * c->f->slot_size > c->map_len) {
        munmap(m, c->map_len);
        free(c);
        return braid_set_error(BRAID_ERR_INTERNAL, "shm: rank %d's segment is malformed", peer);
    }
    /* The receiver sized the slots from its chunk size and this rank cuts its chunks from its
     * own (the engine's plans): they must be the same, or this rank would write past a slot. */
    if (c->f->slot_size != comm->chunk_bytes) {
        unsigned long long theirs = c->f->slot_size;
        munmap(m, c->map_len);
        free(c);
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "shm: rank %d uses %llu-byte chunks but rank %d uses %zu "
                               "(BRAID_CHUNK_SIZE must be the same on every rank)",
                               peer, theirs, comm->rank, comm->chunk_bytes);
    }
    c->data = (char *)m + c->f->data_off;
    atomic_store_explicit(&c->f->sender_pid, (int32_t)getpid(), memory_order_release);
    c->peer_pid = comm->peers[peer].pid;
    c->pidfd = open_pidfd(c->peer_pid);
    c->base = (braid_conn_t){.ops = &braid_transport_shm,
                             .comm = comm,
                             .peer = peer,
                             .channel = channel,
                             .slot_size = c->f->slot_size,
                             .is_send = 1};
    *conn_p = &c->base;
    return BRAID_SUCCESS;
}

static braid_result_t shm_recv_accept(braid_conn_t *conn)
{
    shm_conn_t *c = (shm_conn_t *)conn;
    int pid = atomic_load_explicit(&c->f->sender_pid, memory_order_acquire);
    if (c->linked) {
        shm_unlink(c->name);
        c->linked = 0;
    }
    if (pid <= 0)
        return braid_set_error(BRAID_ERR_REMOTE, "shm: rank %d did not connect", conn->peer);
    c->peer_pid = pid;
    c->pidfd = open_pidfd(pid);
    return BRAID_SUCCESS;
}

static braid_result_t shm_send_get(braid_conn_t *conn, void **buf_p)
{
    shm_conn_t *c = (shm_conn_t *)conn;
    uint32_t n = c->f->nslots;
    if (c->pos - c->tail_seen >= n) {
        c->tail_seen = atomic_load_explicit(&c->f->tail, memory_order_acquire);
        if (c->pos - c->tail_seen >= n) return BRAID_INPROGRESS;
    }
    *buf_p = c->data + (size_t)(c->pos % n) * c->f->slot_size;
    return BRAID_SUCCESS;
}

static braid_result_t shm_send_post(braid_conn_t *conn, const braid_msg_hdr_t *hdr)
{
    shm_conn_t *c = (shm_conn_t *)conn;
    shm_slot_hdr_t *sh = &c->f->hdr[c->pos % c->f->nslots];
    sh->h = *hdr;
    c->pos++;
    atomic_store_explicit(&sh->flag, c->pos, memory_order_release);
    atomic_store_explicit(&c->f->head, c->pos, memory_order_release);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&c->f->head_waiters, memory_order_relaxed)) futex_wake(&c->f->head);
    return BRAID_SUCCESS;
}

static braid_result_t shm_recv_get(braid_conn_t *conn, const braid_msg_hdr_t **hdr_p,
                                   const void **buf_p)
{
    shm_conn_t *c = (shm_conn_t *)conn;
    uint32_t i = c->pos % c->f->nslots;
    if (atomic_load_explicit(&c->f->hdr[i].flag, memory_order_acquire) != c->pos + 1)
        return BRAID_INPROGRESS;
    *hdr_p = &c->f->hdr[i].h;
    *buf_p = c->data + (size_t)i * c->f->slot_size;
    return BRAID_SUCCESS;
}

static braid_result_t shm_recv_release(braid_conn_t *conn)
{
    shm_conn_t *c = (shm_conn_t *)conn;
    c->pos++;
    atomic_store_explicit(&c->f->tail, c->pos, memory_order_release);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&c->f->tail_waiters, memory_order_relaxed)) futex_wake(&c->f->tail);
    return BRAID_SUCCESS;
}

/* BRAID_ERR_REMOTE if the peer marked the FIFO failed or its process is gone. */
static braid_result_t check_peer(shm_conn_t *c, int force)
{
    int peer_bit = c->base.is_send ? SHM_FAIL_RECEIVER : SHM_FAIL_SENDER;
    if (atomic_load_explicit(&c->f->failed, memory_order_acquire) & peer_bit) {
        const char *msg = c->f->fail_msg[c->base.is_send ? 1 : 0];
        if (c->f->fail_code[c->base.is_send ? 1 : 0] == BRAID_ERR_MISMATCH)
            return braid_set_error(BRAID_ERR_MISMATCH, "%s", msg);
        return braid_set_error(BRAID_ERR_REMOTE, "rank %d (pid %d) failed: %s", c->base.peer,
                               c->peer_pid, msg[0] ? msg : "no reason given");
    }
    if (atomic_load_explicit(&c->f->failed, memory_order_acquire) & SHM_CLOSED(peer_bit))
        return braid_set_error(BRAID_ERR_REMOTE,
                               "rank %d (pid %d, same host) destroyed its communicator "
                               "(braid_comm_destroy) while this rank still needed it",
                               c->base.peer, c->peer_pid);
    uint64_t now = braid_now_ns();
    if (!force && now < c->next_live_check_ns) return BRAID_SUCCESS;
    c->next_live_check_ns = now + 20000000ull;
    if (braid_shm_pid_ended(c->peer_pid, c->pidfd))
        return braid_set_error(BRAID_ERR_REMOTE, "rank %d (pid %d, same host) died", c->base.peer,
                               c->peer_pid);
    return BRAID_SUCCESS;
}

/* Whether what the waiter needs is there (then a dead peer does not matter: its last
 * messages stay readable in the segment after it exits). */
static int ready(shm_conn_t *c, braid_wait_dir_t dir)
{
    if (dir == BRAID_WAIT_RELEASED)
        return atomic_load_explicit(&c->f->tail, memory_order_acquire) == c->pos;
    if (dir == BRAID_WAIT_RECV)
        return atomic_load_explicit(&c->f->head, memory_order_acquire) != c->pos;
    return c->pos - atomic_load_explicit(&c->f->tail, memory_order_acquire) < c->f->nslots;
}

/* check_peer, unless what the waiter needs arrived meanwhile: a peer that posted it and then
 * destroyed its communicator (or exited) between the look and the check still delivered it. */
static braid_result_t check_peer_or_ready(shm_conn_t *c, braid_wait_dir_t dir)
{
    braid_result_t res = check_peer(c, 0);
    return res != BRAID_SUCCESS && ready(c, dir) ? BRAID_SUCCESS : res;
}

static braid_result_t shm_wait(braid_conn_t *conn, braid_wait_dir_t dir, uint64_t deadline_ns)
{
    shm_conn_t *c = (shm_conn_t *)conn;
    if (ready(c, dir)) return BRAID_SUCCESS;
    BRAID_CHECK(check_peer_or_ready(c, dir));
    _Atomic uint32_t *word, *waiters;
    uint32_t seen;
    if (dir == BRAID_WAIT_RECV) {
        word = &c->f->head;
        waiters = &c->f->head_waiters;
        seen = c->pos;
    } else {
        word = &c->f->tail;
        waiters = &c->f->tail_waiters;
        seen = atomic_load_explicit(&c->f->tail, memory_order_acquire);
    }
    atomic_fetch_add_explicit(waiters, 1, memory_order_seq_cst);
    atomic_thread_fence(memory_order_seq_cst);
    uint64_t now = braid_now_ns();
    if (atomic_load_explicit(word, memory_order_acquire) == seen && now < deadline_ns) {
        uint64_t slice = deadline_ns - now;
        if (slice > 50000000ull) slice = 50000000ull;
        futex_wait(word, seen, slice);
    }
    atomic_fetch_sub_explicit(waiters, 1, memory_order_relaxed);
    if (ready(c, dir)) return BRAID_SUCCESS;
    return check_peer_or_ready(c, dir);
}

static braid_result_t shm_send_released(braid_conn_t *conn)
{
    shm_conn_t *c = (shm_conn_t *)conn;
    return ready(c, BRAID_WAIT_RELEASED) ? BRAID_SUCCESS : BRAID_INPROGRESS;
}

static braid_result_t shm_peer_check(braid_conn_t *conn)
{
    atomic_thread_fence(memory_order_seq_cst);
    return check_peer((shm_conn_t *)conn, 1);
}

static int shm_peer_ended(braid_conn_t *conn)
{
    shm_conn_t *c = (shm_conn_t *)conn;
    return braid_shm_pid_ended(c->peer_pid, c->pidfd);
}

static braid_result_t shm_peer_failed(braid_conn_t *conn)
{
    shm_conn_t *c = (shm_conn_t *)conn;
    int peer_bit = c->base.is_send ? SHM_FAIL_RECEIVER : SHM_FAIL_SENDER;
    if (!(atomic_load_explicit(&c->f->failed, memory_order_acquire) & peer_bit))
        return BRAID_SUCCESS;
    int code = c->f->fail_code[c->base.is_send ? 1 : 0];
    if (code == BRAID_ERR_ABORTED || code == BRAID_ERR_TIMEOUT) return BRAID_SUCCESS;
    return check_peer(c, 0); /* the failure's code and reason */
}

static void shm_wake(braid_conn_t *conn)
{
    shm_conn_t *c = (shm_conn_t *)conn;
    futex_wake(&c->f->head);
    futex_wake(&c->f->tail);
}

/* The first failure of a side is the one its peer reads: a later one (another thread of this
 * rank failing the same connection, as hier's fail path does while its worker thread fails the
 * inter-host sub-communicator) only wakes, so code and message are written once. */
static void shm_fail(braid_conn_t *conn, braid_result_t code, const char *why)
{
    shm_conn_t *c = (shm_conn_t *)conn;
    int me = conn->is_send ? 0 : 1, bit = conn->is_send ? SHM_FAIL_SENDER : SHM_FAIL_RECEIVER;
    if (!(atomic_fetch_or_explicit(&c->f->failed, SHM_FAIL_CLAIMED(bit), memory_order_acquire) &
          SHM_FAIL_CLAIMED(bit))) {
        c->f->fail_code[me] = code;
        braid_str_fit(c->f->fail_msg[me], sizeof(c->f->fail_msg[me]), why);
        atomic_fetch_or_explicit(&c->f->failed, bit, memory_order_release);
    }
    shm_wake(conn);
}

static void shm_close(braid_conn_t *conn)
{
    shm_conn_t *c = (shm_conn_t *)conn;
    if (!c) return;
    if (c->f) { /* the peer reads "destroyed its communicator", not "died" */
        int bit = conn->is_send ? SHM_FAIL_SENDER : SHM_FAIL_RECEIVER;
        atomic_fetch_or_explicit(&c->f->failed, SHM_CLOSED(bit), memory_order_release);
        shm_wake(conn);
    }
    if (c->linked) shm_unlink(c->name);
    if (c->pidfd >= 0) close(c->pidfd);
    if (c->f) munmap(c->f, c->map_len);
    free(c);
}

const braid_transport_t braid_transport_shm = {
    .size = sizeof(braid_transport_t),
    .name = "shm",
    .recv_setup = shm_recv_setup,
    .send_connect = shm_send_connect,
    .recv_accept = shm_recv_accept,
    .send_get = shm_send_get,
    .send_post = shm_send_post,
    .recv_get = shm_recv_get,
    .recv_release = shm_recv_release,
    .progress = NULL,
    .wait = shm_wait,
    .wake = shm_wake,
    .fail = shm_fail,
    .close = shm_close,
    .send_released = shm_send_released,
    .peer_check = shm_peer_check,
    .peer_ended = shm_peer_ended,
    .peer_failed = shm_peer_failed,
};
