/* braid-run: supervision of the running ranks (signalfd, reaping, deadlines, termination, the
 * processes the ranks leave behind); see braid_run.c for the behaviour this implements, and
 * output.c for --tag-output. */
#include "braid_run.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- supervision ----------------------------------------------------------------------------- */

void br_signal_all(br_job_t *job, int sig)
{
    for (int r = 0; r < job->o.nranks; r++)
        if (job->ranks[r].alive) kill(job->ranks[r].pid, sig);
}

static const char *br_plural(int n)
{
    return n == 1 ? "" : "s";
}

/* Every process of the job: the live ranks and everything they started. */
static void br_kill_job(br_job_t *job, int sig)
{
    br_signal_all(job, sig);
    br_tree_signal(sig);
}

/* Starts terminating the job: sig now to every process of it (unless sig == 0), SIGKILL at
 * now + grace_ms. */
void br_terminate(br_job_t *job, int sig, int grace_ms)
{
    if (sig) br_kill_job(job, sig);
    job->kill_deadline = br_now_ms() + grace_ms;
}

static void br_rank_ended(br_job_t *job, int r, int status)
{
    br_rank_t *rk = &job->ranks[r];
    rk->alive = 0;
    job->nalive--;
    for (int k = 0; k < 2; k++) /* its last lines come before the launcher's verdict */
        br_stream_read(job, r, &rk->io[k], 1);
    int failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (!failed || job->state != BR_RUNNING) return;

    char what[160], rest[64] = "";
    if (WIFEXITED(status)) {
        job->exit_code = WEXITSTATUS(status);
        snprintf(what, sizeof(what), "exited with status %d", job->exit_code);
    } else {
        int sig = WTERMSIG(status);
        job->exit_code = 128 + sig;
        snprintf(what, sizeof(what), "was killed by signal %d (%s)%s", sig, strsignal(sig),
                 WCOREDUMP(status) ? " (core dumped)" : "");
    }
    if (job->nalive > 0)
        snprintf(rest, sizeof(rest), "; terminating the other %d rank%s", job->nalive,
                 br_plural(job->nalive));
    br_msg("rank %d (pid %d) %s%s", r, (int)rk->pid, what, rest);
    job->state = BR_FAILED;
    br_terminate(job, SIGTERM, BR_FAIL_GRACE_MS);
}

static void br_reap(br_job_t *job)
{
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid == 0) return;
        if (pid < 0 && errno == EINTR) continue;
        if (pid < 0) { /* ECHILD: nothing left, whatever we believed */
            for (int r = 0; r < job->o.nranks; r++)
                job->ranks[r].alive = 0;
            job->nalive = 0;
            return;
        }
        for (int r = 0; r < job->o.nranks; r++)
            if (job->ranks[r].alive && job->ranks[r].pid == pid) {
                br_rank_ended(job, r, status);
                break;
            }
    }
}

/* Stops braid-run itself with sig (SIGTSTP), as its default action would have; it goes on
 * when SIGCONT comes (which also lands in the signalfd, and is forwarded from there). */
static void br_stop_self(int sig)
{
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    raise(sig); /* pending while blocked */
    sigprocmask(SIG_UNBLOCK, &one, NULL);
    sigprocmask(SIG_BLOCK, &one, NULL);
}

/* A signal that ends the job (INT, TERM, HUP, QUIT). */
static void br_on_end_signal(br_job_t *job, const struct signalfd_siginfo *si)
{
    int sig = (int)si->ssi_signo;
    /* ^C, ^\ and a hangup from the terminal were already delivered to the ranks, which share
     * our process group (for SIGHUP: the kernel's, when the session leader goes). */
    int from_tty = si->ssi_code == SI_KERNEL;
    if (job->nalive == 0) { /* only output or leftovers to deal with: drop the output */
        job->outq[1].dead = job->outq[2].dead = 1;
    }
    if (job->state != BR_RUNNING) {
        if (sig == SIGHUP && job->state == BR_SIGNALED && job->term_sig == SIGHUP) {
            /* A hangup comes twice (the kernel's and the shell's, or the shell's to the whole
             * group and again to us): the second is not a user asking for haste. */
            return;
        }
        /* Already stopping (a second ^C, or a signal during the grace period): no more grace. */
        br_msg("received signal %d (%s) while terminating; killing %d rank%s", sig, strsignal(sig),
               job->nalive, br_plural(job->nalive));
        br_kill_job(job, SIGKILL);
        job->kill_deadline = -1;
        job->stuck_deadline = br_now_ms() + BR_STUCK_MS;
        return;
    }
    job->state = BR_SIGNALED;
    job->term_sig = sig;
    br_msg("received signal %d (%s)%s %d rank%s", sig, strsignal(sig),
           from_tty ? " from the terminal, as did the ranks; waiting for" : "; forwarding it to",
           job->nalive, br_plural(job->nalive));
    if (!from_tty) br_signal_all(job, sig);
    br_terminate(job, 0, BR_SIGNAL_GRACE_MS);
}

