/* nccl_client: braid's NCCL drop-in exercised by a program that includes nccl.h only.
 *
 * Usage (one rank of a job; tests/mp/test_nccl.c runs it under braid-run with 1..8 ranks):
 *   nccl_client [--require-fp8] [--require-premulsum] TEST...
 * TESTs: api coll groups p2p nonblocking split initall errors refused premulsum close inits
 * (all = each of them),
 * kill (the last rank is SIGKILLed in a collective; the others must get ncclRemoteError or
 * ncclSystemError naming it, and nothing hangs), env (init, one all-reduce, destroy: for the
 * NCCL_* environment tests); alone, as the process's only test: abort_init, env_blocking,
 * env_conf (client_p2p.c, client_env.c). Exits 0 when every check passed.
 *
 * This file holds the command line, the shared helpers, api and kill; coll and premulsum are in
 * client_coll.c, nonblocking, split, initall and errors in client_comm.c, groups, p2p, refused
 * and close in client_p2p.c, inits in client_init.c.
 *
 * Rank and size come from BRAID_RANK/BRAID_NRANKS (braid-run) or OMPI_COMM_WORLD_RANK/SIZE;
 * the world communicator's id comes from NCCL_COMM_ID (set to braid-run's BRAID_ROOT when
 * unset), so every rank calls ncclGetUniqueId itself, as NCCL programs do with NCCL_COMM_ID.
 * Later communicators get ids the usual way: rank 0 creates one and broadcasts it. */
#define _GNU_SOURCE
#include "client.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int g_rank, g_nranks;
int require_fp8, require_premulsum;

static int env_int(const char *a, const char *b, int def)
{
    const char *v = getenv(a);
    if (!v) v = getenv(b);
    return v ? atoi(v) : def;
}

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int shared_id(ncclComm_t world, ncclUniqueId *id)
{
    memset(id, 0, sizeof(*id));
    if (g_rank == 0) NCCLOK(ncclGetUniqueId(id));
    NCCLOK(ncclBroadcast(id, id, sizeof(*id), ncclUint8, 0, world, NULL));
    return 0;
}

/* ---- shared: an all-reduce checked against the reference ---------------------------------- */
int allreduce_check(ncclComm_t c, int rank, int n, int seed, const char *what)
{
    size_t count = 777;
    int32_t *a = malloc(count * 4);
    CHECK(a, "malloc");
    fill(a, ncclInt32, ncclSum, rank, n, 0, count, seed);
    NCCLOK(ncclAllReduce(a, a, count, ncclInt32, ncclSum, c, NULL));
    CHECK(!check_reduced(a, ncclInt32, ncclSum, n, 0, count, seed, 0, what), "%s", what);
    free(a);
    return 0;
}

/* ---- api ----------------------------------------------------------------------------------- */
static int test_api(ncclComm_t world)
{
    int v = 0;
    NCCLOK(ncclGetVersion(&v));
    CHECK(v == NCCL_VERSION_CODE, "ncclGetVersion %d, header %d (another libnccl?)", v,
          NCCL_VERSION_CODE);
    for (int a = 0; a < ncclNumResults; a++) {
        const char *s = ncclGetErrorString((ncclResult_t)a);
        CHECK(s && *s, "no string for result %d", a);
        for (int b = 0; b < a; b++)
            CHECK(strcmp(s, ncclGetErrorString((ncclResult_t)b)), "results %d and %d read '%s'", a,
                  b, s);
    }
    CHECK(ncclGetErrorString((ncclResult_t)99) != NULL, "unknown result");
    int n = -1, r = -1, dev = -1;
    NCCLOK(ncclCommCount(world, &n));
    NCCLOK(ncclCommUserRank(world, &r));
    NCCLOK(ncclCommCuDevice(world, &dev));
    CHECK(n == g_nranks && r == g_rank && dev == 0, "count %d rank %d device %d", n, r, dev);
    ncclResult_t st = ncclInternalError;
    NCCLOK(ncclCommGetAsyncError(world, &st));
    CHECK(st == ncclSuccess, "async error %d", (int)st);

    /* ncclMemAlloc'd and registered buffers in a collective. */
    size_t count = 4099;
    float *a = NULL, *b = NULL;
    NCCLOK(ncclMemAlloc((void **)&a, count * sizeof(float)));
    NCCLOK(ncclMemAlloc((void **)&b, count * sizeof(float)));
    CHECK(((uintptr_t)a & 4095) == 0, "ncclMemAlloc is page aligned");
    void *ha = NULL, *hb = NULL;
    NCCLOK(ncclCommRegister(world, a, count * sizeof(float), &ha));
    NCCLOK(ncclCommRegister(world, b, count * sizeof(float), &hb));
    fill(a, ncclFloat32, ncclSum, g_rank, g_nranks, 0, count, 11);
    NCCLOK(ncclAllReduce(a, b, count, ncclFloat32, ncclSum, world, NULL));
    CHECK(!check_reduced(b, ncclFloat32, ncclSum, g_nranks, 0, count, 11, 0, "registered"),
          "registered all-reduce");
    NCCLOK(ncclCommDeregister(world, ha));
    NCCLOK(ncclCommDeregister(world, hb));
    /* As NCCL: a NULL handle is nothing to do, an unknown one is a usage error. */
    EXPECT(ncclCommDeregister(world, hb), ncclInvalidUsage, "not registered");
    NCCLOK(ncclCommDeregister(world, NULL));
    NCCLOK(ncclMemFree(a));
    NCCLOK(ncclMemFree(b));
    CHECK(ncclMemAlloc(NULL, 8) == ncclInvalidArgument, "ncclMemAlloc(NULL)");
    CHECK(ncclMemAlloc((void **)&a, 0) == ncclInvalidArgument, "ncclMemAlloc(size 0)");
    NCCLOK(ncclCommFinalize(world));
    NCCLOK(ncclCommFinalize(NULL));
    /* The profiling names are the same functions. */
    int pv = 0;
    NCCLOK(pncclGetVersion(&pv));
    CHECK(pv == v, "pncclGetVersion %d", pv);
    printf("rank %d: api ok\n", g_rank);
    return 0;
}

