/* CUDA on a machine without a GPU (suite "cuda"): the library (built with or without CUDA)
 * loads and runs host collectives; the stream-ordered forms answer BRAID_ERR_UNSUPPORTED
 * naming the reason; device buffers are rejected with a message naming the buffer. Device
 * buffers are simulated with the test classifier hook (braid_cuda_test_set_classifier): the
 * argument checks are what is tested here, cudaPointerGetAttributes itself only runs on a GPU
 * (tests/gpu/run.sh). On a machine with a GPU the no-device cases skip with the reason. */
#include "braid/braid.h"
#include "core/comm.h"
#include "core/log.h"
#include "cuda/cuda.h"

#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A fake device arena: pointers inside it are "device 1" memory, everything else host. */
static char fake_dev[4096];
static int fake_classify(const void *p)
{
    uintptr_t x = (uintptr_t)p, b = (uintptr_t)fake_dev;
    return x >= b && x < b + sizeof(fake_dev) ? 1 : -1;
}

static braid_comm_t one_rank(void)
{
    braid_unique_id_t id;
    braid_comm_t c = NULL;
    cr_assert_eq(braid_get_unique_id(&id), BRAID_SUCCESS);
    cr_assert_eq(braid_comm_init_rank(&c, 1, id, 0), BRAID_SUCCESS, "%s", braid_last_error());
    return c;
}

Test(cuda, host_collectives_run_in_a_cuda_build_without_a_gpu, .timeout = 30)
{
    const char *why = NULL;
    int n = braid_cuda_ndevices(&why);
    cr_log_info("built with CUDA: %d, devices: %d (%s)", braid_cuda_built(), n, why);
    cr_assert_eq(braid_cuda_device_count(), n);
    braid_comm_t c = one_rank();
    if (n == 0) cr_assert_eq(c->cuda_dev, -1);
    int32_t in[5] = {3, -1, 7, 100, -9}, out[5] = {0};
    cr_assert_eq(braid_allreduce(in, out, 5, BRAID_INT32, BRAID_SUM, c), BRAID_SUCCESS);
    cr_assert_arr_eq(in, out, sizeof(in));
    cr_assert_eq(braid_comm_destroy(c), BRAID_SUCCESS);
}

Test(cuda, stream_forms_without_a_device_are_unsupported, .timeout = 30)
{
    const char *why = NULL;
    if (braid_cuda_ndevices(&why) > 0) cr_skip_test("this machine has a CUDA device (%s)", why);
    braid_comm_t c = one_rank();
    float in[3] = {1.5f, 2, 3}, out[3];
    cr_assert_eq(braid_allreduce_stream(in, out, 3, BRAID_FLOAT32, BRAID_SUM, c, NULL),
                 BRAID_ERR_UNSUPPORTED);
    cr_assert(strstr(braid_last_error(), "allreduce_stream: this communicator has no CUDA device"),
              "%s", braid_last_error());
    cr_assert(strstr(braid_last_error(), braid_cuda_built() ? "CUDA device" : "without CUDA"), "%s",
              braid_last_error());
    cr_assert_eq(braid_broadcast_stream(in, out, 3, BRAID_FLOAT32, 0, c, NULL),
                 BRAID_ERR_UNSUPPORTED);
    cr_assert_eq(braid_reduce_stream(in, out, 3, BRAID_FLOAT32, BRAID_MAX, 0, c, NULL),
                 BRAID_ERR_UNSUPPORTED);
    cr_assert_eq(braid_reduce_scatter_stream(in, out, 3, BRAID_FLOAT32, BRAID_MAX, c, NULL),
                 BRAID_ERR_UNSUPPORTED);
    cr_assert_eq(braid_allgather_stream(in, out, 3, BRAID_FLOAT32, c, NULL), BRAID_ERR_UNSUPPORTED);
    /* A bad communicator is named before anything else. */
    cr_assert_eq(braid_allreduce_stream(in, out, 3, BRAID_FLOAT32, BRAID_SUM, NULL, NULL),
                 BRAID_ERR_INVALID_ARG);
    /* The communicator still works for host calls. */
    cr_assert_eq(braid_allreduce(in, out, 3, BRAID_FLOAT32, BRAID_SUM, c), BRAID_SUCCESS);
    cr_assert_eq(out[0], 1.5f);
    cr_assert_eq(braid_comm_destroy(c), BRAID_SUCCESS);
}

