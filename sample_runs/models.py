"""Small models for the sample runs. Every layer is a named attribute so tensor names read well (`fc2.weight`)."""
from __future__ import annotations

import torch
from torch import nn

__all__ = [
    "MLP",
    "CNN",
    "LSTMClassifier",
    "LinearRegressor",
    "DeepMLP",
    "Generator",
    "Discriminator",
    "TinyGPT",
    "build_classifier",
    "weight_layers",
]


class MLP(nn.Module):
    """Digits as 64 features → 10 classes."""

    def __init__(self, hidden: int = 64) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, hidden)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(hidden, hidden)
        self.act2 = nn.ReLU()
        self.fc3 = nn.Linear(hidden, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(self.act2(self.fc2(self.act1(self.fc1(x)))))


class CNN(nn.Module):
    """Seed 000's network: two conv layers with LeakyReLU, then two linear layers, on 28×28 images."""

    def __init__(self, channels: tuple[int, int] = (8, 16), hidden: int = 64) -> None:
        super().__init__()
        c1, c2 = channels
        self.conv1 = nn.Conv2d(1, c1, 3, padding=1)
        self.act1 = nn.LeakyReLU(0.01)
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(c1, c2, 3, padding=1)
        self.act2 = nn.LeakyReLU(0.01)
        self.pool2 = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(c2 * 7 * 7, hidden)
        self.act3 = nn.LeakyReLU(0.01)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.pool1(self.act1(self.conv1(x)))
        h = self.pool2(self.act2(self.conv2(h)))
        return self.fc2(self.act3(self.fc1(h.flatten(1))))


class LSTMClassifier(nn.Module):
    """Digits read row by row: an 8-step sequence of 8 features → 10 classes."""

    def __init__(self, hidden: int = 32) -> None:
        super().__init__()
        self.lstm = nn.LSTM(8, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.fc(out[:, -1])


class LinearRegressor(nn.Module):
    """Seed 002's `nn.Linear(1, 1)`, wrapped so its parameters are named `fc.weight` and `fc.bias`."""

    def __init__(self, features: int = 1) -> None:
        super().__init__()
        self.fc = nn.Linear(features, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


class DeepMLP(nn.Module):
    """Seed 003's deep net: `depth` Linear + activation blocks named fc0/act0 … then a head."""

    def __init__(self, depth: int = 8, width: int = 64, activation: type[nn.Module] = nn.Tanh,
                 features: int = 64, outputs: int = 10) -> None:
        super().__init__()
        self.depth = depth
        for i in range(depth):
            setattr(self, f"fc{i}", nn.Linear(features, width))
            setattr(self, f"act{i}", activation())
            features = width
        self.head = nn.Linear(width, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(self.depth):
            x = getattr(self, f"act{i}")(getattr(self, f"fc{i}")(x))
        return self.head(x)


class Generator(nn.Module):
    def __init__(self, noise: int = 8, hidden: int = 64) -> None:
        super().__init__()
        self.fc1 = nn.Linear(noise, hidden)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(hidden, hidden)
        self.act2 = nn.ReLU()
        self.fc3 = nn.Linear(hidden, 2)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.fc3(self.act2(self.fc2(self.act1(self.fc1(z)))))


class Discriminator(nn.Module):
    """Outputs logits, or probabilities through a `Sigmoid` module when `probabilities` (seed 001's bug)."""

    def __init__(self, hidden: int = 64, probabilities: bool = False) -> None:
        super().__init__()
        self.fc1 = nn.Linear(2, hidden)
        self.act1 = nn.LeakyReLU(0.2)
        self.fc2 = nn.Linear(hidden, hidden)
        self.act2 = nn.LeakyReLU(0.2)
        self.fc3 = nn.Linear(hidden, 1)
        self.sigmoid = nn.Sigmoid() if probabilities else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.fc3(self.act2(self.fc2(self.act1(self.fc1(x)))))
        return self.sigmoid(out) if self.sigmoid is not None else out


class CausalSelfAttention(nn.Module):
    """nanoGPT's attention: one projection to q, k, v (with biases), causal softmax, output
    projection."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = (t.view(batch, length, self.heads, width // self.heads).transpose(1, 2)
                   for t in self.c_attn(x).split(width, dim=2))
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(batch, length, width))


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads)
        self.ln_2 = nn.LayerNorm(width)
        self.c_fc = nn.Linear(width, 4 * width)
        self.gelu = nn.GELU()
        self.mlp_proj = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp_proj(self.gelu(self.c_fc(self.ln_2(x))))


class TinyGPT(nn.Module):
    """A nanoGPT-style language model: token and position embeddings, pre-LayerNorm blocks of
    causal self-attention and an MLP, a final LayerNorm and a head tied to the token embedding
    (`lm_head.weight is wte.weight`)."""

    def __init__(self, vocab: int = 64, context: int = 16, width: int = 32, heads: int = 2,
                 layers: int = 2) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def build_classifier(arch: str) -> nn.Module:
    if arch == "mlp":
        return MLP()
    if arch == "cnn":
        return CNN()
    if arch == "lstm":
        return LSTMClassifier()
    raise ValueError(f"unknown architecture {arch!r}")


def weight_layers(model: nn.Module) -> list[str]:
    """Names of the modules that own a `weight` (or LSTM weights), in definition order."""
    names = []
    for name, module in model.named_modules():
        own = [p for p, _ in module.named_parameters(recurse=False)]
        if name and any(p.startswith("weight") for p in own):
            names.append(name)
    return names
