/* Suite `ddp_mlp`: the Fashion-MNIST trainer (examples/ddp_mlp) as separate processes: a short
 * run under braid-run on a slice of the data (the output format, the accuracy a real model
 * reaches on it, identical parameters on every rank, the CSV), and a rank SIGKILLed in the
 * middle of training (started by hand, without the launcher, which would kill the others
 * itself): every survivor must exit non-zero on its own, within the timeout, naming rank 1.
 * Skipped when the trainer was not built (no OpenBLAS/zlib). */
#include "proc.h"
#include "trainer.h"

#include <criterion/criterion.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static char g_bin[PATH_MAX];
static char g_dir[PATH_MAX];

static void setup(void)
{
    tr_setup(g_bin, sizeof(g_bin), g_dir, sizeof(g_dir), "/tmp/braid-ddpmlp-XXXXXX");
}

static void teardown(void)
{
    tr_teardown(g_dir);
}

/* Starts argv with stdout/stderr to files in g_dir; extra environment in env (NULL ends). */
static pid_t spawn(char *const argv[], const char *out, const char *err, char *const *env)
{
    return proc_spawn(g_dir, argv, out, err, env);
}

TestSuite(ddp_mlp, .init = setup, .fini = teardown, .timeout = 240);

Test(ddp_mlp, short_run_on_a_slice_trains_and_keeps_ranks_identical)
{
    char run[PATH_MAX + 16], prog[PATH_MAX + 16], csv[PATH_MAX + 16];
    snprintf(run, sizeof(run), "%s/braid-run", g_bin);
    snprintf(prog, sizeof(prog), "%s/ddp_mlp", g_bin);
    snprintf(csv, sizeof(csv), "%s/curve.csv", g_dir);
    char *argv[] = {run,
                    "-n",
                    "2",
                    "--timeout",
                    "200",
                    prog,
                    "--epochs",
                    "1",
                    "--train-limit",
                    "6000",
                    "--test-limit",
                    "2000",
                    "--batch",
                    "64",
                    "--csv",
                    csv,
                    NULL};
    int st;
    pid_t pid = spawn(argv, "out", "err", NULL);
    cr_assert_eq(proc_wait(pid, 200, &st), 0, "the trainer did not finish in 200 s");
    char p[PATH_MAX + 16];
    snprintf(p, sizeof(p), "%s/out", g_dir);
    char *out = proc_slurp(p);
    snprintf(p, sizeof(p), "%s/err", g_dir);
    char *err = proc_slurp(p);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit status %d; stderr:\n%s", st, err);
    int e;
    double loss, acc, sps;
    const char *line = strstr(out, "epoch ");
    cr_assert(line, "no epoch line in:\n%s", out);
    cr_assert_eq(
        sscanf(line, "epoch %d loss %lf test_acc %lf samples_per_s %lf", &e, &loss, &acc, &sps), 4,
        "malformed: %s", line);
    cr_assert_eq(e, 1);
    /* 93 steps of Adam on 6000 images: a working model is far above chance (10%). */
    cr_assert(acc > 0.70 && acc <= 1.0, "test accuracy %.4f after one epoch on 6000 images", acc);
    cr_assert(loss > 0 && loss < 1.5 && sps > 0, "loss %.4f samples/s %.0f", loss, sps);
    char h1[32] = "", h2[32] = "";
    const char *a = strstr(out, "params_hash ");
    cr_assert(a, "no params_hash in:\n%s", out);
    const char *b = strstr(a + 1, "params_hash ");
    cr_assert(b, "one params_hash line, expected one per rank:\n%s", out);
    cr_assert_eq(sscanf(a, "params_hash %31s", h1), 1);
    cr_assert_eq(sscanf(b, "params_hash %31s", h2), 1);
    cr_assert_str_eq(h1, h2, "ranks ended with different parameters");
    char *c = proc_slurp(csv);
    cr_assert(!strncmp(c, "epoch,loss,test_acc,samples_per_s\n1,", 36), "csv:\n%s", c);
    free(c);
    free(out);
    free(err);
}

