"""Which variance model a mean or a difference gets: its seeds only, or its seeds and its test examples.

`difference_spread(a, b, design)`: a - b on the seeds both labels have finite; `level_spread(a, design)`: one
label's mean. Where every seed used stored per-example outcomes of one length (per seed, and across seeds for
shared rows), the two-source models of `attnbench.decisions.variance` apply (`nested` for fresh rows, `crossed`
for shared ones); otherwise the seeds' values alone (`over_seeds`), and the reason is noted.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from attnbench.decisions.frame import LabelSeries
from attnbench.decisions.variance import Spread, crossed, nested, over_seeds

SEEDS_ONLY = "seeds"
TWO_SOURCES = "seeds and examples"


@dataclasses.dataclass
class Estimate:
    """A spread with what it was computed from: seeds used, the model ("seeds" or "seeds and examples"), notes."""

    spread: Spread
    seeds: list[int]
    variance: str
    notes: list[str]


def _outcome_stack(series: list[LabelSeries], seeds: list[int], design: str) -> np.ndarray | None:
    """Outcomes (len(series), S, N) on `seeds`, or None where a seed lacks them or their lengths differ."""
    if not all(s in one.outcomes for one in series for s in seeds):
        return None
    lengths = {s: {len(one.outcomes[s]) for one in series} for s in seeds}
    if any(len(n) > 1 for n in lengths.values()):
        return None
    if len({n.pop() for n in lengths.values()}) > 1:  # a different number of rows per seed
        return None
    return np.stack([np.stack([one.outcomes[s] for s in seeds]) for one in series])


def _spread(values: np.ndarray, outcomes: np.ndarray | None, design: str) -> tuple[Spread, str]:
    if outcomes is None or len(values) < 2:
        return over_seeds(values[None, :]), SEEDS_ONLY
    model = crossed if design == "shared" else nested
    return model(outcomes[None, :, :]), TWO_SOURCES


def difference_spread(a: LabelSeries, b: LabelSeries, design: str) -> Estimate:
    """a - b over the seeds both have finite values on."""
    seeds = sorted(set(a.values) & set(b.values))
    notes = [f"{one.label}: seed {s} is not a number: left out" for one in (a, b) for s in one.left_out]
    d = np.array([a.values[s] - b.values[s] for s in seeds])
    stack = _outcome_stack([a, b], seeds, design) if seeds else None
    if not seeds:
        return Estimate(over_seeds(np.full((1, 1), np.nan)), seeds, SEEDS_ONLY, notes + ["no seed in common"])
    spread, model = _spread(d, None if stack is None else stack[0] - stack[1], design)
    spread = dataclasses.replace(spread, mean=np.array([d.mean()]))  # the stored metrics' difference
    return Estimate(spread, seeds, model, notes)


def level_spread(a: LabelSeries, design: str) -> Estimate:
    """One label's mean over its finite seeds."""
    seeds = a.seeds
    notes = [f"seed {s} is not a number: left out" for s in a.left_out]
    if not seeds:
        return Estimate(over_seeds(np.full((1, 1), np.nan)), seeds, SEEDS_ONLY, notes + ["no finite seed"])
    values = np.array([a.values[s] for s in seeds])
    stack = _outcome_stack([a], seeds, design)
    spread, model = _spread(values, None if stack is None else stack[0], design)
    spread = dataclasses.replace(spread, mean=np.array([values.mean()]))
    return Estimate(spread, seeds, model, notes)
