"""Reports built only from stored cell results (never by re-running): tables, plots, an HTML page, made of the
registered report sections (`attnbench.report.sections`: each measurement's tables, plots and summary sentences).

Contract with the CLI:
    write_report(run_dir, out_dir=None, stale=False) -> out_dir, default run_dir/"report"
                                                          (`attnbench report RUN_DIR [--out DIR] [--stale]`)
    write_leaderboard(run_dirs, out_dir) -> out_dir       (`attnbench leaderboard RUN_DIR...`)

A report is written like a cell: into a fresh folder beside its place, then swapped in whole, so a failure
(a full disk) leaves the old report intact. Layout written into the report folder:
    index.html          self-contained page (sortable tables, embedded plots, provenance)
    report.md           every table in Markdown, plot links, provenance
    provenance.json     per run: suite, commits, versions, machine, seeds, cell counts and reasons
    tables/NAME.{md,csv,tex}
    plots/NAME.{png,svg}
    .attnbench-report.json  the files this report wrote: a later report replaces the folder only while it holds
                        nothing else, and refuses a folder without it (`--out` never deletes a user's files)
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from pathlib import Path

from attnbench.errors import UserError
from attnbench.report.formats import to_markdown, write_table
from attnbench.report.html import cell_counts, provenance_value, render_page
from attnbench.report.load import Results, load_runs, run_provenance
from attnbench.report.plots import all_plots
from attnbench.report.sections import SectionGuard, report_context, report_sections
from attnbench.report.table import Table
from attnbench.report.tables import all_tables

__all__ = ["write_report", "write_leaderboard"]


def write_report(run_dir: Path, out_dir: Path | None = None, *, stale: bool = False) -> Path:
    """Write the report of RUN_DIR's cells of the suite as it stands (with `stale`: of its other cells) into
    `out_dir` (default RUN_DIR/report, or RUN_DIR/report-stale); returns that folder."""
    run_dir = Path(run_dir)
    out_dir = Path(out_dir) if out_dir is not None else run_dir / ("report-stale" if stale else "report")
    title = f"attnbench report: {run_dir.resolve().name}" + (
        " (stale cells: not in the suite as it stands)" if stale else ""
    )
    return _write(load_runs([run_dir], stale=stale), out_dir, title)


def write_leaderboard(run_dirs: list[Path], out_dir: Path) -> Path:
    """Merge several runs (labels measured in more than one run get a ' [run]' tag) into out_dir; returns it."""
    results = load_runs([Path(p) for p in run_dirs])
    title = "attnbench leaderboard: " + ", ".join(run.tag for run in results.runs)
    return _write(results, Path(out_dir), title)


MARKER = ".attnbench-report.json"  # in every report folder: the files that report wrote, and nothing else is ours


def _swap_in(fresh: Path, out_dir: Path) -> None:
    """Put the complete report folder `fresh` in place of `out_dir` (renames: a reader sees the old or the new)."""
    if not out_dir.exists():
        os.replace(fresh, out_dir)
        return
    old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
    os.replace(out_dir, old)
    os.replace(fresh, out_dir)
    shutil.rmtree(old, ignore_errors=True)


def _refuse_foreign(out_dir: Path) -> None:
    """A report replaces its folder whole: refuse a folder that `attnbench report` did not write (no MARKER in it),
    and one holding files besides those its report wrote (a figure of the user's put into plots/)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"cannot write the report into {out_dir}: it is a file; give a folder path")
    present = sorted(str(p.relative_to(out_dir)) for p in out_dir.rglob("*") if p.is_file()) if out_dir.is_dir() else []
    if not present:
        return
    marker = out_dir / MARKER
    try:
        written = set(json.loads(marker.read_text(encoding="utf-8"))["files"]) | {MARKER}
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        raise UserError(
            f"{out_dir} was not written by `attnbench report` (no readable {MARKER} in it) and holds "
            f"{len(present)} file(s), e.g. {', '.join(present[:3])}; a report replaces its folder whole: give a new "
            f"or empty folder (an earlier attnbench's report folder: delete it first)"
        ) from None
    foreign = [name for name in present if name not in written]
    if foreign:
        raise UserError(
            f"{out_dir} holds files its report did not write ({', '.join(foreign[:3])}"
            f"{f' and {len(foreign) - 3} more' if len(foreign) > 3 else ''}); a report replaces its folder whole: "
            f"move them out, or give another folder"
        )


def _markdown(
    title: str, tables: list[Table], plot_names: list[str], provenance: list[dict], summary: list[str]
) -> str:
    lines = [f"# {title}", "", f"Built from stored cell results only. Cells: {cell_counts(provenance)}.", ""]
    lines += [f"- {s}" for s in summary] + ([""] if summary else [])
    lines += [to_markdown(t) for t in tables]
    lines += ["## Plots", ""] + [f"![{n}](plots/{n}.png)" for n in plot_names] + ["", "## Provenance", ""]
    for run in provenance:
        lines.append(
            f"- **{run['run']}**: "
            + "; ".join(f"{k}: {provenance_value(k, v)}" for k, v in run.items() if k not in ("run", "packages"))
        )
    return "\n".join(lines) + "\n"


def _write(results: Results, out_dir: Path, title: str) -> Path:
    """Write the report into a fresh folder beside `out_dir` and swap it in whole; on failure the old one stays."""
    _refuse_foreign(out_dir)
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        fresh = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.new-", dir=out_dir.parent))
    except OSError as err:
        raise UserError(
            f"cannot write the report {out_dir}: {err.strerror or err}; give --out a folder you can write"
        ) from None
    try:
        _write_into(results, fresh, title)
        _swap_in(fresh, out_dir)
    except OSError as err:
        shutil.rmtree(fresh, ignore_errors=True)
        raise UserError(
            f"cannot write the report {out_dir}: {err.strerror or err}"
            + (f" ({err.filename})" if err.filename else "")
            + "; the previous report is left as it was; free space or fix permissions and rerun"
        ) from None
    except BaseException:
        shutil.rmtree(fresh, ignore_errors=True)
        raise
    return out_dir


def _unique_names(tables: list[Table]) -> list[Table]:
    """The tables with one file name (and HTML id) each: a name made twice (two sections, or a measurement and a
    task whose joined names meet) gets '-2', '-3' in the order the tables come, never overwriting the first."""
    seen: set[str] = set()
    unique = []
    for table in tables:
        name, n = table.name, 1
        while name in seen:
            n += 1
            name = f"{table.name}-{n}"
        seen.add(name)
        unique.append(table if name == table.name else dataclasses.replace(table, name=name))
    return unique


def _write_into(results: Results, out_dir: Path, title: str) -> None:
    for folder in (out_dir / "tables", out_dir / "plots"):
        folder.mkdir(parents=True, exist_ok=True)
    guard = SectionGuard()
    tables = _unique_names(all_tables(results, guard))
    for table in tables:
        write_table(table, out_dir / "tables")
    context = report_context(results, tables)
    summary = guard.parts(report_sections(), "summary", context)
    plots = all_plots(context, out_dir / "plots", guard)
    summary += guard.lines  # sections left out, one line each: the CLI prints the summary
    provenance = run_provenance(results)
    (out_dir / "provenance.json").write_text(json.dumps(provenance, indent=1), encoding="utf-8")
    (out_dir / "report.md").write_text(
        _markdown(title, tables, [p.name for p in plots], provenance, summary), encoding="utf-8"
    )
    (out_dir / "index.html").write_text(render_page(title, tables, plots, provenance, summary), encoding="utf-8")
    written = sorted(str(p.relative_to(out_dir)) for p in out_dir.rglob("*") if p.is_file())
    (out_dir / MARKER).write_text(json.dumps({"written_by": "attnbench report", "files": written}, indent=1))
