"""`attnbench run` on bad input: one line on stderr, exit 2, and nothing written (issue 18, cases 4, 6, 7, 8)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from test_store import read_only, writable

from attnbench.cli import main

sys.path.insert(0, str(Path(__file__).parent))  # fake_cells plugins


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("data.csv").write_text("text,label\ngood film,pos\nbad film,neg\n")
    Path("other.csv").write_text("text,sentiment\ngood film,pos\nbad film,neg\n")


def suite(**changes) -> str:
    base = {
        "name": "tiny",
        "description": "bad input",
        "attentions": ["softmax"],
        "seeds": [0],
        "tasks": [{"name": "text", "options": {"files": {"train": "data.csv"}, "max_length": 16}}],
        "model": {"d_model": 16, "num_heads": 2},
        "training": {"epochs": 1},
        "measurements": ["accuracy"],
        **changes,
    }
    Path("tiny.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
    return "tiny.yaml"


def refused(capsys, args: list[str], expected: str) -> None:
    before = sorted(p.name for p in Path(".").iterdir())
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnbench: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert expected in err, err
    assert sorted(p.name for p in Path(".").iterdir()) == before  # nothing written


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({"seeds": [0, -1]}, "tiny.yaml: seeds[1]: is -1; a seed must be an integer in 0..4294967295"),
        (
            {"tasks": [{"name": "text", "options": {"files": {"train": "nope.csv"}}}]},
            "tasks[0].options: text task: file '",
        ),
        (
            {"tasks": [{"name": "text", "options": {"files": {"train": "other.csv"}}}]},
            "other.csv': column(s) ['label'] not in the data; its columns are ['text', 'sentiment']",
        ),
        (
            {"attentions": [{"name": "performer", "options": {"num_features": 1_000_000_000}}]},
            "attentions[0].options.num_features: 'num_features' is 1000000000, outside its bounds (at most 65536)",
        ),
    ],
)
def test_bad_suites_are_refused_before_the_run_folder_is_written(capsys, changes, expected):
    refused(capsys, ["run", suite(**changes), "--quiet"], expected)


def test_a_key_given_twice_is_refused(capsys):
    Path("dup.yaml").write_text(Path(suite()).read_text() + "seeds: [1]\n")
    refused(capsys, ["run", "dup.yaml", "--quiet"], "dup.yaml: seeds: key 'seeds' is given twice")


def test_output_paths_that_cannot_be_written(capsys):
    Path("afile").write_text("x")
    refused(capsys, ["run", suite(), "--out", "afile", "--quiet"], "afile is a file, not a folder")
    refused(capsys, ["run", suite(), "--out", "afile/run", "--quiet"], "afile is a file, not a folder")
    Path("locked").mkdir()
    if not read_only(Path("locked")):
        pytest.skip("cannot make a read-only folder here (root without chattr)")
    try:
        refused(capsys, ["run", suite(), "--out", "locked/run", "--quiet"], "locked is not writable")
        assert list(Path("locked").iterdir()) == []
    finally:
        writable(Path("locked"))


def test_report_of_a_truncated_run_json_or_into_a_read_only_folder_is_one_line(capsys):
    echo = suite(tasks=[{"name": "fake_cells:tiny_task"}], measurements=["fake_cells:echo"])
    assert main(["run", echo, "--out", "run", "--quiet"]) == 0
    run_json = Path("run/run.json")
    text = run_json.read_text()
    run_json.write_text(text[:40])
    refused(capsys, ["report", "run"], "run/run.json is unreadable (not valid JSON: ")
    run_json.write_text(text)
    if not read_only(Path("run")):
        pytest.skip("cannot make a read-only folder here (root without chattr)")
    try:
        refused(capsys, ["report", "run"], "cannot write the report run/report: ")
    finally:
        writable(Path("run"))
