"""The efficiency section: time, tokens/s and peak memory by sequence length with ratios against softmax of the
same run, the paired timings with the engine's timing verdicts, the plots of time and memory against length, and
a summary sentence naming the points refused as not measured (quality against cost: `attnbench.report.quality_cost`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.transforms import blended_transform_factory

from attnbench.decisions.signs import timing_verdicts
from attnbench.predictions import decode_outcomes
from attnbench.report import inference
from attnbench.report.load import Results, detail_rows
from attnbench.report.plot import Plot, legend_below, new_figure, save_plot
from attnbench.report.sections import ReportContext, register_report_section
from attnbench.report.table import DASH, Table, best_mask, finite, fmt, group_keys

MIB = 2.0**20


def _softmax_reference(eff: pd.DataFrame) -> dict[str, str]:
    """Per run: the label used as softmax reference (label 'softmax', else first softmax-attention label)."""
    out = {}
    for run, part in eff.groupby("run"):
        candidates = sorted(set(part.loc[part["attention"] == "softmax", "label"]))
        preferred = [c for c in candidates if c.split(" [")[0] == "softmax"]
        if preferred or candidates:
            out[run] = (preferred or candidates)[0]
    return out


NOT_MEASURED = "not_measured"


def _refuse_unchecked_busy(rows: pd.DataFrame) -> pd.DataFrame:
    """Points timed before the starvation check existed and flagged busy: not measured, as the check would
    have refused them (their times read slower than the code is, and by how much no one can say)."""
    checked = rows["starvation_checked"].map(lambda v: v is True)
    legacy = (rows["status"] == "ok") & rows["busy"].map(lambda v: v is True) & ~checked
    rows = rows.copy()
    rows.loc[legacy, "status"] = NOT_MEASURED
    rows.loc[legacy, "reason"] = [
        "not measured: timed on a busy machine (" + busy_text(r).removeprefix("busy: ") + ") by a run that did not "
        "yet refuse starved timings"
        for r in rows[legacy].assign(status="ok").itertuples()
    ]
    return rows


def not_measured_points(eff: pd.DataFrame) -> list[str]:
    """'label mode@N' of every efficiency point refused as not measured."""
    if eff.empty:
        return []
    part = eff[eff["status"] == NOT_MEASURED]
    return [f"{r.label} {r.mode}@{int(r.seq_len)}" for r in part.itertuples()]


# an efficiency point's numbers, averaged over the seeds of its ok rows
AVERAGED_COLUMNS = (
    "median_ms",
    "q25_ms",
    "q75_ms",
    "min_ms",
    "rounds",
    "tokens_per_s",
    "peak_mem_bytes",
    "roofline_fraction",
    "gflops_per_s",
    "roofline_ms",
    "others_cores",
    "cpu_availability",
    "load_1m",
)


def efficiency_frame(results: Results) -> pd.DataFrame:
    """Efficiency rows averaged over seeds, with speed/memory ratios against softmax in the same run."""
    rows = detail_rows(results, "efficiency")
    if rows.empty:
        return rows
    for col in (*AVERAGED_COLUMNS, "batch", "heads", "head_dim", "reason", "mode", "busy", "starvation_checked"):
        if col not in rows:
            rows[col] = np.nan
    rows = _refuse_unchecked_busy(rows)
    rows["mode"] = ["forward" if not isinstance(m, str) else m for m in rows["mode"]]
    keys = ["run", "label", "attention", "mode", "seq_len", "batch", "heads", "head_dim"]
    keys += ["dtype"] if "dtype" in rows and rows["dtype"].nunique() > 1 else []
    out = []
    for key, part in rows.groupby(keys, dropna=False, sort=True):
        ok = part[part["status"] == "ok"]
        bad = part[part["status"] != "ok"]
        rec = dict(zip(keys, key))
        rec["status"] = "ok" if bad.empty else str(bad["status"].iloc[0])
        reasons = [str(r) for r in bad["reason"] if isinstance(r, str)]
        rec["reason"] = reasons[0] if reasons else None
        for col in AVERAGED_COLUMNS:
            rec[col] = float(pd.to_numeric(ok[col], errors="coerce").mean()) if not ok.empty else np.nan
        rec["busy"] = bool((ok["busy"] == True).any())  # noqa: E712 - True, not merely present, in any seed's row
        rec["repeats_seeds"] = len(ok)
        out.append(rec)
    eff = pd.DataFrame(out)
    eff["peak_mem_mib"] = eff["peak_mem_bytes"] / MIB
    refs = _softmax_reference(eff)
    shape = ["run", "mode", "seq_len", "batch", "heads", "head_dim"] + (["dtype"] if "dtype" in keys else [])
    eff["speed_vs_softmax"], eff["memory_vs_softmax"] = np.nan, np.nan
    for idx, row in eff.iterrows():
        ref_label = refs.get(row["run"])
        ref = eff[(eff["label"] == ref_label) & (eff["status"] == "ok")]
        for col in shape:
            ref = ref[(ref[col] == row[col]) | (ref[col].isna() & pd.isna(row[col]))]
        if row["status"] == "ok" and len(ref) == 1:
            eff.at[idx, "speed_vs_softmax"] = ref["median_ms"].iloc[0] / row["median_ms"]
            eff.at[idx, "memory_vs_softmax"] = row["peak_mem_bytes"] / ref["peak_mem_bytes"].iloc[0]
    eff["softmax_reference"] = eff["run"].map(refs)
    return eff


def efficiency_table(results: Results) -> Table | None:
    """Time, tokens/s, peak memory by sequence length; ratios against softmax of the same run.
    Long: one table's columns in the order they are shown (time, tokens/s, memory, ratios against softmax, busy
    marks)."""
    eff = efficiency_frame(results)
    if eff.empty:
        return None
    eff = eff.sort_values(["run", "mode", "seq_len", "label"]).reset_index(drop=True)
    many_runs = eff["run"].nunique() > 1
    text_rows = []
    for r in eff.itertuples():
        ok = r.status == "ok"
        text = ({"run": r.run} if many_runs else {}) | {
            "label": r.label,
            "mode": r.mode,
            "seq_len": fmt(r.seq_len, 0),
            "B×H×d": "×".join(fmt(v, 0) for v in (r.batch, r.heads, r.head_dim))
            + (f" {r.dtype}" if "dtype" in eff else ""),
            "time ms (q25–q75)": (
                f"{fmt(r.median_ms)} ({fmt(r.q25_ms)}–{fmt(r.q75_ms)})" + (BUSY_MARK if r.busy else "")
                if ok
                else r.status.replace("_", " ").upper()
            ),
            "tokens/s": fmt(r.tokens_per_s, 0),
            "peak MiB": fmt(r.peak_mem_mib),
            "speed × softmax": fmt(r.speed_vs_softmax, 2),
            "memory × softmax": fmt(r.memory_vs_softmax, 2),
        }
        if eff["roofline_fraction"].notna().any():
            text |= {
                "GFLOP/s": fmt(r.gflops_per_s, 1),
                "bound ms": fmt(r.roofline_ms),
                "roofline fraction": fmt(r.roofline_fraction, 3),
            }
        if eff["busy"].any():
            text["machine"] = busy_text(r)
        text["status"] = (
            r.status if ok or not r.reason else r.reason if r.status == NOT_MEASURED else f"{r.status}: {r.reason}"
        )
        text_rows.append(text)
    text = pd.DataFrame(text_rows)
    numeric = pd.DataFrame(
        {
            "time ms (q25–q75)": eff["median_ms"],
            "tokens/s": eff["tokens_per_s"],
            "peak MiB": eff["peak_mem_mib"],
            "speed × softmax": eff["speed_vs_softmax"],
            "memory × softmax": eff["memory_vs_softmax"],
        }
    )
    directions = {"peak MiB": "min", "memory × softmax": "min"}  # times: only through the timing check
    groups = group_keys(eff, ["run", "mode", "seq_len", "batch", "heads", "head_dim"])
    best = best_mask(numeric, directions, groups).reindex(columns=text.columns, fill_value=False)
    refs = ", ".join(f"{run}: {lab}" for run, lab in sorted(_softmax_reference(eff).items()))
    rounds = pd.to_numeric(eff["rounds"], errors="coerce").max()
    pooled = (
        f", pooled from {rounds:.0f} interleaved passes over each cell's shapes"
        if finite(rounds) and rounds > 1
        else ""
    )
    notes = [
        f"Time: median (q25–q75) of the calls{pooled}; mean over seeds. speed × softmax = softmax time / time "
        "(> 1 is faster); memory × softmax = peak memory / softmax peak memory (< 1 is smaller); both "
        f"against softmax measured in the same run, same shape (reference: {refs or 'none in run'}). "
        "GFLOP/s: counted FLOPs / time; bound ms: the roofline bound, max(FLOPs / matmul rate, bytes / copy "
        "bandwidth), from the machine probed around the point; roofline fraction = bound / time. "
        "OOM / TIMEOUT: the point did not fit (a result, not a crash). NOT MEASURED: the timed threads were "
        "kept off the cores (a busy machine; attnbench.timing.time_unstarved), so the point has no time, ratio, "
        "rank or place on the quality-against-cost plots. Bold: the smallest peak memory per run, mode and shape "
        "(memory is counted, not timed); times are not bolded: the paired timing check is their verdict."
    ]
    if eff["busy"].any():
        notes.append(
            f"{BUSY_MARK.strip()}: measured on a busy machine (attnbench.timing.busy_machine): while it was "
            "timed other processes kept cores busy (machine: their average cores, a spinning thread's share "
            "of a core, the load average), so its time reads slower than the code is; rerun it on a quiet "
            "machine before reading a comparison from it."
        )
    return Table(
        "efficiency", "Efficiency by sequence length", eff, text, best, notes, key_columns=5 if many_runs else 4
    )


BUSY_MARK = " †"


def busy_text(row: Any) -> str:
    """The machine's load around an efficiency point, e.g. 'busy: others 1.2 cores, core share 0.45, load 4.1'."""
    if row.status != "ok" or not finite(row.others_cores):
        return ""
    parts = [f"others {row.others_cores:.2f} cores"]
    parts += [f"core share {row.cpu_availability:.2f}"] if finite(row.cpu_availability) else []
    parts += [f"load {row.load_1m:.1f}"] if finite(row.load_1m) else []
    return ("busy: " if row.busy else "quiet: ") + ", ".join(parts)


