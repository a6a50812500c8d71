"""Report plots: written as PNG and SVG, non-empty, readable, one colour per label across plots."""

from __future__ import annotations

import itertools

import matplotlib.colors as mcolors
import matplotlib.image as mpimg
import pytest
from report_fixture import make_fake_run

from attnbench.report.load import load_runs
from attnbench.report.plot import label_colors
from attnbench.report.plots import all_plots
from attnbench.report.sections import report_context
from attnbench.report.tables import all_tables

LABELS = ("softmax", "kernel-favor", "performer-256")


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[list, dict]:
    run = make_fake_run(tmp_path_factory.mktemp("run"), tasks=("sst2",), labels=LABELS)
    results = load_runs([run])
    plots = all_plots(report_context(results, all_tables(results)), tmp_path_factory.mktemp("plots"))
    return plots, label_colors(results.labels())


def test_label_colors_keyed_by_sorted_labels() -> None:
    a = label_colors(["softmax", "elu", "performer"])
    b = label_colors(["performer", "softmax", "elu", "elu"])
    assert a == b and len(set(a.values())) == 3
    assert a["elu"] == label_colors(["elu", "zzz"])["elu"]  # first sorted label gets the first colour
    many = label_colors([f"l{i:02d}" for i in range(25)])
    assert len(set(many.values())) == 25


def test_every_plot_written_non_empty_and_readable(written: tuple[list, dict]) -> None:
    plots, _ = written
    names = {p.name for p in plots}
    assert {
        "time_vs_length",
        "memory_vs_length",
        "quality_cost_sst2",
        "reliability_sst2",
        "robustness_sst2",
        "coulomb_sst2_kernel-favor",
        "kernel_experiment",
        "kernel_ablation",
        "kernel_scaling",
    } == names
    for plot in plots:
        assert plot.png.stat().st_size > 10_000 and plot.svg.stat().st_size > 10_000, plot.name
        pixels = mpimg.imread(plot.png)
        assert pixels.ndim == 3 and min(pixels.shape[:2]) > 200 and pixels.std() > 0.01, plot.name
        assert plot.svg.read_text().lstrip().startswith("<?xml") and plot.title


def test_oom_points_marked_and_legends_name_labels(written: tuple[list, dict]) -> None:
    plots, _ = written
    svg = {p.name: p.svg.read_text() for p in plots}
    assert "OOM / timeout" in svg["time_vs_length"] and "OOM / timeout" in svg["memory_vs_length"]
    assert "sequence length (tokens)" in svg["time_vs_length"] and "(ms)" in svg["time_vs_length"]
    assert "the front by the engine" in svg["quality_cost_sst2"] and "training seconds" in svg["quality_cost_sst2"]
    assert "langevin lambda=0.5" in svg["kernel_experiment"] and "test F1" in svg["kernel_experiment"]
    assert "langevin lambda=1.5" in svg["kernel_ablation"]
    assert "γ = 0.80 (paper 0.80)" in svg["kernel_scaling"]
    for name, label in itertools.product(("time_vs_length", "robustness_sst2", "quality_cost_sst2"), LABELS):
        assert label in svg[name], (name, label)


def test_same_colour_for_a_label_in_every_plot(written: tuple[list, dict]) -> None:
    plots, colors = written
    svg = {p.name: p.svg.read_text().lower() for p in plots}
    for label in LABELS:
        hex_colour = mcolors.to_hex(colors[label])
        for name in ("time_vs_length", "memory_vs_length", "robustness_sst2", "quality_cost_sst2"):
            assert hex_colour in svg[name], (label, name)
    assert mcolors.to_hex(colors["kernel-favor"]) in svg["coulomb_sst2_kernel-favor"]
