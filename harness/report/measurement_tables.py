"""Tables of the non-accuracy measurements: robustness, efficiency (with ratios against softmax),
kernel fidelity and Coulomb phase-A diagnostics (the synthetic experiment: `kernel_tables`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from attnbench.report.load import Results, detail_rows, metric_frame
from attnbench.report.stats import metric_direction, summarize
from attnbench.report.table import DASH, Table, best_mask, finite, fmt, fmt_summary, group_keys

MIB = 2.0**20


def robustness_rows(results: Results) -> pd.DataFrame:
    """Robustness rows that finished, with 'group' (corruption kind, label_noise, feature_budget) and 'level'
    (the severity, or the number of features for feature_budget)."""
    rows = detail_rows(results, "robustness")
    if rows.empty:
        return rows
    for col in ("status", "corruption", "severity", "num_features", "ece"):
        if col not in rows:
            rows[col] = None
    rows = rows[rows["status"].fillna("ok") == "ok"].copy()
    rows["group"] = [
        c if k == "corruption" and isinstance(c, str) else k for k, c in zip(rows["kind"], rows["corruption"])
    ]
    budget = rows["kind"] == "feature_budget"
    rows["level"] = pd.to_numeric(rows["severity"].where(~budget, rows["num_features"]), errors="coerce")
    rows["accuracy"] = pd.to_numeric(rows["accuracy"], errors="coerce")
    rows["ece"] = pd.to_numeric(rows["ece"], errors="coerce")
    return rows.dropna(subset=["level"])


def _auc_metric(group: str) -> str:
    return "label_noise_auc" if group == "label_noise" else f"robustness_auc_{group}"


def _level_table(
    results: Results, rows: pd.DataFrame, name: str, title: str, prefix: str, notes: list[str], with_auc: bool
) -> Table:
    """Wide table: one row per (task, label, perturbation), accuracy and ECE per level (mean ± std over seeds)."""
    metrics = metric_frame(results, "robustness")
    levels = sorted(rows["level"].unique())
    data, text_rows, numeric = [], [], []
    measures: dict[str, str] = {}  # each numeric column's registered metric, whose direction ranks it
    for (task, label, group), part in rows.groupby(["task", "label", "group"], sort=True):
        text = {"task": task, "label": label, "perturbation": group}
        num = {}
        summary = {}
        if with_auc:
            for column, metric in (("AUC", _auc_metric(group)), ("overall AUC", "robustness_auc")):
                summary[column] = summarize(
                    metrics[(metrics["task"] == task) & (metrics["label"] == label) & (metrics["metric"] == metric)][
                        "value"
                    ]
                )
                text[column], num[column] = fmt_summary(summary[column]), summary[column]["mean"]
                measures[column] = metric
        for level in levels:
            at = part[part["level"] == level]
            acc, ece = summarize(at["accuracy"]), summarize(at["ece"])
            if acc["n"] or ece["n"]:
                data.append(
                    {
                        "task": task,
                        "label": label,
                        "perturbation": group,
                        "level": level,
                        "accuracy_mean": acc["mean"],
                        "accuracy_std": acc["std"],
                        "accuracy_n": acc["n"],
                        "ece_mean": ece["mean"],
                        "ece_std": ece["std"],
                        **{f"{c.replace(' ', '_').lower()}_mean": v["mean"] for c, v in summary.items()},
                    }
                )
            key = f"{prefix}{level:g}"
            text[f"acc@{key}"], text[f"ece@{key}"] = fmt_summary(acc), fmt_summary(ece)
            num[f"acc@{key}"], num[f"ece@{key}"] = acc["mean"], ece["mean"]
            measures[f"acc@{key}"], measures[f"ece@{key}"] = "accuracy", "ece"
        text_rows.append(text)
        numeric.append(num)
    text, numeric = pd.DataFrame(text_rows), pd.DataFrame(numeric)
    directions = {c: metric_direction(measures[c]) for c in numeric}
    groups = group_keys(text, ["task", "perturbation"])
    best = best_mask(numeric, directions, groups).reindex(columns=text.columns, fill_value=False)
    return Table(name, title, pd.DataFrame(data), text, best, notes, key_columns=3)


def robustness_tables(results: Results) -> list[Table]:
    """Accuracy and ECE per corruption severity / label-noise rate with AUCs; and per feature budget."""
    rows = robustness_rows(results)
    if rows.empty:
        return []
    tables = []
    severity = rows[rows["kind"] != "feature_budget"]
    if not severity.empty:
        tables.append(
            _level_table(
                results,
                severity,
                "robustness",
                "Robustness to corruption and label noise",
                "",
                [
                    "acc@s / ece@s: accuracy and ECE at severity (or training label-noise rate) s, mean ± std over seeds. "
                    "AUC: area under accuracy vs severity for this perturbation, over max severity x clean accuracy "
                    "(1 = no loss); overall AUC: the measurement's one-number summary (robustness_auc). "
                    "Bold: best per task and perturbation."
                ],
                with_auc=True,
            )
        )
    budget = rows[rows["kind"] == "feature_budget"]
    if not budget.empty:
        tables.append(
            _level_table(
                results,
                budget,
                "robustness_feature_budget",
                "Accuracy by feature budget (retrained)",
                "M=",
                [
                    "acc@M=m / ece@M=m: accuracy and ECE when the model is retrained with m random features, mean ± std "
                    "over seeds. Bold: best per task."
                ],
                with_auc=False,
            )
        )
    return tables


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
    """Time, tokens/s, peak memory by sequence length; ratios against softmax of the same run."""
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
    directions = {
        "time ms (q25–q75)": "min",
        "tokens/s": "max",
        "peak MiB": "min",
        "speed × softmax": "max",
        "memory × softmax": "min",
    }
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
        "rank or place on the Pareto front. Bold: best per run, mode and shape."
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
    the median over pairs of the other's time / this one's."""
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
    keys = ["run", "label", "paired_label", "mode", "seq_len", "batch", "heads", "head_dim"]
    data = (
        rows.groupby(keys, sort=True)[
            ["median_ms", "paired_median_ms", "paired_ratio", "paired_ratio_q25", "paired_ratio_q75"]
        ]
        .mean()
        .reset_index()
    )
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
            }
            for r in data.itertuples()
        ]
    )
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    notes = [
        "Each pair of calls ran back to back, A B then B A, so a slow spell of the machine slows both. "
        "paired / this: the median over pairs of the paired attention's time / this one's (> 1: this one is "
        "faster), with its quartiles; the times are the medians of each attention's calls in those pairs. "
        "Mean over seeds."
    ]
    return Table("paired_timing", "Paired timing", data, text, best, notes, key_columns=6 if many_runs else 5)


