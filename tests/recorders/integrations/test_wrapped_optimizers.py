"""Optimizers that frameworks wrap, and hooks that cannot be installed."""

import subprocess
import sys
import warnings

import pytest
import torch
from torch import nn

from recorder_helpers import read_manifest, read_table
from recorders import Recorder, RecorderWarning


def _train(run, model, optimizer, steps=3):
    with Recorder(run, model, optimizer) as rec:
        for _ in range(steps):
            optimizer.zero_grad()
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            optimizer.step()
            rec.step(loss=loss)


def test_accelerated_optimizer_is_unwrapped(tmp_path):
    from accelerate import Accelerator
    from accelerate.optimizer import AcceleratedOptimizer

    model = nn.Linear(4, 2)
    wrapped = Accelerator(cpu=True).prepare_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    assert isinstance(wrapped, AcceleratedOptimizer)
    _train(tmp_path / "run", model, wrapped)
    manifest = read_manifest(tmp_path / "run")
    assert manifest["status"] == "completed" and manifest["optimizers"]["optimizer"]["class"] == "SGD"
    grads = read_table(tmp_path / "run", "stats").query("role == 'grad'")
    assert len(grads) == 3 * 2 and not grads["norm"].isna().any()


def test_lightning_optimizer_in_a_dict_is_unwrapped(tmp_path):
    from lightning.pytorch.core.optimizer import LightningOptimizer

    model = nn.Linear(4, 2)
    inner = torch.optim.Adam(model.parameters(), lr=0.01)
    wrapped = LightningOptimizer(inner)
    assert isinstance(wrapped, torch.optim.Optimizer)  # passes as one, without its hook tables
    with Recorder(tmp_path / "run", model, {"adam": wrapped}) as rec:
        loss = model(torch.randn(8, 4)).pow(2).mean()
        loss.backward()
        inner.step()
        rec.step(loss=loss)
    state = read_table(tmp_path / "run", "stats").query("role == 'state'")
    assert set(state["key"]) == {"exp_avg", "exp_avg_sq"}


class _NoHooks(torch.optim.SGD):
    """An optimizer whose step hooks cannot be installed."""

    def register_step_pre_hook(self, hook):
        raise RuntimeError("this optimizer takes no hooks")


def test_a_hook_that_cannot_be_installed_is_one_warning(tmp_path):
    model = nn.Linear(4, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _train(tmp_path / "run", model, _NoHooks(model.parameters(), lr=0.1))
    ours = [w for w in caught if issubclass(w.category, RecorderWarning)]
    assert len(ours) == 1 and "this optimizer takes no hooks" in str(ours[0].message)
    manifest = read_manifest(tmp_path / "run")
    assert manifest["status"] == "completed" and manifest["last_step"] == 2
    assert any("optimizer" in where for where in manifest["measure_errors"])


def test_importing_recorders_imports_no_framework():
    code = ("import sys, recorders, recorders.integrations; "
            "print(sorted(m for m in ('transformers', 'accelerate', 'lightning', "
            "'pytorch_lightning') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=120)
    assert done.stdout.strip() == "[]"


def test_unknown_recorder_option_is_refused_when_the_callback_is_built(tmp_path):
    from recorders.integrations.lightning import PostmortemCallback

    with pytest.raises(TypeError, match="flush_evry"):
        PostmortemCallback(tmp_path / "run", flush_evry=10)
