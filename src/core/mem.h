/* The regions of braid_mem_alloc (core/mem.c): which of them holds a buffer. */
#ifndef BRAID_CORE_MEM_H
#define BRAID_CORE_MEM_H

#include "braid/braid.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int fd;          /* this process's memfd of the region */
    uint32_t id;     /* unique in the process for its life (never reused) */
    size_t bytes;    /* the region's mapped size */
    uint64_t off;    /* the buffer's offset in it */
    const void *ptr; /* the buffer looked up */
} braid_mem_ref_t;

/* 1 and *ref_p when [p, p + len) lies inside one region of braid_mem_alloc, else 0. */
int braid_mem_find(const void *p, size_t len, braid_mem_ref_t *ref_p);

#endif
