/* braid-run: output forwarding (--tag-output pipes, split into whole lines) and supervision
 * of the running ranks (signalfd, reaping, deadlines, termination); see braid_run.c for the
 * behaviour this implements. */
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

/* ---- output forwarding ----------------------------------------------------------------------- */

static void br_write_all(br_job_t *job, int fd, const char *p, size_t n)
{
    if (job->dead_fd[fd]) return;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
            job->dead_fd[fd] = 1; /* EPIPE and friends: the reader is gone, drop the rest */
            return;
        }
        p += w;
        n -= (size_t)w;
    }
}

/* Writes buf[0..n) (one or more lines, the last one possibly unterminated) with each line
 * prefixed by "[rank] ", in as few write() calls as possible. */
static void br_emit_lines(br_job_t *job, int rank, int fd, const char *buf, size_t n)
{
    static char out[2 * BR_LINE_MAX + 64];
    char prefix[16];
    size_t plen = (size_t)snprintf(prefix, sizeof(prefix), "[%d] ", rank), olen = 0;
    while (n > 0) {
        const char *nl = memchr(buf, '\n', n);
        size_t llen = nl ? (size_t)(nl - buf) + 1 : n;
        if (olen + plen + llen + 1 > sizeof(out)) {
            br_write_all(job, fd, out, olen);
            olen = 0;
        }
        memcpy(out + olen, prefix, plen);
        memcpy(out + olen + plen, buf, llen);
        olen += plen + llen;
        if (!nl) out[olen++] = '\n';
        buf += llen;
        n -= llen;
    }
    br_write_all(job, fd, out, olen);
}

static void br_stream_close(br_job_t *job, int rank, br_stream_t *s)
{
    if (s->len) br_emit_lines(job, rank, s->to_fd, s->buf, s->len);
    s->len = 0;
    close(s->fd);
    s->fd = -1;
}

/* Reads what the pipe holds (all of it when 'drain', else one read), forwards the complete
 * lines and keeps the incomplete tail; at EOF the tail is forwarded with a newline added. */
static void br_stream_read(br_job_t *job, int rank, br_stream_t *s, int drain)
{
    while (s->fd >= 0) {
        ssize_t n = read(s->fd, s->buf + s->len, BR_LINE_MAX - s->len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) return;
        if (n <= 0) { /* EOF (or an error, treated the same) */
            br_stream_close(job, rank, s);
            return;
        }
        s->len += (size_t)n;
        char *last = memrchr(s->buf, '\n', s->len);
        if (last) {
            size_t done = (size_t)(last - s->buf) + 1;
            br_emit_lines(job, rank, s->to_fd, s->buf, done);
            memmove(s->buf, s->buf + done, s->len - done);
            s->len -= done;
        } else if (s->len == BR_LINE_MAX) {
            br_emit_lines(job, rank, s->to_fd, s->buf, s->len); /* an over-long line */
            s->len = 0;
        }
        if (!drain) return;
    }
}

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

/* Starts terminating the job: SIGTERM now (unless sig == 0), SIGKILL at now + grace_ms. */
void br_terminate(br_job_t *job, int sig, int grace_ms)
{
    if (sig) br_signal_all(job, sig);
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

static void br_on_signal(br_job_t *job, const struct signalfd_siginfo *si)
{
    int sig = (int)si->ssi_signo;
    if (job->state != BR_RUNNING) {
        /* Already stopping (a second ^C, or a signal during the grace period): no more grace. */
        br_msg("received signal %d (%s) while terminating; killing %d rank%s", sig, strsignal(sig),
               job->nalive, br_plural(job->nalive));
        br_signal_all(job, SIGKILL);
        job->kill_deadline = -1;
        return;
    }
    job->state = BR_SIGNALED;
    job->term_sig = sig;
    /* ^C from the terminal was already delivered to the ranks, which share our process group. */
    int from_tty = sig == SIGINT && si->ssi_code == SI_KERNEL;
    br_msg("received signal %d (%s)%s %d rank%s", sig, strsignal(sig),
           from_tty ? " from the terminal, as did the ranks; waiting for" : "; forwarding it to",
           job->nalive, br_plural(job->nalive));
    br_terminate(job, from_tty ? 0 : sig, BR_SIGNAL_GRACE_MS);
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
        br_terminate(job, SIGTERM, BR_FAIL_GRACE_MS);
    }
    if (job->kill_deadline >= 0 && now >= job->kill_deadline) {
        if (job->nalive > 0)
            br_msg("%d rank%s still running after the grace period; sending SIGKILL", job->nalive,
                   br_plural(job->nalive));
        br_signal_all(job, SIGKILL);
        job->kill_deadline = -1;
    }
}

static int br_poll_timeout(const br_job_t *job)
{
    int64_t next = -1;
    if (job->state == BR_RUNNING && job->job_deadline >= 0) next = job->job_deadline;
    if (job->kill_deadline >= 0 && (next < 0 || job->kill_deadline < next))
        next = job->kill_deadline;
    if (next < 0) return -1;
    int64_t left = next - br_now_ms();
    return left <= 0 ? 0 : left > INT_MAX ? INT_MAX : (int)left;
}

/* Runs until every rank is reaped. With --tag-output, poll slot 1 + 2r + k is rank r's stream
 * k (fd -1 once closed, which poll skips). */
void br_supervise(br_job_t *job)
{
    int n = job->o.nranks, np = 1 + (job->o.tag_output ? 2 * n : 0);
    struct pollfd *pfd = calloc((size_t)np, sizeof(*pfd));
    if (!pfd) {
        br_msg("out of memory");
        br_signal_all(job, SIGKILL);
        exit(BR_EXIT_LAUNCHER);
    }
    pfd[0] = (struct pollfd){.fd = job->sfd, .events = POLLIN};
    while (job->nalive > 0) {
        for (int i = 1; i < np; i++)
            pfd[i] =
                (struct pollfd){.fd = job->ranks[(i - 1) / 2].io[(i - 1) % 2].fd, .events = POLLIN};
        int rc = poll(pfd, (nfds_t)np, br_poll_timeout(job));
        if (rc < 0 && errno != EINTR) {
            br_msg("poll failed: %s; killing the job", strerror(errno));
            br_signal_all(job, SIGKILL);
            exit(BR_EXIT_LAUNCHER);
        }
        /* Output first, so lines written just before an exit precede the verdict. */
        for (int i = 1; rc > 0 && i < np; i++)
            if (pfd[i].revents)
                br_stream_read(job, (i - 1) / 2, &job->ranks[(i - 1) / 2].io[(i - 1) % 2], 0);
        if (rc > 0 && pfd[0].revents) br_read_signals(job);
        br_check_deadlines(job);
    }
    /* Every rank is gone: forward what is left in the pipes without waiting for EOF (a
     * grandchild may still hold a write end open). */
    for (int i = 1; i < np; i++) {
        br_stream_t *st = &job->ranks[(i - 1) / 2].io[(i - 1) % 2];
        br_stream_read(job, (i - 1) / 2, st, 1);
        if (st->fd >= 0) br_stream_close(job, (i - 1) / 2, st);
    }
    free(pfd);
}
