/* The environment lint: unknown values of BRAID_DEBUG / BRAID_DEBUG_SUBSYS, an unwritable
 * BRAID_DEBUG_FILE and misspelled BRAID_* names are warned about (with a "did you mean"),
 * invalid values are flagged, and the transport settings are validated at init whichever
 * transport runs. */
#include "core/config.h"
#include "core/log.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const braid_param_t *param(const char *name)
{
    for (const braid_param_t *p = braid_param_table(); p->name; p++)
        if (!strcmp(p->name, name)) return p;
    cr_assert_fail("no parameter %s", name);
    return NULL;
}

Test(configlint, did_you_mean)
{
    char names[2048] = "", buf[64];
    for (const braid_param_t *p = braid_param_table(); p->name; p++) {
        size_t n = strlen(names);
        snprintf(names + n, sizeof(names) - n, "%s%s", n ? "," : "", p->name);
    }
    cr_assert_str_eq(braid_did_you_mean("CHUNKSIZE", names, buf, sizeof(buf)), "CHUNK_SIZE");
    cr_assert_str_eq(braid_did_you_mean("NCHANNEL", names, buf, sizeof(buf)), "NCHANNELS");
    cr_assert_str_eq(braid_did_you_mean("TIMEOTU", names, buf, sizeof(buf)), "TIMEOUT");
    cr_assert_str_eq(braid_did_you_mean("socket_ifname", names, buf, sizeof(buf)), "SOCKET_IFNAME");
    cr_assert_null(braid_did_you_mean("COMPLETELY_DIFFERENT", names, buf, sizeof(buf)));
    cr_assert_str_eq(braid_did_you_mean("INOF", "NONE,WARN,INFO,DEBUG,TRACE", buf, sizeof(buf)),
                     "INFO");
}

Test(configlint, invalid_values_flagged)
{
    char why[256];
    setenv("BRAID_TRANSPORT", "tpc", 1);
    cr_assert_not(braid_param_valid(param("TRANSPORT"), why, sizeof(why)));
    cr_assert(strstr(why, "did you mean tcp?"), "%s", why);
    setenv("BRAID_TRANSPORT", "TCP", 1);
    cr_assert(braid_param_valid(param("TRANSPORT"), why, sizeof(why)), "%s", why);
    setenv("BRAID_NSOCKS_PERPEER", "9", 1);
    cr_assert_not(braid_param_valid(param("NSOCKS_PERPEER"), why, sizeof(why)));
    cr_assert(strstr(why, "[1, 8]"), "%s", why);
    setenv("BRAID_IB_GID_INDEX", "-1", 1);
    cr_assert(braid_param_valid(param("IB_GID_INDEX"), why, sizeof(why)), "%s", why);
    setenv("BRAID_CHUNK_SIZE", "4Q", 1);
    cr_assert_not(braid_param_valid(param("CHUNK_SIZE"), why, sizeof(why)));
    setenv("BRAID_TIMEOUT", "-3", 1);
    cr_assert_not(braid_param_valid(param("TIMEOUT"), why, sizeof(why)));
    setenv("BRAID_TIMEOUT", "0", 1); /* forever */
    cr_assert(braid_param_valid(param("TIMEOUT"), why, sizeof(why)), "%s", why);
    setenv("BRAID_SECRET", "0123", 1);
    cr_assert_not(braid_param_valid(param("SECRET"), why, sizeof(why)));
    setenv("BRAID_SECRET", "0123456789abcdef0123456789ABCDEF", 1);
    cr_assert(braid_param_valid(param("SECRET"), why, sizeof(why)), "%s", why);
    /* Defaults are all valid. */
    for (const braid_param_t *p = braid_param_table(); p->name; p++) {
        char var[96];
        snprintf(var, sizeof(var), "BRAID_%s", p->name);
        unsetenv(var);
        cr_assert(braid_param_valid(p, why, sizeof(why)), "default of %s: %s", p->name, why);
    }
    /* The caller's last error survives validation. */
    braid_set_error(BRAID_ERR_INVALID_ARG, "kept");
    setenv("BRAID_CHUNK_SIZE", "x", 1);
    braid_param_valid(param("CHUNK_SIZE"), why, sizeof(why));
    cr_assert_str_eq(braid_last_error(), "kept");
}

