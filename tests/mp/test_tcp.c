/* The TCP transport with real processes on loopback (BRAID_TRANSPORT=tcp forces it; Criterion
 * forks each test, so setenv stays local to the test): collective correctness for n = 2, 3,
 * 4, 8, several channels and sockets per peer, IPv6, a SIGKILLed rank (BRAID_ERR_REMOTE naming
 * it, promptly), a SIGSTOPped rank (BRAID_ERR_TIMEOUT naming it), abort from another thread,
 * a malformed frame, connections with a wrong secret or garbage on the data port, a flood of
 * idle connections there (bounded descriptors, the job's connection still comes), and no fd or
 * thread left after braid_comm_destroy. Inputs depend on (rank, index, seed); results are
 * checked bit-exactly against tests/common/data.c. */
#include "core/bootstrap.h"
#include "core/comm.h"
#include "data.h"
#include "mp.h"
#include "proc.h"
#include "transport/tcp.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void use_tcp(void)
{
    setenv("BRAID_TRANSPORT", "tcp", 1);
}

/* ---- correctness ---------------------------------------------------------------------------- */

/* Every dtype with sum, a few ops, counts 0, 1, small primes, 65537, and 8 MiB of floats. */
static int allreduce_matrix(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    size_t counts[] = {0, 1, 7, (size_t)n + 1, 1009, 65537};
    braid_redop_t ops[] = {BRAID_SUM, BRAID_MAX, BRAID_PROD, BRAID_AVG};
    int seed = 1;
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++)
        for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++)
            for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
                if (data_check_allreduce(comm, rank, n, dt, ops[o], counts[ci], (int)(ci & 1), 0,
                                         seed++, "tcp"))
                    return 1;
    if (data_check_allreduce(comm, rank, n, BRAID_FLOAT32, BRAID_SUM, (8u << 20) / 4, 0, 0, 7,
                             "tcp"))
        return 1;
    if (data_check_allreduce(comm, rank, n, BRAID_INT32, BRAID_MIN, (8u << 20) / 4 + 3, 1, 0, 8,
                             "tcp"))
        return 1;
    return 0;
}

static int rooted_and_ring(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    size_t counts[] = {0, 1, 7, 4099, 300007};
    braid_datatype_t dts[] = {BRAID_INT8, BRAID_FLOAT16, BRAID_FLOAT32, BRAID_UINT64};
    int seed = 100;
    for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
        for (size_t di = 0; di < sizeof(dts) / sizeof(dts[0]); di++, seed++) {
            braid_datatype_t dt = dts[di];
            size_t count = counts[ci], es = braid_dtype_size(dt);
            char *in = data_xmalloc(count * (size_t)n * es),
                 *out = data_xmalloc(count * (size_t)n * es);
            char what[128];
            int root = (int)(ci + di) % n;
            data_fill(in, dt, BRAID_SUM, rank, 0, count, seed);
            memset(out, 0xCD, count * es);
            snprintf(what, sizeof(what), "tcp broadcast n=%d root=%d %s count=%zu", n, root,
                     braid_dtype_name(dt), count);
            MP_OK(rank, braid_broadcast(in, out, count, dt, root, comm));
            MP_CHECK(rank, !data_check_rank(out, dt, BRAID_SUM, root, 0, count, seed, what), "%s",
                     what);
            data_fill(in, dt, BRAID_SUM, rank, 0, count * (size_t)n, seed);
            snprintf(what, sizeof(what), "tcp reduce_scatter n=%d %s count=%zu", n,
                     braid_dtype_name(dt), count);
            MP_OK(rank, braid_reduce_scatter(in, out, count, dt, BRAID_SUM, comm));
            MP_CHECK(
                rank,
                !data_check_reduced(out, dt, BRAID_SUM, n, (size_t)rank * count, count, seed, what),
                "%s", what);
            data_fill(in, dt, BRAID_SUM, rank, 0, count, seed);
            snprintf(what, sizeof(what), "tcp allgather n=%d %s count=%zu", n, braid_dtype_name(dt),
                     count);
            MP_OK(rank, braid_allgather(in, out, count, dt, comm));
            for (int b = 0; b < n; b++)
                MP_CHECK(rank,
                         !data_check_rank(out + (size_t)b * count * es, dt, BRAID_SUM, b, 0, count,
                                          seed, what),
                         "%s block %d", what, b);
            free(in);
            free(out);
        }
        MP_OK(rank, braid_barrier(comm));
    }
    return 0;
}

