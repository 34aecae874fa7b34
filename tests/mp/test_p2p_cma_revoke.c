/* A failed CMA receive returns only once its helping sender can no longer write into its buffer
 * (src/core/p2p_cma.c braid_p2p_cma_revoke), as real processes. The sender is held inside a
 * piece (braid_p2p_cma_test_stall: between the piece's claim and its process_vm_writev) and the
 * receiver leaves it that first piece, so the window is there every run:
 * - another thread of the sender aborts its communicator meanwhile: the receiver's wait sees the
 *   sender's connection failed while the sender is still about to write; the receive must
 *   return only after that write, so that no byte of its buffer changes once it has returned;
 * - the write fails (the receiver unmapped the piece's first page meanwhile): the piece counts
 *   as finished but failed, so the receiver returns BRAID_ERR_REMOTE at once instead of waiting
 *   for it to its timeout, and does not take the message for complete;
 * - the receiver is killed and its pid given to another process (clone3 with set_tid, where
 *   allowed) that maps memory at the receiver's buffer's address: the sender, whose receiver's
 *   pid now names that process, must not write into it (it polls the receiver's pidfd).
 * The processes meet through a page they all inherit (shared_t). */
#include "core/p2p.h"
#include "mp.h"
#include "proc.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <linux/sched.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

TestSuite(p2p_cma_revoke, .timeout = 120);

#define BYTES ((size_t)32 << 20) /* 32 pieces of 1 MiB */
#define STALL_NS 1500000000ull   /* the sender's stall inside its piece */
#define RECV_TIMEOUT_S 20.0      /* the receiver's timeout: never reached when it works */
#define RETURN_WITHIN_S 8.0      /* a receive that returns later sat on its timeout */

enum { ABORT, UNMAP, REUSE };

typedef struct {
    int what;             /* ABORT: the sender aborts; UNMAP: its write fails; REUSE: see top */
    _Atomic int stalled;  /* rank 0: its sender is inside the piece */
    _Atomic int unmapped; /* rank 1: the piece's first page is gone */
    _Atomic int sent;     /* rank 0: its send returned (the piece written or failed) */
    _Atomic int received; /* rank 1: its receive returned (rank 0 lives until then) */
    _Atomic uint64_t dst; /* REUSE: rank 1's buffer */
    _Atomic int ready;    /* REUSE: the process with rank 1's pid has mapped it */
} shared_t;

typedef struct {
    braid_comm_t comm;
    shared_t *sh;
} watch_t;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Waits up to 30 s for *flag; 1 when it was set. */
static int wait_flag(_Atomic int *flag)
{
    for (int i = 0; i < 30000 && !atomic_load(flag); i++)
        sleep_ms(1);
    return atomic_load(flag) != 0;
}

/* Rank 0's second thread: once the sender is inside its piece, tells rank 1, then aborts (the
 * abort case) 100 ms later, well before the stall ends. */
static void *watcher(void *arg)
{
    watch_t *w = arg;
    for (int i = 0; i < 30000 && !braid_p2p_cma_test_stalled((struct braid_comm *)w->comm); i++)
        sleep_ms(1);
    atomic_store(&w->sh->stalled, braid_p2p_cma_test_stalled((struct braid_comm *)w->comm));
    if (w->sh->what == ABORT) {
        sleep_ms(100);
        braid_comm_abort(w->comm);
    }
    return NULL;
}

static int sender(braid_comm_t comm, int rank, shared_t *sh)
{
    char *buf = malloc(BYTES);
    MP_CHECK(rank, buf != NULL, "out of memory");
    memset(buf, 0xab, BYTES);
    braid_p2p_cma_test_stall((struct braid_comm *)comm, STALL_NS * (sh->what == REUSE ? 2 : 1), 0);
    watch_t w = {comm, sh};
    pthread_t t;
    MP_CHECK(rank, pthread_create(&t, NULL, watcher, &w) == 0, "pthread_create");
    braid_result_t r = braid_send(buf, BYTES, BRAID_UINT8, 1, comm);
    atomic_store(&sh->sent, 1);
    pthread_join(t, NULL);
    int ready = atomic_load(&sh->ready);
    /* A sender that has exited writes nothing: it waits for the receive's return. */
    int received = sh->what == REUSE || wait_flag(&sh->received);
    free(buf);
    MP_CHECK(rank, atomic_load(&sh->stalled), "the sender never wrote a piece");
    MP_CHECK(rank, received, "the receive did not return");
    if (sh->what == REUSE)
        MP_CHECK(rank, ready, "rank 1's pid was not reused before the sender's write");
    if (sh->what != ABORT)
        MP_CHECK(rank, r == BRAID_ERR_REMOTE, "send: %s: %s", braid_strerror(r),
                 braid_last_error());
    else
        MP_CHECK(rank, r == BRAID_ERR_ABORTED || r == BRAID_ERR_REMOTE, "send: %s: %s",
                 braid_strerror(r), braid_last_error());
    return 0;
}

/* Rank 1's second thread (the unmap case): takes the sender's piece's first page away while
 * the sender is held before writing it. */
static void *unmapper(void *arg)
{
    void **a = arg;
    shared_t *sh = a[1];
    if (wait_flag(&sh->stalled)) {
        munmap(a[0], (size_t)sysconf(_SC_PAGESIZE));
        atomic_store(&sh->unmapped, 1);
    }
    return NULL;
}

