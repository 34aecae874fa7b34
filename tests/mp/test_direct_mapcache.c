/* The direct path's cache of peers' braid_mem_alloc regions (transport/shm_direct.c): it makes
 * room without unmapping a region the current block still uses. */
#include "data.h"
#include "mp.h"
#include "transport/shm_direct.h"

#include <criterion/criterion.h>

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
