/* Logging, per-thread last error, result strings. */
#include "core/log.h"
#include "core/config.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
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
/* The rank in log prefixes: the calling thread's current communicator's (set when a thread
 * enters a call on a communicator, or starts working for one), else the rank of the first
 * communicator this process created (threads that serve no communicator in particular). */
static _Thread_local int log_thread_rank = -1;
static _Atomic int log_first_rank = -1;
static char log_host[64];
static _Thread_local char last_error[2048];

static const struct {
    const char *name;
    int bit;
} subsys_names[] = {
    {"INIT", BRAID_SUBSYS_INIT}, {"BOOT", BRAID_SUBSYS_BOOT}, {"SHM", BRAID_SUBSYS_SHM},
    {"NET", BRAID_SUBSYS_NET},   {"COLL", BRAID_SUBSYS_COLL}, {"TUNING", BRAID_SUBSYS_TUNING},
    {"ENV", BRAID_SUBSYS_ENV},   {"ALL", BRAID_SUBSYS_ALL},
};

/* Warnings found while reading the log settings, printed once the log is open. */
static char init_warn[6][400];
static int init_nwarn;

static void init_warning(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void init_warning(const char *fmt, ...)
{
    if (init_nwarn >= (int)(sizeof(init_warn) / sizeof(init_warn[0]))) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(init_warn[init_nwarn++], sizeof(init_warn[0]), fmt, ap);
    va_end(ap);
}

/* BRAID_DEBUG_FILE may contain %h (host) and %p (pid). A path that does not fit (PATH_MAX once
 * expanded) is not shortened into another file's name: the log goes to stderr, with a warning. */
static FILE *open_log_file(const char *pattern)
{
    char path[PATH_MAX];
    size_t o = 0;
    for (const char *p = pattern; *p; p++) {
        int n = 1;
        if (p[0] == '%' && p[1] == 'h') {
            n = snprintf(path + o, sizeof(path) - o, "%s", log_host);
            p++;
        } else if (p[0] == '%' && p[1] == 'p') {
            n = snprintf(path + o, sizeof(path) - o, "%d", (int)getpid());
            p++;
        } else if (o + 1 < sizeof(path)) {
            path[o] = *p;
        }
        if (n < 0 || o + (size_t)n >= sizeof(path)) {
            init_warning("BRAID_DEBUG_FILE=%.64s...: the path is longer than %d bytes once "
                         "expanded; logging to stderr",
                         pattern, PATH_MAX - 1);
            return stderr;
        }
        o += (size_t)n;
    }
    path[o] = '\0';
    FILE *f = fopen(path, "ae"); /* close-on-exec: not inherited by what a rank runs */
    if (f) {
        setvbuf(f, NULL, _IOLBF, 0);
        return f;
    }
    init_warning("BRAID_DEBUG_FILE=%s: cannot open %s: %s; logging to stderr", pattern, path,
                 strerror(errno));
    return stderr;
}

static const char level_names[] = "NONE,WARN,INFO,DEBUG,TRACE";
static const char subsys_list[] = "INIT,BOOT,SHM,NET,COLL,TUNING,ENV,ALL";

static void lint_emit(int level, int kind, const char *msg)
{
    (void)kind;
    if ((level == 1 && log_level >= BRAID_LOG_WARN) || log_level >= BRAID_LOG_INFO)
        braid_log_msg(level == 1 ? BRAID_LOG_WARN : BRAID_LOG_INFO, BRAID_SUBSYS_ENV, __FILE__,
                      __LINE__, "%s", msg);
}

/* Set while log_init runs on this thread: what it calls (the lint parses values, which may
 * set errors, which log) must not re-enter pthread_once. */
static _Thread_local int log_initializing;

static void log_init(void)
{
    char hint[64];
    log_initializing = 1;
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
    else if (*lvl) { /* empty (BRAID_DEBUG= cmd) is the default */
        const char *dym = braid_did_you_mean(lvl, level_names, hint, sizeof(hint));
        init_warning("BRAID_DEBUG='%s' is not a log level (NONE, WARN, INFO, DEBUG, TRACE)%s%s%s; "
                     "using WARN",
                     lvl, dym ? "; did you mean " : "", dym ? dym : "", dym ? "?" : "");
    }
    const char *sub = braid_param_str("DEBUG_SUBSYS");
    if (*sub) {
        /* Comma-separated names; a leading ^ excludes the listed ones. */
        int exclude = sub[0] == '^';
        int mask = 0;
        char buf[256];
        snprintf(buf, sizeof(buf), "%s", sub + exclude);
        char *save = NULL;
        for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            int known = 0;
            for (size_t i = 0; i < sizeof(subsys_names) / sizeof(subsys_names[0]); i++)
                if (!strcasecmp(t, subsys_names[i].name)) {
                    mask |= subsys_names[i].bit;
                    known = 1;
                }
            if (!known) {
                const char *dym = braid_did_you_mean(t, subsys_list, hint, sizeof(hint));
                init_warning("BRAID_DEBUG_SUBSYS: '%s' is not a subsystem (%s)%s%s%s; ignored", t,
                             subsys_list, dym ? "; did you mean " : "", dym ? dym : "",
                             dym ? "?" : "");
            }
        }
        log_subsys = exclude ? (BRAID_SUBSYS_ALL & ~mask) : mask;
    }
    const char *file = braid_param_str("DEBUG_FILE");
    log_file = *file ? open_log_file(file) : stderr;
    /* Printed whatever BRAID_DEBUG_SUBSYS says (ENV may be excluded by the very typo). */
    for (int i = 0; i < init_nwarn; i++)
        if (log_level >= BRAID_LOG_WARN || strncmp(init_warn[i], "BRAID_DEBUG=", 12) == 0)
            braid_log_msg(BRAID_LOG_WARN, BRAID_SUBSYS_ENV, __FILE__, __LINE__, "%s", init_warn[i]);
    braid_config_lint(lint_emit);
    log_initializing = 0;
}

