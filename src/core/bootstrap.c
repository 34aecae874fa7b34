/* Bootstrap client side, the unique id layout and the hello (see bootstrap.h and the wire
 * format in bootstrap_wire.h; the root service is in bootstrap_root.c).
 *
 * Unique id layout (128 bytes, little-endian):
 *   0  "BRD1"          4  u16 family (4 or 6)   6  u16 port
 *   8  16 address bytes (IPv4: the first 4, the rest zero)
 *   24 16 secret bytes  40 u32 IPv6 scope id    44 u8 rank0_hosts (0 or 1)
 *   45..127 zero */
#include "core/bootstrap.h"
#include "core/bootstrap_wire.h"
#include "core/log.h"

#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ID_MAGIC "BRD1"
#define ID_FLAGS 44
#define ID_RESERVED 45

void braid_boot_id_encode(const braid_boot_addr_t *a, braid_unique_id_t *id_p)
{
    uint8_t b[BRAID_UNIQUE_ID_BYTES];
    memset(b, 0, sizeof(b));
    memcpy(b, ID_MAGIC, 4);
    if (a->addr.ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&a->addr;
        boot_put_u16(b + 4, 4);
        boot_put_u16(b + 6, ntohs(in->sin_port));
        memcpy(b + 8, &in->sin_addr, 4);
    } else if (a->addr.ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&a->addr;
        boot_put_u16(b + 4, 6);
        boot_put_u16(b + 6, ntohs(in6->sin6_port));
        memcpy(b + 8, &in6->sin6_addr, 16);
        boot_put_u32(b + 40, in6->sin6_scope_id);
    }
    memcpy(b + 24, a->secret, BRAID_SECRET_BYTES);
    b[ID_FLAGS] = (uint8_t)((a->rank0_hosts ? 1 : 0) | (a->loopback_only ? 2 : 0));
    memcpy(id_p->internal, b, sizeof(b));
}

braid_result_t braid_boot_id_decode(const braid_unique_id_t *id, braid_boot_addr_t *a_p)
{
    if (!id || !a_p) return braid_set_error(BRAID_ERR_INVALID_ARG, "id: NULL pointer");
    const uint8_t *b = (const uint8_t *)id->internal;
    if (memcmp(b, ID_MAGIC, 4))
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "id: bad magic (not a braid unique id, or from another version)");
    for (int i = ID_RESERVED; i < BRAID_UNIQUE_ID_BYTES; i++)
        if (b[i])
            return braid_set_error(BRAID_ERR_INVALID_ARG, "id: reserved byte %d is not zero", i);
    unsigned fam = boot_get_u16(b + 4), port = boot_get_u16(b + 6);
    if (port == 0) return braid_set_error(BRAID_ERR_INVALID_ARG, "id: port 0");
    braid_boot_addr_t a;
    memset(&a, 0, sizeof(a));
    if (fam == 4) {
        for (int i = 12; i < 24; i++)
            if (b[i])
                return braid_set_error(BRAID_ERR_INVALID_ARG,
                                       "id: IPv4 id with non-zero address padding");
        if (boot_get_u32(b + 40))
            return braid_set_error(BRAID_ERR_INVALID_ARG, "id: IPv4 id with a scope id");
        struct sockaddr_in *in = (struct sockaddr_in *)&a.addr;
        in->sin_family = AF_INET;
        in->sin_port = htons((uint16_t)port);
        memcpy(&in->sin_addr, b + 8, 4);
        a.addrlen = sizeof(*in);
    } else if (fam == 6) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&a.addr;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        memcpy(&in6->sin6_addr, b + 8, 16);
        in6->sin6_scope_id = boot_get_u32(b + 40);
        a.addrlen = sizeof(*in6);
    } else {
        return braid_set_error(BRAID_ERR_INVALID_ARG, "id: unknown address family %u", fam);
    }
    memcpy(a.secret, b + 24, BRAID_SECRET_BYTES);
    if (b[ID_FLAGS] > 3)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "id: flags byte %d is %u (0 to 3)", ID_FLAGS,
                               b[ID_FLAGS]);
    a.rank0_hosts = b[ID_FLAGS] & 1;
    a.loopback_only = (b[ID_FLAGS] >> 1) & 1;
    *a_p = a;
    return BRAID_SUCCESS;
}

braid_result_t braid_unique_id_str(const braid_unique_id_t *id, char *buf, size_t len)
{
    if (!buf) return braid_set_error(BRAID_ERR_INVALID_ARG, "buf: NULL pointer");
    if (len == 0) return braid_set_error(BRAID_ERR_INVALID_ARG, "len: 0");
    buf[0] = '\0';
    braid_boot_addr_t a;
    BRAID_CHECK(braid_boot_id_decode(id, &a));
    char text[INET6_ADDRSTRLEN + 32];
    braid_boot_addr_str(&a.addr, text, sizeof(text));
    size_t need = strlen(text) + 1;
    if (need > len)
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "len: %zu bytes cannot hold \"%s\" (%zu with its NUL)", len, text,
                               need);
    memcpy(buf, text, need);
    return BRAID_SUCCESS;
}

