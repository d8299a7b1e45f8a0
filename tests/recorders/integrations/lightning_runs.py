"""Real Lightning runs for the integration tests: a small classifier (automatic optimisation)
and a small GAN (manual optimisation, two optimizers), on the CPU."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

EXAMPLES, FEATURES, CLASSES = 512, 10, 3


def classification_data(seed: int = 0) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(EXAMPLES, FEATURES, generator=g)
    y = (x @ torch.randn(FEATURES, CLASSES, generator=g)).argmax(1)
    return torch.utils.data.TensorDataset(x, y)


def loader(dataset, batch_size: int = 16) -> torch.utils.data.DataLoader:
    return torch.utils.data.DataLoader(dataset, batch_size=batch_size)


def modules(pl):
    """The test modules, built on the Lightning package `pl` (lightning.pytorch or
    pytorch_lightning)."""

    class Classifier(pl.LightningModule):
        """SGD with a per-step StepLR schedule; keeps the loss of every training batch and the
        gradient norm of every step."""

        def __init__(self, lr: float = 0.2, fail_at: int | None = None) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.save_hyperparameters()
            self.net = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, CLASSES))
            self.batch_losses: list[float] = []
            self.grad_norms: list[float] = []  # before Lightning clips them

        def training_step(self, batch, batch_idx):
            if self.global_step == self.hparams.fail_at:
                raise RuntimeError(f"injected failure at step {self.global_step}")
            x, y = batch
            loss = nn.functional.cross_entropy(self.net(x), y)
            self.batch_losses.append(loss.item())
            return loss

        def on_before_optimizer_step(self, optimizer):
            self.grad_norms.append(sum(p.grad.pow(2).sum() for p in self.parameters()).item() ** 0.5)

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_loss", nn.functional.cross_entropy(self.net(x), y))

        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
            steps = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.8)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": steps, "interval": "step"}}

    class GAN(pl.LightningModule):
        """A generator learning a shifted 2-D Gaussian against a discriminator, both Adam,
        stepped by hand in training_step (manual optimisation); with `forget_steps` neither
        ``opt.step()`` is called (the bug)."""

        def __init__(self, forget_steps: bool = False) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.forget_steps = forget_steps
            self.automatic_optimization = False
            self.generator = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
            self.discriminator = nn.Sequential(nn.Linear(2, 16), nn.LeakyReLU(0.2),
                                               nn.Linear(16, 1))

        def training_step(self, batch, batch_idx):
            (real,) = batch
            opt_g, opt_d = self.optimizers()
            bce = nn.functional.binary_cross_entropy_with_logits
            noise = torch.randn(len(real), 4)
            fake = self.generator(noise)
            ones, zeros = torch.ones(len(real), 1), torch.zeros(len(real), 1)

            loss_d = (bce(self.discriminator(real), ones)
                      + bce(self.discriminator(fake.detach()), zeros)) / 2
            opt_d.zero_grad()
            self.manual_backward(loss_d)
            if not self.forget_steps:
                opt_d.step()

            loss_g = bce(self.discriminator(fake), ones)
            opt_g.zero_grad()
            self.manual_backward(loss_g)
            if not self.forget_steps:
                opt_g.step()
            return {"loss_d": loss_d.detach(), "loss_g": loss_g.detach()}

        def configure_optimizers(self):
            return (torch.optim.Adam(self.generator.parameters(), lr=2e-3, betas=(0.5, 0.999)),
                    torch.optim.Adam(self.discriminator.parameters(), lr=2e-3, betas=(0.5, 0.999)))

    class ClosureOnly(Classifier):
        """Overrides ``optimizer_step`` and runs only the closure (forward and backward):
        ``optimizer.step()`` is never called."""

        def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
            optimizer_closure()

    class LearningRateBlowUp(pl.Callback):
        """Rewrites the lr of every optimizer to `lr` before each batch from `step` on."""

        def __init__(self, step: int, lr: float) -> None:
            self.step, self.lr = step, lr

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if trainer.global_step >= self.step:
                for optimizer in trainer.optimizers:
                    for group in optimizer.param_groups:
                        group["lr"] = self.lr

    return Classifier, GAN, LearningRateBlowUp, ClosureOnly


def real_points(seed: int = 0) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(seed)
    return torch.utils.data.TensorDataset(torch.randn(EXAMPLES, 2, generator=g) * 0.5 + 2.0)


def trainer(pl, callback, *, epochs: int = 2, **options):
    return pl.Trainer(max_epochs=epochs, accelerator="cpu", devices=1, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, num_sanity_val_steps=0,
                      callbacks=[callback, *options.pop("callbacks", ())], **options)


def fit(pl, callback_class, run: Path, module, data, val=None, **options):
    torch.manual_seed(0)
    torch.set_num_threads(1)  # two threads contend with anything else on a 2-core machine
    trainer(pl, callback_class(run), **options).fit(module, loader(data),
                                                    None if val is None else loader(val, 128))
    return module
