"""Each label against a known value (a chance rate, a published number taken as exact, a target): the engine's
one-sample verdicts, the ones "at chance" flags are read from.

`compare_to_value(frame, metric=..., value=...)`: per task, every label's mean minus `value` (a number, or one
per task), its spread from seeds and, where stored, test examples (`attnbench.decisions.spread.level_spread`),
and the verdicts of `attnbench.decisions.verdicts` over the family of the task's labels: "ahead" (above the value,
in the metric's direction), "behind", "equivalent" (within +-margin of it: e.g. at chance) or "undecided".
`value_seeds`: the value is itself a mean over that many seeds of the same training (a published number: 1 where
the paper gives no count), so it carries the label's own seed-to-seed variance too: se^2 = per_seed / S +
per_seed / value_seeds + the test set's part (None: the value is exact, as a chance rate is). A metric declared
exact (a count) is not tested: a label's count is above, below or at the value (`attnbench.decisions.exact`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from attnbench.decisions.corrections import Correction, check_correction
from attnbench.decisions.exact import EXACT, exact_decisions
from attnbench.decisions.frame import Family, families
from attnbench.decisions.pairwise import JUDGED, direction_of, metric_margin, metric_width, power_figures
from attnbench.decisions.spread import Estimate, level_spread
from attnbench.decisions.variance import Spread
from attnbench.decisions.verdicts import decide
from attnbench.errors import UserError
from attnbench.metrics import metric_exact, metric_info

COLUMNS = [
    "task",
    "metric",
    "label",
    "value",
    "n_seeds",
    "estimate",
    "low",
    "high",
    "p",
    "p_adjusted",
    "verdict",
    "margin",
    "mde",
    "seeds_needed",
    "level",
    "correction",
    "design",
    "variance",
    "note",
]


def _tested(
    family: Family,
    estimates: list[Estimate],
    value: float,
    *,
    higher_is_better: bool,
    margin: float | None,
    alpha: float,
    correction: Correction,
    value_seeds: int | None,
) -> dict[str, np.ndarray]:
    """Per label of a measured metric: mean - value, the corrected tests' verdict and interval (inside the range the
    metric can take), the margin and the power figures."""
    extra = 0.0 if value_seeds is None else 1.0 / value_seeds  # the value's own seed variance, in per_seed units
    spreads = Spread(
        mean=np.array([e.spread.mean[0] - value for e in estimates]),
        se=np.array([np.sqrt(e.spread.se[0] ** 2 + extra * e.spread.per_seed[0]) for e in estimates]),
        df=np.array([e.spread.df[0] for e in estimates]),
        seeds=0,
        per_seed=np.array([e.spread.per_seed[0] for e in estimates]),
        fixed=np.array([e.spread.fixed[0] + extra * e.spread.per_seed[0] for e in estimates]),
    )
    info = metric_info(family.metric)
    margins = np.full(len(estimates), metric_margin(info, margin, value))
    decided = decide(spreads.mean, spreads.se, spreads.df, margins, higher_is_better, alpha, correction)
    tested = int(np.isfinite(decided["p"]).sum())
    power_mde, needed = power_figures(spreads, margins, tested, correction, alpha, metric_width(info))
    low_bound, high_bound = info.bounds if info is not None else (None, None)
    return decided | {
        "estimate": spreads.mean,
        "low": decided["low"] if low_bound is None else np.maximum(decided["low"], low_bound - value),
        "high": decided["high"] if high_bound is None else np.minimum(decided["high"], high_bound - value),
        "margin": margins,
        "mde": power_mde,
        "seeds_needed": needed,
    }


def _family_rows(
    family: Family,
    value: float,
    *,
    higher_is_better: bool,
    margin: float | None,
    alpha: float,
    correction: Correction,
    value_seeds: int | None,
) -> pd.DataFrame:
    labels = sorted(family.labels)
    estimates = [level_spread(family.labels[label], family.design) for label in labels]
    exact = metric_exact(family.metric)
    judged = (
        exact_decisions(np.array([e.spread.mean[0] for e in estimates]), np.full(len(labels), value), higher_is_better)
        if exact
        else _tested(
            family,
            estimates,
            value,
            higher_is_better=higher_is_better,
            margin=margin,
            alpha=alpha,
            correction=correction,
            value_seeds=value_seeds,
        )
    )
    rows = []
    for i, (label, e) in enumerate(zip(labels, estimates)):
        notes = list(e.notes)
        if not exact and len(e.seeds) == 1:
            notes.append("one finite seed: no verdict")
        if not exact and len(e.seeds) > 1 and not e.spread.se[0] > 0:
            notes.append("no spread between seeds (coincident values): no interval, no verdict")
        rows.append(
            {
                "task": family.task,
                "metric": family.metric,
                "label": label,
                "value": value,
                "n_seeds": len(e.seeds),
                **{column: judged[column][i] for column in JUDGED},
                "verdict": str(judged["verdict"][i]),
                "correction": correction,
                "design": family.design,
                "variance": EXACT if exact else e.variance,
                "note": "; ".join(notes),
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS)


def compare_to_value(
    frame: pd.DataFrame,
    *,
    metric: str,
    value: float | Mapping[str, float],
    task: str | None = None,
    margin: float | None = None,
    alpha: float = 0.05,
    correction: Correction = "holm",
    higher_is_better: bool | None = None,
    value_seeds: int | None = None,
) -> pd.DataFrame:
    """Every label of every task (or `task`) against `value` (one number, or one per task): estimate = mean - value;
    `value_seeds`: the value is a mean over that many seeds (module docstring), None: exact."""
    check_correction(correction)
    if value_seeds is not None and value_seeds < 1:
        raise UserError(f"value_seeds={value_seeds} must be at least 1 (1: a single published run), or None")
    found = families(frame, metric, task)
    better = direction_of(metric, higher_is_better)
    tables = []
    for family in found:
        target = value.get(family.task) if isinstance(value, Mapping) else value
        if target is None or not math.isfinite(float(target)):
            raise UserError(f"no value to compare task {family.task!r} with; give value={{{family.task!r}: number}}")
        tables.append(
            _family_rows(
                family,
                float(target),
                higher_is_better=better,
                margin=margin,
                alpha=alpha,
                correction=correction,
                value_seeds=value_seeds,
            )
        )
    return pd.concat(tables, ignore_index=True)