/* Hello: u32 magic | u32 version | i32 rank | i32 nranks | 16 bytes client nonce. */
void braid_boot_hello_pack(const braid_boot_hello_t *h, uint8_t out[BRAID_BOOT_HELLO_BYTES])
{
    boot_put_u32(out, h->magic);
    boot_put_u32(out + 4, h->version);
    boot_put_u32(out + 8, (uint32_t)h->rank);
    boot_put_u32(out + 12, (uint32_t)h->nranks);
    memcpy(out + 16, h->nonce, BRAID_NONCE_BYTES);
}

braid_result_t braid_boot_hello_parse(const void *buf, size_t len, braid_boot_hello_t *h_p)
{
    const uint8_t *b = buf;
    if (!b || !h_p || len != BRAID_BOOT_HELLO_BYTES)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "hello: %zu bytes, want %d", len,
                               BRAID_BOOT_HELLO_BYTES);
    braid_boot_hello_t h;
    h.magic = boot_get_u32(b);
    h.version = boot_get_u32(b + 4);
    h.rank = (int32_t)boot_get_u32(b + 8);
    h.nranks = (int32_t)boot_get_u32(b + 12);
    memcpy(h.nonce, b + 16, BRAID_NONCE_BYTES);
    if (h.magic != BOOT_HELLO_MAGIC)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "hello: bad magic 0x%08x", h.magic);
    if (h.version != BOOT_VERSION)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "hello: version %u, want %u", h.version,
                               BOOT_VERSION);
    if (h.nranks < 1 || h.nranks > BOOT_MAX_NRANKS || h.rank < 0 || h.rank >= h.nranks)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "hello: rank %d of nranks %d", h.rank,
                               h.nranks);
    *h_p = h;
    return BRAID_SUCCESS;
}

/* ---- authentication -----------------------------------------------------------------------
 *
 * Neither side sends the job secret; each proves that it knows it with an HMAC-SHA256 keyed by
 * it (core/hmac.c):
 *
 *   client -> root   hello {magic, version, rank, nranks, Nc}     Nc: fresh for each connection
 *   root -> client   CHALLENGE {Nr, HMAC(K, "braid-boot-root" | hello | Nr)}
 *   client -> root   PROOF {HMAC(K, "braid-boot-client" | hello | Nr)}
 *
 * with the root's own key K = HMAC(secret, "braid-boot-key" | root port, u16 little-endian): the
 * root takes the port it listens on, the client the port of the root's address in its id. Both
 * proofs are thus bound to that root: without K, another root of the same secret (a job that
 * reuses BRAID_SECRET, or a split's parent) would be an oracle for the root's proof, and an
 * impostor on this root's port could relay the client's hello to it and pass its challenge off
 * as this root's. In rank0_hosts mode the root listens on every address, but the port is the
 * one the clients dial. Not covered: roots that share a port (on different hosts) and a secret,
 * and NAT or port forwarding, where the port a client dials is not the one the root listens on
 * (such a client fails with BRAID_ERR_AUTH); BRAID_SECRET should be unique per job.
 *
 * The client checks the root's proof before it reads or sends anything else on the connection:
 * an impostor on the root's port (one that bound a BRAID_ROOT or MASTER_PORT + 1 port before
 * rank 0 did) learns only the hello, and the client fails with BRAID_ERR_AUTH. The root admits
 * the rank (takes its slot, sends it anything but the challenge) only after checking the
 * client's proof.
 *
 * Replays. Each proof covers a nonce that its verifier drew for this connection: Nr (fresh
 * from getrandom for every hello the root reads) in the client's proof, Nc in the root's. A
 * recorded hello and proof (seen on the network, collected by an impostor root, or from an
 * earlier job with the same BRAID_SECRET) is therefore worthless on any other connection:
 * replayed to the root, even before the genuine rank connects, it meets a new Nr that the
 * replayer cannot answer and is dropped at the hello deadline without taking a rank slot;
 * replayed to a client by a fake root, the old root proof does not cover the client's new Nc.
 * The labels differ, so a root's proof is never a valid client's proof or the reverse. The root
 * answers any stranger's hello with a challenge: one HMAC of work, and nothing learnt (HMAC is
 * a PRF, Nr is random).
 *
 * Not covered: the messages after the handshake carry no MAC and nothing is encrypted, so an
 * attacker who can take over an established TCP connection (an active man in the middle) can
 * still read or change them, as with any unencrypted TCP service; and a job secret derived from
 * job identifiers (no BRAID_SECRET; braid_boot_env_resolve) is known to anyone who sees those,
 * as documented: such a job is not authenticated. */
