/* braid-run --bind: which cpu each rank runs on.
 *
 * The cpus are those braid-run itself may run on (sched_getaffinity: a taskset, a cgroup's
 * cpuset or a batch system's allocation narrows them), ordered so that the first hardware
 * thread of every core comes before any second one (the sibling lists of
 * /sys/devices/system/cpu/cpuN/topology/thread_siblings_list). Rank r is bound to cpu
 * r mod ncpus of that order:
 *   none  no binding: the kernel places and moves the ranks.
 *   core  every rank bound, round-robin when there are more ranks than cpus.
 *   auto  core when the ranks fit on the cpus (one each), none otherwise: Open MPI's mpirun
 *         default (it binds to cores up to 2 ranks, and does not bind oversubscribed jobs).
 *   full  core when the ranks fill every cpu (as many ranks as cpus, or more), none when
 *         some cpus are left over for the ranks' own threads (a rank of a trainer with
 *         several BLAS or torch threads keeps them): the default. A 4-rank all-reduce on 2
 *         cpus ran 1.1-1.5x faster bound than floating, and 2 ranks on 2 cpus the same
 *         (perf/RESULTS.md, session 9).
 * Bound ranks keep their caches and never share a cpu while another one idles; floating ranks
 * of 4-rank jobs on 2 cpus were seen landing in a fast or a slow mode for whole runs
 * (perf/RESULTS.md, session 3), and bound ones were not. */
#include "braid_run.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int br_parse_bind(const char *s, br_bind_t *mode_p)
{
    if (!strcmp(s, "none"))
        *mode_p = BR_BIND_NONE;
    else if (!strcmp(s, "core"))
        *mode_p = BR_BIND_CORE;
    else if (!strcmp(s, "auto"))
        *mode_p = BR_BIND_AUTO;
    else if (!strcmp(s, "full"))
        *mode_p = BR_BIND_FULL;
    else
        return -1;
    return 0;
}

/* 1 when cpu is not the lowest-numbered hardware thread of its core (or unknown: 0). */
static int br_is_sibling(int cpu)
{
    char path[96], buf[256];
    snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list",
             cpu);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int first = -1;
    if (fgets(buf, sizeof(buf), f)) first = atoi(buf); /* "0,64" or "0-1": the lowest first */
    fclose(f);
    return first >= 0 && first != cpu;
}

int br_bind_plan(br_bind_t mode, int nranks, int **cpus_p, int *ncpus_p)
{
    *cpus_p = NULL;
    *ncpus_p = 0;
    cpu_set_t set;
    if (mode == BR_BIND_NONE) return 0;
    if (sched_getaffinity(0, sizeof(set), &set)) {
        br_msg("--bind: cannot read this process's cpus: %s", strerror(errno));
        return -1;
    }
    int n = CPU_COUNT(&set), k = 0;
    if (mode == BR_BIND_AUTO && nranks > n) return 0; /* oversubscribed: not bound */
    if (mode == BR_BIND_FULL && nranks < n) return 0; /* cpus left for the ranks' threads */
    int *cpus = malloc((size_t)n * sizeof(int));
    if (!cpus) {
        br_msg("--bind: out of memory");
        return -1;
    }
    for (int pass = 0; pass < 2; pass++) /* first threads of cores, then their siblings */
        for (int c = 0; c < CPU_SETSIZE && k < n; c++)
            if (CPU_ISSET(c, &set) && br_is_sibling(c) == pass) cpus[k++] = c;
    *cpus_p = cpus;
    *ncpus_p = k;
    return 0;
}

int br_bind_self(const int *cpus, int ncpus, int rank)
{
    if (ncpus <= 0) return 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpus[rank % ncpus], &set);
    return sched_setaffinity(0, sizeof(set), &set) ? errno : 0;
}
