"""One rank of the collective checks: every c10d call on the "braid" default group, on every
dtype, sync and async, checked against a reference computed here from every rank's inputs (the
inputs are a function of rank and index) and against Gloo's result on a Gloo group over the
same ranks in the same run (where Gloo 1.13 implements the call and dtype).

Writes {check: {"status": "pass" | "fail" | "pending" | "n/a", "detail": str}} to $BRAID_TEST_OUT.
Checks run in the same order on every rank; a check never skips a collective on one rank only.
"""
import json
import os
import sys
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

import braid_torch  # noqa: F401  (registers "braid")

from coll_checks import CHECKS
from coll_checks_move import NotApplicable
from coll_common import Ctx, Pending


def main():
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("braid", init_method="env://", timeout=timedelta(seconds=60))
    gloo = dist.new_group(backend="gloo", timeout=timedelta(seconds=60))
    sync = dist.new_group(backend="gloo", timeout=timedelta(seconds=120))  # between checks only
    ctx = Ctx(rank, world, dist.group.WORLD, gloo)
    out = {}
    only = os.environ.get("BRAID_TEST_ONLY")
    for name, fn in CHECKS.items():
        if only and name not in only.split(","):
            continue
        t0 = time.monotonic()
        try:
            detail = fn(ctx) or ""
            out[name] = {"status": "pass", "detail": detail}
        except Pending as e:
            out[name] = {"status": "pending", "detail": str(e)}
        except NotApplicable as e:
            out[name] = {"status": "n/a", "detail": str(e)}
        except Exception:  # noqa: BLE001 - every failure is reported with its traceback
            out[name] = {"status": "fail", "detail": traceback.format_exc()}
        out[name]["seconds"] = round(time.monotonic() - t0, 3)
        # a failed check may leave ranks at different points: meet again (store-based)
        dist.barrier(group=sync)
    with open(os.environ["BRAID_TEST_OUT"], "w") as f:
        json.dump(out, f)
    dist.barrier(group=sync)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
