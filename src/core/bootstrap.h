/* Bootstrap: the out-of-band TCP network that ranks use to find each other before any
 * transport exists, and for small control exchanges afterwards (allgather of addresses,
 * barriers during setup, comm_split).
 *
 * A unique id (braid_unique_id_t, 128 bytes) holds: a magic, the root's address family, IPv4
 * or IPv6 address and port, and a random 128-bit job secret. The root service (a thread in
 * the process that created the id, or in rank 0 under braid_comm_init_env) accepts exactly one
 * connection per rank. Every connection begins with a hello {magic, version, rank, nranks,
 * client nonce}, answered by the root's challenge {root nonce, root's proof}, answered by the
 * client's proof: both proofs are HMACs keyed by the job secret over the hello and the root
 * nonce, so the secret never goes on the wire and neither side trusts the other before the
 * proof (bootstrap.c, "Authentication"). A wrong proof or magic is dropped and logged by the
 * root (BRAID_ERR_AUTH is never returned to the listener; it keeps serving); a client whose
 * root does not prove itself fails with BRAID_ERR_AUTH; a rank/nranks mismatch fails every
 * rank's init with a clear error. All wire messages are length-checked; the parser is exposed
 * for the fuzzer.
 *
 * Every blocking call has a deadline (timeout_s) and checks *abort_flag (non-zero = abort,
 * returns BRAID_ERR_ABORTED) at least every 100 ms. A client whose deadline passes tells the
 * root, which fails every rank with one BRAID_ERR_TIMEOUT message naming the missing ranks.
 *
 * Files: bootstrap.c (id, hello, client), bootstrap_root.c (the service), bootstrap_sock.c
 * (the services' listeners and sockets, closed in a forked child; accept failures per root),
 * bootstrap_threads.c (their threads and handles), bootstrap_addr.c (host:port,
 * BRAID_SOCKET_IFNAME, secrets, environment), bootstrap_wire.h (wire format). */
#ifndef BRAID_CORE_BOOTSTRAP_H
#define BRAID_CORE_BOOTSTRAP_H

#include "braid/braid.h"
#include "core/hmac.h"

#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>

#define BRAID_SECRET_BYTES 16

/* The decoded unique id. */
typedef struct {
    struct sockaddr_storage addr; /* root address and port */
    socklen_t addrlen;
    uint8_t secret[BRAID_SECRET_BYTES];
    /* 1: nobody listens yet; rank 0 of the communicator opens the root service on addr during
     * its init (ids from braid_unique_id_from_root, as NCCL_COMM_ID). */
    uint8_t rank0_hosts;
    /* 1: the root string's host is a loopback literal or a loopback name (braid-run's
     * 127.0.0.1, ::1, "localhost"; braid_boot_root_loopback_only): the root listens on addr
     * alone, never on every address (braid_boot_root_start_every), so that a purely local job
     * is not reachable from the network. Other names, even those that resolve to loopback on
     * this host (Debian's 127.0.1.1 hostname and its aliases), listen on every address. */
    uint8_t loopback_only;
} braid_boot_addr_t;

typedef struct braid_bootstrap braid_bootstrap_t;

/* Encodes / decodes / validates a unique id (decode returns BRAID_ERR_INVALID_ARG naming
 * "id" for a bad magic or family). */
void braid_boot_id_encode(const braid_boot_addr_t *a, braid_unique_id_t *id_p);
braid_result_t braid_boot_id_decode(const braid_unique_id_t *id, braid_boot_addr_t *a_p);

/* Fills 'secret' with random bytes from getrandom(). */
braid_result_t braid_boot_random_secret(uint8_t secret[BRAID_SECRET_BYTES]);

