"""The causal report sections: the decoding crossover read off the timing check's verdicts, the timing verdicts
against the binomial by hand, and the recall table's best set."""

import math

import numpy as np
import pandas as pd
import pytest
from report_fixture import write_cell

from attnbench.measurements.decode import sign_counts
from attnbench.report.causal import crossover, decode_points
from attnbench.report.load import load_runs


def _points(verdicts: dict[int, str], checked: bool = True) -> pd.DataFrame:
    """A label's decode points with the verdicts of its timing check against softmax."""
    return pd.DataFrame(
        [
            {"label": "elu", "attention": "elu-linear", "context_length": n, "checked": checked, "verdict": verdict}
            for n, verdict in verdicts.items()
        ]
    )


def test_crossover_is_where_the_linear_step_stays_detectably_faster():
    points = _points({256: "ahead", 1024: "undecided", 4096: "ahead", 16384: "ahead"})
    assert crossover(points, "elu") == 4096  # faster at 256, undecided at 1024, faster from 4096 on


def test_no_crossover_when_not_faster_at_the_longest_context_or_without_a_check():
    assert math.isnan(crossover(_points({256: "ahead", 1024: "behind"}), "elu"))
    assert math.isnan(crossover(_points({256: "ahead", 1024: "ahead"}, checked=False), "elu"))


def test_sign_counts_drop_ties_and_keep_each_ratio():
    found = sign_counts(np.array([1.5] * 6 + [0.8] * 3 + [1.0]))
    assert (found["pairs"], found["pairs_faster"], found["pairs_slower"]) == (10, 6, 3)
    assert found["pair_ratios"] == [1.5] * 6 + [0.8] * 3 + [1.0]


def test_decode_verdicts_are_sign_tests_corrected_over_the_table(tmp_path):
    """Three points: 16 of 16 pairs faster (p = 2 / 2**16: ahead), 12 of 16 (p = 2 P(X >= 12) = 0.077: undecided)
    and 8 of 16 with every ratio within 1 +- 10% (equivalent); Holm over the table's points."""
    rows = [
        {"context_length": 64, "decode_ms_per_token": 1.0, "prefill_tokens_per_s": 1.0, "state_bytes": 1,
         "paired_ratio": 2.0, **sign_counts(np.full(16, 2.0))},
        {"context_length": 256, "decode_ms_per_token": 1.0, "prefill_tokens_per_s": 1.0, "state_bytes": 1,
         "paired_ratio": 1.3, **sign_counts(np.r_[np.full(12, 1.3), np.full(4, 0.7)])},
        {"context_length": 1024, "decode_ms_per_token": 1.0, "prefill_tokens_per_s": 1.0, "state_bytes": 1,
         "paired_ratio": 1.0, **sign_counts(np.r_[np.full(8, 1.02), np.full(8, 0.99)])},
    ]  # fmt: skip
    write_cell(tmp_path, label="elu", task="none", measurement="decode", details={"rows": rows})
    points = decode_points(load_runs([tmp_path])).set_index("context_length")
    assert list(points["verdict"]) == ["ahead", "undecided", "equivalent"]
    assert points.at[64, "p_adjusted"] == pytest.approx(3 * 2 / 2**16)  # Holm: the smallest of three, times 3


def test_lm_positions_table_averages_each_bucket_over_seeds(tmp_path):
    from attnbench.report.causal import lm_positions_table

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


def test_recall_table_bolds_the_best_set_per_kv_count(tmp_path):
    from attnbench.report.causal import recall_table

    scores = {"softmax": (1.0, 1.0, 0.999), "gla": (0.99, 1.0, 0.995), "elu": (0.3, 0.25, 0.28)}
    for label, values in scores.items():
        for seed, value in enumerate(values):
            write_cell(tmp_path, label=label, task="kv4", measurement="recall", seed=seed,
                       metrics={"accuracy": value, "num_kv_pairs": 4.0, "state_bytes": 100.0})  # fmt: skip
    table = recall_table(load_runs([tmp_path]))
    bold = dict(zip(table.data["label"], table.best["kv 4"]))
    assert bold == {"softmax": True, "gla": True, "elu": False}  # softmax and gla: not detectably apart
    data = table.data.set_index("label")
    assert data.at["elu", "kv 4 rank"] == 3 and data.at["elu", "kv 4 rank_low"] == 3  # detectably below both
    assert "(seeds 1.000 1.000 0.999)" in table.text.set_index("label").at["softmax", "kv 4"]


