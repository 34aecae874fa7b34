/* Results and messages: braid's result codes as NCCL reports them, the last-error messages
 * (the process's, behind ncclGetLastError; each thread's and each communicator's, for the
 * shim's own use), NCCL_DEBUG output. */
#include "shim.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* The calling thread's last failure: what a group records of its failed call, unaffected by
 * the failures of other threads. */
static _Thread_local char thread_msg[SHIM_MSG_BYTES];
/* The process's last failure, as NCCL's ncclLastError: set by every failure of any thread
 * (a non-blocking init's thread included), never cleared, whatever comm is asked about. */
static pthread_mutex_t last_lock = PTHREAD_MUTEX_INITIALIZER;
static char last_msg[SHIM_MSG_BYTES];

void shim_clear(void)
{
    thread_msg[0] = '\0';
}

const char *shim_thread_msg(void)
{
    return thread_msg;
}

void shim_comm_msg(ncclComm_t comm, char *buf)
{
    pthread_mutex_lock(&comm->lock);
    memcpy(buf, comm->failmsg, SHIM_MSG_BYTES);
    pthread_mutex_unlock(&comm->lock);
}

void shim_note(ncclComm_t comm, const char *msg)
{
    char copy[SHIM_MSG_BYTES];
    snprintf(copy, sizeof(copy), "%s", msg); /* msg may be comm->errmsg */
    if (comm) {
        pthread_mutex_lock(&comm->lock);
        memcpy(comm->errmsg, copy, sizeof(copy));
        pthread_mutex_unlock(&comm->lock);
    }
    pthread_mutex_lock(&last_lock);
    memcpy(last_msg, copy, sizeof(copy));
    pthread_mutex_unlock(&last_lock);
}

int shim_debug_level(void)
{
    shim_env_conf(); /* NCCL_DEBUG may come from nccl.conf (NCCL's ncclGetEnv) */
    const char *v = getenv("NCCL_DEBUG");
    if (!v) return 0;
    if (!strcasecmp(v, "VERSION")) return 1;
    if (!strcasecmp(v, "WARN") || !strcasecmp(v, "ABORT")) return 2;
    if (!strcasecmp(v, "INFO")) return 3;
    if (!strcasecmp(v, "TRACE")) return 4;
    return 0;
}

static void emit(const char *level, const char *msg)
{
    char host[64] = "?";
    gethostname(host, sizeof(host) - 1);
    fprintf(stderr, "%s:%d NCCL %s %s\n", host, (int)getpid(), level, msg);
}

void shim_info(const char *fmt, ...)
{
    if (shim_debug_level() < 3) return;
    char msg[SHIM_MSG_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    emit("INFO", msg);
}

ncclResult_t shim_fail(ncclComm_t comm, ncclResult_t res, const char *fmt, ...)
{
    char msg[SHIM_MSG_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    memcpy(thread_msg, msg, sizeof(msg));
    shim_note(comm && comm->magic == SHIM_COMM_MAGIC ? comm : NULL, msg);
    if (shim_debug_level() >= 2) emit("WARN", msg);
    return res;
}

ncclResult_t shim_map(braid_result_t r)
{
    switch (r) {
    case BRAID_SUCCESS:
        return ncclSuccess;
    case BRAID_INPROGRESS:
        return ncclInProgress;
    case BRAID_ERR_INVALID_ARG:
        return ncclInvalidArgument;
    case BRAID_ERR_NOMEM:
        return ncclSystemError;
    case BRAID_ERR_SYSTEM:
        return ncclSystemError;
    case BRAID_ERR_REMOTE:
        return ncclRemoteError;
    case BRAID_ERR_TIMEOUT:
        return ncclRemoteError;
    case BRAID_ERR_ABORTED:
        return ncclInvalidUsage;
    case BRAID_ERR_MISMATCH:
        return ncclInvalidUsage;
    case BRAID_ERR_AUTH:
        return ncclSystemError;
    case BRAID_ERR_INTERNAL:
        return ncclInternalError;
    case BRAID_ERR_UNSUPPORTED:
        return ncclInvalidUsage;
    case BRAID_ERR_INVALID_USAGE:
        return ncclInvalidUsage;
    }
    return ncclInternalError;
}

ncclResult_t shim_braid_fail(ncclComm_t comm, braid_result_t r, const char *call)
{
    const char *m = braid_last_error();
    return shim_fail(comm, shim_map(r), "%s: %s (braid: %s)", call, m && *m ? m : "failed",
                     braid_strerror(r));
}

const char *ncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess:
        return "no error";
    case ncclUnhandledCudaError:
        return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
        return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
        return "internal error - please report this issue to the braid developers";
    case ncclInvalidArgument:
        return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
        return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
        return "remote process exited or there was a network error";
    case ncclInProgress:
        return "NCCL operation in progress";
    default:
        return "unknown result code";
    }
}

const char *ncclGetLastError(ncclComm_t comm)
{
    (void)comm; /* NCCL ignores it too: one message per process */
    /* A copy per thread: another thread's failure cannot rewrite it while the caller reads. */
    static _Thread_local char copy[SHIM_MSG_BYTES];
    pthread_mutex_lock(&last_lock);
    memcpy(copy, last_msg, sizeof(copy));
    pthread_mutex_unlock(&last_lock);
    return copy;
}

void ncclResetDebugInit(void) {}

SHIM_PNAME(ncclGetErrorString);
SHIM_PNAME(ncclGetLastError);
SHIM_PNAME(ncclResetDebugInit);
