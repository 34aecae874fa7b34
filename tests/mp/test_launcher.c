/* Suite `launcher`: tools/braid-run, driven as a separate process with the rank program
 * tests/helpers/braid_testprog (its action language is documented in that file).
 *
 * Both binaries are looked up in $BRAID_BIN_DIR (set by ctest), else in the directory of this
 * test binary (/proc/self/exe), so running build/bin/braid_tests directly (with a --filter on
 * the launcher suite) works too.
 * Every test gets a fresh temporary directory: ranks write their pids there ("pidfile"), and
 * after the launcher has exited no such pid may still be alive. */
#include "proc.h"

#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_ARGS 64

static char g_dir[PATH_MAX];       /* this test's temporary directory */
static char g_run[PATH_MAX + 32];  /* braid-run */
static char g_prog[PATH_MAX + 32]; /* braid_testprog */
static int g_nohup;                /* start braid-run with SIGHUP ignored */

typedef struct {
    int status; /* from waitpid */
    double secs;
    char *out, *err;
} result_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void locate_binaries(void)
{
    char dir[PATH_MAX];
    const char *env = getenv("BRAID_BIN_DIR");
    if (env && *env) {
        snprintf(dir, sizeof(dir), "%s", env);
    } else {
        ssize_t n = readlink("/proc/self/exe", dir, sizeof(dir) - 1);
        cr_assert(n > 0, "readlink(/proc/self/exe): %s", strerror(errno));
        dir[n] = '\0';
        *strrchr(dir, '/') = '\0';
    }
    snprintf(g_run, sizeof(g_run), "%s/braid-run", dir);
    snprintf(g_prog, sizeof(g_prog), "%s/braid_testprog", dir);
    cr_assert(access(g_run, X_OK) == 0, "%s not found: build the braid-run target", g_run);
    cr_assert(access(g_prog, X_OK) == 0, "%s not found: build the braid_testprog target", g_prog);
}

static void setup(void)
{
    locate_binaries();
    snprintf(g_dir, sizeof(g_dir), "/tmp/braid-launcher-XXXXXX");
    cr_assert(mkdtemp(g_dir), "mkdtemp: %s", strerror(errno));
    unsetenv("BRAID_ROOT"); /* the launcher honours an inherited one */
}

static void remove_tree(const char *path)
{
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char sub[PATH_MAX * 2];
            snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
            remove_tree(sub);
        }
        closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

static void teardown(void)
{
    if (g_dir[0]) remove_tree(g_dir);
}

TestSuite(launcher, .init = setup, .fini = teardown, .timeout = 60);

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return strdup("");
    char *buf = NULL;
    size_t cap = 0, len = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = 2 * cap + 8192;
            buf = realloc(buf, cap);
        }
        size_t n = fread(buf + len, 1, cap - len - 1, f);
        if (n == 0) break;
        len += n;
    }
    fclose(f);
    buf[len] = '\0';
    return buf;
}

/* Starts braid-run with the given arguments (NULL-terminated); "@prog" stands for the test
 * program and "@dir" for the temporary directory. stdout/stderr go to @dir/launcher.{out,err}. */
static pid_t spawn_v(const char *first, va_list ap)
{
    char *argv[MAX_ARGS];
    int argc = 0;
    argv[argc++] = g_run;
    for (const char *a = first; a; a = va_arg(ap, const char *)) {
        cr_assert(argc < MAX_ARGS - 1);
        argv[argc++] = !strcmp(a, "@prog") ? g_prog : !strcmp(a, "@dir") ? g_dir : (char *)a;
    }
    argv[argc] = NULL;
    char out[PATH_MAX + 16], err[PATH_MAX + 16];
    snprintf(out, sizeof(out), "%s/launcher.out", g_dir);
    snprintf(err, sizeof(err), "%s/launcher.err", g_dir);
    pid_t parent = getpid(), pid = fork();
    cr_assert(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* a timed-out test takes the job with it */
        if (getppid() != parent) _exit(99);
        /* Started in the background by a script, we may have inherited SIGINT ignored, which
         * braid-run (rightly) keeps ignoring. */
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, g_nohup ? SIG_IGN : SIG_DFL);
        int in = open("/dev/null", O_RDONLY);
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (in < 0 || o < 0 || e < 0 || dup2(in, 0) < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
            _exit(98);
        execv(argv[0], argv);
        _exit(97);
    }
    return pid;
}

