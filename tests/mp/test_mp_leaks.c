/* The multi-process harness's leak check (tests/common/leaks.h): a rank that leaks fails its
 * test in ASan builds, where LeakSanitizer cannot run at the ranks' _exit. */
#include "leaks.h"
#include "mp.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
static void *volatile last; /* the leaked block's address, dropped before the check */

static __attribute__((noinline)) void leak_a_block(size_t bytes)
{
    char *p = malloc(bytes);
    if (p) memset(p, 0x5a, bytes);
    last = p;
    last = NULL;
}

static int leak_on_rank1(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    (void)arg;
    float x = 1.0f;
    MP_CHECK(rank, braid_allreduce(&x, &x, 1, BRAID_FLOAT32, BRAID_SUM, comm) == BRAID_SUCCESS,
             "allreduce: %s", braid_last_error());
    if (rank == 1) {
        leak_a_block(4096);
        /* the harness's leak report goes nowhere: tests/run.sh fails on any report in the log */
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) dup2(null, 2);
    }
    return 0;
}

static int no_leak(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    float x = 1.0f;
    MP_CHECK(rank, braid_allreduce(&x, &x, 1, BRAID_FLOAT32, BRAID_SUM, comm) == BRAID_SUCCESS,
             "allreduce: %s", braid_last_error());
    MP_CHECK(rank, x == (float)n, "sum %g, want %d", (double)x, n);
    return 0;
}

#endif

Test(mp_leaks, a_rank_that_leaks_fails_and_the_others_pass, .timeout = 120)
{
#if !defined(__SANITIZE_ADDRESS__)
    cr_skip_test("LeakSanitizer runs in ASan builds only");
#else
    mp_job_t job;
    mp_start(&job, 3, leak_on_rank1, NULL);
    mp_wait(&job, 60.0);
    for (int r = 0; r < 3; r++) {
        int st = job.status[r];
        int want = r == 1 ? MP_EXIT_LEAKS : 0; /* the leak, not another failure */
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == want,
                  "rank %d exit status %#x: want exit %d (only rank 1 leaked)", r, st, want);
    }
    cr_expect_eq(mp_run(3, no_leak, NULL, 60.0), 0, "ranks that leak nothing pass");
#endif
}
