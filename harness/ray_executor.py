"""Run cells as Ray tasks (the optional `ray` extra); each cell is one task asking for its CPUs/GPU.

Records come back to the driver, which hands them to the run's sink like every executor. A cell's
time limit is enforced inside its task (Cell.run with a timeout, SIGALRM: recorded as a time-out).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import sys
from pathlib import Path
from typing import Any

from attnbench.cell import Cell, CellSink, failure_reason
from attnbench.errors import UserError
from attnbench.provenance import now


def ray_cell(cell: Cell, device: str, command: str, threads: int, timeout: float | None) -> tuple[dict[str, Any], str]:
    """Body of one Ray task: run the cell with `threads` torch threads; (record, captured output)."""
    import torch

    from attnbench.provenance import resolve_device

    torch.set_num_threads(threads)
    output = io.StringIO()
    with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
        record = cell.run(device=resolve_device(device), command=command, timeout=timeout)
    return record, output.getvalue()


def require_ray() -> Any:
    """The ray module, or a UserError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise UserError(
            "--executor ray needs Ray: pip install 'attnbench[ray]' (or pip install 'ray[default]')"
        ) from None
    return ray


@dataclasses.dataclass
class RayExecutor:
    """Cells as Ray tasks on the cluster at `address` (None: a local instance of `workers` x cpus_per_cell CPUs)."""

    device: str  # cpu | cuda | auto (auto: cuda when the cluster has GPUs)
    command: str
    address: str | None = None
    workers: int | None = None
    cpus_per_cell: int = 1
    threads: int = 1  # torch threads per cell (RunOptions.ray_threads)
    timeout: float | None = None

    def run(self, cells: list[Cell], sink: CellSink) -> None:
        """Submit every cell as a Ray task and hand each record to the sink as it arrives."""
        ray = require_ray()
        if not cells:
            return
        started_here = not ray.is_initialized()
        if started_here:
            init: dict[str, Any] = {
                "include_dashboard": False,
                "log_to_driver": False,
                "runtime_env": {"env_vars": {"PYTHONPATH": _pythonpath()}},
            }
            if self.address:
                init["address"] = self.address
            else:
                local_worker_priority()
                if self.workers:
                    init["num_cpus"] = self.workers * self.cpus_per_cell
            ray.init(**init)
        try:
            gpus = (
                1
                if self.device == "cuda" or (self.device == "auto" and ray.cluster_resources().get("GPU", 0) > 0)
                else 0
            )
            device = "cuda" if gpus else "cpu"
            task = ray.remote(num_cpus=self.cpus_per_cell, num_gpus=gpus, max_retries=0)(ray_cell)
            refs = {
                task.remote(cell, device, self.command, self.threads, self.timeout): cell for cell in cells
            }  # queued on the cluster: the progress bar counts each when it ends
            while refs:
                done, _ = ray.wait(list(refs), num_returns=1)
                cell = refs.pop(done[0])
                try:
                    record, output = ray.get(done[0])
                except Exception as err:  # noqa: BLE001 - the task's worker died or Ray failed it
                    record, output = (
                        cell.failed(
                            f"ray task failed: {failure_reason(err)}",
                            device=device,
                            command=self.command,
                            started=now(),
                            seconds=0.0,
                        ),
                        "",
                    )
                sink.log_path(cell).write_text(output)
                sink.finished(cell, record)
        finally:
            if started_here:
                ray.shutdown()


def local_worker_priority() -> None:
    """Run a local Ray instance's workers at normal priority, as the local executor's workers, unless the user
    set `RAY_worker_niceness`: Ray's default (nice 15) starves cells beside any other job (importing torch in a
    task took 64 s instead of 4 beside two training processes on 2 cores)."""
    os.environ.setdefault("RAY_worker_niceness", "0")


def _pythonpath() -> str:
    """The driver's import path, so that tasks find the harness and users' plugin modules."""
    return os.pathsep.join(dict.fromkeys(p for p in sys.path if p and Path(p).is_dir()))
