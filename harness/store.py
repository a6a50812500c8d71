"""The results store: one run folder per suite run, one atomically written JSON file per cell.

Layout:  RUN_DIR/run.json              suite name, normalised suite, cell ids, created, provenance
         RUN_DIR/cells/<cell_id>.json  one cell's result (schema below), written only when it ends
         RUN_DIR/logs/<cell_id>.log    what the cell printed

A cell's id is the first 16 hex digits of the sha256 of its canonical JSON (sorted keys), so the
same cell always lands in the same file: a rerun cannot duplicate it, and a `kill -9` loses at most
the cells in flight (a half-written file is never visible: write to a temporary file in the same
folder, fsync, then os.replace).
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.errors import UserError

SCHEMA = 1
FINISHED = ("ok", "skipped")  # statuses a rerun keeps; "failed" cells are retried unless told not to


def cell_id(cell: dict[str, Any]) -> str:
    """First 16 hex digits of sha256 over the cell's canonical JSON (sorted keys, no spaces)."""
    canonical = json.dumps(cell, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that readers see the old file or the complete new one, never a partial one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True, allow_nan=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
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


class RunStore:
    """Read and write one run folder."""

    def __init__(self, run_dir: Path | str):
        self.run_dir = Path(run_dir)
        self.cells_dir = self.run_dir / "cells"
        self.logs_dir = self.run_dir / "logs"

    def open(self, suite: dict[str, Any], cell_ids: list[str], provenance: dict[str, Any]) -> None:
        """Create (or resume) the folder and record the run; refuse a folder of a different suite."""
        existing = self.run_info() if (self.run_dir / "run.json").exists() else None
        if existing is not None and existing.get("suite") != suite["name"]:
            raise UserError(f"{self.run_dir} holds a run of suite {existing.get('suite')!r}, not {suite['name']!r}; "
                            f"choose another --out or use --fresh")
        self.cells_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        for stale in self.cells_dir.glob(".*.tmp"):  # left by a killed writer
            stale.unlink(missing_ok=True)
        now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        info = {"schema": SCHEMA, "suite": suite["name"], "resolved_suite": suite, "cell_ids": cell_ids,
                "created": existing.get("created", now) if existing else now, "updated": now,
                "provenance": provenance}
        write_json_atomic(self.run_dir / "run.json", info)

    def run_info(self) -> dict[str, Any]:
        """The run.json record."""
        path = self.run_dir / "run.json"
        if not path.is_file():
            raise UserError(f"{self.run_dir} is not a run folder (no run.json); give a folder made by `attnbench run`")
        return json.loads(path.read_text())

    def cell_path(self, cid: str) -> Path:
        return self.cells_dir / f"{cid}.json"

    def log_path(self, cid: str) -> Path:
        return self.logs_dir / f"{cid}.log"

    def read_cell(self, cid: str) -> dict[str, Any] | None:
        """The stored result of a cell, or None if it has not finished."""
        path = self.cell_path(cid)
        return json.loads(path.read_text()) if path.is_file() else None

    def status(self, cid: str) -> str | None:
        record = self.read_cell(cid)
        return None if record is None else record.get("status")

    def write_cell(self, record: dict[str, Any]) -> Path:
        """Store one finished cell (ok, failed or skipped) atomically."""
        path = self.cell_path(record["cell_id"])
        write_json_atomic(path, record)
        return path

    def records(self) -> Iterator[dict[str, Any]]:
        """Every stored cell result."""
        for path in sorted(self.cells_dir.glob("*.json")):
            yield json.loads(path.read_text())


def result_record(cell: dict[str, Any], *, status: str, reason: str | None = None, error: str | None = None,
                  metrics: dict[str, float] | None = None, details: dict[str, Any] | None = None,
                  provenance: dict[str, Any] | None = None) -> dict[str, Any]:
    """A cell result in the stored schema (DESIGN: 'Cell result JSON')."""
    return {"schema": SCHEMA, "cell_id": cell_id(cell), "cell": cell, "label": cell["attention"]["label"],
            "status": status, "reason": reason, "error": error, "metrics": dict(metrics or {}),
            "details": dict(details or {}), "provenance": dict(provenance or {})}