void braid_boot_proof(const uint8_t secret[BRAID_SECRET_BYTES], int port, int root,
                      const uint8_t hello[BRAID_BOOT_HELLO_BYTES],
                      const uint8_t nonce[BRAID_NONCE_BYTES], uint8_t out[BRAID_SHA256_BYTES])
{
    uint8_t p[2], key[BRAID_SHA256_BYTES];
    boot_put_u16(p, (uint16_t)port);
    braid_auth_mac(secret, BRAID_SECRET_BYTES, "braid-boot-key", p, sizeof(p), NULL, 0, key);
    braid_auth_mac(key, sizeof(key), root ? "braid-boot-root" : "braid-boot-client", hello,
                   BRAID_BOOT_HELLO_BYTES, nonce, BRAID_NONCE_BYTES, out);
}

braid_result_t braid_boot_challenge(const uint8_t *secret, int port, const uint8_t *hello,
                                    uint8_t *nonce, uint8_t *out)
{
    BRAID_CHECK(braid_boot_random_secret(nonce));
    boot_hdr_pack(out, BOOT_MSG_CHALLENGE, BOOT_VERSION, BOOT_CHALLENGE_BYTES);
    memcpy(out + BOOT_HDR_BYTES, nonce, BRAID_NONCE_BYTES);
    braid_boot_proof(secret, port, 1, hello, nonce, out + BOOT_HDR_BYTES + BRAID_NONCE_BYTES);
    return BRAID_SUCCESS;
}

int braid_boot_check_proof(const uint8_t *secret, int port, const uint8_t *buf,
                           const uint8_t *nonce)
{
    const uint8_t *hdr = buf + BRAID_BOOT_HELLO_BYTES;
    if (boot_get_u32(hdr) != BOOT_MSG_PROOF || boot_get_u64(hdr + 8) != BOOT_MAC_BYTES) return 1;
    uint8_t want[BOOT_MAC_BYTES];
    braid_boot_proof(secret, port, 0, buf, nonce, want);
    return braid_mac_cmp(want, hdr + BOOT_HDR_BYTES, BOOT_MAC_BYTES) ? 2 : 0;
}

/* ---- client ------------------------------------------------------------------------------ */

struct braid_bootstrap {
    int fd;
    int rank, nranks;
    double timeout_s;
    const volatile int *abort_flag;
    uint32_t seq;       /* collectives completed */
    braid_result_t err; /* sticky */
    char errmsg[512];
    int quiet;       /* braid_boot_report_error: leave the caller's last-error message alone */
    int joined;      /* the root acknowledged the hello */
    int reserve_err; /* errno of the socket() that failed; the connection used the reserve */
    char root[96];
    braid_boot_addr_t id; /* the root's address and secret (braid_boot_root_accept_failing) */
    /* Connections the root closed before answering the hello (join_again reconnects), whether
     * the last one was, whether the root sent anything on this one, and whether that was its
     * verified proof (a root closes a connection waiting for the client's proof to make room
     * for others, or at its hello deadline: the rank reconnects). */
    int drops, dropped, replied, proven;
};

/* How long a client that gave up waits for the root's answer to BOOT_MSG_GIVEUP. */
static double reply_grace(double timeout_s)
{
    return fmin(1.0, 0.25 * timeout_s) + 0.1;
}

static double deadline_after(double timeout_s)
{
    return timeout_s > 0 ? boot_now() + timeout_s : INFINITY;
}

/* Records the sticky error of bs and the caller's last-error message. */
static braid_result_t fail(braid_bootstrap_t *bs, braid_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static braid_result_t fail(braid_bootstrap_t *bs, braid_result_t code, const char *fmt, ...)
{
    if (!bs->err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(bs->errmsg, sizeof(bs->errmsg), fmt, ap);
        va_end(ap);
        bs->err = code;
    }
    if (bs->quiet) return bs->err;
    return braid_set_error(bs->err, "%s", bs->errmsg);
}

static int aborted(const braid_bootstrap_t *bs)
{
    return bs->abort_flag && *bs->abort_flag;
}

/* Waits until fd is ready for events in slices of at most 100 ms. Returns 1 when ready,
 * 0 at the deadline, BRAID_ERR_ABORTED (sticky) if the abort flag is set. */
static int wait_fd(braid_bootstrap_t *bs, int fd, short events, double deadline, int abortable)
{
    for (;;) {
        if (abortable && aborted(bs))
            return fail(bs, BRAID_ERR_ABORTED, "bootstrap: rank %d aborted", bs->rank);
        char why[256];
        if (!bs->joined && braid_boot_root_accept_failing(&bs->id, 1.0, why, sizeof(why)))
            return fail(bs, BRAID_ERR_SYSTEM,
                        "bootstrap: rank %d cannot join: the bootstrap root in this process "
                        "cannot accept connections: %s",
                        bs->rank, why);
        double left = deadline - boot_now();
        if (left <= 0) return 0;
        int ms = left > 0.1 ? 100 : (int)(left * 1000) + 1;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, ms);
        if (n > 0) return 1;
        if (n < 0 && errno != EINTR)
            return fail(bs, BRAID_ERR_SYSTEM, "bootstrap: poll failed: %s", strerror(errno));
    }
}

