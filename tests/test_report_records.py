"""A run stores the records of its metrics (run.json "metrics"); `attnbench report` reads them there, so it imports no
measurement module and no torch for a run of built-in measurements, and a plug-in's metrics keep their direction."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from processes import HANG_GUARD
from report_fixture import make_fake_run, write_cell

from attnbench.measurements import measurement_names, measurement_records
from attnbench.metrics import MetricInfo

LOADED = (
    "import json, sys; from attnbench.cli import main; code = main(sys.argv[1:]); "
    "print(json.dumps([code, sorted(m for m in sys.modules if m.split('.')[0] == 'torch' "
    "or m.startswith('attnbench.measurements'))]))"
)


def _store_records(run: Path, records: dict) -> None:
    info = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**info, "metrics": records}))


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
    _store_records(run, measurement_records([]))
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
