/* ncclCommSplit: braid's split as NCCL's (nccl_split), run at the call or, inside a group, at
 * its ncclGroupEnd (group.c). One thread may split several ranks in one group, so each rank's
 * splits need their own thread; and a rank may split one parent several times in a group (rows
 * and columns of a 2-D grid), which braid takes one call at a time and in the same order on every
 * rank: so one thread per parent runs that parent's splits in call order (shim_splits_run). */
#include "shim.h"

#include <stdlib.h>
#include <string.h>

/* braid_comm_split as NCCL's split: NCCL takes every color but NCCL_SPLIT_NOCOLOR as a color
 * (commGetSplitInfo compares the values as they are, so -2 is one), braid takes every negative
 * one as no color. So the ranks first gather their colors over the parent and each splits on the
 * lowest parent rank that passed its color (one non-negative braid color per NCCL color); braid
 * orders the new ranks by (key, parent rank), as NCCL does. refuse: this rank's split failed its
 * checks: it still takes its part in the gather, then asks braid for a split braid refuses
 * (newcomm NULL), so that the peers' splits fail at once naming the refusal instead of waiting
 * for this rank. Returns braid's result; *out is NULL for no color. */
static braid_result_t nccl_split(braid_comm_t parent, int color, int key, int refuse,
                                 braid_comm_t *out)
{
    int n = 0;
    (void)braid_comm_size(parent, &n);
    int32_t mine = color, *all = calloc(n > 0 ? (size_t)n : 1, sizeof(*all));
    /* Without memory, the NULL buffer makes braid refuse this rank's gather: the peers are told
     * of it (rather than wait for it) and so is this rank. */
    braid_result_t r = braid_allgather(&mine, all, 1, BRAID_INT32, parent);
    int bcolor = BRAID_SPLIT_NOCOLOR;
    if (r == BRAID_SUCCESS && color != NCCL_SPLIT_NOCOLOR)
        for (bcolor = 0; bcolor < n - 1 && all[bcolor] != mine; bcolor++)
            ;
    free(all);
    /* After a failed gather too, so that this rank keeps its place in the parent's calls. */
    braid_result_t s =
        braid_comm_split(parent, bcolor, key, refuse || r != BRAID_SUCCESS ? NULL : out);
    return r != BRAID_SUCCESS ? r : s;
}

void shim_split_run(ncclComm_t c, ncclResult_t refuse)
{
    ncclComm_t p = c->split_parent;
    if (!refuse && atomic_load(&c->closing)) /* aborted before the group's end */
        refuse = shim_fail(c, ncclInvalidArgument,
                           "ncclCommSplit: comm %p was aborted before its group's end", (void *)c);
    braid_comm_t bc = NULL;
    /* c stays init_deferred (no close can free it): ncclGroupEnd clears that after its last
     * touch. */
    ncclResult_t res = shim_enter(p, "ncclCommSplit (at ncclGroupEnd)");
    if (res != ncclSuccess) {
        shim_init_finish(c, refuse ? refuse : res, shim_thread_msg());
        return;
    }
    /* Refused: braid refuses a split without newcomm_p too, and tells the peers. */
    braid_result_t r = nccl_split(p->bc, c->split_color, c->split_key, refuse != 0, &bc);
    shim_leave(p);
    if (refuse) {
        shim_init_finish(c, refuse, "ncclCommSplit: not run (its group failed, or it was aborted)");
        return;
    }
    if (r != BRAID_SUCCESS) {
        res = shim_braid_fail(c, r, "ncclCommSplit (at ncclGroupEnd)");
        shim_init_finish(c, res, shim_thread_msg());
        return;
    }
    if (bc) {
        c->bc = bc;
        braid_comm_rank(bc, &c->rank);
        braid_comm_size(bc, &c->nranks);
    }
    shim_init_finish(c, ncclSuccess, NULL);
}

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
        ncclResult_t res =
            shim_fail(NULL, ncclSystemError, "ncclGroupEnd: out of memory for the splits");
        for (size_t i = 0; i < n; i++)
            if (inits[i]->split_parent) shim_init_finish(inits[i], res, shim_thread_msg());
        return res;
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
                shim_init_finish(jobs[k].list[i], ncclSystemError,
                                 "ncclGroupEnd: cannot start a split thread");
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

