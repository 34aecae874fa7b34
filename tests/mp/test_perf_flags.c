/* The perf tools against nccl-tests 2.19 semantics, run as real processes under braid-run:
 * -r -1 (every root), -z 0..3, -N run cycles, -R registration, -u misalignment, -J JSON, -S,
 * -I/-K, -M, the flags accepted with a note, NCCL_TESTS_SPLIT, the header and footer lines,
 * and the footer printed even when another rank finds wrong data (PERF_TEST_CORRUPT_RANK); the
 * point-to-point tools' data and bus bandwidth; the harness's own selftest. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
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

/* Runs the shell command cmd; returns its output (caller frees) and exit status. */
static char *run_cmd(const char *cmd, int *status)
{
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
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    return out;
}

/* Runs "braid-run -n N <tool> <args>" with env prefix; returns stdout+stderr (caller frees)
 * and the exit status. */
static char *run_tool(const char *env, int n, const char *tool, const char *args, int *status)
{
    char cmd[3 * PATH_MAX];
    int w = snprintf(cmd, sizeof(cmd), "env %s %s/braid-run -n %d --timeout 100 %s/%s %s 2>&1", env,
                     bindir, n, bindir, tool, args);
    cr_assert(w > 0 && (size_t)w < sizeof(cmd), "command too long");
    return run_cmd(cmd, status);
}

/* Result rows: lines that start with a size (spaces then a digit). */
static int count_rows(const char *out, const char *must_contain)
{
    int rows = 0;
    for (const char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        const char *p = l;
        while (*p == ' ')
            p++;
        if (p == l || !isdigit((unsigned char)*p)) continue;
        const char *e = strchr(l, '\n');
        size_t len = e ? (size_t)(e - l) : strlen(l);
        char line[1024];
        snprintf(line, sizeof(line), "%.*s", (int)(len < sizeof(line) ? len : sizeof(line) - 1), l);
        if (!must_contain || strstr(line, must_contain)) rows++;
    }
    return rows;
}

/* Every row's two #wrong columns are 0 (columns 9 and 13 of the plain layout). */
/* The next result row of a tool's output from *cur (a line that starts with spaces, then a
 * digit), advancing *cur past it; NULL after the last. */
static const char *next_row(const char **cur)
{
    for (const char *l = *cur; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        const char *p = l;
        while (*p == ' ')
            p++;
        if (p == l || !isdigit((unsigned char)*p)) continue;
        *cur = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL;
        return l;
    }
    return *cur = NULL;
}

static void assert_rows_ok(const char *out, int ncols_per_side)
{
    int rows = 0;
    for (const char *cur = out, *l; (l = next_row(&cur));) {
        char tok[32][32];
        int nt = 0;
        const char *q = l;
        while (*q && *q != '\n' && nt < 32) {
            while (*q == ' ')
                q++;
            int k = 0;
            while (*q && *q != ' ' && *q != '\n' && k < 31)
                tok[nt][k++] = *q++;
            tok[nt][k] = '\0';
            if (k) nt++;
        }
        cr_assert_geq(nt, 5 + 2 * ncols_per_side, "short row: %.120s", l);
        cr_assert_str_eq(tok[5 + 3], "0", "out-of-place #wrong: %.200s", l);
        cr_assert_str_eq(tok[5 + ncols_per_side + 3], "0", "in-place #wrong: %.200s", l);
        rows++;
    }
    cr_assert_gt(rows, 0, "no rows:\n%s", out);
}

static void assert_footer(const char *out, const char *prog, int errors_expected)
{
    cr_assert(strstr(out, "# nccl-tests version 2.19"), "%s", out);
    char want[128];
    snprintf(want, sizeof(want), "# Collective test starting: %s\n", prog);
    cr_assert(strstr(out, want), "%s", out);
    snprintf(want, sizeof(want), "# Collective test concluded: %s\n", prog);
    cr_assert(strstr(out, want), "%s", out);
    cr_assert(strstr(out, "# Avg bus bandwidth    : "), "%s", out);
    if (!errors_expected) cr_assert(strstr(out, "# Out of bounds values : 0 OK\n"), "%s", out);
}

TestSuite(perftools, .timeout = 240, .init = find_bindir);