TestSuite(tcp, .timeout = 240);

#define CORRECTNESS_TEST(N)                                                                        \
    Test(tcp, allreduce_matrix_n##N)                                                               \
    {                                                                                              \
        use_tcp();                                                                                 \
        cr_assert_eq(mp_run(N, allreduce_matrix, NULL, 200), 0, "some rank failed (see stderr)");  \
    }                                                                                              \
    Test(tcp, broadcast_reduce_scatter_allgather_n##N)                                             \
    {                                                                                              \
        use_tcp();                                                                                 \
        cr_assert_eq(mp_run(N, rooted_and_ring, NULL, 200), 0, "some rank failed (see stderr)");   \
    }
CORRECTNESS_TEST(2)
CORRECTNESS_TEST(3)
CORRECTNESS_TEST(4)
CORRECTNESS_TEST(8)

static int channels_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt += 3)
        if (data_check_allreduce(comm, rank, n, dt, BRAID_SUM, 100003, dt & 1, 0, 9 + dt, "tcp"))
            return 1;
    /* Out of place and in place: frames sent straight from the user's buffers
     * (send_post_ref) must carry the right bytes and none may be read after the call returns
     * (data_check_allreduce frees its buffers at once). */
    for (int in_place = 0; in_place < 2; in_place++)
        if (data_check_allreduce(comm, rank, n, BRAID_FLOAT32, BRAID_SUM, (8u << 20) / 4, in_place,
                                 0, 3 + in_place, "tcp"))
            return 1;
    return rooted_and_ring(comm, rank, n, NULL);
}

Test(tcp, channels_and_two_sockets_per_peer)
{
    use_tcp();
    setenv("BRAID_NCHANNELS", "3", 1);
    setenv("BRAID_NSOCKS_PERPEER", "2", 1);
    cr_assert_eq(mp_run(3, channels_fn, NULL, 200), 0, "3 channels, 2 sockets (see stderr)");
    setenv("BRAID_NSOCKS_PERPEER", "4", 1);
    setenv("BRAID_CHUNK_SIZE", "4K", 1);
    setenv("BRAID_NSLOTS", "2", 1);
    cr_assert_eq(mp_run(4, channels_fn, NULL, 200), 0, "4K chunks, 2 slots, 4 sockets");
}

/* The root of a broadcast returns once its frames are posted; with 1 MiB chunks and a receiver
 * that is still asleep, most of 8 MiB is then queued in the transport, sent straight from the
 * root's buffer (send_post_ref). The root overwrites the buffer at once (from the end, where
 * the queued frames are): the receiver must still get the data of the call. */
static int detach_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    size_t count = (8u << 20) / 4;
    float *buf = data_xmalloc(count * sizeof(float));
    char what[64];
    for (int round = 0; round < 3; round++) {
        snprintf(what, sizeof(what), "broadcast round %d", round);
        if (rank == 0) {
            data_fill(buf, BRAID_FLOAT32, BRAID_SUM, 0, 0, count, 11 + round);
            MP_OK(rank, braid_broadcast(buf, buf, count, BRAID_FLOAT32, 0, comm));
            for (size_t i = count; i-- > 0;)
                buf[i] = -1.0f;
        } else {
            usleep(200000);
            memset(buf, 0, count * sizeof(float));
            MP_OK(rank, braid_broadcast(buf, buf, count, BRAID_FLOAT32, 0, comm));
            MP_CHECK(rank,
                     !data_check_rank(buf, BRAID_FLOAT32, BRAID_SUM, 0, 0, count, 11 + round, what),
                     "%s: wrong data", what);
        }
        MP_OK(rank, braid_barrier(comm));
    }
    (void)n;
    free(buf);
    return 0;
}

Test(tcp, frames_sent_from_user_buffers_are_detached_on_return)
{
    use_tcp();
    setenv("BRAID_ALGO", "ring", 1);
    setenv("BRAID_CHUNK_SIZE", "1M", 1);
    cr_assert_eq(mp_run(2, detach_fn, NULL, 60), 0, "see stderr");
    cr_assert_eq(mp_run(3, detach_fn, NULL, 60), 0, "see stderr");
}

