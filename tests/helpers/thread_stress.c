/* Exercises braid's threads for ThreadSanitizer (Criterion cannot run under TSan): on 2 forked
 * ranks, non-blocking all-reduces run on the worker thread while the caller tests/waits and a
 * second thread polls the communicator's state; then an abort from another thread interrupts
 * a blocked call. Exits 0 when every result is right; TSan reports races on stderr (and makes
 * the exit status non-zero with TSAN_OPTIONS=exitcode=66, its default). */
#include "braid/braid.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static atomic_int stop_poll;

static void *poller(void *arg)
{
    braid_comm_t comm = arg;
    while (!atomic_load(&stop_poll)) {
        braid_result_t err;
        const char *msg;
        int r;
        braid_comm_get_error(comm, &err, &msg);
        braid_comm_rank(comm, &r);
        usleep(100);
    }
    return NULL;
}

static void *aborter(void *arg)
{
    usleep(200 * 1000);
    braid_comm_abort(arg);
    return NULL;
}

static int rank_main(int rank, braid_unique_id_t id)
{
    braid_comm_t comm;
    if (braid_comm_init_rank(&comm, 2, id, rank)) {
        fprintf(stderr, "init: %s\n", braid_last_error());
        return 1;
    }
    pthread_t pt;
    pthread_create(&pt, NULL, poller, comm);
    enum { K = 8, N = 5000 };
    float *bufs[K];
    braid_request_t reqs[K];
    int bad = 0;
    for (int round = 0; round < 20 && !bad; round++) {
        for (int k = 0; k < K; k++) {
            bufs[k] = malloc(N * sizeof(float));
            for (int i = 0; i < N; i++)
                bufs[k][i] = (float)(rank + i + k);
            if (braid_iallreduce(bufs[k], bufs[k], N, BRAID_FLOAT32, BRAID_SUM, comm, &reqs[k]))
                bad = 1;
        }
        for (int k = 0; k < K; k++) {
            int done = 0;
            while (!done && !bad)
                if (braid_test(reqs[k], &done)) bad = 1;
            for (int i = 0; i < N && !bad; i++)
                if (bufs[k][i] != (float)(1 + 2 * (i + k))) bad = 1;
            free(bufs[k]);
        }
    }
    atomic_store(&stop_poll, 1);
    pthread_join(pt, NULL);
    /* Abort from another thread while rank 0 is blocked (rank 1 does not call). */
    if (rank == 0) {
        pthread_t at;
        pthread_create(&at, NULL, aborter, comm);
        float x = 1;
        braid_result_t r = braid_allreduce(&x, &x, 1, BRAID_FLOAT32, BRAID_SUM, comm);
        pthread_join(at, NULL);
        if (r != BRAID_ERR_ABORTED) bad = 1;
    } else {
        usleep(600 * 1000);
    }
    braid_comm_destroy(comm);
    if (bad) fprintf(stderr, "rank %d: wrong result or error: %s\n", rank, braid_last_error());
    return bad;
}

int main(void)
{
    int fd[2];
    if (pipe(fd)) return 2;
    pid_t kids[2];
    for (int r = 0; r < 2; r++) {
        kids[r] = fork();
        if (kids[r] == 0) {
            braid_unique_id_t id;
            if (r == 0) {
                if (braid_get_unique_id(&id)) _exit(2);
                if (write(fd[1], &id, sizeof(id)) != sizeof(id)) _exit(2);
            } else if (read(fd[0], &id, sizeof(id)) != sizeof(id)) {
                _exit(2);
            }
            _exit(rank_main(r, id));
        }
    }
    int rc = 0;
    for (int r = 0; r < 2; r++) {
        int st;
        waitpid(kids[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st)) rc = 1;
    }
    printf("thread_stress: %s\n", rc ? "FAILED" : "ok");
    return rc;
}
