/* Test data: inputs generated from (rank, index, seed) so the exact result of every dtype x op
 * is known without running a reduction, and an independent scalar reference that computes it
 * in double / 64-bit arithmetic. Values are small integers (or, for prod, +-1 and 2 and 0.5)
 * so every float sum/product is exact in any order; integer avg's quotient is truncated,
 * float32/float64 avg's rounded once. A floating avg has at most two nonzero inputs per index,
 * so float16/bfloat16/float8 avg (inputs scaled by 1/n, then summed: braid.h) has the same sum
 * of rounded scaled inputs in every order. */
#ifndef BRAID_TEST_DATA_H
#define BRAID_TEST_DATA_H

#include "braid/braid.h"

#include <stddef.h>

/* 1 when BRAID_TEST_QUICK is set and not "0" (the sanitizer pass): suites trim their largest
 * sizes, every path stays covered. */
int data_quick(void);
/* malloc(n + 64), aborting when out of memory: the 64 spare bytes take unaligned offsets. */
void *data_xmalloc(size_t n);

/* The input value of rank r at index i, as a double (exactly representable in dtype). */
double data_value(braid_datatype_t dt, braid_redop_t op, int rank, size_t i, int seed);
/* Fills buf[0..count) (element index base + k) with rank r's inputs. */
void data_fill(void *buf, braid_datatype_t dt, braid_redop_t op, int rank, size_t base,
               size_t count, int seed);
/* Expected reduction over ranks 0..n-1 at index i, stored into out (one element). */
void data_expected(void *out, braid_datatype_t dt, braid_redop_t op, int n, size_t i, int seed);
/* Compares count elements of got (index base + k) with the expected reduction; returns the
 * number of mismatches and prints the first few (bit-exact comparison). */
size_t data_check_reduced(const void *got, braid_datatype_t dt, braid_redop_t op, int n,
                          size_t base, size_t count, int seed, const char *what);
/* Compares with rank src's inputs (broadcast / allgather). */
size_t data_check_rank(const void *got, braid_datatype_t dt, braid_redop_t op, int src, size_t base,
                       size_t count, int seed, const char *what);

/* One all-reduce checked against the reference, run inside a rank (tests/common/mp.h): inputs
 * from (rank, index, seed), in place or not, both buffers shifted by `off` bytes (unaligned).
 * Returns 0, or 1 after printing what went wrong (prefixed by label). */
int data_check_allreduce(braid_comm_t comm, int rank, int n, braid_datatype_t dt, braid_redop_t op,
                         size_t count, int in_place, size_t off, int seed, const char *label);

#endif
