/* The cache of algorithm choices (algos/select.c, pick): as real processes, every call runs
 * the algorithm the cost model chooses for it, whatever was cached before, over many counts
 * (more than the cache's entries, so entries collide and are replaced), twice, for all-reduce,
 * broadcast, reduce and reduce-scatter; on one host (direct, recdbl, ring) and on 2 faked hosts
 * (hier, recdbl, ring); results checked against the reference. */
#include "algos/algo.h"
#include "core/comm.h"
#include "data.h"
#include "mp.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

TestSuite(pick, .timeout = 240);

typedef struct {
    int hosts;
} pcfg_t;

static int one(braid_comm_t c, int rank, int n, int coll, size_t count, int seed)
{
    braid_algo_state_t *st = ((struct braid_comm *)c)->algo_state;
    MP_CHECK(rank, st != NULL, "no algorithm state");
    size_t total = coll == BRAID_COLL_REDUCE_SCATTER ? count * (size_t)n : count;
    int want = braid_model_choose(coll, count * sizeof(float), count, &st->model);
    uint64_t before[BRAID_ALGO_COUNT];
    memcpy(before, st->runs, sizeof(before));
    float *in = malloc(total * sizeof(float) + 4), *out = malloc(total * sizeof(float) + 4);
    MP_CHECK(rank, in && out, "out of memory");
    data_fill(in, BRAID_FLOAT32, BRAID_SUM, rank, 0, total, seed);
    braid_result_t r;
    size_t bad = 0;
    if (coll == BRAID_COLL_ALLREDUCE) {
        r = braid_allreduce(in, out, count, BRAID_FLOAT32, BRAID_SUM, c);
        if (!r) bad = data_check_reduced(out, BRAID_FLOAT32, BRAID_SUM, n, 0, count, seed, "ar");
    } else if (coll == BRAID_COLL_BROADCAST) {
        r = braid_broadcast(in, out, count, BRAID_FLOAT32, 0, c);
        if (!r) bad = data_check_rank(out, BRAID_FLOAT32, BRAID_SUM, 0, 0, count, seed, "bc");
    } else if (coll == BRAID_COLL_REDUCE) {
        r = braid_reduce(in, out, count, BRAID_FLOAT32, BRAID_SUM, 0, c);
        if (!r && rank == 0)
            bad = data_check_reduced(out, BRAID_FLOAT32, BRAID_SUM, n, 0, count, seed, "red");
    } else {
        r = braid_reduce_scatter(in, out, count, BRAID_FLOAT32, BRAID_SUM, c);
        if (!r)
            bad = data_check_reduced(out, BRAID_FLOAT32, BRAID_SUM, n, (size_t)rank * count, count,
                                     seed, "rs");
    }
    free(in);
    free(out);
    MP_CHECK(rank, r == BRAID_SUCCESS, "coll %d count %zu: %s", coll, count, braid_last_error());
    MP_CHECK(rank, bad == 0, "coll %d count %zu: %zu wrong elements", coll, count, bad);
    for (int a = 0; a < BRAID_ALGO_COUNT; a++)
        MP_CHECK(rank, st->runs[a] == before[a] + (a == want),
                 "coll %d count %zu: the model chooses %s, but %s ran %llu times (was %llu)", coll,
                 count, braid_algo_name(want), braid_algo_name(a), (unsigned long long)st->runs[a],
                 (unsigned long long)before[a]);
    return 0;
}

static int sweep(braid_comm_t comm, int rank, int n, void *arg)
{
    const pcfg_t *cfg = arg;
    braid_comm_t c = mp_fake_host_comm(comm, rank, rank % cfg->hosts, "");
    MP_CHECK(rank, c != NULL, "no communicator");
    const int colls[] = {BRAID_COLL_ALLREDUCE, BRAID_COLL_BROADCAST, BRAID_COLL_REDUCE,
                         BRAID_COLL_REDUCE_SCATTER};
    int seed = 1;
    for (int pass = 0; pass < 2; pass++)
        for (size_t count = 1; count <= ((size_t)1 << 19); count = count * 5 / 4 + 1)
            for (size_t k = 0; k < sizeof(colls) / sizeof(colls[0]); k++)
                if (one(c, rank, n, colls[k], count, seed++)) return 1;
    braid_comm_destroy(c);
    return 0;
}

Test(pick, every_call_runs_the_models_choice_one_host)
{
    pcfg_t cfg = {.hosts = 1};
    cr_assert_eq(mp_run(3, sweep, &cfg, 200), 0, "a rank failed");
}

Test(pick, every_call_runs_the_models_choice_two_hosts)
{
    pcfg_t cfg = {.hosts = 2};
    cr_assert_eq(mp_run(4, sweep, &cfg, 200), 0, "a rank failed");
}