static pid_t spawn(const char *first, ...)
{
    va_list ap;
    va_start(ap, first);
    pid_t pid = spawn_v(first, ap);
    va_end(ap);
    return pid;
}

static void wait_result(pid_t pid, double t0, result_t *res)
{
    int st;
    pid_t w;
    while ((w = waitpid(pid, &st, 0)) < 0 && errno == EINTR) {
    }
    cr_assert(w == pid, "waitpid: %s", strerror(errno));
    res->status = st;
    res->secs = now_s() - t0;
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/launcher.out", g_dir);
    res->out = slurp(path);
    snprintf(path, sizeof(path), "%s/launcher.err", g_dir);
    res->err = slurp(path);
}

/* Runs braid-run to completion. */
static void run(result_t *res, const char *first, ...)
{
    va_list ap;
    va_start(ap, first);
    double t0 = now_s();
    pid_t pid = spawn_v(first, ap);
    va_end(ap);
    wait_result(pid, t0, res);
}

static void free_result(result_t *res)
{
    free(res->out);
    free(res->err);
}

static int exit_code(const result_t *res)
{
    return WIFEXITED(res->status) ? WEXITSTATUS(res->status) : -WTERMSIG(res->status);
}

#define assert_exit(res, code)                                                                     \
    cr_assert_eq(exit_code(res), (code), "exit %d, expected %d; stderr:\n%s", exit_code(res),      \
                 (code), (res)->err)

/* Reads @dir/rank.R.pid; 0 if missing. */
static pid_t rank_pid(int r)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/rank.%d.pid", g_dir, r);
    FILE *f = fopen(path, "r");
    int pid = 0;
    if (f) {
        if (fscanf(f, "%d", &pid) != 1) pid = 0;
        fclose(f);
    }
    return pid;
}

/* Waits (up to 10 s) until ranks 0..n-1 have written their pid files. */
static void wait_pidfiles(int n)
{
    for (double t0 = now_s(); now_s() - t0 < 10;) {
        int have = 0;
        for (int r = 0; r < n; r++)
            have += rank_pid(r) > 0;
        if (have == n) return;
        usleep(20000);
    }
    cr_assert_fail("the ranks did not all write their pid files within 10 s");
}

/* Fails (after killing them) if any rank that wrote a pid file is still alive; the ranks of
 * a finished launcher must be gone within max_wait seconds. Returns how many pids it saw. */
static int assert_no_leftovers(int n, double max_wait)
{
    int seen = 0, left = 0;
    double t0 = now_s();
    for (int r = 0; r < n; r++) {
        pid_t pid = rank_pid(r);
        if (pid <= 0) continue;
        seen++;
        while (proc_pid_alive(pid) && now_s() - t0 < max_wait)
            usleep(10000);
        if (proc_pid_alive(pid)) {
            left++;
            kill(pid, SIGKILL);
        }
    }
    cr_assert_eq(left, 0, "%d rank(s) still running after the launcher exited", left);
    return seen;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static int read_sig(int r)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/rank.%d.sig", g_dir, r);
    FILE *f = fopen(path, "r");
    int sig = 0;
    if (f) {
        if (fscanf(f, "%d", &sig) != 1) sig = 0;
        fclose(f);
    }
    return sig;
}

/* ---- environment ----------------------------------------------------------------------------- */

typedef struct {
    int rank, nranks, local_rank, local_size;
    char root[128], secret[128];
} envline_t;

static int parse_envline(const char *line, envline_t *e)
{
    return sscanf(line, "rank=%d nranks=%d local_rank=%d local_size=%d root=%127s secret=%127s",
                  &e->rank, &e->nranks, &e->local_rank, &e->local_size, e->root, e->secret) == 6;
}

/* Parses n print lines from out (any order) into e[rank]; checks the whole contract. */
static void check_env(const char *out, int n, envline_t *e)
{
    cr_assert_eq(count_lines(out), n, "expected %d lines, got:\n%s", n, out);
    int seen[1024] = {0};
    envline_t first;
    const char *p = out;
    for (int i = 0; i < n; i++) {
        envline_t x;
        cr_assert(parse_envline(p, &x), "bad line: %.200s", p);
        cr_assert(x.rank >= 0 && x.rank < n, "rank %d out of range", x.rank);
        cr_assert(!seen[x.rank], "rank %d seen twice", x.rank);
        seen[x.rank] = 1;
        cr_assert_eq(x.nranks, n);
        cr_assert_eq(x.local_rank, x.rank);
        cr_assert_eq(x.local_size, n);
        if (i == 0) {
            first = x;
            cr_assert_eq(strlen(x.secret), 32, "secret '%s' is not 32 hex digits", x.secret);
            cr_assert_eq(strspn(x.secret, "0123456789abcdef"), 32, "secret '%s' not hex", x.secret);
        }
        cr_assert_str_eq(x.root, first.root);
        cr_assert_str_eq(x.secret, first.secret);
        e[x.rank] = x;
        p = strchr(p, '\n') + 1;
    }
}

