"""The Ray executor stores the same cell results as the local one, and enforces cell time limits."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import yaml

from attnbench.executor import RunOptions, run_suite
from attnbench.store import RunStore
from attnbench.suite import load_suite

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'attnbench[ray]')")
sys.path.insert(0, str(Path(__file__).parent))  # fake_cells plugins, also sent to the Ray workers


@pytest.fixture(scope="module")
def local_ray():
    from attnbench.ray_executor import _pythonpath, local_worker_priority

    local_worker_priority()
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": _pythonpath()}},
    )
    yield
    ray.shutdown()


def suite_file(tmp_path: Path, measurements: list) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "tiny",
                "description": "ray test",
                "seeds": [0, 1],
                "measurements": measurements,
                "attentions": [
                    "softmax",
                    {"name": "performer", "options": {"num_features": 8}},
                    {"name": "fake_cells:Raises", "label": "raises"},
                ],
                "model": {"d_model": 16, "num_layers": 1, "num_heads": 2, "ffn_dim": 32},
                "training": {"epochs": 2, "batch_size": 32},
            }
        )
    )
    return path


def test_ray_and_local_store_identical_results(tmp_path, local_ray):
    suite = load_suite(str(suite_file(tmp_path, ["fake_cells:tiny_train"])))
    threads = torch.get_num_threads()
    local = run_suite(suite, tmp_path / "local", RunOptions(show_progress=False, threads=1))  # as each Ray task
    assert torch.get_num_threads() == threads  # restored after the run
    remote = run_suite(suite, tmp_path / "ray", RunOptions(executor="ray", show_progress=False))
    assert local.counts == remote.counts == {"ok": 4, "failed": 2}
    assert local.exit_code == remote.exit_code == 1
    by_id = {r["cell_id"]: r for r in RunStore(tmp_path / "local").records()}
    from_ray = list(RunStore(tmp_path / "ray").records())
    assert sorted(by_id) == sorted(r["cell_id"] for r in from_ray)
    for record in from_ray:
        mine = by_id[record["cell_id"]]
        assert (record["status"], record["reason"], record["metrics"]) == (
            mine["status"],
            mine["reason"],
            mine["metrics"],
        )
        assert record["provenance"]["threads"] == 1
    again = run_suite(suite, tmp_path / "ray", RunOptions(executor="ray", show_progress=False, retry_failed=False))
    assert again.ran == 0


def test_ray_cell_time_limit(tmp_path, local_ray):
    measurements = [{"name": "fake_cells:sleeper", "options": {"sleep": 60.0}}]
    suite = load_suite(str(suite_file(tmp_path, measurements)))
    summary = run_suite(
        suite,
        tmp_path / "ray",
        RunOptions(executor="ray", cell_timeout=2, filters=("*/softmax/s0/*",), show_progress=False),
    )
    (record,) = RunStore(tmp_path / "ray").records()
    assert summary.exit_code == 1 and record["reason"].startswith("time-out: the cell ran past its time limit")
