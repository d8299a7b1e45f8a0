"""Which directories below some roots are runs, and one row of facts per analysed run.

A sweep or a fleet is many run directories. `find_runs` walks the roots for them (a multi-rank
job is one run); `analyse_run` analyses one into its row of COLUMNS (never raising: a run that
cannot be analysed is a row with verdict "error" and its one-line error), and `scan_tables`
gathers the rows. `postmortem scan` (postmortem_cli.scan) runs them as Dask tasks and renders
each run's report and the index.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd

from recorders.vocabulary import TABLES

from .analysis import Analysis, analyze
from .exceptions import RunDirectoryError
from .loading import Run, load_run
from .ranks import RankAnalysis, analyze_ranks, is_multi_rank, one_line_error, recorded_steps

__all__ = ["COLUMNS", "FILE_COLUMNS", "analyse_run", "find_runs", "scan_tables"]

COLUMNS = ("run", "verdict", "onset_step", "first_nonfinite_step", "first_nonfinite",
           "top_culprit", "labels", "status", "steps", "ranks", "first_rank", "error", "report",
           "path")
_INTEGER_COLUMNS = ("onset_step", "first_nonfinite_step", "steps", "ranks", "first_rank")
FILE_COLUMNS = ("run", "rank", "kind", "file")
_RUN_MARKERS = ("manifest.json", "stats", "scalars")


def find_runs(roots: Sequence[str | Path], *, skip: Iterable[str | Path] = ()) -> list[tuple[str, Path]]:
    """(name, directory) of every run below `roots`, by name. A run directory holds a manifest
    or a stats or scalars folder; the parent of `rank-NNNNN/` directories is one run. Runs are
    not looked into for more runs; hidden folders, symlinks and `skip` are not entered.
    The name is the path below its root (with the root's name in front for several roots).
    RunDirectoryError when a root is not a directory or no run is found."""
    skipped = {Path(p).resolve() for p in skip}
    found: dict[str, Path] = {}
    seen: set[Path] = set()
    for root in map(Path, roots):
        if not root.is_dir():
            raise RunDirectoryError(f"{root} is not a directory")
        prefix = (root.resolve().name or "root") if len(roots) > 1 else ""
        for path in _walk(root, skipped):
            if path.resolve() in seen:
                continue
            seen.add(path.resolve())
            below = path.relative_to(root).as_posix()
            name = "/".join(p for p in (prefix, "" if below == "." else below) if p)
            name = name or root.resolve().name or "run"
            while name in found:
                name += "+"
            found[name] = path
    if not found:
        raise RunDirectoryError(f"no run directories below {', '.join(map(str, roots))}")
    return sorted(found.items())


def _walk(root: Path, skipped: set[Path]):
    pending = [root]
    while pending:
        folder = pending.pop()
        if any((folder / marker).exists() for marker in _RUN_MARKERS) or is_multi_rank(folder):
            yield folder
            continue
        try:
            children = sorted(folder.iterdir(), reverse=True)
        except OSError:
            continue  # an unreadable folder holds no run we could analyse
        pending += [c for c in children if c.is_dir() and not c.is_symlink()
                    and not c.name.startswith(".") and c.resolve() not in skipped]


def analyse_run(name: str, path: str) -> tuple[dict, Analysis | RankAnalysis | None]:
    """Analyse one run (every rank of a multi-rank run): its row (COLUMNS, with under "files"
    the segments it read) and what was analysed (None when that failed). Never raises."""
    row: dict = dict.fromkeys(COLUMNS)
    row.update(run=name, path=path, files=[])
    try:
        if is_multi_rank(path):
            multi = analyze_ranks(path)
            row.update(_facts(multi.shown.analysis), verdict=multi.verdict, ranks=len(multi.ranks),
                       first_rank=multi.origin.rank if multi.origin else None,
                       labels=",".join(sorted({f.label for r in multi.analysed for f in r.analysis.findings})))
            row["files"] = [f for r in multi.analysed for f in _files(r.analysis.run, r.rank)]
            return row, multi
        analysis = analyze(load_run(path))
        row.update(_facts(analysis), labels=",".join(f.label for f in analysis.findings))
        row["files"] = _files(analysis.run, None)
        return row, analysis
    except Exception as exc:  # noqa: BLE001 - a bad run is a row, never a failed scan
        row.update(verdict="error", error=one_line_error(exc))
        return row, None


def _facts(analysis: Analysis) -> dict:
    first, onset = analysis.first_nonfinite, analysis.onset
    manifest = analysis.run.manifest if isinstance(analysis.run.manifest, dict) else {}
    status = manifest.get("status")
    top = analysis.ranking[0] if analysis.ranking else None
    return {
        "verdict": analysis.verdict,
        "onset_step": onset.step if onset else None,
        "first_nonfinite_step": first.step if first else None,
        "first_nonfinite": f"{first.role} {first.tensor}" if first else None,
        "top_culprit": f"{top.role} {top.tensor}" + (f" ({top.key})" if top.key else "") if top else None,
        "status": status if isinstance(status, str) else None,
        "steps": recorded_steps(analysis.run),
    }


def _files(run: Run, rank: int | None) -> list[tuple[int | None, str, str]]:
    return [(rank, kind, str(path.resolve())) for kind in TABLES for path in run.segments[kind]]


def scan_tables(rows: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The runs (COLUMNS, sorted by run) and the segments each analysis read (FILE_COLUMNS)."""
    files = [(row["run"], *entry) for row in rows for entry in row["files"]]
    runs = pd.DataFrame([{c: row[c] for c in COLUMNS} for row in rows], columns=list(COLUMNS))
    runs = runs.sort_values("run", kind="stable").reset_index(drop=True)
    for column in _INTEGER_COLUMNS:
        runs[column] = runs[column].astype("Int64")
    files = pd.DataFrame(files, columns=list(FILE_COLUMNS)).sort_values(["run", "rank", "kind", "file"])
    files["rank"] = files["rank"].astype("Int64")
    return runs, files.reset_index(drop=True)
