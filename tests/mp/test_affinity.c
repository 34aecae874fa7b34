/* braid's own threads (the tcp progress thread, the non-blocking worker) run on the cpus the
 * rank had at init: rank 0 binds itself to one cpu first (as `taskset -c 1` would), rank 1
 * stays unbound; after init both move their main thread to every cpu (as an application or its
 * runtime may), and only then start the worker. The cpus of each thread are read back from
 * /proc/self/task/<tid>/status (Cpus_allowed_list), the NUMA nodes' cpus from sysfs. */
#include "core/comm.h"
#include "topo/topo.h"
#include "data.h"
#include "mp.h"
#include "proc.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Checks every thread of this process named name: its cpus must equal want. Returns how many
 * there were, or -1 (message printed) on a mismatch. */
static int check_threads(int rank, const char *name, const cpu_set_t *want)
{
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    struct dirent *e;
    int found = 0, bad = 0;
    while ((e = readdir(d))) {
        char path[300], line[4096], comm[32];
        if (e->d_name[0] == '.' || proc_task_comm(e->d_name, comm, sizeof(comm))) continue;
        if (strcmp(comm, name)) continue;
        snprintf(path, sizeof(path), "/proc/self/task/%s/status", e->d_name);
        FILE *f = fopen(path, "r");
        cpu_set_t got;
        CPU_ZERO(&got);
        while (f && fgets(line, sizeof(line), f))
            if (!strncmp(line, "Cpus_allowed_list:", 18))
                braid_topo_cpulist_parse(line + 18 + strspn(line + 18, " \t"), &got);
        if (f) fclose(f);
        found++;
        if (!CPU_EQUAL(&got, want)) {
            fprintf(stderr, "rank %d: thread %s (%s) runs on %d cpus, expected %d\n", rank, name,
                    e->d_name, CPU_COUNT(&got), CPU_COUNT(want));
            bad = 1;
        }
    }
    closedir(d);
    return bad ? -1 : found;
}

/* The cpus of every NUMA node (sysfs) that set touches, plus set itself. */
static void numa_of(const cpu_set_t *set, cpu_set_t *out)
{
    *out = *set;
    for (int node = 0; node < 1024; node++) {
        char path[96], list[4096];
        snprintf(path, sizeof(path), "/sys/devices/system/node/node%d/cpulist", node);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (!fgets(list, sizeof(list), f)) list[0] = '\0';
        fclose(f);
        cpu_set_t cpus, both;
        braid_topo_cpulist_parse(list, &cpus);
        CPU_AND(&both, &cpus, set);
        if (CPU_COUNT(&both)) CPU_OR(out, out, &cpus);
    }
}

static int threads_on(braid_comm_t comm, int rank, int n, void *arg)
{
    const char *mode = arg;
    cpu_set_t all, bound;
    MP_CHECK(rank, sched_getaffinity(0, sizeof(all), &all) == 0, "sched_getaffinity");
    int last = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &all)) last = c;
    CPU_ZERO(&bound);
    CPU_SET(last, &bound);
    const cpu_set_t *at_init = rank == 0 ? &bound : &all;
    MP_CHECK(rank, sched_setaffinity(0, sizeof(*at_init), at_init) == 0, "bind to cpu %d", last);
    setenv("BRAID_THREAD_AFFINITY", mode, 1);
    setenv("BRAID_TRANSPORT", "tcp", 1);
    braid_comm_t sub = NULL;
    braid_result_t r = braid_comm_split(comm, 0, rank, &sub);
    unsetenv("BRAID_THREAD_AFFINITY");
    unsetenv("BRAID_TRANSPORT");
    MP_OK(rank, r);
    MP_CHECK(rank, sched_setaffinity(0, sizeof(all), &all) == 0, "unbind");
    if (data_check_allreduce(sub, rank, n, BRAID_FLOAT32, BRAID_SUM, 4099, 0, 0, 2, "affinity"))
        return 1;
    float x[64], y[64];
    for (int i = 0; i < 64; i++)
        x[i] = (float)(rank * 100 + i);
    braid_request_t req;
    MP_OK(rank, braid_iallreduce(x, y, 64, BRAID_FLOAT32, BRAID_SUM, sub, &req));
    MP_OK(rank, braid_wait(req));
    for (int i = 0; i < 64; i++)
        MP_CHECK(rank, y[i] == (float)(100 * n * (n - 1) / 2 + n * i), "iallreduce [%d]", i);
    /* Expected cpus: the rank's cpus at init (rank), their NUMA nodes (numa), or inherited
     * from the creating thread (none: bound at init for tcp, every cpu later for the worker). */
    cpu_set_t want_tcp = *at_init, want_worker = *at_init;
    if (!strcmp(mode, "numa")) {
        numa_of(at_init, &want_tcp);
        CPU_AND(&want_tcp, &want_tcp, &all); /* the kernel keeps a thread inside its cgroup */
        want_worker = want_tcp;
    } else if (!strcmp(mode, "none")) {
        want_worker = all;
    }
    int ntcp = check_threads(rank, "braid-tcp", &want_tcp);
    int nworker = check_threads(rank, "braid-worker", &want_worker);
    MP_CHECK(rank, ntcp >= 1 && nworker == 1, "mode %s: %d tcp and %d worker threads as expected",
             mode, ntcp, nworker);
    if (!strcmp(mode, "rank")) {
        cpu_set_t both;
        CPU_AND(&both, &want_worker, at_init);
        MP_CHECK(rank, CPU_EQUAL(&both, &want_worker), "worker outside the rank's cpus");
    }
    MP_OK(rank, braid_comm_destroy(sub));
    return 0;
}

TestSuite(affinity, .timeout = 120);

Test(affinity, threads_stay_on_the_cpus_the_rank_had_at_init)
{
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2) cr_skip_test("one cpu: binding changes nothing");
    cr_assert_eq(mp_run(2, threads_on, "rank", 60), 0);
}

Test(affinity, numa_mode_uses_the_nodes_of_the_ranks_cpus)
{
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2) cr_skip_test("one cpu: binding changes nothing");
    cr_assert_eq(mp_run(2, threads_on, "numa", 60), 0);
}

Test(affinity, none_leaves_threads_where_they_were_started)
{
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2) cr_skip_test("one cpu: binding changes nothing");
    cr_assert_eq(mp_run(2, threads_on, "none", 60), 0);
}

Test(affinity, a_bad_mode_is_an_error_naming_the_variable)
{
    setenv("BRAID_THREAD_AFFINITY", "everywhere", 1);
    braid_unique_id_t id;
    cr_assert_eq(braid_get_unique_id(&id), BRAID_SUCCESS);
    braid_comm_t comm = NULL;
    braid_result_t r = braid_comm_init_rank(&comm, 1, id, 0);
    unsetenv("BRAID_THREAD_AFFINITY");
    cr_assert_eq(r, BRAID_ERR_INVALID_ARG, "%s", braid_last_error());
    cr_assert(strstr(braid_last_error(), "BRAID_THREAD_AFFINITY"), "%s", braid_last_error());
    cr_assert_null(comm);
}
