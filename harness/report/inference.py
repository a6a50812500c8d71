"""The report's one door to the inference engine (`attnbench.decisions`): each task's standings, pairs and labels
against chance, from stored cells, and the words and numbers every table shows beside them.

Every rank, bold mark, verdict and interval of a report comes from the engine through here: standings (mean,
interval inside the metric's range, rank by mean, a confidence set for the rank, the best set), pairs (ahead /
behind / equivalent / undecided after the suite's correction, at its margins) and labels against a known value
(at chance). What a table shows with them:
- `interval_text`: "mean [low, high]", and with fewer than FEW_SEEDS seeds each seed's value beside it;
- `rank_text`: the rank by mean and, where it is wider, the confidence set of ranks ("3 (1–12)");
- `Standings.marks`: bold for the best set where it leaves some label out (bolding every label singles out none);
- `method_note`, `STANDINGS_NOTE`, `chance_note`, `variance_note`, `exact_note`: the level, correction and margin a
  table used, and which of its metrics are counts (exact: no interval, ranked by value).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from attnbench.decisions.cells import cells_frame
from attnbench.decisions.constant import compare_to_value
from attnbench.decisions.pairwise import compare_frame
from attnbench.decisions.ranks import standings_frame
from attnbench.decisions.settings import ComparisonSettings, comparison_settings
from attnbench.metrics import metric_info
from attnbench.predictions import decode_predictions
from attnbench.report.load import Results
from attnbench.report.table import DASH, finite, fmt

ALPHA = 0.05  # the family-wise level of every verdict and interval a report shows
FEW_SEEDS = 5  # below this many seeds a table shows each seed's value beside the interval
VERDICTS = ("ahead", "behind", "equivalent", "undecided")
AT_CHANCE, ABOVE_CHANCE, BELOW_CHANCE, UNDETERMINED = "at chance", "above chance", "below chance", "undetermined"
CHANCE_WORDS = {"equivalent": AT_CHANCE, "ahead": ABOVE_CHANCE, "behind": BELOW_CHANCE, "undecided": UNDETERMINED}


def run_settings(results: Results) -> ComparisonSettings:
    """The suite's comparison settings (margins, correction) where every run of `results` agrees, else the
    defaults (a leaderboard of runs with different settings)."""
    found = {repr(r.config.get("comparisons")): r.config.get("comparisons") for r in results.runs}
    return comparison_settings(next(iter(found.values())) if len(found) == 1 else None)


@dataclasses.dataclass
class Standings:
    """The engine's standings of one task and metric (`attnbench.standings` columns), one row per label; reference
    labels carry their intervals but no rank."""

    table: pd.DataFrame

    def get(self, label: str) -> pd.Series | None:
        rows = self.table[self.table["label"] == label]
        return rows.iloc[0] if len(rows) else None

    def in_best_set(self, label: str) -> bool:
        row = self.get(label)
        return bool(row is not None and finite(row["rank"]) and row["best_set"])

    def marks(self, order: Sequence[str]) -> list[bool]:
        """Bold per label of `order`: in the best set, where the best set leaves some ranked label out."""
        ranked = self.table[self.table["rank"].notna()]
        best = set(ranked.loc[ranked["best_set"].astype(bool), "label"])
        marked = 0 < len(best) < len(ranked)
        return [marked and label in best for label in order]


def _ranked(metric: str) -> bool:
    """Ranked: a direction, and not a wall-clock time (times swing with the machine's load; shown, never ranked)."""
    info = metric_info(metric)
    return info is not None and info.direction is not None and not info.timed


def label_standings(cells: pd.DataFrame, metric: str, references: Iterable[str] = ()) -> Standings:
    """Standings of `metric` over some ok cells of one task: the labels ranked among themselves, the reference
    labels apart (their intervals only). A metric without a direction gets intervals only."""
    return frame_standings(cells_frame(cells, metric), metric, references)


def frame_standings(frame: pd.DataFrame, metric: str, references: Iterable[str] = ()) -> Standings:
    """`label_standings` of an engine frame of one task (columns task, label, seed, metric, value, and optionally
    outcomes and test_rows): e.g. per-seed values a table computed from the cells' details."""
    frame = frame[frame["metric"] == metric]
    references = set(references)
    parts = []
    for refs in (False, True):
        part = frame[frame["label"].isin(references) == refs]
        if part.empty:
            continue
        table = standings_frame(part, metric=metric, alpha=ALPHA, higher_is_better=None if _ranked(metric) else True)
        if refs or not _ranked(metric):
            table = table.assign(rank=np.nan, rank_low=np.nan, rank_high=np.nan, best_set=False)
        parts.append(table)
    return Standings(pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=STANDING_COLUMNS))


