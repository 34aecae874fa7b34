/* The bootstrap handshake (suite "bootstrap_auth"; src/core/bootstrap.c "Authentication"):
 * the job secret never goes on the wire, a client trusts only a root that proves it knows the
 * secret, and a recorded handshake is worthless on any other connection. */
#include "boothand.h"
#include "core/bootstrap.h"
#include "core/bootstrap_wire.h"
#include "core/log.h"

#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void loopback(braid_boot_addr_t *a)
{
    memset(a, 0, sizeof(*a));
    struct sockaddr_in *in = (struct sockaddr_in *)&a->addr;
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a->addrlen = sizeof(*in);
}

/* An impostor on the root's port: it never knew the secret. It records what the client sends
 * and answers the hello with a well-formed ACK (mode 0) or a well-formed challenge whose proof
 * is random (mode 1). */
typedef struct {
    int lfd, mode;
    uint8_t rec[4096];
    size_t nrec;
} fake_root_t;

static void *fake_root_main(void *arg)
{
    fake_root_t *f = arg;
    int fd = accept(f->lfd, NULL, NULL);
    if (fd < 0) return NULL;
    int answered = 0;
    double t0 = now_s();
    while (now_s() - t0 < 5 && f->nrec < sizeof(f->rec)) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0) continue;
        ssize_t n = recv(fd, f->rec + f->nrec, sizeof(f->rec) - f->nrec, 0);
        if (n <= 0) break; /* the client closed */
        f->nrec += (size_t)n;
        if (answered || f->nrec < BRAID_BOOT_HELLO_BYTES) continue;
        answered = 1;
        uint8_t msg[BOOT_HDR_BYTES + BOOT_CHALLENGE_BYTES];
        size_t len = BOOT_HDR_BYTES;
        if (f->mode == 0) {
            boot_hdr_pack(msg, BOOT_MSG_ACK, 0, 0);
        } else if (f->mode == 2) { /* a root of another version refuses the hello */
            boot_hdr_pack(msg, BOOT_MSG_FAIL, (uint32_t)BRAID_ERR_UNSUPPORTED, 11);
            memcpy(msg + BOOT_HDR_BYTES, "version 9 !", 11);
            len += 11;
        } else {
            boot_hdr_pack(msg, BOOT_MSG_CHALLENGE, BOOT_VERSION, BOOT_CHALLENGE_BYTES);
            braid_boot_random_secret(msg + BOOT_HDR_BYTES);
            braid_boot_random_secret(msg + BOOT_HDR_BYTES + 16);
            braid_boot_random_secret(msg + BOOT_HDR_BYTES + 32);
            len += BOOT_CHALLENGE_BYTES;
        }
        if (send(fd, msg, len, MSG_NOSIGNAL) != (ssize_t)len) break;
    }
    close(fd);
    return NULL;
}

/* A fake root on a loopback port (root gets its address and a fresh secret), served by
 * fake_root_main on thread *t_p. */
static void start_fake_root(fake_root_t *f, braid_boot_addr_t *root, pthread_t *t_p)
{
    loopback(root);
    cr_assert_eq(braid_boot_random_secret(root->secret), 0);
    f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_eq(bind(f->lfd, (struct sockaddr *)&root->addr, root->addrlen), 0);
    cr_assert_eq(listen(f->lfd, 4), 0);
    socklen_t l = root->addrlen;
    getsockname(f->lfd, (struct sockaddr *)&root->addr, &l);
    cr_assert_eq(pthread_create(t_p, NULL, fake_root_main, f), 0);
}

static void expect_fake_rejected(int mode)
{
    fake_root_t f = {.mode = mode};
    braid_boot_addr_t root;
    pthread_t t;
    start_fake_root(&f, &root, &t);
    braid_bootstrap_t *bs = NULL;
    double t0 = now_s();
    int res = braid_boot_init(&bs, &root, 1, 2, 5, NULL);
    double el = now_s() - t0;
    pthread_join(t, NULL);
    close(f.lfd);
    cr_assert_eq(res, BRAID_ERR_AUTH, "mode %d: got %s (%s)", mode, braid_strerror(res),
                 braid_last_error());
    cr_assert_null(bs);
    cr_assert_lt(el, 2.0, "mode %d: the client took %g s to give up", mode, el);
    cr_assert_not_null(strstr(braid_last_error(), "did not prove it knows the job secret"),
                       "mode %d: %s", mode, braid_last_error());
    cr_assert_geq(f.nrec, (size_t)BRAID_BOOT_HELLO_BYTES, "mode %d: no hello recorded", mode);
    cr_assert_null(memmem(f.rec, f.nrec, root.secret, BRAID_SECRET_BYTES),
                   "mode %d: the secret went to the impostor", mode);
    /* Nor half of it (a secret split across fields would be as bad). */
    cr_assert_null(memmem(f.rec, f.nrec, root.secret, BRAID_SECRET_BYTES / 2), "mode %d", mode);
    cr_assert_null(memmem(f.rec, f.nrec, root.secret + 8, BRAID_SECRET_BYTES / 2), "mode %d", mode);
}

