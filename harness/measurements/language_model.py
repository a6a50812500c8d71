"""`lm`: a decoder trained on byte-level language modelling (task byte_lm), scored on held-out text.

Protocol (attnbench.tasks.byte_lm): non-overlapping blocks of block_size bytes, every test byte after the
first scored once. Metrics: nll (nats per byte), bits_per_byte (nll / ln 2) with the half-width of its 95%
interval over blocks (1.96 standard errors of the block means), perplexity (exp nll), token accuracy, and
bits per byte at twice the training length (the test text re-cut into blocks of 2 block_size; the model's
position table is built that long, its second half never trained). With the task's `eval_lengths`, the test
text re-cut into blocks of each length: bits_per_byte@<length> and nll@<length>, and per length the bits per byte
of each position bucket up to the longest block (fla's evals/ppl.py and FoX's per-token loss), so that loss can
be read against position past the training length (where positions are learned, the table is built as long as
the longest block, its rows past the training length never trained). Details: bits per byte per position bucket
(does later context help?), the same per eval length, each test block's bits per byte (`outcomes`, for the
inference engine), the validation scores a `sweep:` selects on, the history.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any, ClassVar, Literal

from torch import Tensor

from attnbench.cell_spec import CellSpec
from attnbench.decoder_training import TokenScores, score_at_lengths, score_tokens, train_cell_decoder
from attnbench.measurements import SkipCell, register_measurement
from attnbench.measurements.common import attention_runtime, load_cell_task, train_config
from attnbench.measurements.lengths import length_metrics, model_length
from attnbench.metrics import register_metric
from attnbench.model import parameter_counts
from attnbench.options import option, require
from attnbench.predictions import encode_outcomes
from attnbench.progress import Progress
from attnbench.tasks.byte_lm import byte_blocks
from attnbench.tasks.sequence import SequenceTaskData

BITS = {"bounds": (0.0, None), "margin": 0.01, "paired": True}  # a hundredth of a bit per byte is the margin
for _name, _direction, _text, _record in (
    ("bits_per_byte", "min", "mean -log2 p(next byte) on held-out text", BITS | {"headline": True}),
    ("bits_per_byte_2x", "min", "bits per byte on blocks twice the training length", BITS),
    ("bits_per_byte@*", "min", "bits per byte on test blocks of the length after @ (the task's eval_lengths)", BITS),
    (
        "bits_per_byte_ci95",
        None,
        "half-width of the 95% interval of bits_per_byte over blocks",
        {"bounds": (0.0, None)},
    ),
    (
        "perplexity",
        "min",
        "exp of the mean nll per byte",
        {"bounds": (1.0, None), "margin": 0.01, "margin_relative": True},
    ),
):
    register_metric(_name, _direction, _text, **_record)


@dataclasses.dataclass
class LanguageModelOptions:
    """Options of the language-modelling measurement."""

    swept: ClassVar[bool] = True  # a sweep tunes it: it trains and stores details["validation"]
    position_buckets: int = option(8, "equal buckets of block positions bits per byte is reported in")
    twice_length: bool = option(True, "also evaluate on blocks of twice the training length")
    eval_form: Literal["parallel", "step", "auto"] = option(
        "parallel",
        "how the eval lengths' logits are computed: parallel (forward), step (one token at a time through the "
        "recurrent state: memory constant in the length), auto (whichever times faster on the first batch)",
    )

    def __post_init__(self) -> None:
        require(self.position_buckets >= 1, f"position_buckets={self.position_buckets} must be at least 1")

    def row_lengths(self, task: Any) -> dict[str, int]:
        """The test rows scored beyond the task's own, by the option that asks for them (TaskConfig.check_lengths):
        twice the task's block_size."""
        block = getattr(task, "block_size", None)
        return {f"lm's twice_length (2 x block_size={block})": 2 * block} if self.twice_length and block else {}


