/* Bootstrap tests (suite "bootstrap"): forked processes as ranks against a root service.
 *
 * run_job() forks the rank processes first and only then starts the root in the test
 * process (so no child inherits a running thread), handing each child the address through
 * its own pipe. Each child writes its outcome into a shared slot; the parent asserts. The
 * addressing, id and environment tests are in test_bootstrap_addr.c. */
#include "core/bootstrap.h"
#include "boothand.h"
#include "leaks.h"
#include "core/log.h"
#include "proc.h"

#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXP 16

typedef struct {
    int result;     /* braid_result_t of the first failing call, 0 = all passed */
    int stage;      /* 1 init, 2 allgather, 3 barrier, 4 verify */
    double elapsed; /* seconds the failing (or last) call took */
    char msg[480];
} slot_t;

typedef struct job job_t;
typedef void (*body_fn)(job_t *j, int idx, const braid_boot_addr_t *root, slot_t *s);

struct job {
    int nprocs;
    double timeout; /* client timeout */
    double root_timeout;
    body_fn body;
    int ranks[MAXP];  /* rank of each process (default idx) */
    int nranks[MAXP]; /* nranks each process passes (default nprocs) */
    size_t bytes[MAXP];
    slot_t *slots;
    int status[MAXP];
    braid_boot_addr_t root;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint8_t pattern(int rank, size_t j, int round)
{
    return (uint8_t)(rank * 37 + (int)j * 11 + round * 5 + 1);
}

static void record(slot_t *s, int stage, int res, double t0)
{
    s->stage = stage;
    s->result = res;
    s->elapsed = now_s() - t0;
    snprintf(s->msg, sizeof(s->msg), "%s", braid_last_error());
}

/* init; allgather of rank-dependent bytes (two sizes; every slot checked); barrier; close. */
static void body_full(job_t *j, int idx, const braid_boot_addr_t *root, slot_t *s)
{
    braid_bootstrap_t *bs = NULL;
    int rank = j->ranks[idx], nranks = j->nranks[idx];
    double t0 = now_s();
    int res = braid_boot_init(&bs, root, rank, nranks, j->timeout, NULL);
    if (res) return record(s, 1, res, t0);
    const size_t sizes[2] = {j->bytes[idx] ? j->bytes[idx] : 24, 4099};
    for (int round = 0; round < 2; round++) {
        size_t n = sizes[round];
        uint8_t *mine = malloc(n), *all = malloc(n * (size_t)nranks);
        for (size_t k = 0; k < n; k++)
            mine[k] = pattern(rank, k, round);
        memset(all, 0xee, n * (size_t)nranks);
        t0 = now_s();
        res = braid_boot_allgather(bs, mine, all, n);
        if (res) {
            free(mine);
            free(all);
            braid_boot_close(bs);
            return record(s, 2, res, t0);
        }
        for (int r = 0; r < nranks; r++)
            for (size_t k = 0; k < n; k++)
                if (all[(size_t)r * n + k] != pattern(r, k, round)) {
                    snprintf(s->msg, sizeof(s->msg), "round %d: slot %d byte %zu wrong", round, r,
                             k);
                    s->stage = 4;
                    s->result = BRAID_ERR_INTERNAL;
                    free(mine);
                    free(all);
                    braid_boot_close(bs);
                    return;
                }
        free(mine);
        free(all);
    }
    t0 = now_s();
    res = braid_boot_barrier(bs);
    record(s, 3, res, t0);
    braid_boot_close(bs);
}

static int use_ipv6; /* start_root listens on [::1] */

static void start_root(braid_boot_addr_t *root, double timeout)
{
    memset(root, 0, sizeof(*root));
    if (use_ipv6) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&root->addr;
        in6->sin6_family = AF_INET6;
        in6->sin6_addr = in6addr_loopback;
        root->addrlen = sizeof(*in6);
    } else {
        struct sockaddr_in *in = (struct sockaddr_in *)&root->addr;
        in->sin_family = AF_INET;
        in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        root->addrlen = sizeof(*in);
    }
    cr_assert_eq(braid_boot_random_secret(root->secret), 0);
    cr_assert_eq(braid_boot_root_start(root, timeout), 0, "%s", braid_last_error());
}

