/* NCCL_* environment variables that have a braid equivalent, mapped onto BRAID_* ones once
 * per process, before the first unique id or communicator (braid reads BRAID_* when it
 * creates them). A BRAID_* variable that is already set wins: the NCCL one is then ignored.
 * Before any NCCL_* variable is read, the nccl.conf files are (shim_env_conf). The table is
 * documented in the README section "NCCL drop-in". */
#include "shim.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static pthread_once_t env_once = PTHREAD_ONCE_INIT, conf_once = PTHREAD_ONCE_INIT,
                      blocking_once = PTHREAD_ONCE_INIT;

/* One nccl.conf file, as NCCL's setEnvFile (src/misc/param.cc): each line NAME=VALUE is set in
 * the environment unless NAME is set already. Nothing is trimmed: a line whose first character
 * is '#' is a comment, one without '=' is skipped, the name is what precedes the first '=' and
 * the value the rest of the line (spaces and '=' included, the newline dropped); both are cut at
 * 1023 bytes. A file that cannot be opened is skipped. */
static void read_conf_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return;
    char *line = NULL, name[1024], value[1024];
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) != -1) {
        if (line[0] == '#') continue;
        if (line[len - 1] == '\n') line[len - 1] = '\0';
        size_t s = strcspn(line, "=");
        if (!line[s]) continue;
        snprintf(name, sizeof(name), "%.*s", (int)(s < 1023 ? s : 1023), line);
        snprintf(value, sizeof(value), "%s", line + s + 1);
        setenv(name, value, 0);
    }
    free(line);
    fclose(f);
}

/* NCCL's initEnv (src/misc/param.cc, initEnvFunc): the file NCCL_CONF_FILE names when it is set
 * and not empty, else ~/.nccl.conf (the home directory of the user's passwd entry, not $HOME),
 * then /etc/nccl.conf. Since nothing is overwritten, the environment wins over both files and
 * the first file over /etc's. Nothing is logged here: the log level (NCCL_DEBUG) may come from
 * these files. */
static void conf_once_run(void)
{
    char path[1024];
    const char *user = getenv("NCCL_CONF_FILE");
    if (user && *user) {
        snprintf(path, sizeof(path), "%s", user);
        read_conf_file(path);
    } else {
        /* the home directory as NCCL's getpwuid finds it; getpwuid_r (the program's threads
         * may run) with a buffer grown until the entry fits */
        struct passwd pw, *found = NULL;
        size_t len = 4096;
        char *buf = NULL;
        int rc = ERANGE;
        while (rc == ERANGE && len <= ((size_t)1 << 24)) {
            char *nb = realloc(buf, len);
            if (!nb) break;
            buf = nb;
            rc = getpwuid_r(getuid(), &pw, buf, len, &found);
            len *= 2;
        }
        if (rc == 0 && found && pw.pw_dir) {
            snprintf(path, sizeof(path), "%s/.nccl.conf", pw.pw_dir);
            read_conf_file(path);
        }
        free(buf);
    }
    read_conf_file("/etc/nccl.conf");
}

void shim_env_conf(void)
{
    pthread_once(&conf_once, conf_once_run);
}

/* Sets braid_var to value unless it is set already; logs what happened. */
static void put(const char *braid_var, const char *value, const char *from)
{
    if (!value) return;
    const char *cur = getenv(braid_var);
    if (cur) {
        shim_info("%s ignored: %s=%s is set and takes precedence", from, braid_var, cur);
        return;
    }
    setenv(braid_var, value, 0);
    shim_info("%s -> %s=%s", from, braid_var, value);
}

static void same(const char *nccl_var, const char *braid_var)
{
    const char *v = getenv(nccl_var);
    if (v) put(braid_var, v, nccl_var);
}

static void map_debug(void)
{
    const char *v = getenv("NCCL_DEBUG");
    if (!v) return;
    const char *lvl = NULL;
    if (!strcasecmp(v, "VERSION") || !strcasecmp(v, "WARN") || !strcasecmp(v, "ABORT"))
        lvl = "WARN";
    else if (!strcasecmp(v, "INFO"))
        lvl = "INFO";
    else if (!strcasecmp(v, "TRACE"))
        lvl = "TRACE";
    if (lvl) put("BRAID_DEBUG", lvl, "NCCL_DEBUG");
}

/* NCCL's subsystems that braid has (P2P is braid's COLL, BOOTSTRAP its BOOT); others drop. */
static void map_subsys(void)
{
    static const char *pairs[][2] = {{"INIT", "INIT"}, {"COLL", "COLL"},      {"P2P", "COLL"},
                                     {"SHM", "SHM"},   {"NET", "NET"},        {"TUNING", "TUNING"},
                                     {"ENV", "ENV"},   {"BOOTSTRAP", "BOOT"}, {"ALL", "ALL"}};
    const char *v = getenv("NCCL_DEBUG_SUBSYS");
    if (!v) return;
    char out[256] = "", tok[64];
    size_t o = 0;
    const char *p = v;
    if (*p == '^') {
        out[o++] = '^';
        p++;
    }
    while (*p) {
        size_t n = strcspn(p, ",");
        snprintf(tok, sizeof(tok), "%.*s", (int)(n < sizeof(tok) - 1 ? n : sizeof(tok) - 1), p);
        for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++)
            if (!strcasecmp(tok, pairs[i][0]) && o + strlen(pairs[i][1]) + 2 < sizeof(out)) {
                o += (size_t)snprintf(out + o, sizeof(out) - o, "%s%s",
                                      o > (out[0] == '^' ? 1u : 0u) ? "," : "", pairs[i][1]);
                break;
            }
        p += n;
        if (*p == ',') p++;
    }
    if (o > (out[0] == '^' ? 1u : 0u)) put("BRAID_DEBUG_SUBSYS", out, "NCCL_DEBUG_SUBSYS");
}