static braid_result_t root_closed(braid_bootstrap_t *bs)
{
    /* braid_boot_init reconnects (not after a BOOT_MSG_FAIL: check_async read it into err) */
    bs->dropped = !bs->joined && !bs->err && (!bs->replied || bs->proven);
    if (!bs->joined)
        return fail(bs, BRAID_ERR_REMOTE,
                    "bootstrap root %s closed the connection before all ranks joined (the root "
                    "drops a hello with a wrong job secret or from another braid version; see "
                    "its log)",
                    bs->root);
    return fail(bs, BRAID_ERR_REMOTE, "bootstrap root %s closed the connection", bs->root);
}

static braid_result_t read_fail_msg(braid_bootstrap_t *bs, const uint8_t *hdr, double deadline);

/* The root's address answered with bytes that are no message of braid's bootstrap protocol
 * (a web server, another program on the port, or a different protocol): say so, with what it
 * sent, rather than call it an internal error. */
static braid_result_t not_a_root_n(braid_bootstrap_t *bs, const uint8_t *hdr, size_t n)
{
    char shown[BOOT_HDR_BYTES * 4 + 1];
    size_t o = 0;
    for (size_t i = 0; i < n && i < BOOT_HDR_BYTES; i++) {
        unsigned char ch = hdr[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '\\')
            shown[o++] = (char)ch;
        else
            o += (size_t)snprintf(shown + o, sizeof(shown) - o, "\\x%02x", ch);
    }
    shown[o] = '\0';
    return fail(bs, BRAID_ERR_REMOTE,
                "bootstrap: %s is not a braid bootstrap root: it answered \"%s\"... (check "
                "BRAID_ROOT / MASTER_ADDR:MASTER_PORT, or the port is used by another program)",
                bs->root, shown);
}

static braid_result_t not_a_root(braid_bootstrap_t *bs, const uint8_t *hdr)
{
    return not_a_root_n(bs, hdr, BOOT_HDR_BYTES);
}

/* Reads exactly len bytes. what: for the timeout message ("ranks to join"). */
static braid_result_t recv_all(braid_bootstrap_t *bs, void *buf, size_t len, double deadline,
                               const char *what)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = recv(bs->fd, (char *)buf + got, len - got, MSG_DONTWAIT);
        if (n > 0) {
            got += (size_t)n;
            bs->replied = 1;
            continue;
        }
        if (n == 0) {
            /* A few bytes and the end before the hello was answered: not braid's protocol. */
            if (got > 0 && !bs->joined) return not_a_root_n(bs, buf, got);
            return root_closed(bs);
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            if (errno == ECONNRESET) return root_closed(bs);
            return fail(bs, BRAID_ERR_SYSTEM, "bootstrap: recv from root %s: %s", bs->root,
                        strerror(errno));
        }
        int w = wait_fd(bs, bs->fd, POLLIN, deadline, 1);
        if (w < 0) return w;
        if (w == 0)
            return fail(bs, BRAID_ERR_TIMEOUT, "bootstrap: rank %d waited %g s for %s", bs->rank,
                        bs->timeout_s, what);
    }
    return BRAID_SUCCESS;
}

/* Non-blocking: if the root sent something while this rank was not waiting, it is a
 * BOOT_MSG_FAIL (or EOF); read it into the sticky error. */
static braid_result_t check_async(braid_bootstrap_t *bs)
{
    if (bs->err) return bs->quiet ? bs->err : braid_set_error(bs->err, "%s", bs->errmsg);
    struct pollfd p = {.fd = bs->fd, .events = POLLIN};
    if (poll(&p, 1, 0) <= 0) return BRAID_SUCCESS;
    uint8_t hdr[BOOT_HDR_BYTES];
    double deadline = boot_now() + 2.0;
    BRAID_CHECK(recv_all(bs, hdr, sizeof(hdr), deadline, "an error message from the root"));
    if (boot_get_u32(hdr) == BOOT_MSG_FAIL) return read_fail_msg(bs, hdr, deadline);
    uint32_t t = boot_get_u32(hdr);
    if (t != BOOT_MSG_ACK && t != BOOT_MSG_RESULT) return not_a_root(bs, hdr);
    return fail(bs, BRAID_ERR_INTERNAL, "bootstrap: unexpected message type %u from root %s", t,
                bs->root);
}

