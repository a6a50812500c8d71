"""Reports built only from stored cell results (never by re-running): tables, plots, an HTML page.

Contract with the CLI:
    write_report(run_dir) -> run_dir/"report"            (`attnbench report RUN_DIR`)
    write_leaderboard(run_dirs, out_dir) -> out_dir       (`attnbench leaderboard RUN_DIR...`)

Layout written into the report folder:
    index.html          self-contained page (sortable tables, embedded plots, provenance)
    report.md           every table in Markdown, plot links, provenance
    provenance.json     per run: suite, commits, versions, machine, seeds, cell counts and reasons
    tables/NAME.{md,csv,tex}
    plots/NAME.{png,svg}
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from attnbench.report.causal import causal_plots
from attnbench.report.formats import to_markdown, write_table
from attnbench.report.html import provenance_value, render_page
from attnbench.report.load import Results, load_runs, run_provenance
from attnbench.report.plots import all_plots
from attnbench.report.measurement_tables import efficiency_frame
from attnbench.report.table import Table
from attnbench.report.tables import all_tables

__all__ = ["write_report", "write_leaderboard"]


def write_report(run_dir: Path) -> Path:
    """Write RUN_DIR/report/ (tables, plots, index.html) from RUN_DIR/cells/*.json; returns that folder."""
    run_dir = Path(run_dir)
    return _write(load_runs([run_dir]), run_dir / "report", f"attnbench report: {run_dir.resolve().name}")


def write_leaderboard(run_dirs: list[Path], out_dir: Path) -> Path:
    """Merge several runs (labels measured in more than one run get a ' [run]' tag) into out_dir; returns it."""
    results = load_runs([Path(p) for p in run_dirs])
    title = "attnbench leaderboard: " + ", ".join(run.tag for run in results.runs)
    return _write(results, Path(out_dir), title)


def _clear_generated(out_dir: Path) -> None:
    """Remove files an earlier report wrote (only our own kinds, in our own subfolders)."""
    for sub, suffixes in (("tables", (".md", ".csv", ".tex")), ("plots", (".png", ".svg"))):
        folder = out_dir / sub
        if folder.is_dir():
            for path in folder.iterdir():
                if path.is_file() and path.suffix in suffixes:
                    path.unlink()


def _markdown(title: str, tables: list[Table], plot_names: list[str], provenance: list[dict]) -> str:
    lines = [f"# {title}", "", "Built from stored cell results only.", ""]
    lines += [to_markdown(t) for t in tables]
    lines += ["## Plots", ""] + [f"![{n}](plots/{n}.png)" for n in plot_names] + ["", "## Provenance", ""]
    for run in provenance:
        lines.append(f"- **{run['run']}**: " + "; ".join(
            f"{k}: {provenance_value(k, v)}" for k, v in run.items() if k not in ("run", "packages")))
    return "\n".join(lines) + "\n"


def _write(results: Results, out_dir: Path, title: str) -> Path:
    for folder in (out_dir / "tables", out_dir / "plots"):
        folder.mkdir(parents=True, exist_ok=True)
    _clear_generated(out_dir)
    tables = all_tables(results)
    for table in tables:
        write_table(table, out_dir / "tables")
    leaderboard = next((t.data for t in tables if t.name == "leaderboard"), None)
    plots = all_plots(results, leaderboard if leaderboard is not None else pd.DataFrame(),
                      efficiency_frame(results), out_dir / "plots") + causal_plots(results, out_dir / "plots")
    provenance = run_provenance(results)
    (out_dir / "provenance.json").write_text(json.dumps(provenance, indent=1), encoding="utf-8")
    (out_dir / "report.md").write_text(_markdown(title, tables, [p.name for p in plots], provenance),
                                       encoding="utf-8")
    (out_dir / "index.html").write_text(render_page(title, tables, plots, provenance), encoding="utf-8")
    return out_dir
