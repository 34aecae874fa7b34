"""torch DDP training of the Fashion-MNIST MLP (784-128-10) on the braid default group and,
in the same processes, on a Gloo group: same initial weights (seed 0), same batches (rank r of
W takes batch s*W + r at step s), same optimizer. Writes each step's local loss for both,
whether the braid model's parameters are bit-identical across ranks, and the largest
difference between the braid and Gloo parameters. argv: steps batch."""
import gzip
import json
import os
import struct
import sys
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import braid_torch  # noqa: F401

DATA = os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")


def load_idx(path):
    with gzip.open(path, "rb") as f:
        magic = struct.unpack(">I", f.read(4))[0]
        dims = [struct.unpack(">I", f.read(4))[0] for _ in range(magic & 0xFF)]
        return np.frombuffer(f.read(), dtype=np.uint8).reshape(dims)


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))


def main():
    steps, batch = int(sys.argv[1]), int(sys.argv[2])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("braid", init_method="env://", timeout=timedelta(seconds=120))
    gloo = dist.new_group(backend="gloo")
    x = torch.from_numpy(load_idx(f"{DATA}/train-images-idx3-ubyte.gz").astype(np.float32) / 255.0)
    x = (x - 0.2860) / 0.3530
    y = torch.from_numpy(load_idx(f"{DATA}/train-labels-idx1-ubyte.gz").astype(np.int64))
    models = {"braid": DDP(mlp(), process_group=dist.group.WORLD),
              "gloo": DDP(mlp(), process_group=gloo)}
    opts = {k: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for k, m in models.items()}
    losses = {k: [] for k in models}
    loss_fn = nn.CrossEntropyLoss()
    for s in range(steps):
        lo = ((s * world + rank) * batch) % (x.shape[0] - batch)
        xb, yb = x[lo:lo + batch], y[lo:lo + batch]
        for k, m in models.items():
            opts[k].zero_grad()
            loss = loss_fn(m(xb), yb)
            loss.backward()
            opts[k].step()
            losses[k].append(loss.item())
    flat = {k: torch.cat([p.detach().reshape(-1) for p in m.parameters()])
            for k, m in models.items()}
    gathered = [torch.empty_like(flat["braid"]) for _ in range(world)]
    dist.all_gather(gathered, flat["braid"], group=gloo)
    res = {"losses": losses,
           "identical_across_ranks": all(torch.equal(g, gathered[0]) for g in gathered),
           "param_maxdiff_vs_gloo": (flat["braid"] - flat["gloo"]).abs().max().item()}
    with open(os.environ["BRAID_TEST_OUT"], "w") as f:
        json.dump(res, f)
    dist.barrier(group=gloo)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
