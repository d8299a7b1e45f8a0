"""Record a Lightning 2.x run: ``Trainer(callbacks=[PostmortemCallback("runs/x")])``.

For ``lightning.pytorch``; ``recorders.integrations.pytorch_lightning`` has the same callback for
the ``pytorch_lightning`` package. What it records is described in
:class:`recorders.integrations._lightning.LightningRecording`.
"""

from __future__ import annotations

from ._common import require
from ._lightning import LightningRecording

require(__name__, "lightning.pytorch", "lightning")
from lightning.pytorch import Callback  # noqa: E402 - after the one-line error above

__all__ = ["PostmortemCallback"]


class PostmortemCallback(LightningRecording, Callback):
    __doc__ = LightningRecording.__doc__
