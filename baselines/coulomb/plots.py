"""Plots of the Coulomb model's report sections: what phase A did per (task, label), and the synthetic
experiment's Figures 1 and 2 with its runtime scaling, drawn from the sections' tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from attnbench.report.plot import Plot, label_colors, legend_below, new_figure, save_plot
from attnbench.report.sections import ReportContext
from attnbench.report.table import finite, slug


def _step_series(diagnostics: Any) -> list[list[dict]]:
    """Per-(layer, head) lists of per-step dicts, from nested lists or dicts of any depth."""
    if isinstance(diagnostics, dict):
        if isinstance(diagnostics.get("steps"), list):
            return _step_series(diagnostics["steps"])
        return [s for v in diagnostics.values() for s in _step_series(v)]
    if isinstance(diagnostics, list) and diagnostics:
        if all(isinstance(d, dict) and ("H" in d or "alignment" in d) for d in diagnostics):
            return [diagnostics]
        return [s for v in diagnostics for s in _step_series(v)]
    return []


def _as_float(value: Any) -> float:
    """A diagnostic value as float ('nan'/'inf' strings as stored for non-finite values; None -> NaN)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _numbers(values: Any) -> list[float]:
    """Flatten nested lists/dicts of numbers (pairwise-distance samples per layer/head)."""
    if isinstance(values, (int, float)) and not isinstance(values, bool):
        return [float(values)]
    if isinstance(values, dict):
        return [x for v in values.values() for x in _numbers(v)]
    if isinstance(values, list):
        return [x for v in values for x in _numbers(v)]
    return []


def _mean_curve(curves: list[list[float]]) -> np.ndarray | None:
    """Mean over curves of unequal length, step by step (NaN where no curve has a finite value)."""
    if not curves:
        return None
    length = max(len(c) for c in curves)
    padded = np.array([c + [np.nan] * (length - len(c)) for c in curves], dtype=float)
    ok = np.isfinite(padded)
    if not ok.any():
        return None
    count = ok.sum(axis=0)
    return np.where(count > 0, np.where(ok, padded, 0).sum(axis=0) / np.maximum(count, 1), np.nan)


def _step_panel(ax: Any, series: list[list[dict]], key: str, color: Any, ylabel: str) -> None:
    """One diagnostic per step: a thin line per layer/head and their mean in black."""
    curves = [[_as_float(s.get(key)) for s in steps] for steps in series]
    for c in curves:
        ax.plot(c, color=color, alpha=0.35, lw=0.8)
    mean = _mean_curve(curves)
    if mean is not None:
        ax.plot(mean, color="black", lw=1.5, label="mean over layers/heads")
    ax.set_xlabel("phase-A step")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)


def plot_coulomb(context: ReportContext, out_dir: Path) -> list[Plot]:
    """Per (task, label) with phase A: H and the objective's alignment on the training batches over steps (with
    the table's validation alignment before and after marked), drift against noise, pairwise distances."""
    results, colors = context.results, context.colors
    plots = []
    cells = results.of("accuracy").sort_values(["task", "label", "seed"])
    done = set()
    for _, cell in cells.iterrows():
        pa = cell["details"].get("phase_a")
        if not isinstance(pa, dict) or (cell["task"], cell["label"]) in done:
            continue
        series = _step_series(pa.get("diagnostics"))
        before, after = _numbers(pa.get("distances_before")), _numbers(pa.get("distances_after"))
        if not series and not before:
            continue
        done.add((cell["task"], cell["label"]))
        color = colors[cell["label"]]
        objective = pa.get("objective", pa.get("alignment_kind", "alignment"))
        fig = new_figure(13, 3.8)
        axes = fig.subplots(1, 4)
        _step_panel(axes[0], series, "H", color, "Hamiltonian H\n(training batch)")
        _step_panel(axes[1], series, "alignment", color, f"{objective} alignment\n(training batch)")
        measured = (pa.get("validation_alignment") or {}).get(objective) or {}
        if series and all(finite(measured.get(k)) for k in ("before", "after")):
            last = max(len(steps) for steps in series) - 1
            axes[1].plot(
                [0, last],
                [measured["before"], measured["after"]],
                "D",
                color="crimson",
                label=f"{pa.get('probe_split', 'train')} rows before / after (table)",
            )
        for panel in axes[:2]:  # below the panel: over the curves it hid the data and the neighbour's labels
            if panel.get_legend_handles_labels()[0]:
                panel.legend(fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False)
        ax = axes[2]
        for key, style in (("drift", "-"), ("noise", ":")):
            curves = [[_as_float(s.get(key)) for s in steps] for steps in series]
            mean = _mean_curve(curves)
            if mean is not None:
                ax.plot(mean, style, color="black" if key == "drift" else color, lw=1.5, label=f"median {key}")
        if ax.lines:
            ax.set_yscale("log")
            ax.legend(fontsize="x-small")
        ax.set_xlabel("phase-A step")
        ax.set_ylabel("per particle per step")
        ax.grid(True, which="both", alpha=0.3)
        ax = axes[3]
        if before or after:
            bins = np.histogram_bin_edges(before + after, bins=30)
            ax.hist(before, bins=bins, alpha=0.5, color="gray", label="before phase A", density=True)
            ax.hist(after, bins=bins, alpha=0.5, color=color, label="after phase A", density=True)
            ax.legend(fontsize="x-small")
        ax.set_xlabel("pairwise particle distance")
        ax.set_ylabel("density")
        title = f"Coulomb phase A, {cell['label']} on {cell['task']} (seed {cell['seed']}; thin lines: layers/heads)"
        fig.suptitle(title)
        plots.append(save_plot(fig, out_dir, f"coulomb_{slug(cell['task'])}_{slug(cell['label'])}", title))
    return plots


