"""Training and evaluating the causal decoder on a task that labels positions (attnbench.tasks.sequence).

The same phase-B settings as the classifier (`TrainConfig`: AdamW, warm-up then cosine decay, clipping,
checkpoint chosen on validation), with the loss over labelled positions (`decoder.token_loss`). Evaluation
gives, per labelled position, the loss in nats and whether the arg-max token was the label.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time

import torch
from torch import Tensor, nn

from attnbench.cell_spec import CellSpec
from attnbench.decoder import IGNORE, TransformerDecoder, token_loss
from attnbench.measurements import SkipCell
from attnbench.model import ModelConfig
from attnbench.options import make_options
from attnbench.progress import Progress, epoch_phase
from attnbench.registry import attention_entry
from attnbench.runtime import record_what_ran, seed_everything
from attnbench.tasks.sequence import SequenceTaskData, TokenSplit
from attnbench.train import NonFiniteLossError, TrainConfig, TrainResult, make_optimizer, warmup_cosine


@dataclasses.dataclass
class TokenScores:
    """Per position of a split: loss (N, L) in nats (nan where unlabelled) and correct (N, L) bool."""

    loss: Tensor
    correct: Tensor
    labelled: Tensor  # (N, L) bool

    def mean_loss(self) -> float:
        return float(self.loss[self.labelled].mean())

    def accuracy(self) -> float:
        return float(self.correct[self.labelled].float().mean())


@torch.no_grad()
def score_tokens(
    model: nn.Module, split: TokenSplit, batch_size: int = 64, device: torch.device | str = "cpu"
) -> TokenScores:
    """Each labelled position's loss (nats) and arg-max correctness, model in evaluation mode."""
    model.eval()
    losses, correct = [], []
    for ids, mask, _, labels in split.batches(batch_size):
        logits = model(ids.to(device), mask.to(device)).float().cpu()
        log_p = torch.log_softmax(logits, dim=-1)
        safe = labels.clamp_min(0)
        loss = -log_p.gather(-1, safe[..., None])[..., 0]
        labelled = labels != IGNORE
        losses.append(loss.masked_fill(~labelled, math.nan))
        correct.append((logits.argmax(-1) == labels) & labelled)
    return TokenScores(torch.cat(losses), torch.cat(correct), split.labels != IGNORE)


def decoder_config(cell: CellSpec, task: SequenceTaskData, max_length: int | None = None) -> ModelConfig:
    """The cell's model settings as a decoder: vocabulary and classes from the task, max_length from the task or
    given (e.g. twice the training length for evaluation there)."""
    sizes = {
        "vocab_size": task.vocab_size,
        "num_classes": task.vocab_size,
        "kind": "decoder",
        "max_length": max_length or task.max_length,
        "pad_id": task.pad_id,
    }
    config = make_options(ModelConfig, {**cell.model, **sizes}, what="model")
    record_what_ran("model", dataclasses.asdict(config))
    return config


def train_decoder(
    model: TransformerDecoder,
    task: SequenceTaskData,
    cfg: TrainConfig,
    *,
    seed: int = 0,
    device: torch.device | str = "cpu",
    progress: Progress | None = None,
) -> TrainResult:
    """Train on task['train'] with the loss over labelled positions; keep the checkpoint best on validation
    (token accuracy, or loss for best-validation-nll) or the last."""
    device = torch.device(device)
    model.to(device)
    train = task["train"]
    if cfg.max_train_examples is not None:
        train = train.subset(slice(0, cfg.max_train_examples))
    start = time.perf_counter()
    total = math.ceil(len(train) / cfg.batch_size) * cfg.epochs
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(params, cfg)
    warmup = max(1, int(cfg.warmup_fraction * total))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_cosine(s, total, warmup))
    generator = torch.Generator().manual_seed(seed)
    history: list[dict[str, float]] = []
    best_state, best_score, best_epoch = None, -math.inf, 0
    for epoch in range(1, cfg.epochs + 1):
        model.train()
        losses = []
        for ids, mask, _, labels in train.batches(cfg.batch_size, shuffle=True, generator=generator):
            loss = token_loss(model(ids.to(device), mask.to(device)), labels.to(device))
            if not torch.isfinite(loss):
                raise NonFiniteLossError(f"training loss became {loss.item()} at epoch {epoch}")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip > 0:
                nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())
        val = score_tokens(model, task["validation"], cfg.eval_batch_size, device)
        history.append(
            {
                "epoch": epoch,
                "train_loss": sum(losses) / len(losses),
                "val_accuracy": val.accuracy(),
                "val_loss": val.mean_loss(),
                "seconds": time.perf_counter() - start,
            }
        )
        score = -val.mean_loss() if cfg.checkpoint == "best-validation-nll" else val.accuracy()
        if cfg.checkpoint != "last" and score > best_score:
            best_score, best_epoch, best_state = score, epoch, copy.deepcopy(model.state_dict())
        if progress is not None:
            progress(epoch_phase(history[-1]), epoch, cfg.epochs)
    if cfg.checkpoint != "last" and best_state is not None:
        model.load_state_dict(best_state)
        label = f"{cfg.checkpoint} (epoch {best_epoch})"
    else:
        best_epoch, label = cfg.epochs, f"last (epoch {cfg.epochs})"
    model.eval()
    return TrainResult(model, label, best_epoch, history, time.perf_counter() - start, None)


def train_cell_decoder(
    cell: CellSpec,
    task: SequenceTaskData,
    *,
    device: str,
    progress: Progress | None = None,
    max_length: int | None = None,
) -> TrainResult:
    """Train the cell's decoder (its attention and options, the cell seed) on a causal task."""
    name = cell.attention.name
    if attention_entry(name).capabilities.learning_phase:
        raise SkipCell(
            f"attention {name!r} has a learning phase (phase A), which is defined for the encoder "
            f"classifier only; a decoder without it would be its Vanilla twin"
        )
    seed = cell.seed
    seed_everything(seed)
    options = cell.attention.options
    model = TransformerDecoder(decoder_config(cell, task, max_length), name, options, seed=seed)
    training = make_options(TrainConfig, cell.training, what="training")
    return train_decoder(model, task, training, seed=seed, device=device, progress=progress)
