/* braid_comm_split: ranks of a communicator that pass the same color form a new communicator,
 * ranked by (key, old rank), as MPI_Comm_split and ncclCommSplit.
 *
 * Protocol, all on the parent's bootstrap (so it is collective over the parent):
 *   1. allgather (color, key) of every rank; each rank computes its group and position;
 *   2. the group's new rank 0 (its leader) creates a unique id (which starts a bootstrap root
 *      service in the leader's process, on the address the parent's bootstrap uses), and a
 *      second allgather hands every rank its leader's id (with a flag saying whether the
 *      leader managed to create it); if that allgather fails the leader stops its root;
 *   3. each member calls braid_comm_init_rank with that id: the new communicator has its own
 *      bootstrap, connections and sequence numbers, and is destroyed independently.
 * Ranks with a negative color take part in both allgathers and get NULL.
 *
 * The new communicator's secret never goes on the wire: the parent's bootstrap connections are
 * authenticated but not encrypted, so the id sent in step 2 carries a fresh random salt in its
 * secret field, and every member (the leader for its root too) uses
 * HMAC(parent secret, "braid-split-secret" | salt)[0:16] (split_secret). Who saw the exchange
 * learns the salt, which is worthless without the parent's secret. */
#include "core/split.h"
#include "core/hmac.h"
#include "core/log.h"
#include "core/worker.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    int32_t color, key;
} split_entry_t;

typedef struct {
    int32_t ok; /* 1 if id is valid (the leader created it) */
    int32_t pad;
    braid_unique_id_t id;
} split_id_t;

int braid_split_group(int n, const int32_t *colors, const int32_t *keys, int rank, int *members,
                      int *newrank_p)
{
    int32_t color = colors[rank];
    if (color < 0) return 0;
    int m = 0;
    for (int r = 0; r < n; r++) {
        if (colors[r] != color) continue;
        /* Insertion by (key, rank): ranks arrive in increasing order, so ties keep it. */
        int i = m++;
        while (i > 0 && keys[members[i - 1]] > keys[r]) {
            members[i] = members[i - 1];
            i--;
        }
        members[i] = r;
    }
    for (int i = 0; i < m; i++)
        if (members[i] == rank) *newrank_p = i;
    return m;
}

static void derive_secret(const uint8_t *parent_secret, const uint8_t *salt, uint8_t *secret)
{
    uint8_t mac[BRAID_SHA256_BYTES];
    braid_auth_mac(parent_secret, BRAID_SECRET_BYTES, "braid-split-secret", salt,
                   BRAID_SECRET_BYTES, NULL, 0, mac);
    memcpy(secret, mac, BRAID_SECRET_BYTES);
}

/* The new communicator's id from the leader's id as sent (its secret field the salt): the same
 * address, the secret derived from the parent's. */
static braid_result_t split_secret(const uint8_t *parent_secret, const braid_unique_id_t *sent,
                                   braid_unique_id_t *id_p)
{
    braid_boot_addr_t a;
    BRAID_CHECK(braid_boot_id_decode(sent, &a));
    derive_secret(parent_secret, a.secret, a.secret);
    braid_boot_id_encode(&a, id_p);
    return BRAID_SUCCESS;
}

/* The leader's id as sent (sent_p, a fresh salt in its secret field) and the new
 * communicator's (id_p, whose root this process now hosts). */
static braid_result_t leader_id(struct braid_comm *comm, braid_unique_id_t *sent_p,
                                braid_unique_id_t *id_p)
{
    uint8_t salt[BRAID_SECRET_BYTES], secret[BRAID_SECRET_BYTES];
    BRAID_CHECK(braid_boot_random_secret(salt));
    derive_secret(comm->boot_addr.secret, salt, secret);
    /* The new root listens where the parent's bootstrap goes, not on whichever interface
     * braid_get_unique_id would pick. */
    braid_unique_id_t id;
    BRAID_CHECK(braid_unique_id_near(&comm->boot_addr, secret, &id));
    braid_boot_addr_t a;
    braid_result_t res = braid_boot_id_decode(&id, &a);
    if (res < 0) {
        braid_unique_id_abandon(&id);
        return res;
    }
    memcpy(a.secret, salt, BRAID_SECRET_BYTES);
    braid_boot_id_encode(&a, sent_p);
    *id_p = id;
    return BRAID_SUCCESS;
}

static _Thread_local int internal_split;
static _Thread_local const char *parent_host;

int braid_split_is_internal(void)
{
    return internal_split;
}

const char *braid_split_parent_host(void)
{
    return internal_split ? parent_host : NULL;
}

