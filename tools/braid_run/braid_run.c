/* braid-run: the local launcher. `braid-run -n N [options] [--] prog args...` starts N ranks of
 * prog on this host (fork + execvp) and supervises them until they all end.
 *
 * Environment contract (what each rank sees, on top of the launcher's own environment):
 *   BRAID_RANK=r           0..N-1, distinct per rank
 *   BRAID_NRANKS=N
 *   BRAID_LOCAL_RANK=r     equal to BRAID_RANK (every rank is on this host)
 *   BRAID_LOCAL_SIZE=N
 *   BRAID_ROOT=host:port   --root if given, else an inherited BRAID_ROOT, else 127.0.0.1:<port>
 *                          with a port that was free a moment ago (bound to port 0, then closed);
 *                          rank 0 listens there (braid_comm_init_env).
 *   BRAID_SECRET=32 hex    a fresh random 128-bit job secret from getrandom(), lowercase hex,
 *                          never inherited.
 *   -x VAR=VALUE           extra variables, applied before the six above (which -x cannot set);
 *                          -x VAR (mpirun's form) passes VAR's current value, as inherited.
 * Rank 0 inherits the launcher's stdin; the other ranks read /dev/null (as mpirun does).
 *
 * Supervision. SIGCHLD and the forwarded signals are blocked from before the first fork and read
 * from a signalfd, so no status is lost; one poll() loop waits on it, on the --tag-output pipes
 * and on the nearest deadline (no busy waiting). waitpid(-1, WNOHANG) reaps until nothing is
 * left, and a pid is only signalled while unreaped, so it cannot have been reused.
 *  - A rank that exits non-zero or is killed by a signal: one message names it, the others get
 *    SIGTERM, then SIGKILL after 2 s; braid-run exits with its status (or 128 + signal).
 *  - --timeout: the same with the message "timed out", and the exit status 124.
 *  - SIGINT/SIGTERM/SIGHUP/SIGQUIT to braid-run: forwarded to every rank, SIGKILL after 5 s,
 *    and when every rank is gone braid-run re-raises the signal on itself, so its parent (a
 *    shell loop) sees "killed by SIGINT" as it would for any other program. A second signal
 *    SIGKILLs now (except a second SIGHUP: a hangup is often delivered twice). A signal
 *    ignored when braid-run starts (nohup) stays ignored, by the ranks too.
 *  - SIGUSR1/SIGUSR2: forwarded to every rank, nothing else (as mpirun; srun --signal).
 *    SIGTSTP: every process of the job gets SIGSTOP (as mpirun), then braid-run stops itself;
 *    SIGCONT continues braid-run and is sent to every process of the job.
 *  - Processes the ranks start (a wrapper script's program, subprocesses, daemons) belong to
 *    the job: braid-run is a child subreaper, so they stay its descendants when their parent
 *    ends (tree.c). Termination (failure, --timeout) signals every one of them, not only the
 *    ranks; and when the ranks are gone, whatever they left running gets SIGTERM, then SIGKILL
 *    after 2 s, whatever the job's outcome. braid-run returns only when none is left.
 *    Deliberate daemons are the exception, in every case (success, failure, timeout,
 *    signals): a process that started its own session (setsid; `setsid cmd &`, an ssh
 *    ControlMaster, an agent, the MPS daemon) and what it starts are never signalled, and
 *    braid-run names them once the ranks are gone ("leaving N processes ... running"). A rank
 *    that itself calls setsid therefore turns what it starts into daemons.
 *  - If braid-run itself is SIGKILLed, so are the ranks (PR_SET_PDEATHSIG), but not the
 *    processes the ranks started: those outlive a SIGKILLed launcher (only a cgroup, as
 *    Slurm's, would catch them).
 *  - --tag-output never blocks the supervisor on a slow reader (output.c); when the reader of
 *    braid-run's stdout or stderr is gone (`| head`), the ranks' pipes to it are closed, so
 *    that the ranks get SIGPIPE as they would without --tag-output.
 *
 * Process groups and Ctrl-C. The ranks stay in braid-run's process group, so the job is one
 * job for the shell: Ctrl-Z stops all of it, fg/bg resume all of it, a rank reading the
 * terminal is in the foreground group, and Ctrl-C still reaches every rank even if braid-run
 * itself was lost. The price is that the terminal already sends ^C's SIGINT to every rank
 * (and Ctrl-backslash its SIGQUIT, Ctrl-Z its SIGTSTP, a hangup its SIGHUP); braid-run
 * recognises that case (si_code SI_KERNEL: sent by the tty driver, not by kill()) and does
 * not send the ranks a second signal, which would cut short a rank's own clean-up
 * handler. A signal sent with kill() to braid-run alone is forwarded. (A signal sent with
 * kill() to the whole group reaches a rank twice; use kill on the launcher's pid.)
 *
 * Exit status: 0 when every rank exits 0; the first failing rank's status (128 + signal when
 * killed); 124 on --timeout; 126/127 when prog cannot be executed (permission / not found);
 * 2 for bad usage; 125 when braid-run itself fails (fork, pipes, --output-dir); death by the
 * received signal when SIGINT/SIGTERM/SIGHUP/SIGQUIT ended the job. */
