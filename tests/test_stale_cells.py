"""Results stay true (issue 36): a cell is its inputs, a report holds only the suite as it stands, one reader of
cell files, a resumed run keeps its threads, reports are swapped in whole."""

from __future__ import annotations

import errno
import json
import sys
from pathlib import Path

import pytest
import yaml

from attnbench import executor, report
from attnbench.cli import main
from attnbench.executor import RunOptions, run_suite
from attnbench.report.load import load_runs
from attnbench.store import RunStore
from attnbench.suite import load_suite
from attnbench.workers import MachineFacts

sys.path.insert(0, str(Path(__file__).parent))  # fake_cells plugins


def echo_suite(folder: Path, scale: float = 1.0, seeds=(1,), **extra) -> Path:
    """A suite of echo cells (metric scaled_seed = seed * scale) with one attention."""
    path = folder / "echo.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "echo",
                "description": "echo cells",
                "attentions": ["softmax"],
                "tasks": [{"name": "fake_cells:tiny_task"}],
                "seeds": list(seeds),
                "measurements": [{"name": "fake_cells:echo", "options": {"scale": scale}}],
                **extra,
            }
        )
    )
    return path


def quiet(**options) -> RunOptions:
    return RunOptions(workers=1, show_progress=False, **options)


def test_an_edited_suite_is_reported_alone_and_its_old_cells_are_named_reported_apart_and_pruned(tmp_path, capsys):
    run = tmp_path / "run"
    run_suite(load_suite(str(echo_suite(tmp_path, scale=1.0))), run, quiet())
    run_suite(load_suite(str(echo_suite(tmp_path, scale=2.0))), run, quiet())
    results = load_runs([run])
    assert list(results.ok["metrics"]) == [{"scaled_seed": 2.0}]  # not the old and the new averaged (n = 2)
    assert results.runs[0].left_out == ["fake_cells:tiny_task/softmax/s1/fake_cells:echo"]
    stale = load_runs([run], stale=True)
    assert list(stale.ok["metrics"]) == [{"scaled_seed": 1.0}]

    assert main(["report", str(run), "--out", str(tmp_path / "r")]) == 0
    assert "left out 1 stored cells" in capsys.readouterr().err
    provenance = json.loads((tmp_path / "r" / "provenance.json").read_text())
    assert provenance[0]["cells"]["left out"] == 1
    assert provenance[0]["left_out_cells"] == ["fake_cells:tiny_task/softmax/s1/fake_cells:echo"]

    old = {p.name for p in (run / "cells").glob("*.json")} - {f"{c}.json" for c in RunStore(run).planned()}
    assert main(["prune", str(run)]) == 0
    pruned = list((run / "pruned").glob("*/cells/*.json"))
    assert {p.name for p in pruned} == old  # moved aside, not deleted
    assert load_runs([run]).runs[0].left_out == []


def test_a_corrected_data_file_makes_a_new_cell_and_relative_paths_follow_the_suite_file(tmp_path, monkeypatch):
    data = tmp_path / "suites" / "data"
    data.mkdir(parents=True)
    (data / "train.csv").write_text("text,label\n" + "good film,1\nbad film,0\n" * 4)
    path = tmp_path / "suites" / "text.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "text",
                "description": "local text",
                "attentions": ["softmax"],
                "tasks": [{"name": "text", "options": {"files": {"train": "data/train.csv"}}}],
                "seeds": [0],
                "measurements": ["fake_cells:echo"],
            }
        )
    )
    monkeypatch.chdir(tmp_path)  # not the suite's folder: the relative path is the suite file's
    first = load_suite("suites/text.yaml")
    [cell] = first.cells()
    assert cell.task.options["files"]["train"] == str(data.resolve() / "train.csv")  # recorded resolved
    assert cell.inputs == {
        "files.train": "sha256:" + __import__("hashlib").sha256((data / "train.csv").read_bytes()).hexdigest()
    }
    summary = run_suite(first, tmp_path / "run", quiet())
    assert (summary.ran, summary.resumed) == (1, 0)

    (data / "train.csv").write_text("text,label\n" + "good film,1\nbad film,0\n" * 8)  # corrected: twice the rows
    summary = run_suite(load_suite("suites/text.yaml"), tmp_path / "run", quiet())
    assert (summary.ran, summary.resumed, summary.foreign) == (1, 0, 1)  # a new cell; the old one is stale