static void br_on_signal(br_job_t *job, const struct signalfd_siginfo *si)
{
    int sig = (int)si->ssi_signo;
    switch (sig) {
    case SIGUSR1:
    case SIGUSR2: /* to the ranks, as mpirun does (checkpoint requests, srun --signal) */
        br_signal_all(job, sig);
        return;
    case SIGTSTP:
        /* As mpirun: SIGSTOP to every process of the job (a kill -TSTP aimed at braid-run;
         * ^Z from the terminal already reached the ranks), then stop as the shell expects. */
        if (si->ssi_code != SI_KERNEL) br_kill_job(job, SIGSTOP);
        br_stop_self(SIGTSTP);
        return;
    case SIGCONT: /* braid-run goes on by itself; the processes of the job are told to */
        br_kill_job(job, SIGCONT);
        return;
    default:
        br_on_end_signal(job, si);
    }
}

static void br_read_signals(br_job_t *job)
{
    struct signalfd_siginfo si[16];
    for (;;) {
        ssize_t n = read(job->sfd, si, sizeof(si));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return; /* EAGAIN: all consumed */
        for (size_t i = 0; i < (size_t)n / sizeof(si[0]); i++) {
            if (si[i].ssi_signo == SIGCHLD)
                br_reap(job);
            else
                br_on_signal(job, &si[i]);
        }
    }
}

static void br_check_deadlines(br_job_t *job)
{
    int64_t now = br_now_ms();
    if (job->state == BR_RUNNING && job->job_deadline >= 0 && now >= job->job_deadline) {
        br_msg("the job timed out after %g s; terminating %d rank%s", job->o.timeout_s, job->nalive,
               br_plural(job->nalive));
        job->state = BR_TIMED_OUT;
        job->exit_code = BR_EXIT_TIMEOUT;
        if (job->nalive == 0) job->outq[1].dead = job->outq[2].dead = 1;
        br_terminate(job, SIGTERM, BR_FAIL_GRACE_MS);
    }
    if (job->kill_deadline >= 0 && now >= job->kill_deadline) {
        int others = br_tree_signal(0) - job->nalive;
        if (job->nalive > 0 && others > 0)
            br_msg("%d rank%s and %d other process%s still running after the grace period; "
                   "sending SIGKILL",
                   job->nalive, br_plural(job->nalive), others, others == 1 ? "" : "es");
        else if (job->nalive > 0)
            br_msg("%d rank%s still running after the grace period; sending SIGKILL", job->nalive,
                   br_plural(job->nalive));
        else if (others > 0)
            br_msg("%d process%s started by the ranks still running after the grace period; "
                   "sending SIGKILL",
                   others, others == 1 ? "" : "es");
        br_kill_job(job, SIGKILL);
        job->kill_deadline = -1;
        job->stuck_deadline = now + BR_STUCK_MS;
    }
}

/* Once every rank is gone: whether processes they started still run. Those are ended (SIGTERM,
 * then SIGKILL after the grace period) whatever the job's outcome: when braid-run returns,
 * nothing of the job runs any more, except daemons (processes that started their own session,
 * tree.c), which are named once. After SIGKILL, every rescan sends SIGKILL again (a process
 * forked just after a sweep). Gives up (with a message) on processes that outlive SIGKILL by
 * BR_STUCK_MS (uninterruptible sleep). */
static int br_leftovers(br_job_t *job)
{
    if (job->stuck_deadline == -2) return 0; /* gave up */
    if (!job->daemons_noted) {
        char names[512];
        int nd = 0;
        job->daemons_noted = 1;
        br_tree_scan(0, names, sizeof(names), &nd);
        if (nd > 0)
            br_msg("leaving %d process%s that started %s own session (setsid) running: %s", nd,
                   nd == 1 ? "" : "es", nd == 1 ? "its" : "their", names);
    }
    int left = br_tree_signal(job->stuck_deadline >= 0 ? SIGKILL : 0);
    if (left == 0) return 0;
    if (job->stuck_deadline >= 0 && br_now_ms() >= job->stuck_deadline) {
        job->stuck_deadline = -2;
        br_msg("%d process%s of the job did not end after SIGKILL; leaving %s", left,
               left == 1 ? "" : "es", left == 1 ? "it" : "them");
        return 0;
    }
    if (!job->leftovers_termed) {
        job->leftovers_termed = 1;
        if (job->state == BR_RUNNING) /* else the termination was announced already */
            br_msg("the ranks are gone but %d process%s they started %s still running; "
                   "terminating %s",
                   left, left == 1 ? "" : "es", left == 1 ? "is" : "are",
                   left == 1 ? "it" : "them");
        br_tree_signal(SIGTERM);
        int64_t kd = br_now_ms() + BR_FAIL_GRACE_MS;
        if (job->kill_deadline < 0 || job->kill_deadline > kd) job->kill_deadline = kd;
    }
    return 1;
}

