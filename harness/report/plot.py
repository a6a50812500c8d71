"""What every report plot shares: the written `Plot`, one colour per label, and the figure, save and legend
helpers (matplotlib, Agg canvas, no pyplot state; each plot written as PNG and SVG).

Every plot colours an attention label the same way (`label_colors`, keyed by the sorted labels).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import colormaps, rc_context
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D


@dataclasses.dataclass
class Plot:
    """A written plot: its name, a caption, and the PNG and SVG files."""

    name: str
    title: str
    png: Path
    svg: Path


def label_colors(labels: Iterable[str]) -> dict[str, tuple[float, ...]]:
    """One colour per label, assigned in sorted order (tab10, tab20, then evenly spaced hues)."""
    labels = sorted(set(labels))
    if len(labels) <= 10:
        palette = [colormaps["tab10"](i) for i in range(10)]
    elif len(labels) <= 20:
        palette = [colormaps["tab20"](i) for i in range(20)]
    else:
        palette = [colormaps["hsv"](i / len(labels)) for i in range(len(labels))]
    return {label: palette[i] for i, label in enumerate(labels)}


def new_figure(width: float, height: float) -> Figure:
    """A figure of that size in inches on its own Agg canvas, laid out by matplotlib's constrained layout."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_plot(fig: Figure, out_dir: Path, name: str, title: str) -> Plot:
    """Write the figure as out_dir/NAME.png and NAME.svg (the same size in inches); returns the written plot. A
    name this report has already written gets '-2', '-3' (never overwriting another plot)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    base, n = name, 1
    while (out_dir / f"{name}.png").exists():
        n += 1
        name = f"{base}-{n}"
    png, svg = out_dir / f"{name}.png", out_dir / f"{name}.svg"
    # tight: the saved canvas grows to hold a suptitle or an outside legend wider than the panels (no clipping)
    fig.savefig(png, dpi=110, bbox_inches="tight", pad_inches=0.1)
    fig.set_layout_engine("none")  # keep the layout just computed; the SVG has the same size in inches
    # text stays text (searchable, editable for a paper); no date and fixed ids: the same results give the same
    # bytes, so a re-rendered report changes only where its numbers do
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "attnbench"}):
        fig.savefig(svg, bbox_inches="tight", pad_inches=0.1, metadata={"Date": None})
    return Plot(name, title, png, svg)


def legend_below(fig: Figure, axes: Any, extra: list[Line2D] | None = None) -> None:
    """One legend below the figure for the labels of all panels (each label once), plus extra entries."""
    entries: dict[str, Any] = {}
    for ax in np.atleast_1d(axes):
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    for handle in extra or []:
        entries[handle.get_label()] = handle
    if entries:
        fig.legend(
            list(entries.values()),
            list(entries),
            loc="outside lower center",
            ncols=min(4, len(entries)),
            fontsize="small",
            frameon=False,
        )