/* A listener that never knew the secret and answers the hello with an ACK (what braid's root
 * sends once all ranks joined) or with a challenge whose proof it cannot compute: init fails
 * with BRAID_ERR_AUTH at once, and the impostor never saw the secret. */
Test(bootstrap_auth, fake_root_rejected, .timeout = 30)
{
    setenv("BRAID_DEBUG", "NONE", 1);
    expect_fake_rejected(0);
    expect_fake_rejected(1);
}

/* A handshake recorded on one connection (here: rank 0's join of another job's root with the
 * same secret, as with a BRAID_SECRET reused across jobs) and replayed to this job's root before
 * the genuine rank 0 joins is refused without taking rank 0's slot: the genuine rank then
 * joins and the job runs. */
Test(bootstrap_auth, replayed_handshake_refused, .timeout = 30)
{
    setenv("BRAID_DEBUG", "NONE", 1);
    braid_boot_addr_t x, y;
    loopback(&x);
    cr_assert_eq(braid_boot_random_secret(x.secret), 0);
    y = x;
    cr_assert_eq(braid_boot_root_start(&x, 10), 0, "%s", braid_last_error());
    cr_assert_eq(braid_boot_root_start(&y, 10), 0, "%s", braid_last_error());
    struct timeval tv = {.tv_sec = 8};

    /* The genuine handshake, recorded: rank 0 of 1 joins root x. */
    uint8_t rec[BOOT_HAND_SENT];
    int a = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    setsockopt(a, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    cr_assert_eq(connect(a, (struct sockaddr *)&x.addr, x.addrlen), 0, "%s", strerror(errno));
    cr_assert_eq(boot_hand_join(a, x.secret, braid_boot_addr_port(&x.addr), 0, 1, rec), 1,
                 "the genuine handshake failed");
    uint8_t ack[BOOT_HDR_BYTES];
    cr_assert_eq(recv(a, ack, sizeof(ack), MSG_WAITALL), (ssize_t)sizeof(ack));
    cr_assert_eq(boot_get_u32(ack), BOOT_MSG_ACK, "root x did not admit the genuine rank");
    close(a);

    /* The replay to root y: the old proof does not match the fresh challenge (which may not
     * even be sent: the proof is already there when the root reads the hello), and the root
     * closes the connection without admitting it. */
    int b = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    setsockopt(b, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    cr_assert_eq(connect(b, (struct sockaddr *)&y.addr, y.addrlen), 0, "%s", strerror(errno));
    cr_assert_eq(send(b, rec, sizeof(rec), MSG_NOSIGNAL), (ssize_t)sizeof(rec));
    uint8_t got[256];
    size_t n = 0;
    for (;;) {
        ssize_t r = recv(b, got + n, sizeof(got) - n, 0);
        if (r <= 0) {
            cr_assert(r == 0 || errno == ECONNRESET, "replay not closed: %s", strerror(errno));
            break;
        }
        n += (size_t)r;
        cr_assert_lt(n, sizeof(got));
    }
    close(b);
    cr_assert(n == 0 || n == (size_t)(BOOT_HDR_BYTES + BOOT_CHALLENGE_BYTES),
              "the replayer got %zu bytes: more than the challenge", n);
    cr_assert(n == 0 || boot_get_u32(got) == BOOT_MSG_CHALLENGE);

    /* Rank 0's slot is still free. */
    braid_bootstrap_t *bs = NULL;
    cr_assert_eq(braid_boot_init(&bs, &y, 0, 1, 5, NULL), 0, "%s", braid_last_error());
    cr_assert_eq(braid_boot_barrier(bs), 0, "%s", braid_last_error());
    braid_boot_close(bs);
    double t0 = now_s();
    while (braid_boot_root_count() > 0 && now_s() - t0 < 5)
        usleep(10000);
    cr_assert_eq(braid_boot_root_count(), 0, "a root service did not exit");
}

/* An impostor that holds job B's root port and relays each byte between a client of B and the
 * root of job A, which has the same secret (BRAID_SECRET reused across jobs) on another port. */
typedef struct {
    int lfd;
    braid_boot_addr_t to;
} relay_t;

static void *relay_main(void *arg)
{
    relay_t *r = arg;
    int a = accept(r->lfd, NULL, NULL);
    if (a < 0) return NULL;
    int b = socket(r->to.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (b < 0 || connect(b, (struct sockaddr *)&r->to.addr, r->to.addrlen)) {
        close(a);
        if (b >= 0) close(b);
        return NULL;
    }
    struct pollfd p[2] = {{.fd = a, .events = POLLIN}, {.fd = b, .events = POLLIN}};
    double t0 = now_s();
    int stop = 0;
    while (!stop && now_s() - t0 < 5) {
        if (poll(p, 2, 100) <= 0) continue;
        for (int i = 0; i < 2 && !stop; i++) {
            if (!p[i].revents) continue;
            char buf[4096];
            ssize_t n = recv(p[i].fd, buf, sizeof(buf), 0);
            stop = n <= 0 || send(p[1 - i].fd, buf, (size_t)n, MSG_NOSIGNAL) != n;
        }
    }
    close(a);
    close(b);
    return NULL;
}

/* The root's proof is bound to its port: job A's root cannot vouch for job B's, so a client of
 * B whose connection an impostor on B's port relays to A's root fails with BRAID_ERR_AUTH (it
 * would otherwise join A's job and take A's results as B's). The same client joins A's root
 * when it dials it directly. */
Test(bootstrap_auth, relayed_to_another_root_rejected, .timeout = 30)
{
    setenv("BRAID_DEBUG", "NONE", 1);
    braid_boot_addr_t a, b;
    loopback(&a);
    cr_assert_eq(braid_boot_random_secret(a.secret), 0);
    b = a;
    cr_assert_eq(braid_boot_root_start(&a, 10), 0, "%s", braid_last_error());
    relay_t r = {.to = a};
    r.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_eq(bind(r.lfd, (struct sockaddr *)&b.addr, b.addrlen), 0);
    cr_assert_eq(listen(r.lfd, 4), 0);
    socklen_t l = b.addrlen;
    getsockname(r.lfd, (struct sockaddr *)&b.addr, &l);
    cr_assert_neq(braid_boot_addr_port(&a.addr), braid_boot_addr_port(&b.addr));
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, relay_main, &r), 0);
    braid_bootstrap_t *bs = NULL;
    int res = braid_boot_init(&bs, &b, 0, 1, 5, NULL);
    pthread_join(t, NULL);
    close(r.lfd);
    cr_assert_eq(res, BRAID_ERR_AUTH, "got %s (%s)", braid_strerror(res), braid_last_error());
    cr_assert_null(bs);
    cr_assert_eq(braid_boot_init(&bs, &a, 0, 1, 5, NULL), 0, "%s", braid_last_error());
    cr_assert_eq(braid_boot_barrier(bs), 0, "%s", braid_last_error());
    braid_boot_close(bs);
}

/* A root of another protocol version answers the hello with BOOT_MSG_FAIL: the client reports
 * it at once (BRAID_ERR_UNSUPPORTED, the root's text) instead of reconnecting until its
 * deadline. */
Test(bootstrap_auth, other_version_failure_reported_at_once, .timeout = 30)
{
    setenv("BRAID_DEBUG", "NONE", 1);
    fake_root_t f = {.mode = 2};
    braid_boot_addr_t root;
    pthread_t t;
    start_fake_root(&f, &root, &t);
    braid_bootstrap_t *bs = NULL;
    double t0 = now_s();
    int res = braid_boot_init(&bs, &root, 1, 2, 5, NULL);
    double el = now_s() - t0;
    close(f.lfd);
    pthread_join(t, NULL);
    cr_assert_eq(res, BRAID_ERR_UNSUPPORTED, "got %s (%s)", braid_strerror(res),
                 braid_last_error());
    cr_assert_lt(el, 2.0, "the client took %g s", el);
    cr_assert_not_null(strstr(braid_last_error(), "version 9"), "%s", braid_last_error());
}
