/* Command line and output of the perf tools, in nccl-tests' format (src/common.cu): the same
 * flags, the same header, column widths, time formatting and footer, so scripts written for
 * nccl-tests output parse ours. Also the --csv file (one row per size/type/op). */
#include "common.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <time.h>

/* ---- collectives --------------------------------------------------------------------------- */

const perf_coll_t perf_coll_allreduce = {"all_reduce", PERF_ALLREDUCE, 1, 0};
const perf_coll_t perf_coll_broadcast = {"broadcast", PERF_BROADCAST, 0, 1};
const perf_coll_t perf_coll_reduce = {"reduce", PERF_REDUCE, 1, 1};
const perf_coll_t perf_coll_reduce_scatter = {"reduce_scatter", PERF_REDUCE_SCATTER, 1, 0};
const perf_coll_t perf_coll_allgather = {"all_gather", PERF_ALLGATHER, 0, 0};
const perf_coll_t perf_coll_alltoall = {"alltoall", PERF_ALLTOALL, 0, 0};
const perf_coll_t perf_coll_gather = {"gather", PERF_GATHER, 0, 1};
const perf_coll_t perf_coll_scatter = {"scatter", PERF_SCATTER, 0, 1};
const perf_coll_t perf_coll_sendrecv = {"sendrecv", PERF_SENDRECV, 0, 0};
const perf_coll_t perf_coll_hypercube = {"hypercube", PERF_HYPERCUBE, 0, 0};

void perf_geom(perf_coll_kind_t kind, size_t bytes, size_t typesize, int nranks,
               perf_geom_t *geom_p)
{
    size_t count = bytes / typesize, n = (size_t)nranks, base = count / n;
    perf_geom_t g = {0};
    switch (kind) {
    case PERF_REDUCE_SCATTER: /* sendbuf holds nranks blocks; in place: block 'rank' */
        g.count = base;
        g.send_bytes = base * n * typesize;
        g.recv_bytes = base * typesize;
        g.recv_ip_off = base * typesize;
        break;
    case PERF_ALLGATHER: /* recvbuf holds nranks blocks; in place: send from block 'rank' */
    case PERF_GATHER:    /* the same at the root */
        g.count = base;
        g.send_bytes = base * typesize;
        g.recv_bytes = base * n * typesize;
        g.send_ip_off = base * typesize;
        break;
    case PERF_HYPERCUBE: /* as all_gather, blocks of a multiple of 4 elements (nccl-tests) */
        base = count / (4 * n) * 4;
        g.count = base;
        g.send_bytes = base * typesize;
        g.recv_bytes = base * n * typesize;
        g.send_ip_off = base * typesize;
        break;
    case PERF_SCATTER: /* the root's sendbuf holds nranks blocks; in place: receive in block */
        g.count = base;
        g.send_bytes = base * n * typesize;
        g.recv_bytes = base * typesize;
        g.recv_ip_off = base * typesize;
        break;
    case PERF_ALLTOALL: /* nranks blocks each way, a multiple of 16 bytes per block */
        base = typesize < 16 ? base / (16 / typesize) * (16 / typesize) : base;
        g.count = base;
        g.send_bytes = g.recv_bytes = base * n * typesize;
        break;
    default: /* all_reduce, broadcast, reduce, sendrecv */
        g.count = count;
        g.send_bytes = g.recv_bytes = count * typesize;
        break;
    }
    g.size = g.send_bytes > g.recv_bytes ? g.send_bytes : g.recv_bytes;
    *geom_p = g;
}

int perf_coll_has_stream(perf_coll_kind_t kind)
{
    return kind == PERF_ALLREDUCE || kind == PERF_BROADCAST || kind == PERF_REDUCE ||
           kind == PERF_REDUCE_SCATTER || kind == PERF_ALLGATHER;
}

