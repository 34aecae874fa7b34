/* SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), written for braid's connection handshakes:
 * every bootstrap and data connection proves knowledge of the job secret with an HMAC over
 * fresh nonces, so the secret itself never travels (see bootstrap.c and the transports). Not a
 * general-purpose crypto library: no streaming over huge inputs beyond 2^61 bytes, no other
 * hashes. Internal (hidden symbols). */
#ifndef BRAID_CORE_HMAC_H
#define BRAID_CORE_HMAC_H

#include <stddef.h>
#include <stdint.h>

#define BRAID_SHA256_BYTES 32
#define BRAID_SHA256_BLOCK 64
/* Fresh random bytes every handshake contributes (getrandom, as the job secret). */
#define BRAID_NONCE_BYTES 16

typedef struct {
    uint32_t h[8];
    uint64_t bytes; /* message bytes hashed so far */
    uint8_t buf[BRAID_SHA256_BLOCK];
    size_t nbuf;
} braid_sha256_t;

void braid_sha256_init(braid_sha256_t *s);
void braid_sha256_update(braid_sha256_t *s, const void *data, size_t len);
/* Writes the digest; s must be initialised again before reuse. */
void braid_sha256_final(braid_sha256_t *s, uint8_t out[BRAID_SHA256_BYTES]);
void braid_sha256(const void *data, size_t len, uint8_t out[BRAID_SHA256_BYTES]);

typedef struct {
    braid_sha256_t inner, outer;
} braid_hmac_t;

/* HMAC-SHA256 with a key of any length (keys longer than a block are hashed first). */
void braid_hmac_init(braid_hmac_t *m, const void *key, size_t keylen);
void braid_hmac_update(braid_hmac_t *m, const void *data, size_t len);
void braid_hmac_final(braid_hmac_t *m, uint8_t out[BRAID_SHA256_BYTES]);
void braid_hmac(const void *key, size_t keylen, const void *data, size_t len,
                uint8_t out[BRAID_SHA256_BYTES]);

/* The proofs of braid's handshakes: HMAC(key, label with its NUL | a | b). The label keeps the
 * proofs of different roles and protocols apart (a root's proof is never a valid client's). */
void braid_auth_mac(const uint8_t *key, size_t keylen, const char *label, const void *a,
                    size_t alen, const void *b, size_t blen, uint8_t out[BRAID_SHA256_BYTES]);

/* Constant-time comparison of n bytes: 0 if equal. */
int braid_mac_cmp(const uint8_t *a, const uint8_t *b, size_t n);

#endif