static braid_result_t send_all(braid_bootstrap_t *bs, const void *buf, size_t len, double deadline,
                               int abortable)
{
    size_t off = 0;
    while (off < len) {
        ssize_t n = send(bs->fd, (const char *)buf + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n >= 0) {
            off += (size_t)n;
            continue;
        }
        if (errno == EINTR) continue;
        if (errno == EPIPE || errno == ECONNRESET) {
            check_async(bs); /* the root may have said why before closing */
            return root_closed(bs);
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return fail(bs, BRAID_ERR_SYSTEM, "bootstrap: send to root %s: %s", bs->root,
                        strerror(errno));
        int w = wait_fd(bs, bs->fd, POLLOUT, deadline, abortable);
        if (w < 0) return w;
        if (w == 0)
            return fail(bs, BRAID_ERR_TIMEOUT,
                        "bootstrap: rank %d could not send to root %s "
                        "within %g s",
                        bs->rank, bs->root, bs->timeout_s);
    }
    return BRAID_SUCCESS;
}

static braid_result_t read_fail_msg(braid_bootstrap_t *bs, const uint8_t *hdr, double deadline)
{
    uint64_t len = boot_get_u64(hdr + 8);
    int32_t code = (int32_t)boot_get_u32(hdr + 4);
    char text[BOOT_MAX_TEXT + 1];
    if (len > BOOT_MAX_TEXT)
        return fail(bs, BRAID_ERR_INTERNAL, "bootstrap: root %s sent a %llu-byte error text",
                    bs->root, (unsigned long long)len);
    BRAID_CHECK(recv_all(bs, text, (size_t)len, deadline, "an error message from the root"));
    text[len] = '\0';
    boot_sanitize(text);
    if (code >= 0 || code < BRAID_ERR_INVALID_USAGE) code = BRAID_ERR_REMOTE;
    return fail(bs, (braid_result_t)code, "%s", text);
}

/* Receives the root's reply of the given type (a FAIL becomes the sticky error). At the
 * deadline the client sends BOOT_MSG_GIVEUP: the root knows which ranks are missing and
 * fails the whole job with a timeout that names them (or the reply was already on its way,
 * and arrives). Only if the root does not answer does the client use its own message. */
static braid_result_t recv_reply(braid_bootstrap_t *bs, uint32_t type, uint64_t len, void *buf,
                                 double deadline, const char *what)
{
    uint8_t hdr[BOOT_HDR_BYTES];
    int w = wait_fd(bs, bs->fd, POLLIN, deadline, 1);
    if (w < 0) return w;
    if (w == 0) {
        boot_hdr_pack(hdr, BOOT_MSG_GIVEUP, type == BOOT_MSG_ACK ? BOOT_GIVEUP_JOIN : bs->seq, 0);
        braid_debug(BOOT, "rank %d gives up waiting for %s", bs->rank, what);
        BRAID_CHECK(send_all(bs, hdr, sizeof(hdr), boot_now() + 1.0, 0));
        deadline = boot_now() + reply_grace(bs->timeout_s);
    }
    BRAID_CHECK(recv_all(bs, hdr, sizeof(hdr), deadline, what));
    uint32_t t = boot_get_u32(hdr), aux = boot_get_u32(hdr + 4);
    if (t == BOOT_MSG_FAIL) return read_fail_msg(bs, hdr, deadline);
    if (t != BOOT_MSG_ACK && t != BOOT_MSG_RESULT) return not_a_root(bs, hdr);
    if (t != type || boot_get_u64(hdr + 8) != len || (type == BOOT_MSG_RESULT && aux != bs->seq))
        return fail(bs, BRAID_ERR_INTERNAL,
                    "bootstrap: unexpected reply from root %s (type %u aux %u len %llu, want "
                    "type %u aux %u len %llu)",
                    bs->root, t, aux, (unsigned long long)boot_get_u64(hdr + 8), type, bs->seq,
                    (unsigned long long)len);
    return recv_all(bs, buf, (size_t)len, deadline, what);
}

/* The peer at the root's address answered the hello without a valid proof. */
static braid_result_t not_proven(braid_bootstrap_t *bs, const char *why)
{
    return fail(bs, BRAID_ERR_AUTH,
                "bootstrap: %s did not prove it knows the job secret (%s): it is not this job's "
                "bootstrap root (another process may hold the port, or BRAID_SECRET differs "
                "between the ranks)",
                bs->root, why);
}

/* The rest of the handshake after this rank sent its hello: reads the root's challenge, checks
 * the root's proof, and sends this rank's (see "Authentication" above). */
static braid_result_t authenticate(braid_bootstrap_t *bs, const uint8_t *secret,
                                   const uint8_t hello[BRAID_BOOT_HELLO_BYTES], double deadline)
{
    uint8_t hdr[BOOT_HDR_BYTES], ch[BOOT_CHALLENGE_BYTES], want[BOOT_MAC_BYTES];
    BRAID_CHECK(recv_all(bs, hdr, sizeof(hdr), deadline, "the bootstrap root's challenge"));
    uint32_t t = boot_get_u32(hdr), aux = boot_get_u32(hdr + 4);
    uint64_t len = boot_get_u64(hdr + 8);
    char why[96];
    if (t < BOOT_MSG_ALLGATHER || t > BOOT_MSG_PROOF) return not_a_root(bs, hdr);
    /* Unauthenticated, but it can only fail this rank (as closing could): another version. */
    if (t == BOOT_MSG_FAIL) return read_fail_msg(bs, hdr, deadline);
    if (t != BOOT_MSG_CHALLENGE || aux != BOOT_VERSION || len != BOOT_CHALLENGE_BYTES) {
        snprintf(why, sizeof(why), "it answered the hello with message type %u, aux %u, %llu bytes",
                 t, aux, (unsigned long long)len);
        return not_proven(bs, why);
    }
    BRAID_CHECK(recv_all(bs, ch, sizeof(ch), deadline, "the bootstrap root's challenge"));
    int port = braid_boot_addr_port(&bs->id.addr);
    braid_boot_proof(secret, port, 1, hello, ch, want);
    if (braid_mac_cmp(want, ch + BRAID_NONCE_BYTES, BOOT_MAC_BYTES))
        return not_proven(bs, "wrong proof in its challenge");
    bs->proven = 1; /* from here, a close without BOOT_MSG_FAIL before the ACK is a drop */
    uint8_t proof[BOOT_HDR_BYTES + BOOT_MAC_BYTES];
    boot_hdr_pack(proof, BOOT_MSG_PROOF, 0, BOOT_MAC_BYTES);
    braid_boot_proof(secret, port, 0, hello, ch, proof + BOOT_HDR_BYTES);
    return send_all(bs, proof, sizeof(proof), deadline, 1);
}

static int connect_retryable(int err)
{
    return err == ECONNREFUSED || err == ETIMEDOUT || err == ENETUNREACH || err == EHOSTUNREACH ||
           err == ECONNRESET || err == ECONNABORTED || err == EAGAIN || err == EINTR;
}

/* Connects to the root, retrying with backoff until the deadline. */
static braid_result_t connect_root(braid_bootstrap_t *bs, const braid_boot_addr_t *root,
                                   double deadline)
{
    double backoff = 0.01;
    int last = 0;
    for (;;) {
        if (aborted(bs)) return fail(bs, BRAID_ERR_ABORTED, "bootstrap: rank %d aborted", bs->rank);
        int fd = socket(root->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0 && (errno == EMFILE || errno == ENFILE) && !bs->reserve_err &&
            braid_fd_reserve_release()) {
            /* Out of descriptors: the reserve's number lets this rank tell the root. */
            bs->reserve_err = errno;
            fd = socket(root->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
            if (fd < 0) errno = bs->reserve_err;
        }
        if (fd < 0) {
            int err = errno;
            return fail(bs, BRAID_ERR_SYSTEM, "bootstrap: rank %d: socket failed: %s%s", bs->rank,
                        strerror(err), braid_errno_hint(err));
        }
        int rc = connect(fd, (const struct sockaddr *)&root->addr, root->addrlen);
        int err = rc == 0 ? 0 : errno;
        if (rc < 0 && err == EINPROGRESS) {
            int w = wait_fd(bs, fd, POLLOUT, deadline, 1);
            if (w < 0) {
                close(fd);
                return w;
            }
            socklen_t sl = sizeof(err);
            if (w == 0)
                err = ETIMEDOUT;
            else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl))
                err = errno;
        }
        if (err == 0) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            bs->fd = fd;
            return BRAID_SUCCESS;
        }
        close(fd);
        last = err;
        if (err == ECONNREFUSED && bs->drops)
            return fail(bs, BRAID_ERR_REMOTE,
                        "bootstrap root %s closed the connection before all ranks joined, and "
                        "no longer listens",
                        bs->root);
        if (!connect_retryable(err))
            return fail(bs, BRAID_ERR_SYSTEM, "bootstrap: rank %d cannot connect to root %s: %s",
                        bs->rank, bs->root, strerror(err));
        double until = fmin(boot_now() + backoff, deadline);
        while (boot_now() < until) {
            if (aborted(bs))
                return fail(bs, BRAID_ERR_ABORTED, "bootstrap: rank %d aborted", bs->rank);
            double left = until - boot_now();
            if (left > 0) usleep((useconds_t)(fmin(left, 0.1) * 1e6));
        }
        if (boot_now() >= deadline)
            return fail(bs, BRAID_ERR_TIMEOUT,
                        "bootstrap: rank %d could not connect to root %s within %g s (last "
                        "error: %s)",
                        bs->rank, bs->root, bs->timeout_s, strerror(last));
        backoff = fmin(backoff * 2, 0.5);
    }
}

