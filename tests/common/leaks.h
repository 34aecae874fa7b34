/* LeakSanitizer in forked test processes (ranks, children): test_leaks() runs LSan's check now
 * and returns nonzero when it found leaks (its report is on stderr); 0 outside ASan builds.
 *
 * A rank ends with _exit (no Criterion atexit work in a child), so LSan's own check at exit
 * never runs there: a rank calls this after braid_comm_destroy. In a child forked from the
 * Criterion worker, LSan's thread registry still lists the worker's other thread, and every
 * check prints "Running thread T was not suspended. False leaks are possible." for it (that
 * thread does not exist in the child: nothing of it to scan). Those lines are dropped (a thread
 * of this process that was not suspended is still reported); every other line of the check's
 * output goes to stderr. */
#ifndef BRAID_TEST_LEAKS_H
#define BRAID_TEST_LEAKS_H

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Zeroes the stack below the caller: pointers left in frames that returned (a block's address
 * in a dead local) would otherwise be read as live by the check when its own frames cover them. */
static __attribute__((noinline)) void test_leaks_scrub(void)
{
    char pad[64 << 10];
    explicit_bzero(pad, sizeof(pad));
    __asm__ volatile("" : : "r"(pad) : "memory");
}

/* Copies the check's output (fd, from its start) to stderr but the lines about threads that do
 * not exist in this process; when leaks were found and such lines were dropped, says so (a block
 * referenced only from such a thread's stack at the fork is reported as a leak). */
static __attribute__((noinline)) void test_leaks_replay(int fd, int leaks)
{
    FILE *f = lseek(fd, 0, SEEK_SET) == 0 ? fdopen(fd, "r") : NULL;
    if (!f) {
        close(fd);
        return;
    }
    char line[1024];
    int ghosts = 0;
    while (fgets(line, sizeof(line), f)) {
        const char *t = strstr(line, "Running thread ");
        unsigned long long tid;
        char task[64];
        if (t && strstr(t, "was not suspended") && sscanf(t, "Running thread %llu", &tid) == 1) {
            snprintf(task, sizeof(task), "/proc/self/task/%llu", tid);
            if (access(task, F_OK) != 0) { /* a thread of the parent: not here */
                ghosts++;
                continue;
            }
        }
        fputs(line, stderr);
    }
    fclose(f);
    if (leaks && ghosts)
        fprintf(stderr,
                "leaks.h: %d thread(s) of the parent process (not in this child) were not scanned: "
                "a block only they referenced at the fork shows as a leak\n",
                ghosts);
}

static inline int test_leaks(void)
{
    char path[] = "/tmp/braid-lsan-XXXXXX";
    int fd = mkstemp(path), saved = -1;
    if (fd >= 0) {
        unlink(path);
        fflush(stderr);
        saved = dup(2);
        if (saved >= 0 && dup2(fd, 2) < 0) {
            close(saved);
            saved = -1;
        }
    }
    test_leaks_scrub();
    int leaks = __lsan_do_recoverable_leak_check();
    if (saved < 0) { /* unfiltered: the report went to stderr */
        if (fd >= 0) close(fd);
        return leaks;
    }
    dup2(saved, 2);
    close(saved);
    test_leaks_replay(fd, leaks);
    return leaks;
}
#else
static inline int test_leaks(void)
{
    return 0; /* checked only in ASan builds */
}
#endif

#endif
