"""`attnbench run --reuse OTHER`: a cell finished in another run folder under another suite's name is adopted,
not recomputed, only where spec, device and threads agree; its record says where it came from."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from attnbench.cli import main
from attnbench.executor import RunOptions, run_suite
from attnbench.store import RunStore
from attnbench.suite import load_suite

sys.path.insert(0, str(Path(__file__).parent))  # fake_cells plugins

MODEL = {"d_model": 16, "num_layers": 1, "num_heads": 2, "ffn_dim": 32, "dropout": 0.0}


def suite(tmp_path: Path, name: str, attentions: list, epochs: int = 2):
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": name,
                "description": "test suite",
                "attentions": attentions,
                "seeds": [0, 1],
                "model": MODEL,
                "training": {"epochs": epochs, "batch_size": 16},
                "measurements": ["fake_cells:tiny_train"],
            }
        )
    )
    return load_suite(str(path))


def by_label(run_dir: Path) -> dict[str, dict]:
    return {f"{r['label']}/s{r['cell']['seed']}": r for r in RunStore(run_dir).records()}


OPTIONS = {"show_progress": False, "workers": 1, "threads": 1}


def test_twins_are_adopted_with_their_source_and_the_rest_run(tmp_path):
    run_suite(suite(tmp_path, "first", ["softmax"]), tmp_path / "a", RunOptions(**OPTIONS))
    second = suite(tmp_path, "second", ["softmax", "elu-linear"])
    summary = run_suite(second, tmp_path / "b", RunOptions(**OPTIONS, reuse=(tmp_path / "a",)))
    assert summary.ran == 2  # elu-linear at both seeds; softmax's two cells adopted
    assert any("adopted 2" in note for note in summary.notes)
    a, b = by_label(tmp_path / "a"), by_label(tmp_path / "b")
    for key in ("softmax/s0", "softmax/s1"):
        assert b[key]["metrics"] == a[key]["metrics"] and b[key]["details"] == a[key]["details"]
        assert b[key]["cell"]["suite"] == "second" and b[key]["cell_id"] != a[key]["cell_id"]
        assert b[key]["provenance"]["reused_from"] == {
            "run": str(tmp_path / "a"),
            "suite": "first",
            "cell_id": a[key]["cell_id"],
        }
    # the adopted result is what running the cell here would have given, bit for bit
    run_suite(second, tmp_path / "c", RunOptions(**OPTIONS))
    assert by_label(tmp_path / "c")["softmax/s1"]["metrics"] == b["softmax/s1"]["metrics"]
    # adopted cells are finished: a rerun runs nothing
    assert run_suite(second, tmp_path / "b", RunOptions(**OPTIONS)).ran == 0


def test_another_spec_or_thread_count_is_not_adopted(tmp_path):
    run_suite(suite(tmp_path, "first", ["softmax"]), tmp_path / "a", RunOptions(**OPTIONS))
    longer = run_suite(
        suite(tmp_path, "second", ["softmax"], epochs=3), tmp_path / "b", RunOptions(**OPTIONS, reuse=(tmp_path / "a",))
    )
    assert longer.ran == 2 and not any("reused_from" in r["provenance"] for r in RunStore(tmp_path / "b").records())
    other_threads = RunOptions(show_progress=False, workers=1, threads=2, reuse=(tmp_path / "a",))
    summary = run_suite(suite(tmp_path, "third", ["softmax"]), tmp_path / "c", other_threads)
    assert summary.ran == 2 and any("another thread count than this sitting's 2" in note for note in summary.notes)


def test_a_folder_that_is_not_a_run_is_refused_before_anything_is_written(tmp_path, capsys):
    path = tmp_path / "first.yaml"
    suite(tmp_path, "first", ["softmax"])
    (tmp_path / "empty").mkdir()
    code = main(["run", str(path), "--out", str(tmp_path / "b"), "--reuse", str(tmp_path / "empty"), "--quiet"])
    assert code == 2 and "--reuse" in capsys.readouterr().err
    assert not (tmp_path / "b" / "cells").exists() or not any((tmp_path / "b" / "cells").iterdir())
    assert not (tmp_path / "b" / "run.json").exists()


def test_reuse_says_why_it_adopted_nothing_and_takes_another_cpus_twins_for_another_device(tmp_path):
    """No twin at all, twins of another CPU's instruction sets, a twin whose provenance is a list (an
    AttributeError that aborted the run): each a note naming the reason; the cells run here."""
    import json

    run_suite(suite(tmp_path, "first", ["softmax"]), tmp_path / "a", RunOptions(**OPTIONS))
    other = run_suite(
        suite(tmp_path, "second", ["elu-linear"]), tmp_path / "b", RunOptions(**OPTIONS, reuse=(tmp_path / "a",))
    )
    assert "--reuse adopted none of the 2 cells not finished here" in other.notes
    assert any("2 cells have no finished twin in the --reuse folders" in note for note in other.notes)

    store = RunStore(tmp_path / "a")
    records = sorted(store.records(), key=lambda r: r["cell"]["seed"])
    records[0]["provenance"]["cpu_isa"] = "sse sse2"  # seed 0 ran on an older CPU
    store.write_cell(records[0])
    records[1]["provenance"] = [records[1]["provenance"]]  # seed 1's file is malformed
    store.cell_path(records[1]["cell_id"]).write_text(json.dumps(records[1]))
    summary = run_suite(
        suite(tmp_path, "third", ["softmax"]), tmp_path / "c", RunOptions(**OPTIONS, reuse=(tmp_path / "a",))
    )
    assert summary.ran == 2 and summary.counts == {"ok": 2}
    assert any(
        "1 cells have twins that ran on another CPU, of other instruction sets" in note for note in summary.notes
    )
    assert any("1 cells have twins whose result files there are unreadable" in note for note in summary.notes)
