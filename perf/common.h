/* Shared harness of the *_perf tools (nccl-tests compatible benchmarks).
 *
 * The harness is split in four parts so that the Open MPI peer (perf/peers/) can reuse all but
 * the braid calls:
 *   data.c    element generators, reference results, fp16/bf16 conversions, the checker;
 *   report.c  command line, nccl-tests style output, the CSV file;
 *   json.c    the -J JSON file;
 *   bench.c   the benchmark loop (warm-up, timing, check), written against perf_backend_t;
 *   common.c  the braid backend and perf_braid_main(), which the thin *_perf.c mains call.
 * Only data.c/report.c/bench.c are shared with the peers; they use braid.h for its enums only. */
#ifndef BRAID_PERF_COMMON_H
#define BRAID_PERF_COMMON_H

#include "braid/braid.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define PERF_ALL (-1)   /* -d all / -o all */
#define PERF_NO_OP (-1) /* collectives without a reduction (broadcast, all_gather) */

/* ---- collectives ------------------------------------------------------------------------- */

typedef enum {
    PERF_ALLREDUCE = 0,
    PERF_BROADCAST,
    PERF_REDUCE,
    PERF_REDUCE_SCATTER,
    PERF_ALLGATHER,
    PERF_ALLTOALL, /* count per peer; busbw = algbw * (n-1)/n */
    PERF_GATHER,   /* count per rank to the root; (n-1)/n */
    PERF_SCATTER,  /* count per rank from the root; (n-1)/n */
    PERF_SENDRECV, /* count to rank+1, from rank-1 (a group); busbw = algbw */
    PERF_HYPERCUBE /* all-gather by exchanges with rank ^ 2^k (power-of-two n); (n-1)/n */
} perf_coll_kind_t;

typedef struct {
    const char *name; /* "all_reduce": the CSV 'collective' column */
    perf_coll_kind_t kind;
    int has_op;   /* takes -o */
    int has_root; /* takes -r */
} perf_coll_t;

extern const perf_coll_t perf_coll_allreduce, perf_coll_broadcast, perf_coll_reduce,
    perf_coll_reduce_scatter, perf_coll_allgather, perf_coll_alltoall, perf_coll_gather,
    perf_coll_scatter, perf_coll_sendrecv, perf_coll_hypercube;

/* Buffer geometry of one row, following nccl-tests' getCollByteCount: 'count' is the count
 * passed to the call (and printed), bytes are what the send/recv buffers hold, the in-place
 * offsets are per rank (multiply by the rank). */
typedef struct {
    size_t count;
    size_t send_bytes, recv_bytes;
    size_t send_ip_off, recv_ip_off;
    size_t size; /* the printed size: max(send_bytes, recv_bytes) */
} perf_geom_t;

void perf_geom(perf_coll_kind_t kind, size_t bytes, size_t typesize, int nranks,
               perf_geom_t *geom_p);
/* 1 if braid has a stream-ordered form (braid_*_stream, --device 2) of the collective. */
int perf_coll_has_stream(perf_coll_kind_t kind);
/* algbw and busbw in GB/s for a row of 'size' bytes that took 'sec' seconds. */
void perf_bw(perf_coll_kind_t kind, size_t size, double sec, int nranks, double *algbw_p,
             double *busbw_p);

/* ---- dtypes, ops, generators (data.c) ---------------------------------------------------- */

/* nccl-tests' names ("half", "float", "bfloat16") for output; NULL if invalid. */
const char *perf_dtype_name(int dtype);
size_t perf_dtype_size(int dtype);
/* Parses a dtype name (nccl-tests' and braid's spellings) or "all"; -2 if unknown. */
int perf_dtype_parse(const char *s);
/* The dtypes "-d all" runs, in nccl-tests' order. */
extern const int perf_all_dtypes[BRAID_NUM_DTYPES];

/* nccl-tests' "mulsum": a PreMulSum op (braid_redop_create_premulsum) made for each call
 * with rank r's scalar perf_mulsum_scalar(r) = 1 + (r & 1), destroyed once the call started. */
