/* Diagnostics that name the real cause: a peer that destroyed its communicator cleanly (not
 * "died"), a BRAID_ROOT that is some other server ("not a braid bootstrap root", not an
 * internal error), and a root out of file descriptors (EMFILE, not "timed out waiting for
 * ranks"). */
#include "mp.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Rank 1 destroys its communicator and stays alive; rank 0's next call (an all-reduce on the
 * ring connections, a receive on the send/recv ones, a send of more than they buffer, an
 * all-to-all) must fail within a second with an error that says so, on shm and on tcp (a
 * goodbye frame). */
typedef struct {
    const char *transport;
    int call; /* 0 allreduce, 1 recv, 2 send, 3 alltoall */
} destroy_case_t;

static int peer_destroys(braid_comm_t comm, int rank, int n, void *arg)
{
    const destroy_case_t *dc = arg;
    enum { BIG = 1 << 22 };
    float *x = calloc(BIG, sizeof(float));
    MP_CHECK(rank, x, "out of memory");
    for (int i = 0; i < 64; i++)
        x[i] = (float)(rank * 64 + i);
    MP_OK(rank, braid_allreduce(x, x, 64, BRAID_FLOAT32, BRAID_SUM, comm));
    if (rank == 1) {
        MP_OK(rank, braid_comm_destroy(comm));
        usleep(1500 * 1000); /* alive, but done with the communicator */
        free(x);
        return 0;
    }
    usleep(100 * 1000);
    double t0 = now_s();
    braid_result_t r = dc->call == 0   ? braid_allreduce(x, x, 64, BRAID_FLOAT32, BRAID_SUM, comm)
                       : dc->call == 1 ? braid_recv(x, 64, BRAID_FLOAT32, 1, comm)
                       : dc->call == 2 ? braid_send(x, BIG, BRAID_FLOAT32, 1, comm)
                                       : braid_alltoall(x, x + 1024, 64, BRAID_FLOAT32, comm);
    double dt = now_s() - t0;
    const char *msg = braid_last_error();
    free(x);
    MP_CHECK(rank, r == BRAID_ERR_REMOTE, "call %d: %s: %s", dc->call, braid_strerror(r), msg);
    MP_CHECK(rank, dt < 1.0, "took %.2f s", dt);
    MP_CHECK(rank, !strstr(msg, "died") && !strstr(msg, "closed the connection"), "%s", msg);
    MP_CHECK(rank, strstr(msg, "rank 1") && strstr(msg, "destroyed its communicator"),
             "call %d: %s", dc->call, msg);
    (void)n;
    return 0;
}

TestSuite(diagnostics, .timeout = 60);

static void destroy_cases(const char *transport)
{
    setenv("BRAID_TRANSPORT", transport, 1);
    setenv("BRAID_TIMEOUT", "20", 1);
    for (int call = 0; call < 4; call++) {
        destroy_case_t dc = {transport, call};
        cr_expect_eq(mp_run(2, peer_destroys, &dc, 30), 0, "%s, call %d", transport, call);
    }
}

Test(diagnostics, peer_destroyed_is_not_died_shm)
{
    destroy_cases("shm");
}

Test(diagnostics, peer_destroyed_is_not_died_tcp)
{
    destroy_cases("tcp");
}

/* A server that answers every connection with 'reply' and then closes (or keeps it open). */
typedef struct {
    int lfd;
    const char *reply;
    int keep_open;
} fake_server_t;

static void *serve(void *arg)
{
    fake_server_t *s = arg;
    for (int i = 0; i < 4; i++) {
        int fd = accept(s->lfd, NULL, NULL);
        if (fd < 0) return NULL;
        char buf[256];
        usleep(20000);
        if (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) < 0) { /* the hello, if it came */
        }
        if (send(fd, s->reply, strlen(s->reply), MSG_NOSIGNAL) < 0) {
        }
        if (s->keep_open) { /* until the client closes its end, at most 3 s */
            struct pollfd p = {.fd = fd, .events = POLLIN};
            while (poll(&p, 1, 3000) > 0 && recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
            }
        }
        close(fd);
    }
    return NULL;
}

