"""Kernel fidelity: each attention's output against exact softmax attention on the same inputs.

Errors are over real (unpadded) query positions: relative Frobenius error ||A - E||_F / ||E||_F (all
layers' outputs together for trained inputs) and max |A - E|, where E is softmax(q k^T / sqrt(d)) v computed in float64.
Beside them, with U uniform attention (every output the mean of the real values, weights that ignore q and k):
- the relative error of U itself, ||U - E|| / ||E||: the level an approximation must beat to carry information
  from the kernel (on random inputs the exact weights are near uniform, so it is low there);
- how far A is from U in units of E's distance, ||A - U|| / ||E - U||: near 0 means A has collapsed to uniform
  attention (a feature floor swamping the kernel), near 1 as far from uniform as exact attention.
Inputs:
- "random": q, k ~ N(0, random_std^2), v ~ N(0, 1), shape (batch, heads, N, head_dim), per N;
- "trained": the q, k, v and padding mask every attention layer received (forward pre-hooks) on
  one test batch of a softmax model briefly trained on the cell's task with the cell's model.
Per feature budget when the attention has a num_features option.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

import torch
from torch import Tensor

from attnbench.cell_spec import CellSpec
from attnbench.measurements import SkipCell, register_measurement
from attnbench.measurements.common import (
    has_option,
    load_cell_task,
    model_config,
    require_one_attention,
    train_cell_model,
)
from attnbench.metrics import register_metric
from attnbench.options import option, require
from attnbench.progress import Progress
from attnbench.registry import build_attention

Inputs = Literal["random", "trained"]


@dataclasses.dataclass
class FidelityOptions:
    """Options of the fidelity measurement (defaults cheap; suites scale them)."""

    inputs: list[Inputs] = option(
        ["random", "trained"], "input sources: random Gaussian, captured from a trained model"
    )
    seq_lens: list[int] = option([128, 512], "sequence lengths of the random inputs")
    num_features: list[int] = option([], "feature budgets (attentions with num_features); empty = the cell's own")
    batch: int = option(2, "random inputs: batch size")
    heads: int = option(4, "random inputs: heads")
    head_dim: int = option(64, "random inputs: head dimension")
    random_std: float = option(1.0, "random inputs: std of q and k entries (1 gives unit-variance logits)")
    train_epochs: int = option(1, "trained inputs: epochs of the softmax model")
    train_examples: int = option(512, "trained inputs: training rows of the softmax model")
    capture_rows: int = option(16, "trained inputs: test rows passed through the model")

    def __post_init__(self) -> None:
        require(len(self.inputs) > 0, "inputs is empty; give 'random', 'trained' or both")
        require(self.random_std > 0, f"random_std={self.random_std} must be positive")


def exact_attention(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
    """softmax(q k^T / sqrt(d)) v in float64, padded keys excluded. (B, H, N, D) -> (B, H, N, D)."""
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if key_padding_mask is not None:
        scores = scores.masked_fill(~key_padding_mask[:, None, None, :], float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def error_terms(approx: Tensor, exact: Tensor, query_mask: Tensor | None = None) -> tuple[float, float, float]:
    """(||A - E||_F^2, ||E||_F^2, max |A - E|) over real query positions; query_mask (B, N) bool."""
    diff = approx.double() - exact
    if query_mask is not None:
        keep = query_mask[:, None, :, None].to(diff.dtype)
        diff, exact = diff * keep, exact * keep
    return float(diff.pow(2).sum()), float(exact.pow(2).sum()), float(diff.abs().max())


def uniform_attention(v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
    """Every query's output the mean of the real values, in float64: attention whose weights ignore q and k."""
    v = v.double()
    if key_padding_mask is None:
        return v.mean(dim=2, keepdim=True).expand_as(v)
    keep = key_padding_mask[:, None, :, None].to(v.dtype)
    return ((v * keep).sum(dim=2, keepdim=True) / keep.sum(dim=2, keepdim=True).clamp_min(1)).expand_as(v)


def _approximate(
    name: str, options: dict[str, Any], q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, max_length: int, seed: int
) -> Tensor:
    module = build_attention(
        name, head_dim=q.shape[-1], num_heads=q.shape[1], max_length=max_length, seed=seed, **options
    ).eval()
    with torch.no_grad():
        return module(q, k, v, key_padding_mask=mask)