/* Opens the root listener on addr (port 0 = any; the chosen port is written back into *addr)
 * and starts the root service thread for a job of any size (the first hello fixes nranks).
 * The service lives until every rank closed its connection, or an error/timeout of timeout_s
 * without progress. Used by braid_get_unique_id (addr = the interface's address, port 0)
 * and by rank 0 under braid_comm_init_env (addr = BRAID_ROOT). If addr is not an address
 * of this host (EADDRNOTAVAIL: a NAT or virtual address) the listener binds the wildcard
 * address of the same family and port. timeout_s <= 0 means no timeout.
 *
 * Details: a service that no rank joined within timeout_s (plus the hello deadline,
 * min(5 s, timeout_s)) exits: the id was never used;
 * afterwards a join phase or an allgather that makes no progress for timeout_s fails every
 * rank with BRAID_ERR_TIMEOUT naming the missing ranks. At most 256 connections without a
 * hello (a quarter of the descriptor limit if less) are open at once; while that many wait,
 * the listener pauses (newer ones wait in the kernel's backlog) and the oldest that waited
 * 1 s are closed to make room. After a failure the service keeps answering
 * late joiners with the error for timeout_s, then exits. The thread blocks all signals. */
braid_result_t braid_boot_root_start(braid_boot_addr_t *addr, double timeout_s);

/* Number of root services running in this process (tests check that they exit). */
int braid_boot_root_count(void);

/* The same as braid_boot_root_start, and returns a handle (root_p may be NULL) that must be
 * passed to braid_boot_root_wait exactly once. The process that hosts a root service must
 * not exit while the service still has replies to deliver (the last barrier's results to
 * the other ranks): rank 0 calls braid_boot_root_wait after its own braid_boot_close. */
typedef struct braid_boot_root braid_boot_root_t;
/* 1 when the root service of this process that serves root (its secret and port) has failed
 * to accept connections for min_s seconds (out of file descriptors, say), with the reason in
 * why; its own rank's client then fails with that cause instead of waiting for ranks the root
 * cannot let in. The record ends when that root accepts again or exits. */
int braid_boot_root_accept_failing(const braid_boot_addr_t *root, double min_s, char *why,
                                   size_t len);
braid_result_t braid_boot_root_start_handle(braid_boot_addr_t *addr, double timeout_s,
                                            braid_boot_root_t **root_p);
/* The same, listening on every address of this host (dual-stack [::], else 0.0.0.0) with
 * addr's port (on addr alone when addr->loopback_only): rank 0 of an id from a root string
 * (BRAID_ROOT, MASTER_ADDR, braid_unique_id_from_root), whose name may resolve on this host to
 * another address than the one the other ranks connect to (Debian maps the hostname to 127.0.1.1).
 * Every hello is authenticated with the job secret. */
braid_result_t braid_boot_root_start_every(braid_boot_addr_t *addr, double timeout_s,
                                           braid_boot_root_t **root_p);
/* Stops the service of a root nobody will join (a split that failed after its leader created
 * the id): it exits within one poll, closing its listener. Takes the place of
 * braid_boot_root_wait (frees the handle). */
void braid_boot_root_stop(braid_boot_root_t *root);
/* Waits up to timeout_s until the service exited or is quiescent (no collective in progress
 * and every queued reply handed to the kernel; call it after this process's own rank closed
 * its connection, so no new collective can complete), then frees the handle. The service
 * itself goes on until its ranks closed. Returns BRAID_ERR_TIMEOUT if it did not settle. */
braid_result_t braid_boot_root_wait(braid_boot_root_t *root, double timeout_s);

/* Connects to the root and waits until all nranks ranks are in. Connecting is retried with
 * backoff until the deadline (ranks may start before the root listens), and so is a
 * connection the root closes before answering the hello (it closes those beyond its limit of
 * waiting connections, and a wrong secret: named in the error when the deadline passes).
 * timeout_s (<= 0 = no deadline) applies to this call and to every later call on bs;
 * abort_flag (may be NULL) must stay valid until braid_boot_close. Errors from the root
 * (another rank's bad nranks, a duplicate rank, a timeout naming the missing ranks) come back
 * with their code.
 * After any error (including BRAID_ERR_ABORTED and BRAID_ERR_TIMEOUT) bs is unusable: every
 * later call returns the same error; only braid_boot_report_error and braid_boot_close
 * remain useful. Not thread-safe: one thread at a time per bs. */
