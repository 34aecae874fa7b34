#include "proc.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

double proc_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int proc_bin_dir(char *out, size_t len)
{
    const char *env = getenv("BRAID_BIN_DIR");
    if (env && *env) {
        snprintf(out, len, "%s", env);
        return 0;
    }
    ssize_t n = readlink("/proc/self/exe", out, len - 1);
    if (n <= 0) return -1;
    out[n] = '\0';
    char *slash = strrchr(out, '/');
    if (slash) *slash = '\0';
    return 0;
}

pid_t proc_spawn(const char *dir, char *const argv[], const char *out, const char *err,
                 char *const *env)
{
    pid_t pid = fork();
    if (pid == 0) {
        char p[PATH_MAX + 32];
        snprintf(p, sizeof(p), "%s/%s", dir, out);
        int fo = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        snprintf(p, sizeof(p), "%s/%s", dir, err);
        int fe = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fo < 0 || fe < 0) _exit(126);
        dup2(fo, 1);
        dup2(fe, 2);
        for (int i = 0; env && env[i]; i++)
            putenv(env[i]);
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

int proc_wait(pid_t pid, double timeout_s, int *status)
{
    double t0 = proc_now_s();
    while (proc_now_s() - t0 < timeout_s) {
        if (waitpid(pid, status, WNOHANG) == pid) return 0;
        usleep(20000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, status, 0);
    return -1;
}

char *proc_slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return strdup("");
    char *buf = calloc(1, 1 << 20);
    if (!buf) {
        fclose(f);
        return strdup("");
    }
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

int proc_task_comm(const char *tid, char *comm, size_t len)
{
    char path[300];
    snprintf(path, sizeof(path), "/proc/self/task/%s/comm", tid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    if (!fgets(comm, (int)len, f)) comm[0] = '\0';
    fclose(f);
    comm[strcspn(comm, "\n")] = '\0';
    return 0;
}

pid_t proc_thread_named(const char *name)
{
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    pid_t tid = -1;
    struct dirent *e;
    while (tid < 0 && (e = readdir(d))) {
        char comm[32];
        if (e->d_name[0] == '.' || proc_task_comm(e->d_name, comm, sizeof(comm))) continue;
        if (!strcmp(comm, name)) tid = (pid_t)atoi(e->d_name);
    }
    closedir(d);
    return tid;
}

static int bindable(int port)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) return 0;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((unsigned short)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int ok = bind(s, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(s);
    return ok;
}

int proc_free_port(void)
{
    int lo = 32768;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");
    if (f) {
        if (fscanf(f, "%d", &lo) != 1) lo = 32768;
        fclose(f);
    }
    static unsigned seed;
    if (!seed) seed = (unsigned)getpid() ^ (unsigned)time(NULL);
    int span = lo - 10001; /* ports 10000 .. lo - 1 */
    for (int i = 0; span > 1000 && i < 2000; i++) {
        int port = 10001 + (int)(rand_r(&seed) % (unsigned)span);
        if (bindable(port) && bindable(port - 1)) return port;
    }
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int port = -1;
    if (s >= 0 && bind(s, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(s, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (s >= 0) close(s);
    return port;
}

int proc_pin_first_cpu(cpu_set_t *was_p)
{
    cpu_set_t was, one;
    if (sched_getaffinity(0, sizeof(was), &was) != 0) return -1;
    CPU_ZERO(&one);
    for (int i = 0; i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &was)) {
            CPU_SET(i, &one);
            break;
        }
    if (was_p) *was_p = was;
    return sched_setaffinity(0, sizeof(one), &one) == 0 ? 0 : -1;
}

/* Connects to addr, sends len bytes, and says whether the listener closed the connection
 * within 3 s (1) or not (0). */
int proc_listener_rejects(const struct sockaddr_storage *addr, socklen_t alen, const void *buf,
                          size_t len)
{
    int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (const struct sockaddr *)addr, alen) != 0) {
        if (fd >= 0) close(fd);
        return 0;
    }
    if (len && send(fd, buf, len, MSG_NOSIGNAL) != (ssize_t)len) {
        close(fd);
        return 1;
    }
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int closed = 0;
    if (poll(&p, 1, 3000) == 1) {
        char c;
        closed = recv(fd, &c, 1, 0) <= 0;
    }
    close(fd);
    return closed;
}

int proc_pid_alive(pid_t pid)
{
    if (kill(pid, 0) != 0) return 0;
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')');
    return !(paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X'));
}
