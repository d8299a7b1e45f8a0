"""Runs of distributed jobs: one recorded sub-directory per rank (`rank-00000`, `rank-00001`...).

`analyze_ranks` analyses every rank and names the one that went bad first. In data-parallel
training a NaN in one rank's batch reaches every rank within the same step through the gradient
all-reduce, so the step alone often ties. What breaks the tie is *what* was non-finite: a rank's
batch, activations and loss are its own, while gradients (and the parameters, updates and
optimizer state the step derives from them) are the same on every rank after the all-reduce.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.compute as pc

from .analysis import JSON_SCHEMA_VERSION, Analysis, analyze
from .exceptions import PostmortemError, RunDirectoryError
from .loading import Run, load_run
from .ranking import CAUSAL_ORDER
from .scalars import is_loss

__all__ = ["Origin", "RankAnalysis", "RankResult", "Spread", "analyze_ranks", "is_multi_rank",
           "one_line_error", "rank_dirs", "rank_run_dir", "recorded_steps", "worst_verdict"]

RANK_DIR = re.compile(r"^rank-(\d+)$")
OWN_ROLES = ("input", "target", "activation")  # with the losses: what each rank computes alone
_SEVERITY = {"diverged": 0, "not_learning": 1, "healthy": 2}
_RUN_FOLDERS = ("stats", "scalars")


def rank_dirs(path: str | Path) -> dict[int, Path]:
    """The rank sub-directories of `path`, by rank number."""
    path = Path(path)
    if not path.is_dir():
        return {}
    found = {}
    for child in path.iterdir():
        match = RANK_DIR.match(child.name)
        if match and child.is_dir() and not child.is_symlink():
            found[int(match.group(1))] = child
    return dict(sorted(found.items()))


def is_multi_rank(path: str | Path) -> bool:
    """Whether `path` is the parent of a distributed job's rank directories (and no run itself)."""
    path = Path(path)
    return not any((path / folder).is_dir() for folder in _RUN_FOLDERS) and bool(rank_dirs(path))


def rank_run_dir(path: str | Path, rank: int) -> Path:
    """Rank `rank`'s directory below `path`; RunDirectoryError when the job has no such rank."""
    ranks = rank_dirs(path)
    if rank not in ranks:
        known = ", ".join(map(str, ranks)) if ranks else "none: it is not a multi-rank run"
        raise RunDirectoryError(f"{path} has no rank {rank} (ranks recorded: {known})")
    return ranks[rank]


def one_line_error(exc: BaseException) -> str:
    """An exception as one line; errors we did not foresee keep their type's name."""
    message = " ".join(str(exc).split()) or type(exc).__name__
    return message if isinstance(exc, (PostmortemError, OSError)) else f"{type(exc).__name__}: {message}"


def worst_verdict(verdicts) -> str | None:
    ordered = sorted((v for v in verdicts if v in _SEVERITY), key=_SEVERITY.get)
    return ordered[0] if ordered else None


def recorded_steps(run: Run) -> int:
    """Distinct steps of a run, from its scalars or, when a crash left none, its statistics."""
    steps = run.scalars()["step"].unique()
    return len(steps if len(steps) else run.stats(columns=["step"])["step"].unique())


@dataclass(frozen=True)
class RankResult:
    """One rank: its analysis, or the one-line error that kept it from being analysed."""

    rank: int
    path: Path
    analysis: Analysis | None
    error: str | None = None
    # (role, name) of its own series non-finite at its first non-finite step ("scalar": a loss).
    own_nonfinite: tuple[tuple[str, str], ...] = ()

    @property
    def manifest(self) -> dict:
        manifest = self.analysis.run.manifest if self.analysis is not None else {}
        return manifest if isinstance(manifest, dict) else {}

    @property
    def distributed(self) -> dict:
        info = self.manifest.get("distributed")
        return info if isinstance(info, dict) else {}

    @property
    def first_step(self) -> int | None:
        first = self.analysis.first_nonfinite if self.analysis is not None else None
        return None if first is None else first.step

    @property
    def onset_step(self) -> int | None:
        onset = self.analysis.onset if self.analysis is not None else None
        return None if onset is None else onset.step

    def to_json(self) -> dict:
        analysis, first = self.analysis, self.analysis and self.analysis.first_nonfinite
        return {
            "rank": self.rank,
            "path": str(self.path),
            "host": self.manifest.get("host"),
            "local_rank": self.distributed.get("local_rank"),
            "world_size": self.distributed.get("world_size"),
            "status": self.manifest.get("status"),
            "verdict": analysis.verdict if analysis else None,
            "onset_step": self.onset_step,
            "first_nonfinite": None if not first else {
                "step": first.step, "tensor": first.tensor, "role": first.role, "key": first.key},
            "own_nonfinite": [{"role": role, "name": name} for role, name in self.own_nonfinite],
            "labels": [f.label for f in analysis.findings] if analysis else [],
            "steps": recorded_steps(analysis.run) if analysis else None,
            "error": self.error,
        }


@dataclass(frozen=True)
class Spread:
    """When one rank first showed the anomaly, relative to the first rank."""

    rank: int
    step: int
    lag_steps: int
    own: bool  # its own values (batch, activations, loss) went bad, not only the shared ones


@dataclass(frozen=True)
class Origin:
    """The rank that showed the anomaly first, and how that was decided."""

    rank: int
    step: int
    by: str  # "first_nonfinite" or "onset"
    own: bool
    tied: tuple[int, ...]  # other ranks that cannot be told apart from it


