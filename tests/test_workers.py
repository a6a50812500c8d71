"""The split of the cores (attnbench.workers): the policy on synthetic facts, the --workers flag, the provenance."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
import yaml

from attnbench import timing, workers
from attnbench.cli import build_parser, main
from attnbench.provenance import usable_cores
from attnbench.suite import load_suite
from attnbench.workers import (
    CELL_FOOTPRINT_GIB,
    FEW_CELLS,
    SPAWN_SECONDS,
    TINY_SECONDS,
    TOKENS_PER_SECOND,
    MachineFacts,
    SuiteFacts,
    cell_tokens,
    choose_split,
    machine_facts,
    running_workers,
    suite_facts,
)

sys.path.insert(0, str(Path(__file__).parent))  # fake_cells plugins

BIG = SuiteFacts(cells=100)  # no timing measurement, work unknown
MACHINE = MachineFacts(cores=2, memory_gib=24.0, torch_threads=2)


def machine(**changes) -> MachineFacts:
    return MachineFacts(**{**MACHINE.__dict__, **changes})


def test_a_suite_that_times_calls_runs_one_cell_at_a_time_with_all_cores():
    split = choose_split(SuiteFacts(cells=100, timed=("efficiency",)), machine(cores=16, torch_threads=16))
    assert (split.workers, split.threads) == (1, 16)
    assert split.chosen_by.startswith("auto: efficiency times calls or measures memory")


def test_cells_on_a_gpu_run_one_at_a_time():
    split = choose_split(BIG, machine(cores=16), device="cuda")
    assert split.workers == 1 and split.chosen_by.startswith("auto: cells run on cuda")


def test_small_suites_stay_in_this_process():
    few = choose_split(SuiteFacts(cells=FEW_CELLS - 1), MACHINE)
    assert (few.workers, few.threads) == (1, 2) and f"fewer than {FEW_CELLS}" in few.chosen_by
    little_work = SuiteFacts(cells=40, tokens=0.5 * TINY_SECONDS * TOKENS_PER_SECOND)
    tiny = choose_split(little_work, MACHINE)
    assert (tiny.workers, tiny.threads) == (1, 2) and "of training in all" in tiny.chosen_by
    much_work = SuiteFacts(cells=40, tokens=2 * TINY_SECONDS * TOKENS_PER_SECOND)
    assert choose_split(much_work, MACHINE).workers == 2


def test_a_big_suite_gets_one_single_threaded_process_per_core():
    split = choose_split(BIG, MACHINE)
    assert (split.workers, split.threads) == (2, 1)
    assert split.line(2) == "workers auto: 2 processes x 1 thread (100 cells, no timing measurements)"
    assert choose_split(BIG, machine(cores=8, memory_gib=64.0)).workers == 8
    fewer_cells = choose_split(SuiteFacts(cells=FEW_CELLS + 1), machine(cores=16, memory_gib=256.0))
    assert (fewer_cells.workers, fewer_cells.threads) == (FEW_CELLS + 1, 1)  # 16 // 9
    assert choose_split(BIG, machine(cores=1, torch_threads=1)).workers == 1


def test_memory_bounds_the_workers_and_the_threads_fill_the_cores():
    split = choose_split(BIG, machine(cores=8, memory_gib=3.5 * CELL_FOOTPRINT_GIB))
    assert (split.workers, split.threads) == (3, 2)  # 8 cores // 3 workers
    assert "memory for 3 cells" in split.chosen_by
    one = choose_split(BIG, machine(cores=8, memory_gib=1.5 * CELL_FOOTPRINT_GIB, torch_threads=8))
    assert (one.workers, one.threads) == (1, 8) and "holds one cell" in one.chosen_by


def test_threads_do_not_depend_on_the_cells_left_nor_on_the_memory_free_now():
    """A resumed run computes its remaining cells with the threads of its first sitting: bit-identical results."""
    split = choose_split(BIG, machine(cores=8, memory_gib=64.0))
    assert [running_workers(split, pending, 64.0) for pending in (100, 8, 3, 1)] == [8, 8, 3, 1]
    assert running_workers(split, 100, 2.5 * CELL_FOOTPRINT_GIB) == 2  # little memory free now: fewer processes
    assert "3 started (the threads stay 1)" in split.line(3)


def test_explicit_flags_override_the_policy():
    timed = SuiteFacts(cells=100, timed=("efficiency",))
    assert (choose_split(timed, MACHINE, workers=2).workers, choose_split(timed, MACHINE, workers=2).threads) == (2, 1)
    three = choose_split(BIG, machine(cores=8), workers=3)
    assert (three.workers, three.threads, three.chosen_by) == (3, 2, "--workers 3")
    one = choose_split(BIG, MACHINE, workers=1)
    assert (one.workers, one.threads) == (1, 2) and one.line(1) == "workers 1: 1 cell at a time with 2 threads"
    assert choose_split(BIG, MACHINE, workers=2, threads=2).threads == 2
    wide = choose_split(BIG, machine(cores=8, memory_gib=64.0), threads=4)  # auto workers around --threads
    assert (wide.workers, wide.threads) == (2, 4)
    assert choose_split(timed, MACHINE, threads=1).threads == 1


def test_suite_facts_read_the_declared_timing_measurements_and_the_training_work():
    smoke = load_suite("smoke")
    facts = suite_facts(smoke)
    assert facts.cells == len(smoke.cells()) and facts.timed == ("kernel", "efficiency")
    assert facts.tokens is None  # the kernel and efficiency cells declare no training work
    accuracy = next(c for c in smoke.cells() if c.measurement.name == "accuracy")
    assert cell_tokens(smoke, accuracy) == 2 * 192 * 32  # epochs x num_train x max_length


def test_workers_flag_takes_auto_or_a_positive_count(capsys):
    parser = build_parser()
    assert parser.parse_args(["run", "smoke"]).workers == "auto"
    assert parser.parse_args(["run", "smoke", "--workers", "auto"]).workers == "auto"
    assert parser.parse_args(["run", "smoke", "--workers", "3"]).workers == 3
    for bad in ("0", "lots", "-2", "1.5"):
        with pytest.raises(SystemExit) as info:
            parser.parse_args(["run", "smoke", "--workers", bad])
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert f"argument --workers: {bad!r} is neither auto nor a positive number of processes" in err
        assert "give --workers auto (the default) or e.g. --workers 2" in err


def test_auto_gives_no_process_more_threads_than_the_cores_other_work_leaves():
    """Beside a 2-thread job on 2 cores, auto ran small suites on 2 threads (smoke 3.7x slower than on one)."""
    busy = machine(others_cores=1.9)
    few = choose_split(SuiteFacts(cells=FEW_CELLS - 1), busy)
    assert (few.workers, few.threads) == (1, 1)
    assert few.chosen_by.endswith("; 1 thread as other processes kept 1.9 of 2 cores busy")
    timed = choose_split(SuiteFacts(cells=100, timed=("efficiency",)), busy)
    assert (timed.workers, timed.threads) == (1, 1)
    assert choose_split(BIG, busy).threads == 1  # single-threaded workers lose no time at a barrier
    assert choose_split(SuiteFacts(cells=3), machine(others_cores=None)).threads == 1  # when in doubt, one
    assert choose_split(SuiteFacts(cells=3), machine(others_cores=0.2)).threads == 2  # a trickle takes no core
    many = machine(cores=16, torch_threads=16, memory_gib=256.0, others_cores=3.0)
    assert choose_split(SuiteFacts(cells=3), many).threads == 13
    assert choose_split(SuiteFacts(cells=3), busy, threads=2).threads == 2  # --threads is the user's
    assert choose_split(SuiteFacts(cells=3), busy, workers=1).threads == 2  # so is --workers


@pytest.mark.skipif(usable_cores() < 2, reason="needs 2 cores to see one taken")
def test_the_load_is_read_from_the_machines_counters(children):
    spin = "import time\nend = time.time() + 60\nwhile time.time() < end: pass"
    for _ in range(2):
        children.start([sys.executable, "-c", spin])
    facts = machine_facts(1.0)
    assert facts.others_cores is not None and facts.others_cores >= 1.0
    assert facts.free_cores <= facts.cores - 1


def test_a_lull_in_the_window_does_not_hide_the_last_minutes_load(monkeypatch):
    monkeypatch.setattr(timing, "others_cores", lambda before, after: 0.0)
    monkeypatch.setattr(workers.os, "getloadavg", lambda: (1.4, 1.0, 1.0))
    assert machine_facts(0.01).others_cores == pytest.approx(1.4)
    monkeypatch.setattr(workers.os, "getloadavg", lambda: (40.0, 1.0, 1.0))
    assert machine_facts(0.01).others_cores == usable_cores() and machine_facts(0.01).free_cores == 1


def test_a_run_records_and_prints_the_split_it_chose(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(timing, "others_cores", lambda before, after: 0.0)  # a quiet machine
    monkeypatch.setattr(workers.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    suite = {
        "name": "tiny",
        "description": "split test",
        "attentions": ["softmax"],
        "seeds": [0, 1],
        "model": {"d_model": 16, "num_layers": 1, "num_heads": 2, "ffn_dim": 32},
        "training": {"epochs": 1, "batch_size": 32},
        "measurements": ["fake_cells:tiny_train"],
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(suite))
    assert main(["run", str(path), "--out", str(tmp_path / "run")]) == 0
    threads = torch.get_num_threads()
    chosen_by = f"auto: 2 cells, fewer than {FEW_CELLS}: a worker takes ~{SPAWN_SECONDS:g} s to start"
    expected = {"workers": 1, "threads": threads, "chosen_by": chosen_by}
    assert capsys.readouterr().err.startswith(f"workers auto: 1 cell at a time with {threads} thread")
    assert main(["run", str(path), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    assert capsys.readouterr().err == ""  # --quiet: only the summary
    assert json.loads((tmp_path / "run" / "run.json").read_text())["provenance"]["split"] == expected
    for cell in (tmp_path / "run" / "cells").glob("*.json"):
        provenance = json.loads(cell.read_text())["provenance"]
        assert provenance["split"] == {**expected, "running": 1} and provenance["threads"] == threads
