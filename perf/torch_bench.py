"""braid vs Gloo under torch.distributed, measured in the same processes (one run).

  allreduce: dist.all_reduce (float32, SUM, in place) per size, on the "braid" default group
             and on a Gloo group over the same ranks; each round times both (the order flips
             every round), a size's time is the slowest rank's mean over its calls, and the
             table gives the median over the rounds.
  ddp:       the step time of torch DDP training the Fashion-MNIST MLP (784-128-10, SGD), one
             model on each backend, same seed and batches; median over rounds of the mean
             step time.

Ranks come from torchrun-style variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or
from tests/net/netns.sh / braid-run (BRAID_RANK, BRAID_NRANKS, BRAID_ROOT; the store then
listens on BRAID_ROOT's port + 1). Rank 0 prints the table and appends rows to --csv.

  python3 perf/torch_bench.py allreduce [--min 8] [--max 64M] [--rounds 3] [--csv F] [--label L]
  python3 perf/torch_bench.py ddp [--steps 100] [--batch 64] [--rounds 3] [--csv F] [--label L]
"""
import argparse
import os
import statistics
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import braid_torch  # noqa: F401


def env_setup():
    if "RANK" not in os.environ and "BRAID_RANK" in os.environ:
        os.environ["RANK"] = os.environ["BRAID_RANK"]
        os.environ["WORLD_SIZE"] = os.environ["BRAID_NRANKS"]
        host, port = os.environ["BRAID_ROOT"].rsplit(":", 1)
        os.environ["MASTER_ADDR"] = host
        os.environ["MASTER_PORT"] = str(int(port) + 1)


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1].upper()] if s[-1].upper() in mult else int(s)


def time_calls(fn, iters, gloo):
    dist.barrier(group=gloo)
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    t = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)  # the slowest rank's mean
    return t.item()


def allreduce(args, gloo, rank, world):
    groups = {"braid": dist.group.WORLD, "gloo": gloo}
    w = torch.ones(2)
    for g in groups.values():  # first calls (connections, threads) before any timing
        for _ in range(100):
            dist.all_reduce(w, group=g)
    size = args.min
    rows = []
    while size <= args.max:
        n = max(1, size // 4)
        t = torch.arange(n, dtype=torch.float32) * (rank + 1) % 7
        iters = max(3, min(args.max_iters, int(args.budget * 200e6 / max(size, 1) / 10) + 1))
        if size <= 64 << 10:
            iters = max(iters, 50)
        times = {k: [] for k in groups}
        for r in range(args.rounds):
            order = list(groups) if r % 2 == 0 else list(groups)[::-1]
            for k in order:
                g = groups[k]
                for _ in range(min(iters, 20)):  # warm-up
                    dist.all_reduce(t, group=g)
                times[k].append(time_calls(lambda: dist.all_reduce(t, group=g), iters, gloo))
        med = {k: statistics.median(v) for k, v in times.items()}
        rows.append((n * 4, med["braid"], med["gloo"], min(times["braid"]), max(times["braid"]),
                     min(times["gloo"]), max(times["gloo"]), iters))
        size = args.max if size < args.max < size * args.factor else size * args.factor
    if rank == 0:
        print(f"# dist.all_reduce float32 SUM, {world} ranks, {args.label}: medians of "
              f"{args.rounds} rounds (slowest rank's mean per round)")
        print(f"{'bytes':>10} {'braid us':>10} {'gloo us':>10} {'braid GB/s':>10} "
              f"{'gloo GB/s':>10} {'braid/gloo bw':>13}")
        for b, tb, tg, *_ in rows:
            bw = lambda t: 2 * (world - 1) / world * b / t / 1e9 if world > 1 else 0.0  # noqa
            print(f"{b:>10} {tb * 1e6:>10.1f} {tg * 1e6:>10.1f} {bw(tb):>10.3f} {bw(tg):>10.3f} "
                  f"{tg / tb:>13.2f}")
        if args.csv:
            with open(args.csv, "a") as f:
                for b, tb, tg, bmin, bmax, gmin, gmax, iters in rows:
                    f.write(f"allreduce,{args.label},{world},{b},{tb:.9f},{tg:.9f},{bmin:.9f},"
                            f"{bmax:.9f},{gmin:.9f},{gmax:.9f},{iters}\n")


def ddp(args, gloo, rank, world):
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                    "torch"))
    from ddp_worker import DATA, load_idx, mlp
    import numpy as np

    x = torch.from_numpy(load_idx(f"{DATA}/train-images-idx3-ubyte.gz").astype(np.float32) / 255.0)
    y = torch.from_numpy(load_idx(f"{DATA}/train-labels-idx1-ubyte.gz").astype(np.int64))
    models = {"braid": DDP(mlp(), process_group=dist.group.WORLD),
              "gloo": DDP(mlp(), process_group=gloo)}
    opts = {k: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for k, m in models.items()}
    loss_fn = nn.CrossEntropyLoss()
    step = {k: 0 for k in models}

    def run(k):
        s = step[k]
        step[k] += 1
        lo = ((s * world + rank) * args.batch) % (x.shape[0] - args.batch)
        opts[k].zero_grad()
        loss_fn(models[k](x[lo:lo + args.batch]), y[lo:lo + args.batch]).backward()
        opts[k].step()

    times = {k: [] for k in models}
    for r in range(args.rounds):
        for k in (list(models) if r % 2 == 0 else list(models)[::-1]):
            for _ in range(10):
                run(k)
            times[k].append(time_calls(lambda: run(k), args.steps, gloo))
    med = {k: statistics.median(v) for k, v in times.items()}
    if rank == 0:
        print(f"# DDP step, MLP 784-128-10, batch {args.batch}/rank, {world} ranks, {args.label}: "
              f"median of {args.rounds} rounds x {args.steps} steps")
        print(f"braid {med['braid'] * 1e3:.3f} ms  gloo {med['gloo'] * 1e3:.3f} ms  "
              f"gloo/braid {med['gloo'] / med['braid']:.2f}  (braid {min(times['braid']) * 1e3:.3f}-"
              f"{max(times['braid']) * 1e3:.3f}, gloo {min(times['gloo']) * 1e3:.3f}-"
              f"{max(times['gloo']) * 1e3:.3f})")
        if args.csv:
            with open(args.csv, "a") as f:
                f.write(f"ddp,{args.label},{world},{args.batch},{med['braid']:.9f},"
                        f"{med['gloo']:.9f},{min(times['braid']):.9f},{max(times['braid']):.9f},"
                        f"{min(times['gloo']):.9f},{max(times['gloo']):.9f},{args.steps}\n")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["allreduce", "ddp"])
    p.add_argument("--min", type=parse_size, default=8)
    p.add_argument("--max", type=parse_size, default=64 << 20)
    p.add_argument("--factor", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-iters", type=int, default=200)
    p.add_argument("--budget", type=float, default=1.0, help="scales the calls per size")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--csv")
    p.add_argument("--label", default="")
    args = p.parse_args()
    env_setup()
    torch.set_num_threads(1)
    dist.init_process_group("braid", init_method="env://", timeout=timedelta(seconds=300))
    gloo = dist.new_group(backend="gloo", timeout=timedelta(seconds=300))
    rank, world = dist.get_rank(), dist.get_world_size()
    (allreduce if args.mode == "allreduce" else ddp)(args, gloo, rank, world)
    dist.barrier(group=gloo)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
