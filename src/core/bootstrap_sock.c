/* The bootstrap root services' sockets, process-wide (split from bootstrap_root.c, which has
 * the service loop):
 * - opening a root's listener: on the given address, or on every address (for rank 0 of an id
 *   from a root string, and when the address is not one of this host's);
 * - the descriptors of every live root (listeners and the connections they accepted), so that
 *   a forked child closes them: it has none of the service threads, and an inherited copy would
 *   keep a rank from seeing EOF when the root's process dies, and the port bound;
 * - how many connections without a hello a root lets wait (at most a quarter of the process's
 *   descriptor limit);
 * - the roots whose accept() fails (out of descriptors), one record per root, which the clients
 *   of this process that join that root check (braid_boot_root_accept_failing);
 * - the list of missing ranks a root's messages name (braid_boot_rank_list), and the answer to
 *   a hello of another protocol version (braid_boot_refuse_version). */
#include "core/bootstrap.h"
#include "core/bootstrap_threads.h"
#include "core/bootstrap_wire.h"
#include "core/log.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

/* Guards both tables; held across fork (the child gets them consistent). */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int *fds, nfds, capfds;

typedef struct accept_fail {
    uint8_t secret[BRAID_SECRET_BYTES];
    int port, err;
    double since;
    struct accept_fail *next;
} accept_fail_t;
static accept_fail_t *fails;

static void track_locked(int fd)
{
    if (nfds == capfds) {
        int cap = capfds ? 2 * capfds : 64;
        int *n = realloc(fds, (size_t)cap * sizeof(*n));
        if (!n) return; /* a forked child would keep this one: nothing worse */
        fds = n;
        capfds = cap;
    }
    fds[nfds++] = fd;
}

static void sock_prepare(void)
{
    pthread_mutex_lock(&mu);
}

static void sock_parent(void)
{
    pthread_mutex_unlock(&mu);
}

/* In the child: no root runs here; close what the parent's roots hold, forget their records. */
static void sock_child(void)
{
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    nfds = 0;
    while (fails) {
        accept_fail_t *f = fails;
        fails = f->next;
        free(f);
    }
    pthread_mutex_init(&mu, NULL);
}

static void sock_atfork(void)
{
    pthread_atfork(sock_prepare, sock_parent, sock_child);
}

/* socket() registered as a root's descriptor. */
static int root_socket(int family)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, sock_atfork);
    pthread_mutex_lock(&mu);
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int err = errno;
    if (fd >= 0) track_locked(fd);
    pthread_mutex_unlock(&mu);
    errno = err;
    return fd;
}

int braid_boot_sock_accept(int lfd, struct sockaddr_storage *peer_p, socklen_t *len_p)
{
    pthread_mutex_lock(&mu);
    int fd = accept4(lfd, (struct sockaddr *)peer_p, len_p, SOCK_CLOEXEC | SOCK_NONBLOCK);
    int err = errno;
    if (fd >= 0) track_locked(fd);
    pthread_mutex_unlock(&mu);
    errno = err;
    return fd;
}

void braid_boot_sock_close(int fd)
{
    if (fd < 0) return;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nfds; i++)
        if (fds[i] == fd) {
            fds[i] = fds[--nfds];
            break;
        }
    close(fd); /* under mu: a fork never sees the number closed but still listed */
    pthread_mutex_unlock(&mu);
}

static uint16_t *port_field(struct sockaddr_storage *a)
{
    return a->ss_family == AF_INET ? &((struct sockaddr_in *)a)->sin_port
                                   : &((struct sockaddr_in6 *)a)->sin6_port;
}

/* The wildcard address of family with port (network order). */
static socklen_t any_addr(int family, uint16_t port, struct sockaddr_storage *a)
{
    memset(a, 0, sizeof(*a));
    a->ss_family = (sa_family_t)family;
    *port_field(a) = port;
    if (family == AF_INET6) ((struct sockaddr_in6 *)a)->sin6_addr = in6addr_any;
    return family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
}

/* A listener bound to a (SO_REUSEADDR, backlog 1024; v6only 0 for [::]), or -1 with errno. */
static int listen_on(const struct sockaddr_storage *a, socklen_t len, int dual)
{
    int fd = root_socket(a->ss_family);
    if (fd < 0) return -1;
    int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (dual) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    if (bind(fd, (const struct sockaddr *)a, len) == 0 && listen(fd, 1024) == 0) return fd;
    int err = errno;
    braid_boot_sock_close(fd);
    errno = err;
    return -1;
}

