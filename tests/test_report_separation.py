"""The report's `separation` section: per task, every pair of its labels as the engine judges it - the pairs it
separates (better first), equivalent, undecided - checked against paired t-tests over the seeds with Holm's
correction computed independently (scipy, statsmodels)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
from report_fixture import write_cell
from scipy import stats
from statsmodels.stats.multitest import multipletests

from attnbench.measurements import measurement_names
from attnbench.metrics import headline_metric
from attnbench.report import write_report
from attnbench.report.load import load_runs
from attnbench.report.separation import separation_table

SEEDS = 6


def _run(run: Path, task: str, means: dict[str, float], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Cells of `task` (seeds-only accuracy: no per-example outcomes); returns each label's seed values."""
    values = {}
    for label, mean in means.items():
        values[label] = np.clip(mean + rng.normal(0, 0.01, SEEDS), 0, 1)
        for seed, value in enumerate(values[label]):
            write_cell(run, label=label, task=task, seed=seed, metrics={"accuracy": float(value)})
    return values


def _holm_separated(values: dict[str, np.ndarray]) -> set[str]:
    """'better > worse' for the pairs a paired t-test over the seeds rejects after Holm over all pairs."""
    pairs = list(itertools.combinations(sorted(values), 2))
    p = [stats.ttest_rel(values[a], values[b]).pvalue for a, b in pairs]
    reject = multipletests(p, alpha=0.05, method="holm")[0]
    return {
        f"{a} > {b}" if values[a].mean() > values[b].mean() else f"{b} > {a}" for (a, b), r in zip(pairs, reject) if r
    }


def test_the_separated_pairs_are_holms_over_all_pairs_of_the_task(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    clear = _run(tmp_path, "sst2", {"softmax": 0.90, "elu-linear": 0.80, "performer": 0.795, "uniform": 0.5}, rng)
    floor = _run(tmp_path, "rotten_tomatoes", {"softmax": 0.5, "elu-linear": 0.5, "uniform": 0.5}, rng)
    table = separation_table(load_runs([tmp_path]))
    rows = table.data.set_index("task")
    for task, values in (("sst2", clear), ("rotten_tomatoes", floor)):
        row = rows.loc[task]
        listed = row["separated_pairs"]
        shown = set(listed.split("; ")) if isinstance(listed, str) else set()
        assert shown == _holm_separated(values)
        assert row["pairs"] == len(values) * (len(values) - 1) // 2 and row["labels"] == len(values)
        assert row["separated"] + row["equivalent"] + row["undecided"] == row["pairs"]
    assert rows.loc["sst2", "separated"] >= 5  # everything but elu-linear vs performer is 10+ standard errors apart
    assert "elu-linear > performer" not in rows.loc["sst2", "separated_pairs"].split("; ")
    assert rows.loc["rotten_tomatoes", "separated"] == 0


def test_the_report_says_per_task_how_many_pairs_it_separates(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    _run(tmp_path / "run", "sst2", {"softmax": 0.9, "uniform": 0.5, "elu-linear": 0.5}, rng)
    report = (write_report(tmp_path / "run") / "report.md").read_text()
    assert "- sst2: 2 of 3 pairs separated on accuracy (holm)" in report
    assert "softmax > elu-linear" in report and "softmax > uniform" in report


def test_counts_are_not_a_separation(tmp_path: Path) -> None:
    """A headline that is a count (exact: state bytes) differs by construction; the section leaves it out."""
    measurement_names()  # the built-in records, where state_bytes@L is the state measurement's headline
    assert headline_metric({"state_bytes@1024"}) == "state_bytes@1024"
    for label, size in (("softmax", 4096.0), ("elu-linear", 256.0)):
        write_cell(tmp_path, label=label, task="byte_lm", measurement="state", metrics={"state_bytes@1024": size})
    assert separation_table(load_runs([tmp_path])) is None
