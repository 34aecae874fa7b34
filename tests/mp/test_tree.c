/* Binomial-tree broadcast and reduce as real processes: forced with BRAID_ALGO=tree on a
 * communicator split from the job's, for n = 2..8 and every root, a few dtypes x ops, in place
 * and not, bit-exact against the reference data (tests/common/data.c); non-root reduce ranks
 * pass no output buffer; faked hosts put some tree edges on tcp; the model picks the tree by
 * itself for small broadcasts and the chain for large ones. */
#include "algos/algo.h"
#include "core/comm.h"
#include "data.h"
#include "mp.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    const char *algo; /* BRAID_ALGO for the split communicator */
    int hosts;        /* rank r is on fake host r % hosts */
} cfg_t;

static uint64_t runs(braid_comm_t c, int algo)
{
    braid_algo_state_t *st = ((struct braid_comm *)c)->algo_state;
    return st ? st->runs[algo] : 0;
}

static int check_bcast(braid_comm_t c, int rank, int n, int root, braid_datatype_t dt, size_t count,
                       int in_place, int seed)
{
    size_t es = braid_dtype_size(dt);
    char *s = malloc(count * es + 1), *r = malloc(count * es + 1);
    MP_CHECK(rank, s && r, "malloc");
    memset(s, 0xEE, count * es);
    memset(r, 0xEE, count * es);
    if (rank == root) data_fill(s, dt, BRAID_SUM, rank, 0, count, seed);
    char *out = in_place ? s : r;
    char what[128];
    snprintf(what, sizeof(what), "tree broadcast n=%d root %d %s count=%zu %s", n, root,
             braid_dtype_name(dt), count, in_place ? "in place" : "oop");
    braid_result_t res = braid_broadcast(s, out, count, dt, root, c);
    size_t bad = res ? count + 1 : data_check_rank(out, dt, BRAID_SUM, root, 0, count, seed, what);
    free(s);
    free(r);
    MP_CHECK(rank, res == BRAID_SUCCESS, "%s: %s", what, braid_last_error());
    MP_CHECK(rank, bad == 0, "%s: %zu wrong elements", what, bad);
    return 0;
}

static int check_reduce(braid_comm_t c, int rank, int n, int root, braid_datatype_t dt,
                        braid_redop_t op, size_t count, int in_place, int seed)
{
    size_t es = braid_dtype_size(dt);
    char *s = malloc(count * es + 1), *r = malloc(count * es + 1);
    MP_CHECK(rank, s && r, "malloc");
    data_fill(s, dt, op, rank, 0, count, seed);
    memset(r, 0xEE, count * es);
    char *out = rank != root ? NULL : in_place ? s : r;
    char what[128];
    snprintf(what, sizeof(what), "tree reduce n=%d root %d %s %s count=%zu %s", n, root,
             braid_dtype_name(dt), braid_op_name(op), count, in_place ? "in place" : "oop");
    braid_result_t res = braid_reduce(s, out, count, dt, op, root, c);
    size_t bad = 0;
    if (res == BRAID_SUCCESS && rank == root)
        bad = data_check_reduced(out, dt, op, n, 0, count, seed, what);
    free(s);
    free(r);
    MP_CHECK(rank, res == BRAID_SUCCESS, "%s: %s", what, braid_last_error());
    MP_CHECK(rank, bad == 0, "%s: %zu wrong elements", what, bad);
    return 0;
}