/* --tag-output, once every rank is gone: the queued output may wait for a slow reader, but not
 * for ever. After a timeout or an ending signal it gets BR_OUTPUT_GRACE_MS; otherwise, under
 * --timeout, until BR_OUTPUT_GRACE_MS past the job's deadline (so --timeout still bounds
 * braid-run when the reader stalls). Then it is dropped, with a note. */
static void br_output_deadline(br_job_t *job)
{
    if (job->nalive > 0 || job->out_deadline == -2) return;
    int64_t now = br_now_ms();
    if (job->out_deadline == -1) {
        if (job->state == BR_TIMED_OUT || job->state == BR_SIGNALED)
            job->out_deadline = now + BR_OUTPUT_GRACE_MS;
        else if (job->job_deadline >= 0)
            job->out_deadline =
                (job->job_deadline > now ? job->job_deadline : now) + BR_OUTPUT_GRACE_MS;
        else
            return;
    }
    if (now < job->out_deadline) return;
    job->out_deadline = -2;
    br_outq_drop(job, job->state == BR_SIGNALED    ? "the job was ended by a signal"
                      : job->state == BR_TIMED_OUT ? "the job timed out"
                                                   : "the --timeout deadline passed");
}

static int br_poll_timeout(const br_job_t *job, int rescan)
{
    int64_t next = -1, now = br_now_ms();
    if (job->state == BR_RUNNING && job->job_deadline >= 0) next = job->job_deadline;
    if (job->out_deadline >= 0 && (next < 0 || job->out_deadline < next)) next = job->out_deadline;
    if (job->kill_deadline >= 0 && (next < 0 || job->kill_deadline < next))
        next = job->kill_deadline;
    if (rescan && (next < 0 || now + BR_RESCAN_MS < next)) next = now + BR_RESCAN_MS;
    if (next < 0) return -1;
    int64_t left = next - now;
    return left <= 0 ? 0 : left > INT_MAX ? INT_MAX : (int)left;
}

/* Runs until every rank is reaped, every process they started is gone and (--tag-output) the
 * output is written. Poll slots: 0 the signalfd, 1 and 2 braid-run's stdout and stderr (fd -1
 * unless output waits), 3 + 2r + k rank r's stream k (fd -1 once closed or while its queue is
 * full). */
void br_supervise(br_job_t *job)
{
    int n = job->o.nranks, tag = job->o.tag_output, np = 3 + (tag ? 2 * n : 0), closed = 0;
    struct pollfd *pfd = calloc((size_t)np, sizeof(*pfd));
    if (!pfd) {
        br_msg("out of memory");
        br_kill_job(job, SIGKILL);
        exit(BR_EXIT_LAUNCHER);
    }
    if (tag) br_msg_queue = job;
    for (;;) {
        int rescan = 0;
        if (job->nalive == 0) {
            rescan = br_leftovers(job);
            if (!rescan && !closed) {
                /* Every process is gone: forward what is left in the pipes (a process that
                 * escaped to another parent may still hold a write end: no waiting for EOF). */
                for (int i = 3; i < np; i++) {
                    br_stream_t *st = &job->ranks[(i - 3) / 2].io[(i - 3) % 2];
                    br_stream_read(job, (i - 3) / 2, st, 1);
                    br_stream_close(job, (i - 3) / 2, st);
                }
                closed = 1;
            }
            if (!rescan && (job->outq[1].dead || job->outq[1].len == 0) &&
                (job->outq[2].dead || job->outq[2].len == 0))
                break;
        }
        pfd[0] = (struct pollfd){.fd = job->sfd, .events = POLLIN};
        for (int fd = 1; fd <= 2; fd++) {
            const br_outq_t *q = &job->outq[fd];
            pfd[fd] = (struct pollfd){.fd = q->len && !q->dead ? fd : -1, .events = POLLOUT};
        }
        for (int i = 3; i < np; i++) {
            const br_stream_t *st = &job->ranks[(i - 3) / 2].io[(i - 3) % 2];
            int fd = st->fd >= 0 && br_outq_room(job, st->to_fd) ? st->fd : -1;
            pfd[i] = (struct pollfd){.fd = fd, .events = POLLIN};
        }
        int rc = poll(pfd, (nfds_t)np, br_poll_timeout(job, rescan));
        if (rc < 0 && errno != EINTR) {
            br_msg_queue = NULL;
            br_msg("poll failed: %s; killing the job", strerror(errno));
            br_kill_job(job, SIGKILL);
            exit(BR_EXIT_LAUNCHER);
        }
        /* Output first, so lines written just before an exit precede the verdict. */
        for (int i = 3; rc > 0 && i < np; i++)
            if (pfd[i].revents && pfd[i].fd >= 0)
                br_stream_read(job, (i - 3) / 2, &job->ranks[(i - 3) / 2].io[(i - 3) % 2], 0);
        for (int fd = 1; rc > 0 && fd <= 2; fd++)
            if (pfd[fd].revents) br_outq_write(job, fd);
        if (rc > 0 && pfd[0].revents) br_read_signals(job);
        br_check_deadlines(job);
        if (tag) br_output_deadline(job);
    }
    br_msg_queue = NULL;
    free(pfd);
}