Test(perftools, root_minus_one_runs_every_root)
{
    int st;
    char *out = run_tool("", 3, "reduce_perf", "-b 64 -e 4K -f 8 -n 2 -w 0 -r -1 -o all", &st);
    cr_assert_eq(st, 0, "%s", out);
    /* 3 sizes x 6 ops (sum prod max min avg mulsum) x 3 roots; every root in the root column. */
    cr_assert_eq(count_rows(out, NULL), 3 * 6 * 3, "%s", out);
    for (int r = 0; r < 3; r++) { /* the root column follows the redop column */
        char col[64];
        snprintf(col, sizeof(col), "     float  %6s  %6d  ", "sum", r);
        cr_assert_eq(count_rows(out, col), 3, "root %d:\n%s", r, out);
        snprintf(col, sizeof(col), "     float  %6s  %6d  ", "avg", r);
        cr_assert_eq(count_rows(out, col), 3, "root %d:\n%s", r, out);
    }
    assert_rows_ok(out, 4);
    assert_footer(out, "reduce_perf", 0);
    free(out);
    out = run_tool("", 2, "broadcast_perf", "-b 4 -e 4 -n 1 -r -1", &st);
    cr_assert_eq(st, 0, "%s", out);
    cr_assert_eq(count_rows(out, NULL), 2, "%s", out);
    free(out);
}

Test(perftools, blocking_modes)
{
    static const char *lines[] = {
        NULL,
        "# Blocking Enabled: wait and barrier after each inner iteration (-m) \n",
        "# Blocking Enabled: wait after each inner iteration (-m), no barrier \n",
        "# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes "
        "barrier \n",
    };
    for (int z = 0; z <= 3; z++) {
        char args[128];
        int st;
        snprintf(args, sizeof(args), "-b 8 -e 64K -f 16 -n 3 -m 3 -z %d", z);
        char *out = run_tool("", 3, "all_reduce_perf", args, &st);
        cr_assert_eq(st, 0, "-z %d: %s", z, out);
        if (lines[z])
            cr_assert(strstr(out, lines[z]), "-z %d: %s", z, out);
        else
            cr_assert_null(strstr(out, "# Blocking Enabled"), "%s", out);
        assert_rows_ok(out, 4);
        assert_footer(out, "all_reduce_perf", 0);
        free(out);
    }
    int st;
    char *out = run_tool("", 1, "all_reduce_perf", "-z 4", &st);
    cr_assert_eq(st, 2, "%s", out);
    cr_assert(strstr(out, "invalid value '4' for 'blocking'"), "%s", out);
    free(out);
}

Test(perftools, run_cycles)
{
    int st;
    char *out = run_tool("", 2, "all_gather_perf", "-b 64 -e 1K -f 4 -n 1 -N 3", &st);
    cr_assert_eq(st, 0, "%s", out);
    cr_assert_eq(count_rows(out, NULL), 3 * 3, "%s", out); /* 3 sizes, 3 cycles */
    free(out);
    /* -N 0 runs until stopped: under a 3 s limit it prints far more than one cycle. */
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof(cmd),
             "%s/braid-run -n 2 --timeout 3 %s/all_reduce_perf -b 8 -e 8 -n 1 -N 0 2>&1", bindir,
             bindir);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    char line[512];
    int rows = 0;
    while (fgets(line, sizeof(line), p))
        rows += line[0] == ' ';
    int rc = pclose(p);
    cr_assert(WIFEXITED(rc) && WEXITSTATUS(rc) == 124, "status %d", rc);
    cr_assert_gt(rows, 20, "rows %d", rows);
}

Test(perftools, register_unalign_timestamps_memory_notes)
{
    int st;
    char *out = run_tool("", 3, "all_reduce_perf",
                         "-b 8 -e 256K -f 8 -n 2 -d all -R 2 -u 3 -S 1 -M 1 -x 1 -V 8 -D 0", &st);
    cr_assert_eq(st, 0, "%s", out);
    cr_assert(strstr(out, " unalign: 3\n"), "%s", out);
    cr_assert(strstr(out, "# -R 2: the send and receive buffers come from braid_mem_alloc"), "%s",
              out);
    cr_assert(strstr(out, "# -x: CTA policies are a GPU setting; ignored"), "%s", out);
    cr_assert(strstr(out, "# -V: braid has no device implementation; ignored"), "%s", out);
    cr_assert(strstr(out, "# Host memory usage    : Initialization "), "%s", out);
    cr_assert(strstr(out, "timestamp"), "%s", out);
    assert_rows_ok(out, 4);
    assert_footer(out, "all_reduce_perf", 0);
    /* The timestamp closes every row: "YYYY-MM-DD HH:MM:SS". */
    const char *row = strstr(out, "\n           8 ");
    cr_assert(row, "%s", out);
    const char *eol = strchr(row + 1, '\n');
    cr_assert(eol && eol - row > 20 && eol[-3] == ':' && eol[-6] == ':', "%.200s", row);
    free(out);
    out = run_tool("", 1, "all_reduce_perf", "-D 1", &st);
    cr_assert_eq(st, 2, "%s", out);
    free(out);
}

