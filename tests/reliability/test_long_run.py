"""Long runs: the number of files in a run directory must stay bounded (compaction).

The 100 000-step measurement (memory and files) is benchmarks/long_run.py; this is the cheap
version: 800 steps flushed every 5 steps would leave 160 segments per table without compaction.
"""

from __future__ import annotations

import torch
from torch import nn

import pytest
from recorders import Recorder

STEPS, FLUSH_EVERY = 800, 5
MAX_SEGMENTS_PER_TABLE = 50  # any compaction keeps far fewer than one file per flush


def test_segment_count_stays_bounded(tmp_path):
    torch.manual_seed(0)
    model = nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(8, 4), torch.randn(8, 4)
    with Recorder(tmp_path / "run", model, optimizer, flush_every=FLUSH_EVERY,
                  checkpoint_every=0) as rec:
        for _ in range(STEPS):
            optimizer.zero_grad()
            ((model(x) - y) ** 2).mean().backward()
            optimizer.step()
            rec.step()
    counts = {table: len(list((tmp_path / "run" / table).glob("part-*.parquet")))
              for table in ("stats", "scalars")}
    assert all(0 < n <= MAX_SEGMENTS_PER_TABLE for n in counts.values()), counts
