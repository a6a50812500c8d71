"""Scores against row length: a task's test splits at other lengths (`TaskData.eval_splits`, keyed by length) scored
apart, each metric reported as `<metric>@<length>` (e.g. `accuracy@128`), so that every length is a metric of its
own in the tables, the rankings and the accuracy-against-length section (attnbench.report.lengths).

A model is built with a position table as long as the longest row it is scored on (`model_length`); with learned
absolute positions, the positions past the longest training row are never trained (their embeddings stay at
their initial values), which is the point of scoring there.
"""

from __future__ import annotations

from collections.abc import Mapping

from attnbench.metrics import register_metric
from attnbench.tasks.base import TaskData

for _name, _direction, _text, _bounds in (
    ("accuracy@*", "max", "accuracy on the test rows of the length after @ (the task's eval_splits)", (0.0, 1.0)),
    ("exact_match@*", "max", "exact match of the answers on the test rows of the length after @", (0.0, 1.0)),
    ("nll@*", "min", "mean negative log-likelihood (nats) on the test rows of the length after @", (0.0, None)),
):
    register_metric(_name, _direction, _text, bounds=_bounds, margin=0.01)


def model_length(task: TaskData) -> int:
    """The position table a model needs to score every split of `task`: its longest row, eval splits included."""
    return max([task.max_length, *task.eval_splits])


def length_metrics(values: Mapping[int, Mapping[str, float]]) -> dict[str, float]:
    """{length: {metric: value}} -> {"<metric>@<length>": value}, lengths in increasing order."""
    return {f"{name}@{length}": float(value) for length in sorted(values) for name, value in values[length].items()}
