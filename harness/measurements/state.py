"""`state`: the bytes a causal attention keeps per sequence and layer to decode the next token, at each context length.

Softmax keeps its KV cache (growing with the context); a feature map its M x D state and normaliser (fixed).
Each attention's `state_size(context_length, dtype)` formula is reported beside the bytes of the tensors its
`prefill_state` (else `step`) actually carries for one sequence, and the two must agree.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from attnbench.cell_spec import CellSpec
from attnbench.decoder import require_causal_form
from attnbench.measurements import register_measurement
from attnbench.metrics import register_metric
from attnbench.options import option, require
from attnbench.progress import Progress
from attnbench.recurrence import state_bytes, step_through
from attnbench.registry import build_attention
from attnbench.runtime import seed_everything

register_metric(
    "state_bytes*",
    "min",
    "bytes of one sequence's decoding state per layer (KV cache or recurrent state)",
    bounds=(0.0, None),
    margin=0.1,
    margin_relative=True,
    format=",.0f",
)


@dataclasses.dataclass
class StateOptions:
    """Options of the state measurement."""

    context_lengths: list[int] = option([256, 1024, 4096, 16384], "context lengths the state is measured at")

    def __post_init__(self) -> None:
        require(
            bool(self.context_lengths) and all(n >= 1 for n in self.context_lengths),
            f"context_lengths={self.context_lengths} must be a non-empty list of positive lengths",
        )


def carried_state(attention: nn.Module, context_length: int, head_dim: int, heads: int) -> Any:
    """The state one sequence's attention carries after `context_length` random tokens (float32)."""
    k, v = (torch.randn(1, heads, context_length, head_dim) for _ in range(2))
    with torch.no_grad():
        if hasattr(attention, "prefill_state"):
            return attention.prefill_state(k, v, q=k)
        return step_through(attention, k, k, v)[1]


def state_row(attention: nn.Module, context_length: int, head_dim: int, heads: int) -> dict[str, Any]:
    """Formula and carried bytes at one context length; the formula is None where the attention gives none."""
    carried = state_bytes(carried_state(attention, context_length, head_dim, heads))
    formula = attention.state_size(context_length) if hasattr(attention, "state_size") else None  # None: unknown
    if formula is not None and formula != carried:
        raise AssertionError(
            f"{type(attention).__name__}.state_size({context_length}) = {formula} bytes, but its "
            f"state carries {carried}"
        )
    return {"context_length": context_length, "bytes": carried, "formula_bytes": formula}


@register_measurement("state", config=StateOptions)
def measure_state(
    cell: CellSpec, options: StateOptions, *, device: str = "cpu", progress: Progress | None = None
) -> dict[str, Any]:
    """Bytes of the decoding state per sequence and layer at each context length (no training)."""
    name = cell.attention.name
    require_causal_form(name)
    model = cell.model
    heads = model.get("num_heads", 2)
    head_dim = model.get("d_model", 128) // heads
    seed_everything(cell.seed)
    attention = build_attention(
        name,
        head_dim=head_dim,
        num_heads=heads,
        max_length=max(options.context_lengths),
        seed=cell.seed,
        causal=True,
        **cell.attention.options,
    ).eval()
    rows = [state_row(attention, n, head_dim, heads) for n in options.context_lengths]
    return {
        "metrics": {f"state_bytes@{row['context_length']}": float(row["bytes"]) for row in rows},
        "details": {"rows": rows, "heads": heads, "head_dim": head_dim, "dtype": "float32"},
    }
