"""The Coulomb model's report sections, registered through the seam any plugin uses
(`attnbench.report.sections`): phase A (its diagnostics, the attention bracket, what it does to the
representation, and a plot per row) and the synthetic experiment (measurement `kernel`, Appendix F.1: the noise
sweep of Figure 1, the smallest-sigma comparison with the paper's read-offs, the lambda ablation of Figure 2 and
the runtime-scaling sweep with fitted exponents beside Table 6). Everything comes from stored cells."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from attnbench.baselines.coulomb.plots import plot_coulomb, plot_kernel_experiment
from attnbench.decisions.settings import ComparisonSettings
from attnbench.report import inference
from attnbench.report.attention_bracket import attention_bracket_table
from attnbench.report.load import Results, detail_rows
from attnbench.report.sections import register_report_section
from attnbench.report.stats import summarize
from attnbench.report.table import DASH, Table, finite, fmt, fmt_summary


def kernel_rows(results: Results, part: str) -> pd.DataFrame:
    """The stored rows of one part ('noise', 'ablation', 'scaling') with numeric columns; empty if none."""
    rows = detail_rows(results, "kernel")
    if rows.empty or "part" not in rows:
        return pd.DataFrame()
    rows = rows[rows["part"] == part].copy()
    for column in ("sigma", "accuracy", "f1", "seconds", "n"):
        if column in rows:
            rows[column] = pd.to_numeric(rows[column], errors="coerce")
    return rows


def paper_figures(results: Results) -> dict[str, dict[str, float]]:
    """The paper's read-offs stored with the cells: {'smallest_sigma_accuracy': ..., 'scaling_exponents': ...}."""
    for _, cell in results.of("kernel").iterrows():
        if cell["details"].get("paper"):
            return cell["details"]["paper"]
    return {}


def bayes_accuracy(results: Results) -> float:
    """The stored expected test accuracy of the Bayes rule at sigma -> 0 (nan if absent)."""
    values = [cell["details"].get("bayes_accuracy") for _, cell in results.of("kernel").iterrows()]
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else math.nan


def mean_sd(values: pd.Series) -> dict[str, float]:
    """summarize() of the values: mean, sd, n (the tables show mean ± sd over trials, as the paper's bands do)."""
    return summarize(values)


def mean_sd_text(s: dict[str, float]) -> str:
    """'mean ± sd' (sd only for n >= 2; no interval), a dash when empty."""
    if s["n"] == 0 or not np.isfinite(s["mean"]):
        return DASH
    return fmt(s["mean"]) + (f" ± {fmt(s['std'])}" if s["n"] >= 2 else "")


def _sweep_table(rows: pd.DataFrame, metric: str, name: str, title: str, note: str) -> Table:
    """Method x sigma grid of one metric, mean ± sd over trials (and seeds); bold: the engine's best set per sigma."""
    sigmas = sorted(rows["sigma"].unique())
    order = list(dict.fromkeys(rows["method"]))
    data, text_rows = [], []
    for method in order:
        part = rows[rows["method"] == method]
        text = {"method": method}
        for sigma in sigmas:
            s = mean_sd(part.loc[part["sigma"] == sigma, metric])
            column = f"σ={sigma:.0e}"
            text[column] = mean_sd_text(s)
            data.append(
                {
                    "method": method,
                    "sigma": sigma,
                    f"{metric}_mean": s["mean"],
                    f"{metric}_std": s["std"],
                    f"{metric}_n": s["n"],
                    "seconds_mean": part.loc[part["sigma"] == sigma, "seconds"].mean(),
                }
            )
        text["seconds (mean)"] = fmt(part["seconds"].mean())
        text_rows.append(text)
    text = pd.DataFrame(text_rows)
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    for sigma in sigmas:
        best[f"σ={sigma:.0e}"] = trial_top_group(rows[rows["sigma"] == sigma], metric, order)
    return Table(name, title, pd.DataFrame(data), text, best, [note], key_columns=1)


def trial_top_group(rows: pd.DataFrame, metric: str, order: list[str]) -> list[bool]:
    """Bold per method of `order`: the inference engine's best set on `metric` (higher is better, within [0, 1]),
    methods paired by trial (each trial draws one data set for every method, so the trials are the replicates);
    none where every method is in it, or with one trial."""
    keyed = rows.assign(seed=rows["seed"] * 100_000 + rows["trial"] if "seed" in rows else rows["trial"])
    values = pd.DataFrame(
        {
            "task": "kernel",
            "label": keyed["method"],
            "seed": keyed["seed"],
            "metric": "accuracy",
            "value": keyed[metric],
        }
    )  # 'accuracy': the record of a 'max' metric in [0, 1]
    return inference.frame_standings(values.dropna(subset=["value"]), "accuracy").marks(order)


