"""A rank that dies (SIGKILL) or stops (SIGSTOP) during a loop of asynchronous all-reduces on
the braid default group: the survivors' wait() must raise braid's error naming it within the
group's timeout. argv: kill|stop victim timeout_s."""
import json
import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import braid_torch  # noqa: F401

mode, victim, timeout_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
rank = int(os.environ["RANK"])
dist.init_process_group("braid", init_method="env://", timeout=timedelta(seconds=timeout_s))
t = torch.arange(1 << 16, dtype=torch.float32) * (rank + 1)
res = {"error": None}
for it in range(100000):
    if rank == victim and it == 20:
        os.kill(os.getpid(), signal.SIGKILL if mode == "kill" else signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        dist.all_reduce(t, async_op=True).wait()
        t.mul_(0.5)
    except RuntimeError as e:
        res = {"error": str(e), "seconds": time.monotonic() - t0, "iteration": it}
        break
with open(os.environ["BRAID_TEST_OUT"], "w") as f:
    json.dump(res, f)
os._exit(0)  # the store server (rank 0) may be gone; skip torch's exit-time teardown
