"""`attnbench show`: stored cell results, by id, name, glob or file."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from attnbench.cell_spec import CellSpec
from attnbench.errors import UserError


def add_parser(verbs: Any) -> argparse.ArgumentParser:
    """The `show` verb's arguments."""
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
    return p


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


def execute(args: argparse.Namespace) -> int:
    """Print every stored cell result `args.cell` names."""
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
