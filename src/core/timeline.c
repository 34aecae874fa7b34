/* BRAID_TRACE: the timeline recorder and its Chrome-trace writer (see timeline.h). */
#include "core/timeline.h"
#include "algos/algo.h"
#include "algos/plan.h"
#include "core/comm.h"
#include "core/config.h"
#include "core/log.h"
#include "core/split.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TL_MAX_EVENTS (1u << 20) /* about 64 MiB; later events are counted, not kept */
#define TL_MAX_COMMS 64
#define TL_TIDS_PER_COMM 32 /* calls, send/recv, then one row per channel */

int braid_timeline_on;

typedef struct {
    braid_tl_event_t e;
    int16_t comm; /* index into tl.comms */
} tl_rec_t;

static pthread_mutex_t tl_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    tl_rec_t *ev;
    size_t n, cap;
    uint64_t dropped;
    struct braid_comm *owner;
    int owner_rank, owner_nranks;
    int finished; /* the owner wrote (or gave up): no second timeline in this process */
    int atexit_set;
    int64_t wall_minus_mono; /* ns: this process's wall clock minus braid_now_ns() */
    char path[1024];
    char host[64];
    int ncomms;
    struct {
        int rank, nranks, nchannels;
    } comms[TL_MAX_COMMS];
} tl;

static int64_t wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* A growing string. */
typedef struct {
    char *s;
    size_t len, cap;
    int failed;
} sbuf_t;