/* Point-to-point sends of one message each (256 KiB, under the 512 KiB slot) go by reference
 * too: with the receiver asleep the sockets fill, later sends stay queued, and each blocking
 * send must copy its queued frame out before it returns (the sender overwrites its buffer at
 * once). Also isends, whose buffers are overwritten after the wait. */
static int p2p_detach_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    (void)n;
    enum { MSGS = 48, COUNT = 64 * 1024 };
    float *buf = data_xmalloc(COUNT * sizeof(float));
    char what[64];
    for (int m = 0; m < MSGS; m++) {
        snprintf(what, sizeof(what), "message %d", m);
        if (rank == 0) {
            data_fill(buf, BRAID_FLOAT32, BRAID_SUM, 0, 0, COUNT, 100 + m);
            if (m % 2) {
                MP_OK(rank, braid_send(buf, COUNT, BRAID_FLOAT32, 1, comm));
            } else {
                braid_request_t q;
                MP_OK(rank, braid_isend(buf, COUNT, BRAID_FLOAT32, 1, comm, &q));
                MP_OK(rank, braid_wait(q));
            }
            for (size_t i = COUNT; i-- > 0;)
                buf[i] = -1.0f;
        } else {
            if (m == 0) usleep(300000);
            memset(buf, 0, COUNT * sizeof(float));
            MP_OK(rank, braid_recv(buf, COUNT, BRAID_FLOAT32, 0, comm));
            MP_CHECK(rank,
                     !data_check_rank(buf, BRAID_FLOAT32, BRAID_SUM, 0, 0, COUNT, 100 + m, what),
                     "%s: wrong data", what);
        }
    }
    free(buf);
    return 0;
}

Test(tcp, single_message_sends_by_reference_are_detached_on_return)
{
    use_tcp();
    cr_assert_eq(mp_run(2, p2p_detach_fn, NULL, 60), 0, "see stderr");
}

/* reduce_scatter with recvbuf == sendbuf (accepted: "in place" in braid.h): this rank's
 * output block is the range its first send reads, and it is written as soon as the chain from
 * the next rank arrives, which does not wait for that send to leave. With 4 MiB chunks and
 * rank 0 late, that first frame is still queued when the block is written: it must not be
 * sent by reference (found in review; failed 5 runs in 13 before the fix). In-place
 * all-reduce and NCCL's in-place reduce_scatter with a late rank and 2 channels ride along. */
static int alias_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    size_t C = (16u << 20) / 4;
    int32_t *buf = data_xmalloc((size_t)n * C * 4);
    for (int round = 0; round < 9; round++) {
        int kind = round % 3; /* 0: rs, sendbuf == recvbuf; 1: NCCL in-place rs; 2: allreduce */
        for (size_t i = 0; i < (size_t)n * C; i++)
            buf[i] = (int32_t)((size_t)rank * 1000003u + i * 7u + (size_t)round);
        /* Kind 0: rank 0 late, so the next rank's first frame waits in its queue. */
        if (rank == (kind ? round % n : 0)) usleep(100000);
        int32_t *out = kind == 1 ? buf + (size_t)rank * C : buf;
        if (kind < 2)
            MP_OK(rank, braid_reduce_scatter(buf, out, C, BRAID_INT32, BRAID_SUM, comm));
        else
            MP_OK(rank, braid_allreduce(buf, buf, (size_t)n * C, BRAID_INT32, BRAID_SUM, comm));
        size_t len = kind < 2 ? C : (size_t)n * C, bad = 0, first = 0;
        for (size_t i = 0; i < len; i++) {
            size_t gi = kind < 2 ? (size_t)rank * C + i : i;
            uint32_t e = 0;
            for (int q = 0; q < n; q++)
                e += (uint32_t)((size_t)q * 1000003u + gi * 7u + (size_t)round);
            if ((uint32_t)out[i] != e && !bad++) first = i;
        }
        MP_CHECK(rank, bad == 0, "round %d (kind %d): %zu wrong elements, the first at %zu", round,
                 kind, bad, first);
        MP_OK(rank, braid_barrier(comm));
    }
    free(buf);
    return 0;
}

