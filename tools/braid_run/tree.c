/* braid-run: the processes the ranks started. braid-run is a child subreaper
 * (PR_SET_CHILD_SUBREAPER, set in main before the first fork), so a process whose parent
 * ends is re-parented to braid-run instead of init: every process the ranks started, however
 * deep (a wrapper script's program, a daemon that double-forked, python's subprocesses), stays
 * a descendant of braid-run by parent links, and the orphans among them are reaped by its
 * waitpid(-1). The descendants are found by one pass over /proc (each entry's parent from
 * /proc/<pid>/stat), which needs no kernel option (/proc/<pid>/task/<tid>/children does).
 *
 * A pid read from /proc belongs to a process that was a descendant at the read; one that is
 * not braid-run's own child can in principle end and be replaced by an unrelated process with
 * the same pid before the kill() that follows: the window is one /proc pass, as for pkill.
 *
 * Descendants in another session than braid-run's are spared: the ranks run in braid-run's
 * session, and only setsid() (`setsid cmd &`, a daemon's double fork) leaves it, so such a
 * process, and whatever it starts, was made to outlive its parent on purpose (an ssh
 * ControlMaster, an agent, the CUDA MPS daemon). They are never signalled nor counted. */
#include "braid_run.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    pid_t pid, ppid, sid;
    int live; /* not a zombie */
    char comm[20];
    int mine; /* 1: a descendant of braid-run, 2: not, 0: not known yet */
} br_proc_t;

/* pid, parent and state from /proc/<pid>/stat ("pid (comm) S ppid ..."; comm may hold any
 * character, so the fields are read after its last ')'). */
static int br_read_stat(const char *pid, br_proc_t *p)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%s/stat", pid);
    FILE *f = fopen(path, "re");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')'), *open = strchr(buf, '(');
    char state;
    int ppid, pgrp, sid;
    if (!paren || !open || sscanf(paren + 1, " %c %d %d %d", &state, &ppid, &pgrp, &sid) != 4)
        return -1;
    p->pid = (pid_t)atoi(pid);
    p->ppid = (pid_t)ppid;
    p->sid = (pid_t)sid;
    snprintf(p->comm, sizeof(p->comm), "%.*s", (int)(paren - open - 1), open + 1);
    p->live = state != 'Z' && state != 'X';
    p->mine = 0;
    return 0;
}

static int br_by_pid(const void *a, const void *b)
{
    pid_t x = ((const br_proc_t *)a)->pid, y = ((const br_proc_t *)b)->pid;
    return (x > y) - (x < y);
}

int br_tree_signal(int sig)
{
    return br_tree_scan(sig, NULL, 0, NULL);
}

int br_tree_scan(int sig, char *spared, size_t len, int *nspared_p)
{
    if (spared && len) spared[0] = '\0';
    if (nspared_p) *nspared_p = 0;
    DIR *d = opendir("/proc");
    if (!d) return 0;
    br_proc_t *ps = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
        if (n == cap) {
            br_proc_t *b = realloc(ps, (cap = cap ? 2 * cap : 1024) * sizeof(*ps));
            if (!b) break;
            ps = b;
        }
        if (br_read_stat(e->d_name, &ps[n]) == 0) n++;
    }
    closedir(d);
    /* Mark the descendants: sorted by pid, each entry's parent is a binary search away, and
     * the answer (1 mine, 2 not) is remembered along each chain of parents. */
    qsort(ps, n, sizeof(*ps), br_by_pid);
    pid_t self = getpid();
    for (size_t i = 0; i < n; i++) {
        size_t k = i;
        int verdict = 2;
        for (int depth = 0; depth < 4096; depth++) { /* finds the verdict of the chain */
            if (ps[k].mine) {
                verdict = ps[k].mine;
                break;
            }
            if (ps[k].ppid == self) {
                verdict = 1;
                break;
            }
            br_proc_t key = {.pid = ps[k].ppid}, *up = bsearch(&key, ps, n, sizeof(*ps), br_by_pid);
            if (!up || ps[k].ppid <= 1) break;
            k = (size_t)(up - ps);
        }
        for (k = i; !ps[k].mine;) { /* and writes it along the chain */
            ps[k].mine = verdict;
            if (ps[k].ppid == self) break;
            br_proc_t key = {.pid = ps[k].ppid}, *up = bsearch(&key, ps, n, sizeof(*ps), br_by_pid);
            if (!up) break;
            k = (size_t)(up - ps);
        }
    }
    int count = 0;
    pid_t mysid = getsid(0);
    for (size_t i = 0; i < n; i++)
        if (ps[i].mine == 1 && ps[i].live && ps[i].sid != mysid) { /* a daemon: spared */
            size_t used = spared ? strlen(spared) : 0;
            if (spared && used + 1 < len)
                snprintf(spared + used, len - used, "%s%d (%s)", used ? ", " : "", (int)ps[i].pid,
                         ps[i].comm);
            if (nspared_p) ++*nspared_p;
        } else if (ps[i].mine == 1 && ps[i].live) {
            count++;
            if (sig) kill(ps[i].pid, sig);
        }
    free(ps);
    return count;
}
