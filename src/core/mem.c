/* braid_mem_alloc / braid_mem_free: host memory every rank of the host can map (as
 * ncclMemAlloc). Each allocation is a memfd (no name in /dev/shm, so a crash leaves nothing)
 * mapped shared; the process-wide table below lets the direct collectives (algos/direct.c)
 * recognise a buffer inside one and publish (pid, fd, offset) instead of copying it into their
 * segment: a peer maps the region through /proc/<pid>/fd/<fd> once and reads it in place. */
#include "core/mem.h"
#include "core/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef struct {
    char *base;
    size_t bytes; /* mapped (rounded to pages) */
    int fd;
    uint32_t id;
} region_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static region_t *regions;
static int nregions, cap;
static uint32_t next_id = 1;

braid_result_t braid_mem_alloc(void **ptr_p, size_t bytes)
{
    braid_clear_error();
    if (!ptr_p) return braid_set_error(BRAID_ERR_INVALID_ARG, "mem_alloc: ptr_p is NULL");
    if (bytes == 0) return braid_set_error(BRAID_ERR_INVALID_ARG, "mem_alloc: bytes is 0");
    long page = sysconf(_SC_PAGESIZE);
    size_t pg = page > 0 ? (size_t)page : 4096;
    if (bytes > SIZE_MAX - pg)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "mem_alloc: bytes=%zu is too large", bytes);
    size_t len = (bytes + pg - 1) / pg * pg;
    int fd = (int)syscall(SYS_memfd_create, "braid-mem", 1u /* MFD_CLOEXEC */);
    if (fd < 0) return braid_set_error(BRAID_ERR_SYSTEM, "mem_alloc: memfd_create failed: %m");
    if (ftruncate(fd, (off_t)len) != 0) {
        braid_result_t r = braid_set_error(BRAID_ERR_NOMEM,
                                           "mem_alloc: cannot size a region of %zu bytes: %m", len);
        close(fd);
        return r;
    }
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        braid_result_t r =
            braid_set_error(BRAID_ERR_NOMEM, "mem_alloc: mmap of %zu bytes failed: %m", len);
        close(fd);
        return r;
    }
    pthread_mutex_lock(&lock);
    if (nregions == cap) {
        int ncap = cap ? cap * 2 : 16;
        region_t *nr = realloc(regions, (size_t)ncap * sizeof(*nr));
        if (!nr) {
            pthread_mutex_unlock(&lock);
            munmap(m, len);
            close(fd);
            return braid_set_error(BRAID_ERR_NOMEM, "mem_alloc: out of memory for the table");
        }
        regions = nr;
        cap = ncap;
    }
    regions[nregions++] = (region_t){.base = m, .bytes = len, .fd = fd, .id = next_id++};
    pthread_mutex_unlock(&lock);
    *ptr_p = m;
    return BRAID_SUCCESS;
}

braid_result_t braid_mem_free(void *ptr)
{
    braid_clear_error();
    if (!ptr) return BRAID_SUCCESS; /* as free(NULL) */
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nregions; i++) {
        if (regions[i].base != ptr) continue;
        region_t r = regions[i];
        regions[i] = regions[--nregions];
        pthread_mutex_unlock(&lock);
        munmap(r.base, r.bytes);
        close(r.fd);
        return BRAID_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return braid_set_error(BRAID_ERR_INVALID_ARG,
                           "mem_free: ptr=%p was not returned by braid_mem_alloc (or was freed)",
                           ptr);
}

int braid_mem_find(const void *p, size_t len, braid_mem_ref_t *ref_p)
{
    uintptr_t a = (uintptr_t)p;
    int found = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nregions && !found; i++) {
        uintptr_t b = (uintptr_t)regions[i].base;
        if (a >= b && len <= regions[i].bytes && a - b <= regions[i].bytes - len) {
            ref_p->fd = regions[i].fd;
            ref_p->id = regions[i].id;
            ref_p->bytes = regions[i].bytes;
            ref_p->off = (uint64_t)(a - b);
            ref_p->ptr = p;
            found = 1;
        }
    }
    pthread_mutex_unlock(&lock);
    return found;
}
