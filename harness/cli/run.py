"""`attnbench run`: validate a suite, expand it into cells and run those not finished yet."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from attnbench.errors import UserError


def add_parser(verbs: Any) -> argparse.ArgumentParser:
    """The `run` verb's arguments."""
    p = verbs.add_parser(
        "run",
        help="run (or resume) a suite",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Validate a suite, expand it into cells and run those not finished yet. "
        "Each cell's result is stored atomically as RUN_DIR/cells/<cell_id>.json; "
        "rerunning resumes (finished ok/skipped cells are kept, failed cells are "
        "retried unless --no-retry-failed). Exit code: 0 all cells ok or skipped, "
        "1 some cell failed, 2 a mistake in the suite or the arguments.",
    )
    p.add_argument("suite", metavar="SUITE", help="a shipped suite name (see `attnbench list suites`) or a YAML path")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="run folder (default: runs/<suite name>, or runs/<suite>-<timestamp> with --fresh)",
    )
    p.add_argument(
        "--fresh",
        action="store_true",
        help="start a new run folder runs/<suite>-<timestamp> instead of resuming; nothing is deleted",
    )
    _add_where_flags(p)
    _add_which_cells_flags(p)
    _add_until_decided_flags(p)
    return p


def _add_until_decided_flags(p: argparse.ArgumentParser) -> None:
    """Rounds that add seeds while pairs stay undecided (attnbench.until_decided)."""
    p.add_argument(
        "--until-decided",
        action="store_true",
        help="after the suite's cells, add seeds to a task's labels (kept paired) while pairs of interest are "
        "undecided by the inference engine and more seeds within --max-seeds could decide them; resumable; "
        "the report lists what stayed undecided and the seeds it would need",
    )
    p.add_argument(
        "--max-seeds",
        type=_at_least_two,
        default=10,
        metavar="N",
        help="--until-decided: at most N seeds per label (default 10)",
    )
    p.add_argument(
        "--pairs",
        choices=("reference", "all"),
        default="reference",
        help="--until-decided: the pairs of interest, each label against --reference (default) or every pair of a task",
    )
    p.add_argument(
        "--reference",
        default=None,
        metavar="LABEL",
        help="--until-decided --pairs reference: the label the others are compared with (default: the suite's "
        "first softmax label)",
    )


def _add_where_flags(p: argparse.ArgumentParser) -> None:
    """Where the cells run: processes, executor, threads, device."""
    p.add_argument(
        "--workers",
        type=_workers,
        default="auto",
        metavar="auto|N",
        help="auto (default): the split of the cores that runs this suite fastest here, printed at "
        "the start and recorded in run.json (one cell at a time with all cores for suites that "
        "time calls or measure memory, and for small suites; else one process per core); N: cells "
        "in N local processes (spawned; each uses cores // N torch threads; 1: this process); "
        "with --executor ray: concurrent cells on the local Ray instance",
    )
    p.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="local processes (default) or Ray tasks (needs pip install 'attnbench[ray]')",
    )
    p.add_argument(
        "--address",
        default=None,
        metavar="ADDR",
        help="Ray cluster address, e.g. 'auto' or 'ray://head:10001' (default: start a local instance)",
    )
    p.add_argument(
        "--cpus-per-cell",
        type=_positive_int,
        default=1,
        metavar="N",
        help="Ray: CPUs each cell asks for, and its torch threads (default 1)",
    )
    p.add_argument(
        "--threads",
        type=_positive_int,
        default=None,
        metavar="N",
        help="torch threads per cell (default: the split's, cores // workers; --cpus-per-cell on Ray); "
        "CPU results are bit-identical across executors at equal threads",
    )
    p.add_argument(
        "--device",
        choices=("cpu", "cuda", "auto"),
        default="cpu",
        help="where cells run; auto = cuda when available (default cpu)",
    )


