/* braid_comm_split as real processes: groups by parity, by blocks with a different faked host
 * per rank (so the sub-communicators connect over tcp), no color, keys that reverse the order,
 * a split of a split, the parent still usable (also with operations pending), and collectives
 * on every sub-communicator checked bit-exactly against the reference (tests/common/data.c);
 * a split that fails after its leader opened the new root stops that root; the new
 * communicator's secret is not in what the split sends over the parent's bootstrap. */
#include "core/bootstrap.h"
#include "core/comm.h"
#include "core/split.h"
#include "data.h"
#include "mp.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* allreduce (sum, avg), broadcast from the last rank, reduce_scatter and allgather on comm. */
static int check_colls(braid_comm_t comm, int who, int seed)
{
    int r, n;
    MP_OK(who, braid_comm_rank(comm, &r));
    MP_OK(who, braid_comm_size(comm, &n));
    size_t count = 1009;
    size_t bytes = count * (size_t)n * 8;
    char *in = malloc(bytes), *out = malloc(bytes);
    MP_CHECK(who, in && out, "malloc");
    const braid_redop_t ops[] = {BRAID_SUM, BRAID_AVG, BRAID_MAX};
    for (int k = 0; k < 3; k++) {
        data_fill(in, BRAID_FLOAT64, ops[k], r, 0, count, seed);
        MP_OK(who, braid_allreduce(in, out, count, BRAID_FLOAT64, ops[k], comm));
        MP_CHECK(who,
                 !data_check_reduced(out, BRAID_FLOAT64, ops[k], n, 0, count, seed, "allreduce"),
                 "allreduce on a split, n=%d", n);
    }
    data_fill(in, BRAID_INT32, BRAID_SUM, r, 0, count, seed);
    MP_OK(who, braid_broadcast(in, out, count, BRAID_INT32, n - 1, comm));
    MP_CHECK(who, !data_check_rank(out, BRAID_INT32, BRAID_SUM, n - 1, 0, count, seed, "bcast"),
             "broadcast on a split, n=%d", n);
    data_fill(in, BRAID_INT64, BRAID_SUM, r, 0, count * (size_t)n, seed);
    MP_OK(who, braid_reduce_scatter(in, out, count, BRAID_INT64, BRAID_SUM, comm));
    MP_CHECK(who,
             !data_check_reduced(out, BRAID_INT64, BRAID_SUM, n, (size_t)r * count, count, seed,
                                 "reduce_scatter"),
             "reduce_scatter on a split, n=%d", n);
    data_fill(in, BRAID_UINT8, BRAID_SUM, r, 0, count, seed);
    MP_OK(who, braid_allgather(in, out, count, BRAID_UINT8, comm));
    for (int b = 0; b < n; b++)
        MP_CHECK(who,
                 !data_check_rank(out + (size_t)b * count, BRAID_UINT8, BRAID_SUM, b, 0, count,
                                  seed, "allgather"),
                 "allgather block %d on a split, n=%d", b, n);
    free(in);
    free(out);
    return 0;
}

static int expect_shape(braid_comm_t c, int who, int want_rank, int want_size)
{
    int r, n;
    MP_OK(who, braid_comm_rank(c, &r));
    MP_OK(who, braid_comm_size(c, &n));
    MP_CHECK(who, r == want_rank && n == want_size, "split gave rank %d of %d, expected %d of %d",
             r, n, want_rank, want_size);
    return 0;
}

static int by_parity(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    braid_comm_t sub;
    MP_OK(rank, braid_comm_split(comm, rank % 2, rank, &sub));
    MP_CHECK(rank, sub != NULL, "no communicator");
    int size = rank % 2 ? n / 2 : (n + 1) / 2;
    if (expect_shape(sub, rank, rank / 2, size)) return 1;
    if (check_colls(sub, rank, 3)) return 1;
    /* The parent is still usable, interleaved with the child. */
    if (check_colls(comm, rank, 4)) return 1;
    if (check_colls(sub, rank, 5)) return 1;
    MP_OK(rank, braid_comm_destroy(sub));
    return check_colls(comm, rank, 6);
}

/* Groups of 2 consecutive ranks; each rank claims its own host, so the pairs connect with tcp
 * and the split communicator sees 2 hosts. */
static int by_host_blocks(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    char host[32];
    snprintf(host, sizeof(host), "fakehost-%d", rank);
    setenv("BRAID_HOSTNAME", host, 1);
    braid_comm_t sub;
    MP_OK(rank, braid_comm_split(comm, rank / 2, 0, &sub));
    /* Nothing failed, so there is no message (choosing the network transport once read the
     * default BRAID_IB_GID_INDEX=-1 as a bad value and left that as the thread's error). */
    MP_CHECK(rank, !braid_last_error()[0], "a successful split left the error '%s'",
             braid_last_error());
    int size = rank / 2 == (n - 1) / 2 && n % 2 ? 1 : 2;
    if (expect_shape(sub, rank, rank % 2, size)) return 1;
    if (check_colls(sub, rank, 7)) return 1;
    MP_OK(rank, braid_comm_destroy(sub));
    return 0;
}

