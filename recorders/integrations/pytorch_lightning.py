"""Record a Lightning 2.x run: ``Trainer(callbacks=[PostmortemCallback("runs/x")])``.

For the ``pytorch_lightning`` package; ``recorders.integrations.lightning`` has the same callback
for ``lightning.pytorch``. What it records is described in
:class:`recorders.integrations._lightning.LightningRecording`.
"""

from __future__ import annotations

from ._common import require
from ._lightning import LightningRecording

require(__name__, "pytorch_lightning", "lightning")
from pytorch_lightning import Callback  # noqa: E402 - after the one-line error above

__all__ = ["PostmortemCallback"]


class PostmortemCallback(LightningRecording, Callback):
    __doc__ = LightningRecording.__doc__
