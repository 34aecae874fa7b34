/* Suite `ddp_variants`: the trainer's local SGD and asynchronous modes (examples/ddp_mlp
 * --local-sgd, --async) as separate processes on a slice of Fashion-MNIST:
 * - --local-sgd 4 on 2 ranks trains (accuracy far above chance), ends with identical
 *   parameters on both ranks, and reports the bytes it all-reduced per step (checked against
 *   the count computed here from the model size and the number of averages);
 * - --async with one worker and one server ends bit-identical to synchronous training on one
 *   rank (the same samples, the same Adam updates, applied on the server);
 * - --async with 2 workers trains, every rank ends with the servers' parameters, the server's
 *   staleness stays within --staleness;
 * - a worker SIGKILLed mid-training: the server exits non-zero within the timeout, naming it.
 * Skipped when the trainer was not built. */
#include "proc.h"
#include "trainer.h"

#include <criterion/criterion.h>

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static char g_bin[PATH_MAX];
static char g_dir[PATH_MAX];

static void setup(void)
{
    tr_setup(g_bin, sizeof(g_bin), g_dir, sizeof(g_dir), "/tmp/braid-ddpvar-XXXXXX");
}

static void teardown(void)
{
    tr_teardown(g_dir);
}

static char *slurp(const char *name)
{
    return tr_slurp(g_dir, name);
}

static pid_t spawn(char *const argv[], const char *out, const char *err, char *const *env)
{
    return proc_spawn(g_dir, argv, out, err, env);
}

/* braid-run -n N ddp_mlp on a 2000-image slice, 1 epoch, batch 64, plus extra (NULL-ended);
 * returns its stdout (exit status 0 asserted). */
static char *run_trainer(int n, const char *const *extra)
{
    char run[PATH_MAX + 16], prog[PATH_MAX + 16], ns[16];
    snprintf(run, sizeof(run), "%s/braid-run", g_bin);
    snprintf(prog, sizeof(prog), "%s/ddp_mlp", g_bin);
    snprintf(ns, sizeof(ns), "%d", n);
    char *argv[32] = {run, "-n", ns, "--timeout", "200", prog};
    int k = 6;
    const char *common[] = {"--epochs",     "1",   "--batch", "64", "--train-limit", "2000",
                            "--test-limit", "500", NULL};
    for (int i = 0; common[i]; i++)
        argv[k++] = (char *)common[i];
    for (int i = 0; extra[i] && k < 31; i++)
        argv[k++] = (char *)extra[i];
    argv[k] = NULL;
    int st;
    pid_t pid = spawn(argv, "out", "err", NULL);
    cr_assert_eq(proc_wait(pid, 200, &st), 0, "the trainer did not finish in 200 s");
    char *out = slurp("out"), *err = slurp("err");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit status %d; stdout:\n%s\nstderr:\n%s", st,
              out, err);
    free(err);
    return out;
}

/* Every params_hash line of out equal; returns the first (count lines in *n_p). */
static void hashes(const char *out, char *h, size_t len, int *n_p)
{
    int n = 0;
    h[0] = '\0';
    for (const char *a = strstr(out, "params_hash "); a; a = strstr(a + 1, "params_hash ")) {
        char x[32];
        cr_assert_eq(sscanf(a, "params_hash %31s", x), 1);
        if (!n) snprintf(h, len, "%s", x);
        cr_assert_str_eq(x, h, "ranks ended with different parameters:\n%s", out);
        n++;
    }
    *n_p = n;
}

TestSuite(ddp_variants, .init = setup, .fini = teardown, .timeout = 300);

Test(ddp_variants, local_sgd_trains_and_counts_its_bytes)
{
    const char *extra[] = {"--local-sgd", "4", NULL};
    char *out = run_trainer(2, extra);
    double loss, acc, sps, bytes;
    int e;
    const char *l = strstr(out, "epoch 1 ");
    cr_assert(l, "no epoch line:\n%s", out);
    cr_assert_eq(
        sscanf(l, "epoch %d loss %lf test_acc %lf samples_per_s %lf", &e, &loss, &acc, &sps), 4);
    cr_assert(acc > 0.65, "accuracy %.4f after one epoch of local SGD on 2000 images", acc);
    l = strstr(out, "comm_bytes_per_step ");
    cr_assert(l && sscanf(l, "comm_bytes_per_step %lf", &bytes) == 1, "no bytes line:\n%s", out);
    /* 2000 / 64 = 31 steps: averages after steps 4, 8, ..., 28 and at the epoch's end (31);
     * each all-reduces the 784*512+512+512*512+512+512*10+10 float32 parameters; a ring sends
     * 2(n-1)/n of that per rank. */
    double params = 784.0 * 512 + 512 + 512.0 * 512 + 512 + 512.0 * 10 + 10;
    double want = 2.0 * (2 - 1) / 2 * params * 4 * (7 + 1) / 31;
    cr_assert(fabs(bytes - want) <= 1, "comm_bytes_per_step %.0f, expected %.0f", bytes, want);
    char h[32];
    int n;
    hashes(out, h, sizeof(h), &n);
    cr_assert_eq(n, 2, "%d params_hash lines", n);
    free(out);
}

/* The `eval step S wall_s W test_acc A` lines of out: steps and accuracies (as printed), and
 * the training times strictly increasing; returns how many. */
