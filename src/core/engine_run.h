/* Private to the engine (engine.c, engine_check.c): one call's state. */
#ifndef BRAID_CORE_ENGINE_RUN_H
#define BRAID_CORE_ENGINE_RUN_H

#include "core/engine.h"
#include "transport/transport.h"

#include <stddef.h>

typedef struct {
    struct braid_comm *comm;
    const braid_op_args_t *a;
    size_t es;
    braid_msg_hdr_t hdr;
    const char *in;
    char *out;
    int by_ref;                 /* ring plan: sends may refer to in/out (send_post_ref) */
    size_t out_bytes;           /* extent of the output buffer */
    size_t zc_bytes;            /* zero-copy receives (recv_expose): the output's size, else 0 */
    int hello_send, hello_recv; /* descriptor exchange steps still to do (channel 0) */
    int rejected;               /* braid_engine_reject: this rank refused the call */
    int hello_only;             /* braid_engine_hello: the descriptor exchange, no data */
    /* braid_engine_check_parent: messages of this descriptor (the call's own part on these
     * connections, seq hdr.seq) are normal */
    const braid_msg_hdr_t *part;
    const char *reason; /* why (rejected) */
    int noticed;        /* 1 + the peer last told that this call waits for it */
} run_t;

/* Checks a received header h (payload at buf) against this rank's call: what is expected is
 * a message of `bytes` payload bytes, header-only (HELLO) when hello is set. */
braid_result_t braid_run_check_header(run_t *r, braid_conn_t *conn, const braid_msg_hdr_t *h,
                                      const void *buf, size_t bytes, int hello);
/* Called while this rank sleeps: looks at the next message of every incoming connection. */
braid_result_t braid_run_check_foreign(run_t *r, int algo);
/* The descriptor exchange (channel 0): BRAID_INPROGRESS while the slot or message is not there. */
braid_result_t braid_run_give_hello(run_t *r);
braid_result_t braid_run_take_hello(run_t *r);
/* A BRAID_ERR_REMOTE whose cause is a mismatch visible in a FIFO becomes that mismatch. */
braid_result_t braid_run_better_cause(run_t *r, int algo, braid_result_t res);

#endif
