/* `braid-info --rings`: the rings a communicator would build for a given layout, run as the
 * real binary ($BRAID_BIN_DIR, else next to this test binary). The printed rings are checked
 * here independently: each is a permutation of the ranks, the printed crossings are recounted
 * from the layout, and they are the fewest possible (hosts: one per host; NUMA: k - 1 per host
 * with k nodes, k for a lone host). Bad arguments exit 2 naming the argument. */
#include "algos/algo.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(braidinfo, .timeout = 30);

/* Runs braid-info with args under the environment assignments env (stderr into the output
 * too); returns its exit status. */
static int run_info_env(const char *env, const char *args, char *out, size_t len);
static int run_info(const char *args, char *out, size_t len)
{
    return run_info_env("", args, out, len);
}

static int run_info_env(const char *envs, const char *args, char *out, size_t len)
{
    char dir[PATH_MAX], cmd[PATH_MAX + 512];
    const char *env = getenv("BRAID_BIN_DIR");
    if (env && *env) {
        snprintf(dir, sizeof(dir), "%s", env);
    } else {
        ssize_t n = readlink("/proc/self/exe", dir, sizeof(dir) - 1);
        cr_assert(n > 0, "readlink: %s", strerror(errno));
        dir[n] = '\0';
        *strrchr(dir, '/') = '\0';
    }
    snprintf(cmd, sizeof(cmd), "env -u BRAID_NCHANNELS %s %s/braid-info %s 2>&1", envs, dir, args);
    FILE *p = popen(cmd, "r");
    cr_assert(p, "popen %s", cmd);
    size_t used = fread(out, 1, len - 1, p);
    out[used] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Checks every "channel c ring:" line of out against the layout; returns the channels seen. */
static int check_rings(const char *out, int n, const int *host, const int *numa)
{
    int channels = 0;
    for (const char *l = strstr(out, "\nchannel "); l; l = strstr(l + 1, "\nchannel ")) {
        l++;
        int ch, pos = 0, order[64], seen[64] = {0};
        cr_assert_eq(sscanf(l, "channel %d ring:", &ch), 1, "%s", l);
        cr_assert_eq(ch, channels, "channel numbering");
        const char *p = strchr(l, ':') + 1;
        while (*p && *p != '\n') {
            if (*p == ' ' || *p == '|') {
                p++;
                continue;
            }
            char *end;
            long r = strtol(p, &end, 10);
            cr_assert(end != p && r >= 0 && r < n && !seen[r]++, "ring line: %s", l);
            order[pos++] = (int)r;
            p = end;
        }
        cr_assert_eq(pos, n, "ring of %d ranks lists %d", n, pos);
        int hx = 0, nx = 0, hosts = 0, pairs = 0;
        for (int i = 0; i < n; i++) {
            int a = order[i], b = order[(i + 1) % n];
            hx += host[a] != host[b];
            nx += host[a] == host[b] && numa && numa[a] != numa[b];
        }
        for (int r = 0; r < n; r++) {
            int new_host = 1, new_pair = 1;
            for (int q = 0; q < r; q++) {
                new_host &= host[q] != host[r];
                new_pair &= host[q] != host[r] || (numa && numa[q] != numa[r]);
            }
            hosts += new_host;
            pairs += new_pair;
        }
        int fewest_h = hosts > 1 ? hosts : 0;
        int fewest_n = hosts > 1 ? pairs - hosts : (pairs > 1 ? pairs : 0);
        int ph, pfh, pn, pfn;
        const char *x = strstr(p, "host crossings");
        cr_assert(x, "no crossings line after: %s", l);
        cr_assert_eq(sscanf(x, "host crossings %d (fewest %d), NUMA crossings %d (fewest %d)", &ph,
                            &pfh, &pn, &pfn),
                     4, "%s", x);
        cr_assert(ph == hx && pn == nx, "printed %d/%d, recounted %d/%d", ph, pn, hx, nx);
        cr_assert(pfh == fewest_h && pfn == fewest_n, "fewest %d/%d, expected %d/%d", pfh, pfn,
                  fewest_h, fewest_n);
        cr_assert(hx == fewest_h && nx == fewest_n, "channel %d is not a fewest-crossings ring",
                  ch);
        channels++;
    }
    return channels;
}

Test(braidinfo, rings_for_round_robin_hosts_and_numa_nodes)
{
    char out[8192];
    int rc = run_info("--rings 8 a,b,a,b,a,b,a,b 0,0,1,1,0,0,1,1 2", out, sizeof(out));
    cr_assert_eq(rc, 0, "%s", out);
    int host[8] = {0, 1, 0, 1, 0, 1, 0, 1}, numa[8] = {0, 0, 1, 1, 0, 0, 1, 1};
    cr_assert_eq(check_rings(out, 8, host, numa), 2, "%s", out);
    cr_assert(strstr(out, "channel 0 ring: 0 4 2 6 | 1 5 3 7\n"), "%s", out);
    cr_assert(strstr(out, "8 rank(s) on 2 host(s), 2 channel(s), NUMA nodes given"), "%s", out);
    cr_assert(strstr(out, "rank-order ring for comparison: host crossings 8, NUMA crossings 0"),
              "%s", out);
}

Test(braidinfo, rings_for_shuffled_layouts)
{
    /* Uneven hosts in launcher order c,a,c,b,a,c,b (host labels are arbitrary strings). */
    char out[8192];
    cr_assert_eq(run_info("--rings 7 c,a,c,b,a,c,b 1,0,0,-1,1,1,0", out, sizeof(out)), 0, "%s",
                 out);
    int host[7] = {2, 0, 2, 1, 0, 2, 1}, numa[7] = {1, 0, 0, -1, 1, 1, 0};
    cr_assert_eq(check_rings(out, 7, host, numa), 1, "%s", out);
    /* No NUMA map: one host-crossing per host only. */
    cr_assert_eq(run_info("--rings 6 x,y,z,x,y,z", out, sizeof(out)), 0, "%s", out);
    int h2[6] = {0, 1, 2, 0, 1, 2};
    cr_assert_eq(check_rings(out, 6, h2, NULL), 1, "%s", out);
    cr_assert(strstr(out, "NUMA nodes unknown"), "%s", out);
    /* One host, three NUMA nodes: the ring closes, so 3 crossings. */
    cr_assert_eq(run_info("--rings 6 h,h,h,h,h,h 2,1,0,2,1,0", out, sizeof(out)), 0, "%s", out);
    int h3[6] = {0}, n3[6] = {2, 1, 0, 2, 1, 0};
    cr_assert_eq(check_rings(out, 6, h3, n3), 1, "%s", out);
}

Test(braidinfo, rings_reject_bad_arguments)
{
    char out[4096];
    cr_assert_eq(run_info("--rings 3 a,b", out, sizeof(out)), 2);
    cr_assert(strstr(out, "HOSTMAP has 2 entries for 3 ranks"), "%s", out);
    cr_assert_eq(run_info("--rings 2 a,b 0,z", out, sizeof(out)), 2);
    cr_assert(strstr(out, "NUMAMAP entry 2 'z'"), "%s", out);
    cr_assert_eq(run_info("--rings 0 a", out, sizeof(out)), 2);
    cr_assert(strstr(out, "NRANKS '0'"), "%s", out);
    cr_assert_eq(run_info("--rings 2 a,,b", out, sizeof(out)), 2);
    cr_assert(strstr(out, "HOSTMAP: field 2 is empty"), "%s", out);
    cr_assert_eq(run_info("--rings 2 a,b - 99", out, sizeof(out)), 2);
    cr_assert(strstr(out, "NCHANNELS 99 exceeds"), "%s", out);
    cr_assert_eq(run_info("--rings 2", out, sizeof(out)), 2);
}

/* --params hides the secret, flags invalid values and lists misspelled names (exit 1). */
Test(braidinfo, params_mask_secret_and_flag_invalid_values)
{
    static char out[1 << 16];
    const char *secret = "0123456789abcdef0123456789abcdef";
    char env[256];
    snprintf(env, sizeof(env), "BRAID_SECRET=%s BRAID_TIMEOUT=0", secret);
    cr_assert_eq(run_info_env(env, "--params", out, sizeof(out)), 0, "%s", out);
    cr_assert_null(strstr(out, secret), "the secret is printed:\n%s", out);
    cr_assert(strstr(out, "(set, hidden)"), "%s", out);
    cr_assert_null(strstr(out, "INVALID"), "%s", out);
    cr_assert(strstr(out, "0 = no timeout"), "%s", out);

    cr_assert_eq(run_info_env("BRAID_TRANSPORT=tpc BRAID_NSOCKS_PERPEER=99 BRAID_CHUNKSIZE=1M "
                              "BRAID_SECRET=xyz",
                              "--params", out, sizeof(out)),
                 1, "%s", out);
    cr_assert(strstr(out, "^ INVALID: not one of shm,tcp,rdma; did you mean tcp?"), "%s", out);
    cr_assert(strstr(out, "^ INVALID: not a power of two in [1, 8]"), "%s", out);
    cr_assert(strstr(out, "^ INVALID: not 32 hex digits"), "%s", out);
    cr_assert_null(strstr(out, "xyz"), "%s", out);
    cr_assert(strstr(out, "BRAID_CHUNKSIZE is not a braid variable and has no effect; did you "
                          "mean BRAID_CHUNK_SIZE?"),
              "%s", out);
    cr_assert(strstr(out, "braid-info: 3 invalid values, 1 unknown BRAID_* variable"), "%s", out);
}

Test(braidinfo, version_and_help_per_subcommand)
{
    static char out[1 << 16];
    cr_assert_eq(run_info("--version", out, sizeof(out)), 0, "%s", out);
    int v = braid_version();
    char want[64];
    snprintf(want, sizeof(want), "(library %d.%d.%d)", v / 10000, v / 100 % 100, v % 100);
    cr_assert(strstr(out, "braid-info ") == out && strstr(out, want), "%s", out);

    cr_assert_eq(run_info("--help", out, sizeof(out)), 0, "%s", out);
    static const char *const cmds[] = {"--params", "--tune", "--peers", "--rings", "--version"};
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
        cr_assert(strstr(out, cmds[i]), "--help does not list %s:\n%s", cmds[i], out);
    cr_assert_eq(run_info("--tune --help", out, sizeof(out)), 0, "%s", out);
    cr_assert(strstr(out, "usage: braid-info --tune") && strstr(out, "--measure"), "%s", out);
    cr_assert_null(strstr(out, "--rings"), "%s", out);
    cr_assert_eq(run_info("--help rings", out, sizeof(out)), 0, "%s", out);
    cr_assert(strstr(out, "usage: braid-info --rings NRANKS HOSTMAP"), "%s", out);
    cr_assert_eq(run_info("--params -h", out, sizeof(out)), 0, "%s", out);
    cr_assert(strstr(out, "BRAID_SECRET hidden"), "%s", out);
    cr_assert_eq(run_info("--help bogus", out, sizeof(out)), 2, "%s", out);
    cr_assert(strstr(out, "no subcommand 'bogus'"), "%s", out);
}

/* The algorithm list names every algorithm the library has. */
Test(braidinfo, algorithm_list_complete)
{
    static char out[1 << 17];
    cr_assert_eq(run_info("", out, sizeof(out)), 0, "%s", out);
    const char *line = strstr(out, "\nalgorithms:");
    cr_assert(line, "%s", out);
    const char *eol = strchr(line + 1, '\n');
    for (int a = 0; a < BRAID_ALGO_COUNT; a++) {
        char name[64];
        snprintf(name, sizeof(name), " %s (", braid_algo_name(a));
        const char *at = strstr(line, name);
        cr_assert(at && at < eol, "algorithm %s missing: %.*s", braid_algo_name(a),
                  (int)(eol - line), line);
    }
}
