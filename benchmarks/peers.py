"""Peers side by side: nanoGPT's loop on the GPT-style model (c) with nothing, with postmortem's
Recorder, with ``wandb.watch(model, log="all", log_freq=1)`` (offline) and with TensorBoard's
``SummaryWriter.add_histogram`` of every parameter and gradient at every step.

Four identical copies of model (c) (``recorder_overhead.workload("c")``: TinyGPT, AdamW, warm-up
+ cosine, two micro-batches, ``clip_grad_norm_(..., 1.0)``, an eval loop every 20 steps) train
on the same batches in one process, one step each in turn, the order rotating every step, so
that the shared machine's slow phases hit all four alike. A round is `block` steps of each
(block = the Recorder's flush_every, so each round pays one flush); each round gives every
side's wall time over the plain side's, and its CPU time (this process's user+system) over the
plain side's; medians and quartiles over rounds are printed. Every side but the recorder's
calls ``loss.item()`` after the optimizer step and logs the loss its own way (the plain side
only reads it; the Recorder is given the loss tensor). wandb runs offline
(``WANDB_MODE=offline``, no network) in a temporary directory; its writer is a separate
process (wandb-core) whose CPU time the CPU ratio does not include, the wall ratio does.

    .venv/bin/python benchmarks/peers.py [--rounds 12] [--block 50]

wandb and tensorboard come with the dev extra (``pip install -e '.[dev]'``).
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import statistics
import sys
import tempfile
import warnings
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from recorder_overhead import GPT, gpt_step, workload  # noqa: E402
from recorders import Recorder  # noqa: E402
from sample_runs import nanogpt  # noqa: E402

SIDES = ("plain", "postmortem", "wandb", "tensorboard")


class Side:
    """One copy of the model, its optimizer and its logger."""

    def __init__(self, name: str, model: nn.Module, tmp: Path) -> None:
        self.name, self.model = name, model
        self.opt = nanogpt.make_optimizer(model, GPT)
        self.recorder = self.writer = self.run = None
        if name == "postmortem":
            self.recorder = Recorder(tmp / "postmortem", model, self.opt).__enter__()
        elif name == "wandb":
            import wandb
            self.run = wandb.init(project="peers", dir=str(tmp), mode="offline")
            wandb.watch(model, log="all", log_freq=1)
        elif name == "tensorboard":
            from torch.utils.tensorboard import SummaryWriter
            self.writer = SummaryWriter(str(tmp / "tensorboard"))

    def train_step(self, micro_batches, held_out) -> tuple[float, float]:
        """One optimizer step as nanoGPT takes it: (wall seconds, CPU seconds)."""
        return gpt_step(self.model, self.opt, micro_batches, held_out, self.recorder,
                        after_step=None if self.recorder is not None else self._log)

    def _log(self, step: int, loss) -> None:
        """What the side logs after the optimizer step (gradients are gone after zero_grad)."""
        value = loss.item()
        if self.writer is not None:
            for name, p in self.model.named_parameters():
                self.writer.add_histogram(name, p, step)
                if p.grad is not None:
                    self.writer.add_histogram(f"{name}.grad", p.grad, step)
            self.writer.add_scalar("loss", value, step)
        elif self.run is not None:
            self.run.log({"loss": value}, step=step)

    def close(self) -> None:
        if self.recorder is not None:
            self.recorder.__exit__(None, None, None)
        if self.run is not None:
            self.run.finish()
        if self.writer is not None:
            self.writer.close()


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(values, n=4)
    return q[0], statistics.median(values), q[2]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--block", type=int, default=50, help="steps of each side per round")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (one: 2 threads on a loaded 2-CPU VM spin)")
    args = parser.parse_args(argv)
    os.environ["WANDB_MODE"] = "offline"  # never the network
    os.environ.setdefault("WANDB_SILENT", "true")
    warnings.filterwarnings("ignore", module="wandb")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    base, batches, held_out = workload("c")
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        sides = [Side(name, copy.deepcopy(base), Path(tmp)) for name in SIDES]
        try:
            for i in range(args.warmup):
                for side in sides:
                    side.train_step(batches[i % len(batches)], held_out)
            wall = {s.name: [] for s in sides}
            cpu = {s.name: [] for s in sides}
            for r in range(args.rounds):
                total = {s.name: [0.0, 0.0] for s in sides}
                for i in range(args.block):
                    batch = batches[(r * args.block + i) % len(batches)]
                    shift = (r * args.block + i) % len(sides)
                    for side in sides[shift:] + sides[:shift]:
                        w, c = side.train_step(batch, held_out)
                        total[side.name][0] += w
                        total[side.name][1] += c
                for name, (w, c) in total.items():
                    wall[name].append(w)
                    cpu[name].append(c)
        finally:
            for side in sides:
                side.close()
    load_after = os.getloadavg()
    import tensorboard
    import wandb
    print(f"torch {torch.__version__}, wandb {wandb.__version__}, tensorboard "
          f"{tensorboard.__version__}, python {platform.python_version()}, threads={args.threads}, "
          f"{args.rounds} rounds x {args.block} steps per side, "
          f"{sum(p.numel() for p in base.parameters()):,} parameters")
    print(f"load average (1, 5, 15 min) before {tuple(round(x, 2) for x in load_before)}, "
          f"after {tuple(round(x, 2) for x in load_after)} on {os.cpu_count()} CPUs")
    print("| side | step ms median | wall ratio median [q1, q3] | CPU-time ratio median [q1, q3] |")
    print("| --- | --- | --- | --- |")
    for name in SIDES:
        ratios = [w / p for w, p in zip(wall[name], wall["plain"])]
        cpu_ratios = [c / p for c, p in zip(cpu[name], cpu["plain"])]
        (q1, med, q3), (c1, cmed, c3) = quartiles(ratios), quartiles(cpu_ratios)
        step_ms = statistics.median(wall[name]) / args.block * 1e3
        print(f"| {name} | {step_ms:.2f} | {med:.2f} [{q1:.2f}, {q3:.2f}] | "
              f"{cmed:.2f} [{c1:.2f}, {c3:.2f}] |")


if __name__ == "__main__":
    main()
