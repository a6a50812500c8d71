"""The executor: failures are isolated and recorded, resume keeps finished cells, kill -9 loses nothing finished."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from harness.cli import main
from harness.executor import RunOptions, run_suite
from harness.store import RunStore, cell_id
from harness.suite import cell_name, load_suite

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))  # fake_cells plugins

MODEL = {"d_model": 16, "num_layers": 1, "num_heads": 2, "ffn_dim": 32, "dropout": 0.0}
TRAINING = {"epochs": 2, "batch_size": 16}


def suite_file(tmp_path: Path, attentions: list, measurements: list, seeds=(0,), **extra) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({"name": "tiny", "description": "test suite", "attentions": attentions,
                                    "seeds": list(seeds), "model": MODEL, "training": TRAINING,
                                    "measurements": measurements, **extra}))
    return path


def records(run_dir: Path) -> dict[str, dict]:
    return {r["label"] + f"/s{r['cell']['seed']}/" + r["cell"]["measurement"]["name"]: r
            for r in RunStore(run_dir).records()}


def test_failing_attentions_are_recorded_and_the_suite_completes(tmp_path):
    attentions = [{"name": "fake_cells:Raises", "label": "raises"}, {"name": "fake_cells:ReturnsNaN", "label": "nan"},
                  "softmax"]
    suite = load_suite(str(suite_file(tmp_path, attentions, ["fake_cells:tiny_train"])))
    summary = run_suite(suite, tmp_path / "run", RunOptions(show_progress=False))
    assert summary.exit_code == 1 and summary.counts == {"failed": 2, "ok": 1}
    got = records(tmp_path / "run")
    assert got["raises/s0/fake_cells:tiny_train"]["reason"] == "RuntimeError: this attention always fails"
    assert "this attention always fails" in got["raises/s0/fake_cells:tiny_train"]["error"]  # the traceback
    assert got["nan/s0/fake_cells:tiny_train"]["reason"].startswith("non-finite loss: training loss became nan")
    ok = got["softmax/s0/fake_cells:tiny_train"]
    assert ok["status"] == "ok" and 0.0 <= ok["metrics"]["accuracy"] <= 1.0 and ok["reason"] is None
    assert set(ok) == {"schema", "cell_id", "cell", "label", "status", "reason", "error", "metrics", "details",
                       "provenance"}
    prov = ok["provenance"]
    assert prov["seed"] == 0 and prov["device"] == "cpu" and prov["seconds"] > 0
    assert prov["config"]["training"]["epochs"] == 2 and prov["config"]["attention"]["head_dim"] == 8
    assert {"git_commit", "git_dirty", "torch", "python", "packages", "cpu", "threads", "hostname", "started_at",
            "finished_at", "command"} <= set(prov)


def test_skip_is_recorded_with_its_reason_and_is_not_a_failure(tmp_path):
    measurements = [{"name": "fake_cells:tiny_train", "options": {"skip": "needs a GPU"}}]
    suite = load_suite(str(suite_file(tmp_path, ["softmax"], measurements)))
    summary = run_suite(suite, tmp_path / "run", RunOptions(show_progress=False))
    (record,) = RunStore(tmp_path / "run").records()
    assert summary.exit_code == 0 and record["status"] == "skipped" and record["reason"] == "needs a GPU"


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
    measurements = ["fake_cells:echo_once", {"name": "fake_cells:sleeper", "options": {"sleep": 120.0}},
                    {"name": "fake_cells:crasher", "options": {"crash": True}}]
    suite = load_suite(str(suite_file(tmp_path, ["softmax"], measurements, cell_timeout=5)))
    start = time.perf_counter()
    summary = run_suite(suite, tmp_path / "run", RunOptions(show_progress=False, workers=2))
    assert time.perf_counter() - start < 100  # the 120 s sleeper was killed
    got = records(tmp_path / "run")
    assert got["none/s0/fake_cells:echo_once"]["status"] == "ok"
    assert got["softmax/s0/fake_cells:sleeper"]["reason"].startswith("time-out: no result after 5 s")
    assert got["softmax/s0/fake_cells:crasher"]["reason"].startswith("worker process died (exit code 3)")
    assert summary.exit_code == 1 and summary.counts == {"ok": 1, "failed": 2}


def children(pid: int) -> list[int]:
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


def test_kill_9_mid_run_then_rerun_gives_every_cell_exactly_once(tmp_path):
    hold = tmp_path / "hold"
    hold.touch()
    measurements = [{"name": "fake_cells:tiny_train", "options": {"examples": 32}},
                    {"name": "fake_cells:sleeper", "options": {"hold_while": str(hold)}}]
    path = suite_file(tmp_path, ["softmax"], measurements, seeds=[0, 1])
    cells = load_suite(str(path)).cells()
    held_logs = [tmp_path / "run" / "logs" / f"{cell_id(c)}.log" for c in cells
                 if c["measurement"]["name"] == "fake_cells:sleeper"]
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen([sys.executable, "-m", "harness", "run", str(path), "--out", str(run_dir), "--quiet",
                                "--workers", "2"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 90
    while not (list((run_dir / "cells").glob("*.json")) and any(p.exists() for p in held_logs)):
        assert process.poll() is None, process.stderr.read().decode()
        assert time.monotonic() < deadline, "no cell finished and no held cell started within 90 s"
        time.sleep(0.05)
    workers = children(process.pid)
    process.send_signal(signal.SIGKILL)  # mid-run: a held cell is in flight in a worker
    process.wait()
    deadline = time.monotonic() + 8
    while any(Path(f"/proc/{pid}").exists() for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in workers if Path(f"/proc/{pid}").exists()], "worker processes outlived the run"
    finished_before = {p.name for p in (run_dir / "cells").glob("*.json")}
    assert 1 <= len(finished_before) < len(cells)

    hold.unlink()
    assert main(["run", str(path), "--out", str(run_dir), "--quiet"]) == 0
    expected = {cell_id(c) for c in cells}
    files = sorted((run_dir / "cells").iterdir())
    assert [p.name for p in files] == sorted(f"{i}.json" for i in expected)  # no temporary files, no extras
    stored = [json.loads(p.read_text()) for p in files]
    assert all(r["status"] == "ok" and cell_id(r["cell"]) == r["cell_id"] for r in stored)
    assert sorted(cell_name(r["cell"]) for r in stored) == sorted(cell_name(c) for c in cells)


def test_failure_reasons_are_one_line_and_say_what_happened():
    from harness.executor import failure_reason
    from harness.train import NonFiniteLossError

    def silent():
        raise NotImplementedError

    try:
        silent()
    except NotImplementedError as err:
        assert failure_reason(err).startswith("NotImplementedError raised at test_executor.py:")
        assert failure_reason(err).endswith(" in silent")
    assert failure_reason(NonFiniteLossError("training loss became nan at epoch 2\nmore")) == \
        "non-finite loss: training loss became nan at epoch 2"
    assert failure_reason(MemoryError("no room")) == "out of memory: MemoryError: no room"
    assert failure_reason(ValueError("bad\nvalue")) == "ValueError: bad"
