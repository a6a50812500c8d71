"""What the training-based measurements share: seeding, loading the cell's task, building and training its model."""

from __future__ import annotations

import dataclasses
from typing import Any

from attnbench.cell_spec import CellSpec
from attnbench.errors import ConfigError, InputUnavailable, UserError
from attnbench.measurements import SkipCell
from attnbench.measurements.lengths import model_length
from attnbench.model import ModelConfig, TransformerClassifier
from attnbench.options import make_options, require
from attnbench.progress import Progress
from attnbench.registry import ATTENTIONS, attention_entry
from attnbench.runtime import record_what_ran, seed_everything
from attnbench.sizing import size_to_match
from attnbench.tasks import load_task
from attnbench.tasks.base import TaskData
from attnbench.train import TrainConfig, TrainResult, train_classifier
from attnbench.two_tower import build_classifier


def load_cell_task(cell: CellSpec, **overrides: Any) -> TaskData:
    """load_task(name, seed=cell seed, **options) with some options overridden (e.g. label_noise); SkipCell when
    an input it needs is not installed here (attnbench.errors.InputUnavailable)."""
    options = {**cell.task.options, **overrides}
    try:
        task = load_task(cell.task.name, seed=cell.seed, **options)
    except InputUnavailable as err:
        raise SkipCell(str(err)) from None
    record_what_ran("data", task.summary())
    return task


def check_capabilities(attention: str, task: TaskData) -> None:
    """Raise SkipCell when `attention` cannot run `task` (padded rows without mask support, no max length)."""
    caps = attention_entry(attention).capabilities
    padded = any(not bool(split.attention_mask.all()) for split in task.splits.values())
    if padded and not caps.padding_mask:
        raise SkipCell(f"attention {attention!r} does not support padding masks and task {task.name!r} has padded rows")
    if caps.needs_max_length and not task.max_length:
        raise SkipCell(f"attention {attention!r} needs a maximum length and task {task.name!r} has none")


def require_one_attention(attention: str, measurement: str) -> None:
    """SkipCell for a pattern of attentions over the layers (a hybrid) in a measurement of one attention module."""
    if attention_entry(attention).capabilities.layer_pattern:
        raise SkipCell(
            f"attention {attention!r} is a pattern of attentions over a model's layers, and {measurement} measures "
            f"one attention module; measure its layers' attentions by name"
        )


def model_config(cell: CellSpec, task: TaskData) -> ModelConfig:
    """ModelConfig from the cell's overrides; vocabulary, classes, length, padding and segments from the task."""
    sizes = {
        "vocab_size": task.vocab_size,
        "num_classes": task.num_classes,
        "max_length": model_length(task),  # the longest row scored, eval lengths included
        "pad_id": task.pad_id,
        "num_segments": 2 if task.pair else 1,
    }
    config = make_options(ModelConfig, {**cell.model, **sizes}, what="model")
    if config.kind != "encoder":
        raise SkipCell(
            f"this measurement trains the encoder classifier, and the model kind is {config.kind!r}; "
            f"decoders go with the recall, lm, state and decode measurements"
        )
    return config


def train_cell_model(
    cell: CellSpec,
    task: TaskData,
    *,
    device: str,
    progress: Progress | None = None,
    attention: str | None = None,
    attention_options: dict[str, Any] | None = None,
    training: dict[str, Any] | None = None,
) -> TrainResult:
    """Train the cell's classifier (or one with another attention / options / training) with the cell seed."""
    name = attention or cell.attention.name
    options = cell.attention.options if attention_options is None else attention_options
    check_capabilities(name, task)
    seed = cell.seed
    sized = size_to_match(
        model_config(cell, task),
        name,
        options,
        length=task.max_length,
        build=lambda cfg, opts: build_classifier(cfg, task, name, opts, seed=seed),
    )
    record_what_ran("model", dataclasses.asdict(sized.config))
    seed_everything(seed)
    model = build_classifier(sized.config, task, name, sized.options, seed=seed)
    result = train_classifier(
        model, task, train_config(cell, **(training or {})), seed=seed, device=device, progress=progress
    )
    return dataclasses.replace(result, sizing=sized.record)


def train_config(cell: CellSpec, **overrides: Any) -> TrainConfig:
    """The cell's TrainConfig, with some fields overridden."""
    return make_options(TrainConfig, {**cell.training, **overrides}, what="training")


def has_option(attention: str, option_name: str) -> bool:
    """Whether the attention's config dataclass has an option of that name (e.g. num_features)."""
    return any(f.name == option_name for f in dataclasses.fields(attention_entry(attention).config))


# what ran, as opposed to what was asked for; kernel_routes: calls per route (attnbench.kernels.routes)
RUNTIME_ATTRIBUTES = ("last_backend", "redraw_policy", "feature_form", "kernel_routes")


def attention_runtime(model: TransformerClassifier) -> list[dict[str, Any]]:
    """Per layer, what the attention actually did (e.g. softmax's SDPA backend, Performer's redraw policy)."""
    rows = []
    for module in model.attention_modules():
        rows.append({name: getattr(module, name) for name in RUNTIME_ATTRIBUTES if hasattr(module, name)})
    return rows


def paired_spec(paired: Any) -> Any:
    """A measurement's option naming a paired attention, as {name, options, ...}: a bare name becomes
    {name, options: {}}, a mapping gets options {} if it has none; anything else is returned as given, for
    `check_paired_attention` to refuse."""
    if isinstance(paired, str):
        return {"name": paired, "options": {}}
    return {"options": {}, **paired} if isinstance(paired, dict) else paired


def check_paired_attention(spec: Any, keys: set[str], what: str, given: Any) -> None:
    """A measurement's paired attention (the one it times in alternation with the cell's): a mapping with a
    registered `name`, keys among `keys`, and options its config takes, checked when the suite loads rather than
    minutes into the run; `what` names the option in the message ("paired", "paired['elu']"), `given` is as
    the suite wrote it."""
    require(
        isinstance(spec, dict) and isinstance(spec.get("name"), str) and set(spec) <= keys,
        f"{what}={given!r} must be an attention name or {{{', '.join(k for k in ('name', 'options', 'label') if k in keys)}}}",
    )
    try:
        ATTENTIONS.make_config(spec["name"], **(spec.get("options") or {}))
    except UserError as err:
        raise ConfigError(f"{what}: {err}") from None
