"""Degenerate seeds in a report (issue 48 case 5): coincident differences, a NaN seed, one finite seed. The report's
tables read them through the inference engine: no winner from a zero-width interval, a NaN seed named and left out
(never pooled into a mean or a group), and no interval or rank claim from one finite seed."""

from __future__ import annotations

from pathlib import Path

from report_fixture import write_cell

from attnbench.report.load import load_runs
from attnbench.report.paired import paired_comparison_table
from attnbench.report.tables import task_table


def _run(run: Path, values: dict[str, list[float]]) -> Path:
    for label, seeds in values.items():
        for seed, value in enumerate(seeds):
            write_cell(run, label=label, seed=seed, metrics={"accuracy": value})
    return run


def _texts(table) -> tuple[dict[str, str], dict[str, bool]]:
    text = table.text.set_index("label")["accuracy"]
    best = table.best.set_index(table.text["label"])["accuracy"]
    return text.to_dict(), best.to_dict()


def test_two_seeds_with_identical_differences_make_no_sole_winner(tmp_path: Path) -> None:
    results = load_runs([_run(tmp_path, {"softmax": [0.90, 0.95], "elu": [0.85, 0.90]})])
    text, best = _texts(task_table(results, "sst2"))
    assert not any(best.values())  # neither is detectably better: no bold
    assert "1–2" in text["elu"]  # its rank's confidence set reaches the top
    paired = paired_comparison_table(results).text.iloc[0]
    shown = " ".join(str(v) for v in paired.to_numpy())
    assert "undecided" in shown and "[0.050, 0.050]" not in shown  # no zero-width interval, no verdict


def test_a_nan_seed_is_named_and_left_out_never_pooled(tmp_path: Path) -> None:
    values = {"a": [0.80, 0.82, float("nan")], "b": [0.60, 0.61, 0.62], "c": [0.40, 0.43, 0.41]}
    table = task_table(load_runs([_run(tmp_path, values)]), "sst2")
    text, best = _texts(table)
    assert text["a"].startswith("0.810") and "n=2" in text["a"]  # the mean of its two finite seeds
    assert any("a" in note and "seed 2" in note and "not a number" in note for note in table.notes)
    assert best["a"] and not best["c"]  # c is detectably worse than b: the NaN does not pull it into a group


def test_one_finite_seed_gives_no_interval_and_no_rank_claim(tmp_path: Path) -> None:
    values = {"a": [0.95, float("nan"), float("nan")], "b": [0.60, 0.61, 0.62], "c": [0.40, 0.43, 0.41]}
    table = task_table(load_runs([_run(tmp_path, values)]), "sst2")
    text, best = _texts(table)
    assert "[" not in text["a"] and "1–3" in text["a"]  # no interval; its rank may be any place
    assert best["a"] and best["b"] and not best["c"]  # one seed beats nothing and pulls no label into a group
