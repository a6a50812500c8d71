"""Report sections: one registered as a plugin would (by a call through the public surface, or by an installed
entry point) shows its tables, plots and sentences at its place, and a measurement it shows in full loses its
generic per-task table; the harness's and the Coulomb plugin's sections are all registered."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from report_fixture import write_cell

import attnbench
from attnbench.errors import ConfigError
from attnbench.report import sections, write_report
from attnbench.report.load import load_runs
from attnbench.report.plot import new_figure, save_plot
from attnbench.report.sections import report_sections
from attnbench.report.table import Table
from attnbench.report.tables import all_tables

SCORES = {"a": [0.2, 0.4, 0.9], "b": [0.5, 0.5, 0.8]}


@pytest.fixture
def private_sections(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry as the harness fills it, restored after the test (whatever the test registers)."""
    report_sections()
    monkeypatch.setattr(sections, "_SECTIONS", dict(sections._SECTIONS))


@pytest.fixture
def echo_run(tmp_path: Path) -> Path:
    """Accuracy cells on task t and cells of a plug-in measurement `echo` (metric `score`), labels a and b."""
    run = tmp_path / "run"
    for label, scores in SCORES.items():
        for seed, score in enumerate(scores):
            write_cell(run, label=label, task="t", seed=seed, metrics={"accuracy": 0.6 + score / 10})
            write_cell(run, label=label, task="t", measurement="echo", seed=seed, metrics={"score": score})
    return run


def echo_tables(results) -> list[Table]:
    """Mean score per label, from the stored cells."""
    frame = pd.DataFrame(
        [{"label": c["label"], "score": c["metrics"]["score"]} for _, c in results.of("echo").iterrows()]
    )
    means = frame.groupby("label", as_index=False)["score"].mean()
    text = means.assign(score=[f"{v:.4f}" for v in means["score"]])
    return [
        Table(
            "echo_scores", "Echo scores", means, text, pd.DataFrame(False, index=text.index, columns=text.columns), []
        )
    ]


def echo_plots(context, out_dir: Path, name: str = "echo_bars"):
    """A bar per label of the section's own table, read from the context."""
    data = context.tables["echo_scores"].data
    fig = new_figure(3, 2)
    fig.subplots().bar(data["label"], data["score"], color=[context.colors[label] for label in data["label"]])
    return [save_plot(fig, out_dir, name, "Echo scores")]


def test_the_harness_and_the_coulomb_plugin_register_their_sections():
    names = [s.name for s in report_sections()]
    assert names[:3] == ["accuracy", "lra", "comparisons"]
    assert {"robustness", "efficiency", "fidelity", "recall", "decode"} <= set(names)
    plugin = {s.name: s for s in report_sections() if s.tables.__module__ == "attnbench.baselines.coulomb.report"}
    assert set(plugin) == {"coulomb-phase-a", "kernel-experiment"}
    assert plugin["kernel-experiment"].measurements == ("kernel",)


def test_a_measurement_without_a_section_gets_a_generic_table_per_task(private_sections, echo_run: Path):
    names = [t.name for t in all_tables(load_runs([echo_run]))]
    assert names == ["leaderboard", "task_t", "separation", "echo_t"]


def test_a_registered_section_takes_its_place_and_replaces_the_generic_table(
    private_sections, echo_run: Path, tmp_path: Path
):
    attnbench.register_report_section(
        "echo",
        order=5,
        plot_order=99,
        tables=echo_tables,
        plots=echo_plots,
        summary=lambda context: [f"echo: {len(context.results.of('echo'))} cells"],
        measurements=["echo"],
    )
    attnbench.register_report_section(  # tables last, plots first
        "echo-again", order=200, plot_order=1, plots=lambda context, out_dir: echo_plots(context, out_dir, "echo_first")
    )
    results = load_runs([echo_run])
    tables = all_tables(results)
    assert [t.name for t in tables] == ["echo_scores", "leaderboard", "task_t", "separation"]  # no generic echo_t
    assert dict(zip(tables[0].data["label"], tables[0].data["score"])) == pytest.approx(
        {label: np.mean(scores) for label, scores in SCORES.items()}
    )
    report = (write_report(echo_run, tmp_path / "report") / "report.md").read_text()
    assert "- echo: 6 cells" in report
    assert report.index("### Echo scores") < report.index("### Leaderboard")
    assert report.index("plots/echo_first.png") < report.index("plots/echo_bars.png")
    assert (tmp_path / "report" / "tables" / "echo_scores.csv").is_file()


