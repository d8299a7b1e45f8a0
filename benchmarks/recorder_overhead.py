"""Recorder overhead: step time with the recorder / without, and bytes on disk per stats row.

Two identical copies of a model train on the same batches, one step each in turn (which one
goes first alternates), so that machine noise hits both alike: on this 2-vCPU VM two identical
models timed in alternating 50-step blocks differed by 0.65-1.37x from block to block, too much
to resolve a 5 % target. A round is `flush_every` steps of each, so every round pays one flush;
scheduled checkpoints and flight-ring samples are paid where they fall. Each round gives a
wall-clock ratio (total time with / without) and a CPU-time ratio (this process's user+system
time); medians and quartiles over rounds are reported. Everything is at defaults.

    .venv/bin/python benchmarks/recorder_overhead.py            # all three models
    .venv/bin/python benchmarks/recorder_overhead.py --model b --rounds 40
    .venv/bin/python benchmarks/recorder_overhead.py --torch-kernels   # without recorders/_fused
    .venv/bin/python benchmarks/recorder_overhead.py --without activations hash flight
    .venv/bin/python benchmarks/recorder_overhead.py --floor   # the cost of reading, alone
    .venv/bin/python benchmarks/recorder_overhead.py --no-floor   # the recorder, alone

(c) is nanoGPT's loop (`sample_runs/nanogpt.py`) on `sample_runs.models.TinyGPT` (vocabulary
256, context 32, width 64, 2 blocks, tied head): AdamW, warm-up + cosine, two micro-batches
of 8 sequences per step, `clip_grad_norm_(..., 1.0)`, `zero_grad(set_to_none=True)`, and an
eval loop (2 batches under `torch.no_grad()` / `model.eval()`) every 20 steps, on both sides.

`FloorReader` reads every tensor the recorder reads, once, with the same kernel, and keeps
nothing: no statistics, rows, hash, scalars or files. Its ratio is the least any recorder of
every tensor at every step can cost on this machine. By default a third copy of the model runs
with it in the same rounds (plain, floor, recorder, one step each, which goes first rotating),
so that the recorder's ratio and the floor's are measured together and their per-round
difference is printed; `--floor` times the floor alone, `--no-floor` the recorder alone.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from recorders import Recorder  # noqa: E402
from recorders import statistics as recorder_statistics  # noqa: E402
from recorders.statistics import _fusable  # noqa: E402
from sample_runs import nanogpt  # noqa: E402
from sample_runs.data import token_batches  # noqa: E402
from sample_runs.models import TinyGPT  # noqa: E402

# What --without switches off: recorder options, or (hash) the batch's content hash.
ABLATIONS = {
    "activations": {"activation_every": 10 ** 9},
    "flight": {"flight_ring": 0, "flight_every": 0},
    "hash": {},
}


class SeedCNN(nn.Module):
    """Seed 000's small CNN: two conv layers with LeakyReLU, ~0.42 M parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.act1 = nn.LeakyReLU(0.01)
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.act2 = nn.LeakyReLU(0.01)
        self.pool2 = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.act3 = nn.LeakyReLU(0.01)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.pool1(self.act1(self.conv1(x)))
        h = self.pool2(self.act2(self.conv2(h)))
        return self.fc2(self.act3(self.fc1(h.flatten(1))))


def deep_mlp() -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(8):
        layers += [nn.Linear(512, 512), nn.ReLU()]
    return nn.Sequential(*layers)


# (c): nanoGPT's loop on a small GPT (AdamW, warm-up + cosine, clip 1.0, accumulation 2, an
# eval loop every 20 steps).
GPT = nanogpt.LoopConfig(steps=10 ** 6, accumulation=2, batch=8, context=32, vocab=256,
                         eval_every=20, eval_batches=2)
_GPT_STEPS: dict[int, int] = {}  # id(optimizer) -> steps taken, for the schedule and the eval


