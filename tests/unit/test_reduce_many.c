/* Tests of braid_reduce_many (src/reduce): the reduction of ns sources in rank order that the
 * direct shared-memory collectives run, up to four sources per pass.
 *
 * Every element is checked against the reference of tests/common/ref_reduce.h applied step by
 * step as the contract says (src[0] op src[1], then op each further source, the last step the
 * final one when nranks > 0), so each intermediate rounds to the element type. Once a step
 * makes a NaN of unknown payload (inf - inf), the rest of the chain must give some quiet NaN.
 * Then the same calls are compared bit for bit with the chain of braid_reduce_pair /
 * braid_reduce_pair_final calls on arbitrary bit patterns (NaN payloads, infinities). Each ISA
 * path runs in its own test (BRAID_REDUCE_ISA is read at a process's first reduction, and
 * Criterion runs every test in its own process). */
#include <criterion/criterion.h>

#include "reduce/reduce.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_isa.h"
#include "ref_reduce.h"

TestSuite(reduce_many, .timeout = 120);

#define MAXS 9
#define GUARD 32

typedef struct {
    braid_datatype_t dt;
    braid_redop_t op;
    int ns, nranks, alias; /* alias: dst is src[0] */
    size_t count, off;
    int wild; /* arbitrary bit patterns for every element */
} mcase_t;

static void fill(const mcase_t *c, unsigned char **buf, unsigned char **p, size_t sz, int j,
                 uint64_t seed)
{
    buf[j] = malloc(sz);
    cr_assert(buf[j]);
    memset(buf[j], 0xa5, sz);
    p[j] = buf[j] + GUARD + c->off;
    for (size_t i = 0; i < c->count; i++)
        put_elem(c->dt, p[j], i, gen_bits(c->dt, i, seed + 31 * (uint64_t)j, c->wild));
}

/* The reference value of element i: the chain over the sources' elements x[0..ns). */
static want_t ref_chain(const mcase_t *c, const uint64_t *x)
{
    want_t w = {x[0], 0};
    if (c->ns == 1) return c->nranks > 0 ? ref_elem(c->dt, c->op, M_DIV, x[0], 0, c->nranks) : w;
    for (int j = 1; j < c->ns; j++) {
        int mode = j == c->ns - 1 && c->nranks > 0 ? M_FINAL : M_PAIR;
        want_t s = ref_elem(c->dt, c->op, mode, w.bits, x[j], c->nranks);
        if (w.any_nan) s.any_nan = 1; /* a NaN of unknown payload stays a NaN */
        w = s;
    }
    return w;
}

/* One call of braid_reduce_many against the reference; guards and unaliased inputs intact. */
static void check_many(const mcase_t *c, uint64_t seed)
{
    size_t es = esize(c->dt), bytes = c->count * es, sz = bytes + c->off + 2 * GUARD;
    unsigned char *buf[MAXS + 1], *p[MAXS + 1], *copy[MAXS];
    for (int j = 0; j < c->ns; j++) {
        fill(c, buf, p, sz, j, seed);
        copy[j] = malloc(bytes + 1);
        cr_assert(copy[j]);
        memcpy(copy[j], p[j], bytes);
    }
    fill(c, buf, p, sz, MAXS, seed + 999); /* dst, when not src[0] */
    unsigned char *dst = c->alias ? p[0] : p[MAXS], *dbase = c->alias ? buf[0] : buf[MAXS];
    const void *src[MAXS];
    for (int j = 0; j < c->ns; j++)
        src[j] = p[j];
    braid_reduce_many(c->dt, c->op, dst, src, c->ns, c->count, c->nranks);
    for (size_t i = 0; i < c->count; i++) {
        uint64_t x[MAXS] = {0};
        for (int j = 0; j < c->ns; j++)
            x[j] = get_elem(c->dt, copy[j], i);
        want_t w = ref_chain(c, x);
        uint64_t got = get_elem(c->dt, dst, i);
        if (!want_ok(c->dt, w, got))
            cr_assert_fail("many %s %s ns=%d nranks=%d count=%zu off=%zu alias=%d: [%zu] = 0x%llx, "
                           "want 0x%llx%s (x0=0x%llx x1=0x%llx, isa %s)",
                           dtname(c->dt), opname(c->op), c->ns, c->nranks, c->count, c->off,
                           c->alias, i, (unsigned long long)got, (unsigned long long)w.bits,
                           w.any_nan ? " (any quiet NaN)" : "", (unsigned long long)x[0],
                           (unsigned long long)(c->ns > 1 ? x[1] : 0), braid_reduce_isa());
    }
    for (size_t k = 0; k < sz; k++) {
        unsigned char *q = dbase + k;
        if (q >= dst && q < dst + bytes) continue;
        cr_assert_eq(*q, 0xa5, "many %s %s ns=%d count=%zu: wrote byte %zd outside dst",
                     dtname(c->dt), opname(c->op), c->ns, c->count, (ssize_t)(q - dst));
    }
    for (int j = c->alias ? 1 : 0; j < c->ns; j++)
        cr_assert(memcmp(p[j], copy[j], bytes) == 0, "many %s ns=%d: source %d modified",
                  dtname(c->dt), c->ns, j);
    for (int j = 0; j < c->ns; j++) {
        free(buf[j]);
        free(copy[j]);
    }
    free(buf[MAXS]);
}