Test(tcp, in_place_and_aliased_buffers_with_queued_frames, .timeout = 200)
{
    use_tcp();
    setenv("BRAID_ALGO", "ring", 1);
    setenv("BRAID_CHUNK_SIZE", "4M", 1);
    cr_assert_eq(mp_run(2, alias_fn, NULL, 150), 0, "see stderr");
    setenv("BRAID_CHUNK_SIZE", "1M", 1);
    setenv("BRAID_NCHANNELS", "2", 1);
    cr_assert_eq(mp_run(3, alias_fn, NULL, 150), 0, "see stderr");
}

/* ---- a second communicator made inside a test: IPv6, fd and thread leaks ----------------------
 */

/* The entries of a /proc directory as a bitmap of numbers (fds or thread ids below 1<<16). */
typedef struct {
    uint64_t bits[1024];
} idset_t;

static void list_dir(const char *path, idset_t *set)
{
    memset(set, 0, sizeof(*set));
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        long v = strtol(e->d_name, NULL, 10);
        if (e->d_name[0] != '.' && v >= 0 && v < 65536) set->bits[v / 64] |= 1ull << (v % 64);
    }
    closedir(d);
}

/* The first id in now that was not in before, or -1. */
static long new_id(const idset_t *before, const idset_t *now)
{
    for (int i = 0; i < 1024; i++)
        if (now->bits[i] & ~before->bits[i])
            return i * 64L + __builtin_ctzll(now->bits[i] & ~before->bits[i]);
    return -1;
}

/* Makes a unique id whose root listens on addr (rank 0) and hands it to every rank. */
static int share_id(braid_comm_t comm, int rank, const char *addr, braid_unique_id_t *id)
{
    if (rank == 0) {
        braid_boot_addr_t a;
        memset(&a, 0, sizeof(a));
        MP_OK(rank, braid_boot_parse_hostport(addr, 1, &a.addr, &a.addrlen));
        ((struct sockaddr_in *)&a.addr)->sin_port = 0; /* any port (same offset in v6) */
        MP_OK(rank, braid_boot_random_secret(a.secret));
        MP_OK(rank, braid_boot_root_start(&a, 30));
        braid_boot_id_encode(&a, id);
    }
    MP_OK(rank, braid_broadcast(id, id, sizeof(*id), BRAID_UINT8, 0, comm));
    return 0;
}

static int second_comm(braid_comm_t comm, int rank, int n, void *arg)
{
    const char *addr = arg;
    braid_unique_id_t id;
    static idset_t fds0, tasks0, fds1, tasks1;
    list_dir("/proc/self/fd", &fds0);
    list_dir("/proc/self/task", &tasks0);
    if (share_id(comm, rank, addr, &id)) return 1;
    braid_comm_t c2;
    MP_OK(rank, braid_comm_init_rank(&c2, n, id, rank));
    struct sockaddr_storage la;
    socklen_t ll;
    MP_OK(rank, braid_tcp_listen_addr(c2, &la, &ll));
    char as[80];
    braid_boot_addr_str(&la, as, sizeof(as));
    int want = strchr(addr, '[') ? AF_INET6 : AF_INET;
    MP_CHECK(rank, la.ss_family == want, "data listener on %s for a root at %s", as, addr);
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt += 2)
        if (data_check_allreduce(c2, rank, n, dt, BRAID_SUM, 70001, 0, 0, 31 + dt, "tcp")) return 1;
    MP_OK(rank, braid_comm_destroy(c2));
    /* Everything of c2 is gone (rank 0's root service exits once every rank closed). */
    for (int i = 0; i < 150; i++) {
        list_dir("/proc/self/fd", &fds1);
        list_dir("/proc/self/task", &tasks1);
        if (new_id(&fds0, &fds1) < 0 && new_id(&tasks0, &tasks1) < 0) break;
        usleep(20000);
    }
    long fd = new_id(&fds0, &fds1), task = new_id(&tasks0, &tasks1);
    char link[64], target[256] = "";
    snprintf(link, sizeof(link), "/proc/self/fd/%ld", fd);
    if (fd >= 0 && readlink(link, target, sizeof(target) - 1) < 0) target[0] = '\0';
    MP_CHECK(rank, fd < 0, "fd %ld (%s) is left after destroy", fd, target);
    MP_CHECK(rank, task < 0, "thread %ld is left after destroy", task);
    return 0;
}

Test(tcp, ipv6_loopback_and_no_fd_or_thread_left)
{
    use_tcp();
    cr_assert_eq(mp_run(3, second_comm, "[::1]", 120), 0, "IPv6 (see stderr)");
    cr_assert_eq(mp_run(2, second_comm, "127.0.0.1", 120), 0, "IPv4 (see stderr)");
}

