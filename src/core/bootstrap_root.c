/* The bootstrap root service: one thread per job (joined when it ends, or at exit), one poll() loop
 * over the listener, the connections that have not sent their hello yet, and one connection per
 * rank. All sockets are non-blocking; nothing a peer does (or fails to do) blocks the loop.
 *
 * Life of a job: connections authenticate with the hello handshake (bootstrap.c,
 * "Authentication": hello, the root's challenge with its proof, the client's proof; a wrong
 * proof/magic, garbage or no proof within 5 s: closed and logged); the first admitted hello
 * fixes nranks; when all ranks joined the root sends ACK to all. Then rounds of allgather
 * (barrier = 0 bytes): rank blobs are read straight into the round's result buffer, which,
 * once complete, is queued (refcounted) to every rank. Any failure (mismatch, a rank that closes
 * while others wait, an error report, a timeout) is sent to every rank as BOOT_MSG_FAIL, after
 * which the service only answers with that failure until its ranks closed (or timeout_s passed),
 * then exits. A service that nobody joined within timeout_s, or that braid_boot_root_stop
 * stopped, exits too.
 *
 * At most unauth_cap connections wait in the handshake; while that many do, the listener is not
 * polled (newer connections wait in the kernel's backlog) and make_room closes the oldest that
 * waited CROWD_MIN_AGE_S (hello-less ones before challenged ones), so strangers can neither lock
 * the ranks out nor use up the process's descriptors. Sockets, accept failures, the cap: in
 * bootstrap_sock.c. */
#include "core/bootstrap.h"
#include "core/bootstrap_threads.h"
#include "core/bootstrap_wire.h"
#include "core/log.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define HELLO_TIMEOUT_S 5.0
#define MAX_UNAUTH 256 /* connections that have not sent their hello yet */
/* A connection without a hello younger than this is never closed to make room: a rank's hello
 * is in the socket when its connect returns, and gets read. */
#define CROWD_MIN_AGE_S 1.0

/* A message queued to one or more connections; data holds header + payload. */
typedef struct {
    int refs;
    size_t len;
    uint8_t data[];
} msg_t;

typedef struct out {
    msg_t *m;
    size_t off;
    struct out *next;
} out_t;

enum { ROLE_UNAUTH, ROLE_RANK, ROLE_DOOMED }; /* doomed: gets the failure, then closes */

typedef struct {
    int fd, role, rank, shut;
    double hello_deadline;
    char peer[96];
    /* The handshake (bootstrap.c, "Authentication"): the hello, then the client's proof. */
    uint8_t hello[BRAID_BOOT_HELLO_BYTES + BOOT_HDR_BYTES + BOOT_MAC_BYTES];
    size_t hello_got;
    int challenged;                   /* the hello parsed and the challenge is queued */
    braid_boot_hello_t h;             /* the parsed hello */
    uint8_t nonce[BRAID_NONCE_BYTES]; /* Nr, drawn for this connection */
    uint8_t hdr[BOOT_HDR_BYTES];
    size_t hdr_got;
    int in_payload;
    uint32_t in_type;
    int32_t in_code; /* BOOT_MSG_ERROR: the code the reporter asks for (0: REMOTE) */
    uint8_t *in_dst; /* into the round buffer or in_text */
    size_t in_need, in_got;
    char *in_text;
    out_t *out, **out_tail;
} conn_t;

typedef struct {
    int lfd, port;
    double timeout_s, hello_timeout_s;
    int unauth_cap;    /* connections without a hello that may wait (bootstrap_sock.c) */
    int crowd_dropped; /* closed to make room since the last warning (one per 10 s) */
    double crowd_warned;
    double accept_paused_until; /* after EMFILE and the like, so the loop does not spin */
    atomic_int *done;           /* set when the thread ends (see reap_locked) */
    int accept_err;             /* errno of the last failed accept (0: none) */
    int accept_fails;           /* failed accepts since the last one that worked */
    double accept_failing_since;
    uint8_t secret[BRAID_SECRET_BYTES];
    char where[96];
    conn_t **conns; /* every open connection */
    int nconns, capconns, nunauth;
    /* the job, once the first hello arrived */
    int nranks, first_rank, njoined, nclosed, all_in;
    conn_t **ranks; /* open connection of each rank, or NULL */
    uint8_t *joined;
    /* the current allgather round */
    msg_t *round;
    size_t round_bytes;
    uint32_t round_seq;
    int round_count, round_first;
    uint8_t *contributed;
    double last_progress;
    int stale; /* nobody joined within timeout_s */
    /* failure */
    int failed;
    double failed_at;
    msg_t *fail_msg;
    braid_boot_root_t *handle; /* or NULL */
} root_t;

