"""Models that look like the field's, small enough to train in seconds on a CPU.

- `gpt`: `models.TinyGPT` (nanoGPT's causal LM: token + position embeddings, pre-LayerNorm
  blocks of causal self-attention with biases and a GELU MLP, a head tied to the token
  embedding) with nanoGPT's init (`nanogpt_init`).
- `EncoderClassifier`: `torch.nn.TransformerEncoder` over the 8 rows of a digit, mean-pooled.
- `ResNet`: a small residual CNN with BatchNorm (He et al.'s basic block) on 8×8 digits.
- `GRULM`: pytorch/examples' word-language-model shape (embedding → GRU → linear) on characters.

Each model lists its `units`: the modules that partition its parameters in forward order, used to
build one param group per unit (per-block learning rates) and to name what a fault hits; and its
`exposed` layers, whose output reaches the loss (or the recurrence) without a normalisation after
it: scaling their weights changes what the model computes (behind a LayerNorm or BatchNorm the
same scaling is normalised away, and the run shrugs it off).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .models import TinyGPT

__all__ = ["EncoderClassifier", "ResNet", "GRULM", "build_field_model", "nanogpt_init", "FIELD_ARCHS"]


def nanogpt_init(model: TinyGPT) -> TinyGPT:
    """nanoGPT's `_init_weights` on a `TinyGPT`: matrices N(0, 0.02²), the residual projections'
    N(0, (0.02 / sqrt(2·layers))²), biases 0; and the units and exposed layers the faults use."""
    layers = len(model.blocks)
    for name, p in model.named_parameters():  # the tied head is the embedding: named once
        if p.dim() >= 2:
            std = 0.02 / math.sqrt(2 * layers) if name.endswith(("c_proj.weight", "mlp_proj.weight")) else 0.02
            nn.init.normal_(p, 0.0, std)
        elif name.endswith("bias"):
            nn.init.zeros_(p)
    model.units = ["wte", "wpe", *(f"blocks.{i}" for i in range(layers)), "ln_f"]
    model.exposed = ["wte"]  # as the tied head
    return model


class EncoderClassifier(nn.Module):
    """The 8 rows of a digit as 8 tokens of 8 features: linear embedding, learned positions,
    `nn.TransformerEncoder` (pre-norm, GELU, dropout 0.1), mean pooling, a linear head."""

    def __init__(self, dim: int = 32, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Linear(8, dim)
        self.pos = nn.Parameter(torch.zeros(1, 8, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=2 * dim, dropout=0.1, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)
        self.units = ["embed", *(f"encoder.layers.{i}" for i in range(layers)), "norm", "head"]
        self.exposed = ["head"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.encoder(self.embed(x) + self.pos)
        return self.head(self.norm(h).mean(dim=1))


class BasicBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.relu2 = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu2(x + self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x))))))


class ResNet(nn.Module):
    """A stem conv + BatchNorm, `blocks` basic residual blocks, global average pooling, a linear head."""

    def __init__(self, channels: int = 16, blocks: int = 2) -> None:
        super().__init__()
        self.stem = nn.Sequential()
        self.stem.conv = nn.Conv2d(1, channels, 3, padding=1, bias=False)
        self.stem.bn = nn.BatchNorm2d(channels)
        self.stem.relu = nn.ReLU()
        self.blocks = nn.Sequential(*(BasicBlock(channels) for _ in range(blocks)))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(channels, 10)
        self.units = ["stem", *(f"blocks.{i}" for i in range(blocks)), "head"]
        self.exposed = ["head"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(self.blocks(self.stem(x))).flatten(1))


class GRULM(nn.Module):
    """Character LM as in pytorch/examples' word_language_model: embedding → GRU → linear decoder."""

    def __init__(self, vocab: int, dim: int = 32, hidden: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.rnn = nn.GRU(dim, hidden, batch_first=True)
        self.decoder = nn.Linear(hidden, vocab)
        self.units = ["embed", "rnn", "decoder"]
        self.exposed = ["rnn", "decoder"]

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.embed(idx))
        return self.decoder(out)


FIELD_ARCHS = ("gpt", "transformer", "resnet", "gru")
CONTEXT = 32
"""Tokens per sequence of the language models."""


def build_field_model(arch: str, vocab: int) -> nn.Module:
    if arch == "gpt":
        return nanogpt_init(TinyGPT(vocab=vocab, context=CONTEXT, width=32, heads=4, layers=2))
    if arch == "transformer":
        return EncoderClassifier()
    if arch == "resnet":
        return ResNet()
    if arch == "gru":
        return GRULM(vocab)
    raise ValueError(f"unknown field architecture {arch!r}")
