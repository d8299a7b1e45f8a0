import pytest
import torch


@pytest.fixture(autouse=True)
def _small_torch():
    torch.set_num_threads(1)
    torch.manual_seed(0)