STANDING_COLUMNS = ["task", "label", "n_seeds", "mean", "low", "high", "rank", "rank_low", "rank_high", "best_set"]


def standing_columns(prefix: str, row: pd.Series | None) -> dict[str, object]:
    """A label's standing as CSV columns: <prefix>mean, low, high, n, rank, rank_low, rank_high, best_set."""
    keys = {"mean": "mean", "low": "low", "high": "high", "n": "n_seeds", "rank": "rank", "rank_low": "rank_low",
            "rank_high": "rank_high", "best_set": "best_set"}  # fmt: skip
    return {f"{prefix}{k}": (np.nan if row is None else row[v]) for k, v in keys.items()}


def pairs(
    cells: pd.DataFrame,
    metric: str,
    settings: ComparisonSettings,
    *,
    pairs: Sequence[tuple[str, str]] | None = None,
    reference: str | None = None,
) -> pd.DataFrame:
    """The engine's pairs of every task of some ok cells (all pairs, the given ones, or each against `reference`),
    at the suite's margin and correction (`attnbench.compare` columns); empty where the cells hold no `metric`."""
    return frame_pairs(cells_frame(cells, metric), metric, settings, pairs=pairs, reference=reference)


def frame_pairs(
    frame: pd.DataFrame,
    metric: str,
    settings: ComparisonSettings,
    *,
    pairs: Sequence[tuple[str, str]] | None = None,
    reference: str | None = None,
) -> pd.DataFrame:
    """`pairs` of an engine frame (columns task, label, seed, metric, value; optionally outcomes, test_rows)."""
    frame = frame[frame["metric"] == metric]
    if frame.empty:
        return pd.DataFrame(columns=["task", "metric", "label_a", "label_b", "verdict"])
    return compare_frame(
        frame,
        metric=metric,
        reference=reference,
        pairs=pairs,
        margin=settings.margin(metric),
        alpha=ALPHA,
        correction=settings.correction,
    )


def pair_data(found: pd.DataFrame) -> pd.DataFrame:
    """The engine's pair rows as a table's CSV data: per-seed tuples left out (the text shows them), empty notes
    as missing."""
    data = found.drop(columns=[c for c in ("values_a", "values_b") if c in found])
    return data.assign(note=data["note"].replace("", np.nan)) if "note" in data else data


def verdict_counts(found: pd.DataFrame) -> dict[str, int]:
    """How many pairs have each verdict."""
    counts = found["verdict"].value_counts() if len(found) else pd.Series(dtype=int)
    return {v: int(counts.get(v, 0)) for v in VERDICTS}


def counts_text(counts: dict[str, int]) -> str:
    """'2 ahead / 1 behind / 0 equivalent / 75 undecided'."""
    return " / ".join(f"{counts[v]} {v}" for v in VERDICTS)


def majority_share(details: object) -> float:
    """The majority class's share of a classifier cell's test labels (its stored predictions); NaN without them."""
    stored = details.get("predictions") if isinstance(details, dict) else None
    if not stored:
        return math.nan
    try:
        labels = decode_predictions(stored).labels
    except (ValueError, KeyError, TypeError):
        return math.nan
    return float(np.bincount(labels).max() / len(labels)) if len(labels) else math.nan


def against_value(
    frame: pd.DataFrame,
    metric: str,
    value: float | dict[str, float],
    settings: ComparisonSettings,
    *,
    margin: float | None = None,
    higher_is_better: bool | None = None,
    value_seeds: int | None = None,
) -> pd.DataFrame:
    """Each label of an engine frame against a known value (one, or one per task): the engine's verdicts (ahead /
    behind / equivalent within the margin / undecided), corrected over each task's labels as the suite says."""
    return compare_to_value(
        frame,
        metric=metric,
        value=value,
        margin=margin if margin is not None else settings.margin(metric),
        alpha=ALPHA,
        correction=settings.correction,
        higher_is_better=higher_is_better,
        value_seeds=value_seeds,
    )


