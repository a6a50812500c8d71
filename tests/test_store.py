"""The results store: one file per cell named by its id, atomic writes, run folders that resume."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from attnbench.cell_spec import CellSpec
from attnbench.errors import UserError
from attnbench.store import RunStore, default_run_dir, result_record, write_json_atomic

CELL = CellSpec.from_json(
    {
        "suite": "smoke",
        "task": {"name": "listops", "options": {"num_train": 64}},
        "attention": {"name": "performer", "label": "performer-64", "options": {"num_features": 64}},
        "seed": 0,
        "model": {"d_model": 32},
        "training": {"epochs": 1},
        "measurement": {"name": "accuracy", "options": {}},
    }
)


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
    store.open({"name": "smoke"}, [CELL.id], {"git_commit": "abc"})
    created = store.run_info()["created"]
    record = result_record(CELL, status="ok", metrics={"accuracy": 0.5}, details={"x": [1]}, provenance={"seed": 0})
    store.write_cell(record)
    assert store.status(CELL.id) == "ok" and store.read_cell(CELL.id) == record
    assert record["label"] == "performer-64" and record["cell_id"] == CELL.id
    assert list(store.records()) == [record]
    assert store.status("0" * 16) is None
    store.open({"name": "smoke"}, [CELL.id], {})
    info = store.run_info()
    assert info["created"] == created and info["cell_ids"] == [CELL.id] and info["suite"] == "smoke"
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


def test_unreadable_cell_files_are_set_aside_never_deleted(tmp_path):
    store = RunStore(tmp_path / "run")
    store.open({"name": "smoke"}, [], {})
    good = result_record(CELL, status="ok", metrics={"accuracy": 0.5})
    store.write_cell(good)
    text = store.cell_path(good["cell_id"]).read_text()
    other = dataclasses.replace(CELL, seed=1)
    store.cell_path(other.id).write_text(text[: len(text) // 2])  # truncated
    store.cell_path("0" * 16).write_text("")  # empty
    store.cell_path("1" * 16).write_text(text)  # a result, but not of the cell its name says
    assert store.read_cell(other.id) is None and [r["cell_id"] for r in store.records()] == [good["cell_id"]]
    notes = store.open({"name": "smoke"}, [], {})
    assert len(notes) == 3 and all("was unreadable" in n and "set aside as" in n for n in notes)
    assert "an empty file" in " ".join(notes) and "not valid JSON" in " ".join(notes)
    assert [p.name for p in store.cells_dir.iterdir()] == [f"{good['cell_id']}.json"]
    kept = sorted(p.name.split(".")[0] for p in (tmp_path / "run" / "unreadable").iterdir())
    assert kept == sorted(["0" * 16, "1" * 16, other.id])
    assert sorted(len(p.read_text()) for p in (tmp_path / "run" / "unreadable").iterdir()) == sorted(
        [0, len(text), len(text) // 2]
    )  # moved as they were


def test_a_truncated_run_json_gives_one_clear_error_and_is_rewritten_by_the_next_run(tmp_path):
    store = RunStore(tmp_path / "run")
    store.open({"name": "smoke"}, ["a"], {})
    path = tmp_path / "run" / "run.json"
    path.write_text(path.read_text()[:30])
    with pytest.raises(UserError, match=r"run\.json is unreadable \(not valid JSON: .*\); rerun `attnbench run"):
        store.run_info()
    (note,) = store.open({"name": "smoke"}, ["a"], {})
    assert "run.json was unreadable" in note and store.run_info()["cell_ids"] == ["a"]


def test_one_writer_per_run_folder_and_a_dead_holder_is_taken_over(tmp_path):
    store = RunStore(tmp_path / "run")
    with store.claim("attnbench run first") as previous:
        assert previous is None
        holder = json.loads(store.lock_path.read_text())
        assert holder["pid"] == os.getpid() and holder["command"] == "attnbench run first"
        with pytest.raises(
            UserError,
            match=rf"is being written by another attnbench run \(pid {os.getpid()} on "
            rf".*attnbench run first\); wait for it to end, or give another --out",
        ):
            with RunStore(tmp_path / "run").claim("attnbench run second"):
                pass
    assert store.lock_path.read_text() == ""  # released
    dead = {"pid": 2**22 + 12345, "host": "elsewhere", "started": "2026-01-01T00:00:00+00:00", "command": "x"}
    store.lock_path.write_text(json.dumps(dead))  # a holder that was killed: the file names it, nobody locks it
    with store.claim("attnbench run third") as previous:
        assert previous == dead


def test_an_output_path_through_a_file_or_an_unwritable_folder_is_refused_before_writing(tmp_path):
    (tmp_path / "afile").write_text("x")
    for out in (tmp_path / "afile", tmp_path / "afile" / "run"):
        with pytest.raises(UserError, match=r"afile is a file, not a folder; give --out a folder path"):
            RunStore(out).check_writable()
    locked = tmp_path / "locked"
    locked.mkdir()
    if not read_only(locked):
        pytest.skip("cannot make a read-only folder here (root without chattr)")
    try:
        with pytest.raises(UserError, match=r"cannot write the run folder .*locked/run: .*locked is not writable"):
            RunStore(locked / "run").check_writable()
    finally:
        writable(locked)
    assert list(locked.iterdir()) == []


def read_only(folder) -> bool:
    """Make `folder` read-only even for root (chattr +i), else with chmod; whether it worked."""
    import shutil
    import subprocess

    if os.geteuid() == 0:
        return bool(shutil.which("chattr")) and subprocess.run(["chattr", "+i", str(folder)]).returncode == 0
    folder.chmod(0o555)
    return True


def writable(folder) -> None:
    import subprocess

    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(folder)])
    folder.chmod(0o755)


MALFORMED = {
    "metrics a list": (lambda r: r.__setitem__("metrics", [1, 2]), "metrics is list, not a mapping"),
    "a metric a string": (lambda r: r["metrics"].__setitem__("accuracy", "high"), "metrics.accuracy is str"),
    "cell.task a string": (lambda r: r["cell"].__setitem__("task", "listops"), "a cell's task must be a mapping"),
    "seed a string": (lambda r: r["cell"].__setitem__("seed", "0"), "a cell's seed is str '0', not an integer"),
    "details a string": (lambda r: r.__setitem__("details", "x"), "details is str, not a mapping"),
    "provenance a list": (lambda r: r.__setitem__("provenance", [1]), "provenance is list, not a mapping"),
    "a cell of another id": (lambda r: r["cell"].__setitem__("seed", 7), "its cell hashes to"),
}


@pytest.mark.parametrize("change, words", MALFORMED.values(), ids=list(MALFORMED))
def test_a_malformed_cell_is_unreadable_to_run_and_report_alike(tmp_path, change, words):
    """A wrong-typed part of a result file: `run` sets it aside and runs its cell again (it was kept as finished);
    `load_results` and `report` read it as an 'unreadable' row with the reason (they crashed on 5 of 6)."""
    from attnbench.report.load import load_results

    store = RunStore(tmp_path / "run")
    store.open({"name": "smoke"}, [CELL.id], {})
    record = result_record(CELL, status="ok", metrics={"accuracy": 0.5}, details={"x": 1})
    change(record)
    store.cell_path(CELL.id).write_text(json.dumps(record))
    assert store.read_cell(CELL.id) is None and store.status(CELL.id) is None  # not finished: it runs again
    rows = load_results(tmp_path / "run")
    assert list(rows["status"]) == ["unreadable"] and words in rows["reason"][0], rows["reason"][0]
    notes = store.open({"name": "smoke"}, [CELL.id], {})
    assert len(notes) == 1 and words in notes[0] and not store.cell_path(CELL.id).exists()