/* NCCL_ALGO: braid has ring and tree; lists, exclusions and NCCL-only algorithms are left to
 * braid's cost model. */
static void map_algo(void)
{
    const char *v = getenv("NCCL_ALGO");
    if (!v) return;
    if (!strcasecmp(v, "ring"))
        put("BRAID_ALGO", "ring", "NCCL_ALGO");
    else if (!strcasecmp(v, "tree"))
        put("BRAID_ALGO", "tree", "NCCL_ALGO");
    else
        shim_info("NCCL_ALGO=%s ignored: braid takes Ring or Tree (the cost model chooses)", v);
}

static void map_channels(void)
{
    const char *v = getenv("NCCL_MAX_NCHANNELS");
    const char *from = "NCCL_MAX_NCHANNELS";
    if (!v) v = getenv(from = "NCCL_NCHANNELS");
    if (!v) v = getenv(from = "NCCL_MIN_NCHANNELS");
    if (v) put("BRAID_NCHANNELS", v, from);
}

/* NCCL_BUFFSIZE is a channel's buffer, cut into NCCL_STEPS = 8 slots: braid's slot size is
 * the eighth of it. */
static void map_buffsize(void)
{
    const char *v = getenv("NCCL_BUFFSIZE");
    if (!v) return;
    char *end;
    unsigned long long b = strtoull(v, &end, 0);
    if (end == v || *end || b < 8) {
        shim_info("NCCL_BUFFSIZE=%s ignored: not a byte count", v);
        return;
    }
    char buf[32];
    snprintf(buf, sizeof(buf), "%llu", b / 8);
    put("BRAID_CHUNK_SIZE", buf, "NCCL_BUFFSIZE");
}

static int env_true(const char *name)
{
    const char *v = getenv(name);
    return v && atoi(v) != 0;
}

static void map_transport(void)
{
    /* Without shared memory NCCL sends within a host over the network: braid's tcp. */
    if (env_true("NCCL_SHM_DISABLE")) put("BRAID_TRANSPORT", "tcp", "NCCL_SHM_DISABLE=1");
}

/* Sockets and RDMA QPs per connection: braid takes 1, 2, 4 or 8 (a frame counter's remainder
 * picks one, which must agree across the counter's wrap): the largest of them up to n. */
static void put_pow2(const char *braid_var, int n, const char *from)
{
    int p2 = 1;
    while (p2 * 2 <= n && p2 < 8)
        p2 *= 2;
    char buf[16];
    snprintf(buf, sizeof(buf), "%d", p2);
    put(braid_var, buf, from);
}

static void map_socks(void)
{
    const char *a = getenv("NCCL_NSOCKS_PERTHREAD"), *b = getenv("NCCL_SOCKET_NTHREADS");
    if (!a && !b) return;
    int n = (a ? atoi(a) : 1) * (b ? atoi(b) : 1);
    if (n < 1) return;
    put_pow2("BRAID_NSOCKS_PERPEER", n, "NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS");
}

static void map_qps(void)
{
    const char *v = getenv("NCCL_IB_QPS_PER_CONNECTION");
    if (!v) return;
    int n = atoi(v);
    if (n < 1) {
        shim_info("NCCL_IB_QPS_PER_CONNECTION=%s ignored: not a positive count", v);
        return;
    }
    put_pow2("BRAID_IB_QPS_PER_CONN", n, "NCCL_IB_QPS_PER_CONNECTION");
}

static int comm_blocking = -1;

/* Not a braid variable: the shim applies it (NCCL's envConfigOverride). strtoll with base 0 and
 * an empty value ignored, as NCCL's ncclLoadParam. Read on its own once, at the first init's or
 * split's config (NCCL's ncclParamCommBlocking is read there, and only there), not with the
 * other variables at the first ncclGetUniqueId. */
static void read_comm_blocking(void)
{
    shim_env_conf();
    const char *v = getenv("NCCL_COMM_BLOCKING");
    if (!v || !*v) return;
    errno = 0;
    long long b = strtoll(v, NULL, 0);
    if (errno == 0 && (b == 0 || b == 1)) comm_blocking = (int)b;
    shim_info("NCCL_COMM_BLOCKING=%s: %s", v,
              comm_blocking < 0 ? "ignored (0 or 1)" : "overrides every communicator's blocking");
}

int shim_env_comm_blocking(void)
{
    pthread_once(&blocking_once, read_comm_blocking);
    return comm_blocking;
}

static void env_init_once(void)
{
    shim_env_conf();
    map_debug();
    map_subsys();
    same("NCCL_DEBUG_FILE", "BRAID_DEBUG_FILE");
    same("NCCL_SOCKET_IFNAME", "BRAID_SOCKET_IFNAME");
    same("NCCL_IB_HCA", "BRAID_IB_HCA");
    same("NCCL_IB_GID_INDEX", "BRAID_IB_GID_INDEX");
    same("NCCL_HOSTID", "BRAID_HOSTNAME");
    map_algo();
    map_channels();
    map_buffsize();
    map_transport();
    map_socks();
    map_qps();
}

void shim_env_init(void)
{
    pthread_once(&env_once, env_init_once);
}
