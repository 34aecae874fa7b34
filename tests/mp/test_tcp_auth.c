/* The tcp data plane's hello (suite "tcp_auth"; braid_tcp_hello_mac in src/transport/tcp.h): the
 * job secret never goes on the wire, and a hello is valid only for the one receive connection
 * whose nonce its MAC covers, so a recorded or relayed hello is refused anywhere else. */
#include "core/bootstrap.h"
#include "core/comm.h"
#include "data.h"
#include "mp.h"
#include "proc.h"
#include "transport/tcp.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define AUTH_CHANNEL 41 /* a channel no communicator uses */

static int contains_secret(const uint8_t *buf, size_t len, const uint8_t *secret)
{
    return memmem(buf, len, secret, BRAID_SECRET_BYTES / 2) ||
           memmem(buf, len, secret + BRAID_SECRET_BYTES / 2, BRAID_SECRET_BYTES / 2);
}

/* Each rank sets up a receive connection from itself on its own listener, and lets its real
 * connector (send_connect) talk to a recording listener whose info blob names that
 * connection's fields but another nonce. What the recorder receives holds no part of the
 * secret; replayed to the real listener, and a hello whose MAC was made with a wrong secret,
 * are refused; then the real connector with the real info blob gets through. */
static int recorded_hello(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    const uint8_t *secret = comm->boot_addr.secret;
    uint8_t info[BRAID_TCP_INFO_BYTES];
    size_t ilen = sizeof(info);
    braid_conn_t *rc = NULL, *fc = NULL, *sc = NULL;
    MP_OK(rank, braid_transport_tcp.recv_setup(comm, rank, AUTH_CHANNEL, &rc, info, &ilen));
    braid_tcp_info_t in;
    MP_OK(rank, braid_tcp_info_parse(info, ilen, &in));
    struct sockaddr_storage la;
    socklen_t ll;
    MP_OK(rank, braid_tcp_listen_addr(comm, &la, &ll));

    /* The recorder, on loopback. */
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in ra = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t rl = sizeof(ra);
    MP_CHECK(rank, lfd >= 0 && bind(lfd, (struct sockaddr *)&ra, sizeof(ra)) == 0, "bind");
    MP_CHECK(rank, listen(lfd, 16) == 0, "listen");
    getsockname(lfd, (struct sockaddr *)&ra, &rl);
    braid_tcp_info_t fake = in;
    memset(&fake.addr, 0, sizeof(fake.addr));
    memcpy(&fake.addr, &ra, sizeof(ra));
    fake.addrlen = sizeof(ra);
    MP_OK(rank, braid_boot_random_secret(fake.nonce));
    uint8_t finfo[BRAID_TCP_INFO_BYTES];
    braid_tcp_info_pack(&fake, finfo);
    MP_OK(rank,
          braid_transport_tcp.send_connect(comm, rank, AUTH_CHANNEL, finfo, sizeof(finfo), &fc));
    int nsocks = (int)in.nsocks, afd[BRAID_TCP_MAX_SOCKS];
    uint8_t rec[BRAID_TCP_MAX_SOCKS][BRAID_TCP_HELLO_BYTES + 64];
    for (int i = 0; i < nsocks; i++) {
        afd[i] = accept(lfd, NULL, NULL);
        MP_CHECK(rank, afd[i] >= 0, "accept");
        size_t got = 0;
        struct pollfd p = {.fd = afd[i], .events = POLLIN};
        while (got < sizeof(rec[i]) && poll(&p, 1, 300) == 1) {
            ssize_t r = recv(afd[i], rec[i] + got, sizeof(rec[i]) - got, 0);
            if (r <= 0) break;
            got += (size_t)r;
        }
        MP_CHECK(rank, got == BRAID_TCP_HELLO_BYTES, "the recorder got %zu bytes, want %d", got,
                 BRAID_TCP_HELLO_BYTES);
        MP_CHECK(rank, !contains_secret(rec[i], got, secret), "the secret is in the hello");
    }

    /* Replays, and a MAC made with a wrong secret, to the real listener. */
    braid_tcp_hello_t h;
    for (int i = 0; i < nsocks; i++) {
        MP_OK(rank, braid_tcp_hello_parse(rec[i], BRAID_TCP_HELLO_BYTES, &h));
        MP_CHECK(rank, h.rank == rank && h.channel == AUTH_CHANNEL && h.nsocks == nsocks,
                 "recorded hello fields");
        MP_CHECK(rank, proc_listener_rejects(&la, ll, rec[i], BRAID_TCP_HELLO_BYTES),
                 "a hello recorded for another connection was accepted (socket %d)", i);
    }
    uint8_t wrong[BRAID_SECRET_BYTES], forged[BRAID_TCP_HELLO_BYTES];
    memcpy(wrong, secret, sizeof(wrong));
    wrong[3] ^= 0x10;
    memcpy(forged, rec[0], sizeof(forged));
    braid_tcp_hello_mac(wrong, in.nonce, rank, forged, forged + BRAID_TCP_HELLO_MACED);
    MP_CHECK(rank, proc_listener_rejects(&la, ll, forged, sizeof(forged)),
             "a hello with a MAC under a wrong secret was accepted");
    /* Control: the recorded hello is genuine, bound to the recorder's nonce. */
    uint8_t mac[BRAID_SHA256_BYTES];
    braid_tcp_hello_mac(secret, fake.nonce, rank, rec[0], mac);
    MP_CHECK(rank, !memcmp(mac, rec[0] + BRAID_TCP_HELLO_MACED, sizeof(mac)),
             "the recorded MAC is not the one for the recorder's nonce");

    /* The genuine connector gets through: the refused hellos took no socket slot. */
    MP_OK(rank, braid_transport_tcp.send_connect(comm, rank, AUTH_CHANNEL, info, ilen, &sc));
    MP_OK(rank, braid_transport_tcp.recv_accept(rc));
    sc->ops->close(sc);
    fc->ops->close(fc);
    rc->ops->close(rc);
    for (int i = 0; i < nsocks; i++)
        close(afd[i]);
    close(lfd);
    MP_OK(rank, braid_barrier(comm));
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt += 5)
        if (data_check_allreduce(comm, rank, n, dt, BRAID_SUM, 4099, 0, 0, 13 + dt, "tcp"))
            return 1;
    return 0;
}

Test(tcp_auth, hello_carries_no_secret_and_a_recorded_one_is_refused, .timeout = 120)
{
    setenv("BRAID_TRANSPORT", "tcp", 1);
    cr_assert_eq(mp_run(2, recorded_hello, NULL, 90), 0, "see stderr");
}
