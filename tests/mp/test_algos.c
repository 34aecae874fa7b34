/* Algorithms other than the flat ring, as real processes. Hosts are faked per rank with
 * BRAID_HOSTNAME, then a braid_comm_split of the job's communicator (which re-reads the
 * environment at its init) gives a communicator that sees those hosts: ranks on different
 * "hosts" connect over tcp, ranks on the same one over shm. Results are checked bit-exactly
 * against the reference (tests/common/data.c), for every dtype x op, counts that do and do not
 * divide by the ranks per host, in place and out of place. White-box checks say whether the
 * hierarchical algorithm really ran or fell back to the ring. */
#include "algos/algo.h"
#include "core/comm.h"
#include "data.h"
#include "mp.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int host[16];     /* faked host of each rank */
    const char *algo; /* BRAID_ALGO for the split communicator ("" = automatic) */
    int expect_hier;  /* whether hier must have run */
    int full;         /* every dtype x op (else a few) */
} shape_t;

static int allreduce_on_shape(braid_comm_t comm, int rank, int n, void *arg)
{
    const shape_t *s = arg;
    braid_comm_t c = mp_fake_host_comm(comm, rank, s->host[rank], s->algo);
    MP_CHECK(rank, c != NULL, "no communicator");
    size_t counts[] = {1, 2, 3, 7, (size_t)n * 3 + 1, 1009, 65536, 65537};
    int seed = 1;
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++)
        for (int op = 0; op < BRAID_NUM_OPS; op++) {
            int few = !s->full && !(dt == BRAID_FLOAT32 || (dt == BRAID_INT32 && op != 1) ||
                                    (dt == BRAID_FLOAT16 && op == BRAID_AVG));
            if (few) continue;
            for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
                if (data_check_allreduce(c, rank, n, dt, op, counts[ci], (int)(ci & 1), 0, seed++,
                                         "algos"))
                    return 1;
        }
    if (data_check_allreduce(c, rank, n, BRAID_FLOAT32, BRAID_SUM, 1000003, 1, 0, seed++, "algos"))
        return 1;
    braid_algo_state_t *st = ((struct braid_comm *)c)->algo_state;
    MP_CHECK(rank, st && st->hier_ready == s->expect_hier, "hier ran: %d, expected %d",
             st ? st->hier_ready : -1, s->expect_hier);
    /* The other collectives still work around the hierarchical ones (broadcast may be hier
     * too, on any shape with several hosts: tests/mp/test_hier.c). */
    int32_t x = rank + 1, y = 0;
    MP_OK(rank, braid_broadcast(&x, &y, 1, BRAID_INT32, n - 1, c));
    MP_CHECK(rank, y == n, "broadcast gave %d", y);
    MP_OK(rank, braid_barrier(c));
    MP_OK(rank, braid_comm_destroy(c));
    return 0;
}

/* The first hierarchical all-reduces run on the worker thread (non-blocking calls), so the
 * sub-communicators are made there; a blocking one is queued behind them. */
static int nonblocking_first(braid_comm_t comm, int rank, int n, void *arg)
{
    const shape_t *sh = arg;
    braid_comm_t c = mp_fake_host_comm(comm, rank, sh->host[rank], sh->algo);
    MP_CHECK(rank, c != NULL, "no communicator");
    enum { K = 4 };
    size_t counts[K] = {4099, 1 << 16, 5, 100001};
    float *bufs[K];
    braid_request_t reqs[K];
    for (int k = 0; k < K; k++) {
        bufs[k] = malloc(counts[k] * sizeof(float));
        data_fill(bufs[k], BRAID_FLOAT32, BRAID_SUM, rank, 0, counts[k], 20 + k);
        MP_OK(rank,
              braid_iallreduce(bufs[k], bufs[k], counts[k], BRAID_FLOAT32, BRAID_SUM, c, &reqs[k]));
    }
    if (data_check_allreduce(c, rank, n, BRAID_INT64, BRAID_MAX, 777, 0, 0, 30, "algos")) return 1;
    for (int k = 0; k < K; k++) {
        MP_OK(rank, braid_wait(reqs[k]));
        MP_CHECK(rank,
                 !data_check_reduced(bufs[k], BRAID_FLOAT32, BRAID_SUM, n, 0, counts[k], 20 + k,
                                     "iallreduce"),
                 "iallreduce %d", k);
        free(bufs[k]);
    }
    braid_algo_state_t *st = ((struct braid_comm *)c)->algo_state;
    MP_CHECK(rank, st && st->hier_ready, "hier did not run");
    MP_OK(rank, braid_comm_destroy(c));
    return 0;
}

