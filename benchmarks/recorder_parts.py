"""Where the recorder's time goes: thread CPU time per step of each of its entry points.

A plain copy of the model, one read by the benchmark's `FloorReader` (reading every recorded
tensor once, nothing else) and a recorded one train alternately, one torch thread. The
recorder's hooks and step, and the flush, are wrapped with a `time.thread_time()` timer, which
the other processes of a shared machine disturb less than the wall clock does. The script
prints each part's milliseconds and calls per step, and what the recorder adds beyond the floor
against what the 0.02 target leaves (0.02 of the plain step). `measure` and `flush` are parts
of `Recorder.step`.

    .venv/bin/python benchmarks/recorder_parts.py --model c --steps 300
"""

from __future__ import annotations

import argparse
import collections
import copy
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import recorder_overhead as overhead  # noqa: E402
from recorders import Recorder, buffer, measurer, recorder  # noqa: E402

_PARTS = ((measurer.StepMeasurer, ("on_activation", "on_grad_accumulated", "_on_backward_end",
                                   "before_optimizer_step", "measure", "scalar_rows")),
          (buffer.StepBuffer, ("flush",)),
          (recorder.Recorder, ("_scheduled_state", "step")))
_INSIDE_STEP = {"measure", "scalar_rows", "flush", "_scheduled_state"}


def _timed(cls, name: str, totals: collections.Counter, calls: collections.Counter) -> None:
    method = getattr(cls, name)

    def timed(*args, **kwargs):
        start = time.thread_time()
        try:
            return method(*args, **kwargs)
        finally:
            totals[name] += time.thread_time() - start
            calls[name] += 1

    setattr(cls, name, timed)


def _optimizer(name: str, model: torch.nn.Module) -> torch.optim.Optimizer:
    if name == "c":
        return overhead.nanogpt.make_optimizer(model, overhead.GPT)
    return torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["a", "b", "c"], default="c")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    args = parser.parse_args(argv)
    totals, calls = collections.Counter(), collections.Counter()
    for cls, names in _PARTS:
        for name in names:
            _timed(cls, name, totals, calls)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, batches, loss_fn = overhead.workload(args.model)
    plain, floored = copy.deepcopy(model), copy.deepcopy(model)
    opt, plain_opt = _optimizer(args.model, model), _optimizer(args.model, plain)
    floor_opt = _optimizer(args.model, floored)
    floor = overhead.FloorReader(floored, floor_opt)
    cpu = {"plain": 0.0, "floor": 0.0, "recorder": 0.0}
    with tempfile.TemporaryDirectory() as tmp, Recorder(Path(tmp) / "run", model, opt) as rec:
        for i in range(args.warmup):
            overhead.train_step(model, opt, batches[i % len(batches)], loss_fn, rec)
            overhead.train_step(floored, floor_opt, batches[i % len(batches)], loss_fn, floor)
        totals.clear()
        calls.clear()
        for i in range(args.steps):
            batch = batches[i % len(batches)]
            cpu["plain"] += overhead.train_step(plain, plain_opt, batch, loss_fn)[1]
            cpu["floor"] += overhead.train_step(floored, floor_opt, batch, loss_fn, floor)[1]
            cpu["recorder"] += overhead.train_step(model, opt, batch, loss_fn, rec)[1]
    floor.close()
    outside = sum(t for name, t in totals.items() if name not in _INSIDE_STEP)
    ms = {side: total / args.steps * 1e3 for side, total in cpu.items()}
    print(f"({args.model}) CPU ms per step: plain {ms['plain']:.2f}, floor {ms['floor']:.2f}, "
          f"recorded {ms['recorder']:.2f}; recorded - floor {ms['recorder'] - ms['floor']:.2f} "
          f"(the target leaves {0.02 * ms['plain']:.2f}); the parts below, "
          f"without double counting: {outside / args.steps * 1e3:.2f}")
    for name in totals:
        print(f"{name:24s} {totals[name] / args.steps * 1e3:7.3f} ms/step "
              f"{calls[name] / args.steps:6.1f} calls/step")


if __name__ == "__main__":
    main()