PLUGIN = """
from attnbench.api import register_report_section

register_report_section("toy", order=95, tables=lambda results: [], summary=lambda context: ["toy was here"])
"""


def test_a_section_plugin_by_installed_entry_point(private_sections, tmp_path: Path, monkeypatch):
    (tmp_path / "toy_report_plugin.py").write_text(textwrap.dedent(PLUGIN))
    dist = tmp_path / "toy_report_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-report-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[attnbench.report_section]\ntoy = toy_report_plugin\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sections._load_sections.cache_clear()
    try:
        toy = next(s for s in report_sections() if s.name == "toy")
        assert (toy.order, toy.measurements) == (95, ())
        (dist / "entry_points.txt").write_text("[attnbench.report_section]\nbroken = no_such_report_plugin\n")
        sections._load_sections.cache_clear()
        report_sections()  # a plugin that fails to import blocks no report: it is named at the top of each
        assert any("report section plugin 'broken' (no_such_report_plugin) failed to import" in line
                   for line in sections.SectionGuard().lines)  # fmt: skip
    finally:
        sections._load_sections.cache_clear()  # the next report loads without the test's plugins


def test_a_section_that_shows_nothing_or_names_one_measurement_as_a_string_is_refused(private_sections):
    with pytest.raises(ConfigError, match="shows nothing"):
        attnbench.register_report_section("empty", order=1)
    with pytest.raises(ConfigError, match="a list of names"):
        attnbench.register_report_section("echo", order=1, tables=echo_tables, measurements="echo")
    with pytest.raises(ConfigError, match="order must be a number"):
        attnbench.register_report_section("echo", order="first", tables=echo_tables)


def test_a_failing_or_squatting_section_is_named_in_one_line_and_the_report_goes_on(
    private_sections, echo_run: Path, tmp_path: Path, monkeypatch
):
    """A plug-in section that raises, one that returns something not a Table, and one registered under the
    harness's name `comparisons`: each one line at the top of the report (the CLI prints it), the rest intact."""
    monkeypatch.setattr(sections, "_LOAD_PROBLEMS", [])

    def broken(results):
        raise KeyError("score")

    attnbench.register_report_section("broken", order=1, tables=broken)
    attnbench.register_report_section("odd", order=2, tables=lambda results: [{"not": "a table"}])
    builtin = sections._SECTIONS["comparisons"]
    attnbench.register_report_section("comparisons", order=3, tables=echo_tables)
    assert sections._SECTIONS["comparisons"] is builtin  # the harness's name is reserved
    report = write_report(echo_run, tmp_path / "report")
    text = (report / "report.md").read_text()
    assert "- report section 'broken' failed in its tables (KeyError: 'score'); left out of this report" in text
    assert "- report section 'odd' failed in its tables (TypeError: it returned a dict among its tables)" in text
    assert (
        "- report section 'comparisons' from test_report_sections was left out: 'comparisons' is the harness's" in text
    )
    assert (report / "tables" / "leaderboard.csv").is_file() and not (report / "tables" / "echo_scores.csv").exists()


def test_a_plot_written_twice_is_the_same_bytes(tmp_path):
    """No date and no random ids in the SVG (nor anything else that changes between writes): re-rendering a report
    from the same results changes no plot file."""
    written = []
    for folder in ("a", "b"):
        fig = new_figure(3, 2)
        fig.add_subplot().plot([0, 1, 2], [1, 0, 2], marker="o", label="x")
        written.append(save_plot(fig, tmp_path / folder, "p", "a plot"))
    assert written[0].svg.read_bytes() == written[1].svg.read_bytes()
    assert written[0].png.read_bytes() == written[1].png.read_bytes()
    assert b"<dc:date>" not in written[0].svg.read_bytes()
