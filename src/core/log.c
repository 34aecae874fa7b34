/* Logging, per-thread last error, result strings. */
#include "core/log.h"
#include "core/config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <unistd.h>

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static int log_level = BRAID_LOG_WARN;
static int log_subsys = BRAID_SUBSYS_ALL;
static FILE *log_file;
static int log_rank = -1;
static char log_host[64];
static _Thread_local char last_error[512];

static const struct {
    const char *name;
    int bit;
} subsys_names[] = {
    {"INIT", BRAID_SUBSYS_INIT}, {"BOOT", BRAID_SUBSYS_BOOT}, {"SHM", BRAID_SUBSYS_SHM},
    {"NET", BRAID_SUBSYS_NET},   {"COLL", BRAID_SUBSYS_COLL}, {"TUNING", BRAID_SUBSYS_TUNING},
    {"ENV", BRAID_SUBSYS_ENV},   {"ALL", BRAID_SUBSYS_ALL},
};

/* BRAID_DEBUG_FILE may contain %h (host) and %p (pid). */
static FILE *open_log_file(const char *pattern)
{
    char path[512];
    size_t o = 0;
    for (const char *p = pattern; *p && o + 64 < sizeof(path); p++) {
        if (p[0] == '%' && p[1] == 'h') {
            o += (size_t)snprintf(path + o, sizeof(path) - o, "%s", log_host);
            p++;
        } else if (p[0] == '%' && p[1] == 'p') {
            o += (size_t)snprintf(path + o, sizeof(path) - o, "%d", (int)getpid());
            p++;
        } else {
            path[o++] = *p;
        }
    }
    path[o] = '\0';
    FILE *f = fopen(path, "a");
    if (f) setvbuf(f, NULL, _IOLBF, 0);
    return f ? f : stderr;
}

static void log_init(void)
{
    gethostname(log_host, sizeof(log_host) - 1);
    char *dot = strchr(log_host, '.');
    if (dot) *dot = '\0';
    const char *lvl = braid_param_str("DEBUG");
    if (!strcasecmp(lvl, "NONE"))
        log_level = BRAID_LOG_NONE;
    else if (!strcasecmp(lvl, "WARN"))
        log_level = BRAID_LOG_WARN;
    else if (!strcasecmp(lvl, "INFO"))
        log_level = BRAID_LOG_INFO;
    else if (!strcasecmp(lvl, "DEBUG"))
        log_level = BRAID_LOG_DEBUG;
    else if (!strcasecmp(lvl, "TRACE"))
        log_level = BRAID_LOG_TRACE;
    const char *sub = braid_param_str("DEBUG_SUBSYS");
    if (*sub) {
        /* Comma-separated names; a leading ^ excludes the listed ones. */
        int exclude = sub[0] == '^';
        int mask = 0;
        char buf[256];
        snprintf(buf, sizeof(buf), "%s", sub + exclude);
        char *save = NULL;
        for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
            for (size_t i = 0; i < sizeof(subsys_names) / sizeof(subsys_names[0]); i++)
                if (!strcasecmp(t, subsys_names[i].name)) mask |= subsys_names[i].bit;
        log_subsys = exclude ? (BRAID_SUBSYS_ALL & ~mask) : mask;
    }
    const char *file = braid_param_str("DEBUG_FILE");
    log_file = *file ? open_log_file(file) : stderr;
}

void braid_log_set_rank(int rank)
{
    log_rank = rank;
}

int braid_log_enabled(braid_log_level_t level, braid_subsys_t subsys)
{
    pthread_once(&log_once, log_init);
    return (int)level <= log_level && (subsys & log_subsys);
}

void braid_log_msg(braid_log_level_t level, braid_subsys_t subsys, const char *file, int line,
                   const char *fmt, ...)
{
    static const char *names[] = {"NONE", "WARN", "INFO", "DEBUG", "TRACE"};
    const char *sname = "ALL";
    for (size_t i = 0; i < sizeof(subsys_names) / sizeof(subsys_names[0]); i++)
        if (subsys == (braid_subsys_t)subsys_names[i].bit) sname = subsys_names[i].name;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (level >= BRAID_LOG_TRACE) {
        fprintf(log_file, "%s:%d [%d] braid %s %s: %s (%s:%d)\n", log_host, (int)getpid(), log_rank,
                names[level], sname, msg, file, line);
    } else {
        fprintf(log_file, "%s:%d [%d] braid %s %s: %s\n", log_host, (int)getpid(), log_rank,
                names[level], sname, msg);
    }
}

braid_result_t braid_set_error(braid_result_t res, const char *fmt, ...)
{
    int saved = errno;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
    braid_info(ALL, "error %s: %s", braid_strerror(res), last_error);
    errno = saved;
    return res;
}

void braid_restore_error(const char *msg)
{
    snprintf(last_error, sizeof(last_error), "%s", msg);
}

void braid_clear_error(void)
{
    last_error[0] = '\0';
}

const char *braid_last_error(void)
{
    return last_error;
}

const char *braid_strerror(braid_result_t res)
{
    switch (res) {
    case BRAID_SUCCESS:
        return "success";
    case BRAID_INPROGRESS:
        return "operation in progress";
    case BRAID_ERR_INVALID_ARG:
        return "invalid argument";
    case BRAID_ERR_NOMEM:
        return "out of memory";
    case BRAID_ERR_SYSTEM:
        return "system call failed";
    case BRAID_ERR_REMOTE:
        return "remote peer failed";
    case BRAID_ERR_TIMEOUT:
        return "timed out";
    case BRAID_ERR_ABORTED:
        return "communicator aborted";
    case BRAID_ERR_MISMATCH:
        return "ranks called mismatched collectives";
    case BRAID_ERR_AUTH:
        return "authentication failed";
    case BRAID_ERR_INTERNAL:
        return "internal error";
    case BRAID_ERR_UNSUPPORTED:
        return "unsupported";
    case BRAID_ERR_INVALID_USAGE:
        return "invalid usage";
    }
    return "unknown result code";
}
