import sys
from pathlib import Path

import pytest
import torch

from reliability_cases import record_tiny_run

ROOT = Path(__file__).resolve().parents[2]
# benchmarks/ is not a package; its scripts are imported by name (the crash campaign's
# children are forked from a forkserver that imports `crash_campaign` the same way).
sys.path.append(str(ROOT / "benchmarks"))


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """One small real run, recorded once per session; tests copy it and damage the copy."""
    torch.set_num_threads(1)
    return record_tiny_run(tmp_path_factory.mktemp("tiny") / "run")
