/* The Fashion-MNIST trainer (build/bin/ddp_mlp) as child processes, for the suites that run it
 * (tests/mp/test_ddp_trainer.c, test_ddp_variants.c): the fixture, and a rank killed in the
 * middle of training. */
#ifndef BRAID_TEST_TRAINER_H
#define BRAID_TEST_TRAINER_H

#include <stddef.h>
#include <sys/types.h>

#define TR_DATA_DIR "/usr/share/datasets/fashion-mnist"

/* Criterion fixture: the programs' folder into bin (the test is skipped when ddp_mlp was not
 * built; the data set must be installed), a fresh folder from tmpl ("/tmp/...-XXXXXX") into
 * dir, BRAID_ROOT unset (braid-run sets it for its ranks). */
void tr_setup(char *bin, size_t blen, char *dir, size_t dlen, const char *tmpl);
/* Removes dir (if tr_setup made it). */
void tr_teardown(const char *dir);
/* dir/name as a string (free() it; "" when missing). */
char *tr_slurp(const char *dir, const char *name);
/* n ranks of argv started by hand, without a launcher (which would kill the others itself):
 * BRAID_RANK, BRAID_NRANKS, BRAID_ROOT (a free port), BRAID_SECRET, BRAID_TIMEOUT=20; rank r's
 * stdout/stderr in dir/out<r>, dir/err<r>. Once dir/out0 shows "epoch 2 " (within 150 s),
 * rank victim is SIGKILLed; then every other rank must exit non-zero within 25 s, and a rank
 * r with must_name[r] not NULL must have that text in its stderr (naming the victim). */
void tr_kill_mid_training(const char *dir, char *const argv[], int n, int victim,
                          const char *const *must_name);

#endif
