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
        for label, value in (("low", 1.0), ("high", 2.0)):
            write_cell(tmp_path, label=label, attention="softmax", task="t", measurement="echo", metrics={name: value})
        table = task_table(load_runs([tmp_path]), "t", "echo")  # a plug-in measurement's table ranks every metric
        ranks = dict(zip(table.data["label"], table.data[f"{name}_rank"]))
        assert ranks == ({"high": 1.0, "low": 2.0} if direction == "max" else {"low": 1.0, "high": 2.0})
    finally:
        METRICS.pop(name)


def test_an_undeclared_metric_is_not_ranked(tmp_path: Path) -> None:
    for label, value in (("low", 1.0), ("high", 2.0)):
        write_cell(tmp_path, label=label, attention="softmax", task="t", metrics={"mystery_error": value})
    table = task_table(load_runs([tmp_path]), "t")
    assert table.data["mystery_error_rank"].isna().all()