/* ---- the data port rejects strangers ----------------------------------------------------------
 */

static int strangers(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    struct sockaddr_storage la;
    socklen_t ll;
    MP_OK(rank, braid_tcp_listen_addr(comm, &la, &ll));
    braid_tcp_hello_t h = {.rank = (rank + n - 1) % n, .channel = 0, .sock = 0, .nsocks = 1};
    tcp_conn_t *rc = NULL; /* the receive connection from that rank: its nonce, its nsocks */
    for (tcp_conn_t *c = ((tcp_state_t *)comm->tcp_state)->conns; c; c = c->next_conn)
        if (!c->base.is_send && c->base.peer == h.rank && c->base.channel == 0) rc = c;
    if (rc) h.nsocks = rc->nsocks;
    uint8_t hello[BRAID_TCP_HELLO_BYTES];
    memset(h.mac, 0x5a, sizeof(h.mac)); /* a MAC made without the secret */
    braid_tcp_hello_pack(&h, hello);
    MP_CHECK(rank, proc_listener_rejects(&la, ll, hello, sizeof(hello)),
             "a wrong MAC was not rejected");
    uint8_t junk[300];
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (uint8_t)(i * 37 + (size_t)rank);
    MP_CHECK(rank, proc_listener_rejects(&la, ll, junk, sizeof(junk)), "garbage was not rejected");
    MP_CHECK(rank, proc_listener_rejects(&la, ll, junk, 0) || 1, "connect and close");
    braid_tcp_hello_mac(comm->boot_addr.secret, rc ? rc->nonce : h.nonce, rank, hello,
                        hello + BRAID_TCP_HELLO_MACED); /* a valid MAC */
    MP_CHECK(rank, proc_listener_rejects(&la, ll, hello, sizeof(hello)),
             "a second connection for an already connected channel was not rejected");
    /* A half-sent hello sits until the listener times it out; the job goes on meanwhile. */
    int half = socket(la.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    MP_CHECK(rank, half >= 0 && connect(half, (struct sockaddr *)&la, ll) == 0, "connect");
    MP_CHECK(rank, send(half, hello, 10, MSG_NOSIGNAL) == 10, "send");
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt += 3)
        if (data_check_allreduce(comm, rank, n, dt, BRAID_SUM, 50021, 0, 0, 77 + dt, "tcp"))
            return 1;
    close(half);
    return 0;
}

Test(tcp, wrong_secret_and_garbage_on_the_data_port_are_rejected)
{
    use_tcp();
    cr_assert_eq(mp_run(3, strangers, NULL, 60), 0, "see stderr");
}

/* ---- a flood of idle connections on the data port ------------------------------------------
 */

static int count_fds(void)
{
    idset_t set;
    list_dir("/proc/self/fd", &set);
    int k = 0;
    for (int i = 0; i < 1024; i++)
        k += __builtin_popcountll(set.bits[i]);
    return k;
}

/* A forked stranger opens k connections to addr that never send anything, tells the parent on
 * the pipe, and keeps them open until killed. */
static pid_t flooder(const struct sockaddr_storage *addr, socklen_t alen, int k)
{
    int pfd[2];
    if (pipe(pfd) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* gone with the rank, whatever it returns */
        close(pfd[0]);
        for (int i = 0; i < k; i++) {
            int fd = socket(addr->ss_family, SOCK_STREAM, 0);
            if (fd < 0 || connect(fd, (const struct sockaddr *)addr, alen) != 0) _exit(1);
        }
        char c = 1;
        if (write(pfd[1], &c, 1) != 1) _exit(1);
        for (;;)
            pause();
    }
    close(pfd[1]);
    char c = 0;
    ssize_t r = pid > 0 ? read(pfd[0], &c, 1) : -1;
    close(pfd[0]);
    if (r != 1) {
        if (pid > 0) kill(pid, SIGKILL);
        return -1;
    }
    return pid;
}

#define FLOOD_CHANNEL 40 /* a channel no communicator uses */

/* Rank 0's data port gets more idle connections than it lets wait for a hello, accepted in one
 * batch (its progress thread is held meanwhile); then rank 1 connects a new channel to it
 * behind them. The connection must come through, carry a frame, and rank 0's descriptors
 * stay bounded by the pending cap (each batch of accepts used to drop one connection at most:
 * every idle one kept a descriptor for 10 s). */
