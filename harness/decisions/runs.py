"""A run folder as the engine's input (`attnbench.compare("results/recall", ...)`): its chosen, ok cells as the
engine's frame (`attnbench.decisions.cells`) and its suite's comparison settings (margins, correction, pairs).
Reads through `attnbench.results`, as the report does."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from attnbench.decisions.cells import cells_frame
from attnbench.decisions.settings import ComparisonSettings, comparison_settings
from attnbench.results import load_runs


def read_run(run_dir: str | Path, metric: str | None = None) -> tuple[pd.DataFrame, ComparisonSettings]:
    """A run folder's engine frame and its suite's comparison settings."""
    results = load_runs([Path(run_dir)])
    config = results.runs[0].config if results.runs else {}
    return cells_frame(results.ok, metric), comparison_settings(config.get("comparisons"))
