"""The recorder's device path reads back to the host a fixed number of times per step, however
many tensors the model has: on a GPU each read is a host synchronisation. No GPU is needed:
host tensors are sent down the device path by making `Tensor.is_cpu` answer False (and the
fused host kernel unavailable), and every read the recorder's own code makes is counted."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from recorders import Recorder
from recorders import statistics as recorder_statistics
from recorders.statistics import MomentBatch, exact_moments, row_moments
from sample_runs import nanogpt
from sample_runs.models import TinyGPT

RECORDERS = str(Path(recorder_statistics.__file__).parent)
READS = ("item", "tolist", "numpy", "cpu", "__float__", "__int__", "__bool__", "__index__")


@pytest.fixture
def host_reads(monkeypatch):
    """Counts the reads back to the host made from code in recorders/."""
    counter = {"reads": 0}
    for name in READS:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, **kwargs):
            if sys._getframe(1).f_code.co_filename.startswith(RECORDERS):
                counter["reads"] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return counter


@pytest.fixture
def device_path(monkeypatch):
    monkeypatch.setattr(recorder_statistics, "_fused", None)
    monkeypatch.setattr(torch.Tensor, "is_cpu", property(lambda self: False))


def awkward(n: int) -> list[tuple[torch.Tensor, dict]]:
    """Tensors the fast path cannot settle alone: constant ones (the variance cancels), ones
    holding a -0.0 (the zero count on the bits misses it), sigmoid outputs at the bounds."""
    g = torch.Generator().manual_seed(n)
    out = []
    for i in range(n):
        signed_zero = torch.randn(50, generator=g)
        signed_zero[:i + 1] = -0.0
        out += [(torch.full((40,), 1.0 + i), {"sums": True}),
                (signed_zero, {"zeros": True}),
                (torch.rand(30, generator=g) * 0.02 + 0.985, {"saturation": "sigmoid"})]
    return out


@pytest.mark.parametrize("n", [2, 12])
def test_a_batch_reads_back_twice_whatever_its_size(n, device_path, host_reads):
    tensors = awkward(n)
    batch = MomentBatch()
    for t, options in tensors:
        batch.add(t, **options)
    rows, _ = batch.read()
    assert host_reads["reads"] == 2  # the fast path's results, then every re-read together
    for row, (t, options) in zip(rows, tensors):
        reference = exact_moments(t, sums=options.get("sums", False),
                                  zeros=options.get("zeros", False),
                                  saturation=options.get("saturation"))
        got = row_moments(row)
        assert (got.numel, got.finite, got.nonfinite) == (reference.numel, reference.finite, 0)
        assert got.sumsq == pytest.approx(reference.sumsq, rel=1e-5)
        if options.get("sums"):
            assert got.sum == pytest.approx(reference.sum, rel=1e-6)
        if options.get("zeros"):
            assert got.zeros == reference.zeros
        if options.get("saturation"):
            assert got.saturated == reference.saturated > 0


def reads_per_step(tmp_path: Path, layers: int, counter: dict) -> float:
    """Host reads per recorded step of nanoGPT's loop on a TinyGPT of `layers` blocks (its
    LayerNorm weights stay near 1.0, so their variance cancels, and their gradients hold -0.0s)."""
    torch.manual_seed(0)
    config = nanogpt.LoopConfig(steps=1, eval_every=0)
    model = TinyGPT(vocab=config.vocab, context=config.context, layers=layers)
    opt = nanogpt.make_optimizer(model, config)
    with Recorder(tmp_path / f"run{layers}", model, opt) as rec:
        nanogpt.train(model, opt, config, rec=rec)  # the first record follows every tensor
        before = counter["reads"]
        nanogpt.train(model, opt, nanogpt.LoopConfig(steps=4, eval_every=0, seed=1), rec=rec)
        return (counter["reads"] - before) / 4


def test_the_recorder_reads_back_per_step_not_per_tensor(tmp_path, device_path, host_reads):
    assert reads_per_step(tmp_path, 1, host_reads) == reads_per_step(tmp_path, 4, host_reads)
