"""Run a suite: pick the cells, claim the run folder, choose an executor, store every record.

Every cell ends as one stored record (ok / failed / skipped); an exception, a NaN loss, running out
of memory or a time-out fails that cell only, and the suite goes on. Resume is the default: cells
whose file says ok or skipped are not run again; failed cells are retried unless
`retry_failed=False`. One process writes a run folder at a time (RUN_DIR/run.lock). How many cells
run at once, and with how many torch threads, is the split that attnbench.workers chooses
(`workers="auto"`) or the options give. Cells run in this process (with DEFAULT_CELL_TIMEOUT as a
soft limit) unless a time-out is set or the split has more than one worker; then each runs in a
spawned worker process that is killed when the cell overruns its time. A cell whose process died
(left in RUN_DIR/in-flight/) is recorded as failed when the next run starts; if it is retried, it
runs in a process of its own, after the other cells.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from attnbench.cell import DEFAULT_CELL_TIMEOUT, PROCESS_DIED, Cell, CellSink, Executor, died_before, output_to
from attnbench.cell_spec import CellSpec
from attnbench.code_fingerprint import UNKNOWN, cell_code, changed_modules, code_changed
from attnbench.errors import UserError
from attnbench.kernels import fla_route
from attnbench.measurements import measurement_records
from attnbench.plan import Suite
from attnbench.progress import ProgressUI
from attnbench.provenance import device_name, machine_provenance, now, resolve_device
from attnbench.reuse import adopt_results, reuse_sources
from attnbench.store import FINISHED, RunStore, process_alive
from attnbench.sweep import chosen_trials
from attnbench.tasks import task_designs
from attnbench.workers import (
    LOAD_SECONDS,
    Split,
    available_gib,
    choose_split,
    machine_facts,
    running_workers,
    suite_facts,
)


@dataclasses.dataclass
class RunOptions:
    """How to run a suite (the `attnbench run` flags)."""

    device: str = "cpu"  # cpu | cuda | auto
    workers: int | Literal["auto"] = "auto"  # local processes (auto: attnbench.workers); Ray: cells at once locally
    executor: Literal["local", "ray"] = "local"
    address: str | None = None  # Ray cluster address; None starts a local instance
    cell_timeout: float | None = None  # seconds; overrides the suite's cell_timeout
    retry_failed: bool = True
    filters: tuple[str, ...] = ()  # glob patterns over cell names; a cell runs if any matches
    cpus_per_cell: int = 1  # Ray: CPUs each cell task asks for (and its torch threads)
    threads: int | None = None  # torch threads per cell (default: the split's / cpus_per_cell on Ray)
    command: str = ""
    show_progress: bool = True
    announce: Callable[[str], None] | None = None  # receives the line saying which split runs (local executor)
    reuse: tuple[Path, ...] = ()  # other run folders whose ok twins of unfinished cells are adopted (attnbench.reuse)
    rerun_changed_code: bool = False  # rerun finished cells computed by other code (attnbench.code_fingerprint)

    @property
    def ray_threads(self) -> int:
        """Torch threads of each Ray cell: --threads, else the CPUs the cell asks for."""
        return self.threads or self.cpus_per_cell


@dataclasses.dataclass
class RunSummary:
    """What a run did; `exit_code` is 1 if any selected cell ended failed, else 0."""

    run_dir: Path
    selected: int
    ran: int
    resumed: int
    counts: dict[str, int]
    failures: list[tuple[str, str, str]]  # (cell name, cell id, reason)
    seconds: float
    foreign: int = 0  # stored results of cells that are not in this suite (an earlier version of it)
    notes: list[str] = dataclasses.field(default_factory=list)  # files set aside, deaths recorded, lock taken over
    code_changed: int = 0  # finished cells whose code differs from this checkout's (kept, or rerun when asked)
    code_rerun: bool = False  # whether those were rerun (--rerun-changed-code)

    @property
    def exit_code(self) -> int:
        return 1 if self.counts.get("failed", 0) else 0

    def line(self, suite_name: str) -> str:
        c = self.counts
        return (
            f"{suite_name}: {self.selected} cells: {c.get('ok', 0)} ok, {c.get('failed', 0)} failed, "
            f"{c.get('skipped', 0)} skipped ({self.resumed} kept from before, {self.ran} run{self._code()}) "
            f"in {self.seconds:.1f} s -> {self.run_dir}"
        )

    def _code(self) -> str:
        if not self.code_changed:
            return ""
        if self.code_rerun:
            return f", {self.code_changed} of them again as their code changed"
        return f"; {self.code_changed} of those kept were computed by other code: --rerun-changed-code reruns them"


def select_cells(suite: Suite, filters: tuple[str, ...], cells: list[CellSpec] | None = None) -> list[CellSpec]:
    """The suite's cells (or `cells`) whose name matches any of the glob `filters` (all if none)."""
    cells = suite.cells() if cells is None else cells
    if not filters:
        return cells
    chosen = [c for c in cells if any(fnmatch.fnmatchcase(c.name, p) for p in filters)]
    if not chosen:
        examples = ", ".join(c.name for c in cells[:3])
        raise UserError(
            f"--filter {' '.join(filters)!r} matches none of the {len(cells)} cells of suite "
            f"{suite.name!r}; cell names look like: {examples}"
        )
    return chosen