TRIAL_BOLD = (
    "Bold: the best set per σ (inference engine: the methods no other method is detectably better than, methods "
    "paired by trial, each trial one data draw, Holm's correction over the σ's pairs), where it leaves some method "
    "out. A trial is the replicate: repeated fits on one data draw are not independent evidence."
)


def kernel_table(results: Results) -> Table | None:
    """Figure 1 as a table: test accuracy per method and noise level sigma."""
    rows = kernel_rows(results, "noise")
    if rows.empty:
        return None
    return _sweep_table(
        rows,
        "accuracy",
        "kernel_experiment",
        "Synthetic experiment (Figure 1): test accuracy by σ",
        "Mean ± sd over trials; D = 200 features for every random-feature method; linear SVM heads. "
        "The CSV also holds seconds; kernel_f1 the F1. " + TRIAL_BOLD,
    )


def kernel_f1_table(results: Results) -> Table | None:
    """Figure 1's F1 panel as a table."""
    rows = kernel_rows(results, "noise")
    if rows.empty:
        return None
    return _sweep_table(
        rows,
        "f1",
        "kernel_f1",
        "Synthetic experiment: test F1 (binary) by σ",
        "Mean ± sd over trials. " + TRIAL_BOLD,
    )


def kernel_paper_table(results: Results) -> Table | None:
    """Ours at the smallest sigma beside the paper's Figure 1 read-offs (approximate, read off a plot).
    Long: one table's columns in the order they are shown."""
    rows = kernel_rows(results, "noise")
    if rows.empty:
        return None
    paper = paper_figures(results).get("smallest_sigma_accuracy", {})
    low = rows[rows["sigma"] == rows["sigma"].min()]
    data, text_rows = [], []
    for method in dict.fromkeys(low["method"]):
        acc, f1 = mean_sd(low.loc[low["method"] == method, "accuracy"]), mean_sd(low.loc[low["method"] == method, "f1"])
        ref = paper.get(method, math.nan)
        data.append(
            {
                "method": method,
                "sigma": low["sigma"].min(),
                "accuracy_mean": acc["mean"],
                "accuracy_std": acc["std"],
                "n": acc["n"],
                "f1_mean": f1["mean"],
                "paper_accuracy": ref,
                "difference": acc["mean"] - ref,
            }
        )
        text_rows.append(
            {
                "method": method,
                "accuracy (ours)": mean_sd_text(acc),
                "F1 (ours)": mean_sd_text(f1),
                "paper (Figure 1)": fmt(ref),
                "ours − paper": fmt(acc["mean"] - ref),
            }
        )
    best = pd.DataFrame({"accuracy (ours)": trial_top_group(low, "accuracy", [d["method"] for d in data])})
    bayes = bayes_accuracy(results)
    if math.isfinite(bayes):
        text_rows.append(
            {
                "method": "Bayes rule 1{l(x) > 0} (expected)",
                "accuracy (ours)": fmt(bayes),
                "F1 (ours)": DASH,
                "paper (Figure 1)": DASH,
                "ours − paper": DASH,
            }
        )
        best = pd.concat([best, pd.DataFrame([{"accuracy (ours)": False}])], ignore_index=True)
    text = pd.DataFrame(text_rows)
    best = best.reindex(columns=text.columns, fill_value=False)
    sigma = low["sigma"].min()
    notes = [
        f"σ = {sigma:.0e}, mean ± sd over {int(data[0]['n'])} trials. The paper's values are read off its Figure 1 "
        "(approximate); its Langevin curve is Alg-1 (λ = 0.5). A dash: the paper gives no read-off. "
        "Last row: the Bayes rule's expected accuracy on these test rows, mean max(p, 1 − p) with "
        "p = sigmoid(l(x)); with y ~ Bernoulli(p) no method beats it in expectation."
    ]
    return Table(
        "kernel_paper",
        "Synthetic experiment at the smallest σ: ours beside the paper's read-offs",
        pd.DataFrame(data),
        text,
        best,
        notes,
        key_columns=1,
    )