/* The root closed the connection before any reply to the hello (it closes connections beyond
 * its limit of waiting ones, and a wrong secret), or after its proven challenge but before the
 * ACK without a BOOT_MSG_FAIL (it closes handshakes that wait too long, and some waiting for a
 * proof when crowded): forgets the error and waits a backoff to reconnect (0; a fresh hello
 * and nonce), or, at the deadline, fails naming what it may mean. */
static braid_result_t join_again(braid_bootstrap_t *bs, double deadline)
{
    close(bs->fd);
    bs->fd = -1;
    bs->dropped = bs->replied = bs->proven = 0;
    bs->err = 0;
    double until =
        fmin(boot_now() + fmin(0.01 * (1 << (bs->drops < 6 ? bs->drops : 6)), 0.5), deadline);
    bs->drops++;
    while (boot_now() < until) {
        if (aborted(bs)) return fail(bs, BRAID_ERR_ABORTED, "bootstrap: rank %d aborted", bs->rank);
        usleep((useconds_t)(fmin(until - boot_now(), 0.1) * 1e6) + 1);
    }
    if (boot_now() < deadline) return BRAID_SUCCESS;
    return fail(bs, BRAID_ERR_REMOTE,
                "bootstrap: rank %d could not join: root %s closed the connection %d time(s) "
                "without answering the hello within %g s (it drops a hello with a wrong job "
                "secret or from another braid version, and connections beyond those it lets wait "
                "for a hello; see its log)",
                bs->rank, bs->root, bs->drops, bs->timeout_s);
}