Test(perftools, per_iteration_timing)
{
    int st;
    char *out = run_tool("", 2, "reduce_scatter_perf", "-b 1K -e 16K -f 4 -n 6 -I 1 -K 2", &st);
    cr_assert_eq(st, 0, "%s", out);
    cr_assert(strstr(out, "i_min    i_max    i_p99    i_cv%"), "%s", out);
    cr_assert(strstr(out, "summary skips first 2 iterations"), "%s", out);
    assert_rows_ok(out, 8);
    free(out);
    out = run_tool("", 1, "all_reduce_perf", "-K 1", &st); /* -K needs -I 1 */
    cr_assert_eq(st, 2, "%s", out);
    free(out);
}

/* ---- a strict JSON syntax check (independent of the writer) ----------------------------- */

static const char *js_value(const char *p);

static const char *js_ws(const char *p)
{
    while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
        p++;
    return p;
}

static const char *js_string(const char *p)
{
    if (*p != '"') return NULL;
    for (p++; *p && *p != '"'; p++) {
        if ((unsigned char)*p < 0x20) return NULL;
        if (*p == '\\') {
            p++;
            if (!strchr("\"\\/bfnrtu", *p)) return NULL;
        }
    }
    return *p == '"' ? p + 1 : NULL;
}

static const char *js_value(const char *p)
{
    p = js_ws(p);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        p = js_ws(p + 1);
        if (*p == close) return p + 1;
        for (;;) {
            if (close == '}') {
                p = js_string(js_ws(p));
                if (!p) return NULL;
                p = js_ws(p);
                if (*p++ != ':') return NULL;
            }
            p = js_value(p);
            if (!p) return NULL;
            p = js_ws(p);
            if (*p == ',') {
                p++;
                continue;
            }
            return *p == close ? p + 1 : NULL;
        }
    }
    if (*p == '"') return js_string(p);
    if (!strncmp(p, "true", 4) || !strncmp(p, "null", 4)) return p + 4;
    if (!strncmp(p, "false", 5)) return p + 5;
    char *end;
    strtod(p, &end);
    return end > p && (*p == '-' || isdigit((unsigned char)*p)) ? end : NULL;
}

