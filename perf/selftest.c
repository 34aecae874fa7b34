/* perf_selftest: tests of the perf harness that need no working library.
 *
 * A fake backend (selftest_fake.c) runs N ranks as threads of one process and implements every
 * collective with braid's documented semantics (integers wrap; float16/bfloat16 combine in float32
 * and round to nearest even after each pair; avg scales float16/bfloat16/float8 by 1/n first and
 * divides the other dtypes' sum at the end, integers truncating), so the whole loop of bench.c
 * (geometry, in-place offsets, shifts, checks, -a, output) runs here.
 *
 *   perf_selftest                    unit tests + every collective, dtype and op on 1..4 ranks
 *   perf_selftest run N COLL [flags] one fake run with the tools' flags, output shown
 *                                    (COLL: all_reduce broadcast reduce reduce_scatter all_gather;
 *                                    FAKE_BUG=1 corrupts one element to see the check fail) */
#include "selftest.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;
#define EXPECT(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);                    \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* ---- unit tests ---------------------------------------------------------------------------- */

static void test_conversions(void)
{
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = perf_half_to_float((uint16_t)h);
        if (f != f) continue; /* NaN */
        if (perf_float_to_half(f) != h) {
            fprintf(stderr, "half 0x%04x -> %g does not round-trip\n", h, f);
            failures++;
            break;
        }
        float g = perf_bf16_to_float((uint16_t)h);
        if (g == g && perf_float_to_bf16(g) != h) {
            fprintf(stderr, "bf16 0x%04x -> %g does not round-trip\n", h, g);
            failures++;
            break;
        }
    }
    EXPECT(perf_float_to_half(2049.0f) == perf_float_to_half(2048.0f)); /* tie to even */
    EXPECT(perf_half_to_float(perf_float_to_half(2051.0f)) == 2052.0f);
    EXPECT(perf_half_to_float(perf_float_to_half(65519.0f)) == 65504.0f);
    EXPECT(perf_float_to_half(65520.0f) == 0x7c00);
    EXPECT(perf_float_to_half(-1e-9f) == 0x8000);
    EXPECT(perf_float_to_half(5.9604645e-8f) == 0x0001);
    EXPECT(perf_float_to_half(1.0f) == 0x3c00);
    EXPECT(perf_float_to_bf16(1.0f) == 0x3f80);
    EXPECT(perf_bf16_to_float(perf_float_to_bf16(257.0f)) == 256.0f); /* tie to even */
    EXPECT(perf_bf16_to_float(perf_float_to_bf16(259.0f)) == 260.0f);
    for (uint32_t b = 0; b < 0x100; b++) { /* float8: every finite code round-trips */
        float f = perf_e4m3_to_float((uint8_t)b), g = perf_e5m2_to_float((uint8_t)b);
        if (f == f && perf_float_to_e4m3(f) != b) {
            fprintf(stderr, "e4m3 0x%02x -> %g does not round-trip\n", b, f);
            failures++;
        }
        if (g == g && !isinf(g) && perf_float_to_e5m2(g) != b) {
            fprintf(stderr, "e5m2 0x%02x -> %g does not round-trip\n", b, g);
            failures++;
        }
    }
    EXPECT(perf_e4m3_to_float(0x7e) == 448.0f && perf_float_to_e4m3(1e6f) == 0x7e);
    EXPECT(perf_float_to_e4m3(17.0f) == perf_float_to_e4m3(16.0f)); /* tie to even */
    EXPECT(perf_e5m2_to_float(0x7b) == 57344.0f && perf_float_to_e5m2(INFINITY) == 0x7b);
    EXPECT(perf_e5m2_to_float(0x01) == 0x1p-16f && perf_e4m3_to_float(0x01) == 0x1p-9f);
}