def _kernel_bands(ax: Any, data: pd.DataFrame, metric: str, colors: dict) -> None:
    """One line per method: mean of `metric` against sigma with a +-1 sd band; mis-specified SVMs dashed."""
    for method, part in data.groupby("method", sort=False):
        part = part.sort_values("sigma")
        mean, std = part[f"{metric}_mean"], part[f"{metric}_std"].fillna(0)
        dashed = method.startswith("rbf-svm") and not method.endswith("=0.5")
        ax.plot(part["sigma"], mean, marker="o", ms=3, color=colors[method], label=method, ls="--" if dashed else "-")
        ax.fill_between(part["sigma"], mean - std, mean + std, color=colors[method], alpha=0.15, lw=0)
    ax.set_xscale("log")
    ax.set_xlabel("label-noise scale σ (log)")
    ax.grid(True, alpha=0.3)


def plot_kernel_experiment(context: ReportContext, out_dir: Path) -> list[Plot]:
    """Figures 1 and 2 of the synthetic experiment (mean ± 1 sd over trials against σ) and the runtime sweep, from
    the section's tables (`kernel_experiment`, `kernel_f1`, `kernel_ablation`, `kernel_scaling`)."""
    plots = []
    accuracy, f1 = context.tables.get("kernel_experiment"), context.tables.get("kernel_f1")
    if accuracy is not None and f1 is not None:
        data = accuracy.data.merge(f1.data[["method", "sigma", "f1_mean", "f1_std"]], on=["method", "sigma"])
        colors = label_colors(data["method"])
        fig = new_figure(11.0, 4.6)
        axes = fig.subplots(1, 2)
        for ax, metric, name in zip(axes, ("accuracy", "f1"), ("test accuracy", "test F1")):
            _kernel_bands(ax, data, metric, colors)
            ax.set_ylabel(name)
        title = "Synthetic experiment (Figure 1): accuracy and F1 vs σ (band: ± 1 sd over trials)"
        fig.suptitle(title)
        legend_below(fig, axes)
        plots.append(save_plot(fig, out_dir, "kernel_experiment", title))
    ablation = context.tables.get("kernel_ablation")
    if ablation is not None:
        fig = new_figure(7.0, 4.6)
        ax = fig.subplots()
        _kernel_bands(ax, ablation.data, "accuracy", label_colors(ablation.data["method"]))
        ax.set_ylabel("test accuracy")
        title = "Synthetic experiment (Figure 2): λ ablation of the Langevin particles (band: ± 1 sd)"
        ax.set_title(title, fontsize="medium")
        legend_below(fig, ax)
        plots.append(save_plot(fig, out_dir, "kernel_ablation", title))
    scaling = context.tables.get("kernel_scaling")
    if scaling is not None:
        plots.append(_plot_kernel_scaling(scaling.data, out_dir))
    return plots


def _plot_kernel_scaling(data: pd.DataFrame, out_dir: Path) -> Plot:
    """Wall seconds against n (log-log), one line per method, the fitted exponent in the legend."""
    colors = label_colors(data["method"])
    fig = new_figure(7.0, 4.6)
    ax = fig.subplots()
    for method, part in data.dropna(subset=["seconds"]).groupby("method", sort=False):
        gamma, paper = part["exponent"].iloc[0], part["paper_exponent"].iloc[0]
        label = f"{method}: γ = {gamma:.2f}" + (f" (paper {paper:.2f})" if pd.notna(paper) else "")
        ax.plot(part["n"], part["seconds"], marker="o", ms=3, color=colors[method], label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("rows n (log)")
    ax.set_ylabel("wall seconds, fit + predict (log)")
    ax.grid(True, alpha=0.3, which="both")
    title = "Synthetic experiment: runtime scaling t ~ n^γ (Table 6)"
    ax.set_title(title, fontsize="medium")
    legend_below(fig, ax)
    return save_plot(fig, out_dir, "kernel_scaling", title)
