/* Suite `nccl`: braid's NCCL drop-in (build/nccl/lib/libnccl.so.2) driven by a program written
 * against nccl.h only (tests/nccl, built as nccl_client), run as 1..8 real processes under
 * braid-run on host buffers. Also: the client links braid's libnccl.so.2 and not the CUDA
 * toolkit's (ldd, readelf), a SIGKILLed rank gives ncclRemoteError/ncclSystemError naming it,
 * and NCCL_* variables reach braid with BRAID_* ones taking precedence. */
#include "braid/braid.h"

#include <criterion/criterion.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char bindir[PATH_MAX];

static void find_bindir(void)
{
    const char *env = getenv("BRAID_BIN_DIR");
    if (env) {
        snprintf(bindir, sizeof(bindir), "%s", env);
    } else {
        ssize_t n = readlink("/proc/self/exe", bindir, sizeof(bindir) - 1);
        cr_assert(n > 0);
        bindir[n] = '\0';
        *strrchr(bindir, '/') = '\0';
    }
    unsetenv("BRAID_ROOT"); /* braid-run honours an inherited one */
    unsetenv("NCCL_COMM_ID");
}

TestSuite(nccl, .timeout = 240, .init = find_bindir);

/* Runs a shell command with stderr merged; returns its output (caller frees), sets *status to
 * the exit code (-1 if it did not exit). */
