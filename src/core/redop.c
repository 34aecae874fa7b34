/* User-created reduction operations: braid_redop_create_premulsum / braid_redop_destroy, the
 * per-communicator table and the PreMulSum executor step (see redop.h for the op encoding). */
#include "core/redop.h"
#include "algos/algo.h"
#include "core/log.h"
#include "reduce/reduce.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define SLOT_BITS 12
#define MAX_SLOTS (1 << SLOT_BITS)
#define TAG_MASK ((1u << 18) - 1)

typedef struct {
    uint32_t tag; /* 0 = free */
    braid_datatype_t dtype;
    uint64_t scalar; /* one element of dtype, little-endian in the low bytes */
} slot_t;

struct braid_redop_table {
    slot_t *slots;
    int cap;
};

/* Tables change only in create/destroy and are read by argument checks: one lock for all. */
static pthread_mutex_t tab_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint32_t next_tag;

static uint32_t draw_tag(void)
{
    uint32_t t;
    do
        t = (atomic_fetch_add(&next_tag, 1) + 1) & TAG_MASK;
    while (t == 0);
    return t;
}

static int decode(braid_redop_t op, int *slot_p, uint32_t *tag_p)
{
    if ((int)op < (int)BRAID_NUM_OPS) return 0;
    unsigned v = (unsigned)op - BRAID_NUM_OPS;
    uint32_t tag = v >> SLOT_BITS;
    if (tag == 0 || tag > TAG_MASK) return 0;
    *slot_p = (int)(v & (MAX_SLOTS - 1));
    *tag_p = tag;
    return 1;
}

/* The live slot of op on comm, or NULL; tab_lock held. */
static slot_t *lookup(struct braid_comm *comm, braid_redop_t op)
{
    int ix;
    uint32_t tag;
    struct braid_redop_table *t = comm->redops;
    if (!t || !decode(op, &ix, &tag) || ix >= t->cap) return NULL;
    return t->slots[ix].tag == tag ? &t->slots[ix] : NULL;
}

braid_result_t braid_redop_create_premulsum(braid_redop_t *op_p, const void *scalar,
                                            braid_datatype_t dtype, braid_comm_t comm)
{
    braid_clear_error();
    BRAID_CHECK(braid_comm_check(comm));
    if (!op_p)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "redop_create_premulsum: op_p is NULL");
    if (!scalar)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "redop_create_premulsum: scalar is NULL");
    if ((unsigned)dtype >= BRAID_NUM_DTYPES)
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "redop_create_premulsum: dtype=%d is not a braid_datatype_t",
                               (int)dtype);
    pthread_mutex_lock(&tab_lock);
    struct braid_redop_table *t = comm->redops;
    if (!t) {
        t = calloc(1, sizeof(*t));
        if (!t) {
            pthread_mutex_unlock(&tab_lock);
            return braid_set_error(BRAID_ERR_NOMEM, "redop_create_premulsum: out of memory");
        }
        comm->redops = t;
    }
    int ix = 0;
    while (ix < t->cap && t->slots[ix].tag)
        ix++;
    if (ix == t->cap) {
        int cap = t->cap ? 2 * t->cap : 8;
        if (cap > MAX_SLOTS) cap = MAX_SLOTS;
        slot_t *s = ix < MAX_SLOTS ? realloc(t->slots, (size_t)cap * sizeof(*s)) : NULL;
        if (!s) {
            pthread_mutex_unlock(&tab_lock);
            return braid_set_error(BRAID_ERR_NOMEM,
                                   ix < MAX_SLOTS ? "redop_create_premulsum: out of memory"
                                                  : "redop_create_premulsum: %d ops are live on "
                                                    "this communicator (the most it holds)",
                                   MAX_SLOTS);
        }
        memset(s + t->cap, 0, (size_t)(cap - t->cap) * sizeof(*s));
        t->slots = s;
        t->cap = cap;
    }
    slot_t *sl = &t->slots[ix];
    sl->tag = draw_tag();
    sl->dtype = dtype;
    sl->scalar = 0;
    memcpy(&sl->scalar, scalar, braid_dtype_size(dtype));
    *op_p = (braid_redop_t)((int)BRAID_NUM_OPS + (int)(sl->tag << SLOT_BITS | (uint32_t)ix));
    pthread_mutex_unlock(&tab_lock);
    return BRAID_SUCCESS;
}

