/* Device buffers in sends, receives and the collectives on the send/recv connections
 * (alltoall(v), gather, scatter, allgatherv, reduce_scatterv): staged through host memory.
 *
 * The device engine (src/cuda) runs the ring and tree collectives on device buffers; these
 * calls are not plans it runs, so their device buffers go through host memory, as every
 * buffer of a communicator that spans hosts does: a send's buffer is copied to the host when
 * the runner takes the operation (p2p.c link_new), a receive lands in host memory and is copied
 * to the device when it completes, before its request does; a p2p collective copies its input
 * before and its output after running on host buffers. As every call on device buffers but the
 * stream-ordered forms, they are ordered after the device work issued before the call on the
 * legacy default stream (and so the blocking streams): braid_dev_ready, on the caller's thread
 * when the call is made. The copies run on the communicator's staging stream (non-blocking;
 * never the legacy default stream) and are waited for.
 *
 * Which memory a buffer is, is decided per call (braid_cuda_ptr_device), as for every
 * collective: device memory of the communicator's device is staged; of another device,
 * BRAID_ERR_INVALID_ARG; device memory on a communicator without a device,
 * BRAID_ERR_UNSUPPORTED. Tests on machines without a GPU simulate device memory with the
 * classifier hook and the copies with braid_p2p_test_set_copier. */
#include "core/comm.h"
#include "core/log.h"
#include "core/p2p_impl.h"
#include "cuda/cuda.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- host images, kept for reuse -------------------------------------------------------------
 * A call on device buffers gets host memory for its images and gives it back when it is done.
 * Allocating them per call made every large message map fresh pages and fault each one in as
 * the device copy wrote it (glibc maps blocks of more than 32 MiB at most and unmaps them at
 * free). Up to SHADOW_KEEP images of SHADOW_KEEP_BYTES in all stay with the communicator
 * (the smallest go first); a get takes the smallest kept one that is large enough. The memory
 * is plain malloc'd memory, not pinned: pinning (cudaMallocHost / cudaHostRegister) on the
 * worker could wait for streams other communicators hold (see cuda/stage.c). */
#define SHADOW_KEEP 4
#define SHADOW_KEEP_BYTES ((size_t)1 << 30)
#define SHADOW_HDR 64 /* keeps the image 64-byte aligned */

struct braid_dev_shadows {
    pthread_mutex_t lock;
    void *keep[SHADOW_KEEP]; /* images (past their headers) */
    int nkeep;
    size_t kept_bytes;
    uint64_t allocs;
};

typedef struct {
    struct braid_dev_shadows *pool;
    size_t cap;
} shadow_hdr_t;

static shadow_hdr_t *hdr_of(void *p)
{
    return (shadow_hdr_t *)(void *)((char *)p - SHADOW_HDR);
}

static struct braid_dev_shadows *pool_of(struct braid_comm *comm)
{
    struct braid_dev_shadows *s = atomic_load(&comm->shadows);
    if (s) return s;
    s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    pthread_mutex_init(&s->lock, NULL);
    struct braid_dev_shadows *none = NULL;
    if (atomic_compare_exchange_strong(&comm->shadows, &none, s)) return s;
    pthread_mutex_destroy(&s->lock); /* another thread made it first */
    free(s);
    return none;
}

void *braid_dev_shadow_get(struct braid_comm *comm, size_t bytes)
{
    struct braid_dev_shadows *s = pool_of(comm);
    if (!s) {
        braid_set_error(BRAID_ERR_NOMEM, "host image of %zu B: out of memory", bytes);
        return NULL;
    }
    pthread_mutex_lock(&s->lock);
    int best = -1;
    for (int i = 0; i < s->nkeep; i++)
        if (hdr_of(s->keep[i])->cap >= bytes &&
            (best < 0 || hdr_of(s->keep[i])->cap < hdr_of(s->keep[best])->cap))
            best = i;
    void *p = NULL;
    if (best >= 0) {
        p = s->keep[best];
        s->keep[best] = s->keep[--s->nkeep];
        s->kept_bytes -= hdr_of(p)->cap;
    }
    pthread_mutex_unlock(&s->lock);
    if (p) return p;
    size_t cap = (bytes + 4095) & ~(size_t)4095;
    char *raw = cap >= bytes ? aligned_alloc(SHADOW_HDR, SHADOW_HDR + (cap ? cap : 4096)) : NULL;
    if (!raw) {
        braid_set_error(BRAID_ERR_NOMEM, "host image of %zu B: out of memory", bytes);
        return NULL;
    }
    shadow_hdr_t *h = (shadow_hdr_t *)(void *)raw;
    h->pool = s;
    h->cap = cap ? cap : 4096;
    pthread_mutex_lock(&s->lock);
    s->allocs++;
    pthread_mutex_unlock(&s->lock);
    return raw + SHADOW_HDR;
}

