"""LRA's parameter rule: every model within a tolerance (LRA: 10%) of the softmax Transformer's parameter count.

Tay et al. (2021) sized each efficient Transformer to about the vanilla model's parameters so that scores
compare mechanisms, not capacity. The reference is the suite's own row for it (the accuracy option
`parameter_reference`, its softmax row by default) on the same task: its stored parameter count, whatever
`model:` overrides any label carries. The accuracy cells record their counts; the LRA table applies the rule.
`parameter_total` is the count `attnbench.sizing` matches labels on.
"""

from __future__ import annotations

from typing import Any


def parameter_total(model: Any) -> int:
    """Parameters of a model (every tensor nn.Module.parameters() yields, frozen ones included)."""
    return sum(p.numel() for p in model.parameters())


def parameter_rule(total: float, reference_total: float, tolerance: float) -> dict[str, Any]:
    """Whether `total` lies within `tolerance` (a fraction) of `reference_total`: counts, ratio and verdict."""
    ratio = total / reference_total
    return {
        "params_total": total,
        "reference_params": reference_total,
        "ratio": ratio,
        "tolerance": tolerance,
        "within": abs(ratio - 1.0) <= tolerance + 1e-12,
    }
