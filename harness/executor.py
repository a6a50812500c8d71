"""The only code that runs cells: in this process, in local worker processes, or as Ray tasks.

Every cell ends as one stored record (ok / failed / skipped); an exception, a NaN loss, running out
of memory or a time-out fails that cell only, and the suite goes on. Resume is the default: cells
whose file says ok or skipped are not run again; failed cells are retried unless
`retry_failed=False`. Cells run in this process unless a time-out is set or workers > 1; then each
runs in a spawned worker process that is killed when the cell overruns its time.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import multiprocessing
import multiprocessing.connection
import os
import random
import signal
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from harness.errors import UserError
from harness.progress import ProgressUI
from harness.provenance import machine_provenance, now, resolve_device
from harness.store import FINISHED, RunStore, cell_id, result_record
from harness.suite import Suite, cell_name, task_label

Progress = Callable[[str, int, int], None]


class CellTimeout(Exception):
    """A cell ran past its time limit."""


@dataclasses.dataclass
class RunOptions:
    """How to run a suite (the `attnbench run` flags)."""

    device: str = "cpu"  # cpu | cuda | auto
    workers: int | None = None  # local processes (None = 1); Ray: concurrent cells on a local instance
    executor: Literal["local", "ray"] = "local"
    address: str | None = None  # Ray cluster address; None starts a local instance
    cell_timeout: float | None = None  # seconds; overrides the suite's cell_timeout
    retry_failed: bool = True
    filters: tuple[str, ...] = ()  # glob patterns over cell names; a cell runs if any matches
    cpus_per_cell: int = 1  # Ray: CPUs each cell task asks for (and its torch threads)
    threads: int | None = None  # torch threads per cell (default: this process's / cores // workers / cpus_per_cell)
    command: str = ""
    show_progress: bool = True


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

    @property
    def exit_code(self) -> int:
        return 1 if self.counts.get("failed", 0) else 0

    def line(self, suite_name: str) -> str:
        c = self.counts
        return (f"{suite_name}: {self.selected} cells: {c.get('ok', 0)} ok, {c.get('failed', 0)} failed, "
                f"{c.get('skipped', 0)} skipped ({self.resumed} kept from before, {self.ran} run) "
                f"in {self.seconds:.1f} s -> {self.run_dir}")


def select_cells(suite: Suite, filters: tuple[str, ...]) -> list[dict[str, Any]]:
    """The suite's cells whose name matches any of the glob `filters` (all if none)."""
    cells = suite.cells()
    if not filters:
        return cells
    chosen = [c for c in cells if any(fnmatch.fnmatchcase(cell_name(c), p) for p in filters)]
    if not chosen:
        examples = ", ".join(cell_name(c) for c in cells[:3])
        raise UserError(f"--filter {' '.join(filters)!r} matches none of the {len(cells)} cells of suite "
                        f"{suite.name!r}; cell names look like: {examples}")
    return chosen


def resolved_config(suite: Suite, cell: dict[str, Any]) -> dict[str, Any]:
    """Every config of a cell with its defaults filled in (for provenance)."""
    task = task_label(cell["task"])
    return {"attention": suite.resolved["attentions"].get(cell["attention"]["label"], {}),
            "task": suite.resolved["tasks"].get(task, {}),
            "model": _resolved_model(cell["model"]), "training": suite.resolved.get("training", {}),
            "measurement": suite.resolved["measurements"][cell["measurement"]["name"]]}


def _resolved_model(overrides: dict[str, Any]) -> dict[str, Any]:
    """The cell's model settings with defaults (vocabulary, classes and length are then set by the task)."""
    from harness.model import ModelConfig
    from harness.options import make_options

    return dataclasses.asdict(make_options(ModelConfig, overrides, what="model"))


def failure_reason(err: BaseException) -> str:
    """One line saying why a cell failed."""
    from harness.train import NonFiniteLossError

    text = (str(err).strip().splitlines() or [""])[0]
    if isinstance(err, CellTimeout):
        return f"time-out: {text}"
    if isinstance(err, NonFiniteLossError):
        return f"non-finite loss: {text}"
    if isinstance(err, MemoryError) or type(err).__name__ == "OutOfMemoryError":
        return f"out of memory: {type(err).__name__}: {text}"
    if not text:  # say where, when the exception says nothing
        frames = traceback.extract_tb(err.__traceback__)
        where = f" raised at {Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
        return f"{type(err).__name__}{where}"
    return f"{type(err).__name__}: {text}"