Test(perftools, json_output)
{
    char dir[] = "/tmp/braid-json-XXXXXX", path[PATH_MAX], args[PATH_MAX + 128];
    cr_assert(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/out.json", dir);
    snprintf(args, sizeof(args), "-b 8 -e 1K -f 4 -n 2 -c 1 -I 1 -J %s", path);
    int st;
    char *out = run_tool("BRAID_DEBUG=WARN", 2, "all_reduce_perf", args, &st);
    cr_assert_eq(st, 0, "%s", out);
    cr_assert(strstr(out, "# Writing JSON output to "), "%s", out);
    free(out);
    /* A second run never overwrites: it writes out.json.0. */
    out = run_tool("", 2, "all_reduce_perf", args, &st);
    cr_assert_eq(st, 0, "%s", out);
    cr_assert(strstr(out, "out.json.0"), "%s", out);
    free(out);

    FILE *f = fopen(path, "r");
    cr_assert(f);
    char *buf = calloc(1, 1 << 20);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    fclose(f);
    cr_assert_gt(n, 0);
    const char *end = js_value(buf);
    cr_assert(end && *js_ws(end) == '\0', "invalid JSON near %.80s", end ? end : buf);
    static const char *keys[] = {"\"version\":3",
                                 "\"config\":",
                                 "\"devices\":[",
                                 "\"results\":[",
                                 "\"out_of_place\":{",
                                 "\"in_place\":{",
                                 "\"bus_bw\":",
                                 "\"nwrong\":0",
                                 "\"out_of_bounds\":{\"count\":0,\"okay\":true}",
                                 "\"average_bus_bandwidth\":",
                                 "\"in_place_per_iter\":{",
                                 "\"end_time\":"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        cr_assert(strstr(buf, keys[i]), "no %s in %s", keys[i], buf);
    /* 4 rows (8, 32, 128, 512 bytes): one "size" each. */
    int rows = 0;
    for (const char *p = buf; (p = strstr(p, "\"size\":")); p++)
        rows++;
    cr_assert_eq(rows, 4, "%s", buf);
    /* braid-run sets BRAID_SECRET: the env list shows it masked only. */
    const char *sec = strstr(buf, "BRAID_SECRET=");
    cr_assert(sec && !strncmp(sec, "BRAID_SECRET=***\"", 17), "%.60s", sec ? sec : buf);
    cr_assert_null(strstr(sec + 1, "BRAID_SECRET="));
    free(buf);
    char rm[PATH_MAX + 16];
    snprintf(rm, sizeof(rm), "rm -rf %s", dir);
    cr_assert_eq(system(rm), 0);
}

Test(perftools, split_groups)
{
    int st;
    char *out =
        run_tool("NCCL_TESTS_SPLIT='MOD 2'", 4, "all_reduce_perf", "-b 8 -e 4K -f 8 -n 2", &st);
    cr_assert_eq(st, 0, "%s", out);
    cr_assert(strstr(out, "#  Rank  1 Group  1 "), "%s", out);
    cr_assert(strstr(out, "#  Rank  2 Group  0 "), "%s", out);
    assert_rows_ok(out, 4);
    free(out);
    /* Two groups of 2: busbw = algbw * 2(n-1)/n = algbw for the group of 2, not 1.5x. */
    out = run_tool("NCCL_TESTS_SPLIT_MASK=0x2", 4, "reduce_scatter_perf", "-b 4K -e 4K -n 2", &st);
    cr_assert_eq(st, 0, "%s", out);
    cr_assert(strstr(out, "        4096           512 "), "count of a group of 2:\n%s", out);
    free(out);
    out = run_tool("NCCL_TESTS_SPLIT='XOR 1'", 2, "all_reduce_perf", "-b 8 -e 8", &st);
    cr_assert_eq(st, 2, "%s", out);
    cr_assert(strstr(out, "NCCL_TESTS_SPLIT='XOR 1' is not understood"), "%s", out);
    free(out);
    out = run_tool("NCCL_TESTS_SPLIT='DIV 2'", 3, "all_reduce_perf", "-b 8 -e 8", &st);
    cr_assert_eq(st, 2, "%s", out);
    cr_assert(strstr(out, "groups of one size"), "%s", out);
    free(out);
}

Test(perftools, timeout_flag)
{
    int st;
    char *out = run_tool("BRAID_TIMEOUT=300", 1, "all_reduce_perf", "-b 8 -e 8 -T 5", &st);
    cr_assert_eq(st, 0, "%s", out);
    cr_assert(strstr(out, "-T 5: BRAID_TIMEOUT=300 is set and wins"), "%s", out);
    free(out);
    out = run_tool("", 1, "all_reduce_perf", "-b 8 -e 8 -T x", &st);
    cr_assert_eq(st, 2, "%s", out);
    free(out);
}

/* perf_selftest: the harness on a fake backend (geometry, busbw factors, generators, flags),
 * run by the suite as well as by ctest. */
Test(perftools, harness_selftest)
{
    int st;
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof(cmd), "%s/perf_selftest 2>&1", bindir);
    char *out = run_cmd(cmd, &st);
    cr_assert_eq(st, 0, "%s", out);
    cr_assert(strstr(out, "perf_selftest: OK (0 failures)"), "%s", out);
    free(out);
}

/* Every row's bus bandwidth is its algorithm bandwidth times factor (both placements; the
 * columns are printed to 2 decimals). */
static void assert_busbw_factor(const char *out, double factor)
{
    int rows = 0;
    for (const char *cur = out, *l; (l = next_row(&cur));) {
        double v[13];
        char t[3][16];
        int k =
            sscanf(l, "%lf %lf %15s %15s %lf %lf %lf %lf %lf %lf %lf %lf %lf", &v[0], &v[1], t[0],
                   t[1], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9], &v[10], &v[11], &v[12]);
        cr_assert_eq(k, 13, "row: %.200s", l);
        for (int c = 6; c <= 10; c += 4)
            cr_assert(fabs(v[c + 1] - v[c] * factor) <= 0.011,
                      "busbw %.2f for algbw %.2f, factor %.3f: %.200s", v[c + 1], v[c], factor, l);
        rows++;
    }
    cr_assert_gt(rows, 0, "no rows:\n%s", out);
}