#include "braid/braid.h"
#include "braid_run.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int64_t br_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void br_msg(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(line, sizeof(line), "braid-run: ");
    vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    strcat(line, "\n");
    if (br_msg_queue) { /* behind the ranks' queued lines, and never blocking */
        br_outq_put(br_msg_queue, 2, line, strlen(line));
        return;
    }
    fputs(line, stderr);
    fflush(stderr);
}
/* ---- usage ----------------------------------------------------------------------------------- */

static void br_usage(FILE *f)
{
    fprintf(f,
            "Usage: braid-run -n N [options] [--] prog [args...]\n"
            "Starts N ranks of prog on this host with BRAID_RANK, BRAID_NRANKS, BRAID_LOCAL_RANK,\n"
            "BRAID_LOCAL_SIZE, BRAID_ROOT and BRAID_SECRET set, and waits for them.\n"
            "\n"
            "Options:\n"
            "  -n, --np N            number of ranks (1..%d), required\n"
            "      --tag-output      prefix every output line with \"[rank] \"\n"
            "      --output-dir DIR  write DIR/rank.R.out and DIR/rank.R.err instead\n"
            "      --timeout SECS    kill the job and exit 124 if it runs longer\n"
            "      --root HOST:PORT  bootstrap root (default: $BRAID_ROOT, else a free\n"
            "                        port on 127.0.0.1)\n"
            "  -x VAR=VALUE          set VAR in every rank's environment (repeatable);\n"
            "                        -x VAR (as mpirun) passes its current value\n"
            "      --bind MODE       none, core (rank r on cpu r mod ncpus of the cpus\n"
            "                        braid-run may use, first threads of cores first),\n"
            "                        auto (core when every rank gets its own cpu, else\n"
            "                        none) or full (core when the ranks fill every cpu,\n"
            "                        else none); default full\n"
            "  -h, --help            show this help\n"
            "      --version         show the version\n"
            "\n"
            "If a rank fails, the others are terminated and braid-run exits with its status\n"
            "(128+signal if it was killed). SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and\n"
            "SIGUSR2 are forwarded to the ranks; SIGTSTP stops and SIGCONT continues the job.\n"
            "When the job ends, the processes the ranks started end with it. Exit status:\n"
            "124 timeout, 125 launcher error, 126/127 prog not executable / not found, 2 bad\n"
            "usage.\n",
            BR_MAX_RANKS);
}

static void br_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void br_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("braid-run: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\nTry 'braid-run --help' for more information.\n", stderr);
    exit(BR_EXIT_USAGE);
}

static int br_parse_int(const char *s, long lo, long hi, long *v_p)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *v_p = v;
    return 0;
}

/* "host:port" or "[v6]:port" with a port in 1..65535. */
static int br_valid_hostport(const char *s)
{
    const char *colon = strrchr(s, ':');
    long port;
    if (!colon || colon == s || br_parse_int(colon + 1, 1, 65535, &port)) return 0;
    if (s[0] == '[') return colon[-1] == ']' && colon - s > 2;
    return memchr(s, ':', (size_t)(colon - s)) == NULL; /* bare IPv6 needs brackets */
}

