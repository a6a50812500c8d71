"""The bracket of kernel comparisons: softmax against the uniform floor, read from the inference engine's verdict
and checked against an independent computation of the same test (a paired t over seeds, scipy)."""

import numpy as np
import pandas as pd
from scipy import stats

from attnbench.predictions import encode_predictions
from attnbench.report.attention_bracket import NOT_EXERCISED, VERDICT_WORDS, attention_bracket_table, bracket_rows


def cells(accuracies, task="t", attention="softmax", label="softmax", rows=400):
    """Accuracy cells per seed with stored predictions whose correct rows give exactly the accuracy; each seed's
    test rows are its own (fresh rows)."""
    out = []
    for seed, acc in enumerate(accuracies):
        correct = np.arange(rows) < round(acc * rows)
        probs = np.where(correct[:, None], [[0.9, 0.1]], [[0.1, 0.9]])
        out.append(
            {
                "run": "r",
                "cell_id": f"{label}-{seed}",
                "measurement": "accuracy",
                "task": task,
                "attention": attention,
                "label": label,
                "seed": seed,
                "metrics": {"accuracy": acc},
                "details": {"predictions": encode_predictions(probs, np.zeros(rows, dtype=int))},
                "provenance": {"data": {"task": "associative_recall", "test_rows": "fresh"}},
            }  # fmt: skip
        )
    return pd.DataFrame(out)


class _Results:
    """What the bracket reads of a Results: its accuracy cells, and runs without suite settings."""

    runs: list = []

    def __init__(self, frame):
        self.frame = frame

    def of(self, measurement):
        return self.frame


def bracket(softmax, floor, **kw):
    frame = pd.concat([cells(softmax, **kw), cells(floor, attention="uniform", label="uniform", **kw)])
    return bracket_rows(_Results(frame.reset_index(drop=True))).iloc[0]


def test_softmax_far_above_the_floor_exercises_attention():
    row = bracket([0.95, 0.96, 0.97, 0.95, 0.96], [0.50, 0.52, 0.51, 0.49, 0.50])
    assert row["verdict"] == "ahead" and row["exercises_attention"] and row["words"] == VERDICT_WORDS["ahead"]
    # fresh test rows: the seeds' own spread of a - b (attnbench.decisions.variance), i.e. a paired t over seeds
    d = np.array([0.95, 0.96, 0.97, 0.95, 0.96]) - np.array([0.50, 0.52, 0.51, 0.49, 0.50])
    assert abs(row["p"] - stats.ttest_1samp(d, 0.0).pvalue) < 1e-12  # one pair: Holm leaves its p as it is


def test_a_floor_within_the_margin_of_softmax_says_the_task_does_not_exercise_attention():
    row = bracket([0.750, 0.752, 0.751, 0.750, 0.751], [0.751, 0.750, 0.751, 0.752, 0.750])
    assert row["verdict"] == "equivalent" and row["exercises_attention"] == False  # noqa: E712
    assert NOT_EXERCISED in row["words"]


def test_a_noisy_gap_is_undecided_not_a_verdict_either_way():
    row = bracket([0.80, 0.60, 0.75], [0.70, 0.72, 0.55])
    assert row["verdict"] == "undecided" and pd.isna(row["exercises_attention"])
    assert "undecided" in row["words"]


def test_one_seed_gives_no_verdict():
    assert bracket([1.0], [0.25])["verdict"] == "undecided"


def test_the_table_has_one_row_per_softmax_label_each_against_the_floor():
    """A suite with softmax on learned W_q, W_k and softmax on the heads' own slices: each gets its own verdict."""
    frame = pd.concat(
        [
            cells([0.50, 0.52, 0.51, 0.49, 0.50], attention="uniform", label="uniform"),
            cells([0.95, 0.96, 0.97, 0.95, 0.96]),
            cells([0.5025, 0.52, 0.51, 0.4925, 0.50], label="softmax-qk-none"),
        ],
        ignore_index=True,
    )
    table = attention_bracket_table(_Results(frame))
    verdicts = dict(zip(table.data["label_a"], table.data["verdict"]))
    assert verdicts == {"softmax": "ahead", "softmax-qk-none": "equivalent"}
    assert list(table.text["softmax row"]) == ["softmax", "softmax-qk-none"]
    assert "Holm" in " ".join(table.notes) and "±0.010" in " ".join(table.notes)
