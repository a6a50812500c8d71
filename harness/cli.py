"""The `attnbench` command: list, check, run, report, prune, leaderboard, show.

User mistakes (a misspelt suite, attention or option, a missing folder) print one line on stderr
and exit with code 2; `run` exits 1 when any cell failed, `check` when any property fails, 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attnbench.cell_spec import CellSpec
from attnbench.errors import UserError

LISTABLE = ("attention", "tasks", "measurements", "metrics", "suites")
_ALIASES = {
    "attentions": "attention",
    "task": "tasks",
    "measurement": "measurements",
    "metric": "metrics",
    "suite": "suites",
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

    p = verbs.add_parser(
        "list",
        help="list attentions, tasks, measurements, metrics or suites",
        description="List registered components with their options, defaults and help "
        "(attentions also with capability flags), or the shipped suites.",
    )
    p.add_argument(
        "what",
        nargs="?",
        default=None,
        metavar="WHAT",
        help=f"one of: {', '.join(LISTABLE)} (default: a short listing of everything)",
    )
    p.add_argument(
        "pattern",
        nargs="?",
        default="*",
        help="glob over names, e.g. '*linear*' (default: all); for attentions also a "
        "'package.module:Class' string, described as the registry would build it",
    )

    p = verbs.add_parser(
        "check",
        help="run the attention property tests on one attention",
        description="Check the properties every attention must have, on a registered name, an "
        "entry-point plugin or a 'package.module:Class' string: padding invariance, "
        "finite outputs at lengths 1 and 4096, gradients, determinism in evaluation, "
        "causality when claimed, one head's parameters shared by every head; each over "
        "several (batch, heads) shapes, with the native kernels on and off. Prints each "
        "property's verdict; exit code 0 when all hold, 1 otherwise.",
    )
    p.add_argument("attention", metavar="NAME|module:Class")
    p.add_argument(
        "--option",
        "-o",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an attention option (repeatable; the value is read as YAML), e.g. -o num_features=64",
    )

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
        "task, attention, seed, model, training, measurement, device and threads) instead of recomputing "
        "them; each adopted record names its source in provenance.reused_from (repeatable)",
    )
    p.add_argument("--quiet", action="store_true", help="no live progress, only the summary")

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

    p = verbs.add_parser(
        "prune",
        help="move stored cells that are not in the suite as it stands aside",
        description="Move RUN_DIR's stored results of cells that are no longer in its suite (the "
        "plan of its last `attnbench run`: an earlier version of the suite or of its "
        "data) to RUN_DIR/pruned/<time stamp>/; nothing is deleted.",
    )
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")

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

    p = verbs.add_parser(
        "show",
        help="show stored cell results",
        description="Print stored cell results: configuration, status, metrics and provenance.",
    )
    p.add_argument(
        "cell",
        metavar="CELL",
        help="a cell name task/label/s<seed>/measurement or a glob over names (every match is shown), "
        "a cell id (or its prefix), or a cells/<id>.json path",
    )
    p.add_argument(
        "--run",
        type=Path,
        default=None,
        metavar="RUN_DIR",
        help="the run folder to look the id up in (default: every folder under runs/)",
    )
    p.add_argument("--json", action="store_true", help="print the whole stored JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `attnbench` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return {
            "list": cmd_list,
            "check": cmd_check,
            "run": cmd_run,
            "report": cmd_report,
            "prune": cmd_prune,
            "leaderboard": cmd_leaderboard,
            "show": cmd_show,
        }[args.verb](args)
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


def _positive_float(text: str) -> float:
    value = float(text)
    if not 0 < value < float("inf"):  # nan and inf too
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return value


# --- list -------------------------------------------------------------------------------------


def cmd_list(args: argparse.Namespace) -> int:
    from attnbench.errors import unknown_name_message

    what = _ALIASES.get(args.what, args.what)
    if what is None:
        for kind in LISTABLE:
            print(f"{kind}: {', '.join(_names(kind, args.pattern))}")
        return 0
    if what not in LISTABLE:
        raise UserError(unknown_name_message("listing", args.what, LISTABLE))
    if what == "suites":
        from attnbench.suite import suite_description, suites_dir

        for name in _names("suites", args.pattern):
            print(f"{name:<14} {suite_description(suites_dir() / f'{name}.yaml')}")
        return 0
    if what == "metrics":
        import fnmatch

        for name, text in _metric_descriptions().items():
            if fnmatch.fnmatchcase(name, args.pattern):
                print(f"{name:<22} {text}")
        return 0
    registry = _registry(what)
    if what == "attention" and ":" in args.pattern:
        print(_describe(registry.get(args.pattern), show_capabilities=True))
        return 0
    names = registry.names(args.pattern)
    if not names:
        raise UserError(f"no {registry.kind} matches {args.pattern!r}; registered: {', '.join(registry.names())}")
    for name in names:
        print(_describe(registry.get(name), show_capabilities=what == "attention"))
    return 0


def _registry(kind: str) -> Any:
    if kind == "attention":
        from attnbench.registry import ATTENTIONS

        return ATTENTIONS
    if kind == "tasks":
        from attnbench.tasks import TASKS

        return TASKS
    from attnbench.measurements import MEASUREMENTS

    return MEASUREMENTS


def _names(kind: str, pattern: str) -> list[str]:
    import fnmatch

    if kind == "suites":
        from attnbench.suite import suite_names

        return [n for n in suite_names() if fnmatch.fnmatchcase(n, pattern)]
    if kind == "metrics":
        return [n for n in _metric_descriptions() if fnmatch.fnmatchcase(n, pattern)]
    return _registry(kind).names(pattern)


def _metric_descriptions() -> dict[str, str]:
    """The declared metrics (attnbench.metrics.register_metric, built-in and from measurement modules): name or glob ->
    which way is better and what it is."""
    from attnbench.measurements import measurement_names
    from attnbench.metrics import METRICS

    measurement_names()  # imports every measurement module, which declares its metrics
    arrows = {"max": "higher is better", "min": "lower is better", None: "not ranked"}
    return {
        info.pattern: f"[{arrows[info.direction]}] {info.description}"
        for info in sorted(METRICS.values(), key=lambda m: m.pattern)
    }


def _describe(entry: Any, *, show_capabilities: bool) -> str:
    """A registered component: name, description, capability flags, then one line per option."""
    from attnbench.registry import AttentionConfig
    from attnbench.suite import MODEL_SET_ATTENTION_OPTIONS

    lines = [f"{entry.name}: {entry.description}" + ("" if entry.source == "builtin" else f"  [{entry.source}]")]
    set_elsewhere = MODEL_SET_ATTENTION_OPTIONS if issubclass(entry.config, AttentionConfig) else ("seed",)
    if show_capabilities:
        depends = {flag for flag, _ in entry.depends}
        flags = ", ".join(
            f"{k}={'yes' if v else 'no'}" + ("*" if k in depends else "")
            for k, v in entry.capabilities.as_dict().items()
        )
        lines.append(
            f"  capabilities: {flags}" + ("  (* with the default options; depends on them)" if depends else "")
        )
        if not entry.capabilities.causal:  # no causal form: the inherited option only refuses True
            set_elsewhere = (*set_elsewhere, "causal")
    for row in entry.options():
        if row["name"] in set_elsewhere:
            continue
        lines.append(
            f"  {row['name']} ({row['type']}; default {json.dumps(row['default'], default=str)}): {row['help']}"
        )
    return "\n".join(lines)


# --- check ------------------------------------------------------------------------------------


def cmd_check(args: argparse.Namespace) -> int:
    from attnbench.attention_properties import HEAD_DIM, MAX_LENGTH, check_attention
    from attnbench.registry import ATTENTIONS

    options = _parse_options(args.option)
    ATTENTIONS.make_config(
        args.attention, head_dim=HEAD_DIM, max_length=MAX_LENGTH, **options
    )  # unknown names and options: one line, exit 2
    verdicts = check_attention(args.attention, options)
    for verdict in verdicts:
        print(verdict.line(), flush=True)
    failed = sum(v.ok is False for v in verdicts)
    print(f"{args.attention}: {'all properties hold' if not failed else f'{failed} of {len(verdicts)} checks fail'}")
    return 1 if failed else 0


def _parse_options(pairs: list[str]) -> dict[str, Any]:
    """['num_features=64', ...] -> {'num_features': 64, ...}, each value read as YAML."""
    import yaml

    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UserError(f"--option {pair!r} is not KEY=VALUE; e.g. --option num_features=64")
        options[key] = yaml.safe_load(value)
    return options


# --- run --------------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    from attnbench.executor import RunOptions, run_suite
    from attnbench.store import default_run_dir
    from attnbench.suite import load_suite

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
        announce=None if args.quiet else lambda line: print(line, file=sys.stderr, flush=True),
    )
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


# --- report, leaderboard ----------------------------------------------------------------------


def _report_module() -> Any:
    try:
        import attnbench.report as report
    except ImportError as err:
        raise UserError(f"the report module is not available ({err}); reports cannot be built yet") from None
    return report


def cmd_report(args: argparse.Namespace) -> int:
    from attnbench.store import RunStore

    store = RunStore(args.run_dir)
    store.run_info()  # a clear error if this is not a run folder
    path = _report_module().write_report(args.run_dir, args.out, stale=args.stale)
    _print_leaderboard(path)
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


def cmd_prune(args: argparse.Namespace) -> int:
    from attnbench.store import RunStore

    store = RunStore(args.run_dir)
    store.run_info()
    with store.claim(shlex.join(["attnbench", *sys.argv[1:]])):
        moved, target = store.prune()
    if not moved:
        print(f"{args.run_dir}: every stored cell belongs to the suite as it stands; nothing to prune")
    else:
        print(f"{args.run_dir}: moved {len(moved)} stored cells that are not in the suite as it stands to {target}")
    return 0


def cmd_leaderboard(args: argparse.Namespace) -> int:
    from attnbench.store import RunStore

    for run_dir in args.run_dirs:
        RunStore(run_dir).run_info()
    path = _report_module().write_leaderboard(list(args.run_dirs), args.out)
    _print_leaderboard(path)
    print(f"leaderboard: {path} (index.html, report.md, tables/, plots/)")
    return 0


def _print_leaderboard(report_dir: Path) -> None:
    """Print the leaderboard table the report wrote (tables/leaderboard.md), when there is one, then the report's
    summary (top groups, labels at chance, points not measured: the bullets at the top of report.md)."""
    table = report_dir / "tables" / "leaderboard.md"
    if table.is_file():
        print(table.read_text().rstrip())
    summary = report_dir / "report.md"
    if summary.is_file():
        lines = summary.read_text().split("\n### ")[0].splitlines()
        bullets = [line for line in lines if line.startswith("- ")]
        if bullets:
            print("\nSummary:\n" + "\n".join(bullets))


# --- show -------------------------------------------------------------------------------------


def find_cell_files(cell: str, run_dir: Path | None) -> list[Path]:
    """Cell result files from a path; a cell id (prefix); or a cell name task/label/s<seed>/measurement or a glob
    over names (every match, in name order), within one run folder or every folder under runs/."""
    import fnmatch

    path = Path(cell)
    if path.suffix == ".json" or path.is_file():
        if not path.is_file():
            raise UserError(f"cell file {cell!r} does not exist")
        return [path]
    roots = [run_dir] if run_dir is not None else sorted(p for p in Path("runs").glob("*") if p.is_dir())
    if run_dir is not None and not (run_dir / "cells").is_dir():
        raise UserError(f"{run_dir} is not a run folder (no cells/); give the folder made by `attnbench run`")
    where = str(run_dir) if run_dir is not None else "any folder under runs/"
    if "/" not in cell and not any(c in cell for c in "*?["):  # an id or its prefix
        matches = [p for root in roots for p in sorted((root / "cells").glob(f"{cell}*.json"))]
        if not matches:
            raise UserError(
                f"no cell id starting with {cell!r} in {where}; give a cell id (the file names in "
                f"RUN_DIR/cells/) or a cell name task/label/s<seed>/measurement"
            )
        if len(matches) > 1:
            raise UserError(
                f"cell id prefix {cell!r} is ambiguous ({len(matches)} files, e.g. {matches[0]}, "
                f"{matches[1]}); give more characters or --run"
            )
        return matches
    named = sorted(
        (name, p)
        for root in roots
        for p in (root / "cells").glob("*.json")
        if (name := _stored_cell_name(p)) is not None and fnmatch.fnmatchcase(name, cell)
    )
    if not named:
        raise UserError(
            f"no cell named {cell!r} in {where}; names are task/label/s<seed>/measurement as "
            f"`attnbench run` prints them (globs work: 'listops/*/s0/accuracy')"
        )
    return [p for _, p in named]


def _stored_cell_name(path: Path) -> str | None:
    """The name task/label/s<seed>/measurement of a stored cell result, or None for a file that is not one."""
    try:
        return CellSpec.from_json(json.loads(path.read_text())["cell"]).name
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


def cmd_show(args: argparse.Namespace) -> int:
    paths = find_cell_files(args.cell, args.run)
    for i, path in enumerate(paths):
        if i:
            print()
        _show_cell(path, as_json=args.json)
    return 0


def _show_cell(path: Path, *, as_json: bool) -> None:
    """Print one stored cell result: its name, status, configuration, metrics and provenance."""
    try:
        record = json.loads(path.read_text())
        name = CellSpec.from_json(record["cell"]).name
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
        raise UserError(f"{path} is not a cell result file ({err})") from None
    if as_json:
        print(json.dumps(record, indent=1, sort_keys=True))
        return
    prov = record.get("provenance", {})
    print(
        f"{name}  ({record['cell_id']})  {record['status']}" + (f": {record['reason']}" if record.get("reason") else "")
    )
    print(f"attention {json.dumps(record['cell']['attention'])}")
    print(f"task {json.dumps(record['cell']['task'])}  measurement {json.dumps(record['cell']['measurement'])}")
    for key, value in sorted(record.get("metrics", {}).items()):
        print(f"  {key:<24} {value:.6g}" if isinstance(value, float) else f"  {key:<24} {value}")
    print(
        f"ran {prov.get('seconds', 0):.1f} s on {prov.get('device')} ({prov.get('cpu')}, {prov.get('threads')} threads) "
        f"at {prov.get('started_at')}; attnbench {prov.get('attnbench_version')} git {prov.get('git_commit')}"
        + (" (dirty)" if prov.get("git_dirty") else "")
    )
    if record.get("error"):
        print(record["error"].rstrip(), file=sys.stderr)