Test(cuda, device_buffers_without_a_device_name_the_buffer, .timeout = 30)
{
    braid_comm_t c = one_rank();
    if (c->cuda_dev >= 0) cr_skip_test("this communicator has a CUDA device");
    braid_cuda_test_set_classifier(fake_classify);
    float host[4] = {1, 2, 3, 4};
    cr_assert_eq(braid_allreduce(fake_dev, host, 4, BRAID_FLOAT32, BRAID_SUM, c),
                 BRAID_ERR_UNSUPPORTED);
    cr_assert(strstr(braid_last_error(), "allreduce: sendbuf is CUDA device memory (device 1) "
                                         "but this communicator has no CUDA device"),
              "%s", braid_last_error());
    cr_assert_eq(braid_allgather(host, fake_dev + 64, 1, BRAID_FLOAT32, c), BRAID_ERR_UNSUPPORTED);
    cr_assert(strstr(braid_last_error(), "allgather: recvbuf is CUDA device memory"), "%s",
              braid_last_error());
    braid_request_t r = NULL;
    cr_assert_eq(braid_iallreduce(fake_dev, fake_dev, 4, BRAID_FLOAT32, BRAID_SUM, c, &r),
                 BRAID_ERR_UNSUPPORTED);
    cr_assert_null(r);
    /* Broadcast on a non-root rank would not read sendbuf: only buffers the call uses count
     * (here the one rank is the root, so sendbuf is used). */
    cr_assert_eq(braid_broadcast(fake_dev, host, 4, BRAID_FLOAT32, 0, c), BRAID_ERR_UNSUPPORTED);
    /* Host buffers are unaffected, and the error was not sticky. */
    float out[4];
    cr_assert_eq(braid_allreduce(host, out, 4, BRAID_FLOAT32, BRAID_SUM, c), BRAID_SUCCESS);
    cr_assert_eq(out[3], 4.0f);
    braid_cuda_test_set_classifier(NULL);
    cr_assert_eq(braid_comm_destroy(c), BRAID_SUCCESS);
}

/* Where braid has no device of its own (a build without CUDA, or BRAID_CUDA=0 as here), the
 * program may still use CUDA: its driver library is loaded, and a device buffer must be refused
 * with a message rather than read as host memory. The driver is a stand-in
 * (tests/helpers/fake_libcuda.c) loaded by path, as a program's CUDA runtime loads libcuda.so.1;
 * braid finds it by its soname and asks it about each buffer (src/cuda/drvptr.c). */
Test(cuda, device_buffers_of_the_programs_own_cuda_are_refused, .timeout = 30)
{
    setenv("BRAID_CUDA", "0", 1);
    void *drv = dlopen(BRAID_FAKE_LIBCUDA, RTLD_NOW | RTLD_LOCAL);
    cr_assert_not_null(drv, "%s", dlerror());
    void *by_name = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (by_name != drv) cr_skip_test("another libcuda.so.1 is loaded in this process");
    dlclose(by_name);
    char *arena = dlsym(drv, "braid_fake_cuda_arena");
    int *calls = dlsym(drv, "braid_fake_cuda_calls");
    cr_assert(arena && calls);
    char *dev = arena, *managed = arena + 1024, *pinned = arena + 2048;

    braid_comm_t c = one_rank();
    cr_assert_eq(c->cuda_dev, -1);
    float host[4] = {1, 2, 3, 4}, out[4] = {0};
    cr_assert_eq(braid_allreduce(dev, out, 4, BRAID_FLOAT32, BRAID_SUM, c), BRAID_ERR_UNSUPPORTED);
    cr_assert(strstr(braid_last_error(), "allreduce: sendbuf is CUDA device memory (device 3) "
                                         "but this communicator has no CUDA device"),
              "%s", braid_last_error());
    cr_assert_eq(braid_allreduce(host, managed + 4, 4, BRAID_FLOAT32, BRAID_SUM, c),
                 BRAID_ERR_UNSUPPORTED);
    cr_assert(strstr(braid_last_error(), "allreduce: recvbuf is CUDA device memory (device 3)"),
              "%s", braid_last_error());
    cr_assert_eq(braid_send(dev + 8, 2, BRAID_FLOAT32, 0, c), BRAID_ERR_UNSUPPORTED);
    cr_assert(strstr(braid_last_error(), "CUDA device memory (device 3)"), "%s",
              braid_last_error());
    /* Pinned host memory is host memory, and so is memory the driver does not know. */
    memcpy(pinned, host, sizeof(host));
    cr_assert_eq(braid_allreduce(pinned, out, 4, BRAID_FLOAT32, BRAID_SUM, c), BRAID_SUCCESS, "%s",
                 braid_last_error());
    cr_assert(out[0] == 1.0f && out[3] == 4.0f);
    int before = *calls;
    cr_assert_eq(braid_allreduce(host, out, 4, BRAID_FLOAT32, BRAID_MAX, c), BRAID_SUCCESS);
    cr_assert_gt(*calls, before, "the driver was asked about host buffers too");
    /* The program's device memory is not braid's to free. */
    cr_assert_eq(braid_cuda_mem_free(dev), BRAID_ERR_INVALID_ARG);
    cr_assert(strstr(braid_last_error(), "is not CUDA device memory"), "%s", braid_last_error());
    cr_assert_eq(braid_comm_destroy(c), BRAID_SUCCESS);
}

