"""Report sections: the tables, plots and summary sentences of one measurement (or task family, or plugin),
registered beside the code that draws them. A report is every registered section in order; nothing lists them.

    from attnbench.report.sections import register_report_section   # also attnbench.register_report_section
    register_report_section("fidelity", order=60, tables=lambda results: [fidelity_table(results)],
                            measurements=("fidelity",))

- tables(results) -> tables (None where the results hold nothing for it), in the section's order;
- plots(context, out_dir) -> the plots it wrote into out_dir (`attnbench.report.plot` has the shared helpers);
- summary(context) -> sentences for the top of the report;
- measurements: those whose cells it shows in full: the report draws no generic per-task table for them (a
  measurement no section names gets one table per task: every metric, mean ± std over seeds, ranked);
- order: its place among the tables (the harness's and the Coulomb plugin's sections sit from 10 to 90; the
  generic per-task tables and the cells without results come last), and plot_order its place among the plots
  (default: order).

The harness's sections are registered by the modules in BUILTIN_MODULES, imported when a report is built; a
plugin's by an entry point in the group `attnbench.report_section` naming the module that registers them.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.metadata
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from attnbench.errors import ConfigError, UserError
from attnbench.report.load import Results
from attnbench.report.plot import Plot, label_colors
from attnbench.report.table import Table

ENTRY_POINT_GROUP = "attnbench.report_section"
BUILTIN_MODULES = (
    "attnbench.report.accuracy",
    "attnbench.report.lra_table",
    "attnbench.report.robustness",
    "attnbench.report.efficiency",
    "attnbench.report.fidelity",
    "attnbench.report.causal",
    "attnbench.report.lengths",
    "attnbench.report.niah",
    "attnbench.baselines.coulomb.report",
)


@dataclasses.dataclass(frozen=True)
class ReportContext:
    """What a section's summary and plots are drawn from: the stored results, every table of the report by name
    (all built before the first summary or plot), and one colour per attention label shared by every plot."""

    results: Results
    tables: Mapping[str, Table]
    colors: Mapping[str, tuple[float, ...]]


SectionTables = Callable[[Results], Iterable[Table | None]]
SectionPlots = Callable[[ReportContext, Path], Iterable[Plot]]
SectionSummary = Callable[[ReportContext], Iterable[str]]


def _no_tables(results: Results) -> list[Table]:
    """A section without tables."""
    return []


def _no_plots(context: ReportContext, out_dir: Path) -> list[Plot]:
    """A section without plots."""
    return []


def _no_summary(context: ReportContext) -> list[str]:
    """A section without summary sentences."""
    return []


@dataclasses.dataclass(frozen=True)
class ReportSection:
    """One registered section: what it draws, the measurements it shows in full, and its place in the report."""

    name: str
    order: float
    plot_order: float
    tables: SectionTables
    plots: SectionPlots
    summary: SectionSummary
    measurements: tuple[str, ...]


_SECTIONS: dict[str, ReportSection] = {}


def register_report_section(
    name: str,
    *,
    order: float,
    tables: SectionTables = _no_tables,
    plots: SectionPlots = _no_plots,
    summary: SectionSummary = _no_summary,
    measurements: Iterable[str] = (),
    plot_order: float | None = None,
) -> ReportSection:
    """Register (or replace) the report section `name`; see the module docstring for each part."""
    if not isinstance(order, (int, float)) or isinstance(order, bool):
        raise ConfigError(f"report section {name!r}: order must be a number, got {order!r}")
    if isinstance(measurements, str):
        raise ConfigError(f"report section {name!r}: measurements must be a list of names, got {measurements!r}")
    if (tables, plots, summary) == (_no_tables, _no_plots, _no_summary):
        raise ConfigError(f"report section {name!r} shows nothing: give it tables, plots or a summary")
    section = ReportSection(
        name,
        order,
        order if plot_order is None else plot_order,
        tables,
        plots,
        summary,
        tuple(measurements),
    )
    _SECTIONS[name] = section
    return section


def report_sections() -> list[ReportSection]:
    """Every registered section (the harness's and installed plugins'), in table order."""
    _load_sections()
    return sorted(_SECTIONS.values(), key=lambda s: (s.order, s.name))


def report_context(results: Results, tables: Iterable[Table]) -> ReportContext:
    """The context of a report of `results` whose tables are `tables`, coloured by the sorted labels."""
    return ReportContext(results, {t.name: t for t in tables}, label_colors(results.labels()))


@functools.cache
def _load_sections() -> None:
    """Import the modules that register sections, once: the harness's, then each installed plugin's."""
    for module in BUILTIN_MODULES:
        importlib.import_module(module)
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except Exception as err:
            raise UserError(
                f"report section plugin {ep.name!r} ({ep.value}) failed to import: {err}; "
                f"fix or uninstall the package that declares it"
            ) from err