/* perf_parse_args on a NULL-terminated argv with stderr captured into msg; its result. */
static int parse_capture(char **argv, const perf_coll_t *coll, char *msg, size_t len)
{
    int argc = 0;
    while (argv[argc])
        argc++;
    perf_opts_t o;
    FILE *t = tmpfile();
    if (!t) return -2;
    fflush(stderr);
    int saved = dup(2);
    dup2(fileno(t), 2);
    int rc = perf_parse_args(argc, argv, coll, &o);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(t);
    size_t k = fread(msg, 1, len - 1, t);
    msg[k] = '\0';
    fclose(t);
    return rc;
}

static void test_parsing(void)
{
    size_t z = 0;
    EXPECT(perf_parse_size("8", &z) == 0 && z == 8);
    EXPECT(perf_parse_size("1K", &z) == 0 && z == 1024);
    EXPECT(perf_parse_size("256M", &z) == 0 && z == 256u << 20);
    EXPECT(perf_parse_size("1g", &z) == 0 && z == 1u << 30);
    EXPECT(perf_parse_size("4MB", &z) == 0 && z == 4u << 20);
    EXPECT(perf_parse_size("0", &z) == 0 && z == 0);
    EXPECT(perf_parse_size("3", &z) == 0 && z == 3);
    if (SIZE_MAX > 0xffffffffu) EXPECT(perf_parse_size("262144G", &z) == 0 && z == PERF_MAX_BYTES);
    /* whole bytes only, as nccl-tests; nothing past PERF_MAX_BYTES (a cast of 2^64 - 2048 to
     * size_t wrapped the buffers' rounding to 4 KiB, and the sweep wrote past them) */
    static const char *badsz[] = {"x",
                                  "3Q",
                                  "1.5k",
                                  "0.5K",
                                  "2.5",
                                  "inf",
                                  "nan",
                                  "1e3",
                                  "-1",
                                  "+1",
                                  " 8",
                                  "0x10",
                                  "8K ",
                                  "262145G",
                                  "18446744073709549568",
                                  "18446744073709551616"};
    for (size_t i = 0; i < sizeof(badsz) / sizeof(badsz[0]); i++)
        if (perf_parse_size(badsz[i], &z) == 0) {
            fprintf(stderr, "size '%s' accepted as %zu\n", badsz[i], z);
            failures++;
        }
    EXPECT(perf_dtype_parse("half") == BRAID_FLOAT16);
    EXPECT(perf_dtype_parse("float16") == BRAID_FLOAT16);
    EXPECT(perf_dtype_parse("float") == BRAID_FLOAT32);
    EXPECT(perf_dtype_parse("float64") == BRAID_FLOAT64);
    EXPECT(perf_dtype_parse("all") == PERF_ALL);
    EXPECT(perf_dtype_parse("quad") == -2);
    EXPECT(perf_op_parse("avg") == BRAID_AVG);
    EXPECT(perf_op_parse("mulsum") == PERF_OP_MULSUM &&
           perf_op_parse("premulsum") == PERF_OP_MULSUM);
    EXPECT(strcmp(perf_op_name(PERF_OP_MULSUM), "mulsum") == 0);

    char *argv[] = {"x",  "-b",  "8",  "-e", "128M", "-f", "2",     "-d",      "all",
                    "-o", "max", "-a", "3",  "-n",   "7",  "--csv", "out.csv", NULL};
    perf_opts_t o;
    EXPECT(perf_parse_args(17, argv, &perf_coll_allreduce, &o) == 0);
    EXPECT(o.min_bytes == 8 && o.max_bytes == 128u << 20 && o.step_factor == 2);
    EXPECT(o.dtype == PERF_ALL && o.op == BRAID_MAX && o.average == 3 && o.iters == 7);
    EXPECT(o.warmup_iters == 1 && o.check == 1 && strcmp(o.csv_path, "out.csv") == 0);
    EXPECT(o.blocking == 0 && o.run_cycles == 1 && o.root == 0 && o.unalign == 0);

    /* The flags of nccl-tests 2.19 scripts pass. */
    char *argv2[] = {"x", "-r", "-1", "-z", "3",      "-N", "0",  "-R", "1",  "-u",
                     "3", "-S", "1",  "-J", "o.json", "-M", "1",  "-I", "1",  "-K",
                     "2", "-x", "1",  "-D", "0",      "-V", "16", "-T", "30", NULL};
    EXPECT(perf_parse_args(29, argv2, &perf_coll_broadcast, &o) == 0);
    EXPECT(o.root == PERF_ALL && o.blocking == 3 && o.run_cycles == 0 && o.local_register == 1);
    EXPECT(o.unalign == 3 && o.report_timestamps == 1 && strcmp(o.json_path, "o.json") == 0);
    EXPECT(o.memory_report == 1 && o.per_iter_timing == 1 && o.per_iter_skip == 2);
    EXPECT(o.timeout == 30.0 && o.nnotes == 2); /* -x and -V: accepted with a note */
    char *tsec[] = {"x", "-T", "1.5", NULL};
    EXPECT(perf_parse_args(3, tsec, &perf_coll_reduce, &o) == 0 && o.timeout == 1.5);
    /* Refused, each with a message that names the option. */
    static const struct {
        char *flag, *value;
        const char *name;
    } bad[] = {
        {"-z", "4", "blocking"},
        {"-r", "-2", "root"},
        {"-D", "1", "-D"},
        {"-R", "3", "local_register"},
        {"-K", "1", "-K"},
        {"-I", "2", "per_iter_timing"},
        {"-N", "-1", "run_cycles"},
        {"-T", "1K", "timeout"},
        {"-T", "inf", "timeout"},
        {"-u", "x", "unalign"},
        {"-e", "18446744073709549568", "maxbytes"},
        {"-e", "1e30", "maxbytes"},
        {"-b", "0.5K", "minbytes"},
        {"-b", "inf", "minbytes"},
        {"-i", "1.5", "stepbytes"},
        {"-n", "1073741824", "iters"},
        {"-m", "1073741824", "agg_iters"},
        {"-w", "2147483648", "warmup_iters"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *args[] = {"x", bad[i].flag, bad[i].value, NULL}, msg[512];
        int prc = parse_capture(args, &perf_coll_reduce, msg, sizeof(msg));
        if (prc != -1 || !strstr(msg, bad[i].name)) {
            fprintf(stderr, "%s %s: result %d, message '%s'\n", bad[i].flag, bad[i].value, prc,
                    msg);
            failures++;
        }
    }
    /* --device 2 only where braid has a stream-ordered call (it ran all-gather for the rest) */
    for (size_t c = 0; c < FAKE_NCOLLS; c++) {
        char *args[] = {"x", "--device", "2", NULL}, msg[512];
        int prc = parse_capture(args, fake_colls[c], msg, sizeof(msg));
        int want = perf_coll_has_stream(fake_colls[c]->kind) ? 0 : -1;
        if (prc != want || (want && !strstr(msg, "--device 2"))) {
            fprintf(stderr, "%s --device 2: result %d, message '%s'\n", fake_colls[c]->name, prc,
                    msg);
            failures++;
        }
    }
    EXPECT(perf_coll_has_stream(PERF_ALLGATHER) && !perf_coll_has_stream(PERF_ALLTOALL));

    /* nccl-tests' getFloatStr: 2 decimals while they fit, then 1, 0, an exponent. */
    char t[32];
    perf_format_float(t, 7, 12.345);
    EXPECT(strcmp(t, "  12.35") == 0);
    perf_format_float(t, 7, 1234.56);
    EXPECT(strcmp(t, "1234.56") == 0);
    perf_format_float(t, 7, 12345.67);
    EXPECT(strcmp(t, "12345.7") == 0);
    perf_format_float(t, 7, 123456.7);
    EXPECT(strcmp(t, " 123457") == 0);
    perf_format_float(t, 7, 123456789.0);
    EXPECT(strcmp(t, "1.2e+08") == 0);
    perf_format_float(t, 6, 999.994);
    EXPECT(strcmp(t, "999.99") == 0);

    /* -I statistics: nearest-rank p99, population standard deviation. */
    double times[] = {5, 1, 4, 2, 3};
    perf_iter_stats_t st;
    perf_iter_stats(times, 5, &st);
    EXPECT(st.min == 1 && st.max == 5 && st.p50 == 3 && st.p99 == 5 && st.avg == 3);
    EXPECT(fabs(st.stdev - sqrt(2.0)) < 1e-12);
}

static void test_geometry(void)
{
    perf_geom_t g;
    perf_geom(PERF_ALLREDUCE, 1024, 4, 3, &g);
    EXPECT(g.count == 256 && g.size == 1024 && g.recv_ip_off == 0);
    perf_geom(PERF_REDUCE_SCATTER, 1024, 4, 3, &g); /* 256 elements: 85 per rank */
    EXPECT(g.count == 85 && g.send_bytes == 1020 && g.recv_bytes == 340 && g.size == 1020);
    EXPECT(g.recv_ip_off == 340 && g.send_ip_off == 0);
    perf_geom(PERF_ALLGATHER, 1024, 4, 3, &g);
    EXPECT(g.count == 85 && g.send_bytes == 340 && g.recv_bytes == 1020 && g.send_ip_off == 340);
    perf_geom(PERF_ALLGATHER, 8, 4, 4, &g);
    EXPECT(g.count == 0);
    double a, b;
    perf_bw(PERF_ALLREDUCE, 1000000000, 1.0, 4, &a, &b);
    EXPECT(a == 1.0 && b == 1.5);
    perf_bw(PERF_ALLGATHER, 1000000000, 0.5, 4, &a, &b);
    EXPECT(a == 2.0 && b == 1.5);
    perf_bw(PERF_BROADCAST, 1000000000, 1.0, 4, &a, &b);
    EXPECT(a == 1.0 && b == 1.0);
    /* nccl-tests' factors: (n-1)/n for the all-to-all, gather, scatter, hypercube and
     * reduce-scatter, 1 for sendrecv */
    static const perf_coll_kind_t nm1[] = {PERF_ALLTOALL, PERF_GATHER, PERF_SCATTER, PERF_HYPERCUBE,
                                           PERF_REDUCE_SCATTER};
    for (size_t i = 0; i < sizeof(nm1) / sizeof(nm1[0]); i++) {
        perf_bw(nm1[i], 1000000000, 0.5, 4, &a, &b);
        EXPECT(a == 2.0 && b == 1.5);
    }
    perf_bw(PERF_SENDRECV, 1000000000, 0.5, 4, &a, &b);
    EXPECT(a == 2.0 && b == 2.0);
    /* their geometry: all-to-all blocks of a multiple of 16 bytes, hypercube of 4 elements,
     * scatter's in-place receive in the root's block, sendrecv the whole size */
    perf_geom(PERF_ALLTOALL, 1000, 4, 3, &g); /* 250 elements: 83 per rank -> 80 */
    EXPECT(g.count == 80 && g.send_bytes == 960 && g.recv_bytes == 960);
    perf_geom(PERF_HYPERCUBE, 1000, 4, 3, &g); /* 250 / 12 = 20 -> 80 per rank */
    EXPECT(g.count == 80 && g.send_bytes == 320 && g.recv_bytes == 960);
    perf_geom(PERF_SCATTER, 1024, 4, 4, &g);
    EXPECT(g.count == 64 && g.send_bytes == 1024 && g.recv_bytes == 256 && g.recv_ip_off == 256);
    perf_geom(PERF_GATHER, 1024, 4, 4, &g);
    EXPECT(g.count == 64 && g.send_bytes == 256 && g.recv_bytes == 1024 && g.send_ip_off == 256);
    perf_geom(PERF_SENDRECV, 1000, 8, 3, &g);
    EXPECT(g.count == 125 && g.send_bytes == 1000 && g.recv_bytes == 1000);
}

/* Generated data reduced with braid's semantics must match the expected values exactly. */
static void test_generators(void)
{
    /* 9 and 17: float8 avg where n is not exact in f8e5m2 / f8e4m3; 257 (16-bit floats only):
     * bfloat16 avg where n is not exact */
    static const int ns[] = {1, 2, 3, 4, 8, 9, 16, 17, 257};
    enum { COUNT = 2000 };
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++) {
        size_t ts = perf_dtype_size(dt);
        char *in[257], *got = malloc(COUNT * ts), *exp = malloc(COUNT * ts);
        for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
            int n = ns[k];
            if (n > 17 && dt != BRAID_BFLOAT16 && dt != BRAID_FLOAT16) continue;
            for (int op = 0; op < PERF_NUM_OPS; op++) {
                perf_gen_t g;
                perf_gen_init(&g, dt, op, n, 7 + (uint64_t)op);
                for (int r = 0; r < n; r++) {
                    in[r] = malloc(COUNT * ts);
                    perf_fill(&g, in[r], COUNT, 1000, r);
                }
                for (size_t i = 0; i < COUNT; i++)
                    ref_reduce(dt, op, n, (const void *const *)in, i, got, i);
                perf_fill_expected(&g, exp, COUNT, 1000);
                size_t wrong = perf_check(&g, got, exp, COUNT);
                if (wrong) {
                    fprintf(stderr, "generator %s %s n=%d: %zu wrong\n", perf_dtype_name(dt),
                            perf_op_name(op), n, wrong);
                    failures++;
                }
                got[5 * ts] ^= 0x20; /* one corrupted element is caught */
                if (perf_check(&g, got, exp, COUNT) != 1) {
                    fprintf(stderr, "generator %s %s n=%d: a corrupted element is not caught\n",
                            perf_dtype_name(dt), perf_op_name(op), n);
                    failures++;
                }
                size_t distinct = 0; /* inputs are not constant */
                for (size_t i = 1; i < COUNT; i++)
                    distinct += memcmp(in[0] + i * ts, in[0], ts) != 0;
                EXPECT(distinct > COUNT / 3);
                for (int r = 0; r < n; r++)
                    free(in[r]);
            }
        }
        free(got);
        free(exp);
    }
}