def seed_everything(seed: int) -> None:
    """Seed Python, numpy and torch so that a cell is reproducible on its own."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def execute_cell(cell: dict[str, Any], resolved: dict[str, Any], *, device: str, command: str,
                 progress: Progress | None = None) -> dict[str, Any]:
    """Run one cell here and return its record; failures and skips become records, never exceptions."""
    from harness.measurements import SkipCell, run_cell

    started, t0 = now(), time.perf_counter()
    outcome: dict[str, Any] = {"status": "ok"}
    try:
        seed_everything(cell["seed"])
        result = run_cell(cell, device=device, progress=progress)
        outcome.update(metrics=result.get("metrics", {}), details=result.get("details", {}))
    except SkipCell as err:
        outcome = {"status": "skipped", "reason": str(err).strip().splitlines()[0] if str(err).strip() else "skipped"}
    except Exception as err:  # noqa: BLE001 - any failure of one cell is that cell's result
        outcome = {"status": "failed", "reason": failure_reason(err), "error": traceback.format_exc()}
    provenance = machine_provenance(device, command)
    provenance.update(started_at=started, finished_at=now(), seconds=time.perf_counter() - t0,
                      seed=cell["seed"], config=resolved)
    return result_record(cell, provenance=provenance, **outcome)


def failed_record(cell: dict[str, Any], resolved: dict[str, Any], *, device: str, command: str,
                  started: str, seconds: float, reason: str) -> dict[str, Any]:
    """The record of a cell that ended outside `execute_cell` (killed at its time limit, worker died)."""
    provenance = machine_provenance(device, command)
    provenance.update(started_at=started, finished_at=now(), seconds=seconds, seed=cell["seed"], config=resolved)
    return result_record(cell, status="failed", reason=reason, error=None, provenance=provenance)


@contextlib.contextmanager
def output_to(log_path: Path) -> Iterator[None]:
    """Send what the cell prints (stdout and stderr) to its log file."""
    with open(log_path, "a") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        yield


def run_suite(suite: Suite, run_dir: Path, options: RunOptions) -> RunSummary:
    """Run every selected cell not already finished in `run_dir`; return what happened."""
    start = time.perf_counter()
    device = resolve_device(options.device) if options.executor == "local" else options.device
    if options.executor == "ray":
        from harness.ray_executor import require_ray
        require_ray()  # before anything is written
    cells = select_cells(suite, options.filters)
    store = RunStore(run_dir)
    ids = [cell_id(c) for c in cells]
    planned = [cell_id(c) for c in suite.cells()]  # the whole suite, also when --filter runs a part of it
    store.open(suite.as_dict(), planned, machine_provenance(device if device != "auto" else "cpu", options.command))
    keep = FINISHED if options.retry_failed else FINISHED + ("failed",)
    todo = [c for c, i in zip(cells, ids) if store.status(i) not in keep]
    timeout = options.cell_timeout if options.cell_timeout is not None else suite.cell_timeout
    ui = ProgressUI(suite.name, total=len(cells), done=len(cells) - len(todo), enabled=options.show_progress,
                    log_path=store.log_path)
    with ui:
        if options.executor == "ray":
            from harness.ray_executor import run_on_ray
            run_on_ray(todo, suite, store, ui, options, timeout)
        elif (options.workers or 1) > 1 or timeout is not None:
            _run_in_workers(todo, suite, store, ui, device, options, timeout)
        else:
            _run_here(todo, suite, store, ui, device, options.command, options.threads)
    counts: dict[str, int] = {}
    failures = []
    for cell, cid in zip(cells, ids):
        record = store.read_cell(cid)
        status = record["status"] if record else "missing"
        counts[status] = counts.get(status, 0) + 1
        if status == "failed":
            failures.append((cell_name(cell), cid, record["reason"]))
    foreign = len({p.stem for p in store.cells_dir.glob("*.json")} - set(planned))
    return RunSummary(run_dir, len(cells), len(todo), len(cells) - len(todo), counts, failures,
                      time.perf_counter() - start, foreign)


def _run_here(todo: list[dict[str, Any]], suite: Suite, store: RunStore, ui: ProgressUI, device: str,
              command: str, threads: int | None) -> None:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads or before)
    try:
        _run_cells_here(todo, suite, store, ui, device, command)
    finally:
        torch.set_num_threads(before)


def _run_cells_here(todo: list[dict[str, Any]], suite: Suite, store: RunStore, ui: ProgressUI, device: str,
                    command: str) -> None:
    for cell in todo:
        cid, name = cell_id(cell), cell_name(cell)
        ui.start(cid, name)
        with output_to(store.log_path(cid)):
            record = execute_cell(cell, resolved_config(suite, cell), device=device, command=command,
                                  progress=lambda phase, step, total: ui.update(cid, phase, step, total))
        store.write_cell(record)
        ui.finish(cid, record["status"])


def _worker_main(conn: multiprocessing.connection.Connection, threads: int) -> None:
    """A spawned worker: run the cells it is sent, stream progress, send back each record."""
    import torch

    from harness.measurements import MEASUREMENTS
    from harness.registry import ATTENTIONS

    torch.set_num_threads(threads)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    MEASUREMENTS.names(), ATTENTIONS.names()  # import the built-in modules before any cell's clock starts
    while True:
        job = conn.recv()
        if job is None:
            return
        cell, resolved, device, command, log_path = job
        conn.send(("started",))  # the time limit counts from here, not from the worker's imports
        with output_to(Path(log_path)):
            record = execute_cell(cell, resolved, device=device, command=command,
                                  progress=lambda phase, step, total: conn.send(("progress", phase, step, total)))
        conn.send(("done", record))


def _exit_with_parent(parent: int) -> None:
    """End this worker when its parent is gone (e.g. killed with SIGKILL): no orphaned cells keep running."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


