/* TCP transport wire formats. Every integer is little-endian; every parser checks lengths
 * and ranges and is driven by tests/fuzz/fuzz_tcp_header.c.
 *
 * Frame header (32 bytes), followed by `bytes` payload bytes:
 *   0 u32 magic "BTRD"   4 u32 bytes   8 u32 seq   12 u8 coll  13 u8 dtype  14 u8 op
 *   15 u8 flags          16 i32 root   20 i32 code (ABORT frames: braid_result_t, else 0)
 *   24 u64 count
 * Hello (72 bytes), the first bytes a connecting rank sends on each data socket:
 *   0 u32 magic "BTCH"   4 u32 version (2)   8 i32 rank   12 i32 channel   16 i32 socket index
 *   20 i32 sockets of the connection   24 16 bytes nonce   40 32 bytes MAC (braid_tcp_hello_mac,
 *   over bytes 0..39; the job secret itself never goes on the wire)
 * Connection info (56 bytes), allgathered by the bootstrap:
 *   0 u32 magic "BTCI"   4 u16 family (4 or 6)   6 u16 port   8 16 address bytes
 *   24 u32 IPv6 scope id 28 u32 sockets   32 u64 slot size   40 16 bytes the receive
 *   connection's nonce */
#include "core/log.h"
#include "transport/tcp.h"

#include <netinet/in.h>
#include <string.h>

#define HDR_MAGIC 0x44525442u   /* "BTRD" */
#define HELLO_MAGIC 0x48435442u /* "BTCH" */
#define INFO_MAGIC 0x49435442u  /* "BTCI" */
#define HELLO_VERSION 2u        /* 2: a MAC instead of the secret */
#define MAX_RANKS (1 << 20)
#define MAX_CHANNELS 64

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

void braid_tcp_hdr_pack(const braid_msg_hdr_t *hdr, int32_t code, uint8_t out[BRAID_TCP_HDR_BYTES])
{
    put32(out, HDR_MAGIC);
    put32(out + 4, hdr->bytes);
    put32(out + 8, hdr->seq);
    out[12] = hdr->coll;
    out[13] = hdr->dtype;
    out[14] = hdr->op;
    out[15] = hdr->flags;
    put32(out + 16, (uint32_t)hdr->root);
    put32(out + 20, (uint32_t)code);
    put64(out + 24, hdr->count);
}

braid_result_t braid_tcp_hdr_parse(const void *buf, size_t len, size_t slot_size,
                                   braid_msg_hdr_t *hdr_p, int32_t *code_p)
{
    const uint8_t *b = buf;
    if (!b || !hdr_p || !code_p || len < BRAID_TCP_HDR_BYTES)
        return braid_set_error(BRAID_ERR_REMOTE, "frame header of %zu bytes, want %d", len,
                               BRAID_TCP_HDR_BYTES);
    uint32_t magic = get32(b);
    if (magic != HDR_MAGIC)
        return braid_set_error(BRAID_ERR_REMOTE, "frame header with bad magic 0x%08x", magic);
    braid_msg_hdr_t h;
    memset(&h, 0, sizeof(h));
    h.bytes = get32(b + 4);
    h.seq = get32(b + 8);
    h.coll = b[12];
    h.dtype = b[13];
    h.op = b[14];
    h.flags = b[15];
    h.root = (int32_t)get32(b + 16);
    int32_t code = (int32_t)get32(b + 20);
    h.count = get64(b + 24);
    if (h.flags & ~(BRAID_MSG_ABORT | BRAID_MSG_HELLO | BRAID_MSG_REJECTED | BRAID_MSG_NOTICE))
        return braid_set_error(BRAID_ERR_REMOTE, "frame header with unknown flags 0x%02x", h.flags);
    if (h.flags & BRAID_MSG_ABORT) {
        if (code >= 0)
            return braid_set_error(BRAID_ERR_REMOTE, "abort frame with result code %d", code);
        if (h.bytes > BRAID_TCP_ABORT_MAX)
            return braid_set_error(BRAID_ERR_REMOTE, "abort frame of %u bytes exceeds %d", h.bytes,
                                   BRAID_TCP_ABORT_MAX);
    } else {
        if (code != 0)
            return braid_set_error(BRAID_ERR_REMOTE, "data frame with result code %d", code);
        if (h.bytes > slot_size)
            return braid_set_error(BRAID_ERR_REMOTE,
                                   "data frame of %u bytes exceeds the slot size %zu", h.bytes,
                                   slot_size);
    }
    *hdr_p = h;
    *code_p = code;
    return BRAID_SUCCESS;
}

void braid_tcp_hello_pack(const braid_tcp_hello_t *h, uint8_t out[BRAID_TCP_HELLO_BYTES])
{
    put32(out, HELLO_MAGIC);
    put32(out + 4, HELLO_VERSION);
    put32(out + 8, (uint32_t)h->rank);
    put32(out + 12, (uint32_t)h->channel);
    put32(out + 16, (uint32_t)h->sock);
    put32(out + 20, (uint32_t)h->nsocks);
    memcpy(out + 24, h->nonce, BRAID_NONCE_BYTES);
    memcpy(out + BRAID_TCP_HELLO_MACED, h->mac, BRAID_SHA256_BYTES);
}