/* VAR=VALUE, or VAR alone (as mpirun's -x: its current value, which the ranks inherit). */
static int br_valid_xvar(const char *s)
{
    const char *eq = strchr(s, '=');
    if (!eq) eq = s + strlen(s);
    if (eq == s || !(isalpha((unsigned char)s[0]) || s[0] == '_')) return 0;
    for (const char *p = s; p < eq; p++)
        if (!isalnum((unsigned char)*p) && *p != '_') return 0;
    return 1;
}

static void br_parse_args(int argc, char **argv, br_opts_t *o)
{
    enum { OPT_TAG = 256, OPT_DIR, OPT_TIMEOUT, OPT_ROOT, OPT_VERSION, OPT_BIND };
    static const struct option longopts[] = {
        {"np", required_argument, NULL, 'n'},
        {"tag-output", no_argument, NULL, OPT_TAG},
        {"output-dir", required_argument, NULL, OPT_DIR},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"root", required_argument, NULL, OPT_ROOT},
        {"bind", required_argument, NULL, OPT_BIND},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, OPT_VERSION},
        {NULL, 0, NULL, 0},
    };
    memset(o, 0, sizeof(*o));
    o->bind = BR_BIND_FULL;
    o->xvars = calloc((size_t)argc, sizeof(char *));
    if (!o->xvars) exit(BR_EXIT_LAUNCHER);
    opterr = 0;
    for (;;) {
        int c = getopt_long(argc, argv, "+:n:x:h", longopts, NULL);
        if (c == -1) break;
        long v;
        char *end;
        switch (c) {
        case 'n':
            if (br_parse_int(optarg, 1, BR_MAX_RANKS, &v))
                br_usage_error("invalid number of ranks '%s' (expected 1..%d)", optarg,
                               BR_MAX_RANKS);
            o->nranks = (int)v;
            break;
        case OPT_TAG:
            o->tag_output = 1;
            break;
        case OPT_DIR:
            if (!*optarg) br_usage_error("--output-dir needs a directory");
            o->output_dir = optarg;
            break;
        case OPT_TIMEOUT:
            errno = 0;
            o->timeout_s = strtod(optarg, &end);
            if (errno || end == optarg || *end || !isfinite(o->timeout_s) || o->timeout_s <= 0 ||
                o->timeout_s > 1e9)
                br_usage_error("invalid --timeout '%s' (expected seconds > 0)", optarg);
            break;
        case OPT_ROOT:
            if (!br_valid_hostport(optarg))
                br_usage_error("invalid --root '%s' (expected host:port or [v6addr]:port)", optarg);
            o->root = optarg;
            break;
        case OPT_BIND:
            if (br_parse_bind(optarg, &o->bind))
                br_usage_error("invalid --bind '%s' (expected none, core, auto or full)", optarg);
            break;
        case 'x':
            if (!br_valid_xvar(optarg))
                br_usage_error("invalid -x '%s' (expected VAR=VALUE or VAR)", optarg);
            for (size_t i = 0; i < sizeof(br_reserved) / sizeof(br_reserved[0]); i++) {
                size_t n = strlen(br_reserved[i]);
                if (!strncmp(optarg, br_reserved[i], n) && (optarg[n] == '=' || !optarg[n]))
                    br_usage_error("-x cannot set %s: braid-run sets it%s", br_reserved[i],
                                   i == 4 ? " (use --root)" : "");
            }
            o->xvars[o->nx++] = optarg;
            break;
        case 'h':
            br_usage(stdout);
            exit(0);
        case OPT_VERSION:
            printf("braid-run (braid) %d.%d.%d\n", BRAID_VERSION_MAJOR, BRAID_VERSION_MINOR,
                   BRAID_VERSION_PATCH);
            exit(0);
        case ':':
            br_usage_error("option '%s' needs an argument", argv[optind - 1]);
        default:
            if (optopt && optopt < 256) br_usage_error("unknown option '-%c'", optopt);
            br_usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (o->nranks == 0) br_usage_error("the number of ranks is required (-n N)");
    if (optind >= argc) br_usage_error("no program to run");
    if (o->tag_output && o->output_dir)
        br_usage_error("--tag-output and --output-dir cannot be combined");
    o->prog_argv = argv + optind;
}

/* ---- environment ----------------------------------------------------------------------------- */

static int br_pick_root(char *buf, size_t cap)
{
    /* Free on every IPv4 address, not only on 127.0.0.1 where rank 0's root will listen (a
     * loopback root string listens on loopback alone): the stricter test costs nothing. */
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
        getsockname(fd, (struct sockaddr *)&sa, &len)) {
        br_msg("cannot pick a free port for BRAID_ROOT: %s", strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    close(fd);
    snprintf(buf, cap, "127.0.0.1:%u", (unsigned)ntohs(sa.sin_port));
    return 0;
}

static int br_make_secret(char hex[33])
{
    unsigned char b[16];
    if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b)) { /* never short for <= 256 bytes */
        br_msg("getrandom failed: %s", strerror(errno));
        return -1;
    }
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", b[i]);
    return 0;
}