static char *run(int *status, const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    strncat(cmd, " 2>&1", sizeof(cmd) - strlen(cmd) - 1);
    FILE *p = popen(cmd, "r");
    cr_assert(p, "popen %s", cmd);
    size_t cap = 1 << 16, len = 0, k;
    char *out = malloc(cap);
    while ((k = fread(out + len, 1, cap - len - 1, p)) > 0) {
        len += k;
        if (len + 1 == cap) out = realloc(out, cap *= 2);
    }
    out[len] = '\0';
    int st = pclose(p);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

static int count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

/* What must work: PreMulSum, and float8 (as ncclFloat8e4m3/e5m2) since braid has them. */
static const char *requirements(void)
{
    return braid_dtype_size(BRAID_FLOAT8_E4M3) && braid_dtype_size(BRAID_FLOAT8_E5M2)
               ? "--require-fp8 --require-premulsum"
               : "--require-premulsum";
}

static void client(int n, const char *tests)
{
    int st;
    char *out = run(&st,
                    "cd \"$BIN\" && ./braid-run -n %d --timeout 200 -x BRAID_TIMEOUT=60 "
                    "./nccl_client %s %s",
                    n, requirements(), tests);
    cr_expect_eq(st, 0, "%d ranks, %s: exit %d\n%s", n, tests, st, out);
    cr_expect_eq(count_of(out, "nccl client passed"), n, "%d ranks: not every rank passed\n%s", n,
                 out);
    free(out);
}

/* The tests run braid-run and the client from the binary directory ($BIN). */
static void setenv_bin(void)
{
    find_bindir();
    setenv("BIN", bindir, 1);
}

/* ldd's lines "name => path (address)": the resolved path of each library by its name, checked
 * by the names and resolved paths alone (the build directory may contain "cuda" or "braid"). */
static int ldd_entries(char *out, char names[][256], char paths[][PATH_MAX], int max)
{
    int n = 0;
    for (char *line = strtok(out, "\n"); line && n < max; line = strtok(NULL, "\n")) {
        char name[256], path[PATH_MAX];
        if (sscanf(line, " %255s => %4095s", name, path) != 2) continue;
        snprintf(names[n], 256, "%s", name);
        if (!realpath(path, paths[n])) snprintf(paths[n], PATH_MAX, "%s", path);
        n++;
    }
    return n;
}

Test(nccl, links_braids_libnccl)
{
    int st;
    char *out = run(&st, "ldd %s/nccl_client", bindir);
    cr_assert_eq(st, 0, "%s", out);
    char copy[16384];
    snprintf(copy, sizeof(copy), "%s", out);
    static char names[64][256], paths[64][PATH_MAX];
    int n = ldd_entries(out, names, paths, 64);
    char want_path[PATH_MAX + 32], want[PATH_MAX];
    snprintf(want_path, sizeof(want_path), "%s/../nccl/lib/libnccl.so.2", bindir);
    cr_assert(realpath(want_path, want), "no %s", want_path);
    int found = 0;
    for (int i = 0; i < n; i++) {
        if (!strcmp(names[i], "libnccl.so.2")) {
            found = 1;
            cr_expect_str_eq(paths[i], want, "client resolves libnccl.so.2 to %s, want %s",
                             paths[i], want);
        }
        /* Neither the name nor the resolved file of a dependency is a CUDA library or braid. */
        const char *base = strrchr(paths[i], '/') ? strrchr(paths[i], '/') + 1 : paths[i];
        cr_expect(strncmp(names[i], "libcuda", 7) && strncmp(base, "libcuda", 7),
                  "a CUDA library in the client's ldd: %s => %s", names[i], paths[i]);
        cr_expect(strncmp(names[i], "libbraid", 8) && strncmp(base, "libbraid", 8),
                  "the client needs libbraid: %s => %s", names[i], paths[i]);
    }
    cr_assert(found, "no libnccl.so.2 in ldd output:\n%s", copy);
    free(out);
    out = run(&st, "readelf -d %s/../nccl/lib/libnccl.so.2", bindir);
    cr_expect(strstr(out, "Library soname: [libnccl.so.2]"), "soname:\n%s", out);
    free(out);
    /* Only NCCL's names are exported (braid stays private). */
    out = run(&st,
              "nm -D --defined-only %s/../nccl/lib/libnccl.so.2 | awk '{print $3}' | "
              "grep -v '^p\\?nccl' | wc -l",
              bindir);
    cr_expect_eq(atoi(out), 0, "exported non-NCCL symbols: %s", out);
    free(out);
}

Test(nccl, client_1_rank, .init = setenv_bin)
{
    client(1, "all");
}
Test(nccl, client_2_ranks, .init = setenv_bin)
{
    client(2, "all");
}
Test(nccl, client_3_ranks, .init = setenv_bin)
{
    client(3, "all");
}
Test(nccl, client_4_ranks, .init = setenv_bin)
{
    client(4, "all");
}
Test(nccl, client_5_ranks, .init = setenv_bin)
{
    client(5, "all");
}
Test(nccl, client_6_ranks, .init = setenv_bin)
{
    client(6, "all");
}
Test(nccl, client_7_ranks, .init = setenv_bin)
{
    client(7, "all");
}
Test(nccl, client_8_ranks, .init = setenv_bin)
{
    client(8, "all");
}

static void kill_case(int n)
{
    int st;
    char *out = run(&st,
                    "cd \"$BIN\" && ./braid-run -n %d --timeout 60 -x BRAID_TIMEOUT=30 "
                    "./nccl_client kill",
                    n);
    cr_expect_eq(st, 0, "%d ranks: exit %d\n%s", n, st, out);
    cr_expect_eq(count_of(out, "kill ok"), n - 1, "%d ranks: survivors\n%s", n, out);
    cr_expect_eq(count_of(out, "victim killed"), 1, "%d ranks: victim\n%s", n, out);
    free(out);
}

Test(nccl, killed_peer_2_ranks, .init = setenv_bin)
{
    kill_case(2);
}
Test(nccl, killed_peer_4_ranks, .init = setenv_bin)
{
    kill_case(4);
}

/* Aborts of running inits return at once; the orphaned inits' threads free the communicators
 * once braid's inits fail (BRAID_TIMEOUT=3, set before the program starts: braid's threads
 * read it), which their INFO lines tell. */
Test(nccl, abort_running_init, .init = setenv_bin)
{
    int st;
    char *out = run(&st, "cd \"$BIN\" && BRAID_TIMEOUT=3 NCCL_DEBUG=INFO timeout 60 "
                         "./nccl_client abort_init");
    cr_expect_eq(st, 0, "exit %d\n%s", st, out);
    cr_expect_eq(count_of(out, "abort_init ok"), 1, "%s", out);
    cr_expect_eq(count_of(out, "orphaned init done"), 2, "the orphaned inits' threads:\n%s", out);
    free(out);
}

/* nccl.conf (NCCL_CONF_FILE, written by the client itself) and the lazy NCCL_COMM_BLOCKING, in
 * one process: its NCCL_DEBUG=VERSION line prints the version once. */
Test(nccl, conf_file, .init = setenv_bin)
{
    int st;
    char *out = run(&st, "cd \"$BIN\" && env -u NCCL_CONF_FILE -u NCCL_DEBUG -u NCCL_COMM_BLOCKING "
                         "timeout 60 ./nccl_client env_conf");
    cr_expect_eq(st, 0, "exit %d\n%s", st, out);
    cr_expect_eq(count_of(out, "nccl client passed"), 1, "%s", out);
    cr_expect_eq(count_of(out, "NCCL version 2.26.6+braid"), 1,
                 "NCCL_DEBUG=VERSION from the file:\n%s", out);
    free(out);
}

/* NCCL_* variables: NCCL_DEBUG=VERSION prints the version once; INFO with SUBSYS=INIT shows
 * braid's INIT lines; NCCL_SHM_DISABLE=1 makes braid use tcp within the host unless
 * BRAID_TRANSPORT says otherwise. */
Test(nccl, nccl_environment, .init = setenv_bin)
{
    int st;
    char *out = run(&st, "cd \"$BIN\" && ./braid-run -n 2 -x NCCL_DEBUG=VERSION ./nccl_client env");
    cr_expect_eq(st, 0, "%s", out);
    cr_expect_eq(count_of(out, "NCCL version 2.26.6+braid"), 1, "%s", out);
    free(out);
    out = run(&st, "cd \"$BIN\" && ./braid-run -n 2 -x NCCL_DEBUG=INFO -x NCCL_DEBUG_SUBSYS=INIT "
                   "-x NCCL_SHM_DISABLE=1 ./nccl_client env");
    cr_expect_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "via tcp") && !strstr(out, "via shm"), "NCCL_SHM_DISABLE=1:\n%s", out);
    cr_expect(strstr(out, "NCCL_SHM_DISABLE=1 -> BRAID_TRANSPORT=tcp"), "mapping logged:\n%s", out);
    free(out);
    out = run(&st, "cd \"$BIN\" && ./braid-run -n 2 -x NCCL_DEBUG=INFO -x NCCL_DEBUG_SUBSYS=INIT "
                   "-x NCCL_SHM_DISABLE=1 -x BRAID_TRANSPORT=shm ./nccl_client env");
    cr_expect_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "via shm") && !strstr(out, "via tcp"), "BRAID_TRANSPORT wins:\n%s", out);
    free(out);
    /* NCCL_COMM_BLOCKING=0 makes a blocking config's init non-blocking (envConfigOverride). */
    out = run(&st, "cd \"$BIN\" && ./braid-run -n 2 -x NCCL_COMM_BLOCKING=0 ./nccl_client "
                   "env_blocking");
    cr_expect_eq(st, 0, "%s", out);
    cr_expect_eq(count_of(out, "nccl client passed"), 2, "NCCL_COMM_BLOCKING=0:\n%s", out);
    free(out);
    out = run(&st, "cd \"$BIN\" && ./braid-run -n 2 -x NCCL_DEBUG=INFO -x BRAID_DEBUG=WARN "
                   "./nccl_client env");
    cr_expect_eq(st, 0, "%s", out);
    cr_expect(!strstr(out, "braid INFO"), "BRAID_DEBUG=WARN wins over NCCL_DEBUG=INFO:\n%s", out);
    free(out);
    /* The rest of the table: each mapping is logged, and the channels and slots show in braid's
     * INIT line (NCCL_BUFFSIZE / 8 per slot); 2 x 3 sockets are 4 and 7 QPs per connection are
     * 4 (braid takes powers of two). */
    out = run(&st, "cd \"$BIN\" && ./braid-run -n 2 -x NCCL_DEBUG=INFO -x NCCL_DEBUG_SUBSYS=INIT "
                   "-x NCCL_SOCKET_IFNAME=lo -x NCCL_ALGO=tree -x NCCL_NCHANNELS=2 "
                   "-x NCCL_BUFFSIZE=1048576 -x NCCL_HOSTID=hostA -x NCCL_NSOCKS_PERTHREAD=2 "
                   "-x NCCL_SOCKET_NTHREADS=3 -x NCCL_IB_HCA=mlx5_0 -x NCCL_IB_GID_INDEX=3 "
                   "-x NCCL_IB_QPS_PER_CONNECTION=7 ./nccl_client env");
    cr_expect_eq(st, 0, "%s", out);
    static const char *logged[] = {"NCCL_SOCKET_IFNAME -> BRAID_SOCKET_IFNAME=lo",
                                   "NCCL_ALGO -> BRAID_ALGO=tree",
                                   "NCCL_NCHANNELS -> BRAID_NCHANNELS=2",
                                   "NCCL_BUFFSIZE -> BRAID_CHUNK_SIZE=131072",
                                   "NCCL_HOSTID -> BRAID_HOSTNAME=hostA",
                                   "NCCL_SOCKET_NTHREADS -> BRAID_NSOCKS_PERPEER=4",
                                   "NCCL_IB_HCA -> BRAID_IB_HCA=mlx5_0",
                                   "NCCL_IB_GID_INDEX -> BRAID_IB_GID_INDEX=3",
                                   "NCCL_IB_QPS_PER_CONNECTION -> BRAID_IB_QPS_PER_CONN=4",
                                   "2 channel(s), chunk 131072 B"};
    for (size_t i = 0; i < sizeof(logged) / sizeof(logged[0]); i++)
        cr_expect_eq(count_of(out, logged[i]), 2, "'%s' once per rank:\n%s", logged[i], out);
    free(out);
    /* What braid has no equivalent for is ignored, with a note; BRAID_* still wins. */
    out = run(&st, "cd \"$BIN\" && ./braid-run -n 2 -x NCCL_DEBUG=INFO -x NCCL_DEBUG_SUBSYS=INIT "
                   "-x NCCL_ALGO=Ring,NVLS -x NCCL_NCHANNELS=3 -x BRAID_NCHANNELS=1 "
                   "./nccl_client env");
    cr_expect_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "NCCL_ALGO=Ring,NVLS ignored"), "%s", out);
    cr_expect(strstr(out, "NCCL_NCHANNELS ignored: BRAID_NCHANNELS=1 is set"), "%s", out);
    cr_expect_eq(count_of(out, " 1 channel(s)"), 2, "%s", out);
    free(out);
}
