/* Suite `launcher_jobs`: braid-run and what the ranks leave behind or ask of it: the processes
 * a rank starts end with the job (failure, --timeout, signals, success), --tag-output with a
 * stalled or vanished reader, forwarded signals (USR1, a double SIGHUP, TSTP/CONT) and `-x VAR`.
 * The rank programs are sh -c scripts that write the pids of what they start to files of a
 * temporary directory; a pid counts as gone once it is a zombie or absent. Every bound is
 * generous (seconds over the launcher's own 2 s grace), and the checks that matter are about
 * processes that would live for a minute without the launcher's help. */
#include "proc.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_dir[64]; /* /tmp/braid-jobs-XXXXXX */
static char g_run[PATH_MAX + 32];

static void setup(void)
{
    char bin[PATH_MAX];
    cr_assert(proc_bin_dir(bin, sizeof(bin)) == 0);
    snprintf(g_run, sizeof(g_run), "%s/braid-run", bin);
    cr_assert(access(g_run, X_OK) == 0, "%s not found: build the braid-run target", g_run);
    snprintf(g_dir, sizeof(g_dir), "/tmp/braid-jobs-XXXXXX");
    cr_assert(mkdtemp(g_dir), "mkdtemp: %s", strerror(errno));
    unsetenv("BRAID_ROOT");
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", g_dir);
    if (g_dir[0] && system(cmd) != 0) cr_log_warn("cannot remove %s", g_dir);
}

TestSuite(launcher_jobs, .init = setup, .fini = teardown, .timeout = 60);

static int g_err_fd = -1; /* braid-run's stderr when >= 0, else the file @dir/err */

/* Starts braid-run with args (NULL-ended; "@dir" is the temporary directory) with stdout on
 * out_fd (-1: the file @dir/out) and stderr in @dir/err (or on g_err_fd). */
static pid_t launch(int out_fd, ...)
{
    char *argv[32];
    int argc = 0;
    argv[argc++] = g_run;
    va_list ap;
    va_start(ap, out_fd);
    for (char *a; (a = va_arg(ap, char *)) && argc < 31;)
        argv[argc++] = !strcmp(a, "@dir") ? g_dir : a;
    va_end(ap);
    argv[argc] = NULL;
    pid_t parent = getpid(), pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(99);
        /* Its own process group, with its parent outside: not orphaned, so SIGTSTP stops it. */
        setpgid(0, 0);
        static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGTSTP, SIGCONT};
        for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
            signal(sigs[i], SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        char path[PATH_MAX + 16];
        snprintf(path, sizeof(path), "%s/out", g_dir);
        int o = out_fd >= 0 ? out_fd : open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        snprintf(path, sizeof(path), "%s/err", g_dir);
        int e = g_err_fd >= 0 ? g_err_fd : open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int in = open("/dev/null", O_RDONLY);
        if (o < 0 || e < 0 || in < 0 || dup2(in, 0) < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
            _exit(98);
        execv(argv[0], argv);
        _exit(97);
    }
    return pid;
}

static char *slurp_name(const char *name)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/%s", g_dir, name);
    return proc_slurp(path);
}

/* The pid in @dir/name, waiting up to 10 s for the file to be written. */
static pid_t pid_file(const char *name)
{
    for (double t0 = proc_now_s(); proc_now_s() - t0 < 10; usleep(20000)) {
        char *s = slurp_name(name);
        int pid = 0, ok = strchr(s, '\n') && sscanf(s, "%d", &pid) == 1;
        free(s);
        if (ok && pid > 0) return pid;
    }
    cr_assert_fail("%s/%s was not written within 10 s", g_dir, name);
    return 0;
}

static char proc_state(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return '?';
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')');
    return paren ? paren[2] : '?';
}

/* Fails (after killing it) if pid still runs. */
static void assert_gone(pid_t pid, const char *what)
{
    int live = proc_pid_alive(pid);
    if (live) kill(pid, SIGKILL);
    cr_assert(!live, "%s (pid %d) outlived braid-run", what, (int)pid);
}

