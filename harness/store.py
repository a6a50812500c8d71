"""The results store: one run folder per suite run, one atomically written JSON file per cell.

Layout:  RUN_DIR/run.json              suite name, normalised suite, cell ids, created, provenance, metric records,
                                       the tasks' test-row designs
         RUN_DIR/cells/<cell_id>.json  one cell's result (schema below), written only when it ends
         RUN_DIR/logs/<cell_id>.log    what the cell printed
         RUN_DIR/run.lock              who writes the folder now (pid, host, start, command; flock'ed)
         RUN_DIR/in-flight/<id>.json   a cell that is running: if it is still there when the next run
                                       starts, the process died while running that cell
         RUN_DIR/unreadable/           files that could not be read (truncated, empty, not a result, another
                                       schema), set aside with a time stamp, never deleted; their cells run again
         RUN_DIR/pruned/<stamp>/       results of cells no longer in the suite, moved by `attnbench prune`

A cell's id (`CellSpec.id`) is the first 16 hex digits of the sha256 of its canonical JSON (sorted
keys), so the same cell always lands in the same file: a rerun cannot duplicate it, and a `kill -9`
loses at most the cells in flight (a half-written file is never visible: write to a temporary file in
the same folder, fsync, then os.replace).
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from attnbench.cell_spec import CellSpec
from attnbench.errors import UserError

SCHEMA = 1
FINISHED = ("ok", "skipped")  # statuses a rerun keeps; "failed" cells are retried unless told not to
STATUSES = ("ok", "failed", "skipped")


def _utc_seconds() -> str:
    """The current UTC time, ISO 8601 to the second (run.json and the lock's times)."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def json_value(value: Any, where: str) -> Any:
    """`value` as the JSON types a result holds: numpy scalars and 0-d tensors as numbers, arrays and tensors as
    (nested) lists, tuples as lists; a TypeError naming `where` (a key path such as details.curve) for anything
    else, so that a measurement returning it fails its cell with the reason instead of stopping the run."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise TypeError(f"{where} has the key {key!r} of type {type(key).__name__}; give string keys")
        return {str(key): json_value(item, f"{where}.{key}") for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if callable(getattr(value, "tolist", None)):  # numpy scalars and arrays, torch tensors (without importing torch)
        return json_value(value.tolist(), where)
    raise TypeError(
        f"{where} is a {type(value).__module__}.{type(value).__name__}, which a result file cannot hold; return "
        f"numbers, strings, lists or mappings of them (numpy values and tensors are converted)"
    )


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that readers see the old file or the complete new one, never a partial one (nor a temporary
    file left behind when `data` cannot be written)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True, allow_nan=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def default_run_dir(suite_name: str, fresh: bool, root: Path = Path("runs")) -> Path:
    """runs/<suite> (resumed by default), or a new runs/<suite>-<timestamp> with --fresh."""
    if not fresh:
        return root / suite_name
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = root / f"{suite_name}-{stamp}"
    n = 1
    while path.exists():
        n += 1
        path = root / f"{suite_name}-{stamp}-{n}"
    return path


def _stamp() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")


def read_result(path: Path, cid: str | None = None) -> tuple[dict[str, Any] | None, str | None]:
    """The one reader of cell files, shared by `run` and `report`: (the record, None) for a readable result of
    this schema (of cell `cid` when given), else (None, why not). A file of another schema is not finished:
    `run` sets it aside (never deletes it) and runs its cell again; `report` lists it with the same words."""
    try:
        data = json.loads(path.read_text())
    except OSError as err:
        return None, f"cannot be read ({err.strerror or err})"
    except UnicodeDecodeError as err:
        return None, f"not UTF-8 text ({err.reason})"
    except json.JSONDecodeError as err:
        return None, "an empty file" if not err.doc.strip() else f"not valid JSON: {err.msg} (character {err.pos})"
    if not isinstance(data, dict):
        return None, f"a JSON {type(data).__name__}, not a mapping"
    if data.get("schema", SCHEMA) != SCHEMA:
        return None, (
            f"a result of schema {data.get('schema')!r} (another attnbench version), not schema {SCHEMA} "
            f"that this attnbench reads"
        )
    if (
        (cid is not None and data.get("cell_id") != cid)
        or data.get("status") not in STATUSES
        or not isinstance(data.get("cell"), dict)
    ):
        return None, "not the result of this cell (its cell_id, status or cell is missing or wrong)"
    problem = _malformed(data)
    return (None, f"malformed: {problem}") if problem else (data, None)


def _malformed(data: dict[str, Any]) -> str | None:
    """What is wrong with the parts of a result `run` and `report` read (the cell as a CellSpec whose id is the
    file's, metrics a mapping of numbers, details and provenance mappings, reason text), or None."""
    try:
        spec = CellSpec.from_json(data["cell"])
    except ValueError as err:
        return str(err)
    if spec.id != data.get("cell_id"):
        return f"its cell hashes to {spec.id}, not to its cell_id {data.get('cell_id')!r}"
    metrics = data.get("metrics", {})
    if not isinstance(metrics, dict):
        return f"metrics is {type(metrics).__name__}, not a mapping"
    for key, value in metrics.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            return f"metrics.{key} is {type(value).__name__} {value!r}, not a number"
    for key in ("details", "provenance"):
        if not isinstance(data.get(key) or {}, dict):
            return f"{key} is {type(data[key]).__name__}, not a mapping"
    if not isinstance(data.get("reason") or "", str) or not isinstance(data.get("label") or "", str):
        return "its reason or label is not text"
    return None


def _unreadable(path: Path, cid: str | None) -> str | None:
    """Why `path` is not a readable cell result (or run.json when cid is None); None when it is."""
    if cid is not None:
        return read_result(path, cid)[1]
    try:
        data = json.loads(path.read_text())
    except UnicodeDecodeError as err:
        return f"not UTF-8 text ({err.reason})"
    except json.JSONDecodeError as err:
        return "an empty file" if not err.doc.strip() else f"not valid JSON: {err.msg} (character {err.pos})"
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}, not a mapping"
    return None if isinstance(data.get("suite"), str) else "no suite name in it"


def process_alive(pid: int) -> bool:
    """Whether a process with this id runs on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunStore:
    """Read and write one run folder."""

    def __init__(self, run_dir: Path | str):
        self.run_dir = Path(run_dir)
        self.cells_dir = self.run_dir / "cells"
        self.logs_dir = self.run_dir / "logs"
        self.in_flight_dir = self.run_dir / "in-flight"
        self.unreadable_dir = self.run_dir / "unreadable"
        self.lock_path = self.run_dir / "run.lock"

    def check_writable(self) -> None:
        """Raise a UserError, writing nothing, if the run folder or one inside it cannot be created or written."""
        for folder in (self.run_dir, self.cells_dir, self.logs_dir, self.in_flight_dir):
            existing = folder
            while not existing.exists() and existing != existing.parent:
                existing = existing.parent
            if not existing.is_dir():
                raise UserError(
                    f"cannot use {self.run_dir} as the run folder: {existing} is a file, not a folder; "
                    f"give --out a folder path"
                )
            try:
                probe = existing / f".attnbench-probe-{os.getpid()}"
                probe.touch()
                probe.unlink()
            except OSError as err:
                raise UserError(
                    f"cannot write the run folder {self.run_dir}: {existing} is not writable "
                    f"({err.strerror}); give --out a folder you can write"
                ) from None

    def refuse_other_suite(self, suite_name: str) -> None:
        """Raise a UserError if the folder holds a run of another suite."""
        path = self.run_dir / "run.json"
        if path.is_file() and _unreadable(path, None) is None:
            existing = json.loads(path.read_text()).get("suite")
            if existing != suite_name:
                raise UserError(
                    f"{self.run_dir} holds a run of suite {existing!r}, not {suite_name!r}; "
                    f"choose another --out or use --fresh"
                )

    @contextlib.contextmanager
    def claim(self, command: str) -> Iterator[dict[str, Any] | None]:
        """Hold the folder's lock while writing it: one writer per run folder. Yields the holder recorded by a
        process that ended without releasing it (taken over), or None; a live holder is a UserError naming it."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                holder = self._holder(fd) or {}
                raise UserError(
                    f"{self.run_dir} is being written by another attnbench run (pid {holder.get('pid')} "
                    f"on {holder.get('host')}, since {holder.get('started')}: {holder.get('command')}); "
                    f"wait for it to end, or give another --out"
                ) from None
            previous = self._holder(fd)
            me = {"pid": os.getpid(), "host": socket.gethostname(), "started": _utc_seconds(), "command": command}
            self._write_holder(fd, me)
            try:
                yield previous
            finally:
                self._write_holder(fd, None)  # released: the file stays (unlinking a locked file races)
        finally:
            os.close(fd)

    @staticmethod
    def _holder(fd: int) -> dict[str, Any] | None:
        os.lseek(fd, 0, os.SEEK_SET)
        text = os.read(fd, 65536).decode("utf-8", "replace")
        try:
            holder = json.loads(text) if text.strip() else None
        except json.JSONDecodeError:
            return None
        return holder if isinstance(holder, dict) else None

    @staticmethod
    def _write_holder(fd: int, holder: dict[str, Any] | None) -> None:
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        if holder is not None:
            os.write(fd, (json.dumps(holder) + "\n").encode())
        os.fsync(fd)

    def open(
        self,
        suite: dict[str, Any],
        cell_ids: list[str],
        provenance: dict[str, Any],
        metrics: dict[str, dict[str, Any]] | None = None,
        test_rows: dict[str, str] | None = None,
    ) -> list[str]:
        """Create (or resume) the folder and record the run (with `metrics`, the records of the metrics its
        measurements declare, and `test_rows`, its tasks' declared test-row designs: both read by the report);
        refuse a folder of a different suite.
        Returns notes on files set aside because they could not be read (their cells run again)."""
        self.refuse_other_suite(suite["name"])
        notes = []
        path = self.run_dir / "run.json"
        existing = None
        if path.is_file():
            problem = _unreadable(path, None)
            if problem:
                notes.append(self._set_aside(path, problem, "it is written anew"))
            else:
                existing = json.loads(path.read_text())
        for folder in (self.cells_dir, self.logs_dir, self.in_flight_dir):
            folder.mkdir(parents=True, exist_ok=True)
        for stale in self.cells_dir.glob(".*.tmp"):  # left by a killed writer
            stale.unlink(missing_ok=True)
        for cell in sorted(self.cells_dir.glob("*.json")):
            problem = _unreadable(cell, cell.stem)
            if problem:
                notes.append(self._set_aside(cell, problem, "the cell runs again"))
        now = _utc_seconds()
        info = {
            "schema": SCHEMA,
            "suite": suite["name"],
            "resolved_suite": suite,
            "cell_ids": cell_ids,
            "created": existing.get("created", now) if existing else now,
            "updated": now,
            "provenance": provenance,
            **({"metrics": metrics} if metrics is not None else {}),
            **({"test_rows": test_rows} if test_rows is not None else {}),
        }
        first_split = (
            (existing.get("first_split") or (existing.get("provenance") or {}).get("split"))
            if existing
            else provenance.get("split")
        )
        if first_split:
            info["first_split"] = first_split
        write_json_atomic(path, info)
        return notes

    def update_plan(self, cell_ids: list[str]) -> None:
        """Record a plan that grew while running (a sweep's chosen trials at the other seeds) in run.json."""
        path = self.run_dir / "run.json"
        info = json.loads(path.read_text())
        info["cell_ids"] = cell_ids
        info["updated"] = _utc_seconds()
        write_json_atomic(path, info)

    def _set_aside(self, path: Path, problem: str, then: str) -> str:
        """Move an unreadable file to RUN_DIR/unreadable/ (never delete it); one line saying so."""
        self.unreadable_dir.mkdir(exist_ok=True)
        target = self.unreadable_dir / f"{path.name}.{_stamp()}"
        os.replace(path, target)
        return f"{path} was unreadable ({problem}); set aside as {target}; {then}"

    def run_info(self) -> dict[str, Any]:
        """The run.json record."""
        path = self.run_dir / "run.json"
        if not path.is_file():
            raise UserError(f"{self.run_dir} is not a run folder (no run.json); give a folder made by `attnbench run`")
        problem = _unreadable(path, None)
        if problem:
            raise UserError(
                f"{path} is unreadable ({problem}); rerun `attnbench run SUITE --out {self.run_dir}` to "
                f"write it anew (finished cells are kept)"
            )
        return json.loads(path.read_text())

    def cell_path(self, cid: str) -> Path:
        return self.cells_dir / f"{cid}.json"

    def log_path(self, cid: str) -> Path:
        return self.logs_dir / f"{cid}.log"

    def read_cell(self, cid: str) -> dict[str, Any] | None:
        """The stored result of a cell, or None if it has not finished (or its file is unreadable)."""
        path = self.cell_path(cid)
        return read_result(path, cid)[0] if path.is_file() else None

    def status(self, cid: str) -> str | None:
        record = self.read_cell(cid)
        return None if record is None else record.get("status")

    def write_cell(self, record: dict[str, Any]) -> Path:
        """Store one finished cell (ok, failed or skipped) atomically."""
        path = self.cell_path(record["cell_id"])
        write_json_atomic(path, record)
        return path

    def records(self) -> Iterator[dict[str, Any]]:
        """Every readable stored cell result."""
        for path in sorted(self.cells_dir.glob("*.json")):
            record = read_result(path, path.stem)[0]
            if record is not None:
                yield record

    def planned(self) -> set[str] | None:
        """The ids of the cells of the suite as it stood at the last run (run.json), or None without a plan."""
        path = self.run_dir / "run.json"
        if not path.is_file() or _unreadable(path, None):
            return None
        ids = json.loads(path.read_text()).get("cell_ids")
        return set(ids) if isinstance(ids, list) else None

    def stale(self) -> list[Path]:
        """Stored cell files outside the plan: results of an earlier version of the suite or of its inputs."""
        planned = self.planned()
        if planned is None:
            return []
        return [p for p in sorted(self.cells_dir.glob("*.json")) if p.stem not in planned]

    def set_aside(self, cell_ids: list[str]) -> Path | None:
        """Move the stored records of `cell_ids` (and their logs) to RUN_DIR/pruned/<time stamp>/, never deleting
        them, so that those cells run again; the folder they went to, or None when there were none."""
        paths = [self.cell_path(cid) for cid in cell_ids if self.cell_path(cid).is_file()]
        return self._move_aside(paths)

    def prune(self) -> tuple[list[Path], Path | None]:
        """Move the stale cell files (and their logs) to RUN_DIR/pruned/<time stamp>/, never deleting them;
        (the files moved, the folder they went to or None when there were none)."""
        stale = self.stale()
        return stale, self._move_aside(stale)

    def _move_aside(self, paths: list[Path]) -> Path | None:
        if not paths:
            return None
        target = self.run_dir / "pruned" / _stamp()
        (target / "cells").mkdir(parents=True)
        for path in paths:
            os.replace(path, target / "cells" / path.name)
            log = self.log_path(path.stem)
            if log.is_file():
                (target / "logs").mkdir(exist_ok=True)
                os.replace(log, target / "logs" / log.name)
        return target

    def first_split(self) -> dict[str, Any] | None:
        """The split of the cores the run's first sitting ran with (run.json), or None for a new folder."""
        path = self.run_dir / "run.json"
        if not path.is_file() or _unreadable(path, None):
            return None
        info = json.loads(path.read_text())
        split = info.get("first_split") or (info.get("provenance") or {}).get("split")
        return split if isinstance(split, dict) else None

    def mark_in_flight(self, cid: str, marker: dict[str, Any]) -> None:
        """Record that cell `cid` is running (marker: the cell, its resolved configs, pid, host, start)."""
        write_json_atomic(self.in_flight_dir / f"{cid}.json", marker)

    def clear_in_flight(self, cid: str) -> None:
        """The cell is no longer running (its result is stored, or the run stopped in order)."""
        (self.in_flight_dir / f"{cid}.json").unlink(missing_ok=True)

    def in_flight(self) -> dict[str, dict[str, Any]]:
        """Markers of cells that were running when their process ended (read while holding the lock)."""
        markers = {}
        for path in sorted(self.in_flight_dir.glob("*.json")):
            try:
                marker = json.loads(path.read_text())
            except (OSError, UnicodeDecodeError, json.JSONDecodeError):
                marker = None  # written while the process died: only its name says which cell
            markers[path.stem] = marker if isinstance(marker, dict) else {}
        return markers


def result_record(
    cell: CellSpec,
    *,
    status: str,
    reason: str | None = None,
    error: str | None = None,
    metrics: dict[str, float] | None = None,
    details: dict[str, Any] | None = None,
    provenance: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A cell result in the stored schema (DESIGN: 'Cell result JSON')."""
    return {
        "schema": SCHEMA,
        "cell_id": cell.id,
        "cell": cell.to_json(),
        "label": cell.attention.label,
        "status": status,
        "reason": reason,
        "error": error,
        "metrics": dict(metrics or {}),
        "details": dict(details or {}),
        "provenance": dict(provenance or {}),
    }
