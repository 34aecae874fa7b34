/* The direct path's cache of peers' braid_mem_alloc regions (transport/shm_direct.c): it makes
 * room without unmapping a region the current block still uses, drops the mappings of regions
 * their owner freed, holds what one block maps on more ranks than its minimum size, and a peer
 * that died before its region was opened is a remote error. */
#include "core/comm.h"
#include "data.h"
#include "mp.h"
#include "transport/shm_direct.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* One input from braid_mem_alloc and a fresh output region for every call, more calls than the
 * BRAID_DIRECT_MAPS peer regions a rank keeps mapped: the cache makes room while the call
 * still reads the peer's input through its mapping and writes into its new output, so it must
 * evict neither (evicting in insertion order unmapped the input: a crash). */
static int fresh_outputs(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    braid_comm_t c = mp_fake_host_comm(comm, rank, 0, "direct");
    MP_CHECK(rank, c != NULL, "no communicator");
    size_t count = 16384; /* 64 KiB of float32: the large path, one block */
    float *in = NULL;
    MP_OK(rank, braid_mem_alloc((void **)&in, count * sizeof(float)));
    for (int it = 0; it < BRAID_DIRECT_MAPS + 40; it++) {
        float *out = NULL;
        MP_OK(rank, braid_mem_alloc((void **)&out, count * sizeof(float)));
        data_fill(in, BRAID_FLOAT32, BRAID_SUM, rank, 0, count, it);
        MP_OK(rank, braid_allreduce(in, out, count, BRAID_FLOAT32, BRAID_SUM, c));
        size_t bad =
            data_check_reduced(out, BRAID_FLOAT32, BRAID_SUM, n, 0, count, it, "fresh output");
        MP_OK(rank, braid_mem_free(out));
        MP_CHECK(rank, bad == 0, "call %d: %zu wrong elements", it, bad);
    }
    MP_OK(rank, braid_mem_free(in));
    MP_OK(rank, braid_comm_destroy(c));
    return 0;
}

Test(direct, mapped_output_per_call_beyond_the_map_cache)
{
    for (int n = 2; n <= 3; n++)
        cr_assert_eq(mp_run(n, fresh_outputs, NULL, 300), 0, "n=%d: some rank failed", n);
}

/* Mappings of /proc/self/maps that are regions of braid_mem_alloc (this process's or a peer's). */
static int mem_mappings(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    char line[512];
    int k = 0;
    while (fgets(line, sizeof(line), f))
        if (strstr(line, "memfd:braid-mem")) k++;
    fclose(f);
    return k;
}

/* Every call with a fresh input and output from braid_mem_alloc, both freed after it: a peer's
 * freed region is unmapped here once the peer's descriptor number comes back with a new one (the
 * cached mapping kept the freed memfd and all its pages alive until the cache filled). */
static int freed_regions(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    braid_comm_t c = mp_fake_host_comm(comm, rank, 0, "direct");
    MP_CHECK(rank, c != NULL, "no communicator");
    size_t count = 16384;
    for (int it = 0; it < 20; it++) {
        float *in = NULL, *out = NULL;
        MP_OK(rank, braid_mem_alloc((void **)&in, count * sizeof(float)));
        MP_OK(rank, braid_mem_alloc((void **)&out, count * sizeof(float)));
        data_fill(in, BRAID_FLOAT32, BRAID_SUM, rank, 0, count, it);
        MP_OK(rank, braid_allreduce(in, out, count, BRAID_FLOAT32, BRAID_SUM, c));
        size_t bad = data_check_reduced(out, BRAID_FLOAT32, BRAID_SUM, n, 0, count, it, "freed");
        MP_OK(rank, braid_mem_free(in));
        MP_OK(rank, braid_mem_free(out));
        MP_CHECK(rank, bad == 0, "call %d: %zu wrong elements", it, bad);
        /* this call's peer regions only: an input and an output per peer */
        int k = mem_mappings();
        MP_CHECK(rank, k >= 0 && k <= 2 * (n - 1), "call %d: %d regions still mapped", it, k);
    }
    MP_OK(rank, braid_comm_destroy(c));
    return 0;
}

Test(direct, freed_peer_regions_are_unmapped)
{
    for (int n = 2; n <= 3; n++)
        cr_assert_eq(mp_run(n, freed_regions, NULL, 120), 0, "n=%d: some rank failed", n);
}

/* Outputs kept alive (none freed): more live peer regions than the cache holds, so it makes
 * room by age, never evicting what the current block uses. */
static int live_outputs(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    braid_comm_t c = mp_fake_host_comm(comm, rank, 0, "direct");
    MP_CHECK(rank, c != NULL, "no communicator");
    size_t count = 16384;
    enum { CALLS = BRAID_DIRECT_MAPS + 20 };
    static float *outs[CALLS];
    float *in = NULL;
    MP_OK(rank, braid_mem_alloc((void **)&in, count * sizeof(float)));
    for (int it = 0; it < CALLS; it++) {
        MP_OK(rank, braid_mem_alloc((void **)&outs[it], count * sizeof(float)));
        data_fill(in, BRAID_FLOAT32, BRAID_SUM, rank, 0, count, it);
        MP_OK(rank, braid_allreduce(in, outs[it], count, BRAID_FLOAT32, BRAID_SUM, c));
        size_t bad =
            data_check_reduced(outs[it], BRAID_FLOAT32, BRAID_SUM, n, 0, count, it, "live output");
        MP_CHECK(rank, bad == 0, "call %d: %zu wrong elements", it, bad);
    }
    for (int it = 0; it < CALLS; it++)
        MP_OK(rank, braid_mem_free(outs[it]));
    MP_OK(rank, braid_mem_free(in));
    MP_OK(rank, braid_comm_destroy(c));
    return 0;
}

