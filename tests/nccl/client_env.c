/* The NCCL client's environment tests that run alone (one process, no world communicator):
 * nccl.conf files and when NCCL_COMM_BLOCKING is read. Each must be the process's first NCCL
 * call, since NCCL reads both once per process. */
#define _GNU_SOURCE
#include "client.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* NCCL's initEnv (src/misc/param.cc), run by the first ncclGetUniqueId or init: the file
 * NCCL_CONF_FILE names (else ~/.nccl.conf), then /etc/nccl.conf, each NAME=VALUE line set in
 * the environment unless the variable is set already; '#' starts a comment line, and the value
 * runs to the end of its line. The file's NCCL_DEBUG=VERSION makes rank 0's init print the
 * version line (tests/mp/test_nccl.c counts it). Then NCCL_COMM_BLOCKING, read at the first
 * init's config (NCCL's envConfigOverride) and not at ncclGetUniqueId: set after the id was
 * made, it still makes that init non-blocking. */
int test_env_conf(void)
{
    char path[] = "/tmp/nccl_client_conf_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp: %s", strerror(errno));
    static const char conf[] = "# NCCL_CLIENT_COMMENTED=1\n"
                               "NCCL_CLIENT_FROM_CONF=a value=with equals \n"
                               "NCCL_CLIENT_ENV_WINS=conf\n"
                               "a line without an equals sign\n"
                               "\n"
                               "NCCL_DEBUG=VERSION"; /* the last line has no newline */
    ssize_t w = write(fd, conf, sizeof(conf) - 1);
    close(fd);
    CHECK(w == (ssize_t)sizeof(conf) - 1, "write %s", path);
    setenv("NCCL_CONF_FILE", path, 1);
    setenv("NCCL_CLIENT_ENV_WINS", "env", 1);
    unsetenv("NCCL_COMM_BLOCKING");
    ncclUniqueId id;
    ncclResult_t r = ncclGetUniqueId(&id);
    unlink(path);
    NCCLOK(r);
    const char *v = getenv("NCCL_CLIENT_FROM_CONF");
    CHECK(v && !strcmp(v, "a value=with equals "), "NCCL_CLIENT_FROM_CONF from the file: '%s'",
          v ? v : "(unset)");
    v = getenv("NCCL_CLIENT_ENV_WINS");
    CHECK(v && !strcmp(v, "env"), "the environment wins over the file: '%s'", v ? v : "(unset)");
    CHECK(!getenv("NCCL_CLIENT_COMMENTED"), "a comment line was read");
    v = getenv("NCCL_DEBUG");
    CHECK(v && !strcmp(v, "VERSION"), "NCCL_DEBUG from the file's last line: '%s'",
          v ? v : "(unset)");
    setenv("NCCL_COMM_BLOCKING", "0", 1);
    ncclComm_t c = NULL;
    r = ncclCommInitRank(&c, 1, id, 0);
    CHECK(r == ncclInProgress, "an init after NCCL_COMM_BLOCKING=0 was set returned %d (%s)",
          (int)r, ncclGetLastError(NULL));
    ncclResult_t st = ncclInProgress;
    for (double t0 = now_s(); st == ncclInProgress && now_s() - t0 < 30;)
        NCCLOK(ncclCommGetAsyncError(c, &st));
    CHECK(st == ncclSuccess, "init state %d", (int)st);
    if (allreduce_check(c, 0, 1, 41, "after nccl.conf")) return 1;
    NCCLOK(ncclCommDestroy(c));
    printf("rank %d: nccl client passed\n", g_rank);
    return 0;
}
