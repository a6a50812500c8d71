"""The one training loop: optional phase A (the attention's own learning procedure), then phase B.

Phase A is whatever procedure the attention's registry entry names (`Capabilities.learning_phase`,
"module:function"), called as procedure(model, train, options, device=, seed=, progress=, validation=,
phase_b_steps=) -> a JSON-able record; the parameters the attention lists in `learning_phase_parameters`
stay frozen in phase B. Its options are the suite's `training.phase_a` with the attention's own
(`learning_phase_options`, if it has them) laid over them; a learning-phase config with a field `after_epochs`
k > 0 runs it after k epochs of phase B instead of before, and only checkpoints after it are then selected.
Phase B: AdamW, linear warm-up then cosine decay, gradient clipping, on the loss of an `Objective`
(`CLASSIFICATION`: cross-entropy of the classifier; the decoder's, over labelled positions, in
attnbench.decoder_training); the checkpoint evaluated is the one chosen on validation (or the last one), and
the result says which.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any, Literal

import torch
from torch import Tensor, nn

from attnbench.errors import ConfigError
from attnbench.metrics import log_loss
from attnbench.options import make_options, option, require
from attnbench.progress import Progress, epoch_phase
from attnbench.registry import LEARNING_PHASES, Entry
from attnbench.tasks.base import Split, TaskData


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite."""


@dataclasses.dataclass
class TrainConfig:
    """Phase-B optimisation settings (defaults: the paper's, scaled by suites)."""

    epochs: int = option(10, "training epochs (phase B)", maximum=100_000)
    batch_size: int = option(64, "training batch size", maximum=1_048_576)
    eval_batch_size: int = option(256, "evaluation batch size", minimum=1, maximum=1_048_576)
    lr: float = option(2e-4, "AdamW peak learning rate")
    weight_decay: float = option(0.01, "AdamW weight decay")
    warmup_fraction: float = option(0.1, "fraction of steps of linear warm-up before cosine decay")
    grad_clip: float = option(1.0, "gradient-norm clip (0 = off)")
    checkpoint: Literal["best-validation", "best-validation-nll", "last"] = option(
        "best-validation",
        "which checkpoint is evaluated: best validation accuracy, lowest validation NLL, or the last epoch",
    )
    max_train_examples: int | None = option(None, "use only the first N training rows (None = all)")
    phase_a: dict = option({}, "options of the learning phase (phase A) for attentions that have one")

    def __post_init__(self) -> None:
        require(self.epochs >= 1, f"epochs={self.epochs} must be at least 1")
        require(self.batch_size >= 1, f"batch_size={self.batch_size} must be at least 1")
        require(self.lr > 0, f"lr={self.lr} must be positive")
        require(0.0 <= self.warmup_fraction < 1.0, f"warmup_fraction={self.warmup_fraction} must lie in [0, 1)")


@dataclasses.dataclass
class TrainResult:
    """What training produced: the selected model and its history."""

    model: nn.Module
    checkpoint: str  # "best-validation (epoch k)" or "last (epoch k)"
    best_epoch: int
    history: list[dict[str, float]]
    train_seconds: float
    phase_a: dict[str, Any] | None
    sizing: dict[str, Any] | None = None  # what `match` chose (attnbench.sizing), where the model was sized


