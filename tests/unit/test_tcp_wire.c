/* The TCP transport's wire formats (src/transport/tcp_wire.c): exact byte layout, round
 * trips, and every length and range check of the parsers (the fuzzer drives them too). Part of
 * suite tcp, so the tcp filter of braid_tests runs these with the multi-process tests. */
#include "core/log.h"
#include "transport/tcp.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <string.h>

Test(tcp, wire_frame_header_round_trip_and_layout, .timeout = 10)
{
    braid_msg_hdr_t h = {.bytes = 4096,
                         .seq = 0x01020304,
                         .coll = 1,
                         .dtype = 8,
                         .op = 4,
                         .flags = 0,
                         .root = -1,
                         .count = 0x1122334455667788ull};
    uint8_t w[BRAID_TCP_HDR_BYTES];
    braid_tcp_hdr_pack(&h, 0, w);
    cr_assert(!memcmp(w, "BTRD", 4));
    cr_assert_eq(w[4], 0x00);
    cr_assert_eq(w[5], 0x10); /* 4096 little-endian */
    cr_assert_eq(w[8], 0x04);
    cr_assert_eq(w[24], 0x88);
    braid_msg_hdr_t g;
    int32_t code = 123;
    cr_assert_eq(braid_tcp_hdr_parse(w, sizeof(w), 4096, &g, &code), BRAID_SUCCESS);
    cr_assert_eq(code, 0);
    cr_assert(g.bytes == h.bytes && g.seq == h.seq && g.coll == h.coll && g.dtype == h.dtype &&
              g.op == h.op && g.flags == h.flags && g.root == h.root && g.count == h.count);
}

Test(tcp, wire_frame_header_length_checks, .timeout = 10)
{
    braid_msg_hdr_t h = {.bytes = 4097, .root = -1}, g;
    int32_t code;
    uint8_t w[BRAID_TCP_HDR_BYTES];
    braid_tcp_hdr_pack(&h, 0, w);
    /* More bytes than a slot: a protocol error, and outputs untouched. */
    memset(&g, 0x77, sizeof(g));
    cr_assert_eq(braid_tcp_hdr_parse(w, sizeof(w), 4096, &g, &code), BRAID_ERR_REMOTE);
    cr_assert(strstr(braid_last_error(), "exceeds the slot size"), "%s", braid_last_error());
    cr_assert_eq(g.bytes, 0x77777777u);
    cr_assert_eq(braid_tcp_hdr_parse(w, sizeof(w), 4097, &g, &code), BRAID_SUCCESS);
    /* Short buffer, bad magic, unknown flag, a code on a data frame. */
    cr_assert_eq(braid_tcp_hdr_parse(w, sizeof(w) - 1, 1 << 20, &g, &code), BRAID_ERR_REMOTE);
    cr_assert_eq(braid_tcp_hdr_parse(NULL, sizeof(w), 1 << 20, &g, &code), BRAID_ERR_REMOTE);
    uint8_t bad[BRAID_TCP_HDR_BYTES];
    memcpy(bad, w, sizeof(bad));
    bad[0] ^= 1;
    cr_assert_eq(braid_tcp_hdr_parse(bad, sizeof(bad), 1 << 20, &g, &code), BRAID_ERR_REMOTE);
    memcpy(bad, w, sizeof(bad));
    bad[15] = 0x80;
    cr_assert_eq(braid_tcp_hdr_parse(bad, sizeof(bad), 1 << 20, &g, &code), BRAID_ERR_REMOTE);
    braid_tcp_hdr_pack(&h, BRAID_ERR_REMOTE, bad);
    cr_assert_eq(braid_tcp_hdr_parse(bad, sizeof(bad), 1 << 20, &g, &code), BRAID_ERR_REMOTE);
}

Test(tcp, wire_abort_frames, .timeout = 10)
{
    braid_msg_hdr_t h = {.bytes = BRAID_TCP_ABORT_MAX, .flags = BRAID_MSG_ABORT, .root = -1}, g;
    int32_t code = 0;
    uint8_t w[BRAID_TCP_HDR_BYTES];
    braid_tcp_hdr_pack(&h, BRAID_ERR_MISMATCH, w);
    /* An abort frame's limit is its own, not the slot size. */
    cr_assert_eq(braid_tcp_hdr_parse(w, sizeof(w), 64, &g, &code), BRAID_SUCCESS);
    cr_assert_eq(code, BRAID_ERR_MISMATCH);
    cr_assert(g.flags & BRAID_MSG_ABORT);
    h.bytes++;
    braid_tcp_hdr_pack(&h, BRAID_ERR_MISMATCH, w);
    cr_assert_eq(braid_tcp_hdr_parse(w, sizeof(w), 1 << 20, &g, &code), BRAID_ERR_REMOTE);
    h.bytes = 3;
    braid_tcp_hdr_pack(&h, 0, w); /* an abort must carry an error code */
    cr_assert_eq(braid_tcp_hdr_parse(w, sizeof(w), 1 << 20, &g, &code), BRAID_ERR_REMOTE);
}