class RunSink:
    """The run's side of every executor: in-flight markers, stored records and the progress display."""

    def __init__(self, store: RunStore, ui: ProgressUI, device: str, command: str, split: dict[str, Any] | None = None):
        self.store, self.ui, self.device, self.command = store, ui, device, command
        self.split = split  # the split of the cores this sitting runs with, into each record's provenance
        self.running: set[str] = set()
        self.notes: list[str] = []  # rows dropped for bad data, per cell

    def started(self, cell: Cell) -> None:
        self.store.mark_in_flight(
            cell.id,
            {
                "cell": cell.spec.to_json(),
                "resolved": cell.resolved,
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "started_at": now(),
                "device": self.device,
                "command": self.command,
            },
        )
        self.running.add(cell.id)
        self.ui.start(cell.id, cell.name)

    def progress(self, cell: Cell, phase: str, step: int, total: int) -> None:
        self.ui.update(cell.id, phase, step, total)

    def finished(self, cell: Cell, record: dict[str, Any]) -> None:
        if self.split is not None:
            record["provenance"]["split"] = self.split
        self.store.write_cell(record)
        dropped = dropped_rows(record)
        if dropped:
            self.notes.append(f"{cell.name}: {dropped} (bad_rows: fail makes this an error)")
        self.store.clear_in_flight(cell.id)
        self.running.discard(cell.id)
        self.ui.finish(cell.id, record["status"])

    def log_path(self, cell: Cell) -> Path:
        return self.store.log_path(cell.id)

    def stop(self) -> None:
        """The run ends in order (done, interrupted, an error): no cell it ran is left marked in flight."""
        for cid in self.running:
            self.store.clear_in_flight(cid)
        self.running.clear()


@dataclasses.dataclass
class InProcessExecutor:
    """Cells one after another in this process, with `threads` torch threads, each within `timeout` seconds."""

    device: str
    command: str
    threads: int | None = None
    timeout: float | None = None

    def run(self, cells: list[Cell], sink: CellSink) -> None:
        """Run `cells` here; each ends in `sink.finished`."""
        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(self.threads or before)
        try:
            for cell in cells:
                sink.started(cell)
                with output_to(sink.log_path(cell)):
                    record = cell.run(
                        device=self.device,
                        command=self.command,
                        timeout=self.timeout,
                        progress=lambda phase, step, total, c=cell: sink.progress(c, phase, step, total),
                    )
                sink.finished(cell, record)
        finally:
            torch.set_num_threads(before)


