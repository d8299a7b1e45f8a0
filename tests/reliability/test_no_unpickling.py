"""Nothing from a run directory is unpickled or executed, whatever it is named.

Malicious pickles (a raw pickle, a `torch.save` archive, a pickle named `.parquet`, a Parquet
file whose Arrow extension-type metadata is a pickle, CVE-2023-47248's vector) are dropped into a
copy of a real run. Each would create a marker file when unpickled; the test first proves that
on a separate marker, then runs the library and every CLI command over the run: the marker must
never appear.
"""

from __future__ import annotations

import contextlib
import io
import pathlib
import pickle

import pyarrow as pa
import pyarrow.parquet as pq
import torch

import postmortem
from postmortem_cli.cli import main
from reliability_cases import copy_run, pick_segment


class Payload:
    """Unpickling this creates `marker` (the stand-in for arbitrary code execution)."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return pathlib.Path.touch, (pathlib.Path(self.marker),)


class _PickledExtension(pa.ExtensionType):
    """Writes the legacy `arrow.py_extension_type` whose metadata old pyarrow unpickled."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker
        super().__init__(pa.int64(), "arrow.py_extension_type")

    def __arrow_ext_serialize__(self) -> bytes:
        return pickle.dumps(Payload(self.marker))

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type, serialized):
        raise AssertionError("never read back in this test")


def plant(run_dir: pathlib.Path, marker: pathlib.Path) -> None:
    raw = pickle.dumps(Payload(marker))
    (run_dir / "model.pkl").write_bytes(raw)
    (run_dir / "checkpoints" / "step-00000020.pt").write_bytes(raw)
    (run_dir / "checkpoints" / "step-00000030.parquet").write_bytes(raw)
    (run_dir / "stats" / "part-000050.parquet").write_bytes(raw)
    torch.save({"model": Payload(marker)}, run_dir / "checkpoints" / "flight-00000023.pt")
    torch.save({"model": Payload(marker)}, run_dir / "optimizer.pth")
    scalars = pq.read_table(pick_segment(run_dir, "scalars", 0))
    steps = pa.ExtensionArray.from_storage(_PickledExtension(marker), scalars.column("step").combine_chunks())
    pq.write_table(scalars.set_column(0, "step", steps), run_dir / "scalars" / "part-000050.parquet")


def test_payloads_do_execute_when_unpickled(tmp_path):
    """The planted files are live: unpickling them the usual ways creates the marker."""
    for i, load in enumerate([
        lambda p: pickle.loads(p.read_bytes()),
        lambda p: torch.load(p, weights_only=False),
    ]):
        marker = tmp_path / f"proof-{i}"
        run_dir = tmp_path / f"run-{i}"
        (run_dir / "checkpoints").mkdir(parents=True)
        (run_dir / "stats").mkdir()
        (run_dir / "scalars").mkdir()
        pq.write_table(pa.table({"step": [0], "name": ["loss"], "value": [1.0]}),
                       run_dir / "scalars" / "part-000000.parquet")
        plant(run_dir, marker)
        load(run_dir / ("model.pkl" if i == 0 else "optimizer.pth"))
        assert marker.exists()


def test_analysis_and_reports_never_unpickle(tiny_run, tmp_path):
    run_dir = copy_run(tiny_run, tmp_path / "run")
    marker = tmp_path / "EXECUTED"
    plant(run_dir, marker)

    analysis = postmortem.analyze(run_dir)
    analysis.run.checkpoints  # the report lists checkpoints: reads their Parquet metadata only
    assert not marker.exists()
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        codes = [
            main(["analyze", str(run_dir), "-o", str(tmp_path / "r.html"),
                  "--json", str(tmp_path / "r.json"), "--markdown", str(tmp_path / "r.md")]),
            main(["summary", str(run_dir)]),
            main(["compare", str(run_dir), str(tiny_run)]),
        ]
    assert not marker.exists(), "a file from the run directory was unpickled"
    assert codes == [0, 0, 0], out.getvalue()
    assert any("part-000050.parquet" in w for w in analysis.warnings), analysis.warnings