static int wait_exit(pid_t pid, double secs, const char *what)
{
    int st = 0;
    cr_assert(proc_wait(pid, secs, &st) == 0, "braid-run did not end within %g s (%s)", secs, what);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ---- the processes the ranks start ------------------------------------------------------------
 */

/* Each rank starts a background sleep (a grandchild of braid-run) that records its pid. */

static void sleeper_script(char *buf, size_t len, const char *tail)
{
    snprintf(buf, len, "sleep 61 & echo $! > %s/child.$BRAID_RANK; %s", g_dir, tail);
}

Test(launcher_jobs, timeout_ends_what_the_ranks_started)
{
    char script[1024];
    sleeper_script(script, sizeof(script), "wait");
    pid_t pid = launch(-1, "-n", "2", "--timeout", "1", "sh", "-c", script, NULL);
    pid_t c0 = pid_file("child.0"), c1 = pid_file("child.1");
    int rc = wait_exit(pid, 20, "--timeout 1");
    char *err = slurp_name("err");
    cr_assert_eq(rc, 124, "exit %d; stderr:\n%s", rc, err);
    free(err);
    assert_gone(c0, "rank 0's sleep");
    assert_gone(c1, "rank 1's sleep");
}

Test(launcher_jobs, a_failed_rank_ends_what_the_others_started)
{
    char script[1024];
    sleeper_script(script, sizeof(script),
                   "if [ $BRAID_RANK = 1 ]; then sleep 0.3; exit 3; fi; wait");
    pid_t pid = launch(-1, "-n", "2", "sh", "-c", script, NULL);
    pid_t c0 = pid_file("child.0");
    cr_assert_eq(wait_exit(pid, 20, "a rank exits 3"), 3);
    assert_gone(c0, "rank 0's sleep");
}

Test(launcher_jobs, a_signal_ends_what_the_ranks_started)
{
    char script[1024];
    sleeper_script(script, sizeof(script), "wait");
    pid_t pid = launch(-1, "-n", "2", "sh", "-c", script, NULL);
    pid_t c0 = pid_file("child.0"), c1 = pid_file("child.1");
    kill(pid, SIGTERM);
    cr_assert_eq(wait_exit(pid, 20, "SIGTERM"), 128 + SIGTERM);
    assert_gone(c0, "rank 0's sleep");
    assert_gone(c1, "rank 1's sleep");
}

Test(launcher_jobs, a_successful_job_ends_what_its_ranks_left)
{
    char script[1024];
    sleeper_script(script, sizeof(script), "exit 0");
    pid_t pid = launch(-1, "-n", "2", "sh", "-c", script, NULL);
    pid_t c0 = pid_file("child.0"), c1 = pid_file("child.1");
    cr_assert_eq(wait_exit(pid, 20, "leftovers"), 0);
    char *err = slurp_name("err");
    cr_assert(strstr(err, "2 processes they started are still running"), "stderr:\n%s", err);
    free(err);
    assert_gone(c0, "rank 0's sleep");
    assert_gone(c1, "rank 1's sleep");
}

/* A process that started its own session (setsid: an ssh ControlMaster, an agent) is a
 * deliberate daemon and outlives the job, named on stderr; a plain background sleep does not. */
Test(launcher_jobs, a_daemon_in_its_own_session_is_spared)
{
    char script[1024];
    snprintf(script, sizeof(script),
             "setsid sh -c 'echo $$ > %s/daemon; exec sleep 61' </dev/null >/dev/null 2>&1 & "
             "sleep 61 & echo $! > %s/child.0; while [ ! -s %s/daemon ]; do sleep 0.05; done",
             g_dir, g_dir, g_dir);
    pid_t pid = launch(-1, "-n", "1", "sh", "-c", script, NULL);
    pid_t d = pid_file("daemon"), c0 = pid_file("child.0");
    int rc = wait_exit(pid, 20, "a daemon left running");
    char *err = slurp_name("err");
    int live = proc_pid_alive(d);
    if (live) kill(d, SIGKILL);
    cr_assert_eq(rc, 0, "exit %d; stderr:\n%s", rc, err);
    cr_assert(live, "the setsid daemon (pid %d) was killed; stderr:\n%s", (int)d, err);
    cr_assert(strstr(err, "own session (setsid) running") && strstr(err, "(sleep)"), "stderr:\n%s",
              err);
    free(err);
    assert_gone(c0, "rank 0's plain background sleep");
}

/* ---- --tag-output with a stalled or vanished reader -------------------------------------------
 */

Test(launcher_jobs, tag_output_stalled_reader_does_not_stop_the_timeout)
{
    int p[2];
    cr_assert(pipe2(p, O_CLOEXEC) == 0);
    char script[1024];
    snprintf(script, sizeof(script), "echo $$ > %s/rank.pid; exec yes", g_dir);
    pid_t pid = launch(p[1], "--tag-output", "--timeout", "1", "-n", "1", "sh", "-c", script, NULL);
    close(p[1]);
    pid_t yes = pid_file("rank.pid");
    /* Nobody reads p[0]: the pipe fills at once. The rank must still end by the timeout. */
    double t0 = proc_now_s();
    while (proc_pid_alive(yes) && proc_now_s() - t0 < 15)
        usleep(20000);
    int live = proc_pid_alive(yes);
    close(p[0]); /* now braid-run's pending output meets EPIPE */
    int rc = wait_exit(pid, 20, "stdout closed");
    /* Read once braid-run has ended: the rank may be gone before its note is written. */
    char *err = slurp_name("err");
    cr_assert(!live, "the rank still ran 15 s after a 1 s timeout; stderr:\n%s", err);
    cr_assert(strstr(err, "timed out after 1 s"), "stderr:\n%s", err);
    cr_assert_eq(rc, 124);
    free(err);
}

/* The reader never reads, even after the ranks are gone: once the job timed out, the queued
 * output gets BR_OUTPUT_GRACE_MS (2 s) and is then dropped with a note on stderr, so --timeout
 * still bounds braid-run (`--timeout 2 --tag-output ... | (sleep 600; cat)`). */
Test(launcher_jobs, tag_output_stalled_reader_is_bounded_by_the_timeout)
{
    int p[2];
    cr_assert(pipe2(p, O_CLOEXEC) == 0);
    pid_t pid = launch(p[1], "--tag-output", "--timeout", "1", "-n", "1", "yes", NULL);
    close(p[1]);
    double t0 = proc_now_s();
    int st = 0, ended = proc_wait(pid, 15, &st) == 0;
    double took = proc_now_s() - t0;
    char *err = slurp_name("err");
    close(p[0]); /* (proc_wait killed braid-run if it still ran) */
    cr_assert(ended, "braid-run still ran 15 s after a 1 s timeout; stderr:\n%s", err);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 124, "status 0x%x after %.1f s", st, took);
    cr_assert(strstr(err, "timed out after 1 s") && strstr(err, "dropping"), "stderr:\n%s", err);
    free(err);
}