static msg_t *msg_new(size_t payload)
{
    msg_t *m = malloc(sizeof(msg_t) + BOOT_HDR_BYTES + payload);
    if (!m) return NULL;
    m->refs = 1;
    m->len = BOOT_HDR_BYTES + payload;
    return m;
}

static void msg_unref(msg_t *m)
{
    if (m && --m->refs == 0) free(m);
}

static void enqueue(conn_t *c, msg_t *m)
{
    out_t *o = malloc(sizeof(*o));
    if (!o) {
        braid_warn(BOOT, "bootstrap root: out of memory queueing a message to %s", c->peer);
        return;
    }
    m->refs++;
    *o = (out_t){.m = m};
    *c->out_tail = o;
    c->out_tail = &o->next;
}

static void conn_free(conn_t *c)
{
    while (c->out) {
        out_t *o = c->out;
        c->out = o->next;
        msg_unref(o->m);
        free(o);
    }
    braid_boot_sock_close(c->fd);
    free(c->in_text);
    free(c);
}

/* Sends the failure to every rank connection (and doomed ones) and enters the failed state. */
static void root_fail(root_t *r, braid_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void root_fail(root_t *r, braid_result_t code, const char *fmt, ...)
{
    if (r->failed) return;
    char text[BOOT_MAX_TEXT];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    braid_warn(BOOT, "bootstrap root %s: %s", r->where, text);
    size_t n = strlen(text);
    r->failed = 1;
    r->failed_at = boot_now();
    r->fail_msg = msg_new(n);
    if (r->fail_msg) {
        boot_hdr_pack(r->fail_msg->data, BOOT_MSG_FAIL, (uint32_t)code, n);
        memcpy(r->fail_msg->data + BOOT_HDR_BYTES, text, n);
    }
    msg_unref(r->round);
    r->round = NULL;
    for (int i = 0; i < r->nconns; i++) {
        conn_t *c = r->conns[i];
        if (c->role == ROLE_UNAUTH) continue;
        c->role = ROLE_DOOMED;
        if (r->fail_msg) enqueue(c, r->fail_msg);
    }
}

static void admit(root_t *r, conn_t *c, const braid_boot_hello_t *h)
{
    c->role = ROLE_DOOMED;
    if (r->failed) {
        /* Count late joiners so the service can exit once every rank heard the failure. */
        if (h->nranks == r->nranks && !r->joined[h->rank]) {
            r->joined[h->rank] = 1;
            r->njoined++;
        }
        if (r->fail_msg) enqueue(c, r->fail_msg);
        return;
    }
    if (r->nranks == 0) {
        r->ranks = calloc((size_t)h->nranks, sizeof(*r->ranks));
        r->joined = calloc((size_t)h->nranks, 1);
        r->contributed = calloc((size_t)h->nranks, 1);
        if (!r->ranks || !r->joined || !r->contributed) {
            root_fail(r, BRAID_ERR_NOMEM, "bootstrap root: out of memory for %d ranks", h->nranks);
            return;
        }
        r->nranks = h->nranks;
        r->first_rank = h->rank;
    }
    if (h->nranks != r->nranks) {
        root_fail(r, BRAID_ERR_INVALID_ARG,
                  "bootstrap: nranks mismatch: rank %d (%s) was started with nranks=%d but "
                  "rank %d with nranks=%d",
                  h->rank, c->peer, h->nranks, r->first_rank, r->nranks);
    } else if (r->joined[h->rank]) {
        root_fail(r, BRAID_ERR_INVALID_ARG,
                  "bootstrap: duplicate rank: two processes claim rank %d (the second from %s)",
                  h->rank, c->peer);
    } else {
        c->role = ROLE_RANK;
        c->rank = h->rank;
        r->ranks[h->rank] = c;
        r->joined[h->rank] = 1;
        r->njoined++;
        r->last_progress = boot_now();
        braid_debug(BOOT, "bootstrap root %s: rank %d joined from %s (%d of %d)", r->where, h->rank,
                    c->peer, r->njoined, r->nranks);
        if (r->njoined == r->nranks) {
            msg_t *ack = msg_new(0);
            if (!ack) {
                root_fail(r, BRAID_ERR_NOMEM, "bootstrap root: out of memory");
                return;
            }
            boot_hdr_pack(ack->data, BOOT_MSG_ACK, 0, 0);
            for (int i = 0; i < r->nranks; i++)
                enqueue(r->ranks[i], ack);
            msg_unref(ack);
            r->all_in = 1;
            braid_info(BOOT, "bootstrap root %s: all %d ranks joined", r->where, r->nranks);
        }
    }
}

/* Queues the challenge for a connection whose hello parsed. Returns -1 to close it. */
static int challenge(root_t *r, conn_t *c)
{
    msg_t *m = msg_new(BOOT_CHALLENGE_BYTES);
    if (!m || braid_boot_challenge(r->secret, r->port, c->hello, c->nonce, m->data) < 0) {
        braid_warn(BOOT, "bootstrap root %s: cannot challenge %s: %s", r->where, c->peer,
                   m ? braid_last_error() : "out of memory");
        braid_clear_error();
        msg_unref(m);
        return -1;
    }
    enqueue(c, m);
    msg_unref(m);
    c->challenged = 1;
    return 0;
}

/* Reads the hello, answers it with the challenge, reads and checks the client's proof; only
 * then is the rank admitted. Returns -1 to close the connection. */
static int read_hello(root_t *r, conn_t *c)
{
    for (;;) {
        ssize_t n = recv(c->fd, c->hello + c->hello_got, sizeof(c->hello) - c->hello_got, 0);
        if (n == 0) {
            braid_info(BOOT, "bootstrap root %s: connection from %s closed before its %s", r->where,
                       c->peer, c->challenged ? "proof" : "hello");
            return -1;
        }
        if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
        c->hello_got += (size_t)n;
        if (!c->challenged) {
            if (c->hello_got < BRAID_BOOT_HELLO_BYTES) continue;
            if (braid_boot_hello_parse(c->hello, BRAID_BOOT_HELLO_BYTES, &c->h) < 0) {
                braid_clear_error();
                uint32_t v = boot_get_u32(c->hello + 4);
                if (boot_get_u32(c->hello) == BOOT_HELLO_MAGIC && v != BOOT_VERSION) {
                    braid_boot_refuse_version(c->fd, r->where, c->peer, v);
                    return -1;
                }
                braid_warn(BOOT,
                           "rejected connection from %s: malformed hello (not a braid "
                           "bootstrap client, or another version)",
                           c->peer);
                return -1;
            }
            if (challenge(r, c) < 0) return -1;
        }
        if (c->hello_got < sizeof(c->hello)) continue;
        int bad = braid_boot_check_proof(r->secret, r->port, c->hello, c->nonce);
        if (bad) {
            braid_warn(BOOT, "rejected connection from %s: %s", c->peer,
                       bad == 1 ? "no proof after the hello" : "wrong job secret (wrong proof)");
            return -1;
        }
        r->nunauth--;
        admit(r, c, &c->h);
        return 0;
    }
}

static void finish_round(root_t *r)
{
    msg_t *m = r->round;
    boot_hdr_pack(m->data, BOOT_MSG_RESULT, r->round_seq,
                  (uint64_t)r->round_bytes * (uint64_t)r->nranks);
    for (int i = 0; i < r->nranks; i++)
        enqueue(r->ranks[i], m);
    msg_unref(m);
    r->round = NULL;
    r->round_count = 0;
    memset(r->contributed, 0, (size_t)r->nranks);
    r->round_seq++;
    r->last_progress = boot_now();
}

/* A complete header arrived from a rank: validates it and sets up the payload read. */
static void start_payload(root_t *r, conn_t *c)
{
    uint32_t type = boot_get_u32(c->hdr), aux = boot_get_u32(c->hdr + 4);
    uint64_t len = boot_get_u64(c->hdr + 8);
    int R = c->rank;
    c->in_type = type;
    c->in_got = 0;
    c->in_payload = 1;
    if (type == BOOT_MSG_ERROR) {
        c->in_code = (int32_t)aux;
        if (len > BOOT_MAX_TEXT) {
            root_fail(r, BRAID_ERR_REMOTE, "bootstrap: rank %d sent a %llu-byte error report", R,
                      (unsigned long long)len);
            return;
        }
        c->in_text = calloc(1, (size_t)len + 1);
        if (!c->in_text) {
            root_fail(r, BRAID_ERR_NOMEM, "bootstrap root: out of memory");
            return;
        }
        c->in_dst = (uint8_t *)c->in_text;
        c->in_need = (size_t)len;
        return;
    }
    if (type == BOOT_MSG_GIVEUP) {
        char list[512];
        c->in_need = 0;
        if (len) {
            root_fail(r, BRAID_ERR_REMOTE, "bootstrap: rank %d sent a malformed message", R);
        } else if (!r->all_in && aux == BOOT_GIVEUP_JOIN) {
            braid_boot_rank_list(list, sizeof(list), r->joined, r->nranks);
            root_fail(r, BRAID_ERR_TIMEOUT,
                      "bootstrap: rank %d timed out waiting for %s to join (%d of %d in)", R, list,
                      r->njoined, r->nranks);
        } else if (r->round && aux == r->round_seq) {
            braid_boot_rank_list(list, sizeof(list), r->contributed, r->nranks);
            root_fail(r, BRAID_ERR_TIMEOUT,
                      "bootstrap: rank %d timed out waiting for %s to reach bootstrap "
                      "collective #%u",
                      R, list, r->round_seq);
        }
        return; /* else the reply is already on its way */
    }
    if (type != BOOT_MSG_ALLGATHER) {
        root_fail(r, BRAID_ERR_REMOTE, "bootstrap: rank %d sent an unknown message type %u", R,
                  type);
        return;
    }
    if (!r->all_in) {
        root_fail(r, BRAID_ERR_REMOTE,
                  "bootstrap: rank %d started a bootstrap collective before all ranks joined", R);
        return;
    }
    if (aux != r->round_seq || r->contributed[R]) {
        root_fail(r, BRAID_ERR_MISMATCH,
                  "bootstrap: rank %d is at bootstrap collective #%u but the job is at #%u", R, aux,
                  r->round_seq);
        return;
    }
    if (len > BOOT_MAX_TOTAL / (uint64_t)r->nranks) {
        root_fail(r, BRAID_ERR_INVALID_ARG,
                  "bootstrap: rank %d sent a %llu-byte allgather block; x %d ranks exceeds "
                  "the %llu MiB limit",
                  R, (unsigned long long)len, r->nranks,
                  (unsigned long long)(BOOT_MAX_TOTAL >> 20));
        return;
    }
    if (!r->round) {
        for (int i = 0; i < r->nranks; i++)
            if (!r->ranks[i]) {
                root_fail(r, BRAID_ERR_REMOTE,
                          "bootstrap: rank %d closed its bootstrap connection before "
                          "bootstrap collective #%u",
                          i, r->round_seq);
                return;
            }
        r->round = msg_new((size_t)len * (size_t)r->nranks);
        if (!r->round) {
            root_fail(r, BRAID_ERR_NOMEM,
                      "bootstrap root: out of memory for a %llu-byte "
                      "allgather",
                      (unsigned long long)len * (unsigned long long)r->nranks);
            return;
        }
        r->round_bytes = (size_t)len;
        r->round_first = R;
    } else if (len != r->round_bytes) {
        root_fail(r, BRAID_ERR_MISMATCH,
                  "bootstrap allgather #%u: rank %d passed %llu bytes but rank %d passed %zu "
                  "bytes (all ranks must pass the same size)",
                  r->round_seq, R, (unsigned long long)len, r->round_first, r->round_bytes);
        return;
    }
    c->in_dst = r->round->data + BOOT_HDR_BYTES + (size_t)R * r->round_bytes;
    c->in_need = (size_t)len;
}

static void end_payload(root_t *r, conn_t *c)
{
    c->in_payload = 0;
    c->hdr_got = 0;
    if (c->in_type == BOOT_MSG_GIVEUP) return;
    if (c->in_type == BOOT_MSG_ERROR) {
        boot_sanitize(c->in_text);
        braid_result_t code = c->in_code < 0 && c->in_code >= BRAID_ERR_INVALID_USAGE
                                  ? (braid_result_t)c->in_code
                                  : BRAID_ERR_REMOTE;
        root_fail(r, code, "rank %d: %s", c->rank, c->in_text);
        free(c->in_text);
        c->in_text = NULL;
        return;
    }
    r->contributed[c->rank] = 1;
    r->round_count++;
    r->last_progress = boot_now();
    if (r->round_count == r->nranks) finish_round(r);
}

/* Reads what a rank sent. Returns -1 when the connection closed. */
static int read_rank(root_t *r, conn_t *c)
{
    for (;;) {
        ssize_t n;
        if (c->role == ROLE_DOOMED) { /* discard until EOF */
            uint8_t junk[4096];
            n = recv(c->fd, junk, sizeof(junk), 0);
        } else if (!c->in_payload) {
            n = recv(c->fd, c->hdr + c->hdr_got, sizeof(c->hdr) - c->hdr_got, 0);
            if (n > 0 && (c->hdr_got += (size_t)n) == sizeof(c->hdr)) {
                start_payload(r, c);
                if (c->role == ROLE_RANK && c->in_need == 0) end_payload(r, c);
            }
        } else {
            n = recv(c->fd, c->in_dst + c->in_got, c->in_need - c->in_got, 0);
            if (n > 0 && (c->in_got += (size_t)n) == c->in_need) end_payload(r, c);
        }
        if (n == 0) return -1;
        if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
    }
}

/* Writes queued messages. Returns -1 when the connection is broken. */
static int write_conn(conn_t *c)
{
    while (c->out) {
        out_t *o = c->out;
        ssize_t n = send(c->fd, o->m->data + o->off, o->m->len - o->off, MSG_NOSIGNAL);
        if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
        o->off += (size_t)n;
        if (o->off < o->m->len) continue;
        c->out = o->next;
        if (!c->out) c->out_tail = &c->out;
        msg_unref(o->m);
        free(o);
    }
    return 0;
}

static void drop_conn(root_t *r, int i)
{
    conn_t *c = r->conns[i];
    if (c->role == ROLE_UNAUTH) r->nunauth--;
    if (c->role == ROLE_RANK) {
        r->ranks[c->rank] = NULL;
        r->nclosed++;
        if (!r->all_in) {
            char list[512];
            braid_boot_rank_list(list, sizeof(list), r->joined, r->nranks);
            root_fail(r, BRAID_ERR_REMOTE,
                      "bootstrap: rank %d closed its bootstrap connection before all ranks "
                      "joined (%s had not joined)",
                      c->rank, list);
        } else if (r->round)
            root_fail(r, BRAID_ERR_REMOTE,
                      "bootstrap: rank %d closed its bootstrap connection during bootstrap "
                      "collective #%u",
                      c->rank, r->round_seq);
    } else if (c->role == ROLE_DOOMED && c->rank >= 0 && r->ranks && r->ranks[c->rank] == c) {
        r->ranks[c->rank] = NULL;
    }
    conn_free(c);
    r->conns[i] = r->conns[--r->nconns];
}

/* Accepts while fewer than unauth_cap connections wait for their hello. */
static void accept_conns(root_t *r)
{
    while (r->nunauth < r->unauth_cap) {
        struct sockaddr_storage peer;
        socklen_t pl = sizeof(peer);
        int fd = braid_boot_sock_accept(r->lfd, &peer, &pl);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                char why[256];
                r->accept_err = errno;
                braid_boot_accept_why(r->accept_err, why, sizeof(why));
                if (r->accept_fails++ == 0) {
                    r->accept_failing_since = boot_now();
                    braid_boot_accept_record(r->secret, r->port, r->accept_err,
                                             r->accept_failing_since);
                    braid_warn(BOOT, "bootstrap root %s: accept failed: %s", r->where, why);
                }
                r->accept_paused_until = boot_now() + 0.1;
            }
            return;
        }
        if (r->accept_fails) braid_boot_accept_record(r->secret, r->port, 0, 0);
        r->accept_fails = 0;
        conn_t *c = NULL;
        if (r->nconns == r->capconns) {
            int cap = r->capconns ? 2 * r->capconns : 16;
            conn_t **nc = realloc(r->conns, (size_t)cap * sizeof(*nc));
            if (nc) {
                r->conns = nc;
                r->capconns = cap;
            }
        }
        if (r->nconns < r->capconns) c = calloc(1, sizeof(*c));
        if (!c) {
            braid_boot_sock_close(fd);
            continue;
        }
        c->fd = fd;
        c->rank = -1;
        c->role = ROLE_UNAUTH;
        c->out_tail = &c->out;
        c->hello_deadline = boot_now() + r->hello_timeout_s;
        braid_boot_addr_str(&peer, c->peer, sizeof(c->peer));
        r->conns[r->nconns++] = c;
        r->nunauth++;
    }
}

