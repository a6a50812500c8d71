"""Pairwise comparison of labels within a task: `compare_frame`, the engine behind `attnbench.compare`.

The family is the set of pairs of one task and metric: every pair of labels, each label against `reference`, or
the `pairs` given; it is corrected as one (`attnbench.decisions.corrections`). Per pair: a - b over the seeds both
have (a NaN seed is noted and left out), its spread from seeds and, where stored, test examples
(`attnbench.decisions.spread`), the verdict and its interval (`attnbench.decisions.verdicts`), and the power
figures (`attnbench.decisions.power`) at the family's planning level (alpha / m under a correction). A metric
declared exact (a count) is not tested: its pairs differ or they do not (`attnbench.decisions.exact`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from attnbench.decisions.corrections import Correction, check_correction, planning_level
from attnbench.decisions.exact import EXACT, exact_decisions
from attnbench.decisions.frame import Family, families
from attnbench.decisions.power import mde, seeds_needed
from attnbench.decisions.spread import Estimate, difference_spread
from attnbench.decisions.variance import Spread
from attnbench.decisions.verdicts import decide
from attnbench.errors import UserError
from attnbench.metrics import MetricInfo, metric_exact, metric_info

COLUMNS = [
    "task",
    "metric",
    "label_a",
    "label_b",
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
]
EXTRA = ["level", "correction", "design", "variance", "n_examples", "values_a", "values_b", "note", "per_seed", "fixed"]
JUDGED = ("estimate", "low", "high", "p", "p_adjusted", "margin", "mde", "seeds_needed", "level")  # per pair


def direction_of(metric: str, higher_is_better: bool | None) -> bool:
    """Whether higher is better: as given, else as the metric declares; refused where neither says."""
    if higher_is_better is not None:
        return bool(higher_is_better)
    info = metric_info(metric)
    if info is None or info.direction is None:
        raise UserError(
            f"metric {metric!r} declares no direction (register_metric(..., direction='max'/'min')); "
            f"pass higher_is_better=True or False"
        )
    return info.direction == "max"


def family_pairs(
    family: Family, reference: str | None, pairs: Sequence[tuple[str, str]] | None
) -> list[tuple[str, str]]:
    """The family's pairs (a, b): the given ones present, each label against `reference`, or all pairs."""
    present = sorted(family.labels)
    if pairs is not None:
        return [(a, b) for a, b in pairs if a in family.labels and b in family.labels and a != b]
    if reference is not None:
        if reference not in family.labels:
            raise UserError(
                f"reference {reference!r} has no {family.metric} results on task {family.task!r}; "
                f"labels: {', '.join(present)}"
            )
        return [(label, reference) for label in present if label != reference]
    return list(itertools.combinations(present, 2))


def metric_width(info: MetricInfo | None) -> float:
    """high - low of a metric's declared bounds (inf where unbounded): no difference is larger."""
    if info is None or info.bounds[0] is None or info.bounds[1] is None:
        return math.inf
    return info.bounds[1] - info.bounds[0]


def metric_margin(info: MetricInfo | None, margin: float | None, b_mean: float) -> float:
    """The equivalence margin in the metric's units: as given, else declared (a relative one as a fraction of the
    compared-against mean `b_mean`); NaN where none is declared."""
    if margin is not None:
        return float(margin)
    if info is None or info.margin is None:
        return math.nan
    return info.margin * abs(b_mean) if info.margin_relative else info.margin


def power_figures(
    spread: Spread, margins: np.ndarray, tested: int, correction: Correction, alpha: float, width: float
) -> tuple[np.ndarray, np.ndarray]:
    """(mde, seeds_needed) per problem at the family's planning level; an mde past the metric's range is inf (no
    difference it can take would be detected)."""
    planning = planning_level(tested, correction, alpha)
    found = mde(spread, planning)
    return np.where(found > width, np.inf, found), seeds_needed(spread, margins, planning)


def _tested(
    family: Family,
    pairs: list[tuple[str, str]],
    estimates: list[Estimate],
    *,
    higher_is_better: bool,
    margin: float | None,
    alpha: float,
    correction: Correction,
) -> dict[str, np.ndarray]:
    """Per pair of a measured metric: the estimate, the corrected tests' verdict and interval (kept inside the range a
    difference can take), the margin and the power figures."""
    info = metric_info(family.metric)
    stacked = Spread(
        mean=np.array([e.spread.mean[0] for e in estimates]),
        se=np.array([e.spread.se[0] for e in estimates]),
        df=np.array([e.spread.df[0] for e in estimates]),
        seeds=0,
        per_seed=np.array([e.spread.per_seed[0] for e in estimates]),
        fixed=np.array([e.spread.fixed[0] for e in estimates]),
    )
    margins = np.array(
        [
            metric_margin(
                info, margin, float(np.mean([family.labels[b].values[s] for s in e.seeds])) if e.seeds else 0.0
            )
            for (_, b), e in zip(pairs, estimates)
        ]
    )
    decided = decide(stacked.mean, stacked.se, stacked.df, margins, higher_is_better, alpha, correction)
    width = metric_width(info)
    power_mde, needed = power_figures(stacked, margins, int(np.isfinite(decided["p"]).sum()), correction, alpha, width)
    return decided | {
        "estimate": stacked.mean,
        "low": np.maximum(decided["low"], -width),
        "high": np.minimum(decided["high"], width),
        "margin": margins,
        "mde": power_mde,
        "seeds_needed": needed,
    }


