"""Stored results read back: a run folder's cell files (RUN_DIR/cells/*.json) as pandas DataFrames, never re-run.

`load_runs` reads one or more run folders into `Results` (one row per cell file, with each run's plan, its suite's
settings, the records of its metrics and its tasks' test-row designs from run.json); `load_results` gives one run
as the long frame (one row per cell and metric) that `attnbench.compare` and your own analysis read. Failed,
skipped and unreadable cells are kept (with their reasons) so that reports can list them; only "ok" cells
contribute numbers. The report (`attnbench.report`) and the inference engine (`attnbench.decisions`) both read
through here; this module imports neither.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path
from typing import Any

import pandas as pd

from attnbench.errors import UserError
from attnbench.metrics import adopt_records, records_predate_fields
from attnbench.names import REFERENCE
from attnbench.store import read_result
from attnbench.sweep import select_trials

CURRENT_RECORDS, OLDER_RECORDS, NO_RECORDS = "current", "older", "none"  # the metric records a run.json holds
DESIGNS = ("fresh", "shared")  # a task's test rows: drawn anew per seed, or the same for every seed
STORED: dict[str, str] = {}  # task name -> declared design, as the runs read so far stored them (`adopt_designs`)
CELL_COLUMNS = [
    "run",
    "cell_id",
    "suite",
    "measurement",
    "task",
    "label",
    "attention",
    "seed",
    "status",
    "reason",
    "file",
    "trial",
]


@dataclasses.dataclass
class RunInfo:
    """One run folder: its tag (used to keep clashing labels apart) and its path."""

    tag: str
    path: Path
    suite: str | None = None  # from run.json, when the executor wrote one
    not_run: list[str] = dataclasses.field(default_factory=list)  # planned cell ids without a result file
    left_out: list[str] = dataclasses.field(default_factory=list)  # names of stored cells outside the plan (stale)
    config: dict[str, Any] = dataclasses.field(default_factory=dict)  # the normalised suite from run.json
    planned: set[str] | None = None  # the cell ids of run.json (None: no plan, every stored cell is read)


@dataclasses.dataclass
class Results:
    """All cell results of one or more runs.

    `cells`: one row per result file (CELL_COLUMNS, plus object columns metrics/details/provenance);
    status is ok, failed, skipped or unreadable.
    """

    cells: pd.DataFrame
    runs: list[RunInfo]
    sweep: pd.DataFrame | None = None  # every sweep trial's validation scores (attnbench.sweep.select_trials), if any
    unchosen: pd.DataFrame | None = None  # cells of sweep trials not chosen (counted, shown only in the sweep table)

    @property
    def ok(self) -> pd.DataFrame:
        """Only the cells that finished with status ok."""
        return self.cells[self.cells["status"] == "ok"]

    def of(self, measurement: str) -> pd.DataFrame:
        """The ok cells of one measurement."""
        ok = self.ok
        return ok[ok["measurement"] == measurement]

    def reference_labels(self) -> set[str]:
        """Labels of reference-model cells (attention name 'reference'), which tables mark and do not rank."""
        return set(self.cells.loc[self.cells["attention"] == REFERENCE, "label"].dropna())

    def labels(self) -> list[str]:
        """Every attention label seen in any cell, sorted (the key for colours)."""
        return sorted({str(x) for x in self.cells["label"].dropna()})


def metric_names(cells: pd.DataFrame) -> set[str]:
    """The names of the metrics some result rows report (the union of their `metrics` dicts)."""
    return {str(m) for metrics in cells["metrics"] for m in (metrics or {})}


def load_runs(run_dirs: list[Path], *, stale: bool = False) -> Results:
    """Read the cell results of the given run folders that belong to each run's plan (the suite as it stood at its
    last `attnbench run`; the others are named in RunInfo.left_out), or with `stale` only those others; labels that
    clash across runs get a run tag."""
    if not run_dirs:
        raise UserError("no run folders given; pass at least one RUN_DIR that holds cells/*.json")
    runs = [RunInfo(tag, Path(p)) for tag, p in zip(_run_tags([Path(p) for p in run_dirs]), run_dirs)]
    rows = [row for run in runs for row in _read_run(run)]
    stored = [_read_plan(run, {r["cell_id"] for r in rows if r["run"] == run.tag}) for run in runs]
    if NO_RECORDS in stored:  # runs from before runs stored their metric records: their measurements declare them
        older = {run.tag for run, records in zip(runs, stored) if records == NO_RECORDS}
        _declare_from_measurements({r["measurement"] for r in rows if r["run"] in older and r["measurement"]})
    elif OLDER_RECORDS in stored:  # records stored before a field was added: the built-in records know it
        _declare_from_measurements(set())
    rows = _in_plan(rows, runs, stale)
    cells = pd.DataFrame(rows, columns=CELL_COLUMNS + ["metrics", "details", "provenance", "task_options", "sweep"])
    cells["task"] = _task_keys(cells)
    cells = cells.drop(columns="task_options")
    cells["seed"] = pd.to_numeric(cells["seed"], errors="coerce").astype("Int64")
    if len(runs) > 1:
        cells["label"] = _tag_clashing_labels(cells)
    everything = cells.reset_index(drop=True)
    cells, sweep = select_trials(
        everything, {run.tag: (run.config.get("sweep") or {}).get("select_seeds") for run in runs}
    )
    kept = set(zip(cells["run"], cells["file"]))
    unchosen = everything[[key not in kept for key in zip(everything["run"], everything["file"])]]
    return Results(cells=cells, runs=runs, sweep=sweep, unchosen=unchosen.reset_index(drop=True))


def _declare_from_measurements(names: set[str]) -> None:
    """The metric records of a run written before runs stored them (run.json without "metrics"), or before a field
    of theirs was added (`metrics.records_predate_fields`), declared by importing the built-in measurements (over
    the stored records of theirs) and each of `names` (a plug-in's module where it can be imported); a plug-in that
    cannot be leaves its metrics undeclared, so unranked, and a warning says how to store them."""
    from attnbench.measurements import MEASUREMENTS, measurement_names  # here only: importing them imports torch

    measurement_names()
    for name in sorted(names):
        try:
            MEASUREMENTS.get(name)
        except UserError as err:
            warnings.warn(
                f"measurement {name!r} of a run without stored metric records cannot be loaded ({err}): its metrics "
                f"have no declared direction and are shown unranked; make it importable, or rerun `attnbench run "
                f"SUITE --out RUN_DIR` (finished cells are kept) to store the records in run.json",
                stacklevel=3,
            )


def _in_plan(rows: list[dict[str, Any]], runs: list[RunInfo], stale: bool) -> list[dict[str, Any]]:
    """The rows of planned cells (with `stale`: of the others), noting the others' names in each RunInfo."""
    plans = {run.tag: run.planned for run in runs}
    kept = []
    for row in rows:
        plan = plans[row["run"]]
        outside = plan is not None and row["status"] != "unreadable" and row["cell_id"] not in plan
        if outside == stale:
            kept.append(row)
        elif outside:
            run = next(r for r in runs if r.tag == row["run"])
            run.left_out.append(
                f"{row['task']}/{row['label']}/s{row['seed']}/{row['measurement']}"
                + (f"/t{row['trial']}" if row["trial"] is not None else "")
            )
    if stale:
        for run in runs:
            run.not_run = []  # the plan's missing cells belong to the other report
    if stale and not kept:
        raise UserError(
            f"{', '.join(str(r.path) for r in runs)}: every stored cell belongs to the suite as it "
            f"stands; there are no stale cells to report"
        )
    return kept


def _run_tags(paths: list[Path]) -> list[str]:
    """Short unique names for run folders: the folder name, or parent/name where names repeat."""
    tags = [p.resolve().name for p in paths]
    if len(set(tags)) < len(tags):
        tags = [f"{p.resolve().parent.name}/{p.resolve().name}" for p in paths]
    if len(set(tags)) < len(tags):
        tags = [f"{t}#{i}" for i, t in enumerate(tags)]
    return tags


def _read_run(run: RunInfo) -> list[dict[str, Any]]:
    cell_dir = run.path / "cells"
    if not cell_dir.is_dir():
        raise UserError(
            f"no cell results folder {cell_dir}; pass a run folder written by `attnbench run` (it holds cells/*.json)"
        )
    files = sorted(cell_dir.glob("*.json"))
    if not files:
        raise UserError(f"{cell_dir} holds no *.json cell results; run the suite first")
    return [_read_cell(run.tag, f) for f in files]


def _read_plan(run: RunInfo, present: set[str]) -> str:
    """Suite name and planned-but-absent cell ids from RUN_DIR/run.json (absent or unreadable: nothing), the
    records of its metrics (`metrics.adopt_records`) and its tasks' test-row designs; what records it held:
    CURRENT_RECORDS, OLDER_RECORDS (stored before a field of theirs was added) or NO_RECORDS."""
    try:
        plan = json.loads((run.path / "run.json").read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return NO_RECORDS
    if not isinstance(plan, dict):
        return NO_RECORDS
    run.suite = plan.get("suite")
    run.config = plan.get("resolved_suite") if isinstance(plan.get("resolved_suite"), dict) else {}
    run.not_run = [cid for cid in plan.get("cell_ids") or [] if cid not in present]
    if isinstance(plan.get("cell_ids"), list):
        run.planned = set(plan["cell_ids"])
    adopt_designs(plan.get("test_rows"))
    if not adopt_records(plan.get("metrics")):
        return NO_RECORDS
    return OLDER_RECORDS if records_predate_fields(plan["metrics"]) else CURRENT_RECORDS


def adopt_designs(stored: Any) -> bool:
    """Take the tasks' declared designs a run stored (run.json "test_rows": {task name: "fresh" | "shared"}), so
    that reading the run needs no task module (nor torch); False where `stored` is no such mapping (a run written
    before runs stored them: the task registry is asked instead)."""
    if not isinstance(stored, dict):
        return False
    STORED.update({str(name): design for name, design in stored.items() if design in DESIGNS})
    return True


def declared_design(task_name: str | None) -> str:
    """The task's declared `test_rows`: as its run stored it, else the task registry's ("shared" for a name it
    does not know)."""
    if str(task_name) in STORED:
        return STORED[str(task_name)]
    from attnbench.tasks import TASKS  # here only: the task modules import torch; a run that stored them skips it

    try:
        return TASKS.get(str(task_name)).config.test_rows
    except UserError:  # a task this installation does not know (a plug-in not installed here): the safe reading
        return "shared"


def _read_cell(tag: str, path: Path) -> dict[str, Any]:
    """One row for CELL_COLUMNS; a file that cannot be read becomes status 'unreadable' with a reason."""
    base = {
        "run": tag,
        "cell_id": path.stem,
        "file": str(path),
        "suite": None,
        "measurement": None,
        "task": None,
        "label": None,
        "attention": None,
        "seed": None,
        "metrics": {},
        "details": {},
        "provenance": {},
        "task_options": {},
        "trial": None,
        "sweep": None,
    }
    data, problem = read_result(path, path.stem)
    if data is None:
        return {
            **base,
            "status": "unreadable",
            "reason": f"{problem}; the next `attnbench run` sets the file aside and runs its cell again",
        }
    cell = data["cell"]
    task = cell.get("task") or {}
    attention = cell.get("attention") or {}
    status = data["status"]
    return {
        **base,
        "cell_id": data.get("cell_id", path.stem),
        "suite": cell.get("suite"),
        "measurement": (cell.get("measurement") or {}).get("name"),
        "task": task.get("label") or task.get("name"),
        "task_options": task.get("options") or {},
        "label": data.get("label") or attention.get("label") or attention.get("name"),
        "attention": attention.get("name"),
        "seed": cell.get("seed"),
        "status": status,
        "reason": data.get("reason"),
        "metrics": {
            k: float(v)
            for k, v in (data.get("metrics") or {}).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        },
        "details": data.get("details") or {},
        "provenance": data.get("provenance") or {},
        "trial": (cell.get("sweep") or {}).get("trial"),
        "sweep": cell.get("sweep"),
    }


def _task_keys(cells: pd.DataFrame) -> pd.Series:
    """Task name, with the differing options appended where one name is run with several option sets."""
    keys = cells["task"].copy()
    for name, group in cells.groupby("task", dropna=True):
        variants = {json.dumps(o, sort_keys=True, default=str) for o in group["task_options"]}
        if len(variants) < 2:
            continue
        dicts = [json.loads(v) for v in variants]
        differing = sorted({k for d in dicts for k in d if any(e.get(k) != d.get(k) for e in dicts)})
        for idx, options in group["task_options"].items():
            keys[idx] = f"{name}({', '.join(f'{k}={options.get(k)}' for k in differing)})"
    return keys


def _tag_clashing_labels(cells: pd.DataFrame) -> pd.Series:
    """'label [run]' for labels measured in more than one run on the same (measurement, task)."""
    seen = cells.dropna(subset=["label"]).fillna({"task": "-", "measurement": "-"})
    runs_per = seen.groupby(["label", "measurement", "task"])["run"].nunique()
    clashing = {label for (label, _, _), n in runs_per.items() if n > 1}
    return pd.Series(
        [f"{label} [{run}]" if label in clashing else label for label, run in zip(cells["label"], cells["run"])],
        index=cells.index,
    )


def detail_rows(results: Results, measurement: str) -> pd.DataFrame:
    """details['rows'] of every ok cell of a measurement, one row each, with run/task/label/seed added."""
    out = []
    for _, cell in results.of(measurement).iterrows():
        for row in cell["details"].get("rows") or []:
            out.append(
                {
                    "run": cell["run"],
                    "task": cell["task"],
                    "label": cell["label"],
                    "attention": cell["attention"],
                    "seed": cell["seed"],
                    "cell_id": cell["cell_id"],
                    **row,
                }
            )
    return pd.DataFrame(out)


def metric_frame(results: Results, measurement: str) -> pd.DataFrame:
    """Long frame of the ok cells' flat metrics: run, task, label, seed, metric, value."""
    rows = [
        {"run": c["run"], "task": c["task"], "label": c["label"], "seed": c["seed"], "metric": name, "value": value}
        for _, c in results.of(measurement).iterrows()
        for name, value in c["metrics"].items()
    ]
    return pd.DataFrame(rows, columns=["run", "task", "label", "seed", "metric", "value"])


def not_ok(results: Results) -> pd.DataFrame:
    """Failed, skipped and unreadable cells with their reasons (for the report's problem list)."""
    cells = results.cells[results.cells["status"] != "ok"]
    return cells[["run", "status", "measurement", "task", "label", "seed", "reason", "file"]]


RESULT_COLUMNS = [
    "run",
    "cell_id",
    "measurement",
    "task",
    "label",
    "attention",
    "seed",
    "status",
    "reason",
    "metric",
    "value",
    "trial",
    "chosen",
]


def load_results(run_dir: str | Path) -> pd.DataFrame:
    """The stored results of a run folder as a long DataFrame: one row per cell and metric (RESULT_COLUMNS).

    A cell without metrics (failed, skipped, unreadable) is one row with metric and value missing. Sweep
    trials are all there: `trial` is the cell's trial (missing outside sweeps) and `chosen` says whether the
    report shows it (True for every cell outside sweeps). Read-only; the same reading as `attnbench report`."""
    results = load_runs([Path(run_dir)])
    unchosen = results.unchosen if results.unchosen is not None else results.cells.iloc[:0]
    rows = []
    for cells, chosen in ((results.cells, True), (unchosen, False)):
        for _, c in cells.iterrows():
            base = {k: c[k] for k in RESULT_COLUMNS if k in c.index} | {"chosen": chosen}
            metrics = c["metrics"] if isinstance(c["metrics"], dict) else {}
            rows += [base | {"metric": m, "value": v} for m, v in metrics.items()] or [
                base | {"metric": None, "value": float("nan")}
            ]
    frame = pd.DataFrame(rows, columns=RESULT_COLUMNS)
    frame["seed"] = pd.to_numeric(frame["seed"], errors="coerce").astype("Int64")
    frame["trial"] = pd.to_numeric(frame["trial"], errors="coerce").astype("Int64")
    frame["value"] = pd.to_numeric(frame["value"], errors="coerce")
    return frame.sort_values(
        ["measurement", "task", "label", "seed", "metric"], na_position="last", kind="stable"
    ).reset_index(drop=True)
