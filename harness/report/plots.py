"""Plots from stored cell results, drawn with the shared helpers of `attnbench.report.plot`: PNG and SVG each."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.transforms import blended_transform_factory

from attnbench.baselines.coulomb.report import (
    kernel_ablation_table,
    kernel_f1_table,
    kernel_scaling_table,
    kernel_table,
)
from attnbench.report.load import Results, metric_frame
from attnbench.report.measurement_tables import robustness_rows
from attnbench.report.plot import Plot, label_colors, legend_below, new_figure, save_plot
from attnbench.report.table import finite, slug

MIB = 2.0**20


def plot_efficiency(eff: pd.DataFrame, colors: dict, out_dir: Path) -> list[Plot]:
    """Time and peak memory vs sequence length (log-log), one line per label; OOM/timeout as x at the top; points
    timed on a busy machine (column `busy`) ringed in red."""
    if eff.empty:
        return []
    plots = []
    shape = ["mode", "batch", "heads", "head_dim"]  # one panel per mode and tensor shape
    panels = list(eff.groupby(shape, dropna=False, sort=True))
    for column, name, ylabel, scale in (
        ("median_ms", "time_vs_length", "time per call (ms)", 1.0),
        ("peak_mem_bytes", "memory_vs_length", "peak memory (MiB)", 1 / MIB),
    ):
        if eff[column].notna().sum() == 0:
            continue
        fig = new_figure(4.2 * len(panels) + 1.0, 4.0)
        axes = fig.subplots(1, len(panels), squeeze=False)[0]
        failed_seen = busy_seen = False
        for ax, ((mode, batch, heads, head_dim), part) in zip(axes, panels):
            top = blended_transform_factory(ax.transData, ax.transAxes)
            for label, rows in part.groupby("label", sort=True):
                rows = rows.sort_values("seq_len")
                ok = rows[(rows["status"] == "ok") & rows[column].notna()]
                ax.plot(ok["seq_len"], ok[column] * scale, marker="o", ms=3, color=colors[label], label=label)
                busy = ok[ok["busy"] == True] if column == "median_ms" and "busy" in ok else ok.iloc[:0]  # noqa: E712
                if not busy.empty:
                    busy_seen = True
                    ax.scatter(
                        busy["seq_len"],
                        busy[column] * scale,
                        marker="o",
                        s=70,
                        facecolors="none",
                        edgecolors="red",
                        linewidths=1.2,
                        zorder=6,
                    )
                bad = rows[rows["status"].isin(["oom", "timeout"])]
                if not bad.empty:
                    failed_seen = True
                    ax.scatter(
                        bad["seq_len"],
                        np.full(len(bad), 0.96),
                        marker="x",
                        s=60,
                        color=colors[label],
                        transform=top,
                        clip_on=False,
                        zorder=5,
                    )
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            if part["status"].isin(["oom", "timeout"]).any():  # head-room: x markers at the top sit above lines
                bottom, top_y = ax.get_ylim()
                ax.set_ylim(bottom, top_y * (top_y / bottom) ** 0.25)
            ax.set_xlabel("sequence length (tokens)")
            ax.set_ylabel(ylabel)
            dims = ", ".join(f"{k}={v:g}" for k, v in (("B", batch), ("H", heads), ("d", head_dim)) if pd.notna(v))
            ax.set_title(f"{mode} pass" + (f" ({dims})" if dims else ""), fontsize="medium")
            ax.grid(True, which="both", alpha=0.3)
        extra = (
            [Line2D([], [], color="black", marker="x", linestyle="none", label="OOM / timeout (top edge)")]
            if failed_seen
            else []
        )
        extra += (
            [
                Line2D(
                    [],
                    [],
                    color="red",
                    marker="o",
                    markerfacecolor="none",
                    linestyle="none",
                    label="timed on a busy machine",
                )
            ]
            if busy_seen
            else []
        )
        title = ("Time" if column == "median_ms" else "Peak memory") + " vs sequence length"
        fig.suptitle(title)
        legend_below(fig, axes, extra)
        plots.append(save_plot(fig, out_dir, name, title))
    return plots


def _pooled_bins(bin_lists: list[list[dict]]) -> pd.DataFrame:
    """Reliability bins pooled over seeds: counts summed, confidence and accuracy count-weighted."""
    rows = pd.DataFrame([b for bins in bin_lists for b in bins])
    if rows.empty:
        return rows
    rows = rows[rows["count"] > 0]
    rows = rows.assign(conf_w=rows["confidence"] * rows["count"], acc_w=rows["accuracy"] * rows["count"])
    g = rows.groupby(["lower", "upper"], as_index=False)[["count", "conf_w", "acc_w"]].sum()
    return g.assign(confidence=g["conf_w"] / g["count"], accuracy=g["acc_w"] / g["count"])


def plot_reliability(results: Results, colors: dict, out_dir: Path) -> list[Plot]:
    """Per task: a grid of reliability diagrams, one panel per label, bins pooled over seeds."""
    cells = results.of("accuracy")
    metrics = metric_frame(results, "accuracy")
    plots = []
    for task, part in cells.groupby("task", sort=True):
        labels = sorted(lab for lab, c in part.groupby("label") if any(d.get("reliability") for d in c["details"]))
        if not labels:
            continue
        ncols = min(3, len(labels))
        nrows = math.ceil(len(labels) / ncols)
        fig = new_figure(3.0 * ncols, 3.0 * nrows)
        axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
        for ax, label in zip(axes, labels):
            bins = _pooled_bins([d.get("reliability") or [] for d in part[part["label"] == label]["details"]])
            ax.plot([0, 1], [0, 1], "--", color="gray", lw=1)
            if not bins.empty:
                ax.bar(
                    (bins["lower"] + bins["upper"]) / 2,
                    bins["accuracy"],
                    width=bins["upper"] - bins["lower"],
                    color=colors[label],
                    edgecolor="black",
                    lw=0.4,
                    alpha=0.85,
                )
            ece = metrics[(metrics["task"] == task) & (metrics["label"] == label) & (metrics["metric"] == "ece")]
            ece_text = f" (ECE {ece['value'].mean():.3f})" if len(ece) else ""
            ax.set_title(f"{label}{ece_text}", fontsize="small")
            ax.set_xlim(0, 1)
            ax.set_ylim(0, 1)
            ax.set_xlabel("confidence")
            ax.set_ylabel("accuracy")
        for ax in axes[len(labels) :]:
            ax.set_visible(False)
        title = f"Reliability diagrams, task {task} (dashed: perfect calibration)"
        fig.suptitle(title)
        plots.append(save_plot(fig, out_dir, f"reliability_{slug(task)}", title))
    return plots


def plot_robustness(results: Results, colors: dict, out_dir: Path) -> list[Plot]:
    """Per task: accuracy vs severity (or feature budget), one panel per perturbation, ± std band over seeds."""
    rows = robustness_rows(results)
    if rows.empty:
        return []
    xlabels = {"label_noise": "training label-noise rate", "feature_budget": "random features M"}
    plots = []
    for task, part in rows.groupby("task", sort=True):
        groups = sorted(part["group"].unique())
        fig = new_figure(3.6 * len(groups) + 1.0, 3.8)
        axes = fig.subplots(1, len(groups), squeeze=False, sharey=True)[0]
        for ax, group in zip(axes, groups):
            for label, lab_rows in part[part["group"] == group].groupby("label", sort=True):
                stats = lab_rows.groupby("level")["accuracy"].agg(["mean", "std"]).reset_index()
                ax.plot(stats["level"], stats["mean"], marker="o", ms=3, color=colors[label], label=label)
                ax.fill_between(
                    stats["level"],
                    stats["mean"] - stats["std"].fillna(0),
                    stats["mean"] + stats["std"].fillna(0),
                    color=colors[label],
                    alpha=0.15,
                    lw=0,
                )
            if group == "feature_budget":
                ax.set_xscale("log", base=2)
            ax.set_title(group, fontsize="medium")
            ax.set_xlabel(xlabels.get(group, "severity (fraction of tokens corrupted)"))
            ax.grid(True, alpha=0.3)
        axes[0].set_ylabel("accuracy")
        title = f"Accuracy vs corruption severity, task {task} (band: ± std over seeds)"
        fig.suptitle(title)
        legend_below(fig, axes)
        plots.append(save_plot(fig, out_dir, f"robustness_{slug(task)}", title))
    return plots


def pareto_front(points: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """Rows not dominated by any other (no other row has both x and y at least as large, one larger)."""
    keep = []
    for i, p in points.iterrows():
        dominated = ((points[x] >= p[x]) & (points[y] >= p[y]) & ((points[x] > p[x]) | (points[y] > p[y]))).any()
        if not dominated:
            keep.append(i)
    return points.loc[keep].sort_values(x)


def plot_accuracy_vs_throughput(
    leaderboard: pd.DataFrame, eff: pd.DataFrame, colors: dict, out_dir: Path
) -> list[Plot]:
    """Mean accuracy over tasks vs forward tokens/s at one common length; Pareto front marked."""
    if eff.empty or leaderboard.empty:
        return []
    fwd = eff[(eff["status"] == "ok") & (eff["mode"] == "forward") & eff["tokens_per_s"].notna()]
    labels = sorted(set(fwd["label"]) & set(leaderboard.loc[leaderboard["accuracy_mean"].notna(), "label"]))
    if not labels:
        return []
    fwd = fwd[fwd["label"].isin(labels)]
    common = [n for n, g in fwd.groupby("seq_len") if set(g["label"]) == set(labels)]
    length = max(common) if common else fwd["seq_len"].max()
    at = fwd[fwd["seq_len"] == length].groupby("label")["tokens_per_s"].mean()
    acc = leaderboard.set_index("label")["accuracy_mean"]
    points = pd.DataFrame({"label": at.index, "throughput": at.values, "accuracy": acc.reindex(at.index).values})
    front = pareto_front(points, "throughput", "accuracy")
    fig = new_figure(6.5, 4.2)
    ax = fig.subplots()
    for r in points.itertuples():
        ax.scatter(r.throughput, r.accuracy, color=colors[r.label], s=40, label=r.label, zorder=3)
    ax.plot(front["throughput"], front["accuracy"], "-", color="black", lw=1, zorder=2)
    ax.scatter(
        front["throughput"],
        front["accuracy"],
        s=140,
        facecolors="none",
        edgecolors="black",
        zorder=4,
        label="Pareto front",
    )
    ax.set_xscale("log")
    ax.set_xlabel(f"forward throughput at length {int(length)} (tokens/s)")
    ax.set_ylabel("mean accuracy over tasks")
    ax.grid(True, which="both", alpha=0.3)
    title = "Accuracy vs throughput (Pareto front circled)"
    ax.set_title(title)
    legend_below(fig, ax)
    return [save_plot(fig, out_dir, "accuracy_vs_throughput", title)]


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


def plot_coulomb(results: Results, colors: dict, out_dir: Path) -> list[Plot]:
    """Per (task, label) with phase A: H and the objective's alignment on the training batches over steps (with
    the table's validation alignment before and after marked), drift against noise, pairwise distances."""
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