def kernel_ablation_table(results: Results) -> Table | None:
    """Figure 2 as a table: Langevin test accuracy per lambda and sigma."""
    rows = kernel_rows(results, "ablation")
    if rows.empty:
        return None
    rows = rows.assign(order=rows["method"].str.extract(r"=([-\d.e+]+)$")[0].astype(float)).sort_values(
        ["order", "trial"], kind="stable"
    )
    return _sweep_table(
        rows,
        "accuracy",
        "kernel_ablation",
        "Synthetic experiment (Figure 2): λ ablation, test accuracy by σ",
        "Langevin particles only, repulsion weight λ; mean ± sd over the ablation's trials. " + TRIAL_BOLD,
    )


def _exponent_text(fit: dict[str, Any] | None) -> str:
    if not fit or not np.isfinite(fit.get("exponent", math.nan)):
        return DASH
    return f"{fit['exponent']:.2f} (R² {fit['r2']:.2f}, {fit['points']} sizes)"


def kernel_scaling_table(results: Results) -> Table | None:
    """Table 5/6: wall seconds per method and n, our fitted exponent and the paper's."""
    rows = kernel_rows(results, "scaling")
    if rows.empty:
        return None
    fits: dict[str, Any] = {}
    for _, cell in results.of("kernel").iterrows():
        fits.update(cell["details"].get("scaling_fits") or {})
    paper = paper_figures(results).get("scaling_exponents", {})
    sizes = sorted(rows["n"].unique())
    data, text_rows, reasons = [], [], []
    for method in dict.fromkeys(rows["method"]):
        part = rows[rows["method"] == method]
        text = {"method": method}
        for n in sizes:
            at = part[part["n"] == n]
            ok = at[at["status"] == "ok"] if "status" in at else at
            text[f"n={int(n):,}"] = DASH if at.empty else fmt(ok["seconds"].mean()) if not ok.empty else "skipped"
            if ok.empty and "reason" in at and not at.empty:
                reasons.append(f"{method}: {at['reason'].iloc[0]}")
            data.append({"method": method, "n": n, "seconds": ok["seconds"].mean() if not ok.empty else math.nan})
        fit = fits.get(method)
        text["γ (ours)"] = _exponent_text(fit)
        text["γ (paper, Table 6)"] = fmt(paper.get(method, math.nan), 2)
        text_rows.append(text)
        for d in data[-len(sizes) :]:
            d.update(exponent=(fit or {}).get("exponent", math.nan), paper_exponent=paper.get(method, math.nan))
    text = pd.DataFrame(text_rows)
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    notes = [
        "Wall seconds of one fit + predict (trial 0, smallest σ) against n; γ from least squares of "
        "log t on log n over the sizes that ran. The paper fits n = 100 to 20,000 on its own machine; "
        "its Langevin took 21.6 s at n = 100 and 922 s at n = 20,000.",
        *dict.fromkeys(reasons),
    ]
    return Table(
        "kernel_scaling",
        "Synthetic experiment: runtime scaling t ~ n^γ (Tables 5, 6)",
        pd.DataFrame(data),
        text,
        best,
        notes,
        key_columns=1,
    )


LANGEVIN_DIAGNOSTICS = {
    "drift_to_noise": "drift / noise",
    "drift_median": "drift",
    "noise_norm": "noise",
    "clipped_share": "clipped",
    "on_cap_share": "on |ω| cap",
    "alignment_before": "A before",
    "alignment_after": "A after",
    "alignment_kept": "A kept (D)",
}