def chance_verdicts(
    cells: pd.DataFrame, settings: ComparisonSettings, references: Iterable[str] = ()
) -> pd.DataFrame | None:
    """Per task and (non-reference) label: accuracy against the chance rate, the majority class's share of the test
    labels (mean over the cells' stored predictions), as the engine judges a label against a known value: "at
    chance" (equivalent within the margin), "above chance", "below chance" or "undetermined". None where no cell
    stored predictions."""
    cells = cells[~cells["label"].isin(set(references))]
    shares = cells.assign(share=[majority_share(d) for d in cells["details"]]).dropna(subset=["share"])
    if shares.empty:
        return None
    rates = shares.groupby("task")["share"].mean().to_dict()
    frame = cells_frame(cells[cells["task"].isin(set(rates))], "accuracy")
    frame = frame[frame["metric"] == "accuracy"]
    if frame.empty:
        return None
    found = against_value(frame, "accuracy", rates, settings)
    return found.assign(word=found["verdict"].map(CHANCE_WORDS))


def chance_note(found: pd.DataFrame, settings: ComparisonSettings) -> str:
    """How the chance verdicts of a table were reached."""
    rates = "; ".join(f"{t}: {100 * v:.1f}%" for t, v in found.groupby("task")["value"].first().items())
    return (
        f"vs chance: accuracy against the chance rate, the majority class's share of the test labels ({rates}), "
        f"judged as a pair with a known value: at chance = equivalent to it within the margin "
        f"{margin_text('accuracy', found, settings)}; above (below) chance = detectably above (below) it; "
        f"undetermined = neither. {correction_text(settings.correction)}, over the task's labels."
    )


def _decimals(values: Sequence[float]) -> int | None:
    finite_values = [abs(float(v)) for v in values if finite(v)]
    if not finite_values:
        return None
    largest = max(finite_values)
    return 0 if largest >= 1000 else 1 if largest >= 100 else 2 if largest >= 10 else 3


def interval_text(
    mean: float,
    low: float,
    high: float,
    values: Sequence[float] = (),
    *,
    scale: float = 1.0,
    decimals: int | None = None,
) -> str:
    """'mean [low, high]' (scaled, e.g. 100 for percent), with each seed's value beside it under FEW_SEEDS seeds."""
    if not finite(mean):
        return DASH
    shown = [x * scale if finite(x) else x for x in (mean, low, high)]
    d = decimals if decimals is not None else _decimals(shown)
    text = fmt(shown[0], d)
    if finite(low) and finite(high):
        text += f" [{fmt(shown[1], d)}, {fmt(shown[2], d)}]"
    values = list(values) if values is not None and not isinstance(values, float) else []
    if 1 < len(values) < FEW_SEEDS:
        text += " (seeds " + " ".join(fmt(v * scale, d) for v in values) + ")"
    return text


def exact_text(metric: str, mean: float, values: Sequence[float] = ()) -> str:
    """A count's value (a metric declared exact) in its declared format (`register_metric(..., format=)`: 16, not
    16.000), with each seed's value beside it only where they differ (under FEW_SEEDS seeds)."""
    if not finite(mean):
        return DASH
    info = metric_info(metric)
    spec = info.format if info is not None else ".3f"
    text = format(float(mean), spec)
    values = [float(v) for v in values if finite(v)] if values is not None and not isinstance(values, float) else []
    if len(set(values)) > 1 and len(values) < FEW_SEEDS:
        text += " (seeds " + " ".join(format(v, spec) for v in values) + ")"
    return text


def rank_text(row: pd.Series) -> str:
    """'3' where the rank's confidence set is that rank alone, '3, 1–12' where it is wider; a dash without one."""
    if not finite(row.get("rank")):
        return DASH
    rank, low, high = (int(row[c]) if finite(row.get(c)) else None for c in ("rank", "rank_low", "rank_high"))
    if low is None or high is None or low == high == rank:
        return str(rank)
    return f"{rank}, {low}–{high}"


def margin_text(metric: str, found: pd.DataFrame | None = None, settings: ComparisonSettings | None = None) -> str:
    """The equivalence margin of `metric` as a table used it: the suite's, else the metric's declared one."""
    given = settings.margin(metric) if settings is not None else None
    if given is not None:
        return f"±{fmt(given)} (the suite's)"
    info = metric_info(metric)
    if info is None or info.margin is None:
        return "none declared (no equivalence verdicts)"
    if info.margin_relative:
        return f"±{info.margin:.0%} of the compared-against value"
    return f"±{fmt(info.margin)}"