def paired_table(results: Results) -> Table | None:
    """Attentions timed call by call in alternation with another (efficiency option `paired`): both times and
    the median over pairs of the other's time / this one's.
    Long: the stored pairs' columns made numeric (older runs lack some), pooled per shape, then the table's
    columns and its one note on how the pairs were timed and judged."""
    rows = detail_rows(results, "efficiency")
    if rows.empty or "paired_label" not in rows or rows["paired_label"].isna().all():
        return None
    for col in ("busy", "starvation_checked", "others_cores", "cpu_availability", "load_1m", "reason"):
        if col not in rows:
            rows[col] = np.nan
    rows = _refuse_unchecked_busy(rows)
    rows = rows[rows["paired_label"].notna() & (rows["status"] == "ok")].copy()  # not measured: no ratio
    if rows.empty:
        return None
    for col in ("paired_ratio", "paired_ratio_q25", "paired_ratio_q75", "paired_median_ms", "median_ms"):
        rows[col] = pd.to_numeric(rows[col] if col in rows else np.nan, errors="coerce")
    for col in ("paired_pairs", "paired_faster", "paired_slower"):
        rows[col] = pd.to_numeric(rows[col] if col in rows else np.nan, errors="coerce")
    if "paired_ratios" not in rows:
        rows["paired_ratios"] = None
    keys = ["run", "label", "paired_label", "mode", "seq_len", "batch", "heads", "head_dim"]
    grouped = rows.groupby(keys, sort=True)
    data = grouped[["median_ms", "paired_median_ms", "paired_ratio", "paired_ratio_q25", "paired_ratio_q75"]].mean()
    data = data.join(
        grouped.agg(
            checked=("paired_pairs", lambda x: bool(x.notna().all())),
            pairs=("paired_pairs", "sum"),
            faster=("paired_faster", "sum"),
            slower=("paired_slower", "sum"),
            ratios=("paired_ratios", _pooled_ratios),
        )
    ).reset_index()
    data["verdict"] = _timing_verdicts(data, results)
    many_runs = data["run"].nunique() > 1
    text = pd.DataFrame(
        [
            ({"run": r.run} if many_runs else {})
            | {
                "label": r.label,
                "paired with": r.paired_label,
                "mode": r.mode,
                "seq_len": fmt(r.seq_len, 0),
                "B×H×d": "×".join(fmt(v, 0) for v in (r.batch, r.heads, r.head_dim)),
                "time ms": fmt(r.median_ms),
                "paired ms": fmt(r.paired_median_ms),
                "paired / this (q25–q75)": (
                    f"{fmt(r.paired_ratio, 2)} ({fmt(r.paired_ratio_q25, 2)}–{fmt(r.paired_ratio_q75, 2)})"
                    if finite(r.paired_ratio)
                    else DASH
                ),
                "verdict": TIMING_WORDS.get(r.verdict, DASH)
                + (f" ({int(r.faster)}/{int(r.pairs)})" if r.checked else ""),
            }
            for r in data.itertuples()
        ]
    )
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    notes = [
        "Each pair of calls ran back to back, A B then B A, so a slow spell of the machine slows both. "
        "paired / this: the median over pairs of the paired attention's time / this one's (> 1: this one is "
        "faster), with its quartiles; the times are the medians of each attention's calls in those pairs. "
        "Mean over seeds. verdict: the inference engine's sign tests on the pairs (attnbench.decisions.signs): "
        "faster / slower where the two-sided sign test separates them after Holm's correction over the table, "
        f"≈ where two one-sided sign tests put the median ratio within 1 ± {TIMING_MARGIN:g}, else undecided "
        "(pairs where this one was faster / pairs); a dash: the run stored no pair counts (before they were "
        "recorded). Consecutive pairs share the machine's state: a check on the direction, not a precise p."
    ]
    return Table("paired_timing", "Paired timing", data, text, best, notes, key_columns=6 if many_runs else 5)


