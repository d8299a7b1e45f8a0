"""postmortem must work where torch cannot be imported."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from sample_runs.synthetic import SyntheticSpec, write_synthetic_run

ROOT = Path(__file__).resolve().parents[2]


def test_postmortem_never_imports_torch(tmp_path):
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
        import postmortem
        from postmortem import analysis, detectors, loading, models, onset, ranking, series, story
        result = postmortem.analyze({str(run)!r})
        assert result.verdict == "diverged", result.verdict
        assert not any(name == "torch" or name.startswith("torch.") for name in sys.modules)
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("ok")
