"""The `postmortem` command: a thin layer over `postmortem` (analysis) and `reports` (rendering).

Exit codes: 0 done, 1 a finding matched --fail-on, 2 bad input. Every library error, OS error
or bad argument becomes one line on stderr (`postmortem: error: ...`), never a traceback.
"""
from __future__ import annotations

import argparse
import json
import os
import stat
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from postmortem import LABELS, VERDICTS, analyze, compare_runs, load_run
from postmortem.analysis import ANALYSIS_STAGES
from postmortem.exceptions import PostmortemError
from postmortem.ranks import analyze_ranks, is_multi_rank, rank_run_dir
from postmortem.scan import find_runs
from postmortem_cli.scan import scan_dask, scan_runs
from reports import (Progress, build_page, build_ranks_page, render_comparison, render_html, render_markdown,
                     render_ranks_markdown, render_ranks_summary, render_summary)
from reports.scan import render_scan_table
from reports.text import clean, shorten

__all__ = ["main"]

EXIT_OK, EXIT_FAIL_ON, EXIT_BAD_INPUT = 0, 1, 2
_TRACEBACK_ENV = "POSTMORTEM_TRACEBACK"
_DRAWING_STAGES = 8  # the report sections built by reports.build_page


class _UsageError(Exception):
    """A bad command line, reported like any other error: one line, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print the whole usage block first
        raise _UsageError(f"{message} (see `postmortem {self.prog.split()[-1]} --help`)"
                          if " " in self.prog else f"{message} (see `postmortem --help`)")


def _package_version() -> str:
    try:
        return version("postmortem")
    except PackageNotFoundError:
        return "unknown"


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="postmortem",
        description="Find when and where a PyTorch training run failed, or why it does not learn.",
        epilog=f"Exit codes: 0 done, 1 a finding matched --fail-on, 2 bad input. "
               f"Set {_TRACEBACK_ENV}=1 to see the traceback of an unexpected error.",
    )
    parser.add_argument("--version", action="version", version=f"postmortem {_package_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    analyze_cmd = commands.add_parser("analyze", help="analyse a run and write an HTML incident report")
    analyze_cmd.add_argument("run_dir", metavar="RUN_DIR", type=Path)
    analyze_cmd.add_argument("-o", "--output", type=Path, metavar="FILE",
                             help="HTML report to write (default: RUN_DIR/report.html; - for stdout)")
    analyze_cmd.add_argument("--json", type=Path, metavar="FILE",
                             help="also write the analysis as JSON (- for stdout)")
    analyze_cmd.add_argument("--markdown", type=Path, metavar="FILE",
                             help="also write a Markdown summary (at most 30 lines) for a ticket (- for stdout)")
    analyze_cmd.add_argument("--fail-on", type=_labels, metavar="LABELS", default=frozenset(),
                             help="comma-separated verdicts or diagnosis labels (e.g. diverged,nonfinite_input); "
                                  "exit 1 when the analysis reports one of them")
    analyze_cmd.add_argument("--rank", type=_whole_number("a rank number"), metavar="N",
                             help="of a multi-rank run: rank N's full report alone "
                                  "(default: every rank, the first to go bad in full)")
    analyze_cmd.set_defaults(handler=_analyze)

    summary_cmd = commands.add_parser("summary", help="print the verdict of a run in the terminal")
    summary_cmd.add_argument("run_dir", metavar="RUN_DIR", type=Path)
    summary_cmd.set_defaults(handler=_summary)

    compare_cmd = commands.add_parser(
        "compare", help="find the first step where two runs differ (batches, losses or gradients)")
    compare_cmd.add_argument("run_a", metavar="RUN_A", type=Path)
    compare_cmd.add_argument("run_b", metavar="RUN_B", type=Path)
    compare_cmd.set_defaults(handler=_compare)

    scan_cmd = commands.add_parser(
        "scan", help="analyse every run below ROOT(s) on Dask; write an index and a table of them")
    scan_cmd.add_argument("roots", nargs="+", metavar="ROOT", type=Path)
    scan_cmd.add_argument("-o", "--output", type=Path, metavar="DIR",
                          help="folder for index.html, runs.parquet, runs.csv and the reports "
                               "(default: ROOT/postmortem-scan; ./postmortem-scan for several roots)")
    where = scan_cmd.add_mutually_exclusive_group()
    where.add_argument("--workers", type=_whole_number("a number of workers"), metavar="N",
                       help="processes of a local Dask cluster (default: one per core, at most one per run); "
                            "0: no Dask, one run after another in this process")
    where.add_argument("--scheduler", metavar="ADDRESS",
                       help="an existing Dask cluster, e.g. tcp://10.0.0.5:8786; its workers must see "
                            "the runs and the output folder at the same paths")
    scan_cmd.set_defaults(handler=_scan)
    return parser


def _labels(text: str) -> frozenset[str]:
    labels = frozenset(label.strip() for label in text.split(",") if label.strip())
    if not labels:
        raise argparse.ArgumentTypeError("expected comma-separated labels, e.g. diverged,nonfinite_input")
    unknown = sorted(labels - LABELS - set(VERDICTS))
    if unknown:  # a typo would otherwise never match and the check would pass silently
        raise argparse.ArgumentTypeError(
            f"unknown label{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"known: {', '.join(sorted(LABELS | set(VERDICTS)))}")
    return labels


def _whole_number(what: str):
    def parse(text: str) -> int:
        if not text.isdigit():
            raise argparse.ArgumentTypeError(f"expected {what} (0, 1, 2, ...), got {text!r}")
        return int(text)
    return parse


_STDOUT = Path("-")


def _is_stream(path: Path) -> bool:
    """Whether `path` (through any symlinks) is a device or a pipe, written into, not replaced."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _is_stdout(path: Path) -> bool:
    """`-`, or a path to the file stdout is (`/dev/stdout`, `/proc/self/fd/1`)."""
    if path == _STDOUT:
        return True
    try:
        return os.path.samestat(os.stat(path), os.fstat(sys.stdout.fileno()))
    except (OSError, ValueError):  # no such file, or stdout is not a file (a test's StringIO)
        return False


