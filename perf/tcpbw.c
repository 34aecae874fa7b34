/* tcpbw: how many bytes per second the kernel's TCP moves between processes of this machine
 * over loopback, measured the way the TCP all-reduce reports need it for a ceiling: N
 * processes in a ring (rank r sends to r + 1 and receives from r - 1, both at once: a sender
 * thread and the main thread), each sending BYTES from a buffer of BYTES into a buffer of BYTES
 * (as a collective reads its input and writes its output) in send() calls of CHUNK bytes; the
 * rate is BYTES over the slowest rank's time, best of R repetitions after a warm-up one. A ring
 * all-reduce moves 2(N-1)/N bytes per byte reduced through each rank's sockets, so its busbw is
 * the same bytes per second per rank each way, and it also reduces, which this probe does not.
 *
 *   tcpbw [-n RANKS] [-s BYTES] [-c "CHUNK ..."] [-b "SOCKBUF ..."] [-r REPS] [-H]
 *
 * -b: SO_SNDBUF and SO_RCVBUF sizes to try, 0 = the kernel's autotuning (default "0").
 * -H: send from and receive into one CHUNK-sized buffer each (cache-hot) instead.
 * Prints per chunk and socket buffer size "tcpbw ranks N chunk C sockbuf B GB/s X" and then
 * "tcpbw ranks N best GB/s X" (GB = 1e9 bytes; per rank, each way). Defaults: N = 2, BYTES =
 * 256 MiB, CHUNK = "256K 1M", R = 5 (the rate moves by up to 1.2x between runs on the 2-vCPU
 * VMs, and 2x when the VM changes mode).
 *
 * The connections are between 127.0.0.1 and ephemeral ports of 127.0.0.1 only; a connection
 * that does not first send the run's 16 random bytes, within 1 s of its accept, is closed
 * (TCPBW_TEST_STRANGER set: rank 0 first makes such a connection, for the tests: =1 sends 16
 * wrong bytes, =silent sends nothing and stays open). Every other socket operation has a 30 s
 * timeout and the whole run 120 s (SIGALRM), so a dead peer fails the run rather than hangs it. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "parse_bytes.h"

#define MAX_RANKS 64
#define MAX_SIZES 8
#define TOKEN_BYTES 16
#define IO_TIMEOUT_S 30
#define TOKEN_TIMEOUT_MS 1000
#define RUN_TIMEOUT_S 120

/* Shared between the parent and the ranks (MAP_SHARED). */
typedef struct {
    uint8_t token[TOKEN_BYTES];
    _Atomic int port[MAX_SIZES][MAX_RANKS]; /* per socket buffer size; 0 until the rank listens */
    _Atomic int arrived;                    /* barrier: ranks that reached it */
    _Atomic int generation;                 /* barrier: bumped by the last one in */
    double secs[MAX_RANKS];                 /* this repetition's time of every rank */
} shared_t;

typedef struct {
    int n, reps, hot, nchunks, nbufs;
    size_t bytes, chunks[MAX_SIZES], bufs[MAX_SIZES];
} opts_t;

typedef struct {
    int fd;
    size_t bytes, chunk;
    const char *buf;
    int hot, err;
} tx_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void barrier(shared_t *sh, int n)
{
    int gen = atomic_load(&sh->generation);
    if (atomic_fetch_add(&sh->arrived, 1) == n - 1) {
        atomic_store(&sh->arrived, 0);
        atomic_fetch_add(&sh->generation, 1);
        return;
    }
    while (atomic_load(&sh->generation) == gen)
        sched_yield(); /* the run's SIGALRM ends a barrier a dead rank never reaches */
}

/* Timeouts, and the socket buffers (0: the kernel's autotuning), before connect or listen. */
static void sock_setup(int fd, size_t sockbuf)
{
    struct timeval tv = {.tv_sec = IO_TIMEOUT_S};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (sockbuf) {
        int v = sockbuf > INT32_MAX / 2 ? INT32_MAX / 2 : (int)sockbuf;
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
    }
}