def run_suite(suite: Suite, run_dir: Path, options: RunOptions) -> RunSummary:
    """Run every selected cell not already finished in `run_dir`; return what happened.
    Long: one sitting under the folder's claim: open the run, adopt reused results, run the cells and replan
    after each sweep choice, then the summary; the claim and the interrupt handler hold across all of it."""
    start = time.perf_counter()
    device = resolve_device(options.device) if options.executor == "local" else options.device
    if options.executor == "ray":
        from attnbench.ray_executor import require_ray

        require_ray()  # before anything is written
    store = RunStore(run_dir)
    cells, planned = plan_cells(suite, store, options.filters)
    threads, thread_note = resumed_threads(store.first_split(), options)
    split = (
        None
        if options.executor == "ray"
        else choose_split(
            suite_facts(suite),
            machine_facts(LOAD_SECONDS if options.workers == "auto" else 0.0),
            workers=None if options.workers == "auto" else options.workers,
            threads=threads,
            device=device,
        )
    )
    refuse_fla_off_cuda([c.spec for c in cells if store.status(c.spec.id) not in FINISHED], device)
    store.check_writable()
    store.refuse_other_suite(suite.name)
    sources = reuse_sources(options.reuse, run_dir)  # before anything is written: a bad folder is exit 2
    try:
        with store.claim(options.command) as previous, _sigterm_as_interrupt():
            notes = ([] if previous is None else [_taken_over(previous)]) + ([thread_note] if thread_note else [])
            provenance = machine_provenance(device if device != "auto" else "cpu", options.command)
            if split is not None:
                provenance["split"] = split.provenance()
            records = measurement_records([m["name"] for m in suite.measurements])
            designs = task_designs(sorted({t["name"] for t in suite.tasks}))
            notes += store.open(suite.as_dict(), planned, provenance, records, designs)
            notes += _record_deaths(store, device)
            if sources:
                sitting_threads = split.threads if split is not None else options.ray_threads
                ran_on = device_name(device) if device != "auto" else "auto"  # Ray's auto: no twin matches
                notes += adopt_results(store, [c.spec for c in cells], sources, ran_on, sitting_threads, provenance)
            changed, code_notes = check_code(store, cells, options.rerun_changed_code)
            notes += code_notes
            keep = FINISHED if options.retry_failed else FINISHED + ("failed",)
            ran, tried = 0, set()
            while True:  # once, or again for the cells a sweep's selection seeds have just chosen
                todo = [c for c in cells if c.id not in tried and store.status(c.id) not in keep]
                running = 1 if split is None else running_workers(split, len(todo), available_gib())
                if split is not None and todo and options.announce is not None:
                    options.announce(split.line(running))
                ran_now, data_notes = _run_cells(todo, len(cells), suite, store, device, options, split, running)
                ran, tried, notes = ran + ran_now, tried | {c.id for c in todo}, notes + data_notes
                cells, replanned = plan_cells(suite, store, options.filters)
                if set(replanned) == set(planned):
                    break
                planned = replanned
                store.update_plan(planned)
    except OSError as err:  # a folder that became unwritable, a full disk
        where = f" ({err.filename})" if err.filename else ""
        raise UserError(
            f"cannot write the run folder {run_dir}: {err.strerror or err}{where}; "
            f"finished cells are kept; free space or fix permissions and rerun"
        ) from None
    counts: dict[str, int] = {}
    failures = []
    for cell in cells:
        record = store.read_cell(cell.id)
        status = record["status"] if record else "missing"
        counts[status] = counts.get(status, 0) + 1
        if status == "failed":
            failures.append((cell.name, cell.id, record["reason"]))
    foreign = len({p.stem for p in store.cells_dir.glob("*.json")} - set(planned))
    return RunSummary(
        run_dir,
        len(cells),
        ran,
        len(cells) - ran,
        counts,
        failures,
        time.perf_counter() - start,
        foreign,
        notes,
        changed,
        options.rerun_changed_code,
    )