def _check_writable(path: Path) -> None:
    """Fail before the (slow) analysis when an output cannot be written."""
    if path == _STDOUT:
        return
    hint = " (pass -o FILE to write the report elsewhere)" if path.name == "report.html" else ""
    if path.is_dir():
        raise OSError(f"cannot write {path}: it is a directory{hint}")
    if _is_stream(path):
        if not os.access(path, os.W_OK):
            raise OSError(f"cannot write {path}: it is not writable{hint}")
        return
    target = Path(os.path.realpath(path))  # through a symlink: the file it names
    folder = target.parent
    if not folder.is_dir():
        raise OSError(f"cannot write {path}: folder {folder} does not exist{hint}")
    if not os.access(folder, os.W_OK):
        raise OSError(f"cannot write {path}: folder {folder} is not writable{hint}")


def _write_atomically(path: Path, text: str) -> None:
    """Write next to the target and rename, so a reader never sees half a report. `-` is
    stdout; a device or a pipe (`/dev/stdout`) is written into; a symlink stays a link and the
    file it names is replaced."""
    if path == _STDOUT:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    if _is_stream(path):
        with open(path, "w", encoding="utf-8") as stream:
            stream.write(text)
        return
    path = Path(os.path.realpath(path))
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "x", encoding="utf-8") as stream:  # "x": never follow a planted file
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _analyze(args: argparse.Namespace) -> int:
    if args.rank is not None:
        args.run_dir = rank_run_dir(args.run_dir, args.rank)
    multi_rank = is_multi_rank(args.run_dir)  # the parent of a distributed job's rank directories
    progress = Progress(3 + (0 if multi_rank else ANALYSIS_STAGES) + _DRAWING_STAGES)
    try:
        progress.advance("loading run")
        run = args.run_dir if multi_rank else load_run(args.run_dir)
        output = args.output or args.run_dir / "report.html"
        extras = [(p, kind) for p, kind in ((args.json, "json"), (args.markdown, "markdown")) if p]
        if [output, *(p for p, _ in extras)].count(_STDOUT) > 1:
            raise _UsageError("only one of -o, --json and --markdown can be - (stdout)")
        for path in (output, *(p for p, _ in extras)):
            _check_writable(path)
        progress.advance("analysing")
        analysis = analyze_ranks(run) if multi_rank else analyze(run, progress=progress.advance)
        page = (build_ranks_page if multi_rank else build_page)(
            analysis, progress=progress.advance, version=_package_version())
        progress.advance("writing report")
        _write_atomically(output, render_html(page))
        for path, kind in extras:
            text = (json.dumps(analysis.to_json(), indent=2, allow_nan=False) + "\n" if kind == "json"
                    else (render_ranks_markdown if multi_rank else render_markdown)(
                        analysis, report_name="the HTML report" if output == _STDOUT
                        else output.name))
            _write_atomically(path, text)
    finally:
        progress.close()
    to_stdout = any(_is_stdout(p) for p in (output, *(p for p, _ in extras)))
    status = sys.stderr if to_stdout else sys.stdout  # stdout holds the output asked for
    print(clean(page.headline), file=status)
    print(f"Report: {'stdout' if output == _STDOUT else clean(output)}", file=status)
    labels = analysis.labels if multi_rank else {analysis.verdict, *(f.label for f in analysis.significant)}
    matched = sorted(args.fail_on & labels)
    if matched:
        print(f"postmortem: {', '.join(matched)} matched --fail-on", file=sys.stderr)
        return EXIT_FAIL_ON
    return EXIT_OK


