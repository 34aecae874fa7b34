/* Single-copy point-to-point within a host (src/core/p2p_cma.c) as real processes: sizes
 * around BRAID_P2P_CMA_MIN and over several 1 MiB pieces, every dtype, unaligned buffers, n = 2
 * to 8, with the path forced on (senders helping, and not) and off (each checked bit-exactly
 * against tests/common/data.c, and the path taken checked through the pull counters); all-to-all
 * (in place too), gather and allgatherv over it; a count mismatch over it (named, nothing written
 * past either buffer); a sender killed and an abort while a receiver pulls; probes made to fail
 * (all ranks, and one rank only) falling back to the slots; auto on whether or not the machine has
 * more ranks than cpus; PR_SET_PTRACER_ANY held only while a communicator with a peer on the
 * host uses CMA. */
#include "core/p2p.h"
#include "data.h"
#include "mp.h"
#include "proc.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIN_BYTES 4096

static int seed_of(int s, int d, int it)
{
    return 3 + s * 101 + d * 17 + it * 997;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- a ring exchange over every dtype and sizes around the threshold --------------------- */
typedef struct {
    int on;   /* BRAID_P2P_CMA=1 (else 0) */
    int help; /* BRAID_P2P_CMA_HELP=1 (else 0) */
} mode_t_;

static int ring_sizes(braid_comm_t comm, int rank, int n, void *arg)
{
    const mode_t_ *m = arg;
    int next = (rank + 1) % n, prev = (rank + n - 1) % n, it = 0;
    size_t big = data_quick() ? ((size_t)3 << 20) + 40 : ((size_t)5 << 20) + 40;
    unsigned nbig = 0;
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++) {
        size_t es = braid_dtype_size(dt), at = MIN_BYTES / es;
        size_t counts[] = {0, 1, at - 1, at, at + 1, 3 * at + 7, big / es};
        /* the message of several pieces for a quarter of the dtypes at each n (the copy is the
         * same for every dtype; n = 2, 3, 5, 8 cover them all) */
        int with_big = (dt + n) % 4 == 0;
        nbig += (unsigned)with_big;
        for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]) - !with_big; ci++, it++) {
            size_t count = counts[ci], bytes = count * es;
            size_t off = ci & 1 ? 1 + (size_t)dt % 5 : 0; /* unaligned buffers */
            char *in = data_xmalloc(bytes + 8), *out = data_xmalloc(bytes + 8);
            data_fill(in + off, dt, BRAID_SUM, rank, 0, count, seed_of(rank, next, it));
            memset(out, 0xEE, bytes + 8);
            MP_OK(rank, braid_group_start());
            if (it & 1) {
                MP_OK(rank, braid_recv(out + off, count, dt, prev, comm));
                MP_OK(rank, braid_send(in + off, count, dt, next, comm));
            } else {
                MP_OK(rank, braid_send(in + off, count, dt, next, comm));
                MP_OK(rank, braid_recv(out + off, count, dt, prev, comm));
            }
            MP_OK(rank, braid_group_end());
            char what[128];
            snprintf(what, sizeof(what), "cma=%d help=%d n=%d %s count=%zu from %d", m->on, m->help,
                     n, braid_dtype_name(dt), count, prev);
            MP_CHECK(rank,
                     !data_check_rank(out + off, dt, BRAID_SUM, prev, 0, count,
                                      seed_of(prev, rank, it), what),
                     "%s", what);
            for (size_t k = 0; k < off; k++)
                MP_CHECK(rank, (unsigned char)out[k] == 0xEE, "%s: wrote before the start", what);
            MP_CHECK(rank, (unsigned char)out[off + bytes] == 0xEE, "%s: wrote past the end", what);
            free(in);
            free(out);
        }
    }
    /* The path taken: 3 messages per dtype reach MIN_BYTES (at, at + 1, 3 at + 7), and the big
     * ones. */
    uint64_t pulled = 0, pulls = braid_p2p_cma_pulls(comm, &pulled);
    MP_CHECK(rank, braid_p2p_cma_peer(comm, next) == m->on, "cma to rank %d: %d", next,
             braid_p2p_cma_peer(comm, next));
    MP_CHECK(rank, pulls == (m->on ? 3u * BRAID_NUM_DTYPES + nbig : 0u), "pulls %llu",
             (unsigned long long)pulls);
    return 0;
}

