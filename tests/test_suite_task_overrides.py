"""Per-task `model` and `training` in a suite (LRA sizes model and schedule per task)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from attnbench.errors import UserError
from attnbench.suite import load_suite

SUITE = {
    "name": "per-task",
    "description": "per-task overrides",
    "attentions": ["softmax", {"name": "performer", "options": {"num_features": 8}, "model": {"num_layers": 3}}],
    "tasks": [
        {
            "name": "listops",
            "options": {"num_train": 8},
            "model": {"d_model": 32, "num_layers": 1},
            "training": {"epochs": 4, "lr": 1.0e-3},
        },
        {"name": "pathfinder", "options": {"num_train": 8}},
    ],
    "seeds": [0],
    "model": {"d_model": 16, "num_heads": 2},
    "training": {"epochs": 1, "batch_size": 8},
    "measurements": ["accuracy"],
}


def _load(tmp_path: Path, suite: dict) -> object:
    path = tmp_path / "per-task.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    return load_suite(str(path))


def test_task_overrides_merge_between_suite_and_attention(tmp_path: Path) -> None:
    cells = {(c.task.name, c.attention.label): c for c in _load(tmp_path, SUITE).cells()}
    listops = cells[("listops", "softmax")]
    assert listops.model == {"d_model": 32, "num_heads": 2, "num_layers": 1}
    assert listops.training == {"epochs": 4, "batch_size": 8, "lr": 1.0e-3}
    assert listops.task.to_json() == {"name": "listops", "options": {"num_train": 8}}  # no model/training in it
    assert cells[("listops", "performer")].model["num_layers"] == 3  # the attention's own override wins
    assert cells[("pathfinder", "softmax")].model == {"d_model": 16, "num_heads": 2}
    assert cells[("pathfinder", "softmax")].training == {"epochs": 1, "batch_size": 8}


def test_a_bad_task_override_names_its_key_path(tmp_path: Path) -> None:
    bad = {**SUITE, "tasks": [{"name": "listops", "training": {"epochz": 3}}]}
    with pytest.raises(UserError, match=r"tasks\[0\]\.training\.epochz.*did you mean 'epochs'"):
        _load(tmp_path, bad)
    odd = {**SUITE, "tasks": [{"name": "listops", "model": {"num_heads": 3}}]}  # 16 is not divisible by 3
    with pytest.raises(UserError, match=r"tasks\[0\]\.model"):
        _load(tmp_path, odd)
