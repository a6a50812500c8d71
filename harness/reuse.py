"""Results another run folder already holds: `attnbench run SUITE --reuse OTHER_RUN` adopts them.

Suites often share cells that differ only in the suite's name: phase-a-study's paper-setting rows on Rotten
Tomatoes are paper-rt-qk-none's seeds 0-2, cell for cell. A cell's result depends on its spec (task and its
input files, attention, seed, model, training, measurement), the device and the torch threads it ran with, not
on the name of the suite that planned it. So a cell not finished here whose twin (the same spec under the other
run's suite name) finished ok there, on the same device and threads, is adopted instead of recomputed: its
record is copied with this run's spec and id, and its provenance gains `reused_from` (folder, suite, cell id).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from attnbench.cell_spec import CellSpec
from attnbench.errors import UserError
from attnbench.store import FINISHED, RunStore


def reuse_sources(folders: Iterable[Path], run_dir: Path) -> list[tuple[RunStore, str]]:
    """(store, suite name) of each --reuse folder; a UserError for one that is not a run folder or is `run_dir`."""
    sources = []
    for folder in folders:
        if folder.resolve() == run_dir.resolve():
            raise UserError(f"--reuse {folder} is the run folder itself; give another run's folder")
        store = RunStore(folder)
        try:
            suite = store.run_info()["suite"]
        except UserError as err:
            raise UserError(f"--reuse {folder}: {err}") from None
        sources.append((store, suite))
    return sources


def adopted_record(record: dict[str, Any], spec: CellSpec, source: Path, suite: str) -> dict[str, Any]:
    """The twin's record as this run's cell: this spec and id, the provenance saying where it came from."""
    reused = {"run": str(source), "suite": suite, "cell_id": record["cell_id"]}
    return {
        **record,
        "cell": spec.to_json(),
        "cell_id": spec.id,
        "provenance": {**record.get("provenance", {}), "reused_from": reused},
    }


def adopt_results(
    store: RunStore, specs: Iterable[CellSpec], sources: list[tuple[RunStore, str]], device: str, threads: int | None
) -> list[str]:
    """Copy into `store` the ok results of the unfinished `specs` that a source holds for the same spec under its
    suite name, run on `device` with `threads` torch threads. Returns notes on what was adopted and what not."""
    adopted, other_setup = 0, 0
    for spec in specs:
        if store.status(spec.id) in FINISHED:
            continue
        for source, suite in sources:
            record = source.read_cell(dataclasses.replace(spec, suite=suite).id)
            if record is None or record.get("status") != "ok":
                continue
            ran = record.get("provenance", {})
            if ran.get("device") != device or ran.get("threads") != threads:
                other_setup += 1
                continue
            store.write_cell(adopted_record(record, spec, source.run_dir, suite))
            adopted += 1
            break
    notes = [f"adopted {adopted} finished cells from --reuse (provenance: reused_from)"] if adopted else []
    if other_setup:
        notes.append(
            f"--reuse: {other_setup} twin results ran on another device or thread count than this sitting "
            f"({device}, {threads} threads) and were not adopted (their last bits may differ); they run here"
        )
    return notes
