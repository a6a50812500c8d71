"""How many cells run at once, and with how many torch threads each (`attnbench run --workers auto|N`).

`choose_split` is a pure function of facts about the suite (`SuiteFacts`) and the machine
(`MachineFacts`); `suite_facts` and `machine_facts` gather them. The rules, in order:

- `--workers N`: N processes (1: this process) with cores // N torch threads each, or `--threads`;
- auto never gives a process more torch threads than the cores other work leaves free (`MachineFacts.free_cores`,
  watched for LOAD_SECONDS at the start): torch's threads wait for each other at every operation, so one of them
  kept off its core by another process stalls them all (smoke beside a 2-thread job: 278 s on 2 threads, 74 s on
  one); where the load cannot be read, one thread;
- cells on a GPU: one at a time (they would share it);
- a suite with a measurement that times calls or measures memory (its options dataclass declares
  `measures_time = True`, a typing.ClassVar): one cell at a time with all cores, since cells side by
  side would slow each other's clocks;
- a small suite (fewer than FEW_CELLS cells, or training work estimated under TINY_SECONDS in this
  process): this process, since starting a worker costs seconds (it imports torch);
- otherwise one process per core, fewer when the suite has fewer cells or the machine's memory holds
  fewer cells of CELL_FOOTPRINT_GIB, with cores // workers torch threads each.

The thread count depends on the suite and the machine only, never on how many cells are left: CPU
results are bit-identical only at equal threads, so a resumed run computes its remaining cells with
the threads of its first sitting. `running_workers` may start fewer processes than planned (few cells
left, little memory free now) and leaves the threads as they are.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from pathlib import Path
from typing import Any

from attnbench.cell_spec import CellSpec
from attnbench.plan import Suite
from attnbench.provenance import usable_cores

# From benchmarks/workers.py (results/benchmarks/workers.txt and earlier runs), on 2 cores of which another run kept
# about 1 busy: a worker took 2-3 s from spawn to ready (it imports torch), two at once 4-6 s; four compare-quick
# cells ran 6x faster in two 1-thread workers than in one process on 2 threads (torch's threads wait on each other
# on a busy machine) and trained ~90,000 tokens/s on one thread.
SPAWN_SECONDS = 3.0  # one worker process, spawn to ready
TINY_SECONDS = 12.0  # estimated work under this runs here: two workers' start (4-6 s) would eat even a 2x gain
TOKENS_PER_SECOND = 30_000.0  # in one process: between 2 threads on the busy machine (11,000) and 1 thread (90,000)
FEW_CELLS = 8  # fewer cells run here: with ~3 s cells, two workers' start outweighs what they save below about 8
LOAD_SECONDS = 0.5  # how long `attnbench run --workers auto` watches the machine's CPU counters before choosing
BUSY_CORE = 0.25  # a core counts as taken by other work that keeps more than this share of it busy
# Peak resident memory of one cell's process: paper-rt (d_model 128, M = 256, length 128) peaked at 1.43 GiB in a
# worker (VmHWM), compare-quick at 0.65 GiB; the estimate leaves room above the larger.
CELL_FOOTPRINT_GIB = 2.0


@dataclasses.dataclass(frozen=True)
class MachineFacts:
    """What the split depends on about this machine."""

    cores: int  # usable by this process (os.sched_getaffinity)
    memory_gib: float  # total memory, which does not change between sittings (available memory bounds only
    # the processes started, in running_workers)
    torch_threads: int  # this process's torch threads (all cores unless OMP_NUM_THREADS says otherwise)
    others_cores: float | None = 0.0  # cores other processes kept busy at the start (None: unknown)

    @property
    def free_cores(self) -> int:
        """The cores other work leaves free (at least 1): one per core that others keep busy beyond BUSY_CORE of
        it goes; 1 where the load is unknown (when in doubt, one thread)."""
        if self.others_cores is None:
            return 1
        return max(1, min(self.cores, self.cores - math.ceil(self.others_cores - BUSY_CORE)))

    def busy_note(self, threads: int) -> str:
        """'; 1 thread: other processes kept 1.9 of 2 cores busy' where the load cut the threads, else ''."""
        if threads >= min(self.torch_threads, self.cores) or threads > self.free_cores:
            return ""
        load = "the load is unknown" if self.others_cores is None else f"other processes kept {self.others_cores:.1f}"
        load += "" if self.others_cores is None else f" of {self.cores} cores busy"
        return f"; {threads} thread{'s' * (threads != 1)} as {load}"


@dataclasses.dataclass(frozen=True)
class SuiteFacts:
    """What the split depends on about the suite (all its cells, whatever --filter selects)."""

    cells: int
    timed: tuple[str, ...] = ()  # its measurements that time calls or measure memory
    tokens: float | None = None  # estimated training tokens of all its cells; None: unknown for some cell


@dataclasses.dataclass(frozen=True)
class Split:
    """The planned split of the cores: `workers` processes (1: one cell at a time) of `threads` torch threads."""

    workers: int
    threads: int
    chosen_by: str  # "auto: <reason>" or the flags that chose it

    def provenance(self) -> dict[str, Any]:
        """As recorded in run.json and (with the processes started in its sitting) in each cell's provenance."""
        return {"workers": self.workers, "threads": self.threads, "chosen_by": self.chosen_by}

    def line(self, running: int) -> str:
        """The line printed at run start, e.g. 'workers auto: 2 processes x 1 thread (100 cells, ...)'."""
        how, _, why = self.chosen_by.partition(": ")
        threads = f"{self.threads} thread{'s' * (self.threads != 1)}"
        if self.workers == 1:
            shape = f"1 cell at a time with {threads}"
        else:
            shape = f"{self.workers} processes x {threads}"
            if running < self.workers:
                shape += f", {running} started (the threads stay {self.threads})"
        return f"workers {how.removeprefix('--workers ')}: {shape}" + (f" ({why})" if why else "")


