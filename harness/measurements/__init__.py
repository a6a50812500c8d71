"""Registry of measurements: what runs inside one suite cell, and the one entry point `run_cell`.

Contract (the executor and tests rely on it):

    from attnbench.measurements import run_cell, measurement_names, SkipCell
    result = run_cell(cell, device="cpu")     # -> {"metrics": {str: float}, "details": {...}}, JSON types only

A measurement is `fn(cell, options, *, device, progress) -> {"metrics", "details"}` registered with
`@register_measurement(name, config=OptionsDataclass)`; the cell is an `attnbench.cell_spec.CellSpec`
and its `cell.measurement.options` are validated against that dataclass. A measurement that cannot run
the cell's (attention, task) pair raises `SkipCell(reason)`; any other exception is a failure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from attnbench.cell_spec import CellSpec
from attnbench.metrics import declared_records
from attnbench.progress import Progress
from attnbench.registry import Registry
from attnbench.store import json_value

ENTRY_POINT_GROUP = "attnbench.measurement"

MEASUREMENTS = Registry(  # the harness's measurements, and each attention family's `measurement` module
    "measurement",
    entry_point_group=ENTRY_POINT_GROUP,
    builtin_packages=[("attnbench.measurements", None), ("attnbench.baselines", "measurement")],
)


class SkipCell(Exception):
    """The cell cannot run (e.g. the attention lacks a capability the task needs); recorded as skipped."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def register_measurement(
    name: str, *, config: type, description: str | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register `fn(cell, options, *, device, progress) -> {"metrics", "details"}` under `name`."""
    return MEASUREMENTS.register(name, config=config, description=description)


def measurement_names(pattern: str = "*") -> list[str]:
    """Sorted registered measurement names matching a glob pattern."""
    return MEASUREMENTS.names(pattern)


def measurement_records(names: list[str]) -> dict[str, dict[str, Any]]:
    """The metric records a run of these measurements stores (run.json): every record declared once they (and the
    built-in measurements) are loaded, plug-ins' included."""
    for name in names:
        MEASUREMENTS.get(name)  # imports a plug-in's module, which declares its metrics
    return declared_records()


def run_cell(cell: CellSpec, *, device: str = "cpu", progress: Progress | None = None) -> dict[str, Any]:
    """Validate the cell's measurement options and run the measurement on `device`."""
    name = cell.measurement.name
    options = MEASUREMENTS.make_config(name, **cell.measurement.options)
    result = MEASUREMENTS.get(name).factory(cell, options, device=device, progress=progress)
    if not isinstance(result, dict) or set(result) != {"metrics", "details"}:
        got = sorted(result) if isinstance(result, dict) else type(result).__name__
        raise TypeError(f"measurement {name!r} returned {got}; it must return exactly 'metrics' and 'details'")
    metrics = json_value(result["metrics"], "metrics")
    if not isinstance(metrics, dict):
        raise TypeError(f"measurement {name!r} returned metrics {type(result['metrics']).__name__}; give a mapping")
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"metrics.{key} is {value!r}; a metric is one number (put the rest in details)")
    return {"metrics": metrics, "details": json_value(result["details"], "details")}
