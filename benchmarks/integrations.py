"""Integration overhead: step time of a Hugging Face Trainer run with the PostmortemCallback /
without it, on the tiny GPT-2 of the integration tests.

A round is two `Trainer.train()` calls on fresh copies of the same model and data, one with
the callback (every Recorder option at its default) and one without, in alternating order, in
one process, so that machine noise hits both alike. A step is timed from `on_step_begin` to
`on_step_end` (forward, backward, clipping, optimizer step, the callback's `rec.step`, scheduler,
`zero_grad`); a round's ratio is the median step time with / without, and the whole `train()`
call's time with / without (Trainer set-up, the Recorder's set-up and final flush included).
Medians and quartiles over rounds are reported.

    .venv/bin/python benchmarks/integrations.py                     # print the table
    .venv/bin/python benchmarks/integrations.py --write-docs        # also update docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "recorders" / "integrations"))
import transformers  # noqa: E402
from transformers import Trainer, TrainerCallback, TrainingArguments  # noqa: E402

from hf_runs import CountingSequences, tiny_gpt2  # noqa: E402
from recorders.integrations.transformers import PostmortemCallback  # noqa: E402

DOCS = ROOT / "docs" / "benchmarks.md"
SECTION = "## Integrations: Hugging Face Trainer callback overhead"


class StepTimer(TrainerCallback):
    def __init__(self) -> None:
        self.times: list[float] = []
        self._start = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(time.perf_counter() - self._start)


def one_run(folder: Path, steps: int, recorded: bool) -> tuple[float, float]:
    """(median step seconds, whole train() seconds) of one Trainer run."""
    timer = StepTimer()
    callbacks = [timer] + ([PostmortemCallback(folder / "run", overwrite=True)] if recorded else [])
    args = TrainingArguments(output_dir=str(folder / "trainer"), per_device_train_batch_size=8,
                             max_steps=steps, learning_rate=5e-3, logging_steps=10 ** 6,
                             save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
                             seed=0)
    trainer = Trainer(model=tiny_gpt2(), args=args, train_dataset=CountingSequences(8 * steps),
                      callbacks=callbacks)
    start = time.perf_counter()
    trainer.train()
    return statistics.median(timer.times), time.perf_counter() - start


def quartiles(values: list[float]) -> str:
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return f"{median:.3f} [{q1:.3f}, {q3:.3f}] ({min(values):.3f}–{max(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=64, help="optimizer steps per train() call")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (two contend badly with anything else on 2 cores)")
    parser.add_argument("--write-docs", action="store_true",
                        help=f"replace the '{SECTION}' section of docs/benchmarks.md")
    options = parser.parse_args()
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(options.threads)
    step_ratios, run_ratios, with_ms, without_ms = [], [], [], []
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        one_run(Path(tmp), 4, True)  # warm-up: imports, first-call costs
        one_run(Path(tmp), 4, False)
        for r in range(options.rounds):
            order = (True, False) if r % 2 == 0 else (False, True)
            results = {recorded: one_run(Path(tmp), options.steps, recorded) for recorded in order}
            (step_on, run_on), (step_off, run_off) = results[True], results[False]
            step_ratios.append(step_on / step_off)
            run_ratios.append(run_on / run_off)
            with_ms.append(step_on * 1e3)
            without_ms.append(step_off * 1e3)
            print(f"round {r}: step {step_off * 1e3:.2f} -> {step_on * 1e3:.2f} ms "
                  f"({step_on / step_off:.3f}), train() {run_off:.2f} -> {run_on:.2f} s")
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    code = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h (%s)"],
                          capture_output=True, text=True).stdout.strip() or "unknown"
    section = f"""{SECTION}

`benchmarks/integrations.py` trains the integration tests' tiny GPT-2 (2 layers, `n_embd` 64,
4 heads, vocabulary 64, sequences of 16 tokens, 105,216 parameters; `tests/recorders/
integrations/hf_runs.py`) with the Hugging Face `Trainer` (AdamW, lr 5e-3 linear decay,
`max_grad_norm` 1.0, batches of 8, no gradient accumulation) for {options.steps} optimizer steps,
once with `PostmortemCallback` at the Recorder's defaults and once without, alternating which
goes first, {options.rounds} rounds in one process. A step is timed from `on_step_begin` to
`on_step_end`; a round's ratio is the median step time with / without. Code: commit {code}.

    .venv/bin/python benchmarks/integrations.py --rounds {options.rounds} --steps {options.steps} --threads {options.threads} --write-docs

| measured {when} | median [q1, q3] (min–max) over rounds |
| --- | --- |
| step ms without the callback | {statistics.median(without_ms):.2f} |
| step ms with the callback | {statistics.median(with_ms):.2f} |
| step-time ratio with / without | {quartiles(step_ratios)} |
| whole `train()` ratio (set-up and final flush included) | {quartiles(run_ratios)} |

Machine: {platform.machine()}, {os.cpu_count()} cores, {torch.get_num_threads()} torch thread(s),
torch {torch.__version__}, transformers {transformers.__version__}, Python
{platform.python_version()}; load average {load_before:.1f} before and {os.getloadavg()[0]:.1f}
after the run (other work shares the machine: steps without the callback took
{min(without_ms):.1f}–{max(without_ms):.1f} ms from round to round).
"""
    print(section)
    if options.write_docs:
        write_docs_section(DOCS, section)


def write_docs_section(docs: Path, section: str) -> None:
    """Replace only this benchmark's section of the shared file (re-read right before)."""
    text = docs.read_text()
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == SECTION), None)
    if start is None:
        docs.write_text(text.rstrip("\n") + "\n\n" + section)
        return
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    docs.write_text("".join(lines[:start]) + section + "\n" + "".join(lines[end:]))


if __name__ == "__main__":
    main()