static void expect_not_a_root(const char *reply, int keep_open)
{
    fake_server_t s = {.reply = reply, .keep_open = keep_open};
    s.lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    cr_assert_eq(bind(s.lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(listen(s.lfd, 8), 0);
    getsockname(s.lfd, (struct sockaddr *)&a, &len);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, serve, &s), 0);
    char root[64];
    snprintf(root, sizeof(root), "127.0.0.1:%d", ntohs(a.sin_port));
    setenv("BRAID_ROOT", root, 1);
    setenv("BRAID_RANK", "1", 1);
    setenv("BRAID_NRANKS", "2", 1);
    setenv("BRAID_SECRET", "00112233445566778899aabbccddeeff", 1);
    setenv("BRAID_TIMEOUT", "10", 1);
    braid_comm_t comm = NULL;
    double t0 = now_s();
    braid_result_t r = braid_comm_init_env(&comm);
    double dt = now_s() - t0;
    cr_assert_eq(r, BRAID_ERR_REMOTE, "%s: %s", braid_strerror(r), braid_last_error());
    cr_assert(strstr(braid_last_error(), "is not a braid bootstrap root"), "%s",
              braid_last_error());
    cr_assert(strstr(braid_last_error(), root), "%s", braid_last_error());
    cr_assert(strstr(braid_last_error(), "HTTP/1.1"), "%s", braid_last_error());
    cr_assert_lt(dt, 5.0, "%.2f s", dt);
    /* shutdown wakes the thread's accept; no pthread_cancel, whose unwinding of a thread in
     * accept ASan reported as a stack-use-after-scope in its own thread teardown */
    shutdown(s.lfd, SHUT_RDWR);
    pthread_join(t, NULL);
    close(s.lfd);
}

Test(diagnostics, braid_root_is_another_server)
{
    expect_not_a_root("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", 1);
}

Test(diagnostics, braid_root_is_another_server_short_answer)
{
    expect_not_a_root("HTTP/1.1 400\r\n", 0); /* fewer bytes than a header, then EOF */
}

/* The root's process has no file descriptor left for the ranks' connections: every rank of
 * the job fails with EMFILE named, well before BRAID_TIMEOUT. */
Test(diagnostics, root_out_of_file_descriptors, .timeout = 60)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        setenv("BRAID_TIMEOUT", "30", 1);
        braid_unique_id_t id;
        if (braid_get_unique_id(&id) != BRAID_SUCCESS) _exit(3);
        /* Use up every descriptor but one: the rank's own connection takes it, so the root
         * cannot accept it (nor anyone's). */
        struct rlimit rl = {64, 64};
        setrlimit(RLIMIT_NOFILE, &rl);
        int last = -1;
        for (;;) {
            int fd = open("/dev/null", O_RDONLY);
            if (fd < 0) break;
            last = fd;
        }
        if (last >= 0) close(last);
        braid_comm_t comm = NULL;
        double t0 = now_s();
        braid_result_t r = braid_comm_init_rank(&comm, 2, id, 0);
        double dt = now_s() - t0;
        char msg[600];
        snprintf(msg, sizeof(msg), "%d %.2f %s", (int)r, dt, braid_last_error());
        if (write(fds[1], msg, strlen(msg)) < 0) _exit(4);
        _exit(0);
    }
    close(fds[1]);
    char msg[700] = "";
    size_t got = 0;
    ssize_t k;
    while ((k = read(fds[0], msg + got, sizeof(msg) - 1 - got)) > 0)
        got += (size_t)k;
    msg[got] = '\0';
    close(fds[0]);
    int st;
    waitpid(pid, &st, 0);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d: %s", st, msg);
    int code = 0;
    double dt = 0;
    cr_assert_eq(sscanf(msg, "%d %lf", &code, &dt), 2, "%s", msg);
    cr_assert_eq(code, BRAID_ERR_SYSTEM, "%s", msg);
    cr_assert(strstr(msg, "Too many open files") && strstr(msg, "EMFILE"), "%s", msg);
    cr_assert(strstr(msg, "ulimit -n"), "%s", msg);
    cr_assert_lt(dt, 10.0, "%s", msg);
}

/* ---- a rank out of file descriptors (not the root's process) -------------------------------- */
/* Runs rank `rank` of 2 in a child: rank 0 makes the id and sends it down `idp`; rank 1 leaves
 * itself `spare` free descriptors first. Writes "code seconds message" to `out`. */
static void fd_rank(int rank, int idp[2], int out, int spare)
{
    braid_unique_id_t id;
    if (rank == 0) {
        if (braid_get_unique_id(&id) != BRAID_SUCCESS) _exit(3);
        if (write(idp[1], &id, sizeof(id)) != (ssize_t)sizeof(id)) _exit(3);
    } else if (read(idp[0], &id, sizeof(id)) != (ssize_t)sizeof(id)) {
        _exit(3);
    }
    if (rank == 1) {
        struct rlimit rl = {256, 256};
        setrlimit(RLIMIT_NOFILE, &rl);
        int fds[256], k = 0;
        for (;;) {
            int fd = open("/dev/null", O_RDONLY);
            if (fd < 0) break;
            fds[k++] = fd;
        }
        for (int i = 0; i < spare && k > 0; i++)
            close(fds[--k]);
    }
    braid_comm_t comm = NULL;
    double t0 = now_s();
    braid_result_t r = braid_comm_init_rank(&comm, 2, id, rank);
    if (r == BRAID_SUCCESS) {
        float x = (float)rank + 1;
        r = braid_allreduce(&x, &x, 1, BRAID_FLOAT32, BRAID_SUM, comm);
    }
    double dt = now_s() - t0;
    char msg[700];
    snprintf(msg, sizeof(msg), "%d %.2f %s", (int)r, dt, r ? braid_last_error() : "");
    if (write(out, msg, strlen(msg)) < 0) _exit(4);
    if (comm) braid_comm_destroy(comm);
    _exit(0);
}

