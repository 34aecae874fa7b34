/* Child processes for the tests that run whole programs (the trainer, launchers): start one
 * with its output in files, wait for it with a deadline, read a file back. */
#ifndef BRAID_TEST_PROC_H
#define BRAID_TEST_PROC_H

#include <sched.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>

/* Forks and execs argv[0] with stdout to dir/out and stderr to dir/err, after putenv() of
 * every entry of env (NULL-ended; may be NULL). Returns the child's pid (-1: fork failed). */
pid_t proc_spawn(const char *dir, char *const argv[], const char *out, const char *err,
                 char *const *env);
/* Waits up to timeout_s for pid: 0 when it exited (its waitpid status in *status), -1 when it
 * was SIGKILLed at the deadline (then reaped). */
int proc_wait(pid_t pid, double timeout_s, int *status);
/* The folder of the programs the tests run: $BRAID_BIN_DIR, else this executable's folder.
 * 0, or -1 when neither can be read. */
int proc_bin_dir(char *out, size_t len);
/* CLOCK_MONOTONIC seconds. */
double proc_now_s(void);
/* The file's first MiB as a string (free() it); "" when it cannot be opened. */
char *proc_slurp(const char *path);
/* The name of this process's thread tid (a /proc/self/task entry) in comm, without the
 * newline; 0, or -1 if it cannot be read. */
int proc_task_comm(const char *tid, char *comm, size_t len);
/* A TCP port of 127.0.0.1 free (bindable) at the call, below the kernel's ephemeral range
 * (net.ipv4.ip_local_port_range), so the outgoing connections of tests running alongside,
 * which take ephemeral ports, cannot take it before the caller's program binds it; it and the
 * port below it were free. Falls back to an ephemeral port when that range leaves no room. */
int proc_free_port(void);
/* Pins the calling thread to the first cpu it may use (children forked after inherit it); the
 * set it had in *was_p (may be NULL). 0, or -1 if the affinity cannot be read or set. */
int proc_pin_first_cpu(cpu_set_t *was_p);
/* The id of a thread of this process named name (/proc/self/task/<tid>/comm), -1 if none. */
pid_t proc_thread_named(const char *name);

/* Connects to addr, sends len bytes, and says whether the listener closed the connection
 * within 3 s (1) or not (0). */
/* Whether pid is a live process (a zombie counts as gone). */
int proc_pid_alive(pid_t pid);

int proc_listener_rejects(const struct sockaddr_storage *addr, socklen_t alen, const void *buf,
                          size_t len);

#endif