def _summary(args: argparse.Namespace) -> int:
    if is_multi_rank(args.run_dir):
        sys.stdout.write(render_ranks_summary(analyze_ranks(args.run_dir)))
        return EXIT_OK
    progress = Progress(2)
    try:
        progress.advance("loading run")
        run = load_run(args.run_dir)
        progress.advance("analysing")
        analysis = analyze(run)
    finally:
        progress.close()
    sys.stdout.write(render_summary(analysis))
    return EXIT_OK


def _compare(args: argparse.Namespace) -> int:
    progress = Progress(3)
    try:
        progress.advance("loading run A")
        run_a = load_run(args.run_a)
        progress.advance("loading run B")
        run_b = load_run(args.run_b)
        progress.advance("comparing")
        comparison = compare_runs(run_a, run_b)
    finally:
        progress.close()
    print(render_comparison(comparison))
    return EXIT_OK


def _scan(args: argparse.Namespace) -> int:
    output = args.output or (args.roots[0] / "postmortem-scan" if len(args.roots) == 1
                             else Path("postmortem-scan"))
    runs = find_runs(args.roots, skip=[output])
    if args.workers != 0:
        scan_dask()  # a missing extra is one line before anything is written
    output.mkdir(parents=True, exist_ok=True)
    _check_writable(output / "index.html")
    progress = Progress(len(runs))
    try:
        result = scan_runs(runs, output, workers=args.workers, scheduler=args.scheduler,
                           on_done=lambda row: progress.advance(row["run"]), version=_package_version())
    finally:
        progress.close()
    sys.stdout.write(render_scan_table(result.runs))
    print(f"Index: {clean(result.index)}")
    return EXIT_OK


def _one_line(exc: BaseException) -> str:
    message = clean(" ".join(str(exc).split())) or type(exc).__name__
    return shorten(message, 500)


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            args = _parser().parse_args(argv)
        except SystemExit as done:  # --help and --version print and stop here
            return int(done.code or 0)
        return args.handler(args)
    except (_UsageError, PostmortemError, OSError) as exc:
        if isinstance(exc, BrokenPipeError):  # e.g. `postmortem summary RUN | head -3`
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit flush
            return EXIT_OK
        print(f"postmortem: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a run directory we did not foresee must not end in a traceback
        if os.environ.get(_TRACEBACK_ENV):
            raise
        print(f"postmortem: error: unexpected {type(exc).__name__} while reading the run: {_one_line(exc)}",
              file=sys.stderr)
        return EXIT_BAD_INPUT
