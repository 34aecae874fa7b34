/* two processes share a memfd of X bytes; ping-pong: A copies 64K into region[0..64K) and bumps a
 * flag, B copies region[0..64K) out and bumps its flag. Prints us per round trip for X. */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
int main(int argc, char **argv)
{
    size_t X = strtoull(argv[1], 0, 10), S = 65536;
    int iters = 20000;
    int fd = memfd_create("p", 0);
    ftruncate(fd, X + 4096);
    char *m = mmap(0, X + 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    memset(m, 0, X + 4096);
    _Atomic unsigned *flag = (void *)(m + X);
    pid_t p = fork();
    char *m2 = mmap(0, X + 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd,
                    0); /* each maps its own view too */
    for (size_t o = 0; o < X; o += 4096)
        (void)((volatile char *)m2)[o];
    _Atomic unsigned *f2 = (void *)(m2 + X);
    char *priv = aligned_alloc(4096, S);
    memset(priv, 1, S);
    double t0 = 0;
    for (int i = 0; i < iters; i++) {
        if (i == 100) t0 = now();
        if (p) { /* A */
            while (atomic_load(&f2[16]) != (unsigned)i)
                ;
            memcpy(m2, priv, S);
            atomic_store(&f2[0], i + 1);
        } else { /* B */
            while (atomic_load(&f2[0]) != (unsigned)i + 1)
                ;
            memcpy(priv, m2, S);
            atomic_store(&f2[16], i + 1);
        }
    }
    if (p) {
        waitpid(p, 0, 0);
        printf("X=%zu: %.2f us per round\n", X, (now() - t0) / (iters - 100) * 1e6);
    }
    (void)flag;
    return 0;
}
