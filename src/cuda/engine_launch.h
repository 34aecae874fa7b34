/* The device engine's kernel launcher (engine.cu), callable from C. */
#ifndef BRAID_CUDA_ENGINE_LAUNCH_H
#define BRAID_CUDA_ENGINE_LAUNCH_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Launches one block of `threads` per channel over chans (nchannels braid_dev_chan_t in device
 * memory) on stream; each block runs its channel until done or a wait polled budget times.
 * Returns a cudaError_t (0 = launched). */
int braid_cuda_engine_launch(void *chans, int nchannels, int threads, uint64_t budget,
                             void *stream);

#ifdef __cplusplus
}
#endif

#endif