static int flood_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    uint8_t info[BRAID_TCP_INFO_BYTES] = {0};
    size_t ilen = sizeof(info);
    braid_conn_t *rc = NULL, *sc = NULL;
    if (rank == 0) {
        tcp_state_t *st = comm->tcp_state;
        struct sockaddr_storage la;
        socklen_t ll;
        MP_OK(rank, braid_tcp_listen_addr(comm, &la, &ll));
        MP_OK(rank, braid_transport_tcp.recv_setup(comm, 1, FLOOD_CHANNEL, &rc, info, &ilen));
        int cap = st->pending_cap, base = count_fds();
        pthread_mutex_lock(&st->tlock);
        pid_t pid = flooder(&la, ll, cap + 120);
        pthread_mutex_unlock(&st->tlock);
        MP_CHECK(rank, pid > 0, "the flooder failed");
        MP_OK(rank, braid_broadcast(info, info, sizeof(info), BRAID_UINT8, 0, comm));
        int most = 0;
        for (int i = 0; i < 30; i++) {
            int k = count_fds() - base;
            if (k > most) most = k;
            usleep(50000);
        }
        fprintf(stderr, "rank 0: up to %d more descriptors (cap %d)\n", most, cap);
        MP_CHECK(rank, most <= cap + 4, "%d descriptors more than before the flood (cap %d)", most,
                 cap);
        double t0 = now_s();
        MP_OK(rank, braid_transport_tcp.recv_accept(rc));
        fprintf(stderr, "rank 0: rank 1's connection came through after %.2f s\n", now_s() - t0);
        const braid_msg_hdr_t *h = NULL;
        const void *buf = NULL;
        braid_result_t r;
        uint64_t deadline = braid_now_ns() + 30000000000ull;
        while ((r = rc->ops->recv_get(rc, &h, &buf)) == BRAID_INPROGRESS)
            MP_OK(rank, rc->ops->wait(rc, BRAID_WAIT_RECV, deadline));
        MP_OK(rank, r);
        MP_CHECK(rank, h->bytes == 64 * sizeof(uint32_t) && h->seq == 77, "header %u %u", h->bytes,
                 h->seq);
        for (uint32_t i = 0; i < 64; i++)
            MP_CHECK(rank, ((const uint32_t *)buf)[i] == i * 2654435761u + 1, "word %u", i);
        MP_OK(rank, rc->ops->recv_release(rc));
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    } else {
        MP_OK(rank, braid_broadcast(info, info, sizeof(info), BRAID_UINT8, 0, comm));
    }
    if (rank == 1) {
        MP_OK(rank, braid_transport_tcp.send_connect(comm, 0, FLOOD_CHANNEL, info, ilen, &sc));
        void *buf;
        MP_OK(rank, sc->ops->send_get(sc, &buf));
        for (uint32_t i = 0; i < 64; i++)
            ((uint32_t *)buf)[i] = i * 2654435761u + 1;
        braid_msg_hdr_t h = {.bytes = 64 * sizeof(uint32_t), .seq = 77, .root = -1};
        MP_OK(rank, sc->ops->send_post(sc, &h));
    }
    MP_OK(rank, braid_barrier(comm));
    if (rc) rc->ops->close(rc);
    if (sc) sc->ops->close(sc);
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt += 4)
        if (data_check_allreduce(comm, rank, n, dt, BRAID_SUM, 30011, 0, 0, 91 + dt, "tcp"))
            return 1;
    return 0;
}

Test(tcp, idle_connection_flood_on_the_data_port_is_bounded, .timeout = 120)
{
    use_tcp();
    cr_assert_eq(mp_run(3, flood_fn, NULL, 100), 0, "see stderr");
}

/* ---- a malformed frame --------------------------------------------------------------------- */