void perf_bw(perf_coll_kind_t kind, size_t size, double sec, int nranks, double *algbw_p,
             double *busbw_p)
{
    double n = nranks, factor = 1.0;
    double algbw = sec > 0 ? (double)size / 1.0e9 / sec : 0.0;
    switch (kind) {
    case PERF_ALLREDUCE:
        factor = 2.0 * (n - 1) / n;
        break;
    case PERF_REDUCE_SCATTER:
    case PERF_ALLGATHER:
    case PERF_ALLTOALL:
    case PERF_GATHER:
    case PERF_SCATTER:
    case PERF_HYPERCUBE:
        factor = (n - 1) / n;
        break;
    default: /* broadcast, reduce, sendrecv */
        factor = 1.0;
        break;
    }
    *algbw_p = algbw;
    *busbw_p = algbw * factor;
}

/* ---- command line -------------------------------------------------------------------------- */

int perf_parse_size(const char *s, size_t *bytes_p)
{
    /* As nccl-tests' parsesize: decimal digits, then K, M or G (and an optional B). No sign,
     * fraction, exponent, inf or nan: a size is a whole number of bytes. */
    if (!isdigit((unsigned char)*s)) return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno) return -1; /* ERANGE */
    int shift = 0;
    switch (*end) {
    case 'G':
    case 'g':
        shift = 30;
        break;
    case 'M':
    case 'm':
        shift = 20;
        break;
    case 'K':
    case 'k':
        shift = 10;
        break;
    default:
        break;
    }
    if (shift) {
        end++;
        if (*end == 'B' || *end == 'b') end++;
    }
    if (*end != '\0' || v > (unsigned long long)(PERF_MAX_BYTES >> shift)) return -1;
    *bytes_p = (size_t)v << shift;
    return 0;
}

/* An integer in [min, max]; the message names the option and the range. */
static int parse_int(const char *s, const char *what, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 0);
    if (end == s || *end != '\0' || errno || v < min || v > max) {
        fprintf(stderr, "invalid value '%s' for '%s' (%ld..%ld)\n", s, what, min, max);
        return -1;
    }
    *out = v;
    return 0;
}

/* A non-negative finite number of seconds (-T). */
static int parse_seconds(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || !isfinite(v) || v < 0 || v > 1e9) return -1;
    *out = v;
    return 0;
}

static void usage(const char *prog, const perf_coll_t *coll)
{
    printf("USAGE: %s \n\t"
           "[-t,--nthreads <num threads>] (1 only)\n\t"
           "[-g,--ngpus <gpus per thread>] (1 only: one rank per process)\n\t"
           "[-b,--minbytes <min size in bytes>] \n\t"
           "[-e,--maxbytes <max size in bytes>] \n\t"
           "[-i,--stepbytes <increment size>] \n\t"
           "[-f,--stepfactor <increment factor>] \n\t"
           "[-n,--iters <iteration count>] \n\t"
           "[-m,--agg_iters <aggregated iteration count>] \n\t"
           "[-w,--warmup_iters <warmup iteration count>] \n\t"
           "[-N,--run_cycles <cycle count> run & print each cycle (default: 1; 0=infinite)] \n\t"
           "[-p,--parallel_init <0/1>] (ignored: one rank per process)\n\t"
           "[-c,--check <check iteration count>] \n\t"
           "[-o,--op <sum/prod/min/max/avg/all>] %s\n\t"
           "[-d,--datatype <int8/uint8/int32/uint32/int64/uint64/half/bfloat16/float/double/all>] "
           "\n\t"
           "[-r,--root <root>] (-1: every root in turn)%s\n\t"
           "[-z,--blocking <0/1/2/3> 1=barrier after each inner iter (-m), 2=no barrier, 3=wait "
           "and barrier after each outer iter (-n)] \n\t"
           "[-y,--stream_null <0/1>] (ignored: host buffers)\n\t"
           "[-T,--timeout <time in seconds>] (sets BRAID_TIMEOUT unless it is set)\n\t"
           "[-G,--cudagraph <num graph launches>] (0 only)\n\t"
           "[-C,--report_cputime <0/1>] \n\t"
           "[-S,--report_timestamps <0/1> report timestamps (default 0)] \n\t"
           "[-J,--output_file <file> write output to filepath, if accessible (json)] \n\t"
           "[-a,--average <0/1/2/3> report average iteration time <0=RANK0/1=AVG/2=MIN/3=MAX>] "
           "\n\t"
           "[-R,--local_register <0/1/2> register send/recv buffers with braid_comm_register "
           "(2: and take them from braid_mem_alloc, which every local rank maps)] \n\t"
           "[-x,--cta_policy <0/1/2>] (ignored: no CTAs on the host)\n\t"
           "[-D,--device_implementation <0>] (0 only)\n\t"
           "[-V,--device_cta_count <number>] (ignored: no device implementation)\n\t"
           "[-M,--memory <0/1> report the memory the test buffers take] \n\t"
           "[-u,--unalign <index of first element> misalign source and destination buffers] "
           "\n\t"
           "[-I,--per_iter_timing <0/1> per-iteration timing (i_min, i_max, i_p99, i_cv%%)] \n\t"
           "[-K,--per_iter_skip <count> exclude leading samples from -I summary stats] \n\t"
           "[--csv <file>] append one row per size/type/op to a CSV file (rank 0)\n\t"
           "[--device <0/1/2>] buffers in host memory (0), CUDA device memory with blocking "
           "calls (1) or with the stream-ordered calls (2)\n\t"
           "[--group <0/1>] 1: the -m calls of an iteration (-z 0) inside one braid group, as "
           "nccl-tests' -m runs them (0: the braid_i* forms, overlapped)\n\t"
           "[-h,--help]\n",
           prog, coll->has_op ? "" : " (ignored)", coll->has_root ? "" : " (ignored)");
}