def plot_kernel_experiment(results: Results, out_dir: Path) -> list[Plot]:
    """Figures 1 and 2 of the synthetic experiment (mean ± 1 sd over trials against σ) and the runtime sweep."""
    plots = []
    accuracy, f1 = kernel_table(results), kernel_f1_table(results)
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
    ablation = kernel_ablation_table(results)
    if ablation is not None:
        fig = new_figure(7.0, 4.6)
        ax = fig.subplots()
        _kernel_bands(ax, ablation.data, "accuracy", label_colors(ablation.data["method"]))
        ax.set_ylabel("test accuracy")
        title = "Synthetic experiment (Figure 2): λ ablation of the Langevin particles (band: ± 1 sd)"
        ax.set_title(title, fontsize="medium")
        legend_below(fig, ax)
        plots.append(save_plot(fig, out_dir, "kernel_ablation", title))
    scaling = kernel_scaling_table(results)
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


def all_plots(results: Results, leaderboard: pd.DataFrame, eff: pd.DataFrame, out_dir: Path) -> list[Plot]:
    """Every plot the results support, coloured by one label palette, written as PNG and SVG."""
    colors = label_colors(results.labels())
    return [
        *plot_efficiency(eff, colors, out_dir),
        *plot_accuracy_vs_throughput(leaderboard, eff, colors, out_dir),
        *plot_reliability(results, colors, out_dir),
        *plot_robustness(results, colors, out_dir),
        *plot_coulomb(results, colors, out_dir),
        *plot_kernel_experiment(results, out_dir),
    ]
