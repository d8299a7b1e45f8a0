"""`python -m sample_runs list | make NAME --out DIR | make-all --out DIR [--subset small] [--arch A,B] | samples`."""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

from .scenarios import (
    COMMITTED_SAMPLES,
    SAMPLES_DIR,
    SCENARIOS,
    ScenarioError,
    make,
    make_committed_samples,
    scenario_names,
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sample_runs", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    listing = sub.add_parser("list", help="list the scenarios")
    listing.add_argument("--subset", choices=["small"])
    one = sub.add_parser("make", help="train one scenario into --out")
    one.add_argument("name")
    one.add_argument("--out", required=True, type=Path, help="run directory to write")
    every = sub.add_parser("make-all", help="train every scenario into --out/NAME")
    every.add_argument("--out", required=True, type=Path, help="folder that receives one run directory per scenario")
    every.add_argument("--subset", choices=["small"])
    every.add_argument("--arch", type=lambda text: set(text.split(",")), metavar="A,B",
                       help="only these model families (the `arch` of `list`), e.g. a round's new ones")
    sub.add_parser("samples", help="regenerate the runs committed in sample_runs/<name>/")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "list":
        for name in scenario_names(args.subset):
            s = SCENARIOS[name]
            print(f"{name}\t{s.family}\t{s.arch}\tseed={s.seed}" + ("\theld_out" if s.held_out else ""))
        return 0
    warnings.simplefilter("ignore")  # the recorder's warnings about NaN runs are expected here
    if args.command == "make":
        if args.name not in SCENARIOS:
            print(f"error: unknown scenario {args.name!r}; see `python -m sample_runs list`", file=sys.stderr)
            return 2
        try:
            expected = make(args.name, args.out)
        except ScenarioError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"{args.name}: {expected.verdict} -> {args.out}")
        return 0
    if args.command == "samples":
        for name, expected in make_committed_samples().items():
            print(f"{SAMPLES_DIR / name}: {COMMITTED_SAMPLES[name]} {expected.verdict}")
        return 0
    names = [name for name in scenario_names(args.subset) if args.arch is None or SCENARIOS[name].arch in args.arch]
    unknown = (args.arch or set()) - {s.arch for s in SCENARIOS.values()}
    if unknown:
        print(f"error: unknown arch {', '.join(sorted(unknown))}; see `python -m sample_runs list`", file=sys.stderr)
        return 2
    failed = []
    for i, name in enumerate(names, 1):
        started = time.monotonic()
        try:
            expected = make(name, args.out / name)
        except ScenarioError as exc:  # keep going: one broken scenario must not cost the others
            failed.append(name)
            print(f"[{i}/{len(names)}] error: {exc}", file=sys.stderr, flush=True)
            continue
        print(f"[{i}/{len(names)}] {name}: {expected.verdict} ({time.monotonic() - started:.1f} s)", flush=True)
    if failed:
        print(f"error: {len(failed)} scenario(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
