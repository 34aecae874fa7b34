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
#define BR_OUTQ_MAX (1 << 20)   /* --tag-output: a rank's pipes are not read past this backlog */
#define BR_STUCK_MS 5000        /* after SIGKILL: how long to wait for the processes to go */
#define BR_OUTPUT_GRACE_MS 2000 /* --tag-output: how long output may wait once the job ended */
#define BR_RESCAN_MS 50         /* how often leftover descendants are looked for again */
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

/* What braid-run still has to write to its own stdout or stderr (--tag-output): written
 * when poll() says the descriptor can take it, so that a stalled reader never blocks the
 * supervisor; while more than BR_OUTQ_MAX bytes wait, the ranks' pipes to it are not read. */
typedef struct {
    char *buf;
    size_t head, len, cap; /* pending: buf[head .. head + len) */
    int dead;              /* a write failed (EPIPE): what follows is dropped */
    int regular;           /* a regular file: writes never block, so no chunking */
} br_outq_t;

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
    int exit_code;          /* for BR_FAILED / BR_TIMED_OUT */
    int term_sig;           /* for BR_SIGNALED */
    int64_t job_deadline;   /* ms on CLOCK_MONOTONIC, -1 = none */
    int64_t kill_deadline;  /* ms, -1 = none */
    br_outq_t outq[3];      /* [1] stdout, [2] stderr (--tag-output) */
    int leftovers_termed;   /* the ranks' leftover descendants got SIGTERM */
    int daemons_noted;      /* the daemons left running were named */
    int64_t stuck_deadline; /* ms: give up waiting for SIGKILLed processes; -1 = none */
    int64_t out_deadline;   /* ms: drop the output still queued; -1 = none yet, -2 = dropped */
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
/* While set (--tag-output, during supervision), br_msg queues its lines in outq[2]. */
extern br_job_t *br_msg_queue;
/* "braid-run: " + message + newline on stderr. */
void br_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Signals every live rank. */
void br_signal_all(br_job_t *job, int sig);
/* Moves to termination: sig (unless 0) now to the ranks and every process they started,
 * SIGKILL to all of them after grace_ms. */
void br_terminate(br_job_t *job, int sig, int grace_ms);
/* Sends sig (0: none) to every live (not zombie) descendant of this process and returns how
 * many there were (tree.c). */
int br_tree_signal(int sig);
/* The same; also lists the descendants spared because they left braid-run's session (setsid:
 * daemons), "pid (comm), ..." in spared (truncated to len), and counts them. */
int br_tree_scan(int sig, char *spared, size_t len, int *nspared_p);
/* --tag-output (output.c): reads what rank r's stream s holds (up to 16 reads when 'drain',
 * else one) into the queue of its destination, as "[r] "-prefixed lines. */
void br_stream_read(br_job_t *job, int rank, br_stream_t *s, int drain);
/* Forwards a stream's incomplete last line (a newline added) and closes it. */
void br_stream_close(br_job_t *job, int rank, br_stream_t *s);
/* Whether rank streams bound for fd may be read now (their queue has room). */
int br_outq_room(const br_job_t *job, int fd);
/* Writes what poll() allowed of outq[fd] (revents of fd); on EPIPE drops the queue and closes
 * every rank's pipe bound for fd, so the ranks get SIGPIPE as they would without the tags. */
void br_outq_write(br_job_t *job, int fd);
/* Drops what outq[1] and outq[2] hold and everything that would follow, with a note on stderr
 * (why; written only when stderr can take it without blocking). */
void br_outq_drop(br_job_t *job, const char *why);
/* Appends n bytes to outq[fd] (dropped when it is dead). */
void br_outq_put(br_job_t *job, int fd, const char *p, size_t n);
/* The poll loop: forwards output, reaps ranks, handles signals and deadlines until every
 * rank is gone. */
void br_supervise(br_job_t *job);

#endif
