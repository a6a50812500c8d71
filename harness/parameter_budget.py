"""LRA's parameter rule: every model within a tolerance (LRA: 10%) of the softmax Transformer's parameter count.

Tay et al. (2021) sized each efficient Transformer to about the vanilla model's parameters so that scores
compare mechanisms, not capacity. Here the reference is the same model (same config, same task, so the
same two-tower head where the task has one) with softmax attention; each cell records the ratio and
whether it keeps the rule, and the LRA table flags the cells that break it.
"""

from __future__ import annotations

from typing import Any

import torch

from attnbench.model import ModelConfig
from attnbench.tasks.base import TaskData
from attnbench.two_tower import build_classifier

SOFTMAX = "softmax"


def parameter_total(model: Any) -> int:
    """Parameters of a model (every tensor nn.Module.parameters() yields, frozen ones included)."""
    return sum(p.numel() for p in model.parameters())


def softmax_parameter_count(cfg: ModelConfig, task: TaskData, seed: int = 0) -> int:
    """Parameters of the softmax Transformer the task and config build (the rule's reference)."""
    with torch.random.fork_rng(devices=[]):  # building seeds torch's generator: leave the caller's stream alone
        return parameter_total(build_classifier(cfg, task, SOFTMAX, {}, seed))


def parameter_rule(total: int, softmax_total: int, tolerance: float) -> dict[str, Any]:
    """Whether `total` lies within `tolerance` (a fraction) of `softmax_total`: counts, ratio and verdict."""
    ratio = total / softmax_total
    return {
        "params_total": total,
        "softmax_params": softmax_total,
        "ratio": ratio,
        "tolerance": tolerance,
        "within": abs(ratio - 1.0) <= tolerance + 1e-12,
    }
