"""The `attnbench` command: one module per verb (list, check, run, report, prune, leaderboard, show), each with
`add_parser(verbs)`, its arguments, and `execute(args) -> int`, what it does; `main` parses and dispatches.

User mistakes (a misspelt suite, attention or option, a missing folder) print one line on stderr
and exit with code 2; `run` exits 1 when any cell failed, `check` when any property fails, 0 otherwise.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from attnbench.cli import check, leaderboard, listing, prune, report, run, show
from attnbench.errors import UserError

VERBS = {
    "list": listing,
    "check": check,
    "run": run,
    "report": report,
    "prune": prune,
    "leaderboard": leaderboard,
    "show": show,
}
EPILOG = """examples:
  attnbench list attention '*linear*'    attentions whose name matches a glob, with their options
  attnbench list attention my_pkg.attn:MyAttention   describe a plugin class
  attnbench check performer              the attention property tests, native kernels on and off
  attnbench run smoke                    run (or resume) the smoke suite into runs/smoke
  attnbench run my_suite.yaml --workers 2 --cell-timeout 600
  attnbench report runs/smoke            tables and plots from stored results
  attnbench prune runs/smoke             move results of cells no longer in the suite aside
  attnbench leaderboard runs/smoke runs/synthetic --out runs/leaderboard
  attnbench show 3f2a9c0d1e2b4a5f --run runs/smoke
  attnbench show 'listops/*/s0/accuracy' --run runs/synthetic"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one sub-command per verb."""
    parser = argparse.ArgumentParser(
        prog="attnbench",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EPILOG,
        description="A reproducible benchmark harness for efficient attention: run named suites of "
        "(task, attention, seed, measurement) cells, store every result with its provenance, "
        "and build reports and leaderboards from the stored results.",
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)

    for verb in VERBS.values():
        verb.add_parser(verbs)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `attnbench` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return VERBS[args.verb].execute(args)
    except UserError as err:
        print(f"attnbench: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("attnbench: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    except OSError as err:  # e.g. a report folder that cannot be written
        where = f" ({err.filename})" if err.filename else ""
        print(
            f"attnbench: error: {err.strerror or err}{where}; check that the path exists and can be written",
            file=sys.stderr,
        )
        return 2
