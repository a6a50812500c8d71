"""The results store: content-addressed cell ids, atomic writes, run folders that resume."""
from __future__ import annotations

import hashlib
import json
import os

import pytest

from harness.errors import UserError
from harness.store import RunStore, cell_id, default_run_dir, result_record, write_json_atomic

CELL = {"suite": "smoke", "task": {"name": "listops", "options": {"num_train": 64}},
        "attention": {"name": "performer", "label": "performer-64", "options": {"num_features": 64}},
        "seed": 0, "model": {"d_model": 32}, "training": {"epochs": 1},
        "measurement": {"name": "accuracy", "options": {}}}


def test_cell_id_is_sha256_prefix_of_canonical_json():
    canonical = '{"attention":{"label":"performer-64","name":"performer","options":{"num_features":64}},' \
                '"measurement":{"name":"accuracy","options":{}},"model":{"d_model":32},"seed":0,' \
                '"suite":"smoke","task":{"name":"listops","options":{"num_train":64}},"training":{"epochs":1}}'
    assert cell_id(CELL) == hashlib.sha256(canonical.encode()).hexdigest()[:16]
    reordered = dict(reversed(list(CELL.items())))
    assert cell_id(reordered) == cell_id(CELL)
    changed = json.loads(json.dumps(CELL))
    changed["attention"]["options"]["num_features"] = 128
    assert cell_id(changed) != cell_id(CELL)
    assert cell_id({**CELL, "seed": 1}) != cell_id(CELL)


def test_atomic_write_never_leaves_a_partial_file(tmp_path, monkeypatch):
    path = tmp_path / "cell.json"
    write_json_atomic(path, {"status": "ok", "value": 1})
    assert json.loads(path.read_text()) == {"status": "ok", "value": 1}

    def crash(src, dst):
        raise OSError("disk vanished")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        write_json_atomic(path, {"status": "ok", "value": 2})
    assert json.loads(path.read_text()) == {"status": "ok", "value": 1}  # the old file is intact
    monkeypatch.undo()
    RunStore(tmp_path / "run").open({"name": "s"}, [], {})
    (tmp_path / "run" / "cells" / ".abc.json.123.tmp").write_text("{partial")
    RunStore(tmp_path / "run").open({"name": "s"}, [], {})
    assert list((tmp_path / "run" / "cells").iterdir()) == []  # a killed writer's temporary file is removed


def test_run_folder_records_and_resumes(tmp_path):
    store = RunStore(tmp_path / "run")
    store.open({"name": "smoke"}, [cell_id(CELL)], {"git_commit": "abc"})
    created = store.run_info()["created"]
    record = result_record(CELL, status="ok", metrics={"accuracy": 0.5}, details={"x": [1]}, provenance={"seed": 0})
    store.write_cell(record)
    assert store.status(cell_id(CELL)) == "ok" and store.read_cell(cell_id(CELL)) == record
    assert record["label"] == "performer-64" and record["cell_id"] == cell_id(CELL)
    assert list(store.records()) == [record]
    assert store.status("0" * 16) is None
    store.open({"name": "smoke"}, [cell_id(CELL)], {})
    info = store.run_info()
    assert info["created"] == created and info["cell_ids"] == [cell_id(CELL)] and info["suite"] == "smoke"
    with pytest.raises(UserError, match="holds a run of suite 'smoke'"):
        store.open({"name": "other"}, [], {})
    with pytest.raises(UserError, match="not a run folder"):
        RunStore(tmp_path / "nothing").run_info()


def test_fresh_run_folders_never_reuse_an_existing_one(tmp_path):
    assert default_run_dir("smoke", fresh=False, root=tmp_path) == tmp_path / "smoke"
    first = default_run_dir("smoke", fresh=True, root=tmp_path)
    first.mkdir()
    second = default_run_dir("smoke", fresh=True, root=tmp_path)
    assert first.name.startswith("smoke-") and second != first and not second.exists()