static void check_env_n(int n)
{
    char ns[16];
    snprintf(ns, sizeof(ns), "%d", n);
    result_t res;
    run(&res, "-n", ns, "@prog", "print", NULL);
    assert_exit(&res, 0);
    envline_t e[8];
    check_env(res.out, n, e);
    int port = 0;
    cr_assert(sscanf(e[0].root, "127.0.0.1:%d", &port) == 1 && port > 0 && port < 65536,
              "root '%s' is not 127.0.0.1:<port>", e[0].root);
    cr_assert_str_empty(res.err);
    free_result(&res);
}

Test(launcher, env_1_rank)
{
    check_env_n(1);
}

Test(launcher, env_4_ranks)
{
    check_env_n(4);
}

Test(launcher, env_8_ranks)
{
    check_env_n(8);
}

Test(launcher, secret_is_fresh_per_run)
{
    result_t a, b;
    envline_t ea[2], eb[2];
    setenv("BRAID_SECRET", "00000000000000000000000000000000", 1); /* never inherited */
    run(&a, "-n", "2", "@prog", "print", NULL);
    run(&b, "-n", "2", "@prog", "print", NULL);
    assert_exit(&a, 0);
    assert_exit(&b, 0);
    check_env(a.out, 2, ea);
    check_env(b.out, 2, eb);
    cr_assert_str_neq(ea[0].secret, eb[0].secret);
    cr_assert_str_neq(ea[0].secret, "00000000000000000000000000000000");
    free_result(&a);
    free_result(&b);
}

Test(launcher, root_from_env_and_option)
{
    result_t res;
    envline_t e[3];
    setenv("BRAID_ROOT", "127.0.0.1:45678", 1);
    run(&res, "-n", "3", "@prog", "print", NULL);
    assert_exit(&res, 0);
    check_env(res.out, 3, e);
    cr_assert_str_eq(e[2].root, "127.0.0.1:45678");
    free_result(&res);

    run(&res, "--root", "[::1]:5000", "-n", "3", "@prog", "print", NULL);
    assert_exit(&res, 0);
    check_env(res.out, 3, e);
    cr_assert_str_eq(e[1].root, "[::1]:5000");
    free_result(&res);
}

Test(launcher, extra_env)
{
    result_t res;
    run(&res, "-n", "2", "-x", "FOO=bar=baz", "-x", "BRAID_DEBUG=INFO", "--", "@prog", "env", "FOO",
        "env", "BRAID_DEBUG", NULL);
    assert_exit(&res, 0);
    cr_assert_str_eq(res.out, "FOO=bar=baz\nBRAID_DEBUG=INFO\nFOO=bar=baz\nBRAID_DEBUG=INFO\n");
    free_result(&res);
}

/* ---- output ---------------------------------------------------------------------------------- */

Test(launcher, tag_output_prefixes_whole_lines)
{
    /* Every rank writes "par", sleeps, then "tial\n": untagged, the halves of different ranks
     * would interleave. The last line has no newline; it must still come out whole. */
    result_t res;
    run(&res, "--tag-output", "-n", "6", "@prog", "print", "echo-err", "to-stderr", "write", "par",
        "sleep", "0.2", "echo", "tial", "write", "no-newline", NULL);
    assert_exit(&res, 0);
    cr_assert_eq(count_lines(res.out), 18, "stdout:\n%s", res.out);
    int prints = 0, partial[6] = {0}, tail[6] = {0};
    for (const char *p = res.out; *p; p = strchr(p, '\n') + 1) {
        int r, off = 0;
        cr_assert(sscanf(p, "[%d] %n", &r, &off) == 1 && off > 0 && r >= 0 && r < 6,
                  "untagged line: %.100s", p);
        const char *body = p + off;
        envline_t e;
        if (parse_envline(body, &e)) {
            cr_assert_eq(e.rank, r, "line of rank %d tagged [%d]", e.rank, r);
            prints++;
        } else if (!strncmp(body, "partial\n", 8)) {
            partial[r]++;
        } else if (!strncmp(body, "no-newline\n", 11)) {
            tail[r]++;
        } else {
            cr_assert_fail("unexpected line: %.100s", p);
        }
    }
    cr_assert_eq(prints, 6);
    for (int r = 0; r < 6; r++) {
        cr_assert_eq(partial[r], 1, "rank %d: partial line not joined:\n%s", r, res.out);
        cr_assert_eq(tail[r], 1, "rank %d: unterminated last line lost:\n%s", r, res.out);
    }
    cr_assert_eq(count_lines(res.err), 6, "stderr:\n%s", res.err);
    for (int r = 0; r < 6; r++) {
        char want[32];
        snprintf(want, sizeof(want), "[%d] to-stderr\n", r);
        cr_assert(strstr(res.err, want), "missing '%s' in stderr:\n%s", want, res.err);
    }
    free_result(&res);
}

