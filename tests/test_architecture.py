"""Which package may import which (docs/architecture.md), read from the source: every import
statement counts, also one inside a function that a test run might never reach."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def imported_packages(path: Path) -> set[str]:
    """Top-level names of the absolute imports in `path` (relative ones stay in the package)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_the_recorder_imports_only_torch_pyarrow_numpy_and_the_stdlib():
    allowed = set(sys.stdlib_module_names) | {"torch", "pyarrow", "numpy", "recorders"}
    # recorders/integrations/ are callbacks for a framework, each importing the one it serves.
    modules = [p for p in (ROOT / "recorders").rglob("*.py") if "integrations" not in p.parts]
    assert len(modules) > 10
    wrong = {str(p.relative_to(ROOT)): sorted(imported_packages(p) - allowed) for p in modules}
    assert not {path: names for path, names in wrong.items() if names}


def test_imported_packages_sees_imports_inside_functions(tmp_path):
    source = tmp_path / "module.py"
    source.write_text("import os\nfrom . import sibling\ndef f():\n    from reports.page import Page\n")
    assert imported_packages(source) == {"os", "reports"}


def test_the_analysis_library_never_imports_its_renderer_or_its_command_line():
    # postmortem/__main__.py is exempt: `python -m postmortem` must start the command line, and
    # the library never imports that file (docs/architecture.md).
    modules = [p for p in (ROOT / "postmortem").rglob("*.py") if p.name != "__main__.py"]
    assert len(modules) > 10
    wrong = {str(p.relative_to(ROOT)): sorted(imported_packages(p) & {"reports", "postmortem_cli"})
             for p in modules}
    assert not {path: names for path, names in wrong.items() if names}


def test_the_renderer_never_imports_the_command_line():
    wrong = [str(p.relative_to(ROOT)) for p in (ROOT / "reports").rglob("*.py")
             if "postmortem_cli" in imported_packages(p)]
    assert not wrong
