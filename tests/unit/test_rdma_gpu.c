/* The GPUDirect RDMA hook of the rdma transport (src/transport/rdma_mr.c, suite "rdma"): it
 * must refuse device memory with BRAID_ERR_UNSUPPORTED and a clear message, never hand out a
 * fake registration. */
#include "core/log.h"
#include "transport/rdma.h"

#include <criterion/criterion.h>
#include <string.h>

Test(rdma, gpudirect_hook_refuses_clearly)
{
#if BRAID_HAVE_VERBS
    static char buf[4096];
    struct ibv_mr *mr = (struct ibv_mr *)buf; /* must stay untouched (no fake registration) */
    braid_result_t r = braid_rdma_reg_device_mem(NULL, buf, sizeof(buf), 0, &mr);
    cr_expect_eq(r, BRAID_ERR_UNSUPPORTED);
    cr_expect_eq((void *)mr, (void *)buf);
    const char *m = braid_last_error();
    cr_expect(strstr(m, "GPUDirect") && strstr(m, "not supported yet") && strstr(m, "4096 bytes"),
              "message: %s", m);
#else
    cr_skip_test("the rdma transport is not built");
#endif
}