/* The process keeps one descriptor in reserve from library load on (core/fd_reserve.c): a
 * rank whose bootstrap socket() fails with EMFILE/ENFILE releases it (1: released; 0: none
 * held, or the program closed it), connects, tells the root the error (so the job fails at
 * once, not at BRAID_TIMEOUT) and takes the reserve back. */
int braid_fd_reserve_release(void);
void braid_fd_reserve_restore(void);

braid_result_t braid_boot_init(braid_bootstrap_t **bs_p, const braid_boot_addr_t *root, int rank,
                               int nranks, double timeout_s, const volatile int *abort_flag);
/* all must hold nranks * bytes; this rank's bytes are copied to all + rank * bytes (mine
 * may be all + rank * bytes). Every rank must pass the same bytes (else BRAID_ERR_MISMATCH on
 * all ranks); nranks * bytes is limited to 64 MiB. */
braid_result_t braid_boot_allgather(braid_bootstrap_t *bs, const void *mine, void *all,
                                    size_t bytes);
braid_result_t braid_boot_barrier(braid_bootstrap_t *bs);
/* Reports an error to the root, which forwards it to all ranks: their next bootstrap call
 * (and braid_boot_poll_error) returns BRAID_ERR_REMOTE with "rank R: msg". Best effort,
 * ignores the abort flag, waits at most 2 s. */
void braid_boot_report_error(braid_bootstrap_t *bs, const char *msg);
/* The same with the code the other ranks' waits return (a braid_result_t < 0, e.g.
 * BRAID_ERR_MISMATCH; anything else is BRAID_ERR_REMOTE). */
void braid_boot_report_code(braid_bootstrap_t *bs, braid_result_t code, const char *msg);
/* Non-blocking: returns the error the root forwarded (another rank's report, a rank that
 * closed its connection, a root that died) or the sticky error of bs, else BRAID_SUCCESS.
 * Sets the last-error message when it returns an error. */
braid_result_t braid_boot_poll_error(braid_bootstrap_t *bs);
/* Closes the connection (the root counts this rank as done) and frees bs; NULL is a no-op. */
void braid_boot_close(braid_bootstrap_t *bs);

/* Wire parsing exposed for the fuzzer: returns 0 if buf[0..len) is a well-formed hello and
 * fills the fields, else BRAID_ERR_INVALID_ARG. */
typedef struct {
    uint32_t magic, version;
    int32_t rank, nranks;
    uint8_t nonce[BRAID_NONCE_BYTES]; /* the client's, fresh for each connection */
} braid_boot_hello_t;
#define BRAID_BOOT_HELLO_BYTES 32
braid_result_t braid_boot_hello_parse(const void *buf, size_t len, braid_boot_hello_t *h_p);
void braid_boot_hello_pack(const braid_boot_hello_t *h, uint8_t out[BRAID_BOOT_HELLO_BYTES]);
/* The proofs of the hello handshake: HMAC(K, label | hello | root nonce) with the root's key
 * K = HMAC(secret, "braid-boot-key" | port), port that of the root (its listener's; the one in
 * the client's id), with the root's label (root = 1) or the client's (root = 0). Exposed for
 * tests that speak the protocol by hand. */
void braid_boot_proof(const uint8_t secret[BRAID_SECRET_BYTES], int port, int root,
                      const uint8_t hello[BRAID_BOOT_HELLO_BYTES],
                      const uint8_t nonce[BRAID_NONCE_BYTES], uint8_t out[BRAID_SHA256_BYTES]);

/* Parses "host:port", "[v6]:port" or "host" (with default_port) into addr (numeric or
 * resolved with getaddrinfo); errors name the string. */
