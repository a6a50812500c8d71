"""The causal report sections: the decoding crossover read off the timing check of measured points."""

import math

import numpy as np
import pandas as pd
import pytest

from attnbench.measurements.decode import sign_test
from attnbench.report.causal import crossover


def _points(verdicts: dict[int, str], checked: bool = True) -> pd.DataFrame:
    """A label's decode points with the verdicts of its timing check against softmax."""
    return pd.DataFrame(
        [
            {
                "label": "elu",
                "attention": "elu-linear",
                "context_length": n,
                "checked": checked,
                "faster": verdict == "faster",
                "slower": verdict == "slower",
            }
            for n, verdict in verdicts.items()
        ]
    )


def test_crossover_is_where_the_linear_step_stays_detectably_faster():
    points = _points({256: "faster", 1024: "no detectable difference", 4096: "faster", 16384: "faster"})
    assert crossover(points, "elu") == 4096  # faster at 256, not detectably at 1024, faster from 4096 on


def test_no_crossover_when_not_faster_at_the_longest_context_or_without_a_check():
    assert math.isnan(crossover(_points({256: "faster", 1024: "slower"}), "elu"))
    assert math.isnan(crossover(_points({256: "faster", 1024: "faster"}, checked=False), "elu"))


def test_sign_test_against_the_binomial_by_hand():
    found = sign_test(np.array([1.5] * 10))  # this step faster in all 10 pairs: p = 2 / 2**10
    assert found["pairs_faster"] == 10 and found["sign_p"] == pytest.approx(2 / 2**10)
    assert found["verdict"] == "faster"
    found = sign_test(np.array([1.2] * 6 + [0.8] * 4))  # 6 of 10: p = 2 * P(X >= 6) = 2 * 386 / 1024
    assert found["sign_p"] == pytest.approx(2 * 386 / 1024) and found["verdict"] == "no detectable difference"
    found = sign_test(np.array([0.5] * 9 + [1.0]))  # the tie is dropped: 0 of 9 faster
    assert found["pairs_faster"] == 0 and found["sign_p"] == pytest.approx(2 / 2**9)
    assert found["verdict"] == "slower"


def test_lm_positions_table_averages_each_bucket_over_seeds(tmp_path):
    from report_fixture import write_cell

    from attnbench.report.causal import lm_positions_table
    from attnbench.report.load import load_runs

    for seed, (early, late) in enumerate(((3.0, 2.0), (3.2, 2.4))):
        buckets = [{"start": 0, "stop": 8, "bits_per_byte": early}, {"start": 8, "stop": 16, "bits_per_byte": late}]
        write_cell(tmp_path, label="elu", task="bytes", measurement="lm", seed=seed,
                   metrics={"bits_per_byte": 2.5, "bits_per_byte_2x": 2.6 + seed / 10},
                   details={"position_buckets": buckets})  # fmt: skip
    table = lm_positions_table(load_runs([tmp_path]))
    row = table.data.set_index("label").loc["elu"]
    assert row["bpb 0-8"] == pytest.approx(3.1) and row["bpb 8-16"] == pytest.approx(2.2)
    assert row["bpb at 2x length"] == pytest.approx(2.65)
    assert not table.best.to_numpy().any()  # shown, never ranked here


def test_recall_table_bolds_the_tested_top_group_per_kv_count(tmp_path):
    from report_fixture import write_cell

    from attnbench.report.causal import recall_table
    from attnbench.report.load import load_runs

    scores = {"softmax": (1.0, 1.0, 0.999), "gla": (0.99, 1.0, 0.995), "elu": (0.3, 0.25, 0.28)}
    for label, values in scores.items():
        for seed, value in enumerate(values):
            write_cell(tmp_path, label=label, task="kv4", measurement="recall", seed=seed,
                       metrics={"accuracy": value, "num_kv_pairs": 4.0, "state_bytes": 100.0})  # fmt: skip
    table = recall_table(load_runs([tmp_path]))
    bold = dict(zip(table.data["label"], table.best["kv 4"]))
    assert bold == {"softmax": True, "gla": True, "elu": False}  # softmax and gla: not detectably apart
    assert table.data.set_index("label").at["elu", "kv 4 rank"] == "3"
