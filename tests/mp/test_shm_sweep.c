/* The stale-segment sweep of the shm transport (src/transport/shm.c): at setup a process removes
 * segments of /dev/shm whose creator is dead, but only those its own PID namespace created.
 * Containers that share /dev/shm (docker --ipc=host, pods) but not the PID namespace would
 * otherwise see every other job's creators as dead and remove their live segments during their
 * setup ("cannot open rank N's segment"). Segment names carry the creator's PID namespace
 * (braid-ns<inode>-<pid>-...). Here, before a 2-rank communicator forms over shm, three
 * segments with a dead pid in their names:
 *   ours     this PID namespace's inode: removed (the sweep still works);
 *   foreign  another namespace's inode: left alone (its pid means nothing here);
 *   old      the name format before the namespace was in it (braid-<pid>-...): left alone,
 *            since nobody can tell which namespace created it. */
#include "mp.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int noop(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    int32_t x = 1, y = 0;
    MP_OK(rank, braid_allreduce(&x, &y, 1, BRAID_INT32, BRAID_SUM, comm));
    MP_CHECK(rank, y == n, "allreduce gave %d", y);
    return 0;
}

static int exists(const char *name)
{
    char path[128];
    snprintf(path, sizeof(path), "/dev/shm%s", name);
    return access(path, F_OK) == 0;
}

Test(shm_sweep, only_segments_of_this_pid_namespace_are_swept, .timeout = 60)
{
    struct stat st;
    cr_assert_eq(stat("/proc/self/ns/pid", &st), 0, "no /proc/self/ns/pid");
    unsigned long long ns = (unsigned long long)st.st_ino;
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    cr_assert(dead > 0);
    waitpid(dead, NULL, 0);
    char ours[96], foreign[96], old[96];
    snprintf(ours, sizeof(ours), "/braid-ns%llu-%d-0-5eed0001", ns, (int)dead);
    snprintf(foreign, sizeof(foreign), "/braid-ns%llu-%d-0-5eed0002", ns + 1, (int)dead);
    snprintf(old, sizeof(old), "/braid-%d-0-5eed0003", (int)dead);
    const char *names[] = {ours, foreign, old};
    for (int i = 0; i < 3; i++) {
        int fd = shm_open(names[i], O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        cr_assert(fd >= 0, "shm_open(%s) failed", names[i]);
        close(fd);
    }
    setenv("BRAID_TRANSPORT", "shm", 1);
    int failed = mp_run(2, noop, NULL, 40);
    int have[3];
    for (int i = 0; i < 3; i++) {
        have[i] = exists(names[i]);
        shm_unlink(names[i]);
    }
    cr_expect_eq(failed, 0, "the communicator failed (see stderr)");
    cr_expect(!have[0], "%s (this namespace, dead pid) was not removed", ours);
    cr_expect(have[1], "%s (another namespace) was removed", foreign);
    cr_expect(have[2], "%s (the old name format) was removed", old);
}