static int send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* The token of an accepted connection, within TOKEN_TIMEOUT_MS in all: a local process that
 * connects and stays silent (or sends a byte at a time) must not stall the ring for the 30 s
 * socket timeout per connection. */
static int recv_token(int fd, uint8_t *got)
{
    double end = now_s() + TOKEN_TIMEOUT_MS / 1e3;
    size_t n = 0;
    while (n < TOKEN_BYTES) {
        int left = (int)((end - now_s()) * 1e3);
        if (left <= 0) return -1;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int k = poll(&p, 1, left);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        ssize_t m = recv(fd, got + n, TOKEN_BYTES - n, MSG_DONTWAIT);
        if (m < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (m <= 0) return -1;
        n += (size_t)m;
    }
    return 0;
}

static void *tx_main(void *arg)
{
    tx_t *t = arg;
    for (size_t done = 0; done < t->bytes;) {
        size_t m = t->bytes - done < t->chunk ? t->bytes - done : t->chunk;
        if (send_all(t->fd, t->buf + (t->hot ? 0 : done), m)) {
            t->err = errno ? errno : EPIPE;
            return NULL;
        }
        done += m;
    }
    return NULL;
}

/* The ring's two connections of rank r with socket buffers bufs[b]: *out to r + 1, *in from
 * r - 1 (after its token). */
static int connect_ring(shared_t *sh, int n, int r, int b, size_t sockbuf, int *out, int *in)
{
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    if (ls >= 0) sock_setup(ls, sockbuf); /* accepted sockets inherit it */
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof(a)) || listen(ls, 4) ||
        getsockname(ls, (struct sockaddr *)&a, &al)) {
        perror("tcpbw: listen on 127.0.0.1");
        return -1;
    }
    atomic_store(&sh->port[b][r], ntohs(a.sin_port));
    int next = (r + 1) % n, port;
    while (!(port = atomic_load(&sh->port[b][next])))
        sched_yield();
    a.sin_port = htons((uint16_t)port);
    const char *stranger = r == 0 && !b ? getenv("TCPBW_TEST_STRANGER") : NULL;
    if (stranger) { /* the tests: a connection with wrong bytes, or a silent one */
        int x = socket(AF_INET, SOCK_STREAM, 0), silent = !strcmp(stranger, "silent");
        uint8_t junk[TOKEN_BYTES];
        memset(junk, 0x5a, sizeof(junk));
        if (x < 0 || connect(x, (struct sockaddr *)&a, sizeof(a)) ||
            (!silent && send_all(x, (const char *)junk, sizeof(junk))))
            perror("tcpbw: the stranger's connection");
        if (!silent) close(x); /* a silent one stays open until rank 0 exits */
    }
    *out = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    if (*out >= 0) sock_setup(*out, sockbuf);
    if (*out < 0 || connect(*out, (struct sockaddr *)&a, sizeof(a))) {
        perror("tcpbw: connect");
        return -1;
    }
    setsockopt(*out, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (send_all(*out, (const char *)sh->token, TOKEN_BYTES)) {
        perror("tcpbw: send the token");
        return -1;
    }
    for (;;) { /* the first connection that sends the token is rank r - 1's */
        *in = accept(ls, NULL, NULL);
        if (*in < 0) {
            if (errno == EINTR) continue;
            perror("tcpbw: accept");
            return -1;
        }
        sock_setup(*in, 0); /* the timeouts; the buffers came from the listener */
        uint8_t got[TOKEN_BYTES];
        int late = recv_token(*in, got);
        if (!late && !memcmp(got, sh->token, sizeof(got))) break;
        fprintf(stderr, "tcpbw: rank %d: closed a connection %s\n", r,
                late ? "that sent no token within 1 s" : "without the run's token");
        close(*in);
    }
    close(ls);
    return 0;
}