def choose_split(
    suite: SuiteFacts,
    machine: MachineFacts,
    *,
    workers: int | None = None,
    threads: int | None = None,
    device: str = "cpu",
) -> Split:
    """The split for `suite` on `machine`; `workers` and `threads` are the explicit flags (None: auto)."""
    if workers is not None:
        chosen = threads or (machine.torch_threads if workers == 1 else max(1, machine.cores // workers))
        return Split(workers, chosen, f"--workers {workers}" + (f" --threads {threads}" if threads else ""))
    one = threads or min(machine.torch_threads, machine.free_cores)
    busy = "" if threads else machine.busy_note(one)
    if device != "cpu":
        return Split(1, one, f"auto: cells run on {device}, one at a time, as they share it{busy}")
    if suite.timed:
        verbs = "time calls or measure memory" if len(suite.timed) > 1 else "times calls or measures memory"
        return Split(
            1, one, f"auto: {', '.join(suite.timed)} {verbs}; cells side by side would slow each other's clocks{busy}"
        )
    if suite.cells < FEW_CELLS:
        return Split(
            1,
            one,
            f"auto: {suite.cells} cells, fewer than {FEW_CELLS}: a worker takes ~{SPAWN_SECONDS:g} s to start{busy}",
        )
    seconds = None if suite.tokens is None else suite.tokens / TOKENS_PER_SECOND
    if seconds is not None and seconds < TINY_SECONDS:
        return Split(
            1,
            one,
            f"auto: {suite.cells} cells of ~{seconds:.0f} s of training in all, less than "
            f"{TINY_SECONDS:g} s: a worker takes ~{SPAWN_SECONDS:g} s to start{busy}",
        )
    by_cores = machine.cores // (threads or 1)
    by_memory = max(1, int(machine.memory_gib // CELL_FOOTPRINT_GIB))
    count = max(1, min(by_cores, suite.cells, by_memory))
    if count == 1:
        why = (
            f"{machine.memory_gib:.1f} GiB holds one cell of ~{CELL_FOOTPRINT_GIB:g} GiB"
            if by_memory == 1
            else f"{machine.cores} core{'s' * (machine.cores != 1)} for cells of {threads or 1} thread"
            + "s" * ((threads or 1) != 1)
        )
        return Split(1, one, f"auto: {why}{busy}")
    memory = (
        f", memory for {count} cells of ~{CELL_FOOTPRINT_GIB:g} GiB"
        if count == by_memory < min(by_cores, suite.cells)
        else ""
    )
    each = threads or max(1, min(machine.cores // count, machine.free_cores // count))
    busy = "" if threads or each >= machine.cores // count else machine.busy_note(each)
    return Split(count, each, f"auto: {suite.cells} cells, no timing measurements{memory}{busy}")


def running_workers(split: Split, pending: int, free_gib: float) -> int:
    """The processes to start now: the planned ones, fewer when fewer cells are left or less memory is free."""
    return max(1, min(split.workers, pending, int(free_gib // CELL_FOOTPRINT_GIB)))


def timed_measurements(suite: Suite) -> tuple[str, ...]:
    """The suite's measurements that time calls or measure memory (options dataclass: `measures_time = True`)."""
    from attnbench.measurements import MEASUREMENTS

    return tuple(
        m["name"] for m in suite.measurements if getattr(MEASUREMENTS.get(m["name"]).config, "measures_time", False)
    )


def cell_tokens(suite: Suite, cell: CellSpec) -> float | None:
    """Training tokens of a cell, epochs x training rows x row length, where its task declares its size
    (num_train, max_train_examples, or training.max_train_examples); None when unknown (e.g. no task)."""
    task = suite.resolved["tasks"].get(cell.task.label)
    training = cell.training
    if not task or "max_length" not in task:
        return None
    rows = [n for n in (task.get("num_train"), task.get("max_train_examples"), training.get("max_train_examples")) if n]
    epochs = training.get("epochs", suite.resolved.get("training", {}).get("epochs"))
    if not rows or not epochs:
        return None
    return float(epochs * min(rows) * task["max_length"])


def suite_facts(suite: Suite) -> SuiteFacts:
    """The facts of `suite` that the split depends on: every cell, not only those left to run."""
    cells = suite.cells()
    tokens = [cell_tokens(suite, cell) for cell in cells]
    return SuiteFacts(len(cells), timed_measurements(suite), None if None in tokens else sum(tokens))


def machine_facts(load_seconds: float = 0.0) -> MachineFacts:
    """Cores this process may use, total memory, this process's torch threads and, watched for `load_seconds`
    (0: not watched, taken as idle), the cores other processes keep busy (None where unreadable): the larger of
    the window's reading and the 1-minute load average, since the split holds for every sitting of the run."""
    import torch

    from attnbench.timing import cpu_snapshot, others_cores

    others: float | None = 0.0
    cores = usable_cores()
    if load_seconds > 0:
        before = cpu_snapshot()
        time.sleep(load_seconds)
        others = others_cores(before, cpu_snapshot())
        if others is not None:  # a lull in the window is not a free core: the last minute's run queue counts too
            others = max(others, min(float(cores), _load_average()))
    return MachineFacts(cores, _total_gib(), torch.get_num_threads(), others)


def _load_average() -> float:
    """The 1-minute load average (runnable tasks, this process asleep while it is read), 0 where unknown."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return 0.0


def _total_gib() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def available_gib() -> float:
    """Memory available now (MemAvailable in /proc/meminfo, Linux), else the total."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    except (OSError, ValueError, IndexError):
        pass
    return _total_gib()