static void set_mode(int on, int help)
{
    setenv("BRAID_P2P_CMA", on ? "1" : "0", 1);
    setenv("BRAID_P2P_CMA_HELP", help ? "1" : "0", 1);
    char v[32];
    snprintf(v, sizeof(v), "%d", MIN_BYTES);
    setenv("BRAID_P2P_CMA_MIN", v, 1);
    setenv("BRAID_P2P_CMA_PIECE", "1M", 1); /* the 3-5 MiB messages take several pieces */
}

Test(p2p_cma, ring_sizes_around_threshold_every_dtype_on_and_off, .timeout = 300)
{
    int ns[] = {2, 3, 5, 8};
    mode_t_ modes[] = {{1, 1}, {1, 0}, {0, 0}};
    for (int k = 0; k < 3; k++) {
        mode_t_ m = modes[k];
        set_mode(m.on, m.help);
        for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
            if (data_quick() && ns[i] > 3) continue;
            cr_assert_eq(mp_run(ns[i], ring_sizes, &m, 250), 0, "cma=%d help=%d n=%d", m.on, m.help,
                         ns[i]);
        }
    }
}

/* ---- the collectives of the batch runner over it ----------------------------------------- */
static int colls(braid_comm_t comm, int rank, int n, void *arg)
{
    const mode_t_ *m = arg;
    braid_datatype_t dt = BRAID_INT32;
    size_t count = 3 * MIN_BYTES / 4 + 5, bytes = count * 4; /* per peer */
    char *in = data_xmalloc(bytes * (size_t)n + 4), *out = data_xmalloc(bytes * (size_t)n + 4);
    for (int inplace = 0; inplace < 2; inplace++) {
        for (int d = 0; d < n; d++)
            data_fill(in + 1 + (size_t)d * bytes, dt, BRAID_SUM, rank, 0, count,
                      seed_of(rank, d, 5));
        char *o = inplace ? in : out;
        MP_OK(rank, braid_alltoall(in + 1, o + 1, count, dt, comm));
        for (int s = 0; s < n; s++) {
            char what[96];
            snprintf(what, sizeof(what), "alltoall cma=%d help=%d in_place=%d from %d", m->on,
                     m->help, inplace, s);
            MP_CHECK(rank,
                     !data_check_rank(o + 1 + (size_t)s * bytes, dt, BRAID_SUM, s, 0, count,
                                      seed_of(s, rank, 5), what),
                     "%s", what);
        }
    }
    /* gather to the last rank, then allgatherv with counts that differ per rank */
    data_fill(in, dt, BRAID_SUM, rank, 0, count, seed_of(rank, 0, 6));
    MP_OK(rank, braid_gather(in, out, count, dt, n - 1, comm));
    if (rank == n - 1)
        for (int s = 0; s < n; s++)
            MP_CHECK(rank,
                     !data_check_rank(out + (size_t)s * bytes, dt, BRAID_SUM, s, 0, count,
                                      seed_of(s, 0, 6), "gather"),
                     "gather from %d", s);
    size_t rc[8], dis[8], tot = 0;
    for (int s = 0; s < n; s++) {
        rc[s] = count - (size_t)s * 3;
        dis[s] = tot;
        tot += rc[s];
    }
    data_fill(in, dt, BRAID_SUM, rank, 0, rc[rank], seed_of(rank, 0, 7));
    MP_OK(rank, braid_allgatherv(in, rc[rank], out, rc, dis, dt, comm));
    for (int s = 0; s < n; s++)
        MP_CHECK(rank,
                 !data_check_rank(out + dis[s] * 4, dt, BRAID_SUM, s, 0, rc[s], seed_of(s, 0, 7),
                                  "allgatherv"),
                 "allgatherv from %d", s);
    uint64_t pulls = braid_p2p_cma_pulls(comm, NULL);
    MP_CHECK(rank, m->on ? pulls > 0 : pulls == 0, "pulls %llu", (unsigned long long)pulls);
    free(in);
    free(out);
    return 0;
}