def test_generated_tasks_keep_their_cell_ids_and_a_new_generator_version_makes_new_cells(tmp_path, monkeypatch):
    from fake_cells import TinyTaskConfig

    [cell] = load_suite(str(echo_suite(tmp_path))).cells()
    assert "inputs" not in cell.to_json()  # generated task, first version: the id of every shipped cell is unchanged
    monkeypatch.setattr(TinyTaskConfig, "generator_version", 2)
    [cell] = load_suite(str(echo_suite(tmp_path))).cells()
    assert cell.inputs == {"generator": 2}


def test_a_resumed_run_keeps_the_first_sittings_threads_or_says_why_not(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run_suite(load_suite(str(echo_suite(tmp_path))), run, quiet(threads=2))
    monkeypatch.setattr(executor, "machine_facts", lambda *_: MachineFacts(4, 16.0, 1))  # OMP_NUM_THREADS=1 now
    suite = load_suite(str(echo_suite(tmp_path, seeds=(1, 2))))
    run_suite(suite, run, quiet())
    records = {r["cell"]["seed"]: r for r in RunStore(run).records()}
    assert records[2]["provenance"]["split"]["threads"] == 2
    assert records[2]["provenance"]["threads"] == 2
    summary = run_suite(load_suite(str(echo_suite(tmp_path, seeds=(1, 2, 3)))), run, quiet(threads=1))
    assert any("--threads 1" in note and "first sitting with 2" in note for note in summary.notes)


def test_a_cell_file_of_another_schema_is_not_finished_and_run_and_report_say_the_same(tmp_path, capsys):
    run = tmp_path / "run"
    suite = load_suite(str(echo_suite(tmp_path)))
    run_suite(suite, run, quiet())
    [path] = (run / "cells").glob("*.json")
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "schema": 2}))
    [row] = load_runs([run]).cells.to_dict("records")
    assert row["status"] == "unreadable" and "a result of schema 2 (another attnbench version)" in row["reason"]
    summary = run_suite(suite, run, quiet())
    assert summary.ran == 1  # not kept as finished
    assert any("a result of schema 2 (another attnbench version)" in note for note in summary.notes)
    [aside] = (run / "unreadable").iterdir()
    assert json.loads(aside.read_text())["schema"] == 2  # kept aside, never deleted


def test_a_report_that_fails_leaves_the_old_one_intact_and_names_the_path(tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    run_suite(load_suite(str(echo_suite(tmp_path))), run, quiet())
    assert main(["report", str(run)]) == 0
    before = {p.relative_to(run / "report"): p.read_bytes() for p in (run / "report").rglob("*") if p.is_file()}

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(report, "render_page", full)
    capsys.readouterr()
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"cannot write the report {run / 'report'}: No space left on device" in err and err.count("\n") == 1
    after = {p.relative_to(run / "report"): p.read_bytes() for p in (run / "report").rglob("*") if p.is_file()}
    assert after == before
    assert sorted(p.name for p in run.iterdir() if p.name.startswith(".report")) == []  # no half-written folder


def test_a_full_disk_during_run_names_no_none(tmp_path, monkeypatch):
    def full(self, record):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(RunStore, "write_cell", full)
    with pytest.raises(Exception) as caught:
        run_suite(load_suite(str(echo_suite(tmp_path))), tmp_path / "run", quiet())
    message = str(caught.value)
    assert "No space left on device" in message and "(None)" not in message
