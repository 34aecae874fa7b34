"""torch DDP on "braid" for 300 steps at 2 and 3 ranks: parameters bit-identical across ranks,
the loss curve matches Gloo's run (same seeds and batches, same processes) within a float
tolerance, and the model learns."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

STEPS, BATCH = 300, 32
# braid's ring and Gloo sum the gradients in different orders at 3 ranks (at 2 the sums are
# the same): float32 rounding differences that 300 SGD steps carry on. Measured here: 0 at 2
# ranks, <= 5e-7 at 3 ranks (parameters within 2.4e-7); the bound leaves a 200x margin.
LOSS_TOL = 1e-4


@pytest.mark.skipif(not os.path.exists("/usr/share/datasets/fashion-mnist"),
                    reason="apt-get install dataset-fashion-mnist")
@pytest.mark.parametrize("world", [2, 3])
def test_ddp_mlp_matches_gloo(world):
    _, res = harness.run("ddp_worker.py", world, args=(str(STEPS), str(BATCH)), timeout=400)
    for r, out in enumerate(res):
        assert out["identical_across_ranks"], f"rank {r}: braid DDP parameters differ across ranks"
        lb, lg = out["losses"]["braid"], out["losses"]["gloo"]
        assert len(lb) == len(lg) == STEPS
        diff = max(abs(a - b) for a, b in zip(lb, lg))
        print(f"world {world} rank {r}: max |loss braid - loss gloo| = {diff:.2e}, "
              f"param max diff {out['param_maxdiff_vs_gloo']:.2e}, "
              f"loss {sum(lb[:10]) / 10:.3f} -> {sum(lb[-50:]) / 50:.3f}")
        assert diff <= LOSS_TOL, f"rank {r}: loss curves differ by {diff} (> {LOSS_TOL})"
        assert sum(lb[-50:]) / 50 < 0.7 * sum(lb[:10]) / 10, "the model did not learn"
