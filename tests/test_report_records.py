"""A run stores the records of its metrics (run.json "metrics") and its tasks' test-row designs ("test_rows");
`attnbench report` reads them there, so it imports no measurement or task module and no torch for a run of built-in
measurements, and a plug-in's metrics keep their direction."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from processes import HANG_GUARD
from report_fixture import TASKS, make_fake_run, write_cell

from attnbench.measurements import measurement_names, measurement_records
from attnbench.metrics import MetricInfo
from attnbench.tasks import task_designs

LOADED = (
    "import json, sys; from attnbench.cli import main; code = main(sys.argv[1:]); "
    "print(json.dumps([code, sorted(m for m in sys.modules if m.split('.')[0] == 'torch' "
    "or m.startswith(('attnbench.measurements', 'attnbench.tasks')))]))"
)


def _store_records(run: Path, records: dict, test_rows: dict | None = None) -> None:
    """What `attnbench run` stores beside the plan: the metric records and the tasks' test-row designs."""
    info = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**info, "metrics": records, "test_rows": test_rows or {}}))


def _fresh(children, code: str, *args: str) -> str:
    """The last line `code` prints in a fresh interpreter (nothing of the test process's imports)."""
    process = children.start(
        [sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    out, err = process.communicate(timeout=HANG_GUARD)
    assert process.returncode == 0, err
    return out.strip().splitlines()[-1]


def test_a_run_stores_the_records_its_measurements_declare():
    records = measurement_records(["accuracy", "efficiency"])
    assert records["accuracy"] == {**records["accuracy"], "direction": "max", "bounds": [0.0, 1.0]}
    assert records["*_ms@*"]["timed"] and records["*_ms@*"]["direction"] == "min"
    assert all(MetricInfo.from_dict(r).pattern == p for p, r in records.items())


def test_report_of_a_run_with_its_records_imports_no_measurement_and_no_torch(tmp_path, children):
    measurement_names()  # the built-ins' records, as `attnbench run` stores them
    run = make_fake_run(tmp_path / "run")  # every measurement kind, the Coulomb plug-in's included
    _store_records(run, measurement_records([]), task_designs(list(TASKS)))
    code, loaded = json.loads(_fresh(children, LOADED, "report", str(run)))
    assert code == 0 and loaded == []
    assert (run / "report" / "report.md").is_file()


def test_report_of_an_older_run_without_records_still_learns_the_directions(tmp_path, children):
    run = make_fake_run(tmp_path / "run", tasks=("sst2",))
    code, loaded = json.loads(_fresh(children, LOADED, "report", str(run)))
    assert code == 0 and "attnbench.measurements.accuracy" in loaded  # from the measurements themselves


def test_a_plugin_metrics_direction_comes_from_the_run_not_its_module(tmp_path, children):
    for seed in (0, 1):
        write_cell(tmp_path, label="a", task="t", measurement="plugin-echo", seed=seed, metrics={"plugin_error": 0.2})
    (tmp_path / "run.json").write_text(json.dumps({"schema": 1, "suite": "t"}))
    _store_records(tmp_path, {"plugin_error": MetricInfo("plugin_error", "min", "a plug-in's error").as_dict()})
    probe = (
        "import sys; from attnbench.report.load import load_runs; from attnbench.metrics import metric_direction; "
        "load_runs([sys.argv[1]]); print(metric_direction('plugin_error'))"
    )
    assert _fresh(children, probe, str(tmp_path)) == "min"


PLUGIN = '''
"""A plug-in measurement whose one metric is better low (no task: the value follows from the attention)."""
import dataclasses
from typing import ClassVar

from attnbench.measurements import MEASUREMENTS
from attnbench.metrics import register_metric

register_metric("toy_error", "min", "a plug-in's error rate", bounds=(0.0, 1.0), headline=True)


@dataclasses.dataclass
class ToyErrorOptions:
    uses_task: ClassVar[bool] = False


@MEASUREMENTS.register("toy-error", config=ToyErrorOptions)
def toy_error(cell, options, *, device, progress):
    base = {"softmax": 0.1, "elu-linear": 0.3, "uniform": 0.6}[cell.attention.name]
    return {"metrics": {"toy_error": base + 0.01 * cell.seed}, "details": {}}
'''
SUITE = """name: toy-plugin
description: a plug-in measurement whose metric is better low
attentions: [uniform, softmax, elu-linear]
seeds: [0, 1, 2]
measurements: ["toy_error_plugin:toy_error"]
"""
CLI = "import sys; from attnbench.cli import main; sys.exit(main(sys.argv[1:]))"
REPORTED = (
    "import sys, warnings; warnings.simplefilter('error'); from attnbench.cli import main; "
    "from attnbench.metrics import metric_direction; code = main(['report', *sys.argv[1:]]); "
    "print(code, metric_direction('toy_error'))"
)


def _plugin_run(tmp_path: Path, children) -> tuple[Path, Path]:
    """A run of the plug-in suite by `attnbench run` in an interpreter that has the plug-in on its path."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "toy_error_plugin.py").write_text(PLUGIN)
    (tmp_path / "toy.yaml").write_text(SUITE)
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugins), os.environ.get("PYTHONPATH", "")])}
    process = children.start(
        [sys.executable, "-c", CLI, "run", str(tmp_path / "toy.yaml"), "--out", str(run), "--workers", "1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _, err = process.communicate(timeout=HANG_GUARD)
    assert process.returncode == 0, err
    return run, plugins


def _ranked_labels(run: Path) -> list[str]:
    """The labels of the plug-in's table in report.md, in the order shown."""
    lines = (run / "report" / "report.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if "toy_error_plugin:toy_error" in line)
    rows = [line for line in lines[start:] if line.startswith("| ") and "toy_error" not in line and ":--" not in line]
    return [row.split("|")[1].strip() for row in rows[:3]]


def test_report_knows_a_plugin_measurements_metrics_without_its_module(tmp_path, children):
    """Issue 48 case 6: the report of a plug-in's run, in a process that cannot import the plug-in, ranks its metric
    in its declared direction (best, softmax's 0.11, first), from the records `attnbench run` stored."""
    run, _ = _plugin_run(tmp_path, children)
    assert json.loads((run / "run.json").read_text())["metrics"]["toy_error"]["direction"] == "min"
    assert _fresh(children, REPORTED, str(run)) == "0 min"
    assert _ranked_labels(run) == ["softmax", "elu-linear", "uniform"]


def test_an_older_plugin_run_without_records_declares_them_from_the_plugin_else_warns(tmp_path, children):
    run, plugins = _plugin_run(tmp_path, children)
    info = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({k: v for k, v in info.items() if k != "metrics"}))
    head = "import sys, warnings; "
    with_plugin = REPORTED.replace(head, f"{head}sys.path.insert(0, {str(plugins)!r}); ")
    assert _fresh(children, with_plugin, str(run)) == "0 min"  # the plug-in declares them, without a warning
    shutil.rmtree(run / "report")
    probe = REPORTED.replace("warnings.simplefilter('error')", "warnings.simplefilter('always')")
    process = children.start(
        [sys.executable, "-c", probe, str(run)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    out, err = process.communicate(timeout=HANG_GUARD)
    assert out.strip().splitlines()[-1] == "0 None"  # reported, unranked
    assert "toy_error_plugin:toy_error" in err and "attnbench run SUITE --out RUN_DIR" in err


def test_a_tasks_design_comes_from_the_run_before_the_registry():
    """A run's stored designs (run.json "test_rows") are the tasks' declarations, even for a task this installation
    does not know (whose registry answer would be 'shared')."""
    from attnbench.decisions.cells import adopt_designs, declared_design

    assert declared_design("plugin-task-not-installed") == "shared"
    assert adopt_designs({"plugin-task-not-installed": "fresh", "odd": "sometimes"})
    assert declared_design("plugin-task-not-installed") == "fresh" and declared_design("odd") == "shared"
    assert not adopt_designs(None)  # a run from before runs stored them


def test_report_of_the_smoke_run_with_todays_records_imports_no_measurement_task_nor_torch(tmp_path, children):
    """results/smoke stores its records and designs (run.json); with the records `attnbench run` stores today (its
    own predate the `exact` field: the next test), its report needs none of the code that ran it."""
    smoke = tmp_path / "smoke"
    shutil.copytree(
        Path(__file__).resolve().parents[1] / "results" / "smoke", smoke, ignore=shutil.ignore_patterns("report")
    )
    measurement_names()
    _store_records(smoke, measurement_records([]), json.loads((smoke / "run.json").read_text())["test_rows"])
    code, loaded = json.loads(_fresh(children, LOADED, "report", str(smoke), "--out", str(tmp_path / "report")))
    assert code == 0 and loaded == []
    assert (tmp_path / "report" / "report.md").is_file()


EXACT_KNOWN = (
    "import json, sys; from attnbench.report.load import load_runs; from attnbench.metrics import metric_exact; "
    "load_runs([sys.argv[1]]); print(json.dumps([metric_exact(m) for m in sys.argv[2:]]))"
)


def test_records_stored_before_the_exact_field_take_it_from_the_built_in_measurements(tmp_path, children):
    """A run whose records predate `exact` (results/smoke; runs started before it was added) ranks its counts as
    counts: the built-in measurements' records know the field; a plug-in's stored record stays as stored."""
    measurement_names()
    older = {p: {k: v for k, v in r.items() if k != "exact"} for p, r in measurement_records([]).items()}
    older["plugin_count"] = {"pattern": "plugin_count", "direction": "min", "description": "a plug-in's count"}
    for label, count in (("softmax", 16400.0), ("elu-linear", 33280.0), ("performer-256", 133128.0)):
        write_cell(tmp_path, label=label, task="byte_lm", measurement="state", metrics={"state_bytes@16": count})
    (tmp_path / "run.json").write_text(json.dumps({"schema": 1, "suite": "decode"}))
    _store_records(tmp_path, older)
    known = json.loads(_fresh(children, EXACT_KNOWN, str(tmp_path), "state_bytes@16", "params_total", "plugin_count"))
    assert known == [True, True, False]
    smoke = Path(__file__).resolve().parents[1] / "results" / "smoke"
    assert json.loads(_fresh(children, EXACT_KNOWN, str(smoke), "params_total", "accuracy")) == [True, False]
    code, _ = json.loads(_fresh(children, LOADED, "report", str(tmp_path)))
    report = (tmp_path / "report" / "report.md").read_text()
    assert code == 0 and "| 33,280 (rank 2) |" in report and "1–3" not in report