Test(p2p_cma, alltoall_gather_allgatherv_on_and_off, .timeout = 200)
{
    int ns[] = {2, 4, 7};
    mode_t_ modes[] = {{1, 1}, {1, 0}, {0, 0}};
    for (int k = 0; k < 3; k++) {
        mode_t_ m = modes[k];
        set_mode(m.on, m.help);
        for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++)
            cr_assert_eq(mp_run(ns[i], colls, &m, 150), 0, "cma=%d help=%d n=%d", m.on, m.help,
                         ns[i]);
    }
}

/* ---- a count mismatch over it ------------------------------------------------------------ */
static int mismatch(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    int bigger = *(const int *)arg; /* the receiver names more elements than were sent */
    size_t sent = 300000, named = bigger ? sent + 1 : sent - 1;
    if (rank == 0) {
        float *x = data_xmalloc(sent * 4);
        data_fill(x, BRAID_FLOAT32, BRAID_SUM, 0, 0, sent, 9);
        braid_result_t r = braid_send(x, sent, BRAID_FLOAT32, 1, comm);
        MP_CHECK(rank, r == BRAID_ERR_MISMATCH || r == BRAID_ERR_REMOTE, "send: %s: %s",
                 braid_strerror(r), braid_last_error());
        free(x);
    } else if (rank == 1) {
        char *y = data_xmalloc(named * 4 + 8);
        memset(y, 0x5A, named * 4 + 8);
        braid_result_t r = braid_recv(y, named, BRAID_FLOAT32, 0, comm);
        char c3[32], c4[32];
        snprintf(c3, sizeof(c3), "count %zu", sent);
        snprintf(c4, sizeof(c4), "count %zu", named);
        MP_CHECK(rank,
                 r == BRAID_ERR_MISMATCH && strstr(braid_last_error(), "send #1 to rank 1") &&
                     strstr(braid_last_error(), "recv #1 from rank 0") &&
                     strstr(braid_last_error(), c3) && strstr(braid_last_error(), c4),
                 "mismatch: %s: %s", braid_strerror(r), braid_last_error());
        for (size_t k = 0; k < named * 4 + 8; k++)
            MP_CHECK(rank, (unsigned char)y[k] == 0x5A, "byte %zu written", k);
        MP_CHECK(rank, braid_p2p_cma_pulls(comm, NULL) == 0, "pulled a mismatched message");
        free(y);
    }
    return 0;
}

Test(p2p_cma, count_mismatch_is_named_and_reads_nothing, .timeout = 60)
{
    set_mode(1, 0);
    for (int bigger = 0; bigger < 2; bigger++)
        cr_assert_eq(mp_run(2, mismatch, &bigger, 40), 0, "bigger=%d", bigger);
}

/* ---- a sender killed, or an abort, while the receiver pulls ----------------------------- */
typedef struct {
    int abort; /* 0: kill the sender; 1: the receiver aborts */
    int help;  /* BRAID_P2P_CMA_HELP: the sender writes pieces too */
} fault_t;

static int fault(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    const fault_t *f = arg;
    size_t bytes = data_quick() ? (size_t)256 << 20 : (size_t)512 << 20;
    int32_t pid = (int32_t)getpid(), spid = 0;
    if (rank == 0) MP_OK(rank, braid_send(&pid, 1, BRAID_INT32, 1, comm));
    if (rank == 1) MP_OK(rank, braid_recv(&spid, 1, BRAID_INT32, 0, comm));
    char *buf = data_xmalloc(bytes);
    memset(buf, rank + 1, bytes); /* every page touched: the pull takes its time */
    if (rank == 0) {
        braid_result_t r = braid_send(buf, bytes, BRAID_UINT8, 1, comm);
        if (f->abort) { /* the receiver aborted: its failure reaches the sender */
            MP_CHECK(rank, r == BRAID_ERR_REMOTE || r == BRAID_ERR_ABORTED, "send: %s: %s",
                     braid_strerror(r), braid_last_error());
            free(buf);
            return 0;
        }
        sleep(60); /* killed before this ends */
        return 1;
    }
    braid_request_t req;
    MP_OK(rank, braid_irecv(buf, bytes, BRAID_UINT8, 0, comm, &req));
    uint64_t pulled = 0;
    for (int i = 0; i < 20000 && pulled == 0; i++) {
        braid_p2p_cma_pulls(comm, &pulled);
        if (!pulled) sleep_ms(1);
    }
    MP_CHECK(rank, pulled > 0 && pulled < bytes, "pull not in progress: %llu of %zu bytes",
             (unsigned long long)pulled, bytes);
    if (f->abort)
        MP_OK(rank, braid_comm_abort(comm));
    else
        kill(spid, SIGKILL);
    braid_result_t r = braid_wait(req);
    if (f->abort) {
        MP_CHECK(rank, r == BRAID_ERR_ABORTED, "wait: %s: %s", braid_strerror(r),
                 braid_last_error());
        /* Nothing reaches the buffer once the call has returned (a helping sender's pieces
         * finished before it did). */
        memset(buf, 0x33, bytes);
        sleep_ms(200);
        size_t k = 0;
        while (k < bytes && (unsigned char)buf[k] == 0x33)
            k++;
        MP_CHECK(rank, k == bytes, "help=%d: byte %zu written after the receive returned", f->help,
                 k);
    } else {
        MP_CHECK(rank, r == BRAID_ERR_REMOTE && strstr(braid_last_error(), "rank 0"),
                 "wait: %s: %s", braid_strerror(r), braid_last_error());
    }
    free(buf);
    return 0;
}