Test(launcher, output_dir)
{
    result_t res;
    char dir[PATH_MAX + 16];
    snprintf(dir, sizeof(dir), "%s/out/sub", g_dir); /* created by braid-run */
    run(&res, "--output-dir", dir, "-n", "3", "@prog", "print", "echo-err", "err-line", NULL);
    assert_exit(&res, 0);
    cr_assert_str_empty(res.out);
    for (int r = 0; r < 3; r++) {
        char path[PATH_MAX + 64];
        envline_t e;
        snprintf(path, sizeof(path), "%s/rank.%d.out", dir, r);
        char *out = slurp(path);
        cr_assert(parse_envline(out, &e) && e.rank == r, "%s: %s", path, out);
        snprintf(path, sizeof(path), "%s/rank.%d.err", dir, r);
        char *err = slurp(path);
        cr_assert_str_eq(err, "err-line\n");
        free(out);
        free(err);
    }
    free_result(&res);
}

/* ---- failures -------------------------------------------------------------------------------- */

Test(launcher, rank_exit_status_terminates_the_others)
{
    result_t res;
    run(&res, "-n", "4", "@prog", "pidfile", "@dir", "sleep", "0.3", "exit", "3", "1", "hang",
        NULL);
    assert_exit(&res, 3);
    cr_assert(strstr(res.err, "rank 1 (pid ") && strstr(res.err, "exited with status 3"),
              "stderr:\n%s", res.err);
    cr_assert(strstr(res.err, "terminating the other 3 ranks"), "stderr:\n%s", res.err);
    cr_assert_eq(assert_no_leftovers(4, 0.5), 4);
    free_result(&res);
}

Test(launcher, rank_killed_by_signal)
{
    result_t res;
    run(&res, "-n", "4", "@prog", "pidfile", "@dir", "sleep", "0.3", "kill-self", "2", "hang",
        NULL);
    assert_exit(&res, 128 + SIGKILL);
    cr_assert(strstr(res.err, "rank 2 (pid ") && strstr(res.err, "was killed by signal 9 (Killed)"),
              "stderr:\n%s", res.err);
    cr_assert(strstr(res.err, "terminating the other 3 ranks"), "stderr:\n%s", res.err);
    cr_assert_eq(assert_no_leftovers(4, 0.5), 4);
    free_result(&res);
}

Test(launcher, sigkill_after_grace_when_sigterm_is_ignored)
{
    result_t res;
    run(&res, "-n", "3", "@prog", "pidfile", "@dir", "ignore-term", "sleep", "0.3", "exit", "4",
        "0", "hang", NULL);
    assert_exit(&res, 4);
    cr_assert(strstr(res.err, "2 ranks still running after the grace period; sending SIGKILL"),
              "stderr:\n%s", res.err);
    cr_assert(res.secs >= 2.0 && res.secs < 10, "took %.2f s (grace is 2 s)", res.secs);
    cr_assert_eq(assert_no_leftovers(3, 0.5), 3);
    free_result(&res);
}

Test(launcher, timeout_kills_a_hanging_job)
{
    result_t res;
    run(&res, "--timeout", "1", "-n", "3", "@prog", "pidfile", "@dir", "hang", NULL);
    assert_exit(&res, 124);
    cr_assert(strstr(res.err, "timed out after 1 s"), "stderr:\n%s", res.err);
    cr_assert(res.secs >= 0.9 && res.secs < 10, "took %.2f s", res.secs);
    cr_assert_eq(assert_no_leftovers(3, 0.5), 3);
    free_result(&res);
}