def correction_text(correction: str) -> str:
    """The correction a family of verdicts used, in words."""
    return {
        "holm": "Holm's correction (family-wise error ≤ 5%)",
        "bh": "Benjamini-Hochberg's correction (false discovery rate ≤ 5%)",
        "none": "no multiple-comparison correction (each verdict at 5%)",
    }[correction]


def method_note(metric: str | None, settings: ComparisonSettings) -> str:
    """How the pair verdicts of a table (on `metric`, or on each metric at its own margin) were reached: test,
    correction, margin."""
    margin = "each metric's margin" if metric is None else f"margin {margin_text(metric, None, settings)}"
    return (
        f"Verdicts{'' if metric is None else ' on ' + metric} (attnbench.compare): a − b over the seeds both labels "
        "ran, its variance from the seeds and, where the cells stored per-example outcomes, the test examples; "
        f"{correction_text(settings.correction)} over each task's pairs; equivalence within {margin} (two one-sided "
        "tests). ahead / behind: the corrected test separates "
        "them in the metric's direction; equivalent: the corrected interval lies inside the margin; undecided: "
        "neither (not a tie: mde is the gap these seeds would detect with 80% power, seeds needed the seeds that "
        "would decide the margin)."
    )


STANDINGS_NOTE = (
    "Each label: mean over seeds [95% interval from the seeds and, where the cells stored per-example outcomes, the "
    f"test examples; inside the metric's range], with each seed's value under {FEW_SEEDS} seeds. Rank: by mean (a "
    "lower mean is never ranked above a higher one), then its 95% confidence set where wider (rank 3, 1–12) (every "
    "pair compared with Holm's correction: 1 + the labels detectably better, to the labels not detectably worse). "
    "Bold: the best set, the labels no other label is detectably better than (it holds the best at 95%), where it "
    "leaves some label out."
)


def exact_note(metrics: Sequence[str]) -> str | None:
    """Where a table shows metrics declared exact (counts the code computes), how they are shown and ranked."""
    if not metrics:
        return None
    return (
        f"Exact ({', '.join(metrics)}): counts the code computes, with no sampling error (declared "
        "register_metric(..., exact=True)): no interval and no rank set; ranked by value where the metric has a "
        "direction, equal values sharing a rank; each seed's value only where they differ."
    )


def variance_note(tables: Iterable[pd.DataFrame]) -> str | None:
    """Where intervals came from the seeds alone (cells without stored per-example outcomes), say so."""
    found = [t for t in tables if len(t) and "variance" in t]
    if not found:
        return None
    rows = pd.concat(found, ignore_index=True)
    seeds_only = rows[rows["variance"] == "seeds"]
    if seeds_only.empty:
        return None
    shared = bool((seeds_only["design"] == "shared").any())
    where = []
    for task, part in seeds_only.groupby("task", sort=True):
        named = sorted(set(map(str, part["metric"]))) if "metric" in part else []
        where.append(f"{task} ({', '.join(named)})" if named else str(task))
    return (
        "Seeds only on " + ", ".join(where) + ": these cells stored no "
        "per-example outcomes for these metrics (runs from before they were recorded, or metrics that are not a mean "
        "over examples), "
        "so their intervals and verdicts rest on the seed-to-seed spread alone"
        + (" (with shared test rows that leaves out the test set's own sampling error)." if shared else ".")
    )


def left_out_notes(found: dict[str, Standings]) -> list[str]:
    """One note per label and metric whose seeds the engine left out (a value that is not a number): named, never
    pooled into the label's mean or interval."""
    notes = []
    for metric, standing in found.items():
        for row in standing.table.itertuples():
            left = [n for n in str(getattr(row, "note", "") or "").split("; ") if "not a number" in n]
            if left:
                notes.append(f"{row.label}, {metric}: " + "; ".join(left) + ".")
    return notes


def seeds_needed_text(value: float) -> str:
    """Seeds needed for display: a count, or a dash where none can decide the margin (or nothing is known)."""
    return str(int(value)) if finite(value) else DASH


def mde_text(value: float) -> str:
    """A minimum detectable effect for display ('∞': no gap the metric can take would be detected)."""
    if isinstance(value, (int, float)) and math.isinf(value):
        return "∞"
    return fmt(value)