def refuse_fla_off_cuda(specs: list[CellSpec], device: str) -> None:
    """A UserError before anything is written where a cell to run insists on `backend: fla` (fla's Triton
    kernels, CUDA only) and this run cannot take that route: another device, or fla not installed."""
    reason = None if device == "auto" else fla_route.unavailable_on(device)  # Ray's auto: the workers decide
    insisting = [s for s in specs if reason is not None and fla_route.asks_for_fla(s.attention.options)]
    if insisting:
        more = f" (and {len(insisting) - 1} more cells)" if len(insisting) > 1 else ""
        raise UserError(
            f"{insisting[0].name}{more}: attention {insisting[0].attention.label!r} has backend 'fla', which cannot "
            f"run here: {reason}; use backend 'auto' (fla where it can run, else pytorch) or 'pytorch', or run with "
            f"--device cuda where flash-linear-attention is installed"
        )


def check_code(store: RunStore, cells: list[Cell], rerun: bool) -> tuple[int, list[str]]:
    """(how many finished cells were computed by other code than this checkout's, notes naming them and the
    modules that differ, and the cells that record no code); with `rerun`, those cells' records are moved to
    RUN_DIR/pruned/ so that they run again. Code is provenance, not identity: the cells keep their ids."""
    changed: dict[str, list[str]] = {}
    modules: set[str] = set()
    unknown = 0
    for cell in cells:
        record = store.read_cell(cell.id)
        if record is None or record.get("status") not in FINISHED:
            continue
        stored = (record.get("provenance") or {}).get("code")
        try:
            current = cell_code(cell.spec)
        except Exception:  # noqa: BLE001 - a part that cannot be found here: the cell itself will say why
            current = {}
        parts = code_changed(stored, current) if current else None
        if parts is None:
            unknown += 1
        elif parts:
            changed[cell.id] = [cell.name, ", ".join(parts)]
            modules.update(changed_modules(stored, current))
    notes = []
    if unknown:
        notes.append(
            f"{unknown} finished cells record no code fingerprint ({UNKNOWN}: computed before fingerprints were "
            f"recorded, or their code could not be read); they are kept"
        )
    if changed:
        names = "; ".join(f"{name} ({parts})" for name, parts in list(changed.values())[:3])
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        what = f"{len(changed)} finished cells were computed by other code: {names}{more}; modules that differ: "
        what += ", ".join(sorted(modules)[:8]) + (" ..." if len(modules) > 8 else "")
        if rerun:
            where = store.set_aside(list(changed))
            notes.append(f"{what}; they run again, their earlier results moved to {where}")
        else:
            notes.append(f"{what}; kept (attnbench run --rerun-changed-code reruns them)")
    return len(changed), notes


def resumed_threads(first: dict[str, Any] | None, options: RunOptions) -> tuple[int | None, str | None]:
    """(the torch threads per cell, a note or None): a resumed run keeps its first sitting's threads, so that its
    cells stay bit-identical to the ones already stored, unless --threads or Ray asks otherwise (then it says so)."""
    if not first or not isinstance(first.get("threads"), int):
        return options.threads, None
    was = first["threads"]
    if options.executor == "ray":
        return options.threads, (
            f"the first sitting ran cells with {was} torch threads; on Ray each cell runs with "
            f"--cpus-per-cell / --threads, so resumed cells may differ from it in the last bits"
        )
    if options.threads is not None and options.threads != was:
        return options.threads, (
            f"--threads {options.threads}: this sitting runs cells with {options.threads} torch "
            f"threads, the first sitting with {was}; their results may differ in the last bits"
        )
    return was, None


def plan_cells(suite: Suite, store: RunStore, filters: tuple[str, ...]) -> tuple[list[Cell], list[str]]:
    """(the selected cells, the ids of the whole plan, also with --filter): with a sweep's `select_seeds`,
    the other seeds' cells of each label whose trials at those seeds have finished, on its chosen trial."""
    specs = suite.cells()
    if "select_seeds" in suite.comparison_keys.get("sweep", {}):
        records = {c.id: store.read_cell(c.id) for c in specs if c.sweep is not None}
        specs = suite.cells(chosen_trials(specs, records, suite.comparison_keys))
    return [Cell.of(suite, s) for s in select_cells(suite, filters, specs)], [s.id for s in specs]