static int nocolor_and_reversed(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    braid_comm_t sub = (braid_comm_t)(uintptr_t)1;
    int color = rank == 0 ? BRAID_SPLIT_NOCOLOR : 5;
    MP_OK(rank, braid_comm_split(comm, color, n - rank, &sub));
    if (rank == 0) {
        MP_CHECK(rank, sub == NULL, "NOCOLOR gave a communicator");
    } else {
        /* keys n-1 .. 1 reverse the order of ranks 1..n-1 */
        if (expect_shape(sub, rank, n - 1 - rank, n - 1)) return 1;
        int32_t me = rank, all[64];
        MP_OK(rank, braid_allgather(&me, all, 1, BRAID_INT32, sub));
        for (int i = 0; i < n - 1; i++)
            MP_CHECK(rank, all[i] == n - 1 - i, "position %d holds old rank %d", i, all[i]);
        if (check_colls(sub, rank, 8)) return 1;
        MP_OK(rank, braid_comm_destroy(sub));
    }
    /* Everyone with the same key: ties keep the old rank order. */
    MP_OK(rank, braid_comm_split(comm, 0, 42, &sub));
    if (expect_shape(sub, rank, rank, n)) return 1;
    MP_OK(rank, braid_comm_destroy(sub));
    return 0;
}

static int split_of_split(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    braid_comm_t a, b;
    MP_OK(rank, braid_comm_split(comm, rank < n / 2, rank, &a));
    int ar, an;
    MP_OK(rank, braid_comm_rank(a, &ar));
    MP_OK(rank, braid_comm_size(a, &an));
    MP_OK(rank, braid_comm_split(a, ar % 2, -ar, &b));
    int bn = ar % 2 ? an / 2 : (an + 1) / 2;
    if (expect_shape(b, rank, bn - 1 - ar / 2, bn)) return 1;
    if (check_colls(b, rank, 9)) return 1;
    if (check_colls(a, rank, 10)) return 1;
    MP_OK(rank, braid_comm_destroy(a)); /* the grandchild does not depend on its parent */
    if (check_colls(b, rank, 11)) return 1;
    MP_OK(rank, braid_comm_destroy(b));
    return 0;
}

static int with_pending_ops(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    size_t count = 100003;
    float *buf = malloc(count * sizeof(float));
    MP_CHECK(rank, buf != NULL, "malloc");
    data_fill(buf, BRAID_FLOAT32, BRAID_SUM, rank, 0, count, 12);
    braid_request_t req;
    MP_OK(rank, braid_iallreduce(buf, buf, count, BRAID_FLOAT32, BRAID_SUM, comm, &req));
    braid_comm_t sub;
    MP_OK(rank, braid_comm_split(comm, 0, rank, &sub));
    MP_OK(rank, braid_wait(req));
    MP_CHECK(rank,
             !data_check_reduced(buf, BRAID_FLOAT32, BRAID_SUM, n, 0, count, 12, "iallreduce"),
             "iallreduce before a split");
    free(buf);
    if (check_colls(sub, rank, 13)) return 1;
    MP_OK(rank, braid_comm_destroy(sub));
    return 0;
}

static int bad_args(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    (void)n;
    braid_comm_t sub;
    MP_CHECK(rank, braid_comm_split(comm, 0, 0, NULL) == BRAID_ERR_INVALID_ARG, "NULL out");
    MP_CHECK(rank, strstr(braid_last_error(), "newcomm_p"), "message: %s", braid_last_error());
    MP_CHECK(rank, braid_comm_split(NULL, 0, 0, &sub) == BRAID_ERR_INVALID_ARG, "NULL comm");
    return 0;
}

TestSuite(split, .timeout = 120);

Test(split, group_size_and_order_pure)
{
    int32_t colors[] = {1, 0, 1, -1, 1, 0};
    int32_t keys[] = {5, 0, 5, 0, -3, 0};
    int members[6], nr = -1;
    cr_assert_eq(braid_split_group(6, colors, keys, 2, members, &nr), 3);
    cr_assert(members[0] == 4 && members[1] == 0 && members[2] == 2);
    cr_assert_eq(nr, 2);
    cr_assert_eq(braid_split_group(6, colors, keys, 3, members, &nr), 0);
    cr_assert_eq(braid_split_group(6, colors, keys, 5, members, &nr), 2);
    cr_assert(members[0] == 1 && members[1] == 5 && nr == 1);
}

Test(split, by_parity_n5)
{
    cr_assert_eq(mp_run(5, by_parity, NULL, 100), 0, "some rank failed (see stderr)");
}

Test(split, by_host_blocks_over_tcp_n5)
{
    cr_assert_eq(mp_run(5, by_host_blocks, NULL, 100), 0, "some rank failed (see stderr)");
}

Test(split, nocolor_and_reversed_keys_n4)
{
    cr_assert_eq(mp_run(4, nocolor_and_reversed, NULL, 100), 0, "some rank failed (see stderr)");
}