static void sb_printf(sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf_t *b, const char *fmt, ...)
{
    if (b->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->len;
        int k = vsnprintf(b->s ? b->s + b->len : NULL, room, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->failed = 1;
            return;
        }
        if ((size_t)k < room) {
            b->len += (size_t)k;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 1 << 16;
        while (cap - b->len <= (size_t)k)
            cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->failed = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

static void write_event(sbuf_t *b, int pid, int64_t base, const tl_rec_t *r)
{
    const braid_tl_event_t *e = &r->e;
    int tid = r->comm * TL_TIDS_PER_COMM + (e->kind == BRAID_TL_STEP ? 2 + e->channel : e->kind);
    double ts = (double)((int64_t)e->t0 + tl.wall_minus_mono - base) / 1e3;
    double dur = (double)(e->t1 - e->t0) / 1e3;
    static const char *cats[] = {"call", "p2p", "step"};
    sb_printf(b,
              "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,"
              "\"dur\":%.3f,\"args\":{\"seq\":%u,\"bytes\":%llu",
              e->name, cats[e->kind], pid, tid, ts, dur, e->seq, (unsigned long long)e->bytes);
    if (e->kind == BRAID_TL_CALL) {
        sb_printf(b, ",\"count\":%llu", (unsigned long long)e->count);
        if (e->dtype >= 0) sb_printf(b, ",\"dtype\":\"%s\"", braid_dtype_name(e->dtype));
        if (e->op >= 0)
            sb_printf(b, ",\"op\":\"%s\"",
                      e->op < BRAID_NUM_OPS ? braid_op_name(e->op) : "premulsum");
        if (e->algo >= 0) sb_printf(b, ",\"algo\":\"%s\"", braid_algo_name(e->algo));
        if (e->root >= 0) sb_printf(b, ",\"root\":%d", e->root);
    }
    if (e->send_peer >= 0) sb_printf(b, ",\"send_to\":%d", e->send_peer);
    if (e->recv_peer >= 0) sb_printf(b, ",\"recv_from\":%d", e->recv_peer);
    sb_printf(b, "}},\n");
}

/* This rank's part of the trace: its names (process, rows) and its events. */
static void serialize(sbuf_t *b, int pid, int64_t base)
{
    sb_printf(b,
              "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d "
              "(%s, pid %d)\"}},\n",
              pid, pid, tl.host, (int)getpid());
    sb_printf(b,
              "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"args\":{"
              "\"sort_index\":%d}},\n",
              pid, pid);
    for (int k = 0; k < tl.ncomms; k++) {
        char comm[64];
        if (k == 0)
            snprintf(comm, sizeof(comm), "comm %d", k);
        else
            snprintf(comm, sizeof(comm), "comm %d (rank %d of %d)", k, tl.comms[k].rank,
                     tl.comms[k].nranks);
        int t0 = k * TL_TIDS_PER_COMM;
        sb_printf(b,
                  "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{"
                  "\"name\":\"%s: calls\"}},\n",
                  pid, t0, comm);
        sb_printf(b,
                  "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{"
                  "\"name\":\"%s: send/recv\"}},\n",
                  pid, t0 + 1, comm);
        for (int c = 0; c < tl.comms[k].nchannels && c < TL_TIDS_PER_COMM - 2; c++)
            sb_printf(b,
                      "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{"
                      "\"name\":\"%s: channel %d\"}},\n",
                      pid, t0 + 2 + c, comm, c);
    }
    for (size_t i = 0; i < tl.n; i++)
        write_event(b, pid, base, &tl.ev[i]);
}

static int64_t first_wall(void)
{
    int64_t m = INT64_MAX;
    for (size_t i = 0; i < tl.n; i++)
        if ((int64_t)tl.ev[i].e.t0 + tl.wall_minus_mono < m)
            m = (int64_t)tl.ev[i].e.t0 + tl.wall_minus_mono;
    return m == INT64_MAX ? wall_ns() : m;
}

static int write_file(const char *path, const char *const *parts, const size_t *lens, int nparts,
                      int nranks, uint64_t dropped)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        braid_warn(INIT, "BRAID_TRACE: cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n", f);
    for (int i = 0; i < nparts; i++)
        if (lens[i]) fwrite(parts[i], 1, lens[i], f);
    fprintf(f,
            "{\"name\":\"braid trace\",\"ph\":\"i\",\"s\":\"g\",\"ts\":0,\"pid\":0,\"tid\":0,"
            "\"args\":{\"ranks\":%d,\"dropped_events\":%llu}}\n]}\n",
            nranks, (unsigned long long)dropped);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        braid_warn(INIT, "BRAID_TRACE: writing %s failed", path);
        return -1;
    }
    return 0;
}

/* This rank's events alone, to <path>.rank<R>. Called with tl_lock held. */
static void write_own(void)
{
    char path[1100];
    snprintf(path, sizeof(path), "%s.rank%d", tl.path, tl.owner_rank);
    sbuf_t b = {0};
    serialize(&b, tl.owner_rank, first_wall());
    if (!b.failed) {
        const char *parts[1] = {b.s};
        size_t lens[1] = {b.len};
        if (write_file(path, parts, lens, 1, 1, tl.dropped) == 0)
            braid_info(INIT, "BRAID_TRACE: rank %d wrote its own events to %s", tl.owner_rank,
                       path);
    }
    free(b.s);
}

static void reset(void)
{
    free(tl.ev);
    tl.ev = NULL;
    tl.n = tl.cap = 0;
    tl.owner = NULL;
    tl.finished = 1;
}

static void at_exit(void)
{
    pthread_mutex_lock(&tl_lock);
    if (tl.owner && !tl.finished) {
        __atomic_store_n(&braid_timeline_on, 0, __ATOMIC_RELAXED);
        write_own();
        reset();
    }
    pthread_mutex_unlock(&tl_lock);
}

void braid_timeline_comm_init(struct braid_comm *comm)
{
    comm->tl_index = -1;
    const char *path = braid_param_str("TRACE");
    if (!path || !*path) return;
    pthread_mutex_lock(&tl_lock);
    if (!tl.owner && !tl.finished && !braid_split_parent_host()) {
        snprintf(tl.path, sizeof(tl.path), "%s", path);
        if (gethostname(tl.host, sizeof(tl.host)) != 0) snprintf(tl.host, sizeof(tl.host), "?");
        tl.host[sizeof(tl.host) - 1] = '\0';
        for (char *p = tl.host; *p; p++)
            if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20) *p = '_';
        tl.owner = comm;
        tl.owner_rank = comm->rank;
        tl.owner_nranks = comm->nranks;
        tl.wall_minus_mono = wall_ns() - (int64_t)braid_now_ns();
        if (!tl.atexit_set) tl.atexit_set = atexit(at_exit) == 0;
        __atomic_store_n(&braid_timeline_on, 1, __ATOMIC_RELAXED);
    }
    if (tl.owner && tl.ncomms < TL_MAX_COMMS) {
        comm->tl_index = tl.ncomms;
        tl.comms[tl.ncomms].rank = comm->rank;
        tl.comms[tl.ncomms].nranks = comm->nranks;
        tl.comms[tl.ncomms].nchannels = comm->nchannels;
        tl.ncomms++;
    }
    pthread_mutex_unlock(&tl_lock);
}