/* Runs the log initialisation in a child with the given environment (NAME=VALUE, ...) and
 * returns what it printed on stderr (caller frees). */
static char *log_init_output(const char *const *env)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        for (const char *const *e = env; *e; e++)
            putenv((char *)*e);
        braid_log_enabled(BRAID_LOG_WARN, BRAID_SUBSYS_INIT); /* reads the settings once */
        _exit(0);
    }
    close(fds[1]);
    char *out = calloc(1, 1 << 16);
    size_t len = 0;
    ssize_t k;
    while ((k = read(fds[0], out + len, (1 << 16) - 1 - len)) > 0)
        len += (size_t)k;
    close(fds[0]);
    int st;
    waitpid(pid, &st, 0);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    return out;
}

Test(configlint, warnings_at_log_init)
{
    static const char *const env[] = {"BRAID_CHUNKSIZE=1M",
                                      "BRAID_DEBUG=INOF",
                                      "BRAID_DEBUG_SUBSYS=COL,NET",
                                      "BRAID_DEBUG_FILE=/nonexistent-dir/braid.%p.log",
                                      "BRAID_ALGO=rign",
                                      "BRAID_TEST_SOMETHING=1", /* a test's, not the library's */
                                      NULL};
    char *out = log_init_output(env);
    cr_assert(strstr(out, "BRAID_CHUNKSIZE is not a braid variable and has no effect; did you "
                          "mean BRAID_CHUNK_SIZE?"),
              "%s", out);
    cr_assert(strstr(out, "BRAID_DEBUG='INOF' is not a log level"), "%s", out);
    cr_assert(strstr(out, "did you mean INFO?"), "%s", out);
    cr_assert(strstr(out, "BRAID_DEBUG_SUBSYS: 'COL' is not a subsystem"), "%s", out);
    cr_assert(strstr(out, "did you mean COLL?"), "%s", out);
    cr_assert(strstr(out, "BRAID_DEBUG_FILE=/nonexistent-dir/braid.%p.log: cannot open "
                          "/nonexistent-dir/braid."),
              "%s", out);
    cr_assert(strstr(out, "No such file or directory; logging to stderr"), "%s", out);
    cr_assert(strstr(out, "BRAID_ALGO='rign' is invalid: not one of"), "%s", out);
    cr_assert(strstr(out, "did you mean ring?"), "%s", out);
    cr_assert_null(strstr(out, "BRAID_TEST_SOMETHING"), "%s", out);
    free(out);
    /* An invalid secret is flagged but never printed (it may be one digit off the real one). */
    static const char *const secret[] = {"BRAID_SECRET=0123456789abcdef0123456789abcde", NULL};
    out = log_init_output(secret);
    cr_assert(strstr(out, "BRAID_SECRET='(hidden, 31 characters)' is invalid"), "%s", out);
    cr_assert_null(strstr(out, "0123456789abcdef"), "%s", out);
    free(out);
    /* A path too long once expanded goes to stderr with a warning, not to a shortened name. */
    char longpath[PATH_MAX + 128] = "BRAID_DEBUG_FILE=/tmp/";
    /* Past PATH_MAX before the %p: too long whatever the pid's length (which it was not). */
    for (size_t n = strlen(longpath); n < PATH_MAX + 32; n += 4)
        strcat(longpath, "abc/");
    strcat(longpath, "braid.%p.log");
    const char *const toolong[] = {longpath, NULL};
    out = log_init_output(toolong);
    cr_assert(strstr(out, "once expanded; logging to stderr"), "%s", out);
    free(out);
    /* A clean environment says nothing. */
    static const char *const clean[] = {"BRAID_DEBUG=WARN", NULL};
    out = log_init_output(clean);
    cr_assert_str_eq(out, "");
    free(out);
}