/* Runs braid-run -n 2 ddp_mlp on a slice with extra arguments (extra3 may be NULL, then
 * extra4 too); returns the params_hash, and the state_bytes it reports; the output in *out_p
 * (the caller frees it) unless out_p is NULL. */
static size_t run_hash_out(const char *extra1, const char *extra2, const char *extra3,
                           const char *extra4, char *hash, size_t len, char **out_p)
{
    char run[PATH_MAX + 16], prog[PATH_MAX + 16];
    snprintf(run, sizeof(run), "%s/braid-run", g_bin);
    snprintf(prog, sizeof(prog), "%s/ddp_mlp", g_bin);
    char *argv[] = {run,
                    "-n",
                    "2",
                    "--timeout",
                    "200",
                    prog,
                    "--epochs",
                    "1",
                    "--train-limit",
                    "2000",
                    "--test-limit",
                    "200",
                    "--batch",
                    "64",
                    "--bucket-mb",
                    "0.25",
                    (char *)extra1,
                    (char *)extra2,
                    (char *)extra3,
                    (char *)extra4,
                    NULL};
    int st;
    pid_t pid = spawn(argv, "zout", "zerr", NULL);
    cr_assert_eq(proc_wait(pid, 200, &st), 0, "the trainer did not finish in 200 s");
    char p[PATH_MAX + 16];
    snprintf(p, sizeof(p), "%s/zout", g_dir);
    char *out = proc_slurp(p);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s %s: status %d:\n%s", extra1, extra2, st,
              out);
    const char *a = strstr(out, "params_hash ");
    cr_assert(a, "no params_hash in:\n%s", out);
    cr_assert_eq(sscanf(a, "params_hash %31s", hash), 1);
    (void)len;
    size_t state = 0;
    const char *b = strstr(out, " state_bytes ");
    cr_assert(b && sscanf(b, " state_bytes %zu", &state) == 1, "no state_bytes in:\n%s", out);
    if (out_p)
        *out_p = out;
    else
        free(out);
    return state;
}

static size_t run_hash(const char *extra1, const char *extra2, const char *extra3,
                       const char *extra4, char *hash, size_t len)
{
    return run_hash_out(extra1, extra2, extra3, extra4, hash, len, NULL);
}

