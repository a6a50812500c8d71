"""Standings of labels within a task: `standings_frame`, the engine behind `attnbench.standings`.

Per label: the mean over its finite seeds and its (1 - alpha) interval from seeds and, where stored, test examples
(kept inside the metric's declared bounds), and the per-seed values. Ranks:
- `rank`: by mean in the metric's direction (ties share the better rank), so a lower mean is never ranked above a
  higher one;
- `rank_low`, `rank_high`: a confidence set for the rank, from every pair of the task compared at once with Holm's
  correction (`attnbench.decisions.pairwise`): rank_low = 1 + the labels detectably better, rank_high = the labels
  ranked - the labels detectably worse (Mogstad, Romano, Shaikh & Wilhelm 2024, "Inference for ranks", built on
  simultaneous pairwise tests; Holm controls their family-wise error);
- `best_set`: the labels no other label is detectably better than, i.e. rank_low == 1: at level alpha it holds the
  truly best label. Not a failure to reject: a label leaves it only when something beats it.
A label without a finite seed gets no rank; one with a single seed gets a mean and a rank, but no interval and no
pairwise verdict (its rank bounds span every place). A metric declared exact (a count: `attnbench.decisions.exact`)
gets no interval and no test: its labels are ranked by value, ties sharing a rank, each rank its own confidence
set, the best set the labels at rank 1.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from attnbench.decisions.exact import EXACT, exact_values
from attnbench.decisions.frame import Family, families
from attnbench.decisions.pairwise import compare_family, direction_of, family_pairs
from attnbench.decisions.spread import level_spread
from attnbench.errors import UserError
from attnbench.metrics import metric_exact, metric_info

COLUMNS = ["task", "label", "n_seeds", "mean", "low", "high", "rank", "rank_low", "rank_high", "best_set"]
EXTRA = ["seeds", "values", "design", "variance", "note"]


def _interval(family: Family, label: str, alpha: float) -> dict[str, object]:
    """Mean, its (1 - alpha) t-interval clipped to the metric's bounds (none for an exact metric), and how it was
    computed."""
    e = level_spread(family.labels[label], family.design)
    mean, se, df = e.spread.mean[0], e.spread.se[0], e.spread.df[0]
    exact = metric_exact(family.metric)
    low = high = math.nan
    if not exact and len(e.seeds) > 1 and se > 0:
        half = float(stats.t.isf(alpha / 2, df)) * se
        low, high = mean - half, mean + half
        info = metric_info(family.metric)
        bounds = info.bounds if info is not None else (None, None)
        low = low if bounds[0] is None else max(low, bounds[0])
        high = high if bounds[1] is None else min(high, bounds[1])
    notes = list(e.notes)
    if not exact and len(e.seeds) > 1 and not se > 0:
        notes.append("no spread between seeds (coincident values): no interval")
    return {
        "task": family.task,
        "label": label,
        "n_seeds": len(e.seeds),
        "mean": mean if e.seeds else math.nan,
        "low": low,
        "high": high,
        "seeds": tuple(e.seeds),
        "values": tuple(family.labels[label].values[s] for s in e.seeds),
        "design": family.design,
        "variance": EXACT if exact else e.variance,
        "note": "; ".join(notes),
    }


def family_standings(family: Family, *, higher_is_better: bool, alpha: float) -> pd.DataFrame:
    """One row per label of the family (COLUMNS + EXTRA), best mean first; an exact metric's ranks are known."""
    table = pd.DataFrame([_interval(family, label, alpha) for label in sorted(family.labels)])
    if metric_exact(family.metric):
        return _ordered(_exact_ranks(table, higher_is_better), higher_is_better)
    ranked = table["mean"].notna()
    table["rank"] = table["mean"].rank(method="min", ascending=not higher_is_better, na_option="keep")
    pairs = compare_family(
        family,
        family_pairs(family, None, None),
        higher_is_better=higher_is_better,
        margin=None,
        alpha=alpha,
        correction="holm",
    )
    detected = pairs[pairs["p_adjusted"] < alpha]
    a_better = (detected["estimate"] > 0) == higher_is_better
    winners = pd.concat([detected["label_a"][a_better], detected["label_b"][~a_better]])
    losers = pd.concat([detected["label_b"][a_better], detected["label_a"][~a_better]])
    beaten_by = losers.value_counts()
    beats = winners.value_counts()
    count = int(ranked.sum())
    rank_low = 1 + table["label"].map(beaten_by).fillna(0)
    rank_high = count - table["label"].map(beats).fillna(0)
    table["rank_low"] = np.where(ranked, np.minimum(rank_low, table["rank"]), np.nan)
    table["rank_high"] = np.where(ranked, np.maximum(rank_high, table["rank"]), np.nan)
    table["best_set"] = ranked & (table["rank_low"] == 1)
    return _ordered(table, higher_is_better)


def _exact_ranks(table: pd.DataFrame, higher_is_better: bool) -> pd.DataFrame:
    """Ranks of an exact metric's means: by value, equal values sharing the better rank; each rank is its own
    confidence set, and the best set is rank 1."""
    values = pd.Series(exact_values(table["mean"].to_numpy()), index=table.index)
    rank = values.rank(method="min", ascending=not higher_is_better, na_option="keep")
    return table.assign(rank=rank, rank_low=rank, rank_high=rank, best_set=rank == 1)


def _ordered(table: pd.DataFrame, higher_is_better: bool) -> pd.DataFrame:
    """The best mean first, then by label."""
    order = table["mean"] * (-1 if higher_is_better else 1)
    return table.assign(_order=order).sort_values(["_order", "label"], na_position="last").drop(columns="_order")


def standings_frame(
    frame: pd.DataFrame,
    *,
    metric: str,
    task: str | None = None,
    alpha: float = 0.05,
    higher_is_better: bool | None = None,
) -> pd.DataFrame:
    """`attnbench.standings` on a results frame: one row per label per task, each task's best mean first."""
    if not 0 < alpha < 1:
        raise UserError(f"alpha={alpha} must lie in (0, 1), e.g. 0.05")
    found = families(frame, metric, task)
    better = direction_of(metric, higher_is_better)
    tables = [family_standings(f, higher_is_better=better, alpha=alpha) for f in found]
    return pd.concat(tables, ignore_index=True)[COLUMNS + EXTRA]
