/* braid_copy (src/core/copy.h), the vector copy of braid's shared-memory paths: against byte
 * by byte reference copies, for every size up to well past the loop's blocks, every source and
 * destination misalignment within a vector, and large blocks; the bytes around the
 * destination stay untouched; the same for braid_copy_nt (streaming stores) and for
 * braid_copy_shared with and without them (below and above BRAID_SHM_NT_BYTES). */
#include <criterion/criterion.h>

#include "core/copy.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

TestSuite(copy, .timeout = 60);

static void fill(unsigned char *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (unsigned char)(seed >> 24);
    }
}

typedef void (*copy_fn)(void *, const void *, size_t);

/* Copies n bytes from src + so to dst + dop with fn and checks every byte of the destination
 * buffer (cap bytes) against the expected picture. */
static void check_fn(copy_fn fn, const char *name, unsigned char *src, unsigned char *dst,
                     unsigned char *want, size_t cap, size_t so, size_t dop, size_t n)
{
    memset(dst, 0xa5, cap);
    memset(want, 0xa5, cap);
    for (size_t i = 0; i < n; i++) /* reference: one byte at a time */
        want[dop + i] = src[so + i];
    fn(dst + dop, src + so, n);
#if defined(__x86_64__)
    __builtin_ia32_sfence(); /* braid_copy_nt's stores */
#endif
    for (size_t i = 0; i < cap; i++)
        if (dst[i] != want[i])
            cr_assert_fail("n %zu, source offset %zu, destination offset %zu: byte %zu is %#x, "
                           "expected %#x (%s loop, %s)",
                           n, so, dop, i, dst[i], want[i], braid_copy_isa(), name);
}

static void copy_inline(void *dst, const void *src, size_t n)
{
    braid_copy(dst, src, n);
}

static void copy_shared_nt(void *dst, const void *src, size_t n)
{
    braid_copy_shared(dst, src, n, 1);
}

static void copy_shared_plain(void *dst, const void *src, size_t n)
{
    braid_copy_shared(dst, src, n, 0);
}

static void check(unsigned char *src, unsigned char *dst, unsigned char *want, size_t cap,
                  size_t so, size_t dop, size_t n)
{
    check_fn(copy_inline, "braid_copy", src, dst, want, cap, so, dop, n);
    check_fn(braid_copy_nt, "braid_copy_nt", src, dst, want, cap, so, dop, n);
    check_fn(copy_shared_nt, "braid_copy_shared nt", src, dst, want, cap, so, dop, n);
    check_fn(copy_shared_plain, "braid_copy_shared", src, dst, want, cap, so, dop, n);
}

Test(copy, every_size_and_misalignment)
{
    const size_t cap = 1216; /* a multiple of the alignment, as aligned_alloc wants */
    unsigned char *src = aligned_alloc(64, cap), *dst = aligned_alloc(64, cap),
                  *want = aligned_alloc(64, cap);
    cr_assert(src && dst && want);
    fill(src, cap, 7);
    for (size_t n = 0; n <= 1100; n += n < 300 ? 1 : 37)
        for (size_t so = 0; so < 33; so += 3)
            for (size_t dop = 0; dop < 33; dop += 5)
                if (so + n <= cap && dop + n <= cap) check(src, dst, want, cap, so, dop, n);
    free(src);
    free(dst);
    free(want);
}

Test(copy, large_blocks)
{
    const size_t cap = (4u << 20) + 256;
    unsigned char *src = malloc(cap), *dst = malloc(cap), *want = malloc(cap);
    cr_assert(src && dst && want);
    fill(src, cap, 11);
    size_t sizes[] = {(1u << 20) + 13, 4u << 20, (3u << 20) - 1};
    for (int k = 0; k < 3; k++)
        check(src, dst, want, cap, (size_t)k * 17 + 1, (size_t)k * 9 + 3, sizes[k]);
    free(src);
    free(dst);
    free(want);
}

/* braid_copy_shared switches to streaming stores at BRAID_SHM_NT_BYTES: sizes around it, with
 * every misalignment of a vector, through the same reference check. */
Test(copy, shared_copies_around_the_streaming_threshold)
{
    const size_t cap = 2 * BRAID_SHM_NT_BYTES + 128;
    unsigned char *src = aligned_alloc(64, cap), *dst = aligned_alloc(64, cap),
                  *want = aligned_alloc(64, cap);
    cr_assert(src && dst && want);
    fill(src, cap, 13);
    for (size_t n = BRAID_SHM_NT_BYTES - 65; n <= BRAID_SHM_NT_BYTES + 65; n += 13)
        for (size_t so = 0; so < 33; so += 7)
            for (size_t dop = 0; dop < 33; dop += 11) {
                check_fn(copy_shared_nt, "braid_copy_shared nt", src, dst, want, cap, so, dop, n);
                check_fn(copy_shared_plain, "braid_copy_shared", src, dst, want, cap, so, dop, n);
            }
    check_fn(copy_shared_nt, "braid_copy_shared nt", src, dst, want, cap, 5, 3,
             2 * BRAID_SHM_NT_BYTES + 7);
    free(src);
    free(dst);
    free(want);
}

/* BRAID_DIRECT_NT_SLOTS=auto starts from this: AMD x86-64 CPUs only (the ones measured). */
Test(copy, shared_streaming_default_follows_the_vendor)
{
#if defined(__x86_64__)
    cr_assert_eq(braid_copy_shared_nt_default(), __builtin_cpu_is("amd") ? 1 : 0);
#else
    cr_assert_eq(braid_copy_shared_nt_default(), 0);
#endif
}

Test(copy, names_its_loop)
{
    const char *isa = braid_copy_isa();
    cr_assert(!strcmp(isa, "avx2") || !strcmp(isa, "sse2") || !strcmp(isa, "memcpy"), "%s", isa);
#if defined(__x86_64__)
    cr_assert_str_eq(isa, __builtin_cpu_supports("avx2") ? "avx2" : "sse2");
#endif
}
