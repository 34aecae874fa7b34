/* braid-run internals shared by braid_run.c (options, environment, launching, main) and
 * supervise.c (output forwarding and supervision of the running ranks). */
#ifndef BRAID_TOOLS_BRAID_RUN_H
#define BRAID_TOOLS_BRAID_RUN_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#define BR_MAX_RANKS 1024
#define BR_FAIL_GRACE_MS 2000   /* SIGTERM -> SIGKILL after a rank failure or the timeout */
#define BR_SIGNAL_GRACE_MS 5000 /* SIGTERM -> SIGKILL after a signal to the launcher */
#define BR_LINE_MAX 65536       /* longer lines are split (a newline is inserted) */
#define BR_EXIT_USAGE 2
#define BR_EXIT_TIMEOUT 124
#define BR_EXIT_LAUNCHER 125

static const char *const br_reserved[] = {"BRAID_RANK",       "BRAID_NRANKS", "BRAID_LOCAL_RANK",
                                          "BRAID_LOCAL_SIZE", "BRAID_ROOT",   "BRAID_SECRET"};

/* --bind (bind.c) */
typedef enum { BR_BIND_NONE, BR_BIND_CORE, BR_BIND_AUTO, BR_BIND_FULL } br_bind_t;

typedef struct {
    int nranks;
    br_bind_t bind;
    int tag_output;
    const char *output_dir;
    double timeout_s; /* 0 = none */
    const char *root; /* --root, or NULL */
    char **xvars;     /* -x VAR=VALUE, nx of them */
    int nx;
    char **prog_argv;
} br_opts_t;

/* One output pipe of one rank (--tag-output). */
typedef struct {
    int fd;     /* read end, non-blocking; -1 once closed */
    int to_fd;  /* 1 or 2: where its lines go */
    size_t len; /* bytes of an incomplete line held in buf */
    char *buf;  /* BR_LINE_MAX bytes */
} br_stream_t;

typedef struct {
    pid_t pid;
    int alive;         /* forked and not yet reaped */
    br_stream_t io[2]; /* stdout, stderr */
} br_rank_t;

typedef enum { BR_RUNNING, BR_FAILED, BR_TIMED_OUT, BR_SIGNALED } br_state_t;

typedef struct {
    br_opts_t o;
    br_rank_t *ranks;
    int nalive;
    int sfd; /* signalfd */
    br_state_t state;
    int exit_code;         /* for BR_FAILED / BR_TIMED_OUT */
    int term_sig;          /* for BR_SIGNALED */
    int64_t job_deadline;  /* ms on CLOCK_MONOTONIC, -1 = none */
    int64_t kill_deadline; /* ms, -1 = none */
    int dead_fd[3];        /* writes to fd 1/2 failed (EPIPE): drop what follows */
    pid_t self;
    sigset_t orig_mask;
    struct sigaction orig_pipe;
    struct rlimit orig_nofile;
    int devnull;
    int *bind_cpus; /* rank r runs on bind_cpus[r % nbind_cpus]; NULL = not bound */
    int nbind_cpus;
} br_job_t;

/* "none" / "core" / "auto" -> *mode_p; -1 for anything else. */
int br_parse_bind(const char *s, br_bind_t *mode_p);
/* The cpus ranks are bound to, in order (first threads of cores first; *cpus_p NULL when the
 * ranks are not bound); -1 with a message on failure. */
int br_bind_plan(br_bind_t mode, int nranks, int **cpus_p, int *ncpus_p);
/* In a rank: binds the calling process to its cpu of the plan; 0 or an errno value. */
int br_bind_self(const int *cpus, int ncpus, int rank);
/* Milliseconds on CLOCK_MONOTONIC. */
int64_t br_now_ms(void);
/* "braid-run: " + message + newline on stderr. */
void br_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Signals every live rank. */
void br_signal_all(br_job_t *job, int sig);
/* Moves to termination: SIGTERM now, SIGKILL after grace_ms. */
void br_terminate(br_job_t *job, int sig, int grace_ms);
/* The poll loop: forwards output, reaps ranks, handles signals and deadlines until every
 * rank is gone. */
void br_supervise(br_job_t *job);

#endif