@dataclasses.dataclass
class _Worker:
    process: multiprocessing.process.BaseProcess
    conn: multiprocessing.connection.Connection
    cell: dict[str, Any] | None = None
    started_at: str = ""
    t0: float | None = None  # when the worker began the cell (None: still starting up)


def _run_in_workers(todo: list[dict[str, Any]], suite: Suite, store: RunStore, ui: ProgressUI, device: str,
                    options: RunOptions, timeout: float | None) -> None:
    """Run cells in `workers` spawned processes, each with cores // workers torch threads."""
    ctx = multiprocessing.get_context("spawn")
    n = max(1, min(options.workers or 1, len(todo)))
    threads = options.threads or max(1, (os.cpu_count() or 1) // n)

    def spawn() -> _Worker:
        parent, child = ctx.Pipe()
        process = ctx.Process(target=_worker_main, args=(child, threads), name="attnbench-worker")
        process.start()
        child.close()
        return _Worker(process, parent)

    def finish(worker: _Worker, record: dict[str, Any]) -> None:
        store.write_cell(record)
        ui.finish(cell_id(worker.cell), record["status"])
        worker.cell = None

    def replace(worker: _Worker) -> _Worker | None:
        """Kill a worker (timed out or broken); a fresh one takes its place while cells are waiting."""
        worker.process.kill()
        worker.process.join()
        worker.conn.close()
        return spawn() if pending else None

    pending = deque(todo)
    workers: list[_Worker | None] = [spawn() for _ in range(n)] if todo else []
    try:
        while True:
            workers = [w for w in workers if w is not None]  # replaced by None: killed, nothing left to give
            if not pending and all(w.cell is None for w in workers):
                break
            for w in workers:
                if w.cell is None and pending:
                    w.cell, w.started_at, w.t0 = pending.popleft(), now(), None
                    cid = cell_id(w.cell)
                    ui.start(cid, cell_name(w.cell))
                    w.conn.send((w.cell, resolved_config(suite, w.cell), device, options.command,
                                 str(store.log_path(cid))))
            busy = [w for w in workers if w.cell is not None]
            ready = multiprocessing.connection.wait([w.conn for w in busy], timeout=0.25)
            for i, w in enumerate(workers):
                if w is None or w.cell is None:
                    continue
                cid = cell_id(w.cell)
                if w.conn in ready:
                    try:
                        kind, *payload = w.conn.recv()
                    except (EOFError, OSError):
                        w.process.join(5)
                        reason = (f"worker process died (exit code {w.process.exitcode}): "
                                  f"out of memory or a crash in native code")
                        finish(w, failed_record(w.cell, resolved_config(suite, w.cell), device=device,
                                                command=options.command, started=w.started_at,
                                                seconds=0.0 if w.t0 is None else time.perf_counter() - w.t0,
                                                reason=reason))
                        workers[i] = replace(w)
                        continue
                    if kind == "started":
                        w.started_at, w.t0 = now(), time.perf_counter()
                    elif kind == "progress":
                        ui.update(cid, *payload)
                    else:
                        finish(w, payload[0])
                    continue
                elapsed = 0.0 if w.t0 is None else time.perf_counter() - w.t0
                if timeout is not None and elapsed > timeout:
                    finish(w, failed_record(w.cell, resolved_config(suite, w.cell), device=device,
                                            command=options.command, started=w.started_at, seconds=elapsed,
                                            reason=f"time-out: no result after {timeout:g} s (cell time limit)"))
                    workers[i] = replace(w)
    finally:
        for w in filter(None, workers):
            if w.process.is_alive() and w.cell is None:
                with contextlib.suppress(OSError):
                    w.conn.send(None)
                w.process.join(2)
            if w.process.is_alive():
                w.process.kill()
                w.process.join()