braid_result_t braid_boot_init(braid_bootstrap_t **bs_p, const braid_boot_addr_t *root, int rank,
                               int nranks, double timeout_s, const volatile int *abort_flag)
{
    if (!bs_p || !root)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "bootstrap: bs_p/root is NULL");
    if (nranks < 1 || nranks > BOOT_MAX_NRANKS)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "bootstrap: nranks %d out of 1..%d", nranks,
                               BOOT_MAX_NRANKS);
    if (rank < 0 || rank >= nranks)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "bootstrap: rank %d out of 0..%d", rank,
                               nranks - 1);
    if (root->addr.ss_family != AF_INET && root->addr.ss_family != AF_INET6)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "bootstrap: root address family %d",
                               root->addr.ss_family);
    braid_bootstrap_t *bs = calloc(1, sizeof(*bs));
    if (!bs) return braid_set_error(BRAID_ERR_NOMEM, "bootstrap: out of memory");
    bs->fd = -1;
    bs->rank = rank;
    bs->nranks = nranks;
    bs->timeout_s = timeout_s;
    bs->abort_flag = abort_flag;
    braid_boot_addr_str(&root->addr, bs->root, sizeof(bs->root));
    bs->id = *root;
    double deadline = deadline_after(timeout_s);
    braid_result_t res;
again:
    BRAID_CHECK_GOTO(connect_root(bs, root, deadline), res, out);

    braid_boot_hello_t h = {
        .magic = BOOT_HELLO_MAGIC, .version = BOOT_VERSION, .rank = rank, .nranks = nranks};
    BRAID_CHECK_GOTO(braid_boot_random_secret(h.nonce), res, out);
    uint8_t hello[BRAID_BOOT_HELLO_BYTES];
    braid_boot_hello_pack(&h, hello);
    BRAID_CHECK_GOTO(send_all(bs, hello, sizeof(hello), deadline, 1), res, out);
    BRAID_CHECK_GOTO(authenticate(bs, root->secret, hello, deadline), res, out);
    if (bs->reserve_err) { /* the root learns why this rank cannot go on, and fails the job */
        char text[256];
        snprintf(text, sizeof(text), "bootstrap: rank %d: socket failed: %s%s", rank,
                 strerror(bs->reserve_err), braid_errno_hint(bs->reserve_err));
        braid_boot_report_code(bs, BRAID_ERR_SYSTEM, text);
        res = fail(bs, BRAID_ERR_SYSTEM, "%s", text);
        goto out;
    }
    char what[64];
    snprintf(what, sizeof(what), "all %d ranks to join", nranks);
    BRAID_CHECK_GOTO(recv_reply(bs, BOOT_MSG_ACK, 0, NULL, deadline, what), res, out);
    bs->joined = 1;
    braid_debug(BOOT, "rank %d of %d joined the bootstrap at %s", rank, nranks, bs->root);
    *bs_p = bs;
    return BRAID_SUCCESS;
