"""`attnbench leaderboard`: one leaderboard across run folders."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from attnbench.cli.report import print_leaderboard, report_module
from attnbench.store import RunStore


def add_parser(verbs: Any) -> argparse.ArgumentParser:
    """The `leaderboard` verb's arguments."""
    p = verbs.add_parser(
        "leaderboard",
        help="one leaderboard across run folders",
        description="Combine the stored results of one or more run folders into a leaderboard.",
    )
    p.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR")
    p.add_argument(
        "--out",
        type=Path,
        default=Path("runs/leaderboard"),
        metavar="DIR",
        help="output folder (default runs/leaderboard)",
    )
    return p


def execute(args: argparse.Namespace) -> int:
    """Write one leaderboard over the run folders and print it."""
    for run_dir in args.run_dirs:
        RunStore(run_dir).run_info()
    path = report_module().write_leaderboard(list(args.run_dirs), args.out)
    print_leaderboard(path)
    print(f"leaderboard: {path} (index.html, report.md, tables/, plots/)")
    return 0
