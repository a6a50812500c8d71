"""Cells per hour of a suite's cells under each split of the cores, the figures behind attnbench.workers.

The same few real cells (default: four of compare-quick, a Rotten Tomatoes subset; the suite's cell_timeout
dropped, so that 1 x N runs in one process as `attnbench run` does for a suite without one) go through
`attnbench run` once per split and round, each time a fresh process with a fresh run folder, as a user runs it
(torch imported, data loaded, caches cold): in one process with all N cores as torch threads (1 x N), in N
worker processes of one thread (N x 1), and in one process on one thread (1 x 1: what N x 1 gains by running
cells side by side, apart from what it gains by one thread per cell), in alternated order (A B C, then C B A)
so that all see the same machine. Per sitting and per split: wall time, cells per hour, the 1-minute load average
and the cores other processes kept busy meanwhile (the machine was busy when that is well above 0). Also the
seconds a worker process takes from spawn to ready (attnbench.workers.SPAWN_SECONDS), one alone and N at once,
the training tokens per second of the cells (TOKENS_PER_SECOND), and the largest peak resident memory of a
run's process (CELL_FOOTPRINT_GIB).

    python benchmarks/workers.py | tee results/benchmarks/workers.txt
    python benchmarks/workers.py --suite synthetic --filter 'listops/*/s0/*' --rounds 1
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attnbench.executor import select_cells  # noqa: E402
from attnbench.provenance import usable_cores  # noqa: E402
from attnbench.store import RunStore  # noqa: E402
from attnbench.suite import find_suite, load_suite  # noqa: E402
from attnbench.timing import cpu_snapshot  # noqa: E402
from attnbench.workers import cell_tokens  # noqa: E402

DEFAULT_FILTERS = ("*/s0/accuracy/t0", "*/softmax/s1/accuracy/t0")  # compare-quick: each attention once, softmax twice


def _ready() -> None:
    """What a worker process imports before it takes a cell (attnbench.worker_executor._worker_main)."""
    import torch  # noqa: F401

    from attnbench.measurements import MEASUREMENTS
    from attnbench.registry import ATTENTIONS

    MEASUREMENTS.names(), ATTENTIONS.names()


def spawn_seconds(count: int) -> float:
    """Seconds until `count` spawned processes, started at once, have all imported what a worker imports."""
    ctx = multiprocessing.get_context("spawn")
    t0 = time.perf_counter()
    processes = [ctx.Process(target=_ready) for _ in range(count)]
    for p in processes:
        p.start()
    for p in processes:
        p.join()
    return time.perf_counter() - t0


class LoadSampler:
    """The 1-minute load average, sampled every second while a sitting runs."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(os.getloadavg()[0])
            self._stop.wait(1.0)

    def __enter__(self) -> "LoadSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def own_cpu_seconds() -> float:
    """CPU seconds of this process and its waited-for children (each run, with its workers once joined)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def sitting(path: Path, filters: tuple[str, ...], workers: int, threads: int, run_dir: Path) -> dict[str, Any]:
    """One `attnbench run` of the selected cells with `workers` x `threads`: wall s, load, others' cores, cells ok."""
    command = [
        sys.executable,
        "-m",
        "attnbench",
        "run",
        str(path),
        "--out",
        str(run_dir),
        "--workers",
        str(workers),
        "--threads",
        str(threads),
        "--quiet",
        *(f"--filter={p}" for p in filters),
    ]
    before, cpu0 = cpu_snapshot(), own_cpu_seconds()
    with LoadSampler() as load:
        t0 = time.perf_counter()
        subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
    after, cpu1 = cpu_snapshot(), own_cpu_seconds()
    others = None
    if before is not None and after is not None:
        others = max(0.0, (after.machine_busy_s - before.machine_busy_s) - (cpu1 - cpu0)) / wall
    records = list(RunStore(run_dir).records())
    return {
        "wall": wall,
        "cells": len(records),
        "ok": sum(r["status"] == "ok" for r in records),
        "load": statistics.mean(load.samples),
        "others": others,
        "split": RunStore(run_dir).run_info()["provenance"]["split"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="compare-quick", help="suite name or YAML (default compare-quick)")
    parser.add_argument(
        "--filter",
        action="append",
        default=None,
        metavar="PATTERN",
        help=f"cells to run, globs over names (default: {' '.join(DEFAULT_FILTERS)})",
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="sittings per split, in alternated order A B C, C B A (default 2)"
    )
    args = parser.parse_args()
    filters = tuple(args.filter or DEFAULT_FILTERS)
    cores = usable_cores()
    splits = [(1, cores), (cores, 1), (1, 1)]

    with tempfile.TemporaryDirectory() as tmp:
        raw = yaml.safe_load(find_suite(args.suite).read_text())
        raw.pop("cell_timeout", None)  # 1 x N then runs in one process
        path = Path(tmp) / f"{raw['name']}.yaml"
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        suite = load_suite(str(path))
        chosen = select_cells(suite, filters)
        tokens = [cell_tokens(suite, c) for c in chosen]
        print(
            f"{args.suite}: {len(chosen)} cells ({', '.join(filters)}), cell_timeout dropped; {cores} usable "
            f"cores; load average at the start {os.getloadavg()[0]:.2f}",
            flush=True,
        )

        alone = [spawn_seconds(1) for _ in range(3)]
        together = [spawn_seconds(cores) for _ in range(2)]
        print(
            f"worker start (spawn to ready: torch and the registries imported): one alone "
            f"{statistics.median(alone):.2f} s (median of 3: {', '.join(f'{s:.2f}' for s in alone)}), {cores} at "
            f"once {statistics.median(together):.2f} s (median of 2); load average {os.getloadavg()[0]:.2f}",
            flush=True,
        )

        results: dict[tuple[int, int], list[dict[str, Any]]] = {s: [] for s in splits}
        for r in range(args.rounds):
            for workers, threads in splits if r % 2 == 0 else splits[::-1]:
                got = sitting(path, filters, workers, threads, Path(tmp) / f"run-{r}-{workers}x{threads}")
                results[(workers, threads)].append(got)
                others = "n/a" if got["others"] is None else f"{got['others']:.2f}"
                print(
                    f"  round {r + 1}: {workers} x {threads}: {got['wall']:.1f} s, {got['ok']}/{got['cells']} ok, "
                    f"{3600 * got['cells'] / got['wall']:.0f} cells/h, load {got['load']:.2f}, others' cores "
                    f"{others}; recorded {got['split']}",
                    flush=True,
                )

    print(
        "| split | sittings | wall s (each) | median wall s | cells/h | vs 1 x N | tokens/s | load average | "
        "others' cores |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    base = statistics.median(x["wall"] for x in results[splits[0]])
    for (workers, threads), runs in results.items():
        wall = statistics.median(x["wall"] for x in runs)
        others = [x["others"] for x in runs if x["others"] is not None]
        name = f"{workers} x {threads}" + (" in one process" if workers == 1 else " worker processes")
        walls = ", ".join(f"{x['wall']:.1f}" for x in runs)
        rate = "n/a" if None in tokens else f"{sum(tokens) / wall:.0f}"
        print(
            f"| {name} | {len(runs)} | {walls} | {wall:.1f} | {3600 * len(chosen) / wall:.0f} | {base / wall:.2f}x | "
            f"{rate} | {statistics.mean(x['load'] for x in runs):.2f} | "
            + (f"{statistics.mean(others):.2f} |" if others else "n/a |")
        )
    if None not in tokens:
        print(
            f"training tokens of the cells (epochs x rows x length, attnbench.workers.cell_tokens): {sum(tokens):.0f}"
        )
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    print(f"largest peak resident memory of a run's process (the whole run in one process, or a worker): {rss:.2f} GiB")
    busy = [x["others"] for runs in results.values() for x in runs if x["others"] is not None]
    if busy and statistics.mean(busy) > 0.5:
        print(
            f"the machine was busy: other processes kept {statistics.mean(busy):.2f} of {cores} cores busy on "
            f"average; the splits are compared under the same load (alternated), not on a quiet machine"
        )


if __name__ == "__main__":
    main()
