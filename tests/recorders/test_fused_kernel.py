"""The fused host kernel itself: built by the dev install, safe under OpenMP thread limits.

Its statistics are checked against the reference in test_statistics.py, with and without it.
"""

import os
import subprocess
import sys

import pytest


def test_fused_kernel_is_built():
    """The dev install compiles the kernel; without it CPU runs silently lose their speed."""
    from recorders import _fused  # noqa: F401


@pytest.mark.parametrize("limit", ["1", "3"])
def test_every_part_runs_when_openmp_grants_fewer_threads(limit):
    """Asked for 4 threads but limited by the OpenMP runtime, each granted thread strides over
    the parts, so no part of a tensor goes unmeasured or uncopied."""
    code = """
import numpy as np, torch
torch.set_num_threads(4)
from recorders.statistics import params_and_updates, summarize
x = np.random.default_rng(0).standard_normal(1_000_000).astype(np.float32)
prev = torch.from_numpy(x + 1)
(m,), (u,) = params_and_updates([(torch.from_numpy(x), prev)])
assert abs(summarize(m).norm - np.sqrt((x.astype(np.float64) ** 2).sum())) < 1e-4 * summarize(m).norm
assert abs(summarize(u).norm - 1000.0) < 1e-3 and (prev.numpy() == x).all()
"""
    env = {**os.environ, "OMP_THREAD_LIMIT": limit}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
