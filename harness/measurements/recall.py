"""`recall`: a decoder trained on a task that labels positions, scored at the labelled positions of its test split.

The tasks: associative recall (mqar), state tracking (parity, modular_count, permutation), the needle tasks
(niah) and MAD's mechanism tasks; any `SequenceTaskData` whose labels are answers rather than a text's every next
byte (byte_lm goes with `lm`; MAD's compression is read out from the last position alone, attnbench.readout). Metrics: accuracy over every labelled position of the test split, exact match of
its answers (an answer: a maximal run of consecutive labelled positions in a row, all of whose tokens must be
right), the loss (nll, nats), the decoding state per sequence and layer at the row length (`state_bytes`,
attnbench.measurements.state), so that accuracy can be read against state size, MQAR's number of key-value
pairs, and the same scores on each of the task's test splits at other lengths as `<metric>@<length>`
(attnbench.measurements.lengths). Details: MQAR's accuracy per query (the k-th question of a row, in row
order), the scores per group of test rows where the task tags its rows (a needle's depth and context length),
each test row's share of accuracy and nll (`outcomes`, for the inference engine), the validation scores a
`sweep:` selects on, and the training history.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Literal

import torch

from attnbench.cell_spec import CellSpec
from attnbench.decoder_training import TokenScores, score_at_lengths, score_tokens, train_cell_decoder
from attnbench.measurements import SkipCell, register_measurement
from attnbench.measurements.common import attention_runtime, load_cell_task, train_config
from attnbench.measurements.lengths import length_metrics, model_length
from attnbench.measurements.state import layer_states
from attnbench.metrics import register_metric
from attnbench.model import parameter_counts
from attnbench.options import option
from attnbench.predictions import encode_outcomes
from attnbench.progress import Progress
from attnbench.registry import layer_attentions
from attnbench.tasks.sequence import SequenceTaskData, TokenSplit

register_metric("num_kv_pairs", None, "key-value pairs per MQAR row", bounds=(1.0, None), format=".0f", exact=True)
register_metric(
    "exact_match",
    "max",
    "fraction of answers (runs of labelled positions) with every token right",
    bounds=(0.0, 1.0),
    margin=0.01,
)


register_metric(
    "layer_ratio",
    None,
    "a hybrid's layers of its first attention per layer of the other (3 = 3:1)",
    format=".3g",
    exact=True,
)


def layer_ratio(layers: list[str]) -> float | None:
    """The linear-to-full ratio of a model of two kinds of layer: layers of the kind its first layer has per layer of
    the other (3.0 for gdn, gdn, gdn, swa); None for one kind, or more than two."""
    if len(set(layers)) != 2:
        return None
    first = layers.count(layers[0])
    return first / (len(layers) - first)


@dataclasses.dataclass
class RecallOptions:
    """Options of the recall measurement (the task sets the difficulty)."""

    swept: ClassVar[bool] = True  # a sweep tunes it: it trains and stores details["validation"]
    eval_form: Literal["parallel", "step", "auto"] = option(
        "parallel",
        "how the eval lengths' logits are computed: parallel (forward), step (one token at a time through the "
        "recurrent state: memory constant in the length), auto (whichever times faster on the first batch)",
    )


def accuracy_per_query(scores: TokenScores) -> list[float]:
    """Accuracy of the k-th answer of each row (in row order), k = 1 .. answers per row."""
    per_row = scores.labelled.sum(dim=1)
    if per_row.numel() == 0 or bool((per_row != per_row[0]).any()):
        raise ValueError("rows hold different numbers of answers; accuracy per query needs the same number")
    correct = scores.correct[scores.labelled].view(len(per_row), int(per_row[0]))  # row-major: row order kept
    return correct.float().mean(dim=0).tolist()


def scores_of(scores: TokenScores) -> dict[str, float]:
    """Accuracy, exact match and nll of some scored rows."""
    return {"accuracy": scores.accuracy(), "exact_match": scores.exact_match(), "nll": scores.mean_loss()}


def row_outcomes(scores: TokenScores) -> dict[str, Any]:
    """Per test row, its share of accuracy and nll (`TokenScores.per_row`: a row's accuracy over its answers where
    every row holds as many), stored for the inference engine (`attnbench.decisions`): the test rows as a source of
    variance beside the seeds."""
    return {
        "accuracy": encode_outcomes(scores.per_row(scores.correct)),
        "nll": encode_outcomes(scores.per_row(scores.loss)),
    }


def scores_by_tags(scores: TokenScores, split: TokenSplit) -> list[dict[str, Any]]:
    """One entry per combination of the split's row tags (e.g. context length x depth): the tag values, the rows
    and their scores; empty where the split has no tags."""
    if not split.tags:
        return []
    names = sorted(split.tags)
    columns = torch.stack([split.tags[name].double() for name in names], dim=1)
    groups = []
    for values in sorted(set(map(tuple, columns.tolist()))):
        rows = (columns == torch.tensor(values, dtype=torch.float64)).all(dim=1)
        tags = {name: int(v) if float(v).is_integer() else v for name, v in zip(names, values)}
        groups.append({**tags, "rows": int(rows.sum()), **scores_of(scores.subset(rows))})
    return groups


@register_measurement("recall", config=RecallOptions)
def measure_recall(
    cell: CellSpec, options: RecallOptions, *, device: str = "cpu", progress: Progress | None = None
) -> dict[str, Any]:
    """Train a decoder on the cell's answer-labelled task; accuracy and exact match overall, per query, per tagged
    group of rows and per test length, with the state size."""
    task = load_cell_task(cell)
    if not isinstance(task, SequenceTaskData) or task.raw is not None:
        raise SkipCell(
            f"task {task.name!r} does not label answers in token rows; the recall measurement needs a task such as "
            f"mqar, parity or niah (byte_lm goes with the lm measurement)"
        )
    result = train_cell_decoder(cell, task, device=device, progress=progress, max_length=model_length(task))
    batch = train_config(cell).eval_batch_size
    test = score_tokens(result.model, task["test"], batch, device)
    validation = score_tokens(result.model, task["validation"], batch, device)
    scored = score_at_lengths(result.model, task, batch, device, options.eval_form)
    at_lengths = {n: scores_of(s) for n, s in scored.items()}
    cfg = result.model.cfg
    state = layer_states(result.model.attention_modules(), task.max_length, cfg.head_dim, cfg.num_heads)
    layers = [name for name, _ in layer_attentions(cell.attention.name, cell.attention.options, cfg.num_layers)]
    ratio = layer_ratio(layers)
    params = parameter_counts(result.model)
    metrics = {
        **scores_of(test),
        "state_bytes": float(state["mean"]),
        "state_bytes_total": float(state["total"]),
        **({"layer_ratio": ratio} if ratio is not None else {}),
        **({"num_kv_pairs": float(task.info["num_kv_pairs"])} if "num_kv_pairs" in task.info else {}),
        **length_metrics(at_lengths),
        "train_seconds": result.train_seconds,
        "params_total": float(params["total"]),
        "params_attention": float(params["attention"]),
    }
    details = {
        **({"accuracy_per_query": accuracy_per_query(test)} if "num_kv_pairs" in task.info else {}),
        **({"groups": groups} if (groups := scores_by_tags(test, task["test"])) else {}),
        **(
            {"per_length": [{"length": n, **s, "form": scored[n].form} for n, s in at_lengths.items()]}
            if at_lengths
            else {}
        ),
        "outcomes": row_outcomes(test),
        "state": state["layers"],
        "layers": layers,
        "checkpoint": result.checkpoint,
        "best_epoch": result.best_epoch,
        "history": result.history,
        "validation": scores_of(validation),
        "answers": int(test.answers_right().numel()),
        "labelled": int(test.labelled.sum()),
        "attention_runtime": attention_runtime(result.model),
        "phase_a": result.phase_a,  # a learning phase that runs in a decoder (Hedgehog's distillation)
        **({"sizing": result.sizing} if result.sizing else {}),
    }
    return {"metrics": metrics, "details": details}
