"""The paired-comparison table: for each pair of labels, task and headline metric, a - b over shared seeds.

Pairs come from the suite's `comparisons:` (stored in run.json), else the default pairs of
`attnbench.report.comparisons.default_pairs`. Numbers: the mean over seeds of the per-seed differences of
the stored metrics, its 95% t-interval, and a test over the test examples (exact McNemar for
accuracy, paired bootstrap otherwise, on the stored per-example predictions) per seed, combined
across seeds as `attnbench.report.comparisons.combine_p_values` says.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from attnbench.decisions.settings import comparison_settings
from attnbench.metrics import metric_direction
from attnbench.predictions import Predictions, decode_predictions
from attnbench.report.comparisons import combine_p_values, default_pairs, mean_difference_interval, per_example_p
from attnbench.report.load import Results, RunInfo
from attnbench.report.table import DASH, Table, fmt

PAIRED_METRICS = ("accuracy", "macro_f1", "nll", "ece")
RESAMPLES = 2000
ALPHA = 0.05
DETECTED = ("a better", "b better")  # verdicts where both the seeds and the examples back the gap


def resolve_pairs(comparisons: list[Any] | None, labels: list[str]) -> list[tuple[str, str]]:
    """The suite's pairs ('default' expanded) that have both labels among `labels`, each once (either way round)."""
    present = set(labels)
    out: list[tuple[str, str]] = []
    for item in comparisons if comparisons else ["default"]:
        for a, b in default_pairs(labels) if item == "default" else [tuple(item)]:
            if a in present and b in present and (a, b) not in out and (b, a) not in out:
                out.append((a, b))
    return out


def _raw_label(label: str, run: RunInfo) -> str:
    """The suite's label of a (possibly run-tagged, 'label [run]') report label."""
    suffix = f" [{run.tag}]"
    return label[: -len(suffix)] if label.endswith(suffix) else label


def verdict(interval: dict[str, float], direction: str | None, p_value: float) -> str:
    """'no detectable difference' where the interval holds 0, else which side is better (and whether the
    per-example test agrees: a gap steady across seeds may still be within the test set's sampling noise)."""
    if not (math.isfinite(interval["ci_low"]) and math.isfinite(interval["ci_high"])):
        return "one seed: no interval"
    if interval["ci_low"] <= 0.0 <= interval["ci_high"]:
        return "no detectable difference"
    a_higher = interval["mean"] > 0
    side = (
        ("a higher" if a_higher else "b higher")
        if direction is None
        else ("a better" if a_higher == (direction == "max") else "b better")
    )
    if math.isfinite(p_value) and p_value >= ALPHA:
        return f"{side} across seeds, not across examples (p ≥ {ALPHA})"
    return side


class PredictionCache:
    """Decoded per-example predictions of each cell, read once."""

    def __init__(self) -> None:
        self.cache: dict[str, Predictions | None] = {}

    def get(self, cell: pd.Series) -> Predictions | None:
        key = f"{cell['run']}/{cell['cell_id']}"
        if key not in self.cache:
            stored = (cell["details"] or {}).get("predictions")
            try:
                self.cache[key] = decode_predictions(stored) if stored else None
            except (ValueError, KeyError, TypeError):
                self.cache[key] = None
        return self.cache[key]


def paired_difference(
    a_cells: dict[int, pd.Series], b_cells: dict[int, pd.Series], metric: str, cache: PredictionCache
) -> dict[str, Any] | None:
    """a - b on `metric` over the seeds both have: mean [95% t-interval], per-seed per-example p-values and
    their combination, and the verdict; None where no seed has the metric for both."""
    have = sorted(
        s for s in set(a_cells) & set(b_cells) if metric in a_cells[s]["metrics"] and metric in b_cells[s]["metrics"]
    )
    if not have:
        return None
    interval = mean_difference_interval(
        [a_cells[s]["metrics"][metric] for s in have], [b_cells[s]["metrics"][metric] for s in have]
    )
    p_seeds = []
    for s in have:
        pa, pb = cache.get(a_cells[s]), cache.get(b_cells[s])
        n_bins = len((a_cells[s]["details"] or {}).get("reliability") or []) or 15
        try:
            p_seeds.append(
                per_example_p(metric, pa, pb, resamples=RESAMPLES, seed=s, n_bins=n_bins)
                if pa is not None and pb is not None
                else math.nan
            )
        except ValueError:  # scored on different rows: no per-example test
            p_seeds.append(math.nan)
    p_value = combine_p_values(p_seeds)
    return {
        "seeds": have,
        "interval": interval,
        "p_value": p_value,
        "p_seeds": p_seeds,
        "verdict": verdict(interval, metric_direction(metric), p_value),
    }