/* Rank r's transfers of one repetition over (out, in): its time, or < 0 on failure. */
static double transfer(const opts_t *o, int r, int out, int in, size_t chunk, const char *sbuf,
                       char *rbuf)
{
    tx_t t = {.fd = out, .bytes = o->bytes, .chunk = chunk, .buf = sbuf, .hot = o->hot};
    pthread_t th;
    double t0 = now_s();
    if (pthread_create(&th, NULL, tx_main, &t)) return -1;
    int bad = 0;
    size_t got = 0;
    while (got < o->bytes) {
        size_t want = o->bytes - got < chunk ? o->bytes - got : chunk;
        ssize_t m = recv(in, rbuf + (o->hot ? 0 : got), want, 0);
        if (m < 0 && errno == EINTR) continue;
        if (m <= 0) {
            bad = 1;
            break;
        }
        got += (size_t)m;
    }
    pthread_join(th, NULL);
    double secs = now_s() - t0;
    char want = (char)('a' + (r + o->n - 1) % o->n % 26); /* the sender's bytes */
    if (!bad && !t.err && rbuf[0] == want && rbuf[o->hot ? 0 : o->bytes - 1] == want) return secs;
    fprintf(stderr, "tcpbw: rank %d: the transfer failed (%s)\n", r,
            bad     ? "receive"
            : t.err ? strerror(t.err)
                    : "wrong bytes");
    return -1;
}

/* One rank: per socket buffer size a ring, per chunk size reps + 1 repetitions (the first a
 * warm-up); rank 0 prints each repetition's slowest time. */
static int rank_main(shared_t *sh, const opts_t *o, int r)
{
    int n = o->n;
    size_t len = o->bytes;
    if (o->hot) {
        len = 0;
        for (int i = 0; i < o->nchunks; i++)
            if (o->chunks[i] > len) len = o->chunks[i];
    }
    char *sbuf = malloc(len), *rbuf = malloc(len);
    if (!sbuf || !rbuf) {
        fprintf(stderr, "tcpbw: rank %d: out of memory for 2 x %zu bytes\n", r, len);
        return 1;
    }
    memset(sbuf, 'a' + r % 26, len);
    memset(rbuf, 0, len); /* faulted in before the first repetition */
    for (int b = 0; b < o->nbufs; b++) {
        int out, in;
        if (connect_ring(sh, n, r, b, o->bufs[b], &out, &in)) return 1;
        for (int i = 0; i < o->nchunks; i++) {
            for (int k = 0; k <= o->reps; k++) {
                barrier(sh, n);
                double secs = transfer(o, r, out, in, o->chunks[i], sbuf, rbuf);
                if (secs < 0) return 1;
                sh->secs[r] = secs;
                barrier(sh, n);
                if (r == 0 && k > 0) { /* the slowest rank's time of this repetition */
                    double worst = 0;
                    for (int j = 0; j < n; j++)
                        if (sh->secs[j] > worst) worst = sh->secs[j];
                    printf("%d %d %.9f\n", b, i, worst);
                    fflush(stdout);
                }
                barrier(sh, n); /* nobody rewrites secs before rank 0 read them */
            }
        }
        close(out);
        close(in);
    }
    free(sbuf);
    free(rbuf);
    return 0;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: tcpbw [-n RANKS (2..%d)] [-s BYTES] [-c \"CHUNK ...\"] [-b \"SOCKBUF ...\"] "
            "[-r REPS] [-H]\n",
            MAX_RANKS);
    exit(2);
}

/* A list of at most MAX_SIZES sizes; zero allowed where zero_ok. */
static int parse_list(const char *list, size_t *out, int zero_ok)
{
    char *cl = strdup(list), *save = NULL;
    int k = 0;
    for (char *tok = strtok_r(cl, " ,", &save); tok; tok = strtok_r(NULL, " ,", &save)) {
        if (k == MAX_SIZES) usage();
        out[k] = strcmp(tok, "0") ? parse_bytes(tok) : 0;
        if (!out[k] && !(zero_ok && !strcmp(tok, "0"))) usage();
        k++;
    }
    free(cl);
    if (!k) usage();
    return k;
}