def workload(name: str):
    g = torch.Generator().manual_seed(0)
    if name == "c":
        model = TinyGPT(vocab=GPT.vocab, context=GPT.context, width=64, heads=4, layers=2)
        data = token_batches(8 * GPT.accumulation + GPT.eval_batches, batch=GPT.batch,
                             context=GPT.context, vocab=GPT.vocab, seed=0)
        micro = data[:-GPT.eval_batches]
        batches = [micro[i:i + GPT.accumulation] for i in range(0, len(micro), GPT.accumulation)]
        return model, batches, data[-GPT.eval_batches:]
    if name == "a":
        model = SeedCNN()
        batches = [(torch.randn(64, 1, 28, 28, generator=g), torch.randint(0, 10, (64,), generator=g))
                   for _ in range(8)]
        return model, batches, nn.CrossEntropyLoss()
    model = deep_mlp()
    batches = [(torch.randn(256, 512, generator=g), torch.randn(256, 512, generator=g))
               for _ in range(8)]
    return model, batches, nn.MSELoss()


class FloorReader:
    """Reads what the recorder reads (leaf outputs, gradients before the optimizer step,
    parameters with their saved copies refilled, optimizer state), each once, and keeps
    nothing. With the fused kernel: one call per leaf output and per group of tensors, as the
    recorder makes; without it, one torch pass (`dot`, `_foreach_norm`, `_foreach_copy_`)."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self._params = [p for p in model.parameters()]
        self._saved = [p.detach().clone() for p in self._params]
        self._optimizer = optimizer
        self._handles = [m.register_forward_hook(self._read_output) for m in model.modules()
                         if next(m.children(), None) is None]
        self._handles.append(optimizer.register_step_pre_hook(self._read_grads))

    @staticmethod
    def _read(tensors: list[torch.Tensor], saved: list[torch.Tensor] | None = None) -> None:
        pairs = list(zip(tensors, saved or [None] * len(tensors)))
        if recorder_statistics._fused is not None:
            fused = [(t, s) for t, s in pairs if _fusable(t)]
            recorder_statistics._fused.moments_many(
                [(t.data_ptr(), t.numel(), 0 if s is None else s.data_ptr(), 0 if s is None else 4)
                 for t, s in fused])
            pairs = [(t, s) for t, s in pairs if not _fusable(t)]
        floats = [t for t, _ in pairs if t.is_floating_point()]
        if floats:
            torch._foreach_norm(floats)
        for t, _ in pairs:
            if not t.is_floating_point():
                torch.count_nonzero(t)
        refill = [(s, t) for t, s in pairs if s is not None]
        if refill:
            torch._foreach_copy_([s for s, _ in refill], [t for _, t in refill])

    def _read_output(self, module, args, output) -> None:
        self._read([output.detach()])

    def _read_grads(self, optimizer, args, kwargs) -> None:
        self._read([p.grad for p in self._params if p.grad is not None])

    def step(self, **batch) -> None:
        with torch.no_grad():
            self._read([p.detach() for p in self._params], self._saved)
            self._read([v for state in self._optimizer.state.values() for v in state.values()
                        if isinstance(v, torch.Tensor) and v.dim() > 0])
            self._read([t for t in batch.values() if isinstance(t, torch.Tensor)])

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()


def gpt_step(model, opt, micro_batches, held_out, rec=None, after_step=None) -> tuple[float, float]:
    """One optimizer step of (c) as nanoGPT takes it, with its eval loop every 20 steps;
    ``after_step(step, loss)`` runs after ``opt.step()``, before ``zero_grad`` (a logger)."""
    t0, c0 = time.perf_counter(), time.process_time()
    step = _GPT_STEPS.get(id(opt), 0)
    for group in opt.param_groups:
        group["lr"] = nanogpt.lr_at(step, GPT)
    if step % GPT.eval_every == 0:
        model.eval()
        with torch.no_grad():
            for x, y in held_out:
                nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        model.train()
    for x, y in micro_batches:
        loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        (loss / len(micro_batches)).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), GPT.clip)
    opt.step()
    if after_step is not None:
        after_step(step, loss)
    opt.zero_grad(set_to_none=True)
    _GPT_STEPS[id(opt)] = step + 1
    if rec is not None:
        rec.step(loss=loss, inputs=x, targets=y)
    return time.perf_counter() - t0, time.process_time() - c0


def train_step(model, opt, batch, loss_fn, rec=None) -> tuple[float, float]:
    """One training step (and its record): (wall seconds, CPU seconds of this process)."""
    if isinstance(batch[0], tuple):  # (c): micro-batches; `loss_fn` holds the eval batches
        return gpt_step(model, opt, batch, loss_fn, rec)
    t0, c0 = time.perf_counter(), time.process_time()
    x, y = batch
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    if rec is not None:
        rec.step(loss=loss, inputs=x, targets=y)
    return time.perf_counter() - t0, time.process_time() - c0


def measure(name: str, rounds: int, block: int, warmup: int, options: dict,
            floor: bool = False, recorder: bool = True) -> dict:
    """Times plain steps against `FloorReader` (``floor``) and `Recorder` (``recorder``) on
    fresh copies of one model, a step of each in turn (which goes first rotates), so that each
    ratio and the floor's come from the same rounds of the same process."""
    torch.manual_seed(0)
    base_model, batches, loss_fn = workload(name)
    sides = ["plain"] + (["floor"] if floor else []) + (["recorder"] if recorder else [])
    # Every side is a fresh copy: keeping the original for one side made that side's step time
    # differ by up to 30 % (allocation layout), recorder or not.
    models = {side: copy.deepcopy(base_model) for side in sides}
    # lr small enough that no copy diverges during the benchmark.
    if name == "c":
        opts = {side: nanogpt.make_optimizer(m, GPT) for side, m in models.items()}
    else:
        opts = {side: torch.optim.SGD(m.parameters(), lr=1e-3, momentum=0.9)
                for side, m in models.items()}
    n_params = sum(p.numel() for p in base_model.parameters())
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        run_dir = Path(tmp) / "run"
        recs = {"plain": None}
        if floor:
            recs["floor"] = FloorReader(models["floor"], opts["floor"])
            stack.callback(recs["floor"].close)
        if recorder:
            recs["recorder"] = stack.enter_context(
                Recorder(run_dir, models["recorder"], opts["recorder"], **options))
        for i in range(warmup):
            for side in sides:
                train_step(models[side], opts[side], batches[i % len(batches)], loss_fn,
                           recs[side])
        wall = {side: [] for side in sides}
        cpu = {side: [] for side in sides}
        for r in range(rounds):
            # Steps alternate one by one (which goes first rotates too), so that the machine's
            # slow phases, which last seconds on a shared VM, hit every side.
            round_wall, round_cpu = dict.fromkeys(sides, 0.0), dict.fromkeys(sides, 0.0)
            for i in range(block):
                batch = batches[(r * block + i) % len(batches)]
                first = (r * block + i) % len(sides)
                for side in sides[first:] + sides[:first]:
                    w, c = train_step(models[side], opts[side], batch, loss_fn, recs[side])
                    round_wall[side] += w
                    round_cpu[side] += c
            for side in sides:
                wall[side].append(round_wall[side])
                cpu[side].append(round_cpu[side])
        result = {"model": name, "options": options, "params": n_params, "rounds": rounds,
                  "block_steps": block,
                  "step_ms_without": statistics.median(wall["plain"]) / block * 1e3}
        for side in sides[1:]:
            result[side] = summary(wall[side], cpu[side], wall["plain"], cpu["plain"], block)
        if floor and recorder:
            result["recorder_minus_floor"] = _spread([(w - f) / p for w, f, p in zip(
                wall["recorder"], wall["floor"], wall["plain"])])
        if recorder:
            result["recorder"].update(_disk_use(run_dir, recs["recorder"].current_step))
    return result