static void job_defaults(job_t *j, int nprocs, body_fn body)
{
    memset(j, 0, sizeof(*j));
    j->nprocs = nprocs;
    j->timeout = 10;
    j->root_timeout = 10;
    j->body = body;
    for (int i = 0; i < nprocs; i++) {
        j->ranks[i] = i;
        j->nranks[i] = nprocs;
    }
}

/* Forks the ranks, starts the root (unless the body does), runs before_release() (may be
 * NULL) with the root up, then releases the ranks and waits for them. */
static void run_job(job_t *j, int start_root_here, void (*before_release)(job_t *))
{
    int fds[MAXP][2];
    pid_t pids[MAXP];
    j->slots = mmap(NULL, sizeof(slot_t) * MAXP, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                    -1, 0);
    cr_assert_neq(j->slots, MAP_FAILED);
    memset(j->slots, 0, sizeof(slot_t) * MAXP);
    for (int i = 0; i < j->nprocs; i++) {
        cr_assert_eq(pipe(fds[i]), 0);
        pids[i] = fork();
        cr_assert_geq(pids[i], 0);
        if (pids[i] == 0) {
            braid_boot_addr_t root;
            close(fds[i][1]);
            if (read(fds[i][0], &root, sizeof(root)) != (ssize_t)sizeof(root)) _exit(3);
            j->body(j, i, &root, &j->slots[i]);
            _exit(test_leaks() ? 4 : 0); /* _exit: no Criterion atexit work in a rank */
        }
        close(fds[i][0]);
    }
    if (start_root_here) start_root(&j->root, j->root_timeout);
    if (before_release) before_release(j);
    for (int i = 0; i < j->nprocs; i++) {
        cr_assert_eq(write(fds[i][1], &j->root, sizeof(j->root)), (ssize_t)sizeof(j->root));
        close(fds[i][1]);
    }
    for (int i = 0; i < j->nprocs; i++)
        cr_assert_eq(waitpid(pids[i], &j->status[i], 0), pids[i]);
}

static void assert_all_ok(job_t *j)
{
    for (int i = 0; i < j->nprocs; i++) {
        cr_assert(WIFEXITED(j->status[i]) && WEXITSTATUS(j->status[i]) == 0,
                  "process %d status 0x%x", i, j->status[i]);
        cr_assert_eq(j->slots[i].result, 0, "process %d stage %d: %s (%s)", i, j->slots[i].stage,
                     braid_strerror(j->slots[i].result), j->slots[i].msg);
    }
}

/* The root service must exit once all ranks closed. */
static void assert_root_exits(void)
{
    double t0 = now_s();
    while (braid_boot_root_count() > 0 && now_s() - t0 < 5)
        usleep(10000);
    cr_assert_eq(braid_boot_root_count(), 0, "the root service did not exit");
    cr_assert_eq(test_leaks(), 0, "leaks in the test process (ASan report above)");
}

static void run_ok(int n)
{
    job_t j;
    job_defaults(&j, n, body_full);
    run_job(&j, 1, NULL);
    assert_all_ok(&j);
    assert_root_exits();
}

Test(bootstrap, ranks_1, .timeout = 30)
{
    run_ok(1);
}

Test(bootstrap, ranks_2, .timeout = 30)
{
    run_ok(2);
}

Test(bootstrap, ranks_4, .timeout = 30)
{
    run_ok(4);
}

Test(bootstrap, ranks_8, .timeout = 30)
{
    run_ok(8);
}

Test(bootstrap, ranks_4_ipv6, .timeout = 30)
{
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 probe = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    int have = fd >= 0 && bind(fd, (struct sockaddr *)&probe, sizeof(probe)) == 0;
    if (fd >= 0) close(fd);
    if (!have) cr_skip_test("no IPv6 loopback here");
    use_ipv6 = 1;
    run_ok(4);
}

/* ---- hostile connections ---------------------------------------------------------------- */

