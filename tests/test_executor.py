"""The executor: failures are isolated and recorded, resume keeps finished cells, kill -9 loses nothing finished."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import torch
import yaml
from cells import TINY_TASK
from processes import HANG_GUARD, Children, wait_until

from attnbench.cell_spec import CellSpec
from attnbench.cli import main
from attnbench.executor import RunOptions, run_suite
from attnbench.store import RunStore
from attnbench.suite import load_suite

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))  # fake_cells plugins

MODEL = {"d_model": 16, "num_layers": 1, "num_heads": 2, "ffn_dim": 32, "dropout": 0.0}
TRAINING = {"epochs": 2, "batch_size": 16}


def suite_file(tmp_path: Path, attentions: list, measurements: list, seeds=(0,), **extra) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "tiny",
                "description": "test suite",
                "attentions": attentions,
                "seeds": list(seeds),
                "model": MODEL,
                "training": TRAINING,
                "measurements": measurements,
                **extra,
            }
        )
    )
    return path


def records(run_dir: Path) -> dict[str, dict]:
    return {
        r["label"] + f"/s{r['cell']['seed']}/" + r["cell"]["measurement"]["name"]: r
        for r in RunStore(run_dir).records()
    }


def test_failing_attentions_are_recorded_and_the_suite_completes(tmp_path):
    attentions = [
        {"name": "fake_cells:Raises", "label": "raises"},
        {"name": "fake_cells:ReturnsNaN", "label": "nan"},
        "softmax",
    ]
    suite = load_suite(str(suite_file(tmp_path, attentions, ["fake_cells:tiny_train"])))
    summary = run_suite(suite, tmp_path / "run", RunOptions(show_progress=False))
    assert summary.exit_code == 1 and summary.counts == {"failed": 2, "ok": 1}
    got = records(tmp_path / "run")
    assert got["raises/s0/fake_cells:tiny_train"]["reason"] == "RuntimeError: this attention always fails"
    assert "this attention always fails" in got["raises/s0/fake_cells:tiny_train"]["error"]  # the traceback
    assert got["nan/s0/fake_cells:tiny_train"]["reason"].startswith("non-finite loss: training loss became nan")
    ok = got["softmax/s0/fake_cells:tiny_train"]
    assert ok["status"] == "ok" and 0.0 <= ok["metrics"]["accuracy"] <= 1.0 and ok["reason"] is None
    assert set(ok) == {
        "schema",
        "cell_id",
        "cell",
        "label",
        "status",
        "reason",
        "error",
        "metrics",
        "details",
        "provenance",
    }
    prov = ok["provenance"]
    assert prov["seed"] == 0 and prov["device"] == "cpu" and prov["seconds"] > 0
    assert prov["config"]["training"]["epochs"] == 2 and prov["config"]["attention"]["head_dim"] == 8
    assert {
        "git_commit",
        "git_dirty",
        "torch",
        "python",
        "packages",
        "cpu",
        "threads",
        "hostname",
        "started_at",
        "finished_at",
        "command",
    } <= set(prov)


def test_skip_is_recorded_with_its_reason_and_is_not_a_failure(tmp_path):
    measurements = [{"name": "fake_cells:tiny_train", "options": {"skip": "needs a GPU"}}]
    suite = load_suite(str(suite_file(tmp_path, ["softmax"], measurements)))
    summary = run_suite(suite, tmp_path / "run", RunOptions(show_progress=False))
    (record,) = RunStore(tmp_path / "run").records()
    assert summary.exit_code == 0 and record["status"] == "skipped" and record["reason"] == "needs a GPU"


def test_numpy_and_torch_values_are_stored_as_json_and_an_unstorable_one_fails_only_its_cell(tmp_path):
    """A plug-in measurement returning np.float32, a 0-d tensor or arrays: stored as numbers and lists; one that
    returns a set fails its cell with the key path (the run goes on; no temporary file is left)."""
    measurements = [
        {"name": "fake_cells:library_values"},
        {"name": "fake_cells:library_values", "options": {"unstorable": True}},
    ]
    tasks = [{"name": "fake_cells:tiny_task"}]
    suite = load_suite(str(suite_file(tmp_path, ["softmax"], measurements[:1] + ["echo"], tasks=tasks)))
    run_suite(suite, tmp_path / "run", RunOptions(show_progress=False))
    stored = {r["cell"]["measurement"]["name"]: r for r in RunStore(tmp_path / "run").records()}
    values = stored["fake_cells:library_values"]
    assert values["status"] == "ok" and values["metrics"] == {"score": 0.5, "count": 3}
    assert values["details"] == {"curve": [0, 1, 2], "weights": [1.0, 1.0], "n": 4, "pair": [0.5, 1]}

    suite = load_suite(str(suite_file(tmp_path, ["softmax"], [measurements[1], "echo"], tasks=tasks)))
    summary = run_suite(suite, tmp_path / "run2", RunOptions(show_progress=False))
    stored = {r["cell"]["measurement"]["name"]: r for r in RunStore(tmp_path / "run2").records()}
    assert summary.counts == {"failed": 1, "ok": 1}
    assert "details.kinds is a builtins.set" in stored["fake_cells:library_values"]["reason"]
    assert not list((tmp_path / "run2" / "cells").glob(".*.tmp"))


def test_same_cell_same_seed_gives_identical_metrics_and_resume_runs_nothing(tmp_path):
    suite = load_suite(str(suite_file(tmp_path, ["softmax"], ["fake_cells:tiny_train"], seeds=[3])))
    first = run_suite(suite, tmp_path / "a", RunOptions(show_progress=False))
    second = run_suite(suite, tmp_path / "b", RunOptions(show_progress=False))
    (a,), (b,) = RunStore(tmp_path / "a").records(), RunStore(tmp_path / "b").records()
    assert first.ran == second.ran == 1
    assert a["cell_id"] == b["cell_id"] and a["metrics"] == b["metrics"]
    losses = [[h["train_loss"] for h in r["details"]["history"]] for r in (a, b)]
    assert losses[0] == losses[1]
    stamp = RunStore(tmp_path / "a").cell_path(a["cell_id"]).stat().st_mtime_ns
    again = run_suite(suite, tmp_path / "a", RunOptions(show_progress=False))
    assert again.ran == 0 and again.resumed == 1
    assert RunStore(tmp_path / "a").cell_path(a["cell_id"]).stat().st_mtime_ns == stamp


def test_failed_cells_are_retried_unless_told_not_to(tmp_path):
    attentions = ["softmax", {"name": "fake_cells:Raises", "label": "raises"}]
    failing = load_suite(str(suite_file(tmp_path, attentions, ["fake_cells:tiny_train"])))
    run_suite(failing, tmp_path / "run2", RunOptions(show_progress=False))
    kept = run_suite(failing, tmp_path / "run2", RunOptions(show_progress=False, retry_failed=False))
    retried = run_suite(failing, tmp_path / "run2", RunOptions(show_progress=False))
    assert (kept.ran, kept.exit_code, retried.ran, retried.exit_code) == (0, 1, 1, 1)


def test_workers_isolate_timeouts_and_dying_processes(tmp_path):
    measurements = [
        "fake_cells:echo_once",
        {"name": "fake_cells:sleeper", "options": {"sleep": 120.0}},
        {"name": "fake_cells:crasher", "options": {"crash": True}},
    ]
    suite = load_suite(str(suite_file(tmp_path, ["softmax"], measurements, cell_timeout=5)))
    summary = run_suite(suite, tmp_path / "run", RunOptions(show_progress=False, workers=2))
    got = records(tmp_path / "run")
    assert got["none/s0/fake_cells:echo_once"]["status"] == "ok"
    assert got["softmax/s0/fake_cells:sleeper"]["reason"].startswith("time-out: no result after 5 s")
    assert got["softmax/s0/fake_cells:crasher"]["reason"].startswith("worker process died (exit code 3)")
    assert summary.exit_code == 1 and summary.counts == {"ok": 1, "failed": 2}


def children_of(pid: int) -> list[int]:
    """Process ids whose parent is `pid` (Linux /proc; empty elsewhere)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def test_kill_9_mid_run_then_rerun_gives_every_cell_exactly_once(tmp_path, children):
    hold = tmp_path / "hold"
    hold.touch()
    measurements = [
        {"name": "fake_cells:tiny_train", "options": {"examples": 32}},
        {"name": "fake_cells:sleeper", "options": {"hold_while": str(hold)}},
    ]
    path = suite_file(tmp_path, ["softmax"], measurements, seeds=[0, 1])
    cells = load_suite(str(path)).cells()
    held_logs = [tmp_path / "run" / "logs" / f"{c.id}.log" for c in cells if c.measurement.name == "fake_cells:sleeper"]
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    process = children.start(
        [sys.executable, "-m", "attnbench", "run", str(path), "--out", str(run_dir), "--quiet", "--workers", "2"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    wait_until(
        lambda: list((run_dir / "cells").glob("*.json")) and any(p.exists() for p in held_logs),
        process,
        "a cell finished and a held cell started",
    )
    workers = children_of(process.pid)
    process.send_signal(signal.SIGKILL)  # mid-run: a held cell is in flight in a worker
    process.wait()
    wait_until(
        lambda: not [pid for pid in workers if Path(f"/proc/{pid}").exists()],
        what="the worker processes exit after their run was killed",
    )
    finished_before = {p.name for p in (run_dir / "cells").glob("*.json")}
    assert 1 <= len(finished_before) < len(cells)

    hold.unlink()
    assert main(["run", str(path), "--out", str(run_dir), "--quiet"]) == 0
    expected = {c.id for c in cells}
    files = sorted((run_dir / "cells").iterdir())
    assert [p.name for p in files] == sorted(f"{i}.json" for i in expected)  # no temporary files, no extras
    stored = [json.loads(p.read_text()) for p in files]
    assert all(r["status"] == "ok" and CellSpec.from_json(r["cell"]).id == r["cell_id"] for r in stored)
    assert sorted(CellSpec.from_json(r["cell"]).name for r in stored) == sorted(c.name for c in cells)


def test_failure_reasons_are_one_line_and_say_what_happened():
    from attnbench.cell import failure_reason
    from attnbench.train import NonFiniteLossError

    def silent():
        raise NotImplementedError

    try:
        silent()
    except NotImplementedError as err:
        assert failure_reason(err).startswith("NotImplementedError raised at test_executor.py:")
        assert failure_reason(err).endswith(" in silent")
    assert (
        failure_reason(NonFiniteLossError("training loss became nan at epoch 2\nmore"))
        == "non-finite loss: training loss became nan at epoch 2"
    )
    assert failure_reason(MemoryError("no room")) == "out of memory: MemoryError: no room"
    assert failure_reason(ValueError("bad\nvalue")) == "ValueError: bad"


def cli(children: Children, *args: str) -> subprocess.Popen:
    """`attnbench ARGS` in a child process (its group ended with the test) that finds the fake_cells plugins."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    return children.start(
        [sys.executable, "-m", "attnbench", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_a_cell_that_kills_its_process_in_process_mode_is_recorded_and_later_cells_run(tmp_path, capsys, children):
    measurements = [
        {"name": "fake_cells:crasher", "options": {"crash": True}},
        {"name": "fake_cells:tiny_train", "options": {"examples": 32}},
    ]
    path = suite_file(tmp_path, ["softmax"], measurements)
    for out, flags, reason in (
        ("kept", ["--no-retry-failed"], "the process died while running this cell (pid "),
        ("retried", [], "worker process died (exit code 3)"),
    ):
        first = cli(children, "run", str(path), "--out", str(tmp_path / out), "--quiet")
        assert first.wait(HANG_GUARD) == 3  # the cell ended the run's own process
        assert [p.name for p in (tmp_path / out / "in-flight").iterdir()] != []
        assert main(["run", str(path), "--out", str(tmp_path / out), "--quiet", *flags]) == 1
        err = capsys.readouterr().err
        assert "none/softmax/s0/fake_cells:crasher: the process died while running this cell" in err
        got = records(tmp_path / out)
        assert got["softmax/s0/fake_cells:crasher"]["reason"].startswith(reason)
        assert got["softmax/s0/fake_cells:tiny_train"]["status"] == "ok"
        assert list((tmp_path / out / "in-flight").iterdir()) == []


def test_two_runs_on_one_folder_one_writes_the_other_exits_2(tmp_path, capsys, children):
    hold = tmp_path / "hold"
    hold.touch()
    measurements = [{"name": "fake_cells:sleeper", "options": {"hold_while": str(hold)}}]
    path = suite_file(tmp_path, ["softmax"], measurements, seeds=[0, 1])
    first = cli(children, "run", str(path), "--out", str(tmp_path / "run"), "--quiet")
    wait_until(lambda: list((tmp_path / "run" / "in-flight").glob("*.json")), first, "a cell started")
    assert main(["run", str(path), "--out", str(tmp_path / "run"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"is being written by another attnbench run (pid {first.pid} on " in err and err.count("\n") == 1
    hold.unlink()
    assert first.wait(HANG_GUARD) == 0
    stored = list(RunStore(tmp_path / "run").records())
    assert len(stored) == 2 and all(r["provenance"]["command"].startswith("attnbench run") for r in stored)
    assert main(["run", str(path), "--out", str(tmp_path / "run"), "--quiet"]) == 0  # the lock was released
    assert "2 kept from before, 0 run" in capsys.readouterr().out


def test_truncated_and_empty_cell_files_are_reported_set_aside_and_rerun(tmp_path, capsys):
    path = suite_file(
        tmp_path, ["softmax"], [{"name": "fake_cells:tiny_train", "options": {"examples": 32}}], seeds=[0, 1]
    )
    assert main(["run", str(path), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    first, second = sorted((tmp_path / "run" / "cells").glob("*.json"))
    metrics = json.loads(first.read_text())["metrics"]
    first.write_text(first.read_text()[:100])
    second.write_text("")
    capsys.readouterr()
    assert main(["run", str(path), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    captured = capsys.readouterr()
    assert captured.err.count("was unreadable") == 2 and "(0 kept from before, 2 run)" in captured.out
    assert json.loads(first.read_text())["metrics"] == metrics  # rerun: the same result
    assert len(list((tmp_path / "run" / "unreadable").iterdir())) == 2


def test_provenance_holds_the_model_and_data_that_ran(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "s",
                "description": "d",
                "attentions": ["softmax"],
                "seeds": [0],
                "tasks": [{"name": "fake_cells:tiny_task", "options": {"rows": 24}}],
                "model": MODEL,
                "training": TRAINING,
                "measurements": ["accuracy"],
            }
        )
    )
    run_suite(load_suite(str(path)), tmp_path / "run", RunOptions(show_progress=False))
    (record,) = RunStore(tmp_path / "run").records()
    model, data = record["provenance"]["config"]["model"], record["provenance"]["data"]
    assert (model["vocab_size"], model["num_classes"], model["max_length"], model["d_model"]) == (9, 2, 10, 16)
    assert data["label_names"] == [0, 1] and set(data["splits"]) == {"train", "validation", "test"}
    from fake_cells import tiny_task

    from attnbench.tasks import TASKS

    task = tiny_task(TASKS.make_config("fake_cells:tiny_task", rows=24))
    for split, summary in data["splits"].items():  # an independent count of the same seeded rows
        assert summary == {"size": 24, "class_counts": torch.bincount(task[split].labels, minlength=2).tolist()}


def test_in_process_cells_have_a_default_time_limit(tmp_path, monkeypatch):
    import attnbench.executor

    monkeypatch.setattr(attnbench.executor, "DEFAULT_CELL_TIMEOUT", 1.0)
    suite = load_suite(
        str(suite_file(tmp_path, ["softmax"], [{"name": "fake_cells:sleeper", "options": {"sleep": 30}}]))
    )
    summary = run_suite(suite, tmp_path / "run", RunOptions(show_progress=False))
    (record,) = RunStore(tmp_path / "run").records()
    assert summary.exit_code == 1
    assert record["reason"] == "time-out: the cell ran past its time limit of 1 s"


def test_a_sweep_on_selection_seeds_runs_the_chosen_trial_at_the_other_seeds(tmp_path):
    from attnbench.report.load import load_runs

    task = TINY_TASK
    sweep = {"metric": "accuracy", "grid": {"lr": [1e-5, 1e-3, 3e-2]}, "select_seeds": [0]}
    path = suite_file(tmp_path, ["softmax", "elu-linear"], ["accuracy"], seeds=(0, 1, 2), tasks=[task], sweep=sweep)
    summary = run_suite(load_suite(str(path)), tmp_path / "run", RunOptions(show_progress=False, workers=1))
    assert summary.exit_code == 0 and summary.ran == summary.selected == 2 * (3 + 2)
    by_label: dict[str, dict[int, dict[int, dict]]] = {}
    for r in RunStore(tmp_path / "run").records():
        by_label.setdefault(r["label"], {}).setdefault(r["cell"]["seed"], {})[r["cell"]["sweep"]["trial"]] = r
    for label, seeds in by_label.items():
        assert set(seeds[0]) == {0, 1, 2}  # every trial at the selection seed
        val = {t: r["details"]["validation"]["accuracy"] for t, r in seeds[0].items()}
        best = min(t for t in val if val[t] == max(val.values()))  # the validation best, the earlier on ties
        assert set(seeds[1]) == set(seeds[2]) == {best}, (label, val)
    plan = json.loads((tmp_path / "run" / "run.json").read_text())
    assert sorted(plan["cell_ids"]) == sorted(r["cell_id"] for r in RunStore(tmp_path / "run").records())
    assert plan["metrics"]["accuracy"]["direction"] == "max"  # the records of its metrics, for the report
    assert plan["test_rows"] == {"nonlinear_tokens": "fresh"}  # and its tasks' designs
    again = run_suite(load_suite(str(path)), tmp_path / "run", RunOptions(show_progress=False, workers=1))
    assert again.ran == 0 and again.resumed == 10
    kept = load_runs([tmp_path / "run"]).cells
    assert sorted(kept.groupby("label")["seed"].apply(sorted).tolist()) == [[0, 1, 2], [0, 1, 2]]