/* While unauth_cap connections wait in the handshake, closes one that waited CROWD_MIN_AGE_S
 * (accepted at hello_deadline - hello_timeout_s), until one more fits: the oldest that sent no
 * hello, else the oldest waiting for its proof (more likely a rank, which then reconnects). */
static void make_room(root_t *r, double now)
{
    r->unauth_cap = braid_boot_sock_unauth_cap(MAX_UNAUTH);
    while (r->nunauth >= r->unauth_cap) {
        int pick = -1;
        for (int i = 0; i < r->nconns; i++) {
            conn_t *c = r->conns[i], *p = pick < 0 ? NULL : r->conns[pick];
            if (c->role != ROLE_UNAUTH ||
                now - c->hello_deadline + r->hello_timeout_s < CROWD_MIN_AGE_S)
                continue;
            if (!p || c->challenged < p->challenged ||
                (c->challenged == p->challenged && c->hello_deadline < p->hello_deadline))
                pick = i;
        }
        if (pick < 0) break;
        drop_conn(r, pick);
        r->crowd_dropped++;
    }
    if (r->crowd_dropped && now - r->crowd_warned >= 10.0) {
        braid_warn(BOOT,
                   "bootstrap root %s: closed %d connection(s) in the handshake (no hello, or no "
                   "proof) after %g s while %d others waited (too many connections in it)",
                   r->where, r->crowd_dropped, CROWD_MIN_AGE_S, r->nunauth);
        r->crowd_dropped = 0;
        r->crowd_warned = now;
    }
}

