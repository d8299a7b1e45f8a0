"""End-to-end: a short training loop writes every table of docs/run-format.md."""

import pyarrow.parquet as pq
import torch
from torch import nn

from recorders import Recorder

from recorder_helpers import read_manifest, read_table


def test_small_cnn_run_writes_every_table(tmp_path):
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.LeakyReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    run = tmp_path / "run"
    with Recorder(run, model, opt, flush_every=4, checkpoint_every=5, config={"seed": 0}) as rec:
        for i in range(10):
            x, y = torch.randn(8, 1, 8, 8), torch.randint(0, 3, (8,))
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            rec.step(loss=loss, inputs=x, targets=y)
            if i == 4:
                rec.event("domain_switch", "now domain B")

    stats = read_table(run, "stats")
    assert sorted(stats.step.unique()) == list(range(10))
    assert set(stats.role) == {"param", "grad", "update", "state", "activation", "input", "target"}
    assert set(stats[stats.role == "activation"].name) == {"0", "1", "2", "3"}
    assert set(stats[stats.role == "state"].key) == {"momentum_buffer"}
    scalars = read_table(run, "scalars")
    assert {"loss", "grad_norm", "lr", "wall_time", "hp.optimizer.0.momentum"} <= set(scalars.name)
    events = read_table(run, "events")
    assert events[["step", "kind"]].values.tolist() == [[5, "domain_switch"]]
    assert len(list((run / "stats").glob("part-*.parquet"))) == 3  # 4 + 4 + 2 steps
    ckpt = pq.read_table(run / "checkpoints" / "step-00000005.parquet")
    assert ckpt.schema.metadata[b"reason"] == b"scheduled"
    manifest = read_manifest(run)
    assert manifest["status"] == "completed"
    assert manifest["last_step"] == 9
    assert manifest["config"] == {"seed": 0}