def fidelity_table(results: Results) -> Table | None:
    """Relative error of each approximation against exact softmax attention."""
    rows = detail_rows(results, "fidelity")
    if rows.empty:
        return None
    keys = ["task", "label", "inputs", "seq_len", "num_features"]
    for k in keys:
        if k not in rows:
            rows[k] = np.nan
    data, text_rows = [], []
    for k in ("uniform_rel_error", "from_uniform"):  # absent from runs made before they were recorded
        if k not in rows:
            rows[k] = np.nan
    collapsed = 0.1
    for key, part in rows.groupby(keys, dropna=False, sort=True):
        rel, mx = summarize(part["rel_error"]), summarize(part.get("max_abs_error", pd.Series(dtype=float)))
        uniform, away = summarize(part["uniform_rel_error"]), summarize(part["from_uniform"])
        rec = dict(zip(keys, key)) | {
            "rel_error_mean": rel["mean"],
            "rel_error_std": rel["std"],
            "rel_error_n": rel["n"],
            "max_abs_error_mean": mx["mean"],
            "uniform_rel_error_mean": uniform["mean"],
            "from_uniform_mean": away["mean"],
        }
        data.append(rec)
        near = finite(away["mean"]) and away["mean"] < collapsed
        text_rows.append(
            {
                "task": rec["task"],
                "label": rec["label"],
                "inputs": str(rec["inputs"]),
                "seq_len": fmt(rec["seq_len"], 0),
                "features": fmt(rec["num_features"], 0),
                "relative error": fmt_summary(rel),
                "max abs error": fmt(mx["mean"]),
                "uniform's error": fmt(uniform["mean"]),
                "from uniform": fmt(away["mean"]) + (" (≈ uniform)" if near else ""),
            }
        )
    data = pd.DataFrame(data)
    text = pd.DataFrame(text_rows)
    groups = group_keys(data, ["task", "inputs", "seq_len", "num_features"])
    near = data["from_uniform_mean"] < collapsed  # NaN (not recorded) compares False
    numeric = pd.DataFrame(
        {"relative error": data["rel_error_mean"].mask(near), "max abs error": data["max_abs_error_mean"].mask(near)}
    )
    best = best_mask(numeric, {"relative error": "min", "max abs error": "min"}, groups)
    best = best.reindex(columns=text.columns, fill_value=False)
    notes = [
        "Relative error ||A - E|| / ||E|| of the attention output A against exact softmax attention E (mean ± "
        "std over seeds). Bold: smallest per task, input kind, length and feature count among the estimates "
        "not ≈ uniform. uniform's error: "
        "||U - E|| / ||E|| of uniform attention U (every output the mean of the values) on the same inputs, "
        "what an approximation must beat to carry the kernel. from uniform: ||A - U|| / ||E - U||; "
        f"(≈ uniform) below {collapsed}: A is nearly the mean of the values, so its error is about uniform's "
        "and reflects the inputs' near-uniform exact weights, not the kernel (as when a floor such as an eps "
        "added to every feature swamps the features, or when the features are too diffuse)."
    ]
    return Table("fidelity", "Kernel fidelity against exact softmax attention", data, text, best, notes, key_columns=5)