int braid_boot_sock_listen(const braid_boot_addr_t *addr, int every_address,
                           struct sockaddr_storage *bound_p)
{
    char where[96];
    braid_boot_addr_str(&addr->addr, where, sizeof(where));
    uint16_t port = *port_field((struct sockaddr_storage *)&addr->addr);
    struct sockaddr_storage any;
    int fd = -1;
    if (every_address) {
        /* Dual-stack [::] where the host has IPv6, else 0.0.0.0: the ranks may resolve the
         * root's name to any address of this host, of either family. */
        fd = listen_on(&any, any_addr(AF_INET6, port, &any), 1);
        if (fd < 0 && errno != EADDRINUSE) fd = listen_on(&any, any_addr(AF_INET, port, &any), 0);
        if (fd >= 0)
            braid_info(BOOT, "bootstrap root for %s listens on every address of this host", where);
        /* The port is taken on some address of this host (another socket may use it on
         * another address without clashing with the one named): that address alone. */
        else if (errno == EADDRINUSE && (fd = listen_on(&addr->addr, addr->addrlen, 0)) >= 0)
            braid_info(BOOT,
                       "bootstrap root: port %u is in use on some address of this host; "
                       "listening on %s only",
                       (unsigned)ntohs(port), where);
    } else {
        fd = listen_on(&addr->addr, addr->addrlen, 0);
        if (fd < 0 && errno == EADDRNOTAVAIL && !addr->loopback_only) {
            /* Not an address of this host (NAT, virtual IP): the wildcard of its family. */
            braid_info(BOOT, "bootstrap root: %s is not local, listening on all addresses", where);
            fd = listen_on(&any, any_addr(addr->addr.ss_family, port, &any), 0);
        }
    }
    if (fd < 0) {
        int err = errno;
        braid_set_error(BRAID_ERR_SYSTEM, "bootstrap root: cannot listen on %s: %s", where,
                        strerror(err));
        return -1;
    }
    socklen_t bl = sizeof(*bound_p);
    getsockname(fd, (struct sockaddr *)bound_p, &bl);
    return fd;
}

int braid_boot_sock_unauth_cap(int most)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
        rl.rlim_cur / 4 >= (rlim_t)most)
        return most;
    return rl.rlim_cur >= 8 ? (int)(rl.rlim_cur / 4) : 1;
}

/* ---- accept failures, per root --------------------------------------------------------------
 */

void braid_boot_accept_why(int err, char *buf, size_t len)
{
    if (err == EMFILE || err == ENFILE) {
        struct rlimit rl = {0};
        getrlimit(RLIMIT_NOFILE, &rl);
        snprintf(buf, len,
                 "%s (%s: %s; raise the open-files limit, now %llu: ulimit -n, or "
                 "LimitNOFILE= in systemd)",
                 strerror(err), err == EMFILE ? "EMFILE" : "ENFILE",
                 err == EMFILE ? "this process is out of file descriptors"
                               : "the system is out of file descriptors",
                 (unsigned long long)rl.rlim_cur);
    } else {
        snprintf(buf, len, "%s", strerror(err));
    }
}

int braid_boot_addr_port(const struct sockaddr_storage *a)
{
    return ntohs(*port_field((struct sockaddr_storage *)a));
}

void braid_boot_accept_record(const uint8_t *secret, int port, int err, double since)
{
    pthread_mutex_lock(&mu);
    accept_fail_t **p = &fails;
    while (*p && !((*p)->port == port && !braid_secret_cmp((*p)->secret, secret)))
        p = &(*p)->next;
    if (!err && *p) {
        accept_fail_t *f = *p;
        *p = f->next;
        free(f);
    } else if (err && !*p && (*p = calloc(1, sizeof(**p)))) {
        memcpy((*p)->secret, secret, BRAID_SECRET_BYTES);
        (*p)->port = port;
    }
    if (err && *p) {
        (*p)->err = err;
        (*p)->since = since;
    }
    pthread_mutex_unlock(&mu);
}

int braid_boot_root_accept_failing(const braid_boot_addr_t *root, double min_s, char *why,
                                   size_t len)
{
    int err = 0, port = braid_boot_addr_port(&root->addr);
    double since = 0;
    pthread_mutex_lock(&mu);
    for (accept_fail_t *f = fails; f && !err; f = f->next)
        if (f->port == port && !braid_secret_cmp(f->secret, root->secret)) {
            err = f->err;
            since = f->since;
        }
    pthread_mutex_unlock(&mu);
    if (!err || boot_now() - since < min_s) return 0;
    braid_boot_accept_why(err, why, len);
    return 1;
}

/* Formats the ranks for which have[i] is 0: "rank 3" or "ranks 2,3". */
void braid_boot_rank_list(char *buf, size_t len, const uint8_t *have, int nranks)
{
    int count = 0, shown = 0;
    for (int i = 0; i < nranks; i++)
        count += !have[i];
    size_t o = (size_t)snprintf(buf, len, "%s ", count == 1 ? "rank" : "ranks");
    for (int i = 0; i < nranks && o < len; i++) {
        if (have[i]) continue;
        if (shown == 32) {
            snprintf(buf + o, len - o, ",... (%d more)", count - shown);
            return;
        }
        o += (size_t)snprintf(buf + o, len - o, "%s%d", shown++ ? "," : "", i);
    }
}

void braid_boot_refuse_version(int fd, const char *where, const char *peer, uint32_t version)
{
    braid_warn(BOOT, "rejected connection from %s: bootstrap protocol version %u, want %u", peer,
               version, BOOT_VERSION);
    uint8_t msg[BOOT_HDR_BYTES + 256];
    char *text = (char *)msg + BOOT_HDR_BYTES;
    int n = snprintf(text, 256,
                     "bootstrap root %s speaks bootstrap protocol version %u, this rank version "
                     "%u: the ranks and the root must run the same braid release",
                     where, BOOT_VERSION, version);
    size_t len = n < 0 ? 0 : n > 255 ? 255 : (size_t)n;
    boot_hdr_pack(msg, BOOT_MSG_FAIL, (uint32_t)BRAID_ERR_UNSUPPORTED, len);
    if (send(fd, msg, BOOT_HDR_BYTES + len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
        /* the connection is closed either way */
    }
}
