"""One rank of a scenario of test_async.py (argv[1] names it) on the "braid" default group:
future callbacks that issue collectives, staging copies of asynchronous point-to-point calls,
work.wait() against the future, per-operation timeouts, destroying a group with operations or
callbacks pending. A watchdog ends a hung rank (exit 3) so that a hang fails fast with a message
instead of running into the harness's timeout.
Writes {"detail": str} to $BRAID_TEST_OUT; any failure raises (non-zero exit)."""
import faulthandler
import gc
import json
import os
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn

import braid_torch  # noqa: F401  (registers "braid")

RANK = int(os.environ.get("RANK", "0"))
WORLD = int(os.environ.get("WORLD_SIZE", "1"))


def watchdog(seconds, what):
    def dog():
        time.sleep(seconds)
        print(f"rank {RANK}: HANG after {seconds} s: {what}", flush=True)
        os._exit(3)
    threading.Thread(target=dog, daemon=True).start()


def callback_collective():
    """A callback of one operation's future issues another operation and waits for it (its
    future, its work, and a collective called synchronously), as powerSGD_hook does."""
    watchdog(30, "a future callback waiting for a collective it issued")
    t = torch.full((4,), float(RANK + 1))
    u = torch.arange(4, dtype=torch.float32) + RANK
    want_u = sum(torch.arange(4, dtype=torch.float32) + r for r in range(WORLD))

    def cb(f):
        return dist.all_reduce(u, async_op=True).get_future().wait()[0] + f.value()[0]
    got = dist.all_reduce(t, async_op=True).get_future().then(cb).wait()
    want_t = torch.full((4,), float(sum(range(1, WORLD + 1))))
    assert torch.equal(got, want_u + want_t), (got, want_u + want_t)

    # work.wait() and a synchronous collective inside callbacks, chained three deep
    v = torch.full((3,), float(RANK))

    def sync_cb(f):
        dist.all_reduce(v)
        w = dist.broadcast(v, src=WORLD - 1, async_op=True)
        w.wait()
        return v.clone()
    fut = dist.all_reduce(torch.ones(2), async_op=True).get_future()
    got = fut.then(sync_cb).then(sync_cb).then(sync_cb).wait()
    want = float(sum(range(WORLD)))
    for _ in range(2):
        want *= WORLD
    assert torch.equal(got, torch.full((3,), want)), (got, want)
    return "callbacks issued and waited for collectives"


def powersgd():
    """DDP with torch's own powerSGD_hook (its callbacks all_reduce and wait), several buckets;
    the same steps on a Gloo group must give the same parameters."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
    watchdog(90, "DDP with powerSGD_hook")
    gloo = dist.new_group(backend="gloo", timeout=timedelta(seconds=60))
    params = {}
    for name, group in (("braid", None), ("gloo", gloo)):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(),
                              nn.Linear(32, 4))
        ddp = nn.parallel.DistributedDataParallel(model, process_group=group,
                                                  bucket_cap_mb=0.01)
        state = psgd.PowerSGDState(process_group=group, matrix_approximation_rank=1,
                                   start_powerSGD_iter=2)
        ddp.register_comm_hook(state, psgd.powerSGD_hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        gen = torch.Generator().manual_seed(100 + RANK)
        for _ in range(4):
            x = torch.randn(8, 64, generator=gen) * (RANK + 1)
            opt.zero_grad()
            ddp(x).square().sum().backward()
            opt.step()
        params[name] = torch.cat([p.detach().flatten() for p in model.parameters()])
        assert torch.isfinite(params[name]).all(), name
    diff = (params["braid"] - params["gloo"]).abs().max().item()
    assert diff <= 1e-5, f"braid and gloo parameters differ by {diff}"
    return f"4 steps; max |braid - gloo| = {diff:.2e}"


def isend_noncontiguous():
    """isend of a non-contiguous tensor: the contiguous staging copy must live until the send
    completed (the receiver is late; the sender churns the allocator meanwhile); the same for
    irecv into a non-contiguous tensor with a late sender. Exact comparison."""
    watchdog(60, "isend/irecv of non-contiguous tensors")
    n = 512
    for it in range(3):
        full = torch.arange(n * n * 2, dtype=torch.float32).reshape(n, 2 * n) + it * 1000
        want = full[:, ::2]
        if RANK == 0:
            w = dist.isend(full.clone()[:, ::2], 1)  # only the work holds the tensor
            junk = [torch.full((n, n), -7.0) for _ in range(8)]
            w.wait()
            del junk
            back = torch.zeros(2 * n, n)[::2]  # non-contiguous receive buffer
            w = dist.irecv(back, 1)
            junk = [torch.full((n, n), -9.0) for _ in range(8)]
            w.wait()
            del junk
            assert torch.equal(back, want.t() * 2), f"iteration {it}: irecv corrupt"
        elif RANK == 1:
            time.sleep(0.3)
            got = torch.empty(n, n)
            dist.recv(got, 0)
            bad = (got != want).sum().item()
            assert bad == 0, f"iteration {it}: {bad} elements differ: {got.flatten()[:4]}"
            time.sleep(0.3)
            dist.send((want.t() * 2).contiguous(), 0)
    dist.barrier()
    return "3 iterations exact"


def wait_then_future_done():
    """work.wait() returns only once the work's future is completed."""
    iters = int(os.environ.get("BRAID_TEST_ITERS", "2000"))
    watchdog(120, "all_reduce loop")
    t = torch.ones(1)
    bad = 0
    for _ in range(iters):
        w = dist.all_reduce(t, async_op=True)
        w.wait()
        if not w.get_future().done():
            bad += 1
    assert bad == 0, f"{bad} of {iters} work.wait() returned before the future was completed"
    return f"{iters} iterations"


