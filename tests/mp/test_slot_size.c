/* Slot sizes that disagree between the ends of a connection. In shm the receiver sizes the slots
 * of a connection and the sender writes into them, so a sender that cut its chunks from a larger
 * BRAID_CHUNK_SIZE wrote past the peer's slots (SIGSEGV, or silent overwrites then a confusing
 * error). Checked here at two levels:
 *   transport  send_connect refuses a peer's slots of another size than its own chunks
 *              (BRAID_ERR_INVALID_ARG naming BRAID_CHUNK_SIZE), on shm and tcp alike;
 *   engine     a step whose chunk does not fit the connection's slots (chunk_bytes changed
 *              behind the engine's back) fails with BRAID_ERR_INTERNAL, never writes past the
 *              slot, on the rank that would write and the one that would read (before, rank 0
 *              of the first case died of SIGSEGV, the others overwrote the peer's slots and
 *              then failed on the byte counts). */
#include "data.h"
#include "mp.h"

#include "core/bootstrap.h"
#include "core/comm.h"
#include "transport/transport.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint32_t len;
    uint8_t info[BRAID_CONN_INFO_BYTES];
} blob_t;

/* Each rank sets up a receive connection with its own slot size (4 KiB on rank 0, 8 KiB on
 * rank 1) and connects to the peer's: both send_connects must refuse. */
static int transport_refuses(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    const braid_transport_t *t = braid_transport_by_name((const char *)arg);
    MP_CHECK(rank, t, "transport %s is not built in", (const char *)arg);
    int peer = 1 - rank, channel = 40; /* as the conformance cases: no communicator uses it */
    size_t saved = comm->chunk_bytes;
    comm->chunk_bytes = rank == 0 ? 4096 : 8192;
    braid_conn_t *recv = NULL, *send = NULL;
    blob_t mine = {0}, all[2];
    size_t len = BRAID_CONN_INFO_BYTES;
    MP_OK(rank, t->recv_setup(comm, peer, channel, &recv, mine.info, &len));
    mine.len = (uint32_t)len;
    MP_OK(rank, braid_boot_allgather(comm->boot, &mine, all, sizeof(mine)));
    braid_result_t r = t->send_connect(comm, peer, channel, all[peer].info, all[peer].len, &send);
    comm->chunk_bytes = saved;
    MP_CHECK(rank, r == BRAID_ERR_INVALID_ARG && !send, "%s send_connect gave %s",
             (const char *)arg, braid_strerror(r));
    MP_CHECK(rank, strstr(braid_last_error(), "BRAID_CHUNK_SIZE"), "message: %s",
             braid_last_error());
    MP_OK(rank, braid_boot_barrier(comm->boot));
    recv->ops->close(recv);
    return 0;
}

Test(slot_size, send_connect_refuses_other_slot_sizes, .timeout = 60)
{
    cr_expect_eq(mp_run(2, transport_refuses, "shm", 40), 0, "shm (see stderr)");
    setenv("BRAID_TRANSPORT", "tcp", 1);
    cr_expect_eq(mp_run(2, transport_refuses, "tcp", 40), 0, "tcp (see stderr)");
}

/* Rank `big` cuts 1 MiB chunks where the connections have 128 KiB slots. */
typedef struct {
    int big;
    int allreduce;
} engine_arg_t;

static int engine_refuses(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    const engine_arg_t *a = arg;
    size_t count = (8u << 20) / sizeof(float);
    float *in = data_xmalloc(count * sizeof(float)), *out = data_xmalloc(count * sizeof(float));
    data_fill(in, BRAID_FLOAT32, BRAID_SUM, rank, 0, count, 3);
    MP_CHECK(rank, comm->chunk_bytes == (128u << 10), "chunk %zu", comm->chunk_bytes);
    if (rank == a->big) comm->chunk_bytes = 1u << 20;
    braid_result_t r = a->allreduce
                           ? braid_allreduce(in, out, count, BRAID_FLOAT32, BRAID_SUM, comm)
                           : braid_broadcast(in, out, count, BRAID_FLOAT32, 0, comm);
    comm->chunk_bytes = 128u << 10;
    MP_CHECK(rank, r != BRAID_SUCCESS, "the call succeeded");
    if (rank == a->big)
        MP_CHECK(rank, r == BRAID_ERR_INTERNAL && strstr(braid_last_error(), "slot"), "gave %s: %s",
                 braid_strerror(r), braid_last_error());
    free(in);
    free(out);
    return 0;
}

Test(slot_size, engine_never_writes_past_a_slot, .timeout = 120)
{
    setenv("BRAID_ALGO", "ring", 1);
    setenv("BRAID_DIRECT_BLOCK", "0", 1);
    setenv("BRAID_TIMEOUT", "20", 1);
    engine_arg_t cases[] = {{0, 0}, {1, 0}, {0, 1}, {1, 1}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        cr_expect_eq(mp_run(2, engine_refuses, &cases[i], 60), 0,
                     "rank %d with larger chunks, %s (see stderr)", cases[i].big,
                     cases[i].allreduce ? "all-reduce" : "broadcast");
}
