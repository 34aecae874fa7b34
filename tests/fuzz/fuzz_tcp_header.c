/* libFuzzer harness for the TCP transport's wire parsers: the frame header every data socket
 * delivers (with a slot size taken from the input), the hello the data listener reads from
 * any connection, and the connection info blob. Built separately (tests/fuzz/run.sh does it):
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -I include -I src -D_GNU_SOURCE \
 *       tests/fuzz/fuzz_tcp_header.c src/transport/tcp_wire.c src/core/log.c \
 *       src/core/config.c src/core/bootstrap_addr.c src/core/hmac.c -lpthread -lm \
 *       -o fuzz_tcp_header
 *   BRAID_DEBUG=NONE ./fuzz_tcp_header -max_total_time=20
 *
 * Checks beyond "no crash": whatever parses respects the length limits and re-encodes to the
 * same bytes. */
#include "core/log.h"
#include "transport/tcp.h"

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* Frame header; the slot size comes from the first two bytes (so both limits get hit). */
    size_t slot = size >= 2 ? ((size_t)data[0] << 8 | data[1]) * 64 : 64;
    const uint8_t *h = size >= 2 ? data + 2 : data;
    size_t hl = size >= 2 ? size - 2 : size;
    braid_msg_hdr_t hdr;
    int32_t code;
    if (braid_tcp_hdr_parse(h, hl, slot, &hdr, &code) == 0) {
        if (hl < BRAID_TCP_HDR_BYTES) __builtin_trap();
        if (hdr.flags & BRAID_MSG_ABORT) {
            if (hdr.bytes > BRAID_TCP_ABORT_MAX || code >= 0) __builtin_trap();
        } else if (hdr.bytes > slot || code != 0) {
            __builtin_trap();
        }
        uint8_t again[BRAID_TCP_HDR_BYTES];
        braid_tcp_hdr_pack(&hdr, code, again);
        if (memcmp(again, h, sizeof(again))) __builtin_trap();
    }

    braid_tcp_hello_t hello;
    if (braid_tcp_hello_parse(data, size, &hello) == 0) {
        if (size != BRAID_TCP_HELLO_BYTES) __builtin_trap();
        if (hello.sock < 0 || hello.sock >= hello.nsocks || hello.nsocks > BRAID_TCP_MAX_SOCKS ||
            hello.rank < 0 || hello.channel < 0)
            __builtin_trap();
        uint8_t again[BRAID_TCP_HELLO_BYTES];
        braid_tcp_hello_pack(&hello, again);
        if (memcmp(again, data, sizeof(again))) __builtin_trap();
        /* The MAC covers every field: flipping the rank changes it. */
        static const uint8_t key[BRAID_SECRET_BYTES] = {5, 6, 7};
        uint8_t m0[BRAID_SHA256_BYTES], m1[BRAID_SHA256_BYTES];
        braid_tcp_hello_mac(key, hello.nonce, 1, again, m0);
        again[8] ^= 1;
        braid_tcp_hello_mac(key, hello.nonce, 1, again, m1);
        if (!memcmp(m0, m1, sizeof(m0))) __builtin_trap();
    }

    braid_tcp_info_t info;
    if (braid_tcp_info_parse(data, size, &info) == 0) {
        if (size != BRAID_TCP_INFO_BYTES) __builtin_trap();
        if (info.nsocks < 1 || info.nsocks > BRAID_TCP_MAX_SOCKS || !info.slot_size)
            __builtin_trap();
        if (info.addr.ss_family != AF_INET && info.addr.ss_family != AF_INET6) __builtin_trap();
        if (info.addrlen > sizeof(info.addr)) __builtin_trap();
        uint8_t again[BRAID_TCP_INFO_BYTES];
        braid_tcp_info_pack(&info, again);
        if (memcmp(again, data, sizeof(again))) __builtin_trap();
        char s[96];
        braid_boot_addr_str(&info.addr, s, sizeof(s));
        if (!memchr(s, '\0', sizeof(s))) __builtin_trap();
    }
    braid_clear_error();
    return 0;
}
