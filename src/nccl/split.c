/* ncclCommSplit calls recorded in a group, run at its ncclGroupEnd (group.c). One thread may
 * split several ranks in one group, so each rank's splits need their own thread; and a rank
 * may split one parent several times in a group (rows and columns of a 2-D grid), which braid
 * takes one call at a time and in the same order on every rank: so one thread per parent runs
 * that parent's splits in call order. */
#include "shim.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    ncclComm_t parent;
    ncclComm_t *list; /* the parent's splits, in call order */
    size_t n;
    ncclResult_t refuse;
    pthread_t th;
    int started;
} job_t;

static void *job_main(void *arg)
{
    job_t *j = arg;
    for (size_t i = 0; i < j->n; i++)
        shim_split_run(j->list[i], j->refuse);
    return NULL;
}

ncclResult_t shim_splits_run(ncclComm_t *inits, size_t n, ncclResult_t refuse)
{
    size_t nsplit = 0;
    for (size_t i = 0; i < n; i++)
        nsplit += inits[i]->split_parent != NULL;
    if (!nsplit) return ncclSuccess;
    job_t *jobs = calloc(nsplit, sizeof(*jobs));
    ncclComm_t *lists = calloc(nsplit, sizeof(*lists));
    if (!jobs || !lists) {
        free(jobs);
        free(lists);
        for (size_t i = 0; i < n; i++)
            if (inits[i]->split_parent) shim_init_finish(inits[i], ncclSystemError);
        return shim_fail(NULL, ncclSystemError, "ncclGroupEnd: out of memory for the splits");
    }
    /* Group by parent, keeping the call order within each. */
    size_t njobs = 0, used = 0;
    for (size_t i = 0; i < n; i++) {
        ncclComm_t p = inits[i]->split_parent;
        if (!p) continue;
        size_t k = 0;
        while (k < njobs && jobs[k].parent != p)
            k++;
        if (k < njobs) continue; /* collected with the first split of p */
        jobs[k] = (job_t){.parent = p, .list = lists + used, .refuse = refuse};
        for (size_t m = i; m < n; m++)
            if (inits[m]->split_parent == p) jobs[k].list[jobs[k].n++] = inits[m];
        used += jobs[k].n;
        njobs++;
    }
    ncclResult_t res = ncclSuccess;
    if (njobs == 1) {
        job_main(&jobs[0]);
    } else {
        for (size_t k = 0; k < njobs; k++)
            jobs[k].started = pthread_create(&jobs[k].th, NULL, job_main, &jobs[k]) == 0;
        for (size_t k = 0; k < njobs; k++) {
            if (jobs[k].started) {
                pthread_join(jobs[k].th, NULL);
                continue;
            }
            for (size_t i = 0; i < jobs[k].n; i++)
                shim_init_finish(jobs[k].list[i], ncclSystemError);
            if (res == ncclSuccess)
                res = shim_fail(NULL, ncclSystemError, "ncclGroupEnd: cannot start a split thread");
        }
    }
    for (size_t k = 0; k < njobs && res == ncclSuccess && !refuse; k++)
        for (size_t i = 0; i < jobs[k].n && res == ncclSuccess; i++) {
            ncclComm_t c = jobs[k].list[i];
            int st = atomic_load(&c->state);
            if (st != ncclSuccess) {
                char msg[SHIM_MSG_BYTES];
                shim_comm_msg(c, msg);
                res = shim_fail(NULL, (ncclResult_t)st, "%s", msg);
            }
        }
    free(jobs);
    free(lists);
    return refuse ? refuse : res;
}