#define PERF_OP_MULSUM BRAID_NUM_OPS
#define PERF_NUM_OPS (BRAID_NUM_OPS + 1)
const char *perf_op_name(int op); /* "sum" ... "avg", "mulsum", "none" for PERF_NO_OP */
int perf_op_parse(const char *s); /* op or PERF_ALL; -2 if unknown */
extern const int perf_all_ops[PERF_NUM_OPS];
int perf_mulsum_scalar(int rank);
/* That scalar as one element of dtype, in out (8 bytes). */
void perf_mulsum_scalar_bits(int dtype, int rank, void *out);

uint16_t perf_float_to_half(float f); /* round to nearest even */
float perf_half_to_float(uint16_t h);
uint16_t perf_float_to_bf16(float f); /* round to nearest even */
float perf_bf16_to_float(uint16_t b);
uint8_t perf_float_to_e4m3(float f); /* nearest even, saturating as braid */
float perf_e4m3_to_float(uint8_t b);
uint8_t perf_float_to_e5m2(float f);
float perf_e5m2_to_float(uint8_t b);

/* Element values are drawn from a hash of (seed, index, rank) so that every rank can compute
 * the exact result of any reduction locally: the range depends on dtype, op and nranks so that
 * no sum leaves the range a float represents exactly or overflows a signed integer; see data.c
 * for prod. */
typedef struct {
    int dtype;
    int op; /* braid_redop_t, or PERF_NO_OP for copies */
    int nranks;
    uint64_t seed;
    int64_t lo; /* values are lo + h % span (odd for integer prod; not for float prod) */
    uint64_t span;
    int nz_ranks;  /* ranks >= this one contribute 0 (float8 sums over many ranks) */
    int64_t avg_x; /* 16/8-bit float avg where nranks is inexact: inputs v * avg_x, v in -1..1, */
    double avg_y;  /* each scaled by 1/nranks to v * avg_y exactly (0: inputs nranks * v) */
} perf_gen_t;

void perf_gen_init(perf_gen_t *g, int dtype, int op, int nranks, uint64_t seed);
/* buf[i] = value of element idx0 + i of 'rank', for i < count. */
void perf_fill(const perf_gen_t *g, void *buf, size_t count, uint64_t idx0, int rank);
/* buf[i] = the reduction over all ranks of element idx0 + i. */
void perf_fill_expected(const perf_gen_t *g, void *buf, size_t count, uint64_t idx0);
/* dst = bitwise NOT of exp: every element a collective fails to write stays wrong. */
void perf_poison(void *dst, const void *exp, size_t bytes);
/* Number of elements of got that differ from exp: exact (floats by value, so +0 == -0). */
size_t perf_check(const perf_gen_t *g, const void *got, const void *exp, size_t count);

/* ---- options and output (report.c) ------------------------------------------------------- */

#define PERF_MAX_NOTES 8
typedef struct {
    size_t min_bytes, max_bytes, step_bytes, step_factor;
    int iters, warmup_iters, agg_iters, check, average;
    int blocking;        /* -z: 0 none, 1 wait + barrier after each call, 2 wait after each call,
                            3 wait after each call, barrier after each -n iteration, not timed */
    int dtype, op, root; /* dtype/op/root may be PERF_ALL (root: -r -1, every root in turn) */
    int report_cputime, report_timestamps;
    int run_cycles;     /* -N: sweeps (rows printed each time); 0 = forever */
    int local_register; /* -R: 0 none, 1 braid_comm_register, 2 braid_mem_alloc buffers too */
    int unalign;        /* -u: buffers start this many elements past an aligned address */
    int memory_report;  /* -M: print the host memory the buffers take */
    int per_iter_timing, per_iter_skip; /* -I, -K */
    double timeout; /* -T seconds (0: unset); the braid backend applies it as BRAID_TIMEOUT */
    const char *csv_path, *json_path;
    const char *prog;                  /* basename of argv[0] */
    const char *notes[PERF_MAX_NOTES]; /* what flags did or did not do: "# " lines (rank 0) */
    int nnotes;
    int argc;
    char **argv;
    int device; /* --device: 0 host buffers, 1 CUDA device buffers, 2 device + stream-ordered */
    int group;  /* --group: 1 = the -m calls of an iteration (-z 0) in one braid group */
} perf_opts_t;

