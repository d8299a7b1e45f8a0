import pytest
import torch


@pytest.fixture(autouse=True)
def _small_torch():
    torch.set_num_threads(1)
    torch.manual_seed(0)


@pytest.fixture(params=["fused", "torch"])
def backend(request, monkeypatch):
    """Run a test with the fused host kernel and again with torch's kernels alone (what an
    install built without a C++ compiler uses)."""
    from recorders import statistics

    if request.param == "torch":
        monkeypatch.setattr(statistics, "_fused", None)
    return request.param