void braid_dev_shadow_put(void *p)
{
    if (!p) return;
    shadow_hdr_t *h = hdr_of(p);
    struct braid_dev_shadows *s = h->pool;
    void *drop[SHADOW_KEEP];
    int ndrop = 0;
    pthread_mutex_lock(&s->lock);
    /* Kept images no larger than p, smallest first: as many of them go as p needs room for;
     * when even all of them would not make room, p goes and they stay. */
    int order[SHADOW_KEEP], n = 0;
    for (int i = 0; i < s->nkeep; i++) {
        if (hdr_of(s->keep[i])->cap > h->cap) continue;
        int j = n++;
        for (; j > 0 && hdr_of(s->keep[order[j - 1]])->cap > hdr_of(s->keep[i])->cap; j--)
            order[j] = order[j - 1];
        order[j] = i;
    }
    int count = s->nkeep, k = 0;
    size_t bytes = s->kept_bytes;
    while (k < n && (count == SHADOW_KEEP || bytes + h->cap > SHADOW_KEEP_BYTES)) {
        bytes -= hdr_of(s->keep[order[k++]])->cap;
        count--;
    }
    if (count < SHADOW_KEEP && bytes + h->cap <= SHADOW_KEEP_BYTES) {
        for (int i = 0; i < k; i++) {
            drop[ndrop++] = s->keep[order[i]];
            s->keep[order[i]] = NULL;
        }
        int m = 0;
        for (int i = 0; i < s->nkeep; i++)
            if (s->keep[i]) s->keep[m++] = s->keep[i];
        s->keep[m++] = p;
        s->nkeep = m;
        s->kept_bytes = bytes + h->cap;
        p = NULL;
    }
    pthread_mutex_unlock(&s->lock);
    for (int i = 0; i < ndrop; i++)
        free(hdr_of(drop[i]));
    if (p) free(h);
}

void braid_dev_shadows_free(struct braid_comm *comm)
{
    struct braid_dev_shadows *s = atomic_exchange(&comm->shadows, NULL);
    if (!s) return;
    for (int i = 0; i < s->nkeep; i++)
        free(hdr_of(s->keep[i]));
    pthread_mutex_destroy(&s->lock);
    free(s);
}

uint64_t braid_dev_shadow_allocs(struct braid_comm *comm)
{
    struct braid_dev_shadows *s = atomic_load(&comm->shadows);
    if (!s) return 0;
    pthread_mutex_lock(&s->lock);
    uint64_t n = s->allocs;
    pthread_mutex_unlock(&s->lock);
    return n;
}

static braid_result_t (*_Atomic test_copier)(void *dst, const void *src, size_t bytes);

void braid_p2p_test_set_copier(braid_result_t (*fn)(void *dst, const void *src, size_t bytes))
{
    atomic_store(&test_copier, fn);
}

static braid_result_t dev_copy(struct braid_comm *comm, void *dst, const void *src, size_t bytes)
{
    if (!bytes) return BRAID_SUCCESS;
    braid_result_t (*fn)(void *, const void *, size_t) =
        atomic_load_explicit(&test_copier, memory_order_relaxed);
    return fn ? fn(dst, src, bytes) : braid_cuda_comm_copy(comm, dst, src, bytes);
}

static braid_result_t (*_Atomic test_ready)(void);

void braid_dev_test_set_ready(braid_result_t (*fn)(void))
{
    atomic_store(&test_ready, fn);
}

braid_result_t braid_dev_ready(struct braid_comm *comm)
{
    braid_result_t (*fn)(void) = atomic_load_explicit(&test_ready, memory_order_relaxed);
    if (fn) return fn();
    if (atomic_load_explicit(&test_copier, memory_order_relaxed)) return BRAID_SUCCESS;
    return braid_cuda_stream_wait(comm, NULL);
}