def test_no_causal_table_pools_two_tasks_that_share_a_display_field(tmp_path):
    """Two mqar tasks with 4 key-value pairs at other lengths are two columns (each its own seeds and state bytes),
    two byte_lm tasks two rows of the position table, two decode tasks two rows: never one mean over both."""
    from attnbench.report.causal import decode_crossover_table, lm_positions_table, recall_table

    for seq_len, accuracy, state in ((64, 0.9, 100.0), (128, 0.5, 200.0)):
        for seed in (0, 1):
            write_cell(tmp_path, label="softmax", task="mqar", measurement="recall", seed=seed,
                       task_options={"num_kv_pairs": 4, "seq_len": seq_len},
                       metrics={"accuracy": accuracy + seed / 100, "num_kv_pairs": 4.0, "state_bytes": state})  # fmt: skip
            buckets = [{"start": 0, "stop": 8, "bits_per_byte": seq_len / 32}]
            write_cell(tmp_path, label="softmax", task="byte_lm", measurement="lm", seed=seed,
                       task_options={"block_size": seq_len}, details={"position_buckets": buckets},
                       metrics={"bits_per_byte": 2.0, "bits_per_byte_2x": seq_len / 16})  # fmt: skip
            rows = [{"context_length": 64, "decode_ms_per_token": seq_len / 64, "prefill_tokens_per_s": 1.0,
                     "state_bytes": state}]  # fmt: skip
            write_cell(tmp_path, label="softmax", task="decode", measurement="decode", seed=seed,
                       task_options={"block_size": seq_len}, details={"rows": rows})  # fmt: skip
    results = load_runs([tmp_path])
    recall = recall_table(results).data.set_index("label")
    short, long = "kv 4 · mqar(seq_len=64)", "kv 4 · mqar(seq_len=128)"
    assert recall.at["softmax", short] == pytest.approx(0.905) and recall.at["softmax", long] == pytest.approx(0.505)
    assert recall.at["softmax", f"state bytes {short}"] == 100 and recall.at["softmax", f"state bytes {long}"] == 200
    lm = lm_positions_table(results).data.set_index("task")
    assert lm.at["byte_lm(block_size=64)", "bpb 0-8"] == pytest.approx(2.0)
    assert lm.at["byte_lm(block_size=128)", "bpb at 2x length"] == pytest.approx(8.0)
    decode = decode_crossover_table(results).data.set_index("task")
    assert decode.at["decode(block_size=64)", "ms/token @64"] == pytest.approx(1.0)
    assert decode.at["decode(block_size=128)", "ms/token @64"] == pytest.approx(2.0)


def test_lm_per_length_scores_make_a_bits_per_byte_table_and_a_long_position_plot(tmp_path):
    from report_fixture import write_cell

    from attnbench.report.causal import lm_long_positions, plot_lm_long_positions
    from attnbench.report.lengths import length_tables
    from attnbench.report.load import load_runs
    from attnbench.report.sections import ReportContext

    for seed, late in enumerate((2.0, 2.4)):
        buckets = [{"start": 0, "stop": 32, "bits_per_byte": 3.0}, {"start": 32, "stop": 64, "bits_per_byte": late}]
        row = {"length": 64, "bits_per_byte": (3.0 + late) / 2, "position_buckets": buckets}
        write_cell(tmp_path, label="rope", task="byte_lm", measurement="lm", seed=seed,
                   metrics={"bits_per_byte": 2.5, "bits_per_byte@64": (3.0 + late) / 2},
                   details={"per_length": [row]})  # fmt: skip
    results = load_runs([tmp_path])
    (table,) = length_tables(results)  # no accuracy@L: the bits per byte table alone
    assert table.name == "lengths_bits_per_byte_byte_lm" and table.title.startswith("Bits per byte against")
    assert table.data.set_index("label").loc["rope", "bits_per_byte@64"] == pytest.approx(2.6)
    points = lm_long_positions(results)
    assert sorted(points["bits_per_byte"]) == [2.0, 2.4, 3.0, 3.0] and set(points["length"]) == {64}
    (plot,) = plot_lm_long_positions(ReportContext(results, {}, {}), tmp_path)
    assert (tmp_path / "lm_long_positions.png").is_file()