static int evals(const char *out, int *step, char (*acc)[16], int cap)
{
    int k = 0;
    double prev = -1;
    for (const char *a = strstr(out, "eval step "); a && k < cap; a = strstr(a + 1, "eval step ")) {
        double w;
        cr_assert_eq(sscanf(a, "eval step %d wall_s %lf test_acc %15s", &step[k], &w, acc[k]), 3,
                     "bad eval line in:\n%s", out);
        cr_assert(w > prev, "eval %d: wall_s %.3f after %.3f:\n%s", k, w, prev, out);
        prev = w;
        k++;
    }
    return k;
}

/* One worker (+ a server) computes what one synchronous rank does, bit for bit; with
 * --eval-every both print their evaluations at the same steps with the same accuracies (the
 * worker's pulled view is the server's current parameters: staleness 0). */
Test(ddp_variants, async_one_worker_is_bit_identical_to_one_rank)
{
    const char *sync[] = {"--eval-every", "10", NULL},
               *async[] = {"--async", "--staleness", "3", "--eval-every", "10", NULL};
    char h1[32], h2[32];
    int n1, n2;
    char *out = run_trainer(1, sync);
    hashes(out, h1, sizeof(h1), &n1);
    int s1[8], s2[8];
    char a1[8][16], a2[8][16];
    int e1 = evals(out, s1, a1, 8);
    free(out);
    out = run_trainer(2, async);
    hashes(out, h2, sizeof(h2), &n2);
    int e2 = evals(out, s2, a2, 8);
    cr_assert(n1 == 1 && n2 == 2, "%d and %d params_hash lines", n1, n2);
    cr_assert_str_eq(h1, h2,
                     "one async worker + server ended with other parameters than one "
                     "synchronous rank");
    cr_assert(strstr(out, "max_staleness 0 "), "one worker, staleness > 0:\n%s", out);
    /* 31 steps: every 10, and the epoch's end */
    cr_assert(e1 == 4 && e2 == 4, "%d sync and %d async eval lines:\n%s", e1, e2, out);
    for (int k = 0; k < 4; k++) {
        cr_assert(s1[k] == (k < 3 ? 10 * (k + 1) : 31) && s2[k] == s1[k], "eval %d: steps %d %d", k,
                  s1[k], s2[k]);
        cr_assert_str_eq(a1[k], a2[k], "step %d: sync accuracy %s, async %s", s1[k], a1[k], a2[k]);
    }
    free(out);
}

Test(ddp_variants, async_two_workers_train_within_the_bound)
{
    const char *extra[] = {"--async", "--staleness", "3", NULL};
    char *out = run_trainer(3, extra);
    double acc, sps;
    int w, s, b;
    const char *l = strstr(out, "async workers ");
    cr_assert(l, "no summary line:\n%s", out);
    cr_assert_eq(sscanf(l,
                        "async workers %d servers %d staleness %d samples_per_s %lf test_acc %lf",
                        &w, &s, &b, &sps, &acc),
                 5, "%s", l);
    cr_assert(w == 2 && s == 1 && b == 3, "%s", l);
    cr_assert(acc > 0.65, "accuracy %.4f after one async epoch on 2000 images", acc);
    long applied, mx;
    l = strstr(out, "server 2 applied ");
    cr_assert(l && sscanf(l, "server 2 applied %ld max_staleness %ld", &applied, &mx) == 2, "%s",
              out);
    cr_assert(applied == 2 * 31 && mx >= 0 && mx <= 3, "applied %ld, max staleness %ld", applied,
              mx);
    /* Memory: the 784-512-512-10 MLP has 669,706 float parameters (P bytes). Worker 0 holds
     * its gradients (P) and a push and a reply buffer of the whole model (2 P, plus message
     * headers); the one server Adam's two moments (2 P), the parameters (P) and a receive and
     * a send buffer per worker (4 P, plus headers). */
    const double P = 669706.0 * 4;
    double sb, gb, ob, pb, hb;
    l = strstr(out, "comm_bytes_per_step ");
    cr_assert(l && sscanf(l,
                          "comm_bytes_per_step %*f state_bytes %lf grad_bytes %lf optimizer_bytes "
                          "%lf staging_bytes %lf hook_bytes %lf",
                          &sb, &gb, &ob, &pb, &hb) == 5,
              "no worker state line:\n%s", out);
    cr_assert(gb == P && ob == 0 && hb == 0 && sb == gb + pb, "worker state: %s", l);
    cr_assert(pb >= 2 * P && pb < 2 * P + 4096, "worker staging %.0f, expected 2 x %.0f", pb, P);
    l = strstr(out, "server 2 state_bytes ");
    cr_assert(l && sscanf(l, "server 2 state_bytes %lf optimizer_bytes %lf buffer_bytes %lf", &sb,
                          &ob, &pb) == 3,
              "no server state line:\n%s", out);
    cr_assert(ob == 2 * P && sb == ob + pb, "server state: %s", l);
    cr_assert(pb >= 5 * P && pb < 5 * P + 4096, "server buffers %.0f, expected 5 x %.0f", pb, P);
    char h[32];
    int n;
    hashes(out, h, sizeof(h), &n);
    cr_assert_eq(n, 3);
    free(out);
}

Test(ddp_variants, async_killed_worker_makes_the_server_exit_naming_it)
{
    char prog[PATH_MAX + 16];
    snprintf(prog, sizeof(prog), "%s/ddp_mlp", g_bin);
    char *argv[] = {prog,  "--async", "--epochs", "100", "--train-limit", "3000", "--test-limit",
                    "300", "--batch", "60",       NULL};
    const char *name[] = {NULL, NULL, "rank 1 ("}; /* the server names worker 1 */
    tr_kill_mid_training(g_dir, argv, 3, 1, name);
}