Test(p2p_cma, killed_sender_during_a_pull_is_remote_error, .timeout = 200)
{
    for (int help = 0; help < 2; help++) {
        set_mode(1, help);
        fault_t f = {0, help};
        mp_job_t job;
        mp_start(&job, 2, fault, &f);
        mp_wait(&job, 90);
        cr_assert(WIFSIGNALED(job.status[0]) && WTERMSIG(job.status[0]) == SIGKILL,
                  "help=%d: rank 0 was not killed (status %d)", help, job.status[0]);
        cr_assert(WIFEXITED(job.status[1]) && WEXITSTATUS(job.status[1]) == 0,
                  "help=%d: rank 1 failed (status %d)", help, job.status[1]);
    }
}

Test(p2p_cma, abort_during_a_pull, .timeout = 200)
{
    for (int help = 0; help < 2; help++) {
        set_mode(1, help);
        fault_t f = {1, help};
        cr_assert_eq(mp_run(2, fault, &f, 90), 0, "help=%d", help);
    }
}

/* ---- probes that fail fall back to the slots --------------------------------------------- */
/* Inside a rank: a ring exchange (send to rank + 1, receive from rank - 1) of count elements of
 * dt in one group, the received data checked against the reference (seed tag it). */
static int ring_exchange(braid_comm_t c, int rank, int n, braid_datatype_t dt, size_t count, int it,
                         const char *what)
{
    int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    size_t bytes = count * braid_dtype_size(dt);
    char *in = data_xmalloc(bytes), *out = data_xmalloc(bytes);
    data_fill(in, dt, BRAID_SUM, rank, 0, count, seed_of(rank, next, it));
    MP_OK(rank, braid_group_start());
    MP_OK(rank, braid_send(in, count, dt, next, c));
    MP_OK(rank, braid_recv(out, count, dt, prev, c));
    MP_OK(rank, braid_group_end());
    size_t bad = data_check_rank(out, dt, BRAID_SUM, prev, 0, count, seed_of(prev, rank, it), what);
    free(in);
    free(out);
    MP_CHECK(rank, !bad, "%s: from %d", what, prev);
    return 0;
}

static int probe_fail(braid_comm_t comm, int rank, int n, void *arg)
{
    int only_rank1 = *(const int *)arg;
    braid_comm_t c = comm;
    if (only_rank1) { /* a communicator made after rank 1 set the hook (split re-reads it) */
        if (rank == 1) setenv("BRAID_P2P_CMA_PROBE_FAIL", "1", 1);
        MP_OK(rank, braid_comm_split(comm, 0, rank, &c));
    }
    int next = (rank + 1) % n;
    if (ring_exchange(c, rank, n, BRAID_FLOAT64, 200003, 11, "probe fail")) return 1;
    /* Rank 1's probes fail: nobody sends to rank 1 by CMA, rank 1 pulls nothing. */
    int expect_on = only_rank1 && next != 1;
    MP_CHECK(rank, braid_p2p_cma_peer(c, next) == expect_on, "cma to %d: %d (expected %d)", next,
             braid_p2p_cma_peer(c, next), expect_on);
    uint64_t pulls = braid_p2p_cma_pulls(c, NULL);
    MP_CHECK(rank, pulls == (uint64_t)(only_rank1 && rank != 1), "pulls %llu",
             (unsigned long long)pulls);
    if (c != comm) MP_OK(rank, braid_comm_destroy(c));
    return 0;
}