Test(launcher, timeout_not_reached)
{
    result_t res;
    run(&res, "--timeout", "30", "-n", "2", "@prog", "print", NULL);
    assert_exit(&res, 0);
    cr_assert(res.secs < 10);
    free_result(&res);
}

/* ---- signals --------------------------------------------------------------------------------- */

static void check_forwarded(int sig)
{
    result_t res;
    double t0 = now_s();
    pid_t pid = spawn("-n", "3", "@prog", "trap", "@dir", "pidfile", "@dir", "hang", NULL);
    wait_pidfiles(3);
    cr_assert_eq(kill(pid, sig), 0);
    wait_result(pid, t0, &res);
    cr_assert(WIFSIGNALED(res.status) && WTERMSIG(res.status) == sig,
              "braid-run should die of signal %d, status 0x%x; stderr:\n%s", sig, res.status,
              res.err);
    cr_assert(strstr(res.err, "forwarding it to 3 ranks"), "stderr:\n%s", res.err);
    for (int r = 0; r < 3; r++)
        cr_assert_eq(read_sig(r), sig, "rank %d did not get signal %d", r, sig);
    assert_no_leftovers(3, 0.5);
    free_result(&res);
}

Test(launcher, sigterm_is_forwarded)
{
    check_forwarded(SIGTERM);
}

Test(launcher, sigint_is_forwarded)
{
    check_forwarded(SIGINT);
}

Test(launcher, sighup_is_forwarded)
{
    check_forwarded(SIGHUP);
}

Test(launcher, nohup_is_respected)
{
    /* Under nohup, a SIGHUP neither stops braid-run nor reaches the ranks. */
    result_t res;
    g_nohup = 1;
    double t0 = now_s();
    pid_t pid = spawn("-n", "2", "@prog", "pidfile", "@dir", "sleep", "1", "echo", "done", NULL);
    wait_pidfiles(2);
    cr_assert_eq(kill(pid, SIGHUP), 0);
    wait_result(pid, t0, &res);
    assert_exit(&res, 0);
    cr_assert_str_eq(res.out, "done\ndone\n");
    cr_assert_str_empty(res.err);
    free_result(&res);
}

Test(launcher, ranks_die_with_a_killed_launcher)
{
    prctl(PR_SET_CHILD_SUBREAPER, 1); /* orphaned ranks come to us, so we can reap them */
    pid_t pid = spawn("-n", "3", "@prog", "pidfile", "@dir", "hang", NULL);
    wait_pidfiles(3);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    for (double t0 = now_s(); now_s() - t0 < 5;) {
        while (waitpid(-1, NULL, WNOHANG) > 0) {
        }
        int alive = 0;
        for (int r = 0; r < 3; r++)
            alive += proc_pid_alive(rank_pid(r));
        if (!alive) break;
        usleep(10000);
    }
    assert_no_leftovers(3, 0);
}

/* ---- launch errors and usage ----------------------------------------------------------------- */

Test(launcher, missing_program)
{
    result_t res;
    run(&res, "-n", "2", "braid-no-such-program", "arg", NULL);
    assert_exit(&res, 127);
    cr_assert(strstr(res.err, "braid-run: cannot execute 'braid-no-such-program': No such file or "
                              "directory"),
              "stderr:\n%s", res.err);
    cr_assert_eq(count_lines(res.err), 1, "one message, not one per rank:\n%s", res.err);
    free_result(&res);

    run(&res, "-n", "4", "/nonexistent/dir/prog", NULL);
    assert_exit(&res, 127);
    cr_assert(strstr(res.err, "cannot execute '/nonexistent/dir/prog'"), "%s", res.err);
    free_result(&res);
}

Test(launcher, program_not_executable)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/not-exec", g_dir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs("data\n", f);
    fclose(f);
    result_t res;
    run(&res, "-n", "2", path, NULL);
    assert_exit(&res, 126);
    cr_assert(strstr(res.err, "Permission denied"), "stderr:\n%s", res.err);
    free_result(&res);
}

