"""Asynchronous completion on 2 ranks (async_worker.py): future callbacks that issue and wait
for collectives (the cb.py case and DDP with torch's powerSGD_hook, compared with Gloo), the
staging copies of isend/irecv of non-contiguous tensors, work.wait() against the future, and a
per-operation timeout that must not carry over into point-to-point calls, and destroying a group
with operations queued (the peer never joins them) or a Python callback running."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

SCENARIOS = ["callback_collective", "powersgd", "isend_noncontiguous", "wait_then_future_done",
             "p2p_timeout", "destroy_pending", "destroy_during_callback"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_async(scenario):
    _, res = harness.run("async_worker.py", 2, args=(scenario,), timeout=150)
    for r, out in enumerate(res):
        assert out is not None, f"rank {r} wrote no result"
        print(f"{scenario} rank {r}: {out['detail']}")


def test_every_scenario_is_listed():
    import async_worker  # noqa: E402
    assert sorted(async_worker.SCENARIOS) == sorted(SCENARIOS)
