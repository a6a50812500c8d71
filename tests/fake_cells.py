"""Plugins for the executor/CLI tests, named in suites as "fake_cells:NAME" (tests/ is put on the path).

`tiny_train` trains a tiny classifier on a seeded synthetic task (no task registry needed; its
aliases `sleeper` and `crasher` let one suite hold it with different options); `echo` is a
per-task measurement that only echoes its cell; `scored` draws an accuracy around a known mean per label;
`tiny_task` is a task; `Raises` and `ReturnsNaN`
are attentions that fail the two ways a real one can.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from attnbench.cell_spec import CellSpec
from attnbench.measurements import MEASUREMENTS, SkipCell
from attnbench.model import ModelConfig, TransformerClassifier
from attnbench.options import option
from attnbench.tasks import TaskConfig, register_task
from attnbench.tasks.base import Split, TaskData
from attnbench.train import TrainConfig, predict_proba, train_classifier


@dataclasses.dataclass
class TinyTrainOptions:
    """Options of the test measurement."""

    uses_task: ClassVar[bool] = False
    examples: int = option(96, "training rows")
    length: int = option(10, "sequence length")
    sleep: float = option(0.0, "seconds to sleep before training (for time-out and kill tests)")
    skip: str = option("", "skip the cell with this reason when not empty")
    crash: bool = option(False, "end the process abruptly (a worker that dies)")
    hold_while: str = option("", "sleep while this file exists (lets a test kill a run mid-cell)")


def _split(n: int, length: int, generator: torch.Generator) -> Split:
    """Tokens 1..8; label 1 when the first token is above 4."""
    ids = torch.randint(1, 9, (n, length), generator=generator)
    lengths = torch.randint(length // 2, length + 1, (n,), generator=generator)
    mask = torch.arange(length)[None, :] < lengths[:, None]
    return Split(ids.masked_fill(~mask, 0), mask, (ids[:, 0] > 4).long())


@MEASUREMENTS.register("tiny-train", config=TinyTrainOptions)
def tiny_train(cell: CellSpec, options: TinyTrainOptions, *, device: str, progress: Any) -> dict[str, Any]:
    """Train the shared classifier briefly; validation accuracy and mean log-likelihood."""
    if options.skip:
        raise SkipCell(options.skip)
    if options.crash:
        os._exit(3)
    time.sleep(options.sleep)
    while options.hold_while and os.path.exists(options.hold_while):
        time.sleep(0.1)
    generator = torch.Generator().manual_seed(cell.seed)
    splits = {
        name: _split(n, options.length, generator)
        for name, n in (("train", options.examples), ("validation", 64), ("test", 64))
    }
    task = TaskData("tiny", splits, num_classes=2, vocab_size=9, max_length=options.length)
    cfg = ModelConfig(**{**cell.model, "vocab_size": 9, "num_classes": 2, "max_length": options.length})
    model = TransformerClassifier(cfg, cell.attention.name, cell.attention.options, seed=cell.seed)
    result = train_classifier(
        model, task, TrainConfig(**cell.training), seed=cell.seed, device=device, progress=progress
    )
    probs = predict_proba(result.model, task["validation"], device=device)
    labels = task["validation"].labels
    return {
        "metrics": {
            "accuracy": float((probs.argmax(1) == labels).float().mean()),
            "log_likelihood": float(probs[torch.arange(len(labels)), labels].log().mean()),
        },
        "details": {"history": result.history},
    }


sleeper = crasher = tiny_train  # the same measurement under other names


@dataclasses.dataclass
class EchoOptions:
    """Options of the echo measurement."""

    scale: float = option(1.0, "multiplies the seed")


@MEASUREMENTS.register("echo", config=EchoOptions)
def echo(cell: CellSpec, options: EchoOptions, *, device: str, progress: Any) -> dict[str, Any]:
    """Metrics computed from the cell alone (for expansion and store tests)."""
    return {"metrics": {"scaled_seed": cell.seed * options.scale}, "details": {"task": cell.task.to_json()}}


@dataclasses.dataclass
class LibraryValuesOptions:
    """Options of the library-values measurement."""

    unstorable: bool = option(False, "also return a set, which no result file can hold")


@MEASUREMENTS.register("library-values", config=LibraryValuesOptions)
def library_values(cell: CellSpec, options: LibraryValuesOptions, *, device: str, progress: Any) -> dict[str, Any]:
    """What a plug-in computes with numpy and torch: their scalars, 0-d tensors and arrays."""
    import numpy as np

    details = {"curve": np.arange(3), "weights": torch.ones(2), "n": np.int64(4), "pair": (np.float64(0.5), 1)}
    return {
        "metrics": {"score": np.float32(0.5), "count": torch.tensor(3)},
        "details": details | ({"kinds": {"a", "b"}} if options.unstorable else {}),
    }


@dataclasses.dataclass
class ScoredOptions:
    """Options of the scored measurement: each label's true accuracy and the seeds' spread around it."""

    uses_task: ClassVar[bool] = False
    means: dict = option({}, "true accuracy per attention label")
    noise: float = option(0.01, "standard deviation of a seed's accuracy around its label's mean")


@MEASUREMENTS.register("scored", config=ScoredOptions)
def scored(cell: CellSpec, options: ScoredOptions, *, device: str, progress: Any) -> dict[str, Any]:
    """An accuracy drawn around a known mean, seeded by the cell's seed and label (for the until-decided loop)."""
    generator = torch.Generator().manual_seed(cell.seed * 1009 + sum(map(ord, cell.attention.label)))
    noise = float(torch.randn((), generator=generator)) * options.noise
    return {"metrics": {"accuracy": min(1.0, max(0.0, options.means[cell.attention.label] + noise))}, "details": {}}


@dataclasses.dataclass
class SeedOnlyOptions(EchoOptions):
    """Options of a measurement that uses neither task nor attention nor seed (run once per suite)."""

    uses_task: ClassVar[bool] = False
    uses_seed: ClassVar[bool] = False
    uses_attention: ClassVar[bool] = False


@MEASUREMENTS.register("echo-once", config=SeedOnlyOptions)
def echo_once(cell: CellSpec, options: SeedOnlyOptions, *, device: str, progress: Any) -> dict[str, Any]:
    """The echo measurement, expanded once per suite."""
    return echo(cell, options, device=device, progress=progress)


@dataclasses.dataclass
class TinyTaskConfig(TaskConfig):
    """Options of the tiny task."""

    rows: int = option(32, "rows per split")


@register_task("tiny-task", config=TinyTaskConfig)
def tiny_task(cfg: TinyTaskConfig) -> TaskData:
    """The tiny first-token task as a registered task."""
    generator = torch.Generator().manual_seed(cfg.seed)
    splits = {name: _split(cfg.rows, 10, generator) for name in ("train", "validation", "test")}
    return TaskData("tiny-task", splits, num_classes=2, vocab_size=9, max_length=10)


class Raises(nn.Module):
    """An attention whose forward always raises."""

    def __init__(self, head_dim: int = 64):
        super().__init__()

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        raise RuntimeError("this attention always fails")


class ReturnsNaN(nn.Module):
    """An attention that returns NaN everywhere, so the training loss becomes NaN."""

    def __init__(self, head_dim: int = 64):
        super().__init__()

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        return v * float("nan")
