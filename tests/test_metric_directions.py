"""Metric directions are declared where each metric is registered, and the report tables read them."""

from __future__ import annotations

from pathlib import Path

import pytest
from report_fixture import write_cell

from attnbench.metrics import METRICS, metric_direction, register_metric
from attnbench.report.load import load_runs
from attnbench.report.tables import task_table


def test_declared_metrics_have_the_declared_direction() -> None:
    from attnbench.measurements import measurement_names

    measurement_names()  # the measurement modules declare their metrics when imported
    assert metric_direction("accuracy") == "max" and metric_direction("nll") == "min"
    assert metric_direction("forward_ms@4096") == "min"  # a glob declared by the efficiency measurement
    assert metric_direction("forward_tokens_per_s@4096") == "max"
    assert metric_direction("fixed-rff@64/accuracy") == "max"  # kernel experiment, '/<metric>' names
    assert metric_direction("params_total") is None  # declared, but not ranked
    assert metric_direction("never_declared_metric") is None  # undeclared: not guessed from its name


def test_a_second_declaration_with_another_direction_is_refused() -> None:
    with pytest.raises(ValueError, match="already declared"):
        register_metric("accuracy", "min", "oops")
    with pytest.raises(ValueError, match="must be 'max', 'min' or None"):
        register_metric("new_metric_for_test", "up", "oops")  # type: ignore[arg-type]


@pytest.mark.parametrize("direction", ["max", "min"])
def test_task_table_ranks_follow_the_declaration(tmp_path: Path, direction: str) -> None:
    name = f"plugin_score_{direction}"
    register_metric(name, direction, "a plug-in measurement's metric")
    try:
        for seed, noise in enumerate((0.0, 0.01, -0.01)):  # a gap of 1.0 against seed noise of 0.01: detected
            for label, value in (("low", 1.0), ("high", 2.0)):
                write_cell(
                    tmp_path,
                    label=label,
                    attention="softmax",
                    task="t",
                    measurement="echo",
                    seed=seed,
                    metrics={name: value + noise * (label == "high")},
                )
        table = task_table(load_runs([tmp_path]), "t", "echo")  # a plug-in measurement's table ranks every metric
        ranks = dict(zip(table.data["label"], table.data[f"{name}_rank"]))
        assert ranks == ({"high": 1.0, "low": 2.0} if direction == "max" else {"low": 1.0, "high": 2.0})
        winner = "high" if direction == "max" else "low"
        assert list(table.best[name]) == [lab == winner for lab in table.data["label"]]
    finally:
        METRICS.pop(name)


def test_a_plugin_gap_within_seed_noise_has_either_rank_and_no_bold(tmp_path: Path) -> None:
    name = "plugin_noisy_score"
    register_metric(name, "max", "a plug-in measurement's metric")
    try:
        for seed, (a, b) in enumerate(((0.9, 0.5), (0.4, 0.8), (0.95, 0.6))):  # a's mean higher, not detectably
            for label, value in (("a", a), ("b", b)):
                write_cell(tmp_path, label=label, task="t", measurement="echo", seed=seed, metrics={name: value})
        table = task_table(load_runs([tmp_path]), "t", "echo")
        data = table.data.set_index("label")
        assert list(data.loc[["a", "b"], f"{name}_rank"]) == [1, 2]  # by mean ...
        assert set(data[f"{name}_rank_low"]) == {1} and set(data[f"{name}_rank_high"]) == {2}  # ... either place
        assert not table.best[name].any()
        one_seed = tmp_path / "one"
        for label, value in (("a", 1.0), ("b", 2.0)):
            write_cell(one_seed, label=label, task="t", measurement="echo", metrics={name: value})
        table = task_table(load_runs([one_seed]), "t", "echo")
        assert set(table.data[f"{name}_rank_low"]) == {1} and set(table.data[f"{name}_rank_high"]) == {2}
        assert not table.best[name].any()  # one seed: no claim
    finally:
        METRICS.pop(name)


def test_a_timed_metric_is_shown_not_ranked(tmp_path: Path) -> None:
    name = "plugin_seconds"
    register_metric(name, "min", "a plug-in measurement's wall time", timed=True)
    try:
        for seed in range(3):
            for label, value in (("fast", 1.0 + seed / 100), ("slow", 9.0)):
                write_cell(tmp_path, label=label, task="t", measurement="echo", seed=seed, metrics={name: value})
        table = task_table(load_runs([tmp_path]), "t", "echo")
        assert table.data[f"{name}_rank"].isna().all() and not table.best[name].any()
        assert f"Times ({name}) are not ranked" in " ".join(table.notes)
    finally:
        METRICS.pop(name)


def test_an_undeclared_metric_is_not_ranked(tmp_path: Path) -> None:
    for label, value in (("low", 1.0), ("high", 2.0)):
        write_cell(tmp_path, label=label, attention="softmax", task="t", metrics={"mystery_error": value})
    table = task_table(load_runs([tmp_path]), "t")
    assert table.data["mystery_error_rank"].isna().all()
