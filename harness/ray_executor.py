"""Run cells as Ray tasks (the optional `ray` extra); each cell is one task asking for its CPUs/GPU.

Results come back to the driver, which stores them with the same store code as the local
executor. A cell's time limit is enforced inside its task with SIGALRM (recorded as a time-out).
"""
from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import UserError
from harness.store import RunStore, cell_id
from harness.suite import Suite

if TYPE_CHECKING:
    from harness.executor import RunOptions
    from harness.progress import ProgressUI


def _raise_timeout(signum: int, frame: Any) -> None:
    from harness.executor import CellTimeout
    raise CellTimeout("the cell ran past its time limit")


def ray_cell(cell: dict[str, Any], resolved: dict[str, Any], device: str, command: str, threads: int,
             timeout: float | None) -> tuple[dict[str, Any], str]:
    """Body of one Ray task: run the cell with `threads` torch threads; (record, captured output)."""
    import torch

    from harness.executor import execute_cell
    from harness.provenance import resolve_device

    torch.set_num_threads(threads)
    if timeout is not None:
        signal.signal(signal.SIGALRM, _raise_timeout)
        signal.setitimer(signal.ITIMER_REAL, timeout)
    output = io.StringIO()
    try:
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            record = execute_cell(cell, resolved, device=resolve_device(device), command=command)
    finally:
        if timeout is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
    return record, output.getvalue()


def require_ray() -> Any:
    """The ray module, or a UserError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise UserError("--executor ray needs Ray: pip install 'attnbench[ray]' (or pip install 'ray[default]')") from None
    return ray


def run_on_ray(todo: list[dict[str, Any]], suite: Suite, store: RunStore, ui: "ProgressUI",
               options: "RunOptions", timeout: float | None) -> None:
    """Submit every cell as a Ray task and store each result as it arrives."""
    ray = require_ray()
    from harness.executor import failed_record, failure_reason, resolved_config
    from harness.provenance import now

    if not todo:
        return
    started_here = not ray.is_initialized()
    if started_here:
        init: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                "runtime_env": {"env_vars": {"PYTHONPATH": _pythonpath()}}}
        if options.address:
            init["address"] = options.address
        elif options.workers:
            init["num_cpus"] = options.workers * options.cpus_per_cell
        ray.init(**init)
    try:
        gpus = 1 if options.device == "cuda" or (options.device == "auto"
                                                 and ray.cluster_resources().get("GPU", 0) > 0) else 0
        device = "cuda" if gpus else "cpu"
        task = ray.remote(num_cpus=options.cpus_per_cell, num_gpus=gpus, max_retries=0)(ray_cell)
        refs = {}
        for cell in todo:
            ref = task.remote(cell, resolved_config(suite, cell), device, options.command,
                              options.threads or options.cpus_per_cell, timeout)
            refs[ref] = cell  # queued on the cluster: the progress bar counts it when it ends
        while refs:
            done, _ = ray.wait(list(refs), num_returns=1)
            cell = refs.pop(done[0])
            try:
                record, output = ray.get(done[0])
            except Exception as err:  # noqa: BLE001 - the task's worker died or Ray failed it
                record, output = failed_record(cell, resolved_config(suite, cell), device=device,
                                               command=options.command, started=now(), seconds=0.0,
                                               reason=f"ray task failed: {failure_reason(err)}"), ""
            store.log_path(record["cell_id"]).write_text(output)
            store.write_cell(record)
            ui.finish(cell_id(cell), record["status"])
    finally:
        if started_here:
            ray.shutdown()


def _pythonpath() -> str:
    """The driver's import path, so that tasks find the harness and users' plugin modules."""
    return os.pathsep.join(dict.fromkeys(p for p in sys.path if p and Path(p).is_dir()))
