"""Training and evaluating the causal decoder on a task that labels positions (attnbench.tasks.sequence).

The one training loop (`attnbench.train.train_model`) with the phase-B settings of the classifier
(`TrainConfig`: AdamW, warm-up then cosine decay, clipping, checkpoint chosen on validation) and the objective
`NEXT_TOKEN`: the loss over labelled positions (`decoder.token_loss`), token accuracy and loss on validation.
Evaluation gives, per labelled position, the loss in nats and whether the arg-max token was the label, from the
parallel forward or from the recurrent `step` (the same logits), or from whichever of the two times faster on the
first batch (`form="auto"`: the step only where every layer's state keeps its size, so that its cost per token
does not grow), recorded with the scores.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import torch
from torch import Tensor, nn

from attnbench.cell_spec import CellSpec
from attnbench.decoder import IGNORE, TransformerDecoder, token_loss
from attnbench.measurements import SkipCell
from attnbench.model import ModelConfig
from attnbench.options import make_options
from attnbench.progress import Progress
from attnbench.readout import LastPositionReadout
from attnbench.registry import learning_phase_entry
from attnbench.runtime import record_what_ran, seed_everything
from attnbench.sizing import size_to_match
from attnbench.tasks.sequence import SequenceTaskData, TokenSplit
from attnbench.train import Objective, TrainConfig, TrainResult, train_model


@dataclasses.dataclass
class TokenScores:
    """Per position of a split: loss (N, L) in nats (nan where unlabelled) and correct (N, L) bool."""

    loss: Tensor
    correct: Tensor
    labelled: Tensor  # (N, L) bool
    form: dict[str, Any] | None = None  # how the logits were computed: {"form": "parallel" | "step", timings}

    def mean_loss(self) -> float:
        return float(self.loss[self.labelled].mean())

    def accuracy(self) -> float:
        return float(self.correct[self.labelled].float().mean())

    def answers_right(self) -> Tensor:
        """Whether each answer (a maximal run of consecutive labelled positions in a row, in row-major order) has
        every position right -> (answers,) bool."""
        labelled = self.labelled
        starts = labelled & ~torch.nn.functional.pad(labelled[:, :-1], (1, 0))
        answer = torch.cumsum(starts.flatten(), 0) - 1  # each labelled position's answer number
        wrong = (labelled & ~self.correct).flatten()
        count = int(starts.sum())
        return torch.bincount(answer[wrong], minlength=count) == 0

    def exact_match(self) -> float:
        """Fraction of answers whose every token is right (under teacher forcing, which is greedy decoding's
        exact match: each token right given a right prefix)."""
        return float(self.answers_right().float().mean())

    def per_row(self, values: Tensor) -> Tensor:
        """Each row's sum of `values` (N, L) over its labelled positions, over the mean labelled count per row ->
        (N,) float64, whose mean is the mean of `values` over every labelled position (a row's own mean where every
        row labels as many): the per-example outcomes of a position-averaged metric (`encode_outcomes`)."""
        counts = self.labelled.sum(dim=1).double()
        sums = torch.where(self.labelled, values.double().nan_to_num(0.0), 0.0).sum(dim=1)
        return sums / counts.mean().clamp_min(1.0)

    def subset(self, rows: Tensor) -> TokenScores:
        """The scores of some rows (a bool (N,) mask or an index)."""
        return TokenScores(self.loss[rows], self.correct[rows], self.labelled[rows])


def stepped_logits(model: nn.Module, ids: Tensor, mask: Tensor | None = None) -> Tensor:
    """A decoder's logits (B, N, V) computed one token at a time through its recurrent state (equal to forward's);
    mask (B, N) bool, False = padding."""
    state, out = model.init_state(ids.shape[0]), []
    for t in range(ids.shape[1]):
        logits, state = model.step(ids[:, t], state, None if mask is None else mask[:, t])
        out.append(logits)
    return torch.stack(out, dim=1)


def constant_state(model: nn.Module) -> bool:
    """Whether every layer's decoding state keeps its size as the context grows (a recurrent state, not a cache)."""
    return all(hasattr(a, "state_size") and a.state_size(1) == a.state_size(1 << 16) for a in model.attention_modules())


