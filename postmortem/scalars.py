"""Which scalar is what: the recorder's own, a loss, the main loss. One rule each, used by the
detectors, the ranking and the report alike."""

from __future__ import annotations

import numpy as np
import pandas as pd

from recorders.vocabulary import is_reserved_scalar

__all__ = ["recorder_scalar", "is_agent_outcome", "is_loss", "is_eval_loss", "main_loss", "loss_curve", "metric_direction",
           "raised"]


def recorder_scalar(name: str) -> bool:
    """What the recorder writes itself (its reserved names, and the learning rate), never a metric."""
    return name == "lr" or is_reserved_scalar(name)


def is_loss(name: str) -> bool:
    """A loss passed to `rec.step()`: its name says so (`loss`, `loss_d`, `val_loss`, `user.loss`);
    an accuracy or a score is not one."""
    return "loss" in name and not recorder_scalar(name)


def _is_eval(name: str) -> bool:
    return name.startswith(("val", "eval", "test"))


def main_loss(scalars: pd.DataFrame) -> str | None:
    """The main loss (`loss`, or the only training loss).

    Several losses and none called `loss` means adversarial training (loss_d, loss_g): those
    losses are not meant to go down, so no detector reads progress from them.
    """
    names = [str(n) for n in scalars["name"].unique() if is_loss(str(n)) and not _is_eval(str(n))]
    if "loss" in names:
        return "loss"
    return names[0] if len(names) == 1 else None


def is_eval_loss(name: str) -> bool:
    return is_loss(name) and _is_eval(name)


def raised(level: float, factor: float) -> float:
    """`level` raised by `factor` − 1 of its own size: `factor`·level for a positive loss, and as far
    above a negative one (a flow's NLL in nats, −0.45), where `factor`·level would lie below it."""
    return level + (factor - 1) * abs(level)


def loss_curve(scalars: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Steps and finite values of the main loss (empty when there is none)."""
    name = main_loss(scalars)
    if name is None:
        return np.zeros(0, np.int64), np.zeros(0)
    rows = scalars[scalars["name"] == name]
    steps, values = rows["step"].to_numpy(np.int64), rows["value"].to_numpy(np.float64)
    keep = np.isfinite(values)
    return steps[keep], values[keep]


AGENT_OUTCOMES = ("reward", "return")
"""Words of an agent's outcome, its reward or episodic return (CleanRL's `episodic_return`)."""
HIGHER_IS_BETTER = ("acc", "top1", "top5", "top_1", "top_5", "f1", "auc", "score", "bleu", *AGENT_OUTCOMES, "iou",
                    "dice", "hits", "mrr", "recall", "precision", "ndcg", "ap50", "ap75", "ap_50", "ap_75", "mean_ap",
                    "map50", "map75", "map_50", "map_75", "mAP", "AP50", "AP75")
"""Words of a metric that rises as a run learns: accuracies (timm's train.py logs them as `top1`
and `top5`) and scores, an agent's reward, the ranking metrics of retrieval, recommenders and
link prediction (PyKEEN's `hits_at_10`, MRR), a detector's average precision (detectron2's
`bbox/AP50`, torchmetrics' `map_50`, MMDetection's `bbox_mAP`)."""
LOWER_IS_BETTER = ("distance", "wasserstein", "fid", "perplexity", "error", "mean_rank", "mape", "mae", "mse",
                   "wql", "crps", "mase", "msis")
"""Words of a metric that falls as a run learns, besides evaluation losses: a generator's
distance to the data (sliced Wasserstein, FID), a language model's perplexity, an error rate,
a link predictor's mean rank, a forecaster's or regressor's error (sMAPE, MAPE, MAE, (R)MSE) and
a probabilistic forecaster's (GluonTS's Evaluator: weighted quantile loss, CRPS, MASE, MSIS)."""


DIAGNOSTIC = ("codebook",)
"""Words of a statistic about the model's own parts, not its objective: a VQ-VAE's codebook
perplexity rises as more codes are used (and rises by the codebook's EMA alone, with no
optimizer step), the opposite of a language model's perplexity."""


def is_agent_outcome(name: str) -> bool:
    """An agent's reward or return: the outcome of a run whose loss is a surrogate."""
    return metric_direction(name) is True and any(word in name for word in AGENT_OUTCOMES)


def metric_direction(name: str) -> bool | None:
    """True where `name` is a metric that rises as the run learns, False where it falls (an
    evaluation loss, a distance), None where it is no outcome metric (the recorder's own
    scalars, training losses, a diagnostic of the model's parts, anything unnamed by these words)."""
    if recorder_scalar(name) or any(word in name for word in DIAGNOSTIC):
        return None
    if any(word in name for word in HIGHER_IS_BETTER):
        return True
    if is_eval_loss(name) or (not is_loss(name) and any(word in name for word in LOWER_IS_BETTER)):
        return False
    return None
