#include "trainer.h"

#include "proc.h"

#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

void tr_setup(char *bin, size_t blen, char *dir, size_t dlen, const char *tmpl)
{
    dir[0] = '\0';
    cr_assert_eq(proc_bin_dir(bin, blen), 0, "cannot find the programs' folder");
    char p[PATH_MAX + 16];
    snprintf(p, sizeof(p), "%s/ddp_mlp", bin);
    if (access(p, X_OK) != 0) cr_skip_test("ddp_mlp not built (OpenBLAS or zlib missing)");
    cr_assert_eq(access(TR_DATA_DIR "/train-images-idx3-ubyte.gz", R_OK), 0,
                 "ddp_mlp is built but Fashion-MNIST is missing: apt-get install "
                 "dataset-fashion-mnist");
    snprintf(dir, dlen, "%s", tmpl);
    cr_assert(mkdtemp(dir), "mkdtemp %s", tmpl);
    unsetenv("BRAID_ROOT");
}

void tr_teardown(const char *dir)
{
    if (!dir[0]) return;
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

char *tr_slurp(const char *dir, const char *name)
{
    char p[PATH_MAX + 32];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return proc_slurp(p);
}

#define TR_MAX 8

void tr_kill_mid_training(const char *dir, char *const argv[], int n, int victim,
                          const char *const *must_name)
{
    cr_assert(n >= 2 && n <= TR_MAX && victim >= 0 && victim < n, "n %d victim %d", n, victim);
    char root[64], nr[32], secret[64] = "BRAID_SECRET=0123456789abcdef0123456789abcdef";
    snprintf(root, sizeof(root), "BRAID_ROOT=127.0.0.1:%d", proc_free_port());
    snprintf(nr, sizeof(nr), "BRAID_NRANKS=%d", n);
    pid_t pids[TR_MAX];
    char rk[TR_MAX][32], outs[TR_MAX][16], errs[TR_MAX][16];
    for (int r = 0; r < n; r++) {
        snprintf(rk[r], sizeof(rk[r]), "BRAID_RANK=%d", r);
        snprintf(outs[r], sizeof(outs[r]), "out%d", r);
        snprintf(errs[r], sizeof(errs[r]), "err%d", r);
        char *env[] = {rk[r], nr, root, secret, "BRAID_TIMEOUT=20", NULL};
        pids[r] = proc_spawn(dir, argv, outs[r], errs[r], env);
        cr_assert(pids[r] > 0, "fork failed");
    }
    double t0 = proc_now_s();
    int seen = 0;
    while (!seen && proc_now_s() - t0 < 150) {
        char *o = tr_slurp(dir, "out0");
        seen = strstr(o, "epoch 2 ") != NULL;
        free(o);
        if (!seen) usleep(50000);
    }
    if (!seen)
        for (int r = 0; r < n; r++)
            kill(pids[r], SIGKILL);
    cr_assert(seen, "rank 0 never reported epoch 2");
    kill(pids[victim], SIGKILL);
    double tk = proc_now_s();
    int st;
    waitpid(pids[victim], &st, 0);
    for (int r = 0; r < n; r++) {
        if (r == victim) continue;
        int w = proc_wait(pids[r], 30, &st);
        double dt = proc_now_s() - tk;
        char *err = tr_slurp(dir, errs[r]);
        cr_assert_eq(w, 0, "rank %d still running 30 s after rank %d was killed; stderr:\n%s", r,
                     victim, err);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 0, "rank %d: status %d; stderr:\n%s", r, st,
                  err);
        if (must_name && must_name[r])
            cr_assert(strstr(err, must_name[r]), "rank %d's error does not say '%s':\n%s", r,
                      must_name[r], err);
        cr_assert(dt < 25, "rank %d took %.1f s to fail", r, dt);
        fprintf(stderr, "ddp_mlp rank %d exited %d after %.2f s: %s", r, WEXITSTATUS(st), dt, err);
        free(err);
    }
}