@torch.no_grad()
def cheaper_form(model: nn.Module, ids: Tensor, mask: Tensor, probe: int = 16) -> dict[str, Any]:
    """Which form computes these rows' logits faster: the parallel forward timed on them against the step timed
    on their first `probe` positions and scaled to the row (its cost per token is constant where the state is,
    the only case the step is tried)."""
    if not constant_state(model):
        return {"form": "parallel", "reason": "a layer's state grows with the context"}
    start = time.perf_counter()
    model(ids, mask)
    parallel = time.perf_counter() - start
    k = min(probe, ids.shape[1])
    start = time.perf_counter()
    stepped_logits(model, ids[:, :k], mask[:, :k])
    step = (time.perf_counter() - start) * ids.shape[1] / k
    return {"form": "step" if step < parallel else "parallel", "parallel_s": parallel, "step_s_estimate": step}


@torch.no_grad()
def score_tokens(
    model: nn.Module,
    split: TokenSplit,
    batch_size: int = 64,
    device: torch.device | str = "cpu",
    form: str = "parallel",
) -> TokenScores:
    """Each labelled position's loss (nats) and arg-max correctness, model in evaluation mode; the logits from
    `form`: parallel (forward), step (`stepped_logits`) or auto (`cheaper_form` on the first batch)."""
    model.eval()
    losses = torch.full(split.labels.shape, math.nan)
    correct = torch.zeros(split.labels.shape, dtype=torch.bool)
    start, chosen = 0, None
    for ids, mask, _, labels in split.batches(batch_size):
        ids, mask = ids.to(device), mask.to(device)
        if chosen is None:
            chosen = cheaper_form(model, ids, mask) if form == "auto" else {"form": form}
        logits = (stepped_logits(model, ids, mask) if chosen["form"] == "step" else model(ids, mask)).float().cpu()
        log_p = torch.log_softmax(logits, dim=-1)
        loss = -log_p.gather(-1, labels.clamp_min(0)[..., None])[..., 0]
        labelled = labels != IGNORE
        rows, width = slice(start, start + len(ids)), labels.shape[1]
        losses[rows, :width] = loss.masked_fill(~labelled, math.nan)
        correct[rows, :width] = (logits.argmax(-1) == labels) & labelled
        start += len(ids)
    return TokenScores(losses, correct, split.labels != IGNORE, chosen)


def score_at_lengths(
    model: nn.Module,
    task: SequenceTaskData,
    batch_size: int,
    device: torch.device | str = "cpu",
    form: str = "parallel",
) -> dict[int, TokenScores]:
    """The scores of each of the task's test splits at other lengths (TaskData.eval_splits), keyed by length, the
    logits from `form` (score_tokens)."""
    return {
        length: score_tokens(model, split, batch_size, device, form)
        for length, split in sorted(task.eval_splits.items())
    }


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
    return make_options(ModelConfig, {**cell.model, **sizes}, what="model")


def token_scores(model: nn.Module, split: TokenSplit, batch_size: int, device: torch.device) -> dict[str, float]:
    """Validation token accuracy and loss (nats) over the labelled positions."""
    scores = score_tokens(model, split, batch_size, device)
    return {"val_accuracy": scores.accuracy(), "val_loss": scores.mean_loss()}


def decoder_loss(model: nn.Module, batch: tuple) -> Tensor:
    """The decoder's loss over the labelled positions of a batch (ids, mask, segments, labels (B, L))."""
    ids, mask, _, labels = batch
    return token_loss(model(ids, mask), labels)


NEXT_TOKEN = Objective(decoder_loss, token_scores, "val_loss")


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
    phase = learning_phase_entry(name)
    if phase is not None and not phase.capabilities.causal:
        raise SkipCell(
            f"attention {name!r} has a learning phase ({phase.name}) defined for the encoder classifier only "
            f"(it reads each sequence's class label); a decoder without it would be its Vanilla twin"
        )
    seed = cell.seed
    sized = size_to_match(
        decoder_config(cell, task, max_length),
        name,
        cell.attention.options,
        length=task.max_length,
        build=lambda cfg, opts: TransformerDecoder(cfg, name, opts, seed=seed),
    )
    record_what_ran("model", dataclasses.asdict(sized.config))
    seed_everything(seed)
    model = TransformerDecoder(sized.config, name, sized.options, seed=seed)
    if task.info.get("readout") == "last":  # MAD's compression: every output from the last position alone
        model = LastPositionReadout(model)
    training = make_options(TrainConfig, cell.training, what="training")
    result = train_model(model, task, training, NEXT_TOKEN, seed=seed, device=device, progress=progress)
    return dataclasses.replace(result, sizing=sized.record)