def cells_by_seed(part: pd.DataFrame, label: str) -> dict[int, pd.Series]:
    """The ok cells of one label in a frame of one task, keyed by seed."""
    return {int(c["seed"]): c for _, c in part[part["label"] == label].iterrows()}


def _pair_rows(
    run: RunInfo, part: pd.DataFrame, task: str, a: str, b: str, cache: PredictionCache
) -> list[dict[str, Any]]:
    """One row per headline metric for labels a, b on a task of one run (empty if they share no seed)."""
    a_cells, b_cells = cells_by_seed(part, a), cells_by_seed(part, b)
    rows = []
    for metric in PAIRED_METRICS:
        found = paired_difference(a_cells, b_cells, metric, cache)
        if found is None:
            continue
        interval = found["interval"]
        rows.append(
            {
                "run": run.tag,
                "task": task,
                "a": a,
                "b": b,
                "metric": metric,
                "seeds": len(found["seeds"]),
                "mean_diff": interval["mean"],
                "std_diff": interval["std"],
                "ci_low": interval["ci_low"],
                "ci_high": interval["ci_high"],
                "p_value": found["p_value"],
                "p_per_seed": " ".join(f"{p:.3g}" for p in found["p_seeds"]),
                "verdict": found["verdict"],
            }
        )
    return rows


def paired_comparison_table(results: Results) -> Table | None:
    """Every pair's mean difference [95% t-interval] over shared seeds and the per-example p-value, per metric."""
    accuracy = results.of("accuracy")
    cache = PredictionCache()
    rows: list[dict[str, Any]] = []
    for run in results.runs:
        cells = accuracy[accuracy["run"] == run.tag]
        tagged = {_raw_label(lab, run): lab for lab in sorted(set(cells["label"].dropna()))}
        pairs = resolve_pairs(list(comparison_settings(run.config.get("comparisons")).pairs), sorted(tagged))
        for task in sorted(set(cells["task"].dropna())):
            part = cells[cells["task"] == task]
            for a, b in pairs:
                rows += _pair_rows(run, part, task, tagged[a], tagged[b], cache)
    if not rows:
        return None
    data = pd.DataFrame(rows)
    many_runs = data["run"].nunique() > 1
    text = pd.DataFrame(
        [
            ({"run": r.run} if many_runs else {})
            | {  # verdict early: in view on a narrow page
                "task": r.task,
                "a": r.a,
                "b": r.b,
                "metric": r.metric,
                "verdict": r.verdict,
                "a − b [95% CI]": fmt(r.mean_diff)
                + (f" [{fmt(r.ci_low)}, {fmt(r.ci_high)}]" if math.isfinite(r.ci_low) else ""),
                "p (examples)": fmt(r.p_value) if math.isfinite(r.p_value) else DASH,
                "seeds": str(r.seeds),
                "p per seed": r.p_per_seed or DASH,
            }
            for r in data.itertuples()
        ]
    )
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    best["verdict"] = [v in ("a better", "b better", "a higher", "b higher") for v in data["verdict"]]
    notes = [
        "a − b: mean over the seeds both have of the per-seed difference of the test metric, with its 95% "
        "Student-t interval over the seeds (2 or more); 'no detectable difference' where the interval holds 0, else the "
        "better side (direction as each metric declares; for NLL and ECE lower is better). It measures the gap "
        "against the spread from training seeds; where that excludes 0 but p (examples) ≥ 0.05, the verdict "
        "says so (a gap steady across seeds, within the sampling noise of the test set).",
        f"p (examples): per seed, a test over the test examples of the same gap, exact McNemar for accuracy and "
        f"a paired bootstrap ({RESAMPLES} resamples, both models scored on the same resampled rows, shifted to "
        "the null) for macro-F1, NLL and ECE; combined across seeds as min(1, 2 × mean of the per-seed "
        "p-values), valid when the seeds share the test examples (Vovk & Wang 2020); one seed: its own.",
        "Pairs: the suite's comparisons: (default: every kernel-<map> with its vanilla-<map> twin, every "
        "other label with softmax).",
    ]
    return Table(
        "paired",
        "Paired comparisons (a − b on the same seeds and test examples)",
        data,
        text,
        best,
        notes,
        key_columns=5 if many_runs else 4,
    )
