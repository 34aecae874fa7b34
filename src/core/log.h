/* Logging and error reporting shared by every module.
 *
 * braid_warn/info/debug/trace(SUBSYS, fmt, ...) print "host:pid [rank] braid LEVEL SUBSYS: msg"
 * to stderr (or BRAID_DEBUG_FILE) when BRAID_DEBUG allows the level and BRAID_DEBUG_SUBSYS the
 * subsystem. braid_set_error() records the calling thread's last-error message (returned by
 * braid_last_error()) and logs it at INFO; the first function that detects an error calls it. */
#ifndef BRAID_CORE_LOG_H
#define BRAID_CORE_LOG_H

#include "braid/braid.h"

#include <stdarg.h>

typedef enum {
    BRAID_LOG_NONE = 0,
    BRAID_LOG_WARN = 1,
    BRAID_LOG_INFO = 2,
    BRAID_LOG_DEBUG = 3,
    BRAID_LOG_TRACE = 4
} braid_log_level_t;

typedef enum {
    BRAID_SUBSYS_INIT = 1 << 0,
    BRAID_SUBSYS_BOOT = 1 << 1,
    BRAID_SUBSYS_SHM = 1 << 2,
    BRAID_SUBSYS_NET = 1 << 3,
    BRAID_SUBSYS_COLL = 1 << 4,
    BRAID_SUBSYS_TUNING = 1 << 5,
    BRAID_SUBSYS_ENV = 1 << 6,
    BRAID_SUBSYS_ALL = 0x7fffffff
} braid_subsys_t;

/* The rank shown in the prefixes of the calling thread's log lines: set by every entry point
 * that takes a communicator (braid_comm_check) and by the threads a communicator starts, so a
 * line carries the rank of the communicator it concerns. Threads that never set one (the
 * bootstrap root service) show the rank of the process's first communicator, -1 before. */
void braid_log_set_rank(int rank);
int braid_log_rank(void);
int braid_log_enabled(braid_log_level_t level, braid_subsys_t subsys);
void braid_log_msg(braid_log_level_t level, braid_subsys_t subsys, const char *file, int line,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));

#define BRAID_LOG_(lvl, sub, ...)                                                                  \
    do {                                                                                           \
        if (braid_log_enabled(lvl, BRAID_SUBSYS_##sub))                                            \
            braid_log_msg(lvl, BRAID_SUBSYS_##sub, __FILE__, __LINE__, __VA_ARGS__);               \
    } while (0)
#define braid_warn(sub, ...) BRAID_LOG_(BRAID_LOG_WARN, sub, __VA_ARGS__)
#define braid_info(sub, ...) BRAID_LOG_(BRAID_LOG_INFO, sub, __VA_ARGS__)
#define braid_debug(sub, ...) BRAID_LOG_(BRAID_LOG_DEBUG, sub, __VA_ARGS__)
#define braid_trace(sub, ...) BRAID_LOG_(BRAID_LOG_TRACE, sub, __VA_ARGS__)

/* Records the thread's last-error message and returns res (so callers can
 * `return braid_set_error(BRAID_ERR_INVALID_ARG, "count ...")`). */
braid_result_t braid_set_error(braid_result_t res, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void braid_clear_error(void);
/* Puts back a message saved from braid_last_error() (no logging). */
void braid_restore_error(const char *msg);
/* Copies src into dst[len] (always terminated). Too long, it keeps the start and the end
 * (joined by " [...] "): a nested message ends in its innermost cause, which stays. */
void braid_str_fit(char *dst, size_t len, const char *src);
/* What to add to a system call's error text for err: for EMFILE / ENFILE (out of file
 * descriptors) the name and what to do about it, else "". */
const char *braid_errno_hint(int err);

/* Call trail: on failure, log "file:line -> error" at DEBUG and return it. */
#define BRAID_CHECK(call)                                                                          \
    do {                                                                                           \
        braid_result_t braid_r_ = (call);                                                          \
        if (braid_r_ < 0) {                                                                        \
            braid_debug(ALL, "%s:%d -> %s", __FILE__, __LINE__, braid_strerror(braid_r_));         \
            return braid_r_;                                                                       \
        }                                                                                          \
    } while (0)
#define BRAID_CHECK_GOTO(call, res, label)                                                         \
    do {                                                                                           \
        (res) = (call);                                                                            \
        if ((res) < 0) {                                                                           \
            braid_debug(ALL, "%s:%d -> %s", __FILE__, __LINE__, braid_strerror(res));              \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

#endif
