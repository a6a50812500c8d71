"""Published numbers beside ours: the suite's `published:` blocks (run.json) against the stored cells.

A published number is an estimate too: it is read as a mean over the seeds the block names (`seeds:`; one where
the paper does not say) of the same training, so it carries our own run's seed-to-seed spread
(`attnbench.decisions.constant`, value_seeds). Per (task, label, metric): our mean [interval], theirs, ours − theirs
[interval at its verdict's level] and the inference engine's verdict: "ours higher" / "ours lower" (detectably, in
the metric's units), "consistent" (equivalent within the metric's margin) or "undecided", Holm-corrected over a
block's values of one metric.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from attnbench.decisions.cells import cells_frame
from attnbench.decisions.settings import comparison_settings
from attnbench.metrics import metric_info
from attnbench.report import inference
from attnbench.report.load import Results
from attnbench.report.table import DASH, Table, finite, fmt

WORDS = {"ahead": "ours higher", "behind": "ours lower", "equivalent": "consistent", "undecided": "undecided"}


def _block_rows(cells: pd.DataFrame, block: dict[str, Any], run_tag: str, settings: Any) -> list[dict[str, Any]]:
    """One row per published value of a block: ours, theirs and the engine's verdict on ours - theirs."""
    shown = {
        label: (f"{label} [{run_tag}]" if f"{label} [{run_tag}]" in set(cells["label"]) else label)
        for label in block["values"]
    }  # fmt: skip  (load_runs tags a label that several runs share)
    part = cells[(cells["task"] == block["task"]) & cells["label"].isin(set(shown.values()))]
    seeds = block.get("seeds")
    rows = []
    for metric in sorted({m for metrics in block["values"].values() for m in metrics}):
        theirs = {shown[label]: metrics[metric] for label, metrics in block["values"].items() if metric in metrics}
        verdicts = _against_theirs(part, metric, theirs, seeds, settings)
        for label, value in theirs.items():
            ours = part.loc[part["label"] == label, "metrics"].map(lambda m, k=metric: (m or {}).get(k))
            ours = [float(v) for v in ours if finite(v)]
            found = verdicts.get(label, {})
            rows.append(
                {
                    "run": run_tag,
                    "task": block["task"],
                    "label": label,
                    "metric": metric,
                    "seeds": len(ours),
                    "ours_mean": sum(ours) / len(ours) if ours else float("nan"),
                    "ours_values": tuple(ours),
                    "theirs": value,
                    "theirs_seeds": seeds or 1,
                    "difference": found.get("estimate", float("nan")),
                    "difference_low": found.get("low", float("nan")),
                    "difference_high": found.get("high", float("nan")),
                    "p_adjusted": found.get("p_adjusted", float("nan")),
                    "verdict": found.get("verdict"),
                    "source": block["source"],
                    "note": block.get("note", ""),
                }
            )
    return rows


def _against_theirs(
    cells: pd.DataFrame, metric: str, theirs: dict[str, float], seeds: int | None, settings: Any
) -> dict[str, dict[str, Any]]:
    """The engine's verdict per label on ours - theirs: our values (and per-example outcomes) shifted by each label's
    published value and judged against 0 as one family, the published value carrying our per-seed variance over
    `seeds` (1 where unsaid); intervals kept inside what the metric's range allows."""
    frame = cells_frame(cells, metric)
    frame = frame[(frame["metric"] == metric) & frame["label"].isin(set(theirs))]
    if frame.empty:
        return {}
    shift = frame["label"].map(theirs)
    frame = frame.assign(
        metric=f"{metric} − published",
        value=frame["value"] - shift,
        outcomes=[None if o is None else o - s for o, s in zip(frame["outcomes"], shift)],
    )
    info = metric_info(metric)
    margin = settings.margin(metric) if settings.margin(metric) is not None else (info.margin if info else None)
    if info is not None and info.margin is not None and info.margin_relative and settings.margin(metric) is None:
        margin = info.margin * abs(sum(theirs.values()) / len(theirs))
    found = inference.against_value(
        frame,
        f"{metric} − published",
        0.0,
        settings,
        margin=margin,
        higher_is_better=True,  # "ahead": ours higher, whatever the metric's direction
        value_seeds=seeds or 1,
    )
    low, high = info.bounds if info is not None else (None, None)
    out = {}
    for r in found.itertuples():
        value = theirs[r.label]
        out[r.label] = {
            "estimate": r.estimate,
            "low": r.low if low is None else max(r.low, low - value),
            "high": r.high if high is None else min(r.high, high - value),
            "p_adjusted": r.p_adjusted,
            "verdict": r.verdict,
        }
    return out


def published_rows(results: Results) -> list[dict[str, Any]]:
    """One row per published value of every run's suite, with our numbers and the engine's verdict."""
    frame = results.of("accuracy")
    rows = []
    for run in results.runs:
        settings = comparison_settings(run.config.get("comparisons"))
        cells = frame[frame["run"] == run.tag]
        for block in run.config.get("published") or []:
            rows += _block_rows(cells, block, run.tag, settings)
    return rows


def published_table(results: Results) -> Table | None:
    """Ours beside every published value a suite carries, with the engine's verdict on the difference."""
    rows = published_rows(results)
    if not rows:
        return None
    data = pd.DataFrame(rows)
    many_runs = data["run"].nunique() > 1
    text = pd.DataFrame(
        [
            ({"run": r.run} if many_runs else {})
            | {
                "task": r.task,
                "label": r.label,
                "metric": r.metric,
                "seeds": str(r.seeds),
                "ours": inference.interval_text(r.ours_mean, float("nan"), float("nan"), r.ours_values),
                "theirs": fmt(r.theirs),
                "ours − theirs [interval]": inference.interval_text(r.difference, r.difference_low, r.difference_high),
                "verdict": WORDS.get(r.verdict, DASH) if r.verdict else DASH,
            }
            for r in data.itertuples()
        ]
    )
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    best["verdict"] = data["verdict"].isin(["ahead", "behind", "equivalent"]).to_numpy()
    settings = inference.run_settings(results)
    notes = [
        "ours: the mean over seeds (each seed's value beside it under "
        f"{inference.FEW_SEEDS} seeds); theirs: the published value, read as a mean over the seeds its source names "
        "(seeds: in the suite; one where unsaid), so it carries our run's own seed-to-seed spread. ours − theirs: "
        "with its interval at the level of its verdict (inference engine, the block's values of one metric corrected "
        f"together: {inference.correction_text(settings.correction)}). ours higher / lower: detectably, in the "
        "metric's units; consistent: equivalent within the metric's margin; undecided: neither.",
    ]
    sources = sorted({(r["task"], r["source"], r["note"], r["theirs_seeds"]) for r in rows})
    notes += [
        f"{task}: {source}" + (f" ({note})" if note else "") + f"; read as a mean over {seeds} seed(s)"
        for task, source, note, seeds in sources
    ]
    return Table(
        "published",
        "Published numbers beside ours",
        data.drop(columns=["ours_values"]),
        text,
        best,
        notes,
        key_columns=4 if many_runs else 3,
    )