/* A split with var=val in this rank's environment must fail with `want` and a message
 * containing `text` on every rank (none waits for another), leaving the parent usable. */
static int split_fails(braid_comm_t comm, int rank, int n, const char *var, const char *val,
                       braid_result_t want, const char *text)
{
    setenv(var, val, 1);
    braid_comm_t sub = NULL;
    braid_result_t r = braid_comm_split(comm, 0, rank, &sub);
    unsetenv(var);
    MP_CHECK(rank, r == want && sub == NULL, "split gave %s", braid_strerror(r));
    MP_CHECK(rank, strstr(braid_last_error(), text), "message: %s", braid_last_error());
    int32_t x = 1, y = 0;
    MP_OK(rank, braid_allreduce(&x, &y, 1, BRAID_INT32, BRAID_SUM, comm));
    MP_CHECK(rank, y == n, "allreduce gave %d", y);
    return 0;
}

static int mismatched_algo(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    return split_fails(comm, rank, n, "BRAID_ALGO", rank == 1 ? "hier" : "ring",
                       BRAID_ERR_INVALID_USAGE, "rank 1 would choose");
}

/* BRAID_TUNE_MEASURE out of range: init fails naming it. */
static int bad_tune_measure(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    return split_fails(comm, rank, n, "BRAID_TUNE_MEASURE", "99", BRAID_ERR_INVALID_ARG,
                       "BRAID_TUNE_MEASURE=99");
}

/* A rank dies in the middle of hierarchical all-reduces: every survivor must get an error
 * promptly (through whichever sub-communicator it waits in), not hang. */
static int victim_dies(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    shape_t s = {.host = {0, 0, 1, 1}, .algo = "hier"};
    braid_comm_t c = mp_fake_host_comm(comm, rank, s.host[rank], s.algo);
    MP_CHECK(rank, c != NULL, "no communicator");
    const int *va = arg; /* victim, and whether the all-reduce is large enough to pipeline */
    int victim = va[0];
    size_t count = va[1] ? ((size_t)12 << 20) / 4 : 1 << 16;
    float *buf = calloc(count, sizeof(float));
    braid_result_t res = BRAID_SUCCESS;
    struct timespec t0, t1;
    for (int it = 0; it < 100000 && res == BRAID_SUCCESS; it++) {
        if (rank == victim && it == 5) _exit(9);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        res = braid_allreduce(buf, buf, count, BRAID_FLOAT32, BRAID_SUM, c);
        clock_gettime(CLOCK_MONOTONIC, &t1);
    }
    free(buf);
    double el = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    MP_CHECK(rank, res == BRAID_ERR_REMOTE || res == BRAID_ERR_INTERNAL, "got %s (%s)",
             braid_strerror(res), braid_last_error());
    MP_CHECK(rank, el < 10.0, "the failing call took %.1f s", el);
    /* the message names the dead rank by its number in c, not in a sub-communicator */
    char name[16];
    snprintf(name, sizeof(name), "rank %d", victim);
    MP_CHECK(rank, strstr(braid_last_error(), name), "message does not name %s: %s", name,
             braid_last_error());
    float x = 1;
    MP_CHECK(rank, braid_allreduce(&x, &x, 1, BRAID_FLOAT32, BRAID_SUM, c) != BRAID_SUCCESS,
             "a failed communicator accepted a new collective");
    braid_comm_destroy(c);
    return 0;
}

/* BRAID_TUNING_FILE is read by rank 0 only and its constants reach every rank (here the
 * other ranks name no file, or a different one); a bad file on rank 0 fails init everywhere. */
static int tuning_file(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    const char *dir = arg;
    char good[128], other[128], bad[128];
    snprintf(good, sizeof(good), "%s/good", dir);
    snprintf(other, sizeof(other), "%s/other", dir);
    snprintf(bad, sizeof(bad), "%s/bad", dir);
    setenv("BRAID_TUNING_FILE", rank == 0 ? good : rank == 1 ? other : "", 1);
    braid_comm_t c = mp_fake_host_comm(comm, rank, rank / 2, "");
    MP_CHECK(rank, c != NULL, "no communicator");
    braid_algo_state_t *st = ((struct braid_comm *)c)->algo_state;
    MP_CHECK(rank, st->model.inter.alpha_us == 123.0 && st->model.inter.gbps == 0.0625,
             "rank %d model: net %g us %g GB/s", rank, st->model.inter.alpha_us,
             st->model.inter.gbps);
    MP_OK(rank, braid_comm_destroy(c));
    setenv("BRAID_TUNING_FILE", rank == 0 ? bad : good, 1);
    c = mp_fake_host_comm(comm, rank, rank / 2, "");
    unsetenv("BRAID_TUNING_FILE");
    MP_CHECK(rank, c == NULL, "init with rank 0's bad tuning file succeeded");
    MP_CHECK(rank, strstr(braid_last_error(), "unknown key 'speed'"), "message: %s",
             braid_last_error());
    return 0;
}

