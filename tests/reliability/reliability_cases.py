"""Damaged and hostile run directories, built by mutating a copy of a small real run.

Each `Mutation` is one thing that happens to run directories in the wild (a crash mid-write,
a full disk, a hand-edited manifest, a ticket attachment crafted to attack the reader). Its
kind says whether the damage must be *noticed*: a damaging mutation must end in a
`PostmortemError` or in an analysis that carries a warning; a benign one (a duplicated segment,
an odd but well-formed name) only has to be analysed without a crash.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

HOSTILE_TEXTS = (
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "javascript:alert(document.cookie)",
    "\x1b[2J\x1b[31mred\x1b]0;pwned\x07",
    "line\nbreak\r\x00nul",
    "fc1.weight</td></tr><!--",
)
TABLES = ("stats", "scalars", "events")


def record_tiny_run(run_dir: Path) -> Path:
    """A real 24-step run: 4 segments per table, checkpoints, one event."""
    import torch
    from torch import nn

    from recorders import Recorder

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with Recorder(run_dir, model, optimizer, flush_every=6, checkpoint_every=10) as rec:
        for step in range(24):
            if step == 12:
                rec.event("domain_switch", "now training on domain B")
            x, y = torch.randn(16, 4), torch.randn(16, 2)
            optimizer.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            optimizer.step()
            rec.step(loss=loss, inputs=x, targets=y)
    return run_dir


class CaseTimeout(BaseException):
    """A case ran past its time limit (BaseException: library code must not swallow it)."""


@contextmanager
def time_limit(seconds: float):
    """Raise CaseTimeout in the main thread after `seconds` (a hang is a failure, not a wait)."""
    def expire(signum, frame):
        raise CaseTimeout(f"case still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def segments(run_dir: Path, table: str) -> list[Path]:
    return sorted((run_dir / table).glob("part-*.parquet"))


def pick_segment(run_dir: Path, table: str, index: int) -> Path | None:
    found = segments(run_dir, table)
    return found[index % len(found)] if found else None


def next_segment_path(run_dir: Path, table: str) -> Path:
    (run_dir / table).mkdir(exist_ok=True)
    return run_dir / table / f"part-{len(segments(run_dir, table)) + 100:06d}.parquet"


def read_or_none(path: Path | None) -> pa.Table | None:
    try:
        return pq.read_table(path) if path is not None else None
    except (OSError, pa.ArrowException):
        return None


def replace_column(table: pa.Table, name: str, values: pa.Array) -> pa.Table:
    return table.set_column(table.schema.get_field_index(name), name, values)


def load_manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def write_manifest(run_dir: Path, manifest) -> None:
    (run_dir / "manifest.json").write_text(json.dumps(manifest))


@dataclass(frozen=True)
class Mutation:
    kind: str
    table: str = "stats"
    index: int = 0
    fraction: float = 0.5
    number: int = 0
    text: str = HOSTILE_TEXTS[0]
    seed: int = 0

    @property
    def damaging(self) -> bool:
        return KINDS[self.kind][1]

    def apply(self, run_dir: Path, outside: Path) -> None:
        """Damage `run_dir`; `outside` is a scratch folder outside it (symlink targets)."""
        KINDS[self.kind][0](self, run_dir, outside)


# ----------------------------------------------------------------------------- segment damage
def _truncate(m: Mutation, run_dir: Path, outside: Path) -> None:
    path = pick_segment(run_dir, m.table, m.index)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * m.fraction)])  # fraction < 1: always shorter


def _zero_byte(m: Mutation, run_dir: Path, outside: Path) -> None:
    pick_segment(run_dir, m.table, m.index).write_bytes(b"")


def _random_bytes(m: Mutation, run_dir: Path, outside: Path) -> None:
    rng = random.Random(m.seed)
    data = bytes(rng.getrandbits(8) for _ in range(1 + m.number % 4096))
    if m.fraction < 0.5:
        data = b"PAR1" + data + b"PAR1"  # looks like Parquet at both ends
    pick_segment(run_dir, m.table, m.index).write_bytes(data)


def _random_bytes_new_segment(m: Mutation, run_dir: Path, outside: Path) -> None:
    rng = random.Random(m.seed)
    next_segment_path(run_dir, m.table).write_bytes(
        bytes(rng.getrandbits(8) for _ in range(1 + m.number % 4096)))


_BAD_DTYPE_COLUMNS = {"stats": ("norm", "max_abs", "nonfinite", "role", "name", "step"),
                      "scalars": ("value", "name", "step"),
                      "events": ("step", "wall_time")}


def _wrong_dtype(m: Mutation, run_dir: Path, outside: Path) -> None:
    """A column holding values of another type that cannot be cast back (lists, text, numbers)."""
    path = pick_segment(run_dir, m.table, m.index)
    table = read_or_none(path)
    column = _BAD_DTYPE_COLUMNS[m.table][m.number % len(_BAD_DTYPE_COLUMNS[m.table])]
    n = table.num_rows
    textual = pa.types.is_string(table.schema.field(column).type) or \
        pa.types.is_dictionary(table.schema.field(column).type)
    if m.fraction < 0.5:
        values = pa.array([[1, 2]] * n)
    elif textual:
        values = pa.array([float(i) for i in range(n)])
    else:
        values = pa.array([f"not a number {m.text}"] * n)
    pq.write_table(replace_column(table, column, values), path)


def _foreign_columns_extra(m: Mutation, run_dir: Path, outside: Path) -> None:
    """Extra unknown columns next to the right ones: must be ignored (benign)."""
    path = pick_segment(run_dir, m.table, m.index)
    table = read_or_none(path)
    pq.write_table(table.append_column(m.text or "x", pa.array([m.number] * table.num_rows)), path)


def _steps(m: Mutation, run_dir: Path, outside: Path, value: int) -> None:
    for table in ("stats", "scalars"):
        path = pick_segment(run_dir, table, m.index)
        read = read_or_none(path)
        steps = read.column("step").to_pylist()
        pq.write_table(replace_column(read, "step", pa.array(
            [value + s % 3 if value < 0 else value - s % 3 for s in steps], pa.int64())), path)


def _huge_steps(m: Mutation, run_dir: Path, outside: Path) -> None:
    # Steps beyond 2**53 (not exact in float64) are dropped with a warning: tested apart.
    _steps(m, run_dir, outside, (10**12, 2**40, 2**53)[m.number % 3])


def _negative_steps(m: Mutation, run_dir: Path, outside: Path) -> None:
    _steps(m, run_dir, outside, (-1, -1000, -(2**53))[m.number % 3])


def _duplicate_segment(m: Mutation, run_dir: Path, outside: Path) -> None:
    """The same rows twice, as an interrupted compaction leaves them (documented, benign)."""
    for table in ("stats", "scalars"):
        shutil.copyfile(pick_segment(run_dir, table, m.index), next_segment_path(run_dir, table))


def _hostile_names(m: Mutation, run_dir: Path, outside: Path) -> None:
    for table in ("stats", "scalars"):
        path = pick_segment(run_dir, table, m.index)
        read = read_or_none(path)
        names = [f"{n}{m.text}" if i % 2 else m.text for i, n in
                 enumerate(read.column("name").to_pylist())]
        pq.write_table(replace_column(read, "name", pa.array(names).dictionary_encode()), path)


def _hostile_events(m: Mutation, run_dir: Path, outside: Path) -> None:
    steps = [m.number % 30, -1, 2**62][: 1 + m.index % 3]
    pq.write_table(pa.table({
        "step": pa.array(steps, pa.int64()),
        "kind": [m.text] * len(steps),
        "message": [m.text * (1 + m.number % 50)] * len(steps),
        "wall_time": pa.array([float("nan"), 1e300, -1.0][: len(steps)]),
    }), next_segment_path(run_dir, "events"))


def _unfinished_write(m: Mutation, run_dir: Path, outside: Path) -> None:
    """Leftovers of writes cut short: dot-files and .tmp are ignored by readers (benign)."""
    folder = run_dir / m.table
    (folder / f".part-{m.number % 999999:06d}.parquet.tmp").write_bytes(b"PAR1 half a file")
    (folder / f"part-{m.number % 999999:06d}.parquet.tmp").write_bytes(b"")


def _hostile_file_name(m: Mutation, run_dir: Path, outside: Path) -> None:
    name = m.text.replace("/", "_").replace("\x00", "") or "x"
    (run_dir / m.table / f"{name}.parquet").write_bytes(b"not parquet")


# ----------------------------------------------------------------------------- structure
def _table_is_file(m: Mutation, run_dir: Path, outside: Path) -> None:
    shutil.rmtree(run_dir / "events")
    (run_dir / "events").write_text("not a folder")


def _segment_is_directory(m: Mutation, run_dir: Path, outside: Path) -> None:
    next_segment_path(run_dir, m.table).mkdir()


def _symlink_loop(m: Mutation, run_dir: Path, outside: Path) -> None:
    """A folder link back to the run itself: a recursive walk would never end."""
    (run_dir / m.table / "loop").symlink_to(run_dir)


def _dangling_symlink(m: Mutation, run_dir: Path, outside: Path) -> None:
    path = next_segment_path(run_dir, m.table)
    path.symlink_to(outside / "does-not-exist.parquet")


# ----------------------------------------------------------------------------- manifest
def _manifest_missing(m: Mutation, run_dir: Path, outside: Path) -> None:
    (run_dir / "manifest.json").unlink()


def _manifest_garbage(m: Mutation, run_dir: Path, outside: Path) -> None:
    rng = random.Random(m.seed)
    choices = (bytes(rng.getrandbits(8) for _ in range(1 + m.number % 2048)),
               b'{"schema_version": 1, "models": {',  # cut short mid-write
               m.text.encode("utf-8", "replace"),
               b"\xef\xbb\xbf{\"schema_version\": 1}\x00")
    (run_dir / "manifest.json").write_bytes(choices[m.number % len(choices)])


def _manifest_not_object(m: Mutation, run_dir: Path, outside: Path) -> None:
    values = ([1, 2, 3], "manifest", 42, None, True)
    write_manifest(run_dir, values[m.number % len(values)])


def _manifest_wrong_types(m: Mutation, run_dir: Path, outside: Path) -> None:
    """Every field present but of the wrong type (a hand-edited or foreign manifest)."""
    manifest = load_manifest(run_dir)
    bad = ([1, 2], "text", 3.5, None, {"x": [None]}, -7, m.text)
    keys = ("models", "optimizers", "options", "config", "last_step", "status", "exception",
            "started_at", "ended_at", "run_id", "first_nonfinite_step")
    for i, key in enumerate(keys):
        if (m.number >> i) & 1:
            manifest[key] = bad[(m.seed + i) % len(bad)]
    write_manifest(run_dir, manifest)


def _manifest_models_malformed(m: Mutation, run_dir: Path, outside: Path) -> None:
    manifest = load_manifest(run_dir)
    variants = (
        {"model": {"modules": "abc", "parameters": [{"name": 5, "shape": "x"}]}},
        {"model": {"modules": [None, 1, {"name": None}], "parameters": [{"shape": [-1, 2**70]}]}},
        {m.text: {"class": m.text, "modules": [{"name": m.text, "type": m.text}],
                  "parameters": [{"name": m.text, "shape": [2, 2], "requires_grad": "yes"}]}},
        {"a": {}, "b": None, "c": []},
    )
    manifest["models"] = variants[m.number % len(variants)]
    manifest["optimizers"] = {"opt": {"class": m.text, "param_groups": [{"lr": "fast",
                                                                          "params": [None]}]}}
    write_manifest(run_dir, manifest)


def _manifest_bad_version(m: Mutation, run_dir: Path, outside: Path) -> None:
    manifest = load_manifest(run_dir)
    manifest["schema_version"] = ("abc", 99, [1], -1, 0, "2", {"v": 1}, "v1")[m.number % 8]
    write_manifest(run_dir, manifest)


def _manifest_is_directory(m: Mutation, run_dir: Path, outside: Path) -> None:
    (run_dir / "manifest.json").unlink()
    (run_dir / "manifest.json").mkdir()


def _manifest_special_file(m: Mutation, run_dir: Path, outside: Path) -> None:
    """A device that never ends or a FIFO that never opens: reading it must not hang."""
    (run_dir / "manifest.json").unlink()
    if m.number % 3 == 2:
        os.mkfifo(run_dir / "manifest.json")
    else:
        (run_dir / "manifest.json").symlink_to(("/dev/zero", "/dev/urandom")[m.number % 3])


def _segment_special_file(m: Mutation, run_dir: Path, outside: Path) -> None:
    path = pick_segment(run_dir, m.table, m.index)
    path.unlink()
    if m.number % 3 == 2:
        os.mkfifo(path)
    else:
        path.symlink_to(("/dev/zero", "/dev/urandom")[m.number % 3])


def _segment_symlink_outside(m: Mutation, run_dir: Path, outside: Path) -> None:
    """A segment that is a link to a file outside the run (here a text file)."""
    target = outside / f"outside-{m.number}.txt"
    target.write_text("root:x:0:0:root:/root:/bin/bash\n")
    path = pick_segment(run_dir, m.table, m.index)
    path.unlink()
    path.symlink_to(target)


# name -> (mutate, damaging). Shapes that once broke the analyzer have their own tests in
# test_hostile_runs.py.
KINDS = {
    "truncate": (_truncate, True),
    "zero_byte": (_zero_byte, True),
    "random_bytes": (_random_bytes, True),
    "random_bytes_new_segment": (_random_bytes_new_segment, True),
    "wrong_dtype": (_wrong_dtype, True),
    "manifest_missing": (_manifest_missing, True),
    "manifest_garbage": (_manifest_garbage, True),
    "manifest_not_object": (_manifest_not_object, True),
    "manifest_bad_version": (_manifest_bad_version, True),
    "manifest_is_directory": (_manifest_is_directory, True),
    "manifest_special_file": (_manifest_special_file, True),
    "foreign_columns_extra": (_foreign_columns_extra, False),
    "huge_steps": (_huge_steps, False),
    "negative_steps": (_negative_steps, False),
    "duplicate_segment": (_duplicate_segment, False),
    "hostile_names": (_hostile_names, False),
    "hostile_events": (_hostile_events, False),
    "unfinished_write": (_unfinished_write, False),
    "hostile_file_name": (_hostile_file_name, False),
    "table_is_file": (_table_is_file, False),
    "segment_is_directory": (_segment_is_directory, False),
    "symlink_loop": (_symlink_loop, False),
    "dangling_symlink": (_dangling_symlink, False),
    "manifest_wrong_types": (_manifest_wrong_types, False),
    "manifest_models_malformed": (_manifest_models_malformed, False),
    "segment_special_file": (_segment_special_file, False),
    "segment_symlink_outside": (_segment_symlink_outside, False),
}


def copy_run(source: Path, destination: Path) -> Path:
    shutil.copytree(source, destination, symlinks=True)
    return destination