/* The same call against the chain of pair kernels, bit for bit (NaN payloads included). */
static void check_like_pairs(const mcase_t *c, uint64_t seed)
{
    size_t es = esize(c->dt), bytes = c->count * es, sz = bytes + c->off + 2 * GUARD;
    unsigned char *buf[MAXS + 1], *p[MAXS + 1];
    for (int j = 0; j < c->ns; j++)
        fill(c, buf, p, sz, j, seed);
    fill(c, buf, p, sz, MAXS, seed);
    unsigned char *want = malloc(bytes + 1);
    cr_assert(want);
    if (c->ns == 1 && c->nranks > 0)
        braid_reduce_finalize(c->dt, c->op, want, p[0], c->count, c->nranks);
    else
        memcpy(want, p[0], bytes);
    for (int j = 1; j < c->ns; j++)
        if (j == c->ns - 1 && c->nranks > 0)
            braid_reduce_pair_final(c->dt, c->op, want, want, p[j], c->count, c->nranks);
        else
            braid_reduce_pair(c->dt, c->op, want, want, p[j], c->count);
    const void *src[MAXS];
    for (int j = 0; j < c->ns; j++)
        src[j] = p[j];
    unsigned char *dst = c->alias ? p[0] : p[MAXS];
    braid_reduce_many(c->dt, c->op, dst, src, c->ns, c->count, c->nranks);
    for (size_t i = 0; i < c->count; i++) {
        uint64_t g = get_elem(c->dt, dst, i), w = get_elem(c->dt, want, i);
        cr_assert_eq(g, w,
                     "many vs pairs %s %s ns=%d nranks=%d count=%zu: [%zu] = 0x%llx, pairs "
                     "0x%llx (isa %s)",
                     dtname(c->dt), opname(c->op), c->ns, c->nranks, c->count, i,
                     (unsigned long long)g, (unsigned long long)w, braid_reduce_isa());
    }
    for (int j = 0; j <= MAXS; j++)
        if (j < c->ns || j == MAXS) free(buf[j]);
    free(want);
}

static const size_t counts[] = {1, 7, 63, 64, 65, 129, 1000, 4099};
#define NCOUNTS (sizeof(counts) / sizeof(counts[0]))

static void check_all(void)
{
    for (size_t d = 0; d < NDTYPES; d++)
        for (size_t o = 0; o < NOPS; o++)
            for (int ns = 1; ns <= MAXS; ns++) {
                uint64_t seed = 1000 * d + 100 * o + (uint64_t)ns;
                for (size_t k = 0; k < NCOUNTS; k++) {
                    mcase_t c = {all_dtypes[d], all_ops[o], ns,    (int)(k % 3) * ns,
                                 (int)(k & 1),  counts[k],  k % 3, 0};
                    check_many(&c, seed + k);
                    c.wild = 1;
                    c.nranks = ns + (int)k;
                    check_like_pairs(&c, seed + k);
                }
            }
}

static void check_isa(const char *isa)
{
    if (!cpu_has(isa)) cr_skip_test("this CPU has no %s", isa);
    setenv("BRAID_REDUCE_ISA", isa, 1);
    cr_assert_str_eq(braid_reduce_isa(), isa, "the dispatcher did not pick the forced path");
    check_all();
}

Test(reduce_many, against_the_reference_and_the_pair_chain_generic)
{
    check_isa("generic");
}

Test(reduce_many, against_the_reference_and_the_pair_chain_avx2)
{
    check_isa("avx2");
}

Test(reduce_many, against_the_reference_and_the_pair_chain_avx512)
{
    check_isa("avx512");
}

/* Long enough for every kernel's block loop, misaligned, dst distinct and dst = src[0]. */
Test(reduce_many, large_counts)
{
    for (size_t d = 0; d < NDTYPES; d++)
        for (int ns = 2; ns <= 5; ns++) {
            mcase_t c = {all_dtypes[d], BRAID_AVG, ns, ns, ns & 1, 100003, 1, 0};
            check_many(&c, 77 + d);
            c.op = BRAID_SUM;
            c.nranks = 0;
            check_many(&c, 78 + d);
        }
}

Test(reduce_many, count_zero_touches_nothing)
{
    const void *src[4] = {NULL, NULL, NULL, NULL};
    for (size_t d = 0; d < NDTYPES; d++)
        for (size_t o = 0; o < NOPS; o++)
            for (int ns = 1; ns <= 4; ns++)
                braid_reduce_many(all_dtypes[d], all_ops[o], NULL, src, ns, 0, ns);
}
