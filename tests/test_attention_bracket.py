"""The bracket of kernel comparisons: softmax against the uniform floor, against a hand count."""

import itertools
import math

import numpy as np
import pandas as pd

from attnbench.predictions import encode_predictions
from attnbench.report.attention_bracket import NOT_EXERCISED, attention_bracket_table, bracket_row

CELL_IDS = itertools.count()


def cells(accuracies, correct_rows):
    """Accuracy cells per seed with stored predictions: each row's true class gets 0.9 where correct."""
    out = []
    labels = np.zeros(len(correct_rows[0]), dtype=int)
    for seed, (acc, correct) in enumerate(zip(accuracies, correct_rows)):
        probs = np.where(np.asarray(correct)[:, None], [[0.9, 0.1]], [[0.1, 0.9]])
        out.append(
            {
                "run": "r",
                "cell_id": f"{next(CELL_IDS)}",  # distinct per cell: the report caches predictions by it
                "seed": seed,
                "metrics": {"accuracy": acc},
                "details": {"predictions": encode_predictions(probs, labels)},
            }
        )
    return pd.DataFrame(out)


def test_a_floor_equal_to_softmax_says_the_task_does_not_exercise_attention():
    same = [True] * 30 + [False] * 10
    row = bracket_row("t", cells([0.75, 0.76, 0.75], [same] * 3), cells([0.75, 0.75, 0.76], [same] * 3))
    assert row["verdict"] == NOT_EXERCISED and not row["exercises_attention"]
    assert row["p_value"] == 1.0  # no discordant pair: McNemar p = 1


def test_softmax_far_above_the_floor_exercises_attention():
    good, bad = [True] * 40, [True] * 10 + [False] * 30
    row = bracket_row("t", cells([0.25, 0.26, 0.24], [bad] * 3), cells([1.0, 0.99, 1.0], [good] * 3))
    assert row["exercises_attention"] and row["mean_diff"] > 0.7
    assert math.isclose(row["p_value"], min(1.0, 2 * 2 * 0.5**30))  # McNemar: 30 discordant, all one way


def test_one_seed_is_judged_by_the_per_example_test_alone():
    good, bad = [True] * 40, [True] * 10 + [False] * 30
    assert bracket_row("t", cells([0.25], [bad]), cells([1.0], [good]))["exercises_attention"]
    same = [True] * 30 + [False] * 10
    assert bracket_row("t", cells([0.75], [same]), cells([0.75], [same]))["verdict"] == NOT_EXERCISED


class _Results:
    """The one call attention_bracket_table makes of a Results: its accuracy cells."""

    def __init__(self, frame):
        self.frame = frame

    def of(self, measurement):
        return self.frame


def labelled(frame, task, attention, label):
    return frame.assign(task=task, attention=attention, label=label)


def test_the_table_has_one_row_per_softmax_label_each_against_the_floor():
    """A suite with softmax on learned W_q, W_k and softmax on the heads' own slices: each gets its own verdict
    (pooled by seed they would overwrite each other)."""
    good, bad = [True] * 40, [True] * 10 + [False] * 30
    frame = pd.concat(
        [
            labelled(cells([0.25, 0.26, 0.24], [bad] * 3), "t", "uniform", "uniform"),
            labelled(cells([1.0, 0.99, 1.0], [good] * 3), "t", "softmax", "softmax"),
            labelled(cells([0.25, 0.25, 0.25], [bad] * 3), "t", "softmax", "softmax-qk-none"),
        ],
        ignore_index=True,
    )
    table = attention_bracket_table(_Results(frame))
    verdicts = dict(zip(table.data["softmax_label"], table.data["verdict"]))
    assert verdicts["softmax-qk-none"] == NOT_EXERCISED
    assert verdicts["softmax"] != NOT_EXERCISED and len(table.data) == 2
    assert list(table.text["softmax row"]) == ["softmax", "softmax-qk-none"]
