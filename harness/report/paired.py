"""The paired-comparison table: for each pair of labels, task and paired metric (the metric records' `paired`), the
inference engine's verdict on a - b.

Pairs come from the suite's `comparisons:` (stored in run.json), else `default_pairs`; margins and correction
from the same key (`attnbench.decisions.settings`). Per pair: the engine's verdict (ahead / behind / equivalent /
undecided), a - b with its interval at the level that verdict was reached at, the adjusted p, the minimum
detectable effect and the seeds that would decide the margin (`attnbench.report.inference`); the family corrected
together is the task's listed pairs on one metric.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from attnbench.decisions.settings import comparison_settings
from attnbench.metrics import metric_info
from attnbench.report import inference
from attnbench.report.load import Results, RunInfo
from attnbench.report.table import DASH, Table, finite, fmt
from attnbench.results import metric_names


def default_pairs(labels: Sequence[str]) -> list[tuple[str, str]]:
    """Every kernel-<map> with its vanilla-<map> twin, then every other label with softmax (a, b: a - b)."""
    present = set(labels)
    pairs = [
        (lab, "vanilla-" + lab[len("kernel-") :])
        for lab in sorted(present)
        if lab.startswith("kernel-") and "vanilla-" + lab[len("kernel-") :] in present
    ]
    if "softmax" in present:
        pairs += [(lab, "softmax") for lab in sorted(present) if lab != "softmax"]
    return pairs


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


def paired_metrics(cells: pd.DataFrame) -> list[str]:
    """The metrics of some cells whose records ask for paired comparisons, in a stable order."""
    names = metric_names(cells)
    return sorted(m for m in names if (info := metric_info(m)) is not None and info.paired)


def pair_verdicts(results: Results) -> pd.DataFrame:
    """The engine's rows (`attnbench.compare` columns, plus run and measurement) of every run's listed pairs."""
    found = []
    for run in results.runs:
        settings = comparison_settings(run.config.get("comparisons"))
        mine = results.ok[results.ok["run"] == run.tag]
        for measurement, cells in mine.groupby("measurement", sort=True):
            tagged = {_raw_label(lab, run): lab for lab in sorted(set(cells["label"].dropna()))}
            listed = resolve_pairs(list(settings.pairs), sorted(tagged))
            if not listed:
                continue
            pairs = [(tagged[a], tagged[b]) for a, b in listed]
            for metric in paired_metrics(cells):
                rows = inference.pairs(cells, metric, settings, pairs=pairs)
                if len(rows):
                    found.append(rows.assign(run=run.tag, measurement=measurement))
    return pd.concat(found, ignore_index=True) if found else pd.DataFrame()


def difference_text(row: Any) -> str:
    """'a − b [low, high]' at the verdict's level, with each seed's a − b under FEW_SEEDS seeds."""
    per_seed = [float(a) - float(b) for a, b in zip(row.values_a, row.values_b)]
    return inference.interval_text(row.estimate, row.low, row.high, per_seed)


def verdict_cells(row: Any) -> dict[str, str]:
    """One engine row's verdict columns as the paired and LRA tables print them: verdict, a − b [interval],
    adjusted p, mde, seeds needed, seeds."""
    return {
        "verdict": row.verdict,
        "a − b [interval]": difference_text(row),
        "p (adjusted)": fmt(row.p_adjusted) if finite(row.p_adjusted) else DASH,
        "mde": inference.mde_text(row.mde),
        "seeds needed": inference.seeds_needed_text(row.seeds_needed),
        "seeds": str(row.n_seeds),
    }


def paired_comparison_table(results: Results) -> Table | None:
    """Every listed pair's verdict and a - b [interval] per task and paired metric."""
    data = pair_verdicts(results)
    if data.empty:
        return None
    many_runs = data["run"].nunique() > 1
    text = pd.DataFrame(
        [
            ({"run": r.run} if many_runs else {})
            | {"task": r.task, "a": r.label_a, "b": r.label_b, "metric": r.metric}
            | verdict_cells(r)  # verdict early: in view on a narrow page
            for r in data.itertuples()
        ]
    )
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    best["verdict"] = data["verdict"].isin(["ahead", "behind", "equivalent"]).to_numpy()
    settings = inference.run_settings(results)
    notes = [
        "a − b: the mean over the seeds both labels ran of the per-seed difference (each seed's a − b beside it "
        f"under {inference.FEW_SEEDS} seeds), with its interval at the level its verdict was reached at (the "
        "corrected level: wider than 95%). " + inference.method_note(None, settings),
        "Margins: "
        + "; ".join(f"{m}: {inference.margin_text(m, None, settings)}" for m in sorted(set(data["metric"])))
        + ". seeds needed: the seeds that would decide the margin with 80% power (a dash: none can, e.g. a shared "
        "test set too small for it, or nothing is known).",
        "Pairs: the suite's comparisons: (default: every kernel-<map> with its vanilla-<map> twin, every "
        "other label with softmax).",
    ]
    note = inference.variance_note([data])
    if note:
        notes.append(note)
    return Table(
        "paired",
        "Paired comparisons (a − b on the same seeds and test examples)",
        inference.pair_data(data),
        text,
        best,
        notes,
        key_columns=5 if many_runs else 4,
    )
