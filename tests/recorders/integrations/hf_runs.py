"""Real Hugging Face Trainer runs for the integration tests: a two-layer GPT-2 built from its
config (nothing downloaded) learning synthetic token sequences on the CPU."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import (GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback,
                          TrainingArguments)

from recorders.integrations.transformers import PostmortemCallback

VOCAB = 64
SEQUENCE = 16


class CountingSequences(torch.utils.data.Dataset):
    """Token sequences that count up from a random start (mod VOCAB): learnable in a few steps."""

    def __init__(self, n: int, seed: int = 1) -> None:
        g = torch.Generator().manual_seed(seed)
        start = torch.randint(0, VOCAB, (n, 1), generator=g)
        self.tokens = (start + torch.arange(SEQUENCE)) % VOCAB

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        x = self.tokens[i]
        return {"input_ids": x, "attention_mask": torch.ones_like(x), "labels": x}


def tiny_gpt2() -> GPT2LMHeadModel:
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB,
                                      n_positions=SEQUENCE, bos_token_id=0, eos_token_id=0))


class LearningRateBlowUp(TrainerCallback):
    """Rewrites the optimizer's lr to `lr` before every optimizer step from `step` on (the
    scheduler would reset a single rewrite)."""

    def __init__(self, step: int, lr: float) -> None:
        self.step, self.lr = step, lr

    def on_step_begin(self, args, state, control, optimizer=None, **kwargs):
        if state.global_step >= self.step:
            for group in optimizer.param_groups:
                group["lr"] = self.lr


class RaiseAtStep(TrainerCallback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise RuntimeError(f"injected failure at global step {self.step}")


def train(run_dir: Path, *, examples: int = 128, epochs: int = 2, accumulation: int = 2,
          callbacks: tuple = (), **arguments) -> Trainer:
    """Train the tiny GPT-2 with the PostmortemCallback; returns the Trainer."""
    torch.set_num_threads(1)  # two threads contend with anything else on a 2-core machine
    args = TrainingArguments(
        output_dir=str(Path(run_dir).parent / f"{Path(run_dir).name}-trainer"),
        per_device_train_batch_size=8, gradient_accumulation_steps=accumulation,
        num_train_epochs=epochs, learning_rate=5e-3, logging_steps=2, eval_strategy="epoch",
        save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True, seed=0,
        **arguments)
    trainer = Trainer(model=tiny_gpt2(), args=args, train_dataset=CountingSequences(examples),
                      eval_dataset=CountingSequences(16, seed=2),
                      callbacks=[PostmortemCallback(run_dir), *callbacks])
    trainer.train()
    return trainer


if __name__ == "__main__":  # a run that dies of an uncaught exception (test_transformers.py)
    import sys

    train(Path(sys.argv[1]), callbacks=(RaiseAtStep(int(sys.argv[2])),))
