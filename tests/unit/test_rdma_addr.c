/* The RDMA listener's address on a GID's network interface (src/transport/rdma_dev.c,
 * braid_rdma_pick_ifaddr): IPv4 first, else IPv6 but never link-local (the info blob carries
 * no scope id, so a peer could not reach it). A fake getifaddrs() list; no device needed. */
#include <criterion/criterion.h>

#if BRAID_HAVE_VERBS
#include "transport/rdma_impl.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <string.h>

typedef struct {
    struct ifaddrs ifa[4];
    struct sockaddr_storage sa[4];
} fake_t;

static void add(fake_t *f, int i, const char *name, int family, const char *ip)
{
    memset(&f->sa[i], 0, sizeof(f->sa[i]));
    if (family == AF_INET) {
        struct sockaddr_in *s = (struct sockaddr_in *)&f->sa[i];
        s->sin_family = AF_INET;
        cr_assert_eq(inet_pton(AF_INET, ip, &s->sin_addr), 1);
    } else {
        struct sockaddr_in6 *s = (struct sockaddr_in6 *)&f->sa[i];
        s->sin6_family = AF_INET6;
        cr_assert_eq(inet_pton(AF_INET6, ip, &s->sin6_addr), 1);
    }
    f->ifa[i] =
        (struct ifaddrs){.ifa_name = (char *)name, .ifa_addr = (struct sockaddr *)&f->sa[i]};
    if (i > 0) f->ifa[i - 1].ifa_next = &f->ifa[i];
}

static const char *picked(const fake_t *f, const char *name, char *buf)
{
    struct sockaddr_storage a;
    if (braid_rdma_pick_ifaddr(&f->ifa[0], name, &a)) return "none";
    if (a.ss_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)&a)->sin_addr, buf, INET6_ADDRSTRLEN);
    else
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&a)->sin6_addr, buf, INET6_ADDRSTRLEN);
    return buf;
}

Test(rdma, listener_address_of_an_interface_is_never_ipv6_link_local, .timeout = 10)
{
    char buf[INET6_ADDRSTRLEN];
    fake_t f;
    /* eth0: link-local first, then a global IPv6 address: the global one. */
    add(&f, 0, "eth0", AF_INET6, "fe80::1");
    add(&f, 1, "eth0", AF_INET6, "2001:db8::5");
    add(&f, 2, "eth1", AF_INET6, "fe80::2");
    add(&f, 3, "eth2", AF_INET, "198.18.0.9");
    cr_expect_str_eq(picked(&f, "eth0", buf), "2001:db8::5");
    /* eth1 has only a link-local address: none (the port has no usable address). */
    cr_expect_str_eq(picked(&f, "eth1", buf), "none");
    cr_expect_str_eq(picked(&f, "eth2", buf), "198.18.0.9");
    cr_expect_str_eq(picked(&f, "eth3", buf), "none");
    /* IPv4 wins over IPv6 on one interface, wherever it is in the list. */
    add(&f, 3, "eth0", AF_INET, "198.18.0.7");
    cr_expect_str_eq(picked(&f, "eth0", buf), "198.18.0.7");
}
#endif