def lm_metrics(scores: TokenScores) -> dict[str, float]:
    """nll (nats per token), bits per token with its 95% half-interval over rows, perplexity, accuracy."""
    nll = scores.mean_loss()
    per_row = (scores.loss.nan_to_num(0.0).sum(dim=1) / scores.labelled.sum(dim=1).clamp_min(1)) / math.log(2)
    spread = float(per_row.std()) / math.sqrt(len(per_row)) if len(per_row) > 1 else math.nan
    return {
        "nll": nll,
        "bits_per_byte": nll / math.log(2),
        "bits_per_byte_ci95": 1.96 * spread,
        "perplexity": math.exp(nll),
        "accuracy": scores.accuracy(),
    }


def block_outcomes(scores: TokenScores) -> dict[str, Any]:
    """Per test block, its bits per byte and nll (`TokenScores.per_row`; blocks scoring fewer bytes weigh less),
    stored for the inference engine (`attnbench.decisions`): the blocks as a source of variance beside the seeds."""
    nll = scores.per_row(scores.loss)
    return {"bits_per_byte": encode_outcomes(nll / math.log(2)), "nll": encode_outcomes(nll)}


def bits_per_bucket(loss: Tensor, buckets: int) -> list[dict[str, float]]:
    """Bits per byte of positions [start, stop) of each of `buckets` equal ranges of the block's positions."""
    n = loss.shape[1]
    edges = [round(i * n / buckets) for i in range(buckets + 1)]
    return [
        {"start": a, "stop": b, "bits_per_byte": float(loss[:, a:b].nanmean()) / math.log(2)}
        for a, b in itertools.pairwise(edges)
        if b > a
    ]


@register_measurement("lm", config=LanguageModelOptions)
def measure_language_model(
    cell: CellSpec, options: LanguageModelOptions, *, device: str = "cpu", progress: Progress | None = None
) -> dict[str, Any]:
    """Train a decoder on the cell's byte_lm task; held-out bits per byte, perplexity, buckets, twice the length."""
    task = load_cell_task(cell)
    if not isinstance(task, SequenceTaskData) or task.raw is None:
        raise SkipCell(f"task {task.name!r} is not a byte-level text task; lm needs byte_lm")
    block = task.max_length
    longest = max(model_length(task), 2 * block if options.twice_length else block)
    result = train_cell_decoder(cell, task, device=device, progress=progress, max_length=longest)
    batch = train_config(cell).eval_batch_size
    test = score_tokens(result.model, task["test"], batch, device)
    validation = score_tokens(result.model, task["validation"], batch, device)
    metrics = lm_metrics(test)
    if options.twice_length:
        long = score_tokens(result.model, byte_blocks(task.raw["test"], 2 * block), batch, device)
        metrics["bits_per_byte_2x"] = long.mean_loss() / math.log(2)
    at_lengths = score_at_lengths(result.model, task, batch, device, options.eval_form)
    metrics |= length_metrics(
        {n: {"bits_per_byte": s.mean_loss() / math.log(2), "nll": s.mean_loss()} for n, s in at_lengths.items()}
    )
    per_length = [
        {
            "length": n,
            "bits_per_byte": metrics[f"bits_per_byte@{n}"],
            "scored_bytes": int(s.labelled.sum()),
            "position_buckets": bits_per_bucket(s.loss, options.position_buckets),
            "form": s.form,
        }
        for n, s in at_lengths.items()
    ]
    params = parameter_counts(result.model)
    metrics |= {
        "train_seconds": result.train_seconds,
        "params_total": float(params["total"]),
        "params_attention": float(params["attention"]),
    }
    details = {
        "position_buckets": bits_per_bucket(test.loss, options.position_buckets),
        **({"per_length": per_length} if per_length else {}),
        "validation": lm_metrics(validation),
        "scored_bytes": int(test.labelled.sum()),
        "outcomes": block_outcomes(test),
        "checkpoint": result.checkpoint,
        "best_epoch": result.best_epoch,
        "history": result.history,
        "attention_runtime": attention_runtime(result.model),
        "phase_a": result.phase_a,  # a learning phase that runs in a decoder (Hedgehog's distillation)
        **({"sizing": result.sizing} if result.sizing else {}),
    }
    return {"metrics": metrics, "details": details}
