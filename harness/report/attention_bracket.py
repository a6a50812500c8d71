"""The bracket of every kernel comparison: softmax against the uniform floor on each task.

A task on which softmax does not beat `uniform` attention (every real token weighted equally, no kernel)
detectably cannot show a kernel's gain: its kernel comparisons are flagged "this task does not exercise
attention". Detectably: the verdict of `attnbench.report.paired.paired_difference` (the 95% t-interval of
softmax - uniform over shared seeds excludes 0 and the per-example test, exact McNemar per seed, combined,
gives p < 0.05 where the cells stored their predictions); with one seed, the per-example test alone.
"""

from __future__ import annotations

import itertools
import math

import pandas as pd

from attnbench.report.load import Results
from attnbench.report.paired import ALPHA, DETECTED, PredictionCache, paired_difference
from attnbench.report.table import DASH, Table, fmt

FLOOR, CEILING_OF_ATTENTION = "uniform", "softmax"  # attention names, whatever their labels
NOT_EXERCISED = "this task does not exercise attention"


def bracket_row(task: str, floor: pd.DataFrame, softmax: pd.DataFrame) -> dict[str, object] | None:
    """softmax - uniform accuracy on one task: interval over shared seeds, combined McNemar p, verdict."""
    a, b = ({int(c["seed"]): c for _, c in part.iterrows()} for part in (softmax, floor))
    found = paired_difference(a, b, "accuracy", PredictionCache())
    if found is None:
        return None
    seeds, interval, p_value = found["seeds"], found["interval"], found["p_value"]
    one_seed = len(seeds) == 1  # no interval: the per-example test alone
    detectable = found["verdict"] in DETECTED or (one_seed and p_value < ALPHA)
    return {
        "task": task,
        "seeds": len(seeds),
        "softmax": float(pd.Series([a[s]["metrics"]["accuracy"] for s in seeds]).mean()),
        "uniform": float(pd.Series([b[s]["metrics"]["accuracy"] for s in seeds]).mean()),
        "mean_diff": interval["mean"],
        "ci_low": interval["ci_low"],
        "ci_high": interval["ci_high"],
        "p_value": p_value,
        "exercises_attention": detectable,
        "verdict": "softmax above the floor: kernels can be compared here"
        if detectable and interval["mean"] > 0
        else "softmax below the floor"
        if detectable
        else NOT_EXERCISED,
    }


def attention_bracket_table(results: Results) -> Table | None:
    """Per task with both a `uniform` and a `softmax` attention: whether the task exercises attention, one row
    per softmax label (a suite may run softmax with and without learned Q/K projections) and floor label."""
    cells = results.of("accuracy")
    if cells.empty or not {FLOOR, CEILING_OF_ATTENTION} <= set(cells["attention"].dropna()):
        return None
    rows = []
    for task, part in cells.groupby("task", sort=True):
        # one row per softmax label (e.g. with learned W_q, W_k and on the heads' own slices) and floor label
        floors = part[part["attention"] == FLOOR].groupby("label", sort=True)
        softmaxes = part[part["attention"] == CEILING_OF_ATTENTION].groupby("label", sort=True)
        for (softmax_label, softmax), (floor_label, floor) in itertools.product(softmaxes, floors):
            row = bracket_row(task, floor, softmax)
            if row is not None:
                rows.append({**row, "softmax_label": softmax_label, "floor_label": floor_label})
    if not rows:
        return None
    data = pd.DataFrame(rows)
    text = pd.DataFrame(
        [
            {
                "task": r.task,
                "softmax row": r.softmax_label,
                "floor row": r.floor_label,
                "seeds": str(r.seeds),
                "softmax": fmt(r.softmax),
                "uniform": fmt(r.uniform),
                "softmax − uniform [95% CI]": fmt(r.mean_diff)
                + (f" [{fmt(r.ci_low)}, {fmt(r.ci_high)}]" if math.isfinite(r.ci_low) else ""),
                "p (examples)": fmt(r.p_value) if math.isfinite(r.p_value) else DASH,
                "verdict": r.verdict,
            }
            for r in data.itertuples()
        ]
    )
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    notes = [
        "Test accuracy of softmax attention and of the uniform floor (the mean of the values over the real "
        "tokens: no kernel at all), mean over shared seeds; their per-seed difference with its 95% t-interval "
        "and the exact McNemar test over the test examples, combined across seeds. Where they do not differ "
        f"detectably (interval holding 0 or p ≥ {ALPHA}), {NOT_EXERCISED}: no kernel comparison on it can show "
        "a gain, and a null there says little about the kernel."
    ]
    return Table(
        "attention_bracket",
        "Does the task exercise attention? Softmax against the uniform floor",
        data,
        text,
        best,
        notes,
        key_columns=3,
    )