void braid_log_set_rank(int rank)
{
    /* on every call of a communicator: no store and no atomic read-modify-write unless needed */
    if (log_thread_rank != rank) log_thread_rank = rank;
    int unset = -1;
    if (atomic_load_explicit(&log_first_rank, memory_order_relaxed) == -1)
        atomic_compare_exchange_strong(&log_first_rank, &unset, rank);
}

int braid_log_rank(void)
{
    return log_thread_rank >= 0 ? log_thread_rank : atomic_load(&log_first_rank);
}

int braid_log_enabled(braid_log_level_t level, braid_subsys_t subsys)
{
    if (log_initializing) return 0;
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
    int rank = braid_log_rank();
    if (level >= BRAID_LOG_TRACE) {
        fprintf(log_file, "%s:%d [%d] braid %s %s: %s (%s:%d)\n", log_host, (int)getpid(), rank,
                names[level], sname, msg, file, line);
    } else {
        fprintf(log_file, "%s:%d [%d] braid %s %s: %s\n", log_host, (int)getpid(), rank,
                names[level], sname, msg);
    }
}

braid_result_t braid_set_error(braid_result_t res, const char *fmt, ...)
{
    int saved = errno;
    char full[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(full, sizeof(full), fmt, ap);
    va_end(ap);
    braid_str_fit(last_error, sizeof(last_error), full);
    braid_info(ALL, "error %s: %s", braid_strerror(res), last_error);
    errno = saved;
    return res;
}

void braid_restore_error(const char *msg)
{
    braid_str_fit(last_error, sizeof(last_error), msg);
}

void braid_str_fit(char *dst, size_t len, const char *src)
{
    static const char cut[] = " [...] ";
    if (!len) return;
    size_t n = strlen(src);
    if (n < len) {
        memmove(dst, src, n + 1);
        return;
    }
    if (len < 2 * sizeof(cut)) {
        memmove(dst, src, len - 1);
        dst[len - 1] = '\0';
        return;
    }
    size_t room = len - 1 - (sizeof(cut) - 1), head = room / 3, tail = room - head;
    memmove(dst, src, head);
    memcpy(dst + head, cut, sizeof(cut) - 1);
    memmove(dst + head + sizeof(cut) - 1, src + n - tail, tail);
    dst[len - 1] = '\0';
}

void braid_clear_error(void)
{
    last_error[0] = '\0';
}

const char *braid_errno_hint(int err)
{
    if (err == EMFILE)
        return " (EMFILE: this process is out of file descriptors; raise the open-files limit: "
               "ulimit -n, or LimitNOFILE= in systemd)";
    if (err == ENFILE) return " (ENFILE: the system is out of file descriptors; raise fs.file-max)";
    return "";
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