Test(p2p_cma, failed_probe_falls_back_to_slots, .timeout = 120)
{
    set_mode(1, 0);
    int only = 1;
    cr_assert_eq(mp_run(3, probe_fail, &only, 60), 0, "rank 1's probes fail");
    setenv("BRAID_P2P_CMA_PROBE_FAIL", "1", 1);
    only = 0;
    cr_assert_eq(mp_run(3, probe_fail, &only, 60), 0, "every probe fails");
}

/* ---- a piece smaller than a page is refused at init, naming the variable ----------------- */
Test(p2p_cma, piece_below_a_page_is_refused, .timeout = 60)
{
    setenv("BRAID_P2P_CMA_PIECE", "1000", 1);
    setenv("BRAID_TIMEOUT", "20", 1);
    braid_unique_id_t id;
    cr_assert_eq(braid_get_unique_id(&id), BRAID_SUCCESS);
    pid_t pid[2];
    for (int r = 0; r < 2; r++)
        if ((pid[r] = fork()) == 0) {
            braid_comm_t c;
            braid_result_t res = braid_comm_init_rank(&c, 2, id, r);
            if (res == BRAID_ERR_INVALID_ARG &&
                strstr(braid_last_error(), "BRAID_P2P_CMA_PIECE=1000"))
                _exit(0);
            fprintf(stderr, "rank %d: init: %s: %s\n", r, braid_strerror(res), braid_last_error());
            _exit(1);
        }
    for (int r = 0; r < 2; r++) {
        int st = 0;
        cr_assert_eq(waitpid(pid[r], &st, 0), pid[r]);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d (status %d)", r, st);
    }
    unsetenv("BRAID_P2P_CMA_PIECE");
}

/* ---- PR_SET_PTRACER_ANY only when a communicator has a peer on the host (never reset) ---- */
/* Without Yama (ptrace_scope) the setting has no effect and cannot be read back (there is no
 * PR_GET_PTRACER): the count of communicators holding it is what is checked. */
static int ptracer(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    MP_CHECK(rank, braid_p2p_cma_ptracer_refs() == 0, "CMA off: %d", braid_p2p_cma_ptracer_refs());
    setenv("BRAID_P2P_CMA", "auto", 1);
    braid_comm_t tcp = mp_fake_host_comm(comm, rank, rank, ""); /* a host per rank: tcp */
    MP_CHECK(rank, tcp != NULL, "split");
    MP_CHECK(rank, braid_p2p_cma_ptracer_refs() == 0, "tcp only: %d", braid_p2p_cma_ptracer_refs());
    if (ring_exchange(tcp, rank, n, BRAID_INT32, 3 * MIN_BYTES, 21, "tcp ring")) return 1;
    /* Rank 0 on, its peers off: nobody probes rank 0, which lets go after the exchange. */
    setenv("BRAID_P2P_CMA", rank == 0 ? "auto" : "0", 1);
    braid_comm_t half;
    MP_OK(rank, braid_comm_split(comm, 0, rank, &half));
    MP_CHECK(rank, braid_p2p_cma_ptracer_refs() == 0, "peers off: %d",
             braid_p2p_cma_ptracer_refs());
    setenv("BRAID_P2P_CMA", "auto", 1);
    braid_comm_t s1, s2;
    MP_OK(rank, braid_comm_split(comm, 0, rank, &s1));
    MP_CHECK(rank, braid_p2p_cma_ptracer_refs() == 1, "one: %d", braid_p2p_cma_ptracer_refs());
    MP_OK(rank, braid_comm_split(comm, 0, rank, &s2));
    MP_CHECK(rank, braid_p2p_cma_ptracer_refs() == 2, "two: %d", braid_p2p_cma_ptracer_refs());
    if (ring_exchange(s1, rank, n, BRAID_INT32, 3 * MIN_BYTES, 22, "shm ring")) return 1;
    MP_CHECK(rank, braid_p2p_cma_pulls(s1, NULL) == 1, "no CMA on the shm communicator");
    MP_OK(rank, braid_comm_destroy(s1));
    MP_CHECK(rank, braid_p2p_cma_ptracer_refs() == 1, "one left: %d", braid_p2p_cma_ptracer_refs());
    MP_OK(rank, braid_comm_destroy(s2));
    MP_CHECK(rank, braid_p2p_cma_ptracer_refs() == 0, "none left: %d",
             braid_p2p_cma_ptracer_refs());
    MP_OK(rank, braid_comm_destroy(half));
    MP_OK(rank, braid_comm_destroy(tcp));
    return 0;
}

