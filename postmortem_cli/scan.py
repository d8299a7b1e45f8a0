"""`postmortem scan`: every run directory below some roots, one Dask task per run, one index.

`scan_runs` analyses each run found by postmortem.scan.find_runs as one task on a Dask cluster
(a LocalCluster by default, or an existing one) and writes into the output folder:

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from postmortem.exceptions import PostmortemError
from postmortem.ranks import RankAnalysis, one_line_error
from postmortem.scan import COLUMNS, analyse_run, find_runs, scan_tables
from reports import build_page, build_ranks_page, render_html
from reports.scan import render_index

__all__ = ["DASK_HINT", "ScanResult", "scan", "scan_dask", "scan_run", "scan_runs"]

DASK_HINT = "install it with `pip install 'postmortem[scan]'`, or pass --workers 0 to scan without it"
_REPORT_NAME = re.compile(r"^\d{4,}-[A-Za-z0-9._-]*\.html$")
_SCHEDULER_TIMEOUT = "10s"


@dataclass(frozen=True)
class ScanResult:
    runs: pd.DataFrame  # one row per run, COLUMNS, sorted by run
    files: pd.DataFrame  # the segments each analysis read, postmortem.scan.FILE_COLUMNS
    output: Path

    @property
    def index(self) -> Path:
        return self.output / "index.html"


def scan_run(name: str, path: str, report: str | None, version: str = "") -> dict:
    """One task: analyse one run and write its report to `report`. Returns its row (COLUMNS)
    and, under "files", the segments it read. Never raises."""
    row, analysed = analyse_run(name, path)
    if report is not None and analysed is not None:
        try:
            page = (build_ranks_page(analysed, version=version) if isinstance(analysed, RankAnalysis)
                    else build_page(analysed, version=version))
            _replace(Path(report), lambda temporary: temporary.write_text(render_html(page), encoding="utf-8"))
            row["report"] = f"reports/{Path(report).name}"
        except Exception as exc:  # noqa: BLE001 - the row still holds the analysis
            row["error"] = f"report not written: {one_line_error(exc)}"
    return row


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
    result = ScanResult(*scan_tables(rows), output=output)
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
