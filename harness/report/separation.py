"""Report section `separation`: what each task tells apart. Per measurement and task, on its headline metric, every
pair of the task's labels as the inference engine judges it (all pairs of a task corrected together, at the suite's
margin and correction): how many pairs it separates (one label detectably better), how many it finds equivalent
within the margin, how many stay undecided and the seeds those would need, and the separated pairs themselves, the
better label first. A task that separates nothing at its seeds says so here, with how far it is from deciding.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnbench.metrics import headline_metric, metric_exact, metric_timed
from attnbench.report import inference
from attnbench.report.load import Results
from attnbench.report.sections import ReportContext, register_report_section
from attnbench.report.table import DASH, Table, finite, fmt
from attnbench.results import metric_names

SHOWN_PAIRS = 8  # separated pairs written out in the markdown; the CSV holds them all


def separated_pairs(found: pd.DataFrame) -> list[str]:
    """'better > worse' for each pair the engine separated (ahead: a is better in the metric's direction)."""
    out = []
    for r in found.itertuples():
        if r.verdict == "ahead":
            out.append(f"{r.label_a} > {r.label_b}")
        elif r.verdict == "behind":
            out.append(f"{r.label_b} > {r.label_a}")
    return out


def separation_rows(results: Results) -> pd.DataFrame:
    """One row per measurement and task with at least two labels: the headline metric, the labels and pairs, the
    verdict counts, the median seeds the undecided pairs would need (finite ones), and the separated pairs. Left
    out: a headline that is timed (compared by the timing checks) or a count (exact: it differs by construction)."""
    settings = inference.run_settings(results)
    references = results.reference_labels()
    rows = []
    for measurement in sorted(set(results.ok["measurement"].dropna())):
        cells = results.of(measurement)
        cells = cells[~cells["label"].isin(references)]
        for task, part in cells.groupby("task", sort=True):
            metric = headline_metric(metric_names(part))
            labels = sorted(set(part["label"].dropna()))
            if metric is None or metric_timed(metric) or metric_exact(metric) or len(labels) < 2:
                continue
            found = inference.pairs(part, metric, settings)
            if found.empty:
                continue
            counts = inference.verdict_counts(found)
            needed = [float(n) for n in found.loc[found["verdict"] == "undecided", "seeds_needed"] if finite(n)]
            rows.append(
                {
                    "measurement": measurement,
                    "task": str(task),
                    "metric": metric,
                    "labels": len(labels),
                    "pairs": len(found),
                    "separated": counts["ahead"] + counts["behind"],
                    "equivalent": counts["equivalent"],
                    "undecided": counts["undecided"],
                    "undecided_seeds_needed_median": float(np.median(needed)) if needed else np.nan,
                    "undecided_no_seeds_can": counts["undecided"] - len(needed),
                    "seeds": int(found["n_seeds"].max()),
                    "correction": settings.correction,
                    "separated_pairs": "; ".join(separated_pairs(found)) or np.nan,  # missing, as a CSV reads it
                }
            )
    return pd.DataFrame(rows)


def _pairs_text(listed: object) -> str:
    pairs = [p for p in listed.split("; ") if p] if isinstance(listed, str) else []
    if not pairs:
        return "none"
    shown = ", ".join(pairs[:SHOWN_PAIRS])
    return shown + (f", … {len(pairs) - SHOWN_PAIRS} more (CSV)" if len(pairs) > SHOWN_PAIRS else "")


def separation_table(results: Results) -> Table | None:
    """Per task: pairs separated / equivalent / undecided of all its pairs, and which pairs are separated."""
    data = separation_rows(results)
    if data.empty:
        return None
    several = data["measurement"].nunique() > 1
    text = pd.DataFrame(
        [
            {
                **({"measurement": r.measurement} if several else {}),
                "task": r.task,
                "metric": r.metric,
                "pairs (labels)": f"{r.pairs} ({r.labels})",
                "separated": str(r.separated),
                "equivalent": str(r.equivalent),
                "undecided": str(r.undecided),
                "seeds": str(r.seeds),
                "seeds to decide (undecided, median)": fmt(r.undecided_seeds_needed_median, 0)
                if finite(r.undecided_seeds_needed_median)
                else DASH,
                "separated pairs (better > worse)": _pairs_text(r.separated_pairs),
            }
            for r in data.itertuples()
        ]
    )
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    settings = inference.run_settings(results)
    notes = [
        "Every pair of a task's labels on its headline metric, the task's pairs corrected together: separated = one "
        "label detectably better than the other (the better first); equivalent = within the margin; undecided = "
        "neither, which is not 'the same'. seeds: the most seeds a pair had; seeds to decide: the median, over "
        "the undecided pairs, of the seeds that would decide the margin with 80% power (a dash: none can, or "
        "nothing is known). " + inference.method_note(None, settings)
    ]
    return Table(
        "separation", "What each task separates: all pairs of its labels", data, text, best, notes, key_columns=2
    )


def separation_summary(context: ReportContext) -> list[str]:
    """One sentence per task: the pairs it separates of all its pairs."""
    table = context.tables.get("separation")
    if table is None:
        return []
    several = table.data["measurement"].nunique() > 1
    return [
        f"{r.task}{f' ({r.measurement})' if several else ''}: {r.separated} of {r.pairs} pairs separated on "
        f"{r.metric} ({r.correction}), {r.equivalent} equivalent, {r.undecided} undecided."
        for r in table.data.itertuples()
    ]


register_report_section(
    "separation", order=34, tables=lambda results: [separation_table(results)], summary=separation_summary
)