Test(split, split_of_split_n6)
{
    cr_assert_eq(mp_run(6, split_of_split, NULL, 100), 0, "some rank failed (see stderr)");
}

Test(split, after_pending_nonblocking_n3)
{
    cr_assert_eq(mp_run(3, with_pending_ops, NULL, 100), 0, "some rank failed (see stderr)");
}

Test(split, bad_arguments)
{
    cr_assert_eq(mp_run(1, bad_args, NULL, 30), 0, "some rank failed (see stderr)");
}

/* The split's second exchange (the leaders' ids) fails after rank 0, a leader, opened the new
 * communicator's root: rank 1 sends a block of another size there (the root fails the
 * exchange for both). Nobody will ever join that root: it must stop at once, not listen (with
 * its thread) forever. Rank 1 speaks the split's protocol on the parent's bootstrap itself. */
static int failed_split(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    (void)arg;
    if (rank == 1) {
        int32_t mine[2] = {-1, 0}, all[4]; /* (color, key): no color */
        MP_OK(rank, braid_boot_allgather(comm->boot, mine, all, sizeof(mine)));
        char odd[4] = {0}, odds[8];
        braid_result_t r = braid_boot_allgather(comm->boot, odd, odds, sizeof(odd));
        MP_CHECK(rank, r == BRAID_ERR_MISMATCH, "%s: %s", braid_strerror(r), braid_last_error());
        return 0;
    }
    int base = braid_boot_root_count();
    struct braid_comm *nc = NULL;
    braid_result_t r = braid_comm_split_internal(comm, 0, 0, 0, &nc);
    MP_CHECK(rank, r == BRAID_ERR_MISMATCH && !nc, "%s: %s", braid_strerror(r), braid_last_error());
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    double dt = 0;
    while (braid_boot_root_count() > base && dt < 5) {
        usleep(20 * 1000);
        clock_gettime(CLOCK_MONOTONIC, &t);
        dt = (double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) * 1e-9;
    }
    MP_CHECK(rank, braid_boot_root_count() <= base && dt < 1.5,
             "%d root services (%d before the split) after %.1f s", braid_boot_root_count(), base,
             dt);
    return 0;
}

Test(split, failed_split_stops_the_new_root)
{
    setenv("BRAID_TIMEOUT", "20", 1);
    setenv("BRAID_DEBUG", "NONE", 1);
    /* destroy reports an error (the parent's bootstrap failed): the job still exits 0 */
    cr_assert_eq(mp_run(2, failed_split, NULL, 60), 0, "some rank failed (see stderr)");
}

/* What a split sends over the parent's bootstrap (authenticated, not encrypted) must not hold
 * the new communicator's secret, nor either half of it. Rank 1 speaks the split's protocol
 * itself with no color and so receives exactly what every member receives, rank 0's id
 * (split.c's split_id_t: 8 bytes, then the id); rank 0 then hands over its new communicator's
 * secret on a third exchange (only this test does that) and rank 1 searches the bytes. */
static int split_secret_not_sent(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    (void)arg;
    enum { ID_ENTRY = 8 + BRAID_UNIQUE_ID_BYTES };
    uint8_t secret[BRAID_SECRET_BYTES] = {0}, secrets[2 * BRAID_SECRET_BYTES];
    if (rank == 1) {
        int32_t mine[2] = {-1, 0}, all[4];
        MP_OK(rank, braid_boot_allgather(comm->boot, mine, all, sizeof(mine)));
        uint8_t none[ID_ENTRY] = {0}, ids[2 * ID_ENTRY];
        MP_OK(rank, braid_boot_allgather(comm->boot, none, ids, sizeof(none)));
        MP_OK(rank, braid_boot_allgather(comm->boot, secret, secrets, sizeof(secret)));
        const uint8_t *s = secrets; /* rank 0's */
        int half = BRAID_SECRET_BYTES / 2;
        MP_CHECK(rank, ids[0] == 1, "rank 0 created no id");
        MP_CHECK(rank, !memmem(ids, sizeof(ids), s, (size_t)half),
                 "the split's exchange holds the first half of the new secret");
        MP_CHECK(rank, !memmem(ids, sizeof(ids), s + half, (size_t)half),
                 "the split's exchange holds the second half of the new secret");
        return 0;
    }
    struct braid_comm *nc = NULL;
    MP_OK(rank, braid_comm_split_internal(comm, 0, 0, 0, &nc));
    MP_CHECK(rank, nc && nc->nranks == 1, "a one-rank communicator");
    memcpy(secret, nc->boot_addr.secret, sizeof(secret));
    MP_OK(rank, braid_boot_allgather(comm->boot, secret, secrets, sizeof(secret)));
    MP_OK(rank, braid_comm_destroy(nc));
    return 0;
}

Test(split, new_secret_not_sent)
{
    setenv("BRAID_TIMEOUT", "20", 1);
    cr_assert_eq(mp_run(2, split_secret_not_sent, NULL, 60), 0, "some rank failed (see stderr)");
}