static void check_timeouts(root_t *r, double now)
{
    for (int i = 0; i < r->nconns; i++) {
        conn_t *c = r->conns[i];
        if (c->role == ROLE_UNAUTH && now >= c->hello_deadline) {
            braid_warn(BOOT, "rejected connection from %s: no %s within %g s", c->peer,
                       c->challenged ? "proof after the challenge" : "hello", r->hello_timeout_s);
            drop_conn(r, i--);
        }
    }
    make_room(r, now);
    char list[512];
    /* Ranks still missing while the listener cannot accept (out of fds): fail now with that
     * cause rather than let them time out "waiting for ranks to join". */
    if (!r->failed && r->accept_fails > 0 && now - r->accept_failing_since >= 1.0 && !r->all_in) {
        char why[256];
        braid_boot_accept_why(r->accept_err, why, sizeof(why));
        if (r->nranks)
            braid_boot_rank_list(list, sizeof(list), r->joined, r->nranks);
        else
            snprintf(list, sizeof(list), "every rank");
        root_fail(r, BRAID_ERR_SYSTEM,
                  "bootstrap root %s cannot accept connections (%d accepts failed in %.1f s): %s; "
                  "%s still to join",
                  r->where, r->accept_fails, now - r->accept_failing_since, why, list);
        return;
    }
    if (r->failed || r->timeout_s <= 0 || now - r->last_progress < r->timeout_s) return;
    if (r->njoined == 0) {
        /* Nobody joined: the id was never used (a split that failed, a program that gave
         * up). There is no rank to tell; finished() ends the service. The hello deadline on
         * top: a connection accepted at the end still gets its hello read (and a root that
         * just closed silent strangers still serves). */
        if (now - r->last_progress >= r->timeout_s + r->hello_timeout_s && !r->stale) {
            braid_info(BOOT, "bootstrap root %s: no rank joined within %g s; exiting", r->where,
                       r->timeout_s + r->hello_timeout_s);
            r->stale = 1;
        }
        return;
    }
    if (r->nranks && !r->all_in && r->njoined > 0) {
        braid_boot_rank_list(list, sizeof(list), r->joined, r->nranks);
        root_fail(r, BRAID_ERR_TIMEOUT, "bootstrap: waited %g s for %s to join (%d of %d in)",
                  r->timeout_s, list, r->njoined, r->nranks);
    } else if (r->round) {
        braid_boot_rank_list(list, sizeof(list), r->contributed, r->nranks);
        root_fail(r, BRAID_ERR_TIMEOUT,
                  "bootstrap: waited %g s for %s to reach bootstrap collective #%u", r->timeout_s,
                  list, r->round_seq);
    }
}

