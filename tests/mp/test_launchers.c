/* The perf tools and braid_comm_init_env under the launchers users have: braid-run, Open MPI's
 * mpirun, and torchrun-style environment variables set by hand. Each run checks its results
 * (all_reduce_perf -c 1) and must report 0 wrong values. */
#include "proc.h"

#include <criterion/criterion.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static char bindir[PATH_MAX];

static void find_bindir(void)
{
    const char *env = getenv("BRAID_BIN_DIR");
    if (env) {
        snprintf(bindir, sizeof(bindir), "%s", env);
        return;
    }
    ssize_t n = readlink("/proc/self/exe", bindir, sizeof(bindir) - 1);
    cr_assert(n > 0);
    bindir[n] = '\0';
    *strrchr(bindir, '/') = '\0';
}

/* Runs a shell command, returns its output (caller frees) and exit status. */
static char *run(const char *cmd, int *status)
{
    FILE *p = popen(cmd, "r");
    cr_assert(p, "popen %s", cmd);
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap);
    size_t k;
    while ((k = fread(out + len, 1, cap - len - 1, p)) > 0) {
        len += k;
        if (len + 1 == cap) out = realloc(out, cap *= 2);
    }
    out[len] = '\0';
    *status = pclose(p);
    return out;
}

TestSuite(launchers, .timeout = 120, .init = find_bindir);

Test(launchers, perf_tool_under_braid_run)
{
    char cmd[4 * PATH_MAX];
    snprintf(cmd, sizeof(cmd), "%s/braid-run -n 3 %s/all_reduce_perf -b 8 -e 1M -f 8 -d all 2>&1",
             bindir, bindir);
    int st;
    char *out = run(cmd, &st);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit %d:\n%s", st, out);
    cr_assert(strstr(out, "# Out of bounds values : 0 OK"), "%s", out);
    free(out);
}

Test(launchers, perf_tool_under_open_mpi_mpirun)
{
    if (system("command -v mpirun >/dev/null 2>&1") != 0) cr_skip_test("mpirun not installed");
    char cmd[4 * PATH_MAX];
    snprintf(cmd, sizeof(cmd),
             "mpirun --allow-run-as-root --oversubscribe -np 3 --mca btl self,vader "
             "-x BRAID_ROOT=127.0.0.1:%d -x BRAID_SECRET=00112233445566778899aabbccddeeff "
             "%s/all_reduce_perf -b 8 -e 1M -f 8 -o all 2>&1",
             proc_free_port(), bindir);
    int st;
    char *out = run(cmd, &st);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit %d:\n%s", st, out);
    cr_assert(strstr(out, "# Out of bounds values : 0 OK"), "%s", out);
    free(out);
}

Test(launchers, torchrun_style_environment_by_hand)
{
    char cmd[8 * PATH_MAX];
    /* braid's root listens on MASTER_PORT + 1 (torchrun's store owns MASTER_PORT). */
    int port = proc_free_port() - 1;
    size_t o = 0;
    for (int r = 0; r < 3; r++)
        o += (size_t)snprintf(cmd + o, sizeof(cmd) - o,
                              "env -u BRAID_RANK -u BRAID_NRANKS -u BRAID_ROOT RANK=%d "
                              "WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=%d "
                              "BRAID_SECRET=ffeeddccbbaa99887766554433221100 "
                              "%s/all_reduce_perf -b 1K -e 64K -f 4 > /tmp/braid-tr-%d-%d.out "
                              "2>&1 & ",
                              r, port, bindir, port, r);
    snprintf(cmd + o, sizeof(cmd) - o, "wait; cat /tmp/braid-tr-%d-0.out; rm -f /tmp/braid-tr-%d-*",
             port, port);
    int st;
    char *out = run(cmd, &st);
    cr_assert(strstr(out, "# Out of bounds values : 0 OK"), "%s", out);
    free(out);
}
