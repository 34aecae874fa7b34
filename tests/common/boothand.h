/* The client side of the bootstrap handshake (hello, the root's challenge, the client's
 * proof; src/core/bootstrap.c "Authentication") spoken by hand, for tests that play a rank
 * with a chosen key or record what a rank sends. */
#ifndef BRAID_TESTS_BOOTHAND_H
#define BRAID_TESTS_BOOTHAND_H

#include <stdint.h>

/* Bytes boot_hand_join sends: the hello and the proof message (header + MAC). */
#define BOOT_HAND_SENT (32 + 16 + 32)

/* On a connected blocking socket (the caller sets SO_RCVTIMEO): sends rank's hello, reads the
 * root's challenge and answers with the proof under key (16 bytes) for the root on port. The bytes
 * sent go to sent (BOOT_HAND_SENT of them) unless it is NULL. Returns 1 if the root's proof
 * verified under key, 0 if a challenge came that did not verify, -1 if none came. */
int boot_hand_join(int fd, const uint8_t *key, int port, int rank, int nranks, uint8_t *sent);

#endif