def _disk_use(run_dir: Path, steps: int) -> dict:
    import pyarrow.parquet as pq
    stats_files = list((run_dir / "stats").glob("part-*.parquet"))
    stats_bytes = sum(f.stat().st_size for f in stats_files)
    rows = sum(pq.ParquetFile(f).metadata.num_rows for f in stats_files)
    other_bytes = sum(f.stat().st_size for sub in ("scalars", "events")
                      for f in (run_dir / sub).glob("part-*.parquet"))
    return {"recorded_steps": steps, "stats_rows": rows, "stats_bytes": stats_bytes,
            "bytes_per_row": stats_bytes / rows, "rows_per_step": rows / steps,
            "scalar_event_bytes_per_step": other_bytes / steps}


def _spread(values: list[float]) -> dict:
    q = statistics.quantiles(values, n=4)
    return {"median": statistics.median(values), "q1": q[0], "q3": q[2], "min": min(values),
            "max": max(values)}


def summary(wall: list[float], cpu: list[float], plain_wall: list[float],
            plain_cpu: list[float], block: int) -> dict:
    """One side's per-round ratios to the plain steps of the same rounds."""
    return {"ratio": _spread([w / p for w, p in zip(wall, plain_wall)]),
            "cpu_ratio": _spread([c / p for c, p in zip(cpu, plain_cpu)]),
            "step_ms": statistics.median(wall) / block * 1e3}


