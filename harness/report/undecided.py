"""Report section `undecided`: for a run made with `attnbench run --until-decided` (its settings in run.json), every
pair of interest with the inference engine's verdict, the seeds it ran, the seeds that would decide it and why the
loop stopped adding seeds to it (`attnbench.decisions.budget`): decided, budget reached, or beyond the budget."""

from __future__ import annotations

import pandas as pd

from attnbench.decisions.budget import DECIDED, budget_states
from attnbench.decisions.settings import comparison_settings
from attnbench.metrics import headline_metric
from attnbench.report import inference
from attnbench.report.load import Results
from attnbench.report.paired import difference_text
from attnbench.report.sections import ReportContext, register_report_section
from attnbench.report.table import Table, finite, fmt
from attnbench.results import metric_names


def undecided_rows(results: Results) -> pd.DataFrame:
    """Per run made with --until-decided: its pairs of interest (each label against the reference, or all pairs of a
    task) as the engine judges them, with each pair's budget state."""
    found = []
    for run in results.runs:
        loop = run.config.get("until_decided")
        if not isinstance(loop, dict):
            continue
        settings = comparison_settings(run.config.get("comparisons"))
        reference = loop.get("reference") if loop.get("pairs") == "reference" else None
        mine = results.ok[results.ok["run"] == run.tag]
        for measurement, cells in mine.groupby("measurement", sort=True):
            metric = headline_metric(metric_names(cells))
            if metric is None:
                continue
            if reference is not None:
                cells = cells[cells["task"].isin(set(cells.loc[cells["label"] == reference, "task"]))]
            rows = inference.pairs(cells, metric, settings, reference=reference)
            if len(rows):
                budget = budget_states(rows, int(loop["max_seeds"]), inference.ALPHA)
                found.append(rows.assign(run=run.tag, measurement=measurement, budget=budget,
                                         max_seeds=int(loop["max_seeds"])))  # fmt: skip
    return pd.concat(found, ignore_index=True) if found else pd.DataFrame()


def undecided_table(results: Results) -> Table | None:
    """The pairs of interest of an --until-decided run: verdict, a - b, seeds run and needed, why the loop stopped."""
    data = undecided_rows(results)
    if data.empty:
        return None
    data = data.sort_values(["task", "budget", "label_a", "label_b"], key=lambda c: c.map(str)).reset_index(drop=True)
    text = pd.DataFrame(
        [
            {
                "task": r.task,
                "a": r.label_a,
                "b": r.label_b,
                "verdict": r.verdict,
                "a − b [interval]": difference_text(r),
                "seeds": str(r.n_seeds),
                "seeds needed": inference.seeds_needed_text(r.seeds_needed),
                "mde": inference.mde_text(r.mde),
                "loop": r.budget,
            }
            for r in data.itertuples()
        ]
    )
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    best["verdict"] = (data["budget"] == DECIDED).to_numpy()
    settings = inference.run_settings(results)
    notes = [
        f"The run added seeds (at most {int(data['max_seeds'].max())} per label, kept paired) while a pair of "
        "interest was undecided and more seeds within that budget could decide it. loop: decided; budget reached "
        "(undecided at the most seeds allowed); beyond the budget (the seeds that would decide the margin exceed "
        "it, or no number of seeds can: a dash, and the gap seen so far would not be detected at the budget "
        "either). " + inference.method_note(None, settings)
    ]
    return Table("undecided", "Until decided: the pairs of interest and the seeds they would need", inference.pair_data(data),
                 text, best, notes, key_columns=3)  # fmt: skip


def undecided_summary(context: ReportContext) -> list[str]:
    """One sentence per task: how many pairs of interest the loop decided, and how many stayed undecided."""
    table = context.tables.get("undecided")
    if table is None:
        return []
    out = []
    for task, part in table.data.groupby("task", sort=True):
        counts = inference.verdict_counts(part)
        left = part[part["verdict"] == "undecided"]
        needed = [n for n in left["seeds_needed"] if finite(n)]
        out.append(
            f"{task}: pairs of interest {inference.counts_text(counts)}"
            + (f"; the undecided would need {fmt(min(needed), 0)}–{fmt(max(needed), 0)} seeds" if needed else "")
            + (
                f" ({int((~left['seeds_needed'].map(finite)).sum())} no number of seeds)"
                if len(left) > len(needed)
                else ""
            )
            + "."
        )
    return out


register_report_section(
    "undecided", order=32, tables=lambda results: [undecided_table(results)], summary=undecided_summary
)