/* BRAID_TUNE_MEASURE as rank 0 sets it: every rank measures (or none does) and every rank
 * keeps rank 0's numbers. */
static int tune_measure(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    for (int who = 0; who < 2; who++) {
        setenv("BRAID_TUNE_MEASURE", rank == who ? "1" : "0", 1);
        braid_comm_t c = mp_fake_host_comm(comm, rank, rank / 2, "");
        unsetenv("BRAID_TUNE_MEASURE");
        MP_CHECK(rank, c != NULL, "no communicator");
        braid_algo_state_t *st = ((struct braid_comm *)c)->algo_state;
        double mine[4] = {st->model.intra.alpha_us, st->model.intra.gbps, st->model.inter.alpha_us,
                          st->model.inter.gbps};
        double all[4 * 8];
        MP_OK(rank, braid_allgather(mine, all, 4, BRAID_FLOAT64, c));
        for (int r = 0; r < n; r++)
            MP_CHECK(rank, !memcmp(all + 4 * r, mine, sizeof(mine)), "rank %d's model differs", r);
        int measured = st->model.inter.alpha_us != BRAID_MODEL_NET_ALPHA_US ||
                       st->model.inter.gbps != BRAID_MODEL_NET_GBPS;
        MP_CHECK(rank, measured == (who == 0), "measured %d with BRAID_TUNE_MEASURE=1 on rank %d",
                 measured, who);
        MP_CHECK(rank, st->model.inter.alpha_us > 0 && st->model.inter.gbps > 0, "bad numbers");
        if (data_check_allreduce(c, rank, n, BRAID_FLOAT32, BRAID_SUM, 5000, 0, 0, 7, "measured"))
            return 1;
        MP_OK(rank, braid_comm_destroy(c));
    }
    return 0;
}

/* Hosts faked on one machine share its cpus: every rank counts all ranks on its machine,
 * only its host's as local, and the model's oversubscription uses the machine's count; hier's
 * sub-communicators inherit the faked hosts. */
static int machine_counts(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    braid_comm_t c = mp_fake_host_comm(comm, rank, rank / 2, "hier");
    MP_CHECK(rank, c != NULL, "no communicator");
    struct braid_comm *ic = (struct braid_comm *)c;
    braid_algo_state_t *st = ic->algo_state;
    MP_CHECK(rank, ic->local_nranks == 2 && ic->machine_nranks == n,
             "local %d machine %d ranks, want 2 and %d", ic->local_nranks, ic->machine_nranks, n);
    MP_CHECK(rank, st->model.nhosts == 2 && st->model.host_ranks == n,
             "model: %d hosts, %d ranks on the busiest machine", st->model.nhosts,
             st->model.host_ranks);
    /* hier's sub-communicators (made now, after mp_fake_host_comm restored the environment)
     * keep the parent's hosts: the inter-host one spans two hosts */
    float x[64] = {0}, y[64];
    MP_OK(rank, braid_allreduce(x, y, 64, BRAID_FLOAT32, BRAID_SUM, c));
    MP_CHECK(rank, st->intra && st->inter, "hier did not run");
    MP_CHECK(rank, st->intra->local_nranks == 2 && st->inter->local_nranks == 1,
             "sub-communicators see %d and %d local ranks, want 2 and 1", st->intra->local_nranks,
             st->inter->local_nranks);
    MP_OK(rank, braid_comm_destroy(c));
    return 0;
}

TestSuite(algos, .timeout = 240);

Test(algos, hosts_on_one_machine_share_its_cpus)
{
    cr_assert_eq(mp_run(4, machine_counts, NULL, 60), 0, "some rank failed (see stderr)");
}

Test(algos, tune_measure_follows_rank_0)
{
    cr_assert_eq(mp_run(4, tune_measure, NULL, 100), 0, "some rank failed (see stderr)");
}

