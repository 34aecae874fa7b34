/* The device engine's host loop (see devdrive.h). */
#include "cuda/devdrive.h"
#include "core/log.h"
#include "cuda/devplan.h"
#include "transport/transport.h"

#include <stdio.h>
#include <string.h>

void braid_dev_report_read(const braid_dev_report_t *r, int32_t *status_p, uint32_t *pc_p)
{
    uint64_t w = __atomic_load_n((const uint64_t *)(const void *)r, __ATOMIC_ACQUIRE);
    *status_p = (int32_t)(uint32_t)w;
    *pc_p = (uint32_t)(w >> 32);
}

static void link_name(const braid_dev_drive_t *d, uint32_t bad, char *out, size_t len)
{
    uint32_t link = bad & 0xff;
    int send = (bad & BRAID_DEV_WAIT_SEND) != 0;
    if (link >= BRAID_DEV_MAX_LINKS) {
        snprintf(out, len, "link %u", link);
        return;
    }
    int peer = braid_dev_link_peer((int)link, send, d->nranks, d->rank, d->order);
    snprintf(out, len, "%s rank %d (%s link)", send ? "to" : "from", peer,
             link ? "point-to-point" : "ring");
}

braid_result_t braid_dev_lane_error(const braid_dev_drive_t *d, int l)
{
    const braid_dev_report_t *r = &d->reports[l];
    int32_t st;
    uint32_t pc;
    braid_dev_report_read(r, &st, &pc);
    char ln[96];
    link_name(d, r->bad_link, ln, sizeof(ln));
    int c = l / (d->nblk > 0 ? d->nblk : 1), b = l % (d->nblk > 0 ? d->nblk : 1);
    if (st == BRAID_DEV_ERR_MISMATCH)
        return braid_set_error(BRAID_ERR_MISMATCH,
                               "%s: rank %d channel %d block %d step %u: the message %s has tag "
                               "%#llx (collective #%u, %u bytes), expected collective #%u",
                               d->what, d->rank, c, b, pc, ln, (unsigned long long)r->bad_tag,
                               (unsigned)(r->bad_tag >> 32), (unsigned)(r->bad_tag & 0xffffffffu),
                               d->seq);
    if (st == BRAID_DEV_ERR_ABORTED && (r->bad_link & BRAID_DEV_WAIT_OWN))
        return braid_set_error(BRAID_ERR_ABORTED, "%s: rank %d channel %d aborted at step %u",
                               d->what, d->rank, c, pc);
    if (st == BRAID_DEV_ERR_ABORTED)
        return braid_set_error(BRAID_ERR_REMOTE,
                               "%s: rank %d channel %d step %u: the peer failed (the FIFO %s was "
                               "aborted)",
                               d->what, d->rank, c, pc, ln);
    return braid_set_error(BRAID_ERR_INTERNAL, "%s: rank %d channel %d step %u: bad link %u",
                           d->what, d->rank, c, pc, r->bad_link);
}

braid_result_t braid_dev_drive_begin(braid_dev_drive_t *d)
{
    if (d->nlanes < 0 || d->nlanes > BRAID_DEV_MAX_LANES)
        return braid_set_error(BRAID_ERR_INTERNAL, "%s: %d lanes", d->what, d->nlanes);
    for (int l = 0; l < d->nlanes; l++) {
        int32_t st;
        braid_dev_report_read(&d->reports[l], &st, &d->prev[l]);
    }
    d->last_ns = braid_now_ns();
    d->idle = 0;
    d->runs = d->idles = 0;
    return BRAID_SUCCESS;
}

static braid_result_t stuck(const braid_dev_drive_t *d, const int32_t *st)
{
    int l = 0;
    while (l < d->nlanes - 1 && st[l] == BRAID_DEV_DONE)
        l++;
    char ln[96];
    link_name(d, d->reports[l].bad_link, ln, sizeof(ln));
    return braid_set_error(BRAID_ERR_TIMEOUT,
                           "%s: rank %d channel %d stuck at step %u waiting %s %s for %.1f s "
                           "(BRAID_TIMEOUT)",
                           d->what, d->rank, l / (d->nblk > 0 ? d->nblk : 1), d->prev[l],
                           d->reports[l].bad_link & BRAID_DEV_WAIT_SEND ? "for a free slot"
                                                                        : "for a message",
                           ln, d->timeout_s);
}

int braid_dev_drive_step(braid_dev_drive_t *d, const braid_dev_drive_ops_t *ops, void *ctx)
{
    int32_t st[BRAID_DEV_MAX_LANES];
    braid_result_t res = ops->launch(ctx, d->budget ? d->budget : 1);
    if (res < 0) return res;
    d->runs++;
    int done = 1, moved = 0;
    for (int l = 0; l < d->nlanes; l++) {
        uint32_t pc;
        braid_dev_report_read(&d->reports[l], &st[l], &pc);
        if (st[l] < 0) return braid_dev_lane_error(d, l);
        if (st[l] != BRAID_DEV_DONE) done = 0;
        if (pc != d->prev[l]) moved = 1;
        d->prev[l] = pc;
    }
    if (done) return 1;
    uint64_t now = braid_now_ns();
    if (moved) {
        d->idle = 0;
        d->last_ns = now;
    } else {
        d->idle++;
        d->idles++;
    }
    if (d->timeout_s > 0 && (double)(now - d->last_ns) > d->timeout_s * 1e9) return stuck(d, st);
    if (ops->check) {
        res = ops->check(ctx);
        if (res < 0) return res;
    }
    if (d->idle && ops->idle) ops->idle(ctx, d->idle);
    return 0;
}

braid_result_t braid_dev_drive(braid_dev_drive_t *d, const braid_dev_drive_ops_t *ops, void *ctx)
{
    BRAID_CHECK(braid_dev_drive_begin(d));
    for (;;) {
        int r = braid_dev_drive_step(d, ops, ctx);
        if (r < 0) return r;
        if (r == 1) return BRAID_SUCCESS;
    }
}