static void read_all(int fd, char *buf, size_t len)
{
    size_t got = 0;
    ssize_t k;
    while (got < len - 1 && (k = read(fd, buf + got, len - 1 - got)) > 0)
        got += (size_t)k;
    buf[got] = '\0';
    close(fd);
}

/* Rank 1 (not the root's process) runs out of descriptors at every stage of init in turn
 * (0, 1, 2 ... free ones: the bootstrap connection, the data listener, each connection): it
 * ends with an error naming EMFILE / too many open files, its peer with an error (never
 * "timed out waiting for ranks"), both well before BRAID_TIMEOUT (with 0 free, the bootstrap
 * connection itself is made on braid's reserve descriptor); with enough descriptors both
 * succeed. */
static void fd_exhaustion(const char *transport)
{
    setenv("BRAID_TRANSPORT", transport, 1);
    setenv("BRAID_TIMEOUT", "5", 1);
    int succeeded = 0;
    for (int spare = 0; spare < 40 && !succeeded; spare++) {
        int idp[2], o0[2], o1[2];
        cr_assert(pipe(idp) == 0 && pipe(o0) == 0 && pipe(o1) == 0);
        pid_t p0 = fork();
        if (p0 == 0) {
            close(o0[0]);
            close(o1[0]);
            close(o1[1]);
            fd_rank(0, idp, o0[1], 0);
        }
        pid_t p1 = fork();
        if (p1 == 0) {
            close(o0[0]);
            close(o0[1]);
            close(o1[0]);
            fd_rank(1, idp, o1[1], spare);
        }
        close(idp[0]);
        close(idp[1]);
        close(o0[1]);
        close(o1[1]);
        char m0[700], m1[700];
        read_all(o0[0], m0, sizeof(m0));
        read_all(o1[0], m1, sizeof(m1));
        int st0, st1;
        waitpid(p0, &st0, 0);
        waitpid(p1, &st1, 0);
        cr_assert(WIFEXITED(st0) && WEXITSTATUS(st0) == 0, "rank 0 status %d: %s", st0, m0);
        cr_assert(WIFEXITED(st1) && WEXITSTATUS(st1) == 0, "rank 1 status %d: %s", st1, m1);
        int c0 = 1, c1 = 1;
        double d0 = 0, d1 = 0;
        cr_assert_eq(sscanf(m0, "%d %lf", &c0, &d0), 2, "%s", m0);
        cr_assert_eq(sscanf(m1, "%d %lf", &c1, &d1), 2, "%s", m1);
        fprintf(stderr, "%s, %d spare: rank 0: %s | rank 1: %s\n", transport, spare, m0, m1);
        if (c0 == 0 && c1 == 0) {
            succeeded = 1;
            continue;
        }
        cr_expect(c1 != 0 && (strstr(m1, "EMFILE") || strstr(m1, "Too many open files")),
                  "%s, %d spare: rank 1: %s", transport, spare, m1);
        cr_expect(c0 != 0, "%s, %d spare: rank 0 succeeded while rank 1 failed", transport, spare);
        cr_expect(!strstr(m1, "timed out"), "%s, %d spare: rank 1: %s", transport, spare, m1);
        cr_expect(d1 < 3.0, "%s, %d spare: rank 1 took %.2f s", transport, spare, d1);
        /* Without a descriptor for its bootstrap connection (0 spare) rank 1 uses the one
         * braid keeps in reserve to tell the root; in every later stage it reports too. */
        if (spare == 0)
            cr_expect(strstr(m1, "bootstrap: rank 1: socket failed") && strstr(m0, "rank 1"),
                      "%s, 0 spare: rank 0: %s | rank 1: %s", transport, m0, m1);
        cr_expect(!strstr(m0, "timed out"), "%s, %d spare: rank 0: %s", transport, spare, m0);
        cr_expect(d0 < 3.0, "%s, %d spare: rank 0 took %.2f s", transport, spare, d0);
    }
    cr_expect(succeeded, "%s: never succeeded with up to 40 spare descriptors", transport);
}

Test(diagnostics, rank_out_of_file_descriptors_shm, .timeout = 300)
{
    fd_exhaustion("shm");
}

Test(diagnostics, rank_out_of_file_descriptors_tcp, .timeout = 300)
{
    fd_exhaustion("tcp");
}
