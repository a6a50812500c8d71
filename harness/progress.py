"""Live progress of a suite run with rich: cells done / failed / skipped / left, and each running cell."""
from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn, \
    TimeRemainingColumn


class ProgressUI:
    """An overall bar (with elapsed time and ETA) plus one line per running cell: name, phase, step.

    Drawn only on a terminal; elsewhere it stays silent and the caller prints a summary line.
    """

    def __init__(self, suite_name: str, *, total: int, done: int, enabled: bool = True):
        self.suite_name = suite_name
        self.counts = {"ok": 0, "failed": 0, "skipped": 0}
        self.total, self.done = total, done
        console = Console(file=sys.stderr)
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TimeRemainingColumn(), console=console,
                                 disable=not (enabled and console.is_terminal), transient=False)
        self.overall = self.progress.add_task(self._overall_text(), total=total, completed=done)
        self.running: dict[str, tuple[TaskID, str]] = {}

    def __enter__(self) -> "ProgressUI":
        self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.stop()

    def _overall_text(self) -> str:
        c = self.counts
        left = self.total - self.done
        kept = self.done - sum(c.values())
        return (f"{escape(self.suite_name)}: [green]{c['ok']} ok[/] [red]{c['failed']} failed[/] "
                f"[yellow]{c['skipped']} skipped[/] {kept} kept, {left} left")

    def start(self, key: str, name: str) -> None:
        """A cell started."""
        self.running[key] = (self.progress.add_task(f"  {escape(name)}", total=None), name)

    def update(self, key: str, phase: str, step: int, total: int) -> None:
        """The running cell `key` reports (phase, step, total), e.g. ('phase B', 3, 10)."""
        if key in self.running:
            task, name = self.running[key]
            self.progress.update(task, description=f"  {escape(name)} ({escape(phase)} {step}/{total})", completed=step, total=total)

    def finish(self, key: str, status: str) -> None:
        """A cell ended with `status` (ok, failed, skipped)."""
        if key in self.running:
            self.progress.remove_task(self.running.pop(key)[0])
        self.counts[status] = self.counts.get(status, 0) + 1
        self.done += 1
        self.progress.update(self.overall, completed=self.done, description=self._overall_text())