Test(p2p_cma, ptracer_only_while_a_peer_on_the_host_uses_cma, .timeout = 120)
{
    set_mode(0, 0);
    cr_assert_eq(mp_run(2, ptracer, NULL, 60), 0, "2 ranks");
    cr_assert_eq(mp_run(3, ptracer, NULL, 60), 0, "3 ranks");
}

/* ---- auto: on with more ranks than cpus too (from BRAID_P2P_CMA_MIN) ------------------------ */
typedef struct {
    int expect; /* CMA to the next rank */
} auto_t;

static int auto_ring(braid_comm_t comm, int rank, int n, void *arg)
{
    const auto_t *a = arg;
    int next = (rank + 1) % n;
    /* int32: 3 x the threshold */
    if (ring_exchange(comm, rank, n, BRAID_INT32, 3 * MIN_BYTES, 9, "auto ring")) return 1;
    MP_CHECK(rank, braid_p2p_cma_peer(comm, next) == a->expect, "cma to %d: %d (expected %d)", next,
             braid_p2p_cma_peer(comm, next), a->expect);
    uint64_t pulls = braid_p2p_cma_pulls(comm, NULL);
    MP_CHECK(rank, pulls == (uint64_t)a->expect, "pulls %llu", (unsigned long long)pulls);
    return 0;
}

Test(p2p_cma, auto_is_on_with_more_ranks_than_cpus_too, .timeout = 120)
{
    set_mode(1, 0);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const char *modes[] = {"auto", "1", "0"};
    for (int m = 0; m < 3; m++) {
        setenv("BRAID_P2P_CMA", modes[m], 1);
        auto_t want = {m < 2};
        cr_assert_eq(mp_run(2, auto_ring, &want, 60), 0, "2 ranks on %ld cpus, %s", cpus, modes[m]);
        if (cpus < 8) {
            int n = (int)cpus + 1;
            cr_assert_eq(mp_run(n, auto_ring, &want, 60), 0, "%d ranks on %ld cpus, %s", n, cpus,
                         modes[m]);
        }
    }
}

/* ---- a CMA send whose receiver went on to a collective ---------------------------------- */
/* The check itself, deterministically (braid_p2p_blocked_foreign, as the runner calls it for
 * an operation its last pass found blocked): rank 1 received rank 0's 16 MiB CMA send and
 * waits in an all-reduce; rank 0 checks that send as if it were still blocked. Waiting for the
 * release (now given) it is no mismatch; still posting (it cannot be complete on rank 1) the
 * all-reduce is one, naming it (the evidence is there). */