def _run_cells(
    todo: list[Cell],
    selected: int,
    suite: Suite,
    store: RunStore,
    device: str,
    options: RunOptions,
    split: Split | None,
    running: int,
) -> tuple[int, list[str]]:
    """Run `todo` with the executor the options ask for, local ones in `split` with `running` processes (cells
    whose process died before run last, alone); (how many ran, notes on data the cells dropped)."""
    explicit = options.cell_timeout if options.cell_timeout is not None else suite.cell_timeout
    timeout = DEFAULT_CELL_TIMEOUT if explicit is None else explicit
    ui = ProgressUI(
        suite.name, total=selected, done=selected - len(todo), enabled=options.show_progress, log_path=store.log_path
    )
    sink = RunSink(
        store, ui, device, options.command, None if split is None else {**split.provenance(), "running": running}
    )
    executor: Executor
    if split is None:
        from attnbench.ray_executor import RayExecutor

        executor = RayExecutor(
            options.device,
            options.command,
            options.address,
            None if options.workers == "auto" else options.workers,
            options.cpus_per_cell,
            options.ray_threads,
            timeout,
        )
        batches = [(executor, todo)]
    else:
        from attnbench.worker_executor import WorkerExecutor

        isolated = WorkerExecutor(device, options.command, running, split.threads, timeout)
        if split.workers > 1 or explicit is not None:
            batches = [(isolated, todo)]
        else:
            here = InProcessExecutor(device, options.command, split.threads, timeout)
            died = {c.id for c in todo if died_before(store.read_cell(c.id))}
            batches = [(here, [c for c in todo if c.id not in died]), (isolated, [c for c in todo if c.id in died])]
    with ui:
        try:
            for executor, cells in batches:
                if cells:
                    executor.run(cells, sink)
        finally:
            sink.stop()
    return len(todo), sink.notes


def dropped_rows(record: dict[str, Any]) -> str:
    """'dropped 62 of 200 train rows (35 null text, 27 null label)' from a record's data provenance, or ''."""
    parts = []
    for split, counts in ((record.get("provenance") or {}).get("data") or {}).get("data_problems", {}).items():
        kinds = {k: n for k, n in counts.items() if k in ("null_text", "empty_text", "null_label") and n}
        if kinds:
            listed = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in kinds.items())
            parts.append(f"{sum(kinds.values())} of {counts.get('rows')} {split} rows ({listed})")
    return f"dropped {'; '.join(parts)}" if parts else ""


def _record_deaths(store: RunStore, device: str) -> list[str]:
    """Store a failed record for every cell left in flight by a process that died; one note each."""
    notes = []
    for cid, marker in store.in_flight().items():
        cell = _marked_cell(marker)
        if store.read_cell(cid) is None and cell is not None:
            where = f"pid {marker.get('pid')} on {marker.get('host')}, started {marker.get('started_at')}"
            reason = (
                f"{PROCESS_DIED} ({where}): killed (out of memory, SIGKILL) or a crash in native code; "
                f"a retry runs it in a process of its own"
            )
            store.write_cell(
                cell.failed(
                    reason,
                    device=marker.get("device", device),
                    command=marker.get("command", ""),
                    started=marker.get("started_at", ""),
                    seconds=0.0,
                    details={"process_died": {k: marker.get(k) for k in ("pid", "host")}},
                )
            )
            notes.append(f"{cell.name}: {PROCESS_DIED} ({where}); recorded as failed")
        store.clear_in_flight(cid)
    return notes


def _marked_cell(marker: dict[str, Any]) -> Cell | None:
    """The cell an in-flight marker names, or None when the marker (written as its process died) cannot say."""
    try:
        return Cell(CellSpec.from_json(marker.get("cell")), marker.get("resolved", {}))
    except ValueError:
        return None


def _taken_over(holder: dict[str, Any]) -> str:
    """The note for a lock left by a run that ended without releasing it."""
    pid, host = holder.get("pid"), holder.get("host")
    state = (
        "no longer running"
        if host != socket.gethostname() or not isinstance(pid, int) or not process_alive(pid)
        else "not holding it"
    )
    return f"took over the run folder's lock from pid {pid} on {host} (since {holder.get('started')}), {state}"


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM stops the run in order, like Ctrl-C (no cell is left marked in flight); main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