braid_result_t braid_comm_split_internal(struct braid_comm *comm, int color, int key, int quiet_log,
                                         struct braid_comm **newcomm_p)
{
    braid_result_t res = BRAID_SUCCESS;
    int n = comm->nranks;
    split_entry_t mine = {.color = color < 0 ? -1 : color, .key = key};
    split_entry_t *all = calloc((size_t)n, sizeof(*all));
    int32_t *colors = calloc((size_t)n, sizeof(*colors)), *keys = calloc((size_t)n, sizeof(*keys));
    int *members = calloc((size_t)n, sizeof(*members));
    split_id_t *ids = calloc((size_t)n, sizeof(*ids));
    if (!all || !colors || !keys || !members || !ids) {
        res = braid_set_error(BRAID_ERR_NOMEM, "comm_split: out of memory for %d ranks", n);
        goto out;
    }
    BRAID_CHECK_GOTO(braid_boot_allgather(comm->boot, &mine, all, sizeof(mine)), res, out);
    for (int r = 0; r < n; r++) {
        colors[r] = all[r].color;
        keys[r] = all[r].key;
    }
    int newrank = 0;
    int m = braid_split_group(n, colors, keys, comm->rank, members, &newrank);
    split_id_t myid;
    memset(&myid, 0, sizeof(myid));
    braid_unique_id_t newid; /* the leader's, with the new communicator's secret */
    memset(&newid, 0, sizeof(newid));
    braid_result_t id_res = BRAID_SUCCESS;
    if (m > 0 && newrank == 0) {
        id_res = leader_id(comm, &myid.id, &newid);
        myid.ok = id_res == BRAID_SUCCESS;
    }
    res = braid_boot_allgather(comm->boot, &myid, ids, sizeof(myid));
    if (res < 0) {
        /* Nobody will join the root this rank just opened: stop it (else its thread and
         * listener would wait for the group until its timeout). */
        if (myid.ok) braid_unique_id_abandon(&newid);
        goto out;
    }
    if (m == 0) {
        braid_debug(INIT, "comm_split: rank %d has no color and joins no group", comm->rank);
        *newcomm_p = NULL;
        goto out;
    }
    if (id_res < 0) {
        res = id_res;
        goto out;
    }
    int leader = members[0];
    if (!ids[leader].ok) {
        res = braid_set_error(BRAID_ERR_REMOTE,
                              "comm_split: rank %d, the first rank of color %d, could not create "
                              "the new communicator's unique id",
                              leader, (int)colors[comm->rank]);
        goto out;
    }
    braid_debug(INIT, "comm_split: rank %d -> color %d, rank %d of %d (first rank %d)", comm->rank,
                (int)colors[comm->rank], newrank, m, leader);
    if (leader != comm->rank) {
        res = split_secret(comm->boot_addr.secret, &ids[leader].id, &newid);
        if (res < 0) goto out;
    }
    struct braid_comm *nc = NULL;
    internal_split = quiet_log;
    parent_host = comm->peers ? comm->peers[comm->rank].host : NULL;
    res = braid_comm_init_rank(&nc, m, newid, newrank);
    internal_split = 0;
    parent_host = NULL;
    if (quiet_log) braid_log_set_rank(comm->rank);
    if (res < 0) goto out;
    nc->timeout_s = comm->timeout_s; /* braid_comm_set_timeout's value carries over */
    *newcomm_p = nc;
out:
    free(all);
    free(colors);
    free(keys);
    free(members);
    free(ids);
    return res;
}

/* A split that passed its descriptor exchange and then failed in the bootstrap may have
 * failed because a peer found a mismatch (it fails the data connections first, then the
 * bootstrap: the root closing on us is only the consequence). Asks the data connections for
 * up to 200 ms and returns their error instead when one has one; else res. */
static braid_result_t peer_cause(struct braid_comm *comm, braid_result_t res)
{
    char saved[512];
    snprintf(saved, sizeof(saved), "%s", braid_last_error());
    uint64_t until = braid_now_ns() + 200000000ull;
    do {
        for (int i = 0; i < comm->nchannels + comm->nranks; i++) {
            braid_conn_t *c = NULL;
            if (i < comm->nchannels)
                c = comm->ring[i].recv;
            else if (comm->p2p_recv)
                c = comm->p2p_recv[i - comm->nchannels];
            if (!c) continue;
            braid_result_t r = c->ops->wait(c, BRAID_WAIT_RECV, braid_now_ns());
            if (r == BRAID_ERR_MISMATCH) return r;
        }
        usleep(2000);
    } while (braid_now_ns() < until);
    return braid_set_error(res, "%s", saved);
}

static braid_result_t split(struct braid_comm *comm, int color, int key, braid_comm_t *newcomm_p)
{
    braid_op_args_t a = {.coll = BRAID_COLL_COMM_SPLIT, .dtype = BRAID_UINT8, .root = -1};
    if (!newcomm_p)
        return braid_coll_reject(
            comm, &a, braid_set_error(BRAID_ERR_INVALID_ARG, "comm_split: newcomm_p is NULL"));
    int err = atomic_load(&comm->error);
    if (err)
        return braid_set_error(err, "comm_split: communicator failed earlier: %s", comm->errmsg);
    /* A split is collective over comm: operations started before it complete first (the
     * worker runs them; they do not use the bootstrap, but keep call order anyway). */
    while (braid_worker_pending(comm)) {
        if (atomic_load(&comm->aborted))
            return braid_set_error(BRAID_ERR_ABORTED, "comm_split: communicator was aborted");
        usleep(100);
    }
    if (atomic_load(&comm->aborted))
        return braid_set_error(BRAID_ERR_ABORTED, "comm_split: communicator was aborted");
    /* The split's own call number: a descriptor exchange with the ring neighbours on the data
     * connections, so a rank that calls a collective meanwhile is a mismatch naming both calls
     * (not two ranks waiting on different channels until the timeout). */
    braid_result_t res = braid_coll_execute(comm, &a);
    if (res < 0) {
        /* Ranks whose predecessor agreed passed the exchange and wait in the bootstrap's
         * allgather below: the root fails it for them with this error. */
        braid_boot_report_code(comm->boot, res, braid_last_error());
        return res;
    }
    struct braid_comm *nc = NULL;
    res = braid_comm_split_internal(comm, color, key, 0, &nc);
    if (res < 0) return peer_cause(comm, res);
    *newcomm_p = nc;
    return BRAID_SUCCESS;
}

braid_result_t braid_comm_split(braid_comm_t comm, int color, int key, braid_comm_t *newcomm_p)
{
    braid_clear_error();
    BRAID_CHECK(braid_comm_enter_call(comm, "comm_split"));
    braid_result_t res = split(comm, color, key, newcomm_p);
    braid_comm_leave_call(comm);
    return res;
}
