/* The transport conformance cases of tests/common/conformance.c on every transport the host
 * can run: shm (two processes on one host) and tcp (loopback). The rdma transport runs the
 * same cases inside the Soft-RoCE VM (tests/rdma/inner.sh, tests/helpers/conformance_main.c).
 * Each case forks two ranks; in "kill" rank 1 SIGKILLs itself and rank 0 must name it. */
#include "conformance.h"
#include "mp.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>

typedef struct {
    const char *transport, *name;
} conf_arg_t;

static int rank_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)rank;
    (void)n;
    const conf_arg_t *a = arg;
    return conf_run(comm, a->transport, a->name);
}

static void run_case(const char *transport, const char *name)
{
    if (!strcmp(transport, "tcp")) setenv("BRAID_TRANSPORT", "tcp", 1);
    setenv("BRAID_TIMEOUT", "60", 1);
    conf_arg_t a = {transport, name};
    mp_job_t job;
    mp_start(&job, 2, rank_fn, &a);
    mp_wait(&job, 90);
    cr_expect(WIFEXITED(job.status[0]) && WEXITSTATUS(job.status[0]) == 0,
              "%s/%s: rank 0 failed (status 0x%x)", transport, name, job.status[0]);
    if (!strcmp(name, "kill"))
        cr_expect(WIFSIGNALED(job.status[1]) && WTERMSIG(job.status[1]) == SIGKILL,
                  "%s/kill: rank 1 did not die by SIGKILL (status 0x%x)", transport, job.status[1]);
    else
        cr_expect(WIFEXITED(job.status[1]) && WEXITSTATUS(job.status[1]) == 0,
                  "%s/%s: rank 1 failed (status 0x%x)", transport, name, job.status[1]);
    if (!strcmp(transport, "shm"))
        cr_expect_eq(mp_shm_leftovers(&job), 0, "%s/%s: shm segments left", transport, name);
}

#define CONF_TEST(tr, c)                                                                           \
    Test(conformance, tr##_##c, .timeout = 120)                                                    \
    {                                                                                              \
        run_case(#tr, #c);                                                                         \
    }

CONF_TEST(shm, data)
CONF_TEST(shm, fail)
CONF_TEST(shm, failrecv)
CONF_TEST(shm, failquiet)
CONF_TEST(shm, kill)
CONF_TEST(shm, close)
CONF_TEST(shm, timeout)
CONF_TEST(shm, abort)
CONF_TEST(shm, register)
CONF_TEST(tcp, data)
CONF_TEST(tcp, fail)
CONF_TEST(tcp, failrecv)
CONF_TEST(tcp, failquiet)
CONF_TEST(tcp, kill)
CONF_TEST(tcp, close)
CONF_TEST(tcp, timeout)
CONF_TEST(tcp, abort)
CONF_TEST(tcp, register)

static int ring_zc_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)rank;
    (void)n;
    return conf_ring_zc(comm, (const char *)arg);
}

/* The zero-copy ring case on 3 ranks: no zero-copy on shm/tcp, exact results. */
Test(conformance, ring_zc_shm_tcp, .timeout = 120)
{
    cr_expect_eq(mp_run(3, ring_zc_fn, "shm", 90), 0, "shm");
    setenv("BRAID_TRANSPORT", "tcp", 1);
    cr_expect_eq(mp_run(3, ring_zc_fn, "tcp", 90), 0, "tcp");
}

typedef struct {
    const char *transport;
    int (*fn)(braid_comm_t, const char *);
} zc_case_t;

static int zc_case_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)rank;
    (void)n;
    const zc_case_t *c = arg;
    return c->fn(comm, c->transport);
}

/* The zero-copy exposure cases (tests/common/conf_zc.c) on 2 ranks, ring, 2 channels: exact
 * results and the per-call time bounds on shm and tcp too (the engine exposes only where data
 * arrives), and a failed all-gather's output untouched by a late peer. */
Test(conformance, zc_exposure_cases_shm_tcp, .timeout = 150)
{
    setenv("BRAID_ALGO", "ring", 1);
    setenv("BRAID_NCHANNELS", "2", 1);
    int (*const fns[])(braid_comm_t, const char *) = {conf_zc_small, conf_zc_bcast, conf_zc_late};
    const char *names[] = {"zcsmall", "zcbcast", "zclate"};
    for (int t = 0; t < 2; t++) {
        const char *tr = t ? "tcp" : "shm";
        setenv("BRAID_TRANSPORT", tr, 1);
        for (int i = 0; i < 3; i++) {
            zc_case_t c = {tr, fns[i]};
            cr_expect_eq(mp_run(2, zc_case_fn, &c, 60), 0, "%s on %s", names[i], tr);
        }
    }
}

/* Every case of the list has a test above for each host transport (16 = 2 x 8). */
Test(conformance, case_list)
{
    int n = 0;
    while (conf_cases[n])
        n++;
    cr_expect_eq(n, 9, "conf_cases has %d entries: add their tests here", n);
}