def captured_inputs(
    cell: CellSpec, options: FidelityOptions, device: str, progress: Progress | None
) -> tuple[list[tuple[Tensor, Tensor, Tensor, Tensor | None]], int]:
    """(q, k, v, key_padding_mask) of every layer of a briefly trained softmax model on one test batch."""
    task = load_cell_task(cell)
    model = train_cell_model(
        cell,
        task,
        device=device,
        progress=progress,
        attention="softmax",
        attention_options={},
        training={"epochs": options.train_epochs, "max_train_examples": options.train_examples},
    ).model
    captured = []

    def hook(module: Any, args: tuple, kwargs: dict) -> None:
        q, k, v = (t.detach().cpu() for t in args[:3])
        mask = kwargs.get("key_padding_mask")
        captured.append((q, k, v, None if mask is None else mask.detach().cpu()))

    handles = [m.register_forward_pre_hook(hook, with_kwargs=True) for m in model.attention_modules()]
    ids, mask, seg, _ = next(task["test"].batches(options.capture_rows))
    with torch.no_grad():
        model.eval()(ids.to(device), mask.to(device), None if seg is None else seg.to(device))
    for handle in handles:
        handle.remove()
    return captured, model_config(cell, task).max_length


def _budgets(cell: CellSpec, options: FidelityOptions) -> list[int | None]:
    name = cell.attention.name
    if not has_option(name, "num_features"):
        return [None]
    return list(options.num_features) or [cell.attention.options.get("num_features")]


register_metric(
    "rel_error*",
    "min",
    "relative error of the attention output against exact softmax attention",
    bounds=(0.0, None),
    margin=0.1,
    margin_relative=True,
    format=".3g",
)


@register_measurement("fidelity", config=FidelityOptions)
def measure_fidelity(
    cell: CellSpec, options: FidelityOptions, *, device: str = "cpu", progress: Progress | None = None
) -> dict[str, Any]:
    """Relative and max error of the cell's attention against exact softmax, per input source, N and budget."""
    name, seed = cell.attention.name, cell.seed
    require_one_attention(name, "fidelity")
    base = cell.attention.options
    budgets = _budgets(cell, options)
    rows: list[dict[str, Any]] = []
    if "trained" in options.inputs and cell.task.name == "none":
        raise SkipCell("fidelity on trained inputs needs a task; set one or use inputs: [random]")
    for source in options.inputs:
        if source == "random":
            generator = torch.Generator().manual_seed(seed)
            cases = []
            for n in options.seq_lens:
                shape = (options.batch, options.heads, n, options.head_dim)
                q, k = (torch.randn(shape, generator=generator) * options.random_std for _ in range(2))
                cases.append(([(q, k, torch.randn(shape, generator=generator), None)], n))
        else:
            layers, max_length = captured_inputs(cell, options, device, progress)
            cases = [(layers, max_length)]
        for layers, max_length in cases:
            for budget in budgets:
                opts = base if budget is None else {**base, "num_features": budget}
                rows.append(_row(name, opts, layers, max_length, seed, source, budget))
    metrics = {}
    for r in rows:
        key = f"rel_error_{r['inputs']}" + (f"@{r['seq_len']}" if r["inputs"] == "random" else "")
        metrics[key + (f"/m{r['num_features']}" if len(budgets) > 1 else "")] = r["rel_error"]
    return {"metrics": metrics, "details": {"rows": rows}}


def _row(
    name: str,
    options: dict[str, Any],
    layers: list[tuple[Tensor, Tensor, Tensor, Tensor | None]],
    max_length: int,
    seed: int,
    source: str,
    budget: int | None,
) -> dict[str, Any]:
    """Errors pooled over layers: relative Frobenius error of all layers' outputs together, max over layers; the
    same relative error of uniform attention on the same inputs."""
    diff_sq = exact_sq = max_abs = uniform_sq = from_uniform_sq = 0.0
    for q, k, v, mask in layers:
        approx = _approximate(name, options, q, k, v, mask, max(max_length, q.shape[2]), seed)
        exact = exact_attention(q, k, v, mask)
        d_sq, e_sq, m_abs = error_terms(approx, exact, mask)
        diff_sq, exact_sq, max_abs = diff_sq + d_sq, exact_sq + e_sq, max(max_abs, m_abs)
        uniform = uniform_attention(v, mask)
        uniform_sq += error_terms(uniform, exact, mask)[0]
        from_uniform_sq += error_terms(approx, uniform, mask)[0]
    return {
        "seq_len": layers[0][0].shape[2],
        "num_features": budget,
        "inputs": source,
        "layers": len(layers),
        "rel_error": math.sqrt(diff_sq / exact_sq),
        "max_abs_error": max_abs,
        "uniform_rel_error": math.sqrt(uniform_sq / exact_sq),
        "from_uniform": math.sqrt(from_uniform_sq / uniform_sq) if uniform_sq > 0 else math.nan,
        "input_std": float(torch.cat([layer[0].flatten() for layer in layers]).std()),
    }
