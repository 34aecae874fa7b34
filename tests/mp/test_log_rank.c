/* Log prefixes carry the rank of the communicator a line concerns, not of the communicator
 * created last: after a split that renumbers the ranks, an error on the world communicator is
 * logged with the world rank and one on the new communicator with the new rank; threads keep
 * their own rank (no shared variable written by one thread and read by another). */
#include "core/log.h"
#include "mp.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char logdir[64];

/* The rank in the prefix of the last line of this process's log that contains 'what'
 * ("host:pid [rank] braid ..."), or -100 if there is none. */
static int last_prefix_rank(const char *what)
{
    char path[128], line[2048];
    snprintf(path, sizeof(path), "%s/log.%d", logdir, (int)getpid());
    FILE *f = fopen(path, "r");
    if (!f) return -100;
    int rank = -100;
    while (fgets(line, sizeof(line), f)) {
        if (!strstr(line, what)) continue;
        const char *b = strchr(line, '[');
        if (b) rank = atoi(b + 1);
    }
    fclose(f);
    return rank;
}

static int split_logs(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    braid_comm_t sub = NULL;
    /* Two groups (even, odd), numbered in reverse: world rank 0 becomes the last of its group. */
    MP_OK(rank, braid_comm_split(comm, rank % 2, n - rank, &sub));
    int subrank = -1, subn = 0;
    MP_OK(rank, braid_comm_rank(sub, &subrank));
    MP_OK(rank, braid_comm_size(sub, &subn));
    MP_CHECK(rank, subrank == (subn - 1) - rank / 2, "sub rank %d", subrank);
    float x = (float)rank;
    /* An invalid op is refused (and logged at INFO) after the communicator is looked up. */
    for (int round = 0; round < 2; round++) {
        braid_result_t r = braid_allreduce(&x, &x, 1, BRAID_FLOAT32, (braid_redop_t)77, comm);
        MP_CHECK(rank, r == BRAID_ERR_INVALID_ARG, "%s", braid_strerror(r));
        int got = last_prefix_rank("error invalid argument");
        MP_CHECK(rank, got == rank, "world error logged as [%d], world rank %d", got, rank);
        r = braid_allreduce(&x, &x, 1, BRAID_FLOAT32, (braid_redop_t)77, sub);
        MP_CHECK(rank, r == BRAID_ERR_INVALID_ARG, "%s", braid_strerror(r));
        got = last_prefix_rank("error invalid argument");
        MP_CHECK(rank, got == subrank, "sub error logged as [%d], sub rank %d", got, subrank);
    }
    /* Valid calls on both still work. */
    MP_OK(rank, braid_allreduce(&x, &x, 1, BRAID_FLOAT32, BRAID_SUM, sub));
    MP_OK(rank, braid_allreduce(&x, &x, 1, BRAID_FLOAT32, BRAID_SUM, comm));
    MP_OK(rank, braid_comm_destroy(sub));
    return 0;
}

static void setup(void)
{
    snprintf(logdir, sizeof(logdir), "/tmp/braid-logrank-XXXXXX");
    cr_assert(mkdtemp(logdir));
    char file[128];
    snprintf(file, sizeof(file), "%s/log.%%p", logdir);
    setenv("BRAID_DEBUG", "INFO", 1);
    setenv("BRAID_DEBUG_FILE", file, 1);
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", logdir);
    if (system(cmd) != 0) fprintf(stderr, "%s failed\n", cmd);
}

TestSuite(logrank, .timeout = 60, .init = setup, .fini = teardown);

Test(logrank, prefix_is_the_communicators_rank_after_split_shm)
{
    setenv("BRAID_TRANSPORT", "shm", 1);
    cr_assert_eq(mp_run(4, split_logs, NULL, 40), 0);
}

Test(logrank, prefix_is_the_communicators_rank_after_split_tcp)
{
    setenv("BRAID_TRANSPORT", "tcp", 1);
    cr_assert_eq(mp_run(3, split_logs, NULL, 40), 0);
}

static void *thread_rank(void *arg)
{
    int want = (int)(intptr_t)arg, *bad = calloc(1, sizeof(int));
    braid_log_set_rank(want);
    for (int i = 0; i < 20000; i++)
        if (braid_log_rank() != want) (*bad)++;
    return bad;
}

/* Threads that set different ranks each see their own, concurrently. */
Test(logrank, per_thread_rank)
{
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, thread_rank, (void *)(intptr_t)(10 + i)), 0);
    for (int i = 0; i < 4; i++) {
        void *bad;
        pthread_join(t[i], &bad);
        cr_assert_eq(*(int *)bad, 0, "thread %d saw another thread's rank", i);
        free(bad);
    }
    /* A thread that never set one shows the process's first rank (10 .. 13, whichever won). */
    int r = braid_log_rank();
    cr_assert(r >= 10 && r <= 13, "%d", r);
}
