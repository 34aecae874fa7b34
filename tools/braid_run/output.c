/* braid-run: --tag-output. Each rank's stdout and stderr are pipes that the supervisor reads
 * when poll() says so; their complete lines, each prefixed by "[rank] ", are queued for
 * braid-run's own stdout or stderr and written when poll() says that descriptor can take more.
 * The supervisor never blocks on its output: a stalled reader (a full pipe, a stopped pager)
 * fills the queue, and while the queue holds more than BR_OUTQ_MAX bytes the ranks' pipes to it
 * are not read, so the back-pressure reaches the ranks (as it would without the tags) while
 * braid-run keeps handling signals, deadlines and exits.
 *
 * The inherited descriptors stay blocking (O_NONBLOCK would change the open file description
 * that the shell and other programs share), so a write must never ask for more than the
 * descriptor can take when poll() reports POLLOUT: for a pipe that is PIPE_BUF bytes (one free
 * slot of a page), and a terminal reports POLLOUT only with room to spare. Chunks end at a line
 * end where they can, so that stdout and stderr on one terminal do not cut each other's lines.
 * Regular files never block and get the whole queue at once. */
#include "braid_run.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

br_job_t *br_msg_queue;

void br_outq_put(br_job_t *job, int fd, const char *p, size_t n)
{
    br_outq_t *q = &job->outq[fd];
    if (q->dead || n == 0) return;
    if (q->head + q->len + n > q->cap) {
        if (q->head) memmove(q->buf, q->buf + q->head, q->len); /* (buf is NULL before use) */
        q->head = 0;
        if (q->len + n > q->cap) {
            size_t cap = q->cap ? q->cap : 65536;
            while (cap < q->len + n)
                cap *= 2;
            char *b = realloc(q->buf, cap);
            if (!b) { /* out of memory: lose this piece rather than the launcher */
                return;
            }
            q->buf = b;
            q->cap = cap;
        }
    }
    memcpy(q->buf + q->head + q->len, p, n);
    q->len += n;
}

int br_outq_room(const br_job_t *job, int fd)
{
    return job->outq[fd].len < BR_OUTQ_MAX;
}

/* The reader of fd is gone: drop its queue and close the ranks' pipes bound for it. */
static void br_outq_kill(br_job_t *job, int fd)
{
    br_outq_t *q = &job->outq[fd];
    q->dead = 1;
    q->len = q->head = 0;
    for (int r = 0; r < job->o.nranks; r++) {
        br_stream_t *s = &job->ranks[r].io[fd - 1];
        if (s->fd >= 0) {
            close(s->fd);
            s->fd = -1;
            s->len = 0;
        }
    }
}

void br_outq_write(br_job_t *job, int fd)
{
    br_outq_t *q = &job->outq[fd];
    if (q->len == 0 || q->dead) return;
    if (!q->regular) {
        struct stat st;
        q->regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? 1 : -1;
    }
    for (int i = 0; i < 16 && q->len > 0; i++) {
        /* Before every write, the first included: stdout and stderr may be one pipe or
         * terminal (2>&1), which the other queue's writes filled since the caller's poll().
         * POLLERR/POLLHUP (the reader is gone) also write: the write fails with EPIPE. */
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        if (q->regular < 0 && poll(&p, 1, 0) != 1) return;
        size_t n = q->len;
        if (q->regular < 0 && n > PIPE_BUF) {
            const char *nl = memrchr(q->buf + q->head, '\n', PIPE_BUF);
            n = nl ? (size_t)(nl - (q->buf + q->head)) + 1 : PIPE_BUF;
        }
        ssize_t w = write(fd, q->buf + q->head, n);
        if (w < 0 && (errno == EINTR || errno == EAGAIN)) return;
        if (w < 0) { /* EPIPE and friends: the reader is gone */
            br_outq_kill(job, fd);
            return;
        }
        q->head += (size_t)w;
        q->len -= (size_t)w;
        if (q->len == 0) q->head = 0;
    }
}

void br_outq_drop(br_job_t *job, const char *why)
{
    size_t lost = 0;
    for (int fd = 1; fd <= 2; fd++) {
        br_outq_t *q = &job->outq[fd];
        if (q->dead) continue;
        lost += q->len;
        q->dead = 1; /* the ranks' pipes stay open: what comes is read and dropped */
        q->len = q->head = 0;
    }
    if (lost == 0) return;
    /* A note on stderr, unless stderr is the stalled reader. */
    char line[256];
    int n = snprintf(line, sizeof(line),
                     "braid-run: %s; dropping %zu bytes of the ranks' output that the reader "
                     "did not take\n",
                     why, lost);
    struct pollfd p = {.fd = 2, .events = POLLOUT};
    if (n > 0 && n < PIPE_BUF && poll(&p, 1, 0) == 1 && (p.revents & POLLOUT) &&
        write(2, line, (size_t)n) < 0) {
        /* nothing more to do: stderr is gone as well */
    }
}

/* Queues buf[0..n) (one or more lines, the last one possibly unterminated) with each line
 * prefixed by "[rank] ". */
static void br_emit_lines(br_job_t *job, int rank, int fd, const char *buf, size_t n)
{
    char prefix[16];
    size_t plen = (size_t)snprintf(prefix, sizeof(prefix), "[%d] ", rank);
    while (n > 0) {
        const char *nl = memchr(buf, '\n', n);
        size_t llen = nl ? (size_t)(nl - buf) + 1 : n;
        br_outq_put(job, fd, prefix, plen);
        br_outq_put(job, fd, buf, llen);
        if (!nl) br_outq_put(job, fd, "\n", 1);
        buf += llen;
        n -= llen;
    }
}

void br_stream_close(br_job_t *job, int rank, br_stream_t *s)
{
    if (s->len) br_emit_lines(job, rank, s->to_fd, s->buf, s->len);
    s->len = 0;
    if (s->fd >= 0) close(s->fd);
    s->fd = -1;
}

/* Reads what the pipe holds (up to 16 reads when 'drain', else one), queues the complete
 * lines and keeps the incomplete tail; at EOF the tail is queued with a newline added. */
void br_stream_read(br_job_t *job, int rank, br_stream_t *s, int drain)
{
    for (int reads = 0; s->fd >= 0 && reads < (drain ? 16 : 1);) {
        ssize_t n = read(s->fd, s->buf + s->len, BR_LINE_MAX - s->len);
        if (n < 0 && errno == EINTR) continue;
        reads++;
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
    }
}
