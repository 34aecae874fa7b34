/* libFuzzer harness for the bootstrap's wire parsers: the hello a root reads from any
 * connection, and the unique id a rank receives out of band. Built separately:
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -I include -I src -D_GNU_SOURCE \
 *       tests/fuzz/fuzz_boot_hello.c src/core/bootstrap*.c src/core/log.c src/core/config.c \
 *       src/core/hmac.c src/core/fd_reserve.c \
 *       -lpthread -lm -o fuzz_boot_hello
 *   BRAID_DEBUG=NONE ./fuzz_boot_hello -max_total_time=20
 *
 * Checks beyond "no crash": whatever parses must re-encode to the same bytes, and the two
 * proofs of the handshake over it (root's and client's) differ. */
#include "core/bootstrap.h"
#include "core/log.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    braid_boot_hello_t h;
    if (braid_boot_hello_parse(data, size, &h) == 0) {
        uint8_t again[BRAID_BOOT_HELLO_BYTES];
        braid_boot_hello_pack(&h, again);
        if (size != sizeof(again) || memcmp(again, data, size)) __builtin_trap();
        if (h.rank < 0 || h.rank >= h.nranks) __builtin_trap();
        static const uint8_t key[BRAID_SECRET_BYTES] = {1, 2, 3, 4};
        uint8_t pr[BRAID_SHA256_BYTES], pc[BRAID_SHA256_BYTES];
        braid_boot_proof(key, 29501, 1, data, h.nonce, pr);
        braid_boot_proof(key, 29501, 0, data, h.nonce, pc);
        if (!memcmp(pr, pc, sizeof(pr))) __builtin_trap();
    }
    /* Any prefix of the input as a unique id (the rest zero), so short inputs reach the
     * field checks too. */
    braid_unique_id_t id;
    memset(&id, 0, sizeof(id));
    memcpy(id.internal, data, size < sizeof(id.internal) ? size : sizeof(id.internal));
    braid_boot_addr_t a;
    if (braid_boot_id_decode(&id, &a) == 0) {
        braid_unique_id_t again;
        char s[128];
        braid_boot_id_encode(&a, &again);
        if (memcmp(&again, &id, sizeof(id))) __builtin_trap();
        braid_boot_addr_str(&a.addr, s, sizeof(s));
        if (!memchr(s, '\0', sizeof(s))) __builtin_trap();
    }
    braid_clear_error();
    return 0;
}