/* Sets the variables every rank shares in the launcher's own environment (fork copies it). */
static int br_setup_env(const br_opts_t *o)
{
    char root[300], secret[33], num[16];
    for (int i = 0; i < o->nx; i++) {
        char *eq = strchr(o->xvars[i], '=');
        if (!eq) continue; /* -x VAR: the ranks inherit its value (or its absence) */
        *eq = '\0';
        int rc = setenv(o->xvars[i], eq + 1, 1);
        *eq = '=';
        if (rc) goto fail;
    }
    const char *env_root = getenv("BRAID_ROOT");
    if (o->root) {
        snprintf(root, sizeof(root), "%s", o->root);
    } else if (env_root && *env_root) {
        snprintf(root, sizeof(root), "%s", env_root);
    } else if (br_pick_root(root, sizeof(root))) {
        return -1;
    }
    if (br_make_secret(secret)) return -1;
    snprintf(num, sizeof(num), "%d", o->nranks);
    if (setenv("BRAID_ROOT", root, 1) || setenv("BRAID_SECRET", secret, 1) ||
        setenv("BRAID_NRANKS", num, 1) || setenv("BRAID_LOCAL_SIZE", num, 1))
        goto fail;
    return 0;
fail:
    br_msg("cannot set the environment: %s", strerror(errno));
    return -1;
}
/* ---- launching ------------------------------------------------------------------------------- */

static void br_child(const br_job_t *job, int r, int exec_wfd, int out_fd, int err_fd)
{
    /* Die with the launcher; and if it died before this line, do not run orphaned. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != job->self) _exit(BR_EXIT_LAUNCHER);
    if ((out_fd >= 0 && dup2(out_fd, STDOUT_FILENO) < 0) ||
        (err_fd >= 0 && dup2(err_fd, STDERR_FILENO) < 0) ||
        (r > 0 && dup2(job->devnull, STDIN_FILENO) < 0)) {
        int e = errno;
        (void)!write(exec_wfd, &e, sizeof(e));
        _exit(BR_EXIT_LAUNCHER);
    }
    sigaction(SIGPIPE, &job->orig_pipe, NULL);
    setrlimit(RLIMIT_NOFILE, &job->orig_nofile);
    sigprocmask(SIG_SETMASK, &job->orig_mask, NULL);
    int be = br_bind_self(job->bind_cpus, job->nbind_cpus, r);
    if (be) {
        (void)!write(exec_wfd, &be, sizeof(be));
        _exit(BR_EXIT_LAUNCHER);
    }
    execvp(job->o.prog_argv[0], job->o.prog_argv);
    int e = errno;
    (void)!write(exec_wfd, &e, sizeof(e));
    _exit(e == ENOENT || e == ENOTDIR ? 127 : 126);
}

static int br_mkdir_p(const char *dir)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p) continue;
        char c = *p;
        *p = '\0';
        if (mkdir(path, 0777) && errno != EEXIST) return -1;
        *p = c;
        if (!c) return 0; /* an existing non-directory fails when the files are opened */
    }
}