/* The BRAID_DEBUG_FILE descriptor is close-on-exec: the programs a rank runs do not inherit it. */
Test(configlint, log_file_is_close_on_exec)
{
    char path[64];
    snprintf(path, sizeof(path), "/tmp/braid-cloexec-%d.log", (int)getpid());
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        setenv("BRAID_DEBUG_FILE", path, 1);
        setenv("BRAID_DEBUG", "INFO", 1);
        braid_log_enabled(BRAID_LOG_WARN, BRAID_SUBSYS_INIT);
        for (int fd = 3; fd < 1024; fd++) {
            char link[64], target[PATH_MAX];
            snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
            ssize_t n = readlink(link, target, sizeof(target) - 1);
            if (n <= 0) continue;
            target[n] = '\0';
            if (!strcmp(target, path)) _exit(fcntl(fd, F_GETFD) & FD_CLOEXEC ? 0 : 1);
        }
        _exit(2);
    }
    int st;
    waitpid(pid, &st, 0);
    unlink(path);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "exit %d (1: the log file is inherited across exec, 2: not open)", WEXITSTATUS(st));
}

/* Transport settings are checked by every init, even one that only uses shm (1 rank). */
Test(configlint, transport_settings_checked_at_init, .timeout = 30)
{
    braid_unique_id_t id;
    cr_assert_eq(braid_get_unique_id(&id), BRAID_SUCCESS);
    braid_comm_t comm = NULL;
    setenv("BRAID_SOCKET_IFNAME", "=nosuchif0", 1);
    cr_assert_eq(braid_comm_init_rank(&comm, 1, id, 0), BRAID_ERR_INVALID_ARG);
    cr_assert(strstr(braid_last_error(), "BRAID_SOCKET_IFNAME==nosuchif0 matches no interface"),
              "%s", braid_last_error());
    unsetenv("BRAID_SOCKET_IFNAME");
    cr_assert_eq(braid_get_unique_id(&id), BRAID_SUCCESS);
    setenv("BRAID_NSOCKS_PERPEER", "0", 1);
    cr_assert_eq(braid_comm_init_rank(&comm, 1, id, 0), BRAID_ERR_INVALID_ARG);
    cr_assert(
        strstr(braid_last_error(), "BRAID_NSOCKS_PERPEER='0' is not a power of two in [1, 8]"),
        "%s", braid_last_error());
    unsetenv("BRAID_NSOCKS_PERPEER");
    cr_assert_eq(braid_get_unique_id(&id), BRAID_SUCCESS);
    setenv("BRAID_P2P_TCP_NSOCKS", "9", 1);
    cr_assert_eq(braid_comm_init_rank(&comm, 1, id, 0), BRAID_ERR_INVALID_ARG);
    cr_assert(
        strstr(braid_last_error(), "BRAID_P2P_TCP_NSOCKS='9' is not 0 or a power of two in [0, 8]"),
        "%s", braid_last_error());
    unsetenv("BRAID_P2P_TCP_NSOCKS");
    /* Slots, sockets and RDMA QPs per connection are powers of two (a frame counter's
     * remainder picks them, which must agree across its wrap at 2^32): 3 and 6 are refused at
     * init, naming the variable. */
    static const char *const pow2[][2] = {{"BRAID_NSLOTS", "3"},
                                          {"BRAID_NSOCKS_PERPEER", "3"},
                                          {"BRAID_P2P_TCP_NSOCKS", "6"},
                                          {"BRAID_IB_QPS_PER_CONN", "3"},
                                          {"BRAID_IB_QPS_PER_CONN", "6"}};
    for (size_t i = 0; i < sizeof(pow2) / sizeof(pow2[0]); i++) {
        cr_assert_eq(braid_get_unique_id(&id), BRAID_SUCCESS);
        setenv(pow2[i][0], pow2[i][1], 1);
        cr_assert_eq(braid_comm_init_rank(&comm, 1, id, 0), BRAID_ERR_INVALID_ARG, "%s=%s",
                     pow2[i][0], pow2[i][1]);
        cr_assert(strstr(braid_last_error(), pow2[i][0]) &&
                      strstr(braid_last_error(), "power of two"),
                  "%s", braid_last_error());
        unsetenv(pow2[i][0]);
    }
    cr_assert_eq(braid_get_unique_id(&id), BRAID_SUCCESS);
    cr_assert_eq(braid_comm_init_rank(&comm, 1, id, 0), BRAID_SUCCESS, "%s", braid_last_error());
    braid_comm_destroy(comm);
}
