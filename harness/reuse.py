"""Results another run folder already holds: `attnbench run SUITE --reuse OTHER_RUN` adopts them.

Suites often share cells that differ only in the suite's name: phase-a-study's paper-setting rows on Rotten
Tomatoes are paper-rt-qk-none's seeds 0-2, cell for cell. A cell's result depends on its spec (task and its
input files, attention, seed, model, training, measurement), the device and the torch threads it ran with, not
on the name of the suite that planned it. So a cell not finished here whose twin (the same spec under the other
run's suite name) finished ok there, on the same device and threads (on a CPU: of the same instruction sets, which
the native kernels are built for), is adopted instead of recomputed: its record is copied with this run's spec and
id, and its provenance gains `reused_from` (folder, suite, cell id). The run's notes say how many cells were not
adopted and why, always when none was.
"""

from __future__ import annotations

import collections
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
    store: RunStore,
    specs: Iterable[CellSpec],
    sources: list[tuple[RunStore, str]],
    device: str,
    threads: int | None,
    here: dict[str, Any] | None = None,
) -> list[str]:
    """Copy into `store` the ok results of the unfinished `specs` that a source holds for the same spec under its
    suite name, run on `device` (on a CPU: one of the same instruction sets as `here`, this machine's provenance,
    whose native kernels are built for it) with `threads` torch threads. Returns notes on what was adopted and why
    the rest was not, always one when nothing was."""
    here = here or {}
    adopted, unfinished, why_not = 0, 0, collections.Counter()
    for spec in specs:
        if store.status(spec.id) in FINISHED:
            continue
        unfinished += 1
        reasons = []
        for source, suite in sources:
            twin = dataclasses.replace(spec, suite=suite).id
            record = source.read_cell(twin)
            reason = REASONS[4] if record is None and source.cell_path(twin).is_file() else None
            reason = reason or _not_adoptable(record, device, threads, here)
            if reason is None:
                store.write_cell(adopted_record(record, spec, source.run_dir, suite))
                adopted += 1
                break
            reasons.append(reason)
        else:
            why_not[min(reasons, key=REASONS.index)] += 1
    notes = [f"adopted {adopted} finished cells from --reuse (provenance: reused_from)"] if adopted else []
    if unfinished and not adopted:
        notes.append(f"--reuse adopted none of the {unfinished} cells not finished here")
    for reason, count in sorted(why_not.items(), key=lambda item: REASONS.index(item[0])):
        notes.append(f"--reuse: {count} cells {reason.format(device=device, threads=threads)}; they run here")
    return notes


REASONS = (  # why a cell was not adopted, most telling first
    "have twins that ran on another CPU, of other instruction sets (the native kernels are built for the "
    "machine's; their last bits may differ)",
    "have twins that ran on another device than this sitting's ({device})",
    "have twins that ran with another thread count than this sitting's {threads} (their last bits may differ)",
    "have twins there that did not end ok (failed or skipped)",
    "have twins whose result files there are unreadable (`attnbench report` on that folder says why)",
    "have no finished twin in the --reuse folders (the same task and inputs, attention, seed, model, training and "
    "measurement under the folder's suite name)",
)


def _not_adoptable(record: dict[str, Any] | None, device: str, threads: int | None, here: dict[str, Any]) -> str | None:
    """Why a twin's record is not adopted here (one of REASONS), or None when it is."""
    if record is None:
        return REASONS[5]
    if record.get("status") != "ok":
        return REASONS[3]
    ran = record["provenance"]
    if ran.get("device") != device:
        return REASONS[1]
    if device == "cpu" and not _same_cpu(ran, here):
        return REASONS[0]
    if ran.get("threads") != threads:
        return REASONS[2]
    return None


def _same_cpu(ran: dict[str, Any], here: dict[str, Any]) -> bool:
    """Whether a record's CPU has this machine's instruction sets (records without them: the same CPU model)."""
    if ran.get("cpu_isa") and here.get("cpu_isa"):
        return ran["cpu_isa"] == here["cpu_isa"]
    return ran.get("cpu") == here.get("cpu")
