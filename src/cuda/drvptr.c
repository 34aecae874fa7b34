/* Device buffers where braid itself does not use CUDA (a build without it, BRAID_CUDA=0, or
 * no device visible to braid's runtime): another part of the program may still use CUDA, and
 * a device pointer read as host memory would crash. NVIDIA's driver library is then loaded in
 * the process, and its cuPointerGetAttribute tells device memory from host memory, so such a
 * buffer gets a clear error (coll_dev.c) instead.
 *
 * The lookup is dlopen("libcuda.so.1", RTLD_NOLOAD) at communicator init: it never loads the
 * driver, and a process that has not loaded it has no device memory. Once found, the entry
 * point is kept for the life of the process (the driver is never unloaded). */
#include "cuda/cuda.h"
#include "core/log.h"

#include <dlfcn.h>
#include <stdint.h>

/* The driver API's values (cuda.h), fixed since CUDA 4 (the ordinal since 9.2). */
enum {
    DRV_ATTR_MEMORY_TYPE = 2,
    DRV_ATTR_DEVICE_ORDINAL = 9,
    DRV_MEMORYTYPE_DEVICE = 2,
    DRV_MEMORYTYPE_UNIFIED = 4,
};
typedef int (*drv_get_attr_fn)(void *data, int attribute, unsigned long long ptr);

static drv_get_attr_fn _Atomic drv_get_attr;

void braid_cuda_drv_probe(void)
{
    if (atomic_load(&drv_get_attr)) return;
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (!h) return;
    drv_get_attr_fn fn;
    *(void **)&fn = dlsym(h, "cuPointerGetAttribute");
    if (!fn) {
        dlclose(h);
        return;
    }
    /* h stays open: the entry point is used for the rest of the process. */
    atomic_store(&drv_get_attr, fn);
    braid_debug(INIT, "cuda: the program has the CUDA driver loaded; its device buffers are "
                      "told from host buffers");
}

int braid_cuda_drv_ptr_device(const void *p)
{
    drv_get_attr_fn fn = atomic_load_explicit(&drv_get_attr, memory_order_acquire);
    if (!fn || !p) return -1;
    unsigned int type = 0;
    /* Host memory unknown to CUDA, an uninitialised driver or the stub library: an error. */
    if (fn(&type, DRV_ATTR_MEMORY_TYPE, (unsigned long long)(uintptr_t)p) != 0) return -1;
    if (type != DRV_MEMORYTYPE_DEVICE && type != DRV_MEMORYTYPE_UNIFIED) return -1;
    int ordinal = 0;
    if (fn(&ordinal, DRV_ATTR_DEVICE_ORDINAL, (unsigned long long)(uintptr_t)p) != 0 || ordinal < 0)
        ordinal = 0;
    return ordinal;
}
