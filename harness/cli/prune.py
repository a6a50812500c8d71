"""`attnbench prune`: move stored cells that are not in the suite as it stands aside."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from attnbench.store import RunStore


def add_parser(verbs: Any) -> argparse.ArgumentParser:
    """The `prune` verb's arguments."""
    p = verbs.add_parser(
        "prune",
        help="move stored cells that are not in the suite as it stands aside",
        description="Move RUN_DIR's stored results of cells that are no longer in its suite (the "
        "plan of its last `attnbench run`: an earlier version of the suite or of its "
        "data) to RUN_DIR/pruned/<time stamp>/; nothing is deleted.",
    )
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")

    return p


def execute(args: argparse.Namespace) -> int:
    """Move the run folder's stored cells outside its plan to RUN_DIR/pruned/<time stamp>/."""
    store = RunStore(args.run_dir)
    store.run_info()
    with store.claim(shlex.join(["attnbench", *sys.argv[1:]])):
        moved, target = store.prune()
    if not moved:
        print(f"{args.run_dir}: every stored cell belongs to the suite as it stands; nothing to prune")
    else:
        print(f"{args.run_dir}: moved {len(moved)} stored cells that are not in the suite as it stands to {target}")
    return 0
