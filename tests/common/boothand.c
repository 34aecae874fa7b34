#include "boothand.h"

#include "core/bootstrap.h"
#include "core/bootstrap_wire.h"

#include <string.h>
#include <sys/socket.h>

static int recv_n(int fd, uint8_t *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = recv(fd, buf + got, n - got, 0);
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    return 0;
}

int boot_hand_join(int fd, const uint8_t *key, int port, int rank, int nranks, uint8_t *sent)
{
    uint8_t out[BOOT_HAND_SENT];
    braid_boot_hello_t h = {
        .magic = BOOT_HELLO_MAGIC, .version = BOOT_VERSION, .rank = rank, .nranks = nranks};
    if (braid_boot_random_secret(h.nonce) < 0) return -1;
    braid_boot_hello_pack(&h, out);
    if (send(fd, out, BRAID_BOOT_HELLO_BYTES, MSG_NOSIGNAL) != BRAID_BOOT_HELLO_BYTES) return -1;
    uint8_t hdr[BOOT_HDR_BYTES], ch[BOOT_CHALLENGE_BYTES], want[BOOT_MAC_BYTES];
    if (recv_n(fd, hdr, sizeof(hdr)) < 0 || boot_get_u32(hdr) != BOOT_MSG_CHALLENGE ||
        boot_get_u64(hdr + 8) != BOOT_CHALLENGE_BYTES || recv_n(fd, ch, sizeof(ch)) < 0)
        return -1;
    braid_boot_proof(key, port, 1, out, ch, want);
    int ok = memcmp(want, ch + BRAID_NONCE_BYTES, BOOT_MAC_BYTES) == 0;
    uint8_t *proof = out + BRAID_BOOT_HELLO_BYTES;
    boot_hdr_pack(proof, BOOT_MSG_PROOF, 0, BOOT_MAC_BYTES);
    braid_boot_proof(key, port, 0, out, ch, proof + BOOT_HDR_BYTES);
    if (send(fd, proof, BOOT_HDR_BYTES + BOOT_MAC_BYTES, MSG_NOSIGNAL) !=
        BOOT_HDR_BYTES + BOOT_MAC_BYTES)
        return -1;
    if (sent) memcpy(sent, out, sizeof(out));
    return ok;
}
