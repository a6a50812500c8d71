"""The engine's public calls, exported as `attnbench.compare` and `attnbench.standings`: on a run folder or on a
results frame (`attnbench.decisions.frame` says what a frame holds).

    import attnbench
    pairs = attnbench.compare("results/recall", metric="accuracy", task="kv8")
    table = attnbench.standings("results/recall", metric="accuracy", task="kv8")

On a run folder, the suite's `comparisons:` settings apply (its margins, unless `margin` is given; its correction
is the wiring's to use: these calls take `correction` as given).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from attnbench.decisions.corrections import Correction
from attnbench.decisions.pairwise import compare_frame
from attnbench.decisions.ranks import standings_frame
from attnbench.decisions.runs import read_run
from attnbench.errors import UserError
from attnbench.measurements import measurement_names

Results = str | Path | pd.DataFrame


def _frame(results: Results, metric: str, measurement: str | None) -> tuple[pd.DataFrame, float | None]:
    """The results frame (of `measurement` only, when given), and the suite's margin for `metric` when `results` is
    a run folder."""
    margin = None
    if isinstance(results, (str, Path)):
        frame, settings = read_run(results, metric)
        margin = settings.margin(metric)
    else:
        measurement_names()  # every measurement module imported: the records of the metrics they declare
        frame = results
    if measurement is not None:
        if "measurement" not in frame.columns or measurement not in set(frame["measurement"]):
            known = sorted(map(str, set(frame.get("measurement", pd.Series(dtype=object)).dropna())))
            raise UserError(
                f"no results of measurement {measurement!r}; the results hold: {', '.join(known) or 'none'}"
            )
        frame = frame[frame["measurement"] == measurement]
    return frame, margin


def compare(
    results: Results,
    *,
    metric: str,
    task: str | None = None,
    reference: str | None = None,
    margin: float | None = None,
    alpha: float = 0.05,
    correction: Correction = "holm",
    higher_is_better: bool | None = None,
    pairs: Sequence[tuple[str, str]] | None = None,
    measurement: str | None = None,
) -> pd.DataFrame:
    """Every pair of labels within a task (or each against `reference`, or the given `pairs`): a - b with its
    interval at the family's corrected level, p, p_adjusted, verdict (ahead / behind / equivalent / undecided),
    margin, mde and seeds_needed (`attnbench.decisions.pairwise`, `attnbench.decisions.verdicts`). `measurement`:
    only its results, where several measurements report the metric on one task."""
    frame, suite_margin = _frame(results, metric, measurement)
    return compare_frame(
        frame,
        metric=metric,
        task=task,
        reference=reference,
        margin=margin if margin is not None else suite_margin,
        alpha=alpha,
        correction=correction,
        higher_is_better=higher_is_better,
        pairs=pairs,
    )


def standings(
    results: Results,
    *,
    metric: str,
    task: str | None = None,
    alpha: float = 0.05,
    higher_is_better: bool | None = None,
    measurement: str | None = None,
) -> pd.DataFrame:
    """Each label's mean and interval within a task, its rank by mean, a confidence set for the rank and whether it
    may be the best (`attnbench.decisions.ranks`)."""
    frame, _ = _frame(results, metric, measurement)
    return standings_frame(frame, metric=metric, task=task, alpha=alpha, higher_is_better=higher_is_better)
