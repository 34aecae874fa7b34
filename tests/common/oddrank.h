/* The harness of the suites in which one rank disagrees with the others (mismatch,
 * group_reject): rank n-1 is the odd one out; every case runs on shm and on tcp with 2 and 3
 * ranks (real processes, mp.h) under BRAID_TIMEOUT=20 and must end in BRAID_ERR_MISMATCH on
 * every rank, naming the calls, within 5 s, a quarter of the timeout (never a timeout, never
 * success everywhere). */
#ifndef BRAID_TEST_ODDRANK_H
#define BRAID_TEST_ODDRANK_H

#include "mp.h"

/* Runs fn(arg) as above (4 jobs: shm and tcp, 2 and 3 ranks, each given 60 s); returns how
 * many jobs failed, each named on stderr with its transport and ranks. BRAID_TRANSPORT and
 * BRAID_TIMEOUT are as before afterwards. */
int odd_run_all(mp_fn_t fn, void *arg);

/* A rank's end of a case: first is the result of its disagreeing call (or group end), and
 * first_msg braid_last_error() after it. If first is BRAID_SUCCESS (its own part was complete)
 * or again is set (it rejected its call), its next call, a barrier, gives the result. That
 * must be BRAID_ERR_MISMATCH with a message containing w1 and w2, within 5 s of t0
 * (proc_now_s). Prints the outcome on stderr; returns 0, or 1 after printing the failed check. */
int odd_expect_mismatch(braid_comm_t comm, int rank, int n, braid_result_t first,
                        const char *first_msg, int again, double t0, const char *w1,
                        const char *w2);

#endif