out:
    if (bs->dropped && !bs->reserve_err) {
        res = join_again(bs, deadline);
        if (res == BRAID_SUCCESS) goto again;
    }
    if (bs->reserve_err) {
        close(bs->fd);
        bs->fd = -1;
        braid_fd_reserve_restore();
    }
    braid_boot_close(bs);
    return res;
}

static braid_result_t allgather(braid_bootstrap_t *bs, const void *mine, void *all, size_t bytes,
                                const char *name)
{
    BRAID_CHECK(check_async(bs));
    if (aborted(bs)) return fail(bs, BRAID_ERR_ABORTED, "bootstrap: rank %d aborted", bs->rank);
    double deadline = deadline_after(bs->timeout_s);
    uint8_t hdr[BOOT_HDR_BYTES];
    boot_hdr_pack(hdr, BOOT_MSG_ALLGATHER, bs->seq, bytes);
    BRAID_CHECK(send_all(bs, hdr, sizeof(hdr), deadline, 1));
    BRAID_CHECK(send_all(bs, mine, bytes, deadline, 1));
    char what[96];
    snprintf(what, sizeof(what), "the other ranks to reach bootstrap %s #%u", name, bs->seq);
    BRAID_CHECK(recv_reply(bs, BOOT_MSG_RESULT, (uint64_t)bytes * (uint64_t)bs->nranks, all,
                           deadline, what));
    bs->seq++;
    return BRAID_SUCCESS;
}

braid_result_t braid_boot_allgather(braid_bootstrap_t *bs, const void *mine, void *all,
                                    size_t bytes)
{
    if (!bs) return braid_set_error(BRAID_ERR_INVALID_ARG, "bootstrap allgather: bs is NULL");
    if (bytes && (!mine || !all))
        return braid_set_error(BRAID_ERR_INVALID_ARG, "bootstrap allgather: %s is NULL",
                               mine ? "all" : "mine");
    if (bytes > BOOT_MAX_TOTAL / (uint64_t)bs->nranks)
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "bootstrap allgather: %zu bytes x %d ranks exceeds the %llu MiB "
                               "limit",
                               bytes, bs->nranks, (unsigned long long)(BOOT_MAX_TOTAL >> 20));
    return allgather(bs, mine, all, bytes, "allgather");
}

braid_result_t braid_boot_barrier(braid_bootstrap_t *bs)
{
    if (!bs) return braid_set_error(BRAID_ERR_INVALID_ARG, "bootstrap barrier: bs is NULL");
    return allgather(bs, NULL, NULL, 0, "barrier");
}

void braid_boot_report_error(braid_bootstrap_t *bs, const char *msg)
{
    braid_boot_report_code(bs, BRAID_ERR_REMOTE, msg);
}

void braid_boot_report_code(braid_bootstrap_t *bs, braid_result_t code, const char *msg)
{
    if (!bs || bs->fd < 0) return;
    char text[BOOT_MAX_TEXT];
    snprintf(text, sizeof(text), "%s", msg ? msg : "(no message)");
    size_t n = strlen(text);
    uint8_t hdr[BOOT_HDR_BYTES];
    boot_hdr_pack(hdr, BOOT_MSG_ERROR, (uint32_t)(code < 0 ? code : BRAID_ERR_REMOTE), n);
    /* Keep the sticky error and the caller's last-error message as they are. */
    braid_result_t saved = bs->err;
    char savedmsg[sizeof(bs->errmsg)];
    memcpy(savedmsg, bs->errmsg, sizeof(savedmsg));
    double deadline = boot_now() + 2.0;
    bs->quiet = 1;
    if (send_all(bs, hdr, sizeof(hdr), deadline, 0) == 0) send_all(bs, text, n, deadline, 0);
    bs->quiet = 0;
    bs->err = saved;
    memcpy(bs->errmsg, savedmsg, sizeof(savedmsg));
    braid_debug(BOOT, "rank %d reported to the bootstrap root: %s", bs->rank, text);
}

braid_result_t braid_boot_poll_error(braid_bootstrap_t *bs)
{
    if (!bs) return braid_set_error(BRAID_ERR_INVALID_ARG, "bootstrap poll_error: bs is NULL");
    return check_async(bs);
}

void braid_boot_close(braid_bootstrap_t *bs)
{
    if (!bs) return;
    if (bs->fd >= 0) close(bs->fd);
    free(bs);
}