Test(direct, live_outputs_beyond_the_map_cache)
{
    for (int n = 2; n <= 3; n++)
        cr_assert_eq(mp_run(n, live_outputs, NULL, 300), 0, "n=%d: some rank failed", n);
}

/* An out-of-place all-reduce with both buffers from braid_mem_alloc maps n - 1 peer inputs and
 * n - 1 peer outputs in one block: more than BRAID_DIRECT_MAPS from 66 ranks on, which failed
 * every such call when the cache had that fixed size. */
static int many_ranks(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    MP_CHECK(rank, ((struct braid_comm *)comm)->direct, "no direct segments");
    size_t count = 4096; /* 16 KiB: above 16 KiB / n, the large path */
    float *in = NULL, *out = NULL;
    MP_OK(rank, braid_mem_alloc((void **)&in, count * sizeof(float)));
    MP_OK(rank, braid_mem_alloc((void **)&out, count * sizeof(float)));
    data_fill(in, BRAID_FLOAT32, BRAID_SUM, rank, 0, count, 5);
    MP_OK(rank, braid_allreduce(in, out, count, BRAID_FLOAT32, BRAID_SUM, comm));
    size_t bad = data_check_reduced(out, BRAID_FLOAT32, BRAID_SUM, n, 0, count, 5, "many ranks");
    MP_CHECK(rank, bad == 0, "%zu wrong elements", bad);
    MP_OK(rank, braid_mem_free(in));
    MP_OK(rank, braid_mem_free(out));
    return 0;
}

Test(direct, mapped_allreduce_on_more_ranks_than_the_map_cache_minimum, .timeout = 300)
{
    setenv("BRAID_ALGO", "direct", 1);
    setenv("BRAID_SPIN_US", "0", 1); /* 70 ranks on few cpus: sleep, do not spin */
    setenv("BRAID_YIELD_US", "0", 1);
    int n = BRAID_DIRECT_MAPS / 2 + 6;
    cr_assert_leq(n, MP_MAX_RANKS);
    cr_assert_eq(mp_run(n, many_ranks, NULL, 240), 0, "n=%d: some rank failed (see stderr)", n);
    unsetenv("BRAID_YIELD_US");
    unsetenv("BRAID_SPIN_US");
    unsetenv("BRAID_ALGO");
}

/* Rank 1 publishes its input by reference (braid_mem_alloc) and is killed before rank 0 opens
 * it: rank 0's open through /proc/<pid>/fd fails, and the error is rank 1's death
 * (BRAID_ERR_REMOTE naming it), not a system call's failure. */
static int dies_before_mapped(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    (void)n;
    braid_comm_t c = mp_fake_host_comm(comm, rank, 0, "direct");
    MP_CHECK(rank, c != NULL, "no communicator");
    size_t count = 4096;
    float *in = NULL, *out = malloc(2 * count * sizeof(float));
    MP_OK(rank, braid_mem_alloc((void **)&in, count * sizeof(float)));
    data_fill(in, BRAID_FLOAT32, BRAID_SUM, rank, 0, count, 9);
    if (rank == 1) { /* killed in there */
        braid_allgather(in, out, count, BRAID_FLOAT32, c);
        return 0;
    }
    braid_direct_t *d = ((struct braid_comm *)c)->direct;
    const braid_direct_line_t *l = braid_direct_line(d, 1, 0);
    for (int w = 0; w < 5000 && !braid_direct_ready(l, 1); w++)
        usleep(1000);
    MP_CHECK(rank, braid_direct_ready(l, 1), "rank 1 never published its input");
    kill(((struct braid_comm *)c)->peers[1].pid, SIGKILL);
    for (int w = 0; w < 5000 && braid_direct_check_peer(d, 1, 1) == BRAID_SUCCESS; w++)
        usleep(1000);
    braid_result_t r = braid_allgather(in, out, count, BRAID_FLOAT32, c);
    MP_CHECK(rank, r == BRAID_ERR_REMOTE, "got %s (%s)", braid_strerror(r), braid_last_error());
    MP_CHECK(rank, strstr(braid_last_error(), "rank 1"), "message '%s' does not name rank 1",
             braid_last_error());
    braid_mem_free(in);
    free(out);
    return 0;
}

Test(direct, peer_dead_before_its_region_is_opened_gives_remote_error)
{
    mp_job_t job;
    mp_start(&job, 2, dies_before_mapped, NULL);
    mp_wait(&job, 60);
    cr_assert(WIFSIGNALED(job.status[1]), "rank 1 was not killed");
    cr_assert(WIFEXITED(job.status[0]) && WEXITSTATUS(job.status[0]) == 0,
              "rank 0 failed (see stderr)");
}