void braid_timeline_add(struct braid_comm *comm, const braid_tl_event_t *ev)
{
    if (comm->tl_index < 0) return;
    pthread_mutex_lock(&tl_lock);
    if (tl.owner && !tl.finished) {
        if (tl.n == tl.cap && tl.cap < TL_MAX_EVENTS) {
            size_t cap = tl.cap ? tl.cap * 2 : 4096;
            tl_rec_t *e = realloc(tl.ev, cap * sizeof(*e));
            if (e) {
                tl.ev = e;
                tl.cap = cap;
            }
        }
        if (tl.n < tl.cap) {
            tl.ev[tl.n].e = *ev;
            tl.ev[tl.n].comm = (int16_t)comm->tl_index;
            tl.n++;
        } else {
            tl.dropped++;
        }
    }
    pthread_mutex_unlock(&tl_lock);
}

/* Rank 0 of the owner collects every rank's part over the communicator itself. */
static int gather_and_write(struct braid_comm *comm)
{
    int n = comm->nranks, me = comm->rank;
    int64_t mine[2] = {first_wall(), (int64_t)tl.dropped}, *all = calloc((size_t)n * 2, 8);
    uint64_t *lens = calloc((size_t)n, sizeof(*lens));
    char **parts = calloc((size_t)n, sizeof(*parts));
    sbuf_t b = {0};
    int ok = all && lens && parts;
    ok = ok && braid_allgather(mine, all, 2, BRAID_INT64, comm) == BRAID_SUCCESS;
    int64_t base = mine[0];
    uint64_t dropped = 0;
    for (int r = 0; ok && r < n; r++) {
        if (all[2 * r] < base) base = all[2 * r];
        dropped += (uint64_t)all[2 * r + 1];
    }
    if (ok) serialize(&b, me, base);
    uint64_t len = b.failed ? 0 : b.len;
    ok = ok && braid_allgather(&len, lens, 1, BRAID_UINT64, comm) == BRAID_SUCCESS;
    if (ok && me != 0) {
        if (len) ok = braid_send(b.s, len, BRAID_UINT8, 0, comm) == BRAID_SUCCESS;
    } else if (ok) {
        parts[0] = b.s;
        braid_group_start();
        for (int r = 1; r < n && ok; r++) {
            if (!lens[r]) continue;
            parts[r] = malloc(lens[r]);
            if (!parts[r])
                ok = 0;
            else
                braid_recv(parts[r], lens[r], BRAID_UINT8, r, comm);
        }
        ok = braid_group_end() == BRAID_SUCCESS && ok;
        if (ok) {
            int w = write_file(tl.path, (const char *const *)parts, (const size_t *)lens, n, n,
                               dropped);
            if (w == 0) braid_info(INIT, "BRAID_TRACE: wrote %d ranks' events to %s", n, tl.path);
            ok = w == 0;
        }
        parts[0] = NULL;
        for (int r = 1; r < n; r++)
            free(parts[r]);
    }
    free(b.s);
    free(all);
    free(lens);
    free(parts);
    return ok;
}

void braid_timeline_comm_destroy(struct braid_comm *comm)
{
    if (comm->tl_index < 0) return;
    pthread_mutex_lock(&tl_lock);
    int owner = tl.owner == comm && !tl.finished;
    if (owner) __atomic_store_n(&braid_timeline_on, 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&tl_lock);
    if (!owner) return;
    /* Recording is off: the gather's own calls are not recorded, and nothing else adds. */
    int ok = 0;
    if (!atomic_load(&comm->error) && !atomic_load(&comm->aborted)) {
        char saved[512];
        snprintf(saved, sizeof(saved), "%s", braid_last_error());
        ok = gather_and_write(comm);
        if (!ok)
            braid_warn(INIT, "BRAID_TRACE: gathering the trace to rank 0 failed (%s)",
                       braid_last_error());
        braid_restore_error(saved);
    }
    pthread_mutex_lock(&tl_lock);
    if (!ok) write_own();
    reset();
    pthread_mutex_unlock(&tl_lock);
}
