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
/* Loads the kernel's module now (cudaFuncGetAttributes). CUDA loads modules lazily by default
 * (CUDA_MODULE_LOADING=LAZY since 12.2) at a kernel's first launch, and loading synchronises
 * the context: a first launch on the worker while a stream-ordered call holds the user's
 * stream would wait for that stream, which waits for the launch. Returns a cudaError_t. */
int braid_cuda_engine_preload(void);

#ifdef __cplusplus
}
#endif

#endif
