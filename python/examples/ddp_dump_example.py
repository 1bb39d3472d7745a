#!/usr/bin/env python3
"""A DDP training script instrumented with magic_dump, and the same script in one process, so that
magic-compare can judge the distributed run against the single-process one:

    /usr/bin/python3 python/examples/ddp_dump_example.py --out runs
    build/tools/magic-compare runs/ddp.dump runs/single.dump      # exit 0: every record agrees

Two steps of SGD on a small classifier, fp64, the batch of 16 split over 2 ranks (gloo on
127.0.0.1, started with torch.multiprocessing). At each step the dump holds each layer's output,
the loss and every parameter's gradient. docs/magic-dump-python.md explains each call.
"""

import argparse
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # python/magic_dump.py
from magic_dump import Dump, partial, shard  # noqa: E402

STEPS, BATCH, FEATURES, HIDDEN, CLASSES = 2, 16, 6, 10, 3


def make_model():
    torch.manual_seed(0)  # every process builds the same initial weights
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.Tanh(),
                               torch.nn.Linear(HIDDEN, CLASSES)).double()


def batch(step):
    generator = torch.Generator().manual_seed(100 + step)
    return (torch.randn(BATCH, FEATURES, generator=generator, dtype=torch.float64),
            torch.randint(0, CLASSES, (BATCH,), generator=generator))


def train(folder, rank=0, world=1):
    model = make_model()
    if world > 1:
        model = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    # One process: mesh []. DDP: mesh [dp=world], this rank at coordinate [rank].
    dump = Dump(folder, run=f"example-world{world}")
    # Each rank's rows of the batch are a shard along dim 0 (none on a single process).
    rows = [shard(0)] if world > 1 else None
    # Record the output of layers "0" and "2" (the two Linear layers) at every forward.
    with dump.watch_activations(model, ["0", "2"], placements=rows):
        for step in range(STEPS):
            dump.step = step
            inputs, labels = (t.tensor_split(world)[rank] for t in batch(step))
            loss = F.cross_entropy(model(inputs), labels)  # this rank's mean over its equal share
            # DDP averages gradients over ranks, and the ranks' mean losses average to the batch's.
            dump.record("loss", loss, kind="loss", placements=[partial("avg")] if world > 1 else None)
            optimizer.zero_grad()
            loss.backward()
            dump.record_gradients(model)  # DDP: reduced, replicated; names without "module."
            optimizer.step()
    dump.close()  # every rank writes its file; rank 0 then writes manifest.json


def ddp_rank(rank, world, port, folder):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        train(folder, rank, world)
    finally:
        dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for single.dump and ddp.dump")
    parser.add_argument("--world", type=int, default=2)
    args = parser.parse_args()
    train(os.path.join(args.out, "single.dump"))
    with socket.socket() as s:  # a free port for the ranks' rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(ddp_rank, args=(args.world, port, os.path.join(args.out, "ddp.dump")), nprocs=args.world)
    print(f"wrote {args.out}/single.dump and {args.out}/ddp.dump")


if __name__ == "__main__":
    main()