/* Opens the stdout/stderr targets of rank r: the write ends of its pipes (read ends go to
 * the rank's streams) or its files in --output-dir; -1/-1 to inherit the launcher's. */
static int br_open_outputs(br_job_t *job, int r, int fds[2])
{
    br_rank_t *rk = &job->ranks[r];
    fds[0] = fds[1] = -1;
    if (job->o.tag_output) {
        for (int k = 0; k < 2; k++) {
            int p[2];
            if (pipe2(p, O_CLOEXEC)) {
                br_msg("cannot create the output pipes of rank %d: %s", r, strerror(errno));
                return -1;
            }
            fcntl(p[0], F_SETFL, O_NONBLOCK);
            rk->io[k].fd = p[0];
            rk->io[k].to_fd = k + 1;
            rk->io[k].buf = malloc(BR_LINE_MAX);
            if (!rk->io[k].buf) {
                br_msg("out of memory");
                return -1;
            }
            fds[k] = p[1];
        }
    } else if (job->o.output_dir) {
        static const char *const ext[2] = {"out", "err"};
        for (int k = 0; k < 2; k++) {
            char path[PATH_MAX];
            snprintf(path, sizeof(path), "%s/rank.%d.%s", job->o.output_dir, r, ext[k]);
            fds[k] = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
            if (fds[k] < 0) {
                br_msg("cannot open '%s': %s", path, strerror(errno));
                return -1;
            }
        }
    }
    return 0;
}

/* Forks and execs every rank. Returns 0, or the exit status to end with after the ranks
 * already started have been terminated. */
static int br_launch(br_job_t *job)
{
    for (int r = 0; r < job->o.nranks; r++) {
        char num[16];
        snprintf(num, sizeof(num), "%d", r);
        if (setenv("BRAID_RANK", num, 1) || setenv("BRAID_LOCAL_RANK", num, 1)) {
            br_msg("cannot set the environment: %s", strerror(errno));
            return BR_EXIT_LAUNCHER;
        }
        int fds[2], ep[2];
        if (br_open_outputs(job, r, fds)) return BR_EXIT_LAUNCHER;
        if (pipe2(ep, O_CLOEXEC)) {
            br_msg("cannot create a pipe: %s", strerror(errno));
            return BR_EXIT_LAUNCHER;
        }
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) br_child(job, r, ep[1], fds[0], fds[1]);
        int fork_errno = errno;
        close(ep[1]);
        for (int k = 0; k < 2; k++)
            if (fds[k] >= 0) close(fds[k]);
        if (pid < 0) {
            close(ep[0]);
            br_msg("cannot fork rank %d: %s", r, strerror(fork_errno));
            return BR_EXIT_LAUNCHER;
        }
        job->ranks[r].pid = pid;
        job->ranks[r].alive = 1;
        job->nalive++;
        /* Wait for exec: EOF means it succeeded (the pipe is close-on-exec), else errno. */
        int e = 0;
        ssize_t n;
        do
            n = read(ep[0], &e, sizeof(e));
        while (n < 0 && errno == EINTR);
        close(ep[0]);
        if (n == (ssize_t)sizeof(e)) {
            if (r == 0 || e == ENOENT || e == EACCES || e == ENOEXEC || e == ENOTDIR)
                br_msg("cannot execute '%s': %s", job->o.prog_argv[0], strerror(e));
            else
                br_msg("cannot start rank %d: %s", r, strerror(e));
            return e == ENOENT || e == ENOTDIR ? 127 : 126;
        }
    }
    return 0;
}

/* Makes sure fds 0, 1, 2 are open, so that no pipe or file of ours lands on them. */
static void br_fix_std_fds(void)
{
    for (int fd = 0; fd < 3; fd++)
        if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY) < 0)
            exit(BR_EXIT_LAUNCHER);
}

