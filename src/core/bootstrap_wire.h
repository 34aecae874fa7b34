/* Private to src/core/bootstrap*.c: the bootstrap wire format and small helpers.
 *
 * Every integer on the wire is little-endian. A connection starts with the 32-byte hello
 * (braid_boot_hello_pack: magic, version, rank, nranks, a fresh client nonce Nc); after that
 * every message is a 16-byte header followed by len payload bytes:
 *
 *   u32 type | u32 aux | u64 len
 *
 * The handshake (the job secret never goes on the wire; see "Authentication" in bootstrap.c):
 *   root -> client  BOOT_MSG_CHALLENGE  aux = BOOT_VERSION, payload = a fresh root nonce Nr (16)
 *                                       and the root's proof HMAC(K, "braid-boot-root" |
 *                                       hello | Nr) (32), sent as soon as the hello parsed
 *   client -> root  BOOT_MSG_PROOF      payload = HMAC(K, "braid-boot-client" | hello | Nr)
 *                                       (32); the root admits the rank only after checking it
 *   (K = HMAC(secret, "braid-boot-key" | the root's port): the proofs are bound to the root.)
 * Then:
 *   client -> root  BOOT_MSG_ALLGATHER  aux = collective sequence number, payload = this rank's
 *                                       blob
 *                   BOOT_MSG_ERROR      payload = error text (braid_boot_report_error)
 *                   BOOT_MSG_GIVEUP     the client's deadline passed while it waited for the
 *                                       reply to the join (aux = BOOT_GIVEUP_JOIN) or to
 *                                       collective aux; len 0. If that is still pending the
 *                                       root fails the job with a timeout naming the missing
 *                                       ranks, else it ignores it (the reply is in flight).
 *   root -> client  BOOT_MSG_ACK        all ranks joined (len 0)
 *                   BOOT_MSG_RESULT     aux = sequence number, payload = nranks blobs in rank order
 *                   BOOT_MSG_FAIL       aux = (uint32_t)braid_result_t, payload = error text
 *
 * The hello's magic and version and this header keep their layout in every version: a root
 * answers a hello of another version with BOOT_MSG_FAIL (aux = BRAID_ERR_UNSUPPORTED) naming
 * both versions, which a client reads before any proof.
 *
 * A client has at most one request outstanding, so anything the root sends while a client is
 * not waiting for a reply is a BOOT_MSG_FAIL. */
#ifndef BRAID_CORE_BOOTSTRAP_WIRE_H
#define BRAID_CORE_BOOTSTRAP_WIRE_H

#include "braid/braid.h"

#include <stdint.h>
#include <string.h>
#include <time.h>

#define BOOT_HELLO_MAGIC 0x48445242u /* "BRDH" */
#define BOOT_VERSION 3u /* 2: HMAC challenge-response; 3: proofs keyed by the root's port */
#define BOOT_HDR_BYTES 16
#define BOOT_MAX_TOTAL ((uint64_t)64 << 20) /* largest allgather result (all ranks) */
#define BOOT_MAX_TEXT 1024                  /* longest error text on the wire */
#define BOOT_MAX_NRANKS (1 << 20)

enum {
    BOOT_MSG_ALLGATHER = 1,
    BOOT_MSG_ERROR = 2,
    BOOT_MSG_ACK = 3,
    BOOT_MSG_RESULT = 4,
    BOOT_MSG_FAIL = 5,
    BOOT_MSG_GIVEUP = 6,
    BOOT_MSG_CHALLENGE = 7,
    BOOT_MSG_PROOF = 8,
};
#define BOOT_MAC_BYTES 32                          /* HMAC-SHA256 */
#define BOOT_CHALLENGE_BYTES (16 + BOOT_MAC_BYTES) /* payload: Nr | root proof */
#define BOOT_GIVEUP_JOIN 0xffffffffu

/* The root's side of the handshake (bootstrap.c, "Authentication"). braid_boot_challenge draws
 * Nr into nonce and writes the challenge message (BOOT_HDR_BYTES + BOOT_CHALLENGE_BYTES) for
 * hello into out; braid_boot_check_proof checks the BOOT_HDR_BYTES + BOOT_MAC_BYTES that follow
 * the hello in buf: 0 valid, 1 not a proof message, 2 a wrong proof (compared in constant
 * time). port: the root's listening port. */
braid_result_t braid_boot_challenge(const uint8_t *secret, int port, const uint8_t *hello,
                                    uint8_t *nonce, uint8_t *out);
int braid_boot_check_proof(const uint8_t *secret, int port, const uint8_t *buf,
                           const uint8_t *nonce);

static inline void boot_put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline uint16_t boot_get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline void boot_put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t boot_get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static inline void boot_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint64_t boot_get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static inline void boot_hdr_pack(uint8_t out[BOOT_HDR_BYTES], uint32_t type, uint32_t aux,
                                 uint64_t len)
{
    boot_put_u32(out, type);
    boot_put_u32(out + 4, aux);
    boot_put_u64(out + 8, len);
}

/* Monotonic seconds. */
static inline double boot_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Replaces non-printable bytes of a received text by '?' so logs stay readable. */
static inline void boot_sanitize(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f) *s = '?';
}

#endif