braid_result_t braid_redop_destroy(braid_redop_t op, braid_comm_t comm)
{
    braid_clear_error();
    BRAID_CHECK(braid_comm_check(comm));
    if ((unsigned)op < BRAID_NUM_OPS)
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "redop_destroy: op=%d (%s) is built in; only ops made by "
                               "braid_redop_create_premulsum are destroyed",
                               (int)op, braid_op_name(op));
    pthread_mutex_lock(&tab_lock);
    slot_t *s = lookup(comm, op);
    if (s) s->tag = 0;
    pthread_mutex_unlock(&tab_lock);
    if (!s)
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "redop_destroy: op=%d is not a live op of this communicator "
                               "(destroyed already, created on another communicator, or garbage)",
                               (int)op);
    return BRAID_SUCCESS;
}

braid_result_t braid_redop_resolve(struct braid_comm *comm, braid_op_args_t *a, const char *what)
{
    if ((unsigned)a->op < BRAID_NUM_OPS) return BRAID_SUCCESS;
    pthread_mutex_lock(&tab_lock);
    slot_t *s = lookup(comm, a->op);
    slot_t copy = s ? *s : (slot_t){0};
    pthread_mutex_unlock(&tab_lock);
    if (!s)
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "%s: op=%d is not a braid_redop_t nor a live op of this "
                               "communicator (destroyed, created on another communicator, or "
                               "garbage)",
                               what, (int)a->op);
    if (copy.dtype != a->dtype)
        return braid_set_error(
            BRAID_ERR_INVALID_ARG, "%s: op=%d (premulsum) was created for dtype %s, called with %s",
            what, (int)a->op, braid_dtype_name(copy.dtype), braid_dtype_name(a->dtype));
    a->premul = BRAID_PREMUL_USER;
    a->scalar = copy.scalar;
    return BRAID_SUCCESS;
}

int braid_redop_avg_premul(const braid_op_args_t *a)
{
    return !a->premul && a->op == BRAID_AVG && braid_reduce_avg_prescales(a->dtype) &&
           (a->coll == BRAID_COLL_ALLREDUCE || a->coll == BRAID_COLL_REDUCE ||
            a->coll == BRAID_COLL_REDUCE_SCATTER);
}

void braid_redop_prescale(const braid_op_args_t *a, int nranks, void *dst, const void *src,
                          size_t count)
{
    if (a->premul == BRAID_PREMUL_AVG || (!a->premul && a->op == BRAID_AVG))
        braid_reduce_avg_prescale(a->dtype, dst, src, count, nranks);
    else
        braid_reduce_scale(a->dtype, dst, src, count, &a->scalar);
}

braid_result_t braid_redop_premul_execute(struct braid_comm *comm, const braid_op_args_t *a,
                                          uint32_t seq)
{
    braid_op_args_t b = *a;
    b.op = BRAID_SUM;
    if (!a->premul) b.premul = BRAID_PREMUL_AVG; /* the descriptor still says avg */
    if (a->count == 0) return braid_algo_execute(comm, &b, seq);
    size_t es = braid_dtype_size(a->dtype);
    size_t n_in = a->coll == BRAID_COLL_REDUCE_SCATTER ? a->count * (size_t)comm->nranks : a->count;
    void *tmp = NULL;
    /* All-reduce, and reduce at the root, then run in place on the scaled receive buffer. */
    int into_recv =
        a->coll == BRAID_COLL_ALLREDUCE || (a->coll == BRAID_COLL_REDUCE && comm->rank == a->root);
    if (into_recv) {
        braid_redop_prescale(&b, comm->nranks, a->recvbuf, a->sendbuf, n_in);
        b.sendbuf = a->recvbuf;
    } else {
        tmp = malloc(n_in * es);
        if (!tmp)
            return braid_set_error(
                BRAID_ERR_NOMEM, "%s: out of memory for the %s input (%zu bytes)",
                braid_coll_name(a->coll),
                b.premul == BRAID_PREMUL_AVG ? "pre-scaled avg" : "premulsum", n_in * es);
        braid_redop_prescale(&b, comm->nranks, tmp, a->sendbuf, n_in);
        b.sendbuf = tmp;
    }
    braid_result_t res = braid_algo_execute(comm, &b, seq);
    free(tmp);
    return res;
}

const char *braid_redop_wire_name(unsigned op)
{
    return op == BRAID_OP_WIRE_PREMULSUM ? "premulsum" : braid_op_name((braid_redop_t)op);
}

void braid_redop_comm_free(struct braid_comm *comm)
{
    pthread_mutex_lock(&tab_lock);
    struct braid_redop_table *t = comm->redops;
    comm->redops = NULL;
    pthread_mutex_unlock(&tab_lock);
    if (t) free(t->slots);
    free(t);
}