/* Parses a NULL-terminated flag list (after the program name) into *o. */
static int opts_of(perf_opts_t *o, const perf_coll_t *coll, char **flags)
{
    char *argv[32] = {"x"};
    int argc = 1;
    while (flags[argc - 1] && argc < 31) {
        argv[argc] = flags[argc - 1];
        argc++;
    }
    return perf_parse_args(argc, argv, coll, o);
}

/* The cases of the review of s34 (each failed before its fix). */
static void test_bench_cases(void)
{
    perf_opts_t o;
    /* --device 1: in place, reduce_scatter's input and the scatter root's n blocks are in
     * recv, and the result in block 'rank': the whole size goes to and from the device */
    char *dev[] = {"-b", "8",  "-e", "8K", "-f",  "8",        "-n", "1", "-w",
                   "0",  "-r", "-1", "-o", "all", "--device", "1",  NULL};
    EXPECT(opts_of(&o, &perf_coll_allreduce, dev) == 0);
    for (size_t c = 0; c < FAKE_NCOLLS; c++)
        for (int n = 2; n <= 4; n++)
            if (fake_run(n, 0, fake_colls[c], &o) != 0) {
                fprintf(stderr, "fake %s --device 1 on %d ranks: wrong\n", fake_colls[c]->name, n);
                failures++;
            }
    /* float8 avg on 9 (f8e5m2) and 17 (f8e4m3) ranks: n * v is not exact in the dtype */
    char *f8[] = {"-b", "64", "-e", "64", "-n", "1", "-w", "0", "-d", "f8e5m2", "-o", "avg", NULL};
    EXPECT(opts_of(&o, &perf_coll_allreduce, f8) == 0 &&
           fake_run(9, 0, &perf_coll_allreduce, &o) == 0);
    f8[9] = "f8e4m3";
    EXPECT(opts_of(&o, &perf_coll_allreduce, f8) == 0 &&
           fake_run(17, 0, &perf_coll_allreduce, &o) == 0);
    /* -c 3 checks three different inputs: calls 2..4 of rank 0 (after the untimed and the
     * timed call) are the out-of-place checks */
    char *chk[] = {"-b", "64", "-e", "64", "-n", "1", "-w", "0", "-c", "3", NULL};
    fake_world_t w;
    EXPECT(opts_of(&o, &perf_coll_allreduce, chk) == 0);
    EXPECT(fake_run_in(&w, 2, 0, &perf_coll_allreduce, &o) == 0 && w.nsums == 10);
    EXPECT(w.sums[2] != w.sums[3] && w.sums[3] != w.sums[4] && w.sums[2] != w.sums[4]);
    /* nothing measured (sizes below one float): exit 2, not "0 OK"; int8 rows run */
    char *none[] = {"-b", "2", "-e", "2", "-n", "1", "-w", "0", NULL};
    EXPECT(opts_of(&o, &perf_coll_allreduce, none) == 0);
    int saved_err = dup(2);
    if (!freopen("/dev/null", "w", stderr)) return;
    int rc_none = fake_run(2, 0, &perf_coll_allreduce, &o);
    o.dtype = BRAID_INT8;
    int rc_int8 = fake_run(2, 0, &perf_coll_allreduce, &o);
    /* sizes that bypass perf_parse_args: the buffers' lengths must not wrap */
    o.dtype = BRAID_FLOAT32;
    o.check = 0;
    o.max_bytes = SIZE_MAX - 2047;
    int rc_huge = fake_run(2, 0, &perf_coll_allreduce, &o);
    o.unalign = 1;
    o.max_bytes = SIZE_MAX - 4;
    int rc_pad = fake_run(2, 0, &perf_coll_allreduce, &o);
    fflush(stderr);
    dup2(saved_err, 2);
    close(saved_err);
    EXPECT(rc_none == 2 && rc_int8 == 0 && rc_huge == 2 && rc_pad == 2);
}