/* The point-to-point tools (nccl-tests' alltoall, gather, scatter, sendrecv and hypercube):
 * their data checked (-c 1) at 2..4 ranks, gather and scatter from every root, and their bus
 * bandwidth factors: (n-1)/n, 1 for sendrecv. The hypercube needs a power-of-two number of
 * ranks and says so otherwise. */
Test(perftools, p2p_tools_check_data_and_scale_busbw)
{
    static const char *tools[] = {"alltoall_perf", "gather_perf", "scatter_perf", "sendrecv_perf",
                                  "hypercube_perf"};
    for (size_t i = 0; i < sizeof(tools) / sizeof(tools[0]); i++)
        for (int n = 2; n <= 4; n++) {
            int st, hyper = !strcmp(tools[i], "hypercube_perf");
            char *out = run_tool("", n, tools[i], "-b 8 -e 256K -f 8 -n 2 -w 1 -c 1 -r -1", &st);
            cr_assert_eq(st, 0, "%s n=%d: %s", tools[i], n, out);
            assert_footer(out, tools[i], 0);
            if (hyper && n == 3) {
                cr_assert(strstr(out, "power-of-two number of ranks, not 3"), "%s", out);
                cr_assert_eq(count_rows(out, NULL), 0, "%s", out);
            } else {
                assert_rows_ok(out, 4);
                assert_busbw_factor(out, strstr(tools[i], "sendrecv") ? 1.0 : (n - 1.0) / n);
            }
            free(out);
        }
}

/* A rank other than 0 that finds wrong data must not cut off rank 0's footer: the error count
 * is summed before anybody exits, and the exit status stays 1. */
Test(perftools, footer_survives_wrong_data_on_another_rank, .timeout = 400)
{
    for (int i = 0; i < 12; i++) {
        int st;
        char env[64];
        snprintf(env, sizeof(env), "PERF_TEST_CORRUPT_RANK=%d", 1 + i % 3);
        char *out = run_tool(env, 4, "all_reduce_perf", "-b 8 -e 64K -f 8 -n 1 -w 0", &st);
        cr_assert_eq(st, 1, "run %d: status %d\n%s", i, st, out);
        /* 5 sizes x 2 placements, each found wrong. */
        cr_assert(strstr(out, "# Out of bounds values : 10 FAILED\n"), "run %d:\n%s", i, out);
        assert_footer(out, "all_reduce_perf", 1);
        free(out);
    }
}

/* perf/tcpbw (the loopback TCP ceiling of compare_tcp.sh): one rate per chunk and socket buffer
 * size and the best of them; a connection without the run's token is closed and the run goes
 * on; bad flags fail. */
static double tcpbw_rate(const char *out, const char *what)
{
    const char *p = strstr(out, what);
    double v = -1;
    if (!p || sscanf(p + strlen(what), " GB/s %lf", &v) != 1) v = -1;
    return v;
}

static char *tcpbw_run(const char *args, int *status)
{
    char cmd[PATH_MAX + 256];
    snprintf(cmd, sizeof(cmd), "%s/tcpbw %s 2>&1", bindir, args);
    return run_cmd(cmd, status);
}

