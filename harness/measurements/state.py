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
from attnbench.registry import attention_entry, build_attention, layer_attentions
from attnbench.runtime import seed_everything

register_metric(
    "state_bytes*",
    "min",
    "bytes of one sequence's decoding state per layer (KV cache or recurrent state)",
    bounds=(0.0, None),
    format=",.0f",
    exact=True,  # counted from the tensors the state holds: the same on every seed and machine; no margin
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


def layer_states(modules: list[nn.Module], context_length: int, head_dim: int, heads: int) -> dict[str, Any]:
    """`state_row` of each layer's attention at one context length, their mean (bytes per layer, as a uniform
    model's every layer) and their total (the model's whole decoding state)."""
    rows = [state_row(module, context_length, head_dim, heads) for module in modules]
    total = sum(row["bytes"] for row in rows)
    return {"layers": rows, "mean": total / len(rows), "total": total}


@register_measurement("state", config=StateOptions)
def measure_state(
    cell: CellSpec, options: StateOptions, *, device: str = "cpu", progress: Progress | None = None
) -> dict[str, Any]:
    """Bytes of the decoding state per sequence and layer at each context length (no training); a hybrid's per
    layer of its pattern, their mean per layer and their total over the model's layers."""
    name = cell.attention.name
    require_causal_form(name)
    model = cell.model
    heads = model.get("num_heads", 2)
    head_dim = model.get("d_model", 128) // heads
    num_layers = model.get("num_layers", 2)
    seed_everything(cell.seed)
    modules = [
        build_attention(
            layer,
            head_dim=head_dim,
            num_heads=heads,
            max_length=max(options.context_lengths),
            seed=cell.seed * 1000 + i,
            **{**layer_options, "causal": True},
        ).eval()
        for i, (layer, layer_options) in enumerate(layer_attentions(name, cell.attention.options, num_layers))
    ]
    if not attention_entry(name).capabilities.layer_pattern:
        modules = modules[:1]  # every layer alike: one stands for all
    states = {n: layer_states(modules, n, head_dim, heads) for n in options.context_lengths}
    metrics = {f"state_bytes@{n}": float(s["mean"]) for n, s in states.items()}
    metrics |= {f"state_bytes_total@{n}": float(s["mean"] * num_layers) for n, s in states.items()}
    rows = [{**s["layers"][0], "mean_bytes": s["mean"], "layers": s["layers"]} for s in states.values()]
    return {"metrics": metrics, "details": {"rows": rows, "heads": heads, "head_dim": head_dim, "dtype": "float32"}}
