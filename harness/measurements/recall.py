"""`recall`: a decoder trained on multi-query associative recall (task mqar), scored at the answer positions.

Metrics: accuracy over every answer of the test split, its loss (nll, nats), the number of key-value pairs,
and the decoding state per sequence and layer at the row length (`state_bytes`, attnbench.measurements.state),
so that accuracy can be read against state size. Details: accuracy per query (the k-th question of a row,
in row order), the validation scores a `sweep:` selects on, and the training history.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from attnbench.cell_spec import CellSpec
from attnbench.decoder_training import TokenScores, score_tokens, train_cell_decoder
from attnbench.measurements import SkipCell, register_measurement
from attnbench.measurements.common import attention_runtime, load_cell_task, train_config
from attnbench.measurements.state import state_row
from attnbench.metrics import register_metric
from attnbench.model import parameter_counts
from attnbench.progress import Progress
from attnbench.tasks.sequence import SequenceTaskData

register_metric("num_kv_pairs", None, "key-value pairs per MQAR row")


@dataclasses.dataclass
class RecallOptions:
    """Options of the recall measurement (none yet: the task sets the difficulty)."""


def accuracy_per_query(scores: TokenScores) -> list[float]:
    """Accuracy of the k-th answer of each row (in row order), k = 1 .. answers per row."""
    per_row = scores.labelled.sum(dim=1)
    if per_row.numel() == 0 or bool((per_row != per_row[0]).any()):
        raise ValueError("rows hold different numbers of answers; accuracy per query needs the same number")
    correct = scores.correct[scores.labelled].view(len(per_row), int(per_row[0]))  # row-major: row order kept
    return correct.float().mean(dim=0).tolist()


@register_measurement("recall", config=RecallOptions)
def measure_recall(
    cell: CellSpec, options: RecallOptions, *, device: str = "cpu", progress: Progress | None = None
) -> dict[str, Any]:
    """Train a decoder on the cell's MQAR task; answer accuracy overall and per query, with the state size."""
    task = load_cell_task(cell)
    if not isinstance(task, SequenceTaskData) or "num_kv_pairs" not in task.info:
        raise SkipCell(f"task {task.name!r} is not associative recall; the recall measurement needs mqar")
    result = train_cell_decoder(cell, task, device=device, progress=progress)
    batch = train_config(cell).eval_batch_size
    test = score_tokens(result.model, task["test"], batch, device)
    validation = score_tokens(result.model, task["validation"], batch, device)
    attention = result.model.attention_modules()[0]
    cfg = result.model.cfg
    state = state_row(attention, task.max_length, cfg.head_dim, cfg.num_heads)
    params = parameter_counts(result.model)
    metrics = {
        "accuracy": test.accuracy(),
        "nll": test.mean_loss(),
        "state_bytes": float(state["bytes"]),
        "num_kv_pairs": float(task.info.get("num_kv_pairs", 0)),
        "train_seconds": result.train_seconds,
        "params_total": float(params["total"]),
        "params_attention": float(params["attention"]),
    }
    details = {
        "accuracy_per_query": accuracy_per_query(test),
        "state": state,
        "checkpoint": result.checkpoint,
        "best_epoch": result.best_epoch,
        "history": result.history,
        "validation": {"accuracy": validation.accuracy(), "nll": validation.mean_loss()},
        "answers": int(test.labelled.sum()),
        "attention_runtime": attention_runtime(result.model),
        "phase_a": result.phase_a,  # a learning phase that runs in a decoder (Hedgehog's distillation)
        **({"sizing": result.sizing} if result.sizing else {}),
    }
    return {"metrics": metrics, "details": details}