/* With a device (simulated: the communicator's device set by hand, the classifier saying
 * "device 1"): buffers of another device and host/device mixes are bad arguments. */
Test(cuda, device_buffers_of_another_device_or_mixed_are_rejected, .timeout = 30)
{
    braid_comm_t c = one_rank();
    int saved = c->cuda_dev;
    c->cuda_dev = 0;
    braid_cuda_test_set_classifier(fake_classify);
    float host[4] = {1, 2, 3, 4};
    cr_assert_eq(braid_allreduce(fake_dev, fake_dev, 4, BRAID_FLOAT32, BRAID_SUM, c),
                 BRAID_ERR_INVALID_ARG);
    cr_assert(strstr(braid_last_error(), "sendbuf is memory of CUDA device 1 but this "
                                         "communicator uses device 0"),
              "%s", braid_last_error());
    cr_assert_eq(braid_allreduce(host, fake_dev, 4, BRAID_FLOAT32, BRAID_SUM, c),
                 BRAID_ERR_INVALID_ARG);
    cr_assert(strstr(braid_last_error(), "sendbuf is host memory and recvbuf device memory"), "%s",
              braid_last_error());
    cr_assert_eq(braid_reduce_scatter(fake_dev, host, 4, BRAID_FLOAT32, BRAID_MIN, c),
                 BRAID_ERR_INVALID_ARG);
    cr_assert(strstr(braid_last_error(), "reduce_scatter: sendbuf is device memory and recvbuf "
                                         "host memory"),
              "%s", braid_last_error());
    /* Other argument errors still come first (the device check is the last one). */
    cr_assert_eq(braid_allreduce(fake_dev, fake_dev, 4, (braid_datatype_t)99, BRAID_SUM, c),
                 BRAID_ERR_INVALID_ARG);
    cr_assert(strstr(braid_last_error(), "dtype=99"), "%s", braid_last_error());
    braid_cuda_test_set_classifier(NULL);
    c->cuda_dev = saved;
    cr_assert_eq(braid_comm_destroy(c), BRAID_SUCCESS);
}

/* The device engine's reductions load whole elements: device buffers of allreduce, reduce and
 * reduce_scatter not aligned to their element size are refused, naming the buffer, where the
 * engine runs the call (forced here with braid_cuda_test_set_engine_runs). A call staged
 * through the host takes any address (as NCCL), and so do copies. */
