"""The Coulomb plugin's report sections: phase-A diagnostics and the synthetic experiment's tables, from a fake
run, against the stored values they aggregate."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from report_fixture import make_fake_run, write_cell

from attnbench.baselines.coulomb.report import (
    coulomb_table,
    kernel_ablation_table,
    kernel_langevin_table,
    kernel_paper_table,
    kernel_scaling_table,
    kernel_table,
    phase_a_mechanism_table,
)
from attnbench.report.load import load_runs


def test_coulomb_and_kernel_tables_from_fake_run(tmp_path: Path) -> None:
    results = load_runs([make_fake_run(tmp_path / "run", tasks=("sst2",), labels=("softmax", "kernel-favor"))])
    coulomb = coulomb_table(results)
    after = [
        c["details"]["phase_a"]["validation_alignment"]["within-class"]["after"]
        for _, c in results.of("accuracy").iterrows()
        if c["label"] == "kernel-favor"
    ]
    assert coulomb.data["within-class after_mean"].item() == pytest.approx(np.mean(after))
    assert coulomb.text["walk?"].item() == "drift below noise: a random walk" and "random walk" in coulomb.notes[1]
    kern = kernel_table(results)
    assert {"σ=1e-05", "σ=1e-01", "σ=1e+03"} <= set(kern.text.columns)
    assert kern.best.any().any()
    rows = [
        r
        for _, c in results.of("kernel").iterrows()
        for r in c["details"]["rows"]
        if r["part"] == "noise" and r["method"] == "rff" and r["sigma"] == 1e-5
    ]
    at = kern.data[(kern.data["method"] == "rff") & (kern.data["sigma"] == 1e-5)]
    assert at["accuracy_mean"].item() == pytest.approx(np.mean([r["accuracy"] for r in rows]))
    assert at["accuracy_std"].item() == pytest.approx(np.std([r["accuracy"] for r in rows], ddof=1))
    paper = kernel_paper_table(results)
    rff = paper.data[paper.data["method"] == "rff"]
    assert rff["paper_accuracy"].item() == 0.56
    assert rff["difference"].item() == pytest.approx(at["accuracy_mean"].item() - 0.56)
    assert paper.text["method"].iloc[-1].startswith("Bayes rule") and paper.text["accuracy (ours)"].iloc[-1] == "0.760"
    assert set(kernel_ablation_table(results).data["method"]) == {"langevin lambda=0", "langevin lambda=1.5"}
    scaling = kernel_scaling_table(results)
    mkl = scaling.text[scaling.text["method"] == "mkl"].iloc[0]
    assert mkl["n=10,000"] == "skipped" and mkl["γ (paper, Table 6)"] == "1.96" and mkl["γ (ours)"] == "—"
    assert any("scaling_max_rows[mkl]=2000" in note for note in scaling.notes)
    assert scaling.text[scaling.text["method"] == "rff"]["γ (ours)"].item().startswith("0.80")
    assert mkl["n=100"] == "—"  # no row at that size: a dash, not "skipped"
    assert "±" in kern.text["σ=1e-05"].iloc[0] and "[" not in kern.text["σ=1e-05"].iloc[0]
    langevin = kernel_langevin_table(results)
    assert set(langevin.text["method"]) == {"langevin lambda=0.5", "langevin lambda=0"}
    assert langevin.text["drift / noise"].iloc[0] == "0.263"
    assert any("Drift below noise" in note for note in langevin.notes)


def test_mechanism_table_leaves_out_learning_phases_without_its_diagnostics(tmp_path: Path) -> None:
    """Hedgehog's distillation also records a phase_a (its config only): no alignment or probe to show."""
    run = make_fake_run(tmp_path / "run", tasks=("sst2",), labels=("softmax", "kernel-favor"))
    for seed in range(3):  # softmax's cells stand in for a label whose learning phase is not Coulomb's
        details = {"phase_a": {"config": {"step": 0.01}}}
        write_cell(run, label="softmax", task="sst2", seed=seed, metrics={"accuracy": 0.8}, details=details)
    results = load_runs([run])
    assert (results.of("accuracy")["label"] == "softmax").sum() == 3
    assert list(phase_a_mechanism_table(results).data["label"]) == ["kernel-favor"]
