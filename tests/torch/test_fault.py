"""A killed rank and a stopped rank: the other ranks' wait raises within the group timeout,
naming the rank (3 processes, the victim is rank 2)."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


@pytest.mark.parametrize("mode,timeout_s", [("kill", 20.0), ("stop", 3.0)])
def test_dead_or_silent_rank_is_named(mode, timeout_s):
    job = harness.Job("fault_worker.py", 3, args=(mode, "2", str(timeout_s)), timeout=120)
    try:
        codes = job.wait(ranks=[0, 1])
    finally:
        job.kill_all()
    assert codes == {0: 0, 1: 0}, f"survivors: {codes}\n{job.logs()}"
    for r in (0, 1):
        res = job.result(r)
        assert res and res["error"], f"rank {r} saw no error: {res}\n{job.logs()}"
        msg = res["error"]
        assert msg.startswith("braid: allreduce failed"), msg
        # within the timeout (a killed rank is seen at once; a stopped one after the timeout)
        assert res["seconds"] < timeout_s + 5, res
        if mode == "kill":
            assert "rank 2" in msg and res["seconds"] < timeout_s, res
        elif r == 0:  # rank 0 receives from rank 2 in the ring and times out on it
            assert "timed out" in msg and "rank 2" in msg, msg
        print(f"rank {r} ({mode}): after {res['seconds']:.2f} s: {msg[:200]}")