Test(algos, tuning_file_from_rank_0_reaches_every_rank)
{
    char dir[] = "/tmp/braid-tuneXXXXXX", path[64];
    cr_assert(mkdtemp(dir));
    const char *files[][2] = {{"good", "net_alpha_us 123\nnet_gbps 0.0625\n"},
                              {"other", "net_alpha_us 1\n"},
                              {"bad", "speed 3\n"}};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, files[i][0]);
        FILE *f = fopen(path, "w");
        cr_assert(f);
        fputs(files[i][1], f);
        fclose(f);
    }
    int rc = mp_run(4, tuning_file, dir, 100);
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, files[i][0]);
        unlink(path);
    }
    rmdir(dir);
    cr_assert_eq(rc, 0, "some rank failed (see stderr)");
}

Test(algos, hier_rank_death_reaches_every_survivor)
{
    setenv("BRAID_TIMEOUT", "30", 1);
    /* {victim, pipelined}: small all-reduces, then 12 MiB ones (3 pipelined segments, an
     * inter-host step in flight on a worker thread when the victim dies) */
    int cases[][2] = {{3, 0}, {0, 0}, {1, 1}, {2, 1}};
    for (int v = 0; v < 4; v++) {
        mp_job_t job;
        mp_start(&job, 4, victim_dies, cases[v]);
        mp_wait(&job, 60);
        for (int r = 0; r < 4; r++) {
            int st = job.status[r];
            int want = r == cases[v][0] ? 9 : 0;
            cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == want,
                      "victim %d%s: rank %d ended with status 0x%x (see stderr)", cases[v][0],
                      cases[v][1] ? " (pipelined)" : "", r, st);
        }
    }
}

Test(algos, hier_2_hosts_x_2_forced_every_dtype_op)
{
    shape_t s = {.host = {0, 0, 1, 1}, .algo = "hier", .expect_hier = 1, .full = 1};
    cr_assert_eq(mp_run(4, allreduce_on_shape, &s, 200), 0, "some rank failed (see stderr)");
}

Test(algos, hier_nonblocking_first_use_on_the_worker)
{
    shape_t s = {.host = {0, 1, 0, 1}, .algo = "hier", .expect_hier = 1};
    cr_assert_eq(mp_run(4, nonblocking_first, &s, 100), 0, "some rank failed (see stderr)");
}

Test(algos, hier_interleaved_hosts_3_x_2_automatic)
{
    /* The launcher placed ranks round-robin over 3 hosts; the model picks hier here. */
    shape_t s = {.host = {0, 1, 2, 0, 1, 2}, .algo = "", .expect_hier = 1};
    cr_assert_eq(mp_run(6, allreduce_on_shape, &s, 200), 0, "some rank failed (see stderr)");
}

Test(algos, hier_2_hosts_x_3_shuffled)
{
    shape_t s = {.host = {1, 0, 0, 1, 1, 0}, .algo = "hier", .expect_hier = 1};
    cr_assert_eq(mp_run(6, allreduce_on_shape, &s, 200), 0, "some rank failed (see stderr)");
}

Test(algos, hier_uneven_hosts_falls_back_to_ring)
{
    shape_t s = {.host = {0, 0, 0, 1}, .algo = "hier", .expect_hier = 0};
    cr_assert_eq(mp_run(4, allreduce_on_shape, &s, 200), 0, "some rank failed (see stderr)");
}

Test(algos, hier_one_host_falls_back_to_ring)
{
    shape_t s = {.host = {0, 0, 0}, .algo = "hier", .expect_hier = 0};
    cr_assert_eq(mp_run(3, allreduce_on_shape, &s, 200), 0, "some rank failed (see stderr)");
}

Test(algos, forced_recdbl_2_hosts_x_2)
{
    shape_t s = {.host = {0, 0, 1, 1}, .algo = "recdbl", .expect_hier = 0};
    cr_assert_eq(mp_run(4, allreduce_on_shape, &s, 200), 0, "some rank failed (see stderr)");
}

Test(algos, tune_measure_out_of_range_fails_init_clearly)
{
    cr_assert_eq(mp_run(2, bad_tune_measure, NULL, 60), 0, "some rank failed (see stderr)");
}

Test(algos, ranks_with_different_algo_fail_init_clearly)
{
    cr_assert_eq(mp_run(3, mismatched_algo, NULL, 60), 0, "some rank failed (see stderr)");
}
