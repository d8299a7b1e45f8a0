"""`postmortem scan`: every run directory below some roots, one Dask task per run, one index.

A sweep or a fleet is many run directories. `find_runs` walks the roots for them (a multi-rank
job is one run); `scan_runs` analyses each as one task on a Dask cluster (a LocalCluster by
default, or an existing one) and writes into the output folder:

    index.html        every run, worst first, linking its report
    runs.parquet      one row per run (COLUMNS), also as runs.csv
    files.parquet     the segment files each analysis read (run, rank, kind, file): the list
                      a DuckDB query over all runs' stats at once starts from (docs/scan.md)
    reports/*.html    each run's full report

A run that cannot be analysed is a row with verdict "error" and its one-line error; a scan
never fails because of one run. Dask is optional (`pip install 'postmortem[scan]'`);
``workers=0`` analyses the runs one after another in this process, without it.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from recorders.vocabulary import TABLES

from .analysis import Analysis, analyze
from .exceptions import PostmortemError, RunDirectoryError
from .loading import Run, load_run
from .ranks import analyze_ranks, is_multi_rank, one_line_error, recorded_steps
from reports import build_page, build_ranks_page, render_html
from reports.scan import render_index

__all__ = ["COLUMNS", "DASK_HINT", "ScanResult", "find_runs", "scan", "scan_dask", "scan_run", "scan_runs"]

COLUMNS = ("run", "verdict", "onset_step", "first_nonfinite_step", "first_nonfinite",
           "top_culprit", "labels", "status", "steps", "ranks", "first_rank", "error", "report",
           "path")
_INTEGER_COLUMNS = ("onset_step", "first_nonfinite_step", "steps", "ranks", "first_rank")
_FILE_COLUMNS = ("run", "rank", "kind", "file")
_RUN_MARKERS = ("manifest.json", "stats", "scalars")
DASK_HINT = "install it with `pip install 'postmortem[scan]'`, or pass --workers 0 to scan without it"
_REPORT_NAME = re.compile(r"^\d{4,}-[A-Za-z0-9._-]*\.html$")
_SCHEDULER_TIMEOUT = "10s"


@dataclass(frozen=True)
class ScanResult:
    runs: pd.DataFrame  # one row per run, COLUMNS, sorted by run
    files: pd.DataFrame  # the segments each analysis read, _FILE_COLUMNS
    output: Path

    @property
    def index(self) -> Path:
        return self.output / "index.html"


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


def scan_run(name: str, path: str, report: str | None, version: str = "") -> dict:
    """One task: analyse one run (every rank of a multi-rank run) and write its report to
    `report`. Returns its row (COLUMNS) and, under "files", the segments it read. Never raises."""
    row: dict = dict.fromkeys(COLUMNS)
    row.update(run=name, path=path, files=[])
    multi = None
    try:
        if is_multi_rank(path):
            multi = analyze_ranks(path)
            analysis = multi.shown.analysis
            row.update(_facts(analysis), verdict=multi.verdict, ranks=len(multi.ranks),
                       first_rank=multi.origin.rank if multi.origin else None,
                       labels=",".join(sorted({f.label for r in multi.analysed for f in r.analysis.findings})))
            row["files"] = [f for r in multi.analysed for f in _files(r.analysis.run, r.rank)]
        else:
            analysis = analyze(load_run(path))
            row.update(_facts(analysis), labels=",".join(f.label for f in analysis.findings))
            row["files"] = _files(analysis.run, None)
    except Exception as exc:  # noqa: BLE001 - a bad run is a row, never a failed scan
        row.update(verdict="error", error=one_line_error(exc))
        return row
    if report is not None:
        try:
            page = (build_ranks_page(multi, version=version) if multi is not None
                    else build_page(analysis, version=version))
            _replace(Path(report), lambda temporary: temporary.write_text(render_html(page), encoding="utf-8"))
            row["report"] = f"reports/{Path(report).name}"
        except Exception as exc:  # noqa: BLE001 - the row still holds the analysis
            row["error"] = f"report not written: {one_line_error(exc)}"
    return row


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


def scan_runs(runs: Sequence[tuple[str, Path]], output: str | Path, *, workers: int | None = None,
              scheduler: str | None = None, on_done: Callable[[dict], None] | None = None,
              version: str = "") -> ScanResult:
    """Analyse `runs` (from find_runs), one task each, and write the index into `output`.

    `scheduler`: address of a running Dask scheduler, whose workers must see the runs and
    `output` at the same paths. Otherwise a LocalCluster of `workers` processes (default one
    per core, at most one per run); ``workers=0``: in this process, one run after another.
    `on_done` is called with each row as its run finishes (a progress bar); `version` goes
    into the footer of every page.
    """
    output = Path(output)
    reports = output / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    for old in reports.iterdir():  # reports of an earlier scan into the same folder
        if _REPORT_NAME.match(old.name) and old.is_file():
            old.unlink()
    tasks = [(name, str(path), str((reports / _report_name(i, name)).resolve()), version)
             for i, (name, path) in enumerate(runs, 1)]
    done = on_done or (lambda row: None)
    if scheduler is None and workers == 0:
        rows = []
        for task in tasks:
            rows.append(scan_run(*task))
            done(rows[-1])
    else:
        rows = _on_dask(tasks, workers, scheduler, done)
    result = _tables(rows, output)
    _write_outputs(result, version)
    return result


def scan(roots: Sequence[str | Path], output: str | Path, **options) -> ScanResult:
    """find_runs + scan_runs; the output folder is never scanned itself."""
    return scan_runs(find_runs(roots, skip=[output]), output, **options)


def _report_name(number: int, name: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "run"
    return f"{number:04d}-{slug[:80]}.html"


def scan_dask():
    """The `distributed` module, or a PostmortemError that names the extra to install."""
    try:
        import distributed
    except ImportError as exc:
        raise PostmortemError(f"postmortem scan runs on Dask, which is not installed: {DASK_HINT}") from exc
    return distributed


def _on_dask(tasks: list[tuple[str, str, str, str]], workers: int | None, scheduler: str | None,
             done: Callable[[dict], None]) -> list[dict]:
    distributed = scan_dask()
    cluster = None
    try:
        if scheduler is not None:
            try:
                client = distributed.Client(scheduler, timeout=_SCHEDULER_TIMEOUT)
            except (OSError, ValueError, TypeError) as exc:
                raise PostmortemError(f"cannot reach the Dask scheduler at {scheduler}: {one_line_error(exc)}") from exc
        else:
            count = workers or min(len(tasks), os.cpu_count() or 1)
            # Processes of one thread: the analysis holds the GIL in pandas and numpy.
            cluster = distributed.LocalCluster(n_workers=max(1, min(count, len(tasks))), threads_per_worker=1,
                                               processes=True, dashboard_address=None,
                                               silence_logs=logging.ERROR)
            client = distributed.Client(cluster)
        with client:
            futures = client.map(scan_run, *zip(*tasks), pure=False)
            task_of = {future.key: task for future, task in zip(futures, tasks)}
            rows = []
            for future in distributed.as_completed(futures):
                try:
                    row = future.result()
                except Exception as exc:  # noqa: BLE001 - e.g. the worker died (KilledWorker)
                    name, path = task_of[future.key][:2]
                    row = {**dict.fromkeys(COLUMNS), "run": name, "path": path, "files": [],
                           "verdict": "error", "error": f"the task failed: {one_line_error(exc)}"}
                rows.append(row)
                done(row)
    finally:
        if cluster is not None:
            cluster.close()
    return rows


def _tables(rows: list[dict], output: Path) -> ScanResult:
    files = [(row["run"], *entry) for row in rows for entry in row["files"]]
    runs = pd.DataFrame([{c: row[c] for c in COLUMNS} for row in rows], columns=list(COLUMNS))
    runs = runs.sort_values("run", kind="stable").reset_index(drop=True)
    for column in _INTEGER_COLUMNS:
        runs[column] = runs[column].astype("Int64")
    files = pd.DataFrame(files, columns=list(_FILE_COLUMNS)).sort_values(["run", "rank", "kind", "file"])
    files["rank"] = files["rank"].astype("Int64")
    return ScanResult(runs=runs, files=files.reset_index(drop=True), output=output)


def _write_outputs(result: ScanResult, version: str) -> None:
    out = result.output
    _replace(out / "runs.parquet", lambda temporary: result.runs.to_parquet(temporary, index=False))
    _replace(out / "runs.csv", lambda temporary: result.runs.to_csv(temporary, index=False))
    _replace(out / "files.parquet", lambda temporary: result.files.to_parquet(temporary, index=False))
    _replace(out / "index.html", lambda temporary: temporary.write_text(
        render_index(result.runs, version=version), encoding="utf-8"))


def _replace(path: Path, write: Callable[[Path], None]) -> None:
    """Write next to `path` and rename, so a reader never sees half a file."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(temporary)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