/* ---- kill ---------------------------------------------------------------------------------- */
static int test_kill(void)
{
    int n = g_nranks, victim = n - 1;
    if (g_rank == victim) {
        /* braid-run ends the job when a rank it started dies: the rank runs in a child. */
        pid_t pid = fork();
        if (pid > 0) {
            int status;
            waitpid(pid, &status, 0);
            printf("rank %d: victim %s\n", g_rank,
                   WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL ? "killed" : "NOT killed");
            return !(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        }
    }
    ncclUniqueId id;
    NCCLOK(ncclGetUniqueId(&id));
    ncclComm_t world;
    NCCLOK(ncclCommInitRank(&world, n, id, g_rank));
    for (int i = 0; i < 2; i++)
        if (allreduce_check(world, g_rank, n, 30 + i, "before the kill")) return 1;
    if (g_rank == victim) raise(SIGKILL);
    size_t count = 1 << 16;
    float *a = calloc(count, sizeof(float));
    CHECK(a, "calloc");
    double t0 = now_s();
    ncclResult_t r = ncclSuccess;
    for (int i = 0; i < 1000 && r == ncclSuccess; i++)
        r = ncclAllReduce(a, a, count, ncclFloat, ncclSum, world, NULL);
    double dt = now_s() - t0;
    const char *msg = ncclGetLastError(world);
    char want[32];
    snprintf(want, sizeof(want), "rank %d", victim);
    CHECK(r == ncclRemoteError || r == ncclSystemError, "got %d (%s): %s", r, ncclGetErrorString(r),
          msg);
    CHECK(strstr(msg, want), "message '%s' does not name %s", msg, want);
    ncclResult_t st = ncclSuccess;
    NCCLOK(ncclCommGetAsyncError(world, &st));
    CHECK(st == ncclRemoteError || st == ncclSystemError, "async error %d", st);
    NCCLOK(ncclCommAbort(world));
    free(a);
    printf("rank %d: kill ok after %.2f s: %s: %s\n", g_rank, dt, ncclGetErrorString(r), msg);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    g_rank = env_int("BRAID_RANK", "OMPI_COMM_WORLD_RANK", 0);
    g_nranks = env_int("BRAID_NRANKS", "OMPI_COMM_WORLD_SIZE", 1);
    if (!getenv("NCCL_COMM_ID") && getenv("BRAID_ROOT"))
        setenv("NCCL_COMM_ID", getenv("BRAID_ROOT"), 1);
    const char *tests[32];
    int nt = 0;
    for (int i = 1; i < argc && nt < 30; i++) {
        if (!strcmp(argv[i], "--require-fp8"))
            require_fp8 = 1;
        else if (!strcmp(argv[i], "--require-premulsum"))
            require_premulsum = 1;
        else if (!strcmp(argv[i], "all")) {
            static const char *all[] = {"api",         "coll",      "groups",  "p2p",
                                        "nonblocking", "split",     "initall", "errors",
                                        "refused",     "premulsum", "close",   "inits"};
            for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++)
                tests[nt++] = all[k];
        } else
            tests[nt++] = argv[i];
    }
    if (nt == 1 && !strcmp(tests[0], "kill")) return test_kill();
    if (nt == 1 && !strcmp(tests[0], "abort_init")) return test_abort_init();
    if (nt == 1 && !strcmp(tests[0], "env_blocking")) return test_env_blocking();
    if (nt == 1 && !strcmp(tests[0], "env_conf")) return test_env_conf();
    ncclUniqueId id;
    NCCLOK(ncclGetUniqueId(&id));
    ncclComm_t world;
    NCCLOK(ncclCommInitRank(&world, g_nranks, id, g_rank));
    unsetenv("NCCL_COMM_ID"); /* later ids: rank 0 makes them and broadcasts */
    int fail = 0;
    for (int i = 0; i < nt && !fail; i++) {
        const char *t = tests[i];
        if (!strcmp(t, "api"))
            fail = test_api(world);
        else if (!strcmp(t, "coll"))
            fail = test_coll(world);
        else if (!strcmp(t, "groups"))
            fail = test_groups(world);
        else if (!strcmp(t, "p2p"))
            fail = test_p2p(world);
        else if (!strcmp(t, "nonblocking"))
            fail = test_nonblocking(world);
        else if (!strcmp(t, "split"))
            fail = g_nranks > 1 ? test_split(world) : 0;
        else if (!strcmp(t, "initall"))
            fail = test_initall(world);
        else if (!strcmp(t, "errors"))
            fail = test_errors(world);
        else if (!strcmp(t, "refused"))
            fail = test_refused(world);
        else if (!strcmp(t, "premulsum"))
            fail = test_premulsum(world);
        else if (!strcmp(t, "close"))
            fail = test_close(world);
        else if (!strcmp(t, "inits"))
            fail = test_inits(world);
        else if (!strcmp(t, "env"))
            fail = allreduce_check(world, g_rank, g_nranks, 3, "env");
        else {
            fprintf(stderr, "nccl_client: unknown test '%s'\n", t);
            return 2;
        }
    }
    NCCLOK(ncclCommDestroy(world));
    if (!fail) printf("rank %d: nccl client passed\n", g_rank);
    return fail;
}