def kernel_langevin_table(results: Results) -> Table | None:
    """What the Langevin dynamics did, per method (lambda) over every noise-sweep run: drift against noise, alignment."""
    rows = kernel_rows(results, "noise")
    if rows.empty or "drift_to_noise" not in rows:
        return None
    rows = rows[rows["method"].str.startswith("langevin")]
    data, text_rows, walks = [], [], []
    for method in dict.fromkeys(rows["method"]):
        part = rows[rows["method"] == method]
        medians = {k: float(pd.to_numeric(part[k], errors="coerce").median()) for k in LANGEVIN_DIAGNOSTICS}
        data.append({"method": method, "runs": len(part), **medians})
        text_rows.append(
            {
                "method": method,
                "runs": str(len(part)),
                **{label: fmt(medians[k]) for k, label in LANGEVIN_DIAGNOSTICS.items()},
            }
        )
        if medians["drift_to_noise"] < 1:
            walks.append(method)
    text = pd.DataFrame(text_rows)
    notes = [
        "Medians over the noise sweep's runs (every σ and trial). drift: eta |clipped N grad_k H| per particle "
        "and step (median over particles, then steps); noise: sqrt(2 eta / beta) sqrt(p + 1), the typical "
        "length of the Langevin kick; clipped: share of drifts cut to grad_clip; on |ω| cap: share of final "
        "frequencies on the norm cap; A: the u-statistic alignment of the N particles' kernel before and after "
        "the dynamics, and of the D kept by Gibbs resampling."
    ]
    if walks:
        notes.append(
            f"Drift below noise for {', '.join(walks)}: the particles' motion is dominated by the "
            "Langevin noise (a random walk under the cap), not by the alignment."
        )
    return Table(
        "kernel_langevin",
        "Synthetic experiment: what the Langevin dynamics did",
        pd.DataFrame(data),
        text,
        pd.DataFrame(False, index=text.index, columns=text.columns),
        notes,
        key_columns=1,
    )


MECHANISM = {
    "within-class": ("validation_alignment", "within-class"),
    "centred KTA": ("validation_alignment", "centered-kta"),
    "linear probe": ("representation", "probe_accuracy"),
    "pooled norm": ("representation", "pooled_norm"),
    "class separation": ("representation", "class_separation"),
}
SETTINGS = ("objective", "force", "beta", "step", "after_epochs")


def _mechanism_record(pa: dict[str, Any]) -> dict[str, float]:
    record = {}
    for title, (group, key) in MECHANISM.items():
        measured = (pa.get(group) or {}).get(key) or {}
        for when in ("before", "after"):
            value = measured.get(when)
            record[f"{title} {when}"] = float(value) if isinstance(value, (int, float)) else math.nan
    record["relative move"] = float(pa.get("relative_move", math.nan))
    record["drift / noise"] = float((pa.get("walk") or {}).get("drift_noise_ratio", math.nan))
    return record


def phase_a_mechanism_table(results: Results) -> Table | None:
    """Per learned-kernel row: its phase-A settings and what phase A did to held-out pooled attention outputs.
    Long: one table's columns in the order they are shown."""
    recs = []
    for _, cell in results.of("accuracy").iterrows():
        pa = (cell["details"] or {}).get("phase_a")
        if not isinstance(pa, dict):
            continue
        record = _mechanism_record(pa)
        if not any(math.isfinite(v) for v in record.values()):
            continue  # another learning phase (e.g. Hedgehog's distillation) records none of these
        config = pa.get("config") or {}
        recs.append(
            {"task": cell["task"], "label": cell["label"], **{k: str(config.get(k, DASH)) for k in SETTINGS}, **record}
        )
    if not recs:
        return None
    frame = pd.DataFrame(recs)
    numbers = [c for c in frame.columns if c not in ("task", "label", *SETTINGS)]
    data, text_rows = [], []
    for (task, label), part in frame.groupby(["task", "label"], sort=True):
        stats = {c: mean_sd(pd.to_numeric(part[c], errors="coerce")) for c in numbers}
        settings = {k: part[k].iloc[0] for k in SETTINGS}
        data.append(
            {
                "task": task,
                "label": label,
                "seeds": len(part),
                **settings,
                **{f"{c}_{k}": stats[c][k] for c in numbers for k in ("mean", "std")},
            }
        )
        row = {
            "task": task,
            "label": label,
            "seeds": str(len(part)),
            "settings": ", ".join(f"{k} {v}" for k, v in settings.items()),
        }
        for title in MECHANISM:
            row[title] = f"{mean_sd_text(stats[title + ' before'])} → {mean_sd_text(stats[title + ' after'])}"
        row |= {
            "relative move": mean_sd_text(stats["relative move"]),
            "drift / noise": mean_sd_text(stats["drift / noise"]),
        }
        text_rows.append(row)
    text = pd.DataFrame(text_rows)
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    notes = [
        "Before → after phase A, on held-out rows (mean ± sd over seeds), per row of the suite: the within-class "
        "alignment (eq. C.4) and centred KTA (App. D) of the mean-pooled attention outputs, a logistic-regression "
        "probe on them (fitted on training rows), their mean norm and the distance between the class means "
        "(averages over layers). Relative move: |Omega_after - Omega_before| / |Omega_before|. A rising "
        "within-class alignment with a flat probe and a growing norm is alignment by the shared part of the "
        "outputs, not by class separation."
    ]
    return Table(
        "phase_a_mechanism",
        "Phase A: what it does to the representation, per setting",
        pd.DataFrame(data),
        text,
        best,
        notes,
        key_columns=2,
    )


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


