"""Ranks that claim only what the paired statistics support: tied groups, and classifiers at chance.

On one task, labels are ranked by RANK_METRIC (accuracy, higher is better as declared) in groups:
the best label and every label whose paired difference with it is not detectable (over the seeds
both have: the 95% t-interval holds 0, or the per-example McNemar test does not back it; see
`attnbench.report.paired.paired_difference`) share ranks 1..k; the next group starts from the best
of the rest. Labels are compared on one seed set, the one most labels have; a label measured
without those seeds (e.g. another run's, in a merged leaderboard) gets no rank, and a label or
task with one seed is not ranked (one seed gives no interval).

At chance: a label whose accuracy is not above the majority class of the test labels by the exact
one-sided binomial test (per seed, combined across seeds as `combine_p_values`) is marked and left
out of the ranking; its other metrics are still shown.
"""

from __future__ import annotations

import dataclasses
import math

import pandas as pd
from scipy import stats as scipy_stats

from attnbench.metrics import metric_direction
from attnbench.report.comparisons import combine_p_values
from attnbench.report.paired import ALPHA, DETECTED, PredictionCache, cells_by_seed, paired_difference

RANK_METRIC = "accuracy"


@dataclasses.dataclass
class Standing:
    """One label's place on one task: its group's ranks (None: not ranked) and why not, if not."""

    label: str
    mean: float
    seeds: int
    low: int | None = None  # first rank of the label's group
    high: int | None = None  # last rank of the label's group
    chance_p: float = math.nan  # combined p of 'accuracy above the majority class'; NaN: untested
    at_chance: bool = False
    why_unranked: str | None = None

    @property
    def rank_text(self) -> str:
        """'1', '1–4', or the reason it has no rank."""
        if self.low is None:
            return self.why_unranked or "not ranked"
        return str(self.low) if self.high == self.low else f"{self.low}–{self.high}"

    @property
    def top(self) -> bool:
        return self.low == 1


def chance_p_value(cells: dict[int, pd.Series], cache: PredictionCache) -> float:
    """Combined one-sided exact binomial p of 'accuracy > majority-class share' over seeds; NaN without predictions."""
    p_seeds = []
    for cell in cells.values():
        pred = cache.get(cell)
        if pred is None or len(pred.labels) == 0:
            continue
        counts = pd.Series(pred.labels).value_counts()
        majority = float(counts.iloc[0]) / len(pred.labels)
        correct = int(pred.correct.sum())
        p_seeds.append(float(scipy_stats.binomtest(correct, len(pred.labels), majority, alternative="greater").pvalue))
    return combine_p_values(p_seeds)


def _seed_cohort(seed_sets: list[frozenset[int]]) -> frozenset[int]:
    """The seed set the labels are compared on: the one most labels have (ties: more seeds, then lower seeds)."""
    if not seed_sets:
        return frozenset()
    counts = {s: sum(s <= other for other in seed_sets) for s in set(seed_sets)}
    return max(counts, key=lambda s: (counts[s], len(s), [-x for x in sorted(s)]))


def _better_first(standings: list[Standing], direction: str) -> list[Standing]:
    return sorted(standings, key=lambda s: (round(-s.mean if direction == "max" else s.mean, 12), s.label))


def task_standings(
    part: pd.DataFrame, labels: list[str], cache: PredictionCache, metric: str = RANK_METRIC
) -> dict[str, Standing]:
    """Group ranks of `labels` on one task; `part` holds that task's ok cells (label, seed, metrics, details)."""
    direction = metric_direction(metric) or "max"
    cells = {lab: cells_by_seed(part, lab) for lab in labels}
    standings = {}
    for lab in labels:
        values = [c["metrics"][metric] for c in cells[lab].values() if metric in c["metrics"]]
        standings[lab] = Standing(lab, sum(values) / len(values) if values else math.nan, len(values))
    for s in standings.values():
        if metric == "accuracy":
            s.chance_p = chance_p_value(cells[s.label], cache)
            s.at_chance = math.isfinite(s.chance_p) and s.chance_p >= ALPHA
        if s.at_chance:
            s.why_unranked = "at chance"
        elif s.seeds == 0:
            s.why_unranked = "no result"
        elif s.seeds < 2:
            s.why_unranked = "one seed: no rank"
    candidates = [s for s in standings.values() if s.why_unranked is None]
    cohort = _seed_cohort([frozenset(cells[s.label]) for s in candidates])
    for s in candidates:
        if not cohort <= set(cells[s.label]):
            s.why_unranked = f"seeds {sorted(cells[s.label])} lack the task's {sorted(cohort)}: not ranked"
    remaining = _better_first([s for s in candidates if s.why_unranked is None], direction)
    next_rank = 1
    while remaining:
        best, group, rest = remaining[0], [remaining[0]], []
        for other in remaining[1:]:
            found = paired_difference(cells[best.label], cells[other.label], metric, cache)
            if found is None or len(found["seeds"]) < 2:
                other.why_unranked = f"fewer than 2 seeds shared with {best.label}: no rank"
            elif found["verdict"] in DETECTED:
                rest.append(other)
            else:
                group.append(other)
        for s in group:
            s.low, s.high = next_rank, next_rank + len(group) - 1
        next_rank += len(group)
        remaining = rest
    return standings


def value_standings(values: pd.DataFrame, metric: str) -> dict[str, Standing]:
    """Group ranks from bare per-seed values (columns label, seed, value) of a quantity that `metric` names the
    direction of (e.g. accuracy at one corruption severity): the same groups as `task_standings` over the seeds'
    paired interval, without a per-example test (there are no stored predictions for it)."""
    part = pd.DataFrame(
        [
            {
                "label": r.label,
                "seed": int(r.seed),
                "metrics": {metric: float(r.value)},
                "details": {},
                "run": "",
                "cell_id": f"{r.label}/{r.seed}",
            }  # fmt: skip
            for r in values.itertuples()
            if pd.notna(r.value)
        ],
        columns=["label", "seed", "metrics", "details", "run", "cell_id"],
    )
    return task_standings(part, sorted(set(values["label"])), PredictionCache(), metric=metric)  # no chance test


def top_group_marks(standings: dict[str, Standing], order: list[str]) -> list[bool]:
    """Bold per label of `order`: the top group, unless every ranked label is in it (then bold would single out
    nobody)."""
    ranked = [s for s in standings.values() if s.low is not None]
    marked = len([s for s in ranked if s.top]) < len(ranked)
    return [marked and lab in standings and standings[lab].top for lab in order]


def ranking_note(metric: str = RANK_METRIC) -> str:
    """The footnote every grouped ranking carries."""
    return (
        f"Rank: by mean {metric} over seeds, in groups: a label whose paired difference with its group's best "
        "is not detectable (95% t-interval over shared seeds holds 0, or the per-example test, exact McNemar, "
        f"gives p ≥ {ALPHA}) shares the group's ranks (e.g. 1–4). Bold: the top group, not a point estimate. "
        "With one seed, or without the seeds most labels share, no rank is claimed. "
        f"At chance: accuracy not above the majority class of the test labels (exact one-sided binomial test, "
        f"per seed, combined as min(1, 2 × mean), p ≥ {ALPHA}); shown, not ranked."
    )