def _counted(
    family: Family, pairs: list[tuple[str, str]], estimates: list[Estimate], higher_is_better: bool
) -> dict[str, np.ndarray]:
    """Per pair of an exact metric (`attnbench.decisions.exact`): its means on the seeds both labels have, compared
    as they are."""
    means = [
        [float(np.mean([family.labels[x].values[s] for s in e.seeds])) if e.seeds else np.nan for x in pair]
        for pair, e in zip(pairs, estimates)
    ]
    a, b = np.array(means, dtype=float).reshape(-1, 2).T
    return exact_decisions(a, b, higher_is_better)


def _untested(e: Estimate) -> list[str]:
    """Why a measured pair has no verdict, where it has none."""
    if len(e.seeds) == 1:
        return ["one seed in common: no verdict"]
    if len(e.seeds) > 1 and not e.spread.se[0] > 0:
        return ["no spread between seeds (coincident values): no interval, no verdict"]
    return []


def compare_family(
    family: Family,
    pairs: list[tuple[str, str]],
    *,
    higher_is_better: bool,
    margin: float | None,
    alpha: float,
    correction: Correction,
) -> pd.DataFrame:
    """One row per pair of the family (COLUMNS + EXTRA): tested (`_tested`), or for an exact metric compared as
    counted (`_counted`)."""
    estimates = [difference_spread(family.labels[a], family.labels[b], family.design) for a, b in pairs]
    exact = metric_exact(family.metric)
    judged = (
        _counted(family, pairs, estimates, higher_is_better)
        if exact
        else _tested(
            family,
            pairs,
            estimates,
            higher_is_better=higher_is_better,
            margin=margin,
            alpha=alpha,
            correction=correction,
        )
    )
    rows = []
    for i, ((a, b), e) in enumerate(zip(pairs, estimates)):
        notes = list(e.notes) + ([] if exact else _untested(e))
        rows.append(
            {
                "task": family.task,
                "metric": family.metric,
                "label_a": a,
                "label_b": b,
                "n_seeds": len(e.seeds),
                **{column: judged[column][i] for column in JUDGED},
                "verdict": str(judged["verdict"][i]),
                "correction": correction,
                "design": family.design,
                "variance": EXACT if exact else e.variance,
                "n_examples": e.spread.examples,
                "values_a": tuple(family.labels[a].values[s] for s in e.seeds),
                "values_b": tuple(family.labels[b].values[s] for s in e.seeds),
                "note": "; ".join(notes),
                # the difference's variance components (`attnbench.decisions.variance.Spread`): what projects its
                # standard error to other seed counts (`attnbench.decisions.budget`)
                "per_seed": float(e.spread.per_seed[0]),
                "fixed": float(e.spread.fixed[0]),
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS + EXTRA)


def compare_frame(
    frame: pd.DataFrame,
    *,
    metric: str,
    task: str | None = None,
    reference: str | None = None,
    margin: float | None = None,
    alpha: float = 0.05,
    correction: Correction = "holm",
    higher_is_better: bool | None = None,
    pairs: Sequence[tuple[str, str]] | None = None,
) -> pd.DataFrame:
    """`attnbench.compare` on a results frame (`attnbench.decisions.frame`): one row per pair per task."""
    check_correction(correction)
    if not 0 < alpha < 1:
        raise UserError(f"alpha={alpha} must lie in (0, 1), e.g. 0.05")
    if margin is not None and not (math.isfinite(margin) and margin >= 0):
        raise UserError(f"margin={margin} must be a non-negative number in the metric's units")
    found = families(frame, metric, task)
    better = direction_of(metric, higher_is_better)
    tables = [
        compare_family(
            family,
            family_pairs(family, reference, pairs),
            higher_is_better=better,
            margin=margin,
            alpha=alpha,
            correction=correction,
        )
        for family in found
    ]
    tables = [t for t in tables if len(t)]
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(columns=COLUMNS + EXTRA)
