"""Every plot of a report: each registered section's (`attnbench.report.sections`), in plot order, drawn with the
shared helpers of `attnbench.report.plot` and written as PNG and SVG."""

from __future__ import annotations

from pathlib import Path

from attnbench.report.plot import Plot
from attnbench.report.sections import ReportContext, SectionGuard, report_sections


def all_plots(context: ReportContext, out_dir: Path, guard: SectionGuard | None = None) -> list[Plot]:
    """Every plot the results support, section by section in plot order, written into out_dir (a failing section
    named in `guard` and left out)."""
    sections = sorted(report_sections(), key=lambda s: (s.plot_order, s.order, s.name))
    return (guard or SectionGuard()).parts(sections, "plots", context, out_dir)
