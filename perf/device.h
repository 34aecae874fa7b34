/* The braid perf tools' device-buffer mode (device.c). */
#ifndef BRAID_PERF_DEVICE_H
#define BRAID_PERF_DEVICE_H

#include "common.h"

/* Before the communicator exists: makes device local_rank % ndevices current. */
int perf_dev_select(int local_rank);
int perf_dev_setup(perf_backend_t *b, int mode);
void *perf_dev_alloc(perf_backend_t *b, size_t bytes);
void perf_dev_free(perf_backend_t *b, void *p);
int perf_dev_copy(perf_backend_t *b, void *dst, const void *src, size_t bytes);
/* --device 2: the stream the collectives are ordered on (NULL otherwise). */
void *perf_dev_stream(void);
/* --device 2: waits for the stream. */
int perf_dev_sync(void);

#endif
