/* SHA-256 after FIPS 180-4 section 6.2 (message schedule W[0..63], eight working variables, 64
 * rounds per 512-bit block; big-endian words; padding with 0x80, zeros and the 64-bit bit
 * length) and HMAC after RFC 2104 (H((K ^ opad) | H((K ^ ipad) | m)), keys longer than the
 * block hashed first, shorter ones padded with zeros). Checked against the FIPS and RFC 4231
 * vectors in tests/unit/test_hmac.c. */
#include "core/hmac.h"

#include <string.h>

/* The first 32 bits of the fractional parts of the cube roots of the first 64 primes. */
static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t rotr(uint32_t x, int n)
{
    return (x >> n) | (x << (32 - n));
}

static void compress(uint32_t h[8], const uint8_t block[BRAID_SHA256_BLOCK])
{
    uint32_t w[64];
    for (int t = 0; t < 16; t++)
        w[t] = (uint32_t)block[4 * t] << 24 | (uint32_t)block[4 * t + 1] << 16 |
               (uint32_t)block[4 * t + 2] << 8 | (uint32_t)block[4 * t + 3];
    for (int t = 16; t < 64; t++) {
        uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
        uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
        w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int t = 0; t < 64; t++) {
        uint32_t S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
        uint32_t ch = (e & f) ^ (~e & g);
        uint32_t t1 = hh + S1 + ch + K[t] + w[t];
        uint32_t S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
        uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
        uint32_t t2 = S0 + maj;
        hh = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += hh;
}

void braid_sha256_init(braid_sha256_t *s)
{
    /* The first 32 bits of the fractional parts of the square roots of the first 8 primes. */
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, iv, sizeof(iv));
    s->bytes = 0;
    s->nbuf = 0;
}

void braid_sha256_update(braid_sha256_t *s, const void *data, size_t len)
{
    const uint8_t *p = data;
    s->bytes += len;
    if (s->nbuf) {
        size_t take = BRAID_SHA256_BLOCK - s->nbuf < len ? BRAID_SHA256_BLOCK - s->nbuf : len;
        memcpy(s->buf + s->nbuf, p, take);
        s->nbuf += take;
        p += take;
        len -= take;
        if (s->nbuf < BRAID_SHA256_BLOCK) return;
        compress(s->h, s->buf);
        s->nbuf = 0;
    }
    for (; len >= BRAID_SHA256_BLOCK; p += BRAID_SHA256_BLOCK, len -= BRAID_SHA256_BLOCK)
        compress(s->h, p);
    memcpy(s->buf, p, len);
    s->nbuf = len;
}

void braid_sha256_final(braid_sha256_t *s, uint8_t out[BRAID_SHA256_BYTES])
{
    uint64_t bits = s->bytes * 8;
    /* 0x80, then zeros up to 56 bytes into a block, then the length: one or two blocks. */
    s->buf[s->nbuf++] = 0x80;
    if (s->nbuf > 56) {
        memset(s->buf + s->nbuf, 0, BRAID_SHA256_BLOCK - s->nbuf);
        compress(s->h, s->buf);
        s->nbuf = 0;
    }
    memset(s->buf + s->nbuf, 0, 56 - s->nbuf);
    for (int i = 0; i < 8; i++)
        s->buf[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
    compress(s->h, s->buf);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(s->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)s->h[i];
    }
    memset(s, 0, sizeof(*s));
}

void braid_sha256(const void *data, size_t len, uint8_t out[BRAID_SHA256_BYTES])
{
    braid_sha256_t s;
    braid_sha256_init(&s);
    braid_sha256_update(&s, data, len);
    braid_sha256_final(&s, out);
}

void braid_hmac_init(braid_hmac_t *m, const void *key, size_t keylen)
{
    uint8_t k[BRAID_SHA256_BLOCK], pad[BRAID_SHA256_BLOCK];
    memset(k, 0, sizeof(k));
    if (keylen > BRAID_SHA256_BLOCK)
        braid_sha256(key, keylen, k);
    else if (keylen)
        memcpy(k, key, keylen);
    for (int i = 0; i < BRAID_SHA256_BLOCK; i++)
        pad[i] = (uint8_t)(k[i] ^ 0x36);
    braid_sha256_init(&m->inner);
    braid_sha256_update(&m->inner, pad, sizeof(pad));
    for (int i = 0; i < BRAID_SHA256_BLOCK; i++)
        pad[i] = (uint8_t)(k[i] ^ 0x5c);
    braid_sha256_init(&m->outer);
    braid_sha256_update(&m->outer, pad, sizeof(pad));
    memset(k, 0, sizeof(k));
    memset(pad, 0, sizeof(pad));
}

void braid_hmac_update(braid_hmac_t *m, const void *data, size_t len)
{
    braid_sha256_update(&m->inner, data, len);
}

void braid_hmac_final(braid_hmac_t *m, uint8_t out[BRAID_SHA256_BYTES])
{
    uint8_t ih[BRAID_SHA256_BYTES];
    braid_sha256_final(&m->inner, ih);
    braid_sha256_update(&m->outer, ih, sizeof(ih));
    braid_sha256_final(&m->outer, out);
}

void braid_hmac(const void *key, size_t keylen, const void *data, size_t len,
                uint8_t out[BRAID_SHA256_BYTES])
{
    braid_hmac_t m;
    braid_hmac_init(&m, key, keylen);
    braid_hmac_update(&m, data, len);
    braid_hmac_final(&m, out);
}

void braid_auth_mac(const uint8_t *key, size_t keylen, const char *label, const void *a,
                    size_t alen, const void *b, size_t blen, uint8_t out[BRAID_SHA256_BYTES])
{
    braid_hmac_t m;
    braid_hmac_init(&m, key, keylen);
    braid_hmac_update(&m, label, strlen(label) + 1);
    if (alen) braid_hmac_update(&m, a, alen);
    if (blen) braid_hmac_update(&m, b, blen);
    braid_hmac_final(&m, out);
}

int braid_mac_cmp(const uint8_t *a, const uint8_t *b, size_t n)
{
    volatile uint8_t diff = 0;
    for (size_t i = 0; i < n; i++)
        diff |= (uint8_t)(a[i] ^ b[i]);
    return diff != 0;
}