static void add_note(perf_opts_t *o, const char *note)
{
    if (o->nnotes < PERF_MAX_NOTES) o->notes[o->nnotes++] = note;
}

static const char *sizename(int c)
{
    return c == 'b' ? "minbytes" : c == 'e' ? "maxbytes" : "stepbytes";
}

int perf_parse_args(int argc, char **argv, const perf_coll_t *coll, perf_opts_t *opts_p)
{
    perf_opts_t o = {
        .min_bytes = 32u << 20,
        .max_bytes = 32u << 20,
        .step_bytes = 1u << 20,
        .step_factor = 1,
        .iters = 20,
        .warmup_iters = 1,
        .agg_iters = 1,
        .check = 1,
        .blocking = 0,
        .average = 1,
        .dtype = BRAID_FLOAT32,
        .op = BRAID_SUM,
        .root = 0,
        .run_cycles = 1,
        .prog = basename(argv[0]),
        .argc = argc,
        .argv = argv,
    };
    static const struct option longopts[] = {
        {"nthreads", required_argument, 0, 't'},
        {"ngpus", required_argument, 0, 'g'},
        {"minbytes", required_argument, 0, 'b'},
        {"maxbytes", required_argument, 0, 'e'},
        {"stepbytes", required_argument, 0, 'i'},
        {"stepfactor", required_argument, 0, 'f'},
        {"iters", required_argument, 0, 'n'},
        {"agg_iters", required_argument, 0, 'm'},
        {"warmup_iters", required_argument, 0, 'w'},
        {"run_cycles", required_argument, 0, 'N'},
        {"parallel_init", required_argument, 0, 'p'},
        {"check", required_argument, 0, 'c'},
        {"op", required_argument, 0, 'o'},
        {"datatype", required_argument, 0, 'd'},
        {"root", required_argument, 0, 'r'},
        {"blocking", required_argument, 0, 'z'},
        {"stream_null", required_argument, 0, 'y'},
        {"timeout", required_argument, 0, 'T'},
        {"cudagraph", required_argument, 0, 'G'},
        {"report_cputime", required_argument, 0, 'C'},
        {"report_timestamps", required_argument, 0, 'S'},
        {"output_file", required_argument, 0, 'J'},
        {"average", required_argument, 0, 'a'},
        {"local_register", required_argument, 0, 'R'},
        {"cta_policy", required_argument, 0, 'x'},
        {"device_implementation", required_argument, 0, 'D'},
        {"device_cta_count", required_argument, 0, 'V'},
        {"memory", required_argument, 0, 'M'},
        {"unalign", required_argument, 0, 'u'},
        {"per_iter_timing", required_argument, 0, 'I'},
        {"per_iter_skip", required_argument, 0, 'K'},
        {"csv", required_argument, 0, 'F'},
        {"device", required_argument, 0, 1001}, /* long only: -D is nccl-tests' -D */
        {"group", required_argument, 0, 1002},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    optind = 1;
    for (;;) {
        int c = getopt_long(
            argc, argv, "t:g:b:e:i:f:n:m:w:N:p:I:K:c:o:d:r:z:y:T:hG:C:a:R:x:D:V:J:S:M:u:", longopts,
            NULL);
        if (c == -1) break;
        long v = 0;
        size_t sz;
        switch (c) {
        case 't':
        case 'g':
            if (parse_int(optarg, c == 't' ? "nthreads" : "ngpus", 1, INT32_MAX, &v)) return -1;
            if (v != 1) {
                fprintf(stderr,
                        "-%c %ld: braid's perf tools run one rank per process; start "
                        "more processes (braid-run -n N, mpirun -np N)\n",
                        c, v);
                return -1;
            }
            break;
        case 'b':
        case 'e':
        case 'i':
            if (perf_parse_size(optarg, &sz)) {
                fprintf(stderr,
                        "invalid size '%s' for '%s': a whole number of bytes up to %zu, or of "
                        "K, M or G (powers of 1024)\n",
                        optarg, sizename(c), (size_t)PERF_MAX_BYTES);
                return -1;
            }
            if (c == 'b')
                o.min_bytes = sz;
            else if (c == 'e')
                o.max_bytes = sz;
            else
                o.step_bytes = sz;
            break;
        case 'f':
            if (parse_int(optarg, "stepfactor", 0, INT32_MAX, &v)) return -1;
            o.step_factor = (size_t)v;
            break;
        case 'n':
            if (parse_int(optarg, "iters", 1, INT32_MAX / 2, &v)) return -1;
            o.iters = (int)v;
            break;
        case 'm':
            if (parse_int(optarg, "agg_iters", 1, INT32_MAX / 2, &v)) return -1;
            o.agg_iters = (int)v;
            break;
        case 'w':
            if (parse_int(optarg, "warmup_iters", 0, INT32_MAX, &v)) return -1;
            o.warmup_iters = (int)v;
            break;
        case 'N':
            if (parse_int(optarg, "run_cycles", 0, INT32_MAX, &v)) return -1;
            o.run_cycles = (int)v;
            break;
        case 'c':
            if (parse_int(optarg, "check", 0, INT32_MAX, &v)) return -1;
            o.check = (int)v;
            break;
        case 'z':
            if (parse_int(optarg, "blocking", 0, INT32_MAX, &v)) return -1;
            if (v > 3) {
                fprintf(stderr, "invalid value '%s' for 'blocking' (0..3)\n", optarg);
                return -1;
            }
            o.blocking = (int)v;
            break;
        case 'C':
        case 'S':
        case 'M':
        case 'I':
            if (parse_int(optarg,
                          c == 'C'   ? "report_cputime"
                          : c == 'S' ? "report_timestamps"
                          : c == 'M' ? "memory"
                                     : "per_iter_timing",
                          0, INT32_MAX, &v))
                return -1;
            if (c == 'I' && v > 1) {
                fprintf(stderr, "invalid value '%s' for 'per_iter_timing' (0 or 1)\n", optarg);
                return -1;
            }
            if (c == 'C') o.report_cputime = v != 0;
            if (c == 'S') o.report_timestamps = v != 0;
            if (c == 'M') o.memory_report = v != 0;
            if (c == 'I') o.per_iter_timing = v != 0;
            break;
        case 'K':
            if (parse_int(optarg, "per_iter_skip", 0, INT32_MAX, &v)) return -1;
            o.per_iter_skip = (int)v;
            break;
        case 'a':
            if (parse_int(optarg, "average", 0, INT32_MAX, &v)) return -1;
            if (v > 3) {
                fprintf(stderr, "invalid value '%s' for 'average' (0..3)\n", optarg);
                return -1;
            }
            o.average = (int)v;
            break;
        case 'r':
            if (parse_int(optarg, "root", -1, INT32_MAX, &v)) return -1;
            o.root = (int)v; /* -1 = PERF_ALL: every root in turn */
            break;
        case 'o':
            o.op = perf_op_parse(optarg);
            if (o.op == -2) {
                fprintf(stderr, "invalid op '%s' (sum, prod, min, max, avg, all)\n", optarg);
                return -1;
            }
            break;
        case 'd':
            o.dtype = perf_dtype_parse(optarg);
            if (o.dtype == -2) {
                fprintf(stderr,
                        "invalid datatype '%s' (int8, uint8, int32, uint32, int64, "
                        "uint64, half, bfloat16, float, double, all)\n",
                        optarg);
                return -1;
            }
            break;
        case 'G':
            if (parse_int(optarg, "cudagraph", 0, INT32_MAX, &v)) return -1;
            if (v != 0) {
                fprintf(stderr, "-G %ld: CUDA graphs are not supported by the host tools\n", v);
                return -1;
            }
            break;
        case 'R':
            if (parse_int(optarg, "local_register", 0, INT32_MAX, &v)) return -1;
            if (v > 2) {
                fprintf(stderr, "invalid value '%s' for 'local_register' (0, 1 or 2)\n", optarg);
                return -1;
            }
            o.local_register = (int)v;
            if (v == 2)
                add_note(&o, "-R 2: the send and receive buffers come from braid_mem_alloc "
                             "(every local rank maps them) and are registered as with -R 1");
            break;
        case 'D':
            if (parse_int(optarg, "device_implementation", 0, INT32_MAX, &v)) return -1;
            if (v != 0) {
                fprintf(stderr, "-D %ld: braid has no device implementations (0 only)\n", v);
                return -1;
            }
            break;
        case 'x':
        case 'V':
            if (parse_int(optarg, c == 'x' ? "cta_policy" : "device_cta_count", 0, INT32_MAX, &v))
                return -1;
            add_note(&o, c == 'x' ? "-x: CTA policies are a GPU setting; ignored"
                                  : "-V: braid has no device implementation; ignored");
            break;
        case 'u':
            if (parse_int(optarg, "unalign", 0, 4096, &v)) return -1;
            o.unalign = (int)v;
            break;
        case 'T':
            if (parse_seconds(optarg, &o.timeout)) {
                fprintf(stderr, "invalid value '%s' for 'timeout' (seconds)\n", optarg);
                return -1;
            }
            break;
        case 'J':
            o.json_path = optarg;
            break;
        case 'F':
            o.csv_path = optarg;
            break;
        case 1001:
            if (parse_int(optarg, "device", 0, INT32_MAX, &v) || v > 2) {
                fprintf(stderr, "--device %s: 0 (host), 1 (device, blocking), 2 (stream)\n",
                        optarg);
                return -1;
            }
            o.device = (int)v;
            break;
        case 1002:
            if (parse_int(optarg, "group", 0, INT32_MAX, &v) || v > 1) {
                fprintf(stderr, "--group %s: 0 or 1\n", optarg);
                return -1;
            }
            o.group = (int)v;
            break;
        case 'p':
        case 'y':
            if (parse_int(optarg, c == 'p' ? "parallel_init" : "stream_null", 0, INT32_MAX, &v))
                return -1;
            break; /* accepted for compatibility, no effect */
        case 'h':
            usage(o.prog, coll);
            return 1;
        default:
            usage(o.prog, coll);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (o.min_bytes > o.max_bytes) {
        fprintf(stderr, "invalid sizes for 'minbytes' and 'maxbytes': %llu > %llu\n",
                (unsigned long long)o.min_bytes, (unsigned long long)o.max_bytes);
        return -1;
    }
    if (o.step_factor > 1 ? o.min_bytes == 0 : o.step_bytes == 0) {
        if (o.min_bytes != o.max_bytes) {
            fprintf(stderr, "the sweep would not advance: use -b > 0 with -f, or -i > 0\n");
            return -1;
        }
    }
    if (o.per_iter_skip >= o.iters) {
        fprintf(stderr, "invalid value %d for 'per_iter_skip': must be below iters (%d)\n",
                o.per_iter_skip, o.iters);
        return -1;
    }
    if (o.per_iter_skip && !o.per_iter_timing) {
        fprintf(stderr, "per-iteration skip (-K) requires per-iteration timing (-I 1)\n");
        return -1;
    }
    if (o.device == 2 && !perf_coll_has_stream(coll->kind)) {
        fprintf(stderr,
                "--device 2: braid has no stream-ordered form of %s (only all_reduce, "
                "broadcast, reduce, reduce_scatter and all_gather); use --device 1\n",
                coll->name);
        return -1;
    }
    if (o.group && (coll->kind == PERF_SENDRECV || coll->kind == PERF_HYPERCUBE || o.device == 2)) {
        fprintf(stderr, "--group 1: %s\n",
                o.device == 2 ? "the stream-ordered calls (--device 2) do not join groups"
                              : "this tool's calls are groups of sends and receives already");
        return -1;
    }
    if (o.group && (o.agg_iters < 2 || o.blocking != 0))
        add_note(&o, "--group 1 groups the -m calls of an iteration only with -m > 1 and -z 0");
    *opts_p = o;
    return 0;
}

/* ---- stdout -------------------------------------------------------------------------------- */

/* The nccl-tests release whose flags and output these tools follow. */
#define PERF_NCCL_TESTS_VERSION "2.19.6"

void perf_print_header(FILE *f, const perf_opts_t *o, int lib_version)
{
    fprintf(f, "# nccl-tests version %s braid-headers=%d braid-library=%d\n",
            PERF_NCCL_TESTS_VERSION, BRAID_VERSION_CODE, lib_version);
    fprintf(f, "# Collective test starting: %s\n", o->prog);
    fprintf(f,
            "# nThread %d nGpus %d minBytes %ld maxBytes %ld step: %ld(%s) warmup iters: %d "
            "iters: %d agg iters: %d validation: %d graph: %d unalign: %d\n",
            1, 1, (long)o->min_bytes, (long)o->max_bytes,
            (long)(o->step_factor > 1 ? o->step_factor : o->step_bytes),
            o->step_factor > 1 ? "factor" : "bytes", o->warmup_iters, o->iters, o->agg_iters,
            o->check, 0, o->unalign);
    if (o->blocking == 1)
        fprintf(f, "# Blocking Enabled: wait and barrier after each inner iteration (-m) \n");
    if (o->blocking == 2)
        fprintf(f, "# Blocking Enabled: wait after each inner iteration (-m), no barrier \n");
    if (o->blocking == 3)
        fprintf(f, "# Blocking Enabled: wait and barrier after each outer iteration (-n); "
                   "time excludes barrier \n");
    if (o->per_iter_timing) {
        fprintf(f, "# Per-Iteration Report: host clock timing; i_* uses max over ranks");
        if (o->per_iter_skip) fprintf(f, "; summary skips first %d iterations", o->per_iter_skip);
        fprintf(f, " \n");
    }
    for (int i = 0; i < o->nnotes; i++)
        fprintf(f, "# %s\n", o->notes[i]);
    fprintf(f, "#\n");
}

void perf_print_columns(FILE *f, const perf_opts_t *o)
{
    const char *t = o->report_cputime ? "cputime" : "time";
    const char *ts = o->report_timestamps ? "timestamp" : "";
    const char *tsf = o->report_timestamps ? "%Y-%m-%d %H:%M:%S" : "";
    int pad = o->report_timestamps ? 19 : 0;
    fprintf(f, "#\n");
    if (o->per_iter_timing) {
        fprintf(f,
                "# %10s  %12s  %8s  %6s  %6s              out-of-place (+ per-iteration)      "
                "                          in-place (+ per-iteration)\n",
                "", "", "", "", "");
        fprintf(f,
                "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  "
                "%6s  %6s  %7s  %7s  %7s  %7s %*s\n",
                "size", "count", "type", "redop", "root", t, "algbw", "busbw", "#wrong", "i_min",
                "i_max", "i_p99", "i_cv%", t, "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99",
                "i_cv%", pad, ts);
        fprintf(f,
                "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  "
                "%6s  %6s  %7s  %7s  %7s  %7s %*s\n",
                "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)",
                "(us)", "(%)", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)", pad,
                tsf);
        return;
    }
    fprintf(f,
            "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place  "
            "        \n",
            "", "", "", "", "");
    fprintf(f, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n", "size",
            "count", "type", "redop", "root", t, "algbw", "busbw", "#wrong", t, "algbw", "busbw",
            "#wrong", pad, ts);
    fprintf(f, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n", "(B)",
            "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
            "", pad, tsf);
}

void perf_print_row_params(FILE *f, size_t size, size_t count, const char *type, const char *op,
                           int root)
{
    fprintf(f, "%12li  %12li  %8s  %6s  %6i", (long)size, (long)count, type, op, root);
}

void perf_format_float(char *buf, int width, double v)
{
    /* buf holds width + 1 bytes; the first format whose result fits wins. */
    size_t n = (size_t)width + 1;
    if (snprintf(buf, n, "%*.2f", width, v) <= width) return;
    if (snprintf(buf, n, "%*.1f", width, v) <= width) return;
    if (snprintf(buf, n, "%*.0f", width, v) <= width) return;
    snprintf(buf, n, width >= 7 ? "%*.1e" : "%*.0e", width, v);
}

void perf_print_row_result(FILE *f, double usec, double algbw, double busbw, int64_t wrong)
{
    char t[8], a[7], b[7];
    perf_format_float(t, 7, usec);
    perf_format_float(a, 6, algbw);
    perf_format_float(b, 6, busbw);
    if (wrong >= 0)
        fprintf(f, "  %7s  %6s  %6s  %6g", t, a, b, (double)wrong);
    else
        fprintf(f, "  %7s  %6s  %6s    N/A", t, a, b);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile: the smallest sample with at least pct% of samples at or below. */
static int pct_index(int n, int pct)
{
    int i = (n * pct + 99) / 100 - 1;
    return i < 0 ? 0 : i > n - 1 ? n - 1 : i;
}

void perf_iter_stats(const double *times, int n, perf_iter_stats_t *s_p)
{
    perf_iter_stats_t s = {0};
    double *v = n > 0 ? malloc((size_t)n * sizeof(*v)) : NULL;
    if (v) {
        memcpy(v, times, (size_t)n * sizeof(*v));
        qsort(v, (size_t)n, sizeof(*v), cmp_double);
        s.min = v[0];
        s.max = v[n - 1];
        s.p50 = v[n / 2];
        s.p95 = v[pct_index(n, 95)];
        s.p99 = v[pct_index(n, 99)];
        double sum = 0, var = 0;
        for (int i = 0; i < n; i++)
            sum += v[i];
        s.avg = sum / n;
        for (int i = 0; i < n; i++)
            var += (v[i] - s.avg) * (v[i] - s.avg);
        s.stdev = sqrt(var / n);
        free(v);
    }
    *s_p = s;
}

void perf_format_now(char *buf, size_t len)
{
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm);
}

/* ---- CSV ----------------------------------------------------------------------------------- */

const char perf_csv_header[] =
    "collective,nranks,size,count,type,redop,root,time_oop_us,algbw_oop,busbw_oop,wrong_oop,"
    "time_ip_us,algbw_ip,busbw_ip,wrong_ip\n";

FILE *perf_csv_open(const char *path)
{
    FILE *f = fopen(path, "a");
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && ftell(f) == 0) fputs(perf_csv_header, f);
    fflush(f);
    return f;
}

void perf_csv_row(FILE *f, const perf_row_t *r)
{
    fprintf(f, "%s,%d,%zu,%zu,%s,%s,%d", r->collective, r->nranks, r->size, r->count, r->type,
            r->redop, r->root);
    for (int ip = 0; ip < 2; ip++)
        fprintf(f, ",%.3f,%.6f,%.6f,%lld", r->time_us[ip], r->algbw[ip], r->busbw[ip],
                (long long)r->wrong[ip]);
    fputc('\n', f);
    fflush(f);
}
