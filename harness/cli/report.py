"""`attnbench report`: the tables, plots and HTML of one run folder, from its stored results."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from attnbench.errors import UserError


def add_parser(verbs: Any) -> argparse.ArgumentParser:
    """The `report` verb's arguments."""
    p = verbs.add_parser(
        "report",
        help="tables and plots of one run folder",
        description="Write the report (tables, plots, HTML) of a run folder from its stored "
        "results only, and print where it is.",
    )
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="report folder, replaced whole when the report is complete (default RUN_DIR/report, "
        "RUN_DIR/report-stale with --stale)",
    )
    p.add_argument(
        "--stale",
        action="store_true",
        help="report only the stored cells that are not in the suite as it stands (an earlier version "
        "of the suite or of its data); by default the report leaves them out and names them",
    )
    return p


def report_module() -> Any:
    """attnbench.report, or a UserError naming why it cannot be imported."""
    try:
        import attnbench.report as report
    except ImportError as err:
        raise UserError(f"the report module is not available ({err}); reports cannot be built yet") from None
    return report


def execute(args: argparse.Namespace) -> int:
    """Write the run's report, print its leaderboard and summary, and name the stale cells it left out."""
    from attnbench.store import RunStore

    store = RunStore(args.run_dir)
    store.run_info()  # a clear error if this is not a run folder
    path = report_module().write_report(args.run_dir, args.out, stale=args.stale)
    print_leaderboard(path)
    print(f"report: {path} (index.html, report.md, tables/, plots/)")
    stale = store.stale()
    if stale and not args.stale:
        print(
            f"note: left out {len(stale)} stored cells that are not in the suite as it stands (named in the "
            f"report's provenance); `attnbench report {args.run_dir} --stale` reports them, "
            f"`attnbench prune {args.run_dir}` moves them aside",
            file=sys.stderr,
        )
    return 0


def print_leaderboard(report_dir: Path) -> None:
    """Print the leaderboard table the report wrote (tables/leaderboard.md), when there is one, then the report's
    summary (best sets, labels at chance, points not measured: the bullets at the top of report.md)."""
    table = report_dir / "tables" / "leaderboard.md"
    if table.is_file():
        print(table.read_text().rstrip())
    summary = report_dir / "report.md"
    if summary.is_file():
        lines = summary.read_text().split("\n### ")[0].splitlines()
        bullets = [line for line in lines if line.startswith("- ")]
        if bullets:
            print("\nSummary:\n" + "\n".join(bullets))