Test(cuda, misaligned_device_buffers_of_reductions_are_rejected, .timeout = 30)
{
    braid_comm_t c = one_rank();
    int saved = c->cuda_dev;
    c->cuda_dev = 1; /* the fake arena's device */
    braid_cuda_test_set_classifier(fake_classify);
    char *al = fake_dev + (16 - (uintptr_t)fake_dev % 16) % 16; /* 16-byte aligned */
    /* No engine state here (no real device): the call is staged, so it passes the check (what
     * follows fails: no real device). */
    cr_assert_eq(braid_cuda_engine_will_run(c, &(braid_op_args_t){.coll = BRAID_COLL_ALLREDUCE,
                                                                  .dtype = BRAID_FLOAT32,
                                                                  .count = 4}),
                 0);
    braid_allreduce(al + 1, al + 1, 4, BRAID_FLOAT32, BRAID_SUM, c);
    cr_assert(!strstr(braid_last_error(), "aligned"), "staged: %s", braid_last_error());
    braid_cuda_test_set_engine_runs(0);
    braid_reduce(al, al + 1026, 4, BRAID_FLOAT64, BRAID_MAX, 0, c);
    cr_assert(!strstr(braid_last_error(), "aligned"), "staged: %s", braid_last_error());
    /* The engine runs the calls: refused. */
    braid_cuda_test_set_engine_runs(1);
    cr_assert_eq(braid_allreduce(al + 1, al + 1, 4, BRAID_FLOAT32, BRAID_SUM, c),
                 BRAID_ERR_INVALID_ARG);
    cr_assert(strstr(braid_last_error(), "allreduce: sendbuf=") &&
                  strstr(braid_last_error(), "not aligned to its 4-byte float32 elements") &&
                  strstr(braid_last_error(), "the device engine, which runs this call"),
              "%s", braid_last_error());
    cr_assert_eq(braid_reduce(al, al + 1026, 4, BRAID_FLOAT64, BRAID_MAX, 0, c),
                 BRAID_ERR_INVALID_ARG);
    cr_assert(strstr(braid_last_error(), "reduce: recvbuf=") &&
                  strstr(braid_last_error(), "8-byte"),
              "%s", braid_last_error());
    cr_assert_eq(braid_reduce_scatter(al + 6, al + 2049, 4, BRAID_BFLOAT16, BRAID_SUM, c),
                 BRAID_ERR_INVALID_ARG); /* al + 6 is 2-aligned: the recvbuf is named */
    cr_assert(strstr(braid_last_error(), "reduce_scatter: recvbuf=") &&
                  strstr(braid_last_error(), "2-byte bfloat16"),
              "%s", braid_last_error());
    /* Aligned reductions, single-byte elements and copies pass the check (what follows fails
     * here: no real device). */
    char *ok_cases[4];
    braid_allreduce(al + 8, al + 1024, 4, BRAID_FLOAT64, BRAID_SUM, c);
    ok_cases[0] = strdup(braid_last_error());
    braid_allreduce(al + 1, al + 1025, 4, BRAID_UINT8, BRAID_SUM, c);
    ok_cases[1] = strdup(braid_last_error());
    braid_broadcast(al + 1, al + 1025, 4, BRAID_FLOAT32, 0, c);
    ok_cases[2] = strdup(braid_last_error());
    braid_allgather(al + 3, al + 1027, 4, BRAID_INT64, c);
    ok_cases[3] = strdup(braid_last_error());
    for (int i = 0; i < 4; i++) {
        cr_assert(!strstr(ok_cases[i], "aligned"), "case %d: %s", i, ok_cases[i]);
        free(ok_cases[i]);
    }
    braid_cuda_test_set_engine_runs(-1);
    braid_cuda_test_set_classifier(NULL);
    c->cuda_dev = saved;
    cr_assert_eq(braid_comm_destroy(c), BRAID_SUCCESS);
}

Test(cuda, braid_cuda_0_keeps_cuda_untouched, .timeout = 30)
{
    setenv("BRAID_CUDA", "0", 1);
    const char *why = NULL;
    cr_assert_eq(braid_cuda_ndevices(&why), 0);
    cr_assert(strstr(why, braid_cuda_built() ? "disabled by BRAID_CUDA=0" : "without CUDA"), "%s",
              why);
    braid_comm_t c = one_rank();
    cr_assert_eq(c->cuda_dev, -1);
    cr_assert_eq(braid_comm_destroy(c), BRAID_SUCCESS);
}

