/* SHA-256 and HMAC-SHA256 (src/core/hmac.c) against the published vectors: FIPS 180-2
 * appendix B ("abc", the 448-bit message, one million 'a') and RFC 4231 test cases 1-4, 6
 * and 7 (case 5 checks a truncated output and adds nothing here). */
#include "core/hmac.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <string.h>

static void hex(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
}

static void expect_sha(const void *msg, size_t len, const char *want)
{
    uint8_t d[BRAID_SHA256_BYTES];
    char got[2 * BRAID_SHA256_BYTES + 1];
    braid_sha256(msg, len, d);
    hex(d, sizeof(d), got);
    cr_assert_str_eq(got, want, "sha256 of %zu bytes", len);
}

Test(hmac, sha256_fips_vectors, .timeout = 30)
{
    expect_sha("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    expect_sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56,
               "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    expect_sha("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    /* One million 'a', fed in uneven pieces so the block buffering is exercised. */
    static uint8_t a[1000];
    memset(a, 'a', sizeof(a));
    braid_sha256_t s;
    braid_sha256_init(&s);
    size_t done = 0, piece = 1;
    while (done < 1000000) {
        size_t n = piece < 1000000 - done ? piece : 1000000 - done;
        if (n > sizeof(a)) n = sizeof(a);
        braid_sha256_update(&s, a, n);
        done += n;
        piece = piece * 7 % 997 + 1;
    }
    uint8_t d[BRAID_SHA256_BYTES];
    char got[2 * BRAID_SHA256_BYTES + 1];
    braid_sha256_final(&s, d);
    hex(d, sizeof(d), got);
    cr_assert_str_eq(got, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

static void expect_hmac(const void *key, size_t keylen, const void *msg, size_t len,
                        const char *want, int tcase)
{
    uint8_t d[BRAID_SHA256_BYTES];
    char got[2 * BRAID_SHA256_BYTES + 1];
    braid_hmac(key, keylen, msg, len, d);
    hex(d, sizeof(d), got);
    cr_assert_str_eq(got, want, "RFC 4231 test case %d", tcase);
}

Test(hmac, hmac_sha256_rfc4231_vectors, .timeout = 30)
{
    uint8_t key[131];
    memset(key, 0x0b, 20);
    expect_hmac(key, 20, "Hi There", 8,
                "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7", 1);
    expect_hmac("Jefe", 4, "what do ya want for nothing?", 28,
                "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843", 2);
    uint8_t msg[50];
    memset(key, 0xaa, 20);
    memset(msg, 0xdd, sizeof(msg));
    expect_hmac(key, 20, msg, 50,
                "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe", 3);
    for (int i = 0; i < 25; i++)
        key[i] = (uint8_t)(i + 1);
    memset(msg, 0xcd, sizeof(msg));
    expect_hmac(key, 25, msg, 50,
                "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b", 4);
    memset(key, 0xaa, sizeof(key)); /* 131 bytes: longer than a block, hashed first */
    const char *m6 = "Test Using Larger Than Block-Size Key - Hash Key First";
    expect_hmac(key, 131, m6, strlen(m6),
                "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54", 6);
    const char *m7 = "This is a test using a larger than block-size key and a larger than "
                     "block-size data. The key needs to be hashed before being used by the HMAC "
                     "algorithm.";
    expect_hmac(key, 131, m7, strlen(m7),
                "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2", 7);
}

/* The streaming interface gives the one-shot result, and braid_auth_mac is HMAC over
 * label|NUL|a|b; the constant-time compare sees a difference in the last byte. */
Test(hmac, streaming_and_auth_mac, .timeout = 30)
{
    const char *key = "job secret 16 b!";
    uint8_t one[BRAID_SHA256_BYTES], two[BRAID_SHA256_BYTES];
    braid_hmac(key, 16, "lbl\0abcdef", 10, one);
    braid_auth_mac((const uint8_t *)key, 16, "lbl", "abc", 3, "def", 3, two);
    cr_assert_eq(memcmp(one, two, sizeof(one)), 0);
    cr_assert_eq(braid_mac_cmp(one, two, sizeof(one)), 0);
    two[31] ^= 1;
    cr_assert_neq(braid_mac_cmp(one, two, sizeof(one)), 0);
    braid_auth_mac((const uint8_t *)key, 16, "lbm", "abc", 3, "def", 3, two);
    cr_assert_neq(memcmp(one, two, sizeof(one)), 0, "the label is part of the MAC");
}
