"""Child processes in tests: each started in its own process group and ended with all its children when the test
ends, pass or fail; waits that fail only when the child dies or hangs, never because a loaded machine is slow."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable

HANG_GUARD = 600.0  # seconds: a wait fails after this only if the child hangs; no slow machine takes this long


class Children:
    """The processes a test starts (`start`), killed by process group in `end_all`."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen] = []

    def start(self, args: list[str], **kwargs) -> subprocess.Popen:
        process = subprocess.Popen(args, start_new_session=True, **kwargs)
        self.started.append(process)
        return process

    def end_all(self) -> None:
        for process in self.started:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)  # the child and every process it started
            process.wait()
            for stream in (process.stdin, process.stdout, process.stderr):
                if stream is not None:
                    stream.close()


def wait_until(condition: Callable[[], bool], process: subprocess.Popen | None = None, what: str = "") -> None:
    """Poll `condition` until it holds; fail at once if `process` exits first (with its stderr), or after HANG_GUARD."""
    start = time.monotonic()
    while not condition():
        if process is not None and process.poll() is not None:
            err = process.stderr.read() if process.stderr is not None else ""
            raise AssertionError(f"the child exited with {process.returncode} before {what}: {err}")
        if time.monotonic() - start > HANG_GUARD:
            raise AssertionError(f"hung: {what} did not happen in {HANG_GUARD:.0f} s")
        time.sleep(0.05)