Test(cuda, mem_alloc_checks_arguments_and_needs_a_device, .timeout = 30)
{
    void *p = (void *)&p;
    cr_assert_eq(braid_cuda_mem_alloc(NULL, 64), BRAID_ERR_INVALID_ARG);
    cr_assert(strstr(braid_last_error(), "ptr_p is NULL"), "%s", braid_last_error());
    cr_assert_eq(braid_cuda_mem_alloc(&p, 0), BRAID_ERR_INVALID_ARG);
    cr_assert(strstr(braid_last_error(), "bytes is 0"), "%s", braid_last_error());
    cr_assert_null(p, "a failed allocation leaves NULL");
    cr_assert_eq(braid_cuda_mem_free(NULL), BRAID_SUCCESS);
    /* host memory is not braid_cuda_mem_alloc's */
    int host;
    cr_assert_eq(braid_cuda_mem_free(&host), BRAID_ERR_INVALID_ARG);
    cr_assert(strstr(braid_last_error(), "is not CUDA device memory"), "%s", braid_last_error());
    const char *why = NULL;
    if (braid_cuda_ndevices(&why) > 0) {
        /* on a GPU (tests/gpu/run.sh runs nccl-tests, which allocate with it) */
        cr_assert_eq(braid_cuda_mem_alloc(&p, 1 << 20), BRAID_SUCCESS, "%s", braid_last_error());
        cr_assert_geq(braid_cuda_ptr_device(p), 0);
        cr_assert_eq(braid_cuda_mem_free(p), BRAID_SUCCESS);
        return;
    }
    cr_assert_eq(braid_cuda_mem_alloc(&p, 64), BRAID_ERR_UNSUPPORTED);
    cr_assert(strstr(braid_last_error(), "no CUDA device"), "%s", braid_last_error());
    cr_assert(strstr(braid_last_error(), why), "the reason (%s) is named: %s", why,
              braid_last_error());
    cr_assert_null(p);
}

/* braid_comm_stream_wait: a communicator without a device has no stream work to wait for; a
 * bad communicator is an argument error. (On a GPU, the drop-in's calls use it on every
 * stream: tests/gpu/run.sh's nccl-tests.) */
Test(cuda, comm_stream_wait_without_a_device_returns_at_once, .timeout = 30)
{
    braid_comm_t c = one_rank();
    if (c->cuda_dev >= 0) cr_skip_test("this communicator has a CUDA device");
    cr_assert_eq(braid_comm_stream_wait(c, NULL), BRAID_SUCCESS, "%s", braid_last_error());
    cr_assert_eq(braid_comm_stream_wait(c, (braid_stream_t)(uintptr_t)0x1234), BRAID_SUCCESS);
    cr_assert_eq(braid_comm_stream_wait(NULL, NULL), BRAID_ERR_INVALID_ARG);
    cr_assert(strstr(braid_last_error(), "comm"), "%s", braid_last_error());
    cr_assert_eq(braid_comm_destroy(c), BRAID_SUCCESS);
}

/* The first CUDA call sets CUDA_DEVICE_MAX_CONNECTIONS=32 (hardware work queues for the held
 * streams of several communicators, src/cuda/device.c) unless the user set it, where NVIDIA's
 * device nodes exist (here pretended through the hook). */
Test(cuda, first_cuda_call_sets_max_connections_unless_set, .timeout = 30)
{
    if (!braid_cuda_built()) cr_skip_test("built without CUDA");
    unsetenv("BRAID_CUDA");
    unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
    braid_cuda_test_set_driver_present(1);
    (void)braid_cuda_ndevices(NULL);
    const char *v = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    cr_assert(v && !strcmp(v, "32"), "CUDA_DEVICE_MAX_CONNECTIONS=%s", v ? v : "(unset)");
}

Test(cuda, a_max_connections_the_user_set_stays, .timeout = 30)
{
    if (!braid_cuda_built()) cr_skip_test("built without CUDA");
    unsetenv("BRAID_CUDA");
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1", 1);
    braid_cuda_test_set_driver_present(1);
    (void)braid_cuda_ndevices(NULL);
    cr_assert_str_eq(getenv("CUDA_DEVICE_MAX_CONNECTIONS"), "1");
}

/* Without NVIDIA's device nodes the environment is left alone: setenv could move it under
 * another thread's getenv (a process that inits communicators from several threads). */
Test(cuda, no_driver_leaves_the_environment_alone, .timeout = 30)
{
    if (!braid_cuda_built()) cr_skip_test("built without CUDA");
    if (access("/dev/nvidiactl", F_OK) == 0 || access("/proc/driver/nvidia", F_OK) == 0 ||
        access("/dev/dxg", F_OK) == 0)
        cr_skip_test("this machine has NVIDIA's driver");
    unsetenv("BRAID_CUDA");
    unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
    (void)braid_cuda_ndevices(NULL);
    cr_assert_null(getenv("CUDA_DEVICE_MAX_CONNECTIONS"), "set to %s",
                   getenv("CUDA_DEVICE_MAX_CONNECTIONS"));
}