/* stdout and stderr are one pipe (2>&1) that nobody reads: a write to stderr right after stdout
 * filled the pipe must not block braid-run (the timeout, the kills and the exit go on). */
Test(launcher_jobs, tag_output_shared_stalled_pipe_does_not_block)
{
    int p[2];
    cr_assert(pipe2(p, O_CLOEXEC) == 0);
    g_err_fd = p[1];
    pid_t pid = launch(p[1], "--tag-output", "--timeout", "1", "-n", "2", "sh", "-c",
                       "yes out & exec yes err >&2", NULL);
    close(p[1]);
    double t0 = proc_now_s();
    int st = 0, ended = proc_wait(pid, 15, &st) == 0;
    double took = proc_now_s() - t0;
    close(p[0]);
    cr_assert(ended, "braid-run (2>&1 into a stalled pipe) still ran 15 s after a 1 s timeout");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 124, "status 0x%x after %.1f s", st, took);
}

Test(launcher_jobs, tag_output_closed_reader_ends_the_job)
{
    int p[2];
    cr_assert(pipe2(p, O_CLOEXEC) == 0);
    pid_t pid = launch(p[1], "--tag-output", "-n", "2", "yes", NULL);
    close(p[1]);
    char buf[64];
    cr_assert(read(p[0], buf, sizeof(buf)) > 0);
    close(p[0]); /* as `| head -1` does */
    int rc = wait_exit(pid, 20, "stdout's reader gone");
    cr_assert_eq(rc, 128 + SIGPIPE, "exit %d", rc);
}

/* ---- signals ----------------------------------------------------------------------------------
 */

Test(launcher_jobs, sigusr1_reaches_the_ranks)
{
    char script[1024];
    snprintf(script, sizeof(script),
             "trap 'echo usr1 > %s/usr1.$BRAID_RANK; exit 0' USR1; echo $$ > %s/rank.$BRAID_RANK; "
             "while :; do sleep 0.05; done",
             g_dir, g_dir);
    pid_t pid = launch(-1, "-n", "2", "sh", "-c", script, NULL);
    pid_file("rank.0");
    pid_file("rank.1");
    kill(pid, SIGUSR1);
    int rc = wait_exit(pid, 20, "SIGUSR1");
    char *err = slurp_name("err");
    cr_assert_eq(rc, 0, "exit %d; stderr:\n%s", rc, err);
    free(err);
    for (int r = 0; r < 2; r++) {
        char name[16];
        snprintf(name, sizeof(name), "usr1.%d", r);
        char *s = slurp_name(name);
        cr_assert_str_eq(s, "usr1\n", "rank %d's USR1 trap did not run", r);
        free(s);
    }
}

