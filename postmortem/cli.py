"""The `postmortem` command: a thin layer over `postmortem` (analysis) and `reports` (rendering).

Exit codes: 0 done, 1 a finding matched --fail-on, 2 bad input. Every library error, OS error
or bad argument becomes one line on stderr (`postmortem: error: ...`), never a traceback.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from postmortem import LABELS, VERDICTS, analyze, load_run
from postmortem.exceptions import PostmortemError
from reports import Progress, build_page, compare_runs, render_html, render_markdown, render_summary
from reports.text import clean, shorten

__all__ = ["main"]

EXIT_OK, EXIT_FAIL_ON, EXIT_BAD_INPUT = 0, 1, 2
_TRACEBACK_ENV = "POSTMORTEM_TRACEBACK"
_DRAWING_STAGES = 7  # the report sections built by reports.build_page


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
                             help="HTML report to write (default: RUN_DIR/report.html)")
    analyze_cmd.add_argument("--json", type=Path, metavar="FILE", help="also write the analysis as JSON")
    analyze_cmd.add_argument("--markdown", type=Path, metavar="FILE",
                             help="also write a Markdown summary (at most 30 lines) for a ticket")
    analyze_cmd.add_argument("--fail-on", type=_labels, metavar="LABELS", default=frozenset(),
                             help="comma-separated verdicts or diagnosis labels (e.g. diverged,nonfinite_input); "
                                  "exit 1 when the analysis reports one of them")
    analyze_cmd.set_defaults(handler=_analyze)

    summary_cmd = commands.add_parser("summary", help="print the verdict of a run in the terminal")
    summary_cmd.add_argument("run_dir", metavar="RUN_DIR", type=Path)
    summary_cmd.set_defaults(handler=_summary)

    compare_cmd = commands.add_parser(
        "compare", help="find the first step where two runs differ (batches, losses or gradients)")
    compare_cmd.add_argument("run_a", metavar="RUN_A", type=Path)
    compare_cmd.add_argument("run_b", metavar="RUN_B", type=Path)
    compare_cmd.set_defaults(handler=_compare)
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


def _check_writable(path: Path) -> None:
    """Fail before the (slow) analysis when an output cannot be written."""
    folder = path.parent if str(path.parent) else Path(".")
    hint = " (pass -o FILE to write the report elsewhere)" if path.name == "report.html" else ""
    if path.is_dir():
        raise OSError(f"cannot write {path}: it is a directory{hint}")
    if not folder.is_dir():
        raise OSError(f"cannot write {path}: folder {folder} does not exist{hint}")
    if not os.access(folder, os.W_OK):
        raise OSError(f"cannot write {path}: folder {folder} is not writable{hint}")


def _write_atomically(path: Path, text: str) -> None:
    """Write next to the target and rename, so a reader never sees half a report."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "x", encoding="utf-8") as stream:  # "x": never follow a planted file
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _analyze(args: argparse.Namespace) -> int:
    progress = Progress(3 + _DRAWING_STAGES)
    try:
        progress.advance("loading run")
        run = load_run(args.run_dir)
        output = args.output or args.run_dir / "report.html"
        extras = [(p, kind) for p, kind in ((args.json, "json"), (args.markdown, "markdown")) if p]
        for path in (output, *(p for p, _ in extras)):
            _check_writable(path)
        progress.advance("analysing")
        analysis = analyze(run)
        page = build_page(analysis, progress=progress.advance, version=_package_version())
        progress.advance("writing report")
        _write_atomically(output, render_html(page))
        for path, kind in extras:
            text = (json.dumps(analysis.to_json(), indent=2, allow_nan=False) + "\n" if kind == "json"
                    else render_markdown(analysis, report_name=output.name))
            _write_atomically(path, text)
    finally:
        progress.close()
    print(clean(page.headline))
    print(f"Report: {clean(output)}")
    matched = sorted(args.fail_on & {analysis.verdict, *(f.label for f in analysis.significant)})
    if matched:
        print(f"postmortem: {', '.join(matched)} matched --fail-on", file=sys.stderr)
        return EXIT_FAIL_ON
    return EXIT_OK


def _summary(args: argparse.Namespace) -> int:
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
    print(comparison.describe())
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