COULOMB_ALIGNMENTS = {"within-class": "within-class", "centered-kta": "centred KTA", "input-kernel": "eq. 2.2"}
COULOMB_WALK = {
    "drift": "drift",
    "noise": "noise",
    "drift_noise_ratio": "drift / noise",
    "norm_before_projection": "norm before P",
    "norm_after_projection": "norm after P",
}


def _phase_a_record(pa: dict) -> dict[str, float]:
    """The numbers of one cell's phase A the Coulomb table shows (NaN where an older result lacks them)."""
    walk, measured = pa.get("walk") or {}, pa.get("validation_alignment") or {}
    record = {key: walk.get(key, np.nan) for key in COULOMB_WALK}
    for kind in COULOMB_ALIGNMENTS:
        for when in ("before", "after"):
            record[f"{kind} {when}"] = (measured.get(kind) or {}).get(when, np.nan)
    record.update(
        {
            "relative_move": pa.get("relative_move", np.nan),
            "phase_a_seconds": pa.get("seconds"),
            "steps": pa.get("steps"),
        }
    )
    return {k: float(v) if finite(v) else np.nan for k, v in record.items()}


def coulomb_table(results: Results) -> Table | None:
    """Phase-A diagnostics of learned-kernel cells: whether the particles drift or walk, and the validation
    alignments before and after (the same three the phase-A plot marks)."""
    recs = []
    for _, c in results.of("accuracy").iterrows():
        pa = c["details"].get("phase_a")
        if isinstance(pa, dict):
            recs.append(
                {
                    "task": c["task"],
                    "label": c["label"],
                    "seed": c["seed"],
                    "objective": pa.get("objective", pa.get("alignment_kind", DASH)),
                    "probe": pa.get("probe_split", "train"),
                    **_phase_a_record(pa),
                }
            )
    if not recs:
        return None
    frame = pd.DataFrame(recs)
    numbers = [c for c in frame.columns if c not in ("task", "label", "seed", "objective", "probe")]
    data, text_rows, numeric = [], [], []
    for (task, label), part in frame.groupby(["task", "label"], sort=True):
        stats = {c: summarize(pd.to_numeric(part[c], errors="coerce")) for c in numbers}
        ratio = stats["drift_noise_ratio"]["mean"]
        verdict = (
            DASH if not finite(ratio) else "drift below noise: a random walk" if ratio < 1 else "drift above noise"
        )
        data.append(
            {
                "task": task,
                "label": label,
                "seeds": len(part),
                "objective": part["objective"].iloc[0],
                **{f"{c}_{k}": stats[c][k] for c in numbers for k in ("mean", "std")},
            }
        )
        row = {
            "task": task,
            "label": label,
            "seeds": str(len(part)),
            "objective": str(part["objective"].iloc[0]),
            **{title: fmt_summary(stats[key]) for key, title in COULOMB_WALK.items()},
            "walk?": verdict,
        }
        for kind, title in COULOMB_ALIGNMENTS.items():
            row[f"{title} ({part['probe'].iloc[0]})"] = (
                f"{fmt_summary(stats[kind + ' before'])} → {fmt_summary(stats[kind + ' after'])}"
            )
        row |= {
            "relative move": fmt_summary(stats["relative_move"]),
            "phase A s": fmt_summary(stats["phase_a_seconds"]),
            "steps": fmt(stats["steps"]["mean"], 0),
        }
        text_rows.append(row)
        numeric.append({"drift / noise": ratio})
    text = pd.DataFrame(text_rows)
    best = best_mask(pd.DataFrame(numeric), {"drift / noise": "max"}, text["task"])
    best = best.reindex(columns=text.columns, fill_value=False)
    walks = [f"{r['label']} on {r['task']}" for r in text_rows if r["walk?"].startswith("drift below")]
    notes = [
        "Per phase-A step and particle: drift |eta N grad H| and Langevin noise |sqrt(2 eta / beta) xi| (medians "
        "over particles, then over steps, layers and heads), their ratio, and the mean particle norm before and "
        "after the projection P onto the norm cap. Alignments before → after phase A on held-out rows (the "
        "split in the header): within-class (eq. C.4) and centred kernel-target alignment (App. D) of the "
        "mean-pooled attention outputs, and the eq. 2.2 u-statistic of the feature-map kernel on the pooled "
        "inputs; the phase-A plot marks the objective's one (column 'objective') beside its training-batch curve. Relative move: |Omega_after - Omega_before| / "
        "|Omega_before|. Mean ± std over seeds; bold: largest drift / noise per task."
    ]
    if walks:
        notes.append(
            "Drift below noise (a random walk: the alignment term barely moves the particles, the noise and "
            "the projection do): " + "; ".join(walks) + "."
        )
    return Table("coulomb", "Coulomb phase A diagnostics", pd.DataFrame(data), text, best, notes, key_columns=2)
