"""A suite's comparison settings, as its normalised `comparisons:` key (run.json) stores them.

Two forms (`attnbench.suite_keys` validates both):

    comparisons: [default, [softmax, tfidf-logreg]]     # the pairs a - b only ("default": the default pairs)
    comparisons:                                        # the pairs and how they are judged
      pairs: [default, [softmax, tfidf-logreg]]         # optional, default [default]
      margin: {accuracy: 0.02, bits_per_byte: 0.005}    # equivalence margins over the metrics' declared ones
      correction: holm                                  # holm | bh | none (default holm)
"""

from __future__ import annotations

import dataclasses
from typing import Any

from attnbench.decisions.corrections import Correction


@dataclasses.dataclass(frozen=True)
class ComparisonSettings:
    """Pairs (as the suite lists them: "default" or [a, b]), margins by metric, and the correction."""

    pairs: tuple[Any, ...] = ("default",)
    margins: dict[str, float] = dataclasses.field(default_factory=dict)
    correction: Correction = "holm"

    def margin(self, metric: str) -> float | None:
        """The suite's margin for `metric` (None: the metric's declared one)."""
        return self.margins.get(metric)


def comparison_settings(value: Any) -> ComparisonSettings:
    """The settings of a normalised `comparisons:` value (None or absent: the defaults)."""
    if value is None:
        return ComparisonSettings()
    if isinstance(value, list):
        return ComparisonSettings(pairs=tuple(value) or ("default",))
    return ComparisonSettings(
        pairs=tuple(value.get("pairs") or ("default",)),
        margins={str(k): float(v) for k, v in (value.get("margin") or {}).items()},
        correction=value.get("correction", "holm"),
    )
