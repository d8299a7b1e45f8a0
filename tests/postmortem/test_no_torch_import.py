"""postmortem, reports and the command line (and recorders.vocabulary, the run format they share)
must work where torch cannot be imported."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from sample_runs.synthetic import SyntheticSpec, write_synthetic_run

ROOT = Path(__file__).resolve().parents[2]


def test_analyzer_and_renderer_never_import_torch(tmp_path):
    # Written here: the sample_runs package itself imports torch.
    run = write_synthetic_run(tmp_path / "run", SyntheticSpec(steps=200, tensors=20, onset=150,
                                                              nan_at=160, steps_per_segment=50))
    code = textwrap.dedent(
        f"""
        import sys

        class BlockTorch:  # a meta-path finder: any `import torch` raises ImportError
            def find_spec(self, name, path=None, target=None):
                if name == "torch" or name.startswith("torch."):
                    raise ImportError("blocked in this test: " + name)
                return None

        sys.meta_path.insert(0, BlockTorch())
        sys.path.insert(0, {str(ROOT)!r})
        import importlib, pkgutil
        import recorders.vocabulary, postmortem, postmortem_cli, reports
        for package in (postmortem, reports, postmortem_cli):  # every module, not only __init__.py's
            for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
                if not module.name.endswith(".__main__"):  # that one runs the command line
                    importlib.import_module(module.name)
        result = postmortem.analyze({str(run)!r})
        assert result.verdict == "diverged", result.verdict
        assert "<html" in reports.render_html(reports.build_page(result))
        assert not any(name == "torch" or name.startswith("torch.") for name in sys.modules)
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("ok")