/* True when the service is done. */
static int finished(root_t *r, double now)
{
    int open = 0;
    for (int i = 0; i < r->nconns; i++)
        open += r->conns[i]->role != ROLE_UNAUTH;
    if (r->stale || (r->handle && braid_boot_handle_stopped(r->handle))) return 1;
    if (!r->failed) return r->all_in && open == 0;
    double linger = r->timeout_s > 0 ? r->timeout_s : 60.0;
    if (now - r->failed_at >= linger) return 1;
    return open == 0 && r->nranks > 0 && r->njoined == r->nranks;
}

static void *root_main(void *arg)
{
    root_t *r = arg;
    struct pollfd *pfds = NULL;
    int cap = 0;
    braid_debug(BOOT, "bootstrap root listening on %s", r->where);
    for (;;) {
        double now = boot_now();
        check_timeouts(r, now);
        if (finished(r, now) || braid_boot_roots_stopping()) break;
        if (r->handle) {
            int quiet = !r->round && (r->all_in || r->failed);
            for (int i = 0; i < r->nconns && quiet; i++)
                quiet = !r->conns[i]->out;
            braid_boot_handle_set(r->handle, 0, quiet);
        }
        if (cap < r->nconns + 1) {
            struct pollfd *np = realloc(pfds, (size_t)(r->nconns + 16) * sizeof(*np));
            if (!np) {
                usleep(10000);
                continue;
            }
            pfds = np;
            cap = r->nconns + 16;
        }
        /* Not while unauth_cap connections wait for a hello (make_room frees one). */
        short lev = now >= r->accept_paused_until && r->nunauth < r->unauth_cap ? POLLIN : 0;
        pfds[0] = (struct pollfd){.fd = r->lfd, .events = lev};
        for (int i = 0; i < r->nconns; i++) {
            conn_t *c = r->conns[i];
            /* Doomed connections: flush the failure, then half-close so the client reads it
             * before EOF, then wait for the client's EOF. */
            if (c->role == ROLE_DOOMED && !c->out && !c->shut) {
                shutdown(c->fd, SHUT_WR);
                c->shut = 1;
            }
            pfds[i + 1] = (struct pollfd){.fd = c->fd, .events = POLLIN | (c->out ? POLLOUT : 0)};
        }
        int n = poll(pfds, (nfds_t)r->nconns + 1, 100);
        if (n <= 0) continue;
        /* Connections are only removed (swap with the last) inside this loop, and only the
         * ones at or after i; iterate downwards so each pfds entry matches its connection. */
        int nc = r->nconns;
        for (int i = nc - 1; i >= 0; i--) {
            short ev = pfds[i + 1].revents;
            if (!ev || i >= r->nconns) continue;
            conn_t *c = r->conns[i];
            int bad = 0;
            if (ev & (POLLIN | POLLHUP | POLLERR))
                bad = c->role == ROLE_UNAUTH ? read_hello(r, c) : read_rank(r, c);
            if (!bad && c->out && (ev & (POLLOUT | POLLERR))) bad = write_conn(c);
            if (bad) drop_conn(r, i);
        }
        if (pfds[0].revents) accept_conns(r);
    }
    braid_debug(BOOT, "bootstrap root %s exits", r->where);
    while (r->nconns)
        drop_conn(r, r->nconns - 1);
    free(pfds);
    free(r->conns);
    free(r->ranks);
    free(r->joined);
    free(r->contributed);
    msg_unref(r->round);
    msg_unref(r->fail_msg);
    braid_boot_sock_close(r->lfd);
    if (r->accept_fails) braid_boot_accept_record(r->secret, r->port, 0, 0);
    if (r->handle) {
        braid_boot_handle_set(r->handle, 1, 1);
        braid_boot_handle_unref(r->handle);
    }
    atomic_int *done = r->done;
    free(r);
    braid_boot_thread_end(done);
    return NULL;
}