Test(tcp, wire_hello, .timeout = 10)
{
    braid_tcp_hello_t h = {.rank = 5, .channel = 2, .sock = 1, .nsocks = 2}, g;
    for (int i = 0; i < BRAID_NONCE_BYTES; i++)
        h.nonce[i] = (uint8_t)(i * 11);
    for (int i = 0; i < BRAID_SHA256_BYTES; i++)
        h.mac[i] = (uint8_t)(i * 7 + 1);
    uint8_t w[BRAID_TCP_HELLO_BYTES];
    braid_tcp_hello_pack(&h, w);
    cr_assert_eq(braid_tcp_hello_parse(w, sizeof(w), &g), BRAID_SUCCESS);
    cr_assert(g.rank == 5 && g.channel == 2 && g.sock == 1 && g.nsocks == 2);
    cr_assert(!memcmp(g.nonce, h.nonce, BRAID_NONCE_BYTES));
    cr_assert(!memcmp(g.mac, h.mac, BRAID_SHA256_BYTES));
    /* The MAC covers the receive connection's nonce, the receiver's rank and every field. */
    uint8_t key[BRAID_SECRET_BYTES] = {1, 2, 3}, cn[BRAID_NONCE_BYTES] = {9}, m0[32], m1[32];
    braid_tcp_hello_mac(key, cn, 3, w, m0);
    braid_tcp_hello_mac(key, cn, 4, w, m1);
    cr_assert(memcmp(m0, m1, 32), "to_rank not covered");
    cn[15] = 1;
    braid_tcp_hello_mac(key, cn, 3, w, m1);
    cr_assert(memcmp(m0, m1, 32), "connection nonce not covered");
    cn[15] = 0;
    for (int i = 0; i < BRAID_TCP_HELLO_MACED; i++) {
        w[i] ^= 1;
        braid_tcp_hello_mac(key, cn, 3, w, m1);
        w[i] ^= 1;
        cr_assert(memcmp(m0, m1, 32), "hello byte %d not covered", i);
    }
    cr_assert_eq(braid_tcp_hello_parse(w, sizeof(w) - 1, &g), BRAID_ERR_AUTH);
    uint8_t bad[BRAID_TCP_HELLO_BYTES];
    memcpy(bad, w, sizeof(bad));
    bad[1] ^= 0x40;
    cr_assert_eq(braid_tcp_hello_parse(bad, sizeof(bad), &g), BRAID_ERR_AUTH);
    memcpy(bad, w, sizeof(bad));
    bad[4] = 1; /* version 1: the secret in clear */
    cr_assert_eq(braid_tcp_hello_parse(bad, sizeof(bad), &g), BRAID_ERR_AUTH);
    braid_tcp_hello_t odd[] = {{.rank = -1, .nsocks = 1},
                               {.rank = 0, .channel = -3, .nsocks = 1},
                               {.rank = 0, .sock = 2, .nsocks = 2},
                               {.rank = 0, .nsocks = 0},
                               {.rank = 0, .nsocks = BRAID_TCP_MAX_SOCKS + 1}};
    for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
        braid_tcp_hello_pack(&odd[i], bad);
        cr_assert_eq(braid_tcp_hello_parse(bad, sizeof(bad), &g), BRAID_ERR_INVALID_ARG, "case %zu",
                     i);
    }
}

Test(tcp, wire_connection_info, .timeout = 10)
{
    braid_tcp_info_t in = {.nsocks = 3, .slot_size = 1 << 17}, g;
    struct sockaddr_in *a = (struct sockaddr_in *)&in.addr;
    a->sin_family = AF_INET;
    a->sin_port = htons(4242);
    inet_pton(AF_INET, "198.18.0.7", &a->sin_addr);
    for (int i = 0; i < BRAID_NONCE_BYTES; i++)
        in.nonce[i] = (uint8_t)(i * 29 + 3);
    uint8_t w[BRAID_TCP_INFO_BYTES];
    braid_tcp_info_pack(&in, w);
    cr_assert_eq(braid_tcp_info_parse(w, sizeof(w), &g), BRAID_SUCCESS);
    char s[80];
    braid_boot_addr_str(&g.addr, s, sizeof(s));
    cr_assert_str_eq(s, "198.18.0.7:4242");
    cr_assert(g.nsocks == 3 && g.slot_size == 1 << 17 && g.addrlen == sizeof(*a));
    cr_assert(!memcmp(g.nonce, in.nonce, BRAID_NONCE_BYTES));
    w[20] = 1; /* IPv4 padding must be zero */
    cr_assert_lt(braid_tcp_info_parse(w, sizeof(w), &g), 0);

    braid_tcp_info_t in6 = {.nsocks = 1, .slot_size = 64};
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&in6.addr;
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(7);
    inet_pton(AF_INET6, "fd00::2", &a6->sin6_addr);
    braid_tcp_info_pack(&in6, w);
    cr_assert_eq(braid_tcp_info_parse(w, sizeof(w), &g), BRAID_SUCCESS);
    braid_boot_addr_str(&g.addr, s, sizeof(s));
    cr_assert_str_eq(s, "[fd00::2]:7");
    in6.nsocks = 0;
    braid_tcp_info_pack(&in6, w);
    cr_assert_lt(braid_tcp_info_parse(w, sizeof(w), &g), 0);
    in6.nsocks = 1;
    in6.slot_size = 0;
    braid_tcp_info_pack(&in6, w);
    cr_assert_lt(braid_tcp_info_parse(w, sizeof(w), &g), 0);
    cr_assert_lt(braid_tcp_info_parse(w, sizeof(w) - 1, &g), 0);
}
