#include "mp.h"

#include "leaks.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void child(mp_job_t *job, int rank, mp_fn_t fn, void *arg)
{
    braid_unique_id_t id;
    if (rank == 0) {
        close(job->pipefd[0]);
        braid_result_t r = braid_get_unique_id(&id);
        if (r) {
            fprintf(stderr, "rank 0: braid_get_unique_id: %s\n", braid_last_error());
            _exit(2);
        }
        for (int i = 1; i < job->n; i++)
            if (write(job->pipefd[1], &id, sizeof(id)) != sizeof(id)) _exit(2);
        close(job->pipefd[1]);
    } else {
        close(job->pipefd[1]);
        size_t got = 0;
        while (got < sizeof(id)) {
            ssize_t k = read(job->pipefd[0], (char *)&id + got, sizeof(id) - got);
            if (k <= 0) _exit(2);
            got += (size_t)k;
        }
        close(job->pipefd[0]);
    }
    braid_comm_t comm;
    braid_result_t r = braid_comm_init_rank(&comm, job->n, id, rank);
    if (r) {
        fprintf(stderr, "rank %d: braid_comm_init_rank: %s: %s\n", rank, braid_strerror(r),
                braid_last_error());
        _exit(3);
    }
    int rc = fn(comm, rank, job->n, arg);
    braid_comm_destroy(comm);
    int leaked = test_leaks(); /* LSan does not run at _exit */
    if (leaked) fprintf(stderr, "rank %d: leaks (LeakSanitizer's report above)\n", rank);
    fflush(stdout);
    fflush(stderr);
    _exit(rc ? 1 : leaked ? MP_EXIT_LEAKS : 0);
}

void mp_start(mp_job_t *job, int n, mp_fn_t fn, void *arg)
{
    memset(job, 0, sizeof(*job));
    if (n > MP_MAX_RANKS) abort();
    job->n = n;
    if (pipe(job->pipefd) != 0) abort();
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < n; r++) {
        pid_t pid = fork();
        if (pid == 0) child(job, r, fn, arg);
        job->pids[r] = pid;
    }
    close(job->pipefd[0]);
    close(job->pipefd[1]);
}

int mp_wait(mp_job_t *job, double timeout_s)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int left = job->n, failed = 0;
    int waited[MP_MAX_RANKS] = {0};
    while (left) {
        for (int r = 0; r < job->n; r++) {
            if (waited[r]) continue;
            int st;
            pid_t p = waitpid(job->pids[r], &st, WNOHANG);
            if (p == job->pids[r]) {
                waited[r] = 1;
                job->status[r] = st;
                left--;
                if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) failed++;
            }
        }
        clock_gettime(CLOCK_MONOTONIC, &t);
        double el = (double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) * 1e-9;
        if (left && el > timeout_s) {
            for (int r = 0; r < job->n; r++)
                if (!waited[r]) {
                    fprintf(stderr, "mp: rank %d (pid %d) still running after %.0f s: killed\n", r,
                            (int)job->pids[r], timeout_s);
                    kill(job->pids[r], SIGKILL);
                    waitpid(job->pids[r], &job->status[r], 0);
                    waited[r] = 1;
                    failed++;
                    left--;
                }
        }
        if (left) usleep(2000);
    }
    return failed;
}

int mp_run(int n, mp_fn_t fn, void *arg, double timeout_s)
{
    mp_job_t job;
    mp_start(&job, n, fn, arg);
    return mp_wait(&job, timeout_s);
}

int mp_shm_leftovers(const mp_job_t *job)
{
    DIR *d = opendir("/dev/shm");
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        unsigned long long ns;
        int pid; /* braid-ns<PID namespace>-<pid>-... (src/transport/shm.c) */
        if (sscanf(e->d_name, "braid-ns%llu-%d-", &ns, &pid) != 2) continue;
        for (int r = 0; r < job->n; r++)
            if (job->pids[r] == pid) n++;
    }
    closedir(d);
    return n;
}

braid_comm_t mp_fake_host_comm(braid_comm_t comm, int rank, int host, const char *algo)
{
    char name[32];
    snprintf(name, sizeof(name), "fake-%d", host);
    setenv("BRAID_HOSTNAME", name, 1);
    setenv("BRAID_ALGO", algo, 1);
    braid_comm_t sub = NULL;
    braid_result_t r = braid_comm_split(comm, 0, rank, &sub);
    unsetenv("BRAID_HOSTNAME");
    unsetenv("BRAID_ALGO");
    if (r) fprintf(stderr, "rank %d: split: %s\n", rank, braid_last_error());
    return r ? NULL : sub;
}