static braid_result_t root_start(braid_boot_addr_t *addr, double timeout_s, int every_address,
                                 braid_boot_root_t **root_p);

braid_result_t braid_boot_root_start(braid_boot_addr_t *addr, double timeout_s)
{
    return root_start(addr, timeout_s, 0, NULL);
}

braid_result_t braid_boot_root_start_handle(braid_boot_addr_t *addr, double timeout_s,
                                            braid_boot_root_t **root_p)
{
    return root_start(addr, timeout_s, 0, root_p);
}

braid_result_t braid_boot_root_start_every(braid_boot_addr_t *addr, double timeout_s,
                                           braid_boot_root_t **root_p)
{
    return root_start(addr, timeout_s, 1, root_p);
}

static braid_result_t root_start(braid_boot_addr_t *addr, double timeout_s, int every_address,
                                 braid_boot_root_t **root_p)
{
    if (!addr || (addr->addr.ss_family != AF_INET && addr->addr.ss_family != AF_INET6))
        return braid_set_error(BRAID_ERR_INVALID_ARG, "bootstrap root: bad address");
    struct sockaddr_storage bound;
    int fd = braid_boot_sock_listen(addr, every_address && !addr->loopback_only, &bound);
    if (fd < 0) return BRAID_ERR_SYSTEM;
    uint16_t port = bound.ss_family == AF_INET ? ((struct sockaddr_in *)&bound)->sin_port
                                               : ((struct sockaddr_in6 *)&bound)->sin6_port;
    root_t *r = calloc(1, sizeof(*r));
    if (r && root_p && !(r->handle = braid_boot_handle_new())) {
        free(r);
        r = NULL;
    }
    if (!r) {
        braid_boot_sock_close(fd);
        return braid_set_error(BRAID_ERR_NOMEM, "bootstrap root: out of memory");
    }
    r->lfd = fd;
    r->port = ntohs(port);
    r->last_progress = boot_now(); /* for "nobody joined" */
    r->unauth_cap = braid_boot_sock_unauth_cap(MAX_UNAUTH);
    r->timeout_s = timeout_s;
    r->hello_timeout_s = timeout_s > 0 && timeout_s < HELLO_TIMEOUT_S ? timeout_s : HELLO_TIMEOUT_S;
    memcpy(r->secret, addr->secret, BRAID_SECRET_BYTES);
    braid_boot_addr_t a = *addr;
    if (a.addr.ss_family == AF_INET)
        ((struct sockaddr_in *)&a.addr)->sin_port = port;
    else
        ((struct sockaddr_in6 *)&a.addr)->sin6_port = port;
    braid_boot_addr_str(&a.addr, r->where, sizeof(r->where));
    braid_boot_root_t *handle = r->handle; /* r belongs to the thread once it runs */

    atomic_int *done = calloc(1, sizeof(*done));
    r->done = done;
    int rc = done ? braid_boot_thread_spawn(root_main, r, done) : ENOMEM;
    if (rc) {
        free(done);
        braid_boot_sock_close(fd);
        if (r->handle) {
            braid_boot_handle_unref(r->handle);
            braid_boot_handle_unref(r->handle);
        }
        free(r);
        return braid_set_error(BRAID_ERR_SYSTEM, "bootstrap root: pthread_create failed: %s",
                               strerror(rc));
    }
    *addr = a;
    if (root_p) *root_p = handle;
    return BRAID_SUCCESS;
}
