"""Published numbers beside ours: the suite's `published:` blocks (run.json) against the stored cells.

Per (task, label, metric): our mean over seeds with its 95% t-interval (2 seeds or more), the
published value, ours - theirs, and whether theirs lies inside our interval.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from attnbench.report.load import Results
from attnbench.report.stats import summarize
from attnbench.report.table import DASH, Table, fmt


def published_rows(results: Results) -> list[dict[str, Any]]:
    """One row per published value of every run's suite, with our summary of the same cells."""
    frame = results.of("accuracy")
    rows = []
    for run in results.runs:
        cells = frame[frame["run"] == run.tag]
        for block in run.config.get("published") or []:
            for label, metrics in block["values"].items():
                tagged = f"{label} [{run.tag}]"  # load_runs tags a label that several runs share
                shown = tagged if tagged in set(cells["label"]) else label
                part = cells[(cells["task"] == block["task"]) & (cells["label"] == shown)]
                for metric, theirs in metrics.items():
                    ours = summarize([c.get(metric) for c in part["metrics"] if metric in c], interval_from=2)
                    inside = (ours["ci_low"] <= theirs <= ours["ci_high"]) if math.isfinite(ours["ci_low"]) else None
                    rows.append(
                        {
                            "run": run.tag,
                            "task": block["task"],
                            "label": shown,
                            "metric": metric,
                            "seeds": ours["n"],
                            "ours_mean": ours["mean"],
                            "ours_ci_low": ours["ci_low"],
                            "ours_ci_high": ours["ci_high"],
                            "theirs": theirs,
                            "difference": ours["mean"] - theirs,
                            "inside": inside,
                            "source": block["source"],
                            "note": block.get("note", ""),
                        }
                    )
    return rows


def published_table(results: Results) -> Table | None:
    """Ours (mean [95% CI]) against the published value, for every value a suite carries."""
    rows = published_rows(results)
    if not rows:
        return None
    data = pd.DataFrame(rows)
    many_runs = data["run"].nunique() > 1

    def ours(r: Any) -> str:
        if r.seeds == 0:
            return DASH
        return fmt(r.ours_mean) + (
            f" [{fmt(r.ours_ci_low)}, {fmt(r.ours_ci_high)}]" if math.isfinite(r.ours_ci_low) else ""
        )

    text = pd.DataFrame(
        [
            ({"run": r.run} if many_runs else {})
            | {
                "task": r.task,
                "label": r.label,
                "metric": r.metric,
                "seeds": str(r.seeds),
                "ours [95% CI]": ours(r),
                "theirs": fmt(r.theirs),
                "ours − theirs": fmt(r.difference),
                "theirs inside our CI": DASH if r.inside is None else ("yes" if r.inside else "no"),
            }
            for r in data.itertuples()
        ]
    )
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    sources = sorted({(r["task"], r["source"], r["note"]) for r in rows})
    notes = [
        "ours: mean over seeds of the test metric with its 95% Student-t interval over the seeds (2 or more); theirs: the "
        "published value; theirs inside our CI: whether the published value lies in that interval (— with "
        "fewer than 2 seeds)."
    ]
    notes += [f"{task}: {source}" + (f" ({note})" if note else "") for task, source, note in sources]
    return Table(
        "published", "Published numbers beside ours", data, text, best, notes, key_columns=4 if many_runs else 3
    )