Test(perftools, tcpbw_reports_a_rate_per_chunk_and_sockbuf_and_the_best)
{
    int st;
    setenv("TCPBW_TEST_STRANGER", "1", 1);
    char *out = tcpbw_run("-n 3 -s 4M -c '64K 1M' -b '0 64K' -r 2", &st);
    unsetenv("TCPBW_TEST_STRANGER");
    cr_assert_eq(st, 0, "%s", out);
    const char *rows[] = {"chunk 65536 sockbuf 0", "chunk 1048576 sockbuf 0",
                          "chunk 65536 sockbuf 65536", "chunk 1048576 sockbuf 65536"};
    double top = 0;
    for (int i = 0; i < 4; i++) {
        char what[96];
        snprintf(what, sizeof(what), "tcpbw ranks 3 %s", rows[i]);
        double v = tcpbw_rate(out, what);
        cr_assert(v > 0, "%s: %s", what, out);
        if (v > top) top = v;
    }
    cr_assert_float_eq(tcpbw_rate(out, "tcpbw ranks 3 best"), top, 1e-9, "%s", out);
    cr_assert(strstr(out, "rank 1: closed a connection without the run's token"), "%s", out);
    free(out);

    out = tcpbw_run("-n 2 -s 1M -c 64K -H -r 1", &st); /* one cache-hot buffer */
    cr_assert_eq(st, 0, "%s", out);
    cr_assert(tcpbw_rate(out, "tcpbw ranks 2 chunk 65536 sockbuf 0") > 0, "%s", out);
    free(out);

    const char *bad[] = {"-n 1", "-c 12Q", "-b 7X", "-c 0", "-r 0", "stray"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        out = tcpbw_run(bad[i], &st);
        cr_assert_eq(st, 2, "%s: %s", bad[i], out);
        cr_assert(strstr(out, "usage: tcpbw"), "%s: %s", bad[i], out);
        free(out);
    }
}

/* A local process that connects to a rank's port and sends nothing is dropped after 1 s: it
 * used to hold the token read for the 30 s socket timeout (a few pushed the run past 120 s). */
Test(perftools, tcpbw_drops_a_silent_connection_within_seconds)
{
    int st;
    struct timespec t0, t1;
    setenv("TCPBW_TEST_STRANGER", "silent", 1);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char *out = tcpbw_run("-n 2 -s 1M -c 64K -r 1", &st);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    unsetenv("TCPBW_TEST_STRANGER");
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    cr_assert_eq(st, 0, "%s", out);
    cr_assert(strstr(out, "rank 1: closed a connection that sent no token within 1 s"), "%s", out);
    cr_assert_lt(secs, 15.0, "%.1f s:\n%s", secs, out);
    free(out);
}

/* perf/median.sh's median_csv (compare.sh, compare_tcp.sh, compare_group.sh with -R K): for an
 * even count, the mean of the two middle out-of-place times (not the faster run), bandwidths
 * scaled to it; an odd count keeps the middle row whole. */
Test(perftools, median_csv_means_the_two_middle_rows)
{
    char dir[] = "/tmp/braid_median_XXXXXX";
    cr_assert(mkdtemp(dir));
    static const char hdr[] = "collective,nranks,size,count,type,redop,root,time_oop_us,algbw_oop,"
                              "busbw_oop,wrong_oop,time_ip_us,algbw_ip,busbw_ip,wrong_ip\n";
    static const char *rows[] = {
        "all_reduce,2,8,2,float,sum,0,10.000,0.000800,0.000800,0,20.000,0.000400,0.000400,0\n",
        "all_reduce,2,8,2,float,sum,0,30.000,0.000267,0.000267,0,40.000,0.000200,0.000200,1\n",
        "all_reduce,2,8,2,float,sum,0,90.000,0.000089,0.000089,0,90.000,0.000089,0.000089,0\n"};
    for (int i = 0; i < 3; i++) {
        char path[64];
        snprintf(path, sizeof(path), "%s/r%d.csv", dir, i);
        FILE *f = fopen(path, "w");
        cr_assert(f);
        fputs(hdr, f);
        fputs(rows[i], f);
        fclose(f);
    }
    char cmd[PATH_MAX + 512];
    int st;
    snprintf(cmd, sizeof(cmd),
             "cd %s && . %s/perf/median.sh && median_csv even.csv r0.csv r1.csv && "
             "median_csv odd.csv r2.csv r0.csv r1.csv && tail -n 1 even.csv && tail -n 1 odd.csv",
             dir, BRAID_SOURCE_DIR);
    char *out = run_cmd(cmd, &st);
    cr_assert_eq(st, 0, "%s", out);
    cr_assert(strstr(out, "all_reduce,2,8,2,float,sum,0,20.000,0.000400,0.000400,0,30.000,0.000267,"
                          "0.000267,1\n"),
              "%s", out);
    cr_assert(strstr(out, rows[1]), "odd count: the middle row, whole: %s", out);
    free(out);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    out = run_cmd(cmd, &st);
    free(out);
}
