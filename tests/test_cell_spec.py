"""The typed cell: its id is the sha256 prefix of its canonical JSON, and JSON -> spec -> JSON is exact."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from attnbench.cell_spec import AttentionSpec, CellSpec, SweepSpec, TaskSpec

CELL = {
    "suite": "smoke",
    "task": {"name": "listops", "options": {"num_train": 64}},
    "attention": {"name": "performer", "label": "performer-64", "options": {"num_features": 64}},
    "seed": 0,
    "model": {"d_model": 32},
    "training": {"epochs": 1},
    "measurement": {"name": "accuracy", "options": {}},
}
SMOKE = Path(__file__).resolve().parents[1] / "results" / "smoke" / "cells"


def test_id_is_sha256_prefix_of_canonical_json():
    canonical = (
        '{"attention":{"label":"performer-64","name":"performer","options":{"num_features":64}},'
        '"measurement":{"name":"accuracy","options":{}},"model":{"d_model":32},"seed":0,'
        '"suite":"smoke","task":{"name":"listops","options":{"num_train":64}},"training":{"epochs":1}}'
    )
    cell = CellSpec.from_json(CELL)
    assert cell.id == hashlib.sha256(canonical.encode()).hexdigest()[:16]
    assert CellSpec.from_json(dict(reversed(list(CELL.items())))).id == cell.id
    wider = dataclasses.replace(cell, attention=AttentionSpec("performer", "performer-64", {"num_features": 128}))
    assert wider.id != cell.id and dataclasses.replace(cell, seed=1).id != cell.id


def test_json_round_trip_is_exact_with_labels_inputs_and_sweeps():
    full = {
        **CELL,
        "task": {"name": "listops", "label": "listops-short", "options": {"max_length": [1, 2]}},
        "inputs": {"train": "sha256:ab"},
        "sweep": {"trial": 2, "values": {"lr": 0.001}, "metric": "accuracy"},
    }
    for data in (CELL, full):
        cell = CellSpec.from_json(data)
        assert cell.to_json() == data and CellSpec.from_json(cell.to_json()) == cell
    cell = CellSpec.from_json(full)
    assert cell.task.label == "listops-short" and cell.sweep == SweepSpec(2, {"lr": 0.001}, "accuracy")
    assert cell.name == "listops-short/performer-64/s0/accuracy/t2"
    assert CellSpec.from_json(CELL).name == "listops/performer-64/s0/accuracy"  # an unlabelled task: its name


def test_to_json_is_a_copy():
    cell = CellSpec.from_json(CELL)
    data = cell.to_json()
    data["attention"]["options"]["num_features"] = 1
    data["model"]["d_model"] = 1
    assert cell.to_json() == CELL


def test_an_empty_task_label_is_kept_but_names_the_task():
    cell = dataclasses.replace(CellSpec.from_json(CELL), task=TaskSpec("listops", {}, ""))
    assert cell.to_json()["task"] == {"name": "listops", "options": {}, "label": ""}
    assert cell.task.label == "listops"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"seed": None} | {"extra": 1}, "unknown keys extra"),
        ({"task": {"name": "listops"}}, "a cell's task .* lacks options"),
        ({"attention": "softmax"}, "a cell's attention must be a mapping"),
        ({"sweep": {"trial": 0, "values": {}}}, "a cell's sweep .* lacks metric"),
    ],
)
def test_from_json_names_what_is_wrong(change, message):
    with pytest.raises(ValueError, match=message):
        CellSpec.from_json({**CELL, **change})


@pytest.mark.skipif(not SMOKE.is_dir(), reason="no committed smoke run")
def test_committed_results_read_back_with_their_ids():
    for path in sorted(SMOKE.glob("*.json")):
        record = json.loads(path.read_text())
        cell = CellSpec.from_json(record["cell"])
        assert cell.to_json() == record["cell"] and cell.id == record["cell_id"] == path.stem