def _add_which_cells_flags(p: argparse.ArgumentParser) -> None:
    """Which cells run, and how: filters, time limit, retries, reuse, progress."""
    p.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="PATTERN",
        help="run only cells whose name 'task/label/s<seed>/measurement' matches this glob "
        "(repeatable; e.g. 'listops/*' or '*/s0/accuracy')",
    )
    p.add_argument(
        "--cell-timeout",
        type=_positive_float,
        default=None,
        metavar="S",
        help="fail a cell that runs longer than S seconds (overrides the suite's cell_timeout; "
        "cells then run in a worker process)",
    )
    p.add_argument(
        "--no-retry-failed",
        dest="retry_failed",
        action="store_false",
        help="keep earlier failed results instead of running those cells again",
    )
    p.add_argument(
        "--reuse",
        action="append",
        type=Path,
        default=[],
        metavar="RUN_DIR",
        help="adopt the ok results another run folder holds for the same cells under its suite's name (same "
        "task, attention, seed, model, training, measurement, device, CPU instruction sets and threads) instead of "
        "recomputing them; each adopted record names its source in provenance.reused_from, and the run's notes say "
        "why the others were not adopted (repeatable)",
    )
    p.add_argument(
        "--rerun-changed-code",
        action="store_true",
        help="run again the finished cells computed by other code than this checkout's (the modules of their "
        "attention, task or measurement differ; their earlier results go to RUN_DIR/pruned/); without it they "
        "are kept and the summary says how many",
    )
    p.add_argument("--quiet", action="store_true", help="no live progress, only the summary")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def _workers(text: str) -> int | str:
    """--workers: 'auto' or a positive number of processes."""
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither auto nor a positive number of processes; "
            f"give --workers auto (the default) or e.g. --workers 2"
        )
    return value


def _at_least_two(text: str) -> int:
    value = _positive_int(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"{text}: one seed decides nothing; give at least 2")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not 0 < value < float("inf"):  # nan and inf too
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return value


def execute(args: argparse.Namespace) -> int:
    """Run (or resume) the suite into its run folder; the summary's exit code (1 when any cell failed)."""
    from attnbench.executor import RunOptions, run_suite
    from attnbench.store import default_run_dir
    from attnbench.suite import load_suite
    from attnbench.until_decided import UntilDecided, run_until_decided

    suite = load_suite(args.suite)  # validates everything before anything is written
    if args.executor == "local" and args.address:
        raise UserError("--address is for --executor ray; add --executor ray or drop --address")
    run_dir = default_run_dir(suite.name, args.fresh) if args.out is None else args.out
    if args.fresh and args.out is not None and (args.out / "cells").is_dir() and any((args.out / "cells").iterdir()):
        raise UserError(
            f"--fresh with --out {args.out}: that folder already holds results; "
            f"give a new folder or drop --out to get runs/{suite.name}-<timestamp>"
        )
    options = RunOptions(
        device=args.device,
        workers=args.workers,
        executor=args.executor,
        address=args.address,
        cell_timeout=args.cell_timeout,
        retry_failed=args.retry_failed,
        filters=tuple(args.filter),
        cpus_per_cell=args.cpus_per_cell,
        threads=args.threads,
        command=shlex.join(["attnbench", *sys.argv[1:]]),
        show_progress=not args.quiet,
        reuse=tuple(args.reuse),
        rerun_changed_code=args.rerun_changed_code,
        announce=None if args.quiet else lambda line: print(line, file=sys.stderr, flush=True),
    )
    if args.until_decided:
        settings = UntilDecided(max_seeds=args.max_seeds, pairs=args.pairs, reference=args.reference)
        announce = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
        summary, rows = run_until_decided(suite, run_dir, options, settings, announce)
        _print_undecided(rows)
    elif args.max_seeds != 10 or args.pairs != "reference" or args.reference is not None:
        raise UserError("--max-seeds, --pairs and --reference shape --until-decided; add --until-decided or drop them")
    else:
        summary = run_suite(suite, run_dir, options)
    for note in summary.notes:
        print(f"note: {note}", file=sys.stderr)
    for name, cid, reason in summary.failures:
        print(f"failed: {name}: {reason}  (attnbench show {cid} --run {run_dir})", file=sys.stderr)
    print(summary.line(suite.name))
    if summary.foreign:
        print(
            f"note: {run_dir} also holds {summary.foreign} results of cells that are not in this version of "
            f"suite {suite.name!r} or of its data; reports leave them out and name them; "
            f"`attnbench report {run_dir} --stale` reports them, `attnbench prune {run_dir}` moves them aside",
            file=sys.stderr,
        )
    return summary.exit_code


def _print_undecided(rows: Any) -> None:
    """The pairs of interest that stayed undecided, with the seeds each would need (stderr)."""
    if rows is None or not len(rows):
        return
    left = rows[rows["verdict"] == "undecided"]
    print(f"until-decided: {len(rows) - len(left)} of {len(rows)} pairs of interest decided", file=sys.stderr)
    for r in left.itertuples():
        needed = f"{int(r.seeds_needed)} seeds" if r.seeds_needed == r.seeds_needed else "no number of seeds"
        print(
            f"  undecided: {r.task}: {r.label_a} vs {r.label_b} after {r.n_seeds} seeds (needs {needed})",
            file=sys.stderr,
        )
