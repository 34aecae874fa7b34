/* Bad input: every entry point returns a clear error code and a message naming the argument,
 * never crashes or hangs. Also the unique id, wrong job secret and environment-based init. */
#include "core/bootstrap.h"
#include "leaks.h"
#include "mp.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define EXPECT(rank, call, code, word)                                                             \
    do {                                                                                           \
        braid_result_t r_ = (call);                                                                \
        MP_CHECK(rank, r_ == (code), "%s returned %s, expected %s (%s)", #call,                    \
                 braid_strerror(r_), braid_strerror(code), braid_last_error());                    \
        MP_CHECK(rank, strstr(braid_last_error(), word), "%s: message '%s' lacks '%s'", #call,     \
                 braid_last_error(), word);                                                        \
    } while (0)

static int bad_args(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    float a[64] = {0}, b[64] = {0};
    const braid_result_t INV = BRAID_ERR_INVALID_ARG;
    EXPECT(rank, braid_allreduce(a, b, 4, BRAID_FLOAT32, BRAID_SUM, NULL), INV, "comm");
    EXPECT(rank, braid_allreduce(NULL, b, 4, BRAID_FLOAT32, BRAID_SUM, comm), INV, "sendbuf");
    EXPECT(rank, braid_allreduce(a, NULL, 4, BRAID_FLOAT32, BRAID_SUM, comm), INV, "recvbuf");
    EXPECT(rank, braid_allreduce(a, b, 4, (braid_datatype_t)42, BRAID_SUM, comm), INV, "dtype");
    EXPECT(rank, braid_allreduce(a, b, 4, (braid_datatype_t)-1, BRAID_SUM, comm), INV, "dtype");
    EXPECT(rank, braid_allreduce(a, b, 4, BRAID_FLOAT32, (braid_redop_t)9, comm), INV, "op");
    EXPECT(rank, braid_allreduce(a, b, SIZE_MAX / 2, BRAID_FLOAT32, BRAID_SUM, comm), INV, "count");
    EXPECT(rank, braid_allgather(a, b, SIZE_MAX / 3, BRAID_FLOAT64, comm), INV, "count");
    EXPECT(rank, braid_allreduce(a, a + 1, 8, BRAID_FLOAT32, BRAID_SUM, comm), INV, "overlap");
    EXPECT(rank, braid_broadcast(a, b, 4, BRAID_FLOAT32, n, comm), INV, "root");
    EXPECT(rank, braid_broadcast(a, b, 4, BRAID_FLOAT32, -1, comm), INV, "root");
    EXPECT(rank, braid_reduce(a, b, 4, BRAID_FLOAT32, BRAID_SUM, n + 3, comm), INV, "root");
    EXPECT(rank, braid_reduce_scatter(a, NULL, 4, BRAID_FLOAT32, BRAID_SUM, comm), INV, "recvbuf");
    EXPECT(rank, braid_iallreduce(a, b, 4, BRAID_FLOAT32, BRAID_SUM, comm, NULL), INV, "req_p");
    EXPECT(rank, braid_wait(NULL), INV, "req");
    EXPECT(rank, braid_comm_rank(comm, NULL), INV, "rank_p");
    EXPECT(rank, braid_comm_size(NULL, &n), INV, "comm");
    /* Count 0 with NULL buffers is a valid no-op (as in NCCL). */
    MP_OK(rank, braid_allreduce(NULL, NULL, 0, BRAID_FLOAT32, BRAID_SUM, comm));
    /* Bad arguments do not poison the communicator. */
    for (int i = 0; i < 8; i++)
        a[i] = (float)(rank + i);
    MP_OK(rank, braid_allreduce(a, b, 8, BRAID_FLOAT32, BRAID_SUM, comm));
    for (int i = 0; i < 8; i++)
        MP_CHECK(rank, b[i] == (float)(n * (n - 1) / 2 + n * i), "b[%d] = %g", i, b[i]);
    braid_result_t err;
    const char *msg;
    MP_OK(rank, braid_comm_get_error(comm, &err, &msg));
    MP_CHECK(rank, err == BRAID_SUCCESS, "async error set: %s", msg);
    return 0;
}

TestSuite(api, .timeout = 60);

Test(api, bad_arguments_give_clear_errors)
{
    cr_assert_eq(mp_run(2, bad_args, NULL, 30), 0);
    cr_assert_eq(mp_run(1, bad_args, NULL, 30), 0);
}

static int use_after_destroy(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    (void)n;
    float a = 1;
    MP_OK(rank, braid_barrier(comm));
    /* The harness destroys comm after return; destroy a second communicator here instead. */
    braid_unique_id_t id;
    if (n == 1) {
        MP_OK(rank, braid_get_unique_id(&id));
        braid_comm_t c2;
        MP_OK(rank, braid_comm_init_rank(&c2, 1, id, 0));
        MP_OK(rank, braid_comm_destroy(c2));
        EXPECT(rank, braid_allreduce(&a, &a, 1, BRAID_FLOAT32, BRAID_SUM, c2),
               BRAID_ERR_INVALID_USAGE, "not a live communicator");
        EXPECT(rank, braid_comm_destroy(c2), BRAID_ERR_INVALID_USAGE, "not a live communicator");
    }
    return 0;
}