static int bad_frame(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    (void)n;
    float x[4] = {1, 2, 3, 4};
    if (rank == 0) {
        /* A header announcing more bytes than a slot holds, straight on the data socket. */
        tcp_conn_t *c = (tcp_conn_t *)comm->ring[0].send;
        braid_msg_hdr_t h = {.bytes = (uint32_t)c->base.slot_size + 1,
                             .seq = 1,
                             .coll = 1,
                             .dtype = BRAID_FLOAT32,
                             .root = -1,
                             .count = 4};
        uint8_t w[BRAID_TCP_HDR_BYTES];
        braid_tcp_hdr_pack(&h, 0, w);
        MP_CHECK(rank, send(c->sock[0].fd, w, sizeof(w), MSG_NOSIGNAL) == sizeof(w), "send");
    }
    double t0 = now_s();
    braid_result_t r = braid_allreduce(x, x, 4, BRAID_FLOAT32, BRAID_SUM, comm);
    double dt = now_s() - t0;
    fprintf(stderr, "rank %d: %s after %.3f s\n", rank, braid_last_error(), dt);
    MP_CHECK(rank, r == BRAID_ERR_REMOTE, "got %s: %s", braid_strerror(r), braid_last_error());
    MP_CHECK(rank, strstr(braid_last_error(), "rank 0"), "message: %s", braid_last_error());
    if (rank == 1)
        MP_CHECK(rank, strstr(braid_last_error(), "exceeds the slot size"), "message: %s",
                 braid_last_error());
    MP_CHECK(rank, dt < 5, "took %.2f s", dt);
    return 0;
}

Test(tcp, oversized_frame_header_is_a_remote_error)
{
    use_tcp();
    setenv("BRAID_TIMEOUT", "10", 1);
    setenv("BRAID_ALGO", "ring", 1); /* the frame goes on the ring's connection */
    cr_assert_eq(mp_run(2, bad_frame, NULL, 60), 0, "see stderr");
    unsetenv("BRAID_ALGO");
}

/* ---- faults: killed, stopped, aborted ------------------------------------------------------- */

typedef struct {
    _Atomic int iters[64];
    int result[64];
    double t_err[64];
    char msg[64][400];
} shared_t;