TIMING_MARGIN = 0.1  # a time ratio within 1 +- 10%: the same (the paired-ratio metrics' declared margin)
TIMING_WORDS = {"ahead": "faster", "behind": "slower", "equivalent": "≈", "undecided": "undecided"}


def _pooled_ratios(stored: pd.Series) -> np.ndarray | None:
    """Every seed's pair ratios of one point (stored encoded), or None where a seed stored none."""
    if not all(isinstance(r, dict) for r in stored):
        return None
    return np.concatenate([decode_outcomes(r) for r in stored])


def _timing_verdicts(data: pd.DataFrame, results: Results) -> list[str | None]:
    """The engine's timing verdict of each checked row of the paired table (None where no counts were stored),
    corrected over the table's checked rows."""
    out: list[str | None] = [None] * len(data)
    checked = data.index[data["checked"]]
    if len(checked):
        settings = inference.run_settings(results)
        found = timing_verdicts(data.loc[checked, "faster"], data.loc[checked, "slower"],
                                list(data.loc[checked, "ratios"]), TIMING_MARGIN, alpha=inference.ALPHA,
                                correction=settings.correction)  # fmt: skip
        for i, verdict in zip(checked, found["verdict"]):
            out[i] = str(verdict)
    return out


def plot_efficiency(eff: pd.DataFrame, colors: Mapping[str, Any], out_dir: Path) -> list[Plot]:
    """Time and peak memory vs sequence length (log-log), one line per label; OOM/timeout as x at the top; points
    timed on a busy machine (column `busy`) ringed in red.
    Long: one figure's panels and their marks (a line per label, OOM and time-out crosses, busy rings), drawn in
    order."""
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


def efficiency_plots(context: ReportContext, out_dir: Path) -> list[Plot]:
    """Time and memory against length (quality against cost is the section `quality_cost`'s)."""
    return plot_efficiency(efficiency_frame(context.results), context.colors, out_dir)


def efficiency_summary(context: ReportContext) -> list[str]:
    """A sentence naming the points refused as not measured, if any."""
    refused = not_measured_points(efficiency_frame(context.results))
    if not refused:
        return []
    return [
        f"Efficiency: {len(refused)} point(s) not measured (timed threads kept off the cores by other "
        f"work), left out of every ratio, verdict and quality-against-cost plot: {', '.join(refused)}."
    ]


register_report_section(
    "efficiency",
    order=50,
    plot_order=5,  # the time and memory plots lead the plots, after quality against cost
    tables=lambda results: [efficiency_table(results), paired_table(results)],
    plots=efficiency_plots,
    summary=efficiency_summary,
    measurements=("efficiency",),
)