braid_result_t braid_boot_parse_hostport(const char *s, int default_port,
                                         struct sockaddr_storage *addr_p, socklen_t *len_p);

/* Picks the address the root should listen on: BRAID_SOCKET_IFNAME's first address if set,
 * else the first non-loopback interface that is up, else 127.0.0.1. */
braid_result_t braid_boot_local_addr(struct sockaddr_storage *addr_p, socklen_t *len_p);

/* The local address a data listener should use (port 0): BRAID_SOCKET_IFNAME's if set, else
 * the source address the kernel routes towards the bootstrap root (root may be NULL or
 * empty), else braid_boot_local_addr's choice. */
braid_result_t braid_boot_listen_addr(const braid_boot_addr_t *root, struct sockaddr_storage *a_p,
                                      socklen_t *len_p);

/* Constant-time comparison of two secrets (0 if equal). */
int braid_secret_cmp(const uint8_t *a, const uint8_t *b);

/* The port of an IPv4 or IPv6 address (host order). */
int braid_boot_addr_port(const struct sockaddr_storage *a);

/* Formats an address as "1.2.3.4:5" or "[::1]:5" (no secret); never fails. */
void braid_boot_addr_str(const struct sockaddr_storage *addr, char *buf, size_t len);

/* The environment contract of braid_comm_init_env:
 * - rank/nranks from the first complete pair (both set) of BRAID_RANK/BRAID_NRANKS,
 *   RANK/WORLD_SIZE (torchrun), OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE, PMI_RANK/PMI_SIZE,
 *   SLURM_PROCID/SLURM_NTASKS (innermost launcher first; a lone half of an earlier pair is
 *   skipped, and is an error only when no pair is complete). Another complete pair may
 *   disagree (nested launchers; Slurm's describes the allocation), except that a 1-rank job
 *   under a non-Slurm pair of several processes is BRAID_ERR_INVALID_USAGE naming both: stale
 *   variables would otherwise make every process a silent 1-rank job;
 * - the root address from BRAID_ROOT (host:port), else MASTER_ADDR with port MASTER_PORT + 1
 *   (MASTER_PORT itself belongs to torch's TCPStore, which torchrun's agent or rank 0 of
 *   torch.distributed already listens on);
 * - the secret from BRAID_SECRET (32 hex digits), else derived from identifiers every rank of
 *   the job sees (root address, nranks, TORCHELASTIC_RUN_ID, Open MPI / PMIx / Slurm job ids),
 *   with a warning that the bootstrap is then not authenticated;
 * - *is_root_p = (rank == 0): that rank calls braid_boot_root_start(root_p, timeout) before
 *   braid_boot_init.
 * Missing or malformed variables give BRAID_ERR_INVALID_ARG naming them. Outputs are set
 * only on success. */
/* The root of braid_unique_id_from_root: addr from "host:port" (BRAID_ROOT grammar), the
 * secret from BRAID_SECRET, else derived from the address and the job identifiers (with a
 * warning), rank0_hosts = 1. Errors name the argument. */
braid_result_t braid_boot_fixed_root(const char *hostport, braid_boot_addr_t *root_p);
/* 1 when a root string ("host:port", "[v6]:port", "host") is a loopback literal (127.0.0.0/8,
 * ::1, ::ffff:127.x) or "localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"
 * (any case); decided from the spelling alone, without resolving the name. */
int braid_boot_root_loopback_only(const char *hostport);

braid_result_t braid_boot_env_resolve(int *rank_p, int *nranks_p, braid_boot_addr_t *root_p,
                                      int *is_root_p);
/* The local-rank variable of the launcher braid_boot_env_resolve takes the rank from
 * (BRAID_LOCAL_RANK, LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID),
 * or NULL when no rank/size pair is complete. For PMI without MPI_LOCALRANKID (srun
 * --mpi=pmi2): SLURM_LOCALID when Slurm's pair has the same rank and size. */
const char *braid_boot_env_local_rank_var(void);

#endif
