/* Suite `fixedroot`: braid_unique_id_from_root, the NCCL_COMM_ID way to bootstrap: every rank
 * makes the same id from "host:port" on its own, and rank 0's init opens the root there (on
 * every address: the name may resolve to another address on rank 0's host than elsewhere). A
 * split of such a communicator opens its root on the address its parent's bootstrap uses. */
#include "braid/braid.h"
#include "core/bootstrap.h"
#include "core/comm.h"
#include "data.h"
#include "leaks.h"
#include "proc.h"

#include <criterion/criterion.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(fixedroot, .timeout = 60);

Test(fixedroot, same_id_everywhere_and_flagged)
{
    setenv("BRAID_SECRET", "00112233445566778899aabbccddeeff", 1);
    braid_unique_id_t a, b;
    cr_assert_eq(braid_unique_id_from_root("127.0.0.1:4242", &a), BRAID_SUCCESS, "%s",
                 braid_last_error());
    cr_assert_eq(braid_unique_id_from_root("127.0.0.1:4242", &b), BRAID_SUCCESS);
    cr_assert_eq(memcmp(&a, &b, sizeof(a)), 0, "two calls gave different ids");
    braid_boot_addr_t d;
    cr_assert_eq(braid_boot_id_decode(&a, &d), BRAID_SUCCESS, "%s", braid_last_error());
    cr_assert_eq(d.rank0_hosts, 1);
    cr_assert_eq(ntohs(((struct sockaddr_in *)&d.addr)->sin_port), 4242);
    cr_assert_eq(d.secret[0], 0x00);
    cr_assert_eq(d.secret[15], 0xff);
    cr_assert_eq(ntohl(((struct sockaddr_in *)&d.addr)->sin_addr.s_addr), 0x7f000001u);
    /* A flags byte with bits other than the two flags (rank0_hosts, loopback_only) is refused. */
    braid_unique_id_t bad = a;
    bad.internal[44] = 4;
    cr_assert_eq(braid_boot_id_decode(&bad, &d), BRAID_ERR_INVALID_ARG);
    cr_assert_not_null(strstr(braid_last_error(), "flags"));
    /* Without BRAID_SECRET the secret is derived from the root: still the same everywhere,
     * different for another root. */
    unsetenv("BRAID_SECRET");
    braid_unique_id_t c, e;
    cr_assert_eq(braid_unique_id_from_root("127.0.0.1:4242", &c), BRAID_SUCCESS);
    cr_assert_eq(braid_unique_id_from_root("127.0.0.1:4242", &e), BRAID_SUCCESS);
    cr_assert_eq(memcmp(&c, &e, sizeof(c)), 0);
    cr_assert_eq(braid_unique_id_from_root("127.0.0.1:4243", &e), BRAID_SUCCESS);
    cr_assert_neq(memcmp(c.internal + 24, e.internal + 24, 16), 0, "secrets of two roots agree");
}

Test(fixedroot, bad_arguments_are_named)
{
    braid_unique_id_t id;
    cr_assert_eq(braid_unique_id_from_root(NULL, &id), BRAID_ERR_INVALID_ARG);
    cr_assert_not_null(strstr(braid_last_error(), "root"));
    cr_assert_eq(braid_unique_id_from_root("127.0.0.1:1", NULL), BRAID_ERR_INVALID_ARG);
    cr_assert_not_null(strstr(braid_last_error(), "id_p"));
    cr_assert_eq(braid_unique_id_from_root("127.0.0.1", &id), BRAID_ERR_INVALID_ARG);
    cr_assert_not_null(strstr(braid_last_error(), "root"), "%s", braid_last_error());
    cr_assert_eq(braid_unique_id_from_root("127.0.0.1:99999", &id), BRAID_ERR_INVALID_ARG);
    setenv("BRAID_SECRET", "xyz", 1);
    cr_assert_eq(braid_unique_id_from_root("127.0.0.1:5000", &id), BRAID_ERR_INVALID_ARG);
    cr_assert_not_null(strstr(braid_last_error(), "BRAID_SECRET"));
    unsetenv("BRAID_SECRET");
}

/* n forked ranks, each makes the id itself and joins; one all-reduce checked exactly. */
static void job(int n, int port)
{
    char root[64];
    snprintf(root, sizeof(root), "127.0.0.1:%d", port);
    setenv("BRAID_SECRET", "0f1e2d3c4b5a69788796a5b4c3d2e1f0", 1);
    pid_t pids[8];
    for (int r = 0; r < n; r++) {
        pids[r] = fork();
        cr_assert(pids[r] >= 0);
        if (pids[r] == 0) {
            alarm(50);
            braid_unique_id_t id;
            braid_comm_t comm;
            if (braid_unique_id_from_root(root, &id) || braid_comm_init_rank(&comm, n, id, r)) {
                fprintf(stderr, "rank %d: %s\n", r, braid_last_error());
                _exit(1);
            }
            int bad = data_check_allreduce(comm, r, n, BRAID_FLOAT32, BRAID_SUM, 1031, 0, 0, 5,
                                           "fixed root");
            braid_comm_destroy(comm);
            _exit(bad || test_leaks());
        }
    }
    for (int r = 0; r < n; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%d ranks: rank %d failed", n, r);
    }
}

Test(fixedroot, ranks_bootstrap_without_exchanging_the_id)
{
    job(1, proc_free_port());
    job(3, proc_free_port());
    job(5, proc_free_port());
}

