/* One file descriptor held in reserve from library load on (see core/bootstrap.h): a rank
 * out of descriptors can still open its bootstrap connection and tell the root why it cannot
 * go on (instead of the root waiting out BRAID_TIMEOUT for a rank that never joins).
 *
 * The reserve is a memfd (its own inode): before closing it, braid checks that the descriptor
 * still refers to that inode, so a program that closed every descriptor (and got the number
 * back from another open) never has its own descriptor closed by braid. One reserve per
 * process; a thread that finds it taken goes without. */
#include "core/bootstrap.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static pthread_mutex_t reserve_lock = PTHREAD_MUTEX_INITIALIZER;
static int reserve_fd = -1;
static dev_t reserve_dev;
static ino_t reserve_ino;

static void reserve_open_locked(void)
{
    if (reserve_fd >= 0) return;
    int fd = memfd_create("braid-fd-reserve", MFD_CLOEXEC);
    struct stat st;
    if (fd < 0) return;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return;
    }
    reserve_fd = fd;
    reserve_dev = st.st_dev;
    reserve_ino = st.st_ino;
}

__attribute__((constructor)) static void reserve_at_load(void)
{
    pthread_mutex_lock(&reserve_lock);
    reserve_open_locked();
    pthread_mutex_unlock(&reserve_lock);
}

int braid_fd_reserve_release(void)
{
    pthread_mutex_lock(&reserve_lock);
    int released = 0;
    struct stat st;
    if (reserve_fd >= 0 && fstat(reserve_fd, &st) == 0 && st.st_dev == reserve_dev &&
        st.st_ino == reserve_ino) {
        close(reserve_fd);
        released = 1;
    }
    reserve_fd = -1; /* not ours any more (the program closed it) or released */
    pthread_mutex_unlock(&reserve_lock);
    return released;
}

void braid_fd_reserve_restore(void)
{
    pthread_mutex_lock(&reserve_lock);
    reserve_open_locked();
    pthread_mutex_unlock(&reserve_lock);
}