/* The line of out that starts with prefix, or NULL. */
static const char *line_starting(const char *out, const char *prefix)
{
    size_t k = strlen(prefix);
    for (const char *l = out; l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (!strncmp(l, prefix, k)) return l;
    return NULL;
}

/* --alternate (perf/ddp_overlap.sh ALTERNATE=1): the steps after the warm-up (5) alternate
 * between overlapped (even global steps: 6, 8, 10 of 12) and plain ones (5, 7, 9, 11), each
 * half reported on its own line; which steps overlap changes when the buckets are reduced,
 * not what they add (the same all-reduces in the same order), so all three runs end with the
 * same parameters. */
Test(ddp_mlp, alternate_reports_both_halves_and_ends_as_plain_runs_do)
{
    char h0[32], h1[32], h2[32], *out = NULL;
    run_hash("--max-steps", "12", "--no-overlap", NULL, h0, sizeof(h0));
    run_hash("--max-steps", "12", NULL, NULL, h1, sizeof(h1));
    run_hash_out("--max-steps", "12", "--alternate", NULL, h2, sizeof(h2), &out);
    cr_assert_str_eq(h0, h1, "overlap and no overlap ended with different parameters");
    cr_assert_str_eq(h0, h2, "--alternate ended with different parameters");
    const char *name[2] = {"overlap ", "no_overlap "};
    const int want[2] = {3, 4};
    for (int i = 0; i < 2; i++) {
        const char *l = line_starting(out, name[i]);
        cr_assert(l, "no line starting with '%s' in:\n%s", name[i], out);
        double st, bw, fin, mean;
        int k;
        cr_assert_eq(sscanf(l + strlen(name[i]),
                            "step_ms %lf backward_ms %lf finish_ms %lf steps %d mean_step_ms %lf",
                            &st, &bw, &fin, &k, &mean),
                     5, "malformed: %.200s", l);
        cr_assert_eq(k, want[i], "%ssteps %d, expected %d", name[i], k, want[i]);
        cr_assert(st > 0 && bw > 0 && fin >= 0 && st >= bw, "%.200s", l);
    }
    cr_assert_null(line_starting(out, "step_ms "), "a plain step_ms line as well:\n%s", out);
    free(out);
}

/* On 2 ranks a reduce-scatter + all-gather adds the same two values as the all-reduce, so
 * ZeRO-1 and ZeRO-2 (Adam on the shards) must end with exactly plain DDP's parameters (also
 * with W2 registered as 4 row blocks: each element's gradient is the same dot product). Per
 * rank state (gradients + optimizer + staging): DDP 3 x the 2678824 parameter bytes; ZeRO-1
 * the full gradients + half the moments; ZeRO-2 half the gradients + half the moments + its 2
 * staging buffers, each sized for its buckets: with W2 in 4 blocks of 0.25 MiB (the largest
 * buckets), 2 x 0.25 MiB, clearly below ZeRO-1. */
Test(ddp_mlp, zero1_and_zero2_end_bit_identical_to_plain_ddp_on_two_ranks)
{
    char h0[32], h1[32], h2[32], h3[32];
    const size_t bytes = 2678824; /* 784*512 + 512 + 512*512 + 512 + 512*10 + 10 floats */
    size_t s0 = run_hash("--zero", "0", NULL, NULL, h0, sizeof(h0));
    size_t s1 = run_hash("--zero", "1", NULL, NULL, h1, sizeof(h1));
    cr_assert_str_eq(h0, h1, "ZeRO-1 and plain DDP ended with different parameters");
    size_t s2 = run_hash("--zero", "2", NULL, NULL, h2, sizeof(h2));
    cr_assert_str_eq(h0, h2, "ZeRO-2 and plain DDP ended with different parameters");
    /* W2 in 4 row blocks: its gradient comes from 4 GEMMs, whose bits OpenBLAS's FMA kernels
     * (Haswell, Zen) do not promise to equal the whole GEMM's; so against plain DDP with the
     * same blocks */
    char h4[32];
    size_t s3 = run_hash("--zero", "2", "--w2-blocks", "4", h3, sizeof(h3));
    run_hash("--zero", "0", "--w2-blocks", "4", h4, sizeof(h4));
    cr_assert_str_eq(h4, h3,
                     "ZeRO-2 with W2 in 4 blocks and plain DDP with them ended differently");
    cr_assert_eq(s0, 3 * bytes, "DDP state %zu", s0);
    cr_assert_eq(s1, bytes + bytes / 2 * 2, "ZeRO-1 state %zu", s1);
    cr_assert_eq(s3, bytes / 2 + bytes / 2 * 2 + 2 * ((size_t)1 << 18), "ZeRO-2 state %zu", s3);
    cr_assert(s2 < s1 && s3 < s1 && s1 < s0, "state bytes: DDP %zu ZeRO-1 %zu ZeRO-2 %zu / %zu", s0,
              s1, s2, s3);
}

Test(ddp_mlp, rank_killed_mid_training_every_survivor_exits_nonzero_naming_it)
{
    char prog[PATH_MAX + 16];
    snprintf(prog, sizeof(prog), "%s/ddp_mlp", g_bin);
    char *argv[] = {prog,      "--epochs", "100", "--train-limit", "3000", "--test-limit", "300",
                    "--batch", "60",       NULL};
    const char *name[] = {"rank 1", NULL, "rank 1"};
    tr_kill_mid_training(g_dir, argv, 3, 1, name);
}
