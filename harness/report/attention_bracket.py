"""The bracket of every kernel comparison: softmax against the uniform floor on each task.

A task on which softmax is not detectably above `uniform` attention (every real token weighted equally, no kernel)
cannot show a kernel's gain. The inference engine's verdict on softmax - uniform accuracy (`attnbench.compare`, a
task's softmax-floor pairs corrected together at the suite's margin and correction) says which: "ahead": kernels
can be compared here; "equivalent" (within the margin) or "behind": the task does not exercise attention;
"undecided": the seeds cannot tell, and a kernel comparison on it says little either way.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from attnbench.report import inference
from attnbench.report.load import Results
from attnbench.report.paired import difference_text
from attnbench.report.table import DASH, Table, finite, fmt

FLOOR, CEILING_OF_ATTENTION = "uniform", "softmax"  # attention names, whatever their labels
NOT_EXERCISED = "this task does not exercise attention"
VERDICT_WORDS = {
    "ahead": "softmax above the floor: kernels can be compared here",
    "behind": "softmax below the floor: " + NOT_EXERCISED,
    "equivalent": "softmax equivalent to the floor: " + NOT_EXERCISED,
    "undecided": "undecided: the seeds cannot tell whether the task exercises attention",
}


def bracket_rows(results: Results) -> pd.DataFrame:
    """Per task, each (softmax label, floor label) pair's engine row (`attnbench.compare` columns), with the verdict
    in words, whether the task exercises attention (None: undecided) and both labels' mean accuracy."""
    cells = results.of("accuracy")
    if cells.empty or not {FLOOR, CEILING_OF_ATTENTION} <= set(cells["attention"].dropna()):
        return pd.DataFrame()
    settings = inference.run_settings(results)
    found = []
    for _, part in cells.groupby("task", sort=True):
        floors = sorted(set(part.loc[part["attention"] == FLOOR, "label"]))
        softmaxes = sorted(set(part.loc[part["attention"] == CEILING_OF_ATTENTION, "label"]))
        pairs = list(itertools.product(softmaxes, floors))  # a suite may run softmax with and without W_q, W_k
        if pairs:
            mine = part[part["label"].isin(softmaxes + floors)]
            found.append(inference.pairs(mine, "accuracy", settings, pairs=pairs))
    rows = pd.concat(found, ignore_index=True) if found else pd.DataFrame()
    if rows.empty:
        return rows
    return rows.assign(
        exercises_attention=rows["verdict"].map({"ahead": True, "behind": False, "equivalent": False}),
        words=rows["verdict"].map(VERDICT_WORDS),
        softmax=[float(np.mean(v)) if len(v) else np.nan for v in rows["values_a"]],
        uniform=[float(np.mean(v)) if len(v) else np.nan for v in rows["values_b"]],
    )


def attention_bracket_table(results: Results) -> Table | None:
    """Per task with both a `uniform` and a `softmax` attention: whether the task exercises attention, one row
    per softmax label (a suite may run softmax with and without learned Q/K projections) and floor label."""
    data = bracket_rows(results)
    if data.empty:
        return None
    text = pd.DataFrame(
        [
            {
                "task": r.task,
                "softmax row": r.label_a,
                "floor row": r.label_b,
                "seeds": str(r.n_seeds),
                "softmax": fmt(r.softmax),
                "uniform": fmt(r.uniform),
                "softmax − uniform [interval]": difference_text(r),
                "p (adjusted)": fmt(r.p_adjusted) if finite(r.p_adjusted) else DASH,
                "verdict": r.words,
            }
            for r in data.itertuples()
        ]
    )
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    notes = [
        "Test accuracy of softmax attention and of the uniform floor (the mean of the values over the real tokens: "
        "no kernel at all), mean over the seeds both ran; their per-seed difference with its interval at the "
        "level of its verdict. Where softmax is equivalent to the floor or below it, "
        f"{NOT_EXERCISED}: no kernel comparison on it can show a gain; where undecided, it is not known whether it "
        "does. " + inference.method_note("accuracy", inference.run_settings(results)),
    ]
    return Table(
        "attention_bracket",
        "Does the task exercise attention? Softmax against the uniform floor",
        inference.pair_data(data),
        text,
        best,
        notes,
        key_columns=3,
    )