def warmup_cosine(step: int, total: int, warmup: int) -> float:
    """Learning-rate multiplier: linear warm-up to 1 over `warmup` steps, then cosine decay to 0."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def _to(batch: tuple, device: torch.device) -> tuple:
    return tuple(None if t is None else t.to(device) for t in batch)


@torch.no_grad()
def predict_proba(model: nn.Module, split: Split, batch_size: int = 256, device: torch.device | str = "cpu") -> Tensor:
    """Class probabilities (N, C) in row order, model in evaluation mode."""
    model.eval()
    out = []
    for ids, mask, seg, _ in split.batches(batch_size):
        ids, mask, seg = _to((ids, mask, seg), torch.device(device))
        out.append(torch.softmax(model(ids, mask, seg).float(), dim=-1).cpu())
    return torch.cat(out)


def _accuracy(probs: Tensor, labels: Tensor) -> float:
    return float((probs.argmax(dim=1) == labels).float().mean())


def learning_phase_parameters(model: nn.Module) -> list[nn.Parameter]:
    """Parameters only phase A may move (e.g. Coulomb particles), gathered from the attention modules."""
    params: list[nn.Parameter] = []
    for module in model.modules():
        getter = getattr(module, "learning_phase_parameters", None)
        if callable(getter) and module is not model:
            params.extend(getter())
    return params


def learning_phase_steps(cfg: Any, train_rows: int, phase_b_steps: int | None) -> int:
    """A learning phase's step budget from its config's max_steps, steps_fraction, epochs and batch_size: max_steps,
    else the steps_fraction of all steps (A + B), else epochs x batches per epoch."""
    if cfg.max_steps is not None:
        return cfg.max_steps
    if cfg.steps_fraction is not None:
        if phase_b_steps is None:
            raise ConfigError("phase_a steps_fraction needs the phase-B step count; give max_steps or epochs")
        return max(1, math.ceil(cfg.steps_fraction / (1 - cfg.steps_fraction) * phase_b_steps))
    return max(1, math.ceil(cfg.epochs * math.ceil(train_rows / cfg.batch_size)))


def learning_procedure(model: nn.Module) -> Entry | None:
    """The learning phase (registry entry: factory and config type) the model's attention declares in the registry
    (`capabilities.learning_phase`), or None."""
    spec = getattr(getattr(model, "capabilities", None), "learning_phase", None)
    return LEARNING_PHASES.get(spec) if spec else None


def learning_phase_options(model: nn.Module, cfg: TrainConfig) -> dict[str, Any]:
    """The learning phase's options: the suite's `training.phase_a`, overridden by the attention's own."""
    own = [
        m.learning_phase_options()
        for m in model.modules()
        if m is not model and callable(getattr(m, "learning_phase_options", None))
    ]
    return {**(cfg.phase_a or {}), **(own[0] if own else {})}


def make_optimizer(params: list[nn.Parameter], cfg: TrainConfig) -> torch.optim.Optimizer:
    """Phase B's AdamW, fused where every parameter is float32 on CPU or CUDA: one pass over each parameter instead
    of a dozen (a third of the for-loop's time on CPU), the same update to rounding."""
    fused = all(p.dtype == torch.float32 and p.device.type in ("cpu", "cuda") for p in params) or None
    return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, fused=fused)


@dataclasses.dataclass(frozen=True)
class Objective:
    """What the loop trains a model for: the loss of a training batch, and the validation scores of each epoch
    (`val_accuracy` and the validation loss under `loss_key`, into the history) that choose the checkpoint."""

    batch_loss: Callable[[nn.Module, tuple], Tensor]  # (model, batch (ids, mask, segments, labels) on the device)
    validate: Callable[[nn.Module, Split, int, torch.device], dict[str, float]]  # (model, split, batch size, device)
    loss_key: str  # the validation loss's key in `validate`'s scores, chosen on by best-validation-nll


def classifier_loss(model: nn.Module, batch: tuple) -> Tensor:
    """Cross-entropy of the classifier's logits (B, C) against the labels (B,)."""
    ids, mask, seg, labels = batch
    return nn.functional.cross_entropy(model(ids, mask, seg), labels)


def classifier_scores(model: nn.Module, split: Split, batch_size: int, device: torch.device) -> dict[str, float]:
    """Validation accuracy and NLL of the classifier's probabilities."""
    probs = predict_proba(model, split, batch_size, device)
    return {"val_accuracy": _accuracy(probs, split.labels), "val_nll": log_loss(probs, split.labels)}


CLASSIFICATION = Objective(classifier_loss, classifier_scores, "val_nll")