int main(int argc, char **argv)
{
    static br_job_t job;
    br_fix_std_fds();
    br_parse_args(argc, argv, &job.o);
    int n = job.o.nranks;
    job.self = getpid();
    job.job_deadline = job.o.timeout_s > 0 ? br_now_ms() + (int64_t)(job.o.timeout_s * 1000) : -1;
    job.kill_deadline = -1;
    job.stuck_deadline = -1;
    job.out_deadline = -1;

    if (job.o.output_dir && br_mkdir_p(job.o.output_dir)) {
        br_msg("cannot create --output-dir '%s': %s", job.o.output_dir, strerror(errno));
        return BR_EXIT_LAUNCHER;
    }
    if (br_setup_env(&job.o)) return BR_EXIT_LAUNCHER;
    if (br_bind_plan(job.o.bind, n, &job.bind_cpus, &job.nbind_cpus)) return BR_EXIT_LAUNCHER;
    job.ranks = calloc((size_t)n, sizeof(br_rank_t));
    job.devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (!job.ranks || job.devnull < 0) {
        br_msg("cannot allocate the job: %s", strerror(errno));
        return BR_EXIT_LAUNCHER;
    }
    for (int r = 0; r < n; r++)
        job.ranks[r].io[0].fd = job.ranks[r].io[1].fd = -1;

    /* 2 pipes per rank may exceed the default soft limit of 1024 descriptors. */
    getrlimit(RLIMIT_NOFILE, &job.orig_nofile);
    struct rlimit raised = job.orig_nofile;
    raised.rlim_cur = raised.rlim_max;
    setrlimit(RLIMIT_NOFILE, &raised);
    getrlimit(RLIMIT_NOFILE, &raised);
    if (job.o.tag_output && raised.rlim_cur != RLIM_INFINITY &&
        raised.rlim_cur < (rlim_t)(2 * n + 64)) {
        br_msg("--tag-output with %d ranks needs %d open files, but the limit is %llu (raise "
               "'ulimit -n' or use --output-dir)",
               n, 2 * n + 64, (unsigned long long)raised.rlim_cur);
        return BR_EXIT_LAUNCHER;
    }

    /* A closed stdout must not kill the launcher (and orphan the ranks); ranks get it back. */
    struct sigaction ign = {.sa_handler = SIG_IGN}, dfl = {.sa_handler = SIG_DFL};
    sigaction(SIGPIPE, &ign, &job.orig_pipe);
    /* An inherited SIGCHLD = SIG_IGN would auto-reap the ranks and hide their status. */
    sigaction(SIGCHLD, &dfl, NULL);

    /* Processes orphaned below the ranks come to us (tree.c), not to init. */
    if (prctl(PR_SET_CHILD_SUBREAPER, 1))
        br_msg("cannot become a child subreaper (%s): processes the ranks start may outlive "
               "the job",
               strerror(errno));

    /* A signal ignored on entry (nohup, `cmd &` in a script) stays ignored, here and in the
     * ranks: blocking it for the signalfd would resurrect it. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    static const int fwd[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGTSTP, SIGCONT};
    for (size_t i = 0; i < sizeof(fwd) / sizeof(fwd[0]); i++) {
        struct sigaction old;
        if (sigaction(fwd[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
            sigaddset(&set, fwd[i]);
    }
    sigprocmask(SIG_BLOCK, &set, &job.orig_mask);
    job.sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (job.sfd < 0) {
        br_msg("signalfd failed: %s", strerror(errno));
        return BR_EXIT_LAUNCHER;
    }

    int rc = br_launch(&job);
    if (rc) {
        job.state = BR_FAILED;
        job.exit_code = rc;
        if (job.nalive > 0) br_terminate(&job, SIGTERM, BR_FAIL_GRACE_MS);
    }
    br_supervise(&job);

    if (job.state == BR_SIGNALED) {
        /* Die of the same signal, so that a shell sees the interruption (SIGQUIT's core
         * would be braid-run's, of no use to anyone). */
        struct rlimit nocore = {0, 0};
        if (job.term_sig == SIGQUIT) setrlimit(RLIMIT_CORE, &nocore);
        sigaction(job.term_sig, &dfl, NULL);
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, job.term_sig);
        raise(job.term_sig);
        sigprocmask(SIG_UNBLOCK, &one, NULL);
        return 128 + job.term_sig;
    }
    return job.state == BR_RUNNING ? 0 : job.exit_code;
}