Test(launcher_jobs, a_second_sighup_does_not_kill_the_ranks)
{
    /* The trap takes 1 s to finish; a second SIGHUP (a hangup's second delivery) must not cut
     * it short with SIGKILL as a second SIGINT would. */
    char script[1024];
    snprintf(script, sizeof(script),
             "trap 'echo hup >> %s/hup.$BRAID_RANK; sleep 1; echo done > %s/done.$BRAID_RANK; "
             "exit 0' HUP; echo $$ > %s/rank.$BRAID_RANK; while :; do sleep 0.05; done",
             g_dir, g_dir, g_dir);
    pid_t pid = launch(-1, "-n", "2", "sh", "-c", script, NULL);
    pid_file("rank.0");
    pid_file("rank.1");
    kill(pid, SIGHUP);
    for (double t0 = proc_now_s(); proc_now_s() - t0 < 10; usleep(10000)) {
        char *err = slurp_name("err");
        int seen = strstr(err, "forwarding it to 2 ranks") != NULL;
        free(err);
        if (seen) break;
    }
    kill(pid, SIGHUP);
    cr_assert_eq(wait_exit(pid, 20, "two SIGHUPs"), 128 + SIGHUP);
    char *err = slurp_name("err");
    cr_assert(!strstr(err, "while terminating"), "stderr:\n%s", err);
    for (int r = 0; r < 2; r++) {
        char name[16];
        snprintf(name, sizeof(name), "done.%d", r);
        char *s = slurp_name(name);
        cr_assert_str_eq(s, "done\n", "rank %d's HUP trap was cut short; stderr:\n%s", r, err);
        free(s);
        snprintf(name, sizeof(name), "hup.%d", r);
        s = slurp_name(name);
        cr_assert_str_eq(s, "hup\n", "rank %d got SIGHUP more than once", r);
        free(s);
    }
    free(err);
}

Test(launcher_jobs, sigtstp_stops_and_sigcont_continues_the_job)
{
    char script[1024];
    snprintf(script, sizeof(script), "echo $$ > %s/rank.$BRAID_RANK; exec sleep 61", g_dir);
    pid_t pid = launch(-1, "-n", "2", "sh", "-c", script, NULL);
    pid_t r0 = pid_file("rank.0"), r1 = pid_file("rank.1");
    kill(pid, SIGTSTP);
    int st;
    cr_assert_eq(waitpid(pid, &st, WUNTRACED), pid);
    cr_assert(WIFSTOPPED(st) && WSTOPSIG(st) == SIGTSTP, "status 0x%x", st);
    for (double t0 = proc_now_s(); proc_now_s() - t0 < 10; usleep(10000))
        if (proc_state(r0) == 'T' && proc_state(r1) == 'T') break;
    cr_assert(proc_state(r0) == 'T' && proc_state(r1) == 'T', "ranks not stopped: %c %c",
              proc_state(r0), proc_state(r1));
    kill(pid, SIGCONT);
    for (double t0 = proc_now_s(); proc_now_s() - t0 < 10; usleep(10000))
        if (proc_state(r0) == 'S' && proc_state(r1) == 'S') break;
    cr_assert(proc_state(r0) == 'S' && proc_state(r1) == 'S', "ranks not continued: %c %c",
              proc_state(r0), proc_state(r1));
    kill(pid, SIGTERM);
    cr_assert_eq(wait_exit(pid, 20, "SIGTERM"), 128 + SIGTERM);
}

/* ---- options ----------------------------------------------------------------------------------
 */

Test(launcher_jobs, x_without_value_passes_the_current_value)
{
    setenv("BRAID_TEST_XVAR", "from-the-launcher", 1);
    pid_t pid =
        launch(-1, "-x", "BRAID_TEST_XVAR", "-n", "2", "sh", "-c", "echo $BRAID_TEST_XVAR", NULL);
    int rc = wait_exit(pid, 20, "-x VAR");
    char *out = slurp_name("out"), *err = slurp_name("err");
    cr_assert_eq(rc, 0, "exit %d; stderr:\n%s", rc, err);
    cr_assert_str_eq(out, "from-the-launcher\nfrom-the-launcher\n");
    free(out);
    free(err);
    pid = launch(-1, "-x", "BRAID_ROOT", "-n", "1", "true", NULL);
    cr_assert_eq(wait_exit(pid, 20, "-x BRAID_ROOT"), 2);
}
