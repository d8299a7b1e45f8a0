"""Callbacks that record a run trained by a framework's own loop.

- ``recorders.integrations.transformers.PostmortemCallback``: the Hugging Face ``Trainer``
  (``pip install 'postmortem[transformers]'``).
- ``recorders.integrations.lightning.PostmortemCallback``: Lightning 2.x (``lightning.pytorch``);
  ``recorders.integrations.pytorch_lightning`` for the ``pytorch_lightning`` package
  (``pip install 'postmortem[lightning]'``).

Importing ``recorders`` or this package imports no framework; each module imports its own.
"""
