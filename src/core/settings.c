/* Settings every rank of a communicator must share, agreed at init in one
 * bootstrap allgather.
 *
 * Each rank reads its BRAID_* variables itself, and some of them shape what two
 * ranks must do alike: the slot size and count of every connection
 * (BRAID_CHUNK_SIZE, BRAID_NSLOTS: in shared memory the receiver sizes the
 * slots and the sender cuts its chunks from its own setting), the rings
 * (BRAID_NCHANNELS), the transport of each pair (BRAID_TRANSPORT), the direct
 * segments (BRAID_DIRECT_BLOCK), the send/recv messages over tcp
 * (BRAID_P2P_TCP_CHUNK_SIZE), the fused calls of a group
 * (BRAID_GROUP_FUSE_BYTES), and the cost model's inputs (the slot count, the
 * point-to-point chunk that follows BRAID_CHUNK_SIZE, the forced transport):
 * ranks whose models differ choose different algorithms for some counts and
 * hang, which the choice digest of algos/select.c (powers of two only) does not
 * always see. So init compares them, before any connection is made, and a
 * mismatch fails on every rank with the same message naming the variable, the
 * first rank that differs from rank 0 and both values.
 *
 * BRAID_ALGO is compared by that digest (its first byte), the tuning file and
 * measurement are rank 0's (select.c), the device engine's settings by the
 * device engine. */
#include "core/settings.h"
#include "core/config.h"
#include "core/log.h"
#include "transport/shm_direct.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t chunk, direct_block;
    int64_t p2p_tcp_chunk, fuse_bytes;
    int32_t nslots, nchannels;
    char transport[8];
} settings_t;

enum { S_CHUNK, S_NSLOTS, S_NCHANNELS, S_TRANSPORT, S_DIRECT_BLOCK, S_P2P_TCP_CHUNK, S_FUSE, S_N };

static const char *const names[S_N] = {"CHUNK_SIZE",      "NSLOTS",       "NCHANNELS",
                                       "TRANSPORT",       "DIRECT_BLOCK", "P2P_TCP_CHUNK_SIZE",
                                       "GROUP_FUSE_BYTES"};

/* Setting k of s as text (what the message shows, and what is compared). */
static void value(const settings_t *s, int k, char *out, size_t len)
{
    switch (k) {
    case S_CHUNK:
        snprintf(out, len, "%llu", (unsigned long long)s->chunk);
        break;
    case S_NSLOTS:
        snprintf(out, len, "%d", (int)s->nslots);
        break;
    case S_NCHANNELS:
        snprintf(out, len, "%d", (int)s->nchannels);
        break;
    case S_TRANSPORT:
        snprintf(out, len, "%s", s->transport[0] ? s->transport : "(unset)");
        break;
    case S_DIRECT_BLOCK:
        snprintf(out, len, "%llu", (unsigned long long)s->direct_block);
        break;
    case S_P2P_TCP_CHUNK:
        snprintf(out, len, "%lld", (long long)s->p2p_tcp_chunk);
        break;
    default:
        snprintf(out, len, "%lld", (long long)s->fuse_bytes);
        break;
    }
}

/* BRAID_DIRECT_BLOCK: bytes per block of the direct segments, a multiple of 64;
 * 0 = off; auto = BRAID_DIRECT_BLOCK_DEFAULT (comm.c's setup_direct says why).
 */
static braid_result_t read_direct_block(struct braid_comm *c)
{
    int64_t v;
    c->direct_block_auto = braid_param_is_auto("DIRECT_BLOCK");
    if (c->direct_block_auto)
        v = (int64_t)BRAID_DIRECT_BLOCK_DEFAULT;
    else
        BRAID_CHECK(braid_param_int("DIRECT_BLOCK", &v));
    if (v != 0 && (v < 4096 || v > ((int64_t)64 << 20)))
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "BRAID_DIRECT_BLOCK=%lld is outside [4096, 64 MiB] (0 = off)",
                               (long long)v);
    c->direct_block = (size_t)v & ~(size_t)63;
    return BRAID_SUCCESS;
}

braid_result_t braid_settings_agree(struct braid_comm *c)
{
    const struct braid_comm *p = braid_settings_parent();
    if (p) { /* (the chunk, slots, channels and transport: read_tuning, comm.c) */
        c->direct_block = p->direct_block;
        c->direct_block_auto = p->direct_block_auto;
        c->p2p_tcp_chunk_set = p->p2p_tcp_chunk_set;
        c->fuse_bytes_set = p->fuse_bytes_set;
    } else {
        BRAID_CHECK(read_direct_block(c));
        BRAID_CHECK(braid_param_int("P2P_TCP_CHUNK_SIZE", &c->p2p_tcp_chunk_set));
        BRAID_CHECK(braid_param_int("GROUP_FUSE_BYTES", &c->fuse_bytes_set));
    }
    settings_t mine;
    memset(&mine, 0, sizeof(mine));
    mine.chunk = c->chunk_bytes;
    mine.direct_block = c->direct_block;
    mine.nslots = c->nslots;
    mine.nchannels = c->nchannels;
    if (c->transport) snprintf(mine.transport, sizeof(mine.transport), "%s", c->transport->name);
    mine.p2p_tcp_chunk = c->p2p_tcp_chunk_set;
    mine.fuse_bytes = c->fuse_bytes_set;
    if (c->nranks == 1) return BRAID_SUCCESS;
    settings_t *all = malloc((size_t)c->nranks * sizeof(*all));
    if (!all) return braid_set_error(BRAID_ERR_NOMEM, "out of memory comparing settings");
    braid_result_t res = braid_boot_allgather(c->boot, &mine, all, sizeof(mine));
    for (int r = 1; res == BRAID_SUCCESS && r < c->nranks; r++)
        for (int k = 0; k < S_N; k++) {
            char v0[32], vr[32];
            value(&all[0], k, v0, sizeof(v0));
            value(&all[r], k, vr, sizeof(vr));
            if (!strcmp(v0, vr)) continue;
            res = braid_set_error(BRAID_ERR_INVALID_USAGE,
                                  "rank %d has BRAID_%s=%s but rank 0 %s: set the same on every "
                                  "rank",
                                  r, names[k], vr, v0);
            break;
        }
    free(all);
    return res;
}
