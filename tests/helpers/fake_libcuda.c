/* A stand-in for NVIDIA's driver library (soname libcuda.so.1) with one entry point,
 * cuPointerGetAttribute, for the test that device buffers of a program's own CUDA are refused
 * where braid has no device (tests/unit/test_cuda.c). Its arena plays the program's memory:
 * the first KiB device memory of device 3, the second managed memory of device 3, the third
 * pinned host memory; every other address is unknown to "CUDA" (an error, as the driver
 * answers for pageable host memory). Built into build/tests/fakecuda, a folder on no
 * library path: only the test loads it, by its full path. */
#include <stdint.h>
#include <string.h>

char braid_fake_cuda_arena[3072];
int braid_fake_cuda_calls;

int cuPointerGetAttribute(void *data, int attribute, unsigned long long ptr);
int cuPointerGetAttribute(void *data, int attribute, unsigned long long ptr)
{
    uintptr_t b = (uintptr_t)braid_fake_cuda_arena, x = (uintptr_t)ptr;
    braid_fake_cuda_calls++;
    if (x < b || x >= b + sizeof(braid_fake_cuda_arena)) return 1; /* CUDA_ERROR_INVALID_VALUE */
    size_t part = (x - b) / 1024;
    if (attribute == 2) { /* CU_POINTER_ATTRIBUTE_MEMORY_TYPE */
        unsigned int type = part == 0 ? 2u : part == 1 ? 4u : 1u; /* device, unified, host */
        memcpy(data, &type, sizeof(type));
        return 0;
    }
    if (attribute == 9) { /* CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL */
        int ordinal = part < 2 ? 3 : -1;
        memcpy(data, &ordinal, sizeof(ordinal));
        return 0;
    }
    return 1;
}
