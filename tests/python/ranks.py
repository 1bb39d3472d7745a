"""Start torch.distributed ranks as processes (torch.multiprocessing spawn, gloo on 127.0.0.1 at a
free port; not torchrun, whose Debian build crashes on Python 3.11) and run scenarios on them.

Several scenarios share one start, because starting a rank (importing torch) costs far more than
the tiny steps it runs.
"""

import datetime
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_on_ranks(world, scenarios):
    """Run each (function, kwargs) of `scenarios`, in order, as function(rank, world, **kwargs) on
    `world` ranks of one gloo group; a rank's exception fails the call."""
    mp.spawn(_rank_main, args=(world, free_port(), scenarios), nprocs=world, join=True)


def _rank_main(rank, world, port, scenarios):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    torch.set_num_threads(1)  # the CI machine has 2 cores for all ranks
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=120))
    try:
        for function, kwargs in scenarios:
            function(rank, world, **kwargs)
    finally:
        dist.destroy_process_group()