static shared_t *shared_new(void)
{
    shared_t *s =
        mmap(NULL, sizeof(shared_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(s != MAP_FAILED);
    memset(s, 0, sizeof(*s));
    return s;
}

/* Allreduces of 1 MiB until one fails; records the error and when it came back. */
static int loop_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    shared_t *sh = arg;
    size_t count = 1 << 18;
    float *buf = calloc(count, sizeof(float));
    braid_result_t res = BRAID_SUCCESS;
    for (int it = 0; it < 1000000 && res == BRAID_SUCCESS; it++) {
        res = braid_allreduce(buf, buf, count, BRAID_FLOAT32, BRAID_SUM, comm);
        atomic_fetch_add(&sh->iters[rank], 1);
    }
    sh->t_err[rank] = now_s();
    sh->result[rank] = res;
    snprintf(sh->msg[rank], sizeof(sh->msg[rank]), "%s", braid_last_error());
    free(buf);
    return 0;
}

static int wait_iters(shared_t *sh, int n, int iters, double timeout)
{
    double t0 = now_s();
    for (;;) {
        int ok = 1;
        for (int r = 0; r < n; r++)
            ok &= atomic_load(&sh->iters[r]) >= iters;
        if (ok) return 1;
        if (now_s() - t0 > timeout) return 0;
        usleep(10000);
    }
}

Test(tcp, killed_rank_gives_remote_error_naming_it_promptly)
{
    use_tcp();
    int ns[] = {2, 4};
    for (size_t k = 0; k < 2; k++) {
        int n = ns[k], victim = n == 2 ? 1 : 2;
        shared_t *sh = shared_new();
        mp_job_t job;
        mp_start(&job, n, loop_fn, sh);
        cr_assert(wait_iters(sh, n, 5, 60), "ranks did not get going");
        double t_kill = now_s();
        kill(job.pids[victim], SIGKILL);
        mp_wait(&job, 60);
        char name[16];
        snprintf(name, sizeof(name), "rank %d", victim);
        for (int r = 0; r < n; r++) {
            if (r == victim) continue;
            double dt = sh->t_err[r] - t_kill;
            cr_log_info("n=%d rank %d: %s after %.3f s: %s", n, r, braid_strerror(sh->result[r]),
                        dt, sh->msg[r]);
            cr_assert(WIFEXITED(job.status[r]) && WEXITSTATUS(job.status[r]) == 0,
                      "rank %d exited badly", r);
            cr_assert_eq(sh->result[r], BRAID_ERR_REMOTE, "rank %d: %s", r, sh->msg[r]);
            cr_assert(strstr(sh->msg[r], name), "rank %d's message does not name %s: %s", r, name,
                      sh->msg[r]);
            cr_assert(dt < 3.0, "rank %d took %.2f s to notice", r, dt);
        }
        munmap(sh, sizeof(*sh));
    }
}

Test(tcp, stopped_rank_gives_timeout_naming_it)
{
    use_tcp();
    setenv("BRAID_TIMEOUT", "2", 1);
    int n = 3, victim = 1;
    shared_t *sh = shared_new();
    mp_job_t job;
    mp_start(&job, n, loop_fn, sh);
    cr_assert(wait_iters(sh, n, 5, 60), "ranks did not get going");
    double t_stop = now_s();
    kill(job.pids[victim], SIGSTOP);
    for (int r = 0; r < n; r++)
        if (r != victim) waitpid(job.pids[r], &job.status[r], 0);
    kill(job.pids[victim], SIGKILL);
    waitpid(job.pids[victim], &job.status[victim], 0);
    for (int r = 0; r < n; r++) {
        if (r == victim) continue;
        double dt = sh->t_err[r] - t_stop;
        cr_log_info("rank %d: %s after %.3f s: %s", r, braid_strerror(sh->result[r]), dt,
                    sh->msg[r]);
        cr_assert(sh->result[r] == BRAID_ERR_TIMEOUT || sh->result[r] == BRAID_ERR_REMOTE,
                  "rank %d: %s", r, sh->msg[r]);
        cr_assert(dt > 1.0 && dt < 6.0, "rank %d took %.2f s", r, dt);
    }
    /* The rank that receives from the stopped one times out naming it; the others time out
     * naming the rank they wait on, or hear of a peer's failure. */
    cr_assert_eq(sh->result[2], BRAID_ERR_TIMEOUT, "rank 2: %s", sh->msg[2]);
    cr_assert(strstr(sh->msg[2], "rank 1"), "rank 2: %s", sh->msg[2]);
    munmap(sh, sizeof(*sh));
}

typedef struct {
    braid_comm_t comm;
    double delay;
} aborter_t;

static void *aborter(void *arg)
{
    aborter_t *a = arg;
    usleep((useconds_t)(a->delay * 1e6));
    braid_comm_abort(a->comm);
    return NULL;
}

/* Rank 0 aborts from a second thread while its main thread is blocked (mode 0: rank 1 is
 * late; mode 1: data is flowing in big allreduces). */
static int abort_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    int mode = *(int *)arg;
    size_t count = mode ? (8u << 20) / 4 : 1024;
    float *buf = calloc(count, sizeof(float));
    pthread_t t;
    aborter_t a = {comm, 0.4};
    if (rank == 0) pthread_create(&t, NULL, aborter, &a);
    if (rank == 1 && mode == 0) usleep(1500 * 1000);
    double t0 = now_s();
    braid_result_t res = BRAID_SUCCESS;
    for (int i = 0; i < 100000 && res == BRAID_SUCCESS; i++)
        res = braid_allreduce(buf, buf, count, BRAID_FLOAT32, BRAID_SUM, comm);
    double dt = now_s() - t0;
    if (rank == 0) pthread_join(t, NULL);
    free(buf);
    fprintf(stderr, "abort mode %d rank %d: %s after %.3f s: %s\n", mode, rank, braid_strerror(res),
            dt, braid_last_error());
    if (rank == 0) {
        MP_CHECK(rank, res == BRAID_ERR_ABORTED, "got %s", braid_strerror(res));
        MP_CHECK(rank, dt < 1.5, "abort took %.2f s", dt);
    } else {
        MP_CHECK(rank, res == BRAID_ERR_REMOTE, "got %s: %s", braid_strerror(res),
                 braid_last_error());
        MP_CHECK(rank, strstr(braid_last_error(), "rank 0"), "message: %s", braid_last_error());
        MP_CHECK(rank, dt < (mode ? 2.0 : 1.5 + 2.0), "took %.2f s", dt);
    }
    return 0;
}

Test(tcp, abort_from_another_thread_unblocks_promptly)
{
    use_tcp();
    int mode0 = 0, mode1 = 1;
    cr_assert_eq(mp_run(2, abort_fn, &mode0, 60), 0, "blocked waiting (see stderr)");
    cr_assert_eq(mp_run(2, abort_fn, &mode1, 60), 0, "data flowing (see stderr)");
}
