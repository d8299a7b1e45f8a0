"""One rank of a small DDP job (gloo, CPU) for tests/postmortem/test_ranks.py, started by torchrun.

    python -m torch.distributed.run --standalone --nproc_per_node=2 ddp_worker.py RUN_DIR BAD_RANK BAD_STEP STEPS

Every rank records into RUN_DIR (the recorder picks its rank's sub-directory); rank BAD_RANK
gets a NaN in its batch at step BAD_STEP, which the gradient all-reduce carries to every rank.
"""
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from recorders import Recorder


def main(run_dir: str, bad_rank: int, bad_step: int, steps: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)  # the same initial weights on every rank, as DDP expects
    model = DistributedDataParallel(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    batches = torch.Generator().manual_seed(100 + rank)  # each rank its own shard
    try:
        with Recorder(run_dir, model, optimizer, flush_every=5) as rec:
            for step in range(steps):
                x = torch.randn(16, 8, generator=batches)
                y = x.sum(dim=1, keepdim=True)
                if rank == bad_rank and step == bad_step:
                    x[3, 2] = float("nan")
                optimizer.zero_grad()
                loss = nn.functional.mse_loss(model(x), y)
                loss.backward()
                optimizer.step()
                rec.step(loss=loss, inputs=x, targets=y)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