static int released_send_check(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    size_t count = ((size_t)16 << 20) / sizeof(float);
    float *buf = data_xmalloc(count * sizeof(float)), x[4] = {1, 2, 3, 4}, y[4];
    memset(buf, 0, count * sizeof(float));
    if (rank == 1) {
        MP_OK(rank, braid_recv(buf, count, BRAID_FLOAT32, 0, comm));
    } else {
        MP_OK(rank, braid_send(buf, count, BRAID_FLOAT32, 1, comm));
        sleep_ms(300); /* rank 1 is in its all-reduce, its first message here */
        braid_p2p_op_t op = {.kind = BRAID_P2P_SEND,
                             .peer = 1,
                             .sbuf = buf,
                             .count = count,
                             .dtype = BRAID_FLOAT32,
                             .coll = BRAID_COLL_SEND,
                             .seq = 1,
                             .root = -1,
                             .cma = 1};
        braid_result_t r = braid_p2p_blocked_foreign(comm, &op, BRAID_WAIT_RELEASED);
        MP_CHECK(rank, r == BRAID_SUCCESS, "released send: %s: %s", braid_strerror(r),
                 braid_last_error());
        r = braid_p2p_blocked_foreign(comm, &op, BRAID_WAIT_SEND);
        MP_CHECK(rank, r == BRAID_ERR_MISMATCH && strstr(braid_last_error(), "allreduce #1"),
                 "send still posting: %s: %s", braid_strerror(r), braid_last_error());
    }
    MP_OK(rank, braid_allreduce(x, y, 4, BRAID_FLOAT32, BRAID_SUM, comm));
    MP_CHECK(rank, y[3] == (float)(4 * n), "y[3]=%g", y[3]);
    MP_CHECK(rank, rank == 0 || braid_p2p_cma_pulls(comm, NULL) == 1, "not sent by CMA");
    free(buf);
    return 0;
}

Test(p2p_cma, released_send_is_no_mismatch_with_the_receivers_collective, .timeout = 60)
{
    set_mode(1, 0);
    cr_assert_eq(mp_run(2, released_send_check, NULL, 40), 0);
}

/* ---- a CMA send whose receiver went on to a collective ---------------------------------- */
/* Rank 0 sends 16 MiB by CMA, rank 1 receives it, then both call an all-reduce, many rounds,
 * both ranks on one cpu (the test pins itself; the ranks inherit it). Rank 1 releases the send,
 * returns and starts its all-reduce while rank 0 may still be found blocked in the send by its
 * runner's last pass: that is no mismatch (the all-reduce's messages, and its notice, are evidence
 * only while the send is not released). Timing-dependent: rank 0 must be preempted between a pass
 * and its mismatch check, so this guards against the error more than it provokes it. */
static int cma_then_allreduce(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    size_t count = ((size_t)16 << 20) / sizeof(float);
    int rounds = data_quick() ? 40 : 120;
    float *buf = data_xmalloc(count * sizeof(float));
    memset(buf, 0, count * sizeof(float));
    for (int it = 0; it < rounds; it++) {
        if (rank == 0) {
            buf[0] = buf[count - 1] = (float)it;
            MP_OK(rank, braid_send(buf, count, BRAID_FLOAT32, 1, comm));
        } else {
            MP_OK(rank, braid_recv(buf, count, BRAID_FLOAT32, 0, comm));
            MP_CHECK(rank, buf[0] == (float)it && buf[count - 1] == (float)it,
                     "round %d: got %g .. %g", it, buf[0], buf[count - 1]);
        }
        float x[4], y[4];
        for (int i = 0; i < 4; i++)
            x[i] = (float)(rank + it + i);
        MP_OK(rank, braid_allreduce(x, y, 4, BRAID_FLOAT32, BRAID_SUM, comm));
        for (int i = 0; i < 4; i++)
            MP_CHECK(rank, y[i] == (float)(n * (it + i) + 1), "round %d: y[%d]=%g", it, i, y[i]);
    }
    if (rank == 1)
        MP_CHECK(rank, braid_p2p_cma_pulls(comm, NULL) == (uint64_t)rounds, "pulls %llu of %d",
                 (unsigned long long)braid_p2p_cma_pulls(comm, NULL), rounds);
    free(buf);
    return 0;
}

Test(p2p_cma, released_send_then_a_collective_on_one_cpu_is_no_mismatch, .timeout = 200)
{
    set_mode(1, 0);
    const char *tr = getenv("BRAID_TRANSPORT");
    char *was = tr ? strdup(tr) : NULL;
    setenv("BRAID_TRANSPORT", "shm", 1);
    /* Both ranks (and their threads) on the first cpu this test may use: they inherit it. */
    cr_assert_eq(proc_pin_first_cpu(NULL), 0);
    for (int k = 0; k < 3; k++)
        cr_assert_eq(mp_run(2, cma_then_allreduce, NULL, 60), 0, "run %d", k);
    if (was)
        setenv("BRAID_TRANSPORT", was, 1);
    else
        unsetenv("BRAID_TRANSPORT");
    free(was);
}
