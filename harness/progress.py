"""Live progress of a suite run: on a terminal a rich display (cells done / failed / skipped / left, and each
running cell); elsewhere (nohup, CI, a pipe) one flushed line on stdout per cell start and end and per epoch.
Either way the same lines go into each cell's log file."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import rich.progress
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, TaskID, TextColumn, TimeElapsedColumn, TimeRemainingColumn

Progress = Callable[[str, int, int], None]  # a cell's progress callback: (phase, step, total)


def epoch_phase(epoch_record: dict[str, float], metric: str = "val_accuracy") -> str:
    """The phase text of a finished training epoch, as progress callbacks pass it on:
    'phase B: loss 0.6931, val_accuracy 0.5000, 3.1 s'."""
    return (
        f"phase B: loss {epoch_record['train_loss']:.4f}, {metric} {epoch_record[metric]:.4f}, "
        f"{epoch_record['seconds']:.1f} s"
    )


class ProgressUI:
    """An overall bar (with elapsed time and ETA) plus one line per running cell: name, phase, step.

    Drawn on a terminal; elsewhere (when enabled) it prints a line per cell start, end and progress report
    (each epoch) to `stream` (stdout by default), flushed. With `log_path` (cell key -> file) every line is also
    appended to that cell's log.
    """

    def __init__(
        self,
        suite_name: str,
        *,
        total: int,
        done: int,
        enabled: bool = True,
        log_path: Callable[[str], Path] | None = None,
        stream: TextIO | None = None,
    ):
        self.suite_name = suite_name
        self.counts = {"ok": 0, "failed": 0, "skipped": 0}
        self.total, self.done = total, done
        console = Console(file=sys.stderr)
        live = enabled and console.is_terminal
        self.stream = None if live or not enabled else (stream or sys.stdout)
        self.log_path = log_path
        self.progress = rich.progress.Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
            disable=not live,
            transient=False,
        )
        self.overall = self.progress.add_task(self._overall_text(), total=total, completed=done)
        self.running: dict[str, tuple[TaskID, str]] = {}
        self.started: dict[str, float] = {}

    def _line(self, key: str, text: str) -> None:
        """One progress line: on the stream (off a terminal) and in the cell's log."""
        line = f"{time.strftime('%H:%M:%S')} {text}"
        if self.stream is not None:
            print(line, file=self.stream, flush=True)
        if self.log_path is not None:
            with open(self.log_path(key), "a") as log:
                print(line, file=log)

    def __enter__(self) -> "ProgressUI":
        self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.stop()

    def _overall_text(self) -> str:
        c = self.counts
        left = self.total - self.done
        kept = self.done - sum(c.values())
        return (
            f"{escape(self.suite_name)}: [green]{c['ok']} ok[/] [red]{c['failed']} failed[/] "
            f"[yellow]{c['skipped']} skipped[/] {kept} kept, {left} left"
        )

    def start(self, key: str, name: str) -> None:
        """A cell started."""
        self.running[key] = (self.progress.add_task(f"  {escape(name)}", total=None), name)
        self.started[key] = time.perf_counter()
        self._line(key, f"start {name} ({key}); {self.done} of {self.total} cells done")

    def update(self, key: str, phase: str, step: int, total: int) -> None:
        """The running cell `key` reports (phase, step, total), e.g. ('phase B', 3, 10)."""
        if key in self.running:
            task, name = self.running[key]
            self.progress.update(
                task, description=f"  {escape(name)} ({escape(phase)} {step}/{total})", completed=step, total=total
            )
            if ":" in phase or step == total:  # epochs carry their figures; other phases only their end
                self._line(
                    key,
                    f"  {name} {phase.split(':')[0]} {step}/{total}"
                    + (f":{phase.split(':', 1)[1]}" if ":" in phase else ""),
                )

    def finish(self, key: str, status: str) -> None:
        """A cell ended with `status` (ok, failed, skipped)."""
        name = key
        if key in self.running:
            task, name = self.running.pop(key)
            self.progress.remove_task(task)
        self.counts[status] = self.counts.get(status, 0) + 1
        self.done += 1
        seconds = time.perf_counter() - self.started.pop(key, time.perf_counter())
        self._line(key, f"end {name}: {status} in {seconds:.1f} s; {self.done} of {self.total} cells done")
        self.progress.update(self.overall, completed=self.done, description=self._overall_text())
