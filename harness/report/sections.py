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

The harness's sections are registered by the modules of attnbench.report, and an attention family's by its
`report` module (attnbench.baselines.<family>.report), all found by walking the packages (`registry.discover`)
when a report is built; an installed plugin's by an entry point in the group `attnbench.report_section` naming
the module that registers them. A plugin cannot break a report: one that fails to import, a section under a
harness's name, and a section part that raises are each named in one line at the top of the report
(`SectionGuard`) and left out.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.metadata
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from attnbench.errors import ConfigError
from attnbench.registry import discover
from attnbench.report.load import Results
from attnbench.report.plot import Plot, label_colors
from attnbench.report.table import Table

ENTRY_POINT_GROUP = "attnbench.report_section"


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
_LOAD_PROBLEMS: list[str] = []  # sections refused or not loaded: one line each, shown at the top of every report


def _module_of(section: ReportSection) -> str:
    """The module that drew the section (of its first part that is not a default)."""
    parts = [
        f for f in (section.tables, section.plots, section.summary) if f not in (_no_tables, _no_plots, _no_summary)
    ]
    return getattr(parts[0], "__module__", "") or ""


def _builtin(section: ReportSection) -> bool:
    """Whether the harness (or a plugin it ships, attnbench.baselines.coulomb) registered the section."""
    module = _module_of(section)
    return module == "attnbench" or module.startswith("attnbench.")


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
    """Register (or replace) the report section `name`; see the module docstring for each part. The harness's
    section names are reserved: another module's section under one of them is left out, saying so at the top of
    every report, and the harness's own is kept."""
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
    existing = _SECTIONS.get(name)
    if existing is not None and _builtin(existing) != _builtin(section):
        other = section if _builtin(existing) else existing
        _LOAD_PROBLEMS.append(
            f"report section {name!r} from {_module_of(other)} was left out: {name!r} is the harness's own "
            f"section; register it under another name"
        )
        if _builtin(existing):
            return existing
    _SECTIONS[name] = section
    return section


def report_sections() -> list[ReportSection]:
    """Every registered section (the harness's and installed plugins'), in table order."""
    _load_sections()
    return sorted(_SECTIONS.values(), key=lambda s: (s.order, s.name))


class SectionGuard:
    """Runs the sections' parts for one report: a part that raises, or returns what is not a Table (tables) or a
    Plot (plots), is named in one line and its section's later parts are skipped; the report goes on. `lines`
    also holds the sections refused or not loaded (a plugin that failed to import)."""

    def __init__(self) -> None:
        self.lines: list[str] = list(dict.fromkeys(_LOAD_PROBLEMS))
        self.failed: set[str] = set()

    def parts(self, sections: Iterable[ReportSection], part: str, *args: object) -> list:
        """Every section's `part` (tables, plots or summary) called with `args`, flattened, in order."""
        kinds = {"tables": (Table, type(None)), "plots": (Plot,), "summary": (str,)}[part]
        out = []
        for section in sections:
            if section.name in self.failed:
                continue
            try:
                made = list(getattr(section, part)(*args))
                wrong = [type(x).__name__ for x in made if not isinstance(x, kinds)]
                if wrong:
                    raise TypeError(f"it returned a {wrong[0]} among its {part}")
            except Exception as err:  # noqa: BLE001 - a plugin's section, whatever it raises, costs only itself
                self.failed.add(section.name)
                reason = (str(err).strip().splitlines() or [""])[0]
                self.lines.append(
                    f"report section {section.name!r} failed in its {part} ({type(err).__name__}: {reason}); "
                    f"left out of this report"
                )
                continue
            out += made
        return out


def report_context(results: Results, tables: Iterable[Table]) -> ReportContext:
    """The context of a report of `results` whose tables are `tables`, coloured by the sorted labels."""
    return ReportContext(results, {t.name: t for t in tables}, label_colors(results.labels()))


@functools.cache
def _load_sections() -> None:
    """Import the modules that register sections, once: the harness's, each attention family's, then each
    installed plugin's."""
    discover("attnbench.report")
    discover("attnbench.baselines", "report")
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except Exception as err:  # noqa: BLE001 - a broken plugin costs its own sections, not the report
            reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
            _LOAD_PROBLEMS.append(
                f"report section plugin {ep.name!r} ({ep.value}) failed to import ({reason}); its sections are "
                f"left out: fix or uninstall the package that declares it"
            )
