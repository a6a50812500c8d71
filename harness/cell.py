"""A cell: one (task, attention, seed, measurement) unit of a suite; what it is, how it runs, how it fails.

A cell travels from the suite to an executor, to the store and to the report. `Cell.spec` is the
typed spec the suite expands to (attnbench.cell_spec: its id names the result file); `Cell.resolved`
holds every config of the cell with its defaults filled in (provenance). `Cell.run` runs it in this process
and always returns a stored record, never an exception: ok, skipped, or failed (an exception, a NaN
loss, running out of memory, its time limit). A cell whose process dies cannot say so itself; its
executor records that with `Cell.failed` (`PROCESS_DIED`).

Executors (in this process, in worker processes, as Ray tasks) implement one interface,
`Executor.run(cells, sink)`, and report to a `CellSink` (started, progress, finished); they import
this module, never each other nor the code that picks them (attnbench.executor).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from attnbench.cell_spec import CellSpec
from attnbench.code_fingerprint import cell_code
from attnbench.measurements import SkipCell, run_cell
from attnbench.model import ModelConfig
from attnbench.options import make_options
from attnbench.plan import Suite
from attnbench.progress import Progress
from attnbench.provenance import machine_provenance, now
from attnbench.runtime import WHAT_RAN, CellTimeout, seed_everything, time_limit
from attnbench.store import result_record
from attnbench.train import NonFiniteLossError

DEFAULT_CELL_TIMEOUT = 6 * 3600.0  # seconds a cell may run when neither the suite nor --cell-timeout says
PROCESS_DIED = "the process died while running this cell"


def failure_reason(err: BaseException) -> str:
    """One line saying why a cell failed."""
    text = (str(err).strip().splitlines() or [""])[0]
    if isinstance(err, CellTimeout):
        return f"time-out: {text}"
    if isinstance(err, NonFiniteLossError):
        return f"non-finite loss: {text}"
    if isinstance(err, MemoryError) or type(err).__name__ == "OutOfMemoryError":
        return f"out of memory: {type(err).__name__}: {text}"
    if not text:  # say where, when the exception says nothing
        frames = traceback.extract_tb(err.__traceback__)
        where = (
            f" raised at {Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
        )
        return f"{type(err).__name__}{where}"
    return f"{type(err).__name__}: {text}"


@dataclasses.dataclass(frozen=True)
class Cell:
    """One cell: its spec (suite, task, attention, seed, model, training, measurement) and resolved configs."""

    spec: CellSpec
    resolved: dict[str, Any]

    @classmethod
    def of(cls, suite: Suite, spec: CellSpec) -> Cell:
        """The cell `spec` of `suite`, with every config's defaults filled in from the suite."""
        resolved = {
            "attention": suite.resolved["attentions"].get(spec.attention.label, {}),
            "task": suite.resolved["tasks"].get(spec.task.label, {}),
            "model": dataclasses.asdict(make_options(ModelConfig, spec.model, what="model")),
            "training": suite.resolved.get("training", {}),
            "measurement": suite.resolved["measurements"][spec.measurement.name],
        }
        return cls(spec, resolved)

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def name(self) -> str:
        return self.spec.name

    def run(
        self, *, device: str, command: str, progress: Progress | None = None, timeout: float | None = None
    ) -> dict[str, Any]:
        """Run the cell here (within `timeout` seconds, if given) and return its record, whatever happens."""
        started, t0 = now(), time.perf_counter()
        outcome: dict[str, Any] = {"status": "ok"}
        ran: dict[str, Any] = {}
        token = WHAT_RAN.set(ran)
        try:
            with time_limit(timeout):
                seed_everything(self.spec.seed)
                result = run_cell(self.spec, device=device, progress=progress)
            outcome.update(metrics=result.get("metrics", {}), details=result.get("details", {}))
        except SkipCell as err:
            outcome = {"status": "skipped", "reason": (str(err).strip().splitlines() or ["skipped"])[0]}
        except Exception as err:  # noqa: BLE001 - any failure of one cell is that cell's result
            outcome = {"status": "failed", "reason": failure_reason(err), "error": traceback.format_exc()}
        finally:
            WHAT_RAN.reset(token)
        provenance = self._provenance(device, command, started, time.perf_counter() - t0)
        provenance["config"] = {**self.resolved, **({"model": ran["model"]} if "model" in ran else {})}
        if "data" in ran:
            provenance["data"] = ran["data"]
        return result_record(self.spec, provenance=provenance, **outcome)

    def failed(
        self,
        reason: str,
        *,
        device: str,
        command: str,
        started: str,
        seconds: float,
        details: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The record of this cell when it ended outside `run` (killed at its time limit, its process died)."""
        return result_record(
            self.spec,
            status="failed",
            reason=reason,
            error=None,
            details=details,
            provenance=self._provenance(device, command, started, seconds),
        )

    def _provenance(self, device: str, command: str, started: str, seconds: float) -> dict[str, Any]:
        provenance = machine_provenance(device, command)
        provenance.update(
            started_at=started, finished_at=now(), seconds=seconds, seed=self.spec.seed, config=self.resolved
        )
        try:
            provenance["code"] = cell_code(self.spec)
        except Exception as err:  # noqa: BLE001 - a part that cannot be found: its record says so (unknown code)
            provenance["code"] = {"unreadable": failure_reason(err)}
        return provenance


def died_before(record: dict[str, Any] | None) -> bool:
    """Whether a stored record says the cell's process died (it then reruns in a process of its own)."""
    return bool(record and record.get("status") == "failed" and (record.get("details") or {}).get("process_died"))


class CellSink(Protocol):
    """Where an executor reports what happens to its cells (the run's store and progress display)."""

    def started(self, cell: Cell) -> None:
        """The cell is about to run (its time starts)."""

    def progress(self, cell: Cell, phase: str, step: int, total: int) -> None:
        """The running cell reached `step` of `total` in `phase`."""

    def finished(self, cell: Cell, record: dict[str, Any]) -> None:
        """The cell ended with `record` (ok, skipped or failed); store it."""

    def log_path(self, cell: Cell) -> Path:
        """The file that receives what the cell prints."""


class Executor(Protocol):
    """Runs cells and reports each one's record to the sink; one record per cell, whatever happens."""

    def run(self, cells: list[Cell], sink: CellSink) -> None:
        """Run every cell of `cells`, each ending in `sink.finished`."""


@contextlib.contextmanager
def output_to(log_path: Path) -> Iterator[None]:
    """Send what the cell prints (stdout and stderr) to its log file."""
    with open(log_path, "a") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        yield