@dataclass
class RankAnalysis:
    """Every rank of a distributed run, the first rank to go bad and how it spread."""

    path: Path
    ranks: list[RankResult]
    origin: Origin | None
    spread: list[Spread]
    warnings: list[str]

    @property
    def analysed(self) -> list[RankResult]:
        return [r for r in self.ranks if r.analysis is not None]

    @property
    def verdict(self) -> str:
        return worst_verdict(r.analysis.verdict for r in self.analysed)

    @property
    def labels(self) -> set[str]:
        """Verdicts, errors and warnings of every rank: what `--fail-on` reads (notes are not)."""
        return {label for r in self.analysed
                for label in (r.analysis.verdict, *(f.label for f in r.analysis.significant))}

    @property
    def shown(self) -> RankResult:
        """The rank whose full report stands for the run: the first to go bad, else the worst."""
        if self.origin is not None:
            return next(r for r in self.ranks if r.rank == self.origin.rank)
        return min(self.analysed, key=lambda r: (_SEVERITY[r.analysis.verdict], r.rank))

    def to_json(self) -> dict:
        origin = None
        if self.origin is not None:
            origin = {"rank": self.origin.rank, "step": self.origin.step, "by": self.origin.by,
                      "own": self.origin.own, "tied_with": list(self.origin.tied)}
        return {
            "schema_version": JSON_SCHEMA_VERSION,
            "run": str(self.path),
            "verdict": self.verdict,
            "ranks_recorded": len(self.ranks),
            "origin": origin,
            "spread": [{"rank": s.rank, "step": s.step, "lag_steps": s.lag_steps, "own": s.own}
                       for s in self.spread],
            "ranks": [r.to_json() for r in self.ranks],
            "shown_rank": self.shown.rank,
            "analysis": self.shown.analysis.to_json(),
            "warnings": list(self.warnings),
        }


def analyze_ranks(path: str | Path) -> RankAnalysis:
    """Analyse every rank below `path` (see `is_multi_rank`); a rank that cannot be read is a
    row with its error. RunDirectoryError when no rank can be analysed."""
    path = Path(path)
    ranks = []
    for rank, folder in rank_dirs(path).items():
        try:
            analysis = analyze(load_run(folder))
        except Exception as exc:  # noqa: BLE001 - one unreadable rank must not hide the others
            ranks.append(RankResult(rank, folder, None, error=one_line_error(exc)))
            continue
        first = analysis.first_nonfinite
        own = _own_nonfinite(analysis.run, first.step) if first is not None else ()
        ranks.append(RankResult(rank, folder, analysis, own_nonfinite=own))
    if not any(r.analysis is not None for r in ranks):
        errors = "; ".join(f"rank {r.rank}: {r.error}" for r in ranks) or "no rank directories"
        raise RunDirectoryError(f"no rank of {path} could be analysed ({errors})")
    origin, spread = _origin(ranks)
    return RankAnalysis(path=path, ranks=ranks, origin=origin, spread=spread,
                        warnings=_rank_warnings(ranks))


def _own_nonfinite(run: Run, step: int) -> tuple[tuple[str, str], ...]:
    """(role, name) of the rank's own series (batch, activations, losses) non-finite at `step`,
    in the order data flows through a step."""
    found = set()
    for batch in run.stats_batches(["step", "role", "name", "nonfinite"], roles=list(OWN_ROLES)):
        bad = batch.filter(pc.and_(pc.equal(batch.column("step"), step),
                                   pc.greater(pc.fill_null(batch.column("nonfinite"), 0), 0)))
        found.update(zip(bad.column("role").to_pylist(), bad.column("name").to_pylist()))
    scalars = run.scalars()
    at_step = scalars[(scalars["step"] == step) & ~np.isfinite(scalars["value"])]
    found.update(("scalar", str(name)) for name in at_step["name"] if is_loss(str(name)))
    return tuple(sorted(found, key=lambda item: (CAUSAL_ORDER.get(item[0], 9), item[1])))


def _origin(ranks: list[RankResult]) -> tuple[Origin | None, list[Spread]]:
    """First by the first non-finite value (own values before shared ones), else by onset."""
    analysed = [r for r in ranks if r.analysis is not None]
    nonfinite = [r for r in analysed if r.first_step is not None]
    if nonfinite:
        by, keyed = "first_nonfinite", [(r.first_step, not r.own_nonfinite, r) for r in nonfinite]
    else:
        diverged = [r for r in analysed if r.onset_step is not None]
        if not diverged:
            return None, []
        by, keyed = "onset", [(r.onset_step, False, r) for r in diverged]
    keyed.sort(key=lambda item: (item[0], item[1], item[2].rank))
    step, shared, first = keyed[0]
    tied = tuple(r.rank for s, sh, r in keyed[1:] if (s, sh) == (step, shared))
    origin = Origin(rank=first.rank, step=step, by=by, own=not shared, tied=tied)
    spread = [Spread(rank=r.rank, step=s, lag_steps=s - step, own=not sh) for s, sh, r in keyed]
    return origin, spread


def _rank_warnings(ranks: list[RankResult]) -> list[str]:
    warnings = [f"rank {r.rank} could not be analysed: {r.error}" for r in ranks if r.error]
    sizes = {r.distributed.get("world_size") for r in ranks} - {None}
    recorded = {r.rank for r in ranks}
    for size in sorted(s for s in sizes if isinstance(s, int)):
        missing = sorted(set(range(size)) - recorded)
        if missing:
            warnings.append(f"the job had {size} ranks but {len(missing)} left no directory "
                            f"(ranks {', '.join(map(str, missing[:20]))}{' …' if len(missing) > 20 else ''})")
    for r in ranks:
        said = r.distributed.get("rank")
        if isinstance(said, int) and said != r.rank:
            warnings.append(f"{r.path.name}'s manifest says rank {said}")
    return warnings