/* Parses argv (nccl-tests flags plus --csv FILE). Returns 0 to run, 1 after -h (exit 0),
 * -1 on a bad flag (message printed). */
int perf_parse_args(int argc, char **argv, const perf_coll_t *coll, perf_opts_t *opts_p);
/* The largest -b/-e/-i: 2^48 bytes (SIZE_MAX / 4 where size_t is smaller), so that buffer
 * lengths with -u's padding and the sweep's steps cannot overflow. */
#define PERF_MAX_BYTES                                                                             \
    ((size_t)(SIZE_MAX / 4 < 0x1000000000000ull ? SIZE_MAX / 4 : 0x1000000000000ull))
/* Parses "64", "8M", "1G", "4KB" (K, M, G: powers of 1024) into *bytes_p; -1 if it is not a
 * whole number of bytes (as nccl-tests: no fraction, sign, exponent, inf or nan) or it exceeds
 * PERF_MAX_BYTES. */
int perf_parse_size(const char *s, size_t *bytes_p);

/* "# nccl-tests version ...", "# Collective test starting: PROG", the parameters line and
 * the -z/-I notes; lib_version is the library's version code (braid_version()). */
void perf_print_header(FILE *f, const perf_opts_t *o, int lib_version);
void perf_print_columns(FILE *f, const perf_opts_t *o);
void perf_print_row_params(FILE *f, size_t size, size_t count, const char *type, const char *op,
                           int root);
/* wrong < 0 prints N/A (check disabled). */
void perf_print_row_result(FILE *f, double usec, double algbw, double busbw, int64_t wrong);
/* nccl-tests' getFloatStr: v in 'width' columns with 2, 1 or 0 decimals, else exponent. */
void perf_format_float(char *buf, int width, double v);
/* Per-iteration statistics of -I (times in seconds). */
typedef struct {
    double min, max, avg, p50, p95, p99, stdev;
} perf_iter_stats_t;
void perf_iter_stats(const double *times, int n, perf_iter_stats_t *s_p);
/* "2026-12-01 07:24:19" (local time), the -S column. */
void perf_format_now(char *buf, size_t len);

typedef struct {
    const char *collective;
    int nranks;
    size_t size, count;
    const char *type, *redop;
    int root;
    double time_us[2], algbw[2], busbw[2]; /* [0] out-of-place, [1] in-place */
    int64_t wrong[2];                      /* -1 when not checked */
} perf_row_t;

FILE *perf_csv_open(const char *path); /* appends; writes the header line into a new file */
void perf_csv_row(FILE *f, const perf_row_t *row);
extern const char perf_csv_header[];

/* ---- JSON (-J, json.c) ------------------------------------------------------------------ */

#define PERF_JSON_MAX_DEPTH 8
typedef struct {
    FILE *f; /* NULL: every call does nothing */
    int depth;
    int count[PERF_JSON_MAX_DEPTH];
    char closer[PERF_JSON_MAX_DEPTH];
} perf_json_t;

/* Creates path, or path.0, path.1, ... if it exists (never overwrites); *used gets the name. */
FILE *perf_json_open(const char *path, char *used, size_t len);
/* key is NULL for the elements of a list. */
void perf_json_obj(perf_json_t *j, const char *key);
void perf_json_obj_end(perf_json_t *j);
void perf_json_list(perf_json_t *j, const char *key);
void perf_json_list_end(perf_json_t *j);
void perf_json_str(perf_json_t *j, const char *key, const char *s);
void perf_json_int(perf_json_t *j, const char *key, long long v);
void perf_json_double(perf_json_t *j, const char *key, double v); /* null if not finite */
void perf_json_bool(perf_json_t *j, const char *key, int v);
void perf_json_null(perf_json_t *j, const char *key);
void perf_json_close(perf_json_t *j); /* closes what is open, then the file */

