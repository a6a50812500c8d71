"""Hedgehog's learning phase: attention distillation (Zhang et al., ICLR 2024, §4.2 and their eq. 5).

The procedure the `hedgehog` registry entry names (`Capabilities.learning_phase`); the training loop runs it
before phase B. Every weight but the feature maps' W is frozen and the model runs in evaluation mode; each
batch, forward hooks (`AttentionCapture`) take each Hedgehog layer's (q, k, key_padding_mask), the teacher is
softmax attention on those q and k, and W takes one Adam step down the summed `distillation_loss` of the
layers. Here the model trains from scratch, so the teacher is the model's own softmax attention at its
initial projections (the paper distils a pretrained Transformer's). It reads no label, so it runs in a causal
decoder as well (`causal=True`): there the teacher and the student are the causal (lower-triangular) weights, as
Hedgehog distils its causal language models.

Options (the suite's `training.phase_a`; names shared with the Coulomb phase where they mean the same):
epochs / steps_fraction / max_steps (budget), batch_size, step (Adam's learning rate).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import torch
from torch import nn

from attnbench.attention_capture import AttentionCapture
from attnbench.baselines.hedgehog import HedgehogAttention
from attnbench.errors import ConfigError
from attnbench.options import option, require
from attnbench.progress import Progress
from attnbench.registry import learning_phase_config, register_learning_phase
from attnbench.tasks.base import Split
from attnbench.train import learning_phase_steps


@dataclasses.dataclass
class DistillationConfig:
    """Budget and optimiser of Hedgehog's attention distillation."""

    epochs: float = option(1.0, "passes over the training data (unless steps_fraction or max_steps)")
    steps_fraction: float | None = option(None, "instead: this fraction of all training steps, A + B")
    max_steps: int | None = option(None, "step budget overriding epochs and steps_fraction")
    batch_size: int = option(64, "sequences per distillation step")
    step: float = option(1e-2, "Adam's learning rate for the feature maps' W")

    def __post_init__(self) -> None:
        require(self.epochs > 0, f"phase_a epochs={self.epochs} must be positive")
        require(
            self.steps_fraction is None or 0 < self.steps_fraction < 1,
            f"phase_a steps_fraction={self.steps_fraction} must lie in (0, 1)",
        )
        require(self.max_steps is None or self.max_steps >= 1, f"phase_a max_steps={self.max_steps} must be >= 1")
        require(self.batch_size >= 1, f"phase_a batch_size={self.batch_size} must be at least 1")
        require(self.step > 0, f"phase_a step={self.step} must be positive")

    def budget(self, train_rows: int, phase_b_steps: int | None) -> int:
        """Distillation steps: max_steps, else the steps_fraction of A + B, else epochs x batches per epoch."""
        return learning_phase_steps(self, train_rows, phase_b_steps)


def _layer_losses(modules: list[HedgehogAttention], capture: AttentionCapture) -> list[torch.Tensor]:
    return [m.distillation_loss(q.detach(), k.detach(), mask) for m, (q, k, mask) in zip(modules, capture.inputs)]


@register_learning_phase("hedgehog-distillation", config=DistillationConfig, causal=True)
def distill_hedgehog(
    model: nn.Module,
    train_split: Split,
    options: DistillationConfig | dict[str, Any],
    *,
    device: torch.device | str = "cpu",
    seed: int = 0,
    progress: Progress | None = None,
    validation: Split | None = None,
    phase_b_steps: int | None = None,
) -> dict[str, Any]:
    """Phase A for Hedgehog: train every Hedgehog layer's W to match softmax weights, nothing else; returns the
    budget, time and the distillation loss per layer on the first and the last batch.
    Long: budget, the distillation steps and the losses before and after share the loop's state, as in the
    Coulomb phase A."""
    cfg = learning_phase_config(DistillationConfig, options, "phase_a (hedgehog distillation)")
    modules = [m for m in model.modules() if isinstance(m, HedgehogAttention)]
    if not modules:
        raise ConfigError("hedgehog distillation found no hedgehog attention in the model; drop phase_a")
    budget = cfg.budget(len(train_split), phase_b_steps)
    device = torch.device(device)
    params = [p for m in modules for p in m.learning_phase_parameters()]
    moving = {id(p) for p in params}
    flags = {id(p): p.requires_grad for p in model.parameters()}
    was_training = model.training
    optimizer = torch.optim.Adam(params, lr=cfg.step)
    generator = torch.Generator().manual_seed(seed)
    capture = AttentionCapture(modules)
    first: list[float] = []
    last: list[float] = []
    steps, start = 0, time.perf_counter()
    model.eval()
    try:
        for p in model.parameters():
            p.requires_grad_(id(p) in moving)
        while steps < budget:
            for batch in train_split.batches(cfg.batch_size, shuffle=True, generator=generator):
                with torch.no_grad():
                    capture.run(model, batch, device)
                losses = _layer_losses(modules, capture)
                optimizer.zero_grad(set_to_none=True)
                sum(losses).backward()
                optimizer.step()
                last = [float(loss.detach()) for loss in losses]
                first = first or last
                steps += 1
                if progress is not None:
                    progress("phase A", steps, budget)
                if steps >= budget:
                    break
    finally:
        capture.remove()
        model.train(was_training)
        for p in model.parameters():
            p.requires_grad_(flags[id(p)])
    return {
        "procedure": "hedgehog attention distillation",
        "seconds": time.perf_counter() - start,
        "steps": steps,
        "budget_steps": budget,
        "examples_per_step": cfg.batch_size,
        "loss_first_batch": first,
        "loss_last_batch": last,
        "config": dataclasses.asdict(cfg),
    }