def _table_row(r: dict, side: str) -> str:
    s = r[side]
    ratio, cpu = s["ratio"], s["cpu_ratio"]
    return (f"| ({r['model']}) | {side} | {r['step_ms_without']:.2f} | {s['step_ms']:.2f} | "
            f"{ratio['median']:.3f} [{ratio['q1']:.3f}, {ratio['q3']:.3f}] "
            f"({ratio['min']:.3f}-{ratio['max']:.3f}) | {cpu['median']:.3f} [{cpu['q1']:.3f}, "
            f"{cpu['q3']:.3f}] | {s.get('bytes_per_row', math.nan):.1f} | "
            f"{s.get('rows_per_step', math.nan):.0f} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["a", "b", "c", "all"], default="all")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--block", type=int, default=50, help="steps of each model per round (= flush_every)")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--activation-every", type=int, default=1,
                        help="Recorder(activation_every=...); the default records every step")
    parser.add_argument("--torch-kernels", action="store_true",
                        help="measure with torch's kernels only, as an install without a C++ "
                             "compiler does (recorders/_fused.cpp not used)")
    parser.add_argument("--without", nargs="+", default=[], choices=sorted(ABLATIONS),
                        help="switch parts of the recorder off, to see what they cost")
    parser.add_argument("--floor", action="store_true",
                        help="time FloorReader (reading every tensor once, nothing else) alone, "
                             "without the recorder")
    parser.add_argument("--no-floor", action="store_true",
                        help="time the recorder alone, without FloorReader alongside")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    if args.torch_kernels:
        recorder_statistics._fused = None
    torch.set_num_threads(args.threads)
    names = ["a", "b", "c"] if args.model == "all" else [args.model]
    options = {} if args.activation_every == 1 else {"activation_every": args.activation_every}
    for part in args.without:
        options.update(ABLATIONS[part])
    if "hash" in args.without:
        add = recorder_statistics.MomentBatch.add
        recorder_statistics.MomentBatch.add = \
            lambda self, t, **kw: add(self, t, **{**kw, "hashed": False})
        recorder_statistics.MomentBatch.content_hash = lambda self, index: "00000000"
    results = [measure(n, args.rounds, args.block, args.warmup, options,
                       floor=not args.no_floor, recorder=not args.floor) for n in names]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    kernels = "torch kernels only" if recorder_statistics._fused is None else "fused kernel"
    print(f"torch {torch.__version__}, python {platform.python_version()}, "
          f"{platform.processor() or platform.machine()}, threads={args.threads}, "
          f"recorder options {options or 'defaults'}, {kernels}"
          + (f", without {' '.join(args.without)}" if args.without else ""))
    print("| model | what | step ms without | with | wall ratio median [q1, q3] (min-max) | "
          "CPU-time ratio median [q1, q3] | bytes/row | rows/step |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        for side in ("floor", "recorder"):
            if side in r:
                print(_table_row(r, side))
    for r in results:
        if "recorder_minus_floor" in r:
            d = r["recorder_minus_floor"]
            print(f"({r['model']}) recorder ratio - floor ratio, per round: median "
                  f"{d['median']:+.3f} [{d['q1']:+.3f}, {d['q3']:+.3f}]")


if __name__ == "__main__":
    main()
