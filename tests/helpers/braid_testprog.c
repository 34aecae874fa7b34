/* braid_testprog: the rank program that tests/mp/test_launcher.c starts under braid-run.
 *
 * It runs its arguments as a list of actions, in order. An action that names a RANK does
 * nothing on the other ranks (BRAID_RANK; -1 when unset).
 *   print              one stdout line: "rank=R nranks=N local_rank=L local_size=S root=X
 *                      secret=Y" (unset variables print as "-")
 *   env VAR            one stdout line "VAR=value" ("VAR unset" when unset)
 *   cpus               one stdout line "cpus R: C1 C2 ..." (the cpus this process may run on)
 *   echo TEXT          TEXT and a newline on stdout, in one write()
 *   echo-err TEXT      the same on stderr
 *   write TEXT         TEXT on stdout without a newline (a partial line)
 *   pidfile DIR        writes this process's pid to DIR/rank.R.pid
 *   trap DIR           on SIGINT/SIGTERM/SIGHUP, write the signal number to DIR/rank.R.sig,
 *                      then die of that signal
 *   ignore-term        ignore SIGTERM (to check that the launcher escalates to SIGKILL)
 *   sleep SECS         sleep (fractions allowed)
 *   exit CODE [RANK]   exit with CODE
 *   kill-self [RANK]   raise(SIGKILL)
 *   hang [RANK]        wait forever (for signals)
 * Without actions it behaves as "print". A bad action exits 99 with a message. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int g_rank = -1;
static char g_trap_path[4096];

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return;
        p += w;
        n -= (size_t)w;
    }
}

static const char *env_or_dash(const char *name)
{
    const char *v = getenv(name);
    return v ? v : "-";
}

static void on_signal(int sig)
{
    char buf[16];
    int n = snprintf(buf, sizeof(buf), "%d\n", sig);
    int fd = open(g_trap_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        write_all(fd, buf, (size_t)n);
        close(fd);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "braid_testprog: cannot write %s: %s\n", path, strerror(errno));
        exit(99);
    }
    fputs(text, f);
    fclose(f);
}

static void usage_error(const char *what)
{
    fprintf(stderr, "braid_testprog: bad action list at '%s'\n", what);
    exit(99);
}

/* Returns 1 if argv[*i + 1] is an integer (consuming it into *v), else 0. */
static int opt_int(int argc, char **argv, int *i, long *v)
{
    char *end;
    if (*i + 1 >= argc) return 0;
    long x = strtol(argv[*i + 1], &end, 10);
    if (end == argv[*i + 1] || *end) return 0;
    *v = x;
    (*i)++;
    return 1;
}

static const char *need_arg(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) usage_error(argv[*i]);
    return argv[++*i];
}

/* Whether an optional [RANK] argument selects this rank. */
static int on_this_rank(int argc, char **argv, int *i)
{
    long r;
    return !opt_int(argc, argv, i, &r) || r == g_rank;
}

int main(int argc, char **argv)
{
    const char *rs = getenv("BRAID_RANK");
    g_rank = rs ? atoi(rs) : -1;
    char line[8192];
    if (argc < 2) {
        static char *dflt[] = {"braid_testprog", "print", NULL};
        argv = dflt;
        argc = 2;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "print")) {
            int n = snprintf(line, sizeof(line),
                             "rank=%s nranks=%s local_rank=%s local_size=%s root=%s secret=%s\n",
                             env_or_dash("BRAID_RANK"), env_or_dash("BRAID_NRANKS"),
                             env_or_dash("BRAID_LOCAL_RANK"), env_or_dash("BRAID_LOCAL_SIZE"),
                             env_or_dash("BRAID_ROOT"), env_or_dash("BRAID_SECRET"));
            write_all(1, line, (size_t)n);
        } else if (!strcmp(a, "env")) {
            const char *name = need_arg(argc, argv, &i), *v = getenv(name);
            int n = v ? snprintf(line, sizeof(line), "%s=%s\n", name, v)
                      : snprintf(line, sizeof(line), "%s unset\n", name);
            write_all(1, line, (size_t)n);
        } else if (!strcmp(a, "cpus")) {
            cpu_set_t set;
            if (sched_getaffinity(0, sizeof(set), &set)) {
                fprintf(stderr, "braid_testprog: sched_getaffinity: %s\n", strerror(errno));
                return 99;
            }
            int n = snprintf(line, sizeof(line), "cpus %d:", g_rank);
            for (int c = 0; c < CPU_SETSIZE && n < (int)sizeof(line) - 16; c++)
                if (CPU_ISSET(c, &set)) n += snprintf(line + n, sizeof(line) - (size_t)n, " %d", c);
            n += snprintf(line + n, sizeof(line) - (size_t)n, "\n");
            write_all(1, line, (size_t)n);
        } else if (!strcmp(a, "echo") || !strcmp(a, "echo-err")) {
            int n = snprintf(line, sizeof(line), "%s\n", need_arg(argc, argv, &i));
            write_all(a[4] ? 2 : 1, line, (size_t)n);
        } else if (!strcmp(a, "write")) {
            const char *t = need_arg(argc, argv, &i);
            write_all(1, t, strlen(t));
        } else if (!strcmp(a, "pidfile") || !strcmp(a, "trap")) {
            const char *dir = need_arg(argc, argv, &i);
            if (a[0] == 'p') {
                char path[4096], pid[32];
                snprintf(path, sizeof(path), "%s/rank.%d.pid", dir, g_rank);
                snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
                write_file(path, pid);
            } else {
                snprintf(g_trap_path, sizeof(g_trap_path), "%s/rank.%d.sig", dir, g_rank);
                signal(SIGINT, on_signal);
                signal(SIGTERM, on_signal);
                signal(SIGHUP, on_signal);
            }
        } else if (!strcmp(a, "ignore-term")) {
            signal(SIGTERM, SIG_IGN);
        } else if (!strcmp(a, "sleep")) {
            double s = atof(need_arg(argc, argv, &i));
            struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
            while (nanosleep(&ts, &ts) && errno == EINTR) {
            }
        } else if (!strcmp(a, "exit")) {
            long code;
            if (!opt_int(argc, argv, &i, &code)) usage_error(a);
            if (on_this_rank(argc, argv, &i)) exit((int)code);
        } else if (!strcmp(a, "kill-self")) {
            if (on_this_rank(argc, argv, &i)) raise(SIGKILL);
        } else if (!strcmp(a, "hang")) {
            if (on_this_rank(argc, argv, &i))
                for (;;)
                    pause();
        } else {
            usage_error(a);
        }
    }
    return 0;
}