static ncclResult_t split(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                          ncclConfig_t *config)
{
    static const char *call = "ncclCommSplit";
    int grouped = shim_group_depth() > 0;
    /* As NCCL (ncclGroupErrCheck): a split that fails inside a group fails its ncclGroupEnd. */
    ncclResult_t res = shim_ready(comm, call);
    if (res != ncclSuccess) {
        /* The parent cannot take part in a split: its peers learn of it from braid only when
         * this rank's parent failed there too (a failed init leaves them waiting, as NCCL's). */
        if (!newcomm)
            res = shim_fail(comm, ncclInvalidArgument, "%s: newcomm is NULL", call);
        else
            *newcomm = NULL;         /* as NCCL's ncclCommSplit (its fail path) */
        return shim_group_fail(res); /* a no-op outside a group */
    }
    /* Any color but NCCL_SPLIT_NOCOLOR is a color (nccl_split), so only the pointer and the
     * config can be refused. */
    int blocking = comm->blocking;
    ncclResult_t bad = ncclSuccess;
    if (!newcomm)
        bad = shim_fail(comm, ncclInvalidArgument, "%s: newcomm is NULL", call);
    else if (color != NCCL_SPLIT_NOCOLOR) {
        /* As NCCL: a NOCOLOR rank's config is not read, nor NCCL_COMM_BLOCKING (no config is
         * parsed for it). */
        if (config) bad = shim_check_config(config, &blocking, call);
        if (bad == ncclSuccess) blocking = shim_env_blocking(blocking);
    }
    /* NCCL's ncclAsyncLaunch is given the parent: a split counts as its parent's mode. */
    if (bad == ncclSuccess && grouped) bad = shim_group_mode(comm->blocking, call);
    if (newcomm) *newcomm = NULL; /* as NCCL: until the split completed */
    if (grouped) {
        /* As NCCL: the split runs at ncclGroupEnd, so that one thread may split several ranks
         * (each on its own thread there); *newcomm stays NULL until then (the end writes it,
         * split_out). A refused split is recorded as a part that takes no communicator: the
         * group fails, and its ncclGroupEnd asks braid for the splits it refuses, so the peers'
         * splits fail. */
        int phantom = bad != ncclSuccess || color == NCCL_SPLIT_NOCOLOR;
        ncclComm_t c = shim_comm_new(0, NULL, 0, phantom ? 1 : blocking);
        if (!c) return shim_group_fail(shim_fail(comm, ncclSystemError, "%s: out of memory", call));
        c->split_parent = comm;
        c->split_color = color;
        c->split_key = key;
        c->split_phantom = phantom;
        c->split_out = newcomm;
        c->cudadev = comm->cudadev;
        res = shim_group_add_init(c);
        if (res != ncclSuccess) {
            shim_comm_free(c);
            return shim_group_fail(bad != ncclSuccess ? bad : res);
        }
        return bad != ncclSuccess ? shim_group_fail(bad) : ncclSuccess;
    }
    braid_comm_t nbc = NULL;
    braid_result_t r = nccl_split(comm->bc, color, key, bad != ncclSuccess, &nbc);
    if (bad != ncclSuccess) return bad; /* the peers were told; the message is the check's */
    if (r == BRAID_SUCCESS && !nbc) return ncclSuccess; /* NCCL_SPLIT_NOCOLOR */
    res = r == BRAID_SUCCESS ? ncclSuccess : shim_braid_fail(comm, r, call);
    if (color == NCCL_SPLIT_NOCOLOR) return res;
    /* As NCCL's ncclCommInitRankFunc (*newcomm written when the split's job ends): a split that
     * ran hands out its communicator, a failed one too, in error (calls on it return the failure;
     * the program destroys or aborts it). */
    ncclComm_t c = shim_comm_new(0, NULL, 0, blocking);
    if (!c) {
        if (nbc) braid_comm_destroy(nbc);
        return shim_fail(comm, ncclSystemError, "%s: out of memory", call);
    }
    c->cudadev = comm->cudadev;
    if (res != ncclSuccess) {
        shim_init_finish(c, res, shim_thread_msg());
        *newcomm = c;
        return res;
    }
    c->bc = nbc;
    braid_comm_rank(nbc, &c->rank);
    braid_comm_size(nbc, &c->nranks);
    atomic_store(&c->state, ncclSuccess);
    *newcomm = c;
    return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config)
{
    shim_clear();
    ncclResult_t res = shim_enter(comm, "ncclCommSplit");
    if (res != ncclSuccess) {
        if (newcomm) *newcomm = NULL; /* as NCCL's ncclCommSplit (CommCheck, its fail path) */
        return shim_group_fail(res);  /* a no-op outside a group */
    }
    res = split(comm, color, key, newcomm, config);
    shim_leave(comm);
    return res;
}

SHIM_PNAME(ncclCommSplit);
