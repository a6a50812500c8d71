"""The report's reading of stored results: `attnbench.results` (its names re-exported here, where the report and
its plug-ins import them) and each run's provenance block (`run_provenance`)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from attnbench.results import CELL_COLUMNS as CELL_COLUMNS
from attnbench.results import RESULT_COLUMNS as RESULT_COLUMNS
from attnbench.results import Results as Results
from attnbench.results import RunInfo as RunInfo
from attnbench.results import detail_rows as detail_rows
from attnbench.results import load_results as load_results
from attnbench.results import load_runs as load_runs
from attnbench.results import metric_frame as metric_frame
from attnbench.results import not_ok as not_ok


def _machine_probe(cells: pd.DataFrame) -> dict[str, Any] | None:
    """The roofline probe of a run's efficiency cells: matmul rate and copy bandwidth at the start of each cell
    and the range over the per-point probes, threads, allocator policy; None without efficiency cells."""
    machines, points = [], []
    for _, cell in cells[(cells["measurement"] == "efficiency") & (cells["status"] == "ok")].iterrows():
        details = cell["details"] if isinstance(cell["details"], dict) else {}
        if details.get("machine"):
            machines.append(details["machine"])
        points += [r for r in details.get("rows") or [] if r.get("probe_matmul_gflops")]
    if not machines:
        return None

    def span(values: list[float]) -> str:
        return f"{min(values):.1f}–{max(values):.1f}" if values else "n/a"

    first = machines[0]
    return {
        "device": first.get("device"),
        "threads": first.get("threads"),
        "matmul_gflops_at_cell_start": span([m["matmul_gflops"] for m in machines]),
        "copy_gb_per_s_at_cell_start": span([m["copy_gb_per_s"] for m in machines]),
        "matmul_gflops_around_points": span([r["probe_matmul_gflops"] for r in points]),
        "copy_gb_per_s_around_points": span([r["probe_copy_gb_per_s"] for r in points]),
        "method": first.get("method"),
        "matmul_size": first.get("matmul_size"),
        "allocator": (first.get("allocator") or {}).get("policy", "system"),
    }


def run_provenance(results: Results) -> list[dict[str, Any]]:
    """Per run: suite, commits, versions, machine, seeds, time span and cell counts with reasons."""
    out = []
    for run in results.runs:
        cells = results.cells[results.cells["run"] == run.tag]
        prov = [p for p in cells["provenance"] if p]

        def values(key: str) -> list[str]:
            return sorted({str(p[key]) for p in prov if p.get(key) not in (None, "")})  # noqa: B023

        packages = sorted({f"{k} {v}" for p in prov for k, v in (p.get("packages") or {}).items()})
        unchosen = (
            results.unchosen[results.unchosen["run"] == run.tag]
            if results.unchosen is not None and "run" in results.unchosen
            else cells.iloc[:0]
        )
        counts = pd.concat([cells["status"], unchosen["status"]]).value_counts().to_dict()
        reasons = cells[cells["status"] != "ok"].groupby(["status", "reason"], dropna=False).size()
        out.append(
            {
                "run": run.tag,
                "path": str(run.path),
                "suite": sorted({str(s) for s in cells["suite"].dropna()} | ({run.suite} if run.suite else set())),
                "git_commit": values("git_commit"),
                "git_dirty": values("git_dirty"),
                "attnbench_version": values("attnbench_version"),
                "python": values("python"),
                "torch": values("torch"),
                "packages": packages,
                "platform": values("platform"),
                "machine": values("machine"),
                "cpu": values("cpu"),
                "device": values("device"),
                "threads": values("threads"),
                "native_kernels": values("native_kernels"),
                "hostname": values("hostname"),
                "command": values("command"),
                "seeds": sorted({int(s) for s in cells["seed"].dropna()}),
                "started_at": min(values("started_at"), default=None),
                "finished_at": max(values("finished_at"), default=None),
                "cells": {"result files": len(cells) + len(unchosen)}
                | {status: int(counts.get(status, 0)) for status in ("ok", "failed", "skipped", "unreadable")}
                | {"not run": len(run.not_run), "unchosen sweep trials": len(unchosen), "left out": len(run.left_out)},
                "not_run_cell_ids": run.not_run,
                "left_out_cells": run.left_out,
                "machine_probe": _machine_probe(cells),
                "reasons": [
                    {"status": s, "reason": r if isinstance(r, str) else "no reason given", "count": int(n)}
                    for (s, r), n in reasons.items()
                ],
            }
        )
    return out