void braid_tcp_hello_mac(const uint8_t secret[BRAID_SECRET_BYTES],
                         const uint8_t conn_nonce[BRAID_NONCE_BYTES], int32_t to_rank,
                         const uint8_t hello[BRAID_TCP_HELLO_MACED],
                         uint8_t out[BRAID_SHA256_BYTES])
{
    uint8_t bound[BRAID_NONCE_BYTES + 4];
    memcpy(bound, conn_nonce, BRAID_NONCE_BYTES);
    put32(bound + BRAID_NONCE_BYTES, (uint32_t)to_rank);
    braid_auth_mac(secret, BRAID_SECRET_BYTES, "braid-tcp-hello", bound, sizeof(bound), hello,
                   BRAID_TCP_HELLO_MACED, out);
}

braid_result_t braid_tcp_hello_parse(const void *buf, size_t len, braid_tcp_hello_t *h_p)
{
    const uint8_t *b = buf;
    if (!b || !h_p || len != BRAID_TCP_HELLO_BYTES)
        return braid_set_error(BRAID_ERR_AUTH, "hello of %zu bytes, want %d", len,
                               BRAID_TCP_HELLO_BYTES);
    if (get32(b) != HELLO_MAGIC)
        return braid_set_error(BRAID_ERR_AUTH, "hello with bad magic 0x%08x", get32(b));
    if (get32(b + 4) != HELLO_VERSION)
        return braid_set_error(BRAID_ERR_AUTH, "hello version %u, want %u", get32(b + 4),
                               HELLO_VERSION);
    braid_tcp_hello_t h;
    h.rank = (int32_t)get32(b + 8);
    h.channel = (int32_t)get32(b + 12);
    h.sock = (int32_t)get32(b + 16);
    h.nsocks = (int32_t)get32(b + 20);
    memcpy(h.nonce, b + 24, BRAID_NONCE_BYTES);
    memcpy(h.mac, b + BRAID_TCP_HELLO_MACED, BRAID_SHA256_BYTES);
    if (h.rank < 0 || h.rank >= MAX_RANKS || h.channel < 0 || h.channel >= MAX_CHANNELS ||
        h.nsocks < 1 || h.nsocks > BRAID_TCP_MAX_SOCKS || h.sock < 0 || h.sock >= h.nsocks)
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "hello with rank %d, channel %d, socket %d of %d", h.rank, h.channel,
                               h.sock, h.nsocks);
    *h_p = h;
    return BRAID_SUCCESS;
}

void braid_tcp_info_pack(const braid_tcp_info_t *info, uint8_t out[BRAID_TCP_INFO_BYTES])
{
    memset(out, 0, BRAID_TCP_INFO_BYTES);
    put32(out, INFO_MAGIC);
    if (info->addr.ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&info->addr;
        put16(out + 4, 4);
        put16(out + 6, ntohs(in->sin_port));
        memcpy(out + 8, &in->sin_addr, 4);
    } else {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&info->addr;
        put16(out + 4, 6);
        put16(out + 6, ntohs(in6->sin6_port));
        memcpy(out + 8, &in6->sin6_addr, 16);
        put32(out + 24, in6->sin6_scope_id);
    }
    put32(out + 28, info->nsocks);
    put64(out + 32, info->slot_size);
    memcpy(out + 40, info->nonce, BRAID_NONCE_BYTES);
}

braid_result_t braid_tcp_info_parse(const void *buf, size_t len, braid_tcp_info_t *info_p)
{
    const uint8_t *b = buf;
    if (!b || !info_p || len != BRAID_TCP_INFO_BYTES || get32(b) != INFO_MAGIC)
        return braid_set_error(BRAID_ERR_INTERNAL, "tcp: malformed connection info (%zu bytes)",
                               len);
    braid_tcp_info_t in;
    memset(&in, 0, sizeof(in));
    unsigned fam = get16(b + 4), port = get16(b + 6);
    if (fam == 4) {
        for (int i = 12; i < 28; i++)
            if (b[i])
                return braid_set_error(BRAID_ERR_INTERNAL,
                                       "tcp: IPv4 connection info with non-zero padding");
        struct sockaddr_in *a = (struct sockaddr_in *)&in.addr;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)port);
        memcpy(&a->sin_addr, b + 8, 4);
        in.addrlen = sizeof(*a);
    } else if (fam == 6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&in.addr;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)port);
        memcpy(&a->sin6_addr, b + 8, 16);
        a->sin6_scope_id = get32(b + 24);
        in.addrlen = sizeof(*a);
    } else {
        return braid_set_error(BRAID_ERR_INTERNAL, "tcp: connection info with family %u", fam);
    }
    in.nsocks = get32(b + 28);
    in.slot_size = get64(b + 32);
    memcpy(in.nonce, b + 40, BRAID_NONCE_BYTES);
    if (port == 0 || in.nsocks < 1 || in.nsocks > BRAID_TCP_MAX_SOCKS || in.slot_size == 0 ||
        in.slot_size > ((uint64_t)64 << 20))
        return braid_set_error(BRAID_ERR_INTERNAL,
                               "tcp: connection info with port %u, %u sockets, slot %llu B", port,
                               in.nsocks, (unsigned long long)in.slot_size);
    *info_p = in;
    return BRAID_SUCCESS;
}