static void test_bench(void)
{
    perf_opts_t o;
    char *argv[] = {"x", "-b", "8", "-e", "8K",  "-f", "8",   "-n",
                    "2", "-w", "1", "-d", "all", "-o", "all", NULL};
    EXPECT(perf_parse_args(15, argv, &perf_coll_allreduce, &o) == 0);
    fflush(stdout);
    int saved = dup(1);
    if (!freopen("/dev/null", "w", stdout)) return;
    for (size_t c = 0; c < FAKE_NCOLLS; c++) {
        for (int n = 1; n <= 4; n++) {
            o.root = n - 1;
            int rc = fake_run(n, 0, fake_colls[c], &o);
            if (rc != 0) {
                fprintf(stderr, "fake %s on %d ranks: exit %d\n", fake_colls[c]->name, n, rc);
                failures++;
            }
            if (n > 1 && fake_run(n, 1, fake_colls[c], &o) != 1) {
                fprintf(stderr, "fake %s on %d ranks: corruption not detected\n",
                        fake_colls[c]->name, n);
                failures++;
            }
        }
        o.average = (int)c % 4; /* every -a mode on some collective */
    }
    test_bench_cases();
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
}

int main(int argc, char **argv)
{
    setlinebuf(stdout);
    if (argc >= 4 && strcmp(argv[1], "run") == 0) {
        int n = atoi(argv[2]);
        const perf_coll_t *coll = coll_by_name(argv[3]);
        if (n < 1 || n > FAKE_MAX_RANKS || !coll) {
            fprintf(stderr, "usage: %s run NRANKS COLL [flags]\n", argv[0]);
            return 2;
        }
        perf_opts_t o;
        int prc = perf_parse_args(argc - 3, argv + 3, coll, &o);
        if (prc) return prc > 0 ? 0 : 2;
        const char *bug = getenv("FAKE_BUG");
        return fake_run(n, bug && atoi(bug), coll, &o);
    }
    test_conversions();
    test_parsing();
    test_geometry();
    test_generators();
    test_bench();
    printf("perf_selftest: %s (%d failures)\n", failures ? "FAILED" : "OK", failures);
    return failures ? 1 : 0;
}