def train_classifier(
    model: nn.Module,
    task: TaskData,
    cfg: TrainConfig,
    *,
    seed: int = 0,
    device: torch.device | str = "cpu",
    progress: Progress | None = None,
) -> TrainResult:
    """Train the classifier `model` on task['train'], select a checkpoint on task['validation']."""
    return train_model(model, task, cfg, CLASSIFICATION, seed=seed, device=device, progress=progress)


def train_model(
    model: nn.Module,
    task: TaskData,
    cfg: TrainConfig,
    objective: Objective,
    *,
    seed: int = 0,
    device: torch.device | str = "cpu",
    progress: Progress | None = None,
) -> TrainResult:
    """Train `model` for `objective` on task['train'] (with the learning phase its attention declares), select a
    checkpoint on task['validation'].
    Long: the one training loop: phase A (before, or after k epochs), the epochs under the schedule, evaluation
    and the checkpoint choice share the loop's state."""
    device = torch.device(device)
    model.to(device)
    train = task["train"]
    if cfg.max_train_examples is not None:
        train = train.subset(slice(0, cfg.max_train_examples))
    start = time.perf_counter()

    steps_per_epoch = math.ceil(len(train) / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    procedure = learning_procedure(model)
    options = (
        None
        if procedure is None
        else make_options(procedure.config, learning_phase_options(model, cfg), what="phase_a")
    )
    after = getattr(options, "after_epochs", 0)
    require(
        after < cfg.epochs,
        f"phase_a after_epochs={after} leaves no epoch of phase B after phase A "
        f"(epochs={cfg.epochs}); lower after_epochs or raise epochs",
    )

    def run_phase_a() -> dict[str, Any]:
        return procedure.factory(
            model,
            train,
            options,
            device=device,
            seed=seed,
            progress=progress,
            validation=task["validation"],
            phase_b_steps=total,
        )

    phase_a = run_phase_a() if procedure is not None and after == 0 else None
    frozen = learning_phase_parameters(model)
    for p in frozen:
        p.requires_grad_(False)
    frozen_ids = {id(p) for p in frozen}
    trainable = [p for p in model.parameters() if id(p) not in frozen_ids and p.requires_grad]

    optimizer = make_optimizer(trainable, cfg)
    warmup = max(1, int(cfg.warmup_fraction * total))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_cosine(s, total, warmup))
    generator = torch.Generator().manual_seed(seed)
    history: list[dict[str, float]] = []
    best_state, best_score, best_epoch = None, -math.inf, 0

    for epoch in range(1, cfg.epochs + 1):
        if procedure is not None and epoch == after + 1 and after > 0:
            phase_a = run_phase_a()  # the particles, frozen since the start, stay frozen after it
        model.train()
        losses = []
        for batch in train.batches(cfg.batch_size, shuffle=True, generator=generator):
            loss = objective.batch_loss(model, _to(batch, device))
            if not torch.isfinite(loss):
                raise NonFiniteLossError(f"training loss became {loss.item()} at epoch {epoch}")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip > 0:
                nn.utils.clip_grad_norm_(trainable, cfg.grad_clip)
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())
        scores = objective.validate(model, task["validation"], cfg.eval_batch_size, device)
        history.append(
            {"epoch": epoch, "train_loss": sum(losses) / len(losses), **scores, "seconds": time.perf_counter() - start}
        )
        score = -scores[objective.loss_key] if cfg.checkpoint == "best-validation-nll" else scores["val_accuracy"]
        if cfg.checkpoint != "last" and epoch > after and score > best_score:
            best_score, best_epoch, best_state = score, epoch, copy.deepcopy(model.state_dict())
        if progress is not None:  # loss, validation accuracy and seconds: a line per epoch off a terminal
            progress(epoch_phase(history[-1]), epoch, cfg.epochs)

    if cfg.checkpoint != "last" and best_state is not None:
        model.load_state_dict(best_state)
        label = f"{cfg.checkpoint} (epoch {best_epoch})"
    else:
        best_epoch = cfg.epochs
        label = f"last (epoch {cfg.epochs})"
    model.eval()
    return TrainResult(model, label, best_epoch, history, time.perf_counter() - start, phase_a)