/* ---- the benchmark loop (bench.c) -------------------------------------------------------- */

/* What the loop needs from a communication library. Calls return 0 on success; on failure
 * they return nonzero after printing the error (rank, call, message) to stderr.
 *
 * With NCCL_TESTS_SPLIT the job is split into groups that run the collective each on its own
 * communicator: rank/nranks are the rank's place in its group (the collective's), while
 * barrier, allreduce_* and allgather_bytes span the whole job (world_rank/world_nranks), as
 * nccl-tests' MPI_COMM_WORLD calls do. Without a split world_* equal rank/nranks (a backend
 * may leave world_nranks 0 for that). */
typedef struct perf_backend perf_backend_t;
struct perf_backend {
    const char *name; /* "braid", "ompi" */
    int rank, nranks;
    int world_rank, world_nranks, group;
    void *ctx;
    /* Starts one collective; nonblocking when more are started before complete (-m > 1). */
    int (*start)(perf_backend_t *b, const perf_coll_t *coll, const void *send, void *recv,
                 size_t count, int dtype, int op, int root, int nonblocking);
    /* Completes every collective started since the last call. */
    int (*complete)(perf_backend_t *b);
    int (*barrier)(perf_backend_t *b);
    /* In place over all ranks: op is BRAID_SUM, BRAID_MIN or BRAID_MAX. */
    int (*allreduce_f64)(perf_backend_t *b, double *v, int op);
    int (*allreduce_i64)(perf_backend_t *b, int64_t *v);
    /* all[r*len ..] = rank r's mine[0..len) */
    int (*allgather_bytes)(perf_backend_t *b, const void *mine, void *all, size_t len);
    /* 0 when the backend cannot run this dtype/op (the loop skips it with a note). */
    int (*supports)(perf_backend_t *b, const perf_coll_t *coll, int dtype, int op);
    const char *device_desc; /* after "[cpu]" in the "# Using devices" lines */
    /* -R: registers [buf, buf + bytes) for the rest of the run (NULL: not supported). */
    int (*register_buffer)(perf_backend_t *b, void *buf, size_t bytes);
    void (*deregister_all)(perf_backend_t *b); /* drops what register_buffer registered */
    /* -R 2: host memory every local rank can map (braid_mem_alloc, as nccl-tests' -R 2 takes
     * ncclMemAlloc memory); NULL: not supported. */
    void *(*host_alloc)(perf_backend_t *b, size_t bytes);
    void (*host_free)(perf_backend_t *b, void *p);
    long long init_mem; /* -M: bytes the process grew by while the library initialised */
    int version;        /* the library's version code for the header (0: unknown) */
    /* Device buffers (--device): NULL when the backend has none. mode is opts.device. */
    int (*dev_setup)(perf_backend_t *b, int mode);
    void *(*dev_alloc)(perf_backend_t *b, size_t bytes);
    void (*dev_free)(perf_backend_t *b, void *p);
    int (*dev_copy)(perf_backend_t *b, void *dst, const void *src, size_t bytes);
};

/* Runs the whole test (header, sweep for each dtype/op/root, footer) and returns the exit
 * code: 0, 1 if a check found wrong elements (or NCCL_TESTS_MIN_BW is not met), 2 on an
 * error. The footer is printed before any rank returns (a last barrier), so a launcher that
 * kills the job when one rank exits non-zero cannot cut it off. */
int perf_bench_run(perf_backend_t *b, const perf_coll_t *coll, const perf_opts_t *o);

/* ---- braid (common.c) -------------------------------------------------------------------- */

/* main() of every braid *_perf tool. */
int perf_braid_main(int argc, char **argv, const perf_coll_t *coll);

#endif
