"""A cell's run-time, below both the cell and the measurements: seeding, the note of what the cell actually used
(for its provenance), and the cell's time limit."""

from __future__ import annotations

import contextlib
import contextvars
import json
import random
import signal
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch


class CellTimeout(Exception):
    """A cell ran past its time limit."""


def seed_everything(seed: int) -> None:
    """Seed Python, numpy and torch so that a cell is reproducible on its own."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


# the running cell's notes (set by Cell.run; None outside a running cell)
WHAT_RAN: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("what_ran", default=None)


def record_what_ran(key: str, value: Any) -> None:
    """Note what the running cell actually used, for its provenance: key 'model' (the resolved ModelConfig,
    with the task's classes, vocabulary and length) replaces provenance.config.model; key 'data' (the task's
    split sizes, class names and counts, dropped rows) becomes provenance.data. The first note of a key wins
    (a measurement may build helper models after the cell's own); outside a running cell it does nothing."""
    ran = WHAT_RAN.get()
    if ran is not None and key not in ran:
        ran[key] = json.loads(json.dumps(value, default=str))  # stored as JSON: paths, numpy scalars as text


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise CellTimeout in this thread after `seconds` (SIGALRM); no limit when None or off the main thread."""
    if seconds is None or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise CellTimeout(f"the cell ran past its time limit of {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