def p2p_timeout():
    """A timeout given to one operation (monitored_barrier's) does not carry over into later
    point-to-point calls: a receive whose sender is later than that timeout but within the
    group's succeeds."""
    watchdog(60, "p2p timeout")
    dist.group.WORLD.monitored_barrier(timedelta(seconds=1))
    t = torch.zeros(4)
    if RANK == 0:
        time.sleep(2.5)
        dist.send(torch.arange(4, dtype=torch.float32), 1)
    elif RANK == 1:
        t0 = time.monotonic()
        dist.recv(t, 0)
        assert torch.equal(t, torch.arange(4, dtype=torch.float32)), t
        assert time.monotonic() - t0 > 2.0
    dist.barrier()
    return "recv waited past the barrier's timeout"


def destroy_pending():
    """Destroying a group with queued operations the peer never joins (rank 1 stays alive but
    does not call them): every work fails ("aborted" / "destroyed"), and the process survives
    dropping the group and the works (a completer thread started during the group's destruction
    was left joinable: std::terminate, exit 134). Three rounds."""
    watchdog(60, "destroying a group with pending operations")
    msgs = []
    for it in range(3):
        g = dist.new_group([0, 1], timeout=timedelta(seconds=5))
        if RANK == 0:
            ts = [torch.full((1024,), float(i)) for i in range(5)]
            works = [dist.all_reduce(t, group=g, async_op=True) for t in ts]
            time.sleep(0.05 * it)  # the first operation posted (round 0: maybe not yet)
            dist.destroy_process_group(g)
            del g
            for i, w in enumerate(works):
                try:
                    w.wait()
                except RuntimeError as e:
                    m = str(e)
                    assert "abort" in m.lower() or "destroyed" in m, f"work {i}: {m}"
                    msgs.append(m.split(":")[1].strip() if ":" in m else m)
                else:
                    raise AssertionError(f"round {it}: work {i} of a destroyed group succeeded")
            del works, w
            gc.collect()
        else:
            time.sleep(0.3)  # alive, but not joining rank 0's operations
        dist.barrier()
        if RANK != 0:
            dist.destroy_process_group(g)
            del g
            gc.collect()
    if RANK != 0:
        return "kept out of 3 rounds"
    return f"{len(msgs)} works of 3 destroyed groups failed ({msgs[0]}, ...)"


def destroy_during_callback():
    """Destroying a group (the last reference dropped in Python) while a Python callback of its
    future runs on the group's completer thread: the destructor joins that thread, so it must
    not hold the GIL the callback needs (both ranks hung)."""
    # a deadlock holds the GIL, which watchdog() needs: faulthandler's thread does without
    faulthandler.dump_traceback_later(30, exit=True)
    g = dist.new_group([0, 1], timeout=timedelta(seconds=10))
    t = torch.full((4,), float(RANK + 1))
    started = threading.Event()

    def cb(f):
        started.set()
        time.sleep(0.5)
        return f.value()[0] * 2
    fut = dist.all_reduce(t, group=g, async_op=True).get_future().then(cb)
    assert started.wait(20), "the callback did not start"
    t0 = time.monotonic()
    dist.destroy_process_group(g)
    del g
    gc.collect()
    took = time.monotonic() - t0
    got = fut.wait()
    want = torch.full((4,), 2.0 * sum(range(1, WORLD + 1)))
    assert torch.equal(got, want), (got, want)
    dist.barrier()
    faulthandler.cancel_dump_traceback_later()
    return f"destroyed in {took:.2f} s while the callback ran"


SCENARIOS = {f.__name__: f for f in (callback_collective, powersgd, isend_noncontiguous,
                                     wait_then_future_done, p2p_timeout, destroy_pending,
                                     destroy_during_callback)}


def main():
    dist.init_process_group("braid", init_method="env://", timeout=timedelta(seconds=30))
    detail = SCENARIOS[sys.argv[1]]()
    with open(os.environ["BRAID_TEST_OUT"], "w") as f:
        json.dump({"detail": detail}, f)
    print(f"rank {RANK}: {detail}", flush=True)
    os._exit(0)  # the store server (rank 0) may be gone; skip torch's exit-time teardown


if __name__ == "__main__":
    main()
