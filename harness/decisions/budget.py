"""Whether more seeds could decide a pair within a budget: what `attnbench run --until-decided` spends seeds on, and
what its report says of the pairs that stayed undecided.

A pair is worth more seeds when it is undecided, has fewer than `max_seeds`, and the engine's power figures
(`attnbench.decisions.power`) say `max_seeds` could decide it: the seeds needed for its margin are within the
budget, or the gap seen so far would be detected there (the minimum detectable effect of the seeds' part shrinks
with the square root of the seeds). Neither holds for a pair no number of seeds within the budget can decide (a
shared test set too small for the margin, a gap far below the noise).
"""

from __future__ import annotations

import math
from typing import Any

DECIDED, AT_BUDGET, BEYOND_BUDGET, WORTH = "decided", "budget reached", "beyond the budget", "worth more seeds"


def budget_state(row: Any, max_seeds: int) -> str:
    """An engine pair row (attnbench.compare columns) against a budget of `max_seeds` seeds per label: decided,
    budget reached, beyond the budget (more seeds within it would not decide it), or worth more seeds."""
    if row.verdict != "undecided":
        return DECIDED
    if row.n_seeds >= max_seeds:
        return AT_BUDGET
    if row.n_seeds < 1:
        return BEYOND_BUDGET
    if math.isfinite(row.seeds_needed) and row.seeds_needed <= max_seeds:
        return WORTH
    at_budget = row.mde * math.sqrt(row.n_seeds / max_seeds) if math.isfinite(row.mde) else math.inf
    return WORTH if math.isfinite(row.estimate) and abs(row.estimate) >= at_budget else BEYOND_BUDGET