static int raw_connect(const braid_boot_addr_t *root)
{
    int fd = socket(root->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0);
    cr_assert_eq(connect(fd, (const struct sockaddr *)&root->addr, root->addrlen), 0, "%s",
                 strerror(errno));
    struct timeval tv = {.tv_sec = 8};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

/* Returns seconds until the root closed fd (recv 0 or ECONNRESET), or -1 on a timeout. */
static double wait_closed(int fd)
{
    double t0 = now_s();
    char c;
    ssize_t n = recv(fd, &c, 1, 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return now_s() - t0;
    return -1;
}

static int intruders[3];

static void send_intruders(job_t *j)
{
    /* A valid hello for rank 0 and a proof under a wrong key: if accepted it would collide. */
    uint8_t key[BRAID_SECRET_BYTES], buf[BOOT_HAND_SENT];
    memcpy(key, j->root.secret, sizeof(key));
    key[5] ^= 0x40;
    intruders[0] = raw_connect(&j->root);
    cr_assert_eq(
        boot_hand_join(intruders[0], key, braid_boot_addr_port(&j->root.addr), 0, j->nprocs, buf),
        0, "no challenge, or the root's proof verified under a wrong key");
    cr_assert_geq(wait_closed(intruders[0]), 0, "wrong-secret connection not closed");
    /* Garbage bytes, then a silent connection and a partial hello. */
    intruders[1] = raw_connect(&j->root);
    char junk[100];
    for (int i = 0; i < 100; i++)
        junk[i] = (char)(i * 7 + 3);
    cr_assert_eq(send(intruders[1], junk, sizeof(junk), MSG_NOSIGNAL), (ssize_t)sizeof(junk));
    intruders[2] = raw_connect(&j->root);
    cr_assert_eq(send(intruders[2], buf, 10, MSG_NOSIGNAL), 10);
}

Test(bootstrap, wrong_secret_and_garbage_rejected, .timeout = 30)
{
    char logpath[] = "/tmp/braid_boot_log_XXXXXX";
    int lfd = mkstemp(logpath);
    cr_assert_geq(lfd, 0);
    close(lfd);
    setenv("BRAID_DEBUG_FILE", logpath, 1);
    setenv("BRAID_DEBUG", "WARN", 1);
    job_t j;
    job_defaults(&j, 4, body_full);
    /* The hostile connections are opened before the ranks and must not delay them. */
    double t0 = now_s();
    run_job(&j, 1, send_intruders);
    assert_all_ok(&j);
    cr_assert_lt(now_s() - t0, 4.0, "ranks were delayed by the hostile connections");
    cr_assert_geq(wait_closed(intruders[1]), 0, "garbage connection not closed");
    cr_assert_geq(wait_closed(intruders[2]), 0, "partial hello not closed at exit");
    assert_root_exits();
    for (int i = 0; i < 3; i++)
        close(intruders[i]);
    FILE *f = fopen(logpath, "r");
    cr_assert_not_null(f);
    char text[8192];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    text[n] = '\0';
    fclose(f);
    unlink(logpath);
    cr_assert_not_null(strstr(text, "rejected connection from 127.0.0.1:"), "log: %s", text);
    cr_assert_not_null(strstr(text, "wrong job secret"), "log: %s", text);
    cr_assert_not_null(strstr(text, "malformed hello"), "log: %s", text);
}

/* A connection that sends nothing (or half a hello) is closed after the hello deadline,
 * min(5 s, timeout), while the root keeps serving. */
Test(bootstrap, silent_connection_dropped, .timeout = 30)
{
    setenv("BRAID_DEBUG", "NONE", 1);
    braid_boot_addr_t root;
    start_root(&root, 1.5);
    int silent = raw_connect(&root), partial = raw_connect(&root);
    cr_assert_eq(send(partial, "BRDH", 4, MSG_NOSIGNAL), 4);
    double t = wait_closed(silent);
    cr_assert(t > 1.0 && t < 3.0, "silent connection closed after %g s", t);
    cr_assert_geq(wait_closed(partial), 0);
    close(silent);
    close(partial);
    /* Still serving. */
    braid_bootstrap_t *bs;
    cr_assert_eq(braid_boot_init(&bs, &root, 0, 1, 5, NULL), 0, "%s", braid_last_error());
    cr_assert_eq(braid_boot_barrier(bs), 0, "%s", braid_last_error());
    braid_boot_close(bs);
    assert_root_exits();
}

/* An authenticated peer that announces an oversized block fails the job instead of making
 * the root allocate it. */
Test(bootstrap, oversized_message_rejected, .timeout = 30)
{
    setenv("BRAID_DEBUG", "NONE", 1);
    braid_boot_addr_t root;
    start_root(&root, 10);
    int fd = raw_connect(&root);
    cr_assert_eq(boot_hand_join(fd, root.secret, braid_boot_addr_port(&root.addr), 1, 2, NULL), 1,
                 "handshake by hand failed");
    braid_bootstrap_t *bs;
    cr_assert_eq(braid_boot_init(&bs, &root, 0, 2, 10, NULL), 0, "%s", braid_last_error());
    /* ALLGATHER #0 of 1 GiB: u32 type 1, u32 seq 0, u64 len. */
    uint8_t hdr[16] = {1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x40, 0, 0, 0, 0};
    cr_assert_eq(send(fd, hdr, sizeof(hdr), MSG_NOSIGNAL), 16);
    char mine[8] = "rank0", all[16];
    cr_assert_eq(braid_boot_allgather(bs, mine, all, sizeof(mine)), BRAID_ERR_INVALID_ARG);
    cr_assert_not_null(strstr(braid_last_error(), "rank 1 sent a 1073741824-byte"), "%s",
                       braid_last_error());
    cr_assert_eq(braid_boot_barrier(bs), BRAID_ERR_INVALID_ARG, "error is sticky");
    braid_boot_close(bs);
    close(fd);
    assert_root_exits();
}

/* ---- job-level errors ------------------------------------------------------------------- */

static void assert_all_failed(job_t *j, int code, const char *needle, const char *needle2)
{
    for (int i = 0; i < j->nprocs; i++) {
        cr_assert(WIFEXITED(j->status[i]), "process %d status 0x%x", i, j->status[i]);
        cr_assert_eq(j->slots[i].result, code, "process %d: got %s (%s), want %s", i,
                     braid_strerror(j->slots[i].result), j->slots[i].msg, braid_strerror(code));
        cr_assert_not_null(strstr(j->slots[i].msg, needle), "process %d: '%s' lacks '%s'", i,
                           j->slots[i].msg, needle);
        if (needle2)
            cr_assert_not_null(strstr(j->slots[i].msg, needle2), "process %d: '%s' lacks '%s'", i,
                               j->slots[i].msg, needle2);
    }
}

Test(bootstrap, nranks_mismatch, .timeout = 30)
{
    job_t j;
    job_defaults(&j, 4, body_full);
    j.nranks[3] = 5;
    run_job(&j, 1, NULL);
    assert_all_failed(&j, BRAID_ERR_INVALID_ARG, "nranks=4", "nranks=5");
    for (int i = 0; i < 4; i++)
        cr_assert_eq(j.slots[i].stage, 1);
}

Test(bootstrap, duplicate_rank, .timeout = 30)
{
    job_t j;
    job_defaults(&j, 3, body_full);
    j.ranks[2] = 1;
    run_job(&j, 1, NULL);
    assert_all_failed(&j, BRAID_ERR_INVALID_ARG, "duplicate rank", "rank 1");
}

Test(bootstrap, allgather_size_mismatch, .timeout = 30)
{
    job_t j;
    job_defaults(&j, 3, body_full);
    j.bytes[0] = j.bytes[1] = 16;
    j.bytes[2] = 17;
    run_job(&j, 1, NULL);
    assert_all_failed(&j, BRAID_ERR_MISMATCH, "17 bytes", "16 bytes");
}

/* root_timeout: the root's own timer fires first (equal) or the clients' (longer): either
 * way every rank gets a timeout naming the missing rank. */
static void missing_rank(double root_timeout)
{
    job_t j;
    job_defaults(&j, 3, body_full);
    for (int i = 0; i < 3; i++)
        j.nranks[i] = 4; /* rank 3 never shows up */
    j.timeout = 1.0;
    j.root_timeout = root_timeout;
    run_job(&j, 1, NULL);
    assert_all_failed(&j, BRAID_ERR_TIMEOUT, "rank 3 to join", "3 of 4");
    for (int i = 0; i < 3; i++)
        cr_assert_lt(j.slots[i].elapsed, 3.0, "took %g s", j.slots[i].elapsed);
}

Test(bootstrap, missing_rank_times_out, .timeout = 30)
{
    missing_rank(1.0);
}

Test(bootstrap, missing_rank_times_out_client_first, .timeout = 30)
{
    missing_rank(20.0);
}

/* Rank 2 joins but never reaches the allgather. */
static void body_lazy(job_t *j, int idx, const braid_boot_addr_t *root, slot_t *s)
{
    if (idx != 2) return body_full(j, idx, root, s);
    braid_bootstrap_t *bs;
    if (braid_boot_init(&bs, root, 2, j->nprocs, j->timeout, NULL)) return;
    usleep(2500 * 1000);
    braid_boot_close(bs);
}

static void lazy_rank(double root_timeout)
{
    job_t j;
    job_defaults(&j, 3, body_lazy);
    j.timeout = 1.0;
    j.root_timeout = root_timeout;
    run_job(&j, 1, NULL);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(j.slots[i].result, BRAID_ERR_TIMEOUT, "%d: %s", i, j.slots[i].msg);
        cr_assert_not_null(strstr(j.slots[i].msg, "rank 2 to reach"), "%s", j.slots[i].msg);
        cr_assert_lt(j.slots[i].elapsed, 3.0);
    }
}

Test(bootstrap, allgather_times_out_naming_rank, .timeout = 30)
{
    lazy_rank(1.0);
}

Test(bootstrap, allgather_times_out_client_first, .timeout = 30)
{
    lazy_rank(20.0);
}

/* Rank 2 dies (SIGKILL) while the others are in the allgather. */
static void body_die(job_t *j, int idx, const braid_boot_addr_t *root, slot_t *s)
{
    if (idx != 2) return body_full(j, idx, root, s);
    braid_bootstrap_t *bs;
    if (braid_boot_init(&bs, root, 2, j->nprocs, j->timeout, NULL)) return;
    usleep(300 * 1000);
    raise(SIGKILL);
}

Test(bootstrap, rank_death_is_remote_error, .timeout = 30)
{
    job_t j;
    job_defaults(&j, 4, body_die);
    j.timeout = 20;
    run_job(&j, 1, NULL);
    cr_assert(WIFSIGNALED(j.status[2]) && WTERMSIG(j.status[2]) == SIGKILL);
    for (int i = 0; i < 4; i++) {
        if (i == 2) continue;
        cr_assert_eq(j.slots[i].result, BRAID_ERR_REMOTE, "%d: %s", i, j.slots[i].msg);
        cr_assert_eq(j.slots[i].stage, 2);
        cr_assert_not_null(strstr(j.slots[i].msg, "rank 2 closed its bootstrap connection"), "%s",
                           j.slots[i].msg);
        cr_assert_lt(j.slots[i].elapsed, 2.0, "took %g s", j.slots[i].elapsed);
    }
}

/* Rank 1 reports an error; everyone's next call returns it. */
static void body_report(job_t *j, int idx, const braid_boot_addr_t *root, slot_t *s)
{
    braid_bootstrap_t *bs;
    double t0 = now_s();
    int res = braid_boot_init(&bs, root, idx, j->nprocs, j->timeout, NULL);
    if (res) return record(s, 1, res, t0);
    if (idx == 1) {
        braid_boot_report_error(bs, "cuda out of memory");
    } else if (idx == 0) {
        /* poll_error turns non-zero without any call. */
        while ((res = braid_boot_poll_error(bs)) == 0 && now_s() - t0 < 5)
            usleep(1000);
        if (res != BRAID_ERR_REMOTE) {
            braid_boot_close(bs);
            return record(s, 9, BRAID_ERR_INTERNAL, t0);
        }
    }
    res = braid_boot_barrier(bs);
    record(s, 3, res, t0);
    braid_boot_close(bs);
}

Test(bootstrap, error_report_reaches_all, .timeout = 30)
{
    job_t j;
    job_defaults(&j, 3, body_report);
    run_job(&j, 1, NULL);
    assert_all_failed(&j, BRAID_ERR_REMOTE, "rank 1: cuda out of memory", NULL);
}

/* ---- abort ------------------------------------------------------------------------------- */

static volatile int abort_flag;

static void *set_abort(void *arg)
{
    usleep(300 * 1000);
    abort_flag = 1;
    return arg;
}

static void check_abort(const braid_boot_addr_t *root, int nranks)
{
    pthread_t t;
    braid_bootstrap_t *bs = NULL;
    abort_flag = 0;
    pthread_create(&t, NULL, set_abort, NULL);
    double t0 = now_s();
    int res = braid_boot_init(&bs, root, 0, nranks, 20.0, &abort_flag);
    double el = now_s() - t0;
    pthread_join(t, NULL);
    cr_assert_eq(res, BRAID_ERR_ABORTED, "%s: %s", braid_strerror(res), braid_last_error());
    cr_assert_lt(el, 1.0, "abort took %g s", el);
    cr_assert_null(bs);
}

Test(bootstrap, abort_while_waiting_for_ranks, .timeout = 30)
{
    braid_boot_addr_t root;
    start_root(&root, 20);
    check_abort(&root, 2);
}

Test(bootstrap, abort_while_connecting, .timeout = 30)
{
    /* Nothing listens on the port: the client retries until aborted. */
    braid_boot_addr_t root;
    memset(&root, 0, sizeof(root));
    struct sockaddr_in *in = (struct sockaddr_in *)&root.addr;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    root.addrlen = sizeof(*in);
    cr_assert_eq(bind(fd, (struct sockaddr *)in, sizeof(*in)), 0);
    socklen_t l = sizeof(*in);
    getsockname(fd, (struct sockaddr *)in, &l);
    close(fd);
    check_abort(&root, 2);
}

Test(bootstrap, connect_timeout_names_root, .timeout = 30)
{
    braid_boot_addr_t root;
    cr_assert_eq(braid_boot_parse_hostport("127.0.0.1:1", 0, &root.addr, &root.addrlen), 0);
    braid_bootstrap_t *bs = NULL;
    double t0 = now_s();
    int res = braid_boot_init(&bs, &root, 0, 2, 0.5, NULL);
    cr_assert_eq(res, BRAID_ERR_TIMEOUT, "%s", braid_last_error());
    cr_assert_lt(now_s() - t0, 1.5);
    cr_assert_not_null(strstr(braid_last_error(), "127.0.0.1:1"), "%s", braid_last_error());
}

/* A root that accepts but never answers: the client's own timeout message. */
Test(bootstrap, unresponsive_root_times_out, .timeout = 30)
{
    braid_boot_addr_t root;
    memset(&root, 0, sizeof(root));
    struct sockaddr_in *in = (struct sockaddr_in *)&root.addr;
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    root.addrlen = sizeof(*in);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_eq(bind(fd, (struct sockaddr *)in, sizeof(*in)), 0);
    cr_assert_eq(listen(fd, 4), 0);
    socklen_t l = sizeof(*in);
    getsockname(fd, (struct sockaddr *)in, &l);
    braid_bootstrap_t *bs = NULL;
    double t0 = now_s();
    int res = braid_boot_init(&bs, &root, 1, 2, 0.5, NULL);
    double el = now_s() - t0;
    cr_assert_eq(res, BRAID_ERR_TIMEOUT, "%s", braid_last_error());
    cr_assert(el >= 0.5 && el < 1.5, "took %g s", el);
    cr_assert_not_null(
        strstr(braid_last_error(), "rank 1 waited 0.5 s for the bootstrap root's challenge"), "%s",
        braid_last_error());
    close(fd);
}

Test(bootstrap, allgather_too_large, .timeout = 30)
{
    braid_boot_addr_t root;
    start_root(&root, 10);
    braid_bootstrap_t *bs;
    cr_assert_eq(braid_boot_init(&bs, &root, 0, 1, 10, NULL), 0, "%s", braid_last_error());
    static char big[1];
    cr_assert_eq(braid_boot_allgather(bs, big, big, (size_t)65 << 20), BRAID_ERR_INVALID_ARG);
    cr_assert_not_null(strstr(braid_last_error(), "64 MiB"), "%s", braid_last_error());
    cr_assert_eq(braid_boot_barrier(bs), 0, "%s", braid_last_error());
    braid_boot_close(bs);
    assert_root_exits();
}

/* ---- the environment flow, and a root that dies ----------------------------------------- */

static int env_port;
static int env_root_dies;

/* Like braid_comm_init_env: every rank resolves the environment, rank 0 starts the root. */
static void body_env(job_t *j, int idx, const braid_boot_addr_t *unused, slot_t *s)
{
    (void)unused;
    char v[64];
    snprintf(v, sizeof(v), "%d", idx);
    setenv("BRAID_RANK", v, 1);
    snprintf(v, sizeof(v), "%d", j->nprocs);
    setenv("BRAID_NRANKS", v, 1);
    snprintf(v, sizeof(v), "127.0.0.1:%d", env_port);
    setenv("BRAID_ROOT", v, 1);
    setenv("BRAID_SECRET", "0123456789abcdef0123456789ABCDEF", 1);
    int rank, nranks, is_root;
    braid_boot_addr_t root;
    double t0 = now_s();
    int res = braid_boot_env_resolve(&rank, &nranks, &root, &is_root);
    if (res) return record(s, 1, res, t0);
    braid_boot_root_t *handle = NULL;
    if (is_root && (res = braid_boot_root_start_handle(&root, j->root_timeout, &handle)))
        return record(s, 1, res, t0);
    if (!env_root_dies) {
        body_full(j, rank, &root, s);
        /* The root lives in this process: deliver the last replies before exiting. */
        if (handle && (res = braid_boot_root_wait(handle, 5.0)) && !s->result)
            record(s, 5, res, t0);
        return;
    }
    braid_bootstrap_t *bs;
    if ((res = braid_boot_init(&bs, &root, rank, nranks, j->timeout, NULL)))
        return record(s, 1, res, t0);
    if (rank == 0) {
        usleep(200 * 1000);
        _exit(0); /* the root thread dies with this process */
    }
    t0 = now_s();
    res = braid_boot_barrier(bs);
    record(s, 3, res, t0);
    /* Reporting to a dead root fails quietly: the caller's message stays. */
    usleep(100 * 1000);
    braid_set_error(BRAID_ERR_INTERNAL, "the caller's own message");
    braid_boot_report_error(bs, "late report");
    braid_boot_report_error(bs, "and another");
    if (strcmp(braid_last_error(), "the caller's own message")) s->stage = 6;
    braid_boot_close(bs);
}

Test(bootstrap, env_flow, .timeout = 30)
{
    job_t j;
    job_defaults(&j, 4, body_env);
    env_port = proc_free_port();
    run_job(&j, 0, NULL);
    assert_all_ok(&j);
}

Test(bootstrap, root_death_is_remote_error, .timeout = 30)
{
    job_t j;
    job_defaults(&j, 3, body_env);
    env_port = proc_free_port();
    env_root_dies = 1;
    run_job(&j, 0, NULL);
    for (int i = 1; i < 3; i++) {
        cr_assert_eq(j.slots[i].result, BRAID_ERR_REMOTE, "%d: %s", i, j.slots[i].msg);
        cr_assert_eq(j.slots[i].stage, 3, "report_error changed the last error");
        cr_assert_not_null(strstr(j.slots[i].msg, "bootstrap root 127.0.0.1:"), "%s",
                           j.slots[i].msg);
        cr_assert_not_null(strstr(j.slots[i].msg, "closed the connection"), "%s", j.slots[i].msg);
        cr_assert_lt(j.slots[i].elapsed, 2.0);
    }
}
