/* Single-copy messages with helping senders (src/core/p2p_cma.c, BRAID_P2P_CMA_HELP) as real
 * processes: in a ring of large messages cut in small pieces, every byte is copied exactly once
 * (the bytes each receiver read plus the bytes its sender wrote equal the bytes received, from
 * the counters of both ranks), the data is bit-exact, and a sender does write pieces; with help
 * off no sender writes; auto helps exactly when the machine has more ranks than cpus. The
 * faults (a helping sender killed, a receiver that aborts while its sender writes, the buffer
 * untouched once the call has returned) are in test_p2p_cma.c. */
#include "core/p2p.h"
#include "data.h"
#include "mp.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    int help;   /* senders must write pieces (1), must not (0), may (-1) */
    int expect; /* whether the ranks must report that they help */
    int rounds; /* exchanges at most (help: until a sender has written a piece) */
    size_t mib; /* message size in MiB (plus 12 bytes) */
} conserve_t;

static int conserve(braid_comm_t comm, int rank, int n, void *arg)
{
    const conserve_t *a = arg;
    int next = (rank + 1) % n, prev = (rank + n - 1) % n, help = -1;
    size_t count = (a->mib << 20) / 4 + 3, bytes = count * 4;
    char *in = data_xmalloc(bytes), *out = data_xmalloc(bytes);
    uint64_t *all = calloc((size_t)n * 2, sizeof(uint64_t)), expect = 0, pushed = 0;
    MP_CHECK(rank, all != NULL, "out of memory");
    for (int it = 0; it < a->rounds; it++) {
        data_fill(in, BRAID_INT32, BRAID_SUM, rank, 0, count, 40 + rank * 7 + it);
        MP_OK(rank, braid_group_start());
        MP_OK(rank, braid_recv(out, count, BRAID_INT32, prev, comm));
        MP_OK(rank, braid_send(in, count, BRAID_INT32, next, comm));
        MP_OK(rank, braid_group_end());
        char what[96];
        snprintf(what, sizeof(what), "help=%d n=%d exchange %d from %d", a->help, n, it, prev);
        MP_CHECK(
            rank,
            !data_check_rank(out, BRAID_INT32, BRAID_SUM, prev, 0, count, 40 + prev * 7 + it, what),
            "%s", what);
        expect += bytes;
        uint64_t mine[2];
        braid_p2p_cma_pulls(comm, &mine[0]);
        mine[1] = braid_p2p_cma_pushed(comm, &help);
        MP_OK(rank, braid_allgather(mine, all, 2, BRAID_UINT64, comm));
        /* Every piece of every message this rank received: read by it or written by prev. */
        MP_CHECK(rank, all[2 * rank] + all[2 * prev + 1] == expect,
                 "%s: read %llu + written by rank %d %llu != %llu received", what,
                 (unsigned long long)all[2 * rank], prev, (unsigned long long)all[2 * prev + 1],
                 (unsigned long long)expect);
        pushed = 0;
        for (int r = 0; r < n; r++)
            pushed += all[2 * r + 1];
        if (a->help == 1 && pushed > 0) break; /* the same decision on every rank */
    }
    MP_CHECK(rank, help == a->expect, "helps: %d, expected %d", help, a->expect);
    if (a->help == 1)
        MP_CHECK(rank, pushed > 0, "no sender wrote a piece in %d exchanges of %zu bytes",
                 a->rounds, bytes);
    else if (a->help == 0)
        MP_CHECK(rank, pushed == 0, "senders wrote %llu bytes with help off",
                 (unsigned long long)pushed);
    free(all);
    free(in);
    free(out);
    return 0;
}

static void set_env(const char *help)
{
    setenv("BRAID_P2P_CMA", "1", 1);
    setenv("BRAID_P2P_CMA_MIN", "4096", 1);
    setenv("BRAID_P2P_CMA_PIECE", "256K", 1); /* many pieces per message to share */
    setenv("BRAID_P2P_CMA_HELP", help, 1);
}

Test(p2p_cma_help, every_byte_copied_once_and_senders_write_pieces, .timeout = 240)
{
    int ns[] = {2, 3, 4};
    for (int help = 1; help >= 0; help--) {
        set_env(help ? "1" : "0");
        /* Help: up to 40 exchanges of 24 MiB (96 pieces each) until a sender has written a
         * piece; a sender spins or yields while its receiver reads, so it takes pieces in the
         * first exchanges unless it never runs meanwhile. Off: 3 exchanges. */
        conserve_t a = {help, help, help ? 40 : 3, 24};
        for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
            if (data_quick() && ns[i] > 3) continue;
            cr_assert_eq(mp_run(ns[i], conserve, &a, 200), 0, "help=%d n=%d", help, ns[i]);
        }
    }
}

Test(p2p_cma_help, auto_helps_with_more_ranks_than_cpus, .timeout = 200)
{
    set_env("auto");
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    /* Whether or not they help, the counts add up; one exchange of 4 MiB. */
    conserve_t fit = {0, 0, 1, 4}, over = {-1, 1, 1, 4};
    int n = cpus >= 2 ? 2 : 1;
    if (n > 1 && cpus >= n)
        cr_assert_eq(mp_run(n, conserve, &fit, 100), 0, "%d ranks on %ld cpus", n, cpus);
    if (cpus < 8)
        cr_assert_eq(mp_run((int)cpus + 1, conserve, &over, 100), 0, "%ld ranks on %ld cpus",
                     cpus + 1, cpus);
}
