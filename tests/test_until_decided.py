"""`attnbench run --until-decided` end to end on a tiny synthetic suite (a measurement that draws each label's
accuracy around a known mean): seeds are added paired, within the budget, only where they can decide; the run
resumes without rerunning anything; the report lists the pairs of interest and why the loop stopped."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import yaml

from attnbench.cli import main
from attnbench.decisions.budget import WORTH
from attnbench.report.load import load_runs
from attnbench.store import RunStore
from attnbench.suite import load_suite
from attnbench.until_decided import UntilDecided, next_seeds, with_extra_seeds

sys.path.insert(0, str(Path(__file__).parent))  # fake_cells plugins

MEANS = {"a": 0.80, "b": 0.795, "c": 0.50, "d": 0.60}  # a vs c, d: far apart; a vs b: within the 0.01 margin


def suite_file(tmp_path: Path) -> Path:
    path = tmp_path / "loop.yaml"
    attentions = [{"name": "softmax", "label": label} for label in MEANS]
    suite = {
        "name": "loop",
        "description": "labels drawn around known means",
        "attentions": attentions,
        "seeds": [0, 1],
        "measurements": [{"name": "fake_cells:scored", "options": {"means": MEANS, "noise": 0.004}}],
    }
    path.write_text(yaml.safe_dump(suite))
    return path


def seeds_of(run: Path) -> dict[str, set[int]]:
    found: dict[str, set[int]] = {}
    for record in RunStore(run).records():
        found.setdefault(record["label"], set()).add(record["cell"]["seed"])
    return found


def test_until_decided_adds_paired_seeds_within_the_budget_and_resumes(tmp_path: Path, capsys) -> None:
    suite, run = suite_file(tmp_path), tmp_path / "run"
    args = ["run", str(suite), "--out", str(run), "--until-decided", "--max-seeds", "6", "--reference", "a",
            "--workers", "1", "--quiet"]  # fmt: skip
    assert main(args) == 0
    seeds = seeds_of(run)
    assert all(max(s) < 6 and {0, 1} <= s for s in seeds.values())  # the written seeds, then at most 6 in all
    assert len(seeds["a"]) > 2  # the reference had undecided pairs worth seeds
    for label in ("b", "c", "d"):  # every added seed of a label is also the reference's: kept paired
        assert seeds[label] <= seeds["a"]
    stored = json.loads((run / "run.json").read_text())
    assert stored["resolved_suite"]["until_decided"] == {"max_seeds": 6, "pairs": "reference", "reference": "a"}
    assert len(stored["cell_ids"]) == sum(len(s) for s in seeds.values())  # the plan is exactly what ran
    report = run / "report" / "tables" / "undecided.csv"
    assert main(["report", str(run)]) == 0 and report.is_file()
    table = pd.read_csv(report)
    assert set(zip(table["label_a"], table["label_b"])) == {("b", "a"), ("c", "a"), ("d", "a")}
    assert WORTH not in set(table["budget"])  # the loop stopped only when no pair could use more seeds
    far = table.set_index("label_a")
    assert far.at["c", "verdict"] == "behind" and far.at["d", "verdict"] == "behind"
    printed = capsys.readouterr().err
    assert "pairs of interest decided" in printed
    before = {p.name for p in (run / "cells").glob("*.json")}
    assert main(args) == 0  # resumed: the stored extra seeds are read back; nothing new runs
    assert {p.name for p in (run / "cells").glob("*.json")} == before
    assert json.loads((run / "run.json").read_text())["cell_ids"] == stored["cell_ids"]
    assert len(load_runs([run]).ok) == len(before)  # every stored cell is in the plan: none reported stale


def test_with_extra_seeds_plans_exactly_the_added_cells(tmp_path: Path) -> None:
    suite = load_suite(str(suite_file(tmp_path)))
    derived = with_extra_seeds(suite, {("none", "a"): {2, 3}, ("none", "c"): {2}}, UntilDecided(max_seeds=4))
    names = {c.name.split("/fake")[0] for c in derived.cells()}
    added = {n for n in names if not n.endswith(("/s0", "/s1"))}
    assert added == {"none/a/s2", "none/a/s3", "none/c/s2"}
    assert derived.comparison_keys["until_decided"]["max_seeds"] == 4


def test_next_seeds_extend_both_labels_of_each_pair_worth_it() -> None:
    rows = pd.DataFrame(
        [
            {"task": "t", "label_a": "b", "label_b": "a", "budget": WORTH},
            {"task": "t", "label_a": "c", "label_b": "a", "budget": "decided"},
            {"task": "u", "label_a": "d", "label_b": "a", "budget": "beyond the budget"},
            {"task": "u", "label_a": "e", "label_b": "a", "budget": WORTH},
        ]
    ).assign(measurement="m")

    class Seeds:
        seeds = [0, 1, 2]

    assert next_seeds(rows, Seeds(), {("t", "a"): {3}}) == {
        ("t", "a"): 4,
        ("t", "b"): 4,
        ("u", "a"): 3,
        ("u", "e"): 3,
    }
    # --filter 't/*': task u's next cells would not run, so its pair gets no seed (else chosen every round)
    assert next_seeds(rows, Seeds(), {("t", "a"): {3}}, ("t/*",)) == {("t", "a"): 4, ("t", "b"): 4}
    assert next_seeds(rows, Seeds(), {}, ("*/a/*",)) == {}  # each pair needs both its labels' cells


def test_until_decided_with_a_filter_adds_no_seed_the_filter_leaves_unpaired(tmp_path: Path, capsys) -> None:
    # the written seeds run for every label; added seeds only for b, c, d: a's cannot, so a pair with a
    # (the reference) gets no seed at all, rather than b's s2 running without a's
    suite, run = suite_file(tmp_path), tmp_path / "run"
    args = ["run", str(suite), "--out", str(run), "--until-decided", "--max-seeds", "6", "--reference", "a",
            "--filter", "none/*/s[01]/*", "--filter", "none/[bcd]/*", "--workers", "1"]  # fmt: skip
    assert main(args) == 0
    assert seeds_of(run) == {label: {0, 1} for label in MEANS}
    last = [line for line in capsys.readouterr().err.splitlines() if line.startswith("until-decided round")][-1]
    assert "adding seed" not in last and "--filter leaves out their next cells" in last  # why no seed was added


def test_until_decided_flags_are_refused_without_it(tmp_path: Path, capsys) -> None:
    assert main(["run", str(suite_file(tmp_path)), "--out", str(tmp_path / "r"), "--max-seeds", "4"]) == 2
    assert "add --until-decided" in capsys.readouterr().err and not (tmp_path / "r").exists()
    args = ["run", str(suite_file(tmp_path)), "--until-decided", "--reference", "zz", "--out", str(tmp_path / "r")]
    assert main(args) == 2 and "is not a label of suite" in capsys.readouterr().err