static int every_root(braid_comm_t comm, int rank, int n, void *arg)
{
    const cfg_t *cfg = arg;
    braid_comm_t c = mp_fake_host_comm(comm, rank, rank % cfg->hosts, cfg->algo);
    MP_CHECK(rank, c != NULL, "no communicator");
    /* 0, primes, and more than one 64 KiB chunk for one-byte elements */
    size_t counts[] = {0, 1, 13, 1009, 65537};
    braid_datatype_t dts[] = {BRAID_INT8, BRAID_INT32, BRAID_FLOAT32, BRAID_FLOAT64};
    braid_redop_t ops[] = {BRAID_SUM, BRAID_MAX, BRAID_AVG, BRAID_MIN};
    int seed = 1;
    for (int root = 0; root < n; root++)
        for (size_t di = 0; di < sizeof(dts) / sizeof(dts[0]); di++)
            for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
                if (counts[ci] > 1009 && dts[di] != BRAID_INT8) continue;
                int ip = (int)((ci + di + (size_t)root) & 1);
                if (check_bcast(c, rank, n, root, dts[di], counts[ci], ip, seed++)) return 1;
                braid_redop_t op = ops[(di + ci + (size_t)root) % 4];
                if (op == BRAID_AVG && dts[di] != BRAID_FLOAT32 && dts[di] != BRAID_FLOAT64)
                    op = BRAID_SUM;
                if (check_reduce(c, rank, n, root, dts[di], op, counts[ci], ip, seed++)) return 1;
            }
    /* The ring collectives still work between tree ones (allreduce is not a tree one). */
    int32_t x = rank + 1, y = 0;
    MP_OK(rank, braid_allreduce(&x, &y, 1, BRAID_INT32, BRAID_SUM, c));
    MP_CHECK(rank, y == n * (n + 1) / 2, "allreduce gave %d", y);
    MP_OK(rank, braid_barrier(c));
    MP_CHECK(rank, runs(c, BRAID_ALGO_TREE) > 0, "the tree did not run");
    MP_OK(rank, braid_comm_destroy(c));
    return 0;
}

TestSuite(tree, .timeout = 300);

Test(tree, forced_n_2_to_8_every_root)
{
    cfg_t cfg = {.algo = "tree", .hosts = 1};
    for (int n = 2; n <= 8; n++)
        cr_assert_eq(mp_run(n, every_root, &cfg, 200), 0, "n=%d: some rank failed (see stderr)", n);
}

Test(tree, edges_over_tcp_on_fake_hosts)
{
    cfg_t cfg = {.algo = "tree", .hosts = 2};
    cr_assert_eq(mp_run(5, every_root, &cfg, 200), 0, "some rank failed (see stderr)");
}

/* Automatic: the model takes the tree for a few bytes and the chain for megabytes. */
static int automatic(braid_comm_t comm, int rank, int n, void *arg)
{
    const cfg_t *cf = arg;
    braid_comm_t c = mp_fake_host_comm(comm, rank, rank % cf->hosts, cf->algo);
    MP_CHECK(rank, c != NULL, "no communicator");
    /* The tree runs only when forced: automatic small and large both take the chain. */
    if (check_bcast(c, rank, n, 1, BRAID_FLOAT32, 2, 0, 3)) return 1;
    MP_CHECK(rank, runs(c, BRAID_ALGO_TREE) == 0 && runs(c, BRAID_ALGO_RING) == 1,
             "8 B: tree %llu, ring %llu", (unsigned long long)runs(c, BRAID_ALGO_TREE),
             (unsigned long long)runs(c, BRAID_ALGO_RING));
    if (check_reduce(c, rank, n, 2, BRAID_FLOAT32, BRAID_SUM, (size_t)1 << 20, 0, 4)) return 1;
    MP_CHECK(rank, runs(c, BRAID_ALGO_TREE) == 0 && runs(c, BRAID_ALGO_RING) == 2,
             "4 MiB: tree %llu, ring %llu", (unsigned long long)runs(c, BRAID_ALGO_TREE),
             (unsigned long long)runs(c, BRAID_ALGO_RING));
    MP_OK(rank, braid_comm_destroy(c));
    return 0;
}

Test(tree, automatic_choice_keeps_the_chain)
{
    cfg_t cfg = {.algo = "", .hosts = 1};
    /* without the direct shared-memory path, which the model prefers on one host */
    setenv("BRAID_DIRECT_BLOCK", "0", 1);
    cr_assert_eq(mp_run(4, automatic, &cfg, 100), 0, "some rank failed (see stderr)");
    unsetenv("BRAID_DIRECT_BLOCK");
}
