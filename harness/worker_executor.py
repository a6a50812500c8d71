"""Run cells in spawned local worker processes: a cell that overruns its time, or whose process dies
(out of memory, SIGKILL, a crash in native code), fails alone and a fresh worker takes the next cell."""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from attnbench.cell import PROCESS_DIED, Cell, CellSink, output_to
from attnbench.provenance import now, usable_cores


def _worker_main(conn: multiprocessing.connection.Connection, threads: int) -> None:
    """A spawned worker: run the cells it is sent, stream progress, send back each record."""
    import torch

    from attnbench.measurements import MEASUREMENTS
    from attnbench.registry import ATTENTIONS

    torch.set_num_threads(threads)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    MEASUREMENTS.names(), ATTENTIONS.names()  # import the built-in modules before any cell's clock starts
    while True:
        job = conn.recv()
        if job is None:
            return
        cell, device, command, log_path = job
        conn.send(("started",))  # the time limit counts from here, not from the worker's imports
        with output_to(Path(log_path)):
            record = cell.run(
                device=device,
                command=command,
                progress=lambda phase, step, total: conn.send(("progress", phase, step, total)),
            )
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
    cell: Cell | None = None
    started_at: str = ""
    t0: float | None = None  # when the worker began the cell (None: still starting up)


@dataclasses.dataclass
class WorkerExecutor:
    """Cells in `workers` spawned processes with `threads` torch threads each (None: usable cores // workers),
    each killed when its cell runs past `timeout` seconds."""

    device: str
    command: str
    workers: int = 1
    threads: int | None = None
    timeout: float | None = None

    def run(self, cells: list[Cell], sink: CellSink) -> None:
        """Run `cells` in the worker processes; each ends in `sink.finished`.
        Long: the pool's event loop (start, feed, reap, time out, replace a dead worker), whose steps read
        and change the same worker states."""
        ctx = multiprocessing.get_context("spawn")
        n = max(1, min(self.workers, len(cells)))
        # cores // workers, not // n: the same threads however many cells are left (bit-identical CPU results)
        threads = self.threads or max(1, usable_cores() // max(1, self.workers))

        def spawn() -> _Worker:
            parent, child = ctx.Pipe()
            process = ctx.Process(target=_worker_main, args=(child, threads), name="attnbench-worker")
            process.start()
            child.close()
            return _Worker(process, parent)

        def finish(worker: _Worker, record: dict[str, Any]) -> None:
            sink.finished(worker.cell, record)
            worker.cell = None

        def fail(worker: _Worker, reason: str, details: dict[str, Any] | None = None) -> None:
            seconds = 0.0 if worker.t0 is None else time.perf_counter() - worker.t0
            finish(
                worker,
                worker.cell.failed(
                    reason,
                    device=self.device,
                    command=self.command,
                    started=worker.started_at,
                    seconds=seconds,
                    details=details,
                ),
            )

        def replace(worker: _Worker) -> _Worker | None:
            """Kill a worker (timed out or broken); a fresh one takes its place while cells are waiting."""
            worker.process.kill()
            worker.process.join()
            worker.conn.close()
            return spawn() if pending else None

        pending = deque(cells)
        workers: list[_Worker | None] = [spawn() for _ in range(n)] if cells else []
        try:
            while True:
                workers = [w for w in workers if w is not None]  # replaced by None: killed, nothing left to give
                if not pending and all(w.cell is None for w in workers):
                    break
                for w in workers:
                    if w.cell is None and pending:
                        w.cell, w.started_at, w.t0 = pending.popleft(), now(), None
                        sink.started(w.cell)
                        w.conn.send((w.cell, self.device, self.command, str(sink.log_path(w.cell))))
                busy = [w for w in workers if w.cell is not None]
                ready = multiprocessing.connection.wait([w.conn for w in busy], timeout=0.25)
                for i, w in enumerate(workers):
                    if w is None or w.cell is None:
                        continue
                    if w.conn in ready:
                        try:
                            kind, *payload = w.conn.recv()
                        except (EOFError, OSError):
                            w.process.join(5)
                            code = w.process.exitcode
                            fail(
                                w,
                                f"worker process died (exit code {code}): {PROCESS_DIED} (out of memory, "
                                f"killed, or a crash in native code)",
                                {"process_died": {"exit_code": code}},
                            )
                            workers[i] = replace(w)
                            continue
                        if kind == "started":
                            w.started_at, w.t0 = now(), time.perf_counter()
                        elif kind == "progress":
                            sink.progress(w.cell, *payload)
                        else:
                            finish(w, payload[0])
                        continue
                    elapsed = 0.0 if w.t0 is None else time.perf_counter() - w.t0
                    if self.timeout is not None and elapsed > self.timeout:
                        fail(w, f"time-out: no result after {self.timeout:g} s (cell time limit)")
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
