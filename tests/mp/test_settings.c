/* Settings every rank must share (src/core/settings.c): a communicator whose ranks set
 * BRAID_NSLOTS, BRAID_CHUNK_SIZE, BRAID_NCHANNELS, BRAID_TRANSPORT, BRAID_DIRECT_BLOCK,
 * BRAID_P2P_TCP_CHUNK_SIZE or BRAID_GROUP_FUSE_BYTES differently fails to form, on every rank,
 * with BRAID_ERR_INVALID_USAGE and a message naming the variable, the rank and both values.
 * Before, the slot count and chunk size fed each rank's cost model, so ranks could choose
 * different algorithms for some counts (a hang), which the choice digest missed between powers
 * of two. The communicators here are splits of a working one, made after one rank changed its
 * environment (every rank's settings are read at init, as with per-rank environments); the
 * parent stays usable. hier's own sub-communicators take the parent's settings instead. */
#include "mp.h"

#include "algos/algo.h"
#include "core/comm.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *var, *mine, *theirs; /* rank `odd` sets var=theirs, the others var=mine */
    int odd;
    const char *text; /* the message must contain it */
} mismatch_t;

static int split_refused(braid_comm_t comm, int rank, int n, void *arg)
{
    const mismatch_t *m = arg;
    setenv(m->var, rank == m->odd ? m->theirs : m->mine, 1);
    braid_comm_t sub = NULL;
    braid_result_t r = braid_comm_split(comm, 0, rank, &sub);
    unsetenv(m->var);
    MP_CHECK(rank, r == BRAID_ERR_INVALID_USAGE && !sub, "split gave %s: %s", braid_strerror(r),
             braid_last_error());
    MP_CHECK(rank, strstr(braid_last_error(), m->text), "message: %s", braid_last_error());
    int32_t x = 1, y = 0;
    MP_OK(rank, braid_allreduce(&x, &y, 1, BRAID_INT32, BRAID_SUM, comm));
    MP_CHECK(rank, y == n, "allreduce gave %d", y);
    return 0;
}

Test(settings, ranks_must_agree_on_what_shapes_connections_and_plans, .timeout = 200)
{
    const mismatch_t cases[] = {
        {"BRAID_NSLOTS", "8", "2", 1, "rank 1 has BRAID_NSLOTS=2 but rank 0 8"},
        {"BRAID_CHUNK_SIZE", "128K", "1M", 1,
         "rank 1 has BRAID_CHUNK_SIZE=1048576 but rank 0 131072"},
        {"BRAID_NCHANNELS", "1", "2", 2, "rank 2 has BRAID_NCHANNELS=2 but rank 0 1"},
        {"BRAID_TRANSPORT", "", "tcp", 1, "rank 1 has BRAID_TRANSPORT=tcp but rank 0 (unset)"},
        {"BRAID_DIRECT_BLOCK", "auto", "0", 2,
         "rank 2 has BRAID_DIRECT_BLOCK=0 but rank 0 1048576"},
        {"BRAID_P2P_TCP_CHUNK_SIZE", "0", "4096", 1, "BRAID_P2P_TCP_CHUNK_SIZE=4096"},
        {"BRAID_GROUP_FUSE_BYTES", "64K", "0", 0,
         "rank 1 has BRAID_GROUP_FUSE_BYTES=65536 but "
         "rank 0 0"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        cr_expect_eq(mp_run(3, split_refused, (void *)&cases[i], 60), 0, "%s (see stderr)",
                     cases[i].var);
}

/* Set alike (or the same effective value written two ways), the split works. */
static int split_agrees(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    setenv("BRAID_CHUNK_SIZE", rank ? "131072" : "128K", 1);
    setenv("BRAID_NCHANNELS", rank ? "1" : "0", 1);
    braid_comm_t sub = NULL;
    braid_result_t r = braid_comm_split(comm, 0, rank, &sub);
    unsetenv("BRAID_CHUNK_SIZE");
    unsetenv("BRAID_NCHANNELS");
    MP_OK(rank, r);
    int32_t x = rank, y = 0;
    MP_OK(rank, braid_allreduce(&x, &y, 1, BRAID_INT32, BRAID_SUM, sub));
    MP_CHECK(rank, y == n * (n - 1) / 2, "allreduce gave %d", y);
    MP_OK(rank, braid_comm_destroy(sub));
    return 0;
}

Test(settings, equal_values_written_differently_agree, .timeout = 60)
{
    cr_expect_eq(mp_run(3, split_agrees, NULL, 40), 0, "see stderr");
}

/* hier's sub-communicators, made on the first hierarchical call, take the parent's settings:
 * rank 1 changing BRAID_NSLOTS, BRAID_GROUP_FUSE_BYTES or BRAID_P2P_TCP_CHUNK_SIZE after the
 * parent's init does not split them (2 fake hosts x 2
 * ranks; the all-reduce runs hier and succeeds, and the sub-communicators have 8 slots). */
static int hier_inherits(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    braid_comm_t c = mp_fake_host_comm(comm, rank, rank / 2, "hier");
    MP_CHECK(rank, c, "no fake-host communicator");
    if (rank == 1) {
        setenv("BRAID_NSLOTS", "2", 1);
        setenv("BRAID_GROUP_FUSE_BYTES", "4096", 1);
        setenv("BRAID_P2P_TCP_CHUNK_SIZE", "1M", 1);
    }
    size_t count = 4099;
    int32_t *buf = calloc(count, sizeof(int32_t));
    MP_CHECK(rank, buf, "out of memory");
    for (size_t k = 0; k < count; k++)
        buf[k] = rank * 3 + (int32_t)(k % 11);
    MP_OK(rank, braid_allreduce(buf, buf, count, BRAID_INT32, BRAID_SUM, c));
    unsetenv("BRAID_NSLOTS");
    unsetenv("BRAID_GROUP_FUSE_BYTES");
    unsetenv("BRAID_P2P_TCP_CHUNK_SIZE");
    for (size_t k = 0; k < count; k++)
        MP_CHECK(rank, buf[k] == 3 * n * (n - 1) / 2 + n * (int32_t)(k % 11), "[%zu] = %d", k,
                 buf[k]);
    braid_algo_state_t *st = c->algo_state;
    MP_CHECK(rank, st && st->hier_ready && st->intra && st->inter, "hier did not run");
    MP_CHECK(rank, st->intra->nslots == 8 && st->inter->nslots == 8, "sub-communicator slots %d/%d",
             st->intra->nslots, st->inter->nslots);
    free(buf);
    MP_OK(rank, braid_comm_destroy(c));
    return 0;
}

Test(settings, hier_sub_communicators_take_the_parents_settings, .timeout = 60)
{
    unsetenv("BRAID_NSLOTS");
    cr_expect_eq(mp_run(4, hier_inherits, NULL, 40), 0, "see stderr");
}