int main(int argc, char **argv)
{
    opts_t o = {.n = 2, .reps = 5, .bytes = (size_t)256 << 20};
    const char *clist = "256K 1M", *blist = "0";
    int opt;
    while ((opt = getopt(argc, argv, "n:s:c:b:r:H")) != -1) {
        switch (opt) {
        case 'n':
            o.n = atoi(optarg);
            break;
        case 's':
            if (!(o.bytes = parse_bytes(optarg))) usage();
            break;
        case 'c':
            clist = optarg;
            break;
        case 'b':
            blist = optarg;
            break;
        case 'r':
            o.reps = atoi(optarg);
            break;
        case 'H':
            o.hot = 1;
            break;
        default:
            usage();
        }
    }
    if (o.n < 2 || o.n > MAX_RANKS || o.reps < 1 || optind < argc) usage();
    o.nchunks = parse_list(clist, o.chunks, 0);
    o.nbufs = parse_list(blist, o.bufs, 1);

    shared_t *sh =
        mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("tcpbw: mmap");
        return 1;
    }
    memset(sh, 0, sizeof(*sh));
    if (getrandom(sh->token, sizeof(sh->token), 0) != (ssize_t)sizeof(sh->token)) {
        perror("tcpbw: getrandom");
        return 1;
    }
    int pipefd[2];
    if (pipe(pipefd)) return 1;
    fflush(stdout);
    pid_t pids[MAX_RANKS];
    for (int r = 0; r < o.n; r++) {
        pids[r] = fork();
        if (pids[r] < 0) {
            perror("tcpbw: fork");
            for (int k = 0; k < r; k++) /* they would wait for the missing rank until SIGALRM */
                kill(pids[k], SIGKILL);
            return 1;
        }
        if (pids[r] == 0) {
            alarm(RUN_TIMEOUT_S);
            close(pipefd[0]);
            if (r == 0 && dup2(pipefd[1], STDOUT_FILENO) < 0) _exit(1);
            close(pipefd[1]);
            _exit(rank_main(sh, &o, r));
        }
    }
    close(pipefd[1]);
    /* Rank 0's lines: buffer index, chunk index, slowest rank's seconds; the best of each. */
    double best[MAX_SIZES][MAX_SIZES] = {{0}}, secs;
    FILE *f = fdopen(pipefd[0], "r");
    int b, i;
    while (f && fscanf(f, "%d %d %lf", &b, &i, &secs) == 3)
        if (b >= 0 && b < o.nbufs && i >= 0 && i < o.nchunks && secs > 0 &&
            (!best[b][i] || secs < best[b][i]))
            best[b][i] = secs;
    if (f) fclose(f);
    int failed = 0;
    for (int r = 0; r < o.n; r++) {
        int st;
        if (waitpid(pids[r], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) failed = 1;
    }
    if (failed) {
        fprintf(stderr, "tcpbw: a rank failed (or ran past %d s)\n", RUN_TIMEOUT_S);
        return 1;
    }
    double top = 0;
    for (b = 0; b < o.nbufs; b++)
        for (i = 0; i < o.nchunks; i++) {
            double gbs = best[b][i] > 0 ? (double)o.bytes / best[b][i] / 1e9 : 0;
            printf("tcpbw ranks %d chunk %zu sockbuf %zu GB/s %.3f\n", o.n, o.chunks[i], o.bufs[b],
                   gbs);
            if (gbs > top) top = gbs;
        }
    printf("tcpbw ranks %d best GB/s %.3f\n", o.n, top);
    return top > 0 ? 0 : 1;
}