Test(api, destroyed_communicator_is_rejected)
{
    cr_assert_eq(mp_run(1, use_after_destroy, NULL, 30), 0);
}

Test(api, init_argument_checks)
{
    braid_comm_t c;
    braid_unique_id_t id;
    memset(&id, 0x5a, sizeof(id));
    cr_assert_eq(braid_comm_init_rank(NULL, 2, id, 0), BRAID_ERR_INVALID_ARG);
    cr_assert(strstr(braid_last_error(), "comm_p"));
    cr_assert_eq(braid_comm_init_rank(&c, 0, id, 0), BRAID_ERR_INVALID_ARG);
    cr_assert(strstr(braid_last_error(), "nranks"));
    cr_assert_eq(braid_comm_init_rank(&c, 4, id, 4), BRAID_ERR_INVALID_ARG);
    cr_assert(strstr(braid_last_error(), "rank"));
    cr_assert_eq(braid_comm_init_rank(&c, 2, id, 1), BRAID_ERR_INVALID_ARG);
    cr_assert(strstr(braid_last_error(), "id"), "%s", braid_last_error());
    cr_assert_eq(braid_get_unique_id(NULL), BRAID_ERR_INVALID_ARG);
    cr_assert_str_eq(braid_strerror(BRAID_ERR_REMOTE), "remote peer failed");
    cr_assert_eq(braid_version(), BRAID_VERSION_CODE);
    cr_assert_eq(braid_dtype_size(BRAID_BFLOAT16), 2);
    cr_assert_str_eq(braid_dtype_name(BRAID_FLOAT16), "float16");
    cr_assert_str_eq(braid_op_name(BRAID_AVG), "avg");
}

Test(api, bad_environment_values_are_named)
{
    braid_comm_t c;
    braid_unique_id_t id;
    cr_assert_eq(braid_get_unique_id(&id), BRAID_SUCCESS);
    /* variable, bad value, what the message must contain */
    const char *cases[][3] = {{"BRAID_CHUNK_SIZE", "lots", "BRAID_CHUNK_SIZE"},
                              {"BRAID_TRANSPORT", "pigeon", "pigeon"},
                              {"BRAID_DIRECT_NT_SLOTS", "2", "BRAID_DIRECT_NT_SLOTS=2"},
                              {"BRAID_P2P_NT_SLOTS", "yes", "BRAID_P2P_NT_SLOTS=yes"},
                              {"BRAID_WORKER_RT", "100", "BRAID_WORKER_RT"},
                              {"BRAID_WORKER_SLICE_US", "50", "BRAID_WORKER_SLICE_US"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        setenv(cases[i][0], cases[i][1], 1);
        cr_assert_eq(braid_comm_init_rank(&c, 1, id, 0), BRAID_ERR_INVALID_ARG, "%s=%s",
                     cases[i][0], cases[i][1]);
        cr_assert(strstr(braid_last_error(), cases[i][2]), "%s", braid_last_error());
        unsetenv(cases[i][0]);
    }
}

/* A rank presenting a wrong job secret is refused and fails (it never joins the job). */
Test(api, wrong_secret_is_refused)
{
    setenv("BRAID_TIMEOUT", "3", 1);
    int fd[2];
    cr_assert_eq(pipe(fd), 0);
    pid_t p0 = fork();
    if (p0 == 0) {
        alarm(60); /* a hang here (the leak check after a fork) ends the child */
        braid_unique_id_t id;
        if (braid_get_unique_id(&id)) _exit(2);
        if (write(fd[1], &id, sizeof(id)) != sizeof(id)) _exit(2);
        braid_comm_t c;
        braid_result_t r = braid_comm_init_rank(&c, 2, id, 0);
        /* must not succeed: rank 1 never joins; a failed init frees what it took */
        _exit(r == BRAID_SUCCESS ? 1 : test_leaks() ? 5 : 0);
    }
    braid_unique_id_t id;
    cr_assert_eq(read(fd[0], &id, sizeof(id)), (ssize_t)sizeof(id));
    braid_boot_addr_t a;
    cr_assert_eq(braid_boot_id_decode(&id, &a), BRAID_SUCCESS);
    a.secret[3] ^= 0x40;
    braid_boot_id_encode(&a, &id);
    pid_t p1 = fork();
    if (p1 == 0) {
        alarm(60);
        braid_comm_t c;
        braid_result_t r = braid_comm_init_rank(&c, 2, id, 1);
        if (r == BRAID_SUCCESS) _exit(1);
        fprintf(stderr, "wrong-secret rank: %s: %s\n", braid_strerror(r), braid_last_error());
        _exit(test_leaks() ? 5 : 0);
    }
    int s0, s1;
    waitpid(p1, &s1, 0);
    waitpid(p0, &s0, 0);
    cr_assert(WIFEXITED(s1) && WEXITSTATUS(s1) == 0, "the wrong-secret rank was accepted");
    cr_assert(WIFEXITED(s0) && WEXITSTATUS(s0) == 0, "rank 0 completed without rank 1");
}