Test(launcher, bad_usage)
{
    static const char *const cases[][8] = {
        {"@prog", NULL},                       /* no -n */
        {"-n", NULL},                          /* -n without a value */
        {"-n", "0", "@prog", NULL},            /* out of range */
        {"-n", "1025", "@prog", NULL},         /* out of range */
        {"-n", "4x", "@prog", NULL},           /* not a number */
        {"-n", "2", NULL},                     /* no program */
        {"-n", "2", "--bogus", "@prog", NULL}, /* unknown option */
        {"-n", "2", "-q", "@prog", NULL},      /* unknown short option */
        {"-n", "2", "--timeout", "0", "@prog", NULL},
        {"-n", "2", "--timeout", "soon", "@prog", NULL},
        {"-n", "2", "-x", "=NONAME", "@prog", NULL},
        {"-n", "2", "-x", "BRAID_RANK=3", "@prog", NULL},
        {"-n", "2", "--root", "nohostport", "@prog", NULL},
        {"-n", "2", "--tag-output", "--output-dir", "/tmp", "@prog", NULL},
        {"-n", "2", "--bind", "socket", "@prog", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *const *c = cases[i];
        result_t res;
        run(&res, c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]);
        cr_assert_eq(exit_code(&res), 2, "case %zu (%s %s %s): exit %d, stderr:\n%s", i, c[0],
                     c[1] ? c[1] : "", c[1] && c[2] ? c[2] : "", exit_code(&res), res.err);
        cr_assert(strstr(res.err, "braid-run: ") && strstr(res.err, "Try 'braid-run --help'"),
                  "case %zu: stderr:\n%s", i, res.err);
        cr_assert_str_empty(res.out);
        free_result(&res);
    }
}

/* ---- --bind ---------------------------------------------------------------------------------- */

/* The cpus of rank r's "cpus" line in out, as a bit mask (cpus < 64); -1 when missing. */
static long long rank_cpus(const char *out, int r, int *count_p)
{
    char key[32];
    snprintf(key, sizeof(key), "cpus %d:", r);
    const char *p = strstr(out, key);
    if (!p) return -1;
    p += strlen(key);
    long long mask = 0;
    int count = 0;
    while (*p == ' ') {
        int c = (int)strtol(p, (char **)&p, 10);
        if (c < 64) mask |= 1ll << c;
        count++;
    }
    *count_p = count;
    return mask;
}

Test(launcher, bind_modes)
{
    cpu_set_t mine;
    cr_assert_eq(sched_getaffinity(0, sizeof(mine), &mine), 0);
    int ncpu = CPU_COUNT(&mine);
    long long all = 0;
    for (int c = 0; c < 64; c++)
        if (CPU_ISSET(c, &mine)) all |= 1ll << c;
    static const char *const modes[] = {"none", "core", "auto", "full", NULL};
    for (int m = 0; m < 5; m++)                     /* 4: no --bind, the default (full) */
        for (int n = 1; n <= ncpu + 1; n += ncpu) { /* one cpu each, and one rank too many */
            char ns[16];
            snprintf(ns, sizeof(ns), "%d", n);
            result_t res;
            if (modes[m])
                run(&res, "-n", ns, "--bind", modes[m], "@prog", "cpus", NULL);
            else
                run(&res, "-n", ns, "@prog", "cpus", NULL);
            assert_exit(&res, 0);
            const char *mode = modes[m] ? modes[m] : "(default)";
            int bound = m == 1 || (m == 2 && n <= ncpu) || (m >= 3 && n >= ncpu);
            long long used = 0;
            for (int r = 0; r < n; r++) {
                int count = 0;
                long long got = rank_cpus(res.out, r, &count);
                cr_assert(got >= 0, "%s -n %d: no line of rank %d:\n%s", mode, n, r, res.out);
                if (!bound) {
                    cr_assert_eq(count, ncpu, "--bind %s -n %d: rank %d bound:\n%s", mode, n, r,
                                 res.out);
                    continue;
                }
                cr_assert_eq(count, 1, "--bind %s -n %d: rank %d not on one cpu:\n%s", mode, n, r,
                             res.out);
                cr_assert(got & all, "rank %d on a cpu the launcher may not use", r);
                if (r < ncpu) {
                    cr_assert(!(used & got),
                              "--bind %s: two of the first %d ranks share a cpu:\n%s", mode, ncpu,
                              res.out);
                    used |= got;
                }
            }
            free_result(&res);
        }
}

Test(launcher, help_and_version)
{
    result_t res;
    run(&res, "--help", NULL);
    assert_exit(&res, 0);
    cr_assert(strstr(res.out, "Usage: braid-run -n N"), "%s", res.out);
    free_result(&res);
    run(&res, "--version", NULL);
    assert_exit(&res, 0);
    cr_assert(!strncmp(res.out, "braid-run (braid) ", 18), "%s", res.out);
    free_result(&res);
}
