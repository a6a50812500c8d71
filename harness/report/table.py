"""The report table: numbers for CSV, display strings, best-cell marks, footnotes; number formatting.

Missing values are NaN in `data` and a dash in `text`; they are left out of every average and rank,
never counted as zero.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import string

import numpy as np
import pandas as pd

DASH = "—"
SLUG_CHARACTERS = frozenset(string.ascii_lowercase + string.digits + "-_")


@dataclasses.dataclass
class Table:
    """One report table: numbers for CSV, strings for display, best-cell marks, footnotes."""

    name: str  # file stem, e.g. "task_sst2"
    title: str
    data: pd.DataFrame
    text: pd.DataFrame
    best: pd.DataFrame  # bool, same shape as text
    notes: list[str]
    key_columns: int = 1  # leading columns that name the row (left-aligned)


def finite(x: object) -> bool:
    return isinstance(x, (int, float, np.floating, np.integer)) and math.isfinite(float(x))


def _decimals(x: float) -> int:
    a = abs(x)
    return 0 if a >= 1000 else 1 if a >= 100 else 2 if a >= 10 else 3


def fmt(x: object, decimals: int | None = None) -> str:
    """A number for display: 3 decimals below 10, fewer above, thousands separators, dash if missing."""
    if not finite(x):
        return DASH
    x = float(x)
    if x != 0 and (abs(x) >= 1e6 or abs(x) < 1e-3) and decimals is None:
        return f"{x:.2e}"
    d = _decimals(x) if decimals is None else decimals
    return f"{x:,.{d}f}"


def fmt_summary(s: dict[str, float], row_n: int | None = None) -> str:
    """'mean ± std' over seeds (std from 2 seeds; n shown where it differs from the row's): a description of the
    seeds' spread, not an interval (intervals come from the inference engine, `attnbench.report.inference`)."""
    if s["n"] == 0 or not finite(s["mean"]):
        return DASH
    d = None if abs(s["mean"]) < 1e-3 and s["mean"] != 0 else _decimals(s["mean"])
    text = fmt(s["mean"], d)
    if s["n"] >= 2:
        text += f" ± {fmt(s['std'], d)}"
    if row_n is not None and s["n"] != row_n:
        text += f" n={s['n']}"
    return text


def best_mask(values: pd.DataFrame, directions: dict[str, str | None], groups: pd.Series | None = None) -> pd.DataFrame:
    """True where a column's value is the best of its column (within each group, if given)."""
    mask = pd.DataFrame(False, index=values.index, columns=values.columns)
    keys = groups if groups is not None else pd.Series(0, index=values.index)
    for column, direction in directions.items():
        if direction is None or column not in values:
            continue
        col = pd.to_numeric(values[column], errors="coerce")
        for _, idx in keys.groupby(keys).groups.items():
            part = col.loc[idx].dropna()
            if len(part) >= 2 and part.nunique() > 1:
                target = part.max() if direction == "max" else part.min()
                mask.loc[part.index[np.isclose(part, target, rtol=1e-12, atol=0)], column] = True
    return mask


def slug(name: str) -> str:
    """A file name (and HTML id) for `name`, one per name: lower-case ASCII letters, digits, '-' and '_' are kept;
    a name with anything else ('rt.v1', 'pathfinder(resolution=32)', 'RT') gets those replaced by '_' and 8 hex
    digits of its sha256 appended, so that 'rt.v1' and 'rt_v1' never share a file."""
    text = str(name)
    kept = "".join(ch if ch in SLUG_CHARACTERS else "_" for ch in text).strip("_")
    return kept if kept == text else f"{kept}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def group_keys(frame: pd.DataFrame, columns: list[str]) -> pd.Series:
    """One string key per row from the given columns (missing values included), for grouping best marks."""
    return pd.Series(
        ["|".join(str(v) for v in row) for row in frame[columns].itertuples(index=False)], index=frame.index
    )