braid_result_t braid_p2p_stage_in(struct braid_comm *comm, braid_p2p_op_t *op)
{
    size_t bytes = braid_p2p_op_bytes(op);
    void *h = braid_dev_shadow_get(comm, bytes);
    if (!h)
        return braid_set_error(BRAID_ERR_NOMEM, "%s of %zu B from device memory: out of memory",
                               op->kind == BRAID_P2P_SEND ? "send" : "receive", bytes);
    if (op->kind == BRAID_P2P_SEND) {
        braid_result_t res = dev_copy(comm, h, op->sbuf, bytes);
        if (res < 0) {
            braid_dev_shadow_put(h);
            return res;
        }
        op->dev_buf = (void *)op->sbuf;
        op->sbuf = h;
    } else {
        op->dev_buf = op->rbuf;
        op->rbuf = h;
    }
    op->shadow = h;
    return BRAID_SUCCESS;
}

braid_result_t braid_p2p_stage_out(struct braid_comm *comm, braid_p2p_op_t *op, braid_result_t res)
{
    if (!op->shadow) return res;
    if (res == BRAID_SUCCESS && op->kind == BRAID_P2P_RECV)
        res = dev_copy(comm, op->dev_buf, op->shadow, braid_p2p_op_bytes(op));
    if (op->kind == BRAID_P2P_SEND)
        op->sbuf = op->dev_buf;
    else
        op->rbuf = op->dev_buf;
    braid_dev_shadow_put(op->shadow);
    op->shadow = NULL;
    return res;
}

/* ---- p2p collectives ---------------------------------------------------------------------- */
/* The blocks a v-collective receives can leave bytes of its output's extent unwritten (gaps
 * between displacements): its host image must then start as the device's bytes, or the copy
 * back overwrites them. */
static int recv_has_gaps(const braid_pcoll_t *p, int n, size_t out_bytes)
{
    if (p->coll != BRAID_COLL_ALLTOALLV && p->coll != BRAID_COLL_ALLGATHERV) return 0;
    size_t sum = 0;
    for (int i = 0; i < n; i++)
        sum += p->recvcounts[i];
    return sum * braid_dtype_size(p->dtype) < out_bytes;
}

braid_result_t braid_pcoll_stage_in(struct braid_comm *comm, braid_pcoll_t *p, size_t in_bytes,
                                    size_t out_bytes, void **tmp_p)
{
    *tmp_p = NULL;
    const char *s = p->sendbuf;
    char *o = p->recvbuf;
    int sd = p->dev_send && in_bytes, rd = p->dev_recv && out_bytes;
    if (!sd && !rd) return BRAID_SUCCESS;
    /* Both on the device and overlapping (the in-place forms): one host image of their union,
     * so that the positions relate as on the device. */
    int both = sd && rd && s < o + out_bytes && o < s + in_bytes;
    const char *lo = both ? (s < o ? s : o) : NULL;
    size_t span = 0;
    if (both) {
        const char *hi = s + in_bytes > o + out_bytes ? s + in_bytes : o + out_bytes;
        span = (size_t)(hi - lo);
    }
    size_t total = both ? span : (sd ? in_bytes : 0) + (rd ? out_bytes : 0);
    char *h = braid_dev_shadow_get(comm, total);
    if (!h)
        return braid_set_error(BRAID_ERR_NOMEM,
                               "%s: out of memory for %zu B of host staging (device buffers)",
                               braid_coll_name(p->coll), total);
    braid_result_t res;
    if (both) {
        res = dev_copy(comm, h, lo, span);
        p->sendbuf = h + (s - lo);
        p->recvbuf = h + (o - lo);
    } else {
        res = sd ? dev_copy(comm, h, s, in_bytes) : BRAID_SUCCESS;
        if (sd) p->sendbuf = h;
        if (rd) p->recvbuf = h + (sd ? in_bytes : 0);
        if (rd && res >= 0 && recv_has_gaps(p, comm->nranks, out_bytes))
            res = dev_copy(comm, p->recvbuf, o, out_bytes);
    }
    if (res < 0) {
        braid_dev_shadow_put(h);
        return res;
    }
    *tmp_p = h;
    return BRAID_SUCCESS;
}

braid_result_t braid_pcoll_stage_out(struct braid_comm *comm, const braid_pcoll_t *orig,
                                     const braid_pcoll_t *p, size_t out_bytes, void *tmp)
{
    if (!tmp) return BRAID_SUCCESS;
    braid_result_t res = BRAID_SUCCESS;
    if (orig->dev_recv && out_bytes) res = dev_copy(comm, orig->recvbuf, p->recvbuf, out_bytes);
    braid_dev_shadow_put(tmp);
    return res;
}