WALK_MARGIN = 0.1  # a drift / noise ratio within 1 +- 0.1: as large as the noise
WALK_WORDS = {
    "behind": "drift below noise: a random walk",
    "ahead": "drift above noise",
    "equivalent": "drift as large as the noise",
    "undecided": "undecided",
}


def walk_verdicts(frame: pd.DataFrame, settings: ComparisonSettings) -> dict[tuple[str, str], str]:
    """Per (task, label) of the phase-A records (columns task, label, seed, drift_noise_ratio): the ratio against 1,
    as the inference engine judges a label against a known value, in words (WALK_WORDS)."""
    values = pd.DataFrame(
        {
            "task": frame["task"],
            "label": frame["label"],
            "seed": frame["seed"],
            "metric": "drift_noise_ratio",
            "value": pd.to_numeric(frame["drift_noise_ratio"], errors="coerce"),
        }  # fmt: skip
    ).dropna(subset=["value"])
    if values.empty:
        return {}
    found = inference.against_value(
        values, "drift_noise_ratio", 1.0, settings, margin=WALK_MARGIN, higher_is_better=True
    )
    return {(r.task, r.label): WALK_WORDS[r.verdict] for r in found.itertuples()}


def coulomb_table(results: Results) -> Table | None:
    """Phase-A diagnostics of learned-kernel cells: whether the particles drift or walk, and the validation
    alignments before and after (the same three the phase-A plot marks).
    Long: one table's columns in the order they are shown."""
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
    walks = walk_verdicts(frame, inference.run_settings(results))
    data, text_rows = [], []
    for (task, label), part in frame.groupby(["task", "label"], sort=True):
        stats = {c: summarize(pd.to_numeric(part[c], errors="coerce")) for c in numbers}
        verdict = walks.get((task, label), DASH)
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
    text = pd.DataFrame(text_rows)
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    below = [f"{r['label']} on {r['task']}" for r in text_rows if r["walk?"] == WALK_WORDS["behind"]]
    notes = [
        "Per phase-A step and particle: drift |eta N grad H| and Langevin noise |sqrt(2 eta / beta) xi| (medians "
        "over particles, then over steps, layers and heads), their ratio, and the mean particle norm before and "
        "after the projection P onto the norm cap. Alignments before → after phase A on held-out rows (the "
        "split in the header): within-class (eq. C.4) and centred kernel-target alignment (App. D) of the "
        "mean-pooled attention outputs, and the eq. 2.2 u-statistic of the feature-map kernel on the pooled "
        "inputs; the phase-A plot marks the objective's one (column 'objective') beside its training-batch curve. Relative move: |Omega_after - Omega_before| / "
        "|Omega_before|. Mean ± std over seeds. walk?: the drift / noise ratio against 1 (inference engine: "
        f"below, above, equivalent within ±{WALK_MARGIN}, or undecided; Holm's correction over the task's labels)."
    ]
    if below:
        notes.append(
            "Drift below noise (a random walk: the alignment term barely moves the particles, the noise and "
            "the projection do): " + "; ".join(below) + "."
        )
    return Table("coulomb", "Coulomb phase A diagnostics", pd.DataFrame(data), text, best, notes, key_columns=2)


def phase_a_tables(results: Results) -> list[Table | None]:
    """The phase-A study: the diagnostics per row, the attention bracket, what phase A does to the representation."""
    return [coulomb_table(results), attention_bracket_table(results), phase_a_mechanism_table(results)]


def kernel_tables(results: Results) -> list[Table | None]:
    """The synthetic experiment: ours beside the paper, Figure 1 (accuracy, F1), the Langevin dynamics, Figure 2,
    the runtime scaling."""
    return [
        kernel_paper_table(results),
        kernel_table(results),
        kernel_f1_table(results),
        kernel_langevin_table(results),
        kernel_ablation_table(results),
        kernel_scaling_table(results),
    ]


register_report_section("coulomb-phase-a", order=70, tables=phase_a_tables, plots=plot_coulomb)
register_report_section(
    "kernel-experiment", order=75, tables=kernel_tables, plots=plot_kernel_experiment, measurements=("kernel",)
)