/* Only rank 0 listens: a rank 1 started first waits for it (connections are retried). */
Test(fixedroot, late_rank0)
{
    int port = proc_free_port();
    char root[64];
    snprintf(root, sizeof(root), "127.0.0.1:%d", port);
    setenv("BRAID_SECRET", "0f1e2d3c4b5a69788796a5b4c3d2e1f0", 1);
    pid_t p1 = fork();
    if (p1 == 0) {
        alarm(50);
        braid_unique_id_t id;
        braid_comm_t comm;
        if (braid_unique_id_from_root(root, &id) || braid_comm_init_rank(&comm, 2, id, 1)) {
            fprintf(stderr, "rank 1: %s\n", braid_last_error());
            _exit(1);
        }
        int bad = data_check_allreduce(comm, 1, 2, BRAID_INT32, BRAID_MAX, 77, 1, 0, 6, "late");
        braid_comm_destroy(comm);
        _exit(bad || test_leaks());
    }
    usleep(500 * 1000);
    pid_t p0 = fork();
    if (p0 == 0) {
        alarm(50);
        braid_unique_id_t id;
        braid_comm_t comm;
        if (braid_unique_id_from_root(root, &id) || braid_comm_init_rank(&comm, 2, id, 0)) {
            fprintf(stderr, "rank 0: %s\n", braid_last_error());
            _exit(1);
        }
        int bad = data_check_allreduce(comm, 0, 2, BRAID_INT32, BRAID_MAX, 77, 1, 0, 6, "late");
        braid_comm_destroy(comm);
        _exit(bad || test_leaks());
    }
    int s0, s1;
    waitpid(p0, &s0, 0);
    waitpid(p1, &s1, 0);
    cr_expect(WIFEXITED(s0) && WEXITSTATUS(s0) == 0, "rank 0 failed");
    cr_expect(WIFEXITED(s1) && WEXITSTATUS(s1) == 0, "rank 1 failed");
}

/* Rank `r` of 2 with root string `root`: one all-reduce, and (split) a split of the job whose
 * bootstrap root must listen on a loopback address like its parent's, not on the first
 * interface that is up. Exits 0 when all went well. */
static void fixed_rank(int r, const char *root, int split)
{
    alarm(50);
    braid_unique_id_t id;
    braid_comm_t comm, sub = NULL;
    if (braid_unique_id_from_root(root, &id) || braid_comm_init_rank(&comm, 2, id, r)) {
        fprintf(stderr, "rank %d (root %s): %s\n", r, root, braid_last_error());
        _exit(1);
    }
    int bad = data_check_allreduce(comm, r, 2, BRAID_FLOAT32, BRAID_SUM, 517, 0, 0, 9, "fixed");
    if (split && !bad) {
        if (braid_comm_split(comm, 0, r, &sub)) {
            fprintf(stderr, "rank %d: split: %s\n", r, braid_last_error());
            _exit(1);
        }
        const struct sockaddr_storage *a = &sub->boot_addr.addr;
        int loop = a->ss_family == AF_INET &&
                   ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24 == 127;
        char s[96];
        braid_boot_addr_str(a, s, sizeof(s));
        if (!loop) fprintf(stderr, "rank %d: the split's root is %s, not loopback\n", r, s);
        bad |= !loop;
        bad |= data_check_allreduce(sub, r, 2, BRAID_INT32, BRAID_SUM, 33, 0, 0, 4, "split");
        braid_comm_destroy(sub);
    }
    braid_comm_destroy(comm);
    _exit(bad || test_leaks());
}

static void fixed_pair(const char *root0, const char *root1, int split)
{
    setenv("BRAID_SECRET", "0f1e2d3c4b5a69788796a5b4c3d2e1f0", 1);
    setenv("BRAID_TIMEOUT", "8", 1);
    pid_t p0 = fork();
    if (p0 == 0) fixed_rank(0, root0, split);
    pid_t p1 = fork();
    if (p1 == 0) fixed_rank(1, root1, split);
    int s0, s1;
    waitpid(p0, &s0, 0);
    waitpid(p1, &s1, 0);
    cr_expect(WIFEXITED(s0) && WEXITSTATUS(s0) == 0, "rank 0 failed");
    cr_expect(WIFEXITED(s1) && WEXITSTATUS(s1) == 0, "rank 1 failed");
}

/* The root's name resolves to another address on rank 0's host than on rank 1's (Debian maps
 * the hostname to 127.0.1.1 in /etc/hosts): rank 0, named by this machine's hostname, listens
 * on every address, so rank 1 gets in by another one (it used to wait for its timeout: the
 * root listened on the hostname's address only). A loopback literal, by contrast, is listened
 * on alone (bootstrap/loopback_root_listens_on_loopback_only). */
Test(fixedroot, rank0_listens_on_every_address)
{
    int port = proc_free_port();
    char host[256] = "", r0[320], r1[64];
    cr_assert_eq(gethostname(host, sizeof(host) - 1), 0);
    snprintf(r0, sizeof(r0), "%s:%d", host, port);
    snprintf(r1, sizeof(r1), "127.0.0.1:%d", port);
    fixed_pair(r0, r1, 0);
}

/* The split's root listens where the parent's bootstrap goes (loopback here), not on the
 * first non-loopback interface that is up. */
Test(fixedroot, split_root_follows_the_parent_bootstrap)
{
    char r[64];
    snprintf(r, sizeof(r), "127.0.0.1:%d", proc_free_port());
    fixed_pair(r, r, 1);
}
