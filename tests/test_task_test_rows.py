"""Every task's declared test-row design (TaskConfig.test_rows) is what it does: a "fresh" task scores two seeds on
different test rows, a "shared" one on the same rows. Built from the task registry, so a new task is checked too."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from attnbench.errors import UserError
from attnbench.tasks import TASKS, load_task, task_names

SMALL = {"num_train": 64, "num_validation": 16, "num_test": 32}  # sizes a task may take, to load it quickly


def _test_rows(name: str, seed: int) -> torch.Tensor:
    fields = {f.name for f in dataclasses.fields(TASKS.get(name).config)}
    return load_task(name, seed=seed, **{k: v for k, v in SMALL.items() if k in fields})["test"].input_ids


@pytest.mark.parametrize("name", task_names())
def test_the_declared_design_is_what_the_task_does(name: str) -> None:
    try:
        first, second = _test_rows(name, 0), _test_rows(name, 1)
    except UserError as err:  # data this machine lacks (a hub data set, a file the suite names)
        pytest.skip(f"{name} does not load here: {err}")
    same = first.shape == second.shape and bool((first == second).all())
    assert TASKS.get(name).config.test_rows == ("shared" if same else "fresh")
