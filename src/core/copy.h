/* braid_copy: the bulk copies of braid's shared-memory paths (the direct collectives' copy-in,
 * slices and outputs; the shm transport's slots).
 *
 * glibc's memcpy copies blocks from 2 KiB on with `rep movsb` on CPUs that report ERMS; on the
 * AMD EPYC VMs this project runs on, the 4-rank direct all-reduce on 2 cpus took 1.20-1.31x as
 * long with memcpy as with braid_copy (2 ranks: 0.93-0.99; 7 interleaved rounds, perf/RESULTS.md
 * session 9). braid_copy is a vector loop: 32-byte AVX2 loads and stores (16-byte SSE2 without
 * AVX2), four per iteration, unaligned loads and stores aligned to the destination; memcpy below
 * 256 bytes. The regions must not overlap. */
#ifndef BRAID_CORE_COPY_H
#define BRAID_CORE_COPY_H

#include <stddef.h>
#include <string.h>

void braid_copy_large(void *dst, const void *src, size_t n);

static inline void braid_copy(void *dst, const void *src, size_t n)
{
    if (n < 256)
        memcpy(dst, src, n);
    else
        braid_copy_large(dst, src, n);
}

/* dst <- src with streaming stores (no read for ownership of dst's lines, none left in the
 * cache): for outputs larger than the last-level cache, written once and not read again
 * (BRAID_NT_MIN). The caller orders them with an sfence before it publishes the data. */
void braid_copy_nt(void *dst, const void *src, size_t n);

/* Copies of at least BRAID_SHM_NT_BYTES into shared memory that other processes read next (the
 * direct collectives' slots) use streaming stores where BRAID_DIRECT_NT_SLOTS is on. */
#define BRAID_SHM_NT_BYTES 4096

/* dst <- src for shared memory a peer reads next: with nt (and n >= BRAID_SHM_NT_BYTES) by
 * streaming stores followed by an sfence, so that a release store after it publishes them;
 * else braid_copy. Why: on the AMD EPYC VMs measured, a store into a line that a peer on
 * another core has read waits for that copy to be invalidated, one line at a time, and a
 * 256 KiB copy into such lines ran at about 6 GB/s against 30 for a fresh copy; streaming
 * stores invalidate without the wait: the direct all-reduce of 2 ranks took 0.54-0.61 of the
 * time from 256 KiB (perf/RESULTS.md, session 13). For the shm transport's send slots the
 * better kind changed while jobs ran (1.56-1.65x the time with them at 64 KiB-1 MiB in one
 * stretch, 0.3-0.5x in another): there a picker measures both (core/ntpick.h). */
void braid_copy_shared(void *dst, const void *src, size_t n, int nt);

/* BRAID_DIRECT_NT_SLOTS=auto: whether this CPU takes streaming stores into shared slots by
 * default (x86-64 AMD; elsewhere not measured, so off). */
int braid_copy_shared_nt_default(void);

/* Which loop braid_copy_large runs ("avx2", "sse2" or "memcpy"). */
const char *braid_copy_isa(void);

#endif