static int receiver(braid_comm_t comm, int rank, shared_t *sh)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char *buf = mmap(NULL, BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    MP_CHECK(rank, buf != MAP_FAILED, "mmap: %m");
    memset(buf, 0x11, BYTES);
    atomic_store(&sh->dst, (uint64_t)(uintptr_t)buf);
    MP_OK(rank, braid_comm_set_timeout(comm, RECV_TIMEOUT_S));
    braid_p2p_cma_test_stall((struct braid_comm *)comm, 0, 1); /* the sender takes piece 0 */
    void *arg[2] = {buf, sh};
    pthread_t t;
    if (sh->what == UNMAP)
        MP_CHECK(rank, pthread_create(&t, NULL, unmapper, arg) == 0, "pthread_create");
    double t0 = proc_now_s();
    braid_result_t r = braid_recv(buf, BYTES, BRAID_UINT8, 0, comm);
    double took = proc_now_s() - t0;
    atomic_store(&sh->received, 1);
    /* The buffer is the caller's again: every byte after the first page must stay so. */
    memset(buf + page, 0x33, BYTES - page);
    if (sh->what == UNMAP) pthread_join(t, NULL);
    MP_CHECK(rank, r == BRAID_ERR_REMOTE, "recv after %.2f s: %s: %s", took, braid_strerror(r),
             braid_last_error());
    MP_CHECK(rank, took < RETURN_WITHIN_S, "recv returned after %.2f s (timeout %.0f s): %s", took,
             RECV_TIMEOUT_S, braid_last_error());
    MP_CHECK(rank, wait_flag(&sh->sent), "the sender's send did not return");
    if (sh->what == UNMAP) MP_CHECK(rank, atomic_load(&sh->unmapped), "the page was not unmapped");
    size_t k = page;
    while (k < BYTES && (unsigned char)buf[k] == 0x33)
        k++;
    MP_CHECK(rank, k == BYTES, "byte %zu was written after the receive returned (after %.2f s)", k,
             took);
    munmap(buf + page, BYTES - page);
    if (sh->what != UNMAP) munmap(buf, page);
    return 0;
}

static int run_case(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    shared_t *sh = arg;
    MP_CHECK(rank, braid_p2p_cma_peer((struct braid_comm *)comm, 1 - rank), "CMA is off");
    MP_OK(rank, braid_barrier(comm));
    return rank == 0 ? sender(comm, rank, sh) : receiver(comm, rank, sh);
}

static shared_t *shared_new(int what)
{
    setenv("BRAID_P2P_CMA", "1", 1);
    setenv("BRAID_P2P_CMA_HELP", "1", 1);
    setenv("BRAID_P2P_CMA_MIN", "4096", 1);
    setenv("BRAID_P2P_CMA_PIECE", "1M", 1);
    shared_t *sh =
        mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(sh != MAP_FAILED);
    memset(sh, 0, sizeof(*sh));
    sh->what = what;
    return sh;
}

static void run(int what)
{
    shared_t *sh = shared_new(what);
    int bad = mp_run(2, run_case, sh, 90);
    munmap(sh, sizeof(*sh));
    cr_assert_eq(bad, 0, "some rank failed (see stderr)");
}

Test(p2p_cma_revoke, an_aborted_sender_inside_a_piece_finishes_before_the_receive_returns)
{
    run(ABORT);
}

Test(p2p_cma_revoke, a_failed_helper_write_ends_the_receive_at_once)
{
    run(UNMAP);
}

/* The process that gets the killed receiver's pid: maps memory where the receiver's buffer was
 * and exits 0 if no byte of it changed by the time the sender's send returned (1 if one did, 2
 * if it could not map there). */
static void stranger(shared_t *sh)
{
    char *want = (char *)(uintptr_t)atomic_load(&sh->dst);
    char *buf = mmap(want, BYTES, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (buf != want) _exit(2);
    memset(buf, 0x77, BYTES);
    atomic_store(&sh->ready, 1);
    if (!wait_flag(&sh->sent)) _exit(3);
    for (size_t k = 0; k < BYTES; k++)
        if ((unsigned char)buf[k] != 0x77) {
            fprintf(stderr, "pid %d: byte %zu of a stranger's memory was written\n", (int)getpid(),
                    k);
            _exit(1);
        }
    _exit(0);
}

Test(p2p_cma_revoke, no_helper_write_reaches_a_process_that_took_the_receivers_pid)
{
#if defined(SYS_clone3) && defined(CLONE_ARGS_SIZE_VER1)
    shared_t *sh = shared_new(REUSE);
    mp_job_t job;
    mp_start(&job, 2, run_case, sh);
    int stalled = wait_flag(&sh->stalled);
    kill(job.pids[1], SIGKILL);
    int st;
    waitpid(job.pids[1], &st, 0); /* the pid is free */
    pid_t tid = job.pids[1];
    struct clone_args ca = {
        .exit_signal = SIGCHLD, .set_tid = (uint64_t)(uintptr_t)&tid, .set_tid_size = 1};
    long pid = stalled ? syscall(SYS_clone3, &ca, CLONE_ARGS_SIZE_VER1) : -1;
    if (pid == 0) stranger(sh);
    int err = errno;
    if (pid < 0) { /* not allowed here (no CAP_SYS_ADMIN) or the pid went meanwhile */
        atomic_store(&sh->ready, 1); /* rank 0 need not fail for it */
        waitpid(job.pids[0], &st, 0);
        munmap(sh, sizeof(*sh));
        cr_assert(stalled, "the sender never wrote a piece");
        cr_skip_test("clone3 with set_tid: %s", strerror(err));
    }
    int bad = mp_wait(&job, 90); /* rank 1's pid: the stranger's status */
    munmap(sh, sizeof(*sh));
    cr_assert(!WIFEXITED(job.status[1]) || WEXITSTATUS(job.status[1]) != 2,
              "could not map the receiver's buffer's address");
    cr_assert_eq(bad, 0, "some process failed (see stderr)");
#else
    cr_skip_test("no clone3");
#endif
}
